//! Rendezvous hashing computed locally, identical to the extension's (`rendezvous-hrw-v1`,
//! docs/hrw.md). Build a [`HostSet`] once per membership change; each lookup then costs one
//! key hash plus a cheap mix per host.
pub use rendezvous_hrw::{combine, host_hash, key_hash, score, winner_of, HostSet, WeightError, ALGORITHM};

use std::time::Duration;
use tokio_postgres::GenericClient;

use crate::{membership, Result};

/// The live host set with weights, ready for local lookups.
pub async fn live_host_set(client: &impl GenericClient, staleness: Duration) -> Result<HostSet> {
    let members = membership::live_members(client, staleness).await?;
    Ok(HostSet::weighted(members)?)
}
