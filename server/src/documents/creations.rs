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
//! `update_document`'s keys), bounded per account ([`IDEMPOTENCY_KEYS_PER_ACCOUNT`], its oldest
//! go first; at most [`IDEMPOTENCY_ACCOUNTS`] accounts) and keyed by the caller's account id, so
//! one account's key never answers another's call and one account's flood pushes out only its
//! own keys.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use http::StatusCode;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use super::updates::check_key;
use super::updates::{IDEMPOTENCY_ACCOUNTS, IDEMPOTENCY_KEYS_PER_ACCOUNT, IDEMPOTENCY_MEMORY_MS};
use crate::error::ApiError;
use crate::runtime::gates::Gates;
use crate::runtime::recent::RecentByOwner;
use crate::runtime::SharedClock;

/// An account's key.
type Key = (Uuid, String);

/// The document a key made, and the digest of the input it was made from.
struct Remembered {
    input: [u8; 32],
    document: Uuid,
}

/// Creations of this process and their idempotency keys.
pub struct Creations {
    clock: SharedClock,
    memory: Mutex<RecentByOwner<Uuid, String, Remembered>>,
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
            memory: Mutex::new(RecentByOwner::new(
                IDEMPOTENCY_MEMORY_MS,
                IDEMPOTENCY_KEYS_PER_ACCOUNT,
                IDEMPOTENCY_ACCOUNTS,
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
                .insert(
                    key.0,
                    key.1,
                    Remembered { input, document },
                    self.clock.now_ms(),
                );
        }
        Ok(Once::Made(result))
    }

    /// The input digest and document remembered for `key`, if any.
    fn remembered(&self, key: &Key) -> Option<([u8; 32], Uuid)> {
        let now = self.clock.now_ms();
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        memory
            .get(&key.0, &key.1, now)
            .map(|r| (r.input, r.document))
    }
}

#[cfg(test)]
mod tests {
    use super::{input_digest, Creations, Once};
    use crate::runtime::clock::Clock;
    use std::sync::Arc;
    use uuid::Uuid;

    struct At(i64);
    impl Clock for At {
        fn now_ms(&self) -> crate::store::UnixMillis {
            self.0
        }
    }

    /// Issue 24 item 6: one account flooding its keys cannot push out another's: that other
    /// account's retry still finds the document its key made, and creates nothing twice.
    #[tokio::test]
    async fn one_accounts_flood_leaves_another_accounts_key_standing() {
        let creations = Creations::new(Arc::new(At(1_000)));
        let (victim, flooder) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let input = input_digest(&[Some("octo/plans"), Some("Plan")]);
        let made = Uuid::from_u128(77);
        let first = creations
            .once(victim, "retry-me", input, async { Ok(made) }, |d| Some(*d))
            .await
            .unwrap();
        assert!(matches!(first, Once::Made(_)));
        for i in 0..20_000u128 {
            let key = format!("flood-{i}");
            creations
                .once(
                    flooder,
                    &key,
                    input,
                    async move { Ok(Uuid::from_u128(1_000 + i)) },
                    |d| Some(*d),
                )
                .await
                .unwrap();
        }
        let again = creations
            .once(
                victim,
                "retry-me",
                input,
                async { Ok(Uuid::from_u128(78)) },
                |d| Some(*d),
            )
            .await
            .unwrap();
        assert!(
            matches!(again, Once::Again(d) if d == made),
            "the victim's retry made a duplicate"
        );
    }

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
