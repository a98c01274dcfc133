//! Statements prepared once per backend and kept for its life, run through SPI with the
//! arguments passed as datums: the hot paths (`spawn_run`, `claim_firing`, `complete_firing`)
//! skip re-planning and every conversion of their arguments.
//!
//! A kept plan is PostgreSQL's own plan cache entry: it is re-planned when what it reads
//! changes (an index added, the extension dropped and created again), with the search_path
//! it was prepared under. Every name in the statements is schema-qualified anyway, operators
//! included, so no search_path can change what they mean.
use std::cell::Cell;
use std::ffi::CString;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::raise;

/// One statement: its text and parameter types; the kept plan once prepared.
pub(crate) struct KeptPlan {
    sql: &'static str,
    types: &'static [pg_sys::Oid],
    plan: Cell<pg_sys::SPIPlanPtr>,
}

impl KeptPlan {
    pub(crate) const fn new(sql: &'static str, types: &'static [pg_sys::Oid]) -> Self {
        Self { sql, types, plan: Cell::new(std::ptr::null_mut()) }
    }

    /// Runs the statement with `args` (`None` for NULL) and returns how many rows it
    /// processed; read its rows with [`value`] before the next SPI call.
    ///
    /// # Safety
    /// Inside `SPI_connect`; each argument datum is of the declared type and stays valid for
    /// the call.
    pub(crate) unsafe fn execute(&self, args: &[Option<pg_sys::Datum>]) -> u64 {
        debug_assert_eq!(args.len(), self.types.len());
        // SAFETY: inside SPI_connect with arguments of the declared types (this function's
        // contract); `values` and `nulls` hold one entry per parameter and outlive the call.
        unsafe {
            let plan = self.prepared();
            let (mut values, nulls) = spi_args(args);
            let rc = pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), false, 0);
            if rc < 0 {
                raise(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("SPI_execute_plan failed ({rc}): {}", self.sql),
                );
            }
            pg_sys::SPI_processed
        }
    }

    /// The plan, prepared and kept on first use.
    unsafe fn prepared(&self) -> pg_sys::SPIPlanPtr {
        if self.plan.get().is_null() {
            let sql = CString::new(self.sql).expect("statement text has no NUL");
            // SAFETY: inside SPI_connect (the caller's contract); the statement text is a valid C
            // string and the type array has one OID per parameter; a kept plan lives for the
            // backend, as `plan` does.
            unsafe {
                let plan = pg_sys::SPI_prepare(
                    sql.as_ptr(),
                    self.types.len() as i32,
                    self.types.as_ptr().cast_mut(),
                );
                if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
                    raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("could not prepare: {}", self.sql));
                }
                self.plan.set(plan);
            }
        }
        self.plan.get()
    }
}

/// Arguments as SPI takes them: the datums, and `' '` or `'n'` (NULL) for each.
pub(crate) fn spi_args(args: &[Option<pg_sys::Datum>]) -> (Vec<pg_sys::Datum>, Vec<std::ffi::c_char>) {
    let values = args.iter().map(|a| a.unwrap_or(pg_sys::Datum::from(0))).collect();
    let nulls = args.iter().map(|a| if a.is_some() { b' ' } else { b'n' } as std::ffi::c_char).collect();
    (values, nulls)
}

/// Connects to SPI for a C function's statements (raising if it cannot); call
/// `pg_sys::SPI_finish()` before returning normally. An ERROR on the way ends the transaction,
/// which cleans up the connection.
pub(crate) fn connect() {
    // SAFETY: called from a function PostgreSQL is executing, as SPI requires.
    if unsafe { pg_sys::SPI_connect() } != pg_sys::SPI_OK_CONNECT as i32 {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "SPI_connect failed");
    }
}

/// Column `column` (from 1) of row `row` of the last statement's result, as a datum; `None`
/// for NULL. By-value types only, or copy the value before `SPI_finish`.
///
/// # Safety
/// Right after [`KeptPlan::execute`] returned more than `row` rows with at least `column`
/// columns.
pub(crate) unsafe fn value(row: usize, column: i32) -> Option<pg_sys::Datum> {
    // SAFETY: right after `execute` returned more than `row` rows of at least `column` columns
    // (this function's contract), so `SPI_tuptable` and its row are valid.
    unsafe {
        let table = pg_sys::SPI_tuptable;
        let tuple = *(*table).vals.add(row);
        let mut isnull = false;
        let datum = pg_sys::SPI_getbinval(tuple, (*table).tupdesc, column, &mut isnull);
        (!isnull).then_some(datum)
    }
}
