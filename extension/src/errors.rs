//! Raising SQL errors with a proper SQLSTATE.
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raises an ERROR with `code`; aborts the statement, never returns.
pub(crate) fn raise(code: PgSqlErrorCode, message: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pg_rendezvous").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// 22004: a required argument is NULL.
pub(crate) fn null_argument(name: &str) -> ! {
    raise(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, format!("{name} must not be NULL"))
}

/// 22023: an argument has an invalid value.
pub(crate) fn invalid_argument(message: impl Into<String>) -> ! {
    raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message)
}

/// Makes sure `bytes` more can be allocated now, or raises 53200 (out of memory).
///
/// A Rust allocation that fails aborts the backend, and PostgreSQL then restarts every session;
/// PostgreSQL's own allocator raises an ERROR instead. So work whose memory grows with its
/// input (host sets, their cached copies, fire-time lists) asks PostgreSQL for that much first,
/// and gives it back: under a memory limit the call fails with an ERROR before Rust allocates.
/// Every input is bounded too (docs/sql.md), so what a call can ask for is bounded.
pub(crate) fn ensure_memory(bytes: usize, what: &str) {
    // SAFETY: with MCXT_ALLOC_NO_OOM, palloc_extended returns NULL instead of raising; what it
    // returned is freed at once, in the context it came from.
    let probe = unsafe {
        pg_sys::palloc_extended(bytes.max(1), (pg_sys::MCXT_ALLOC_HUGE | pg_sys::MCXT_ALLOC_NO_OOM) as i32)
    };
    if probe.is_null() {
        raise(PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, format!("out of memory: {what} needs {bytes} bytes"));
    }
    // SAFETY: `probe` came from palloc_extended above and is freed once.
    unsafe { pg_sys::pfree(probe) };
}
