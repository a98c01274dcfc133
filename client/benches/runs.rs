//! Runs executed by the work runtime, measured (not a test): 4 `Worker` hosts with a
//! trivial `workflow` handler,
//! 1. throughput: a backlog of admitted runs drained at 1, 4 and 16 concurrent handlers per
//!    host (default durability), runs executed per second, with the client's defaults and with
//!    a local queue of runs kept full (`prefetch` 500 with no `queue_horizon`);
//! 2. pickup latency: runs admitted at a steady rate while the hosts idle, from the admission's
//!    acknowledgement to the handler's start (both on this machine's clock), p50 and p99;
//! 3. CPU per run while the defaults drain the backlog: the server's (the postmaster and every
//!    backend, including those that ended meanwhile) and this process's (the 4 hosts), from
//!    /proc; `client/benches/peers/common.mjs` measures the peers' the same way.
//!
//! The plain-SQL floor beside it (a `FOR UPDATE SKIP LOCKED` worker loop in pgbench, two
//! transactions per job) is `scripts/bench/runs_pgbench.sh`; `scripts/bench.sh runs` runs both.
//! Run: `scripts/bench.sh runs`, or `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-client --bench runs`.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rendezvous_client::{Job, Worker, WorkerOptions};

const HOSTS: usize = 4;
/// The runtime's fastest configuration here: a local queue per host kept full
/// (`WorkerOptions::prefetch`, no `queue_horizon`), the size of graphile-worker's local queue beside it.
const PREFETCH: usize = 500;
/// The backlog drained (RUNS_BENCH_BACKLOG sets another, e.g. to profile a longer steady state).
fn backlog() -> i64 {
    std::env::var("RUNS_BENCH_BACKLOG").map_or(10_000, |v| v.parse().expect("RUNS_BENCH_BACKLOG: a number"))
}
/// Steady arrivals for the pickup latency: this many runs per second for `ARRIVAL_SECONDS`.
const ARRIVALS_PER_SECOND: u64 = 200;
const ARRIVAL_SECONDS: u64 = 10;

type Starts = Arc<Mutex<HashMap<i64, Instant>>>;

/// Starts the hosts at once (as the peers' processes start when told to go).
async fn hosts(
    url: &str,
    per_host: usize,
    options: WorkerOptions,
    executed: Arc<AtomicU64>,
    starts: Option<Starts>,
) -> Vec<Worker> {
    let mut starting = Vec::new();
    for h in 0..HOSTS {
        let (executed, starts) = (executed.clone(), starts.clone());
        let options = options.clone().with_max_concurrent(per_host).with_heartbeat(Duration::from_secs(1));
        let builder =
            Worker::builder(url, format!("host-{h}")).options(options).workflow("noop", move |job: Job| {
                if let (Some(starts), Some(run)) = (&starts, job.run()) {
                    starts.lock().unwrap().insert(run.run_id, Instant::now());
                }
                executed.fetch_add(1, Ordering::Relaxed);
                async { Ok::<(), std::io::Error>(()) }
            });
        starting.push(tokio::spawn(builder.start()));
    }
    let mut out = Vec::new();
    for s in starting {
        out.push(s.await.unwrap().expect("start a worker"));
    }
    out
}

async fn succeeded(admin: &tokio_postgres::Client) -> i64 {
    admin
        .query_one("SELECT count(*) FROM rendezvous.runs WHERE state = 'succeeded'", &[])
        .await
        .unwrap()
        .get(0)
}

/// CPU time so far, in clock ticks of /proc (USER_HZ, 100 a second on Linux).
mod cpu {
    /// utime + stime of a process, and with `reaped` the children it has waited for.
    fn ticks(pid: &str, reaped: bool) -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command's closing parenthesis: state (3), ppid (4), …, utime (14),
        // stime (15), cutime (16), cstime (17).
        let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Some((n(1), n(11) + n(12) + if reaped { n(13) + n(14) } else { 0 }))
    }

    /// The server's: its postmaster's with the children it has reaped, and its live children's.
    pub fn server(postmaster: &str) -> u64 {
        let mut total = ticks(postmaster, true).map_or(0, |(_, t)| t);
        let pm: u64 = postmaster.parse().expect("a pid");
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
            if let Some((ppid, t)) = ticks(pid, false) {
                if ppid == pm {
                    total += t;
                }
            }
        }
        total
    }

    /// This process's.
    pub fn client() -> u64 {
        ticks("self", false).map_or(0, |(_, t)| t)
    }

    /// Microseconds of CPU per run from a difference in ticks.
    pub fn per_run(ticks: u64, runs: i64) -> f64 {
        ticks as f64 * 10_000.0 / runs as f64
    }
}

/// The server's postmaster pid, read from its data directory (the bench runs beside it).
async fn postmaster_pid(admin: &tokio_postgres::Client) -> String {
    let dir: String = admin.query_one("SHOW data_directory", &[]).await.unwrap().get(0);
    let pidfile = std::fs::read_to_string(format!("{dir}/postmaster.pid")).expect("read postmaster.pid");
    pidfile.lines().next().expect("a pid").trim().to_string()
}

/// A drain's figures: runs per second, and server and client CPU per run (µs).
struct Drain {
    per_sec: f64,
    server_us: f64,
    client_us: f64,
}

/// Drains a backlog of [`backlog()`] runs with `per_host` handlers on each host.
async fn throughput(url: &str, per_host: usize, options: WorkerOptions) -> Drain {
    let admin = rendezvous_client::connect(url).await.unwrap();
    let postmaster = postmaster_pid(&admin).await;
    let backlog = backlog();
    admin.batch_execute("TRUNCATE rendezvous.runs CASCADE; CHECKPOINT;").await.unwrap();
    admin
        .execute(
            "SELECT rendezvous.spawn_run('bench', 'noop') FROM generate_series(1::int8, $1::int8)",
            &[&backlog],
        )
        .await
        .unwrap();
    let executed = Arc::new(AtomicU64::new(0));
    let (server_before, client_before) = (cpu::server(&postmaster), cpu::client());
    let started = Instant::now();
    let fleet = hosts(url, per_host, options, executed, None).await;
    while succeeded(&admin).await < backlog {
        assert!(started.elapsed() < Duration::from_secs(600), "the backlog was not drained in 10 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_sec = backlog as f64 / started.elapsed().as_secs_f64();
    let server_us = cpu::per_run(cpu::server(&postmaster).saturating_sub(server_before), backlog);
    let client_us = cpu::per_run(cpu::client().saturating_sub(client_before), backlog);
    for h in fleet {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    Drain { per_sec, server_us, client_us }
}

/// Pickup latency of runs admitted at a steady rate to idle hosts: p50 and p99.
async fn pickup(url: &str) -> (Duration, Duration, usize) {
    let admin = rendezvous_client::connect(url).await.unwrap();
    admin.batch_execute("TRUNCATE rendezvous.runs CASCADE").await.unwrap();
    let starts: Starts = Arc::default();
    let fleet =
        hosts(url, 4, WorkerOptions::default(), Arc::new(AtomicU64::new(0)), Some(starts.clone())).await;
    tokio::time::sleep(Duration::from_secs(2)).await; // all joined and idle
    let mut admitted = Vec::new();
    let every = Duration::from_secs(1) / ARRIVALS_PER_SECOND as u32;
    let mut next = Instant::now();
    for _ in 0..ARRIVALS_PER_SECOND * ARRIVAL_SECONDS {
        tokio::time::sleep_until(next.into()).await;
        let run = rendezvous_client::spawn_run(&admin, "bench", "noop", &serde_json::json!({}), None)
            .await
            .unwrap();
        admitted.push((run.run_id, Instant::now()));
        next += every;
    }
    let total = admitted.len() as i64;
    while succeeded(&admin).await < total {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for h in fleet {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let starts = starts.lock().unwrap();
    let mut latencies: Vec<Duration> = admitted
        .iter()
        .filter_map(|(id, at)| starts.get(id).map(|s| s.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    (pct(0.5), pct(0.99), latencies.len())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Ok(url) = std::env::var("RENDEZVOUS_DATABASE_URL") else {
        println!("set RENDEZVOUS_DATABASE_URL, or run scripts/bench.sh runs");
        return;
    };
    println!("Runs executed by {HOSTS} Worker hosts (trivial handler), a backlog of {} runs\n", backlog());
    println!(
        "| handlers per host | handlers in all | runs/s, defaults | runs/s, a full queue of {PREFETCH} \
         | server CPU µs/run, defaults | client CPU µs/run, defaults |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    // RUNS_BENCH_HANDLERS="1 4" measures only those cases (while looking into one).
    let cases: Vec<usize> = std::env::var("RUNS_BENCH_HANDLERS")
        .map(|v| v.split_whitespace().map(|n| n.parse().expect("RUNS_BENCH_HANDLERS: numbers")).collect())
        .unwrap_or_else(|_| vec![1, 4, 16]);
    // RUNS_BENCH_ONLY=defaults measures the defaults alone, without the pickup case (while
    // profiling them).
    let only_defaults = std::env::var("RUNS_BENCH_ONLY").is_ok_and(|v| v == "defaults");
    for per_host in cases {
        let plain = throughput(&url, per_host, WorkerOptions::default()).await;
        let cpu = format!("{:.1} | {:.1}", plain.server_us, plain.client_us);
        if only_defaults {
            println!("| {per_host} | {} | {:.0} | | {cpu} |", per_host * HOSTS, plain.per_sec);
            continue;
        }
        let full = WorkerOptions::default().with_prefetch(PREFETCH).with_queue_horizon(None);
        let ahead = throughput(&url, per_host, full).await;
        println!(
            "| {per_host} | {} | {:.0} | {:.0} | {cpu} |",
            per_host * HOSTS,
            plain.per_sec,
            ahead.per_sec
        );
    }
    if only_defaults {
        return;
    }
    let (p50, p99, n) = pickup(&url).await;
    println!(
        "\nPickup latency, {ARRIVALS_PER_SECOND} runs/s admitted for {ARRIVAL_SECONDS} s to {HOSTS} idle hosts \
         (4 handlers each), admission acknowledged → handler started: p50 {:.1} ms, p99 {:.1} ms ({n} runs)",
        p50.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0
    );
}
