//! Claims one firing or one run, says so, and holds it until it is killed: for tests and the
//! takeover bench, which end the holder (SIGKILL, a terminated backend, SIGSTOP, a dropped
//! network path) and time how soon another host holds the work.
//! Usage: `claimer <database-url> firing <task-id> <fire-at-unix-secs> <host-id>`
//!        `claimer <database-url> run <workflow-ref> <host-id>`
//! With `CLAIMER_LEASE_MS` set, the lease is that long and renewed every third of it, as the
//! work runtime does (a live holder keeps its claim; a stopped one loses it at the lease).
//! Without it, the lease is an hour and never renewed (only the session's end frees the claim).
//! Prints `claimed <run id or 0> <token> <backend pid>` once it holds the claim.
use std::time::{Duration, UNIX_EPOCH};

use rendezvous_client::runs::{claim_runs, renew_run, ClaimRuns};
use rendezvous_client::{firing, Firing};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let renewed = std::env::var("CLAIMER_LEASE_MS").ok().map(|ms| Duration::from_millis(ms.parse().unwrap()));
    let lease = renewed.unwrap_or(Duration::from_secs(3600));
    let client = rendezvous_client::connect(args[1].as_str()).await.expect("connect");
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.expect("backend pid").get(0);
    enum Held {
        Firing(Firing),
        Run(i64),
    }
    let (held, run_id, token) = match &args[2..] {
        [kind, task, fire_at, host] if kind == "firing" => {
            let f = Firing::new(task.clone(), UNIX_EPOCH + Duration::from_secs(fire_at.parse().unwrap()));
            let claim = firing::claim_firing(&client, &f, host, lease).await.expect("claim_firing");
            assert!(claim.claimed, "the firing was already held: {claim:?}");
            (Held::Firing(f), 0, claim.token.expect("a won claim has a token"))
        }
        [kind, workflow, host] if kind == "run" => {
            let refs = [workflow.as_str()];
            let options =
                ClaimRuns { lease, workflow_refs: Some(&refs), grace: Duration::ZERO, ..Default::default() };
            let claims = claim_runs(&client, host, &options).await.expect("claim_runs");
            let claim = claims.first().expect("a runnable run");
            (Held::Run(claim.run_id), claim.run_id, claim.token)
        }
        _ => {
            eprintln!("usage: claimer <url> firing <task> <fire-at-secs> <host> | claimer <url> run <workflow> <host>");
            std::process::exit(2);
        }
    };
    println!("claimed {run_id} {token} {pid}");
    let Some(lease) = renewed else {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return;
    };
    loop {
        tokio::time::sleep(lease / 3).await;
        let renewal = match &held {
            Held::Firing(f) => firing::renew_firing(&client, f, token, lease).await,
            Held::Run(run_id) => renew_run(&client, *run_id, token, lease).await,
        };
        if !matches!(renewal, Ok(Some(_))) {
            // Taken over (or the connection is gone): nothing more to hold.
            return;
        }
    }
}
