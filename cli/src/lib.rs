//! The `rendezvous` command's pieces: its command line, a throwaway cluster, the fleet
//! (controller and host processes), and the status report.
pub mod cli;
pub mod cluster;
pub mod fleet;
pub mod host;
pub mod status;
