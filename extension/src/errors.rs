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
