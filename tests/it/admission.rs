//! Idempotent spawn admission through the client: a key's life from first spawn to redelivery, and more.
use std::sync::Arc;

use rendezvous_client::{runs, spawn_run, Admission, NewRun};
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

/// Batch admission under contention: 16 callers on 16 connections each send 20 batches of 60
/// runs whose dispatch keys overlap every other caller's (and repeat within a batch; some runs
/// have no key), alongside single spawn_run calls on the same keys. Every key is admitted once:
/// one answer says created, every answer names the same run, the table holds one row per key;
/// no batch deadlocks; every keyless run is its own.
#[tokio::test(flavor = "multi_thread")]
async fn batches_admit_each_key_once_under_16_concurrent_callers() {
    const CALLERS: usize = 16;
    const BATCHES: usize = 20;
    const KEYS: usize = 400;
    let db = TestDb::new("admission_batches").await;
    let barrier = Arc::new(Barrier::new(CALLERS));
    let mut callers = Vec::new();
    for c in 0..CALLERS {
        let client = db.connect().await;
        let barrier = barrier.clone();
        callers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut answers: Vec<(Option<String>, Admission)> = Vec::new();
            for b in 0..BATCHES {
                // Keys from a window that slides differently per caller, one repeated, every
                // tenth run keyless.
                let keys: Vec<Option<String>> = (0..60)
                    .map(|i| (i % 10 != 9).then(|| format!("k{}", (c * 37 + b * 53 + (i % 59) * 7) % KEYS)))
                    .collect();
                let batch: Vec<NewRun> = keys
                    .iter()
                    .map(|k| {
                        let run = NewRun::new("wf").input(json!({ "c": c }));
                        match k {
                            Some(k) => run.dispatch_key(k),
                            None => run,
                        }
                    })
                    .collect();
                let admitted = runs::spawn_runs(&client, "acme", &batch).await.expect("a batch is admitted");
                assert_eq!(admitted.len(), batch.len());
                answers.extend(keys.into_iter().zip(admitted));
                // A single admission of one of the keys, racing the batches.
                let key = format!("k{}", (c * 11 + b) % KEYS);
                let single = spawn_run(&client, "acme", "wf", &json!({ "c": c }), Some(&key)).await.unwrap();
                answers.push((Some(key), single));
            }
            answers
        }));
    }
    let mut by_key: std::collections::HashMap<String, Vec<Admission>> = Default::default();
    let mut keyless = Vec::new();
    for caller in callers {
        for (key, admission) in caller.await.unwrap() {
            match key {
                Some(k) => by_key.entry(k).or_default().push(admission),
                None => keyless.push(admission),
            }
        }
    }
    let admin = db.connect().await;
    for (key, answers) in &by_key {
        assert_eq!(answers.iter().filter(|a| a.created).count(), 1, "{key}: {answers:?}");
        assert!(answers.iter().all(|a| a.run_id == answers[0].run_id), "{key}: {answers:?}");
        assert_eq!(runs_with_key(&admin, "acme", key).await, vec![answers[0].run_id], "{key}");
    }
    assert!(keyless.iter().all(|a| a.created));
    let distinct: std::collections::HashSet<i64> = keyless.iter().map(|a| a.run_id).collect();
    assert_eq!(distinct.len(), keyless.len(), "a keyless run answered twice");
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM rendezvous.runs WHERE tenant_id = 'acme'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows as usize, by_key.len() + keyless.len());
}

/// A batch's answers in its order; a key repeated within it is admitted at its first place; a
/// repeat says whether it carried the same request; bad elements name their place and SQLSTATE.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_answers_in_order_and_refuses_bad_elements_by_place() {
    let db = TestDb::new("admission_batch_shape").await;
    let client = db.connect().await;
    let first = spawn_run(&client, "acme", "wf", &json!({ "n": 1 }), Some("old")).await.unwrap();
    let batch = [
        NewRun::new("wf").input(json!({ "n": 1 })).dispatch_key("old"),
        NewRun::new("wf").dispatch_key("new"),
        NewRun::new("other").dispatch_key("new"),
        NewRun::new("wf"),
        NewRun::new("wf").input(json!({ "n": 2 })).dispatch_key("old"),
    ];
    let a = runs::spawn_runs(&client, "acme", &batch).await.unwrap();
    assert_eq!(a[0], Admission { run_id: first.run_id, created: false, same_request: true });
    assert!(a[1].created);
    assert_eq!(a[2], Admission { run_id: a[1].run_id, created: false, same_request: false });
    assert!(a[3].created && a[3].run_id != a[1].run_id);
    assert_eq!(a[4], Admission { run_id: first.run_id, created: false, same_request: false });
    assert!(runs::spawn_runs(&client, "acme", &[]).await.unwrap().is_empty());

    let refused = |batch: Vec<NewRun<'static>>| {
        let client = &client;
        async move { runs::spawn_runs(client, "acme", &batch).await.unwrap_err() }
    };
    let e = refused(vec![NewRun::new("wf"), NewRun::new("")]).await;
    assert_eq!(e.sqlstate(), Some(&SqlState::INVALID_PARAMETER_VALUE), "{e}");
    assert!(e.to_string().contains("workflow_refs[2]"), "{e}");
    let policy = runs::RetryPolicy { max_attempts: 0, backoff: std::time::Duration::from_secs(1) };
    let e = refused(vec![NewRun::new("wf").policy(policy)]).await;
    assert!(e.to_string().contains("max_attempts[1]"), "{e}");
    let e = refused((0..10_001).map(|_| NewRun::new("wf")).collect()).await;
    assert!(e.to_string().contains("at most 10000"), "{e}");
    let e = runs::spawn_runs(&client, "", &[NewRun::new("wf")]).await.unwrap_err();
    assert_eq!(e.sqlstate(), Some(&SqlState::INVALID_PARAMETER_VALUE), "{e}");
    let n: i64 = client.query_one("SELECT count(*) FROM rendezvous.runs", &[]).await.unwrap().get(0);
    assert_eq!(n, 3, "a refused batch admits nothing");
}
