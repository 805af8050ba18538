//! A document's transcript as the room hears it: saving entries in order, the live feed of new
//! ones, history pages, and the bounded slice a new Planner session starts from.
//!
//! Owns: [`Transcript`] — putting an entry in line under the document's *gate* (an async mutex)
//! and broadcasting it once durable (`chat:message`, in `seq` order) to every socket of the
//! document, the gate let go as soon as the entry is in line so the next entries share its
//! commit; the
//! per-socket [`Feed`] with catch-up from storage after a lag; `chat:history` paging
//! ([`Transcript::history`]); the bootstrap selection ([`select`], CTX-04, CTX-05); and the queue
//! that posts Planner turns' replies and notices in the order given ([`TurnSink`]).
//! Does not own: the rules of a person's send (Chat, above this module), whether the Planner
//! takes a message (turns), or the sockets (the transport layer).
//!
//! Invariants: entries of one document are put in line under that document's gate, saved in
//! that order, and each broadcast only once it is durable and after every entry in line before
//! it, so every socket hears them in `seq` order and nothing it hears can be lost; anything that
//! appends to a transcript and wants the room to hear it goes through [`Transcript::post`] or
//! holds [`Transcript::gate`] while it calls [`Transcript::queue_gated`].

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use futures::future::{FutureExt, Shared};
use futures::stream::{FuturesOrdered, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::runtime::fanout::{self, RecvError};
use crate::runtime::gates::{Gate, Gates};
use crate::runtime::{SharedClock, SharedEntropy, Shutdown};
use crate::store::{NewTranscriptEntry, StoreError, TranscriptEntry, TranscriptStore, UnixMillis};

/// `chat:history`'s page size when none is asked for, and its bounds.
pub const HISTORY_DEFAULT_LIMIT: u32 = 50;
pub const HISTORY_MAX_LIMIT: u32 = 100;
/// A `chat:history` page holds at most this many bytes of entries (their JSON), however many
/// were asked for — but always the newest one asked for, so paging never stalls.
pub const HISTORY_MAX_BYTES: usize = 256 * 1024;
/// A recreated Planner session receives at most this many transcript entries (CTX-05) …
pub const BOOTSTRAP_MAX_ENTRIES: usize = 100;
/// … and at most this many characters of them (CTX-05).
pub const BOOTSTRAP_MAX_CHARS: usize = 50_000;
/// The immediate backscroll (messages since the last turn) keeps at most this many entries
/// (CTX-04) …
pub const BACKSCROLL_MAX_ENTRIES: usize = 40;
/// … and normally at most this many characters; the newest message is kept whole even when it
/// alone is longer (CTX-04).
pub const BACKSCROLL_MAX_CHARS: usize = 8_000;
/// The longest Chat message, in characters (Unicode scalar values): a person's (longer ones are
/// refused) and the Planner's (longer replies are split into several messages).
pub const MESSAGE_MAX_CHARS: usize = 20_000;
/// How many new entries a slow socket may fall behind before it catches up from storage. Held
/// only while some socket has yet to read them ([`fanout`]).
const FEED_BACKLOG: usize = 256;
/// Page size when a lagging socket catches up from storage.
const CATCH_UP_PAGE: u32 = 100;

/// Where Planner turns' replies and notices go: the document's transcript, heard by its room.
#[async_trait::async_trait]
pub trait TurnSink: Send + Sync {
    /// Queues the Planner's reply (`kind: "planner"`) or a notice (`kind: "system"`) to be
    /// saved to the document's transcript and told to the room, after every entry queued before
    /// it. Waits while the queue is full, so a turn that says more than storage takes is slowed
    /// down rather than held in memory.
    async fn post(&self, document: Uuid, kind: &'static str, body: String);
}

/// Turn replies and notices that may wait to be saved.
const REPLY_BACKLOG: usize = 256;
/// Turn replies and notices in line at once and not yet durable: a turn's steps share commits.
const REPLIES_IN_FLIGHT: usize = 64;

/// What the reply queue carries: an entry to save, or a caller waiting for what is before it.
enum Queued {
    Entry(Uuid, NewTranscriptEntry),
    Settled(tokio::sync::oneshot::Sender<()>),
}

/// A frame the room socket could not read as a Chat request (answered with `error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// One transcript entry as the room hears it (`chat:message`, and each of `chat:history`'s
/// entries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub seq: i64,
    /// The person's GitHub login; `null` for the Planner and the system.
    pub author: Option<String>,
    /// `member`, `planner` or `system`.
    pub kind: String,
    pub text: String,
    /// When it was saved (server time, Unix ms).
    pub at: UnixMillis,
    /// The message's typed references (the command it ran, CMD-16); left out when it has
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub references: Option<Value>,
}

impl From<&TranscriptEntry> for ChatMessage {
    fn from(e: &TranscriptEntry) -> Self {
        ChatMessage {
            seq: e.seq,
            author: e.author_login.clone(),
            kind: e.kind.clone(),
            text: e.body.clone(),
            at: e.created_at_ms,
            references: e.refs.as_deref().and_then(|r| restored_refs(e.seq, r)),
        }
    }
}

/// A stored reference, in the one shape each kind is persisted in (CTX-43).
/// Read only to be checked: its fields are never used.
#[allow(dead_code)]
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum StoredRef {
    #[serde(rename_all = "camelCase")]
    Command {
        name: String,
        command_kind: String,
        start: u64,
        end: u64,
    },
    #[serde(rename_all = "camelCase")]
    Document {
        document_id: Uuid,
        label: String,
        revision: i64,
    },
    #[serde(rename_all = "camelCase")]
    Heading {
        anchor: String,
        label: String,
        level: u8,
        line: u64,
    },
    #[serde(rename_all = "camelCase")]
    Decision {
        decision_id: String,
        label: String,
    },
    File {
        path: String,
        label: String,
    },
    #[serde(rename_all = "camelCase")]
    Research {
        workspace_id: Uuid,
        label: String,
    },
    #[serde(rename_all = "camelCase")]
    Attachment {
        id: Uuid,
        name: String,
        kind: String,
        mime_type: String,
        size: i64,
    },
}

/// A message's stored references, strictly checked on restore (CTX-43): every one must be of
/// a known kind in its persisted shape; otherwise none is shown, and the log says which entry.
pub fn restored_refs(seq: i64, stored: &str) -> Option<Value> {
    let value: Value = match serde_json::from_str(stored) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(seq, error = %e, "a message's stored references are not JSON; none is shown");
            return None;
        }
    };
    match serde_json::from_value::<Vec<StoredRef>>(value.clone()) {
        Ok(_) => Some(value),
        Err(e) => {
            tracing::warn!(seq, error = %e, "a message's stored references are not in a shape this server keeps; none is shown");
            None
        }
    }
}

impl ChatMessage {
    /// The `chat:message` frame.
    pub fn frame(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut v {
            map.insert("type".into(), Value::String("chat:message".into()));
        }
        v
    }
}

/// An entry as every socket of its room hears it: the message, and its `chat:message` frame
/// encoded once, whose bytes every socket sends. Derefs to the [`ChatMessage`].
#[derive(Debug, Clone)]
pub struct Heard(Arc<HeardEntry>);

#[derive(Debug)]
struct HeardEntry {
    message: ChatMessage,
    frame: Bytes,
}

impl Heard {
    pub fn new(message: ChatMessage) -> Self {
        let frame = message.frame().to_string().into();
        Heard(Arc::new(HeardEntry { message, frame }))
    }

    /// The `chat:message` frame's JSON text (UTF-8), shared.
    pub fn frame_bytes(&self) -> Bytes {
        self.0.frame.clone()
    }
}

impl Deref for Heard {
    type Target = ChatMessage;
    fn deref(&self) -> &ChatMessage {
        &self.0.message
    }
}

/// A document's broadcast, while someone listens.
struct Channel {
    tx: fanout::Sender<Heard>,
    /// `seq` of the first and the last entry broadcast since the channel was made.
    first_seq: Option<i64>,
    last_seq: Option<i64>,
}

#[derive(Default)]
struct Table {
    channels: BTreeMap<Uuid, Channel>,
    /// For each document with entries in line, the last one's announcement: the next one put in
    /// line is announced after it.
    in_line: BTreeMap<Uuid, Announced>,
}

/// Resolves once an entry has been announced (or given up: its sender dropped).
type Announced = Shared<oneshot::Receiver<()>>;

/// An entry's place in its document's line.
struct Place {
    document: Uuid,
    /// The entry before it, announced first.
    before: Option<Announced>,
    mine: Announced,
    done: oneshot::Sender<()>,
}

/// The transcripts of this process's documents.
pub struct Transcript {
    table: Mutex<Table>,
    gates: Gates<Uuid>,
    store: Arc<dyn TranscriptStore>,
    clock: SharedClock,
    /// Keys for appends ([`NewTranscriptEntry::key`]).
    entropy: SharedEntropy,
    /// Turn replies and notices waiting to be posted, in the order the turns gave them.
    replies: mpsc::Sender<Queued>,
}

impl Transcript {
    /// Starts the reply queue on `shutdown`'s tracker; it ends when the transcript is dropped.
    pub fn new(
        store: Arc<dyn TranscriptStore>,
        clock: SharedClock,
        entropy: SharedEntropy,
        shutdown: &Shutdown,
    ) -> Arc<Self> {
        let (replies, mut queue) = mpsc::channel::<Queued>(REPLY_BACKLOG);
        let transcript = Arc::new(Transcript {
            table: Mutex::default(),
            gates: Gates::default(),
            store,
            clock,
            entropy,
            replies,
        });
        let weak = Arc::downgrade(&transcript);
        let stopping = shutdown.stopping();
        shutdown.spawn(async move {
            tokio::pin!(stopping);
            let mut stopped = false;
            // Entries in line and not yet durable and announced, oldest first.
            let mut saving = FuturesOrdered::new();
            loop {
                let next = tokio::select! {
                    biased;
                    Some(saved) = saving.next(), if !saving.is_empty() => {
                        said(saved);
                        continue;
                    }
                    next = queue.recv(), if saving.len() < REPLIES_IN_FLIGHT => next,
                    // Stopping: what is queued is posted, then the queue ends.
                    () = &mut stopping, if !stopped => {
                        stopped = true;
                        queue.close();
                        continue;
                    }
                };
                let (document, entry) = match next {
                    None => {
                        while let Some(saved) = saving.next().await {
                            said(saved);
                        }
                        return;
                    }
                    Some(Queued::Settled(told)) => {
                        while let Some(saved) = saving.next().await {
                            said(saved);
                        }
                        let _ = told.send(());
                        continue;
                    }
                    Some(Queued::Entry(document, entry)) => (document, entry),
                };
                let Some(transcript) = weak.upgrade() else {
                    return;
                };
                let held = transcript.gate(document).await;
                let saved = transcript.queue_gated(document, &entry).await;
                drop(held);
                let kind = entry.kind;
                saving.push_back(async move { (document, kind, saved.await) });
            }
        });
        transcript
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place at the end of `document`'s line. Take it under the document's gate.
    fn take_place(&self, document: Uuid) -> Place {
        let (done, announced) = oneshot::channel();
        let mine = announced.shared();
        let before = self.lock().in_line.insert(document, mine.clone());
        Place {
            document,
            before,
            mine,
            done,
        }
    }

    /// `place`'s entry was announced (or given up): the next one may go, and a line that ends
    /// here is forgotten.
    fn leave_line(&self, place: Place) {
        let _ = place.done.send(());
        let mut table = self.lock();
        if table
            .in_line
            .get(&place.document)
            .is_some_and(|last| last.ptr_eq(&place.mine))
        {
            table.in_line.remove(&place.document);
        }
    }

    /// Resolves once every entry of `document` in line now has been announced (or given up).
    async fn line_done(&self, document: Uuid) {
        let last = self.lock().in_line.get(&document).cloned();
        if let Some(last) = last {
            let _ = last.await;
        }
    }

    /// Resolves once every reply and notice queued before the call has been saved (or could not
    /// be): for a caller that must read what a turn said.
    pub async fn settled(&self) {
        let (told, heard) = tokio::sync::oneshot::channel();
        if self.replies.send(Queued::Settled(told)).await.is_ok() {
            let _ = heard.await;
        }
    }

    /// Waits for the document's gate and holds it until the guard drops: held while an entry is
    /// saved and broadcast.
    pub async fn gate(&self, doc: Uuid) -> Gate<'_, Uuid> {
        self.gates.lock(doc).await
    }

    /// Drops the channels of documents nobody listens to any more.
    pub fn tidy(&self) {
        self.lock()
            .channels
            .retain(|_, channel| channel.tx.receiver_count() > 0);
    }

    /// How many documents have a live channel, and how many a gate held or waited for.
    pub fn sizes(&self) -> (usize, usize) {
        (self.lock().channels.len(), self.gates.len())
    }

    /// The time now on the server's clock.
    pub fn now_ms(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    /// New entries of `doc` from now on, for one socket.
    pub fn subscribe(&self, doc: Uuid) -> Feed {
        let mut table = self.lock();
        let channel = table.channels.entry(doc).or_insert_with(|| Channel {
            tx: fanout::Sender::new(FEED_BACKLOG),
            first_seq: None,
            last_seq: None,
        });
        Feed {
            document: doc,
            rx: channel.tx.subscribe(),
            cursor: channel.last_seq,
        }
    }

    /// Broadcasts `entry` to `doc`'s sockets. Call under the document's gate.
    fn announce(&self, entry: &TranscriptEntry) {
        let mut table = self.lock();
        let Some(channel) = table.channels.get_mut(&entry.document_id) else {
            return;
        };
        // An append whose key was held answers the entry that key made: heard already.
        if channel.last_seq.is_some_and(|last| entry.seq <= last) {
            return;
        }
        channel.first_seq.get_or_insert(entry.seq);
        channel.last_seq = Some(entry.seq);
        if channel
            .tx
            .send(Heard::new(ChatMessage::from(entry)))
            .is_err()
        {
            // Nobody listens any more.
            table.channels.remove(&entry.document_id);
        }
    }

    /// Puts `entry` in line; the caller holds the document's [`Transcript::gate`] and may let
    /// it go once this returns. The future returned saves it: it resolves once the entry is
    /// durable and broadcast, after every entry put in line before it (or with the error that
    /// kept it from being saved, and then nothing is broadcast).
    pub async fn queue_gated(
        self: &Arc<Self>,
        document: Uuid,
        entry: &NewTranscriptEntry,
    ) -> impl Future<Output = Result<TranscriptEntry, StoreError>> + Send + 'static {
        let place = self.take_place(document);
        // Every append carries a key of its own, so storage never makes it twice (a batch run
        // again after a commit whose outcome was unknown finds it made).
        let keyed;
        let entry = if entry.key.is_some() {
            entry
        } else {
            keyed = NewTranscriptEntry {
                key: Some(self.entropy.token_hex(12)),
                ..entry.clone()
            };
            &keyed
        };
        let queued = self.store.queue_transcript(document, entry).await;
        let transcript = self.clone();
        async move {
            let saved = match queued {
                Ok(pending) => pending.await,
                Err(e) => Err(e),
            };
            if let Some(before) = &place.before {
                let _ = before.clone().await;
            }
            if let Ok(saved) = &saved {
                transcript.announce(saved);
            }
            transcript.leave_line(place);
            saved
        }
    }

    /// Appends `entry` and broadcasts it. The caller holds the document's [`Transcript::gate`]
    /// throughout.
    pub async fn append_gated(
        self: &Arc<Self>,
        document: Uuid,
        entry: &NewTranscriptEntry,
    ) -> Result<TranscriptEntry, StoreError> {
        self.queue_gated(document, entry).await.await
    }

    /// Appends `entry` to `document`'s transcript and broadcasts it to the room, in `seq` order
    /// with every other entry posted here. For Planner replies and system lines as much as for
    /// people.
    pub async fn post(
        self: &Arc<Self>,
        document: Uuid,
        entry: &NewTranscriptEntry,
    ) -> Result<TranscriptEntry, StoreError> {
        let _held = self.gate(document).await;
        self.append_gated(document, entry).await
    }

    /// The entry of `document` an append with `key` saved, if any.
    pub async fn by_key(
        &self,
        document: Uuid,
        key: &str,
    ) -> Result<Option<TranscriptEntry>, StoreError> {
        self.store.transcript_by_key(document, key).await
    }

    /// The `seq` of `document`'s newest entry once everything in line is saved (0 for none).
    pub async fn newest(&self, document: Uuid) -> Result<i64, StoreError> {
        self.line_done(document).await;
        self.newest_seq(document).await
    }

    /// The `seq` of `document`'s newest transcript entry (0 for none).
    async fn newest_seq(&self, document: Uuid) -> Result<i64, StoreError> {
        self.store.last_transcript_seq(document).await
    }

    /// When `document`'s automatic follow-ups at or after `since_ms` were sent, oldest first,
    /// read back from the notices they left in its transcript ([`FOLLOW_UP_NOTICE`]): newest
    /// entries first, a page at a time, until one older than `since_ms`, and at most
    /// [`FOLLOW_UPS_READ_BACK`] entries.
    pub async fn follow_ups_since(
        &self,
        document: Uuid,
        since_ms: UnixMillis,
    ) -> Result<Vec<UnixMillis>, StoreError> {
        let mut end = self.newest_seq(document).await?;
        let (mut sent, mut read) = (Vec::new(), 0usize);
        while end > 0 && read < FOLLOW_UPS_READ_BACK {
            let after = (end - i64::from(CATCH_UP_PAGE)).max(0);
            let page = self
                .store
                .transcript(document, after, CATCH_UP_PAGE)
                .await?;
            read += page.len();
            for entry in page.iter().rev() {
                if entry.created_at_ms < since_ms {
                    sent.reverse();
                    return Ok(sent);
                }
                if is_follow_up_notice(entry) {
                    sent.push(entry.created_at_ms);
                }
            }
            if page.is_empty() {
                break;
            }
            end = after;
        }
        sent.reverse();
        Ok(sent)
    }
}

/// The words after `@login` in the notice an automatic follow-up leaves in Chat (OWN-22).
pub const FOLLOW_UP_NOTICE: &str = "sent chopin an automatic follow-up.";

/// The most transcript entries read back to count a document's follow-ups of the last hour
/// ([`Transcript::follow_ups_since`]): a busier hour counts only the follow-ups among its
/// newest entries.
pub const FOLLOW_UPS_READ_BACK: usize = 2_000;

/// Whether `entry` is the notice of an automatic follow-up: a system line only the server
/// writes, `@login sent chopin an automatic follow-up.`
fn is_follow_up_notice(entry: &TranscriptEntry) -> bool {
    entry.kind == "system"
        && entry.author_login.is_none()
        && entry
            .body
            .strip_suffix(FOLLOW_UP_NOTICE)
            .is_some_and(|head| head.starts_with('@') && head.ends_with(' '))
}

/// The transcript is where Planner turns post their replies and notices: each is saved and
/// broadcast like any entry, in the order given.
#[async_trait::async_trait]
impl TurnSink for Transcript {
    async fn post(&self, document: Uuid, kind: &'static str, body: String) {
        let entry = NewTranscriptEntry {
            author_login: None,
            kind: kind.to_owned(),
            body,
            created_at_ms: self.clock.now_ms(),
            key: None,
            refs: None,
            attachments: Vec::new(),
        };
        let _ = self.replies.send(Queued::Entry(document, entry)).await;
    }
}

/// A room socket's subscription to its document's new entries. [`Feed::recv`] is cancel-safe
/// (use it in `select!`); after [`FeedEvent::Lagged`] call [`Feed::catch_up`] outside the
/// `select!`.
pub struct Feed {
    document: Uuid,
    rx: fanout::Receiver<Heard>,
    /// The last `seq` this socket was given (or the room's last at subscription).
    cursor: Option<i64>,
}

/// What [`Feed::recv`] read.
#[derive(Debug)]
pub enum FeedEvent {
    Message(Heard),
    /// The socket fell behind: [`Feed::catch_up`] reads what it missed.
    Lagged,
    Closed,
}

impl Feed {
    pub async fn recv(&mut self) -> FeedEvent {
        loop {
            match self.rx.recv().await {
                Ok(m) if self.cursor.is_some_and(|c| m.seq <= c) => continue,
                Ok(m) => {
                    self.cursor = Some(m.seq);
                    return FeedEvent::Message(m);
                }
                Err(RecvError::Lagged(_)) => return FeedEvent::Lagged,
                Err(RecvError::Closed) => return FeedEvent::Closed,
            }
        }
    }

    /// What the socket missed, from storage, in `seq` order.
    pub async fn catch_up(&mut self, transcript: &Transcript) -> Result<Vec<Heard>, StoreError> {
        let from = match self.cursor {
            Some(c) => c,
            None => {
                // Nothing was given yet: everything broadcast since the channel was made.
                let table = transcript.lock();
                match table.channels.get(&self.document).and_then(|r| r.first_seq) {
                    Some(first) => first - 1,
                    None => return Ok(Vec::new()),
                }
            }
        };
        let mut out = Vec::new();
        let mut after = from;
        loop {
            let page = transcript
                .store
                .transcript(self.document, after, CATCH_UP_PAGE)
                .await?;
            let full = page.len() == CATCH_UP_PAGE as usize;
            for e in &page {
                after = e.seq;
                out.push(Heard::new(ChatMessage::from(e)));
            }
            if !full {
                break;
            }
        }
        if after > from {
            self.cursor = Some(after);
        }
        Ok(out)
    }
}

/// Logs a Planner entry that could not be saved.
fn said((document, kind, saved): (Uuid, String, Result<TranscriptEntry, StoreError>)) {
    if let Err(e) = saved {
        tracing::error!(error = %e, %document, %kind, "chat: a Planner entry could not be saved");
    }
}

// ---------------------------------------------------------------------------------------------
// History

/// A `chat:history` request: the entries before `before` (the newest when absent), at most
/// `limit` (1–100; default 50; out of range is clamped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct HistoryQuery {
    pub before: Option<i64>,
    pub limit: Option<i64>,
}

impl HistoryQuery {
    pub fn from_frame(frame: &Value) -> Result<Self, Malformed> {
        serde_json::from_value(frame.clone()).map_err(|_| {
            Malformed(
                "chat:history takes an optional integer \"before\" and \"limit\" (1 to 100)".into(),
            )
        })
    }
}

/// One page of history, oldest first; `more` when older entries exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct History {
    pub entries: Vec<ChatMessage>,
    pub more: bool,
}

impl History {
    pub fn frame(&self) -> Value {
        serde_json::json!({ "type": "chat:history", "entries": self.entries, "more": self.more })
    }
}

impl Transcript {
    /// `document`'s latest `limit` entries once everything in line is saved, oldest first.
    pub async fn latest(
        &self,
        document: Uuid,
        limit: u32,
    ) -> Result<Vec<TranscriptEntry>, StoreError> {
        let newest = self.newest(document).await?;
        self.store
            .transcript(document, (newest - i64::from(limit)).max(0), limit)
            .await
    }

    /// Reads one page of `document`'s transcript (anyone in the room may).
    pub async fn history(
        &self,
        document: Uuid,
        query: &HistoryQuery,
    ) -> Result<History, StoreError> {
        let limit = query
            .limit
            .unwrap_or(i64::from(HISTORY_DEFAULT_LIMIT))
            .clamp(1, i64::from(HISTORY_MAX_LIMIT));
        let end = match query.before {
            Some(before) => before
                .saturating_sub(1)
                .min(self.newest_seq(document).await?),
            None => self.newest_seq(document).await?,
        };
        if end < 1 {
            return Ok(History {
                entries: Vec::new(),
                more: false,
            });
        }
        let after = (end - limit).max(0);
        let mut entries: Vec<ChatMessage> = self
            .store
            .transcript(
                document,
                after,
                u32::try_from(end - after).unwrap_or(HISTORY_MAX_LIMIT),
            )
            .await?
            .iter()
            .filter(|e| e.seq <= end)
            .map(ChatMessage::from)
            .collect();
        // The newest entries that fit the byte bound (at least one): older ones are the next
        // page, asked for with `before` the oldest seq here.
        let mut bytes = 0;
        let keep = entries
            .iter()
            .rev()
            .take_while(|entry| {
                bytes += serde_json::to_vec(entry).map_or(0, |json| json.len());
                bytes <= HISTORY_MAX_BYTES
            })
            .count()
            .max(1);
        entries.drain(..entries.len().saturating_sub(keep));
        // `seq` is gap-free from 1, so older entries exist exactly when this page starts after 1.
        let more = entries.first().is_some_and(|e| e.seq > 1);
        Ok(History { entries, more })
    }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap

/// What a new Planner session starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    /// The newest transcript entries, oldest first: at most [`BOOTSTRAP_MAX_ENTRIES`] and
    /// [`BOOTSTRAP_MAX_CHARS`] characters in all (CTX-05).
    pub entries: Vec<TranscriptEntry>,
    /// How many older entries the transcript holds that `entries` leaves out.
    pub omitted: i64,
    /// The immediate backscroll, oldest first: the messages since the Planner's last entry
    /// (its last turn), at most [`BACKSCROLL_MAX_ENTRIES`] and normally
    /// [`BACKSCROLL_MAX_CHARS`] characters, the newest kept whole even when it alone is longer
    /// (CTX-04).
    pub backscroll: Vec<TranscriptEntry>,
}

/// Where [`select`] starts each part, as indices into the entries it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// `entries[context_from..]` is what a recreated session receives.
    pub context_from: usize,
    /// `entries[backscroll_from..]` is the immediate backscroll.
    pub backscroll_from: usize,
}

/// Characters of an entry, as the budgets count them: its text.
pub fn entry_chars(entry: &TranscriptEntry) -> usize {
    entry.body.chars().count()
}

/// The bootstrap selection over `entries` (oldest first, the newest last), as pure logic. Both
/// parts are the newest entries that fit, whole entries only, never skipping one to fit an older:
/// - the context: at most 100 entries and 50,000 characters in all;
/// - the backscroll: among the entries after the last `planner` entry, at most 40 entries and
///   8,000 characters, except that the newest is always kept whole, however long.
pub fn select(entries: &[TranscriptEntry]) -> Selection {
    let newest_within =
        |from_floor: usize, max_entries: usize, max_chars: usize, keep_one: bool| {
            let mut from = entries.len();
            let mut chars = 0usize;
            while from > from_floor && entries.len() - from < max_entries {
                let next = entry_chars(&entries[from - 1]);
                let first = from == entries.len();
                if chars + next > max_chars && !(keep_one && first) {
                    break;
                }
                chars += next;
                from -= 1;
            }
            from
        };
    let since_last_turn = entries
        .iter()
        .rposition(|e| e.kind == "planner")
        .map_or(0, |i| i + 1);
    Selection {
        context_from: newest_within(0, BOOTSTRAP_MAX_ENTRIES, BOOTSTRAP_MAX_CHARS, false),
        backscroll_from: newest_within(
            since_last_turn,
            BACKSCROLL_MAX_ENTRIES,
            BACKSCROLL_MAX_CHARS,
            true,
        ),
    }
}

impl Transcript {
    /// Reads `document`'s newest entries and selects what a new Planner session starts from.
    pub async fn bootstrap(&self, document: Uuid) -> Result<Bootstrap, StoreError> {
        // Entries in line are read as saved.
        self.line_done(document).await;
        let newest = self.newest_seq(document).await?;
        let after = (newest - BOOTSTRAP_MAX_ENTRIES as i64).max(0);
        let window = self
            .store
            .transcript(document, after, BOOTSTRAP_MAX_ENTRIES as u32)
            .await?;
        let chosen = select(&window);
        let entries = window[chosen.context_from..].to_vec();
        let omitted = entries.first().map_or(newest, |first| first.seq - 1).max(0);
        Ok(Bootstrap {
            entries,
            omitted,
            backscroll: window[chosen.backscroll_from..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctx_43_stored_references_are_strictly_checked_on_restore() {
        let good = r#"[{"type":"command","name":"review","commandKind":"skill","start":0,"end":7},{"type":"heading","anchor":"overview","label":"Overview","level":1,"line":1},{"type":"decision","decisionId":"d-1","label":"Region"},{"type":"document","documentId":"5d1f0c9e-2b7a-4c55-8e0f-6a3b9d2c1e47","label":"Launch","revision":3},{"type":"file","path":"src/a.rs","label":"src/a.rs"},{"type":"research","workspaceId":"5d1f0c9e-2b7a-4c55-8e0f-6a3b9d2c1e47","label":"Edge caching"},{"type":"attachment","id":"5d1f0c9e-2b7a-4c55-8e0f-6a3b9d2c1e47","name":"a.txt","kind":"text","mimeType":"text/plain","size":3}]"#;
        assert_eq!(
            restored_refs(1, good),
            Some(serde_json::from_str(good).unwrap())
        );
        for bad in [
            r#"[{"type":"url","href":"javascript:alert(1)"}]"#,
            r#"[{"type":"heading","anchor":"overview","label":"Overview","level":1,"line":1,"href":"x"}]"#,
            r#"[{"type":"decision","decisionId":"d-1"}]"#,
            r#"[{"type":"research","workspaceId":"not-an-id","label":"x"}]"#,
            r#"{"type":"command"}"#,
            "not json",
        ] {
            assert_eq!(restored_refs(1, bad), None, "{bad}");
        }
    }
}
