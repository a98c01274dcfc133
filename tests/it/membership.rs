//! Membership through the client: heartbeats, leave on shutdown, staleness on the DB clock.
use std::time::{Duration, SystemTime};

use rendezvous_client::membership::{self, heartbeat, leave, live_hosts};
use rendezvous_client::{Membership, MembershipOptions};
use rendezvous_tests::TestDb;

fn fast() -> MembershipOptions {
    MembershipOptions::default().with_interval(Duration::from_millis(100))
}

/// Polls `cond` until it holds, failing after `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !cond().await {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn members_heartbeat_and_shutdown_leaves_at_once() {
    let db = TestDb::new("members").await;
    let client = db.connect().await;
    let mut members = Vec::new();
    for h in ["alpha", "bravo", "charlie"] {
        members.push(Membership::start(&db.url, h, fast()).await.unwrap());
    }
    eventually("all three live", Duration::from_secs(10), || async {
        live_hosts(&client, Duration::from_secs(1)).await.unwrap() == ["alpha", "bravo", "charlie"]
    })
    .await;
    for m in &members {
        assert!(m.status().last_error.is_none(), "{:?}", m.status());
    }
    let bravo = members.remove(1);
    // A clone reads the same heartbeat, and shutting one handle down stops both.
    let bravo_clone = bravo.clone();
    let report = bravo.shutdown(Duration::from_secs(10)).await.unwrap();
    assert!(report.left && report.on_time, "{report:?}");
    assert!(format!("{bravo_clone:?}").contains("running: false"), "{bravo_clone:?}");
    // Gone at once, without waiting for staleness.
    assert_eq!(live_hosts(&client, Duration::from_secs(60)).await.unwrap(), ["alpha", "charlie"]);
    // The server's winner over the live set is the client's local answer.
    let set = rendezvous_client::hrw::live_host_set(&client, Duration::from_secs(10)).await.unwrap();
    for i in 0..200 {
        let key = format!("task-{i}");
        assert_eq!(membership::winner(&client, &key).await.unwrap().as_deref(), set.winner(&key));
    }
    for m in members {
        m.shutdown(Duration::from_secs(10)).await.unwrap();
    }
    assert!(live_hosts(&client, Duration::from_secs(60)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_host_leaves_after_the_staleness_window() {
    let db = TestDb::new("stale").await;
    let client = db.connect().await;
    let steady = Membership::start(&db.url, "steady", fast()).await.unwrap();
    heartbeat(&client, "silent", 1.0).await.unwrap();
    let window = Duration::from_millis(1500);
    assert_eq!(live_hosts(&client, window).await.unwrap(), ["silent", "steady"]);
    // "silent" sends nothing: once the window has passed by the database's clock, it is out,
    // while "steady" stays in.
    eventually("silent to go stale", Duration::from_secs(10), || async {
        live_hosts(&client, window).await.unwrap() == ["steady"]
    })
    .await;
    let silent_for: f64 = client
        .query_one(
            "SELECT extract(epoch FROM clock_timestamp() - last_seen)::float8 FROM rendezvous.status_hosts
              WHERE host_id = 'silent'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(silent_for >= window.as_secs_f64(), "left after {silent_for} s, inside the window");
    // A wider window still sees it: staleness is the caller's choice, not a deletion.
    assert_eq!(live_hosts(&client, Duration::from_secs(30)).await.unwrap(), ["silent", "steady"]);
    steady.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_are_stamped_by_the_database_clock() {
    let db = TestDb::new("clock").await;
    // Two hosts whose sessions run in time zones 26 hours apart.
    let east = db.connect().await;
    east.batch_execute("SET TimeZone = 'Pacific/Kiritimati'").await.unwrap();
    let west = db.connect().await;
    west.batch_execute("SET TimeZone = 'Etc/GMT+12'").await.unwrap();
    let a = heartbeat(&east, "east", 1.0).await.unwrap();
    let b = heartbeat(&west, "west", 1.0).await.unwrap();
    let db_now: SystemTime = west.query_one("SELECT clock_timestamp()", &[]).await.unwrap().get(0);
    for t in [a, b] {
        let age = db_now.duration_since(t).expect("heartbeat time is not in the database's future");
        assert!(age < Duration::from_secs(2), "heartbeat stamped {age:?} before the database's now");
    }
    assert_eq!(live_hosts(&east, Duration::from_secs(5)).await.unwrap(), ["east", "west"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn heartbeat_survives_a_terminated_backend() {
    let db = TestDb::new("reconnect").await;
    let admin = db.connect().await;
    let m = Membership::start(&db.url, "phoenix", fast()).await.unwrap();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'rendezvous membership phoenix'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let before = m.status().last_ok.unwrap();
    eventually("a heartbeat after reconnecting", Duration::from_secs(10), || async {
        let status = m.status();
        status.last_ok.unwrap() > before && status.last_error.is_none()
    })
    .await;
    m.shutdown(std::time::Duration::from_secs(10)).await.unwrap();
    assert!(live_hosts(&admin, Duration::from_secs(60)).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_membership_arguments_fail_before_the_database() {
    let db = TestDb::new("badmember").await;
    assert!(Membership::start(&db.url, "", fast()).await.is_err());
    let zero = fast().with_interval(Duration::ZERO);
    assert!(Membership::start(&db.url, "h", zero).await.is_err());
    let nan = fast().with_weight(f64::NAN);
    let err = Membership::start(&db.url, "h", nan).await.err().unwrap();
    assert_eq!(err.sqlstate(), Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE));
}

/// A kept view of the live set changes exactly when the set does: not while hosts only
/// heartbeat, but after a join, a weight change, a leave, and a host falling silent (which
/// changes no version: found through the hosts' last heartbeats).
#[tokio::test(flavor = "multi_thread")]
async fn a_live_view_is_read_again_only_when_the_set_changes() {
    use rendezvous_client::LiveView;
    let db = TestDb::new("live_view").await;
    let client = db.connect().await;
    let staleness = membership::DEFAULT_STALENESS;
    let alpha = Membership::start(&db.url, "alpha", fast()).await.unwrap();
    let bravo = Membership::start(&db.url, "bravo", fast()).await.unwrap();
    let mut view = LiveView::read(&client, staleness).await.unwrap();
    let members = |v: &LiveView| v.hosts().hosts().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(members(&view), ["alpha", "bravo"]);
    // A second of heartbeats (ten from each host): nothing to read.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!view.refresh(&client).await.unwrap(), "read again while only heartbeats came");
    }
    // A join.
    heartbeat(&client, "charlie", 1.0).await.unwrap();
    assert!(view.refresh(&client).await.unwrap());
    assert_eq!(members(&view), ["alpha", "bravo", "charlie"]);
    assert!(!view.refresh(&client).await.unwrap());
    // A weight change.
    heartbeat(&client, "charlie", 3.0).await.unwrap();
    assert!(!view.hosts().is_weighted());
    assert!(view.refresh(&client).await.unwrap());
    assert!(view.hosts().is_weighted());
    // A leave.
    bravo.shutdown(Duration::from_secs(10)).await.unwrap();
    assert!(view.refresh(&client).await.unwrap());
    assert_eq!(members(&view), ["alpha", "charlie"]);
    // charlie falls silent: its last heartbeat moves 9 s into the past (a bump, read at once:
    // charlie is still live, so the view is unchanged), then the next 1.2 s pass with no write
    // at all.
    client
        .execute(
            "UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '9 s' WHERE host_id = 'charlie'",
            &[],
        )
        .await
        .unwrap();
    assert!(!view.refresh(&client).await.unwrap(), "a bump that changed nobody's liveness changed the view");
    assert_eq!(members(&view), ["alpha", "charlie"]);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(view.refresh(&client).await.unwrap(), "charlie's silence went unnoticed");
    assert_eq!(members(&view), ["alpha"]);
    assert!(!view.refresh(&client).await.unwrap());
    // The view is what the server's own live set says.
    let set = rendezvous_client::hrw::live_host_set(&client, staleness).await.unwrap();
    assert_eq!(set.hosts().collect::<Vec<_>>(), view.hosts().hosts().collect::<Vec<_>>());
    alpha.shutdown(Duration::from_secs(10)).await.unwrap();
}

/// Views brought up to date by deltas stay the live set through churn (#42): 40 hosts join,
/// leave, change weight, go silent (behind the triggers' back too: found through their last
/// heartbeats) and come back in random rounds (several in one statement too); after each
/// round, two views kept from different rounds (one refreshed every round, one every third)
/// equal the server's live set, the database answers them with changes (not the whole set),
/// and a view that changed nothing says so. The staleness is 5 minutes, so no host ages out by
/// itself on a slow machine.
#[tokio::test(flavor = "multi_thread")]
async fn live_views_kept_by_deltas_stay_the_live_set_through_churn() {
    use rendezvous_client::LiveView;
    let db = TestDb::new("live_view_churn").await;
    let client = db.connect().await;
    let staleness = Duration::from_secs(300);
    for i in 0..20 {
        heartbeat(&client, &format!("h{i:02}"), 1.0).await.unwrap();
    }
    let mut every = LiveView::read(&client, staleness).await.unwrap();
    let mut third = LiveView::read(&client, staleness).await.unwrap();
    // The hosts, and the winners of 64 keys (which the weights decide too).
    let members = |v: &LiveView| {
        let set = v.hosts();
        let hosts = set.hosts().map(str::to_owned).collect::<Vec<_>>();
        let winners = (0..64).map(|k| set.winner(&format!("key-{k}")).map(str::to_owned)).collect::<Vec<_>>();
        (hosts, winners)
    };
    // A view kept in SQL beside the client's, to see how the database answers it.
    let delta = "SELECT version, read_at, whole FROM rendezvous.live_members_delta('300 s', $1, $2)";
    let first = client.query_one(delta, &[&None::<i64>, &None::<SystemTime>]).await.unwrap();
    let (mut version, mut read_at): (i64, SystemTime) = (first.get(0), first.get(1));
    // A small deterministic generator: the same churn on every run.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..30 {
        for _ in 0..1 + next(4) {
            let host = format!("h{:02}", next(40));
            match next(6) {
                0 | 1 => {
                    heartbeat(&client, &host, 1.0).await.unwrap();
                }
                2 => {
                    heartbeat(&client, &host, 1.0 + next(3) as f64).await.unwrap();
                }
                3 => {
                    leave(&client, &host).await.unwrap();
                }
                4 => {
                    // Silent: its last heartbeat past the staleness (a write: a bump).
                    client
                        .execute(
                            "UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '301 s' WHERE host_id = $1",
                            &[&host],
                        )
                        .await
                        .unwrap();
                }
                _ => {
                    // Several leave in one statement.
                    let other = format!("h{:02}", next(40));
                    client
                        .execute("DELETE FROM rendezvous.hosts WHERE host_id IN ($1, $2)", &[&host, &other])
                        .await
                        .unwrap();
                }
            }
        }
        if round % 10 == 5 {
            // Silent with no write at all: 299.8 s after its last heartbeat (aged behind the
            // triggers' back), then a moment passes.
            let host = format!("h{:02}", next(40));
            client
                .batch_execute(&format!(
                    "ALTER TABLE rendezvous.hosts DISABLE TRIGGER hosts_changed;
                     UPDATE rendezvous.hosts SET last_seen = clock_timestamp() - interval '299.8 s' WHERE host_id = '{host}';
                     ALTER TABLE rendezvous.hosts ENABLE TRIGGER hosts_changed;"
                ))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let server = LiveView::read(&client, staleness).await.unwrap();
        every.refresh(&client).await.unwrap();
        assert_eq!(members(&every), members(&server), "round {round}: the view refreshed every round");
        if round % 3 == 2 {
            third.refresh(&client).await.unwrap();
            assert_eq!(
                members(&third),
                members(&server),
                "round {round}: the view refreshed every third round"
            );
        }
        let set = rendezvous_client::hrw::live_host_set(&client, staleness).await.unwrap();
        assert_eq!(
            set.hosts().collect::<Vec<_>>(),
            every.hosts().hosts().collect::<Vec<_>>(),
            "round {round}"
        );
        assert!(!every.refresh(&client).await.unwrap(), "round {round}: nothing changed, yet the view did");
        let answer = client.query_one(delta, &[&Some(version), &Some(read_at)]).await.unwrap();
        assert!(!answer.get::<_, bool>(2), "round {round}: the database read the whole set for a kept view");
        (version, read_at) = (answer.get(0), answer.get(1));
    }
}
