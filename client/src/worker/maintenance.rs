//! Maintenance a worker does for the whole fleet: retention passes, by the host that ranks
//! first for them.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::clock::jittered;
use super::Shared;
use crate::session::Session;
use crate::{retention, signals};

/// The key whose HRW winner among the live hosts runs the retention passes: one host at a time
/// in the normal case (two with different views of the set share the work: the deletes skip
/// each other's locked rows).
pub(super) const RETENTION_KEY: &str = "rendezvous:retention";

/// Most steps in one pass; what is left waits for the next pass.
const RETENTION_STEPS: usize = 1000;

/// Every `every`, when this host ranks first for it: retention steps with pauses, until a step
/// leaves nothing more to do.
pub(super) async fn retention_passes(shared: Arc<Shared>, every: Duration, mut stop: watch::Receiver<bool>) {
    let session = Session::new(
        shared.database.clone(),
        format!("rendezvous scheduler {} retention", shared.host_id),
        shared.options.call_timeout,
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(jittered(every)) => {}
            _ = stop.changed() => return,
        }
        if !shared.retention_owner.load(Ordering::Relaxed) {
            session.close().await; // another host does it: hold no connection for it
            continue;
        }
        for _ in 0..RETENTION_STEPS {
            // One try a step (a failure drops the connection): the next pass tries again.
            let step = session.call_once(|c| async move { retention::prune(&*c, retention::BATCH).await });
            let outcome = tokio::select! {
                r = step => r,
                _ = stop.changed() => return,
            };
            match outcome {
                Ok(pruned) => {
                    metrics::counter!(signals::PRUNED, "kind" => "firings").increment(pruned.firings as u64);
                    metrics::counter!(signals::PRUNED, "kind" => "runs").increment(pruned.runs as u64);
                    metrics::counter!(signals::PRUNED, "kind" => "hosts").increment(pruned.hosts as u64);
                    if pruned.most() < i64::from(retention::BATCH) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention step failed; trying again at the next pass");
                    break;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(retention::PAUSE) => {}
                _ = stop.changed() => return,
            }
        }
    }
}
