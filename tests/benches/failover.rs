//! Leader failover latency: from SIGKILL of the leader's process to the follower (a separate
//! process, waiting on the lock) reporting `is_leader()`, over many trials.
//!
//! Run: `scripts/bench.sh failover`, or `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-tests --bench failover`.
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const TRIALS: usize = 30;

struct Candidate {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Candidate {
    fn spawn(url: &str, name: &str) -> Candidate {
        let mut child = Command::new(env!("CARGO_BIN_EXE_elector"))
            .args([url, "failover-bench", name, "5000"]) // the default 5 s refresh
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Candidate { child, lines }
    }

    async fn next_state(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("state within 30 s")
            .unwrap()
            .expect("candidate alive")
    }

    async fn wait_leader(&mut self) {
        while !self.next_state().await.starts_with("leader") {}
    }
}

/// Waits until a follower idles: it claimed, lost, and listens for the leader's announcement.
async fn wait_for_follower(client: &tokio_postgres::Client) {
    while rendezvous_tests::following_sessions(client, "failover-bench").await.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh failover");
        return;
    };
    let admin = rendezvous_client::connect(&url).await.unwrap();
    let mut leader = Candidate::spawn(&url, "c0");
    leader.wait_leader().await;
    let mut samples = Vec::new();
    for trial in 1..=TRIALS {
        let mut follower = Candidate::spawn(&url, &format!("c{trial}"));
        assert_eq!(follower.next_state().await, "follower");
        wait_for_follower(&admin).await;
        let killed = Instant::now();
        std::process::Command::new("kill")
            .args(["-KILL", &leader.child.id().unwrap().to_string()])
            .status()
            .unwrap();
        follower.wait_leader().await;
        samples.push(killed.elapsed());
        let _ = leader.child.wait().await;
        leader = follower;
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!("Leader failover: SIGKILL of the leader process -> follower process reports is_leader(), {TRIALS} trials, refresh tick 5 s\n");
    println!("| design | median | p99 | max |");
    println!("|---|---:|---:|---:|");
    println!(
        "| pg_rendezvous LeaderElector (measured) | {:.1} ms | {:.1} ms | {:.1} ms |",
        ms(pct(0.5)),
        ms(pct(0.99)),
        ms(*samples.last().unwrap())
    );
    println!("| lock file with pid, 5 s tick, 2x staleness (bound) | up to 10 s | | |");
    println!("| River leader table (TTL, bound) | up to 15 s | | |");
    println!("| client-go leaderelection (15 s lease, bound) | up to 15 s | | |");
    println!("| pglock (20 s lease, bound) | up to 20 s | | |");
    drop(leader.child.stdin.take());
    let _ = leader.child.wait().await;
}
