//! Idempotent spawn admission: `rendezvous.spawn_run` turns a redelivered spawn request into
//! a no-op that returns the run it already created.
//!
//! Dedup is by the caller's `dispatch_key` only, unique per tenant through a partial unique
//! index, decided by `INSERT … ON CONFLICT DO NOTHING`: never check-then-insert, never an
//! advisory lock, never a hash of the request. When the insert yields to an existing row, a
//! fresh read returns it. Under READ COMMITTED that read always sees it (ON CONFLICT waited
//! for its inserter to commit); under REPEATABLE READ or SERIALIZABLE, a row committed after
//! the caller's snapshot makes the INSERT itself raise 40001, which the client retries. If the
//! row vanished in between (purged), the insert is tried again.
use pgrx::prelude::*;

extension_sql_file!("admission.sql", name = "admission", requires = ["checks"]);
