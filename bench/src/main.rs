//! `chopin-bench-sockets`: what one socket costs the real `chopin` release binary, in memory
//! and in latency, next to a bare tokio-tungstenite WebSocket server measured in the same run.
//!
//! What it measures, and how:
//! - **KiB per agent link.** One document per link is created through the documents API; then
//!   the server's `VmRSS` (`/proc/<pid>/status`) is read after a settle, `--links` agent links
//!   are opened and attached (each holding its own document's Planner, so the figure includes
//!   what an attach keeps per document), and RSS is read again after a settle. The delta over
//!   the number attached is the figure.
//! - **Attach latency** at `--concurrency` attaches in flight: `attach` sent → `attached` read,
//!   without the TCP connect and upgrade; connect → `attached` is reported beside it.
//! - **KiB per room socket.** `--rooms` browser room sockets (signed-in cookie, the server's
//!   Origin) spread round-robin over the first `--room-documents` documents, each read up to its
//!   greeting (`session:hello`, `session:planner`, Yjs sync step 1); RSS before and after.
//! - **Chat ack latency.** One more room socket, on a document with no other room socket,
//!   sends `--acks` `chat:send`s one after another, each waiting for its `chat:ack`.
//! - **The raw baseline.** This binary is spawned again as `chopin-bench-sockets raw-server`, a
//!   tokio-tungstenite echo server with a 4 KiB read buffer and no write buffering. The same
//!   numbers of sockets are opened to it in two batches with one echo round trip each (the
//!   baseline of attach and of the room greeting), and `--acks` sequential echoes stand for
//!   the chat loop.
//!
//! Both servers are spawned with an empty environment (plus `PATH`), after this process has
//! raised its open-file limit so they inherit it; both are stopped at the end (SIGTERM, then
//! kill), on error paths too. Nothing here asserts a timing: it prints figures and a table
//! that sets them beside the goals (≤ 48 KiB per socket; attach p99 ≤ 20 ms at 100 in flight).

mod acks;
mod child;
mod chopin;
mod fanout;
mod fences;
mod load;
mod peers;
mod processes;
mod raw;
mod relay;
mod report;
mod soak;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};

use crate::child::Spawned;
use crate::report::Figures;
use crate::stats::{rate, RssDelta, Summary};

/// Open files kept free for everything that is not a measured socket (the fake GitHub, HTTP
/// pools, SQLite, pipes).
pub(crate) const FD_RESERVE: u64 = 256;

#[derive(Debug, Parser)]
#[command(
    name = "chopin-bench-sockets",
    about = "Memory per socket, attach latency and chat-ack latency of the real chopin binary, \
             next to a raw tokio-tungstenite baseline measured in the same run."
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// The baseline's echo server (spawned by the bench itself).
    #[command(hide = true)]
    RawServer,
    /// Chat acks per second on SQLite or PostgreSQL against one row per transaction on the
    /// same database (see `acks.rs`).
    ChatAcks(acks::AcksArgs),
    /// Transcript appends through handles fenced by each document's lease against handles
    /// fenced by the one writer lease, on the same database (see `fences.rs`).
    DocumentFences(fences::FencesArgs),
    /// Three processes on one PostgreSQL (PROCESSES=many) against one: CPU per acknowledged
    /// write, requests refused behind a hashing router, failover after kill -9 (see
    /// `processes.rs`).
    Processes(processes::ProcessesArgs),
    /// The fan-out baseline's relay server (spawned by the bench itself).
    #[command(hide = true)]
    RawRelay,
    /// Planner output: an attached client's 100-step turn to 1, 10 and 100 room sockets,
    /// messages delivered per second against a raw relay (see `fanout.rs`).
    PlannerOutput(fanout::PlannerArgs),
    /// Live edits: one writer, 10 listening Yjs sockets, 2,000 single-character updates,
    /// updates per second to every listener against a raw relay (see `fanout.rs`).
    LiveEdits(fanout::EditsArgs),
    /// Chopin beside Hocuspocus 4 (+SQLite) and y-websocket's server (+LevelDB), installed from
    /// npm: live edits and latency at 100 updates/s with the official clients (see `peers.rs`).
    Peers,
    /// A soak: agent links with turns, room sockets with Chat and y-websocket sockets with
    /// edits, held for ten minutes; RSS growth, tasks and sockets back to baseline, errors
    /// (see `soak.rs`).
    Soak(soak::SoakArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Agent links to attach, one per document (also the number of documents created).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    links: u64,
    /// Browser room sockets to open.
    #[arg(long, default_value_t = 2000)]
    rooms: u64,
    /// Openings (attaches, room greetings, raw echoes) in flight at once.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    concurrency: u64,
    /// Sequential chat:send → chat:ack round trips.
    #[arg(long, default_value_t = 500)]
    acks: u64,
    /// The chopin binary. Default: `chopin` beside this executable (the same profile folder).
    #[arg(long, env = "CHOPIN_BIN", value_name = "PATH")]
    chopin: Option<PathBuf>,
    /// How many documents the room sockets are spread over.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    room_documents: u64,
    /// Pause before each RSS reading, in ms.
    #[arg(long, default_value_t = 2000)]
    settle_ms: u64,
}

/// The run's counts, after the open-file limit had its say.
#[derive(Debug, Clone, Copy)]
struct Counts {
    links: usize,
    rooms: usize,
    concurrency: usize,
    acks: usize,
    room_documents: usize,
    settle: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.mode {
        Some(Mode::RawServer) => raw::serve().await,
        Some(Mode::DocumentFences(args)) => fences::run(args).await,
        Some(Mode::RawRelay) => relay::serve().await,
        Some(Mode::PlannerOutput(args)) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => fanout::planner_output(&bin, args).await,
            Err(e) => Err(e),
        },
        Some(Mode::LiveEdits(args)) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => fanout::live_edits(&bin, args).await,
            Err(e) => Err(e),
        },
        Some(Mode::Peers) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => peers::run(&bin).await,
            Err(e) => Err(e),
        },
        Some(Mode::Soak(args)) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => soak::run(&bin, args).await,
            Err(e) => Err(e),
        },
        Some(Mode::Processes(args)) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => processes::run(&bin, args).await,
            Err(e) => Err(e),
        },
        Some(Mode::ChatAcks(args)) => match chopin_bin(cli.run.chopin.clone()) {
            Ok(bin) => acks::run(&bin, args).await,
            Err(e) => Err(e),
        },
        None => {
            tokio::select! {
                result = run(cli.run) => result,
                _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted; the servers are being stopped")),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chopin-bench-sockets: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> Result<()> {
    let chopin_bin = chopin_bin(args.chopin.clone())?;
    let counts = counts_within_fd_limit(&args)?;
    println!(
        "chopin-bench-sockets: {} agent links, {} room sockets over {} documents, {} in flight, {} chat acks; settle {} ms; {} cores",
        counts.links,
        counts.rooms,
        counts.room_documents,
        counts.concurrency,
        counts.acks,
        counts.settle.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!("chopin binary: {}", chopin_bin.display());
    println!();
    let chopin = measure_chopin(&chopin_bin, counts).await?;
    println!();
    let raw = measure_raw(counts).await?;
    println!();
    report::print(&chopin, &raw, counts.concurrency);
    Ok(())
}

/// `--chopin` / `CHOPIN_BIN`, else `chopin` in this executable's folder (`target/release`).
fn chopin_bin(given: Option<PathBuf>) -> Result<PathBuf> {
    let bin = match given {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe().context("cannot find this executable's path")?;
            let dir = exe
                .parent()
                .ok_or_else(|| anyhow!("{} has no folder", exe.display()))?;
            dir.join(format!("chopin{}", std::env::consts::EXE_SUFFIX))
        }
    };
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build --release -p chopin-server --bin chopin`, \
             or name one with --chopin / CHOPIN_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

/// Raises this process's RLIMIT_NOFILE soft limit to the hard limit (the spawned servers
/// inherit it) and lowers the socket counts if even that is too few.
fn counts_within_fd_limit(args: &RunArgs) -> Result<Counts> {
    let limit = raise_fd_limit()?;
    let mut links = args.links;
    let mut rooms = args.rooms;
    // Each side holds every socket at once, plus the chat socket.
    let wanted = links + rooms + 1;
    let budget = limit.saturating_sub(FD_RESERVE);
    if wanted > budget {
        let scale = budget as f64 / wanted as f64;
        links = ((links as f64 * scale).floor() as u64).max(1);
        rooms = (rooms as f64 * scale).floor() as u64;
        println!(
            "NOTE: the open-file limit is {limit} (hard), too few for {wanted} sockets plus {FD_RESERVE} \
             spare; lowered to {links} agent links and {rooms} room sockets. Raise the hard limit \
             (ulimit -Hn, or LimitNOFILE) to measure the full counts."
        );
        if links + rooms + 1 > budget {
            bail!("the open-file limit {limit} leaves no room for even one agent link");
        }
    }
    let to_usize = |n: u64| usize::try_from(n).context("a count too large for this machine");
    Ok(Counts {
        links: to_usize(links)?,
        rooms: to_usize(rooms)?,
        concurrency: to_usize(args.concurrency)?,
        acks: to_usize(args.acks)?,
        room_documents: to_usize(args.room_documents)?.min(to_usize(links)?),
        settle: Duration::from_millis(args.settle_ms),
    })
}

/// Sets the soft RLIMIT_NOFILE to the hard one; returns the soft limit now in force.
pub(crate) fn raise_fd_limit() -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the one struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error()).context("getrlimit(RLIMIT_NOFILE)");
    }
    if limit.rlim_cur < limit.rlim_max {
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads the one struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            println!(
                "NOTE: could not raise the open-file limit from {before} to {}: {}",
                limit.rlim_max,
                std::io::Error::last_os_error()
            );
            return Ok(before);
        }
        println!("open-file limit raised from {before} to {}", limit.rlim_max);
    } else {
        println!(
            "open-file limit: {} (already the hard limit)",
            limit.rlim_cur
        );
    }
    Ok(limit.rlim_cur)
}

/// Waits `settle`, then reads the server's RSS.
async fn settled_rss(server: &mut Spawned, settle: Duration, what: &str) -> Result<u64> {
    tokio::time::sleep(settle).await;
    if let Some(status) = server.exited() {
        bail!(
            "the server exited ({status}) {what}; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    server.rss_kib()
}

fn print_latency(label: &str, summary: Option<Summary>) {
    match summary {
        Some(s) => println!("    {label}: {}", s.line()),
        None => println!("    {label}: no samples"),
    }
}

async fn measure_chopin(bin: &std::path::Path, counts: Counts) -> Result<Figures> {
    println!("== chopin ==");
    let mut fixture = chopin::Fixture::start(bin).await?;
    println!(
        "  {} (pid {}); @mona signed in",
        fixture.server.banner,
        fixture.server.pid()
    );
    let started = Instant::now();
    let asked = fixture.github_requests();
    let documents = fixture.create_documents(counts.links).await?;
    println!(
        "  {} documents created in {:.1} s ({:.0}/s, 16 at once); {}",
        documents.len(),
        started.elapsed().as_secs_f64(),
        rate(documents.len(), started.elapsed()),
        fixture.github_requests().since(asked)
    );

    let idle = settled_rss(&mut fixture.server, counts.settle, "before the agent links").await?;
    let asked = fixture.github_requests();
    let links = fixture.agent_links(&documents, counts.concurrency).await;
    println!("  agent links: {}", links.outcome("links"));
    println!("    {}", fixture.github_requests().since(asked));
    if links.sockets.is_empty() {
        bail!(
            "no agent link attached; the server's log ends:\n{}",
            fixture.server.log_tail(30)
        );
    }
    let with_links =
        settled_rss(&mut fixture.server, counts.settle, "after the agent links").await?;
    let links_rss = RssDelta {
        before_kib: idle,
        after_kib: with_links,
        sockets: links.sockets.len(),
    };
    println!("    {}", links_rss.line());
    let attach = Summary::of(&links.step);
    let attach_total = Summary::of(&links.total);
    print_latency("attach → attached", attach);
    print_latency("connect → upgrade → attached", attach_total);

    let room_documents = &documents[..counts.room_documents];
    let per_document = counts.rooms / room_documents.len();
    let extra = counts.rooms % room_documents.len();
    println!(
        "  room sockets: {} over {} documents ({per_document} each{})",
        counts.rooms,
        room_documents.len(),
        if extra > 0 {
            format!(", {extra} of them one more")
        } else {
            String::new()
        }
    );
    let asked = fixture.github_requests();
    let rooms = fixture
        .room_sockets(room_documents, counts.rooms, counts.concurrency)
        .await;
    println!("    {}", rooms.outcome("room sockets"));
    println!("    {}", fixture.github_requests().since(asked));
    let with_rooms =
        settled_rss(&mut fixture.server, counts.settle, "after the room sockets").await?;
    let rooms_rss = RssDelta {
        before_kib: with_links,
        after_kib: with_rooms,
        sockets: rooms.sockets.len(),
    };
    println!("    {}", rooms_rss.line());
    let room_open = Summary::of(&rooms.total);
    print_latency("connect → upgrade → greeting", room_open);
    print_latency("upgrade done → greeting", Summary::of(&rooms.step));

    // The chat socket gets a document of its own among the rooms' if there is one, so no
    // unread room socket is sent the broadcasts.
    let (chat_document, chat_note) = match documents.get(room_documents.len()) {
        Some(id) => (id, "an agent link attached, no other room socket"),
        None => (
            &documents[documents.len() - 1],
            "shared with other room sockets, which are sent every message",
        ),
    };
    let (acks, acks_per_sec) = if counts.acks > 0 {
        let asked = fixture.github_requests();
        let (samples, elapsed) = fixture.chat_acks(chat_document, counts.acks).await?;
        let asked = fixture.github_requests().since(asked);
        let per_sec = rate(samples.len(), elapsed);
        println!(
            "  chat: {} acks in {:.2} s ({per_sec:.0}/s) on document {chat_document} ({chat_note}); {asked}",
            samples.len(),
            elapsed.as_secs_f64()
        );
        let summary = Summary::of(&samples);
        print_latency("chat:send → chat:ack", summary);
        (summary, per_sec)
    } else {
        (None, 0.0)
    };

    let peak = fixture.server.rss_kib()?;
    drop(links.sockets);
    drop(rooms.sockets);
    let closed = settled_rss(
        &mut fixture.server,
        counts.settle,
        "after the sockets closed",
    )
    .await?;
    println!(
        "  every socket closed: RSS {peak} KiB → {closed} KiB ({:+} KiB; {} KiB above the idle server)",
        closed as i64 - peak as i64,
        closed as i64 - idle as i64
    );
    print_log_summary(&fixture.server.log_lines());
    let stopped = fixture.server.stop().await?;
    println!(
        "  stopped by SIGTERM in {:.2} s: {}{}",
        stopped.took.as_secs_f64(),
        stopped.status,
        if stopped.killed {
            " (it did not exit within the grace and was KILLED)"
        } else {
            ""
        }
    );
    Ok(Figures {
        links: links_rss,
        attach,
        attach_total,
        rooms: rooms_rss,
        room_open,
        acks,
        acks_per_sec,
    })
}

/// How much the server logged, and the first few warnings and errors.
fn print_log_summary(lines: &[String]) {
    let level = |line: &String| line.split_whitespace().nth(1).map(str::to_owned);
    let of = |wanted: &str| -> Vec<&String> {
        lines
            .iter()
            .filter(|l| level(l).as_deref() == Some(wanted))
            .collect()
    };
    let (warnings, errors) = (of("WARN"), of("ERROR"));
    println!(
        "  server log: {} lines, {} WARN, {} ERROR",
        lines.len(),
        warnings.len(),
        errors.len()
    );
    for line in errors.iter().chain(warnings.iter()).take(5) {
        let shown: String = line.chars().take(300).collect();
        println!("    {shown}");
    }
}

async fn measure_raw(counts: Counts) -> Result<Figures> {
    println!("== raw tokio-tungstenite echo (4 KiB read buffer) ==");
    let exe = std::env::current_exe().context("cannot find this executable's path")?;
    let mut server = Spawned::start("raw echo", &exe, &["raw-server"], &[], raw::LISTENING).await?;
    println!("  {} (pid {})", server.banner, server.pid());
    let host = server.host().to_owned();

    let idle = settled_rss(&mut server, counts.settle, "before its sockets").await?;
    let first = raw::sockets(&host, counts.links, counts.concurrency, 0).await;
    println!("  as many as agent links: {}", first.outcome("sockets"));
    let after_first = settled_rss(&mut server, counts.settle, "after the first sockets").await?;
    let links = RssDelta {
        before_kib: idle,
        after_kib: after_first,
        sockets: first.sockets.len(),
    };
    println!("    {}", links.line());
    let attach = Summary::of(&first.step);
    let attach_total = Summary::of(&first.total);
    print_latency("echo round trip", attach);
    print_latency("connect → upgrade → echo", attach_total);

    let second = raw::sockets(&host, counts.rooms, counts.concurrency, counts.links).await;
    println!("  as many as room sockets: {}", second.outcome("sockets"));
    let after_second = settled_rss(&mut server, counts.settle, "after the second sockets").await?;
    let rooms = RssDelta {
        before_kib: after_first,
        after_kib: after_second,
        sockets: second.sockets.len(),
    };
    println!("    {}", rooms.line());
    let room_open = Summary::of(&second.total);
    print_latency("connect → upgrade → echo", room_open);

    let (acks, acks_per_sec) = if counts.acks > 0 {
        let (samples, elapsed) = raw::echo_loop(&host, counts.acks).await?;
        let per_sec = rate(samples.len(), elapsed);
        println!(
            "  echo loop: {} round trips in {:.2} s ({per_sec:.0}/s)",
            samples.len(),
            elapsed.as_secs_f64()
        );
        let summary = Summary::of(&samples);
        print_latency("sequential echo", summary);
        (summary, per_sec)
    } else {
        (None, 0.0)
    };
    drop(first.sockets);
    drop(second.sockets);
    let stopped = server.stop().await?;
    println!(
        "  stopped in {:.2} s: {}",
        stopped.took.as_secs_f64(),
        stopped.status
    );
    Ok(Figures {
        links,
        attach,
        attach_total,
        rooms,
        room_open,
        acks,
        acks_per_sec,
    })
}
