//! Retention runs by itself: a fleet's scheduler deletes old finished history in bounded steps,
//! on one host, and nothing that is unfinished or recent.
use std::time::{Duration, Instant};

use rendezvous_client::{retention, Job, Worker, WorkerOptions};
use rendezvous_tests::TestDb;

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_prunes_old_history_in_bounded_steps() {
    let db = TestDb::new("retention").await;
    let admin = db.connect().await;
    // 2,500 firings and 1,500 runs finished two days ago (more than two steps of each), and
    // some that must stay: recent, unfinished.
    admin
        .batch_execute(
            "INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, completed_at, day_mod_8)
             SELECT 'old-' || i, 'old', d + i * interval '1 ms', 1, d, now() - interval '2 days', rendezvous._day_mod_8(d)
               -- Noon UTC three days ago: one partition, with the unfinished firing below, at any time of day.
               FROM generate_series(1, 2500) i, (SELECT date_trunc('day', now(), 'UTC') - interval '60 hours' AS d) x;
             INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, completed_at, day_mod_8)
             VALUES ('recent', 'old', now(), 1, now(), now(), rendezvous._day_mod_8(now()));
             INSERT INTO rendezvous.firings (firing_key, task_id, fire_at, token, lease_until, day_mod_8)
             SELECT 'unfinished', 'old', d, 0, d, rendezvous._day_mod_8(d)
               FROM (SELECT date_trunc('day', now(), 'UTC') - interval '60 hours' AS d) x;
             INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, state, created_at, updated_at)
             SELECT 't', 'w', '{}', 'succeeded', now() - interval '9 days', now() - interval '8 days'
               FROM generate_series(1, 1500);
             INSERT INTO rendezvous.runs (tenant_id, workflow_ref, input, state) VALUES ('t', 'w', '{}', 'pending');",
        )
        .await
        .unwrap();
    // One step by hand: bounded.
    let step = retention::prune(&admin, 1000).await.unwrap();
    assert_eq!((step.firings, step.runs), (1000, 1000), "{step:?}");

    // The rest, by a running scheduler's own passes.
    let options = WorkerOptions::default()
        .with_heartbeat(Duration::from_millis(200))
        .with_retention(Some(Duration::from_millis(300)));
    let scheduler = Worker::builder(&db.url, "keeper")
        .options(options)
        .workflow("w-none", |_job: Job| async { Ok::<_, rendezvous_client::Error>(()) })
        .start()
        .await
        .unwrap();
    let count = |sql: &'static str| {
        let admin = &admin;
        async move { admin.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    let started = Instant::now();
    while count("SELECT count(*) FROM rendezvous.firings").await > 2
        || count("SELECT count(*) FROM rendezvous.runs").await > 1
    {
        assert!(started.elapsed() < Duration::from_secs(20), "retention did not run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<String> = admin
        .query("SELECT firing_key FROM rendezvous.firings ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["recent", "unfinished"]);
    assert_eq!(count("SELECT count(*) FROM rendezvous.runs WHERE state = 'pending'").await, 1);
    scheduler.shutdown(Duration::from_secs(5)).await.unwrap();
}
