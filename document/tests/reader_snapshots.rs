//! Snapshots of the reader's text: a small document, one larger than a read, and a document
//! with a 50,000-character line (its first and second piece).

use chopin_document::reader::{read_text, DocumentInput, ReadArgs, ReadKind};

fn input(source: &str) -> DocumentInput<'_> {
    DocumentInput {
        id: "doc_7f3a",
        url: "/documents/octo/harbour/field-notes",
        title: None,
        revision: 7,
        earlier_urls: &[],
        child: None,
        kind: ReadKind::Plan,
        source,
        accepted_comments: &[],
        brief: None,
    }
}

const SMALL: &str = "# Quarterly field notes\n\nWe survey the harbour.\n\n## Site 1: harbour survey\n\n- depth\n- silt\n\n```decision\nid: quay\nstate: open\nquestion: Which quay?\noption: North\noption: South\n```\n";

/// A deterministic document of sections with short paragraphs, larger than one read.
fn large() -> String {
    let mut out = String::from("# Quarterly field notes\n\n");
    for section in 1..=40 {
        out.push_str(&format!("## Site {section}: harbour survey\n\n"));
        for para in 1..=3 {
            out.push_str(&format!(
                "Paragraph {para} of site {section}: the tide was low and the silt was soft.\n\n"
            ));
        }
        if section % 10 == 0 {
            out.push_str(&format!(
                "```decision\nid: site-{section}\nstate: open\nquestion: Survey site {section} again?\n```\n\n"
            ));
        }
    }
    out
}

#[test]
fn read_09_small_document_whole() {
    let comments = vec!["@mona on L3: say which harbour".to_string()];
    let mut doc = input(SMALL);
    doc.accepted_comments = &comments;
    let text = read_text(&doc, &ReadArgs::default()).expect("read");
    insta::assert_snapshot!("small_whole", text);
}

#[test]
fn read_10_large_document_first_and_second_part() {
    let source = large();
    let doc = input(&source);
    let first = read_text(&doc, &ReadArgs::default()).expect("read");
    assert!(first.len() <= 16_000);
    insta::assert_snapshot!("large_first", first);
    let second = read_text(
        &doc,
        &ReadArgs {
            offset: Some(next_offset(&first)),
            ..ReadArgs::default()
        },
    )
    .expect("read");
    insta::assert_snapshot!("large_second", second);
}

fn next_offset(text: &str) -> usize {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("next: read_plan "))
        .expect("a next line");
    let args: serde_json::Value = serde_json::from_str(line).expect("json");
    args["offset"].as_u64().expect("offset") as usize
}

#[test]
fn read_15_a_50000_character_line_in_pieces() {
    let long: String = (0..50_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let source = format!("# Long\n\n{long}\n\nafter\n");
    let doc = input(&source);
    let first = read_text(&doc, &ReadArgs::default()).expect("read");
    insta::assert_snapshot!("long_line_first", first);
    let next = first
        .lines()
        .find_map(|l| l.strip_prefix("next: read_plan "))
        .expect("next");
    let args: ReadArgs = serde_json::from_str(next).expect("args");
    let second = read_text(&doc, &args).expect("read");
    insta::assert_snapshot!("long_line_second", second);
}
