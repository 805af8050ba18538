//! The in-server `provider` harness end to end: the release binary with `HARNESS=provider`
//! against the fake model provider on TCP (OpenAI's streaming wire), a writer signed in through
//! the fake GitHub's OAuth flow, on SQLite and PostgreSQL. An `@chopin` message runs a turn in
//! the server that reads the document, edits it, asks a question the writer answers, and
//! replies; a Stop aborts a model call mid-stream (the request is abandoned); an outage gives
//! the provider's failure words in Chat and ends the turn. A `#` reference to another document
//! is kept with its message and read by the Planner with `read_reference`. A comment note sent
//! to chopin starts a turn that answers in its thread with `reply_comment`.

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::model_provider::{Chunk, FakeProvider, Reply};
use serde_json::{json, Value};

/// The operator's model key: it must reach the provider and nowhere else.
const MODEL_KEY: &str = "sk-operator-e2e-0f3c";

struct World {
    server: Server,
    /// How the server was started: a restart starts it again so.
    launch: Launch,
    provider: FakeProvider,
    room: BrowserSocket,
    mona: String,
    cookie: String,
    id: String,
    /// Kept for the test's length: the fake GitHub and the database.
    _github: FakeGitHub,
    _backend: Backend,
}

async fn world(backend: Backend, extra: &[(&str, &str)]) -> World {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let provider = FakeProvider::new();
    let provider_url = provider.serve_tcp().await.unwrap();
    let mut launch = Launch::hosted(&github_url)
        .on(&backend)
        .env("HARNESS", "provider")
        .env("HARNESS_AUTH", "custom")
        .env("MODEL", "openai/e2e-model")
        .env("MODEL_BASE_URL", format!("{provider_url}/v1"))
        .env("MODEL_API_KEY", MODEL_KEY);
    for (k, v) in extra {
        launch = launch.env(k, *v);
    }
    let server = launch.start().await;
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Provider notes")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let mut room = connect_room(&server, &id, &cookie).await;
    // PRES-06: "Harnesses other than remote never send `session:planner`": the hello, then
    // straight to the Yjs sync.
    match room.recv_json().await.unwrap() {
        BrowserEvent::Json(hello) => assert_eq!(hello["type"], "session:hello", "{hello}"),
        other => panic!("expected session:hello, got {other:?}"),
    }
    // MOD-06, MOD-07: a writer is told the model state on join: the operator's MODEL as the
    // default entry, nobody's choice, no commands (CMD-07).
    match room.recv_json().await.unwrap() {
        BrowserEvent::Json(model) => {
            assert_eq!(model["type"], "chat:model", "{model}");
            assert_eq!(model["models"][0]["id"], "openai/e2e-model", "{model}");
            assert_eq!(model["models"][0]["default"], true, "{model}");
            assert_eq!(model["state"], "default", "{model}");
            assert_eq!(model["commands"], serde_json::json!([]), "{model}");
        }
        other => panic!("MOD-06: a writer's join is told chat:model, got {other:?}"),
    }
    match room.recv_json().await.unwrap() {
        BrowserEvent::Binary(_) => {}
        other => {
            panic!("PRES-06: after the hello and the model state comes the Yjs sync, got {other:?}")
        }
    }
    World {
        server,
        launch,
        provider,
        room,
        mona,
        cookie,
        id,
        _github: github,
        _backend: backend,
    }
}

async fn next_of(room: &mut BrowserSocket, kind: &str) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within 20 s"))
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == kind => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

/// The next Chat message that is not the person's own.
async fn next_reply(room: &mut BrowserSocket) -> Value {
    loop {
        let message = next_of(room, "chat:message").await;
        if message["author"] != "mona" {
            return message;
        }
    }
}

async fn send(w: &mut World, id: &str, text: &str) {
    w.room
        .send_json(&json!({ "type": "chat:send", "requestId": id, "text": text }))
        .await
        .unwrap();
    let ack = next_of(&mut w.room, "chat:ack").await;
    assert_eq!(ack["planner"], "started", "{ack}");
}

async fn get_json(w: &World, path: &str) -> Value {
    reqwest::Client::new()
        .get(w.server.url(path))
        .header("cookie", &w.cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} did not happen within 10 s");
}

async fn a_turn_reads_edits_asks_and_replies(backend: Backend) {
    let mut w = world(backend, &[]).await;
    let p = &w.provider;
    p.script(Reply::tool_call("read_plan", json!({})));
    p.script(Reply::tool_call(
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Rollout\n" }] }),
    ));
    p.script(Reply::tool_call(
        "ask",
        json!({ "questions": [{ "question": "Ship on Monday?", "options": [{ "label": "Yes" }, { "label": "No" }] }] }),
    ));
    p.script(Reply::text("I added the rollout heading; Monday it is."));
    send(&mut w, "r-1", "@chopin start the rollout plan").await;

    // The question becomes a Decision card in the document; mona answers Yes.
    let mut tries = 0;
    let card = loop {
        let source = get_json(&w, &format!("/api/documents/{}/source", w.id)).await;
        let text = source["source"].as_str().unwrap_or_default().to_owned();
        if let Some(line) = text.lines().find(|l| l.starts_with("id: q-")) {
            break line.trim_start_matches("id: ").to_owned();
        }
        tries += 1;
        assert!(
            tries < 500,
            "no Decision card within 10 s: {text}\nmodel calls: {:#?}\nlog: {}",
            w.provider
                .requests()
                .iter()
                .map(|r| r.body["messages"].to_string())
                .collect::<Vec<_>>(),
            w.server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    w.room
        .send_json(&json!({ "type": "decision:answer", "requestId": "a-1", "decision": card, "options": [0] }))
        .await
        .unwrap();
    let reply = next_reply(&mut w.room).await;
    assert_eq!(reply["kind"], "planner", "{reply}");
    assert_eq!(reply["text"], "I added the rollout heading; Monday it is.");

    // The document changed under the turn's owner.
    let page = reqwest::Client::new()
        .get(w.server.url(&format!("/api/documents/{}/read", w.id)))
        .bearer_auth(&w.mona)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("# Rollout"), "{page}");

    // Four model calls: the prompt, then each tool's result fed back.
    let requests = w.provider.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let first = requests[0].body.to_string();
    assert!(
        first.contains("@mona: @chopin start the rollout plan"),
        "{first}"
    );
    assert!(
        requests[1].body.to_string().contains("revision: 0"),
        "the read's result went back to the model"
    );
    assert!(
        requests[3].body.to_string().contains("Ship on Monday?"),
        "the answer went back to the model"
    );
    assert!(
        requests[3].body.to_string().contains("Yes"),
        "the answer went back to the model"
    );
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {MODEL_KEY}").as_str())
        );
        let seen = format!("{:?}{}", r.headers, r.body);
        assert!(
            !seen.contains(&w.mona),
            "the writer's GitHub token reached the provider (RFC-08)"
        );
        assert!(
            !seen.contains("chopin_session"),
            "a cookie reached the provider"
        );
    }
    // Only the host's tools are offered, and the turn's usage is counted.
    let tools: Vec<String> = requests[0].body["tools"]
        .as_array()
        .expect("tools offered")
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(
        tools.contains(&"read_plan".to_owned()) && tools.contains(&"ask".to_owned()),
        "{tools:?}"
    );
    assert!(
        !tools
            .iter()
            .any(|t| t.contains("bash") || t.contains("shell")),
        "{tools:?}"
    );
    let (_, metrics) = chopin_e2e::get(&w.server.url("/metrics")).await;
    assert!(
        metrics.contains(r#"chopin_model_tokens_total{harness="provider",kind="input"} 40"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"chopin_turns_ended_total{harness="provider",result="completed"} 1"#),
        "{metrics}"
    );
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains(MODEL_KEY), "the model key is never logged");
    assert!(!log.contains(&w.mona), "no GitHub token in the log");
}

#[tokio::test]
async fn provider_turn_reads_edits_asks_and_replies_on_sqlite() {
    a_turn_reads_edits_asks_and_replies(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn provider_turn_reads_edits_asks_and_replies_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_turn_reads_edits_asks_and_replies(Backend::Postgres(db)).await;
}

async fn stop_aborts_mid_stream(backend: Backend) {
    let mut w = world(backend, &[]).await;
    w.provider.script(Reply::Stream {
        chunks: vec![
            Chunk::Text {
                text: "Thinking about it".into(),
            },
            Chunk::Hang,
        ],
        input_tokens: 1,
        output_tokens: 1,
    });
    send(&mut w, "r-1", "@chopin think hard").await;
    let provider = w.provider.clone();
    // The text went out and the stream waits at its Hang. The server reads that text from
    // its socket a moment later; nothing it shows tells when, so give it that moment (200 ms
    // was once too short on a loaded 2-core CI machine).
    eventually("the model said its first words", || {
        provider.in_flight() == 1 && provider.hung() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    w.room
        .send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stopped = next_of(&mut w.room, "planner:stopped").await;
    assert_eq!(stopped["stopped"], true, "{stopped}");
    // What the model said before the Stop is kept; then Chat says who stopped it.
    let said = next_reply(&mut w.room).await;
    assert_eq!(
        (said["kind"].as_str(), said["text"].as_str()),
        (Some("planner"), Some("Thinking about it"))
    );
    let line = next_reply(&mut w.room).await;
    assert!(
        line["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("chopin stopped"),
        "{line}"
    );
    // The HTTP request was abandoned, not left open.
    eventually("the model call was abandoned", || {
        provider.in_flight() == 0 && provider.requests().iter().all(|r| r.abandoned)
    })
    .await;
    // The next message runs a fresh turn.
    w.provider.script(Reply::text("Back."));
    send(&mut w, "r-2", "@chopin again").await;
    let reply = next_reply(&mut w.room).await;
    assert_eq!(reply["text"], "Back.", "{reply}");
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn provider_stop_aborts_a_model_call_mid_stream_on_sqlite() {
    stop_aborts_mid_stream(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn provider_stop_aborts_a_model_call_mid_stream_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    stop_aborts_mid_stream(Backend::Postgres(db)).await;
}

#[tokio::test]
async fn provider_outage_gives_the_failure_words_and_ends_the_turn() {
    let mut w = world(
        Backend::Sqlite(tempfile::tempdir().unwrap()),
        &[("PROVIDER_RETRIES", "1")],
    )
    .await;
    for _ in 0..2 {
        w.provider.script(Reply::Error {
            status: 503,
            retry_after_s: None,
            message: "upstream overloaded".into(),
        });
    }
    send(&mut w, "r-1", "@chopin hello").await;
    let line = next_reply(&mut w.room).await;
    assert_eq!(line["kind"], "system", "{line}");
    assert_eq!(
        line["text"],
        "The model provider failed to answer (HTTP 503). Send the message again in a little while."
    );
    assert_eq!(w.provider.requests().len(), 2, "one call and one retry");
    // Bad credentials say so, and are not retried.
    w.provider.script(Reply::Error {
        status: 401,
        retry_after_s: None,
        message: "invalid api key".into(),
    });
    send(&mut w, "r-2", "@chopin hello again").await;
    let line = next_reply(&mut w.room).await;
    assert!(
        line["text"]
            .as_str()
            .unwrap_or_default()
            .contains("refused the server's credentials (HTTP 401)"),
        "{line}"
    );
    assert_eq!(w.provider.requests().len(), 3);
    let (_, metrics) = chopin_e2e::get(&w.server.url("/metrics")).await;
    assert!(
        metrics.contains(r#"chopin_turns_ended_total{harness="provider",result="failed"} 2"#),
        "{metrics}"
    );
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains(MODEL_KEY), "the model key is never logged");
}

/// A room socket on document `id` for the browser session `cookie`, nothing read yet.
async fn connect_room(server: &Server, id: &str, cookie: &str) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(&server.host())
        .await
        .unwrap();
    BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap()
}

/// The JSON frames a room sends on opening, before the Yjs sync, to the session `cookie`.
async fn opening_frames(server: &Server, id: &str, cookie: &str) -> Vec<Value> {
    let mut room = connect_room(server, id, cookie).await;
    let mut frames = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .expect("the opening frames within 20 s")
            .unwrap()
        {
            BrowserEvent::Json(v) => frames.push(v),
            BrowserEvent::Binary(_) => return frames,
            other => panic!("the room closed while opening: {other:?}"),
        }
    }
}

/// MOD-01, MOD-02, MOD-07, MOD-09, MOD-14, MOD-30/31: a writer chooses one of the operator's
/// models and a level; a reader is never sent the model state; the choice survives a restart
/// and the next turn's model call names that model and level.
async fn a_chosen_model_survives_a_restart_and_runs(backend: Backend) {
    let mut w = world(
        backend,
        &[("PROVIDER_MODELS", "e2e-large=low|high, e2e-small")],
    )
    .await;
    w.room
        .send_json(
            &json!({ "type": "chat:model", "model": "openai/e2e-large", "thinkingLevel": "high" }),
        )
        .await
        .unwrap();
    let chosen = next_of(&mut w.room, "chat:model").await;
    assert_eq!(chosen["state"], "chosen", "{chosen}");
    assert_eq!(
        chosen["models"]
            .as_array()
            .map(|m| m.iter().map(|e| e["id"].clone()).collect::<Vec<_>>()),
        Some(vec![
            json!("openai/e2e-model"),
            json!("openai/e2e-large"),
            json!("openai/e2e-small")
        ]),
        "MOD-07: MODEL first, then PROVIDER_MODELS in order: {chosen}"
    );
    w._github.add_user("hubot", 1002);
    w._github.grant("octo", "plans", "hubot", Permission::Read);
    let hubot = sign_in(&w.server, &w._github, "hubot").await;
    let reader = opening_frames(&w.server, &w.id, &hubot).await;
    assert!(
        reader
            .iter()
            .all(|f| !f["type"].as_str().unwrap_or("").starts_with("chat:model")),
        "RULINGS MOD-31: {reader:?}"
    );
    // A restart keeps the choice (MOD-02).
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
    w.server = w.launch.start().await;
    let opened = opening_frames(&w.server, &w.id, &w.cookie).await;
    let told = opened
        .iter()
        .find(|f| f["type"] == "chat:model")
        .unwrap_or_else(|| panic!("MOD-06: {opened:?}"));
    assert_eq!(
        told["choice"],
        json!({ "model": "openai/e2e-large", "thinkingLevel": "high", "chosenBy": "mona" }),
        "MOD-02: {told}"
    );
    w.room = connect_room(&w.server, &w.id, &w.cookie).await;
    w.provider.script(Reply::text("Planned."));
    send(&mut w, "m-1", "@chopin plan").await;
    assert_eq!(next_reply(&mut w.room).await["text"], "Planned.");
    let request = w.provider.requests().last().cloned().expect("a model call");
    assert_eq!(
        request.body["model"], "e2e-large",
        "MOD-09: {}",
        request.body
    );
    assert_eq!(
        request.body["reasoning_effort"], "high",
        "MOD-09: the level rides on the call: {}",
        request.body
    );
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn mod_02_a_chosen_model_survives_a_restart_and_runs_on_sqlite() {
    a_chosen_model_survives_a_restart_and_runs(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn mod_02_a_chosen_model_survives_a_restart_and_runs_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_chosen_model_survives_a_restart_and_runs(Backend::Postgres(db)).await;
}

/// JOB-02, JOB-09, TB-03 on the in-server harness: once the writer who invoked the Planner owns
/// it, a document description runs as a fresh session on the operator's model with a JSON
/// schema for its answer, and nothing of it reaches Chat (JOB-03).
#[tokio::test]
async fn job_02_job_09_a_description_runs_on_the_operators_model_once_a_writer_owns_the_planner() {
    let mut w = world(
        Backend::Sqlite(tempfile::tempdir().unwrap()),
        &[("BACKGROUND_JOBS", "on")],
    )
    .await;
    // Nobody owns the Planner yet: the description asked for on opening waits.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        w.provider.requests().is_empty(),
        "no model call without an owner"
    );
    w.provider.script(Reply::tool_call(
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Search revamp\n\nFaster results.\n" }] }),
    ));
    w.provider.script(Reply::text("Written."));
    send(&mut w, "r-1", "@chopin draft it").await;
    let reply = next_reply(&mut w.room).await;
    assert_eq!(reply["text"], "Written.");
    let calls = w.provider.requests().len();
    w.provider
        .script(Reply::text(r#"{"description":"PRD for a faster search"}"#));
    // Opening the document again asks for a description of its new text.
    let _second = connect_room(&w.server, &w.id, &w.cookie).await;
    let mut tries = 0;
    let doc = loop {
        let doc = get_json(&w, &format!("/api/documents/{}", w.id)).await;
        if doc["description"]["text"] == "PRD for a faster search" {
            break doc;
        }
        tries += 1;
        assert!(
            tries < 500,
            "no description within 10 s: {doc}\nlog: {}",
            w.server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(doc["description"]["planRevision"], 1);
    let requests = w.provider.requests();
    assert_eq!(
        requests.len(),
        calls + 1,
        "one model call for the description"
    );
    let worker = &requests[calls].body;
    assert_eq!(
        worker["response_format"]["type"], "json_schema",
        "the worker's answer is structured: {worker}"
    );
    assert!(
        worker
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "a private worker has no tools: {worker}"
    );
    assert!(worker["messages"].to_string().contains("Faster results."));
    // Nothing of it in Chat.
    let history: Vec<Value> = get_json(&w, &format!("/api/documents/{}/jobs", w.id)).await["jobs"]
        .as_array()
        .unwrap()
        .clone();
    assert!(history.iter().any(|j| j["state"] == "completed"));
    w.room
        .send_json(&json!({ "type": "chat:history", "requestId": "h-1" }))
        .await
        .unwrap();
    let page = next_of(&mut w.room, "chat:history").await;
    assert!(
        !page.to_string().contains("PRD for a faster search"),
        "JOB-03: the description is not in Chat: {page}"
    );
}

/// CTX-18, CTX-19, CTX-20: a `#` reference to another document of the repository is kept with
/// the message, and the in-server Planner reads that document with `read_reference`, told
/// whether it changed since it was chosen.
async fn a_document_reference_is_read_by_the_planner(backend: Backend) {
    let mut w = world(backend, &[]).await;
    let other = w
        .server
        .create_document(&w.mona, "octo/plans", "Launch plan")
        .await;
    let other_id = other["id"].as_str().unwrap().to_owned();
    let mcp = chopin_fixtures::mcp::connect(&w.server.url("/mcp"), &w.mona).await;
    chopin_fixtures::mcp::ok(
        chopin_fixtures::mcp::call(
            &mcp,
            "update_document",
            json!({"document": other["url"], "planRevision": 0,
                   "source": "# Launch\n\nCanary in eu-west first.\n", "idempotencyKey": "e2e-ref"}),
        )
        .await,
    );
    w.provider.script(Reply::tool_call(
        "read_reference",
        json!({ "reference": other_id }),
    ));
    w.provider.script(Reply::text(
        "The launch plan starts with a canary in eu-west.",
    ));
    w.room
        .send_json(&json!({
            "type": "chat:send", "requestId": "r-1",
            "text": "@chopin compare with #Launch plan",
            "references": [{"type": "document", "documentId": other_id}]
        }))
        .await
        .unwrap();
    let ack = next_of(&mut w.room, "chat:ack").await;
    assert_eq!(ack["planner"], "started", "{ack}");
    let mine = next_of(&mut w.room, "chat:message").await;
    assert_eq!(
        mine["references"][0]["documentId"], other_id,
        "kept with the message: {mine}"
    );
    assert_eq!(mine["references"][0]["label"], "Launch plan", "{mine}");
    let reply = next_reply(&mut w.room).await;
    assert_eq!(
        reply["text"], "The launch plan starts with a canary in eu-west.",
        "{reply}"
    );
    let requests = w.provider.requests();
    let first = requests[0].as_text();
    assert!(
        first.contains("[document reference") && first.contains(&other_id),
        "the Planner is told the reference: {first}"
    );
    let read = requests
        .iter()
        .map(|r| r.as_text())
        .find(|t| t.contains("Canary in eu-west first."))
        .expect("the tool result carries the referred document's text");
    assert!(
        read.contains("changed since it was chosen: no"),
        "CTX-20: {read}"
    );
}

#[tokio::test]
async fn ctx_18_ctx_19_a_document_reference_is_read_by_the_planner_on_sqlite() {
    a_document_reference_is_read_by_the_planner(Backend::Sqlite(tempfile::tempdir().unwrap()))
        .await;
}

#[tokio::test]
async fn ctx_18_ctx_19_a_document_reference_is_read_by_the_planner_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_document_reference_is_read_by_the_planner(Backend::Postgres(db)).await;
}

/// ISO-17, ISO-18, ISO-19, ISO-21: a comment note sent to chopin (`to: "planner"`) starts an
/// in-server turn about its thread, whose `reply_comment` answers in that thread, saved before
/// the room hears it; the thread and its notes are listed again after a restart.
async fn a_comment_to_the_planner_is_answered_in_its_thread(backend: Backend) {
    let mut w = world(backend, &[]).await;
    let thread = "6f1c1f0e-7a0b-4c57-9a52-3f0f3b8f2a11";
    w.provider.script(Reply::tool_call(
        "reply_comment",
        json!({ "thread": thread, "text": "Yes: one region is enough for launch." }),
    ));
    w.provider.script(Reply::text("Answered in the thread."));
    w.room
        .send_json(&json!({
            "type": "comment:start", "requestId": "c-1", "thread": thread,
            "quote": "We serve EU shoppers from one region.",
            "text": "Is one region enough?", "to": "planner"
        }))
        .await
        .unwrap();
    let ack = next_of(&mut w.room, "comment:ack").await;
    assert_eq!(ack["planner"], "started", "{ack}");
    assert_eq!(ack["thread"]["id"], thread, "{ack}");
    let answered = loop {
        let told = next_of(&mut w.room, "comment:thread").await;
        if told["note"]["planner"] == true {
            break told;
        }
    };
    assert_eq!(
        answered["note"]["text"], "Yes: one region is enough for launch.",
        "{answered}"
    );
    let first = w.provider.requests()[0].as_text();
    assert!(
        first.contains(thread) && first.contains("Is one region enough?"),
        "the turn is about that thread: {first}"
    );
    assert!(
        first.contains("reply_comment"),
        "offered to that turn: {first}"
    );
    let reply = next_reply(&mut w.room).await;
    assert_eq!(reply["text"], "Answered in the thread.", "{reply}");

    // Kept across a restart.
    w.server.stop().await;
    let server = w.launch.start().await;
    let mut room = connect_room(&server, &w.id, &w.cookie).await;
    room.send_json(&json!({ "type": "comment:list", "requestId": "l" }))
        .await
        .unwrap();
    let listed = next_of(&mut room, "comment:threads").await;
    let notes = listed["threads"][0]["notes"].as_array().unwrap().clone();
    assert_eq!(notes.len(), 2, "{listed}");
    assert_eq!(notes[1]["author"], Value::Null, "{listed}");
    assert_eq!(listed["threads"][0]["replies"], 1, "{listed}");
}

#[tokio::test]
async fn iso_17_iso_18_iso_21_a_comment_to_the_planner_is_answered_in_its_thread_on_sqlite() {
    a_comment_to_the_planner_is_answered_in_its_thread(Backend::Sqlite(
        tempfile::tempdir().unwrap(),
    ))
    .await;
}

#[tokio::test]
async fn iso_17_iso_18_iso_21_a_comment_to_the_planner_is_answered_in_its_thread_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_comment_to_the_planner_is_answered_in_its_thread(Backend::Postgres(db)).await;
}

fn assessed(kind: &str, possible: f64, helpful: f64) -> Reply {
    Reply::text(
        &json!({ "assessments": [{ "possible": possible, "helpful": helpful, "type": kind }] })
            .to_string(),
    )
}

/// ISO-33..39: one visual admission check for the in-server Planner's `edit_plan` and MCP
/// creations and updates, with `VISUAL_ASSESSOR_MODEL` on its own fake provider: a passage the
/// assessment says needs a flowchart is refused with how to write one; the same passage with
/// the flowchart beside it is admitted from the kept assessment (no second call); prose judged
/// fine as prose is admitted; MCP `create_document` is refused the same way.
async fn the_visual_check_gates_planner_and_mcp_writes(backend: Backend) {
    let assessor = FakeProvider::new();
    let assessor_url = assessor.serve_tcp().await.unwrap();
    let base = format!("{assessor_url}/v1");
    let mut w = world(
        backend,
        &[
            ("VISUAL_ASSESSOR_MODEL", "openai/e2e-assessor"),
            ("VISUAL_ASSESSOR_BASE_URL", &base),
            ("VISUAL_ASSESSOR_API_KEY", "sk-assessor-e2e"),
        ],
    )
    .await;
    let passage = "Orders go from the cart to payment, then to fulfilment.";
    let chart = r#"```seecode
{"type": "flowchart", "nodes": [{"id": "c", "label": "Cart"}, {"id": "p", "label": "Payment"}], "edges": [{"from": "c", "to": "p"}]}
```"#;
    assessor.script(assessed("flowchart", 0.9, 0.85));
    w.provider.script(Reply::tool_call(
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": format!("# Flow\n\n{passage}") }] }),
    ));
    w.provider.script(Reply::tool_call(
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": format!("# Flow\n\n{passage}\n\n{chart}") }] }),
    ));
    w.provider.script(Reply::text("Drew the order flow."));
    send(&mut w, "r-1", "@chopin describe the order flow").await;
    let reply = next_reply(&mut w.room).await;
    assert_eq!(reply["text"], "Drew the order flow.", "{reply}");
    let refused = w.provider.requests()[1].as_text();
    assert!(
        refused.contains("needs a `flowchart` diagram") && refused.contains("Nothing was written"),
        "the refusal reaches the Planner: {refused}"
    );
    let source = get_json(&w, &format!("/api/documents/{}/source", w.id)).await;
    let text = source["source"].as_str().unwrap();
    assert!(
        text.contains(passage) && text.contains("\"type\": \"flowchart\""),
        "{text}"
    );
    assert_eq!(
        assessor.requests().len(),
        1,
        "the second write used the kept assessment"
    );
    assert!(
        assessor.requests()[0].as_text().contains(passage),
        "the assessor sees the passage"
    );

    // MCP: prose judged fine as prose is admitted; a creation needing a table is refused.
    let mcp = chopin_fixtures::mcp::connect(&w.server.url("/mcp"), &w.mona).await;
    assessor.script(assessed("none", 0.2, 0.1));
    let revision = source["planRevision"].as_u64().unwrap_or(1);
    chopin_fixtures::mcp::ok(
        chopin_fixtures::mcp::call(
            &mcp,
            "update_document",
            json!({"document": w.id, "planRevision": revision,
                   "source": format!("{text}\nWe ship weekly.\n"), "idempotencyKey": "v-1"}),
        )
        .await,
    );
    assessor.script(assessed("table", 0.95, 0.9));
    let created = chopin_fixtures::mcp::call(
        &mcp,
        "create_document",
        json!({"repository": "octo/plans", "title": "Vendors",
               "source": "# Vendors\n\nVendor A is cheap but slow; vendor B is fast but costly.\n"}),
    )
    .await;
    let body = format!("{created:?}");
    assert!(
        body.contains("invalid") && body.contains("needs a comparison table"),
        "{body}"
    );
}

#[tokio::test]
async fn iso_33_iso_34_iso_38_iso_39_the_visual_check_gates_planner_and_mcp_writes_on_sqlite() {
    the_visual_check_gates_planner_and_mcp_writes(Backend::Sqlite(tempfile::tempdir().unwrap()))
        .await;
}

#[tokio::test]
async fn iso_33_iso_34_iso_38_iso_39_the_visual_check_gates_planner_and_mcp_writes_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    the_visual_check_gates_planner_and_mcp_writes(Backend::Postgres(db)).await;
}
