//! A connection that a long-lived piece makes when it first needs it, makes again when it is
//! lost, and whose every call is bounded: a primary that cannot commit (cut off from its
//! synchronous standby) or a dead network path would otherwise hold the piece forever. Past
//! the bound the call's statement is cancelled; the connection is kept if its server answered
//! the cancel (only slow) and the call then ended, and given up otherwise (closed, so the
//! server's session ends too), and the next call connects again (through a multi-host URL, to
//! whichever server accepts writes).
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use crate::connection::GiveUp;
use crate::{Database, Result};

/// A reconnecting, call-bounded connection (see the module's docs).
pub(crate) struct Session {
    database: Database,
    application_name: String,
    client: tokio::sync::Mutex<Option<(Arc<Client>, GiveUp)>>,
    /// How long one call may go without an answer before it is cancelled (and, if the server
    /// does not answer the cancel, or still not the call, given up: at most twice this plus the
    /// cancel's bound; see `connection::bounded`).
    timeout: Duration,
    /// The `component` label of `rendezvous_reconnects_total` for connections made again
    /// after one was lost; `None`: not counted.
    component: Option<&'static str>,
    /// A connection was made before: the next one is a reconnection.
    connected_before: std::sync::atomic::AtomicBool,
}

impl Session {
    pub(crate) fn new(database: Database, application_name: String, timeout: Duration) -> Session {
        Session {
            database,
            application_name,
            client: tokio::sync::Mutex::new(None),
            timeout,
            component: None,
            connected_before: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Counts reconnections in `rendezvous_reconnects_total{component}`.
    pub(crate) fn counting_reconnects(mut self, component: &'static str) -> Session {
        self.component = Some(component);
        self
    }

    /// The open connection, or a new one, with what gives it up.
    async fn get(&self) -> Result<(Arc<Client>, GiveUp)> {
        let mut slot = self.client.lock().await;
        if let Some((c, g)) = slot.as_ref().filter(|(c, g)| !c.is_closed() && !g.given_up()) {
            return Ok((c.clone(), g.clone()));
        }
        // Bounded: a server that does not answer, or a capped host's budget that stays full,
        // fails this attempt instead of holding every caller behind the slot.
        let connecting = crate::connection::connect_watched(&self.database, &self.application_name);
        let watched = tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(|_| crate::connection::no_answer(self.timeout))??;
        let c = Arc::new(watched.client);
        let again = self.connected_before.swap(true, std::sync::atomic::Ordering::Relaxed);
        if let (true, Some(component)) = (again, self.component) {
            metrics::counter!(crate::signals::RECONNECTS, "component" => component).increment(1);
        }
        *slot = Some((c.clone(), watched.give_up.clone()));
        Ok((c, watched.give_up))
    }

    /// Forgets `client` if it is still the session's connection and was lost or given up.
    async fn forget_if_closed(&self, client: &Arc<Client>) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|(c, g)| Arc::ptr_eq(c, client) && (c.is_closed() || g.given_up())) {
            *slot = None;
        }
    }

    /// Closes the connection, if any: a piece that has nothing to do for a while holds none.
    pub(crate) async fn close(&self) {
        *self.client.lock().await = None;
    }

    /// Runs `call` on the connection, reconnecting and trying again (three times in all) when
    /// the connection was lost, the server stopped taking writes, or the call got no answer
    /// within the timeout (the connection is then dropped).
    pub(crate) async fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut last = None;
        for attempt in 0..3u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            let (client, give_up) = match self.get().await {
                Ok(c) => c,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match crate::connection::bounded(&give_up, self.timeout, call(client.clone())).await {
                // A lost connection (given up: no answer in time), a statement cancelled on a
                // slow server, or a server that stopped taking writes (its connection closes
                // itself; lib.rs): the next attempt connects again if need be.
                Err(e)
                    if client.is_closed()
                        || give_up.given_up()
                        || crate::connection::cancelled_statement(&e)
                        || e.sqlstate() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) =>
                {
                    if client.is_closed() || give_up.given_up() {
                        tracing::warn!(timeout = ?self.timeout, name = %self.application_name, error = %e, "connection lost; connecting again");
                    }
                    self.forget_if_closed(&client).await;
                    last = Some(e)
                }
                other => return other,
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Runs `call` once, its connection included within the timeout. With no answer in time
    /// the connection is given up (a lost one is made again by the next call); either way the
    /// error is returned.
    pub(crate) async fn call_once<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let (client, give_up) = match tokio::time::timeout(self.timeout, self.get()).await {
            Ok(c) => c?,
            Err(_) => return Err(crate::connection::no_answer(self.timeout)),
        };
        let answer = crate::connection::bounded(&give_up, self.timeout, call(client.clone())).await;
        self.forget_if_closed(&client).await;
        answer
    }
}
