//! Leader election through the client: real processes killed, backends terminated, a server
//! restart, many candidates, fencing against a racing takeover, and a transaction-mode pooler.
use std::process::Stdio;
use std::time::{Duration, Instant};

use rendezvous_client::leader::{self, assert_leader};
use rendezvous_client::{Error, LeaderElector, LeaderOptions};
use rendezvous_tests::{following_sessions, Cluster, Pgbouncer, TestDb};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_postgres::error::SqlState;

/// Quick enough for tests; a refresh may take up to 500 ms before the leader steps down, so a
/// busy machine's scheduling delays do not depose leaders the tests expect to keep leading.
fn fast() -> LeaderOptions {
    LeaderOptions::default().with_refresh(Duration::from_millis(500)).with_lease(None)
}

async fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

async fn start(url: &str, group: &str, candidate: &str) -> LeaderElector {
    LeaderElector::start(url, group, candidate, fast()).await.unwrap()
}

/// An elector whose own tick is a minute away: if it takes over within seconds, the leader's
/// announcement woke it, not its polling.
async fn start_slow(url: &str, group: &str, candidate: &str) -> LeaderElector {
    let slow = LeaderOptions::default().with_refresh(Duration::from_secs(60)).with_lease(None);
    LeaderElector::start(url, group, candidate, slow).await.unwrap()
}

/// Waits until `elector` follows `leader` (it claimed and was told who leads).
async fn wait_until_follows(elector: &LeaderElector, leader: &str) {
    wait_until(&format!("{} to follow {leader}", elector.candidate()), Duration::from_secs(10), || {
        !elector.is_leader() && elector.leadership().leader.as_deref() == Some(leader)
    })
    .await;
}

/// Backends holding the leader lock of `group` (`rendezvous.leader_locks`, from pg_locks).
async fn lock_holders(client: &tokio_postgres::Client, group: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM rendezvous.leader_locks WHERE group_name = $1 AND granted",
            &[&group],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_electors_one_leads_and_graceful_shutdown_hands_over_on_the_announcement() {
    let db = TestDb::new("lead_two").await;
    let leader = start(&db.url, "agent-key", "a").await;
    wait_until("a leads", Duration::from_secs(5), || leader.is_leader()).await;
    let follower = start_slow(&db.url, "agent-key", "b").await;
    wait_until_follows(&follower, "a").await;
    assert!(leader.is_leader(), "exactly one leads");
    let epoch = leader.epoch().unwrap();
    assert_eq!(follower.epoch(), None);
    let client = db.connect().await;
    let now = leader::leader(&client, "agent-key").await.unwrap();
    assert_eq!(now.leader.as_deref(), Some(leader.candidate()));
    assert_eq!(now.epoch, epoch);

    // a resigns as it shuts down; b hears it and takes over, long before its own tick.
    leader.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    wait_until("the follower to take over", Duration::from_secs(10), || follower.is_leader()).await;
    assert_eq!(follower.epoch(), Some(epoch + 1));
    follower.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    assert_eq!(leader::leader(&client, "agent-key").await.unwrap().leader, None);
    assert_eq!(lock_holders(&client, "agent-key").await, 0);
}

/// A candidate in its own OS process; its stdout says `leader <epoch>` / `follower`.
pub(crate) struct Process {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    last: String,
}

impl Process {
    /// A candidate refreshing every `refresh_ms`.
    pub(crate) fn spawn(url: &str, group: &str, candidate: &str, refresh_ms: u64) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_elector"))
            .args([url, group, candidate, &refresh_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = r.next_line().await {
                let _ = tx.send(line);
            }
        });
        Process { child, lines, last: String::new() }
    }

    /// Waits for a `leader <epoch>` line; returns the epoch.
    pub(crate) async fn wait_leader(&mut self, timeout: Duration) -> Option<i64> {
        let deadline = Instant::now() + timeout;
        while !self.last.starts_with("leader") {
            match tokio::time::timeout_at(deadline.into(), self.lines.recv()).await {
                Ok(Some(line)) => self.last = line,
                _ => return None,
            }
        }
        self.last.strip_prefix("leader ").map(|e| e.parse().unwrap())
    }

    /// Waits for a `follower` line.
    pub(crate) async fn wait_follower(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.last != "follower" {
            match tokio::time::timeout_at(deadline.into(), self.lines.recv()).await {
                Ok(Some(line)) => self.last = line,
                _ => return false,
            }
        }
        true
    }

    fn signal(&mut self, signal: &str) {
        let pid = self.child.id().unwrap();
        std::process::Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    }

    pub(crate) fn sigkill(&mut self) {
        let pid = self.child.id().unwrap();
        std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_of_the_leader_process_hands_over_on_its_sessions_announcement() {
    rendezvous_tests::native_only!("a leader's session ending is not announced in the portable edition: followers take over at their next refresh");
    let db = TestDb::new("lead_kill").await;
    let client = db.connect().await;
    let mut first = Process::spawn(&db.url, "shared-agent", "p1", 500);
    let epoch = first.wait_leader(Duration::from_secs(10)).await.expect("p1 leads");
    // p2 follows, listening; its own tick is a minute away.
    let mut second = Process::spawn(&db.url, "shared-agent", "p2", 60_000);
    wait_until_follower_listens(&client, "shared-agent").await;
    assert_eq!(second.wait_leader(Duration::from_millis(300)).await, None);

    // p1's session ends with its process; the session announces it; p2 takes over at once
    // (how fast is a benchmark's business: scripts/bench.sh failover).
    first.sigkill();
    let new_epoch = second.wait_leader(Duration::from_secs(10)).await.expect("p2 takes over");
    assert_eq!(new_epoch, epoch + 1);
    let now = leader::leader(&client, "shared-agent").await.unwrap();
    assert_eq!((now.leader.as_deref(), now.epoch), (Some("p2"), epoch + 1));
    drop(second.child.stdin.take()); // graceful: resigns
    second.child.wait().await.unwrap();
    assert_eq!(lock_holders(&client, "shared-agent").await, 0);
}

/// A leader that stops confirming while its session lives (SIGSTOP: the same as a blocked
/// runtime or a silently dead network path, for the server) loses the group within its lease
/// plus the server's grace, with no keepalive settings: the next candidate's claim ends its
/// session (#23). Its epoch's fenced writes are refused from the takeover on, and once resumed
/// it follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_leader_is_replaced_within_its_lease_and_follows_when_it_resumes() {
    let db = TestDb::new("lead_stop").await;
    let client = db.connect().await;
    let mut first = Process::spawn(&db.url, "stalled", "p1", 300); // lease 600 ms (2 × refresh)
    let epoch = first.wait_leader(Duration::from_secs(10)).await.expect("p1 leads");
    let second = start(&db.url, "stalled", "p2").await; // refreshes every 500 ms
    wait_until_follows(&second, "p1").await;

    first.signal("-STOP");
    let took = wait_until("p2 takes over", Duration::from_secs(15), || second.is_leader()).await;
    // The lease (600 ms) and grace (1 s) from p1's last confirmation, then p2's next claim
    // (within 500 ms), and room for a busy machine; a lease-less design waits for keepalives.
    assert!(took < Duration::from_secs(5), "p2 took over {took:?} after p1 stopped");
    assert_eq!(second.epoch(), Some(epoch + 1));
    let mut c2 = db.connect().await;
    let tx = c2.transaction().await.unwrap();
    let err = assert_leader(&tx, "stalled", epoch).await.unwrap_err();
    assert_eq!(err.sqlstate().map(|c| c.code()), Some("RZ001"), "{err}");
    drop(tx);

    first.signal("-CONT");
    assert!(first.wait_follower(Duration::from_secs(10)).await, "p1 follows once resumed");
    let now = leader::leader(&client, "stalled").await.unwrap();
    assert_eq!((now.leader.as_deref(), now.epoch), (Some("p2"), epoch + 1));
    second.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

/// A leader whose network path dies silently (every packet of its process dropped both ways,
/// without a reset: the server sees its session live on, and no keepalive is tuned) loses the
/// group within its lease plus the server's grace, as a stopped one does (#23). Needs root and
/// iptables (scripts/setup.sh installs it; the test machines run as root).
#[tokio::test(flavor = "multi_thread")]
async fn a_silently_partitioned_leader_is_replaced_within_its_lease() {
    let db = TestDb::new("lead_cut").await;
    let mut first = Process::spawn(&db.url, "cut", "p1", 300); // lease 600 ms (2 × refresh)
    let epoch = first.wait_leader(Duration::from_secs(10)).await.expect("p1 leads");
    let second = start(&db.url, "cut", "p2").await;
    wait_until_follows(&second, "p1").await;
    // Its open connection and any new one it makes: the host is cut off, not just a socket.
    let pid = first.child.id().unwrap();
    let cut = rendezvous_cli::partition::Partition::cut(pid, &format!("rendezvous-test-lead-cut-{pid}"))
        .expect("iptables and cgroup2 (root)");
    let took = wait_until("p2 takes over", Duration::from_secs(15), || second.is_leader()).await;
    assert!(took < Duration::from_secs(5), "p2 took over {took:?} after p1 was cut off");
    assert_eq!(second.epoch(), Some(epoch + 1));
    cut.heal();
    first.sigkill();
    second.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

/// Waits until an elector of `group` follows: it claimed, lost, and now idles outside any
/// statement (listening for the leader's announcement) without the lock.
/// Waits until a follower of `group` idles; returns the following sessions' pids as seen then
/// (a second look could catch the follower mid-claim).
async fn wait_until_follower_listens(client: &tokio_postgres::Client, group: &str) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let pids = following_sessions(client, group).await;
        if !pids.is_empty() {
            return pids;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no follower of {group} idles");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn terminated_backend_steps_the_leader_down_and_the_follower_takes_over() {
    let db = TestDb::new("lead_term").await;
    let admin = db.connect().await;
    let a = start(&db.url, "g", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let epoch = a.epoch().unwrap();
    let b = start(&db.url, "g", "b").await;
    wait_until_follower_listens(&admin, "g").await;
    let mut a_changes = a.changes();
    a_changes.borrow_and_update();

    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rendezvous leader g a' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    wait_until("b leads", Duration::from_secs(2), || b.is_leader()).await;
    assert_eq!(b.epoch(), Some(epoch + 1));
    // a said it stepped down, and why (it may read its connection's end a moment after b won:
    // the server tells both at once).
    tokio::time::timeout(Duration::from_secs(2), a_changes.wait_for(|l| !l.is_leader))
        .await
        .unwrap()
        .unwrap();
    let reason = a.leadership().reason;
    assert!(!reason.is_empty());
    // a comes back as a follower of b.
    wait_until("a follows again", Duration::from_secs(5), || a.leadership().leader.as_deref() == Some("b"))
        .await;
    assert!(!a.is_leader());
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    b.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn server_restart_elects_one_leader_again_with_a_higher_epoch() {
    let cluster = Cluster::start().await.unwrap();
    let a = start(&cluster.url(), "g", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let b = start(&cluster.url(), "g", "b").await;
    wait_until_follows(&b, "a").await;
    let before = a.epoch().unwrap();

    cluster.restart().unwrap();
    wait_until("a leader after the restart", Duration::from_secs(20), || a.is_leader() || b.is_leader())
        .await;
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    wait_until_follows(other, leader.candidate()).await;
    assert!(a.is_leader() ^ b.is_leader(), "exactly one leads after the restart");
    let after = a.epoch().or(b.epoch()).unwrap();
    assert!(after > before, "epoch {after} after the restart is not above {before}");
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    b.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn many_candidates_never_two_leaders_for_one_epoch() {
    let db = TestDb::new("lead_many").await;
    let admin = db.connect().await;
    let mut electors = Vec::new();
    for i in 0..10 {
        electors.push(start(&db.url, "crowd", &format!("c{i}")).await);
    }
    let mut seen_epochs = std::collections::BTreeSet::new();
    for round in 0..12 {
        // Each round starts once a new term is led (the previous round deposed its leader).
        wait_until("a new term", Duration::from_secs(10), || {
            electors.iter().filter_map(|e| e.epoch()).any(|epoch| !seen_epochs.contains(&epoch))
        })
        .await;
        // Sample for a while: at most one leader per epoch, at most one lock holder.
        let until = Instant::now() + Duration::from_millis(150);
        while Instant::now() < until {
            let leading: Vec<i64> = electors.iter().filter_map(|e| e.epoch()).collect();
            let mut distinct = leading.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), leading.len(), "two electors lead epoch(s) {leading:?}");
            seen_epochs.extend(leading);
            assert!(lock_holders(&admin, "crowd").await <= 1);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Depose the newest term's leader (a deposed one may not have noticed yet): by
        // terminating its backend, or by restarting it.
        let Some(i) =
            (0..electors.len()).filter(|&i| electors[i].is_leader()).max_by_key(|&i| electors[i].epoch())
        else {
            continue;
        };
        if round % 2 == 0 {
            let name = format!("rendezvous leader crowd {}", electors[i].candidate());
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
                    &[&name],
                )
                .await
                .unwrap();
        } else {
            let e = electors.remove(i);
            let name = e.candidate().to_owned();
            e.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
            electors.push(start(&db.url, "crowd", &name).await);
        }
    }
    assert!(seen_epochs.len() >= 12, "leadership changed hands: {seen_epochs:?}");
    for e in electors {
        e.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deposed_leaders_fenced_write_commits_before_the_takeover_or_fails() {
    let db = TestDb::new("lead_fence").await;
    let admin = db.connect().await;
    admin.batch_execute("CREATE TABLE decisions (epoch bigint, what text)").await.unwrap();
    let a = start(&db.url, "fence", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let old = a.epoch().unwrap();
    let b = start(&db.url, "fence", "b").await;
    wait_until_follower_listens(&admin, "fence").await;

    // a's guarded write is in flight (fenced, not committed) when a's session dies.
    let mut writer = db.connect().await;
    let tx = writer.transaction().await.unwrap();
    assert_leader(&tx, "fence", old).await.unwrap();
    tx.execute("INSERT INTO decisions VALUES ($1, 'in flight')", &[&old]).await.unwrap();
    admin
        .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rendezvous leader fence a' AND datname = current_database()", &[])
        .await
        .unwrap();
    // b has the lock but cannot open its epoch while the fenced write is open: its epoch bump
    // waits for the write's row lock.
    let start = Instant::now();
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity
                  WHERE application_name = 'rendezvous leader fence b' AND wait_event_type = 'Lock'
                    AND datname = pg_catalog.current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 1 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "b never waited for the fenced write");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!b.is_leader(), "the new epoch must wait for the in-flight fenced write");
    tx.commit().await.unwrap();
    wait_until("b leads", Duration::from_secs(2), || b.is_leader()).await;
    assert_eq!(b.epoch(), Some(old + 1));

    // a's next guarded write fails, in its own transaction, and writes nothing.
    let tx = writer.transaction().await.unwrap();
    let err = assert_leader(&tx, "fence", old).await.unwrap_err();
    assert_eq!(err.sqlstate().map(|c| c.code()), Some("RZ001"), "{err}");
    drop(tx);
    // b's guarded write succeeds.
    let tx = writer.transaction().await.unwrap();
    assert_leader(&tx, "fence", old + 1).await.unwrap();
    tx.execute("INSERT INTO decisions VALUES ($1, 'new leader')", &[&(old + 1)]).await.unwrap();
    tx.commit().await.unwrap();
    let rows: Vec<(i64, String)> = admin
        .query("SELECT epoch, what FROM decisions ORDER BY epoch", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(old, "in flight".to_owned()), (old + 1, "new leader".to_owned())]);
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    b.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_claim_leaves_no_lock_and_resign_releases_once() {
    let db = TestDb::new("lead_abort").await;
    let mut client = db.connect().await;
    let tx = client.transaction().await.unwrap();
    assert!(leader::try_lead(&tx, "g", "x").await.unwrap().is_leader);
    tx.rollback().await.unwrap();
    assert_eq!(lock_holders(&client, "g").await, 0, "the aborted claim's lock was given back");
    // Repeated claims by the holder never stack: one resign releases.
    for _ in 0..5 {
        let c = leader::try_lead(&client, "g", "x").await.unwrap();
        assert!(c.is_leader);
        assert_eq!(c.epoch, 1);
    }
    assert!(leader::resign(&client, "g").await.unwrap());
    assert_eq!(lock_holders(&client, "g").await, 0);
    assert!(!leader::resign(&client, "g").await.unwrap());
    // An application's own bigint advisory lock with the very same bits is another lock.
    let lock_id: i32 = client
        .query_one("SELECT lock_id FROM rendezvous.leaders WHERE group_name = 'g'", &[])
        .await
        .unwrap()
        .get(0);
    let app = db.connect().await;
    app.execute(
        "SELECT pg_advisory_lock(($1::bigint << 32) | $2::bigint)",
        &[&1_380_211_286i64, &(lock_id as i64)],
    )
    .await
    .unwrap();
    let other = db.connect().await;
    assert!(leader::try_lead(&other, "g", "y").await.unwrap().is_leader);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_mode_pooler_is_refused_not_double_led() {
    let cluster = Cluster::start().await.unwrap();
    let bouncer = Pgbouncer::transaction_mode(&cluster, 1).await;
    let a = start(&bouncer.url(), "pooled", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    // b's statements land on the same server session as a's lock.
    let b = start(&bouncer.url(), "pooled", "b").await;
    let outcome = tokio::time::timeout(Duration::from_secs(5), b.join()).await.expect("b stops by itself");
    match outcome {
        Err(Error::PoolerDetected(why)) => assert!(why.contains("pooler"), "{why}"),
        other => panic!("expected PoolerDetected, got {other:?}"),
    }
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    let direct = rendezvous_tests::connect(&cluster.url()).await;
    let err = direct.query("SELECT * FROM rendezvous.try_lead('pooled', '')", &[]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
    drop(bouncer);
}

#[tokio::test(flavor = "multi_thread")]
async fn shutting_down_a_follower_leaks_no_lock() {
    let db = TestDb::new("lead_cancel").await;
    let admin = db.connect().await;
    let a = start(&db.url, "g", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    for round in 0..5 {
        let f = start(&db.url, "g", &format!("f{round}")).await;
        wait_until_follower_listens(&admin, "g").await;
        f.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    }
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    // a gave the lock back (or its session ended, if a busy machine delayed its resign past
    // the refresh); then no stopped follower may pick it up.
    let start = Instant::now();
    while lock_holders(&admin, "g").await != 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the stopped leader's lock was never freed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(lock_holders(&admin, "g").await, 0, "no stopped follower picked the lock up");
    assert_eq!(leader::leader(&admin, "g").await.unwrap().leader, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_holds_no_snapshot_and_no_lock_and_takes_over_on_the_announcement() {
    rendezvous_tests::native_only!("a leader's session ending is not announced in the portable edition: followers take over at their next refresh");
    let db = TestDb::new("lead_idle").await;
    let admin = db.connect().await;
    let a = start(&db.url, "g", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    // b's own tick is a minute away: only the leader's announcement can make it take over soon.
    let slow = LeaderOptions::default().with_refresh(Duration::from_secs(60)).with_lease(None);
    let b = LeaderElector::start(&db.url, "g", "b", slow).await.unwrap();
    let b_pid = wait_until_follower_listens(&admin, "g").await[0];

    // While it follows, b's session holds back no VACUUM (no xmin) and holds no lock at all.
    // Sampled until seen so for up to 5 s: an idle listener takes a snapshot for an instant
    // when it is signalled to read the notification queue (other databases' NOTIFYs do that
    // too), but a follower that kept one (waiting in a transaction) would never be seen free.
    let sample =
        "SELECT a.backend_xmin IS NULL, (SELECT count(*) FROM pg_catalog.pg_locks k WHERE k.pid = a.pid)
                    FROM pg_catalog.pg_stat_activity a WHERE a.pid = $1";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let row = admin.query_one(sample, &[&b_pid]).await.unwrap();
        let (no_snapshot, locks) = (row.get::<_, bool>(0), row.get::<_, i64>(1));
        if no_snapshot && locks == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a following session kept a snapshot (xmin free: {no_snapshot}) or {locks} locks for 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // DDL on the extension's tables does not queue behind the follower (nor the API behind it).
    admin
        .batch_execute(
            "SET lock_timeout = '2s';
             BEGIN; LOCK TABLE rendezvous.leaders, rendezvous.hosts IN ACCESS EXCLUSIVE MODE; COMMIT;
             RESET lock_timeout;",
        )
        .await
        .unwrap();

    // The leader's session ends (its backend is terminated): b hears it and takes over.
    let a_pid: i32 = admin
        .query_one("SELECT pid FROM rendezvous.leader_locks WHERE group_name = 'g' AND granted", &[])
        .await
        .unwrap()
        .get(0);
    admin.execute("SELECT pg_catalog.pg_terminate_backend($1)", &[&a_pid]).await.unwrap();
    wait_until("b takes over well before its own tick", Duration::from_secs(10), || b.is_leader()).await;
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    b.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

/// An operator's step-down request: the leader's elector resigns at its next refresh, and a
/// follower (woken by the announcement, not its own minute-long tick) takes over.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_asked_to_step_down_resigns_at_its_next_refresh_and_a_follower_takes_over() {
    let db = TestDb::new("step_down").await;
    let a = start(&db.url, "ops", "a").await;
    wait_until("a to lead", Duration::from_secs(10), || a.is_leader()).await;
    let b = start_slow(&db.url, "ops", "b").await;
    wait_until_follows(&b, "a").await;
    let admin = db.connect().await;
    let row = admin
        .query_one("SELECT requested, leader, epoch FROM rendezvous.request_step_down('ops', 'test')", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, bool>(0), row.get::<_, Option<String>>(1), row.get::<_, i64>(2)),
        (true, Some("a".into()), 1)
    );
    let took = wait_until("b to take over", Duration::from_secs(10), || b.is_leader()).await;
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(b.epoch(), Some(2));
    // The server's answer to a's refresh and its announcement to b leave at the same commit,
    // so a may read its answer a moment after b won (is_leader() is a local view; fenced
    // writes are what refuse a's epoch 1 from then on). It then follows b.
    wait_until_follows(&a, "b").await;
    assert_eq!(a.leadership().epoch, Some(2));
    // a's view says that an operator ended its term, and why.
    assert_eq!(a.leadership().operator_reason.as_deref(), Some("test"), "{:?}", a.leadership());
    assert_eq!(b.leadership().operator_reason, None);
    // A clone shares the election: its shutdown resigns b's term and stops every handle.
    let b_clone = b.clone();
    assert_eq!(b_clone.epoch(), Some(2));
    let report = b_clone.shutdown(Duration::from_secs(10)).await.unwrap();
    assert_eq!((report.released, report.on_time), (1, true), "{report:?}");
    assert!(!b.is_leader());
    let again = b.shutdown(Duration::from_secs(10)).await.unwrap();
    assert_eq!(again, report, "a later shutdown of another clone returns the first one's report");
    wait_until("a takes over from the resigned b", Duration::from_secs(10), || a.is_leader()).await;
    let report = a.shutdown(Duration::from_secs(10)).await.unwrap();
    assert_eq!(report.released, 1);
}

/// A leader's own fenced write, held open longer than its lease, does not stop it confirming:
/// the confirmation writes elsewhere than the row the fenced write holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_fenced_write_does_not_depose_its_own_leader() {
    let db = TestDb::new("lead_long_write").await;
    let a = start(&db.url, "long", "a").await;
    wait_until("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let epoch = a.epoch().unwrap();
    let mut writer = db.connect().await;
    let tx = writer.transaction().await.unwrap();
    assert_leader(&tx, "long", epoch).await.unwrap();
    // Three leases (2 × refresh of 500 ms) with the leaders row held FOR SHARE: a refresh
    // that waited behind it would time out at the first.
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(3) {
        assert!(a.is_leader(), "the leader stepped down behind its own fenced write: {:?}", a.leadership());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tx.commit().await.unwrap();
    assert_eq!(a.epoch(), Some(epoch));
    a.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

/// Leader groups never fill a server's shared lock table (#42): at 3/4 of its size the next
/// claim is refused with a plain 53200 that says how full it is and what to raise, never a
/// Rust backtrace; the groups already held stay held and confirm their terms, the session goes
/// on working, and a new session still connects (0.3.0 let groups fill the table: then every
/// new connection failed with "out of shared memory" until the holders' sessions ended).
#[tokio::test(flavor = "multi_thread")]
async fn leader_groups_stop_at_three_quarters_of_the_lock_table_and_new_sessions_still_connect() {
    use rendezvous_cli::cluster::ClusterOptions;
    let settings = [("max_locks_per_transaction", "10"), ("max_connections", "10"), ("fsync", "off")];
    let cluster = Cluster::start_with(&ClusterOptions {
        settings: settings.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let client = rendezvous_tests::connect(&cluster.url()).await;
    let size: i64 = client.query_one("SELECT rendezvous._lock_table_size()", &[]).await.unwrap().get(0);
    let mut led = 0;
    let error = loop {
        assert!(led < 100_000, "the lock table never filled");
        match leader::try_lead(&client, &format!("g{led}"), "c").await {
            Ok(l) => {
                assert!(l.is_leader);
                led += 1;
            }
            Err(e) => break e,
        }
    };
    let Error::Db(db) = &error else { panic!("not a database error: {error:?}") };
    let db = db.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::OUT_OF_MEMORY, "{db:?}");
    assert!(db.message().contains("no new leader term while the server's lock table is this full"), "{db:?}");
    let hint = db.hint().unwrap_or_default();
    assert!(hint.contains("max_locks_per_transaction (10)") && hint.contains("3/4"), "{hint}");
    assert!(db.detail().is_none_or(|d| !d.contains("panic") && !d.contains("backtrace")), "{db:?}");
    assert!(led >= 100, "only {led} groups before the guard");
    assert!(led as i64 <= size * 3 / 4, "{led} groups led past 3/4 of a table of {size}");
    // A new session connects and works: the margin is what it needs.
    let newcomer = rendezvous_tests::connect(&cluster.url()).await;
    let one: i32 = newcomer.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    // What was held is still held and still confirms; the refused group's lock went back.
    let held: i64 = client
        .query_one("SELECT count(*) FROM rendezvous.leaders WHERE pid = pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, led as i64);
    assert!(leader::try_lead(&client, "g0", "c").await.unwrap().is_leader);
    let refused: i64 = newcomer
        .query_one(
            "SELECT count(*) FROM rendezvous.leader_locks WHERE group_name = $1",
            &[&format!("g{led}")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(refused, 0, "the refused claim kept its lock");
    // Other work can still fill the table to the end (here the newcomer's advisory locks, kept
    // by its session past the statement's error): a claim then meets PostgreSQL's own
    // "out of shared memory", explained the same way.
    let filled =
        newcomer.batch_execute("SELECT pg_advisory_lock(i) FROM generate_series(1, 1000000) i").await;
    assert!(filled.is_err(), "a million advisory locks fitted in a table of {size}");
    let error = leader::try_lead(&client, "one-more", "c").await.expect_err("a claim in a full lock table");
    let Error::Db(db) = &error else { panic!("not a database error: {error:?}") };
    let db = db.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::OUT_OF_MEMORY, "{db:?}");
    assert!(db.message().contains("lock table is full"), "{db:?}");
    assert!(db.hint().unwrap_or_default().contains("max_locks_per_transaction (10)"), "{db:?}");
    newcomer.batch_execute("SELECT pg_advisory_unlock_all()").await.unwrap();
    assert!(leader::try_lead(&client, "g0", "c").await.unwrap().is_leader);
    drop(client);
}

/// A silent leader's recorded pid that now names another backend (a reused pid) while the
/// leader lives on holding the lock: a candidate past the lease terminates nobody. 0.3.0
/// checked only that the pid was alive and that someone held the lock, and ended the innocent
/// backend (a superuser's session, a walsender: #39).
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_leaders_reused_pid_is_never_terminated() {
    let db = TestDb::new("leader_pid_reuse").await;
    let leader = db.connect().await;
    let led: bool = leader
        .query_one("SELECT is_leader FROM rendezvous.try_lead('g', 'a', false, '1 second')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(led);
    let innocent = db.connect().await;
    let innocent_pid: i32 = innocent.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    // The term is long silent, and its recorded pid is the innocent backend's, as if reused.
    let admin = db.connect().await;
    admin
        .batch_execute(&format!(
            "UPDATE rendezvous.leaders SET pid = {innocent_pid}, since = now() - interval '1 hour' WHERE group_name = 'g';
             UPDATE rendezvous.leader_confirmations SET confirmed_at = now() - interval '1 hour' WHERE group_name = 'g';"
        ))
        .await
        .unwrap();
    let candidate = db.connect().await;
    let took: bool = candidate
        .query_one("SELECT is_leader FROM rendezvous.try_lead('g', 'b', false, '1 second')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!took, "the real leader still holds the lock");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        innocent.query_one("SELECT 1", &[]).await.is_ok(),
        "the backend that reused the pid was terminated"
    );
    assert!(leader.query_one("SELECT 1", &[]).await.is_ok());
}
