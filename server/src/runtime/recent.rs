//! A bounded memory of recent answers by key, forgotten after a while.
//!
//! Owns: [`Recent`] — what was answered for a key and when; an entry is forgotten once it is
//! `ttl_ms` old or when more than `max_entries` are held (the oldest first). Used for request
//! ids (Chat's MSG-16, on the process that answered them).
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

#[cfg(test)]
mod tests {
    use super::Recent;

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
