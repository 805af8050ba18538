//! The visual admission check on the whole stack, under `HARNESS=remote` with
//! `VISUAL_ADMISSION=require` and no assessor model: the Planner's `edit_plan` and MCP
//! `update_document` that add prose are refused, saying why, and nothing is written; a write
//! that adds no prose goes through; a background job's write (the store-level writer research
//! reports are published with) does not pass the check. Rows: ISO-33, ISO-35, ISO-41.

mod support;

use std::sync::Arc;

use chopin_fixtures::mcp::{call, connect, ok, refusal};
use chopin_server::documents::updates::Update;
use chopin_server::store::MemoryStore;
use chopin_server::visuals::Mode;
use serde_json::json;
use support::{begin_turn, call_host_tool, end_turn, served_with, Served, DOC_URL};

async fn strict() -> Served {
    served_with(Arc::new(MemoryStore::new()), |c| {
        c.visuals.mode = Mode::Require
    })
    .await
}

#[tokio::test]
async fn iso_33_iso_35_with_no_assessor_and_require_prose_is_refused_for_the_planner_and_mcp_alike()
{
    let s = strict().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin draft it").await;
    let refused = call_host_tool(
        &mut client,
        &begun.turn,
        "e1",
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "We serve EU shoppers." }] }),
    )
    .await;
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused
            .output
            .to_string()
            .contains("requires a visual assessment"),
        "{refused:?}"
    );
    // Nothing new to assess: a heading goes through.
    let heading = call_host_tool(
        &mut client,
        &begun.turn,
        "e2",
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Checkout" }] }),
    )
    .await;
    assert!(!heading.is_error, "{heading:?}");
    end_turn(&s, &mut client, &begun.turn).await;

    let mona = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let (code, body) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 1, "idempotencyKey": "v1",
                   "source": "# Checkout\n\nWe serve EU shoppers.\n"}),
        )
        .await,
    );
    assert_eq!(code, "invalid", "{body}");
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["source"], "# Checkout\n", "nothing written");
}

#[tokio::test]
async fn iso_41_a_background_jobs_write_keeps_its_own_contract_and_does_not_pass_the_check() {
    let s = strict().await;
    let doc = s.store.document(s.doc).await.unwrap().unwrap();
    let written = s
        .state
        .updates
        .update(
            "chopin",
            &doc,
            &Update {
                revision: 0,
                source: "# Report\n\nEdge caches cut EU latency.\n",
                idempotency_key: "job",
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(
            written.outcome,
            chopin_document::edit::EditOutcome::Applied { .. }
        ),
        "{written:?}"
    );
}
