//! The fleet controller's connection: every call bounded (a primary that cannot commit never
//! answers), the connection made again when lost; and the bookkeeping tables it reads.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::Client;

/// How long the controller waits for one call: a primary cut off from its synchronous standby
/// never acknowledges a commit, and a dead network path never answers.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The controller's session name (in pg_stat_activity).
const CONTROLLER: &str = "rendezvous fleet controller";
/// How long the report's reads of the run's history may take.
pub(super) const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller connection, within the call timeout: to the node [`report_node`] picks, so the
/// controller follows the promoted node even where an old primary was left up and writable
/// first in the URL (the hosts leave such a server by themselves; the controller watches).
pub(super) async fn connect_controller(url: &str) -> Result<Client, String> {
    let (node, _) = report_node(url).await;
    connect_node(&node).await
}

/// The URL's own nodes, one URL each (the URL itself when it names one).
pub(super) fn nodes(url: &str) -> Vec<String> {
    let each = each_host(url);
    if each.is_empty() {
        return vec![url.to_owned()];
    }
    each.into_iter().map(|(_, single)| single).collect()
}

/// A controller connection to `url` as it is, within the call timeout.
async fn connect_node(url: &str) -> Result<Client, String> {
    match tokio::time::timeout(CALL_TIMEOUT, rendezvous_client::connect_as(url, CONTROLLER)).await {
        Ok(connected) => connected.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

/// The controller's connection, made again if it was lost (a terminated backend, a failover).
async fn reconnected(admin: &mut Client, url: &str) {
    if admin.is_closed() {
        match connect_controller(url).await {
            Ok(c) => *admin = c,
            Err(e) => println!("  controller: cannot reconnect yet ({e})"),
        }
    }
}

/// One controller call on its connection (made again first if it was lost), given up after
/// `limit`: the connection is then dropped, so the next call goes through the URL again (to
/// whichever server accepts writes).
pub(super) async fn bounded<T>(
    admin: &mut Client,
    url: &str,
    limit: Duration,
    call: impl AsyncFnOnce(&Client) -> Result<T, String>,
) -> Result<T, String> {
    reconnected(admin, url).await;
    let answer = tokio::time::timeout(limit, call(admin)).await;
    match answer {
        Ok(result) => result,
        Err(_) => {
            // A fresh connection replaces the one that hangs; if none can be made now, the
            // next call tries again.
            if let Ok(fresh) = connect_controller(url).await {
                *admin = fresh;
            }
            Err(format!("no answer within {limit:?}"))
        }
    }
}

/// The single-host URLs of a multi-host `postgres://` or `postgresql://` URL, one per host of
/// its list, with everything else kept; empty for a URL naming one host or in another form.
fn each_host(url: &str) -> Vec<(String, String)> {
    let Some((scheme, rest)) = url.split_once("://") else { return Vec::new() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    // Hosts or ports in the query string (`?host=a,b`, `port=…`) are not split: the URL is
    // read as it is.
    let query = tail.split_once('?').map_or("", |(_, q)| q);
    if !hosts.contains(',') || query.split('&').any(|kv| kv.starts_with("host=") || kv.starts_with("port=")) {
        return Vec::new();
    }
    // Each node is asked alone whatever it is (a standby, a fenced old primary): the URL's
    // target_session_attrs would refuse those, so it goes.
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> =
                query.split('&').filter(|kv| !kv.starts_with("target_session_attrs=")).collect();
            if kept.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_owned(),
    };
    hosts.split(',').map(|h| (h.to_owned(), format!("{scheme}://{user}{h}{tail}"))).collect()
}

/// Where a run's report is read: of a multi-host URL's nodes, the one that takes writes on
/// the newest WAL timeline, which is the one that won a failover even where the old primary
/// was left up and writable (a URL with `target_session_attrs=read-write` could reach either,
/// and a report read on the old primary counts as lost what the new one kept: #43). Returns
/// its URL and what to call it; the URL itself when it names one host, or no node answers.
pub(super) async fn report_node(url: &str) -> (String, String) {
    let mut writable: Vec<(i32, String, String)> = Vec::new();
    let mut silent = Vec::new();
    for (host, single) in each_host(url) {
        let answer = async {
            let client = connect_node(&single).await?;
            let row =
                tokio::time::timeout(CALL_TIMEOUT, client.query_one(crate::sql::FLEET_NODE_TIMELINE, &[]))
                    .await
                    .map_err(|_| "no answer".to_owned())?
                    .map_err(|e| e.to_string())?;
            Ok::<_, String>((row.get::<_, bool>(0), row.get::<_, Option<i32>>(1)))
        };
        match answer.await {
            Ok((true, Some(timeline))) => writable.push((timeline, host, single)),
            Ok(_) => {} // a standby
            Err(_) => silent.push(host),
        }
    }
    writable.sort_by_key(|(timeline, _, _)| std::cmp::Reverse(*timeline));
    let Some((timeline, host, single)) = writable.first().cloned() else {
        return (url.to_owned(), "whichever node the URL reached".to_owned());
    };
    let mut node = format!("{host} (read-write, timeline {timeline})");
    let twins: Vec<&str> = writable[1..].iter().filter(|w| w.0 == timeline).map(|w| w.1.as_str()).collect();
    if !twins.is_empty() {
        node.push_str(&format!(
            "; also read-write on timeline {timeline}: {} (two primaries)",
            twins.join(", ")
        ));
    }
    if !silent.is_empty() {
        node.push_str(&format!("; no answer from {}", silent.join(", ")));
    }
    (single, node)
}

/// Milliseconds since the Unix epoch.
pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::each_host;

    #[test]
    fn a_multi_host_url_splits_into_one_url_per_host() {
        let url =
            "postgresql://postgres@127.0.0.1:5433,127.0.0.1:5434/postgres?target_session_attrs=read-write";
        let hosts = each_host(url);
        assert_eq!(
            hosts,
            vec![
                ("127.0.0.1:5433".to_owned(), "postgresql://postgres@127.0.0.1:5433/postgres".to_owned()),
                ("127.0.0.1:5434".to_owned(), "postgresql://postgres@127.0.0.1:5434/postgres".to_owned()),
            ]
        );
        assert!(each_host("postgresql://u:p@db:5432/x").is_empty());
        assert!(each_host("host=a,b dbname=x").is_empty());
        assert!(each_host("postgresql://u@/db?host=a,b").is_empty());
        assert!(each_host("postgresql://u@a,b/db?port=1,2").is_empty());
        assert_eq!(each_host("postgres://a,b").len(), 2);
        assert_eq!(
            each_host("postgres://a,b/d?connect_timeout=2&target_session_attrs=read-write")[1].1,
            "postgres://b/d?connect_timeout=2"
        );
        assert_eq!(
            each_host("postgres://a,b/d?connect_timeout=2&target_session_attrs=read-write")[1].1,
            "postgres://b/d?connect_timeout=2"
        );
    }
}
