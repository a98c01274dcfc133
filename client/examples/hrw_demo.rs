//! The main job for now: a few hosts join the live set through PostgreSQL, we show who owns
//! which keys, and what moves when a host leaves and another joins.
//! Run: `cargo run -p rendezvous-client --example hrw_demo -- <database-url>`.
use std::collections::BTreeMap;
use std::time::Duration;

use rendezvous_client::hrw::HostSet;
use rendezvous_client::{membership, Membership, MembershipOptions, Result};

const KEYS: usize = 10_000;

async fn owners(client: &tokio_postgres::Client) -> Result<(HostSet, Vec<String>)> {
    let set = rendezvous_client::hrw::live_host_set(client, membership::DEFAULT_STALENESS).await?;
    let owners = (0..KEYS).map(|i| set.winner(&key(i)).unwrap_or("-").to_owned()).collect();
    Ok((set, owners))
}

fn key(i: usize) -> String {
    format!("firing:task-{i}:2026-11-29T12:00:00Z")
}

fn print_shares(owners: &[String]) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for o in owners {
        *counts.entry(o).or_default() += 1;
    }
    for (host, n) in counts {
        println!("    {host:<8} {n:>6} keys  {:>5.1}%", 100.0 * n as f64 / owners.len() as f64);
    }
}

fn print_moves(before: &[String], after: &[String]) -> usize {
    let mut moves: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (b, a) in before.iter().zip(after) {
        if b != a {
            *moves.entry((b, a)).or_default() += 1;
        }
    }
    let total: usize = moves.values().sum();
    for ((b, a), n) in &moves {
        println!("    {b:<8} -> {a:<8} {n:>6} keys");
    }
    println!("    {total} of {KEYS} keys moved; every other key kept its owner");
    total
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .expect("usage: hrw_demo <database-url> (or set DATABASE_URL)");
    let client = rendezvous_client::connect(&url).await?;
    let version = rendezvous_client::check_extension(&client).await?;
    println!("pg_rendezvous {version}, HRW algorithm {}\n", rendezvous_client::hrw::ALGORITHM);

    let opts =
        |weight| MembershipOptions::default().with_weight(weight).with_interval(Duration::from_millis(500));
    let mut hosts = BTreeMap::new();
    for (name, weight) in
        [("host-1", 1.0), ("host-2", 1.0), ("host-3", 1.0), ("host-4", 2.0), ("host-5", 1.0)]
    {
        hosts.insert(name, Membership::start(&url, name, opts(weight)).await?);
    }
    let live = membership::live_hosts(&client, membership::DEFAULT_STALENESS).await?;
    println!("live hosts (database clock): {}", live.join(", "));
    println!("host-4 has weight 2, the others 1\n");

    let (set, before) = owners(&client).await?;
    println!("who owns which key (server = rendezvous.winner(key), client = local HostSet):");
    for i in 0..6 {
        let server = membership::winner(&client, &key(i)).await?.unwrap_or_default();
        let local = set.winner(&key(i)).unwrap_or_default();
        let agree = if server == local { "agree" } else { "DISAGREE" };
        println!("    {:<40} server {server:<8} client {local:<8} {agree}", key(i));
        assert_eq!(server, local, "server and client disagree");
    }
    println!("\nshares of {KEYS} keys:");
    print_shares(&before);

    println!("\nhost-3 leaves (graceful shutdown):");
    hosts.remove("host-3").unwrap().shutdown(Duration::from_secs(10)).await?;
    let (_, after_leave) = owners(&client).await?;
    let moved = print_moves(&before, &after_leave);
    let owned_by_3 = before.iter().filter(|o| *o == "host-3").count();
    assert_eq!(moved, owned_by_3, "only host-3's keys may move");

    println!("\nhost-6 joins:");
    hosts.insert("host-6", Membership::start(&url, "host-6", opts(1.0)).await?);
    let (_, after_join) = owners(&client).await?;
    print_moves(&after_leave, &after_join);
    assert!(
        after_leave.iter().zip(&after_join).all(|(b, a)| b == a || a == "host-6"),
        "keys may only move to the new host"
    );
    println!("\nshares now:");
    print_shares(&after_join);

    for (_, m) in hosts {
        m.shutdown(Duration::from_secs(10)).await?;
    }
    let left = membership::live_hosts(&client, membership::DEFAULT_STALENESS).await?;
    println!("\nall hosts shut down; live set now: {:?}", left);
    println!("PASS: minimal disruption held and server and client agreed on every key shown");
    Ok(())
}
