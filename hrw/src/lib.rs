//! Rendezvous (highest random weight) hashing, algorithm `rendezvous-hrw-v1`.
//!
//! This crate is the single implementation shared by the `pg_rendezvous` extension and the
//! `rendezvous-client` crate, so the server and a client always agree on who owns a key.
//! The algorithm is specified for other languages in `docs/hrw.md`; `vectors.json` pins it.
//!
//! A lookup hashes the key once (SipHash-2-4) and mixes that hash with each host's own
//! precomputed hash (one XOR and a 64-bit finalizer per host), so scoring 1,000 hosts costs
//! one hash plus 1,000 cheap mixes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::cmp::Ordering;
use std::hash::Hasher;

use siphasher::sip::SipHasher24;

#[cfg(feature = "vectors")]
pub mod vectors;

/// The versioned name of the scoring algorithm implemented here.
pub const ALGORITHM: &str = "rendezvous-hrw-v1";

/// SipHash-2-4 keys for hashing keys ("rendezvo", "us-key-1" as big-endian ASCII).
const KEY_K0: u64 = 0x7265_6e64_657a_766f;
const KEY_K1: u64 = 0x7573_2d6b_6579_2d31;
/// SipHash-2-4 keys for hashing host ids ("rendezvo", "us-host1"); distinct from the key
/// keys so that a host named like a key does not get a degenerate score.
const HOST_K0: u64 = 0x7265_6e64_657a_766f;
const HOST_K1: u64 = 0x7573_2d68_6f73_7431;

fn siphash(k0: u64, k1: u64, bytes: &[u8]) -> u64 {
    let mut h = SipHasher24::new_with_keys(k0, k1);
    h.write(bytes);
    h.finish()
}

/// SipHash-2-4 of the key's UTF-8 bytes under the key-side keys.
pub fn key_hash(key: &str) -> u64 {
    siphash(KEY_K0, KEY_K1, key.as_bytes())
}

/// SipHash-2-4 of the host id's UTF-8 bytes under the host-side keys.
pub fn host_hash(host: &str) -> u64 {
    siphash(HOST_K0, HOST_K1, host.as_bytes())
}

/// MurmurHash3's 64-bit finalizer: a bijection with full avalanche.
#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The score of a host for a key from their two hashes: 63 bits, so it fits a non-negative
/// SQL `bigint` and sorts the same way there.
#[inline]
pub fn combine(key_hash: u64, host_hash: u64) -> u64 {
    fmix64(key_hash ^ host_hash) >> 1
}

/// The unweighted score of `host` for `key` (what `rendezvous.score` returns).
pub fn score(key: &str, host: &str) -> u64 {
    combine(key_hash(key), host_hash(host))
}

/// Order of two candidates: the higher score first, then the smaller host id (bytewise).
#[inline]
fn beats(score_a: u64, host_a: &str, score_b: u64, host_b: &str) -> bool {
    score_a > score_b || (score_a == score_b && host_a.as_bytes() < host_b.as_bytes())
}

/// The winner among `hosts` for `key`, hashing each host on the way; `None` when there are no
/// hosts. Order and duplicates do not matter. This is the allocation-free path the SQL
/// `winner(key, hosts)` uses.
pub fn winner_of<'a>(key: &str, hosts: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let kh = key_hash(key);
    let mut best: Option<(u64, &'a str)> = None;
    for host in hosts {
        let s = combine(kh, host_hash(host));
        match best {
            Some((bs, bh)) if !beats(s, host, bs, bh) => {}
            _ => best = Some((s, host)),
        }
    }
    best.map(|(_, h)| h)
}

/// Why a set of weights was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightError {
    /// A weight is NaN, infinite, zero or negative.
    Invalid {
        /// The host the weight belongs to.
        host: String,
        /// The weight as given.
        weight: f64,
    },
    /// The same host id was given twice with different weights.
    Conflicting {
        /// The repeated host.
        host: String,
    },
}

impl std::fmt::Display for WeightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightError::Invalid { host, weight } => {
                // Spelled as PostgreSQL spells float8 values, since SQL users read this.
                let shown = match *weight {
                    w if w.is_nan() => "NaN".to_owned(),
                    w if w == f64::INFINITY => "Infinity".to_owned(),
                    w if w == f64::NEG_INFINITY => "-Infinity".to_owned(),
                    w => w.to_string(),
                };
                write!(
                    f,
                    "weight {shown} of host \"{host}\" is invalid: weights must be finite and greater than 0"
                )
            }
            WeightError::Conflicting { host } => {
                write!(f, "host \"{host}\" appears more than once with different weights")
            }
        }
    }
}

impl std::error::Error for WeightError {}

/// `-ln(u)` for `u` in (0, 1), computed with IEEE-754 `+ - * /` only, in a fixed order, so it
/// is bit-identical on every platform (a libm `ln` is not). Specified in `docs/hrw.md`.
pub fn neg_ln_unit(u: f64) -> f64 {
    const SQRT2: f64 = std::f64::consts::SQRT_2;
    const LN2: f64 = std::f64::consts::LN_2;
    let bits = u.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1023u64 << 52));
    if m > SQRT2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    // ln(m) = 2 s (1 + z/3 + z^2/5 + ... + z^11/23), evaluated by Horner from the top.
    let mut p = 1.0 / 23.0;
    for k in (0..11).rev() {
        p = p * z + 1.0 / (2 * k + 1) as f64;
    }
    let ln_m = 2.0 * s * p;
    -((e as f64) * LN2 + ln_m)
}

/// The weighted score: `ratio / -ln(u)` where `u` in (0, 1) is taken from the top 52 bits of
/// the 63-bit score and `ratio` is the host's weight divided by the largest weight in the set.
/// This is the logarithmic method: a host's share of keys is proportional to its weight.
pub fn weighted_score(score: u64, ratio: f64) -> f64 {
    let u = (2 * (score >> 11) + 1) as f64 * (1.0 / 9_007_199_254_740_992.0); // 2^-53
    ratio / neg_ln_unit(u)
}

/// One member of a [`HostSet`]: its id, its precomputed hash and its weight ratio.
#[derive(Debug, Clone)]
struct Member {
    id: String,
    hash: u64,
    ratio: f64,
}

/// A fixed set of hosts with their hashes precomputed, for fast repeated lookups.
///
/// Duplicate ids are merged. When every host has the same weight (or no weights are given)
/// the set is unweighted, and answers exactly as [`winner_of`] does.
#[derive(Debug, Clone, Default)]
pub struct HostSet {
    members: Vec<Member>,
    weighted: bool,
}

impl HostSet {
    /// An unweighted set.
    pub fn new<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> HostSet {
        let mut ids: Vec<String> = hosts.into_iter().map(|h| h.as_ref().to_owned()).collect();
        ids.sort_unstable();
        ids.dedup();
        let members = ids.into_iter().map(|id| Member { hash: host_hash(&id), id, ratio: 1.0 }).collect();
        HostSet { members, weighted: false }
    }

    /// A weighted set. Weights must be finite and > 0; a host repeated with the same weight
    /// is merged, with a different weight it is an error.
    pub fn weighted<S: AsRef<str>>(
        hosts: impl IntoIterator<Item = (S, f64)>,
    ) -> Result<HostSet, WeightError> {
        let mut pairs: Vec<(String, f64)> = Vec::new();
        for (h, w) in hosts {
            let host = h.as_ref().to_owned();
            if !(w.is_finite() && w > 0.0) {
                return Err(WeightError::Invalid { host, weight: w });
            }
            pairs.push((host, w));
        }
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut deduped: Vec<(String, f64)> = Vec::with_capacity(pairs.len());
        for (host, w) in pairs {
            match deduped.last() {
                Some((last, lw)) if *last == host => {
                    if lw.to_bits() != w.to_bits() {
                        return Err(WeightError::Conflicting { host });
                    }
                }
                _ => deduped.push((host, w)),
            }
        }
        let max = deduped.iter().map(|p| p.1).fold(0.0f64, f64::max);
        let weighted = deduped.iter().any(|p| p.1 != max);
        let members =
            deduped.into_iter().map(|(id, w)| Member { hash: host_hash(&id), id, ratio: w / max }).collect();
        Ok(HostSet { members, weighted })
    }

    /// Number of distinct hosts.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when the set has no hosts.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// True when hosts have different weights (equal weights behave as unweighted).
    pub fn is_weighted(&self) -> bool {
        self.weighted
    }

    /// The host ids, sorted.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.id.as_str())
    }

    /// The winner for `key`, or `None` for an empty set.
    pub fn winner(&self, key: &str) -> Option<&str> {
        let kh = key_hash(key);
        if !self.weighted {
            // Members are sorted by id, so a strict `>` keeps the smaller id on a tie.
            let mut best: Option<(u64, &Member)> = None;
            for m in &self.members {
                let s = combine(kh, m.hash);
                if best.is_none_or(|(bs, _)| s > bs) {
                    best = Some((s, m));
                }
            }
            return best.map(|(_, m)| m.id.as_str());
        }
        let mut best: Option<(f64, u64, &Member)> = None;
        for m in &self.members {
            let s = combine(kh, m.hash);
            let ws = weighted_score(s, m.ratio);
            let better = match best {
                None => true,
                Some((bws, bs, _)) => ws > bws || (ws == bws && s > bs),
            };
            if better {
                best = Some((ws, s, m));
            }
        }
        best.map(|(_, _, m)| m.id.as_str())
    }

    /// All hosts (or the first `k`) in descending score order; the first is the winner.
    pub fn ranked(&self, key: &str, k: Option<usize>) -> Vec<&str> {
        let kh = key_hash(key);
        let mut scored: Vec<(f64, u64, &str)> = self
            .members
            .iter()
            .map(|m| {
                let s = combine(kh, m.hash);
                let ws = if self.weighted { weighted_score(s, m.ratio) } else { 0.0 };
                (ws, s, m.id.as_str())
            })
            .collect();
        scored.sort_unstable_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(Ordering::Equal)
                .then(b.1.cmp(&a.1))
                .then(a.2.as_bytes().cmp(b.2.as_bytes()))
        });
        let k = k.unwrap_or(scored.len()).min(scored.len());
        scored.into_iter().take(k).map(|t| t.2).collect()
    }

    /// The rank of `host` for `key` (0 = winner), or `None` if it is not in the set.
    pub fn rank_of(&self, key: &str, host: &str) -> Option<usize> {
        self.ranked(key, None).iter().position(|h| *h == host)
    }

    /// Whether `host` is among the first `max_rank + 1` hosts for `key` (rank 0 is the
    /// winner), in [`ranked`](Self::ranked)'s order; false when it is not in the set. It
    /// counts the hosts that outrank `host` and stops once more than `max_rank` do, so a host
    /// far from the top is told after a few scores, where `ranked` scores and sorts them all.
    pub fn ranks_within(&self, key: &str, host: &str, max_rank: usize) -> bool {
        let Ok(at) = self.members.binary_search_by(|m| m.id.as_str().cmp(host)) else { return false };
        let kh = key_hash(key);
        let order = |m: &Member| {
            let s = combine(kh, m.hash);
            (if self.weighted { weighted_score(s, m.ratio) } else { 0.0 }, s)
        };
        let (mine, me) = (order(&self.members[at]), &self.members[at]);
        let mut ahead = 0;
        for m in &self.members {
            let theirs = order(m);
            // ranked(): descending weighted score, then raw score, then ascending id.
            let outranks = theirs.0 > mine.0
                || (theirs.0 == mine.0 && (theirs.1 > mine.1 || (theirs.1 == mine.1 && m.id < me.id)));
            if outranks {
                ahead += 1;
                if ahead > max_rank {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("host-{i}")).collect()
    }

    #[test]
    fn order_duplicates_do_not_matter() {
        let a = HostSet::new(["a", "b", "c", "d"]);
        let b = HostSet::new(["d", "c", "b", "a", "a", "c"]);
        for i in 0..2000 {
            let key = format!("k{i}");
            assert_eq!(a.winner(&key), b.winner(&key));
            assert_eq!(a.ranked(&key, None), b.ranked(&key, None));
            assert_eq!(a.winner(&key), winner_of(&key, ["c", "a", "d", "b", "a"]));
        }
    }

    /// ranks_within agrees with ranked() for every host and every bound, weighted or not.
    #[test]
    fn ranks_within_agrees_with_ranked() {
        let plain = HostSet::new(hosts(9));
        let weighted =
            HostSet::weighted(hosts(9).into_iter().enumerate().map(|(i, h)| (h, 1.0 + (i % 3) as f64)))
                .unwrap();
        for set in [&plain, &weighted] {
            for i in 0..300 {
                let key = format!("run:{i}");
                let ranked = set.ranked(&key, None);
                for (rank, host) in ranked.iter().enumerate() {
                    for max_rank in 0..10 {
                        assert_eq!(
                            set.ranks_within(&key, host, max_rank),
                            rank <= max_rank,
                            "{key} {host} {max_rank}"
                        );
                    }
                }
                assert!(!set.ranks_within(&key, "not-a-member", 100));
            }
        }
        assert!(!HostSet::new(Vec::<String>::new()).ranks_within("k", "a", 0));
    }

    #[test]
    fn empty_set_has_no_winner() {
        assert_eq!(HostSet::new(Vec::<String>::new()).winner("k"), None);
        assert_eq!(winner_of("k", []), None);
        assert!(HostSet::new(Vec::<String>::new()).ranked("k", None).is_empty());
    }

    #[test]
    fn ranked_starts_with_winner_and_respects_k() {
        let set = HostSet::new(hosts(7));
        for i in 0..500 {
            let key = format!("key/{i}");
            let r = set.ranked(&key, None);
            assert_eq!(r.len(), 7);
            assert_eq!(Some(r[0]), set.winner(&key));
            assert_eq!(set.ranked(&key, Some(3)), r[..3].to_vec());
            assert_eq!(set.ranked(&key, Some(0)), Vec::<&str>::new());
        }
    }

    #[test]
    fn uniform_over_ten_hosts() {
        let set = HostSet::new(hosts(10));
        let mut counts = std::collections::HashMap::new();
        let n = 100_000;
        for i in 0..n {
            *counts.entry(set.winner(&format!("task-{i}")).unwrap().to_owned()).or_insert(0) += 1;
        }
        for (h, c) in counts {
            let share = c as f64 / n as f64;
            assert!((share - 0.1).abs() < 0.1 * 0.05, "{h} got {share}");
        }
    }

    #[test]
    fn weighted_shares_follow_weights() {
        let weights = [1.0, 2.0, 3.0, 4.0, 10.0];
        let total: f64 = weights.iter().sum();
        let set = HostSet::weighted(weights.iter().enumerate().map(|(i, w)| (format!("h{i}"), *w))).unwrap();
        let n = 200_000;
        let mut counts = [0usize; 5];
        for i in 0..n {
            let w = set.winner(&format!("job:{i}")).unwrap();
            counts[w[1..].parse::<usize>().unwrap()] += 1;
        }
        for (i, c) in counts.iter().enumerate() {
            let got = *c as f64 / n as f64;
            let want = weights[i] / total;
            assert!((got - want).abs() < 0.01, "h{i}: got {got}, want {want}");
        }
    }

    #[test]
    fn equal_weights_are_unweighted() {
        let plain = HostSet::new(hosts(13));
        let same = HostSet::weighted(hosts(13).into_iter().map(|h| (h, 2.5))).unwrap();
        assert!(!same.is_weighted());
        for i in 0..100_000 {
            let key = format!("{i}");
            assert_eq!(plain.winner(&key), same.winner(&key));
        }
    }

    #[test]
    fn invalid_weights_are_refused() {
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(HostSet::weighted([("a", w)]), Err(WeightError::Invalid { .. })));
        }
        assert_eq!(
            HostSet::weighted([("a", 1.0), ("a", 2.0)]).unwrap_err(),
            WeightError::Conflicting { host: "a".into() }
        );
        assert_eq!(HostSet::weighted([("a", 1.0), ("a", 1.0)]).unwrap().len(), 1);
    }

    #[test]
    fn removing_a_host_moves_only_its_keys() {
        let all = HostSet::new(hosts(10));
        let without = HostSet::new(hosts(10).into_iter().filter(|h| h != "host-3"));
        for i in 0..20_000 {
            let key = format!("k{i}");
            let before = all.winner(&key).unwrap();
            let after = without.winner(&key).unwrap();
            if before != "host-3" {
                assert_eq!(before, after, "{key} moved though its host stayed");
            }
        }
    }

    #[test]
    fn adding_a_host_moves_keys_only_to_it() {
        let before_set = HostSet::new(hosts(10));
        let after_set = HostSet::new(hosts(11));
        let mut moved = 0;
        for i in 0..20_000 {
            let key = format!("k{i}");
            let before = before_set.winner(&key).unwrap();
            let after = after_set.winner(&key).unwrap();
            if before != after {
                assert_eq!(after, "host-10");
                moved += 1;
            }
        }
        // About 1/11 of the keys move to the new host.
        assert!((1500..2150).contains(&moved), "moved {moved}");
    }

    #[test]
    fn neg_ln_is_accurate() {
        for i in 1..10_000 {
            let u = i as f64 / 10_000.0;
            let ours = neg_ln_unit(u);
            let libm = -u.ln();
            assert!((ours - libm).abs() <= 4.0 * f64::EPSILON * libm.max(1e-300).max(1.0), "{u}");
        }
        assert!(neg_ln_unit(1.0 - f64::EPSILON) > 0.0);
    }
}
