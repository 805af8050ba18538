//! [`Routed`]: a handle for one of several processes serving one database, each document tree (a
//! root document and its children) by the
//! process holding its root's lease. Every write that changes a document's state goes
//! through its tree's fenced handle ([`crate::Fence::for_document`]), which this
//! process has only while it holds the lease ([`DocumentHandles`]); a write for a document it
//! does not serve is refused with [`StoreError::Fenced`] and changes nothing.
//!
//! Owns: which handle each write goes through. A write names its document directly (most), or
//! through a row that belongs to one document for good — a job, a build, an implementation run —
//! which is read first to find it (the write is still checked atomically against the document's
//! lease, by its handle). Writes of what is not a document's — accounts, logins, credentials,
//! machines, the expiry of old logins and unsent files, the leases themselves — go through the
//! unfenced handle: their rows are shared by every process, and each is guarded on its own row.
//! Writes that sweep every document at once (the startup's clearing of owners, runs and job
//! attempts left by an earlier process; the sweep of silent builds) are refused: under document
//! leases they would reach documents another process serves, so a process does that per
//! document ([`crate::Reach::Document`], through that document's handle), as it takes each
//! one's lease. Reads are never routed.
//! Does not own: when a lease is taken, renewed or lost (the server's document leases keep the
//! [`DocumentHandles`]).

use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use crate::{
    Account, Advance, Attachment, AttachmentStore, BrowserLogin, Claim, ContentStore, Document,
    DocumentContent, DocumentLeaseRow, DocumentLeaseStore, DocumentStore, Fence, HoldStore, Holder,
    Kept, LeaseAcquire, LeaseStore, LinkHold, ModelChoice, ModelChoiceStore, NewAttachment,
    NewDocument, NewTranscriptEntry, OwnerGuard, Ownership, OwnershipStore, ParticipationPause,
    Pending, PlanCommit, Provenance, Reach, Release, RevisionKind, RunRecord, RunStore,
    SignInStore, StagePage, StageRecord, Store, StoreError, StoreResult, TakeBack, TranscriptEntry,
    TranscriptStore, UnixMillis, UnsentLimit, WriterLease,
};

/// The documents this process serves: each tree's handle fenced by its lease. A tree is a root
/// document and its children; its lease is the root's.
#[async_trait]
pub trait DocumentHandles: Send + Sync + 'static {
    /// The handle of the tree rooted at `root_id`, if this process holds its lease now.
    fn handle(&self, root_id: Uuid) -> Option<Arc<dyn Store>>;

    /// The handle of a root document about to be created, its lease taken if nobody holds it
    /// (nobody does, for a new id). `None`: it could not be taken.
    async fn take(&self, root_id: Uuid) -> Option<Arc<dyn Store>> {
        self.handle(root_id)
    }
}

/// Each document's root, as read from a store once (a document's parent never changes), for
/// whoever routes by document tree: at most [`Roots::REMEMBERED`] are kept; past it, all are
/// forgotten and read again.
#[derive(Default)]
pub struct Roots(std::sync::Mutex<std::collections::BTreeMap<Uuid, Uuid>>);

impl Roots {
    pub const REMEMBERED: usize = 65_536;

    /// The root of `document_id`'s tree (itself for a root), read from `store` unless
    /// remembered; `None` if there is no such document.
    pub async fn of(&self, store: &dyn Store, document_id: Uuid) -> StoreResult<Option<Uuid>> {
        let remembered = self.lock().get(&document_id).copied();
        if remembered.is_some() {
            return Ok(remembered);
        }
        let Some(doc) = store.document(document_id).await? else {
            return Ok(None);
        };
        let root = doc.parent_id.unwrap_or(doc.id);
        let mut roots = self.lock();
        if roots.len() >= Self::REMEMBERED {
            roots.clear();
        }
        roots.insert(document_id, root);
        Ok(Some(root))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<Uuid, Uuid>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A store handle routing each document's writes through that document's handle (see the
/// module documentation).
pub struct Routed {
    /// Unfenced: reads, and the writes that are not a document's.
    inner: Arc<dyn Store>,
    handles: Arc<dyn DocumentHandles>,
    /// Each document's root, as read.
    roots: Roots,
}

/// The refusal of a write of a document this process does not serve.
fn not_served(document_id: Uuid) -> StoreError {
    StoreError::Fenced(format!(
        "this process does not serve document {document_id}: another process holds its lease, \
         or nobody does"
    ))
}

impl Routed {
    pub fn new(inner: Arc<dyn Store>, handles: Arc<dyn DocumentHandles>) -> Self {
        Routed {
            inner,
            handles,
            roots: Roots::default(),
        }
    }

    /// The root of `document_id`'s tree: itself for a root, or a document not created yet.
    pub async fn root_of(&self, document_id: Uuid) -> StoreResult<Uuid> {
        Ok(self
            .roots
            .of(&*self.inner, document_id)
            .await?
            .unwrap_or(document_id))
    }

    /// The handle `document_id`'s writes go through — its tree's — or the refusal.
    async fn route(&self, document_id: Uuid) -> StoreResult<Arc<dyn Store>> {
        if let Some(handle) = self.handles.handle(document_id) {
            return Ok(handle);
        }
        let root = self.root_of(document_id).await?;
        self.handles
            .handle(root)
            .ok_or_else(|| not_served(document_id))
    }

    /// [`Routed::route`] by a row's document, read first; `found` is `None` for an unknown row,
    /// whose write then goes through the unfenced handle and finds nothing to change.
    async fn route_found(&self, found: Option<Uuid>) -> StoreResult<Arc<dyn Store>> {
        match found {
            Some(document_id) => self.route(document_id).await,
            None => Ok(self.inner.clone()),
        }
    }

    async fn route_run(&self, run_id: &str) -> StoreResult<Arc<dyn Store>> {
        let run = self.inner.implementation_run(run_id).await?;
        self.route_found(run.map(|r| r.document_id)).await
    }

    async fn route_build(&self, id: Uuid) -> StoreResult<Arc<dyn Store>> {
        let build = self.inner.build(id).await?;
        self.route_found(build.map(|b| b.document_id)).await
    }

    /// The handle a sweep of what an earlier process left goes through: the document's, for one
    /// document; refused for every document.
    async fn sweep(&self, reach: Reach, method: &str) -> StoreResult<Arc<dyn Store>> {
        match reach {
            Reach::Document(document_id) => self.route(document_id).await,
            Reach::Every => Err(every_document(method)),
        }
    }

    async fn route_job(&self, id: Uuid) -> StoreResult<Arc<dyn Store>> {
        let job = self.inner.job(id).await?;
        self.route_found(job.map(|j| j.document_id)).await
    }
}

/// The refusal of a write that sweeps every document at once.
fn every_document(method: &str) -> StoreError {
    StoreError::Fenced(format!(
        "{method} reaches every document, and this process serves only those whose leases it \
         holds: under document leases it is done one document at a time"
    ))
}

#[async_trait]
impl Store for Routed {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }

    /// The writes that are not a document's go through `fence`; each document's writes stay
    /// fenced by that document's lease.
    fn fenced(&self, fence: Fence) -> Arc<dyn Store> {
        Arc::new(Routed::new(self.inner.fenced(fence), self.handles.clone()))
    }
}

#[async_trait]
impl SignInStore for Routed {
    async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account> {
        self.inner
            .upsert_account(github_user_id, login, now_ms)
            .await
    }

    async fn account(&self, id: Uuid) -> StoreResult<Option<Account>> {
        self.inner.account(id).await
    }

    async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>> {
        self.inner.account_by_login(login).await
    }

    async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()> {
        self.inner.create_browser_login(login).await
    }

    async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>> {
        self.inner.browser_login(id).await
    }

    async fn live_browser_logins(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<BrowserLogin>> {
        self.inner
            .live_browser_logins(account_id, now_ms, limit)
            .await
    }

    async fn sign_out_browser_login(&self, id: Uuid, now_ms: UnixMillis) -> StoreResult<bool> {
        self.inner.sign_out_browser_login(id, now_ms).await
    }

    async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>> {
        self.inner
            .set_login_credential(login_id, expected_revision, sealed)
            .await
    }

    async fn login_credential(&self, login_id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.inner.login_credential(login_id).await
    }

    async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool> {
        self.inner.delete_login_credential(login_id).await
    }

    async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64> {
        self.inner.delete_expired_logins(now_ms).await
    }
}

#[async_trait]
impl DocumentStore for Routed {
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        match doc.parent_id {
            Some(parent) => self.route(parent).await?,
            None => self
                .handles
                .take(doc.id)
                .await
                .ok_or_else(|| not_served(doc.id))?,
        }
        .create_document(doc)
        .await
    }

    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        self.inner.document(id).await
    }

    async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>> {
        self.inner.document_brief(id).await
    }

    async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>> {
        self.inner.document_provenance(id).await
    }

    async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool> {
        self.inner.created_through_mcp(id).await
    }

    async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>> {
        self.inner.children(parent_id).await
    }

    async fn repository_documents(
        &self,
        repo_owner: &str,
        repo_name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Document>> {
        self.inner
            .repository_documents(repo_owner, repo_name, limit)
            .await
    }

    async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>> {
        self.inner
            .document_by_slug(repo_owner, repo_name, slug)
            .await
    }

    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        self.route(id).await?.set_archived(id, archived).await
    }

    async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document> {
        self.route(document_id)
            .await?
            .rename_document(document_id, new_slug, new_title)
            .await
    }

    async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>> {
        self.inner.earlier_slugs(document_id).await
    }

    async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance> {
        self.route(id)
            .await?
            .advance_revision(id, kind, expected)
            .await
    }
}

#[async_trait]
impl ContentStore for Routed {
    async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<i64> {
        self.route(document_id)
            .await?
            .append_update(document_id, update, now_ms)
            .await
    }

    async fn append_updates(
        &self,
        document_id: Uuid,
        updates: &[&[u8]],
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        self.route(document_id)
            .await?
            .append_updates(document_id, updates, now_ms)
            .await
    }

    async fn commit_plan_edit(
        &self,
        document_id: Uuid,
        expected_plan_revision: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        self.route(document_id)
            .await?
            .commit_plan_edit(document_id, expected_plan_revision, owner, update, now_ms)
            .await
    }

    async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent> {
        self.inner.document_content(document_id).await
    }

    async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        self.route(document_id)
            .await?
            .write_checkpoint(document_id, upto_seq, state)
            .await
    }

    async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.route(document_id)
            .await?
            .reset_content(document_id, state)
            .await
    }
}

#[async_trait]
impl TranscriptStore for Routed {
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        self.route(document_id)
            .await?
            .append_transcript(document_id, entry)
            .await
    }

    /// Put in line through the document's own handle, as `append_transcript` is written.
    async fn queue_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<Pending<TranscriptEntry>> {
        self.route(document_id)
            .await?
            .queue_transcript(document_id, entry)
            .await
    }

    async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64> {
        self.inner.last_transcript_seq(document_id).await
    }

    async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.inner.transcript(document_id, after_seq, limit).await
    }

    async fn transcript_by_key(
        &self,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>> {
        self.inner.transcript_by_key(document_id, key).await
    }
}

#[async_trait]
impl OwnershipStore for Routed {
    async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership> {
        self.inner.ownership(document_id).await
    }

    async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim> {
        self.route(document_id)
            .await?
            .claim_ownership(document_id, holder, now_ms)
            .await
    }

    async fn release_ownership(&self, document_id: Uuid, generation: i64) -> StoreResult<Release> {
        self.route(document_id)
            .await?
            .release_ownership(document_id, generation)
            .await
    }

    async fn clear_all_ownership(&self, reach: Reach) -> StoreResult<u64> {
        self.sweep(reach, "clear_all_ownership")
            .await?
            .clear_all_ownership(reach)
            .await
    }

    async fn clear_unheld_ownership(&self, reach: Reach) -> StoreResult<u64> {
        self.sweep(reach, "clear_unheld_ownership")
            .await?
            .clear_unheld_ownership(reach)
            .await
    }
}

#[async_trait]
impl AttachmentStore for Routed {
    async fn put_attachment(&self, file: &NewAttachment, limit: UnsentLimit) -> StoreResult<Kept> {
        self.route(file.attachment.document_id)
            .await?
            .put_attachment(file, limit)
            .await
    }

    async fn attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
    ) -> StoreResult<Option<(Attachment, Vec<u8>)>> {
        self.inner.attachment(document_id, id).await
    }

    async fn take_back_attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> StoreResult<TakeBack> {
        self.route(document_id)
            .await?
            .take_back_attachment(document_id, id, uploader)
            .await
    }

    async fn forget_unsent_attachments(&self, before_ms: UnixMillis) -> StoreResult<u64> {
        self.inner.forget_unsent_attachments(before_ms).await
    }
}

#[async_trait]
impl ModelChoiceStore for Routed {
    async fn put_model_choice(&self, choice: &ModelChoice) -> StoreResult<()> {
        self.route(choice.document_id)
            .await?
            .put_model_choice(choice)
            .await
    }

    async fn clear_model_choice(&self, document_id: Uuid) -> StoreResult<bool> {
        self.route(document_id)
            .await?
            .clear_model_choice(document_id)
            .await
    }

    async fn model_choice(&self, document_id: Uuid) -> StoreResult<Option<ModelChoice>> {
        self.inner.model_choice(document_id).await
    }

    async fn pause_participation(&self, pause: &ParticipationPause) -> StoreResult<()> {
        self.route(pause.document_id)
            .await?
            .pause_participation(pause)
            .await
    }

    async fn resume_participation(&self, document_id: Uuid) -> StoreResult<bool> {
        self.route(document_id)
            .await?
            .resume_participation(document_id)
            .await
    }

    async fn participation_pause(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<ParticipationPause>> {
        self.inner.participation_pause(document_id).await
    }
}

#[async_trait]
impl HoldStore for Routed {
    async fn put_link_hold(&self, hold: &LinkHold) -> StoreResult<()> {
        self.route(hold.document_id)
            .await?
            .put_link_hold(hold)
            .await
    }

    async fn link_holds(&self) -> StoreResult<Vec<LinkHold>> {
        self.inner.link_holds().await
    }

    async fn end_handover(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.route(document_id)
            .await?
            .end_handover(document_id, written_at_ms)
            .await
    }

    async fn delete_link_hold(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.route(document_id)
            .await?
            .delete_link_hold(document_id, written_at_ms)
            .await
    }
}

#[async_trait]
impl LeaseStore for Routed {
    async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.inner
            .acquire_writer_lease(holder, now_ms, ttl_ms)
            .await
    }

    async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>> {
        self.inner.renew_writer_lease(lease, now_ms, ttl_ms).await
    }

    async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
        self.inner.release_writer_lease(lease).await
    }
}

#[async_trait]
impl DocumentLeaseStore for Routed {
    async fn acquire_document_lease(
        &self,
        document_id: Uuid,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.inner
            .acquire_document_lease(document_id, holder, now_ms, ttl_ms)
            .await
    }

    async fn renew_document_leases(
        &self,
        leases: &[(Uuid, WriterLease)],
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Vec<(Uuid, WriterLease)>> {
        self.inner
            .renew_document_leases(leases, now_ms, ttl_ms)
            .await
    }

    async fn release_document_lease(
        &self,
        document_id: Uuid,
        lease: &WriterLease,
    ) -> StoreResult<()> {
        self.inner.release_document_lease(document_id, lease).await
    }

    async fn document_lease(&self, document_id: Uuid) -> StoreResult<Option<DocumentLeaseRow>> {
        self.inner.document_lease(document_id).await
    }
}

#[async_trait]
impl RunStore for Routed {
    async fn save_run(
        &self,
        run: &RunRecord,
        stages: &[StageRecord],
        replace: bool,
    ) -> StoreResult<()> {
        self.route(run.document_id)
            .await?
            .save_run(run, stages, replace)
            .await
    }

    async fn runs(&self, document_id: Uuid) -> StoreResult<Vec<RunRecord>> {
        self.inner.runs(document_id).await
    }

    async fn run_stages(
        &self,
        document_id: Uuid,
        run_id: &str,
        offset: i64,
        limit: i64,
    ) -> StoreResult<Option<StagePage>> {
        self.inner
            .run_stages(document_id, run_id, offset, limit)
            .await
    }

    async fn delete_ended_runs(&self, document_id: Uuid) -> StoreResult<u64> {
        self.route(document_id)
            .await?
            .delete_ended_runs(document_id)
            .await
    }

    async fn stop_unheld_runs(&self, reach: Reach) -> StoreResult<u64> {
        self.sweep(reach, "stop_unheld_runs")
            .await?
            .stop_unheld_runs(reach)
            .await
    }
}

#[async_trait]
impl crate::JobStore for Routed {
    async fn enqueue_job(&self, job: &crate::NewJob) -> StoreResult<crate::Enqueued> {
        self.route(job.document_id).await?.enqueue_job(job).await
    }

    async fn job(&self, id: Uuid) -> StoreResult<Option<crate::Job>> {
        self.inner.job(id).await
    }

    async fn document_jobs(&self, document_id: Uuid, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.inner.document_jobs(document_id, limit).await
    }

    async fn last_completed_job(
        &self,
        document_id: Uuid,
        target: &str,
    ) -> StoreResult<Option<crate::Job>> {
        self.inner.last_completed_job(document_id, target).await
    }

    async fn due_jobs(&self, now_ms: UnixMillis, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.inner.due_jobs(now_ms, limit).await
    }

    async fn claim_job(
        &self,
        id: Uuid,
        claim_owner: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<crate::Job>> {
        self.route_job(id)
            .await?
            .claim_job(id, claim_owner, now_ms, ttl_ms)
            .await
    }

    async fn renew_job_claim(
        &self,
        id: Uuid,
        claim_generation: i64,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        self.route_job(id)
            .await?
            .renew_job_claim(id, claim_generation, now_ms, ttl_ms)
            .await
    }

    async fn set_job_progress(
        &self,
        id: Uuid,
        claim_generation: i64,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.route_job(id)
            .await?
            .set_job_progress(id, claim_generation, progress, now_ms)
            .await
    }

    async fn settle_job(
        &self,
        id: Uuid,
        claim_generation: i64,
        settlement: &crate::Settlement,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.route_job(id)
            .await?
            .settle_job(id, claim_generation, settlement, now_ms)
            .await
    }

    async fn cancel_job(&self, id: Uuid, reason: &str, now_ms: UnixMillis) -> StoreResult<bool> {
        self.route_job(id)
            .await?
            .cancel_job(id, reason, now_ms)
            .await
    }

    async fn interrupt_running_jobs(
        &self,
        reason: &str,
        now_ms: UnixMillis,
        reach: Reach,
    ) -> StoreResult<u64> {
        self.sweep(reach, "interrupt_running_jobs")
            .await?
            .interrupt_running_jobs(reason, now_ms, reach)
            .await
    }

    async fn job_counts(&self) -> StoreResult<Vec<(crate::JobState, u64)>> {
        self.inner.job_counts().await
    }
}

#[async_trait]
impl crate::TitleStore for Routed {
    async fn title_sidecar(&self, document_id: Uuid) -> StoreResult<crate::TitleSidecar> {
        self.inner.title_sidecar(document_id).await
    }

    async fn draft_title(
        &self,
        document_id: Uuid,
        expected: &str,
        new_title: &str,
    ) -> StoreResult<crate::Drafted> {
        self.route(document_id)
            .await?
            .draft_title(document_id, expected, new_title)
            .await
    }
}

#[async_trait]
impl crate::GraphStore for Routed {
    async fn graph_versions(&self, document_id: Uuid) -> StoreResult<Vec<crate::GraphVersion>> {
        self.inner.graph_versions(document_id).await
    }

    async fn change_graph(
        &self,
        document_id: Uuid,
        change: &crate::GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::GraphVersion, crate::GraphRefusal>> {
        self.route(document_id)
            .await?
            .change_graph(document_id, change, now_ms)
            .await
    }

    async fn start_implementation(
        &self,
        document_id: Uuid,
        counters: crate::GraphCounters,
        run_id: &str,
        progress: &str,
        build: Option<Uuid>,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::ImplementationRun, crate::GraphRefusal>> {
        self.route(document_id)
            .await?
            .start_implementation(document_id, counters, run_id, progress, build, now_ms)
            .await
    }

    async fn implementation_run(
        &self,
        run_id: &str,
    ) -> StoreResult<Option<crate::ImplementationRun>> {
        self.inner.implementation_run(run_id).await
    }

    async fn implementation_runs(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.inner.implementation_runs(document_id).await
    }

    async fn implementation_report(
        &self,
        run_id: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        self.inner.implementation_report(run_id, key).await
    }

    async fn report_implementation(
        &self,
        run_id: &str,
        report: &crate::RunReport,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Reported> {
        self.route_run(run_id)
            .await?
            .report_implementation(run_id, report, now_ms)
            .await
    }
}

#[async_trait]
impl crate::CommentStore for Routed {
    async fn start_comment(
        &self,
        thread: &crate::NewCommentThread,
    ) -> StoreResult<crate::ThreadWithNotes> {
        self.route(thread.document_id)
            .await?
            .start_comment(thread)
            .await
    }

    async fn reply_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        note: &crate::NewCommentNote,
        max_replies: i64,
    ) -> StoreResult<crate::Replied> {
        self.route(document_id)
            .await?
            .reply_comment(document_id, thread_id, note, max_replies)
            .await
    }

    async fn resolve_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        by: &str,
        at_ms: UnixMillis,
    ) -> StoreResult<crate::CommentThread> {
        self.route(document_id)
            .await?
            .resolve_comment(document_id, thread_id, by, at_ms)
            .await
    }

    async fn set_comment_result(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        revision: i64,
    ) -> StoreResult<crate::CommentThread> {
        self.route(document_id)
            .await?
            .set_comment_result(document_id, thread_id, revision)
            .await
    }

    async fn comment_thread(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<Option<crate::ThreadWithNotes>> {
        self.inner.comment_thread(document_id, thread_id).await
    }

    async fn comment_threads(
        &self,
        document_id: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<crate::ThreadWithNotes>> {
        self.inner.comment_threads(document_id, limit).await
    }
}

/// A request about a document is kept through that document's handle (so a process that
/// lost the document cannot record an answer for it); one about no document, unfenced.
impl Routed {
    async fn request_handle(&self, key: &crate::RequestKey) -> StoreResult<Arc<dyn Store>> {
        match key.document {
            Some(document_id) => self.route(document_id).await,
            None => Ok(self.inner.clone()),
        }
    }
}

#[async_trait]
impl crate::RequestStore for Routed {
    async fn claim_request(
        &self,
        key: &crate::RequestKey,
        digest: &str,
        now_ms: UnixMillis,
        expires_at_ms: UnixMillis,
    ) -> StoreResult<crate::RequestClaim> {
        self.request_handle(key)
            .await?
            .claim_request(key, digest, now_ms, expires_at_ms)
            .await
    }

    async fn answer_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
        answer: &str,
    ) -> StoreResult<bool> {
        self.request_handle(key)
            .await?
            .answer_request(key, since_ms, answer)
            .await
    }

    async fn release_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.request_handle(key)
            .await?
            .release_request(key, since_ms)
            .await
    }
}

#[async_trait]
impl crate::MachineStore for Routed {
    async fn pair_machine(&self, machine: &crate::NewMachine) -> StoreResult<crate::Machine> {
        self.inner.pair_machine(machine).await
    }

    async fn machine(&self, id: Uuid) -> StoreResult<Option<crate::Machine>> {
        self.inner.machine(id).await
    }

    async fn machine_credential(&self, id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.inner.machine_credential(id).await
    }

    async fn set_machine_credential(
        &self,
        id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
        release: Option<&str>,
    ) -> StoreResult<Option<i64>> {
        self.inner
            .set_machine_credential(id, expected_revision, sealed, release)
            .await
    }

    async fn machines_of(&self, account_id: Uuid) -> StoreResult<Vec<crate::Machine>> {
        self.inner.machines_of(account_id).await
    }

    async fn share_machine(
        &self,
        id: Uuid,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.inner.share_machine(id, account_id, now_ms).await
    }

    async fn unshare_machine(&self, id: Uuid, account_id: Uuid) -> StoreResult<bool> {
        self.inner.unshare_machine(id, account_id).await
    }

    async fn machine_shares(&self, id: Uuid) -> StoreResult<Vec<Account>> {
        self.inner.machine_shares(id).await
    }

    async fn set_favourite_machine(
        &self,
        account_id: Uuid,
        machine_id: Option<Uuid>,
    ) -> StoreResult<()> {
        self.inner
            .set_favourite_machine(account_id, machine_id)
            .await
    }

    async fn favourite_machine(&self, account_id: Uuid) -> StoreResult<Option<Uuid>> {
        self.inner.favourite_machine(account_id).await
    }

    async fn choose_machine(
        &self,
        document_id: Uuid,
        choice: Option<&crate::MachineChoice>,
    ) -> StoreResult<Option<crate::MachineChoice>> {
        self.route(document_id)
            .await?
            .choose_machine(document_id, choice)
            .await
    }

    async fn machine_choice(&self, document_id: Uuid) -> StoreResult<Option<crate::MachineChoice>> {
        self.inner.machine_choice(document_id).await
    }

    async fn machine_documents(&self, machine_id: Uuid) -> StoreResult<Vec<crate::MachineChoice>> {
        self.inner.machine_documents(machine_id).await
    }

    async fn choose_default_machine(
        &self,
        choice: &crate::MachineChoice,
    ) -> StoreResult<(crate::MachineChoice, bool)> {
        self.route(choice.document_id)
            .await?
            .choose_default_machine(choice)
            .await
    }

    async fn withdraw_default_machine(
        &self,
        document_id: Uuid,
        machine_id: Uuid,
    ) -> StoreResult<bool> {
        self.route(document_id)
            .await?
            .withdraw_default_machine(document_id, machine_id)
            .await
    }

    async fn default_machine_choices(&self) -> StoreResult<Vec<crate::MachineChoice>> {
        self.inner.default_machine_choices().await
    }

    async fn put_planner_credential(
        &self,
        credential: &crate::PlannerCredential,
    ) -> StoreResult<()> {
        self.inner.put_planner_credential(credential).await
    }

    async fn planner_credential(
        &self,
        digest: &str,
    ) -> StoreResult<Option<crate::PlannerCredential>> {
        self.inner.planner_credential(digest).await
    }

    async fn unpair_machine(&self, id: Uuid) -> StoreResult<bool> {
        self.inner.unpair_machine(id).await
    }

    async fn record_connector_poll(&self, poll: &crate::ConnectorPoll) -> StoreResult<()> {
        self.inner.record_connector_poll(poll).await
    }

    async fn connector_polls_since(
        &self,
        since_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ConnectorPoll>> {
        self.inner.connector_polls_since(since_ms).await
    }
}

#[async_trait]
impl crate::BuildStore for Routed {
    async fn approve_and_queue(
        &self,
        document_id: Uuid,
        approval: &crate::GraphChange,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<(crate::GraphVersion, crate::Build), crate::GraphRefusal>> {
        self.route(document_id)
            .await?
            .approve_and_queue(document_id, approval, build, now_ms)
            .await
    }

    async fn queue_build(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.route(document_id)
            .await?
            .queue_build(document_id, build, now_ms)
            .await
    }

    async fn build(&self, id: Uuid) -> StoreResult<Option<crate::Build>> {
        self.inner.build(id).await
    }

    async fn machine_builds(&self, machine_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.inner.machine_builds(machine_id).await
    }

    async fn document_builds(&self, document_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.inner.document_builds(document_id).await
    }

    async fn pick_up_build(
        &self,
        id: Uuid,
        bridge_digest: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.route_build(id)
            .await?
            .pick_up_build(id, bridge_digest, now_ms)
            .await
    }

    async fn build_by_bridge(&self, bridge_digest: &str) -> StoreResult<Option<crate::Build>> {
        self.inner.build_by_bridge(bridge_digest).await
    }

    async fn fail_build(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.route_build(id)
            .await?
            .fail_build(id, reason, now_ms)
            .await
    }

    async fn built_source(&self, document_id: Uuid) -> StoreResult<Option<crate::BuiltSource>> {
        self.inner.built_source(document_id).await
    }

    async fn queue_rebuild(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        after: &str,
        after_plan_revision: i64,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.route(document_id)
            .await?
            .queue_rebuild(document_id, build, after, after_plan_revision, now_ms)
            .await
    }

    async fn land_rebuild(
        &self,
        id: Uuid,
        definition: &str,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Landing> {
        self.route_build(id)
            .await?
            .land_rebuild(id, definition, progress, now_ms)
            .await
    }

    async fn expire_builds(
        &self,
        reach: Reach,
        cutoff_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::Build>> {
        self.sweep(reach, "expire_builds")
            .await?
            .expire_builds(reach, cutoff_ms, now_ms)
            .await
    }

    async fn silent_builds(&self, cutoff_ms: UnixMillis) -> StoreResult<Vec<crate::Build>> {
        self.inner.silent_builds(cutoff_ms).await
    }

    async fn silent_build_runs(
        &self,
        cutoff_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.inner.silent_build_runs(cutoff_ms).await
    }
}
