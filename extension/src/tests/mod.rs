//! `#[pg_test]`s: each runs inside the extension, in its own rolled-back transaction.
mod admission_tests;
mod firing_tests;
mod hrw_tests;
mod leader_tests;
mod membership_tests;
