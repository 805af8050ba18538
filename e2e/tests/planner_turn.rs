//! A Planner turn end to end over the spawned binary: a person's `@chopin` message in the room
//! starts a turn on the attached (scripted) client, which calls `read_plan`, then `edit_plan`,
//! and streams its reply; the reply lands in Chat and the document changed.

use std::time::Duration;

use chopin_e2e::{sign_in, Launch};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, Part, PartMessage, ServerMessage, Started, TextPart, TurnEnd,
    TurnStatus,
};
use serde_json::{json, Value};

async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(15), client.recv())
        .await
        .expect("a frame within 15 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

async fn call(client: &mut AgentClient, turn: &str, id: &str, name: &str, input: Value) -> Value {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: id.into(),
            name: name.into(),
            input,
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::HostToolResult(r) => {
            assert!(!r.is_error, "{name} failed: {}", r.output);
            r.output
        }
        other => panic!("expected host-tool-result, got {other:?}"),
    }
}

#[tokio::test]
async fn an_at_chopin_message_runs_a_turn_that_reads_edits_and_replies() {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Launch::hosted(&github_url)
        .env("HOME", home.path().to_string_lossy())
        .start()
        .await;
    let (host, origin) = (server.host(), server.origin());
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Turn notes")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();

    // The Planner client attaches; a browser joins the room.
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona)))
        .await
        .unwrap();
    let attached = client.attach(&id, &["steer-turn"]).await.unwrap();
    assert!(
        matches!(attached, ServerMessage::Attached(_)),
        "{attached:?}"
    );
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut browser = BrowserSocket::connect(
        stream,
        &host,
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&origin),
    )
    .await
    .unwrap();
    browser.next_of_type("session:planner").await.unwrap();

    browser
        .send_json(
            &json!({ "type": "chat:send", "requestId": "r-1", "text": "@chopin add a heading" }),
        )
        .await
        .unwrap();
    let ack = browser.next_of_type("chat:ack").await.unwrap();
    assert_eq!(ack["planner"], "started", "{ack}");

    // The client's turn: read, edit, reply.
    let session = match next(&mut client).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    let turn = match next(&mut client).await {
        ServerMessage::Turn(t) => {
            assert_eq!(t.prompt, "@mona: @chopin add a heading");
            t.turn_id
        }
        other => panic!("expected turn, got {other:?}"),
    };
    let read = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert!(read.as_str().unwrap().contains("revision: 0"), "{read}");
    let edit = call(
        &mut client,
        &turn,
        "c2",
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Heading from chopin\n" }] }),
    )
    .await;
    assert_eq!(edit["status"], "applied", "{edit}");
    for text in ["I added ", "a heading."] {
        client
            .send(&ClientMessage::Part(PartMessage {
                turn_id: turn.clone(),
                part: Part::Text(TextPart { text: text.into() }),
            }))
            .await
            .unwrap();
    }
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    match next(&mut client).await {
        ServerMessage::Destroy(d) => assert_eq!(d.session_id, session),
        other => panic!("expected destroy, got {other:?}"),
    }

    // The reply lands in Chat (after the person's message) …
    let mine = browser.next_of_type("chat:message").await.unwrap();
    assert_eq!(
        (mine["author"].clone(), mine["text"].clone()),
        (json!("mona"), json!("@chopin add a heading"))
    );
    let reply = browser.next_of_type("chat:message").await.unwrap();
    assert_eq!(reply["kind"], "planner", "{reply}");
    assert_eq!(reply["text"], "I added a heading.");
    // … and the document changed.
    let page = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}/read")))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.ends_with("# Heading from chopin\n"), "{page}");
    assert!(page.contains("revision: 1"), "{page}");
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains(&mona), "no token in the log");
}
