//! Leader election for one group: [`LeaderElector`] on its own dedicated connection.
//!
//! The leader holds the group's session-level lock (`rendezvous.try_lead`), so its leadership
//! ends exactly when its session does. Followers LISTEN on the `rendezvous_leader` channel,
//! where a leader's session announces the group as it gives the lock back (on `resign`, and
//! when the session ends: a killed process, a terminated backend), and claim again at once:
//! they take over within milliseconds, yet wait idle, outside any statement, so a follower
//! holds no snapshot (nothing for VACUUM to wait on) and no lock on the extension's tables.
//! They also claim again every refresh tick, in case an announcement was missed.
//!
//! **Fail-closed.** `is_leader()` is true only while the leader's last confirmation is
//! younger than the lease (default 2 × refresh): a leader that cannot reach the database,
//! whose tick fails or times out, or whose connection breaks stops being leader at once,
//! and says why. (A lock-file design that fails open to leader is how duplicate responders
//! happen; with the database unreachable a host cannot dispatch anyway.) The server releases
//! the lock when it sees the session end: at once for a killed process or a terminated backend.
//! A leader that goes silent without its session ending (a stopped process, a blocked runtime,
//! a silently dead network path) is handled by the server too: every claim sends the lease, and
//! the next candidate's claim ends the session of a holder that has not confirmed for longer
//! than its lease plus a second, then takes the group. No keepalive tuning is needed for that;
//! the group is leaderless meanwhile, never double-led: the lease has already ended the old
//! leader's term locally.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_postgres::GenericClient;

mod elector;

use crate::background::{Background, ShutdownReport};
use crate::{replication, sql, Database, Error, Result};
use elector::Run;

/// One claim attempt's answer (`rendezvous.try_lead`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderClaim {
    /// True when the calling session holds the group's lock.
    pub is_leader: bool,
    /// The current leader (this candidate when `is_leader`), if any.
    pub leader: Option<String>,
    /// The current epoch: the fencing token of the current (or last) leadership term.
    pub epoch: i64,
}

/// The live leadership of a group (`rendezvous.leader`), from the lock truth in `pg_locks`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurrentLeader {
    /// Who holds the lock now; `None` when nobody does.
    pub leader: Option<String>,
    /// The current (or last) epoch.
    pub epoch: i64,
    /// The holder's backend pid.
    pub pid: Option<i32>,
}

/// Claims leadership without waiting (idempotent for the holder's own session).
#[tracing::instrument(level = "debug", skip_all, fields(group = group, candidate = candidate))]
pub async fn try_lead(client: &impl GenericClient, group: &str, candidate: &str) -> Result<LeaderClaim> {
    let call = async {
        let row = sql::query_one(client, sql::TRY_LEAD, &[&group, &candidate, &false]).await?;
        // Only a term won or kept is an acknowledgement.
        let pid = row.get::<_, bool>(0).then(|| row.get(3));
        Ok((row, pid))
    };
    let row = replication::acknowledged("try_lead", call).await?;
    Ok(LeaderClaim { is_leader: row.get(0), leader: row.get(1), epoch: row.get(2) })
}

/// Gives up leadership if this session holds it.
pub async fn resign(client: &impl GenericClient, group: &str) -> Result<bool> {
    let row = sql::query_one(client, sql::RESIGN, &[&group]).await?;
    Ok(row.get(0))
}

/// Who leads `group` now.
pub async fn leader(client: &impl GenericClient, group: &str) -> Result<CurrentLeader> {
    let row = sql::query_one(client, sql::LEADER, &[&group]).await?;
    Ok(CurrentLeader { leader: row.get(0), epoch: row.get(1), pid: row.get(2) })
}

/// Fencing: fails with SQLSTATE `RZ001` unless `epoch` is the live leadership of `group` now.
/// Call it in the same transaction as a leader's write; a deposed leader's write then either
/// commits before the new epoch exists or fails.
#[tracing::instrument(level = "debug", skip_all, fields(group = group, epoch = epoch))]
pub async fn assert_leader(client: &impl GenericClient, group: &str, epoch: i64) -> Result<()> {
    sql::execute(client, sql::ASSERT_LEADER, &[&group, &epoch]).await?;
    Ok(())
}

/// Settings for a [`LeaderElector`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods, or assign the public fields.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::LeaderOptions;
///
/// let options = LeaderOptions::default().with_refresh(Duration::from_secs(1));
/// assert_eq!(options.lease, None); // 2 × refresh
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LeaderOptions {
    /// How often the leader confirms its lock and session. Default 5 s.
    pub refresh: Duration,
    /// How long a confirmation keeps `is_leader()` true. Default 2 × `refresh`.
    pub lease: Option<Duration>,
}

impl Default for LeaderOptions {
    fn default() -> Self {
        LeaderOptions { refresh: Duration::from_secs(5), lease: None }
    }
}

impl LeaderOptions {
    /// Sets [`refresh`](Self::refresh).
    #[must_use]
    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// Sets [`lease`](Self#structfield.lease) (`None`: 2 × `refresh`).
    #[must_use]
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = lease;
        self
    }

    fn lease(&self) -> Duration {
        self.lease.unwrap_or(self.refresh * 2)
    }
}

/// A change of leadership as the elector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leadership {
    /// True while this elector leads (see [`LeaderElector::is_leader`] for the lease check).
    pub is_leader: bool,
    /// When leading, this term's epoch; otherwise the last epoch seen.
    pub epoch: Option<i64>,
    /// The leader last seen (this candidate when leading).
    pub leader: Option<String>,
    /// Why the elector is in this state, in words (for logs and status pages).
    pub reason: String,
    /// When the last term ended at an operator's request (`rendezvous.request_step_down`, or
    /// `rendezvous admin step-down`): the reason they gave (empty when none).
    pub operator_reason: Option<String>,
}

/// One group's leader election for one candidate, on a dedicated connection.
///
/// Gate every leader-only action on [`is_leader`](Self::is_leader) (a cheap local read), and
/// fence leader-only writes with [`assert_leader`] and [`epoch`](Self::epoch) in the same
/// transaction. Cheap to clone: hand clones to the tasks that gate on it; the election stops at
/// [`shutdown`](Self::shutdown) or when the last clone is dropped.
///
/// ```no_run
/// use rendezvous_client::{leader, LeaderElector, LeaderOptions};
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let url = "postgres://app@db.internal/app";
/// let elector = LeaderElector::start(url, "shared-agent", "host-1:4242", LeaderOptions::default()).await?;
/// let mut changes = elector.changes();
/// let mut client = rendezvous_client::connect(url).await?;
/// loop {
///     if let Some(epoch) = elector.epoch() {
///         // Leader-only write, fenced: it fails with SQLSTATE RZ001 if this term has ended.
///         let tx = client.transaction().await?;
///         leader::assert_leader(&tx, "shared-agent", epoch).await?;
///         tx.execute("UPDATE agent_state SET answered_at = now()", &[]).await?;
///         tx.commit().await?;
///     }
///     if changes.changed().await.is_err() {
///         break;
///     }
///     println!("leadership: {:?}", *changes.borrow());
/// }
/// elector.shutdown(std::time::Duration::from_secs(5)).await?; // a leader resigns: a follower takes over at once
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LeaderElector {
    group: String,
    candidate: String,
    state: watch::Receiver<Leadership>,
    /// Nanoseconds since `base` until which leadership is confirmed (0: not leading).
    valid_until: Arc<AtomicU64>,
    base: Instant,
    /// The election task; its result says whether it resigned a term when stopped.
    background: Arc<Background<Result<bool>>>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("group", &self.group)
            .field("candidate", &self.candidate)
            .field("is_leader", &self.is_leader())
            .field("leadership", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// Starts electing: checks the extension, then runs in the background. Candidate ids must
    /// be unique among the group's electors (a host id plus a process id is a good one).
    pub async fn start(
        database: impl Into<Database>,
        group: &str,
        candidate: &str,
        options: LeaderOptions,
    ) -> Result<LeaderElector> {
        crate::error::check_id("group", group)?;
        crate::error::check_id("candidate", candidate)?;
        if options.refresh.is_zero() || options.lease() < options.refresh {
            return Err(Error::InvalidArgument("refresh must be > 0 and lease >= refresh".into()));
        }
        let database = database.into();
        let probe = crate::connection::connect(&database).await?;
        crate::connection::check_extension(&probe).await?;
        drop(probe);
        let (state_tx, state) = watch::channel(Leadership {
            is_leader: false,
            epoch: None,
            leader: None,
            reason: "starting".into(),
            operator_reason: None,
        });
        let (stop, stop_rx) = watch::channel(false);
        let valid_until = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        let run = Run {
            database,
            group: group.to_owned(),
            candidate: candidate.to_owned(),
            options,
            state: state_tx,
            valid_until: valid_until.clone(),
            base,
            stop: stop_rx,
        };
        let span = tracing::info_span!("rendezvous_leader", group, candidate);
        let task = tokio::spawn(tracing::Instrument::instrument(run.run(), span));
        Ok(LeaderElector {
            group: group.to_owned(),
            candidate: candidate.to_owned(),
            state,
            valid_until,
            base,
            background: Arc::new(Background::new(stop, task)),
        })
    }

    /// True while this elector leads and its last confirmation is within the lease.
    pub fn is_leader(&self) -> bool {
        let until = self.valid_until.load(Ordering::Acquire);
        until != 0 && (self.base.elapsed().as_nanos() as u64) < until
    }

    /// This term's epoch while leading (the fencing token for [`assert_leader`]).
    pub fn epoch(&self) -> Option<i64> {
        if self.is_leader() {
            self.state.borrow().epoch
        } else {
            None
        }
    }

    /// The elector's current view.
    pub fn leadership(&self) -> Leadership {
        self.state.borrow().clone()
    }

    /// A channel of leadership changes.
    pub fn changes(&self) -> watch::Receiver<Leadership> {
        self.state.clone()
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// This candidate.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// Stops electing, for every clone of this handle; a leader resigns first, so a follower
    /// takes over at once ([`ShutdownReport::released`] is 1), within `deadline` (past it, the
    /// session is dropped, and the server gives the lock back when it sees the session end).
    pub async fn shutdown(self, deadline: Duration) -> Result<ShutdownReport> {
        self.background
            .shutdown_once(async {
                let stopped = self.background.stop(deadline).await;
                self.valid_until.store(0, Ordering::Release);
                let mut report = ShutdownReport::default();
                if let Some(Some(outcome)) = stopped {
                    report.on_time = true;
                    match outcome? {
                        Ok(resigned) => report.released = u64::from(resigned),
                        // A detected pooler already stopped the elector; shutdown itself succeeded.
                        Err(Error::PoolerDetected(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(report)
            })
            .await
    }

    /// Waits until the background task ends (it ends by itself only on a detected pooler, which
    /// it returns).
    pub async fn join(self) -> Result<()> {
        match self.background.join().await {
            Some(outcome) => outcome?.map(|_| ()),
            None => Ok(()),
        }
    }
}
