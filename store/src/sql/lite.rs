//! SQLite's group-commit writer on a thread of its own: a batch of jobs runs on one rusqlite
//! connection that the thread owns, start to commit, with no hand-off between threads per
//! statement.
//!
//! Why: sqlx runs each SQLite statement on its connection's worker thread and wakes the caller
//! with each answer, so a batch of N journal appends cost some 2N + 6 thread hand-offs; on two
//! cores those context switches were most of the writer's cost. Here the batch crosses to the
//! thread once and its answers come back once.
//!
//! Owns: the thread and its connection (opened on the same file as the sqlx pools, with the
//! same settings: synchronous FULL, the busy timeout, foreign keys; WAL is the file's), the
//! async loop in front of it, and the jobs' statements run through rusqlite (their text is the
//! one in `sql.rs`, bound by name: SQLite names `$1` `$1`). Does not own: the jobs, the batch
//! bounds or the answer rules ([`super::group`]), nor the other writes, which still run on the
//! sqlx write connection.
//!
//! Invariants: the same as [`SqlStore::write_loop`]'s (answers only after commit, a broken batch
//! run again one job per transaction, a fenced handle's batch checks the lease inside its
//! transaction), and this process never has two of its connections contend for SQLite's write
//! lock: the loop holds the sqlx pool's one write connection — the process's write turn —
//! while the thread's transaction runs, so the two never meet in SQLite's busy handler.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};

use rusqlite::{named_params, Connection, OptionalExtension, TransactionBehavior};
use sqlx::Sqlite;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::group::{self, Done, Job};
use super::{
    document_exists_sql, AttachmentRow, Dialect, OwnershipRow, SqlStore, TranscriptRow,
    APPEND_TRANSCRIPT, CLAIM, DOCUMENT_LEASE_FOR_WRITE, FILE_TO_SEND, JOURNAL_UPDATE,
    LEASE_FOR_WRITE, MADE_BY_KEY, MARK_SENT, NUMBER_UPDATES, OWNERSHIP, RACE_RETRIES,
    WRITER_LEASE_NAME,
};
use crate::fence::{Fence, FenceScope};
use crate::{
    Attachment, Claim, Holder, NewTranscriptEntry, Ownership, StoreError, StoreResult,
    TranscriptEntry, UnixMillis,
};

/// Whether a document exists, as an append checks it (SQLite needs no row lock).
static DOCUMENT_EXISTS: LazyLock<String> =
    LazyLock::new(|| document_exists_sql(Sqlite::FOR_NO_KEY_UPDATE));

/// One batch for the thread, and how it says it is done.
struct Batch {
    jobs: Vec<Job>,
    /// Dropped once every job of the batch was answered.
    _done: oneshot::Sender<()>,
}

/// Starts `store`'s writer: the thread, opening its connection on the store's file, and the
/// loop that takes `jobs` in batches and hands each to it.
pub(crate) fn spawn(store: SqlStore<Sqlite>, jobs: mpsc::Receiver<Job>, batches: Arc<AtomicU64>) {
    let path = store.writes.connect_options().get_filename().to_path_buf();
    let (thread, work) = std::sync::mpsc::channel::<Batch>();
    let started = std::thread::Builder::new()
        .name("chopin-sqlite-writer".into())
        .spawn(move || run_thread(&path, &work, &batches));
    if let Err(e) = started {
        tracing::error!(error = %e, "the SQLite writer thread could not start");
    }
    tokio::spawn(write_loop(store, jobs, thread));
}

/// Takes the next job, waits for this process's write turn (the sqlx pool's one write
/// connection), takes every job queued meanwhile (up to [`group::MAX_BATCH`]), and hands the
/// batch to the thread, holding the turn until it is done. Ends when every handle that could
/// queue a job is gone (which ends the thread too).
async fn write_loop(
    store: SqlStore<Sqlite>,
    mut jobs: mpsc::Receiver<Job>,
    thread: std::sync::mpsc::Sender<Batch>,
) {
    while let Some(first) = jobs.recv().await {
        let turn = store.writes.acquire().await;
        let mut batch = vec![first];
        while batch.len() < group::MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let turn = match turn {
            Ok(turn) => turn,
            Err(e) => {
                let e = super::sqlx_error("waiting for the write connection", e);
                batch.into_iter().for_each(|job| job.fail(e.clone()));
                continue;
            }
        };
        let (done, finished) = oneshot::channel();
        let handed = thread.send(Batch {
            jobs: batch,
            _done: done,
        });
        if let Err(std::sync::mpsc::SendError(batch)) = handed {
            batch
                .jobs
                .into_iter()
                .for_each(|job| job.fail(group::stopped()));
            continue;
        }
        // Answered or not (a thread that died drops it), the turn is given back only now.
        let _ = finished.await;
        drop(turn);
    }
}

/// The thread: opens the connection, then runs each batch it is handed until the loop is gone,
/// counting the batches it commits in `batches`.
fn run_thread(path: &Path, work: &std::sync::mpsc::Receiver<Batch>, batches: &AtomicU64) {
    let mut connection = open(path);
    if let Err(e) = &connection {
        tracing::error!(error = %e, "the SQLite writer could not open its connection");
    }
    while let Ok(batch) = work.recv() {
        match &mut connection {
            Ok(connection) => run(connection, batch, batches),
            Err(e) => batch.jobs.into_iter().for_each(|job| job.fail(e.clone())),
        }
    }
}

/// The writer's connection to the file at `path`, set as the sqlx pools' are.
fn open(path: &Path) -> StoreResult<Connection> {
    let opening = |e| lite_error(&format!("opening SQLite at {}", path.display()), e);
    let connection = Connection::open(path).map_err(opening)?;
    connection
        .busy_timeout(crate::sqlite::BUSY_TIMEOUT)
        .map_err(opening)?;
    // FULL: the WAL is synced before a commit returns, as on the sqlx connections.
    connection
        .pragma_update(None, "synchronous", "FULL")
        .map_err(opening)?;
    connection
        .pragma_update(None, "foreign_keys", true)
        .map_err(opening)?;
    Ok(connection)
}

/// Runs `batch` in one transaction and answers each job; a broken transaction is run again
/// one job per transaction, so each job gets its own outcome.
fn run(connection: &mut Connection, batch: Batch, batches: &AtomicU64) {
    let Batch { jobs, _done } = batch;
    match run_batch(connection, &jobs) {
        Ok(outcomes) => {
            group::count_batch(batches);
            jobs.into_iter()
                .zip(outcomes)
                .for_each(|(job, outcome)| job.answer(outcome));
        }
        Err(e) if jobs.len() == 1 => jobs.into_iter().for_each(|job| job.fail(e.clone())),
        Err(_) => {
            for job in jobs {
                match run_batch(connection, std::slice::from_ref(&job)) {
                    Ok(mut outcomes) => match outcomes.pop() {
                        Some(outcome) => {
                            group::count_batch(batches);
                            job.answer(outcome);
                        }
                        None => job.fail(group::stopped()),
                    },
                    Err(e) => job.fail(e),
                }
            }
        }
    }
}

/// Runs every job of `jobs` in one `BEGIN IMMEDIATE` transaction, in order, and commits. `Err`
/// if the transaction broke (nothing of it is committed); a job's own refusal is its outcome,
/// and so is its fence's: each fence of the batch is checked once, inside the transaction.
fn run_batch(connection: &mut Connection, jobs: &[Job]) -> StoreResult<Vec<Done>> {
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| lite_error("beginning a transaction", e))?;
    let (fences, fence_of) = group::fences_of(jobs);
    let mut verdicts = Vec::with_capacity(fences.len());
    for fence in &fences {
        verdicts.push(check_fence(&tx, fence)?);
    }
    let mut outcomes = Vec::with_capacity(jobs.len());
    for (job, fence) in jobs.iter().zip(fence_of) {
        if let Some(refused) = job.refusal(fence, &verdicts) {
            outcomes.push(refused);
            continue;
        }
        outcomes.push(match job {
            Job::Transcript {
                document_id, entry, ..
            } => Done::Transcript(append_transcript(&tx, *document_id, entry)?),
            Job::Updates {
                document_id,
                updates,
                now_ms,
                ..
            } => Done::Updates(append_updates(&tx, *document_id, updates, *now_ms)?),
            Job::Claim {
                document_id,
                holder,
                now_ms,
                ..
            } => Done::Claim(claim_ownership(&tx, *document_id, holder, *now_ms)?),
        });
    }
    tx.commit()
        .map_err(|e| lite_error("committing a batch of writes", e))?;
    Ok(outcomes)
}

/// `fence`'s verdict, its lease row read in `tx` (which holds SQLite's write lock, so no change
/// of the lease can commit before `tx` does). `Err` only if the row could not be read.
fn check_fence(tx: &rusqlite::Transaction<'_>, fence: &Fence) -> StoreResult<StoreResult<()>> {
    if let Err(given_up) = fence.check_local() {
        return Ok(Err(given_up));
    }
    let (statement, key) = match fence.scope() {
        FenceScope::Writer => (LEASE_FOR_WRITE, WRITER_LEASE_NAME.to_owned()),
        FenceScope::Document(document_id) => (DOCUMENT_LEASE_FOR_WRITE, id(document_id)),
    };
    let lease: Option<(i64, Option<String>)> = tx
        .prepare_cached(statement)
        .and_then(|mut s| {
            s.query_row(named_params! { "$1": key }, |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
        })
        .map_err(|e| lite_error("reading the fence's lease for a write", e))?;
    Ok(fence.check_lease(lease.map(|(epoch, holder)| (epoch, holder.is_some()))))
}

/// `id` as SQLite stores it (hyphenated, lowercase text).
fn id(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// An id column read back.
fn uuid_at(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<Uuid> {
    let text: String = row.get(column)?;
    Uuid::parse_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, e.into())
    })
}

/// An optional id column read back.
fn optional_uuid_at(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<Option<Uuid>> {
    match row.get::<_, Option<String>>(column)? {
        None => Ok(None),
        Some(_) => uuid_at(row, column).map(Some),
    }
}

/// [`SqlStore::append_updates_in`] on the thread's transaction.
fn append_updates(
    tx: &rusqlite::Transaction<'_>,
    document_id: Uuid,
    updates: &[Vec<u8>],
    now_ms: UnixMillis,
) -> StoreResult<StoreResult<Vec<i64>>> {
    let count = updates.len() as i64;
    let doc = id(document_id);
    let last: Option<i64> = tx
        .prepare_cached(NUMBER_UPDATES)
        .and_then(|mut s| {
            s.query_row(named_params! { "$1": doc, "$2": count }, |row| row.get(0))
                .optional()
        })
        .map_err(|e| lite_error("numbering an update", e))?;
    let Some(last) = last else {
        return Ok(Err(StoreError::NotFound("document")));
    };
    let first = last - count + 1;
    let mut journal = tx
        .prepare_cached(JOURNAL_UPDATE)
        .map_err(|e| lite_error("journalling an update", e))?;
    for (seq, update) in (first..=last).zip(updates) {
        journal
            .execute(named_params! { "$1": doc, "$2": seq, "$3": update, "$4": now_ms })
            .map_err(|e| lite_error("journalling an update", e))?;
    }
    Ok(Ok((first..=last).collect()))
}

/// [`SqlStore::append_transcript_in`] on the thread's transaction (SQLite's write lock, held
/// since `BEGIN IMMEDIATE`, is what orders the appenders).
fn append_transcript(
    tx: &rusqlite::Transaction<'_>,
    document_id: Uuid,
    entry: &NewTranscriptEntry,
) -> StoreResult<StoreResult<TranscriptEntry>> {
    let doc = id(document_id);
    let exists = tx
        .prepare_cached(&DOCUMENT_EXISTS)
        .and_then(|mut s| s.exists(named_params! { "$1": doc }))
        .map_err(|e| lite_error("reading a document", e))?;
    if !exists {
        return Ok(Err(StoreError::NotFound("document")));
    }
    let entry = &entry.storable();
    if let Some(key) = &entry.key {
        let made = tx
            .prepare_cached(&MADE_BY_KEY)
            .and_then(|mut s| {
                s.query_row(named_params! { "$1": doc, "$2": key }, |row| {
                    Ok(TranscriptRow {
                        document_id: uuid_at(row, 0)?,
                        seq: row.get(1)?,
                        author_login: row.get(2)?,
                        kind: row.get(3)?,
                        body: row.get(4)?,
                        created_at_ms: row.get(5)?,
                        refs: row.get(6)?,
                    })
                })
                .optional()
            })
            .map_err(|e| lite_error("reading an append key", e))?;
        if let Some(made) = made {
            return Ok(Ok(made.into()));
        }
    }
    let mut found = Vec::with_capacity(entry.attachments.len());
    for file in &entry.attachments {
        let row = tx
            .prepare_cached(&FILE_TO_SEND)
            .and_then(|mut s| {
                s.query_row(named_params! { "$1": id(*file), "$2": doc }, |row| {
                    Ok(AttachmentRow {
                        id: uuid_at(row, 0)?,
                        document_id: uuid_at(row, 1)?,
                        uploader: row.get(2)?,
                        name: row.get(3)?,
                        kind: row.get(4)?,
                        mime_type: row.get(5)?,
                        size: row.get(6)?,
                        created_at_ms: row.get(7)?,
                        sent_seq: row.get(8)?,
                    })
                })
                .optional()
            })
            .map_err(|e| lite_error("reading a file to send", e))?;
        found.push(row.map(Attachment::from));
    }
    if let Err(e) = crate::check_sendable(
        found.iter().map(Option::as_ref),
        entry.author_login.as_deref(),
    ) {
        return Ok(Err(e));
    }
    let seq: i64 = tx
        .prepare_cached(APPEND_TRANSCRIPT)
        .and_then(|mut s| {
            s.query_row(
                named_params! {
                    "$1": doc,
                    "$2": entry.author_login,
                    "$3": entry.kind,
                    "$4": entry.body,
                    "$5": entry.created_at_ms,
                    "$6": entry.key,
                    "$7": entry.refs,
                },
                |row| row.get(0),
            )
        })
        .map_err(|e| lite_error("appending to a transcript", e))?;
    for file in &entry.attachments {
        tx.prepare_cached(MARK_SENT)
            .and_then(|mut s| s.execute(named_params! { "$1": seq, "$2": id(*file) }))
            .map_err(|e| lite_error("marking a file sent", e))?;
    }
    Ok(Ok(entry.saved(document_id, seq)))
}

/// An ownership row read back.
fn ownership_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<OwnershipRow<Uuid>> {
    Ok(OwnershipRow {
        document_id: uuid_at(row, 0)?,
        generation: row.get(1)?,
        holder_account_id: optional_uuid_at(row, 2)?,
        holder_login: row.get(3)?,
        holder_browser_login_id: optional_uuid_at(row, 4)?,
        claimed_at_ms: row.get(5)?,
    })
}

/// [`SqlStore::claim_ownership_in`] on the thread's transaction.
fn claim_ownership(
    tx: &rusqlite::Transaction<'_>,
    document_id: Uuid,
    holder: &Holder,
    now_ms: UnixMillis,
) -> StoreResult<StoreResult<Claim>> {
    let doc = id(document_id);
    let account = id(holder.account_id);
    for _ in 0..RACE_RETRIES {
        let claimed = tx
            .prepare_cached(&CLAIM)
            .and_then(|mut s| {
                s.query_row(
                    named_params! {
                        "$1": doc,
                        "$2": account,
                        "$3": holder.login,
                        "$4": id(holder.browser_login_id),
                        "$5": now_ms,
                    },
                    ownership_row,
                )
                .optional()
            })
            .map_err(|e| lite_error("claiming ownership", e))?;
        if let Some(row) = claimed {
            return Ok(Ok(Claim::Claimed(row.into())));
        }
        let current: Option<Ownership> = tx
            .prepare_cached(&OWNERSHIP)
            .and_then(|mut s| {
                s.query_row(named_params! { "$1": doc }, ownership_row)
                    .optional()
            })
            .map_err(|e| lite_error("reading ownership", e))?
            .map(Into::into);
        match current {
            None => return Ok(Err(StoreError::NotFound("document"))),
            Some(current) => match &current.holder {
                Some(other) if other.account_id != holder.account_id => {
                    return Ok(Ok(Claim::HeldByOther(current)))
                }
                _ => continue,
            },
        }
    }
    Ok(Err(StoreError::Backend(
        "claiming ownership: the document kept changing hands".into(),
    )))
}

/// A rusqlite error as the store reports it: what was being done, and SQLite's words.
fn lite_error(doing: &str, err: rusqlite::Error) -> StoreError {
    let what = match &err {
        rusqlite::Error::SqliteFailure(code, Some(message)) => {
            format!("database error {}: {message}", code.extended_code)
        }
        other => other.to_string(),
    };
    StoreError::Backend(format!("{doing}: {what}"))
}
