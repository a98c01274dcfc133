//! An agent loop as a durable run: plan, inference, a tool call with an idempotency key, a
//! database write, an answer. Each finished step is recorded; a retry or a takeover (kill this
//! process mid-run and start it again, or start a second one) resumes at the first unfinished
//! step. docs/agents.md shows this file, and a test checks the two stay equal. Run it against a
//! database with the extension installed:
//!   cargo run -p rendezvous-client --example agent -- postgres://app@localhost/app host-1
use std::time::Duration;

use rendezvous_client::worker::BoxError;
use rendezvous_client::{spawn_run, Job, Worker};
use serde_json::json;

/// The model call: slow and billed per call (here, a stand-in).
async fn inference(prompt: &str) -> Result<String, BoxError> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(format!("answer to {prompt:?}"))
}

/// A tool with a real-world effect, behind an API that deduplicates by idempotency key.
async fn send_email(idempotency_key: &str, body: &str) -> Result<String, BoxError> {
    println!("POST /emails Idempotency-Key: {idempotency_key} ({body})");
    Ok(format!("email-{idempotency_key}"))
}

async fn agent(mut job: Job) -> Result<(), BoxError> {
    let run = job.run().expect("a workflow's job is a run").clone();
    let question = run.input["question"].as_str().unwrap_or("?").to_owned();
    // Recorded steps return their output without running again: on a replay, after a retry
    // or a takeover on another host, these cost nothing.
    let plan: Vec<String> =
        job.step("plan", async { Ok::<_, BoxError>(vec!["think".into(), "email".into()]) }).await?;
    let answer: String = job.step("inference", inference(&question)).await?;
    if plan.contains(&"email".to_owned()) {
        // The step's key is the same on every attempt and host: the API sees one request.
        let key = job.step_key("send-email");
        let _receipt: String = job.step("send-email", send_email(&key, &answer)).await?;
    }
    // A database step: its write and its record commit together, exactly once.
    job.step_tx("save-answer", async |tx| {
        tx.execute("INSERT INTO answers (run_id, answer) VALUES ($1, $2)", &[&run.run_id, &answer]).await
    })
    .await?;
    job.progress(&json!({ "phase": "done" })).await?;
    let tx = job.transaction().await?; // fenced: the run succeeds once
    tx.complete_with(Some(json!({ "answer": answer }))).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> rendezvous_client::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "postgres://app@localhost/app".into());
    let host = args.next().unwrap_or_else(|| "host-1".into());
    let client = rendezvous_client::connect(url.as_str()).await?;
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS answers (run_id bigint PRIMARY KEY, answer text)")
        .await?;
    let worker = Worker::builder(url.as_str(), host.as_str()).workflow("agent", agent).start().await?;
    // One run per question, however often this is sent (the dispatch key).
    let input = json!({ "question": "what is rendezvous hashing?" });
    let run = spawn_run(&client, "acme", "agent", &input, Some("question-1")).await?;
    println!("run {} (new: {})", run.run_id, run.created);
    tokio::signal::ctrl_c().await.ok();
    worker.shutdown(Duration::from_secs(10)).await?;
    Ok(())
}
