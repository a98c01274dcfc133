//! Argument checks shared by the SQL functions of every module: one place for each rule and
//! its message, raising 22004 for NULL and 22023 for a bad value.
use pgrx::pg_sys;
use pgrx::prelude::*;

use std::ffi::CStr;

use crate::errors::raise;

extension_sql_file!("checks.sql", name = "checks", requires = [max_id_bytes]);

/// The most bytes an id may have (host ids, task ids, tenant ids, group names, candidates): the
/// one definition. SQL reads it as `rendezvous._max_id_bytes()` (argument checks and table
/// constraints), Rust uses it directly, and a test checks the client's copy against it.
pub(crate) const MAX_ID_BYTES: i32 = 256;

#[pg_extern(immutable, parallel_safe, name = "_max_id_bytes")]
fn max_id_bytes() -> i32 {
    MAX_ID_BYTES
}

/// `_check_text` for a C function's argument: nothing when it passes; when it does not (NULL,
/// empty, longer than `max_bytes` bytes as `octet_length` counts, read without detoasting),
/// `_check_text` itself raises, so the message and SQLSTATE are the SQL helpers'.
///
/// # Safety
/// `datum`, when present, is a `text` value.
pub(crate) unsafe fn check_text_datum(name: &CStr, datum: Option<pg_sys::Datum>, max_bytes: i32) {
    let ok = datum.is_some_and(|d| {
        // SAFETY: `d` is a text datum (this function's contract); only its header is read, never
        // detoasted.
        let bytes = unsafe { pg_sys::toast_raw_datum_size(d) } - pg_sys::VARHDRSZ;
        bytes > 0 && bytes <= max_bytes as usize
    });
    if !ok {
        // SAFETY: `name` is a NUL-terminated C string; the text is made in the current memory
        // context.
        let name = unsafe { pg_sys::cstring_to_text(name.as_ptr()) };
        // SAFETY: the datums are the name text, the argument's text (or None) and an int4, as
        // `_check_text` declares.
        unsafe {
            raise_sql_check(
                c"SELECT rendezvous._check_text($1, $2, $3)",
                &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::INT4OID],
                &[Some(pg_sys::Datum::from(name)), datum, Some(max_bytes.into())],
            )
        }
    }
}

/// Whether the `interval` datum `d` is finite and compares with zero as `cmp` says
/// (PostgreSQL's own `interval_gt`, `interval_ge`: no re-derived interval ordering in Rust).
///
/// # Safety
/// `d` is an `interval` datum.
pub(crate) unsafe fn finite_interval_vs_zero(
    d: pg_sys::Datum,
    cmp: unsafe fn(pg_sys::FunctionCallInfo) -> pg_sys::Datum,
) -> bool {
    let zero_interval = pg_sys::Interval { time: 0, day: 0, month: 0 };
    let zero = pg_sys::Datum::from(&zero_interval as *const pg_sys::Interval);
    // SAFETY: `d` is an interval datum (this function's contract) and `zero` points to an Interval
    // that outlives both direct calls.
    unsafe {
        let compared = pgrx::direct_function_call::<bool>(cmp, &[Some(d), Some(zero)]);
        let finite = pgrx::direct_function_call::<bool>(pg_sys::interval_finite, &[Some(d)]);
        compared == Some(true) && finite == Some(true)
    }
}

/// Raises the error of the SQL check `sql` (a `SELECT` of one of the `_check_*` helpers, every
/// name qualified) for arguments a C function found invalid: one place for each rule's message.
///
/// # Safety
/// Each argument datum is of the matching type in `types`.
pub(crate) unsafe fn raise_sql_check(sql: &CStr, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>]) -> ! {
    // SAFETY: each datum is of its type in `types` (this function's contract).
    let args = unsafe { crate::ffi::kept_plan::spi_args(args, types) };
    // The check raises its own error (SPI is finished as the error unwinds).
    let _ = Spi::connect(|client| client.select(sql, None, &args).map(|_| ()));
    raise(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("{} passed arguments the C function refused", sql.to_string_lossy()),
    )
}
