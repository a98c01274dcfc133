//! The portable edition beside the native one on the same cluster: schedules evaluated alike
//! on random patterns and across daylight-saving transitions in several zones (fire times,
//! catch-up plans, next fire times, errors' SQLSTATEs), and the client unchanged against it (it
//! reports the edition; a Worker runs firings and runs, a Leader leads).
//!
//! The portable script is the one `scripts/install.sh` made for the installed version
//! (`RENDEZVOUS_PORTABLE_SCRIPT`; scripts/test.sh sets it).
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rendezvous_client::{Job, LeaderElector, LeaderOptions, TaskSpec, Worker, WorkerOptions};
use rendezvous_tests::{wait_for_count, TestDb};

fn portable_script() -> String {
    let path = std::env::var("RENDEZVOUS_PORTABLE_SCRIPT").unwrap_or_else(|_| {
        panic!("RENDEZVOUS_PORTABLE_SCRIPT must name the portable edition's script (scripts/test.sh sets it)")
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A database with the portable edition, installed as psql would (one script).
async fn portable_db(label: &str) -> TestDb {
    let db = TestDb::bare(label).await;
    db.connect().await.batch_execute(&portable_script()).await.expect("install the portable edition");
    db
}

const SECONDS: &[&str] = &["0", "0", "0", "30", "*/15", "0,30", "10-20/5"];
const MINUTES: &[&str] = &["*", "0", "30", "*/15", "0-10/5", "5,35", "15-45", "59", "0", "30"];
const HOURS: &[&str] = &["*", "2", "1", "3", "0-23/6", "2-3", "1,2,3", "*/2", "0", "12", "2", "1"];
const DOMS: &[&str] =
    &["*", "*", "*", "1", "15", "L", "LW", "15W", "1W", "31W", "13", "29", "30,31", "?", "1-7", "31"];
const MONTHS: &[&str] = &["*", "*", "*", "1", "2", "3,10", "jan-jun", "*/3", "mar", "11", "OCT", "feb"];
const DOWS: &[&str] = &[
    "*", "*", "*", "mon-fri", "5", "1#2", "5L", "sun", "0", "7", "+fri", "?", "L", "1-5#1", "sat,sun", "5#5",
    "SUN#L", "0-7/2",
];
const OTHERS: &[&str] = &[
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@yearly",
    "every 90 seconds",
    "every 2 hours",
    "every 1 day",
    "0 0 30 2 *",
    "*/0 * * * *",
    "0/10 * * * *",
    "61 * * * *",
    "* * * *",
    "x * * * *",
    "0 0 * * 1#6",
    "30 2 * * *",
    "0 2 * * *",
    "30 1 * * *",
    "0,30 * * * *",
    "0 0 13 * fri",
    "0 0 13 * +fri",
    "0 9-17/4 * * mon-fri",
    "0 30 2 * * *",
    "0 0 L 2 *",
    "0 0 29 2 *",
    "5L * * * *",
    "30 * * * *",
    "0 30 * * * *",
];
const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "Europe/London",
    "America/St_Johns",
];
/// Instants near the clock changes of 2026 in those zones, and ordinary days.
const AROUND: &[&str] = &[
    "2026-03-08 07:00:00+00",
    "2026-03-29 01:00:00+00",
    "2026-10-25 01:00:00+00",
    "2026-11-01 06:00:00+00",
    "2026-04-04 15:00:00+00",
    "2026-10-03 15:00:00+00",
    "2026-04-05 03:00:00+00",
    "2026-09-06 04:00:00+00",
    "2026-06-15 12:00:00+00",
    "2027-02-28 12:00:00+00",
    "2028-02-28 12:00:00+00",
];

/// What both editions must answer alike for one case, as one line of text.
const CASE_SQL: &str = "
    WITH c AS (SELECT $1::text AS s, $2::text AS z, $3::timestamptz AS a, $4::timestamptz AS u, $5::text AS policy)
    SELECT pg_temp.fire_times(c.s, c.z, c.a, c.u) || ' | ' || pg_temp.plan(c.s, c.z, c.policy, c.a, c.u)
           || ' | ' || pg_temp.next(c.s, c.z, c.a)
      FROM c";

const HELPERS: &str = "
    CREATE FUNCTION pg_temp.fire_times(s text, z text, a timestamptz, u timestamptz) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN
        RETURN (SELECT count(*) || ':' || coalesce(string_agg(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), ',' ORDER BY t), '')
                  FROM rendezvous.fire_times(s, z, a, u) t);
    EXCEPTION WHEN OTHERS THEN RETURN 'error ' || SQLSTATE;
    END $$;
    CREATE FUNCTION pg_temp.plan(s text, z text, c text, a timestamptz, u timestamptz) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN
        RETURN (SELECT p.run_at::text || ' ' || p.skipped || ' ' || coalesce(p.next_fire_at::text, '-')
                  FROM rendezvous._plan_firings(s, z, c, interval '6 hours', a, u, 50) p);
    EXCEPTION WHEN OTHERS THEN RETURN 'error ' || SQLSTATE;
    END $$;
    CREATE FUNCTION pg_temp.next(s text, z text, a timestamptz) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN
        RETURN coalesce(rendezvous._check_schedule(s, z, a)::text, '-');
    EXCEPTION WHEN OTHERS THEN RETURN 'error ' || SQLSTATE;
    END $$;
    SET TIME ZONE 'UTC';";

#[tokio::test(flavor = "multi_thread")]
async fn schedules_are_evaluated_alike_on_random_patterns_and_across_clock_changes() {
    let native = TestDb::new("sched_native").await.connect().await;
    let portable = portable_db("sched_portable").await.connect().await;
    native.batch_execute(HELPERS).await.unwrap();
    portable.batch_execute(HELPERS).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261202);
    let pick = |rng: &mut rand::rngs::StdRng, from: &[&'static str]| from[rng.random_range(0..from.len())];
    let (mut differ, cases) = (Vec::new(), 120);
    for _ in 0..cases {
        let schedule = if rng.random_bool(0.25) {
            pick(&mut rng, OTHERS).to_owned()
        } else {
            let mut fields = vec![
                pick(&mut rng, MINUTES),
                pick(&mut rng, HOURS),
                pick(&mut rng, DOMS),
                pick(&mut rng, MONTHS),
                pick(&mut rng, DOWS),
            ];
            if rng.random_bool(0.4) {
                fields.insert(0, pick(&mut rng, SECONDS));
            }
            fields.join(" ")
        };
        let zone = pick(&mut rng, ZONES);
        // From up to two days before to a day after a clock change, sometimes at a fraction
        // of a second; for a span that gives at most a few thousand fire times.
        let offset_s: i64 = rng.random_range(-2 * 86_400..86_400);
        let micros: i64 = if rng.random_bool(0.5) { rng.random_range(0..1_000_000) } else { 0 };
        let dense = schedule.split_whitespace().count() == 6
            && !["0", "30"].contains(&schedule.split(' ').next().unwrap());
        let span = if dense {
            "3 hours"
        } else {
            ["1 day", "2 days", "40 days", "400 days"][rng.random_range(0..4)]
        };
        let policy = ["latest", "all", "skip"][rng.random_range(0..3)];
        let after = format!(
            "(timestamptz '{}' + interval '{offset_s} seconds' + interval '{micros} microseconds')",
            pick(&mut rng, AROUND)
        );
        let (a, u): (std::time::SystemTime, std::time::SystemTime) = {
            let row =
                native.query_one(&format!("SELECT {after}, {after} + interval '{span}'"), &[]).await.unwrap();
            (row.get(0), row.get(1))
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [&schedule, &zone, &a, &u, &policy];
        let n: String = native.query_one(CASE_SQL, &params).await.unwrap().get(0);
        let p: String = portable.query_one(CASE_SQL, &params).await.unwrap().get(0);
        if n != p {
            differ.push(format!("{schedule:?} in {zone} after {a:?}:\n  native   {n}\n  portable {p}"));
        }
    }
    assert!(differ.is_empty(), "{} of {cases} cases differ:\n{}", differ.len(), differ.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_runs_against_the_portable_edition_unchanged() {
    let db = portable_db("portable_client").await;
    let client = db.connect().await;
    let installed = rendezvous_client::check_extension(&client).await.unwrap();
    assert_eq!(
        (installed.edition.as_str(), installed.version.as_str()),
        ("portable", rendezvous_client::EXTENSION_VERSION)
    );
    client
        .batch_execute("CREATE TABLE done (key text PRIMARY KEY, host text); CREATE TABLE ran (run_id bigint PRIMARY KEY)")
        .await
        .unwrap();
    // Two hosts: a per-second task whose firings each run once, and runs admitted by them.
    let options = WorkerOptions::default()
        .with_poll(Duration::from_millis(200))
        .with_rank_delay(Duration::from_millis(200))
        .with_heartbeat(Duration::from_millis(300));
    let mut hosts = Vec::new();
    for h in ["portable-a", "portable-b"] {
        let host = Worker::builder(&db.url, h)
            .options(options.clone())
            .task(TaskSpec::new("tick", "* * * * * *"), move |mut job: Job| async move {
                let key = job.key().to_owned();
                let tx = job.transaction().await?;
                tx.execute("INSERT INTO done (key, host) VALUES ($1, $2)", &[&key, &h]).await?;
                tx.execute("SELECT rendezvous.spawn_run('t', 'work', '{}', $1)", &[&key]).await?;
                tx.complete().await?;
                Ok::<(), rendezvous_client::Error>(())
            })
            .workflow("work", |job: Job| async move {
                let run_id = job.run().expect("a run").run_id;
                job.client().await?.execute("INSERT INTO ran (run_id) VALUES ($1)", &[&run_id]).await?;
                Ok::<(), rendezvous_client::Error>(())
            })
            .start()
            .await
            .unwrap();
        hosts.push(host);
    }
    wait_for_count(&client, "SELECT count(*) FROM ran", 3).await;
    for host in hosts {
        host.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM done), (SELECT count(DISTINCT key) FROM done),
                    (SELECT count(*) FROM rendezvous.firings WHERE completed_at IS NOT NULL AND attempts > 1)",
            &[],
        )
        .await
        .unwrap();
    let (done, distinct, retried): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(done, distinct, "a firing ran twice");
    assert_eq!(retried, 0);
    // A leader, and a second candidate that follows.
    let fast = LeaderOptions::default().with_refresh(Duration::from_millis(300));
    let first = LeaderElector::start(db.url.as_str(), "portable-group", "one", fast.clone()).await.unwrap();
    let second = LeaderElector::start(db.url.as_str(), "portable-group", "two", fast).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(first.is_leader() ^ second.is_leader()) {
        assert!(std::time::Instant::now() < deadline, "no single leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leading: i64 = client
        .query_one("SELECT count(*) FROM rendezvous.leader('portable-group') WHERE leader IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leading, 1);
}

/// The portable edition keeps each host's HRW hash (rendezvous._host_hashes, written when the
/// host joins) so winner and ranked do not recompute it. Kept or not, the answers are the
/// crate's: a missing row costs time, not a different winner; a leave or TRUNCATE drops rows.
#[tokio::test(flavor = "multi_thread")]
async fn kept_host_hashes_follow_the_hosts_and_never_change_an_answer() {
    let db = portable_db("portable_hashes").await;
    let client = db.connect().await;
    let hosts: Vec<String> = (0..300).map(|i| format!("host-{i}")).collect();
    client
        .execute("SELECT count(rendezvous.heartbeat(h)) FROM unnest($1::text[]) h", &[&hosts])
        .await
        .unwrap();
    // The answers are checked, not time: on a loaded machine the checks below take longer
    // than the staleness window, and a host that went silent mid-query would change them.
    let keep_alive = "UPDATE rendezvous.hosts SET last_seen = now() + interval '1 hour'";
    client.execute(keep_alive, &[]).await.unwrap();
    let kept = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(kept("SELECT count(*) FROM rendezvous._host_hashes").await, 300);
    let wrong: i64 = kept(
        "SELECT count(*) FROM rendezvous._host_hashes x WHERE x.hash <> rendezvous._host_hash(x.host_id)",
    )
    .await;
    assert_eq!(wrong, 0);
    let keys: Vec<String> = (0..400).map(|i| format!("job-{i}")).collect();
    let expected: Vec<String> = keys
        .iter()
        .map(|k| rendezvous_hrw::winner_of(k, hosts.iter().map(String::as_str)).unwrap().to_owned())
        .collect();
    // Each key's answer, in the keys' order; $2 is the hosts array where a form takes one.
    let winners = |sql: &'static str| {
        let (client, keys, hosts) = (&client, &keys, &hosts);
        async move {
            let rows = if sql.contains("$2") {
                client.query(sql, &[keys, hosts]).await
            } else {
                client.query(sql, &[keys]).await
            };
            rows.unwrap().iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
        }
    };
    let live = "SELECT rendezvous.winner(k) FROM unnest($1::text[]) WITH ORDINALITY u(k, o) ORDER BY o";
    let listed =
        "SELECT rendezvous.winner(k, $2::text[]) FROM unnest($1::text[]) WITH ORDINALITY u(k, o) ORDER BY o";
    let first_of_ranked =
        "SELECT (rendezvous.ranked(k, 3))[1] FROM unnest($1::text[]) WITH ORDINALITY u(k, o) ORDER BY o";
    assert_eq!(winners(live).await, expected, "winner(key) over the live set");
    assert_eq!(winners(listed).await, expected, "winner(key, hosts)");
    assert_eq!(winners(first_of_ranked).await, expected, "ranked(key, 3)");
    // Half the kept hashes gone: the same answers, computed.
    client
        .execute("DELETE FROM rendezvous._host_hashes WHERE host_id LIKE '%1' OR host_id LIKE '%3'", &[])
        .await
        .unwrap();
    assert!(kept("SELECT count(*) FROM rendezvous._host_hashes").await < 300);
    assert_eq!(winners(live).await, expected, "winner(key) with hashes missing");
    assert_eq!(winners(listed).await, expected, "winner(key, hosts) with hashes missing");
    // Weighted: a third of the hosts at weight 3, over the live set.
    client
        .execute(
            "SELECT count(rendezvous.heartbeat(h, 3)) FROM unnest($1::text[]) h WHERE h LIKE '%2'",
            &[&hosts],
        )
        .await
        .unwrap();
    client.execute(keep_alive, &[]).await.unwrap();
    let set = rendezvous_hrw::HostSet::weighted(
        hosts.iter().map(|h| (h.as_str(), if h.ends_with('2') { 3.0 } else { 1.0 })),
    )
    .unwrap();
    let expected: Vec<String> = keys.iter().map(|k| set.winner(k).unwrap().to_owned()).collect();
    assert_eq!(winners(live).await, expected, "winner(key) over a weighted live set");
    assert_eq!(winners(first_of_ranked).await, expected, "ranked(key, 3) over a weighted live set");
    // A leave drops the host's row; a TRUNCATE of the hosts, all of them.
    client.execute("SELECT rendezvous.leave('host-0')", &[]).await.unwrap();
    assert_eq!(kept("SELECT count(*) FROM rendezvous._host_hashes WHERE host_id = 'host-0'").await, 0);
    client.execute("TRUNCATE rendezvous.hosts", &[]).await.unwrap();
    assert_eq!(kept("SELECT count(*) FROM rendezvous._host_hashes").await, 0);
}
