//! One live copy per document, end to end: the server keeps at most one in-memory copy of a
//! document, shared by everyone using it, and unloads it only once nobody has used it for
//! `IDLE_UNLOAD` (30 s) — so no edit it accepted is ever lost, neither to a copy that was
//! unloaded under a user nor to a checkpoint that dropped journal entries it did not hold.
//!
//! Each seed races the unload instant of the cast's document (30 s after its last user, the
//! browser that asked for a Planner turn, left): writers' room sockets join, type a word of their
//! own and leave; page reads (`GET /api/documents/{id}/source`) come with no socket open; the
//! Planner turn's `read_plan` and `edit_plan` (adding the turn's word) run — all drawn from the
//! seed within about ±150 ms of that instant, over turmoil's seeded latencies, with the store's
//! content calls held a few simulated milliseconds so loads, appends and checkpoints really
//! overlap. Then no update is lost: every word the server accepted (a writer heard no refusal
//! and no close before the answer to the request it sent after its update; the turn's
//! `edit_plan` said it applied) is in every read made after it was accepted, in the live copy
//! once everyone is gone, in the copy loaded again from the store after the idle unload, and in
//! the copy a freshly restarted server rebuilds from the journal and checkpoint. A seed replays
//! to the same trace hash.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use chopin_protocol::agent::TurnStatus;
use chopin_server::content::IDLE_UNLOAD;
use chopin_server::runtime::connector;
use chopin_server::runtime::lease::WRITER_LEASE_TTL_MS;
use chopin_server::store::instrumented::Hold;
use chopin_server::store::prelude::*;
use chopin_sim::actors::typed;
use chopin_sim::cast::{block_on, cast_with, Cast};
use chopin_sim::{
    AgentEvent, Browser, HoldStoreCalls, Step, TurmoilConnector, TurnScript, World, WorldOptions,
    SERVER_ORIGIN,
};
use serde_json::{json, Value};
use uuid::Uuid;

/// The seeds every run plays.
const SEEDS: std::ops::Range<u64> = 0..40;
const IDLE_UNLOAD_MS: u64 = IDLE_UNLOAD.as_millis() as u64;
/// Writers racing the unload, besides the browser that starts the turn.
const WRITERS: usize = 5;
/// Page reads racing the unload.
const READS: usize = 3;
/// How long the turn's script waits after `started` before its `read_plan`: past the idle
/// unload of the document its starter leaves about 2 s after the turn began.
const TURN_SLEEP_MS: u64 = IDLE_UNLOAD_MS + 2_000;
/// The most simulated time one step of the scenario may take.
const STEP_MS: u64 = 10_000;
/// The store's content calls, each held up to this many simulated ms (drawn per call), so that
/// a join can land while a load, an append or an unload's checkpoint is under way.
const HOLDS_MS: [(&str, u64); 4] = [
    ("document_content", 10),
    ("append_update", 3),
    ("commit_plan_edit", 3),
    ("write_checkpoint", 20),
];

/// splitmix64: the scenario's draws from its seed.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// A draw from `lo..=hi`.
    fn within(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Holds each content store call for a time drawn from the seed in call order (which the seed
/// fixes too), at most its bound in [`HOLDS_MS`]; counts the loads (`document_content`) in
/// `loads`.
fn content_delays(seed: u64, loads: Arc<AtomicU64>) -> HoldStoreCalls {
    let state = Arc::new(AtomicU64::new(seed ^ 0x0c0c_0c0c));
    Arc::new(move |_incarnation, method, _write| {
        if method == "document_content" {
            loads.fetch_add(1, Ordering::SeqCst);
        }
        let (_, most) = HOLDS_MS.iter().find(|(m, _)| *m == method)?;
        let mut s = state.load(Ordering::SeqCst);
        let ms = splitmix(&mut s) % (most + 1);
        state.store(s, Ordering::SeqCst);
        (ms > 0).then(|| Box::pin(tokio::time::sleep(Duration::from_millis(ms))) as Hold)
    })
}

/// The answer to a `GET /source`: its status and JSON body, or why there was none.
type Answer = Arc<Mutex<Option<Result<(u16, Value), String>>>>;

/// Starts `GET /api/documents/{doc}/source` with `cookie`, as a page reads it with no socket
/// open, from a client host of its own; it is answered as the world advances.
fn start_read(world: &mut World, host: &str, cookie: &str, doc: Uuid) -> Answer {
    let answer = Answer::default();
    let (out, cookie) = (answer.clone(), cookie.to_owned());
    world.spawn(host, async move {
        let request = http::Request::get(format!("{SERVER_ORIGIN}/api/documents/{doc}/source"))
            .header(http::header::COOKIE, cookie)
            .body(Bytes::new())?;
        let result = match connector::send(&TurmoilConnector, request).await {
            Ok(r) => Ok((
                r.status.as_u16(),
                serde_json::from_slice(&r.body).unwrap_or(Value::Null),
            )),
            Err(e) => Err(e.to_string()),
        };
        *out.lock().unwrap() = Some(result);
        Ok(())
    });
    answer
}

/// The source a read answered, or what went wrong.
fn source_of(answer: &Answer) -> Result<String, String> {
    match answer.lock().unwrap().clone() {
        Some(Ok((200, body))) => body["source"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no source in {body}")),
        Some(Ok((status, body))) => Err(format!("answered {status} {body}")),
        Some(Err(e)) => Err(e),
        None => Err("no answer yet".to_owned()),
    }
}

/// Reads the source now and waits for the answer.
fn read_now(world: &mut World, host: &str, cookie: &str, doc: Uuid) -> Result<String, String> {
    let answer = start_read(world, host, cookie, doc);
    let a = answer.clone();
    world
        .advance_until(STEP_MS, host, move |_| a.lock().unwrap().is_some())
        .map_err(|e| e.to_string())?;
    source_of(&answer)
}

/// Every word of `words` missing from `source`.
fn missing<'w>(words: impl IntoIterator<Item = &'w String>, source: &str) -> Vec<String> {
    words
        .into_iter()
        .filter(|w| !source.contains(w.as_str()))
        .cloned()
        .collect()
}

/// A browser that joins the room at `join_at`, waits `hold_ms` after the room's first message,
/// sends its word as a Yjs update followed by a `chat:history` request, and leaves once that is
/// answered.
struct Writer {
    name: String,
    cookie: String,
    word: String,
    client: u64,
    join_at: u64,
    hold_ms: u64,
    browser: Option<Browser>,
    sent: bool,
    /// Whether the server took the update: the history came with no `error` and no close before.
    accepted: Option<bool>,
    done: bool,
}

impl Writer {
    /// Does whatever is due at `now`; a word the server took is added to `accepted`.
    fn step(&mut self, world: &mut World, doc: Uuid, now: u64, accepted: &mut Vec<String>) {
        if self.done {
            return;
        }
        let Some(browser) = self.browser.clone() else {
            if now >= self.join_at {
                self.browser = Some(world.browser(&self.name, &self.cookie, &doc.to_string()));
            }
            return;
        };
        let heard = browser.heard();
        if self.accepted.is_none() && self.sent {
            if let Some(at) = heard
                .iter()
                .position(|h| h.message["type"] == "chat:history")
            {
                let refused = heard[..at].iter().any(|h| h.message["type"] == "error");
                self.accepted = Some(!refused);
                if !refused {
                    accepted.push(self.word.clone());
                }
                browser.leave();
            }
        }
        if browser.closed().is_some() {
            self.accepted.get_or_insert(false);
            self.done = true;
            return;
        }
        if !self.sent && heard.first().is_some_and(|h| now >= h.at_ms + self.hold_ms) {
            browser.send_binary(typed(self.client, &format!("{}\n", self.word)));
            browser.send_json(json!({ "type": "chat:history", "limit": 1 }));
            self.sent = true;
        }
    }
}

/// A page read at `at`, and the words accepted before it was sent.
struct Read {
    host: String,
    at: u64,
    before: Vec<String>,
    answer: Option<Answer>,
}

/// How a seed's race went, seen from the registry and the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Race {
    /// A user came before the unload instant: no checkpoint, no load.
    UserFirst,
    /// A user came while the unload was writing its checkpoint: it stayed loaded.
    DuringUnload,
    /// The document was unloaded, then loaded again for the users who came after.
    UnloadFirst,
}

/// What one seed showed.
struct Outcome {
    hash: String,
    race: Race,
    words: usize,
}

fn until(
    world: &mut World,
    what: &str,
    done: impl Fn(&World) -> bool + 'static,
) -> Result<(), String> {
    world
        .advance_until(STEP_MS, what, done)
        .map_err(|e| e.to_string())
}

fn run(seed: u64) -> Result<Outcome, String> {
    let mut draws = Draws(seed);
    let loads = Arc::new(AtomicU64::new(0));
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = cast_with(
        seed,
        WorldOptions {
            hold_store_calls: Some(content_delays(seed, loads.clone())),
            ..WorldOptions::default()
        },
    );
    let revision = block_on(world.store().document(doc))
        .map_err(|e| e.to_string())?
        .ok_or("the cast's document")?
        .plan_revision;
    let app = world.server_app().ok_or("the server is up")?;

    // mona's Planner, whose turn reads the document and adds its word across the unload instant.
    let turn_word = format!("turn-{seed}.");
    let agent = world.agent("mona-agent", &mona);
    let a = agent.clone();
    until(&mut world, "the agent connected", move |_| {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    })?;
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(&mut world, "the attach answered", move |_| {
        a.answer().is_some()
    })?;
    if !matches!(agent.answer(), Some(Ok(_))) {
        return Err(format!("attach: {:?}", agent.answer()));
    }
    let gap = draws.within(0, 80) as u64;
    agent.script(
        TurnScript::new()
            .started()
            .sleep(TURN_SLEEP_MS)
            .host_tool_call("read_plan", json!({}))
            .sleep(gap)
            .host_tool_call(
                "edit_plan",
                json!({
                    "revision": revision,
                    "ops": [{ "op": "insert", "after": null, "content": turn_word }],
                }),
            )
            .end(TurnStatus::Completed),
    );

    // mona, in the room, types a word and asks for the turn; she leaves once it has started, so
    // that the unload instant falls `turn_offset` ms after the turn's `read_plan` is sent.
    let mut accepted = Vec::new();
    let starter = world.browser("starter", &mona_cookie, &doc.to_string());
    let s = starter.clone();
    until(&mut world, "the starter joined", move |_| {
        !s.heard().is_empty()
    })?;
    let starter_word = format!("starter-{seed}.");
    starter.send_binary(typed(1_000, &format!("{starter_word}\n")));
    starter.send_chat("go", "@chopin add your word");
    let (s, a) = (starter.clone(), agent.clone());
    until(&mut world, "the turn started", move |_| {
        !s.replies("go").is_empty() && a.sent().iter().any(|(_, kind, _)| kind == "started")
    })?;
    let ack = starter.replies("go")[0].message.clone();
    if ack["type"] != "chat:ack" || ack["planner"] != "started" {
        return Err(format!("the turn's request: {ack}"));
    }
    if starter.heard().iter().any(|h| h.message["type"] == "error") {
        return Err(format!("the starter was refused: {:?}", starter.heard()));
    }
    accepted.push(starter_word);
    let started_at = agent
        .sent()
        .iter()
        .find(|(_, kind, _)| kind == "started")
        .map(|(at, _, _)| *at)
        .ok_or("started")?;
    let turn_offset = draws.within(-100, 100);
    let leave_at = (started_at + TURN_SLEEP_MS - IDLE_UNLOAD_MS)
        .checked_add_signed(turn_offset)
        .ok_or("leave time")?;
    if world.now_ms() > leave_at {
        return Err(format!(
            "the turn took until {} ms to start",
            world.now_ms()
        ));
    }
    world
        .advance(leave_at - world.now_ms())
        .map_err(|e| e.to_string())?;
    starter.leave();
    let s = starter.clone();
    until(&mut world, "the starter left", move |_| {
        s.closed().is_some()
    })?;
    // The server let go of the document one latency before the close reached the starter.
    let left_at = starter.closed().map(|(at, _, _)| at).unwrap_or_default();
    let unload_at = left_at + IDLE_UNLOAD_MS;

    // Joins and reads come within 80 ms after `center`: a join reaches the server about three
    // latencies after it is started (connect, then the upgrade), so the first of them lands
    // before the unload instant in some seeds and after it in others.
    let center = draws.within(-120, 0);
    let mut writers: Vec<Writer> = (0..WRITERS)
        .map(|i| Writer {
            name: format!("writer-{i}"),
            cookie: (if i % 2 == 0 {
                &lisa_cookie
            } else {
                &mona_cookie
            })
            .clone(),
            word: format!("writer-{seed}-{i}."),
            client: 2_000 + i as u64,
            join_at: unload_at.saturating_add_signed(center + draws.within(0, 80)),
            hold_ms: draws.within(0, 100) as u64,
            browser: None,
            sent: false,
            accepted: None,
            done: false,
        })
        .collect();
    let mut reads: Vec<Read> = (0..READS)
        .map(|i| Read {
            host: format!("reader-{i}"),
            at: unload_at.saturating_add_signed(center + draws.within(0, 80)),
            before: Vec::new(),
            answer: None,
        })
        .collect();

    // The race, tick by tick: what is due is done, and the registry is watched.
    let checkpoints_before = checkpoints(&world);
    let loads_before = loads.load(Ordering::SeqCst);
    let mut turn_applied = None;
    let deadline = unload_at + STEP_MS;
    loop {
        let now = world.now_ms();
        for writer in &mut writers {
            writer.step(&mut world, doc, now, &mut accepted);
        }
        if turn_applied.is_none() {
            if let Some((_, detail)) = agent.frames_of("host-tool-result").get(1) {
                // Only an applied edit says `base_revision`.
                let applied = detail.starts_with("call-2 isError=false ")
                    && detail.contains("\"base_revision\"");
                turn_applied = Some(applied.then_some(detail.clone()).ok_or(detail.clone()));
                if applied {
                    accepted.push(turn_word.clone());
                }
            }
        }
        for read in &mut reads {
            if read.answer.is_none() && now >= read.at {
                read.before = accepted.clone();
                read.answer = Some(start_read(&mut world, &read.host, &lisa_cookie, doc));
            }
        }
        let reads_done = reads.iter().all(|r| {
            r.answer
                .as_ref()
                .is_some_and(|a| a.lock().unwrap().is_some())
        });
        if writers.iter().all(|w| w.done)
            && reads_done
            && turn_applied.is_some()
            && !app.turns.is_running(doc)
        {
            break;
        }
        if now >= deadline {
            return Err(format!(
                "the race did not end by {deadline} ms: writers done {:?}, reads done {reads_done}, turn {turn_applied:?}",
                writers.iter().map(|w| w.done).collect::<Vec<_>>()
            ));
        }
        world.advance(1).map_err(|e| e.to_string())?;
    }
    let race = match (
        loads.load(Ordering::SeqCst) > loads_before,
        checkpoints(&world) > checkpoints_before,
    ) {
        (true, _) => Race::UnloadFirst,
        (false, true) => Race::DuringUnload,
        (false, false) => Race::UserFirst,
    };

    // Everything the server was sent, it took.
    let refused: Vec<&str> = writers
        .iter()
        .filter(|w| w.accepted != Some(true))
        .map(|w| w.name.as_str())
        .collect();
    if !refused.is_empty() {
        return Err(format!("updates refused: {refused:?}"));
    }
    if let Some(Err(detail)) = &turn_applied {
        return Err(format!("the turn's edit_plan did not apply: {detail}"));
    }

    // Every read holds every word accepted before it was sent.
    for read in &reads {
        let source = source_of(read.answer.as_ref().ok_or("a read")?)
            .map_err(|e| format!("{} at {} ms: {e}", read.host, read.at))?;
        let lost = missing(&read.before, &source);
        if !lost.is_empty() {
            return Err(format!(
                "{} at {} ms ({race:?}) lost {lost:?}: {source:?}",
                read.host, read.at
            ));
        }
    }
    // Once everyone is gone: the live copy, the copy loaded again after the idle unload, and the
    // copy a restarted server rebuilds from the store.
    let live = read_now(&mut world, "reader-live", &mona_cookie, doc)?;
    // The agent goes too: a crash drops the sockets still open in tokio's task order, which
    // follows process-wide task ids, so a second run in one process would see them go in
    // another order (and so with other latencies).
    agent.close();
    world
        .advance(IDLE_UNLOAD_MS + 1_000)
        .map_err(|e| e.to_string())?;
    if app.open.is_open(doc) {
        return Err("still loaded after the idle time".to_owned());
    }
    let reloaded_source = read_now(&mut world, "reader-reloaded", &mona_cookie, doc)?;
    // A crash: the new incarnation takes the writer lease once the old one's has expired.
    world
        .apply(&Step::RestartServer)
        .map_err(|e| e.to_string())?;
    world
        .apply(&Step::AwaitServer {
            within_ms: WRITER_LEASE_TTL_MS as u64 + STEP_MS,
        })
        .map_err(|e| e.to_string())?;
    let restarted = read_now(&mut world, "reader-restarted", &mona_cookie, doc)?;
    for (copy, source) in [
        ("live", live),
        ("reloaded", reloaded_source),
        ("restarted", restarted),
    ] {
        let lost = missing(&accepted, &source);
        if !lost.is_empty() {
            return Err(format!(
                "the {copy} copy ({race:?}) lost {lost:?}: {source:?}"
            ));
        }
    }
    Ok(Outcome {
        hash: world.trace().hash(),
        race,
        words: accepted.len(),
    })
}

/// Checkpoints written so far.
fn checkpoints(world: &World) -> usize {
    world
        .store_writes()
        .iter()
        .filter(|w| w.method == "write_checkpoint" && w.ok)
        .count()
}

#[test]
fn one_live_copy_unload_racing_joins_turns_and_reads_loses_no_update() {
    let mut failed = Vec::new();
    let mut races = Vec::new();
    let mut words = 0;
    for seed in SEEDS {
        match run(seed) {
            Ok(outcome) => {
                races.push(outcome.race);
                words += outcome.words;
                if seed == SEEDS.start {
                    let again = run(seed).map(|o| o.hash);
                    assert_eq!(
                        again.as_ref(),
                        Ok(&outcome.hash),
                        "seed {seed} replays to the same trace"
                    );
                }
            }
            Err(why) => failed.push(format!("seed {seed}: {why}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} seeds lost an update or went wrong:\n{}",
        failed.len(),
        SEEDS.count(),
        failed.join("\n")
    );
    // The race is real: in some seeds a user came first, in some the unload did.
    let count = |race| races.iter().filter(|r| **r == race).count();
    eprintln!(
        "{words} words kept; user first {}, during the unload {}, unload first {}",
        count(Race::UserFirst),
        count(Race::DuringUnload),
        count(Race::UnloadFirst)
    );
    assert!(count(Race::UserFirst) > 0, "{races:?}");
    assert!(count(Race::UnloadFirst) > 0, "{races:?}");
}
