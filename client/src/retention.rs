//! Retention: finished firings, finished runs and dead hosts are deleted once older than their
//! `rendezvous.retention_settings` (by default a day, a week and a day), in bounded batches.
//! A [`Worker`](crate::Worker) runs the passes by itself (on one host of the fleet: the
//! one ranking first for them); [`prune`] is one step, for a fleet that runs no worker.
use std::time::Duration;

use tokio_postgres::GenericClient;

use crate::{sql, Result};

/// Rows of each kind one step deletes at most: a short transaction, and a bounded amount of WAL.
pub const BATCH: i32 = 1000;

/// The pause between two steps of one pass: the rate stays bounded (at most about 20,000 rows
/// a second of each kind), so other commits do not wait behind the deletes.
pub const PAUSE: Duration = Duration::from_millis(50);

/// What one step deleted, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pruned {
    /// Finished firings (completed, or failed for good).
    pub firings: i64,
    /// Finished runs (succeeded, failed, cancelled).
    pub runs: i64,
    /// Hosts silent for longer than their retention.
    pub hosts: i64,
}

impl Pruned {
    /// The most of one kind: a step that deleted `max_rows` of some kind leaves more to do.
    pub fn most(&self) -> i64 {
        self.firings.max(self.runs).max(self.hosts)
    }
}

/// One bounded step (`rendezvous.prune`): deletes at most `max_rows` (1 to 100,000) of each
/// kind older than its retention, oldest first. Call again, after a pause, while
/// [`Pruned::most`] is `max_rows`.
pub async fn prune(client: &impl GenericClient, max_rows: i32) -> Result<Pruned> {
    let mut pruned = Pruned::default();
    for row in sql::query(client, sql::PRUNE, &[&max_rows]).await? {
        let deleted: i64 = row.get(1);
        match row.get::<_, &str>(0) {
            "firings" => pruned.firings = deleted,
            "runs" => pruned.runs = deleted,
            _ => pruned.hosts = deleted,
        }
    }
    Ok(pruned)
}
