//! `chopin-bench-sockets soak`: the real `chopin` binary held under a steady mixed load for a
//! long time, to see that it stays flat: memory, tasks and sockets.
//!
//! What it does, and how:
//! - **The load.** `--links` documents, each with an agent link attached (its Planner);
//!   `--rooms` browser room sockets and `--providers` y-websocket sockets spread round-robin
//!   over them. For `--seconds`, every room socket sends a Chat message every
//!   `--chat-every-seconds` (the first `--links` of them, one per document, address `@chopin`,
//!   so each agent link runs a turn that often: a text part, a finished step, the turn's end);
//!   every provider types one character every `--edit-every-seconds` and deletes it the next
//!   time (so the documents stay small and any growth is the server's own). Starts are spread
//!   over the period, so the load is steady, not in bursts. Every socket reads everything the
//!   server sends it, as a real client does.
//! - **What it watches.** Every `--sample-seconds`: the server's RSS (`/proc/<pid>/status`),
//!   and from `/metrics` its live tasks (`chopin_tasks_alive`) and open sockets by kind. RSS
//!   growth is the last sample's over the first one after `--warmup-seconds`.
//! - **The end.** Every socket is closed as a client would close it; then `/metrics` is read
//!   until its sockets and tasks are back where they were before the first socket opened (or
//!   60 s pass).
//! - **Errors.** A socket closed by the server, an opening refused, a message refused or not
//!   acknowledged within 30 s, a turn that does not end: each is counted, the first few are
//!   printed.
//!
//! Nothing here asserts anything: it prints each figure beside its goal (RSS growth after
//! warm-up < 5 %, tasks and sockets back to their baseline, no error).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use chopin_fixtures::agent::{AgentClient, Event};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::{
    ClientMessage, FinishPart, FinishReason, Part, PartMessage, ServerMessage, Started, TextPart,
    TurnEnd, TurnStatus,
};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::chopin::Fixture;
use crate::load::open_all;

/// Openings in flight at once.
const OPEN_CONCURRENCY: usize = 100;
/// How long a Chat message may wait for its ack.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server is given, after every socket closed, to come back to its baseline.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Errors printed in full (the rest are counted).
const ERRORS_SHOWN: usize = 10;
/// The Planner grace period after a link ends (the fixture's other timers stay at an hour): a
/// grace period's timer is a task, so the drain waits this long for the last of them.
const GRACE_MS: &str = "5000";
/// Goal: RSS growth after warm-up, in percent.
const RSS_GROWTH_GOAL: f64 = 5.0;

#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// How long the load runs, in seconds (after every socket opened).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Agent links, one per document (also the number of documents).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    links: u64,
    /// Browser room sockets.
    #[arg(long, default_value_t = 1000)]
    rooms: u64,
    /// y-websocket sockets.
    #[arg(long, default_value_t = 500)]
    providers: u64,
    /// Each room socket sends a Chat message this often.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    chat_every_seconds: u64,
    /// Each provider makes one edit this often.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    edit_every_seconds: u64,
    /// Samples before this many seconds of load are warm-up (not counted in the growth).
    #[arg(long, default_value_t = 120)]
    warmup_seconds: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    sample_seconds: u64,
}

/// What the clients did, and what went wrong.
#[derive(Default)]
struct Tally {
    acks: AtomicU64,
    turns: AtomicU64,
    edits: AtomicU64,
    errors: AtomicU64,
    shown: Mutex<Vec<String>>,
    /// Chat messages refused, by code: answers the spec gives (`planner-busy` while a turn
    /// runs), not errors, but shown.
    refused: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if shown.len() < ERRORS_SHOWN {
            shown.push(what);
        }
    }
}

/// One reading of the server.
#[derive(Debug, Clone)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    tasks: u64,
    sockets: BTreeMap<String, u64>,
    /// Documents open and Planner links attached (what holds tasks besides sockets).
    documents_open: u64,
    links_attached: u64,
    /// The per-document and per-login maps that hold entries, and jobs not settled.
    held: Vec<String>,
}

pub async fn run(bin: &Path, args: SoakArgs) -> Result<()> {
    let to_usize = |n: u64| usize::try_from(n).map_err(|_| anyhow!("{n} is too large"));
    let (links, rooms, providers) = (
        to_usize(args.links)?,
        to_usize(args.rooms)?,
        to_usize(args.providers)?,
    );
    let limit = crate::raise_fd_limit()?;
    let wanted = (links + rooms + providers) as u64 + crate::FD_RESERVE;
    if wanted > limit {
        bail!(
            "the open-file limit is {limit}: too few for {} sockets plus {} spare; raise the \
             hard limit (ulimit -Hn) or ask for fewer sockets",
            links + rooms + providers,
            crate::FD_RESERVE
        );
    }
    println!(
        "chopin-bench-sockets soak: {links} agent links (one per document), {rooms} room sockets, \
         {providers} y-websocket sockets for {} s; a Chat message per room socket every {} s \
         (@chopin on {links} of them: a turn per link), an edit per provider every {} s; \
         warm-up {} s, a sample every {} s; {} cores",
        args.seconds,
        args.chat_every_seconds,
        args.edit_every_seconds,
        args.warmup_seconds,
        args.sample_seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut fixture =
        Fixture::start_with(bin, &[("PLANNER_ATTACH_GRACE_MS", GRACE_MS.into())]).await?;
    println!("  {} (pid {})", fixture.server.banner, fixture.server.pid());
    let documents = fixture.create_documents(links).await?;
    warm_up(&fixture, &documents[0]).await?;
    let started = Instant::now();
    let baseline = sample(&fixture, started.elapsed()).await?;
    println!("  baseline: {}", baseline.line());

    let opened = fixture.agent_links(&documents, OPEN_CONCURRENCY).await;
    println!("  agent links: {}", opened.outcome("links"));
    let agents = opened.sockets;
    let opened = fixture
        .room_sockets(&documents, rooms, OPEN_CONCURRENCY)
        .await;
    println!("  room sockets: {}", opened.outcome("sockets"));
    let room_sockets = opened.sockets;
    let opened = open_providers(&fixture, &documents, providers).await;
    println!("  y-websocket sockets: {}", opened.outcome("sockets"));
    let provider_sockets = opened.sockets;
    let failed_openings = (links - agents.len())
        + (rooms - room_sockets.len())
        + (providers - provider_sockets.len());

    let tally = Arc::new(Tally::default());
    let (stop, stopped) = watch::channel(false);
    let tasks = spawn_clients(
        Clients {
            agents,
            rooms: room_sockets,
            providers: provider_sockets,
        },
        links,
        (
            Duration::from_secs(args.chat_every_seconds),
            Duration::from_secs(args.edit_every_seconds),
        ),
        &tally,
        &stopped,
    );

    let load_started = Instant::now();
    let run_for = Duration::from_secs(args.seconds);
    let warmup = Duration::from_secs(args.warmup_seconds);
    let mut samples = Vec::new();
    loop {
        let left = run_for.saturating_sub(load_started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(Duration::from_secs(args.sample_seconds))).await;
        if let Some(status) = fixture.server.exited() {
            bail!(
                "the server exited ({status}) under load; its log ends:\n{}",
                fixture.server.log_tail(30)
            );
        }
        let now = sample(&fixture, load_started.elapsed()).await?;
        println!(
            "  {}; {} acks, {} turns, {} edits, {} errors",
            now.line(),
            tally.acks.load(Ordering::Relaxed),
            tally.turns.load(Ordering::Relaxed),
            tally.edits.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed)
        );
        samples.push(now);
    }

    let _ = stop.send(true);
    for task in tasks {
        if let Err(e) = task.await {
            tally.error(format!("a client task ended badly: {e}"));
        }
    }
    let closed_at = Instant::now();
    let drained = loop {
        let now = sample(&fixture, started.elapsed()).await?;
        let back = now.sockets.values().all(|n| *n == 0) && now.tasks <= baseline.tasks;
        if back || closed_at.elapsed() >= DRAIN_TIMEOUT {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "  after every socket closed (+{:.1} s): {}",
        closed_at.elapsed().as_secs_f64(),
        drained.line()
    );
    if !drained.held.is_empty() {
        println!("    still held: {}", drained.held.join("; "));
    }
    let stopped = fixture.server.stop().await?;
    if stopped.killed {
        tally.error("the server did not stop on SIGTERM".into());
    }

    let warm = samples
        .iter()
        .find(|s| s.at >= warmup)
        .or(samples.first())
        .ok_or_else(|| anyhow!("no sample was taken"))?;
    let last = samples.last().unwrap_or(warm);
    let growth = (last.rss_kib as f64 - warm.rss_kib as f64) / warm.rss_kib as f64 * 100.0;
    let errors = tally.errors.load(Ordering::Relaxed) + failed_openings as u64;
    println!();
    println!("| figure | value | goal |");
    println!("|---|---|---|");
    println!(
        "| RSS after warm-up ({:.0} s) → at the end ({:.0} s) | {} → {} KiB ({growth:+.1} %) | < {RSS_GROWTH_GOAL} % {} |",
        warm.at.as_secs_f64(),
        last.at.as_secs_f64(),
        warm.rss_kib,
        last.rss_kib,
        met(growth < RSS_GROWTH_GOAL)
    );
    println!(
        "| tasks alive: baseline → under load → after closing | {} → {} → {} | back to baseline {} |",
        baseline.tasks,
        last.tasks,
        drained.tasks,
        met(drained.tasks <= baseline.tasks)
    );
    println!(
        "| sockets open after closing | {} | 0 {} |",
        drained.sockets_line(),
        met(drained.sockets.values().all(|n| *n == 0))
    );
    println!(
        "| errors (failed openings, closes, timeouts) | {errors} | 0 {} |",
        met(errors == 0)
    );
    println!(
        "| work done | {} Chat acks, {} turns, {} edits | — |",
        tally.acks.load(Ordering::Relaxed),
        tally.turns.load(Ordering::Relaxed),
        tally.edits.load(Ordering::Relaxed)
    );
    let refused = tally.refused.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "| Chat messages refused, by code (answers, not errors) | {} | — |",
        if refused.is_empty() {
            "none".to_owned()
        } else {
            refused
                .iter()
                .map(|(code, n)| format!("{code} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let shown = tally.shown.lock().unwrap_or_else(|e| e.into_inner());
    if !shown.is_empty() {
        println!();
        println!("first errors:");
        for error in shown.iter() {
            println!("  {error}");
        }
    }
    Ok(())
}

/// The open sockets of each kind.
struct Clients {
    agents: Vec<AgentClient>,
    rooms: Vec<BrowserSocket>,
    providers: Vec<BrowserSocket>,
}

/// Starts a task per client until `stopped`: each agent link runs its turns; each room socket
/// sends a Chat message every `chat_every` (the first `addressed` of them to `@chopin`), each
/// provider edits every `edit_every`; the starts are spread evenly over the period.
fn spawn_clients(
    clients: Clients,
    addressed: usize,
    (chat_every, edit_every): (Duration, Duration),
    tally: &Arc<Tally>,
    stopped: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let spread = |every: Duration, n: usize, count: usize| every.mul_f64(n as f64 / count as f64);
    let mut tasks = Vec::new();
    for (n, agent) in clients.agents.into_iter().enumerate() {
        tasks.push(tokio::spawn(agent_loop(
            n,
            agent,
            tally.clone(),
            stopped.clone(),
        )));
    }
    let count = clients.rooms.len();
    for (n, socket) in clients.rooms.into_iter().enumerate() {
        let text = if n < addressed {
            format!("@chopin soak question from room socket {n}")
        } else {
            format!("soak message from room socket {n}")
        };
        tasks.push(tokio::spawn(room_loop(
            n,
            socket,
            text,
            (spread(chat_every, n, count), chat_every),
            tally.clone(),
            stopped.clone(),
        )));
    }
    let count = clients.providers.len();
    for (n, socket) in clients.providers.into_iter().enumerate() {
        tasks.push(tokio::spawn(provider_loop(
            n,
            socket,
            (spread(edit_every, n, count), edit_every),
            tally.clone(),
            stopped.clone(),
        )));
    }
    tasks
}

/// One client of each kind comes, works for a few seconds and goes, and the grace period it
/// leaves runs out: what the server starts once and keeps (its store writer, say) is then
/// running before the baseline is read, so the baseline is the idle server's, not the fresh one's.
async fn warm_up(fixture: &Fixture, document: &str) -> Result<()> {
    let documents = [document.to_owned()];
    let tally = Arc::new(Tally::default());
    let (stop, stopped) = watch::channel(false);
    let clients = Clients {
        agents: fixture.agent_links(&documents, 1).await.sockets,
        rooms: fixture.room_sockets(&documents, 1, 1).await.sockets,
        providers: open_providers(fixture, &documents, 1).await.sockets,
    };
    let every = Duration::from_secs(1);
    let tasks = spawn_clients(clients, 1, (every, every), &tally, &stopped);
    if tasks.len() != 3 {
        bail!(
            "the warm-up's clients did not all open; the server's log ends:\n{}",
            fixture.server.log_tail(20)
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(true);
    for task in tasks {
        task.await?;
    }
    let errors = tally
        .shown
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .join("; ");
    if !errors.is_empty() {
        bail!("the warm-up went wrong: {errors}");
    }
    let grace: u64 = GRACE_MS.parse()?;
    tokio::time::sleep(Duration::from_millis(grace + 2000)).await;
    Ok(())
}

fn met(yes: bool) -> &'static str {
    if yes {
        "(met)"
    } else {
        "(NOT met)"
    }
}

impl Sample {
    fn line(&self) -> String {
        format!(
            "{:>5.0} s: RSS {} KiB, {} tasks, sockets {}, {} documents open, {} links attached",
            self.at.as_secs_f64(),
            self.rss_kib,
            self.tasks,
            self.sockets_line(),
            self.documents_open,
            self.links_attached
        )
    }

    fn sockets_line(&self) -> String {
        self.sockets
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The server's RSS, and its tasks and sockets from `/metrics`.
async fn sample(fixture: &Fixture, at: Duration) -> Result<Sample> {
    let page = reqwest::get(format!("{}/metrics", fixture.server.base_url))
        .await?
        .text()
        .await?;
    let mut tasks = None;
    let mut sockets = BTreeMap::new();
    let gauge = |name: &str| {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0)
    };
    for line in page.lines() {
        if let Some(n) = line.strip_prefix("chopin_tasks_alive ") {
            tasks = n.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("chopin_sockets_open{kind=\"") {
            if let Some((kind, n)) = rest.split_once("\"} ") {
                sockets.insert(kind.to_owned(), n.trim().parse().unwrap_or(0));
            }
        }
    }
    Ok(Sample {
        at,
        rss_kib: fixture.server.rss_kib()?,
        tasks: tasks.ok_or_else(|| anyhow!("/metrics has no chopin_tasks_alive:\n{page}"))?,
        sockets,
        held: page
            .lines()
            .filter(|l| {
                (l.starts_with("chopin_state_entries{")
                    || l.starts_with("chopin_jobs{state=\"pending\"")
                    || l.starts_with("chopin_jobs{state=\"running\"")
                    || l.starts_with("chopin_turns_running"))
                    && !l.ends_with(" 0")
            })
            .map(str::to_owned)
            .collect(),
        documents_open: gauge("chopin_documents_open"),
        links_attached: gauge("chopin_planner_links_attached"),
    })
}

/// Opens `count` y-websocket sockets spread round-robin over `documents`.
async fn open_providers(
    fixture: &Fixture,
    documents: &[String],
    count: usize,
) -> crate::load::Phase<BrowserSocket> {
    let host: Arc<str> = fixture.server.host().into();
    let cookie: Arc<str> = fixture.cookie.as_str().into();
    let origin: Arc<str> = fixture.origin.as_str().into();
    let documents: Arc<[String]> = documents.into();
    open_all(
        count,
        OPEN_CONCURRENCY,
        |i| format!("y-websocket socket {i}"),
        move |i| {
            let document = documents[i % documents.len()].clone();
            let (host, cookie, origin) = (host.clone(), cookie.clone(), origin.clone());
            async move {
                let started = Instant::now();
                let socket = crate::fanout::yjs_socket(&host, &document, &cookie, &origin)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(crate::load::Opened {
                    socket,
                    step: started.elapsed(),
                    total: started.elapsed(),
                })
            }
        },
    )
    .await
}

/// An agent link: answers each session's `start`, runs each turn (a text part, a finished
/// step, the turn's end), until told to stop; then closes.
async fn agent_loop(
    n: usize,
    mut agent: AgentClient,
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            event = agent.recv() => event,
        };
        agent.forget();
        let outcome: Result<()> = async {
            match event? {
                Event::Message(ServerMessage::Start(start)) => {
                    agent
                        .send(&ClientMessage::Started(Started {
                            session_id: start.session_id,
                        }))
                        .await?;
                }
                Event::Message(ServerMessage::Turn(turn)) => {
                    let id = turn.turn_id;
                    for part in [
                        Part::Text(TextPart {
                            text: format!("soak answer from link {n}"),
                        }),
                        Part::FinishStep(FinishPart {
                            finish_reason: FinishReason::Stop,
                            usage: None,
                        }),
                    ] {
                        agent
                            .send(&ClientMessage::Part(PartMessage {
                                turn_id: id.clone(),
                                part,
                            }))
                            .await?;
                    }
                    agent
                        .send(&ClientMessage::TurnEnd(TurnEnd {
                            turn_id: id,
                            status: TurnStatus::Completed,
                            output: None,
                            message: None,
                        }))
                        .await?;
                    tally.turns.fetch_add(1, Ordering::Relaxed);
                }
                Event::Message(_) => {}
                Event::Closed { code, reason } => {
                    bail!("was closed by the server: {code} {reason}")
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            tally.error(format!("agent link {n} {e}"));
            return;
        }
    }
    // A client that is done detaches (no grace period held for it), then reads the close.
    let closed = match agent.detach().await {
        Ok(()) => agent.expect_close().await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(e) = closed {
        tally.error(format!("agent link {n} did not detach cleanly: {e}"));
    }
}

/// A room socket: sends `text` every `every` (first after `offset`), each waiting at most
/// [`ACK_TIMEOUT`] for its ack, reading everything else, until told to stop; then closes.
async fn room_loop(
    n: usize,
    mut socket: BrowserSocket,
    text: String,
    (offset, every): (Duration, Duration),
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
) {
    let mut next = tokio::time::Instant::now() + offset;
    let mut waiting: Option<(String, tokio::time::Instant)> = None;
    let mut sent = 0_u64;
    loop {
        let deadline = waiting
            .as_ref()
            .map_or(next, |(_, at)| *at + ACK_TIMEOUT)
            .min(next);
        let event = tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep_until(deadline) => None,
            event = socket.recv_json() => Some(event),
        };
        socket.forget();
        let now = tokio::time::Instant::now();
        match event {
            None => {
                if let Some((id, at)) = &waiting {
                    if now >= *at + ACK_TIMEOUT {
                        tally.error(format!("room socket {n}: no ack for {id} within 30 s"));
                        waiting = None;
                    }
                }
                if now >= next && waiting.is_none() {
                    let id = format!("soak-{n}-{sent}");
                    sent += 1;
                    let frame = json!({ "type": "chat:send", "requestId": id, "text": text });
                    if let Err(e) = socket.send_json(&frame).await {
                        tally.error(format!("room socket {n} could not send: {e}"));
                        return;
                    }
                    waiting = Some((id, now));
                }
                if now >= next {
                    next += every;
                }
            }
            Some(Ok(BrowserEvent::Json(value))) => {
                let kind = value["type"].as_str().unwrap_or_default();
                let ours = waiting
                    .as_ref()
                    .is_some_and(|(id, _)| value["requestId"].as_str() == Some(id.as_str()));
                match kind {
                    "chat:ack" if ours => {
                        tally.acks.fetch_add(1, Ordering::Relaxed);
                        waiting = None;
                    }
                    "chat:refused" if ours => {
                        let code = value["code"].as_str().unwrap_or("(no code)").to_owned();
                        let mut refused = tally.refused.lock().unwrap_or_else(|e| e.into_inner());
                        *refused.entry(code).or_default() += 1;
                        waiting = None;
                    }
                    "error" => tally.error(format!("room socket {n}: {value}")),
                    _ => {}
                }
            }
            Some(Ok(BrowserEvent::Binary(_))) => {}
            Some(Ok(BrowserEvent::Closed { code, reason })) => {
                tally.error(format!(
                    "room socket {n} was closed by the server: {code} {reason:?}"
                ));
                return;
            }
            Some(Err(e)) => {
                tally.error(format!("room socket {n} lost its connection: {e}"));
                return;
            }
        }
    }
    if let Err(e) = socket.close().await {
        tally.error(format!("room socket {n} did not close cleanly: {e}"));
    }
}

/// A y-websocket socket: every `every` (first after `offset`) types one character at the start
/// of the document, or deletes the one it typed, reading everything the server relays, until
/// told to stop; then closes.
async fn provider_loop(
    n: usize,
    mut socket: BrowserSocket,
    (offset, every): (Duration, Duration),
    tally: Arc<Tally>,
    mut stop: watch::Receiver<bool>,
) {
    use yrs::updates::encoder::Encode;
    use yrs::{Text, Transact};
    let doc = chopin_document::ydoc::empty_doc(1_000_000 + n as u64);
    let text = doc.get_or_insert_text(chopin_document::ydoc::SOURCE_TEXT);
    let mut next = tokio::time::Instant::now() + offset;
    let mut typed = false;
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep_until(next) => None,
            event = socket.recv_json() => Some(event),
        };
        socket.forget();
        match event {
            None => {
                next += every;
                let update = {
                    let mut txn = doc.transact_mut();
                    if typed {
                        text.remove_range(&mut txn, 0, 1);
                    } else {
                        text.insert(&mut txn, 0, "x");
                    }
                    txn.encode_update_v1()
                };
                typed = !typed;
                let frame =
                    yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update)).encode_v1();
                if let Err(e) = socket.send_binary(frame).await {
                    tally.error(format!("y-websocket socket {n} could not send: {e}"));
                    return;
                }
                tally.edits.fetch_add(1, Ordering::Relaxed);
            }
            Some(Ok(BrowserEvent::Closed { code, reason })) => {
                tally.error(format!(
                    "y-websocket socket {n} was closed by the server: {code} {reason:?}"
                ));
                return;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tally.error(format!("y-websocket socket {n} lost its connection: {e}"));
                return;
            }
        }
    }
    if let Err(e) = socket.close().await {
        tally.error(format!("y-websocket socket {n} did not close cleanly: {e}"));
    }
}
