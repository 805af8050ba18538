//! [`PgStore`]: the PostgreSQL [`Store`](super::Store) backend through sqlx, for production.
//!
//! Owns: connecting (the URL, which may carry a password, never reaches an error or a log),
//! applying `migrations/postgres`, and PostgreSQL's `Dialect` (in `sql.rs`): native `UUID`
//! columns, and how the shared statements stay atomic under the default READ COMMITTED
//! isolation. Each method is one guarded statement, or a transaction that locks the rows it
//! depends on: a guarded `UPDATE … WHERE` that waited for a concurrent writer re-checks its guard
//! against the row that writer committed. Slug uniqueness across canonical slugs and aliases
//! spans two tables, so creations and renames also take a per-repository advisory lock.
//! Does not own: the statements (shared with SQLite in `sql.rs`), the rules' meaning (see
//! [`super::Store`]) or when to call them.

use sqlx::postgres::{PgPoolOptions, PgQueryResult};
use sqlx::Postgres;
use uuid::Uuid;

use super::sql::{sql_store_impls, sqlx_error, Dialect, SqlStore};
use super::StoreResult;

/// Connections in the pool.
const MAX_CONNECTIONS: u32 = 10;

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
    /// Connects to the database at `url` and applies the migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect(url)
            .await
            .map_err(|e| sqlx_error("connecting to PostgreSQL", e))?;
        sqlx::migrate!("../migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| sqlx_error("migrating PostgreSQL", e.into()))?;
        Ok(Self {
            sql: SqlStore::new(pool),
        })
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

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }
}

sql_store_impls!(PgStore);
