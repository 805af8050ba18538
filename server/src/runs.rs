//! Workflow runs a Planner client reports: their cards in the room, their stages in storage,
//! the Chat line when one ends, and Stop and Resume for them.
//!
//! Owns: taking a `runs` report (each run's card replaces the stored one; stages replace the
//! stored ones, or with `run-stage-deltas` merge into them by stage id, with no count limit),
//! the card the room shows (the latest [`CARD_STAGES`] stages, an unfinished stage of an ended
//! run shown stopped), the Chat line saying how a run ended and how long it took (SES-15; a
//! run that ends blocked or failed between turns gets only that line, never a turn, RR-03),
//! ended runs cleared when the next workflow starts in the document (SES-14), the Stop and
//! Resume Planner controls: `stop`/`resume` to the client, each waited on for its
//! `control-result`, with Chat saying who did what; a live card's `disconnected` marker while
//! the document's Planner is held disconnected (ATM-34, HO-13; read from [`AgentLinks`], never
//! stored), and the live runs of a client gone for good stored `stopped` (RT-11).
//!
//! Does not own: the link (the agent socket hands reports and control results in, and says when
//! a link closed for good; commands go out through [`AgentLinks`]), when a Planner is held or
//! its hold ends (the attachment table), who may press Stop or Resume (the room: writers), or
//! storage (the [`RunStore`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use chopin_protocol::agent::{self as wire, ControlResult, ServerMessage};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::harness::port::{AgentLinks, HeldStop, Kept, KeptForClient, LinkCommand};
use crate::questions::Questions;
use crate::runtime::clock::SharedClock;
use crate::runtime::entropy::SharedEntropy;
use crate::runtime::fanout;
use crate::store::{RunRecord, RunStore, StagePage, StageRecord, StoreError};
use crate::transcript::TurnSink;

/// How many of a run's latest stages its card carries (SES-10).
pub const CARD_STAGES: i64 = 12;
/// The most stages one page of the stages route serves (SES-11).
pub const STAGES_PAGE_MAX: i64 = 500;
/// How long Stop or Resume waits for the client's `control-result`.
pub const CONTROL_WAIT_MS: u64 = 10_000;
/// Cards told to a document's rooms that may wait for a slow room before it must read them
/// afresh. Held only while some room has yet to read them ([`fanout`]).
const CARD_BACKLOG: usize = 64;

/// What runs reach.
pub struct RunsDeps {
    pub store: Arc<dyn RunStore>,
    /// Answers to a run's questions wait while its root is paused.
    pub questions: Arc<Questions>,
    pub transcript: Arc<dyn TurnSink>,
    pub links: Arc<dyn AgentLinks>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

/// A run's card changed: the room's `run:card` frame carrying it (JSON text), encoded once for
/// every socket.
#[derive(Debug, Clone)]
pub struct CardChanged {
    pub frame: Bytes,
}

/// Every reported run of this process's documents, through storage.
pub struct Runs {
    deps: RunsDeps,
    /// Each document's channel of card changes, while some room listens.
    cards: Mutex<BTreeMap<Uuid, fanout::Sender<CardChanged>>>,
    /// `stop`/`resume` sent and not answered yet, by request id.
    pending: Mutex<BTreeMap<String, oneshot::Sender<ControlResult>>>,
    /// Reports taken from a link and not saved yet, by document and run: what the latest of
    /// them says, so a decision made meanwhile (a turn's end, a link's drop) sees it.
    unsaved: Mutex<BTreeMap<Uuid, BTreeMap<String, Unsaved>>>,
}

/// The latest unsaved report of a run.
#[derive(Debug, Clone)]
struct Unsaved {
    session: String,
    live: bool,
    /// The status it reported, in the connection's words.
    status: String,
    /// Reports of it queued and not saved yet.
    queued: usize,
}

/// Stop or Resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Stop,
    Resume,
}

fn word<T: Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

const ENDED_STAGE: [&str; 5] = ["completed", "blocked", "failed", "stopped", "skipped"];

/// The card of `run` with its latest stages (oldest first) and how many stages came before them.
/// `disconnected`: the document's Planner is held disconnected now, so a live run carries the
/// marker beside the status it last reported (ATM-34, HO-13); an ended run never does.
pub fn card(run: &RunRecord, latest: &[StageRecord], earlier: i64, disconnected: bool) -> Value {
    let ended = !run.is_live();
    let on_card: BTreeMap<&str, &StageRecord> =
        latest.iter().map(|s| (s.stage_id.as_str(), s)).collect();
    // Whether an ancestor of `stage` on the card has ended (walked up at most as many steps
    // as the card has stages, so a cycle in what a client reported cannot loop).
    let ancestor_ended = |stage: &StageRecord| {
        let mut parent = stage.parent_stage_id.as_deref();
        for _ in 0..latest.len() {
            let Some(above) = parent.and_then(|p| on_card.get(p)) else {
                return false;
            };
            if ENDED_STAGE.contains(&above.status.as_str()) {
                return true;
            }
            parent = above.parent_stage_id.as_deref();
        }
        false
    };
    let stages: Vec<Value> = latest
        .iter()
        .map(|s| {
            let unfinished = !ENDED_STAGE.contains(&s.status.as_str());
            // An unfinished stage under an ended ancestor (the run itself, or any stage above
            // it on the card) is already stopped (SES-10).
            let parent_ended = ancestor_ended(s);
            let status = if unfinished && (ended || parent_ended) {
                "stopped"
            } else {
                s.status.as_str()
            };
            json!({
                "stageId": s.stage_id,
                "name": s.name,
                "status": status,
                "parentStageId": s.parent_stage_id,
                "durationMs": s.duration_ms,
            })
        })
        .collect();
    json!({
        "runId": run.run_id,
        "name": run.name,
        "status": run.status,
        "disconnected": disconnected && !ended,
        "rootRunId": run.root_run_id,
        "elapsedMs": run.elapsed_ms,
        "stages": stages,
        "earlierStages": earlier,
        "unreportedStages": run.omitted_stages,
    })
}

/// Chat's line for an ended run: how it ended, and how long it took where the client said
/// (SES-15).
fn ended_line(record: &RunRecord) -> String {
    let how = match record.status.as_str() {
        "completed" => "completed",
        "blocked" => "ended blocked",
        "failed" => "failed",
        _ => "stopped",
    };
    match record.elapsed_ms {
        Some(ms) => format!(
            "Run \u{201c}{}\u{201d} {how} after {}.",
            record.name,
            took(ms)
        ),
        None => format!("Run \u{201c}{}\u{201d} {how}.", record.name),
    }
}

/// The room's `run:card` frame carrying `card` (JSON text).
fn card_frame(card: Value) -> Bytes {
    json!({ "type": "run:card", "run": card })
        .to_string()
        .into()
}

/// The runs' names, quoted, for a Chat line.
fn names_of(runs: &[RunRecord]) -> String {
    runs.iter()
        .map(|r| format!("\u{201c}{}\u{201d}", r.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "1m 35s", "42s", "2h 5m".
pub fn took(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

impl Runs {
    pub fn new(deps: RunsDeps) -> Self {
        Runs {
            deps,
            cards: Mutex::default(),
            pending: Mutex::default(),
            unsaved: Mutex::default(),
        }
    }

    /// `document` is served by another process now (`PROCESSES=many`): the reports taken here
    /// and not saved are forgotten (their link is closed; the client reports them again to the
    /// process serving the document).
    pub fn moved(&self, document: Uuid) {
        self.unsaved().remove(&document);
    }

    fn unsaved(&self) -> MutexGuard<'_, BTreeMap<Uuid, BTreeMap<String, Unsaved>>> {
        self.unsaved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A link took `report` and queued it to be saved ([`Runs::report`]): until it is, what it
    /// says counts for [`Runs::session_has_live`].
    pub fn queued(&self, document: Uuid, report: &wire::Runs) {
        let mut unsaved = self.unsaved();
        let runs = unsaved.entry(document).or_default();
        for run in &report.runs {
            let entry = runs.entry(run.run_id.clone()).or_insert_with(|| Unsaved {
                session: report.session_id.clone(),
                live: false,
                status: String::new(),
                queued: 0,
            });
            entry.session = report.session_id.clone();
            entry.live = run.status.is_live();
            entry.status = word(run.status);
            entry.queued += 1;
        }
    }

    /// A report (queued earlier) of `reported` runs is saved, or given up on.
    fn settled(&self, document: Uuid, reported: &[String]) {
        let mut unsaved = self.unsaved();
        let Some(runs) = unsaved.get_mut(&document) else {
            return;
        };
        for run in reported {
            if let Some(entry) = runs.get_mut(run) {
                entry.queued = entry.queued.saturating_sub(1);
                if entry.queued == 0 {
                    runs.remove(run);
                }
            }
        }
        if runs.is_empty() {
            unsaved.remove(&document);
        }
    }

    fn pending(&self) -> MutexGuard<'_, BTreeMap<String, oneshot::Sender<ControlResult>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `document`'s cards as they change.
    pub fn subscribe(&self, document: Uuid) -> fanout::Receiver<CardChanged> {
        self.cards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(document)
            .or_insert_with(|| fanout::Sender::new(CARD_BACKLOG))
            .subscribe()
    }

    /// Tells `document`'s rooms a card changed; forgets the channel once nobody listens.
    fn tell(&self, document: Uuid, card: Value) {
        let mut channels = self.cards.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(&document) {
            if channel
                .send(CardChanged {
                    frame: card_frame(card),
                })
                .is_err()
            {
                channels.remove(&document);
            }
        }
    }

    /// Every run card of `document`, in first-reported order.
    pub async fn cards(&self, document: Uuid) -> Result<Vec<Value>, StoreError> {
        let mut out = Vec::new();
        for run in self.deps.store.runs(document).await? {
            out.push(self.card_of(&run).await?);
        }
        Ok(out)
    }

    async fn card_of(&self, run: &RunRecord) -> Result<Value, StoreError> {
        let total = self
            .deps
            .store
            .run_stages(run.document_id, &run.run_id, 0, 0)
            .await?
            .map_or(0, |p| p.total);
        let from = (total - CARD_STAGES).max(0);
        let latest = self
            .deps
            .store
            .run_stages(run.document_id, &run.run_id, from, CARD_STAGES)
            .await?
            .map(|p| p.stages)
            .unwrap_or_default();
        let disconnected = self.deps.links.disconnected(run.document_id);
        Ok(card(run, &latest, from, disconnected))
    }

    /// The `run:card` frames of `document`'s live runs as they read now (with the disconnected
    /// marker if its Planner is held disconnected), for a room whose view of that changed.
    pub async fn live_card_frames(&self, document: Uuid) -> Result<Vec<Bytes>, StoreError> {
        let mut out = Vec::new();
        for run in self.deps.store.runs(document).await? {
            if run.is_live() {
                out.push(card_frame(self.card_of(&run).await?));
            }
        }
        Ok(out)
    }

    /// The Planner's client that reported `document`'s live runs is gone for good (its link
    /// closed, RT-11, or its hold ended by an explicit act): those runs, of `sessions` only
    /// when given, are stored `stopped`, each gets its Chat line (SES-15) and its card is told
    /// again. How many were stopped. Not for a link dropped with its work kept (ATM-34) or a
    /// stopping process (HO-17): their runs stay live.
    pub async fn client_gone(&self, document: Uuid, sessions: Option<&BTreeSet<String>>) -> usize {
        let runs = match self.deps.store.runs(document).await {
            Ok(runs) => runs,
            Err(e) => {
                tracing::warn!(%document, error = %e, "the live runs of a gone client could not be read; they stay as stored");
                return 0;
            }
        };
        let mut stopped = 0;
        for mut record in runs {
            if !record.is_live() || sessions.is_some_and(|s| !s.contains(&record.session_id)) {
                continue;
            }
            record.status = "stopped".to_owned();
            // How long it lasted when its session was let go (SES-20): what the client last
            // said, plus the time since it said so.
            let now = self.deps.clock.now_ms();
            record.elapsed_ms = record
                .elapsed_ms
                .map(|ms| ms.saturating_add((now - record.reported_at_ms).max(0)));
            record.reported_at_ms = now;
            if let Err(e) = self.deps.store.save_run(&record, &[], false).await {
                tracing::warn!(%document, run = %record.run_id, error = %e, "a gone client's run could not be stored stopped");
                continue;
            }
            stopped += 1;
            tracing::info!(%document, run = %record.run_id, "a workflow run is shown stopped: the client that reported it is gone");
            self.deps
                .transcript
                .post(document, "system", ended_line(&record))
                .await;
            self.tell_card(document, &record).await;
        }
        stopped
    }

    /// A run's record and a page of its stored stages; `None` if the document has no such run.
    pub async fn stages(
        &self,
        document: Uuid,
        run: &str,
        offset: i64,
        limit: i64,
    ) -> Result<Option<(RunRecord, StagePage)>, StoreError> {
        let Some(record) = self
            .deps
            .store
            .runs(document)
            .await?
            .into_iter()
            .find(|r| r.run_id == run)
        else {
            return Ok(None);
        };
        let page = self
            .deps
            .store
            .run_stages(document, run, offset, limit)
            .await?
            .unwrap_or(StagePage {
                stages: Vec::new(),
                total: 0,
            });
        Ok(Some((record, page)))
    }

    /// Whether `session` of `document` owns a run that has not ended. A storage failure
    /// counts as yes: a session is kept rather than lost.
    pub async fn session_has_live(&self, document: Uuid, session: &str) -> bool {
        let stored = match self.deps.store.runs(document).await {
            Ok(runs) => runs,
            Err(_) => return true,
        };
        // What a report not saved yet says of a run is newer than what storage holds.
        let unsaved = self.unsaved().get(&document).cloned().unwrap_or_default();
        let stored_live = stored.iter().any(|r| {
            r.session_id == session
                && match unsaved.get(&r.run_id) {
                    Some(newer) => newer.live && newer.session == session,
                    None => r.is_live(),
                }
        });
        stored_live
            || unsaved
                .values()
                .any(|newer| newer.live && newer.session == session)
    }

    /// Takes a `runs` report from the client attached to `document`. `deltas`: the link
    /// accepted `run-stage-deltas`, so `stages` are only new or changed ones.
    pub async fn report(&self, document: Uuid, report: wire::Runs, deltas: bool) {
        let runs: Vec<String> = report.runs.iter().map(|r| r.run_id.clone()).collect();
        self.save_report(document, report, deltas).await;
        self.settled(document, &runs);
    }

    async fn save_report(&self, document: Uuid, report: wire::Runs, deltas: bool) {
        let before: BTreeMap<String, RunRecord> = match self.deps.store.runs(document).await {
            Ok(runs) => runs.into_iter().map(|r| (r.run_id.clone(), r)).collect(),
            Err(e) => {
                tracing::warn!(%document, error = %e, "a runs report could not be read against storage; dropped");
                return;
            }
        };
        // A new workflow starts: the ended runs of the last one go (SES-14).
        let starts = report.runs.iter().any(|r| !before.contains_key(&r.run_id))
            && !before.values().any(RunRecord::is_live);
        if starts && !before.is_empty() {
            if let Err(e) = self.deps.store.delete_ended_runs(document).await {
                tracing::warn!(%document, error = %e, "ended runs could not be cleared");
            }
        }
        for run in report.runs {
            let record = RunRecord {
                document_id: document,
                run_id: run.run_id.clone(),
                session_id: report.session_id.clone(),
                name: run.name.clone(),
                status: word(run.status),
                root_run_id: run.root_run_id.clone(),
                elapsed_ms: run.elapsed_ms.map(|ms| ms.min(i64::MAX as u64) as i64),
                omitted_stages: if deltas {
                    0
                } else {
                    run.omitted_stages.unwrap_or(0).min(i64::MAX as u64) as i64
                },
                reported_at_ms: self.deps.clock.now_ms(),
            };
            let stages: Vec<StageRecord> = run
                .stages
                .iter()
                .map(|s| StageRecord {
                    stage_id: s.stage_id.clone(),
                    name: s.name.clone(),
                    status: word(s.status),
                    parent_stage_id: s.parent_stage_id.clone(),
                    duration_ms: s.duration_ms.map(|ms| ms.min(i64::MAX as u64) as i64),
                })
                .collect();
            // Without deltas an empty list keeps the stored stages (nothing was said of them).
            let replace = !deltas && !stages.is_empty();
            if let Err(e) = self.deps.store.save_run(&record, &stages, replace).await {
                tracing::warn!(%document, run = %record.run_id, error = %e, "a run report could not be saved");
                continue;
            }
            self.deps
                .questions
                .run_reported(
                    document,
                    &record.run_id,
                    record.root_run_id.as_deref(),
                    record.status == "paused",
                )
                .await;
            let was_live = before.get(&record.run_id).is_none_or(RunRecord::is_live);
            if was_live && !record.is_live() {
                // SES-15; RR-03: a run that ends blocked or failed gets this line and no turn.
                tracing::info!(%document, run = %record.run_id, status = %record.status, "a workflow run ended");
                self.deps
                    .transcript
                    .post(document, "system", ended_line(&record))
                    .await;
            }
            self.tell_card(document, &record).await;
        }
    }

    /// Keeps a Stop for the client of `document`'s hold, if one holds its Planner for a client
    /// that is away.
    async fn hold_stop(&self, document: Uuid, run: Option<&str>, login: &str) -> Kept {
        let stop = HeldStop {
            run_id: run.map(str::to_owned),
            login: login.to_owned(),
        };
        let held = self
            .deps
            .links
            .keep_for_client(document, KeptForClient::Stop(stop))
            .await;
        if held == Kept::Newly {
            tracing::info!(%document, login, "a Stop is held for the Planner's client, which is away");
        }
        held
    }

    /// Tells `document`'s rooms `record`'s card as storage now has it.
    async fn tell_card(&self, document: Uuid, record: &RunRecord) {
        match self.card_of(record).await {
            Ok(card) => self.tell(document, card),
            Err(e) => tracing::warn!(%document, error = %e, "a run card could not be read back"),
        }
    }

    /// A `control-result` from a link: the Stop or Resume waiting on it hears it.
    pub fn control_result(&self, result: ControlResult) {
        match self.pending().remove(&result.request_id) {
            Some(waiting) => {
                let _ = waiting.send(result);
            }
            None => {
                tracing::debug!(request = %result.request_id, "a control-result nobody waits on; ignored")
            }
        }
    }

    /// Stop or Resume Planner for `document`'s live runs (or the one named), pressed by `login`:
    /// each session owning such runs is sent `stop` or `resume` and waited on for its
    /// `control-result`. Chat records who did what. How many runs were asked.
    pub async fn control(
        &self,
        document: Uuid,
        run: Option<&str>,
        control: Control,
        login: &str,
    ) -> usize {
        let Ok(mut runs) = self.deps.store.runs(document).await else {
            return 0;
        };
        // A report taken and not saved yet says what the run is now (a `paused` right before
        // Resume was pressed).
        if let Some(unsaved) = self.unsaved().get(&document) {
            for record in &mut runs {
                if let Some(newer) = unsaved.get(&record.run_id) {
                    record.status = newer.status.clone();
                    record.session_id = newer.session.clone();
                }
            }
        }
        let wanted = |r: &RunRecord| match control {
            Control::Stop => matches!(r.status.as_str(), "running" | "waiting"),
            Control::Resume => r.status == "paused",
        };
        let chosen: Vec<RunRecord> = runs
            .into_iter()
            .filter(|r| run.is_none_or(|id| r.run_id == id))
            .filter(wanted)
            .collect();
        if chosen.is_empty() {
            return 0;
        }
        let Some(link) = self.deps.links.link_for(document) else {
            // A client that is away hears a Stop when it is back (ATM-35); a Resume is not held.
            if control != Control::Stop {
                return 0;
            }
            return match self.hold_stop(document, run, login).await {
                Kept::Not => 0,
                // Already held: Chat said so once; a Stop pressed again adds no line.
                Kept::Already => chosen.len(),
                Kept::Newly => {
                    let line = format!(
                        "@{login} asked to pause {}; the Planner's machine is away, so the Stop is held until it is back.",
                        names_of(&chosen)
                    );
                    self.deps.transcript.post(document, "system", line).await;
                    chosen.len()
                }
            };
        };
        let mut sessions: BTreeMap<String, Vec<RunRecord>> = BTreeMap::new();
        for r in chosen {
            sessions.entry(r.session_id.clone()).or_default().push(r);
        }
        let mut asked = 0;
        for (session, runs) in sessions {
            let request_id = format!("c-{}", self.deps.entropy.token_hex(6));
            let (told, heard) = oneshot::channel();
            self.pending().insert(request_id.clone(), told);
            let run_id = run.map(str::to_owned);
            let frame = match control {
                Control::Stop => ServerMessage::Stop(wire::Stop {
                    request_id: request_id.clone(),
                    session_id: session.clone(),
                    run_id,
                }),
                Control::Resume => ServerMessage::Resume(wire::ServerResume {
                    request_id: request_id.clone(),
                    session_id: session.clone(),
                    run_id,
                }),
            };
            if !link.command(LinkCommand::Send(Box::new(frame))) {
                self.pending().remove(&request_id);
                continue;
            }
            let answer = tokio::time::timeout(Duration::from_millis(CONTROL_WAIT_MS), heard).await;
            self.pending().remove(&request_id);
            let names = names_of(&runs);
            let (did, failed) = match control {
                Control::Stop => ("paused", "pause"),
                Control::Resume => ("resumed", "resume"),
            };
            let line = match answer {
                Ok(Ok(result)) if result.ok => {
                    asked += runs.len();
                    format!("@{login} {did} {names}.")
                }
                Ok(Ok(result)) => format!(
                    "@{login} asked to {failed} {names}; the Planner could not: {}",
                    result
                        .message
                        .unwrap_or_else(|| "no reason given".to_owned())
                ),
                // The link went away with the Stop unanswered: it is held for the client's
                // return, if its work is kept (ATM-35).
                _ if control == Control::Stop
                    && self.deps.links.link_for(document).is_none()
                    && self.hold_stop(document, run, login).await != Kept::Not =>
                {
                    asked += runs.len();
                    format!("@{login} asked to pause {names}; the Planner's machine went away before it answered, so the Stop is held until it is back.")
                }
                _ => format!("@{login} asked to {failed} {names}; the Planner did not answer."),
            };
            self.deps.transcript.post(document, "system", line).await;
        }
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(id: &str, status: &str, parent: Option<&str>) -> StageRecord {
        StageRecord {
            stage_id: id.into(),
            name: id.into(),
            status: status.into(),
            parent_stage_id: parent.map(str::to_owned),
            duration_ms: None,
        }
    }

    /// SES-10 (issue 24 item 10): an unfinished stage under an ended ancestor — its grandparent,
    /// not only its parent — is shown stopped; a cycle in the reported parents cannot loop.
    #[test]
    fn ses_10_a_stage_under_an_ended_grandparent_is_shown_stopped() {
        let run = RunRecord {
            document_id: Uuid::nil(),
            run_id: "r".into(),
            session_id: "s".into(),
            name: "rollout".into(),
            status: "running".into(),
            root_run_id: None,
            elapsed_ms: None,
            omitted_stages: 0,
            reported_at_ms: 0,
        };
        let stages = [
            stage("a", "failed", None),
            stage("b", "running", Some("a")),
            stage("c", "running", Some("b")),
            stage("x", "running", Some("y")),
            stage("y", "running", Some("x")),
        ];
        let card = card(&run, &stages, 0, false);
        let status = |i: usize| card["stages"][i]["status"].as_str().unwrap().to_owned();
        assert_eq!(status(1), "stopped", "under its ended parent");
        assert_eq!(status(2), "stopped", "under its ended grandparent");
        assert_eq!((status(3), status(4)), ("running".into(), "running".into()));
    }
}
