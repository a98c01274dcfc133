//! The completer: handlers' successes completed in batches on the worker's side connection,
//! one statement for every completion that arrived meanwhile.
use std::sync::Arc;

use super::job::Work;
use crate::firing::{self, Firing};
use crate::runs;
use crate::session::Session;
use crate::Result;

/// A completion waiting for its batch: the firing or run, its token, and where to say how it
/// went.
pub(super) type Completion = (Work, i64, Reply);

/// Where a completion's outcome goes: true when its token still held the work.
pub(super) type Reply = tokio::sync::oneshot::Sender<std::result::Result<bool, String>>;

/// Completes firings and runs in batches on the side connection: one `complete_firings` and one
/// `complete_runs` statement (one commit, one flush each) for every completion that arrived
/// meanwhile. Ends when the worker is dropped (its sender with it).
pub(super) async fn complete_in_batches(
    side: Arc<Session>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Completion>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let (mut firings, mut runs) = (Vec::new(), Vec::new());
        for (work, token, reply) in batch {
            match work {
                Work::Firing(f) => firings.push(((f, token), reply)),
                Work::Run(r) => runs.push(((r.run_id, token), reply)),
            }
        }
        if !firings.is_empty() {
            let pairs: Vec<(Firing, i64)> = firings.iter().map(|(p, _)| p.clone()).collect();
            let result = side
                .call(|c| {
                    let pairs = pairs.clone();
                    async move {
                        let refs: Vec<(&Firing, i64)> = pairs.iter().map(|(f, t)| (f, *t)).collect();
                        firing::complete_firings(&*c, &refs).await
                    }
                })
                .await;
            answer(firings.into_iter().map(|(_, reply)| reply), result);
        }
        if !runs.is_empty() {
            let pairs: Vec<(i64, i64)> = runs.iter().map(|(p, _)| *p).collect();
            let result = side
                .call(|c| {
                    let pairs = pairs.clone();
                    async move { runs::complete_runs(&*c, &pairs).await }
                })
                .await;
            answer(runs.into_iter().map(|(_, reply)| reply), result);
        }
    }
}

/// Tells each completion of a batch how it went.
fn answer(replies: impl Iterator<Item = Reply>, result: Result<Vec<bool>>) {
    match result {
        Ok(done) => {
            for (reply, ok) in replies.zip(done) {
                let _ = reply.send(Ok(ok));
            }
        }
        Err(e) => {
            let e = e.to_string();
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
