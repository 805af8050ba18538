//! Which documents this process serves. One process (the default) serves every document. Under
//! `PROCESSES=many`, several processes share one PostgreSQL and each document tree — a root
//! document and its children — is served by the one process holding its root's lease
//! ([`DocumentLeases`]); a request for a tree served elsewhere is answered with when to try
//! again, and the balancer's next try (or the client's) finds the process that serves it.
//!
//! Owns: the answer to "may this process serve document X now?" ([`Serving::serve`], which
//! takes the tree's lease if nobody holds it), each document's root, as read once, and which
//! trees served here have been quiet long enough to give back ([`Serving::idle`]).
//! Does not own: the leases' renewal and loss ([`DocumentLeases`]), what a process does as it
//! takes a tree over or loses it (the composition root's welcome and loss handling), or how a
//! refusal is spoken (the transport).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
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
    /// Each tree served here and quiet at the last look: since when ([`Serving::idle`]).
    quiet_since: Mutex<BTreeMap<Uuid, Instant>>,
    /// Requests under way per tree ([`Serving::enter`]).
    in_flight: Arc<Mutex<BTreeMap<Uuid, usize>>>,
}

/// A request under way for a tree served here ([`Serving::enter`]): while one lives, the tree is
/// not quiet.
pub struct InFlight {
    root: Uuid,
    counts: Arc<Mutex<BTreeMap<Uuid, usize>>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.root) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.root);
            }
        }
    }
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
            quiet_since: Mutex::new(BTreeMap::new()),
            in_flight: Arc::default(),
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

    /// A request for `document_id` (served here) is under way until the answer is dropped.
    /// `None` when every document is served here, or its root is unknown.
    pub async fn enter(&self, document_id: Uuid) -> Option<InFlight> {
        let leased = self.leased.get()?;
        let root = leased.root_of(document_id).await.ok()??;
        *leased
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(root)
            .or_default() += 1;
        Some(InFlight {
            root,
            counts: leased.in_flight.clone(),
        })
    }

    /// The trees served here that have been quiet for at least `quiet_for`, counted from the
    /// first look that found them so: no document of theirs in `busy` (in use, or its Planner
    /// held) and no request under way for them ([`Serving::enter`]). Each look starts the
    /// count for trees newly quiet and stops it for trees busy again; a request that came and
    /// went between two looks does not stop it, so a tree served here for a balancer that
    /// prefers another process goes back even while requests keep coming.
    pub async fn idle(&self, busy: &[Uuid], quiet_for: Duration) -> Vec<Uuid> {
        let Some(leased) = self.leased.get() else {
            return Vec::new();
        };
        let mut busy_roots = BTreeSet::new();
        for document in busy {
            if let Ok(Some(root)) = leased.root_of(*document).await {
                busy_roots.insert(root);
            }
        }
        busy_roots.extend(
            leased
                .in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .keys()
                .copied(),
        );
        let now = Instant::now();
        let served = leased.leases.served();
        let mut quiet = leased.quiet();
        quiet.retain(|root, _| served.contains(root) && !busy_roots.contains(root));
        served
            .into_iter()
            .filter(|root| !busy_roots.contains(root))
            .filter(|root| now.duration_since(*quiet.entry(*root).or_insert(now)) >= quiet_for)
            .collect()
    }

    /// Gives `root`'s tree back (found idle): another process may serve it at once, as the
    /// balancer chooses.
    pub async fn give_back(&self, root: Uuid) -> Result<(), StoreError> {
        let Some(leased) = self.leased.get() else {
            return Ok(());
        };
        leased.quiet().remove(&root);
        leased.leases.hand_over(root).await
    }
}

impl Leased {
    fn quiet(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, Instant>> {
        self.quiet_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The root of `document_id`'s tree; `None` if there is no such document.
    async fn root_of(&self, document_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        self.roots.of(&*self.store, document_id).await
    }
}
