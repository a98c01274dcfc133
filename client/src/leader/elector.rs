//! The elector's loop: one dedicated session at a time, competing for the group (claims on a
//! refresh tick and at every announcement), holding a term (confirming it within its lease),
//! and publishing each change of leadership to the handles.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Notification};

use super::{resign, LeaderClaim, LeaderOptions, Leadership};
use crate::{announce, replication, signals, sql, Database, Error, Result};

/// A dedicated session: its client, its backend pid, a signal when its connection ends, and
/// the leader announcements it listens to.
pub(super) struct ElectorSession {
    client: Client,
    pid: i32,
    closed: oneshot::Receiver<()>,
    announcements: mpsc::Receiver<Notification>,
    /// The key of the extension's announcements, and the highest number heard for this
    /// group (a forged or replayed announcement is ignored: announce.rs).
    key: Vec<u8>,
    heard: i64,
    warnings: mpsc::Receiver<String>,
    /// Ends it at once when a call gets no answer in time (its server session must not live on).
    give_up: crate::connection::GiveUp,
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

pub(super) struct Run {
    pub(super) database: Database,
    pub(super) group: String,
    pub(super) candidate: String,
    pub(super) options: LeaderOptions,
    pub(super) state: watch::Sender<Leadership>,
    pub(super) valid_until: Arc<AtomicU64>,
    pub(super) base: Instant,
    pub(super) stop: watch::Receiver<bool>,
}

enum Held {
    /// Stop was asked; `resigned`: a term was handed back.
    Stopped { resigned: bool },
    /// Lost the lock or the session; reconnect and compete again.
    Lost,
}

impl Run {
    /// Elects until stopped; true when it resigned a term on the way out.
    pub(super) async fn run(mut self) -> Result<bool> {
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
    async fn compete(&mut self, session: &mut ElectorSession) -> Result<Held> {
        loop {
            let asked = self.base.elapsed();
            // Bounded, and stopped by a shutdown: on a primary that cannot commit, a claim can
            // wait for the group's row behind a commit that never returns. Past a refresh, the
            // session is given up and made again (through the URL, to a primary that works).
            let mut stop = self.stop.clone();
            let claim = tokio::select! {
                r = tokio::time::timeout(self.options.refresh, self.claim(&session.client, session.pid)) => r,
                _ = stop.changed() => return Ok(Held::Stopped { resigned: false }),
            };
            let Ok(claim) = claim else {
                session.give_up.after_no_answer().await;
                return Err(crate::connection::no_answer(self.options.refresh));
            };
            let claim = claim?;
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
                _ = announced(&mut session.announcements, &session.key, &mut session.heard, &self.group) => {}
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// Leads until the lock, the session or a confirmation is lost, or stop is asked.
    /// `asked`: when the claim that won the term was sent.
    async fn hold(&mut self, session: &mut ElectorSession, epoch: i64, asked: Duration) -> Result<Held> {
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
                    if resigned.is_err() {
                        session.give_up.now();
                    }
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
                            session.give_up.after_no_answer().await;
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

    async fn connect(&self) -> Result<ElectorSession> {
        let name = format!("rendezvous leader {} {}", self.group, self.candidate);
        let watched = crate::connection::connect_watched(&self.database, &name).await?;
        let abandoned = watched.give_up.on_drop();
        watched.client.batch_execute(sql::LISTEN_LEADERS).await?;
        watched.client.batch_execute(sql::WARNINGS_ON).await?;
        // Farewells are numbered when their lock is taken, maybe long before this connection:
        // a follower believes any signed one above the last it heard for its group (a replayer
        // can make it claim again once per farewell it recorded, per connection).
        let (key, _) = announce::read_key(&watched.client).await?;
        abandoned.disarm();
        let pid = watched.pid;
        Ok(ElectorSession {
            client: watched.client,
            pid,
            closed: watched.closed,
            announcements: watched.notifications,
            key,
            heard: 0,
            warnings: watched.warnings,
            give_up: watched.give_up,
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
/// announcements, and any the extension did not send or that were heard before, are
/// skipped); never, if the connection's notifications end.
async fn announced(
    announcements: &mut mpsc::Receiver<Notification>,
    key: &[u8],
    heard: &mut i64,
    group: &str,
) {
    while let Some(n) = announcements.recv().await {
        match announce::verify(key, n.channel(), n.payload()) {
            Some((number, data)) if data == group && number > *heard => {
                *heard = number;
                return;
            }
            _ => {}
        }
    }
    std::future::pending::<()>().await
}
