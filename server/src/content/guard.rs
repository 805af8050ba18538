//! Yjs bytes from outside, taken without letting them poison a document: a client's update is
//! tried on a shadow copy first, and a document is rebuilt from its journal entry by entry.
//!
//! Owns: [`Shadow`] (a second copy of an open document that every update is tried on before it
//! reaches the journal, the live copy or another client: decoded, applied and its change encoded
//! again, each step under `catch_unwind`), and [`rebuild`] (a document from a checkpoint and
//! journal entries, an entry that fails skipped and counted, never fatal).
//! Does not own: when an update is taken or who may send one ([`super::OpenDocument`] and the
//! sockets), or storage.
//!
//! Why both steps: yrs 0.28 accepts some malformed updates that then make *every* later encode
//! of the document panic (a pending delete set it cannot merge), and panics inside decode or
//! apply on others. An update that decodes, applies and whose change encodes on the shadow is
//! safe to apply to the live copy: the two hold the same state, and yrs is deterministic. What
//! is journalled and relayed is the change as yrs encoded it again, not the client's bytes, so no
//! other client receives bytes the official `yjs` may not read.
//!
//! Invariants: a panic in yrs never escapes this module; a write transaction a panic interrupted
//! is never committed (committing a half-applied update could panic again while unwinding) — it
//! and its document are leaked instead, and the shadow is rebuilt from the live copy.

use std::panic::{catch_unwind, AssertUnwindSafe};

use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update, WriteTxn};

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a Yjs v1 update at all.
    #[error("not a Yjs v1 update: {0}")]
    Malformed(String),
    /// It decodes, but yrs cannot apply it, or cannot encode the document with it: it would
    /// poison the document.
    #[error("the update would leave the document unreadable ({0})")]
    Poisonous(&'static str),
    /// The document would pass a size limit with it: its Markdown source past
    /// [`chopin_document::SOURCE_MAX_BYTES`], or its whole Yjs state past [`STATE_MAX_BYTES`].
    #[error("{message}")]
    TooLarge { bytes: usize, message: String },
    /// It depends on changes this document never received (its client's clock starts after a
    /// gap, or it deletes what is not there): nothing of it is taken.
    #[error("the update depends on {0} this document does not have")]
    Gapped(&'static str),
}

/// The most a document's whole Yjs state (its text and the history the text needs) may take
/// encoded, so that a fresh client's sync step 2 always fits in one frame the server may send
/// (the sockets' outbound frame bound is defined as twice this).
pub const STATE_MAX_BYTES: usize = 8 * 1024 * 1024;

/// `f` with any panic turned into `None`.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// What an update did to the document it was applied to.
struct Applied {
    /// What the transaction integrated, encoded by yrs: the structs it added and the deletions
    /// it made, nothing else (no pending structs, not the document's whole delete set).
    change: Vec<u8>,
    /// Whether it left structs or deletions yrs could not integrate (a gap before them).
    pending: bool,
}

/// Applies `update` in a write transaction of `doc`. `Some(result)` if it returned; `None` if it
/// panicked, in which case the transaction and the document were leaked, never committed.
fn apply_in(doc: Doc, update: Update) -> Option<(Doc, Result<Applied, String>)> {
    let mut txn = doc.transact_mut();
    let outcome = guarded(|| {
        txn.apply_update(update).map_err(|e| e.to_string())?;
        Ok(Applied {
            change: txn.encode_update_v1(),
            pending: txn.has_missing_updates(),
        })
    });
    match outcome {
        Some(result) => {
            drop(txn);
            Some((doc, result))
        }
        None => {
            std::mem::forget(txn);
            std::mem::forget(doc);
            None
        }
    }
}

/// Drops what `doc` holds pending (structs or deletions after a gap it never got). `None` if
/// yrs panicked doing so; the document was then leaked.
fn without_pending(doc: Doc) -> Option<Doc> {
    let mut txn = doc.transact_mut();
    if guarded(|| txn.prune_pending()).is_some() {
        drop(txn);
        Some(doc)
    } else {
        std::mem::forget(txn);
        std::mem::forget(doc);
        None
    }
}

/// Whether `update` (a client's bytes) changes nothing: `None` if it is not an update yrs can
/// read without panicking.
pub fn is_empty(update: &[u8]) -> Option<bool> {
    match guarded(|| Update::decode_v1(update)) {
        Some(Ok(decoded)) => Some(decoded.is_empty()),
        _ => None,
    }
}

/// The whole state of `doc`, or `None` if yrs panics encoding it.
pub fn encode_all(doc: &Doc) -> Option<Vec<u8>> {
    guarded(|| {
        doc.transact()
            .encode_state_as_update_v1(&StateVector::default())
    })
}

/// The UTF-8 length of `doc`'s source text, read in full only when its UTF-16 length says it
/// could pass the limit (each unit is at most three bytes). `None` if it has no source text.
fn source_bytes(doc: &Doc) -> Option<usize> {
    use yrs::{GetString, Text};
    let txn = doc.transact();
    let text = txn.get_text(chopin_document::ydoc::SOURCE_TEXT)?;
    let units = text.len(&txn) as usize;
    if units.saturating_mul(3) <= chopin_document::SOURCE_MAX_BYTES {
        return Some(units);
    }
    Some(text.get_string(&txn).len())
}

/// A copy of `live` (its whole state applied to a new document of the same client id), with the
/// bytes that state took encoded.
fn copy_of(live: &Doc) -> (Doc, usize) {
    let copy = chopin_document::ydoc::empty_doc(live.client_id().get());
    let mut bytes = 0;
    if let Some(state) = encode_all(live) {
        bytes = state.len();
        if let Ok(update) = Update::decode_v1(&state) {
            let mut txn = copy.transact_mut();
            let _ = txn.apply_update(update);
        }
    }
    (copy, bytes)
}

/// What one update may add to a document's encoded state beyond its own encoded change is
/// bounded by [`GROWTH_FACTOR`] times the change plus this: an insertion or deletion inside an
/// existing item splits it, and each split-off part is encoded with a header of its own (ids
/// and origins, a few varints) that the change itself does not carry.
const SPLIT_SLACK: usize = 64;
/// See [`SPLIT_SLACK`]: a deletion of many short ranges costs the change a few bytes per range
/// and the state up to two item headers per range.
const GROWTH_FACTOR: usize = 16;

/// How [`Shadow::try_update`] takes an update: as it must, or with a bug the simulator plants.
#[derive(Debug, Clone, Copy, Default)]
pub struct Planted {
    /// The change is the whole state the shadow gained since the update's start (the whole
    /// delete set included), as yrs's state-vector encoding gives it.
    pub whole_state: bool,
    /// No shadow copy: the client's bytes are taken as they are.
    pub unguarded: bool,
}

/// The copy every update is tried on first.
pub struct Shadow {
    doc: Option<Doc>,
    /// At least the bytes the shadow's whole state takes encoded: measured when it was copied,
    /// then grown by each change taken (times [`GROWTH_FACTOR`], plus [`SPLIT_SLACK`]). The whole state is encoded again
    /// only when this passes [`STATE_MAX_BYTES`], so a keystroke costs what it changes, not
    /// what the document holds.
    state_bytes: usize,
}

impl Shadow {
    /// A shadow of `live` as it is now.
    pub fn of(live: &Doc) -> Self {
        let mut shadow = Shadow {
            doc: None,
            state_bytes: 0,
        };
        shadow.reset(live);
        shadow
    }

    /// Starts again from a copy of `live`.
    fn reset(&mut self, live: &Doc) {
        let (doc, bytes) = copy_of(live);
        self.doc = Some(doc);
        self.state_bytes = bytes;
    }

    /// Tries `update` (a client's bytes) on the shadow. `Ok(Some(change))`: it applied, and
    /// `change` is what it added, encoded by yrs — journal it, apply it to the live copy, relay
    /// it. `Ok(None)`: nothing new. `Err`: refused; the shadow is as it was (rebuilt from `live`
    /// if the update damaged it).
    pub fn try_update(&mut self, live: &Doc, update: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        self.try_update_as(live, update, Planted::default())
    }

    /// [`Shadow::try_update`], with the bugs of `planted` (the simulator's, to show its
    /// invariants find them).
    pub fn try_update_as(
        &mut self,
        live: &Doc,
        update: &[u8],
        planted: Planted,
    ) -> Result<Option<Vec<u8>>, Refusal> {
        let decoded = match guarded(|| Update::decode_v1(update)) {
            Some(Ok(decoded)) => decoded,
            Some(Err(e)) => return Err(Refusal::Malformed(e.to_string())),
            None => return Err(Refusal::Poisonous("yrs panicked decoding it")),
        };
        if decoded.is_empty() {
            return Ok(None);
        }
        if planted.unguarded {
            return Ok(Some(update.to_vec()));
        }
        if self.doc.is_none() {
            self.reset(live);
        }
        let Some(doc) = self.doc.take() else {
            return Err(Refusal::Poisonous("the document could not be copied"));
        };
        let before = planted.whole_state.then(|| doc.transact().state_vector());
        let Some((doc, applied)) = apply_in(doc, decoded) else {
            self.reset(live);
            return Err(Refusal::Poisonous("yrs panicked applying it"));
        };
        let applied = match (applied, &before) {
            (Ok(mut applied), Some(before)) if !applied.pending => {
                // The planted bug: what the shadow gained, encoded by state vector (the
                // document's whole delete set with it).
                let whole = guarded(|| doc.transact().encode_state_as_update_v1(before));
                applied.change = whole.unwrap_or_default();
                applied
            }
            (Ok(_), Some(_)) => {
                drop(doc);
                self.reset(live);
                return Err(Refusal::Gapped("changes"));
            }
            (applied, None) => match applied {
                Ok(applied) if !applied.pending => applied,
                Ok(_) => {
                    // Held apart it would be relayed to nobody and kept by nobody: refused.
                    drop(doc);
                    self.reset(live);
                    return Err(Refusal::Gapped("changes"));
                }
                Err(e) => {
                    // An update yrs refuses may have changed the shadow half-way: start again.
                    drop(doc);
                    self.reset(live);
                    return Err(Refusal::Malformed(e));
                }
            },
            (Err(e), Some(_)) => {
                drop(doc);
                self.reset(live);
                return Err(Refusal::Malformed(e));
            }
        };
        let mut state_bytes = self.state_bytes + GROWTH_FACTOR * applied.change.len() + SPLIT_SLACK;
        // The change was encoded already (what the transaction added, its deletions with it);
        // the whole state is encoded only when it may pass its bound. Encoding it, or any slice
        // of a long item, costs what the document holds.
        let too_large = if state_bytes > STATE_MAX_BYTES {
            // Maybe past the bound: measured exactly.
            match encode_all(&doc) {
                None => Some(Refusal::Poisonous("yrs cannot encode the document with it")),
                Some(state) if state.len() > STATE_MAX_BYTES => Some(Refusal::TooLarge {
                    bytes: state.len(),
                    message: format!(
                        "The document's history would take {} bytes, past the {STATE_MAX_BYTES} bytes a document may hold, so the change was not saved.",
                        state.len()
                    ),
                }),
                Some(state) => {
                    state_bytes = state.len();
                    None
                }
            }
        } else {
            None
        };
        let too_large = too_large.or_else(|| {
            source_bytes(&doc).and_then(|bytes| {
                chopin_document::source_too_large(bytes)
                    .map(|message| Refusal::TooLarge { bytes, message })
            })
        });
        if let Some(refusal) = too_large {
            drop(doc);
            self.reset(live);
            return Err(refusal);
        }
        self.doc = Some(doc);
        self.state_bytes = state_bytes;
        let empty = Update::decode_v1(&applied.change)
            .map(|u| u.is_empty())
            .unwrap_or(true);
        Ok((!empty).then_some(applied.change))
    }

    /// Applies a change the server made itself (an `edit_plan` batch) to the shadow too.
    pub fn follow(&mut self, live: &Doc, change: &[u8]) {
        if self.try_update(live, change).is_err() {
            self.reset(live);
        }
    }
}

/// Applies `bytes` (a change [`Shadow::try_update`] produced, or the server's own) to `live`.
/// Returns false if yrs refused it (it was checked on the shadow, so this is not expected).
pub fn apply_checked(live: &Doc, bytes: &[u8]) -> bool {
    let Ok(update) = Update::decode_v1(bytes) else {
        return false;
    };
    let mut txn = live.transact_mut();
    txn.apply_update(update).is_ok()
}

/// What [`rebuild`] made of the stored content.
pub struct Rebuilt {
    pub doc: Doc,
    /// Journal entries (by seq; 0 for the checkpoint) that were skipped because they would
    /// poison the document.
    pub skipped: Vec<i64>,
}

/// A document of client id `client_id` from a checkpoint (seq 0) and journal entries, in
/// order. An entry that does not decode, panics, or leaves the document unencodable is skipped;
/// the rest still apply.
pub fn rebuild(client_id: u64, entries: &[(i64, &[u8])]) -> Rebuilt {
    let mut skipped = Vec::new();
    let mut prune = true;
    'attempt: loop {
        let mut doc = chopin_document::ydoc::empty_doc(client_id);
        for (seq, bytes) in entries {
            if skipped.contains(seq) {
                continue;
            }
            let decoded = match guarded(|| Update::decode_v1(bytes)) {
                Some(Ok(decoded)) => decoded,
                _ => {
                    skipped.push(*seq);
                    continue;
                }
            };
            match apply_in(doc, decoded) {
                Some((next, _)) => doc = next,
                None => {
                    // The document was leaked with the transaction: start again without it.
                    skipped.push(*seq);
                    continue 'attempt;
                }
            }
        }
        // What an older journal kept pending (a gap never filled) is dropped: it could only
        // ever be relayed again, never read.
        let doc = if prune {
            match without_pending(doc) {
                Some(doc) => doc,
                None => {
                    prune = false;
                    continue 'attempt;
                }
            }
        } else {
            doc
        };
        if encode_all(&doc).is_some() {
            return Rebuilt { doc, skipped };
        }
        // Some entry made the document unencodable: find it, one entry at a time.
        let mut probe = chopin_document::ydoc::empty_doc(client_id);
        let mut found = None;
        for (seq, bytes) in entries {
            if skipped.contains(seq) {
                continue;
            }
            let mut shadow = Shadow {
                doc: None,
                state_bytes: 0,
            };
            match shadow.try_update(&probe, bytes) {
                // An older journal's entry may carry what was pending then: not to blame.
                Ok(_) | Err(Refusal::Gapped(_)) => {}
                Err(_) => {
                    found = Some(*seq);
                    break;
                }
            }
            if let Some(next) = shadow.doc.take() {
                probe = next;
            }
        }
        match found {
            Some(seq) => skipped.push(seq),
            // Nothing alone is to blame: keep what encodes, the last document that did.
            None => {
                return Rebuilt {
                    doc: probe,
                    skipped,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chopin_document::ydoc;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Applies without error; afterwards every encode of the document panics (yrs 0.28).
    pub const UNENCODABLE: &str = "0101d90f009244f1070007422d736964652001f107011a02";
    /// Panics inside decode or apply (yrs 0.28).
    pub const PANICS: &str = "0201e60f0044fe070007422d736964652003fe07feffffffffffffffff01040106736f757263651a48656c6c6f2c20776f006c64212023205469746c650a2d20697481fe07190284fe071b010a01fe07011a02";

    fn typed(text: &str) -> (Doc, Vec<u8>) {
        let doc = ydoc::empty_doc(7);
        let update = ydoc::replace_source(&doc, text);
        (doc, update)
    }

    #[test]
    fn a_good_update_is_taken_and_its_change_is_yrs_own_encoding() {
        let live = ydoc::empty_doc(1);
        let mut shadow = Shadow::of(&live);
        let (_, update) = typed("# Title\n");
        let change = shadow
            .try_update(&live, &update)
            .unwrap()
            .expect("a change");
        assert!(apply_checked(&live, &change));
        assert_eq!(ydoc::read_source(&live), "# Title\n");
        // The same update again adds nothing.
        assert_eq!(shadow.try_update(&live, &update), Ok(None));
    }

    /// The shadow encodes the whole state only near the size bound: what it counts instead must
    /// never be less than what the state really takes, whatever the edits (inserts inside
    /// earlier text split items; deletions grow the delete set).
    #[test]
    fn the_counted_state_size_is_never_below_the_real_one() {
        use proptest::prelude::*;
        use yrs::{GetString, Text};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        // Each update is one transaction of a few inserts and deletions anywhere.
        let edits = proptest::collection::vec(
            proptest::collection::vec((any::<bool>(), 0u32..400, 1u32..12), 1..8),
            1..60,
        );
        runner
            .run(&edits, |edits| {
                let live = ydoc::empty_doc(1);
                let mut shadow = Shadow::of(&live);
                let writers = [ydoc::empty_doc(7), ydoc::empty_doc(8)];
                for (n, ops) in edits.into_iter().enumerate() {
                    let writer = &writers[n % 2];
                    // Each writer starts from what the live copy holds.
                    let state = encode_all(&live).unwrap();
                    writer
                        .transact_mut()
                        .apply_update(Update::decode_v1(&state).unwrap())
                        .unwrap();
                    let source = writer.get_or_insert_text(ydoc::SOURCE_TEXT);
                    let update = {
                        let mut txn = writer.transact_mut();
                        for (insert, at, len) in ops {
                            let length = source.get_string(&txn).encode_utf16().count() as u32;
                            if insert || length == 0 {
                                source.insert(&mut txn, at.min(length), &"ab".repeat(len as usize));
                            } else {
                                let from = at.min(length - 1);
                                source.remove_range(&mut txn, from, len.min(length - from));
                            }
                        }
                        txn.encode_update_v1()
                    };
                    if let Some(change) = shadow.try_update(&live, &update).unwrap() {
                        prop_assert!(apply_checked(&live, &change));
                    }
                    let real = encode_all(&live).unwrap().len();
                    prop_assert!(
                        shadow.state_bytes >= real,
                        "counted {} < real {real}",
                        shadow.state_bytes
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn the_known_poisonous_updates_are_refused_and_leave_the_document_readable() {
        let (live, first) = typed("Hello, world! # Title\n- item\n");
        let mut shadow = Shadow::of(&live);
        let _ = first;
        for bad in [UNENCODABLE, PANICS] {
            let refused = shadow.try_update(&live, &hex(bad));
            assert!(
                matches!(
                    refused,
                    Err(Refusal::Poisonous(_) | Refusal::Malformed(_) | Refusal::Gapped(_))
                ),
                "{bad}: {refused:?}"
            );
            assert!(encode_all(&live).is_some(), "the live copy still encodes");
        }
        // The shadow still takes good updates afterwards.
        let (_, more) = typed("Another text\n");
        assert!(shadow.try_update(&live, &more).is_ok());
    }

    #[test]
    fn rebuilding_skips_a_journal_entry_that_would_poison_and_keeps_the_rest() {
        let (_, good) = typed("Kept\n");
        let bad = hex(UNENCODABLE);
        let panics = hex(PANICS);
        let entries: Vec<(i64, &[u8])> = vec![(1, &good), (2, &bad), (3, &panics)];
        let rebuilt = rebuild(9, &entries);
        assert_eq!(ydoc::read_source(&rebuilt.doc), "Kept\n");
        // The unencodable entry's damage was a delete set it held pending: dropped on load,
        // so only the entry that panics is skipped.
        assert_eq!(rebuilt.skipped, vec![3]);
        assert!(encode_all(&rebuilt.doc).is_some());
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_poison() {
        use proptest::prelude::*;
        let (live, _) = typed("# Plan\n\nA paragraph.\n");
        let (_, real) = typed("# Plan\n\nA paragraph, edited.\n- a list item\n");
        let shadow = std::cell::RefCell::new(Shadow::of(&live));
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mutated =
            proptest::collection::vec((0..real.len(), any::<u8>()), 0..6).prop_map(move |flips| {
                let mut bytes = real.clone();
                for (at, value) in flips {
                    bytes[at] = value;
                }
                bytes
            });
        let bytes = prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), mutated];
        runner
            .run(&bytes, |bytes| {
                let taken = shadow.borrow_mut().try_update(&live, &bytes);
                if let Ok(Some(change)) = taken {
                    prop_assert!(apply_checked(&live, &change));
                }
                prop_assert!(encode_all(&live).is_some());
                Ok(())
            })
            .unwrap();
    }
}
