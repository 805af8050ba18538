//! Who holds each document's Planner in this process, and what the room is told about it.
//!
//! Owns: the attachment table (a document is attached to one link, held in its grace period
//! after a detach or drop, or free), binding an attach through the generation-guarded storage
//! claim, the grace timer and its release *under the generation it was started for*, closing a
//! link when its owner's sign-in ends, a writer resets the Planner, the document is archived or
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
//! Bounds: the table keeps a document only while something uses it — a slot (attached or in its
//! grace period), a gate held or waited for, a revocation watch alive, a room listening to its
//! presence (rooms nobody listens to are dropped by [`Planners::tidy`]) — so it shrinks back to
//! empty when the process is idle.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use chopin_protocol::agent::{ErrorCode, RefusalReason};
use serde::Serialize;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::config::Planted;
use crate::harness::port::AgentLinks;
pub use crate::harness::port::{LinkCommand, LinkHandle};
use crate::identity::sign_ins::{LiveLogin, LoginEnd, SignIns, SignOutNotRecorded};
use crate::observe::{Observer, PlannerEvent};
use crate::runtime::fanout;
use crate::runtime::gates::Gates;
use crate::runtime::{SharedClock, Shutdown};
use crate::store::{Claim, Holder, OwnershipStore, StoreError, UnixMillis};

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PresenceState {
    /// A client is attached.
    Attached,
    /// The client detached or dropped; its account may come back until `until`.
    Detached,
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
}

/// How a link ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEnd {
    /// The client sent `detach`.
    Detached,
    /// The connection dropped, timed out or closed without `detach`.
    Dropped,
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
    },
}

/// A reattach that arrived within its account's grace period (see [`Planners::hold_grace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraceHold {
    doc: Uuid,
    timer: u64,
}

impl Slot {
    fn holder(&self) -> &Holder {
        match self {
            Slot::Attached { holder, .. } | Slot::Grace { holder, .. } => holder,
        }
    }

    fn presence(&self) -> Presence {
        match self {
            Slot::Attached { holder, .. } => Presence {
                state: PresenceState::Attached,
                login: Some(holder.login.clone()),
                until: None,
            },
            Slot::Grace {
                holder, until_ms, ..
            } => Presence {
                state: PresenceState::Detached,
                login: Some(holder.login.clone()),
                until: Some(*until_ms),
            },
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
    next_id: u64,
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
    store: Arc<dyn OwnershipStore>,
    clock: SharedClock,
    sign_ins: Arc<SignIns>,
    shutdown: Shutdown,
    /// `PLANNER_ATTACH_GRACE_MS`.
    attach_grace_ms: u64,
    /// Bugs the simulator planted, to show it finds them (always off outside it).
    planted: Planted,
}

/// The attached links, for the harness: the remote adapter reaches a document's client here.
impl AgentLinks for Planners {
    fn link_for(&self, document: Uuid) -> Option<LinkHandle> {
        Planners::link_for(self, document)
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
            store,
            clock,
            sign_ins,
            shutdown,
            attach_grace_ms,
        }
    }

    /// Sends every [`PlannerEvent`] to `observer` from now on (once per process).
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

    /// What the room is told now.
    pub fn presence(&self, doc: Uuid) -> Presence {
        self.lock()
            .slots
            .get(&doc)
            .map(Slot::presence)
            .unwrap_or_else(Presence::none)
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
        let presence = table
            .slots
            .get(&doc)
            .map(Slot::presence)
            .unwrap_or_else(Presence::none);
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
        let holder = Holder {
            account_id: live.account.id,
            login: live.account.login.clone(),
            browser_login_id: live.id,
        };
        {
            let table = self.lock();
            match table.slots.get(&doc) {
                Some(Slot::Attached { holder: h, .. }) => return Err(Refusal::attached(&h.login)),
                Some(Slot::Grace { holder: h, .. }) if h.account_id != holder.account_id => {
                    return Err(Refusal::attached(&h.login))
                }
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
        let bound = {
            let mut table = self.lock();
            let revoked = revocations.revoked(&table);
            let signed_in = self.sign_ins.get_live(live.id, now).is_some();
            if revoked || !signed_in {
                None
            } else {
                let link = table.id();
                if let Some(Slot::Grace { task, .. }) = table.slots.get(&doc) {
                    task.abort();
                }
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
        let grace_ms = self.attach_grace_ms;
        let until_ms = self.clock.now_ms() + grace_ms as i64;
        {
            let mut table = self.lock();
            let Some(Slot::Attached {
                link: current,
                holder,
                generation,
                ..
            }) = table.slots.get(&doc)
            else {
                return;
            };
            if *current != link {
                return;
            }
            let (holder, generation) = (holder.clone(), *generation);
            let timer = table.id();
            let planners = self.clone();
            let stopping = self.shutdown.stopping();
            let task = self
                .shutdown
                .spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_millis(grace_ms)) => {
                            planners.grace_ended(doc, timer).await;
                        }
                        // A stopping process releases nothing: the next one decides.
                        () = stopping => {}
                    }
                })
                .abort_handle();
            tracing::info!(document = %doc, login = %holder.login, ?how, until_ms, "Planner link ended; grace period started");
            self.emit(PlannerEvent::GraceStarted {
                document: doc,
                login: holder.login.clone(),
                how: match how {
                    LinkEnd::Detached => "detached",
                    LinkEnd::Dropped => "dropped",
                }
                .to_owned(),
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
                },
            );
        }
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
        self.login_ended(live.id, why).await;
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

    /// A browser login ended (sign-out or expiry): every Planner it owns is closed and freed.
    async fn login_ended(&self, login_id: Uuid, why: LoginEnd) {
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
            let message = match why {
                LoginEnd::SignedOut => "The owner's browser signed out, which ends this Planner link; sign in again and reattach.",
                LoginEnd::Expired => "The owner's browser sign-in expired, which ends this Planner link; sign in again and reattach.",
                LoginEnd::CredentialRevoked => "GitHub no longer renews the owner's browser sign-in, which ends this Planner link; sign in again and reattach.",
            };
            self.take(
                doc,
                Closing {
                    code: ErrorCode::SignInRequired,
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
                Some(Slot::Grace { holder, .. }) => {
                    return Err(NotAttached::Away {
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
    /// The holder's machine is away (its grace period).
    Away { login: String },
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
