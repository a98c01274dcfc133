//! Argument checks shared by the SQL functions of every module: one place for each rule and
//! its message, raising 22004 for NULL and 22023 for a bad value.
use pgrx::prelude::*;

extension_sql_file!("checks.sql", name = "checks", requires = [max_id_bytes]);

/// The most bytes an id may have (host ids, task ids, tenant ids, group names, candidates): the
/// one definition. SQL reads it as `rendezvous._max_id_bytes()` (argument checks and table
/// constraints), Rust uses it directly, and a test checks the client's copy against it.
pub(crate) const MAX_ID_BYTES: i32 = 256;

#[pg_extern(immutable, parallel_safe, name = "_max_id_bytes")]
fn max_id_bytes() -> i32 {
    MAX_ID_BYTES
}
