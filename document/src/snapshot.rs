//! The `current_plan` snapshot that `ask` and `open_decisions` results may carry: the room's
//! document as `read_plan`'s structured view sees it, held to a byte budget.
//!
//! Owns: which parts of the view go in and, past [`SNAPSHOT_BYTES`], which are left out and how
//! that is said (`source_omitted`, `questions_omitted`, `comments_omitted`). Does not own:
//! finding the document, the owner check or the time budget (the server's).
//!
//! Invariants: the snapshot as JSON is never longer than the budget it is given; it always
//! names the document and its revision, or is not given at all; a question or comment is either
//! whole or counted as omitted.

use serde::Serialize;
use serde_json::{json, Value};

use crate::blocks::{blocks, Block};
use crate::decision::{decisions, Decision};
use crate::reader::READ_BYTES;
use crate::DocumentRef;

/// Most bytes of the snapshot as JSON: half of one read (CTX-16).
pub const SNAPSHOT_BYTES: usize = READ_BYTES / 2;

/// The tool that reads what a shortened snapshot leaves out.
const READ_CALL: &str = "read_plan";

/// The room's document as the snapshot sees it.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub document: DocumentRef,
    pub revision: u64,
    pub source: &'a str,
    /// Comments, oldest first, already worded by the caller.
    pub comments: &'a [String],
}

/// The whole view, when it fits.
#[derive(Serialize)]
struct Whole<'a> {
    document: &'a DocumentRef,
    revision: u64,
    source: &'a str,
    blocks: &'a [Block],
    questions: &'a [&'a Decision],
    comments: &'a [String],
}

/// The snapshot within `budget` bytes of JSON (at most [`SNAPSHOT_BYTES`]), or `None` when not
/// even the document and revision fit.
///
/// Questions are the document's valid Decisions. Past the budget, source and blocks give way to
/// `source_omitted`, and the newest questions and comments that fit are kept: a Decision later
/// in the document counts as newer (cards are placed below what they are about, so a document
/// reads from older to newer questions), and comments are given oldest first.
pub fn current_plan(input: &PlanInput<'_>, budget: usize) -> Option<Value> {
    let budget = budget.min(SNAPSHOT_BYTES);
    let all = blocks(input.source);
    let found = decisions(input.source, &all);
    let questions: Vec<&Decision> = found.iter().map(|(_, d)| d).collect();
    let whole = serde_json::to_value(Whole {
        document: &input.document,
        revision: input.revision,
        source: input.source,
        blocks: &all,
        questions: &questions,
        comments: input.comments,
    })
    .ok()?;
    if json_len(&whole) <= budget {
        return Some(whole);
    }
    let mut kept_questions: Vec<&Decision> = Vec::new();
    let mut kept_comments: Vec<&String> = Vec::new();
    let shortened = |qs: &[&Decision], cs: &[&String]| {
        // Kept in their own order: the document's for questions, oldest first for comments.
        let qs: Vec<&&Decision> = qs.iter().rev().collect();
        let cs: Vec<&&String> = cs.iter().rev().collect();
        json!({
            "document": input.document,
            "revision": input.revision,
            "source_omitted": {
                "bytes": input.source.len(),
                "blocks": all.len(),
                "read": READ_CALL,
            },
            "questions": qs,
            "questions_omitted": questions.len() - qs.len(),
            "comments": cs,
            "comments_omitted": input.comments.len() - cs.len(),
        })
    };
    if json_len(&shortened(&kept_questions, &kept_comments)) > budget {
        return None;
    }
    // Newest first, until the next one does not fit: what is kept is always the newest run.
    for question in questions.iter().rev() {
        kept_questions.push(question);
        if json_len(&shortened(&kept_questions, &kept_comments)) > budget {
            kept_questions.pop();
            break;
        }
    }
    for comment in input.comments.iter().rev() {
        kept_comments.push(comment);
        if json_len(&shortened(&kept_questions, &kept_comments)) > budget {
            kept_comments.pop();
            break;
        }
    }
    Some(shortened(&kept_questions, &kept_comments))
}

/// Bytes of `value` as compact JSON.
pub fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference() -> DocumentRef {
        DocumentRef {
            id: "3f1c".to_owned(),
            url: "http://localhost:8787/d/field-notes".to_owned(),
        }
    }

    fn decision(id: &str, question: &str) -> String {
        format!("```decision\nid: {id}\nstate: open\nquestion: {question}\noption: Yes\noption: No\n```\n")
    }

    #[test]
    fn ctx_12_a_small_document_comes_whole_with_its_blocks_and_questions() {
        let source = format!(
            "# Export\n\nShip it daily.\n\n{}",
            decision("q-1", "Daily?")
        );
        let input = PlanInput {
            document: reference(),
            revision: 7,
            source: &source,
            comments: &["@mona: why daily?".to_owned()],
        };
        let plan = current_plan(&input, SNAPSHOT_BYTES).expect("it fits");
        assert_eq!(plan["revision"], 7);
        assert_eq!(plan["source"], source.as_str());
        assert_eq!(plan["blocks"].as_array().map(Vec::len), Some(3));
        assert_eq!(plan["questions"][0]["id"], "q-1");
        assert_eq!(plan["questions"][0]["question"], "Daily?");
        assert_eq!(plan["comments"][0], "@mona: why daily?");
        assert!(plan.get("source_omitted").is_none());
    }

    #[test]
    fn ctx_16_past_8000_bytes_source_and_blocks_give_way_and_the_newest_questions_stay() {
        let mut source = "# Export\n\n".to_owned();
        source.push_str(&"A long paragraph about exports. ".repeat(200));
        source.push_str("\n\n");
        for n in 1..=60 {
            source.push_str(&decision(
                &format!("q-{n}"),
                &format!("Question number {n}, worded at some length so that it takes room?"),
            ));
            source.push('\n');
        }
        let comments: Vec<String> = (1..=30).map(|n| format!("@lisa: comment {n}")).collect();
        let input = PlanInput {
            document: reference(),
            revision: 9,
            source: &source,
            comments: &comments,
        };
        let plan = current_plan(&input, SNAPSHOT_BYTES).expect("document and revision fit");
        assert!(json_len(&plan) <= SNAPSHOT_BYTES);
        assert_eq!(plan["revision"], 9);
        assert!(plan.get("source").is_none() && plan.get("blocks").is_none());
        assert_eq!(plan["source_omitted"]["bytes"], source.len());
        assert_eq!(plan["source_omitted"]["read"], "read_plan");
        let kept = plan["questions"].as_array().expect("questions").len();
        assert!(kept > 0 && kept < 60, "kept {kept}");
        assert_eq!(plan["questions_omitted"], 60 - kept);
        // The newest (last in the document) are the ones kept, in document order.
        assert_eq!(plan["questions"][kept - 1]["id"], "q-60");
        assert_eq!(plan["questions"][0]["id"], format!("q-{}", 60 - kept + 1));
        let comments_kept = plan["comments"].as_array().expect("comments").len();
        assert_eq!(plan["comments_omitted"], 30 - comments_kept);
    }

    #[test]
    fn ctx_17_no_room_for_even_the_revision_means_no_snapshot() {
        let input = PlanInput {
            document: reference(),
            revision: 1,
            source: "# A\n",
            comments: &[],
        };
        assert_eq!(current_plan(&input, 40), None);
    }

    proptest! {
        #[test]
        fn ctx_16_the_snapshot_never_passes_its_budget(
            paragraphs in proptest::collection::vec("[a-z ]{0,400}", 0..40),
            questions in 0usize..40,
            comments in proptest::collection::vec("[a-z ]{0,300}", 0..20),
            budget in 0usize..9000,
        ) {
            let mut source = String::new();
            for p in &paragraphs {
                source.push_str(p);
                source.push_str("\n\n");
            }
            for n in 0..questions {
                source.push_str(&decision(&format!("q-{n}"), "Which way?"));
                source.push('\n');
            }
            let input = PlanInput { document: reference(), revision: 3, source: &source, comments: &comments };
            if let Some(plan) = current_plan(&input, budget) {
                prop_assert!(json_len(&plan) <= budget.min(SNAPSHOT_BYTES));
                prop_assert_eq!(&plan["revision"], 3);
            }
        }
    }
}
