//! What the long-lived pieces ([`Membership`](crate::Membership),
//! [`LeaderElector`](crate::LeaderElector), [`Worker`](crate::Worker)) share: a background
//! task behind cloneable handles, and one [`ShutdownReport`].
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a `shutdown(deadline)` did: the same report for every long-lived piece, each filling in
/// what applies to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Work that finished within the deadline (a [`Worker`](crate::Worker)'s running
    /// firings and runs).
    pub finished: u64,
    /// Claims handed back so the next holder takes them at once instead of waiting out a lease:
    /// a worker's firings and runs cut off at the deadline, an elector's term (1 when it led
    /// and resigned).
    pub released: u64,
    /// The host left the live set, so the fleet sees it gone at once (a
    /// [`Membership`](crate::Membership) or worker). False otherwise: then it drops out of the
    /// set when its heartbeat goes stale.
    pub left: bool,
    /// Everything was done before the deadline. False when the deadline cut something off: the
    /// background task was stopped, and the server ends what its sessions held when they close.
    /// Another clone's `shutdown`, at the same time or later, waits for the first and returns
    /// its report.
    pub on_time: bool,
}

/// A background task and its stop switch, shared by a piece's clones. The task is asked to stop
/// by `shutdown`, or when the last clone is dropped.
pub(crate) struct Background<T> {
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<T>>>,
    /// The first shutdown's report, which every later one returns.
    report: tokio::sync::OnceCell<ShutdownReport>,
}

impl<T> std::fmt::Debug for Background<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background").field("running", &self.is_running()).finish()
    }
}

impl<T> Background<T> {
    pub(crate) fn new(stop: watch::Sender<bool>, task: JoinHandle<T>) -> Background<T> {
        Background { stop, task: Mutex::new(Some(task)), report: tokio::sync::OnceCell::new() }
    }

    /// True until the task ends (or was taken by a shutdown).
    pub(crate) fn is_running(&self) -> bool {
        self.task.lock().expect("task lock").as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The task, for the one shutdown that stops it; `None` when another clone's took it.
    fn take(&self) -> Option<JoinHandle<T>> {
        self.task.lock().expect("task lock").take()
    }

    /// Runs `shutdown` once for all clones: concurrent and later callers wait for the first and
    /// get its report (a failed first shutdown lets the next try again).
    pub(crate) async fn shutdown_once<F>(&self, shutdown: F) -> crate::Result<ShutdownReport>
    where
        F: std::future::Future<Output = crate::Result<ShutdownReport>>,
    {
        self.report.get_or_try_init(|| shutdown).await.cloned()
    }

    /// Asks the task to stop and waits for it until `deadline`. `None`: another clone stopped it
    /// already. `Some(None)`: it did not end in time and was aborted.
    pub(crate) async fn stop(&self, deadline: Duration) -> Option<Option<Result<T, crate::Error>>> {
        let _ = self.stop.send(true);
        let mut task = self.take()?;
        match tokio::time::timeout(deadline, &mut task).await {
            Ok(ended) => Some(Some(ended.map_err(|e| crate::Error::TaskFailed(e.to_string())))),
            Err(_) => {
                task.abort();
                Some(None)
            }
        }
    }

    /// Asks the task to stop and waits for it for as long as it takes (for a task that stops at
    /// once when asked). `None`: another clone stopped it already.
    pub(crate) async fn stop_and_join(&self) -> Option<Result<T, crate::Error>> {
        let _ = self.stop.send(true);
        self.join().await
    }

    /// Waits until the task ends by itself.
    pub(crate) async fn join(&self) -> Option<Result<T, crate::Error>> {
        let task = self.take()?;
        Some(task.await.map_err(|e| crate::Error::TaskFailed(e.to_string())))
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
