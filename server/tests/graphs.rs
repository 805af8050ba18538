//! The Planner's implementation-graph tools on the remote harness: `read_implementation_graph`
//! and `edit_implementation_graph` draft and revise a document's graph from the current plan;
//! no Planner tool approves, locks or starts one (GRA-01, LIFE-04, RULINGS GRA-04). A person's
//! approval and a run's claim are played here through the store, as the Build plan press and
//! the MCP claim will make them.

use chopin_server::store::{GraphChange, GraphCounters, GraphState};
use serde_json::{json, Value};

mod support;

use support::{begin_turn, call_host_tool, served};

fn tasks(ids: &[(&str, &[&str])]) -> Value {
    json!(ids
        .iter()
        .map(|(id, deps)| json!({
            "id": id,
            "title": format!("Do {id}"),
            "acceptanceCriteria": [format!("{id} works")],
            "dependsOn": deps,
        }))
        .collect::<Vec<_>>())
}

#[tokio::test]
async fn gra_01_life_04_the_planner_drafts_and_revises_a_graph_but_nothing_it_has_approves() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin break the plan into tasks").await;
    let names: Vec<&str> = begun.host_tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"read_implementation_graph"), "{names:?}");
    assert!(names.contains(&"edit_implementation_graph"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("approve")
            || n.contains("claim")
            || n.contains("lock")
            || n.contains("start_implementation")),
        "GRA-01: no tool approves, locks or starts: {names:?}"
    );
    let turn = begun.turn.as_str();
    let plan_revision = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;

    let read = call_host_tool(
        &mut client,
        turn,
        "r1",
        "read_implementation_graph",
        json!({}),
    )
    .await;
    assert!(!read.is_error, "{:?}", read.output);
    assert_eq!(read.output["graph"], Value::Null);
    assert_eq!(read.output["planRevision"], plan_revision);

    let drafted = call_host_tool(
        &mut client,
        turn,
        "e1",
        "edit_implementation_graph",
        json!({ "base": null, "tasks": tasks(&[("schema", &[]), ("api", &["schema"])]) }),
    )
    .await;
    assert!(!drafted.is_error, "{:?}", drafted.output);
    assert_eq!(
        (
            &drafted.output["graphVersion"],
            &drafted.output["graphRevision"],
            &drafted.output["state"]
        ),
        (&json!(1), &json!(1), &json!("draft"))
    );
    assert_eq!(drafted.output["tasks"][1]["dependsOn"], json!(["schema"]));

    // A second draft from the same (stale) read is refused, and so is a cycle; neither changes
    // the stored graph.
    let stale = call_host_tool(
        &mut client,
        turn,
        "e2",
        "edit_implementation_graph",
        json!({ "base": null, "tasks": tasks(&[("x", &[])]) }),
    )
    .await;
    assert!(stale.is_error);
    assert!(
        stale
            .output
            .as_str()
            .unwrap()
            .contains("changed since you read it"),
        "{:?}",
        stale.output
    );
    let cycle = call_host_tool(
        &mut client,
        turn,
        "e3",
        "edit_implementation_graph",
        json!({ "base": { "graphVersion": 1, "graphRevision": 1 },
                "tasks": tasks(&[("a", &["b"]), ("b", &["a"])]) }),
    )
    .await;
    assert!(cycle.is_error);
    assert!(
        cycle.output.as_str().unwrap().contains("cycle: a → b → a"),
        "{:?}",
        cycle.output
    );
    let stored = s.store.graph_versions(s.doc).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].counters.graph_revision, 1);

    let revised = call_host_tool(
        &mut client,
        turn,
        "e4",
        "edit_implementation_graph",
        json!({ "base": { "graphVersion": 1, "graphRevision": 1 },
                "tasks": tasks(&[("schema", &[]), ("api", &["schema"]), ("ui", &["api"])]) }),
    )
    .await;
    assert!(!revised.is_error, "{:?}", revised.output);
    assert_eq!(revised.output["graphRevision"], 2);

    // A person approves it (the Build plan press); the Planner's next edit drafts version 2
    // beside it, which supersedes nothing (LIFE-37).
    s.store
        .change_graph(
            s.doc,
            &GraphChange::Approve {
                graph_version: 1,
                graph_revision: 2,
                current_plan_revision: plan_revision,
            },
            1,
        )
        .await
        .unwrap()
        .unwrap();
    let replacement = call_host_tool(
        &mut client,
        turn,
        "e5",
        "edit_implementation_graph",
        json!({ "base": { "graphVersion": 1, "graphRevision": 2 },
                "tasks": tasks(&[("schema", &[])]) }),
    )
    .await;
    assert!(!replacement.is_error, "{:?}", replacement.output);
    assert_eq!(replacement.output["graphVersion"], 2);
    let states: Vec<GraphState> = s
        .store
        .graph_versions(s.doc)
        .await
        .unwrap()
        .iter()
        .map(|v| v.state)
        .collect();
    assert_eq!(states, [GraphState::Approved, GraphState::Draft]);
    let read = call_host_tool(
        &mut client,
        turn,
        "r2",
        "read_implementation_graph",
        json!({}),
    )
    .await;
    assert_eq!(read.output["graph"]["graphVersion"], 2);
    assert_eq!(
        read.output["versions"],
        json!([{ "graphVersion": 1, "state": "approved" }, { "graphVersion": 2, "state": "draft" }])
    );
}

#[tokio::test]
async fn life_33_while_a_run_holds_a_version_the_planner_cannot_change_the_graph() {
    let s = served().await;
    let plan_revision = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    let definition = r#"{"tasks":[{"id":"a","title":"Do a"}]}"#;
    for change in [
        GraphChange::Edit {
            base: None,
            plan_revision,
            definition: definition.into(),
        },
        GraphChange::Approve {
            graph_version: 1,
            graph_revision: 1,
            current_plan_revision: plan_revision,
        },
        GraphChange::Claim {
            counters: GraphCounters {
                plan_revision,
                graph_version: 1,
                graph_revision: 1,
            },
            run_id: "run-1".into(),
        },
    ] {
        s.store
            .change_graph(s.doc, &change, 1)
            .await
            .unwrap()
            .unwrap();
    }
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin add a task").await;
    let edit = call_host_tool(
        &mut client,
        &begun.turn,
        "e1",
        "edit_implementation_graph",
        json!({ "base": { "graphVersion": 1, "graphRevision": 1 }, "tasks": tasks(&[("a", &[]), ("b", &["a"])]) }),
    )
    .await;
    assert!(edit.is_error);
    assert!(
        edit.output
            .as_str()
            .unwrap()
            .contains("an implementation run holds version 1"),
        "{:?}",
        edit.output
    );
    let read = call_host_tool(
        &mut client,
        &begun.turn,
        "r1",
        "read_implementation_graph",
        json!({}),
    )
    .await;
    assert_eq!(read.output["graph"]["state"], "locked");
}

/// LIFE-65, LIFE-70: while a run holds the graph, the plan takes no edit through the server —
/// the Planner's `edit_plan`, MCP `update_document` — and no new question or decision opens;
/// archiving the document releases nothing; once the run ends, the plan takes edits again.
#[tokio::test]
async fn life_65_life_70_a_held_graph_locks_the_plan_until_its_run_ends() {
    use chopin_fixtures::mcp::{call, connect, refusal};
    let s = served().await;
    let plan_revision = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    let claim = GraphCounters {
        plan_revision,
        graph_version: 1,
        graph_revision: 1,
    };
    for change in [
        GraphChange::Edit {
            base: None,
            plan_revision,
            definition: r#"{"tasks":[{"id":"a","title":"Do a"}]}"#.into(),
        },
        GraphChange::Approve {
            graph_version: 1,
            graph_revision: 1,
            current_plan_revision: plan_revision,
        },
        GraphChange::Claim {
            counters: claim,
            run_id: "run-1".into(),
        },
    ] {
        s.store
            .change_graph(s.doc, &change, 1)
            .await
            .unwrap()
            .unwrap();
    }
    let held = "an implementation run holds version 1 of this plan's graph";
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin tighten the plan").await;
    let edit = json!({ "revision": plan_revision, "ops": [{ "op": "insert", "after": null, "content": "One more step.\n" }] });
    let refused = call_host_tool(&mut client, &begun.turn, "e1", "edit_plan", edit.clone()).await;
    // A refused edit is a structured result with its status (CTX-10).
    assert_eq!(refused.output["status"], "locked", "{refused:?}");
    assert!(
        refused.output["message"].as_str().unwrap().contains(held),
        "{:?}",
        refused.output
    );
    let card = json!({ "question": "Which export format?", "key": "format", "options": [{ "label": "CSV" }, { "label": "JSON" }] });
    for (n, (tool, input)) in [
        (
            "ask",
            json!({ "questions": [{ "question": "Which region first?" }] }),
        ),
        ("open_decision", card.clone()),
        ("open_decisions", json!({ "decisions": [card] })),
    ]
    .into_iter()
    .enumerate()
    {
        let asked = call_host_tool(&mut client, &begun.turn, &format!("q{n}"), tool, input).await;
        assert!(asked.is_error, "{tool}: {asked:?}");
        assert!(
            asked.output.to_string().contains(held),
            "{tool}: {:?}",
            asked.output
        );
    }

    let mcp = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let (code, body) = refusal(
        call(
            &mcp,
            "update_document",
            json!({ "document": s.doc, "planRevision": plan_revision, "source": "# Replaced\n", "idempotencyKey": "u1" }),
        )
        .await,
    );
    assert_eq!(code, "locked", "{body}");
    assert!(body["message"].as_str().unwrap().contains(held), "{body}");
    assert_eq!(
        s.store
            .document(s.doc)
            .await
            .unwrap()
            .unwrap()
            .plan_revision,
        plan_revision,
        "nothing was written"
    );

    // Archiving releases nothing (LIFE-70).
    s.store.set_archived(s.doc, true).await.unwrap();
    s.store.set_archived(s.doc, false).await.unwrap();
    assert_eq!(
        s.store.graph_versions(s.doc).await.unwrap()[0].state,
        GraphState::Locked
    );

    let end = GraphChange::EndRun {
        graph_version: 1,
        run_id: "run-1".into(),
        end: chopin_server::store::RunEnd::RevisionRequested,
    };
    s.store.change_graph(s.doc, &end, 2).await.unwrap().unwrap();
    let edited = call_host_tool(&mut client, &begun.turn, "e2", "edit_plan", edit).await;
    assert_eq!(edited.output["status"], "applied", "{edited:?}");
}

/// GRA-02: the graph tools stay available in any channel: a turn a child document's room
/// started (it runs on the root's Planner, ISO-25) offers both.
#[tokio::test]
async fn gra_02_a_turn_from_a_child_documents_room_offers_the_graph_tools() {
    let s = served().await;
    let child = uuid::Uuid::from_u128(0xc41d);
    s.store
        .create_document(&chopin_server::store::NewDocument {
            id: child,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "notes-child".into(),
            title: "Child".into(),
            created_at_ms: 0,
            parent_id: Some(s.doc),
            ..chopin_server::store::NewDocument::default()
        })
        .await
        .unwrap();
    let mut client = s.attach(&[]).await;
    let mut room = s.room_as(child, &s.mona_cookie).await;
    let begun = begin_turn(&mut client, &mut room, "@chopin break this part down").await;
    let offered: Vec<&str> = begun.host_tools.iter().map(|t| t.name.as_str()).collect();
    for tool in ["read_implementation_graph", "edit_implementation_graph"] {
        assert!(offered.contains(&tool), "{tool} in {offered:?}");
    }
}
