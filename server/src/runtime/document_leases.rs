//! Each document's lease, for several server processes on one PostgreSQL: this process serves a
//! document only while it holds that document's lease, and writes the document's state only
//! through a store handle fenced by it.
//!
//! Owns: taking a document's lease when this process is asked to serve it ([`DocumentLeases::
//! serve`]), answering who serves it instead when another process does (and when to ask again);
//! renewing every lease held, in one task ([`DocumentLeases::keep`]); counting a lease lost —
//! giving its fence up first, then telling [`DocumentLeases::lost`] — when it was taken over or
//! not renewed by its deadline; and giving leases back on a graceful stop, so the next process
//! need not wait for them to expire ([`DocumentLeases::hand_over`]).
//! Does not own: the atomic rules of the lease rows and of fenced writes
//! (`chopin_store::DocumentLeaseStore` and `chopin_store::fence`), or what a process does with a
//! document it lost (its rooms close, and their clients reconnect to the new owner).
//!
//! Deadlines, per document, as the writer lease's ([`super::lease`]): a grant lasts
//! [`DocumentLeaseTimes::ttl_ms`] and is renewed every [`DocumentLeaseTimes::renew_every_ms`]; a
//! lease not renewed by `expires_at - margin` counts as lost exactly then, on this process's
//! `tokio::time`, with the deadline taken from the wall clock ([`Clock`]) when a grant arrives.
//! Within the margin this process has stopped writing the document before another process's
//! clock can judge the lease expired. A renewal call is cut off after
//! [`DocumentLeaseTimes::renew_timeout_ms`] and never outlives the earliest deadline.
//!
//! Invariants: a document's fence is given up no later than its loss is told, and no later than
//! its deadline; at most one handle per document is handed out at a time, and a handle handed out
//! before a loss stays refused after it (a new grant makes a new fence).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
use uuid::Uuid;

use crate::runtime::clock::Clock;
use crate::runtime::lease;
use crate::store::{Fence, LeaseAcquire, Store, StoreError, WriterLease};

/// The lease times of documents, all derived from one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocumentLeaseTimes {
    /// How long one grant lasts: what a crashed process's documents wait for before another
    /// process may serve them.
    pub ttl_ms: i64,
    /// How often the holder renews.
    pub renew_every_ms: u64,
    /// How long before its expiry a lease not renewed counts as lost.
    pub margin_ms: i64,
    /// The longest one renewal call may take before it is cut off.
    pub renew_timeout_ms: u64,
    /// The pause before trying again after the store answered with an error.
    pub retry_pause_ms: u64,
}

impl DocumentLeaseTimes {
    /// The times of a lease period of `ttl_ms`: renewed three times per period, lost a fifth of
    /// the period before it expires, a renewal cut off after a seventh of it (at most 2 s).
    pub fn for_ttl(ttl_ms: i64) -> Self {
        let ttl_ms = ttl_ms.max(1_000);
        DocumentLeaseTimes {
            ttl_ms,
            renew_every_ms: (ttl_ms / 3) as u64,
            margin_ms: ttl_ms / 5,
            renew_timeout_ms: ((ttl_ms / 7) as u64).min(2_000),
            retry_pause_ms: 250,
        }
    }
}

/// The name a process takes leases under: `chopin-<random>`, followed by the address the other
/// processes reach it at when it has one (`PROCESS_URL`), so that a process asked about a
/// document another one serves can carry the request there ([`process_url`]).
pub fn process_name(random: &str, url: Option<&str>) -> String {
    match url {
        Some(url) => format!("chopin-{random} {url}"),
        None => format!("chopin-{random}"),
    }
}

/// The address in a lease holder's name ([`process_name`]), if it gave one.
pub fn process_url(holder: &str) -> Option<&str> {
    holder
        .split_once(' ')
        .map(|(_, url)| url.trim())
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
}

/// The answer to [`DocumentLeases::serve`].
#[derive(Clone)]
pub enum Serving {
    /// This process serves the document: write its state through this handle, fenced by the
    /// document's lease.
    Here(Arc<dyn Store>),
    /// Another process does.
    Elsewhere {
        /// That process's name, as it took the lease.
        holder: String,
        /// When to ask again if that process stops renewing: the lease's expiry, from now.
        retry_after_ms: i64,
    },
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Serving::Here(_) => f.write_str("Here"),
            Serving::Elsewhere {
                holder,
                retry_after_ms,
            } => f
                .debug_struct("Elsewhere")
                .field("holder", holder)
                .field("retry_after_ms", retry_after_ms)
                .finish(),
        }
    }
}

#[async_trait::async_trait]
impl chopin_store::routed::DocumentHandles for DocumentLeases {
    fn handle(&self, root_id: Uuid) -> Option<Arc<dyn Store>> {
        DocumentLeases::handle(self, root_id)
    }

    async fn take(&self, root_id: Uuid) -> Option<Arc<dyn Store>> {
        match self.serve(root_id).await {
            Ok(Serving::Here(handle)) => Some(handle),
            Ok(Serving::Elsewhere { .. }) => None,
            Err(e) => {
                tracing::warn!(document_id = %root_id, error = %e, "could not take a new document's lease");
                None
            }
        }
    }
}

/// Why a document stopped being served here, as [`DocumentLeases::lost`] tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Another process holds the lease now.
    TakenOver,
    /// Not renewed before its expiry minus the margin.
    NotRenewed,
}

/// One lease held.
struct Held {
    lease: WriterLease,
    fence: Fence,
    handle: Arc<dyn Store>,
    /// When it counts as lost unless renewed.
    deadline_at: Instant,
    /// Taken over and welcomed ([`Welcome`]): until then only the welcome writes through it, and
    /// [`DocumentLeases::serve`] waits.
    ready: bool,
}

/// What a process does as it takes a document's lease, before anything else is served of it: the
/// startup's sweeps of what an earlier process left, for that document alone, and its holds
/// rebuilt. Its writes go through the new handle.
#[async_trait::async_trait]
pub trait Welcome: Send + Sync + 'static {
    async fn taken(&self, document_id: Uuid, handle: Arc<dyn Store>);
}

/// The documents this process serves, each under its lease. Cheap to clone.
#[derive(Clone)]
pub struct DocumentLeases {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    holder: String,
    times: DocumentLeaseTimes,
    held: Mutex<BTreeMap<Uuid, Held>>,
    /// Serialises acquisitions of one process, so one document is never granted twice at once.
    acquiring: tokio::sync::Mutex<()>,
    lost: broadcast::Sender<(Uuid, Lost)>,
    welcome: std::sync::OnceLock<Arc<dyn Welcome>>,
}

impl DocumentLeases {
    /// Leases of documents for the process named `holder`, on `store` (unfenced: the lease
    /// methods are not fenced, and each document's handle is fenced here).
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        holder: impl Into<String>,
        times: DocumentLeaseTimes,
    ) -> Self {
        DocumentLeases {
            shared: Arc::new(Shared {
                store,
                clock,
                holder: holder.into(),
                times,
                held: Mutex::new(BTreeMap::new()),
                acquiring: tokio::sync::Mutex::new(()),
                lost: broadcast::channel(1_024).0,
                welcome: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Documents lost from now on, with why. A receiver that falls behind misses the oldest
    /// (each loss is also logged).
    pub fn lost(&self) -> broadcast::Receiver<(Uuid, Lost)> {
        self.shared.lost.subscribe()
    }

    /// The documents served here now, in id order.
    pub fn served(&self) -> Vec<Uuid> {
        self.held().keys().copied().collect()
    }

    /// What to do as each lease is taken (once; later calls are ignored).
    pub fn welcome(&self, welcome: Arc<dyn Welcome>) {
        let _ = self.shared.welcome.set(welcome);
    }

    /// The handle of a document served here, without asking the store: `None` if it is not.
    /// While the document is being welcomed the handle is already given (the welcome's writes go
    /// through it).
    pub fn handle(&self, document_id: Uuid) -> Option<Arc<dyn Store>> {
        self.held().get(&document_id).map(|h| h.handle.clone())
    }

    /// [`DocumentLeases::handle`], once the document is welcomed.
    fn ready_handle(&self, document_id: Uuid) -> Option<Arc<dyn Store>> {
        self.held()
            .get(&document_id)
            .filter(|h| h.ready)
            .map(|h| h.handle.clone())
    }

    /// Serves `document_id` here if no other process does: its handle, taking the lease if this
    /// process does not hold it yet; or who serves it instead.
    pub async fn serve(&self, document_id: Uuid) -> Result<Serving, StoreError> {
        if let Some(handle) = self.ready_handle(document_id) {
            return Ok(Serving::Here(handle));
        }
        let _turn = self.shared.acquiring.lock().await;
        if let Some(handle) = self.ready_handle(document_id) {
            return Ok(Serving::Here(handle));
        }
        let shared = &self.shared;
        let now_ms = shared.clock.now_ms();
        let asked = shared
            .store
            .acquire_document_lease(document_id, &shared.holder, now_ms, shared.times.ttl_ms)
            .await?;
        match asked {
            LeaseAcquire::Acquired(lease) => {
                let epoch = lease.epoch;
                let fence = Fence::for_document(document_id, lease.epoch);
                let handle = shared.store.fenced(fence.clone());
                tracing::info!(%document_id, epoch = lease.epoch, "serving a document");
                let deadline_at = self.deadline(&lease);
                self.held().insert(
                    document_id,
                    Held {
                        lease,
                        fence,
                        handle: handle.clone(),
                        deadline_at,
                        ready: false,
                    },
                );
                // Still under the acquiring turn: nobody else is served this document before
                // it is welcomed.
                if let Some(welcome) = shared.welcome.get() {
                    welcome.taken(document_id, handle.clone()).await;
                }
                match self.held().get_mut(&document_id) {
                    Some(held) if held.lease.epoch == epoch => held.ready = true,
                    // Lost while being welcomed.
                    _ => {
                        return Err(StoreError::Fenced(format!(
                            "the lease of document {document_id} was lost as it was taken"
                        )))
                    }
                }
                Ok(Serving::Here(handle))
            }
            LeaseAcquire::HeldElsewhere(other) => Ok(Serving::Elsewhere {
                retry_after_ms: (other.expires_at_ms - now_ms).max(0),
                holder: other.holder,
            }),
        }
    }

    /// Stops serving `document_id` and gives its lease back, so another process may serve it at
    /// once: the fence is given up first, so no write of this process lands after the release.
    pub async fn hand_over(&self, document_id: Uuid) -> Result<(), StoreError> {
        let Some(held) = self.held().remove(&document_id) else {
            return Ok(());
        };
        held.fence.give_up();
        self.shared
            .store
            .release_document_lease(document_id, &held.lease)
            .await
    }

    /// [`DocumentLeases::hand_over`] of every document served here (a graceful stop). Every
    /// fence is given up before the first release. The first error, after trying them all.
    pub async fn hand_over_all(&self) -> Result<(), StoreError> {
        let all = std::mem::take(&mut *self.held());
        for held in all.values() {
            held.fence.give_up();
        }
        let mut first = Ok(());
        for (document_id, held) in all {
            let released = self
                .shared
                .store
                .release_document_lease(document_id, &held.lease)
                .await;
            if let (Err(e), Ok(())) = (released, &first) {
                first = Err(e);
            }
        }
        first
    }

    /// Renews every lease held until stopped: every [`DocumentLeaseTimes::renew_every_ms`], or
    /// [`DocumentLeaseTimes::retry_pause_ms`] after an error, and counts a lease lost at its
    /// deadline. The task ends when the last clone of this value is dropped.
    pub fn keep(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.shared);
        let every = Duration::from_millis(self.shared.times.renew_every_ms);
        // From now, not from when the task first runs.
        let mut next_at = Instant::now() + every;
        tokio::spawn(async move {
            loop {
                let earliest = match weak.upgrade() {
                    Some(shared) => DocumentLeases { shared }.earliest_deadline(),
                    None => return,
                };
                tokio::select! {
                    biased;
                    () = sleep_until_some(earliest) => {}
                    () = tokio::time::sleep_until(next_at) => {}
                }
                let Some(shared) = weak.upgrade() else { return };
                let leases = DocumentLeases { shared };
                leases.lose_past_deadlines();
                if Instant::now() >= next_at {
                    let failed = leases.renew_all().await;
                    let pause = if failed {
                        Duration::from_millis(leases.shared.times.retry_pause_ms)
                    } else {
                        every
                    };
                    next_at = Instant::now() + pause;
                }
            }
        })
    }

    /// One renewal of every lease held, in one store call (one statement per
    /// [`crate::store::LEASES_RENEWED_AT_ONCE`] leases): a renewed one gets its new deadline,
    /// one taken over is lost at once, and if the call failed or was cut off every lease stays
    /// until its deadline (which [`DocumentLeases::keep`]'s loop wakes for). Whether the call
    /// failed.
    async fn renew_all(&self) -> bool {
        let (due, earliest) = {
            let held = self.held();
            let due: Vec<(Uuid, WriterLease)> =
                held.iter().map(|(id, h)| (*id, h.lease.clone())).collect();
            (due, held.values().map(|h| h.deadline_at).min())
        };
        let Some(earliest) = earliest else {
            return false;
        };
        let times = self.shared.times;
        let cut_off_at =
            earliest.min(Instant::now() + Duration::from_millis(times.renew_timeout_ms));
        let renewal = tokio::time::timeout_at(
            cut_off_at,
            self.shared
                .store
                .renew_document_leases(&due, self.shared.clock.now_ms(), times.ttl_ms),
        )
        .await;
        let renewed = match renewal {
            Ok(Ok(renewed)) => renewed,
            Ok(Err(e)) => {
                tracing::warn!(leases = due.len(), error = %e, "document lease renewal failed; retrying");
                return true;
            }
            Err(_) => {
                tracing::warn!(
                    leases = due.len(),
                    "document lease renewal did not answer; cut off"
                );
                return true;
            }
        };
        let renewed: BTreeMap<Uuid, WriterLease> = renewed.into_iter().collect();
        for (document_id, lease) in due {
            match renewed.get(&document_id) {
                Some(new) if new.epoch == lease.epoch => {
                    let deadline_at = self.deadline(new);
                    if let Some(held) = self.held().get_mut(&document_id) {
                        // Unless it was handed over or lost meanwhile.
                        if held.lease.epoch == new.epoch {
                            held.lease = new.clone();
                            held.deadline_at = deadline_at;
                        }
                    }
                }
                _ => self.lose(document_id, lease.epoch, Lost::TakenOver),
            }
        }
        false
    }

    /// Counts every lease whose deadline has come as lost.
    fn lose_past_deadlines(&self) {
        let now = Instant::now();
        let past: Vec<(Uuid, i64)> = self
            .held()
            .iter()
            .filter(|(_, h)| h.deadline_at <= now)
            .map(|(id, h)| (*id, h.lease.epoch))
            .collect();
        for (document_id, epoch) in past {
            self.lose(document_id, epoch, Lost::NotRenewed);
        }
    }

    /// Loses `document_id`'s lease granted at `epoch` (not a later grant): the fence first.
    fn lose(&self, document_id: Uuid, epoch: i64, why: Lost) {
        let removed = {
            let mut held = self.held();
            match held.get(&document_id) {
                Some(h) if h.lease.epoch == epoch => held.remove(&document_id),
                _ => None,
            }
        };
        if let Some(held) = removed {
            held.fence.give_up();
            tracing::warn!(%document_id, epoch, ?why, "document lease lost; no longer serving it");
            let _ = self.shared.lost.send((document_id, why));
        }
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.held().values().map(|h| h.deadline_at).min()
    }

    /// When a lease granted until `expires_at_ms` counts as lost unless renewed.
    fn deadline(&self, lease: &WriterLease) -> Instant {
        lease::deadline(lease, self.shared.times.margin_ms, &*self.shared.clock)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, Held>> {
        // A panic while holding this lock leaves a map of whole entries: keep using it.
        self.shared
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use chopin_store::instrumented::{Call, Hold, Hook, Instrumented};

    use super::*;
    use crate::runtime::clock::TokioClock;
    use crate::store::{MemoryStore, NewDocument, NewTranscriptEntry};

    #[test]
    fn a_process_name_carries_its_address_when_it_has_one() {
        let named = process_name("ab12", Some("http://10.0.0.7:8787"));
        assert_eq!(named, "chopin-ab12 http://10.0.0.7:8787");
        assert_eq!(process_url(&named), Some("http://10.0.0.7:8787"));
        assert_eq!(process_url(&process_name("ab12", None)), None);
        // Only a web address is taken for one.
        assert_eq!(process_url("chopin-ab12 file:///etc/passwd"), None);
    }

    /// Faults played on document lease renewals; everything else runs as it is.
    #[derive(Default)]
    struct Renewals {
        /// Renewals never answer (a hung connection).
        hang: AtomicBool,
        /// This many renewals fail with a backend error first.
        failing: AtomicU32,
        tried: AtomicU32,
    }

    /// The hook playing [`Renewals`], shared with the test.
    struct Faults(Arc<Renewals>);

    impl Hook for Faults {
        fn call(&self, _call: Call) {}

        fn hold(&self, method: &'static str, _write: bool) -> Option<Hold> {
            if method != "renew_document_leases" {
                return None;
            }
            self.0.tried.fetch_add(1, Ordering::SeqCst);
            self.0
                .hang
                .load(Ordering::SeqCst)
                .then(|| Box::pin(std::future::pending()) as Hold)
        }

        fn fail(&self, method: &'static str, _write: bool) -> Option<StoreError> {
            let failing = method == "renew_document_leases"
                && self
                    .0
                    .failing
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            failing.then(|| StoreError::Backend("connection reset".into()))
        }
    }

    const TTL_MS: i64 = 15_000;

    struct World {
        store: Arc<dyn Store>,
        faults: Arc<Renewals>,
        clock: Arc<TokioClock>,
        doc: Uuid,
    }

    async fn world() -> World {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let faults = Arc::new(Renewals::default());
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(memory, Faults(faults.clone())));
        let doc = store
            .create_document(&NewDocument {
                id: Uuid::from_u128(0xd0c),
                repo_owner: "octo".into(),
                repo_name: "plans".into(),
                slug: "leased".into(),
                title: "Leased".into(),
                created_at_ms: 0,
                ..NewDocument::default()
            })
            .await
            .unwrap()
            .id;
        World {
            store,
            faults,
            clock: Arc::new(TokioClock::new(1_000_000)),
            doc,
        }
    }

    impl World {
        fn process(&self, name: &str) -> DocumentLeases {
            DocumentLeases::new(
                self.store.clone(),
                self.clock.clone(),
                name,
                DocumentLeaseTimes::for_ttl(TTL_MS),
            )
        }
    }

    async fn say(handle: &Arc<dyn Store>, doc: Uuid, body: &str) -> Result<(), StoreError> {
        let entry = NewTranscriptEntry {
            kind: "system".into(),
            body: body.into(),
            created_at_ms: 0,
            ..NewTranscriptEntry::default()
        };
        handle.append_transcript(doc, &entry).await.map(|_| ())
    }

    fn here(serving: Serving) -> Arc<dyn Store> {
        match serving {
            Serving::Here(handle) => handle,
            other => panic!("expected to serve it here, got {other:?}"),
        }
    }

    async fn advance_ms(ms: u64) {
        tokio::time::advance(Duration::from_millis(ms)).await;
        // Let the keeper run what came due.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn the_times_follow_the_period() {
        let times = DocumentLeaseTimes::for_ttl(15_000);
        assert_eq!(
            (
                times.renew_every_ms,
                times.margin_ms,
                times.renew_timeout_ms
            ),
            (5_000, 3_000, 2_000)
        );
        assert_eq!(DocumentLeaseTimes::for_ttl(10).ttl_ms, 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn one_process_serves_a_document_at_a_time_and_its_renewals_keep_it() {
        let w = world().await;
        let (a, b) = (w.process("a"), w.process("b"));
        let _keeper = a.keep();
        let handle = here(a.serve(w.doc).await.unwrap());
        match b.serve(w.doc).await.unwrap() {
            Serving::Elsewhere {
                holder,
                retry_after_ms,
            } => assert_eq!((holder.as_str(), retry_after_ms), ("a", TTL_MS)),
            other => panic!("{other:?}"),
        }
        // Asked again, the same handle: no second grant.
        assert!(Arc::ptr_eq(&handle, &here(a.serve(w.doc).await.unwrap())));
        for _ in 0..12 {
            advance_ms(5_000).await;
        }
        assert!(
            w.faults.tried.load(Ordering::SeqCst) >= 11,
            "renewed all along"
        );
        assert_eq!(a.served(), vec![w.doc]);
        say(&handle, w.doc, "a minute later").await.unwrap();
        assert!(matches!(
            b.serve(w.doc).await.unwrap(),
            Serving::Elsewhere { .. }
        ));
        assert!(b.served().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_not_renewed_is_lost_at_its_deadline_and_not_1ms_before() {
        let w = world().await;
        let (a, b) = (w.process("a"), w.process("b"));
        let _keeper = a.keep();
        let mut lost = a.lost();
        w.faults.hang.store(true, Ordering::SeqCst);
        let handle = here(a.serve(w.doc).await.unwrap());
        // The deadline is the expiry (15 s) minus the margin (3 s).
        advance_ms(11_999).await;
        assert!(
            lost.try_recv().is_err(),
            "not lost 1 ms before the deadline"
        );
        assert_eq!(a.served(), vec![w.doc]);
        say(&handle, w.doc, "1 ms before").await.unwrap();
        advance_ms(1).await;
        assert_eq!(lost.try_recv().unwrap(), (w.doc, Lost::NotRenewed));
        assert!(a.served().is_empty());
        let refused = say(&handle, w.doc, "at the deadline").await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        // Another process may serve it once the lease expired, and not 1 ms before.
        advance_ms(2_999).await;
        assert!(matches!(
            b.serve(w.doc).await.unwrap(),
            Serving::Elsewhere {
                retry_after_ms: 1,
                ..
            }
        ));
        advance_ms(1).await;
        let b_handle = here(b.serve(w.doc).await.unwrap());
        say(&b_handle, w.doc, "b serves it").await.unwrap();
        assert_eq!(
            w.store.document_lease(w.doc).await.unwrap().unwrap().epoch,
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_document_taken_over_is_lost_at_the_next_renewal() {
        let w = world().await;
        let a = w.process("a");
        let _keeper = a.keep();
        let mut lost = a.lost();
        let handle = here(a.serve(w.doc).await.unwrap());
        // A process whose clock runs 20 s ahead judges the lease expired and takes it.
        let taken = w
            .store
            .acquire_document_lease(w.doc, "b", w.clock.now_ms() + 20_000, TTL_MS)
            .await
            .unwrap();
        assert!(matches!(taken, LeaseAcquire::Acquired(ref l) if l.epoch == 2));
        // Before a's renewal, the database check already refuses a's writes.
        let refused = say(&handle, w.doc, "after the takeover").await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        advance_ms(5_000).await;
        assert_eq!(lost.try_recv().unwrap(), (w.doc, Lost::TakenOver));
        assert!(a.served().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn failed_renewals_are_retried_and_one_that_gets_through_keeps_the_lease() {
        let w = world().await;
        let a = w.process("a");
        let _keeper = a.keep();
        let mut lost = a.lost();
        w.faults.failing.store(20, Ordering::SeqCst);
        let handle = here(a.serve(w.doc).await.unwrap());
        // The first renewal at 5 s fails, and so does each retry 250 ms later, 20 in all.
        advance_ms(5_000).await;
        for _ in 0..25 {
            advance_ms(250).await;
        }
        assert_eq!(w.faults.failing.load(Ordering::SeqCst), 0);
        for _ in 0..20 {
            advance_ms(1_000).await;
        }
        assert!(lost.try_recv().is_err());
        say(&handle, w.doc, "still served").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_graceful_hand_over_lets_the_next_process_serve_at_once() {
        let w = world().await;
        let (a, b) = (w.process("a"), w.process("b"));
        let handle = here(a.serve(w.doc).await.unwrap());
        let other = Uuid::from_u128(0xd0d);
        here(a.serve(other).await.unwrap());
        a.hand_over_all().await.unwrap();
        assert!(a.served().is_empty());
        let refused = say(&handle, w.doc, "after handing over").await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        // No wait for the expiry.
        let b_handle = here(b.serve(w.doc).await.unwrap());
        say(&b_handle, w.doc, "b at once").await.unwrap();
        here(b.serve(other).await.unwrap());
    }
}
