//! Which documents this process serves. One process (the default) serves every document. Under
//! `PROCESSES=many`, several processes share one PostgreSQL and each document tree — a root
//! document and its children — is served by the one process holding its root's lease
//! ([`DocumentLeases`]); a request for a tree served elsewhere is answered with when to try
//! again, and the balancer's next try (or the client's) finds the process that serves it.
//!
//! Owns: the answer to "may this process serve document X now?" ([`Serving::serve`], which
//! takes the tree's lease if nobody holds it), and each document's root, as read once.
//! Does not own: the leases' renewal and loss ([`DocumentLeases`]), what a process does as it
//! takes a tree over or loses it (the composition root's welcome and loss handling), or how a
//! refusal is spoken (the transport).

use std::sync::{Arc, OnceLock};

use uuid::Uuid;

use crate::runtime::document_leases::{self, DocumentLeases};
use crate::store::routed::Roots;
use crate::store::{Store, StoreError};

/// The answer to [`Serving::serve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serve {
    /// Serve it here (or it does not exist, which the request's own handler says).
    Here,
    /// Another process serves its tree now.
    Elsewhere {
        /// When that process's lease expires if it stops renewing it: when to try again.
        retry_after_ms: i64,
        /// Where the other processes reach that process (`PROCESS_URL`), if it said.
        process: Option<String>,
    },
}

/// Which documents this process serves. Every document, until [`Serving::lease`] is called.
#[derive(Default)]
pub struct Serving {
    leased: OnceLock<Leased>,
}

struct Leased {
    leases: DocumentLeases,
    /// Unfenced: reads only.
    store: Arc<dyn Store>,
    roots: Roots,
}

impl Serving {
    /// Serves every document (one process on the database).
    pub fn all() -> Self {
        Serving::default()
    }

    /// From now on, serves only the trees whose leases `leases` holds; `store` reads documents'
    /// parents. Called once, before anything is served; later calls are ignored.
    pub fn lease(&self, leases: DocumentLeases, store: Arc<dyn Store>) {
        let _ = self.leased.set(Leased {
            leases,
            store,
            roots: Roots::default(),
        });
    }

    /// The leases, under `PROCESSES=many`.
    pub fn leases(&self) -> Option<&DocumentLeases> {
        self.leased.get().map(|l| &l.leases)
    }

    /// Whether this process may serve `document_id` now: taking its tree's lease if nobody
    /// holds it (the tree is welcomed before this answers).
    pub async fn serve(&self, document_id: Uuid) -> Result<Serve, StoreError> {
        let Some(leased) = self.leased.get() else {
            return Ok(Serve::Here);
        };
        let Some(root) = leased.root_of(document_id).await? else {
            return Ok(Serve::Here);
        };
        match leased.leases.serve(root).await? {
            document_leases::Serving::Here(_) => Ok(Serve::Here),
            document_leases::Serving::Elsewhere {
                retry_after_ms,
                holder,
            } => Ok(Serve::Elsewhere {
                retry_after_ms,
                process: document_leases::process_url(&holder).map(str::to_owned),
            }),
        }
    }

    /// A root document was just made here: under `PROCESSES=many` its lease is handed back, so
    /// the process the balancer sends it to next serves it (a new document has nothing to hand
    /// over).
    pub async fn made(&self, root_id: Uuid) {
        let Some(leased) = self.leased.get() else {
            return;
        };
        if let Err(e) = leased.leases.hand_over(root_id).await {
            tracing::warn!(document = %root_id, error = %e, "could not hand a new document's lease back; it is served here until it expires");
        }
    }

    /// Whether `document_id`'s tree is served here now, without taking anything.
    pub async fn serves(&self, document_id: Uuid) -> bool {
        let Some(leased) = self.leased.get() else {
            return true;
        };
        match leased.root_of(document_id).await {
            Ok(Some(root)) => leased.leases.handle(root).is_some(),
            Ok(None) | Err(_) => false,
        }
    }
}

impl Leased {
    /// The root of `document_id`'s tree; `None` if there is no such document.
    async fn root_of(&self, document_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        self.roots.of(&*self.store, document_id).await
    }
}
