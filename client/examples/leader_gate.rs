//! One leader per shared agent key: the three things only a leader may do (dispatch pending
//! work, react to a message, run the autonomous heartbeat prompt) gated on `is_leader()`,
//! and a leader-only write fenced by its epoch with `assert_leader` in the same transaction.
//!
//! Run two or more at once against one database, and kill one:
//!   cargo run -p rendezvous-client --example leader_gate -- <database-url> <candidate> [seconds]
use std::time::Duration;

use rendezvous_client::leader::assert_leader;
use rendezvous_client::{LeaderElector, LeaderOptions, Result};

const GROUP: &str = "agent:support-bot";

/// Surface (a): only the leader dispatches pending messages to the agent.
fn dispatch_pending(elector: &LeaderElector, message: &str) -> bool {
    if !elector.is_leader() {
        return false; // a follower stays silent: no duplicate responder
    }
    println!("[{}] dispatch: answering {message:?}", elector.candidate());
    true
}

/// Surface (b): only the leader adds the 👀 reaction.
fn react(elector: &LeaderElector, message: &str) -> bool {
    elector.is_leader() && {
        println!("[{}] react: 👀 on {message:?}", elector.candidate());
        true
    }
}

/// Surface (c): only the leader runs the autonomous heartbeat prompt.
fn heartbeat_prompt(elector: &LeaderElector) -> bool {
    elector.is_leader() && {
        println!("[{}] heartbeat prompt", elector.candidate());
        true
    }
}

/// A leader-only write, fenced: if this elector was deposed after `epoch` was read, the
/// transaction fails with RZ001 and writes nothing.
async fn record_answer(client: &mut tokio_postgres::Client, epoch: i64, message: &str) -> Result<()> {
    let tx = client.transaction().await?;
    assert_leader(&tx, GROUP, epoch).await?;
    tx.execute("INSERT INTO agent_answers (epoch, message) VALUES ($1, $2)", &[&epoch, &message]).await?;
    Ok(tx.commit().await?)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (url, candidate) = match &args[..] {
        [_, url, candidate, ..] => (url.clone(), candidate.clone()),
        _ => {
            eprintln!("usage: leader_gate <database-url> <candidate> [seconds]");
            std::process::exit(2);
        }
    };
    let seconds: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut client = rendezvous_client::connect(&url).await?;
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS agent_answers (epoch bigint, message text, at timestamptz DEFAULT now())")
        .await?;
    let options = LeaderOptions::default().with_refresh(Duration::from_secs(1)).with_lease(None);
    let elector = LeaderElector::start(&url, GROUP, &candidate, options).await?;
    let mut changes = elector.changes();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut n = 0;
    while tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = changes.changed() => {
                let l = changes.borrow().clone();
                println!("[{candidate}] leadership: leader={} epoch={:?} ({})", l.is_leader, l.epoch, l.reason);
            }
            _ = tick.tick() => {
                n += 1;
                let message = format!("message {n}");
                react(&elector, &message);
                if dispatch_pending(&elector, &message) {
                    if let Some(epoch) = elector.epoch() {
                        match record_answer(&mut client, epoch, &message).await {
                            Ok(()) => {}
                            Err(e) => println!("[{candidate}] fenced write refused: {e}"),
                        }
                    }
                }
                if n % 4 == 0 {
                    heartbeat_prompt(&elector);
                }
            }
        }
    }
    elector.shutdown(Duration::from_secs(10)).await?;
    Ok(())
}
