//! The project's one throwaway PostgreSQL cluster: a temp dir, its own port, its unix socket
//! in that dir, run as the `postgres` OS user when we are root (PostgreSQL refuses root),
//! stopped and removed on drop. `rendezvous fleet`, the integration tests and, through
//! `rendezvous cluster run`, the scripts all use it.
//!
//! The PostgreSQL binaries come from `pg_config --bindir`, with `pg_config` taken from the
//! environment variable `PG_CONFIG` (default [`DEFAULT_PG_CONFIG`]).
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The `pg_config` used when `PG_CONFIG` is not set.
pub const DEFAULT_PG_CONFIG: &str = "/usr/lib/postgresql/15/bin/pg_config";

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The `pg_config` to ask: `$PG_CONFIG`, else [`DEFAULT_PG_CONFIG`].
pub fn pg_config() -> PathBuf {
    std::env::var_os("PG_CONFIG")
        .filter(|v| !v.is_empty())
        .map_or_else(|| DEFAULT_PG_CONFIG.into(), PathBuf::from)
}

/// PostgreSQL's binary directory, from `pg_config --bindir` (asked once).
pub fn bindir() -> Result<PathBuf, String> {
    static BINDIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINDIR
        .get_or_init(|| {
            let pg_config = pg_config();
            let fix =
                "set PG_CONFIG to your PostgreSQL's pg_config, or install PostgreSQL (scripts/setup.sh does)";
            let out = Command::new(&pg_config)
                .arg("--bindir")
                .output()
                .map_err(|e| format!("cannot run {} ({e}): {fix}", pg_config.display()))?;
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !out.status.success() || dir.is_empty() {
                return Err(format!("{} --bindir failed ({}): {fix}", pg_config.display(), out.status));
            }
            Ok(PathBuf::from(dir))
        })
        .clone()
}

/// `program` run as the PostgreSQL OS user when we are root.
pub fn as_pg(program: impl AsRef<Path>) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program.as_ref());
        c
    } else {
        Command::new(program.as_ref())
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// How to set a cluster up.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Server settings (`name`, `value`), written into `postgresql.conf` after the defaults
    /// (`listen_addresses`, `port`, `unix_socket_directories`, `max_connections = 300`), so
    /// they override them.
    pub settings: Vec<(String, String)>,
    /// `CREATE EXTENSION pg_rendezvous` in database `postgres` once it runs.
    pub extension: bool,
}

impl Default for ClusterOptions {
    /// No extra settings; the extension in database `postgres`.
    fn default() -> Self {
        ClusterOptions { settings: Vec::new(), extension: true }
    }
}

/// Parses a `name=value` server setting (the value may be empty, the name may not).
pub fn parse_setting(s: &str) -> Result<(String, String), String> {
    let (name, value) =
        s.split_once('=').ok_or_else(|| format!("{s:?} is not name=value (e.g. fsync=off)"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
        return Err(format!("{name:?} is not a setting name (e.g. fsync=off)"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// A throwaway cluster; stopped and removed on drop.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    /// Its port.
    pub port: u16,
}

impl Cluster {
    /// The cluster `rendezvous fleet` and the integration tests use: `fsync = off`, with
    /// `CREATE EXTENSION pg_rendezvous` in database `postgres`.
    pub async fn start() -> Result<Cluster, String> {
        let options =
            ClusterOptions { settings: vec![("fsync".into(), "off".into())], ..ClusterOptions::default() };
        Self::start_with(&options).await
    }

    /// initdb + start with `options`. On an error, whatever was started is stopped and removed.
    pub async fn start_with(options: &ClusterOptions) -> Result<Cluster, String> {
        let bin = bindir()?;
        let dir = make_temp_dir()?;
        // From here on, dropping `cluster` stops whatever runs in `dir` and removes it.
        let cluster = Cluster { dir, bin, port: free_port() };
        if is_root() {
            let _ = Command::new("chown").arg("postgres:").arg(&cluster.dir).status();
        }
        let initdb_log = cluster.dir.join("initdb.log");
        let log = std::fs::File::create(&initdb_log).map_err(|e| format!("{}: {e}", initdb_log.display()))?;
        let ok = cluster
            .pg_command("initdb")
            .arg("-D")
            .arg(cluster.data())
            .args(["--auth=trust", "--username=postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .status()
            .map_err(|e| format!("initdb: {e}"))?;
        if !ok.success() {
            return Err(format!("initdb failed:\n{}", tail(&initdb_log)));
        }
        let mut conf = format!(
            "\n# rendezvous cluster\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = {}\nmax_connections = 300\n",
            cluster.port,
            conf_quote(&cluster.dir.to_string_lossy()),
        );
        for (name, value) in &options.settings {
            conf.push_str(&format!("{name} = {}\n", conf_quote(value)));
        }
        cluster.append_conf(&conf)?;
        cluster.pg_ctl("start")?;
        if options.extension {
            let (client, conn) = tokio_postgres::connect(&cluster.url(), tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("cannot connect to the new cluster: {e}"))?;
            tokio::spawn(conn);
            client.batch_execute("CREATE EXTENSION pg_rendezvous").await.map_err(|e| {
                format!(
                    "CREATE EXTENSION pg_rendezvous failed ({e}): install it first (scripts/install.sh does)"
                )
            })?;
        }
        Ok(cluster)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Appends `text` to postgresql.conf (later lines win).
    fn append_conf(&self, text: &str) -> Result<(), String> {
        let conf_file = self.data().join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf_file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| format!("{}: {e}", conf_file.display()))
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A PostgreSQL program run as the PostgreSQL OS user, in a process group of its own: a
    /// Ctrl-C at the terminal reaches us, and we stop the cluster, instead of interrupting
    /// an initdb or a pg_ctl half-way.
    fn pg_command(&self, program: &str) -> Command {
        let mut c = as_pg(self.bin.join(program));
        c.process_group(0);
        c
    }

    fn pg_ctl(&self, action: &str) -> Result<(), String> {
        self.pg_ctl_mode(action, "fast")
    }

    /// `pg_ctl ACTION` with shutdown mode `mode` (fast: clean; immediate: as a crash).
    fn pg_ctl_mode(&self, action: &str, mode: &str) -> Result<(), String> {
        let ok = self
            .pg_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-s", "-m", mode, action])
            .status()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if ok.success() {
            Ok(())
        } else {
            // The directory goes with the cluster: show the log's end here.
            Err(format!("pg_ctl {action} failed; server log:\n{}", tail(&self.log())))
        }
    }

    /// Adds `settings` to postgresql.conf and, if given, replaces pg_hba.conf with `hba`, then
    /// restarts the server (for tests: TLS-only access, say). Files the settings name must be
    /// readable by the server (put them in [`dir`](Self::dir), owned by it: see
    /// [`give_to_server`](Self::give_to_server)).
    pub fn configure(&self, settings: &[(&str, &str)], hba: Option<&str>) -> Result<(), String> {
        let mut conf = String::from("\n# rendezvous cluster: configure\n");
        for (name, value) in settings {
            conf.push_str(&format!("{name} = {}\n", conf_quote(value)));
        }
        self.append_conf(&conf)?;
        if let Some(hba) = hba {
            let hba_file = self.data().join("pg_hba.conf");
            std::fs::write(&hba_file, hba).map_err(|e| format!("{}: {e}", hba_file.display()))?;
        }
        self.restart()
    }

    /// Makes `path` (a file in this cluster's directory) the server's own, readable by it
    /// alone (as PostgreSQL wants of a TLS key).
    pub fn give_to_server(&self, path: &Path) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if is_root() {
            let ok = Command::new("chown").arg("postgres:").arg(path).status().map_err(|e| e.to_string())?;
            if !ok.success() {
                return Err(format!("chown postgres: {} failed", path.display()));
            }
        }
        Ok(())
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), in a directory and on a port
    /// of its own, started and replaying. Dropping it stops and removes it.
    pub fn standby(&self) -> Result<Cluster, String> {
        let standby = Cluster { dir: make_temp_dir()?, bin: self.bin.clone(), port: free_port() };
        if is_root() {
            let _ = Command::new("chown").arg("postgres:").arg(&standby.dir).status();
        }
        let ok = standby
            .pg_command("pg_basebackup")
            .arg("-D")
            .arg(standby.data())
            .args(["-R", "-X", "stream", "-c", "fast", "-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .status()
            .map_err(|e| format!("pg_basebackup: {e}"))?;
        if !ok.success() {
            return Err("pg_basebackup failed".into());
        }
        // The copy has the primary's port and socket directory: later lines win.
        let conf = format!(
            "\n# rendezvous cluster: standby\nport = {}\nunix_socket_directories = {}\n",
            standby.port,
            conf_quote(&standby.dir.to_string_lossy()),
        );
        standby.append_conf(&conf)?;
        standby.pg_ctl("start")?;
        Ok(standby)
    }

    /// Promotes a standby to a primary (a new WAL timeline), waiting until it accepts writes.
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl("promote")
    }

    /// Stops the server as a crash would, and leaves it stopped.
    pub fn kill(&self) -> Result<(), String> {
        self.pg_ctl_mode("stop", "immediate")
    }

    /// Starts a server stopped by [`kill`](Self::kill) again (through crash recovery).
    pub fn start_again(&self) -> Result<(), String> {
        self.pg_ctl("start")
    }

    /// Restarts the server (every session ends, session locks with them).
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl("restart")
    }

    /// Stops the server as a crash would (`-m immediate`: no shutdown checkpoint, so WAL still
    /// in shared memory is lost), then starts it again through crash recovery.
    pub fn crash_restart(&self) -> Result<(), String> {
        self.pg_ctl_mode("stop", "immediate")?;
        self.pg_ctl("start")
    }

    /// The URL of database `postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's pid, from its pid file (None when it is not running).
    pub fn postmaster_pid(&self) -> Option<u32> {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }

    /// Its server log.
    pub fn server_log(&self) -> PathBuf {
        self.log()
    }

    /// Its directory (for helpers' files; removed with the cluster).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The variables a command run against this cluster gets.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("DATABASE_URL", self.url().into()),
            ("PGHOST", "127.0.0.1".into()),
            ("PGPORT", self.port.to_string().into()),
            ("PGUSER", "postgres".into()),
            ("PGDATABASE", "postgres".into()),
            ("RENDEZVOUS_CLUSTER_DIR", self.dir.clone().into()),
        ]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Only our own server: pg_ctl finds it through the pid file in our data directory.
        if self.data().join("postmaster.pid").exists() {
            let _ = self
                .pg_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "-s", "stop"])
                .stdout(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new, empty directory `rendezvous-cluster-<pid>-<random>` under the temp dir.
pub(crate) fn make_temp_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let dir =
            base.join(format!("rendezvous-cluster-{}-{:08x}", std::process::id(), rand::random::<u32>()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!("cannot create a fresh directory under {}", base.display()))
}

/// `s` as a postgresql.conf string literal.
fn conf_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// The last lines of a log file, for an error message.
pub(crate) fn tail(file: &Path) -> String {
    match std::fs::read_to_string(file) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(e) => format!("({}: {e})", file.display()),
    }
}

/// `rendezvous cluster run`: starts a cluster, runs `command` with [`Cluster::env`] added to
/// its environment, then stops and removes the cluster however the command ends. Returns the
/// command's exit status (128 + the signal's number when a signal ended it; 127 when it is not
/// found, 126 when it cannot be run, as a shell would).
///
/// SIGINT, SIGTERM, SIGHUP and SIGQUIT are caught for the whole run and passed on to the
/// command, so the cluster is removed after it ends; one that comes while the cluster starts
/// stops the run before the command is started.
pub async fn run(options: &ClusterOptions, command: &[OsString]) -> Result<i32, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let (program, args) = command.split_first().ok_or("give the command to run after --")?;
    let kinds = [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::hangup(), libc::SIGHUP),
        (SignalKind::quit(), libc::SIGQUIT),
    ];
    let (tx, mut signals) = tokio::sync::mpsc::unbounded_channel::<i32>();
    for (kind, number) in kinds {
        let mut stream = signal(kind).map_err(|e| format!("cannot catch signal {number}: {e}"))?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(number).is_err() {
                    break;
                }
            }
        });
    }
    let cluster = Cluster::start_with(options).await?;
    if let Ok(number) = signals.try_recv() {
        eprintln!(
            "rendezvous cluster run: signal {number} while the cluster started; not running the command"
        );
        return Ok(128 + number);
    }
    let spawned = tokio::process::Command::new(program).args(args).envs(cluster.env()).spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            // As a shell would: 127 for a command not found, 126 for one that cannot run.
            eprintln!("rendezvous cluster run: cannot run {}: {e}", program.to_string_lossy());
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| e.to_string())?,
            Some(number) = signals.recv() => {
                if let Some(pid) = child.id() {
                    // SAFETY: plain kill(2) of our own child, which has not been reaped yet.
                    unsafe { libc::kill(pid as libc::pid_t, number) };
                }
            }
        }
    };
    drop(cluster);
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1))
}
