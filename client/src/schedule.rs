//! The names of 0.3.0's `schedule` module, kept for one release. Their homes since 0.4.0: the
//! work runtime in [`crate::worker`] (`Scheduler` is now [`Worker`](crate::Worker)), task specs
//! and their calls in [`crate::task`], the calls on firing rows in [`crate::firing`].
pub use crate::firing::{due_firings, fail_firing, next_due_at, DueFiring, FailOutcome};
pub use crate::task::{
    fire_times, pause_task, resume_task, schedule_task, unschedule_task, CatchUp, Overlap, TaskSpec,
};
pub use crate::worker::{BoxError, Clock, FencedTransaction, Job};

/// The work runtime's old name: use [`Worker`](crate::Worker).
#[deprecated(since = "0.4.0", note = "renamed to rendezvous_client::Worker")]
pub type Scheduler = crate::worker::Worker;

/// Use [`WorkerBuilder`](crate::worker::WorkerBuilder).
#[deprecated(since = "0.4.0", note = "renamed to rendezvous_client::worker::WorkerBuilder")]
pub type SchedulerBuilder = crate::worker::WorkerBuilder;

/// Use [`WorkerOptions`](crate::WorkerOptions).
#[deprecated(since = "0.4.0", note = "renamed to rendezvous_client::WorkerOptions")]
pub type SchedulerOptions = crate::worker::WorkerOptions;

/// Use [`WorkerStats`](crate::WorkerStats).
#[deprecated(since = "0.4.0", note = "renamed to rendezvous_client::WorkerStats")]
pub type SchedulerStats = crate::worker::WorkerStats;

#[cfg(test)]
mod tests {
    /// Code written for 0.3.0 still builds: the old names are the new types, at their old paths.
    #[test]
    #[allow(deprecated)]
    fn the_old_names_are_the_new_types() {
        use std::time::Duration;

        let options: crate::SchedulerOptions =
            crate::WorkerOptions::default().with_poll(Duration::from_millis(250));
        let builder: super::SchedulerBuilder =
            crate::Scheduler::builder("postgres://app@db.internal/app", "h1").options(options).task(
                super::TaskSpec::new("t", "* * * * *").with_overlap(super::Overlap::Allow),
                |_: super::Job| async { Ok::<_, super::BoxError>(()) },
            );
        let _: crate::worker::WorkerBuilder = builder;
        let stats: crate::SchedulerStats = crate::WorkerStats::default();
        assert_eq!(stats, crate::WorkerStats::default());
        let _: super::Clock = crate::Clock::Database;
        let _: crate::admission::Admission =
            crate::runs::Admission { run_id: 1, created: true, same_request: true };
        assert_eq!(crate::admission::SERIALIZATION_RETRIES, crate::runs::SERIALIZATION_RETRIES);
    }
}
