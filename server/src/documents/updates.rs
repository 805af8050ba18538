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
//! Invariants: the memory is bounded ([`IDEMPOTENCY_MEMORY_ENTRIES`]) and keyed by the caller's
//! login as well, so one caller's key never answers another's call.

use std::sync::{Arc, Mutex, PoisonError};

use chopin_document::edit::EditResult;
use chopin_document::DocumentRef;
use http::StatusCode;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{canonical_url, Documents};
use crate::content::{EditRefused, OpenDocuments};
use crate::error::ApiError;
use crate::runtime::gates::Gates;
use crate::runtime::recent::Recent;
use crate::runtime::SharedClock;
use crate::store::Document;

/// How long an idempotency key's answer is remembered.
pub const IDEMPOTENCY_MEMORY_MS: i64 = 10 * 60 * 1000;
/// Most answers remembered at once (the oldest go first).
pub const IDEMPOTENCY_MEMORY_ENTRIES: usize = 10_000;
/// Longest idempotency key, in characters.
pub const IDEMPOTENCY_KEY_MAX_CHARS: usize = 200;

type Key = (String, Uuid, String);

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

/// The first answer to a key, and the digest of the request it answered.
struct Remembered {
    request: [u8; 32],
    result: EditResult,
}

/// Source replacements of this process and their idempotency keys.
pub struct Updates {
    documents: Arc<Documents>,
    open: Arc<OpenDocuments>,
    clock: SharedClock,
    memory: Mutex<Recent<Key, Remembered>>,
    keys: Gates<Key>,
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
            memory: Mutex::new(Recent::new(
                IDEMPOTENCY_MEMORY_MS,
                IDEMPOTENCY_MEMORY_ENTRIES,
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
        let key: Key = (login.to_owned(), doc.id, update.idempotency_key.to_owned());
        let request: [u8; 32] = Sha256::new()
            .chain_update(update.revision.to_be_bytes())
            .chain_update(update.source.as_bytes())
            .finalize()
            .into();
        let _one_at_a_time = self.keys.lock(key.clone()).await;
        if let Some(answer) = self.remembered(&key, &request) {
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
            result: result.clone(),
        };
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, remembered, self.clock.now_ms());
        Ok(result)
    }

    /// The answer remembered for `key`, if any: the same one for the same request, a refusal
    /// for another.
    fn remembered(&self, key: &Key, request: &[u8; 32]) -> Option<Result<EditResult, ApiError>> {
        let now = self.clock.now_ms();
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        let remembered = memory.get(key, now)?;
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
