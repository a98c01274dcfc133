//! Recurring tasks: their specs and the calls that schedule, pause, resume and unschedule them
//! (`rendezvous.schedule_task` and its siblings). The database decides when a task's firing is
//! due (its clock, the task's catch-up and overlap policies); the [`Worker`](crate::Worker)
//! runs the firings of the tasks it has handlers for. docs/schedules.md has the rules.
use std::time::{Duration, SystemTime};

use tokio_postgres::GenericClient;

use crate::{sql, Result};

/// What a task does with a firing whose previous one is still unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Run it anyway, beside the previous one.
    Allow,
    /// Do not run it; it is counted in the task's `skipped` (the default).
    #[default]
    Skip,
}

/// Which missed fire times run after the whole fleet was down (or a task was behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// Only the latest missed fire time runs (the default).
    #[default]
    Latest,
    /// Every missed fire time within the task's catch-up window runs, oldest first.
    All,
    /// A missed fire time runs only if it is within the catch-up window; older ones never.
    Skip,
}

impl Overlap {
    fn as_sql(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        }
    }
}

impl CatchUp {
    fn as_sql(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::Skip => "skip",
        }
    }
}

/// A recurring task's definition, as `rendezvous.schedule_task` takes it.
///
/// ```
/// use std::time::Duration;
/// use rendezvous_client::{CatchUp, TaskSpec};
///
/// let spec = TaskSpec::new("nightly-report", "0 0 * * *")
///     .with_time_zone("Europe/Berlin")
///     .with_catch_up(CatchUp::Latest)
///     .with_max_attempts(5);
/// let every = TaskSpec::every("sync", Duration::from_secs(30));
/// assert_eq!(every.schedule, "every 30 seconds");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskSpec {
    /// The task's id.
    pub task_id: String,
    /// 5-field cron (minute first), 6-field cron (seconds first), a macro (`@hourly`, `@daily`,
    /// …) or `every <n> seconds|minutes|hours|days`.
    pub schedule: String,
    /// IANA time zone the cron fields are read in. Default `UTC`.
    pub time_zone: String,
    /// Default [`Overlap::Skip`].
    pub overlap: Overlap,
    /// Default [`CatchUp::Latest`].
    pub catch_up: CatchUp,
    /// How far back [`CatchUp::All`] and [`CatchUp::Skip`] reach. Default 1 hour.
    pub catch_up_window: Duration,
    /// The lease of each claim: how long a live but silent holder (a stopped process, a
    /// partition) keeps a firing from others. Renewed every third of it while the handler
    /// runs, and the claim also ends with the holder's session, so it need not cover the
    /// work. Default 30 s (see operations.md, "Choosing a lease").
    pub lease: Duration,
    /// Failed attempts before a firing is failed for good. Default 3.
    pub max_attempts: i32,
    /// Wait before the first retry, doubling with each failure (at most 1 hour). Default 10 s.
    pub retry_backoff: Duration,
}

impl TaskSpec {
    /// A task on a cron schedule (or any schedule text the extension takes), in UTC.
    pub fn new(task_id: impl Into<String>, schedule: impl Into<String>) -> TaskSpec {
        TaskSpec {
            task_id: task_id.into(),
            schedule: schedule.into(),
            time_zone: "UTC".into(),
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            catch_up_window: Duration::from_secs(3600),
            lease: Duration::from_secs(30),
            max_attempts: 3,
            retry_backoff: Duration::from_secs(10),
        }
    }

    /// A task every `period` (whole seconds), counted from the Unix epoch.
    pub fn every(task_id: impl Into<String>, period: Duration) -> TaskSpec {
        TaskSpec::new(task_id, format!("every {} seconds", period.as_secs()))
    }

    /// Sets [`time_zone`](Self::time_zone).
    #[must_use]
    pub fn with_time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = time_zone.into();
        self
    }

    /// Sets [`overlap`](Self::overlap).
    #[must_use]
    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets [`catch_up`](Self::catch_up).
    #[must_use]
    pub fn with_catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// Sets [`catch_up_window`](Self::catch_up_window).
    #[must_use]
    pub fn with_catch_up_window(mut self, window: Duration) -> Self {
        self.catch_up_window = window;
        self
    }

    /// Sets [`lease`](Self::lease).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`max_attempts`](Self::max_attempts).
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets [`retry_backoff`](Self::retry_backoff).
    #[must_use]
    pub fn with_retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }
}

/// Creates or updates a task (idempotent); returns its next fire time. Bad schedules, unknown
/// zones and bad policies fail with SQLSTATE 22023 (22004 for a missing value).
pub async fn schedule_task(client: &impl GenericClient, spec: &TaskSpec) -> Result<SystemTime> {
    crate::error::check_id("task_id", &spec.task_id)?;
    let row = sql::query_one(
        client,
        sql::SCHEDULE_TASK,
        &[
            &spec.task_id,
            &spec.schedule,
            &spec.time_zone,
            &spec.overlap.as_sql(),
            &spec.catch_up.as_sql(),
            &spec.catch_up_window.as_secs_f64(),
            &spec.lease.as_secs_f64(),
            &spec.max_attempts,
            &spec.retry_backoff.as_secs_f64(),
        ],
    )
    .await?;
    Ok(row.get(0))
}

/// Removes a task and its pending firings; true when it existed (needs `rendezvous_admin`).
pub async fn unschedule_task(client: &impl GenericClient, task_id: &str) -> Result<bool> {
    Ok(sql::query_one(client, sql::UNSCHEDULE_TASK, &[&task_id]).await?.get(0))
}

/// Stops new firings of a task (idempotent; needs `rendezvous_admin`). SQLSTATE P0002 when
/// there is no such task.
pub async fn pause_task(client: &impl GenericClient, task_id: &str) -> Result<()> {
    sql::execute(client, sql::PAUSE_TASK, &[&task_id]).await?;
    Ok(())
}

/// Resumes a paused task from its next fire time after now, which it returns (idempotent;
/// needs `rendezvous_admin`).
pub async fn resume_task(client: &impl GenericClient, task_id: &str) -> Result<Option<SystemTime>> {
    Ok(sql::query_one(client, sql::RESUME_TASK, &[&task_id]).await?.get(0))
}

/// The fire times of `schedule` in `time_zone` after `after`, up to `until` (inclusive), as the
/// extension evaluates them.
pub async fn fire_times(
    client: &impl GenericClient,
    schedule: &str,
    time_zone: &str,
    after: SystemTime,
    until: SystemTime,
) -> Result<Vec<SystemTime>> {
    let rows = sql::query(client, sql::FIRE_TIMES, &[&schedule, &time_zone, &after, &until]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
