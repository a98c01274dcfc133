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

use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, Notification};

use crate::background::{Background, ShutdownReport};
use crate::{replication, signals, sql, Database, Error, Result};

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

/// A dedicated session: its client, its backend pid, a signal when its connection ends, and
/// the leader announcements it listens to.
struct Session {
    client: Client,
    pid: i32,
    closed: oneshot::Receiver<()>,
    announcements: mpsc::Receiver<Notification>,
    warnings: mpsc::Receiver<String>,
}

/// The server says "stepping down from group … at an operator's request: <reason>" on the
/// leader's session as it ends a term that `request_step_down` asked to end.
const OPERATOR_REQUEST: &str = "at an operator's request";

/// The reason of an operator's step-down request among the session's warnings, if one came
/// (empty when they gave none).
fn operator_request(warnings: &mut mpsc::Receiver<String>) -> Option<String> {
    let mut found = None;
    while let Ok(w) = warnings.try_recv() {
        if let Some((_, rest)) = w.split_once(OPERATOR_REQUEST) {
            found = Some(rest.strip_prefix(": ").unwrap_or(rest).to_owned());
        }
    }
    found
}

/// How soon a follower claims again when the lock is held but nobody is recorded as leader (a
/// claim in flight, or one whose transaction is aborting: no announcement will come).
const UNRECORDED_HOLDER_RETRY: Duration = Duration::from_millis(100);

struct Run {
    database: Database,
    group: String,
    candidate: String,
    options: LeaderOptions,
    state: watch::Sender<Leadership>,
    valid_until: Arc<AtomicU64>,
    base: Instant,
    stop: watch::Receiver<bool>,
}

enum Held {
    /// Stop was asked; `resigned`: a term was handed back.
    Stopped { resigned: bool },
    /// Lost the lock or the session; reconnect and compete again.
    Lost,
}

impl Run {
    /// Elects until stopped; true when it resigned a term on the way out.
    async fn run(mut self) -> Result<bool> {
        let mut connected_before = false;
        loop {
            if *self.stop.borrow() {
                return Ok(false);
            }
            let connecting = tokio::time::timeout(self.options.refresh, self.connect());
            let mut session = match connecting
                .await
                .unwrap_or_else(|_| Err(crate::connection::no_answer(self.options.refresh)))
            {
                Ok(s) => {
                    if std::mem::replace(&mut connected_before, true) {
                        metrics::counter!(signals::RECONNECTS, "component" => "leader").increment(1);
                    }
                    s
                }
                Err(e) => {
                    self.follower(None, None, format!("cannot reach the database: {e}"));
                    if self.pause(self.options.refresh).await {
                        return Ok(false);
                    }
                    continue;
                }
            };
            match self.compete(&mut session).await {
                Ok(Held::Stopped { resigned }) => return Ok(resigned),
                Ok(Held::Lost) => {
                    // A term just ended (asked to step down, lock or session lost): sit out one
                    // refresh, so a follower, woken by the announcement, takes over first rather
                    // than racing this elector back into the term it gave up.
                    if self.pause(self.options.refresh).await {
                        return Ok(false);
                    }
                }
                Err(e @ Error::PoolerDetected(_)) => {
                    self.follower(None, None, e.to_string());
                    return Err(e);
                }
                Err(e) => {
                    self.follower(None, None, format!("election failed: {e}"));
                    if self.pause(self.options.refresh / 5).await {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// Competes on one session until it is lost or stop is asked.
    async fn compete(&mut self, session: &mut Session) -> Result<Held> {
        loop {
            let asked = self.base.elapsed();
            // Bounded, and stopped by a shutdown: on a primary that cannot commit, a claim can
            // wait for the group's row behind a commit that never returns. Past a refresh, the
            // session is given up and made again (through the URL, to a primary that works).
            let mut stop = self.stop.clone();
            let claim = tokio::select! {
                r = tokio::time::timeout(self.options.refresh, self.claim(&session.client, session.pid)) => {
                    r.unwrap_or_else(|_| Err(crate::connection::no_answer(self.options.refresh)))?
                }
                _ = stop.changed() => return Ok(Held::Stopped { resigned: false }),
            };
            if claim.is_leader {
                return self.hold(session, claim.epoch, asked).await;
            }
            self.follower(claim.leader.clone(), Some(claim.epoch), "another candidate leads".into());
            // Idle until the leader's session announces the lock free, or the next tick.
            let retry = if claim.leader.is_none() { UNRECORDED_HOLDER_RETRY } else { self.options.refresh };
            let mut stop = self.stop.clone();
            tokio::select! {
                _ = stop.changed() => return Ok(Held::Stopped { resigned: false }),
                _ = &mut session.closed => {
                    return Err(Error::Disconnected("connection closed while following".into()));
                }
                _ = announced(&mut session.announcements, &self.group) => {}
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// Leads until the lock, the session or a confirmation is lost, or stop is asked.
    /// `asked`: when the claim that won the term was sent.
    async fn hold(&mut self, session: &mut Session, epoch: i64, asked: Duration) -> Result<Held> {
        self.leader(epoch, asked);
        let mut tick = tokio::time::interval(self.options.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut stop = self.stop.clone();
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    self.step_down(Some(epoch), "shutdown", "shutting down".into());
                    let resigned = tokio::time::timeout(self.options.refresh, resign(&session.client, &self.group)).await;
                    return Ok(Held::Stopped { resigned: matches!(resigned, Ok(Ok(true))) });
                }
                _ = &mut session.closed => {
                    self.step_down(Some(epoch), "connection_lost", "connection to the database lost".into());
                    return Ok(Held::Lost);
                }
                _ = tick.tick() => {
                    // Only this claim's warnings say why it ends the term.
                    while session.warnings.try_recv().is_ok() {}
                    let asked = self.base.elapsed();
                    match tokio::time::timeout(self.options.refresh, self.claim(&session.client, session.pid)).await {
                        Ok(Ok(c)) if c.is_leader && c.epoch == epoch => self.confirm(asked),
                        Ok(Ok(c)) => {
                            let epoch_now = c.leader.as_ref().map(|_| c.epoch);
                            match operator_request(&mut session.warnings) {
                                Some(why) => self.step_down_as(
                                    epoch_now.or(Some(epoch)),
                                    "operator",
                                    if why.is_empty() {
                                        "stepped down at an operator's request".into()
                                    } else {
                                        format!("stepped down at an operator's request: {why}")
                                    },
                                    Some(why),
                                ),
                                None => self.step_down(epoch_now, "lock_lost", format!("lost the lock (epoch now {})", c.epoch)),
                            }
                            return Ok(Held::Lost);
                        }
                        Ok(Err(e @ Error::PoolerDetected(_))) => {
                            self.step_down(Some(epoch), "pooler", e.to_string());
                            return Err(e);
                        }
                        Ok(Err(e)) => {
                            self.step_down(Some(epoch), "refresh_failed", format!("refresh failed: {e}"));
                            return Ok(Held::Lost);
                        }
                        Err(_) => {
                            self.step_down(Some(epoch), "refresh_timed_out", "refresh timed out".into());
                            return Ok(Held::Lost);
                        }
                    }
                }
            }
        }
    }

    /// One `try_lead` on the dedicated session, checking it is still the same backend.
    async fn claim(&self, client: &Client, session_pid: i32) -> Result<LeaderClaim> {
        let call = async {
            let row = sql::query_one(
                client,
                sql::TRY_LEAD_CHECKED,
                &[&self.group, &self.candidate, &self.options.lease().as_secs_f64()],
            )
            .await
            .map_err(|e| {
                if e.code() == Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) {
                    Error::PoolerDetected(e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default())
                } else {
                    Error::from_db(e)
                }
            })?;
            // Only a term (or its refresh) is an acknowledgement; an answer that this
            // candidate does not lead is acted on at once (no wait for a WARNING).
            let pid = row.get::<_, bool>(0).then(|| row.get(3));
            Ok((row, pid))
        };
        let row = replication::acknowledged("try_lead", call).await?;
        let pid: i32 = row.get(3);
        if pid != session_pid {
            return Err(Error::PoolerDetected(format!(
                "the session's backend changed from pid {session_pid} to {pid} between statements"
            )));
        }
        Ok(LeaderClaim { is_leader: row.get(0), leader: row.get(1), epoch: row.get(2) })
    }

    async fn connect(&self) -> Result<Session> {
        let name = format!("rendezvous leader {} {}", self.group, self.candidate);
        let watched = crate::connection::connect_watched(&self.database, &name).await?;
        watched.client.batch_execute(sql::LISTEN_LEADERS).await?;
        watched.client.batch_execute(sql::WARNINGS_ON).await?;
        let pid = watched.pid;
        Ok(Session {
            client: watched.client,
            pid,
            closed: watched.closed,
            announcements: watched.notifications,
            warnings: watched.warnings,
        })
    }

    /// Sleeps, or returns true at once if stop is asked.
    async fn pause(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => *self.stop.borrow(),
            _ = self.stop.changed() => true,
        }
    }

    /// Extends the term's lease from `asked`, when the confirming claim was sent (the server
    /// confirmed the lock at some moment after it, never before): a slow answer does not
    /// lengthen the lease, so a leader cut off from the server stops within the lease of its
    /// last confirmation however late that confirmation arrived.
    fn confirm(&self, asked: Duration) {
        let until = asked + self.options.lease();
        self.valid_until.store(until.as_nanos() as u64, Ordering::Release);
    }

    /// Starts a term. The metrics come first, so whoever sees `is_leader()` true sees them too.
    fn leader(&self, epoch: i64, asked: Duration) {
        tracing::info!(group = %self.group, candidate = %self.candidate, epoch, "became leader");
        metrics::counter!(signals::TERMS_WON, "group" => self.group.clone()).increment(1);
        metrics::gauge!(signals::LEADER, "group" => self.group.clone()).set(1.0);
        metrics::gauge!(signals::LEADER_EPOCH, "group" => self.group.clone()).set(epoch as f64);
        self.confirm(asked);
        self.publish(Leadership {
            is_leader: true,
            epoch: Some(epoch),
            leader: Some(self.candidate.clone()),
            reason: "holds the lock".into(),
            operator_reason: None,
        });
    }

    /// Ends this elector's term; `kind` names the reason for the metric, `reason` says it in words.
    fn step_down(&self, epoch: Option<i64>, kind: &'static str, reason: String) {
        self.step_down_as(epoch, kind, reason, None);
    }

    /// [`step_down`](Self::step_down), saying what the operator asked, when they did.
    fn step_down_as(
        &self,
        epoch: Option<i64>,
        kind: &'static str,
        reason: String,
        operator_reason: Option<String>,
    ) {
        self.valid_until.store(0, Ordering::Release);
        tracing::warn!(group = %self.group, candidate = %self.candidate, reason = %reason, "stepped down");
        metrics::counter!(signals::TERMS_LOST, "group" => self.group.clone(), "reason" => kind).increment(1);
        metrics::gauge!(signals::LEADER, "group" => self.group.clone()).set(0.0);
        self.state.send_replace(Leadership {
            is_leader: false,
            epoch,
            leader: None,
            reason,
            operator_reason,
        });
    }

    fn follower(&self, leader: Option<String>, epoch: Option<i64>, reason: String) {
        self.valid_until.store(0, Ordering::Release);
        let operator_reason = self.state.borrow().operator_reason.clone();
        self.publish(Leadership { is_leader: false, epoch, leader, reason, operator_reason });
    }

    /// Sends `next` to watchers only if it differs from what they have.
    fn publish(&self, next: Leadership) {
        self.state.send_if_modified(|s| {
            let changed = *s != next;
            *s = next;
            changed
        });
    }
}

/// Returns when `group`'s lock is announced free on the session's channel (other groups'
/// announcements are skipped); never, if the connection's notifications end.
async fn announced(announcements: &mut mpsc::Receiver<Notification>, group: &str) {
    while let Some(n) = announcements.recv().await {
        if n.payload() == group {
            return;
        }
    }
    std::future::pending::<()>().await
}
