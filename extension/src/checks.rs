//! Argument checks shared by the SQL functions of every module: one place for each rule and
//! its message, raising 22004 for NULL and 22023 for a bad value.
use pgrx::prelude::*;

extension_sql_file!("checks.sql", name = "checks");
