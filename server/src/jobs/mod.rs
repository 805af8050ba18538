//! Background jobs: durable requests for model-backed work outside the Planner's conversation
//! (hosted-agent.md "Background jobs"; JOB-01..03, JOB-09).
//!
//! Owns: the code-owned [`Registry`] of job [`Definition`]s (type and version, enqueue origins,
//! credential mode, limits, declared progress stages, strict input and artifact codecs, the
//! executor and an optional publication check), [`Jobs::enqueue`] (origin check, canonical JSON,
//! byte limits, the fingerprint, the type-prefixed target) and the runner: it claims due jobs
//! under the writer fence, at most [`GLOBAL_CONCURRENCY`] at a time and one per document, only
//! for a document whose Planner has an active owner (JOB-09: the claim stores the process, never
//! a token), never beside a Planner turn of the same document, renews each claim while its
//! attempt runs, and settles every attempt once: completed with its validated artifact, retried
//! with back-off while the failure budget lasts, or failed. An attempt whose owner went away
//! mid-way is failed as `interrupted` and never run again (OWN-18).
//! Does not own: the rows and their atomic rules (`chopin_store::jobs`), what a job does (each
//! definition, [`description`] say), or the worker sessions ([`worker`]).
//!
//! Job output never enters Chat or a Planner's context by itself (JOB-03): nothing here writes
//! to the transcript or a Planner session; a definition's artifact is stored with its job and
//! read only where something asks for it.

pub mod description;
pub mod prose;
pub mod research;
pub mod title;
pub mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::Instrument;
use uuid::Uuid;

use crate::harness::{cancel_pair, CancelHandle, CancelSignal};
use crate::identity::sign_ins::SignIns;
use crate::metrics::Metrics;
use crate::observe::PlannerEvent;
use crate::planner::Planners;
use crate::runtime::entropy::SharedEntropy;
use crate::runtime::{SharedClock, Shutdown};
use crate::store::{Enqueued, Job, JobState, Settlement, Store, StoreError, UnixMillis};
use crate::turns::Turns;

/// Attempts this process runs at once, over all documents.
pub const GLOBAL_CONCURRENCY: usize = 2;
/// How long a claim holds before it must be renewed.
pub const CLAIM_TTL_MS: i64 = 30_000;
/// How often a running attempt renews its claim.
pub const HEARTBEAT_MS: u64 = 10_000;
/// How often the runner looks again while a due job waits for something it cannot be woken for
/// (an owner to attach, a Planner turn to end, a free slot).
pub const POLL_MS: u64 = 1_000;
/// The first retry's back-off; each later one doubles, up to [`RETRY_MAX_MS`].
pub const RETRY_BASE_MS: i64 = 5_000;
/// The longest back-off between attempts.
pub const RETRY_MAX_MS: i64 = 300_000;
/// The most pending jobs one look reads.
const SCAN_MAX: u32 = 256;
/// The most progress entries a job keeps.
pub const PROGRESS_MAX: usize = 32;
/// The deepest nesting an input or artifact may have.
const JSON_DEPTH_MAX: usize = 16;
/// The reason an attempt is settled with when its owner went away mid-way, or a process
/// stopped or restarted under it (OWN-18).
pub const INTERRUPTED: &str = "interrupted";

/// Who asked for a job (stamped by [`Jobs::enqueue`]'s caller, checked against the definition).
/// It records how work entered the system; it is not an authorisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// A code-owned scheduler (descriptions on open, edit, restore, MCP creation).
    Scheduler,
    /// A Planner tool.
    Planner,
    /// A person's explicit action.
    User,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Scheduler => "scheduler",
            Origin::Planner => "planner",
            Origin::User => "user",
        }
    }
}

/// Whose model access a job's attempts use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// The document's active Planner owner (JOB-09): under `remote` its attached client, under
    /// an in-server harness the stored owner while their browser sign-in is live. Without one
    /// the job waits, claimed by nobody (JOB-13, RT-06).
    ActivePlanner,
    /// No model: the job runs whoever holds the Planner.
    None,
}

/// A definition's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// An attempt that runs longer is stopped and counts as a failure.
    pub timeout_ms: u64,
    /// Failures (not attempts) after which the job settles failed.
    pub max_failures: i64,
    /// The most bytes of the normalised input.
    pub max_input_bytes: usize,
    /// The most bytes of the normalised artifact.
    pub max_artifact_bytes: usize,
}

/// Why an attempt did not produce an artifact: a code-owned reason (durable and shown, so never
/// model text, a prompt, a path or a credential) and whether another attempt may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub retry: bool,
}

impl Failure {
    /// Another attempt may succeed; this one spends the failure budget.
    pub fn retry(reason: &'static str) -> Self {
        Failure {
            reason,
            retry: true,
        }
    }

    /// No attempt will: the job settles failed now.
    pub fn fatal(reason: &'static str) -> Self {
        Failure {
            reason,
            retry: false,
        }
    }
}

/// What an executor is given for one attempt.
pub struct Execution {
    /// The job as claimed.
    pub job: Job,
    /// Its input, parsed again by the definition's codec.
    pub input: Value,
    /// Opens the attempt's disposable worker sessions on the document's harness.
    pub worker: worker::Worker,
    /// The document's active Planner owner when the attempt was claimed (JOB-09), whose
    /// process-local credential a host tool of the attempt uses; never stored. `None` for a job
    /// that needs none.
    pub owner: Option<crate::store::Holder>,
    sign_ins: Arc<SignIns>,
    /// Fires when the attempt must stop (cancelled, superseded, timed out, claim lost, the
    /// process stopping); the attempt's writes are refused after it regardless.
    pub cancel: CancelSignal,
    progress: Progress,
}

impl Execution {
    /// The owner's live sign-in now (its GitHub token is current); `None` once it has ended.
    pub fn owner_login(&self) -> Option<Arc<crate::identity::sign_ins::LiveLogin>> {
        let owner = self.owner.as_ref()?;
        self.sign_ins
            .get_live(owner.browser_login_id, self.progress.clock.now_ms())
    }

    /// Records that the attempt reached `stage` (one the definition declares); false if the
    /// claim is gone (the attempt should stop).
    pub async fn progress(&self, stage: &'static str) -> bool {
        self.progress.record(&self.job, stage).await
    }
}

struct Progress {
    store: Arc<dyn Store>,
    clock: SharedClock,
    declared: &'static [&'static str],
    /// The stages recorded so far, earlier attempts' included.
    stages: Mutex<Vec<String>>,
}

impl Progress {
    async fn record(&self, job: &Job, stage: &'static str) -> bool {
        if !self.declared.contains(&stage) {
            tracing::error!(kind = %job.kind, stage, "an undeclared progress stage; not recorded");
            return true;
        }
        let text = {
            let mut stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
            stages.push(stage.to_owned());
            let over = stages.len().saturating_sub(PROGRESS_MAX);
            stages.drain(..over);
            serde_json::to_string(&*stages).unwrap_or_else(|_| "[]".to_owned())
        };
        match self
            .store
            .set_job_progress(job.id, job.claim_generation, &text, self.clock.now_ms())
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "a job's progress could not be kept");
                !matches!(e, StoreError::Fenced(_))
            }
        }
    }
}

/// One registered job type at one version. Definitions are compiled in: a stored row names a
/// type and version and never carries code.
#[async_trait]
pub trait Definition: Send + Sync + 'static {
    /// Lowercase, hyphenated (`document-summary`).
    fn kind(&self) -> &'static str;
    /// From 1.
    fn version(&self) -> i64;
    /// Who may enqueue it.
    fn origins(&self) -> &'static [Origin];
    fn credential(&self) -> Credential;
    fn limits(&self) -> Limits;
    /// The stages an attempt may report, 1 to [`PROGRESS_MAX`], each a fixed lowercase word.
    fn progress(&self) -> &'static [&'static str];
    /// The strict input codec: the normalised input, or why it is refused.
    fn input(&self, value: &Value) -> Result<Value, String>;
    /// The strict artifact codec: the normalised artifact, or why it is refused.
    fn artifact(&self, value: &Value) -> Result<Value, String>;
    /// Does the work; its result is checked by [`Definition::artifact`] before it is kept.
    async fn execute(&self, run: &Execution) -> Result<Value, Failure>;
    /// A last check before the artifact is kept (the document changed since, say); `Err`
    /// settles the job failed with that reason and keeps nothing.
    async fn publish(&self, _run: &Execution, _artifact: &Value) -> Result<(), Failure> {
        Ok(())
    }
    /// After the job was settled completed with `artifact` (a follow-on job, say). Runs once
    /// per completion in this process; what it does must be idempotent on its own (a request
    /// keyed by this job).
    async fn completed(&self, _jobs: &Arc<Jobs>, _job: &Job, _artifact: &Value) {}
}

/// A definition the registry refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job definition {kind}@{version}: {why}")]
pub struct BadDefinition {
    pub kind: String,
    pub version: i64,
    pub why: String,
}

/// Every job type this process knows, by type and version.
#[derive(Default, Clone)]
pub struct Registry {
    definitions: BTreeMap<(String, i64), Arc<dyn Definition>>,
}

/// A lowercase hyphenated identifier: `a-z0-9` words joined by single hyphens.
fn is_identifier(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 64
        && word.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

impl Registry {
    /// A registry of `definitions`, each checked: identifiers, positive versions and limits,
    /// at least one origin and distinct ones, 1 to [`PROGRESS_MAX`] distinct stages, and one
    /// definition per type and version.
    pub fn new(definitions: Vec<Arc<dyn Definition>>) -> Result<Registry, BadDefinition> {
        let mut registry = Registry::default();
        for d in definitions {
            let bad = |why: &str| BadDefinition {
                kind: d.kind().to_owned(),
                version: d.version(),
                why: why.to_owned(),
            };
            if !is_identifier(d.kind()) {
                return Err(bad("the type is not a lowercase hyphenated identifier"));
            }
            if d.version() < 1 {
                return Err(bad("versions start at 1"));
            }
            let origins: BTreeSet<_> = d.origins().iter().collect();
            if origins.is_empty() || origins.len() != d.origins().len() {
                return Err(bad("it needs at least one origin, each once"));
            }
            let limits = d.limits();
            if limits.timeout_ms == 0
                || limits.max_failures < 1
                || limits.max_input_bytes == 0
                || limits.max_artifact_bytes == 0
            {
                return Err(bad("every limit must be positive"));
            }
            let stages: BTreeSet<_> = d.progress().iter().collect();
            if stages.is_empty()
                || stages.len() > PROGRESS_MAX
                || stages.len() != d.progress().len()
                || !d.progress().iter().all(|s| is_identifier(s))
            {
                return Err(bad(
                    "it declares 1 to 32 distinct progress stages, each an identifier",
                ));
            }
            let key = (d.kind().to_owned(), d.version());
            if registry.definitions.contains_key(&key) {
                return Err(bad("registered twice"));
            }
            registry.definitions.insert(key, d);
        }
        Ok(registry)
    }

    /// The exact definition a stored row names.
    pub fn get(&self, kind: &str, version: i64) -> Option<&Arc<dyn Definition>> {
        self.definitions.get(&(kind.to_owned(), version))
    }

    /// The newest version of `kind`, which new requests use.
    pub fn newest(&self, kind: &str) -> Option<&Arc<dyn Definition>> {
        self.definitions
            .range((kind.to_owned(), i64::MIN)..=(kind.to_owned(), i64::MAX))
            .next_back()
            .map(|(_, d)| d)
    }
}

/// Why [`Jobs::enqueue`] kept nothing.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("no job type {0:?} is registered")]
    Unregistered(String),
    #[error("a {kind} job cannot be asked for by the {origin}")]
    Origin { kind: String, origin: &'static str },
    #[error("the job's input is refused: {0}")]
    Input(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the runner needs of the rest of the server.
pub struct JobsDeps {
    /// Which documents this process serves: only their jobs are run here.
    pub serving: Arc<crate::serving::Serving>,
    /// Fenced under the writer lease, like every write of the process.
    pub store: Arc<dyn Store>,
    pub planners: Arc<Planners>,
    pub sign_ins: Arc<SignIns>,
    pub turns: Arc<Turns>,
    pub adapters: crate::harness::Adapters,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    pub metrics: Arc<Metrics>,
    pub shutdown: Shutdown,
}

/// The process's background jobs: the registry, enqueueing and the runner.
pub struct Jobs {
    registry: Registry,
    deps: JobsDeps,
    /// Names this process in its claims (never an account); drawn at the first claim, so a
    /// process that runs no job draws nothing from its entropy.
    claimer: std::sync::OnceLock<String>,
    wake: tokio::sync::Notify,
    running: Mutex<BTreeMap<Uuid, Attempt>>,
}

/// A running attempt, by job id.
struct Attempt {
    document: Uuid,
    stop: CancelHandle,
}

/// The canonical text of `value` (object keys sorted at every level, no spaces), if it nests
/// at most [`JSON_DEPTH_MAX`] deep.
pub fn canonical(value: &Value) -> Result<String, String> {
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    // serde_json may keep insertion order (a dependency can turn on its `preserve_order`), so
    // the keys are sorted here.
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            Value::Object(fields) => {
                let mut keys: Vec<&String> = fields.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&fields[k])))
                        .collect(),
                )
            }
            other => other.clone(),
        }
    }
    if depth(value) > JSON_DEPTH_MAX {
        return Err(format!("it nests deeper than {JSON_DEPTH_MAX} levels"));
    }
    serde_json::to_string(&sorted(value)).map_err(|e| e.to_string())
}

/// `text` as one physical line: every run of whitespace one space, trimmed (model output kept
/// as a description, a title or a report title).
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The back-off before the attempt after `failures` failures.
pub fn backoff_ms(failures: i64) -> i64 {
    let shift = u32::try_from(failures.clamp(0, 16)).unwrap_or(16);
    RETRY_BASE_MS
        .saturating_mul(1i64 << shift)
        .min(RETRY_MAX_MS)
}

impl Jobs {
    pub fn new(registry: Registry, deps: JobsDeps) -> Arc<Jobs> {
        Arc::new(Jobs {
            registry,
            deps,
            claimer: std::sync::OnceLock::new(),
            wake: tokio::sync::Notify::new(),
            running: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Uuid, Attempt>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn claimer(&self) -> &str {
        self.claimer
            .get_or_init(|| format!("jobs-{}", self.deps.entropy.token_hex(8)))
    }

    /// The definition a pending row names; a row of a type or version this process does not
    /// know stays pending for a process that does.
    fn definition(&self, job: &Job) -> Option<Arc<dyn Definition>> {
        let found = self.registry.get(&job.kind, job.version).cloned();
        if found.is_none() {
            tracing::warn!(job = %job.id, kind = %job.kind, version = job.version, "a pending job names a type this process does not know; left pending");
        }
        found
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Keeps a request for `kind`'s newest version, from `origin`, about `target` of `document`
    /// (the type prefix is added here), under `idempotency_key`, and wakes the runner. The same
    /// key with the same request answers the kept job ([`Enqueued::Repeated`]).
    pub async fn enqueue(
        &self,
        origin: Origin,
        document: Uuid,
        kind: &str,
        target: &str,
        idempotency_key: &str,
        input: &Value,
    ) -> Result<Enqueued, EnqueueError> {
        let definition = self
            .registry
            .newest(kind)
            .ok_or_else(|| EnqueueError::Unregistered(kind.to_owned()))?;
        if !definition.origins().contains(&origin) {
            return Err(EnqueueError::Origin {
                kind: kind.to_owned(),
                origin: origin.as_str(),
            });
        }
        let normal = definition.input(input).map_err(EnqueueError::Input)?;
        let text = canonical(&normal).map_err(EnqueueError::Input)?;
        let limit = definition.limits().max_input_bytes;
        if text.len() > limit {
            return Err(EnqueueError::Input(format!(
                "it is {} bytes; at most {limit}",
                text.len()
            )));
        }
        let target = format!("{kind}:{target}");
        let fingerprint = {
            let mut digest = Sha256::new();
            for part in [
                kind,
                &definition.version().to_string(),
                origin.as_str(),
                &target,
                &text,
            ] {
                digest.update(part.as_bytes());
                digest.update([0]);
            }
            hex::encode(digest.finalize())
        };
        let enqueued = self
            .deps
            .store
            .enqueue_job(&crate::store::NewJob {
                id: self.deps.entropy.uuid(),
                document_id: document,
                kind: kind.to_owned(),
                version: definition.version(),
                origin: origin.as_str().to_owned(),
                target,
                idempotency_key: idempotency_key.to_owned(),
                fingerprint,
                input: text,
                max_failures: definition.limits().max_failures,
                created_at_ms: self.deps.clock.now_ms(),
            })
            .await?;
        if let Enqueued::New(job) = &enqueued {
            tracing::info!(job = %job.id, kind, document = %document, origin = origin.as_str(), "background job queued");
            self.deps.planners.emit(PlannerEvent::JobQueued {
                document,
                job_type: kind.to_owned(),
                origin: origin.as_str().to_owned(),
            });
            // A newer request stops the attempt it superseded.
            self.stop_superseded(document).await;
            self.wake.notify_one();
        }
        Ok(enqueued)
    }

    /// Stops `document`'s running attempts whose jobs a newer request superseded.
    async fn stop_superseded(&self, document: Uuid) {
        let ids: Vec<Uuid> = self
            .lock()
            .iter()
            .filter(|(_, a)| a.document == document)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Ok(Some(job)) = self.deps.store.job(id).await {
                if job.state == JobState::Superseded {
                    if let Some(a) = self.lock().get(&id) {
                        a.stop.cancel("superseded");
                    }
                }
            }
        }
    }

    /// Wakes the runner now (an owner attached, a turn ended).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Whether `document`'s Planner has an owner whose model a job may use now (JOB-09).
    async fn owner_ready(&self, document: Uuid) -> bool {
        self.owner(document).await.is_some()
    }

    /// `document`'s active Planner owner (JOB-09): under `remote` the attached client's
    /// account; else the stored owner while their browser sign-in is live. Never claims one
    /// (JOB-12, OWN-19).
    pub async fn owner(&self, document: Uuid) -> Option<crate::store::Holder> {
        let d = &self.deps;
        let document = self.planner_document(document).await;
        let live = |h: &crate::store::Holder| {
            d.sign_ins
                .get_live(h.browser_login_id, d.clock.now_ms())
                .is_some()
        };
        if !crate::harness::model_in_server(&d.adapters.name) {
            d.planners.link_for(document)?;
            return d.planners.holder(document).filter(live);
        }
        match d.store.ownership(document).await {
            Ok(o) => o.holder.filter(live),
            Err(e) => {
                tracing::warn!(%document, error = %e, "a document's Planner owner could not be read for its jobs");
                None
            }
        }
    }

    /// The document whose Planner serves `document`: its root for a child (a child has no
    /// Planner of its own, ISO-25), else itself.
    async fn planner_document(&self, document: Uuid) -> Uuid {
        match self.deps.store.document(document).await {
            Ok(Some(doc)) => doc.parent_id.unwrap_or(document),
            _ => document,
        }
    }

    /// Starts the runner on the process's task tracker. It stops with the process.
    pub fn spawn(self: &Arc<Self>) {
        let jobs = self.clone();
        self.deps
            .shutdown
            .clone()
            .spawn(async move { jobs.run().await });
    }

    async fn run(self: Arc<Self>) {
        let stopping = self.deps.shutdown.clone();
        loop {
            let next = self.look().await;
            let sleep = async {
                match next {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stopping.stopping() => break,
                _ = self.wake.notified() => {}
                _ = sleep => {}
            }
        }
        // The process is stopping: its attempts end now, and the next process fails what was
        // left running (OWN-18).
        for a in self.lock().values() {
            a.stop.cancel(INTERRUPTED);
        }
    }

    /// One look at the pending jobs: claims and starts what may run now. How long until the
    /// next look is needed without a wake (`None`: only a wake).
    async fn look(self: &Arc<Self>) -> Option<u64> {
        let d = &self.deps;
        let now = d.clock.now_ms();
        let pending = match d.store.due_jobs(UnixMillis::MAX, SCAN_MAX).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(error = %e, "pending background jobs could not be read");
                return Some(POLL_MS);
            }
        };
        let mut next: Option<u64> = None;
        let mut soon = |ms: u64| next = Some(next.map_or(ms, |n| n.min(ms)));
        // Each document's owner is asked once per look, however many of its jobs wait.
        let mut owners: BTreeMap<Uuid, bool> = BTreeMap::new();
        for job in pending {
            if job.available_at_ms > now {
                soon(u64::try_from(job.available_at_ms - now).unwrap_or(u64::MAX));
                continue;
            }
            let (busy_document, full) = {
                let running = self.lock();
                (
                    running.values().any(|a| a.document == job.document_id),
                    running.len() >= GLOBAL_CONCURRENCY,
                )
            };
            if full {
                // An attempt's end wakes the runner.
                break;
            }
            if busy_document || !d.serving.serves(job.document_id).await {
                continue;
            }
            let Some(definition) = self.definition(&job) else {
                continue;
            };
            if definition.credential() == Credential::ActivePlanner {
                let ready = match owners.get(&job.document_id) {
                    Some(ready) => *ready,
                    None => {
                        let ready = self.owner_ready(job.document_id).await;
                        owners.insert(job.document_id, ready);
                        ready
                    }
                };
                if !ready {
                    soon(POLL_MS);
                    continue;
                }
            }
            let planner = self.planner_document(job.document_id).await;
            let Some(guard) = d.turns.begin_background(planner) else {
                // A Planner turn runs on the document: jobs wait for it.
                soon(POLL_MS);
                continue;
            };
            let claimed = match d
                .store
                .claim_job(job.id, self.claimer(), now, CLAIM_TTL_MS)
                .await
            {
                Ok(Some(claimed)) => claimed,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(job = %job.id, error = %e, "a background job could not be claimed");
                    soon(POLL_MS);
                    continue;
                }
            };
            d.planners.emit(PlannerEvent::JobStarted {
                document: claimed.document_id,
                job_type: claimed.kind.clone(),
                attempt: claimed.attempts,
            });
            let (stop, signal) = cancel_pair();
            self.lock().insert(
                claimed.id,
                Attempt {
                    document: claimed.document_id,
                    stop: stop.clone(),
                },
            );
            let jobs = self.clone();
            let span = tracing::info_span!("job", job = %claimed.id, kind = %claimed.kind, document = %claimed.document_id, attempt = claimed.attempts);
            d.shutdown.spawn(
                async move {
                    jobs.attempt(claimed, definition, signal, stop).await;
                    drop(guard);
                }
                .instrument(span),
            );
        }
        next
    }

    /// Runs one claimed attempt to its settlement.
    async fn attempt(
        self: Arc<Self>,
        job: Job,
        definition: Arc<dyn Definition>,
        signal: CancelSignal,
        stop: CancelHandle,
    ) {
        let d = &self.deps;
        let kind = definition.kind();
        let settlement = match serde_json::from_str::<Value>(&job.input)
            .map_err(|e| e.to_string())
            .and_then(|v| definition.input(&v))
        {
            Err(why) => {
                tracing::error!(job = %job.id, %why, "a stored job's input no longer parses");
                Settlement::Failed {
                    reason: "input-invalid".to_owned(),
                }
            }
            Ok(input) => {
                let owner = match definition.credential() {
                    Credential::ActivePlanner => self.owner(job.document_id).await,
                    Credential::None => None,
                };
                let run = Execution {
                    owner,
                    sign_ins: d.sign_ins.clone(),
                    job: job.clone(),
                    input,
                    worker: worker::Worker::new(
                        d.adapters.clone(),
                        self.planner_document(job.document_id).await,
                        signal.clone(),
                    ),
                    cancel: signal.clone(),
                    progress: Progress {
                        store: d.store.clone(),
                        clock: d.clock.clone(),
                        declared: definition.progress(),
                        stages: Mutex::new(serde_json::from_str(&job.progress).unwrap_or_default()),
                    },
                };
                self.execute(&run, &*definition, &stop).await
            }
        };
        let (outcome, reason) = match &settlement {
            Settlement::Completed { .. } => ("completed", None),
            Settlement::Retry { reason, .. } => ("retried", Some(reason.clone())),
            Settlement::Failed { reason } => ("failed", Some(reason.clone())),
        };
        let settled = d
            .store
            .settle_job(job.id, job.claim_generation, &settlement, d.clock.now_ms())
            .await;
        let outcome = match settled {
            Ok(true) => {
                tracing::info!(job = %job.id, kind, outcome, "background job attempt ended");
                if let Settlement::Completed { artifact } = &settlement {
                    if let Ok(artifact) = serde_json::from_str::<Value>(artifact) {
                        definition.completed(&self, &job, &artifact).await;
                    }
                }
                outcome
            }
            Ok(false) => {
                tracing::info!(job = %job.id, kind, "a background job attempt ended after its claim was gone; its result is not kept");
                "lost"
            }
            Err(e) => {
                tracing::warn!(job = %job.id, kind, error = %e, "a background job attempt could not be settled");
                "lost"
            }
        };
        d.metrics.job_attempt(kind, outcome);
        d.planners.emit(PlannerEvent::JobEnded {
            document: job.document_id,
            job_type: kind.to_owned(),
            outcome: outcome.to_owned(),
            reason: reason.filter(|_| outcome != "lost"),
        });
        self.lock().remove(&job.id);
        self.wake.notify_one();
    }

    /// The attempt's work under its deadline and heartbeat, and how it settles.
    async fn execute(
        &self,
        run: &Execution,
        definition: &dyn Definition,
        stop: &CancelHandle,
    ) -> Settlement {
        let d = &self.deps;
        let job = &run.job;
        let limits = definition.limits();
        let heartbeat = async {
            loop {
                tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS)).await;
                match d
                    .store
                    .renew_job_claim(job.id, job.claim_generation, d.clock.now_ms(), CLAIM_TTL_MS)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) | Err(StoreError::Fenced(_)) => {
                        stop.cancel("claim-lost");
                        std::future::pending::<()>().await;
                    }
                    Err(e) => {
                        tracing::warn!(job = %job.id, error = %e, "a job claim could not be renewed")
                    }
                }
            }
        };
        let work = async {
            let output = definition.execute(run).await?;
            let artifact = definition.artifact(&output).map_err(|why| {
                tracing::warn!(job = %job.id, %why, "a job's result was refused by its codec");
                Failure::retry("artifact-invalid")
            })?;
            let text = canonical(&artifact).map_err(|_| Failure::retry("artifact-invalid"))?;
            if text.len() > limits.max_artifact_bytes {
                return Err(Failure::retry("artifact-too-large"));
            }
            definition.publish(run, &artifact).await?;
            Ok(text)
        };
        let timed = tokio::time::timeout(Duration::from_millis(limits.timeout_ms), async {
            tokio::select! {
                result = work => Some(result),
                _ = heartbeat => None,
                _ = run.cancel.cancelled() => None,
            }
        })
        .await;
        let failure = match timed {
            Ok(Some(Ok(artifact))) => return Settlement::Completed { artifact },
            Ok(Some(Err(failure))) => failure,
            Ok(None) => Failure::fatal(INTERRUPTED),
            Err(_) => Failure::retry("timeout"),
        };
        // An owner that went away took the attempt with it: never run again (OWN-18).
        let interrupted = failure.reason == INTERRUPTED
            || (definition.credential() == Credential::ActivePlanner
                && !self.owner_ready(job.document_id).await);
        if interrupted {
            return Settlement::Failed {
                reason: INTERRUPTED.to_owned(),
            };
        }
        if failure.retry {
            Settlement::Retry {
                reason: failure.reason.to_owned(),
                available_at_ms: d.clock.now_ms().saturating_add(backoff_ms(job.failures)),
                failure: true,
            }
        } else {
            Settlement::Failed {
                reason: failure.reason.to_owned(),
            }
        }
    }

    /// How many attempts run now.
    pub fn running_count(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Bad {
        kind: &'static str,
        version: i64,
        origins: &'static [Origin],
        progress: &'static [&'static str],
        max_failures: i64,
    }

    #[async_trait]
    impl Definition for Bad {
        fn kind(&self) -> &'static str {
            self.kind
        }
        fn version(&self) -> i64 {
            self.version
        }
        fn origins(&self) -> &'static [Origin] {
            self.origins
        }
        fn credential(&self) -> Credential {
            Credential::None
        }
        fn limits(&self) -> Limits {
            Limits {
                timeout_ms: 1,
                max_failures: self.max_failures,
                max_input_bytes: 1,
                max_artifact_bytes: 1,
            }
        }
        fn progress(&self) -> &'static [&'static str] {
            self.progress
        }
        fn input(&self, value: &Value) -> Result<Value, String> {
            Ok(value.clone())
        }
        fn artifact(&self, value: &Value) -> Result<Value, String> {
            Ok(value.clone())
        }
        async fn execute(&self, _run: &Execution) -> Result<Value, Failure> {
            Err(Failure::fatal("never"))
        }
    }

    fn good() -> Bad {
        Bad {
            kind: "example-analysis",
            version: 1,
            origins: &[Origin::User],
            progress: &["analyze"],
            max_failures: 2,
        }
    }

    fn refused(bad: Bad) -> String {
        match Registry::new(vec![Arc::new(bad)]) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.why,
        }
    }

    #[test]
    fn job_01_the_registry_checks_every_definition_and_keeps_one_per_type_and_version() {
        assert!(Registry::new(vec![Arc::new(good())]).is_ok());
        assert!(refused(Bad {
            kind: "Example",
            ..good()
        })
        .contains("identifier"));
        assert!(refused(Bad {
            kind: "a--b",
            ..good()
        })
        .contains("identifier"));
        assert!(refused(Bad {
            version: 0,
            ..good()
        })
        .contains("versions"));
        assert!(refused(Bad {
            origins: &[],
            ..good()
        })
        .contains("origin"));
        assert!(refused(Bad {
            origins: &[Origin::User, Origin::User],
            ..good()
        })
        .contains("origin"));
        assert!(refused(Bad {
            progress: &[],
            ..good()
        })
        .contains("stages"));
        assert!(refused(Bad {
            progress: &["Bad stage"],
            ..good()
        })
        .contains("stages"));
        assert!(refused(Bad {
            max_failures: 0,
            ..good()
        })
        .contains("limit"));
        let twice = Registry::new(vec![Arc::new(good()), Arc::new(good())]);
        assert!(twice.is_err_and(|e| e.why.contains("twice")));
        let both = Registry::new(vec![
            Arc::new(good()),
            Arc::new(Bad {
                version: 2,
                ..good()
            }),
        ])
        .unwrap();
        assert_eq!(both.newest("example-analysis").unwrap().version(), 2);
        assert_eq!(both.get("example-analysis", 1).unwrap().version(), 1);
        assert!(both.newest("other").is_none());
    }

    #[test]
    fn job_01_canonical_json_sorts_keys_at_every_level_and_bounds_nesting() {
        let value = json!({ "b": 1, "a": { "d": [ { "z": 1, "y": 2 } ], "c": null } });
        assert_eq!(
            canonical(&value).unwrap(),
            r#"{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}"#
        );
        let mut deep = json!(1);
        for _ in 0..=JSON_DEPTH_MAX {
            deep = json!([deep]);
        }
        assert!(canonical(&deep).is_err());
    }

    #[test]
    fn job_01_retries_back_off_doubling_up_to_five_minutes() {
        assert_eq!(backoff_ms(0), 5_000);
        assert_eq!(backoff_ms(1), 10_000);
        assert_eq!(backoff_ms(5), 160_000);
        assert_eq!(backoff_ms(6), RETRY_MAX_MS);
        assert_eq!(backoff_ms(1_000), RETRY_MAX_MS);
    }
}
