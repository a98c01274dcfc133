//! The fleet's own record of what the database acknowledged to its hosts, kept outside the
//! database: after a failover the surviving database cannot be trusted to say what it lost.
//!
//! Each host process appends one line per acknowledgement to its own file (a single
//! `write` on a file opened for appending, so a SIGKILL leaves whole lines), and the
//! controller reads every file at the end and looks each line up in the database:
//!
//! | line | written after | must still be in the database |
//! |---|---|---|
//! | `run <key> <run_id>` | `spawn_run` returned the run | the run, with that dispatch key |
//! | `completed <key> <token>` | a fenced transaction's commit (effect + completion) | the firing completed, the effect with that token |
//! | `run-completed <run_id> <token>` | a run's fenced transaction committed (effect + completion) | the run succeeded, the effect with that token |
//! | `term <epoch>` | the elector first saw itself leading in that epoch | the group's epoch at least that |
//! | `action <epoch> <id>` | a fenced leader action committed | that action, by this host in that epoch |
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::sql;
use tokio_postgres::Client;

/// One host's ledger file; appends whole lines.
#[derive(Debug)]
pub struct Ledger {
    file: Option<std::fs::File>,
}

impl Ledger {
    /// Opens `path` for appending; `None` keeps no ledger.
    pub fn open(path: Option<&Path>) -> Result<Ledger, String> {
        let file = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("ledger {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Ledger { file })
    }

    /// Records one acknowledgement (one `write`, so a killed host leaves whole lines).
    pub fn record(&self, line: std::fmt::Arguments<'_>) {
        if let Some(mut f) = self.file.as_ref() {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// What the hosts' ledgers hold.
#[derive(Debug, Default)]
pub struct Acknowledged {
    /// `(dispatch key, run id)` of every admission.
    pub runs: Vec<(String, i64)>,
    /// `(firing key, token)` of every completion.
    pub completions: Vec<(String, i64)>,
    /// `(run id, token)` of every run completed.
    pub run_completions: Vec<(i64, i64)>,
    /// `(host, epoch)` of every term won.
    pub terms: Vec<(String, i64)>,
    /// `(host, epoch, action id)` of every fenced leader action.
    pub actions: Vec<(String, i64, i64)>,
}

/// Acknowledgements the database no longer has.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// Admitted runs missing (or with another key).
    pub runs: i64,
    /// Completions missing: the firing not completed, or its effect gone.
    pub completions: i64,
    /// Run completions missing: the run not succeeded, or its effect gone.
    pub run_completions: i64,
    /// Terms whose epoch the group no longer reaches (it would be handed out again).
    pub terms: i64,
    /// Fenced leader actions missing.
    pub actions: i64,
    /// Acknowledgements looked up.
    pub checked: i64,
}

impl Lost {
    /// All of them.
    pub fn total(&self) -> i64 {
        self.runs + self.completions + self.run_completions + self.terms + self.actions
    }
}

/// The file host `host_id` writes in `dir`.
pub fn path(dir: &Path, host_id: &str) -> PathBuf {
    dir.join(format!("{host_id}.ledger"))
}

/// Reads every `*.ledger` file in `dir` (the host is the file's name).
pub fn read(dir: &Path) -> Result<Acknowledged, String> {
    let mut all = Acknowledged::default();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("ledger {}: {e}", dir.display()))?;
    for entry in entries {
        let p = entry.map_err(|e| e.to_string())?.path();
        let Some(host) = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".ledger"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        for line in text.lines() {
            let mut words = line.split(' ');
            let (kind, a, b) = (words.next(), words.next(), words.next());
            let number = |s: Option<&str>| s.and_then(|s| s.parse::<i64>().ok());
            match (kind, a, b) {
                (Some("run"), Some(key), id) if number(id).is_some() => {
                    all.runs.push((key.to_owned(), number(id).unwrap()))
                }
                (Some("completed"), Some(key), t) if number(t).is_some() => {
                    all.completions.push((key.to_owned(), number(t).unwrap()))
                }
                (Some("run-completed"), id, t) if number(id).is_some() && number(t).is_some() => {
                    all.run_completions.push((number(id).unwrap(), number(t).unwrap()))
                }
                (Some("term"), e, None) if number(e).is_some() => {
                    all.terms.push((host.to_owned(), number(e).unwrap()))
                }
                (Some("action"), e, id) if number(e).is_some() && number(id).is_some() => {
                    all.actions.push((host.to_owned(), number(e).unwrap(), number(id).unwrap()))
                }
                _ => return Err(format!("{}: unreadable line {line:?}", p.display())),
            }
        }
    }
    Ok(all)
}

/// What the ledgers say happened twice, whatever the database kept: after a failover that lost
/// commits, the promoted database holds one of two runs of a key, or one completion of a
/// firing run twice, and counting in it finds nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Twice {
    /// Firing keys completed (effect and completion acknowledged) under two tokens or more.
    pub firings: i64,
    /// Dispatch keys admitted as two runs or more.
    pub keys_with_two_runs: i64,
    /// Dispatch keys whose runs were completed twice or more (one run twice, or two runs).
    pub runs: i64,
}

/// Counts [`Twice`] in the ledgers.
pub fn twice(acked: &Acknowledged) -> Twice {
    use std::collections::{BTreeMap, BTreeSet};
    let mut tokens = BTreeMap::<&str, BTreeSet<i64>>::new();
    for (key, token) in &acked.completions {
        tokens.entry(key).or_default().insert(*token);
    }
    let mut runs_of = BTreeMap::<&str, BTreeSet<i64>>::new();
    let mut key_of = BTreeMap::<i64, &str>::new();
    for (key, run_id) in &acked.runs {
        runs_of.entry(key).or_default().insert(*run_id);
        key_of.insert(*run_id, key);
    }
    let mut completions_of = BTreeMap::<&str, BTreeSet<(i64, i64)>>::new();
    for (run_id, token) in &acked.run_completions {
        if let Some(key) = key_of.get(run_id) {
            completions_of.entry(key).or_default().insert((*run_id, *token));
        }
    }
    let more_than_one = |n: usize| n > 1;
    Twice {
        firings: tokens.values().filter(|t| more_than_one(t.len())).count() as i64,
        keys_with_two_runs: runs_of.values().filter(|r| more_than_one(r.len())).count() as i64,
        runs: completions_of.values().filter(|c| more_than_one(c.len())).count() as i64,
    }
}

/// Epochs two hosts' ledgers both say they led in.
pub fn epochs_led_twice(acked: &Acknowledged) -> i64 {
    let mut by_epoch = std::collections::BTreeMap::<i64, std::collections::BTreeSet<&str>>::new();
    for (host, epoch) in &acked.terms {
        by_epoch.entry(*epoch).or_default().insert(host);
    }
    by_epoch.values().filter(|hosts| hosts.len() > 1).count() as i64
}

/// Looks every acknowledgement up in the database (`group` is the fleet's leader group).
pub async fn lost(admin: &Client, acked: &Acknowledged, group: &str) -> Result<Lost, String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    let (keys, ids): (Vec<&str>, Vec<i64>) = acked.runs.iter().map(|(k, i)| (k.as_str(), *i)).unzip();
    let runs: i64 = admin.query_one(sql::LEDGER_RUNS_LOST, &[&keys, &ids]).await.map_err(e)?.get(0);
    let (keys, tokens): (Vec<&str>, Vec<i64>) =
        acked.completions.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
    let completions: i64 =
        admin.query_one(sql::LEDGER_COMPLETIONS_LOST, &[&keys, &tokens]).await.map_err(e)?.get(0);
    let (run_ids, tokens): (Vec<i64>, Vec<i64>) = acked.run_completions.iter().copied().unzip();
    let run_completions: i64 =
        admin.query_one(sql::LEDGER_RUN_COMPLETIONS_LOST, &[&run_ids, &tokens]).await.map_err(e)?.get(0);
    let epochs: Vec<i64> = acked.terms.iter().map(|(_, epoch)| *epoch).collect();
    let terms: i64 = admin.query_one(sql::LEDGER_TERMS_LOST, &[&epochs, &group]).await.map_err(e)?.get(0);
    let hosts: Vec<&str> = acked.actions.iter().map(|(h, _, _)| h.as_str()).collect();
    let epochs: Vec<i64> = acked.actions.iter().map(|(_, ep, _)| *ep).collect();
    let ids: Vec<i64> = acked.actions.iter().map(|(_, _, id)| *id).collect();
    let actions: i64 =
        admin.query_one(sql::LEDGER_ACTIONS_LOST, &[&hosts, &epochs, &ids]).await.map_err(e)?.get(0);
    let checked = (acked.runs.len()
        + acked.completions.len()
        + acked.run_completions.len()
        + acked.terms.len()
        + acked.actions.len()) as i64;
    Ok(Lost { runs, completions, run_completions, terms, actions, checked })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_are_lines_read() {
        let dir = std::env::temp_dir().join(format!("rendezvous-ledger-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for host in ["host-0", "host-1"] {
            let l = Ledger::open(Some(&path(&dir, host))).unwrap();
            l.record(format_args!("run {host}-k 7"));
            l.record(format_args!("completed {host}-k {}", 1i64 << 33));
            l.record(format_args!("run-completed 12 {}", 1i64 << 32));
            l.record(format_args!("term 3"));
            l.record(format_args!("action 3 1700000000000001"));
        }
        let acked = read(&dir).unwrap();
        assert_eq!(acked.runs.len(), 2);
        assert!(acked.completions.contains(&("host-1-k".into(), 1 << 33)));
        assert_eq!(acked.run_completions, vec![(12, 1 << 32); 2]);
        assert_eq!(acked.actions.len(), 2);
        assert_eq!(epochs_led_twice(&acked), 1);
        std::fs::write(path(&dir, "host-2"), "action 3\n").unwrap();
        assert!(read(&dir).unwrap_err().contains("unreadable line"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn twice_counts_what_the_database_may_have_lost() {
        let acked = Acknowledged {
            // Key a admitted twice (the first run lost in a failover), both runs completed; key b once.
            runs: vec![("a".into(), 1), ("a".into(), 2), ("b".into(), 3), ("a".into(), 1)],
            run_completions: vec![(1, 1), (2, 1), (3, 1), (3, 1)],
            // Firing f completed under tokens 1 and 2 (run again after the loss); g once (logged twice).
            completions: vec![("f".into(), 1), ("f".into(), 2), ("g".into(), 1), ("g".into(), 1)],
            ..Acknowledged::default()
        };
        assert_eq!(twice(&acked), Twice { firings: 1, keys_with_two_runs: 1, runs: 1 });
        assert_eq!(twice(&Acknowledged::default()), Twice::default());
    }
}
