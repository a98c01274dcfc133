//! HRW lookup cost, side by side in one run:
//! - Rust, precomputed host hashes (`HostSet::winner`) vs hashing every host per lookup
//!   (`winner_of`, what most HRW libraries do);
//! - SQL `rendezvous.winner(key, hosts)` vs a plain-SQL HRW on Postgres's own C hash
//!   (`ORDER BY hashtextextended(key || h, 0) DESC LIMIT 1`), when a database is given.
//!
//! Run: `scripts/bench.sh hrw` (starts a throwaway cluster), or
//! `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-client --bench hrw`.
use std::hint::black_box;
use std::time::{Duration, Instant};

use rendezvous_client::hrw::{winner_of, HostSet};

const SIZES: [usize; 3] = [10, 100, 1000];

fn hosts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("host-{i:04}.example.internal")).collect()
}

/// Runs `f` over `keys` repeatedly for at least `budget`; returns ns per call.
fn time_per_call(keys: &[String], budget: Duration, mut f: impl FnMut(&str)) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget {
        for k in keys {
            f(k);
        }
        calls += keys.len() as u64;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

fn rust_rows() -> Vec<[String; 5]> {
    let keys: Vec<String> = (0..4096).map(|i| format!("firing:task-{i}:2026-11-29T00:00:00Z")).collect();
    let mut rows = Vec::new();
    for n in SIZES {
        let names = hosts(n);
        let set = HostSet::new(&names);
        let budget = Duration::from_millis(700);
        let ours = time_per_call(&keys, budget, |k| {
            black_box(set.winner(black_box(k)));
        });
        let naive = time_per_call(&keys, budget, |k| {
            black_box(winner_of(black_box(k), names.iter().map(String::as_str)));
        });
        rows.push([
            n.to_string(),
            format!("{:.0}", ours),
            format!("{:.2}", ours / n as f64),
            format!("{:.0}", naive),
            format!("{:.1}×", naive / ours),
        ]);
    }
    rows
}

async fn sql_rows(url: &str) -> Vec<[String; 5]> {
    let client = rendezvous_client::connect(url).await.expect("connect");
    rendezvous_client::check_extension(&client).await.expect("extension installed");
    let mut rows = Vec::new();
    for n in SIZES {
        let names = hosts(n);
        // Enough calls for ~0.5 s of server time each; the same keys for both queries.
        let calls: i32 = (200_000 / n as i32).max(200);
        let ours_sql =
            "SELECT count(rendezvous.winner('firing:task-' || g, $1::text[])) FROM generate_series(1, $2) g";
        let base_sql = "SELECT count((SELECT h FROM unnest($1::text[]) h
                                        ORDER BY hashtextextended(('firing:task-' || g) || h, 0) DESC LIMIT 1))
                          FROM generate_series(1, $2) g";
        let timed = |sql: &'static str| {
            let client = &client;
            let names = &names;
            async move {
                client.query_one(sql, &[names, &(calls / 10)]).await.expect("warm up");
                let start = Instant::now();
                client.query_one(sql, &[names, &calls]).await.expect("query");
                start.elapsed().as_nanos() as f64 / calls as f64
            }
        };
        let ours = timed(ours_sql).await;
        let base = timed(base_sql).await;
        rows.push([
            n.to_string(),
            format!("{:.0}", ours),
            format!("{:.1}", ours / n as f64),
            format!("{:.0}", base),
            format!("{:.1}×", base / ours),
        ]);
    }
    rows
}

fn print_table(title: &str, header: [&str; 5], rows: &[[String; 5]]) {
    println!("\n{title}\n");
    println!("| {} |", header.join(" | "));
    println!("|{}", "---:|".repeat(5));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    println!("HRW lookup cost ({}), one run", rendezvous_client::hrw::ALGORITHM);
    print_table(
        "Rust client (`HostSet::winner`, host hashes precomputed) vs hashing every host per lookup",
        ["hosts", "ns/lookup", "ns/host", "hash-every-host ns/lookup", "speed-up"],
        &rust_rows(),
    );
    match std::env::var("RENDEZVOUS_DATABASE_URL") {
        Ok(url) => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let rows = rt.block_on(sql_rows(&url));
            print_table(
                "SQL, per call inside one query: `rendezvous.winner(key, hosts)` vs plain-SQL HRW on `hashtextextended`",
                ["hosts", "winner() ns/call", "ns/host", "plain SQL ns/call", "speed-up"],
                &rows,
            );
        }
        Err(_) => println!("\n(SQL side skipped: set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh hrw)"),
    }
}
