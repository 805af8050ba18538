//! Replacing a document's source from outside (MCP `update_document`), once per idempotency
//! key.
//!
//! Owns: [`Updates`] — the write (checked and committed as `edit_plan` commits a batch, see
//! [`crate::content::OpenDocument::replace_source`]) and the memory of idempotency keys: a
//! caller who sends the same key for the same document again within
//! [`IDEMPOTENCY_MEMORY_MS`] gets the first answer back and nothing is written twice; the same
//! key with other arguments is refused `idempotency-key-reused`. Two calls with one key at once
//! are taken one after the other, so exactly one of them writes.
//! Does not own: who may write (the caller checked push access), or what a valid source is
//! (`chopin_document::edit::replace_source`).
//!
//! Invariants: the memory is bounded per caller ([`IDEMPOTENCY_KEYS_PER_ACCOUNT`], at most
//! [`IDEMPOTENCY_ACCOUNTS`] callers) and keyed by the caller's login, so one caller's key never
//! answers another's call and one caller's flood never pushes out another's keys; it keeps a
//! digest of each request and the answer without the source, never a source.

use std::sync::{Arc, Mutex, PoisonError};

use chopin_document::edit::{EditOutcome, EditResult};
use chopin_document::DocumentRef;
use http::StatusCode;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{canonical_url, Documents};
use crate::content::{EditRefused, OpenDocuments};
use crate::error::ApiError;
use crate::runtime::gates::Gates;
use crate::runtime::recent::RecentByOwner;
use crate::runtime::SharedClock;
use crate::store::Document;

/// How long an idempotency key's answer is remembered.
pub const IDEMPOTENCY_MEMORY_MS: i64 = 10 * 60 * 1000;
/// Most keys remembered per account (its oldest go first).
pub const IDEMPOTENCY_KEYS_PER_ACCOUNT: usize = 1_000;
/// Most accounts whose keys are remembered at once (those heard from longest ago go first).
pub const IDEMPOTENCY_ACCOUNTS: usize = 10_000;
/// Longest idempotency key, in characters.
pub const IDEMPOTENCY_KEY_MAX_CHARS: usize = 200;

/// A key, per caller: the document and the caller's key.
type Key = (Uuid, String);

/// Checks an idempotency key's length: 1 to [`IDEMPOTENCY_KEY_MAX_CHARS`] characters
/// (`invalid-arguments` otherwise), so a bad key is refused before anything else is done.
pub fn check_key(key: &str) -> Result<(), ApiError> {
    let chars = key.chars().count();
    if chars == 0 || chars > IDEMPOTENCY_KEY_MAX_CHARS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-arguments",
            format!("idempotencyKey is 1 to {IDEMPOTENCY_KEY_MAX_CHARS} characters"),
        ));
    }
    Ok(())
}

/// The first answer to a key (without the source it wrote), and the digest of the request it
/// answered.
struct Remembered {
    request: [u8; 32],
    result: EditResult,
}

/// `result` as it is remembered: an applied one without its new source (the caller is told the
/// revision it is at, never the source again).
fn without_source(result: &EditResult) -> EditResult {
    let mut kept = result.clone();
    if let EditOutcome::Applied { source, .. } = &mut kept.outcome {
        *source = String::new();
    }
    kept
}

/// Source replacements of this process and their idempotency keys.
pub struct Updates {
    documents: Arc<Documents>,
    open: Arc<OpenDocuments>,
    clock: SharedClock,
    memory: Mutex<RecentByOwner<String, Key, Remembered>>,
    keys: Gates<(String, Key)>,
}

/// What an update asks: the source, made from plan revision `revision`.
pub struct Update<'a> {
    pub revision: u64,
    pub source: &'a str,
    pub idempotency_key: &'a str,
}

impl Updates {
    pub fn new(documents: Arc<Documents>, open: Arc<OpenDocuments>, clock: SharedClock) -> Self {
        Updates {
            documents,
            open,
            clock,
            memory: Mutex::new(RecentByOwner::new(
                IDEMPOTENCY_MEMORY_MS,
                IDEMPOTENCY_KEYS_PER_ACCOUNT,
                IDEMPOTENCY_ACCOUNTS,
            )),
            keys: Gates::default(),
        }
    }

    /// Replaces `doc`'s source for `login` (a writer), or answers what the first call with
    /// this key answered. The result says whether it applied or why not (stale, invalid).
    pub async fn update(
        &self,
        login: &str,
        doc: &Document,
        update: &Update<'_>,
    ) -> Result<EditResult, ApiError> {
        check_key(update.idempotency_key)?;
        let key: Key = (doc.id, update.idempotency_key.to_owned());
        let request: [u8; 32] = Sha256::new()
            .chain_update(update.revision.to_be_bytes())
            .chain_update(update.source.as_bytes())
            .finalize()
            .into();
        let _one_at_a_time = self.keys.lock((login.to_owned(), key.clone())).await;
        if let Some(answer) = self.remembered(login, &key, &request) {
            return answer;
        }
        let open = self.open.open(doc.id).await.map_err(ApiError::store)?;
        let earlier = self
            .documents
            .earlier_urls(doc)
            .await
            .map_err(ApiError::store)?;
        let document = DocumentRef {
            id: doc.id.to_string(),
            url: canonical_url(doc),
        };
        let result = match open
            .replace_source(document, &earlier, update.revision, update.source)
            .await
        {
            Ok(result) => result,
            Err(EditRefused::Store(e)) => return Err(ApiError::store(e)),
            // No owner guard is given, so storage never refuses one.
            Err(EditRefused::NotOwner) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "stale",
                    EditRefused::NotOwner.to_string(),
                ))
            }
        };
        let remembered = Remembered {
            request,
            result: without_source(&result),
        };
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(login.to_owned(), key, remembered, self.clock.now_ms());
        Ok(result)
    }

    /// The answer remembered for `key`, if any: the same one for the same request, a refusal
    /// for another.
    fn remembered(
        &self,
        login: &str,
        key: &Key,
        request: &[u8; 32],
    ) -> Option<Result<EditResult, ApiError>> {
        let now = self.clock.now_ms();
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let remembered = memory.get(&login.to_owned(), key, now)?;
        if &remembered.request == request {
            return Some(Ok(remembered.result.clone()));
        }
        Some(Err(ApiError::new(
            StatusCode::CONFLICT,
            "idempotency-key-reused",
            "This idempotencyKey was already used for another update of this document; use a new key for a new update.",
        )))
    }
}
