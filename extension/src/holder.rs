//! Who holds a claim: a host id, and the database session that claimed (or last renewed) it.
//!
//! A claim (a firing's or a run's) ends with that session: when it is gone (the process was
//! killed, its backend terminated, its connection lost) another host takes the work over at
//! once, with a higher token, instead of waiting out the lease. A session is named by its
//! backend's pid and start time: a pid alone can be reused by a later backend.
use pgrx::prelude::*;

extension_sql_file!("holder.sql", name = "holder", requires = [session_started, session_role]);

/// When this backend started, as `pg_stat_activity.backend_start` shows it.
#[pg_extern(stable, parallel_safe, name = "_session_started")]
pub(crate) fn session_started() -> TimestampWithTimeZone {
    // SAFETY: set once at backend start, read-only afterwards.
    let started = unsafe { pgrx::pg_sys::MyStartTimestamp };
    TimestampWithTimeZone::try_from(started).expect("a backend's start time is a valid timestamp")
}

/// The role this session logged in as (`session_user`; `SET ROLE` does not change it). A claim
/// is bound to it: only sessions of that role act on the claim, whatever token another role
/// knows or guesses (#39).
#[pg_extern(stable, parallel_safe, name = "_session_role")]
pub(crate) fn session_role() -> pgrx::pg_sys::Oid {
    // SAFETY: set once at authentication (or by a superuser's SET SESSION AUTHORIZATION).
    unsafe { pgrx::pg_sys::GetSessionUserId() }
}

/// Whether `rendezvous.<table>` has `column`: this library serves the SQL of the version
/// installed in each database, and between installing a new library and `ALTER EXTENSION …
/// UPDATE` that is still the old one (0.2.0's tables record no holder session). Catalog
/// caches only, cheap enough for every call.
pub(crate) fn has_column(table: &std::ffi::CStr, column: &std::ffi::CStr) -> bool {
    // SAFETY: syscache lookups by name, inside a transaction (we are called from SQL).
    unsafe {
        let schema = pgrx::pg_sys::get_namespace_oid(c"rendezvous".as_ptr(), true);
        let relation = pgrx::pg_sys::get_relname_relid(table.as_ptr(), schema);
        relation != pgrx::pg_sys::InvalidOid && pgrx::pg_sys::get_attnum(relation, column.as_ptr()) > 0
    }
}
