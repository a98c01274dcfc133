//! Membership: heartbeats on the database clock, the live set, and a background heartbeat.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_postgres::GenericClient;

use crate::background::{Background, ShutdownReport};
use crate::session::Session;
use crate::{signals, sql, Database, Error, HostSet, Result};

/// The staleness window the SQL functions use by default.
pub const DEFAULT_STALENESS: Duration = Duration::from_secs(10);

fn check_host_id(host_id: &str) -> Result<()> {
    crate::error::check_id("host_id", host_id)
}

/// Marks `host_id` live now; returns the database's time of the heartbeat.
pub async fn heartbeat(client: &impl GenericClient, host_id: &str, weight: f64) -> Result<SystemTime> {
    check_host_id(host_id)?;
    let row = sql::query_one(client, sql::HEARTBEAT, &[&host_id, &weight]).await?;
    Ok(row.get(0))
}

/// Removes `host_id` from the set now; true if it was there.
pub async fn leave(client: &impl GenericClient, host_id: &str) -> Result<bool> {
    check_host_id(host_id)?;
    let row = sql::query_one(client, sql::LEAVE, &[&host_id]).await?;
    Ok(row.get(0))
}

/// The live host ids, sorted.
pub async fn live_hosts(client: &impl GenericClient, staleness: Duration) -> Result<Vec<String>> {
    let row = sql::query_one(client, sql::LIVE_HOSTS, &[&staleness.as_secs_f64()]).await?;
    Ok(row.get(0))
}

/// The live hosts with their weights.
pub async fn live_members(client: &impl GenericClient, staleness: Duration) -> Result<Vec<(String, f64)>> {
    let rows = sql::query(client, sql::LIVE_MEMBERS, &[&staleness.as_secs_f64()]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// A host's view of the live set that it keeps between heartbeats and brings up to date with
/// what changed: each [`refresh`](Self::refresh) costs the database two index probes while
/// nothing changed, and a read of the changes (hosts that joined, came back, changed weight,
/// left or went silent) when something did (`rendezvous.live_members_delta`), so a fleet of N
/// hosts costs O(N) a heartbeat round, not O(N²) as reading the whole set each time does, even
/// while hosts come and go.
///
/// With a staleness shorter than [`DEFAULT_STALENESS`], every refresh reads the whole set (a
/// host coming back after a shorter silence changes no version); so does a view older than the
/// changes the database keeps (10 minutes), and every view once every 10 minutes (a bound on
/// any drift: a view kept across a failover that lost commits).
///
/// ```no_run
/// # async fn run() -> rendezvous_client::Result<()> {
/// use rendezvous_client::membership::{LiveView, DEFAULT_STALENESS};
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// let mut view = LiveView::read(&client, DEFAULT_STALENESS).await?;
/// loop {
///     if view.refresh(&client).await? {
///         println!("the live set changed: {} hosts", view.hosts().len());
///     }
///     println!("tenant-42 belongs to {:?}", view.hosts().winner("tenant-42"));
///     tokio::time::sleep(std::time::Duration::from_secs(2)).await;
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LiveView {
    staleness: Duration,
    version: i64,
    read_at: SystemTime,
    /// The live hosts and their weights, as the changes left them.
    members: BTreeMap<String, f64>,
    hosts: HostSet,
    /// The database time of the last read of the whole set.
    whole_at: SystemTime,
}

/// How often a view kept by changes reads the whole set again all the same: a bound on any
/// drift (a view kept across a failover that lost commits, a reader in an old snapshot), at
/// one whole read per host per 10 minutes (the changes the database keeps).
const WHOLE_EVERY: Duration = Duration::from_secs(600);

impl LiveView {
    /// Reads the live set (hosts heard from within `staleness` of the database clock).
    pub async fn read(client: &impl GenericClient, staleness: Duration) -> Result<LiveView> {
        let mut view = LiveView {
            staleness,
            version: 0,
            read_at: SystemTime::UNIX_EPOCH,
            members: BTreeMap::new(),
            hosts: HostSet::new(Vec::<String>::new()),
            whole_at: SystemTime::UNIX_EPOCH,
        };
        view.update(client, None).await?;
        Ok(view)
    }

    /// Brings the view up to date; returns whether it changed (the set read again, or hosts
    /// added, changed or removed).
    pub async fn refresh(&mut self, client: &impl GenericClient) -> Result<bool> {
        let stale = self.read_at.duration_since(self.whole_at).unwrap_or_default() >= WHOLE_EVERY;
        let known = (!stale).then_some((self.version, self.read_at));
        self.update(client, known).await
    }

    /// The live hosts with their weights, for local HRW lookups.
    pub fn hosts(&self) -> &HostSet {
        &self.hosts
    }

    /// The live hosts, keeping no view.
    pub fn into_hosts(self) -> HostSet {
        self.hosts
    }

    /// The database time the view was last confirmed (read or found unchanged).
    pub fn read_at(&self) -> SystemTime {
        self.read_at
    }

    /// Reads what changed since `known` (the whole set when `None`, or when the database says
    /// so) and applies it.
    async fn update(
        &mut self,
        client: &impl GenericClient,
        known: Option<(i64, SystemTime)>,
    ) -> Result<bool> {
        let (version, read_at) = known.unzip();
        let row = sql::query_one(
            client,
            sql::LIVE_MEMBERS_DELTA,
            &[&self.staleness.as_secs_f64(), &version, &read_at],
        )
        .await?;
        let whole: bool = row.get(2);
        let ids: Vec<String> = row.get(3);
        let weights: Vec<f64> = row.get(4);
        let removed: Option<Vec<String>> = row.get(5);
        let (version, read_at): (i64, SystemTime) = (row.get(0), row.get(1));
        let touched = whole || !ids.is_empty() || removed.as_ref().is_some_and(|r| !r.is_empty());
        let first = self.whole_at == SystemTime::UNIX_EPOCH;
        let mut changed = false;
        // Nothing changed (the common answer): no copy of the view, nothing rebuilt.
        if touched {
            let mut members = if whole { BTreeMap::new() } else { self.members.clone() };
            for id in removed.unwrap_or_default() {
                members.remove(&id);
            }
            members.extend(ids.into_iter().zip(weights));
            changed = members != self.members;
            // The set is built before the view changes: a failure leaves the view as it was.
            if changed || first {
                self.hosts = HostSet::weighted(members.iter().map(|(id, w)| (id.as_str(), *w)))?;
                metrics::gauge!(signals::HOSTS_LIVE).set(members.len() as f64);
            }
            self.members = members;
        }
        if whole {
            self.whole_at = read_at;
        }
        self.version = version;
        self.read_at = read_at;
        Ok(changed)
    }
}

/// The server's winner for `key` over the live set (10 s staleness); `None` if nobody is live.
pub async fn winner(client: &impl GenericClient, key: &str) -> Result<Option<String>> {
    let row = sql::query_one(client, sql::WINNER_LIVE, &[&key]).await?;
    Ok(row.get(0))
}

/// Settings for a [`Membership`].
///
/// Non-exhaustive (later versions may add settings): start from [`Default`] and change what
/// you need with the `with_*` methods, or assign the public fields.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::MembershipOptions;
///
/// let options = MembershipOptions::default().with_weight(2.0).with_interval(Duration::from_millis(500));
/// assert_eq!(options.weight, 2.0);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MembershipOptions {
    /// This host's weight (share of keys relative to others). Default 1.
    pub weight: f64,
    /// Time between heartbeats. Default 2 s; keep it well under the staleness window (10 s).
    pub interval: Duration,
    /// How long one heartbeat (with its connect) may go without an answer. A heartbeat is a
    /// commit, which a primary cut off from its synchronous standby never acknowledges, and a
    /// dead network path never answers: past this, its statement is cancelled; a server that
    /// answers the cancel (only slow) keeps the connection and the heartbeat gets as long
    /// again; otherwise (or a cancelled wait for the standby) the connection is given up and
    /// made again (through a multi-host URL, to whichever server accepts writes). Default 10 s.
    pub call_timeout: Duration,
}

impl Default for MembershipOptions {
    fn default() -> Self {
        MembershipOptions {
            weight: 1.0,
            interval: Duration::from_secs(2),
            call_timeout: Duration::from_secs(10),
        }
    }
}

impl MembershipOptions {
    /// Sets [`weight`](Self::weight).
    #[must_use]
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }

    /// Sets [`interval`](Self::interval).
    #[must_use]
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }
}

/// What the background heartbeat last saw.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HeartbeatStatus {
    /// Database time of the last successful heartbeat.
    pub last_ok: Option<SystemTime>,
    /// The last failure, cleared by the next success.
    pub last_error: Option<String>,
}

/// A host's presence in the live set: heartbeats on its own connection in a background task
/// until [`Membership::shutdown`], which leaves the set at once. Cheap to clone: clones share
/// the heartbeat (read [`status`](Membership::status) from any task), which stops at `shutdown`
/// or when the last clone is dropped.
///
/// ```no_run
/// use std::time::Duration;
/// use rendezvous_client::{membership, Membership, MembershipOptions};
///
/// # async fn run() -> rendezvous_client::Result<()> {
/// let url = "postgres://app@db.internal/app";
/// let me = Membership::start(url, "host-1", MembershipOptions::default()).await?;
///
/// // Any session sees the live set, on the database clock.
/// let client = rendezvous_client::connect(url).await?;
/// let live = membership::live_hosts(&client, membership::DEFAULT_STALENESS).await?;
/// assert!(live.contains(&"host-1".to_owned()));
/// if let Some(error) = me.status().last_error {
///     eprintln!("heartbeat failing: {error}");
/// }
///
/// me.shutdown(Duration::from_secs(5)).await?; // leaves the set at once
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Membership {
    host_id: String,
    status: watch::Receiver<HeartbeatStatus>,
    background: Arc<Background<Result<()>>>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("host_id", &self.host_id)
            .field("status", &*self.status.borrow())
            .field("running", &self.background.is_running())
            .finish_non_exhaustive()
    }
}

impl Membership {
    /// Connects, sends the first heartbeat (so a bad URL, a missing extension or a bad host id
    /// fails here), then keeps heartbeating every `options.interval`, reconnecting if the
    /// connection drops.
    pub async fn start(
        database: impl Into<Database>,
        host_id: &str,
        options: MembershipOptions,
    ) -> Result<Membership> {
        let database = database.into();
        check_host_id(host_id)?;
        if options.interval.is_zero() || options.call_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "heartbeat interval and call timeout must be greater than zero".into(),
            ));
        }
        let session = Session::new(database, session_name(host_id), options.call_timeout)
            .counting_reconnects("membership");
        let first = session
            .call_once(|c| async move {
                crate::connection::check_extension(&*c).await?;
                heartbeat(&*c, host_id, options.weight).await
            })
            .await?;
        let (stop, stop_rx) = watch::channel(false);
        let (status_tx, status) = watch::channel(HeartbeatStatus { last_ok: Some(first), last_error: None });
        let task = tokio::spawn(run(session, host_id.to_owned(), options, stop_rx, status_tx));
        Ok(Membership {
            host_id: host_id.to_owned(),
            status,
            background: Arc::new(Background::new(stop, task)),
        })
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// The last heartbeat's outcome.
    pub fn status(&self) -> HeartbeatStatus {
        self.status.borrow().clone()
    }

    /// Stops heartbeating and leaves the live set, so the rest of the fleet sees the host gone
    /// at once; waits at most `deadline` (the leave call itself at most twice `call_timeout`
    /// and the cancel's bound, as a heartbeat).
    /// [`ShutdownReport::left`] says whether the leave was recorded. Stops the heartbeat for
    /// every clone of this handle.
    pub async fn shutdown(self, deadline: Duration) -> Result<ShutdownReport> {
        self.background
            .shutdown_once(async {
                let mut report = ShutdownReport::default();
                if let Some(Some(outcome)) = self.background.stop(deadline).await {
                    report.on_time = true;
                    match outcome? {
                        Ok(()) => report.left = true,
                        Err(e) => {
                            tracing::warn!(host_id = %self.host_id, error = %e, "could not leave the live set")
                        }
                    }
                }
                Ok(report)
            })
            .await
    }
}

/// Heartbeats every `options.interval` until stopped, then leaves the live set. Each call is
/// bounded by the session: a commit that never returns must not stop this host from trying
/// again, nor its shutdown; the connection it waited on is given up.
async fn run(
    session: Session,
    host_id: String,
    options: MembershipOptions,
    mut stop: watch::Receiver<bool>,
    status: watch::Sender<HeartbeatStatus>,
) -> Result<()> {
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first heartbeat was sent by start()
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        let host = host_id.as_str();
        let beat = session.call_once(|c| async move { heartbeat(&*c, host, options.weight).await });
        let outcome = tokio::select! {
            r = beat => r,
            _ = stop.changed() => break,
        };
        let result = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!(signals::HEARTBEATS, "result" => result).increment(1);
        status.send_modify(|s| match outcome {
            Ok(at) => {
                s.last_ok = Some(at);
                s.last_error = None;
            }
            Err(e) => {
                tracing::warn!(host_id = %host_id, error = %e, "heartbeat failed");
                s.last_error = Some(e.to_string());
            }
        });
    }
    session.call_once(|c| async move { leave(&*c, &host_id).await }).await?;
    Ok(())
}

/// The `application_name` of a host's membership session.
fn session_name(host_id: &str) -> String {
    format!("rendezvous membership {host_id}")
}
