//! A document's Chat: people's messages in the room, the transcript they are saved to, and the
//! bounded slice of it a new Planner session starts from.
//!
//! Owns: the rules of `chat:send` (write access, the text's bounds, `@chopin` addressing the
//! Planner through [`crate::turns::Turns::request`], MSG-16 de-duplication of a re-sent request
//! id, the MSG-20 cap on sends in flight), `chat:history` paging, the per-document broadcast of
//! new transcript entries (`chat:message`, in `seq` order), and the bootstrap selection
//! ([`select`], CTX-04, CTX-05), and posting Planner turns' replies and notices
//! ([`crate::turns::TurnSink`] is implemented by [`Chat`]).
//! Does not own: the room socket and its frames ([`crate::room`]), whether the Planner takes a
//! message ([`crate::turns`]), or storage ([`crate::store`]).
//!
//! Invariants:
//! - A message to the Planner is saved only once the Planner accepted it; a refused one saves
//!   nothing and is told to its sender alone (UNA-02, MSG-10, MSG-11).
//! - Entries of one document are saved and broadcast under that document's *gate* (an async
//!   mutex), so every room hears them in `seq` order and the Planner is given messages in the
//!   order they were saved. Anything else that appends to a transcript and wants the room to hear
//!   it goes through [`post`].
//! - Every time is the server [`crate::clock::Clock`]'s; nothing here draws randomness.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use uuid::Uuid;

use crate::app::AppState;
use crate::store::{NewTranscriptEntry, StoreError, TranscriptEntry, UnixMillis};
use crate::turns::{Accepted, PlannerRequest, Refused, TurnSink};

/// The longest Chat message, in characters (Unicode scalar values).
pub const MESSAGE_MAX_CHARS: usize = 20_000;
/// The longest request id a browser may give a send, in characters.
pub const REQUEST_ID_MAX_CHARS: usize = 100;
/// How long a request id's outcome is remembered (MSG-16: 10 minutes).
pub const REQUEST_ID_MEMORY_MS: i64 = 10 * 60 * 1000;
/// How many request ids' outcomes are remembered at most; the oldest go first.
pub const REQUEST_ID_MEMORY_ENTRIES: usize = 10_000;
/// Sends processed at once in this process (MSG-20); past that a send is
/// `temporarily-unavailable`.
pub const SENDS_IN_FLIGHT_MAX: usize = 20;
/// `chat:history`'s page size when none is asked for, and its bounds.
pub const HISTORY_DEFAULT_LIMIT: u32 = 50;
pub const HISTORY_MAX_LIMIT: u32 = 100;
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
/// How many new entries a slow room socket may fall behind before it catches up from storage.
const ROOM_BACKLOG: usize = 256;
/// Page size when a lagging room socket catches up from storage.
const CATCH_UP_PAGE: u32 = 100;

/// The words of a send refused because too many are in flight (MSG-20).
const TOO_MANY_IN_FLIGHT: &str =
    "Too many messages are being sent right now, so this one wasn't sent. Send it again in a moment.";

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
}

impl From<&TranscriptEntry> for ChatMessage {
    fn from(e: &TranscriptEntry) -> Self {
        ChatMessage {
            seq: e.seq,
            author: e.author_login.clone(),
            kind: e.kind.clone(),
            text: e.body.clone(),
            at: e.created_at_ms,
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

/// What the Planner did with an accepted message (`planner` of `chat:ack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlannerTook {
    Started,
    Steered,
}

impl From<Accepted> for PlannerTook {
    fn from(a: Accepted) -> Self {
        match a {
            Accepted::Started => PlannerTook::Started,
            Accepted::Steered => PlannerTook::Steered,
        }
    }
}

/// The sender's answer to a `chat:send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum SendReply {
    /// Saved as `seq`; `planner` says whether it started or steered a turn (`null` for a
    /// message to the room).
    #[serde(rename = "chat:ack", rename_all = "camelCase")]
    Ack {
        request_id: String,
        seq: i64,
        planner: Option<PlannerTook>,
    },
    /// Not saved, and nobody else heard of it.
    #[serde(rename = "chat:refused", rename_all = "camelCase")]
    Refused {
        request_id: String,
        code: String,
        message: String,
    },
}

impl SendReply {
    pub fn frame(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn refused(request_id: &str, code: &str, message: impl Into<String>) -> Self {
        SendReply::Refused {
            request_id: request_id.to_owned(),
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The code of a refusal.
    pub fn code(&self) -> Option<&str> {
        match self {
            SendReply::Refused { code, .. } => Some(code),
            SendReply::Ack { .. } => None,
        }
    }

    /// MSG-16: every outcome is remembered for its request id except a passing trouble, which
    /// the browser sends again with the same id and which must then be processed.
    fn remembered(&self) -> bool {
        self.code() != Some("temporarily-unavailable")
    }
}

/// A frame the room socket could not read as a Chat request (answered with `error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

/// A `chat:send` as read from its frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    pub request_id: String,
    pub text: String,
}

impl SendRequest {
    /// Reads `{type: "chat:send", requestId, text}`. A request id is 1–100 characters.
    pub fn from_frame(frame: &Value) -> Result<Self, Malformed> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            request_id: String,
            text: String,
        }
        let wire: Wire = serde_json::from_value(frame.clone()).map_err(|_| {
            Malformed("chat:send needs a string \"requestId\" and a string \"text\"".into())
        })?;
        let id_chars = wire.request_id.chars().count();
        if id_chars == 0 || id_chars > REQUEST_ID_MAX_CHARS {
            return Err(Malformed(format!(
                "a chat:send \"requestId\" is 1 to {REQUEST_ID_MAX_CHARS} characters"
            )));
        }
        Ok(SendRequest {
            request_id: wire.request_id,
            text: wire.text,
        })
    }
}

/// Who sends, where.
#[derive(Debug, Clone)]
pub struct Sender {
    /// GitHub login.
    pub login: String,
    /// Push or administration access to the document's repository.
    pub can_write: bool,
}

/// The document a message is sent in.
#[derive(Debug, Clone)]
pub struct Place {
    pub document: Uuid,
    /// Its canonical URL (the refusal words name it, UNA-04).
    pub url: String,
}

/// Whether `text` mentions `@chopin` as a word, in any case: `@chopin`, `@Chopin,` and
/// `(@CHOPIN)` do; `me@chopin.dev`'s `@chopin.dev` does not start a word, and `@chopin-bot` or
/// `@chopinx` are other handles.
pub fn mentions_planner(text: &str) -> bool {
    const HANDLE: &str = "@chopin";
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let is_handle = |c: char| is_word(c) || c == '-';
    let lower = text.to_lowercase();
    lower.match_indices(HANDLE).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after_str = &lower[at + HANDLE.len()..];
        let mut after = after_str.chars();
        let next = after.next();
        // `@chopin.` ends a sentence; `@chopin.dev` is a domain.
        let domain = next == Some('.') && after.next().is_some_and(is_word);
        !before.is_some_and(|c| is_word(c) || c == '@') && !next.is_some_and(is_handle) && !domain
    })
}

// ---------------------------------------------------------------------------------------------
// State

/// Chat state of this process (one per [`AppState`]).
#[derive(Default)]
pub struct Chat {
    table: Mutex<Table>,
    in_flight: Arc<AtomicUsize>,
    /// Turn replies and notices waiting to be posted, in the order the turns gave them.
    replies: std::sync::OnceLock<mpsc::UnboundedSender<(AppState, Uuid, NewTranscriptEntry)>>,
}

/// Chat is where Planner turns post their replies and notices ([`crate::turns::TurnSink`]):
/// each is saved and broadcast like any entry, in the order given.
impl TurnSink for Chat {
    fn post(&self, state: &AppState, document: Uuid, kind: &'static str, body: String) {
        let entry = NewTranscriptEntry {
            author_login: None,
            kind: kind.to_owned(),
            body,
            created_at_ms: state.services.clock.now_ms(),
        };
        let queue = self.replies.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<(AppState, Uuid, NewTranscriptEntry)>();
            tokio::spawn(async move {
                while let Some((state, document, entry)) = rx.recv().await {
                    if let Err(e) = post(&state, document, &entry).await {
                        tracing::error!(error = %e, %document, kind = %entry.kind, "chat: a Planner entry could not be saved");
                    }
                }
            });
            tx
        });
        let _ = queue.send((state.clone(), document, entry));
    }
}

#[derive(Default)]
struct Table {
    rooms: HashMap<Uuid, Room>,
    gates: HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>,
    sent: Sent,
}

/// A document's broadcast, while someone listens.
struct Room {
    tx: broadcast::Sender<ChatMessage>,
    /// `seq` of the first and the last entry broadcast since the channel was made.
    first_seq: Option<i64>,
    last_seq: Option<i64>,
}

type Key = (String, Uuid, String);

/// MSG-16's memory of request ids: outcomes, and sends still being processed.
#[derive(Default)]
struct Sent {
    done: HashMap<Key, (SendReply, UnixMillis, u64)>,
    /// Insertion order of `done`, oldest first: (key, when, stamp).
    order: VecDeque<(Key, UnixMillis, u64)>,
    pending: HashMap<Key, watch::Receiver<Option<SendReply>>>,
    stamp: u64,
}

impl Sent {
    fn forget_expired(&mut self, now: UnixMillis) {
        while let Some((key, at, stamp)) = self.order.front().cloned() {
            if now - at < REQUEST_ID_MEMORY_MS && self.order.len() <= REQUEST_ID_MEMORY_ENTRIES {
                break;
            }
            self.order.pop_front();
            if self.done.get(&key).is_some_and(|(_, _, s)| *s == stamp) {
                self.done.remove(&key);
            }
        }
    }

    fn remember(&mut self, key: Key, reply: SendReply, now: UnixMillis) {
        self.stamp += 1;
        self.order.push_back((key.clone(), now, self.stamp));
        self.done.insert(key, (reply, now, self.stamp));
        self.forget_expired(now);
    }
}

/// One send being processed; counts against [`SENDS_IN_FLIGHT_MAX`] until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Clears a send's pending mark if it ends without an outcome (its task was dropped).
struct Pending<'a> {
    chat: &'a Chat,
    key: Key,
    tx: watch::Sender<Option<SendReply>>,
    settled: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.chat.lock().sent.pending.remove(&self.key);
        }
    }
}

impl Chat {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gate(&self, doc: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        self.lock().gates.entry(doc).or_default().clone()
    }

    /// Takes one of the [`SENDS_IN_FLIGHT_MAX`] places, or `None` when all are taken.
    pub fn try_admit(&self) -> Option<InFlight> {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < SENDS_IN_FLIGHT_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(self.in_flight.clone()))
    }

    /// Sends being processed now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// New entries of `doc` from now on, for one room socket.
    pub fn subscribe(&self, doc: Uuid) -> Feed {
        let mut table = self.lock();
        let room = table.rooms.entry(doc).or_insert_with(|| Room {
            tx: broadcast::channel(ROOM_BACKLOG).0,
            first_seq: None,
            last_seq: None,
        });
        Feed {
            document: doc,
            rx: room.tx.subscribe(),
            cursor: room.last_seq,
        }
    }

    /// Broadcasts `entry` to `doc`'s room. Call under the document's gate.
    fn announce(&self, entry: &TranscriptEntry) {
        let mut table = self.lock();
        let Some(room) = table.rooms.get_mut(&entry.document_id) else {
            return;
        };
        room.first_seq.get_or_insert(entry.seq);
        room.last_seq = Some(entry.seq);
        if room.tx.send(ChatMessage::from(entry)).is_err() {
            // Nobody listens any more.
            table.rooms.remove(&entry.document_id);
        }
    }
}

/// A room socket's subscription to its document's new entries. [`Feed::recv`] is cancel-safe
/// (use it in `select!`); after [`FeedEvent::Lagged`] call [`Feed::catch_up`] outside the
/// `select!`.
pub struct Feed {
    document: Uuid,
    rx: broadcast::Receiver<ChatMessage>,
    /// The last `seq` this socket was given (or the room's last at subscription).
    cursor: Option<i64>,
}

/// What [`Feed::recv`] read.
#[derive(Debug)]
pub enum FeedEvent {
    Message(ChatMessage),
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
                Err(broadcast::error::RecvError::Lagged(_)) => return FeedEvent::Lagged,
                Err(broadcast::error::RecvError::Closed) => return FeedEvent::Closed,
            }
        }
    }

    /// What the socket missed, from storage, in `seq` order.
    pub async fn catch_up(&mut self, state: &AppState) -> Result<Vec<ChatMessage>, StoreError> {
        let from = match self.cursor {
            Some(c) => c,
            None => {
                // Nothing was given yet: everything broadcast since the channel was made.
                let table = state.chat.lock();
                match table.rooms.get(&self.document).and_then(|r| r.first_seq) {
                    Some(first) => first - 1,
                    None => return Ok(Vec::new()),
                }
            }
        };
        let mut out = Vec::new();
        let mut after = from;
        loop {
            let page = state
                .services
                .store
                .transcript(self.document, after, CATCH_UP_PAGE)
                .await?;
            let full = page.len() == CATCH_UP_PAGE as usize;
            for e in &page {
                after = e.seq;
                out.push(ChatMessage::from(e));
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

// ---------------------------------------------------------------------------------------------
// Sending

/// Appends `entry` to `document`'s transcript and broadcasts it to the room, in `seq` order with
/// every other entry posted here. For Planner replies and system lines as much as for people.
pub async fn post(
    state: &AppState,
    document: Uuid,
    entry: &NewTranscriptEntry,
) -> Result<TranscriptEntry, StoreError> {
    let gate = state.chat.gate(document);
    let _held = gate.lock().await;
    let saved = state
        .services
        .store
        .append_transcript(document, entry)
        .await?;
    state.chat.announce(&saved);
    Ok(saved)
}

/// Handles one `chat:send` (see the module docs): the sender's answer; the room hears an
/// accepted message as `chat:message` through [`Chat::subscribe`].
pub async fn send(
    state: &AppState,
    place: &Place,
    sender: &Sender,
    request: SendRequest,
) -> SendReply {
    let id = request.request_id.as_str();
    if !sender.can_write {
        return SendReply::refused(
            id,
            "read-only",
            "You can read this document but not send messages in its Chat: that needs push access to its repository. Your message wasn't sent.",
        );
    }
    if request.text.trim().is_empty() {
        return SendReply::refused(id, "empty", "A message needs some text.");
    }
    let chars = request.text.chars().count();
    if chars > MESSAGE_MAX_CHARS {
        return SendReply::refused(
            id,
            "too-long",
            format!(
                "A message is at most 20,000 characters; this one has {chars}, so it wasn't sent."
            ),
        );
    }
    let key: Key = (
        sender.login.clone(),
        place.document,
        request.request_id.clone(),
    );
    // MSG-16 then MSG-20, in one step: a re-sent id is answered from memory, or waits for the
    // send still processing it; a new one takes a place in flight or is turned away.
    let (mut pending, _in_flight) = loop {
        let waiting = {
            let now = state.services.clock.now_ms();
            let mut table = state.chat.lock();
            table.sent.forget_expired(now);
            if let Some((reply, at, _)) = table.sent.done.get(&key) {
                if now - at < REQUEST_ID_MEMORY_MS {
                    return reply.clone();
                }
            }
            match table.sent.pending.get(&key) {
                Some(rx) => rx.clone(),
                None => {
                    let Some(in_flight) = state.chat.try_admit() else {
                        return SendReply::refused(
                            id,
                            "temporarily-unavailable",
                            TOO_MANY_IN_FLIGHT,
                        );
                    };
                    let (tx, rx) = watch::channel(None);
                    table.sent.pending.insert(key.clone(), rx);
                    drop(table);
                    break (
                        Pending {
                            chat: &state.chat,
                            key: key.clone(),
                            tx,
                            settled: false,
                        },
                        in_flight,
                    );
                }
            }
        };
        let mut waiting = waiting;
        let settled = waiting
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|reply| reply.clone());
        if let Some(reply) = settled {
            return reply;
        }
        // The first send ended without an outcome: look again (it may be processed here).
    };
    let reply = process(state, place, sender, request).await;
    {
        let now = state.services.clock.now_ms();
        let mut table = state.chat.lock();
        if reply.remembered() {
            table.sent.remember(key, reply.clone(), now);
        }
        table.sent.pending.remove(&pending.key);
        pending.settled = true;
    }
    let _ = pending.tx.send(Some(reply.clone()));
    reply
}

async fn process(
    state: &AppState,
    place: &Place,
    sender: &Sender,
    request: SendRequest,
) -> SendReply {
    let id = request.request_id.as_str();
    let to_planner = mentions_planner(&request.text);
    // One at a time per document, so the transcript, the room and the Planner all see this
    // document's messages in the same order.
    let gate = state.chat.gate(place.document);
    let _held = gate.lock().await;
    let planner = if to_planner {
        let asked = state
            .turns
            .request(
                state,
                PlannerRequest {
                    document: place.document,
                    document_url: place.url.clone(),
                    from_login: sender.login.clone(),
                    text: request.text.clone(),
                },
            )
            .await;
        match asked {
            Ok(accepted) => Some(PlannerTook::from(accepted)),
            Err(refused) => return refusal(id, &refused),
        }
    } else {
        None
    };
    let entry = NewTranscriptEntry {
        author_login: Some(sender.login.clone()),
        kind: "member".into(),
        body: request.text,
        created_at_ms: state.services.clock.now_ms(),
    };
    match state
        .services
        .store
        .append_transcript(place.document, &entry)
        .await
    {
        Ok(saved) => {
            state.chat.announce(&saved);
            SendReply::Ack {
                request_id: id.to_owned(),
                seq: saved.seq,
                planner,
            }
        }
        Err(e) => {
            tracing::error!(error = %e, document = %place.document, to_planner, "chat: a message could not be saved");
            SendReply::refused(
                id,
                "not-saved",
                if to_planner {
                    "chopin has your message, but it could not be saved to Chat."
                } else {
                    "Your message could not be saved, so it wasn't sent. Send it again in a moment."
                },
            )
        }
    }
}

fn refusal(request_id: &str, refused: &Refused) -> SendReply {
    SendReply::refused(request_id, refused.code(), refused.to_string())
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

/// Reads one page of `document`'s transcript (anyone in the room may).
pub async fn history(
    state: &AppState,
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
            .min(newest_seq(state, document).await?),
        None => newest_seq(state, document).await?,
    };
    if end < 1 {
        return Ok(History {
            entries: Vec::new(),
            more: false,
        });
    }
    let after = (end - limit).max(0);
    let entries: Vec<ChatMessage> = state
        .services
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
    // `seq` is gap-free from 1, so older entries exist exactly when this page starts after 1.
    let more = entries.first().is_some_and(|e| e.seq > 1);
    Ok(History { entries, more })
}

/// The `seq` of `document`'s newest transcript entry (0 for none).
async fn newest_seq(state: &AppState, document: Uuid) -> Result<i64, StoreError> {
    state.services.store.last_transcript_seq(document).await
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

/// Reads `document`'s newest entries and selects what a new Planner session starts from.
pub async fn bootstrap(state: &AppState, document: Uuid) -> Result<Bootstrap, StoreError> {
    let newest = newest_seq(state, document).await?;
    let after = (newest - BOOTSTRAP_MAX_ENTRIES as i64).max(0);
    let window = state
        .services
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
