//! Creating a document once per idempotency key (MCP `create_document`'s `idempotencyKey`).
//!
//! Owns: [`Creations`] — the memory of creation keys: an account that sends the same key with
//! the same input again within [`IDEMPOTENCY_MEMORY_MS`] gets the document the first call made
//! ([`Once::Again`]) and nothing is created twice; the same key with other input is refused
//! `idempotency-key-reused`. Two calls with one key at once are taken one after the other, so
//! exactly one of them creates. A call that failed is not remembered: its retry creates anew.
//! Does not own: what "the same input" is (the caller hands a digest of it, see
//! [`input_digest`]), who may create (the caller checked push access) or how a document is
//! made ([`super::Documents::create`]).
//!
//! Invariants: the memory is in this process only (a restart forgets it, as it does
//! `update_document`'s keys), bounded ([`IDEMPOTENCY_MEMORY_ENTRIES`], the oldest go first) and
//! keyed by the caller's account id, so one account's key never answers another's call.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use http::StatusCode;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use super::updates::check_key;
use super::updates::{IDEMPOTENCY_MEMORY_ENTRIES, IDEMPOTENCY_MEMORY_MS};
use crate::error::ApiError;
use crate::runtime::gates::Gates;
use crate::runtime::recent::Recent;
use crate::runtime::SharedClock;

type Key = (Uuid, String);

/// The document a key made, and the digest of the input it was made from.
struct Remembered {
    input: [u8; 32],
    document: Uuid,
}

/// Creations of this process and their idempotency keys.
pub struct Creations {
    clock: SharedClock,
    memory: Mutex<Recent<Key, Remembered>>,
    keys: Gates<Key>,
}

/// What a keyed creation came to.
pub enum Once<T> {
    /// This call made it.
    Made(T),
    /// An earlier call with the same key and input made this document.
    Again(Uuid),
}

/// A digest of a creation's input, each part length-prefixed so no two inputs run together.
/// `None` parts (no slug, no brief, no provenance) differ from empty ones.
pub fn input_digest(parts: &[Option<&str>]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        match part {
            None => hash.update([0u8]),
            Some(text) => {
                hash.update([1u8]);
                hash.update((text.len() as u64).to_be_bytes());
                hash.update(text.as_bytes());
            }
        }
    }
    hash.finalize().into()
}

impl Creations {
    pub fn new(clock: SharedClock) -> Self {
        Creations {
            clock,
            memory: Mutex::new(Recent::new(
                IDEMPOTENCY_MEMORY_MS,
                IDEMPOTENCY_MEMORY_ENTRIES,
            )),
            keys: Gates::default(),
        }
    }

    /// Runs `create` for `account`'s `key` unless the key already made a document: then the
    /// answer is that document for the same `input`, or `idempotency-key-reused` for another.
    /// `made` names the document a successful `create` made (`None`: it made none worth
    /// remembering, e.g. a refusal); only then is the key remembered.
    pub async fn once<T>(
        &self,
        account: Uuid,
        key: &str,
        input: [u8; 32],
        create: impl Future<Output = Result<T, ApiError>>,
        made: impl FnOnce(&T) -> Option<Uuid>,
    ) -> Result<Once<T>, ApiError> {
        check_key(key)?;
        let key: Key = (account, key.to_owned());
        let _one_at_a_time = self.keys.lock(key.clone()).await;
        if let Some(remembered) = self.remembered(&key) {
            if remembered.0 != input {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "idempotency-key-reused",
                    format!(
                        "This idempotencyKey already created document {} from different input (repository, title, slug, source, brief or provenance); nothing was created. Send the same input to get that document again, or a new key for a new document.",
                        remembered.1
                    ),
                ));
            }
            return Ok(Once::Again(remembered.1));
        }
        let result = create.await?;
        if let Some(document) = made(&result) {
            self.memory
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, Remembered { input, document }, self.clock.now_ms());
        }
        Ok(Once::Made(result))
    }

    /// The input digest and document remembered for `key`, if any.
    fn remembered(&self, key: &Key) -> Option<([u8; 32], Uuid)> {
        let now = self.clock.now_ms();
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        memory.get(key, now).map(|r| (r.input, r.document))
    }
}

#[cfg(test)]
mod tests {
    use super::input_digest;

    #[test]
    fn an_input_digest_keeps_parts_apart_and_tells_none_from_empty() {
        assert_ne!(
            input_digest(&[Some("ab"), Some("c")]),
            input_digest(&[Some("a"), Some("bc")])
        );
        assert_ne!(input_digest(&[None]), input_digest(&[Some("")]));
        assert_eq!(
            input_digest(&[Some("a"), None]),
            input_digest(&[Some("a"), None])
        );
    }
}
