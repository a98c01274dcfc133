//! The bad-input sweep: every function and overload the extension installs (every one in its
//! schema: the portable edition installed by psql has no extension row), called with NULL,
//! empty, huge, malformed, non-finite and out-of-range values in each argument in turn. Any
//! error must carry a proper SQLSTATE (never XX000, the internal-error code a Rust panic or an
//! unchecked SPI result turns into, nor P0001, a RAISE without a code), no call may run into
//! the statement timeout (57014), and the backend must live through all of it: the server log
//! shows no crashed process afterwards.
use std::time::Duration;

use rendezvous_tests::TestDb;

/// Values to try for an argument of a SQL type: the first is an ordinary one, the rest are bad.
fn values(sql_type: &str) -> &'static [&'static str] {
    match sql_type {
        "text" => &[
            "'k'",
            "NULL",
            "''",
            "repeat('x', 300)",
            "repeat('é', 100000)",
            "repeat('x', 1048577)",
            "'{a,b'",
        ],
        "text[]" => &[
            "ARRAY['a','b']",
            "NULL",
            "'{}'::text[]",
            "ARRAY[NULL]::text[]",
            "ARRAY['', repeat('x', 300)]",
            "(SELECT array_agg(g::text) FROM generate_series(1, 100001) g)",
        ],
        "double precision" => &["1", "NULL", "'NaN'", "'Infinity'", "'-Infinity'", "0", "-1", "1e308"],
        "double precision[]" => &[
            "ARRAY[1, 2]::float8[]",
            "NULL",
            "'{}'::float8[]",
            "ARRAY[NULL]::float8[]",
            "ARRAY['NaN', 'Infinity']::float8[]",
            "ARRAY[0, -1]::float8[]",
        ],
        "integer" => &["1", "NULL", "0", "-1", "2147483647", "-2147483648"],
        "bigint" => &["1", "NULL", "0", "-1", "9223372036854775807", "-9223372036854775808"],
        "bigint[]" => &["ARRAY[1, 1]::bigint[]", "NULL", "'{}'::bigint[]", "ARRAY[NULL]::bigint[]"],
        "boolean" => &["false", "NULL"],
        "oid" => &["10", "NULL", "0", "4294967295"],
        "integer[]" => &[
            "ARRAY[1, 2]::integer[]",
            "NULL",
            "'{}'::integer[]",
            "ARRAY[NULL]::integer[]",
            "ARRAY[-2147483648, 2147483647]::integer[]",
            "array_fill(7, ARRAY[100000])",
        ],
        "bytea" => &["'\\x6b'", "NULL", "''", "decode(repeat('ff', 100000), 'hex')"],
        "date" => &["'2026-01-01'", "NULL", "'infinity'", "'-infinity'", "'4713-01-01 BC'", "'5874897-12-31'"],
        "timestamp without time zone" => &[
            "'2026-01-01 00:00'",
            "NULL",
            "'infinity'",
            "'-infinity'",
            "'4713-01-01 00:00 BC'",
            "'294276-12-31 23:59:59'",
        ],
        // The portable edition's parsed schedule (its helpers take one).
        "rendezvous._cron_schedule" => &[
            "rendezvous._cron_parse('* * * * *', 'UTC')",
            "NULL",
            "ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            "ROW(0, '{}', '{}', '{}', '{}', '{}', false, false, '{}', '{}', false, false, false, false, false)",
        ],
        "interval" => &["'1 min'", "NULL", "'0'", "'-1 s'", "'1000000 years'", "'1 microsecond'"],
        "timestamp with time zone" => &[
            "'2026-01-01 00:00+00'",
            "NULL",
            "'infinity'",
            "'-infinity'",
            "'4713-01-01 00:00+00 BC'",
            "'294276-12-31 00:00+00'",
        ],
        "timestamp with time zone[]" => &[
            "ARRAY['2026-01-01 00:00+00', '2026-01-01 00:00+00']::timestamptz[]",
            "NULL",
            "'{}'::timestamptz[]",
            "ARRAY[NULL]::timestamptz[]",
            "ARRAY['infinity', '0044-03-15 00:00+00 BC']::timestamptz[]",
        ],
        "jsonb" => &["'{}'", "NULL", "'[]'", "'null'", "'\"s\"'"],
        "jsonb[]" => &["ARRAY['{}', '{}']::jsonb[]", "NULL", "'{}'::jsonb[]", "ARRAY[NULL]::jsonb[]"],
        "interval[]" => &[
            "ARRAY['1 s', '1 s']::interval[]",
            "NULL",
            "'{}'::interval[]",
            "ARRAY[NULL]::interval[]",
            "ARRAY['-1 s', 'infinity']::interval[]",
        ],
        other => panic!("the sweep has no values for SQL type {other}: add some"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_function_with_bad_input_gets_a_sqlstate_and_the_backend_lives() {
    let db = TestDb::new("sweep").await;
    let client = db.connect().await;
    // No call may take long: one that runs into the statement timeout (a lock wait, a search
    // that never ends on a NULL) is a failure of the sweep, reported with the rest.
    client.batch_execute("SET statement_timeout = '20s'").await.unwrap();
    let functions = client
        .query(
            "SELECT p.oid::regprocedure::text,
                    format('%I.%I', n.nspname, p.proname),
                    coalesce((SELECT array_agg(pg_catalog.format_type(t, NULL) ORDER BY i)
                                FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)), '{}'),
                    p.proretset
               FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'rendezvous'
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    assert!(functions.len() > 30, "found only {} functions", functions.len());
    let mut calls = 0;
    let mut failures = Vec::new();
    for f in &functions {
        let (signature, name, types, returns_set): (String, String, Vec<String>, bool) =
            (f.get(0), f.get(1), f.get(2), f.get(3));
        let ordinary: Vec<&str> = types.iter().map(|t| values(t)[0]).collect();
        // Every argument NULL at once, then each argument in turn through its bad values.
        let mut argument_lists = vec![vec!["NULL"; types.len()]];
        for (i, t) in types.iter().enumerate() {
            for v in values(t) {
                let mut args = ordinary.clone();
                args[i] = v;
                argument_lists.push(args);
            }
        }
        for args in argument_lists {
            // Typed arguments, so each call reaches exactly this overload.
            let typed: Vec<String> = args.iter().zip(&types).map(|(v, t)| format!("({v})::{t}")).collect();
            let call = format!("{name}({})", typed.join(", "));
            let query = if returns_set { format!("SELECT * FROM {call}") } else { format!("SELECT {call}") };
            calls += 1;
            if let Err(e) = client.batch_execute(&query).await {
                let code = e.code().map(|c| c.code().to_owned());
                match code.as_deref() {
                    None => panic!("{signature}: the connection failed on {query}: {e}"),
                    Some(code @ ("XX000" | "P0001" | "57014")) => {
                        let message = e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
                        failures.push(format!("{query}: {code} {message}"))
                    }
                    Some(_) => {}
                }
            }
            // A claim that took a leader lock would otherwise stay held for the next calls.
            client.batch_execute("SELECT pg_catalog.pg_advisory_unlock_all()").await.unwrap();
        }
    }
    assert!(failures.is_empty(), "calls without a proper SQLSTATE:\n{}", failures.join("\n"));
    assert!(calls > 500, "only {calls} calls");
    // The backend lived through every call, and so did every other process.
    assert_eq!(client.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    if let Some(dir) = std::env::var_os("RENDEZVOUS_CLUSTER_DIR") {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let log = std::fs::read_to_string(std::path::Path::new(&dir).join("server.log")).unwrap_or_default();
        for sign in ["terminated by signal", "was terminated by exception", "server process (PID"] {
            assert!(!log.contains(sign), "the server log shows a crashed backend ({sign})");
        }
    }
}
