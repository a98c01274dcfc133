//! Spawn admission throughput and latency, side by side in one run with the floor it cannot
//! beat: a plain `INSERT … ON CONFLICT DO NOTHING RETURNING` into an identical table; then batch
//! admission (`spawn_runs`, 500 runs a call), whose peers' figures (graphile-worker's `addJobs`,
//! pg-boss's `insert`) `scripts/bench/runs_peers.sh admission` prints beside it.
//!
//! Run: `scripts/bench.sh admission` (starts a throwaway cluster), or
//! `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-client --bench admission`
//! (`ADMISSION_BENCH_ONLY=batches` measures the batch admission alone).
use std::sync::Arc;
use std::time::{Duration, Instant};

use rendezvous_client::{spawn_run, spawn_runs, NewRun};
use serde_json::json;
use tokio::sync::Barrier;

const PER_CASE: Duration = Duration::from_secs(4);
/// Rounds per case, ours and the plain insert alternating; the median round is reported.
const ROUNDS: usize = 3;

const PLAIN_TABLE: &str = "
DROP TABLE IF EXISTS bench_plain_runs;
CREATE TABLE bench_plain_runs (LIKE rendezvous.runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE bench_plain_runs ADD PRIMARY KEY (run_id);
ALTER TABLE bench_plain_runs ALTER run_id ADD GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX ON bench_plain_runs (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL;
CREATE INDEX ON bench_plain_runs (updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled');";

const FRESH: &str = "TRUNCATE rendezvous.runs, bench_plain_runs CASCADE; CHECKPOINT;";

const PLAIN_INSERT: &str = "INSERT INTO bench_plain_runs (tenant_id, workflow_ref, input, dispatch_key)
     VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING
     RETURNING run_id";

#[derive(Clone, Copy, PartialEq)]
enum Way {
    SpawnRun,
    PlainInsert,
}

struct Outcome {
    calls: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// Calls that got a run id back.
    answered: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn call(client: &tokio_postgres::Client, way: Way, key: &str) -> bool {
    let input = json!({"task": key});
    match way {
        Way::SpawnRun => spawn_run(client, "bench", "wf/bench", &input, Some(key)).await.is_ok(),
        Way::PlainInsert => {
            let rows = client.query(PLAIN_INSERT, &[&"bench", &"wf/bench", &input, &key]).await.unwrap();
            !rows.is_empty()
        }
    }
}

/// `clients` connections, each admitting fresh keys as fast as it can for PER_CASE.
async fn throughput(url: &str, way: Way, clients: usize, tag: &str) -> Outcome {
    let mut tasks = Vec::new();
    let start = Instant::now();
    for c in 0..clients {
        let client = rendezvous_client::connect(url).await.unwrap();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut answered = 0;
            let mut i = 0;
            while start.elapsed() < PER_CASE {
                let key = format!("{tag}/{c}/{i}");
                let t = Instant::now();
                answered += call(&client, way, &key).await as usize;
                lat.push(t.elapsed());
                i += 1;
            }
            (lat, answered)
        }));
    }
    let mut latencies = Vec::new();
    let mut answered = 0;
    for t in tasks {
        let (l, a) = t.await.unwrap();
        latencies.extend(l);
        answered += a;
    }
    let elapsed = start.elapsed();
    latencies.sort();
    Outcome { calls: latencies.len(), elapsed, latencies, answered }
}

/// Rounds of `callers` connections admitting the same new key at the same moment.
async fn contended(url: &str, way: Way, callers: usize, rounds: usize, tag: &str) -> Outcome {
    let mut clients = Vec::new();
    for _ in 0..callers {
        clients.push(Arc::new(rendezvous_client::connect(url).await.unwrap()));
    }
    let mut latencies = Vec::new();
    let mut answered = 0;
    let start = Instant::now();
    for round in 0..rounds {
        let key = format!("{tag}/{round}");
        let barrier = Arc::new(Barrier::new(callers));
        let mut tasks = Vec::new();
        for client in &clients {
            let (client, barrier, key) = (client.clone(), barrier.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let t = Instant::now();
                let ok = call(&client, way, &key).await;
                (t.elapsed(), ok)
            }));
        }
        for t in tasks {
            let (l, ok) = t.await.unwrap();
            latencies.push(l);
            answered += ok as usize;
        }
    }
    let elapsed = start.elapsed();
    latencies.sort();
    Outcome { calls: latencies.len(), elapsed, latencies, answered }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh admission");
        return;
    };
    let admin = rendezvous_client::connect(&url).await.unwrap();
    rendezvous_client::check_extension(&admin).await.unwrap();
    admin.batch_execute(PLAIN_TABLE).await.unwrap();
    let sync: String = admin.query_one("SHOW synchronous_commit", &[]).await.unwrap().get(0);
    if std::env::var("ADMISSION_BENCH_ONLY").is_ok_and(|v| v == "batches") {
        return batch_admission(&admin, &url).await;
    }

    println!(
        "Spawn admission, fresh dispatch keys, median of {ROUNDS} rounds of {}s per case, synchronous_commit={sync}\n",
        PER_CASE.as_secs()
    );
    println!("| clients | spawn_run calls/s | p50 ms | p99 ms | plain INSERT calls/s | p50 ms | p99 ms | spawn_run / plain |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut uncontended_p99 = Duration::ZERO;
    let rate = |o: &Outcome| o.calls as f64 / o.elapsed.as_secs_f64();
    for clients in [1, 4, 16] {
        let (mut ours, mut plain) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            // Each measurement starts on empty tables after a checkpoint: neither way pays
            // for the rows or dirty pages the other left.
            admin.batch_execute(FRESH).await.unwrap();
            ours.push(throughput(&url, Way::SpawnRun, clients, &format!("ours-{clients}-{round}")).await);
            admin.batch_execute(FRESH).await.unwrap();
            plain
                .push(throughput(&url, Way::PlainInsert, clients, &format!("plain-{clients}-{round}")).await);
        }
        let median = |mut runs: Vec<Outcome>| {
            runs.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
            runs.swap_remove(runs.len() / 2)
        };
        let (ours, plain) = (median(ours), median(plain));
        if clients == 1 {
            uncontended_p99 = percentile(&ours.latencies, 0.99);
        }
        println!(
            "| {clients} | {:.0} | {} | {} | {:.0} | {} | {} | {:.2}× |",
            rate(&ours),
            ms(percentile(&ours.latencies, 0.5)),
            ms(percentile(&ours.latencies, 0.99)),
            rate(&plain),
            ms(percentile(&plain.latencies, 0.5)),
            ms(percentile(&plain.latencies, 0.99)),
            rate(&ours) / rate(&plain)
        );
    }

    let rounds = 100;
    println!("\n20 callers, one key, {rounds} rounds (each caller on its own connection)\n");
    println!(
        "| way | calls | answered with the run id | p50 ms | p99 ms | p99 / uncontended spawn_run p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, way) in [("spawn_run", Way::SpawnRun), ("plain INSERT … DO NOTHING", Way::PlainInsert)] {
        let o = contended(&url, way, 20, rounds, &format!("contended-{name}")).await;
        println!(
            "| {name} | {} | {} | {} | {} | {:.2}× |",
            o.calls,
            o.answered,
            ms(percentile(&o.latencies, 0.5)),
            ms(percentile(&o.latencies, 0.99)),
            percentile(&o.latencies, 0.99).as_secs_f64() / uncontended_p99.as_secs_f64()
        );
    }
    admin.batch_execute("DROP TABLE bench_plain_runs").await.unwrap();
    batch_admission(&admin, &url).await;
}

/// Batch admission's table: runs admitted a second by `spawn_runs` from 1, 4 and 16 callers.
async fn batch_admission(admin: &tokio_postgres::Client, url: &str) {
    println!(
        "\nBatch admission: spawn_runs with {BATCH} new runs a call, {}s per case (the peers' batch calls are in scripts/bench/runs_peers.sh admission)\n",
        PER_CASE.as_secs()
    );
    println!("| callers | runs admitted/s, a dispatch key each | runs admitted/s, no keys |");
    println!("|---:|---:|---:|");
    for callers in [1, 4, 16] {
        admin.batch_execute("TRUNCATE rendezvous.runs CASCADE; CHECKPOINT;").await.unwrap();
        let keyed = batches(url, callers, true).await;
        admin.batch_execute("TRUNCATE rendezvous.runs CASCADE; CHECKPOINT;").await.unwrap();
        let keyless = batches(url, callers, false).await;
        println!("| {callers} | {keyed:.0} | {keyless:.0} |");
    }
}

/// Runs in a batch admission call.
const BATCH: usize = 500;

/// `callers` connections, each admitting batches of BATCH new runs for PER_CASE: runs per second.
async fn batches(url: &str, callers: usize, keyed: bool) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let client = rendezvous_client::connect(url).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            let mut b = 0;
            while start.elapsed() < PER_CASE {
                let keys: Vec<String> = (0..BATCH).map(|i| format!("batch/{callers}/{c}/{b}/{i}")).collect();
                let runs: Vec<NewRun> = keys
                    .iter()
                    .map(|k| {
                        if keyed {
                            NewRun::new("wf/bench").dispatch_key(k)
                        } else {
                            NewRun::new("wf/bench")
                        }
                    })
                    .collect();
                let answers = spawn_runs(&client, "bench", &runs).await.unwrap();
                admitted += answers.iter().filter(|a| a.created).count();
                b += 1;
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    admitted as f64 / start.elapsed().as_secs_f64()
}
