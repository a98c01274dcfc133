//! The pool heals: an application's calls through it keep working across terminated sessions
//! and a server restart, with no reconnect code of the caller's.
use std::time::{Duration, Instant};

use rendezvous_client::{spawn_run, Error, Pool, PoolOptions};
use rendezvous_tests::{Cluster, TestDb};

/// What a web handler does per request: admit a run by its dispatch key, on a pooled connection.
async fn admit(pool: &Pool, key: &str) -> rendezvous_client::Result<i64> {
    let conn = pool.get().await?;
    let input = serde_json::json!({ "key": key });
    Ok(spawn_run(&*conn, "acme", "deliver", &input, Some(key)).await?.run_id)
}

/// `n` requests at once (so the pool opens several connections), keys `prefix-0` … .
async fn admit_many(pool: &Pool, prefix: &str, n: usize) -> Vec<rendezvous_client::Result<i64>> {
    let calls = (0..n).map(|i| {
        let pool = pool.clone();
        let key = format!("{prefix}-{i}");
        tokio::spawn(async move { admit(&pool, &key).await })
    });
    let mut out = Vec::new();
    for call in calls {
        out.push(call.await.expect("request task"));
    }
    out
}

fn all_ok(results: Vec<rendezvous_client::Result<i64>>) -> Vec<i64> {
    results.into_iter().map(|r| r.expect("a request through the pool")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_heals_across_terminated_sessions_and_a_server_restart() {
    let cluster = Cluster::start().await.unwrap();
    let options = PoolOptions::default()
        .with_max_size(8)
        .with_connect_timeout(Duration::from_secs(3))
        .with_application_name("pool-test");
    let pool = Pool::start(cluster.url(), options).await.unwrap();
    // Eight connections open (held at once, then idle in the pool).
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(pool.get().await.unwrap());
    }
    drop(held);
    let open = pool.status().open;
    assert_eq!((open, pool.status().idle), (8, 8), "{:?}", pool.status());
    let first = all_ok(admit_many(&pool, "before", 8).await);
    // Hold all eight again, to see each one's session end below.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(pool.get().await.unwrap());
    }

    // Every session of the pool is terminated (waiting until each backend is gone).
    let admin = rendezvous_tests::connect(&cluster.url()).await;
    let ended: i64 = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid, 5000))
               FROM pg_catalog.pg_stat_activity WHERE application_name = 'pool-test'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended as usize, open, "every pooled session was terminated");
    // The client's connection drivers read the end of each session as it arrives.
    let waited = Instant::now();
    while !held.iter().all(|c| c.is_closed()) {
        assert!(waited.elapsed() < Duration::from_secs(10), "a terminated session still looks open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(held);
    // The same calls succeed: broken connections are replaced, and admission is idempotent.
    assert_eq!(all_ok(admit_many(&pool, "before", 8).await), first);
    all_ok(admit_many(&pool, "after-terminate", 8).await);

    // The server goes down: calls fail (within the connect timeout), and nothing hangs.
    drop(admin);
    cluster.kill().unwrap();
    let down = Instant::now();
    for result in admit_many(&pool, "while-down", 4).await {
        match result {
            Err(Error::Connect(_)) | Err(Error::Disconnected(_)) | Err(Error::Db(_)) => {}
            other => panic!("a call while the server is down: {other:?}"),
        }
    }
    assert!(down.elapsed() < Duration::from_secs(10), "calls while down took {:?}", down.elapsed());

    // It comes back: the same pool works again, and the runs admitted before are still there.
    cluster.start_again().unwrap();
    assert_eq!(all_ok(admit_many(&pool, "before", 8).await), first);
    all_ok(admit_many(&pool, "after-restart", 8).await);
    let admin = rendezvous_tests::connect(&cluster.url()).await;
    let runs: i64 = admin.query_one("SELECT count(*) FROM rendezvous.runs", &[]).await.unwrap().get(0);
    assert_eq!(runs, 24, "8 before, 8 after the terminations, 8 after the restart; none while down");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_says_when_every_connection_stays_in_use() {
    let db = TestDb::new("pool_busy").await;
    let options = PoolOptions::default().with_max_size(1).with_wait_timeout(Duration::from_millis(200));
    let pool = Pool::start(&db.url, options).await.unwrap();
    let held = pool.get().await.unwrap();
    match pool.get().await {
        Err(Error::PoolUnavailable(message)) => assert!(message.contains("max_size"), "{message}"),
        other => panic!("expected PoolUnavailable, got {other:?}"),
    }
    drop(held);
    let conn = pool.get().await.unwrap();
    conn.query_one("SELECT 1", &[]).await.unwrap();
    // A bad setting is refused before anything connects.
    assert!(matches!(
        Pool::new(&db.url, PoolOptions::default().with_max_size(0)),
        Err(Error::InvalidArgument(_))
    ));
}
