//! Async client for the `pg_rendezvous` PostgreSQL extension.
//!
//! Stateless calls take `&impl GenericClient`, so they work on a plain client, inside the
//! caller's own transaction, or on a pooled connection. Long-lived pieces ([`Membership`])
//! own a dedicated connection and a background task, and stop with `shutdown().await`.
//!
//! The HRW algorithm is the same code the extension runs ([`hrw`]), so a host can compute
//! owners locally and get exactly the server's answer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
mod error;
pub mod firing;
pub mod hrw;
pub mod leader;
pub mod membership;
pub mod sql;

pub use admission::{spawn_run, Admission};
pub use error::{Error, Result};
pub use firing::{Dispatcher, DispatcherOptions, Firing, FiringContext};
pub use leader::{LeaderElector, LeaderOptions, Leadership};
pub use membership::{Membership, MembershipOptions};

use tokio_postgres::GenericClient;

/// The extension version this client speaks (the workspace version, shared by both).
pub const EXTENSION_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Checks that `pg_rendezvous` is installed at the version this client expects and that the
/// server runs the same HRW algorithm; returns the installed version.
pub async fn check_extension(client: &impl GenericClient) -> Result<String> {
    let row = client.query_opt(sql::EXTENSION_VERSION, &[]).await.map_err(Error::from_db)?;
    let installed: String = match row {
        Some(row) => row.get(0),
        None => return Err(Error::ExtensionMissing),
    };
    if installed != EXTENSION_VERSION {
        return Err(Error::VersionMismatch { installed, expected: EXTENSION_VERSION.to_owned() });
    }
    let algorithm: String = client.query_one(sql::HRW_ALGORITHM, &[]).await.map_err(Error::from_db)?.get(0);
    if algorithm != hrw::ALGORITHM {
        return Err(Error::AlgorithmMismatch { server: algorithm, client: hrw::ALGORITHM });
    }
    Ok(installed)
}

/// Connects with `tokio_postgres` (no TLS) and drives the connection on a background task.
pub async fn connect(database_url: &str) -> Result<tokio_postgres::Client> {
    connect_as(database_url, "rendezvous").await
}

/// Like [`connect`], naming the session `application_name` (unless the URL sets one), so a
/// host's sessions are recognisable in `pg_stat_activity`.
pub async fn connect_as(database_url: &str, application_name: &str) -> Result<tokio_postgres::Client> {
    Ok(connect_watched(database_url, application_name).await?.0)
}

/// [`connect_as`], plus a signal that fires when the connection ends (for owners of a
/// dedicated session that must notice its loss at once).
pub(crate) async fn connect_watched(
    database_url: &str,
    application_name: &str,
) -> Result<(tokio_postgres::Client, tokio::sync::oneshot::Receiver<()>)> {
    let mut config: tokio_postgres::Config = database_url.parse().map_err(Error::Connect)?;
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(Error::Connect)?;
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "rendezvous connection ended");
        }
        let _ = closed_tx.send(());
    });
    Ok((client, closed))
}
