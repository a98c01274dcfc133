//! Acknowledgements a failover could take back: commits whose wait for a synchronous standby
//! was cancelled.
//!
//! Under synchronous replication a commit waits until a standby has it. When that wait is
//! cancelled (an operator's `pg_cancel_backend`, a shutdown, a failover tool stopping the old
//! primary), PostgreSQL still reports the commit as a success, with only a WARNING: the
//! transaction is committed on the primary and may be missing from the standby that gets
//! promoted. A run admitted, a firing claimed or completed, a term won that way could be
//! handed out again after a failover.
//!
//! So every connection this client drives (through [`connect`](crate::connect) and the
//! long-lived pieces) watches for that WARNING, and every call that acknowledges something
//! (admission, claims, completions, terms and their refreshes, a fenced transaction's commit)
//! returns [`Error::NotReplicated`] instead of its answer when one
//! arrived on its connection while it ran. The work is committed on the primary: retry an
//! idempotent call (`spawn_run` returns the same run) once replication is back; a claim or a
//! term so answered is not relied on.
//!
//! A call knows its connection by the server backend that answered it (each acknowledging
//! statement also returns `pg_backend_pid()`; each watched connection learns its own when it
//! connects). When the backend is not one of the watched connections' (a pooler that moves
//! sessions between backends, a connection made without the client), a cancelled wait on any
//! watched connection of the process while the call ran refuses it: always on the safe side.
//! Connections you drive yourself are not watched: compare [`cancelled_sync_waits`] before
//! and after your own commits, or let the client connect.
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::{Error, Result};

/// Cancelled synchronous-replication waits seen by every connection the client drives.
static CANCELLED_SYNC_WAITS: AtomicU64 = AtomicU64::new(0);

/// The watched connections, by server backend pid (pids are unique on one server at a time;
/// two servers' equal pids share an entry, which only errs on the safe side).
static WATCHED: Mutex<Option<HashMap<i32, Backend>>> = Mutex::new(None);

/// When any watched connection last saw a cancelled wait.
static LAST_ANYWHERE: Mutex<Option<Instant>> = Mutex::new(None);

/// One server backend that watched connections run on.
#[derive(Default)]
struct Backend {
    connections: usize,
    last_cancelled: Option<Instant>,
}

fn watched() -> std::sync::MutexGuard<'static, Option<HashMap<i32, Backend>>> {
    WATCHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many commits on this process's client-driven connections were acknowledged with a
/// cancelled synchronous-replication wait (the server's WARNING "canceling wait for synchronous
/// replication"). Compare it before and after a commit of your own.
pub fn cancelled_sync_waits() -> u64 {
    CANCELLED_SYNC_WAITS.load(Ordering::SeqCst)
}

/// A connection's driver starts watching backend `pid`; [`forget`] when the connection ends.
pub(crate) fn watch(pid: i32) {
    watched().get_or_insert_with(HashMap::new).entry(pid).or_default().connections += 1;
}

/// The connection on backend `pid` ended.
pub(crate) fn forget(pid: i32) {
    let mut map = watched();
    if let Some(map) = map.as_mut() {
        if let Some(w) = map.get_mut(&pid) {
            w.connections -= 1;
            if w.connections == 0 {
                map.remove(&pid);
            }
        }
    }
}

/// Called by a connection's driver for each notice: records a cancelled wait on backend
/// `pid`. Recognised by the server routine that raises it (`SyncRepWaitForLSN`), which, unlike
/// the message, is never translated.
pub(crate) fn observe_notice(notice: &tokio_postgres::error::DbError, pid: i32) -> bool {
    let cancelled = notice.routine() == Some("SyncRepWaitForLSN");
    if cancelled {
        let now = Instant::now();
        if let Some(w) = watched().as_mut().and_then(|map| map.get_mut(&pid)) {
            w.last_cancelled = Some(now);
        }
        *LAST_ANYWHERE.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        CANCELLED_SYNC_WAITS.fetch_add(1, Ordering::SeqCst);
        metrics::counter!(crate::signals::SYNC_WAITS_CANCELLED).increment(1);
    }
    cancelled
}

/// Whether a cancelled wait was seen since `since` on backend `pid`, a watched connection's
/// (strict: nothing is known of a backend no watched connection runs on).
pub(crate) fn cancelled_on(pid: i32, since: Instant) -> bool {
    watched()
        .as_ref()
        .and_then(|map| map.get(&pid))
        .and_then(|w| w.last_cancelled)
        .is_some_and(|t| t >= since)
}

/// Whether a cancelled wait was seen since `since` on backend `pid` (or, if no watched
/// connection is on that backend, on any).
pub(crate) fn cancelled_since(pid: i32, since: Instant) -> bool {
    let last = match watched().as_ref().and_then(|map| map.get(&pid)) {
        Some(w) => w.last_cancelled,
        None => *LAST_ANYWHERE.lock().unwrap_or_else(|p| p.into_inner()),
    };
    last.is_some_and(|t| t >= since)
}

/// Runs an acknowledging call, which returns its answer and the backend pid that gave it
/// (`None`: it acknowledged nothing, e.g. no rows); the answer becomes
/// [`Error::NotReplicated`] when a synchronous-replication wait was cancelled on that backend
/// meanwhile.
///
/// The server sends the WARNING after the call's result and before it is ready for the next
/// query; the connection's driver reads both from the same packet, and the yield lets it
/// finish recording it before the record is read.
pub(crate) async fn acknowledged<T>(
    what: &'static str,
    call: impl Future<Output = Result<(T, Option<i32>)>>,
) -> Result<T> {
    let started = Instant::now();
    let (answer, pid) = call.await?;
    let Some(pid) = pid else { return Ok(answer) };
    tokio::task::yield_now().await;
    if cancelled_since(pid, started) {
        tracing::warn!(
            call = what,
            pid,
            "acknowledged on the primary only: its synchronous-replication wait was cancelled"
        );
        return Err(Error::NotReplicated(what));
    }
    Ok(answer)
}
