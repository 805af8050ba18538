//! Title maintenance over the release binary, on SQLite and PostgreSQL: a document created over
//! MCP without a title is named from its Chat by an isolated worker on the attached client; the
//! job's own draft is still refined after a restart (its record is stored), and once a person
//! renames the document no draft replaces the title (OWN-09, OWN-12, OWN-14).

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, ok};
use chopin_protocol::agent::{ClientMessage, ServerMessage, Started, TurnEnd, TurnStatus};
use serde_json::{json, Value};

async fn open_room(server: &Server, id: &str, cookie: &str) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    room.next_of_type("session:hello").await.unwrap();
    room
}

async fn say(room: &mut BrowserSocket, id: &str, text: &str) {
    room.send_json(&json!({ "type": "chat:send", "requestId": id, "text": text }))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .expect("an answer within 20 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == id => {
                assert_eq!(v["type"], "chat:ack", "{v}");
                return;
            }
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn attach(server: &Server, token: &str, id: &str) -> AgentClient {
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(server.host(), Some(token)))
        .await
        .unwrap();
    let answer = client.attach(id, &[]).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    client
}

/// Serves worker turns on `client` — descriptions answered with a fixed line — until a title
/// turn comes (answered with `title`): its prompt. `None` if none comes within `ms`.
async fn answer_title(client: &mut AgentClient, title: Value, ms: u64) -> Option<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    loop {
        let event = tokio::time::timeout_at(deadline, client.recv())
            .await
            .ok()?;
        let Ok(Event::Message(ServerMessage::Start(start))) = event else {
            continue;
        };
        client
            .send(&ClientMessage::Started(Started {
                session_id: start.session_id,
            }))
            .await
            .unwrap();
        let turn = loop {
            match tokio::time::timeout(Duration::from_secs(20), client.recv())
                .await
                .expect("the worker's turn")
            {
                Ok(Event::Message(ServerMessage::Turn(turn))) => break turn,
                Ok(Event::Message(_)) => {}
                other => panic!("the link ended: {other:?}"),
            }
        };
        let is_title = !turn.instructions.contains("one-line description");
        let output = if is_title {
            json!({ "title": title })
        } else {
            json!({ "description": "Plan about something" })
        };
        client
            .send(&ClientMessage::TurnEnd(TurnEnd {
                turn_id: turn.turn_id.clone(),
                status: TurnStatus::Completed,
                output: Some(output),
                message: None,
            }))
            .await
            .unwrap();
        if is_title {
            return Some(turn.prompt);
        }
    }
}

async fn title(server: &Server, id: &str, cookie: &str) -> String {
    let doc: Value = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}")))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    doc["title"].as_str().unwrap_or_default().to_owned()
}

/// Waits (at most 20 s) for the title to be `want`.
async fn title_becomes(server: &Server, id: &str, cookie: &str, want: &str) {
    for _ in 0..200 {
        if title(server, id, cookie).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the title never became {want:?}: {:?}",
        title(server, id, cookie).await
    );
}

async fn titles_follow_chat(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url)
        .on(&backend)
        .env("BACKGROUND_JOBS", "on");
    let server = launch.clone().start().await;
    let cookie = sign_in(&server, &github, "mona").await;
    let mcp = chopin_fixtures::mcp::connect(&server.url("/mcp"), &mona).await;
    let made = ok(call(
        &mcp,
        "create_document",
        json!({ "repository": "octo/plans", "title": "" }),
    )
    .await);
    drop(mcp);
    let id = made["document"]["id"]
        .as_str()
        .or_else(|| made["id"].as_str())
        .unwrap_or_else(|| panic!("{made}"))
        .to_owned();
    // Messages without @chopin here are for the room: automatic participation is paused, so
    // none becomes a Planner turn (CTX-01) and every turn the client gets is a job's.
    let paused = reqwest::Client::new()
        .put(server.url(&format!("/api/channels/{id}/participation")))
        .header("cookie", &cookie)
        .header("origin", server.origin())
        .json(&json!({ "paused": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status().as_u16(), 200);
    let mut client = attach(&server, &mona, &id).await;
    let mut room = open_room(&server, &id, &cookie).await;
    say(&mut room, "m1", "We need a plan for the search revamp.").await;
    let prompt = answer_title(&mut client, json!("Search revamp"), 20_000)
        .await
        .expect("a title draft");
    assert!(
        prompt.contains("@mona: We need a plan for the search revamp."),
        "{prompt}"
    );
    title_becomes(&server, &id, &cookie, "Search revamp").await;

    // After a restart the job's own draft may still be refined: its record is stored.
    let again = launch.at(&server);
    let (status, _) = server.stop().await;
    assert!(status.success());
    drop(client);
    let server = again.start().await;
    let cookie = sign_in(&server, &github, "mona").await;
    let mut client = attach(&server, &mona, &id).await;
    let mut room = open_room(&server, &id, &cookie).await;
    say(&mut room, "m2", "It is mostly about typo tolerance.").await;
    let prompt = answer_title(&mut client, json!("Typo-tolerant search"), 20_000)
        .await
        .expect("a second draft");
    assert!(prompt.contains("Current title: Search revamp"), "{prompt}");
    title_becomes(&server, &id, &cookie, "Typo-tolerant search").await;

    // A person renames it: no draft replaces their title.
    let renamed = reqwest::Client::new()
        .post(server.url(&format!("/api/documents/{id}/rename")))
        .bearer_auth(&mona)
        .json(&json!({ "title": "Search v2" }))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 200);
    say(&mut room, "m3", "Let's also plan the ranking.").await;
    assert!(
        answer_title(&mut client, json!("Ranking"), 2_000)
            .await
            .is_none(),
        "no title worker once a person chose the title"
    );
    assert_eq!(title(&server, &id, &cookie).await, "Search v2");
}

#[tokio::test]
async fn own_09_own_14_titles_follow_chat_until_a_person_renames_on_sqlite() {
    titles_follow_chat(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn own_09_own_14_titles_follow_chat_until_a_person_renames_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    titles_follow_chat(Backend::Postgres(db)).await;
}
