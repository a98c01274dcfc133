//! An overloaded database, for `rendezvous fleet --overload`: its server's CPU capped for a
//! while, and CPU hogs beside the hosts. A slow database is not a gone one: the hosts must bend
//! (later, slower) and not break (no exits, no reconnect storm, nothing lost or run twice), and
//! catch up once the cap is lifted.
//!
//! The cap works wherever the server is ours to signal, root or not, without a cgroup
//! hierarchy: every 100 ms the server's processes run for 5 ms and are stopped (`SIGSTOP`) for
//! the other 95, as CFS bandwidth control throttles a cgroup: on this 2-core machine at most a
//! tenth of a core, as `cpu.max` `10000 100000` would allow. The kernel goes on acknowledging
//! TCP, so the hosts see a slow server, never a dead path. The server's processes are its
//! process group (`pg_ctl` starts the postmaster as a session leader, and every backend is its
//! child), signalled as one with `killpg`: no pid is looked up, so none can have been reused
//! by another process meanwhile; a postmaster that leads no group of its own is signalled with
//! its children, as /proc lists them. The overload's hogs are busy threads of this process,
//! so they end with it; [`Hogs`] (`fleet --hogs`) are processes of their own, as an outside
//! program's load would be. The cap lifts itself when its time is up, and when it is lifted or dropped every
//! server process is continued (a controller killed with `SIGKILL` leaves the server stopped:
//! `kill -CONT -<postmaster pid>` continues it).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Of every period, how long the server runs; it is stopped for the rest.
const RUN_FOR: Duration = Duration::from_millis(5);
const PERIOD: Duration = Duration::from_millis(100);

/// The server's processes, as they are signalled.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// The postmaster's process group (the postmaster leads it).
    Group(libc::pid_t),
    /// The postmaster and its children, from /proc.
    Children(u32),
}

impl Server {
    fn of(postmaster: u32) -> Server {
        // SAFETY: getpgid(2) has no preconditions; -1 (no such process) is not the pid.
        let group = unsafe { libc::getpgid(postmaster as libc::pid_t) };
        if group == postmaster as libc::pid_t {
            Server::Group(group)
        } else {
            Server::Children(postmaster)
        }
    }

    fn signal(self, signal: libc::c_int) {
        match self {
            // SAFETY: killpg(2) on the group the postmaster leads: the server's processes only.
            Server::Group(group) => unsafe {
                libc::killpg(group, signal);
            },
            Server::Children(postmaster) => {
                for pid in children_and_self(postmaster) {
                    // SAFETY: kill(2) with a pid /proc listed as the postmaster or its child
                    // just now (a pid reused since would be another child of the postmaster).
                    unsafe { libc::kill(pid as libc::pid_t, signal) };
                }
            }
        }
    }
}

/// A capped server and the hogs beside it; lifted when its time is up, or when lifted or
/// dropped before.
pub struct Overload {
    server: Server,
    lifted: Arc<AtomicBool>,
    /// The duty cycle; returns when it continued the server for good.
    cycler: Option<JoinHandle<SystemTime>>,
    hogs: Vec<JoinHandle<()>>,
}

impl Overload {
    /// Caps the server whose postmaster is `postmaster` for `time` (or until lifted), with
    /// `hogs` busy threads beside it.
    pub fn start(postmaster: u32, hogs: usize, time: Duration) -> Result<Overload, String> {
        if children_and_self(postmaster).is_empty() {
            return Err(format!("no server process {postmaster} to cap"));
        }
        let server = Server::of(postmaster);
        let lifted = Arc::new(AtomicBool::new(false));
        let cycler = {
            let lifted = lifted.clone();
            let until = Instant::now() + time;
            std::thread::Builder::new()
                .name("overload".into())
                .spawn(move || {
                    while !lifted.load(Ordering::Relaxed) && Instant::now() < until {
                        server.signal(libc::SIGCONT);
                        std::thread::sleep(RUN_FOR);
                        if lifted.load(Ordering::Relaxed) {
                            break;
                        }
                        server.signal(libc::SIGSTOP);
                        std::thread::sleep(PERIOD - RUN_FOR);
                    }
                    server.signal(libc::SIGCONT);
                    lifted.store(true, Ordering::Relaxed); // the hogs stop too
                    SystemTime::now()
                })
                .map_err(|e| format!("cannot start the overload: {e}"))?
        };
        let mut overload =
            Overload { server, lifted: lifted.clone(), cycler: Some(cycler), hogs: Vec::new() };
        for _ in 0..hogs {
            let lifted = lifted.clone();
            let hog = std::thread::Builder::new()
                .name("cpu hog".into())
                .spawn(move || {
                    let mut spin: u64 = 0;
                    while !lifted.load(Ordering::Relaxed) {
                        for _ in 0..100_000 {
                            spin = std::hint::black_box(
                                spin.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1),
                            );
                        }
                    }
                })
                .map_err(|e| format!("cannot start a CPU hog: {e}"))?;
            overload.hogs.push(hog);
        }
        Ok(overload)
    }

    /// True once the cap has lifted itself (its time is up).
    pub fn is_over(&self) -> bool {
        self.lifted.load(Ordering::Relaxed)
    }

    /// Lifts the cap (every server process continues) and stops the hogs; returns when the
    /// server was continued for good.
    pub fn lift(mut self) -> SystemTime {
        self.stop()
    }

    fn stop(&mut self) -> SystemTime {
        self.lifted.store(true, Ordering::Relaxed);
        let lifted = self.cycler.take().and_then(|c| c.join().ok()).unwrap_or_else(SystemTime::now);
        // Whatever the cycler did last, nothing stays stopped.
        self.server.signal(libc::SIGCONT);
        for hog in self.hogs.drain(..) {
            let _ = hog.join();
        }
        lifted
    }
}

impl Drop for Overload {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU hogs as an outside program would be: busy processes, each in a session of its own, so
/// the kernel's autogroup scheduling (on by default) weighs each like another program's
/// session and not like one more thread of the fleet's. Killed when dropped.
pub struct Hogs(Vec<std::process::Child>);

impl Hogs {
    /// Starts `count` of them.
    pub fn start(count: usize) -> Result<Hogs, String> {
        use std::os::unix::process::CommandExt;
        let mut hogs = Hogs(Vec::with_capacity(count));
        for _ in 0..count {
            let mut busy = std::process::Command::new("/bin/sh");
            busy.args(["-c", "while :; do :; done"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            // SAFETY: setsid(2) is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                busy.pre_exec(|| {
                    if libc::setsid() == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            hogs.0.push(busy.spawn().map_err(|e| format!("cannot start a CPU hog: {e}"))?);
        }
        Ok(hogs)
    }

    /// How many run.
    pub fn count(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// The postmaster (if it runs) and its children, from /proc.
fn children_and_self(postmaster: u32) -> Vec<u32> {
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
    use std::process::Command;

    #[test]
    fn a_process_is_found_as_its_parents_child() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let pids = children_and_self(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(pids.contains(&std::process::id()) && pids.contains(&child.id()), "{pids:?}");
    }

    /// A process group under the cap is stopped most of the time, and never once lifted.
    #[test]
    fn a_capped_group_is_stopped_most_of_the_time_and_continued_at_the_end() {
        use std::os::unix::process::CommandExt;
        // A group leader of its own (as pg_ctl makes the postmaster), busy.
        let mut leader =
            Command::new("sh").args(["-c", "while :; do :; done"]).process_group(0).spawn().unwrap();
        let pid = leader.id();
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next().map(str::to_owned))
        };
        let stopped_share = || {
            let stopped = (0..100)
                .filter(|_| {
                    std::thread::sleep(Duration::from_millis(5));
                    state().as_deref() == Some("T")
                })
                .count();
            stopped as f64 / 100.0
        };
        let cap = Overload::start(pid, 0, Duration::from_secs(30)).unwrap();
        let capped = stopped_share();
        let lifted = cap.lift();
        let after = stopped_share();
        let _ = leader.kill();
        let _ = leader.wait();
        assert!(lifted <= SystemTime::now());
        assert!(capped > 0.5, "stopped {:.0} % of the time under the cap", capped * 100.0);
        assert_eq!(after, 0.0, "stopped {:.0} % of the time once lifted", after * 100.0);
    }
}
