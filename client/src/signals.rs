//! What the client tells an operator: metrics through the [`metrics`] facade (the application
//! installs whatever exporter it likes; without one they cost next to nothing), named by
//! Prometheus conventions and written down once here. docs/operations.md lists them.
use std::time::Duration;

/// Admissions, by `result`: `created` or `deduplicated` (counter).
pub const ADMISSIONS: &str = "rendezvous_admissions_total";
/// Serialization failures `spawn_run` retried (counter).
pub const ADMISSION_RETRIES: &str = "rendezvous_admission_retries_total";
/// Time one admission took, retries included (histogram, seconds).
pub const ADMISSION_DURATION: &str = "rendezvous_admission_duration_seconds";
/// 1 while this process's elector leads `group`, else 0 (gauge).
pub const LEADER: &str = "rendezvous_leader";
/// The epoch of the term this process leads `group` in (gauge).
pub const LEADER_EPOCH: &str = "rendezvous_leader_epoch";
/// Terms won, by `group` (counter).
pub const TERMS_WON: &str = "rendezvous_leader_terms_won_total";
/// Terms lost, by `group` and `reason`: `shutdown`, `operator` (`request_step_down`),
/// `connection_lost`, `lock_lost`, `pooler`, `refresh_failed`, `refresh_timed_out` (counter).
pub const TERMS_LOST: &str = "rendezvous_leader_terms_lost_total";
/// New connections made after one was lost, by `component`: `leader`, `membership`,
/// `scheduler` (counter).
pub const RECONNECTS: &str = "rendezvous_reconnects_total";
/// Heartbeats, by `result`: `ok` or `error` (counter).
pub const HEARTBEATS: &str = "rendezvous_heartbeats_total";
/// Hosts in the live set last read by `hrw::live_host_set` or a `membership::LiveView` (gauge).
pub const HOSTS_LIVE: &str = "rendezvous_hosts_live";
/// Firings this host claimed (counter).
pub const FIRINGS_CLAIMED: &str = "rendezvous_firings_claimed_total";
/// Claim attempts that lost: another holder, already done, or not yet due (counter).
pub const FIRING_CLAIMS_LOST: &str = "rendezvous_firing_claims_lost_total";
/// Firings this host completed (counter).
pub const FIRINGS_COMPLETED: &str = "rendezvous_firings_completed_total";
/// Firings this host completed after taking them over from a holder whose lease ran out (counter).
pub const FIRINGS_TAKEN_OVER: &str = "rendezvous_firings_taken_over_total";
/// Firings whose work failed here, recorded for a retry with `fail_firing` (counter).
pub const FIRINGS_FAILED: &str = "rendezvous_firings_failed_total";
/// How late work started against the firing's due instant, on the host's estimate of the
/// database clock (histogram, seconds).
pub const FIRING_START_LATENESS: &str = "rendezvous_firing_start_lateness_seconds";
/// Time one batch claim took (histogram, seconds).
pub const FIRING_CLAIM_DURATION: &str = "rendezvous_firing_claim_duration_seconds";
/// Commits acknowledged with a cancelled synchronous-replication wait: committed on the
/// primary only (counter; see [`crate::replication`]).
pub const SYNC_WAITS_CANCELLED: &str = "rendezvous_sync_waits_cancelled_total";

/// Records a duration in seconds on histogram `name`.
pub(crate) fn seconds(name: &'static str, d: Duration) {
    metrics::histogram!(name).record(d.as_secs_f64());
}
/// Counter: runs claimed by this host's worker.
pub const RUNS_CLAIMED: &str = "rendezvous_runs_claimed_total";
/// Counter: runs completed (succeeded) by this host's worker.
pub const RUNS_COMPLETED: &str = "rendezvous_runs_completed_total";
/// Counter: failed run attempts recorded by this host's worker (retried, or failed for good).
pub const RUNS_FAILED: &str = "rendezvous_runs_failed_total";
/// History deleted by this host's retention passes, by `kind`: `firings`, `runs`, `hosts`
/// (counter).
pub const PRUNED: &str = "rendezvous_pruned_total";
