//! Claims one firing or one run with a long lease, says so, and holds it until it is killed:
//! for tests that a claim ends with its holder's session, not its lease.
//! Usage: `claimer <database-url> firing <task-id> <fire-at-unix-secs> <host-id>`
//!        `claimer <database-url> run <workflow-ref> <host-id>`
//! Prints `claimed <run id or 0> <token>` once it holds the claim.
use std::time::{Duration, UNIX_EPOCH};

use rendezvous_client::runs::{claim_runs, ClaimRuns};
use rendezvous_client::{firing, Firing};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lease = Duration::from_secs(3600);
    let client = rendezvous_client::connect(args[1].as_str()).await.expect("connect");
    let (run_id, token) = match &args[2..] {
        [kind, task, fire_at, host] if kind == "firing" => {
            let f = Firing::new(task.clone(), UNIX_EPOCH + Duration::from_secs(fire_at.parse().unwrap()));
            let claim = firing::claim_firing(&client, &f, host, lease).await.expect("claim_firing");
            assert!(claim.claimed, "the firing was already held: {claim:?}");
            (0, claim.token.expect("a won claim has a token"))
        }
        [kind, workflow, host] if kind == "run" => {
            let refs = [workflow.as_str()];
            let options =
                ClaimRuns { lease, workflow_refs: Some(&refs), grace: Duration::ZERO, ..Default::default() };
            let claims = claim_runs(&client, host, &options).await.expect("claim_runs");
            let claim = claims.first().expect("a runnable run");
            (claim.run_id, claim.token)
        }
        _ => {
            eprintln!("usage: claimer <url> firing <task> <fire-at-secs> <host> | claimer <url> run <workflow> <host>");
            std::process::exit(2);
        }
    };
    println!("claimed {run_id} {token}");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}
