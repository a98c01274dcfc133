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

/// A controller connection, within the call timeout.
pub(super) async fn connect_controller(url: &str) -> Result<Client, String> {
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

/// Milliseconds since the Unix epoch.
pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}
