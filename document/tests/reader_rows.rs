//! One test per checkable READ row of the checklist, on the reader's text.

use chopin_document::reader::{
    document_view, read_text, ChildRef, DocumentInput, ReadArgs, ReadError, ReadKind, READ_BYTES,
};

fn input(source: &str) -> DocumentInput<'_> {
    DocumentInput {
        id: "doc_1",
        url: "/documents/octo/harbour/notes",
        title: Some("Notes"),
        revision: 7,
        earlier_urls: &[],
        child: None,
        kind: ReadKind::Plan,
        source,
        accepted_comments: &[],
        brief: None,
    }
}

fn read(doc: &DocumentInput<'_>, offset: Option<usize>, limit: Option<usize>) -> String {
    read_text(
        doc,
        &ReadArgs {
            offset,
            limit,
            column: None,
        },
    )
    .expect("read")
}

fn header(text: &str) -> Vec<&str> {
    text.split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .collect()
}

fn source_of(text: &str) -> &str {
    let at = text.find("\n--- source lines ").expect("source title");
    let rest = &text[at + 1..];
    &rest[rest.find('\n').expect("title end") + 1..]
}

/// `count` numbered paragraphs of `width` characters each, separated by blank lines.
fn paragraphs(count: usize, width: usize) -> String {
    (0..count)
        .map(|i| format!("{:0width$}\n\n", i, width = width))
        .collect()
}

// READ-04: "Header lines: document: <id>, url: /documents/<owner>/<repository>/<slug>,
// revision: N, size: C characters, L lines, B blocks, lines: A-B of L,
// next: read_plan {"offset":N}."
#[test]
fn read_04_header_lines() {
    let source = paragraphs(600, 30);
    let text = read(&input(&source), None, None);
    let lines = header(&text);
    assert_eq!(lines[0], "document: doc_1");
    assert_eq!(lines[1], "title: Notes");
    assert_eq!(lines[2], "url: /documents/octo/harbour/notes");
    assert_eq!(lines[3], "revision: 7");
    assert_eq!(lines[4], "size: 19200 characters, 1200 lines, 600 blocks");
    assert!(lines[5].starts_with("lines: 1-"), "{}", lines[5]);
    assert!(lines[5].ends_with(" of 1200"));
    assert!(lines[6].starts_with("next: read_plan {\"offset\":"));
}

// READ-04 / the spec's header: "A renamed top-level document adds earlier urls".
#[test]
fn read_04_earlier_urls_after_a_rename() {
    let earlier = vec!["/documents/octo/harbour/old".to_string()];
    let mut doc = input("# A\n");
    doc.earlier_urls = &earlier;
    let text = read(&doc, None, None);
    assert!(header(&text).contains(&"earlier urls: /documents/octo/harbour/old"));
}

// READ-05: "A document larger than one result says "This document is larger than one result
// holds (16000 bytes), so this is its outline and first part. …"."
#[test]
fn read_05_larger_document_sentence() {
    let source = paragraphs(600, 30);
    let text = read(&input(&source), None, None);
    assert!(text.contains(
        "\nThis document is larger than one result holds (16000 bytes), so this is its outline and first part."
    ));
    let small = read(&input("# A\n"), None, None);
    assert!(!small.contains("larger than one result"));
}

// READ-06: "Section formats: Outline (line, heading): with L<line> <heading>; Decisions (their
// text, options and answers are in the source): with - <id>: <state>: <title>; Blocks starting
// on lines A-B (index type lines digest): with <index> <type> L<a>-<b> sha256:…."
#[test]
fn read_06_section_formats() {
    let mut source =
        String::from("# Top\n\n```decision\nid: quay\nstate: open\nquestion: Which quay?\n```\n\n");
    source.push_str(&paragraphs(600, 30));
    let text = read(&input(&source), None, None);
    assert!(text.contains("\nOutline (line, heading):\nL1 # Top\n"));
    assert!(text.contains(
        "\nDecisions (their text, options and answers are in the source):\n- quay: open: Which quay?\n"
    ));
    let at = text
        .find("\nBlocks starting on lines 1-")
        .expect("block listing");
    let listing: Vec<&str> = text[at + 1..].lines().skip(1).take(2).collect();
    assert!(
        listing[0].starts_with("0 heading L1-1 sha256:"),
        "{}",
        listing[0]
    );
    assert!(
        listing[1].starts_with("1 decision L3-7 sha256:"),
        "{}",
        listing[1]
    );
    assert_eq!(listing[0].len(), "0 heading L1-1 sha256:".len() + 64);
}

// READ-07: "The source is last, after --- source lines A-B of N ---, verbatim".
#[test]
fn read_07_source_last_and_verbatim() {
    let source = "# A\r\n\r\ntext\r\n\r\n";
    let text = read(&input(source), Some(1), None);
    assert!(text.contains("\n--- source lines 1-4 of 4 ---\n"));
    assert!(text.ends_with(source));
    assert_eq!(source_of(&text), source);
}

// READ-09: "Without arguments, a document whose whole text fits in 16,000 bytes is returned
// whole (lines: all N)."
#[test]
fn read_09_small_document_whole() {
    let source = paragraphs(50, 30);
    let text = read(&input(&source), None, None);
    assert!(header(&text).contains(&"lines: all 100"));
    assert!(!text.contains("\nnext: "));
    assert_eq!(source_of(&text), source);
}

// READ-10: "A larger document returns its outline (shallow headings first, each with its line,
// in at most 2,500 bytes, with a count of any left out), its first part, and next:".
#[test]
fn read_10_outline_shallow_first_with_a_count_left_out() {
    let mut source = String::from("# Root\n\n");
    for i in 0..200 {
        source.push_str(&format!("## Section {i}\n\n### Detail {i}\n\ntext\n\n"));
    }
    let text = read(&input(&source), None, None);
    let start = text.find("Outline (line, heading):\n").expect("outline");
    let end = start + text[start..].find("\n\n").expect("outline end");
    let outline = &text[start..=end];
    assert!(outline.len() <= 2_500, "outline of {} bytes", outline.len());
    assert!(outline.contains("L1 # Root\n"));
    assert!(outline.contains("## Section 0\n"));
    assert!(
        !outline.contains("### Detail"),
        "deeper headings wait for the shallow ones"
    );
    let last = outline.lines().last().expect("a last line");
    assert!(
        last.starts_with("- … ") && last.ends_with(" more headings left out"),
        "{last}"
    );
    let shown = outline.lines().filter(|l| l.starts_with('L')).count();
    let left_out: usize = last
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert_eq!(shown + left_out, 401);
}

// READ-11: "read_document returns about 15,000 characters whole; read_plan (block listing ≈90
// bytes a block) about 6,000 characters of short blocks."
#[test]
fn read_11_thresholds() {
    let long_blocks = paragraphs(150, 98); // 15,000 characters in 150 blocks
    let mut mcp = input(&long_blocks);
    mcp.kind = ReadKind::McpDocument;
    assert!(read(&mcp, None, None).contains("\nlines: all 300\n"));
    let short_blocks = paragraphs(300, 18); // 6,000 characters in 300 blocks
    let plan = read(&input(&short_blocks), None, None);
    assert!(
        !plan.contains("\nlines: all"),
        "6,000 characters of short blocks do not fit"
    );
    let fewer = paragraphs(120, 18);
    assert!(read(&input(&fewer), None, None).contains("\nlines: all 240\n"));
}

// READ-12: "offset (1-based line) and limit (lines) return that slice and the total line count;
// a slice that fits the budget is exact."
#[test]
fn read_12_offset_and_limit_slice_exactly() {
    let source = paragraphs(600, 30);
    let text = read(&input(&source), Some(11), Some(5));
    assert!(header(&text).contains(&"lines: 11-15 of 1200"));
    assert!(header(&text).contains(&"next: read_plan {\"offset\":16,\"limit\":5}"));
    let expected: String = source
        .lines()
        .skip(10)
        .take(5)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(source_of(&text), expected);
}

// READ-13: "limit is a maximum: a result that would pass 16,000 bytes stops sooner and its
// header says so (limit: asked for 4000 lines from line 1, but one result holds at most 16000
// bytes, so this one stops at line 521) with a next:; the cap wins over an exact slice."
#[test]
fn read_13_limit_is_a_maximum() {
    let source = paragraphs(3_000, 40);
    let text = read(&input(&source), Some(1), Some(4_000));
    assert!(text.len() <= READ_BYTES);
    let lines = header(&text);
    let stop: usize = lines
        .iter()
        .find_map(|l| l.strip_prefix("lines: 1-"))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("lines");
    assert!(lines.contains(&format!(
        "limit: asked for 4000 lines from line 1, but one result holds at most 16000 bytes, so this one stops at line {stop}"
    ).as_str()));
    let next = format!(
        "next: read_plan {{\"offset\":{},\"limit\":{}}}",
        stop + 1,
        4_000 - stop
    );
    assert!(lines.contains(&next.as_str()), "{lines:?}");
}

// READ-14: "An offset outside the document is an error naming the line count."
#[test]
fn read_14_offset_outside_names_the_line_count() {
    let doc = input("a\nb\nc\n");
    let args = ReadArgs {
        offset: Some(4),
        ..ReadArgs::default()
    };
    let error = read_text(&doc, &args).expect_err("outside");
    assert_eq!(
        error,
        ReadError::OffsetOutside {
            offset: 4,
            lines: 3
        }
    );
    assert_eq!(
        error.to_string(),
        "offset 4 is outside the document, which has 3 lines (offset is a line from 1 to 3)"
    );
    let zero = ReadArgs {
        offset: Some(0),
        ..ReadArgs::default()
    };
    assert!(read_text(&doc, &zero).is_err());
    let empty = input("");
    assert!(read_text(&empty, &zero)
        .expect_err("empty")
        .to_string()
        .contains("0 lines"));
}

// READ-15: "a piece never splits an emoji or a CJK character".
// READ-16: "A result ending inside a line says ends mid-line: line 3 after character 30703 of
// 50001 and its next: names offset and column; the continuing result says starts mid-line."
#[test]
fn read_15_16_long_lines_in_pieces_without_splitting_characters() {
    let long: String = "😀漢a".repeat(6_000);
    let source = format!("one\ntwo\n{long}\nfour\n");
    let doc = input(&source);
    let first = read(&doc, Some(3), None);
    let columns = long.chars().count() + 1;
    let ends = header(&first)
        .into_iter()
        .find_map(|l| l.strip_prefix("ends mid-line: line 3 after character "))
        .expect("ends mid-line")
        .to_string();
    let after: usize = ends
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("n");
    assert_eq!(ends, format!("{after} of {columns}"));
    let next = format!("next: read_plan {{\"offset\":3,\"column\":{}}}", after + 1);
    assert!(header(&first).contains(&next.as_str()));
    let piece = source_of(&first);
    assert_eq!(piece.chars().count(), after);
    let second = read_text(
        &doc,
        &ReadArgs {
            offset: Some(3),
            limit: None,
            column: Some(after + 1),
        },
    )
    .expect("read");
    let starts = format!(
        "starts mid-line: line 3 from character {} of {columns}",
        after + 1
    );
    assert!(header(&second).contains(&starts.as_str()));
    assert!(source_of(&second).starts_with(&long.chars().skip(after).take(3).collect::<String>()));
}

// READ-17: "A column needs its offset and must lie inside that line."
#[test]
fn read_17_column_needs_offset_and_lies_inside_the_line() {
    let doc = input("ab\ncd");
    let column_only = ReadArgs {
        column: Some(2),
        ..ReadArgs::default()
    };
    assert_eq!(
        read_text(&doc, &column_only),
        Err(ReadError::ColumnWithoutOffset)
    );
    let outside = ReadArgs {
        offset: Some(1),
        column: Some(4),
        limit: None,
    };
    assert_eq!(
        read_text(&doc, &outside).expect_err("outside").to_string(),
        "column 4 is outside line 1, which has 3 characters counting its newline (column is 1 to 3)"
    );
    let newline = ReadArgs {
        offset: Some(1),
        column: Some(3),
        limit: None,
    };
    assert_eq!(source_of(&read_text(&doc, &newline).expect("read")), "\ncd");
    let last_line = ReadArgs {
        offset: Some(2),
        column: Some(3),
        limit: None,
    };
    assert!(
        read_text(&doc, &last_line).is_err(),
        "line 2 has no newline"
    );
}

// READ-19: "Lists that come with the first part are trimmed to their own budgets, their last
// line saying what was left out: decisions 1,500 bytes, accepted comments 1,500 bytes, and for
// MCP the brief 2,000 bytes".
#[test]
fn read_19_lists_trimmed_to_their_budgets() {
    let mut source = String::new();
    for i in 0..60 {
        source.push_str(&format!(
            "```decision\nid: d{i}\nstate: open\nquestion: Question number {i} about the harbour?\n```\n\n"
        ));
    }
    let comments: Vec<String> = (0..60)
        .map(|i| format!("@mona: comment {i} on the quay"))
        .collect();
    let brief = "The brief. ".repeat(400);
    let mut doc = input(&source);
    doc.accepted_comments = &comments;
    let text = read(&doc, None, None);
    let section = |title: &str| -> String {
        let start = text.find(title).expect("section");
        let end = start + text[start..].find("\n\n").expect("end");
        text[start..=end].to_string()
    };
    let decisions = section("Decisions (their text");
    assert!(decisions.len() <= 1_500);
    assert!(decisions
        .trim_end()
        .ends_with("more Decisions left out (all are in the source)"));
    let listed = section("Accepted comments:");
    assert!(listed.len() <= 1_500);
    assert!(listed.trim_end().ends_with("more comments left out"));

    doc.kind = ReadKind::McpDocument;
    doc.brief = Some(&brief);
    let text = read(&doc, None, None);
    let start = text.find("Brief:\n").expect("brief");
    let end = start + text[start..].find("\n\n").expect("end");
    assert!(end - start < 2_000);
    assert!(text[start..end].ends_with("the whole brief is in structuredContent.brief)"));
}

// READ-20: "A header value is one line of at most 300 characters."
#[test]
fn read_20_header_values_are_one_short_line() {
    let id = format!("line\nbreak{}", "x".repeat(400));
    let mut doc = input("# A\n");
    doc.id = &id;
    let text = read(&doc, None, None);
    let line = header(&text)[0];
    let value = line.strip_prefix("document: ").expect("document line");
    assert_eq!(value.chars().count(), 300);
    assert!(value.starts_with("line break"));
    assert!(value.ends_with('…'));
}

// READ-21: "A part lists the top-level blocks that start on its lines with index, type, line
// range and digest; read_plan on a small document lists every block."
#[test]
fn read_21_parts_list_the_blocks_starting_on_their_lines() {
    let source = paragraphs(600, 30);
    let doc = input(&source);
    let part = read(&doc, Some(101), Some(10));
    assert!(part.contains("Blocks starting on lines 101-110 (index type lines digest):\n50 paragraph L101-101 sha256:"));
    assert!(part.contains("\n54 paragraph L109-109 sha256:"));
    assert!(!part.contains("\n55 paragraph"));
    assert!(!part.contains("\n49 paragraph"));
    let small = paragraphs(20, 5);
    let whole = read(&input(&small), None, None);
    assert!(whole.contains("\n0 paragraph L1-1 ") && whole.contains("\n19 paragraph L39-39 "));
}

// READ-22: "read_child has the same text with child and title in the header, the same offset,
// limit and column, and a next: that names the child."
#[test]
fn read_22_child_header_and_next() {
    let source = paragraphs(600, 30);
    let mut doc = input(&source);
    doc.kind = ReadKind::Child;
    doc.url = "/documents/octo/harbour/notes/site-plan";
    doc.child = Some(ChildRef {
        id: "child_9",
        title: "Site plan",
    });
    let text = read(&doc, Some(1), Some(3));
    let lines = header(&text);
    assert_eq!(
        &lines[..4],
        &[
            "document: doc_1",
            "child: child_9",
            "title: Site plan",
            "url: /documents/octo/harbour/notes/site-plan"
        ]
    );
    assert!(lines.contains(&"next: read_child {\"child\":\"child_9\",\"offset\":4,\"limit\":3}"));
}

// READ-23: "MCP read_document has the same shape with the document's id, title and url and no
// blocks; its structuredContent is the whole document whatever slice the text carries."
// READ-02: the structured JSON view is the whole document.
#[test]
fn read_23_mcp_has_no_blocks_and_the_view_is_whole() {
    let source = paragraphs(600, 30);
    let mut doc = input(&source);
    doc.kind = ReadKind::McpDocument;
    let text = read(&doc, Some(5), Some(2));
    assert!(!text.contains("Blocks starting"));
    assert!(header(&text).contains(&"title: Notes"));
    assert!(header(&text).contains(&"size: 19200 characters, 1200 lines"));
    assert!(
        header(&text).contains(&"next: read_document {\"id\":\"doc_1\",\"offset\":7,\"limit\":2}")
    );
    let view = serde_json::to_value(document_view(&doc)).expect("json");
    assert_eq!(view["source"], source);
    assert_eq!(view["document"]["id"], "doc_1");
    assert_eq!(view["document"]["url"], "/documents/octo/harbour/notes");
    assert_eq!(view["blocks"].as_array().map(Vec::len), Some(600));
    assert_eq!(view["blocks"][3]["kind"], "paragraph");
    assert_eq!(view["size"]["lines"], 1200);
    assert!(view.get("earlier_urls").is_none());
}

// READ-01: results are Markdown with real newlines and at most 16,000 bytes, lists included.
#[test]
fn read_01_everything_fits_in_one_budget() {
    let mut source = String::new();
    for i in 0..300 {
        source.push_str(&format!("# Heading {i} {}\n\n", "漢".repeat(100)));
    }
    let comments: Vec<String> = (0..100)
        .map(|i| format!("comment {i} {}", "😀".repeat(80)))
        .collect();
    let mut doc = input(&source);
    doc.accepted_comments = &comments;
    let text = read(&doc, None, None);
    assert!(text.len() <= READ_BYTES);
    assert!(text.contains('\n') && !text.contains("\\n"));
}

// READ-08/READ-09 at the edges: an empty document and one of blank lines read whole.
#[test]
fn read_09_empty_and_blank_documents() {
    let empty = read(&input(""), None, None);
    assert!(header(&empty).contains(&"lines: all 0"));
    assert!(
        empty.ends_with(
            "Blocks (index type lines digest):\n(none)\n\n--- source lines 0 of 0 (empty) ---\n"
        ),
        "{empty}"
    );
    let blank = read(&input("\n\n"), None, None);
    assert!(header(&blank).contains(&"size: 2 characters, 2 lines, 0 blocks"));
    assert!(
        blank.ends_with("--- source lines 1-2 of 2 ---\n\n\n"),
        "{blank}"
    );
}
