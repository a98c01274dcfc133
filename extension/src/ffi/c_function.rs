//! Plain C-language functions written by hand, for the hot paths where pgrx's wrapper and
//! set-returning results cost too much (`spawn_run`, `firing_key`, `claim_firing`,
//! `complete_firing`): reading arguments as datums, returning one composite value, and the
//! version-1 info record PostgreSQL looks up for each.
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::raise;

/// Argument `index` of the call as a datum, `None` for SQL NULL, and for an argument the
/// function's declaration does not have (an older version's, with fewer arguments).
///
/// # Safety
/// `fcinfo` is the current call's.
pub(crate) unsafe fn arg(fcinfo: pg_sys::FunctionCallInfo, index: usize) -> Option<pg_sys::Datum> {
    // SAFETY: `fcinfo` is the current call's (this function's contract), so `args` has `nargs`
    // initialised entries.
    unsafe {
        let a = (*fcinfo).args.as_slice((*fcinfo).nargs as usize).get(index)?;
        (!a.isnull).then_some(a.value)
    }
}

/// The bytes of a varlena value (`text`, an array, …), detoasted when it must be, in the
/// current memory context.
///
/// # Safety
/// `datum` is a varlena value that outlives the returned slice's use.
pub(crate) unsafe fn varlena_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    // SAFETY: `datum` is a varlena value (this function's contract); detoasting copies it into the
    // current memory context when it must, and the slice covers exactly its data bytes.
    unsafe {
        let text = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
        let len = pgrx::varlena::varsize_any_exhdr(text);
        std::slice::from_raw_parts(pgrx::varlena::vardata_any(text) as *const u8, len)
    }
}

/// One value of the function's declared composite result type, formed in the current
/// memory context from by-value `values` (`None` for NULL).
///
/// # Safety
/// `fcinfo` is the current call's; the function is declared to return a composite type whose
/// columns match `values` in number and type.
pub(crate) unsafe fn composite(
    fcinfo: pg_sys::FunctionCallInfo,
    values: &[Option<pg_sys::Datum>],
) -> pg_sys::Datum {
    // SAFETY: `fcinfo` is the current call's; the result type is checked to be a composite with as
    // many columns as `values` before the tuple is formed, from arrays that outlive the call.
    unsafe {
        let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
        if pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc)
            != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE
            || (*tupdesc).natts as usize != values.len()
        {
            raise(
                PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                "function is not declared with its composite result type",
            );
        }
        let mut datums: Vec<pg_sys::Datum> =
            values.iter().map(|v| v.unwrap_or(pg_sys::Datum::from(0))).collect();
        let mut nulls: Vec<bool> = values.iter().map(Option::is_none).collect();
        let tuple =
            pg_sys::heap_form_tuple(pg_sys::BlessTupleDesc(tupdesc), datums.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// `PG_FUNCTION_INFO_V1`: declares the version-1 calling convention of a C function by
/// defining `pg_finfo_<its symbol>`, the name PostgreSQL looks up beside it.
macro_rules! v1_info {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const V1: ::pgrx::pg_sys::Pg_finfo_record = ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}
pub(crate) use v1_info;
