//! A cap on the server sessions opened through one [`Database`](super::Database) and its
//! clones ([`Database::with_max_connections`](super::Database::with_max_connections)): a host
//! that builds every piece from one `Database` never has more connections open than that, also
//! while it reconnects after a restart or a failover.
//!
//! A connection holds a permit from before it is opened until its socket is closed (its driver
//! has ended), not until its owner lets go of it: a piece that gives a connection up and makes
//! another waits until the old one is really gone, so the two never count twice on the server.
//! A connection that cannot get a permit waits for one; pools give their idle connections up
//! first, and hand back the ones returned while something waits, so a pool that grew while
//! the budget was free cannot starve a piece that holds one session.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The permits, and the pools that give idle connections back when they run out.
pub(crate) struct Budget {
    limit: usize,
    permits: Arc<Semaphore>,
    /// Connections waiting for a permit now.
    waiting: AtomicUsize,
    pools: Mutex<Vec<PoolHook>>,
}

/// A pool's hook: closes its idle connections when called with `true`; false once the pool is
/// gone (then forgotten).
type PoolHook = Box<dyn Fn(bool) -> bool + Send + Sync>;

/// A permit: one connection's place in the budget, until dropped.
pub(crate) type Permit = OwnedSemaphorePermit;

impl Budget {
    pub(crate) fn new(limit: usize) -> Budget {
        Budget {
            limit,
            permits: Arc::new(Semaphore::new(limit)),
            waiting: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
        }
    }

    /// The cap.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Connections that hold a permit now.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.limit - self.permits.available_permits()
    }

    /// True while a connection waits for a permit: a pool hands a returned connection back to
    /// the budget instead of keeping it idle.
    pub(crate) fn contended(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// A permit, at once if one is free; otherwise after the pools' idle connections are
    /// closed, as soon as a connection ends (first come, first served). Cancel-safe: a caller
    /// that stops waiting (its connect timeout) takes nothing.
    pub(crate) async fn take(&self) -> Permit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return permit;
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        tracing::debug!(
            max_connections = self.limit,
            "waiting for a place in the database's max_connections"
        );
        self.close_idle();
        self.permits.clone().acquire_owned().await.expect("the budget's semaphore is never closed")
    }

    /// Registers a pool's way to close its idle connections (see [`take`](Self::take)).
    pub(crate) fn add_pool(&self, close_idle: impl Fn(bool) -> bool + Send + Sync + 'static) {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        // Pools that are gone are forgotten here too (and whenever a connection waits), so
        // short-lived ones do not pile up.
        pools.retain(|pool| pool(false));
        pools.push(Box::new(close_idle));
    }

    fn close_idle(&self) {
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).retain(|pool| pool(true));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;

    /// Past the cap a connection waits; the pools are asked for their idle connections once
    /// per wait, and the waiter gets the first permit given back.
    #[tokio::test]
    async fn past_the_cap_a_connection_waits_for_one_to_end() {
        let budget = Arc::new(Budget::new(2));
        let asked = Arc::new(AtomicUsize::new(0));
        let a = asked.clone();
        budget.add_pool(move |close| {
            if close {
                a.fetch_add(1, Ordering::SeqCst);
            }
            true
        });
        let first = budget.take().await;
        let _second = budget.take().await;
        assert_eq!((budget.in_use(), asked.load(Ordering::SeqCst)), (2, 0));
        assert!(!budget.contended());

        let b = budget.clone();
        let got = Arc::new(AtomicBool::new(false));
        let g = got.clone();
        let third = tokio::spawn(async move {
            let permit = b.take().await;
            g.store(true, Ordering::SeqCst);
            permit
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!got.load(Ordering::SeqCst), "a third connection was let past a cap of 2");
        assert!(budget.contended());
        assert_eq!(asked.load(Ordering::SeqCst), 1, "the pools were asked for their idle connections");

        drop(first);
        let _third = tokio::time::timeout(Duration::from_secs(1), third).await.unwrap().unwrap();
        assert_eq!(budget.in_use(), 2);
        assert!(!budget.contended());
    }

    /// A waiter that gives up (its connect timeout) takes nothing and counts as waiting no
    /// longer; a pool that is gone is forgotten.
    #[tokio::test]
    async fn a_waiter_that_gives_up_takes_nothing() {
        let budget = Budget::new(1);
        budget.add_pool(|_| false);
        let held = budget.take().await;
        assert!(tokio::time::timeout(Duration::from_millis(20), budget.take()).await.is_err());
        assert!(!budget.contended());
        assert!(budget.pools.lock().unwrap().is_empty());
        drop(held);
        assert_eq!(budget.in_use(), 0);
    }
}
