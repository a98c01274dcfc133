//! The worker's first source of work: scheduled firings. Each look reads enough of the oldest
//! due firings for this host to find its share, claims those whose rank delay has passed (its
//! own first, in one call per lease, beyond its free slots for those it ranks first for) into
//! the local queue, and says when to look again.
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Client;

use super::clock::Offset;
use super::job::Work;
use super::stats::Counters;
use super::{Clock, Queued, Shared};
use crate::firing::{self, due_list, next_due_at, DueFiring, Firing};
use crate::hrw::HostSet;
use crate::{signals, Result};

/// Firings a host claims ahead of its free slots, per slot (`max_concurrent`): those it ranks
/// first for, held in its local queue until a slot frees. 16 a slot lets 16 slots take a
/// burst of 256 in one claim; a queue longer than its handlers can start within half the
/// lease is released, not run late.
pub(super) const FIRINGS_AHEAD_PER_SLOT: usize = 16;

/// Claims the due firings this host should try now into the local queue, measuring the clocks'
/// offset on the way; returns how long until the next rank delay ends (at most `poll`) and when
/// the database says a firing next becomes claimable.
pub(super) async fn claim_due(
    shared: &Arc<Shared>,
    client: &Client,
    view: &HostSet,
    offset: &mut Option<Offset>,
) -> Result<(Duration, Option<SystemTime>)> {
    let o = &shared.options;
    // Enough of the oldest due firings for this host to find its share among them (about
    // what it can take: its free slots and room in its queue), not every due firing each time.
    let free = shared.slots.available_permits();
    let queued = shared.queued.lock().expect("queue lock").len();
    let room = free + (o.max_concurrent * FIRINGS_AHEAD_PER_SLOT).saturating_sub(queued);
    let want = (room * view.len().max(1) * 2).clamp(64, 1000) as i32;
    // When something becomes claimable next, read *before* the due firings: firings another
    // host makes in between are then either in the due list or make this instant past (so the
    // next look comes soon), never missed until the next fire time.
    let local_before = SystemTime::now();
    let (next_db_now, next) = next_due_at(client).await?;
    let measured = Offset::measure(next_db_now, local_before, SystemTime::now());
    *offset = Some(measured);
    let due = due_list(client, want).await?.0;
    // With Clock::Database, "now" by the database is the local clock shifted by the offset.
    let db_now_est = || match &o.clock {
        Clock::Database => measured.db_now(),
        Clock::Local(f) => f(),
    };
    let running: HashSet<String> = shared.running.lock().expect("running lock").keys().cloned().collect();
    let mut wait = o.poll;
    let mut claim: Vec<(usize, &DueFiring)> = Vec::new();
    for d in &due {
        if !shared.handlers.contains_key(&d.firing.task_id) {
            continue;
        }
        let key = d.firing.key()?;
        if running.contains(&key) {
            continue;
        }
        // A host missing from its own view ranks last.
        let rank = view.rank_of(&key, &shared.host_id).unwrap_or(view.len());
        let try_at = d.claimable_since + o.rank_delay * rank as u32;
        match try_at.duration_since(db_now_est()) {
            Ok(later) if !later.is_zero() => wait = wait.min(later),
            _ => claim.push((rank, d)),
        }
    }
    // Its own firings first, then, with slots to spare, those of hosts that let them wait
    // (dead, or busy): a busy fleet does not fight over the oldest firings.
    claim.sort_by_key(|(rank, d)| (*rank > 0, d.claimable_since));
    // The free slots' worth, and beyond them the firings this host ranks first for, into
    // the local queue: HRW gives those to this host anyway (no other host tries them before
    // its rank delay), and a burst is claimed in a look or two instead of a look per free
    // slot. Bounded, so a queue of slow handlers never holds a lease for long.
    let own = claim.iter().filter(|(rank, _)| *rank == 0).count();
    let take = free.max(own.min(room));
    // More claimable than taken: a slot freed by a finishing firing makes a look at once.
    shared.firings_waiting.store(claim.len() > take, Ordering::Relaxed);
    claim.truncate(take);
    // One claim call per lease.
    let mut by_lease: BTreeMap<Duration, Vec<&DueFiring>> = BTreeMap::new();
    for (_, d) in claim {
        by_lease.entry(d.lease).or_default().push(d);
    }
    for (lease, batch) in by_lease {
        let firings: Vec<&Firing> = batch.iter().map(|d| &d.firing).collect();
        let claiming = Instant::now();
        let claims = firing::claim_firings(client, &firings, &shared.host_id, lease).await?;
        signals::seconds(signals::FIRING_CLAIM_DURATION, claiming.elapsed());
        for (d, c) in batch.into_iter().zip(claims) {
            match c {
                Some(c) if c.claimed => {
                    let token = c.token.expect("a won claim has a token");
                    Counters::add(&shared.counters.claimed);
                    metrics::counter!(signals::FIRINGS_CLAIMED).increment(1);
                    let now = Instant::now();
                    let late = db_now_est().duration_since(d.firing.fire_at).unwrap_or_default();
                    shared.queued.lock().expect("queue lock").push_back(Queued {
                        work: Work::Firing(d.firing.clone()),
                        token,
                        attempt: d.attempts + 1,
                        lease,
                        claimed_at: now,
                        due: now.checked_sub(late),
                    });
                }
                _ => {
                    Counters::add(&shared.counters.lost_claims);
                    metrics::counter!(signals::FIRING_CLAIMS_LOST).increment(1);
                }
            }
        }
    }
    Ok((wait, next))
}
