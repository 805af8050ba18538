//! A research request over the release binary, on SQLite and PostgreSQL: `/research` in the
//! room starts background work on the attached client — a public worker with `web_search`
//! through GitHub's MCP server, then two private workers — and the report is published as a
//! child document of the one it was asked from, which keeps its own text (JOB-04, JOB-06..08).

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::github_mcp::FakeGitHubMcp;
use chopin_fixtures::mcp::{call, ok};
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, ServerMessage, Started, Turn, TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(20), client.recv())
        .await
        .expect("a frame within 20 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

/// The next worker turn that is not a description's or a title's (answered at once).
async fn worker_turn(client: &mut AgentClient) -> Turn {
    loop {
        let ServerMessage::Start(start) = next(client).await else {
            continue;
        };
        client
            .send(&ClientMessage::Started(Started {
                session_id: start.session_id,
            }))
            .await
            .unwrap();
        let turn = loop {
            if let ServerMessage::Turn(turn) = next(client).await {
                break turn;
            }
        };
        let routine = if turn.instructions.contains("one-line description") {
            Some(json!({ "description": "Plan for checkout" }))
        } else if turn.instructions.contains("title of a planning document") {
            Some(json!({ "title": null }))
        } else {
            None
        };
        match routine {
            Some(output) => end(client, &turn.turn_id, output).await,
            None => return turn,
        }
    }
}

async fn end(client: &mut AgentClient, turn: &str, output: Value) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.to_owned(),
            status: TurnStatus::Completed,
            output: Some(output),
            message: None,
        }))
        .await
        .unwrap();
}

async fn research_publishes_a_child(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let github_mcp = FakeGitHubMcp::new(github.clone());
    let mcp_url = github_mcp.serve_tcp().await.unwrap();
    let server: Server = Launch::hosted(&github_url)
        .on(&backend)
        .env("BACKGROUND_JOBS", "on")
        .env("GITHUB_MCP_URL", mcp_url)
        .start()
        .await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Checkout")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let mcp = chopin_fixtures::mcp::connect(&server.url("/mcp"), &mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": doc["url"], "planRevision": 0, "source": "# Checkout\n\nOne region serves the EU.\n", "idempotencyKey": "e2e-research"}),
    )
    .await);
    drop(mcp);
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(server.host(), Some(&mona)))
        .await
        .unwrap();
    assert!(matches!(
        client.attach(&id, &[]).await.unwrap(),
        ServerMessage::Attached(_)
    ));
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    room.next_of_type("session:hello").await.unwrap();
    room.send_json(&json!({
        "type": "chat:send", "requestId": "r1", "text": "/research edge caching in the EU",
        "references": [{ "type": "command", "name": "research", "commandKind": "chopin", "start": 0, "end": 9 }]
    }))
    .await
    .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .unwrap()
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == "r1" => {
                assert_eq!(v["type"], "chat:ack", "{v}");
                break;
            }
            _ => {}
        }
    }

    let evidence = worker_turn(&mut client).await;
    assert_eq!(evidence.prompt, "edge caching in the EU");
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: evidence.turn_id.clone(),
            call_id: "c1".into(),
            name: "web_search".into(),
            input: json!({ "query": "EU edge caching" }),
        }))
        .await
        .unwrap();
    let found = loop {
        if let ServerMessage::HostToolResult(r) = next(&mut client).await {
            assert!(!r.is_error, "{r:?}");
            break serde_json::from_str::<Value>(r.output.as_str().unwrap()).unwrap();
        }
    };
    let url = found["results"][0]["url"].as_str().unwrap().to_owned();
    end(
        &mut client,
        &evidence.turn_id,
        json!({ "findings": ["Edge caches cut latency."], "sources": [{ "url": url, "title": "Overview" }] }),
    )
    .await;
    let analysis = worker_turn(&mut client).await;
    assert!(analysis.prompt.contains("One region serves the EU."));
    end(
        &mut client,
        &analysis.turn_id,
        json!({ "findings": ["One region."] }),
    )
    .await;
    let report = worker_turn(&mut client).await;
    end(
        &mut client,
        &report.turn_id,
        json!({ "title": "EU edge caching", "body": format!("Cache at the edge ([source]({url})).") }),
    )
    .await;

    // The child appears in the repository's documents, under its parent.
    let mut child = None;
    for _ in 0..200 {
        let listed: Value = reqwest::Client::new()
            .get(server.url("/api/repositories/octo/plans/documents"))
            .bearer_auth(&mona)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(c) = listed["documents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["parentId"] == id.as_str())
        {
            child = Some(c.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let child = child.expect("the report as a child document");
    assert_eq!(child["title"], "EU edge caching");
    // The child is made first and its report written into it next: read until it is there.
    let mut source = Value::Null;
    for _ in 0..100 {
        source = reqwest::Client::new()
            .get(server.url(&format!(
                "/api/documents/{}/source",
                child["id"].as_str().unwrap()
            )))
            .bearer_auth(&mona)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if source["source"]
            .as_str()
            .is_some_and(|s| s.contains("Cache at the edge"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        source["source"]
            .as_str()
            .unwrap()
            .contains("Cache at the edge"),
        "{source}"
    );
    let parent: Value = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}/source")))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        parent["source"],
        "# Checkout\n\nOne region serves the EU.\n"
    );
}

#[tokio::test]
async fn job_08_research_publishes_its_report_as_a_child_on_sqlite() {
    research_publishes_a_child(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn job_08_research_publishes_its_report_as_a_child_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    research_publishes_a_child(Backend::Postgres(db)).await;
}
