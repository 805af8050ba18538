//! Block edits (`edit_plan`) and anchors (`anchor_plan`) as pure functions.
//!
//! Owns: applying a batch of block operations to a source, and checking an anchor that relates
//! a Decision (or one of its answers) to a block. Every block is addressed by its index *and*
//! its digest, both as the reader listed them; a digest that no longer matches means the
//! Planner read an older text, so the batch is refused `stale`. Only content a batch introduces
//! or changes is validated: an unchanged malformed block elsewhere (say, a Decision a person
//! left mid-edit) is carried through unrelated edits and moves byte for byte.
//! Does not own: locks (the room decides and passes `locked`), revisions in storage, or the
//! validation of fence languages other than `decision`.
//!
//! Wire shape (snake_case): `{"revision": 7, "ops": [{"op": "insert", "after": 3 | null,
//! "content": "…"}, {"op": "replace", "index": 2, "digest": "sha256:…", "content": "…"},
//! {"op": "delete", "index": 4, "digest": "sha256:…"}, {"op": "move", "index": 5, "digest":
//! "sha256:…", "after": 0 | null}]}`. Indices name blocks of the revision the batch was made
//! from; `after: null` means the start of the document.

use serde::{Deserialize, Serialize};

use crate::blocks::{blocks, Block, BlockKind};
use crate::decision::{decisions, fence_is_closed, parse_decision};
use crate::DocumentRef;

/// Most operations in one batch.
pub const OPS_MAX: usize = 100;
/// Most bytes of one operation's content.
pub const CONTENT_MAX_BYTES: usize = crate::SOURCE_MAX_BYTES;

/// A batch of block operations made from one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditBatch {
    /// The revision the batch was made from.
    pub revision: u64,
    pub ops: Vec<EditOp>,
}

/// One block operation. Indices and digests name blocks of the batch's revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum EditOp {
    /// New blocks after block `after` (`null`: at the start).
    Insert {
        #[serde(deserialize_with = "Option::deserialize")]
        after: Option<usize>,
        content: String,
    },
    /// Block `index` becomes `content` (one or more whole blocks).
    Replace {
        index: usize,
        digest: String,
        content: String,
    },
    Delete {
        index: usize,
        digest: String,
    },
    /// Block `index`, unchanged, moves after block `after` (`null`: to the start).
    Move {
        index: usize,
        digest: String,
        #[serde(deserialize_with = "Option::deserialize")]
        after: Option<usize>,
    },
}

impl EditOp {
    /// The block the operation changes, with the digest it expects.
    fn target(&self) -> Option<(usize, &str)> {
        match self {
            EditOp::Insert { .. } => None,
            EditOp::Replace { index, digest, .. }
            | EditOp::Delete { index, digest }
            | EditOp::Move { index, digest, .. } => Some((*index, digest)),
        }
    }

    fn after(&self) -> Option<usize> {
        match self {
            EditOp::Insert { after, .. } | EditOp::Move { after, .. } => *after,
            _ => None,
        }
    }
}

/// An `edit_plan` argument error: plain text, without `document` (CTX-11).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditArgError {
    #[error("edit_plan arguments are not valid: {0}")]
    Malformed(String),
    #[error("edit_plan needs at least one op")]
    NoOps,
    #[error("edit_plan takes at most {OPS_MAX} ops in one batch, not {0}")]
    TooManyOps(usize),
    #[error("op {op}: content is {bytes} bytes; one op holds at most {CONTENT_MAX_BYTES}")]
    ContentTooLarge { op: usize, bytes: usize },
}

/// Decodes and bounds `edit_plan` arguments.
pub fn parse_batch(arguments: &serde_json::Value) -> Result<EditBatch, EditArgError> {
    let batch: EditBatch = serde_json::from_value(arguments.clone())
        .map_err(|e| EditArgError::Malformed(e.to_string()))?;
    if batch.ops.is_empty() {
        return Err(EditArgError::NoOps);
    }
    if batch.ops.len() > OPS_MAX {
        return Err(EditArgError::TooManyOps(batch.ops.len()));
    }
    for (op, edit) in batch.ops.iter().enumerate() {
        if let EditOp::Insert { content, .. } | EditOp::Replace { content, .. } = edit {
            if content.len() > CONTENT_MAX_BYTES {
                let bytes = content.len();
                return Err(EditArgError::ContentTooLarge { op, bytes });
            }
        }
    }
    Ok(batch)
}

/// The document an edit is applied to, as the caller found it.
#[derive(Debug, Clone)]
pub struct EditTarget<'a> {
    pub document: DocumentRef,
    pub earlier_urls: &'a [String],
    pub revision: u64,
    pub source: &'a str,
    /// The room holds a lock that refuses this writer.
    pub locked: bool,
}

/// Every structured `edit_plan` result: the document it is about, and what happened (CTX-10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditResult {
    pub document: DocumentRef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_urls: Vec<String>,
    #[serde(flatten)]
    pub outcome: EditOutcome,
}

/// Applied, or refused with the spec's code as `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EditOutcome {
    Applied {
        /// The revision the batch was made from.
        base_revision: u64,
        /// The revision to record with the new source (`base_revision + 1`).
        revision: u64,
        source: String,
    },
    Locked {
        message: String,
    },
    Stale {
        current_revision: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        op: Option<usize>,
        message: String,
    },
    Invalid {
        #[serde(skip_serializing_if = "Option::is_none")]
        op: Option<usize>,
        message: String,
    },
    /// The result would pass the source limit ([`crate::SOURCE_MAX_BYTES`]).
    TooLarge {
        bytes: usize,
        limit: usize,
        message: String,
    },
}

/// The refusal of a new source past the limit, if it is.
fn check_size(new_source: &str) -> Result<(), Refusal> {
    match crate::source_too_large(new_source.len()) {
        Some(message) => Err(Refusal(EditOutcome::TooLarge {
            bytes: new_source.len(),
            limit: crate::SOURCE_MAX_BYTES,
            message,
        })),
        None => Ok(()),
    }
}

struct Refusal(EditOutcome);

fn invalid(op: Option<usize>, message: String) -> Refusal {
    Refusal(EditOutcome::Invalid { op, message })
}

/// Applies `batch` to `target`, or says why not. Pure: the caller stores the new source.
pub fn edit_plan(target: &EditTarget<'_>, batch: &EditBatch) -> EditResult {
    let outcome = match apply(target, batch).and_then(|source| check_size(&source).map(|()| source))
    {
        Ok(source) => EditOutcome::Applied {
            base_revision: target.revision,
            revision: target.revision + 1,
            source,
        },
        Err(Refusal(outcome)) => outcome,
    };
    EditResult {
        document: target.document.clone(),
        earlier_urls: target.earlier_urls.to_vec(),
        outcome,
    }
}

/// Where a piece of the new source came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Original block `i`, unchanged in place.
    Kept(usize),
    /// Written or moved by op `k`; `slot` is the original block it replaces in place.
    Op { op: usize, slot: Option<usize> },
}

struct Piece {
    text: String,
    origin: Origin,
}

impl Piece {
    fn slot(&self) -> Option<usize> {
        match self.origin {
            Origin::Kept(i) => Some(i),
            Origin::Op { slot, .. } => slot,
        }
    }

    fn op(&self) -> Option<usize> {
        match self.origin {
            Origin::Op { op, .. } => Some(op),
            Origin::Kept(_) => None,
        }
    }
}

/// A whole new source for the document (MCP `update_document`), made from `revision`: refused
/// `locked` or `stale` as a batch is, and `invalid` when a block it introduces or changes (one
/// whose digest is no block of the current source) has an unclosed fence, is not a valid
/// Decision, or takes a Decision id another block has. Blocks already there are carried as
/// they are, so a malformed block a person left mid-edit never blocks the write.
pub fn replace_source(target: &EditTarget<'_>, revision: u64, new_source: &str) -> EditResult {
    let outcome = match check_replacement(target, revision, new_source) {
        Ok(()) => EditOutcome::Applied {
            base_revision: target.revision,
            revision: target.revision + 1,
            source: new_source.to_string(),
        },
        Err(Refusal(outcome)) => outcome,
    };
    EditResult {
        document: target.document.clone(),
        earlier_urls: target.earlier_urls.to_vec(),
        outcome,
    }
}

fn check_replacement(
    target: &EditTarget<'_>,
    revision: u64,
    new_source: &str,
) -> Result<(), Refusal> {
    check_writable(target, revision, "the new source")?;
    check_size(new_source)?;
    let old: Vec<String> = blocks(target.source)
        .into_iter()
        .map(|b| b.digest)
        .collect();
    let all = blocks(new_source);
    let is_new = |block: &Block| !old.contains(&block.digest);
    for block in all.iter().filter(|b| is_new(b)) {
        if let Err(problem) = check_block(&new_source[block.bytes.clone()], block) {
            return Err(invalid(None, format!("the new source: {problem}")));
        }
    }
    let found = decisions(new_source, &all);
    for (n, (block, decision)) in found.iter().enumerate() {
        let first = found[..n].iter().find(|(_, d)| d.id == decision.id);
        if let Some((earlier, _)) = first {
            if is_new(&all[*block]) || is_new(&all[*earlier]) {
                return Err(invalid(
                    None,
                    format!(
                        "the new source: Decision id `{}` of block {block} is already used by block {earlier}",
                        decision.id
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A write made from `revision` may go ahead: the document is not locked and still at it.
fn check_writable(target: &EditTarget<'_>, revision: u64, what: &str) -> Result<(), Refusal> {
    if target.locked {
        return Err(Refusal(EditOutcome::Locked {
            message: "the document is locked; nothing was changed".to_string(),
        }));
    }
    if revision != target.revision {
        return Err(Refusal(EditOutcome::Stale {
            current_revision: target.revision,
            op: None,
            message: format!(
                "{what} was made from revision {revision} but the document is at revision {}; read it again and aim at its current blocks",
                target.revision
            ),
        }));
    }
    Ok(())
}

fn apply(target: &EditTarget<'_>, batch: &EditBatch) -> Result<String, Refusal> {
    check_writable(target, batch.revision, "the batch")?;
    let source = target.source;
    let all = blocks(source);
    check_targets(target.revision, &all, batch)?;
    let eol = if source
        .find('\n')
        .is_some_and(|at| source[..at].ends_with('\r'))
    {
        "\r\n"
    } else {
        "\n"
    };

    // Validate introduced content and normalise it to whole lines.
    let mut contents: Vec<Option<String>> = Vec::with_capacity(batch.ops.len());
    for (op, edit) in batch.ops.iter().enumerate() {
        contents.push(match edit {
            EditOp::Insert { content, .. } | EditOp::Replace { content, .. } => {
                Some(check_content(op, content)?)
            }
            _ => None,
        });
    }
    check_decision_ids(source, &all, batch, &contents)?;

    // Lay the pieces out: each original slot, then whatever goes after it, in op order.
    let mut removed_by: Vec<Option<usize>> = vec![None; all.len()];
    let mut replaced: Vec<Option<usize>> = vec![None; all.len()];
    for (op, edit) in batch.ops.iter().enumerate() {
        match edit {
            EditOp::Replace { index, .. } => replaced[*index] = Some(op),
            EditOp::Delete { index, .. } | EditOp::Move { index, .. } => {
                removed_by[*index] = Some(op)
            }
            EditOp::Insert { .. } => {}
        }
    }
    let placed_after = |slot: Option<usize>| -> Vec<Piece> {
        let mut out = Vec::new();
        for (op, edit) in batch.ops.iter().enumerate() {
            if !matches!(edit, EditOp::Insert { .. } | EditOp::Move { .. }) || edit.after() != slot
            {
                continue;
            }
            let text = match (edit, &contents[op]) {
                (EditOp::Insert { .. }, Some(content)) => format!("{content}{eol}"),
                (EditOp::Move { index, .. }, _) => {
                    with_line_end(&source[all[*index].bytes.clone()], eol)
                }
                _ => continue,
            };
            out.push(Piece {
                text,
                origin: Origin::Op { op, slot: None },
            });
        }
        out
    };
    let mut pieces = placed_after(None);
    for (i, block) in all.iter().enumerate() {
        let original = &source[block.bytes.clone()];
        if let Some(op) = replaced[i] {
            let content = contents[op].as_deref().unwrap_or_default();
            let ending = &original[original.trim_end_matches(['\r', '\n']).len()..];
            pieces.push(Piece {
                text: format!("{content}{ending}"),
                origin: Origin::Op { op, slot: Some(i) },
            });
        } else if removed_by[i].is_none() {
            pieces.push(Piece {
                text: original.to_string(),
                origin: Origin::Kept(i),
            });
        }
        pieces.extend(placed_after(Some(i)));
    }

    // A piece that something follows ends its last line, and the line end is the piece's own,
    // as every block's is: a last block typed with none gets one here.
    let followed = pieces.len().saturating_sub(1);
    for piece in &mut pieces[..followed] {
        if !piece.text.ends_with('\n') {
            piece.text.push_str(eol);
        }
    }

    // Join: original gaps between consecutive slots, one blank line anywhere else.
    let lead_end = all.first().map_or(source.len(), |b| b.bytes.start);
    let trail_start = all.last().map_or(source.len(), |b| b.bytes.end);
    let mut out = String::with_capacity(source.len() + 256);
    out.push_str(&source[..lead_end]);
    let mut ranges = Vec::with_capacity(pieces.len());
    let mut made: Vec<bool> = Vec::with_capacity(pieces.len());
    for (p, piece) in pieces.iter().enumerate() {
        if p > 0 {
            // The previous piece ended its line (above).
            let previous = &pieces[p - 1];
            match (previous.slot(), piece.slot()) {
                (Some(a), Some(b)) if b == a + 1 => {
                    out.push_str(&source[all[a].bytes.end..all[b].bytes.start]);
                    made.push(false);
                }
                _ => {
                    out.push_str(eol);
                    made.push(true);
                }
            }
        }
        let start = out.len();
        out.push_str(&piece.text);
        ranges.push(start..out.len());
    }
    out.push_str(&source[trail_start..]);

    check_layout(&out, &pieces, &ranges, &made, &removed_by)?;
    Ok(out)
}

fn with_line_end(text: &str, eol: &str) -> String {
    if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}{eol}")
    }
}

/// Indices in range, digests matching, each block changed by at most one op.
fn check_targets(revision: u64, all: &[Block], batch: &EditBatch) -> Result<(), Refusal> {
    let count = all.len();
    let outside = |op: usize, index: usize| {
        let range = match count {
            0 => "it has no blocks".to_string(),
            n => format!("it has {n} blocks, 0 to {}", n - 1),
        };
        invalid(
            Some(op),
            format!("op {op}: there is no block {index} in revision {revision} ({range})"),
        )
    };
    let mut changed_by: Vec<Option<usize>> = vec![None; count];
    for (op, edit) in batch.ops.iter().enumerate() {
        if let Some(after) = edit.after() {
            if after >= count {
                return Err(outside(op, after));
            }
        }
        let Some((index, digest)) = edit.target() else {
            continue;
        };
        let block = all.get(index).ok_or_else(|| outside(op, index))?;
        if block.digest != digest {
            return Err(Refusal(EditOutcome::Stale {
                current_revision: revision,
                op: Some(op),
                message: format!(
                    "op {op}: block {index} is now {} (lines {}-{}) with digest {}; it is not the block you read",
                    block.kind, block.first_line, block.last_line, block.digest
                ),
            }));
        }
        if let Some(earlier) = changed_by[index] {
            return Err(invalid(
                Some(op),
                format!(
                    "op {op}: block {index} is already changed by op {earlier}; one op per block"
                ),
            ));
        }
        changed_by[index] = Some(op);
        if let EditOp::Move {
            after: Some(after), ..
        } = edit
        {
            if *after == index {
                return Err(invalid(
                    Some(op),
                    format!("op {op}: block {index} cannot move after itself"),
                ));
            }
        }
    }
    Ok(())
}

/// Content must be whole blocks: not blank, no unclosed fence, valid Decision blocks.
fn check_content(op: usize, content: &str) -> Result<String, Refusal> {
    let mut body = content.trim_end();
    while let Some(at) = body.find('\n') {
        if !crate::lines::is_blank_text(&body[..at]) {
            break;
        }
        body = &body[at + 1..];
    }
    if crate::lines::is_blank_text(body) {
        return Err(invalid(
            Some(op),
            format!("op {op}: content is empty; use delete to remove a block"),
        ));
    }
    for block in blocks(body) {
        if let Err(problem) = check_block(&body[block.bytes.clone()], &block) {
            return Err(invalid(Some(op), format!("op {op}: {problem}")));
        }
    }
    Ok(body.to_string())
}

/// A block a write introduces: its code fence closed, and a Decision valid. Lines are counted
/// in the text the block came with.
fn check_block(text: &str, block: &Block) -> Result<(), String> {
    if matches!(block.kind, BlockKind::Code | BlockKind::Decision)
        && fence_is_closed(text) == Some(false)
    {
        return Err(format!(
            "the code fence opened on line {} of the content is not closed",
            block.first_line
        ));
    }
    // DIA-07: a `seecode` or `wireframe` fence it introduces or changes must be valid.
    if block.kind == BlockKind::Code {
        crate::diagram::check_fence(text, block.first_line)?;
    }
    if block.kind == BlockKind::Decision {
        if let Err(error) = parse_decision(text) {
            return Err(format!(
                "{error} (the Decision starts on line {} of the content)",
                block.first_line
            ));
        }
    }
    Ok(())
}

/// A Decision id introduced by a batch must be unique in the resulting document.
fn check_decision_ids(
    source: &str,
    all: &[Block],
    batch: &EditBatch,
    contents: &[Option<String>],
) -> Result<(), Refusal> {
    let mut gone = vec![false; all.len()];
    for edit in &batch.ops {
        if let EditOp::Replace { index, .. } | EditOp::Delete { index, .. } = edit {
            gone[*index] = true;
        }
    }
    let mut taken: Vec<(String, String)> = decisions(source, all)
        .into_iter()
        .filter(|(block, _)| !gone[*block])
        .map(|(block, d)| (d.id, format!("block {block}")))
        .collect();
    for (op, content) in contents.iter().enumerate() {
        let Some(content) = content else { continue };
        for (_, decision) in decisions(content, &blocks(content)) {
            if let Some((_, holder)) = taken.iter().find(|(id, _)| *id == decision.id) {
                return Err(invalid(
                    Some(op),
                    format!(
                        "op {op}: Decision id `{}` is already used by {holder}",
                        decision.id
                    ),
                ));
            }
            taken.push((decision.id, format!("op {op}")));
        }
    }
    Ok(())
}

/// Every piece that is new, or has a new neighbour, must stay exactly the blocks it was:
/// nothing may run into the blocks around it (a list joining a list, a paragraph swallowing a
/// line).
fn check_layout(
    out: &str,
    pieces: &[Piece],
    ranges: &[std::ops::Range<usize>],
    made: &[bool],
    removed_by: &[Option<usize>],
) -> Result<(), Refusal> {
    let result = blocks(out);
    for (p, piece) in pieces.iter().enumerate() {
        let new_before = p > 0 && made[p - 1];
        let new_after = p + 1 < pieces.len() && made[p];
        if piece.op().is_none() && !new_before && !new_after {
            continue;
        }
        let range = &ranges[p];
        let own: Vec<String> = blocks(&piece.text).into_iter().map(|b| b.digest).collect();
        let first = result.partition_point(|b| b.bytes.end <= range.start);
        let found: Vec<&Block> = result[first..]
            .iter()
            .take_while(|b| b.bytes.start < range.end)
            .collect();
        let tiles = found.first().is_some_and(|b| b.bytes.start == range.start)
            && found.last().is_some_and(|b| b.bytes.end == range.end)
            && found.iter().map(|b| &b.digest).eq(own.iter());
        if tiles {
            continue;
        }
        let blame = piece
            .op()
            .or_else(|| pieces.get(p + 1).and_then(Piece::op))
            .or_else(|| p.checked_sub(1).and_then(|q| pieces[q].op()))
            .or_else(|| {
                let low = p.checked_sub(1).and_then(|q| pieces[q].slot()).unwrap_or(0);
                let high = pieces
                    .get(p + 1)
                    .and_then(Piece::slot)
                    .unwrap_or(removed_by.len());
                removed_by.get(low..high)?.iter().flatten().next().copied()
            });
        let line = out[..range.start].matches('\n').count() + 1;
        let prefix = blame.map(|op| format!("op {op}: ")).unwrap_or_default();
        return Err(invalid(
            blame,
            format!(
                "{prefix}the result would not keep its blocks apart near line {line}: the text runs into the block beside it (two lists or paragraphs joining, or a line continuing a block); separate it or change its kind"
            ),
        ));
    }
    Ok(())
}

/// `anchor_plan` arguments: relate a Decision (or one of its answers) to a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnchorRequest {
    pub decision: String,
    /// 0-based answer of the Decision, if the anchor is about one answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<usize>,
    pub index: usize,
    pub digest: String,
}

/// A checked anchor, ready to store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anchor {
    pub decision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<usize>,
    pub index: usize,
    pub digest: String,
    pub kind: BlockKind,
    pub first_line: usize,
    pub last_line: usize,
}

/// Why an anchor cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnchorRefusal {
    #[error("there is no Decision `{0}` in the document")]
    UnknownDecision(String),
    #[error("Decision `{id}` has {answers} answers, so there is no answer {answer} (answers count from 0)")]
    NoSuchAnswer {
        id: String,
        answer: usize,
        answers: usize,
    },
    #[error("there is no block {index}: the document has {blocks} blocks")]
    NoSuchBlock { index: usize, blocks: usize },
    #[error("block {index} has changed since it was read (its digest is now {digest})")]
    Stale { index: usize, digest: String },
    #[error("block {index} is a Decision; anchor a Decision to the prose it is about")]
    DecisionBlock { index: usize },
}

impl AnchorRefusal {
    /// The refusal code: `stale` when the block changed, else `invalid`.
    pub fn code(&self) -> &'static str {
        match self {
            AnchorRefusal::Stale { .. } => "stale",
            _ => "invalid",
        }
    }
}

/// Checks an anchor against the current source.
pub fn anchor_plan(source: &str, request: &AnchorRequest) -> Result<Anchor, AnchorRefusal> {
    let all = blocks(source);
    let (_, decision) = decisions(source, &all)
        .into_iter()
        .find(|(_, d)| d.id == request.decision)
        .ok_or_else(|| AnchorRefusal::UnknownDecision(request.decision.clone()))?;
    if let Some(answer) = request.answer {
        if answer >= decision.answers.len() {
            return Err(AnchorRefusal::NoSuchAnswer {
                id: decision.id,
                answer,
                answers: decision.answers.len(),
            });
        }
    }
    let block = all.get(request.index).ok_or(AnchorRefusal::NoSuchBlock {
        index: request.index,
        blocks: all.len(),
    })?;
    if block.digest != request.digest {
        return Err(AnchorRefusal::Stale {
            index: block.index,
            digest: block.digest.clone(),
        });
    }
    if block.kind == BlockKind::Decision {
        return Err(AnchorRefusal::DecisionBlock { index: block.index });
    }
    Ok(Anchor {
        decision: decision.id,
        answer: request.answer,
        index: block.index,
        digest: block.digest.clone(),
        kind: block.kind,
        first_line: block.first_line,
        last_line: block.last_line,
    })
}
