//! `chopin-bench-sockets document-fences`: what checking each document's own lease costs a write,
//! against checking the one writer lease, on the same database in the same run.
//!
//! Several processes serving one PostgreSQL each write a document's state through a handle
//! fenced by that document's lease (a per-document advisory lock taken shared and the lease row
//! read, in the write's own transaction), where one process serving the whole database checks
//! the single writer lease. This measures that difference at the store, without the server
//! around it: `--documents` documents, each written by its own task through `--writes` sequential
//! transcript appends (each one acknowledged, as a Chat line is), once through handles fenced by
//! the writer lease (the baseline) and once through handles fenced by each document's lease.
//! Figures: appends per second, and this process's CPU time per append (user + system, from
//! `getrusage`), each with the ratio of the document leases' to the writer lease's. Nothing
//! here asserts a timing.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Result};
use chopin_store::{
    Fence, LeaseAcquire, NewDocument, NewTranscriptEntry, PgStore, SqliteStore, Store,
};
use uuid::Uuid;

use crate::acks::Backend;

#[derive(Debug, Clone, clap::Args)]
pub struct FencesArgs {
    /// The database both sides use.
    #[arg(long, value_enum, default_value_t = Backend::Postgres)]
    database: Backend,
    /// Documents written at once, one task each.
    #[arg(long, default_value_t = 100)]
    documents: usize,
    /// Sequential appends per document.
    #[arg(long, default_value_t = 50)]
    writes: usize,
    /// The PostgreSQL database (`postgres://…`). Default: a fresh database on
    /// `CHOPIN_TEST_POSTGRES_URL`'s server, else on a throwaway cluster started for the run.
    #[arg(long, env = "CHOPIN_BENCH_POSTGRES_URL")]
    postgres_url: Option<String>,
}

/// One side's figures.
struct Figures {
    per_second: f64,
    cpu_us_per_write: f64,
}

pub async fn run(args: FencesArgs) -> Result<()> {
    println!(
        "chopin-bench-sockets document-fences: {:?}, {} documents x {} sequential appends; {} cores",
        args.database,
        args.documents,
        args.writes,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = match args.database {
        Backend::Postgres => {
            let url = match &args.postgres_url {
                Some(url) => url.clone(),
                None => {
                    chopin_fixtures::pg::shared_postgres()
                        .create_database()
                        .await
                        .map_err(|e| anyhow!("a fresh PostgreSQL database: {e}"))?
                        .url
                }
            };
            Arc::new(PgStore::connect(&url).await?)
        }
        Backend::Sqlite => Arc::new(SqliteStore::open(&_dir.path().join("bench.db")).await?),
    };
    let mut ids = Vec::new();
    for n in 0..args.documents {
        let doc = store
            .create_document(&NewDocument {
                id: Uuid::from_u128(0xbe0c_0000 + n as u128),
                repo_owner: "octo".into(),
                repo_name: "bench".into(),
                slug: format!("d{n}"),
                title: format!("Document {n}"),
                created_at_ms: 1,
                ..NewDocument::default()
            })
            .await?;
        ids.push(doc.id);
    }
    let now = 1_000;
    let writer = match store.acquire_writer_lease("bench", now, 3_600_000).await? {
        LeaseAcquire::Acquired(lease) => lease,
        LeaseAcquire::HeldElsewhere(l) => return Err(anyhow!("writer lease held by {}", l.holder)),
    };
    let writer_handle = store.fenced(Fence::new(writer.epoch));
    let writer_handles: Vec<_> = ids.iter().map(|_| writer_handle.clone()).collect();
    let mut document_handles = Vec::new();
    for id in &ids {
        match store
            .acquire_document_lease(*id, "bench", now, 3_600_000)
            .await?
        {
            LeaseAcquire::Acquired(lease) => {
                document_handles.push(store.fenced(Fence::for_document(*id, lease.epoch)))
            }
            LeaseAcquire::HeldElsewhere(l) => {
                return Err(anyhow!("document lease held by {}", l.holder))
            }
        }
    }
    // Warm both paths, then measure each twice, interleaved, and keep each side's better run.
    appends(&ids, &writer_handles, 2, "warm").await?;
    appends(&ids, &document_handles, 2, "warm").await?;
    let mut best: [Option<Figures>; 2] = [None, None];
    for round in 0..2 {
        for (side, handles) in [(0, &writer_handles), (1, &document_handles)] {
            let figures = appends(&ids, handles, args.writes, &format!("r{round}")).await?;
            if best[side]
                .as_ref()
                .is_none_or(|b| figures.per_second > b.per_second)
            {
                best[side] = Some(figures);
            }
        }
    }
    let [Some(writer), Some(documents)] = best else {
        return Err(anyhow!("no measurement"));
    };
    println!(
        "  writer lease: {:>8.0} appends/s, {:>6.1} µs CPU each",
        writer.per_second, writer.cpu_us_per_write
    );
    println!(
        "  document leases: {:>8.0} appends/s, {:>6.1} µs CPU each",
        documents.per_second, documents.cpu_us_per_write
    );
    println!();
    println!("| fence | appends/s | µs CPU per append |");
    println!("|---|---|---|");
    println!(
        "| writer lease | {:.0} | {:.1} |",
        writer.per_second, writer.cpu_us_per_write
    );
    println!(
        "| document leases | {:.0} | {:.1} |",
        documents.per_second, documents.cpu_us_per_write
    );
    println!(
        "| ratio | {:.2} (throughput, goal ≥ 0.8) | {:.2} (CPU, goal ≤ 1.2) |",
        documents.per_second / writer.per_second,
        documents.cpu_us_per_write / writer.cpu_us_per_write
    );
    Ok(())
}

/// `writes` sequential appends to each document through its handle, all documents at once.
async fn appends(
    ids: &[Uuid],
    handles: &[Arc<dyn Store>],
    writes: usize,
    label: &str,
) -> Result<Figures> {
    let cpu_before = cpu_micros();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (id, handle) in ids.iter().zip(handles) {
        let (id, handle, label) = (*id, handle.clone(), label.to_owned());
        tasks.push(tokio::spawn(async move {
            for n in 0..writes {
                let entry = NewTranscriptEntry {
                    kind: "system".into(),
                    body: format!("{label} line {n}"),
                    created_at_ms: 2_000,
                    ..NewTranscriptEntry::default()
                };
                handle.append_transcript(id, &entry).await?;
            }
            Ok::<_, chopin_store::StoreError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = (ids.len() * writes) as f64;
    Ok(Figures {
        per_second: total / elapsed,
        cpu_us_per_write: (cpu_micros() - cpu_before) as f64 / total,
    })
}

/// This process's user and system CPU time so far, in microseconds.
fn cpu_micros() -> i64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF and a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    micros(usage.ru_utime) + micros(usage.ru_stime)
}
