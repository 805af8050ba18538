//! [`PgStore`]: the PostgreSQL [`Store`](super::Store) backend through sqlx, for production.
//!
//! Owns: connecting (the URL, which may carry a password, never reaches an error or a log) with
//! bounded waits — [`ACQUIRE_TIMEOUT`] for a connection, [`STATEMENT_TIMEOUT`] per statement,
//! [`IDLE_IN_TRANSACTION_TIMEOUT`] for a transaction its client abandoned — so one hung
//! connection cannot hang the process or hold a lock for good; applying `migrations/postgres`;
//! and PostgreSQL's `Dialect` (in `sql.rs`): native `UUID` columns, and how the shared statements
//! stay atomic under the default READ COMMITTED isolation. Each method is one guarded statement,
//! or a transaction that locks the rows it depends on: a guarded `UPDATE … WHERE` that waited for
//! a concurrent writer re-checks its guard against the row that writer committed. Slug
//! uniqueness across canonical slugs and aliases spans two tables, so creations and renames also
//! take a per-repository advisory lock; fenced writes take a writer-lease advisory lock shared,
//! and taking over or giving back the lease takes it exclusively (see [`crate::fence`]).
//! Does not own: the statements (shared with SQLite in `sql.rs`), the rules' meaning (see
//! [`super::Store`]) or when to call them.

use std::str::FromStr;
use std::time::Duration;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult};
use sqlx::{Connection, Executor, Postgres};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::sql::{sql_store_impls, sqlx_error, Dialect, Job, SqlStore};
use super::StoreResult;

/// Connections in the pool.
const MAX_CONNECTIONS: u32 = 10;

/// A pooled connection idle this long is checked (one round trip) before it is handed out, so
/// one the database ended meanwhile (a restart, an administrator) is replaced instead of failing
/// its caller. Connections in steady use skip the check: it would cost every read and every
/// batch a round trip of its own.
pub const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The longest a caller waits for a connection from the pool, opening one included (sqlx bounds
/// the connect by the same deadline): a database that does not answer fails the call instead of
/// hanging it.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// `statement_timeout` of every connection: PostgreSQL cancels a statement (waiting for a lock
/// included) that runs longer. Below the writer lease's 15 s, so a write stuck behind a lock
/// cannot outlast a lease period. Migrations, which may legitimately run longer, lift it for
/// their own connection.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// `idle_in_transaction_session_timeout` of every connection: PostgreSQL ends a session whose
/// transaction sits open and idle this long (its client hung or went away mid-transaction), so
/// the locks it holds — a fenced write's share of the writer-lease lock among them — cannot keep
/// the next holder from taking the lease.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL backend. Cheap to clone (a pool handle).
#[derive(Clone)]
pub struct PgStore {
    sql: SqlStore<Postgres>,
}

impl std::fmt::Debug for PgStore {
    // The pool's options hold the connection settings, password included: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database at `url` (with the timeouts above) and applies the migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| sqlx_error("reading the PostgreSQL URL", e))?
            .options([
                (
                    "statement_timeout",
                    STATEMENT_TIMEOUT.as_millis().to_string(),
                ),
                (
                    "idle_in_transaction_session_timeout",
                    IDLE_IN_TRANSACTION_TIMEOUT.as_millis().to_string(),
                ),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_AFTER_IDLE {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await
            .map_err(|e| sqlx_error("connecting to PostgreSQL", e))?;
        // Migrations on one connection without the statement timeout; RESET puts back the
        // connection's own setting (the one above) before it returns to the pool.
        let mut conn = pool
            .acquire()
            .await
            .map_err(|e| sqlx_error("connecting to PostgreSQL", e))?;
        conn.execute("SET statement_timeout = 0")
            .await
            .map_err(|e| sqlx_error("migrating PostgreSQL", e))?;
        sqlx::migrate!("../migrations/postgres")
            .run(&mut *conn)
            .await
            .map_err(|e| sqlx_error("migrating PostgreSQL", e.into()))?;
        conn.execute("RESET statement_timeout")
            .await
            .map_err(|e| sqlx_error("migrating PostgreSQL", e))?;
        drop(conn);
        Ok(Self {
            sql: SqlStore::new(pool.clone(), pool),
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

/// PostgreSQL runs writers concurrently: a write transaction is a plain READ COMMITTED one, and
/// what it must keep true it locks explicitly, row by row, until commit.
impl Dialect for Postgres {
    const BACKEND: &'static str = "postgres";

    type Id = Uuid;

    /// READ COMMITTED, the default: each statement sees what was committed before it began, so
    /// a statement run after taking a row lock sees every write that lock waited for.
    const BEGIN_WRITE: &'static str = "BEGIN";

    /// One snapshot for every read of the transaction.
    const BEGIN_SNAPSHOT: &'static str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";

    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const FOR_NO_KEY_UPDATE: &'static str = " FOR NO KEY UPDATE";
    const FOR_SHARE: &'static str = " FOR SHARE";

    /// A transaction-scoped advisory lock on a 64-bit hash of the repository's key.
    const LOCK_REPOSITORY_SLUGS: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))");

    /// `BEGIN`, then a transaction-scoped advisory lock on one fixed key, shared: advisory
    /// locks live in the lock manager only (no row is written, unlike `FOR SHARE` on the lease
    /// row), and the lock manager queues a new shared request behind a waiting exclusive one,
    /// so a steady stream of writes cannot starve a takeover. sqlx sends a `BEGIN` statement
    /// as a simple query, which may hold several statements: they run in order, the lock inside
    /// the transaction the first one opened.
    const BEGIN_FENCED_WRITE: &'static str =
        "BEGIN; SELECT pg_advisory_xact_lock_shared(hashtextextended('chopin:writer-lease', 0))";

    /// The writer-lease advisory lock, shared, on its own.
    const LOCK_WRITER_LEASE_SHARED: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock_shared(hashtextextended('chopin:writer-lease', 0))");

    /// The same advisory lock, exclusive.
    const LOCK_WRITER_LEASE: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtextextended('chopin:writer-lease', 0))");

    /// A transaction-scoped advisory lock on a 64-bit hash of the document's lease key, shared
    /// (as the writer lease's, so a steady stream of one document's writes cannot starve a
    /// takeover of it).
    const LOCK_DOCUMENT_LEASE_SHARED: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))");

    /// The same advisory lock on each key of a `VALUES` list.
    const LOCK_DOCUMENT_LEASES_SHARED: Option<(&'static str, &'static str)> = Some((
        "SELECT pg_advisory_xact_lock_shared(hashtextextended(k, 0)) FROM (VALUES ",
        ") AS keys (k)",
    ));

    /// The same advisory lock, exclusive.
    const LOCK_DOCUMENT_LEASE: Option<&'static str> =
        Some("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))");

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    /// Four: PostgreSQL commits independent transactions at once (their flushes share the WAL's
    /// group commit), so one document's batch waiting on a row lock or a flush does not hold up
    /// another's. A lane takes one of the pool's [`MAX_CONNECTIONS`] only while its batch runs.
    const WRITE_LANES: usize = 4;

    fn spawn_writer(store: SqlStore<Self>, jobs: mpsc::Receiver<Job>, batches: Arc<AtomicU64>) {
        tokio::spawn(store.write_loop(jobs, batches));
    }
}

sql_store_impls!(PgStore);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContentStore, DocumentStore, Fence, LeaseAcquire, LeaseStore};

    /// Group commit: writes that arrive while the writer waits for the writer-lease lock (held
    /// here by a takeover-like transaction) are answered only once their transaction commits,
    /// and share that one transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The hold gives back the future that ends it.
    #[allow(clippy::async_yields_async)]
    async fn writes_arriving_together_share_one_transaction() {
        let server = chopin_fixtures::pg::shared_postgres();
        let db = server
            .create_database()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = PgStore::connect(&db.url).await.expect("connect");
        let LeaseAcquire::Acquired(lease) = store
            .acquire_writer_lease("test", 0, 60_000)
            .await
            .expect("lease")
        else {
            panic!("the lease is free")
        };
        let fenced = PgStore {
            sql: store.sql.fenced(Fence::new(lease.epoch)),
        };
        let sql = fenced.sql.clone();
        let pool = store.sql.pools().0.clone();
        crate::sql::group_commit_check::held_writes_commit_together(
            std::sync::Arc::new(fenced),
            &sql,
            || async move {
                let mut conn = pool.acquire().await.expect("a connection");
                conn.execute("BEGIN").await.expect("begin");
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended('chopin:writer-lease', 0))",
                )
                .await
                .expect("the writer-lease lock");
                async move {
                    conn.execute("COMMIT").await.expect("commit");
                }
            },
        )
        .await;
        store.close().await;
        server
            .drop_database(&db)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Independent documents' batches are in flight at once: a document whose row is locked
    /// (its lane's batch waits on it) does not hold up a write to a document of another lane,
    /// and once the lock goes, the held write commits too, in its order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_document_held_up_does_not_hold_up_another_lane() {
        let server = chopin_fixtures::pg::shared_postgres();
        let db = server
            .create_database()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = PgStore::connect(&db.url).await.expect("connect");
        let (held, free) = (Uuid::from_u128(0xd0c1), Uuid::from_u128(0xd0c2));
        assert_ne!(
            crate::sql::group::lane(held, Postgres::WRITE_LANES),
            crate::sql::group::lane(free, Postgres::WRITE_LANES),
            "the two documents take different lanes"
        );
        for (n, id) in [held, free].into_iter().enumerate() {
            let doc = crate::NewDocument {
                id,
                repo_owner: "octo".into(),
                repo_name: "lanes".into(),
                slug: format!("doc-{n}"),
                title: format!("Doc {n}"),
                created_at_ms: 1,
                ..crate::NewDocument::default()
            };
            store.create_document(&doc).await.expect("document");
        }
        let (pool, _) = store.sql.pools();
        let mut lock = pool.acquire().await.expect("a connection");
        lock.execute("BEGIN").await.expect("begin");
        sqlx::query("SELECT id FROM documents WHERE id = $1 FOR UPDATE")
            .bind(held)
            .execute(&mut *lock)
            .await
            .expect("the held document's row lock");
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move { store.append_update(held, b"held", 2).await })
        };
        while store.sql.queued_writes() > 0 || store.sql.write_lanes() == 0 {
            tokio::task::yield_now().await;
        }
        let other = tokio::time::timeout(
            Duration::from_secs(5),
            store.append_update(free, b"free", 2),
        )
        .await
        .expect("a write to another lane's document does not wait for the held one");
        assert_eq!(other.expect("append"), 1);
        assert!(
            !waiting.is_finished(),
            "the held document's write still waits"
        );
        lock.execute("COMMIT").await.expect("commit");
        assert_eq!(waiting.await.expect("task").expect("append"), 1);
        drop(lock);
        store.close().await;
        server
            .drop_database(&db)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Every connection of the pool carries the statement and idle-in-transaction timeouts, the
    /// one the migrations ran on included (its `SET statement_timeout = 0` was reset), and the
    /// pool waits at most [`ACQUIRE_TIMEOUT`] for a connection.
    #[tokio::test]
    async fn every_connection_has_the_timeouts() {
        let server = chopin_fixtures::pg::shared_postgres();
        let db = server
            .create_database()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = PgStore::connect(&db.url).await.expect("connect");
        let (pool, _) = store.sql.pools();
        assert_eq!(pool.options().get_acquire_timeout(), ACQUIRE_TIMEOUT);
        // Hold every connection at once, so each is asked (the migrations' one among them).
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(pool.acquire().await.expect("a connection"));
        }
        for conn in &mut held {
            let statement: String = sqlx::query_scalar("SHOW statement_timeout")
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            let idle: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            assert_eq!((statement.as_str(), idle.as_str()), ("10s", "10s"));
        }
        drop(held);
        store.close().await;
        server
            .drop_database(&db)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A connection the database ended while it sat in the pool is not handed out: one idle
    /// for [`PING_AFTER_IDLE`] or longer is checked first, so every read after the ending gets
    /// a live connection (the check is skipped for connections in steady use).
    #[tokio::test]
    async fn a_connection_ended_while_idle_is_replaced() {
        let server = chopin_fixtures::pg::shared_postgres();
        let db = server
            .create_database()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = PgStore::connect(&db.url).await.expect("connect");
        let missing = Uuid::from_u128(0xdead);
        store.document(missing).await.expect("a read");
        let mut admin = sqlx::PgConnection::connect(&db.url).await.expect("admin");
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()) ended",
        )
        .fetch_one(&mut admin)
        .await
        .expect("ending the pool's connections");
        assert!(ended >= 1, "the pool held a connection to end");
        tokio::time::sleep(PING_AFTER_IDLE + Duration::from_millis(200)).await;
        for n in 0..MAX_CONNECTIONS {
            store.document(missing).await.unwrap_or_else(|e| {
                panic!("read {n} after the database ended the pool's idle connections: {e}")
            });
        }
        admin.close().await.expect("close");
        store.close().await;
        server
            .drop_database(&db)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
