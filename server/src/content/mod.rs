//! Live document content: one yrs document per open document, loaded from storage on demand,
//! persisted update by update, checkpointed, and unloaded when nobody uses it.
//!
//! Owns: [`OpenDocuments`] (the registry of documents open in this process) and
//! [`OpenDocument`] (a document's yrs doc, the relay of Yjs and awareness frames to the sockets
//! editing it, and the rules below). Every user — a socket ([`Membership`]), a turn's host tool,
//! a child tool, an HTTP read — holds a [`DocumentHandle`], counted under the registry's lock;
//! a document is unloaded only when its count is zero and it stayed so for [`IDLE_UNLOAD`].
//! Does not own: who may write (the sockets decide, in the transport layer), what a document's
//! Markdown means (`chopin-document`), or checking bytes from outside ([`guard`]).
//!
//! Invariants:
//! - One live copy per document: a handle is taken under the registry lock, and a load of a
//!   document not open yet happens once, whoever asks meanwhile waits for it.
//! - An update is tried on a shadow copy first ([`guard::Shadow`]); only what applies and
//!   encodes there is journalled, and the store has it *before* it is applied to the live copy
//!   or relayed, so nothing a client has seen relayed is lost by a crash.
//! - Writers do not wait for the disk: checked changes queue in order, and one flush at a time
//!   journals what queued in one store write (a round), then applies and relays it in order. A
//!   round that fails takes every change queued after it along (each was checked on a shadow
//!   holding the lost ones): none is journalled, applied or relayed, and their sockets are told.
//! - A server edit (`edit_plan`, `update_document`) journals the changes queued before it
//!   first, so the journal's order is the order the live copy applies.
//! - A checkpoint covers only journal entries this copy applied, in an unbroken run from the
//!   one it loaded: it never deletes an entry it does not hold.
//! - Loading never fails on a bad journal entry: it is skipped, logged and counted.
//! - A read parses a text once: the reader's analysis is kept beside the text it was made from
//!   and used only while the document's text is that text.

pub mod guard;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use chopin_document::edit::{self, EditBatch, EditOutcome, EditResult, EditTarget};
use chopin_document::reader::Analysis;
use chopin_document::{ydoc, DocumentRef};
use tokio::sync::OnceCell;
use uuid::Uuid;
use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
use yrs::updates::encoder::Encode;
use yrs::{ClientID, Doc, ReadTxn, StateVector, Transact};

use crate::config::Planted;
use crate::runtime::fanout;
use crate::runtime::{SharedClock, SharedEntropy, Shutdown};
use crate::store::{ContentStore, DocumentStore, OwnerGuard, PlanCommit, StoreError, StoreResult};
use guard::{Refusal, Shadow};

/// Why [`OpenDocument::edit_plan`] made no change and has no [`EditResult`] to show for it.
#[derive(Debug, thiserror::Error)]
pub enum EditRefused {
    /// The edit was made under a Planner ownership storage no longer names (released, reset or
    /// claimed anew since the turn began).
    #[error("the document's Planner owner changed during the turn, so the edit was not made")]
    NotOwner,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A document nobody uses is unloaded after this long.
pub const IDLE_UNLOAD: Duration = Duration::from_secs(30);
/// A checkpoint is written after this many journalled updates.
pub const CHECKPOINT_EVERY: u32 = 200;
/// The most changes one journal round takes (the rest wait for the next round).
const ROUND_UPDATES: usize = 256;
/// The most bytes of changes one journal round takes (at least one change, whatever its size).
const ROUND_BYTES: usize = 1024 * 1024;
/// How many changes, and how many bytes of them, may wait for the journal before a writer waits
/// for its own to be saved.
const QUEUED_MAX: usize = 1024;
const QUEUED_BYTES_MAX: usize = 8 * 1024 * 1024;
/// How many relayed frames a slow socket may fall behind before it must resync. Held only while
/// some socket has yet to read them ([`fanout`]), not allocated when the document opens.
const RELAY_BACKLOG: usize = 1024;
/// The most Yjs clients one socket may report awareness for (a browser tab is one).
pub const AWARENESS_CLIENTS_PER_SOCKET: usize = 8;
/// The largest awareness state (its JSON) the server keeps and relays.
pub const AWARENESS_STATE_BYTES: usize = 16 * 1024;
/// The most awareness state one account keeps in one document, over all its sockets (two
/// sockets' worth at most: a person with many tabs open cannot crowd others out).
pub const AWARENESS_ACCOUNT_BYTES: usize = 2 * AWARENESS_CLIENTS_PER_SOCKET * AWARENESS_STATE_BYTES;
/// The most awareness state one document keeps over all its sockets.
pub const AWARENESS_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The largest awareness frame the server sends: a joiner's snapshot comes in as many frames of
/// at most this size as it needs.
pub const AWARENESS_FRAME_BYTES: usize = 128 * 1024;

/// A frame to relay to a document's sockets, with the connection it came from (not sent back).
/// The frame is encoded once; every socket sends the same bytes.
#[derive(Debug, Clone)]
pub struct Relay {
    pub from: u64,
    pub frame: Bytes,
    /// An awareness frame (rather than a document update): a socket that echoes awareness, as
    /// y-websocket's own server does, sends these back to their sender too.
    pub awareness: bool,
    /// Not a frame to send (`frame` is empty) but word that these sockets' updates were not
    /// saved: each must be told and closed, so that its client syncs again.
    pub unsaved: Option<Arc<BTreeSet<u64>>>,
}

impl Relay {
    /// Whether this is word that socket `me`'s updates were not saved.
    pub fn unsaved_for(&self, me: u64) -> bool {
        self.unsaved
            .as_ref()
            .is_some_and(|senders| senders.contains(&me))
    }
}

/// Why an update was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("not a Yjs v1 update: {0}")]
    Malformed(String),
    /// It would leave the document unreadable (yrs panics on it, or on encoding the result).
    #[error("{0}")]
    Poisonous(String),
    /// The document would pass its size limit with it (the words say which).
    #[error("{message}")]
    TooLarge { bytes: usize, message: String },
    /// It depends on changes the document never received (a gap in its client's clock, or
    /// deletions of what is not there), so nothing of it could be integrated and kept.
    #[error("{0}")]
    Gapped(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Refusal> for UpdateError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Malformed(why) => UpdateError::Malformed(why),
            poisonous @ Refusal::Poisonous(_) => UpdateError::Poisonous(poisonous.to_string()),
            gapped @ Refusal::Gapped(_) => UpdateError::Gapped(gapped.to_string()),
            Refusal::TooLarge { bytes, message } => UpdateError::TooLarge { bytes, message },
        }
    }
}

struct Loaded {
    doc: Doc,
    /// Where every update is tried before it is taken.
    shadow: Shadow,
    /// The highest journal seq such that this copy holds every entry up to it.
    applied_upto: i64,
    /// Updates journalled since the last checkpoint.
    since_checkpoint: u32,
    /// Writers' changes taken by the shadow and waiting for the journal, in order.
    queued: Vec<Queued>,
    /// The bytes of the changes in `queued`.
    queued_bytes: usize,
    /// Whether a flush is under way (or promised by whoever took the update that started it).
    flushing: bool,
}

/// A writer's change, checked on the shadow, waiting for the journal.
struct Queued {
    from: u64,
    change: Vec<u8>,
    /// The bytes the writer sent.
    sent: usize,
    /// Told once the change is journalled, applied and relayed, or that it never will be.
    done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// What [`OpenDocument::take_update`] did with an update it did not refuse.
enum Taken {
    /// It changes nothing.
    Unchanged,
    /// Queued for the journal: `saved` resolves when it is journalled and relayed (or failed).
    Queued {
        saved: tokio::sync::oneshot::Receiver<Result<(), StoreError>>,
        /// The taker set `flushing` and must see that a flush runs.
        flush: bool,
        /// The queue is at its bound: the taker waits for `saved` before taking more.
        full: bool,
    },
}

impl Loaded {
    /// Records that the entry at `seq` was applied to this copy.
    fn applied(&mut self, document: Uuid, seq: i64) {
        if seq == self.applied_upto + 1 {
            self.applied_upto = seq;
        } else {
            // Another writer journalled in between: later checkpoints stop short of the gap.
            tracing::warn!(%document, seq, applied_upto = self.applied_upto, "a journal entry this copy does not hold; checkpoints stop before it");
        }
        self.since_checkpoint += 1;
    }
}

/// What every open document reaches: the store and the clock.
struct Deps {
    content: Arc<dyn ContentStore>,
    documents: Arc<dyn DocumentStore>,
    clock: SharedClock,
    /// A bug planted by the simulator (see [`Planted::journal_after_relay`]); always off
    /// outside it.
    journal_after_relay: AtomicBool,
    /// Bugs planted by the simulator in taking an update ([`Planted::journal_whole_state`],
    /// [`Planted::poison_guard_off`]); always off outside it.
    journal_whole_state: AtomicBool,
    poison_guard_off: AtomicBool,
    /// The latest writers' updates taken, as (bytes sent, bytes journalled and relayed), for
    /// the simulator's "bytes bounded" invariant; at most [`ACCEPTED_MEMORY`].
    accepted: Mutex<std::collections::VecDeque<(usize, usize)>>,
    /// Told when a document is opened for a socket, restored or edited (the description
    /// scheduler, living builds); none until [`OpenDocuments::watch`].
    watch: Mutex<Vec<Arc<dyn ContentWatch>>>,
    /// Asked before an edit through the server (the Planner's, MCP's, a job's) whether the plan
    /// is locked against it; none until [`OpenDocuments::lock_edits`].
    lock: std::sync::OnceLock<Arc<dyn EditLock>>,
}

/// What says whether a document's plan is locked against edits made through the server, and
/// why: an implementation run holding its graph (LIFE-65).
#[async_trait::async_trait]
pub trait EditLock: Send + Sync + 'static {
    /// Why `document`'s plan takes no edit now, in words for whoever tried; `None`: it does.
    async fn why_locked(&self, document: Uuid) -> StoreResult<Option<String>>;
}

/// What wants to know that a document was opened for a person or changed: told after the fact,
/// without waiting (the implementation spawns what it does).
pub trait ContentWatch: Send + Sync + 'static {
    /// A socket opened `document`, or it was restored from the archive.
    fn opened(self: Arc<Self>, document: Uuid);
    /// An edit of `document` was committed (a writer's update, a Planner's batch, an MCP
    /// replacement).
    fn edited(self: Arc<Self>, document: Uuid);
}

impl Deps {
    fn watchers(&self) -> Vec<Arc<dyn ContentWatch>> {
        self.watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn opened(&self, document: Uuid) {
        for watch in self.watchers() {
            watch.opened(document);
        }
    }

    fn edited(&self, document: Uuid) {
        for watch in self.watchers() {
            watch.edited(document);
        }
    }
}

/// How many taken updates [`OpenDocuments::accepted_updates`] remembers.
const ACCEPTED_MEMORY: usize = 1024;

/// One open document.
pub struct OpenDocument {
    pub document_id: Uuid,
    deps: Arc<Deps>,
    content: tokio::sync::Mutex<Loaded>,
    /// Held by whoever journals this document's queued changes (one round at a time, in order),
    /// and by a server edit, which waits for the rounds in flight before it commits.
    journal: tokio::sync::Mutex<()>,
    relay: fanout::Sender<Relay>,
    /// The latest awareness state of each Yjs client, by the socket that reported it: a socket
    /// that joins is told everyone present, and a socket that leaves takes its clients along.
    awareness: Mutex<Presence>,
    /// Set once the document is archived: its sockets close.
    archived: tokio::sync::watch::Sender<bool>,
    /// Set once another process serves the document (`PROCESSES=many`): its sockets close, to
    /// reconnect to that process, and this copy is never used again.
    moved: tokio::sync::watch::Sender<bool>,
    /// The source last read and its reader's analysis (lines, blocks and digests, Decisions),
    /// reused by every read until the text changes.
    reading: Mutex<Option<Reading>>,
}

/// A document's awareness: each socket's clients and their states, with the bytes each socket,
/// each account and the whole document hold, so every bound is checked without a walk.
#[derive(Default)]
struct Presence {
    sockets: BTreeMap<u64, SocketPresence>,
    /// Bytes of state kept, by account.
    by_account: BTreeMap<Uuid, usize>,
    /// Bytes of state kept in all.
    total: usize,
}

struct SocketPresence {
    account: Uuid,
    clients: BTreeMap<ClientID, AwarenessUpdateEntry>,
}

impl Presence {
    /// Keeps `entry` for `client` of socket `from` (an account's) if every bound allows;
    /// whether it was kept.
    fn keep(
        &mut self,
        from: u64,
        account: Uuid,
        client: ClientID,
        entry: &AwarenessUpdateEntry,
    ) -> bool {
        let size = entry.json.len();
        let mine = self.sockets.entry(from).or_insert_with(|| SocketPresence {
            account,
            clients: BTreeMap::new(),
        });
        let old = mine.clients.get(&client).map(|e| (e.clock, e.json.len()));
        if old.is_some_and(|(clock, _)| clock > entry.clock) {
            return false;
        }
        let freed = old.map_or(0, |(_, bytes)| bytes);
        let account_bytes = self.by_account.get(&account).copied().unwrap_or(0);
        // `freed` is part of both the account's bytes and the total.
        if size > AWARENESS_STATE_BYTES
            || (old.is_none() && mine.clients.len() >= AWARENESS_CLIENTS_PER_SOCKET)
            || account_bytes + size - freed > AWARENESS_ACCOUNT_BYTES
            || self.total + size - freed > AWARENESS_DOCUMENT_BYTES
        {
            return false;
        }
        mine.clients.insert(client, entry.clone());
        self.by_account
            .insert(account, account_bytes + size - freed);
        self.total = self.total + size - freed;
        true
    }

    /// Takes socket `from`'s clients out.
    fn leave(&mut self, from: u64) -> Option<BTreeMap<ClientID, AwarenessUpdateEntry>> {
        let gone = self.sockets.remove(&from)?;
        let bytes: usize = gone.clients.values().map(|e| e.json.len()).sum();
        self.total -= bytes;
        if let Some(kept) = self.by_account.get_mut(&gone.account) {
            *kept -= bytes;
            if *kept == 0 {
                self.by_account.remove(&gone.account);
            }
        }
        Some(gone.clients)
    }
}

/// A source as the reader reads it: the text and its [`Analysis`], made once per text.
#[derive(Clone)]
pub struct Reading {
    pub source: Arc<str>,
    pub analysis: Arc<Analysis>,
}

impl OpenDocument {
    /// Resolves once the document has been archived (at once if it already was while open).
    /// Cancel-safe; use it in `select!`.
    pub async fn archived(&self) {
        let mut archived = self.archived.subscribe();
        // Only an error if the sender is gone, and this copy holds it.
        let _ = archived.wait_for(|archived| *archived).await;
    }

    /// Resolves once another process serves the document (at once if it already does).
    /// Cancel-safe; use it in `select!`.
    pub async fn moved(&self) {
        let mut moved = self.moved.subscribe();
        let _ = moved.wait_for(|moved| *moved).await;
    }

    /// Frames relayed to this document's sockets from now on.
    pub fn subscribe(&self) -> fanout::Receiver<Relay> {
        self.relay.subscribe()
    }

    /// The Yjs sync step 2 for a client whose state vector is `sv`: what it is missing.
    pub async fn missing_for(&self, sv: &StateVector) -> Vec<u8> {
        let content = self.content.lock().await;
        let txn = content.doc.transact();
        txn.encode_state_as_update_v1(sv)
    }

    /// Everything a client with nothing gets in its sync step 2 — `Some(None)` if yrs cannot
    /// encode the document (it panics doing so) — or `None` when an update holds the document
    /// now (nothing waits for it: for observers outside the server's runtime).
    pub fn try_whole_state(&self) -> Option<Option<Vec<u8>>> {
        let content = self.content.try_lock().ok()?;
        Some(guard::encode_all(&content.doc))
    }

    /// This document's state vector (for its sync step 1).
    pub async fn state_vector(&self) -> StateVector {
        let content = self.content.lock().await;
        let txn = content.doc.transact();
        txn.state_vector()
    }

    /// The document's source text now.
    pub async fn source(&self) -> String {
        let content = self.content.lock().await;
        ydoc::read_source(&content.doc)
    }

    /// The source now with its reader's [`Analysis`]: the one kept from an earlier read while
    /// the text is unchanged (compared in full, so no change can be missed), otherwise made now
    /// (outside the content lock) and kept.
    pub async fn reading(&self) -> Reading {
        let source = self.source().await;
        let kept = self.lock_reading().clone();
        if let Some(kept) = kept.filter(|r| *r.source == *source) {
            return kept;
        }
        let reading = Reading {
            analysis: Arc::new(Analysis::of(&source)),
            source: source.into(),
        };
        *self.lock_reading() = Some(reading.clone());
        reading
    }

    fn lock_reading(&self) -> MutexGuard<'_, Option<Reading>> {
        // A kept reading is whole or absent: a panic cannot leave half of one.
        self.reading.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a writer's update and waits until it is journalled, applied to the live copy and
    /// relayed (as a sync `update` frame carrying yrs's own encoding of the change) to the
    /// document's other sockets. `Ok(false)`: it changes nothing. An update that would poison
    /// the document is refused and changes nothing. A socket does not wait like this
    /// ([`DocumentHandle::queue_update`]); this is for callers that need it saved.
    pub async fn apply_update(&self, from: u64, update: &[u8]) -> Result<bool, UpdateError> {
        match self.take_update(from, update).await? {
            Taken::Unchanged => Ok(false),
            Taken::Queued { saved, flush, .. } => {
                if flush {
                    self.flush().await;
                }
                Self::saved(saved).await?;
                Ok(true)
            }
        }
    }

    async fn saved(
        saved: tokio::sync::oneshot::Receiver<Result<(), StoreError>>,
    ) -> Result<(), StoreError> {
        saved.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "the document's journal stopped before the update was saved".into(),
            ))
        })
    }

    /// Tries a writer's update on the shadow copy and, if it changes something, queues the
    /// change for the journal. Nothing reaches the live copy or a socket until it is journalled.
    async fn take_update(&self, from: u64, update: &[u8]) -> Result<Taken, UpdateError> {
        let mut content = self.content.lock().await;
        let content = &mut *content;
        let planted = guard::Planted {
            whole_state: self.deps.journal_whole_state.load(Ordering::Relaxed),
            unguarded: self.deps.poison_guard_off.load(Ordering::Relaxed),
        };
        let Some(change) = content
            .shadow
            .try_update_as(&content.doc, update, planted)?
        else {
            return Ok(Taken::Unchanged);
        };
        let (done, saved) = tokio::sync::oneshot::channel();
        content.queued_bytes += change.len();
        content.queued.push(Queued {
            from,
            change,
            sent: update.len(),
            done,
        });
        let flush = !std::mem::replace(&mut content.flushing, true);
        Ok(Taken::Queued {
            saved,
            flush,
            full: content.queued.len() >= QUEUED_MAX || content.queued_bytes >= QUEUED_BYTES_MAX,
        })
    }

    /// Journals the queued changes, round after round, until none is left. Each round is one
    /// store write holding every change queued when it began (up to [`ROUND_UPDATES`] and
    /// [`ROUND_BYTES`]); the content lock is free while it is written, so writers keep queueing.
    async fn flush(&self) {
        let _journal = self.journal.lock().await;
        loop {
            let round = {
                let mut content = self.content.lock().await;
                let round = Self::next_round(&mut content);
                if round.is_empty() {
                    content.flushing = false;
                    return;
                }
                round
            };
            let written = self.write_round(&round).await;
            let mut content = self.content.lock().await;
            self.end_round(&mut content, round, written).await;
        }
    }

    /// Journals what is queued while the caller holds the content lock (and the journal's), so
    /// that a server edit commits after every writer's change taken before it.
    async fn flush_locked(&self, content: &mut Loaded) {
        loop {
            let round = Self::next_round(content);
            if round.is_empty() {
                return;
            }
            let written = self.write_round(&round).await;
            self.end_round(content, round, written).await;
        }
    }

    /// The changes the next round journals, oldest first.
    fn next_round(content: &mut Loaded) -> Vec<Queued> {
        let mut bytes = 0;
        let mut take = 0;
        for queued in content.queued.iter().take(ROUND_UPDATES) {
            if take > 0 && bytes + queued.change.len() > ROUND_BYTES {
                break;
            }
            bytes += queued.change.len();
            take += 1;
        }
        content.queued_bytes -= bytes;
        content.queued.drain(..take).collect()
    }

    /// Writes one round to the journal: its seqs, in order.
    async fn write_round(&self, round: &[Queued]) -> Result<Vec<i64>, StoreError> {
        let planted = self.deps.journal_after_relay.load(Ordering::SeqCst);
        if planted {
            // The planted bug: relayed first, journalled a moment later.
            self.relay_round(round);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let changes: Vec<&[u8]> = round.iter().map(|q| q.change.as_slice()).collect();
        let now = self.deps.clock.now_ms();
        self.deps
            .content
            .append_updates(self.document_id, &changes, now)
            .await
    }

    /// Takes a written round into the live copy and relays it; or, if it was not written,
    /// drops it and every change queued after it (each was checked on a shadow that held the
    /// lost ones, and may depend on them), rebuilds the shadow from the live copy, and tells
    /// every socket whose change was dropped.
    async fn end_round(
        &self,
        content: &mut Loaded,
        round: Vec<Queued>,
        written: Result<Vec<i64>, StoreError>,
    ) {
        let seqs = match written {
            Ok(seqs) if seqs.len() == round.len() => seqs,
            outcome => {
                let error = match outcome {
                    Err(e) => e,
                    Ok(_) => StoreError::Backend("the journal numbered a round wrongly".into()),
                };
                let later = std::mem::take(&mut content.queued);
                content.queued_bytes = 0;
                content.shadow = Shadow::of(&content.doc);
                let dropped: Vec<Queued> = round.into_iter().chain(later).collect();
                let senders: BTreeSet<u64> = dropped.iter().map(|q| q.from).collect();
                tracing::error!(document = %self.document_id, error = %error, dropped = dropped.len(), sockets = senders.len(), "writers' updates could not be journalled; nothing after them is relayed, and their sockets are closed to sync again");
                for queued in dropped {
                    let _ = queued.done.send(Err(error.clone()));
                }
                let _ = self.relay.send(Relay {
                    from: 0,
                    frame: Bytes::new(),
                    awareness: false,
                    unsaved: Some(Arc::new(senders)),
                });
                return;
            }
        };
        for (queued, seq) in round.iter().zip(&seqs) {
            if !guard::apply_checked(&content.doc, &queued.change) {
                tracing::error!(document = %self.document_id, seq, "a checked change did not apply to the live copy");
            }
            content.applied(self.document_id, *seq);
        }
        {
            let mut accepted = self
                .deps
                .accepted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for queued in &round {
                if accepted.len() >= ACCEPTED_MEMORY {
                    accepted.pop_front();
                }
                accepted.push_back((queued.sent, queued.change.len()));
            }
        }
        if content.since_checkpoint >= CHECKPOINT_EVERY {
            self.checkpoint(content).await;
        }
        if !self.deps.journal_after_relay.load(Ordering::SeqCst) {
            self.relay_round(&round);
        }
        self.deps.edited(self.document_id);
        for queued in round {
            let _ = queued.done.send(Ok(()));
        }
    }

    /// Relays a round: each run of changes from one socket as one merged update, to the
    /// document's other sockets.
    fn relay_round(&self, round: &[Queued]) {
        for run in round.chunk_by(|a, b| a.from == b.from) {
            if let [one] = run {
                self.relay_update(one.from, &one.change);
                continue;
            }
            let merged =
                guard::guarded(|| yrs::merge_updates_v1(run.iter().map(|q| q.change.as_slice())));
            match merged {
                Some(Ok(merged)) => self.relay_update(run[0].from, &merged),
                _ => run
                    .iter()
                    .for_each(|q| self.relay_update(q.from, &q.change)),
            }
        }
    }

    /// Relays `change` as a sync `update` frame to the document's sockets other than `from` (0:
    /// from no socket, a Planner's edit).
    fn relay_update(&self, from: u64, change: &[u8]) {
        let _ = self.relay.send(Relay {
            from,
            frame: sync_update_frame(change).into(),
            awareness: false,
            unsaved: None,
        });
    }

    /// `edit_plan` against this document: the batch is checked against the source and the document's
    /// plan revision, turned into one yrs change, committed to the store under that revision
    /// (so of two batches made from the same revision exactly one applies), and only then applied
    /// to the open document and relayed to its sockets. With an `owner` guard (a Planner turn's
    /// ownership) the commit lands only while storage still names that owner; otherwise the
    /// batch is refused as [`EditRefused::NotOwner`] and nothing changes.
    pub async fn edit_plan(
        &self,
        document: DocumentRef,
        earlier_urls: &[String],
        batch: &EditBatch,
        owner: Option<&OwnerGuard>,
    ) -> Result<EditResult, EditRefused> {
        self.commit_edit(document, earlier_urls, owner, |target| {
            edit::edit_plan(target, batch)
        })
        .await
    }

    /// MCP `update_document`: the whole source replaced, made from plan revision `revision`,
    /// checked ([`edit::replace_source`]) and committed exactly as [`OpenDocument::edit_plan`]
    /// commits a batch.
    pub async fn replace_source(
        &self,
        document: DocumentRef,
        earlier_urls: &[String],
        revision: u64,
        new_source: &str,
    ) -> Result<EditResult, EditRefused> {
        self.commit_edit(document, earlier_urls, None, |target| {
            edit::replace_source(target, revision, new_source)
        })
        .await
    }

    /// Checks a change against the source and plan revision now (`check`), and commits what it
    /// makes under that revision before the live copy or any socket sees it.
    async fn commit_edit(
        &self,
        document: DocumentRef,
        earlier_urls: &[String],
        owner: Option<&OwnerGuard>,
        check: impl FnOnce(&EditTarget<'_>) -> EditResult,
    ) -> Result<EditResult, EditRefused> {
        let _journal = self.journal.lock().await;
        let mut content = self.content.lock().await;
        let content = &mut *content;
        // Writers' changes taken before this edit are journalled before it.
        self.flush_locked(content).await;
        let current = self
            .deps
            .documents
            .document(self.document_id)
            .await?
            .ok_or(StoreError::NotFound("document"))?;
        let why_locked = match self.deps.lock.get() {
            Some(lock) => lock.why_locked(self.document_id).await?,
            None => None,
        };
        let source = ydoc::read_source(&content.doc);
        let target = EditTarget {
            document: document.clone(),
            earlier_urls,
            revision: current.plan_revision as u64,
            source: &source,
            locked: why_locked.is_some(),
        };
        let mut result = check(&target);
        if let (EditOutcome::Locked { message }, Some(why)) = (&mut result.outcome, why_locked) {
            *message = why;
        }
        let EditOutcome::Applied {
            source: new_source, ..
        } = &result.outcome
        else {
            return Ok(result);
        };
        // The change is made on a copy, so nothing reaches a socket before the store has it.
        let scratch = ydoc::empty_doc(content.doc.client_id().get());
        if let Some(full) = guard::encode_all(&content.doc) {
            guard::apply_checked(&scratch, &full);
        }
        let update = ydoc::replace_source(&scratch, new_source);
        let now = self.deps.clock.now_ms();
        match self
            .deps
            .content
            .commit_plan_edit(self.document_id, current.plan_revision, owner, &update, now)
            .await?
        {
            PlanCommit::Committed { plan_revision, seq } => {
                guard::apply_checked(&content.doc, &update);
                content.shadow.follow(&content.doc, &update);
                content.applied(self.document_id, seq);
                self.relay_update(0, &update);
                if let EditOutcome::Applied { revision, .. } = &mut result.outcome {
                    *revision = plan_revision as u64;
                }
                self.deps.edited(self.document_id);
                Ok(result)
            }
            PlanCommit::Stale { current } => Ok(EditResult {
                document,
                earlier_urls: earlier_urls.to_vec(),
                outcome: EditOutcome::Stale {
                    current_revision: current as u64,
                    op: None,
                    message: format!(
                        "The document changed while this batch was applied (it is now at revision {current}); read it again and redo the batch."
                    ),
                },
            }),
            PlanCommit::NotOwner => Err(EditRefused::NotOwner),
        }
    }

    fn awareness_lock(&self) -> MutexGuard<'_, Presence> {
        self.awareness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a socket's awareness update and relays it to the other sockets (and, for those
    /// that echo, back to it). A socket holds the states of at most
    /// [`AWARENESS_CLIENTS_PER_SOCKET`] Yjs clients, each at most [`AWARENESS_STATE_BYTES`]; an
    /// account at most [`AWARENESS_ACCOUNT_BYTES`] over all its sockets, and the document at
    /// most [`AWARENESS_DOCUMENT_BYTES`]: states past a bound are dropped.
    pub fn relay_awareness(&self, member: &Membership, update: AwarenessUpdate) {
        let from = member.connection;
        let mut taken = BTreeMap::new();
        {
            let mut presence = self.awareness_lock();
            let mut clients: Vec<_> = update.clients.into_iter().collect();
            clients.sort_by_key(|(client, _)| *client);
            for (client, entry) in clients {
                if presence.keep(from, member.account, client, &entry) {
                    taken.insert(client, entry);
                }
            }
        }
        if taken.is_empty() {
            return;
        }
        let _ = self.relay.send(Relay {
            from,
            frame: awareness_frame(&taken).into(),
            awareness: true,
            unsaved: None,
        });
    }

    /// Everyone present, for a socket that just joined: as few awareness frames as fit in
    /// [`AWARENESS_FRAME_BYTES`] each (none when nobody is).
    pub fn awareness_snapshot(&self) -> Vec<Vec<u8>> {
        let clients: Vec<(ClientID, AwarenessUpdateEntry)> = {
            let presence = self.awareness_lock();
            let mut all: Vec<_> = presence
                .sockets
                .values()
                .flat_map(|m| m.clients.iter().map(|(c, e)| (*c, e.clone())))
                .filter(|(_, e)| &*e.json != "null")
                .collect();
            all.sort_by_key(|(c, _)| *c);
            all
        };
        let mut frames = Vec::new();
        let mut batch = BTreeMap::new();
        let mut bytes = 0;
        for (client, entry) in clients {
            // A client's entry costs its state and at most 30 bytes of numbers.
            let cost = entry.json.len() + 30;
            if !batch.is_empty() && bytes + cost > AWARENESS_FRAME_BYTES {
                frames.push(awareness_frame(&std::mem::take(&mut batch)));
                bytes = 0;
            }
            bytes += cost;
            batch.insert(client, entry);
        }
        if !batch.is_empty() {
            frames.push(awareness_frame(&batch));
        }
        frames
    }

    /// A socket left: its clients' awareness is removed for everyone (a `null` state).
    fn leave_awareness(&self, connection: u64) {
        let Some(gone) = self.awareness_lock().leave(connection) else {
            return;
        };
        let clients: BTreeMap<ClientID, AwarenessUpdateEntry> = gone
            .into_iter()
            .filter(|(_, e)| &*e.json != "null")
            .map(|(c, e)| {
                (
                    c,
                    AwarenessUpdateEntry {
                        // The clock a client's removal carries is one past its last; at the
                        // last clock there is none, and the state it leaves is gone anyway.
                        clock: e.clock.saturating_add(1),
                        json: Arc::from("null"),
                    },
                )
            })
            .collect();
        if clients.is_empty() {
            return;
        }
        let _ = self.relay.send(Relay {
            from: connection,
            frame: awareness_frame(&clients).into(),
            awareness: true,
            unsaved: None,
        });
    }

    /// Writes a checkpoint covering the journal entries this copy holds without a break.
    async fn checkpoint(&self, content: &mut Loaded) {
        let Some(encoded) = guard::encode_all(&content.doc) else {
            tracing::error!(document = %self.document_id, "the document could not be encoded; no checkpoint (the journal keeps every update)");
            return;
        };
        match self
            .deps
            .content
            .write_checkpoint(self.document_id, content.applied_upto, &encoded)
            .await
        {
            Ok(()) => content.since_checkpoint = 0,
            Err(e) => {
                tracing::warn!(document = %self.document_id, error = %e, "checkpoint failed; the journal still holds every update")
            }
        }
    }
}

/// lib0's variable-length unsigned integer, as y-protocols frames carry them.
pub(crate) fn write_var_uint(out: &mut Vec<u8>, mut n: u64) {
    while n > 0x7f {
        out.push(0x80 | (n & 0x7f) as u8);
        n >>= 7;
    }
    out.push(n as u8);
}

/// An awareness frame (`[1 = awareness, varUint8Array(update)]`) for `clients`, in client-id
/// order, so the same states always make the same bytes.
pub fn awareness_frame(clients: &BTreeMap<ClientID, AwarenessUpdateEntry>) -> Vec<u8> {
    let mut update = Vec::new();
    write_var_uint(&mut update, clients.len() as u64);
    for (client, entry) in clients {
        write_var_uint(&mut update, client.get());
        write_var_uint(&mut update, u64::from(entry.clock));
        write_var_uint(&mut update, entry.json.len() as u64);
        update.extend_from_slice(entry.json.as_bytes());
    }
    let mut frame = Vec::with_capacity(update.len() + 6);
    write_var_uint(&mut frame, 1);
    write_var_uint(&mut frame, update.len() as u64);
    frame.extend_from_slice(&update);
    frame
}

/// A sync `update` frame (`[0 = sync, 2 = update, buf]`) carrying `update`.
pub fn sync_update_frame(update: &[u8]) -> Vec<u8> {
    yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update.to_vec())).encode_v1()
}

/// A document's place in the registry: its copy once loaded, and how many use it.
struct Slot {
    /// Filled once by the first user's load; everyone else waits for it.
    cell: Arc<OnceCell<Arc<OpenDocument>>>,
    users: usize,
    /// Bumped by every new user, so an idle timer started earlier knows it is stale.
    taken: u64,
}

/// The documents open in this process.
pub struct OpenDocuments {
    slots: Mutex<BTreeMap<Uuid, Slot>>,
    /// Connection ids of the sockets that join, never reused by this registry.
    next_connection: AtomicU64,
    /// Journal entries skipped on load because they would poison their document.
    skipped_entries: AtomicU64,
    deps: Arc<Deps>,
    entropy: SharedEntropy,
    shutdown: Shutdown,
}

/// One use of an open document: it stays loaded while any handle lives. Derefs to the
/// [`OpenDocument`].
pub struct DocumentHandle {
    document: Arc<OpenDocument>,
    registry: Arc<OpenDocuments>,
}

impl Deref for DocumentHandle {
    type Target = OpenDocument;
    fn deref(&self) -> &OpenDocument {
        &self.document
    }
}

impl DocumentHandle {
    /// Takes a writer's update without waiting for the journal: it is checked on the shadow copy
    /// now (a refusal is answered now) and journalled, applied and relayed by this document's
    /// flush, in order, with whatever else was queued meanwhile (one store write, one relayed
    /// frame per writer). A socket whose change is then not saved hears it through its relay
    /// ([`Relay::unsaved_for`]). Waits for its change only while [`QUEUED_MAX`] changes or
    /// [`QUEUED_BYTES_MAX`] bytes are queued, so a document's queue stays bounded.
    pub async fn queue_update(&self, from: u64, update: &[u8]) -> Result<bool, UpdateError> {
        match self.take_update(from, update).await? {
            Taken::Unchanged => Ok(false),
            Taken::Queued { saved, flush, full } => {
                if flush {
                    let handle = self.another();
                    self.registry
                        .shutdown
                        .spawn(async move { handle.flush().await });
                }
                if full {
                    OpenDocument::saved(saved).await?;
                }
                Ok(true)
            }
        }
    }

    /// Another use of the same document (counted: it stays loaded while this one lives too).
    fn another(&self) -> DocumentHandle {
        let document_id = self.document.document_id;
        if let Some(slot) = self.registry.lock().get_mut(&document_id) {
            slot.users += 1;
            slot.taken += 1;
        }
        DocumentHandle {
            document: self.document.clone(),
            registry: self.registry.clone(),
        }
    }
}

impl Drop for DocumentHandle {
    fn drop(&mut self) {
        self.registry.release(self.document.document_id);
    }
}

/// A socket's place in an open document: a handle, and the socket's awareness, removed for
/// everyone when it leaves.
pub struct Membership {
    pub document: DocumentHandle,
    pub connection: u64,
    /// The account the socket is signed in as: awareness is bounded per account too.
    pub account: Uuid,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.document.leave_awareness(self.connection);
    }
}

impl OpenDocuments {
    pub fn new(
        content: Arc<dyn ContentStore>,
        documents: Arc<dyn DocumentStore>,
        clock: SharedClock,
        entropy: SharedEntropy,
        shutdown: Shutdown,
    ) -> Self {
        OpenDocuments {
            slots: Mutex::default(),
            next_connection: AtomicU64::new(1),
            skipped_entries: AtomicU64::new(0),
            deps: Arc::new(Deps {
                content,
                documents,
                clock,
                journal_after_relay: AtomicBool::new(false),
                journal_whole_state: AtomicBool::new(false),
                poison_guard_off: AtomicBool::new(false),
                accepted: Mutex::default(),
                watch: Mutex::default(),
                lock: std::sync::OnceLock::new(),
            }),
            entropy,
            shutdown,
        }
    }

    /// Tells `watch` of every document opened for a socket, restored or edited from now on,
    /// after the watches added before it.
    pub fn watch(&self, watch: Arc<dyn ContentWatch>) {
        self.deps
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(watch);
    }

    /// Asks `lock` before every edit made through the server from now on (at most one; a
    /// second is ignored).
    pub fn lock_edits(&self, lock: Arc<dyn EditLock>) {
        let _ = self.deps.lock.set(lock);
    }

    /// `document_id` was just created (over MCP, and its first source stored): its watch is
    /// told as of an opening, so it asks for what a new document needs now.
    pub fn created(&self, document_id: Uuid) {
        self.deps.opened(document_id);
    }

    /// Plants the bugs of `planted` that live here (the simulator's, to show it finds them).
    pub fn plant(&self, planted: Planted) {
        self.deps
            .journal_after_relay
            .store(planted.journal_after_relay, Ordering::SeqCst);
        self.deps
            .journal_whole_state
            .store(planted.journal_whole_state, Ordering::SeqCst);
        self.deps
            .poison_guard_off
            .store(planted.poison_guard_off, Ordering::SeqCst);
    }

    /// The latest writers' updates this process took (at most 1,024), oldest first: the bytes
    /// each sent, and the bytes it was journalled and relayed as.
    pub fn accepted_updates(&self) -> Vec<(usize, usize)> {
        self.deps
            .accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Uuid, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many documents are open (or being loaded).
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Journal entries skipped so far because they would poison their document.
    pub fn skipped_entries(&self) -> u64 {
        self.skipped_entries.load(Ordering::SeqCst)
    }

    /// `document_id` was archived (`true`: its sockets are told and closed, if it is open here)
    /// or restored (`false`: sockets may open it again at once).
    pub fn set_archived(&self, document_id: Uuid, archived: bool) {
        let open = self
            .lock()
            .get(&document_id)
            .and_then(|s| s.cell.get().cloned());
        if let Some(open) = open {
            open.archived.send_replace(archived);
        }
        if !archived {
            self.deps.opened(document_id);
        }
    }

    /// Another process serves `document_id` now: its sockets here are told to go and its open
    /// copy is never used again (the next user here loads it afresh from storage).
    pub fn set_moved(&self, document_id: Uuid) {
        let open = self
            .lock()
            .get(&document_id)
            .and_then(|s| s.cell.get().cloned());
        if let Some(open) = open {
            open.moved.send_replace(true);
        }
    }

    /// The open copy of `document_id`, if it is loaded, without taking a handle (nothing is
    /// counted: it may unload at any moment). For observers such as the simulator.
    pub fn peek(&self, document_id: Uuid) -> Option<Arc<OpenDocument>> {
        self.lock()
            .get(&document_id)
            .and_then(|s| s.cell.get().cloned())
    }

    /// The documents someone uses here now (a socket or a request holds a handle), in id order;
    /// a document kept loaded after its last user left is not among them.
    pub fn in_use(&self) -> Vec<Uuid> {
        self.lock()
            .iter()
            .filter(|(_, slot)| slot.users > 0)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `document_id` is loaded in this process.
    pub fn is_open(&self, document_id: Uuid) -> bool {
        self.lock()
            .get(&document_id)
            .is_some_and(|s| s.cell.initialized())
    }

    /// The open document `document_id`, loaded from storage if it is not open yet. It stays
    /// loaded while the handle lives.
    pub async fn open(self: &Arc<Self>, document_id: Uuid) -> StoreResult<DocumentHandle> {
        let cell = {
            let mut slots = self.lock();
            let slot = slots.entry(document_id).or_insert_with(|| Slot {
                cell: Arc::default(),
                users: 0,
                taken: 0,
            });
            // A copy left behind when another process took the document over: loaded again.
            // Its last users still count here until they let go.
            if slot.cell.get().is_some_and(|d| *d.moved.borrow()) {
                slot.cell = Arc::default();
            }
            slot.users += 1;
            slot.taken += 1;
            slot.cell.clone()
        };
        // Counted from here: a load that fails gives its place back as the guard drops.
        let counted = Counted {
            registry: self.clone(),
            document_id,
        };
        let document = cell
            .get_or_try_init(|| self.load(document_id))
            .await?
            .clone();
        std::mem::forget(counted);
        Ok(DocumentHandle {
            document,
            registry: self.clone(),
        })
    }

    /// Opens the document for a socket of `account`, until the membership is dropped.
    pub async fn join(
        self: &Arc<Self>,
        document_id: Uuid,
        account: Uuid,
    ) -> StoreResult<Membership> {
        let document = self.open(document_id).await?;
        self.deps.opened(document_id);
        Ok(Membership {
            document,
            connection: self.next_connection.fetch_add(1, Ordering::SeqCst),
            account,
        })
    }

    async fn load(&self, document_id: Uuid) -> StoreResult<Arc<OpenDocument>> {
        let stored = self.deps.content.document_content(document_id).await?;
        let mut entries: Vec<(i64, &[u8])> = Vec::with_capacity(stored.updates.len() + 1);
        if let Some(checkpoint) = &stored.checkpoint {
            entries.push((0, &checkpoint.state));
        }
        entries.extend(stored.updates.iter().map(|(seq, u)| (*seq, u.as_slice())));
        let rebuilt = guard::rebuild(self.entropy.next_u64(), &entries);
        if !rebuilt.skipped.is_empty() {
            self.skipped_entries
                .fetch_add(rebuilt.skipped.len() as u64, Ordering::SeqCst);
            tracing::error!(document = %document_id, skipped = ?rebuilt.skipped, "journal entries that would poison the document were skipped (0 is the checkpoint)");
        }
        let applied_upto = stored.updates.last().map_or_else(
            || stored.checkpoint.as_ref().map_or(0, |c| c.upto_seq),
            |(seq, _)| *seq,
        );
        let shadow = Shadow::of(&rebuilt.doc);
        tracing::debug!(document = %document_id, applied_upto, "document loaded");
        Ok(Arc::new(OpenDocument {
            document_id,
            deps: self.deps.clone(),
            content: tokio::sync::Mutex::new(Loaded {
                doc: rebuilt.doc,
                shadow,
                applied_upto,
                since_checkpoint: stored.updates.len() as u32,
                queued: Vec::new(),
                queued_bytes: 0,
                flushing: false,
            }),
            journal: tokio::sync::Mutex::new(()),
            relay: fanout::Sender::new(RELAY_BACKLOG),
            awareness: Mutex::default(),
            archived: tokio::sync::watch::channel(false).0,
            moved: tokio::sync::watch::channel(false).0,
            reading: Mutex::new(None),
        }))
    }

    /// A user let go of `document_id`: the last one starts the idle timer (or, for a load that
    /// failed, the slot goes at once).
    fn release(self: &Arc<Self>, document_id: Uuid) {
        let taken = {
            let mut slots = self.lock();
            let Some(slot) = slots.get_mut(&document_id) else {
                return;
            };
            slot.users = slot.users.saturating_sub(1);
            if slot.users > 0 {
                return;
            }
            if !slot.cell.initialized() {
                slots.remove(&document_id);
                return;
            }
            slot.taken
        };
        let registry = self.clone();
        let stopping = self.shutdown.stopping();
        self.shutdown.spawn(async move {
            // A stopping process checkpoints at once rather than waiting out the idle time.
            tokio::select! {
                () = tokio::time::sleep(IDLE_UNLOAD) => {}
                () = stopping => {}
            }
            registry.unload_if_idle(document_id, taken).await;
        });
    }

    /// Checkpoints and unloads `document_id` if nobody has used it since `taken`.
    async fn unload_if_idle(&self, document_id: Uuid, taken: u64) {
        let idle = |slots: &BTreeMap<Uuid, Slot>| {
            slots
                .get(&document_id)
                .filter(|s| s.users == 0 && s.taken == taken)
                .and_then(|s| s.cell.get().cloned())
        };
        let Some(document) = idle(&self.lock()) else {
            return;
        };
        {
            let mut content = document.content.lock().await;
            if content.since_checkpoint > 0 {
                document.checkpoint(&mut content).await;
            }
        }
        let mut slots = self.lock();
        if idle(&slots).is_some() {
            slots.remove(&document_id);
            tracing::debug!(document = %document_id, "idle document unloaded");
        }
    }
}

/// A place counted in a slot while its document loads; given back if the load fails.
struct Counted {
    registry: Arc<OpenDocuments>,
    document_id: Uuid,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.registry.release(self.document_id);
    }
}
