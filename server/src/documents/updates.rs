//! Replacing a document's source from outside (MCP `update_document`), once per idempotency
//! key.
//!
//! Owns: [`Updates`] — the write (checked and committed as `edit_plan` commits a batch, see
//! [`crate::content::OpenDocument::replace_source`]) and its idempotency keys: a caller who
//! sends the same key for the same document again within [`IDEMPOTENCY_MEMORY_MS`] gets the
//! first answer back and nothing is written twice, whichever process the retry reaches (the
//! keys are kept in the store, [`crate::kept`]); the same key with other arguments is refused
//! `idempotency-key-reused`. Calls with one key on this process are taken one after the other,
//! so exactly one of them writes.
//! Does not own: who may write (the caller checked push access), or what a valid source is
//! (`chopin_document::edit::replace_source`).
//!
//! Invariants: keys are kept by the caller's login and the document, so one caller's key never
//! answers another's call; what is kept is a digest of each request and the answer without the
//! source, never a source. A key's claim is fenced by the document's lease: a process that lost
//! the document can record no answer for it. A call that failed frees its key.

use std::sync::Arc;

use chopin_document::edit::{EditOutcome, EditResult};
use chopin_document::DocumentRef;
use http::StatusCode;
use sha2::{Digest, Sha256};

use super::{canonical_url, Documents};
use crate::content::{EditRefused, OpenDocuments};
use crate::error::ApiError;
use crate::kept::{Kept, KeptRequests};
use crate::store::{Document, RequestKey, StoreError};

/// How long an idempotency key's answer is remembered.
pub const IDEMPOTENCY_MEMORY_MS: i64 = 10 * 60 * 1000;
/// Longest idempotency key, in characters.
pub const IDEMPOTENCY_KEY_MAX_CHARS: usize = 200;

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

/// `result` as it is kept: an applied one without its new source (the caller is told the
/// revision it is at, never the source again).
fn without_source(result: &EditResult) -> EditResult {
    let mut kept = result.clone();
    if let EditOutcome::Applied { source, .. } = &mut kept.outcome {
        *source = String::new();
    }
    kept
}

/// The scope `update_document`'s keys are kept in.
const SCOPE: &str = "update_document";

/// Source replacements and their idempotency keys.
pub struct Updates {
    documents: Arc<Documents>,
    open: Arc<OpenDocuments>,
    kept: Arc<KeptRequests>,
}

fn reused() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "idempotency-key-reused",
        "This idempotencyKey was already used for another update of this document; use a new key for a new update.",
    )
}

/// What an update asks: the source, made from plan revision `revision`.
pub struct Update<'a> {
    pub revision: u64,
    pub source: &'a str,
    pub idempotency_key: &'a str,
}

impl Updates {
    pub fn new(
        documents: Arc<Documents>,
        open: Arc<OpenDocuments>,
        kept: Arc<KeptRequests>,
    ) -> Self {
        Updates {
            documents,
            open,
            kept,
        }
    }

    /// Replaces `doc`'s source for `login` (a writer), or answers what the first call with
    /// this key answered, whichever process that was. The result says whether it applied or
    /// why not (stale, invalid).
    pub async fn update(
        &self,
        login: &str,
        doc: &Document,
        update: &Update<'_>,
    ) -> Result<EditResult, ApiError> {
        check_key(update.idempotency_key)?;
        let request = hex::encode(
            Sha256::new()
                .chain_update(update.revision.to_be_bytes())
                .chain_update(update.source.as_bytes())
                .finalize(),
        );
        let key = RequestKey {
            scope: SCOPE.to_owned(),
            holder: login.to_owned(),
            key: format!("{}:{}", doc.id, update.idempotency_key),
            document: Some(doc.id),
        };
        let claim = match self
            .kept
            .claim(key, &request, IDEMPOTENCY_MEMORY_MS)
            .await
            .map_err(ApiError::store)?
        {
            Kept::Answered { digest, answer } if digest == request => {
                return serde_json::from_str(&answer).map_err(|e| {
                    ApiError::store(StoreError::Backend(format!(
                        "a kept update's answer cannot be read: {e}"
                    )))
                })
            }
            Kept::Answered { .. } => return Err(reused()),
            Kept::Go(claim) => claim,
        };
        // An earlier call with other arguments, which never answered: left as it is.
        if claim.earlier_for_other_input(&request) {
            return Err(reused());
        }
        let write = self.write(doc, update).await;
        let write = match (write, claim.taken_over_since().is_some()) {
            (Ok(result), true) => self.made_before(doc, update, result).await,
            (write, _) => write,
        };
        match write {
            Ok(result) => {
                let kept = serde_json::to_string(&without_source(&result))
                    .unwrap_or_else(|_| String::from("null"));
                claim.answer(&kept).await;
                Ok(result)
            }
            Err(e) => {
                claim.release().await;
                Err(e)
            }
        }
    }

    /// `result` of an update under a claim taken over from a call that never answered. That
    /// call may have committed this very update and died before answering: then the document
    /// is one revision past `update.revision` with `update.source` as its source, and the
    /// update is answered applied at that revision instead of stale (nothing is written).
    async fn made_before(
        &self,
        doc: &Document,
        update: &Update<'_>,
        result: EditResult,
    ) -> Result<EditResult, ApiError> {
        let EditOutcome::Stale {
            current_revision, ..
        } = result.outcome
        else {
            return Ok(result);
        };
        if current_revision != update.revision + 1 {
            return Ok(result);
        }
        let open = self.open.open(doc.id).await.map_err(ApiError::store)?;
        if open.source().await != update.source {
            return Ok(result);
        }
        Ok(EditResult {
            outcome: EditOutcome::Applied {
                base_revision: update.revision,
                revision: current_revision,
                source: update.source.to_owned(),
            },
            ..result
        })
    }

    /// The write itself: `update.source` made from `update.revision`, checked and committed.
    async fn write(&self, doc: &Document, update: &Update<'_>) -> Result<EditResult, ApiError> {
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
        match open
            .replace_source(document, &earlier, update.revision, update.source)
            .await
        {
            Ok(result) => Ok(result),
            Err(EditRefused::Store(e)) => Err(ApiError::store(e)),
            // No owner guard is given, so storage never refuses one.
            Err(EditRefused::NotOwner) => Err(ApiError::new(
                StatusCode::CONFLICT,
                "stale",
                EditRefused::NotOwner.to_string(),
            )),
        }
    }
}
