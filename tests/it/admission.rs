//! Idempotent spawn admission through the client: a key's life from first spawn to redelivery, and more.
use std::sync::Arc;

use rendezvous_client::{runs, spawn_run, Admission};
use rendezvous_tests::TestDb;
use serde_json::json;
use tokio::sync::Barrier;
use tokio_postgres::error::SqlState;

async fn runs_with_key(client: &tokio_postgres::Client, tenant: &str, key: &str) -> Vec<i64> {
    client
        .query(
            "SELECT run_id FROM rendezvous.runs WHERE tenant_id = $1 AND dispatch_key = $2",
            &[&tenant, &key],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `n` callers on `n` separate connections spawn the same key at the same moment.
async fn concurrent_spawns(
    db: &TestDb,
    n: usize,
    tenant: &str,
    key: &str,
    isolation: &str,
) -> Vec<Admission> {
    let mut clients = Vec::new();
    for _ in 0..n {
        let c = db.connect().await;
        c.batch_execute(&format!("SET default_transaction_isolation = '{isolation}'")).await.unwrap();
        clients.push(c);
    }
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let barrier = barrier.clone();
        let (tenant, key) = (tenant.to_owned(), key.to_owned());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            spawn_run(&c, &tenant, "wf/report", &json!({ "caller": i }), Some(&key)).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap().expect("every caller gets an answer, never an error"));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dispatch_key_admits_one_run_and_no_key_admits_every_call() {
    let db = TestDb::new("adm_seed").await;
    let client = db.connect().await;
    // 1. Spawn with K: one run R.
    let first = spawn_run(&client, "tenant-1", "wf/a", &json!({"n": 1}), Some("K")).await.unwrap();
    assert!(first.created);
    assert_eq!(runs_with_key(&client, "tenant-1", "K").await, [first.run_id]);
    // 2. Again with K: no new run, R returned.
    let again = spawn_run(&client, "tenant-1", "wf/a", &json!({"n": 1}), Some("K")).await.unwrap();
    assert_eq!(again, Admission { run_id: first.run_id, created: false, same_request: true });
    assert_eq!(runs_with_key(&client, "tenant-1", "K").await, [first.run_id]);
    // 3. 20 concurrent spawns with the same key on 20 connections: exactly one run.
    let results = concurrent_spawns(&db, 20, "tenant-1", "K20", "read committed").await;
    let runs = runs_with_key(&client, "tenant-1", "K20").await;
    assert_eq!(runs.len(), 1);
    assert!(results.iter().all(|a| a.run_id == runs[0]));
    assert_eq!(results.iter().filter(|a| a.created).count(), 1);
    // 4. No key, twice: two distinct runs.
    let a = spawn_run(&client, "tenant-1", "wf/a", &json!({}), None).await.unwrap();
    let b = spawn_run(&client, "tenant-1", "wf/a", &json!({}), None).await.unwrap();
    assert!(a.created && b.created);
    assert_ne!(a.run_id, b.run_id);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_redelivery_under_every_isolation_level() {
    let db = TestDb::new("adm_iso").await;
    let client = db.connect().await;
    for isolation in ["read committed", "repeatable read", "serializable"] {
        for round in 0..15 {
            let key = format!("{isolation}/{round}");
            let results = concurrent_spawns(&db, 20, "t", &key, isolation).await;
            let runs = runs_with_key(&client, "t", &key).await;
            assert_eq!(runs.len(), 1, "{key}: {runs:?}");
            assert!(results.iter().all(|a| a.run_id == runs[0]), "{key}: {results:?}");
            assert_eq!(results.iter().filter(|a| a.created).count(), 1, "{key}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn inside_the_callers_transaction() {
    let db = TestDb::new("adm_tx").await;
    let mut client = db.connect().await;
    // A rolled-back transaction does not leave the key taken.
    let tx = client.transaction().await.unwrap();
    let inside = spawn_run(&tx, "t", "wf", &json!({}), Some("rollback-me")).await.unwrap();
    assert!(inside.created);
    tx.rollback().await.unwrap();
    let after = spawn_run(&client, "t", "wf", &json!({}), Some("rollback-me")).await.unwrap();
    assert!(after.created);
    assert_ne!(after.run_id, inside.run_id);
    // Committed with the caller's own write.
    let tx = client.transaction().await.unwrap();
    let run = spawn_run(&tx, "t", "wf", &json!({}), Some("with-my-write")).await.unwrap();
    tx.execute("CREATE TABLE my_table AS SELECT 1 AS x", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(runs_with_key(&client, "t", "with-my-write").await, [run.run_id]);

    // REPEATABLE READ: a run committed by someone else after our snapshot is a 40001 for the
    // caller to retry (the whole transaction); retried, it returns that run.
    let other = db.connect().await;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    tx.query_one("SELECT 1", &[]).await.unwrap(); // take the snapshot
    let theirs = spawn_run(&other, "t", "wf", &json!({}), Some("late")).await.unwrap();
    let err = spawn_run(&tx, "t", "wf", &json!({}), Some("late")).await.unwrap_err();
    assert!(err.is_serialization_failure(), "{err:?}");
    tx.rollback().await.unwrap();
    let retried = spawn_run(&client, "t", "wf", &json!({}), Some("late")).await.unwrap();
    assert_eq!(retried, Admission { run_id: theirs.run_id, created: false, same_request: true });
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_duplicates_of_another_request_and_purge() {
    let db = TestDb::new("adm_misc").await;
    let client = db.connect().await;
    let a = spawn_run(&client, "tenant-a", "wf", &json!({}), Some("same-key")).await.unwrap();
    let b = spawn_run(&client, "tenant-b", "wf", &json!({}), Some("same-key")).await.unwrap();
    assert!(a.created && b.created);
    assert_ne!(a.run_id, b.run_id);

    // A repeat carrying another workflow or input is still a duplicate, and says so.
    let other_input = spawn_run(&client, "tenant-a", "wf", &json!({"x": 1}), Some("same-key")).await.unwrap();
    assert_eq!(other_input, Admission { run_id: a.run_id, created: false, same_request: false });
    let other_wf = spawn_run(&client, "tenant-a", "wf2", &json!({}), Some("same-key")).await.unwrap();
    assert!(!other_wf.created && !other_wf.same_request);
    // Identical requests without a key are two runs: nothing dedups by content.
    let x = spawn_run(&client, "tenant-a", "wf", &json!({"x": 1}), None).await.unwrap();
    let y = spawn_run(&client, "tenant-a", "wf", &json!({"x": 1}), None).await.unwrap();
    assert_ne!(x.run_id, y.run_id);

    // Purge: only finished runs older than the bound; a purged key admits a new run.
    assert_eq!(runs::purge_runs(&client, std::time::Duration::ZERO).await.unwrap(), 0);
    // Run it to success: claim (everything admitted so far), complete the keyed one.
    let claims = rendezvous_client::runs::claim_runs(
        &client,
        "host-a",
        &rendezvous_client::runs::ClaimRuns {
            max: 100,
            grace: std::time::Duration::ZERO,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mine = claims.iter().find(|c| c.run_id == a.run_id).expect("the keyed run was claimed");
    assert!(rendezvous_client::runs::complete_run(&client, a.run_id, mine.token, None).await.unwrap());
    assert_eq!(runs::purge_runs(&client, std::time::Duration::from_secs(3600)).await.unwrap(), 0);
    assert_eq!(runs::purge_runs(&client, std::time::Duration::ZERO).await.unwrap(), 1);
    let fresh = spawn_run(&client, "tenant-a", "wf", &json!({}), Some("same-key")).await.unwrap();
    assert!(fresh.created);
    assert_ne!(fresh.run_id, a.run_id);
    // The purged run is gone: its old token completes nothing.
    assert!(!rendezvous_client::runs::complete_run(&client, a.run_id, mine.token, None).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_admission_input_gets_a_sqlstate() {
    let db = TestDb::new("adm_bad").await;
    let client = db.connect().await;
    let cases: &[(&str, SqlState)] = &[
        ("SELECT rendezvous.spawn_run(NULL, 'wf')", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.spawn_run('', 'wf')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run('t', NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.spawn_run('t', '')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run('t', 'wf', NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.spawn_run('t', 'wf', '{}', '')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run('t', 'wf', '{}', repeat('k', 513))", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run(repeat('t', 257), 'wf')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run('t', 'wf', 'not json')", SqlState::INVALID_TEXT_REPRESENTATION),
        ("SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 0)", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.spawn_run('t', 'wf', '{}', NULL, 3, '-1 s')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.purge_runs('-1 day')", SqlState::INVALID_PARAMETER_VALUE),
    ];
    for (query, code) in cases {
        let err = client.query(*query, &[]).await.expect_err(query);
        assert_eq!(err.code(), Some(code), "{query}: {err:?}");
    }
    let n: i64 = client.query_one("SELECT count(*) FROM rendezvous.runs", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "nothing was admitted by a refused call");
}
