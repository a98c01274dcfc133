//! `rendezvous status`: who is live, who leads each group at which epoch, in-flight and recent
//! firings, recent runs — for a person, or `--json` for scripts. It reads only the status views,
//! so a role with nothing but `rendezvous_observer` can run it.
use crate::sql;
use serde_json::{json, Value};
use tokio_postgres::Client;

async fn rows(client: &Client, sql: &str) -> Result<Vec<tokio_postgres::Row>, String> {
    client.query(sql, &[]).await.map_err(explain)
}

/// A database error as the server gave it (message, SQLSTATE, detail, hint), not the driver's
/// bare "db error", and what to do where we know: the status views are an observer's.
pub fn explain(e: tokio_postgres::Error) -> String {
    let denied = e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
    let what = rendezvous_client::Error::Db(e).to_string();
    if denied {
        format!(
            "{what}; connect as a member of rendezvous_observer (GRANT rendezvous_observer TO <your login>)"
        )
    } else {
        what
    }
}

/// Reads the status as JSON.
pub async fn collect(client: &Client) -> Result<Value, String> {
    rendezvous_client::check_extension(client).await.map_err(|e| e.to_string())?;
    // Rows for at most 100 hosts and 100 groups, the ones to look at first (stale hosts,
    // leaderless groups), each with the totals over all of them (window aggregates: one read of
    // each view, pg_locks included): the cost and the output stay small with thousands of either.
    let host_rows = rows(client, sql::STATUS_HOSTS).await?;
    let hosts: Vec<Value> = host_rows
        .iter()
        .map(|r| json!({"host_id": r.get::<_, String>(0), "weight": r.get::<_, f64>(1), "seconds_since_heartbeat": r.get::<_, f64>(2), "live": r.get::<_, bool>(3)}))
        .collect();
    let (hosts_total, hosts_live, hosts_live_weight) = host_rows
        .first()
        .map_or((0, 0, 0.0), |r| (r.get::<_, i64>(4), r.get::<_, i64>(5), r.get::<_, f64>(6)));
    let leader_rows = rows(client, sql::STATUS_LEADERS).await?;
    let leaders: Vec<Value> = leader_rows
        .iter()
        .map(|r| json!({"group": r.get::<_, String>(0), "leader": r.get::<_, Option<String>>(1), "epoch": r.get::<_, i64>(2), "pid": r.get::<_, Option<i32>>(3), "seconds_leading": r.get::<_, Option<f64>>(4)}))
        .collect();
    let (groups_total, groups_led) =
        leader_rows.first().map_or((0, 0), |r| (r.get::<_, i64>(5), r.get::<_, i64>(6)));
    let firing = |sql: &'static str| async move {
        Ok::<Vec<Value>, String>(
            rows(client, sql)
                .await?
                .iter()
                .map(|r| json!({"key": r.get::<_, String>(0), "holder": r.get::<_, Option<String>>(1), "token": r.get::<_, i64>(2), "attempts": r.get::<_, i32>(3), "lease_left_seconds": r.get::<_, f64>(4), "completed": r.get::<_, bool>(5), "state": r.get::<_, String>(6), "lateness_ms": r.get::<_, Option<f64>>(7)}))
                .collect(),
        )
    };
    let in_flight = firing(sql::STATUS_FIRINGS_IN_FLIGHT).await?;
    let recent = firing(sql::STATUS_FIRINGS_RECENT).await?;
    let counts = rows(
        client,
        // Each through its index: unfinished firings, the last minute's completions, the
        // failed ones (retention bounds them); never the whole history.
        sql::STATUS_FIRING_COUNTS,
    )
    .await?;
    let tasks: Vec<Value> = rows(
        client,
        sql::STATUS_TASKS,
    )
    .await?
    .iter()
    .map(|r| json!({"task_id": r.get::<_, String>(0), "schedule": r.get::<_, String>(1), "time_zone": r.get::<_, String>(2), "paused": r.get::<_, bool>(3), "next_fire_in_seconds": r.get::<_, Option<f64>>(4), "running": r.get::<_, i64>(5), "waiting": r.get::<_, i64>(6), "failed": r.get::<_, i64>(7), "last_error": r.get::<_, Option<String>>(8), "skipped": r.get::<_, i64>(9)}))
    .collect();
    let replication = rows(
        client,
        sql::STATUS_REPLICATION,
    )
    .await?
    .iter()
    .map(|r| json!({"in_recovery": r.get::<_, bool>(0), "standbys": r.get::<_, i32>(1), "synchronous": r.get::<_, i32>(2), "synchronous_standby_names": r.get::<_, String>(3), "synchronous_commit": r.get::<_, String>(4), "warning": r.get::<_, Option<String>>(5)}))
    .next()
    .unwrap_or(Value::Null);
    let runs: Vec<Value> = rows(
        client,
        sql::STATUS_RUNS,
    )
    .await?
    .iter()
    .map(|r| json!({"run_id": r.get::<_, i64>(0), "tenant": r.get::<_, String>(1), "workflow": r.get::<_, String>(2), "dispatch_key": r.get::<_, String>(3), "state": r.get::<_, String>(4),
                    "steps": r.get::<_, i32>(5), "last_step": r.get::<_, Option<String>>(6), "waiting_for": r.get::<_, Option<String>>(7), "progress": r.get::<_, Option<Value>>(8)}))
    .collect();
    // The run queue per workflow (unfinished runs only: cheap at any history).
    let queue: Vec<Value> = rows(
        client,
        sql::STATUS_RUN_QUEUE,
    )
    .await?
    .iter()
    .map(|r| json!({"workflow": r.get::<_, String>(0), "pending": r.get::<_, i64>(1), "runnable": r.get::<_, i64>(2), "running": r.get::<_, i64>(3), "oldest_runnable_seconds": r.get::<_, Option<f64>>(4)}))
    .collect();
    let sees_sessions: Option<bool> =
        rows(client, sql::STATUS_TAKEOVER).await?.first().and_then(|r| r.get(0));
    Ok(json!({
        "dead_holders_seen_at_once": sees_sessions,
        "hosts": hosts,
        "hosts_total": hosts_total,
        "hosts_live": hosts_live,
        "hosts_live_weight": hosts_live_weight,
        "groups_total": groups_total,
        "groups_led": groups_led,
        "run_queue": queue,
        "leaders": leaders,
        "replication": replication,
        "tasks": tasks,
        "firings": {"in_flight": counts[0].get::<_, i64>(0), "completed_last_minute": counts[0].get::<_, i64>(1),
                    "failed": counts[0].get::<_, i64>(2),
                    "in_flight_sample": in_flight, "recently_completed": recent},
        "recent_runs": runs,
    }))
}

/// What a database whose extension owner cannot read other roles' sessions does (the portable
/// edition installed without pg_read_all_stats), and the fix.
pub const TAKEOVER_AT_LEASE: &str = "a dead holder's work waits for its lease instead of moving at once: the extension's owner cannot read other roles' sessions (GRANT pg_read_all_stats TO the owner: docs/operations.md, The portable edition)";

/// The status in Prometheus text exposition format: one gauge family per fact, labelled by
/// host or group. (Counts of kept rows are gauges: purges lower them.)
pub fn prometheus(v: &Value) -> String {
    let mut out = String::new();
    let mut family = |name: &str, help: &str, samples: Vec<(String, f64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{labels} {value}\n"));
        }
    };
    host_and_leader_families(&mut family, v);
    firing_and_replication_families(&mut family, v);
    task_and_run_families(&mut family, v);
    out
}

/// Adds one gauge family: its name, its help line and its samples (labels, value).
type Family<'a> = dyn FnMut(&str, &str, Vec<(String, f64)>) + 'a;

/// Hosts (live, heartbeat age, weight) and leader groups (led, epoch).
fn host_and_leader_families(family: &mut Family, v: &Value) {
    let hosts = v["hosts"].as_array().cloned().unwrap_or_default();
    let host = |h: &Value| format!("{{host_id=\"{}\"}}", label(h["host_id"].as_str().unwrap_or("")));
    family(
        "rendezvous_hosts_live",
        "Hosts whose last heartbeat is within the default staleness (database clock).",
        vec![(String::new(), v["hosts_live"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_hosts",
        "Hosts that heartbeat, live or stale (the per-host families list at most 100, stale first).",
        vec![(String::new(), v["hosts_total"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_leader_groups",
        "Leader groups (the per-group families list at most 100, leaderless first).",
        vec![(String::new(), v["groups_total"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_leader_groups_led",
        "Leader groups someone leads now.",
        vec![(String::new(), v["groups_led"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_host_live",
        "1 while the host is live, 0 once stale.",
        hosts.iter().map(|h| (host(h), if h["live"] == true { 1.0 } else { 0.0 })).collect(),
    );
    family(
        "rendezvous_host_heartbeat_age_seconds",
        "Seconds since the host's last heartbeat (database clock).",
        hosts.iter().map(|h| (host(h), h["seconds_since_heartbeat"].as_f64().unwrap_or(0.0))).collect(),
    );
    family(
        "rendezvous_host_weight",
        "The host's HRW weight.",
        hosts.iter().map(|h| (host(h), h["weight"].as_f64().unwrap_or(0.0))).collect(),
    );
    let leaders = v["leaders"].as_array().cloned().unwrap_or_default();
    let group = |l: &Value| format!("{{group=\"{}\"}}", label(l["group"].as_str().unwrap_or("")));
    family(
        "rendezvous_leader_present",
        "1 while someone leads the group, 0 while nobody does.",
        leaders.iter().map(|l| (group(l), if l["leader"].is_string() { 1.0 } else { 0.0 })).collect(),
    );
    family(
        "rendezvous_leader_epoch",
        "The group's current (or last) fencing epoch.",
        leaders.iter().map(|l| (group(l), l["epoch"].as_f64().unwrap_or(0.0))).collect(),
    );
}

/// Firings in flight, completed and failed; standbys.
fn firing_and_replication_families(family: &mut Family, v: &Value) {
    let f = &v["firings"];
    family(
        "rendezvous_firings_in_flight",
        "Firings not finished yet: pending, running, expired or waiting for a retry.",
        vec![(String::new(), f["in_flight"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_firings_completed_last_minute",
        "Firings completed in the last minute (database clock).",
        vec![(String::new(), f["completed_last_minute"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_firings_failed",
        "Firings failed for good, kept (retention and purge_firings lower it).",
        vec![(String::new(), f["failed"].as_f64().unwrap_or(0.0))],
    );
    let r = &v["replication"];
    family(
        "rendezvous_replication_standbys",
        "Standbys streaming from this server.",
        vec![(String::new(), r["standbys"].as_f64().unwrap_or(0.0))],
    );
    family(
        "rendezvous_replication_synchronous_standbys",
        "Of them, synchronous ones (a failover to any other can lose acknowledged runs and completions).",
        vec![(String::new(), r["synchronous"].as_f64().unwrap_or(0.0))],
    );
}

/// Per task and per workflow: next fire time, failures, the run queue.
fn task_and_run_families(family: &mut Family, v: &Value) {
    let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
    let task = |t: &Value| format!("{{task_id=\"{}\"}}", label(t["task_id"].as_str().unwrap_or("")));
    family(
        "rendezvous_task_next_fire_seconds",
        "Seconds until the task's next fire time (database clock; negative: due, not made a firing yet).",
        tasks.iter().filter_map(|t| t["next_fire_in_seconds"].as_f64().map(|s| (task(t), s))).collect(),
    );
    family(
        "rendezvous_task_failed_firings",
        "The task's firings failed for good, kept.",
        tasks.iter().map(|t| (task(t), t["failed"].as_f64().unwrap_or(0.0))).collect(),
    );
    let queue = v["run_queue"].as_array().cloned().unwrap_or_default();
    let workflow = |q: &Value| format!("{{workflow=\"{}\"}}", label(q["workflow"].as_str().unwrap_or("")));
    family(
        "rendezvous_runs_pending",
        "Runs of the workflow waiting to be claimed (runnable now, or after a retry's backoff).",
        queue.iter().map(|q| (workflow(q), q["pending"].as_f64().unwrap_or(0.0))).collect(),
    );
    family(
        "rendezvous_runs_running",
        "Runs of the workflow held by a host now.",
        queue.iter().map(|q| (workflow(q), q["running"].as_f64().unwrap_or(0.0))).collect(),
    );
    family(
        "rendezvous_runs_oldest_runnable_seconds",
        "How long the workflow's oldest runnable run has waited to be claimed (database clock).",
        queue
            .iter()
            .filter_map(|q| q["oldest_runnable_seconds"].as_f64().map(|s| (workflow(q), s)))
            .collect(),
    );
}

/// A label value as the exposition format escapes it: backslash, double quote and newline.
fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            // Other control characters (ESC, BEL) and bidirectional overrides, as text: a
            // scraper's terminal or page never receives them raw (#39).
            c if hidden(c) => out.push_str(&format!("\\\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A character that must not reach a terminal or page raw: a control character, or one that
/// reorders the text around it (U+202E makes "exe.txt" read "txt.exe").
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A text from the database as a person sees it: hidden characters (newlines included, so no
/// value forges a line) written as `\u{..}`.
fn escape_text(s: &str) -> String {
    s.chars().map(|c| if hidden(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// `v` with every text in it (keys too) escaped by [`escape_text`].
fn sanitized(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(escape_text(s)),
        Value::Array(a) => Value::Array(a.iter().map(sanitized).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (escape_text(k), sanitized(v))).collect()),
        other => other.clone(),
    }
}

/// Prints the status for a person. Host ids, task ids, errors and every other text come from
/// the database, written by whoever can call the API: control characters in them are shown
/// escaped, never sent to the terminal (an escape sequence could set its title or clear it).
pub fn print(v: &Value) {
    print!("{}", render(&sanitized(v)));
}

/// `s` with every hidden character but the newline written as `\u{..}` (for a whole report).
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| if hidden(c) && c != '\n' { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

/// When a task fires next, for a person. A fire time long past means no host is making the
/// task's firings (they are made by hosts' polls): said so, rather than "next in -250 s".
pub fn next_fire(task: &Value) -> String {
    match (task["paused"].as_bool(), task["next_fire_in_seconds"].as_f64()) {
        (Some(true), _) => "paused".to_owned(),
        (_, Some(s)) if s >= 0.0 => format!("next in {s:.1} s"),
        // Between two polls of a scheduler.
        (_, Some(s)) if s > -5.0 => "due now".to_owned(),
        (_, Some(s)) => format!("overdue {:.0} s (is a scheduler polling?)", -s),
        (_, None) => "never again".to_owned(),
    }
}

/// "  and N more hosts", when the list shows fewer than the total.
fn more(out: &mut String, v: &Value, list: &str, total: &str, what: &str) {
    let listed = v[list].as_array().map_or(0, |l| l.len()) as i64;
    let total = v[total].as_i64().unwrap_or(listed);
    if total > listed {
        out.push_str(&format!("  and {} more {what}\n", total - listed));
    }
}

/// The status for a person, as text.
fn render(v: &Value) -> String {
    let mut out = String::new();
    render_fleet(&mut out, v);
    render_firings(&mut out, v);
    render_runs(&mut out, v);
    out
}

/// Hosts, leaders, replication and how a dead holder's work moves.
fn render_fleet(out: &mut String, v: &Value) {
    use std::fmt::Write;
    let _ = writeln!(out, "hosts");
    for h in v["hosts"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<16} {:<5} weight {:<4} last heartbeat {:.1} s ago",
            h["host_id"].as_str().unwrap_or(""),
            if h["live"].as_bool() == Some(true) { "live" } else { "stale" },
            h["weight"],
            h["seconds_since_heartbeat"].as_f64().unwrap_or(0.0)
        );
    }
    more(out, v, "hosts", "hosts_total", "hosts");
    let _ = writeln!(out, "leaders");
    for l in v["leaders"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<32} {} epoch {}",
            l["group"].as_str().unwrap_or(""),
            l["leader"].as_str().map(|s| format!("led by {s}")).unwrap_or_else(|| "no leader".into()),
            l["epoch"]
        );
    }
    more(out, v, "leaders", "groups_total", "groups");
    let r = &v["replication"];
    let _ = writeln!(
        out,
        "replication: {} standbys, {} synchronous{}",
        r["standbys"],
        r["synchronous"],
        if r["in_recovery"].as_bool() == Some(true) { " (this server is a standby)" } else { "" }
    );
    if let Some(w) = r["warning"].as_str() {
        let _ = writeln!(out, "  WARNING: {w}");
    }
    if v["dead_holders_seen_at_once"].as_bool() == Some(false) {
        let _ = writeln!(out, "takeover: {TAKEOVER_AT_LEASE}");
    }
}

/// Tasks, and firings in flight and recently completed.
fn render_firings(out: &mut String, v: &Value) {
    use std::fmt::Write;
    let _ = writeln!(out, "tasks");
    for t in v["tasks"].as_array().into_iter().flatten() {
        let next = next_fire(t);
        let _ = writeln!(
            out,
            "  {:<24} {:<20} {:<14} {} running, {} waiting, {} failed, {} skipped{}",
            t["task_id"].as_str().unwrap_or(""),
            t["schedule"].as_str().unwrap_or(""),
            next,
            t["running"],
            t["waiting"],
            t["failed"],
            t["skipped"],
            t["last_error"].as_str().map(|e| format!(" (last error: {e})")).unwrap_or_default()
        );
    }
    let f = &v["firings"];
    let _ = writeln!(
        out,
        "firings: {} in flight, {} completed in the last minute, {} failed",
        f["in_flight"], f["completed_last_minute"], f["failed"]
    );
    for x in f["in_flight_sample"].as_array().into_iter().flatten() {
        let holder = x["holder"].as_str().map(|h| {
            format!(
                "held by {h} (token {}, lease {:.1} s left)",
                x["token"],
                x["lease_left_seconds"].as_f64().unwrap_or(0.0)
            )
        });
        let _ = writeln!(
            out,
            "  {:<9} {} {}",
            x["state"].as_str().unwrap_or(""),
            x["key"].as_str().unwrap_or(""),
            holder.unwrap_or_else(|| "not held".into())
        );
    }
    for x in f["recently_completed"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  done      {} by {} (token {})",
            x["key"].as_str().unwrap_or(""),
            x["holder"].as_str().unwrap_or(""),
            x["token"]
        );
    }
}

/// The run queue per workflow and the recent runs.
fn render_runs(out: &mut String, v: &Value) {
    use std::fmt::Write;
    let _ = writeln!(out, "run queue (unfinished runs per workflow)");
    let queue = v["run_queue"].as_array().map(Vec::as_slice).unwrap_or_default();
    if queue.is_empty() {
        let _ = writeln!(out, "  nothing pending or running");
    }
    for q in queue {
        let _ = writeln!(
            out,
            "  {:<24} {} pending ({} runnable now), {} running{}",
            q["workflow"].as_str().unwrap_or(""),
            q["pending"],
            q["runnable"],
            q["running"],
            q["oldest_runnable_seconds"]
                .as_f64()
                .map(|s| format!(", oldest runnable waiting {s:.1} s"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(out, "recent runs");
    for r in v["recent_runs"].as_array().into_iter().flatten() {
        // A durable run's steps, the last one recorded, what it waits for and its progress.
        let mut durable = String::new();
        if let Some(n) = r["steps"].as_i64().filter(|n| *n > 0) {
            durable.push_str(&format!(" steps {n} (last {})", r["last_step"].as_str().unwrap_or("")));
        }
        if let Some(w) = r["waiting_for"].as_str() {
            durable.push_str(&format!(" waiting for {w}"));
        }
        if !r["progress"].is_null() {
            durable.push_str(&format!(" progress {}", r["progress"]));
        }
        let _ = writeln!(
            out,
            "  run {} {} {} key {} {}{durable}",
            r["run_id"],
            r["tenant"].as_str().unwrap_or(""),
            r["workflow"].as_str().unwrap_or(""),
            r["dispatch_key"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or("")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host id that would set the terminal's title and clear its screen is shown escaped.
    #[test]
    fn control_characters_from_the_database_are_escaped() {
        let v = json!({
            "hosts": [{"host_id": "evil\u{1b}]0;owned\u{7}\u{1b}[2J", "live": true, "weight": 1, "seconds_since_heartbeat": 0.5}],
            "leaders": [], "replication": {}, "tasks": [], "firings": {}, "run_queue": [], "recent_runs": [],
        });
        let text = render(&sanitized(&v));
        assert!(!text.chars().any(|c| hidden(c) && c != '\n'), "{text:?}");
        assert!(text.contains("evil\\u{1b}]0;owned\\u{7}\\u{1b}[2J"), "{text}");
        assert!(text.starts_with("hosts\n"));
    }

    /// A database whose extension owner cannot read other roles' sessions says so, with the
    /// fix (#41): a dead holder's work there waits for its lease.
    #[test]
    fn a_takeover_at_the_lease_is_said() {
        let base = json!({
            "hosts": [], "leaders": [], "replication": {}, "tasks": [], "firings": {}, "run_queue": [], "recent_runs": [],
        });
        let mut blind = base.clone();
        blind["dead_holders_seen_at_once"] = json!(false);
        assert!(
            render(&blind).contains("takeover: a dead holder's work waits for its lease"),
            "{}",
            render(&blind)
        );
        let mut seeing = base.clone();
        seeing["dead_holders_seen_at_once"] = json!(true);
        assert!(!render(&seeing).contains("takeover:"));
        assert!(!render(&base).contains("takeover:"));
    }

    /// A newline in a host id or an error cannot forge a line of the report, and a
    /// bidirectional override cannot reorder one (#39); nor do they reach a Prometheus scrape raw.
    #[test]
    fn no_text_from_the_database_forges_or_reorders_a_line() {
        let v = json!({
            "hosts": [{"host_id": "h1\nleaders\n  g led by me", "live": true, "weight": 1, "seconds_since_heartbeat": 0.5},
                      {"host_id": "abc\u{202e}cba", "live": true, "weight": 1, "seconds_since_heartbeat": 0.5}],
            "hosts_total": 2, "hosts_live": 2,
            "leaders": [], "replication": {}, "tasks": [], "firings": {}, "run_queue": [], "recent_runs": [],
        });
        let text = render(&sanitized(&v));
        assert_eq!(text.lines().filter(|l| l.trim_start().starts_with("g led by me")).count(), 0, "{text}");
        assert!(text.contains("h1\\u{a}leaders\\u{a}  g led by me"), "{text}");
        assert!(!text.contains('\u{202e}') && text.contains("abc\\u{202e}cba"), "{text}");
        let scrape = prometheus(
            &json!({"hosts": [{"host_id": "x\u{1b}[2J\u{7}\u{202e}", "weight": 1.0, "seconds_since_heartbeat": 0.5, "live": true}]}),
        );
        assert!(!scrape.chars().any(|c| hidden(c) && c != '\n'), "{scrape:?}");
        assert!(scrape.contains("x\\\\u{1b}[2J\\\\u{7}\\\\u{202e}"), "{scrape}");
    }

    #[test]
    fn prometheus_families_and_escaped_labels() {
        let v = json!({
            "hosts": [{"host_id": "h\"1\\\n", "weight": 2.0, "seconds_since_heartbeat": 0.5, "live": true},
                      {"host_id": "h2", "weight": 1.0, "seconds_since_heartbeat": 30.0, "live": false}],
            "hosts_total": 5000, "hosts_live": 1, "groups_total": 2, "groups_led": 1,
            "leaders": [{"group": "g", "leader": "h2", "epoch": 7}, {"group": "idle", "leader": null, "epoch": 2}],
            "firings": {"in_flight": 3, "completed_last_minute": 40},
        });
        let text = prometheus(&v);
        for line in [
            "# TYPE rendezvous_hosts_live gauge",
            "rendezvous_hosts_live 1",
            "rendezvous_host_live{host_id=\"h\\\"1\\\\\\n\"} 1",
            "rendezvous_host_live{host_id=\"h2\"} 0",
            "rendezvous_host_heartbeat_age_seconds{host_id=\"h2\"} 30",
            "rendezvous_leader_present{group=\"g\"} 1",
            "rendezvous_leader_present{group=\"idle\"} 0",
            "rendezvous_leader_epoch{group=\"g\"} 7",
            "rendezvous_firings_in_flight 3",
            "rendezvous_firings_completed_last_minute 40",
            "rendezvous_hosts 5000",
            "rendezvous_leader_groups 2",
            "rendezvous_leader_groups_led 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
        // Every sample line belongs to a family announced before it.
        let mut typed = std::collections::HashSet::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap().to_owned());
            } else if !l.starts_with('#') {
                let name = l.split(['{', ' ']).next().unwrap();
                assert!(typed.contains(name), "{name} has no TYPE line");
            }
        }
    }

    #[test]
    fn a_fire_time_long_past_says_nobody_is_polling() {
        let task = |paused: bool, s: Option<f64>| json!({"paused": paused, "next_fire_in_seconds": s});
        assert_eq!(next_fire(&task(false, Some(12.34))), "next in 12.3 s");
        assert_eq!(next_fire(&task(false, Some(-1.0))), "due now");
        assert_eq!(next_fire(&task(false, Some(-250.0))), "overdue 250 s (is a scheduler polling?)");
        assert_eq!(next_fire(&task(true, Some(-250.0))), "paused");
        assert_eq!(next_fire(&task(false, None)), "never again");
    }
}
