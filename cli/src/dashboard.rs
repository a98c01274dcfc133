//! `rendezvous dashboard`: the fleet live in a browser, from the status views only (so a
//! `rendezvous_observer` login is enough). One binary, no JavaScript toolchain: the server
//! renders the page, and a few lines of JavaScript fetch it again every two seconds.
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use tokio_postgres::Client;

/// How many leadership changes the page remembers.
const HISTORY: usize = 50;

/// The most hosts the page lists one by one; beyond, it lists stale hosts first and says how
/// many more there are (a page of thousands of rows every two seconds costs the browser and
/// the dashboard more than it tells anyone).
const MAX_HOST_ROWS: usize = 100;

/// A leadership change: when it was seen, the group, its leader (none), the epoch.
type Change = (SystemTime, String, Option<String>, i64);

struct Dashboard {
    client: tokio::sync::Mutex<Client>,
    url: String,
    /// Leadership changes seen since the dashboard started: (when, group, leader, epoch).
    history: Mutex<VecDeque<Change>>,
}

/// The `Host` values the dashboard answers to: its listen address, `localhost` forms of it when
/// it listens on loopback, and the names given with `--allow-host`.
fn allowed_hosts(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = listen.port();
    let mut allowed = vec![listen.to_string()];
    if listen.ip().is_loopback() {
        allowed.extend([format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")]);
    }
    for name in extra {
        allowed.push(name.clone());
        if !name.contains(':') || name.ends_with(']') {
            allowed.push(format!("{name}:{port}"));
        }
    }
    allowed
}

/// The page's security headers: nothing loads but what this server sends (its inline styles
/// apart), no framing, no sniffing, no referrer, no caching.
const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// Refuses a request for a name the dashboard does not answer to (421), and adds the security
/// headers to every answer.
async fn guard(State(allowed): State<Arc<Vec<String>>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let mut response = if allowed.iter().any(|a| a.eq_ignore_ascii_case(host)) {
        next.run(request).await
    } else {
        (StatusCode::MISDIRECTED_REQUEST, "this dashboard does not answer to that Host (see --allow-host)\n")
            .into_response()
    };
    for (name, value) in SECURITY_HEADERS {
        response.headers_mut().insert(*name, HeaderValue::from_static(value));
    }
    response
}

/// Serves the dashboard on `listen` until the process ends.
pub async fn serve(url: String, listen: SocketAddr, allow_hosts: Vec<String>) -> Result<(), String> {
    let client = rendezvous_client::connect(url.as_str()).await.map_err(|e| e.to_string())?;
    rendezvous_client::check_extension(&client).await.map_err(|e| e.to_string())?;
    let state = Arc::new(Dashboard {
        client: tokio::sync::Mutex::new(client),
        url,
        history: Mutex::new(VecDeque::new()),
    });
    let allowed = Arc::new(allowed_hosts(listen, &allow_hosts));
    let app = axum::Router::new()
        .route("/", get(page))
        .route("/app.js", get(script))
        .route("/fragment", get(fragment))
        .route("/status.json", get(json))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(allowed, guard));
    if !listen.ip().is_loopback() {
        eprintln!(
            "rendezvous dashboard: listening on {listen}, beyond this machine: anyone who can reach it sees the \
             fleet's hosts, leaders, tasks and runs (no login); put it behind an authenticating proxy"
        );
    }
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    println!("dashboard on http://{} (read-only)", listener.local_addr().map_err(|e| e.to_string())?);
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

/// When a leader's term began, as the database says (`seconds_leading`): a term already 20 s
/// old when the dashboard first sees it did not change "0 s ago" (#41); `now` when it does
/// not say (nobody leads).
fn term_began(leader: &Value, now: SystemTime) -> SystemTime {
    leader["seconds_leading"]
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
        .and_then(|d| now.checked_sub(d))
        .unwrap_or(now)
}

/// The status, read again (reconnecting if the connection was lost).
async fn status(d: &Dashboard) -> Result<Value, String> {
    let mut client = d.client.lock().await;
    if client.is_closed() {
        *client = rendezvous_client::connect(d.url.as_str()).await.map_err(|e| e.to_string())?;
    }
    let v = crate::status::collect(&client).await?;
    let mut history = d.history.lock().expect("history lock");
    for l in v["leaders"].as_array().into_iter().flatten() {
        let group = l["group"].as_str().unwrap_or("").to_owned();
        let leader = l["leader"].as_str().map(str::to_owned);
        let epoch = l["epoch"].as_i64().unwrap_or(0);
        let last = history.iter().rev().find(|(_, g, _, _)| *g == group);
        if last.is_none_or(|(_, _, who, e)| *who != leader || *e != epoch) {
            history.push_back((term_began(l, SystemTime::now()), group, leader, epoch));
            if history.len() > HISTORY {
                history.pop_front();
            }
        }
    }
    Ok(v)
}

async fn json(State(d): State<Arc<Dashboard>>) -> impl IntoResponse {
    match status(&d).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}

async fn fragment(State(d): State<Arc<Dashboard>>) -> Html<String> {
    Html(match status(&d).await {
        Ok(v) => render(&v, &d.history.lock().expect("history lock")),
        Err(e) => format!("<p class=\"error\">cannot read the database: {}</p>", esc(&e)),
    })
}

async fn page(State(d): State<Arc<Dashboard>>) -> Html<String> {
    let Html(body) = fragment(State(d)).await;
    Html(format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pg_rendezvous</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; }} h2 {{ font-size: 1.05em; margin: 1.2em 0 .3em; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: left; }}
.live {{ color: #16794a; font-weight: 600; }} .stale {{ color: #a33; }} .warn {{ color: #a33; font-weight: 600; }}
.bar {{ display: inline-block; height: 10px; background: #4a7ab5; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 2em; }}
</style></head>
<body><h1>pg_rendezvous — live</h1><div id="live">{body}</div>
<script src="/app.js"></script></body></html>"#
    ))
}

/// The page's script, served on its own so the content security policy allows no inline one.
async fn script() -> impl IntoResponse {
    const SCRIPT: &str = "// Redraw every two seconds from the server's rendering.
setInterval(async () => {
  try { const r = await fetch('/fragment'); document.getElementById('live').innerHTML = await r.text(); } catch (e) {}
}, 2000);
";
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn s(v: &Value) -> String {
    match v {
        Value::String(x) => esc(x),
        Value::Null => "–".into(),
        other => esc(&other.to_string()),
    }
}

/// Each live host's share of keys: its weight over the live hosts' total, which is what
/// weighted HRW gives each host (docs/hrw.md). Exact, and O(hosts): estimating it by sampling
/// keys cost a second a refresh with 2,000 hosts.
fn shares(hosts: &[Value], live_weight: f64) -> std::collections::HashMap<&str, f64> {
    hosts
        .iter()
        .filter(|h| h["live"] == true)
        .map(|h| (h["host_id"].as_str().unwrap_or(""), h["weight"].as_f64().unwrap_or(1.0)))
        .filter(|(_, w)| w.is_finite() && *w > 0.0 && live_weight > 0.0)
        .map(|(h, w)| (h, w / live_weight))
        .collect()
}

/// The page's content.
pub fn render(v: &Value, history: &VecDeque<Change>) -> String {
    let mut o = String::new();
    // `rendezvous status` lists at most 100 hosts (stale first) and counts them all.
    let hosts = v["hosts"].as_array().cloned().unwrap_or_default();
    let live = v["hosts_live"].as_i64().unwrap_or(0);
    let total = v["hosts_total"].as_i64().unwrap_or(hosts.len() as i64);
    summary(&mut o, v, live, total);
    o.push_str("</p><div class=\"grid\"><div>");
    hosts_table(&mut o, v, &hosts, total);
    leaders_tables(&mut o, v, history);
    o.push_str("</table></div><div>");
    tasks_table(&mut o, v);
    firings_tables(&mut o, v);
    runs_tables(&mut o, v);
    o.push_str("</table></div></div>");
    o
}

/// The summary line: live hosts, standbys, and what an operator should know at once.
fn summary(o: &mut String, v: &Value, live: i64, total: i64) {
    let _ = write!(o, "<p id=\"summary\">live hosts: <b id=\"live-hosts\">{live}</b> of {total}");
    let r = &v["replication"];
    let _ = write!(o, " · standbys: {} ({} synchronous)", s(&r["standbys"]), s(&r["synchronous"]));
    if let Some(w) = r["warning"].as_str() {
        let _ = write!(o, " · <span class=\"warn\">{}</span>", esc(w));
    }
    if v["dead_holders_seen_at_once"].as_bool() == Some(false) {
        let _ = write!(o, " · <span class=\"warn\">{}</span>", esc(crate::status::TAKEOVER_AT_LEASE));
    }
}

/// The hosts (stale ones first: they are the ones to look at) with their share of keys.
fn hosts_table(o: &mut String, v: &Value, hosts: &[Value], total: i64) {
    let share = shares(hosts, v["hosts_live_weight"].as_f64().unwrap_or(0.0));
    o.push_str("<h2>Hosts</h2><table id=\"hosts\"><tr><th>host</th><th>state</th><th>weight</th><th>last heartbeat</th><th>share of keys</th></tr>");
    // Stale hosts come first: they are the ones to look at.
    let listed: Vec<&Value> = hosts.iter().take(MAX_HOST_ROWS).collect();
    for h in &listed {
        let id = h["host_id"].as_str().unwrap_or("");
        let pct = share.get(id).copied().unwrap_or(0.0);
        let live = h["live"] == true;
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{:.1} s ago</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span> {:.1} %</td></tr>",
            esc(id),
            if live { "live" } else { "stale" },
            if live { "live" } else { "stale" },
            s(&h["weight"]),
            h["seconds_since_heartbeat"].as_f64().unwrap_or(0.0),
            pct * 200.0,
            pct * 100.0
        );
    }
    o.push_str("</table>");
    if total > listed.len() as i64 {
        let _ = write!(o, "<p id=\"more-hosts\">and {} more hosts</p>", total - listed.len() as i64);
    }
}

/// The leader groups, and the leadership changes this dashboard has seen.
fn leaders_tables(o: &mut String, v: &Value, history: &VecDeque<Change>) {
    o.push_str("<h2>Leaders</h2><table id=\"leaders\"><tr><th>group</th><th>leader</th><th>epoch</th><th>for</th></tr>");
    for l in v["leaders"].as_array().into_iter().flatten() {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"leader\">{}</td><td>{}</td><td>{}</td></tr>",
            s(&l["group"]),
            l["leader"].as_str().map(esc).unwrap_or_else(|| "<i>nobody</i>".into()),
            s(&l["epoch"]),
            l["seconds_leading"].as_f64().map(|x| format!("{x:.0} s")).unwrap_or_default()
        );
    }
    o.push_str("</table><h2>Leadership changes seen</h2><table id=\"history\"><tr><th>when</th><th>group</th><th>leader</th><th>epoch</th></tr>");
    for (at, group, leader, epoch) in history.iter().rev().take(12) {
        let ago = SystemTime::now().duration_since(*at).unwrap_or_default().as_secs();
        let _ = write!(
            o,
            "<tr><td>{ago} s ago</td><td>{}</td><td>{}</td><td>{epoch}</td></tr>",
            esc(group),
            leader.as_deref().map(esc).unwrap_or_else(|| "<i>nobody</i>".into())
        );
    }
}

/// The tasks, with their next fire time and what is running, waiting and failed.
fn tasks_table(o: &mut String, v: &Value) {
    o.push_str("<h2>Tasks</h2><table id=\"tasks\"><tr><th>task</th><th>schedule</th><th>next</th><th>running</th><th>waiting</th><th>failed</th><th>last error</th></tr>");
    for t in v["tasks"].as_array().into_iter().flatten() {
        let next = esc(&crate::status::next_fire(t));
        let _ = write!(
            o,
            "<tr><td>{}</td><td><code>{}</code> {}</td><td>{next}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&t["task_id"]),
            s(&t["schedule"]),
            s(&t["time_zone"]),
            s(&t["running"]),
            s(&t["waiting"]),
            s(&t["failed"]),
            t["last_error"].as_str().map(esc).unwrap_or_default()
        );
    }
}

/// Firings in flight and recently completed.
fn firings_tables(o: &mut String, v: &Value) {
    let f = &v["firings"];
    let _ = write!(
        o,
        "</table><h2>Firings</h2><p>{} in flight, {} completed in the last minute, {} failed</p><table id=\"in-flight\"><tr><th>in flight</th><th>state</th><th>holder</th><th>token</th></tr>",
        s(&f["in_flight"]),
        s(&f["completed_last_minute"]),
        s(&f["failed"])
    );
    for x in f["in_flight_sample"].as_array().into_iter().flatten().take(10) {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&x["key"]),
            s(&x["state"]),
            s(&x["holder"]),
            s(&x["token"])
        );
    }
    o.push_str("</table><table id=\"completed\"><tr><th>recently completed</th><th>by</th><th>token</th><th>started late by</th></tr>");
    for x in f["recently_completed"].as_array().into_iter().flatten().take(10) {
        let _ = write!(
            o,
            "<tr class=\"completed\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&x["key"]),
            s(&x["holder"]),
            s(&x["token"]),
            x["lateness_ms"].as_f64().map(|ms| format!("{ms:.0} ms")).unwrap_or_default()
        );
    }
}

/// The run queue per workflow and the recent runs.
fn runs_tables(o: &mut String, v: &Value) {
    o.push_str("</table><h2>Run queue</h2><table id=\"run-queue\"><tr><th>workflow</th><th>pending</th><th>runnable</th><th>running</th><th>oldest runnable waiting</th></tr>");
    for q in v["run_queue"].as_array().into_iter().flatten() {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&q["workflow"]),
            s(&q["pending"]),
            s(&q["runnable"]),
            s(&q["running"]),
            q["oldest_runnable_seconds"].as_f64().map(|x| format!("{x:.1} s")).unwrap_or_default()
        );
    }
    o.push_str(
        "</table><h2>Recent runs</h2><table id=\"runs\"><tr><th>run</th><th>tenant</th><th>workflow</th><th>state</th>\
         <th>steps</th><th>last step</th><th>waiting for</th></tr>",
    );
    for r in v["recent_runs"].as_array().into_iter().flatten() {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s(&r["run_id"]),
            s(&r["tenant"]),
            s(&r["workflow"]),
            s(&r["state"]),
            s(&r["steps"]),
            s(&r["last_step"]),
            s(&r["waiting_for"])
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(i: usize, live: bool, weight: f64) -> Value {
        json!({"host_id": format!("h{i}"), "weight": weight, "seconds_since_heartbeat": 1.0, "live": live})
    }

    #[test]
    fn a_term_first_seen_dates_from_when_it_began() {
        let now = SystemTime::now();
        let leader = json!({"group": "g", "leader": "h1", "epoch": 3, "seconds_leading": 20.0});
        assert_eq!(term_began(&leader, now), now - std::time::Duration::from_secs(20));
        let nobody = json!({"group": "g", "leader": null, "epoch": 3, "seconds_leading": null});
        assert_eq!(term_began(&nobody, now), now);
    }

    #[test]
    fn shares_are_weight_over_the_live_total() {
        let hosts = vec![host(1, true, 1.0), host(2, true, 3.0), host(3, false, 4.0)];
        let share = shares(&hosts, 4.0);
        assert_eq!(share.len(), 2);
        assert!((share["h1"] - 0.25).abs() < 1e-12 && (share["h2"] - 0.75).abs() < 1e-12);
    }

    /// Thousands of hosts: the status lists a hundred (stale first) and counts them all; the
    /// page shows the rows and says how many more there are.
    #[test]
    fn a_large_fleet_is_summarised() {
        let mut hosts: Vec<Value> = vec![host(4321, false, 1.0)];
        hosts.extend((0..99).map(|i| host(i, true, 1.0)));
        let v = json!({"hosts": hosts, "hosts_total": 5000, "hosts_live": 4999, "hosts_live_weight": 4999.0,
                       "leaders": [], "replication": {}});
        let page = render(&v, &VecDeque::new());
        assert_eq!(page.matches("<tr><td>").count(), MAX_HOST_ROWS, "host rows");
        assert!(page.contains("<td>h4321</td><td class=\"stale\">"), "the stale host is listed");
        assert!(page.contains("and 4900 more hosts"), "summary");
        assert!(page.contains("live hosts: <b id=\"live-hosts\">4999</b> of 5000"));
    }
}
