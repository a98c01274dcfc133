//! Runs that run, through the client: exactly-once execution under 16 concurrent claimers, a
//! killed or terminated holder's run taken over at once, retries then failure for good, the
//! Worker's workflows woken by NOTIFY, and a firing that spawns one run however often it
//! retries. (Transitions, fencing and the host role's EXECUTE-only access: pg_test/sql/runs.sql.)
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rendezvous_client::runs::{self, claim_runs, ClaimRuns, RetryPolicy, RunFailure};
use rendezvous_client::{spawn_run, Job, TaskSpec, Worker, WorkerOptions};
use rendezvous_tests::{wait_for_count, TestDb};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

/// Each run's effect is written in the transaction that completes it, fenced by its token: 16
/// claimers racing over 2,000 runs write every effect exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_concurrent_claimers_execute_every_run_exactly_once() {
    const RUNS: i64 = 2000;
    let db = TestDb::new("runs_sixteen").await;
    let admin = db.connect().await;
    admin.batch_execute("CREATE TABLE effects (run_id bigint, token bigint, host text)").await.unwrap();
    for i in 0..RUNS {
        spawn_run(&admin, "acme", "deliver", &json!({ "i": i }), Some(&format!("msg-{i}"))).await.unwrap();
    }
    let mut tasks = Vec::new();
    for c in 0..16 {
        let mut client = db.connect().await;
        tasks.push(tokio::spawn(async move {
            let host = format!("host-{c}");
            let mut executed = 0;
            loop {
                let options = ClaimRuns { max: 8, grace: Duration::ZERO, ..Default::default() };
                let claims = claim_runs(&client, &host, &options)
                    .await
                    .expect("claim_runs never fails for contention");
                if claims.is_empty() {
                    return executed;
                }
                for claim in claims {
                    let tx = client.transaction().await.unwrap();
                    runs::assert_run(&tx, claim.run_id, claim.token).await.unwrap();
                    tx.execute(
                        "INSERT INTO effects VALUES ($1, $2, $3)",
                        &[&claim.run_id, &claim.token, &host],
                    )
                    .await
                    .unwrap();
                    assert!(runs::complete_run(&tx, claim.run_id, claim.token, None).await.unwrap());
                    tx.commit().await.unwrap();
                    executed += 1;
                }
            }
        }));
    }
    let mut executed = 0;
    for t in tasks {
        executed += t.await.unwrap();
    }
    assert_eq!(executed, RUNS);
    let row = admin
        .query_one(
            "SELECT count(*), count(DISTINCT run_id), count(DISTINCT host),
                    (SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded')
               FROM effects",
            &[],
        )
        .await
        .unwrap();
    let (effects, distinct, hosts, succeeded): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((effects, distinct, succeeded), (RUNS, RUNS, RUNS), "every run once");
    assert!(hosts > 1, "the work was shared ({hosts} hosts)");
}

/// Starts `claimer` (tests/src/bin/claimer.rs) with `args` and waits until it holds its claim:
/// the process, and the claim's run id and token. With `lease`, the claimer renews a lease
/// that long every third of it; without, it holds an hour's lease and never renews.
pub(crate) async fn claimer(
    url: &str,
    args: &[&str],
    lease: Option<Duration>,
) -> (tokio::process::Child, i64, i64) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_claimer"));
    if let Some(lease) = lease {
        command.env("CLAIMER_LEASE_MS", lease.as_millis().to_string());
    }
    let mut child =
        command.arg(url).args(args).stdout(std::process::Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line =
        tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.unwrap().unwrap().unwrap();
    let mut words = line.split(' ').skip(1).map(|w| w.parse::<i64>().unwrap());
    (child, words.next().unwrap(), words.next().unwrap())
}

/// The claim ends with its holder's session (#23): a claimer process holding a run and a firing
/// for an hour is SIGKILLed, and another host claims both within a second, with higher tokens;
/// the dead holder's tokens complete nothing. The same for a backend an operator terminates.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holders_run_and_firing_are_taken_over_within_a_second() {
    let db = TestDb::new("runs_killed").await;
    let client = db.connect().await;
    let fire_at =
        UNIX_EPOCH + Duration::from_secs(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() - 1);
    let firing = rendezvous_client::Firing::new("nightly", fire_at);
    let secs = fire_at.duration_since(UNIX_EPOCH).unwrap().as_secs().to_string();
    for (round, how) in ["SIGKILL", "pg_terminate_backend"].into_iter().enumerate() {
        let workflow = format!("deliver-{round}");
        let task = format!("nightly-{round}");
        let firing = rendezvous_client::Firing::new(task.clone(), firing.fire_at);
        let admitted = spawn_run(&client, "acme", &workflow, &json!({}), None).await.unwrap();
        let (mut run_holder, run_id, run_token) =
            claimer(&db.url, &["run", &workflow, "dead-host"], None).await;
        let (mut firing_holder, _, firing_token) =
            claimer(&db.url, &["firing", &task, &secs, "dead-host"], None).await;
        assert_eq!(run_id, admitted.run_id);
        // Held: nobody else gets them while the holders live (an hour's lease).
        let options = ClaimRuns { max: 10, grace: Duration::ZERO, ..Default::default() };
        assert!(claim_runs(&client, "live-host", &options).await.unwrap().is_empty());
        let other =
            rendezvous_client::firing::claim_firing(&client, &firing, "live-host", Duration::from_secs(60));
        assert!(!other.await.unwrap().claimed);

        let killed = Instant::now();
        if how == "SIGKILL" {
            run_holder.start_kill().unwrap();
            firing_holder.start_kill().unwrap();
            run_holder.wait().await.unwrap();
            firing_holder.wait().await.unwrap();
        } else {
            client
                .execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                    &[],
                )
                .await
                .unwrap();
        }
        let (mut run_claim, mut firing_claim) = (None, None);
        while (run_claim.is_none() || firing_claim.is_none()) && killed.elapsed() < Duration::from_secs(5) {
            if run_claim.is_none() {
                run_claim = claim_runs(&client, "live-host", &options).await.unwrap().pop();
            }
            if firing_claim.is_none() {
                let c = rendezvous_client::firing::claim_firing(
                    &client,
                    &firing,
                    "live-host",
                    Duration::from_secs(60),
                );
                firing_claim = Some(c.await.unwrap()).filter(|c| c.claimed);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let took = killed.elapsed();
        let (run_claim, firing_claim) =
            (run_claim.expect("run taken over"), firing_claim.expect("firing taken over"));
        assert!(took < Duration::from_secs(1), "{how}: taken over after {took:?}");
        assert_eq!(run_claim.run_id, run_id);
        assert!(run_claim.token > run_token && firing_claim.token.unwrap() > firing_token);
        assert!(
            !runs::complete_run(&client, run_id, run_token, None).await.unwrap(),
            "the dead holder's token"
        );
        assert!(!rendezvous_client::firing::complete_firing(&client, &firing, firing_token).await.unwrap());
        assert!(runs::complete_run(&client, run_id, run_claim.token, None).await.unwrap());
        drop((run_holder, firing_holder));
    }
}

/// Failures: a failing attempt is retried (its backoff, by the database clock) until the run's
/// max attempts, then the run fails for good with its last error; a stale token records nothing.
#[tokio::test(flavor = "multi_thread")]
async fn failed_attempts_are_retried_then_the_run_fails_for_good() {
    let db = TestDb::new("runs_retry").await;
    let client = db.connect().await;
    let policy = RetryPolicy { max_attempts: 3, backoff: Duration::from_millis(100) };
    let run =
        runs::spawn_run_with_policy(&client, "acme", "flaky", &json!({}), Some("k"), policy).await.unwrap();
    let options = ClaimRuns { grace: Duration::ZERO, ..Default::default() };
    let mut tokens = Vec::new();
    for attempt in 1..=3 {
        let started = Instant::now();
        let claim = loop {
            if let Some(c) = claim_runs(&client, "h", &options).await.unwrap().pop() {
                break c;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "attempt {attempt} never became runnable");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!((claim.run_id, claim.attempt), (run.run_id, attempt));
        tokens.push(claim.token);
        let left =
            runs::fail_run(&client, claim.run_id, claim.token, &format!("boom {attempt}")).await.unwrap();
        assert_eq!(left, if attempt < 3 { RunFailure::Retrying } else { RunFailure::Failed });
        assert_eq!(
            runs::fail_run(&client, claim.run_id, claim.token, "again").await.unwrap(),
            RunFailure::Stale
        );
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "tokens increase: {tokens:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(claim_runs(&client, "h", &options).await.unwrap().is_empty(), "a failed run never runs again");
    let row = client.query_one("SELECT state, attempts, last_error FROM rendezvous.runs", &[]).await.unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i32>(1), row.get::<_, String>(2)),
        ("failed".into(), 3, "boom 3".into())
    );
}

/// A Worker runs admitted runs of its workflows: an idle one (polling once a minute) starts
/// a new run at once, woken by the NOTIFY spawn_run sends; a failing handler's run is retried
/// by the scheduler until it succeeds, and every run ends succeeded exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_runs_its_workflows_woken_by_notify() {
    let db = TestDb::new("runs_scheduler").await;
    let client = db.connect().await;
    let started: Arc<Mutex<HashMap<i64, (Instant, u32)>>> = Arc::default();
    let failures = Arc::new(AtomicU32::new(0));
    let options = WorkerOptions::default().with_poll(Duration::from_secs(60)).with_rank_delay(Duration::ZERO);
    let (s, f) = (started.clone(), failures.clone());
    let scheduler = Worker::builder(db.url.as_str(), "host-a")
        .options(options)
        .workflow("deliver", move |mut job: Job| {
            let (started, failures) = (s.clone(), f.clone());
            async move {
                let run = job.run().expect("a run").clone();
                started.lock().unwrap().entry(run.run_id).or_insert((Instant::now(), 0)).1 += 1;
                if run.input["flaky"] == json!(true) && run.attempt == 1 {
                    failures.fetch_add(1, Ordering::SeqCst);
                    return Err("a planned failure".to_string());
                }
                let tx = job.transaction().await.map_err(|e| e.to_string())?;
                tx.complete_with(Some(json!({ "delivered": run.run_id }))).await.map_err(|e| e.to_string())
            }
        })
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // idle now, until its next poll in a minute
    let policy = RetryPolicy { max_attempts: 3, backoff: Duration::ZERO };
    let admitted_at = Instant::now();
    let quick = spawn_run(&client, "acme", "deliver", &json!({}), None).await.unwrap();
    let flaky =
        runs::spawn_run_with_policy(&client, "acme", "deliver", &json!({ "flaky": true }), None, policy)
            .await
            .unwrap();
    wait_for_count(&client, "SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded'", 2).await;
    let picked_up = started.lock().unwrap()[&quick.run_id].0.duration_since(admitted_at);
    assert!(picked_up < Duration::from_secs(5), "an idle scheduler started a new run after {picked_up:?}");
    let row = client
        .query_one("SELECT attempts, output FROM rendezvous.runs WHERE run_id = $1", &[&flaky.run_id])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2, "the flaky run succeeded on its second attempt");
    assert_eq!(row.get::<_, serde_json::Value>(1), json!({ "delivered": flaky.run_id }));
    assert_eq!(failures.load(Ordering::SeqCst), 1);
    scheduler.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The way to turn a schedule into work: a firing's handler spawns a run with the firing's key
/// as dispatch_key. However often the firing is retried, it admits one run.
#[tokio::test(flavor = "multi_thread")]
async fn a_firing_that_spawns_a_run_gets_one_run_however_often_it_retries() {
    let db = TestDb::new("runs_from_firing").await;
    let client = db.connect().await;
    let attempts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let a = attempts.clone();
    let task = TaskSpec::every("report", Duration::from_secs(3600))
        .with_max_attempts(5)
        .with_retry_backoff(Duration::ZERO);
    let options =
        WorkerOptions::default().with_poll(Duration::from_millis(100)).with_rank_delay(Duration::ZERO);
    let scheduler = Worker::builder(db.url.as_str(), "host-a")
        .options(options)
        .task(task, move |job: Job| {
            let attempts = a.clone();
            async move {
                let key = job.key().to_owned();
                spawn_run(job.client().await?, "acme", "report", &json!({}), Some(&key)).await?;
                // The first two attempts fail after admitting: each retry admits again.
                let n = {
                    let mut attempts = attempts.lock().unwrap();
                    let n = attempts.entry(key).or_default();
                    *n += 1;
                    *n
                };
                if n <= 2 {
                    return Err(rendezvous_client::Error::InvalidArgument("a planned failure".into()));
                }
                Ok(())
            }
        })
        .start()
        .await
        .unwrap();
    // Due now: the last hour boundary, which the catch-up policy (latest) runs.
    rendezvous_tests::hourly_tasks_due_now(&client).await;
    wait_for_count(&client, "SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL", 1)
        .await;
    scheduler.shutdown(Duration::from_secs(5)).await.unwrap();
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 1, "one firing: {attempts:?}");
    assert_eq!(attempts.values().next(), Some(&3), "three attempts");
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT dispatch_key), min(dispatch_key) FROM rendezvous.runs",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1, 1), "one run for the firing");
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), attempts.keys().next().map(String::as_str));
}

/// A host that starts under a host id ends what an earlier process under that id still holds
/// (#23): the earlier process is stopped (SIGSTOP: its session lives, its lease is an hour), and
/// a new Worker under the same id runs its run at once instead of waiting out the lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_host_takes_back_what_its_hung_predecessor_held() {
    let db = TestDb::new("runs_restart").await;
    let client = db.connect().await;
    let run = spawn_run(&client, "acme", "restart", &json!({}), None).await.unwrap();
    let (mut old, run_id, token) = claimer(&db.url, &["run", "restart", "host-r"], None).await;
    assert_eq!(run_id, run.run_id);
    let pid = old.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    let options = WorkerOptions::default().with_rank_delay(Duration::ZERO);
    let scheduler = Worker::builder(db.url.as_str(), "host-r")
        .options(options)
        .workflow("restart", |_job: Job| async { Ok::<(), std::io::Error>(()) })
        .start()
        .await
        .unwrap();
    wait_for_count(&client, "SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded'", 1).await;
    let row = client.query_one("SELECT token, attempts FROM rendezvous.runs", &[]).await.unwrap();
    assert!(row.get::<_, i64>(0) > token, "run again with a higher token");
    assert_eq!(row.get::<_, i32>(1), 1, "the predecessor's attempt is not counted");
    assert!(!runs::complete_run(&client, run_id, token, None).await.unwrap(), "the predecessor's token");
    scheduler.shutdown(Duration::from_secs(5)).await.unwrap();
    std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    old.start_kill().unwrap();
}

/// Admits `n` runs of `workflow` for tenant acme, in one statement.
async fn admit(admin: &tokio_postgres::Client, workflow: &str, n: i64) {
    admin
        .execute(
            "SELECT rendezvous.spawn_run('acme', $1, '{}') FROM generate_series(1::int8, $2::int8)",
            &[&workflow, &n],
        )
        .await
        .unwrap();
}

/// A started Worker whose handler of `workflow` sleeps `pause` and succeeds.
async fn sleeping_worker(
    url: &str,
    host_id: &str,
    workflow: &str,
    options: WorkerOptions,
    pause: Duration,
) -> Worker {
    Worker::builder(url, host_id)
        .options(options)
        .workflow(workflow, move |_job: Job| async move {
            tokio::time::sleep(pause).await;
            Ok::<(), std::io::Error>(())
        })
        .start()
        .await
        .unwrap()
}

/// Runs claimed ahead into a local queue (`prefetch`) still run exactly once across hosts, and
/// a shutdown hands back what it queued and never started: those runs are pending again at
/// once, for another host, without counting an attempt.
#[tokio::test(flavor = "multi_thread")]
async fn prefetched_runs_run_exactly_once_and_a_shutdown_hands_back_the_queue() {
    const RUNS: i64 = 400;
    let db = TestDb::new("runs_prefetch").await;
    let admin = db.connect().await;
    admit(&admin, "pf", RUNS).await;
    let seen: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let mut hosts = Vec::new();
    for h in ["pf-a", "pf-b", "pf-c"] {
        let seen = seen.clone();
        let options = WorkerOptions::default().with_max_concurrent(2).with_prefetch(32);
        let scheduler = Worker::builder(db.url.as_str(), h)
            .options(options)
            .workflow("pf", move |job: Job| {
                *seen.lock().unwrap().entry(job.run().unwrap().run_id).or_default() += 1;
                async { Ok::<(), std::io::Error>(()) }
            })
            .start()
            .await
            .unwrap();
        hosts.push(scheduler);
    }
    wait_for_count(&admin, "SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded'", RUNS).await;
    for h in hosts {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len() as i64, RUNS);
    assert!(seen.values().all(|n| *n == 1), "a run ran twice: {:?}", seen.iter().find(|(_, n)| **n > 1));

    // One slow host: one run at a time, 20 queued (kept full: no horizon); its shutdown (no
    // time to finish) hands all back.
    admit(&admin, "slow", 30).await;
    let options = WorkerOptions::default().with_max_concurrent(1).with_prefetch(20).with_queue_horizon(None);
    let slow = sleeping_worker(&db.url, "pf-slow", "slow", options, Duration::from_secs(60)).await;
    wait_for_count(
        &admin,
        "SELECT count(*) FROM rendezvous.runs WHERE workflow_ref = 'slow' AND state = 'running'",
        21,
    )
    .await;
    let report = slow.shutdown(Duration::ZERO).await.unwrap();
    assert_eq!(report.released, 21, "{report:?}");
    let row = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE attempts > 0)
               FROM rendezvous.runs WHERE workflow_ref = 'slow'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (30, 0), "queued runs were not handed back");
}

/// Runs queued on a host whose slots stay busy longer than their lease (a starved machine, a
/// slow handler) are handed back before their lease ends, their attempt refunded, instead of
/// lapsing in the queue: each lapse is a takeover that counts an attempt the run never began,
/// and a run bounced between queues that way fails for good without having run (#43: 20 of
/// 384 runs in a fleet beside 8 CPU hogs). One slot, handlers of 3 s, a 2 s lease, 3 runs of 2
/// attempts each, 4 queued at most: all three run once and succeed on their first attempt.
#[tokio::test(flavor = "multi_thread")]
async fn runs_queued_past_half_their_lease_are_handed_back_not_lapsed() {
    let db = TestDb::new("runs_queue_lease").await;
    let admin = db.connect().await;
    admin
        .execute("SELECT rendezvous.spawn_run('acme', 'busy', '{}', NULL, 2) FROM generate_series(1, 3)", &[])
        .await
        .unwrap();
    let options = WorkerOptions::default()
        .with_max_concurrent(1)
        .with_prefetch(4)
        .with_queue_horizon(None)
        .with_run_lease(Duration::from_secs(2))
        .with_poll(Duration::from_millis(200));
    let busy = sleeping_worker(&db.url, "busy-host", "busy", options, Duration::from_secs(3)).await;
    let done = "SELECT count(*) FROM rendezvous.runs WHERE workflow_ref = 'busy' AND state IN ('succeeded', 'failed')";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while admin.query_one(done, &[]).await.unwrap().get::<_, i64>(0) < 3 {
        assert!(std::time::Instant::now() < deadline, "{:?}", busy.stats());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = busy.stats();
    busy.shutdown(Duration::from_secs(5)).await.unwrap();
    let rows = admin
        .query("SELECT state, attempts, last_error FROM rendezvous.runs WHERE workflow_ref = 'busy'", &[])
        .await
        .unwrap();
    for row in &rows {
        let (state, attempts, error): (String, i32, Option<String>) = (row.get(0), row.get(1), row.get(2));
        assert_eq!((state.as_str(), attempts), ("succeeded", 1), "{error:?}; {stats:?}");
    }
    assert!(stats.released > 0, "the queued runs were handed back: {stats:?}");
}

/// With the default local queue, a slow host holds about its slots' worth of runs, not a queue
/// full of work that idle hosts could start: its queue follows the pace it starts runs at. Three
/// fast hosts and one slow one drain a backlog; sampled throughout, the slow host never holds
/// more than its one slot and a couple queued, and the fast hosts run nearly all of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_host_holds_little_that_idle_hosts_could_run() {
    const RUNS: i64 = 600;
    let db = TestDb::new("runs_balance").await;
    let admin = db.connect().await;
    admit(&admin, "bal", RUNS).await;
    let ran: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let mut hosts = Vec::new();
    for (h, slots, pause) in [("bal-slow", 1, 100), ("bal-a", 4, 5), ("bal-b", 4, 5), ("bal-c", 4, 5)] {
        let ran = ran.clone();
        let scheduler = Worker::builder(db.url.as_str(), h)
            .options(WorkerOptions::default().with_max_concurrent(slots))
            .workflow("bal", move |_job: Job| {
                *ran.lock().unwrap().entry(h.to_string()).or_default() += 1;
                async move {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .start()
            .await
            .unwrap();
        hosts.push(scheduler);
    }
    let started = Instant::now();
    let mut most_held = 0;
    loop {
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 'running' AND holder = 'bal-slow'),
                        count(*) FILTER (WHERE state = 'succeeded')
                   FROM rendezvous.runs",
                &[],
            )
            .await
            .unwrap();
        most_held = most_held.max(row.get::<_, i64>(0));
        if row.get::<_, i64>(1) == RUNS {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the backlog was not drained in 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for h in hosts {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let ran = ran.lock().unwrap().clone();
    let slow = i64::from(ran.get("bal-slow").copied().unwrap_or(0));
    assert!(most_held <= 3, "the slow host held {most_held} runs at once (1 slot); ran {ran:?}");
    assert!(slow * 10 <= RUNS, "the slow host ran {slow} of {RUNS}: {ran:?}");
    assert_eq!(ran.values().sum::<u32>() as i64, RUNS, "{ran:?}");
}

/// The local queue is refilled once half empty, while its other half runs: a host with one
/// slot and 1 ms handlers (a queue of about 100 ms of runs, refilled every few dozen) drains
/// 1,500 runs with its handler rarely waiting for a claim. Before, the refill went out only
/// once the queue was empty, so every refill was a wait (`waits_for_claims` about `looks`).
#[tokio::test(flavor = "multi_thread")]
async fn the_local_queue_is_refilled_before_it_runs_dry() {
    const RUNS: i64 = 1_500;
    let db = TestDb::new("runs_refill").await;
    let admin = db.connect().await;
    admit(&admin, "refill", RUNS).await;
    let options = WorkerOptions::default().with_max_concurrent(1);
    let host = sleeping_worker(&db.url, "refill-host", "refill", options, Duration::from_millis(1)).await;
    wait_for_count(
        &admin,
        "SELECT count(*) FROM rendezvous.runs WHERE workflow_ref = 'refill' AND state = 'succeeded'",
        RUNS,
    )
    .await;
    let stats = host.stats();
    host.shutdown(Duration::from_secs(5)).await.unwrap();
    assert!(stats.looks >= 20, "the queue was refilled {} times: too few to tell ({stats:?})", stats.looks);
    assert!(
        stats.waits_for_claims * 4 <= stats.looks,
        "the handler waited for {} of {} looks ({stats:?})",
        stats.waits_for_claims,
        stats.looks
    );
}

/// Anyone who can connect may NOTIFY the runtime's channels (#39): a host acts only on the
/// extension's own announcements (signed, numbered), so a flood of forged and replayed
/// notifications makes no look at the database and cancels nothing; a real cancel_run still
/// reaches the handler at once.
#[tokio::test(flavor = "multi_thread")]
async fn anyones_notify_wakes_no_host_and_cancels_nothing() {
    let db = TestDb::new("runs_forged_notify").await;
    let admin = db.connect().await;
    let intruder_role = format!("rz_intruder_{}", std::process::id());
    admin
        .batch_execute(&format!("DROP ROLE IF EXISTS {intruder_role}; CREATE ROLE {intruder_role} LOGIN"))
        .await
        .unwrap();
    let intruder =
        rendezvous_tests::connect(&db.url.replacen("postgres@", &format!("{intruder_role}@"), 1)).await;
    let told: Arc<Mutex<Option<Instant>>> = Arc::default();
    let t = told.clone();
    let options = WorkerOptions::default().with_poll(Duration::from_secs(60)).with_rank_delay(Duration::ZERO);
    let worker = Worker::builder(db.url.as_str(), "host-a")
        .options(options)
        .workflow("long", move |job: Job| {
            let told = t.clone();
            async move {
                tokio::select! {
                    _ = job.cancelled() => *told.lock().unwrap() = Some(Instant::now()),
                    _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                }
                Ok::<(), String>(())
            }
        })
        .start()
        .await
        .unwrap();
    let run = spawn_run(&admin, "acme", "long", &json!({}), None).await.unwrap();
    wait_for_count(&admin, "SELECT count(*) FROM rendezvous.runs WHERE state = 'running'", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The last genuine announcement on rendezvous_runs, as the intruder could have heard it.
    let heard: String = admin
        .query_one(
            "SELECT n || ':' || encode(sha256(k.key || sha256(convert_to('rendezvous_runs:' || n || ':', 'UTF8'))), 'hex') || ':'
               FROM (SELECT last_value AS n FROM rendezvous._announcements) s, rendezvous._announcement_key k",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let quiet = worker.stats();
    let mut sent = 0u64;
    for round in 0..100 {
        let id = run.run_id;
        intruder
            .batch_execute(&format!(
                "NOTIFY rendezvous_runs, 'x{round}'; NOTIFY rendezvous_cancel, '{id}';
                 SELECT pg_notify('rendezvous_cancel', '{round}:{zeros}:{id}'); SELECT pg_notify('rendezvous_runs', '{heard}');",
                zeros = "0".repeat(64)
            ))
            .await
            .unwrap();
        sent += 4;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Until they stop arriving (a worker that falls 64 notifications behind drops the newest:
    // they are wake-ups); most must have been heard, and ignored.
    let start = Instant::now();
    let mut heard = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = worker.stats().ignored_wakeups - quiet.ignored_wakeups;
        if now == heard && now > 0 {
            break;
        }
        heard = now;
        assert!(start.elapsed() < Duration::from_secs(20), "the forged notifications kept arriving");
    }
    assert!(heard >= sent / 4, "only {heard} of {sent} forged notifications reached the worker");
    let flooded = worker.stats();
    // A heartbeat may fall due meanwhile: at most a look or two, never one per notification.
    assert!(
        flooded.looks - quiet.looks <= 2,
        "{heard} forged notifications made {} looks",
        flooded.looks - quiet.looks
    );
    assert!(told.lock().unwrap().is_none(), "a forged rendezvous_cancel reached the handler");

    let cancelled_at = Instant::now();
    assert!(runs::cancel_run(&admin, run.run_id).await.unwrap());
    let start = Instant::now();
    while told.lock().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(5), "a real cancel_run did not reach the handler");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = told.lock().unwrap().unwrap().duration_since(cancelled_at);
    assert!(after < Duration::from_secs(1), "the handler was told after {after:?}");
    worker.shutdown(Duration::from_secs(5)).await.unwrap();
    drop(intruder);
    admin.batch_execute(&format!("DROP OWNED BY {intruder_role}; DROP ROLE {intruder_role}")).await.ok();
}

/// A handler is bounded by its claim (#43): when the lease is lost while it runs (here the
/// run is taken from it, as a takeover would), the statement it is stuck in is cancelled, its
/// slot freed for the next run at once, and its result counts for nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_handler_past_its_lease_is_cancelled_and_its_slot_freed() {
    let db = TestDb::new("runs_lease_bound").await;
    let admin = db.connect().await;
    let ended: Arc<Mutex<Option<(Instant, String)>>> = Arc::default();
    let quick_done = Arc::new(AtomicU32::new(0));
    let (e, q) = (ended.clone(), quick_done.clone());
    let options = WorkerOptions::default()
        .with_max_concurrent(1)
        .with_prefetch(0)
        .with_run_lease(Duration::from_secs(3))
        .with_poll(Duration::from_millis(200))
        .with_rank_delay(Duration::ZERO);
    let worker = Worker::builder(db.url.as_str(), "host-a")
        .options(options)
        .workflow("stuck", move |job: Job| {
            let ended = e.clone();
            async move {
                let client = job.client().await.map_err(|e| e.to_string())?;
                let r = client.execute("SELECT pg_sleep(600)", &[]).await;
                *ended.lock().unwrap() = Some((Instant::now(), format!("{r:?}")));
                r.map(|_| ()).map_err(|e| e.to_string())
            }
        })
        .workflow("quick", move |_job: Job| {
            let quick_done = q.clone();
            async move {
                quick_done.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .start()
        .await
        .unwrap();
    let stuck = spawn_run(&admin, "acme", "stuck", &json!({}), None).await.unwrap();
    rendezvous_tests::wait_for_count(
        &admin,
        "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'",
        1,
    )
    .await;
    spawn_run(&admin, "acme", "quick", &json!({}), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(quick_done.load(Ordering::SeqCst), 0, "the only slot is taken by the stuck handler");
    // The claim is taken from the handler (as a takeover after a lost lease would).
    let taken_at = Instant::now();
    admin
        .execute(
            "UPDATE rendezvous.runs SET token = token + 1, holder = 'another' WHERE run_id = $1",
            &[&stuck.run_id],
        )
        .await
        .unwrap();
    let start = Instant::now();
    while quick_done.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the slot was never freed: {:?}", worker.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (at, how) = ended.lock().unwrap().clone().expect("the stuck statement ended");
    // A renewal every second (a third of the lease) finds the claim gone, then cancels.
    assert!(
        at.duration_since(taken_at) < Duration::from_secs(4),
        "ended {:?} after",
        at.duration_since(taken_at)
    );
    assert!(how.contains("57014") || how.contains("cancel"), "{how}");
    assert_eq!(worker.stats().lost_leases, 1);
    let state: String = admin
        .query_one("SELECT state FROM rendezvous.runs WHERE run_id = $1", &[&stuck.run_id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "running", "the run is the new holder's: the old handler's failure recorded nothing");
    worker.shutdown(Duration::from_secs(5)).await.unwrap();
}
