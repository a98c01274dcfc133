//! The worker's loop: one control connection (reconnected with backoff when lost), a look at
//! the database at a time — heartbeat, the sources of work, the next wake-up — and the
//! wake-ups between looks (announced work, a freed slot).
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::clock::{jittered, Offset};
use super::executor::start_queued;
use super::maintenance::RETENTION_KEY;
use super::run_source::{self, RunLook};
use super::stats::Counters;
use super::{firing_source, Clock, Shared};
use crate::announce::{self, Heard};
use crate::membership::{self, LiveView};
use crate::task::schedule_task;
use crate::{signals, sql, Error, Result};

/// The shortest time between two looks at the database: an instant the clocks' measured
/// offset puts just past, or firings finishing one after another, wait this long.
pub(super) const MIN_TICK: Duration = Duration::from_millis(10);

/// After a firing finishes, how long a worker gathers others finishing before it looks for
/// more work (unless its next look is due anyway).
const GATHER: Duration = Duration::from_millis(50);

/// The scheduling loop's connection, and the wake-ups it listens for.
pub(super) struct Control {
    pub(super) client: Client,
    /// Announcements of runs that became runnable (when the worker has workflows) and of
    /// firings just made (when it has task handlers).
    pub(super) wakeups: tokio::sync::mpsc::Receiver<tokio_postgres::Notification>,
    /// The key that tells the extension's announcements from anyone's NOTIFY, and the
    /// announcements heard (a replay is ignored).
    key: Vec<u8>,
    heard: Heard,
    /// Ends it at once when a look gets no answer in time.
    give_up: crate::connection::GiveUp,
}

/// A control connection, checked, with this host's tasks registered, listening for runnable
/// runs when the worker has workflows. The first one (`first`, at `Worker::start`) also checks
/// that its server session is its own, before any other connection of the Worker is open.
async fn open_control(shared: &Shared, first: bool) -> Result<Control> {
    let watched = crate::connection::connect_watched(
        &shared.database,
        &format!("rendezvous scheduler {}", shared.host_id),
    )
    .await?;
    // Given up if this is abandoned midway (no answer within the call timeout: a commit that
    // never returns), so its server session does not live on, waiting.
    let abandoned = watched.give_up.on_drop();
    let client = watched.client;
    crate::connection::check_extension(&client).await?;
    for spec in &shared.tasks {
        schedule_task(&client, spec).await?;
    }
    if !shared.workflows.is_empty() {
        client.batch_execute(sql::LISTEN_RUNS).await?;
        client.batch_execute(sql::LISTEN_CANCEL).await?;
    }
    if !shared.handlers.is_empty() {
        client.batch_execute(sql::LISTEN_FIRINGS).await?;
    }
    let (key, last) = announce::read_key(&client).await?;
    // Its LISTEN and the session its claims record must be this connection's own. Checked at
    // start only: a reconnect must not need a second place in a capped host's budget.
    if first {
        crate::connection::refuse_shared_sessions(
            &shared.database,
            &client,
            watched.pid,
            &format!("rendezvous scheduler {} check", shared.host_id),
        )
        .await?;
    }
    membership::heartbeat(&client, &shared.host_id, shared.options.weight).await?;
    abandoned.disarm();
    Ok(Control {
        client,
        wakeups: watched.notifications,
        key,
        heard: Heard::after(last),
        give_up: watched.give_up,
    })
}

/// The scheduling loop; returns the handles of firings still running when it stopped.
pub(super) async fn run(
    shared: Arc<Shared>,
    first: Control,
    mut stop: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut control = Some(first);
    let mut backoff = Duration::from_millis(100);
    let mut last_heartbeat = Instant::now();
    let mut view: Option<LiveView> = None;
    let mut offset: Option<Offset> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        shared.jobs.lock().expect("jobs lock").retain(|j| !j.is_finished());
        let mut control_now = match control.take().filter(|c| !c.client.is_closed()) {
            Some(c) => c,
            None => match opened(&shared, &mut stop).await {
                Ok(c) => {
                    Counters::add(&shared.counters.reconnects);
                    metrics::counter!(signals::RECONNECTS, "component" => "scheduler").increment(1);
                    tracing::info!(host_id = %shared.host_id, "scheduler reconnected");
                    backoff = Duration::from_millis(100);
                    view = None;
                    offset = None;
                    c
                }
                Err(e) => {
                    tracing::warn!(host_id = %shared.host_id, error = %e, ?backoff, "scheduler cannot connect; retrying");
                    if e.sqlstate() == Some(&tokio_postgres::error::SqlState::TOO_MANY_CONNECTIONS) {
                        // The server is full: this host's idle job connections make way for
                        // the one it cannot run without.
                        let closed = shared.pool.close_idle(Duration::ZERO);
                        tracing::warn!(host_id = %shared.host_id, closed, "the server has no connection left: closed this host's idle job connections");
                    }
                    sleep_or_stop(jittered(backoff), &mut stop).await;
                    backoff = (backoff * 2).min(shared.options.max_backoff);
                    continue;
                }
            },
        };
        let ticked = Instant::now();
        Counters::add(&shared.counters.looks);
        // A look that gets no answer in time is cancelled; a server that answers the cancel is
        // only slow and the connection is kept, whatever the look did known (claims it made are
        // started); one that does not (a primary that cannot commit, a dead path) loses the
        // connection, and it is made again. A shutdown does not wait for it. Meanwhile, freed
        // slots take queued work (a refill's claim is out while the queue's other half runs).
        let give_up = control_now.give_up.clone();
        let freed = std::sync::atomic::AtomicBool::new(false);
        let looked = tokio::select! {
            r = crate::connection::bounded(
                &give_up,
                shared.options.call_timeout,
                timed(
                    shared.options.call_timeout,
                    &shared,
                    tick(&shared, &control_now.client, &mut view, &mut offset, &mut last_heartbeat),
                ),
            ) => r,
            never = start_while_looking(&shared, &freed) => match never {},
            _ = stop.changed() => break,
        };
        match looked {
            Ok(wait) => {
                backoff = Duration::from_millis(100);
                // A slot freed during the look with nothing to start (counted then, if it
                // waited for a claim): what it asks for is decided now.
                let freed = freed.load(Ordering::Relaxed);
                if !(freed && after_freed_slot(&shared, false)) {
                    between_looks(&shared, &mut control_now, ticked, wait, &mut stop).await;
                }
                control = Some(control_now);
            }
            Err(e) => {
                // A look cancelled on a slow server keeps its connection; any other failure
                // makes a new one.
                if !control_now.client.is_closed() && crate::connection::cancelled_statement(&e) {
                    tracing::warn!(host_id = %shared.host_id, "the server is slow: the scheduler's look was cancelled; looking again");
                    control = Some(control_now);
                } else {
                    tracing::warn!(host_id = %shared.host_id, error = %e, "scheduler's look failed; connecting again");
                }
                sleep_or_stop(jittered(backoff), &mut stop).await;
                backoff = (backoff * 2).min(shared.options.max_backoff);
            }
        }
    }
    let mut jobs = std::mem::take(&mut *shared.jobs.lock().expect("jobs lock"));
    jobs.retain(|j| !j.is_finished());
    jobs
}

/// While a look is out: each freed slot takes queued work; a slot freed with nothing queued is
/// noted in `freed`. Never returns (the look, or a stop, ends it).
async fn start_while_looking(
    shared: &Arc<Shared>,
    freed: &std::sync::atomic::AtomicBool,
) -> std::convert::Infallible {
    loop {
        shared.finished.notified().await;
        if shared.queued.lock().expect("queue lock").is_empty() {
            run_source::note_empty_queue(shared);
        } else if let Err(e) = start_queued(shared) {
            tracing::warn!(error = %e, "could not start queued work");
        }
        // A slot still free (nothing queued, or only work held too long, which is released):
        // the loop decides what it asks for once the look is back.
        if shared.slots.available_permits() > 0 {
            freed.store(true, Ordering::Relaxed);
        }
    }
}

/// Waits for the next look, `wait` after the last one began (`ticked`), or sooner when runs
/// became runnable or another host made a burst of firings (announced), or when a freed slot
/// can take work waiting.
async fn between_looks(
    shared: &Arc<Shared>,
    control: &mut Control,
    ticked: Instant,
    wait: Duration,
    stop: &mut watch::Receiver<bool>,
) {
    let mut next_look = ticked + wait;
    let Control { wakeups, key, heard, .. } = control;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_look.into()) => break,
            Some(n) = wakeups.recv() => {
                // Runs became runnable, or another host made a burst of firings:
                // look now, once for all announced meanwhile. A cancelled run
                // running here: its job is told at once. Anyone's NOTIFY, or a
                // replay: nothing.
                let mut look = heed(shared, key, heard, &n);
                while let Ok(n) = wakeups.try_recv() {
                    look |= heed(shared, key, heard, &n);
                }
                if look {
                    break;
                }
                continue;
            }
            _ = shared.finished.notified() => {
                if after_freed_slot(shared, true) {
                    break;
                }
                // Jobs finishing one by one must not make a look each (each costs the
                // database a query): the next look gathers what finished meanwhile, and an
                // announced run still wakes the host at once.
                if shared.slots.available_permits() > 0 {
                    next_look = next_look.min(ticked + GATHER);
                }
            }
            _ = stop.changed() => break,
        }
    }
}

/// What a freed slot asks for: queued work takes it with no look at the database, and a queue
/// of runs down to half its target wants its refill now, while the rest runs; with nothing
/// queued, work waiting in the database (the last look took all it asked for) is claimed at
/// once. True when the loop should look now. `count`: a slot that waits for a claim counts in
/// `waits_for_claims` (not again when start_while_looking counted it).
fn after_freed_slot(shared: &Arc<Shared>, count: bool) -> bool {
    if !shared.queued.lock().expect("queue lock").is_empty() {
        if let Err(e) = start_queued(shared) {
            tracing::warn!(error = %e, "could not start queued work");
        }
        if run_source::wants_refill(shared) {
            return true;
        }
    }
    if shared.slots.available_permits() == 0 {
        return false;
    }
    if count {
        run_source::note_empty_queue(shared);
    }
    shared.runs_waiting.load(Ordering::Relaxed) || shared.firings_waiting.load(Ordering::Relaxed)
}

/// How long a job connection may stay idle in the worker's pool before it is closed.
const JOB_CONNECTION_IDLE: Duration = Duration::from_secs(10);

/// `look`, counting in `timeouts` when it has no answer within `limit` (it goes on: see
/// `connection::bounded`).
async fn timed<T>(limit: Duration, shared: &Shared, look: impl std::future::Future<Output = T>) -> T {
    tokio::pin!(look);
    match tokio::time::timeout(limit, &mut look).await {
        Ok(answer) => answer,
        Err(_) => {
            Counters::add(&shared.counters.timeouts);
            look.await
        }
    }
}

/// Whether `n` asks for a look: an announcement of the extension heard for the first time, on
/// the runs' or firings' channel. One that cancels a run running here tells its job.
fn heed(shared: &Shared, key: &[u8], heard: &mut Heard, n: &tokio_postgres::Notification) -> bool {
    let Some((number, data)) = announce::verify(key, n.channel(), n.payload()) else {
        Counters::add(&shared.counters.ignored_wakeups);
        return false;
    };
    if !heard.first(number) {
        Counters::add(&shared.counters.ignored_wakeups);
        return false;
    }
    if n.channel() != "rendezvous_cancel" {
        return true;
    }
    if let Ok(run_id) = data.parse::<i64>() {
        if let Some(cancel) = shared.cancels.lock().expect("cancels lock").get(&run_id) {
            cancel.send_replace(true);
        }
    }
    false
}

/// A new control connection within the call timeout (registering tasks and heartbeating are
/// commits, which a primary cut off from its synchronous standby never acknowledges).
async fn opened(shared: &Shared, stop: &mut watch::Receiver<bool>) -> Result<Control> {
    tokio::select! {
        r = open_within(shared, false) => r,
        _ = stop.changed() => Err(Error::Disconnected("stopping".into())),
    }
}

/// [`open_control`] within `call_timeout` (counted as a timeout past it).
pub(super) async fn open_within(shared: &Shared, first: bool) -> Result<Control> {
    let limit = shared.options.call_timeout;
    tokio::time::timeout(limit, open_control(shared, first)).await.unwrap_or_else(|_| {
        Counters::add(&shared.counters.timeouts);
        Err(crate::connection::no_answer(limit))
    })
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.changed() => {}
    }
}

/// One look at the database: heartbeat when due, claim what this host should run now, start it;
/// returns how long to sleep before the next look.
async fn tick(
    shared: &Arc<Shared>,
    client: &Client,
    view: &mut Option<LiveView>,
    offset: &mut Option<Offset>,
    last_heartbeat: &mut Instant,
) -> Result<Duration> {
    let o = &shared.options;
    super::executor::release_held_too_long(shared);
    // Job connections idle for a while are closed: a pool grown for a burst (a backlog after a
    // failover) would otherwise keep its size for good, and a server whose hosts all did so has
    // no connection left for a host that lost its own (#43: a fleet froze that way).
    shared.pool.close_idle(JOB_CONNECTION_IDLE);
    let heartbeat_due = view.is_none() || last_heartbeat.elapsed() >= o.heartbeat;
    if heartbeat_due {
        heartbeat(shared, client, view).await?;
        *last_heartbeat = Instant::now();
    }
    let hosts = view.as_ref().expect("read above").hosts();
    if shared.slots.available_permits() == 0 && !run_source::wants_refill(shared) {
        return Ok(o.poll); // woken early by a finishing firing
    }
    // A worker of workflows alone reads no firings: it measures the clocks' offset (for when
    // the next run becomes runnable) with each heartbeat instead.
    // A look for the queue's refill with every slot busy claims runs only.
    let (mut wait, mut next) = if shared.handlers.is_empty() || shared.slots.available_permits() == 0 {
        if heartbeat_due || offset.is_none() {
            let local_before = SystemTime::now();
            let db_now: SystemTime = sql::query_one(client, sql::CLOCK, &[]).await?.get(0);
            *offset = Some(Offset::measure(db_now, local_before, SystemTime::now()));
        }
        (o.poll, None)
    } else {
        firing_source::claim_due(shared, client, hosts, offset).await?
    };
    // Firings claimed now and work queued before go into the free slots, oldest claim first.
    start_queued(shared)?;
    // Admitted runs, with the slots the firings left.
    if !shared.workflows.is_empty() {
        match run_source::claim(shared, client).await? {
            RunLook::MoreWaiting => return Ok(MIN_TICK), // look again once slots free up
            RunLook::NextRunnable(Some(at)) => next = Some(next.map_or(at, |n| n.min(at))),
            RunLook::NextRunnable(None) => {}
        }
    }
    if shared.slots.available_permits() == 0 {
        return Ok(o.poll); // woken early by a finishing job
    }
    // Sleep until the database says something becomes due next (by its clock), at most `poll`.
    if let Some(next) = next {
        let offset = offset.expect("measured above");
        let (at_local, now_local) = match &o.clock {
            Clock::Database => (offset.to_local(next), SystemTime::now()),
            // A host with its own clock believes the database's instant is its own.
            Clock::Local(f) => (next, f()),
        };
        wait = wait.min(at_local.duration_since(now_local).unwrap_or_default());
    }
    // Never spin: an instant already past (the clocks' offset is measured, not exact) is
    // looked at again after a few milliseconds.
    Ok(wait.max(MIN_TICK))
}

/// This host's heartbeat, and its view of the live set read again when it changed (the whole
/// set only then: what a fleet of many hosts can afford); whether it runs retention follows.
async fn heartbeat(shared: &Shared, client: &Client, view: &mut Option<LiveView>) -> Result<()> {
    let o = &shared.options;
    let ok = membership::heartbeat(client, &shared.host_id, o.weight).await;
    metrics::counter!(signals::HEARTBEATS, "result" => if ok.is_ok() { "ok" } else { "error" }).increment(1);
    ok?;
    match view {
        Some(v) => {
            v.refresh(client).await?;
        }
        None => *view = Some(LiveView::read(client, o.staleness).await?),
    }
    let live = view.as_ref().expect("read above").hosts();
    let owner = live.winner(RETENTION_KEY) == Some(shared.host_id.as_str());
    shared.retention_owner.store(owner, Ordering::Relaxed);
    Ok(())
}
