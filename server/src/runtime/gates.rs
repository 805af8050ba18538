//! Keyed async locks that do not outlive their use: one gate per key (a document), made when
//! someone takes it and gone once nobody holds or waits for it.
//!
//! Owns: [`Gates`] and the [`Gate`] guard. Does not own: what a gate orders (the planner table's
//! ownership changes, a transcript's appends).
//!
//! Invariants: at most one guard per key at a time; the map holds only keys that are held or
//! waited for, so it shrinks back to empty when the process is idle.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

type Lock = Arc<tokio::sync::Mutex<()>>;

/// One async lock per key, made on demand and dropped when unused.
pub struct Gates<K: Ord + Clone> {
    map: Mutex<BTreeMap<K, Lock>>,
}

impl<K: Ord + Clone> Default for Gates<K> {
    fn default() -> Self {
        Gates {
            map: Mutex::default(),
        }
    }
}

/// A held gate; released (and forgotten if nobody else wants it) when dropped.
pub struct Gate<'a, K: Ord + Clone> {
    gates: &'a Gates<K>,
    key: K,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<K: Ord + Clone> Gates<K> {
    /// Waits for `key`'s gate and holds it until the guard drops.
    pub async fn lock(&self, key: K) -> Gate<'_, K> {
        let lock = self
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        Gate {
            gates: self,
            key,
            guard: Some(guard),
        }
    }

    /// Keys with a gate now (held or waited for).
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no gate exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Ord + Clone> Drop for Gate<'_, K> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self
            .gates
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it: nobody holds the gate or waits for it.
        if map
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gate_orders_its_holders_and_is_forgotten_once_nobody_wants_it() {
        let gates = Arc::new(Gates::<u32>::default());
        let first = gates.lock(1).await;
        let waiter = {
            let gates = gates.clone();
            tokio::spawn(async move {
                let _second = gates.lock(1).await;
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the second waits for the first");
        assert_eq!(gates.len(), 1);
        drop(first);
        waiter.await.unwrap();
        assert!(gates.is_empty(), "nobody holds or waits: forgotten");
        let _other = gates.lock(2).await;
        assert_eq!(gates.len(), 1);
    }
}
