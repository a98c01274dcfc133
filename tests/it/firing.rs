//! Exactly-once firing claims through the client: divergent views and skewed clocks, real
//! process deaths, stale holders, and many concurrent claimers.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use rendezvous_client::firing::{assert_firing, claim_firing};
use rendezvous_client::hrw::HostSet;
use rendezvous_client::Clock;
use rendezvous_client::Firing;
use rendezvous_tests::dispatch::{Dispatcher, DispatcherOptions};
use rendezvous_tests::{wait_for_count, TestDb};
use tokio::sync::Barrier;

#[tokio::test(flavor = "multi_thread")]
async fn client_and_sql_agree_on_firing_keys() {
    let db = TestDb::new("fire_keys").await;
    let client = db.connect().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut firings = vec![
        Firing::new("t", UNIX_EPOCH),
        Firing::new("t", UNIX_EPOCH + Duration::from_nanos(1_999)),
        Firing::new("t", UNIX_EPOCH + Duration::from_secs(946_684_800)), // 2000-01-01
        Firing::new("leap", UNIX_EPOCH + Duration::from_secs(951_782_400)), // 2000-02-29
    ];
    for i in 0..500 {
        let secs = rng.random_range(0..4_102_444_800u64); // to 2100
        let nanos = rng.random_range(0..1_000_000_000u32);
        firings.push(Firing::new(format!("task-{i}"), UNIX_EPOCH + Duration::new(secs, nanos)));
    }
    for f in &firings {
        let sql: String = client
            .query_one("SELECT rendezvous.firing_key($1, $2)", &[&f.task_id, &f.fire_at])
            .await
            .unwrap()
            .get(0);
        assert_eq!(f.key().unwrap(), sql, "{f:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_claimers_one_wins() {
    let db = TestDb::new("fire_twenty").await;
    let firing = Firing::new("hot", SystemTime::now());
    for round in 0..5 {
        let firing = Firing::new(format!("hot-{round}"), firing.fire_at);
        let barrier = Arc::new(Barrier::new(20));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let client = db.connect().await;
            let (barrier, firing) = (barrier.clone(), firing.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let claim =
                    claim_firing(&client, &firing, &format!("host-{i}"), Duration::from_secs(60)).await;
                // The connection stays open until every claimer answered: a claim ends with
                // its session, and a closed one would be taken over at once.
                (claim.unwrap(), client)
            }));
        }
        let mut claims = Vec::new();
        let mut sessions = Vec::new();
        for t in tasks {
            let (claim, client) = t.await.unwrap();
            claims.push(claim);
            sessions.push(client);
        }
        let winners: Vec<_> = claims.iter().filter(|c| c.claimed).collect();
        assert_eq!(winners.len(), 1, "round {round}: {claims:?}");
        assert_eq!(winners[0].token, Some(1));
        // Every loser is told who holds it, never the holder's token (#24).
        assert!(claims.iter().all(|c| c.holder == winners[0].holder && (c.claimed || c.token.is_none())));
    }
}

/// Split brain on the hosts' side: hosts with deliberately different views of the live set
/// and local clocks minutes apart all dispatch the same firings at once.
#[tokio::test(flavor = "multi_thread")]
async fn divergent_views_and_skewed_clocks_still_execute_every_firing_exactly_once() {
    let db = TestDb::new("fire_partition").await;
    let hosts = ["h0", "h1", "h2", "h3", "h4"];
    // Each host's view of the live set: several hosts believe they rank first for many keys.
    let views: [&[&str]; 5] = [&["h0"], &["h0", "h1"], &["h1", "h2", "h3"], &["h3", "h4"], &hosts];
    // Local clocks minutes apart (one 4 minutes slow, one 5 minutes fast).
    let skews_secs: [i64; 5] = [-240, -120, 0, 120, 300];
    let fire_at = SystemTime::now() - Duration::from_secs(600);
    let due: Vec<Firing> = (0..1000).map(|i| Firing::new(format!("report-{i}"), fire_at)).collect();
    let executions: Arc<Mutex<HashMap<String, u32>>> = Arc::default();

    let mut tasks = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let skew = skews_secs[i];
        let clock = Clock::Local(Arc::new(move || {
            let now = SystemTime::now();
            if skew >= 0 {
                now + Duration::from_secs(skew as u64)
            } else {
                now - Duration::from_secs((-skew) as u64)
            }
        }));
        let options = DispatcherOptions::default()
            .with_grace(Duration::from_millis(20))
            .with_lease(Duration::from_secs(30))
            .with_poll(Duration::from_millis(50))
            .with_clock(clock);
        let dispatcher = Dispatcher::connect(&db.url, host, options).await.unwrap();
        let view = HostSet::new(views[i].iter());
        let (due, executions) = (due.clone(), executions.clone());
        tasks.push(tokio::spawn(async move {
            dispatcher
                .dispatch(&due, &view, |ctx| {
                    let executions = executions.clone();
                    async move {
                        *executions.lock().unwrap().entry(ctx.key.clone()).or_default() += 1;
                        tokio::task::yield_now().await;
                        Ok(())
                    }
                })
                .await
                .unwrap()
        }));
    }
    let mut total_executed = 0;
    for t in tasks {
        total_executed += t.await.unwrap().executed;
    }
    {
        let executions = executions.lock().unwrap();
        assert_eq!(executions.len(), 1000, "every firing executed (none lost)");
        let twice: Vec<_> = executions.iter().filter(|(_, n)| **n != 1).collect();
        assert!(twice.is_empty(), "executed more than once: {twice:?}");
    }
    assert_eq!(total_executed, 1000);
    let client = db.connect().await;
    let done: i64 = client
        .query_one(
            "SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL AND token = 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(done, 1000, "every firing completed by its one claim");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holders_completion_and_fenced_write_are_rejected() {
    let db = TestDb::new("fire_stale").await;
    let firing = Firing::new("slow", SystemTime::now() - Duration::from_secs(5));
    let due = vec![firing.clone()];
    let view = HostSet::new(["slow-host", "other-host"]);
    let (fenced_tx, mut fenced_rx) = tokio::sync::mpsc::unbounded_channel();

    // slow-host claims first (it is alone in its view) with a short lease it never renews,
    // and works past it.
    let slow = Dispatcher::connect(
        &db.url,
        "slow-host",
        DispatcherOptions::default()
            .with_lease(Duration::from_millis(300))
            .with_renew_every(Some(Duration::from_secs(60)))
            .with_poll(Duration::from_millis(50))
            .with_grace(Duration::ZERO),
    )
    .await
    .unwrap();
    let writer = db.connect().await;
    let writer = Arc::new(tokio::sync::Mutex::new(writer));
    let slow_task = {
        let (due, fenced_tx, writer) = (due.clone(), fenced_tx.clone(), writer.clone());
        tokio::spawn(async move {
            slow.dispatch(&due, &HostSet::new(["slow-host"]), |ctx| {
                let (fenced_tx, writer) = (fenced_tx.clone(), writer.clone());
                async move {
                    // Works until other-host has taken the firing over (its lease ran out).
                    let mut w = writer.lock().await;
                    wait_for_count(&w, "SELECT count(*) FROM rendezvous.firings WHERE token = 2", 1).await;
                    let tx = w.transaction().await.unwrap();
                    let fenced = assert_firing(&tx, &ctx.firing, ctx.token).await;
                    fenced_tx
                        .send((ctx.token, fenced.map_err(|e| e.sqlstate().map(|c| c.code().to_owned()))))
                        .unwrap();
                    Ok(())
                }
            })
            .await
            .unwrap()
        })
    };
    // Wait until slow-host holds the claim.
    let watcher = db.connect().await;
    wait_for_count(&watcher, "SELECT count(*) FROM rendezvous.firings WHERE holder = 'slow-host'", 1).await;
    // other-host takes over once the lease expired, runs it and completes it.
    let other = Dispatcher::connect(
        &db.url,
        "other-host",
        DispatcherOptions::default()
            .with_lease(Duration::from_secs(30))
            .with_poll(Duration::from_millis(50))
            .with_grace(Duration::ZERO),
    )
    .await
    .unwrap();
    let other_report = other
        .dispatch(&due, &view, |ctx| async move {
            assert_eq!(ctx.token, 2, "the takeover has a higher token");
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(other_report.executed, 1);
    assert_eq!(other_report.takeovers, 1);
    let slow_report = slow_task.await.unwrap();
    assert_eq!(
        slow_report.stale_completions, 1,
        "the stale holder's completion was refused: {slow_report:?}"
    );
    assert_eq!(slow_report.executed, 0);
    let (token, fenced) = fenced_rx.recv().await.unwrap();
    assert_eq!(token, 1);
    assert_eq!(fenced, Err(Some("RZ001".to_owned())), "the stale holder's fenced write was refused");
    let client = db.connect().await;
    let row = client
        .query_one("SELECT token, holder, completed_at IS NOT NULL FROM rendezvous.firings", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, String>(1), row.get::<_, bool>(2)),
        (2, "other-host".into(), true)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_killed_mid_firing_lose_nothing_and_repeat_only_after_the_holder_died() {
    let db = TestDb::new("fire_kill").await;
    let client = db.connect().await;
    client
        .batch_execute(
            "CREATE TABLE executions (firing_key text, token bigint, host_id text, claimed_at timestamptz);
             CREATE TABLE effects (firing_key text, token bigint);",
        )
        .await
        .unwrap();
    let hosts = "k0,k1,k2";
    let fire_at = (SystemTime::now() - Duration::from_secs(60))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let lease_ms = 1500;
    let spawn = |host: &str| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_dispatcher"))
            .args([&db.url, host, hosts, "150", &fire_at, &lease_ms.to_string(), "300"])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let mut k0 = spawn("k0");
    let k1 = spawn("k1");
    let k2 = spawn("k2");
    // Kill k0 mid-firing: while it has executions started and not completed.
    let start = std::time::Instant::now();
    loop {
        let in_flight: i64 = client
            .query_one(
                "SELECT count(*) FROM executions e JOIN rendezvous.firings f
                    ON f.firing_key = e.firing_key AND f.token = e.token
                  WHERE e.host_id = 'k0' AND f.completed_at IS NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if in_flight > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "k0 never had a firing in flight");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The database clock just before the kill: no firing is claimed again before it.
    let alive_until: SystemTime = client.query_one("SELECT clock_timestamp()", &[]).await.unwrap().get(0);
    k0.start_kill().unwrap();
    k0.wait().await.unwrap();
    for child in [k1, k2] {
        let out =
            tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
        assert!(out.status.success());
    }

    // Every firing completed; its effect, written in the transaction that completes it, exactly once.
    let completed: i64 = client
        .query_one("SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(completed, 150, "none lost");
    let effects: Vec<(String, i64)> = client
        .query("SELECT firing_key, count(*) FROM effects GROUP BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(effects.len(), 150);
    assert!(effects.iter().all(|(_, n)| *n == 1), "a fenced effect happened twice");
    // A firing ran again only after its holder died (its claim ended with its session; the
    // lease had not run out), with a higher token, by another host.
    let repeats = client
        .query(
            "SELECT firing_key, array_agg(token ORDER BY token), array_agg(host_id ORDER BY token),
                    array_agg(claimed_at ORDER BY token)
               FROM executions GROUP BY 1 HAVING count(*) > 1",
            &[],
        )
        .await
        .unwrap();
    assert!(!repeats.is_empty(), "k0 died holding claims: some firing was taken over");
    for row in &repeats {
        let tokens: Vec<i64> = row.get(1);
        let hosts: Vec<String> = row.get(2);
        let claimed: Vec<SystemTime> = row.get(3);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens must increase: {tokens:?}");
        assert!(
            hosts[..hosts.len() - 1].iter().all(|h| h == "k0"),
            "only the killed host's runs repeat: {hosts:?}"
        );
        for later in &claimed[1..] {
            assert!(*later > alive_until, "claimed again at {later:?}, while its holder still lived");
        }
    }
}

/// A renewal must never stall the work it renews: the work's own fenced write holds the
/// firing's row FOR SHARE, so a renewal that blocked the work would wait for it forever.
#[tokio::test(flavor = "multi_thread")]
async fn lease_renewals_do_not_stall_a_fenced_write_in_progress() {
    let db = TestDb::new("fire_renew").await;
    let firing = Firing::new("long-write", SystemTime::now() - Duration::from_secs(1));
    let options = DispatcherOptions::default()
        .with_lease(Duration::from_secs(5))
        .with_renew_every(Some(Duration::from_millis(50)))
        .with_poll(Duration::from_millis(50));
    let dispatcher = Dispatcher::connect(&db.url, "h", options).await.unwrap();
    let writer = Arc::new(tokio::sync::Mutex::new(db.connect().await));
    let due = vec![firing.clone()];
    let report = tokio::time::timeout(
        Duration::from_secs(20),
        dispatcher.dispatch(&due, &HostSet::new(["h"]), |ctx| {
            let writer = writer.clone();
            async move {
                let mut w = writer.lock().await;
                let tx = w.transaction().await.map_err(|e| e.to_string())?;
                assert_firing(&tx, &ctx.firing, ctx.token).await.map_err(|e| e.to_string())?;
                // Several renewal ticks pass while the fenced write is open.
                tokio::time::sleep(Duration::from_millis(400)).await;
                tx.execute("SELECT 1", &[]).await.map_err(|e| e.to_string())?;
                tx.commit().await.map_err(|e| e.to_string())
            }
        }),
    )
    .await
    .expect("the dispatch finished: renewals did not stall the work")
    .unwrap();
    assert_eq!(report.executed, 1);
}

/// A host whose clock runs five minutes fast asks for firings early; the database, whose clock
/// decides, grants none before it is due, and the host runs each once it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_fast_clock_never_starts_a_firing_before_it_is_due_by_the_database_clock() {
    let db = TestDb::new("fire_early").await;
    let client = db.connect().await;
    let db_now: SystemTime = client.query_one("SELECT clock_timestamp()", &[]).await.unwrap().get(0);
    let due: Vec<Firing> = (0..5)
        .map(|i| Firing::new(format!("midnight-{i}"), db_now + Duration::from_millis(1500 + 200 * i)))
        .collect();
    let fast = Clock::Local(Arc::new(|| SystemTime::now() + Duration::from_secs(300)));
    let options = DispatcherOptions::default()
        .with_grace(Duration::from_millis(20))
        .with_poll(Duration::from_millis(100))
        .with_clock(fast);
    let dispatcher = Dispatcher::connect(&db.url, "fast-host", options).await.unwrap();
    let started: Arc<Mutex<Vec<(SystemTime, SystemTime)>>> = Arc::default();
    let report = dispatcher
        .dispatch(&due, &HostSet::new(["fast-host"]), |ctx| {
            let (started, url) = (started.clone(), db.url.clone());
            async move {
                let clock = rendezvous_client::connect(&url).await.map_err(|e| e.to_string())?;
                let at: SystemTime =
                    clock.query_one("SELECT clock_timestamp()", &[]).await.map_err(|e| e.to_string())?.get(0);
                started.lock().unwrap().push((ctx.firing.fire_at, at));
                Ok(())
            }
        })
        .await
        .unwrap();
    assert_eq!(report.executed, 5, "{report:?}");
    let started = started.lock().unwrap();
    assert_eq!(started.len(), 5);
    for (fire_at, at) in started.iter() {
        assert!(at >= fire_at, "started {:?} before it was due", fire_at.duration_since(*at).unwrap());
    }
}

/// Batch claims never fail for contention alone (#28): 8 claimers with fully overlapping batches,
/// each in its own order and chunking, half of the firings made beforehand (a scheduler's pending
/// rows) and half new, completions running beside the claims. No call may fail (a 40P01 or 40001
/// would), and every firing is won exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn overlapping_batches_in_any_order_never_deadlock_and_each_firing_is_won_once() {
    const CLAIMERS: usize = 8;
    const FIRINGS: usize = 400;
    let db = TestDb::new("fire_overlap").await;
    let admin = db.connect().await;
    let fire_at = SystemTime::now() - Duration::from_secs(60);
    for round in 0..12 {
        let due: Vec<Firing> = (0..FIRINGS).map(|i| Firing::new(format!("r{round}-{i}"), fire_at)).collect();
        // Every other firing exists already, unclaimed, as due_firings makes them.
        admin
            .execute(
                "INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until, attempts,
                                                 day_mod_8)
                 SELECT rendezvous.firing_key(t, $2), t, $2, NULL, 0, NULL, $2, 0, rendezvous._day_mod_8($2)
                   FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) WHERE n % 2 = 0",
                &[&due.iter().map(|f| f.task_id.clone()).collect::<Vec<_>>(), &fire_at],
            )
            .await
            .unwrap();
        let barrier = Arc::new(Barrier::new(CLAIMERS));
        let mut tasks = Vec::new();
        for c in 0..CLAIMERS {
            let client = db.connect().await;
            let (barrier, mut order) = (barrier.clone(), due.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64((round * CLAIMERS + c) as u64);
                // Claimer 0 keeps the input order; the others shuffle it; chunk sizes differ.
                if c > 0 {
                    use rand::seq::SliceRandom;
                    order.shuffle(&mut rng);
                }
                let chunk = [400, 7, 64, 150, 33, 256, 1, 100][c];
                let host = format!("host-{c}");
                barrier.wait().await;
                let mut won = Vec::new();
                for batch in order.chunks(chunk) {
                    let refs: Vec<&Firing> = batch.iter().collect();
                    let claims = rendezvous_client::firing::claim_firings(
                        &client,
                        &refs,
                        &host,
                        Duration::from_secs(60),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("claimer {c}: claim_firings failed: {e:?}"));
                    let mine: Vec<(&Firing, i64)> = batch
                        .iter()
                        .zip(&claims)
                        .filter_map(|(f, cl)| {
                            cl.as_ref().filter(|cl| cl.claimed).map(|cl| (f, cl.token.unwrap()))
                        })
                        .collect();
                    let done = rendezvous_client::firing::complete_firings(&client, &mine)
                        .await
                        .unwrap_or_else(|e| panic!("claimer {c}: complete_firings failed: {e:?}"));
                    assert!(done.iter().all(|d| *d), "claimer {c}: a fresh claim's completion was refused");
                    won.extend(mine.iter().map(|(f, _)| f.task_id.clone()));
                }
                won
            }));
        }
        let mut wins: HashMap<String, u32> = HashMap::new();
        for t in tasks {
            for task_id in t.await.unwrap() {
                *wins.entry(task_id).or_default() += 1;
            }
        }
        assert_eq!(wins.len(), FIRINGS, "round {round}: every firing won");
        assert!(wins.values().all(|n| *n == 1), "round {round}: a firing won twice: {wins:?}");
    }
}

/// Everyone claims everything (#28): 8 dispatchers with the rank delays off dispatch the same
/// firings at once; none fails, and each firing is executed once.
#[tokio::test(flavor = "multi_thread")]
async fn dispatchers_without_rank_delays_never_deadlock() {
    let db = TestDb::new("fire_no_grace").await;
    let hosts: Vec<String> = (0..8).map(|i| format!("host-{i}")).collect();
    let view = HostSet::new(&hosts);
    for round in 0..3 {
        let fire_at = SystemTime::now();
        let due: Vec<Firing> = (0..2000).map(|i| Firing::new(format!("all-{round}-{i}"), fire_at)).collect();
        let executions: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let mut tasks = Vec::new();
        for h in &hosts {
            let options = DispatcherOptions::default()
                .with_grace(Duration::ZERO)
                .with_lease(Duration::from_secs(60))
                .with_poll(Duration::from_millis(50))
                .with_max_in_flight(256)
                .with_clock(Clock::Database);
            let dispatcher = Dispatcher::connect(&db.url, h, options).await.unwrap();
            let (due, view, executions) = (due.clone(), view.clone(), executions.clone());
            tasks.push(tokio::spawn(async move {
                dispatcher
                    .dispatch(&due, &view, move |ctx| {
                        let executions = executions.clone();
                        async move {
                            *executions.lock().unwrap().entry(ctx.firing.task_id.clone()).or_default() += 1;
                            Ok(())
                        }
                    })
                    .await
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            if let Err(e) = t.await.unwrap() {
                panic!("round {round}: dispatcher {i} failed: {e:?}");
            }
        }
        let executions = executions.lock().unwrap();
        assert_eq!(executions.len(), due.len(), "round {round}: every firing executed");
        assert!(executions.values().all(|n| *n == 1), "round {round}: a firing executed twice");
    }
}

/// The claim rule has two homes on purpose: `claim_firing` (C, the single hot path) and
/// `claim_firings` (PL/pgSQL, batches). Both decide every state a firing can be in the same way:
/// claimed or not, with which token.
#[tokio::test(flavor = "multi_thread")]
async fn claim_firing_and_claim_firings_decide_every_state_alike() {
    let db = TestDb::new("fire_twins").await;
    let admin = db.connect().await;
    let holder = db.connect().await; // a live session holding some claims
    let holder_pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let due = SystemTime::now() - Duration::from_secs(60);
    let later = SystemTime::now() + Duration::from_secs(3600);
    // Each state as a row of rendezvous.firings (NULL: no row), made for two copies of the key.
    let states: &[(&str, &str)] = &[
        ("unmade and due", ""),
        ("made by a scheduler, never claimed", "NULL, 0, NULL, $2, NULL, NULL, NULL, 0"),
        ("held by a live session", "'h', 5, now(), now() + interval '1 hour', NULL, NULL, 'live', 1"),
        (
            "lease ran out",
            "'h', 5, now() - interval '2 hours', now() - interval '1 hour', NULL, NULL, NULL, 1",
        ),
        ("holder session gone", "'h', 5, now(), now() + interval '1 hour', NULL, NULL, 'gone', 1"),
        ("completed", "'h', 5, now(), now() + interval '1 hour', now(), NULL, NULL, 1"),
        ("failed for good", "NULL, 5, now(), 'infinity', NULL, now(), NULL, 1"),
        ("waiting out a retry backoff", "NULL, 5, now(), now() + interval '1 hour', NULL, NULL, NULL, 1"),
        (
            "made before 0.3.0, lease live (no session)",
            "'h', 5, now(), now() + interval '1 hour', NULL, NULL, NULL, 1",
        ),
    ];
    for (i, (state, row)) in states.iter().enumerate() {
        let mut outcomes = Vec::new();
        for (copy, batch) in [("single", false), ("batch", true)] {
            let firing = Firing::new(format!("twin-{i}-{copy}"), due);
            if !row.is_empty() {
                let (session_pid, session_start) = if row.contains("'live'") {
                    (Some(holder_pid), "(SELECT backend_start FROM pg_stat_activity WHERE pid = $3)")
                } else if row.contains("'gone'") {
                    (Some(holder_pid), "'2000-01-01'::timestamptz")
                } else {
                    (None, "NULL")
                };
                let values = row.replace("'live'", session_start).replace("'gone'", session_start);
                // (holder, token, claimed_at, lease_until, completed_at, failed_at, holder_started, attempts)
                let sql = format!(
                    "INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, holder, token, claimed_at, lease_until,
                                                     completed_at, failed_at, holder_started, attempts, holder_pid, day_mod_8)
                     VALUES (rendezvous.firing_key($1, $2), $1, $2, {values}, $3, rendezvous._day_mod_8($2))"
                );
                admin.execute(sql.as_str(), &[&firing.task_id, &firing.fire_at, &session_pid]).await.unwrap();
            }
            let claim = if batch {
                rendezvous_client::firing::claim_firings(
                    &admin,
                    &[&firing],
                    "claimer",
                    Duration::from_secs(60),
                )
                .await
                .unwrap()
                .pop()
                .flatten()
                .unwrap()
            } else {
                claim_firing(&admin, &firing, "claimer", Duration::from_secs(60)).await.unwrap()
            };
            outcomes.push((claim.claimed, claim.token, claim.completed));
        }
        assert_eq!(outcomes[0], outcomes[1], "{state}: claim_firing and claim_firings differ");
    }
    // And a firing not yet due: neither claims, both say when.
    let (a, b) = (Firing::new("early-single", later), Firing::new("early-batch", later));
    let single = claim_firing(&admin, &a, "claimer", Duration::from_secs(60)).await.unwrap();
    let batch = rendezvous_client::firing::claim_firings(&admin, &[&b], "claimer", Duration::from_secs(60))
        .await
        .unwrap()
        .pop()
        .flatten()
        .unwrap();
    assert_eq!(
        (single.claimed, single.token, single.lease_until),
        (batch.claimed, batch.token, batch.lease_until)
    );
    drop(holder);
}
