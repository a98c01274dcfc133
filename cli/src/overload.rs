//! An overloaded database, for `rendezvous fleet --overload`: its server's CPU capped for a
//! while, and CPU hogs beside the hosts. A slow database is not a gone one: the hosts must bend
//! (later, slower) and not break (no exits, no reconnect storm, nothing lost or run twice), and
//! catch up once the cap is lifted.
//!
//! The cap works wherever the server is ours to signal, root or not, without a cgroup
//! hierarchy: every 100 ms the server's processes (the postmaster and its children, looked up
//! afresh each time, so new backends are caught) run for 5 ms and are stopped (`SIGSTOP`) for
//! the other 95, which is what CFS bandwidth control does to a cgroup whose `cpu.max` is
//! `5000 100000`: at most a tenth of a core on this 2-core machine. The kernel goes on
//! acknowledging TCP, so the hosts see a slow server, never a dead path. Lifting the cap (or
//! dropping it, however the run ends) continues every process and stops the hogs.
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Of every period, how long the server runs; it is stopped for the rest.
const RUN_FOR: Duration = Duration::from_millis(5);
const PERIOD: Duration = Duration::from_millis(100);

/// A capped server and the hogs beside it; lifted when dropped.
pub struct Overload {
    postmaster: u32,
    lifted: Arc<AtomicBool>,
    cycler: Option<JoinHandle<()>>,
    hogs: Vec<Child>,
}

impl Overload {
    /// Caps the server whose postmaster is `postmaster`, and starts `hogs` busy processes.
    pub fn start(postmaster: u32, hogs: usize) -> Result<Overload, String> {
        if server_pids(postmaster).is_empty() {
            return Err(format!("no server process {postmaster} to cap"));
        }
        let lifted = Arc::new(AtomicBool::new(false));
        let cycler = {
            let lifted = lifted.clone();
            std::thread::Builder::new()
                .name("overload".into())
                .spawn(move || {
                    while !lifted.load(Ordering::Relaxed) {
                        signal_all(postmaster, libc::SIGCONT);
                        std::thread::sleep(RUN_FOR);
                        if lifted.load(Ordering::Relaxed) {
                            break;
                        }
                        signal_all(postmaster, libc::SIGSTOP);
                        std::thread::sleep(PERIOD - RUN_FOR);
                    }
                    signal_all(postmaster, libc::SIGCONT);
                })
                .map_err(|e| format!("cannot start the overload: {e}"))?
        };
        let mut overload = Overload { postmaster, lifted, cycler: Some(cycler), hogs: Vec::new() };
        for _ in 0..hogs {
            let hog = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a CPU hog: {e}"))?;
            overload.hogs.push(hog);
        }
        Ok(overload)
    }

    /// Lifts the cap (every server process continues) and stops the hogs.
    pub fn lift(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.lifted.store(true, Ordering::Relaxed);
        if let Some(cycler) = self.cycler.take() {
            let _ = cycler.join();
        }
        // Whatever the cycler did last, nothing stays stopped.
        signal_all(self.postmaster, libc::SIGCONT);
        for mut hog in self.hogs.drain(..) {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

impl Drop for Overload {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `signal` to the postmaster and each of its children.
fn signal_all(postmaster: u32, signal: libc::c_int) {
    for pid in server_pids(postmaster) {
        // SAFETY: kill(2) with a pid read from /proc just now: the postmaster or its child,
        // a server this run started (a pid reused meanwhile would be another child of the
        // postmaster, or gone).
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }
}

/// The postmaster (if it runs) and its children, from /proc.
fn server_pids(postmaster: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == postmaster || parent(pid) == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

/// A process's parent pid (the field after the parenthesised command name in /proc/<pid>/stat).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_found_as_its_parents_child() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let pids = server_pids(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(pids.contains(&std::process::id()) && pids.contains(&child.id()), "{pids:?}");
    }
}
