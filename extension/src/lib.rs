//! pg_rendezvous: coordinate a fleet of hosts through the PostgreSQL database they already use.
//!
//! One module per concept; the hand C-ABI layer the hot paths use is in `ffi/` (every unsafe
//! block says why it is sound), what older versions' SQL still calls in `compat.rs`. Every SQL
//! object lives in the `rendezvous` schema: the control file's `schema` makes CREATE EXTENSION
//! create it and put pgrx's generated functions there (pgrx cannot qualify them without also
//! emitting a conflicting CREATE SCHEMA). Hand-written
//! SQL lives in a `.sql` file beside its module (`admission.rs` loads `admission.sql`), all of
//! it schema-qualified. Upgrade scripts make every function, view and grant again from these
//! sources (`sqlgen`); only table and type changes are written by hand, in `sql/migrations/`.
//! The portable edition (no library) is that install script with each Rust or C function
//! replaced by its SQL in `extension/portable/` (`sqlgen portable`).
use pgrx::prelude::*;

mod admission;
mod announce;
mod checks;
mod compat;
mod errors;
mod fencing;
mod ffi;
mod firing;
mod holder;
mod hrw;
mod leader;
mod membership;
mod retention;
mod runs;
mod schedule;
mod status;
mod steps;

::pgrx::pg_module_magic!(name, version);

/// Runs once in each backend that loads the library.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    quiet_backtraces();
}

/// An ERROR PostgreSQL raises inside a call the extension makes (a full lock table, a
/// statement timeout, a serialization failure) reaches the client as itself; pgrx would add a
/// Rust backtrace to its DETAIL whenever the server runs with `RUST_BACKTRACE` set. Unless the
/// server sets `RUST_LIB_BACKTRACE` itself (1 brings the backtraces back), errors stay plain.
fn quiet_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // A backend is single-threaded; nothing reads the environment concurrently.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

extension_sql_file!("schema.sql", name = "schema_comment", bootstrap);
extension_sql_file!("edition.sql", name = "edition");
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
