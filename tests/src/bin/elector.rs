//! A leader-election candidate as a real OS process, for tests and the failover benchmark
//! that kill it. Usage: `elector <database-url> <group> <candidate> <refresh-ms>`.
//! Prints `leader <epoch>` / `follower` on every change (flushed), and on end of stdin shuts
//! down gracefully (resigning).
use std::io::Write;
use std::time::Duration;

use rendezvous_client::{LeaderElector, LeaderOptions};
use tokio::io::AsyncReadExt;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, group, candidate, refresh_ms] = &args[..] else {
        eprintln!("usage: elector <database-url> <group> <candidate> <refresh-ms>");
        std::process::exit(2);
    };
    let options = LeaderOptions::default()
        .with_refresh(Duration::from_millis(refresh_ms.parse().unwrap()))
        .with_lease(None);
    let elector = LeaderElector::start(url, group, candidate, options).await.expect("start elector");
    let mut changes = elector.changes();
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    loop {
        {
            let l = changes.borrow_and_update().clone();
            let mut out = std::io::stdout().lock();
            if l.is_leader {
                writeln!(out, "leader {}", l.epoch.unwrap_or_default()).unwrap();
            } else {
                writeln!(out, "follower").unwrap();
            }
            out.flush().unwrap();
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            n = stdin.read(&mut buf) => if matches!(n, Ok(0) | Err(_)) { break },
        }
    }
    elector.shutdown(std::time::Duration::from_secs(10)).await.expect("shutdown");
}
