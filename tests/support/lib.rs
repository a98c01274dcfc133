//! Helpers for the integration tests: a fresh database per test on a throwaway cluster, private
//! clusters (the `rendezvous` command's own) for tests that restart the server, and pgbouncer.
//!
//! The shared cluster is the one in `RENDEZVOUS_TEST_DATABASE_URL` (scripts/test.sh sets it),
//! else, under `rendezvous cluster run`, the throwaway cluster in `DATABASE_URL`: for instance
//! `rendezvous cluster run -c fsync=off -- cargo test -p rendezvous-tests`.
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod dispatch;

pub use rendezvous_cli::cluster::Cluster;
use rendezvous_cli::cluster::{as_pg, free_port};
use tokio_postgres::Client;

/// The admin URL of the test cluster.
pub fn cluster_url() -> String {
    if let Ok(url) = std::env::var("RENDEZVOUS_TEST_DATABASE_URL") {
        return url;
    }
    // DATABASE_URL alone may name a database that matters: only a throwaway cluster's.
    match (std::env::var_os("RENDEZVOUS_CLUSTER_DIR"), std::env::var("DATABASE_URL")) {
        (Some(_), Ok(url)) => url,
        _ => panic!(
            "no test cluster: run the integration tests with scripts/test.sh, or under \
             `rendezvous cluster run -c fsync=off -- cargo test -p rendezvous-tests` \
             (or set RENDEZVOUS_TEST_DATABASE_URL to a cluster with pg_rendezvous installed)"
        ),
    }
}

/// True when this run tests the portable edition (scripts/test.sh names its script in
/// `RENDEZVOUS_TEST_PORTABLE_SCRIPT`, and every [`TestDb`] installs it).
pub fn portable_edition() -> bool {
    std::env::var_os("RENDEZVOUS_TEST_PORTABLE_SCRIPT").is_some()
}

/// Ends a test that checks what the native edition does and the portable one documentedly does
/// not (docs/operations.md, "What differs"), saying so, when this run tests the portable
/// edition.
#[macro_export]
macro_rules! native_only {
    ($why:literal) => {
        if $crate::portable_edition() {
            eprintln!("native edition only ({}): {}", module_path!(), $why);
            return;
        }
    };
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
    /// A new database `t_<label>_<n>` with `CREATE EXTENSION pg_rendezvous` (or the portable
    /// edition's script named by `RENDEZVOUS_TEST_PORTABLE_SCRIPT`).
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
            // The portable edition instead, when the run names its script (scripts/test.sh
            // runs part of the suite against it).
            let install = match std::env::var("RENDEZVOUS_TEST_PORTABLE_SCRIPT") {
                Ok(path) => std::fs::read_to_string(&path).expect("read the portable edition's script"),
                Err(_) => "CREATE EXTENSION pg_rendezvous".to_owned(),
            };
            connect(&url).await.batch_execute(&install).await.expect("install pg_rendezvous");
        }
        TestDb { url, name }
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> Client {
        connect(&self.url).await
    }
}

/// Makes every task due now: its next fire time the last hour boundary, as if that fire time
/// (of an hourly task) had not run yet.
pub async fn hourly_tasks_due_now(client: &Client) {
    client
        .execute(
            "UPDATE rendezvous.tasks SET next_fire_at = to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600)",
            &[],
        )
        .await
        .expect("make the tasks due");
}

/// Connects (no TLS) and drives the connection in the background.
pub async fn connect(url: &str) -> Client {
    rendezvous_client::connect(url).await.expect("connect to the test cluster")
}

/// Backend pids of `group`'s electors in this database that follow: they claimed, lost, and now
/// sit idle outside any statement (listening for the leader's announcement) without the lock.
pub async fn following_sessions(client: &Client, group: &str) -> Vec<i32> {
    client
        .query(
            "SELECT a.pid FROM pg_catalog.pg_stat_activity a
              WHERE a.application_name LIKE 'rendezvous leader ' || $1 || ' %'
                AND a.state = 'idle' AND a.datname = pg_catalog.current_database() AND a.query LIKE '%try_lead%'
                AND NOT EXISTS (SELECT 1 FROM rendezvous.leader_locks l WHERE l.pid = a.pid)",
            &[&group],
        )
        .await
        .expect("read pg_stat_activity")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// pgbouncer in front of a cluster (the one scripts/setup.sh installs); stopped on drop.
pub struct Pgbouncer {
    child: std::process::Child,
    /// Its port.
    pub port: u16,
}

impl Pgbouncer {
    /// Starts pgbouncer with `pool_mode = transaction` and `pool_size` server connections.
    pub async fn transaction_mode(cluster: &Cluster, pool_size: u32) -> Pgbouncer {
        Pgbouncer::start(cluster, "transaction", pool_size).await
    }

    /// Starts pgbouncer with `pool_mode = session` (its default) and `pool_size` server
    /// connections, with its other settings at their defaults.
    pub async fn session_mode(cluster: &Cluster, pool_size: u32) -> Pgbouncer {
        Pgbouncer::start(cluster, "session", pool_size).await
    }

    async fn start(cluster: &Cluster, mode: &str, pool_size: u32) -> Pgbouncer {
        let port = free_port();
        let dir = cluster.dir();
        let users = dir.join(format!("pgbouncer-{port}-users.txt"));
        std::fs::write(&users, "\"postgres\" \"\"\n").unwrap();
        let ini = dir.join(format!("pgbouncer-{port}.ini"));
        let log = dir.join(format!("pgbouncer-{port}.log"));
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host=127.0.0.1 port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = {mode}\n\
                 default_pool_size = {pool_size}\nmax_client_conn = 100\nlogfile = {}\n",
                cluster.port,
                users.display(),
                log.display()
            ),
        )
        .unwrap();
        let _ = std::process::Command::new("chown").args(["-R", "postgres:", dir.to_str().unwrap()]).status();
        let child = as_pg("/usr/sbin/pgbouncer").arg(ini.to_str().unwrap()).spawn().expect("start pgbouncer");
        let bouncer = Pgbouncer { child, port };
        for _ in 0..100 {
            if tokio_postgres::connect(&bouncer.url(), tokio_postgres::NoTls).await.is_ok() {
                return bouncer;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("pgbouncer did not start (see {})", log.display());
    }

    /// The URL of database `postgres` through the pooler.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        // runuser forwards SIGTERM to pgbouncer.
        let _ = std::process::Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// Waits (up to 15 s) until `query`'s count reaches `n`: for what other sessions or processes
/// do in their own time, however busy the machine.
pub async fn wait_for_count(client: &Client, query: &str, n: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let c: i64 = client.query_one(query, &[]).await.unwrap().get(0);
        if c >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{query}: {c} < {n} after 15 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
