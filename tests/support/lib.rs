//! Helpers for the integration tests: a fresh database per test on the throwaway cluster that
//! `scripts/test.sh` starts (its URL is in `RENDEZVOUS_TEST_DATABASE_URL`).
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_postgres::Client;

/// The admin URL of the test cluster.
pub fn cluster_url() -> String {
    std::env::var("RENDEZVOUS_TEST_DATABASE_URL").expect(
        "RENDEZVOUS_TEST_DATABASE_URL is not set: run the integration tests with scripts/test.sh, \
         which starts a throwaway cluster with the extension installed",
    )
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    format!("{base}/{db}")
}

/// A database of its own for one test, with or without the extension.
pub struct TestDb {
    /// Its connection URL.
    pub url: String,
    /// Its name.
    pub name: String,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TestDb {
    /// A new database `t_<label>_<n>` with `CREATE EXTENSION pg_rendezvous`.
    pub async fn new(label: &str) -> TestDb {
        Self::create(label, true).await
    }

    /// A new database without the extension.
    pub async fn bare(label: &str) -> TestDb {
        Self::create(label, false).await
    }

    async fn create(label: &str, extension: bool) -> TestDb {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("t_{label}_{}_{n}", std::process::id());
        let admin = connect(&cluster_url()).await;
        admin.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
        let url = with_database(&cluster_url(), &name);
        if extension {
            connect(&url).await.batch_execute("CREATE EXTENSION pg_rendezvous").await.expect("create extension");
        }
        TestDb { url, name }
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> Client {
        connect(&self.url).await
    }
}

/// Connects (no TLS) and drives the connection in the background.
pub async fn connect(url: &str) -> Client {
    rendezvous_client::connect(url).await.expect("connect to the test cluster")
}
