//! Calls made once per caller's key, whichever process the retry of a call reaches: the claim
//! of the key is stored ([`RequestStore`]), so a process that never saw the first call — one
//! that took its document over, a restarted one, another behind the balancer — answers what the
//! first call answered.
//!
//! Owns: [`KeptRequests`] — claiming a key for one call at a time (calls with one key on this
//! process wait for each other; across processes the store's claim decides), and the
//! [`Claimed`] guard through which the call records its answer or frees the key.
//! Does not own: what a scope's answer means, or what to do with a claim an earlier call made
//! and never answered (the caller knows whether that call can still be running and whether its
//! effect can be redone safely).
//!
//! Invariants: the answer recorded is the one returned to the first call; a key is kept for the
//! memory its caller gives, then free again; nothing here holds a key in memory after its call.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::runtime::gates::{Gate, Gates};
use crate::runtime::SharedClock;
use crate::store::{RequestClaim, RequestKey, RequestStore, StoreError};

/// Claims of request keys, stored.
pub struct KeptRequests {
    store: Arc<dyn RequestStore>,
    clock: SharedClock,
    /// This process's calls with one key, one after the other.
    keys: Gates<(String, String, String)>,
}

/// What a key's claim found.
pub enum Kept<'a> {
    /// This call goes ahead under the claim (see [`Claimed`]).
    Go(Claimed<'a>),
    /// An earlier call with this key answered `answer`, for input `digest`.
    Answered { digest: String, answer: String },
}

/// A claim this call holds until it answers or frees it. Dropped without either, the claim
/// stays unanswered until it expires: a retry then takes it over.
pub struct Claimed<'a> {
    kept: &'a KeptRequests,
    key: RequestKey,
    /// When the claim was made; it names the claim.
    pub since_ms: i64,
    /// `Some`: the claim was an earlier call's that never answered, made for input with this
    /// digest — that call died with its process, or is still under way elsewhere.
    taken_over: Option<String>,
    _one_at_a_time: Gate<'a, (String, String, String)>,
}

impl KeptRequests {
    pub fn new(store: Arc<dyn RequestStore>, clock: SharedClock) -> Self {
        KeptRequests {
            store,
            clock,
            keys: Gates::default(),
        }
    }

    /// Claims `key` for a call with input `digest`, kept `memory_ms` from now.
    pub async fn claim(
        &self,
        key: RequestKey,
        digest: &str,
        memory_ms: i64,
    ) -> Result<Kept<'_>, StoreError> {
        let gate = self
            .keys
            .lock((key.scope.clone(), key.holder.clone(), key.key.clone()))
            .await;
        let now = self.clock.now_ms();
        let claim = self
            .store
            .claim_request(&key, digest, now, now + memory_ms)
            .await?;
        Ok(match claim {
            RequestClaim::Claimed { since_ms } => Kept::Go(Claimed {
                kept: self,
                key,
                since_ms,
                taken_over: None,
                _one_at_a_time: gate,
            }),
            RequestClaim::Held(held) => match held.answer {
                Some(answer) => Kept::Answered {
                    digest: held.digest,
                    answer,
                },
                None => Kept::Go(Claimed {
                    kept: self,
                    key,
                    since_ms: held.since_ms,
                    taken_over: Some(held.digest),
                    _one_at_a_time: gate,
                }),
            },
        })
    }
}

/// The id of what the claim of `key` made at `since_ms` makes (see [`Claimed::made_id`]).
pub fn made_id(key: &RequestKey, since_ms: i64) -> Uuid {
    let mut hash = Sha256::new();
    for part in [&key.scope, &key.holder, &key.key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.update(since_ms.to_be_bytes());
    let hash = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

impl Claimed<'_> {
    /// The id of what this call makes (a document, a thread): the same for every call under
    /// this claim and no other claim's, so a call that takes over the claim of one that died
    /// makes it under the same id — and finds it, if that call made it before it died.
    pub fn made_id(&self) -> Uuid {
        made_id(&self.key, self.since_ms)
    }

    /// Whether this claim is an earlier call's that never answered, made for input other than
    /// `digest` (that call may still be under way: its claim is left as it is).
    pub fn earlier_for_other_input(&self, digest: &str) -> bool {
        self.taken_over
            .as_deref()
            .is_some_and(|first| first != digest)
    }

    /// When the claim was made, if it is an earlier call's that never answered (that call may
    /// have had its effect and died before answering).
    pub fn taken_over_since(&self) -> Option<i64> {
        self.taken_over.is_some().then_some(self.since_ms)
    }

    /// Records `answer` as the key's, for every later call with it. A failure is logged: the
    /// call has had its effect, and a retry takes the unanswered claim over.
    pub async fn answer(self, answer: &str) {
        if let Err(e) = self
            .kept
            .store
            .answer_request(&self.key, self.since_ms, answer)
            .await
        {
            tracing::warn!(scope = %self.key.scope, error = %e, "a request's answer could not be kept");
        }
    }

    /// Frees the key: the call made nothing worth answering again (a refusal, a failure), so
    /// the next call with it is processed anew. A failure is logged: the claim then stays
    /// unanswered until it expires, and a retry takes it over.
    pub async fn release(self) {
        if let Err(e) = self
            .kept
            .store
            .release_request(&self.key, self.since_ms)
            .await
        {
            tracing::warn!(scope = %self.key.scope, error = %e, "a request's key could not be freed");
        }
    }
}
