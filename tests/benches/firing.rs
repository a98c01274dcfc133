//! Firings claimed and completed per second across 8 hosts, and wasted claim attempts (claims
//! that lost), side by side in one run: HRW rank-delayed dispatch, everyone claiming
//! everything, and a `FOR UPDATE SKIP LOCKED` queue.
//!
//! Run: `scripts/bench.sh firing`, or `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-tests --bench firing`.
use std::time::{Duration, Instant, SystemTime};

use rendezvous_client::hrw::HostSet;
use rendezvous_client::Clock;
use rendezvous_client::Firing;
use rendezvous_tests::dispatch::{Dispatcher, DispatcherOptions};

const HOSTS: usize = 8;
const FIRINGS: usize = 20_000;

struct Row {
    name: &'static str,
    per_sec: f64,
    attempts: u64,
    wasted: u64,
    /// Attempts before the firing was due by the database clock (not lost: claimed once due).
    early: u64,
    /// Hosts whose dispatch ended in an error (each one printed when it happens): the row's
    /// figures then cover only what the others did.
    failed_hosts: usize,
}

async fn dispatch_run(url: &str, name: &'static str, grace: Duration, tag: &str) -> Row {
    let hosts: Vec<String> = (0..HOSTS).map(|i| format!("host-{i}")).collect();
    let view = HostSet::new(&hosts);
    // All due a moment from now, so every host starts at its own rank delay.
    let fire_at = SystemTime::now() + Duration::from_millis(500);
    let due: Vec<Firing> = (0..FIRINGS).map(|i| Firing::new(format!("{tag}-{i}"), fire_at)).collect();
    let mut dispatchers = Vec::new();
    for h in &hosts {
        let options = DispatcherOptions::default()
            .with_grace(grace)
            .with_lease(Duration::from_secs(60))
            .with_poll(Duration::from_millis(100))
            .with_max_in_flight(256)
            .with_clock(Clock::Database);
        dispatchers.push(Dispatcher::connect(url, h, options).await.unwrap());
    }
    let mut tasks = Vec::new();
    for d in dispatchers {
        let (due, view) = (due.clone(), view.clone());
        tasks.push(tokio::spawn(async move { d.dispatch(&due, &view, |_ctx| async { Ok(()) }).await }));
    }
    let mut attempts = 0;
    let mut wasted = 0;
    let mut early = 0;
    let mut executed = 0;
    let mut failed_hosts = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.expect("a dispatch task panicked") {
            Ok(r) => {
                attempts += r.claim_attempts;
                wasted += r.lost_attempts;
                early += r.early_attempts;
                executed += r.executed;
            }
            Err(e) => {
                eprintln!("{name}: host-{i} stopped with an error: {e}");
                failed_hosts += 1;
            }
        }
    }
    if failed_hosts == 0 && executed as usize != FIRINGS {
        eprintln!("{name}: {executed} of {FIRINGS} firings executed");
    }
    // Throughput from the first due moment to the last completion, on the database clock.
    let admin = rendezvous_client::connect(url).await.unwrap();
    let span: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM max(completed_at) - min(claimed_at))::float8 FROM rendezvous.firings WHERE task_id LIKE $1",
            &[&format!("{tag}-%")],
        )
        .await
        .unwrap()
        .get(0);
    Row { name, per_sec: executed as f64 / span, attempts, wasted, early, failed_hosts }
}

async fn skip_locked_run(url: &str) -> Row {
    let admin = rendezvous_client::connect(url).await.unwrap();
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS bench_queue;
             CREATE TABLE bench_queue (id bigint PRIMARY KEY, task_id text, fire_at timestamptz, done boolean NOT NULL DEFAULT false);
             INSERT INTO bench_queue SELECT g, 'q-' || g, now(), false FROM generate_series(1, {FIRINGS}) g;
             CREATE INDEX ON bench_queue (id) WHERE NOT done;"
        ))
        .await
        .unwrap();
    admin.batch_execute("VACUUM ANALYZE bench_queue").await.unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..HOSTS {
        let mut client = rendezvous_client::connect(url).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut attempts = 0u64;
            loop {
                // Claim a batch (locked, skipping others' locks), "run" it, mark it done.
                let tx = client.transaction().await.unwrap();
                let ids: Vec<i64> = tx
                    .query("SELECT id FROM bench_queue WHERE NOT done ORDER BY id LIMIT 64 FOR UPDATE SKIP LOCKED", &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                attempts += 1;
                if ids.is_empty() {
                    tx.commit().await.unwrap();
                    return attempts;
                }
                tx.execute("UPDATE bench_queue SET done = true WHERE id = ANY($1)", &[&ids]).await.unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    let mut attempts = 0;
    for t in tasks {
        attempts += t.await.unwrap();
    }
    let per_sec = FIRINGS as f64 / start.elapsed().as_secs_f64();
    admin.batch_execute("DROP TABLE bench_queue").await.unwrap();
    Row {
        name: "FOR UPDATE SKIP LOCKED queue (batches of 64)",
        per_sec,
        attempts,
        wasted: 0,
        early: 0,
        failed_hosts: 0,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh firing");
        return;
    };
    let rows = vec![
        dispatch_run(&url, "HRW rank-delayed dispatch (grace 5 s)", Duration::from_secs(5), "hrw").await,
        dispatch_run(&url, "everyone claims everything (grace 0)", Duration::ZERO, "all").await,
        skip_locked_run(&url).await,
    ];
    println!("Firings claimed + completed, {HOSTS} hosts (one connection each), {FIRINGS} firings, stable membership\n");
    println!(
        "| way | firings/s | claim attempts | wasted (lost) attempts | wasted % | asked before due (database clock) | hosts failed |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.0} | {} | {} | {:.2} % | {} | {} |",
            r.name,
            r.per_sec,
            r.attempts,
            r.wasted,
            100.0 * r.wasted as f64 / r.attempts.max(1) as f64,
            r.early,
            r.failed_hosts
        );
    }
}
