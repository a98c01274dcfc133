//! Retention: history is deleted by default, in bounded batches, by the fleet itself (the
//! scheduler calls `rendezvous.prune`), so the tables and everything that reads them stay the
//! size of recent work, not of all time.
use pgrx::prelude::*;

extension_sql_file!("retention.sql", name = "retention", requires = ["membership", "admission", "firing"]);
