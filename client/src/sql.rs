//! Every SQL statement the client sends, in one place: the client's side of the SQL contract.
//!
//! Each statement is declared with what the client code binds and reads: the types of its
//! parameters, as the server infers them, and the names and types of its result columns. The
//! integration test `tests/it/contract.rs` prepares every entry of [`STATEMENTS`] against the
//! installed extension and compares, so a changed signature or result column on either side
//! fails there rather than at run time. The macro ([`sql_statements!`](crate::sql_statements))
//! makes a constant without its table entry impossible.
//!
//! Not part of the public API (hidden from the docs): the strings are implementation details
//! and change without notice; the module is reachable only for the workspace's tests.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

/// One statement the client sends, with the shape the client code expects of it.
#[derive(Debug)]
pub struct Statement {
    /// The constant's name.
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
    /// The parameter types (`$1`, `$2`, …) as the server infers them.
    pub params: &'static [Type],
    /// The result columns, in order: name and type.
    pub columns: &'static [(&'static str, Type)],
}

/// Declares each statement as a `pub const NAME: &str`, and all of them with their expected
/// parameter and column types in `STATEMENTS`. Exported (hidden) so the workspace's other SQL
/// senders (the `rendezvous` command) declare theirs the same way, for the same contract test.
#[doc(hidden)]
#[macro_export]
macro_rules! sql_statements {
    ($(
        $(#[$attr:meta])*
        $name:ident = $sql:literal
            ($($param:ident),*) -> ($($column:literal: $ty:ident),*);
    )*) => {
        $(
            $(#[$attr])*
            pub const $name: &str = $sql;
        )*

        /// Every statement above with its expected parameter and result types.
        pub const STATEMENTS: &[$crate::sql::Statement] = &[$(
            $crate::sql::Statement {
                name: stringify!($name),
                sql: $name,
                params: &[$($crate::tokio_postgres::types::Type::$param),*],
                columns: &[$(($column, $crate::tokio_postgres::types::Type::$ty)),*],
            },
        )*];
    };
}

/// The declared parameter types of a statement above, by its text.
fn param_types(sql: &str) -> &'static [Type] {
    static BY_SQL: std::sync::OnceLock<std::collections::HashMap<&'static str, &'static [Type]>> =
        std::sync::OnceLock::new();
    BY_SQL
        .get_or_init(|| STATEMENTS.iter().map(|s| (s.sql, s.params)).collect())
        .get(sql)
        .copied()
        .unwrap_or_else(|| panic!("not a statement of sql.rs: {sql}"))
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// `params` with the statement's declared types.
fn typed<'a>(sql: &str, params: Params<'a>) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    let types = param_types(sql);
    debug_assert_eq!(types.len(), params.len(), "{sql}");
    params.iter().zip(types).map(|(p, t)| (*p, t.clone())).collect()
}

// Every statement goes in one round trip: as an unnamed statement with its declared parameter
// types (`query_typed`), not prepared first, which costs a second round trip and a parse each
// call (tokio-postgres keeps no statement cache), and no statement names that a
// transaction-mode pooler could hand to another session. `tests/it/contract.rs` checks the
// declared types are the server's.

/// The statement's rows.
pub(crate) async fn query(
    client: &impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    client.query_typed(sql, &typed(sql, params)).await
}

/// The statement's one row (an error for none or several).
pub(crate) async fn query_one(
    client: &impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Row, tokio_postgres::Error> {
    client.query_typed_one(sql, &typed(sql, params)).await
}

/// Runs the statement for its effect (its rows, if any, are dropped).
pub(crate) async fn execute(
    client: &impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<(), tokio_postgres::Error> {
    client.query_typed(sql, &typed(sql, params)).await.map(drop)
}

crate::sql_statements! {
    /// The installed extension's version (NULL: no extension, maybe the portable edition
    /// installed by psql), and whether `rendezvous.edition()` exists (0.3.0 and later).
    EXTENSION_INSTALLED = "SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_rendezvous'), \
                                  pg_catalog.to_regprocedure('rendezvous.edition()') IS NOT NULL"
        () -> ("extversion": TEXT, "?column?": BOOL);
    /// Which edition is installed, and its version.
    EDITION = "SELECT edition, version FROM rendezvous.edition()"
        () -> ("edition": TEXT, "version": TEXT);
    /// The server's HRW algorithm name.
    HRW_ALGORITHM = "SELECT rendezvous.hrw_algorithm()"
        () -> ("hrw_algorithm": TEXT);
    /// A cheap probe: is the session's transaction still usable?
    PROBE = "SELECT 1"
        () -> ("?column?": INT4);
    /// The database clock.
    CLOCK = "SELECT pg_catalog.clock_timestamp()"
        () -> ("clock_timestamp": TIMESTAMPTZ);

    /// Heartbeat: `$1` host id, `$2` weight.
    HEARTBEAT = "SELECT rendezvous.heartbeat($1, $2)"
        (TEXT, FLOAT8) -> ("heartbeat": TIMESTAMPTZ);
    /// Leave: `$1` host id.
    LEAVE = "SELECT rendezvous.leave($1)"
        (TEXT) -> ("leave": BOOL);
    /// Live host ids: `$1` staleness in seconds.
    LIVE_HOSTS = "SELECT rendezvous.live_hosts(pg_catalog.make_interval(secs => $1::float8))"
        (FLOAT8) -> ("live_hosts": TEXT_ARRAY);
    /// Live hosts with weights: `$1` staleness in seconds.
    LIVE_MEMBERS = "SELECT host_id, weight FROM rendezvous.live_members(pg_catalog.make_interval(secs => $1::float8))"
        (FLOAT8) -> ("host_id": TEXT, "weight": FLOAT8);
    /// What changed in the live set since a kept view: `$1` staleness in seconds, `$2` the
    /// view's version, `$3` its read time (NULLs: a first read).
    LIVE_MEMBERS_DELTA = "SELECT version, read_at, whole, host_ids, weights, removed
       FROM rendezvous.live_members_delta(pg_catalog.make_interval(secs => $1::float8), $2::int8, $3::timestamptz)"
        (FLOAT8, INT8, TIMESTAMPTZ)
        -> ("version": INT8, "read_at": TIMESTAMPTZ, "whole": BOOL, "host_ids": TEXT_ARRAY, "weights": FLOAT8_ARRAY,
            "removed": TEXT_ARRAY);
    /// Server-side winner over the live set: `$1` key.
    WINNER_LIVE = "SELECT rendezvous.winner($1::text)"
        (TEXT) -> ("winner": TEXT);
    /// Server-side winner over given hosts: `$1` key, `$2` hosts.
    WINNER = "SELECT rendezvous.winner($1::text, $2::text[])"
        (TEXT, TEXT_ARRAY) -> ("winner": TEXT);
    /// Server-side ranking over given hosts: `$1` key, `$2` hosts, `$3` k.
    RANKED = "SELECT rendezvous.ranked($1::text, $2::text[], $3::int4)"
        (TEXT, TEXT_ARRAY, INT4) -> ("ranked": TEXT_ARRAY);

    /// Admission: `$1` tenant, `$2` workflow_ref, `$3` input, `$4` dispatch key.
    SPAWN_RUN = "SELECT run_id, created, same_request, pg_catalog.pg_backend_pid()
       FROM rendezvous.spawn_run($1::text, $2::text, $3::jsonb, $4::text)"
        (TEXT, TEXT, JSONB, TEXT)
        -> ("run_id": INT8, "created": BOOL, "same_request": BOOL, "pg_backend_pid": INT4);
    /// Admission with a retry policy: as SPAWN_RUN, then `$5` max attempts, `$6` backoff in seconds.
    SPAWN_RUN_WITH_POLICY = "SELECT run_id, created, same_request, pg_catalog.pg_backend_pid()
       FROM rendezvous.spawn_run($1::text, $2::text, $3::jsonb, $4::text, $5::int4,
                                 pg_catalog.make_interval(secs => $6::float8))"
        (TEXT, TEXT, JSONB, TEXT, INT4, FLOAT8)
        -> ("run_id": INT8, "created": BOOL, "same_request": BOOL, "pg_backend_pid": INT4);
    /// Batch admission: `$1` tenant, `$2` workflow_refs, `$3` inputs, `$4` dispatch keys (NULL
    /// elements: none), `$5` max attempts, `$6` backoffs in seconds.
    SPAWN_RUNS = "SELECT ord, run_id, created, same_request, pg_catalog.pg_backend_pid()
       FROM rendezvous.spawn_runs($1::text, $2::text[], $3::jsonb[], $4::text[], $5::int4[],
                                  (SELECT pg_catalog.array_agg(pg_catalog.make_interval(secs => s) ORDER BY i)
                                     FROM pg_catalog.unnest($6::float8[]) WITH ORDINALITY AS b(s, i)))"
        (TEXT, TEXT_ARRAY, JSONB_ARRAY, TEXT_ARRAY, INT4_ARRAY, FLOAT8_ARRAY)
        -> ("ord": INT4, "run_id": INT8, "created": BOOL, "same_request": BOOL, "pg_backend_pid": INT4);
    /// Run claims: `$1` host, `$2` max, `$3` lease in seconds, `$4` workflow refs (NULL: any),
    /// `$5` grace per rank in seconds.
    CLAIM_RUNS = "SELECT run_id, token, tenant_id, workflow_ref, input, attempt, pg_catalog.pg_backend_pid()
       FROM rendezvous.claim_runs($1::text, $2::int4, pg_catalog.make_interval(secs => $3::float8), $4::text[],
                                  pg_catalog.make_interval(secs => $5::float8))"
        (TEXT, INT4, FLOAT8, TEXT_ARRAY, FLOAT8)
        -> ("run_id": INT8, "token": INT8, "tenant_id": TEXT, "workflow_ref": TEXT, "input": JSONB,
            "attempt": INT4, "pg_backend_pid": INT4);
    /// `$1` run id, `$2` token, `$3` lease in seconds.
    RENEW_RUN = "SELECT rendezvous.renew_run($1::int8, $2::int8, pg_catalog.make_interval(secs => $3::float8))"
        (INT8, INT8, FLOAT8) -> ("renew_run": TIMESTAMPTZ);
    /// `$1` run id, `$2` token, `$3` output.
    COMPLETE_RUN = "SELECT rendezvous.complete_run($1::int8, $2::int8, $3::jsonb), pg_catalog.pg_backend_pid()"
        (INT8, INT8, JSONB) -> ("complete_run": BOOL, "pg_backend_pid": INT4);
    /// Complete many: `$1` run ids, `$2` tokens.
    COMPLETE_RUNS = "SELECT ord, completed, pg_catalog.pg_backend_pid() FROM rendezvous.complete_runs($1::int8[], $2::int8[])"
        (INT8_ARRAY, INT8_ARRAY) -> ("ord": INT4, "completed": BOOL, "pg_backend_pid": INT4);
    /// `$1` run id, `$2` token, `$3` error.
    FAIL_RUN = "SELECT rendezvous.fail_run($1::int8, $2::int8, $3::text), pg_catalog.pg_backend_pid()"
        (INT8, INT8, TEXT) -> ("fail_run": TEXT, "pg_backend_pid": INT4);
    /// `$1` run id, `$2` token.
    RELEASE_RUN = "SELECT rendezvous.release_run($1::int8, $2::int8)"
        (INT8, INT8) -> ("release_run": BOOL);
    /// `$1` run id, `$2` token.
    ASSERT_RUN = "SELECT rendezvous.assert_run($1::int8, $2::int8)"
        (INT8, INT8) -> ("assert_run": VOID);
    /// `$1` host id: ends what an earlier process under this id still holds.
    RELEASE_HOST_CLAIMS = "SELECT rendezvous.release_host_claims($1::text)"
        (TEXT) -> ("release_host_claims": INT8);
    /// `$1` run id.
    CANCEL_RUN = "SELECT rendezvous.cancel_run($1::int8)"
        (INT8) -> ("cancel_run": BOOL);
    /// `$1` workflow refs (NULL: any).
    NEXT_RUNNABLE_AT = "SELECT rendezvous.next_runnable_at($1::text[])"
        (TEXT_ARRAY) -> ("next_runnable_at": TIMESTAMPTZ);
    /// The key that signs the extension's announcements (announce.rs), and the last number
    /// handed out so far.
    ANNOUNCEMENT_KEY = "SELECT key, last_number FROM rendezvous._announcement_key()"
        () -> ("key": BYTEA, "last_number": INT8);
    /// Wake-ups when a run becomes runnable (spawn, retry, a holder gone, a release).
    LISTEN_RUNS = "LISTEN rendezvous_runs"
        () -> ();
    /// Cancellations of running runs (cancel_run): the announcement's data is the run id.
    LISTEN_CANCEL = "LISTEN rendezvous_cancel"
        () -> ();

    /// Durable runs (steps.rs). A checkpoint: `$1` run id, `$2` token, `$3` step, `$4` output.
    RECORD_STEP = "SELECT rendezvous.record_step($1::int8, $2::int8, $3::text, $4::jsonb), pg_catalog.pg_backend_pid()"
        (INT8, INT8, TEXT, JSONB) -> ("record_step": BOOL, "pg_backend_pid": INT4);
    /// `$1` run id: its recorded steps, in order.
    RUN_STEPS = "SELECT step, output, attempt, recorded_at FROM rendezvous.run_steps($1::int8)"
        (INT8) -> ("step": TEXT, "output": JSONB, "attempt": INT4, "recorded_at": TIMESTAMPTZ);
    /// An instant `$1` seconds from now on the database clock, as a JSON string (what a
    /// durable timer or wait records as its deadline).
    DEADLINE = "SELECT pg_catalog.to_jsonb(pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => $1::float8))"
        (FLOAT8) -> ("to_jsonb": JSONB);
    /// `$1` run id, `$2` token, `$3` until (a recorded deadline).
    SLEEP_RUN = "SELECT rendezvous.sleep_run($1::int8, $2::int8, ($3::jsonb OPERATOR(pg_catalog.#>>) '{}')::timestamptz)"
        (INT8, INT8, JSONB) -> ("sleep_run": BOOL);
    /// `$1` run id, `$2` signal name, `$3` payload.
    SIGNAL_RUN = "SELECT rendezvous.signal_run($1::int8, $2::text, $3::jsonb)"
        (INT8, TEXT, JSONB) -> ("signal_run": BOOL);
    /// `$1` run id, `$2` token, `$3` signal name, `$4` until (a recorded deadline).
    AWAIT_SIGNAL = "SELECT outcome, payload FROM rendezvous.await_signal($1::int8, $2::int8, $3::text,
                                                  ($4::jsonb OPERATOR(pg_catalog.#>>) '{}')::timestamptz)"
        (INT8, INT8, TEXT, JSONB) -> ("outcome": TEXT, "payload": JSONB);
    /// `$1` parent run id, `$2` token, `$3` child key, `$4` workflow_ref, `$5` input,
    /// `$6` max attempts, `$7` backoff in seconds.
    SPAWN_CHILD = "SELECT run_id, created, same_request
       FROM rendezvous.spawn_child($1::int8, $2::int8, $3::text, $4::text, $5::jsonb, $6::int4,
                                   pg_catalog.make_interval(secs => $7::float8))"
        (INT8, INT8, TEXT, TEXT, JSONB, INT4, FLOAT8) -> ("run_id": INT8, "created": BOOL, "same_request": BOOL);
    /// `$1` run id, `$2` token, `$3` until (a recorded deadline).
    AWAIT_CHILDREN = "SELECT outcome FROM rendezvous.await_children($1::int8, $2::int8,
                                                  ($3::jsonb OPERATOR(pg_catalog.#>>) '{}')::timestamptz)"
        (INT8, INT8, JSONB) -> ("outcome": TEXT);
    /// `$1` run id: its children.
    RUN_CHILDREN = "SELECT child_key, child_run_id, state, output, last_error FROM rendezvous.run_children($1::int8)"
        (INT8) -> ("child_key": TEXT, "child_run_id": INT8, "state": TEXT, "output": JSONB, "last_error": TEXT);
    /// `$1` run id, `$2` token, `$3` progress.
    SET_RUN_PROGRESS = "SELECT rendezvous.set_run_progress($1::int8, $2::int8, $3::jsonb)"
        (INT8, INT8, JSONB) -> ("set_run_progress": BOOL);
    /// Wake-ups when a burst of firings was made (due_firings made some): the hosts waiting
    /// for them look at once instead of at their next tick.
    LISTEN_FIRINGS = "LISTEN rendezvous_firings"
        () -> ();
    /// `$1` age in seconds.
    PURGE_RUNS = "SELECT rendezvous.purge_runs(pg_catalog.make_interval(secs => $1::float8))"
        (FLOAT8) -> ("purge_runs": INT8);

    /// One bounded retention step: `$1` rows at most of each kind.
    PRUNE = "SELECT kind, deleted FROM rendezvous.prune($1::integer)"
        (INT4) -> ("kind": TEXT, "deleted": INT8);

    /// Claim: `$1` group, `$2` candidate, `$3` wait.
    TRY_LEAD = "SELECT is_leader, leader, epoch, pg_catalog.pg_backend_pid()
       FROM rendezvous.try_lead($1::text, $2::text, $3::bool)"
        (TEXT, TEXT, BOOL) -> ("is_leader": BOOL, "leader": TEXT, "epoch": INT8, "pg_backend_pid": INT4);
    /// Claim (never waiting) with the term's lease (`$3` seconds: a holder silent past it loses
    /// its session to the next candidate), plus the backend pid, to notice a pooler swapping
    /// sessions. (Every acknowledging statement returns the backend pid: see `replication`.)
    TRY_LEAD_CHECKED = "SELECT t.is_leader, t.leader, t.epoch, pg_catalog.pg_backend_pid()
       FROM rendezvous.try_lead($1::text, $2::text, false, pg_catalog.make_interval(secs => $3::float8)) t"
        (TEXT, TEXT, FLOAT8) -> ("is_leader": BOOL, "leader": TEXT, "epoch": INT8, "pg_backend_pid": INT4);
    /// Listens for leader locks given back (the announcement's data: the group); the extension
    /// announces there.
    LISTEN_LEADERS = "LISTEN rendezvous_leader"
        () -> ();
    /// An elector's session receives the server's WARNINGs (an operator's step-down reason comes
    /// as one) whatever the role's or database's `client_min_messages`.
    WARNINGS_ON = "SET client_min_messages = warning"
        () -> ();
    /// The session's backend pid.
    BACKEND_PID = "SELECT pg_catalog.pg_backend_pid()"
        () -> ("pg_backend_pid": INT4);
    /// Resign: `$1` group.
    RESIGN = "SELECT rendezvous.resign($1::text)"
        (TEXT) -> ("resign": BOOL);
    /// Current leader: `$1` group.
    LEADER = "SELECT leader, epoch, pid FROM rendezvous.leader($1::text)"
        (TEXT) -> ("leader": TEXT, "epoch": INT8, "pid": INT4);
    /// Fencing check: `$1` group, `$2` epoch.
    ASSERT_LEADER = "SELECT rendezvous.assert_leader($1::text, $2::int8)"
        (TEXT, INT8) -> ("assert_leader": VOID);

    /// Claim a firing: `$1` task, `$2` fire_at, `$3` host, `$4` lease in seconds.
    CLAIM_FIRING = "SELECT claimed, holder, token, completed, lease_until, pg_catalog.pg_backend_pid()
       FROM rendezvous.claim_firing($1::text, $2::timestamptz, $3::text, pg_catalog.make_interval(secs => $4::float8))"
        (TEXT, TIMESTAMPTZ, TEXT, FLOAT8)
        -> ("claimed": BOOL, "holder": TEXT, "token": INT8, "completed": BOOL, "lease_until": TIMESTAMPTZ,
            "pg_backend_pid": INT4);
    /// Claim many: `$1` tasks, `$2` fire_ats, `$3` host, `$4` lease in seconds.
    CLAIM_FIRINGS = "SELECT ord, claimed, holder, token, completed, lease_until, pg_catalog.pg_backend_pid()
       FROM rendezvous.claim_firings($1::text[], $2::timestamptz[], $3::text, pg_catalog.make_interval(secs => $4::float8))"
        (TEXT_ARRAY, TIMESTAMPTZ_ARRAY, TEXT, FLOAT8)
        -> ("ord": INT4, "claimed": BOOL, "holder": TEXT, "token": INT8, "completed": BOOL,
            "lease_until": TIMESTAMPTZ, "pg_backend_pid": INT4);
    /// Complete many: `$1` tasks, `$2` fire_ats, `$3` tokens.
    COMPLETE_FIRINGS = "SELECT ord, completed, pg_catalog.pg_backend_pid()
       FROM rendezvous.complete_firings($1::text[], $2::timestamptz[], $3::int8[])"
        (TEXT_ARRAY, TIMESTAMPTZ_ARRAY, INT8_ARRAY) -> ("ord": INT4, "completed": BOOL, "pg_backend_pid": INT4);
    /// `$1` task, `$2` fire_at, `$3` token.
    COMPLETE_FIRING = "SELECT rendezvous.complete_firing($1::text, $2::timestamptz, $3::int8),
              pg_catalog.pg_backend_pid()"
        (TEXT, TIMESTAMPTZ, INT8) -> ("complete_firing": BOOL, "pg_backend_pid": INT4);
    /// `$1` task, `$2` fire_at, `$3` token, `$4` lease in seconds.
    RENEW_FIRING = "SELECT rendezvous.renew_firing($1::text, $2::timestamptz, $3::int8, pg_catalog.make_interval(secs => $4::float8))"
        (TEXT, TIMESTAMPTZ, INT8, FLOAT8) -> ("renew_firing": TIMESTAMPTZ);
    /// `$1` task, `$2` fire_at, `$3` token.
    RELEASE_FIRING = "SELECT rendezvous.release_firing($1::text, $2::timestamptz, $3::int8)"
        (TEXT, TIMESTAMPTZ, INT8) -> ("release_firing": BOOL);
    /// `$1` task, `$2` fire_at, `$3` token.
    ASSERT_FIRING = "SELECT rendezvous.assert_firing($1::text, $2::timestamptz, $3::int8)"
        (TEXT, TIMESTAMPTZ, INT8) -> ("assert_firing": VOID);
    /// Status of many firings at once (a read, not a claim): `$1` tasks, `$2` fire_ats; per
    /// input, whether it was ever claimed, whether it is done, and its remaining lease in seconds.
    FIRING_STATUS = "SELECT s.claimed, s.completed, extract(epoch FROM s.lease_remaining)::float8 AS lease_remaining
       FROM rendezvous.firing_states($1::text[], $2::timestamptz[]) s ORDER BY s.ord"
        (TEXT_ARRAY, TIMESTAMPTZ_ARRAY) -> ("claimed": BOOL, "completed": BOOL, "lease_remaining": FLOAT8);

    /// Create or update a task: `$1` task, `$2` schedule, `$3` time zone, `$4` overlap,
    /// `$5` catch-up, `$6` catch-up window and `$7` lease (seconds), `$8` max attempts, `$9` retry backoff (seconds).
    SCHEDULE_TASK = "SELECT rendezvous.schedule_task($1::text, $2::text, $3::text, $4::text, $5::text,
           pg_catalog.make_interval(secs => $6::float8), pg_catalog.make_interval(secs => $7::float8), $8::int4,
           pg_catalog.make_interval(secs => $9::float8))"
        (TEXT, TEXT, TEXT, TEXT, TEXT, FLOAT8, FLOAT8, INT4, FLOAT8) -> ("schedule_task": TIMESTAMPTZ);
    /// `$1` task.
    UNSCHEDULE_TASK = "SELECT rendezvous.unschedule_task($1::text)"
        (TEXT) -> ("unschedule_task": BOOL);
    /// `$1` task.
    PAUSE_TASK = "SELECT rendezvous.pause_task($1::text)"
        (TEXT) -> ("pause_task": VOID);
    /// `$1` task.
    RESUME_TASK = "SELECT rendezvous.resume_task($1::text)"
        (TEXT) -> ("resume_task": TIMESTAMPTZ);
    /// Fire times: `$1` schedule, `$2` time zone, `$3` after, `$4` until.
    FIRE_TIMES = "SELECT t FROM rendezvous.fire_times($1::text, $2::text, $3::timestamptz, $4::timestamptz) t"
        (TEXT, TEXT, TIMESTAMPTZ, TIMESTAMPTZ) -> ("t": TIMESTAMPTZ);
    /// The firings claimable now, with the database clock: `$1` at most this many.
    DUE_FIRINGS = "SELECT d.task_id, d.fire_at, d.claimable_since, d.attempts, d.failures,
           extract(epoch FROM d.lease)::float8 AS lease, pg_catalog.clock_timestamp() AS db_now
       FROM rendezvous.due_firings($1::int4) d"
        (INT4) -> ("task_id": TEXT, "fire_at": TIMESTAMPTZ, "claimable_since": TIMESTAMPTZ, "attempts": INT4,
            "failures": INT4, "lease": FLOAT8, "db_now": TIMESTAMPTZ);
    /// The database clock and when a scheduled firing may next become claimable.
    NEXT_DUE = "SELECT pg_catalog.clock_timestamp() AS db_now, rendezvous.next_due_at() AS next_due_at"
        () -> ("db_now": TIMESTAMPTZ, "next_due_at": TIMESTAMPTZ);
    /// A failed attempt: `$1` task, `$2` fire_at, `$3` token, `$4` error.
    FAIL_FIRING = "SELECT recorded, retry_at FROM rendezvous.fail_firing($1::text, $2::timestamptz, $3::int8, $4::text)"
        (TEXT, TIMESTAMPTZ, INT8, TEXT) -> ("recorded": BOOL, "retry_at": TIMESTAMPTZ);
}

/// Every `.rs` file under `src`, module directories included: what the client's and the
/// command's tests read to keep SQL out of every file but their `sql.rs`.
#[doc(hidden)]
pub fn source_files(src: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![src.to_path_buf()];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_listed_once_and_numbered_parameters_match() {
        let mut names: Vec<&str> = STATEMENTS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), STATEMENTS.len());
        for s in STATEMENTS {
            // Every declared parameter is used, and none beyond them.
            for n in 1..=s.params.len() {
                assert!(s.sql.contains(&format!("${n}")), "{}: ${n} unused", s.name);
            }
            assert!(!s.sql.contains(&format!("${}", s.params.len() + 1)), "{}: undeclared parameter", s.name);
        }
    }

    /// The contract test covers what is in [`STATEMENTS`]: SQL written anywhere else in the
    /// client would escape it. Doc comments (examples) and the tests' own SQL are fine.
    #[test]
    fn the_client_sends_no_sql_but_these() {
        let files = super::source_files(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
        assert!(
            files.iter().any(|p| p.ends_with("worker/control.rs")),
            "the walk reaches module directories"
        );
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let is_sql_file = path.file_name().unwrap() == "sql.rs";
            for (n, line) in code.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                if is_sql_file {
                    assert!(
                        !line.starts_with("pub const")
                            || line.starts_with("pub const $name: &str")
                            || line.starts_with("pub const STATEMENTS"),
                        "sql.rs:{}: declare statements inside sql_statements! {{}}",
                        n + 1
                    );
                    continue;
                }
                for verb in
                    ["\"SELECT ", "\"LISTEN ", "\"INSERT ", "\"UPDATE ", "\"DELETE ", "\"WITH ", "\"SET "]
                {
                    assert!(!line.contains(verb), "{}:{}: SQL outside sql.rs: {line}", path.display(), n + 1);
                }
            }
        }
    }
}
