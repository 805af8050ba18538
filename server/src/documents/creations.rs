//! Creating a document once per idempotency key (MCP `create_document`'s `idempotencyKey`).
//!
//! Owns: [`Creations`] — an account that sends the same key with the same input again within
//! [`IDEMPOTENCY_MEMORY_MS`] gets the document the first call made ([`Once::Again`]) and
//! nothing is created twice, whichever process the retry reaches; the same key with other input
//! is refused `idempotency-key-reused`. Calls with one key on this process are taken one after
//! the other. A call that made nothing is not remembered: its retry creates anew.
//! Does not own: what "the same input" is (the caller hands a digest of it, see
//! [`input_digest`]), who may create (the caller checked push access) or how a document is
//! made ([`super::Documents::create`]).
//!
//! Invariants: keys are kept in the store ([`crate::kept`]) by the caller's account id, so one
//! account's key never answers another's call. The document a claim creates has the claim's
//! own id ([`crate::kept::Claimed::made_id`]): a retry that takes over a claim
//! whose call died (its process killed between creating and answering) creates under the same
//! id, so it finds the document that call made instead of making a second one.

use std::future::Future;
use std::sync::Arc;

use http::StatusCode;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use super::updates::check_key;
use super::updates::IDEMPOTENCY_MEMORY_MS;
use crate::error::ApiError;
use crate::kept::{Kept, KeptRequests};
use crate::store::{DocumentStore, RequestKey};

/// The scope `create_document`'s keys are kept in.
const SCOPE: &str = "create_document";

/// Creations and their idempotency keys.
pub struct Creations {
    kept: Arc<KeptRequests>,
    documents: Arc<dyn DocumentStore>,
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

fn reused(words: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "idempotency-key-reused", words)
}

impl Creations {
    pub fn new(kept: Arc<KeptRequests>, documents: Arc<dyn DocumentStore>) -> Self {
        Creations { kept, documents }
    }

    /// Runs `create` for `account`'s `key` unless the key already made a document: then the
    /// answer is that document for the same `input`, or `idempotency-key-reused` for another.
    /// `create` is given the id to create the document under. `made` names the document a
    /// successful `create` made (`None`: it made none worth remembering, e.g. a refusal); only
    /// then is the key answered. A call that ends with no document under its id frees the key.
    pub async fn once<T, F>(
        &self,
        account: Uuid,
        key: &str,
        input: [u8; 32],
        create: impl FnOnce(Uuid) -> F,
        made: impl FnOnce(&T) -> Option<Uuid>,
    ) -> Result<Once<T>, ApiError>
    where
        F: Future<Output = Result<T, ApiError>>,
    {
        check_key(key)?;
        let digest = hex::encode(input);
        let request = RequestKey {
            scope: SCOPE.to_owned(),
            holder: account.to_string(),
            key: key.to_owned(),
            document: None,
        };
        let claim = match self
            .kept
            .claim(request, &digest, IDEMPOTENCY_MEMORY_MS)
            .await
            .map_err(ApiError::store)?
        {
            Kept::Answered {
                digest: first,
                answer,
            } => {
                let document = answer.parse::<Uuid>().map_err(|_| {
                    ApiError::store(crate::store::StoreError::Backend(format!(
                        "a kept creation names no document: {answer:?}"
                    )))
                })?;
                if first != digest {
                    return Err(reused(format!(
                        "This idempotencyKey already created document {document} from different input (repository, title, slug, source, brief or provenance); nothing was created. Send the same input to get that document again, or a new key for a new document."
                    )));
                }
                return Ok(Once::Again(document));
            }
            Kept::Go(claim) => claim,
        };
        if claim.earlier_for_other_input(&digest) {
            // Left as it is: the call it belongs to may still be under way.
            return Err(reused(
                "This idempotencyKey is creating a document from different input (repository, title, slug, source, brief or provenance) in an earlier call; nothing was created. Send the same input to get that document, or a new key for a new document.".to_owned(),
            ));
        }
        let id = claim.made_id();
        let result = create(id).await;
        if let Some(document) = result.as_ref().ok().and_then(made) {
            claim.answer(&document.to_string()).await;
            return result.map(Once::Made);
        }
        // Nothing to answer: free the key unless a document stands under the claim's id (a
        // creation that failed past its first step), which a retry takes over and finishes.
        match self.documents.document(id).await {
            Ok(None) => claim.release().await,
            Ok(Some(_)) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not tell whether a failed creation made its document")
            }
        }
        result.map(Once::Made)
    }
}

#[cfg(test)]
mod tests {
    use super::{input_digest, Creations, Once, SCOPE};
    use crate::kept::{made_id, KeptRequests};
    use crate::runtime::clock::Clock;
    use crate::store::MemoryStore;
    use crate::store::RequestKey;
    use std::sync::Arc;
    use uuid::Uuid;

    struct At(i64);
    impl Clock for At {
        fn now_ms(&self) -> crate::store::UnixMillis {
            self.0
        }
    }

    /// A process's creations on `store`.
    fn process(store: &Arc<MemoryStore>) -> Creations {
        let kept = Arc::new(KeptRequests::new(store.clone(), Arc::new(At(1_000))));
        Creations::new(kept, store.clone())
    }

    /// Issue 24 item 6: one account flooding its keys cannot push out another's: that other
    /// account's retry still finds the document its key made, and creates nothing twice.
    #[tokio::test]
    async fn one_accounts_flood_leaves_another_accounts_key_standing() {
        let store = Arc::new(MemoryStore::new());
        let creations = process(&store);
        let (victim, flooder) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let input = input_digest(&[Some("octo/plans"), Some("Plan")]);
        let first = creations
            .once(
                victim,
                "retry-me",
                input,
                |id| async move { Ok(id) },
                |d| Some(*d),
            )
            .await
            .unwrap();
        let Once::Made(made) = first else {
            panic!("the first call makes it")
        };
        for i in 0..20_000u128 {
            let key = format!("flood-{i}");
            creations
                .once(
                    flooder,
                    &key,
                    input,
                    |_| async move { Ok(Uuid::from_u128(1_000 + i)) },
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
                |_| async { Ok(Uuid::from_u128(78)) },
                |d| Some(*d),
            )
            .await
            .unwrap();
        assert!(
            matches!(again, Once::Again(d) if d == made),
            "the victim's retry made a duplicate"
        );
    }

    /// Issue 27: a retry that reaches another process gets the document the first call made;
    /// a claim whose call died before answering is taken over under the same document id.
    #[tokio::test]
    async fn a_key_answers_on_another_process_and_a_dead_calls_claim_creates_the_same_id() {
        let store = Arc::new(MemoryStore::new());
        let (here, there) = (process(&store), process(&store));
        let account = Uuid::from_u128(1);
        let input = input_digest(&[Some("octo/plans"), Some("Plan")]);
        let Once::Made(made) = here
            .once(
                account,
                "k",
                input,
                |id| async move { Ok(id) },
                |d| Some(*d),
            )
            .await
            .unwrap()
        else {
            panic!("made")
        };
        let again = there
            .once(
                account,
                "k",
                input,
                |id| async move { Ok(id) },
                |d| Some(*d),
            )
            .await
            .unwrap();
        assert!(matches!(again, Once::Again(d) if d == made));
        // Other input under the same key, on either process: refused.
        let other = input_digest(&[Some("octo/plans"), Some("Other")]);
        let refused = there
            .once(
                account,
                "k",
                other,
                |id| async move { Ok(id) },
                |d| Some(*d),
            )
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.code, "idempotency-key-reused");

        // A call that dies under its claim (the process killed before it answered) ...
        let dying = here.once(
            account,
            "k-2",
            input,
            |id| async move {
                std::future::pending::<Result<Uuid, crate::error::ApiError>>()
                    .await
                    .map(|_: Uuid| id)
            },
            |d| Some(*d),
        );
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), dying)
                .await
                .is_err()
        );
        // ... leaves its claim to the retry, which creates under the id that claim names.
        let retried = there
            .once(
                account,
                "k-2",
                input,
                |id| async move { Ok(id) },
                |d| Some(*d),
            )
            .await
            .unwrap();
        assert!(
            matches!(retried, Once::Made(id) if id == made_id(&RequestKey {
                scope: SCOPE.to_owned(),
                holder: account.to_string(),
                key: "k-2".to_owned(),
                document: None,
            }, 1_000)),
            "the retry creates under the dead call's id"
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
