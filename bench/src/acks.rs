//! `chopin-bench-sockets chat-acks`: Chat acknowledgements per second of the real `chopin`
//! binary on SQLite or PostgreSQL, next to the same database taking one row per transaction
//! (what each acknowledged message cost before group commit), measured in the same run.
//!
//! What it measures, and how:
//! - **Chopin.** The server is spawned on the database (the embedded SQLite file, or a fresh
//!   PostgreSQL database); @mona's browser sign-in opens room sockets, and each socket sends
//!   `--acks` `chat:send`s one after another, each waiting for its `chat:ack`. Layouts: one
//!   socket; ten sockets on one document (their sends take turns on the document's transcript
//!   gate); ten sockets on ten documents. The figure is acks per second over all sockets.
//! - **The baseline.** The same database and settings (a SQLite file in WAL mode with
//!   `synchronous = FULL` and `BEGIN IMMEDIATE`; a fresh database on the same PostgreSQL
//!   server), a table shaped like the transcript, and as many clients as sockets, each
//!   inserting `--acks` rows one after another, one transaction (one commit, one flush) per row.
//!   The figure is rows per second over all clients.
//!
//! Nothing here asserts a timing; it prints each figure, its baseline and the ratio (goal ≥ 1.0:
//! group commit should beat one row per transaction).

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Postgres, Sqlite};

use crate::chopin::{ack, greeting, open_room, Fixture};

/// How long one wait for an ack may take.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, clap::Args)]
pub struct AcksArgs {
    /// The database both sides use.
    #[arg(long, value_enum, default_value_t = Backend::Sqlite)]
    database: Backend,
    /// Sequential sends per socket (and rows per baseline client).
    #[arg(long, default_value_t = 300)]
    acks: usize,
    /// The PostgreSQL database both sides use (`postgres://…`). Default: a fresh database on
    /// `CHOPIN_TEST_POSTGRES_URL`'s server, else on a throwaway cluster started for the run.
    #[arg(long, env = "CHOPIN_BENCH_POSTGRES_URL")]
    postgres_url: Option<String>,
}

/// Socket layouts: how many sockets, over how many documents.
const LAYOUTS: [(usize, usize); 3] = [(1, 1), (10, 1), (10, 10)];

pub async fn run(chopin_bin: &Path, args: AcksArgs) -> Result<()> {
    println!(
        "chopin-bench-sockets chat-acks: {:?}, {} sequential acks per socket; {} cores",
        args.database,
        args.acks,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = Vec::new();
    for (sockets, documents) in LAYOUTS {
        let chopin = chopin_acks(chopin_bin, &args, sockets, documents).await?;
        let baseline = baseline_rows(&args, sockets).await?;
        println!(
            "  {sockets:>2} socket(s) over {documents:>2} document(s): chopin {chopin:>8.0} acks/s; \
             one row per transaction, {sockets} client(s): {baseline:>8.0} rows/s; ratio {:.2}",
            chopin / baseline
        );
        rows.push((sockets, documents, chopin, baseline));
    }
    println!();
    println!(
        "| sockets | documents | chopin acks/s | 1 row/transaction rows/s | ratio (goal ≥ 1.0) |"
    );
    println!("|---|---|---|---|---|");
    for (sockets, documents, chopin, baseline) in rows {
        println!(
            "| {sockets} | {documents} | {chopin:.0} | {baseline:.0} | {:.2} |",
            chopin / baseline
        );
    }
    Ok(())
}

/// The database for one measurement: `--postgres-url` as it is, or a fresh database on the
/// test PostgreSQL server (`CHOPIN_TEST_POSTGRES_URL`, else a throwaway cluster, which runs
/// with `fsync=off`: both sides then skip the flush alike).
async fn postgres_database(args: &AcksArgs) -> Result<String> {
    if let Some(url) = &args.postgres_url {
        return Ok(url.clone());
    }
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .map_err(|e| anyhow!("a fresh PostgreSQL database: {e}"))?;
    Ok(db.url)
}

/// Acks per second of `sockets` room sockets over `documents` documents on a fresh server.
async fn chopin_acks(bin: &Path, args: &AcksArgs, sockets: usize, documents: usize) -> Result<f64> {
    let extra = match args.database {
        Backend::Sqlite => vec![],
        Backend::Postgres => vec![("DATABASE_URL", postgres_database(args).await?)],
    };
    let fixture = Fixture::start_with(bin, &extra).await?;
    let ids = fixture.create_documents(documents).await?;
    let mut rooms = Vec::new();
    for n in 0..sockets {
        let document = &ids[n % ids.len()];
        let mut socket = open_room(
            fixture.server.host(),
            document,
            &fixture.cookie,
            &fixture.origin,
        )
        .await
        .map_err(|e| anyhow!("room socket {n} {e}"))?;
        greeting(&mut socket)
            .await
            .map_err(|e| anyhow!("room socket {n} {e}"))?;
        rooms.push(socket);
    }
    let started = Instant::now();
    let loops = rooms
        .into_iter()
        .enumerate()
        .map(|(n, mut socket)| async move {
            for i in 0..args.acks {
                let request_id = format!("bench-{n}-{i}");
                let frame = json!({
                    "type": "chat:send",
                    "requestId": request_id,
                    "text": format!("bench message {n}-{i}"),
                });
                socket
                    .send_json(&frame)
                    .await
                    .map_err(|e| anyhow!("socket {n}: chat:send {i} could not be sent: {e}"))?;
                tokio::time::timeout(ACK_TIMEOUT, ack(&mut socket, &request_id))
                    .await
                    .map_err(|_| anyhow!("socket {n}: chat:send {i} got no answer in time"))?
                    .map_err(|e| anyhow!("socket {n}: chat:send {i} {e}"))?;
            }
            let _ = socket.close().await;
            Ok::<_, anyhow::Error>(())
        });
    for done in futures::future::join_all(loops).await {
        done?;
    }
    let elapsed = started.elapsed();
    let stopped = fixture.server.stop().await?;
    if stopped.killed {
        bail!("the server did not stop on SIGTERM");
    }
    Ok((sockets * args.acks) as f64 / elapsed.as_secs_f64())
}

const TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_transcript (document_id TEXT NOT NULL, \
     seq BIGINT NOT NULL, author_login TEXT, kind TEXT NOT NULL, body TEXT NOT NULL, \
     created_at_ms BIGINT NOT NULL, PRIMARY KEY (document_id, seq))";
const INSERT: &str = "INSERT INTO bench_transcript \
     (document_id, seq, author_login, kind, body, created_at_ms) \
     VALUES ($1, $2, 'mona', 'member', $3, 0)";

/// Rows per second of `clients` clients, each inserting `--acks` rows one transaction each.
async fn baseline_rows(args: &AcksArgs, clients: usize) -> Result<f64> {
    match args.database {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().context("a temporary folder")?;
            let options = SqliteConnectOptions::new()
                .filename(dir.path().join("baseline.db"))
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(5));
            let pool: Pool<Sqlite> = SqlitePoolOptions::new()
                .max_connections(clients as u32)
                .connect_with(options)
                .await
                .context("opening the baseline SQLite file")?;
            sqlx::query(TABLE).execute(&pool).await?;
            let rate = insert_rows(&pool, "BEGIN IMMEDIATE", clients, args.acks).await;
            pool.close().await;
            rate
        }
        Backend::Postgres => {
            let url = postgres_database(args).await?;
            let options = sqlx::postgres::PgConnectOptions::from_str(&url)?;
            let pool: Pool<Postgres> = PgPoolOptions::new()
                .max_connections(clients as u32)
                .connect_with(options)
                .await
                .context("connecting to the baseline PostgreSQL database")?;
            sqlx::query(TABLE).execute(&pool).await?;
            sqlx::query("DELETE FROM bench_transcript")
                .execute(&pool)
                .await?;
            let settings: Vec<(String,)> = sqlx::query_as(
                "SELECT name || '=' || setting FROM pg_settings \
                 WHERE name IN ('fsync', 'synchronous_commit') ORDER BY name",
            )
            .fetch_all(&pool)
            .await?;
            let settings: Vec<String> = settings.into_iter().map(|(s,)| s).collect();
            println!("    (PostgreSQL {})", settings.join(", "));
            let rate = insert_rows(&pool, "BEGIN", clients, args.acks).await;
            pool.close().await;
            rate
        }
    }
}

async fn insert_rows<DB>(
    pool: &Pool<DB>,
    begin: &'static str,
    clients: usize,
    rows: usize,
) -> Result<f64>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    String: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let started = Instant::now();
    let loops = (0..clients).map(|client| async move {
        let document = format!("doc-{client}");
        for row in 0..rows {
            let mut tx = pool.begin_with(begin).await?;
            sqlx::query(INSERT)
                .bind(document.as_str())
                .bind(row as i64)
                .bind(format!("bench message {client}-{row}"))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok::<_, sqlx::Error>(())
    });
    for done in futures::future::join_all(loops).await {
        done.context("a baseline insert")?;
    }
    Ok((clients * rows) as f64 / started.elapsed().as_secs_f64())
}
