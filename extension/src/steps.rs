//! Durable runs: a run's finished steps are checkpointed (`record_step`, fenced by the
//! holder's token, in the step's own transaction), so a retried or taken-over run resumes at
//! its first unfinished step with the finished steps' outputs; and a run can give its slot
//! back until an instant (`sleep_run`), a signal (`signal_run`, `await_signal`) or its
//! children's ends (`spawn_child`, `await_children`), on any host, without counting an attempt.
//!
//! All of it is plpgsql over a few rows per call (steps.sql), the same in both editions.
use pgrx::prelude::*;

extension_sql_file!("steps.sql", name = "steps", requires = ["runs", "admission"]);
