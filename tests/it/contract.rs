//! The client↔extension contract: every statement the client sends (`rendezvous_client::sql`)
//! parses and describes against the installed extension with exactly the parameter types and
//! result columns the client code binds and reads, and the key the client computes locally
//! accepts and refuses what `rendezvous.firing_key` does.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rendezvous_client::firing::firing_key;
use rendezvous_client::{sql, Error};
use rendezvous_tests::TestDb;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

fn describe_params(types: &[Type]) -> String {
    let names: Vec<&str> = types.iter().map(Type::name).collect();
    format!("({})", names.join(", "))
}

fn describe_columns<'a>(columns: impl Iterator<Item = (&'a str, &'a Type)>) -> String {
    let cols: Vec<String> = columns.map(|(name, ty)| format!("{name} {}", ty.name())).collect();
    format!("({})", cols.join(", "))
}

/// How `statement` differs from what the server describes for its SQL (empty: it matches).
async fn mismatches(client: &tokio_postgres::Client, s: &sql::Statement) -> Vec<String> {
    let stmt = match client.prepare(s.sql).await {
        Ok(stmt) => stmt,
        Err(e) => {
            let why = e.as_db_error().map_or(e.to_string(), |d| d.message().to_owned());
            return vec![format!("sql::{}: does not prepare: {why}", s.name)];
        }
    };
    let mut out = Vec::new();
    let (want, got) = (describe_params(s.params), describe_params(stmt.params()));
    if want != got {
        out.push(format!("sql::{}: the server takes {got}, the client binds {want}", s.name));
    }
    let want = describe_columns(s.columns.iter().map(|(name, ty)| (*name, ty)));
    let got = describe_columns(stmt.columns().iter().map(|c| (c.name(), c.type_())));
    if want != got {
        out.push(format!("sql::{}: the server returns {got}, the client reads {want}", s.name));
    }
    out
}

/// Every statement of `statements` describes as declared; `who` names the sender in the failure.
async fn assert_all_describe(client: &tokio_postgres::Client, statements: &[sql::Statement], who: &str) {
    assert!(!statements.is_empty());
    let mut broken = Vec::new();
    for s in statements {
        broken.extend(mismatches(client, s).await);
    }
    assert!(
        broken.is_empty(),
        "the extension and {who} disagree on {} point(s):\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_statement_the_client_sends_describes_as_the_client_expects() {
    let db = TestDb::new("contract").await;
    assert_all_describe(&db.connect().await, sql::STATEMENTS, "the client").await;
}

/// The same for the `rendezvous` command's statements (status, admin, check, the fleet), with
/// the fleet's bookkeeping tables made first, as the fleet does.
#[tokio::test(flavor = "multi_thread")]
async fn every_statement_the_command_sends_describes_as_it_expects() {
    let db = TestDb::new("contract_cli").await;
    let client = db.connect().await;
    client.batch_execute(rendezvous_cli::sql::FLEET_SCHEMA).await.expect("the fleet's tables");
    assert_all_describe(&client, rendezvous_cli::sql::STATEMENTS, "the rendezvous command").await;
}

/// The check above fails on a changed parameter type, result column name or type, or a
/// missing function: shown here on altered copies of a real statement.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_signature_or_column_fails_the_check() {
    static NUMERIC_WEIGHT: &[Type] = &[Type::TEXT, Type::NUMERIC];
    static RENAMED: &[(&str, Type)] = &[("at", Type::TIMESTAMPTZ)];
    static RETYPED: &[(&str, Type)] = &[("heartbeat", Type::TIMESTAMP)];
    let db = TestDb::new("contract_neg").await;
    let client = db.connect().await;
    let heartbeat = sql::STATEMENTS.iter().find(|s| s.name == "HEARTBEAT").unwrap();
    assert_eq!(mismatches(&client, heartbeat).await, Vec::<String>::new());
    let altered = [
        sql::Statement { params: NUMERIC_WEIGHT, ..*heartbeat },
        sql::Statement { columns: RENAMED, ..*heartbeat },
        sql::Statement { columns: RETYPED, ..*heartbeat },
        sql::Statement { sql: "SELECT rendezvous.heartbeat($1, $2) AS at", ..*heartbeat },
        sql::Statement { sql: "SELECT rendezvous.heartbeat($1, $2, $3)", ..*heartbeat },
    ];
    for s in &altered {
        let found = mismatches(&client, s).await;
        assert_eq!(found.len(), 1, "{s:?}: {found:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_of_the_extension_lands_outside_its_schema() {
    let db = TestDb::new("contract_schema").await;
    let client = db.connect().await;
    let elsewhere: Vec<String> = client
        .query(
            "SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
               FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
               JOIN pg_catalog.pg_proc p ON p.oid = d.objid AND d.classid = 'pg_catalog.pg_proc'::regclass
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
              WHERE e.extname = 'pg_rendezvous' AND n.nspname <> 'rendezvous'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(elsewhere, Vec::<String>::new());
}

/// The client's default staleness is the server's (`rendezvous.default_staleness()`, the one
/// definition the live-set functions use).
#[tokio::test(flavor = "multi_thread")]
async fn the_client_default_staleness_is_the_servers() {
    let db = TestDb::new("contract_staleness").await;
    let client = db.connect().await;
    let seconds: f64 = client
        .query_one("SELECT extract(epoch FROM rendezvous.default_staleness())::float8", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(Duration::from_secs_f64(seconds), rendezvous_client::membership::DEFAULT_STALENESS);
}

/// The client's id limit is the server's (`rendezvous._max_id_bytes()`, which the argument
/// checks and the table constraints use).
#[tokio::test(flavor = "multi_thread")]
async fn the_client_id_limit_is_the_servers() {
    let db = TestDb::new("contract_ids").await;
    let client = db.connect().await;
    let max: i32 = client.query_one("SELECT rendezvous._max_id_bytes()", &[]).await.unwrap().get(0);
    assert_eq!(max as usize, rendezvous_client::MAX_ID_BYTES);
}

/// The client computes firing keys locally: it must produce the SQL function's string for
/// every instant the function takes, and refuse (before sending anything) what it refuses.
#[tokio::test(flavor = "multi_thread")]
async fn client_and_sql_accept_and_refuse_the_same_firing_keys() {
    let db = TestDb::new("contract_keys").await;
    let client = db.connect().await;
    let first_ad = UNIX_EPOCH - Duration::from_secs(62_135_596_800); // 0001-01-01T00:00:00Z
    let end = UNIX_EPOCH + Duration::from_secs(9_224_318_016_000); // 294277-01-01T00:00:00Z
    let y10k = UNIX_EPOCH + Duration::from_secs(253_402_300_800); // 10000-01-01T00:00:00Z
    let us = Duration::from_micros;
    let long = "x".repeat(257);
    let cases: Vec<(&str, SystemTime)> = vec![
        ("t", first_ad),
        ("t", first_ad - Duration::from_nanos(999)), // sent as first_ad: truncated toward 2000
        ("t", first_ad - us(1)),
        ("t", first_ad - Duration::from_secs(86_400 * 366 * 100)),
        ("t", y10k - us(1)),
        ("t", y10k),
        ("t", end - us(1)),
        ("t", UNIX_EPOCH),
        ("", UNIX_EPOCH),
        (&long, UNIX_EPOCH),
        (&long[..256], UNIX_EPOCH),
    ];
    for (task_id, fire_at) in cases {
        let local = firing_key(task_id, fire_at);
        let remote = client.query_one("SELECT rendezvous.firing_key($1, $2)", &[&task_id, &fire_at]).await;
        match (&local, &remote) {
            (Ok(key), Ok(row)) => assert_eq!(key, &row.get::<_, String>(0), "{task_id:?} at {fire_at:?}"),
            (Err(Error::InvalidArgument(_)), Err(e)) => {
                assert_eq!(
                    e.code(),
                    Some(&SqlState::INVALID_PARAMETER_VALUE),
                    "{task_id:?} at {fire_at:?}: {e}"
                )
            }
            _ => panic!("{task_id:?} at {fire_at:?}: client {local:?}, SQL {remote:?}"),
        }
    }
    // Past the end of timestamptz the server cannot even receive the instant; the client
    // refuses it itself.
    assert!(matches!(firing_key("t", end), Err(Error::InvalidArgument(_))));
    let err = client.query_one("SELECT rendezvous.firing_key($1, $2)", &[&"t", &end]).await.unwrap_err();
    assert!(err.code().is_some(), "{err}");
    // The dispatcher refuses a batch with a BC firing before claiming anything.
    let dispatcher = rendezvous_tests::dispatch::Dispatcher::connect(
        &db.url,
        "h",
        rendezvous_tests::dispatch::DispatcherOptions::default(),
    )
    .await
    .unwrap();
    let due = [
        rendezvous_client::Firing::new("ok", UNIX_EPOCH),
        rendezvous_client::Firing::new("bc", first_ad - us(1)),
    ];
    let view = rendezvous_client::HostSet::new(["h"]);
    let err = dispatcher.dispatch(&due, &view, |_| async { Ok(()) }).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let claimed: i64 = client.query_one("SELECT count(*) FROM rendezvous.firings", &[]).await.unwrap().get(0);
    assert_eq!(claimed, 0);
}

/// The suite runs against the PostgreSQL major it was asked for (scripts/test.sh sets
/// `RENDEZVOUS_EXPECT_PG_MAJOR` for each major's leg), and so do the private clusters tests
/// start themselves: both follow `PG_CONFIG`. Prints the server's version either way.
#[tokio::test]
async fn the_server_is_the_postgresql_major_asked_for() {
    let shared = rendezvous_tests::connect(&rendezvous_tests::cluster_url()).await;
    let private_cluster = rendezvous_tests::Cluster::start().await.unwrap();
    let private = rendezvous_tests::connect(&private_cluster.url()).await;
    let query = "SELECT version(), current_setting('server_version_num')::int / 10000";
    let mut majors = Vec::new();
    for (which, client) in [("shared cluster", &shared), ("private cluster", &private)] {
        let row = client.query_one(query, &[]).await.unwrap();
        let (version, major): (String, i32) = (row.get(0), row.get(1));
        println!("{which}: {version}");
        majors.push(major);
    }
    assert_eq!(majors[0], majors[1], "the private cluster runs another major than the shared one");
    if let Ok(expected) = std::env::var("RENDEZVOUS_EXPECT_PG_MAJOR") {
        assert_eq!(majors[0].to_string(), expected, "the suite ran against the wrong PostgreSQL");
    }
}
