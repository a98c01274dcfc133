//! The `rendezvous` command's pieces: its command line, a throwaway cluster, the fleet
//! (controller and host processes), the status report and dashboard, and the operator's actions.
pub mod admin;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod dashboard;
pub mod fleet;
pub mod ha;
pub mod host;
pub mod install;
pub mod ledger;
pub mod overload;
pub mod partition;
pub mod sql;
pub mod status;
pub mod timeline;
