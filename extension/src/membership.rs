//! Membership: the live host set, on the database clock.
//!
//! Hosts call `rendezvous.heartbeat(host_id)` every few seconds; a host is live while its last
//! heartbeat, stamped with the server's `clock_timestamp()`, is within the staleness window.
//! Hosts' own clocks never enter: a host whose clock is hours off is judged by the server's.
use pgrx::prelude::*;

extension_sql_file!(
    "membership.sql",
    name = "membership",
    requires = ["checks", hrw::winner_weighted, hrw::ranked_weighted]
);
