//! Anchored prose updates over the release binary, on SQLite and PostgreSQL: a writer answers a
//! Decision the Planner opened about a passage; the passage is rewritten by a worker on the
//! attached client and written with the Decision's new anchor and its applied answers in one
//! edit; the same answer is handed to a Planner turn. A lost or ambiguous passage is refused
//! with nothing written (COA-15..21).

use std::time::Duration;

use chopin_document::blocks::block_digest;
use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, ok};
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, PartMessage, ServerMessage, Started, TextPart, Turn, TurnEnd,
    TurnStatus,
};
use serde_json::{json, Value};

const PASSAGE: &str = "The export ships weekly.\n";

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

async fn end(client: &mut AgentClient, turn: &str, output: Option<Value>) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.to_owned(),
            status: TurnStatus::Completed,
            output,
            message: None,
        }))
        .await
        .unwrap();
}

/// The next turn that is not a description's or a title's (those are answered at once).
async fn next_turn(client: &mut AgentClient) -> Turn {
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
            Some(json!({ "description": "Plan for the export" }))
        } else if turn.instructions.contains("title of a planning document") {
            Some(json!({ "title": null }))
        } else {
            None
        };
        match routine {
            Some(output) => end(client, &turn.turn_id, Some(output)).await,
            None => return turn,
        }
    }
}

async fn host_tool(client: &mut AgentClient, turn: &str, name: &str, input: Value) -> Value {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: format!("c-{name}"),
            name: name.into(),
            input,
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            assert!(!r.is_error, "{r:?}");
            return match &r.output {
                Value::String(s) => serde_json::from_str(s).unwrap_or(r.output.clone()),
                other => other.clone(),
            };
        }
    }
}

struct World {
    server: Server,
    client: AgentClient,
    room: BrowserSocket,
    mona: String,
    id: String,
    url: String,
    _github: FakeGitHub,
    _backend: Backend,
}

async fn world(backend: Backend, source: &str) -> World {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let server: Server = Launch::hosted(&github_url)
        .on(&backend)
        .env("BACKGROUND_JOBS", "on")
        .start()
        .await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Export").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let url = doc["url"].as_str().unwrap().to_owned();
    let mcp = chopin_fixtures::mcp::connect(&server.url("/mcp"), &mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": url, "planRevision": 0, "source": source, "idempotencyKey": "e2e-prose"}),
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
    World {
        server,
        client,
        room,
        mona,
        id,
        url,
        _github: github,
        _backend: backend,
    }
}

/// A frame answering `request_id` on the room.
async fn answer_of(room: &mut BrowserSocket, request_id: &str) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .unwrap()
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == request_id => return v,
            _ => {}
        }
    }
}

/// mona asks the Planner; its turn opens one card about `block`; the card's id. The document's
/// description worker may be at work on the client when she asks (the document was just
/// written): a Planner turn cannot start beside it, so she is told `planner-busy`, the worker
/// is answered, and she asks again.
async fn open_card(w: &mut World, block: &str) -> String {
    let mut asked = 0;
    let turn = loop {
        asked += 1;
        let id = format!("r{asked}");
        w.room
            .send_json(
                &json!({ "type": "chat:send", "requestId": id, "text": "@chopin plan the export" }),
            )
            .await
            .unwrap();
        let answer = answer_of(&mut w.room, &id).await;
        if answer["type"] == "chat:ack" {
            break next_turn(&mut w.client).await;
        }
        assert_eq!(answer["code"], "planner-busy", "{answer}");
        assert!(asked < 5, "still busy after {asked} tries: {answer}");
        // The routine worker's turn is answered; none other is waiting.
        let _ = tokio::time::timeout(Duration::from_secs(2), next_turn(&mut w.client)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let opened = host_tool(
        &mut w.client,
        &turn.turn_id,
        "open_decisions",
        json!({ "block": block, "decisions": [{ "key": "cadence", "question": "How often should the export ship?",
                "options": [{ "label": "Daily" }, { "label": "Weekly" }] }] }),
    )
    .await;
    let card = opened["decisions"][0].as_str().unwrap().to_owned();
    w.client
        .send(&ClientMessage::Part(PartMessage {
            turn_id: turn.turn_id.clone(),
            part: chopin_protocol::agent::Part::Text(TextPart {
                text: "I opened the cadence as a card.".into(),
            }),
        }))
        .await
        .unwrap();
    end(&mut w.client, &turn.turn_id, None).await;
    card
}

async fn answer(w: &mut World, card: &str) {
    w.room
        .send_json(&json!({ "type": "decision:answer", "requestId": "a1", "decision": card, "options": [0] }))
        .await
        .unwrap();
    let answered = answer_of(&mut w.room, "a1").await;
    assert_eq!(answered["type"], "decision:answered", "{answered}");
}

async fn source(w: &World) -> String {
    let v: Value = reqwest::Client::new()
        .get(w.server.url(&format!("/api/documents/{}/source", w.id)))
        .bearer_auth(&w.mona)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["source"].as_str().unwrap().to_owned()
}

/// The document's prose-update job once it has settled.
async fn settled_prose_job(w: &World) -> Value {
    for _ in 0..200 {
        let v: Value = reqwest::Client::new()
            .get(w.server.url(&format!("/api/documents/{}/jobs", w.id)))
            .bearer_auth(&w.mona)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(job) = v["jobs"].as_array().unwrap().iter().find(|j| {
            j["type"] == "prose-update"
                && !matches!(j["state"].as_str(), Some("pending" | "running"))
        }) {
            return job.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no settled prose-update job within 20 s")
}

async fn an_answer_rewrites_its_passage(backend: Backend) {
    let mut w = world(backend, &format!("# Export\n\n{PASSAGE}")).await;
    let card = open_card(&mut w, &block_digest(PASSAGE)).await;
    answer(&mut w, &card).await;

    // COA-15/16: the worker rewrites the passage from every saved answer about it; COA-20:
    // the same answer goes to a Planner turn. Either may come first.
    let (mut rewrote, mut handed) = (false, false);
    while !(rewrote && handed) {
        let turn = next_turn(&mut w.client).await;
        if turn.instructions.contains("rewrite one passage") {
            assert_eq!(
                (turn.model.as_deref(), turn.thinking_level.as_deref()),
                (None, None),
                "MOD-24: a background job's turn carries no model choice"
            );
            assert!(turn.prompt.contains(PASSAGE.trim()), "{}", turn.prompt);
            assert!(
                turn.prompt.contains("How often should the export ship?")
                    && turn.prompt.contains("@mona chose: Daily"),
                "{}",
                turn.prompt
            );
            end(
                &mut w.client,
                &turn.turn_id,
                Some(json!({ "text": "The export ships daily." })),
            )
            .await;
            rewrote = true;
        } else {
            assert!(
                turn.prompt.contains("answered the Decision")
                    && turn.prompt.contains("How often should the export ship?"),
                "COA-20: the answer reaches a Planner turn: {}",
                turn.prompt
            );
            end(&mut w.client, &turn.turn_id, None).await;
            handed = true;
        }
    }
    let job = settled_prose_job(&w).await;
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["artifact"]["written"], true, "{job}");
    let text = source(&w).await;
    assert!(text.contains("The export ships daily.\n"), "{text}");
    assert!(!text.contains("weekly"), "{text}");
    // COA-17: the card now points at the new passage and records the answers it reflects, in
    // the same edit.
    assert!(
        text.contains(&format!(
            "about: {}\napplied: 1\n",
            block_digest("The export ships daily.\n")
        )),
        "{text}"
    );
    assert!(
        text.starts_with("# Export\n\n"),
        "only the passage changed: {text}"
    );
}

#[tokio::test]
async fn coa_15_coa_16_coa_17_coa_20_an_answer_rewrites_its_passage_on_sqlite() {
    an_answer_rewrites_its_passage(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn coa_15_coa_16_coa_17_coa_20_an_answer_rewrites_its_passage_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    an_answer_rewrites_its_passage(Backend::Postgres(db)).await;
}

/// COA-18: two blocks match the passage: refused, nothing written, no worker asked.
#[tokio::test]
async fn coa_18_an_ambiguous_passage_refuses_the_update_with_nothing_written() {
    let mut w = world(
        Backend::Sqlite(tempfile::tempdir().unwrap()),
        &format!("# Export\n\n{PASSAGE}\n{PASSAGE}"),
    )
    .await;
    let card = open_card(&mut w, &block_digest(PASSAGE)).await;
    answer(&mut w, &card).await;
    let job = settled_prose_job(&w).await;
    assert_eq!(
        (job["state"].as_str(), job["reason"].as_str()),
        (Some("failed"), Some("target-ambiguous")),
        "{job}"
    );
    let text = source(&w).await;
    assert_eq!(
        text.matches("The export ships weekly.").count(),
        2,
        "{text}"
    );
    assert!(!text.contains("applied:"), "{text}");
}

/// COA-18: the passage changed before the answer was saved: refused, nothing written.
#[tokio::test]
async fn coa_18_a_lost_passage_refuses_the_update_with_nothing_written() {
    let mut w = world(
        Backend::Sqlite(tempfile::tempdir().unwrap()),
        &format!("# Export\n\n{PASSAGE}"),
    )
    .await;
    let card = open_card(&mut w, &block_digest(PASSAGE)).await;
    // A person rewrites the passage by hand.
    let before = source(&w).await;
    let edited = before.replace("ships weekly", "ships monthly");
    let revision: Value = reqwest::Client::new()
        .get(w.server.url(&format!("/api/documents/{}", w.id)))
        .bearer_auth(&w.mona)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mcp = chopin_fixtures::mcp::connect(&w.server.url("/mcp"), &w.mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": w.url, "planRevision": revision["planRevision"], "source": edited, "idempotencyKey": "e2e-prose-2"}),
    )
    .await);
    drop(mcp);
    answer(&mut w, &card).await;
    let job = settled_prose_job(&w).await;
    assert_eq!(
        (job["state"].as_str(), job["reason"].as_str()),
        (Some("failed"), Some("target-lost")),
        "{job}"
    );
    let text = source(&w).await;
    assert!(text.contains("The export ships monthly.\n"), "{text}");
    assert!(!text.contains("applied:"), "{text}");
}
