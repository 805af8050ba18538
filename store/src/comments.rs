//! Comment threads on a document (`comment_threads`, `comment_notes`): a passage someone quoted,
//! the note that opened the thread, the replies after it (people's and the Planner's), whether
//! it was resolved, and the revision the Planner's comment turn wrote as the thread's result
//! (ISO-22, ISO-26).
//!
//! Owns: numbering a thread's notes gap-free from 0 (the opening note), the reply cap checked in
//! the same write as the reply (RULINGS ISO-20), and "a resolved thread takes no reply".
//! Does not own: who may write (the server checks access) or what starts a Planner turn.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{StoreResult, UnixMillis};

/// A comment thread, without its notes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentThread {
    pub id: Uuid,
    pub document_id: Uuid,
    /// The passage the thread is about, as quoted when it was started.
    pub quote: String,
    /// The GitHub login of the person who started it.
    pub created_by: String,
    pub created_at_ms: UnixMillis,
    pub resolved_by: Option<String>,
    pub resolved_at_ms: Option<UnixMillis>,
    /// Notes after the opening one.
    pub replies: i64,
    /// The document revision the Planner's comment turn last wrote (its result), if any.
    pub result_revision: Option<i64>,
}

/// One note of a thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentNote {
    pub thread_id: Uuid,
    /// 0 for the note that opened the thread, then 1, 2, … in the order they were saved.
    pub seq: i64,
    /// The person who wrote it; `None` for the Planner.
    pub author_login: Option<String>,
    /// Sent to the Planner (`to: "planner"`).
    pub to_planner: bool,
    pub body: String,
    pub created_at_ms: UnixMillis,
}

/// A note to add.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewCommentNote {
    pub author_login: Option<String>,
    pub to_planner: bool,
    pub body: String,
    pub created_at_ms: UnixMillis,
}

/// A thread to start, with its opening note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCommentThread {
    pub id: Uuid,
    pub document_id: Uuid,
    pub quote: String,
    pub first: NewCommentNote,
}

/// What [`CommentStore::reply_comment`] did. Returned once per reply and matched at once, so
/// the saved variant's size is not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replied {
    /// Saved, with its number, and the thread as it is now.
    Saved(CommentThread, CommentNote),
    /// The thread was resolved: nothing saved.
    Resolved,
    /// The thread already has the most replies it takes: nothing saved.
    Full,
}

/// A thread and its notes in order.
pub type ThreadWithNotes = (CommentThread, Vec<CommentNote>);

/// The documents' comment threads.
#[async_trait]
pub trait CommentStore: Send + Sync + 'static {
    /// Starts `thread` with its opening note (number 0). `NotFound("document")` for an unknown
    /// document; `Conflict` if the id is taken.
    async fn start_comment(&self, thread: &NewCommentThread) -> StoreResult<ThreadWithNotes>;
    /// Adds `note` to `document_id`'s thread `thread_id` if it is open and has fewer than
    /// `max_replies` replies, checked in the same write. `NotFound("comment thread")` if the
    /// document has no such thread.
    async fn reply_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        note: &NewCommentNote,
        max_replies: i64,
    ) -> StoreResult<Replied>;
    /// Resolves the thread (a second resolve keeps the first one's who and when). The thread as
    /// it is now; `NotFound("comment thread")` if the document has no such thread.
    async fn resolve_comment(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        by: &str,
        at_ms: UnixMillis,
    ) -> StoreResult<CommentThread>;
    /// Records `revision` as the thread's result. `NotFound("comment thread")` if the document
    /// has no such thread.
    async fn set_comment_result(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
        revision: i64,
    ) -> StoreResult<CommentThread>;
    /// The thread with its notes, if the document has it.
    async fn comment_thread(
        &self,
        document_id: Uuid,
        thread_id: Uuid,
    ) -> StoreResult<Option<ThreadWithNotes>>;
    /// The document's newest `limit` threads, newest first, each with its notes.
    async fn comment_threads(
        &self,
        document_id: Uuid,
        limit: i64,
    ) -> StoreResult<Vec<ThreadWithNotes>>;
}

impl NewCommentNote {
    /// The note as every backend stores it ([`crate::storable`]).
    pub(crate) fn storable(&self) -> NewCommentNote {
        NewCommentNote {
            author_login: self
                .author_login
                .as_deref()
                .map(|l| crate::storable(l).into_owned()),
            body: crate::storable(&self.body).into_owned(),
            ..self.clone()
        }
    }

    /// The note, numbered `seq` in `thread_id`.
    pub(crate) fn numbered(&self, thread_id: Uuid, seq: i64) -> CommentNote {
        CommentNote {
            thread_id,
            seq,
            author_login: self.author_login.clone(),
            to_planner: self.to_planner,
            body: self.body.clone(),
            created_at_ms: self.created_at_ms,
        }
    }
}

impl NewCommentThread {
    /// The thread as it is just started (stored text, no replies).
    pub(crate) fn started(&self) -> ThreadWithNotes {
        let first = self.first.storable();
        (
            CommentThread {
                id: self.id,
                document_id: self.document_id,
                quote: crate::storable(&self.quote).into_owned(),
                created_by: first.author_login.clone().unwrap_or_default(),
                created_at_ms: first.created_at_ms,
                resolved_by: None,
                resolved_at_ms: None,
                replies: 0,
                result_revision: None,
            },
            vec![first.numbered(self.id, 0)],
        )
    }
}
