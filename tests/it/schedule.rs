//! The scheduler through the client: cron tasks run once across hosts and never before they are
//! due by the database clock, failures retried then failed for good, a burst claimed beyond the
//! free slots, shutdown hands running and queued firings over, and a host whose backends are all
//! terminated reconnects by itself; a task under the default overlap policy never runs beside
//! itself.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rendezvous_client::Clock;
use rendezvous_client::{CatchUp, Job, Overlap, TaskSpec, Worker, WorkerOptions};
use rendezvous_tests::{hourly_tasks_due_now, wait_for_count, TestDb};

/// Options for quick tests: short polls and rank delays.
fn quick() -> WorkerOptions {
    WorkerOptions::default()
        .with_poll(Duration::from_millis(200))
        .with_rank_delay(Duration::from_millis(200))
        .with_heartbeat(Duration::from_millis(300))
        .with_staleness(Duration::from_secs(2))
        .with_max_backoff(Duration::from_millis(500))
}

/// A table of starts: one row per handler run, stamped with the database clock.
async fn starts_table(db: &TestDb) {
    db.connect()
        .await
        .batch_execute(
            "CREATE TABLE starts (key text, token bigint, host text, fire_at timestamptz,
                                  started_at timestamptz DEFAULT clock_timestamp());
             CREATE TABLE effects (key text PRIMARY KEY, host text)",
        )
        .await
        .unwrap();
}

/// A handler that records its start, and its effect with the completion in one transaction.
fn recording(host: &'static str) -> impl Fn(Job) -> futures_like::BoxFut + Send + Sync + 'static {
    move |mut job: Job| {
        Box::pin(async move {
            job.client()
                .await?
                .execute(
                    "INSERT INTO starts (key, token, host, fire_at) VALUES ($1, $2, $3, $4)",
                    &[&job.key().to_owned(), &job.token(), &host, &job.firing().unwrap().fire_at],
                )
                .await?;
            let key = job.key().to_owned();
            let tx = job.transaction().await?;
            tx.execute("INSERT INTO effects (key, host) VALUES ($1, $2)", &[&key, &host]).await?;
            tx.complete().await?;
            Ok(())
        })
    }
}

/// A handler that records its start and then runs for ten minutes: a claim held until shutdown.
fn stays(host: &'static str) -> impl Fn(Job) -> futures_like::BoxFut + Send + Sync + Clone + 'static {
    move |job: Job| {
        Box::pin(async move {
            job.client()
                .await?
                .execute(
                    "INSERT INTO starts (key, token, host) VALUES ($1, $2, $3)",
                    &[&job.key().to_owned(), &job.token(), &host],
                )
                .await?;
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok(())
        })
    }
}

mod futures_like {
    pub type BoxFut = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), rendezvous_client::Error>> + Send + 'static>,
    >;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seconds_cron_runs_once_per_fire_time_across_three_hosts_never_early() {
    let db = TestDb::new("sched_once").await;
    starts_table(&db).await;
    // Every fire time runs, even one a busy machine delays past the next (the defaults would
    // skip an overlapping one, or catch up only the latest).
    let spec = TaskSpec::new("tick", "* * * * * *")
        .with_lease(Duration::from_secs(5))
        .with_overlap(Overlap::Allow)
        .with_catch_up(CatchUp::All);
    let mut hosts = Vec::new();
    for (i, host) in ["h1", "h2", "h3"].into_iter().enumerate() {
        // h3's clock runs three minutes fast: it may ask early, the database refuses.
        let options = if i == 2 {
            quick().with_clock(Clock::Local(Arc::new(|| SystemTime::now() + Duration::from_secs(180))))
        } else {
            quick()
        };
        hosts.push(
            Worker::builder(&db.url, host)
                .options(options)
                .task(spec.clone(), recording(host))
                .start()
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for h in hosts {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let client = db.connect().await;
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE started_at < fire_at),
                    count(DISTINCT host), min(fire_at), max(fire_at),
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - fire_at))
               FROM starts",
            &[],
        )
        .await
        .unwrap();
    let (runs, keys, early): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert!(runs >= 3, "only {runs} runs in 5 s of a per-second task");
    assert_eq!(runs, keys, "a fire time ran twice");
    assert_eq!(early, 0, "a firing started before it was due by the database clock");
    // Every fire time between the first and the last ran.
    let (first, last): (SystemTime, SystemTime) = (row.get(4), row.get(5));
    let expected = rendezvous_client::task::fire_times(
        &client,
        "* * * * * *",
        "UTC",
        first - Duration::from_micros(1),
        last,
    )
    .await
    .unwrap();
    assert_eq!(expected.len() as i64, runs, "a fire time between the first and the last was missed");
    // Lateness is a benchmark's business (scripts/bench.sh scheduler); here only a bound that
    // no polling loop of 200 ms should come near, even on a busy machine.
    let p99: f64 = row.get(6);
    assert!(p99 < 3.0, "start lateness p99 {p99:.3} s");
    let completed: i64 = client
        .query_one(
            "SELECT count(*) FROM rendezvous.firings WHERE task_id = 'tick' AND completed_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(completed, runs);
    let effects: i64 = client.query_one("SELECT count(*) FROM effects", &[]).await.unwrap().get(0);
    assert_eq!(effects, runs);
}

/// The default overlap policy (skip) with firings made ahead (#42): a per-second task whose
/// handler takes 1.5 s never runs beside itself on three hosts; the fire times that came while
/// it ran are skipped when claimed, counted, and shown as skipped.
#[tokio::test(flavor = "multi_thread")]
async fn a_skip_task_never_runs_beside_itself_and_counts_the_fire_times_it_skips() {
    let db = TestDb::new("sched_skip").await;
    db.connect()
        .await
        .batch_execute(
            "CREATE TABLE spans (key text PRIMARY KEY, host text, started_at timestamptz DEFAULT clock_timestamp(),
                                 ended_at timestamptz)",
        )
        .await
        .unwrap();
    let spec = TaskSpec::new("slow", "* * * * * *").with_lease(Duration::from_secs(10));
    assert_eq!(spec.overlap, Overlap::Skip, "skip is the default");
    let slow = |host: &'static str| {
        move |mut job: Job| -> futures_like::BoxFut {
            Box::pin(async move {
                let key = job.key().to_owned();
                job.client()
                    .await?
                    .execute("INSERT INTO spans (key, host) VALUES ($1, $2)", &[&key, &host])
                    .await?;
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let tx = job.transaction().await?;
                tx.execute("UPDATE spans SET ended_at = clock_timestamp() WHERE key = $1", &[&key]).await?;
                tx.complete().await?;
                Ok(())
            })
        }
    };
    let mut hosts = Vec::new();
    for host in ["h1", "h2", "h3"] {
        hosts.push(
            Worker::builder(&db.url, host)
                .options(quick())
                .task(spec.clone(), slow(host))
                .start()
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    for h in hosts {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let client = db.connect().await;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM spans WHERE ended_at IS NOT NULL),
                    (SELECT count(*) FROM spans a JOIN spans b ON a.key < b.key
                      WHERE a.started_at < coalesce(b.ended_at, 'infinity') AND b.started_at < coalesce(a.ended_at, 'infinity')),
                    (SELECT count(*) FROM rendezvous.status_firings WHERE task_id = 'slow' AND state = 'skipped'),
                    (SELECT count(*) FROM rendezvous.status_firings WHERE task_id = 'slow' AND state = 'completed'),
                    (SELECT skipped FROM rendezvous.tasks WHERE task_id = 'slow')",
            &[],
        )
        .await
        .unwrap();
    let (ran, overlapping, skipped_rows, completed, skipped): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert!(ran >= 2, "only {ran} runs of 1.5 s in 7 s");
    assert_eq!(overlapping, 0, "two firings of a skip task ran at the same time");
    assert_eq!(completed, ran, "a run that ended was not completed, or one completed without running");
    // Each firing made ahead while another ran was skipped when claimed (and counted).
    assert!(skipped_rows >= 1, "no fire time was skipped at its claim in 7 s of 1.5 s runs");
    assert!(
        skipped >= skipped_rows,
        "skipped {skipped} counts fewer than the {skipped_rows} skipped firings"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_task_is_retried_with_backoff_then_failed_for_good_without_a_hot_loop() {
    let db = TestDb::new("sched_fail").await;
    let calls = Arc::new(AtomicU32::new(0));
    let spec = TaskSpec::new("flaky", "* * * * * *")
        .with_max_attempts(3)
        .with_retry_backoff(Duration::from_millis(300))
        .with_lease(Duration::from_secs(5));
    let counter = calls.clone();
    let scheduler = Worker::builder(&db.url, "h1")
        .options(quick())
        .task(spec, move |job: Job| {
            let counter = counter.clone();
            async move {
                if job.firing().is_some_and(|f| f.task_id == "flaky") {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                Err::<(), _>(std::io::Error::other("the upstream is down"))
            }
        })
        .start()
        .await
        .unwrap();
    // 300 ms, then 600 ms backoff: the first firing has failed for good after ~1 s.
    let client = db.connect().await;
    wait_for_count(
        &client,
        "SELECT count(*) FROM (SELECT state FROM rendezvous.status_firings
                                WHERE task_id = 'flaky' ORDER BY fire_at LIMIT 1) first
          WHERE state = 'failed'",
        1,
    )
    .await;
    // Pause it (as the superuser here) so no new firing starts while we look.
    client.execute("SELECT rendezvous.pause_task('flaky')", &[]).await.unwrap();
    // The scheduler's counters once the attempts in flight are recorded (a handler call is
    // counted before its failure is).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let stats = scheduler.stats();
        if stats.failed_attempts == u64::from(calls.load(Ordering::SeqCst))
            || std::time::Instant::now() > deadline
        {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    scheduler.shutdown(Duration::from_secs(2)).await.unwrap();
    let first = client
        .query_one(
            "SELECT state, failures, attempts, last_error FROM rendezvous.status_firings
              WHERE task_id = 'flaky' ORDER BY fire_at LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(first.get::<_, String>(0), "failed");
    assert_eq!(first.get::<_, i32>(1), 3);
    assert_eq!(first.get::<_, i32>(2), 3);
    assert_eq!(first.get::<_, String>(3), "the upstream is down");
    // Each failed attempt was one handler call: no claim loop.
    let failures: i64 = client
        .query_one("SELECT coalesce(sum(failures), 0) FROM rendezvous.firings WHERE task_id = 'flaky'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(u64::from(calls.load(Ordering::SeqCst)), failures as u64);
    // (An attempt may still have started after the counters were read.)
    assert!(
        stats.failed_attempts >= 3 && stats.failed_attempts <= failures as u64,
        "{stats:?} vs {failures}"
    );
    assert!(stats.failed_for_good >= 1);
    let failed: i64 = client
        .query_one("SELECT failed FROM rendezvous.status_tasks WHERE task_id = 'flaky'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(failed >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_error_or_panic_rolls_back_its_writes_and_is_recorded() {
    let db = TestDb::new("sched_rollback").await;
    db.connect().await.batch_execute("CREATE TABLE effects (key text PRIMARY KEY)").await.unwrap();
    let spec = TaskSpec::new("half", "* * * * * *").with_max_attempts(1);
    let panicky = TaskSpec::new("panicky", "* * * * * *").with_max_attempts(1);
    let scheduler = Worker::builder(&db.url, "h1")
        .options(quick())
        .task(spec, |mut job: Job| async move {
            let key = job.key().to_owned();
            let tx = job.transaction().await?;
            tx.execute("INSERT INTO effects VALUES ($1)", &[&key]).await?;
            // Fails before completing: the insert must not survive.
            Err::<(), rendezvous_client::Error>(rendezvous_client::Error::InvalidArgument(
                "validation failed".into(),
            ))
        })
        .task(panicky, |_job: Job| async move {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok::<(), rendezvous_client::Error>(())
        })
        .start()
        .await
        .unwrap();
    let client = db.connect().await;
    wait_for_count(
        &client,
        "SELECT count(DISTINCT task_id) FROM rendezvous.status_firings WHERE state = 'failed'",
        2,
    )
    .await;
    scheduler.shutdown(Duration::from_secs(2)).await.unwrap();
    let effects: i64 = client.query_one("SELECT count(*) FROM effects", &[]).await.unwrap().get(0);
    assert_eq!(effects, 0, "a failed handler's writes were committed");
    let rows = client
        .query(
            "SELECT task_id, count(*) FILTER (WHERE state = 'failed'), max(last_error)
               FROM rendezvous.status_firings GROUP BY task_id ORDER BY task_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].get::<_, i64>(1) >= 1);
    assert_eq!(rows[0].get::<_, String>(2), "invalid argument: validation failed");
    assert!(rows[1].get::<_, i64>(1) >= 1);
    assert_eq!(rows[1].get::<_, String>(2), "handler panicked: boom");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_is_claimed_in_one_look_beyond_the_free_slots_and_what_waits_goes_back_at_shutdown() {
    let db = TestDb::new("sched_burst").await;
    starts_table(&db).await;
    let client = db.connect().await;
    let specs: Vec<TaskSpec> = (0..12)
        .map(|i| {
            TaskSpec::new(format!("burst-{i}"), "every 3600 seconds").with_lease(Duration::from_secs(60))
        })
        .collect();
    for spec in &specs {
        rendezvous_client::task::schedule_task(&client, spec).await.unwrap();
    }
    hourly_tasks_due_now(&client).await;
    let mut builder = Worker::builder(&db.url, "busy-host").options(quick().with_max_concurrent(2));
    for spec in &specs {
        builder = builder.handler(spec.task_id.clone(), stays("busy-host"));
    }
    let host = builder.start().await.unwrap();
    wait_for_count(&client, "SELECT count(*) FROM starts", 2).await;
    // The two free slots did not bound the claim: all twelve (this host ranks first for each)
    // in one claim call, ten of them waiting in the host's queue, not started.
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT claimed_at) FROM rendezvous.firings WHERE holder = 'busy-host'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (12, 1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started: i64 = client.query_one("SELECT count(*) FROM starts", &[]).await.unwrap().get(0);
    assert_eq!(started, 2, "only the free slots run");
    // Shutdown hands back the running and the queued alike: all claimable again at once.
    let report = host.shutdown(Duration::from_millis(300)).await.unwrap();
    assert_eq!((report.finished, report.released), (0, 12));
    let due: i64 =
        client.query_one("SELECT count(*) FROM rendezvous.due_firings()", &[]).await.unwrap().get(0);
    assert_eq!(due, 12);
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_releases_running_firings_and_another_host_takes_them_at_once() {
    let db = TestDb::new("sched_drain").await;
    starts_table(&db).await;
    // A long lease: without the release, the takeover would wait a minute.
    let spec = TaskSpec::new("slow", "every 3600 seconds").with_lease(Duration::from_secs(60));
    let client = db.connect().await;
    rendezvous_client::task::schedule_task(&client, &spec).await.unwrap();
    hourly_tasks_due_now(&client).await;
    let slow = Worker::builder(&db.url, "slow-host")
        .options(quick())
        .handler("slow", stays("slow-host"))
        .start()
        .await
        .unwrap();
    wait_for_count(&client, "SELECT count(*) FROM starts", 1).await;
    let report = slow.shutdown(Duration::from_millis(300)).await.unwrap();
    assert_eq!((report.finished, report.released), (0, 1));
    let next = Worker::builder(&db.url, "next-host")
        .options(quick())
        .task(spec, recording("next-host"))
        .start()
        .await
        .unwrap();
    let taken = std::time::Instant::now();
    wait_for_count(&client, "SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL", 1)
        .await;
    assert!(taken.elapsed() < Duration::from_secs(10), "the takeover waited for the lease");
    next.shutdown(Duration::from_secs(2)).await.unwrap();
    let row = client
        .query_one("SELECT max(token) FILTER (WHERE host = 'next-host') FROM starts", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_whose_backends_are_all_terminated_reconnects_and_goes_on() {
    let db = TestDb::new("sched_reconnect").await;
    starts_table(&db).await;
    let spec = TaskSpec::new("tick", "* * * * * *").with_lease(Duration::from_secs(3));
    let scheduler =
        Worker::builder(&db.url, "h1").options(quick()).task(spec, recording("h1")).start().await.unwrap();
    let client = db.connect().await;
    wait_for_count(&client, "SELECT count(*) FROM starts", 2).await;
    for _ in 0..3 {
        let killed: i64 = client
            .query_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = current_database() AND application_name LIKE 'rendezvous scheduler h1%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed >= 1);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let before: i64 = client.query_one("SELECT count(*) FROM starts", &[]).await.unwrap().get(0);
    wait_for_count(&client, "SELECT count(*) FROM starts", before + 2).await;
    let stats = scheduler.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    scheduler.shutdown(Duration::from_secs(2)).await.unwrap();
    // A firing cut off mid-run may run again after its lease (at least once across a
    // holder's loss), but never twice under one token, and its effect commits once.
    let same_token_twice: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM starts GROUP BY key, token HAVING count(*) > 1) x",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(same_token_twice, 0);
    let completed: i64 = client
        .query_one("SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    let effects: i64 = client.query_one("SELECT count(*) FROM effects", &[]).await.unwrap().get(0);
    assert_eq!(effects, completed, "an effect without its completion, or the reverse");
}

/// A slow server is not a gone one (#39): a look that outlasts the call timeout is cancelled
/// and its connection kept, so a host whose server is busy (here its looks wait on a lock
/// another session holds) opens no new session, and runs what was spawned meanwhile as soon
/// as the server answers. 0.3.0 gave the connection up at every timeout and connected again:
/// on a starved server, a storm of reconnects that each cost it more.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_on_a_slow_server_cancels_its_looks_and_keeps_its_sessions() {
    let db = TestDb::new("sched_slow_server").await;
    let executed = Arc::new(AtomicU32::new(0));
    let counted = executed.clone();
    let worker = Worker::builder(&db.url, "slow-h")
        .options(quick().with_call_timeout(Duration::from_secs(1)))
        .workflow("w", move |_job: Job| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .start()
        .await
        .unwrap();
    let client = db.connect().await;
    let wait_executed = |n: u32| {
        let executed = executed.clone();
        async move {
            let waited = std::time::Instant::now();
            while executed.load(Ordering::SeqCst) < n {
                assert!(waited.elapsed() < Duration::from_secs(15), "run {n} was not executed within 15 s");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    rendezvous_client::spawn_run(&client, "t", "w", &serde_json::json!({}), None).await.unwrap();
    wait_executed(1).await;
    let waited = std::time::Instant::now();
    while worker.stats().completed < 1 {
        assert!(waited.elapsed() < Duration::from_secs(15), "run 1 was not completed within 15 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The host's own sessions, by name (its job pool grows with its jobs: left out). Sessions
    // open lazily (the leases session at the first completion, retention when this host owns
    // it): one that opens later is no change, one that is replaced is.
    let sessions = "SELECT coalesce(array_agg(application_name || ' ' || pid ORDER BY pid), '{}')
                      FROM pg_stat_activity
                     WHERE datname = current_database() AND application_name LIKE 'rendezvous scheduler slow-h%'
                       AND application_name NOT LIKE '% job'";
    let before: Vec<String> = client.query_one(sessions, &[]).await.unwrap().get(0);
    assert!(!before.is_empty());
    // Another session holds the hosts table: every look's heartbeat waits on it, alive but slow.
    let holder = db.connect().await;
    holder.batch_execute("BEGIN; LOCK TABLE rendezvous.hosts IN ACCESS EXCLUSIVE MODE").await.unwrap();
    rendezvous_client::spawn_run(&client, "t", "w", &serde_json::json!({}), None).await.unwrap();
    let timeouts = worker.stats().timeouts;
    let waited = std::time::Instant::now();
    while worker.stats().timeouts < timeouts + 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "no look waited past its bound: {:?}",
            worker.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    wait_executed(2).await;
    let after: Vec<String> = client.query_one(sessions, &[]).await.unwrap().get(0);
    let stats = worker.stats();
    let replaced: Vec<&String> = before.iter().filter(|s| !after.contains(s)).collect();
    assert!(
        replaced.is_empty(),
        "the host's sessions changed on a slow server: {replaced:?} gone (before {before:?}, after {after:?}): {stats:?}"
    );
    assert_eq!(stats.reconnects, 0, "{stats:?}");
    worker.shutdown(Duration::from_secs(2)).await.unwrap();
}

/// A Worker started while its database does not answer (its postmaster stopped, so connections
/// are accepted by the kernel and never served: a busy or starting server) keeps trying, each
/// try bounded by `call_timeout`, and starts once the server answers; `start_timeout` bounds the
/// whole; and what trying again cannot fix (no extension in the database) fails at once. 0.3.0
/// and this release until now gave up at the first try past `call_timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_started_against_a_server_that_does_not_answer_yet_waits_for_it() {
    use std::time::Instant;

    let cluster = rendezvous_tests::Cluster::start().await.unwrap();
    let postmaster = cluster.postmaster_pid().expect("the postmaster's pid").to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill").args([sig, &postmaster]).status().unwrap().success();
        assert!(ok, "kill {sig} {postmaster}");
    };
    let start = |url: String, start_timeout: Duration| async move {
        Worker::builder(url.as_str(), "host-late")
            .options(quick().with_call_timeout(Duration::from_millis(500)).with_start_timeout(start_timeout))
            .workflow("w", |_job: Job| async { Ok::<(), String>(()) })
            .start()
            .await
    };

    signal("-STOP");
    let starting = tokio::spawn(start(cluster.url(), Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waited = !starting.is_finished();
    signal("-CONT");
    assert!(waited, "start gave up while the server did not answer: {:?}", starting.await.unwrap().err());
    let worker = tokio::time::timeout(Duration::from_secs(20), starting)
        .await
        .expect("started within 20 s of the server answering")
        .unwrap()
        .expect("a Worker once the server answers");
    worker.shutdown(Duration::from_secs(5)).await.unwrap();

    signal("-STOP");
    let began = Instant::now();
    let given_up = start(cluster.url(), Duration::from_secs(2)).await;
    let took = began.elapsed();
    signal("-CONT");
    assert!(matches!(given_up, Err(rendezvous_client::Error::Disconnected(_))), "{given_up:?}");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "gave up after {took:?}");

    let admin = rendezvous_tests::connect(&cluster.url()).await;
    admin.batch_execute("CREATE DATABASE no_extension").await.unwrap();
    let began = Instant::now();
    let url = cluster.url();
    let other = format!("{}/no_extension", &url[..url.rfind('/').unwrap()]);
    let missing = start(other, Duration::from_secs(30)).await;
    assert!(matches!(missing, Err(rendezvous_client::Error::ExtensionMissing)), "{missing:?}");
    assert!(began.elapsed() < Duration::from_secs(3), "a missing extension was tried again");
}
