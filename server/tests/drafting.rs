//! Drafting tasks from Build plan (implementation-lifecycle.md): the room's
//! `implementation:draft`, its checks, the notice and the turn it starts, one live draft per
//! document, and the `implementation:drafting` broadcast — each rule under its checklist id.

use std::time::Duration;

use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::Permission;
use chopin_fixtures::mcp::{call, connect, ok};
use chopin_protocol::agent::{ClientMessage, ServerMessage, Started};
use chopin_server::store::{GraphChange, GraphCounters, NewDocument, RunEnd};
use serde_json::{json, Value};

mod support;

use support::{ask_room, begin_turn, call_host_tool, end_turn, next, served, Served};

/// Replaces the cast document's source through MCP (mona).
async fn write_plan(s: &Served, source: &str) {
    let mcp = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let read = ok(call(&mcp, "read_document", json!({"document": s.doc})).await);
    ok(call(
        &mcp,
        "update_document",
        json!({"document": s.doc, "planRevision": read["revision"], "source": source,
               "idempotencyKey": format!("w-{}", source.len())}),
    )
    .await);
}

async fn press(room: &mut BrowserSocket, id: &str) -> Value {
    let reply = ask_room(
        room,
        json!({ "type": "implementation:draft", "requestId": id }),
    )
    .await;
    assert_eq!(reply["type"], "implementation:draft", "{reply}");
    reply
}

/// The `implementation:drafting` states `room` is told, until it is told `until`.
async fn drafting_until(room: &mut BrowserSocket, until: &str) -> Vec<(String, String)> {
    let mut told = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), room.recv_json())
            .await
            .expect("a frame within 10 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == "implementation:drafting" => {
                let state = v["state"].as_str().unwrap().to_owned();
                told.push((v["draftId"].as_str().unwrap().to_owned(), state.clone()));
                if state == until {
                    return told;
                }
            }
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn chat_lines(s: &Served) -> Vec<(String, String)> {
    s.state.transcript.settled().await;
    s.store
        .transcript(s.doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.body))
        .collect()
}

const PLAN: &str = "# Notes\n\nShip the importer, then its page.\n";
const NOTICE: &str = "@mona asked chopin to break the plan into tasks.";

/// LIFE-18, LIFE-19, LIFE-20, LIFE-22, LIFE-25, LIFE-08: a writer's press writes the
/// instruction itself and starts a turn of its own under the presser's login; Chat records a
/// notice naming the presser, saved before the turn starts, and no member message; a second
/// press while the draft runs answers the same draft; the room is told queued, running, ended,
/// and at `ended` the tasks the turn saved are in storage; the plan then has tasks for its
/// revision, so another press is refused.
#[tokio::test]
async fn life_18_life_19_life_20_life_22_life_25_a_press_runs_one_draft_turn_under_the_presser() {
    let s = served().await;
    write_plan(&s, PLAN).await;
    let mut client = s.attach(&[]).await;
    let mut watcher = s.room().await;
    let mut room = s.room().await;

    let reply = press(&mut room, "d1").await;
    assert_eq!(
        (&reply["ok"], &reply["existing"], &reply["state"]),
        (&json!(true), &json!(false), &json!("running")),
        "{reply}"
    );
    let draft = reply["draftId"].as_str().unwrap().to_owned();
    let session = match next(&mut client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session,
        }))
        .await
        .unwrap();
    let turn = match next(&mut client).await {
        ServerMessage::Turn(t) => t,
        other => panic!("expected turn, got {other:?}"),
    };
    assert!(
        turn.prompt.contains("@mona pressed Build plan")
            && turn.prompt.contains("edit_implementation_graph")
            && turn.prompt.contains("Do not edit the plan's prose"),
        "{}",
        turn.prompt
    );
    // The notice was saved before the turn started, and no member message was posted.
    let lines = chat_lines(&s).await;
    assert_eq!(lines, [("system".to_owned(), NOTICE.to_owned())]);

    // LIFE-22: pressed again while it runs: the same draft.
    let again = press(&mut room, "d2").await;
    assert_eq!(
        (&again["draftId"], &again["existing"], &again["state"]),
        (&json!(draft), &json!(true), &json!("running"))
    );

    let saved = call_host_tool(
        &mut client,
        &turn.turn_id,
        "g1",
        "edit_implementation_graph",
        json!({ "base": null, "tasks": [{ "id": "importer", "title": "Ship the importer" }, { "id": "page", "title": "Its page", "dependsOn": ["importer"] }] }),
    )
    .await;
    assert!(!saved.is_error, "{saved:?}");
    end_turn(&s, &mut client, &turn.turn_id).await;
    let told = drafting_until(&mut watcher, "ended").await;
    assert_eq!(
        told,
        [
            (draft.clone(), "queued".to_owned()),
            (draft.clone(), "running".to_owned()),
            (draft.clone(), "ended".to_owned())
        ]
    );
    let versions = s.store.graph_versions(s.doc).await.unwrap();
    assert_eq!(versions.len(), 1, "the tasks are stored when ended is told");

    // LIFE-08: the plan's revision has its tasks now.
    let refused = press(&mut room, "d3").await;
    assert_eq!(refused["code"], "already-drafted", "{refused}");
    assert_eq!(
        chat_lines(&s).await.len(),
        1,
        "a refused press posts nothing"
    );
}

/// RULINGS LIFE-27 (CMD-21): nothing queues behind a running turn: a press while one runs is
/// refused with the words, and nothing is posted.
#[tokio::test]
async fn life_27_a_press_while_a_turn_runs_is_refused_and_posts_nothing() {
    let s = served().await;
    write_plan(&s, PLAN).await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin read the plan").await;
    let before = chat_lines(&s).await.len();
    let refused = press(&mut room, "d1").await;
    assert_eq!(
        (&refused["ok"], &refused["code"], &refused["message"]),
        (
            &json!(false),
            &json!("planner-busy"),
            &json!("Chopin is working on something else. Try again when it has finished.")
        )
    );
    assert_eq!(chat_lines(&s).await.len(), before);
    end_turn(&s, &mut client, &begun.turn).await;
}

/// LIFE-08, LIFE-18: refused for a reader, an empty plan, unresolved Decisions, a child
/// document and an active implementation; once the build was returned for changes, a press
/// drafts again.
#[tokio::test]
async fn life_08_life_18_what_a_press_is_refused_for() {
    let s = served().await;
    let mut room = s.room().await;
    let refused = press(&mut room, "e1").await;
    assert_eq!(refused["code"], "document-empty", "{refused}");

    write_plan(
        &s,
        "# Notes\n\nShip it.\n\n```decision\nid: format\nstate: open\nquestion: Which format?\n```\n",
    )
    .await;
    let refused = press(&mut room, "e2").await;
    assert_eq!(refused["code"], "decisions-open", "{refused}");

    let lisa = s.sign_in("lisa", 1010, Permission::Read).await;
    let mut reader = s.room_as(s.doc, &lisa).await;
    let refused = press(&mut reader, "e3").await;
    assert_eq!(refused["code"], "read-only", "{refused}");

    let child = uuid::Uuid::from_u128(0x5eed_c41d);
    s.store
        .create_document(&NewDocument {
            id: child,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "notes-child".into(),
            title: "Child".into(),
            created_at_ms: 0,
            parent_id: Some(s.doc),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let mut child_room = s.room_as(child, &s.mona_cookie).await;
    let refused = press(&mut child_room, "e4").await;
    assert_eq!(refused["code"], "child-document", "{refused}");

    write_plan(&s, PLAN).await;
    let plan = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    let counters = GraphCounters {
        plan_revision: plan,
        graph_version: 1,
        graph_revision: 1,
    };
    for change in [
        GraphChange::Edit {
            base: None,
            plan_revision: plan,
            definition: r#"{"tasks":[{"id":"a","title":"Do a"}]}"#.into(),
        },
        GraphChange::Approve {
            graph_version: 1,
            graph_revision: 1,
            current_plan_revision: plan,
        },
        GraphChange::Claim {
            counters,
            run_id: "run-1".into(),
        },
    ] {
        s.store
            .change_graph(s.doc, &change, 1)
            .await
            .unwrap()
            .unwrap();
    }
    let refused = press(&mut room, "e5").await;
    assert_eq!(refused["code"], "implementation-active", "{refused}");

    // The build is returned for changes: a new draft may be asked for.
    let end = GraphChange::EndRun {
        graph_version: 1,
        run_id: "run-1".into(),
        end: RunEnd::RevisionRequested,
    };
    s.store.change_graph(s.doc, &end, 2).await.unwrap().unwrap();
    let _client = s.attach(&[]).await;
    let started = press(&mut room, "e6").await;
    assert_eq!(started["ok"], true, "{started}");
    assert!(chat_lines(&s).await.iter().any(|(_, body)| body == NOTICE));
}
