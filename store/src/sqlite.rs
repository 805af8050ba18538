//! [`SqliteStore`]: the embedded default [`Store`] backend, one SQLite file through sqlx.
//!
//! Owns: opening the file (parent directories and file created if missing, WAL journal, a busy
//! timeout, foreign keys on), applying `migrations/sqlite`, and the SQL of each store method.
//! Each method is one statement, or a `BEGIN IMMEDIATE` transaction (which takes SQLite's single
//! write lock up front), so it is atomic against other connections and other processes. UUIDs are
//! stored as hyphenated lowercase TEXT.
//! Does not own: the rules' meaning (see [`super::Store`]) or when to call them.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::error::ErrorKind;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use uuid::Uuid;

use super::{
    account_id_for_github_user, ascii_key, check_parent, checkpoint_out_of_range,
    is_document_id_conflict, slug_conflict, slug_taken, sqlx_error, sqlx_error_kind, Account,
    Advance, BrowserLogin, Checkpoint, Claim, Document, DocumentContent, Holder, LeaseAcquire,
    NewDocument, NewTranscriptEntry, Ownership, PlanCommit, Release, RevisionKind, Store,
    StoreError, StoreResult, TranscriptEntry, UnixMillis, WriterLease, SQL_RACE_RETRIES,
    WRITER_LEASE_NAME,
};
use crate::{
    ContentStore, DocumentStore, LeaseStore, OwnershipStore, SignInStore, TranscriptStore,
};

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in the pool: readers run concurrently under WAL, writers take turns.
const MAX_CONNECTIONS: u32 = 8;

/// The SQLite backend. Cheap to clone (a pool handle).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` and applies the migrations.
    pub async fn open(path: &Path) -> StoreResult<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                StoreError::Backend(format!(
                    "creating the directory {} of the SQLite database: {e}",
                    parent.display()
                ))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(options)
            .await
            .map_err(|e| sqlx_error(&format!("opening SQLite at {}", path.display()), e))?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| sqlx_error("migrating SQLite", e.into()))?;
        Ok(Self { pool })
    }

    /// Closes every connection of the pool (waits for those in use to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn uuid_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

fn parse_uuid(text: &str, column: &str) -> StoreResult<Uuid> {
    Uuid::from_str(text)
        .map_err(|_| StoreError::Backend(format!("column {column} holds a malformed uuid")))
}

fn revision_column(kind: RevisionKind) -> &'static str {
    match kind {
        RevisionKind::Plan => "plan_revision",
        RevisionKind::Storage => "storage_revision",
    }
}

#[derive(sqlx::FromRow)]
struct AccountRow {
    id: String,
    github_user_id: i64,
    login: String,
    created_at_ms: i64,
}

impl AccountRow {
    fn into_account(self) -> StoreResult<Account> {
        Ok(Account {
            id: parse_uuid(&self.id, "accounts.id")?,
            github_user_id: self.github_user_id,
            login: self.login,
            created_at_ms: self.created_at_ms,
        })
    }
}

#[derive(sqlx::FromRow)]
struct BrowserLoginRow {
    id: String,
    account_id: String,
    verifier_hash: String,
    created_at_ms: i64,
    expires_at_ms: i64,
    signed_out_at_ms: Option<i64>,
}

impl BrowserLoginRow {
    fn into_login(self) -> StoreResult<BrowserLogin> {
        Ok(BrowserLogin {
            id: parse_uuid(&self.id, "browser_logins.id")?,
            account_id: parse_uuid(&self.account_id, "browser_logins.account_id")?,
            verifier_hash: self.verifier_hash,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            signed_out_at_ms: self.signed_out_at_ms,
        })
    }
}

#[derive(sqlx::FromRow)]
struct DocumentRow {
    id: String,
    repo_owner: String,
    repo_name: String,
    slug: String,
    title: String,
    plan_revision: i64,
    storage_revision: i64,
    yjs_epoch: i64,
    archived: bool,
    created_at_ms: i64,
    parent_id: Option<String>,
}

impl DocumentRow {
    fn into_document(self) -> StoreResult<Document> {
        Ok(Document {
            id: parse_uuid(&self.id, "documents.id")?,
            repo_owner: self.repo_owner,
            repo_name: self.repo_name,
            slug: self.slug,
            title: self.title,
            plan_revision: self.plan_revision,
            storage_revision: self.storage_revision,
            yjs_epoch: self.yjs_epoch,
            archived: self.archived,
            created_at_ms: self.created_at_ms,
            parent_id: self
                .parent_id
                .map(|id| parse_uuid(&id, "documents.parent_id"))
                .transpose()?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct TranscriptRow {
    document_id: String,
    seq: i64,
    author_login: Option<String>,
    kind: String,
    body: String,
    created_at_ms: i64,
}

impl TranscriptRow {
    fn into_entry(self) -> StoreResult<TranscriptEntry> {
        Ok(TranscriptEntry {
            document_id: parse_uuid(&self.document_id, "chat_transcript.document_id")?,
            seq: self.seq,
            author_login: self.author_login,
            kind: self.kind,
            body: self.body,
            created_at_ms: self.created_at_ms,
        })
    }
}

#[derive(sqlx::FromRow)]
struct OwnershipRow {
    document_id: String,
    generation: i64,
    holder_account_id: Option<String>,
    holder_login: Option<String>,
    holder_browser_login_id: Option<String>,
    claimed_at_ms: Option<i64>,
}

impl OwnershipRow {
    fn into_ownership(self) -> StoreResult<Ownership> {
        let holder = match (
            self.holder_account_id,
            self.holder_login,
            self.holder_browser_login_id,
        ) {
            (Some(account_id), Some(login), Some(browser_login_id)) => Some(Holder {
                account_id: parse_uuid(&account_id, "planner_ownership.holder_account_id")?,
                login,
                browser_login_id: parse_uuid(
                    &browser_login_id,
                    "planner_ownership.holder_browser_login_id",
                )?,
            }),
            _ => None,
        };
        Ok(Ownership {
            document_id: parse_uuid(&self.document_id, "planner_ownership.document_id")?,
            generation: self.generation,
            claimed_at_ms: holder.as_ref().and(self.claimed_at_ms),
            holder,
        })
    }
}

#[derive(sqlx::FromRow)]
struct LeaseRow {
    holder: Option<String>,
    epoch: i64,
    expires_at_ms: i64,
}

const ACCOUNT_COLUMNS: &str = "id, github_user_id, login, created_at_ms";
const LOGIN_COLUMNS: &str =
    "id, account_id, verifier_hash, created_at_ms, expires_at_ms, signed_out_at_ms";
const DOCUMENT_COLUMNS: &str = "id, repo_owner, repo_name, slug, title, plan_revision, \
     storage_revision, yjs_epoch, archived, created_at_ms, parent_id";
const TRANSCRIPT_COLUMNS: &str = "document_id, seq, author_login, kind, body, created_at_ms";
const OWNERSHIP_COLUMNS: &str = "document_id, generation, holder_account_id, holder_login, \
     holder_browser_login_id, claimed_at_ms";

/// Writes one journal row inside the caller's transaction (which numbered it).
async fn journal_update(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    document_id: Uuid,
    seq: i64,
    update: &[u8],
    now_ms: UnixMillis,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO document_updates (document_id, seq, update_v1, created_at_ms) \
         VALUES (?1, ?2, ?3, ?4)",
    )
    .bind(uuid_text(document_id))
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
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    document_id: Uuid,
    upto_seq: i64,
    yjs_epoch: i64,
    state: &[u8],
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO document_checkpoints (document_id, upto_seq, yjs_epoch, state_v1) \
         VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (document_id) DO UPDATE SET upto_seq = excluded.upto_seq, \
         yjs_epoch = excluded.yjs_epoch, state_v1 = excluded.state_v1",
    )
    .bind(uuid_text(document_id))
    .bind(upto_seq)
    .bind(yjs_epoch)
    .bind(state)
    .execute(&mut **tx)
    .await
    .map_err(|e| sqlx_error("writing a checkpoint", e))?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|e| sqlx_error("ping", e))?;
        Ok(())
    }
}

#[async_trait]
impl SignInStore for SqliteStore {
    async fn upsert_account(
        &self,
        github_user_id: i64,
        login: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Account> {
        let sql = format!(
            "INSERT INTO accounts (id, github_user_id, login, login_key, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (github_user_id) DO UPDATE \
             SET login = excluded.login, login_key = excluded.login_key \
             RETURNING {ACCOUNT_COLUMNS}"
        );
        let row: AccountRow = sqlx::query_as(&sql)
            .bind(uuid_text(account_id_for_github_user(github_user_id)))
            .bind(github_user_id)
            .bind(login)
            .bind(ascii_key(login))
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| sqlx_error("upserting an account", e))?;
        row.into_account()
    }

    async fn account(&self, id: Uuid) -> StoreResult<Option<Account>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = ?1");
        let row: Option<AccountRow> = sqlx::query_as(&sql)
            .bind(uuid_text(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account", e))?;
        row.map(AccountRow::into_account).transpose()
    }

    async fn account_by_login(&self, login: &str) -> StoreResult<Option<Account>> {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE login_key = ?1 \
             ORDER BY created_at_ms DESC, id DESC LIMIT 1"
        );
        let row: Option<AccountRow> = sqlx::query_as(&sql)
            .bind(ascii_key(login))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading an account by login", e))?;
        row.map(AccountRow::into_account).transpose()
    }

    async fn create_browser_login(&self, login: &BrowserLogin) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO browser_logins \
             (id, account_id, verifier_hash, created_at_ms, expires_at_ms, signed_out_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(uuid_text(login.id))
        .bind(uuid_text(login.account_id))
        .bind(&login.verifier_hash)
        .bind(login.created_at_ms)
        .bind(login.expires_at_ms)
        .bind(login.signed_out_at_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("account"),
            Some(ErrorKind::UniqueViolation) => {
                StoreError::Conflict("browser login id already exists".into())
            }
            _ => sqlx_error("creating a browser login", e),
        })?;
        Ok(())
    }

    async fn browser_login(&self, id: Uuid) -> StoreResult<Option<BrowserLogin>> {
        let sql = format!("SELECT {LOGIN_COLUMNS} FROM browser_logins WHERE id = ?1");
        let row: Option<BrowserLoginRow> = sqlx::query_as(&sql)
            .bind(uuid_text(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a browser login", e))?;
        row.map(BrowserLoginRow::into_login).transpose()
    }

    async fn sign_out_browser_login(&self, id: Uuid, now_ms: UnixMillis) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE browser_logins SET signed_out_at_ms = ?2 \
             WHERE id = ?1 AND signed_out_at_ms IS NULL",
        )
        .bind(uuid_text(id))
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| sqlx_error("signing out a browser login", e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_login_credential(
        &self,
        login_id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
    ) -> StoreResult<Option<i64>> {
        // BEGIN IMMEDIATE holds SQLite's write lock from the first read, so the revision read
        // and the write below cannot interleave with another writer.
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let signed_out: Option<Option<i64>> =
            sqlx::query_scalar("SELECT signed_out_at_ms FROM browser_logins WHERE id = ?1")
                .bind(uuid_text(login_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a browser login", e))?;
        match signed_out {
            None => return Err(StoreError::NotFound("browser login")),
            Some(Some(_)) => return Ok(None),
            Some(None) => {}
        }
        let current: Option<i64> = sqlx::query_scalar(
            "SELECT revision FROM browser_login_credentials WHERE login_id = ?1",
        )
        .bind(uuid_text(login_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a login credential revision", e))?;
        if current.unwrap_or(0) != expected_revision {
            return Ok(None);
        }
        let revision = expected_revision + 1;
        sqlx::query(
            "INSERT INTO browser_login_credentials (login_id, revision, sealed) \
             VALUES (?1, ?2, ?3) \
             ON CONFLICT (login_id) DO UPDATE \
             SET revision = excluded.revision, sealed = excluded.sealed",
        )
        .bind(uuid_text(login_id))
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

    async fn login_credential(&self, login_id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>> {
        let row: Option<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT revision, sealed FROM browser_login_credentials \
             WHERE login_id = ?1 AND sealed IS NOT NULL",
        )
        .bind(uuid_text(login_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a login credential", e))?;
        Ok(row)
    }

    async fn delete_login_credential(&self, login_id: Uuid) -> StoreResult<bool> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let login_known: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM browser_logins WHERE id = ?1")
                .bind(uuid_text(login_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a browser login", e))?;
        if login_known.is_none() {
            return Ok(false);
        }
        let had: Option<bool> = sqlx::query_scalar(
            "SELECT sealed IS NOT NULL FROM browser_login_credentials WHERE login_id = ?1",
        )
        .bind(uuid_text(login_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("reading a login credential", e))?;
        // The row stays, emptied, with its revision advanced: a write against the old revision
        // (a refresh racing the sign-out) is refused rather than recreating the credential.
        sqlx::query(
            "INSERT INTO browser_login_credentials (login_id, revision, sealed) \
             VALUES (?1, 1, NULL) \
             ON CONFLICT (login_id) DO UPDATE \
             SET revision = browser_login_credentials.revision + 1, sealed = NULL",
        )
        .bind(uuid_text(login_id))
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting a login credential", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a login credential deletion", e))?;
        Ok(had.unwrap_or(false))
    }

    async fn delete_expired_logins(&self, now_ms: UnixMillis) -> StoreResult<u64> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        // Credentials first (the foreign key also cascades; this does not rely on it).
        sqlx::query(
            "DELETE FROM browser_login_credentials WHERE login_id IN \
             (SELECT id FROM browser_logins \
              WHERE signed_out_at_ms IS NOT NULL OR expires_at_ms <= ?1)",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting credentials of expired logins", e))?;
        let done = sqlx::query(
            "DELETE FROM browser_logins WHERE signed_out_at_ms IS NOT NULL OR expires_at_ms <= ?1",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| sqlx_error("deleting expired logins", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing the deletion of expired logins", e))?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl DocumentStore for SqliteStore {
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        let conflict_or_backend = |e: sqlx::Error| match sqlx_error_kind(&e) {
            Some(ErrorKind::UniqueViolation) if is_document_id_conflict(&e) => {
                StoreError::Conflict("document id already exists".into())
            }
            Some(ErrorKind::UniqueViolation) => StoreError::Conflict(slug_conflict(doc)),
            _ => sqlx_error("creating a document", e),
        };
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        // The parent, read under the write lock, so it cannot be archived before the insert.
        if let Some(parent_id) = doc.parent_id {
            let sql = format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = ?1");
            let parent: Option<DocumentRow> = sqlx::query_as(&sql)
                .bind(uuid_text(parent_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a parent document", e))?;
            let parent = parent.map(DocumentRow::into_document).transpose()?;
            check_parent(doc, parent.as_ref())?;
        }
        // A former slug of another document is taken too (the write lock is held from here).
        let aliased: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM document_slug_aliases \
             WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3",
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
             slug, title, plan_revision, storage_revision, archived, created_at_ms, parent_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, 0, 0, ?8, ?9)",
        )
        .bind(uuid_text(doc.id))
        .bind(&doc.repo_owner)
        .bind(&doc.repo_name)
        .bind(ascii_key(&doc.repo_owner))
        .bind(ascii_key(&doc.repo_name))
        .bind(&doc.slug)
        .bind(&doc.title)
        .bind(doc.created_at_ms)
        .bind(doc.parent_id.map(uuid_text))
        .execute(&mut *tx)
        .await
        .map_err(conflict_or_backend)?;
        sqlx::query("INSERT INTO planner_ownership (document_id, generation) VALUES (?1, 0)")
            .bind(uuid_text(doc.id))
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
        })
    }

    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        let sql = format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = ?1");
        let row: Option<DocumentRow> = sqlx::query_as(&sql)
            .bind(uuid_text(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?;
        row.map(DocumentRow::into_document).transpose()
    }

    async fn children(&self, parent_id: Uuid) -> StoreResult<Vec<Document>> {
        // Documents are never deleted, so a parent seen here stays known for the second read.
        let known: Option<i64> = sqlx::query_scalar("SELECT 1 FROM documents WHERE id = ?1")
            .bind(uuid_text(parent_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?;
        if known.is_none() {
            return Err(StoreError::NotFound("document"));
        }
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents WHERE parent_id = ?1 \
             ORDER BY created_at_ms, id"
        );
        let rows: Vec<DocumentRow> = sqlx::query_as(&sql)
            .bind(uuid_text(parent_id))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading child documents", e))?;
        rows.into_iter().map(DocumentRow::into_document).collect()
    }

    async fn document_by_slug(
        &self,
        repo_owner: &str,
        repo_name: &str,
        slug: &str,
    ) -> StoreResult<Option<Document>> {
        // The canonical slug, else an alias; a slug is never both (see `rename_document`), so
        // at most one row comes back. Each half is one lookup in its table's unique index.
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents \
             WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3 \
             UNION ALL \
             SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = \
             (SELECT document_id FROM document_slug_aliases \
              WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3)"
        );
        let row: Option<DocumentRow> = sqlx::query_as(&sql)
            .bind(ascii_key(repo_owner))
            .bind(ascii_key(repo_name))
            .bind(slug)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document by slug", e))?;
        row.map(DocumentRow::into_document).transpose()
    }

    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        let done = sqlx::query("UPDATE documents SET archived = ?2 WHERE id = ?1")
            .bind(uuid_text(id))
            .bind(archived)
            .execute(&self.pool)
            .await
            .map_err(|e| sqlx_error("archiving a document", e))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("document"));
        }
        Ok(())
    }

    async fn rename_document(
        &self,
        document_id: Uuid,
        new_slug: &str,
        new_title: &str,
    ) -> StoreResult<Document> {
        let id = uuid_text(document_id);
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let sql = format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id = ?1");
        let current: DocumentRow = sqlx::query_as(&sql)
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?
            .ok_or(StoreError::NotFound("document"))?;
        let taken = || {
            StoreError::Conflict(slug_taken(
                &current.repo_owner,
                &current.repo_name,
                new_slug,
            ))
        };
        if current.slug != new_slug {
            let (owner_key, repo_key) = (
                ascii_key(&current.repo_owner),
                ascii_key(&current.repo_name),
            );
            let canonical: Option<i64> = sqlx::query_scalar(
                "SELECT 1 FROM documents \
                 WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3",
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
            let alias_of: Option<String> = sqlx::query_scalar(
                "SELECT document_id FROM document_slug_aliases \
                 WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3",
            )
            .bind(&owner_key)
            .bind(&repo_key)
            .bind(new_slug)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading slug aliases", e))?;
            match alias_of {
                Some(owner) if owner != id => return Err(taken()),
                // Back to a former slug: it is canonical again, no longer an alias.
                Some(_) => {
                    sqlx::query(
                        "DELETE FROM document_slug_aliases \
                         WHERE repo_owner_key = ?1 AND repo_name_key = ?2 AND slug = ?3",
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
                 SELECT ?1, ?2, ?3, ?4, COALESCE(MAX(position), 0) + 1 \
                 FROM document_slug_aliases WHERE document_id = ?1",
            )
            .bind(&id)
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
            "UPDATE documents SET slug = ?2, title = ?3 WHERE id = ?1 \
             RETURNING {DOCUMENT_COLUMNS}"
        );
        let renamed: DocumentRow = sqlx::query_as(&sql)
            .bind(&id)
            .bind(new_slug)
            .bind(new_title)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| match sqlx_error_kind(&e) {
                Some(ErrorKind::UniqueViolation) => taken(),
                _ => sqlx_error("renaming a document", e),
            })?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a rename", e))?;
        renamed.into_document()
    }

    async fn earlier_slugs(&self, document_id: Uuid) -> StoreResult<Vec<String>> {
        let known: Option<i64> = sqlx::query_scalar("SELECT 1 FROM documents WHERE id = ?1")
            .bind(uuid_text(document_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?;
        if known.is_none() {
            return Err(StoreError::NotFound("document"));
        }
        sqlx::query_scalar(
            "SELECT slug FROM document_slug_aliases WHERE document_id = ?1 ORDER BY position",
        )
        .bind(uuid_text(document_id))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading slug aliases", e))
    }

    async fn advance_revision(
        &self,
        id: Uuid,
        kind: RevisionKind,
        expected: i64,
    ) -> StoreResult<Advance> {
        let column = revision_column(kind);
        let sql = format!(
            "UPDATE documents SET {column} = {column} + 1 \
             WHERE id = ?1 AND {column} = ?2 RETURNING {column}"
        );
        let advanced: Option<i64> = sqlx::query_scalar(&sql)
            .bind(uuid_text(id))
            .bind(expected)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("advancing a revision", e))?;
        if let Some(revision) = advanced {
            return Ok(Advance::Advanced(revision));
        }
        let sql = format!("SELECT {column} FROM documents WHERE id = ?1");
        let current: Option<i64> = sqlx::query_scalar(&sql)
            .bind(uuid_text(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a revision", e))?;
        match current {
            Some(current) => Ok(Advance::Stale { current }),
            None => Err(StoreError::NotFound("document")),
        }
    }
}

#[async_trait]
impl ContentStore for SqliteStore {
    async fn append_update(
        &self,
        document_id: Uuid,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<i64> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let seq: Option<i64> = sqlx::query_scalar(
            "UPDATE documents SET last_update_seq = last_update_seq + 1, \
             storage_revision = storage_revision + 1 \
             WHERE id = ?1 RETURNING last_update_seq",
        )
        .bind(uuid_text(document_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("numbering an update", e))?;
        let seq = seq.ok_or(StoreError::NotFound("document"))?;
        journal_update(&mut tx, document_id, seq, update, now_ms).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing an update", e))?;
        Ok(seq)
    }

    async fn commit_plan_edit(
        &self,
        document_id: Uuid,
        expected_plan_revision: i64,
        update: &[u8],
        now_ms: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        // The guard is in the WHERE clause; the write lock is held from BEGIN IMMEDIATE.
        let committed: Option<(i64, i64)> = sqlx::query_as(
            "UPDATE documents SET plan_revision = plan_revision + 1, \
             storage_revision = storage_revision + 1, last_update_seq = last_update_seq + 1 \
             WHERE id = ?1 AND plan_revision = ?2 \
             RETURNING plan_revision, last_update_seq",
        )
        .bind(uuid_text(document_id))
        .bind(expected_plan_revision)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("advancing a plan revision", e))?;
        let Some((plan_revision, seq)) = committed else {
            let current: Option<i64> =
                sqlx::query_scalar("SELECT plan_revision FROM documents WHERE id = ?1")
                    .bind(uuid_text(document_id))
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| sqlx_error("reading a plan revision", e))?;
            return match current {
                Some(current) => Ok(PlanCommit::Stale { current }),
                None => Err(StoreError::NotFound("document")),
            };
        };
        journal_update(&mut tx, document_id, seq, update, now_ms).await?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a plan edit", e))?;
        Ok(PlanCommit::Committed { plan_revision, seq })
    }

    async fn document_content(&self, document_id: Uuid) -> StoreResult<DocumentContent> {
        // A deferred transaction: under WAL its first read fixes the snapshot every later read
        // in it sees, so the checkpoint and the journal agree.
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let yjs_epoch: i64 = sqlx::query_scalar("SELECT yjs_epoch FROM documents WHERE id = ?1")
            .bind(uuid_text(document_id))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| sqlx_error("reading a document", e))?
            .ok_or(StoreError::NotFound("document"))?;
        let checkpoint: Option<(i64, Vec<u8>, i64)> = sqlx::query_as(
            "SELECT upto_seq, state_v1, yjs_epoch FROM document_checkpoints \
             WHERE document_id = ?1",
        )
        .bind(uuid_text(document_id))
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
             WHERE document_id = ?1 AND seq > ?2 ORDER BY seq",
        )
        .bind(uuid_text(document_id))
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

    async fn write_checkpoint(
        &self,
        document_id: Uuid,
        upto_seq: i64,
        state: &[u8],
    ) -> StoreResult<()> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let (last_seq, yjs_epoch): (i64, i64) =
            sqlx::query_as("SELECT last_update_seq, yjs_epoch FROM documents WHERE id = ?1")
                .bind(uuid_text(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a document", e))?
                .ok_or(StoreError::NotFound("document"))?;
        if !(0..=last_seq).contains(&upto_seq) {
            return Err(StoreError::Conflict(checkpoint_out_of_range(
                upto_seq, last_seq,
            )));
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT upto_seq FROM document_checkpoints WHERE document_id = ?1")
                .bind(uuid_text(document_id))
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| sqlx_error("reading a checkpoint", e))?;
        if current.is_some_and(|current| current >= upto_seq) {
            return Ok(());
        }
        store_checkpoint(&mut tx, document_id, upto_seq, yjs_epoch, state).await?;
        sqlx::query("DELETE FROM document_updates WHERE document_id = ?1 AND seq <= ?2")
            .bind(uuid_text(document_id))
            .bind(upto_seq)
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("pruning the update journal", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a checkpoint", e))?;
        Ok(())
    }

    async fn reset_content(&self, document_id: Uuid, state: &[u8]) -> StoreResult<i64> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| sqlx_error("beginning a transaction", e))?;
        let (yjs_epoch, last_seq): (i64, i64) = sqlx::query_as(
            "UPDATE documents SET yjs_epoch = yjs_epoch + 1, \
             storage_revision = storage_revision + 1 \
             WHERE id = ?1 RETURNING yjs_epoch, last_update_seq",
        )
        .bind(uuid_text(document_id))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| sqlx_error("advancing a Yjs epoch", e))?
        .ok_or(StoreError::NotFound("document"))?;
        store_checkpoint(&mut tx, document_id, last_seq, yjs_epoch, state).await?;
        sqlx::query("DELETE FROM document_updates WHERE document_id = ?1")
            .bind(uuid_text(document_id))
            .execute(&mut *tx)
            .await
            .map_err(|e| sqlx_error("emptying the update journal", e))?;
        tx.commit()
            .await
            .map_err(|e| sqlx_error("committing a content reset", e))?;
        Ok(yjs_epoch)
    }
}

#[async_trait]
impl TranscriptStore for SqliteStore {
    async fn append_transcript(
        &self,
        document_id: Uuid,
        entry: &NewTranscriptEntry,
    ) -> StoreResult<TranscriptEntry> {
        // One statement: SQLite takes the write lock before reading MAX(seq), so concurrent
        // appends are serialized and each sees the one before it.
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO chat_transcript \
             (document_id, seq, author_login, kind, body, created_at_ms) \
             SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5 \
             FROM chat_transcript WHERE document_id = ?1 \
             RETURNING seq",
        )
        .bind(uuid_text(document_id))
        .bind(&entry.author_login)
        .bind(&entry.kind)
        .bind(&entry.body)
        .bind(entry.created_at_ms)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| match sqlx_error_kind(&e) {
            Some(ErrorKind::ForeignKeyViolation) => StoreError::NotFound("document"),
            _ => sqlx_error("appending to a transcript", e),
        })?;
        Ok(TranscriptEntry {
            document_id,
            seq,
            author_login: entry.author_login.clone(),
            kind: entry.kind.clone(),
            body: entry.body.clone(),
            created_at_ms: entry.created_at_ms,
        })
    }

    async fn last_transcript_seq(&self, document_id: Uuid) -> StoreResult<i64> {
        let (seq,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(MAX(seq), 0) FROM chat_transcript WHERE document_id = ?1",
        )
        .bind(uuid_text(document_id))
        .fetch_one(&self.pool)
        .await
        .map_err(|e| sqlx_error("reading a transcript's newest entry", e))?;
        Ok(seq)
    }

    async fn transcript(
        &self,
        document_id: Uuid,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let sql = format!(
            "SELECT {TRANSCRIPT_COLUMNS} FROM chat_transcript \
             WHERE document_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
        );
        let rows: Vec<TranscriptRow> = sqlx::query_as(&sql)
            .bind(uuid_text(document_id))
            .bind(after_seq)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading a transcript", e))?;
        rows.into_iter().map(TranscriptRow::into_entry).collect()
    }
}

#[async_trait]
impl OwnershipStore for SqliteStore {
    async fn ownership(&self, document_id: Uuid) -> StoreResult<Ownership> {
        let sql =
            format!("SELECT {OWNERSHIP_COLUMNS} FROM planner_ownership WHERE document_id = ?1");
        let row: Option<OwnershipRow> = sqlx::query_as(&sql)
            .bind(uuid_text(document_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("reading ownership", e))?;
        row.ok_or(StoreError::NotFound("document"))?
            .into_ownership()
    }

    async fn claim_ownership(
        &self,
        document_id: Uuid,
        holder: &Holder,
        now_ms: UnixMillis,
    ) -> StoreResult<Claim> {
        // The guard is in the WHERE clause: free, or already this account's. The generation
        // advances only when the row was free (SET reads the row's values before the update).
        let sql = format!(
            "UPDATE planner_ownership SET \
             generation = CASE WHEN holder_account_id IS NULL \
                          THEN generation + 1 ELSE generation END, \
             holder_account_id = ?2, holder_login = ?3, holder_browser_login_id = ?4, \
             claimed_at_ms = ?5 \
             WHERE document_id = ?1 AND (holder_account_id IS NULL OR holder_account_id = ?2) \
             RETURNING {OWNERSHIP_COLUMNS}"
        );
        for _ in 0..SQL_RACE_RETRIES {
            let claimed: Option<OwnershipRow> = sqlx::query_as(&sql)
                .bind(uuid_text(document_id))
                .bind(uuid_text(holder.account_id))
                .bind(&holder.login)
                .bind(uuid_text(holder.browser_login_id))
                .bind(now_ms)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("claiming ownership", e))?;
            if let Some(row) = claimed {
                return Ok(Claim::Claimed(row.into_ownership()?));
            }
            let current = self.ownership(document_id).await?;
            match &current.holder {
                Some(other) if other.account_id != holder.account_id => {
                    return Ok(Claim::HeldByOther(current))
                }
                // Released (or taken by this account) between the two statements: try again.
                _ => continue,
            }
        }
        Err(StoreError::Backend(
            "claiming ownership: the document kept changing hands".into(),
        ))
    }

    async fn release_ownership(&self, document_id: Uuid, generation: i64) -> StoreResult<Release> {
        let done = sqlx::query(
            "UPDATE planner_ownership SET holder_account_id = NULL, holder_login = NULL, \
             holder_browser_login_id = NULL, claimed_at_ms = NULL \
             WHERE document_id = ?1 AND holder_account_id IS NOT NULL AND generation = ?2",
        )
        .bind(uuid_text(document_id))
        .bind(generation)
        .execute(&self.pool)
        .await
        .map_err(|e| sqlx_error("releasing ownership", e))?;
        if done.rows_affected() == 1 {
            return Ok(Release::Released);
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT generation FROM planner_ownership WHERE document_id = ?1")
                .bind(uuid_text(document_id))
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| sqlx_error("reading ownership", e))?;
        match current {
            Some(current_generation) => Ok(Release::Refused { current_generation }),
            None => Err(StoreError::NotFound("document")),
        }
    }

    async fn clear_all_ownership(&self) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE planner_ownership SET holder_account_id = NULL, holder_login = NULL, \
             holder_browser_login_id = NULL, claimed_at_ms = NULL \
             WHERE holder_account_id IS NOT NULL",
        )
        .execute(&self.pool)
        .await
        .map_err(|e| sqlx_error("clearing ownership", e))?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn acquire_writer_lease(
        &self,
        holder: &str,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<LeaseAcquire> {
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        for _ in 0..SQL_RACE_RETRIES {
            // Free, expired or already ours: take it. Only a renewal of our unexpired lease keeps
            // the epoch.
            let taken: Option<LeaseRow> = sqlx::query_as(
                "UPDATE writer_lease SET \
                 epoch = CASE WHEN holder = ?2 AND expires_at_ms > ?3 \
                         THEN epoch ELSE epoch + 1 END, \
                 holder = ?2, expires_at_ms = ?4 \
                 WHERE name = ?1 AND (holder IS NULL OR expires_at_ms <= ?3 OR holder = ?2) \
                 RETURNING holder, epoch, expires_at_ms",
            )
            .bind(WRITER_LEASE_NAME)
            .bind(holder)
            .bind(now_ms)
            .bind(expires_at_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sqlx_error("acquiring the writer lease", e))?;
            if let Some(row) = taken {
                return Ok(LeaseAcquire::Acquired(WriterLease {
                    holder: holder.to_owned(),
                    epoch: row.epoch,
                    expires_at_ms: row.expires_at_ms,
                }));
            }
            let current: Option<LeaseRow> = sqlx::query_as(
                "SELECT holder, epoch, expires_at_ms FROM writer_lease WHERE name = ?1",
            )
            .bind(WRITER_LEASE_NAME)
            .fetch_optional(&self.pool)
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
                         VALUES (?1, NULL, 0, 0) ON CONFLICT (name) DO NOTHING",
                    )
                    .bind(WRITER_LEASE_NAME)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| sqlx_error("seeding the writer lease", e))?;
                }
            }
        }
        Err(StoreError::Backend(
            "acquiring the writer lease: it kept changing hands".into(),
        ))
    }

    async fn renew_writer_lease(
        &self,
        lease: &WriterLease,
        now_ms: UnixMillis,
        ttl_ms: i64,
    ) -> StoreResult<Option<WriterLease>> {
        let row: Option<LeaseRow> = sqlx::query_as(
            "UPDATE writer_lease SET expires_at_ms = ?4 \
             WHERE name = ?1 AND holder = ?2 AND epoch = ?3 \
             RETURNING holder, epoch, expires_at_ms",
        )
        .bind(WRITER_LEASE_NAME)
        .bind(&lease.holder)
        .bind(lease.epoch)
        .bind(now_ms.saturating_add(ttl_ms))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sqlx_error("renewing the writer lease", e))?;
        Ok(row.map(|row| WriterLease {
            holder: lease.holder.clone(),
            epoch: row.epoch,
            expires_at_ms: row.expires_at_ms,
        }))
    }

    async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
        sqlx::query(
            "UPDATE writer_lease SET holder = NULL, expires_at_ms = 0 \
             WHERE name = ?1 AND holder = ?2 AND epoch = ?3",
        )
        .bind(WRITER_LEASE_NAME)
        .bind(&lease.holder)
        .bind(lease.epoch)
        .execute(&self.pool)
        .await
        .map_err(|e| sqlx_error("releasing the writer lease", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqlitePoolOptions;

    /// The SQL shared with PostgreSQL numbers its parameters `$1`, `$2`…. SQLite reads `$N` as a
    /// *named* parameter (one slot per distinct name, in order of first appearance), and sqlx's
    /// driver binds each name to the argument its number names. So a parameter may repeat and
    /// appear out of order, as in PostgreSQL; this pins that down.
    #[tokio::test]
    async fn numbered_parameters_bind_by_number_repeated_and_out_of_order() {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        let row: (String, i64, i64, String) = sqlx::query_as("SELECT $3, $2, $2 + 1, $1 || $3")
            .bind("a")
            .bind(7_i64)
            .bind("c")
            .fetch_one(&pool)
            .await
            .expect("numbered parameters");
        assert_eq!(row, ("c".to_owned(), 7, 8, "ac".to_owned()));

        // In a WHERE clause and an INSERT … SELECT, as the shared statements use them.
        sqlx::query("CREATE TABLE t (k TEXT NOT NULL, n INTEGER NOT NULL)")
            .execute(&pool)
            .await
            .expect("table");
        for _ in 0..3 {
            sqlx::query(
                "INSERT INTO t (k, n) SELECT $1, COALESCE(MAX(n), 0) + $2 FROM t WHERE k = $1",
            )
            .bind("x")
            .bind(10_i64)
            .execute(&pool)
            .await
            .expect("insert");
        }
        let ns: Vec<i64> =
            sqlx::query_scalar("SELECT n FROM t WHERE $2 = $2 AND k = $1 ORDER BY n")
                .bind("x")
                .bind(0_i64)
                .fetch_all(&pool)
                .await
                .expect("select");
        assert_eq!(ns, vec![10, 20, 30]);
    }
}
