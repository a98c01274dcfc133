//! Fencing cost: `rendezvous.assert_leader` called from another session than the leader's (a
//! leader's writes through a pool), with no other locks and while another session holds 10,000
//! unrelated advisory locks, beside the lookup 0.1.0 made (reading `pg_locks`, whose cost grows
//! with every lock any session holds). Server-side loops, so no round trip is counted.
use std::time::Duration;

const CALLS: i32 = 2_000;

async fn per_call(client: &tokio_postgres::Client, body: &str) -> Duration {
    let sql = format!("DO $$ BEGIN FOR i IN 1..{CALLS} LOOP {body}; END LOOP; END $$",);
    let start = std::time::Instant::now();
    client.batch_execute(&sql).await.unwrap();
    start.elapsed() / CALLS as u32
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh fencing");
        return;
    };
    let leader = rendezvous_client::connect(&url).await.unwrap();
    let epoch: i64 = leader
        .query_one("SELECT epoch FROM rendezvous.try_lead('bench-fence', 'a')", &[])
        .await
        .unwrap()
        .get(0);
    let lock_id: i32 = leader
        .query_one("SELECT lock_id FROM rendezvous.leaders WHERE group_name = 'bench-fence'", &[])
        .await
        .unwrap()
        .get(0);
    let writer = rendezvous_client::connect(&url).await.unwrap();
    let ours = format!("PERFORM rendezvous.assert_leader('bench-fence', {epoch})");
    let pg_locks = format!(
        "PERFORM 1 FROM pg_catalog.pg_locks k WHERE k.locktype = 'advisory' AND k.granted
           AND k.objid = {lock_id} AND k.objsubid = rendezvous._leader_lock_space()"
    );
    let quiet = (per_call(&writer, &ours).await, per_call(&writer, &pg_locks).await);
    let hog = rendezvous_client::connect(&url).await.unwrap();
    hog.batch_execute("SELECT count(pg_catalog.pg_advisory_lock(g)) FROM generate_series(1, 10000) g")
        .await
        .unwrap();
    let busy = (per_call(&writer, &ours).await, per_call(&writer, &pg_locks).await);
    println!("Fencing check from another session than the leader's, per call, {CALLS} calls in a server-side loop\n");
    println!("| check | no other locks | another session holds 10,000 advisory locks |");
    println!("|---|---:|---:|");
    println!("| pg_rendezvous assert_leader (0.2.0) | {} | {} |", us(quiet.0), us(busy.0));
    println!("| a pg_locks lookup of the lock (0.1.0's way, baseline) | {} | {} |", us(quiet.1), us(busy.1));
    hog.batch_execute("SELECT pg_catalog.pg_advisory_unlock_all()").await.unwrap();
    leader.batch_execute("SELECT rendezvous.resign('bench-fence')").await.unwrap();
}
