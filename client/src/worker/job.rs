//! What a handler gets: the [`Job`] (claimed work, its token, a pooled connection) and the
//! [`FencedTransaction`] that commits the handler's writes with the work's completion.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_postgres::{Client, Transaction};

use super::Shared;
use crate::firing::{self, Firing};
use crate::runs::{self, RunClaim};
use crate::{replication, sql, Error, PooledClient, Result};

/// The error type handlers return: anything that converts into a boxed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(super) type HandlerFn =
    dyn Fn(Job) -> Pin<Box<dyn Future<Output = std::result::Result<(), BoxError>> + Send>> + Send + Sync;

/// A task's or workflow's handler, with its own error type boxed.
pub(super) fn boxed<H, Fut, E>(handler: H) -> Arc<HandlerFn>
where
    H: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    Arc::new(move |job| {
        let fut = handler(job);
        Box::pin(async move { fut.await.map_err(Into::into) })
    })
}

/// What a job runs: a scheduled firing, or an admitted run.
#[derive(Debug, Clone)]
pub(super) enum Work {
    Firing(Firing),
    Run(RunClaim),
}

impl Work {
    pub(super) fn key(&self) -> Result<String> {
        match self {
            Work::Firing(f) => f.key(),
            Work::Run(r) => Ok(r.key()),
        }
    }
}

/// Claimed work, handed to its handler: a firing of a task or an admitted run, its claim's
/// token, and a pooled connection for the handler's writes.
pub struct Job {
    pub(super) work: Work,
    pub(super) key: String,
    pub(super) token: i64,
    pub(super) attempt: i32,
    pub(super) host_id: String,
    /// Taken from the pool on first use: a handler that never touches the database holds no
    /// connection.
    pub(super) client: tokio::sync::OnceCell<PooledClient>,
    /// What cancels the statement running on the job's connection, once it has one (the
    /// runtime cancels it when the claim's lease is lost).
    pub(super) statement: Arc<std::sync::Mutex<Option<tokio_postgres::CancelToken>>>,
    pub(super) shared: Arc<Shared>,
    pub(super) completed: Arc<AtomicBool>,
    /// Set when the run gave its slot back (a timer, a wait): the handler's return is not the
    /// end of the run.
    pub(super) parked: Arc<AtomicBool>,
    /// True once the run is cancelled.
    pub(super) cancel: tokio::sync::watch::Receiver<bool>,
    /// A durable run's recorded steps, read on the first step (steps.rs).
    pub(super) replay: tokio::sync::Mutex<Option<super::steps::Replay>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("key", &self.key).field("token", &self.token).finish_non_exhaustive()
    }
}

impl Job {
    /// The firing, when this job runs a task's firing.
    pub fn firing(&self) -> Option<&Firing> {
        match &self.work {
            Work::Firing(f) => Some(f),
            Work::Run(_) => None,
        }
    }

    /// The run (its id, tenant, workflow and input), when this job runs an admitted run.
    pub fn run(&self) -> Option<&RunClaim> {
        match &self.work {
            Work::Run(r) => Some(r),
            Work::Firing(_) => None,
        }
    }

    /// The work's canonical key: the firing key, or `run:<run_id>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This claim's token: fence database writes with it ([`Job::transaction`] does).
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Which attempt this is (1 for the first claim; takeovers and retries count up).
    pub fn attempt(&self) -> i32 {
        self.attempt
    }

    /// The host running it.
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// A key for external calls that must not repeat within this claim: `<key>#<token>`. It
    /// changes with every attempt and takeover; for a key that stays the same across them, make
    /// the call in a durable step and use its [`step_key`](Self::step_key).
    pub fn idempotency_key(&self) -> String {
        format!("{}#{}", self.key, self.token)
    }

    /// The job's connection (from the worker's pool, taken on first use), for reads and
    /// writes outside the fenced transaction.
    pub async fn client(&self) -> Result<&Client> {
        Ok(self
            .client
            .get_or_try_init(|| async {
                let client = self.shared.pool.get().await?;
                *self.statement.lock().expect("statement lock") = Some(client.cancel_token());
                Ok::<_, Error>(client)
            })
            .await?)
    }

    /// Begins a transaction on the job's connection whose [`FencedTransaction::complete`]
    /// checks the token, marks the firing or run done and commits, all at once: the handler's
    /// writes commit if and only if its claim is still current.
    pub async fn transaction(&mut self) -> Result<FencedTransaction<'_>> {
        self.client().await?;
        let client = self.client.get_mut().expect("connected just above");
        let tx = client.transaction().await?;
        Ok(FencedTransaction {
            tx,
            work: self.work.clone(),
            token: self.token,
            completed: self.completed.clone(),
        })
    }
}

/// A transaction on a [`Job`]'s connection (use it as a [`Transaction`]), ended by
/// [`complete`](Self::complete), or rolled back when dropped.
pub struct FencedTransaction<'a> {
    tx: Transaction<'a>,
    work: Work,
    token: i64,
    completed: Arc<AtomicBool>,
}

impl std::fmt::Debug for FencedTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTransaction").field("work", &self.work).field("token", &self.token).finish()
    }
}

impl<'a> std::ops::Deref for FencedTransaction<'a> {
    type Target = Transaction<'a>;

    fn deref(&self) -> &Transaction<'a> {
        &self.tx
    }
}

impl FencedTransaction<'_> {
    /// Checks the token (SQLSTATE RZ001 if another host took the work over), marks the
    /// firing completed (the run succeeded) and commits the transaction with it.
    pub async fn complete(self) -> Result<()> {
        self.complete_with(None).await
    }

    /// [`complete`](Self::complete), recording `output` as a run's result (a firing keeps none).
    pub async fn complete_with(self, output: Option<serde_json::Value>) -> Result<()> {
        let (completed, pid) = match &self.work {
            Work::Firing(f) => {
                firing::assert_firing(&self.tx, f, self.token).await?;
                firing::complete_firing_on_backend(&self.tx, f, self.token).await?
            }
            Work::Run(r) => {
                runs::assert_run(&self.tx, r.run_id, self.token).await?;
                let row =
                    sql::query_one(&self.tx, sql::COMPLETE_RUN, &[&r.run_id, &self.token, &output]).await?;
                (row.get(0), row.get(1))
            }
        };
        if !completed {
            return Err(Error::ClaimLost(format!(
                "token {} no longer holds {}: another host took it over",
                self.token,
                self.work.key()?
            )));
        }
        let tx = self.tx;
        let commit = async { Ok((tx.commit().await?, Some(pid))) };
        replication::acknowledged("a fenced transaction's commit", commit).await?;
        self.completed.store(true, Ordering::SeqCst);
        Ok(())
    }
}
