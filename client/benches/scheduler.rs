//! The scheduler, measured (not a test): side by side in one run,
//! 1. 100 and 1,000 tasks firing every second on 4 `Worker` hosts with default options for
//!    10 minutes, under the task defaults (overlap skip) and with overlap allowed: every firing
//!    exactly once, skips counted, none claimed early, claim lateness against the due
//!    instant (database clock) overall and minute by minute (a backlog would show as a rising
//!    p99), wasted claims, firings a second per host;
//! 2. the cost of `schedule_task` and of an idle `due_firings` poll with 1k, 10k and 100k tasks
//!    (a poll must not scan all tasks), and of making due firings, per task;
//! 3. pg_cron on the same server, when it is loaded: the start lateness of its jobs.
//!
//! Run: `scripts/bench.sh scheduler`, or
//! `RENDEZVOUS_DATABASE_URL=… cargo bench -p rendezvous-client --bench scheduler`.
//! `RENDEZVOUS_BENCH_SECONDS` sets the length of part 1 (default 600), `RENDEZVOUS_BENCH_LOADS`
//! its loads (default "100 1000"), `RENDEZVOUS_BENCH_OVERLAPS` its overlap policies (default
//! "skip allow"), `RENDEZVOUS_BENCH_PARTS` the parts to run (default "1 2 3"),
//! `RENDEZVOUS_BENCH_CONCURRENCY` the hosts' `max_concurrent` (default: the default, 16).
use std::time::{Duration, Instant, SystemTime};

use rendezvous_client::{CatchUp, Job, Overlap, TaskSpec, Worker, WorkerOptions};

const HOSTS: usize = 4;

fn seconds() -> u64 {
    std::env::var("RENDEZVOUS_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600)
}

/// A list of numbers from the environment, or the default.
fn numbers(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

async fn fleet(url: &str, tasks: usize, overlap: Overlap) {
    let admin = rendezvous_client::connect(url).await.unwrap();
    admin.batch_execute("DELETE FROM rendezvous.firings; DELETE FROM rendezvous.tasks;").await.unwrap();
    let specs: Vec<TaskSpec> = (0..tasks)
        // Under allow, every fire time runs (nothing missed is skipped): exactly once is checked
        // against the schedule itself. Under skip, the task's defaults (what most users run):
        // a fire time runs unless the one before it still runs, which a handler that returns
        // at once never does, so every fire time should run too, and any skip is counted.
        .map(|i| {
            let spec = TaskSpec::new(format!("bench-{i}"), "* * * * * *");
            match overlap {
                Overlap::Allow => spec.with_overlap(Overlap::Allow).with_catch_up(CatchUp::All),
                Overlap::Skip => spec,
            }
        })
        .collect();
    for s in &specs {
        rendezvous_client::task::schedule_task(&admin, s).await.unwrap();
    }
    let handled = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Each handler's start against its fire time (one machine: one clock for both).
    let starts = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(SystemTime, Duration)>::new()));
    let mut hosts = Vec::new();
    for h in 0..HOSTS {
        let mut b = Worker::builder(url, format!("host-{h}")).options(WorkerOptions::default());
        for s in &specs {
            let (handled, starts) = (handled.clone(), starts.clone());
            b = b.handler(s.task_id.clone(), move |job: Job| {
                handled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let fire_at = job.firing().expect("a firing").fire_at;
                let late = SystemTime::now().duration_since(fire_at).unwrap_or_default();
                starts.lock().unwrap().push((fire_at, late));
                async { Ok::<(), std::io::Error>(()) }
            });
        }
        hosts.push(b.start().await.unwrap());
    }
    let started = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(seconds())).await;
    let stopped = SystemTime::now();
    let (claimed, lost): (u64, u64) =
        hosts.iter().map(|h| h.stats()).fold((0, 0), |(c, l), s| (c + s.claimed, l + s.lost_claims));
    let runs = handled.load(std::sync::atomic::Ordering::Relaxed);
    for h in hosts {
        h.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    // The window: fire times from 2 s after the start to 2 s before the stop (all hosts up).
    let (from, until) = (started + Duration::from_secs(2), stopped - Duration::from_secs(2));
    let row = admin
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE completed_at IS NOT NULL),
                    count(*) FILTER (WHERE claimed_at < fire_at),
                    percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - fire_at)),
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - fire_at)),
                    max(extract(epoch FROM claimed_at - fire_at))::float8,
                    count(*) FILTER (WHERE attempts > 1),
                    count(*) FILTER (WHERE failed_at IS NOT NULL AND failures = 0)
               FROM rendezvous.firings WHERE fire_at >= $1 AND fire_at <= $2",
            &[&from, &until],
        )
        .await
        .unwrap();
    let (firings, completed, early): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let expected: i64 = admin
        .query_one(
            "SELECT count(*) * $3 FROM rendezvous.fire_times('* * * * * *', 'UTC', $1, $2)",
            &[&(from - Duration::from_micros(1)), &until, &(tasks as i64)],
        )
        .await
        .unwrap()
        .get(0);
    let (p50, p99, max): (f64, f64, f64) = (row.get(3), row.get(4), row.get(5));
    let minutes = admin
        .query(
            "SELECT floor(extract(epoch FROM fire_at - $1::timestamptz) / 60)::int8,
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - fire_at))
               FROM rendezvous.firings WHERE fire_at >= $1 AND fire_at <= $2
              GROUP BY 1 ORDER BY 1",
            &[&from, &until],
        )
        .await
        .unwrap();
    let (twice, skipped_at_claim): (i64, i64) = (row.get(6), row.get(7));
    // Skipped when made (the late path): counted on the tasks, for the whole run.
    let skipped_total: i64 = admin
        .query_one("SELECT coalesce(sum(skipped), 0)::int8 FROM rendezvous.tasks", &[])
        .await
        .unwrap()
        .get(0);
    let policy = match overlap {
        Overlap::Allow => "overlap allow, catch-up all",
        Overlap::Skip => "the task defaults: overlap skip, catch-up latest",
    };
    println!(
        "\n### 1. {tasks} tasks every second on {HOSTS} Worker hosts for {} s (one process; default options; {policy})\n",
        seconds()
    );
    println!("| measure | value |\n|---|---:|");
    println!("| fire times due in the window ({tasks} tasks) | {expected} |");
    println!("| firings made | {firings} |");
    println!("| completed | {completed} |");
    println!(
        "| skipped by the overlap policy: at the claim (window) / in all (whole run, with the late path) | {skipped_at_claim} / {skipped_total} |"
    );
    println!("| claimed more than once (takeovers) | {twice} |");
    println!("| claimed before due (database clock) | {early} |");
    println!(
        "| claim lateness p50 / p99 / max (claimed_at − fire_at) | {:.1} / {:.1} / {:.1} ms |",
        p50 * 1e3,
        p99 * 1e3,
        max * 1e3
    );
    println!(
        "| handler runs / claims won / claims lost | {runs} / {claimed} / {lost} ({:.2} % wasted) |",
        100.0 * lost as f64 / (claimed + lost).max(1) as f64
    );
    let rate = completed as f64 / until.duration_since(from).unwrap().as_secs_f64();
    println!("| throughput | {rate:.0} firings/s ({:.0} a host) |", rate / HOSTS as f64);
    let p99s: Vec<String> = minutes.iter().map(|r| format!("{:.0}", r.get::<_, f64>(1) * 1e3)).collect();
    println!("| claim lateness p99 minute by minute | {} ms |", p99s.join(" / "));
    // Handler start lateness, from the handlers' own clock readings.
    let starts = std::mem::take(&mut *starts.lock().unwrap());
    let in_window = |at: &SystemTime| *at >= from && *at <= until;
    let mut all: Vec<f64> =
        starts.iter().filter(|(at, _)| in_window(at)).map(|(_, l)| l.as_secs_f64() * 1e3).collect();
    all.sort_by(f64::total_cmp);
    let q = |v: &[f64], p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(f64::NAN)
    };
    println!(
        "| handler start lateness p50 / p99 / max (start − fire_at) | {:.1} / {:.1} / {:.1} ms |",
        q(&all, 0.5),
        q(&all, 0.99),
        all.last().copied().unwrap_or(f64::NAN)
    );
    let mut by_minute: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for (at, late) in starts.iter().filter(|(at, _)| in_window(at)) {
        let minute = at.duration_since(from).unwrap_or_default().as_secs() / 60;
        by_minute.entry(minute).or_default().push(late.as_secs_f64() * 1e3);
    }
    let p99s: Vec<String> = by_minute
        .into_values()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            format!("{:.0}", q(&v, 0.99))
        })
        .collect();
    println!("| handler start lateness p99 minute by minute | {} ms |", p99s.join(" / "));
}

/// Median of `n` timed runs of `sql`, in microseconds.
async fn median_us(client: &tokio_postgres::Client, sql: &str, n: usize) -> f64 {
    let stmt = client.prepare(sql).await.unwrap();
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        client.query(&stmt, &[]).await.unwrap();
        t.push(start.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    t[n / 2]
}

async fn scale(url: &str) {
    let admin = rendezvous_client::connect(url).await.unwrap();
    println!("\n### 2. Cost per call as the number of tasks grows (half minutely, half hourly)\n");
    println!("| tasks | `schedule_task` per call (in SQL) | idle `due_firings()` poll | `SELECT 1` round trip | making due firings, per task |");
    println!("|---:|---:|---:|---:|---:|");
    for n in [1_000i64, 10_000, 100_000] {
        admin.batch_execute("DELETE FROM rendezvous.firings; DELETE FROM rendezvous.tasks;").await.unwrap();
        let start = Instant::now();
        admin
            .execute(
                "SELECT count(rendezvous.schedule_task('scale-' || g, CASE WHEN g % 2 = 0 THEN '* * * * *' ELSE '0 * * * *' END))
                   FROM generate_series(1, $1::int8) g",
                &[&n],
            )
            .await
            .unwrap();
        let per_schedule = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        // Nothing due: the poll reads the due index and the unfinished firings only.
        admin
            .batch_execute("UPDATE rendezvous.tasks SET next_fire_at = clock_timestamp() + interval '1 hour'")
            .await
            .unwrap();
        admin.batch_execute("VACUUM ANALYZE rendezvous.tasks").await.unwrap();
        let idle = median_us(&admin, "SELECT * FROM rendezvous.due_firings()", 200).await;
        let round_trip = median_us(&admin, "SELECT 1", 200).await;
        // Every minutely task due at once: one pass makes their firings.
        let due_now = n / 2;
        admin
            .batch_execute(
                "UPDATE rendezvous.tasks SET next_fire_at = date_trunc('minute', clock_timestamp()) WHERE schedule = '* * * * *'",
            )
            .await
            .unwrap();
        // Polls until every due task has made its firing (a poll makes at most 10,000).
        let start = Instant::now();
        let mut made = 0;
        for _ in 0..20 {
            admin.query("SELECT * FROM rendezvous.due_firings(1)", &[]).await.unwrap();
            made = admin
                .query_one("SELECT count(*) FROM rendezvous.firings", &[])
                .await
                .unwrap()
                .get::<_, i64>(0);
            if made >= due_now {
                break;
            }
        }
        let per_made = start.elapsed().as_secs_f64() * 1e6 / due_now as f64;
        assert_eq!(made, due_now, "every due task made its firing");
        println!(
            "| {n} | {per_schedule:.0} µs | {idle:.0} µs | {round_trip:.0} µs | {per_made:.0} µs ({due_now} at once) |"
        );
    }
    admin.batch_execute("DELETE FROM rendezvous.firings; DELETE FROM rendezvous.tasks;").await.unwrap();
}

async fn pg_cron(url: &str) {
    let admin = rendezvous_client::connect(url).await.unwrap();
    let loaded: bool = admin
        .query_one(
            "SELECT 'pg_cron' = ANY (string_to_array(current_setting('shared_preload_libraries'), ','))",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!("\n### 3. pg_cron on the same server\n");
    if !loaded {
        println!("pg_cron is not loaded (shared_preload_libraries): skipped. `scripts/bench.sh scheduler` loads it.");
        return;
    }
    admin.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_cron").await.unwrap();
    // 20 jobs on the same minute: its finest cron granularity (its '1 seconds' form is an
    // interval from the job's last run, not a calendar schedule).
    for i in 0..20 {
        admin
            .execute("SELECT cron.schedule($1, '* * * * *', 'SELECT 1')", &[&format!("bench-{i}")])
            .await
            .unwrap();
    }
    // Wait for two minute boundaries.
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let wait = 120 - now % 60 + 5;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let row = admin
        .query_one(
            "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l), max(l)
               FROM (SELECT extract(epoch FROM d.start_time - date_trunc('minute', d.start_time))::float8 AS l
                       FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname LIKE 'bench-%') x",
            &[],
        )
        .await
        .unwrap();
    let (runs, p50, p99, max): (i64, Option<f64>, Option<f64>, Option<f64>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    for i in 0..20 {
        admin.execute("SELECT cron.unschedule($1)", &[&format!("bench-{i}")]).await.unwrap();
    }
    println!("| measure | pg_cron 20 jobs `* * * * *` |\n|---|---:|");
    println!("| runs in two minutes | {runs} |");
    println!(
        "| start lateness p50 / p99 / max (start_time − minute) | {:.1} / {:.1} / {:.1} ms |",
        p50.unwrap_or(f64::NAN) * 1e3,
        p99.unwrap_or(f64::NAN) * 1e3,
        max.unwrap_or(f64::NAN) * 1e3
    );
    println!("\nThroughput anchor: db-scheduler publishes 10.6–11.8k executions/s (its own benchmark, other hardware).");
}

#[tokio::main]
async fn main() {
    let url = std::env::var("RENDEZVOUS_DATABASE_URL")
        .expect("set RENDEZVOUS_DATABASE_URL to a database with pg_rendezvous (scripts/bench.sh does)");
    let parts = numbers("RENDEZVOUS_BENCH_PARTS", "1 2 3");
    if parts.contains(&1) {
        let overlaps = std::env::var("RENDEZVOUS_BENCH_OVERLAPS").unwrap_or_else(|_| "skip allow".to_owned());
        for tasks in numbers("RENDEZVOUS_BENCH_LOADS", "100 1000") {
            for overlap in overlaps.split_whitespace() {
                let overlap = match overlap {
                    "skip" => Overlap::Skip,
                    "allow" => Overlap::Allow,
                    other => panic!("RENDEZVOUS_BENCH_OVERLAPS: skip or allow, not {other}"),
                };
                fleet(&url, tasks, overlap).await;
            }
        }
    }
    if parts.contains(&2) {
        scale(&url).await;
    }
    if parts.contains(&3) {
        pg_cron(&url).await;
    }
}
