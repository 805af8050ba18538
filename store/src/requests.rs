//! Requests kept under their callers' keys for a while (`kept_requests`): what makes a retried
//! call answer what the first one answered, whichever process the retry reaches.
//!
//! Owns: the claim of a key — one caller's key, in one scope, is claimed by one call at a time
//! until it expires — the digest of the input the claim was made for, and the answer recorded
//! once the call is done. An expired claim is as good as none: the next claim replaces it, and
//! every claim sweeps away the expired rows, so the table holds only live keys.
//! Does not own: what a scope's answer is (the server's JSON, opaque here), how long a key is
//! kept (the caller gives each claim its expiry), or what a claim held by an earlier call that
//! never answered means (the caller knows whether that call can still be running).

use async_trait::async_trait;
use uuid::Uuid;

use crate::{StoreResult, UnixMillis};

/// One caller's key in one scope: `scope` names the kind of call (`create_document`),
/// `holder` the caller as the scope knows it (an account id, a login), `key` the caller's key
/// (with whatever else makes it one, such as a document id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    pub scope: String,
    pub holder: String,
    pub key: String,
    /// The document the call is about, if any: its writes are fenced by that document's lease
    /// where documents are served by several processes. Not part of the key.
    pub document: Option<Uuid>,
}

/// A claim as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptRequest {
    /// The caller's digest of the input the claim was made for.
    pub digest: String,
    /// The answer recorded; `None` while the claiming call has not answered.
    pub answer: Option<String>,
    /// When the claim was made: it names the claim, so an answer or a release reaches only it.
    pub since_ms: UnixMillis,
    pub expires_at_ms: UnixMillis,
}

/// What [`RequestStore::claim_request`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestClaim {
    /// The key was free (or its claim expired): it is claimed now, at `since_ms`.
    Claimed { since_ms: UnixMillis },
    /// A live claim holds the key: the first call's.
    Held(KeptRequest),
}

/// Claims, answers and releases of request keys (see the module documentation).
#[async_trait]
pub trait RequestStore: Send + Sync + 'static {
    /// Claims `key` for input `digest` at `now_ms` until `expires_at_ms`, unless a claim that
    /// expires after `now_ms` holds it: then that claim, unchanged. Sweeps away every claim
    /// expired at `now_ms`, in the same write.
    async fn claim_request(
        &self,
        key: &RequestKey,
        digest: &str,
        now_ms: UnixMillis,
        expires_at_ms: UnixMillis,
    ) -> StoreResult<RequestClaim>;
    /// Records `answer` on the claim of `key` made at `since_ms`; false (nothing changed) when
    /// the key is not held by that claim any more.
    async fn answer_request(
        &self,
        key: &RequestKey,
        since_ms: UnixMillis,
        answer: &str,
    ) -> StoreResult<bool>;
    /// Releases the claim of `key` made at `since_ms`, so the key is free again; false
    /// (nothing changed) when the key is not held by that claim any more.
    async fn release_request(&self, key: &RequestKey, since_ms: UnixMillis) -> StoreResult<bool>;
}
