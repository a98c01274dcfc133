//! Statements prepared once per backend and kept for its life: the hot paths (`spawn_run`,
//! `claim_firing`, `complete_firing`) skip re-planning and pass their arguments as the datums
//! they were called with.
//!
//! They are pgrx's own kept statements (`OwnedPreparedStatement`), run inside
//! `Spi::connect`. 0.3.0 drove SPI by hand here; pgrx's statements measured the same
//! (`complete_firing`, 20,000 calls in one statement: 13.2 µs a call by hand, 12.7 µs through
//! pgrx), so the hand layer went (#40).
//!
//! A kept plan is PostgreSQL's own plan cache entry: it is re-planned when what it reads
//! changes (an index added, the extension dropped and created again), with the search_path
//! it was prepared under. Every name in the statements is schema-qualified anyway, operators
//! included, so no search_path can change what they mean.
use std::cell::OnceCell;
use std::mem::ManuallyDrop;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};

use crate::errors::raise;

/// One statement: its text and parameter types; the kept plan once prepared.
pub(crate) struct KeptPlan {
    sql: &'static str,
    types: &'static [pg_sys::Oid],
    /// Never dropped: a kept plan lives as long as its backend, and freeing it from a
    /// thread-local destructor at exit would call into PostgreSQL while it shuts down.
    plan: OnceCell<ManuallyDrop<OwnedPreparedStatement>>,
}

impl KeptPlan {
    pub(crate) const fn new(sql: &'static str, types: &'static [pg_sys::Oid]) -> Self {
        Self { sql, types, plan: OnceCell::new() }
    }

    /// Runs the statement through `client` with `args` (`None` for NULL) and returns its
    /// result: `len()` rows processed, and the rows of a `RETURNING` or `SELECT` (read them
    /// with [`FirstRow`]). Each statement takes a fresh snapshot, as a plain SQL statement does:
    /// a read after an `INSERT … ON CONFLICT` sees the row it conflicted with.
    ///
    /// # Safety
    /// Each argument datum is of the declared type and stays valid for the call.
    pub(crate) unsafe fn run<'conn>(
        &self,
        client: &SpiClient<'conn>,
        args: &[Option<pg_sys::Datum>],
    ) -> SpiTupleTable<'conn> {
        debug_assert_eq!(args.len(), self.types.len());
        let plan = self.plan.get_or_init(|| {
            let types: Vec<PgOid> = self.types.iter().map(|&oid| PgOid::from(oid)).collect();
            // Prepared as mutating: executed with `read_only = false` (a new snapshot per
            // statement), whatever the statement is.
            match client.prepare_mut(self.sql, &types) {
                Ok(prepared) => ManuallyDrop::new(prepared.keep()),
                Err(e) => raise(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("could not prepare ({e}): {}", self.sql),
                ),
            }
        });
        // SAFETY: the datums are of the declared types and outlive the call (this function's
        // contract).
        let args = unsafe { spi_args(args, self.types) };
        // `select`, not `update`: pgrx's `update` takes a transaction id first, which a claim
        // that loses, a repeated admission or a stale completion would then spend for nothing
        // (and on a standby fail with XX000 before the statement's own 25006).
        match client.select(&**plan, None, &args) {
            Ok(table) => table,
            Err(e) => {
                raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("could not run ({e}): {}", self.sql))
            }
        }
    }
}

/// Arguments as pgrx's SPI takes them: each datum (`None` for NULL) with its type.
///
/// # Safety
/// Each datum is of its type in `types` and outlives the statement it is passed to.
pub(crate) unsafe fn spi_args(
    args: &[Option<pg_sys::Datum>],
    types: &[pg_sys::Oid],
) -> Vec<DatumWithOid<'static>> {
    args.iter()
        .zip(types)
        .map(|(datum, &oid)| match datum {
            // SAFETY: of type `oid` (this function's contract).
            Some(datum) => unsafe { DatumWithOid::new(*datum, oid) },
            None => DatumWithOid::null_oid(oid),
        })
        .collect()
}

/// A result's first row, when it has one.
pub(crate) struct FirstRow<'conn>(SpiTupleTable<'conn>);

impl<'conn> FirstRow<'conn> {
    pub(crate) fn of(table: SpiTupleTable<'conn>) -> Option<Self> {
        (!table.is_empty()).then(|| Self(table.first()))
    }

    /// Column `column` (from 1), copied out of SPI's memory (it outlives `Spi::connect`);
    /// `None` for NULL.
    pub(crate) fn get<T: FromDatum + IntoDatum>(&self, column: usize) -> Option<T> {
        self.0.get::<T>(column).unwrap_or_else(|e| {
            raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("could not read column {column}: {e}"))
        })
    }
}
