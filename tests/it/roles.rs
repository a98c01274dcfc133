//! Least privilege: everything the client does works for a role that is only a member of
//! `rendezvous_host` (EXECUTE on the API, no table privileges), and nothing beyond the API does;
//! a `rendezvous_observer` reads the status views and calls no host function.
use std::time::{Duration, SystemTime};

use rendezvous_client::hrw::HostSet;
use rendezvous_client::{leader, membership, spawn_run, Firing, LeaderElector, LeaderOptions};
use rendezvous_tests::dispatch::{Dispatcher, DispatcherOptions};
use rendezvous_tests::TestDb;
use tokio_postgres::error::SqlState;

/// A login role that is a member of `group`, and the URL of `db` as that role.
async fn role_url(db: &TestDb, label: &str, group: &str) -> String {
    let role = format!("rz_{label}_{}", std::process::id());
    let admin = db.connect().await;
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; GRANT {group} TO {role};"
        ))
        .await
        .unwrap();
    db.url.replacen("postgres@", &format!("{role}@"), 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_role_does_everything_the_client_does_and_nothing_else() {
    let db = TestDb::new("roles_host").await;
    let url = role_url(&db, "host", "rendezvous_host").await;
    let host = rendezvous_client::connect(&url).await.unwrap();
    rendezvous_client::check_extension(&host).await.unwrap();

    // Membership and HRW over the live set.
    membership::heartbeat(&host, "h1", 2.0).await.unwrap();
    assert_eq!(
        membership::live_members(&host, Duration::from_secs(10)).await.unwrap(),
        vec![("h1".into(), 2.0)]
    );
    assert_eq!(membership::winner(&host, "k").await.unwrap().as_deref(), Some("h1"));

    // Admission, with its retry path.
    let first = spawn_run(&host, "acme", "wf", &serde_json::json!({"n": 1}), Some("key-1")).await.unwrap();
    let again = spawn_run(&host, "acme", "wf", &serde_json::json!({"n": 1}), Some("key-1")).await.unwrap();
    assert!(first.created && !again.created && first.run_id == again.run_id);

    // Leadership and fencing.
    let options = LeaderOptions::default().with_refresh(Duration::from_millis(200)).with_lease(None);
    let elector = LeaderElector::start(&url, "g", "h1", options).await.unwrap();
    let start = std::time::Instant::now();
    while !elector.is_leader() {
        assert!(start.elapsed() < Duration::from_secs(10), "the host role could not lead");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    leader::assert_leader(&host, "g", elector.epoch().unwrap()).await.unwrap();
    elector.shutdown(std::time::Duration::from_secs(10)).await.unwrap();

    // Firings: claims, completions, and the status reads of non-first ranks.
    let dispatcher =
        Dispatcher::connect(&url, "h1", DispatcherOptions::default().with_grace(Duration::from_millis(20)))
            .await
            .unwrap();
    let due: Vec<Firing> =
        (0..20).map(|i| Firing::new(format!("t{i}"), SystemTime::now() - Duration::from_secs(1))).collect();
    let report = dispatcher.dispatch(&due, &HostSet::new(["h1", "h2"]), |_| async { Ok(()) }).await.unwrap();
    assert_eq!(report.executed, 20);

    // Nothing beyond the API: no table, no status view, no purge.
    for stmt in [
        "SELECT * FROM rendezvous.hosts",
        "UPDATE rendezvous.leaders SET epoch = 0",
        "UPDATE rendezvous.firings SET token = token + 1",
        "SELECT input FROM rendezvous.runs",
        "SELECT * FROM rendezvous.status_leaders",
        "SELECT rendezvous.purge_runs('0 s')",
    ] {
        let err = host.batch_execute(stmt).await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{stmt}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_observer_reads_the_status_views_and_nothing_else() {
    let db = TestDb::new("roles_observer").await;
    let admin = db.connect().await;
    admin
        .batch_execute(
            "SELECT rendezvous.heartbeat('h1');
             SELECT * FROM rendezvous.try_lead('g', 'h1');
             SELECT * FROM rendezvous.spawn_run('acme', 'wf', '{\"secret\": 1}', 'k');",
        )
        .await
        .unwrap();
    let observer =
        rendezvous_client::connect(&role_url(&db, "observer", "rendezvous_observer").await).await.unwrap();
    let live: bool = observer
        .query_one("SELECT live FROM rendezvous.status_hosts WHERE host_id = 'h1'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(live);
    let row = observer.query_one("SELECT leader, epoch FROM rendezvous.status_leaders", &[]).await.unwrap();
    assert_eq!((row.get::<_, Option<String>>(0).as_deref(), row.get::<_, i64>(1)), (Some("h1"), 1));
    assert_eq!(observer.query("SELECT * FROM rendezvous.status_runs", &[]).await.unwrap().len(), 1);
    for stmt in [
        "SELECT input FROM rendezvous.runs",
        "SELECT rendezvous.heartbeat('forged')",
        "SELECT * FROM rendezvous.try_lead('g', 'forged')",
    ] {
        let err = observer.batch_execute(stmt).await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{stmt}: {err}");
    }
}
