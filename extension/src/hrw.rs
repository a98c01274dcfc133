//! Rendezvous (HRW) hashing in SQL: `winner`, `ranked`, `score` over a host array.
//!
//! The algorithm itself lives in the shared `rendezvous-hrw` crate (docs/hrw.md), so the
//! client computes the identical answer. These functions only adapt SQL arguments: NULL
//! elements are ignored, duplicates merged, and bad input raises 22004 / 22023.
use pgrx::pg_sys::FunctionCallInfo;
use pgrx::prelude::*;
use rendezvous_hrw::HostSet;

use crate::call_cache::cached;
use crate::errors::{invalid_argument, null_argument};

// Argument positions of `hosts` and `weights`, the arguments the host-set cache is keyed by.
const HOSTS: usize = 1;
const WEIGHTS: usize = 2;

fn require_key(key: Option<&str>) -> &str {
    key.unwrap_or_else(|| null_argument("key"))
}

/// A weighted host set from parallel arrays; NULL hosts are skipped with their weight.
/// (Validation runs only when the arrays change: see `call_cache`.)
fn weighted_set(hosts: Option<Array<&str>>, weights: Option<Array<f64>>) -> HostSet {
    let (Some(hosts), Some(weights)) = (hosts, weights) else { null_argument("hosts and weights") };
    if hosts.len() != weights.len() {
        invalid_argument(format!(
            "hosts and weights must have the same length (got {} hosts and {} weights)",
            hosts.len(),
            weights.len()
        ));
    }
    let mut pairs = Vec::with_capacity(hosts.len());
    for (host, weight) in hosts.iter().zip(weights.iter()) {
        let Some(host) = host else { continue };
        let Some(weight) = weight else { null_argument(&format!("the weight of host \"{host}\"")) };
        pairs.push((host, weight));
    }
    HostSet::weighted(pairs).unwrap_or_else(|e| invalid_argument(e.to_string()))
}

fn check_k(k: Option<i32>) -> Option<usize> {
    match k {
        None => None,
        Some(k) if k < 0 => invalid_argument(format!("k must be >= 0 or NULL (got {k})")),
        Some(k) => Some(k as usize),
    }
}

/// The host with the highest score for `key`; NULL for an empty or all-NULL array.
#[pg_extern(immutable, parallel_safe, name = "winner")]
fn winner(key: Option<&str>, hosts: Option<Array<&str>>, fcinfo: FunctionCallInfo) -> Option<String> {
    let key = require_key(key);
    let hosts = hosts?;
    // SAFETY: `fcinfo` is this call's and argument HOSTS is a text[].
    let set = unsafe { cached(fcinfo, &[HOSTS], || HostSet::new(hosts.iter().flatten())) };
    set.winner(key).map(str::to_owned)
}

/// Weighted rendezvous: a host's share of keys is proportional to its weight.
#[pg_extern(immutable, parallel_safe, name = "winner")]
fn winner_weighted(
    key: Option<&str>,
    hosts: Option<Array<&str>>,
    weights: Option<Array<f64>>,
    fcinfo: FunctionCallInfo,
) -> Option<String> {
    let key = require_key(key);
    // SAFETY: `fcinfo` is this call's; HOSTS and WEIGHTS are text[] and float8[].
    let set = unsafe { cached(fcinfo, &[HOSTS, WEIGHTS], || weighted_set(hosts, weights)) };
    set.winner(key).map(str::to_owned)
}

/// Hosts in descending score order (the first is the winner), all or the first `k`.
#[pg_extern(immutable, parallel_safe, name = "ranked")]
fn ranked(
    key: Option<&str>,
    hosts: Option<Array<&str>>,
    k: default!(Option<i32>, "NULL"),
    fcinfo: FunctionCallInfo,
) -> Vec<String> {
    let key = require_key(key);
    let k = check_k(k);
    let Some(hosts) = hosts else { return Vec::new() };
    // SAFETY: `fcinfo` is this call's and argument HOSTS is a text[].
    let set = unsafe { cached(fcinfo, &[HOSTS], || HostSet::new(hosts.iter().flatten())) };
    set.ranked(key, k).into_iter().map(str::to_owned).collect()
}

/// Weighted `ranked`.
#[pg_extern(immutable, parallel_safe, name = "ranked")]
fn ranked_weighted(
    key: Option<&str>,
    hosts: Option<Array<&str>>,
    weights: Option<Array<f64>>,
    k: default!(Option<i32>, "NULL"),
    fcinfo: FunctionCallInfo,
) -> Vec<String> {
    let key = require_key(key);
    let k = check_k(k);
    // SAFETY: `fcinfo` is this call's; HOSTS and WEIGHTS are text[] and float8[].
    let set = unsafe { cached(fcinfo, &[HOSTS, WEIGHTS], || weighted_set(hosts, weights)) };
    set.ranked(key, k).into_iter().map(str::to_owned).collect()
}

/// The raw 63-bit score of `host` for `key` (non-negative; higher wins).
#[pg_extern(immutable, parallel_safe)]
fn score(key: Option<&str>, host: Option<&str>) -> i64 {
    let key = require_key(key);
    let host = host.unwrap_or_else(|| null_argument("host"));
    rendezvous_hrw::score(key, host) as i64
}

/// The name of the scoring algorithm, for clients to check they compute the same thing.
#[pg_extern(immutable, parallel_safe)]
fn hrw_algorithm() -> &'static str {
    rendezvous_hrw::ALGORITHM
}
