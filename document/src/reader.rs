//! The reader: the paged Markdown text `read_plan`, `read_child` and MCP `read_document` return.
//!
//! Owns: turning one document (source, Decisions, accepted comments, brief) and the read
//! arguments (`offset`, `limit`, `column`) into one result of at most [`READ_BYTES`] UTF-8
//! bytes — header, outline, lists, block listing and the verbatim source slice all inside that
//! budget — and the structured JSON view of the whole document. Does not own: finding the
//! document or checking who may read it (the server's), nor the tool's argument decoding beyond
//! [`ReadArgs`].
//!
//! Invariants: no result is longer than [`READ_BYTES`]; the source sections of the results that
//! `next:` leads through, joined, are the source byte for byte; a piece never splits a code
//! point; every header value is one line of at most [`HEADER_VALUE_CHARS`] characters.

use serde::{Deserialize, Serialize};

use crate::blocks::{blocks, Block};
use crate::decision::{decision_summaries, DecisionSummary};
use crate::lines::SourceLines;
use crate::DocumentRef;
use sha2::{Digest, Sha256};

/// Most UTF-8 bytes one read result may carry, everything included.
pub const READ_BYTES: usize = 16_000;
/// Budget of the outline that comes with the first part of a large document.
pub const OUTLINE_BYTES: usize = 2_500;
/// Budget of the Decisions list.
pub const DECISIONS_BYTES: usize = 1_500;
/// Budget of the accepted-comments list.
pub const COMMENTS_BYTES: usize = 1_500;
/// Budget of the brief (MCP `read_document` only).
pub const BRIEF_BYTES: usize = 2_000;
/// Most characters of one header value.
pub const HEADER_VALUE_CHARS: usize = 300;
/// Most characters of one heading, Decision title or comment in a list.
const LIST_ITEM_CHARS: usize = 200;

/// Which tool the text is for: it decides the header, the `next:` call and the block listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadKind {
    /// `read_plan`: the room's document.
    Plan,
    /// `read_child`: a child document of the room's document.
    Child,
    /// MCP `read_document`: no block listing.
    McpDocument,
    /// `read_reference`: a document a Chat message referred to, read as MCP `read_document`
    /// reads (no block listing: it is evidence, not a document this turn edits).
    Reference,
}

impl ReadKind {
    /// Whether the text leaves the block listing out.
    fn without_blocks(self) -> bool {
        matches!(self, ReadKind::McpDocument | ReadKind::Reference)
    }
}

/// The child being read by `read_child`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildRef<'a> {
    pub id: &'a str,
    pub title: &'a str,
}

/// Everything the reader needs about one document; the caller looked it up.
#[derive(Debug, Clone)]
pub struct DocumentInput<'a> {
    /// The document's id (for `read_child`, the root document's id).
    pub id: &'a str,
    /// Canonical url of what is read (nested under the parent for a child).
    pub url: &'a str,
    /// Title, shown for MCP `read_document`.
    pub title: Option<&'a str>,
    pub revision: u64,
    /// Links the document had before a rename, which still open it.
    pub earlier_urls: &'a [String],
    /// Set for `read_child`.
    pub child: Option<ChildRef<'a>>,
    pub kind: ReadKind,
    pub source: &'a str,
    /// Accepted comments, one entry each, already worded by the caller.
    pub accepted_comments: &'a [String],
    /// The brief, for MCP `read_document`.
    pub brief: Option<&'a str>,
}

/// The read arguments: all optional; none means "the whole document or its first part".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// 1-based line to start at.
    pub offset: Option<usize>,
    /// Most lines to return.
    pub limit: Option<usize>,
    /// 1-based code point in line `offset` to start at.
    pub column: Option<usize>,
}

/// An argument the reader cannot serve; the text is what the tool returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is outside the document, which has {lines} lines (offset is a line from 1 to {lines})")]
    OffsetOutside { offset: usize, lines: usize },
    #[error("offset {offset} is outside the document, which is empty (0 lines)")]
    EmptyDocument { offset: usize },
    #[error("limit must be at least 1 line")]
    LimitZero,
    #[error("column needs offset: give the line the column is in")]
    ColumnWithoutOffset,
    #[error("column {column} is outside line {line}, which has {columns} characters counting its newline (column is 1 to {columns})")]
    ColumnOutside {
        line: usize,
        column: usize,
        columns: usize,
    },
}

/// Size of a document, as the header and the JSON view give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Size {
    /// Unicode code points.
    pub characters: usize,
    pub lines: usize,
    pub blocks: usize,
}

/// The structured view of the whole document, for callers that run the tool themselves.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentView<'a> {
    pub document: DocumentRef,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub earlier_urls: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child: Option<ChildRef<'a>>,
    pub revision: u64,
    pub size: Size,
    pub source: &'a str,
    pub blocks: Vec<Block>,
    pub decisions: Vec<DecisionSummary>,
    pub accepted_comments: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brief: Option<&'a str>,
}

/// The whole document as structured data, whatever slice a text read carries.
pub fn document_view<'a>(doc: &DocumentInput<'a>) -> DocumentView<'a> {
    let all = blocks(doc.source);
    DocumentView {
        document: DocumentRef {
            id: doc.id.to_string(),
            url: doc.url.to_string(),
        },
        earlier_urls: doc.earlier_urls,
        title: doc.title,
        child: doc.child.clone(),
        revision: doc.revision,
        size: Size {
            characters: doc.source.chars().count(),
            lines: SourceLines::new(doc.source).count(),
            blocks: all.len(),
        },
        source: doc.source,
        decisions: decision_summaries(doc.source, &all),
        blocks: all,
        accepted_comments: doc.accepted_comments,
        brief: doc.brief,
    }
}

/// One header value: control characters become spaces and it is cut to
/// [`HEADER_VALUE_CHARS`] characters (the last one `…` when cut).
pub fn header_value(value: &str) -> String {
    one_line(value, HEADER_VALUE_CHARS)
}

fn one_line(value: &str, max_chars: usize) -> String {
    let clean = value.chars().map(|c| if c.is_control() { ' ' } else { c });
    if value.chars().count() <= max_chars {
        return clean.collect();
    }
    let mut cut: String = clean.take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

/// The slice of the source one result carries, as byte offsets on code point boundaries.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: usize,
    end: usize,
    /// The piece stopped before the asked `limit` because of the byte budget.
    capped: bool,
}

/// What is fixed for a read before its slice is chosen.
struct Read<'d, 'a> {
    doc: &'d DocumentInput<'a>,
    lines: SourceLines<'d>,
    blocks: &'d [Block],
    decisions: &'d [DecisionSummary],
    characters: usize,
    /// `(offset, limit)` as asked, when a limit was given.
    limit: Option<(usize, usize)>,
    /// Sections between the header and the block listing (intro, outline, lists).
    sections: String,
    whole: bool,
}

/// What a read needs of a source that depends on the source alone — its line table, its
/// top-level blocks with their digests, its Decisions and its size — worked out once and kept
/// for as long as the source does not change, so that the reads of one revision (a whole
/// document paged through, say) parse it once.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The source's length in bytes, and its SHA-256 digest: an analysis is used only for the
    /// very source it was made from.
    source_len: usize,
    digest: [u8; 32],
    starts: Vec<usize>,
    blocks: Vec<Block>,
    characters: usize,
    decisions: Vec<DecisionSummary>,
}

impl Analysis {
    /// Parses `source` (lines, blocks and their digests, Decisions).
    pub fn of(source: &str) -> Self {
        let blocks = blocks(source);
        Analysis {
            source_len: source.len(),
            digest: Sha256::digest(source.as_bytes()).into(),
            starts: SourceLines::new(source).into_table(),
            characters: source.chars().count(),
            decisions: decision_summaries(source, &blocks),
            blocks,
        }
    }

    /// Whether this analysis was made from `source`.
    pub fn is_of(&self, source: &str) -> bool {
        self.source_len == source.len()
            && self.digest == <[u8; 32]>::from(Sha256::digest(source.as_bytes()))
    }
}

/// Renders the text result of a read. See the module documentation for the invariants.
pub fn read_text(doc: &DocumentInput<'_>, args: &ReadArgs) -> Result<String, ReadError> {
    read_text_with(doc, &Analysis::of(doc.source), args)
}

/// [`read_text`] with the source's [`Analysis`] made earlier (kept by the caller per revision).
/// The caller promises it is `doc.source`'s: checked in debug builds only, as checking costs a
/// digest of the whole source, which is what keeping it saves.
pub fn read_text_with(
    doc: &DocumentInput<'_>,
    analysis: &Analysis,
    args: &ReadArgs,
) -> Result<String, ReadError> {
    debug_assert!(analysis.is_of(doc.source), "an analysis of another source");
    let lines = SourceLines::with_table(doc.source, &analysis.starts);
    let start = start_of(&lines, args)?;
    let mut read = Read {
        doc,
        characters: analysis.characters,
        lines,
        blocks: &analysis.blocks,
        decisions: &analysis.decisions,
        limit: args.limit.map(|limit| (args.offset.unwrap_or(1), limit)),
        sections: String::new(),
        whole: false,
    };
    let argument_less = *args == ReadArgs::default();
    // A source longer than the budget can never come back whole: skip rendering it.
    if argument_less && doc.source.len() > READ_BYTES {
        read.sections = format!("{}{}", read.intro(), read.lists());
    } else if argument_less {
        read.sections = read.lists();
        read.whole = true;
        let whole = Piece {
            start: 0,
            end: doc.source.len(),
            capped: false,
        };
        let text = read.render(whole);
        if text.len() <= READ_BYTES {
            return Ok(text);
        }
        read.whole = false;
        read.sections = format!("{}{}", read.intro(), read.lists());
    }
    Ok(read.fit(start))
}

/// The byte offset a read starts at, after checking the arguments.
fn start_of(lines: &SourceLines<'_>, args: &ReadArgs) -> Result<usize, ReadError> {
    if args.limit == Some(0) {
        return Err(ReadError::LimitZero);
    }
    let offset = match (args.offset, args.column) {
        (None, Some(_)) => return Err(ReadError::ColumnWithoutOffset),
        (None, None) => return Ok(0),
        (Some(offset), _) => offset,
    };
    if lines.count() == 0 {
        return Err(ReadError::EmptyDocument { offset });
    }
    let range = lines.byte_range(offset).ok_or(ReadError::OffsetOutside {
        offset,
        lines: lines.count(),
    })?;
    match args.column {
        None => Ok(range.start),
        Some(column) => lines
            .byte_of_column(offset, column)
            .ok_or(ReadError::ColumnOutside {
                line: offset,
                column,
                columns: lines.columns(offset),
            }),
    }
}

impl Read<'_, '_> {
    fn line_count(&self) -> usize {
        self.lines.count()
    }

    /// Chooses and renders the largest piece from `start` that fits in [`READ_BYTES`].
    fn fit(&self, start: usize) -> String {
        // First assume the header needs no `limit:` or `ends mid-line:` line; if the piece
        // then needs one and no longer fits, plan again with room for every header line.
        let mut reserve = self.overhead(start, false);
        let mut text = String::new();
        for _ in 0..8 {
            let budget = READ_BYTES.saturating_sub(reserve);
            let piece = self.choose(start, budget);
            text = self.render(piece);
            if text.len() <= READ_BYTES {
                return text;
            }
            let pessimistic = self.overhead(start, true);
            reserve = if reserve < pessimistic {
                pessimistic
            } else {
                reserve + (text.len() - READ_BYTES)
            };
        }
        debug_assert!(text.len() <= READ_BYTES, "reader exceeded its budget");
        text
    }

    /// Bytes of everything but the slice and the block rows, for a piece from `start`.
    fn overhead(&self, start: usize, every_line: bool) -> usize {
        let n = self.line_count();
        let big = self.doc.source.len().max(n) + 1;
        let header = self.header(
            start,
            self.doc.source.len(),
            every_line,
            every_line,
            Some((big, Some(big), self.limit.map(|(_, l)| l.max(n)))),
        );
        header.len()
            + 1
            + self.sections.len()
            + self.blocks_title(n, n).len()
            + 1
            + self.source_title(n, n).len()
    }

    /// Greedy: whole lines while they fit, then part of a line too long for any result.
    fn choose(&self, start: usize, budget: usize) -> Piece {
        let source = self.doc.source;
        let n = self.line_count();
        let asked = self.limit.map(|(_, limit)| limit);
        let mut used = 0usize;
        let mut position = start;
        let mut line = self.lines.line_of_byte(start);
        let mut taken = 0usize;
        let mut capped = false;
        let plain_budget =
            READ_BYTES.saturating_sub(self.overhead(start, true) - self.sections.len());
        while position < source.len() && line <= n {
            if asked.is_some_and(|limit| taken >= limit) {
                break;
            }
            let Some(range) = self.lines.byte_range(line) else {
                break;
            };
            let rows = self.rows_cost(line);
            let cost = range.end - position + rows;
            if used + cost <= budget {
                used += cost;
                position = range.end;
                line += 1;
                taken += 1;
                continue;
            }
            capped = asked.is_some();
            let too_long_alone = range.len() + rows > plain_budget;
            if taken == 0 || too_long_alone {
                let room = budget.saturating_sub(used + rows);
                let end = cut_at(source, position, range.end, room);
                if end > position {
                    position = end;
                } else if taken == 0 {
                    // Always move forward: one code point, whatever the budget says.
                    position = cut_at(source, position, range.end, 4).max(position + 1);
                }
            }
            break;
        }
        Piece {
            start,
            end: position,
            capped: capped && position < source.len(),
        }
    }

    /// Bytes the block listing spends on the blocks starting on `line`.
    fn rows_cost(&self, line: usize) -> usize {
        if self.doc.kind.without_blocks() {
            return 0;
        }
        self.blocks_on(line, line).map(|b| row(b).len()).sum()
    }

    fn blocks_on(&self, first: usize, last: usize) -> impl Iterator<Item = &Block> {
        let from = self.blocks.partition_point(|b| b.first_line < first);
        self.blocks[from..]
            .iter()
            .take_while(move |b| b.first_line <= last)
    }

    fn render(&self, piece: Piece) -> String {
        let n = self.line_count();
        let first = self.lines.line_of_byte(piece.start);
        let last = if piece.end > piece.start {
            self.lines.line_of_byte(piece.end - 1)
        } else {
            first
        };
        let mut text = self.header(piece.start, piece.end, piece.capped, false, None);
        text.push('\n');
        text.push_str(&self.sections);
        if !self.doc.kind.without_blocks() {
            text.push_str(&self.blocks_title(first, last));
            let mut any = false;
            for block in self.blocks_on(first, last) {
                text.push_str(&row(block));
                any = true;
            }
            if !any {
                text.push_str("(none)\n");
            }
            text.push('\n');
        }
        if n == 0 {
            text.push_str("--- source lines 0 of 0 (empty) ---\n");
        } else {
            text.push_str(&self.source_title(first, last));
        }
        text.push_str(&self.doc.source[piece.start..piece.end]);
        text
    }

    /// The header. `bound` replaces computed numbers by large ones when estimating its size.
    fn header(
        &self,
        start: usize,
        end: usize,
        capped: bool,
        ends_mid_line: bool,
        bound: Option<(usize, Option<usize>, Option<usize>)>,
    ) -> String {
        let doc = self.doc;
        let n = self.line_count();
        let mut out = format!("document: {}\n", header_value(doc.id));
        if let Some(child) = &doc.child {
            out.push_str(&format!("child: {}\n", header_value(child.id)));
            out.push_str(&format!("title: {}\n", header_value(child.title)));
        } else if let Some(title) = doc.title {
            out.push_str(&format!("title: {}\n", header_value(title)));
        }
        out.push_str(&format!("url: {}\n", header_value(doc.url)));
        if !doc.earlier_urls.is_empty() {
            let urls = doc.earlier_urls.join(", ");
            out.push_str(&format!("earlier urls: {}\n", header_value(&urls)));
        }
        out.push_str(&format!("revision: {}\n", doc.revision));
        out.push_str(&format!("size: {} characters, ", self.characters));
        if doc.kind.without_blocks() {
            out.push_str(&format!("{n} lines\n"));
        } else {
            out.push_str(&format!("{n} lines, {} blocks\n", self.blocks.len()));
        }
        if self.whole {
            out.push_str(&format!("lines: all {n}\n"));
            return out;
        }
        let first = self.lines.line_of_byte(start);
        let last = if end > start {
            self.lines.line_of_byte(end - 1)
        } else {
            first
        };
        let (first, last, big) = match bound {
            Some((big, _, _)) => (big, big, Some(big)),
            None => (first, last, None),
        };
        out.push_str(&format!("lines: {first}-{last} of {n}\n"));
        if let (true, Some((offset, limit))) = (capped, self.limit) {
            let limit = bound.and_then(|b| b.2).unwrap_or(limit);
            out.push_str(&format!(
                "limit: asked for {} from line {}, but one result holds at most {READ_BYTES} bytes, so this one stops at line {last}\n",
                plural(limit, "line", "lines"),
                big.unwrap_or(offset),
            ));
        }
        let start_column = self.lines.column_of_byte(start);
        if big.is_some() || (start < self.doc.source.len() && start_column > 1) {
            let line = big.unwrap_or(first);
            let columns = big.unwrap_or_else(|| self.lines.columns(first));
            let column = big.unwrap_or(start_column);
            out.push_str(&format!(
                "starts mid-line: line {line} from character {column} of {columns}\n"
            ));
        }
        let end_column = (end < self.doc.source.len()).then(|| self.lines.column_of_byte(end));
        let ends_mid = ends_mid_line || end_column.is_some_and(|c| c > 1);
        if ends_mid {
            let columns = big.unwrap_or_else(|| self.lines.columns(last));
            let after = big.unwrap_or_else(|| end_column.unwrap_or(1) - 1);
            out.push_str(&format!(
                "ends mid-line: line {last} after character {after} of {columns}\n"
            ));
        }
        if big.is_some() || end < self.doc.source.len() {
            out.push_str(&format!("next: {}\n", self.next_call(end, capped, big)));
        }
        out
    }

    /// The exact call that continues after byte `end`.
    fn next_call(&self, end: usize, capped: bool, big: Option<usize>) -> String {
        let line = big.unwrap_or_else(|| self.lines.line_of_byte(end));
        let column = big.unwrap_or_else(|| self.lines.column_of_byte(end));
        let mut args = String::new();
        match self.doc.kind {
            ReadKind::Plan => {}
            ReadKind::Child => {
                let id = self.doc.child.as_ref().map_or(self.doc.id, |c| c.id);
                args.push_str(&format!("\"child\":{},", json_string(id)));
            }
            ReadKind::McpDocument => {
                args.push_str(&format!("\"id\":{},", json_string(self.doc.id)));
            }
            ReadKind::Reference => {
                args.push_str(&format!("\"reference\":{},", json_string(self.doc.id)));
            }
        }
        args.push_str(&format!("\"offset\":{line}"));
        if column > 1 {
            args.push_str(&format!(",\"column\":{column}"));
        }
        if let Some((offset, limit)) = self.limit {
            // Within the asked range, the rest of it; past it, pages of the same size.
            let asked_last = offset.saturating_add(limit - 1).min(self.line_count());
            let rest = if capped && line <= asked_last {
                asked_last - line + 1
            } else {
                limit
            };
            args.push_str(&format!(",\"limit\":{}", big.unwrap_or(rest)));
        }
        let tool = match self.doc.kind {
            ReadKind::Plan => "read_plan",
            ReadKind::Child => "read_child",
            ReadKind::McpDocument => "read_document",
            ReadKind::Reference => "read_reference",
        };
        format!("{tool} {{{args}}}")
    }

    fn blocks_title(&self, first: usize, last: usize) -> String {
        if self.doc.kind.without_blocks() {
            return String::new();
        }
        if self.line_count() == 0 {
            return "Blocks (index type lines digest):\n".to_string();
        }
        format!("Blocks starting on lines {first}-{last} (index type lines digest):\n")
    }

    fn source_title(&self, first: usize, last: usize) -> String {
        format!(
            "--- source lines {first}-{last} of {} ---\n",
            self.line_count()
        )
    }

    /// The sentence a first part of a large document opens with.
    fn intro(&self) -> String {
        format!(
            "This document is larger than one result holds ({READ_BYTES} bytes), so this is its outline and first part. \
             Follow next: to read on, or ask for any lines with offset and limit.\n\n{}",
            self.outline()
        )
    }

    /// Headings, shallow ones first, in at most [`OUTLINE_BYTES`], shown in document order.
    fn outline(&self) -> String {
        let title = "Outline (line, heading):\n";
        let headings: Vec<(usize, u8, String)> = self
            .blocks
            .iter()
            .filter_map(|b| {
                let h = b.heading.as_ref()?;
                let text = one_line(&h.text, LIST_ITEM_CHARS);
                let marks = "#".repeat(usize::from(h.level));
                Some((
                    b.first_line,
                    h.level,
                    format!("L{} {marks} {text}\n", b.first_line),
                ))
            })
            .collect();
        if headings.is_empty() {
            return format!("{title}(no headings)\n\n");
        }
        let mut order: Vec<usize> = (0..headings.len()).collect();
        order.sort_by_key(|&i| (headings[i].1, headings[i].0));
        let reserve = omitted_line(usize::MAX, "headings").len();
        let mut room = OUTLINE_BYTES - title.len() - reserve - 1;
        let mut chosen = vec![false; headings.len()];
        for i in order {
            if headings[i].2.len() <= room {
                room -= headings[i].2.len();
                chosen[i] = true;
            }
        }
        let mut out = title.to_string();
        for (i, heading) in headings.iter().enumerate() {
            if chosen[i] {
                out.push_str(&heading.2);
            }
        }
        let left_out = chosen.iter().filter(|c| !**c).count();
        if left_out > 0 {
            out.push_str(&omitted_line(left_out, "headings"));
        }
        out.push('\n');
        out
    }

    /// The Decisions, accepted comments and (for MCP) brief sections.
    fn lists(&self) -> String {
        let mut out = String::new();
        let rows: Vec<String> = self
            .decisions
            .iter()
            .map(|d| {
                format!(
                    "- {}: {}: {}\n",
                    one_line(&d.id, LIST_ITEM_CHARS),
                    d.state.name(),
                    one_line(&d.title, LIST_ITEM_CHARS)
                )
            })
            .collect();
        out.push_str(&list(
            "Decisions (their text, options and answers are in the source):\n",
            &rows,
            DECISIONS_BYTES,
            "Decisions",
        ));
        let rows: Vec<String> = self
            .doc
            .accepted_comments
            .iter()
            .map(|c| format!("- {}\n", one_line(c, HEADER_VALUE_CHARS)))
            .collect();
        out.push_str(&list(
            "Accepted comments:\n",
            &rows,
            COMMENTS_BYTES,
            "comments",
        ));
        if let (ReadKind::McpDocument, Some(brief)) = (self.doc.kind, self.doc.brief) {
            out.push_str(&brief_section(brief));
        }
        out
    }
}

fn row(block: &Block) -> String {
    format!(
        "{} {} L{}-{} {}\n",
        block.index, block.kind, block.first_line, block.last_line, block.digest
    )
}

fn omitted_line(count: usize, what: &str) -> String {
    if count == usize::MAX {
        return format!("- … {} more {what} left out\n", usize::MAX);
    }
    format!("- … {count} more {what} left out\n")
}

/// A titled list trimmed to `budget` bytes, its last line counting what was left out.
fn list(title: &str, rows: &[String], budget: usize, what: &str) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = title.to_string();
    let reserve = omitted_line(usize::MAX, what).len() + 1;
    let mut shown = 0;
    for row in rows {
        if out.len() + row.len() + reserve > budget {
            break;
        }
        out.push_str(row);
        shown += 1;
    }
    if shown < rows.len() {
        let tail = if what == "Decisions" {
            format!(
                "- … {} more Decisions left out (all are in the source)\n",
                rows.len() - shown
            )
        } else {
            omitted_line(rows.len() - shown, what)
        };
        out.push_str(&tail);
    }
    out.push('\n');
    out
}

fn brief_section(brief: &str) -> String {
    let title = "Brief:\n";
    let tail = "(… the brief goes on; the whole brief is in structuredContent.brief)\n";
    let mut out = title.to_string();
    if title.len() + brief.len() + 2 <= BRIEF_BYTES {
        out.push_str(brief);
    } else {
        let room = BRIEF_BYTES - title.len() - tail.len() - 2;
        let end = cut_at(brief, 0, brief.len(), room);
        out.push_str(&brief[..end]);
        out.push('\n');
        out.push_str(tail);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The furthest code point boundary at most `room` bytes after `from`, not past `to`.
fn cut_at(text: &str, from: usize, to: usize, room: usize) -> usize {
    let mut end = from.saturating_add(room).min(to);
    while end > from && !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn json_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("\"{}\"", value.escape_default()))
}
