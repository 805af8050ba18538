//! The SQL that the SQLite and PostgreSQL backends share: every store method's statements and
//! the order it runs them in, written once over a [`Dialect`], the part of each database that
//! differs.
//!
//! Owns: the text of every statement; which transaction each method runs in and which rows it
//! locks, named by what the lock is for ([`Dialect::FOR_UPDATE`]…); the retries after a guarded
//! statement lost a race; reading rows into records; mapping sqlx errors to [`StoreError`]; and
//! [`sql_store_impls!`], which makes a backend's store type implement every store trait by
//! forwarding to [`SqlStore`].
//! Does not own: connecting, pool settings or migrations (each backend's module), nor what
//! differs between the databases. That is [`Dialect`], implemented next to each backend's
//! connection setup, so the per-database choices are read in one place per database: how a UUID
//! is stored, how a write transaction begins (SQLite's single write lock against PostgreSQL's
//! row locks under READ COMMITTED), what "lock this row" is, and the per-repository slug lock
//! that only PostgreSQL needs. The rules' meaning is [`super::Store`]'s.
//!
//! Why this shape. The two backends were the same statements line for line, apart from the
//! parameter style (`?1` against `$1`), the UUID column type, how a transaction begins and which
//! rows it locks. sqlx's SQLite driver binds `$N` by its number (see the `sqlite` module's
//! tests), so one text serves both; the UUID is a [`Dialect::Id`] type each driver encodes its
//! way; and the locking is a handful of named constants whose SQLite value is empty because
//! `BEGIN IMMEDIATE` already holds the database's only write lock. What remained was plain code
//! generic over `sqlx::Database`: sqlx's bounds are stated once, on [`SqlStore`]'s `impl`, and
//! the compiler checks it as ordinary Rust (rustfmt formats it, errors point at real lines). A
//! `macro_rules!` stamping out each backend's bodies would have been shorter by those bounds but
//! would have hidden a thousand lines inside a macro. The one macro here, [`sql_store_impls!`],
//! is a table of the store traits' signatures: it keeps `SqliteStore` and `PgStore` the distinct
//! public types they were, each with its own trait impls.
//!
//! Writing a statement here: number its parameters `$1`, `$2`… (each may repeat), and write only
//! SQL both databases accept; in particular no PostgreSQL `::` cast, which SQLite would read as
//! part of the parameter's name (`$1::text`). Row locks go through the [`Dialect`] constants.
//!
//! Atomicity. Every write runs in a transaction begun with [`Dialect::BEGIN_WRITE`] that takes
//! its locks before its first read (on a fenced handle the writer-lease lock and check come
//! first of all, so the check holds until commit); a guarded `UPDATE … WHERE` in it that waited
//! on a concurrent writer's row lock in PostgreSQL re-checks its guard against the row that
//! writer committed. A read is one statement, or a read-only transaction begun with
//! [`Dialect::BEGIN_SNAPSHOT`] whose reads all see one snapshot. Taking over and giving back the
//! writer lease run in a transaction holding [`Dialect::LOCK_WRITER_LEASE`]; renewing it (which
//! changes only the expiry, never checked by a write) is one statement.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, OnceLock};

use sqlx::error::ErrorKind;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Transaction, Type,
};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::fence::FenceCheck;
use super::{
    account_id_for_github_user, ascii_key, check_parent, checkpoint_out_of_range, slug_conflict,
    slug_taken, Account, Advance, Attachment, BrowserLogin, Checkpoint, Claim, Creator, Document,
    DocumentContent, DocumentLeaseRow, Fence, FenceScope, Holder, Kept, LeaseAcquire, LinkHold,
    ModelChoice, NewAttachment, NewDocument, NewTranscriptEntry, OwnerGuard, Ownership,
    ParticipationPause, Pending, PlanCommit, Provenance, Reach, Release, RevisionKind, RunRecord,
    StagePage, StageRecord, StoreError, StoreResult, TakeBack, TranscriptEntry, UnixMillis,
    UnsentLimit, WriterLease,
};

pub(crate) mod group;
pub(crate) mod lite;

pub(crate) use group::Job;
use group::{Done, Writer};

/// What differs between the SQL databases, for one sqlx [`Database`]. Implemented by `sqlite.rs`
/// for [`sqlx::Sqlite`] and by `postgres.rs` for [`sqlx::Postgres`], where each value says why.
pub(crate) trait Dialect: Database {
    /// The backend's name, as [`super::Store::backend`] returns it.
    const BACKEND: &'static str;

    /// How a UUID is bound as a parameter and read from a column.
    type Id: SqlValue<Self> + From<Uuid> + Into<Uuid>;

    /// Begins a transaction that reads and then writes: whatever it read must stay true until it
    /// commits, against every other connection, as far as its row locks (below) and the slug
    /// lock reach.
    const BEGIN_WRITE: &'static str;

    /// Begins a read-only transaction whose reads all see one snapshot of the database.
    const BEGIN_SNAPSHOT: &'static str;

    /// Appended to a `SELECT` of one row that a [`Dialect::BEGIN_WRITE`] transaction depends on
    /// until it commits: no other transaction may change, delete or lock the row meanwhile.
    const FOR_UPDATE: &'static str;

    /// As [`Dialect::FOR_UPDATE`], but others may still insert rows that reference this one (a
    /// foreign-key check's lock): for a document row that orders the writers of what hangs off
    /// it (its journal, checkpoint, transcript), as an `UPDATE` of the row would.
    const FOR_NO_KEY_UPDATE: &'static str;

    /// Appended to a `SELECT` of a row that must not change (be archived, say) before commit,
    /// while others may read and share-lock it too.
    const FOR_SHARE: &'static str;

    /// A statement taking a lock, held until commit, on the slugs of one repository (its one
    /// parameter: a text key naming the repository), or `None` if a
    /// [`Dialect::BEGIN_WRITE`] transaction already excludes every other writer. A slug is unique
    /// across `documents.slug` and `document_slug_aliases` together, which no single constraint
    /// enforces: creations and renames in one repository must take turns for each one's check of
    /// the other table to stay true until it commits.
    const LOCK_REPOSITORY_SLUGS: Option<&'static str>;

    /// Begins a fenced write: [`Dialect::BEGIN_WRITE`] and then, where that does not already
    /// exclude every other writer, the writer-lease lock taken in shared mode until commit —
    /// sent together, so the two cost one round trip. A fenced write holds the lock before it
    /// reads the lease row, so that no change of the lease's epoch or holder (which takes it
    /// exclusively) can commit between that check and the write's commit. Renewals take
    /// neither: they change only the expiry, which no write checks.
    const BEGIN_FENCED_WRITE: &'static str;

    /// The same lock in exclusive mode, taken by a transaction that may change the lease's epoch
    /// or holder (taking it over, giving it back): it waits for the fenced writes in flight.
    const LOCK_WRITER_LEASE: Option<&'static str>;

    /// The writer-lease lock in shared mode on its own (what [`Dialect::BEGIN_FENCED_WRITE`]
    /// adds to `BEGIN`), for a batch that checks a writer-lease fence among others; `None` where
    /// `BEGIN_WRITE` already excludes every other writer.
    const LOCK_WRITER_LEASE_SHARED: Option<&'static str>;

    /// One document's lease lock in shared mode (its one parameter: the text key
    /// [`document_lease_key`]), taken by a write fenced by that document's lease right after
    /// [`Dialect::BEGIN_WRITE`] and before it reads the lease row; `None` where `BEGIN_WRITE`
    /// already excludes every other writer.
    const LOCK_DOCUMENT_LEASE_SHARED: Option<&'static str>;

    /// The same lock on many documents at once, as the text before and after a list of
    /// `($1), ($2), …` (each a [`document_lease_key`]); `None` where `BEGIN_WRITE` already
    /// excludes every other writer.
    const LOCK_DOCUMENT_LEASES_SHARED: Option<(&'static str, &'static str)>;

    /// The same lock, exclusive: taken by a change of that document's epoch or holder.
    const LOCK_DOCUMENT_LEASE: Option<&'static str>;

    /// How many rows a statement changed (sqlx has no driver-independent accessor).
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// How many group-commit writer tasks a handle runs, each with its own queue and one batch
    /// in flight at a time, documents spread over them ([`group::lane`]). More than one lets
    /// independent documents' commits overlap, where the database can commit them at once.
    const WRITE_LANES: usize;

    /// Spawns one of `store`'s group-commit writer tasks ([`SqlStore::write_loop`] over `jobs`,
    /// counting in `batches`) on the current tokio runtime. Each backend spawns it where its
    /// database type is concrete, which is where the compiler can see the task is `Send`.
    fn spawn_writer(store: SqlStore<Self>, jobs: mpsc::Receiver<Job>, batches: Arc<AtomicU64>);
}

/// A Rust type that goes both ways through database `DB`: bound as a parameter, read from a
/// column.
pub(crate) trait SqlValue<DB: Database>:
    for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB> + Send + Unpin
{
}

impl<DB: Database, T> SqlValue<DB> for T where
    T: for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB> + Send + Unpin
{
}

/// The store methods over the pools of database `DB`. Cheap to clone (pool handles).
pub(crate) struct SqlStore<DB: Database> {
    /// Where reads run.
    pool: Pool<DB>,
    /// Where writes run: the same pool as `pool` (PostgreSQL), or one of a single connection
    /// (SQLite, whose writers take turns anyway: they queue here instead of in its busy handler).
    writes: Pool<DB>,
    /// The fence this handle's writes are checked against, if it was fenced.
    fence: Option<Fence>,
    /// This handle's group-commit writer (module [`group`]), started by the first write that
    /// needs it; shared by the handle's clones, not by handles fenced anew.
    writer: Arc<OnceLock<Writer>>,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writes: self.writes.clone(),
            fence: self.fence.clone(),
            writer: self.writer.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("pool", &self.pool)
            .field("writes", &self.writes)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl<DB: Database> SqlStore<DB> {
    /// The store reading through `pool` and writing through `writes` (which may be the same
    /// pool), migrated already.
    pub(crate) fn new(pool: Pool<DB>, writes: Pool<DB>) -> Self {
        Self {
            pool,
            writes,
            fence: None,
            writer: Arc::default(),
        }
    }

    /// A handle on the same pools whose writes are fenced by `fence`. It shares this handle's
    /// group-commit writer: each job carries its own fence, checked in the batch's transaction,
    /// so the handles of many documents' leases still share commits.
    pub(crate) fn fenced(&self, fence: Fence) -> Self {
        Self {
            fence: Some(fence),
            writer: self.writer.clone(),
            ..self.detached()
        }
    }

    /// A handle on the same pools and fence with a writer of its own (not started): what a
    /// writer task holds, so that it does not keep its own queue open.
    fn detached(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writes: self.writes.clone(),
            fence: self.fence.clone(),
            writer: Arc::default(),
        }
    }

    /// The pools (reads, writes), for a backend's own tests.
    #[cfg(test)]
    pub(crate) fn pools(&self) -> (&Pool<DB>, &Pool<DB>) {
        (&self.pool, &self.writes)
    }

    /// How many transactions this handle's group-commit writer has committed.
    pub(crate) fn write_batches(&self) -> u64 {
        self.writer.get().map_or(0, Writer::batches)
    }

    /// How many jobs wait for this handle's writer.
    #[cfg(test)]
    pub(crate) fn queued_writes(&self) -> usize {
        self.writer.get().map_or(0, Writer::queued)
    }

    /// How many lanes this handle's writer has (0 before it started).
    #[cfg(test)]
    pub(crate) fn write_lanes(&self) -> usize {
        self.writer.get().map_or(0, Writer::lanes)
    }

    /// Closes every connection of the pools (waits for those in use to be returned).
    pub(crate) async fn close(&self) {
        self.pool.close().await;
        self.writes.close().await;
    }
}

impl<DB: Dialect> SqlStore<DB> {
    pub(crate) fn backend(&self) -> &'static str {
        DB::BACKEND
    }
}

/// Key of the single writer-lease row.
const WRITER_LEASE_NAME: &str = "chopin:writer";

/// The key of `document_id`'s lease lock ([`Dialect::LOCK_DOCUMENT_LEASE`]).
fn document_lease_key(document_id: Uuid) -> String {
    format!("chopin:document-lease:{document_id}")
}

/// A document's lease row, read by a write fenced by it inside its transaction.
const DOCUMENT_LEASE_FOR_WRITE: &str =
    "SELECT epoch, holder FROM document_leases WHERE document_id = $1";

/// How many times a guarded update is re-run when the follow-up read saw the state change in
/// between (a release racing a claim), or a first insert lost a race on a key it does not
/// arbitrate. Each retry means another caller made progress.
const RACE_RETRIES: u32 = 32;

/// Maps a sqlx error to [`StoreError::Backend`] with a short description of what failed while
/// `doing` something. Never carries the connection URL: configuration errors (the only kind that
/// could quote it) are reduced to their kind.
pub(crate) fn sqlx_error(doing: &str, err: sqlx::Error) -> StoreError {
    let what = match &err {
        sqlx::Error::Configuration(_) => "invalid database configuration".to_owned(),
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("database error {code}: {}", db.message()),
            None => format!("database error: {}", db.message()),
        },
        sqlx::Error::Io(io) => format!("i/o error: {io}"),
        sqlx::Error::Tls(_) => "TLS error".to_owned(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a database connection".to_owned(),
        sqlx::Error::PoolClosed => "connection pool closed".to_owned(),
        sqlx::Error::Migrate(m) => format!("migration failed: {m}"),
        other => other.to_string(),
    };
    StoreError::Backend(format!("{doing}: {what}"))
}

/// The database error's kind, if `err` is one (unique or foreign-key violation…).
fn sqlx_error_kind(err: &sqlx::Error) -> Option<ErrorKind> {
    match err {
        sqlx::Error::Database(db) => Some(db.kind()),
        _ => None,
    }
}

/// True if `err` is a unique violation of the documents' primary key (not of the slug): named by
/// its constraint in PostgreSQL, by its column in SQLite's message.
fn is_document_id_conflict(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.constraint() == Some("documents_pkey") || db.message().contains("documents.id")
        }
        _ => false,
    }
}

fn revision_column(kind: RevisionKind) -> &'static str {
    match kind {
        RevisionKind::Plan => "plan_revision",
        RevisionKind::Storage => "storage_revision",
    }
}

// --- rows, generic over how the database stores a UUID (`Dialect::Id`) ---

#[derive(sqlx::FromRow)]
struct AccountRow<Id> {
    id: Id,
    github_user_id: i64,
    login: String,
    created_at_ms: i64,
}

impl<Id: Into<Uuid>> From<AccountRow<Id>> for Account {
    fn from(row: AccountRow<Id>) -> Self {
        Account {
            id: row.id.into(),
            github_user_id: row.github_user_id,
            login: row.login,
            created_at_ms: row.created_at_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
struct BrowserLoginRow<Id> {
    id: Id,
    account_id: Id,
    verifier_hash: String,
    created_at_ms: i64,
    expires_at_ms: i64,
    signed_out_at_ms: Option<i64>,
}

impl<Id: Into<Uuid>> From<BrowserLoginRow<Id>> for BrowserLogin {
    fn from(row: BrowserLoginRow<Id>) -> Self {
        BrowserLogin {
            id: row.id.into(),
            account_id: row.account_id.into(),
            verifier_hash: row.verifier_hash,
            created_at_ms: row.created_at_ms,
            expires_at_ms: row.expires_at_ms,
            signed_out_at_ms: row.signed_out_at_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
struct DocumentRow<Id> {
    id: Id,
    repo_owner: String,
    repo_name: String,
    slug: String,
    title: String,
    plan_revision: i64,
    storage_revision: i64,
    yjs_epoch: i64,
    archived: bool,
    created_at_ms: i64,
    parent_id: Option<Id>,
    creator_account_id: Option<Id>,
    creator_login: Option<String>,
}

impl<Id: Into<Uuid>> From<DocumentRow<Id>> for Document {
    fn from(row: DocumentRow<Id>) -> Self {
        Document {
            id: row.id.into(),
            repo_owner: row.repo_owner,
            repo_name: row.repo_name,
            slug: row.slug,
            title: row.title,
            plan_revision: row.plan_revision,
            storage_revision: row.storage_revision,
            yjs_epoch: row.yjs_epoch,
            archived: row.archived,
            created_at_ms: row.created_at_ms,
            parent_id: row.parent_id.map(Into::into),
            // The migration keeps the two columns both set or both NULL.
            creator: match (row.creator_account_id, row.creator_login) {
                (Some(account_id), Some(login)) => Some(Creator {
                    account_id: account_id.into(),
                    login,
                }),
                _ => None,
            },
        }
    }
}

#[derive(sqlx::FromRow)]
struct TranscriptRow<Id> {
    document_id: Id,
    seq: i64,
    author_login: Option<String>,
    kind: String,
    body: String,
    created_at_ms: i64,
    refs: Option<String>,
}

impl<Id: Into<Uuid>> From<TranscriptRow<Id>> for TranscriptEntry {
    fn from(row: TranscriptRow<Id>) -> Self {
        TranscriptEntry {
            document_id: row.document_id.into(),
            seq: row.seq,
            author_login: row.author_login,
            kind: row.kind,
            body: row.body,
            created_at_ms: row.created_at_ms,
            refs: row.refs,
        }
    }
}

#[derive(sqlx::FromRow)]
struct RunRow<Id> {
    document_id: Id,
    run_id: String,
    session_id: String,
    name: String,
    status: String,
    root_run_id: Option<String>,
    elapsed_ms: Option<i64>,
    omitted_stages: i64,
    reported_at_ms: i64,
}

impl<Id: Into<Uuid>> From<RunRow<Id>> for RunRecord {
    fn from(row: RunRow<Id>) -> Self {
        RunRecord {
            document_id: row.document_id.into(),
            run_id: row.run_id,
            session_id: row.session_id,
            name: row.name,
            status: row.status,
            root_run_id: row.root_run_id,
            elapsed_ms: row.elapsed_ms,
            omitted_stages: row.omitted_stages,
            reported_at_ms: row.reported_at_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
struct HoldRow<Id> {
    document_id: Id,
    account_id: Id,
    login: String,
    browser_login_id: Option<Id>,
    generation: i64,
    held: String,
    written_at_ms: i64,
    handover_until_ms: Option<i64>,
    machine_id: Option<Id>,
}

impl<Id: Into<Uuid>> From<HoldRow<Id>> for LinkHold {
    fn from(row: HoldRow<Id>) -> Self {
        LinkHold {
            document_id: row.document_id.into(),
            account_id: row.account_id.into(),
            login: row.login,
            browser_login_id: row.browser_login_id.map(Into::into),
            generation: row.generation,
            held: row.held,
            written_at_ms: row.written_at_ms,
            handover_until_ms: row.handover_until_ms,
            machine_id: row.machine_id.map(Into::into),
        }
    }
}

#[derive(sqlx::FromRow)]
struct AttachmentRow<Id> {
    id: Id,
    document_id: Id,
    uploader: String,
    name: String,
    kind: String,
    mime_type: String,
    size: i64,
    created_at_ms: i64,
    sent_seq: Option<i64>,
}

impl<Id: Into<Uuid>> From<AttachmentRow<Id>> for Attachment {
    fn from(row: AttachmentRow<Id>) -> Self {
        Attachment {
            id: row.id.into(),
            document_id: row.document_id.into(),
            uploader: row.uploader,
            name: row.name,
            kind: row.kind,
            mime_type: row.mime_type,
            size: row.size,
            created_at_ms: row.created_at_ms,
            sent_seq: row.sent_seq,
        }
    }
}

const ATTACHMENT_COLUMNS: &str =
    "id, document_id, uploader, name, kind, mime_type, size, created_at_ms, sent_seq";

#[derive(sqlx::FromRow)]
struct JobRow<Id> {
    id: Id,
    document_id: Id,
    kind: String,
    version: i64,
    origin: String,
    target: String,
    target_generation: i64,
    idempotency_key: String,
    fingerprint: String,
    input: String,
    state: String,
    attempts: i64,
    failures: i64,
    max_failures: i64,
    available_at_ms: i64,
    claim_owner: Option<String>,
    claim_generation: i64,
    claim_expires_at_ms: Option<i64>,
    progress: String,
    reason: Option<String>,
    artifact: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl<Id: Into<Uuid>> JobRow<Id> {
    fn into_job(self) -> StoreResult<crate::Job> {
        let state = crate::JobState::parse(&self.state).ok_or_else(|| {
            StoreError::Backend(format!(
                "a background job has the unknown state {:?}",
                self.state
            ))
        })?;
        Ok(crate::Job {
            id: self.id.into(),
            document_id: self.document_id.into(),
            kind: self.kind,
            version: self.version,
            origin: self.origin,
            target: self.target,
            target_generation: self.target_generation,
            idempotency_key: self.idempotency_key,
            fingerprint: self.fingerprint,
            input: self.input,
            state,
            attempts: self.attempts,
            failures: self.failures,
            max_failures: self.max_failures,
            available_at_ms: self.available_at_ms,
            claim_owner: self.claim_owner,
            claim_generation: self.claim_generation,
            claim_expires_at_ms: self.claim_expires_at_ms,
            progress: self.progress,
            reason: self.reason,
            artifact: self.artifact,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

const JOB_COLUMNS: &str = "id, document_id, kind, version, origin, target, target_generation, \
    idempotency_key, fingerprint, input, state, attempts, failures, max_failures, \
    available_at_ms, claim_owner, claim_generation, claim_expires_at_ms, progress, reason, \
    artifact, created_at_ms, updated_at_ms";

#[derive(sqlx::FromRow)]
struct StageRow {
    stage_id: String,
    name: String,
    status: String,
    parent_stage_id: Option<String>,
    duration_ms: Option<i64>,
}

impl From<StageRow> for StageRecord {
    fn from(row: StageRow) -> Self {
        StageRecord {
            stage_id: row.stage_id,
            name: row.name,
            status: row.status,
            parent_stage_id: row.parent_stage_id,
            duration_ms: row.duration_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
struct OwnershipRow<Id> {
    document_id: Id,
    generation: i64,
    holder_account_id: Option<Id>,
    holder_login: Option<String>,
    holder_browser_login_id: Option<Id>,
    claimed_at_ms: Option<i64>,
}

impl<Id: Into<Uuid>> From<OwnershipRow<Id>> for Ownership {
    fn from(row: OwnershipRow<Id>) -> Self {
        // The schema keeps the holder columns all set or all NULL.
        let holder = match (
            row.holder_account_id,
            row.holder_login,
            row.holder_browser_login_id,
        ) {
            (Some(account_id), Some(login), Some(browser_login_id)) => Some(Holder {
                account_id: account_id.into(),
                login,
                browser_login_id: browser_login_id.into(),
            }),
            _ => None,
        };
        Ownership {
            document_id: row.document_id.into(),
            generation: row.generation,
            claimed_at_ms: holder.as_ref().and(row.claimed_at_ms),
            holder,
        }
    }
}

#[derive(sqlx::FromRow)]
struct LeaseRow {
    holder: Option<String>,
    epoch: i64,
    expires_at_ms: i64,
}

/// A document lease renewed, as [`SqlStore::renew_document_leases`] returns it.
#[derive(sqlx::FromRow)]
struct RenewedLeaseRow<Id> {
    document_id: Id,
    holder: Option<String>,
    epoch: i64,
    expires_at_ms: i64,
}

/// A paired machine as [`MACHINE_SELECT`] reads it.
#[derive(sqlx::FromRow)]
struct MachineRow<Id> {
    id: Id,
    owner_account_id: Id,
    owner_login: String,
    name: String,
    release: Option<String>,
    created_at_ms: i64,
}

impl<Id: Into<Uuid>> From<MachineRow<Id>> for crate::Machine {
    fn from(row: MachineRow<Id>) -> Self {
        crate::Machine {
            id: row.id.into(),
            owner_account_id: row.owner_account_id.into(),
            owner_login: row.owner_login,
            name: row.name,
            release: row.release,
            created_at_ms: row.created_at_ms,
        }
    }
}

/// A machine with its owner's login as the accounts table has it now.
const MACHINE_SELECT: &str = "SELECT m.id, m.owner_account_id, a.login AS owner_login, m.name, \
     m.release, m.created_at_ms FROM machines m JOIN accounts a ON a.id = m.owner_account_id";

/// A document's machine choice.
#[derive(sqlx::FromRow)]
struct ChoiceRow<Id> {
    document_id: Id,
    machine_id: Id,
    chosen_by_account_id: Id,
    chosen_by: String,
    chosen_at_ms: i64,
    by_default: bool,
}

impl<Id: Into<Uuid>> From<ChoiceRow<Id>> for crate::MachineChoice {
    fn from(row: ChoiceRow<Id>) -> Self {
        crate::MachineChoice {
            document_id: row.document_id.into(),
            machine_id: row.machine_id.into(),
            chosen_by_account_id: row.chosen_by_account_id.into(),
            chosen_by: row.chosen_by,
            chosen_at_ms: row.chosen_at_ms,
            by_default: row.by_default,
        }
    }
}

/// A browser build.
#[derive(sqlx::FromRow)]
struct BuildRow<Id> {
    id: Id,
    document_id: Id,
    kind: String,
    graph_version: i64,
    machine_id: Id,
    requested_by_account_id: Id,
    requested_by: String,
    checkout: Option<String>,
    state: String,
    reason: Option<String>,
    run_id: Option<String>,
    before_source: Option<String>,
    after_source: Option<String>,
    after_plan_revision: Option<i64>,
    created_at_ms: i64,
    updated_at_ms: i64,
}

fn build_of<Id: Into<Uuid>>(row: BuildRow<Id>) -> StoreResult<crate::Build> {
    let state = crate::BuildState::parse(&row.state)
        .ok_or_else(|| StoreError::Backend(format!("unknown build state {:?}", row.state)))?;
    let kind = crate::BuildKind::parse(&row.kind)
        .ok_or_else(|| StoreError::Backend(format!("unknown build kind {:?}", row.kind)))?;
    let change = match (row.before_source, row.after_source, row.after_plan_revision) {
        (Some(before), Some(after), Some(plan_revision)) => Some(crate::BuildChange {
            before,
            after,
            plan_revision,
        }),
        _ => None,
    };
    Ok(crate::Build {
        id: row.id.into(),
        document_id: row.document_id.into(),
        kind,
        graph_version: row.graph_version,
        machine_id: row.machine_id.into(),
        requested_by_account_id: row.requested_by_account_id.into(),
        requested_by: row.requested_by,
        checkout: row.checkout,
        state,
        reason: row.reason,
        run_id: row.run_id,
        change,
        created_at_ms: row.created_at_ms,
        updated_at_ms: row.updated_at_ms,
    })
}

const BUILD_SELECT: &str = "SELECT id, document_id, kind, graph_version, machine_id, \
     requested_by_account_id, requested_by, checkout, state, reason, run_id, before_source, \
     after_source, after_plan_revision, created_at_ms, updated_at_ms FROM implementation_builds";

/// A document's built source.
#[derive(sqlx::FromRow)]
struct BuiltSourceRow<Id> {
    document_id: Id,
    build_id: Id,
    plan_revision: i64,
    source: String,
    recorded_at_ms: i64,
}

impl<Id: Into<Uuid>> From<BuiltSourceRow<Id>> for crate::BuiltSource {
    fn from(row: BuiltSourceRow<Id>) -> Self {
        crate::BuiltSource {
            document_id: row.document_id.into(),
            build_id: row.build_id.into(),
            plan_revision: row.plan_revision,
            source: row.source,
            recorded_at_ms: row.recorded_at_ms,
        }
    }
}

/// A Planner credential by digest.
#[derive(sqlx::FromRow)]
struct CredentialRow<Id> {
    digest: String,
    machine_id: Id,
    document_id: Id,
    issued_at_ms: i64,
    expires_at_ms: i64,
}

impl<Id: Into<Uuid>> From<CredentialRow<Id>> for crate::PlannerCredential {
    fn from(row: CredentialRow<Id>) -> Self {
        crate::PlannerCredential {
            digest: row.digest,
            machine_id: row.machine_id.into(),
            document_id: row.document_id.into(),
            issued_at_ms: row.issued_at_ms,
            expires_at_ms: row.expires_at_ms,
        }
    }
}

const CHOICE_COLUMNS: &str =
    "document_id, machine_id, chosen_by_account_id, chosen_by, chosen_at_ms, by_default";

const ACCOUNT_COLUMNS: &str = "id, github_user_id, login, created_at_ms";
const LOGIN_COLUMNS: &str =
    "id, account_id, verifier_hash, created_at_ms, expires_at_ms, signed_out_at_ms";
const DOCUMENT_COLUMNS: &str = "id, repo_owner, repo_name, slug, title, plan_revision, \
     storage_revision, yjs_epoch, archived, created_at_ms, parent_id, creator_account_id, \
     creator_login";
const TRANSCRIPT_COLUMNS: &str = "document_id, seq, author_login, kind, body, created_at_ms, refs";
const OWNERSHIP_COLUMNS: &str = "document_id, generation, holder_account_id, holder_login, \
     holder_browser_login_id, claimed_at_ms";

// The statements of the group-commit writer's jobs, one text for every backend and driver (the
// sqlx writer here, SQLite's own writer thread in `lite`).

/// The writer-lease row, read by a fenced write inside its transaction.
const LEASE_FOR_WRITE: &str = "SELECT epoch, holder FROM writer_lease WHERE name = $1";

/// Numbers `$2` Yjs updates of document `$1`: the last seq they take.
const NUMBER_UPDATES: &str = "UPDATE documents SET last_update_seq = last_update_seq + $2, \
     storage_revision = storage_revision + $2 WHERE id = $1 RETURNING last_update_seq";

/// One journal row: document, seq, update, time.
const JOURNAL_UPDATE: &str = "INSERT INTO document_updates \
     (document_id, seq, update_v1, created_at_ms) VALUES ($1, $2, $3, $4)";

/// One transcript entry at the document's next seq, which it returns — unless the document
/// already has an entry with append key `$6`: then nothing is inserted and no row returned, so
/// the key's lookup and the append are one statement (a NULL key matches nothing).
const APPEND_TRANSCRIPT: &str = "INSERT INTO chat_transcript \
     (document_id, seq, author_login, kind, body, created_at_ms, append_key, refs) \
     SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6, $7 \
     FROM chat_transcript WHERE document_id = $1 \
     HAVING NOT EXISTS (SELECT 1 FROM chat_transcript \
     WHERE document_id = $1 AND append_key = $6) RETURNING seq";

/// A file marked sent by the entry at seq `$1`.
const MARK_SENT: &str = "UPDATE chat_attachments SET sent_seq = $1 WHERE id = $2";

/// Whether document `$1` exists, with `lock` ([`Dialect::FOR_NO_KEY_UPDATE`]…) appended.
fn document_exists_sql(lock: &str) -> String {
    format!("SELECT 1 FROM documents WHERE id = $1{lock}")
}

/// The entry document `$1`'s append with key `$2` made.
static MADE_BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {TRANSCRIPT_COLUMNS} FROM chat_transcript \
         WHERE document_id = $1 AND append_key = $2"
    )
});

/// File `$1` of document `$2`, as a message sending it reads it.
static FILE_TO_SEND: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {ATTACHMENT_COLUMNS} FROM chat_attachments WHERE id = $1 AND document_id = $2")
});

/// A claim of document `$1`'s Planner by account `$2` (login `$3`, browser login `$4`) at
/// `$5`. The guard is in the WHERE clause: free, or already this account's. The generation
/// advances only when the row was free: SET expressions read the row's values before the
/// update.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE planner_ownership SET \
         generation = CASE WHEN holder_account_id IS NULL \
                      THEN generation + 1 ELSE generation END, \
         holder_account_id = $2, holder_login = $3, holder_browser_login_id = $4, \
         claimed_at_ms = $5 \
         WHERE document_id = $1 AND (holder_account_id IS NULL OR holder_account_id = $2) \
         RETURNING {OWNERSHIP_COLUMNS}"
    )
});

/// Document `$1`'s Planner ownership row.
static OWNERSHIP: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {OWNERSHIP_COLUMNS} FROM planner_ownership WHERE document_id = $1")
});

const GRAPH_COLUMNS: &str = "document_id, graph_version, plan_revision, graph_revision, state, \
     definition, verified, revision_requested, run_id, created_at_ms, updated_at_ms";

/// An `implementation_graphs` row in [`GRAPH_COLUMNS`] order.
type GraphRow<Id> = (
    Id,
    i64,
    i64,
    i64,
    String,
    String,
    bool,
    bool,
    Option<String>,
    i64,
    i64,
);

/// Every version of document `$1`'s graph, oldest first.
static GRAPH_VERSIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {GRAPH_COLUMNS} FROM implementation_graphs WHERE document_id = $1 \
         ORDER BY graph_version"
    )
});

/// An `implementation_runs` row: run id, document, graph version, revision, progress, ended,
/// started, updated.
type ImplementationRunRow<Id> = (String, Id, i64, i64, String, Option<String>, i64, i64);

/// `SELECT`s the columns of [`ImplementationRunRow`] from `implementation_runs`.
const IMPLEMENTATION_RUN: &str = "SELECT run_id, document_id, graph_version, revision, progress, \
     ended, started_at_ms, updated_at_ms FROM implementation_runs";

fn implementation_run_of<Id: Into<Uuid>>(
    row: ImplementationRunRow<Id>,
) -> StoreResult<crate::ImplementationRun> {
    let (run_id, document_id, graph_version, revision, progress, ended, started, updated) = row;
    let ended = match ended {
        None => None,
        Some(word) => Some(
            crate::RunEnd::parse(&word)
                .ok_or_else(|| StoreError::Backend(format!("unknown run end {word:?}")))?,
        ),
    };
    Ok(crate::ImplementationRun {
        run_id,
        document_id: document_id.into(),
        graph_version,
        revision,
        progress,
        ended,
        started_at_ms: started,
        updated_at_ms: updated,
    })
}

fn graph_version_of<Id: Into<Uuid>>(row: GraphRow<Id>) -> StoreResult<crate::GraphVersion> {
    let (
        document_id,
        graph_version,
        plan_revision,
        graph_revision,
        state,
        definition,
        verified,
        revision_requested,
        run_id,
        created_at_ms,
        updated_at_ms,
    ) = row;
    Ok(crate::GraphVersion {
        document_id: document_id.into(),
        counters: crate::GraphCounters {
            plan_revision,
            graph_version,
            graph_revision,
        },
        state: crate::GraphState::parse(&state)
            .ok_or_else(|| StoreError::Backend(format!("unknown graph state {state:?}")))?,
        definition,
        verified,
        revision_requested,
        run_id,
        created_at_ms,
        updated_at_ms,
    })
}

const COMMENT_THREAD_COLUMNS: &str = "id, document_id, quote, created_by, created_at_ms, \
     resolved_by, resolved_at_ms, replies, result_revision";

/// A `comment_threads` row in [`COMMENT_THREAD_COLUMNS`] order.
type CommentThreadRow<Id> = (
    Id,
    Id,
    String,
    String,
    i64,
    Option<String>,
    Option<i64>,
    i64,
    Option<i64>,
);

fn comment_thread_of<Id: Into<Uuid>>(row: CommentThreadRow<Id>) -> crate::CommentThread {
    let (
        id,
        document_id,
        quote,
        created_by,
        created_at_ms,
        resolved_by,
        resolved_at_ms,
        replies,
        result_revision,
    ) = row;
    crate::CommentThread {
        id: id.into(),
        document_id: document_id.into(),
        quote,
        created_by,
        created_at_ms,
        resolved_by,
        resolved_at_ms,
        replies,
        result_revision,
    }
}

/// A `comment_notes` row.
type CommentNoteRow<Id> = (Id, i64, Option<String>, bool, String, i64);

fn comment_note_of<Id: Into<Uuid>>(row: CommentNoteRow<Id>) -> crate::CommentNote {
    let (thread_id, seq, author_login, to_planner, body, created_at_ms) = row;
    crate::CommentNote {
        thread_id: thread_id.into(),
        seq,
        author_login,
        to_planner,
        body,
        created_at_ms,
    }
}

// --- the store methods ---
//
// sqlx's bounds for running these statements on `DB`, stated once: its connections execute
// queries, its argument lists bind, its rows are read by name and position, and the Rust types
// below go through it. Both drivers meet them; the compiler checks each backend's use.
impl<DB> SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    for<'a> &'a str: ColumnIndex<DB::Row> + Encode<'a, DB> + Type<DB>,
    for<'a> &'a [u8]: Encode<'a, DB> + Type<DB>,
    i64: SqlValue<DB>,
    bool: SqlValue<DB>,
    String: SqlValue<DB>,
    Vec<u8>: SqlValue<DB>,
    Option<i64>: SqlValue<DB>,
    Option<String>: SqlValue<DB>,
    Option<DB::Id>: SqlValue<DB>,
{
    /// Runs `query` as a write transaction of its own ([`SqlStore::begin_write`]) and commits
    /// it; `what` names the statement and the commit in errors. How many rows it changed.
    async fn write_one<'q>(
        &self,
        query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
        (what, committing): (&str, &str),
    ) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = query
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error(what, e))?;
        tx.commit().await.map_err(|e| sqlx_error(committing, e))?;
        Ok(DB::rows_affected(&done))
    }

    /// Begins a write transaction ([`Dialect::BEGIN_WRITE`]). On a fenced handle (see
    /// [`crate::fence`]) it is refused at once if this process gave the fence up; otherwise it
    /// takes the fence's lease lock shared (the writer lease's with
    /// [`Dialect::BEGIN_FENCED_WRITE`], or the document's with
    /// [`Dialect::LOCK_DOCUMENT_LEASE_SHARED`]) and then reads the lease row, both inside the
    /// transaction, so no change of epoch can commit between this check and the write's commit:
    /// the write lands before a takeover or is refused.
    async fn begin_write(&self) -> StoreResult<Transaction<'static, DB>> {
        self.fence.check_local()?;
        let begin = match self.fence.scope() {
            Some(FenceScope::Writer) => DB::BEGIN_FENCED_WRITE,
            None | Some(FenceScope::Document(_)) => DB::BEGIN_WRITE,
        };
        let mut tx = self
            .writes
            .begin_with(begin)
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        match &self.fence {
            None => {}
            // Its lock came with `BEGIN`.
            Some(fence) if fence.scope() == FenceScope::Writer => {
                Self::read_fence_in(&mut tx, fence).await?
            }
            Some(fence) => Self::check_fence_in(&mut tx, fence).await?,
        }
        Ok(tx)
    }

    /// Checks `fence` inside `tx`: takes its lease's lock shared, then reads the lease row (see
    /// [`SqlStore::begin_write`]), so the verdict holds until `tx` commits.
    async fn check_fence_in(tx: &mut Transaction<'static, DB>, fence: &Fence) -> StoreResult<()> {
        fence.check_local()?;
        Self::lock_fence_in(tx, fence).await?;
        Self::read_fence_in(tx, fence).await
    }

    /// Takes `fence`'s lease lock shared in `tx` (taken again, it stacks: released at commit).
    async fn lock_fence_in(tx: &mut Transaction<'static, DB>, fence: &Fence) -> StoreResult<()> {
        let (lock, key) = match fence.scope() {
            FenceScope::Writer => (DB::LOCK_WRITER_LEASE_SHARED, None),
            FenceScope::Document(document_id) => (
                DB::LOCK_DOCUMENT_LEASE_SHARED,
                Some(document_lease_key(document_id)),
            ),
        };
        if let Some(lock) = lock {
            let mut locking = sqlx::query(lock);
            if let Some(key) = key {
                locking = locking.bind(key);
            }
            locking
                .execute(&mut **tx)
                .await
                .map_err(|e| sqlx_error("locking a lease for a write", e))?;
        }
        Ok(())
    }

    /// [`SqlStore::check_fence_in`] of every fence of a batch, in [`group::lock_order`]: the
    /// writer lease's one by one, and the documents' leases together — one statement taking their
    /// locks and one reading their rows — so a batch of many documents' writes costs two round
    /// trips for its fences, not two per document. Each fence's verdict, in `fences`' order.
    async fn check_fences_in(
        tx: &mut Transaction<'static, DB>,
        fences: &[Fence],
    ) -> StoreResult<Vec<StoreResult<()>>> {
        let mut verdicts = vec![Ok(()); fences.len()];
        let mut documents = Vec::new();
        for at in group::lock_order(fences) {
            let fence = &fences[at];
            match fence.scope() {
                _ if fence.is_given_up() => verdicts[at] = fence.check_local(),
                FenceScope::Writer => verdicts[at] = Self::check_fence_in(tx, fence).await,
                FenceScope::Document(id) => documents.push((at, id)),
            }
        }
        if documents.is_empty() {
            return Ok(verdicts);
        }
        let places = (1..=documents.len())
            .map(|n| format!("${n}"))
            .collect::<Vec<_>>();
        if let Some((before, after)) = DB::LOCK_DOCUMENT_LEASES_SHARED {
            let values = places.iter().map(|p| format!("({p})")).collect::<Vec<_>>();
            let sql = format!("{before}{}{after}", values.join(", "));
            let mut locking = sqlx::query(&sql);
            for (_, id) in &documents {
                locking = locking.bind(document_lease_key(*id));
            }
            locking
                .execute(&mut **tx)
                .await
                .map_err(|e| sqlx_error("locking documents' leases for a batch", e))?;
        }
        let sql = format!(
            "SELECT document_id, epoch, holder FROM document_leases WHERE document_id IN ({})",
            places.join(", ")
        );
        let mut reading = sqlx::query_as::<_, (DB::Id, i64, Option<String>)>(&sql);
        for (_, id) in &documents {
            reading = reading.bind(DB::Id::from(*id));
        }
        let rows = reading
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading documents' leases for a batch", e))?;
        let rows: std::collections::BTreeMap<Uuid, (i64, bool)> = rows
            .into_iter()
            .map(|(id, epoch, holder)| (id.into(), (epoch, holder.is_some())))
            .collect();
        for (at, id) in documents {
            verdicts[at] = fences[at].check_lease(rows.get(&id).copied());
        }
        Ok(verdicts)
    }

    /// Reads `fence`'s lease row inside `tx` (its lock already taken) and checks it.
    async fn read_fence_in(tx: &mut Transaction<'static, DB>, fence: &Fence) -> StoreResult<()> {
        let lease: Option<(i64, Option<String>)> = match fence.scope() {
            FenceScope::Writer => sqlx::query_as(LEASE_FOR_WRITE)
                .bind(WRITER_LEASE_NAME)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| sqlx_error("reading the writer lease for a write", e))?,
            FenceScope::Document(document_id) => sqlx::query_as(DOCUMENT_LEASE_FOR_WRITE)
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| sqlx_error("reading a document's lease for a write", e))?,
        };
        fence.check_lease(lease.map(|(epoch, holder)| (epoch, holder.is_some())))
    }

    /// Begins a transaction that may change the lease's epoch or holder (taking it, giving it
    /// back): it takes the writer-lease lock exclusively ([`Dialect::LOCK_WRITER_LEASE`]), so it
    /// waits for every fenced write in flight to commit, and fenced writes after it see what it
    /// wrote. Never fenced itself.
    async fn begin_lease_change(&self) -> StoreResult<Transaction<'static, DB>> {
        let mut tx = self
            .writes
            .begin_with(DB::BEGIN_WRITE)
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        if let Some(lock) = DB::LOCK_WRITER_LEASE {
            sqlx::query(lock)
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("locking the writer lease", e))?;
        }
        Ok(tx)
    }

    /// [`SqlStore::begin_lease_change`] for one document's lease: it takes that document's
    /// lease lock exclusively ([`Dialect::LOCK_DOCUMENT_LEASE`]).
    async fn begin_document_lease_change(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Transaction<'static, DB>> {
        let mut tx = self
            .writes
            .begin_with(DB::BEGIN_WRITE)
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        if let Some(lock) = DB::LOCK_DOCUMENT_LEASE {
            sqlx::query(lock)
                .bind(document_lease_key(document_id))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("locking a document's lease", e))?;
        }
        Ok(tx)
    }

    async fn begin_snapshot(&self) -> StoreResult<Transaction<'static, DB>> {
        self.pool
            .begin_with(DB::BEGIN_SNAPSHOT)
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))
    }

    /// Takes the repository's slug lock ([`Dialect::LOCK_REPOSITORY_SLUGS`]) in `tx`, if the
    /// database needs one. Owner and name are compared without ASCII case. Two repositories
    /// whose keys hash alike merely take turns too.
    async fn lock_repository_slugs(
        tx: &mut Transaction<'_, DB>,
        repo_owner: &str,
        repo_name: &str,
    ) -> StoreResult<()> {
        let Some(lock) = DB::LOCK_REPOSITORY_SLUGS else {
            return Ok(());
        };
        let key = format!(
            "chopin:slugs:{}/{}",
            ascii_key(repo_owner),
            ascii_key(repo_name)
        );
        sqlx::query(lock)
            .bind(key)
            .execute(&mut **tx)
            .await
            .map_err(|e| sqlx_error("locking a repository's slugs", e))?;
        Ok(())
    }

    /// True if the document exists, read in `tx` with the row lock `lock` (one of the
    /// [`Dialect`] lock suffixes, or `""`).
    async fn document_exists(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        lock: &str,
    ) -> StoreResult<bool> {
        let row = sqlx::query(&document_exists_sql(lock))
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?;
        Ok(row.is_some())
    }

    /// Writes one journal row inside the caller's transaction (which numbered it).
    async fn journal_update(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        seq: i64,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<()> {
        sqlx::query(JOURNAL_UPDATE)
            .bind(DB::Id::from(document_id))
            .bind(seq)
            .bind(update)
            .bind(now_ms)
            .execute(&mut **tx)
            .await
            .map_err(|e| sqlx_error("journalling an update", e))?;
        Ok(())
    }

    /// Makes `state` the document's checkpoint inside the caller's transaction.
    async fn store_checkpoint(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        upto_seq: i64,
        yjs_epoch: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO document_checkpoints (document_id, upto_seq, yjs_epoch, state_v1) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (document_id) DO UPDATE SET upto_seq = excluded.upto_seq, \
             yjs_epoch = excluded.yjs_epoch, state_v1 = excluded.state_v1",
        )
        .bind(DB::Id::from(document_id))
        .bind(upto_seq)
        .bind(yjs_epoch)
        .bind(state)
        .execute(&mut **tx)
        .await
        .map_err(|e| sqlx_error("writing a checkpoint", e))?;
        Ok(())
    }

    // --- group commit (module `group`) ---

    /// Queues the job `job` makes around where its answer goes, and waits for that answer.
    async fn write<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<StoreResult<T>>) -> Job,
    ) -> StoreResult<T> {
        let (done, answer) = oneshot::channel();
        self.submit(job(done)).await?;
        group::answer(answer).await
    }

    /// Queues `job` for this handle's writer, starting the writer on first use.
    async fn submit(&self, job: Job) -> StoreResult<()> {
        self.fence.check_local()?;
        let writer = self.writer.get_or_init(|| {
            Writer::start(DB::WRITE_LANES, |queue, batches| {
                // Unfenced: the writer checks each job's own fence.
                let unfenced = SqlStore {
                    fence: None,
                    ..self.detached()
                };
                DB::spawn_writer(unfenced, queue, batches)
            })
        });
        writer.submit(job).await
    }

    /// The writer task: takes the next job, begins a write transaction (waiting for the write
    /// connection or lock, while more jobs queue), takes every job queued meanwhile (up to
    /// [`group::MAX_BATCH`]) into it, commits, and only then answers each caller. A batch whose
    /// transaction breaks is run again one job per transaction, so each job gets its own
    /// outcome. Ends when every handle that could queue a job is gone.
    pub(crate) async fn write_loop(self, mut jobs: mpsc::Receiver<Job>, batches: Arc<AtomicU64>) {
        while let Some(first) = jobs.recv().await {
            // The first job's lease lock is taken before the queue is drained: while it is
            // waited for (a takeover in progress), the jobs that arrive join this batch.
            let begun = match self.begin_write().await {
                Ok(mut tx) => match first.fence() {
                    Some(fence) => Self::lock_fence_in(&mut tx, fence).await.map(|()| tx),
                    None => Ok(tx),
                },
                Err(e) => Err(e),
            };
            let mut batch = vec![first];
            while batch.len() < group::MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let tx = match begun {
                Ok(tx) => tx,
                Err(e) => {
                    batch.into_iter().for_each(|job| job.fail(e.clone()));
                    continue;
                }
            };
            match Self::run_batch(tx, &batch).await {
                Ok(outcomes) => {
                    group::count_batch(&batches);
                    batch
                        .into_iter()
                        .zip(outcomes)
                        .for_each(|(job, outcome)| job.answer(outcome));
                }
                Err(e) if batch.len() == 1 => batch.into_iter().for_each(|job| job.fail(e.clone())),
                Err(_) => {
                    for job in batch {
                        let alone = match self.begin_write().await {
                            Ok(tx) => Self::run_batch(tx, std::slice::from_ref(&job)).await,
                            Err(e) => Err(e),
                        };
                        match alone.map(|mut outcomes| outcomes.pop()) {
                            Ok(Some(outcome)) => {
                                group::count_batch(&batches);
                                job.answer(outcome);
                            }
                            Ok(None) => job.fail(group::stopped()),
                            Err(e) => job.fail(e),
                        }
                    }
                }
            }
        }
    }

    /// Runs every job of `batch` in `tx`, in order, and commits. `Err` if the transaction broke
    /// (nothing of the batch is committed); a job's own refusal is in its outcome.
    async fn run_batch(mut tx: Transaction<'static, DB>, batch: &[Job]) -> StoreResult<Vec<Done>> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut locked = Vec::new();
        // Each fence of the batch is checked once, before any job is written.
        // Their locks are taken in one order (the writer lease's, then documents' by id), so two
        // batches waiting on each other's locks behind a takeover cannot deadlock.
        let (fences, fence_of) = group::fences_of(batch);
        let verdicts = Self::check_fences_in(&mut tx, &fences).await?;
        for (job, fence) in batch.iter().zip(fence_of) {
            if let Some(refused) = job.refusal(fence, &verdicts) {
                outcomes.push(refused);
                continue;
            }
            outcomes.push(match job {
                Job::Transcript {
                    document_id, entry, ..
                } => Done::Transcript(
                    Self::append_transcript_in(&mut tx, &mut locked, *document_id, entry).await?,
                ),
                Job::Updates {
                    document_id,
                    updates,
                    now_ms,
                    ..
                } => Done::Updates(
                    Self::append_updates_in(&mut tx, *document_id, updates, *now_ms).await?,
                ),
                Job::Claim {
                    document_id,
                    holder,
                    now_ms,
                    ..
                } => Done::Claim(
                    Self::claim_ownership_in(&mut tx, *document_id, holder, *now_ms).await?,
                ),
            });
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a batch of writes", e))?;
        Ok(outcomes)
    }

    // --- Store ---

    pub(crate) async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|e| sqlx_error("ping", e))?;
        Ok(())
    }

    // --- SignInStore ---

    pub(crate) async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account> {
        let sql = format!(
            "INSERT INTO accounts (id, github_user_id, login, login_key, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (github_user_id) DO UPDATE \
             SET login = excluded.login, login_key = excluded.login_key \
             RETURNING {ACCOUNT_COLUMNS}"
        );
        // Most calls find the account as it is (every bearer request and sign-in asks): a read,
        // and no write at all, unless the login changed.
        let id = account_id_for_github_user(github_user_id);
        if let Some(account) = self.account(id).await? {
            if account.github_user_id == github_user_id && account.login == login {
                return Ok(account);
            }
        }
        // `ON CONFLICT (github_user_id)` arbitrates only that index. In PostgreSQL two first
        // sign-ins of one user racing can still collide on the primary key (derived from the
        // same user id) and fail with a unique violation; the loser's retry then sees the
        // winner's row and updates. (SQLite runs the statement under its single write lock, so
        // there the race cannot happen.)
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut tx = self.begin_write().await?;
            let result: Result<AccountRow<DB::Id>, sqlx::Error> = sqlx::query_as(&sql)
                .bind(DB::Id::from(id))
                .bind(github_user_id)
                .bind(login)
                .bind(ascii_key(login))
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await;
            match result {
                Ok(row) => {
                    tx.commit()
                        .await
                        .map_err(|e| sqlx_error("committing an account", e))?;
                    return Ok(row.into());
                }
                Err(e)
                    if attempts < RACE_RETRIES
                        && sqlx_error_kind(&e) == Some(ErrorKind::UniqueViolation) =>
                {
                    continue
                }
                Err(e) => return Err(sqlx_error("upserting an account", e)),
            }
        }
    }

    pub(crate) async fn account(&self, id: Uuid) -> StoreResult<Option<Account>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = $1");
        let row: Option<AccountRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE login_key = $1 \
             ORDER BY created_at_ms DESC, id DESC LIMIT 1"
        );
        let row: Option<AccountRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(ascii_key(login))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account by login", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO browser_logins \
             (id, account_id, verifier_hash, created_at_ms, expires_at_ms, signed_out_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(DB::Id::from(login.id))
        .bind(DB::Id::from(login.account_id))
        .bind(&login.verifier_hash)
        .bind(login.created_at_ms)
        .bind(login.expires_at_ms)
        .bind(login.signed_out_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("account"),
            Some(ErrorKind::UniqueViolation) => {
                StoreError::Conflict("browser login id already exists".into())
            }
            _ => sqlx_error("creating a browser login", e),
        })?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a browser login", e))?;
        Ok(())
    }

    pub(crate) async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>> {
        let sql = format!("SELECT {LOGIN_COLUMNS} FROM browser_logins WHERE id = $1");
        let row: Option<BrowserLoginRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a browser login", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn live_browser_logins(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<BrowserLogin>> {
        let sql = format!(
            "SELECT {LOGIN_COLUMNS} FROM browser_logins \
             WHERE account_id = $1 AND signed_out_at_ms IS NULL AND expires_at_ms > $2 \
             ORDER BY created_at_ms DESC, id DESC LIMIT $3"
        );
        let rows: Vec<BrowserLoginRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(account_id))
            .bind(now_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account's live browser logins", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn sign_out_browser_login(
        &self,
        id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        let changed = self
            .write_one(
                sqlx::query(
                    "UPDATE browser_logins SET signed_out_at_ms = $2 \
             WHERE id = $1 AND signed_out_at_ms IS NULL",
                )
                .bind(DB::Id::from(id))
                .bind(now_ms),
                ("signing out a browser login", "committing a sign-out"),
            )
            .await?;
        Ok(changed == 1)
    }

    pub(crate) async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>> {
        // Every credential write locks the login's row first, so the revision read and the
        // write below cannot interleave with another credential write, a deletion or a sign-out.
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT signed_out_at_ms FROM browser_logins WHERE id = $1{}",
            DB::FOR_UPDATE
        );
        let signed_out: Option<Option<i64>> = sqlx::query_scalar(&sql)
            .bind(DB::Id::from(login_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a browser login", e))?;
        match signed_out {
            None => return Err(StoreError::NotFound("browser login")),
            Some(Some(_)) => return Ok(None),
            Some(None) => {}
        }
        let current: Option<i64> = sqlx::query_scalar(
            "SELECT revision FROM browser_login_credentials WHERE login_id = $1",
        )
        .bind(DB::Id::from(login_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a login credential revision", e))?;
        if current.unwrap_or(0) != expected_revision {
            return Ok(None);
        }
        let revision = expected_revision + 1;
        sqlx::query(
            "INSERT INTO browser_login_credentials (login_id, revision, sealed) \
             VALUES ($1, $2, $3) \
             ON CONFLICT (login_id) DO UPDATE \
             SET revision = excluded.revision, sealed = excluded.sealed",
        )
        .bind(DB::Id::from(login_id))
        .bind(revision)
        .bind(sealed)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("writing a login credential", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a login credential", e))?;
        Ok(Some(revision))
    }

    pub(crate) async fn login_credential(
        &self,
        login_id: Uuid,
    ) -> StoreResult<Option<(i64, Vec<u8>)>> {
        let row: Option<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT revision, sealed FROM browser_login_credentials \
             WHERE login_id = $1 AND sealed IS NOT NULL",
        )
        .bind(DB::Id::from(login_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a login credential", e))?;
        Ok(row)
    }

    pub(crate) async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT 1 FROM browser_logins WHERE id = $1{}",
            DB::FOR_UPDATE
        );
        let login_known = sqlx::query(&sql)
            .bind(DB::Id::from(login_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a browser login", e))?;
        if login_known.is_none() {
            return Ok(false);
        }
        let had: Option<bool> = sqlx::query_scalar(
            "SELECT sealed IS NOT NULL FROM browser_login_credentials WHERE login_id = $1",
        )
        .bind(DB::Id::from(login_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a login credential", e))?;
        // The row stays, emptied, with its revision advanced: a write against the old revision
        // (a refresh racing the sign-out) is refused rather than recreating the credential.
        sqlx::query(
            "INSERT INTO browser_login_credentials (login_id, revision, sealed) \
             VALUES ($1, 1, NULL) \
             ON CONFLICT (login_id) DO UPDATE \
             SET revision = browser_login_credentials.revision + 1, sealed = NULL",
        )
        .bind(DB::Id::from(login_id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting a login credential", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a login credential deletion", e))?;
        Ok(had.unwrap_or(false))
    }

    pub(crate) async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        // Credentials first, not relying on the foreign key's cascade. A login signed out
        // between the two statements (possible in PostgreSQL) is deleted by the second, and the
        // cascade takes its credential with it.
        sqlx::query(
            "DELETE FROM browser_login_credentials WHERE login_id IN \
             (SELECT id FROM browser_logins \
              WHERE signed_out_at_ms IS NOT NULL OR expires_at_ms <= $1)",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting credentials of expired logins", e))?;
        let done = sqlx::query(
            "DELETE FROM browser_logins WHERE signed_out_at_ms IS NOT NULL OR expires_at_ms <= $1",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting expired logins", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing the deletion of expired logins", e))?;
        Ok(DB::rows_affected(&done))
    }

    // --- DocumentStore ---

    pub(crate) async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        let doc = &doc.storable();
        let conflict_or_backend = |e: sqlx::Error| match sqlx_error_kind(&e) {
            Some(ErrorKind::UniqueViolation) if is_document_id_conflict(&e) => {
                StoreError::Conflict("document id already exists".into())
            }
            Some(ErrorKind::UniqueViolation) => StoreError::Conflict(slug_conflict(doc)),
            _ => sqlx_error("creating a document", e),
        };
        let mut tx = self.begin_write().await?;
        // A former slug of another document is taken too; the repository's slug lock keeps a
        // concurrent rename from making it one between this check and the insert.
        Self::lock_repository_slugs(&mut tx, &doc.repo_owner, &doc.repo_name).await?;
        // The parent, share-locked until commit, so a concurrent archive waits for the insert
        // (or, if it committed first, is seen here and refuses the child). Taken after the slug
        // lock, in the order a rename takes them, so the two never wait on each other.
        if let Some(parent_id) = doc.parent_id {
            let sql = format!(
                "SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = $1{}",
                DB::FOR_SHARE
            );
            let parent: Option<DocumentRow<DB::Id>> = sqlx::query_as(&sql)
                .bind(DB::Id::from(parent_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a parent document", e))?;
            check_parent(doc, parent.map(Document::from).as_ref())?;
        }
        let aliased = sqlx::query(
            "SELECT 1 FROM document_slug_aliases \
             WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3",
        )
        .bind(ascii_key(&doc.repo_owner))
        .bind(ascii_key(&doc.repo_name))
        .bind(&doc.slug)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading slug aliases", e))?;
        if aliased.is_some() {
            return Err(StoreError::Conflict(slug_conflict(doc)));
        }
        sqlx::query(
            "INSERT INTO documents (id, repo_owner, repo_name, repo_owner_key, repo_name_key, \
             slug, title, plan_revision, storage_revision, archived, created_at_ms, parent_id, \
             creator_account_id, creator_login, brief, base_branch, base_commit, mcp_created) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0, FALSE, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(DB::Id::from(doc.id))
        .bind(&doc.repo_owner)
        .bind(&doc.repo_name)
        .bind(ascii_key(&doc.repo_owner))
        .bind(ascii_key(&doc.repo_name))
        .bind(&doc.slug)
        .bind(&doc.title)
        .bind(doc.created_at_ms)
        .bind(doc.parent_id.map(DB::Id::from))
        .bind(doc.creator.as_ref().map(|c| DB::Id::from(c.account_id)))
        .bind(doc.creator.as_ref().map(|c| c.login.clone()))
        .bind(doc.brief.clone())
        .bind(doc.provenance.as_ref().map(|p| p.base_branch.clone()))
        .bind(doc.provenance.as_ref().map(|p| p.base_commit.clone()))
        .bind(doc.mcp_created)
        .execute(&mut *tx)
        .await
        .map_err(conflict_or_backend)?;
        sqlx::query("INSERT INTO planner_ownership (document_id, generation) VALUES ($1, 0)")
            .bind(DB::Id::from(doc.id))
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("creating a document's ownership", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a new document", e))?;
        Ok(Document {
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
        })
    }

    pub(crate) async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        let sql = format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = $1");
        let row: Option<DocumentRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT brief FROM documents WHERE id = $1")
                .bind(DB::Id::from(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a document's brief", e))?;
        match row {
            Some((brief,)) => Ok(brief),
            None => Err(StoreError::NotFound("document")),
        }
    }

    pub(crate) async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>> {
        let row: Option<(Option<String>, Option<String>)> =
            sqlx::query_as("SELECT base_branch, base_commit FROM documents WHERE id = $1")
                .bind(DB::Id::from(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a document's provenance", e))?;
        match row {
            // The migration keeps the two columns both set or both NULL.
            Some((Some(base_branch), Some(base_commit))) => Ok(Some(Provenance {
                base_branch,
                base_commit,
            })),
            Some(_) => Ok(None),
            None => Err(StoreError::NotFound("document")),
        }
    }

    pub(crate) async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool> {
        let row: Option<bool> =
            sqlx::query_scalar("SELECT mcp_created FROM documents WHERE id = $1")
                .bind(DB::Id::from(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading how a document was created", e))?;
        row.ok_or(StoreError::NotFound("document"))
    }

    pub(crate) async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>> {
        // Documents are never deleted, so a parent seen here stays known for the second read.
        if self.document(parent_id).await?.is_none() {
            return Err(StoreError::NotFound("document"));
        }
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents WHERE parent_id = $1 \
             ORDER BY created_at_ms, id"
        );
        let rows: Vec<DocumentRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(parent_id))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading child documents", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn repository_documents(
        &self,
        repo_owner: &str,
        repo_name: &str,
        limit: u32,
    ) -> StoreResult<Vec<Document>> {
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents \
             WHERE repo_owner_key = $1 AND repo_name_key = $2 \
             ORDER BY created_at_ms, id LIMIT $3"
        );
        let rows: Vec<DocumentRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(ascii_key(repo_owner))
            .bind(ascii_key(repo_name))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a repository's documents", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>> {
        // The canonical slug, else an alias; a slug is never both (see `rename_document`), so
        // at most one row comes back. Each half is one lookup in its table's unique index.
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents \
             WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3 \
             UNION ALL \
             SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = \
             (SELECT document_id FROM document_slug_aliases \
              WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3)"
        );
        let row: Option<DocumentRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(ascii_key(repo_owner))
            .bind(ascii_key(repo_name))
            .bind(slug)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document by slug", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE documents SET archived = $2 WHERE id = $1")
            .bind(DB::Id::from(id))
            .bind(archived)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("archiving a document", e))?;
        if DB::rows_affected(&done) == 0 {
            return Err(StoreError::NotFound("document"));
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an archive flag", e))?;
        Ok(())
    }

    pub(crate) async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document> {
        let (new_slug, new_title) = (&*crate::storable(new_slug), &*crate::storable(new_title));
        let mut tx = self.begin_write().await?;
        // A document's repository never changes, so it can be read before taking the lock.
        let repo: Option<(String, String)> =
            sqlx::query_as("SELECT repo_owner, repo_name FROM documents WHERE id = $1")
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a document", e))?;
        let (repo_owner, repo_name) = repo.ok_or(StoreError::NotFound("document"))?;
        Self::lock_repository_slugs(&mut tx, &repo_owner, &repo_name).await?;
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = $1{}",
            DB::FOR_UPDATE
        );
        let current: DocumentRow<DB::Id> = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("locking a document", e))?
            .ok_or(StoreError::NotFound("document"))?;
        let taken = || StoreError::Conflict(slug_taken(&repo_owner, &repo_name, new_slug));
        if current.slug != new_slug {
            let (owner_key, repo_key) = (ascii_key(&repo_owner), ascii_key(&repo_name));
            let canonical = sqlx::query(
                "SELECT 1 FROM documents \
                 WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3",
            )
            .bind(&owner_key)
            .bind(&repo_key)
            .bind(new_slug)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading slugs", e))?;
            if canonical.is_some() {
                return Err(taken());
            }
            let alias_of: Option<DB::Id> = sqlx::query_scalar(
                "SELECT document_id FROM document_slug_aliases \
                 WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3",
            )
            .bind(&owner_key)
            .bind(&repo_key)
            .bind(new_slug)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading slug aliases", e))?;
            match alias_of.map(Into::<Uuid>::into) {
                Some(owner) if owner != document_id => return Err(taken()),
                // Back to a former slug: it is canonical again, no longer an alias.
                Some(_) => {
                    sqlx::query(
                        "DELETE FROM document_slug_aliases \
                         WHERE repo_owner_key = $1 AND repo_name_key = $2 AND slug = $3",
                    )
                    .bind(&owner_key)
                    .bind(&repo_key)
                    .bind(new_slug)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("removing a slug alias", e))?;
                }
                None => {}
            }
            sqlx::query(
                "INSERT INTO document_slug_aliases \
                 (document_id, repo_owner_key, repo_name_key, slug, position) \
                 SELECT $1, $2, $3, $4, COALESCE(MAX(position), 0) + 1 \
                 FROM document_slug_aliases WHERE document_id = $1",
            )
            .bind(DB::Id::from(document_id))
            .bind(&owner_key)
            .bind(&repo_key)
            .bind(&current.slug)
            .execute(&mut *tx)
            .await
            .map_err(|e| match sqlx_error_kind(&e) {
                Some(ErrorKind::UniqueViolation) => taken(),
                _ => sqlx_error("adding a slug alias", e),
            })?;
        }
        let sql = format!(
            "UPDATE documents SET slug = $2, title = $3 WHERE id = $1 \
             RETURNING {DOCUMENT_COLUMNS}"
        );
        let renamed: DocumentRow<DB::Id> = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .bind(new_slug)
            .bind(new_title)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| match sqlx_error_kind(&e) {
                Some(ErrorKind::UniqueViolation) => taken(),
                _ => sqlx_error("renaming a document", e),
            })?;
        // A person chose this title (OWN-14).
        sqlx::query(
            "INSERT INTO document_titles (document_id, chosen) VALUES ($1, TRUE) \
             ON CONFLICT (document_id) DO UPDATE SET chosen = TRUE",
        )
        .bind(DB::Id::from(document_id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("marking a title chosen", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a rename", e))?;
        Ok(renamed.into())
    }

    pub(crate) async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>> {
        if self.document(document_id).await?.is_none() {
            return Err(StoreError::NotFound("document"));
        }
        sqlx::query_scalar(
            "SELECT slug FROM document_slug_aliases WHERE document_id = $1 ORDER BY position",
        )
        .bind(DB::Id::from(document_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading slug aliases", e))
    }

    pub(crate) async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance> {
        let column = revision_column(kind);
        let sql = format!(
            "UPDATE documents SET {column} = {column} + 1 \
             WHERE id = $1 AND {column} = $2 RETURNING {column}"
        );
        let mut tx = self.begin_write().await?;
        let advanced: Option<i64> = sqlx::query_scalar(&sql)
            .bind(DB::Id::from(id))
            .bind(expected)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("advancing a revision", e))?;
        if let Some(revision) = advanced {
            tx.commit()
                .await
                .map_err(|e| sqlx_error("committing a revision", e))?;
            return Ok(Advance::Advanced(revision));
        }
        let sql = format!("SELECT {column} FROM documents WHERE id = $1");
        let current: Option<i64> = sqlx::query_scalar(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a revision", e))?;
        match current {
            Some(current) => Ok(Advance::Stale { current }),
            None => Err(StoreError::NotFound("document")),
        }
    }

    // --- ContentStore ---

    pub(crate) async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<i64> {
        let seqs = self.append_updates(document_id, &[update], now_ms).await?;
        seqs.first()
            .copied()
            .ok_or_else(|| StoreError::Backend("the database writer journalled no update".into()))
    }

    pub(crate) async fn append_updates(
        &self,
        document_id: Uuid,
        updates: &[&[u8]],
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        self.write(|done| Job::Updates {
            fence: self.fence.clone(),
            document_id,
            updates: updates.iter().map(|u| u.to_vec()).collect(),
            now_ms,
            done,
        })
        .await
    }

    /// [`ContentStore::append_updates`](crate::ContentStore::append_updates) inside a batch's
    /// transaction. The outer error breaks the transaction; the inner one is this job's alone.
    async fn append_updates_in(
        tx: &mut Transaction<'static, DB>,
        document_id: Uuid,
        updates: &[Vec<u8>],
        now_ms: UnixMillis,
    ) -> StoreResult<StoreResult<Vec<i64>>> {
        let count = updates.len() as i64;
        // The UPDATE holds the document's row lock (in SQLite, the write lock) until commit:
        // appenders take turns, each numbering from the seq the one before it committed.
        let last: Option<i64> = sqlx::query_scalar(NUMBER_UPDATES)
            .bind(DB::Id::from(document_id))
            .bind(count)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("numbering an update", e))?;
        let Some(last) = last else {
            return Ok(Err(StoreError::NotFound("document")));
        };
        let first = last - count + 1;
        for (seq, update) in (first..=last).zip(updates) {
            Self::journal_update(tx, document_id, seq, update, now_ms).await?;
        }
        Ok(Ok((first..=last).collect()))
    }

    pub(crate) async fn commit_plan_edit(
        &self,
        document_id: Uuid,
        expected_plan_revision: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        let mut tx = self.begin_write().await?;
        if let Some(guard) = owner {
            // The guard as a write that changes nothing: it takes the ownership row's lock
            // (PostgreSQL; SQLite's one write lock is held already) until this commit, so a
            // release or claim waits for it, and one committed before it fails the guard.
            let held: Option<i64> = sqlx::query_scalar(
                "UPDATE planner_ownership SET generation = generation \
                 WHERE document_id = $1 AND generation = $2 AND holder_account_id = $3 \
                 RETURNING generation",
            )
            .bind(DB::Id::from(guard.document_id))
            .bind(guard.generation)
            .bind(DB::Id::from(guard.account_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("checking the Planner owner of an edit", e))?;
            if held.is_none() {
                let known: Option<i64> =
                    sqlx::query_scalar("SELECT plan_revision FROM documents WHERE id = $1")
                        .bind(DB::Id::from(document_id))
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(|e| sqlx_error("reading a plan revision", e))?;
                return match known {
                    Some(_) => Ok(PlanCommit::NotOwner),
                    None => Err(StoreError::NotFound("document")),
                };
            }
        }
        // The guard is in the WHERE clause: a committer that waited on a concurrent winner's row
        // lock re-checks it against the winner's row and matches nothing.
        let committed: Option<(i64, i64)> = sqlx::query_as(
            "UPDATE documents SET plan_revision = plan_revision + 1, \
             storage_revision = storage_revision + 1, last_update_seq = last_update_seq + 1 \
             WHERE id = $1 AND plan_revision = $2 \
             RETURNING plan_revision, last_update_seq",
        )
        .bind(DB::Id::from(document_id))
        .bind(expected_plan_revision)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("advancing a plan revision", e))?;
        let Some((plan_revision, seq)) = committed else {
            let current: Option<i64> =
                sqlx::query_scalar("SELECT plan_revision FROM documents WHERE id = $1")
                    .bind(DB::Id::from(document_id))
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("reading a plan revision", e))?;
            return match current {
                Some(current) => Ok(PlanCommit::Stale { current }),
                None => Err(StoreError::NotFound("document")),
            };
        };
        Self::journal_update(&mut tx, document_id, seq, update, now_ms).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a plan edit", e))?;
        Ok(PlanCommit::Committed { plan_revision, seq })
    }

    pub(crate) async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent> {
        // One snapshot for every read, so the checkpoint and the journal agree.
        let mut tx = self.begin_snapshot().await?;
        let yjs_epoch: i64 = sqlx::query_scalar("SELECT yjs_epoch FROM documents WHERE id = $1")
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?
            .ok_or(StoreError::NotFound("document"))?;
        let checkpoint: Option<(i64, Vec<u8>, i64)> = sqlx::query_as(
            "SELECT upto_seq, state_v1, yjs_epoch FROM document_checkpoints \
             WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a checkpoint", e))?;
        let checkpoint = checkpoint.map(|(upto_seq, state, yjs_epoch)| Checkpoint {
            upto_seq,
            state,
            yjs_epoch,
        });
        let updates: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT seq, update_v1 FROM document_updates \
             WHERE document_id = $1 AND seq > $2 ORDER BY seq",
        )
        .bind(DB::Id::from(document_id))
        .bind(checkpoint.as_ref().map_or(0, |c| c.upto_seq))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading the update journal", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("ending a read", e))?;
        Ok(DocumentContent {
            checkpoint,
            updates,
            yjs_epoch,
        })
    }

    pub(crate) async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        // The document's row lock orders this against appends, resets and other checkpoints.
        let sql = format!(
            "SELECT last_update_seq, yjs_epoch FROM documents WHERE id = $1{}",
            DB::FOR_NO_KEY_UPDATE
        );
        let (last_seq, yjs_epoch): (i64, i64) = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("locking a document", e))?
            .ok_or(StoreError::NotFound("document"))?;
        if !(0..=last_seq).contains(&upto_seq) {
            return Err(StoreError::Conflict(checkpoint_out_of_range(
                upto_seq, last_seq,
            )));
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT upto_seq FROM document_checkpoints WHERE document_id = $1")
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a checkpoint", e))?;
        if current.is_some_and(|current| current >= upto_seq) {
            return Ok(());
        }
        Self::store_checkpoint(&mut tx, document_id, upto_seq, yjs_epoch, state).await?;
        sqlx::query("DELETE FROM document_updates WHERE document_id = $1 AND seq <= $2")
            .bind(DB::Id::from(document_id))
            .bind(upto_seq)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("pruning the update journal", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a checkpoint", e))?;
        Ok(())
    }

    pub(crate) async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64> {
        let mut tx = self.begin_write().await?;
        let (yjs_epoch, last_seq): (i64, i64) = sqlx::query_as(
            "UPDATE documents SET yjs_epoch = yjs_epoch + 1, \
             storage_revision = storage_revision + 1 \
             WHERE id = $1 RETURNING yjs_epoch, last_update_seq",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("advancing a Yjs epoch", e))?
        .ok_or(StoreError::NotFound("document"))?;
        Self::store_checkpoint(&mut tx, document_id, last_seq, yjs_epoch, state).await?;
        sqlx::query("DELETE FROM document_updates WHERE document_id = $1")
            .bind(DB::Id::from(document_id))
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("emptying the update journal", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a content reset", e))?;
        Ok(yjs_epoch)
    }

    // --- TranscriptStore ---

    pub(crate) async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        self.write(|done| Job::Transcript {
            fence: self.fence.clone(),
            document_id,
            entry: entry.clone(),
            done,
        })
        .await
    }

    /// [`TranscriptStore::queue_transcript`](crate::TranscriptStore::queue_transcript): the job
    /// is in the writer's queue (which keeps its order) when this returns.
    pub(crate) async fn queue_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<Pending<TranscriptEntry>> {
        let (done, answer) = oneshot::channel();
        self.submit(Job::Transcript {
            fence: self.fence.clone(),
            document_id,
            entry: entry.clone(),
            done,
        })
        .await?;
        Ok(Box::pin(group::answer(answer)))
    }

    /// [`TranscriptStore::append_transcript`](crate::TranscriptStore::append_transcript) inside
    /// a batch's transaction. The outer error breaks the transaction; the inner one is this
    /// job's alone.
    /// `locked`: the documents whose row this transaction has locked already (each is locked,
    /// and found, once per batch).
    async fn append_transcript_in(
        tx: &mut Transaction<'static, DB>,
        locked: &mut Vec<Uuid>,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<StoreResult<TranscriptEntry>> {
        // Appenders to one document queue on its row lock (in SQLite, the write lock); under
        // PostgreSQL's READ COMMITTED the INSERT's fresh snapshot then sees every entry
        // committed before the lock was granted, so each numbers from the one before it (and
        // from those earlier in its own batch).
        if !locked.contains(&document_id) {
            if !Self::document_exists(tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
                return Ok(Err(StoreError::NotFound("document")));
            }
            locked.push(document_id);
        }
        let entry = &entry.storable();
        if !entry.attachments.is_empty() {
            // A repeated append finds its entry before its files (sent by it) are checked again.
            if let Some(key) = &entry.key {
                if let Some(made) = Self::made_by_key(tx, document_id, key).await? {
                    return Ok(Ok(made));
                }
            }
            if let Err(e) = Self::check_sendable_in(tx, document_id, entry).await? {
                return Ok(Err(e));
            }
        }
        let inserted: Option<i64> = sqlx::query_scalar(APPEND_TRANSCRIPT)
            .bind(DB::Id::from(document_id))
            .bind(&entry.author_login)
            .bind(&entry.kind)
            .bind(&entry.body)
            .bind(entry.created_at_ms)
            .bind(&entry.key)
            .bind(&entry.refs)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("appending to a transcript", e))?;
        let Some(seq) = inserted else {
            // Not inserted: the key's entry is there, and stays (the row lock is held).
            let made = match &entry.key {
                Some(key) => Self::made_by_key(tx, document_id, key).await?,
                None => None,
            };
            return made.map(Ok).ok_or_else(|| {
                StoreError::Backend("an append was refused for a key with no entry".into())
            });
        };
        for id in &entry.attachments {
            sqlx::query(MARK_SENT)
                .bind(seq)
                .bind(DB::Id::from(*id))
                .execute(&mut **tx)
                .await
                .map_err(|e| sqlx_error("marking a file sent", e))?;
        }
        Ok(Ok(entry.saved(document_id, seq)))
    }

    /// The entry document `document_id`'s append with key `key` made, if any.
    async fn made_by_key(
        tx: &mut Transaction<'static, DB>,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>> {
        let made: Option<TranscriptRow<DB::Id>> = sqlx::query_as(&MADE_BY_KEY)
            .bind(DB::Id::from(document_id))
            .bind(key)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading an append key", e))?;
        Ok(made.map(Into::into))
    }

    /// Whether the files `entry` sends may be sent by its author, read under the document's
    /// row lock its append holds (see [`crate::check_sendable`]).
    async fn check_sendable_in(
        tx: &mut Transaction<'static, DB>,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<StoreResult<()>> {
        let mut found = Vec::with_capacity(entry.attachments.len());
        for id in &entry.attachments {
            let row: Option<AttachmentRow<DB::Id>> = sqlx::query_as(&FILE_TO_SEND)
                .bind(DB::Id::from(*id))
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| sqlx_error("reading a file to send", e))?;
            found.push(row.map(Attachment::from));
        }
        Ok(crate::check_sendable(
            found.iter().map(Option::as_ref),
            entry.author_login.as_deref(),
        ))
    }

    pub(crate) async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64> {
        let seq: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(seq), 0) FROM chat_transcript WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_one(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a transcript's newest entry", e))?;
        Ok(seq)
    }

    pub(crate) async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let sql = format!(
            "SELECT {TRANSCRIPT_COLUMNS} FROM chat_transcript \
             WHERE document_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        );
        let rows: Vec<TranscriptRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .bind(after_seq)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a transcript", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn transcript_by_key(
        &self,
        document_id: Uuid,
        key: &str,
    ) -> StoreResult<Option<TranscriptEntry>> {
        let row: Option<TranscriptRow<DB::Id>> = sqlx::query_as(&MADE_BY_KEY)
            .bind(DB::Id::from(document_id))
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a transcript entry by its key", e))?;
        Ok(row.map(Into::into))
    }

    // --- OwnershipStore ---

    pub(crate) async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership> {
        let sql =
            format!("SELECT {OWNERSHIP_COLUMNS} FROM planner_ownership WHERE document_id = $1");
        let row: Option<OwnershipRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading ownership", e))?;
        row.map(Into::into).ok_or(StoreError::NotFound("document"))
    }

    pub(crate) async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim> {
        self.write(|done| Job::Claim {
            fence: self.fence.clone(),
            document_id,
            holder: holder.clone(),
            now_ms,
            done,
        })
        .await
    }

    /// [`OwnershipStore::claim_ownership`](crate::OwnershipStore::claim_ownership) inside a
    /// batch's transaction. The outer error breaks the transaction; the inner one is this job's
    /// alone.
    async fn claim_ownership_in(
        tx: &mut Transaction<'static, DB>,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<StoreResult<Claim>> {
        // The guard is in the WHERE clause: free, or already this account's. A claimer that
        // waited on a concurrent winner's row lock (PostgreSQL) re-checks the guard against the
        // winner's row and matches nothing. The generation advances only when the row was free:
        // SET expressions read the row's values before the update.
        let (sql, read) = (CLAIM.as_str(), OWNERSHIP.as_str());
        // Under READ COMMITTED each statement sees what committed before it began, so trying
        // again inside the same transaction sees the release that made the first try miss.
        for _ in 0..RACE_RETRIES {
            let claimed: Option<OwnershipRow<DB::Id>> = sqlx::query_as(sql)
                .bind(DB::Id::from(document_id))
                .bind(DB::Id::from(holder.account_id))
                .bind(&holder.login)
                .bind(DB::Id::from(holder.browser_login_id))
                .bind(now_ms)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| sqlx_error("claiming ownership", e))?;
            if let Some(row) = claimed {
                return Ok(Ok(Claim::Claimed(row.into())));
            }
            let current: Option<Ownership> = sqlx::query_as::<_, OwnershipRow<DB::Id>>(read)
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| sqlx_error("reading ownership", e))?
                .map(Into::into);
            match current {
                None => return Ok(Err(StoreError::NotFound("document"))),
                Some(current) => match &current.holder {
                    Some(other) if other.account_id != holder.account_id => {
                        return Ok(Ok(Claim::HeldByOther(current)))
                    }
                    // Released (or taken by this account) between the two statements: try
                    // again.
                    _ => continue,
                },
            }
        }
        Ok(Err(StoreError::Backend(
            "claiming ownership: the document kept changing hands".into(),
        )))
    }

    pub(crate) async fn release_ownership(
        &self,
        document_id: Uuid,
        generation: i64,
    ) -> StoreResult<Release> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE planner_ownership SET holder_account_id = NULL, holder_login = NULL, \
             holder_browser_login_id = NULL, claimed_at_ms = NULL \
             WHERE document_id = $1 AND holder_account_id IS NOT NULL AND generation = $2",
        )
        .bind(DB::Id::from(document_id))
        .bind(generation)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("releasing ownership", e))?;
        if DB::rows_affected(&done) == 1 {
            tx.commit()
                .await
                .map_err(|e| sqlx_error("committing a release", e))?;
            return Ok(Release::Released);
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT generation FROM planner_ownership WHERE document_id = $1")
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading ownership", e))?;
        match current {
            Some(current_generation) => Ok(Release::Refused { current_generation }),
            None => Err(StoreError::NotFound("document")),
        }
    }

    pub(crate) async fn clear_all_ownership(&self, reach: Reach) -> StoreResult<u64> {
        let changed = self
            .write_one(
                sqlx::query(
                    "UPDATE planner_ownership SET holder_account_id = NULL, holder_login = NULL, \
             holder_browser_login_id = NULL, claimed_at_ms = NULL \
             WHERE holder_account_id IS NOT NULL \
             AND ($1 IS NULL OR planner_ownership.document_id = $1)",
                )
                .bind(reach.document().map(DB::Id::from)),
                ("clearing ownership", "committing cleared ownership"),
            )
            .await?;
        Ok(changed)
    }

    pub(crate) async fn clear_unheld_ownership(&self, reach: Reach) -> StoreResult<u64> {
        let changed = self
            .write_one(
                sqlx::query(
                    "UPDATE planner_ownership SET holder_account_id = NULL, holder_login = NULL, \
             holder_browser_login_id = NULL, claimed_at_ms = NULL \
             WHERE holder_account_id IS NOT NULL \
             AND ($1 IS NULL OR planner_ownership.document_id = $1) AND NOT EXISTS (\
             SELECT 1 FROM planner_link_holds h JOIN browser_login_credentials c \
             ON c.login_id = h.browser_login_id \
             WHERE h.document_id = planner_ownership.document_id \
             AND h.account_id = planner_ownership.holder_account_id \
             AND h.browser_login_id = planner_ownership.holder_browser_login_id \
             AND c.sealed IS NOT NULL)",
                )
                .bind(reach.document().map(DB::Id::from)),
                ("clearing unheld ownership", "committing cleared ownership"),
            )
            .await?;
        Ok(changed)
    }

    // --- HoldStore ---

    pub(crate) async fn put_link_hold(&self, hold: &LinkHold) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, hold.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        sqlx::query(
            "INSERT INTO planner_link_holds (document_id, account_id, login, browser_login_id, \
             generation, held, written_at_ms, handover_until_ms, machine_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (document_id) DO UPDATE SET account_id = excluded.account_id, \
             login = excluded.login, browser_login_id = excluded.browser_login_id, \
             generation = excluded.generation, held = excluded.held, \
             written_at_ms = excluded.written_at_ms, handover_until_ms = excluded.handover_until_ms, \
             machine_id = excluded.machine_id",
        )
        .bind(DB::Id::from(hold.document_id))
        .bind(DB::Id::from(hold.account_id))
        .bind(&hold.login)
        .bind(hold.browser_login_id.map(DB::Id::from))
        .bind(hold.generation)
        .bind(&hold.held)
        .bind(hold.written_at_ms)
        .bind(hold.handover_until_ms)
        .bind(hold.machine_id.map(DB::Id::from))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("writing a link hold", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a link hold", e))
    }

    pub(crate) async fn link_holds(&self) -> StoreResult<Vec<LinkHold>> {
        let rows: Vec<HoldRow<DB::Id>> = sqlx::query_as(
            "SELECT document_id, account_id, login, browser_login_id, generation, held, \
             written_at_ms, handover_until_ms, machine_id FROM planner_link_holds \
             ORDER BY document_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading link holds", e))?;
        let mut holds: Vec<LinkHold> = rows.into_iter().map(Into::into).collect();
        // By id as a UUID, whatever the column's collation.
        holds.sort_by_key(|h| h.document_id);
        Ok(holds)
    }

    pub(crate) async fn end_handover(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        let changed = self
            .write_one(
                sqlx::query(
                    "UPDATE planner_link_holds SET handover_until_ms = NULL \
             WHERE document_id = $1 AND written_at_ms = $2 AND handover_until_ms IS NOT NULL",
                )
                .bind(DB::Id::from(document_id))
                .bind(written_at_ms),
                (
                    "ending a hand-over window",
                    "committing an ended hand-over window",
                ),
            )
            .await?;
        Ok(changed > 0)
    }

    pub(crate) async fn delete_link_hold(
        &self,
        document_id: Uuid,
        written_at_ms: UnixMillis,
    ) -> StoreResult<bool> {
        let changed = self
            .write_one(
                sqlx::query(
                    "DELETE FROM planner_link_holds WHERE document_id = $1 AND written_at_ms = $2",
                )
                .bind(DB::Id::from(document_id))
                .bind(written_at_ms),
                ("deleting a link hold", "committing a deleted link hold"),
            )
            .await?;
        Ok(changed > 0)
    }

    // --- MachineStore ---

    pub(crate) async fn pair_machine(
        &self,
        machine: &crate::NewMachine,
    ) -> StoreResult<crate::Machine> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO machines (id, owner_account_id, name, release, credential_revision, \
             sealed, created_at_ms) VALUES ($1, $2, $3, $4, 1, $5, $6)",
        )
        .bind(DB::Id::from(machine.id))
        .bind(DB::Id::from(machine.owner_account_id))
        .bind(crate::storable(&machine.name).into_owned())
        .bind(
            machine
                .release
                .as_deref()
                .map(|r| crate::storable(r).into_owned()),
        )
        .bind(&machine.sealed)
        .bind(machine.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("account"),
            Some(ErrorKind::UniqueViolation) => {
                StoreError::Conflict("machine id already exists".into())
            }
            _ => sqlx_error("pairing a machine", e),
        })?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a paired machine", e))?;
        self.machine(machine.id)
            .await?
            .ok_or(StoreError::NotFound("machine"))
    }

    pub(crate) async fn machine(&self, id: Uuid) -> StoreResult<Option<crate::Machine>> {
        let sql = format!("{MACHINE_SELECT} WHERE m.id = $1");
        let row: Option<MachineRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a machine", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn machine_credential(&self, id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        sqlx::query_as("SELECT credential_revision, sealed FROM machines WHERE id = $1")
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a machine's authorization", e))
    }

    pub(crate) async fn set_machine_credential(
        &self,
        id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
        release: Option<&str>,
    ) -> StoreResult<Option<i64>> {
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT credential_revision FROM machines WHERE id = $1{}",
            DB::FOR_NO_KEY_UPDATE
        );
        let revision: Option<i64> = sqlx::query_scalar(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a machine", e))?;
        match revision {
            None => return Err(StoreError::NotFound("machine")),
            Some(r) if r != expected_revision => return Ok(None),
            Some(_) => {}
        }
        sqlx::query(
            "UPDATE machines SET credential_revision = credential_revision + 1, sealed = $2, \
             release = COALESCE($3, release) WHERE id = $1",
        )
        .bind(DB::Id::from(id))
        .bind(sealed)
        .bind(release.map(|r| crate::storable(r).into_owned()))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("writing a machine's authorization", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a machine's authorization", e))?;
        Ok(Some(expected_revision + 1))
    }

    pub(crate) async fn machines_of(&self, account_id: Uuid) -> StoreResult<Vec<crate::Machine>> {
        let sql = format!(
            "{MACHINE_SELECT} WHERE m.owner_account_id = $1 \
             OR m.id IN (SELECT machine_id FROM machine_shares WHERE account_id = $1) \
             ORDER BY CASE WHEN m.owner_account_id = $1 THEN 0 ELSE 1 END, \
             m.created_at_ms, m.id"
        );
        let rows: Vec<MachineRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(account_id))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account's machines", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn share_machine(
        &self,
        id: Uuid,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let sql = format!("SELECT id FROM machines WHERE id = $1{}", DB::FOR_SHARE);
        let found: Option<(DB::Id,)> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a machine", e))?;
        if found.is_none() {
            return Err(StoreError::NotFound("machine"));
        }
        let done = sqlx::query(
            "INSERT INTO machine_shares (machine_id, account_id, shared_at_ms) \
             VALUES ($1, $2, $3) ON CONFLICT (machine_id, account_id) DO NOTHING",
        )
        .bind(DB::Id::from(id))
        .bind(DB::Id::from(account_id))
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("account"),
            _ => sqlx_error("sharing a machine", e),
        })?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a machine's share", e))?;
        Ok(DB::rows_affected(&done) > 0)
    }

    pub(crate) async fn unshare_machine(&self, id: Uuid, account_id: Uuid) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done =
            sqlx::query("DELETE FROM machine_shares WHERE machine_id = $1 AND account_id = $2")
                .bind(DB::Id::from(id))
                .bind(DB::Id::from(account_id))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("taking a machine's share away", e))?;
        if DB::rows_affected(&done) == 0 {
            return Ok(false);
        }
        for statement in [
            "DELETE FROM planner_credentials WHERE machine_id = $1 AND document_id IN \
             (SELECT document_id FROM document_machines WHERE machine_id = $1 \
             AND chosen_by_account_id = $2)",
            "DELETE FROM document_machines WHERE machine_id = $1 AND chosen_by_account_id = $2",
            "DELETE FROM machine_favourites WHERE machine_id = $1 AND account_id = $2",
        ] {
            sqlx::query(statement)
                .bind(DB::Id::from(id))
                .bind(DB::Id::from(account_id))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("taking a teammate's choices of a machine", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a machine's unsharing", e))?;
        Ok(true)
    }

    pub(crate) async fn machine_shares(&self, id: Uuid) -> StoreResult<Vec<Account>> {
        let rows: Vec<AccountRow<DB::Id>> = sqlx::query_as(
            "SELECT a.id, a.github_user_id, a.login, a.created_at_ms FROM machine_shares s \
             JOIN accounts a ON a.id = s.account_id WHERE s.machine_id = $1 \
             ORDER BY s.shared_at_ms, a.id",
        )
        .bind(DB::Id::from(id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a machine's shares", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn set_favourite_machine(
        &self,
        account_id: Uuid,
        machine_id: Option<Uuid>,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        match machine_id {
            Some(m) => {
                sqlx::query(
                    "INSERT INTO machine_favourites (account_id, machine_id) VALUES ($1, $2) \
                     ON CONFLICT (account_id) DO UPDATE SET machine_id = excluded.machine_id",
                )
                .bind(DB::Id::from(account_id))
                .bind(DB::Id::from(m))
                .execute(&mut *tx)
                .await
                .map_err(|e| match sqlx_error_kind(&e) {
                    Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("machine"),
                    _ => sqlx_error("choosing a favourite machine", e),
                })?;
            }
            None => {
                sqlx::query("DELETE FROM machine_favourites WHERE account_id = $1")
                    .bind(DB::Id::from(account_id))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("clearing a favourite machine", e))?;
            }
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a favourite machine", e))
    }

    pub(crate) async fn favourite_machine(&self, account_id: Uuid) -> StoreResult<Option<Uuid>> {
        let row: Option<(DB::Id,)> =
            sqlx::query_as("SELECT machine_id FROM machine_favourites WHERE account_id = $1")
                .bind(DB::Id::from(account_id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a favourite machine", e))?;
        Ok(row.map(|(m,)| m.into()))
    }

    pub(crate) async fn choose_machine(
        &self,
        document_id: Uuid,
        choice: Option<&crate::MachineChoice>,
    ) -> StoreResult<Option<crate::MachineChoice>> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let before = Self::read_choice(&mut *tx, document_id).await?;
        match choice {
            Some(c) => {
                sqlx::query(
                    "INSERT INTO document_machines (document_id, machine_id, \
                     chosen_by_account_id, chosen_by, chosen_at_ms, by_default) \
                     VALUES ($1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (document_id) DO UPDATE SET machine_id = excluded.machine_id, \
                     chosen_by_account_id = excluded.chosen_by_account_id, \
                     chosen_by = excluded.chosen_by, chosen_at_ms = excluded.chosen_at_ms, \
                     by_default = excluded.by_default",
                )
                .bind(DB::Id::from(document_id))
                .bind(DB::Id::from(c.machine_id))
                .bind(DB::Id::from(c.chosen_by_account_id))
                .bind(&c.chosen_by)
                .bind(c.chosen_at_ms)
                .bind(c.by_default)
                .execute(&mut *tx)
                .await
                .map_err(|e| match sqlx_error_kind(&e) {
                    Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("machine"),
                    _ => sqlx_error("choosing a document's machine", e),
                })?;
            }
            None => {
                sqlx::query("DELETE FROM document_machines WHERE document_id = $1")
                    .bind(DB::Id::from(document_id))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("clearing a document's machine", e))?;
            }
        }
        if let Some(b) = &before {
            if choice.map(|c| c.machine_id) != Some(b.machine_id) {
                sqlx::query(
                    "DELETE FROM planner_credentials WHERE machine_id = $1 AND document_id = $2",
                )
                .bind(DB::Id::from(b.machine_id))
                .bind(DB::Id::from(document_id))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("taking an earlier machine's credentials", e))?;
            }
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a document's machine", e))?;
        Ok(before)
    }

    async fn read_choice<'e, E>(
        executor: E,
        document_id: Uuid,
    ) -> StoreResult<Option<crate::MachineChoice>>
    where
        E: Executor<'e, Database = DB>,
    {
        let row: Option<ChoiceRow<DB::Id>> = sqlx::query_as(&format!(
            "SELECT {CHOICE_COLUMNS} FROM document_machines WHERE document_id = $1"
        ))
        .bind(DB::Id::from(document_id))
        .fetch_optional(executor)
        .await
        .map_err(|e| sqlx_error("reading a document's machine", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn machine_choice(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<crate::MachineChoice>> {
        Self::read_choice(&self.pool, document_id).await
    }

    pub(crate) async fn choose_default_machine(
        &self,
        choice: &crate::MachineChoice,
    ) -> StoreResult<(crate::MachineChoice, bool)> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, choice.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let written = sqlx::query(
            "INSERT INTO document_machines (document_id, machine_id, chosen_by_account_id, \
             chosen_by, chosen_at_ms, by_default) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (document_id) DO NOTHING",
        )
        .bind(DB::Id::from(choice.document_id))
        .bind(DB::Id::from(choice.machine_id))
        .bind(DB::Id::from(choice.chosen_by_account_id))
        .bind(&choice.chosen_by)
        .bind(choice.chosen_at_ms)
        .bind(true)
        .execute(&mut *tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("machine"),
            _ => sqlx_error("storing Default machine's choice", e),
        })?;
        let written = DB::rows_affected(&written);
        let now = Self::read_choice(&mut *tx, choice.document_id)
            .await?
            .ok_or(StoreError::NotFound("document"))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing Default machine's choice", e))?;
        Ok((now, written == 1))
    }

    pub(crate) async fn withdraw_default_machine(
        &self,
        document_id: Uuid,
        machine_id: Uuid,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let gone = sqlx::query(
            "DELETE FROM document_machines WHERE document_id = $1 AND machine_id = $2 \
             AND by_default = $3",
        )
        .bind(DB::Id::from(document_id))
        .bind(DB::Id::from(machine_id))
        .bind(true)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("withdrawing Default machine's choice", e))?;
        let gone = DB::rows_affected(&gone);
        if gone == 1 {
            sqlx::query(
                "DELETE FROM planner_credentials WHERE machine_id = $1 AND document_id = $2",
            )
            .bind(DB::Id::from(machine_id))
            .bind(DB::Id::from(document_id))
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("taking Default machine's credentials", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing Default machine's withdrawal", e))?;
        Ok(gone == 1)
    }

    pub(crate) async fn default_machine_choices(&self) -> StoreResult<Vec<crate::MachineChoice>> {
        let rows: Vec<ChoiceRow<DB::Id>> = sqlx::query_as(&format!(
            "SELECT {CHOICE_COLUMNS} FROM document_machines WHERE by_default = $1 \
             ORDER BY chosen_at_ms, document_id"
        ))
        .bind(true)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading Default machine's choices", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn machine_documents(
        &self,
        machine_id: Uuid,
    ) -> StoreResult<Vec<crate::MachineChoice>> {
        let rows: Vec<ChoiceRow<DB::Id>> = sqlx::query_as(&format!(
            "SELECT {CHOICE_COLUMNS} FROM document_machines WHERE machine_id = $1 \
             ORDER BY chosen_at_ms, document_id"
        ))
        .bind(DB::Id::from(machine_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a machine's documents", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn put_planner_credential(
        &self,
        credential: &crate::PlannerCredential,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        // The machine's row lock serialises its credential writes, so the trim below sees every
        // credential of the pair that committed before it.
        let sql = format!(
            "SELECT id FROM machines WHERE id = $1{}",
            DB::FOR_NO_KEY_UPDATE
        );
        let found: Option<(DB::Id,)> = sqlx::query_as(&sql)
            .bind(DB::Id::from(credential.machine_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a machine", e))?;
        if found.is_none() {
            return Err(StoreError::NotFound("machine"));
        }
        sqlx::query(
            "INSERT INTO planner_credentials (digest, machine_id, document_id, issued_at_ms, \
             expires_at_ms) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&credential.digest)
        .bind(DB::Id::from(credential.machine_id))
        .bind(DB::Id::from(credential.document_id))
        .bind(credential.issued_at_ms)
        .bind(credential.expires_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("document"),
            Some(ErrorKind::UniqueViolation) => {
                StoreError::Conflict("planner credential already exists".into())
            }
            _ => sqlx_error("storing a Planner credential", e),
        })?;
        sqlx::query(
            "DELETE FROM planner_credentials WHERE machine_id = $1 AND document_id = $2 \
             AND digest NOT IN (SELECT digest FROM planner_credentials \
             WHERE machine_id = $1 AND document_id = $2 \
             ORDER BY issued_at_ms DESC, digest DESC LIMIT $3)",
        )
        .bind(DB::Id::from(credential.machine_id))
        .bind(DB::Id::from(credential.document_id))
        .bind(crate::PLANNER_CREDENTIALS_KEPT)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("trimming a machine's Planner credentials", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a Planner credential", e))
    }

    pub(crate) async fn planner_credential(
        &self,
        digest: &str,
    ) -> StoreResult<Option<crate::PlannerCredential>> {
        let row: Option<CredentialRow<DB::Id>> = sqlx::query_as(
            "SELECT digest, machine_id, document_id, issued_at_ms, expires_at_ms \
             FROM planner_credentials WHERE digest = $1",
        )
        .bind(digest)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a Planner credential", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn record_connector_poll(
        &self,
        poll: &crate::ConnectorPoll,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        // A machine unpaired meanwhile records nothing; an older poll arriving late changes
        // nothing.
        sqlx::query(
            "INSERT INTO connector_polls (machine_id, polled_at_ms, auto_build) \
             SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM machines WHERE id = $1) \
             ON CONFLICT (machine_id) DO UPDATE \
             SET polled_at_ms = excluded.polled_at_ms, auto_build = excluded.auto_build \
             WHERE connector_polls.polled_at_ms <= excluded.polled_at_ms",
        )
        .bind(DB::Id::from(poll.machine_id))
        .bind(poll.polled_at_ms)
        .bind(poll.auto_build)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("recording a connector's poll", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a connector's poll", e))?;
        Ok(())
    }

    pub(crate) async fn connector_polls_since(
        &self,
        since_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ConnectorPoll>> {
        let rows: Vec<(DB::Id, i64, bool)> = sqlx::query_as(
            "SELECT machine_id, polled_at_ms, auto_build FROM connector_polls \
             WHERE polled_at_ms >= $1 ORDER BY machine_id",
        )
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading connectors' polls", e))?;
        Ok(rows
            .into_iter()
            .map(
                |(machine_id, polled_at_ms, auto_build)| crate::ConnectorPoll {
                    machine_id: machine_id.into(),
                    polled_at_ms,
                    auto_build,
                },
            )
            .collect())
    }

    // --- RequestStore ---

    pub(crate) async fn claim_request(
        &self,
        key: &crate::RequestKey,
        digest: &str,
        now_ms: UnixMillis,
        expires_at_ms: UnixMillis,
    ) -> StoreResult<crate::RequestClaim> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM kept_requests WHERE expires_at_ms <= $1")
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("sweeping expired request keys", e))?;
        let done = sqlx::query(
            "INSERT INTO kept_requests \
             (scope, holder, request_key, digest, answer, since_ms, expires_at_ms) \
             VALUES ($1, $2, $3, $4, NULL, $5, $6) \
             ON CONFLICT (scope, holder, request_key) DO NOTHING",
        )
        .bind(crate::storable(&key.scope).into_owned())
        .bind(crate::storable(&key.holder).into_owned())
        .bind(crate::storable(&key.key).into_owned())
        .bind(digest)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("claiming a request key", e))?;
        let claimed = DB::rows_affected(&done) == 1;
        let claim = if claimed {
            crate::RequestClaim::Claimed { since_ms: now_ms }
        } else {
            let (digest, answer, since_ms, expires_at_ms): (String, Option<String>, i64, i64) =
                sqlx::query_as(
                    "SELECT digest, answer, since_ms, expires_at_ms FROM kept_requests \
                     WHERE scope = $1 AND holder = $2 AND request_key = $3",
                )
                .bind(crate::storable(&key.scope).into_owned())
                .bind(crate::storable(&key.holder).into_owned())
                .bind(crate::storable(&key.key).into_owned())
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a request key's claim", e))?;
            crate::RequestClaim::Held(crate::KeptRequest {
                digest,
                answer,
                since_ms,
                expires_at_ms,
            })
        };
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a request key's claim", e))?;
        Ok(claim)
    }

    pub(crate) async fn answer_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
        answer: &str,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE kept_requests SET answer = $5 \
             WHERE scope = $1 AND holder = $2 AND request_key = $3 AND since_ms = $4",
        )
        .bind(crate::storable(&key.scope).into_owned())
        .bind(crate::storable(&key.holder).into_owned())
        .bind(crate::storable(&key.key).into_owned())
        .bind(since_ms)
        .bind(crate::storable(answer).into_owned())
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("recording a request's answer", e))?;
        let answered = DB::rows_affected(&done) == 1;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a request's answer", e))?;
        Ok(answered)
    }

    pub(crate) async fn release_request(
        &self,
        key: &crate::RequestKey,
        since_ms: UnixMillis,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "DELETE FROM kept_requests \
             WHERE scope = $1 AND holder = $2 AND request_key = $3 AND since_ms = $4",
        )
        .bind(crate::storable(&key.scope).into_owned())
        .bind(crate::storable(&key.holder).into_owned())
        .bind(crate::storable(&key.key).into_owned())
        .bind(since_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("releasing a request key", e))?;
        let released = DB::rows_affected(&done) == 1;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a request key's release", e))?;
        Ok(released)
    }

    pub(crate) async fn unpair_machine(&self, id: Uuid) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let sql = format!("SELECT id FROM machines WHERE id = $1{}", DB::FOR_UPDATE);
        let found: Option<(DB::Id,)> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a machine", e))?;
        if found.is_none() {
            return Ok(false);
        }
        for statement in [
            "UPDATE implementation_builds SET state = 'failed', reason = 'machine-revoked' \
             WHERE machine_id = $1 AND state IN ('queued', 'launching')",
            "DELETE FROM planner_credentials WHERE machine_id = $1",
            "DELETE FROM connector_polls WHERE machine_id = $1",
            "DELETE FROM document_machines WHERE machine_id = $1",
            "DELETE FROM machine_favourites WHERE machine_id = $1",
            "DELETE FROM machine_shares WHERE machine_id = $1",
            "DELETE FROM machines WHERE id = $1",
        ] {
            sqlx::query(statement)
                .bind(DB::Id::from(id))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("unpairing a machine", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an unpaired machine", e))?;
        Ok(true)
    }

    // --- GraphStore ---

    pub(crate) async fn graph_versions(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::GraphVersion>> {
        let rows: Vec<GraphRow<DB::Id>> = sqlx::query_as(&GRAPH_VERSIONS)
            .bind(DB::Id::from(document_id))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a graph", e))?;
        rows.into_iter().map(graph_version_of).collect()
    }

    /// Reads the document's versions under its row lock, applies [`crate::graphs::apply`] and
    /// saves what it returns, in one transaction.
    pub(crate) async fn change_graph(
        &self,
        document_id: Uuid,
        change: &crate::GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::GraphVersion, crate::GraphRefusal>> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let saved = match Self::apply_graph_change(&mut tx, document_id, change, now_ms).await? {
            Ok(saved) => saved,
            // Dropped unfinished: rolled back, nothing written.
            Err(refusal) => return Ok(Err(refusal)),
        };
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a graph change", e))?;
        Ok(Ok(saved))
    }

    /// In `tx`, which holds the document's row lock: applies `change` to the document's versions
    /// and saves what it makes; the version it made or changed, or why it was refused (nothing
    /// written).
    async fn apply_graph_change(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        change: &crate::GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::GraphVersion, crate::GraphRefusal>> {
        let rows: Vec<GraphRow<DB::Id>> = sqlx::query_as(&GRAPH_VERSIONS)
            .bind(DB::Id::from(document_id))
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading a graph", e))?;
        let versions = rows
            .into_iter()
            .map(graph_version_of)
            .collect::<StoreResult<Vec<_>>>()?;
        let saved: Vec<crate::GraphVersion> =
            match crate::graphs::apply(document_id, &versions, change, now_ms) {
                Ok(saved) => saved
                    .into_iter()
                    .map(crate::GraphVersion::storable)
                    .collect(),
                // Dropped unfinished: rolled back, nothing written.
                Err(refusal) => return Ok(Err(refusal)),
            };
        for version in &saved {
            sqlx::query(
                "INSERT INTO implementation_graphs (document_id, graph_version, plan_revision, \
                 graph_revision, state, definition, verified, revision_requested, run_id, \
                 created_at_ms, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (document_id, graph_version) DO UPDATE SET \
                 plan_revision = excluded.plan_revision, graph_revision = excluded.graph_revision, \
                 state = excluded.state, definition = excluded.definition, \
                 verified = excluded.verified, revision_requested = excluded.revision_requested, \
                 run_id = excluded.run_id, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(DB::Id::from(document_id))
            .bind(version.counters.graph_version)
            .bind(version.counters.plan_revision)
            .bind(version.counters.graph_revision)
            .bind(version.state.as_str())
            .bind(&version.definition)
            .bind(version.verified)
            .bind(version.revision_requested)
            .bind(&version.run_id)
            .bind(version.created_at_ms)
            .bind(version.updated_at_ms)
            .execute(&mut **tx)
            .await
            .map_err(|e| sqlx_error("saving a graph version", e))?;
        }
        let mut saved = saved.into_iter();
        Ok(Ok(saved
            .next()
            .expect("a change saves the version it made")))
    }

    pub(crate) async fn start_implementation(
        &self,
        document_id: Uuid,
        counters: crate::GraphCounters,
        run_id: &str,
        progress: &str,
        build: Option<Uuid>,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::ImplementationRun, crate::GraphRefusal>> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        if let Some(build) = build {
            // Locked, so the sweep's expiry of it commits before this claim or after it.
            let sql = format!(
                "SELECT state FROM implementation_builds WHERE id = $1 AND document_id = $2 \
                 AND kind = 'build'{}",
                DB::FOR_UPDATE
            );
            let state: Option<(String,)> = sqlx::query_as(&sql)
                .bind(DB::Id::from(build))
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a claim's build", e))?;
            match state {
                Some((state,)) if state == "launching" => {}
                other => {
                    return Ok(Err(crate::GraphRefusal::BuildEnded {
                        state: other.map_or_else(|| "unknown".to_owned(), |(s,)| s),
                    }))
                }
            }
        }
        let claim = crate::GraphChange::Claim {
            counters,
            run_id: run_id.to_owned(),
        };
        if let Err(refusal) = Self::apply_graph_change(&mut tx, document_id, &claim, now_ms).await?
        {
            return Ok(Err(refusal));
        }
        let run = crate::graphs::new_run(
            document_id,
            counters.graph_version,
            run_id,
            progress,
            now_ms,
        );
        sqlx::query(
            "INSERT INTO implementation_runs (run_id, document_id, graph_version, revision, \
             progress, ended, started_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
        )
        .bind(&run.run_id)
        .bind(DB::Id::from(document_id))
        .bind(run.graph_version)
        .bind(run.revision)
        .bind(&run.progress)
        .bind(run.started_at_ms)
        .bind(run.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("saving an implementation run", e))?;
        // The launching build of the version claimed is claimed by this run.
        sqlx::query(
            "UPDATE implementation_builds SET state = 'claimed', run_id = $1, updated_at_ms = $2 \
             WHERE document_id = $3 AND graph_version = $4 AND state = 'launching' \
             AND kind = 'build'",
        )
        .bind(&run.run_id)
        .bind(now_ms)
        .bind(DB::Id::from(document_id))
        .bind(counters.graph_version)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("marking a build claimed", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an implementation claim", e))?;
        Ok(Ok(run))
    }

    pub(crate) async fn approve_and_queue(
        &self,
        document_id: Uuid,
        approval: &crate::GraphChange,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<(crate::GraphVersion, crate::Build), crate::GraphRefusal>> {
        if !matches!(approval, crate::GraphChange::Approve { .. }) {
            return Err(StoreError::Backend(
                "only an approval queues a build".into(),
            ));
        }
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let approved =
            match Self::apply_graph_change(&mut tx, document_id, approval, now_ms).await? {
                Ok(approved) => approved,
                // Dropped unfinished: rolled back, nothing written.
                Err(refusal) => return Ok(Err(refusal)),
            };
        let queued =
            crate::builds::queued(document_id, approved.counters.graph_version, build, now_ms);
        Self::insert_build(&mut tx, &queued).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an approval and its build", e))?;
        Ok(Ok((approved, queued)))
    }

    /// In `tx`: stores a queued build.
    async fn insert_build(tx: &mut Transaction<'_, DB>, queued: &crate::Build) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO implementation_builds (id, document_id, kind, graph_version, \
             machine_id, requested_by_account_id, requested_by, checkout, state, reason, \
             run_id, before_source, after_source, after_plan_revision, created_at_ms, \
             updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, $10, $11, $12, $13, $14)",
        )
        .bind(DB::Id::from(queued.id))
        .bind(DB::Id::from(queued.document_id))
        .bind(queued.kind.as_str())
        .bind(queued.graph_version)
        .bind(DB::Id::from(queued.machine_id))
        .bind(DB::Id::from(queued.requested_by_account_id))
        .bind(&queued.requested_by)
        .bind(&queued.checkout)
        .bind(queued.state.as_str())
        .bind(queued.change.as_ref().map(|c| c.before.clone()))
        .bind(queued.change.as_ref().map(|c| c.after.clone()))
        .bind(queued.change.as_ref().map(|c| c.plan_revision))
        .bind(queued.created_at_ms)
        .bind(queued.updated_at_ms)
        .execute(&mut **tx)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::UniqueViolation) => {
                StoreError::Conflict(format!("build {} exists", queued.id))
            }
            _ => sqlx_error("queueing a build", e),
        })?;
        Ok(())
    }

    pub(crate) async fn queue_build(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let rows: Vec<GraphRow<DB::Id>> = sqlx::query_as(&GRAPH_VERSIONS)
            .bind(DB::Id::from(document_id))
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a graph", e))?;
        let latest = rows
            .into_iter()
            .map(graph_version_of)
            .collect::<StoreResult<Vec<_>>>()?
            .pop();
        let Some(latest) = latest.filter(|v| v.state == crate::GraphState::Approved && !v.verified)
        else {
            return Ok(Err(crate::QueueRefusal::NotApproved));
        };
        let pending: Option<(DB::Id,)> = sqlx::query_as(
            "SELECT id FROM implementation_builds WHERE document_id = $1 \
             AND state IN ('queued', 'launching') LIMIT 1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a document's pending build", e))?;
        if let Some((id,)) = pending {
            return Ok(Err(crate::QueueRefusal::Pending { build: id.into() }));
        }
        let queued =
            crate::builds::queued(document_id, latest.counters.graph_version, build, now_ms);
        Self::insert_build(&mut tx, &queued).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a queued build", e))?;
        Ok(Ok(queued))
    }

    pub(crate) async fn build(&self, id: Uuid) -> StoreResult<Option<crate::Build>> {
        let row: Option<BuildRow<DB::Id>> =
            sqlx::query_as(&format!("{BUILD_SELECT} WHERE id = $1"))
                .bind(DB::Id::from(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a build", e))?;
        row.map(build_of).transpose()
    }

    pub(crate) async fn machine_builds(&self, machine_id: Uuid) -> StoreResult<Vec<crate::Build>> {
        let rows: Vec<BuildRow<DB::Id>> = sqlx::query_as(&format!(
            "{BUILD_SELECT} WHERE machine_id = $1 AND state = 'queued' ORDER BY created_at_ms, id"
        ))
        .bind(DB::Id::from(machine_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a machine's builds", e))?;
        rows.into_iter().map(build_of).collect()
    }

    pub(crate) async fn document_builds(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::Build>> {
        let rows: Vec<BuildRow<DB::Id>> = sqlx::query_as(&format!(
            "{BUILD_SELECT} WHERE document_id = $1 ORDER BY created_at_ms DESC, id DESC LIMIT $2"
        ))
        .bind(DB::Id::from(document_id))
        .bind(crate::BUILDS_SHOWN)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a document's builds", e))?;
        rows.into_iter().map(build_of).collect()
    }

    /// Moves build `id` from a state in `from` to `to` (with `reason`, or keeping
    /// `bridge_digest`), in one statement that reads it back; `None` when it was in none of them.
    async fn move_build(
        &self,
        id: Uuid,
        from: &str,
        to: crate::BuildState,
        reason: Option<&str>,
        bridge_digest: Option<&str>,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(&format!(
            "UPDATE implementation_builds SET state = $1, reason = COALESCE($2, reason), \
             bridge_digest = COALESCE($3, bridge_digest), updated_at_ms = $4, \
             before_source = CASE WHEN $1 = 'failed' THEN NULL ELSE before_source END, \
             after_source = CASE WHEN $1 = 'failed' THEN NULL ELSE after_source END \
             WHERE id = $5 AND state IN ({from})"
        ))
        .bind(to.as_str())
        .bind(reason.map(str::to_owned))
        .bind(bridge_digest.map(str::to_owned))
        .bind(now_ms)
        .bind(DB::Id::from(id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("moving a build on", e))?;
        if DB::rows_affected(&done) == 0 {
            return Ok(None);
        }
        let row: BuildRow<DB::Id> = sqlx::query_as(&format!("{BUILD_SELECT} WHERE id = $1"))
            .bind(DB::Id::from(id))
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a build", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a build's move", e))?;
        build_of(row).map(Some)
    }

    pub(crate) async fn pick_up_build(
        &self,
        id: Uuid,
        bridge_digest: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.move_build(
            id,
            "'queued'",
            crate::BuildState::Launching,
            None,
            Some(bridge_digest),
            now_ms,
        )
        .await
    }

    pub(crate) async fn build_by_bridge(
        &self,
        bridge_digest: &str,
    ) -> StoreResult<Option<crate::Build>> {
        let row: Option<BuildRow<DB::Id>> =
            sqlx::query_as(&format!("{BUILD_SELECT} WHERE bridge_digest = $1"))
                .bind(crate::storable(bridge_digest).as_ref())
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a build by its bridge", e))?;
        row.map(build_of).transpose()
    }

    pub(crate) async fn fail_build(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<crate::Build>> {
        self.move_build(
            id,
            "'queued', 'launching'",
            crate::BuildState::Failed,
            Some(reason),
            None,
            now_ms,
        )
        .await
    }

    /// In `tx`: `source` (at `plan_revision`, delivered by `build_id`) becomes the document's
    /// built source.
    async fn record_built_source(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        build_id: Uuid,
        plan_revision: i64,
        source: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO built_sources (document_id, build_id, plan_revision, source, \
             recorded_at_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (document_id) DO UPDATE SET build_id = excluded.build_id, \
             plan_revision = excluded.plan_revision, source = excluded.source, \
             recorded_at_ms = excluded.recorded_at_ms",
        )
        .bind(DB::Id::from(document_id))
        .bind(DB::Id::from(build_id))
        .bind(plan_revision)
        .bind(crate::storable(source).as_ref())
        .bind(now_ms)
        .execute(&mut **tx)
        .await
        .map_err(|e| sqlx_error("recording a built source", e))?;
        Ok(())
    }

    async fn built_source_in<'e, E>(
        executor: E,
        document_id: Uuid,
    ) -> StoreResult<Option<crate::BuiltSource>>
    where
        E: sqlx::Executor<'e, Database = DB>,
    {
        let row: Option<BuiltSourceRow<DB::Id>> = sqlx::query_as(
            "SELECT document_id, build_id, plan_revision, source, recorded_at_ms \
             FROM built_sources WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(executor)
        .await
        .map_err(|e| sqlx_error("reading a built source", e))?;
        Ok(row.map(Into::into))
    }

    pub(crate) async fn built_source(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<crate::BuiltSource>> {
        Self::built_source_in(&self.pool, document_id).await
    }

    pub(crate) async fn queue_rebuild(
        &self,
        document_id: Uuid,
        build: &crate::NewBuild,
        after: &str,
        after_plan_revision: i64,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<crate::Build, crate::QueueRefusal>> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let Some(built) = Self::built_source_in(&mut *tx, document_id).await? else {
            return Ok(Err(crate::QueueRefusal::NothingBuilt));
        };
        let rows: Vec<GraphRow<DB::Id>> = sqlx::query_as(&GRAPH_VERSIONS)
            .bind(DB::Id::from(document_id))
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a graph", e))?;
        let versions = rows
            .into_iter()
            .map(graph_version_of)
            .collect::<StoreResult<Vec<_>>>()?;
        if let Some(held) = versions
            .iter()
            .find(|v| v.state == crate::GraphState::Locked)
        {
            return Ok(Err(crate::QueueRefusal::Locked {
                graph_version: held.counters.graph_version,
            }));
        }
        let rows: Vec<BuildRow<DB::Id>> =
            sqlx::query_as(&format!("{BUILD_SELECT} WHERE document_id = $1"))
                .bind(DB::Id::from(document_id))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a document's builds", e))?;
        let builds = rows
            .into_iter()
            .map(build_of)
            .collect::<StoreResult<Vec<_>>>()?;
        if let Some(pending) = builds.iter().find(|b| b.state.is_pending()) {
            return Ok(Err(crate::QueueRefusal::Pending { build: pending.id }));
        }
        for gone in crate::builds::giving_way(&builds) {
            sqlx::query("DELETE FROM implementation_builds WHERE id = $1")
                .bind(DB::Id::from(gone))
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("letting an ended rebuild go", e))?;
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
        Self::insert_build(&mut tx, &queued).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a queued rebuild", e))?;
        Ok(Ok(queued))
    }

    pub(crate) async fn land_rebuild(
        &self,
        id: Uuid,
        definition: &str,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Landing> {
        let mut tx = self.begin_write().await?;
        let found: Option<(DB::Id,)> =
            sqlx::query_as("SELECT document_id FROM implementation_builds WHERE id = $1")
                .bind(DB::Id::from(id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a build", e))?;
        let Some((document_id,)) = found else {
            return Err(StoreError::NotFound("build"));
        };
        let document_id: Uuid = document_id.into();
        // The document's lock orders this landing with every other graph change.
        Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await?;
        // Locked, so the sweep's expiry of it commits before this landing or after it.
        let row: BuildRow<DB::Id> =
            sqlx::query_as(&format!("{BUILD_SELECT} WHERE id = $1{}", DB::FOR_UPDATE))
                .bind(DB::Id::from(id))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a build", e))?;
        let rebuild = build_of(row)?;
        if rebuild.kind == crate::BuildKind::Rebuild && rebuild.state == crate::BuildState::Landed {
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
        let version = match Self::apply_graph_change(&mut tx, document_id, &land, now_ms).await? {
            Ok(version) => version,
            // Dropped unfinished: rolled back, nothing written.
            Err(refusal) => return Ok(crate::Landing::Refused(refusal)),
        };
        Self::record_built_source(
            &mut tx,
            document_id,
            id,
            change.plan_revision,
            &change.after,
            now_ms,
        )
        .await?;
        let run = crate::builds::landed_run(&rebuild, &version, progress, now_ms);
        sqlx::query(
            "INSERT INTO implementation_runs (run_id, document_id, graph_version, revision, \
             progress, ended, started_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&run.run_id)
        .bind(DB::Id::from(document_id))
        .bind(run.graph_version)
        .bind(run.revision)
        .bind(&run.progress)
        .bind(run.ended.map(|e| e.as_str().to_owned()))
        .bind(run.started_at_ms)
        .bind(run.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("saving a landed rebuild's run", e))?;
        sqlx::query(
            "UPDATE implementation_builds SET state = 'landed', graph_version = $2, \
             run_id = $4, before_source = NULL, after_source = NULL, updated_at_ms = $3 \
             WHERE id = $1",
        )
        .bind(DB::Id::from(id))
        .bind(version.counters.graph_version)
        .bind(now_ms)
        .bind(&run.run_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("landing a rebuild", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a landed rebuild", e))?;
        let landed = crate::Build {
            state: crate::BuildState::Landed,
            graph_version: version.counters.graph_version,
            run_id: Some(run.run_id),
            change: None,
            updated_at_ms: now_ms,
            ..rebuild
        };
        Ok(crate::Landing::Landed {
            rebuild: landed,
            version,
        })
    }

    pub(crate) async fn silent_builds(
        &self,
        cutoff_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::Build>> {
        let rows: Vec<BuildRow<DB::Id>> = sqlx::query_as(&format!(
            "{BUILD_SELECT} WHERE state = 'launching' AND updated_at_ms <= $1 \
             ORDER BY created_at_ms, id"
        ))
        .bind(cutoff_ms)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading silent builds", e))?;
        rows.into_iter().map(build_of).collect()
    }

    pub(crate) async fn expire_builds(
        &self,
        reach: Reach,
        cutoff_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::Build>> {
        let mut tx = self.begin_write().await?;
        let rows: Vec<BuildRow<DB::Id>> = sqlx::query_as(&format!(
            "{BUILD_SELECT} WHERE state = 'launching' AND updated_at_ms <= $1 \
             AND ($2 IS NULL OR document_id = $2) \
             ORDER BY created_at_ms, id"
        ))
        .bind(cutoff_ms)
        .bind(reach.document().map(DB::Id::from))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading silent builds", e))?;
        let mut expired = Vec::with_capacity(rows.len());
        for row in rows {
            let build = build_of(row)?;
            // A claim or landing that committed meanwhile wins: the row is left as it made it.
            let done = sqlx::query(
                "UPDATE implementation_builds SET state = 'failed', reason = $2, \
                 before_source = NULL, after_source = NULL, updated_at_ms = $3 \
                 WHERE id = $1 AND state = 'launching'",
            )
            .bind(DB::Id::from(build.id))
            .bind(crate::builds::EXPIRED)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("expiring a build", e))?;
            if DB::rows_affected(&done) == 0 {
                continue;
            }
            expired.push(crate::Build {
                state: crate::BuildState::Failed,
                reason: Some(crate::builds::EXPIRED.to_owned()),
                change: None,
                updated_at_ms: now_ms,
                ..build
            });
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing expired builds", e))?;
        Ok(expired)
    }

    pub(crate) async fn silent_build_runs(
        &self,
        cutoff_ms: UnixMillis,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        let rows: Vec<ImplementationRunRow<DB::Id>> = sqlx::query_as(&format!(
            "{IMPLEMENTATION_RUN} WHERE ended IS NULL AND updated_at_ms <= $1 AND run_id IN \
             (SELECT run_id FROM implementation_builds WHERE kind = 'build' AND state = 'claimed') \
             ORDER BY updated_at_ms, run_id"
        ))
        .bind(cutoff_ms)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading silent build runs", e))?;
        rows.into_iter().map(implementation_run_of).collect()
    }

    pub(crate) async fn implementation_run(
        &self,
        run_id: &str,
    ) -> StoreResult<Option<crate::ImplementationRun>> {
        let row: Option<ImplementationRunRow<DB::Id>> =
            sqlx::query_as(&format!("{IMPLEMENTATION_RUN} WHERE run_id = $1"))
                .bind(crate::storable(run_id).as_ref())
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading an implementation run", e))?;
        row.map(implementation_run_of).transpose()
    }

    pub(crate) async fn implementation_runs(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Vec<crate::ImplementationRun>> {
        let rows: Vec<ImplementationRunRow<DB::Id>> = sqlx::query_as(&format!(
            "{IMPLEMENTATION_RUN} WHERE document_id = $1 ORDER BY started_at_ms, run_id"
        ))
        .bind(DB::Id::from(document_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading implementation runs", e))?;
        rows.into_iter().map(implementation_run_of).collect()
    }

    pub(crate) async fn implementation_report(
        &self,
        run_id: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        sqlx::query_as(
            "SELECT payload, result FROM implementation_reports WHERE run_id = $1 AND key = $2",
        )
        .bind(crate::storable(run_id).as_ref())
        .bind(crate::storable(key).as_ref())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading an implementation report", e))
    }

    /// Locks the run's document row (which orders every change to its graph and runs), then
    /// checks the key and the run's revision, and saves.
    pub(crate) async fn report_implementation(
        &self,
        run_id: &str,
        report: &crate::RunReport,
        now_ms: UnixMillis,
    ) -> StoreResult<crate::Reported> {
        let run_id = crate::storable(run_id);
        let key = crate::storable(&report.key);
        let mut tx = self.begin_write().await?;
        let document: Option<(DB::Id,)> =
            sqlx::query_as("SELECT document_id FROM implementation_runs WHERE run_id = $1")
                .bind(run_id.as_ref())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading an implementation run", e))?;
        let Some((document_id,)) = document else {
            return Err(StoreError::NotFound("implementation run"));
        };
        let document_id: Uuid = document_id.into();
        Self::document_exists(&mut tx, document_id, DB::FOR_NO_KEY_UPDATE).await?;
        let repeated: Option<(String, String)> = sqlx::query_as(
            "SELECT payload, result FROM implementation_reports WHERE run_id = $1 AND key = $2",
        )
        .bind(run_id.as_ref())
        .bind(key.as_ref())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading an implementation report", e))?;
        if let Some((payload, result)) = repeated {
            return Ok(crate::Reported::Repeated { payload, result });
        }
        let row: ImplementationRunRow<DB::Id> =
            sqlx::query_as(&format!("{IMPLEMENTATION_RUN} WHERE run_id = $1"))
                .bind(run_id.as_ref())
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading an implementation run", e))?;
        let run = implementation_run_of(row)?;
        if run.revision != report.base_revision || run.ended.is_some() {
            return Ok(crate::Reported::Moved);
        }
        if let Some(end) = report.end {
            let change = crate::GraphChange::EndRun {
                graph_version: run.graph_version,
                run_id: run.run_id.clone(),
                end,
            };
            // The run holds its version until it ends, so this is never refused.
            if let Err(refusal) =
                Self::apply_graph_change(&mut tx, document_id, &change, now_ms).await?
            {
                return Err(StoreError::Backend(refusal.to_string()));
            }
        }
        let now = crate::graphs::reported(&run, report, now_ms);
        // A browser build's run that delivers records what it built (LIFE-11).
        if let (Some(crate::RunEnd::Verified), Some(delivered)) = (report.end, &report.delivered) {
            let build: Option<(DB::Id,)> = sqlx::query_as(
                "SELECT id FROM implementation_builds WHERE run_id = $1 AND kind = 'build' \
                 LIMIT 1",
            )
            .bind(run_id.as_ref())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a run's build", e))?;
            if let Some((build_id,)) = build {
                Self::record_built_source(
                    &mut tx,
                    document_id,
                    build_id.into(),
                    delivered.plan_revision,
                    &delivered.source,
                    now_ms,
                )
                .await?;
            }
        }
        sqlx::query(
            "UPDATE implementation_runs SET revision = $2, progress = $3, ended = $4, \
             updated_at_ms = $5 WHERE run_id = $1",
        )
        .bind(run_id.as_ref())
        .bind(now.revision)
        .bind(&now.progress)
        .bind(now.ended.map(|e| e.as_str().to_owned()))
        .bind(now.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("saving an implementation run", e))?;
        sqlx::query(
            "INSERT INTO implementation_reports (run_id, key, payload, result, at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run_id.as_ref())
        .bind(key.as_ref())
        .bind(crate::storable(&report.payload).as_ref())
        .bind(crate::storable(&report.result).as_ref())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("saving an implementation report", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an implementation report", e))?;
        Ok(crate::Reported::Saved(now))
    }

    // --- CommentStore ---

    /// Reads `document_id`'s thread `thread_id` in `tx`, locked until commit.
    async fn comment_thread_locked(
        tx: &mut Transaction<'_, DB>,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<crate::CommentThread> {
        let sql = format!(
            "SELECT {COMMENT_THREAD_COLUMNS} FROM comment_threads \
             WHERE id = $1 AND document_id = $2{}",
            DB::FOR_UPDATE
        );
        let row: Option<CommentThreadRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(thread_id))
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading a comment thread", e))?;
        row.map(comment_thread_of)
            .ok_or(StoreError::NotFound("comment thread"))
    }

    async fn insert_comment_note(
        tx: &mut Transaction<'_, DB>,
        note: &crate::CommentNote,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO comment_notes \
             (thread_id, seq, author_login, to_planner, body, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(DB::Id::from(note.thread_id))
        .bind(note.seq)
        .bind(note.author_login.clone())
        .bind(note.to_planner)
        .bind(note.body.clone())
        .bind(note.created_at_ms)
        .execute(&mut **tx)
        .await
        .map_err(|e| sqlx_error("saving a comment note", e))?;
        Ok(())
    }

    pub(crate) async fn start_comment(
        &self,
        thread: &crate::NewCommentThread,
    ) -> StoreResult<crate::ThreadWithNotes> {
        let (started, notes) = thread.started();
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, thread.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let taken = sqlx::query("SELECT 1 FROM comment_threads WHERE id = $1")
            .bind(DB::Id::from(thread.id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a comment thread", e))?;
        if taken.is_some() {
            return Err(StoreError::Conflict("comment thread id taken".into()));
        }
        sqlx::query(
            "INSERT INTO comment_threads \
             (id, document_id, quote, created_by, created_at_ms, replies) \
             VALUES ($1, $2, $3, $4, $5, 0)",
        )
        .bind(DB::Id::from(started.id))
        .bind(DB::Id::from(started.document_id))
        .bind(started.quote.clone())
        .bind(started.created_by.clone())
        .bind(started.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("starting a comment thread", e))?;
        for note in &notes {
            Self::insert_comment_note(&mut tx, note).await?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a comment thread", e))?;
        Ok((started, notes))
    }

    pub(crate) async fn reply_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        note: &crate::NewCommentNote,
        max_replies: i64,
    ) -> StoreResult<crate::Replied> {
        let note = note.storable();
        let mut tx = self.begin_write().await?;
        let mut thread = Self::comment_thread_locked(&mut tx, document_id, thread_id).await?;
        if thread.resolved_at_ms.is_some() {
            return Ok(crate::Replied::Resolved);
        }
        if thread.replies >= max_replies {
            return Ok(crate::Replied::Full);
        }
        thread.replies += 1;
        let saved = note.numbered(thread_id, thread.replies);
        Self::insert_comment_note(&mut tx, &saved).await?;
        sqlx::query("UPDATE comment_threads SET replies = $2 WHERE id = $1")
            .bind(DB::Id::from(thread_id))
            .bind(saved.seq)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("counting a comment reply", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a comment reply", e))?;
        Ok(crate::Replied::Saved(thread, saved))
    }

    pub(crate) async fn resolve_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        by: &str,
        at_ms: UnixMillis,
    ) -> StoreResult<crate::CommentThread> {
        let mut tx = self.begin_write().await?;
        let mut thread = Self::comment_thread_locked(&mut tx, document_id, thread_id).await?;
        if thread.resolved_at_ms.is_none() {
            thread.resolved_by = Some(crate::storable(by).into_owned());
            thread.resolved_at_ms = Some(at_ms);
            sqlx::query(
                "UPDATE comment_threads SET resolved_by = $2, resolved_at_ms = $3 WHERE id = $1",
            )
            .bind(DB::Id::from(thread_id))
            .bind(thread.resolved_by.clone())
            .bind(at_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("resolving a comment thread", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a resolved comment thread", e))?;
        Ok(thread)
    }

    pub(crate) async fn set_comment_result(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        revision: i64,
    ) -> StoreResult<crate::CommentThread> {
        let mut tx = self.begin_write().await?;
        let mut thread = Self::comment_thread_locked(&mut tx, document_id, thread_id).await?;
        thread.result_revision = Some(revision);
        sqlx::query("UPDATE comment_threads SET result_revision = $2 WHERE id = $1")
            .bind(DB::Id::from(thread_id))
            .bind(revision)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("recording a comment thread's result", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a comment thread's result", e))?;
        Ok(thread)
    }

    /// `thread` with its notes in order.
    async fn with_comment_notes(
        &self,
        thread: crate::CommentThread,
    ) -> StoreResult<crate::ThreadWithNotes> {
        let rows: Vec<CommentNoteRow<DB::Id>> = sqlx::query_as(
            "SELECT thread_id, seq, author_login, to_planner, body, created_at_ms \
             FROM comment_notes WHERE thread_id = $1 ORDER BY seq",
        )
        .bind(DB::Id::from(thread.id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading comment notes", e))?;
        Ok((thread, rows.into_iter().map(comment_note_of).collect()))
    }

    pub(crate) async fn comment_thread(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<Option<crate::ThreadWithNotes>> {
        let sql = format!(
            "SELECT {COMMENT_THREAD_COLUMNS} FROM comment_threads \
             WHERE id = $1 AND document_id = $2"
        );
        let row: Option<CommentThreadRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(thread_id))
            .bind(DB::Id::from(document_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a comment thread", e))?;
        match row {
            Some(row) => Ok(Some(self.with_comment_notes(comment_thread_of(row)).await?)),
            None => Ok(None),
        }
    }

    pub(crate) async fn comment_threads(
        &self,
        document_id: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<crate::ThreadWithNotes>> {
        let sql = format!(
            "SELECT {COMMENT_THREAD_COLUMNS} FROM comment_threads WHERE document_id = $1 \
             ORDER BY created_at_ms DESC, id DESC LIMIT $2"
        );
        let rows: Vec<CommentThreadRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(document_id))
            .bind(limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading comment threads", e))?;
        // Every listed thread's notes in one read, not one read per thread.
        let notes: Vec<CommentNoteRow<DB::Id>> = sqlx::query_as(
            "SELECT thread_id, seq, author_login, to_planner, body, created_at_ms \
             FROM comment_notes WHERE thread_id IN (SELECT id FROM comment_threads \
             WHERE document_id = $1 ORDER BY created_at_ms DESC, id DESC LIMIT $2) \
             ORDER BY thread_id, seq",
        )
        .bind(DB::Id::from(document_id))
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading comment notes", e))?;
        let mut by_thread: std::collections::HashMap<Uuid, Vec<crate::CommentNote>> =
            std::collections::HashMap::new();
        for note in notes.into_iter().map(comment_note_of) {
            by_thread.entry(note.thread_id).or_default().push(note);
        }
        Ok(rows
            .into_iter()
            .map(comment_thread_of)
            .map(|thread| {
                let notes = by_thread.remove(&thread.id).unwrap_or_default();
                (thread, notes)
            })
            .collect())
    }

    // --- ModelChoiceStore ---

    pub(crate) async fn pause_participation(&self, pause: &ParticipationPause) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, pause.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        sqlx::query(
            "INSERT INTO planner_participation_pauses (document_id, paused_by, paused_at_ms) \
             VALUES ($1, $2, $3) ON CONFLICT (document_id) DO UPDATE SET \
             paused_by = excluded.paused_by, paused_at_ms = excluded.paused_at_ms",
        )
        .bind(DB::Id::from(pause.document_id))
        .bind(crate::storable(&pause.paused_by).into_owned())
        .bind(pause.paused_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("pausing automatic participation", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a participation pause", e))
    }

    pub(crate) async fn resume_participation(&self, document_id: Uuid) -> StoreResult<bool> {
        let changed = self
            .write_one(
                sqlx::query("DELETE FROM planner_participation_pauses WHERE document_id = $1")
                    .bind(DB::Id::from(document_id)),
                (
                    "resuming automatic participation",
                    "committing a participation resume",
                ),
            )
            .await?;
        Ok(changed > 0)
    }

    pub(crate) async fn participation_pause(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<ParticipationPause>> {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT paused_by, paused_at_ms FROM planner_participation_pauses \
             WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a participation pause", e))?;
        Ok(row.map(|(paused_by, paused_at_ms)| ParticipationPause {
            document_id,
            paused_by,
            paused_at_ms,
        }))
    }

    pub(crate) async fn put_model_choice(&self, choice: &ModelChoice) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        if !Self::document_exists(&mut tx, choice.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        sqlx::query(
            "INSERT INTO planner_model_choices (document_id, model, thinking_level, chosen_by, \
             chosen_at_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (document_id) DO UPDATE SET model = excluded.model, \
             thinking_level = excluded.thinking_level, chosen_by = excluded.chosen_by, \
             chosen_at_ms = excluded.chosen_at_ms",
        )
        .bind(DB::Id::from(choice.document_id))
        .bind(crate::storable(&choice.model).into_owned())
        .bind(
            choice
                .thinking_level
                .as_deref()
                .map(|l| crate::storable(l).into_owned()),
        )
        .bind(&choice.chosen_by)
        .bind(choice.chosen_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("writing a model choice", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a model choice", e))
    }

    pub(crate) async fn clear_model_choice(&self, document_id: Uuid) -> StoreResult<bool> {
        let changed = self
            .write_one(
                sqlx::query("DELETE FROM planner_model_choices WHERE document_id = $1")
                    .bind(DB::Id::from(document_id)),
                (
                    "clearing a model choice",
                    "committing a cleared model choice",
                ),
            )
            .await?;
        Ok(changed > 0)
    }

    pub(crate) async fn model_choice(&self, document_id: Uuid) -> StoreResult<Option<ModelChoice>> {
        let row: Option<(String, Option<String>, String, i64)> = sqlx::query_as(
            "SELECT model, thinking_level, chosen_by, chosen_at_ms FROM planner_model_choices \
             WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a model choice", e))?;
        Ok(row.map(
            |(model, thinking_level, chosen_by, chosen_at_ms)| ModelChoice {
                document_id,
                model,
                thinking_level,
                chosen_by,
                chosen_at_ms,
            },
        ))
    }

    // --- AttachmentStore ---

    pub(crate) async fn put_attachment(
        &self,
        file: &NewAttachment,
        limit: UnsentLimit,
    ) -> StoreResult<Kept> {
        let a = &file.attachment;
        let mut tx = self.begin_write().await?;
        // The document's row lock serialises one person's uploads, so two at once cannot both
        // fit under the limit that only one of them fits.
        if !Self::document_exists(&mut tx, a.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let (files, bytes): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM chat_attachments \
             WHERE document_id = $1 AND uploader = $2 AND sent_seq IS NULL \
             AND created_at_ms >= $3",
        )
        .bind(DB::Id::from(a.document_id))
        .bind(&a.uploader)
        .bind(limit.since_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| sqlx_error("counting unsent files", e))?;
        if let Some(refused) =
            crate::unsent_refusal(files.max(0) as u64, bytes.max(0) as u64, a.size, &limit)
        {
            return Ok(refused);
        }
        sqlx::query(
            "INSERT INTO chat_attachments (id, document_id, uploader, name, kind, mime_type, \
             size, bytes, created_at_ms, sent_seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)",
        )
        .bind(DB::Id::from(a.id))
        .bind(DB::Id::from(a.document_id))
        .bind(&a.uploader)
        .bind(crate::storable(&a.name).into_owned())
        .bind(&a.kind)
        .bind(&a.mime_type)
        .bind(a.size)
        .bind(file.bytes.as_slice())
        .bind(a.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("keeping a file", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a kept file", e))?;
        Ok(Kept::Kept)
    }

    pub(crate) async fn attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
    ) -> StoreResult<Option<(Attachment, Vec<u8>)>> {
        let sql = format!(
            "SELECT {ATTACHMENT_COLUMNS} FROM chat_attachments WHERE id = $1 AND document_id = $2"
        );
        let row: Option<AttachmentRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .bind(DB::Id::from(document_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a file", e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let bytes: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT bytes FROM chat_attachments WHERE id = $1")
                .bind(DB::Id::from(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading a file's bytes", e))?;
        // Taken back or forgotten between the two reads: gone.
        Ok(bytes.map(|bytes| (row.into(), bytes)))
    }

    pub(crate) async fn take_back_attachment(
        &self,
        document_id: Uuid,
        id: Uuid,
        uploader: &str,
    ) -> StoreResult<TakeBack> {
        let mut tx = self.begin_write().await?;
        let sent: Option<Option<i64>> = sqlx::query_scalar(
            "SELECT sent_seq FROM chat_attachments \
             WHERE id = $1 AND document_id = $2 AND uploader = $3",
        )
        .bind(DB::Id::from(id))
        .bind(DB::Id::from(document_id))
        .bind(uploader)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a file to take back", e))?;
        let outcome = match sent {
            None => TakeBack::Missing,
            Some(Some(_)) => TakeBack::Sent,
            Some(None) => {
                // Guarded: a send that committed first keeps the file.
                let done =
                    sqlx::query("DELETE FROM chat_attachments WHERE id = $1 AND sent_seq IS NULL")
                        .bind(DB::Id::from(id))
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| sqlx_error("taking a file back", e))?;
                if DB::rows_affected(&done) == 1 {
                    TakeBack::Taken
                } else {
                    TakeBack::Sent
                }
            }
        };
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a file taken back", e))?;
        Ok(outcome)
    }

    pub(crate) async fn forget_unsent_attachments(
        &self,
        before_ms: UnixMillis,
    ) -> StoreResult<u64> {
        self.write_one(
            sqlx::query(
                "DELETE FROM chat_attachments WHERE sent_seq IS NULL AND created_at_ms < $1",
            )
            .bind(before_ms),
            ("forgetting unsent files", "committing forgotten files"),
        )
        .await
    }

    // --- JobStore ---

    /// The job `id`, read in `tx` with `lock` (a row lock, or none).
    async fn job_in(
        tx: &mut Transaction<'_, DB>,
        id: Uuid,
        lock: &str,
    ) -> StoreResult<Option<crate::Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM background_jobs WHERE id = $1{lock}");
        let row: Option<JobRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| sqlx_error("reading a background job", e))?;
        row.map(JobRow::into_job).transpose()
    }

    /// Writes every column of `job` that can change after it was kept.
    async fn store_job(tx: &mut Transaction<'_, DB>, job: &crate::Job) -> StoreResult<()> {
        sqlx::query(
            "UPDATE background_jobs SET state = $2, attempts = $3, failures = $4, \
             available_at_ms = $5, claim_owner = $6, claim_generation = $7, \
             claim_expires_at_ms = $8, progress = $9, reason = $10, artifact = $11, \
             updated_at_ms = $12 WHERE id = $1",
        )
        .bind(DB::Id::from(job.id))
        .bind(job.state.as_str())
        .bind(job.attempts)
        .bind(job.failures)
        .bind(job.available_at_ms)
        .bind(job.claim_owner.clone())
        .bind(job.claim_generation)
        .bind(job.claim_expires_at_ms)
        .bind(crate::storable(&job.progress).into_owned())
        .bind(
            job.reason
                .as_deref()
                .map(|r| crate::storable(r).into_owned()),
        )
        .bind(
            job.artifact
                .as_deref()
                .map(|a| crate::storable(a).into_owned()),
        )
        .bind(job.updated_at_ms)
        .execute(&mut **tx)
        .await
        .map_err(|e| sqlx_error("writing a background job", e))?;
        Ok(())
    }

    /// Reads job `id` under a row lock, lets `change` decide (and change it), writes it back if
    /// it changed, commits; what `change` answered.
    async fn change_job<T>(
        &self,
        id: Uuid,
        change: impl FnOnce(&mut crate::Job) -> (bool, T),
        doing: &str,
    ) -> StoreResult<Option<T>> {
        let mut tx = self.begin_write().await?;
        let Some(mut job) = Self::job_in(&mut tx, id, DB::FOR_UPDATE).await? else {
            return Ok(None);
        };
        let (changed, answer) = change(&mut job);
        if changed {
            Self::store_job(&mut tx, &job).await?;
            tx.commit().await.map_err(|e| sqlx_error(doing, e))?;
        }
        Ok(Some(answer))
    }

    pub(crate) async fn enqueue_job(&self, new: &crate::NewJob) -> StoreResult<crate::Enqueued> {
        let mut tx = self.begin_write().await?;
        // The document's row lock serialises requests for its targets, so two at once take
        // different generations and the older is superseded.
        if !Self::document_exists(&mut tx, new.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM background_jobs WHERE document_id = $1 \
             AND idempotency_key = $2"
        );
        let kept: Option<JobRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(new.document_id))
            .bind(&new.idempotency_key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a background job by key", e))?;
        if let Some(kept) = kept {
            let kept = kept.into_job()?;
            return if kept.fingerprint == new.fingerprint {
                Ok(crate::Enqueued::Repeated(kept))
            } else {
                Err(StoreError::Conflict(crate::jobs::key_reused(
                    &new.idempotency_key,
                )))
            };
        }
        let last: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(target_generation) FROM background_jobs \
             WHERE document_id = $1 AND target = $2",
        )
        .bind(DB::Id::from(new.document_id))
        .bind(&new.target)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a job target's generation", e))?;
        sqlx::query(
            "UPDATE background_jobs SET state = 'superseded', claim_owner = NULL, \
             claim_expires_at_ms = NULL, updated_at_ms = $3 \
             WHERE document_id = $1 AND target = $2 AND state IN ('pending', 'running')",
        )
        .bind(DB::Id::from(new.document_id))
        .bind(&new.target)
        .bind(new.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("superseding older background jobs", e))?;
        let job = crate::jobs::new_row(new, last.unwrap_or(0) + 1);
        sqlx::query(
            "INSERT INTO background_jobs (id, document_id, kind, version, origin, target, \
             target_generation, idempotency_key, fingerprint, input, state, attempts, failures, \
             max_failures, available_at_ms, claim_generation, progress, created_at_ms, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, 0, $12, \
             $13, 0, $14, $15, $15)",
        )
        .bind(DB::Id::from(job.id))
        .bind(DB::Id::from(job.document_id))
        .bind(crate::storable(&job.kind).into_owned())
        .bind(job.version)
        .bind(crate::storable(&job.origin).into_owned())
        .bind(crate::storable(&job.target).into_owned())
        .bind(job.target_generation)
        .bind(crate::storable(&job.idempotency_key).into_owned())
        .bind(&job.fingerprint)
        .bind(crate::storable(&job.input).into_owned())
        .bind(job.state.as_str())
        .bind(job.max_failures)
        .bind(job.available_at_ms)
        .bind(&job.progress)
        .bind(job.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("keeping a background job", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a background job", e))?;
        Ok(crate::Enqueued::New(job))
    }

    pub(crate) async fn job(&self, id: Uuid) -> StoreResult<Option<crate::Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM background_jobs WHERE id = $1");
        let row: Option<JobRow<DB::Id>> = sqlx::query_as(&sql)
            .bind(DB::Id::from(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a background job", e))?;
        row.map(JobRow::into_job).transpose()
    }

    /// The jobs of `rows`.
    fn jobs_of(rows: Result<Vec<JobRow<DB::Id>>, sqlx::Error>) -> StoreResult<Vec<crate::Job>> {
        rows.map_err(|e| sqlx_error("listing background jobs", e))?
            .into_iter()
            .map(JobRow::into_job)
            .collect()
    }

    pub(crate) async fn document_jobs(
        &self,
        document_id: Uuid,
        limit: u32,
    ) -> StoreResult<Vec<crate::Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM background_jobs WHERE document_id = $1 \
             ORDER BY created_at_ms DESC, id DESC LIMIT $2"
        );
        Self::jobs_of(
            sqlx::query_as(&sql)
                .bind(DB::Id::from(document_id))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await,
        )
    }

    pub(crate) async fn last_completed_job(
        &self,
        document_id: Uuid,
        target: &str,
    ) -> StoreResult<Option<crate::Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM background_jobs WHERE document_id = $1 AND target = $2 \
             AND state = 'completed' ORDER BY target_generation DESC LIMIT 1"
        );
        Ok(Self::jobs_of(
            sqlx::query_as(&sql)
                .bind(DB::Id::from(document_id))
                .bind(target)
                .fetch_all(&self.pool)
                .await,
        )?
        .pop())
    }

    pub(crate) async fn due_jobs(
        &self,
        now_ms: UnixMillis,
        limit: u32,
    ) -> StoreResult<Vec<crate::Job>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM background_jobs WHERE state = 'pending' \
             AND available_at_ms <= $1 ORDER BY created_at_ms, id LIMIT $2"
        );
        Self::jobs_of(
            sqlx::query_as(&sql)
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await,
        )
    }

    pub(crate) async fn claim_job(
        &self,
        id: Uuid,
        claim_owner: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<crate::Job>> {
        Ok(self
            .change_job(
                id,
                |job| {
                    let claimed = crate::jobs::claim_row(job, claim_owner, now_ms, ttl_ms);
                    (claimed, claimed.then(|| job.clone()))
                },
                "committing a job claim",
            )
            .await?
            .flatten())
    }

    pub(crate) async fn renew_job_claim(
        &self,
        id: Uuid,
        claim_generation: i64,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        Ok(self
            .change_job(
                id,
                |job| {
                    let held = crate::jobs::holds_claim(job, claim_generation);
                    if held {
                        job.claim_expires_at_ms = Some(now_ms.saturating_add(ttl_ms));
                    }
                    (held, held)
                },
                "committing a renewed job claim",
            )
            .await?
            .unwrap_or(false))
    }

    pub(crate) async fn set_job_progress(
        &self,
        id: Uuid,
        claim_generation: i64,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        Ok(self
            .change_job(
                id,
                |job| {
                    let held = crate::jobs::holds_claim(job, claim_generation);
                    if held {
                        job.progress = progress.to_owned();
                        job.updated_at_ms = now_ms;
                    }
                    (held, held)
                },
                "committing a job's progress",
            )
            .await?
            .unwrap_or(false))
    }

    pub(crate) async fn settle_job(
        &self,
        id: Uuid,
        claim_generation: i64,
        settlement: &crate::Settlement,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        Ok(self
            .change_job(
                id,
                |job| {
                    let held = crate::jobs::holds_claim(job, claim_generation);
                    if held {
                        crate::jobs::settled_row(job, settlement, now_ms);
                    }
                    (held, held)
                },
                "committing a settled job",
            )
            .await?
            .unwrap_or(false))
    }

    pub(crate) async fn cancel_job(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<bool> {
        Ok(self
            .change_job(
                id,
                |job| {
                    let active = job.state.is_active();
                    if active {
                        crate::jobs::cancelled_row(job, reason, now_ms);
                    }
                    (active, active)
                },
                "committing a cancelled job",
            )
            .await?
            .unwrap_or(false))
    }

    pub(crate) async fn interrupt_running_jobs(
        &self,
        reason: &str,
        now_ms: UnixMillis,
        reach: Reach,
    ) -> StoreResult<u64> {
        self.write_one(
            sqlx::query(
                "UPDATE background_jobs SET state = 'failed', reason = $1, claim_owner = NULL, \
                 claim_expires_at_ms = NULL, updated_at_ms = $2 WHERE state = 'running' \
                 AND ($3 IS NULL OR background_jobs.document_id = $3)",
            )
            .bind(crate::storable(reason).into_owned())
            .bind(now_ms)
            .bind(reach.document().map(DB::Id::from)),
            ("interrupting running jobs", "committing interrupted jobs"),
        )
        .await
    }

    pub(crate) async fn job_counts(&self) -> StoreResult<Vec<(crate::JobState, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM background_jobs GROUP BY state ORDER BY state",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("counting background jobs", e))?;
        let mut counts: Vec<_> = rows
            .into_iter()
            .filter_map(|(state, n)| Some((crate::JobState::parse(&state)?, n.max(0) as u64)))
            .collect();
        counts.sort();
        Ok(counts)
    }

    // --- TitleStore ---

    pub(crate) async fn title_sidecar(
        &self,
        document_id: Uuid,
    ) -> StoreResult<crate::TitleSidecar> {
        let row: Option<(bool, Option<String>)> = sqlx::query_as(
            "SELECT chosen, planner_title FROM document_titles WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a title record", e))?;
        Ok(row
            .map(|(chosen, planner_title)| crate::TitleSidecar {
                chosen,
                planner_title,
            })
            .unwrap_or_default())
    }

    pub(crate) async fn draft_title(
        &self,
        document_id: Uuid,
        expected: &str,
        new_title: &str,
    ) -> StoreResult<crate::Drafted> {
        let new_title = crate::storable(new_title).into_owned();
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "SELECT title FROM documents WHERE id = $1{}",
            DB::FOR_NO_KEY_UPDATE
        );
        let title: Option<String> = sqlx::query_scalar(&sql)
            .bind(DB::Id::from(document_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a document's title", e))?;
        let title = title.ok_or(StoreError::NotFound("document"))?;
        let chosen: Option<bool> =
            sqlx::query_scalar("SELECT chosen FROM document_titles WHERE document_id = $1")
                .bind(DB::Id::from(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a title record", e))?;
        if chosen == Some(true) || title != expected {
            return Ok(crate::Drafted::Kept);
        }
        sqlx::query("UPDATE documents SET title = $2 WHERE id = $1")
            .bind(DB::Id::from(document_id))
            .bind(&new_title)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("writing a drafted title", e))?;
        sqlx::query(
            "INSERT INTO document_titles (document_id, chosen, planner_title) \
             VALUES ($1, FALSE, $2) \
             ON CONFLICT (document_id) DO UPDATE SET planner_title = excluded.planner_title",
        )
        .bind(DB::Id::from(document_id))
        .bind(&new_title)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("recording a drafted title", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a drafted title", e))?;
        Ok(crate::Drafted::Applied)
    }

    // --- RunStore ---

    pub(crate) async fn save_run(
        &self,
        run: &RunRecord,
        stages: &[StageRecord],
        replace: bool,
    ) -> StoreResult<()> {
        let run = &run.storable();
        let stages: &[StageRecord] = &stages.iter().map(StageRecord::storable).collect::<Vec<_>>();
        let mut tx = self.begin_write().await?;
        // Reports of one document's runs queue on its row lock (in SQLite, the write lock), so
        // positions count up from the last committed one.
        if !Self::document_exists(&mut tx, run.document_id, DB::FOR_NO_KEY_UPDATE).await? {
            return Err(StoreError::NotFound("document"));
        }
        let document_id = run.document_id;
        sqlx::query(
            "INSERT INTO workflow_runs (document_id, run_id, position, session_id, name, status, \
             root_run_id, elapsed_ms, omitted_stages, reported_at_ms) \
             SELECT $1, $2, COALESCE(MAX(position), -1) + 1, $3, $4, $5, $6, $7, $8, $9 \
             FROM workflow_runs WHERE document_id = $1 \
             ON CONFLICT (document_id, run_id) DO UPDATE SET session_id = excluded.session_id, \
             name = excluded.name, status = excluded.status, root_run_id = excluded.root_run_id, \
             elapsed_ms = excluded.elapsed_ms, omitted_stages = excluded.omitted_stages, \
             reported_at_ms = excluded.reported_at_ms",
        )
        .bind(DB::Id::from(document_id))
        .bind(&run.run_id)
        .bind(&run.session_id)
        .bind(&run.name)
        .bind(&run.status)
        .bind(&run.root_run_id)
        .bind(run.elapsed_ms)
        .bind(run.omitted_stages)
        .bind(run.reported_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("saving a run", e))?;
        if replace {
            sqlx::query("DELETE FROM workflow_run_stages WHERE document_id = $1 AND run_id = $2")
                .bind(DB::Id::from(document_id))
                .bind(&run.run_id)
                .execute(&mut *tx)
                .await
                .map_err(|e| sqlx_error("replacing a run's stages", e))?;
        }
        for stage in stages {
            sqlx::query(
                "INSERT INTO workflow_run_stages (document_id, run_id, stage_id, position, name, \
                 status, parent_stage_id, duration_ms) \
                 SELECT $1, $2, $3, COALESCE(MAX(position), -1) + 1, $4, $5, $6, $7 \
                 FROM workflow_run_stages WHERE document_id = $1 AND run_id = $2 \
                 ON CONFLICT (document_id, run_id, stage_id) DO UPDATE SET name = excluded.name, \
                 status = excluded.status, parent_stage_id = excluded.parent_stage_id, \
                 duration_ms = excluded.duration_ms",
            )
            .bind(DB::Id::from(document_id))
            .bind(&run.run_id)
            .bind(&stage.stage_id)
            .bind(&stage.name)
            .bind(&stage.status)
            .bind(&stage.parent_stage_id)
            .bind(stage.duration_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("saving a run's stage", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a run report", e))
    }

    pub(crate) async fn runs(&self, document_id: Uuid) -> StoreResult<Vec<RunRecord>> {
        let rows: Vec<RunRow<DB::Id>> = sqlx::query_as(
            "SELECT document_id, run_id, session_id, name, status, root_run_id, elapsed_ms, \
             omitted_stages, reported_at_ms FROM workflow_runs WHERE document_id = $1 \
             ORDER BY position, run_id",
        )
        .bind(DB::Id::from(document_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading runs", e))?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(crate) async fn run_stages(
        &self,
        document_id: Uuid,
        run_id: &str,
        offset: i64,
        limit: i64,
    ) -> StoreResult<Option<StagePage>> {
        let mut tx = self.begin_snapshot().await?;
        let found =
            sqlx::query("SELECT 1 FROM workflow_runs WHERE document_id = $1 AND run_id = $2")
                .bind(DB::Id::from(document_id))
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a run", e))?;
        if found.is_none() {
            return Ok(None);
        }
        let total: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM workflow_run_stages WHERE document_id = $1 AND run_id = $2",
        )
        .bind(DB::Id::from(document_id))
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| sqlx_error("counting a run's stages", e))?;
        let rows: Vec<StageRow> = sqlx::query_as(
            "SELECT stage_id, name, status, parent_stage_id, duration_ms FROM workflow_run_stages \
             WHERE document_id = $1 AND run_id = $2 ORDER BY position LIMIT $3 OFFSET $4",
        )
        .bind(DB::Id::from(document_id))
        .bind(run_id)
        .bind(limit.max(0))
        .bind(offset.max(0))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a run's stages", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("ending a read", e))?;
        Ok(Some(StagePage {
            stages: rows.into_iter().map(Into::into).collect(),
            total,
        }))
    }

    pub(crate) async fn delete_ended_runs(&self, document_id: Uuid) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let ended = "status NOT IN ('running', 'waiting', 'paused')";
        sqlx::query(&format!(
            "DELETE FROM workflow_run_stages WHERE document_id = $1 AND run_id IN \
             (SELECT run_id FROM workflow_runs WHERE document_id = $1 AND {ended})"
        ))
        .bind(DB::Id::from(document_id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting ended runs' stages", e))?;
        let done = sqlx::query(&format!(
            "DELETE FROM workflow_runs WHERE document_id = $1 AND {ended}"
        ))
        .bind(DB::Id::from(document_id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting ended runs", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing deleted runs", e))?;
        Ok(DB::rows_affected(&done))
    }

    pub(crate) async fn stop_unheld_runs(&self, reach: Reach) -> StoreResult<u64> {
        let changed = self
            .write_one(
                sqlx::query(
                    "UPDATE workflow_runs SET status = 'stopped' \
             WHERE status IN ('running', 'waiting', 'paused') \
             AND ($1 IS NULL OR workflow_runs.document_id = $1) AND NOT EXISTS (\
             SELECT 1 FROM planner_ownership o \
             WHERE o.document_id = workflow_runs.document_id \
             AND o.holder_account_id IS NOT NULL) AND NOT EXISTS (\
             SELECT 1 FROM planner_link_holds h JOIN machines m ON m.id = h.machine_id \
             WHERE h.document_id = workflow_runs.document_id)",
                )
                .bind(reach.document().map(DB::Id::from)),
                ("stopping live runs", "committing stopped runs"),
            )
            .await?;
        Ok(changed)
    }

    // --- LeaseStore ---

    pub(crate) async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        for _ in 0..RACE_RETRIES {
            // An acquisition may change the epoch: it waits for fenced writes in flight.
            let mut tx = self.begin_lease_change().await?;
            // Free, expired or already ours: take it. Only a renewal of our unexpired lease keeps
            // the epoch.
            let taken: Option<LeaseRow> = sqlx::query_as(
                "UPDATE writer_lease SET \
                 epoch = CASE WHEN holder = $2 AND expires_at_ms > $3 \
                         THEN epoch ELSE epoch + 1 END, \
                 holder = $2, expires_at_ms = $4 \
                 WHERE name = $1 AND (holder IS NULL OR expires_at_ms <= $3 OR holder = $2) \
                 RETURNING holder, epoch, expires_at_ms",
            )
            .bind(WRITER_LEASE_NAME)
            .bind(holder)
            .bind(now_ms)
            .bind(expires_at_ms)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("acquiring the writer lease", e))?;
            if let Some(row) = taken {
                tx.commit()
                    .await
                    .map_err(|e| sqlx_error("committing the writer lease", e))?;
                return Ok(LeaseAcquire::Acquired(WriterLease {
                    holder: holder.to_owned(),
                    epoch: row.epoch,
                    expires_at_ms: row.expires_at_ms,
                }));
            }
            let current: Option<LeaseRow> = sqlx::query_as(
                "SELECT holder, epoch, expires_at_ms FROM writer_lease WHERE name = $1",
            )
            .bind(WRITER_LEASE_NAME)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading the writer lease", e))?;
            match current {
                Some(LeaseRow {
                    holder: Some(other),
                    epoch,
                    expires_at_ms,
                }) if other != holder && expires_at_ms > now_ms => {
                    return Ok(LeaseAcquire::HeldElsewhere(WriterLease {
                        holder: other,
                        epoch,
                        expires_at_ms,
                    }))
                }
                Some(_) => continue,
                None => {
                    // The migration seeds the row; put it back if someone removed it.
                    sqlx::query(
                        "INSERT INTO writer_lease (name, holder, epoch, expires_at_ms) \
                         VALUES ($1, NULL, 0, 0) ON CONFLICT (name) DO NOTHING",
                    )
                    .bind(WRITER_LEASE_NAME)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("seeding the writer lease", e))?;
                    tx.commit()
                        .await
                        .map_err(|e| sqlx_error("committing the writer lease", e))?;
                }
            }
        }
        Err(StoreError::Backend(
            "acquiring the writer lease: it kept changing hands".into(),
        ))
    }

    pub(crate) async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>> {
        let row: Option<LeaseRow> = sqlx::query_as(
            "UPDATE writer_lease SET expires_at_ms = $4 \
             WHERE name = $1 AND holder = $2 AND epoch = $3 \
             RETURNING holder, epoch, expires_at_ms",
        )
        .bind(WRITER_LEASE_NAME)
        .bind(&lease.holder)
        .bind(lease.epoch)
        .bind(now_ms.saturating_add(ttl_ms))
        .fetch_optional(&self.writes)
        .await
        .map_err(|e| sqlx_error("renewing the writer lease", e))?;
        Ok(row.map(|row| WriterLease {
            holder: lease.holder.clone(),
            epoch: row.epoch,
            expires_at_ms: row.expires_at_ms,
        }))
    }

    pub(crate) async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
        // Giving the lease back clears the holder, which fenced writes check: wait for them.
        let mut tx = self.begin_lease_change().await?;
        sqlx::query(
            "UPDATE writer_lease SET holder = NULL, expires_at_ms = 0 \
             WHERE name = $1 AND holder = $2 AND epoch = $3",
        )
        .bind(WRITER_LEASE_NAME)
        .bind(&lease.holder)
        .bind(lease.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("releasing the writer lease", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing the writer lease's release", e))?;
        Ok(())
    }

    pub(crate) async fn acquire_document_lease(
        &self,
        document_id: Uuid,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        // An acquisition may change the epoch: it waits for the document's fenced writes in
        // flight. The first makes the row, at epoch 1; after that, free, expired or already
        // ours: take it, and only a renewal of our unexpired lease keeps the epoch.
        let mut tx = self.begin_document_lease_change(document_id).await?;
        let taken: Option<LeaseRow> = sqlx::query_as(
            "INSERT INTO document_leases (document_id, holder, epoch, expires_at_ms) \
             VALUES ($1, $2, 1, $4) \
             ON CONFLICT (document_id) DO UPDATE SET \
             epoch = CASE WHEN document_leases.holder = $2 \
                     AND document_leases.expires_at_ms > $3 \
                     THEN document_leases.epoch ELSE document_leases.epoch + 1 END, \
             holder = $2, expires_at_ms = $4 \
             WHERE document_leases.holder IS NULL OR document_leases.expires_at_ms <= $3 \
             OR document_leases.holder = $2 \
             RETURNING holder, epoch, expires_at_ms",
        )
        .bind(DB::Id::from(document_id))
        .bind(holder)
        .bind(now_ms)
        .bind(now_ms.saturating_add(ttl_ms))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("acquiring a document's lease", e))?;
        let acquired = match taken {
            Some(row) => LeaseAcquire::Acquired(WriterLease {
                holder: holder.to_owned(),
                epoch: row.epoch,
                expires_at_ms: row.expires_at_ms,
            }),
            // Refused by the guard: another holder's unexpired lease, read under the same lock.
            None => {
                let row: LeaseRow = sqlx::query_as(
                    "SELECT holder, epoch, expires_at_ms FROM document_leases \
                     WHERE document_id = $1",
                )
                .bind(DB::Id::from(document_id))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a document's lease", e))?;
                LeaseAcquire::HeldElsewhere(WriterLease {
                    holder: row.holder.unwrap_or_default(),
                    epoch: row.epoch,
                    expires_at_ms: row.expires_at_ms,
                })
            }
        };
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a document's lease", e))?;
        Ok(acquired)
    }

    pub(crate) async fn renew_document_leases(
        &self,
        leases: &[(Uuid, WriterLease)],
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Vec<(Uuid, WriterLease)>> {
        let mut renewed = Vec::with_capacity(leases.len());
        for batch in leases.chunks(crate::LEASES_RENEWED_AT_ONCE) {
            // One statement for the batch: each lease is matched by its document, holder and
            // epoch, as a renewal of one is.
            let held = (0..batch.len())
                .map(|i| {
                    let at = 2 + 3 * i;
                    format!(
                        "(document_id = ${} AND holder = ${} AND epoch = ${})",
                        at,
                        at + 1,
                        at + 2
                    )
                })
                .collect::<Vec<_>>()
                .join(" OR ");
            let sql = format!(
                "UPDATE document_leases SET expires_at_ms = $1 WHERE {held} \
                 RETURNING document_id, holder, epoch, expires_at_ms"
            );
            let mut query = sqlx::query_as::<_, RenewedLeaseRow<DB::Id>>(&sql)
                .bind(now_ms.saturating_add(ttl_ms));
            for (document_id, lease) in batch {
                query = query
                    .bind(DB::Id::from(*document_id))
                    .bind(&lease.holder)
                    .bind(lease.epoch);
            }
            let rows = query
                .fetch_all(&self.writes)
                .await
                .map_err(|e| sqlx_error("renewing document leases", e))?;
            renewed.extend(rows.into_iter().filter_map(|row| {
                Some((
                    row.document_id.into(),
                    WriterLease {
                        holder: row.holder?,
                        epoch: row.epoch,
                        expires_at_ms: row.expires_at_ms,
                    },
                ))
            }));
        }
        Ok(renewed)
    }

    pub(crate) async fn release_document_lease(
        &self,
        document_id: Uuid,
        lease: &WriterLease,
    ) -> StoreResult<()> {
        // Giving the lease back clears the holder, which the document's fenced writes check.
        let mut tx = self.begin_document_lease_change(document_id).await?;
        sqlx::query(
            "UPDATE document_leases SET holder = NULL, expires_at_ms = 0 \
             WHERE document_id = $1 AND holder = $2 AND epoch = $3",
        )
        .bind(DB::Id::from(document_id))
        .bind(&lease.holder)
        .bind(lease.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("releasing a document's lease", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a document's lease's release", e))?;
        Ok(())
    }

    pub(crate) async fn document_lease(
        &self,
        document_id: Uuid,
    ) -> StoreResult<Option<DocumentLeaseRow>> {
        let row: Option<LeaseRow> = sqlx::query_as(
            "SELECT holder, epoch, expires_at_ms FROM document_leases WHERE document_id = $1",
        )
        .bind(DB::Id::from(document_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a document's lease", e))?;
        Ok(row.map(|row| DocumentLeaseRow {
            holder: row.holder,
            epoch: row.epoch,
            expires_at_ms: row.expires_at_ms,
        }))
    }
}

/// Implements [`super::Store`] and every aggregate's trait for a backend type `$store` whose
/// field `sql` is a [`SqlStore`] of a [`Dialect`], each method forwarding to the same-named
/// [`SqlStore`] method. The lists below are the traits' signatures (each method returns
/// `StoreResult` of what is written); the compiler checks them against the traits.
macro_rules! sql_store_impls {
    ($store:ty) => {
        // An anonymous const: these imports serve the impls without entering the module.
        const _: () = {
            use uuid::Uuid;
            use $crate::sql::sql_store_impls;
            use $crate::{
                Account, Advance, BrowserLogin, Claim, ContentStore, Document, DocumentContent,
                DocumentLeaseRow, DocumentLeaseStore, DocumentStore, Reach, Fence, Holder, LeaseAcquire, LeaseStore, NewDocument, NewTranscriptEntry,
                OwnerGuard, Ownership, Pending, OwnershipStore, PlanCommit, Release, RevisionKind, SignInStore, Store,
                TranscriptEntry, TranscriptStore, UnixMillis, WriterLease, RunRecord, RunStore, StagePage, StageRecord,
                HoldStore, LinkHold, ModelChoice, ModelChoiceStore, ParticipationPause, Attachment, AttachmentStore,
                Kept, NewAttachment, TakeBack, UnsentLimit, Enqueued, Job, JobState, JobStore,
                NewJob, Settlement, TitleStore, TitleSidecar, Drafted, CommentStore, CommentThread,
                NewCommentNote, NewCommentThread, Replied, ThreadWithNotes, GraphStore,
                GraphVersion, GraphChange, GraphRefusal, GraphCounters, ImplementationRun, RunReport, Reported,
                ConnectorPoll, Machine, MachineChoice, MachineStore, NewMachine, PlannerCredential, Build,
                RequestClaim, RequestKey, RequestStore,
                BuildStore,
                NewBuild, QueueRefusal, BuiltSource, Landing,
            };

            sql_store_impls!(@forward $store, Store {
                fn ping() -> ();
            } {
                fn backend(&self) -> &'static str {
                    self.sql.backend()
                }

                fn fenced(&self, fence: Fence) -> std::sync::Arc<dyn Store> {
                    std::sync::Arc::new(Self {
                        sql: self.sql.fenced(fence),
                    })
                }
            });
            sql_store_impls!(@forward $store, SignInStore {
                fn upsert_account(github_user_id: i64, login: &str, now_ms: UnixMillis) -> Account;
                fn account(id: Uuid) -> Option<Account>;
                fn account_by_login(login: &str) -> Option<Account>;
                fn create_browser_login(login: &BrowserLogin) -> ();
                fn browser_login(id: Uuid) -> Option<BrowserLogin>;
                fn live_browser_logins(account_id: Uuid, now_ms: UnixMillis, limit: u32)
                    -> Vec<BrowserLogin>;
                fn sign_out_browser_login(id: Uuid, now_ms: UnixMillis) -> bool;
                fn set_login_credential(login_id: Uuid, expected_revision: i64, sealed: &[u8])
                    -> Option<i64>;
                fn login_credential(login_id: Uuid) -> Option<(i64, Vec<u8>)>;
                fn delete_login_credential(login_id: Uuid) -> bool;
                fn delete_expired_logins(now_ms: UnixMillis) -> u64;
            } {});
            sql_store_impls!(@forward $store, DocumentStore {
                fn create_document(doc: &NewDocument) -> Document;
                fn document(id: Uuid) -> Option<Document>;
                fn document_brief(id: Uuid) -> Option<String>;
                fn document_provenance(id: Uuid) -> Option<$crate::Provenance>;
                fn created_through_mcp(id: Uuid) -> bool;
                fn children(parent_id: Uuid) -> Vec<Document>;
                fn repository_documents(repo_owner: &str, repo_name: &str, limit: u32)
                    -> Vec<Document>;
                fn document_by_slug(repo_owner: &str, repo_name: &str, slug: &str)
                    -> Option<Document>;
                fn set_archived(id: Uuid, archived: bool) -> ();
                fn rename_document(document_id: Uuid, new_slug: &str, new_title: &str)
                    -> Document;
                fn earlier_slugs(document_id: Uuid) -> Vec<String>;
                fn advance_revision(id: Uuid, kind: RevisionKind, expected: i64) -> Advance;
            } {});
            sql_store_impls!(@forward $store, ContentStore {
                fn append_update(document_id: Uuid, update: &[u8], now_ms: UnixMillis) -> i64;
                fn append_updates(document_id: Uuid, updates: &[&[u8]], now_ms: UnixMillis)
                    -> Vec<i64>;
                fn commit_plan_edit(
                    document_id: Uuid,
                    expected_plan_revision: i64,
                    owner: Option<&OwnerGuard>,
                    update: &[u8],
                    now_ms: UnixMillis,
                ) -> PlanCommit;
                fn document_content(document_id: Uuid) -> DocumentContent;
                fn write_checkpoint(document_id: Uuid, upto_seq: i64, state: &[u8]) -> ();
                fn reset_content(document_id: Uuid, state: &[u8]) -> i64;
            } {});
            sql_store_impls!(@forward $store, TranscriptStore {
                fn append_transcript(document_id: Uuid, entry: &NewTranscriptEntry)
                    -> TranscriptEntry;
                fn queue_transcript(document_id: Uuid, entry: &NewTranscriptEntry)
                    -> Pending<TranscriptEntry>;
                fn last_transcript_seq(document_id: Uuid) -> i64;
                fn transcript(document_id: Uuid, after_seq: i64, limit: u32)
                    -> Vec<TranscriptEntry>;
                fn transcript_by_key(document_id: Uuid, key: &str) -> Option<TranscriptEntry>;
            } {});
            sql_store_impls!(@forward $store, OwnershipStore {
                fn ownership(document_id: Uuid) -> Ownership;
                fn claim_ownership(document_id: Uuid, holder: &Holder, now_ms: UnixMillis)
                    -> Claim;
                fn release_ownership(document_id: Uuid, generation: i64) -> Release;
                fn clear_all_ownership(reach: Reach) -> u64;
                fn clear_unheld_ownership(reach: Reach) -> u64;
            } {});
            sql_store_impls!(@forward $store, HoldStore {
                fn put_link_hold(hold: &LinkHold) -> ();
                fn link_holds() -> Vec<LinkHold>;
                fn end_handover(document_id: Uuid, written_at_ms: UnixMillis) -> bool;
                fn delete_link_hold(document_id: Uuid, written_at_ms: UnixMillis) -> bool;
            } {});
            sql_store_impls!(@forward $store, ModelChoiceStore {
                fn put_model_choice(choice: &ModelChoice) -> ();
                fn clear_model_choice(document_id: Uuid) -> bool;
                fn model_choice(document_id: Uuid) -> Option<ModelChoice>;
                fn pause_participation(pause: &ParticipationPause) -> ();
                fn resume_participation(document_id: Uuid) -> bool;
                fn participation_pause(document_id: Uuid) -> Option<ParticipationPause>;
            } {});
            sql_store_impls!(@forward $store, AttachmentStore {
                fn put_attachment(file: &NewAttachment, limit: UnsentLimit) -> Kept;
                fn attachment(document_id: Uuid, id: Uuid) -> Option<(Attachment, Vec<u8>)>;
                fn take_back_attachment(document_id: Uuid, id: Uuid, uploader: &str) -> TakeBack;
                fn forget_unsent_attachments(before_ms: UnixMillis) -> u64;
            } {});
            sql_store_impls!(@forward $store, JobStore {
                fn enqueue_job(job: &NewJob) -> Enqueued;
                fn job(id: Uuid) -> Option<Job>;
                fn document_jobs(document_id: Uuid, limit: u32) -> Vec<Job>;
                fn last_completed_job(document_id: Uuid, target: &str) -> Option<Job>;
                fn due_jobs(now_ms: UnixMillis, limit: u32) -> Vec<Job>;
                fn claim_job(id: Uuid, claim_owner: &str, now_ms: UnixMillis, ttl_ms: i64)
                    -> Option<Job>;
                fn renew_job_claim(id: Uuid, claim_generation: i64, now_ms: UnixMillis,
                    ttl_ms: i64) -> bool;
                fn set_job_progress(id: Uuid, claim_generation: i64, progress: &str,
                    now_ms: UnixMillis) -> bool;
                fn settle_job(id: Uuid, claim_generation: i64, settlement: &Settlement,
                    now_ms: UnixMillis) -> bool;
                fn cancel_job(id: Uuid, reason: &str, now_ms: UnixMillis) -> bool;
                fn interrupt_running_jobs(reason: &str, now_ms: UnixMillis, reach: Reach) -> u64;
                fn job_counts() -> Vec<(JobState, u64)>;
            } {});
            sql_store_impls!(@forward $store, CommentStore {
                fn start_comment(thread: &NewCommentThread) -> ThreadWithNotes;
                fn reply_comment(document_id: Uuid, thread_id: Uuid, note: &NewCommentNote,
                    max_replies: i64) -> Replied;
                fn resolve_comment(document_id: Uuid, thread_id: Uuid, by: &str,
                    at_ms: UnixMillis) -> CommentThread;
                fn set_comment_result(document_id: Uuid, thread_id: Uuid, revision: i64)
                    -> CommentThread;
                fn comment_thread(document_id: Uuid, thread_id: Uuid)
                    -> Option<ThreadWithNotes>;
                fn comment_threads(document_id: Uuid, limit: i64) -> Vec<ThreadWithNotes>;
            } {});
            sql_store_impls!(@forward $store, GraphStore {
                fn graph_versions(document_id: Uuid) -> Vec<GraphVersion>;
                fn change_graph(document_id: Uuid, change: &GraphChange, now_ms: UnixMillis)
                    -> Result<GraphVersion, GraphRefusal>;
                fn start_implementation(document_id: Uuid, counters: GraphCounters,
                    run_id: &str, progress: &str, build: Option<Uuid>, now_ms: UnixMillis)
                    -> Result<ImplementationRun, GraphRefusal>;
                fn implementation_run(run_id: &str) -> Option<ImplementationRun>;
                fn implementation_runs(document_id: Uuid) -> Vec<ImplementationRun>;
                fn implementation_report(run_id: &str, key: &str) -> Option<(String, String)>;
                fn report_implementation(run_id: &str, report: &RunReport, now_ms: UnixMillis)
                    -> Reported;
            } {});
            sql_store_impls!(@forward $store, MachineStore {
                fn pair_machine(machine: &NewMachine) -> Machine;
                fn machine(id: Uuid) -> Option<Machine>;
                fn machine_credential(id: Uuid) -> Option<(i64, Vec<u8>)>;
                fn set_machine_credential(id: Uuid, expected_revision: i64, sealed: &[u8],
                    release: Option<&str>) -> Option<i64>;
                fn machines_of(account_id: Uuid) -> Vec<Machine>;
                fn share_machine(id: Uuid, account_id: Uuid, now_ms: UnixMillis) -> bool;
                fn unshare_machine(id: Uuid, account_id: Uuid) -> bool;
                fn machine_shares(id: Uuid) -> Vec<Account>;
                fn set_favourite_machine(account_id: Uuid, machine_id: Option<Uuid>) -> ();
                fn favourite_machine(account_id: Uuid) -> Option<Uuid>;
                fn choose_machine(document_id: Uuid, choice: Option<&MachineChoice>)
                    -> Option<MachineChoice>;
                fn machine_choice(document_id: Uuid) -> Option<MachineChoice>;
                fn machine_documents(machine_id: Uuid) -> Vec<MachineChoice>;
                fn choose_default_machine(choice: &MachineChoice) -> (MachineChoice, bool);
                fn withdraw_default_machine(document_id: Uuid, machine_id: Uuid) -> bool;
                fn default_machine_choices() -> Vec<MachineChoice>;
                fn put_planner_credential(credential: &PlannerCredential) -> ();
                fn planner_credential(digest: &str) -> Option<PlannerCredential>;
                fn unpair_machine(id: Uuid) -> bool;
                fn record_connector_poll(poll: &ConnectorPoll) -> ();
                fn connector_polls_since(since_ms: UnixMillis) -> Vec<ConnectorPoll>;
            } {});
            sql_store_impls!(@forward $store, RequestStore {
                fn claim_request(key: &RequestKey, digest: &str, now_ms: UnixMillis,
                    expires_at_ms: UnixMillis) -> RequestClaim;
                fn answer_request(key: &RequestKey, since_ms: UnixMillis, answer: &str) -> bool;
                fn release_request(key: &RequestKey, since_ms: UnixMillis) -> bool;
            } {});
            sql_store_impls!(@forward $store, BuildStore {
                fn approve_and_queue(document_id: Uuid, approval: &GraphChange,
                    build: &NewBuild, now_ms: UnixMillis)
                    -> Result<(GraphVersion, Build), GraphRefusal>;
                fn queue_build(document_id: Uuid, build: &NewBuild, now_ms: UnixMillis)
                    -> Result<Build, QueueRefusal>;
                fn build(id: Uuid) -> Option<Build>;
                fn machine_builds(machine_id: Uuid) -> Vec<Build>;
                fn document_builds(document_id: Uuid) -> Vec<Build>;
                fn pick_up_build(id: Uuid, bridge_digest: &str, now_ms: UnixMillis)
                    -> Option<Build>;
                fn build_by_bridge(bridge_digest: &str) -> Option<Build>;
                fn fail_build(id: Uuid, reason: &str, now_ms: UnixMillis) -> Option<Build>;
                fn built_source(document_id: Uuid) -> Option<BuiltSource>;
                fn queue_rebuild(document_id: Uuid, build: &NewBuild, after: &str,
                    after_plan_revision: i64, now_ms: UnixMillis)
                    -> Result<Build, QueueRefusal>;
                fn land_rebuild(id: Uuid, definition: &str, progress: &str, now_ms: UnixMillis)
                    -> Landing;
                fn expire_builds(reach: Reach, cutoff_ms: UnixMillis, now_ms: UnixMillis)
                    -> Vec<Build>;
                fn silent_builds(cutoff_ms: UnixMillis) -> Vec<Build>;
                fn silent_build_runs(cutoff_ms: UnixMillis) -> Vec<ImplementationRun>;
            } {});
            sql_store_impls!(@forward $store, TitleStore {
                fn title_sidecar(document_id: Uuid) -> TitleSidecar;
                fn draft_title(document_id: Uuid, expected: &str, new_title: &str) -> Drafted;
            } {});
            sql_store_impls!(@forward $store, RunStore {
                fn save_run(run: &RunRecord, stages: &[StageRecord], replace: bool) -> ();
                fn runs(document_id: Uuid) -> Vec<RunRecord>;
                fn run_stages(document_id: Uuid, run_id: &str, offset: i64, limit: i64)
                    -> Option<StagePage>;
                fn delete_ended_runs(document_id: Uuid) -> u64;
                fn stop_unheld_runs(reach: Reach) -> u64;
            } {});
            sql_store_impls!(@forward $store, LeaseStore {
                fn acquire_writer_lease(holder: &str, now_ms: UnixMillis, ttl_ms: i64)
                    -> LeaseAcquire;
                fn renew_writer_lease(lease: &WriterLease, now_ms: UnixMillis, ttl_ms: i64)
                    -> Option<WriterLease>;
                fn release_writer_lease(lease: &WriterLease) -> ();
            } {});
            sql_store_impls!(@forward $store, DocumentLeaseStore {
                fn acquire_document_lease(document_id: Uuid, holder: &str, now_ms: UnixMillis,
                    ttl_ms: i64) -> LeaseAcquire;
                fn renew_document_leases(leases: &[(Uuid, WriterLease)], now_ms: UnixMillis,
                    ttl_ms: i64) -> Vec<(Uuid, WriterLease)>;
                fn release_document_lease(document_id: Uuid, lease: &WriterLease) -> ();
                fn document_lease(document_id: Uuid) -> Option<DocumentLeaseRow>;
            } {});
        };
    };
    // One trait: each listed method becomes an `async fn` returning `StoreResult<$ret>` that
    // forwards to `self.sql`; `$extra` holds the trait's other items, written out.
    (@forward $store:ty, $trait:ident {
        $(fn $method:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*
    } { $($extra:tt)* }) => {
        #[::async_trait::async_trait]
        impl $trait for $store {
            $(
                async fn $method(&self, $($arg: $ty),*) -> $crate::StoreResult<$ret> {
                    self.sql.$method($($arg),*).await
                }
            )*
            $($extra)*
        }
    };
}

pub(crate) use sql_store_impls;

/// A check both SQL backends run on their own handle type: acknowledged writes that arrive
/// while the writer is held up share one transaction, and none is answered before it commits.
#[cfg(test)]
pub(crate) mod group_commit_check {
    use std::collections::BTreeSet;
    use std::future::Future;
    use std::sync::Arc;

    use uuid::Uuid;

    use super::SqlStore;
    use crate::{Claim, Holder, NewDocument, NewTranscriptEntry, Store, StoreError};

    /// Documents written to, and the writes to each of them of each kind.
    const DOCUMENTS: u128 = 4;
    const PER_DOCUMENT: usize = 12;

    fn doc(n: u128) -> NewDocument {
        NewDocument {
            id: Uuid::from_u128(0xd0c0 + n),
            repo_owner: "octo".into(),
            repo_name: "batch".into(),
            slug: format!("doc-{n}"),
            title: format!("Doc {n}"),
            created_at_ms: 1,
            parent_id: None,
            ..NewDocument::default()
        }
    }

    /// `store` writes through `sql`'s writer; `hold` keeps that writer from beginning a
    /// transaction until the future it gives is run. Chat entries, journal entries and one
    /// claim per document are sent at once, with the same to an unknown document.
    pub(crate) async fn held_writes_commit_together<DB, H, HF, R>(
        store: Arc<dyn Store>,
        sql: &SqlStore<DB>,
        hold: H,
    ) where
        DB: sqlx::Database,
        H: FnOnce() -> HF,
        HF: Future<Output = R>,
        R: Future<Output = ()>,
    {
        let account = store.upsert_account(7, "mona", 1).await.expect("account");
        let holder = Holder {
            account_id: account.id,
            login: "mona".into(),
            browser_login_id: Uuid::from_u128(0xb1),
        };
        let login = crate::BrowserLogin {
            id: holder.browser_login_id,
            account_id: account.id,
            verifier_hash: "h".into(),
            created_at_ms: 1,
            expires_at_ms: i64::MAX,
            signed_out_at_ms: None,
        };
        store.create_browser_login(&login).await.expect("login");
        let mut ids: Vec<Uuid> = Vec::new();
        for n in 0..DOCUMENTS {
            ids.push(store.create_document(&doc(n)).await.expect("document").id);
        }
        let before = sql.write_batches();
        let release = hold().await;
        let unknown = Uuid::from_u128(0xdead);
        let mut tasks = Vec::new();
        for (i, id) in ids.iter().copied().chain([unknown]).enumerate() {
            for j in 0..PER_DOCUMENT {
                let chat_store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let entry = NewTranscriptEntry {
                        author_login: Some("mona".into()),
                        kind: "member".into(),
                        body: format!("{i}-{j}"),
                        created_at_ms: 2,
                        key: None,
                        refs: None,
                        attachments: Vec::new(),
                    };
                    let chat = chat_store
                        .append_transcript(id, &entry)
                        .await
                        .map(|e| e.seq);
                    (id, "chat", chat)
                }));
                let update_store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let update = update_store
                        .append_update(id, format!("u{i}-{j}").as_bytes(), 2)
                        .await;
                    (id, "update", update)
                }));
            }
            let (claim_store, holder) = (store.clone(), holder.clone());
            tasks.push(tokio::spawn(async move {
                let claim = claim_store
                    .claim_ownership(id, &holder, 2)
                    .await
                    .map(|c| match c {
                        Claim::Claimed(o) => o.generation,
                        Claim::HeldByOther(_) => -1,
                    });
                (id, "claim", claim)
            }));
        }
        // Every write queued (the first of each lane busy taken by its held-up task): none
        // answered.
        let busy = loop {
            let lanes = sql.write_lanes();
            let busy: BTreeSet<usize> = ids
                .iter()
                .chain([&unknown])
                .map(|id| super::group::lane(*id, lanes))
                .collect();
            if lanes > 0 && sql.queued_writes() + busy.len() >= tasks.len() {
                break busy;
            }
            tokio::task::yield_now().await;
        };
        assert!(
            tasks.iter().all(|t| !t.is_finished()),
            "no write is answered before its transaction commits"
        );
        release.await;
        let mut seqs = std::collections::BTreeMap::<(Uuid, &str), BTreeSet<i64>>::new();
        for task in tasks {
            let (id, kind, outcome) = task.await.expect("task");
            if id == unknown {
                assert!(
                    matches!(outcome, Err(StoreError::NotFound("document"))),
                    "{kind} to an unknown document: {outcome:?}"
                );
                continue;
            }
            let n = outcome.unwrap_or_else(|e| panic!("{kind}: {e}"));
            seqs.entry((id, kind)).or_default().insert(n);
        }
        for id in &ids {
            let gap_free: BTreeSet<i64> = (1..=PER_DOCUMENT as i64).collect();
            assert_eq!(seqs[&(*id, "chat")], gap_free, "chat seqs of {id}");
            assert_eq!(seqs[&(*id, "update")], gap_free, "journal seqs of {id}");
            assert_eq!(seqs[&(*id, "claim")], BTreeSet::from([1]), "claim of {id}");
            let read = store.transcript(*id, 0, 100).await.expect("transcript");
            assert_eq!(
                read.len(),
                PER_DOCUMENT,
                "every acknowledged entry is stored"
            );
        }
        assert_eq!(
            sql.write_batches() - before,
            busy.len() as u64,
            "the writes held up on each lane shared one transaction"
        );
    }
}
