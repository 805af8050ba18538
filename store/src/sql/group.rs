//! Group commit: the acknowledged writes that arrive at once — Chat entries, Yjs journal entries,
//! Planner claims — share one transaction and so one flush to disk, instead of one each.
//!
//! Owns: the [`Job`]s a store handle hands to its writer, the writer's queue and its bounds
//! ([`QUEUE`], [`MAX_BATCH`]), and the count of batches committed (for tests and benches).
//! Does not own: the statements each job runs or the transaction around a batch (`sql.rs`,
//! `SqlStore::write_loop`), nor starting the writer task (each backend's `Dialect`, where the
//! database type is concrete).
//!
//! Invariants: a caller is answered only after the transaction holding its job committed (or
//! failed); jobs run in the order they were queued, so two writes to one document keep the order
//! their callers gave them; a job that fails on its own (an unknown document) fails alone and
//! leaves the rest of its batch to commit; a batch whose transaction breaks is rolled back and
//! its jobs are run again one transaction each, so one bad job cannot fail the others. The
//! writer task ends when every handle that could queue to it is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::{
    Claim, Holder, NewTranscriptEntry, StoreError, StoreResult, TranscriptEntry, UnixMillis,
};

/// Jobs that may wait for the writer. A caller waits for room rather than growing the queue.
pub(crate) const QUEUE: usize = 1024;

/// The most jobs one transaction takes: bounds how long one commit holds the write lock.
pub(crate) const MAX_BATCH: usize = 256;

/// One acknowledged write, with where its answer goes.
pub(crate) enum Job {
    Transcript {
        document_id: Uuid,
        entry: NewTranscriptEntry,
        done: oneshot::Sender<StoreResult<TranscriptEntry>>,
    },
    /// Yjs updates of one document, journalled together at consecutive seqs (all or none).
    Updates {
        document_id: Uuid,
        updates: Vec<Vec<u8>>,
        now_ms: UnixMillis,
        done: oneshot::Sender<StoreResult<Vec<i64>>>,
    },
    Claim {
        document_id: Uuid,
        holder: Holder,
        now_ms: UnixMillis,
        done: oneshot::Sender<StoreResult<Claim>>,
    },
}

/// What a job came to inside its batch's transaction (told to its caller once that commits).
pub(crate) enum Done {
    Transcript(StoreResult<TranscriptEntry>),
    Updates(StoreResult<Vec<i64>>),
    Claim(StoreResult<Claim>),
}

impl Job {
    /// Tells the caller `outcome` (a caller that stopped waiting is not told).
    pub(crate) fn answer(self, outcome: Done) {
        match (self, outcome) {
            (Job::Transcript { done, .. }, Done::Transcript(r)) => drop(done.send(r)),
            (Job::Updates { done, .. }, Done::Updates(r)) => drop(done.send(r)),
            (Job::Claim { done, .. }, Done::Claim(r)) => drop(done.send(r)),
            (job, _) => job.fail(StoreError::Backend(
                "the database writer answered a job with another's outcome".into(),
            )),
        }
    }

    /// Tells the caller its write failed with `error` (nothing of it was committed).
    pub(crate) fn fail(self, error: StoreError) {
        match self {
            Job::Transcript { done, .. } => drop(done.send(Err(error))),
            Job::Updates { done, .. } => drop(done.send(Err(error))),
            Job::Claim { done, .. } => drop(done.send(Err(error))),
        }
    }
}

/// A handle's way to its writer task.
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
    batches: Arc<AtomicU64>,
}

impl Writer {
    /// A writer whose task (already spawned by the caller) reads `jobs`' other end and counts
    /// its committed batches in `batches`.
    pub(crate) fn new(jobs: mpsc::Sender<Job>, batches: Arc<AtomicU64>) -> Self {
        Writer { jobs, batches }
    }

    /// The queue and the counter for a new writer task.
    pub(crate) fn channel() -> (mpsc::Sender<Job>, mpsc::Receiver<Job>, Arc<AtomicU64>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (tx, rx, Arc::new(AtomicU64::new(0)))
    }

    /// Queues `job`, waiting while the queue is full.
    pub(crate) async fn submit(&self, job: Job) -> StoreResult<()> {
        self.jobs.send(job).await.map_err(|_| stopped())
    }

    /// How many batches the writer has committed.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// How many jobs wait in the queue (not yet taken by the writer).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        QUEUE - self.jobs.capacity()
    }
}

/// Counts one committed batch.
pub(crate) fn count_batch(batches: &AtomicU64) {
    batches.fetch_add(1, Ordering::Relaxed);
}

/// The error of a write whose writer is gone (its runtime ended, or the store was closed).
pub(crate) fn stopped() -> StoreError {
    StoreError::Backend("the database writer has stopped".into())
}

/// Waits for a job's answer.
pub(crate) async fn answer<T>(answer: oneshot::Receiver<StoreResult<T>>) -> StoreResult<T> {
    answer.await.map_err(|_| stopped())?
}
