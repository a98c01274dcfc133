//! Membership: the live host set, on the database clock.
//!
//! Hosts call `rendezvous.heartbeat(host_id)` every few seconds; a host is live while its last
//! heartbeat, stamped with the server's `clock_timestamp()`, is within the staleness window.
//! Hosts' own clocks never enter: a host whose clock is hours off is judged by the server's.
//! The set has a version (`membership.sql`), so a reader that keeps its view reads the set
//! again only when it changed.
use pgrx::pg_sys::FunctionCallInfo;
use pgrx::prelude::*;
use rendezvous_hrw::HostSet;

use crate::errors::{ensure_memory, invalid_argument};
use crate::ffi::call_cache::cached_for_statement;
use crate::hrw::{check_k, require_key};

extension_sql_file!("membership.sql", name = "membership", requires = ["checks"]);

/// The live hosts with their weights (default staleness), read when this call site first runs
/// in a statement: `SELECT rendezvous.winner(key) FROM a_million_keys` reads the set once, not
/// once a row, and every row sees the same set.
fn live_set<'a>(fcinfo: FunctionCallInfo) -> &'a HostSet {
    // SAFETY: `fcinfo` is this call's, and every call site of the two functions below keeps a
    // HostSet.
    unsafe { cached_for_statement(fcinfo, read_live_set) }
}

fn read_live_set() -> HostSet {
    let members = Spi::connect(|client| {
        let rows = client.select("SELECT m.host_id, m.weight FROM rendezvous.live_members() m", None, &[])?;
        ensure_memory(rows.len() * 128, "the live host set");
        let mut members = Vec::with_capacity(rows.len());
        for row in rows {
            // Both columns are NOT NULL in rendezvous.hosts.
            members.push((row.get::<String>(1)?.unwrap_or_default(), row.get::<f64>(2)?.unwrap_or(1.0)));
        }
        Ok::<_, pgrx::spi::Error>(members)
    })
    .unwrap_or_else(|e| invalid_argument(format!("could not read the live hosts: {e}")));
    // The table's checks keep every weight positive and finite.
    HostSet::weighted(members).unwrap_or_else(|e| invalid_argument(e.to_string()))
}

/// The weighted winner for `key` among the live hosts (default staleness); NULL when none is
/// live.
#[pg_extern(volatile, name = "winner")]
fn winner_live(key: Option<&str>, fcinfo: FunctionCallInfo) -> Option<String> {
    let key = require_key(key);
    live_set(fcinfo).winner(key).map(str::to_owned)
}

/// The live hosts in descending weighted score order for `key` (default staleness), all or the
/// first `k`.
#[pg_extern(volatile, name = "ranked")]
fn ranked_live(key: Option<&str>, k: Option<i32>, fcinfo: FunctionCallInfo) -> Vec<String> {
    let key = require_key(key);
    let k = check_k(k);
    live_set(fcinfo).ranked(key, k).into_iter().map(str::to_owned).collect()
}

extension_sql!(
    r#"
COMMENT ON FUNCTION rendezvous.winner(text) IS
    'The weighted winner for key among the live hosts (default staleness), the set read once a statement.';
COMMENT ON FUNCTION rendezvous.ranked(text, integer) IS
    'The live hosts in descending weighted score order for key (default staleness), the set read once a statement.';
"#,
    name = "membership_live_comments",
    requires = [winner_live, ranked_live]
);
