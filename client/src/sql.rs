//! Every SQL statement the client sends, in one place: the client's side of the SQL contract.
//! An integration test checks each `rendezvous.*` function named here exists in the extension.

/// Installed extension version (no row: not installed).
pub const EXTENSION_VERSION: &str =
    "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_rendezvous'";
/// The server's HRW algorithm name.
pub const HRW_ALGORITHM: &str = "SELECT rendezvous.hrw_algorithm()";
/// Heartbeat: `$1` host id, `$2` weight.
pub const HEARTBEAT: &str = "SELECT rendezvous.heartbeat($1, $2)";
/// Leave: `$1` host id.
pub const LEAVE: &str = "SELECT rendezvous.leave($1)";
/// Live host ids: `$1` staleness in seconds.
pub const LIVE_HOSTS: &str = "SELECT rendezvous.live_hosts(pg_catalog.make_interval(secs => $1::float8))";
/// Live hosts with weights: `$1` staleness in seconds.
pub const LIVE_MEMBERS: &str =
    "SELECT host_id, weight FROM rendezvous.live_members(pg_catalog.make_interval(secs => $1::float8))";
/// Server-side winner over the live set: `$1` key.
pub const WINNER_LIVE: &str = "SELECT rendezvous.winner($1::text)";
/// Server-side winner over given hosts: `$1` key, `$2` hosts.
pub const WINNER: &str = "SELECT rendezvous.winner($1::text, $2::text[])";
/// Server-side ranking over given hosts: `$1` key, `$2` hosts, `$3` k.
pub const RANKED: &str = "SELECT rendezvous.ranked($1::text, $2::text[], $3::int4)";

/// Admission: `$1` tenant, `$2` workflow_ref, `$3` input, `$4` dispatch key.
pub const SPAWN_RUN: &str = "SELECT run_id, created, same_request
       FROM rendezvous.spawn_run($1::text, $2::text, $3::jsonb, $4::text)";
/// `$1` run id, `$2` state.
pub const SET_RUN_STATE: &str = "SELECT rendezvous.set_run_state($1::int8, $2::text)";
/// `$1` age in seconds.
pub const PURGE_RUNS: &str = "SELECT rendezvous.purge_runs(pg_catalog.make_interval(secs => $1::float8))";

/// Claim: `$1` group, `$2` candidate, `$3` wait.
pub const TRY_LEAD: &str =
    "SELECT is_leader, leader, epoch FROM rendezvous.try_lead($1::text, $2::text, $3::bool)";
/// Claim (never waiting) plus the backend pid, to notice a pooler swapping sessions.
pub const TRY_LEAD_CHECKED: &str = "SELECT t.is_leader, t.leader, t.epoch, pg_catalog.pg_backend_pid()
       FROM rendezvous.try_lead($1::text, $2::text) t";
/// Listens for leader locks given back (payload: the group); the extension announces there.
pub const LISTEN_LEADERS: &str = "LISTEN rendezvous_leader";
/// The session's backend pid.
pub const BACKEND_PID: &str = "SELECT pg_catalog.pg_backend_pid()";
/// Resign: `$1` group.
pub const RESIGN: &str = "SELECT rendezvous.resign($1::text)";
/// Current leader: `$1` group.
pub const LEADER: &str = "SELECT leader, epoch, pid FROM rendezvous.leader($1::text)";
/// Fencing check: `$1` group, `$2` epoch.
pub const ASSERT_LEADER: &str = "SELECT rendezvous.assert_leader($1::text, $2::int8)";

/// Claim a firing: `$1` task, `$2` fire_at, `$3` host, `$4` lease in seconds.
pub const CLAIM_FIRING: &str = "SELECT claimed, holder, token, completed, lease_until
       FROM rendezvous.claim_firing($1::text, $2::timestamptz, $3::text, pg_catalog.make_interval(secs => $4::float8))";
/// Claim many: `$1` tasks, `$2` fire_ats, `$3` host, `$4` lease in seconds.
pub const CLAIM_FIRINGS: &str = "SELECT ord, claimed, holder, token, completed, lease_until
       FROM rendezvous.claim_firings($1::text[], $2::timestamptz[], $3::text, pg_catalog.make_interval(secs => $4::float8))";
/// Complete many: `$1` tasks, `$2` fire_ats, `$3` tokens.
pub const COMPLETE_FIRINGS: &str =
    "SELECT ord, completed FROM rendezvous.complete_firings($1::text[], $2::timestamptz[], $3::int8[])";
/// `$1` task, `$2` fire_at, `$3` token.
pub const COMPLETE_FIRING: &str = "SELECT rendezvous.complete_firing($1::text, $2::timestamptz, $3::int8)";
/// `$1` task, `$2` fire_at, `$3` token, `$4` lease in seconds.
pub const RENEW_FIRING: &str = "SELECT rendezvous.renew_firing($1::text, $2::timestamptz, $3::int8, pg_catalog.make_interval(secs => $4::float8))";
/// `$1` task, `$2` fire_at, `$3` token.
pub const RELEASE_FIRING: &str = "SELECT rendezvous.release_firing($1::text, $2::timestamptz, $3::int8)";
/// `$1` task, `$2` fire_at, `$3` token.
pub const ASSERT_FIRING: &str = "SELECT rendezvous.assert_firing($1::text, $2::timestamptz, $3::int8)";
/// Status of many firings at once (a read, not a claim): `$1` tasks, `$2` fire_ats; per input,
/// whether it was ever claimed, whether it is done, and its remaining lease in seconds.
pub const FIRING_STATUS: &str = "SELECT s.claimed, s.completed, extract(epoch FROM s.lease_remaining)::float8
       FROM rendezvous.firing_states($1::text[], $2::timestamptz[]) s ORDER BY s.ord";

/// The `rendezvous.*` functions this client calls, for the contract test.
pub const FUNCTIONS: &[&str] = &[
    "hrw_algorithm",
    "heartbeat",
    "leave",
    "live_hosts",
    "live_members",
    "winner",
    "ranked",
    "spawn_run",
    "set_run_state",
    "purge_runs",
    "try_lead",
    "resign",
    "leader",
    "assert_leader",
    "firing_key",
    "claim_firing",
    "claim_firings",
    "complete_firings",
    "complete_firing",
    "renew_firing",
    "release_firing",
    "assert_firing",
    "firing_states",
];
