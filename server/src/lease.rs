//! The database-wide writer lease: one active server process per database.
//!
//! Owns: taking the lease at startup (waiting at most one lease period for a crashed holder's
//! lease to run out), renewing it while serving, and reporting its loss so the process drains
//! and stops. Does not own: the atomic rules of the lease row (the [`Store`] does).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::store::{LeaseAcquire, Store, StoreError, WriterLease};

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
    store: &dyn Store,
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

/// Renews `lease` until it is lost; publishes the current lease (`None` once lost) on the
/// returned channel. A failed renewal is retried until the lease's own expiry passes.
pub fn keep(
    store: Arc<dyn Store>,
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
