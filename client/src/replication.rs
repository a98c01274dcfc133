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
//! returns [`Error::NotReplicated`](crate::Error::NotReplicated) instead of its answer when one
//! arrived while it ran. The work is committed on the primary: retry an idempotent call
//! (`spawn_run` returns the same run) once replication is back; a claim or a term so
//! answered is not relied on.
//!
//! The watch is per process, not per connection: a call in flight while any of this
//! process's connections saw a cancelled wait is refused too (rare, and always on the safe
//! side). Connections you drive yourself are not watched: check
//! [`cancelled_sync_waits`] before and after your own commits, or let the client connect.
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

/// Cancelled synchronous-replication waits seen by every connection the client drives.
static CANCELLED_SYNC_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many commits on this process's client-driven connections were acknowledged with a
/// cancelled synchronous-replication wait (the server's WARNING "canceling wait for synchronous
/// replication"). Compare it before and after a commit of your own.
pub fn cancelled_sync_waits() -> u64 {
    CANCELLED_SYNC_WAITS.load(Ordering::SeqCst)
}

/// Called by a connection's driver for each notice: counts the cancelled waits. Recognised by
/// the server routine that raises them (`SyncRepWaitForLSN`), which, unlike the message, is
/// never translated.
pub(crate) fn observe_notice(notice: &tokio_postgres::error::DbError) -> bool {
    let cancelled = notice.routine() == Some("SyncRepWaitForLSN");
    if cancelled {
        CANCELLED_SYNC_WAITS.fetch_add(1, Ordering::SeqCst);
        metrics::counter!(crate::signals::SYNC_WAITS_CANCELLED).increment(1);
    }
    cancelled
}

/// Runs an acknowledging call; its answer becomes [`Error::NotReplicated`] when a
/// synchronous-replication wait was cancelled meanwhile.
///
/// The server sends the WARNING after the call's result and before it is ready for the next
/// query; the connection's driver reads both from the same packet, and the yield lets it
/// finish counting before the counter is read again.
pub(crate) async fn acknowledged<T>(what: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    let before = cancelled_sync_waits();
    let answer = call.await?;
    tokio::task::yield_now().await;
    if cancelled_sync_waits() != before {
        tracing::warn!(
            call = what,
            "acknowledged on the primary only: its synchronous-replication wait was cancelled"
        );
        return Err(Error::NotReplicated(what));
    }
    Ok(answer)
}
