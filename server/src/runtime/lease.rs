//! The database-wide writer lease: one active server process per database.
//!
//! Owns: taking the lease at startup (waiting at most one lease period for a crashed holder's
//! lease to run out), renewing it while serving, and reporting its loss so the process drains
//! and stops ([`LeaseWatch`]); giving up the store's [`Fence`] the moment the lease counts as
//! lost or the keeper stops ([`Keeper::stop`]), so no write of this process lands after that; and
//! the deadlines of all this.
//! Does not own: the atomic rules of the lease row and of fenced writes ([`LeaseStore`] and
//! `chopin_store::fence` do), or when to give the lease back (the composition root, after every
//! writer has stopped).
//!
//! Deadlines. A grant lasts [`WRITER_LEASE_TTL_MS`]; the holder renews every
//! [`WRITER_LEASE_RENEW_EVERY_MS`]. One renewal call may take at most
//! [`WRITER_LEASE_RENEW_TIMEOUT_MS`] (a hung connection is cut off, not waited for) and is tried
//! again at once after a timeout, or after [`WRITER_LEASE_RETRY_PAUSE_MS`] after an error. None
//! of that runs past the lease's *deadline*, `expires_at - WRITER_LEASE_MARGIN_MS`: a lease not
//! renewed by then counts as lost exactly then — the fence is given up first, then the watch says
//! lost. The margin is what this process's own timers and clock may be late by, against another
//! process's clock that will judge the lease expired; within it this process has already stopped
//! writing. The deadline is computed from the wall clock when a grant arrives (`expires_at_ms`
//! minus the clock's `now_ms`) and then kept on `tokio::time`, so it is never later than the
//! database's expiry as this process's clock reads it.
//!
//! Invariants: the fence is given up no later than the watch reports the lease lost; the
//! keeper's renewal attempts never outlive the deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::runtime::clock::Clock;
use crate::store::{Fence, LeaseAcquire, LeaseStore, StoreError, WriterLease};

/// How long one grant of the lease lasts.
pub const WRITER_LEASE_TTL_MS: i64 = 15_000;
/// How often the holder renews: three times per lease period.
pub const WRITER_LEASE_RENEW_EVERY_MS: u64 = 5_000;
/// How long before its lease expires a holder that could not renew counts it as lost (and stops
/// writing): the lease's deadline is `expires_at - WRITER_LEASE_MARGIN_MS`.
pub const WRITER_LEASE_MARGIN_MS: i64 = 3_000;
/// The longest one renewal call may take before it is cut off and tried again.
pub const WRITER_LEASE_RENEW_TIMEOUT_MS: u64 = 2_000;
/// The pause before trying a renewal again after the store answered with an error.
pub const WRITER_LEASE_RETRY_PAUSE_MS: u64 = 250;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "another Chopin process ({holder}) holds this database's writer lease; only one process may serve a database at a time"
    )]
    HeldElsewhere { holder: String },
    #[error("the database did not answer while taking the writer lease")]
    Unanswered,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Takes the lease for `holder`. A lease held elsewhere is waited for until it expires, at most
/// one lease period (a crashed holder's lease runs out; a live holder keeps renewing it). A
/// store that fails is asked again within that period; one that does not answer is not waited
/// for past it.
pub async fn acquire(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    holder: &str,
) -> Result<WriterLease, LeaseError> {
    let give_up_at = Instant::now() + Duration::from_millis(WRITER_LEASE_TTL_MS as u64 + 1_000);
    let mut told = false;
    loop {
        let asked = tokio::time::timeout_at(
            give_up_at,
            store.acquire_writer_lease(holder, clock.now_ms(), WRITER_LEASE_TTL_MS),
        )
        .await
        .map_err(|_| LeaseError::Unanswered)?;
        let wait_ms = match asked {
            Ok(LeaseAcquire::Acquired(lease)) => return Ok(lease),
            Ok(LeaseAcquire::HeldElsewhere(other)) => {
                if Instant::now() >= give_up_at {
                    return Err(LeaseError::HeldElsewhere {
                        holder: other.holder,
                    });
                }
                if !told {
                    tracing::warn!(
                        holder = %other.holder,
                        "writer lease is held by another process; waiting for it to expire"
                    );
                    told = true;
                }
                (other.expires_at_ms - clock.now_ms()).clamp(10, 1_000) as u64
            }
            // The takeover may have waited on a hung holder's write and been cut off by the
            // database's statement timeout: try again while the period lasts.
            Err(e) if Instant::now() < give_up_at => {
                tracing::warn!(error = %e, "taking the writer lease failed; retrying");
                WRITER_LEASE_RETRY_PAUSE_MS
            }
            Err(e) => return Err(e.into()),
        };
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    }
}

/// When a lease granted until `expires_at_ms` counts as lost unless renewed: `expires_at -
/// margin` on the wall clock, as an instant on `tokio::time` (now, if already past).
pub(crate) fn deadline(lease: &WriterLease, margin_ms: i64, clock: &dyn Clock) -> Instant {
    let left_ms = lease.expires_at_ms - margin_ms - clock.now_ms();
    Instant::now() + Duration::from_millis(u64::try_from(left_ms).unwrap_or(0))
}

/// What this process knows of its lease: held (and at which epoch) or lost. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LeaseWatch(watch::Receiver<Option<WriterLease>>);

impl LeaseWatch {
    /// A watch that never changes: `Some` held for good, `None` never held (for wiring services
    /// without a serving process, as tests do).
    pub fn fixed(lease: Option<WriterLease>) -> Self {
        LeaseWatch(watch::channel(lease).1)
    }

    /// Whether this process still holds the writer lease.
    pub fn is_held(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// The epoch of the lease held, if it is.
    pub fn epoch(&self) -> Option<i64> {
        self.0.borrow().as_ref().map(|l| l.epoch)
    }

    /// Resolves when the lease is lost: the process must drain and stop.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            // An error means the keeper is gone, which only happens once the lease is lost.
            let _ = rx.wait_for(|l| l.is_none()).await;
        }
    }
}

/// The task renewing the lease.
pub struct Keeper {
    task: tokio::task::JoinHandle<()>,
    watch: LeaseWatch,
    fence: Fence,
}

impl Keeper {
    /// Stops renewing and gives the fence up, so no write of this process lands from now on;
    /// the lease still held, if any, is returned for the caller to release (the lease methods
    /// are not fenced).
    pub fn stop(self) -> Option<WriterLease> {
        self.task.abort();
        self.fence.give_up();
        self.watch.0.borrow().clone()
    }
}

/// Renews `lease` until it is lost; the watch says whether it is still held. `fence` is the one
/// the process's store writes under: it is given up when the lease is lost or the keeper stops.
pub fn keep(
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    lease: WriterLease,
    fence: Fence,
) -> (LeaseWatch, Keeper) {
    let (tx, rx) = watch::channel(Some(lease.clone()));
    let task = tokio::spawn(renew(store, clock, lease, fence.clone(), tx));
    let watch = LeaseWatch(rx);
    (watch.clone(), Keeper { task, watch, fence })
}

/// Renews `current` every [`WRITER_LEASE_RENEW_EVERY_MS`] until it is lost — taken over, or not
/// renewed by its deadline — then gives `fence` up and publishes `None`.
async fn renew(
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    mut current: WriterLease,
    fence: Fence,
    tx: watch::Sender<Option<WriterLease>>,
) {
    let mut deadline_at = deadline(&current, WRITER_LEASE_MARGIN_MS, &*clock);
    let mut next_at = Instant::now() + Duration::from_millis(WRITER_LEASE_RENEW_EVERY_MS);
    let lost = |why: &str| {
        fence.give_up();
        tx.send_replace(None);
        tracing::error!(epoch = fence.epoch(), "writer lease lost: {why}");
    };
    loop {
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline_at) => {
                lost("not renewed before its expiry minus the margin");
                return;
            }
            () = tokio::time::sleep_until(next_at) => {}
        }
        if tx.is_closed() {
            return;
        }
        let cut_off_at =
            deadline_at.min(Instant::now() + Duration::from_millis(WRITER_LEASE_RENEW_TIMEOUT_MS));
        let renewal = tokio::time::timeout_at(
            cut_off_at,
            store.renew_writer_lease(&current, clock.now_ms(), WRITER_LEASE_TTL_MS),
        )
        .await;
        match renewal {
            Ok(Ok(Some(renewed))) => {
                current = renewed;
                deadline_at = deadline(&current, WRITER_LEASE_MARGIN_MS, &*clock);
                next_at = Instant::now() + Duration::from_millis(WRITER_LEASE_RENEW_EVERY_MS);
                tx.send_replace(Some(current.clone()));
            }
            Ok(Ok(None)) => {
                lost("another process holds it");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "writer lease renewal failed; retrying");
                next_at = Instant::now() + Duration::from_millis(WRITER_LEASE_RETRY_PAUSE_MS);
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = WRITER_LEASE_RENEW_TIMEOUT_MS,
                    "writer lease renewal did not answer; cut off and retrying"
                );
                next_at = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::runtime::clock::TokioClock;
    use crate::store::{MemoryStore, StoreResult, UnixMillis};

    /// How a [`Renewals`] store answers a renewal.
    #[derive(Clone, Copy)]
    enum Answer {
        /// Never: the call hangs (a hung connection).
        Hang,
        /// At once, with a backend error.
        Fail,
    }

    /// A lease store whose renewals do not get through; everything else is the memory store's.
    struct Renewals {
        inner: MemoryStore,
        answer: Answer,
        tried: AtomicU32,
    }

    #[async_trait]
    impl LeaseStore for Renewals {
        async fn acquire_writer_lease(
            &self,
            holder: &str,
            now_ms: UnixMillis,
            ttl_ms: i64,
        ) -> StoreResult<LeaseAcquire> {
            self.inner
                .acquire_writer_lease(holder, now_ms, ttl_ms)
                .await
        }

        async fn renew_writer_lease(
            &self,
            _lease: &WriterLease,
            _now_ms: UnixMillis,
            _ttl_ms: i64,
        ) -> StoreResult<Option<WriterLease>> {
            self.tried.fetch_add(1, Ordering::SeqCst);
            match self.answer {
                Answer::Hang => std::future::pending().await,
                Answer::Fail => Err(StoreError::Backend("connection reset".into())),
            }
        }

        async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
            self.inner.release_writer_lease(lease).await
        }
    }

    /// A lease store whose first acquisitions fail (`Answer::Fail`, `failing` of them) or never
    /// answer (`Answer::Hang`, all of them).
    struct Acquisitions {
        inner: MemoryStore,
        answer: Answer,
        failing: u32,
        tried: AtomicU32,
    }

    #[async_trait]
    impl LeaseStore for Acquisitions {
        async fn acquire_writer_lease(
            &self,
            holder: &str,
            now_ms: UnixMillis,
            ttl_ms: i64,
        ) -> StoreResult<LeaseAcquire> {
            let tried = self.tried.fetch_add(1, Ordering::SeqCst);
            match self.answer {
                Answer::Hang => std::future::pending().await,
                Answer::Fail if tried < self.failing => Err(StoreError::Backend(
                    "canceling statement due to statement timeout".into(),
                )),
                Answer::Fail => {
                    self.inner
                        .acquire_writer_lease(holder, now_ms, ttl_ms)
                        .await
                }
            }
        }

        async fn renew_writer_lease(
            &self,
            lease: &WriterLease,
            now_ms: UnixMillis,
            ttl_ms: i64,
        ) -> StoreResult<Option<WriterLease>> {
            self.inner.renew_writer_lease(lease, now_ms, ttl_ms).await
        }

        async fn release_writer_lease(&self, lease: &WriterLease) -> StoreResult<()> {
            self.inner.release_writer_lease(lease).await
        }
    }

    /// A takeover cut off by the database (it waited on a hung holder's write) is tried again
    /// within the lease period.
    #[tokio::test(start_paused = true)]
    async fn taking_the_lease_retries_a_failing_store() {
        let clock = TokioClock::new(1_700_000_000_000);
        let store = Acquisitions {
            inner: MemoryStore::new(),
            answer: Answer::Fail,
            failing: 3,
            tried: AtomicU32::new(0),
        };
        let began = Instant::now();
        let lease = acquire(&store, &clock, "host-a")
            .await
            .expect("taken at last");
        assert_eq!(store.tried.load(Ordering::SeqCst), 4);
        assert_eq!(
            began.elapsed(),
            Duration::from_millis(3 * WRITER_LEASE_RETRY_PAUSE_MS)
        );
        assert_eq!(lease.holder, "host-a");
    }

    /// A store that never answers is not waited for past the lease period (plus a second).
    #[tokio::test(start_paused = true)]
    async fn taking_the_lease_gives_up_on_a_store_that_does_not_answer() {
        let clock = TokioClock::new(1_700_000_000_000);
        let store = Acquisitions {
            inner: MemoryStore::new(),
            answer: Answer::Hang,
            failing: 0,
            tried: AtomicU32::new(0),
        };
        let began = Instant::now();
        let refused = acquire(&store, &clock, "host-a").await;
        assert!(
            matches!(refused, Err(LeaseError::Unanswered)),
            "{refused:?}"
        );
        assert_eq!(
            began.elapsed(),
            Duration::from_millis(WRITER_LEASE_TTL_MS as u64 + 1_000)
        );
    }

    /// Lets the other tasks of this (paused, single-threaded) runtime run what is due now.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// Renewals that hang (or fail) until the deadline: the lease still counts as held 1 ms
    /// before `expires_at - margin` and is lost, the fence given up, exactly then.
    async fn lost_exactly_at_the_deadline(answer: Answer) {
        let clock = Arc::new(TokioClock::new(1_700_000_000_000));
        let store = Arc::new(Renewals {
            inner: MemoryStore::new(),
            answer,
            tried: AtomicU32::new(0),
        });
        let lease = acquire(&*store, &*clock, "host-a").await.unwrap();
        let fence = Fence::new(lease.epoch);
        let (watch, _keeper) = keep(store.clone(), clock.clone(), lease.clone(), fence.clone());
        let deadline_ms = lease.expires_at_ms - WRITER_LEASE_MARGIN_MS;
        assert_eq!(
            deadline_ms - clock.now_ms(),
            WRITER_LEASE_TTL_MS - WRITER_LEASE_MARGIN_MS
        );

        tokio::time::sleep(Duration::from_millis(
            (deadline_ms - 1 - clock.now_ms()) as u64,
        ))
        .await;
        settle().await;
        assert_eq!(clock.now_ms(), deadline_ms - 1);
        assert!(watch.is_held(), "still held 1 ms before the deadline");
        assert!(!fence.is_given_up());
        assert!(
            store.tried.load(Ordering::SeqCst) >= 2,
            "a renewal that does not answer is cut off and tried again"
        );

        tokio::time::sleep(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(clock.now_ms(), deadline_ms);
        assert!(!watch.is_held(), "lost at the deadline");
        assert!(fence.is_given_up(), "the fence is given up with it");
        // `lost` has resolved: nothing to wait for.
        tokio::time::timeout(Duration::ZERO, watch.lost())
            .await
            .expect("lost resolves once the lease is lost");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_renewal_loses_the_lease_exactly_at_expiry_minus_margin() {
        lost_exactly_at_the_deadline(Answer::Hang).await;
    }

    #[tokio::test(start_paused = true)]
    async fn failing_renewals_lose_the_lease_exactly_at_expiry_minus_margin() {
        lost_exactly_at_the_deadline(Answer::Fail).await;
    }

    /// Renewals that get through keep the lease, and its fence, for as long as they do.
    #[tokio::test(start_paused = true)]
    async fn renewals_that_answer_keep_the_lease() {
        let clock = Arc::new(TokioClock::new(1_700_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let lease = acquire(&*store, &*clock, "host-a").await.unwrap();
        let fence = Fence::new(lease.epoch);
        let (watch, keeper) = keep(store.clone(), clock.clone(), lease.clone(), fence.clone());
        tokio::time::sleep(Duration::from_millis(10 * WRITER_LEASE_TTL_MS as u64)).await;
        settle().await;
        assert!(watch.is_held());
        assert!(!fence.is_given_up());
        assert_eq!(watch.epoch(), Some(lease.epoch));
        // Stopping the keeper gives the fence up: nothing of this process writes after it.
        let held = keeper.stop().expect("still held");
        assert!(held.expires_at_ms > lease.expires_at_ms, "it was renewed");
        assert!(fence.is_given_up());
    }

    /// Another process took the lease: the renewal says so, and the lease is lost at once.
    #[tokio::test(start_paused = true)]
    async fn a_lease_taken_over_is_lost_at_the_next_renewal() {
        let clock = Arc::new(TokioClock::new(1_700_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let lease = acquire(&*store, &*clock, "host-a").await.unwrap();
        let fence = Fence::new(lease.epoch);
        let (watch, _keeper) = keep(store.clone(), clock.clone(), lease.clone(), fence.clone());
        // Released behind the keeper's back and taken by another holder.
        store.release_writer_lease(&lease).await.unwrap();
        acquire(&*store, &*clock, "host-b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(WRITER_LEASE_RENEW_EVERY_MS)).await;
        settle().await;
        assert!(!watch.is_held());
        assert!(fence.is_given_up());
    }
}
