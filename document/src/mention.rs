//! Mentions of a document's own parts and of its repository's files (hosted-agent.md "Chat
//! context"): what a heading, a Decision or a path is called, how a mention names it, and the
//! words the Planner is told beside a message.
//!
//! Owns: heading anchors (the heading's text slugged as GitHub slugs it, `-1`, `-2` after a
//! repeat, in document order, CTX-30), Decision labels (the header, else the question, CTX-31),
//! the shape of a mentionable path (CTX-32, RULINGS CTX-29: at most 1,024 bytes), the told
//! words of each kind with every name quoted as one value (CTX-42), and the refusal words
//! (CTX-24..28). No I/O: the caller gives the source and, for files, the listing.

use crate::blocks::{blocks, BlockKind};
use crate::decision::decisions;

/// The longest path a mention may name, in bytes (RULINGS CTX-29).
pub const PATH_MAX_BYTES: usize = 1024;

/// CTX-24.
pub const HEADING_GONE: &str = "That heading is no longer in the document.";
/// CTX-25.
pub const DECISION_GONE: &str = "That Decision is no longer in the document.";
/// CTX-26.
pub const FILE_NOT_THERE: &str = "That file is not in the repository.";
/// CTX-27.
pub const FILES_UNLISTED: &str =
    "This repository's files cannot be listed right now, so a file cannot be mentioned.";
/// CTX-28.
pub const PATH_TOO_LONG: &str = "That path is too long to mention.";

/// A heading a mention may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadingAnchor {
    pub anchor: String,
    pub text: String,
    pub level: u8,
    /// 1-based.
    pub line: usize,
}

/// `text` slugged as GitHub slugs a heading: lower case, every letter, digit, `-` and `_`
/// kept, each space a `-`, anything else dropped.
pub fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every heading of `source`, in document order, with its anchor: a repeated slug gets `-1`,
/// `-2`, … after its first use, as GitHub numbers them.
pub fn heading_anchors(source: &str) -> Vec<HeadingAnchor> {
    let mut used: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for block in blocks(source) {
        let Some(heading) = block.heading else {
            continue;
        };
        if block.kind != BlockKind::Heading {
            continue;
        }
        let base = slug(&heading.text);
        let mut anchor = base.clone();
        let mut n = 0;
        while used.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        used.push(anchor.clone());
        out.push(HeadingAnchor {
            anchor,
            text: heading.text,
            level: heading.level,
            line: block.first_line,
        });
    }
    out
}

/// A Decision a mention may name: its id and label (its header, else its question).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionLabel {
    pub id: String,
    pub label: String,
}

/// Every valid Decision of `source`, in document order.
pub fn decision_labels(source: &str) -> Vec<DecisionLabel> {
    decisions(source, &blocks(source))
        .into_iter()
        .map(|(_, d)| DecisionLabel {
            label: d.header.clone().unwrap_or_else(|| d.question.clone()),
            id: d.id,
        })
        .collect()
}

/// Whether `path` is a plain path from the repository's root (CTX-32): at most
/// [`PATH_MAX_BYTES`], no `..`, `.` or empty part, no backslash, no control character. The
/// refusal's words otherwise.
pub fn check_path(path: &str) -> Result<(), &'static str> {
    if path.len() > PATH_MAX_BYTES {
        return Err(PATH_TOO_LONG);
    }
    let plain = !path.is_empty()
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
        && path.split('/').all(|part| !matches!(part, "" | "." | ".."));
    if plain {
        Ok(())
    } else {
        Err(FILE_NOT_THERE)
    }
}

/// The most of each kind the mentions route lists (RULINGS CTX-35: `limit` is clamped to 1–20).
pub const LIST_MAX: usize = 20;
/// How many of each kind the mentions route lists unless asked (CTX-34).
pub const LIST_DEFAULT: usize = 6;
/// The longest query the mentions route takes, in characters (RULINGS CTX-35: longer is 400).
pub const QUERY_MAX_CHARS: usize = 64;

/// The items whose name matches `query` (without regard to case), at most `limit`: those whose
/// name starts with it first, then those with a word that starts with it, then those holding it
/// anywhere; each group in the items' own order (CTX-36). An empty query matches all, in order.
pub fn narrow<T: Clone>(
    items: &[T],
    name: impl Fn(&T) -> &str,
    query: &str,
    limit: usize,
) -> Vec<T> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return items.iter().take(limit).cloned().collect();
    }
    let rank = |item: &T| -> Option<u8> {
        let n = name(item).to_lowercase();
        if n.starts_with(&q) {
            Some(0)
        } else if n
            .match_indices(&q)
            .any(|(at, _)| n[..at].chars().last().is_some_and(|c| !c.is_alphanumeric()))
        {
            Some(1)
        } else if n.contains(&q) {
            Some(2)
        } else {
            None
        }
    };
    let mut ranked: Vec<(u8, usize, &T)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| rank(item).map(|r| (r, i, item)))
        .collect();
    ranked.sort_by_key(|(r, i, _)| (*r, *i));
    ranked
        .into_iter()
        .take(limit)
        .map(|(_, _, t)| t.clone())
        .collect()
}

/// `s` as one quoted value, whatever quotes or line breaks it holds (CTX-42).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// What the Planner is told for a heading mention (CTX-30).
pub fn told_heading(h: &HeadingAnchor) -> String {
    format!(
        "[heading anchor {}, level {}, line {} of this document]",
        quoted(&h.anchor),
        h.level,
        h.line
    )
}

/// What the Planner is told for a Decision mention (CTX-31).
pub fn told_decision(id: &str) -> String {
    format!("[Decision id {} of this document]", quoted(id))
}

/// What the Planner is told for a file mention (CTX-32).
pub fn told_file(path: &str) -> String {
    format!("[file path {} in the repository]", quoted(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctx_30_anchors_are_github_slugs_numbered_after_a_repeat_in_document_order() {
        let source = "# Overview\n\nText.\n\n## Roll-out plan: v2!\n\n# Overview\n\n### Overview\n";
        let anchors = heading_anchors(source);
        let got: Vec<(&str, u8, usize)> = anchors
            .iter()
            .map(|h| (h.anchor.as_str(), h.level, h.line))
            .collect();
        assert_eq!(
            got,
            [
                ("overview", 1, 1),
                ("roll-out-plan-v2", 2, 5),
                ("overview-1", 1, 7),
                ("overview-2", 3, 9)
            ]
        );
        assert_eq!(
            told_heading(&anchors[0]),
            "[heading anchor \"overview\", level 1, line 1 of this document]"
        );
        assert_eq!(slug("Ünïcode Straße 2"), "ünïcode-straße-2");
    }

    #[test]
    fn ctx_31_a_decision_is_labelled_by_its_header_else_its_question() {
        let source = "# Plan\n\n```decision\nid: d-1\nstate: open\nheader: Region\nquestion: Which region first?\n```\n\n```decision\nid: d-2\nstate: open\nquestion: Ship on Friday?\n```\n";
        let labels = decision_labels(source);
        assert_eq!(
            labels,
            [
                DecisionLabel {
                    id: "d-1".into(),
                    label: "Region".into()
                },
                DecisionLabel {
                    id: "d-2".into(),
                    label: "Ship on Friday?".into()
                }
            ]
        );
        assert_eq!(
            told_decision("d-1"),
            "[Decision id \"d-1\" of this document]"
        );
    }

    #[test]
    fn ctx_28_ctx_29_ctx_32_a_path_is_plain_and_at_most_1024_bytes() {
        assert_eq!(check_path("src/index.ts"), Ok(()));
        assert_eq!(check_path(&"a".repeat(1024)), Ok(()));
        assert_eq!(check_path(&"a".repeat(1025)), Err(PATH_TOO_LONG));
        for bad in [
            "", "/src", "src/", "src//a", "./a", "a/../b", "a\\b", "a\nb", "..",
        ] {
            assert_eq!(check_path(bad), Err(FILE_NOT_THERE), "{bad:?}");
        }
        assert_eq!(
            told_file("src/index.ts"),
            "[file path \"src/index.ts\" in the repository]"
        );
    }

    #[test]
    fn ctx_36_narrowing_puts_starts_first_then_word_starts_then_any_part() {
        let names = ["Plan B", "Overview", "Roll-out plan", "Explanation", "plan"];
        let got = narrow(&names, |n| n, "plan", 10);
        assert_eq!(got, ["Plan B", "plan", "Roll-out plan", "Explanation"]);
        assert_eq!(narrow(&names, |n| n, "", 2), ["Plan B", "Overview"]);
        assert_eq!(narrow(&names, |n| n, "PLAN", 1), ["Plan B"]);
        assert!(narrow(&names, |n| n, "zzz", 5).is_empty());
    }

    #[test]
    fn ctx_42_a_name_with_a_quote_or_a_line_break_stays_one_value() {
        assert_eq!(
            told_file("a\"b"),
            "[file path \"a\\\"b\" in the repository]"
        );
        assert_eq!(
            told_decision("x\ny"),
            "[Decision id \"x\\ny\" of this document]"
        );
    }
}
