//! Mentions end to end over the release binary, on SQLite and PostgreSQL: a document written
//! through `/mcp`, a writer's message in the room mentioning one of its headings, a Decision and
//! a repository file, kept with the labels the server wrote; the mentions route narrowing them
//! for a reader; and a heading that has gone refused in the spec's words.

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, connect, ok};
use serde_json::{json, Value};

const SOURCE: &str = "# Overview\n\nWhy.\n\n## Roll-out\n\nCanary first.\n\n```decision\nid: d-region\nstate: open\nheader: Region\nquestion: Which region first?\n```\n";

async fn answer(room: &mut BrowserSocket, frame: Value) -> Value {
    room.send_json(&frame).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .expect("an answer within 20 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == frame["requestId"] => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn mentions_of_parts(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.put_file("octo", "plans", "src/index.ts", "export {}\n");
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let server = Launch::hosted(&github_url).on(&backend).start().await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Mentions")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let mcp = connect(&server.url("/mcp"), &mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": doc["url"], "planRevision": 0, "source": SOURCE, "idempotencyKey": "e2e-mentions"}),
    )
    .await);
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
    let ack = answer(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-1", "text": "see @Roll-out, @Region and @index.ts",
               "references": [{"type": "heading", "anchor": "roll-out"},
                              {"type": "decision", "decisionId": "d-region"},
                              {"type": "file", "path": "src/index.ts"}]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let message = room.next_of_type("chat:message").await.unwrap();
    assert_eq!(
        message["references"],
        json!([
            {"type": "heading", "anchor": "roll-out", "label": "Roll-out", "level": 2, "line": 5},
            {"type": "decision", "decisionId": "d-region", "label": "Region"},
            {"type": "file", "path": "src/index.ts", "label": "src/index.ts"}
        ])
    );
    let gone = answer(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-2", "text": "see",
               "references": [{"type": "heading", "anchor": "summary"}]}),
    )
    .await;
    assert_eq!(
        gone["message"],
        "That heading is no longer in the document."
    );
    let offered: Value = reqwest::Client::new()
        .get(server.url(&format!("/api/channels/{id}/mentions?query=roll")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        offered["headings"],
        json!([{"anchor": "roll-out", "text": "Roll-out", "level": 2}])
    );
    assert_eq!(offered["decisions"], json!([]));
    assert_eq!(offered["files"], json!([]));
    // Kept with the message across a restart, in the same shape.
    let launch = Launch::hosted(&github_url).on(&backend).at(&server);
    server.stop().await;
    let server = launch.start().await;
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
    room.send_json(&json!({"type": "chat:history", "limit": 10}))
        .await
        .unwrap();
    let history = room.next_of_type("chat:history").await.unwrap();
    assert_eq!(history["entries"][0]["references"], message["references"]);
}

#[tokio::test]
async fn mentions_are_resolved_kept_and_offered_on_sqlite() {
    mentions_of_parts(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn mentions_are_resolved_kept_and_offered_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    mentions_of_parts(Backend::Postgres(db)).await;
}
