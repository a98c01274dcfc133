//! `rendezvous fleet --overload`: the database's CPU capped midway (crate::overload), and what
//! the hosts did meanwhile: whether one exited, how many connections each of their pieces
//! opened (from the server's log of connections), and when the backlog was done.
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::hosts::Host;
use super::report::Report;
use super::{OVERLOAD_FOR, OVERLOAD_HOGS};
use crate::overload::Overload;

/// The throwaway server a run may overload: its postmaster's pid and its log.
pub(super) struct Server {
    pub(super) pid: u32,
    pub(super) log: PathBuf,
}

/// What the report says of an overload: how long, when it was lifted, the host processes
/// that exited from its start on, the sessions each host piece opened and ended while it was
/// capped, and how long after the lift everything due by then was done.
#[derive(Debug, Clone)]
pub struct OverloadOutcome {
    pub capped_for: Duration,
    pub lifted_at: SystemTime,
    pub host_exits: u32,
    /// Per host piece (its `application_name`, which names the host): sessions opened and
    /// sessions ended while the database was capped.
    pub pieces: BTreeMap<String, Sessions>,
    /// Every connection the server received meanwhile (the controller's included), and those
    /// of them it authorized: the rest were given up before they were (a reconnect storm on a
    /// stopped server would show there).
    pub received: u32,
    pub authorized: u32,
    /// How many hosts ran.
    pub hosts: u32,
    /// From the lift to the last completion of what was due (or admitted) by then.
    pub drained: Option<Duration>,
}

/// A piece's sessions while the database was capped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sessions {
    pub opened: u32,
    pub ended: u32,
}

/// The most sessions a host piece may open, or end, while the database is capped: a slow
/// server's connections are kept, not replaced.
pub const SESSIONS_BOUND: u32 = 2;

/// A job pool's size with the client's defaults (`WorkerOptions::max_concurrent`).
const POOL_SIZE: u32 = 16;

/// Whether `name` is a worker's job pool, which opens connections as its handlers need them,
/// up to the worker's `max_concurrent`: growing is not replacing.
fn is_pool(name: &str) -> bool {
    name.ends_with(" job")
}

impl OverloadOutcome {
    /// Bent, not broken: no host exited; no piece ended more than [`SESSIONS_BOUND`] sessions
    /// or opened more (a job pool's growth up to its size aside); no more connections given up
    /// before authorization than [`SESSIONS_BOUND`] a host; the backlog all done within 30 s of
    /// the lift.
    pub fn held(&self) -> bool {
        self.host_exits == 0
            && self.pieces.iter().all(|(name, s)| {
                s.ended <= SESSIONS_BOUND
                    && (s.opened <= SESSIONS_BOUND || (is_pool(name) && s.opened <= s.ended + POOL_SIZE))
            })
            && self.received.saturating_sub(self.authorized) <= SESSIONS_BOUND * self.hosts
            && self.drained.is_some_and(|d| d <= Duration::from_secs(30))
    }
}

/// The act's course: not yet, capped, lifted (when the server was continued).
enum Course {
    Waiting,
    Capped { cap: Overload },
    Lifted { lifted: SystemTime },
}

/// How long after the lift sessions still count: a disconnection the cap held up is logged
/// once the server runs again.
const SETTLE: Duration = Duration::from_secs(5);

pub(super) struct OverloadAct {
    pid: u32,
    log: PathBuf,
    at: SystemTime,
    capped_for: Duration,
    course: Course,
    /// The server log's length when the cap began and when it was lifted.
    log_from: u64,
    log_to: u64,
    exits_before: u32,
}

/// The report's name of a host process exiting (hosts.rs records it).
const HOST_EXIT: &str = "restart after a host process exited";

impl OverloadAct {
    /// The cap of a run whose firings end at `end` after `duration`: in its middle.
    pub(super) fn new(server: &Server, end: SystemTime, duration: Duration) -> OverloadAct {
        let capped_for = OVERLOAD_FOR.min(duration / 2);
        OverloadAct {
            pid: server.pid,
            log: server.log.clone(),
            at: end - duration + (duration - capped_for) / 2,
            capped_for,
            course: Course::Waiting,
            log_from: 0,
            log_to: 0,
            exits_before: 0,
        }
    }

    /// Caps the database when it is time (the cap lifts itself when its time is up, however
    /// long a step of the controller waits on the slow server), notes the lift, and, a moment
    /// after it, where the sessions that count end in the log.
    pub(super) fn step(&mut self, report: &mut Report) -> Result<(), String> {
        let now = SystemTime::now();
        match &self.course {
            Course::Waiting if now >= self.at => {
                self.log_from = self.log_length();
                self.exits_before = report.chaos.get(HOST_EXIT).copied().unwrap_or(0);
                let cap = Overload::start(self.pid, OVERLOAD_HOGS, self.capped_for)?;
                println!(
                    "  overload: the database's CPU capped at a tenth of a core for {} s, {OVERLOAD_HOGS} CPU hogs beside the hosts",
                    self.capped_for.as_secs()
                );
                report.record_act("database CPU capped", "CPU capped", crate::timeline::DATABASE);
                self.course = Course::Capped { cap };
            }
            Course::Capped { cap } if cap.is_over() => self.lift(report),
            Course::Lifted { lifted } if self.log_to == 0 && now >= *lifted + SETTLE => {
                self.log_to = self.log_length();
            }
            _ => {}
        }
        Ok(())
    }

    fn log_length(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    fn lift(&mut self, report: &mut Report) {
        if !matches!(self.course, Course::Capped { .. }) {
            return;
        }
        if let Course::Capped { cap } = std::mem::replace(&mut self.course, Course::Waiting) {
            let lifted = cap.lift();
            self.course = Course::Lifted { lifted };
            println!("  overload: cap lifted, hogs stopped");
            report.record_act("cap lifted", "cap lifted", crate::timeline::DATABASE);
        }
    }

    /// Once the hosts are done: the outcome (its drain is read with the report's figures).
    pub(super) fn finish(mut self, hosts: &[Host], report: &mut Report) -> Result<OverloadOutcome, String> {
        self.lift(report);
        let Course::Lifted { lifted, .. } = self.course else {
            return Err("the run ended before the database was overloaded".into());
        };
        let log_to = if self.log_to == 0 { self.log_length() } else { self.log_to };
        let (pieces, received, authorized) = sessions(&self.log, self.log_from, log_to, hosts)?;
        Ok(OverloadOutcome {
            capped_for: self.capped_for,
            lifted_at: lifted,
            host_exits: report.chaos.get(HOST_EXIT).copied().unwrap_or(0) - self.exits_before,
            pieces,
            received,
            authorized,
            hosts: hosts.len() as u32,
            drained: None,
        })
    }
}

/// From the server's log between bytes `from` and `to` (its `log_line_prefix` ends with
/// `%a: `): per `application_name` that names one of `hosts`, the sessions authorized and
/// ended; every connection received, and every one authorized.
fn sessions(
    log: &PathBuf,
    from: u64,
    to: u64,
    hosts: &[Host],
) -> Result<(BTreeMap<String, Sessions>, u32, u32), String> {
    let mut file = std::fs::File::open(log).map_err(|e| format!("{}: {e}", log.display()))?;
    file.seek(SeekFrom::Start(from)).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(to.saturating_sub(from)).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    let ids: Vec<&str> = hosts.iter().map(|h| h.plan.host_id.as_str()).collect();
    let names_a_host = |name: &str| name.split(' ').any(|word| ids.contains(&word));
    let mut pieces: BTreeMap<String, Sessions> = BTreeMap::new();
    let (mut received, mut authorized) = (0, 0);
    for line in text.lines() {
        // "<time> [<pid>] <application_name>: LOG:  <message>"
        let Some((prefix, message)) = line.split_once(": LOG:  ") else { continue };
        let name = prefix.split_once("] ").map_or("", |(_, name)| name);
        if message.starts_with("connection received:") {
            received += 1;
        } else if let Some(rest) = message.strip_prefix("connection authorized:") {
            authorized += 1;
            // The prefix's %a is not set yet here: the message names it.
            let name = rest.split_once(" application_name=").map_or("", |(_, n)| n.trim());
            if names_a_host(name) {
                pieces.entry(name.to_owned()).or_default().opened += 1;
            }
        } else if message.starts_with("disconnection:") && names_a_host(name) {
            pieces.entry(name.to_owned()).or_default().ended += 1;
        }
    }
    Ok((pieces, received, authorized))
}
