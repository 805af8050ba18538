//! `edit_plan` and `anchor_plan` as pure functions.

use chopin_document::blocks::blocks;
use chopin_document::edit::{
    anchor_plan, edit_plan, parse_batch, replace_source, AnchorRefusal, AnchorRequest,
    EditArgError, EditBatch, EditOp, EditOutcome, EditResult, EditTarget,
};
use chopin_document::DocumentRef;
use proptest::prelude::*;

const SOURCE: &str = "# Plan\n\nFirst paragraph.\n\n\n- one\n- two\n\nLast paragraph.";

fn target<'a>(source: &'a str, earlier: &'a [String]) -> EditTarget<'a> {
    EditTarget {
        document: DocumentRef {
            id: "doc_1".into(),
            url: "/documents/octo/harbour/plan".into(),
        },
        earlier_urls: earlier,
        revision: 4,
        source,
        locked: false,
    }
}

fn digest(source: &str, index: usize) -> String {
    blocks(source)[index].digest.clone()
}

fn run(source: &str, ops: Vec<EditOp>) -> EditResult {
    edit_plan(&target(source, &[]), &EditBatch { revision: 4, ops })
}

fn applied(result: EditResult) -> String {
    match result.outcome {
        EditOutcome::Applied {
            source, revision, ..
        } => {
            assert_eq!(revision, 5);
            source
        }
        other => panic!("expected applied, got {other:?}"),
    }
}

fn refusal(result: EditResult) -> (String, Option<usize>, String) {
    match result.outcome {
        EditOutcome::Invalid { op, message } => ("invalid".into(), op, message),
        EditOutcome::Stale { op, message, .. } => ("stale".into(), op, message),
        EditOutcome::Locked { message } => ("locked".into(), None, message),
        EditOutcome::TooLarge { message, .. } => ("too_large".into(), None, message),
        EditOutcome::Applied { .. } => panic!("expected a refusal"),
    }
}

#[test]
fn replace_keeps_everything_else_byte_for_byte() {
    let result = run(
        SOURCE,
        vec![EditOp::Replace {
            index: 1,
            digest: digest(SOURCE, 1),
            content: "Better paragraph.\n\n".into(),
        }],
    );
    assert_eq!(
        applied(result),
        "# Plan\n\nBetter paragraph.\n\n\n- one\n- two\n\nLast paragraph."
    );
}

#[test]
fn insert_delete_and_move() {
    let ops = vec![
        EditOp::Insert {
            after: None,
            content: "Intro.".into(),
        },
        EditOp::Delete {
            index: 1,
            digest: digest(SOURCE, 1),
        },
        EditOp::Move {
            index: 3,
            digest: digest(SOURCE, 3),
            after: Some(0),
        },
        EditOp::Insert {
            after: Some(3),
            content: "## After".into(),
        },
    ];
    assert_eq!(
        applied(run(SOURCE, ops)),
        "Intro.\n\n# Plan\n\nLast paragraph.\n\n- one\n- two\n\n## After\n"
    );
}

#[test]
fn crlf_documents_get_crlf_separators() {
    let source = "# A\r\n\r\nB\r\n";
    let ops = vec![EditOp::Insert {
        after: Some(0),
        content: "New".into(),
    }];
    assert_eq!(applied(run(source, ops)), "# A\r\n\r\nNew\r\n\r\nB\r\n");
}

// CTX-10: "Every structured edit_plan result (success, or a locked, stale or invalid refusal)
// carries document: { id, url }, plus earlier_urls after a rename."
#[test]
fn ctx_10_every_result_names_the_document() {
    let earlier = vec!["/documents/octo/harbour/old-plan".to_string()];
    let ops = vec![EditOp::Delete {
        index: 0,
        digest: digest(SOURCE, 0),
    }];
    let mut t = target(SOURCE, &earlier);
    let cases = [
        (4, false, "applied"),
        (3, false, "stale"),
        (4, true, "locked"),
    ];
    for (revision, locked, status) in cases {
        t.locked = locked;
        let batch = EditBatch {
            revision,
            ops: ops.clone(),
        };
        let json = serde_json::to_value(edit_plan(&t, &batch)).expect("json");
        assert_eq!(json["status"], status);
        assert_eq!(json["document"]["id"], "doc_1");
        assert_eq!(json["document"]["url"], "/documents/octo/harbour/plan");
        assert_eq!(json["earlier_urls"][0], "/documents/octo/harbour/old-plan");
    }
    t.locked = false;
    let bad = EditBatch {
        revision: 4,
        ops: vec![EditOp::Insert {
            after: None,
            content: " \n".into(),
        }],
    };
    let json = serde_json::to_value(edit_plan(&t, &bad)).expect("json");
    assert_eq!(json["status"], "invalid");
    assert_eq!(json["document"]["id"], "doc_1");
    let unrenamed = serde_json::to_value(run(SOURCE, ops)).expect("json");
    assert!(unrenamed.get("earlier_urls").is_none());
}

// CTX-11: "edit_plan argument and storage errors return plain error text without document."
#[test]
fn ctx_11_argument_errors_are_plain_text() {
    let cases = [
        (
            serde_json::json!({"ops": []}),
            "edit_plan arguments are not valid: missing field `revision`",
        ),
        (
            serde_json::json!({"revision": 1, "ops": []}),
            "edit_plan needs at least one op",
        ),
        (
            serde_json::json!({"revision": 1, "ops": [{"op": "insert", "content": "x"}]}),
            "edit_plan arguments are not valid: missing field `after`",
        ),
    ];
    for (args, text) in cases {
        assert_eq!(parse_batch(&args).expect_err("bad").to_string(), text);
    }
    let ok = serde_json::json!({"revision": 1, "ops": [
        {"op": "insert", "after": null, "content": "x"},
        {"op": "move", "index": 2, "digest": "sha256:00", "after": 0},
    ]});
    let batch = parse_batch(&ok).expect("valid");
    assert_eq!(batch.ops.len(), 2);
    let big = serde_json::json!({"revision": 1, "ops": [{"op": "insert", "after": null, "content": "x".repeat(300_000)}]});
    assert!(matches!(
        parse_batch(&big),
        Err(EditArgError::ContentTooLarge { op: 0, .. })
    ));
}

#[test]
fn stale_revision_and_stale_digest() {
    let t = target(SOURCE, &[]);
    let old = EditBatch {
        revision: 2,
        ops: vec![EditOp::Delete {
            index: 0,
            digest: digest(SOURCE, 0),
        }],
    };
    match edit_plan(&t, &old).outcome {
        EditOutcome::Stale {
            current_revision,
            op,
            ..
        } => assert_eq!((current_revision, op), (4, None)),
        other => panic!("{other:?}"),
    }
    let wrong_digest = vec![EditOp::Delete {
        index: 1,
        digest: digest(SOURCE, 2),
    }];
    let (code, op, message) = refusal(run(SOURCE, wrong_digest));
    assert_eq!((code.as_str(), op), ("stale", Some(0)));
    assert!(message.contains("block 1 is now paragraph"), "{message}");
}

#[test]
fn locked_refuses() {
    let mut t = target(SOURCE, &[]);
    t.locked = true;
    let batch = EditBatch {
        revision: 4,
        ops: vec![EditOp::Insert {
            after: None,
            content: "x".into(),
        }],
    };
    assert_eq!(refusal(edit_plan(&t, &batch)).0, "locked");
}

// DIA-07: "edit_plan and MCP update_document refuse a batch that introduces or changes an
// invalid fence of either language." (Here: the decision fence.)
#[test]
fn dia_07_an_invalid_decision_is_refused_naming_op_and_line() {
    let ops = vec![
        EditOp::Insert {
            after: Some(0),
            content: "ok".into(),
        },
        EditOp::Insert {
            after: Some(1),
            content: "Text.\n\n```decision\nid: quay\nstate: later\nquestion: Which?\n```".into(),
        },
    ];
    let (code, op, message) = refusal(run(SOURCE, ops));
    assert_eq!((code.as_str(), op), ("invalid", Some(1)));
    assert_eq!(
        message,
        "op 1: Decision block line 2: unknown state `later` (states: open, answered, resolved, expired) (the Decision starts on line 3 of the content)"
    );
}

// The spec: "An unchanged malformed fence, such as one a person left mid-edit, is carried
// through unrelated edits and moves rather than blocking them."
#[test]
fn dia_07_an_unchanged_malformed_decision_does_not_block_other_edits() {
    let source = "# Plan\n\n```decision\nid: half\nstate:\n```\n\nText.\n";
    let ops = vec![
        EditOp::Replace {
            index: 2,
            digest: digest(source, 2),
            content: "New text.".into(),
        },
        EditOp::Move {
            index: 1,
            digest: digest(source, 1),
            after: Some(2),
        },
    ];
    assert_eq!(
        applied(run(source, ops)),
        "# Plan\n\nNew text.\n\n```decision\nid: half\nstate:\n```\n"
    );
    let fix = vec![EditOp::Replace {
        index: 1,
        digest: digest(source, 1),
        content: "```decision\nid: half\nstate: open\nquestion: Which?\n```".into(),
    }];
    assert!(applied(run(source, fix)).contains("question: Which?\n```\n\nText.\n"));
}

#[test]
fn decision_ids_stay_unique() {
    let source = "```decision\nid: quay\nstate: open\nquestion: Which?\n```\n";
    let ops = vec![EditOp::Insert {
        after: Some(0),
        content: "```decision\nid: quay\nstate: open\nquestion: Again?\n```".into(),
    }];
    let (_, op, message) = refusal(run(source, ops));
    assert_eq!(op, Some(0));
    assert_eq!(
        message,
        "op 0: Decision id `quay` is already used by block 0"
    );
}

#[test]
fn content_must_be_whole_blocks() {
    let unclosed = vec![EditOp::Insert {
        after: Some(0),
        content: "```rust\nfn main() {}".into(),
    }];
    let (code, op, message) = refusal(run(SOURCE, unclosed));
    assert_eq!((code.as_str(), op), ("invalid", Some(0)));
    assert!(message.contains("not closed"), "{message}");

    // A list inserted right after a list would join it.
    let joining = vec![EditOp::Insert {
        after: Some(2),
        content: "- three".into(),
    }];
    let (code, op, message) = refusal(run(SOURCE, joining));
    assert_eq!((code.as_str(), op), ("invalid", Some(0)));
    assert!(
        message.contains("runs into the block beside it"),
        "{message}"
    );

    // Deleting the paragraph between two lists would join them.
    let lists = "- a\n\nbetween\n\n- b\n";
    let delete = vec![EditOp::Delete {
        index: 1,
        digest: digest(lists, 1),
    }];
    assert_eq!(refusal(run(lists, delete)).1, Some(0));
}

#[test]
fn indices_and_conflicts() {
    let (code, _, message) = refusal(run(
        SOURCE,
        vec![EditOp::Delete {
            index: 9,
            digest: "sha256:00".into(),
        }],
    ));
    assert_eq!(code, "invalid");
    assert_eq!(
        message,
        "op 0: there is no block 9 in revision 4 (it has 4 blocks, 0 to 3)"
    );
    let twice = vec![
        EditOp::Delete {
            index: 1,
            digest: digest(SOURCE, 1),
        },
        EditOp::Move {
            index: 1,
            digest: digest(SOURCE, 1),
            after: None,
        },
    ];
    assert_eq!(
        refusal(run(SOURCE, twice)).2,
        "op 1: block 1 is already changed by op 0; one op per block"
    );
}

#[test]
fn anchor_plan_relates_a_decision_to_prose() {
    let source = "Quay text.\n\n```decision\nid: quay\nstate: answered\nquestion: Which?\nanswer: @mona: North\n```\n";
    let request = AnchorRequest {
        decision: "quay".into(),
        answer: Some(0),
        index: 0,
        digest: digest(source, 0),
    };
    let anchor = anchor_plan(source, &request).expect("anchor");
    assert_eq!(
        (anchor.index, anchor.first_line, anchor.last_line),
        (0, 1, 1)
    );
    let json = serde_json::to_value(&anchor).expect("json");
    assert_eq!(json["kind"], "paragraph");

    let mut missing = request.clone();
    missing.decision = "other".into();
    assert_eq!(
        anchor_plan(source, &missing),
        Err(AnchorRefusal::UnknownDecision("other".into()))
    );
    let mut answer = request.clone();
    answer.answer = Some(1);
    assert!(matches!(
        anchor_plan(source, &answer),
        Err(AnchorRefusal::NoSuchAnswer { .. })
    ));
    let mut stale = request.clone();
    stale.digest = digest(source, 1);
    let refusal = anchor_plan(source, &stale).expect_err("stale");
    assert_eq!(refusal.code(), "stale");
    let mut own = request.clone();
    own.index = 1;
    own.digest = digest(source, 1);
    assert_eq!(
        anchor_plan(source, &own),
        Err(AnchorRefusal::DecisionBlock { index: 1 })
    );
    let mut far = request;
    far.index = 5;
    assert!(matches!(
        anchor_plan(source, &far),
        Err(AnchorRefusal::NoSuchBlock { .. })
    ));
}

fn paragraph_doc() -> impl Strategy<Value = (Vec<String>, bool)> {
    (
        prop::collection::vec("[a-z]{1,12}( [a-z]{1,8}){0,3}", 1..12),
        any::<bool>(),
    )
}

proptest! {
    // Replacing one block changes that block only: every other block keeps its digest.
    #[test]
    fn replace_changes_only_its_block((paragraphs, crlf) in paragraph_doc(), pick in any::<usize>()) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let source = paragraphs.join(&format!("{eol}{eol}"));
        let before = blocks(&source);
        let index = pick % before.len();
        let ops = vec![EditOp::Replace {
            index,
            digest: before[index].digest.clone(),
            content: "# Replaced".into(),
        }];
        let after = blocks(&applied(run(&source, ops)));
        prop_assert_eq!(after.len(), before.len());
        for (old, new) in before.iter().zip(&after) {
            if old.index == index {
                prop_assert_eq!(new.kind.name(), "heading");
            } else {
                prop_assert_eq!(&old.digest, &new.digest);
            }
        }
    }
}

#[test]
fn insert_into_an_empty_document_and_move_to_the_start() {
    let ops = vec![EditOp::Insert {
        after: None,
        content: "# First".into(),
    }];
    assert_eq!(applied(run("", ops)), "# First\n");
    let ops = vec![EditOp::Move {
        index: 3,
        digest: digest(SOURCE, 3),
        after: None,
    }];
    assert_eq!(
        applied(run(SOURCE, ops)),
        "Last paragraph.\n\n# Plan\n\nFirst paragraph.\n\n\n- one\n- two\n"
    );
}

proptest! {
    // Deleting any set of blocks leaves every other block byte for byte, in order.
    #[test]
    fn delete_keeps_every_other_block((paragraphs, crlf) in paragraph_doc(), picks in prop::collection::btree_set(0usize..12, 1..4)) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let source = paragraphs
            .iter()
            .enumerate()
            .map(|(i, p)| if i % 3 == 0 { format!("## {p}") } else { p.clone() })
            .collect::<Vec<_>>()
            .join(&format!("{eol}{eol}"));
        let before = blocks(&source);
        let gone: Vec<usize> = picks.into_iter().filter(|i| *i < before.len()).collect();
        prop_assume!(!gone.is_empty());
        let ops = gone
            .iter()
            .map(|&index| EditOp::Delete { index, digest: before[index].digest.clone() })
            .collect();
        let after = blocks(&applied(run(&source, ops)));
        let expected: Vec<&String> = before
            .iter()
            .filter(|b| !gone.contains(&b.index))
            .map(|b| &b.digest)
            .collect();
        let got: Vec<&String> = after.iter().map(|b| &b.digest).collect();
        prop_assert_eq!(got, expected);
    }
}

// MCP `update_document` replaces the whole source; it is checked as `edit_plan` checks a batch.
fn replace(source: &str, revision: u64, new: &str) -> EditResult {
    replace_source(&target(source, &[]), revision, new)
}

#[test]
fn dia_07_update_document_refuses_a_new_invalid_decision_or_unclosed_fence() {
    let bad_decision =
        format!("{SOURCE}\n\n```decision\nid: quay\nstate: later\nquestion: Which?\n```\n");
    let (code, op, message) = refusal(replace(SOURCE, 4, &bad_decision));
    assert_eq!((code.as_str(), op), ("invalid", None));
    assert!(
        message.starts_with("the new source: Decision block line 2: unknown state `later`"),
        "{message}"
    );
    let unclosed = format!("{SOURCE}\n\n```rust\nfn main() {{}}\n");
    let (code, _, message) = refusal(replace(SOURCE, 4, &unclosed));
    assert_eq!(code, "invalid");
    assert!(message.contains("is not closed"), "{message}");
}

#[test]
fn dia_07_update_document_carries_an_unchanged_malformed_decision() {
    let source = "# Plan\n\n```decision\nid: half\nstate:\n```\n\nText.\n";
    let new = "# Plan\n\n```decision\nid: half\nstate:\n```\n\nNew text.\n";
    assert_eq!(applied(replace(source, 4, new)), new);
}

#[test]
fn update_document_refuses_a_stale_revision_a_lock_and_a_reused_decision_id() {
    let (code, _, message) = refusal(replace(SOURCE, 3, "# New\n"));
    assert_eq!(code, "stale");
    assert!(
        message.contains("made from revision 3 but the document is at revision 4"),
        "{message}"
    );
    let locked = EditTarget {
        locked: true,
        ..target(SOURCE, &[])
    };
    assert_eq!(refusal(replace_source(&locked, 4, "# New\n")).0, "locked");
    let source = "```decision\nid: quay\nstate: open\nquestion: Which?\n```\n";
    let twice = format!("{source}\n```decision\nid: quay\nstate: open\nquestion: Again?\n```\n");
    let (code, _, message) = refusal(replace(source, 4, &twice));
    assert_eq!(code, "invalid");
    assert!(
        message.contains("Decision id `quay` of block 1 is already used by block 0"),
        "{message}"
    );
}

/// ATM-40/41: one source limit on every write; a result of exactly 256 KiB is within it, one
/// byte more is refused `too_large` and nothing is applied.
#[test]
fn atm_40_an_edit_is_refused_only_past_the_source_limit() {
    use chopin_document::SOURCE_MAX_BYTES;
    let base = "# Plan\n";
    // An insert after block 0 adds a blank line and the content's line.
    let fill = |extra: usize| "x".repeat(SOURCE_MAX_BYTES - base.len() - 2 + extra);
    for (extra, fits) in [(0, true), (1, false)] {
        let result = run(
            base,
            vec![EditOp::Insert {
                after: Some(0),
                content: fill(extra),
            }],
        );
        match &result.outcome {
            EditOutcome::Applied { source, .. } => {
                assert!(fits, "{} bytes applied", source.len());
                assert_eq!(source.len(), SOURCE_MAX_BYTES);
            }
            EditOutcome::TooLarge { bytes, limit, .. } => {
                assert!(!fits, "{bytes} refused");
                assert_eq!((*bytes, *limit), (SOURCE_MAX_BYTES + 1, SOURCE_MAX_BYTES));
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A document whose last line has no line end (as typed in an editor): something inserted after
/// its last block goes after a line end and a blank line, and the block is kept as it was.
#[test]
fn insert_after_a_last_block_with_no_line_end() {
    let card = "```decision\nid: q-1\nstate: open\nquestion: Q?\n```";
    for source in [
        "Hello",
        "# Title\n\nHello",
        "<script>x</script> <img src=x>",
        "- a\n- b",
    ] {
        let out = applied(run(
            source,
            vec![EditOp::Insert {
                after: Some(blocks(source).len() - 1),
                content: card.into(),
            }],
        ));
        assert_eq!(out, format!("{source}\n\n{card}\n"), "{source:?}");
    }
    // Moving the last block up keeps it whole too.
    let source = "One\n\nTwo";
    let out = applied(run(
        source,
        vec![EditOp::Move {
            index: 1,
            digest: digest(source, 1),
            after: None,
        }],
    ));
    assert_eq!(out, "Two\n\nOne\n");
}

#[test]
fn dia_07_dia_08_a_batch_introducing_an_invalid_seecode_or_wireframe_fence_is_refused() {
    let source = "# Plan\n\nText.\n";
    let bad_chart = vec![EditOp::Insert {
        after: Some(1),
        content: "```seecode\n{\"type\": \"gauge\"}\n```".into(),
    }];
    let (_, op, message) = refusal(run(source, bad_chart));
    assert_eq!(op, Some(0));
    assert!(message.contains("not a registered type"), "{message}");
    let bad_outline = vec![EditOp::Insert {
        after: Some(1),
        content: "```wireframe\nscreen\n  |  menu  |\n```".into(),
    }];
    let (_, _, message) = refusal(run(source, bad_outline));
    assert!(
        message.contains("line 2: box drawing or ASCII art"),
        "{message}"
    );
    let good = vec![EditOp::Insert {
        after: Some(1),
        content:
            "```seecode\n{\"type\": \"pie\", \"items\": [{\"label\": \"EU\", \"value\": 3}]}\n```"
                .into(),
    }];
    assert!(applied(run(source, good)).contains("\"type\": \"pie\""));
}

#[test]
fn dia_09_an_unchanged_malformed_seecode_fence_is_carried_through_unrelated_edits_and_moves() {
    let source = "# Plan\n\n```seecode\n{\"type\": \"bar\"\n```\n\nText.\n";
    let ops = vec![
        EditOp::Replace {
            index: 2,
            digest: digest(source, 2),
            content: "New text.".into(),
        },
        EditOp::Move {
            index: 1,
            digest: digest(source, 1),
            after: Some(2),
        },
    ];
    assert_eq!(
        applied(run(source, ops)),
        "# Plan\n\nNew text.\n\n```seecode\n{\"type\": \"bar\"\n```\n"
    );
    // Changing it is checked.
    let change = vec![EditOp::Replace {
        index: 1,
        digest: digest(source, 1),
        content: "```seecode\n{\"type\": \"bar\"}\n```".into(),
    }];
    let (_, _, message) = refusal(run(source, change));
    assert!(message.contains("labels is a list"), "{message}");
    // A whole new source (MCP update_document) carries it too, and refuses a new bad one.
    let target = chopin_document::edit::EditTarget {
        document: chopin_document::DocumentRef {
            id: "d".into(),
            url: "/d".into(),
        },
        earlier_urls: &[],
        revision: 3,
        source,
        locked: false,
    };
    let kept = chopin_document::edit::replace_source(&target, 3, &format!("{source}More.\n"));
    assert!(
        matches!(kept.outcome, EditOutcome::Applied { .. }),
        "{kept:?}"
    );
    let broken = format!("{source}\n```wireframe\nwidget\n```\n");
    let refused = chopin_document::edit::replace_source(&target, 3, &broken);
    assert!(
        matches!(&refused.outcome, EditOutcome::Invalid { message, .. } if message.contains("\"widget\" is not a part")),
        "{refused:?}"
    );
}
