//! Status views for operators: what `rendezvous status` and a dashboard read, as the observer
//! role, without any table privilege.
use pgrx::prelude::*;

extension_sql_file!(
    "status.sql",
    name = "status",
    requires = ["membership", "admission", "runs", "steps", "leader_tables", "firing", "schedule"]
);
