//! [`SqliteStore`]: the embedded default [`Store`](super::Store) backend, one SQLite file
//! through sqlx.
//!
//! Owns: opening the file (parent directories and file created if missing, WAL journal synced on
//! every commit, a busy timeout, foreign keys on) with one write connection and a pool of
//! readers beside it (writes take turns on that connection instead of contending in SQLite's
//! busy handler; the group-commit writer's batches run on a connection of their own on a thread
//! of their own, `sql::lite`, holding that connection as their turn), applying
//! `migrations/sqlite`, and SQLite's `Dialect` (in
//! `sql.rs`): UUIDs stored as hyphenated lowercase TEXT, and write transactions begun with
//! `BEGIN IMMEDIATE`, which takes SQLite's single write lock up front, so every method (one
//! statement, or one such transaction) is atomic against other connections and other processes
//! without row locks, a fenced write's check of the writer lease included.
//! Does not own: the statements (shared with PostgreSQL in `sql.rs`), the rules' meaning (see
//! [`super::Store`]) or when to call them.

use std::path::Path;
use std::time::Duration;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use sqlx::Sqlite;
use tokio::sync::mpsc;

use super::sql::{sql_store_impls, sqlx_error, Dialect, Job, SqlStore};
use super::{StoreError, StoreResult};

/// How long a statement waits for another process's write lock before failing. Within this
/// process every write takes the one write connection first (the group-commit writer holds it
/// while its own connection writes), so no write of ours waits here.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Read connections: readers run concurrently under WAL, beside the one write connection.
const READERS: u32 = 8;

/// The SQLite backend. Cheap to clone (a pool handle).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    sql: SqlStore<Sqlite>,
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
            // FULL: a commit is on disk (the WAL synced) before it returns, so nothing a caller
            // was told is saved can be lost to a crash or power cut.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let opening = |e| sqlx_error(&format!("opening SQLite at {}", path.display()), e);
        // The writer first: it creates the file and migrates it before any reader opens it.
        let writes = SqlitePoolOptions::new()
            .max_connections(1)
            // Taking it is this process's write turn (the group-commit writer holds it while
            // its own connection writes): no ping on each turn.
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(opening)?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&writes)
            .await
            .map_err(|e| sqlx_error("migrating SQLite", e.into()))?;
        let reads = SqlitePoolOptions::new()
            .max_connections(READERS)
            // A connection to a local file has no other end to hang up: sqlx's check before
            // each use would only cost every read a second hand-off to its connection's thread.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(opening)?;
        Ok(Self {
            sql: SqlStore::new(reads, writes),
        })
    }

    /// How many transactions this handle's group-commit writer has committed, each holding
    /// one or more acknowledged writes (Chat entries, Yjs journal entries, Planner claims).
    pub fn group_commits(&self) -> u64 {
        self.sql.write_batches()
    }

    /// Closes every connection of the pool (waits for those in use to be returned).
    pub async fn close(&self) {
        self.sql.close().await;
    }
}

/// SQLite has one writer at a time, so a write transaction takes the database's write lock
/// before its first read and holds it to commit; nothing else it read can change meanwhile.
/// So the row locks are empty here, and no slug or writer-lease lock is needed: a fenced write's
/// check of the lease row holds until it commits, and a takeover waits for the write lock.
impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";

    /// The migrations declare UUID columns TEXT and keep them hyphenated and lowercase, which
    /// sqlx encodes [`uuid::fmt::Hyphenated`] as (a plain `Uuid` would be a 16-byte BLOB).
    type Id = uuid::fmt::Hyphenated;

    /// `IMMEDIATE`: the write lock from the start, waiting up to the busy timeout for it. A
    /// deferred transaction would read first and then fail outright (`SQLITE_BUSY_SNAPSHOT`,
    /// which no timeout waits out) on its first write if another connection wrote in between.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";

    /// A deferred transaction: under WAL its first read fixes the snapshot every later read in
    /// it sees, without blocking writers.
    const BEGIN_SNAPSHOT: &'static str = "BEGIN";

    const FOR_UPDATE: &'static str = "";
    const FOR_NO_KEY_UPDATE: &'static str = "";
    const FOR_SHARE: &'static str = "";
    const LOCK_REPOSITORY_SLUGS: Option<&'static str> = None;
    const BEGIN_FENCED_WRITE: &'static str = Self::BEGIN_WRITE;
    const LOCK_WRITER_LEASE: Option<&'static str> = None;
    const LOCK_WRITER_LEASE_SHARED: Option<&'static str> = None;
    const LOCK_DOCUMENT_LEASE_SHARED: Option<&'static str> = None;
    const LOCK_DOCUMENT_LEASES_SHARED: Option<(&'static str, &'static str)> = None;
    const LOCK_DOCUMENT_LEASE: Option<&'static str> = None;

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    /// One: SQLite commits one write transaction at a time, so more lanes would only wait on
    /// each other for the one write connection.
    const WRITE_LANES: usize = 1;

    /// SQLite's own: a thread owning a connection runs each batch (`sql::lite`).
    fn spawn_writer(store: SqlStore<Self>, jobs: mpsc::Receiver<Job>, batches: Arc<AtomicU64>) {
        super::sql::lite::spawn(store, jobs, batches);
    }
}

sql_store_impls!(SqliteStore);

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqlitePoolOptions;

    use super::SqliteStore;

    /// Group commit: writes that arrive while the one write connection is busy wait for it, are
    /// answered only once their transaction commits, and share that one transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The hold gives back the future that ends it.
    #[allow(clippy::async_yields_async)]
    async fn writes_arriving_together_share_one_transaction() {
        let dir = tempfile::tempdir().expect("temporary folder");
        let store = SqliteStore::open(&dir.path().join("chopin.db"))
            .await
            .expect("open");
        let sql = store.sql.clone();
        let writes = sql.pools().1.clone();
        crate::sql::group_commit_check::held_writes_commit_together(
            std::sync::Arc::new(store),
            &sql,
            || async move {
                let held = writes.acquire().await.expect("the write connection");
                async move { drop(held) }
            },
        )
        .await;
    }

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
