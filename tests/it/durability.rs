//! What a caller was told survives a crash, whatever its session's `synchronous_commit`: an
//! epoch bump, a firing token and a completion, once acknowledged, are flushed before the
//! acknowledgement (the extension forces those commits), so the next leader never gets an
//! epoch already handed out and a completed firing never runs again.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rendezvous_cli::cluster::{Cluster, ClusterOptions};

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_epochs_tokens_and_completions_survive_a_crash_under_synchronous_commit_off() {
    // The WAL writer flushes asynchronous commits only every 10 s: a crash before that loses them.
    let settings = [("fsync", "off"), ("wal_writer_delay", "10s")];
    let options = ClusterOptions {
        settings: settings.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start_with(&options).await.unwrap();
    let client = rendezvous_tests::connect(&cluster.url()).await;
    client
        .batch_execute(
            "CREATE TABLE canary (x integer); INSERT INTO canary VALUES (1);
             SET synchronous_commit = off;",
        )
        .await
        .unwrap();
    let fire_at = SystemTime::now() - Duration::from_secs(60);
    let lead = "SELECT epoch FROM rendezvous.try_lead('g', 'a')";
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 1);
    client.execute("SELECT rendezvous.resign('g')", &[]).await.unwrap();
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 2);
    let claim = "SELECT claimed, token FROM rendezvous.claim_firing($1, $2, 'h')";
    for task in ["done", "claimed"] {
        let row = client.query_one(claim, &[&task, &fire_at]).await.unwrap();
        assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 1));
    }
    let complete = "SELECT rendezvous.complete_firing('done', $1, 1)";
    assert!(client.query_one(complete, &[&fire_at]).await.unwrap().get::<_, bool>(0));
    // Last, an ordinary asynchronous commit: the crash should take it, showing the setup loses
    // what is not forced to disk. The WAL writer may still flush it (when the commit ends a WAL
    // page, say): then crash again after another one, a few times.
    let mut client = client;
    let mut lost = false;
    for round in 1..=5 {
        client
            .batch_execute(&format!("SET synchronous_commit = off; UPDATE canary SET x = {}", round + 1))
            .await
            .unwrap();
        cluster.crash_restart().unwrap();
        client = rendezvous_tests::connect(&cluster.url()).await;
        let canary: i32 = client.query_one("SELECT x FROM canary", &[]).await.unwrap().get(0);
        if canary == round {
            lost = true;
            break;
        }
        assert_eq!(canary, round + 1);
    }
    assert!(lost, "five crashes lost no asynchronous commit: this test proves nothing");
    let epoch: i64 = client.query_one("SELECT epoch FROM rendezvous.leader('g')", &[]).await.unwrap().get(0);
    assert_eq!(epoch, 2, "an acknowledged epoch bump was lost");
    let rows = client
        .query(
            "SELECT task_id, token, completed_at IS NOT NULL FROM rendezvous.status_firings ORDER BY task_id",
            &[],
        )
        .await
        .unwrap();
    let firings: Vec<(String, i64, bool)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        firings,
        vec![("claimed".into(), 1, false), ("done".into(), 1, true)],
        "claims or completions lost"
    );
    // The next leader's epoch is above every epoch handed out before the crash.
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 3);
}

/// A standby promoted after losing the primary's last commits (replication cut, then the
/// primary dies) must not hand out an epoch, a token or a run id the old primary acknowledged:
/// every new one is above `(timeline - 1) << 32`, so an acknowledged run id never names another
/// key (#43). A standby refuses to hand any out before it is promoted.
#[tokio::test(flavor = "multi_thread")]
async fn fencing_numbers_never_repeat_after_promoting_a_standby_that_lost_commits() {
    let primary = Cluster::start().await.unwrap();
    let standby = primary.standby().unwrap();
    let p = rendezvous_tests::connect(&primary.url()).await;
    let s = rendezvous_tests::connect(&standby.url()).await;
    let fire_at = SystemTime::now() - Duration::from_secs(60);
    let lead = |who: &'static str| format!("SELECT epoch FROM rendezvous.try_lead('g', '{who}')");
    let claim = "SELECT token FROM rendezvous.claim_firing($1, $2, $3, '1 s')";
    // Replicated: epoch 1, token 1 of firing a.
    assert_eq!(p.query_one(&lead("a"), &[]).await.unwrap().get::<_, i64>(0), 1);
    assert_eq!(p.query_one(claim, &[&"a", &fire_at, &"h1"]).await.unwrap().get::<_, i64>(0), 1);
    let spawn = "SELECT run_id FROM rendezvous.spawn_run('t', 'w', '{}', $1)";
    let replicated_run: i64 = p.query_one(spawn, &[&"replicated"]).await.unwrap().get(0);
    let lsn: String = p.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    wait_until(&s, &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")).await;
    // The primary warns that a failover to its only standby could lose acknowledged work.
    let row = p
        .query_one("SELECT standbys, synchronous, warning FROM rendezvous.replication_status()", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (1, 0));
    assert!(row.get::<_, String>(2).contains("none is synchronous"));
    // Made synchronous, it still warns where commits would not wait for the standby: a role
    // whose setting turns synchronous_commit to local (a host connecting as it).
    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "SELECT pg_reload_conf()",
        "CREATE ROLE rendezvous_lax_host",
        "ALTER ROLE rendezvous_lax_host SET synchronous_commit = local",
    ] {
        p.batch_execute(statement).await.unwrap();
    }
    wait_until(&p, "SELECT synchronous = 1 FROM rendezvous.replication_status()").await;
    let warning: String =
        p.query_one("SELECT warning FROM rendezvous.replication_status()", &[]).await.unwrap().get(0);
    assert!(warning.contains("synchronous_commit is off or local for role rendezvous_lax_host"), "{warning}");
    assert!(!warning.contains("none is synchronous"), "{warning}");
    for statement in [
        "DROP ROLE rendezvous_lax_host",
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        p.batch_execute(statement).await.unwrap();
    }
    wait_until(&p, "SELECT synchronous = 0 FROM rendezvous.replication_status()").await;
    let warning: String =
        s.query_one("SELECT warning FROM rendezvous.replication_status()", &[]).await.unwrap().get(0);
    assert!(warning.contains("standby"), "{warning}");
    // A standby hands out nothing, whatever it is asked.
    let refused = s.query_one(&lead("s"), &[]).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
        "{refused:?}"
    );

    // An elector pointed at the standby never leads (fail closed).
    let elector = rendezvous_client::LeaderElector::start(
        standby.url().as_str(),
        "g2",
        "on-standby",
        rendezvous_client::LeaderOptions::default().with_refresh(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!elector.is_leader(), "an elector leads on a standby: {:?}", elector.leadership());
    elector.shutdown(std::time::Duration::from_secs(10)).await.ok();

    // Replication cut; the primary acknowledges more, then dies.
    s.batch_execute("ALTER SYSTEM SET primary_conninfo = ''").await.unwrap();
    s.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    wait_until(&s, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_wal_receiver)").await;
    p.execute("SELECT rendezvous.resign('g')", &[]).await.unwrap();
    assert_eq!(p.query_one(&lead("b"), &[]).await.unwrap().get::<_, i64>(0), 2);
    tokio::time::sleep(Duration::from_millis(1100)).await; // a's first lease ends
    assert_eq!(p.query_one(claim, &[&"a", &fire_at, &"h2"]).await.unwrap().get::<_, i64>(0), 2);
    assert_eq!(p.query_one(claim, &[&"b", &fire_at, &"h2"]).await.unwrap().get::<_, i64>(0), 1);
    // More admissions than the sequence logs ahead of itself (32): their ids are lost with them.
    let mut acknowledged_runs = Vec::new();
    for n in 0..100 {
        let key = format!("lost-{n}");
        acknowledged_runs.push((p.query_one(spawn, &[&key]).await.unwrap().get::<_, i64>(0), key));
    }
    primary.kill().unwrap();

    standby.promote().unwrap();
    let s = rendezvous_tests::connect(&standby.url()).await;
    // It lost them: epoch 1 and a's token 1 are all it knows, and b was never claimed here.
    let epoch: i64 =
        s.query_one("SELECT epoch FROM rendezvous.leaders WHERE group_name = 'g'", &[]).await.unwrap().get(0);
    assert_eq!(epoch, 1, "the cut did not lose the primary's last commits: this test proves nothing");
    // Every new number is above every acknowledged one.
    let floor = 1i64 << 32;
    let epoch: i64 = s.query_one(&lead("c"), &[]).await.unwrap().get(0);
    assert!(epoch > 2 && epoch >= floor, "epoch {epoch} after promotion");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (firing, acknowledged) in [("a", 2), ("b", 1)] {
        let token: i64 = s.query_one(claim, &[&firing, &fire_at, &"h3"]).await.unwrap().get(0);
        assert!(token > acknowledged && token >= floor, "token {token} of {firing} after promotion");
    }
    // And they count on from there.
    s.execute("SELECT rendezvous.resign('g')", &[]).await.unwrap();
    assert_eq!(s.query_one(&lead("d"), &[]).await.unwrap().get::<_, i64>(0), epoch + 1);

    // Run ids: the lost admissions are gone, the replicated one kept its id, and new ones (one
    // by one, in batches, from several sessions at once) start above every acknowledged id,
    // so none of those names another key.
    let kept: i64 = s
        .query_one("SELECT count(*) FROM rendezvous.runs WHERE dispatch_key LIKE 'lost-%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 0, "the cut did not lose the primary's last admissions: this test proves nothing");
    assert_eq!(s.query_one(spawn, &[&"replicated"]).await.unwrap().get::<_, i64>(0), replicated_run);
    let mut sessions = Vec::new();
    for n in 0..4 {
        let url = standby.url();
        sessions.push(tokio::spawn(async move {
            let c = rendezvous_tests::connect(&url).await;
            let one: i64 = c.query_one(spawn, &[&format!("new-{n}")]).await.unwrap().get(0);
            let batch: Vec<i64> = c
                .query(
                    "SELECT run_id FROM rendezvous.spawn_runs('t', ARRAY['w', 'w'], NULL, ARRAY[$1, $2])",
                    &[&format!("batch-{n}-a"), &format!("batch-{n}-b")],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            [vec![one], batch].concat()
        }));
    }
    let mut new_runs = Vec::new();
    for session in sessions {
        new_runs.extend(session.await.unwrap());
    }
    let highest_acknowledged = acknowledged_runs.iter().map(|(id, _)| *id).max().unwrap();
    assert!(
        new_runs.iter().all(|id| *id > highest_acknowledged && *id > floor),
        "run ids {new_runs:?} after promotion"
    );
    new_runs.sort_unstable();
    new_runs.dedup();
    assert_eq!(new_runs.len(), 12, "a run id handed out twice");
    for (id, key) in &acknowledged_runs {
        let named: Option<String> = s
            .query_opt("SELECT dispatch_key FROM rendezvous.runs WHERE run_id = $1", &[id])
            .await
            .unwrap()
            .map(|r| r.get(0));
        assert!(named.is_none(), "acknowledged run id {id} ({key}) names {named:?} after promotion");
    }
}

/// Polls `query` (a boolean) on `client` until it is true, for up to 10 s.
async fn wait_until(client: &tokio_postgres::Client, query: &str) {
    wait_until_for(client, query, Duration::from_secs(10)).await;
}

/// A scheduler on a multi-host URL (`target_session_attrs=read-write`) rides through a
/// failover: the primary dies, the standby is promoted, and the scheduler reconnects to it by
/// itself and goes on running firings there, with tokens above the old timeline's.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_on_a_multi_host_url_follows_a_promotion() {
    use rendezvous_client::WorkerOptions;
    let primary = Cluster::start().await.unwrap();
    let standby = primary.standby().unwrap();
    let url = format!(
        "postgresql://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&connect_timeout=2",
        standby.port, primary.port
    );
    // The read-write host is the primary, though the standby is listed first.
    let client = rendezvous_client::connect(url.as_str()).await.unwrap();
    let in_recovery: bool = client.query_one("SELECT pg_is_in_recovery()", &[]).await.unwrap().get(0);
    assert!(!in_recovery);
    drop(client);
    let scheduler = ticking_scheduler(&url, WorkerOptions::default()).await;
    let completed = "SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL";
    let p = rendezvous_tests::connect(&primary.url()).await;
    wait_until(&p, &format!("SELECT ({completed}) >= 2")).await;
    primary.kill().unwrap();
    standby.promote().unwrap();
    let s = rendezvous_tests::connect(&standby.url()).await;
    let floor = 1i64 << 32;
    let after = format!(
        "SELECT count(*) >= 2 FROM rendezvous.firings WHERE completed_at IS NOT NULL AND token >= {floor}"
    );
    wait_until_for(&s, &after, Duration::from_secs(20)).await;
    let stats = scheduler.stats();
    assert!(stats.reconnects >= 1, "{stats:?}");
    scheduler.shutdown(Duration::from_secs(2)).await.unwrap();
}

/// Host `h1` with a per-second task `tick` whose firings do nothing, on `url`, polling and
/// heartbeating fast (`base`'s other options kept).
async fn ticking_scheduler(url: &str, base: rendezvous_client::WorkerOptions) -> rendezvous_client::Worker {
    use rendezvous_client::{Job, TaskSpec, Worker};
    Worker::builder(url, "h1")
        .options(
            base.with_poll(Duration::from_millis(200))
                .with_heartbeat(Duration::from_millis(300))
                .with_staleness(Duration::from_secs(2))
                .with_max_backoff(Duration::from_millis(500)),
        )
        .task(TaskSpec::new("tick", "* * * * * *").with_lease(Duration::from_secs(3)), |_job: Job| async {
            Ok::<(), std::io::Error>(())
        })
        .start()
        .await
        .unwrap()
}

/// A failover that leaves the old primary up and writable (no HA engine fenced it), cut off
/// from the standby that was promoted, with the old primary named first in the hosts' URL: its
/// commits wait for a synchronous standby that is gone, and it still accepts connections, so a
/// host that reconnected through the URL in order would land on it again after every call given
/// up there (#43). A commit that waited past a call's bound makes the server suspect: the
/// host's connections to it are closed, and the scheduler and the elector go on on the
/// promoted node, with tokens and an epoch of its timeline.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_leaves_an_old_primary_left_writable_for_the_promoted_node() {
    use rendezvous_client::{LeaderElector, LeaderOptions, WorkerOptions};
    let primary = Cluster::start().await.unwrap();
    let standby = primary.standby().unwrap();
    let url = format!(
        "postgresql://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&connect_timeout=2",
        primary.port, standby.port
    );
    let scheduler =
        ticking_scheduler(&url, WorkerOptions::default().with_call_timeout(Duration::from_secs(1))).await;
    let elector = LeaderElector::start(
        url.as_str(),
        "g",
        "h1",
        LeaderOptions::default().with_refresh(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let p = rendezvous_tests::connect(&primary.url()).await;
    let completed = "SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL";
    wait_until(&p, &format!("SELECT ({completed}) >= 2")).await;
    wait_until(&p, "SELECT count(*) = 1 FROM rendezvous.leaders WHERE group_name = 'g'").await;
    // The standby is promoted while the old primary stays up; from then on the old primary's
    // commits wait for a synchronous standby (this session's own, run locally, excepted).
    standby.promote().unwrap();
    for statement in [
        "SET synchronous_commit = local",
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
        "SELECT pg_reload_conf()",
    ] {
        p.batch_execute(statement).await.unwrap();
    }
    let s = rendezvous_tests::connect(&standby.url()).await;
    let floor = 1i64 << 32;
    let after = format!(
        "SELECT count(*) >= 2 FROM rendezvous.firings WHERE completed_at IS NOT NULL AND token >= {floor}"
    );
    wait_until_for(&s, &after, Duration::from_secs(30)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while elector.epoch().is_none_or(|epoch| epoch < floor) {
        assert!(
            std::time::Instant::now() < deadline,
            "no term on the promoted node: {:?}",
            elector.leadership()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // No session of the host is left on the old primary (each one given up was cancelled).
    let sessions =
        "SELECT application_name || ' ' || state || ' ' || coalesce(wait_event, '') || ' ' || left(query, 40)
                      FROM pg_stat_activity WHERE application_name LIKE 'rendezvous %'";
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<String> = p.query(sessions, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sessions left on the old primary: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(elector);
    scheduler.shutdown(Duration::from_secs(2)).await.unwrap();
    p.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").await.unwrap();
    p.batch_execute("SELECT pg_reload_conf()").await.unwrap();
}

/// A server with no connection left must not freeze a host that lost its own (#43: a fleet
/// beside CPU hogs froze for 30-40 s after a failover: every host's job pool had grown for the
/// backlog, the promoted server refused new connections with 53300, and a host whose control
/// connection was gone could not get back in while the pools kept their idle connections).
/// Two Workers grow their job pools; the rest of the server is filled; one Worker's control
/// connection is ended. It gets back in within seconds, its own idle job connections making way
/// (before, it never did while the server stayed full), and the other Worker's idle job
/// connections are closed after they idle a while (before, the pool kept its size for good).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_gets_back_into_a_server_that_job_connections_filled() {
    use rendezvous_client::{Job, Worker, WorkerOptions};
    let cluster = Cluster::start_with(&ClusterOptions {
        settings: vec![("fsync".into(), "off".into()), ("max_connections".into(), "40".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let admin = rendezvous_tests::connect(&cluster.url()).await;
    admin
        .execute("SELECT rendezvous.spawn_run('acme', 'busy', '{}') FROM generate_series(1, 24)", &[])
        .await
        .unwrap();
    let options = WorkerOptions::default()
        .with_max_concurrent(12)
        .with_prefetch(0)
        .with_poll(Duration::from_millis(200))
        .with_max_backoff(Duration::from_millis(300));
    let start = |host: &'static str| {
        let (url, options) = (cluster.url(), options.clone());
        async move {
            Worker::builder(url.as_str(), host)
                .options(options)
                .workflow("busy", |job: Job| async move {
                    job.client().await?.execute("SELECT pg_sleep(1)", &[]).await?;
                    Ok::<(), rendezvous_client::Error>(())
                })
                .start()
                .await
                .unwrap()
        }
    };
    let (a, b) = (start("full-a").await, start("full-b").await);
    let sessions = |app: &str| {
        format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rendezvous scheduler {app}'")
    };
    rendezvous_tests::wait_for_count(
        &admin,
        "SELECT count(*) FROM rendezvous.runs WHERE workflow_ref = 'busy' AND state = 'succeeded'",
        24,
    )
    .await;
    // Both pools grew for the backlog; their connections are idle now. The rest of the server
    // is taken (superuser connections included: the hosts connect as one).
    let job_sessions =
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'rendezvous scheduler full-% job'";
    let grown: i64 = admin.query_one(job_sessions, &[]).await.unwrap().get(0);
    assert!(grown >= 8, "{grown} job connections");
    let mut fillers = Vec::new();
    while let Ok(c) = rendezvous_client::connect(cluster.url().as_str()).await {
        fillers.push(c);
        assert!(fillers.len() < 40, "the server never filled up");
    }
    // Host a's control connection ends; a filler takes its place at once.
    let ended: bool = admin
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rendezvous scheduler full-a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ended);
    rendezvous_tests::wait_for_count(&admin, &sessions("full-a"), 0).await;
    if let Ok(c) = rendezvous_client::connect(cluster.url().as_str()).await {
        fillers.push(c);
    }
    let waited = std::time::Instant::now();
    while a.stats().reconnects == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(8),
            "the host never got back into the full server: {:?}",
            a.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Host b's idle job connections are closed after a while (its looks close them).
    wait_until_for(
        &admin,
        "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'rendezvous scheduler full-b job'",
        Duration::from_secs(30),
    )
    .await;
    drop(fillers);
    a.shutdown(Duration::from_secs(5)).await.unwrap();
    b.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Polls `query` (a boolean) on `client` until it is true, for up to `timeout`.
async fn wait_until_for(client: &tokio_postgres::Client, query: &str, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    while !client.query_one(query, &[]).await.unwrap().get::<_, bool>(0) {
        assert!(std::time::Instant::now() < deadline, "{query}: still false after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A leader on a primary cut off from its synchronous standby stops confirming within its
/// lease: its confirmation is a write, which that primary cannot acknowledge.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_primary_lost_its_synchronous_standby_stops_confirming() {
    use rendezvous_client::{LeaderElector, LeaderOptions};
    let primary = Cluster::start().await.unwrap();
    let standby = primary.standby().unwrap();
    let p = rendezvous_tests::connect(&primary.url()).await;
    p.batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'").await.unwrap();
    p.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    wait_until(&p, "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync')").await;
    let refresh = Duration::from_millis(200);
    let elector = LeaderElector::start(
        primary.url().as_str(),
        "g",
        "a",
        LeaderOptions::default().with_refresh(refresh).with_lease(Some(Duration::from_millis(600))),
    )
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !elector.is_leader() {
        assert!(std::time::Instant::now() < deadline, "no leadership with a synchronous standby");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The standby goes away: the primary can no longer acknowledge a commit.
    standby.kill().unwrap();
    let lost = std::time::Instant::now();
    while elector.is_leader() {
        assert!(lost.elapsed() < Duration::from_secs(5), "the leader kept confirming without its standby");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lost.elapsed() < Duration::from_secs(2), "stepped down after {:?}", lost.elapsed());
    drop(elector);
}

/// A commit whose wait for the synchronous standby is cancelled is acknowledged by PostgreSQL
/// with only a WARNING; every acknowledging call surfaces it as `Error::NotReplicated`. Here
/// the named standby never connects, so every commit of a `synchronous_commit = on` session
/// waits, and a watcher cancels each wait: as an operator or a failover tool would.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_synchronous_replication_wait_is_an_error_not_an_acknowledgement() {
    use rendezvous_client::{firing, leader, Error, Firing, LeaderElector, LeaderOptions};
    let settings =
        [("fsync", "off"), ("synchronous_standby_names", "nobody"), ("synchronous_commit", "local")];
    let options = ClusterOptions {
        settings: settings.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start_with(&options).await.unwrap();
    let admin = rendezvous_tests::connect(&cluster.url()).await;
    let waiting = Arc::new(AtomicU64::new(0));
    let watcher = {
        let admin = rendezvous_tests::connect(&cluster.url()).await;
        let waiting = waiting.clone();
        tokio::spawn(async move {
            loop {
                let cancelled: i64 = admin
                    .query_one(
                        "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
                          WHERE wait_event = 'SyncRep'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                waiting.fetch_add(cancelled as u64, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let waiting_url = format!("{}?options=-c%20synchronous_commit%3Don", cluster.url());
    let not_replicated = |r: &Error| matches!(r, Error::NotReplicated(_));

    // Admission: refused, yet committed on the primary; the same key gets the same run back
    // on a session that does not wait.
    let client = rendezvous_client::connect(waiting_url.as_str()).await.unwrap();
    let input = serde_json::json!({});
    let e = rendezvous_client::spawn_run(&client, "t", "w", &input, Some("k")).await.unwrap_err();
    assert!(not_replicated(&e), "spawn_run acknowledged: {e}");
    let local = rendezvous_client::connect(cluster.url().as_str()).await.unwrap();
    let run = rendezvous_client::spawn_run(&local, "t", "w", &input, Some("k")).await.unwrap();
    assert!(!run.created, "the refused admission was not committed on the primary");
    // Meanwhile a connection whose commits do not wait is never refused: a cancelled wait is
    // matched to the connection it happened on, not to the whole process.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bystander = {
        let client = rendezvous_client::connect(cluster.url().as_str()).await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut calls = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("bystander-{calls}");
                if let Err(e) =
                    rendezvous_client::spawn_run(&client, "t", "w", &serde_json::json!({}), Some(&key)).await
                {
                    return Err(format!("call {calls}: {e}"));
                }
                calls += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(calls)
        })
    };

    // Claims and completions.
    let firing = Firing::new("task", SystemTime::now() - Duration::from_secs(1));
    let lease = Duration::from_secs(30);
    let e = firing::claim_firing(&client, &firing, "h", lease).await.unwrap_err();
    assert!(not_replicated(&e), "claim_firing acknowledged: {e}");
    // (A batch that only finds firings held writes nothing, so it has nothing to wait for: it
    // claims a firing of its own.)
    let batch = Firing::new("task-batch", firing.fire_at);
    let e = firing::claim_firings(&client, &[&batch, &firing], "h", lease).await.unwrap_err();
    assert!(not_replicated(&e), "claim_firings acknowledged: {e}");
    let token: i64 = admin
        .query_one("SELECT token FROM rendezvous.status_firings WHERE task_id = 'task'", &[])
        .await
        .unwrap()
        .get(0);
    let e = firing::complete_firing(&client, &firing, token).await.unwrap_err();
    assert!(not_replicated(&e), "complete_firing acknowledged: {e}");

    // Terms: neither the stateless call nor an elector takes a term it could lose.
    let e = leader::try_lead(&client, "g", "a").await.unwrap_err();
    assert!(not_replicated(&e), "try_lead acknowledged: {e}");
    let elector = LeaderElector::start(
        waiting_url.as_str(),
        "h",
        "b",
        LeaderOptions::default().with_refresh(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    // Watched for 2 s at least, and until its first try is committed on the primary (a loaded
    // machine may take longer than 2 s to get there): never leading all the while.
    let watched_since = std::time::Instant::now();
    let mut epoch: i64 = 0;
    while watched_since.elapsed() < Duration::from_secs(2)
        || (epoch < 1 && watched_since.elapsed() < Duration::from_secs(20))
    {
        assert!(!elector.is_leader(), "an elector led on an unreplicated term");
        epoch = admin.query_one("SELECT epoch FROM rendezvous.leader('h')", &[]).await.unwrap().get(0);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(epoch >= 1, "the elector never tried in 20 s");
    drop(elector);

    // The refused completion is committed on the primary all the same.
    let completed: bool = admin
        .query_one(
            "SELECT completed_at IS NOT NULL FROM rendezvous.status_firings WHERE task_id = 'task'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(completed);
    assert!(rendezvous_client::replication::cancelled_sync_waits() >= 6);
    assert!(waiting.load(Ordering::SeqCst) >= 6);
    stop.store(true, Ordering::SeqCst);
    let calls = bystander.await.unwrap().unwrap_or_else(|e| panic!("a bystander's call was refused: {e}"));
    assert!(calls > 20, "the bystander made {calls} calls");
    watcher.abort();
}

/// No host waits forever on a primary that cannot commit (#23): once the server requires a
/// synchronous standby that never comes (a primary cut off from its standby), every commit
/// waits. A Worker bounds each look and each side call by its call timeout, gives the
/// connection up (closed, its statement cancelled: no server session is left waiting),
/// connects again, and shuts down promptly; without the timeout its loop hangs in its first waiting commit,
/// never connects again, and its shutdown never returns. A Membership's heartbeats likewise.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_never_hangs_on_a_primary_that_cannot_commit() {
    use rendezvous_client::{Job, Membership, MembershipOptions, Worker, WorkerOptions};
    let cluster = Cluster::start_with(&ClusterOptions {
        settings: vec![("fsync".into(), "off".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let admin = rendezvous_tests::connect(&cluster.url()).await;
    let options = WorkerOptions::default()
        .with_call_timeout(Duration::from_secs(1))
        .with_poll(Duration::from_millis(200))
        .with_heartbeat(Duration::from_millis(300))
        .with_max_backoff(Duration::from_millis(300));
    let scheduler = Worker::builder(cluster.url().as_str(), "h")
        .options(options)
        .workflow("w", |_job: Job| async { Ok::<(), std::io::Error>(()) })
        .start()
        .await
        .unwrap();
    let membership = Membership::start(
        cluster.url().as_str(),
        "m",
        MembershipOptions::default()
            .with_interval(Duration::from_millis(200))
            .with_call_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    // The standby requirement appears: from now on every commit waits (this session's too,
    // except what it runs with synchronous_commit = local).
    for statement in [
        "SET synchronous_commit = local",
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(statement).await.unwrap();
    }
    rendezvous_client::spawn_run(&admin, "t", "w", &serde_json::json!({}), None).await.unwrap();
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
    // The scheduler's commits wait.
    rendezvous_tests::wait_for_count(&admin, waiting, 1).await;
    // Its looks give up at the call timeout, each dropping the connection: within 20 s (a busy
    // machine connects slowly), at least two of them.
    let waited = std::time::Instant::now();
    while scheduler.stats().timeouts < 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the scheduler waited on a commit that never returns: {:?}",
            scheduler.stats()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each look given up is closed and its statement cancelled: the server's sessions waiting
    // for the standby do not pile up with the reconnections (each host piece has one call in
    // flight at most). Before, every timeout left one behind: 8 and more after 6 timeouts.
    let waited = std::time::Instant::now();
    while scheduler.stats().timeouts < 6 {
        assert!(waited.elapsed() < Duration::from_secs(60), "{:?}", scheduler.stats());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // (Sessions after the first wait on its locks, held until the standby answers.)
    let sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'rendezvous %'";
    let mut most = 0;
    for _ in 0..10 {
        most = most.max(admin.query_one(sessions, &[]).await.unwrap().get::<_, i64>(0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(most <= 6, "{most} sessions of the host's pieces after 6 timeouts: given-up connections live on");
    let report =
        tokio::time::timeout(Duration::from_secs(20), scheduler.shutdown(Duration::from_secs(1))).await;
    assert!(report.is_ok(), "shutdown returned although no commit ever does");
    // The membership's heartbeats give up at the call timeout and say so; it still stops.
    let waited = std::time::Instant::now();
    while !membership.status().last_error.is_some_and(|e| e.contains("no answer within")) {
        assert!(waited.elapsed() < Duration::from_secs(20), "heartbeats hung: {:?}", membership.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A deadline longer than the test's limit: the leave itself must give up at its call timeout.
    let stopped =
        tokio::time::timeout(Duration::from_secs(20), membership.shutdown(Duration::from_secs(600))).await;
    let report = stopped.expect("the membership's shutdown hung on its leave").unwrap();
    assert!(report.on_time && !report.left, "the leave cannot commit, and says so: {report:?}");
    // Let the waiting commits go, so the cluster stops cleanly.
    admin.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").await.unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();
}

/// A primary that a failover tool fences while it stays up (new transactions read-only): a
/// client connection made to it while it took writes closes itself once it reports itself
/// read-only, so every piece of the client connects again through its URL (to the new
/// primary) instead of failing every write with 25006 for as long as the old one runs. A
/// connection made to a read-only server from the start (a standby read on purpose) stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_to_a_primary_that_turns_read_only_closes_itself() {
    let cluster = Cluster::start_with(&ClusterOptions {
        settings: vec![("fsync".into(), "off".into())],
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    let url = cluster.url();
    let writer = rendezvous_tests::connect(&url).await;
    let fence = rendezvous_tests::connect(&url).await;
    for statement in ["ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()"] {
        fence.batch_execute(statement).await.unwrap();
    }
    // Made now, while the server is read-only: stays open.
    let reader = rendezvous_tests::connect(&url).await;
    // The writer's next write is refused (or finds the connection closed already: a server may
    // report the change to an idle session at once), and the connection closes.
    let refused = writer.batch_execute("CREATE TABLE t (x int)").await.unwrap_err();
    assert!(
        refused.is_closed()
            || refused.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
        "{refused:?}"
    );
    let start = std::time::Instant::now();
    while !writer.is_closed() {
        assert!(start.elapsed() < Duration::from_secs(5), "the connection to the fenced primary stayed open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reader.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    assert!(!reader.is_closed());
    // Reopened, the server takes writes again (for the cluster's clean stop).
    for statement in ["ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()"] {
        reader.batch_execute(statement).await.unwrap();
    }
}
