//! Runs that run: an admitted run (admission.rs) is claimed by one host at a time with a token
//! and a lease, HRW-placed over the live set, renewed, completed, failed and retried with
//! backoff, or cancelled; legal transitions only (runs.sql). A claim ends with the session that
//! holds it (holder.rs), so a dead holder's run is taken over at once.
//!
//! All of it is set-based SQL over a few rows per call (runs.sql); the hot path of admission
//! stays in admission.rs.
use pgrx::prelude::*;

// "firing" brings _durable_commit and _fence_floor.
extension_sql_file!("runs.sql", name = "runs", requires = ["admission", "membership", "holder", "firing"]);
