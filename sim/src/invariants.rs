//! What must hold after every step of every run, whatever faults it met.
//!
//! Owns: [`Invariants`], checked by a scenario's play after each step, from what the world shows
//! from outside the server — the trace of its Planner events, the store, its presence, and what
//! the actors heard. Does not own: playing steps (the scenario module, which checks these after
//! each step) or choosing faults (the explore module).
//!
//! The rules:
//! - **one holder**: while the server shows a document's Planner attached to a login, storage
//!   names that login as its holder;
//! - **generations only grow**: the stored ownership generation never goes down, across crashes;
//! - **no old release**: no release is made under a generation older than the newest attach;
//! - **grace honoured**: an attach of the grace period's own account that reached the server
//!   before the period ended (and before anything else released it) binds, if it binds at all,
//!   under the period's generation;
//! - **acks are kept**: every message acknowledged to a browser is in storage under its `seq`;
//! - **refusals save nothing**: a refused message is not in storage (unless the same words were
//!   acknowledged in another send);
//! - **no turn replayed**: no turn id reaches agent clients twice;
//! - **tools run under their owner**: a host tool runs (its rechecks passed) only while the
//!   turn's owner still holds the Planner at the turn's generation;
//! - **relayed edits are durable**: text one browser received from another is in storage;
//! - **at most 20 sends at once**: the server never has more Chat sends under way at once;
//! - **bytes bounded**: a writer's update is journalled and relayed as at most twice its own size
//!   (plus 256 bytes) — never as pending structs or a whole delete set again;
//! - **frames fit**: the server never makes a frame larger than a socket sends;
//! - **a fresh client can open**: every open document encodes whole, within one frame, and what
//!   a client with nothing is sent it can apply completely (nothing left pending);
//! - **no wait without a deadline**: a link waiting for `resume` has a deadline, and is done
//!   waiting within a second of it;
//! - **one turn at a time**: a document's Planner turn starts only once the one before it ended;
//! - **no model call replayed**: under the in-server harness, a model call is sent again with
//!   the same conversation only after the provider refused it outright (an error status or no
//!   answer) or answered it to its end — never after an answer it began was cut off (SES-27,
//!   OWN-18); a whole answer that failed its schema may be asked again in a fresh session, as
//!   JOB-01's failure budget allows;
//! - the implementation lifecycle's (see [`Invariants::lifecycle`]): one live run per graph
//!   version, a locked version has its run, counters never go back, claims are kept;
//! - **nothing dangles**: under the in-server harness, once no turn has run for a second, no
//!   question is left waiting (a failed, stopped or cut turn withdraws what it asked).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use chopin_server::observe::PlannerEvent;
use chopin_server::planner::PresenceState;
use chopin_server::store::prelude::*;
use uuid::Uuid;

use crate::actors::{Agent, Browser};
use crate::cast::block_on;
use crate::world::{Event, World};

/// Sends made by a scenario: request id → (browser, text).
pub type Sends = BTreeMap<String, (String, String)>;

/// Text typed by a scenario's browsers: (browser, text), in order.
pub type Typed = Vec<(String, String)>;

/// Run ids MCP claims were answered with, and their documents, in answer order; filled by the
/// scenario's MCP clients as answers arrive.
pub type Claimed = std::sync::Arc<std::sync::Mutex<Vec<(String, Uuid)>>>;

/// The state the invariants carry from step to step.
#[derive(Debug, Default)]
pub struct Invariants {
    highest_generation: BTreeMap<Uuid, i64>,
    planner: PlannerSeen,
    /// (document, graph version) → the highest (graph revision, plan revision) seen.
    graph_counters: BTreeMap<(Uuid, i64), (i64, i64)>,
    /// Run id → the highest revision seen.
    run_revisions: BTreeMap<String, i64>,
}

impl Invariants {
    /// The implementation lifecycle's rules, from storage and the claims' answers:
    /// - **one live run per version**: at most one run that has not ended per graph version;
    /// - **a locked version has its run**: a locked version names exactly one run, which is
    ///   live and on that version, and every live run's version is locked by it;
    /// - **counters never go back**: no version's revision or plan revision goes down, no
    ///   version disappears, and no run's revision goes down;
    /// - **claims are kept**: every run id a claim was answered with is in storage, on the
    ///   document it was claimed on.
    pub fn lifecycle(
        &mut self,
        world: &World,
        docs: &[Uuid],
        claimed: &Claimed,
    ) -> Result<(), String> {
        let read =
            |e: chopin_server::store::StoreError| format!("the store could not be read: {e}");
        for &doc in docs {
            let versions = block_on(world.store().graph_versions(doc)).map_err(read)?;
            let runs = block_on(world.store().implementation_runs(doc)).map_err(read)?;
            let mut live: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
            for run in runs.iter().filter(|r| r.ended.is_none()) {
                live.entry(run.graph_version).or_default().push(&run.run_id);
            }
            for (version, ids) in &live {
                if ids.len() > 1 {
                    return Err(format!("one live run per version: version {version} of {doc} has live runs {ids:?}"));
                }
            }
            for v in &versions {
                let number = v.counters.graph_version;
                let holder = live.get(&number).and_then(|ids| ids.first().copied());
                match (
                    v.state == chopin_server::store::GraphState::Locked,
                    v.run_id.as_deref(),
                    holder,
                ) {
                    (true, Some(id), Some(run)) if id == run => {}
                    (false, None, None) => {}
                    (locked, id, run) => {
                        return Err(format!("a locked version has its run: version {number} of {doc} is {} naming {id:?}, and its live run is {run:?}", if locked { "locked" } else { "not locked" }));
                    }
                }
                let seen = self.graph_counters.entry((doc, number)).or_insert((0, 0));
                let now = (v.counters.graph_revision, v.counters.plan_revision);
                if now.0 < seen.0 || now.1 < seen.1 {
                    return Err(format!("counters never go back: version {number} of {doc} went from (revision, plan revision) {seen:?} to {now:?}"));
                }
                *seen = now;
            }
            let known = self
                .graph_counters
                .keys()
                .filter(|(d, _)| *d == doc)
                .count();
            if versions.len() < known {
                return Err(format!(
                    "counters never go back: {doc} had {known} graph versions and now has {}",
                    versions.len()
                ));
            }
            for run in &runs {
                let seen = self.run_revisions.entry(run.run_id.clone()).or_insert(0);
                if run.revision < *seen {
                    return Err(format!(
                        "counters never go back: run {} went from revision {seen} to {}",
                        run.run_id, run.revision
                    ));
                }
                *seen = run.revision;
            }
        }
        let answered = claimed.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (run, doc) in answered {
            match block_on(world.store().implementation_run(&run)).map_err(read)? {
                Some(stored) if stored.document_id == doc => {}
                other => {
                    return Err(format!("claims are kept: a claim of {doc} was answered with run {run}, but storage has {:?}", other.map(|r| r.document_id)));
                }
            }
        }
        Ok(())
    }

    /// Checks every rule now; `Err` names the rule broken and how. `docs` are the documents
    /// the scenario uses; `rooms`, the document each browser's room is on.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &mut self,
        world: &World,
        docs: &[Uuid],
        rooms: &BTreeMap<String, Uuid>,
        agents: &BTreeMap<String, Agent>,
        browsers: &BTreeMap<String, Browser>,
        sends: &Sends,
        typed: &Typed,
        provider: Option<&chopin_fixtures::model_provider::FakeProvider>,
    ) -> Result<(), String> {
        let app = world.server_app();
        if let Some(provider) = provider {
            no_model_call_replayed(provider)?;
        }
        if let Some(app) = &app {
            let most = app.chat.most_processing_at_once();
            if most > chopin_server::chat::SENDS_IN_FLIGHT_MAX {
                return Err(format!(
                    "at most {} sends at once: {most} Chat sends were under way at once",
                    chopin_server::chat::SENDS_IN_FLIGHT_MAX
                ));
            }
        }
        for &doc in docs {
            let ownership = block_on(world.store().ownership(doc))
                .map_err(|e| format!("the store could not be read: {e}"))?;
            // one holder
            if let Some(app) = &app {
                let presence = app.planners.presence(doc);
                if presence.state == PresenceState::Attached {
                    let stored = ownership.holder.as_ref().map(|h| h.login.clone());
                    if stored != presence.login {
                        return Err(format!(
                            "one holder: the server shows the Planner of {doc} attached to {:?} but storage names {stored:?}",
                            presence.login
                        ));
                    }
                }
            }
            // generations only grow
            let highest = self.highest_generation.entry(doc).or_insert(0);
            if ownership.generation < *highest {
                return Err(format!(
                    "generations only grow: the stored generation of {doc} went from {highest} down to {}",
                    ownership.generation
                ));
            }
            *highest = ownership.generation;
        }
        if let Some(app) = &app {
            bytes_bounded(app)?;
            let too_large = app.metrics.frames_too_large();
            if too_large > 0 {
                return Err(format!(
                    "frames fit: the server made {too_large} frames larger than a socket sends"
                ));
            }
            for &doc in docs {
                fresh_client_opens(app, doc)?;
            }
        }
        self.planner.check(world)?;
        // After the trace's newest events are read: which turns run now.
        if let (Some(_), Some(app)) = (provider, &app) {
            self.planner.nothing_dangles(world, app)?;
        }
        chat(world, rooms, browsers, sends)?;
        relayed(world, rooms, browsers, typed)?;
        turns(agents)
    }
}

/// What the Planner-event rules remember of the trace read so far.
#[derive(Debug, Default)]
struct PlannerSeen {
    /// Trace events already read.
    read: usize,
    /// The newest generation attached, per document.
    newest: BTreeMap<Uuid, i64>,
    /// Who holds each document's Planner, at which generation.
    holder: BTreeMap<Uuid, (String, i64)>,
    grace: BTreeMap<Uuid, Grace>,
    /// An attach that arrived inside its own account's grace period: its generation is owed
    /// (generation, when it arrived, the period's end).
    owed: BTreeMap<(Uuid, String), (i64, u64, i64)>,
    /// Links waiting for `resume`, and until when (wall-clock ms).
    awaiting_resume: BTreeMap<(Uuid, String), i64>,
    /// Documents with a turn running, and since when (simulated ms).
    turns_running: BTreeMap<Uuid, u64>,
    /// When the last turn ended (simulated ms).
    last_turn_ended: u64,
}

#[derive(Debug)]
struct Grace {
    login: String,
    generation: i64,
    until_ms: i64,
}

impl PlannerSeen {
    /// The rules read from the server's Planner events, over the events recorded since the
    /// last check.
    fn check(&mut self, world: &World) -> Result<(), String> {
        world.with_events(self.read, |events| {
            self.read += events.len();
            events.iter().try_for_each(|e| self.event(e))
        })?;
        // no wait without a deadline: none is overdue by more than a second.
        let now = world.now_ms() as i64 + crate::clock::SIM_EPOCH_MS;
        if let Some(((doc, login), until)) = self
            .awaiting_resume
            .iter()
            .find(|(_, until)| now > **until + 1_000)
        {
            return Err(format!(
                "no wait without a deadline: {login}'s link on {doc} still waits for resume {} ms past its deadline",
                now - until
            ));
        }
        Ok(())
    }

    fn event(&mut self, e: &crate::world::TraceEvent) -> Result<(), String> {
        let PlannerSeen {
            newest,
            holder,
            grace,
            owed,
            awaiting_resume,
            turns_running,
            last_turn_ended,
            ..
        } = self;
        let Event::Planner(p) = &e.event else {
            return Ok(());
        };
        let p = p.clone();
        let now_wall = e.at_ms as i64 + crate::clock::SIM_EPOCH_MS;
        match p {
            PlannerEvent::Attached {
                document,
                login,
                generation,
            } => {
                if let Some((owed_generation, at, _)) = owed.remove(&(document, login.clone())) {
                    if generation != owed_generation {
                        return Err(format!(
                            "grace honoured: {login}'s attach reached the server at {at} ms, inside its grace period, but got generation {generation} instead of {owed_generation}"
                        ));
                    }
                }
                newest.insert(document, generation);
                holder.insert(document, (login, generation));
                grace.remove(&document);
            }
            PlannerEvent::GraceStarted {
                document,
                login,
                until_ms,
                ..
            } => {
                if let Some((_, generation)) = holder.get(&document) {
                    grace.insert(
                        document,
                        Grace {
                            login,
                            generation: *generation,
                            until_ms,
                        },
                    );
                }
            }
            PlannerEvent::AttachReceived { document, login } => {
                if let Some(g) = grace.get(&document) {
                    if g.login == login && now_wall < g.until_ms {
                        owed.insert((document, login), (g.generation, e.at_ms, g.until_ms));
                    }
                }
            }
            PlannerEvent::Released {
                document,
                generation,
            } => {
                if let Some(n) = newest.get(&document) {
                    if generation < *n {
                        return Err(format!(
                            "no old release: generation {generation} was released at {} ms after generation {n} attached",
                            e.at_ms
                        ));
                    }
                }
                // A release at the period's end leaves an attach that arrived in it owed its
                // generation (it is judged when it binds, or forgotten when it is refused); a
                // release before the end (a reset, a sign-out) decides the attach instead.
                owed.retain(|(d, _), (_, _, until)| *d != document || now_wall >= *until);
                grace.remove(&document);
                holder.remove(&document);
            }
            PlannerEvent::LoginEnded { login, .. } => {
                holder.retain(|_, (l, _)| *l != login);
            }
            PlannerEvent::HostTool {
                document,
                tool,
                login,
                generation,
                ran: true,
            } => {
                let owner = holder.get(&document);
                if owner != Some(&(login.clone(), generation)) {
                    return Err(format!(
                        "tools run under their owner: {tool} ran at {} ms for {login}'s turn at generation {generation}, when the Planner was {}",
                        e.at_ms,
                        match owner {
                            Some((l, g)) => format!("{l}'s at generation {g}"),
                            None => "nobody's".to_owned(),
                        }
                    ));
                }
            }
            PlannerEvent::AttachRefused {
                document: Some(document),
                login,
                ..
            } => {
                owed.remove(&(document, login));
            }
            PlannerEvent::ResumeAwaited {
                document,
                login,
                until_ms,
            } => match until_ms {
                Some(until) => {
                    awaiting_resume.insert((document, login), until);
                }
                None => {
                    return Err(format!(
                        "no wait without a deadline: {login}'s link on {document} waits for resume with no deadline, from {} ms",
                        e.at_ms
                    ))
                }
            },
            PlannerEvent::ResumeSettled {
                document, login, ..
            } => {
                awaiting_resume.remove(&(document, login));
            }
            PlannerEvent::Owned {
                document,
                login,
                generation,
            } => {
                newest.insert(document, generation);
                holder.insert(document, (login, generation));
            }
            PlannerEvent::TurnStarted { document, .. } => {
                if let Some(since) = turns_running.insert(document, e.at_ms) {
                    return Err(format!(
                        "one turn at a time: a turn started on {document} at {} ms while the one started at {since} ms ran",
                        e.at_ms
                    ));
                }
            }
            PlannerEvent::TurnEnded { document, .. } => {
                turns_running.remove(&document);
                *last_turn_ended = e.at_ms;
            }
            _ => {}
        }
        Ok(())
    }
}

impl PlannerSeen {
    /// nothing dangles: under the in-server harness no question waits once no turn has run for
    /// a second (its withdrawal is spawned as the turn ends).
    fn nothing_dangles(&self, world: &World, app: &chopin_server::App) -> Result<(), String> {
        if !self.turns_running.is_empty() || world.now_ms() < self.last_turn_ended + 1_000 {
            return Ok(());
        }
        match app.questions.waiting() {
            0 => Ok(()),
            n => Err(format!(
                "nothing dangles: no turn has run since {} ms, yet {n} question(s) still wait",
                self.last_turn_ended
            )),
        }
    }
}

/// no model call replayed: a call carrying the same conversation as an earlier one never
/// follows an earlier call whose answer began and was cut off (the stream not read to its end).
fn no_model_call_replayed(
    provider: &chopin_fixtures::model_provider::FakeProvider,
) -> Result<(), String> {
    let calls = provider.requests();
    for (j, later) in calls.iter().enumerate() {
        if let Some(i) = calls[..j].iter().position(|earlier| {
            earlier.body == later.body && earlier.status == 200 && !earlier.completed
        }) {
            return Err(format!(
                "no model call replayed: model call {} repeats call {} word for word, whose answer had begun and was cut off",
                j + 1,
                i + 1
            ));
        }
    }
    Ok(())
}

/// bytes bounded: no writer's update the server took was journalled and relayed as more than
/// twice its size plus 256 bytes.
fn bytes_bounded(app: &chopin_server::App) -> Result<(), String> {
    match app
        .open
        .accepted_updates()
        .into_iter()
        .find(|(sent, kept)| *kept > 2 * sent + 256)
    {
        Some((sent, kept)) => Err(format!(
            "bytes bounded: an update of {sent} bytes was journalled and relayed as {kept} bytes"
        )),
        None => Ok(()),
    }
}

/// a fresh client can open: `doc`, if open, encodes whole within one frame a socket sends, and
/// a client with nothing can apply all of it.
fn fresh_client_opens(app: &chopin_server::App, doc: Uuid) -> Result<(), String> {
    let Some(open) = app.open.peek(doc) else {
        return Ok(());
    };
    // A document an update holds now is looked at after a later step (the check must not wait
    // on the server's runtime, which only runs while the world advances).
    let Some(whole) = open.try_whole_state() else {
        return Ok(());
    };
    let Some(whole) = whole else {
        return Err(format!(
            "a fresh client can open: {doc} cannot be encoded for a client that joins"
        ));
    };
    let frame = chopin_server::content::sync_update_frame(&whole).len();
    if frame > chopin_server::transport::socket::OUTBOUND_FRAME_MAX_BYTES {
        return Err(format!(
            "a fresh client can open: {doc}'s sync step 2 is {frame} bytes, past the largest frame a socket sends"
        ));
    }
    let fresh = chopin_document::ydoc::empty_doc(2);
    let applied = chopin_server::content::guard::guarded(|| {
        use yrs::updates::decoder::Decode;
        use yrs::{ReadTxn, Transact};
        let update = yrs::Update::decode_v1(&whole).map_err(|e| e.to_string())?;
        let mut txn = fresh.transact_mut();
        txn.apply_update(update).map_err(|e| e.to_string())?;
        Ok::<bool, String>(txn.has_missing_updates())
    });
    match applied {
        Some(Ok(false)) => Ok(()),
        Some(Ok(true)) => Err(format!(
            "a fresh client can open: a client joining {doc} is sent changes it can never apply (left pending)"
        )),
        Some(Err(e)) => Err(format!(
            "a fresh client can open: a client joining {doc} cannot apply what it is sent: {e}"
        )),
        None => Err(format!(
            "a fresh client can open: applying {doc}'s state panics in yrs"
        )),
    }
}

/// The document whose Chat a room on `doc` speaks: a child's root's (ISO-25), else its own.
fn chat_document(world: &World, doc: Uuid) -> Uuid {
    block_on(world.store().document(doc))
        .ok()
        .flatten()
        .and_then(|d| d.parent_id)
        .unwrap_or(doc)
}

/// acks are kept; refusals save nothing.
fn chat(
    world: &World,
    rooms: &BTreeMap<String, Uuid>,
    browsers: &BTreeMap<String, Browser>,
    sends: &Sends,
) -> Result<(), String> {
    if sends.is_empty() {
        return Ok(());
    }
    let mut stored: BTreeMap<Uuid, Vec<_>> = BTreeMap::new();
    let mut acked_texts = BTreeSet::new();
    let mut refused = Vec::new();
    for (id, (name, text)) in sends {
        let (Some(browser), Some(room)) = (browsers.get(name), rooms.get(name)) else {
            continue;
        };
        let chat_doc = chat_document(world, *room);
        let entries = match stored.entry(chat_doc) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(
                block_on(world.store().transcript(chat_doc, 0, 10_000))
                    .map_err(|e| format!("the transcript could not be read: {e}"))?,
            ),
        };
        for reply in browser.replies(id) {
            match reply.message["type"].as_str() {
                Some("chat:ack") => {
                    let seq = reply.message["seq"].as_i64().unwrap_or(-1);
                    if !entries.iter().any(|e| e.seq == seq && e.body == *text) {
                        return Err(format!(
                            "acks are kept: {name}'s {id:?} was acknowledged as seq {seq}, which storage does not hold with its text"
                        ));
                    }
                    acked_texts.insert((chat_doc, text.clone()));
                }
                Some("chat:refused") => refused.push((name, id, text, chat_doc)),
                _ => {}
            }
        }
    }
    for (name, id, text, chat_doc) in refused {
        if !acked_texts.contains(&(chat_doc, text.clone()))
            && stored[&chat_doc].iter().any(|e| e.body == *text)
        {
            return Err(format!(
                "refusals save nothing: {name}'s {id:?} was refused, yet storage holds its text"
            ));
        }
    }
    Ok(())
}

/// relayed edits are durable: text one browser typed that another received from the server is
/// in storage (journal and checkpoint) already — what a crash now would keep.
fn relayed(
    world: &World,
    rooms: &BTreeMap<String, Uuid>,
    browsers: &BTreeMap<String, Browser>,
    typed: &Typed,
) -> Result<(), String> {
    if typed.is_empty() {
        return Ok(());
    }
    let mut stored: BTreeMap<Uuid, String> = BTreeMap::new();
    for (name, browser) in browsers {
        let Some(room) = rooms.get(name) else {
            continue;
        };
        let received = received_text(&browser.binary_heard());
        for (typist, text) in typed {
            if typist == name
                || rooms.get(typist) != Some(room)
                || !received.contains(text.as_str())
            {
                continue;
            }
            let held = match stored.entry(*room) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => new.insert(stored_text(world, *room)?),
            };
            if !held.contains(text.as_str()) {
                return Err(format!(
                    "relayed edits are durable: {name} received {typist}'s {text:?}, which storage does not hold"
                ));
            }
        }
    }
    Ok(())
}

/// The text of the sync updates among `frames` (step 2 and update), applied in order.
fn received_text(frames: &[Vec<u8>]) -> String {
    let doc = chopin_document::ydoc::empty_doc(1);
    for frame in frames {
        if let Some(update) = sync_payload(frame) {
            let _ = chopin_document::ydoc::apply_update(&doc, update);
        }
    }
    chopin_document::ydoc::read_source(&doc)
}

/// The update a y-protocols sync step 2 or update frame carries.
fn sync_payload(frame: &[u8]) -> Option<&[u8]> {
    let (&[0, kind], rest) = frame.split_first_chunk::<2>()? else {
        return None;
    };
    if kind != 1 && kind != 2 {
        return None;
    }
    let (mut len, mut shift, mut at) = (0usize, 0, 0);
    loop {
        let byte = *rest.get(at)?;
        len |= usize::from(byte & 0x7f) << shift;
        at += 1;
        if byte < 0x80 {
            break;
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
    rest.get(at..at + len)
}

/// The document's text as storage holds it: its checkpoint, then its journal.
fn stored_text(world: &World, doc: Uuid) -> Result<String, String> {
    let content = block_on(world.store().document_content(doc))
        .map_err(|e| format!("the document's content could not be read: {e}"))?;
    let mut entries: Vec<(i64, &[u8])> = Vec::new();
    if let Some(checkpoint) = &content.checkpoint {
        entries.push((0, &checkpoint.state));
    }
    entries.extend(content.updates.iter().map(|(seq, u)| (*seq, u.as_slice())));
    let rebuilt = chopin_server::content::guard::rebuild(1, &entries);
    Ok(chopin_document::ydoc::read_source(&rebuilt.doc))
}

/// no turn replayed.
fn turns(agents: &BTreeMap<String, Agent>) -> Result<(), String> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, agent) in agents {
        for (_, detail) in agent.frames_of("turn") {
            let id = detail.split(' ').next().unwrap_or_default().to_owned();
            if let Some(first) = seen.insert(id.clone(), name.clone()) {
                return Err(format!(
                    "no turn replayed: turn {id} reached {first} and then {name}"
                ));
            }
        }
    }
    Ok(())
}
