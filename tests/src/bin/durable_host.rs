//! A host of the durable-runs benchmark (scripts/bench/durable.sh, not a test): runs the
//! `bench3` workflow, three durable steps and a completion, with `slots` runs at once, until it
//! gets SIGTERM; then prints what it measured and exits. Usage:
//!   durable_host <database-url> <host-id> <slots> <step-ms>
//! Each step sleeps `step-ms` (0: a trivial step) and logs its execution in `bench_calls` when
//! `step-ms` > 0 (the recovery measure counts re-executions from it). Prints, on SIGTERM, a
//! JSON line `{"latency_us": [...]}`: each executed step's `Job::step` call in microseconds,
//! work included (so with step-ms 0 it is the checkpoint's own latency).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rendezvous_client::worker::BoxError;
use rendezvous_client::{Job, Worker, WorkerOptions};

async fn bench3(job: Job, step_ms: u64, latencies: Arc<Mutex<Vec<u64>>>) -> Result<(), BoxError> {
    let run_id = job.run().expect("a run").run_id;
    for step in ["one", "two", "three"] {
        let mut ran = false;
        let started = Instant::now();
        job.step(step, async {
            ran = true;
            if step_ms > 0 {
                let host = job.host_id().to_owned();
                job.client()
                    .await?
                    .execute(
                        "INSERT INTO bench_calls (system, workflow, step, host, at) VALUES ('ours', $1, $2, $3, clock_timestamp())",
                        &[&run_id.to_string(), &step, &host],
                    )
                    .await?;
                tokio::time::sleep(Duration::from_millis(step_ms)).await;
            }
            Ok::<_, BoxError>(step.len())
        })
        .await?;
        if ran {
            latencies.lock().unwrap().push(started.elapsed().as_micros() as u64);
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, host, slots, step_ms] = args.as_slice() else {
        eprintln!("usage: durable_host <database-url> <host-id> <slots> <step-ms>");
        std::process::exit(2);
    };
    let (slots, step_ms): (usize, u64) = (slots.parse().expect("slots"), step_ms.parse().expect("step-ms"));
    let latencies: Arc<Mutex<Vec<u64>>> = Arc::default();
    let l = latencies.clone();
    let options = WorkerOptions::default()
        .with_max_concurrent(slots)
        .with_heartbeat(Duration::from_secs(1))
        .with_rank_delay(Duration::from_millis(100))
        .with_retention(None);
    let worker = Worker::builder(url.as_str(), host.as_str())
        .options(options)
        .workflow("bench3", move |job| bench3(job, step_ms, l.clone()))
        .start()
        .await
        .expect("start the worker");
    println!("started {host}");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
    term.recv().await;
    let _ = worker.shutdown(Duration::from_secs(2)).await;
    let samples = latencies.lock().unwrap().clone();
    println!("{}", serde_json::json!({ "latency_us": samples }));
}
