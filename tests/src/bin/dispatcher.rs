//! A firing dispatcher as a real OS process, for tests that kill it mid-firing.
//! Usage: `dispatcher <database-url> <host-id> <hosts,comma,separated> <firings> <fire-at-unix-secs> <lease-ms> <work-ms>`
//! Each execution first records its start and its claim's time (`executions`), then sleeps, then writes its effect
//! and completes the firing in one transaction, fenced by `assert_firing` (`effects`): the
//! pattern that makes a firing's database effects exactly-once. Prints the report at the end.
use std::time::{Duration, UNIX_EPOCH};

use rendezvous_client::firing::{assert_firing, complete_firing};
use rendezvous_client::hrw::HostSet;
use rendezvous_client::Clock;
use rendezvous_client::Firing;
use rendezvous_tests::dispatch::{Dispatcher, DispatcherOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, host, hosts, n, fire_at, lease_ms, work_ms] = &args[..] else {
        eprintln!(
            "usage: dispatcher <url> <host-id> <hosts> <firings> <fire-at-unix-secs> <lease-ms> <work-ms>"
        );
        std::process::exit(2);
    };
    let fire_at = UNIX_EPOCH + Duration::from_secs(fire_at.parse().unwrap());
    let due: Vec<Firing> =
        (0..n.parse::<usize>().unwrap()).map(|i| Firing::new(format!("task-{i}"), fire_at)).collect();
    let view = HostSet::new(hosts.split(','));
    let options = DispatcherOptions::default()
        .with_grace(Duration::from_millis(50))
        .with_lease(Duration::from_millis(lease_ms.parse().unwrap()))
        .with_renew_every(None)
        .with_poll(Duration::from_millis(100))
        .with_max_in_flight(16)
        .with_clock(Clock::Database);
    let dispatcher = Dispatcher::connect(url, host, options).await.expect("connect");
    let work_for = Duration::from_millis(work_ms.parse().unwrap());
    let (effects, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let effects = std::sync::Arc::new(tokio::sync::Mutex::new(effects));
    let report = dispatcher
        .dispatch(&due, &view, |ctx| {
            let effects = effects.clone();
            let client = dispatcher.client();
            async move {
                client
                    .execute(
                        "INSERT INTO executions (firing_key, token, host_id, claimed_at)
                         SELECT $1, $2, $3, f.claimed_at FROM rendezvous.firings f WHERE f.firing_key = $1 AND f.token = $2",
                        &[&ctx.key, &ctx.token, &ctx.host_id],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::time::sleep(work_for).await;
                let mut effects = effects.lock().await;
                let tx = effects.transaction().await.map_err(|e| e.to_string())?;
                match assert_firing(&tx, &ctx.firing, ctx.token).await {
                    Ok(()) => {
                        tx.execute("INSERT INTO effects (firing_key, token) VALUES ($1, $2)", &[&ctx.key, &ctx.token])
                            .await
                            .map_err(|e| e.to_string())?;
                        if complete_firing(&tx, &ctx.firing, ctx.token).await.map_err(|e| e.to_string())? {
                            tx.commit().await.map_err(|e| e.to_string())?;
                        }
                    }
                    Err(_) => println!("fenced-write-refused {}", ctx.key),
                }
                Ok(())
            }
        })
        .await
        .expect("dispatch");
    println!("report {report:?}");
}
