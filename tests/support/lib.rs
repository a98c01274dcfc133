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

/// Runs `cmd` as the PostgreSQL OS user when we are root (PostgreSQL refuses root).
fn as_pg(program: &str) -> std::process::Command {
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if is_root {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", "postgres", "--", program]);
        c
    } else {
        std::process::Command::new(program)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A private throwaway cluster, for tests that restart the server or put a pooler in front;
/// stopped and removed on drop.
pub struct Cluster {
    dir: std::path::PathBuf,
    /// Its port.
    pub port: u16,
}

impl Cluster {
    /// initdb + start, with `pg_rendezvous` created in database `postgres`.
    pub async fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("rendezvous-it-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::process::Command::new("chown").args(["postgres:", dir.to_str().unwrap()]).status();
        let cluster = Cluster { dir, port: free_port() };
        let ok = as_pg(&format!("{PG_BIN}/initdb"))
            .args(["-D", cluster.data().as_str(), "--auth=trust", "--username=postgres", "-E", "UTF8", "--no-sync"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "initdb failed");
        cluster.pg_ctl("start");
        connect(&cluster.url()).await.batch_execute("CREATE EXTENSION pg_rendezvous").await.unwrap();
        cluster
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn pg_ctl(&self, action: &str) {
        let opts = format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", self.port, self.dir.display());
        let log = self.dir.join("server.log");
        let ok = as_pg(&format!("{PG_BIN}/pg_ctl"))
            .args(["-D", &self.data(), "-l", log.to_str().unwrap(), "-o", &opts, "-w", "-s", "-m", "fast", action])
            .status()
            .unwrap();
        assert!(ok.success(), "pg_ctl {action} failed");
    }

    /// Restarts the server (every session ends, session locks with them).
    pub fn restart(&self) {
        self.pg_ctl("restart");
    }

    /// The URL of database `postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its directory, for files of helpers (a pooler's config).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_pg(&format!("{PG_BIN}/pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "-w", "-s", "stop"])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// pgbouncer in front of a cluster, in transaction pooling mode; stopped on drop.
pub struct Pgbouncer {
    child: std::process::Child,
    /// Its port.
    pub port: u16,
}

impl Pgbouncer {
    /// Starts pgbouncer with `pool_mode = transaction` and `pool_size` server connections.
    pub async fn transaction_mode(cluster: &Cluster, pool_size: u32) -> Pgbouncer {
        let port = free_port();
        let dir = cluster.dir();
        let users = dir.join("pgbouncer-users.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n").unwrap();
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host=127.0.0.1 port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = transaction\n\
                 default_pool_size = {pool_size}\nmax_client_conn = 100\nlogfile = {}\n",
                cluster.port,
                users.display(),
                dir.join("pgbouncer.log").display()
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
        panic!("pgbouncer did not start (see {})", dir.join("pgbouncer.log").display());
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
