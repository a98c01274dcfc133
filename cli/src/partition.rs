//! A silent partition of one process: every packet it sends is dropped, without a reset, so
//! its connections go quiet and new ones never complete, while the server sees nothing (no
//! FIN, no RST: its sessions live on). For `rendezvous fleet --chaos`.
//!
//! Its open TCP connections are cut by `iptables` rules on their local ports (both ways); new
//! ones by moving the process into a cgroup (v2) of its own whose output a rule drops (a
//! socket belongs to the cgroup it was made in, so the cgroup rule alone would leave the open
//! connections up). Healing removes the rules and moves the process back, and its connections
//! go on where they stopped. Needs root, iptables and a writable cgroup2 hierarchy.
use std::path::PathBuf;

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` on a pure v2 system,
/// `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// True when partitions can be made here.
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && cgroup2_root().is_some_and(|r| r.join("cgroup.procs").exists())
        && std::process::Command::new("iptables")
            .args(["-L", "OUTPUT", "-n"])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// A process cut off; healed when dropped.
#[derive(Debug)]
pub struct Partition {
    /// The cgroup2 root and the group's name, when new connections are cut too.
    group: Option<(PathBuf, String)>,
    pid: u32,
    /// The local ports of the connections it had when cut.
    ports: Vec<u16>,
    healed: bool,
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let status =
        std::process::Command::new("iptables").args(args).status().map_err(|e| format!("iptables: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("iptables {} failed ({status})", args.join(" ")))
    }
}

/// The cgroup's rule: drops what sockets made in it send.
fn rule(action: &str, name: &str) -> Result<(), String> {
    iptables(&[action, "OUTPUT", "-m", "cgroup", "--path", name, "-j", "DROP"])
}

/// A port's rules: drop what a connection with this local port sends and receives.
fn port_rules(action: &str, port: u16) -> Result<(), String> {
    let port = port.to_string();
    iptables(&[action, "OUTPUT", "-p", "tcp", "--sport", &port, "-j", "DROP"])?;
    iptables(&[action, "INPUT", "-p", "tcp", "--dport", &port, "-j", "DROP"])
}

/// The local ports of process `pid`'s TCP sockets (its fds' socket inodes, looked up in its
/// network namespace's socket tables).
fn tcp_ports(pid: u32) -> Vec<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else { continue };
            if inodes.contains(*inode) {
                if let Some(port) = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                    ports.push(port);
                }
            }
        }
    }
    ports
}

impl Partition {
    /// Cuts process `pid` off; `name` names its cgroup (unique per run and host).
    pub fn cut(pid: u32, name: &str) -> Result<Partition, String> {
        let root = cgroup2_root().ok_or("no cgroup2 hierarchy")?;
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Err(e) = rule("-I", name) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        // From here, dropping it undoes what was done.
        let mut p = Partition { group: Some((root, name.to_owned())), pid, ports: Vec::new(), healed: false };
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).map_err(|e| format!("move {pid}: {e}"))?;
        for port in tcp_ports(pid) {
            port_rules("-I", port)?;
            p.ports.push(port);
        }
        Ok(p)
    }

    /// Cuts the connections with these local ports (both ways, without a reset), and nothing
    /// else: for one connection between two servers, say a standby's replication connection.
    pub fn connections(ports: &[u16]) -> Result<Partition, String> {
        let mut p = Partition { group: None, pid: 0, ports: Vec::new(), healed: false };
        for &port in ports {
            port_rules("-I", port)?;
            p.ports.push(port);
        }
        Ok(p)
    }

    /// Ends the partition: the process's packets flow again.
    pub fn heal(mut self) {
        self.undo();
    }

    fn undo(&mut self) {
        if self.healed {
            return;
        }
        self.healed = true;
        for port in &self.ports {
            let _ = port_rules("-D", *port);
        }
        if let Some((root, name)) = &self.group {
            let _ = rule("-D", name);
            // Back to the root group (a process that ended meanwhile is simply gone), then away.
            let _ = std::fs::write(root.join("cgroup.procs"), self.pid.to_string());
            let _ = std::fs::remove_dir(root.join(name));
        }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.undo();
    }
}
