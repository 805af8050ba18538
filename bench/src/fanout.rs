//! `chopin-bench-sockets planner-output` and `chopin-bench-sockets live-edits`: how fast the
//! real `chopin` binary fans a room's frames out to its sockets, next to a bare tokio-tungstenite
//! relay ([`crate::relay`]) doing the same fan-out, measured in the same run.
//!
//! What they measure, and how:
//! - **Planner output.** One document; an attached scripted agent client (the fixtures' agent
//!   client, as the e2e suite attaches it) holds its Planner, and `--sockets` room sockets (1,
//!   10 and 100 by default) are open on it. A `@chopin` message from the first socket starts a
//!   turn; the client then streams `--steps` steps (a `text` part and a `finish-step` each, as
//!   fast as it can write them), each of which becomes its own Chat message, saved and sent to
//!   every room socket as `chat:message`. The figure is messages delivered per second: steps ×
//!   sockets over the time from the first part sent to the last socket's last step read. The
//!   baseline: a publisher and as many subscribers on the relay, the publisher sending `--steps`
//!   frames shaped and sized as those `chat:message`s, the same count over the same span.
//! - **Live edits.** One document; a writer and `--listeners` (10) listening y-websocket
//!   sockets (`/api/yjs/{id}`, as the official provider connects). The writer sends `--updates`
//!   (2,000) single-character Yjs updates one after another without waiting (a Yjs client gets
//!   no acknowledgement); each is journalled and relayed to every other socket. The figure is
//!   updates per second delivered to every listener: updates over the time from the first sent
//!   to the last listener's last update read. The baseline: the same frames through the relay to
//!   as many listeners.
//!
//! Each layout is measured `--rounds` times, Chopin and relay in turn; the median of each is
//! printed with the ratio (goal ≥ 0.5). Nothing here asserts a timing.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::{
    ClientMessage, FinishPart, FinishReason, Part, PartMessage, ServerMessage, Started, TextPart,
    TurnEnd, TurnStatus,
};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::child::Spawned;
use crate::chopin::{ack, greeting, open_room, Fixture};
use crate::load::dial;
use crate::relay;

/// The longest one round may take.
const ROUND_TIMEOUT: Duration = Duration::from_secs(180);
/// The goal of both benches: at least half the relay's rate.
const GOAL: f64 = 0.5;

#[derive(Debug, Clone, clap::Args)]
pub struct PlannerArgs {
    /// Steps in the Planner's turn (each one Chat message).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Room socket counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 10, 100])]
    sockets: Vec<usize>,
    /// Measurements of each layout (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
}

#[derive(Debug, Clone, clap::Args)]
pub struct EditsArgs {
    /// Single-character Yjs updates the writer sends.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    updates: u64,
    /// Listening sockets.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    listeners: u64,
    /// Measurements (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Characters the document holds before the edits (sent as one update before the
    /// listeners join, so it is not counted). The large case is 200000.
    #[arg(long, default_value_t = 0)]
    initial_chars: u64,
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn rates_line(rates: &[f64]) -> String {
    let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    each.join(", ")
}

fn verdict(ratio: f64) -> &'static str {
    if ratio >= GOAL {
        "met"
    } else {
        "NOT met"
    }
}

async fn start_relay() -> Result<Spawned> {
    let exe = std::env::current_exe().context("cannot find this executable's path")?;
    Spawned::start("raw relay", &exe, &["raw-relay"], &[], relay::LISTENING).await
}

// ---------------------------------------------------------------------------------------------
// Planner output

/// The text of step `i`: about 120 characters, as a short Planner step says.
fn step_text(round: u64, i: u64) -> String {
    format!(
        "Step {i} of round {round}: the Planner reports what it did in this step, in about one line of text."
    )
}

pub async fn planner_output(bin: &Path, args: PlannerArgs) -> Result<()> {
    println!(
        "chopin-bench-sockets planner-output: a {}-step turn to {:?} room socket(s), {} round(s) each; {} cores",
        args.steps,
        args.sockets,
        args.rounds,
        cores()
    );
    let mut relay = start_relay().await?;
    let mut rows = Vec::new();
    for &sockets in &args.sockets {
        let mut chopin = ChopinPlanner::start(bin, sockets).await?;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..args.rounds {
            let took = chopin.turn(round, args.steps).await?;
            ours.push((args.steps as usize * sockets) as f64 / took.as_secs_f64());
            let took = relay_turn(&relay, sockets, round, args.steps).await?;
            theirs.push((args.steps as usize * sockets) as f64 / took.as_secs_f64());
        }
        chopin.stop().await?;
        if let Some(status) = relay.exited() {
            bail!(
                "the relay exited ({status}); its log ends:\n{}",
                relay.log_tail(20)
            );
        }
        let (ours_m, theirs_m) = (median(ours.clone()), median(theirs.clone()));
        println!(
            "  {sockets:>3} socket(s): chopin {ours_m:>8.0} messages/s ({}); relay {theirs_m:>8.0} messages/s ({}); ratio {:.2}",
            rates_line(&ours),
            rates_line(&theirs),
            ours_m / theirs_m
        );
        rows.push((sockets, ours_m, theirs_m));
    }
    relay.stop().await?;
    println!();
    println!("| room sockets | chopin messages/s | raw relay messages/s | ratio | goal ≥ {GOAL} |");
    println!("|---|---|---|---|---|");
    for (sockets, ours, theirs) in rows {
        let ratio = ours / theirs;
        println!(
            "| {sockets} | {ours:.0} | {theirs:.0} | {ratio:.2} | {} |",
            verdict(ratio)
        );
    }
    Ok(())
}

/// A Chopin server with one document, its Planner held by an attached agent client, and room
/// sockets open on it.
struct ChopinPlanner {
    fixture: Fixture,
    agent: AgentClient,
    rooms: Vec<BrowserSocket>,
}

impl ChopinPlanner {
    async fn start(bin: &Path, sockets: usize) -> Result<ChopinPlanner> {
        let fixture = Fixture::start(bin).await?;
        let document = fixture
            .create_documents(1)
            .await?
            .pop()
            .ok_or_else(|| anyhow!("no document was created"))?;
        let host = fixture.server.host().to_owned();
        let stream = dial(&host).await.map_err(|e| anyhow!("the agent {e}"))?;
        let mut agent = connect(stream, &Upgrade::new(host.clone(), Some(&fixture.token)))
            .await
            .map_err(|e| anyhow!("the agent link was refused: {e}"))?;
        match agent.attach(&document, &[]).await? {
            ServerMessage::Attached(_) => {}
            other => bail!("the agent link got {other:?} instead of attached"),
        }
        let mut rooms = Vec::with_capacity(sockets);
        for n in 0..sockets {
            let mut socket = open_room(&host, &document, &fixture.cookie, &fixture.origin)
                .await
                .map_err(|e| anyhow!("room socket {n} {e}"))?;
            greeting(&mut socket)
                .await
                .map_err(|e| anyhow!("room socket {n} {e}"))?;
            rooms.push(socket);
        }
        Ok(ChopinPlanner {
            fixture,
            agent,
            rooms,
        })
    }

    /// One turn of `steps` steps; the time from the first part sent to the last socket's last
    /// step read.
    async fn turn(&mut self, round: u64, steps: u64) -> Result<Duration> {
        tokio::time::timeout(ROUND_TIMEOUT, self.turn_within(round, steps))
            .await
            .map_err(|_| {
                anyhow!(
                    "round {round} did not finish within {} s; the server's log ends:\n{}",
                    ROUND_TIMEOUT.as_secs(),
                    self.fixture.server.log_tail(20)
                )
            })?
    }

    async fn turn_within(&mut self, round: u64, steps: u64) -> Result<Duration> {
        let request_id = format!("turn-{round}");
        let first = &mut self.rooms[0];
        first
            .send_json(&json!({
                "type": "chat:send",
                "requestId": request_id,
                "text": format!("@chopin bench round {round}"),
            }))
            .await?;
        ack(first, &request_id)
            .await
            .map_err(|e| anyhow!("the @chopin message {e}"))?;
        let turn_id = next_turn(&mut self.agent).await?;
        let readers = spawn_readers(
            std::mem::take(&mut self.rooms),
            steps as usize,
            |event| matches!(event, BrowserEvent::Json(v) if v["type"] == "chat:message" && v["kind"] == "planner"),
        );
        let started = Instant::now();
        for i in 0..steps {
            self.agent
                .send(&ClientMessage::Part(PartMessage {
                    turn_id: turn_id.clone(),
                    part: Part::Text(TextPart {
                        text: step_text(round, i),
                    }),
                }))
                .await?;
            self.agent
                .send(&ClientMessage::Part(PartMessage {
                    turn_id: turn_id.clone(),
                    part: Part::FinishStep(FinishPart {
                        finish_reason: FinishReason::Stop,
                        usage: None,
                    }),
                }))
                .await?;
        }
        let (rooms, last) = gather(readers).await?;
        self.rooms = rooms;
        self.agent
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id,
                status: TurnStatus::Completed,
                output: None,
                message: None,
            }))
            .await?;
        // The turn has ended once its session is let go; only then may the next one start.
        loop {
            match self.agent.recv().await? {
                Event::Message(ServerMessage::Destroy(_)) => break,
                Event::Message(_) => {}
                Event::Closed { code, reason } => {
                    bail!("the agent link was closed after the turn: {code} {reason}")
                }
            }
        }
        Ok(last.saturating_duration_since(started))
    }

    async fn stop(self) -> Result<()> {
        drop(self.rooms);
        drop(self.agent);
        let stopped = self.fixture.server.stop().await?;
        if stopped.killed {
            bail!("the server did not stop on SIGTERM");
        }
        Ok(())
    }
}

/// Reads the agent link up to the next `turn` (answering a `start` on the way) and returns its
/// id.
async fn next_turn(agent: &mut AgentClient) -> Result<String> {
    loop {
        match agent.recv().await? {
            Event::Message(ServerMessage::Start(start)) => {
                agent
                    .send(&ClientMessage::Started(Started {
                        session_id: start.session_id,
                    }))
                    .await?;
            }
            Event::Message(ServerMessage::Turn(turn)) => return Ok(turn.turn_id),
            Event::Message(_) => {}
            Event::Closed { code, reason } => {
                bail!("the agent link was closed waiting for a turn: {code} {reason}")
            }
        }
    }
}

/// Each socket read in its own task until it has seen `count` frames that `counts`; each task
/// gives back its socket and when it read the last of them.
fn spawn_readers(
    sockets: Vec<BrowserSocket>,
    count: usize,
    counts: fn(&BrowserEvent) -> bool,
) -> Vec<JoinHandle<Result<(BrowserSocket, Instant)>>> {
    sockets
        .into_iter()
        .enumerate()
        .map(|(n, mut socket)| {
            tokio::spawn(async move {
                let mut seen = 0;
                while seen < count {
                    let event = socket
                        .recv_json()
                        .await
                        .map_err(|e| anyhow!("socket {n} after {seen} of {count}: {e}"))?;
                    if let BrowserEvent::Closed { code, reason } = &event {
                        bail!("socket {n} was closed after {seen} of {count}: {code} {reason:?}");
                    }
                    if counts(&event) {
                        seen += 1;
                    }
                }
                Ok((socket, Instant::now()))
            })
        })
        .collect()
}

/// The sockets back, and the last time any of them finished.
async fn gather(
    readers: Vec<JoinHandle<Result<(BrowserSocket, Instant)>>>,
) -> Result<(Vec<BrowserSocket>, Instant)> {
    let mut sockets = Vec::with_capacity(readers.len());
    let mut last: Option<Instant> = None;
    for reader in readers {
        let (socket, done) = reader.await.context("a reading task")??;
        last = Some(last.map_or(done, |l| l.max(done)));
        sockets.push(socket);
        // A socket's own reads are done; its later frames wait in its buffer.
    }
    Ok((sockets, last.unwrap_or_else(Instant::now)))
}

/// The same turn through the relay: a publisher sends `steps` frames shaped as Chopin's
/// `chat:message`s to `sockets` subscribers.
async fn relay_turn(relay: &Spawned, sockets: usize, round: u64, steps: u64) -> Result<Duration> {
    let host = relay.host();
    let path = format!("/planner/{sockets}/{round}");
    let mut publisher = relay::join(host, &path).await?;
    let mut subscribers = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        subscribers.push(relay::join(host, &path).await?);
    }
    let readers = spawn_readers(
        subscribers,
        steps as usize,
        |event| matches!(event, BrowserEvent::Json(v) if v["type"] == "chat:message"),
    );
    let started = Instant::now();
    for i in 0..steps {
        let frame = json!({
            "seq": i + 2,
            "author": null,
            "kind": "planner",
            "text": step_text(round, i),
            "at": 1_765_000_000_000u64 + i,
            "type": "chat:message",
        });
        publisher.send_json(&frame).await?;
    }
    let (subscribers, last) = tokio::time::timeout(ROUND_TIMEOUT, gather(readers))
        .await
        .map_err(|_| anyhow!("the relay's round {round} did not finish in time"))??;
    drop(subscribers);
    let _ = publisher.close().await;
    Ok(last.saturating_duration_since(started))
}

// ---------------------------------------------------------------------------------------------
// Live edits

/// The frame that fills the document with `initial` characters (none for 0), then `count`
/// y-protocols sync `update` frames from the same Yjs client (id `client`), each inserting one
/// character at the end.
fn single_character_updates(
    client: u64,
    count: u64,
    initial: u64,
) -> (Option<Vec<u8>>, Vec<Vec<u8>>) {
    use yrs::updates::encoder::Encode;
    let frame = |update: Vec<u8>| {
        yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update)).encode_v1()
    };
    let doc = chopin_document::ydoc::empty_doc(client);
    // Lines of 79 characters and a newline, as prose would come.
    let mut text: String = (0..initial)
        .map(|i| if i % 80 == 79 { '\n' } else { 'a' })
        .collect();
    let prefix = (initial > 0).then(|| frame(chopin_document::ydoc::replace_source(&doc, &text)));
    let edits = (0..count)
        .map(|_| {
            text.push('x');
            frame(chopin_document::ydoc::replace_source(&doc, &text))
        })
        .collect();
    (prefix, edits)
}

/// How long the server (or the relay) is given to take the prefix before listeners join.
const PREFIX_SETTLE: Duration = Duration::from_millis(500);

/// The Yjs update a sync `update` frame (`[0 = sync, 2 = update, …]`) carries.
fn update_of(frame: &[u8]) -> Option<Vec<u8>> {
    use yrs::updates::decoder::Decode;
    match yrs::sync::Message::decode_v1(frame) {
        Ok(yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update))) => Some(update),
        _ => None,
    }
}

/// Each listening socket read in its own task, applying every relayed update to its own copy of
/// the document (seeded with `prefix`, which listeners join after), until the text is
/// `characters` long: the server may merge several updates into one frame, so updates are
/// counted by what they did, not by frames. Each task gives back its socket and when it read the
/// last update.
fn spawn_text_readers(
    sockets: Vec<BrowserSocket>,
    prefix: Option<&[u8]>,
    characters: u32,
) -> Vec<JoinHandle<Result<(BrowserSocket, Instant)>>> {
    let seed = prefix.and_then(update_of);
    sockets
        .into_iter()
        .enumerate()
        .map(|(n, mut socket)| {
            let seed = seed.clone();
            tokio::spawn(async move {
                use yrs::updates::decoder::Decode;
                use yrs::{Text, Transact};
                let doc = chopin_document::ydoc::empty_doc(1 + n as u64);
                let text = doc.get_or_insert_text(chopin_document::ydoc::SOURCE_TEXT);
                let apply = |update: &[u8]| -> Result<u32> {
                    let mut txn = doc.transact_mut();
                    txn.apply_update(yrs::Update::decode_v1(update)?)?;
                    Ok(text.len(&txn))
                };
                let mut length = match &seed {
                    Some(seed) => apply(seed)?,
                    None => 0,
                };
                while length < characters {
                    let event = socket.recv_json().await.map_err(|e| {
                        anyhow!("socket {n} at {length} of {characters} characters: {e}")
                    })?;
                    match &event {
                        BrowserEvent::Closed { code, reason } => bail!(
                            "socket {n} was closed at {length} of {characters} characters: {code} {reason:?}"
                        ),
                        BrowserEvent::Binary(bytes) => {
                            if let Some(update) = update_of(bytes) {
                                length = apply(&update)?;
                            }
                        }
                        BrowserEvent::Json(_) => {}
                    }
                }
                Ok((socket, Instant::now()))
            })
        })
        .collect()
}

pub async fn live_edits(bin: &Path, args: EditsArgs) -> Result<()> {
    println!(
        "chopin-bench-sockets live-edits: one writer, {} listening socket(s), {} single-character Yjs updates on a document of {} characters, {} round(s); {} cores",
        args.listeners,
        args.updates,
        args.initial_chars,
        args.rounds,
        cores()
    );
    let mut relay = start_relay().await?;
    let fixture = Fixture::start(bin).await?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let (prefix, frames) =
            single_character_updates(10_000 + round, args.updates, args.initial_chars);
        let took = chopin_edits(
            &fixture,
            prefix.as_deref(),
            args.initial_chars as usize,
            &frames,
            args.listeners as usize,
        )
        .await?;
        ours.push(args.updates as f64 / took.as_secs_f64());
        let took = relay_edits(
            &relay,
            round,
            prefix.as_deref(),
            args.initial_chars as usize,
            &frames,
            args.listeners as usize,
        )
        .await?;
        theirs.push(args.updates as f64 / took.as_secs_f64());
    }
    if let Some(status) = relay.exited() {
        bail!(
            "the relay exited ({status}); its log ends:\n{}",
            relay.log_tail(20)
        );
    }
    let stopped = fixture.server.stop().await?;
    if stopped.killed {
        bail!("the server did not stop on SIGTERM");
    }
    relay.stop().await?;
    let (ours_m, theirs_m) = (median(ours.clone()), median(theirs.clone()));
    let ratio = ours_m / theirs_m;
    println!(
        "  chopin {ours_m:.0} updates/s to every listener ({}); relay {theirs_m:.0} updates/s ({}); ratio {ratio:.2}",
        rates_line(&ours),
        rates_line(&theirs),
    );
    println!();
    println!(
        "| listeners | updates | initial characters | chopin updates/s | raw relay updates/s | ratio | goal ≥ {GOAL} |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {ours_m:.0} | {theirs_m:.0} | {ratio:.2} | {} |",
        args.listeners,
        args.updates,
        args.initial_chars,
        verdict(ratio)
    );
    Ok(())
}

/// Opens a y-websocket socket on `document`, read up to the server's sync step 1.
async fn open_yjs(fixture: &Fixture, document: &str) -> Result<BrowserSocket> {
    yjs_socket(
        fixture.server.host(),
        document,
        &fixture.cookie,
        &fixture.origin,
    )
    .await
}

/// [`open_yjs`] on the server at `host`, signed in with `cookie`, from `origin`.
pub(crate) async fn yjs_socket(
    host: &str,
    document: &str,
    cookie: &str,
    origin: &str,
) -> Result<BrowserSocket> {
    let stream = dial(host).await.map_err(|e| anyhow!("a Yjs socket {e}"))?;
    let mut socket = BrowserSocket::connect(
        stream,
        host,
        &format!("/api/yjs/{document}"),
        Some(cookie),
        Some(origin),
    )
    .await
    .map_err(|e| anyhow!("a Yjs socket was refused at the upgrade: {e}"))?;
    loop {
        match socket.recv_json().await? {
            BrowserEvent::Binary(bytes) if bytes.starts_with(&[0, 0]) => return Ok(socket),
            BrowserEvent::Closed { code, reason } => {
                bail!("a Yjs socket was closed in its greeting: {code} {reason:?}")
            }
            _ => {}
        }
    }
}

/// One round on a fresh document: the time from the first update sent to the last listener's
/// last update read.
async fn chopin_edits(
    fixture: &Fixture,
    prefix: Option<&[u8]>,
    initial: usize,
    frames: &[Vec<u8>],
    listeners: usize,
) -> Result<Duration> {
    let document = fixture
        .create_documents(1)
        .await?
        .pop()
        .ok_or_else(|| anyhow!("no document was created"))?;
    let mut writer = open_yjs(fixture, &document).await?;
    if let Some(prefix) = prefix {
        writer.send_binary(prefix.to_vec()).await?;
        tokio::time::sleep(PREFIX_SETTLE).await;
    }
    let mut sockets = Vec::with_capacity(listeners);
    for _ in 0..listeners {
        sockets.push(open_yjs(fixture, &document).await?);
    }
    let characters = (initial + frames.len()) as u32;
    let readers = spawn_text_readers(sockets, prefix, characters);
    let started = Instant::now();
    for frame in frames {
        writer.send_binary(frame.clone()).await?;
    }
    let (_, last) = tokio::time::timeout(ROUND_TIMEOUT, gather(readers))
        .await
        .map_err(|_| {
            anyhow!(
                "the live edits did not all arrive within {} s; the server's log ends:\n{}",
                ROUND_TIMEOUT.as_secs(),
                fixture.server.log_tail(20)
            )
        })??;
    let _ = writer.close().await;
    Ok(last.saturating_duration_since(started))
}

/// The same frames through the relay.
async fn relay_edits(
    relay: &Spawned,
    round: u64,
    prefix: Option<&[u8]>,
    initial: usize,
    frames: &[Vec<u8>],
    listeners: usize,
) -> Result<Duration> {
    let host = relay.host();
    let path = format!("/edits/{round}");
    let mut writer = relay::join(host, &path).await?;
    if let Some(prefix) = prefix {
        writer.send_binary(prefix.to_vec()).await?;
        tokio::time::sleep(PREFIX_SETTLE).await;
    }
    let mut sockets = Vec::with_capacity(listeners);
    for _ in 0..listeners {
        sockets.push(relay::join(host, &path).await?);
    }
    let characters = (initial + frames.len()) as u32;
    let readers = spawn_text_readers(sockets, prefix, characters);
    let started = Instant::now();
    for frame in frames {
        writer.send_binary(frame.clone()).await?;
    }
    let (_, last) = tokio::time::timeout(ROUND_TIMEOUT, gather(readers))
        .await
        .map_err(|_| anyhow!("the relay's live edits did not all arrive in time"))??;
    let _ = writer.close().await;
    Ok(last.saturating_duration_since(started))
}
