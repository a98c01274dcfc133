//! `#[pg_test]`s: what can only be checked inside a backend, against the Rust code itself (each
//! runs in its own rolled-back transaction). What a SQL caller sees is tested by the pg_regress
//! suites under pg_test/, and through the client by tests/ (docs/testing.md).
mod hrw_tests;
mod leader_tests;
mod memory_tests;
