//! Background jobs as rows (`background_jobs`): the durable half of the job runtime.
//!
//! Owns: [`JobStore`] and its types — a request ([`NewJob`]), a stored job ([`Job`]) and its
//! [`JobState`], what enqueueing did ([`Enqueued`]) and how an attempt ends ([`Settlement`]);
//! the state rules every backend shares ([`JobState::is_active`], [`settled_row`]).
//! Does not own: what a job does, its codecs, origins and limits (the server's job registry), or
//! when work is claimed (the server's runner). Inputs and artifacts are JSON text the store keeps
//! as written; no credential is ever part of a row (JOB-09).

use async_trait::async_trait;
use uuid::Uuid;

use crate::{StoreResult, UnixMillis};

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    /// Waiting to be claimed once `available_at_ms` has come.
    Pending,
    /// Claimed by a process, whose claim ends at `claim_expires_at_ms` unless renewed.
    Running,
    /// Settled with its artifact.
    Completed,
    /// Settled without one: its failure budget spent, or an attempt interrupted.
    Failed,
    /// Stopped on request.
    Cancelled,
    /// A newer request for the same target took its place.
    Superseded,
}

impl JobState {
    /// Every state, in a fixed order.
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Superseded,
    ];

    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Superseded => "superseded",
        }
    }

    /// The state a stored word names.
    pub fn parse(word: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// Pending or running: not settled yet, so a newer request for its target supersedes it.
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Pending | JobState::Running)
    }
}

/// A request to keep. The server has normalised `input` and computed `fingerprint`; the store
/// compares fingerprints and never reads the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub id: Uuid,
    pub document_id: Uuid,
    /// The definition's type, `document-summary` say.
    pub kind: String,
    pub version: i64,
    /// `scheduler`, `planner` or `user`.
    pub origin: String,
    /// What the job updates, prefixed with its type (`document-summary:<document>`).
    pub target: String,
    /// Unique per document: the same key again is the same request.
    pub idempotency_key: String,
    /// The digest of the normalised request; a repeat with another is a conflict.
    pub fingerprint: String,
    /// Normalised JSON.
    pub input: String,
    /// Failures (not attempts) after which the job settles failed.
    pub max_failures: i64,
    pub created_at_ms: UnixMillis,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: Uuid,
    pub document_id: Uuid,
    pub kind: String,
    pub version: i64,
    pub origin: String,
    pub target: String,
    /// Counts the requests for this target: the newest is the one that counts.
    pub target_generation: i64,
    pub idempotency_key: String,
    pub fingerprint: String,
    pub input: String,
    pub state: JobState,
    /// Claims so far.
    pub attempts: i64,
    /// Attempts that spent the failure budget.
    pub failures: i64,
    pub max_failures: i64,
    /// Not claimed before this (a retry's back-off).
    pub available_at_ms: UnixMillis,
    /// The process that holds the claim (`None` unless running). Names a process, never an
    /// account, and holds no credential.
    pub claim_owner: Option<String>,
    /// Counts claims; an attempt's writes name the generation it claimed at.
    pub claim_generation: i64,
    pub claim_expires_at_ms: Option<UnixMillis>,
    /// JSON array of the declared stages the attempts passed (the server bounds it).
    pub progress: String,
    /// Why it failed, was retried or was cancelled: a code-owned word, never model text.
    pub reason: Option<String>,
    /// The validated result (JSON) of a completed job.
    pub artifact: Option<String>,
    pub created_at_ms: UnixMillis,
    pub updated_at_ms: UnixMillis,
}

/// What [`JobStore::enqueue_job`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Kept as a new request for its target; older active requests for it are superseded.
    New(Job),
    /// The same key with the same fingerprint was already kept: that job, as it stands.
    Repeated(Job),
}

impl Enqueued {
    /// The job either way.
    pub fn job(&self) -> &Job {
        match self {
            Enqueued::New(job) | Enqueued::Repeated(job) => job,
        }
    }
}

/// How a claimed attempt ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Completed with its validated artifact (JSON).
    Completed { artifact: String },
    /// Back to pending, claimable from `available_at_ms`; `failure` spends one of the budget,
    /// and a job whose budget is then spent settles [`JobState::Failed`] instead.
    Retry {
        reason: String,
        available_at_ms: UnixMillis,
        failure: bool,
    },
    /// Failed for good.
    Failed { reason: String },
}

/// The documents' background jobs (`background_jobs`). Every write is fenced like any other.
#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Keeps `job` as the newest request for its target, superseding the target's older
    /// pending and running jobs, unless its document already has a job with its idempotency key:
    /// then that job is answered as [`Enqueued::Repeated`] if the fingerprints match, and
    /// `Conflict` if not. `NotFound("document")` for an unknown document.
    async fn enqueue_job(&self, job: &NewJob) -> StoreResult<Enqueued>;
    /// The job `id`.
    async fn job(&self, id: Uuid) -> StoreResult<Option<Job>>;
    /// `document_id`'s jobs, newest first, at most `limit`.
    async fn document_jobs(&self, document_id: Uuid, limit: u32) -> StoreResult<Vec<Job>>;
    /// The newest completed job of `target` in `document_id` (its artifact is the last result
    /// that stays visible while newer work is pending or has failed, JOB-13).
    async fn last_completed_job(&self, document_id: Uuid, target: &str)
        -> StoreResult<Option<Job>>;
    /// Pending jobs whose time has come by `now_ms`, oldest first, at most `limit`.
    async fn due_jobs(&self, now_ms: UnixMillis, limit: u32) -> StoreResult<Vec<Job>>;
    /// Claims job `id` for `claim_owner` if it is pending and due by `now_ms`: running, one
    /// more attempt, the next claim generation, held until `now_ms + ttl_ms`. `None` if it is
    /// not claimable (another process took it, it was settled, superseded or cancelled).
    async fn claim_job(
        &self,
        id: Uuid,
        claim_owner: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<Job>>;
    /// Extends the claim at `claim_generation` to `now_ms + ttl_ms`; false if the job is no
    /// longer running under that claim.
    async fn renew_job_claim(
        &self,
        id: Uuid,
        claim_generation: i64,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<bool>;
    /// Replaces the progress (JSON) of the attempt at `claim_generation`; false if the job is no
    /// longer running under that claim, and nothing is written.
    async fn set_job_progress(
        &self,
        id: Uuid,
        claim_generation: i64,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool>;
    /// Ends the attempt at `claim_generation` as `settlement` says; false (nothing written) if
    /// the job is no longer running under that claim: late output never lands.
    async fn settle_job(
        &self,
        id: Uuid,
        claim_generation: i64,
        settlement: &Settlement,
        now_ms: UnixMillis,
    ) -> StoreResult<bool>;
    /// Cancels job `id` if it is pending or running (a running attempt's claim is void after);
    /// false if it was already settled.
    async fn cancel_job(&self, id: Uuid, reason: &str, now_ms: UnixMillis) -> StoreResult<bool>;
    /// Settles every running job of the documents in `reach` [`JobState::Failed`] with
    /// `reason`: a process that starts serving them calls it before it claims anything, so an
    /// attempt the last process left mid-way is never run again (an interrupted model stage is
    /// not replayed, OWN-18). How many.
    async fn interrupt_running_jobs(
        &self,
        reason: &str,
        now_ms: UnixMillis,
        reach: crate::Reach,
    ) -> StoreResult<u64>;
    /// How many jobs are in each state (states with none are left out).
    async fn job_counts(&self) -> StoreResult<Vec<(JobState, u64)>>;
}

/// `job` as [`JobStore::settle_job`] leaves it under `settlement` (the caller checked the claim).
pub(crate) fn settled_row(job: &mut Job, settlement: &Settlement, now_ms: UnixMillis) {
    job.claim_owner = None;
    job.claim_expires_at_ms = None;
    job.updated_at_ms = now_ms;
    match settlement {
        Settlement::Completed { artifact } => {
            job.state = JobState::Completed;
            job.artifact = Some(artifact.clone());
            job.reason = None;
        }
        Settlement::Failed { reason } => {
            job.state = JobState::Failed;
            job.reason = Some(reason.clone());
        }
        Settlement::Retry {
            reason,
            available_at_ms,
            failure,
        } => {
            job.reason = Some(reason.clone());
            if *failure {
                job.failures += 1;
            }
            if job.failures >= job.max_failures {
                job.state = JobState::Failed;
            } else {
                job.state = JobState::Pending;
                job.available_at_ms = *available_at_ms;
            }
        }
    }
}

/// Whether `job` is running under the claim at `claim_generation`.
pub(crate) fn holds_claim(job: &Job, claim_generation: i64) -> bool {
    job.state == JobState::Running && job.claim_generation == claim_generation
}

/// The `Conflict` words for an idempotency key kept with other input.
pub(crate) fn key_reused(key: &str) -> String {
    format!("idempotency key {key:?} was already used for a different request")
}

/// The row of a new request at `target_generation`.
pub(crate) fn new_row(new: &NewJob, target_generation: i64) -> Job {
    Job {
        id: new.id,
        document_id: new.document_id,
        kind: new.kind.clone(),
        version: new.version,
        origin: new.origin.clone(),
        target: new.target.clone(),
        target_generation,
        idempotency_key: new.idempotency_key.clone(),
        fingerprint: new.fingerprint.clone(),
        input: new.input.clone(),
        state: JobState::Pending,
        attempts: 0,
        failures: 0,
        max_failures: new.max_failures,
        available_at_ms: new.created_at_ms,
        claim_owner: None,
        claim_generation: 0,
        claim_expires_at_ms: None,
        progress: "[]".to_owned(),
        reason: None,
        artifact: None,
        created_at_ms: new.created_at_ms,
        updated_at_ms: new.created_at_ms,
    }
}

/// Claims `job` for `owner` if it is pending and due; whether it did.
pub(crate) fn claim_row(job: &mut Job, owner: &str, now_ms: UnixMillis, ttl_ms: i64) -> bool {
    if job.state != JobState::Pending || job.available_at_ms > now_ms {
        return false;
    }
    job.state = JobState::Running;
    job.attempts += 1;
    job.claim_generation += 1;
    job.claim_owner = Some(owner.to_owned());
    job.claim_expires_at_ms = Some(now_ms.saturating_add(ttl_ms));
    job.updated_at_ms = now_ms;
    true
}

/// `job` cancelled for `reason`.
pub(crate) fn cancelled_row(job: &mut Job, reason: &str, now_ms: UnixMillis) {
    job.state = JobState::Cancelled;
    job.reason = Some(reason.to_owned());
    job.claim_owner = None;
    job.claim_expires_at_ms = None;
    job.updated_at_ms = now_ms;
}

/// Title maintenance's record of a document's title (`document_titles`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TitleSidecar {
    /// A person renamed the document: no draft replaces its title (OWN-14).
    pub chosen: bool,
    /// The title the Planner's title job last drafted (and applied), which a later draft may
    /// refine (OWN-12).
    pub planner_title: Option<String>,
}

/// What [`TitleStore::draft_title`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drafted {
    /// The document has the drafted title now.
    Applied,
    /// Kept as it was: a person chose its title, or it is no longer the title the draft was
    /// made for.
    Kept,
}

/// The documents' title records.
#[async_trait]
pub trait TitleStore: Send + Sync + 'static {
    /// `document_id`'s record (the default where it has none).
    async fn title_sidecar(&self, document_id: Uuid) -> StoreResult<TitleSidecar>;
    /// Gives `document_id` the title `new_title`, and records it as the Planner's draft, only
    /// if nobody chose its title and its title is still `expected` — checked in the same write.
    /// `NotFound("document")` for an unknown document. Changes no revision counter.
    async fn draft_title(
        &self,
        document_id: Uuid,
        expected: &str,
        new_title: &str,
    ) -> StoreResult<Drafted>;
}
