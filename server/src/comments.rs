//! Comment threads on a document: starting one on a quoted passage, replying, resolving,
//! listing, and telling every room socket of the document what changed (`comment:thread`).
//!
//! Owns: the limits of a note and a quote, the reply cap (RULINGS ISO-20: full at
//! [`REPLIES_MAX`] replies), the refusal codes and words, the wire shape of threads and notes,
//! and the per-document fan-out, told only after the store has the change (ISO-21, ISO-27).
//! Does not own: who may write (the room checks push access), or what a note sent to the
//! Planner starts (Chat admits it and the Planner's turns run it; a comment turn's
//! `reply_comment` saves through [`Comments::reply`]).
//!
//! Frames a room socket may send: `comment:start {requestId, quote, text, to?, thread?}`,
//! `comment:reply {requestId, thread, text, to?}`, `comment:resolve {requestId, thread}` and
//! `comment:list {}`; `to` is `"planner"` or absent (ISO-17: nothing else makes a note the
//! Planner's, and its text is never searched for a mention).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::kept::{Kept, KeptRequests};
use crate::runtime::fanout;
use crate::runtime::SharedClock;
use crate::store::{
    CommentNote, CommentThread, NewCommentNote, NewCommentThread, Replied, RequestKey, Store,
    StoreError, ThreadWithNotes,
};

/// RULINGS ISO-20: a comment thread is full at 100 replies.
pub const REPLIES_MAX: i64 = 100;
/// The most characters one note has.
pub const NOTE_MAX_CHARS: usize = 4_000;
/// The most characters of a thread's quoted passage.
pub const QUOTE_MAX_CHARS: usize = 1_000;
/// The most threads `comment:list` sends (the newest).
pub const THREADS_LISTED: i64 = 200;
/// Changes held for a room socket that has not read them yet.
const FEED_BACKLOG: usize = 64;
/// How long an answered request id is kept: a note sent again with the same `requestId` (a
/// retry after a lost answer) gets the first answer and is not saved twice, whichever process
/// the retry reaches.
const ANSWERS_MS: i64 = 10 * 60 * 1000;
/// The scope comment answers are kept in.
const SCOPE: &str = "comment";

/// A refusal: the wire code and the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// The `comment:refused` frame answering `request_id`.
    pub fn frame(&self, request_id: &str) -> Value {
        json!({
            "type": "comment:refused",
            "requestId": request_id,
            "code": self.code,
            "message": self.message,
        })
    }
}

/// The words when the thread is resolved (ISO-19).
pub const RESOLVED_WORDS: &str = "This thread is resolved, so it takes no more replies.";
/// The words when the thread is full (ISO-19, RULINGS ISO-20).
pub const FULL_WORDS: &str =
    "This thread has 100 replies, the most a thread takes, so it takes no more.";
/// The words for a thread this document does not have.
pub const NO_THREAD_WORDS: &str = "This document has no such comment thread.";
/// The words when the store could not keep a note.
pub const NOT_SAVED_WORDS: &str =
    "Your comment could not be saved just now; send it again in a moment.";
/// The words for a reader (comments need push access, like Chat).
pub const READ_ONLY_WORDS: &str =
    "Commenting needs push access to this document's repository, so your comment wasn't saved.";

/// A note's words, checked: some text, at most [`NOTE_MAX_CHARS`].
pub fn check_text(text: &str) -> Result<(), Refusal> {
    if text.trim().is_empty() {
        return Err(Refusal::new("empty", "A comment needs some text."));
    }
    let chars = text.chars().count();
    if chars > NOTE_MAX_CHARS {
        return Err(Refusal::new(
            "too-long",
            format!(
                "A comment is at most 4,000 characters; this one has {chars}, so it wasn't saved."
            ),
        ));
    }
    Ok(())
}

/// What a room socket sent about comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Start {
        request_id: String,
        /// A thread id the browser chose, so sending it again finds the thread it started.
        thread: Option<Uuid>,
        quote: String,
        text: String,
        to_planner: bool,
    },
    Reply {
        request_id: String,
        thread: Uuid,
        text: String,
        to_planner: bool,
    },
    Resolve {
        request_id: String,
        thread: Uuid,
    },
    /// `requestId` is optional here: the answer echoes it.
    List {
        request_id: String,
    },
}

/// A frame this module cannot read: the words of the `malformed` refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl Malformed {
    /// The answer: `comment:refused` with code `malformed` where the frame has a string
    /// `requestId` to answer, else an `error` frame's fields.
    pub fn frame(&self, frame: &Value) -> Value {
        match frame.get("requestId").and_then(Value::as_str) {
            Some(id) => Refusal::new("malformed", self.0.clone()).frame(id),
            None => json!({ "type": "error", "code": "malformed", "message": self.0 }),
        }
    }
}

impl Request {
    /// Reads a `comment:*` frame of type `kind`.
    pub fn from_frame(kind: &str, frame: &Value) -> Result<Self, Malformed> {
        let text_of = |name: &str| frame.get(name).and_then(Value::as_str).map(str::to_owned);
        let request_id = || {
            text_of("requestId")
                .filter(|id| (1..=100).contains(&id.chars().count()))
                .ok_or_else(|| {
                    Malformed(format!(
                        "{kind} needs a string \"requestId\" of 1 to 100 characters"
                    ))
                })
        };
        let thread = |required: bool| -> Result<Option<Uuid>, Malformed> {
            match frame.get("thread") {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(id)) => Uuid::parse_str(id)
                    .map(Some)
                    .map_err(|_| Malformed(format!("{kind}: \"thread\" is a thread id (a UUID)"))),
                _ => Err(Malformed(format!(
                    "{kind} needs \"thread\", the id of the thread"
                ))),
            }
        };
        let to_planner = || match frame.get("to") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::String(to)) if to == "planner" => Ok(true),
            Some(_) => Err(Malformed(format!(
                "{kind}: \"to\" is \"planner\" (to send the note to chopin) or absent"
            ))),
        };
        let text =
            || text_of("text").ok_or_else(|| Malformed(format!("{kind} needs a string \"text\"")));
        match kind {
            "comment:start" => Ok(Request::Start {
                request_id: request_id()?,
                thread: thread(false)?,
                quote: text_of("quote").ok_or_else(|| {
                    Malformed(
                        "comment:start needs a string \"quote\", the passage it is about".into(),
                    )
                })?,
                text: text()?,
                to_planner: to_planner()?,
            }),
            "comment:reply" => Ok(Request::Reply {
                request_id: request_id()?,
                thread: thread(true)?.unwrap_or_default(),
                text: text()?,
                to_planner: to_planner()?,
            }),
            "comment:resolve" => Ok(Request::Resolve {
                request_id: request_id()?,
                thread: thread(true)?.unwrap_or_default(),
            }),
            "comment:list" => Ok(Request::List {
                request_id: text_of("requestId").unwrap_or_default(),
            }),
            other => Err(Malformed(format!("unknown message type {other:?}"))),
        }
    }

    pub fn request_id(&self) -> &str {
        match self {
            Request::Start { request_id, .. }
            | Request::Reply { request_id, .. }
            | Request::Resolve { request_id, .. }
            | Request::List { request_id } => request_id,
        }
    }

    pub fn to_planner(&self) -> bool {
        matches!(
            self,
            Request::Start {
                to_planner: true,
                ..
            } | Request::Reply {
                to_planner: true,
                ..
            }
        )
    }
}

/// A thread as the wire has it, without its notes.
pub fn thread_json(thread: &CommentThread) -> Value {
    json!({
        "id": thread.id,
        "document": thread.document_id,
        "quote": thread.quote,
        "createdBy": thread.created_by,
        "createdAt": thread.created_at_ms,
        "resolved": thread.resolved_at_ms.is_some(),
        "resolvedBy": thread.resolved_by,
        "resolvedAt": thread.resolved_at_ms,
        "replies": thread.replies,
        "full": thread.replies >= REPLIES_MAX,
        "resultRevision": thread.result_revision,
    })
}

/// A note as the wire has it: `author` is the person's login, or `null` for chopin.
pub fn note_json(note: &CommentNote) -> Value {
    json!({
        "thread": note.thread_id,
        "seq": note.seq,
        "author": note.author_login,
        "planner": note.author_login.is_none(),
        "toPlanner": note.to_planner,
        "text": note.body,
        "createdAt": note.created_at_ms,
    })
}

/// A thread with its notes, as `comment:list` sends it.
pub fn thread_with_notes_json((thread, notes): &ThreadWithNotes) -> Value {
    let mut value = thread_json(thread);
    value["notes"] = notes.iter().map(note_json).collect();
    value
}

/// A saved note and its thread as it is now.
#[derive(Debug, Clone)]
pub struct Saved {
    pub thread: CommentThread,
    pub note: CommentNote,
}

impl Saved {
    /// The `comment:ack` frame answering `request_id`.
    pub fn ack(&self, request_id: &str) -> Value {
        json!({
            "type": "comment:ack",
            "requestId": request_id,
            "thread": thread_json(&self.thread),
            "note": note_json(&self.note),
        })
    }
}

/// The documents' comment threads.
pub struct Comments {
    store: Arc<dyn Store>,
    clock: SharedClock,
    /// Each document's channel of changes (`comment:thread` frames), while some room listens.
    feeds: Mutex<BTreeMap<Uuid, fanout::Sender<Bytes>>>,
    /// Answers already given, by sender, document and request id.
    kept: Arc<KeptRequests>,
}

fn storage_refusal(e: &StoreError) -> Refusal {
    match e {
        StoreError::NotFound("comment thread") => Refusal::new("thread-not-found", NO_THREAD_WORDS),
        StoreError::NotFound(_) => Refusal::new(
            "document-not-found",
            "This document is gone, so your comment wasn't saved.",
        ),
        e => {
            tracing::error!(error = %e, "comments: a change could not be saved");
            Refusal::new("not-saved", NOT_SAVED_WORDS)
        }
    }
}

impl Comments {
    pub fn new(store: Arc<dyn Store>, clock: SharedClock, kept: Arc<KeptRequests>) -> Self {
        Comments {
            store,
            clock,
            feeds: Mutex::default(),
            kept,
        }
    }

    /// Claims `request_id` of `login` about `document` for this note: [`Kept::Answered`] with
    /// the first answer (a `comment:ack`) when it was saved before, on any process; else the
    /// claim under which it is processed, to [`crate::kept::Claimed::answer`] with an ack or
    /// [`crate::kept::Claimed::release`] otherwise (a refusal saved nothing and is not kept).
    pub async fn claim(
        &self,
        login: &str,
        document: Uuid,
        request_id: &str,
    ) -> Result<Kept<'_>, Refusal> {
        let key = RequestKey {
            scope: SCOPE.to_owned(),
            holder: login.to_owned(),
            key: format!("{document}:{request_id}"),
            document: Some(document),
        };
        self.kept
            .claim(key, "", ANSWERS_MS)
            .await
            .map_err(|e| storage_refusal(&e))
    }

    /// `document`'s changes, as `comment:thread` frames (JSON text).
    pub fn subscribe(&self, document: Uuid) -> fanout::Receiver<Bytes> {
        self.feeds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(document)
            .or_insert_with(|| fanout::Sender::new(FEED_BACKLOG))
            .subscribe()
    }

    /// Tells `document`'s rooms of a change (after it is saved); forgets the channel once
    /// nobody listens.
    fn tell(&self, thread: &CommentThread, note: Option<&CommentNote>) {
        let mut frame = json!({ "type": "comment:thread", "thread": thread_json(thread) });
        if let Some(note) = note {
            frame["note"] = note_json(note);
        }
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(feed) = feeds.get(&thread.document_id) {
            if feed.send(Bytes::from(frame.to_string())).is_err() {
                feeds.remove(&thread.document_id);
            }
        }
    }

    /// `document`'s thread, if it has it.
    pub async fn thread(
        &self,
        document: Uuid,
        thread: Uuid,
    ) -> Result<Option<ThreadWithNotes>, Refusal> {
        self.store
            .comment_thread(document, thread)
            .await
            .map_err(|e| storage_refusal(&e))
    }

    /// Whether `thread` of `document` takes another reply now (exists, open, not full).
    pub async fn open_thread(
        &self,
        document: Uuid,
        thread: Uuid,
    ) -> Result<CommentThread, Refusal> {
        let Some((thread, _)) = self.thread(document, thread).await? else {
            return Err(Refusal::new("thread-not-found", NO_THREAD_WORDS));
        };
        if thread.resolved_at_ms.is_some() {
            return Err(Refusal::new("thread-resolved", RESOLVED_WORDS));
        }
        if thread.replies >= REPLIES_MAX {
            return Err(Refusal::new("thread-full", FULL_WORDS));
        }
        Ok(thread)
    }

    /// Starts a thread in `document` by `login` on `quote`, saved before the room hears of it.
    /// Sent again with the same `id` by its starter, it answers with the thread as saved.
    pub async fn start(
        &self,
        document: Uuid,
        login: &str,
        id: Uuid,
        quote: &str,
        text: &str,
        to_planner: bool,
    ) -> Result<Saved, Refusal> {
        check_text(text)?;
        let chars = quote.chars().count();
        if chars > QUOTE_MAX_CHARS {
            return Err(Refusal::new(
                "too-long",
                format!("A comment's quoted passage is at most 1,000 characters; this one has {chars}, so it wasn't saved."),
            ));
        }
        let new = NewCommentThread {
            id,
            document_id: document,
            quote: quote.to_owned(),
            first: NewCommentNote {
                author_login: Some(login.to_owned()),
                to_planner,
                body: text.to_owned(),
                created_at_ms: self.clock.now_ms(),
            },
        };
        match self.store.start_comment(&new).await {
            Ok((thread, mut notes)) => {
                let note = notes.remove(0);
                self.tell(&thread, Some(&note));
                Ok(Saved { thread, note })
            }
            Err(StoreError::Conflict(_)) => match self.thread(document, id).await? {
                Some((thread, notes)) if thread.created_by == login => Ok(Saved {
                    thread,
                    note: notes
                        .into_iter()
                        .next()
                        .expect("a thread has its opening note"),
                }),
                _ => Err(Refusal::new(
                    "thread-taken",
                    "That thread id is taken; start the thread with another.",
                )),
            },
            Err(e) => Err(storage_refusal(&e)),
        }
    }

    /// Adds a note to `thread` of `document`, by `login` (`None`: the Planner), saved before the
    /// room hears of it (ISO-21); refused for a resolved or full thread (ISO-19).
    pub async fn reply(
        &self,
        document: Uuid,
        thread: Uuid,
        login: Option<&str>,
        text: &str,
        to_planner: bool,
    ) -> Result<Saved, Refusal> {
        check_text(text)?;
        let note = NewCommentNote {
            author_login: login.map(str::to_owned),
            to_planner,
            body: text.to_owned(),
            created_at_ms: self.clock.now_ms(),
        };
        match self
            .store
            .reply_comment(document, thread, &note, REPLIES_MAX)
            .await
        {
            Ok(Replied::Saved(thread, note)) => {
                self.tell(&thread, Some(&note));
                Ok(Saved { thread, note })
            }
            Ok(Replied::Resolved) => Err(Refusal::new("thread-resolved", RESOLVED_WORDS)),
            Ok(Replied::Full) => Err(Refusal::new("thread-full", FULL_WORDS)),
            Err(e) => Err(storage_refusal(&e)),
        }
    }

    /// [`Comments::reply`] by `login` under a request's claim. `taken_over`: when the claim was
    /// made, by an earlier call that never answered — that call may have saved this reply and
    /// died before answering, so a note of `login`'s with these words saved since then is taken
    /// as that reply and answered, not saved a second time.
    pub async fn reply_claimed(
        &self,
        document: Uuid,
        thread: Uuid,
        login: &str,
        text: &str,
        to_planner: bool,
        taken_over: Option<i64>,
    ) -> Result<Saved, Refusal> {
        if let Some(since) = taken_over {
            if let Some((saved_thread, notes)) = self.thread(document, thread).await? {
                let earlier = notes.into_iter().find(|note| {
                    note.seq > 0
                        && note.author_login.as_deref() == Some(login)
                        && note.to_planner == to_planner
                        && note.body == text
                        && note.created_at_ms >= since
                });
                if let Some(note) = earlier {
                    return Ok(Saved {
                        thread: saved_thread,
                        note,
                    });
                }
            }
        }
        self.reply(document, thread, Some(login), text, to_planner)
            .await
    }

    /// Resolves `thread` of `document` (a second resolve changes nothing).
    pub async fn resolve(
        &self,
        document: Uuid,
        thread: Uuid,
        login: &str,
    ) -> Result<CommentThread, Refusal> {
        let resolved = self
            .store
            .resolve_comment(document, thread, login, self.clock.now_ms())
            .await
            .map_err(|e| storage_refusal(&e))?;
        self.tell(&resolved, None);
        Ok(resolved)
    }

    /// Records `revision` as the result of `thread` (ISO-22, ISO-26). Logged, not returned: the
    /// write it records is already saved.
    pub async fn record_result(&self, document: Uuid, thread: Uuid, revision: i64) {
        match self
            .store
            .set_comment_result(document, thread, revision)
            .await
        {
            Ok(thread) => self.tell(&thread, None),
            Err(e) => {
                tracing::error!(error = %e, %document, %thread, "comments: a thread's result could not be recorded");
            }
        }
    }

    /// The `comment:threads` frame answering `request_id`: the document's newest threads with
    /// their notes.
    pub async fn list(&self, document: Uuid, request_id: &str) -> Result<Value, Refusal> {
        let threads = self
            .store
            .comment_threads(document, THREADS_LISTED + 1)
            .await
            .map_err(|e| storage_refusal(&e))?;
        let more = threads.len() as i64 > THREADS_LISTED;
        let threads: Vec<Value> = threads
            .iter()
            .take(THREADS_LISTED as usize)
            .map(thread_with_notes_json)
            .collect();
        Ok(
            json!({ "type": "comment:threads", "requestId": request_id, "threads": threads, "more": more }),
        )
    }
}
