//! Who holds each document's Planner in this process, and what the room is told about it.
//!
//! Owns: the attachment table (a document is attached to one link, held in its grace period
//! after a detach or drop, held for a link's client that has work kept — in a deploy's hand-over
//! window or disconnected with no deadline — or free), binding an attach through the
//! generation-guarded storage claim, the grace timer and its release *under the generation it
//! was started for*, the holds (written at the cut of a graceful stop and when a resumable link
//! drops with work kept; rebuilt at startup, with the hand-over window timer), closing a link
//! when its owner's sign-in ends, a writer resets the Planner, the document is archived or
//! access is lost, and the `session:planner` presence each document's room hears.
//! Does not own: the WebSocket itself (the agent socket, in the transport layer), sign-in
//! ([`crate::identity::sign_ins`]), or the checks done before an attach reaches
//! [`Planners::attach`] (admission, write access, document).
//!
//! Every change of a document's ownership (claim, release) happens while holding that
//! document's *gate*, an async mutex, so an attach, a grace expiry, a reset and a sign-out of
//! one document never interleave between their storage write and the table. An attach watches
//! the document's revocations from before its checks until it binds ([`Planners::revocations`]);
//! a sign-out, expiry, reset or archive counts one for every watch of its document before it
//! waits for the gate, and a watched attach that saw one is refused rather than bound (AO-16).
//!
//! Bounds: the table keeps a document only while something uses it — a slot (attached, in its
//! grace period, or held for a client's kept work until an explicit act or the client's return
//! ends it), a gate held or waited for, a revocation watch alive, a room listening to its
//! presence (rooms nobody listens to are dropped by [`Planners::tidy`]) — so it shrinks back to
//! empty when the process is idle.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use chopin_protocol::agent::{ErrorCode, InputResult, RefusalReason};
use serde::Serialize;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::config::Planted;
use crate::harness::port::{AgentLinks, Kept};
pub use crate::harness::port::{HeldQuestion, HeldStop, KeptForClient, LinkCommand, LinkHandle};
use crate::identity::sign_ins::{LiveLogin, LoginEnd, SignIns, SignOutNotRecorded};
use crate::observe::{Observer, PlannerEvent};
use crate::runtime::fanout;
use crate::runtime::gates::Gates;
use crate::runtime::{SharedClock, Shutdown};
use crate::starting::Wait;
use crate::store::{Claim, HoldStore, Holder, LinkHold, OwnershipStore, StoreError, UnixMillis};

/// What the room is told about a document's Planner (`session:planner`): the holder's login and
/// state only, never a machine, checkout or token (PRES-03).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Presence {
    pub state: PresenceState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// With `detached`: when the grace period ends (server time, Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<UnixMillis>,
    /// With `starting`, while a person's move to a machine connects: the id of the machine
    /// asked (PRES-04, RULINGS PRES-05).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Uuid>,
    /// With `starting`: why the machine cannot be connected to (PRES-15, PRES-19, PRES-20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::starting::Failure>,
    /// With `detached` and `disconnected`: when the holder's client was last heard (server time,
    /// Unix ms), for "Last seen …" (RULINGS PRES-09).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<UnixMillis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PresenceState {
    /// A client is attached.
    Attached,
    /// The client detached or dropped; its account may come back until `until`.
    Detached,
    /// The client dropped with work kept (or missed its hand-over window): its account keeps the
    /// Planner with no deadline, and takes the work back when its client returns.
    Disconnected,
    /// A paired machine was asked to run the Planner and its backend has not attached yet
    /// (PRES-12).
    Starting,
    /// Nobody holds the Planner.
    None,
}

impl Presence {
    /// The room's `session:planner` frame carrying this presence (JSON text).
    pub fn frame(&self) -> String {
        serde_json::json!({ "type": "session:planner", "planner": self }).to_string()
    }

    pub fn none() -> Self {
        Presence {
            state: PresenceState::None,
            login: None,
            until: None,
            machine: None,
            failure: None,
            last_seen: None,
        }
    }

    /// A holder's state, with its login.
    fn of(state: PresenceState, login: &str, until: Option<UnixMillis>) -> Self {
        Presence {
            state,
            login: Some(login.to_owned()),
            until,
            machine: None,
            failure: None,
            last_seen: None,
        }
    }

    /// An away holder's state, with when its client was last heard.
    fn away(
        state: PresenceState,
        login: &str,
        until: Option<UnixMillis>,
        seen: UnixMillis,
    ) -> Self {
        Presence {
            last_seen: Some(seen),
            ..Presence::of(state, login, until)
        }
    }

    /// A machine's wait for its backend: its owner's login, the machine only for a move a
    /// person asked for, and the failure told.
    fn starting(wait: &Wait) -> Self {
        Presence {
            state: PresenceState::Starting,
            login: Some(wait.login.clone()),
            until: None,
            machine: wait.switch.then_some(wait.machine),
            failure: wait.failure().cloned(),
            last_seen: None,
        }
    }
}

/// The server telling a link to close: the `error` frame's code and words.
#[derive(Debug, Clone)]
pub struct Closing {
    pub code: ErrorCode,
    pub message: String,
}

/// An attach the table refused.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub message: String,
    pub holder: Option<String>,
}

impl Refusal {
    pub(crate) fn attached(holder: &str) -> Self {
        Refusal {
            reason: RefusalReason::PlannerAttached,
            message: format!("@{holder} holds this document's Planner; only one client can be attached at a time."),
            holder: Some(holder.to_owned()),
        }
    }

    fn raced() -> Self {
        Refusal {
            reason: RefusalReason::AccessRevoked,
            message: "A sign-out, sign-in expiry or Planner reset landed while this attach was being checked; attach again.".to_owned(),
            holder: None,
        }
    }

    pub(crate) fn storage(e: StoreError) -> Self {
        tracing::error!(error = %e, "attach: storage failed");
        Refusal {
            reason: RefusalReason::Unavailable,
            message: "Storage did not answer; attach again shortly.".to_owned(),
            holder: None,
        }
    }
}

/// A link bound to a document.
pub struct Bound {
    pub link: u64,
    pub generation: i64,
    pub closing: mpsc::Receiver<Closing>,
    /// What a hold of this account kept for its client (AO-19): its sessions are
    /// `attached.kept`; its answers and Stops follow `resumed`.
    pub kept: HeldWork,
}

/// How a link ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEnd {
    /// The client sent `detach`.
    Detached,
    /// The connection dropped, timed out or closed without `detach`.
    Dropped,
}

/// What a hold keeps for its client, as written in `planner_link_holds.held` (AO-18): the
/// sessions the client holds, the questions it waits on, the answers it has not taken and the
/// Stops it has not heard. A later process waits on none of the questions (HO-15): they are
/// written for the record, and their Decisions stay open in the document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HeldWork {
    pub sessions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<HeldQuestion>,
    /// Answers owed to the client, each delivered once after `resumed` (HO-16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<InputResult>,
    /// Stops it has not heard, sent after `resumed` (ATM-35).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stops: Vec<HeldStop>,
    /// The link the work was kept from, in this process only: its questions are still filed
    /// under it until the client resumes or the hold ends.
    #[serde(skip)]
    pub link: Option<u64>,
}

/// The longest a cut's hold may wait for its next process and still be given a hand-over
/// window (HO-04): no deploy takes so long.
pub const HANDOVER_REBUILD_LIMIT_MS: i64 = 3_600_000;

/// A hold's hand-over window, running in this process.
struct Window {
    until_ms: UnixMillis,
    timer: u64,
    task: tokio::task::AbortHandle,
    /// Told when the window ends, for resumes waiting on the owner's sign-in.
    ended: tokio::sync::watch::Sender<bool>,
    /// Resumes of the holder's account waiting on its sign-in now.
    waiting: u32,
}

impl Window {
    /// Ends the window early (a resume, or an act that ends the hold): its timer stops and the
    /// resumes waiting on it hear that it is over.
    fn end(self) {
        self.task.abort();
        let _ = self.ended.send(true);
    }
}

enum Slot {
    Attached {
        link: u64,
        holder: Holder,
        generation: i64,
        /// The one close the table may order (the slot leaves the table as it is sent).
        closer: mpsc::Sender<Closing>,
        /// When the link last heard from its client (server time).
        heard_ms: UnixMillis,
        /// Commands to the link's task (the harness's way to the client).
        handle: LinkHandle,
    },
    Grace {
        holder: Holder,
        generation: i64,
        until_ms: UnixMillis,
        timer: u64,
        task: tokio::task::AbortHandle,
        /// Reattaches of the holder's account that arrived within the grace period and are
        /// still being checked: the period does not end under them.
        holds: u32,
        /// The period ran out while held; whoever drops the last hold releases.
        lapsed: bool,
        /// When the holder's client was last heard (RULINGS PRES-09).
        last_seen_ms: UnixMillis,
    },
    /// No link, but the holder's client holds work kept for it (AO-11, AO-19): a hold rebuilt
    /// from `planner_link_holds`, in its hand-over window (shown attached, HO-07) or
    /// disconnected (no deadline, AO-14).
    Held {
        holder: Holder,
        generation: i64,
        work: HeldWork,
        /// When the stored row was written (it is changed and deleted only as written).
        written_at_ms: UnixMillis,
        window: Option<Window>,
        /// When the holder's client was last heard: its link's last frame, or for a hold
        /// rebuilt from storage, when the row was written (RULINGS PRES-09).
        last_seen_ms: UnixMillis,
        /// A paired machine's hold: only that machine's backend takes it over (AO-21).
        machine: Option<Uuid>,
    },
}

/// Called when an explicit act ends a hold: the document, what the hold kept, and why.
pub type HoldEnded = Arc<dyn Fn(Uuid, HeldWork, String) + Send + Sync>;

/// Told a browser login's GitHub token is retired (the login ended, or its credential was
/// renewed): whatever holds that token on the login's behalf lets it go (RFC-53).
pub type TokenRetired = Arc<dyn Fn(Uuid) + Send + Sync>;

/// A reattach that arrived within its account's grace period (see [`Planners::hold_grace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraceHold {
    doc: Uuid,
    timer: u64,
}

impl Slot {
    fn holder(&self) -> &Holder {
        match self {
            Slot::Attached { holder, .. }
            | Slot::Grace { holder, .. }
            | Slot::Held { holder, .. } => holder,
        }
    }

    fn presence(&self) -> Presence {
        match self {
            Slot::Attached { holder, .. } => {
                Presence::of(PresenceState::Attached, &holder.login, None)
            }
            Slot::Grace {
                holder,
                until_ms,
                last_seen_ms,
                ..
            } => Presence::away(
                PresenceState::Detached,
                &holder.login,
                Some(*until_ms),
                *last_seen_ms,
            ),
            // In its hand-over window the hold shows as attached (HO-07).
            Slot::Held {
                holder,
                window: Some(_),
                ..
            } => Presence::of(PresenceState::Attached, &holder.login, None),
            Slot::Held {
                holder,
                window: None,
                last_seen_ms,
                ..
            } => Presence::away(
                PresenceState::Disconnected,
                &holder.login,
                None,
                *last_seen_ms,
            ),
        }
    }
}

#[derive(Default)]
struct Table {
    slots: BTreeMap<Uuid, Slot>,
    /// Documents with revocation watches alive: how many, and revocations counted since the
    /// first of them began.
    watched: BTreeMap<Uuid, Watched>,
    /// Each room's `session:planner` frames, encoded once for all its sockets.
    rooms: BTreeMap<Uuid, fanout::Sender<Bytes>>,
    /// Documents waiting for a paired machine's backend to attach (PRES-12): shown `starting`
    /// while nothing holds the document.
    starting: BTreeMap<Uuid, Wait>,
    next_id: u64,
}

impl Table {
    /// `doc`'s wait for `machine`: the one kept, or a new one (not a person's move) when none
    /// was kept (after a restart, say) or the one kept is for another machine.
    fn wait_for(
        &mut self,
        doc: Uuid,
        machine: Uuid,
        login: &str,
        release: Option<&str>,
        now: UnixMillis,
    ) -> &mut Wait {
        let fresh = || {
            Wait::new(
                machine,
                login.to_owned(),
                release.map(str::to_owned),
                false,
                now,
            )
        };
        let wait = self.starting.entry(doc).or_insert_with(fresh);
        if wait.machine != machine {
            *wait = fresh();
        }
        wait
    }

    /// What the room is told now: the holder, else a machine's wait, else none.
    fn shown(&self, doc: Uuid) -> Presence {
        self.slots
            .get(&doc)
            .map(Slot::presence)
            .or_else(|| self.starting.get(&doc).map(Presence::starting))
            .unwrap_or_else(Presence::none)
    }
}

#[derive(Default)]
struct Watched {
    watches: usize,
    revocations: u64,
}

/// An attach's watch of its document's revocations, taken before its checks (see the module
/// docs). Dropping it forgets the document once no other watch remains.
pub struct RevocationWatch {
    table: Arc<Mutex<Table>>,
    doc: Uuid,
    seen: u64,
}

impl RevocationWatch {
    /// Whether a sign-out, expiry, reset or archive of the document was counted since the watch
    /// began.
    fn revoked(&self, table: &Table) -> bool {
        table
            .watched
            .get(&self.doc)
            .is_none_or(|w| w.revocations != self.seen)
    }
}

impl Drop for RevocationWatch {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watched) = table.watched.get_mut(&self.doc) {
            watched.watches = watched.watches.saturating_sub(1);
            if watched.watches == 0 {
                table.watched.remove(&self.doc);
            }
        }
    }
}

/// How many entries the table's maps hold now (for `/metrics` and the bounded-state tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableSizes {
    pub slots: usize,
    pub gates: usize,
    pub revocation_watches: usize,
    pub rooms: usize,
}

impl Table {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// How many presence changes a slow room socket may fall behind before it skips to the latest.
/// Held only while some socket has yet to read them ([`fanout`]).
const ROOM_BACKLOG: usize = 64;

/// The attachment table of this process.
pub struct Planners {
    table: Arc<Mutex<Table>>,
    gates: Gates<Uuid>,
    observer: OnceLock<Arc<dyn Observer>>,
    /// Told when an explicit act ends a hold (AO-12), with what it kept and why it ended, so
    /// the questions it kept are withdrawn.
    hold_ended: OnceLock<HoldEnded>,
    token_retired: OnceLock<TokenRetired>,
    store: Arc<dyn OwnershipStore>,
    clock: SharedClock,
    sign_ins: Arc<SignIns>,
    shutdown: Shutdown,
    /// `PLANNER_ATTACH_GRACE_MS`.
    attach_grace_ms: u64,
    /// Where holds are written (`planner_link_holds`); `None` under `AUTH_MODE=local`, where
    /// holds stay in memory and no link is handed over (HO-18).
    holds: Option<Arc<dyn HoldStore>>,
    /// `HANDOVER_PLANNER_WINDOW_MS`.
    handover_window_ms: u64,
    /// `PLANNER_PATIENCE_MS`: how long a machine asked to run a Planner has to attach before
    /// the sweep tells it failed (PRES-20).
    patience_ms: u64,
    /// Bugs the simulator planted, to show it finds them (always off outside it).
    planted: Planted,
}

/// The attached links, for the harness: the remote adapter reaches a document's client here,
/// and what is meant for a client that is away waits in its hold.
#[async_trait::async_trait]
impl AgentLinks for Planners {
    fn link_for(&self, document: Uuid) -> Option<LinkHandle> {
        Planners::link_for(self, document)
    }

    fn disconnected(&self, document: Uuid) -> bool {
        self.presence(document).state == PresenceState::Disconnected
    }

    async fn keep_for_client(&self, document: Uuid, kept: KeptForClient) -> Kept {
        let _gate = self.gates.lock(document).await;
        let row = {
            let mut table = self.lock();
            let Some(Slot::Held {
                holder,
                generation,
                work,
                written_at_ms,
                machine,
                ..
            }) = table.slots.get_mut(&document)
            else {
                return Kept::Not;
            };
            match kept {
                KeptForClient::Answer(result) => {
                    work.answers.retain(|a| a.request_id != result.request_id);
                    work.answers.push(result);
                }
                // One Stop per run (or for every run) is enough to hold.
                KeptForClient::Stop(stop) => {
                    if work.stops.iter().any(|s| s.run_id == stop.run_id) {
                        return Kept::Already;
                    }
                    work.stops.push(stop);
                }
            }
            // A hold in this process has no window in its row any more (HO-05).
            hold_row(
                document,
                holder,
                *generation,
                work,
                *written_at_ms,
                None,
                *machine,
            )
        };
        if let Some(holds) = &self.holds {
            if let Err(e) = holds.put_link_hold(&row).await {
                tracing::error!(document = %document, error = %e, "could not store what a hold keeps for its client; it is kept in this process only");
            }
        }
        Kept::Newly
    }
}

impl Planners {
    pub fn new(
        store: Arc<dyn OwnershipStore>,
        clock: SharedClock,
        sign_ins: Arc<SignIns>,
        shutdown: Shutdown,
        attach_grace_ms: u64,
        planted: Planted,
    ) -> Self {
        Planners {
            planted,
            table: Arc::default(),
            gates: Gates::default(),
            observer: OnceLock::new(),
            hold_ended: OnceLock::new(),
            token_retired: OnceLock::new(),
            store,
            clock,
            sign_ins,
            shutdown,
            attach_grace_ms,
            holds: None,
            handover_window_ms: 0,
            patience_ms: 120_000,
        }
    }

    /// A machine asked to run a Planner has `patience_ms` (`PLANNER_PATIENCE_MS`) to attach.
    pub fn with_patience(mut self, patience_ms: u64) -> Self {
        self.patience_ms = patience_ms;
        self
    }

    /// A person moved `doc` to `machine` (`switch`), or the server asks it again: the wait
    /// starts afresh, whatever was waited on before (PRES-23).
    pub fn machine_asked(
        &self,
        doc: Uuid,
        machine: Uuid,
        login: &str,
        release: Option<&str>,
        switch: bool,
    ) {
        let now = self.clock.now_ms();
        self.lock().starting.insert(
            doc,
            Wait::new(
                machine,
                login.to_owned(),
                release.map(str::to_owned),
                switch,
                now,
            ),
        );
        self.announce(doc);
    }

    /// `doc` no longer asks a machine (moved to none, its machine revoked or unshared): what
    /// was waited on and reported is forgotten (PRES-16, PRES-23).
    pub fn machine_left(&self, doc: Uuid) {
        if self.lock().starting.remove(&doc).is_some() {
            self.announce(doc);
        }
    }

    /// The document's machine asked for a Planner credential: with a link attached it is a
    /// renewal; otherwise a launch (PRES-18), counted on its wait (`Table::wait_for`).
    pub fn credential_requested(
        &self,
        doc: Uuid,
        machine: Uuid,
        login: &str,
        release: Option<&str>,
    ) {
        let now = self.clock.now_ms();
        let changed = {
            let mut table = self.lock();
            if matches!(table.slots.get(&doc), Some(Slot::Attached { .. })) {
                return;
            }
            let before = table.shown(doc);
            table
                .wait_for(doc, machine, login, release, now)
                .launched(release, now);
            table.shown(doc) != before
        };
        if changed {
            self.announce(doc);
        }
    }

    /// The document's machine reported a launch (PRES-13): told from the second failed one in
    /// a row, forgotten when one stayed up.
    pub fn launch_reported(
        &self,
        doc: Uuid,
        machine: Uuid,
        login: &str,
        report: &crate::starting::Report,
    ) -> Option<crate::starting::Failure> {
        let now = self.clock.now_ms();
        let (changed, told) = {
            let mut table = self.lock();
            let before = table.shown(doc);
            let wait = table.wait_for(doc, machine, login, None, now);
            wait.report(report, now);
            let told = wait.failure().cloned();
            (table.shown(doc) != before, told)
        };
        if changed {
            self.announce(doc);
        }
        told
    }

    /// The 15-second sweep (PRES-21): every machine past its patience without an attach is
    /// told failed, once. How many were told now.
    pub fn sweep_patience(&self) -> usize {
        let now = self.clock.now_ms();
        let due: Vec<Uuid> = {
            let mut table = self.lock();
            let patience = self.patience_ms;
            table
                .starting
                .iter_mut()
                .filter_map(|(doc, wait)| wait.sweep(now, patience).then_some(*doc))
                .collect()
        };
        for doc in &due {
            self.announce(*doc);
        }
        due.len()
    }

    /// Holds are written to `holds` and a graceful stop hands each link over with a window of
    /// `window_ms` (`HANDOVER_PLANNER_WINDOW_MS`). Not called under `AUTH_MODE=local` (HO-18).
    pub fn with_handover(mut self, holds: Arc<dyn HoldStore>, window_ms: u64) -> Self {
        self.holds = Some(holds);
        self.handover_window_ms = window_ms;
        self
    }

    /// Sends every [`PlannerEvent`] to `observer` from now on (once per process).
    /// What to do when an explicit act ends a hold (set once, by the composition root).
    pub fn on_hold_ended(&self, ended: HoldEnded) {
        let _ = self.hold_ended.set(ended);
    }

    /// What to do when a login's GitHub token is retired (set once, by the composition root).
    pub fn on_token_retired(&self, retired: TokenRetired) {
        let _ = self.token_retired.set(retired);
    }

    /// `login_id`'s GitHub token is no longer to be used (its login ended or its credential
    /// was renewed).
    pub fn token_retired(&self, login_id: Uuid) {
        if let Some(retired) = self.token_retired.get() {
            retired(login_id);
        }
    }

    pub fn observe(&self, observer: Arc<dyn Observer>) {
        let _ = self.observer.set(observer);
    }

    /// Tells the observer (the simulator's trace), if one is installed.
    pub fn emit(&self, event: PlannerEvent) {
        if let Some(observer) = self.observer.get() {
            observer.planner_event(self.clock.now_ms(), event);
        }
    }

    /// How many documents have a link attached now.
    pub fn attached_count(&self) -> usize {
        self.lock()
            .slots
            .values()
            .filter(|s| matches!(s, Slot::Attached { .. }))
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Watches `doc`'s revocations (see the module docs): take it before checking an attach and
    /// hand it to [`Planners::attach`].
    pub fn revocations(&self, doc: Uuid) -> RevocationWatch {
        let mut table = self.lock();
        let watched = table.watched.entry(doc).or_default();
        watched.watches += 1;
        RevocationWatch {
            table: self.table.clone(),
            doc,
            seen: watched.revocations,
        }
    }

    /// Counts a revocation of `doc` for every watch of it alive now.
    fn revoke_count(&self, doc: Uuid) {
        if let Some(watched) = self.lock().watched.get_mut(&doc) {
            watched.revocations += 1;
        }
    }

    /// Drops the presence channels of rooms nobody listens to any more.
    pub fn tidy(&self) {
        self.lock()
            .rooms
            .retain(|_, room| room.receiver_count() > 0);
    }

    /// How many entries the table holds now.
    pub fn sizes(&self) -> TableSizes {
        let table = self.lock();
        TableSizes {
            slots: table.slots.len(),
            gates: self.gates.len(),
            revocation_watches: table.watched.len(),
            rooms: table.rooms.len(),
        }
    }

    /// The documents whose Planner is held here now, in any state but none (attached, in its
    /// grace period, disconnected with work kept, starting on a machine), in id order.
    pub fn held(&self) -> Vec<Uuid> {
        let table = self.lock();
        table
            .slots
            .keys()
            .chain(table.starting.keys())
            .copied()
            .filter(|doc| table.shown(*doc).state != PresenceState::None)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// What the room is told now.
    pub fn presence(&self, doc: Uuid) -> Presence {
        self.lock().shown(doc)
    }

    /// Presence changes of `doc` from now on, each as its `session:planner` frame (JSON text,
    /// [`Presence::frame`]) encoded once for every socket.
    pub fn subscribe(&self, doc: Uuid) -> fanout::Receiver<Bytes> {
        self.lock()
            .rooms
            .entry(doc)
            .or_insert_with(|| fanout::Sender::new(ROOM_BACKLOG))
            .subscribe()
    }

    fn announce(&self, doc: Uuid) {
        let mut table = self.lock();
        let presence = table.shown(doc);
        if let Some(room) = table.rooms.get(&doc) {
            if room.send(presence.frame().into()).is_err() {
                // Nobody listens any more.
                table.rooms.remove(&doc);
            }
        }
    }

    /// The login holding `doc`'s Planner, attached or in its grace period.
    pub fn holder(&self, doc: Uuid) -> Option<Holder> {
        self.lock().slots.get(&doc).map(|s| s.holder().clone())
    }

    /// Binds a link for `live`'s account to `doc`, claiming the Planner ownership in storage.
    /// `revocations` is the [`Planners::revocations`] watch taken before the caller's checks.
    pub async fn attach(
        &self,
        doc: Uuid,
        live: &Arc<LiveLogin>,
        revocations: &RevocationWatch,
        handle: LinkHandle,
    ) -> Result<Bound, Refusal> {
        let _gate = self.gates.lock(doc).await;
        let holder = live.as_holder();
        {
            let table = self.lock();
            match table.slots.get(&doc) {
                Some(Slot::Attached { holder: h, .. }) => return Err(Refusal::attached(&h.login)),
                Some(Slot::Grace { holder: h, .. } | Slot::Held { holder: h, .. })
                    if h.account_id != holder.account_id =>
                {
                    return Err(Refusal::attached(&h.login))
                }
                // A paired machine's hold is taken over by that machine's backend only (AO-21).
                Some(Slot::Held {
                    holder: h,
                    machine: Some(m),
                    ..
                }) if live.machine != Some(*m) => return Err(Refusal::attached(&h.login)),
                _ => {}
            }
        }
        let store = &self.store;
        let now = self.clock.now_ms();
        let mut claim = store
            .claim_ownership(doc, &holder, now)
            .await
            .map_err(Refusal::storage)?;
        if let Claim::HeldByOther(stale) = &claim {
            // Storage names an owner this process has no link or grace for (only a race or an
            // operator can leave one): clear it under its generation and claim again (AO-05).
            tracing::info!(document = %doc, generation = stale.generation, "clearing an owner left without an attachment");
            store
                .release_ownership(doc, stale.generation)
                .await
                .map_err(Refusal::storage)?;
            claim = store
                .claim_ownership(doc, &holder, now)
                .await
                .map_err(Refusal::storage)?;
        }
        let ownership = match claim {
            Claim::Claimed(o) => o,
            Claim::HeldByOther(o) => {
                let login = o.holder.map(|h| h.login).unwrap_or_default();
                return Err(Refusal::attached(&login));
            }
        };
        let (closer, closing) = mpsc::channel(1);
        let mut kept_back: Option<(HeldWork, UnixMillis)> = None;
        let bound = {
            let mut table = self.lock();
            let revoked = revocations.revoked(&table);
            let signed_in = self.sign_ins.get_live(live.id, now).is_some();
            if revoked || !signed_in {
                None
            } else {
                let link = table.id();
                let mut taken = None;
                match table.slots.get_mut(&doc) {
                    Some(Slot::Grace { task, .. }) => task.abort(),
                    // The holder's client is back: the hold (and its window, HO-12) ends here,
                    // and its sessions are offered to the client (AO-19).
                    Some(Slot::Held {
                        work,
                        written_at_ms,
                        window,
                        ..
                    }) => {
                        if let Some(w) = window.take() {
                            w.end();
                        }
                        taken = Some((std::mem::take(work), *written_at_ms));
                    }
                    _ => {}
                }
                kept_back = taken;
                // What was waited on and reported of the machine is forgotten (PRES-16).
                table.starting.remove(&doc);
                table.slots.insert(
                    doc,
                    Slot::Attached {
                        link,
                        holder: holder.clone(),
                        generation: ownership.generation,
                        closer,
                        heard_ms: now,
                        handle,
                    },
                );
                Some(link)
            }
        };
        let Some(link) = bound else {
            // Never bound: give back what this attach claimed.
            let _ = store.release_ownership(doc, ownership.generation).await;
            return Err(Refusal::raced());
        };
        let mut kept = HeldWork::default();
        if let Some((work, written_at_ms)) = kept_back {
            // The row is taken back with the hold; a failed delete leaves a row the next
            // startup finds for an owner it no longer keeps.
            self.delete_hold_row(doc, written_at_ms).await;
            tracing::info!(document = %doc, login = %holder.login, sessions = work.sessions.len(), answers = work.answers.len(), stops = work.stops.len(), "the holder's client is back: its hold ends");
            kept = work;
        }
        self.announce(doc);
        self.emit(PlannerEvent::Attached {
            document: doc,
            login: holder.login.clone(),
            generation: ownership.generation,
        });
        tracing::info!(document = %doc, login = %holder.login, generation = ownership.generation, link, "Planner attached");
        Ok(Bound {
            link,
            generation: ownership.generation,
            closing,
            kept,
        })
    }

    /// A reattach by `account_id` arrived: if the document is in that account's grace period,
    /// the period is held open until [`Planners::drop_hold`], so an attach that arrived in time
    /// keeps its generation however long its checks take.
    pub fn hold_grace(&self, doc: Uuid, account_id: Uuid) -> Option<GraceHold> {
        if self.planted.grace_hold_off {
            return None;
        }
        let mut table = self.lock();
        match table.slots.get_mut(&doc) {
            Some(Slot::Grace {
                holder,
                timer,
                holds,
                ..
            }) if holder.account_id == account_id => {
                *holds += 1;
                Some(GraceHold { doc, timer: *timer })
            }
            _ => None,
        }
    }

    /// The held reattach is done (bound or refused). If the period ran out meanwhile and no other
    /// hold remains, the ownership is released now.
    pub async fn drop_hold(&self, hold: GraceHold) {
        let doc = hold.doc;
        let _gate = self.gates.lock(doc).await;
        let generation = {
            let mut table = self.lock();
            match table.slots.get_mut(&doc) {
                Some(Slot::Grace {
                    timer,
                    holds,
                    lapsed,
                    generation,
                    ..
                }) if *timer == hold.timer => {
                    *holds = holds.saturating_sub(1);
                    if *holds > 0 || !*lapsed {
                        return;
                    }
                    let generation = *generation;
                    table.slots.remove(&doc);
                    generation
                }
                _ => return,
            }
        };
        self.grace_over(doc, generation).await;
    }

    /// A grace period is over (its slot already removed): release under its generation and tell
    /// the room.
    async fn grace_over(&self, doc: Uuid, generation: i64) {
        self.release(doc, generation).await;
        tracing::info!(document = %doc, generation, "grace period ended; Planner released");
        self.announce(doc);
    }

    /// The login of another account holding `doc` (attached or in its grace period), if any:
    /// an attach of `account_id` arriving now is refused `planner-attached` without further checks.
    pub fn held_by_other(&self, doc: Uuid, account_id: Uuid) -> Option<String> {
        self.lock()
            .slots
            .get(&doc)
            .map(Slot::holder)
            .filter(|h| h.account_id != account_id)
            .map(|h| h.login.clone())
    }

    /// The link heard from its client at `now_ms`.
    pub fn heard(&self, doc: Uuid, link: u64, now_ms: UnixMillis) {
        if let Some(Slot::Attached {
            link: l, heard_ms, ..
        }) = self.lock().slots.get_mut(&doc)
        {
            if *l == link {
                *heard_ms = now_ms;
            }
        }
    }

    /// The attached link of `doc`, for the harness.
    pub fn link_for(&self, doc: Uuid) -> Option<LinkHandle> {
        match self.lock().slots.get(&doc) {
            Some(Slot::Attached { handle, .. }) => Some(handle.clone()),
            _ => None,
        }
    }

    /// When the attached link last heard from its client, if one is attached.
    pub fn last_heard_ms(&self, doc: Uuid) -> Option<UnixMillis> {
        match self.lock().slots.get(&doc) {
            Some(Slot::Attached { heard_ms, .. }) => Some(*heard_ms),
            _ => None,
        }
    }

    /// A link ended on its own: its ownership is kept for `PLANNER_ATTACH_GRACE_MS` for the
    /// same account, then released under its generation.
    pub async fn link_ended(self: &Arc<Self>, doc: Uuid, link: u64, how: LinkEnd) {
        let _gate = self.gates.lock(doc).await;
        {
            let mut table = self.lock();
            let Some(Slot::Attached {
                link: current,
                holder,
                generation,
                heard_ms,
                ..
            }) = table.slots.get(&doc)
            else {
                return;
            };
            if *current != link {
                return;
            }
            let (holder, generation, seen) = (holder.clone(), *generation, *heard_ms);
            let how = match how {
                LinkEnd::Detached => "detached",
                LinkEnd::Dropped => "dropped",
            };
            self.begin_grace(&mut table, doc, holder, generation, how, seen);
        }
        self.announce(doc);
    }

    /// Starts `doc`'s grace period for `holder` (the gate held): `PLANNER_ATTACH_GRACE_MS` from
    /// now, then a release under `generation`. `how` says what ended the link, for the log.
    fn begin_grace(
        self: &Arc<Self>,
        table: &mut Table,
        doc: Uuid,
        holder: Holder,
        generation: i64,
        how: &str,
        last_seen_ms: UnixMillis,
    ) {
        let grace_ms = self.attach_grace_ms;
        let until_ms = self.clock.now_ms() + grace_ms as i64;
        let timer = table.id();
        let planners = self.clone();
        let task = self.after(
            grace_ms,
            async move { planners.grace_ended(doc, timer).await },
        );
        tracing::info!(document = %doc, login = %holder.login, how, until_ms, "Planner link ended; grace period started");
        self.emit(PlannerEvent::GraceStarted {
            document: doc,
            login: holder.login.clone(),
            how: how.to_owned(),
            until_ms,
        });
        table.slots.insert(
            doc,
            Slot::Grace {
                holder,
                generation,
                until_ms,
                timer,
                task,
                holds: 0,
                lapsed: false,
                last_seen_ms,
            },
        );
    }

    /// A Stop withdrew the last thing `doc`'s hold kept for its client (AO-12): the hold ends
    /// and the grace period runs, as for a detach. Nothing happens unless the Planner is held.
    pub async fn hold_emptied(self: &Arc<Self>, doc: Uuid) {
        let _gate = self.gates.lock(doc).await;
        let written_at_ms = {
            let mut table = self.lock();
            if !matches!(table.slots.get(&doc), Some(Slot::Held { .. })) {
                return;
            }
            let Some(Slot::Held {
                holder,
                generation,
                written_at_ms,
                window,
                last_seen_ms,
                ..
            }) = table.slots.remove(&doc)
            else {
                return;
            };
            if let Some(w) = window {
                w.end();
            }
            self.begin_grace(&mut table, doc, holder, generation, "emptied", last_seen_ms);
            written_at_ms
        };
        self.delete_hold_row(doc, written_at_ms).await;
        self.announce(doc);
    }

    async fn grace_ended(&self, doc: Uuid, timer: u64) {
        let _gate = self.gates.lock(doc).await;
        let generation = {
            let mut table = self.lock();
            match table.slots.get_mut(&doc) {
                Some(Slot::Grace {
                    timer: t,
                    holds,
                    lapsed,
                    ..
                }) if *t == timer && *holds > 0 => {
                    // A reattach that arrived in time is being checked: it decides.
                    *lapsed = true;
                    return;
                }
                Some(Slot::Grace {
                    timer: t,
                    generation,
                    ..
                }) if *t == timer => {
                    let generation = *generation;
                    table.slots.remove(&doc);
                    generation
                }
                // A newer attach or a release replaced this grace: nothing to do.
                _ => return,
            }
        };
        self.grace_over(doc, generation).await;
    }

    /// Takes `doc`'s slot out if `pick` accepts it, closing an attached link with `closing`,
    /// releases the ownership in storage and tells the room. True if something was held.
    async fn take(&self, doc: Uuid, closing: Closing, pick: impl Fn(&Slot) -> bool) -> bool {
        let _gate = self.gates.lock(doc).await;
        let slot = {
            let mut table = self.lock();
            match table.slots.get(&doc) {
                Some(slot) if pick(slot) => table.slots.remove(&doc),
                _ => None,
            }
        };
        let Some(slot) = slot else {
            return false;
        };
        let generation = match slot {
            Slot::Attached {
                generation, closer, ..
            } => {
                let _ = closer.try_send(closing);
                generation
            }
            Slot::Grace {
                generation, task, ..
            } => {
                task.abort();
                generation
            }
            // An explicit act ends a hold (AO-12): its row goes too, and what it kept for its
            // client is let go.
            Slot::Held {
                generation,
                written_at_ms,
                window,
                work,
                ..
            } => {
                if let Some(w) = window {
                    w.end();
                }
                self.delete_hold_row(doc, written_at_ms).await;
                if let Some(ended) = self.hold_ended.get() {
                    ended(doc, work, closing.message.clone());
                }
                generation
            }
        };
        self.release(doc, generation).await;
        self.announce(doc);
        true
    }

    /// Ends a login: this process forgets it first (so nothing new binds to it, and a sign-out
    /// leaves its tombstone), then every Planner it owns is closed and freed, then the store
    /// records a sign-out. `Err` when that record failed: the login is ended in this process all
    /// the same and its cookie restores nothing; the write is retried.
    pub async fn end_login(
        &self,
        live: &LiveLogin,
        why: LoginEnd,
    ) -> Result<(), SignOutNotRecorded> {
        if self.sign_ins.forget_ended(live, why) {
            self.emit(PlannerEvent::LoginEnded {
                login: live.account.login.clone(),
                how: why.word().to_owned(),
            });
        }
        self.login_ended(live.id, live.machine.is_some(), why).await;
        self.token_retired(live.id);
        self.sign_ins.record_end(live, why).await
    }

    /// When the first login this process holds expires.
    pub fn next_login_expiry(&self) -> Option<UnixMillis> {
        self.sign_ins.next_expiry()
    }

    /// Ends every login this process holds whose expiry has passed, as [`Planners::end_login`]
    /// does (its links close, its sockets hear, its token is forgotten). How many it ended.
    pub async fn end_expired_logins(&self) -> usize {
        let expired = self.sign_ins.expired(self.clock.now_ms());
        for live in &expired {
            // An expiry writes nothing, so it cannot fail to be recorded.
            let _ = self.end_login(live, LoginEnd::Expired).await;
        }
        expired.len()
    }

    /// A login ended (a browser's sign-out or expiry, a machine revoked): every Planner it owns
    /// is closed and freed.
    async fn login_ended(&self, login_id: Uuid, machine: bool, why: LoginEnd) {
        let docs: Vec<Uuid> = {
            let table = self.lock();
            table
                .slots
                .iter()
                .filter(|(_, s)| s.holder().browser_login_id == login_id)
                .map(|(d, _)| *d)
                .collect()
        };
        for doc in docs {
            self.revoke_count(doc);
            let (code, message) = match (why, machine) {
                (LoginEnd::MachineRevoked, _) => (ErrorCode::AccessRevoked, "The machine was revoked, or GitHub no longer accepts its authorization, which ends this Planner link; pair the machine again to use it."),
                (_, true) => (ErrorCode::SignInRequired, "The machine's delegated login reached its lifetime, which ends this Planner link; the machine's backend attaches again with its credential."),
                (LoginEnd::SignedOut, false) => (ErrorCode::SignInRequired, "The owner's browser signed out, which ends this Planner link; sign in again and reattach."),
                (LoginEnd::Expired, false) => (ErrorCode::SignInRequired, "The owner's browser sign-in expired, which ends this Planner link; sign in again and reattach."),
                (LoginEnd::CredentialRevoked, false) => (ErrorCode::SignInRequired, "GitHub no longer renews the owner's browser sign-in, which ends this Planner link; sign in again and reattach."),
            };
            self.take(
                doc,
                Closing {
                    code,
                    message: message.to_owned(),
                },
                |s| s.holder().browser_login_id == login_id,
            )
            .await;
        }
        // Attaches of this login still being checked must not bind: the session table no
        // longer holds it, which `attach` checks before binding.
    }

    /// A repository writer reset the Planner: the link closes (4410) and the document is free.
    /// True if anything was held, in this process or in storage.
    pub async fn reset(&self, doc: Uuid) -> Result<bool, StoreError> {
        self.revoke_count(doc);
        let took = self
            .take(
                doc,
                Closing {
                    code: ErrorCode::PlannerReleased,
                    message: "A repository writer reset this document's Planner; attach again to take it back.".to_owned(),
                },
                |_| true,
            )
            .await;
        if took {
            return Ok(true);
        }
        // Nothing in this process: clear an owner storage may still name.
        let _gate = self.gates.lock(doc).await;
        let ownership = self.store.ownership(doc).await?;
        if ownership.holder.is_some() {
            self.store
                .release_ownership(doc, ownership.generation)
                .await?;
            self.announce(doc);
            return Ok(true);
        }
        Ok(false)
    }

    /// A person chose another machine for the document (or none), or Default machine let it
    /// go: a link, grace period or hold of the machine's delegated login `login_id` ends (AO-12),
    /// closing 4410 with `message`.
    pub async fn machine_moved(&self, doc: Uuid, login_id: Uuid, message: &str) -> bool {
        // An attach of the old machine still being checked must not bind either.
        self.revoke_count(doc);
        self.take(
            doc,
            Closing {
                code: ErrorCode::PlannerReleased,
                message: message.to_owned(),
            },
            |s| s.holder().browser_login_id == login_id,
        )
        .await
    }

    /// The paired machine `machine` was revoked (or GitHub refused its authorization): every
    /// hold that names it ends (AO-12), as its delegated logins' links did.
    pub async fn machine_revoked(&self, machine: Uuid) {
        let docs: Vec<Uuid> = self
            .lock()
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Held { machine: Some(m), .. } if *m == machine))
            .map(|(d, _)| *d)
            .collect();
        for doc in docs {
            self.revoke_count(doc);
            self.take(
                doc,
                Closing {
                    code: ErrorCode::AccessRevoked,
                    message: "The machine was revoked, which ends its hold of this Planner."
                        .to_owned(),
                },
                |s| matches!(s, Slot::Held { machine: Some(m), .. } if *m == machine),
            )
            .await;
        }
    }

    /// The machine whose delegated login `holder` is, if it is one this process holds.
    fn machine_of(&self, holder: &Holder, now: UnixMillis) -> Option<Uuid> {
        self.sign_ins
            .get_live(holder.browser_login_id, now)
            .and_then(|l| l.machine)
    }

    /// The document was archived: its link closes (4404) and its Planner is freed.
    pub async fn archived(&self, doc: Uuid) {
        self.revoke_count(doc);
        self.take(
            doc,
            Closing {
                code: ErrorCode::DocumentNotFound,
                message: "This document was archived, which ends its Planner link.".to_owned(),
            },
            |_| true,
        )
        .await;
    }

    /// `doc`'s tree is served by another process now (`PROCESSES=many`): its link here closes
    /// `unavailable`, to attach again where the tree is served, and this process forgets its
    /// slot and its wait for a machine without writing — the process serving the tree now owns
    /// their rows and rebuilds its holds from them. So a tree that comes back here later is
    /// rebuilt from storage, with nothing stale kept.
    pub async fn moved(&self, doc: Uuid) {
        let _gate = self.gates.lock(doc).await;
        let slot = {
            let mut table = self.lock();
            table.starting.remove(&doc);
            table.slots.remove(&doc)
        };
        match slot {
            Some(Slot::Attached { closer, .. }) => {
                let _ = closer.try_send(Closing {
                    code: ErrorCode::Unavailable,
                    message: "Another server process serves this document now; attach again."
                        .to_owned(),
                });
            }
            Some(Slot::Grace { task, .. }) => task.abort(),
            Some(Slot::Held {
                window: Some(w), ..
            }) => w.end(),
            Some(Slot::Held { window: None, .. }) | None => {}
        }
        self.announce(doc);
    }

    /// A recheck found the link's access gone: it closes (4403 `access-revoked`) and the
    /// document is freed.
    pub async fn revoke_link(&self, doc: Uuid, link: u64, message: String) {
        self.take(
            doc,
            Closing {
                code: ErrorCode::AccessRevoked,
                message,
            },
            |s| matches!(s, Slot::Attached { link: l, .. } if *l == link),
        )
        .await;
    }

    /// Before a Planner request (`@chopin`) is accepted: the attached link, rechecked as the
    /// periodic recheck would for its owner's sign-in and storage's owner (UNA-03). A link that
    /// fails is closed and freed, and the request refused like one with nothing attached.
    pub async fn attached_for_request(&self, doc: Uuid) -> Result<Holder, NotAttached> {
        let (link, holder, generation) = {
            let table = self.lock();
            match table.slots.get(&doc) {
                Some(Slot::Attached {
                    link,
                    holder,
                    generation,
                    ..
                }) => (*link, holder.clone(), *generation),
                Some(Slot::Grace { holder, .. })
                | Some(Slot::Held {
                    holder,
                    window: None,
                    ..
                }) => {
                    return Err(NotAttached::Away {
                        login: holder.login.clone(),
                    })
                }
                // HO-09 ruling: refused with the "still connecting" words, nothing saved.
                Some(Slot::Held {
                    holder,
                    window: Some(_),
                    ..
                }) => {
                    return Err(NotAttached::Connecting {
                        login: holder.login.clone(),
                    })
                }
                None => return Err(NotAttached::Nothing),
            }
        };
        let now = self.clock.now_ms();
        let signed_in = self
            .sign_ins
            .get_live(holder.browser_login_id, now)
            .is_some();
        let stored = self.store.ownership(doc).await;
        let assigned = matches!(&stored, Ok(o) if o.generation == generation
            && o.holder.as_ref().map(|h| h.account_id) == Some(holder.account_id));
        if signed_in && assigned {
            return Ok(holder);
        }
        let (code, message) = if signed_in {
            (
                ErrorCode::AccessRevoked,
                "Storage no longer names this link's account as the document's Planner owner.",
            )
        } else {
            (ErrorCode::SignInRequired, "The owner's browser sign-in has ended, which ends this Planner link; sign in again and reattach.")
        };
        self.take(
            doc,
            Closing {
                code,
                message: message.to_owned(),
            },
            |s| matches!(s, Slot::Attached { link: l, .. } if *l == link),
        )
        .await;
        Err(NotAttached::Nothing)
    }
}

/// Why a Planner request cannot run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAttached {
    /// Nothing is attached.
    Nothing,
    /// The holder's machine is away (its grace period, or disconnected with work kept).
    Away { login: String },
    /// Inside a deploy's hand-over window, before the holder's client has resumed (HO-09).
    Connecting { login: String },
}

impl NotAttached {
    /// The `planner-not-attached` words (UNA-04, MSG-12 per the UNA-05 ruling).
    pub fn words(&self, document_url: &str) -> String {
        match self {
            NotAttached::Nothing => format!(
                "No Planner is attached to {document_url}. Connect a Planner client to it over the agent connection from a session in a checkout of the repository; that attaches the session as this document's Planner."
            ),
            NotAttached::Away { login } => format!(
                "@{login}'s machine is offline, so this message wasn't sent. Send it again when it's back."
            ),
            NotAttached::Connecting { login } => format!(
                "Still connecting to @{login}'s machine, so this message wasn't sent. Send it again in a moment."
            ),
        }
    }
}

impl Planners {
    /// Releases `doc`'s ownership in storage under `generation`, telling the observer.
    async fn release(&self, doc: Uuid, generation: i64) {
        self.emit(PlannerEvent::Released {
            document: doc,
            generation,
        });
        if let Err(e) = self.store.release_ownership(doc, generation).await {
            tracing::error!(error = %e, document = %doc, generation, "could not release the Planner ownership; a later attach clears it");
        }
    }
}

/// The stored row of `doc`'s hold for `holder`, keeping `work`, written at `written_at_ms`,
/// with a hand-over window until `handover_until_ms` (a cut's) or none.
fn hold_row(
    doc: Uuid,
    holder: &Holder,
    generation: i64,
    work: &HeldWork,
    written_at_ms: UnixMillis,
    handover_until_ms: Option<UnixMillis>,
    machine: Option<Uuid>,
) -> LinkHold {
    LinkHold {
        document_id: doc,
        account_id: holder.account_id,
        login: holder.login.clone(),
        // A paired machine's hold names the machine and no login (AO-21).
        browser_login_id: machine.is_none().then_some(holder.browser_login_id),
        generation,
        held: serde_json::to_string(work).unwrap_or_default(),
        written_at_ms,
        handover_until_ms,
        machine_id: machine,
    }
}

/// The hand-over window a hold gets when a process rebuilds it at `now_ms`: the length the cut
/// wrote with it (`handover_until_ms` − `written_at_ms`, HO-02), to be counted from now (HO-03),
/// if a cut wrote one and the rebuild is at most an hour after the write (HO-04); else none.
pub fn handover_window_ms(row: &LinkHold, now_ms: UnixMillis) -> Option<u64> {
    let until = row.handover_until_ms?;
    if now_ms.saturating_sub(row.written_at_ms) > HANDOVER_REBUILD_LIMIT_MS {
        return None;
    }
    Some(until.saturating_sub(row.written_at_ms).max(0) as u64)
}

/// A resume waiting on its owner's browser sign-in inside a hand-over window (HO-10): what it
/// may take back, and word of the window's end. Dropping it stops counting the wait.
pub struct WindowWait {
    table: Arc<Mutex<Table>>,
    doc: Uuid,
    timer: u64,
    /// The holder's ownership generation, told in `attached`.
    pub generation: i64,
    /// The sessions kept for the client, told in `attached.kept`.
    pub sessions: Vec<String>,
    /// Becomes true when the window ends (or the hold is taken or ended).
    pub ended: tokio::sync::watch::Receiver<bool>,
}

impl Drop for WindowWait {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Slot::Held {
            window: Some(w), ..
        }) = table.slots.get_mut(&self.doc)
        {
            if w.timer == self.timer {
                w.waiting = w.waiting.saturating_sub(1);
            }
        }
    }
}

impl Planners {
    /// The graceful stop is cutting `link` (HO-01, HO-02): its hold is written with the end of
    /// its hand-over window (the write's time plus `HANDOVER_PLANNER_WINDOW_MS`) before the link
    /// is told `going-away`. The window's length to tell the client, or `None` if nothing was
    /// written: under `AUTH_MODE=local` (HO-18), for a link no longer attached, or when the write
    /// failed (logged; the client is then told nothing is kept).
    pub async fn cut(&self, doc: Uuid, link: u64, work: HeldWork) -> Option<u64> {
        let holds = self.holds.as_ref()?;
        let _gate = self.gates.lock(doc).await;
        let (holder, generation) = match self.lock().slots.get(&doc) {
            Some(Slot::Attached {
                link: l,
                holder,
                generation,
                ..
            }) if *l == link => (holder.clone(), *generation),
            _ => return None,
        };
        let now = self.clock.now_ms();
        let window_ms = self.handover_window_ms;
        let until = now.saturating_add(window_ms as i64);
        let machine = self.machine_of(&holder, now);
        let hold = hold_row(doc, &holder, generation, &work, now, Some(until), machine);
        match holds.put_link_hold(&hold).await {
            Ok(()) => {
                tracing::info!(document = %doc, login = %holder.login, sessions = work.sessions.len(), window_ms, "the stop cut a Planner link; its hold is written for the next process");
                self.emit(PlannerEvent::HoldWritten {
                    document: doc,
                    login: holder.login,
                    until_ms: hold.handover_until_ms,
                });
                Some(window_ms)
            }
            Err(e) => {
                tracing::error!(document = %doc, login = %holder.login, error = %e, "could not write the cut link's hold; its client is told nothing is kept");
                None
            }
        }
    }

    /// A link that offered `resumable-sessions` dropped unexpectedly while its client held work
    /// (a kept session): the account keeps the Planner with no deadline, as the document's
    /// disconnected Planner (AO-11, AO-14), and the hold is written (AO-18) so a restart keeps
    /// it too. No grace period runs.
    pub async fn link_dropped_with_work(&self, doc: Uuid, link: u64, work: HeldWork) {
        let _gate = self.gates.lock(doc).await;
        let (holder, generation, seen) = match self.lock().slots.get(&doc) {
            Some(Slot::Attached {
                link: l,
                holder,
                generation,
                heard_ms,
                ..
            }) if *l == link => (holder.clone(), *generation, *heard_ms),
            _ => return,
        };
        let now = self.clock.now_ms();
        let machine = self.machine_of(&holder, now);
        if let Some(holds) = &self.holds {
            let hold = hold_row(doc, &holder, generation, &work, now, None, machine);
            if let Err(e) = holds.put_link_hold(&hold).await {
                tracing::error!(document = %doc, login = %holder.login, error = %e, "could not write a dropped link's hold; it is kept in this process only");
            }
        }
        tracing::info!(document = %doc, login = %holder.login, sessions = work.sessions.len(), "a resumable Planner link dropped with work kept; the Planner is held with no deadline");
        self.emit(PlannerEvent::HoldKept {
            document: doc,
            login: holder.login.clone(),
        });
        self.lock().slots.insert(
            doc,
            Slot::Held {
                holder,
                generation,
                work,
                written_at_ms: now,
                window: None,
                last_seen_ms: seen,
                machine,
            },
        );
        self.announce(doc);
    }

    /// At startup, once the writer lease is held and the owners a hold keeps were kept (AO-20):
    /// every stored hold becomes a suspended hold (AO-19). A hold a cut wrote, rebuilt within an
    /// hour of the write (HO-04), is given a hand-over window of the length the cut wrote,
    /// counted from now (HO-03); its row is rewritten without the window first (HO-05; a failed
    /// rewrite is logged, and the window is still given). Every other hold is disconnected
    /// (HO-06). A hold whose owner storage no longer names is deleted. How many were rebuilt.
    pub async fn rebuild_holds(self: &Arc<Self>) -> Result<usize, StoreError> {
        self.rebuild_holds_in(crate::store::Reach::Every).await
    }

    /// [`Planners::rebuild_holds`] of every document, or of one (a process taking a document
    /// over from another, `PROCESSES=many`).
    pub async fn rebuild_holds_in(
        self: &Arc<Self>,
        reach: crate::store::Reach,
    ) -> Result<usize, StoreError> {
        let Some(holds) = self.holds.clone() else {
            return Ok(0);
        };
        let mut rebuilt = 0;
        let rows = holds.link_holds().await?;
        for row in rows.into_iter().filter(|r| reach.covers(r.document_id)) {
            let doc = row.document_id;
            let ownership = self.store.ownership(doc).await?;
            let owner_kept = ownership.generation == row.generation
                && ownership.holder.as_ref().is_some_and(|h| {
                    h.account_id == row.account_id
                        && Some(h.browser_login_id) == row.browser_login_id
                });
            // A paired machine's hold is kept without its owner, for the machine's backend to
            // take over with its credential (AO-21); its owner login is never kept.
            let Some(browser_login_id) = row
                .browser_login_id
                .filter(|_| owner_kept)
                .or(row.machine_id.map(|_| Uuid::nil()))
            else {
                tracing::info!(document = %doc, login = %row.login, "a stored hold whose owner a restart could not keep (no stored sign-in credential); it is dropped");
                self.delete_hold_row(doc, row.written_at_ms).await;
                continue;
            };
            let work: HeldWork = serde_json::from_str(&row.held).unwrap_or_else(|e| {
                tracing::warn!(document = %doc, error = %e, "a stored hold's work could not be read; it is rebuilt holding nothing");
                HeldWork::default()
            });
            let now = self.clock.now_ms();
            let window_ms = handover_window_ms(&row, now);
            if row.handover_until_ms.is_some() && window_ms.is_none() {
                tracing::info!(document = %doc, login = %row.login, written_at_ms = row.written_at_ms, "a cut's hold rebuilt more than an hour after it was written gets no hand-over window");
            }
            if window_ms.is_some() {
                // Only this process gives the window: the row loses it before the hold shows.
                if let Err(e) = holds.end_handover(doc, row.written_at_ms).await {
                    tracing::error!(document = %doc, error = %e, "could not rewrite a rebuilt hold without its window; the window is given all the same");
                }
            }
            let holder = Holder {
                account_id: row.account_id,
                login: row.login.clone(),
                browser_login_id,
            };
            let window = window_ms.map(|ms| self.start_window(doc, ms));
            let until_ms = window.as_ref().map(|w| w.until_ms);
            self.lock().slots.insert(
                doc,
                Slot::Held {
                    holder,
                    generation: row.generation,
                    work,
                    written_at_ms: row.written_at_ms,
                    window,
                    last_seen_ms: row.written_at_ms,
                    machine: row.machine_id,
                },
            );
            tracing::info!(document = %doc, login = %row.login, ?until_ms, "a stored Planner hold is rebuilt");
            self.emit(PlannerEvent::HoldRebuilt {
                document: doc,
                login: row.login,
                until_ms,
            });
            self.announce(doc);
            rebuilt += 1;
        }
        Ok(rebuilt)
    }

    /// Runs `then` `ms` from now on the shutdown tracker, unless the process starts stopping
    /// first: a stopping process releases and disconnects nothing; the next one decides.
    fn after(
        &self,
        ms: u64,
        then: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::AbortHandle {
        let stopping = self.shutdown.stopping();
        self.shutdown
            .spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_millis(ms)) => then.await,
                    () = stopping => {}
                }
            })
            .abort_handle()
    }

    /// A hand-over window of `window_ms` for `doc`, from now.
    fn start_window(self: &Arc<Self>, doc: Uuid, window_ms: u64) -> Window {
        let timer = self.lock().id();
        let until_ms = self.clock.now_ms().saturating_add(window_ms as i64);
        let planners = self.clone();
        let task = self.after(
            window_ms,
            async move { planners.window_ended(doc, timer).await },
        );
        Window {
            until_ms,
            timer,
            task,
            ended: tokio::sync::watch::channel(false).0,
            waiting: 0,
        }
    }

    /// A hand-over window ran out with no resume (HO-13): the hold is disconnected, the room
    /// told, and the miss logged with its cause.
    async fn window_ended(&self, doc: Uuid, timer: u64) {
        let _gate = self.gates.lock(doc).await;
        let (login, waiting) = {
            let mut table = self.lock();
            match table.slots.get_mut(&doc) {
                Some(Slot::Held { holder, window, .. })
                    if window.as_ref().is_some_and(|w| w.timer == timer) =>
                {
                    let Some(w) = window.take() else { return };
                    let _ = w.ended.send(true);
                    (holder.login.clone(), w.waiting)
                }
                _ => return,
            }
        };
        let cause = if waiting > 0 {
            "the owner's browser sign-in was not back"
        } else {
            "the client was not back"
        };
        tracing::warn!(document = %doc, %login, cause, "the hand-over window ended with no resume; the Planner is held disconnected");
        self.emit(PlannerEvent::HandoverMissed {
            document: doc,
            login,
            cause: cause.to_owned(),
        });
        self.announce(doc);
    }

    /// A resume of `account_id` that arrived without a live browser sign-in: if `doc` is in that
    /// account's hand-over window, it may wait for the sign-in (HO-10) until the window ends.
    pub fn await_window(&self, doc: Uuid, account_id: Uuid) -> Option<WindowWait> {
        let mut table = self.lock();
        match table.slots.get_mut(&doc) {
            Some(Slot::Held {
                holder,
                generation,
                work,
                window: Some(w),
                ..
            }) if holder.account_id == account_id => {
                w.waiting += 1;
                Some(WindowWait {
                    table: self.table.clone(),
                    doc,
                    timer: w.timer,
                    generation: *generation,
                    sessions: work.sessions.clone(),
                    ended: w.ended.subscribe(),
                })
            }
            _ => None,
        }
    }

    /// The questions each hold in this process kept for its client, by document.
    pub fn held_questions(&self) -> Vec<(Uuid, Vec<HeldQuestion>)> {
        self.lock()
            .slots
            .iter()
            .filter_map(|(doc, slot)| match slot {
                Slot::Held { work, .. } if !work.questions.is_empty() => {
                    Some((*doc, work.questions.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether `doc` is in a hand-over window now.
    pub fn in_window(&self, doc: Uuid) -> bool {
        matches!(
            self.lock().slots.get(&doc),
            Some(Slot::Held {
                window: Some(_),
                ..
            })
        )
    }

    /// Deletes `doc`'s stored hold if it is still the one written at `written_at_ms`.
    async fn delete_hold_row(&self, doc: Uuid, written_at_ms: UnixMillis) {
        if let Some(holds) = &self.holds {
            if let Err(e) = holds.delete_link_hold(doc, written_at_ms).await {
                tracing::error!(document = %doc, error = %e, "could not delete a Planner hold's row; the next startup finds it");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_at(written_at_ms: UnixMillis, window_ms: i64) -> LinkHold {
        LinkHold {
            document_id: Uuid::from_u128(1),
            account_id: Uuid::from_u128(2),
            login: "mona".into(),
            browser_login_id: Some(Uuid::from_u128(3)),
            generation: 1,
            held: "{}".into(),
            written_at_ms,
            handover_until_ms: Some(written_at_ms + window_ms),
            machine_id: None,
        }
    }

    #[test]
    fn ho_04_a_hold_rebuilt_one_hour_after_the_cut_gets_its_window_and_1_ms_later_none() {
        let row = cut_at(1_000, 60_000);
        assert_eq!(handover_window_ms(&row, 1_000 + 3_600_000), Some(60_000));
        assert_eq!(handover_window_ms(&row, 1_000 + 3_600_001), None);
    }

    #[test]
    fn ho_03_the_window_is_the_length_the_cut_wrote_whenever_it_is_rebuilt() {
        // However long the lease release and the takeover took, the whole length is given, to
        // be counted from the rebuild (HO-01, HO-03).
        let row = cut_at(1_000, 45_000);
        assert_eq!(handover_window_ms(&row, 1_000), Some(45_000));
        assert_eq!(handover_window_ms(&row, 1_000 + 44_999), Some(45_000));
        assert_eq!(handover_window_ms(&row, 1_000 + 600_000), Some(45_000));
    }

    #[test]
    fn ho_06_a_hold_without_a_window_gets_none() {
        let row = LinkHold {
            handover_until_ms: None,
            ..cut_at(1_000, 60_000)
        };
        assert_eq!(handover_window_ms(&row, 1_001), None);
    }
}
