//! A bounded memory of recent answers by key, forgotten after a while.
//!
//! Owns: [`Recent`] — what was answered for a key and when; an entry is forgotten once it is
//! `ttl_ms` old or when more than `max_entries` are held (the oldest first). Used for request
//! ids (Chat's MSG-16). [`RecentByOwner`] — the same, bounded per owner (an account), so one
//! owner's many keys push out only its own: used for idempotency keys (MCP `create_document`
//! and `update_document`).
//! Does not own: the clock (the caller says what time it is) or what a key means.
//!
//! Invariants: at most `max_entries` are held after any insert; an entry replaced by a newer
//! one for the same key is never forgotten on the older one's account.

use std::collections::{BTreeMap, VecDeque};

use crate::store::UnixMillis;

pub struct Recent<K: Ord + Clone, V> {
    ttl_ms: i64,
    max_entries: usize,
    entries: BTreeMap<K, (V, UnixMillis, u64)>,
    /// Insertion order of `entries`, oldest first: (key, when, stamp).
    order: VecDeque<(K, UnixMillis, u64)>,
    stamp: u64,
}

impl<K: Ord + Clone, V> Recent<K, V> {
    pub fn new(ttl_ms: i64, max_entries: usize) -> Self {
        Recent {
            ttl_ms,
            max_entries,
            entries: BTreeMap::new(),
            order: VecDeque::new(),
            stamp: 0,
        }
    }

    /// Forgets what is too old at `now`, or too many.
    pub fn forget_expired(&mut self, now: UnixMillis) {
        while let Some((key, at, stamp)) = self.order.front().cloned() {
            if now - at < self.ttl_ms && self.order.len() <= self.max_entries {
                break;
            }
            self.order.pop_front();
            if self.entries.get(&key).is_some_and(|(_, _, s)| *s == stamp) {
                self.entries.remove(&key);
            }
        }
    }

    /// What is remembered for `key` at `now`, if it is younger than the memory's span.
    pub fn get(&mut self, key: &K, now: UnixMillis) -> Option<&V> {
        self.forget_expired(now);
        self.entries
            .get(key)
            .filter(|(_, at, _)| now - at < self.ttl_ms)
            .map(|(value, _, _)| value)
    }

    /// Remembers `value` for `key` from `now` on.
    pub fn insert(&mut self, key: K, value: V, now: UnixMillis) {
        self.stamp += 1;
        self.order.push_back((key.clone(), now, self.stamp));
        self.entries.insert(key, (value, now, self.stamp));
        self.forget_expired(now);
    }
}

impl<K: Ord + Clone, V> Recent<K, V> {
    /// Whether nothing is held (after forgetting what is too old at `now`).
    pub fn is_empty_at(&mut self, now: UnixMillis) -> bool {
        self.forget_expired(now);
        self.entries.is_empty()
    }
}

/// A [`Recent`] per owner: at most `per_owner` entries each, and at most `max_owners` owners
/// (past that, owners with nothing left are dropped, then the ones heard from longest ago).
pub struct RecentByOwner<O: Ord + Clone, K: Ord + Clone, V> {
    ttl_ms: i64,
    per_owner: usize,
    max_owners: usize,
    /// Each owner's memory, and when it last inserted.
    owners: BTreeMap<O, (Recent<K, V>, UnixMillis)>,
}

impl<O: Ord + Clone, K: Ord + Clone, V> RecentByOwner<O, K, V> {
    pub fn new(ttl_ms: i64, per_owner: usize, max_owners: usize) -> Self {
        RecentByOwner {
            ttl_ms,
            per_owner,
            max_owners,
            owners: BTreeMap::new(),
        }
    }

    /// What `owner` has remembered for `key` at `now`.
    pub fn get(&mut self, owner: &O, key: &K, now: UnixMillis) -> Option<&V> {
        self.owners.get_mut(owner)?.0.get(key, now)
    }

    /// Remembers `value` for `owner`'s `key` from `now` on.
    pub fn insert(&mut self, owner: O, key: K, value: V, now: UnixMillis) {
        let (ttl_ms, per_owner) = (self.ttl_ms, self.per_owner);
        let entry = self
            .owners
            .entry(owner)
            .or_insert_with(|| (Recent::new(ttl_ms, per_owner), now));
        entry.0.insert(key, value, now);
        entry.1 = now;
        if self.owners.len() > self.max_owners {
            self.owners
                .retain(|_, (recent, _)| !recent.is_empty_at(now));
        }
        while self.owners.len() > self.max_owners {
            let quietest = self
                .owners
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(owner, _)| owner.clone());
            match quietest {
                Some(owner) => {
                    self.owners.remove(&owner);
                }
                None => break,
            }
        }
    }

    /// How many owners have a memory now.
    pub fn owners(&self) -> usize {
        self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Recent, RecentByOwner};

    #[test]
    fn one_owner_filling_its_memory_pushes_out_only_its_own_keys() {
        let mut recent = RecentByOwner::new(1_000, 3, 10);
        recent.insert("ann", 0, 1, 0);
        for i in 0..100 {
            recent.insert("bob", i, i, 1);
        }
        assert_eq!(recent.get(&"ann", &0, 2), Some(&1));
        assert_eq!(recent.get(&"bob", &0, 2), None, "bob's oldest went");
        assert_eq!(recent.get(&"bob", &99, 2), Some(&99));
        // Past the owner bound, owners with nothing left go first, then the quietest.
        for owner in 0..20 {
            recent.insert(
                [
                    "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
                    "s", "t", "u", "v",
                ][owner],
                0,
                0,
                10 + owner as i64,
            );
        }
        assert!(recent.owners() <= 10);
    }

    #[test]
    fn an_entry_lives_its_span_and_the_oldest_go_past_the_bound() {
        let mut recent = Recent::new(1_000, 2);
        recent.insert("a", 1, 0);
        assert_eq!(recent.get(&"a", 999), Some(&1));
        assert_eq!(recent.get(&"a", 1_000), None, "gone at its span");
        recent.insert("a", 1, 2_000);
        recent.insert("b", 2, 2_001);
        recent.insert("c", 3, 2_002);
        assert_eq!(
            recent.get(&"a", 2_003),
            None,
            "the oldest went past the bound"
        );
        assert_eq!(recent.get(&"c", 2_003), Some(&3));
        // Replaced: the older insert's expiry does not take the newer value with it.
        recent.insert("b", 4, 2_900);
        assert_eq!(recent.get(&"b", 3_002), Some(&4));
    }
}
