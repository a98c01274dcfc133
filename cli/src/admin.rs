//! `rendezvous admin …`: an operator's actions, each one documented SQL function that
//! `rendezvous_admin` may call and `rendezvous_observer` may not. Each prints what it did, is
//! idempotent, and refuses clearly (exit status 1) when its target does not exist.
use std::time::{Duration, SystemTime};

use crate::sql;
use rendezvous_client::retention::{BATCH as PURGE_STEP, PAUSE as PURGE_PAUSE};
use tokio_postgres::Client;

/// The actions.
#[derive(Debug, clap::Subcommand)]
pub enum AdminAction {
    /// Stop new firings of a task (rendezvous.pause_task); firings already claimed finish
    Pause {
        /// The task's id
        task_id: String,
    },
    /// Resume a paused task from its next fire time after now (rendezvous.resume_task)
    Resume {
        /// The task's id
        task_id: String,
    },
    /// Remove a task and its pending firings (rendezvous.unschedule_task)
    Unschedule {
        /// The task's id
        task_id: String,
    },
    /// End a firing's stuck claim now, so another host takes it over
    /// (rendezvous.release_firing_claim)
    Release {
        /// The task's id
        task_id: String,
        /// The firing's fire time, as PostgreSQL reads a timestamptz ('2026-11-29 00:00+00')
        fire_at: String,
    },
    /// Delete finished runs and firings older than an age (rendezvous.purge_runs and
    /// rendezvous.purge_firings), in steps of 1,000 rows 50 ms apart
    Purge {
        /// The age, as PostgreSQL reads an interval ('7 days', '12 hours')
        #[arg(long = "older-than", value_name = "INTERVAL")]
        older_than: String,
    },
    /// Ask a group's leader to step down (rendezvous.request_step_down): its elector resigns at
    /// its next refresh and logs why; followers claim at once
    StepDown {
        /// The leader group
        group: String,
        /// Why (the leader's log shows it)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Remove a host from the live set now (rendezvous.leave): its keys move to other hosts
    RemoveHost {
        /// The host's id
        host_id: String,
    },
}

/// A refusal the operator should read (exit status 1), not a failure of the command.
pub struct Refused(pub String);

/// Runs one action; `Ok(Err(Refused))` when the target does not exist or nothing applies.
pub async fn run(client: &Client, action: &AdminAction) -> Answer {
    let e = db_error;
    Ok(match action {
        AdminAction::Pause { task_id } => match client.execute(sql::PAUSE_TASK, &[task_id]).await {
            Ok(_) => Ok(format!("task {task_id} paused: no new firings until it is resumed")),
            Err(err) if missing(&err) => Err(Refused(format!("there is no task {task_id}"))),
            Err(err) => return Err(e(err)),
        },
        AdminAction::Resume { task_id } => match client.query_one(sql::RESUME_TASK, &[task_id]).await {
            Ok(row) => {
                let next: Option<SystemTime> = row.get(0);
                Ok(match next {
                    Some(t) => format!("task {task_id} runs again; next fire time in {}", until(t)),
                    None => format!("task {task_id} runs again, but its schedule never fires again"),
                })
            }
            Err(err) if missing(&err) => Err(Refused(format!("there is no task {task_id}"))),
            Err(err) => return Err(e(err)),
        },
        AdminAction::Unschedule { task_id } => {
            let removed: bool = client.query_one(sql::UNSCHEDULE_TASK, &[task_id]).await.map_err(e)?.get(0);
            if removed {
                Ok(format!("task {task_id} removed, with its pending firings (the history stays)"))
            } else {
                Err(Refused(format!("there is no task {task_id}")))
            }
        }
        AdminAction::Release { task_id, fire_at } => release(client, task_id, fire_at).await?,
        AdminAction::Purge { older_than } => purge(client, older_than).await?,
        AdminAction::StepDown { group, reason } => step_down(client, group, reason.as_deref()).await?,
        AdminAction::RemoveHost { host_id } => {
            let removed: bool = client.query_one(sql::LEAVE, &[host_id]).await.map_err(e)?.get(0);
            if removed {
                Ok(format!(
                    "host {host_id} removed from the live set (it joins again with its next heartbeat)"
                ))
            } else {
                Err(Refused(format!("there is no host {host_id}")))
            }
        }
    })
}

/// What an admin action answers: done (what it did) or refused (why), or the database's error.
type Answer = Result<Result<String, Refused>, String>;

fn db_error(e: tokio_postgres::Error) -> String {
    rendezvous_client::Error::from(e).to_string()
}

fn missing(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::NO_DATA_FOUND)
}

/// Ends a firing's live claim, so the next host takes it over.
async fn release(client: &Client, task_id: &str, fire_at: &str) -> Answer {
    let row = client.query_one(sql::RELEASE_FIRING_CLAIM, &[&task_id, &fire_at]).await;
    Ok(match row {
        Ok(row) => {
            let (released, holder, token): (bool, Option<String>, i64) = (row.get(0), row.get(1), row.get(2));
            if released {
                Ok(format!(
                    "firing {task_id} at {fire_at} released: {} (token {token}) no longer holds it; the next host takes it over",
                    holder.unwrap_or_default()
                ))
            } else {
                Err(Refused(format!(
                    "firing {task_id} at {fire_at} has no live claim to release (done, failed, pending or expired)"
                )))
            }
        }
        Err(err) if missing(&err) => Err(Refused(format!("there is no firing {task_id} at {fire_at}"))),
        Err(err) => return Err(db_error(err)),
    })
}

/// Purges finished runs and firings older than `older_than`.
async fn purge(client: &Client, older_than: &str) -> Answer {
    // In retention's bounded steps (short transactions, paused between), so a purge of
    // millions of rows does not hold up the fleet's commits.
    let mut purged = [0i64; 2];
    for (total, step) in purged.iter_mut().zip([sql::PURGE_RUNS_STEP, sql::PURGE_FIRINGS_STEP]) {
        loop {
            let n: i64 = client.query_one(step, &[&older_than, &PURGE_STEP]).await.map_err(db_error)?.get(0);
            *total += n;
            if n < i64::from(PURGE_STEP) {
                break;
            }
            tokio::time::sleep(PURGE_PAUSE).await;
        }
    }
    Ok(Ok(format!(
        "purged {} finished runs and {} finished firings older than {older_than}",
        purged[0], purged[1]
    )))
}

/// Asks a group's leader to step down.
async fn step_down(client: &Client, group: &str, reason: Option<&str>) -> Answer {
    let row = client.query_one(sql::REQUEST_STEP_DOWN, &[&group, &reason]).await;
    Ok(match row {
        Ok(row) => {
            let (requested, leader, epoch): (bool, Option<String>, i64) =
                (row.get(0), row.get(1), row.get(2));
            if requested {
                Ok(format!(
                    "asked {} to step down from group {group} (epoch {epoch}): it resigns at its next refresh",
                    leader.unwrap_or_default()
                ))
            } else {
                Err(Refused(format!("nobody leads group {group} (last epoch {epoch})")))
            }
        }
        Err(err) if missing(&err) => Err(Refused(format!("there is no leader group {group}"))),
        Err(err) => return Err(db_error(err)),
    })
}

fn until(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
    format!("{:.1} s", d.as_secs_f64())
}
