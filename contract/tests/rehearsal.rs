//! The rehearsal of a library bump (harness-rfc.md §7.3): the fake provider changes its wire the
//! way a provider release might, the pinned library no longer reads it, and the suite says so —
//! named checks fail, each message saying what the provider sent — while the same suite passes
//! against the unchanged wire.

use async_trait::async_trait;
use chopin_contract::provider::provider_subject;
use chopin_contract::{run, Report, Subject, SubjectFactory};
use chopin_fixtures::model_provider::FormatChange;
use chopin_harness_provider::Family;

struct Planted(Family, Option<FormatChange>);

#[async_trait]
impl SubjectFactory for Planted {
    async fn create(&self) -> Result<Subject, String> {
        provider_subject(self.0, self.1)
            .await
            .map_err(|e| e.to_string())
    }
}

fn failed(report: &Report) -> Vec<String> {
    report.failed().into_iter().map(str::to_owned).collect()
}

/// Checks that need the model's streamed text read: each must fail.
const READS_TEXT: [&str; 4] = [
    "RFC-75 streaming-order",
    "RFC-09 structured-output",
    "HA-04 parallel-tool-calls",
    "SES-27 bounded-retries",
];

async fn rehearse(family: Family, change: FormatChange, words: &str) {
    let clean = run(&Planted(family, None)).await;
    assert!(clean.passed(), "unchanged wire: {clean}");

    let planted = run(&Planted(family, Some(change))).await;
    assert!(!planted.passed(), "planted {change:?}: {planted}");
    let failed = failed(&planted);
    for name in READS_TEXT {
        assert!(
            failed.iter().any(|f| f == name),
            "{name} did not fail: {planted}"
        );
    }
    // Every failure says what the provider sent.
    for name in &failed {
        let id = name.split(' ').next().unwrap_or_default();
        let detail = &planted.row(id).expect("a row").detail;
        assert!(detail.contains(words), "{name}: {detail}");
    }
    // Checks that stream no text are untouched by the change.
    for untouched in ["RFC-07", "RFC-62", "RFC-73", "RFC-08", "OWN-06"] {
        assert!(
            !failed.iter().any(|f| f.starts_with(untouched)),
            "{untouched} failed: {planted}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc_75_a_renamed_anthropic_stream_event_fails_the_named_checks() {
    rehearse(
        Family::Anthropic,
        FormatChange::RenamedEvent,
        "`content_block_diff` events",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc_75_a_moved_openai_delta_field_fails_the_named_checks() {
    rehearse(
        Family::OpenAi,
        FormatChange::MovedField,
        "`choices[].delta.text`",
    )
    .await;
}
