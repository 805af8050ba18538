//! The database-wide writer lease: one active server process per database.
//!
//! Owns: taking the lease at startup (waiting at most one lease period for a crashed holder's
//! lease to run out), renewing it while serving, and reporting its loss so the process drains
//! and stops ([`LeaseWatch`]), and giving it back at the end of a graceful stop ([`Keeper::stop`]).
//! Does not own: the atomic rules of the lease row ([`LeaseStore`] does), or when to give it back
//! (the composition root, after every writer has stopped).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::runtime::clock::Clock;
use crate::store::{LeaseAcquire, LeaseStore, StoreError, WriterLease};

/// How long one grant of the lease lasts.
pub const WRITER_LEASE_TTL_MS: i64 = 15_000;
/// How often the holder renews: three times per lease period.
pub const WRITER_LEASE_RENEW_EVERY_MS: u64 = 5_000;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "another Chopin process ({holder}) holds this database's writer lease; only one process may serve a database at a time"
    )]
    HeldElsewhere { holder: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Takes the lease for `holder`. A lease held elsewhere is waited for until it expires, at most
/// one lease period (a crashed holder's lease runs out; a live holder keeps renewing it).
pub async fn acquire(
    store: &dyn LeaseStore,
    clock: &dyn Clock,
    holder: &str,
) -> Result<WriterLease, LeaseError> {
    let give_up_at =
        tokio::time::Instant::now() + Duration::from_millis(WRITER_LEASE_TTL_MS as u64 + 1_000);
    let mut told = false;
    loop {
        match store
            .acquire_writer_lease(holder, clock.now_ms(), WRITER_LEASE_TTL_MS)
            .await?
        {
            LeaseAcquire::Acquired(lease) => return Ok(lease),
            LeaseAcquire::HeldElsewhere(other) => {
                let now = tokio::time::Instant::now();
                if now >= give_up_at {
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
                let wait_ms = (other.expires_at_ms - clock.now_ms()).clamp(10, 1_000) as u64;
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            }
        }
    }
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
}

impl Keeper {
    /// Stops renewing; the lease still held, if any, is returned for the caller to release.
    pub fn stop(self) -> Option<WriterLease> {
        self.task.abort();
        self.watch.0.borrow().clone()
    }
}

/// Renews `lease` until it is lost; the watch says whether it is still held.
pub fn keep(
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    lease: WriterLease,
) -> (LeaseWatch, Keeper) {
    let (rx, task) = renew(store, clock, lease);
    let watch = LeaseWatch(rx);
    (watch.clone(), Keeper { task, watch })
}

/// Renews `lease` until it is lost; publishes the current lease (`None` once lost) on the
/// returned channel. A failed renewal is retried until the lease's own expiry passes.
fn renew(
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    lease: WriterLease,
) -> (
    watch::Receiver<Option<WriterLease>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = watch::channel(Some(lease.clone()));
    let task = tokio::spawn(async move {
        let mut current = lease;
        loop {
            tokio::time::sleep(Duration::from_millis(WRITER_LEASE_RENEW_EVERY_MS)).await;
            if tx.is_closed() {
                return;
            }
            match store
                .renew_writer_lease(&current, clock.now_ms(), WRITER_LEASE_TTL_MS)
                .await
            {
                Ok(Some(renewed)) => {
                    current = renewed;
                    tx.send_replace(Some(current.clone()));
                }
                Ok(None) => {
                    tracing::error!(
                        epoch = current.epoch,
                        "writer lease lost to another process"
                    );
                    tx.send_replace(None);
                    return;
                }
                Err(e) if clock.now_ms() < current.expires_at_ms => {
                    tracing::warn!(error = %e, "writer lease renewal failed; retrying");
                }
                Err(e) => {
                    tracing::error!(error = %e, "writer lease expired without renewal");
                    tx.send_replace(None);
                    return;
                }
            }
        }
    });
    (rx, task)
}
