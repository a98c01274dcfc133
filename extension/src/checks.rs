//! Argument checks shared by the SQL functions of every module: one place for each rule and
//! its message, raising 22004 for NULL and 22023 for a bad value.
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::{invalid_argument, null_argument};

extension_sql_file!("checks.sql", name = "checks", requires = [max_id_bytes]);

/// The most bytes an id may have (host ids, task ids, tenant ids, group names, candidates): the
/// one definition. SQL reads it as `rendezvous._max_id_bytes()` (argument checks and table
/// constraints), Rust uses it directly, and a test checks the client's copy against it.
pub(crate) const MAX_ID_BYTES: i32 = 256;

#[pg_extern(immutable, parallel_safe, name = "_max_id_bytes")]
fn max_id_bytes() -> i32 {
    MAX_ID_BYTES
}

/// `_check_text` for a C function's argument: 22004 for NULL, 22023 for empty or longer than
/// `max_bytes` (its length in bytes, as `octet_length` counts, without detoasting it).
///
/// # Safety
/// `datum`, when present, is a `text` value.
pub(crate) unsafe fn check_text_datum(name: &str, datum: Option<pg_sys::Datum>, max_bytes: usize) {
    let Some(datum) = datum else { null_argument(name) };
    let bytes = unsafe { pg_sys::toast_raw_datum_size(datum) } - pg_sys::VARHDRSZ;
    if bytes == 0 {
        invalid_argument(format!("{name} must not be empty"));
    } else if bytes > max_bytes {
        invalid_argument(format!("{name} is {bytes} bytes long; the limit is {max_bytes}"));
    }
}
