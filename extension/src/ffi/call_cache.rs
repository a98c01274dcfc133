//! A per-call-site cache in `fn_extra`, keyed by the raw bytes of some arguments.
//!
//! `SELECT rendezvous.winner(task_key, $hosts) FROM tasks` passes the same host array on every
//! row; re-reading and re-hashing it per row is most of the cost. Like PostgreSQL's own
//! regex and array functions, we keep what we built from those arguments in the function's
//! `fn_extra` (memory of `fn_mcxt`, freed with the query) and reuse it while the argument
//! bytes are unchanged, so a row costs one key hash plus a cheap mix per host.
use pgrx::pg_sys;
use pgrx::PgMemoryContexts;

use crate::ffi::c_function::{arg, varlena_bytes};

/// What one call site keeps: the argument bytes it was built from, and the built value.
struct Entry<T> {
    key: Vec<Option<Vec<u8>>>,
    value: T,
}

/// The bytes of varlena argument `index` (detoasted), or `None` for SQL NULL.
///
/// # Safety
/// `fcinfo` is the current call's, and argument `index` exists and is a varlena type.
unsafe fn arg_bytes<'a>(fcinfo: pg_sys::FunctionCallInfo, index: usize) -> Option<&'a [u8]> {
    // SAFETY: `fcinfo` is the current call's and argument `index` a varlena one (this function's
    // contract).
    unsafe { arg(fcinfo, index).map(|d| varlena_bytes(d)) }
}

/// The size of varlena argument `index` once detoasted, without detoasting it; `None` for NULL.
///
/// # Safety
/// `fcinfo` is the current call's, and argument `index` exists and is a varlena type.
pub(crate) unsafe fn arg_raw_size(fcinfo: pg_sys::FunctionCallInfo, index: usize) -> Option<usize> {
    // SAFETY: as for `arg_bytes`: argument `index` of the current call is a varlena value; its size
    // is read from its header.
    unsafe { arg(fcinfo, index).map(|d| pg_sys::toast_raw_datum_size(d)) }
}

/// The value built by `build` from the varlena arguments at `indexes`, reused while those
/// arguments' bytes are the same as on the previous call at this call site.
///
/// # Safety
/// `fcinfo` is the current call's; every index names a varlena argument; every call through
/// the same function uses the same `T` (each SQL function passes its own fixed type).
pub(crate) unsafe fn cached<'a, T: 'static>(
    fcinfo: pg_sys::FunctionCallInfo,
    indexes: &[usize],
    build: impl FnOnce() -> T,
) -> &'a T {
    // SAFETY: the indexes name varlena arguments of the current call (this function's contract).
    unsafe {
        let current: Vec<Option<&[u8]>> = indexes.iter().map(|&i| arg_bytes(fcinfo, i)).collect();
        cached_by(fcinfo, &current, build)
    }
}

/// The value built by `build`, reused by later calls at this call site within the same
/// statement (a statement that starts later builds it again: PL/pgSQL keeps a call site for a
/// whole transaction).
///
/// # Safety
/// As for `cached`.
pub(crate) unsafe fn cached_for_statement<'a, T: 'static>(
    fcinfo: pg_sys::FunctionCallInfo,
    build: impl FnOnce() -> T,
) -> &'a T {
    // SAFETY: `fcinfo` is the current call's, inside a transaction with a current statement.
    unsafe {
        let statement = pg_sys::GetCurrentStatementStartTimestamp().to_le_bytes();
        cached_by(fcinfo, &[Some(&statement[..])], build)
    }
}

/// The cached value while `current` equals the key it was built for; otherwise `build`'s.
///
/// # Safety
/// As for `cached`.
unsafe fn cached_by<'a, T: 'static>(
    fcinfo: pg_sys::FunctionCallInfo,
    current: &[Option<&[u8]>],
    build: impl FnOnce() -> T,
) -> &'a T {
    // SAFETY: `fcinfo` is the current call's, so `flinfo` is its call site's; `fn_extra` is null or
    // an `Entry<T>` this function put there in `fn_mcxt` (every call through this site uses the
    // same `T`), which lives as long as the call site.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        let entry = (*flinfo).fn_extra as *mut Entry<T>;
        if !entry.is_null() {
            let same = (*entry).key.iter().map(|k| k.as_deref()).eq(current.iter().copied());
            if same {
                return &(*entry).value;
            }
        }
        // Build before touching the cache: if `build` raises an ERROR, the old entry stays valid.
        let value = build();
        let key = current.iter().map(|b| b.map(<[u8]>::to_vec)).collect();
        if entry.is_null() {
            let fresh =
                PgMemoryContexts::For((*flinfo).fn_mcxt).leak_and_drop_on_delete(Entry { key, value });
            (*flinfo).fn_extra = fresh.cast();
            &(*fresh).value
        } else {
            *entry = Entry { key, value };
            &(*entry).value
        }
    }
}
