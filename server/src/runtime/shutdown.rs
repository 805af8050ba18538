//! One shutdown signal and the tracker that owns every task the server spawns.
//!
//! Owns: [`Shutdown`] — a cancellation token every long-lived task watches (sockets, timers,
//! turns, background queues) and a task tracker every such task is spawned on, so a graceful
//! stop can say "stop" once and then wait until every task has really ended.
//! Does not own: what each task does when told to stop (its module decides: an agent link sends
//! its `going-away`, a room socket closes 1001), or the order of the stop (the composition
//! root).
//!
//! Invariants: a task spawned after [`Shutdown::begin`] still runs and is still waited for (it
//! sees the signal at once); [`Shutdown::drained`] returns only when every tracked task has ended
//! or its bound passed, and says which.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

/// The shutdown signal and the task tracker. Cheap to clone; clones share both.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `task` on the tracker: [`Shutdown::drained`] waits for it.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Counts `task` (a future someone else spawns, such as a socket's task after its upgrade) as
    /// tracked: [`Shutdown::drained`] waits for it too.
    pub fn track<F: Future>(&self, task: F) -> impl Future<Output = F::Output> {
        self.tracker.track_future(task)
    }

    /// Resolves once the stop has begun. Cancel-safe; use it in `select!`.
    pub fn stopping(&self) -> WaitForCancellationFutureOwned {
        self.token.clone().cancelled_owned()
    }

    /// A token cancelled when the stop begins, for a library that takes one (rmcp's
    /// Streamable HTTP service ends its per-request work with it).
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// Whether the stop has begun.
    pub fn is_stopping(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Begins the stop: every task watching [`Shutdown::stopping`] is told now.
    pub fn begin(&self) {
        self.token.cancel();
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Waits until every tracked task has ended, at most `bound`. True if they all did.
    pub async fn drained(&self, bound: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(bound, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drained_waits_for_every_task_and_reports_a_straggler() {
        let shutdown = Shutdown::new();
        let watcher = shutdown.clone();
        shutdown.spawn(async move {
            watcher.stopping().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        });
        shutdown.spawn(async { tokio::time::sleep(Duration::from_secs(3600)).await });
        shutdown.begin();
        assert!(
            !shutdown.drained(Duration::from_secs(5)).await,
            "the sleeper outlives the bound"
        );
        assert_eq!(shutdown.running(), 1, "the watcher ended when told");
    }
}
