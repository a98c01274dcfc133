//! A throwaway PostgreSQL cluster: a temp dir, its own port, its unix socket in that dir, run
//! as the `postgres` OS user when we are root (PostgreSQL refuses root), stopped on drop.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program` run as the PostgreSQL OS user when we are root.
pub fn as_pg(program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A throwaway cluster; stopped and removed on drop.
pub struct Cluster {
    dir: PathBuf,
    /// Its port.
    pub port: u16,
}

impl Cluster {
    /// initdb + start, with `CREATE EXTENSION pg_rendezvous` in database `postgres`.
    pub async fn start() -> Result<Cluster, String> {
        let dir = std::env::temp_dir().join(format!("rendezvous-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if is_root() {
            let _ = Command::new("chown").args(["postgres:", dir.to_str().unwrap()]).status();
        }
        let cluster = Cluster { dir, port: free_port() };
        let ok = as_pg(&format!("{PG_BIN}/initdb"))
            .args(["-D", &cluster.data(), "--auth=trust", "--username=postgres", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("initdb: {e}"))?;
        if !ok.success() {
            return Err("initdb failed".into());
        }
        cluster.pg_ctl("start")?;
        let (client, conn) = tokio_postgres::connect(&cluster.url(), tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        client.batch_execute("CREATE EXTENSION pg_rendezvous").await.map_err(|e| {
            format!("CREATE EXTENSION pg_rendezvous failed ({e}): install it first (scripts/demo.sh does)")
        })?;
        Ok(cluster)
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn pg_ctl(&self, action: &str) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let ok = as_pg(&format!("{PG_BIN}/pg_ctl"))
            .args([
                "-D",
                &self.data(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &opts,
                "-w",
                "-s",
                "-m",
                "fast",
                action,
            ])
            .status()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if ok.success() {
            Ok(())
        } else {
            Err(format!("pg_ctl {action} failed (see {})", log.display()))
        }
    }

    /// Restarts the server (every session ends, session locks with them).
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl("restart")
    }

    /// The URL of database `postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Its directory (for helpers' files).
    pub fn dir(&self) -> &Path {
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
