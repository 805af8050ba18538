//! Bench of the reader on the spec's example size: a 168,000-character, 5,566-line document.
//!
//! Times (a) one argument-less read, (b) paging through the whole document by following
//! `next:`, and (c) copying the source once (`String::clone`, the baseline), each repeated
//! enough times for stable numbers, and prints each time with its ratio to the baseline. (a)
//! and (b) are timed twice: parsing the source on every read (`read_text`), and with the
//! source's `Analysis` kept for the revision (`read_text_with`, as the server reads), whose
//! making (d) is timed too. Goals: a kept read ≤ 1 ms, a kept paging ≤ 10 ms.
//! Run: `cargo run --release -p chopin-document --bin chopin-bench-read`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chopin_document::reader::{
    read_text, read_text_with, Analysis, DocumentInput, ReadArgs, ReadKind,
};

const CHARACTERS: usize = 168_000;
const LINES: usize = 5_566;

const WORDS: &[&str] = &[
    "harbour", "survey", "quay", "tide", "silt", "crane", "north", "south", "depth", "港", "😀",
    "notes", "site", "boat", "east", "west",
];

/// Deterministic: headings and paragraphs separated by blank lines, exactly the target size.
fn document() -> String {
    let content_lines = LINES / 2 + LINES % 2;
    let content_chars = CHARACTERS - LINES; // every line ends with a newline
    let base = content_chars / content_lines;
    let extra = content_chars % content_lines;
    let mut out = String::with_capacity(CHARACTERS * 2);
    let mut word = 0;
    for line in 0..content_lines {
        let width = base + usize::from(line < extra);
        let mut text = if line % 20 == 0 {
            format!("## Section {} ", line / 20)
        } else {
            String::new()
        };
        while text.chars().count() < width {
            text.push_str(WORDS[word % WORDS.len()]);
            text.push(' ');
            word += 1;
        }
        let cut: String = text.chars().take(width).collect();
        out.push_str(&cut);
        out.push('\n');
        if out.matches('\n').count() < LINES {
            out.push('\n');
        }
    }
    out
}

fn time<F: FnMut() -> usize>(label: &str, runs: u32, mut f: F) -> Duration {
    let mut sink = 0usize;
    for _ in 0..runs.min(3) {
        sink = sink.wrapping_add(f());
    }
    let start = Instant::now();
    for _ in 0..runs {
        sink = sink.wrapping_add(f());
    }
    let each = start.elapsed() / runs;
    black_box(sink);
    println!(
        "{label:<44} {:>12.3} µs  ({runs} runs)",
        each.as_secs_f64() * 1e6
    );
    each
}

fn next_args(text: &str) -> Option<ReadArgs> {
    let json = text
        .split("\n\n")
        .next()?
        .lines()
        .find_map(|l| l.strip_prefix("next: read_plan "))?;
    serde_json::from_str(json).ok()
}

fn page_all(doc: &DocumentInput<'_>, kept: Option<&Analysis>) -> (usize, usize) {
    let mut args = ReadArgs::default();
    let mut pages = 0;
    let mut bytes = 0;
    loop {
        let read = match kept {
            Some(analysis) => read_text_with(doc, analysis, &args),
            None => read_text(doc, &args),
        };
        let Ok(text) = read else {
            return (pages, bytes);
        };
        pages += 1;
        bytes += text.len();
        match next_args(&text) {
            Some(next) => args = next,
            None => return (pages, bytes),
        }
    }
}

fn main() {
    let source = document();
    assert_eq!(source.chars().count(), CHARACTERS, "document size");
    assert_eq!(source.matches('\n').count(), LINES, "line count");
    let doc = DocumentInput {
        id: "doc_bench",
        url: "/documents/octo/harbour/field-notes",
        title: None,
        revision: 7,
        earlier_urls: &[],
        child: None,
        kind: ReadKind::Plan,
        source: &source,
        accepted_comments: &[],
        brief: None,
    };
    let (pages, bytes) = page_all(&doc, None);
    println!(
        "document: {CHARACTERS} characters, {LINES} lines, {} bytes; paging takes {pages} reads ({bytes} bytes)",
        source.len()
    );

    let baseline = time("(c) copy the source once (String::clone)", 20_000, || {
        black_box(source.clone()).len()
    });
    let first = time("(a) one argument-less read", 50, || {
        read_text(&doc, &ReadArgs::default()).map_or(0, |t| t.len())
    });
    let paging = time("(b) page through everything via next:", 3, || {
        page_all(&doc, None).1
    });
    let analysis = Analysis::of(&source);
    let analyse = time(
        "(d) analyse the source once (kept per revision)",
        20,
        || Analysis::of(&source).is_of(&source) as usize,
    );
    let kept_first = time("(a') one argument-less read, analysis kept", 2_000, || {
        read_text_with(&doc, &analysis, &ReadArgs::default()).map_or(0, |t| t.len())
    });
    let kept_paging = time("(b') page through everything, analysis kept", 50, || {
        page_all(&doc, Some(&analysis)).1
    });

    let ratio = |d: Duration| d.as_secs_f64() / baseline.as_secs_f64().max(1e-12);
    println!("ratio (a) / (c):  {:>10.1}", ratio(first));
    println!("ratio (b) / (c):  {:>10.1}", ratio(paging));
    println!("ratio (d) / (c):  {:>10.1}", ratio(analyse));
    println!("ratio (a') / (c): {:>10.1}", ratio(kept_first));
    println!("ratio (b') / (c): {:>10.1}", ratio(kept_paging));
    println!(
        "per read while paging: {:.3} ms; with the analysis kept: {:.3} ms",
        paging.as_secs_f64() * 1e3 / pages.max(1) as f64,
        kept_paging.as_secs_f64() * 1e3 / pages.max(1) as f64
    );
    println!(
        "goals: one read {:.3} ms (≤ 1 ms), whole document paged {:.3} ms (≤ 10 ms), analysis kept",
        kept_first.as_secs_f64() * 1e3,
        kept_paging.as_secs_f64() * 1e3
    );
}
