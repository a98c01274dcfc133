//! pg_rendezvous: coordinate a fleet of hosts through the PostgreSQL database they already use.
//!
//! One module per concept. Every SQL object lives in the `rendezvous` schema: the control
//! file's `schema` makes CREATE EXTENSION create it and put pgrx's generated functions there
//! (pgrx cannot qualify them without also emitting a conflicting CREATE SCHEMA). Hand-written
//! SQL lives in a `.sql` file beside its module (`admission.rs` loads `admission.sql`), all of
//! it schema-qualified. Upgrade scripts make every function, view and grant again from these
//! sources (`sqlgen`); only table and type changes are written by hand, in `sql/migrations/`.
use pgrx::prelude::*;

mod admission;
mod c_function;
mod call_cache;
mod checks;
mod errors;
mod fencing;
mod firing;
mod holder;
mod hrw;
mod kept_plan;
mod leader;
mod membership;
mod retention;
mod runs;
mod schedule;
mod status;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("schema.sql", name = "schema_comment", bootstrap);
extension_sql_file!("privileges.sql", name = "privileges", finalize);

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
