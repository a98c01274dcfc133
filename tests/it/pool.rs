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

/// Sessions of each host (`host-0` …) open now, by the application names the client gives them.
async fn sessions_per_host(admin: &tokio_postgres::Client, hosts: usize) -> Option<Vec<i64>> {
    let row = admin
        .query_one(
            "SELECT array_agg((SELECT count(*) FROM pg_catalog.pg_stat_activity
                                WHERE application_name LIKE '% host-' || h || '%') ORDER BY h)
               FROM generate_series(0, $1 - 1) AS h",
            &[&(hosts as i32)],
        )
        .await
        .ok()?;
    Some(row.get(0))
}

/// #41: a host whose pieces share one capped `Database` never holds more sessions than the
/// cap: not while its handlers want more connections than it allows, nor while every piece
/// connects again after a server restart. Three hosts, each a Worker asking for 8 handlers that
/// each hold a job connection (lowered to the 3 the cap leaves) and a leader elector, under a
/// cap of 6; the server's own count of each host's sessions is sampled throughout. (The cap's
/// waiting itself: `a_connection_past_the_cap_waits_for_one_to_end`.)
#[tokio::test(flavor = "multi_thread")]
async fn capped_hosts_stay_under_their_cap_through_a_server_restart() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use rendezvous_client::database::Database;
    use rendezvous_client::{Job, LeaderElector, LeaderOptions, Worker, WorkerOptions};

    const HOSTS: usize = 3;
    const CAP: usize = 6;
    let cluster = Cluster::start().await.unwrap();
    let url = cluster.url();
    let admin = rendezvous_tests::connect(&url).await;
    admin.batch_execute("CREATE TABLE done (run_id bigint PRIMARY KEY)").await.unwrap();

    // A Worker needs 4 of its own at least (control, side, retention, a job's): fewer is refused.
    let refused = Worker::builder(Database::from_url(&url).with_max_connections(3), "host-x")
        .workflow("w", |_job: Job| async { Ok::<(), String>(()) })
        .start()
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(ref m)) if m.contains("max_connections")),
        "{refused:?}"
    );

    let mut workers = Vec::new();
    let mut electors = Vec::new();
    for h in 0..HOSTS {
        let host = format!("host-{h}");
        let db = Database::from_url(&url).with_max_connections(CAP);
        let options = WorkerOptions::default()
            .with_max_concurrent(8)
            .with_poll(Duration::from_millis(100))
            .with_call_timeout(Duration::from_secs(3));
        let worker = Worker::builder(&db, host.as_str())
            .options(options)
            .workflow("hold", |job: Job| async move {
                let client = job.client().await.map_err(|e| e.to_string())?;
                client.execute("SELECT pg_sleep(0.02)", &[]).await.map_err(|e| e.to_string())?;
                client
                    .execute(
                        "INSERT INTO done VALUES ($1) ON CONFLICT DO NOTHING",
                        &[&job.run().expect("a run").run_id],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<(), String>(())
            })
            .start()
            .await
            .unwrap();
        workers.push(worker);
        electors.push(LeaderElector::start(&db, "capped", &host, LeaderOptions::default()).await.unwrap());
    }

    // The server's count of each host's sessions, every 10 ms, also across the restart.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (stop, url) = (stop.clone(), url.clone());
        async move {
            let mut most = vec![0i64; HOSTS];
            let mut samples = 0;
            let mut admin = None;
            while !stop.load(Ordering::SeqCst) {
                if admin.as_ref().is_none_or(|c: &tokio_postgres::Client| c.is_closed()) {
                    admin = rendezvous_client::connect(&url).await.ok();
                }
                if let Some(counts) = match &admin {
                    Some(c) => sessions_per_host(c, HOSTS).await,
                    None => None,
                } {
                    for (m, c) in most.iter_mut().zip(counts) {
                        *m = (*m).max(c);
                    }
                    samples += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (most, samples)
        }
    });

    let admit = |from: usize, n: usize| {
        let url = url.clone();
        async move {
            let client = rendezvous_tests::connect(&url).await;
            for i in from..from + n {
                spawn_run(&client, "acme", "hold", &serde_json::json!({}), Some(&format!("k-{i}")))
                    .await
                    .unwrap();
            }
        }
    };
    let done = |n: i64| {
        let url = url.clone();
        async move {
            let started = Instant::now();
            loop {
                if let Ok(client) = rendezvous_client::connect(&url).await {
                    if let Ok(row) = client.query_one("SELECT count(*) FROM done", &[]).await {
                        if row.get::<_, i64>(0) >= n {
                            return;
                        }
                    }
                }
                assert!(started.elapsed() < Duration::from_secs(60), "the runs did not all finish");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    admit(0, 300).await;
    done(150).await;
    // A restart while handlers run: every session ends, and every piece connects again.
    drop(admin);
    cluster.restart().unwrap();
    admit(300, 300).await;
    done(600).await;

    stop.store(true, Ordering::SeqCst);
    let (most, samples) = sampler.await.unwrap();
    assert!(samples > 100, "only {samples} samples");
    for (h, &m) in most.iter().enumerate() {
        assert!(
            m <= CAP as i64,
            "host-{h} held {m} sessions, over its cap of {CAP} (most per host: {most:?})"
        );
    }
    // The cap bound: 8 handlers holding connections take 11 sessions a host without it.
    assert!(most.contains(&(CAP as i64)), "no host reached its cap: {most:?}");
    for e in electors {
        e.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    for w in workers {
        w.shutdown(Duration::from_secs(5)).await.unwrap();
    }
}

/// #41: through a session-mode pooler (the PgBouncer scripts/setup.sh installs, its defaults
/// but the mode) a Worker runs its runs; a killed leader's group goes to its follower at once
/// (PgBouncer's reset query, `DISCARD ALL`, gives the advisory lock back when the client goes);
/// and a killed holder's run moves when its lease ends, not at once: the server session that
/// made the claim belongs to the pooler and lives on in its pool (docs/operations.md,
/// "Connection poolers").
#[tokio::test(flavor = "multi_thread")]
async fn through_a_session_mode_pooler_work_runs_and_moves() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use rendezvous_client::runs::{claim_runs, ClaimRuns};
    use rendezvous_client::{Job, Worker, WorkerOptions};

    let cluster = Cluster::start().await.unwrap();
    let bouncer = rendezvous_tests::Pgbouncer::session_mode(&cluster, 20).await;
    let url = bouncer.url();
    let admin = rendezvous_tests::connect(&cluster.url()).await;

    let done = Arc::new(AtomicU32::new(0));
    let counted = done.clone();
    let worker = Worker::builder(url.as_str(), "pooled-host")
        .options(WorkerOptions::default().with_poll(Duration::from_millis(100)))
        .workflow("pooled", move |_job: Job| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .start()
        .await
        .unwrap();
    for i in 0..20 {
        spawn_run(&admin, "acme", "pooled", &serde_json::json!({}), Some(&format!("p-{i}"))).await.unwrap();
    }
    let started = Instant::now();
    while done.load(Ordering::SeqCst) < 20 {
        let n = done.load(Ordering::SeqCst);
        assert!(started.elapsed() < Duration::from_secs(20), "{n} of 20 runs through the pooler");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown(Duration::from_secs(5)).await.unwrap();

    let mut p1 = crate::leader::Process::spawn(&url, "pooled", "p1", 300);
    let first = p1.wait_leader(Duration::from_secs(10)).await.expect("p1 leads through the pooler");
    let mut p2 = crate::leader::Process::spawn(&url, "pooled", "p2", 300);
    assert!(p2.wait_follower(Duration::from_secs(10)).await, "p2 follows");
    let killed = Instant::now();
    p1.sigkill();
    let second = p2.wait_leader(Duration::from_secs(5)).await.expect("p2 leads once p1 is gone");
    assert!(second > first, "epoch {second} after {first}");
    assert!(killed.elapsed() < Duration::from_secs(3), "handed over after {:?}", killed.elapsed());

    const LEASE: Duration = Duration::from_secs(2);
    let admitted = spawn_run(&admin, "acme", "held", &serde_json::json!({}), None).await.unwrap();
    let (mut holder, run_id, token) =
        crate::runs::claimer(&url, &["run", "held", "dead-host"], Some(LEASE)).await;
    assert_eq!(run_id, admitted.run_id);
    holder.start_kill().unwrap();
    holder.wait().await.unwrap();
    let killed = Instant::now();
    let options = ClaimRuns { max: 10, grace: Duration::ZERO, ..Default::default() };
    let taken = loop {
        if let Some(claim) = claim_runs(&admin, "live-host", &options).await.unwrap().pop() {
            break claim;
        }
        assert!(killed.elapsed() < LEASE + Duration::from_secs(3), "the dead holder's run never moved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = killed.elapsed();
    // Renewed every third of the lease until the kill: at least two thirds of it were left.
    assert!(took > LEASE / 2, "moved after {took:?}: the pooled server session ended with the client?");
    assert_eq!(taken.run_id, run_id);
    assert!(taken.token > token);
    drop((p1, p2));
}

/// #41: a Worker refuses a transaction-mode pooler at start with `PoolerDetected`, whatever
/// its pool size (with one server connection, the check's second connection runs on the first
/// one's backend; with more, PgBouncer hands the first one another backend), instead of
/// running with claims that record a shared session and a `LISTEN` on someone else's.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_refuses_a_transaction_mode_pooler() {
    use rendezvous_client::{Job, Worker};

    let cluster = Cluster::start().await.unwrap();
    for pool_size in [1, 4] {
        let bouncer = rendezvous_tests::Pgbouncer::transaction_mode(&cluster, pool_size).await;
        let started = Worker::builder(bouncer.url().as_str(), "pooled-host")
            .workflow("w", |_job: Job| async { Ok::<(), String>(()) })
            .start()
            .await;
        match started {
            Err(Error::PoolerDetected(why)) => assert!(why.contains("backend"), "{why}"),
            Err(other) => panic!("pool size {pool_size}: expected PoolerDetected, got {other:?}"),
            Ok(_) => panic!("pool size {pool_size}: a Worker started through a transaction-mode pooler"),
        }
    }
    // Directly, the same start succeeds.
    let worker = Worker::builder(cluster.url().as_str(), "direct-host")
        .workflow("w", |_job: Job| async { Ok::<(), String>(()) })
        .start()
        .await
        .unwrap();
    worker.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// #41: the cap itself, deterministically. Under `with_max_connections(2)` a third connection
/// (from a pool of 16, or `connect`) waits: the server never sees a third session. A pooled
/// connection handed back while one waits is closed for it, and an idle one is closed when one
/// starts waiting.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_past_the_cap_waits_for_one_to_end() {
    use rendezvous_client::database::Database;

    let db = TestDb::new("pool_capped").await;
    let admin = db.connect().await;
    let capped = Database::from_url(db.url.as_str()).with_max_connections(2);
    let options = PoolOptions::default()
        .with_max_size(16)
        .with_wait_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(300))
        .with_application_name("capped-pool");
    let pool = Pool::new(&capped, options).unwrap();
    let sessions = |name: &'static str| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one(
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1",
                    &[&name],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let first = pool.get().await.unwrap();
    let second = pool.get().await.unwrap();
    assert!(pool.get().await.is_err(), "a third pooled connection past a cap of 2");
    let direct = rendezvous_client::connect_as(&capped, "capped-direct");
    assert!(tokio::time::timeout(Duration::from_millis(300), direct).await.is_err(), "connect past the cap");
    assert_eq!(sessions("capped-pool").await, 2);

    // A connection handed back while another waits is closed for it.
    let waiting = tokio::spawn({
        let capped = capped.clone();
        async move { rendezvous_client::connect_as(&capped, "capped-direct").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the third connection did not wait");
    drop(first);
    let direct = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(pool.status().open, 1, "the pool closed the connection it was handed back");

    // An idle pooled connection is closed when a connection starts waiting.
    drop(second);
    assert_eq!(pool.status().idle, 1);
    let another =
        tokio::time::timeout(Duration::from_secs(5), rendezvous_client::connect_as(&capped, "capped-direct"))
            .await
            .expect("the idle pooled connection made way")
            .unwrap();
    assert_eq!(pool.status().open, 0);
    let start = Instant::now();
    while sessions("capped-pool").await != 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "the pool's sessions did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sessions("capped-direct").await, 2);
    drop((direct, another));
}
