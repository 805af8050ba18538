//! `chopin-store`: the server's durable state behind one interface, [`Store`], split by aggregate
//! ([`SignInStore`], [`DocumentStore`], [`ContentStore`], [`TranscriptStore`],
//! [`OwnershipStore`], [`LeaseStore`]), with three backends: in memory (the simulator and unit
//! tests), SQLite (the embedded default) and PostgreSQL (production). The two SQL backends run
//! the same statements (module `sql`); each keeps its connection setup, its migrations and its
//! `Dialect`, what differs between the databases. A new table adds a small trait of its own and
//! joins [`Store`]'s supertraits.
//!
//! Owns: records and the atomic rules on them — the generation-guarded Planner ownership claim,
//! revisions that only grow (documents', and browser-login credentials', whose sealed bytes are
//! opaque here: the server's credential sealing makes them), transcript order, the exclusive
//! writer lease and the fence it puts on writes (a handle from [`Store::fenced`] refuses every
//! write once its writer epoch is no longer current; module [`fence`]), a document's
//! durable content (a journal of Yjs v1 updates after its latest checkpoint, numbered gap-free per
//! document, and the Yjs epoch) and its slugs (the canonical one and former ones kept as aliases,
//! unique together per repository), and parentage: a child document belongs to one top-level
//! parent of the same repository, fixed at creation (one level: a child has no children). Update
//! and checkpoint bytes are opaque here: the caller encodes and decodes them with yrs.
//! Does not own: policy (who may claim, when a grace ends) or time: callers pass wall-clock
//! milliseconds read from their clock. Nothing here imports the server: the compiler keeps this
//! layer below every service. Every backend passes the same conformance
//! suite (`store/tests/conformance.rs`).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub mod builds;
pub mod comments;
pub mod fence;
pub mod graphs;
pub mod instrumented;
pub mod jobs;
pub mod machines;
pub mod memory;
pub mod postgres;
pub mod requests;
pub mod routed;
mod sql;
pub mod sqlite;

pub use builds::{
    Build, BuildChange, BuildKind, BuildState, BuildStore, BuiltSource, Delivery, Landing,
    NewBuild, QueueRefusal, BUILDS_KEPT, BUILDS_SHOWN,
};
pub use comments::{
    CommentNote, CommentStore, CommentThread, NewCommentNote, NewCommentThread, Replied,
    ThreadWithNotes,
};
pub use fence::{Fence, FenceScope};
pub use graphs::{
    GraphChange, GraphCounters, GraphRefusal, GraphState, GraphStore, GraphVersion,
    ImplementationRun, Reported, RunEnd, RunReport,
};
pub use jobs::{
    Drafted, Enqueued, Job, JobState, JobStore, NewJob, Settlement, TitleSidecar, TitleStore,
};
pub use machines::{
    ConnectorPoll, Machine, MachineChoice, MachineStore, NewMachine, PlannerCredential,
    PLANNER_CREDENTIALS_KEPT,
};
pub use memory::MemoryStore;
pub use postgres::PgStore;
pub use requests::{KeptRequest, RequestClaim, RequestKey, RequestStore};
pub use sqlite::SqliteStore;

/// Wall-clock time in milliseconds since the Unix epoch, as read from a `Clock`.
pub type UnixMillis = i64;

/// Where documents and records are kept.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// `DATABASE_URL=postgres://…` (or `postgresql://…`).
    Postgres(String),
    /// `DATABASE_URL=sqlite:…`, or the embedded default file.
    Sqlite(std::path::PathBuf),
}

impl std::fmt::Debug for Database {
    // A PostgreSQL URL may carry a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Postgres(_) => f.write_str("Postgres(<redacted url>)"),
            Database::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
        }
    }
}

impl Database {
    /// Where this database is, for a log line: the file, or the PostgreSQL host without
    /// credentials.
    pub fn describe(&self) -> String {
        match self {
            Database::Sqlite(p) => format!("SQLite at {}", p.display()),
            Database::Postgres(url) => {
                let rest = url.split_once("://").map(|(_, r)| r).unwrap_or("");
                let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
                let host = host.split(['/', '?']).next().unwrap_or("");
                format!("PostgreSQL at {host}")
            }
        }
    }
}

/// Opens the configured database: the SQLite file (created with its parent directories if
/// missing) or the PostgreSQL server, and applies this build's migrations to it.
pub async fn open(database: &Database) -> StoreResult<std::sync::Arc<dyn Store>> {
    Ok(match database {
        Database::Sqlite(path) => std::sync::Arc::new(SqliteStore::open(path).await?),
        Database::Postgres(url) => std::sync::Arc::new(PgStore::connect(url).await?),
    })
}

/// The id of the account of a GitHub user. Derived, not drawn: the store reads no randomness, so
/// the simulator stays deterministic and every backend names an account alike. A version-8 UUID
/// `6368706e-HHHH-8000-8000-LLLLLLLLLLLL` whose `HHHH` and `L…` spell the GitHub user id in hex.
pub fn account_id_for_github_user(github_user_id: i64) -> Uuid {
    let id = github_user_id.to_be_bytes();
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(b"chpn");
    b[4..6].copy_from_slice(&id[0..2]);
    b[10..16].copy_from_slice(&id[2..8]);
    uuid::Builder::from_custom_bytes(b).into_uuid()
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("conflict: {0}")]
    Conflict(String),
    /// The backend failed (I/O, connection, constraint we did not expect). Never carries secrets.
    #[error("storage backend error: {0}")]
    Backend(String),
    /// A write through a fenced handle ([`Store::fenced`]) whose writer epoch is no longer
    /// current: another process took the writer lease, it was given back, or this process gave
    /// it up. Nothing changed. The words say which, for a log.
    #[error("fenced: {0}")]
    Fenced(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// An acknowledged write already in line ([`TranscriptStore::queue_transcript`]): resolves with
/// its outcome once it is durable, or once it has failed.
pub type Pending<T> = std::pin::Pin<Box<dyn std::future::Future<Output = StoreResult<T>> + Send>>;

/// A GitHub account known to this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub id: Uuid,
    pub github_user_id: i64,
    pub login: String,
    pub created_at_ms: UnixMillis,
}

/// A browser login (cookie session) of an account. The cookie verifier is stored only as a hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowserLogin {
    pub id: Uuid,
    pub account_id: Uuid,
    pub verifier_hash: String,
    pub created_at_ms: UnixMillis,
    pub expires_at_ms: UnixMillis,
    pub signed_out_at_ms: Option<UnixMillis>,
}

impl BrowserLogin {
    /// Live: not signed out and not past its expiry at `now_ms`.
    pub fn is_live(&self, now_ms: UnixMillis) -> bool {
        self.signed_out_at_ms.is_none() && now_ms < self.expires_at_ms
    }
}

/// The account that created a document, as it was when it did: a snapshot (no foreign key), like
/// a Planner holder's, so the refusal words can name it without another read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creator {
    pub account_id: Uuid,
    /// GitHub login at creation.
    pub login: String,
}

/// A document to create. `Default` is for tests and fixtures that name only what they need
/// (`..NewDocument::default()`); the server sets every field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewDocument {
    pub id: Uuid,
    pub repo_owner: String,
    pub repo_name: String,
    pub slug: String,
    pub title: String,
    pub created_at_ms: UnixMillis,
    /// The top-level document this one is a child of, or `None` for a top-level document. The
    /// rules a parent must meet are [`DocumentStore::create_document`]'s.
    pub parent_id: Option<Uuid>,
    /// The account that created it; `None` where nobody is known (fixtures, imports).
    pub creator: Option<Creator>,
    /// The creation brief (MCP `create_document`'s `brief`), kept as given; read back with
    /// [`DocumentStore::document_brief`], never with the document record. The store sets no
    /// bound on it: the server does.
    pub brief: Option<String>,
    /// The creating agent's repository context (MCP `create_document`'s `baseBranch` and
    /// `baseCommit`), kept as given; read back with [`DocumentStore::document_provenance`].
    /// The store checks no shape: the server does.
    pub provenance: Option<Provenance>,
    /// Created through MCP (`create_document`): the creation metadata `read_implementation`
    /// requires (LIFE-76). Read back with [`DocumentStore::created_through_mcp`].
    #[serde(default)]
    pub mcp_created: bool,
}

/// A document's creation provenance: the branch and commit of the checkout the creating agent
/// worked in, as it said. Never resolved against GitHub; set at creation, never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// A git branch name, e.g. `main` or `feature/quay`.
    pub base_branch: String,
    /// A full git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
    pub base_commit: String,
}

/// A document with its repository identity and counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    pub id: Uuid,
    pub repo_owner: String,
    pub repo_name: String,
    pub slug: String,
    pub title: String,
    /// Advances once per accepted batch or server-authored mutation. Starts at 0.
    pub plan_revision: i64,
    /// Advances with every durable write of the document's state. Starts at 0.
    pub storage_revision: i64,
    /// Changes only when the document's content is replaced wholesale
    /// ([`ContentStore::reset_content`]), so updates made for one Yjs history are never applied to
    /// another. Starts at 0.
    pub yjs_epoch: i64,
    pub archived: bool,
    pub created_at_ms: UnixMillis,
    /// The top-level document of the same repository this one is a child of; `None` for a
    /// top-level document. Set at creation and never changed (renames and archiving keep it).
    /// A child's slug is unique in its repository like any other, and its canonical URL nests
    /// under its parent's (`/documents/<owner>/<repo>/<parent slug>/children/<slug>`), which the
    /// server computes, not the store.
    pub parent_id: Option<Uuid>,
    /// The account that created it, fixed at creation; `None` where nobody was known.
    pub creator: Option<Creator>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RevisionKind {
    Plan,
    Storage,
}

/// Outcome of a revision advance guarded by the revision the caller read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Advance {
    /// The revision moved from the expected value to this one (expected + 1).
    Advanced(i64),
    /// The caller read an older (or otherwise different) revision; nothing changed.
    Stale { current: i64 },
}

/// Outcome of [`ContentStore::commit_plan_edit`], guarded by the plan revision the caller read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanCommit {
    /// The update was journalled at `seq` and the plan revision moved to `plan_revision`
    /// (expected + 1); the storage revision advanced by one too.
    Committed { plan_revision: i64, seq: i64 },
    /// The plan revision is no longer the one expected; nothing changed.
    Stale { current: i64 },
    /// The commit was made under an [`OwnerGuard`] that storage no longer matches (the Planner
    /// was released, or claimed anew); nothing changed.
    NotOwner,
}

/// The Planner ownership a write is made under (a Planner turn's): the write lands only while
/// storage names `account_id` as the holder of `document_id`'s Planner at `generation`, checked
/// in the same atomic step as the write. For a child document's edit, `document_id` is its
/// root's: a child's Planner ownership is its root's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerGuard {
    pub document_id: Uuid,
    pub generation: i64,
    pub account_id: Uuid,
}

/// A complete encoded Yjs state (v1) covering every journalled update up to `upto_seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub upto_seq: i64,
    pub state: Vec<u8>,
    /// The document's Yjs epoch when the checkpoint was written.
    pub yjs_epoch: i64,
}

/// What a room needs to rebuild a document: its latest checkpoint (if any) and the journalled
/// updates after it, read together from one consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentContent {
    pub checkpoint: Option<Checkpoint>,
    /// `(seq, Yjs v1 update)` for every update after the checkpoint, in seq order.
    pub updates: Vec<(i64, Vec<u8>)>,
    /// The document's current Yjs epoch.
    pub yjs_epoch: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTranscriptEntry {
    /// GitHub handle of the person, or `None` for the Planner or the system.
    pub author_login: Option<String>,
    /// `member`, `planner` or `system`.
    pub kind: String,
    pub body: String,
    pub created_at_ms: UnixMillis,
    /// What makes this append one: an append whose key the document already holds appends
    /// nothing and answers the entry that key made (so a write run again after a commit whose
    /// outcome was unknown cannot add the line twice). `None`: always appended.
    pub key: Option<String>,
    /// The message's typed references (a command it runs, CMD-16), as the server's own JSON,
    /// opaque here; `None`: it has none.
    pub refs: Option<String>,
    /// Files this message sends (FILE-09): each must be its author's own, in this document and
    /// not sent yet; the append marks them sent with the entry, or appends nothing
    /// (`Conflict`) when one is not.
    pub attachments: Vec<Uuid>,
}

/// Text as every backend stores it: U+0000, which PostgreSQL's `text` cannot hold, becomes
/// U+FFFD (the replacement character) everywhere alike; nothing else changes.
pub fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// [`storable`] of an owned string, without copying it when nothing changes.
fn stored(text: &str) -> String {
    storable(text).into_owned()
}

impl NewTranscriptEntry {
    /// The entry as every backend stores it ([`storable`]).
    pub fn storable(&self) -> NewTranscriptEntry {
        NewTranscriptEntry {
            author_login: self.author_login.as_deref().map(stored),
            kind: stored(&self.kind),
            body: stored(&self.body),
            created_at_ms: self.created_at_ms,
            key: self.key.clone(),
            refs: self.refs.as_deref().map(stored),
            attachments: self.attachments.clone(),
        }
    }

    /// The entry as saved in `document_id`'s Chat at `seq`.
    pub(crate) fn saved(&self, document_id: Uuid, seq: i64) -> TranscriptEntry {
        TranscriptEntry {
            document_id,
            seq,
            author_login: self.author_login.clone(),
            kind: self.kind.clone(),
            body: self.body.clone(),
            created_at_ms: self.created_at_ms,
            refs: self.refs.clone(),
        }
    }
}

impl NewDocument {
    /// The document as every backend stores it ([`storable`]).
    pub fn storable(&self) -> NewDocument {
        NewDocument {
            title: stored(&self.title),
            slug: stored(&self.slug),
            brief: self.brief.as_deref().map(stored),
            ..self.clone()
        }
    }
}

impl RunRecord {
    /// The run as every backend stores it ([`storable`]).
    pub fn storable(&self) -> RunRecord {
        RunRecord {
            run_id: stored(&self.run_id),
            session_id: stored(&self.session_id),
            name: stored(&self.name),
            status: stored(&self.status),
            root_run_id: self.root_run_id.as_deref().map(stored),
            ..self.clone()
        }
    }
}

impl StageRecord {
    /// The stage as every backend stores it ([`storable`]).
    pub fn storable(&self) -> StageRecord {
        StageRecord {
            stage_id: stored(&self.stage_id),
            name: stored(&self.name),
            status: stored(&self.status),
            parent_stage_id: self.parent_stage_id.as_deref().map(stored),
            ..self.clone()
        }
    }
}

/// One Chat transcript entry. `seq` starts at 1 and grows by one per document, in append order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    pub document_id: Uuid,
    pub seq: i64,
    pub author_login: Option<String>,
    pub kind: String,
    pub body: String,
    pub created_at_ms: UnixMillis,
    /// As [`NewTranscriptEntry::refs`].
    pub refs: Option<String>,
}

/// Who holds a document's Planner: an account, through one of its live browser logins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub account_id: Uuid,
    pub login: String,
    pub browser_login_id: Uuid,
}

/// A document's Planner ownership. `generation` never decreases; each claim by an account that
/// did not already hold the document advances it by one (a document never claimed is at 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    pub document_id: Uuid,
    pub generation: i64,
    pub holder: Option<Holder>,
    pub claimed_at_ms: Option<UnixMillis>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Claim {
    /// The caller now holds the document at this ownership. If its account already held it, the
    /// generation is unchanged (a reattach); otherwise it advanced by one.
    Claimed(Ownership),
    /// Another account holds it; nothing changed.
    HeldByOther(Ownership),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Release {
    Released,
    /// The generation given is not the current one, or nobody holds the document: nothing changed.
    Refused {
        current_generation: i64,
    },
}

/// A lease as stored: the database-wide writer lease (one active server process per database,
/// [`LeaseStore`]), or one document's lease (the process serving that document,
/// [`DocumentLeaseStore`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterLease {
    pub holder: String,
    /// Grows with every acquisition, so a fenced-out holder can be told apart.
    pub epoch: i64,
    pub expires_at_ms: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseAcquire {
    Acquired(WriterLease),
    /// Another holder's lease has not expired yet.
    HeldElsewhere(WriterLease),
}

/// The storage interface: every aggregate's trait, plus what concerns the database as a whole.
/// Every method of every part is atomic on its own. A service takes the narrowest part it uses
/// (an `Arc<dyn TranscriptStore>`, say); an `Arc<dyn Store>` coerces to any of them.
#[async_trait]
pub trait Store:
    SignInStore
    + DocumentStore
    + ContentStore
    + TranscriptStore
    + OwnershipStore
    + LeaseStore
    + DocumentLeaseStore
    + RunStore
    + HoldStore
    + ModelChoiceStore
    + AttachmentStore
    + JobStore
    + TitleStore
    + GraphStore
    + MachineStore
    + BuildStore
    + CommentStore
    + RequestStore
{
    /// Name of the backend: `memory`, `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    /// Cheap round trip proving the store answers (readiness).
    async fn ping(&self) -> StoreResult<()>;

    /// A handle on the same database (sharing this one's connections or memory) whose every
    /// write is fenced by `fence`: refused with [`StoreError::Fenced`], changing nothing, unless
    /// this process has not given the fence up and, checked atomically with the write, the
    /// fence's lease (the writer lease, or one document's: [`FenceScope`]) still names the
    /// fence's epoch and a holder. Reads and the lease methods are
    /// not fenced. See [`fence`] for why the epoch, and not the expiry, is what is checked.
    fn fenced(&self, fence: Fence) -> std::sync::Arc<dyn Store>;
}

/// Accounts, browser logins (cookie sessions) and their sealed GitHub credentials.
#[async_trait]
pub trait SignInStore: Send + Sync + 'static {
    /// Insert the account for `github_user_id`, or update its login; returns the stored record.
    /// An account already stored with this login is returned without any write (so a fenced
    /// handle answers it even when its writes would be refused).
    async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account>;
    async fn account(&self, id: Uuid) -> StoreResult<Option<Account>>;
    /// The account whose login equals `login` ignoring ASCII case (as GitHub compares logins). If
    /// two accounts carry it (a rename not yet seen), the one created last.
    async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>>;
    /// Stores a new login. `NotFound("account")` if its account is unknown; a reused id is
    /// `Conflict`.
    async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()>;
    async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>>;
    /// The account's logins live at `now_ms` ([`BrowserLogin::is_live`]), newest first (by
    /// creation, then id), at most `limit` of them.
    async fn live_browser_logins(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<BrowserLogin>>;
    /// Marks the login signed out at `now_ms`; true if it was live-or-expired and not signed out.
    async fn sign_out_browser_login(&self, id: Uuid, now_ms: UnixMillis) -> StoreResult<bool>;

    /// Stores `sealed` as the login's credential if its credential revision still equals
    /// `expected_revision` (0 for a login never given one), advancing it by one. Returns the new
    /// revision (`expected_revision + 1`), or `None` if the revision is stale or the login is
    /// signed out (nothing changed). `NotFound("browser login")` for an unknown login.
    /// Revisions only grow, including across [`SignInStore::delete_login_credential`], so a refresh
    /// racing a deletion can never recreate the credential.
    async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>>;
    /// The login's current credential revision and sealed bytes; `None` for an unknown login or
    /// one without a credential (never given one, or deleted).
    async fn login_credential(&self, login_id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>>;
    /// Deletes the login's sealed credential (sign-out, a rejected refresh) and advances its
    /// revision, so any write made against the old revision is refused. True if there was a
    /// credential to delete; false for an unknown login or one without a credential.
    async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool>;
    /// Deletes every login that is signed out or expired at `now_ms` (dead by
    /// [`BrowserLogin::is_live`]), together with its credential (startup cleanup, after the
    /// writer lease is held). Live logins and their credentials are kept. Returns how many
    /// logins were deleted.
    async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64>;
}

/// Documents: identity, slugs and their aliases, parentage, archiving, revision counters.
#[async_trait]
pub trait DocumentStore: Send + Sync + 'static {
    /// Creates a document (and its ownership record at generation 0). A slug already used in the
    /// same repository, by another document or as another document's former slug (alias), is
    /// `Conflict`; so is a child's slug (slugs stay unique per repository, children included).
    /// With `parent_id`, the parent must exist, be in the same repository (owner and name
    /// compared without ASCII case), not be archived, and not be a child itself (one level):
    /// otherwise `Conflict` whose words name the rule broken ("parent document … is archived"),
    /// checked in that order and atomically with the insert (a parent archived concurrently
    /// either refuses the child or is archived after the child was created).
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document>;
    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>>;
    /// The creation brief of a document (`None` when it was created without one), kept apart
    /// from [`Document`] so listing and opening documents never carry it.
    /// `NotFound("document")` for an unknown document.
    async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>>;
    /// The creation provenance of a document (`None` when it was created without one), read on
    /// its own like the brief. `NotFound("document")` for an unknown document.
    async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>>;
    /// Whether the document was created through MCP, read on its own like the brief.
    /// `NotFound("document")` for an unknown document.
    async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool>;
    /// The children of `parent_id`, in creation order (`created_at_ms`, ties by id), archived
    /// ones included (the caller filters). Empty for a document without children, including a
    /// child. `NotFound("document")` for an unknown parent.
    async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>>;
    /// The documents of a repository (owner and name compared without ASCII case), children
    /// and archived ones included (the caller filters), in creation order (`created_at_ms`,
    /// ties by id): at most `limit` of them, the oldest first.
    async fn repository_documents(
        &self,
        repo_owner: &str,
        repo_name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Document>>;
    /// The document whose slug, or one of whose former slugs (aliases), is `slug` in that
    /// repository; the document returned carries its current slug. Owner and repository name are
    /// compared without regard to ASCII case, the slug exactly.
    async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>>;
    /// Archives or restores. Changes no revision counter, and only this document: a parent's
    /// children keep their own flag (the caller decides). `NotFound("document")` if there is no
    /// such document.
    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()>;
    /// Gives the document a new slug and title, chosen by a person: its title record is marked
    /// chosen in the same write, so no title draft replaces it (OWN-14). The old slug becomes an alias of the document
    /// (see [`DocumentStore::earlier_slugs`]); renaming back to a former slug removes that alias. A slug
    /// used in the repository by another document, canonical or alias, is `Conflict` (nothing
    /// changes). The same slug with a new title only retitles. Changes no revision counter and
    /// keeps parentage. `NotFound("document")` for an unknown document.
    async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document>;
    /// The document's former slugs (its aliases), in the order they were left, oldest first.
    /// `NotFound("document")` for an unknown document.
    async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>>;
    /// Advances a revision by one if it still equals `expected`. `NotFound("document")` if there
    /// is no such document.
    async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance>;
}

/// A document's durable content: the journal of Yjs updates, checkpoints, the Yjs epoch.
#[async_trait]
pub trait ContentStore: Send + Sync + 'static {
    /// Journals one accepted update at the document's next seq (the first is 1; concurrent
    /// appends get distinct, gap-free seqs, which keep growing across checkpoints and resets) and
    /// advances the storage revision by one, atomically. Returns the seq.
    /// `NotFound("document")` for an unknown document.
    async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<i64>;
    /// Journals `updates` of one document at consecutive seqs, in order, and advances the
    /// storage revision by as many, atomically: all of them or none. Returns their seqs (none
    /// for no updates, without a write). `NotFound("document")` for an unknown document.
    async fn append_updates(
        &self,
        document_id: Uuid,
        updates: &[&[u8]],
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<i64>>;
    /// Only if the plan revision still equals `expected_plan_revision` — and, with an `owner`
    /// guard, only while storage still names that owner at that generation — journals the
    /// update (as [`ContentStore::append_update`]) and advances the plan and storage revisions
    /// by one, atomically. Otherwise `NotOwner` (checked first) or `Stale`, and nothing changes.
    /// A release or claim of the guarding ownership is ordered before or after the commit as a
    /// whole, never between its check and its write. Concurrent commits at one expected
    /// revision: exactly one commits. `NotFound("document")` for an unknown document.
    async fn commit_plan_edit(
        &self,
        document_id: Uuid,
        expected_plan_revision: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<PlanCommit>;
    /// The latest checkpoint, the updates after it in seq order, and the Yjs epoch, from one
    /// consistent snapshot. `NotFound("document")` for an unknown document.
    async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent>;
    /// Stores `state`, a complete Yjs state covering every update up to `upto_seq`, as the
    /// document's checkpoint (at its current Yjs epoch) and deletes the journalled updates
    /// `<= upto_seq`, atomically. A checkpoint that covers no more than the current one (a late
    /// or repeated write) is ignored: checkpoints never go backwards. Changes no revision counter
    /// (the content is the same). `upto_seq` below 0 or beyond the last journalled seq is
    /// `Conflict`; an unknown document is `NotFound("document")`.
    async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()>;
    /// Replaces the document's content wholesale: advances the Yjs epoch by one, makes `state`
    /// the checkpoint (covering every seq so far, at the new epoch), empties the journal and
    /// advances the storage revision by one, atomically. Returns the new epoch.
    /// `NotFound("document")` for an unknown document.
    async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64>;
}

/// Each document's Chat transcript.
#[async_trait]
pub trait TranscriptStore: Send + Sync + 'static {
    /// Appends at the next `seq` of the document (concurrent appends get distinct, gap-free
    /// seqs). `NotFound("document")` if there is no such document.
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry>;
    /// [`TranscriptStore::append_transcript`] in two steps: returns once the append is in line,
    /// with its outcome to come once it is durable. Appends put in line one after another are
    /// saved in that order, each at the next `seq`, so a caller that orders a document's appends
    /// may let the next one in line before the last is durable, and both share a commit. `Err`
    /// here: not put in line at all. The default appends at once.
    async fn queue_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<Pending<TranscriptEntry>> {
        let saved = self.append_transcript(document_id, entry).await;
        Ok(Box::pin(std::future::ready(saved)))
    }
    /// The `seq` of the newest entry; 0 for an empty transcript or an unknown document.
    async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64>;
    /// Entries with `seq > after_seq`, in order, at most `limit`. Empty for an unknown document.
    async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>>;
    /// The entry the append with `key` made ([`NewTranscriptEntry::key`]), if the document
    /// holds that key. `None` for an unknown document.
    async fn transcript_by_key(
        &self,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>>;
}

/// Each document's generation-guarded Planner ownership.
#[async_trait]
pub trait OwnershipStore: Send + Sync + 'static {
    /// `NotFound("document")` for an unknown document (as for every ownership method).
    async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership>;
    /// Generation-guarded claim. Concurrent claimers of a free document: exactly one wins.
    async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim>;
    /// Clears the holder only if `generation` is the current one (an old timer never releases a
    /// newer owner). The generation is kept.
    async fn release_ownership(&self, document_id: Uuid, generation: i64) -> StoreResult<Release>;
    /// Clears every holder in `reach` (startup, or a document's takeover by another process).
    /// Returns how many were cleared.
    async fn clear_all_ownership(&self, reach: Reach) -> StoreResult<u64>;
    /// Clears every holder in `reach` (startup, or a document's takeover) except the holder of a
    /// document whose link hold ([`HoldStore`]) names that holder's own browser login, where
    /// that login still has a stored credential (a deploy hand-over keeps those owners; AO-20,
    /// OWN-34). Generations are kept. Returns how many were cleared.
    async fn clear_unheld_ownership(&self, reach: Reach) -> StoreResult<u64>;
}

/// Which documents a sweep of what an earlier process left reaches: all of them (a process that
/// serves the whole database, at startup), or one (a process that has just taken that document's
/// lease over, when several serve one database).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Every,
    Document(Uuid),
}

impl Reach {
    /// The one document reached, if it is one.
    pub fn document(self) -> Option<Uuid> {
        match self {
            Reach::Every => None,
            Reach::Document(id) => Some(id),
        }
    }

    /// Whether `document_id` is reached.
    pub fn covers(self, document_id: Uuid) -> bool {
        self.document().is_none_or(|id| id == document_id)
    }
}

/// The database-wide writer lease.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Takes the lease if it is free, expired at `now_ms`, or already `holder`'s (then renewed).
    /// Every acquisition but the renewal of `holder`'s unexpired lease advances the epoch, which
    /// refuses every later write fenced under the previous one; it is ordered after the fenced
    /// writes in flight (see [`fence`]).
    async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire>;
    /// Extends a lease still held under the same holder and epoch; `None` if it was lost. Changes
    /// only the expiry, which fenced writes do not check.
    async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>>;
    /// Gives the lease up if still held under that holder and epoch. The epoch stays, but with no
    /// holder it admits no fenced write any more.
    async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()>;
}

/// Each document's lease, for running several server processes on one PostgreSQL: the process
/// holding a document's lease serves it, and writes its state through a handle fenced by
/// [`Fence::for_document`]. The rules are the writer lease's, per document: a lease row is made
/// by the first acquisition (at epoch 1), and every acquisition but the renewal of the holder's
/// unexpired lease advances the document's epoch, ordered after that document's fenced writes in
/// flight (see [`fence`]). Documents need not exist to be leased (a lease may come first).
#[async_trait]
pub trait DocumentLeaseStore: Send + Sync + 'static {
    /// Takes `document_id`'s lease if it is free, expired at `now_ms`, or already `holder`'s
    /// (then renewed).
    async fn acquire_document_lease(
        &self,
        document_id: Uuid,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire>;
    /// Extends each lease of `leases` (a document and the lease its process holds) still held
    /// under the same holder and epoch, to `now_ms + ttl_ms`, in one statement for up to
    /// [`LEASES_RENEWED_AT_ONCE`] of them. Returns the leases renewed, in no order; one left
    /// out was lost.
    async fn renew_document_leases(
        &self,
        leases: &[(Uuid, WriterLease)],
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Vec<(Uuid, WriterLease)>>;
    /// Gives the lease up if still held under that holder and epoch (a graceful hand-over: the
    /// next process need not wait for the expiry). The epoch stays.
    async fn release_document_lease(
        &self,
        document_id: Uuid,
        lease: &WriterLease,
    ) -> StoreResult<()>;
    /// The document's lease row as stored, held or not (`holder` empty when given back); `None`
    /// if it was never leased. Who serves a document, for routing a request to it.
    async fn document_lease(&self, document_id: Uuid) -> StoreResult<Option<DocumentLeaseRow>>;
}

/// How many leases [`DocumentLeaseStore::renew_document_leases`] renews with one statement.
pub const LEASES_RENEWED_AT_ONCE: usize = 250;

/// A document's lease row as [`DocumentLeaseStore::document_lease`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentLeaseRow {
    pub holder: Option<String>,
    pub epoch: i64,
    pub expires_at_ms: UnixMillis,
}

/// A workflow run a Planner client reported, as its card shows it. Statuses are the agent
/// connection's words (`running`, `waiting`, `paused` are live; `completed`, `blocked`, `failed`,
/// `stopped` have ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub document_id: Uuid,
    pub run_id: String,
    /// The session that reported it.
    pub session_id: String,
    pub name: String,
    pub status: String,
    pub root_run_id: Option<String>,
    pub elapsed_ms: Option<i64>,
    /// Earlier stages the client left out of its reports (never stored).
    pub omitted_stages: i64,
    pub reported_at_ms: UnixMillis,
}

/// The statuses of a run that has not ended.
pub const LIVE_RUN_STATUSES: [&str; 3] = ["running", "waiting", "paused"];

impl RunRecord {
    /// Whether the run has not ended.
    pub fn is_live(&self) -> bool {
        LIVE_RUN_STATUSES.contains(&self.status.as_str())
    }
}

/// One stage of a run, in the order it was first reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage_id: String,
    pub name: String,
    pub status: String,
    pub parent_stage_id: Option<String>,
    pub duration_ms: Option<i64>,
}

/// A page of a run's stored stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePage {
    pub stages: Vec<StageRecord>,
    /// How many stages are stored for the run.
    pub total: i64,
}

/// Workflow runs and their stages (`workflow_runs`, `workflow_run_stages`), kept with the
/// document so a reload or a restart shows them.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Saves a report of one run: its card replaces the stored one; `stages` are merged by
    /// `stage_id` (a stage already stored changes in place, a new one goes after the others)
    /// or, with `replace`, take the place of every stored stage. No count limit.
    async fn save_run(
        &self,
        run: &RunRecord,
        stages: &[StageRecord],
        replace: bool,
    ) -> StoreResult<()>;
    /// The document's runs, in the order they were first reported.
    async fn runs(&self, document_id: Uuid) -> StoreResult<Vec<RunRecord>>;
    /// Stages `offset..offset + limit` of a run in reported order; `None` if there is no such run.
    async fn run_stages(
        &self,
        document_id: Uuid,
        run_id: &str,
        offset: i64,
        limit: i64,
    ) -> StoreResult<Option<StagePage>>;
    /// Deletes the document's ended runs and their stages (a new workflow starts). The count.
    async fn delete_ended_runs(&self, document_id: Uuid) -> StoreResult<u64>;
    /// Marks `stopped` every live run (`running`, `waiting`, `paused`) of every document in
    /// `reach` whose Planner ownership names no holder (at startup, or a document's takeover,
    /// after the ownership reset: nothing runs them now, SES-13). A document whose owner the
    /// reset kept for its hold keeps its runs as they were (HO-08). The count.
    async fn stop_unheld_runs(&self, reach: Reach) -> StoreResult<u64>;
}

/// What a Planner link's client held when the link was cut by a graceful stop or dropped with
/// work kept (`planner_link_holds`, one row per document): who held the Planner and at which
/// generation, what the client held (`held`: the server's own encoding of its sessions,
/// questions, owed answers and unheard Stops, opaque here), when it was written, and the
/// hand-over window a cut gave it (`handover_until_ms`, `None` once a process rebuilt the hold
/// or for a link that dropped on its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkHold {
    pub document_id: Uuid,
    pub account_id: Uuid,
    pub login: String,
    /// The browser login the Planner was claimed with (`None`: a holder no browser holds).
    pub browser_login_id: Option<Uuid>,
    /// For a paired machine's hold, the machine (and no browser login): a restart keeps the
    /// hold for the machine's backend, not the owner (AO-21).
    pub machine_id: Option<Uuid>,
    pub generation: i64,
    pub held: String,
    pub written_at_ms: UnixMillis,
    pub handover_until_ms: Option<UnixMillis>,
}

/// The Planner link holds (`planner_link_holds`): what a cut or dropped link's client held, kept
/// across a restart so the next process can rebuild it.
#[async_trait]
pub trait HoldStore: Send + Sync + 'static {
    /// Writes `hold` as its document's hold, replacing any earlier one.
    /// `NotFound("document")` for an unknown document.
    async fn put_link_hold(&self, hold: &LinkHold) -> StoreResult<()>;
    /// Every stored hold, by document id.
    async fn link_holds(&self) -> StoreResult<Vec<LinkHold>>;
    /// Rewrites the document's hold without its hand-over window if it still is the hold
    /// written at `written_at_ms` (HO-05). True if it changed a row.
    async fn end_handover(&self, document_id: Uuid, written_at_ms: UnixMillis)
        -> StoreResult<bool>;
    /// Deletes the document's hold if it still is the one written at `written_at_ms` (a hold
    /// taken back, or ended). True if there was one.
    async fn delete_link_hold(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool>;
}

/// A document's Planner model choice (`planner_model_choices`, one row per root document, MOD-02):
/// the model id and reasoning level exactly as the catalog wrote them when chosen (MOD-15), who
/// chose and when. No row: nobody chose, the harness runs its own default (MOD-03).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelChoice {
    pub document_id: Uuid,
    /// The model id, the entry marked default included (MOD-04).
    pub model: String,
    /// The reasoning level; `None`: the model's own (MOD-05).
    pub thinking_level: Option<String>,
    /// The GitHub login of the writer who chose.
    pub chosen_by: String,
    pub chosen_at_ms: UnixMillis,
}

/// A document's automatic participation, paused (`planner_participation_pauses`, CTX-02,
/// RULINGS CTX-03): one row per document while paused, shared by everyone in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParticipationPause {
    pub document_id: Uuid,
    /// The GitHub login of the writer who paused it.
    pub paused_by: String,
    pub paused_at_ms: UnixMillis,
}

/// The documents' Planner settings: model choices (`planner_model_choices`) and the pause of
/// automatic participation (`planner_participation_pauses`).
#[async_trait]
pub trait ModelChoiceStore: Send + Sync + 'static {
    /// Stores `choice` as its document's, replacing any earlier one. `NotFound("document")` for
    /// an unknown document.
    async fn put_model_choice(&self, choice: &ModelChoice) -> StoreResult<()>;
    /// Deletes the document's choice: its Planner runs the default again (MOD-19). True if there
    /// was one.
    async fn clear_model_choice(&self, document_id: Uuid) -> StoreResult<bool>;
    /// The document's choice, if somebody made one.
    async fn model_choice(&self, document_id: Uuid) -> StoreResult<Option<ModelChoice>>;
    /// Pauses the document's automatic participation, replacing an earlier pause.
    /// `NotFound("document")` for an unknown document.
    async fn pause_participation(&self, pause: &ParticipationPause) -> StoreResult<()>;
    /// Lets automatic participation run again. True if it was paused.
    async fn resume_participation(&self, document_id: Uuid) -> StoreResult<bool>;
    /// The document's pause, if it is paused.
    async fn participation_pause(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<ParticipationPause>>;
}

/// A file uploaded to a document's Chat (`chat_attachments`, FILE-01): its uploader's alone until
/// a message is sent with it (FILE-09), then part of that message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub id: Uuid,
    pub document_id: Uuid,
    /// The GitHub login of the person who uploaded it.
    pub uploader: String,
    /// The name it was uploaded with.
    pub name: String,
    /// `image` or `text`, decided from the bytes (FILE-14).
    pub kind: String,
    /// The type its bytes have (FILE-16): a raster image's own, `text/plain` for text.
    pub mime_type: String,
    /// Its length in bytes.
    pub size: i64,
    pub created_at_ms: UnixMillis,
    /// The transcript entry that sent it; `None`: not sent yet.
    pub sent_seq: Option<i64>,
}

/// A file to keep, with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttachment {
    pub attachment: Attachment,
    pub bytes: Vec<u8>,
}

/// How much one person may leave unsent in one document (FILE-12): files made since `since_ms`
/// and not sent count; older ones are forgotten (FILE-11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsentLimit {
    pub max_files: u64,
    pub max_bytes: u64,
    pub since_ms: UnixMillis,
}

/// What [`AttachmentStore::put_attachment`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    Kept,
    /// The uploader already leaves [`UnsentLimit::max_files`] unsent.
    TooMany,
    /// With this file the uploader's unsent bytes would pass [`UnsentLimit::max_bytes`].
    TooMuch,
}

/// What [`AttachmentStore::take_back_attachment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeBack {
    /// Deleted.
    Taken,
    /// Already sent with a message: kept.
    Sent,
    /// No such file of this uploader in this document.
    Missing,
}

/// The documents' Chat files (`chat_attachments`).
#[async_trait]
pub trait AttachmentStore: Send + Sync + 'static {
    /// Keeps `file` unless its uploader's unsent files in its document, counted under the same
    /// write, would pass `limit` with it. `NotFound("document")` for an unknown document.
    async fn put_attachment(&self, file: &NewAttachment, limit: UnsentLimit) -> StoreResult<Kept>;
    /// The document's file `id` and its bytes, sent or not.
    async fn attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
    ) -> StoreResult<Option<(Attachment, Vec<u8>)>>;
    /// Deletes `uploader`'s file `id` of `document_id` if no message has sent it (FILE-09).
    async fn take_back_attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> StoreResult<TakeBack>;
    /// Deletes every file nobody sent that was made before `before_ms` (FILE-11). How many.
    async fn forget_unsent_attachments(&self, before_ms: UnixMillis) -> StoreResult<u64>;
}

// --- helpers shared by the backends ---

/// Whether `f` counts toward the unsent limit of the upload `new`: the same person's file in the
/// same document, not sent, made within the limit's window.
pub(crate) fn counts_unsent(f: &Attachment, new: &Attachment, limit: &UnsentLimit) -> bool {
    f.document_id == new.document_id
        && f.uploader == new.uploader
        && f.sent_seq.is_none()
        && f.created_at_ms >= limit.since_ms
}

/// The refusal of one more unsent file of `size` bytes beside `files` files of `bytes` bytes.
pub(crate) fn unsent_refusal(
    files: u64,
    bytes: u64,
    size: i64,
    limit: &UnsentLimit,
) -> Option<Kept> {
    if files >= limit.max_files {
        Some(Kept::TooMany)
    } else if bytes.saturating_add(size.max(0) as u64) > limit.max_bytes {
        Some(Kept::TooMuch)
    } else {
        None
    }
}

/// Whether a message by `author` may send the files found for its ids (`None`: no such file in
/// the document): each must be the author's and unsent. The `Conflict` says which is not.
pub(crate) fn check_sendable<'a>(
    found: impl Iterator<Item = Option<&'a Attachment>>,
    author: Option<&str>,
) -> StoreResult<()> {
    for f in found {
        match f {
            Some(f) if Some(f.uploader.as_str()) == author && f.sent_seq.is_none() => {}
            Some(f) => {
                return Err(StoreError::Conflict(format!(
                    "file {} is not an unsent upload of this message's author",
                    f.id
                )))
            }
            None => {
                return Err(StoreError::Conflict(
                    "a file of this message is not in its document".into(),
                ))
            }
        }
    }
    Ok(())
}

/// The comparison key of a GitHub owner, repository name or login: GitHub compares them without
/// regard to ASCII case (they are ASCII by GitHub's rules).
pub(crate) fn ascii_key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// The `Conflict` text for a slug already used in the document's repository.
pub(crate) fn slug_conflict(doc: &NewDocument) -> String {
    slug_taken(&doc.repo_owner, &doc.repo_name, &doc.slug)
}

/// The `Conflict` text for `slug` already used (canonical or alias) in `owner/repo`.
pub(crate) fn slug_taken(repo_owner: &str, repo_name: &str, slug: &str) -> String {
    format!("slug {slug:?} is already used in {repo_owner}/{repo_name}")
}

/// Why [`DocumentStore::create_document`] refused a child: the rule its parent broke. Its text is the
/// `Conflict`'s words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParentRefusal {
    /// No document has the parent id.
    Missing { parent_id: Uuid },
    /// The parent is in another repository.
    OtherRepository {
        parent_id: Uuid,
        parent_owner: String,
        parent_repo: String,
    },
    /// The parent is archived.
    Archived { parent_id: Uuid },
    /// The parent is a child itself: a child document has no children.
    ChildOfChild { parent_id: Uuid },
}

impl std::fmt::Display for ParentRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParentRefusal::Missing { parent_id } => {
                write!(f, "parent document {parent_id} does not exist")
            }
            ParentRefusal::OtherRepository {
                parent_id,
                parent_owner,
                parent_repo,
            } => write!(
                f,
                "parent document {parent_id} is in another repository \
                 ({parent_owner}/{parent_repo}): a child must be in its parent's repository"
            ),
            ParentRefusal::Archived { parent_id } => {
                write!(f, "parent document {parent_id} is archived")
            }
            ParentRefusal::ChildOfChild { parent_id } => write!(
                f,
                "parent document {parent_id} is itself a child: a child document cannot have \
                 children"
            ),
        }
    }
}

/// Checks the parent a new document names (`parent`: the stored document with `doc.parent_id`,
/// read in the same atomic step as the insert). `Ok` for a top-level document.
pub(crate) fn check_parent(doc: &NewDocument, parent: Option<&Document>) -> StoreResult<()> {
    let Some(parent_id) = doc.parent_id else {
        return Ok(());
    };
    let refusal = match parent {
        None => ParentRefusal::Missing { parent_id },
        Some(p)
            if ascii_key(&p.repo_owner) != ascii_key(&doc.repo_owner)
                || ascii_key(&p.repo_name) != ascii_key(&doc.repo_name) =>
        {
            ParentRefusal::OtherRepository {
                parent_id,
                parent_owner: p.repo_owner.clone(),
                parent_repo: p.repo_name.clone(),
            }
        }
        Some(p) if p.archived => ParentRefusal::Archived { parent_id },
        Some(p) if p.parent_id.is_some() => ParentRefusal::ChildOfChild { parent_id },
        Some(_) => return Ok(()),
    };
    Err(StoreError::Conflict(refusal.to_string()))
}

/// The `Conflict` text for a checkpoint whose `upto_seq` names no journalled update.
pub(crate) fn checkpoint_out_of_range(upto_seq: i64, last_seq: i64) -> String {
    format!("checkpoint upto_seq {upto_seq} is outside the journal (0..={last_seq})")
}

/// Every part of the [`Store`] interface, for code that calls store methods on a `dyn Store`
/// (a trait's methods need the trait in scope): `use chopin_store::prelude::*;`.
pub mod prelude {
    pub use crate::{
        AttachmentStore, BuildStore, CommentStore, ContentStore, DocumentStore, GraphStore,
        HoldStore, JobStore, LeaseStore, MachineStore, ModelChoiceStore, OwnershipStore,
        RequestStore, SignInStore, Store, TitleStore, TranscriptStore,
    };
}
