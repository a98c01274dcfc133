//! The `rendezvous` command's pieces: a throwaway cluster, the fleet (controller and host
//! processes), and the status report.
pub mod args;
pub mod cluster;
pub mod fleet;
pub mod host;
pub mod status;
