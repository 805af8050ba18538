//! [`MemoryStore`]: the in-memory [`Store`] backend for the simulator and unit tests.
//!
//! Owns: the records of one simulated database, kept in `BTreeMap`s (deterministic iteration)
//! behind one `std::sync::Mutex` that is never held across an `.await`. Clones share that state,
//! so "reopening" the database after a host restart is cloning the handle made outside the host.
//! Every method takes the lock once, so each is atomic on its own, like the SQL backends; a
//! fenced handle ([`Store::fenced`]) checks its lease's row (the writer lease's or one document's)
//! under that same lock before each write, so an acquisition is either before the write
//! (refused) or after it.
//! Does not own: durability beyond the process, or time and randomness (no clock is read here;
//! account ids are derived from the GitHub user id, see [`account_id_for_github_user`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    account_id_for_github_user, ascii_key, check_parent, checkpoint_out_of_range, slug_taken,
    Account, Advance, Attachment, BrowserLogin, Checkpoint, Claim, Document, DocumentContent,
    DocumentLeaseRow, Fence, FenceScope, Holder, Kept, LeaseAcquire, LinkHold, ModelChoice,
    NewAttachment, NewDocument, NewTranscriptEntry, OwnerGuard, Ownership, ParticipationPause,
    PlanCommit, Provenance, Reach, Release, RevisionKind, RunRecord, StagePage, StageRecord, Store,
    StoreError, StoreResult, TakeBack, TranscriptEntry, UnixMillis, UnsentLimit, WriterLease,
};
use crate::fence::FenceCheck;
use crate::{
    AttachmentStore, ContentStore, DocumentLeaseStore, DocumentStore, HoldStore, LeaseStore,
    ModelChoiceStore, OwnershipStore, RunStore, SignInStore, TranscriptStore,
};

/// The in-memory backend. Cheap to clone; clones share the same state.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    /// The fence this handle's writes are checked against, if it was fenced.
    fence: Option<Fence>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

/// A lease row (the writer lease's, or a document's): like the SQL backends, a release keeps
/// the epoch and clears the holder.
#[derive(Debug, Default)]
struct LeaseRow {
    holder: Option<String>,
    epoch: i64,
    expires_at_ms: UnixMillis,
}

impl LeaseRow {
    fn as_lease(&self, holder: &str) -> WriterLease {
        WriterLease {
            holder: holder.to_owned(),
            epoch: self.epoch,
            expires_at_ms: self.expires_at_ms,
        }
    }

    fn acquire(&mut self, holder: &str, now_ms: UnixMillis, ttl_ms: i64) -> LeaseAcquire {
        let unexpired = self.expires_at_ms > now_ms;
        match self.holder.clone() {
            Some(current) if current != holder && unexpired => {
                LeaseAcquire::HeldElsewhere(self.as_lease(&current))
            }
            current => {
                // A renewal by the unexpired holder keeps its epoch; any new acquisition (free,
                // expired, or a different holder) advances it.
                if !(current.as_deref() == Some(holder) && unexpired) {
                    self.epoch += 1;
                }
                self.holder = Some(holder.to_owned());
                self.expires_at_ms = now_ms.saturating_add(ttl_ms);
                LeaseAcquire::Acquired(self.as_lease(holder))
            }
        }
    }

    fn renew(
        &mut self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> Option<WriterLease> {
        if self.holder.as_deref() != Some(lease.holder.as_str()) || self.epoch != lease.epoch {
            return None;
        }
        self.expires_at_ms = now_ms.saturating_add(ttl_ms);
        Some(self.as_lease(&lease.holder))
    }

    fn release(&mut self, lease: &WriterLease) {
        if self.holder.as_deref() == Some(lease.holder.as_str()) && self.epoch == lease.epoch {
            self.holder = None;
            self.expires_at_ms = 0;
        }
    }
}

/// A login's credential row, as in the SQL backends: after a deletion the row stays with
/// `sealed: None` so the revision keeps growing.
#[derive(Debug)]
struct CredentialRow {
    revision: i64,
    sealed: Option<Vec<u8>>,
}

/// A document's durable content, as in the SQL backends: the last seq handed out (kept apart from
/// the journal, which checkpoints prune), the checkpoint and the journal after it.
#[derive(Debug, Default)]
struct ContentRow {
    last_seq: i64,
    checkpoint: Option<Checkpoint>,
    /// seq → Yjs v1 update; only seqs after the checkpoint's `upto_seq`.
    journal: BTreeMap<i64, Vec<u8>>,
}

impl ContentRow {
    /// Journals `update` at the next seq and returns it.
    fn append(&mut self, update: &[u8]) -> i64 {
        self.last_seq += 1;
        self.journal.insert(self.last_seq, update.to_vec());
        self.last_seq
    }
}

/// (owner key, repo key, slug): where a slug, canonical or alias, is unique.
type SlugKey = (String, String, String);

#[derive(Debug, Default)]
struct Inner {
    accounts: BTreeMap<Uuid, Account>,
    browser_logins: BTreeMap<Uuid, BrowserLogin>,
    /// Browser login id → its sealed credential; only for logins in `browser_logins`.
    login_credentials: BTreeMap<Uuid, CredentialRow>,
    documents: BTreeMap<Uuid, Document>,
    /// (owner key, repo key, slug) → document id: the unique slug per repository.
    slugs: BTreeMap<SlugKey, Uuid>,
    /// (owner key, repo key, former slug) → document id. No key is in both maps.
    aliases: BTreeMap<SlugKey, Uuid>,
    /// Document id → its aliases in the order they were left, oldest first.
    earlier_slugs: BTreeMap<Uuid, Vec<String>>,
    /// Document id → its creation brief, for documents created with one.
    briefs: BTreeMap<Uuid, String>,
    /// Document id → its creation provenance, for documents created with one.
    provenances: BTreeMap<Uuid, Provenance>,
    /// Documents created through MCP.
    mcp_created: BTreeSet<Uuid>,
    /// Document id → its content; one row per document, made with it.
    content: BTreeMap<Uuid, ContentRow>,
    transcripts: BTreeMap<Uuid, Vec<TranscriptEntry>>,
    /// (document id, append key) → the seq of the entry that key appended.
    transcript_keys: BTreeMap<(Uuid, String), i64>,
    ownership: BTreeMap<Uuid, Ownership>,
    lease: LeaseRow,
    /// Document id → its lease row, made by its first acquisition.
    document_leases: BTreeMap<Uuid, LeaseRow>,
    /// Document id → its runs in first-reported order, each with its stages in reported order.
    runs: BTreeMap<Uuid, Vec<(RunRecord, Vec<StageRecord>)>>,
    /// Document id → its Planner link hold.
    holds: BTreeMap<Uuid, LinkHold>,
    /// Document id → its Planner model choice.
    model_choices: BTreeMap<Uuid, ModelChoice>,
    participation_pauses: BTreeMap<Uuid, ParticipationPause>,
    /// File id → a Chat file and its bytes.
    attachments: BTreeMap<Uuid, (Attachment, Vec<u8>)>,
    /// Job id → a background job.
    jobs: BTreeMap<Uuid, crate::Job>,
    /// Document id → its title record.
    titles: BTreeMap<Uuid, crate::TitleSidecar>,
    /// Thread id → a comment thread.
    comment_threads: BTreeMap<Uuid, crate::CommentThread>,
    /// (thread id, number) → a note of a comment thread.
    comment_notes: BTreeMap<(Uuid, i64), crate::CommentNote>,
    /// (document id, graph version) → a version of the document's implementation graph.
    graphs: BTreeMap<(Uuid, i64), crate::GraphVersion>,
    /// Run id → an implementation run.
    implementation_runs: BTreeMap<String, crate::ImplementationRun>,
    implementation_builds: BTreeMap<Uuid, crate::Build>,
    /// Each build's bridge token digest (LIFE-06).
    build_bridges: BTreeMap<String, Uuid>,
    /// Document id → the source its last delivered build built (LIFE-11).
    built_sources: BTreeMap<Uuid, crate::BuiltSource>,
    /// (run id, key) → what a report with that key sent and was answered.
    implementation_reports: BTreeMap<(String, String), (String, String)>,
    /// Machine id → a paired machine.
    machines: BTreeMap<Uuid, MachineRow>,
    /// (machine id, account id) → when the machine was shared with that account.
    machine_shares: BTreeMap<(Uuid, Uuid), UnixMillis>,
    /// Account id → its favourite machine.
    machine_favourites: BTreeMap<Uuid, Uuid>,
    /// Document id → the machine chosen for it.
    document_machines: BTreeMap<Uuid, crate::MachineChoice>,
    /// Digest → a Planner credential.
    planner_credentials: BTreeMap<String, crate::PlannerCredential>,
    /// Each machine's connector's latest poll recorded (under several processes).
    connector_polls: BTreeMap<Uuid, crate::ConnectorPoll>,
    /// (scope, holder, key) → a request kept under its caller's key.
    kept_requests: BTreeMap<(String, String, String), crate::KeptRequest>,
    /// A known bug planted for the simulator's explorer ([`MemoryStore::plant_epoch_check_off`]).
    epoch_check_off: bool,
}

/// A paired machine as stored: the record (its owner's login read from `accounts`) and its
/// sealed GitHub authorization.
#[derive(Debug)]
struct MachineRow {
    machine: crate::Machine,
    revision: i64,
    sealed: Vec<u8>,
}

impl MemoryStore {
    /// Plants a known bug, for the simulator to show its explorer finds it: from now on a fenced
    /// write skips the database's epoch check (the lease row) and makes only the process's local
    /// one, so a write already under way when its process lost the lease lands anyway. Never
    /// called outside the simulator's tests.
    pub fn plant_epoch_check_off(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.epoch_check_off = true;
        }
    }

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` under the lock. A poisoned lock (a panic while holding it) is a backend error
    /// rather than a panic here, so the state a panic may have left half-written is never used.
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> StoreResult<R>) -> StoreResult<R> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| StoreError::Backend("memory store lock poisoned".into()))?;
        f(&mut inner)
    }

    /// Runs a write under the lock, after the fence (if this handle has one) admitted it against
    /// the lease row as it is under that same lock, so no acquisition can come in between.
    fn write<R>(&self, f: impl FnOnce(&mut Inner) -> StoreResult<R>) -> StoreResult<R> {
        self.fence.check_local()?;
        self.with(|inner| {
            let lease = match self.fence.scope() {
                None | Some(FenceScope::Writer) => Some(&inner.lease),
                Some(FenceScope::Document(id)) => inner.document_leases.get(&id),
            };
            if inner.epoch_check_off {
                self.fence.check_local()?;
            } else {
                self.fence
                    .check_lease(lease.map(|lease| (lease.epoch, lease.holder.is_some())))?;
            }
            f(inner)
        })
    }
}

/// The document and its content row, both to be changed under the one lock.
fn document_and_content(
    inner: &mut Inner,
    document_id: Uuid,
) -> StoreResult<(&mut Document, &mut ContentRow)> {
    let doc = inner
        .documents
        .get_mut(&document_id)
        .ok_or(StoreError::NotFound("document"))?;
    let content = inner.content.entry(document_id).or_default();
    Ok((doc, content))
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn ping(&self) -> StoreResult<()> {
        self.with(|_| Ok(()))
    }

    fn fenced(&self, fence: Fence) -> Arc<dyn Store> {
        Arc::new(MemoryStore {
            inner: self.inner.clone(),
            fence: Some(fence),
        })
    }
}

#[async_trait]
impl SignInStore for MemoryStore {
    async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account> {
        let id = account_id_for_github_user(github_user_id);
        // As the SQL backends: an account found as it is stored is not written again.
        let unchanged = self.with(|inner| {
            Ok(inner
                .accounts
                .get(&id)
                .filter(|a| a.github_user_id == github_user_id && a.login == login)
                .cloned())
        })?;
        if let Some(account) = unchanged {
            return Ok(account);
        }
        self.write(|inner| {
            let account = inner.accounts.entry(id).or_insert_with(|| Account {
                id,
                github_user_id,
                login: login.to_owned(),
                created_at_ms: now_ms,
            });
            login.clone_into(&mut account.login);
            Ok(account.clone())
        })
    }

    async fn account(&self, id: Uuid) -> StoreResult<Option<Account>> {
        self.with(|inner| Ok(inner.accounts.get(&id).cloned()))
    }

    async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>> {
        let key = ascii_key(login);
        self.with(|inner| {
            // Same tie-break as the SQL backends: newest account first, then the larger id.
            Ok(inner
                .accounts
                .values()
                .filter(|a| ascii_key(&a.login) == key)
                .max_by_key(|a| (a.created_at_ms, a.id))
                .cloned())
        })
    }

    async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.accounts.contains_key(&login.account_id) {
                return Err(StoreError::NotFound("account"));
            }
            if inner.browser_logins.contains_key(&login.id) {
                return Err(StoreError::Conflict(
                    "browser login id already exists".into(),
                ));
            }
            inner.browser_logins.insert(login.id, login.clone());
            Ok(())
        })
    }

    async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>> {
        self.with(|inner| Ok(inner.browser_logins.get(&id).cloned()))
    }

    async fn live_browser_logins(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<BrowserLogin>> {
        self.with(|inner| {
            let mut live: Vec<BrowserLogin> = inner
                .browser_logins
                .values()
                .filter(|l| l.account_id == account_id && l.is_live(now_ms))
                .cloned()
                .collect();
            live.sort_by_key(|l| std::cmp::Reverse((l.created_at_ms, l.id)));
            live.truncate(limit as usize);
            Ok(live)
        })
    }

    async fn sign_out_browser_login(&self, id: Uuid, now_ms: UnixMillis) -> StoreResult<bool> {
        self.write(|inner| match inner.browser_logins.get_mut(&id) {
            Some(login) if login.signed_out_at_ms.is_none() => {
                login.signed_out_at_ms = Some(now_ms);
                Ok(true)
            }
            _ => Ok(false),
        })
    }

    async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>> {
        self.write(|inner| {
            let login = inner
                .browser_logins
                .get(&login_id)
                .ok_or(StoreError::NotFound("browser login"))?;
            if login.signed_out_at_ms.is_some() {
                return Ok(None);
            }
            let current = inner
                .login_credentials
                .get(&login_id)
                .map_or(0, |row| row.revision);
            if current != expected_revision {
                return Ok(None);
            }
            let revision = current + 1;
            inner.login_credentials.insert(
                login_id,
                CredentialRow {
                    revision,
                    sealed: Some(sealed.to_vec()),
                },
            );
            Ok(Some(revision))
        })
    }

    async fn login_credential(&self, login_id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.with(|inner| {
            Ok(inner.login_credentials.get(&login_id).and_then(|row| {
                row.sealed
                    .as_ref()
                    .map(|sealed| (row.revision, sealed.clone()))
            }))
        })
    }

    async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool> {
        self.write(|inner| {
            if !inner.browser_logins.contains_key(&login_id) {
                return Ok(false);
            }
            let row = inner
                .login_credentials
                .entry(login_id)
                .or_insert(CredentialRow {
                    revision: 0,
                    sealed: None,
                });
            row.revision += 1;
            Ok(row.sealed.take().is_some())
        })
    }

    async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64> {
        self.write(|inner| {
            let dead: Vec<Uuid> = inner
                .browser_logins
                .values()
                .filter(|login| !login.is_live(now_ms))
                .map(|login| login.id)
                .collect();
            for id in &dead {
                inner.browser_logins.remove(id);
                inner.login_credentials.remove(id);
            }
            Ok(dead.len() as u64)
        })
    }
}

#[async_trait]
impl DocumentStore for MemoryStore {
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        let doc = &doc.storable();
        self.write(|inner| {
            let slug_key = (
                ascii_key(&doc.repo_owner),
                ascii_key(&doc.repo_name),
                doc.slug.clone(),
            );
            // The parent first, as in the SQL backends.
            let parent = doc.parent_id.and_then(|id| inner.documents.get(&id));
            check_parent(doc, parent)?;
            if inner.documents.contains_key(&doc.id) {
                return Err(StoreError::Conflict("document id already exists".into()));
            }
            if inner.slugs.contains_key(&slug_key) || inner.aliases.contains_key(&slug_key) {
                return Err(StoreError::Conflict(super::slug_conflict(doc)));
            }
            let document = Document {
                id: doc.id,
                repo_owner: doc.repo_owner.clone(),
                repo_name: doc.repo_name.clone(),
                slug: doc.slug.clone(),
                title: doc.title.clone(),
                plan_revision: 0,
                storage_revision: 0,
                yjs_epoch: 0,
                archived: false,
                created_at_ms: doc.created_at_ms,
                parent_id: doc.parent_id,
                creator: doc.creator.clone(),
            };
            if let Some(brief) = &doc.brief {
                inner.briefs.insert(doc.id, brief.clone());
            }
            if let Some(provenance) = &doc.provenance {
                inner.provenances.insert(doc.id, provenance.clone());
            }
            if doc.mcp_created {
                inner.mcp_created.insert(doc.id);
            }
            inner.slugs.insert(slug_key, doc.id);
            inner.content.insert(doc.id, ContentRow::default());
            inner.documents.insert(doc.id, document.clone());
            inner.ownership.insert(
                doc.id,
                Ownership {
                    document_id: doc.id,
                    generation: 0,
                    holder: None,
                    claimed_at_ms: None,
                },
            );
            Ok(document)
        })
    }

    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        self.with(|inner| Ok(inner.documents.get(&id).cloned()))
    }

    async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>> {
        self.with(|inner| {
            if !inner.documents.contains_key(&id) {
                return Err(StoreError::NotFound("document"));
            }
            Ok(inner.briefs.get(&id).cloned())
        })
    }

    async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>> {
        self.with(|inner| {
            if !inner.documents.contains_key(&id) {
                return Err(StoreError::NotFound("document"));
            }
            Ok(inner.provenances.get(&id).cloned())
        })
    }

    async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool> {
        self.with(|inner| {
            if !inner.documents.contains_key(&id) {
                return Err(StoreError::NotFound("document"));
            }
            Ok(inner.mcp_created.contains(&id))
        })
    }

    async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>> {
        self.with(|inner| {
            if !inner.documents.contains_key(&parent_id) {
                return Err(StoreError::NotFound("document"));
            }
            let mut children: Vec<Document> = inner
                .documents
                .values()
                .filter(|d| d.parent_id == Some(parent_id))
                .cloned()
                .collect();
            children.sort_by_key(|d| (d.created_at_ms, d.id));
            Ok(children)
        })
    }

    async fn repository_documents(
        &self,
        repo_owner: &str,
        repo_name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Document>> {
        let (owner, repo) = (ascii_key(repo_owner), ascii_key(repo_name));
        self.with(|inner| {
            let mut found: Vec<Document> = inner
                .documents
                .values()
                .filter(|d| ascii_key(&d.repo_owner) == owner && ascii_key(&d.repo_name) == repo)
                .cloned()
                .collect();
            found.sort_by_key(|d| (d.created_at_ms, d.id));
            found.truncate(limit as usize);
            Ok(found)
        })
    }

    async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>> {
        let key = (ascii_key(repo_owner), ascii_key(repo_name), slug.to_owned());
        self.with(|inner| {
            Ok(inner
                .slugs
                .get(&key)
                .or_else(|| inner.aliases.get(&key))
                .and_then(|id| inner.documents.get(id))
                .cloned())
        })
    }

    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        self.write(|inner| {
            let doc = inner
                .documents
                .get_mut(&id)
                .ok_or(StoreError::NotFound("document"))?;
            doc.archived = archived;
            Ok(())
        })
    }

    async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document> {
        let (new_slug, new_title) = (&*crate::storable(new_slug), &*crate::storable(new_title));
        self.write(|inner| {
            let doc = inner
                .documents
                .get(&document_id)
                .ok_or(StoreError::NotFound("document"))?;
            let (owner_key, repo_key) = (ascii_key(&doc.repo_owner), ascii_key(&doc.repo_name));
            let new_key = (owner_key.clone(), repo_key.clone(), new_slug.to_owned());
            if doc.slug != new_slug {
                let used_by = inner.slugs.get(&new_key).or(inner.aliases.get(&new_key));
                if used_by.is_some_and(|id| *id != document_id) {
                    return Err(StoreError::Conflict(slug_taken(
                        &doc.repo_owner,
                        &doc.repo_name,
                        new_slug,
                    )));
                }
                let old_key = (owner_key, repo_key, doc.slug.clone());
                let earlier = inner.earlier_slugs.entry(document_id).or_default();
                // Back to a former slug: it is canonical again, no longer an alias.
                if inner.aliases.remove(&new_key).is_some() {
                    earlier.retain(|slug| slug != new_slug);
                }
                earlier.push(doc.slug.clone());
                inner.slugs.remove(&old_key);
                inner.aliases.insert(old_key, document_id);
                inner.slugs.insert(new_key, document_id);
            }
            let doc = inner
                .documents
                .get_mut(&document_id)
                .ok_or(StoreError::NotFound("document"))?;
            new_slug.clone_into(&mut doc.slug);
            new_title.clone_into(&mut doc.title);
            let doc = doc.clone();
            inner.titles.entry(document_id).or_default().chosen = true;
            Ok(doc)
        })
    }

    async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>> {
        self.with(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            Ok(inner
                .earlier_slugs
                .get(&document_id)
                .cloned()
                .unwrap_or_default())
        })
    }

    async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance> {
        self.write(|inner| {
            let doc = inner
                .documents
                .get_mut(&id)
                .ok_or(StoreError::NotFound("document"))?;
            let revision = match kind {
                RevisionKind::Plan => &mut doc.plan_revision,
                RevisionKind::Storage => &mut doc.storage_revision,
            };
            if *revision != expected {
                return Ok(Advance::Stale { current: *revision });
            }
            *revision += 1;
            Ok(Advance::Advanced(*revision))
        })
    }
}

#[async_trait]
impl ContentStore for MemoryStore {
    async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        _now_ms: UnixMillis,
    ) -> StoreResult<i64> {
        self.write(|inner| {
            let (doc, content) = document_and_content(inner, document_id)?;
            doc.storage_revision += 1;
            Ok(content.append(update))
        })
    }

    async fn append_updates(
        &self,
        document_id: Uuid,
        updates: &[&[u8]],
        _now_ms: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        self.write(|inner| {
            let (doc, content) = document_and_content(inner, document_id)?;
            doc.storage_revision += updates.len() as i64;
            Ok(updates.iter().map(|u| content.append(u)).collect())
        })
    }

    async fn commit_plan_edit(
        &self,
        document_id: Uuid,
        expected_plan_revision: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        _now_ms: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(guard) = owner {
                let holds = inner.ownership.get(&guard.document_id).is_some_and(|o| {
                    o.generation == guard.generation
                        && o.holder.as_ref().map(|h| h.account_id) == Some(guard.account_id)
                });
                if !holds {
                    return Ok(PlanCommit::NotOwner);
                }
            }
            let (doc, content) = document_and_content(inner, document_id)?;
            if doc.plan_revision != expected_plan_revision {
                return Ok(PlanCommit::Stale {
                    current: doc.plan_revision,
                });
            }
            doc.plan_revision += 1;
            doc.storage_revision += 1;
            let seq = content.append(update);
            Ok(PlanCommit::Committed {
                plan_revision: doc.plan_revision,
                seq,
            })
        })
    }

    async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent> {
        self.with(|inner| {
            let (doc, content) = document_and_content(inner, document_id)?;
            Ok(DocumentContent {
                checkpoint: content.checkpoint.clone(),
                updates: content
                    .journal
                    .iter()
                    .map(|(seq, update)| (*seq, update.clone()))
                    .collect(),
                yjs_epoch: doc.yjs_epoch,
            })
        })
    }

    async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        self.write(|inner| {
            let (doc, content) = document_and_content(inner, document_id)?;
            if !(0..=content.last_seq).contains(&upto_seq) {
                return Err(StoreError::Conflict(checkpoint_out_of_range(
                    upto_seq,
                    content.last_seq,
                )));
            }
            if content
                .checkpoint
                .as_ref()
                .is_some_and(|current| current.upto_seq >= upto_seq)
            {
                return Ok(());
            }
            content.checkpoint = Some(Checkpoint {
                upto_seq,
                state: state.to_vec(),
                yjs_epoch: doc.yjs_epoch,
            });
            content.journal = content.journal.split_off(&(upto_seq + 1));
            Ok(())
        })
    }

    async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.write(|inner| {
            let (doc, content) = document_and_content(inner, document_id)?;
            doc.yjs_epoch += 1;
            doc.storage_revision += 1;
            content.checkpoint = Some(Checkpoint {
                upto_seq: content.last_seq,
                state: state.to_vec(),
                yjs_epoch: doc.yjs_epoch,
            });
            content.journal.clear();
            Ok(doc.yjs_epoch)
        })
    }
}

#[async_trait]
impl TranscriptStore for MemoryStore {
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        let entry = entry.storable();
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(key) = &entry.key {
                if let Some(seq) = inner.transcript_keys.get(&(document_id, key.clone())) {
                    let entries = inner.transcripts.get(&document_id);
                    if let Some(first) = entries.and_then(|e| e.get(*seq as usize - 1)) {
                        return Ok(first.clone());
                    }
                }
            }
            let seq = inner
                .transcripts
                .get(&document_id)
                .and_then(|e| e.last())
                .map_or(1, |last| last.seq + 1);
            crate::check_sendable(
                entry.attachments.iter().map(|id| {
                    inner
                        .attachments
                        .get(id)
                        .map(|(a, _)| a)
                        .filter(|a| a.document_id == document_id)
                }),
                entry.author_login.as_deref(),
            )?;
            for id in &entry.attachments {
                if let Some((a, _)) = inner.attachments.get_mut(id) {
                    a.sent_seq = Some(seq);
                }
            }
            let entries = inner.transcripts.entry(document_id).or_default();
            if let Some(key) = &entry.key {
                inner
                    .transcript_keys
                    .insert((document_id, key.clone()), seq);
            }
            let stored = entry.saved(document_id, seq);
            entries.push(stored.clone());
            Ok(stored)
        })
    }

    async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64> {
        self.with(|inner| {
            Ok(inner
                .transcripts
                .get(&document_id)
                .and_then(|entries| entries.last())
                .map_or(0, |e| e.seq))
        })
    }

    async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.with(|inner| {
            let Some(entries) = inner.transcripts.get(&document_id) else {
                return Ok(Vec::new());
            };
            // Entries are stored in seq order, seq = index + 1.
            let start = entries.partition_point(|e| e.seq <= after_seq);
            Ok(entries[start..]
                .iter()
                .take(limit as usize)
                .cloned()
                .collect())
        })
    }

    async fn transcript_by_key(
        &self,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>> {
        self.with(|inner| {
            let Some(seq) = inner.transcript_keys.get(&(document_id, key.to_owned())) else {
                return Ok(None);
            };
            Ok(inner
                .transcripts
                .get(&document_id)
                .and_then(|entries| entries.get(*seq as usize - 1))
                .cloned())
        })
    }
}

#[async_trait]
impl OwnershipStore for MemoryStore {
    async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership> {
        self.with(|inner| {
            inner
                .ownership
                .get(&document_id)
                .cloned()
                .ok_or(StoreError::NotFound("document"))
        })
    }

    async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim> {
        self.write(|inner| {
            let own = inner
                .ownership
                .get_mut(&document_id)
                .ok_or(StoreError::NotFound("document"))?;
            match &own.holder {
                Some(current) if current.account_id != holder.account_id => {
                    Ok(Claim::HeldByOther(own.clone()))
                }
                current => {
                    if current.is_none() {
                        own.generation += 1;
                    }
                    own.holder = Some(holder.clone());
                    own.claimed_at_ms = Some(now_ms);
                    Ok(Claim::Claimed(own.clone()))
                }
            }
        })
    }

    async fn release_ownership(&self, document_id: Uuid, generation: i64) -> StoreResult<Release> {
        self.write(|inner| {
            let own = inner
                .ownership
                .get_mut(&document_id)
                .ok_or(StoreError::NotFound("document"))?;
            if own.holder.is_none() || own.generation != generation {
                return Ok(Release::Refused {
                    current_generation: own.generation,
                });
            }
            own.holder = None;
            own.claimed_at_ms = None;
            Ok(Release::Released)
        })
    }

    async fn clear_all_ownership(&self, reach: Reach) -> StoreResult<u64> {
        self.write(|inner| {
            let mut cleared = 0;
            for (doc, own) in inner.ownership.iter_mut() {
                if reach.covers(*doc) && own.holder.take().is_some() {
                    own.claimed_at_ms = None;
                    cleared += 1;
                }
            }
            Ok(cleared)
        })
    }

    async fn clear_unheld_ownership(&self, reach: Reach) -> StoreResult<u64> {
        self.write(|inner| {
            let mut cleared = 0;
            for (doc, own) in inner.ownership.iter_mut() {
                let Some(holder) = &own.holder else {
                    continue;
                };
                if !reach.covers(*doc) {
                    continue;
                }
                let kept = inner.holds.get(doc).is_some_and(|h| {
                    h.account_id == holder.account_id
                        && h.browser_login_id == Some(holder.browser_login_id)
                        && inner
                            .login_credentials
                            .get(&holder.browser_login_id)
                            .is_some_and(|c| c.sealed.is_some())
                });
                if !kept {
                    own.holder = None;
                    own.claimed_at_ms = None;
                    cleared += 1;
                }
            }
            Ok(cleared)
        })
    }
}

#[async_trait]
impl ModelChoiceStore for MemoryStore {
    async fn put_model_choice(&self, choice: &ModelChoice) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.documents.contains_key(&choice.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            inner.model_choices.insert(
                choice.document_id,
                ModelChoice {
                    model: crate::storable(&choice.model).into_owned(),
                    thinking_level: choice
                        .thinking_level
                        .as_deref()
                        .map(|l| crate::storable(l).into_owned()),
                    ..choice.clone()
                },
            );
            Ok(())
        })
    }

    async fn clear_model_choice(&self, document_id: Uuid) -> StoreResult<bool> {
        self.write(|inner| Ok(inner.model_choices.remove(&document_id).is_some()))
    }

    async fn model_choice(&self, document_id: Uuid) -> StoreResult<Option<ModelChoice>> {
        self.with(|inner| Ok(inner.model_choices.get(&document_id).cloned()))
    }

    async fn pause_participation(&self, pause: &ParticipationPause) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.documents.contains_key(&pause.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            inner.participation_pauses.insert(
                pause.document_id,
                ParticipationPause {
                    paused_by: crate::storable(&pause.paused_by).into_owned(),
                    ..pause.clone()
                },
            );
            Ok(())
        })
    }

    async fn resume_participation(&self, document_id: Uuid) -> StoreResult<bool> {
        self.write(|inner| Ok(inner.participation_pauses.remove(&document_id).is_some()))
    }

    async fn participation_pause(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<ParticipationPause>> {
        self.with(|inner| Ok(inner.participation_pauses.get(&document_id).cloned()))
    }
}

#[async_trait]
impl AttachmentStore for MemoryStore {
    async fn put_attachment(&self, file: &NewAttachment, limit: UnsentLimit) -> StoreResult<Kept> {
        self.write(|inner| {
            let a = &file.attachment;
            if !inner.documents.contains_key(&a.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            let (files, bytes) = inner
                .attachments
                .values()
                .map(|(f, _)| f)
                .filter(|f| crate::counts_unsent(f, a, &limit))
                .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size as u64));
            if let Some(refused) = crate::unsent_refusal(files, bytes, a.size, &limit) {
                return Ok(refused);
            }
            let stored = Attachment {
                name: crate::storable(&a.name).into_owned(),
                ..a.clone()
            };
            inner.attachments.insert(a.id, (stored, file.bytes.clone()));
            Ok(Kept::Kept)
        })
    }

    async fn attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
    ) -> StoreResult<Option<(Attachment, Vec<u8>)>> {
        self.with(|inner| {
            Ok(inner
                .attachments
                .get(&id)
                .filter(|(a, _)| a.document_id == document_id)
                .cloned())
        })
    }

    async fn take_back_attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> StoreResult<TakeBack> {
        self.write(|inner| {
            let Some((a, _)) = inner
                .attachments
                .get(&id)
                .filter(|(a, _)| a.document_id == document_id && a.uploader == uploader)
            else {
                return Ok(TakeBack::Missing);
            };
            if a.sent_seq.is_some() {
                return Ok(TakeBack::Sent);
            }
            inner.attachments.remove(&id);
            Ok(TakeBack::Taken)
        })
    }

    async fn forget_unsent_attachments(&self, before_ms: UnixMillis) -> StoreResult<u64> {
        self.write(|inner| {
            let before = inner.attachments.len();
            inner
                .attachments
                .retain(|_, (a, _)| a.sent_seq.is_some() || a.created_at_ms >= before_ms);
            Ok((before - inner.attachments.len()) as u64)
        })
    }
}

#[async_trait]
impl HoldStore for MemoryStore {
    async fn put_link_hold(&self, hold: &LinkHold) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.documents.contains_key(&hold.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            inner.holds.insert(hold.document_id, hold.clone());
            Ok(())
        })
    }

    async fn link_holds(&self) -> StoreResult<Vec<LinkHold>> {
        self.with(|inner| Ok(inner.holds.values().cloned().collect()))
    }

    async fn end_handover(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            Ok(match inner.holds.get_mut(&document_id) {
                Some(h) if h.written_at_ms == written_at_ms && h.handover_until_ms.is_some() => {
                    h.handover_until_ms = None;
                    true
                }
                _ => false,
            })
        })
    }

    async fn delete_link_hold(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            if inner
                .holds
                .get(&document_id)
                .is_some_and(|h| h.written_at_ms == written_at_ms)
            {
                inner.holds.remove(&document_id);
                return Ok(true);
            }
            Ok(false)
        })
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.with(|inner| Ok(inner.lease.acquire(holder, now_ms, ttl_ms)))
    }

    async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>> {
        self.with(|inner| Ok(inner.lease.renew(lease, now_ms, ttl_ms)))
    }

    async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
        self.with(|inner| {
            inner.lease.release(lease);
            Ok(())
        })
    }
}

#[async_trait]
impl DocumentLeaseStore for MemoryStore {
    async fn acquire_document_lease(
        &self,
        document_id: Uuid,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        self.with(|inner| {
            let row = inner.document_leases.entry(document_id).or_default();
            Ok(row.acquire(holder, now_ms, ttl_ms))
        })
    }

    async fn renew_document_leases(
        &self,
        leases: &[(Uuid, WriterLease)],
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Vec<(Uuid, WriterLease)>> {
        self.with(|inner| {
            Ok(leases
                .iter()
                .filter_map(|(document_id, lease)| {
                    inner
                        .document_leases
                        .get_mut(document_id)
                        .and_then(|row| row.renew(lease, now_ms, ttl_ms))
                        .map(|renewed| (*document_id, renewed))
                })
                .collect())
        })
    }

    async fn release_document_lease(
        &self,
        document_id: Uuid,
        lease: &WriterLease,
    ) -> StoreResult<()> {
        self.with(|inner| {
            if let Some(row) = inner.document_leases.get_mut(&document_id) {
                row.release(lease);
            }
            Ok(())
        })
    }

    async fn document_lease(&self, document_id: Uuid) -> StoreResult<Option<DocumentLeaseRow>> {
        self.with(|inner| {
            Ok(inner
                .document_leases
                .get(&document_id)
                .map(|row| DocumentLeaseRow {
                    holder: row.holder.clone(),
                    epoch: row.epoch,
                    expires_at_ms: row.expires_at_ms,
                }))
        })
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn save_run(
        &self,
        run: &RunRecord,
        stages: &[StageRecord],
        replace: bool,
    ) -> StoreResult<()> {
        let run = &run.storable();
        let stages: &[StageRecord] = &stages.iter().map(StageRecord::storable).collect::<Vec<_>>();
        self.write(|inner| {
            if !inner.documents.contains_key(&run.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            let runs = inner.runs.entry(run.document_id).or_default();
            let at = match runs.iter().position(|(r, _)| r.run_id == run.run_id) {
                Some(at) => at,
                None => {
                    runs.push((run.clone(), Vec::new()));
                    runs.len() - 1
                }
            };
            let (card, stored) = &mut runs[at];
            *card = run.clone();
            if replace {
                stored.clear();
            }
            for stage in stages {
                match stored.iter_mut().find(|s| s.stage_id == stage.stage_id) {
                    Some(old) => *old = stage.clone(),
                    None => stored.push(stage.clone()),
                }
            }
            Ok(())
        })
    }

    async fn runs(&self, document_id: Uuid) -> StoreResult<Vec<RunRecord>> {
        self.with(|inner| {
            Ok(inner
                .runs
                .get(&document_id)
                .map(|runs| runs.iter().map(|(r, _)| r.clone()).collect())
                .unwrap_or_default())
        })
    }

    async fn run_stages(
        &self,
        document_id: Uuid,
        run_id: &str,
        offset: i64,
        limit: i64,
    ) -> StoreResult<Option<StagePage>> {
        self.with(|inner| {
            let Some((_, stages)) = inner
                .runs
                .get(&document_id)
                .and_then(|runs| runs.iter().find(|(r, _)| r.run_id == run_id))
            else {
                return Ok(None);
            };
            Ok(Some(StagePage {
                stages: stages
                    .iter()
                    .skip(offset.max(0) as usize)
                    .take(limit.max(0) as usize)
                    .cloned()
                    .collect(),
                total: stages.len() as i64,
            }))
        })
    }

    async fn delete_ended_runs(&self, document_id: Uuid) -> StoreResult<u64> {
        self.write(|inner| {
            let Some(runs) = inner.runs.get_mut(&document_id) else {
                return Ok(0);
            };
            let before = runs.len();
            runs.retain(|(r, _)| r.is_live());
            Ok((before - runs.len()) as u64)
        })
    }

    async fn stop_unheld_runs(&self, reach: Reach) -> StoreResult<u64> {
        self.write(|inner| {
            let mut stopped = 0;
            for (doc, runs) in inner.runs.iter_mut() {
                if !reach.covers(*doc) {
                    continue;
                }
                // A paired machine's hold keeps its runs for the machine's backend (AO-21).
                let machine_held = inner
                    .holds
                    .get(doc)
                    .and_then(|h| h.machine_id)
                    .is_some_and(|m| inner.machines.contains_key(&m));
                let held = machine_held
                    || inner
                        .ownership
                        .get(doc)
                        .is_some_and(|own| own.holder.is_some());
                if held {
                    continue;
                }
                for (run, _) in runs.iter_mut().filter(|(run, _)| run.is_live()) {
                    run.status = "stopped".to_owned();
                    stopped += 1;
                }
            }
            Ok(stopped)
        })
    }
}

#[async_trait]
impl crate::JobStore for MemoryStore {
    async fn enqueue_job(&self, new: &crate::NewJob) -> StoreResult<crate::Enqueued> {
        use crate::{Enqueued, Job, JobState};
        self.write(|inner| {
            if !inner.documents.contains_key(&new.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(kept) = inner.jobs.values().find(|j| {
                j.document_id == new.document_id && j.idempotency_key == new.idempotency_key
            }) {
                return if kept.fingerprint == new.fingerprint {
                    Ok(Enqueued::Repeated(kept.clone()))
                } else {
                    Err(StoreError::Conflict(crate::jobs::key_reused(
                        &new.idempotency_key,
                    )))
                };
            }
            let same_target = |j: &Job| j.document_id == new.document_id && j.target == new.target;
            let generation = inner
                .jobs
                .values()
                .filter(|j| same_target(j))
                .map(|j| j.target_generation)
                .max()
                .unwrap_or(0)
                + 1;
            for j in inner.jobs.values_mut() {
                if same_target(j) && j.state.is_active() {
                    j.state = JobState::Superseded;
                    j.claim_owner = None;
                    j.claim_expires_at_ms = None;
                    j.updated_at_ms = new.created_at_ms;
                }
            }
            let job = crate::jobs::new_row(new, generation);
            inner.jobs.insert(job.id, job.clone());
            Ok(Enqueued::New(job))
        })
    }

    async fn job(&self, id: Uuid) -> StoreResult<Option<crate::Job>> {
        self.with(|inner| Ok(inner.jobs.get(&id).cloned()))
    }

    async fn document_jobs(&self, document_id: Uuid, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.with(|inner| {
            let mut jobs: Vec<_> = inner
                .jobs
                .values()
                .filter(|j| j.document_id == document_id)
                .cloned()
                .collect();
            jobs.sort_by_key(|j| std::cmp::Reverse((j.created_at_ms, j.id)));
            jobs.truncate(limit as usize);
            Ok(jobs)
        })
    }

    async fn last_completed_job(
        &self,
        document_id: Uuid,
        target: &str,
    ) -> StoreResult<Option<crate::Job>> {
        self.with(|inner| {
            Ok(inner
                .jobs
                .values()
                .filter(|j| {
                    j.document_id == document_id
                        && j.target == target
                        && j.state == crate::JobState::Completed
                })
                .max_by_key(|j| j.target_generation)
                .cloned())
        })
    }

    async fn due_jobs(&self, now_ms: UnixMillis, limit: u32) -> StoreResult<Vec<crate::Job>> {
        self.with(|inner| {
            let mut jobs: Vec<_> = inner
                .jobs
                .values()
                .filter(|j| j.state == crate::JobState::Pending && j.available_at_ms <= now_ms)
                .cloned()
                .collect();
            jobs.sort_by_key(|j| (j.created_at_ms, j.id));
            jobs.truncate(limit as usize);
            Ok(jobs)
        })
    }

    async fn claim_job(
        &self,
        id: Uuid,
        claim_owner: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<crate::Job>> {
        self.write(|inner| {
            Ok(inner.jobs.get_mut(&id).and_then(|j| {
                crate::jobs::claim_row(j, claim_owner, now_ms, ttl_ms).then(|| j.clone())
            }))
        })
    }

    async fn renew_job_claim(
        &self,
        id: Uuid,
        claim_generation: i64,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            Ok(match inner.jobs.get_mut(&id) {
                Some(j) if crate::jobs::holds_claim(j, claim_generation) => {
                    j.claim_expires_at_ms = Some(now_ms.saturating_add(ttl_ms));
                    true
                }
                _ => false,
            })
        })
    }

    async fn set_job_progress(
        &self,
        id: Uuid,
        claim_generation: i64,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            Ok(match inner.jobs.get_mut(&id) {
                Some(j) if crate::jobs::holds_claim(j, claim_generation) => {
                    j.progress = progress.to_owned();
                    j.updated_at_ms = now_ms;
                    true
                }
                _ => false,
            })
        })
    }

    async fn settle_job(
        &self,
        id: Uuid,
        claim_generation: i64,
        settlement: &crate::Settlement,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            Ok(match inner.jobs.get_mut(&id) {
                Some(j) if crate::jobs::holds_claim(j, claim_generation) => {
                    crate::jobs::settled_row(j, settlement, now_ms);
                    true
                }
                _ => false,
            })
        })
    }

    async fn cancel_job(&self, id: Uuid, reason: &str, now_ms: UnixMillis) -> StoreResult<bool> {
        self.write(|inner| {
            Ok(match inner.jobs.get_mut(&id) {
                Some(j) if j.state.is_active() => {
                    crate::jobs::cancelled_row(j, reason, now_ms);
                    true
                }
                _ => false,
            })
        })
    }

    async fn interrupt_running_jobs(
        &self,
        reason: &str,
        now_ms: UnixMillis,
        reach: Reach,
    ) -> StoreResult<u64> {
        self.write(|inner| {
            let mut n = 0;
            for j in inner.jobs.values_mut() {
                if j.state == crate::JobState::Running && reach.covers(j.document_id) {
                    crate::jobs::settled_row(
                        j,
                        &crate::Settlement::Failed {
                            reason: reason.to_owned(),
                        },
                        now_ms,
                    );
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    async fn job_counts(&self) -> StoreResult<Vec<(crate::JobState, u64)>> {
        self.with(|inner| {
            let mut counts = BTreeMap::new();
            for j in inner.jobs.values() {
                *counts.entry(j.state).or_insert(0u64) += 1;
            }
            Ok(counts.into_iter().collect())
        })
    }
}

#[async_trait]
impl crate::TitleStore for MemoryStore {
    async fn title_sidecar(&self, document_id: Uuid) -> StoreResult<crate::TitleSidecar> {
        self.with(|inner| Ok(inner.titles.get(&document_id).cloned().unwrap_or_default()))
    }

    async fn draft_title(
        &self,
        document_id: Uuid,
        expected: &str,
        new_title: &str,
    ) -> StoreResult<crate::Drafted> {
        let new_title = crate::storable(new_title);
        self.write(|inner| {
            let chosen = inner.titles.get(&document_id).is_some_and(|t| t.chosen);
            let doc = inner
                .documents
                .get_mut(&document_id)
                .ok_or(StoreError::NotFound("document"))?;
            if chosen || doc.title != expected {
                return Ok(crate::Drafted::Kept);
            }
            doc.title = new_title.to_string();
            inner.titles.entry(document_id).or_default().planner_title =
                Some(new_title.into_owned());
            Ok(crate::Drafted::Applied)
        })
    }
}

impl Inner {
    /// `document_id`'s thread `thread_id`, for a change.
    fn comment_thread_mut(
        &mut self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<&mut crate::CommentThread> {
        self.comment_threads
            .get_mut(&thread_id)
            .filter(|t| t.document_id == document_id)
            .ok_or(StoreError::NotFound("comment thread"))
    }

    fn with_notes(&self, thread: &crate::CommentThread) -> crate::ThreadWithNotes {
        let notes = self
            .comment_notes
            .range((thread.id, 0)..=(thread.id, i64::MAX))
            .map(|(_, n)| n.clone())
            .collect();
        (thread.clone(), notes)
    }
}

#[async_trait]
impl crate::GraphStore for MemoryStore {
    async fn graph_versions(&self, document_id: Uuid) -> StoreResult<Vec<crate::GraphVersion>> {
        self.with(|inner| Ok(inner.graph_versions(document_id)))
    }

    async fn change_graph(
        &self,
        document_id: Uuid,
        change: &crate::GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::GraphVersion, crate::GraphRefusal>> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            let versions = inner.graph_versions(document_id);
            let saved = match crate::graphs::apply(document_id, &versions, change, now_ms) {
                Ok(saved) => saved,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let changed = saved[0].clone().storable();
            inner.save_versions(document_id, saved);
            Ok(Ok(changed))
        })
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
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(build) = build {
                let state = inner
                    .implementation_builds
                    .get(&build)
                    .filter(|b| b.document_id == document_id && b.kind == crate::BuildKind::Build);
                match state.map(|b| b.state) {
                    Some(crate::BuildState::Launching) => {}
                    other => {
                        return Ok(Err(crate::GraphRefusal::BuildEnded {
                            state: other
                                .map_or("unknown", crate::BuildState::as_str)
                                .to_owned(),
                        }))
                    }
                }
            }
            let versions = inner.graph_versions(document_id);
            let claim = crate::GraphChange::Claim {
                counters,
                run_id: run_id.to_owned(),
            };
            let saved = match crate::graphs::apply(document_id, &versions, &claim, now_ms) {
                Ok(saved) => saved,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let run = crate::graphs::new_run(
                document_id,
                counters.graph_version,
                run_id,
                progress,
                now_ms,
            );
            if inner.implementation_runs.contains_key(&run.run_id) {
                return Err(StoreError::Backend(format!("run {run_id} exists")));
            }
            inner.save_versions(document_id, saved);
            inner
                .implementation_runs
                .insert(run.run_id.clone(), run.clone());
            // The launching build of the version claimed is claimed by this run.
            for build in inner.implementation_builds.values_mut() {
                if build.document_id == document_id
                    && build.kind == crate::BuildKind::Build
                    && build.graph_version == counters.graph_version
                    && build.state == crate::BuildState::Launching
                {
                    build.state = crate::BuildState::Claimed;
                    build.run_id = Some(run.run_id.clone());
                    build.updated_at_ms = now_ms;
                }
            }
            Ok(Ok(run))
        })
    }

    async fn implementation_run(
        &self,
        run_id: &str,
    ) -> StoreResult<Option<crate::ImplementationRun>> {
        self.with(|inner| {
            Ok(inner
                .implementation_runs
                .get(crate::storable(run_id).as_ref())
                .cloned())
        })
    }

    async fn implementation_runs(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.with(|inner| {
            let mut runs: Vec<_> = inner
                .implementation_runs
                .values()
                .filter(|r| r.document_id == document_id)
                .cloned()
                .collect();
            runs.sort_by(|a, b| (a.started_at_ms, &a.run_id).cmp(&(b.started_at_ms, &b.run_id)));
            Ok(runs)
        })
    }

    async fn implementation_report(
        &self,
        run_id: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        let at = (
            crate::storable(run_id).into_owned(),
            crate::storable(key).into_owned(),
        );
        self.with(|inner| Ok(inner.implementation_reports.get(&at).cloned()))
    }

    async fn report_implementation(
        &self,
        run_id: &str,
        report: &crate::RunReport,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Reported> {
        let at = (
            crate::storable(run_id).into_owned(),
            crate::storable(&report.key).into_owned(),
        );
        self.write(|inner| {
            let Some(run) = inner.implementation_runs.get(&at.0).cloned() else {
                return Err(StoreError::NotFound("implementation run"));
            };
            if let Some((payload, result)) = inner.implementation_reports.get(&at) {
                return Ok(crate::Reported::Repeated {
                    payload: payload.clone(),
                    result: result.clone(),
                });
            }
            if run.revision != report.base_revision || run.ended.is_some() {
                return Ok(crate::Reported::Moved);
            }
            let mut versions = Vec::new();
            if let Some(end) = report.end {
                let change = crate::GraphChange::EndRun {
                    graph_version: run.graph_version,
                    run_id: run.run_id.clone(),
                    end,
                };
                let current = inner.graph_versions(run.document_id);
                match crate::graphs::apply(run.document_id, &current, &change, now_ms) {
                    Ok(saved) => versions = saved,
                    // The run holds its version until it ends, so this cannot be refused.
                    Err(refusal) => return Err(StoreError::Backend(refusal.to_string())),
                }
            }
            let now = crate::graphs::reported(&run, report, now_ms);
            // A browser build's run that delivers records what it built (LIFE-11).
            if let (Some(crate::RunEnd::Verified), Some(delivered)) =
                (report.end, &report.delivered)
            {
                let build = inner.implementation_builds.values().find(|b| {
                    b.kind == crate::BuildKind::Build && b.run_id.as_deref() == Some(&run.run_id)
                });
                if let Some(build) = build {
                    let built = crate::BuiltSource {
                        document_id: run.document_id,
                        build_id: build.id,
                        plan_revision: delivered.plan_revision,
                        source: crate::storable(&delivered.source).into_owned(),
                        recorded_at_ms: now_ms,
                    };
                    inner.built_sources.insert(run.document_id, built);
                }
            }
            inner.save_versions(run.document_id, versions);
            inner
                .implementation_runs
                .insert(now.run_id.clone(), now.clone());
            inner.implementation_reports.insert(
                at,
                (
                    crate::storable(&report.payload).into_owned(),
                    crate::storable(&report.result).into_owned(),
                ),
            );
            Ok(crate::Reported::Saved(now))
        })
    }
}

impl Inner {
    fn save_versions(&mut self, document_id: Uuid, versions: Vec<crate::GraphVersion>) {
        for version in versions {
            self.graphs.insert(
                (document_id, version.counters.graph_version),
                version.storable(),
            );
        }
    }

    /// `document_id`'s graph versions, oldest first.
    fn graph_versions(&self, document_id: Uuid) -> Vec<crate::GraphVersion> {
        self.graphs
            .range((document_id, i64::MIN)..=(document_id, i64::MAX))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[async_trait]
impl crate::CommentStore for MemoryStore {
    async fn start_comment(
        &self,
        thread: &crate::NewCommentThread,
    ) -> StoreResult<crate::ThreadWithNotes> {
        self.write(|inner| {
            if !inner.documents.contains_key(&thread.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if inner.comment_threads.contains_key(&thread.id) {
                return Err(StoreError::Conflict("comment thread id taken".into()));
            }
            let (started, notes) = thread.started();
            inner.comment_threads.insert(thread.id, started.clone());
            for note in &notes {
                inner
                    .comment_notes
                    .insert((thread.id, note.seq), note.clone());
            }
            Ok((started, notes))
        })
    }

    async fn reply_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        note: &crate::NewCommentNote,
        max_replies: i64,
    ) -> StoreResult<crate::Replied> {
        let note = note.storable();
        self.write(|inner| {
            let thread = inner.comment_thread_mut(document_id, thread_id)?;
            if thread.resolved_at_ms.is_some() {
                return Ok(crate::Replied::Resolved);
            }
            if thread.replies >= max_replies {
                return Ok(crate::Replied::Full);
            }
            thread.replies += 1;
            let saved = note.numbered(thread_id, thread.replies);
            let thread = thread.clone();
            inner
                .comment_notes
                .insert((thread_id, saved.seq), saved.clone());
            Ok(crate::Replied::Saved(thread, saved))
        })
    }

    async fn resolve_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        by: &str,
        at_ms: UnixMillis,
    ) -> StoreResult<crate::CommentThread> {
        let by = crate::storable(by).into_owned();
        self.write(|inner| {
            let thread = inner.comment_thread_mut(document_id, thread_id)?;
            if thread.resolved_at_ms.is_none() {
                thread.resolved_by = Some(by);
                thread.resolved_at_ms = Some(at_ms);
            }
            Ok(thread.clone())
        })
    }

    async fn set_comment_result(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        revision: i64,
    ) -> StoreResult<crate::CommentThread> {
        self.write(|inner| {
            let thread = inner.comment_thread_mut(document_id, thread_id)?;
            thread.result_revision = Some(revision);
            Ok(thread.clone())
        })
    }

    async fn comment_thread(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<Option<crate::ThreadWithNotes>> {
        self.with(|inner| {
            Ok(inner
                .comment_threads
                .get(&thread_id)
                .filter(|t| t.document_id == document_id)
                .map(|t| inner.with_notes(t)))
        })
    }

    async fn comment_threads(
        &self,
        document_id: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<crate::ThreadWithNotes>> {
        self.with(|inner| {
            let mut threads: Vec<_> = inner
                .comment_threads
                .values()
                .filter(|t| t.document_id == document_id)
                .collect();
            threads.sort_by_key(|t| std::cmp::Reverse((t.created_at_ms, t.id)));
            Ok(threads
                .into_iter()
                .take(usize::try_from(limit.max(0)).unwrap_or(usize::MAX))
                .map(|t| inner.with_notes(t))
                .collect())
        })
    }
}

impl Inner {
    /// The machine as read now: its owner's login as the accounts table has it.
    fn machine_record(&self, id: Uuid) -> Option<crate::Machine> {
        let row = self.machines.get(&id)?;
        let mut machine = row.machine.clone();
        if let Some(owner) = self.accounts.get(&machine.owner_account_id) {
            machine.owner_login.clone_from(&owner.login);
        }
        Some(machine)
    }

    /// Takes the credentials issued to `machine_id` for `document_id`.
    fn forget_credentials(&mut self, machine_id: Uuid, document_id: Uuid) {
        self.planner_credentials
            .retain(|_, c| !(c.machine_id == machine_id && c.document_id == document_id));
    }
}

/// A request key as the memory store files it.
fn request_row(key: &crate::RequestKey) -> (String, String, String) {
    (key.scope.clone(), key.holder.clone(), key.key.clone())
}

#[async_trait]
impl crate::RequestStore for MemoryStore {
    async fn claim_request(
        &self,
        key: &crate::RequestKey,
        digest: &str,
        now_ms: UnixMillis,
        expires_at_ms: UnixMillis,
    ) -> StoreResult<crate::RequestClaim> {
        self.write(|inner| {
            inner
                .kept_requests
                .retain(|_, kept| kept.expires_at_ms > now_ms);
            let row = request_row(key);
            if let Some(kept) = inner.kept_requests.get(&row) {
                return Ok(crate::RequestClaim::Held(kept.clone()));
            }
            inner.kept_requests.insert(
                row,
                crate::KeptRequest {
                    digest: digest.to_owned(),
                    answer: None,
                    since_ms: now_ms,
                    expires_at_ms,
                },
            );
            Ok(crate::RequestClaim::Claimed { since_ms: now_ms })
        })
    }

    async fn answer_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
        answer: &str,
    ) -> StoreResult<bool> {
        self.write(
            |inner| match inner.kept_requests.get_mut(&request_row(key)) {
                Some(kept) if kept.since_ms == since_ms => {
                    kept.answer = Some(answer.to_owned());
                    Ok(true)
                }
                _ => Ok(false),
            },
        )
    }

    async fn release_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            let row = request_row(key);
            match inner.kept_requests.get(&row) {
                Some(kept) if kept.since_ms == since_ms => {
                    inner.kept_requests.remove(&row);
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
    }
}

#[async_trait]
impl crate::MachineStore for MemoryStore {
    async fn pair_machine(&self, machine: &crate::NewMachine) -> StoreResult<crate::Machine> {
        self.write(|inner| {
            let Some(owner) = inner.accounts.get(&machine.owner_account_id) else {
                return Err(StoreError::NotFound("account"));
            };
            if inner.machines.contains_key(&machine.id) {
                return Err(StoreError::Conflict("machine id already exists".into()));
            }
            let record = crate::Machine {
                id: machine.id,
                owner_account_id: machine.owner_account_id,
                owner_login: owner.login.clone(),
                name: machine.name.clone(),
                release: machine.release.clone(),
                created_at_ms: machine.created_at_ms,
            };
            inner.machines.insert(
                machine.id,
                MachineRow {
                    machine: record.clone(),
                    revision: 1,
                    sealed: machine.sealed.clone(),
                },
            );
            Ok(record)
        })
    }

    async fn machine(&self, id: Uuid) -> StoreResult<Option<crate::Machine>> {
        self.with(|inner| Ok(inner.machine_record(id)))
    }

    async fn machine_credential(&self, id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        self.with(|inner| {
            Ok(inner
                .machines
                .get(&id)
                .map(|row| (row.revision, row.sealed.clone())))
        })
    }

    async fn set_machine_credential(
        &self,
        id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
        release: Option<&str>,
    ) -> StoreResult<Option<i64>> {
        self.write(|inner| {
            let row = inner
                .machines
                .get_mut(&id)
                .ok_or(StoreError::NotFound("machine"))?;
            if row.revision != expected_revision {
                return Ok(None);
            }
            row.revision += 1;
            row.sealed = sealed.to_vec();
            if let Some(release) = release {
                row.machine.release = Some(release.to_owned());
            }
            Ok(Some(row.revision))
        })
    }

    async fn machines_of(&self, account_id: Uuid) -> StoreResult<Vec<crate::Machine>> {
        self.with(|inner| {
            let order = |ids: Vec<Uuid>| {
                let mut found: Vec<crate::Machine> = ids
                    .into_iter()
                    .filter_map(|id| inner.machine_record(id))
                    .collect();
                found.sort_by_key(|m| (m.created_at_ms, m.id));
                found
            };
            let own = order(
                inner
                    .machines
                    .values()
                    .filter(|r| r.machine.owner_account_id == account_id)
                    .map(|r| r.machine.id)
                    .collect(),
            );
            let shared = order(
                inner
                    .machine_shares
                    .keys()
                    .filter(|(_, a)| *a == account_id)
                    .map(|(m, _)| *m)
                    .collect(),
            );
            Ok(own.into_iter().chain(shared).collect())
        })
    }

    async fn share_machine(
        &self,
        id: Uuid,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            if !inner.machines.contains_key(&id) {
                return Err(StoreError::NotFound("machine"));
            }
            if !inner.accounts.contains_key(&account_id) {
                return Err(StoreError::NotFound("account"));
            }
            if inner.machine_shares.contains_key(&(id, account_id)) {
                return Ok(false);
            }
            inner.machine_shares.insert((id, account_id), now_ms);
            Ok(true)
        })
    }

    async fn unshare_machine(&self, id: Uuid, account_id: Uuid) -> StoreResult<bool> {
        self.write(|inner| {
            if inner.machine_shares.remove(&(id, account_id)).is_none() {
                return Ok(false);
            }
            let theirs: Vec<Uuid> = inner
                .document_machines
                .values()
                .filter(|c| c.machine_id == id && c.chosen_by_account_id == account_id)
                .map(|c| c.document_id)
                .collect();
            for document_id in theirs {
                inner.document_machines.remove(&document_id);
                inner.forget_credentials(id, document_id);
            }
            if inner.machine_favourites.get(&account_id) == Some(&id) {
                inner.machine_favourites.remove(&account_id);
            }
            Ok(true)
        })
    }

    async fn machine_shares(&self, id: Uuid) -> StoreResult<Vec<Account>> {
        self.with(|inner| {
            let mut shares: Vec<(UnixMillis, Uuid)> = inner
                .machine_shares
                .iter()
                .filter(|((m, _), _)| *m == id)
                .map(|((_, a), at)| (*at, *a))
                .collect();
            shares.sort();
            Ok(shares
                .into_iter()
                .filter_map(|(_, a)| inner.accounts.get(&a).cloned())
                .collect())
        })
    }

    async fn set_favourite_machine(
        &self,
        account_id: Uuid,
        machine_id: Option<Uuid>,
    ) -> StoreResult<()> {
        self.write(|inner| {
            match machine_id {
                Some(m) => {
                    if !inner.machines.contains_key(&m) {
                        return Err(StoreError::NotFound("machine"));
                    }
                    if !inner.accounts.contains_key(&account_id) {
                        return Err(StoreError::NotFound("account"));
                    }
                    inner.machine_favourites.insert(account_id, m);
                }
                None => {
                    inner.machine_favourites.remove(&account_id);
                }
            }
            Ok(())
        })
    }

    async fn favourite_machine(&self, account_id: Uuid) -> StoreResult<Option<Uuid>> {
        self.with(|inner| Ok(inner.machine_favourites.get(&account_id).copied()))
    }

    async fn choose_machine(
        &self,
        document_id: Uuid,
        choice: Option<&crate::MachineChoice>,
    ) -> StoreResult<Option<crate::MachineChoice>> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(c) = choice {
                if !inner.machines.contains_key(&c.machine_id) {
                    return Err(StoreError::NotFound("machine"));
                }
            }
            let before = match choice {
                Some(c) => {
                    let mut c = c.clone();
                    c.document_id = document_id;
                    inner.document_machines.insert(document_id, c)
                }
                None => inner.document_machines.remove(&document_id),
            };
            if let Some(b) = &before {
                if choice.map(|c| c.machine_id) != Some(b.machine_id) {
                    inner.forget_credentials(b.machine_id, document_id);
                }
            }
            Ok(before)
        })
    }

    async fn machine_choice(&self, document_id: Uuid) -> StoreResult<Option<crate::MachineChoice>> {
        self.with(|inner| Ok(inner.document_machines.get(&document_id).cloned()))
    }

    async fn machine_documents(&self, machine_id: Uuid) -> StoreResult<Vec<crate::MachineChoice>> {
        self.with(|inner| {
            let mut chosen: Vec<crate::MachineChoice> = inner
                .document_machines
                .values()
                .filter(|c| c.machine_id == machine_id)
                .cloned()
                .collect();
            chosen.sort_by_key(|c| (c.chosen_at_ms, c.document_id));
            Ok(chosen)
        })
    }

    async fn choose_default_machine(
        &self,
        choice: &crate::MachineChoice,
    ) -> StoreResult<(crate::MachineChoice, bool)> {
        self.write(|inner| {
            if !inner.documents.contains_key(&choice.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if let Some(now) = inner.document_machines.get(&choice.document_id) {
                return Ok((now.clone(), false));
            }
            if !inner.machines.contains_key(&choice.machine_id) {
                return Err(StoreError::NotFound("machine"));
            }
            let mut c = choice.clone();
            c.by_default = true;
            inner.document_machines.insert(c.document_id, c.clone());
            Ok((c, true))
        })
    }

    async fn withdraw_default_machine(
        &self,
        document_id: Uuid,
        machine_id: Uuid,
    ) -> StoreResult<bool> {
        self.write(|inner| {
            let ours = inner
                .document_machines
                .get(&document_id)
                .is_some_and(|c| c.by_default && c.machine_id == machine_id);
            if ours {
                inner.document_machines.remove(&document_id);
                inner.forget_credentials(machine_id, document_id);
            }
            Ok(ours)
        })
    }

    async fn default_machine_choices(&self) -> StoreResult<Vec<crate::MachineChoice>> {
        self.with(|inner| {
            let mut chosen: Vec<crate::MachineChoice> = inner
                .document_machines
                .values()
                .filter(|c| c.by_default)
                .cloned()
                .collect();
            chosen.sort_by_key(|c| (c.chosen_at_ms, c.document_id));
            Ok(chosen)
        })
    }

    async fn put_planner_credential(
        &self,
        credential: &crate::PlannerCredential,
    ) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.machines.contains_key(&credential.machine_id) {
                return Err(StoreError::NotFound("machine"));
            }
            if !inner.documents.contains_key(&credential.document_id) {
                return Err(StoreError::NotFound("document"));
            }
            inner
                .planner_credentials
                .insert(credential.digest.clone(), credential.clone());
            let mut pair: Vec<(UnixMillis, String)> = inner
                .planner_credentials
                .values()
                .filter(|c| {
                    c.machine_id == credential.machine_id && c.document_id == credential.document_id
                })
                .map(|c| (c.issued_at_ms, c.digest.clone()))
                .collect();
            // Newest first; ties by digest, as the SQL backends order them.
            pair.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
            for (_, digest) in pair
                .into_iter()
                .skip(usize::try_from(crate::PLANNER_CREDENTIALS_KEPT).unwrap_or(usize::MAX))
            {
                inner.planner_credentials.remove(&digest);
            }
            Ok(())
        })
    }

    async fn planner_credential(
        &self,
        digest: &str,
    ) -> StoreResult<Option<crate::PlannerCredential>> {
        self.with(|inner| Ok(inner.planner_credentials.get(digest).cloned()))
    }

    async fn unpair_machine(&self, id: Uuid) -> StoreResult<bool> {
        self.write(|inner| {
            if inner.machines.remove(&id).is_none() {
                return Ok(false);
            }
            inner.machine_shares.retain(|(m, _), _| *m != id);
            inner.machine_favourites.retain(|_, m| *m != id);
            inner.document_machines.retain(|_, c| c.machine_id != id);
            inner.planner_credentials.retain(|_, c| c.machine_id != id);
            inner.connector_polls.remove(&id);
            for build in inner.implementation_builds.values_mut() {
                if build.machine_id == id && build.state.is_pending() {
                    build.state = crate::BuildState::Failed;
                    build.reason = Some(crate::builds::MACHINE_GONE.to_owned());
                }
            }
            Ok(true)
        })
    }

    async fn record_connector_poll(&self, poll: &crate::ConnectorPoll) -> StoreResult<()> {
        self.write(|inner| {
            if !inner.machines.contains_key(&poll.machine_id) {
                return Ok(());
            }
            let kept = inner
                .connector_polls
                .entry(poll.machine_id)
                .or_insert(*poll);
            if kept.polled_at_ms <= poll.polled_at_ms {
                *kept = *poll;
            }
            Ok(())
        })
    }

    async fn connector_polls_since(
        &self,
        since_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ConnectorPoll>> {
        self.with(|inner| {
            Ok(inner
                .connector_polls
                .values()
                .filter(|p| p.polled_at_ms >= since_ms)
                .copied()
                .collect())
        })
    }
}

#[async_trait]
impl crate::BuildStore for MemoryStore {
    async fn approve_and_queue(
        &self,
        document_id: Uuid,
        approval: &crate::GraphChange,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<(crate::GraphVersion, crate::Build), crate::GraphRefusal>> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            if !matches!(approval, crate::GraphChange::Approve { .. }) {
                return Err(StoreError::Backend(
                    "only an approval queues a build".into(),
                ));
            }
            let versions = inner.graph_versions(document_id);
            let saved = match crate::graphs::apply(document_id, &versions, approval, now_ms) {
                Ok(saved) => saved,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let approved = saved[0].clone().storable();
            if inner.implementation_builds.contains_key(&build.id) {
                return Err(StoreError::Conflict(format!("build {} exists", build.id)));
            }
            inner.save_versions(document_id, saved);
            let queued =
                crate::builds::queued(document_id, approved.counters.graph_version, build, now_ms);
            inner.implementation_builds.insert(build.id, queued.clone());
            Ok(Ok((approved, queued)))
        })
    }

    async fn queue_build(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            let latest = inner.graph_versions(document_id).pop();
            let Some(latest) =
                latest.filter(|v| v.state == crate::GraphState::Approved && !v.verified)
            else {
                return Ok(Err(crate::QueueRefusal::NotApproved));
            };
            if let Some(pending) = inner
                .implementation_builds
                .values()
                .find(|b| b.document_id == document_id && b.state.is_pending())
            {
                return Ok(Err(crate::QueueRefusal::Pending { build: pending.id }));
            }
            if inner.implementation_builds.contains_key(&build.id) {
                return Err(StoreError::Conflict(format!("build {} exists", build.id)));
            }
            let queued =
                crate::builds::queued(document_id, latest.counters.graph_version, build, now_ms);
            inner.implementation_builds.insert(build.id, queued.clone());
            Ok(Ok(queued))
        })
    }

    async fn build(&self, id: Uuid) -> StoreResult<Option<crate::Build>> {
        self.with(|inner| Ok(inner.implementation_builds.get(&id).cloned()))
    }

    async fn machine_builds(&self, machine_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.with(|inner| {
            let mut builds: Vec<crate::Build> = inner
                .implementation_builds
                .values()
                .filter(|b| b.machine_id == machine_id && b.state == crate::BuildState::Queued)
                .cloned()
                .collect();
            builds.sort_by_key(|b| (b.created_at_ms, b.id));
            Ok(builds)
        })
    }

    async fn document_builds(&self, document_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        self.with(|inner| {
            let mut builds: Vec<crate::Build> = inner
                .implementation_builds
                .values()
                .filter(|b| b.document_id == document_id)
                .cloned()
                .collect();
            builds.sort_by_key(|b| std::cmp::Reverse((b.created_at_ms, b.id)));
            builds.truncate(usize::try_from(crate::BUILDS_SHOWN).unwrap_or(usize::MAX));
            Ok(builds)
        })
    }

    async fn pick_up_build(
        &self,
        id: Uuid,
        bridge_digest: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.write(|inner| {
            let picked = inner.implementation_builds.get_mut(&id).and_then(|b| {
                (b.state == crate::BuildState::Queued).then(|| {
                    b.state = crate::BuildState::Launching;
                    b.updated_at_ms = now_ms;
                    b.clone()
                })
            });
            if picked.is_some() {
                inner.build_bridges.insert(bridge_digest.to_owned(), id);
            }
            Ok(picked)
        })
    }

    async fn build_by_bridge(&self, bridge_digest: &str) -> StoreResult<Option<crate::Build>> {
        self.with(|inner| {
            Ok(inner
                .build_bridges
                .get(bridge_digest)
                .and_then(|id| inner.implementation_builds.get(id))
                .cloned())
        })
    }

    async fn fail_build(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.write(|inner| {
            Ok(inner.implementation_builds.get_mut(&id).and_then(|b| {
                b.state.is_pending().then(|| {
                    b.state = crate::BuildState::Failed;
                    b.reason = Some(reason.to_owned());
                    b.change = None;
                    b.updated_at_ms = now_ms;
                    b.clone()
                })
            }))
        })
    }

    async fn built_source(&self, document_id: Uuid) -> StoreResult<Option<crate::BuiltSource>> {
        self.with(|inner| Ok(inner.built_sources.get(&document_id).cloned()))
    }

    async fn queue_rebuild(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        after: &str,
        after_plan_revision: i64,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        self.write(|inner| {
            if !inner.documents.contains_key(&document_id) {
                return Err(StoreError::NotFound("document"));
            }
            let Some(built) = inner.built_sources.get(&document_id).cloned() else {
                return Ok(Err(crate::QueueRefusal::NothingBuilt));
            };
            let versions = inner.graph_versions(document_id);
            if let Some(held) = versions
                .iter()
                .find(|v| v.state == crate::GraphState::Locked)
            {
                return Ok(Err(crate::QueueRefusal::Locked {
                    graph_version: held.counters.graph_version,
                }));
            }
            let builds: Vec<crate::Build> = inner
                .implementation_builds
                .values()
                .filter(|b| b.document_id == document_id)
                .cloned()
                .collect();
            if let Some(pending) = builds.iter().find(|b| b.state.is_pending()) {
                return Ok(Err(crate::QueueRefusal::Pending { build: pending.id }));
            }
            if inner.implementation_builds.contains_key(&build.id) {
                return Err(StoreError::Conflict(format!("build {} exists", build.id)));
            }
            for gone in crate::builds::giving_way(&builds) {
                inner.implementation_builds.remove(&gone);
                inner.build_bridges.retain(|_, id| *id != gone);
            }
            let latest = versions.last().map_or(0, |v| v.counters.graph_version);
            let queued = crate::builds::queued_rebuild(
                document_id,
                latest,
                build,
                &built,
                after,
                after_plan_revision,
                now_ms,
            );
            inner.implementation_builds.insert(build.id, queued.clone());
            Ok(Ok(queued))
        })
    }

    async fn land_rebuild(
        &self,
        id: Uuid,
        definition: &str,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Landing> {
        self.write(|inner| {
            let Some(rebuild) = inner.implementation_builds.get(&id).cloned() else {
                return Err(StoreError::NotFound("build"));
            };
            if rebuild.kind == crate::BuildKind::Rebuild
                && rebuild.state == crate::BuildState::Landed
            {
                return Ok(crate::Landing::Already(rebuild));
            }
            let (crate::BuildKind::Rebuild, crate::BuildState::Launching, Some(change)) =
                (rebuild.kind, rebuild.state, rebuild.change.clone())
            else {
                return Ok(crate::Landing::NotLaunching(rebuild));
            };
            let land = crate::GraphChange::Land {
                plan_revision: change.plan_revision,
                definition: definition.to_owned(),
            };
            let versions = inner.graph_versions(rebuild.document_id);
            let saved = match crate::graphs::apply(rebuild.document_id, &versions, &land, now_ms) {
                Ok(saved) => saved,
                Err(refusal) => return Ok(crate::Landing::Refused(refusal)),
            };
            let version = saved[0].clone().storable();
            inner.save_versions(rebuild.document_id, saved);
            inner.built_sources.insert(
                rebuild.document_id,
                crate::BuiltSource {
                    document_id: rebuild.document_id,
                    build_id: rebuild.id,
                    plan_revision: change.plan_revision,
                    source: change.after,
                    recorded_at_ms: now_ms,
                },
            );
            let run = crate::builds::landed_run(&rebuild, &version, progress, now_ms);
            let landed = crate::Build {
                state: crate::BuildState::Landed,
                graph_version: version.counters.graph_version,
                run_id: Some(run.run_id.clone()),
                change: None,
                updated_at_ms: now_ms,
                ..rebuild
            };
            inner.implementation_runs.insert(run.run_id.clone(), run);
            inner.implementation_builds.insert(id, landed.clone());
            Ok(crate::Landing::Landed {
                rebuild: landed,
                version,
            })
        })
    }

    async fn expire_builds(
        &self,
        reach: Reach,
        cutoff_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::Build>> {
        self.write(|inner| {
            let mut expired = Vec::new();
            for b in inner.implementation_builds.values_mut() {
                if b.state == crate::BuildState::Launching
                    && b.updated_at_ms <= cutoff_ms
                    && reach.covers(b.document_id)
                {
                    b.state = crate::BuildState::Failed;
                    b.reason = Some(crate::builds::EXPIRED.to_owned());
                    b.change = None;
                    b.updated_at_ms = now_ms;
                    expired.push(b.clone());
                }
            }
            expired.sort_by_key(|b| (b.created_at_ms, b.id));
            Ok(expired)
        })
    }

    async fn silent_builds(&self, cutoff_ms: UnixMillis) -> StoreResult<Vec<crate::Build>> {
        self.with(|inner| {
            let mut silent: Vec<crate::Build> = inner
                .implementation_builds
                .values()
                .filter(|b| b.state == crate::BuildState::Launching && b.updated_at_ms <= cutoff_ms)
                .cloned()
                .collect();
            silent.sort_by_key(|b| (b.created_at_ms, b.id));
            Ok(silent)
        })
    }

    async fn silent_build_runs(
        &self,
        cutoff_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        self.with(|inner| {
            let mut runs: Vec<crate::ImplementationRun> = inner
                .implementation_builds
                .values()
                .filter(|b| {
                    b.kind == crate::BuildKind::Build && b.state == crate::BuildState::Claimed
                })
                .filter_map(|b| inner.implementation_runs.get(b.run_id.as_deref()?))
                .filter(|r| r.ended.is_none() && r.updated_at_ms <= cutoff_ms)
                .cloned()
                .collect();
            runs.sort_by(|a, b| (a.updated_at_ms, &a.run_id).cmp(&(b.updated_at_ms, &b.run_id)));
            runs.dedup_by(|a, b| a.run_id == b.run_id);
            Ok(runs)
        })
    }
}
