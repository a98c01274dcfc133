//! A throwaway highly available database for `rendezvous fleet --ha`: a primary with a
//! standby on loopback (synchronous, but for [`Engine::PromoteAsync`]), whose primary the
//! fleet kills midway.
//!
//! The engines: [`Engine::PgAutoFailover`] (a pg_auto_failover monitor and two nodes, each
//! PostgreSQL under its keeper; the monitor notices the dead primary and promotes the
//! secondary), and [`Engine::Promote`] and [`Engine::PromoteAsync`] (two plain clusters; the
//! controller promotes the standby itself, as a failover tool would). Either way the fleet reaches it through one multi-host
//! URL with `target_session_attrs=read-write`, so every connection finds the new primary by
//! itself.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{self, Cluster};

/// What manages the failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// pg_auto_failover (Debian's `pg-auto-failover-cli` and `postgresql-15-auto-failover`): the
    /// primary's PostgreSQL and keeper are killed, the monitor promotes the secondary
    PgAutoFailover,
    /// A plain primary and synchronous streaming standby: the primary is killed, the
    /// controller promotes the standby (`pg_ctl promote`)
    Promote,
    /// As `promote`, with an asynchronous standby that falls a second behind just before the
    /// crash (replication is cut a second before it, as a slow or broken link would): the
    /// promoted standby lacks the primary's last second, and the report shows what that lost
    PromoteAsync,
    /// A plain primary and synchronous standby, partitioned: the replication connection is cut
    /// silently (its packets dropped both ways, no reset; root and iptables) and the primary
    /// keeps running, every commit on it waiting for the standby. After 5 s the controller
    /// does what a failover tool does: it fences the old primary (new transactions read-only)
    /// and promotes the standby
    PromotePartitioned,
    /// As `promote-partitioned`, but the old primary is never fenced: it stays up and
    /// writable beside the promoted standby, its commits waiting for a standby that is gone,
    /// and the URL names it first. Hosts must leave it by themselves
    PromoteUnfenced,
}

impl Engine {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Engine::PgAutoFailover => "pg_auto_failover",
            Engine::Promote => "pg_ctl promote (synchronous)",
            Engine::PromoteAsync => "pg_ctl promote (asynchronous, 1 s behind)",
            Engine::PromotePartitioned => {
                "pg_ctl promote (synchronous; the old primary partitioned, still up)"
            }
            Engine::PromoteUnfenced => {
                "pg_ctl promote (synchronous; the old primary partitioned, still up and writable)"
            }
        }
    }
}

/// The running pair; everything is stopped and removed on drop.
pub struct Ha {
    engine: Engine,
    inner: Inner,
    /// The replication connection's cut, with [`Engine::PromotePartitioned`] and
    /// [`Engine::PromoteUnfenced`] (healed on drop).
    cut: Option<crate::partition::Partition>,
}

enum Inner {
    Pair { primary: Cluster, standby: Cluster },
    Formation(Formation),
}

/// A pg_auto_failover monitor and two nodes, each `pg_autoctl … --run` in a process group of
/// its own (its keeper, PostgreSQL and PostgreSQL's children), all under one temp dir.
struct Formation {
    dir: PathBuf,
    monitor_port: u16,
    /// `(name, port, process)` of each node.
    nodes: Vec<(String, u16, Child)>,
    monitor: Option<Child>,
}

/// The monitor's health checks, shortened from their defaults (a check every 5 s, a node
/// unhealthy after 20 s, 30 s for a primary to demote) so a dead primary is replaced in a few
/// seconds rather than half a minute.
const MONITOR_SETTINGS: &[(&str, &str)] = &[
    ("pgautofailover.health_check_period", "1000"),
    ("pgautofailover.health_check_timeout", "1000"),
    ("pgautofailover.health_check_retry_delay", "500"),
    ("pgautofailover.health_check_max_retries", "1"),
    ("pgautofailover.node_considered_unhealthy_timeout", "2000"),
    ("pgautofailover.primary_demote_timeout", "3000"),
];

impl Ha {
    /// Starts the pair and installs `pg_rendezvous` on the primary; returns once the standby
    /// replicates (synchronously, but for [`Engine::PromoteAsync`]).
    pub async fn start(engine: Engine) -> Result<Ha, String> {
        let inner = match engine {
            Engine::Promote | Engine::PromoteAsync | Engine::PromotePartitioned | Engine::PromoteUnfenced => {
                let primary = Cluster::start().await?;
                let standby = primary.standby()?;
                let admin = connect(&primary.url()).await?;
                if engine != Engine::PromoteAsync {
                    // Synchronous from here on (set after the copy, so the standby, once
                    // promoted, does not wait for a standby of its own).
                    for sql in ["ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"]
                    {
                        admin.batch_execute(sql).await.map_err(|e| db_error(sql, e))?;
                    }
                }
                let state = if engine == Engine::PromoteAsync { "async" } else { "sync" };
                wait_for(
                    &admin,
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state = '{state}')"
                    ),
                )
                .await?;
                Inner::Pair { primary, standby }
            }
            Engine::PgAutoFailover => Inner::Formation(Formation::start().await?),
        };
        Ok(Ha { engine, inner, cut: None })
    }

    /// Its engine.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Both nodes, for a connection that wants the primary.
    pub fn url(&self) -> String {
        let ports: Vec<u16> = match &self.inner {
            Inner::Pair { primary, standby } => vec![primary.port, standby.port],
            Inner::Formation(f) => f.nodes.iter().map(|(_, port, _)| *port).collect(),
        };
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!(
            "postgresql://postgres@{}/postgres?target_session_attrs=read-write&connect_timeout=2",
            hosts.join(",")
        )
    }

    /// Kills the primary as a crash would: its PostgreSQL, and with pg_auto_failover its keeper
    /// too (the monitor then promotes the secondary by itself).
    pub async fn kill_primary(&mut self) -> Result<(), String> {
        match &mut self.inner {
            Inner::Pair { primary, standby } if self.engine == Engine::PromoteAsync => {
                // Cut replication (what the standby's socket holds is still applied), let the
                // primary run on for a second, then crash it.
                let standby_admin = connect(&standby.url()).await?;
                for sql in ["ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"] {
                    standby_admin.batch_execute(sql).await.map_err(|e| db_error(sql, e))?;
                }
                wait_for(&standby_admin, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_wal_receiver)").await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                primary.kill()
            }
            Inner::Pair { primary, .. }
                if matches!(self.engine, Engine::PromotePartitioned | Engine::PromoteUnfenced) =>
            {
                let primary_port = primary.port;
                // The standby's replication connection goes silent; the primary runs on, and
                // every commit on it waits for the standby.
                let admin = connect(&primary.url()).await?;
                let port: i32 = admin
                    .query_one("SELECT client_port FROM pg_stat_replication LIMIT 1", &[])
                    .await
                    .map_err(|e| db_error("the standby's connection", e))?
                    .get(0);
                self.cut = Some(crate::partition::Partition::connections(&[(port as u16, primary_port)])?);
                tokio::time::sleep(PARTITIONED_FOR).await;
                if self.engine == Engine::PromoteUnfenced {
                    // No failover tool fenced it: it stays writable, first in the URL.
                    return Ok(());
                }
                // The failover tool fences the old primary before promoting: new transactions
                // there are read-only, so clients reconnecting through the multi-host URL with
                // target_session_attrs=read-write pass it by. (Neither statement commits.)
                for sql in ["ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()"]
                {
                    admin.batch_execute(sql).await.map_err(|e| db_error(sql, e))?;
                }
                Ok(())
            }
            Inner::Pair { primary, .. } => primary.kill(),
            Inner::Formation(f) => f.kill_primary().await,
        }
    }

    /// What the failover tool does next: for [`Engine::Promote`], promote the standby (waiting
    /// until it accepts writes); nothing for pg_auto_failover, whose monitor does it.
    pub fn take_over(&self) -> Result<(), String> {
        match &self.inner {
            Inner::Pair { standby, .. } => standby.promote(),
            Inner::Formation(_) => Ok(()),
        }
    }
}

/// How long a partitioned primary runs on, its commits waiting, before the failover.
const PARTITIONED_FOR: Duration = Duration::from_secs(5);

impl Formation {
    async fn start() -> Result<Formation, String> {
        let program = Path::new("/usr/bin/pg_autoctl");
        if !program.exists() {
            return Err("pg_autoctl is not installed: install pg-auto-failover-cli and \
                        postgresql-15-auto-failover (scripts/setup.sh does)"
                .into());
        }
        let dir = cluster::make_temp_dir()?;
        let mut f = Formation { dir, monitor_port: cluster::free_port(), nodes: Vec::new(), monitor: None };
        if cluster::is_root() {
            let _ = Command::new("chown").arg("postgres:").arg(&f.dir).status();
        }
        let port = f.monitor_port.to_string();
        f.monitor = Some(
            f.autoctl("monitor", &["create", "monitor", "--pgport", &port, "--auth", "trust", "--no-ssl"])?,
        );
        let monitor = f.monitor_url("postgres");
        let admin = f.wait_connect(&monitor, "the monitor").await?;
        wait_for(&admin, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgautofailover')")
            .await?;
        for (name, value) in MONITOR_SETTINGS {
            let sql = format!("ALTER SYSTEM SET {name} = '{value}'");
            admin.batch_execute(&sql).await.map_err(|e| db_error(&sql, e))?;
        }
        admin.batch_execute("SELECT pg_reload_conf()").await.map_err(|e| db_error("pg_reload_conf()", e))?;
        let join = f.monitor_url("autoctl_node") + "?sslmode=disable";
        for (i, states) in [(1, "'single', 'primary'"), (2, "'secondary'")] {
            let name = format!("node{i}");
            let port = cluster::free_port();
            let child = f.autoctl(
                &name,
                &[
                    "create",
                    "postgres",
                    "--pgport",
                    &port.to_string(),
                    "--auth",
                    "trust",
                    "--no-ssl",
                    "--name",
                    &name,
                    "--monitor",
                    &join,
                ],
            )?;
            f.nodes.push((name.clone(), port, child));
            let ready = format!(
                "SELECT EXISTS (SELECT 1 FROM pgautofailover.node WHERE nodename = '{name}' AND reportedstate IN ({states}))"
            );
            f.wait(&admin, &ready, &name).await?;
            if i == 1 {
                let node = f
                    .wait_connect(&format!("postgresql://postgres@127.0.0.1:{port}/postgres"), &name)
                    .await?;
                node.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_rendezvous").await.map_err(|e| {
                    format!("CREATE EXTENSION pg_rendezvous failed ({e}): install it first (scripts/install.sh does)")
                })?;
            }
        }
        // Both nodes report their states; the primary's replication is synchronous once the
        // monitor has the first one switch from `wait_primary` to `primary`.
        f.wait(
            &admin,
            "SELECT count(*) = 2 FROM pgautofailover.node WHERE reportedstate IN ('primary', 'secondary')
                                                          AND reportedstate = goalstate",
            "the formation",
        )
        .await?;
        Ok(f)
    }

    fn monitor_url(&self, user: &str) -> String {
        format!("postgresql://{user}@127.0.0.1:{}/pg_auto_failover", self.monitor_port)
    }

    /// `pg_autoctl ARGS --pgdata DIR/NAME … --run` as the PostgreSQL OS user, in a process
    /// group of its own, logging to `DIR/NAME.log`.
    fn autoctl(&self, name: &str, args: &[&str]) -> Result<Child, String> {
        use std::os::unix::process::CommandExt;
        let bin = cluster::bindir()?;
        let log_file = self.dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_file).map_err(|e| format!("{}: {e}", log_file.display()))?;
        let mut c = cluster::as_pg("/usr/bin/pg_autoctl");
        c.args(args)
            .arg("--pgdata")
            .arg(self.dir.join(name))
            .arg("--pgctl")
            .arg(bin.join("pg_ctl"))
            .args(["--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--run"])
            .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()))
            .env("XDG_CONFIG_HOME", self.dir.join("config"))
            .env("XDG_DATA_HOME", self.dir.join("data"))
            .env("XDG_RUNTIME_DIR", self.dir.join("run"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .process_group(0);
        c.spawn().map_err(|e| format!("pg_autoctl: {e}"))
    }

    /// Connects to `url` once it answers, or fails with `what`'s log.
    async fn wait_connect(&self, url: &str, what: &str) -> Result<tokio_postgres::Client, String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match connect(url).await {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{what} did not start ({e}); its log:\n{}", self.log(what)))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits until `query` is true, or fails with `what`'s log.
    async fn wait(&self, admin: &tokio_postgres::Client, query: &str, what: &str) -> Result<(), String> {
        wait_for(admin, query).await.map_err(|e| format!("{e}; log of {what}:\n{}", self.log(what)))
    }

    fn log(&self, name: &str) -> String {
        cluster::tail(&self.dir.join(format!("{name}.log")))
    }

    /// SIGKILL to the primary's process group: its keeper and its PostgreSQL.
    async fn kill_primary(&mut self) -> Result<(), String> {
        let admin = connect(&self.monitor_url("postgres")).await?;
        let primary: String = admin
            .query_one("SELECT nodename FROM pgautofailover.node WHERE reportedstate = 'primary'", &[])
            .await
            .map_err(|e| db_error("which node is primary", e))?
            .get(0);
        let (_, _, child) =
            self.nodes.iter_mut().find(|(name, _, _)| *name == primary).ok_or("no such node")?;
        kill_group(child);
        Ok(())
    }
}

/// SIGKILL to the process group a child leads (we made it one), then reaps the child.
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) of the process group led by our own child, which has not been reaped.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
}

impl Drop for Formation {
    fn drop(&mut self) {
        for (_, _, child) in &mut self.nodes {
            kill_group(child);
        }
        if let Some(child) = &mut self.monitor {
            kill_group(child);
        }
        kill_left_in(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGKILL to every process still working in `dir`. A PostgreSQL server's children each lead
/// a process group of their own (the postmaster signals them that way), so killing a keeper's
/// group takes its postmaster but not them; most exit when their postmaster is gone, but the
/// monitor's health-check worker does not (and keeps its logger alive). They all run with
/// their data directory, under `dir`, as working directory.
fn kill_left_in(dir: &Path) {
    for _ in 0..20 {
        let mut found = false;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let cwd = std::fs::read_link(entry.path().join("cwd"));
            if cwd.is_ok_and(|cwd| cwd.starts_with(dir)) {
                // SAFETY: kill(2) of a process working in our own formation's directory.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                found = true;
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A driver error with the server's message and SQLSTATE, as the client describes it
/// (tokio-postgres's own text is only "db error").
fn db_error(what: &str, e: tokio_postgres::Error) -> String {
    format!("{what}: {}", rendezvous_client::Error::from(e))
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
    rendezvous_client::connect(url).await.map_err(|e| format!("{url}: {e}"))
}

/// Polls `query` (one boolean) until it is true, for up to 60 s.
async fn wait_for(client: &tokio_postgres::Client, query: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let row = client.query_one(query, &[]).await.map_err(|e| db_error(query, e))?;
        if row.get::<_, bool>(0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("still false after 60 s: {query}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long a failover took, as the fleet saw it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Failover {
    /// Primary killed → the multi-host URL gave a read-write connection.
    pub read_write: Option<Duration>,
    /// Primary killed → a leader in a term of the new primary's timeline.
    pub leader: Option<Duration>,
}

/// Watches the failover that started at `killed`: polls each of the pair's `nodes` (one URL
/// each) until one takes writes on a timeline after the first (the promoted one: an old
/// primary left up and writable is still on the first), then until `group` has a leader there
/// whose epoch belongs to that timeline (at least `(timeline − 1) << 32`). Gives up after
/// `limit`.
pub async fn watch_failover(nodes: Vec<String>, group: String, killed: Instant, limit: Duration) -> Failover {
    let mut seen = Failover::default();
    while killed.elapsed() < limit {
        for node in &nodes {
            let Ok(client) = connect(node).await else { continue };
            // The node's timeline as the report's choice of node reads it (fleet/controller.rs).
            let Ok(row) = client.query_one(crate::sql::FLEET_NODE_TIMELINE, &[]).await else { continue };
            let (writable, timeline): (bool, Option<i32>) = (row.get(0), row.get(1));
            let floor = (i64::from(timeline.unwrap_or(1)) - 1) << 32;
            if !writable || floor == 0 {
                continue;
            }
            if seen.read_write.is_none() {
                seen.read_write = Some(killed.elapsed());
            }
            let leader = rendezvous_client::leader::leader(&client, &group).await;
            if leader.is_ok_and(|l| l.leader.is_some() && l.epoch >= floor) {
                seen.leader = Some(killed.elapsed());
                return seen;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}
