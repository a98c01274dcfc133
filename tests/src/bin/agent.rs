//! A host running the `agent` workflow of durable steps until it is killed: for tests that kill
//! holders mid-step (tests/it/steps.rs). Usage: `agent <database-url> <host-id> [<step-ms>]`.
//!
//! Each run: `plan` and `infer` (each logs its execution in `calls` and takes `step-ms`, 20 by
//! default, like an inference call), `tool` (a call to an external service that deduplicates by the step's
//! key: `external_effects`), `write` (a database step: `answers`, exactly once), then the run
//! completes. The database must have those three tables (the test makes them).
use std::sync::OnceLock;
use std::time::Duration;

use rendezvous_client::worker::BoxError;
use rendezvous_client::{Job, Worker, WorkerOptions};
use serde_json::json;

/// How long a step's work takes.
static STEP_TIME: OnceLock<Duration> = OnceLock::new();

/// One execution of a step's work, logged outside any transaction (what a provider bills).
async fn log_call(job: &Job, step: &str) -> Result<(), BoxError> {
    let run_id = job.run().expect("a run").run_id;
    job.client()
        .await?
        .execute(
            "INSERT INTO calls (run_id, step, host, token, at) VALUES ($1, $2, $3, $4, clock_timestamp())",
            &[&run_id, &step, &job.host_id(), &job.token()],
        )
        .await?;
    tokio::time::sleep(*STEP_TIME.get().expect("set in main")).await;
    Ok(())
}

async fn agent(mut job: Job) -> Result<(), BoxError> {
    let plan: String =
        job.step("plan", async { log_call(&job, "plan").await.map(|()| "search".to_owned()) }).await?;
    let answer: String =
        job.step("infer", async { log_call(&job, "infer").await.map(|()| format!("{plan}: 42")) }).await?;
    let key = job.step_key("tool");
    let fresh: bool = job
        .step("tool", async {
            log_call(&job, "tool").await?;
            let n = job
                .client()
                .await?
                .execute(
                    "INSERT INTO external_effects (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING",
                    &[&key],
                )
                .await?;
            Ok::<_, BoxError>(n == 1)
        })
        .await?;
    let run_id = job.run().expect("a run").run_id;
    let host = job.host_id().to_owned();
    job.step_tx("write", async |tx| {
        tx.execute(
            "INSERT INTO answers (run_id, host, answer) VALUES ($1, $2, $3)",
            &[&run_id, &host, &answer],
        )
        .await
    })
    .await?;
    let tx = job.transaction().await?;
    tx.complete_with(Some(json!({ "answer": answer, "fresh_effect": fresh }))).await?;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, host, step_ms) = match args.as_slice() {
        [_, url, host] => (url, host, 20),
        [_, url, host, ms] => (url, host, ms.parse().expect("step-ms is a number")),
        _ => {
            eprintln!("usage: agent <database-url> <host-id> [<step-ms>]");
            std::process::exit(2);
        }
    };
    STEP_TIME.set(Duration::from_millis(step_ms)).expect("set once");
    let options = WorkerOptions::default()
        .with_max_concurrent(8)
        .with_rank_delay(Duration::from_millis(100))
        .with_poll(Duration::from_millis(200))
        .with_retention(None);
    // A loaded machine (the whole suite beside it) can leave a start unanswered past its call
    // timeout: Worker::start tries again itself, within its start_timeout.
    let _worker = Worker::builder(url.as_str(), host.as_str())
        .options(options)
        .workflow("agent", agent)
        .start()
        .await
        .expect("start the worker");
    println!("started {host}");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}
