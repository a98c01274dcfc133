//! Rendezvous (HRW) hashing in SQL: `winner`, `ranked`, `score` over a host array.
//!
//! The algorithm itself lives in the shared `rendezvous-hrw` crate (docs/hrw.md), so the
//! client computes the identical answer. These functions only adapt SQL arguments: NULL
//! elements are ignored, duplicates merged, and bad input raises 22004 / 22023.
//!
//! Input is bounded so that no argument can exhaust the backend's memory (an allocation
//! failure inside Rust aborts the process, and PostgreSQL then restarts every session): at
//! most `MAX_HOSTS` hosts in at most `MAX_HOSTS_BYTES` (54000 beyond), a key of at most
//! `MAX_KEY_BYTES`; a host set is built only once PostgreSQL has granted the memory it needs
//! (53200 otherwise, see `errors::ensure_memory`); and every loop over input checks for
//! interrupts, so `statement_timeout` and cancel stop a call at once.
use pgrx::pg_sys::FunctionCallInfo;
use pgrx::prelude::*;
use rendezvous_hrw::HostSet;

use crate::errors::{ensure_memory, invalid_argument, null_argument, raise};
use crate::ffi::call_cache::{arg_raw_size, cached};

// Argument positions of `hosts` and `weights`, the arguments the host-set cache is keyed by.
const HOSTS: usize = 1;
const WEIGHTS: usize = 2;

/// The most hosts one call accepts: far beyond any fleet, and small enough that building the
/// host set (about 40 bytes a host plus its id) cannot run a backend out of memory.
pub(crate) const MAX_HOSTS: usize = 100_000;

/// The largest `hosts` array one call accepts, in bytes: the host set and the call-site cache
/// each keep a copy of the ids.
pub(crate) const MAX_HOSTS_BYTES: usize = 16 << 20;

/// How many elements a loop handles between two interrupt checks.
const INTERRUPT_EVERY: usize = 1024;

/// The largest key one call hashes, in bytes: hashing is one uninterruptible pass over the
/// key, so a bound keeps a call within reach of `statement_timeout` (a 300 MB key held a
/// backend for seconds). Keys are names, not documents: hash a large value first.
pub(crate) const MAX_KEY_BYTES: usize = 1 << 20;

/// Refuses with 54000 a text longer than `MAX_KEY_BYTES` that is about to be hashed.
fn check_hashed(what: &str, value: &str) {
    if value.len() > MAX_KEY_BYTES {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("{what} is {} bytes; the limit is {MAX_KEY_BYTES}", value.len()),
        );
    }
}

pub(crate) fn require_key(key: Option<&str>) -> &str {
    let key = key.unwrap_or_else(|| null_argument("key"));
    check_hashed("key", key);
    key
}

/// Refuses a `hosts` argument larger than `MAX_HOSTS_BYTES` with 54000, before anything reads
/// it; returns its size.
fn check_hosts_size(fcinfo: FunctionCallInfo) -> usize {
    // SAFETY: `fcinfo` is this call's and argument HOSTS is a text[].
    let size = unsafe { arg_raw_size(fcinfo, HOSTS) }.unwrap_or(0);
    if size > MAX_HOSTS_BYTES {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("hosts is {size} bytes; the limit is {MAX_HOSTS_BYTES}"),
        );
    }
    size
}

/// Refuses a `hosts` array of more than `MAX_HOSTS` elements with 54000.
fn check_len(len: usize) {
    if len > MAX_HOSTS {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("hosts has {len} elements; the limit is {MAX_HOSTS}"),
        );
    }
}

/// What a host set of `hosts` ids in `bytes` bytes may take in Rust: the ids copied, a member
/// entry each, and the call-site cache's copy of the argument (`call_cache`).
fn ensure_host_set_memory(hosts: usize, bytes: usize) {
    ensure_memory(2 * bytes + hosts * 64, "the host set");
}

/// An unweighted host set from an array; NULL elements are skipped.
fn unweighted_set(hosts: &Array<&str>, bytes: usize) -> HostSet {
    check_len(hosts.len());
    ensure_host_set_memory(hosts.len(), bytes);
    HostSet::new(hosts.iter().enumerate().filter_map(|(i, host)| {
        if i % INTERRUPT_EVERY == 0 {
            pg_sys::check_for_interrupts!();
        }
        host
    }))
}

/// A weighted host set from parallel arrays; NULL hosts are skipped with their weight.
/// (Validation runs only when the arrays change: see `call_cache`.)
fn weighted_set(hosts: Option<Array<&str>>, weights: Option<Array<f64>>, bytes: usize) -> HostSet {
    let (Some(hosts), Some(weights)) = (hosts, weights) else { null_argument("hosts and weights") };
    check_len(hosts.len());
    ensure_host_set_memory(hosts.len(), bytes);
    if hosts.len() != weights.len() {
        invalid_argument(format!(
            "hosts and weights must have the same length (got {} hosts and {} weights)",
            hosts.len(),
            weights.len()
        ));
    }
    let mut pairs = Vec::with_capacity(hosts.len());
    for (i, (host, weight)) in hosts.iter().zip(weights.iter()).enumerate() {
        if i % INTERRUPT_EVERY == 0 {
            pg_sys::check_for_interrupts!();
        }
        let Some(host) = host else { continue };
        let Some(weight) = weight else { null_argument(&format!("the weight of host \"{host}\"")) };
        pairs.push((host, weight));
    }
    HostSet::weighted(pairs).unwrap_or_else(|e| invalid_argument(e.to_string()))
}

pub(crate) fn check_k(k: Option<i32>) -> Option<usize> {
    match k {
        None => None,
        Some(k) if k < 0 => invalid_argument(format!("k must be >= 0 or NULL (got {k})")),
        Some(k) => Some(k as usize),
    }
}

extension_sql_file!("hrw.sql", name = "hrw_literals", requires = [ranked, ranked_weighted, rank_within]);

/// The host with the highest score for `key`; NULL for an empty or all-NULL array.
#[pg_extern(immutable, parallel_safe, name = "winner")]
fn winner(key: Option<&str>, hosts: Option<Array<&str>>, fcinfo: FunctionCallInfo) -> Option<String> {
    let key = require_key(key);
    let bytes = check_hosts_size(fcinfo);
    let hosts = hosts?;
    // SAFETY: `fcinfo` is this call's and argument HOSTS is a text[].
    let set = unsafe { cached(fcinfo, &[HOSTS], || unweighted_set(&hosts, bytes)) };
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
    let bytes = check_hosts_size(fcinfo);
    // SAFETY: `fcinfo` is this call's; HOSTS and WEIGHTS are text[] and float8[].
    let set = unsafe { cached(fcinfo, &[HOSTS, WEIGHTS], || weighted_set(hosts, weights, bytes)) };
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
    let bytes = check_hosts_size(fcinfo);
    let Some(hosts) = hosts else { return Vec::new() };
    // SAFETY: `fcinfo` is this call's and argument HOSTS is a text[].
    let set = unsafe { cached(fcinfo, &[HOSTS], || unweighted_set(&hosts, bytes)) };
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
    let bytes = check_hosts_size(fcinfo);
    // SAFETY: `fcinfo` is this call's; HOSTS and WEIGHTS are text[] and float8[].
    let set = unsafe { cached(fcinfo, &[HOSTS, WEIGHTS], || weighted_set(hosts, weights, bytes)) };
    set.ranked(key, k).into_iter().map(str::to_owned).collect()
}

/// Whether `host` is among the first `max_rank + 1` hosts for `key` over weighted `hosts`
/// (rank 0 is the winner; false when `host` is not one of them): what `claim_runs` asks of each
/// run it walks. It stops counting once more than `max_rank` hosts outrank `host`, where
/// `ranked` would score, sort and return every host as a new array.
#[pg_extern(immutable, parallel_safe, name = "_rank_within")]
fn rank_within(
    key: Option<&str>,
    hosts: Option<Array<&str>>,
    weights: Option<Array<f64>>,
    host: Option<&str>,
    max_rank: Option<i64>,
    fcinfo: FunctionCallInfo,
) -> bool {
    let key = require_key(key);
    let host = host.unwrap_or_else(|| null_argument("host"));
    let max_rank = max_rank.unwrap_or_else(|| null_argument("max_rank"));
    if max_rank < 0 {
        invalid_argument(format!("max_rank must be >= 0 (got {max_rank})"));
    }
    let bytes = check_hosts_size(fcinfo);
    // SAFETY: `fcinfo` is this call's; HOSTS and WEIGHTS are text[] and float8[].
    let set = unsafe { cached(fcinfo, &[HOSTS, WEIGHTS], || weighted_set(hosts, weights, bytes)) };
    set.ranks_within(key, host, usize::try_from(max_rank).unwrap_or(usize::MAX))
}

/// The raw 63-bit score of `host` for `key` (non-negative; higher wins).
#[pg_extern(immutable, parallel_safe)]
fn score(key: Option<&str>, host: Option<&str>) -> i64 {
    let key = require_key(key);
    let host = host.unwrap_or_else(|| null_argument("host"));
    check_hashed("host", host);
    rendezvous_hrw::score(key, host) as i64
}

/// The name of the scoring algorithm, for clients to check they compute the same thing.
#[pg_extern(immutable, parallel_safe)]
fn hrw_algorithm() -> &'static str {
    rendezvous_hrw::ALGORITHM
}
