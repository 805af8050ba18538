//! Paging invariants of the reader, for arbitrary documents.
//!
//! READ-01: "one result never carries more than 16,000 UTF-8 bytes (READ_BYTES) in all".
//! READ-07: "the source sections of the results that next: leads through, joined, are the
//! document exactly, with its final newline, CRLF and blank lines."
//! READ-18: "Following next: covers every character exactly once."

use chopin_document::reader::{
    read_text, read_text_with, Analysis, DocumentInput, ReadArgs, ReadKind, READ_BYTES,
};
use proptest::prelude::*;

/// One line of a generated document, without its line ending.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(String::new()),
        3 => "[a-z ]{0,40}",
        2 => "#{1,6} [A-Za-z ]{1,30}",
        1 => "[😀🎉🚢]{1,200}",
        1 => "[漢字東京港]{1,3000}",
        1 => "[a-z]{1,1}".prop_map(|c| c.repeat(30_000)),
        1 => "- [a-z]{1,20}",
        1 => Just("```".to_string()),
        1 => Just("| a | b |\n|---|---|\n| 1 | 2 |".to_string()),
    ]
}

fn document() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(line(), 0..120),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lines, crlf, final_newline)| {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut source = lines.join(eol);
            if final_newline && !source.is_empty() {
                source.push_str(eol);
            }
            source
        })
}

/// Many short lines, to page through the block listing.
fn short_lines() -> impl Strategy<Value = String> {
    (1usize..3_000).prop_map(|n| (0..n).map(|i| format!("l{i}\n\n")).collect())
}

struct Headers {
    id: String,
    url: String,
    earlier: Vec<String>,
    comments: Vec<String>,
}

fn headers(big: bool) -> Headers {
    if big {
        Headers {
            id: "🚢".repeat(400),
            url: format!("/documents/{}", "港".repeat(500)),
            earlier: vec!["/documents/a\nb".into(); 80],
            comments: (0..100)
                .map(|i| format!("comment {i} {}", "😀".repeat(50)))
                .collect(),
        }
    } else {
        Headers {
            id: "doc_1".into(),
            url: "/documents/octo/repo/notes".into(),
            earlier: vec![],
            comments: vec![],
        }
    }
}

fn header_part(text: &str) -> &str {
    text.split("\n\n").next().unwrap_or_default()
}

fn next_args(text: &str, tool: &str) -> Option<ReadArgs> {
    let prefix = format!("next: {tool} ");
    let json = header_part(text)
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))?;
    let mut value: serde_json::Value = serde_json::from_str(json).expect("next is json");
    if let Some(map) = value.as_object_mut() {
        map.remove("child");
        map.remove("id");
    }
    Some(serde_json::from_value(value).expect("next holds read arguments"))
}

fn source_part(text: &str) -> &str {
    let at = text.find("\n--- source lines ").expect("a source section");
    let rest = &text[at + 1..];
    let newline = rest.find('\n').expect("the source title ends");
    &rest[newline + 1..]
}

/// Follows `next:` from `first` and returns the joined source sections.
fn follow(doc: &DocumentInput<'_>, first: ReadArgs, tool: &str) -> Result<String, TestCaseError> {
    let mut joined = String::new();
    let mut args = first;
    for _ in 0..10_000 {
        let text = read_text(doc, &args).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(text.len() <= READ_BYTES, "result of {} bytes", text.len());
        // READ-20: "A header value is one line of at most 300 characters." The `next:` call
        // carries the id verbatim so that it stays callable.
        for header_line in header_part(&text)
            .lines()
            .filter(|l| !l.starts_with("next: "))
        {
            let value = header_line.split_once(": ").map_or(header_line, |(_, v)| v);
            prop_assert!(
                value.chars().count() <= 300,
                "long header value {}",
                header_line.len()
            );
        }
        let piece = source_part(&text);
        prop_assert!(!piece.is_empty() || doc.source.is_empty(), "no progress");
        joined.push_str(piece);
        match next_args(&text, tool) {
            Some(next) => args = next,
            None => return Ok(joined),
        }
    }
    Err(TestCaseError::fail("next: did not end"))
}

fn input<'a>(source: &'a str, h: &'a Headers, kind: ReadKind) -> DocumentInput<'a> {
    DocumentInput {
        id: &h.id,
        url: &h.url,
        title: Some("Notes"),
        revision: 3,
        earlier_urls: &h.earlier,
        child: None,
        kind,
        source,
        accepted_comments: &h.comments,
        brief: Some("A brief."),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn read_18_following_next_covers_every_character_once(
        source in document(),
        big in any::<bool>(),
        mcp in any::<bool>(),
    ) {
        let h = headers(big);
        let (kind, tool) = if mcp { (ReadKind::McpDocument, "read_document") } else { (ReadKind::Plan, "read_plan") };
        let doc = input(&source, &h, kind);
        let joined = follow(&doc, ReadArgs::default(), tool)?;
        prop_assert_eq!(joined.as_bytes(), source.as_bytes());
    }

    #[test]
    fn read_18_short_lines_page_through_the_block_listing(source in short_lines()) {
        let h = headers(false);
        let doc = input(&source, &h, ReadKind::Plan);
        let joined = follow(&doc, ReadArgs::default(), "read_plan")?;
        prop_assert_eq!(joined, source);
    }

    #[test]
    fn read_13_any_offset_and_limit_pages_to_the_end(
        source in document(),
        offset_seed in any::<usize>(),
        limit in 1usize..400,
    ) {
        let lines = chopin_document::lines::SourceLines::new(&source);
        prop_assume!(lines.count() > 0);
        let offset = offset_seed % lines.count() + 1;
        let h = headers(false);
        let doc = input(&source, &h, ReadKind::Plan);
        let args = ReadArgs { offset: Some(offset), limit: Some(limit), column: None };
        let joined = follow(&doc, args, "read_plan")?;
        let start = lines.byte_range(offset).map(|r| r.start).unwrap_or_default();
        prop_assert_eq!(joined.as_str(), &source[start..]);
    }

    /// An analysis kept for a revision reads exactly as a fresh parse would, on every page a
    /// reader follows and at any offset, limit and column; and it is the analysis of its own
    /// source only.
    #[test]
    fn a_kept_analysis_reads_as_a_fresh_parse(
        source in document(),
        big in any::<bool>(),
        mcp in any::<bool>(),
        offset_seed in any::<usize>(),
        limit in proptest::option::of(1usize..400),
        column in proptest::option::of(1usize..40),
    ) {
        let h = headers(big);
        let (kind, tool) = if mcp { (ReadKind::McpDocument, "read_document") } else { (ReadKind::Plan, "read_plan") };
        let doc = input(&source, &h, kind);
        let analysis = Analysis::of(&source);
        prop_assert!(analysis.is_of(&source));
        let mut changed = source.clone();
        changed.push('x');
        prop_assert!(!analysis.is_of(&changed));
        let mut args = ReadArgs::default();
        for _ in 0..10_000 {
            let fresh = read_text(&doc, &args);
            prop_assert_eq!(&read_text_with(&doc, &analysis, &args), &fresh);
            match fresh.ok().and_then(|text| next_args(&text, tool)) {
                Some(next) => args = next,
                None => break,
            }
        }
        let lines = chopin_document::lines::SourceLines::new(&source).count().max(1);
        let args = ReadArgs { offset: Some(offset_seed % (lines + 1) + 1), limit, column };
        prop_assert_eq!(read_text_with(&doc, &analysis, &args), read_text(&doc, &args));
    }
}
