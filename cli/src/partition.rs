//! A silent partition of one process: every packet it sends is dropped, without a reset, so
//! its connections go quiet and new ones never complete, while the server sees nothing (no
//! FIN, no RST: its sessions live on). For `rendezvous fleet --chaos`.
//!
//! Its open TCP connections are cut by `iptables` rules on their port pairs (both ways); new
//! ones by moving the process into a cgroup (v2) of its own whose output a rule drops (a
//! socket belongs to the cgroup it was made in, so the cgroup rule alone would leave the open
//! connections up). A rule names both ends' ports, never the local port alone: the kernel
//! gives the same local port to another process's connection to another server, and a rule on
//! that port alone would silently cut it too (a test beside a fleet's chaos waited 127 s for
//! a connection whose SYN such a rule dropped). Healing removes the rules and moves the
//! process back, and its connections go on where they stopped. Needs root, iptables and a
//! writable cgroup2 hierarchy.
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
    /// `(local, remote)` ports of the connections cut.
    ports: Vec<(u16, u16)>,
    healed: bool,
}

fn iptables(args: &[&str]) -> Result<(), String> {
    // -w: wait for the rule set's lock rather than fail beside another partition's change.
    let status = std::process::Command::new("iptables")
        .arg("-w")
        .args(args)
        .status()
        .map_err(|e| format!("iptables: {e}"))?;
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

/// A connection's rules: drop what the connection between these local and remote ports sends
/// and receives.
fn port_rules(action: &str, (local, remote): (u16, u16)) -> Result<(), String> {
    let (local, remote) = (local.to_string(), remote.to_string());
    iptables(&[action, "OUTPUT", "-p", "tcp", "--sport", &local, "--dport", &remote, "-j", "DROP"])?;
    iptables(&[action, "INPUT", "-p", "tcp", "--sport", &remote, "--dport", &local, "-j", "DROP"])
}

/// The port of an address as `/proc/net/tcp` prints it (`0100007F:1F90`).
fn hex_port(address: &str) -> Option<u16> {
    u16::from_str_radix(address.rsplit(':').next()?, 16).ok()
}

/// `(local, remote)` ports of process `pid`'s TCP sockets (its fds' socket inodes, looked up
/// in its network namespace's socket tables).
fn tcp_ports(pid: u32) -> Vec<(u16, u16)> {
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
            let (Some(local), Some(remote), Some(inode)) = (f.get(1), f.get(2), f.get(9)) else { continue };
            if inodes.contains(*inode) {
                if let (Some(local), Some(remote)) = (hex_port(local), hex_port(remote)) {
                    ports.push((local, remote));
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

    /// Cuts the connections between these `(local, remote)` ports (both ways, without a
    /// reset), and nothing else: for one connection between two servers, say a standby's
    /// replication connection.
    pub fn connections(ports: &[(u16, u16)]) -> Result<Partition, String> {
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

#[cfg(test)]
mod tests {
    use super::Partition;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpSocket, TcpStream};

    /// A connection from `local_port` to `to` (the port shared: SO_REUSEADDR on each socket).
    async fn connect_from(local_port: u16, to: &TcpListener) -> (TcpStream, TcpStream) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(([127, 0, 0, 1], local_port).into()).unwrap();
        let client = socket.connect(to.local_addr().unwrap()).await.unwrap();
        (client, to.accept().await.unwrap().0)
    }

    /// Whether one byte written on `from` reaches `to` within `wait`.
    async fn passes(from: &mut TcpStream, to: &mut TcpStream, wait: Duration) -> bool {
        from.write_all(b"x").await.unwrap();
        let mut byte = [0u8];
        tokio::time::timeout(wait, to.read_exact(&mut byte)).await.is_ok()
    }

    /// A cut silences its connection and leaves alone another one that has the same local port
    /// but another server (the kernel hands out such ports to unrelated processes).
    #[tokio::test]
    async fn a_cut_silences_its_connection_and_not_its_local_ports_other_connections() {
        assert!(
            super::available(),
            "partitions need root, iptables and cgroup2 (the test machines have them)"
        );
        let (a, b) = (
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
        );
        let first = TcpSocket::new_v4().unwrap();
        first.set_reuseaddr(true).unwrap();
        first.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let port = first.local_addr().unwrap().port();
        drop(first);
        let (mut to_a, mut at_a) = connect_from(port, &a).await;
        let (mut to_b, mut at_b) = connect_from(port, &b).await;
        let cut = Partition::connections(&[(port, a.local_addr().unwrap().port())]).unwrap();
        let wait = Duration::from_secs(2);
        assert!(
            passes(&mut to_b, &mut at_b, wait).await,
            "the other connection from port {port} was cut too"
        );
        assert!(passes(&mut at_b, &mut to_b, wait).await, "the other connection's replies were cut too");
        assert!(
            !passes(&mut to_a, &mut at_a, Duration::from_millis(500)).await,
            "the cut connection carried a byte"
        );
        assert!(
            !passes(&mut at_a, &mut to_a, Duration::from_millis(500)).await,
            "the cut connection's reply came"
        );
        cut.heal();
        // Healed, the connection goes on where it stopped: the held bytes are sent again.
        let mut byte = [0u8];
        tokio::time::timeout(Duration::from_secs(10), at_a.read_exact(&mut byte))
            .await
            .expect("healed")
            .unwrap();
    }
}
