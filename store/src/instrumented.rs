//! [`Instrumented`]: any [`Store`] with every call reported to a [`Hook`] — its method, whether
//! it writes, whether it succeeded (or was refused by its fence) and how long it took.
//!
//! Owns: forwarding each method of every part of the interface unchanged, and the report; a
//! fenced handle made from it ([`Store::fenced`]) is the inner store's fenced handle reporting to
//! the same hook. Used for the server's store-latency metrics and by the simulator to check that
//! no write lands after the writer lease is given back or taken over.
//! Does not own: what the hook does with a report (it must be cheap and must not block), or
//! whether it holds a call before it runs ([`Hook::hold`]: the simulator's faults; production
//! holds nothing) or fails it without running it ([`Hook::fail`]: tests' faults).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use crate::{
    Account, Advance, Attachment, AttachmentStore, BrowserLogin, Claim, ContentStore, Document,
    DocumentContent, DocumentLeaseRow, DocumentLeaseStore, DocumentStore, Fence, FenceScope,
    HoldStore, Holder, Kept, LeaseAcquire, LeaseStore, LinkHold, ModelChoice, ModelChoiceStore,
    NewAttachment, NewDocument, NewTranscriptEntry, OwnerGuard, Ownership, OwnershipStore,
    ParticipationPause, Pending, PlanCommit, Provenance, Release, RevisionKind, RunRecord,
    RunStore, SignInStore, StagePage, StageRecord, Store, StoreError, StoreResult, TakeBack,
    TranscriptEntry, TranscriptStore, UnixMillis, UnsentLimit, WriterLease,
};

/// One store call, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The method's name (`append_transcript`, `ownership`, …).
    pub method: &'static str,
    /// Whether the method may change stored state.
    pub write: bool,
    /// Whether it returned `Ok`.
    pub ok: bool,
    /// Whether it was refused by its fence ([`StoreError::Fenced`]): a write of a process whose
    /// writer epoch is no longer current.
    pub fenced: bool,
    /// How long it took, on the runtime's clock (simulated under turmoil).
    pub elapsed: Duration,
    /// The lease and epoch the handle writes under, for a fenced handle's call.
    pub fence: Option<(FenceScope, i64)>,
}

/// A wait a [`Hook`] puts before a call.
pub type Hold = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Told of every call, after it returns.
pub trait Hook: Send + Sync + 'static {
    fn call(&self, call: Call);

    /// Asked before each call runs (its method, whether it writes): a wait to finish before the
    /// call begins, or `None` (the default) to run it at once. The simulator holds calls this
    /// way to play a hung connection or a write held up in flight, and tests use it to make calls
    /// really overlap (the memory store itself never yields); a call whose caller gives up
    /// meanwhile (a timeout) never runs and is never reported.
    fn hold(&self, _method: &'static str, _write: bool) -> Option<Hold> {
        None
    }

    /// Asked before each call runs, after any [`Hook::hold`]: an error the call returns instead
    /// of running, or `None` (the default) to run it. Tests use it to play a store that fails one
    /// kind of write (a sign-out that cannot be recorded); the call is reported as failed and the
    /// inner store never sees it.
    fn fail(&self, _method: &'static str, _write: bool) -> Option<StoreError> {
        None
    }
}

/// The lease methods (taking, renewing and giving back a lease), which no fence refuses: they
/// are how its epoch is kept or changed.
fn is_lease_method(method: &str) -> bool {
    method.ends_with("_writer_lease")
        || method.ends_with("_document_lease")
        || method.ends_with("_document_leases")
}

const READ: bool = false;
const WRITE: bool = true;

/// A store whose every call is reported to `hook`.
///
/// A fenced handle made from it ([`Store::fenced`]) makes the fence's local check itself, as a
/// write leaves the process — before any [`Hook::hold`] — and gives its inner store the fence
/// as the database sees it ([`Fence::in_transit`]): a write held up in transit while its process
/// gives the lease up still reaches the database, and is refused there by the epoch check alone,
/// as a statement already sent to PostgreSQL would be.
pub struct Instrumented<H> {
    inner: Arc<dyn Store>,
    /// Shared with the fenced handles made from this one.
    hook: Arc<H>,
    /// The fence of a fenced handle: its local check is made here.
    fence: Option<Fence>,
}

impl<H: Hook> Instrumented<H> {
    pub fn new(inner: Arc<dyn Store>, hook: H) -> Self {
        Instrumented {
            inner,
            hook: Arc::new(hook),
            fence: None,
        }
    }

    async fn observe<T>(
        &self,
        method: &'static str,
        write: bool,
        call: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let started = Instant::now();
        let sent = match &self.fence {
            Some(fence) if write && !is_lease_method(method) => fence.check_local(),
            _ => Ok(()),
        };
        let result = match sent {
            Err(refused) => Err(refused),
            Ok(()) => {
                if let Some(hold) = self.hook.hold(method, write) {
                    hold.await;
                }
                match self.hook.fail(method, write) {
                    Some(error) => Err(error),
                    None => call.await,
                }
            }
        };
        self.hook.call(Call {
            method,
            write,
            ok: result.is_ok(),
            fenced: matches!(result, Err(StoreError::Fenced(_))),
            elapsed: started.elapsed(),
            fence: self.fence.as_ref().map(|f| (f.scope(), f.epoch())),
        });
        result
    }
}

#[async_trait]
impl<H: Hook> Store for Instrumented<H> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn ping(&self) -> StoreResult<()> {
        self.observe("ping", READ, self.inner.ping()).await
    }

    /// The inner store's fenced handle, reported to the same hook.
    fn fenced(&self, fence: Fence) -> Arc<dyn Store> {
        Arc::new(Instrumented {
            inner: self.inner.fenced(fence.in_transit()),
            hook: self.hook.clone(),
            fence: Some(fence),
        })
    }
}

#[async_trait]
impl<H: Hook> SignInStore for Instrumented<H> {
    async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account> {
        self.observe(
            "upsert_account",
            WRITE,
            self.inner.upsert_account(github_user_id, login, now_ms),
        )
        .await
    }

    async fn account(&self, id: Uuid) -> StoreResult<Option<Account>> {
        self.observe("account", READ, self.inner.account(id)).await
    }

    async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>> {
        self.observe("account_by_login", READ, self.inner.account_by_login(login))
            .await
    }

    async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()> {
        self.observe(
            "create_browser_login",
            WRITE,
            self.inner.create_browser_login(login),
        )
        .await
    }

    async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>> {
        self.observe("browser_login", READ, self.inner.browser_login(id))
            .await
    }

    async fn live_browser_logins(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<BrowserLogin>> {
        self.observe(
            "live_browser_logins",
            READ,
            self.inner.live_browser_logins(account_id, now_ms, limit),
        )
        .await
    }

    async fn sign_out_browser_login(&self, id: Uuid, now_ms: UnixMillis) -> StoreResult<bool> {
        self.observe(
            "sign_out_browser_login",
            WRITE,
            self.inner.sign_out_browser_login(id, now_ms),
        )
        .await
    }

    async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>> {
        self.observe(
            "set_login_credential",
            WRITE,
            self.inner
                .set_login_credential(login_id, expected_revision, sealed),
        )
        .await
    }

    async fn login_credential(&self, login_id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.observe(
            "login_credential",
            READ,
            self.inner.login_credential(login_id),
        )
        .await
    }

    async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool> {
        self.observe(
            "delete_login_credential",
            WRITE,
            self.inner.delete_login_credential(login_id),
        )
        .await
    }

    async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64> {
        self.observe(
            "delete_expired_logins",
            WRITE,
            self.inner.delete_expired_logins(now_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> DocumentStore for Instrumented<H> {
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        self.observe("create_document", WRITE, self.inner.create_document(doc))
            .await
    }

    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        self.observe("document", READ, self.inner.document(id))
            .await
    }

    async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>> {
        self.observe("document_brief", READ, self.inner.document_brief(id))
            .await
    }

    async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>> {
        self.observe(
            "document_provenance",
            READ,
            self.inner.document_provenance(id),
        )
        .await
    }

    async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool> {
        self.observe(
            "created_through_mcp",
            READ,
            self.inner.created_through_mcp(id),
        )
        .await
    }

    async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>> {
        self.observe("children", READ, self.inner.children(parent_id))
            .await
    }

    async fn repository_documents(
        &self,
        repo_owner: &str,
        repo_name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Document>> {
        self.observe(
            "repository_documents",
            READ,
            self.inner
                .repository_documents(repo_owner, repo_name, limit),
        )
        .await
    }

    async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>> {
        self.observe(
            "document_by_slug",
            READ,
            self.inner.document_by_slug(repo_owner, repo_name, slug),
        )
        .await
    }

    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        self.observe("set_archived", WRITE, self.inner.set_archived(id, archived))
            .await
    }

    async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document> {
        self.observe(
            "rename_document",
            WRITE,
            self.inner.rename_document(document_id, new_slug, new_title),
        )
        .await
    }

    async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>> {
        self.observe("earlier_slugs", READ, self.inner.earlier_slugs(document_id))
            .await
    }

    async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance> {
        self.observe(
            "advance_revision",
            WRITE,
            self.inner.advance_revision(id, kind, expected),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> ContentStore for Instrumented<H> {
    async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<i64> {
        self.observe(
            "append_update",
            WRITE,
            self.inner.append_update(document_id, update, now_ms),
        )
        .await
    }

    async fn append_updates(
        &self,
        document_id: Uuid,
        updates: &[&[u8]],
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        self.observe(
            "append_updates",
            WRITE,
            self.inner.append_updates(document_id, updates, now_ms),
        )
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
        self.observe(
            "commit_plan_edit",
            WRITE,
            self.inner
                .commit_plan_edit(document_id, expected_plan_revision, owner, update, now_ms),
        )
        .await
    }

    async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent> {
        self.observe(
            "document_content",
            READ,
            self.inner.document_content(document_id),
        )
        .await
    }

    async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        self.observe(
            "write_checkpoint",
            WRITE,
            self.inner.write_checkpoint(document_id, upto_seq, state),
        )
        .await
    }

    async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.observe(
            "reset_content",
            WRITE,
            self.inner.reset_content(document_id, state),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> TranscriptStore for Instrumented<H> {
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        self.observe(
            "append_transcript",
            WRITE,
            self.inner.append_transcript(document_id, entry),
        )
        .await
    }

    /// Held and failed as `append_transcript` is, when it is put in line; reported as
    /// `append_transcript` once its outcome is known.
    async fn queue_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<Pending<TranscriptEntry>> {
        const METHOD: &str = "append_transcript";
        let started = Instant::now();
        let hook = self.hook.clone();
        let fence = self.fence.as_ref().map(|f| (f.scope(), f.epoch()));
        let report = move |result: Result<(), &StoreError>| {
            hook.call(Call {
                method: METHOD,
                write: WRITE,
                ok: result.is_ok(),
                fenced: matches!(result, Err(StoreError::Fenced(_))),
                elapsed: started.elapsed(),
                fence,
            })
        };
        // The local check as the write leaves the process, before it may be held in transit.
        if let Some(Err(refused)) = self.fence.as_ref().map(Fence::check_local) {
            report(Err(&refused));
            return Err(refused);
        }
        if let Some(hold) = self.hook.hold(METHOD, WRITE) {
            hold.await;
        }
        let queued = match self.hook.fail(METHOD, WRITE) {
            Some(error) => Err(error),
            None => self.inner.queue_transcript(document_id, entry).await,
        };
        match queued {
            Ok(pending) => Ok(Box::pin(async move {
                let saved = pending.await;
                report(saved.as_ref().map(|_| ()));
                saved
            })),
            Err(error) => {
                report(Err(&error));
                Err(error)
            }
        }
    }

    async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64> {
        self.observe(
            "last_transcript_seq",
            READ,
            self.inner.last_transcript_seq(document_id),
        )
        .await
    }

    async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.observe(
            "transcript",
            READ,
            self.inner.transcript(document_id, after_seq, limit),
        )
        .await
    }

    async fn transcript_by_key(
        &self,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>> {
        self.observe(
            "transcript_by_key",
            READ,
            self.inner.transcript_by_key(document_id, key),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> OwnershipStore for Instrumented<H> {
    async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership> {
        self.observe("ownership", READ, self.inner.ownership(document_id))
            .await
    }

    async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim> {
        self.observe(
            "claim_ownership",
            WRITE,
            self.inner.claim_ownership(document_id, holder, now_ms),
        )
        .await
    }

    async fn release_ownership(&self, document_id: Uuid, generation: i64) -> StoreResult<Release> {
        self.observe(
            "release_ownership",
            WRITE,
            self.inner.release_ownership(document_id, generation),
        )
        .await
    }

    async fn clear_all_ownership(&self, reach: crate::Reach) -> StoreResult<u64> {
        self.observe(
            "clear_all_ownership",
            WRITE,
            self.inner.clear_all_ownership(reach),
        )
        .await
    }

    async fn clear_unheld_ownership(&self, reach: crate::Reach) -> StoreResult<u64> {
        self.observe(
            "clear_unheld_ownership",
            WRITE,
            self.inner.clear_unheld_ownership(reach),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> AttachmentStore for Instrumented<H> {
    async fn put_attachment(&self, file: &NewAttachment, limit: UnsentLimit) -> StoreResult<Kept> {
        self.observe(
            "put_attachment",
            WRITE,
            self.inner.put_attachment(file, limit),
        )
        .await
    }

    async fn attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
    ) -> StoreResult<Option<(Attachment, Vec<u8>)>> {
        self.observe("attachment", READ, self.inner.attachment(document_id, id))
            .await
    }

    async fn take_back_attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> StoreResult<TakeBack> {
        self.observe(
            "take_back_attachment",
            WRITE,
            self.inner.take_back_attachment(document_id, id, uploader),
        )
        .await
    }

    async fn forget_unsent_attachments(&self, before_ms: UnixMillis) -> StoreResult<u64> {
        self.observe(
            "forget_unsent_attachments",
            WRITE,
            self.inner.forget_unsent_attachments(before_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> ModelChoiceStore for Instrumented<H> {
    async fn put_model_choice(&self, choice: &ModelChoice) -> StoreResult<()> {
        self.observe(
            "put_model_choice",
            WRITE,
            self.inner.put_model_choice(choice),
        )
        .await
    }

    async fn clear_model_choice(&self, document_id: Uuid) -> StoreResult<bool> {
        self.observe(
            "clear_model_choice",
            WRITE,
            self.inner.clear_model_choice(document_id),
        )
        .await
    }

    async fn model_choice(&self, document_id: Uuid) -> StoreResult<Option<ModelChoice>> {
        self.observe("model_choice", READ, self.inner.model_choice(document_id))
            .await
    }

    async fn pause_participation(&self, pause: &ParticipationPause) -> StoreResult<()> {
        self.observe(
            "pause_participation",
            WRITE,
            self.inner.pause_participation(pause),
        )
        .await
    }

    async fn resume_participation(&self, document_id: Uuid) -> StoreResult<bool> {
        self.observe(
            "resume_participation",
            WRITE,
            self.inner.resume_participation(document_id),
        )
        .await
    }

    async fn participation_pause(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<ParticipationPause>> {
        self.observe(
            "participation_pause",
            READ,
            self.inner.participation_pause(document_id),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> HoldStore for Instrumented<H> {
    async fn put_link_hold(&self, hold: &LinkHold) -> StoreResult<()> {
        self.observe("put_link_hold", WRITE, self.inner.put_link_hold(hold))
            .await
    }

    async fn link_holds(&self) -> StoreResult<Vec<LinkHold>> {
        self.observe("link_holds", READ, self.inner.link_holds())
            .await
    }

    async fn end_handover(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "end_handover",
            WRITE,
            self.inner.end_handover(document_id, written_at_ms),
        )
        .await
    }

    async fn delete_link_hold(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "delete_link_hold",
            WRITE,
            self.inner.delete_link_hold(document_id, written_at_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> LeaseStore for Instrumented<H> {
    async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.observe(
            "acquire_writer_lease",
            WRITE,
            self.inner.acquire_writer_lease(holder, now_ms, ttl_ms),
        )
        .await
    }

    async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>> {
        self.observe(
            "renew_writer_lease",
            WRITE,
            self.inner.renew_writer_lease(lease, now_ms, ttl_ms),
        )
        .await
    }

    async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
        self.observe(
            "release_writer_lease",
            WRITE,
            self.inner.release_writer_lease(lease),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> DocumentLeaseStore for Instrumented<H> {
    async fn acquire_document_lease(
        &self,
        document_id: Uuid,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.observe(
            "acquire_document_lease",
            WRITE,
            self.inner
                .acquire_document_lease(document_id, holder, now_ms, ttl_ms),
        )
        .await
    }

    async fn renew_document_leases(
        &self,
        leases: &[(Uuid, WriterLease)],
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Vec<(Uuid, WriterLease)>> {
        self.observe(
            "renew_document_leases",
            WRITE,
            self.inner.renew_document_leases(leases, now_ms, ttl_ms),
        )
        .await
    }

    async fn release_document_lease(
        &self,
        document_id: Uuid,
        lease: &WriterLease,
    ) -> StoreResult<()> {
        self.observe(
            "release_document_lease",
            WRITE,
            self.inner.release_document_lease(document_id, lease),
        )
        .await
    }

    async fn document_lease(&self, document_id: Uuid) -> StoreResult<Option<DocumentLeaseRow>> {
        self.observe(
            "document_lease",
            READ,
            self.inner.document_lease(document_id),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> RunStore for Instrumented<H> {
    async fn save_run(
        &self,
        run: &RunRecord,
        stages: &[StageRecord],
        replace: bool,
    ) -> StoreResult<()> {
        self.observe("save_run", WRITE, self.inner.save_run(run, stages, replace))
            .await
    }

    async fn runs(&self, document_id: Uuid) -> StoreResult<Vec<RunRecord>> {
        self.observe("runs", READ, self.inner.runs(document_id))
            .await
    }

    async fn run_stages(
        &self,
        document_id: Uuid,
        run_id: &str,
        offset: i64,
        limit: i64,
    ) -> StoreResult<Option<StagePage>> {
        self.observe(
            "run_stages",
            READ,
            self.inner.run_stages(document_id, run_id, offset, limit),
        )
        .await
    }

    async fn delete_ended_runs(&self, document_id: Uuid) -> StoreResult<u64> {
        self.observe(
            "delete_ended_runs",
            WRITE,
            self.inner.delete_ended_runs(document_id),
        )
        .await
    }

    async fn stop_unheld_runs(&self, reach: crate::Reach) -> StoreResult<u64> {
        self.observe(
            "stop_unheld_runs",
            WRITE,
            self.inner.stop_unheld_runs(reach),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::JobStore for Instrumented<H> {
    async fn enqueue_job(&self, job: &crate::NewJob) -> StoreResult<crate::Enqueued> {
        self.observe("enqueue_job", WRITE, self.inner.enqueue_job(job))
            .await
    }

    async fn job(&self, id: Uuid) -> StoreResult<Option<crate::Job>> {
        self.observe("job", READ, self.inner.job(id)).await
    }

    async fn document_jobs(&self, document_id: Uuid, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.observe(
            "document_jobs",
            READ,
            self.inner.document_jobs(document_id, limit),
        )
        .await
    }

    async fn last_completed_job(
        &self,
        document_id: Uuid,
        target: &str,
    ) -> StoreResult<Option<crate::Job>> {
        self.observe(
            "last_completed_job",
            READ,
            self.inner.last_completed_job(document_id, target),
        )
        .await
    }

    async fn due_jobs(&self, now_ms: UnixMillis, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.observe("due_jobs", READ, self.inner.due_jobs(now_ms, limit))
            .await
    }

    async fn claim_job(
        &self,
        id: Uuid,
        claim_owner: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<crate::Job>> {
        self.observe(
            "claim_job",
            WRITE,
            self.inner.claim_job(id, claim_owner, now_ms, ttl_ms),
        )
        .await
    }

    async fn renew_job_claim(
        &self,
        id: Uuid,
        claim_generation: i64,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        self.observe(
            "renew_job_claim",
            WRITE,
            self.inner
                .renew_job_claim(id, claim_generation, now_ms, ttl_ms),
        )
        .await
    }

    async fn set_job_progress(
        &self,
        id: Uuid,
        claim_generation: i64,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "set_job_progress",
            WRITE,
            self.inner
                .set_job_progress(id, claim_generation, progress, now_ms),
        )
        .await
    }

    async fn settle_job(
        &self,
        id: Uuid,
        claim_generation: i64,
        settlement: &crate::Settlement,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "settle_job",
            WRITE,
            self.inner
                .settle_job(id, claim_generation, settlement, now_ms),
        )
        .await
    }

    async fn cancel_job(&self, id: Uuid, reason: &str, now_ms: UnixMillis) -> StoreResult<bool> {
        self.observe(
            "cancel_job",
            WRITE,
            self.inner.cancel_job(id, reason, now_ms),
        )
        .await
    }

    async fn interrupt_running_jobs(
        &self,
        reason: &str,
        now_ms: UnixMillis,
        reach: crate::Reach,
    ) -> StoreResult<u64> {
        self.observe(
            "interrupt_running_jobs",
            WRITE,
            self.inner.interrupt_running_jobs(reason, now_ms, reach),
        )
        .await
    }

    async fn job_counts(&self) -> StoreResult<Vec<(crate::JobState, u64)>> {
        self.observe("job_counts", READ, self.inner.job_counts())
            .await
    }
}

#[async_trait]
impl<H: Hook> crate::TitleStore for Instrumented<H> {
    async fn title_sidecar(&self, document_id: Uuid) -> StoreResult<crate::TitleSidecar> {
        self.observe("title_sidecar", READ, self.inner.title_sidecar(document_id))
            .await
    }

    async fn draft_title(
        &self,
        document_id: Uuid,
        expected: &str,
        new_title: &str,
    ) -> StoreResult<crate::Drafted> {
        self.observe(
            "draft_title",
            WRITE,
            self.inner.draft_title(document_id, expected, new_title),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::GraphStore for Instrumented<H> {
    async fn graph_versions(&self, document_id: Uuid) -> StoreResult<Vec<crate::GraphVersion>> {
        self.observe(
            "graph_versions",
            READ,
            self.inner.graph_versions(document_id),
        )
        .await
    }

    async fn change_graph(
        &self,
        document_id: Uuid,
        change: &crate::GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::GraphVersion, crate::GraphRefusal>> {
        self.observe(
            "change_graph",
            WRITE,
            self.inner.change_graph(document_id, change, now_ms),
        )
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
        self.observe(
            "start_implementation",
            WRITE,
            self.inner
                .start_implementation(document_id, counters, run_id, progress, build, now_ms),
        )
        .await
    }

    async fn implementation_run(
        &self,
        run_id: &str,
    ) -> StoreResult<Option<crate::ImplementationRun>> {
        self.observe(
            "implementation_run",
            READ,
            self.inner.implementation_run(run_id),
        )
        .await
    }

    async fn implementation_runs(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.observe(
            "implementation_runs",
            READ,
            self.inner.implementation_runs(document_id),
        )
        .await
    }

    async fn implementation_report(
        &self,
        run_id: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        self.observe(
            "implementation_report",
            READ,
            self.inner.implementation_report(run_id, key),
        )
        .await
    }

    async fn report_implementation(
        &self,
        run_id: &str,
        report: &crate::RunReport,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Reported> {
        self.observe(
            "report_implementation",
            WRITE,
            self.inner.report_implementation(run_id, report, now_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::CommentStore for Instrumented<H> {
    async fn start_comment(
        &self,
        thread: &crate::NewCommentThread,
    ) -> StoreResult<crate::ThreadWithNotes> {
        self.observe("start_comment", WRITE, self.inner.start_comment(thread))
            .await
    }

    async fn reply_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        note: &crate::NewCommentNote,
        max_replies: i64,
    ) -> StoreResult<crate::Replied> {
        self.observe(
            "reply_comment",
            WRITE,
            self.inner
                .reply_comment(document_id, thread_id, note, max_replies),
        )
        .await
    }

    async fn resolve_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        by: &str,
        at_ms: UnixMillis,
    ) -> StoreResult<crate::CommentThread> {
        self.observe(
            "resolve_comment",
            WRITE,
            self.inner
                .resolve_comment(document_id, thread_id, by, at_ms),
        )
        .await
    }

    async fn set_comment_result(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        revision: i64,
    ) -> StoreResult<crate::CommentThread> {
        self.observe(
            "set_comment_result",
            WRITE,
            self.inner
                .set_comment_result(document_id, thread_id, revision),
        )
        .await
    }

    async fn comment_thread(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<Option<crate::ThreadWithNotes>> {
        self.observe(
            "comment_thread",
            READ,
            self.inner.comment_thread(document_id, thread_id),
        )
        .await
    }

    async fn comment_threads(
        &self,
        document_id: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<crate::ThreadWithNotes>> {
        self.observe(
            "comment_threads",
            READ,
            self.inner.comment_threads(document_id, limit),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::RequestStore for Instrumented<H> {
    async fn claim_request(
        &self,
        key: &crate::RequestKey,
        digest: &str,
        now_ms: UnixMillis,
        expires_at_ms: UnixMillis,
    ) -> StoreResult<crate::RequestClaim> {
        self.observe(
            "claim_request",
            WRITE,
            self.inner.claim_request(key, digest, now_ms, expires_at_ms),
        )
        .await
    }

    async fn answer_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
        answer: &str,
    ) -> StoreResult<bool> {
        self.observe(
            "answer_request",
            WRITE,
            self.inner.answer_request(key, since_ms, answer),
        )
        .await
    }

    async fn release_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "release_request",
            WRITE,
            self.inner.release_request(key, since_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::MachineStore for Instrumented<H> {
    async fn pair_machine(&self, machine: &crate::NewMachine) -> StoreResult<crate::Machine> {
        self.observe("pair_machine", WRITE, self.inner.pair_machine(machine))
            .await
    }

    async fn machine(&self, id: Uuid) -> StoreResult<Option<crate::Machine>> {
        self.observe("machine", READ, self.inner.machine(id)).await
    }

    async fn machine_credential(&self, id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.observe(
            "machine_credential",
            READ,
            self.inner.machine_credential(id),
        )
        .await
    }

    async fn set_machine_credential(
        &self,
        id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
        release: Option<&str>,
    ) -> StoreResult<Option<i64>> {
        self.observe(
            "set_machine_credential",
            WRITE,
            self.inner
                .set_machine_credential(id, expected_revision, sealed, release),
        )
        .await
    }

    async fn machines_of(&self, account_id: Uuid) -> StoreResult<Vec<crate::Machine>> {
        self.observe("machines_of", READ, self.inner.machines_of(account_id))
            .await
    }

    async fn share_machine(
        &self,
        id: Uuid,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.observe(
            "share_machine",
            WRITE,
            self.inner.share_machine(id, account_id, now_ms),
        )
        .await
    }

    async fn unshare_machine(&self, id: Uuid, account_id: Uuid) -> StoreResult<bool> {
        self.observe(
            "unshare_machine",
            WRITE,
            self.inner.unshare_machine(id, account_id),
        )
        .await
    }

    async fn machine_shares(&self, id: Uuid) -> StoreResult<Vec<Account>> {
        self.observe("machine_shares", READ, self.inner.machine_shares(id))
            .await
    }

    async fn set_favourite_machine(
        &self,
        account_id: Uuid,
        machine_id: Option<Uuid>,
    ) -> StoreResult<()> {
        self.observe(
            "set_favourite_machine",
            WRITE,
            self.inner.set_favourite_machine(account_id, machine_id),
        )
        .await
    }

    async fn favourite_machine(&self, account_id: Uuid) -> StoreResult<Option<Uuid>> {
        self.observe(
            "favourite_machine",
            READ,
            self.inner.favourite_machine(account_id),
        )
        .await
    }

    async fn choose_machine(
        &self,
        document_id: Uuid,
        choice: Option<&crate::MachineChoice>,
    ) -> StoreResult<Option<crate::MachineChoice>> {
        self.observe(
            "choose_machine",
            WRITE,
            self.inner.choose_machine(document_id, choice),
        )
        .await
    }

    async fn machine_choice(&self, document_id: Uuid) -> StoreResult<Option<crate::MachineChoice>> {
        self.observe(
            "machine_choice",
            READ,
            self.inner.machine_choice(document_id),
        )
        .await
    }

    async fn machine_documents(&self, machine_id: Uuid) -> StoreResult<Vec<crate::MachineChoice>> {
        self.observe(
            "machine_documents",
            READ,
            self.inner.machine_documents(machine_id),
        )
        .await
    }

    async fn choose_default_machine(
        &self,
        choice: &crate::MachineChoice,
    ) -> StoreResult<(crate::MachineChoice, bool)> {
        self.observe(
            "choose_default_machine",
            WRITE,
            self.inner.choose_default_machine(choice),
        )
        .await
    }

    async fn withdraw_default_machine(
        &self,
        document_id: Uuid,
        machine_id: Uuid,
    ) -> StoreResult<bool> {
        self.observe(
            "withdraw_default_machine",
            WRITE,
            self.inner.withdraw_default_machine(document_id, machine_id),
        )
        .await
    }

    async fn default_machine_choices(&self) -> StoreResult<Vec<crate::MachineChoice>> {
        self.observe(
            "default_machine_choices",
            READ,
            self.inner.default_machine_choices(),
        )
        .await
    }

    async fn put_planner_credential(
        &self,
        credential: &crate::PlannerCredential,
    ) -> StoreResult<()> {
        self.observe(
            "put_planner_credential",
            WRITE,
            self.inner.put_planner_credential(credential),
        )
        .await
    }

    async fn planner_credential(
        &self,
        digest: &str,
    ) -> StoreResult<Option<crate::PlannerCredential>> {
        self.observe(
            "planner_credential",
            READ,
            self.inner.planner_credential(digest),
        )
        .await
    }

    async fn unpair_machine(&self, id: Uuid) -> StoreResult<bool> {
        self.observe("unpair_machine", WRITE, self.inner.unpair_machine(id))
            .await
    }

    async fn record_connector_poll(&self, poll: &crate::ConnectorPoll) -> StoreResult<()> {
        self.observe(
            "record_connector_poll",
            WRITE,
            self.inner.record_connector_poll(poll),
        )
        .await
    }

    async fn connector_polls_since(
        &self,
        since_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ConnectorPoll>> {
        self.observe(
            "connector_polls_since",
            READ,
            self.inner.connector_polls_since(since_ms),
        )
        .await
    }
}

#[async_trait]
impl<H: Hook> crate::BuildStore for Instrumented<H> {
    async fn approve_and_queue(
        &self,
        document_id: Uuid,
        approval: &crate::GraphChange,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<(crate::GraphVersion, crate::Build), crate::GraphRefusal>> {
        self.observe(
            "approve_and_queue",
            WRITE,
            self.inner
                .approve_and_queue(document_id, approval, build, now_ms),
        )
        .await
    }

    async fn queue_build(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.observe(
            "queue_build",
            WRITE,
            self.inner.queue_build(document_id, build, now_ms),
        )
        .await
    }

    async fn build(&self, id: Uuid) -> StoreResult<Option<crate::Build>> {
        self.observe("build", READ, self.inner.build(id)).await
    }

    async fn machine_builds(&self, machine_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.observe(
            "machine_builds",
            READ,
            self.inner.machine_builds(machine_id),
        )
        .await
    }

    async fn document_builds(&self, document_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.observe(
            "document_builds",
            READ,
            self.inner.document_builds(document_id),
        )
        .await
    }

    async fn pick_up_build(
        &self,
        id: Uuid,
        bridge_digest: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.observe(
            "pick_up_build",
            WRITE,
            self.inner.pick_up_build(id, bridge_digest, now_ms),
        )
        .await
    }

    async fn build_by_bridge(&self, bridge_digest: &str) -> StoreResult<Option<crate::Build>> {
        self.observe(
            "build_by_bridge",
            READ,
            self.inner.build_by_bridge(bridge_digest),
        )
        .await
    }

    async fn fail_build(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.observe(
            "fail_build",
            WRITE,
            self.inner.fail_build(id, reason, now_ms),
        )
        .await
    }

    async fn built_source(&self, document_id: Uuid) -> StoreResult<Option<crate::BuiltSource>> {
        self.observe("built_source", READ, self.inner.built_source(document_id))
            .await
    }

    async fn queue_rebuild(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        after: &str,
        after_plan_revision: i64,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.observe(
            "queue_rebuild",
            WRITE,
            self.inner
                .queue_rebuild(document_id, build, after, after_plan_revision, now_ms),
        )
        .await
    }

    async fn land_rebuild(
        &self,
        id: Uuid,
        definition: &str,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Landing> {
        self.observe(
            "land_rebuild",
            WRITE,
            self.inner.land_rebuild(id, definition, progress, now_ms),
        )
        .await
    }

    async fn expire_builds(
        &self,
        reach: crate::Reach,
        cutoff_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::Build>> {
        self.observe(
            "expire_builds",
            WRITE,
            self.inner.expire_builds(reach, cutoff_ms, now_ms),
        )
        .await
    }

    async fn silent_builds(&self, cutoff_ms: UnixMillis) -> StoreResult<Vec<crate::Build>> {
        self.observe("silent_builds", READ, self.inner.silent_builds(cutoff_ms))
            .await
    }

    async fn silent_build_runs(
        &self,
        cutoff_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.observe(
            "silent_build_runs",
            READ,
            self.inner.silent_build_runs(cutoff_ms),
        )
        .await
    }
}
