//! Async client for the `pg_rendezvous` PostgreSQL extension, on `tokio-postgres`.
//!
//! Stateless calls take `&impl GenericClient`, so they work on a connection from a [`Pool`]
//! (which replaces broken connections by itself: the way to call them from an application),
//! inside the caller's own transaction, or on a plain client.
//!
//! Long-lived pieces have one shape: `start` connects and checks the extension (configuration
//! errors fail there), a background task then reconnects by itself, handles are cheap to clone
//! (read state from any task), and `shutdown(deadline)` stops the piece for every clone and
//! returns a [`ShutdownReport`]:
//!
//! | piece | start | shutdown hands back |
//! |---|---|---|
//! | [`Membership`] | [`Membership::start`] | leaves the live set |
//! | [`LeaderElector`] | [`LeaderElector::start`] | resigns a held term |
//! | [`Worker`], the one work runtime (scheduled firings and admitted runs) | [`Worker::builder`] … [`start`](worker::WorkerBuilder::start) | releases work cut off at the deadline, leaves the live set |
//!
//! The HRW algorithm is the same code the extension runs ([`hrw`]), so a host can compute
//! owners locally and get exactly the server's answer.
//!
//! # Entry points
//!
//! | what | where |
//! |---|---|
//! | connections that heal, check the extension | [`Pool`], [`check_extension`]; one plain connection: [`connect`], [`connect_as`] |
//! | idempotent run admission | [`spawn_run`], [`spawn_runs`] (a batch), and the rest of [`runs`] |
//! | membership heartbeat, live set | [`Membership`], and the rest of [`membership`] |
//! | one leader per group | [`LeaderElector`], and the rest of [`leader`] |
//! | the work runtime: recurring tasks on the database's clock, admitted runs | [`Worker`], and the rest of [`worker`]; tasks in [`task`], runs in [`runs`] |
//! | low-level claims, for callers who place work themselves | [`firing`], [`runs`] |
//! | 0.3.0's module names, kept for one release | [`schedule`], [`admission`] |
//! | local HRW lookups | [`HostSet`] ([`hrw`]) |
//! | history kept for a while, then deleted in bounded batches (the worker runs it) | [`retention`] |
//! | acknowledgements a failover could lose | [`replication`], [`Error::NotReplicated`] |
//!
//! The crate root re-exports every public type and the main entry point of each module; the
//! modules hold the remaining free functions (`membership::heartbeat`,
//! `leader::assert_leader`, `firing::claim_firing`, …). [`tokio_postgres`] is re-exported so
//! callers can name the exact version the client's signatures use.
//!
//! # Example
//!
//! ```no_run
//! use rendezvous_client::{LeaderElector, LeaderOptions, Membership, MembershipOptions};
//!
//! # async fn host() -> rendezvous_client::Result<()> {
//! let url = "postgres://app@db.internal/app";
//! let client = rendezvous_client::connect(url).await?;
//! rendezvous_client::check_extension(&client).await?;
//!
//! // Be part of the live host set, and compete for one group's leadership.
//! let me = Membership::start(url, "host-1", MembershipOptions::default()).await?;
//! let elector = LeaderElector::start(url, "billing", "host-1", LeaderOptions::default()).await?;
//! if elector.is_leader() {
//!     // leader-only work, fenced by elector.epoch()
//! }
//! elector.shutdown(std::time::Duration::from_secs(5)).await?;
//! me.shutdown(std::time::Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]
#![warn(unreachable_pub)]

pub mod admission;
mod announce;
mod background;
mod connection;
pub mod database;
mod error;
pub mod firing;
pub mod hrw;
pub mod leader;
pub mod membership;
mod pool;
pub mod replication;
pub mod retention;
pub mod runs;
pub mod schedule;
mod session;
pub mod signals;
pub mod steps;
pub mod task;
pub mod worker;
// The SQL text the client sends is an implementation detail, not API: hidden from the docs
// and free to change in any release. It stays reachable (rather than `pub(crate)`) because the
// workspace's integration tests need it: tests/it/contract.rs prepares every statement
// against the installed extension, and tests/it/hrw.rs drives `sql::WINNER` directly.
#[doc(hidden)]
pub mod sql;

pub use background::ShutdownReport;
pub use connection::{check_extension, connect, connect_as, Installed, EXTENSION_VERSION};
pub use database::Database;
pub use error::{Error, Result, MAX_ID_BYTES};
pub use firing::{Firing, FiringClaim, FiringState};
pub use hrw::{HostSet, WeightError};
pub use leader::{CurrentLeader, LeaderClaim, LeaderElector, LeaderOptions, Leadership};
pub use membership::{HeartbeatStatus, LiveView, Membership, MembershipOptions};
pub use pool::{Pool, PoolOptions, PoolStatus, PooledClient};
pub use runs::{spawn_run, spawn_runs, Admission, NewRun, RetryPolicy, RunClaim};
#[allow(deprecated)]
pub use schedule::{Scheduler, SchedulerOptions, SchedulerStats};
pub use task::{CatchUp, Overlap, TaskSpec};
pub use tokio_postgres;
pub use worker::{Clock, FencedTransaction, Job, Worker, WorkerOptions, WorkerStats};
/// The OpenSSL bindings and their tokio-postgres connector, for [`Database::with_connector`].
pub use {openssl, postgres_openssl};

#[cfg(test)]
mod docs_tests;

// The README's example is compiled as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
