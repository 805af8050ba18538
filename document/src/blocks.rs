//! Top-level blocks: the units a Planner reads, edits and anchors to.
//!
//! Owns: cutting a Markdown source (CommonMark with GFM tables, strikethrough and task lists,
//! parsed by `pulldown-cmark`) into its top-level blocks, each a whole run of lines with an
//! index, a kind, an inclusive line range and a digest. Blank lines between blocks belong to no
//! block. Lines that hold something but produce no Markdown event (link reference definitions)
//! become a `definition` block, so every non-blank line lies in exactly one block.
//! Does not own: what a Decision block says (the `decision` module reads it).
//!
//! Blocks are a pure function of the source and are recomputed whenever they are needed; they
//! are never stored, so they cannot drift from the text. (The reader's `Analysis` keeps them in
//! memory beside the very text they were cut from, for reads of that text only.)

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::lines::SourceLines;

/// The info string (first word) that makes a fenced code block a Decision block.
pub const DECISION_INFO: &str = "decision";

/// What a top-level block is. Serialised as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockKind {
    Heading,
    Paragraph,
    List,
    Code,
    Decision,
    Table,
    Quote,
    Html,
    Rule,
    /// Lines Markdown keeps but does not render, such as link reference definitions.
    Definition,
    /// Anything else `pulldown-cmark` reports at the top level.
    Other,
}

impl BlockKind {
    /// The lowercase name used in the block listing.
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Heading => "heading",
            BlockKind::Paragraph => "paragraph",
            BlockKind::List => "list",
            BlockKind::Code => "code",
            BlockKind::Decision => "decision",
            BlockKind::Table => "table",
            BlockKind::Quote => "quote",
            BlockKind::Html => "html",
            BlockKind::Rule => "rule",
            BlockKind::Definition => "definition",
            BlockKind::Other => "other",
        }
    }
}

impl std::fmt::Display for BlockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A heading's level and plain text, for outlines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Heading {
    /// 1 for `#`, up to 6.
    pub level: u8,
    /// The heading's text without Markdown markup.
    pub text: String,
}

/// One top-level block of a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    /// 0-based position among the document's blocks.
    pub index: usize,
    pub kind: BlockKind,
    /// 1-based first line.
    pub first_line: usize,
    /// 1-based last line, inclusive.
    pub last_line: usize,
    /// `sha256:` and the lowercase hex SHA-256 of [`Block::bytes`] of the source.
    pub digest: String,
    /// Byte range of the block's lines in the source, their line endings included.
    #[serde(skip)]
    pub bytes: Range<usize>,
    /// Level and text when the block is a heading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading: Option<Heading>,
}

/// The digest of a block's exact text: `sha256:` and lowercase hex (the READ-24 ruling).
pub fn block_digest(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The Markdown extensions every parse in this crate uses.
pub fn markdown_options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// A top-level element as the parser reported it, before it is widened to whole lines.
struct Raw {
    kind: BlockKind,
    bytes: Range<usize>,
    heading: Option<Heading>,
}

/// The top-level blocks of `source`, in order.
pub fn blocks(source: &str) -> Vec<Block> {
    let lines = SourceLines::new(source);
    let raws = raw_blocks(source);

    // Widen each element to whole lines; drop blank edges; merge elements sharing a line.
    let mut spans: Vec<(usize, usize, BlockKind, Option<Heading>)> = Vec::new();
    for raw in raws {
        let mut first = lines.line_of_byte(raw.bytes.start);
        let end = raw.bytes.end.max(raw.bytes.start + 1).min(source.len());
        let mut last = lines.line_of_byte(end.saturating_sub(1)).max(first);
        while last > first && lines.is_blank(last) {
            last -= 1;
        }
        while first < last && lines.is_blank(first) {
            first += 1;
        }
        if lines.is_blank(first) && first == last {
            continue;
        }
        match spans.last_mut() {
            Some(previous) if first <= previous.1 => previous.1 = previous.1.max(last),
            _ => spans.push((first, last, raw.kind, raw.heading)),
        }
    }

    // Non-blank lines outside every element become `definition` blocks.
    let mut all = Vec::with_capacity(spans.len());
    let mut next_line = 1;
    let push_gap = |from: usize, to: usize, all: &mut Vec<_>| {
        let mut line = from;
        while line < to {
            if lines.is_blank(line) {
                line += 1;
                continue;
            }
            let start = line;
            while line < to && !lines.is_blank(line) {
                line += 1;
            }
            all.push((start, line - 1, BlockKind::Definition, None));
        }
    };
    for span in spans {
        push_gap(next_line, span.0, &mut all);
        next_line = span.1 + 1;
        all.push(span);
    }
    push_gap(next_line, lines.count() + 1, &mut all);

    all.into_iter()
        .enumerate()
        .map(|(index, (first_line, last_line, kind, heading))| {
            let start = lines.byte_range(first_line).map_or(0, |r| r.start);
            let end = lines.byte_range(last_line).map_or(source.len(), |r| r.end);
            Block {
                index,
                kind,
                first_line,
                last_line,
                digest: block_digest(&source[start..end]),
                bytes: start..end,
                heading,
            }
        })
        .collect()
}

/// The top-level elements `pulldown-cmark` reports, with their byte ranges.
fn raw_blocks(source: &str) -> Vec<Raw> {
    let mut raws = Vec::new();
    let mut depth = 0usize;
    let mut current: Option<Raw> = None;
    for (event, range) in Parser::new_ext(source, markdown_options()).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if depth == 0 {
                    let (kind, heading) = kind_of(&tag);
                    current = Some(Raw {
                        kind,
                        bytes: range,
                        heading,
                    });
                }
                depth += 1;
            }
            Event::End(tag_end) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if let Some(mut raw) = current.take() {
                        raw.bytes.end = raw.bytes.end.max(range.end);
                        if let (TagEnd::Heading(_), Some(heading)) = (tag_end, raw.heading.as_mut())
                        {
                            heading.text = heading.text.trim().to_string();
                        }
                        raws.push(raw);
                    }
                }
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some(heading) = current.as_mut().and_then(|raw| raw.heading.as_mut()) {
                    heading.text.push_str(&text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(heading) = current.as_mut().and_then(|raw| raw.heading.as_mut()) {
                    heading.text.push(' ');
                }
            }
            Event::Rule if depth == 0 => raws.push(Raw {
                kind: BlockKind::Rule,
                bytes: range,
                heading: None,
            }),
            Event::Html(_) if depth == 0 => raws.push(Raw {
                kind: BlockKind::Html,
                bytes: range,
                heading: None,
            }),
            _ => {}
        }
    }
    raws
}

fn kind_of(tag: &Tag<'_>) -> (BlockKind, Option<Heading>) {
    let kind = match tag {
        Tag::Heading { level, .. } => {
            let heading = Heading {
                level: level_number(*level),
                text: String::new(),
            };
            return (BlockKind::Heading, Some(heading));
        }
        Tag::Paragraph => BlockKind::Paragraph,
        Tag::List(_) => BlockKind::List,
        Tag::CodeBlock(CodeBlockKind::Fenced(info))
            if info.split_whitespace().next() == Some(DECISION_INFO) =>
        {
            BlockKind::Decision
        }
        Tag::CodeBlock(_) => BlockKind::Code,
        Tag::Table(_) => BlockKind::Table,
        Tag::BlockQuote(_) => BlockKind::Quote,
        Tag::HtmlBlock => BlockKind::Html,
        _ => BlockKind::Other,
    };
    (kind, None)
}

fn level_number(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// How many top-level blocks were added, removed or changed from `before` to `after` (the
/// "N changes to build" count, LIFE-10). Blocks are compared by their exact text, in order, with
/// a Myers diff (`similar`): where a run of blocks gave way to another, each pair counts once as
/// a change and the rest as additions or removals, so a hunk counts the larger of its two sides.
pub fn changed_blocks(before: &str, after: &str) -> usize {
    let texts = |source: &str| -> Vec<String> {
        blocks(source)
            .into_iter()
            .map(|b| source[b.bytes].trim_end().to_owned())
            .collect()
    };
    let (old, new) = (texts(before), texts(after));
    similar::capture_diff_slices(similar::Algorithm::Myers, &old, &new)
        .into_iter()
        .map(|op| match op {
            similar::DiffOp::Equal { .. } => 0,
            similar::DiffOp::Delete { old_len, .. } => old_len,
            similar::DiffOp::Insert { new_len, .. } => new_len,
            similar::DiffOp::Replace {
                old_len, new_len, ..
            } => old_len.max(new_len),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(source: &str) -> Vec<(usize, &'static str, usize, usize)> {
        blocks(source)
            .iter()
            .map(|b| (b.index, b.kind.name(), b.first_line, b.last_line))
            .collect()
    }

    #[test]
    fn kinds_and_line_ranges_of_top_level_blocks() {
        let source = "# Title\n\nSome text\nmore text\n\n- a\n- b\n\n```rust\nfn x() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quoted\n\n---\n\n<div>\nhi\n</div>\n\n```decision\nid: q\n```\n\n[ref]: https://example.com\n";
        assert_eq!(
            summary(source),
            vec![
                (0, "heading", 1, 1),
                (1, "paragraph", 3, 4),
                (2, "list", 6, 7),
                (3, "code", 9, 11),
                (4, "table", 13, 15),
                (5, "quote", 17, 17),
                (6, "rule", 19, 19),
                (7, "html", 21, 23),
                (8, "decision", 25, 27),
                (9, "definition", 29, 29),
            ]
        );
    }

    #[test]
    fn blank_lines_belong_to_no_block_and_loose_lists_are_one_block() {
        let source = "\n\n- a\n\n- b\n\n\ntext\n\n";
        assert_eq!(
            summary(source),
            vec![(0, "list", 3, 5), (1, "paragraph", 8, 8)]
        );
    }

    #[test]
    fn setext_headings_and_heading_text() {
        let all = blocks("Title *here*\n===\n\n## Sub `code`\n");
        assert_eq!(all[0].first_line, 1);
        assert_eq!(all[0].last_line, 2);
        assert_eq!(
            all[0].heading,
            Some(Heading {
                level: 1,
                text: "Title here".into()
            })
        );
        assert_eq!(
            all[1].heading.as_ref().map(|h| h.text.as_str()),
            Some("Sub code")
        );
    }

    // READ-24 ruling: "a block digest is sha256: + lowercase hex of the SHA-256 of the block's
    // exact source bytes (its own line endings included, the separating blank lines excluded)."
    #[test]
    fn read_24_digest_is_sha256_of_the_exact_block_text() {
        let source = "para one\r\nstill one\r\n\r\n# two";
        let all = blocks(source);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].digest, block_digest("para one\r\nstill one\r\n"));
        assert_eq!(all[1].digest, block_digest("# two"));
        assert_eq!(
            block_digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        assert_eq!(summary("```\ncode\n\nmore\n"), vec![(0, "code", 1, 4)]);
    }

    #[test]
    fn empty_and_blank_sources_have_no_blocks() {
        assert!(blocks("").is_empty());
        assert!(blocks("\n\n  \n").is_empty());
    }

    /// LIFE-10: the change count is the number of top-level blocks added, removed or changed.
    #[test]
    fn life_10_changed_blocks_counts_blocks_added_removed_or_changed() {
        let built = "# Plan\n\nOne.\n\nTwo.\n\n- a\n- b\n";
        assert_eq!(changed_blocks(built, built), 0);
        // Blank lines and a trailing newline are no block.
        assert_eq!(
            changed_blocks(built, "# Plan\n\n\nOne.\n\nTwo.\n\n- a\n- b"),
            0
        );
        assert_eq!(
            changed_blocks(built, "# Plan\n\nOne!\n\nTwo.\n\n- a\n- b\n"),
            1
        );
        assert_eq!(
            changed_blocks(built, "# Plan\n\nOne.\n\nNew.\n\nTwo.\n\n- a\n- b\n"),
            1,
            "one added"
        );
        assert_eq!(
            changed_blocks(built, "# Plan\n\nTwo.\n\n- a\n- b\n"),
            1,
            "one removed"
        );
        assert_eq!(
            changed_blocks(built, "# Plan\n\nOne?\n\nTwo?\n\nThree.\n\n- a\n- b\n"),
            3,
            "two changed, one added"
        );
        // A change inside a list is a change of that one block.
        assert_eq!(
            changed_blocks(built, "# Plan\n\nOne.\n\nTwo.\n\n- a\n- c\n"),
            1
        );
        assert_eq!(changed_blocks("", built), 4);
        assert_eq!(changed_blocks(built, ""), 4);
    }
}
