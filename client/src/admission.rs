//! Idempotent spawn admission: moved to [`crate::runs`] (one home for admitting and running
//! runs). These names stay here for one release.
pub use crate::runs::{purge_runs, spawn_run, Admission, SERIALIZATION_RETRIES};
