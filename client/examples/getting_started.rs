//! A complete service: a cron task, admitted runs, a fenced leader loop, and webhook-style
//! admission through a pool. docs/client.md's "Getting started" shows this file, and a test
//! checks the two stay equal. Run it against a database with the extension installed:
//!   cargo run -p rendezvous-client --example getting_started -- postgres://app@localhost/app host-1
use std::time::Duration;

use rendezvous_client::leader::assert_leader;
use rendezvous_client::{spawn_run, Job, LeaderElector, LeaderOptions, Pool, PoolOptions, TaskSpec, Worker};

#[tokio::main]
async fn main() -> rendezvous_client::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "postgres://app@localhost/app".into());
    let host = args.next().unwrap_or_else(|| "host-1".into());

    // The client says what it does (reconnects, a slow server, a leader's term) through
    // `tracing`: print it, or a broken service is silent.
    tracing_subscriber::fmt().with_max_level(tracing::Level::INFO).init();

    // Connections for your own calls: broken ones are replaced by themselves (a terminated
    // backend, a server restart), so no reconnect code is needed. Fails here on a bad URL, an
    // unreachable server or a missing extension.
    let pool = Pool::start(&url, PoolOptions::default()).await?;

    // The work runtime: a cron task run once across the fleet, and admitted runs of "deliver".
    let nightly = TaskSpec::new("nightly-report", "0 0 * * *").with_time_zone("Europe/Berlin");
    let worker = Worker::builder(&url, host.as_str())
        .task(nightly, |job: Job| async move {
            // One run per firing, however often the firing is retried: its key is the run's.
            let key = job.key().to_owned();
            let input = serde_json::json!({ "report": key });
            spawn_run(job.client().await?, "acme", "deliver", &input, Some(&key)).await?;
            Ok::<_, rendezvous_client::Error>(())
        })
        .workflow("deliver", |mut job: Job| async move {
            let input = job.run().expect("a workflow's job is a run").input.clone();
            let tx = job.transaction().await?; // fenced by the claim's token
            tx.execute("SELECT $1::jsonb", &[&input]).await?; // the run's effects go here
            tx.complete().await // effects and completion commit together, or neither
        })
        .start()
        .await?;

    // A webhook handler would do this per delivery: the same dispatch key gets the same run.
    let input = serde_json::json!({ "to": "ops@acme.test" });
    let run = spawn_run(&*pool.get().await?, "acme", "deliver", &input, Some("msg-42")).await?;
    println!("run {} (new: {})", run.run_id, run.created);

    // One leader among the hosts; clones of the elector are cheap, for other tasks to read.
    let elector = LeaderElector::start(&url, "housekeeping", &host, LeaderOptions::default()).await?;
    let leader_loop = tokio::spawn({
        let (elector, pool) = (elector.clone(), pool.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                if let Some(epoch) = elector.epoch() {
                    if let Err(e) = housekeeping(&pool, epoch).await {
                        eprintln!("housekeeping: {e}");
                    }
                }
            }
        }
    });

    // Until Ctrl-C; then running work gets 10 s and goes to another host at once after that.
    tokio::signal::ctrl_c().await.ok();
    leader_loop.abort();
    let report = worker.shutdown(Duration::from_secs(10)).await?;
    println!("{} jobs finished, {} handed to other hosts", report.finished, report.released);
    elector.shutdown(Duration::from_secs(5)).await?; // a leader resigns: another takes over at once
    Ok(())
}

/// A leader-only write, fenced: it fails with RZ001 once this term has ended.
async fn housekeeping(pool: &Pool, epoch: i64) -> rendezvous_client::Result<()> {
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    assert_leader(&tx, "housekeeping", epoch).await?;
    tx.execute("SELECT 1", &[]).await?; // the leader's write goes here
    tx.commit().await?;
    Ok(())
}
