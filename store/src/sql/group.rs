//! Group commit: the acknowledged writes that arrive at once — Chat entries, Yjs journal entries,
//! Planner claims — share one transaction and so one flush to disk, instead of one each.
//!
//! Owns: the [`Job`]s a store handle hands to its writer, the writer's lanes (one queue and
//! task each; a document's jobs always take the same lane, [`lane`]), their bounds ([`QUEUE`],
//! [`MAX_BATCH`]), and the count of batches committed (for tests and benches).
//! Does not own: the statements each job runs or the transaction around a batch (`sql.rs`,
//! `SqlStore::write_loop`), nor starting the writer task (each backend's `Dialect`, where the
//! database type is concrete).
//!
//! Invariants: a caller is answered only after the transaction holding its job committed (or
//! failed); a job is written only if its own fence admits it, checked inside the batch's
//! transaction (a refused job fails alone, and the rest of its batch commits); a lane runs its
//! jobs in the order they were queued and one batch at a time, and every job of a document goes
//! to one lane, so two writes to one document keep the order their callers gave them, while
//! other lanes' batches (other documents) may be in flight at once; a job that fails on its own
//! (an unknown document) fails alone and leaves the rest of its batch to commit; a batch whose
//! transaction breaks is rolled back and its jobs are run again one transaction each, so one bad
//! job cannot fail the others. The writer task ends when every handle that could queue to it is
//! dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::fence::Fence;
use crate::{
    Claim, Holder, NewTranscriptEntry, StoreError, StoreResult, TranscriptEntry, UnixMillis,
};

/// Jobs that may wait for the writer. A caller waits for room rather than growing the queue.
pub(crate) const QUEUE: usize = 1024;

/// The most jobs one transaction takes: bounds how long one commit holds the write lock.
pub(crate) const MAX_BATCH: usize = 256;

/// One acknowledged write, with where its answer goes and the fence of the handle that queued it
/// (handles fenced differently — each document's lease, say — share one writer, and each job is
/// checked against its own fence inside the batch's transaction).
pub(crate) enum Job {
    Transcript {
        fence: Option<Fence>,
        document_id: Uuid,
        entry: NewTranscriptEntry,
        done: oneshot::Sender<StoreResult<TranscriptEntry>>,
    },
    /// Yjs updates of one document, journalled together at consecutive seqs (all or none).
    Updates {
        fence: Option<Fence>,
        document_id: Uuid,
        updates: Vec<Vec<u8>>,
        now_ms: UnixMillis,
        done: oneshot::Sender<StoreResult<Vec<i64>>>,
    },
    Claim {
        fence: Option<Fence>,
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

    /// The fence the job is written under, if its handle was fenced.
    pub(crate) fn fence(&self) -> Option<&Fence> {
        match self {
            Job::Transcript { fence, .. }
            | Job::Updates { fence, .. }
            | Job::Claim { fence, .. } => fence.as_ref(),
        }
    }

    /// The job's outcome if its fence refused it: `fence` is the index of the job's fence in
    /// [`fences_of`]'s list, `verdicts` each fence's verdict in that order. `None`: admitted.
    pub(crate) fn refusal(
        &self,
        fence: Option<usize>,
        verdicts: &[StoreResult<()>],
    ) -> Option<Done> {
        let Err(error) = &verdicts[fence?] else {
            return None;
        };
        let error = error.clone();
        Some(match self {
            Job::Transcript { .. } => Done::Transcript(Err(error)),
            Job::Updates { .. } => Done::Updates(Err(error)),
            Job::Claim { .. } => Done::Claim(Err(error)),
        })
    }

    /// The document the job writes to (which decides its lane).
    fn document_id(&self) -> Uuid {
        match self {
            Job::Transcript { document_id, .. }
            | Job::Updates { document_id, .. }
            | Job::Claim { document_id, .. } => *document_id,
        }
    }
}

/// The lane, of `lanes`, that every job of `document_id` takes.
pub(crate) fn lane(document_id: Uuid, lanes: usize) -> usize {
    let (high, low) = document_id.as_u64_pair();
    // Both halves: time-ordered ids share their high bits, random ones differ everywhere.
    ((high ^ low) % lanes.max(1) as u64) as usize
}

/// A handle's way to its writer tasks, one per lane.
pub(crate) struct Writer {
    lanes: Vec<mpsc::Sender<Job>>,
    batches: Arc<AtomicU64>,
}

impl Writer {
    /// A writer of `lanes` lanes; `spawn` starts the task of each, given the receiving end of
    /// its queue and the counter of committed batches they share.
    pub(crate) fn start(
        lanes: usize,
        mut spawn: impl FnMut(mpsc::Receiver<Job>, Arc<AtomicU64>),
    ) -> Self {
        let batches = Arc::new(AtomicU64::new(0));
        let lanes = (0..lanes.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel(QUEUE);
                spawn(rx, batches.clone());
                tx
            })
            .collect();
        Writer { lanes, batches }
    }

    /// Queues `job` on its document's lane, waiting while that queue is full.
    pub(crate) async fn submit(&self, job: Job) -> StoreResult<()> {
        let lane = &self.lanes[lane(job.document_id(), self.lanes.len())];
        lane.send(job).await.map_err(|_| stopped())
    }

    /// How many lanes the writer has.
    #[cfg(test)]
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// How many batches the writer has committed.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// How many jobs wait in the queues (not yet taken by a lane's task).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.lanes.iter().map(|l| QUEUE - l.capacity()).sum()
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

/// The distinct fences of `jobs` (by lease and epoch, in first-seen order), each with the index
/// in that list of every job's fence (`None` for a job queued by a handle never fenced).
pub(crate) fn fences_of(jobs: &[Job]) -> (Vec<Fence>, Vec<Option<usize>>) {
    let mut fences: Vec<Fence> = Vec::new();
    let index = jobs
        .iter()
        .map(|job| {
            let fence = job.fence()?;
            let at = fences
                .iter()
                .position(|f| f.scope() == fence.scope() && f.epoch() == fence.epoch())
                .unwrap_or_else(|| {
                    fences.push(fence.clone());
                    fences.len() - 1
                });
            Some(at)
        })
        .collect();
    (fences, index)
}

/// The indexes of `fences` in the order their locks are taken: the writer lease's first, then
/// documents' by id.
pub(crate) fn lock_order(fences: &[Fence]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..fences.len()).collect();
    order.sort_by_key(|&at| match fences[at].scope() {
        crate::FenceScope::Writer => (0, Uuid::nil()),
        crate::FenceScope::Document(id) => (1, id),
    });
    order
}
