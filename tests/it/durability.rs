//! What a caller was told survives a crash, whatever its session's `synchronous_commit`: an
//! epoch bump, a firing token and a completion, once acknowledged, are flushed before the
//! acknowledgement (the extension forces those commits), so the next leader never gets an
//! epoch already handed out and a completed firing never runs again.
use std::time::{Duration, SystemTime};

use rendezvous_cli::cluster::{Cluster, ClusterOptions};

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_epochs_tokens_and_completions_survive_a_crash_under_synchronous_commit_off() {
    // The WAL writer flushes asynchronous commits only every 10 s: a crash before that loses them.
    let settings = [("fsync", "off"), ("wal_writer_delay", "10s")];
    let options = ClusterOptions {
        settings: settings.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        ..ClusterOptions::default()
    };
    let cluster = Cluster::start_with(&options).await.unwrap();
    let client = rendezvous_tests::connect(&cluster.url()).await;
    client
        .batch_execute(
            "CREATE TABLE canary (x integer); INSERT INTO canary VALUES (1);
             SET synchronous_commit = off;",
        )
        .await
        .unwrap();
    let fire_at = SystemTime::now() - Duration::from_secs(60);
    let lead = "SELECT epoch FROM rendezvous.try_lead('g', 'a')";
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 1);
    client.execute("SELECT rendezvous.resign('g')", &[]).await.unwrap();
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 2);
    let claim = "SELECT claimed, token FROM rendezvous.claim_firing($1, $2, 'h')";
    for task in ["done", "claimed"] {
        let row = client.query_one(claim, &[&task, &fire_at]).await.unwrap();
        assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 1));
    }
    let complete = "SELECT rendezvous.complete_firing('done', $1, 1)";
    assert!(client.query_one(complete, &[&fire_at]).await.unwrap().get::<_, bool>(0));
    // Last, an ordinary asynchronous commit: the crash should take it, showing the setup loses
    // what is not forced to disk.
    client.batch_execute("UPDATE canary SET x = 2").await.unwrap();

    cluster.crash_restart().unwrap();
    let client = rendezvous_tests::connect(&cluster.url()).await;
    let canary: i32 = client.query_one("SELECT x FROM canary", &[]).await.unwrap().get(0);
    assert_eq!(canary, 1, "the crash did not lose an asynchronous commit: this test proves nothing");
    let epoch: i64 = client.query_one("SELECT epoch FROM rendezvous.leader('g')", &[]).await.unwrap().get(0);
    assert_eq!(epoch, 2, "an acknowledged epoch bump was lost");
    let rows = client
        .query(
            "SELECT task_id, token, completed_at IS NOT NULL FROM rendezvous.status_firings ORDER BY task_id",
            &[],
        )
        .await
        .unwrap();
    let firings: Vec<(String, i64, bool)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        firings,
        vec![("claimed".into(), 1, false), ("done".into(), 1, true)],
        "claims or completions lost"
    );
    // The next leader's epoch is above every epoch handed out before the crash.
    assert_eq!(client.query_one(lead, &[]).await.unwrap().get::<_, i64>(0), 3);
}
