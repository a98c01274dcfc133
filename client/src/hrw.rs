//! Rendezvous hashing computed locally, identical to the extension's (`rendezvous-hrw-v1`,
//! docs/hrw.md). Build a [`HostSet`] once per membership change; each lookup then costs one
//! key hash plus a cheap mix per host.
//!
//! ```
//! use rendezvous_client::hrw::HostSet;
//!
//! let hosts = HostSet::new(["host-a", "host-b", "host-c"]);
//! let owner = hosts.winner("tenant-42").unwrap();
//! // The ranking starts with the winner; rank r is who takes over when the first r are gone.
//! let ranked = hosts.ranked("tenant-42", None);
//! assert_eq!(ranked[0], owner);
//! assert_eq!(hosts.rank_of("tenant-42", owner), Some(0));
//!
//! // Weighted: a host with weight 2 owns about twice the keys of one with weight 1.
//! let weighted = HostSet::weighted([("big", 2.0), ("small", 1.0)])?;
//! assert!(weighted.winner("tenant-42").is_some());
//! # Ok::<(), rendezvous_client::hrw::WeightError>(())
//! ```
//!
//! Only the lookups are re-exported here. The hashing steps they are built from (the key and
//! host hashes and their combination, specified in docs/hrw.md for other languages) stay in
//! the `rendezvous-hrw` crate, for implementers who need them.
pub use rendezvous_hrw::{score, winner_of, HostSet, WeightError, ALGORITHM};

use std::time::Duration;
use tokio_postgres::GenericClient;

use crate::{membership, Result};

/// The live host set with weights, ready for local lookups: the set the server's
/// `rendezvous.winner(key)` uses when called with the same `staleness`.
///
/// ```no_run
/// # async fn run() -> rendezvous_client::Result<()> {
/// let client = rendezvous_client::connect("postgres://app@db.internal/app").await?;
/// let live = rendezvous_client::hrw::live_host_set(&client, std::time::Duration::from_secs(10)).await?;
/// println!("tenant-42 belongs to {:?}", live.winner("tenant-42"));
/// # Ok(())
/// # }
/// ```
pub async fn live_host_set(client: &impl GenericClient, staleness: Duration) -> Result<HostSet> {
    Ok(membership::LiveView::read(client, staleness).await?.into_hosts())
}
