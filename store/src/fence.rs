//! [`Fence`]: the writer epoch a store handle writes under, so that a process which lost the
//! writer lease cannot change stored state any more.
//!
//! Owns: the fence's two checks and their words. A handle made by [`Store::fenced`] runs, in the
//! same atomic step as each write (every method that can change stored state: the account,
//! login, credential, document, content, transcript and ownership writes), first the local
//! check — has this process given the lease up ([`Fence::give_up`])? — and then the database
//! check: does the writer-lease row still name this fence's epoch and a holder? If not, the
//! write is refused with [`StoreError::Fenced`] and changes nothing. Reads are never fenced, and
//! neither are the lease methods themselves (renewing, taking and giving back the lease is how
//! the epoch is kept or changed). A handle that was never fenced writes as before.
//! Does not own: how each backend makes the check atomic with the write (its own module, and
//! `sql`'s `Dialect` for the two SQL databases), or when a process gives up (the
//! server's lease keeper).
//!
//! Why the epoch alone, and no expiry, in the database check. The store reads no clock; a write
//! would have to be given the caller's `now_ms` for the store to compare with `expires_at_ms`,
//! and that time would be read by the very process whose clock or scheduling may be what went
//! wrong. Nor is it needed for the rule that matters, *never two writers*: another process can
//! write only after it took the lease, and taking it from a different holder or after expiry
//! always advances the epoch (see [`LeaseStore::acquire_writer_lease`]). Each backend orders a
//! fenced write and an acquisition against each other (one lock in memory; SQLite's single write
//! lock; in PostgreSQL a transaction-scoped advisory lock that writes take shared and epoch
//! changes take exclusive), so a fenced write either commits before the new holder's
//! acquisition — and the new holder sees it, as it sees everything before it — or sees the new
//! epoch and is refused. A write that lands after the old lease's expiry but before anyone took
//! it over is accepted: nobody else has written yet, and the next holder starts after it.
//! Expiry enters on the holder's side instead, through its own timers (the lease keeper gives up
//! at `expires_at - margin` and calls [`Fence::give_up`]), so a process that cannot renew stops
//! writing before another can take the lease, and the database check catches whatever was
//! already in flight: a write held up in the network or a pool until after the takeover.
//!
//!
//! Two kinds of lease, one fence. Under the writer lease one process serves the whole database.
//! Under document leases ([`crate::DocumentLeaseStore`]) several processes serve one
//! PostgreSQL at once, each document by the one process holding its lease; that process writes
//! the document's state through a handle fenced by [`Fence::for_document`], whose database check
//! reads that document's lease row instead, under the same ordering (a per-document lock taken
//! shared by writes and exclusive by a change of the document's epoch or holder). Everything
//! above holds per document: a process that lost one document's lease can no longer write
//! through that document's handle, and the other documents it serves are untouched.
//!
//! [`Store::fenced`]: crate::Store::fenced
//! [`LeaseStore::acquire_writer_lease`]: crate::LeaseStore::acquire_writer_lease

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use uuid::Uuid;

use crate::{StoreError, StoreResult};

/// The writer epoch a store handle writes under (see the module documentation). Cheap to clone;
/// clones share whether the lease was given up.
#[derive(Clone, Debug)]
pub struct Fence {
    epoch: i64,
    scope: FenceScope,
    given_up: Arc<AtomicBool>,
}

/// Which lease a fence's epoch is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceScope {
    /// The database-wide writer lease ([`crate::LeaseStore`]): one process writes everything.
    Writer,
    /// One document's lease ([`crate::DocumentLeaseStore`]): the process serving that document
    /// writes through a handle fenced by it, while other processes serve other documents.
    Document(Uuid),
}

impl Fence {
    /// A fence for the writer lease acquired at `epoch`.
    pub fn new(epoch: i64) -> Self {
        Self::scoped(FenceScope::Writer, epoch)
    }

    /// A fence for `document_id`'s lease acquired at `epoch`: every write through a handle made
    /// with it — whatever document or account the write concerns — is admitted only while that
    /// document's lease row still names this epoch and a holder.
    pub fn for_document(document_id: Uuid, epoch: i64) -> Self {
        Self::scoped(FenceScope::Document(document_id), epoch)
    }

    fn scoped(scope: FenceScope, epoch: i64) -> Self {
        Fence {
            epoch,
            scope,
            given_up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The epoch this fence admits.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The lease this fence's epoch is of.
    pub fn scope(&self) -> FenceScope {
        self.scope
    }

    /// What the fence is of, in refusals: "writer epoch 3", "document 0000… epoch 3".
    fn named(&self) -> String {
        match self.scope {
            FenceScope::Writer => format!("writer epoch {}", self.epoch),
            FenceScope::Document(id) => format!("document {id}'s lease epoch {}", self.epoch),
        }
    }

    /// The lease, in refusals.
    fn lease_named(&self) -> String {
        match self.scope {
            FenceScope::Writer => "the writer lease".to_owned(),
            FenceScope::Document(id) => format!("document {id}'s lease"),
        }
    }

    /// This process no longer counts on the lease (its renewal gave up, or it stopped serving):
    /// from now on every write under this fence, through any handle made with it, is refused
    /// without asking the database. Cannot be undone; a new lease needs a new fence.
    pub fn give_up(&self) {
        self.given_up.store(true, Ordering::SeqCst);
    }

    /// Whether [`Fence::give_up`] was called.
    pub fn is_given_up(&self) -> bool {
        self.given_up.load(Ordering::SeqCst)
    }

    /// The same epoch of the same lease, as the database sees a write already sent: a handle
    /// made with it is never refused by the local check (it was made as the write left the
    /// process), only by the database check. [`crate::instrumented::Instrumented`] makes the
    /// local check itself, before a call it may hold in transit, and gives its inner store this.
    pub(crate) fn in_transit(&self) -> Fence {
        Fence {
            epoch: self.epoch,
            scope: self.scope,
            given_up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The local check, made before a write begins: refused once given up.
    pub(crate) fn check_local(&self) -> StoreResult<()> {
        if self.is_given_up() {
            return Err(StoreError::Fenced(format!(
                "this process gave up {}",
                self.named()
            )));
        }
        Ok(())
    }

    /// The database check, made atomically with the write: `lease` is the row of this fence's
    /// lease ([`Fence::scope`]) as read in the write's own atomic step (`(epoch, held)`, `None`
    /// if there is no row).
    pub(crate) fn check_lease(&self, lease: Option<(i64, bool)>) -> StoreResult<()> {
        self.check_local()?;
        let (named, lease_named) = (self.named(), self.lease_named());
        match lease {
            Some((epoch, true)) if epoch == self.epoch => Ok(()),
            Some((epoch, true)) => Err(StoreError::Fenced(format!(
                "{named} is no longer current: {lease_named} is at epoch {epoch}"
            ))),
            Some((epoch, false)) if epoch == self.epoch => Err(StoreError::Fenced(format!(
                "{named} was given back: nobody holds {lease_named}"
            ))),
            Some((epoch, false)) => Err(StoreError::Fenced(format!(
                "{named} is no longer current: {lease_named} was at epoch {epoch} \
                 and nobody holds it"
            ))),
            None => Err(StoreError::Fenced(format!(
                "{named} is not current: the database has no row for {lease_named}"
            ))),
        }
    }
}

/// A handle's optional fence: the local check before a write begins, the database check inside
/// it. Both pass for a handle that was never fenced.
pub(crate) trait FenceCheck {
    fn check_local(&self) -> StoreResult<()>;
    fn check_lease(&self, lease: Option<(i64, bool)>) -> StoreResult<()>;
    /// The lease whose row the database check reads; `None` for a handle never fenced.
    fn scope(&self) -> Option<FenceScope>;
}

impl FenceCheck for Option<Fence> {
    fn check_local(&self) -> StoreResult<()> {
        self.as_ref().map_or(Ok(()), Fence::check_local)
    }

    fn scope(&self) -> Option<FenceScope> {
        self.as_ref().map(Fence::scope)
    }

    fn check_lease(&self, lease: Option<(i64, bool)>) -> StoreResult<()> {
        self.as_ref().map_or(Ok(()), |f| f.check_lease(lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_admits_only_its_held_epoch_until_given_up() {
        let fence = Fence::new(3);
        assert!(fence.check_lease(Some((3, true))).is_ok());
        for row in [Some((4, true)), Some((3, false)), Some((4, false)), None] {
            assert!(
                matches!(fence.check_lease(row), Err(StoreError::Fenced(_))),
                "{row:?}"
            );
        }
        let clone = fence.clone();
        fence.give_up();
        assert!(clone.is_given_up(), "clones share giving up");
        assert!(matches!(clone.check_local(), Err(StoreError::Fenced(_))));
        assert!(matches!(
            clone.check_lease(Some((3, true))),
            Err(StoreError::Fenced(_))
        ));
        let never: Option<Fence> = None;
        assert!(never.check_lease(None).is_ok());
    }
}
