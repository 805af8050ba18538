//! A small bridge between a source string and a `yrs` document, for the room's live text.
//!
//! Owns: a `yrs::Doc` whose `Text` named [`SOURCE_TEXT`] holds the document's source, turning a
//! new source into one minimal change (the common prefix and suffix stay, the middle is replaced)
//! encoded as a v1 update, and applying a v1 update received from a client.
//! Does not own: syncing, awareness or storage of updates.
//!
//! Offsets: every doc made here counts text offsets in UTF-16 code units
//! ([`yrs::OffsetKind::Utf16`]), as JavaScript Yjs clients do, so an index a browser sends means
//! the same place here. Rust strings are UTF-8; [`utf16_len`] converts lengths.

use yrs::updates::decoder::Decode;
use yrs::{
    ClientID, Doc, GetString, OffsetKind, Options, ReadTxn, StateVector, Text, TextRef, Transact,
    Update,
};

/// Name of the shared text that holds the source.
pub const SOURCE_TEXT: &str = "source";

/// A v1 update could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum YdocError {
    #[error("the update is not a valid Yjs v1 update: {0}")]
    Decode(String),
    #[error("the update could not be applied: {0}")]
    Apply(String),
}

/// Length of `text` in UTF-16 code units, the unit of every offset in these docs.
pub fn utf16_len(text: &str) -> u32 {
    let units: usize = text.chars().map(char::len_utf16).sum();
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// An empty doc with UTF-16 offsets. `client_id` must be below 2^53 and unique per writer; the
/// caller chooses it so that runs are reproducible.
pub fn empty_doc(client_id: u64) -> Doc {
    let mut options = Options::with_client_id(ClientID::new(client_id & ((1 << 53) - 1)));
    options.offset_kind = OffsetKind::Utf16;
    Doc::with_options(options)
}

/// A doc whose source text holds `source`.
pub fn new_doc(client_id: u64, source: &str) -> Doc {
    let doc = empty_doc(client_id);
    let text = doc.get_or_insert_text(SOURCE_TEXT);
    {
        let mut txn = doc.transact_mut();
        text.insert(&mut txn, 0, source);
    }
    doc
}

fn source_text(doc: &Doc) -> TextRef {
    doc.get_or_insert_text(SOURCE_TEXT)
}

/// The source the doc holds now.
pub fn read_source(doc: &Doc) -> String {
    let text = source_text(doc);
    let txn = doc.transact();
    text.get_string(&txn)
}

/// The whole doc as one v1 update, for a client that has nothing yet.
pub fn encode_state(doc: &Doc) -> Vec<u8> {
    doc.transact()
        .encode_state_as_update_v1(&StateVector::default())
}

/// Changes the doc's source to `new_source` in one transaction with the smallest change that
/// keeps the common prefix and suffix, and returns that transaction as a v1 update.
pub fn replace_source(doc: &Doc, new_source: &str) -> Vec<u8> {
    let text = source_text(doc);
    let mut txn = doc.transact_mut();
    let old = text.get_string(&txn);
    let (prefix, old_middle, new_middle) = middle_change(&old, new_source);
    let at = utf16_len(&old[..prefix]);
    let removed = utf16_len(old_middle);
    if removed > 0 {
        text.remove_range(&mut txn, at, removed);
    }
    if !new_middle.is_empty() {
        text.insert(&mut txn, at, new_middle);
    }
    txn.encode_update_v1()
}

/// Applies a v1 update and returns the source afterwards.
pub fn apply_update(doc: &Doc, update: &[u8]) -> Result<String, YdocError> {
    let update = Update::decode_v1(update).map_err(|e| YdocError::Decode(e.to_string()))?;
    let text = source_text(doc);
    let mut txn = doc.transact_mut();
    txn.apply_update(update)
        .map_err(|e| YdocError::Apply(e.to_string()))?;
    Ok(text.get_string(&txn))
}

/// Byte length of the common prefix, then the differing middles of `old` and `new`, cut on
/// character boundaries.
fn middle_change<'o, 'n>(old: &'o str, new: &'n str) -> (usize, &'o str, &'n str) {
    let prefix: usize = old
        .chars()
        .zip(new.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum();
    let old_rest = &old[prefix..];
    let new_rest = &new[prefix..];
    let suffix: usize = old_rest
        .chars()
        .rev()
        .zip(new_rest.chars().rev())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum();
    (
        prefix,
        &old_rest[..old_rest.len() - suffix],
        &new_rest[..new_rest.len() - suffix],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_middle_change_keeps_prefix_and_suffix() {
        assert_eq!(middle_change("abcdef", "abXYef"), (2, "cd", "XY"));
        assert_eq!(middle_change("aaa", "aaaa"), (3, "", "a"));
        assert_eq!(middle_change("a😀b", "a😃b"), (1, "😀", "😃"));
        assert_eq!(middle_change("", "x"), (0, "", "x"));
    }

    #[test]
    fn offsets_are_utf16_like_javascript() {
        let doc = new_doc(1, "a😀漢");
        let text = source_text(&doc);
        let txn = doc.transact();
        assert_eq!(text.len(&txn), 4, "a = 1, 😀 = 2, 漢 = 1 UTF-16 units");
        assert_eq!(utf16_len("a😀漢"), 4);
    }

    #[test]
    fn replace_then_apply_round_trips_emoji_and_cjk() {
        let server = new_doc(1, "# 港の計画 😀\n\nold line\n");
        let client = empty_doc(2);
        apply_update(&client, &encode_state(&server)).expect("state");
        assert_eq!(read_source(&client), "# 港の計画 😀\n\nold line\n");

        let new_source = "# 港の新しい計画 🎉😀\n\nold line\n🚢 东京\n";
        let update = replace_source(&server, new_source);
        assert_eq!(read_source(&server), new_source);
        assert_eq!(apply_update(&client, &update).expect("apply"), new_source);
    }

    #[test]
    fn concurrent_changes_converge() {
        let a = new_doc(1, "one 😀 two 漢 three\n");
        let b = empty_doc(2);
        apply_update(&b, &encode_state(&a)).expect("state");
        let from_a = replace_source(&a, "one 😀😀 two 漢 three\n");
        let from_b = replace_source(&b, "one 😀 two 漢字 three!\n");
        let on_a = apply_update(&a, &from_b).expect("b on a");
        let on_b = apply_update(&b, &from_a).expect("a on b");
        assert_eq!(on_a, on_b);
        assert_eq!(on_a, "one 😀😀 two 漢字 three!\n");
    }

    #[test]
    fn garbage_is_an_error() {
        let doc = empty_doc(3);
        assert!(matches!(
            apply_update(&doc, &[0xff, 0xff, 0xff]),
            Err(YdocError::Decode(_))
        ));
    }
}
