//! The decisions check end to end: the release binary with `HARNESS=provider` and a
//! `CLASSIFIER_MODEL` on its own fake provider (OpenAI's wire, over TCP), a writer signed in
//! through the fake GitHub, on SQLite and PostgreSQL. A Planner message asking for input in
//! prose is withheld; the same session's continuation opens the question as a Decision card;
//! only the continuation's reply reaches Chat. A judgment that is not JSON withholds a reply.

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::model_provider::{FakeProvider, Reply};
use serde_json::{json, Value};

const MODEL_KEY: &str = "sk-operator-model-5d1e";
const CLASSIFIER_KEY: &str = "sk-operator-classifier-77a2";

struct World {
    server: Server,
    planner: FakeProvider,
    classifier: FakeProvider,
    room: BrowserSocket,
    cookie: String,
    id: String,
    _github: FakeGitHub,
    _backend: Backend,
}

async fn world(backend: Backend) -> World {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let planner = FakeProvider::new();
    let planner_url = planner.serve_tcp().await.unwrap();
    let classifier = FakeProvider::new();
    let classifier_url = classifier.serve_tcp().await.unwrap();
    let server = Launch::hosted(&github_url)
        .on(&backend)
        .env("HARNESS", "provider")
        .env("HARNESS_AUTH", "custom")
        .env("MODEL", "openai/e2e-model")
        .env("MODEL_BASE_URL", format!("{planner_url}/v1"))
        .env("MODEL_API_KEY", MODEL_KEY)
        .env("CLASSIFIER_MODEL", "openai/e2e-classifier")
        .env("CLASSIFIER_BASE_URL", format!("{classifier_url}/v1"))
        .env("CLASSIFIER_API_KEY", CLASSIFIER_KEY)
        .start()
        .await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Export notes")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let stream = tokio::net::TcpStream::connect(&server.host())
        .await
        .unwrap();
    let room = BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    World {
        server,
        planner,
        classifier,
        room,
        cookie,
        id,
        _github: github,
        _backend: backend,
    }
}

/// The next Chat message that is not mona's own.
async fn next_reply(room: &mut BrowserSocket) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), room.recv_json())
            .await
            .expect("a Chat message within 20 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == "chat:message" && v["author"] != "mona" => {
                return v
            }
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn send(w: &mut World, id: &str, text: &str) {
    w.room
        .send_json(&json!({ "type": "chat:send", "requestId": id, "text": text }))
        .await
        .unwrap();
}

async fn source(w: &World) -> String {
    let v: Value = reqwest::Client::new()
        .get(w.server.url(&format!("/api/documents/{}/source", w.id)))
        .header("cookie", &w.cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["source"].as_str().unwrap_or_default().to_owned()
}

fn judgment(j: &str) -> Reply {
    Reply::text(&json!({ "judgment": j }).to_string())
}

async fn a_request_for_input_becomes_a_card(backend: Backend) {
    let mut w = world(backend).await;
    w.planner.script(Reply::text(
        "Which format should the export use, CSV or JSON?",
    ));
    w.planner.script(Reply::tool_call(
        "open_decisions",
        json!({ "decisions": [{ "key": "export-format", "question": "Which export format?",
                                "options": [{ "label": "CSV" }, { "label": "JSON" }] }] }),
    ));
    w.planner
        .script(Reply::text("I opened the export format as a card."));
    w.classifier.script(judgment("request-for-input"));
    w.classifier.script(judgment("reply"));
    send(&mut w, "r-1", "@chopin plan the export").await;

    let reply = next_reply(&mut w.room).await;
    assert_eq!(
        (reply["kind"].as_str(), reply["text"].as_str()),
        (
            Some("planner"),
            Some("I opened the export format as a card.")
        ),
        "COA-05/06: the first message Chat shows is the continuation's reply: {reply}\n{}",
        w.server.logs()
    );
    let text = source(&w).await;
    assert!(text.contains("Which export format?"), "the card: {text}");

    // COA-06: the continuation is the same conversation, told only to open cards: the request
    // is in its history once, never sent again as a new message.
    let calls = w.planner.requests();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let continuation = calls[1].body["messages"].as_array().unwrap().clone();
    let last = continuation.last().unwrap().to_string();
    assert!(last.contains("Chopin withheld your last message"), "{last}");
    let whole = calls[1].body.to_string();
    assert_eq!(
        whole.matches("plan the export").count(),
        1,
        "the original request is not replayed: {whole}"
    );
    // The classifier saw each message on its own key, with no tools.
    let checks = w.classifier.requests();
    assert_eq!(checks.len(), 2, "{checks:#?}");
    assert!(checks[0]
        .body
        .to_string()
        .contains("Which format should the export use"));
    for c in &checks {
        assert_eq!(
            c.header("authorization"),
            Some(format!("Bearer {CLASSIFIER_KEY}").as_str())
        );
        assert!(
            c.body
                .get("tools")
                .is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)),
            "{}",
            c.body
        );
    }
    let (_, metrics) = chopin_e2e::get(&w.server.url("/metrics")).await;
    for line in [
        r#"chopin_classifier_checks_total{verdict="request-for-input"} 1"#,
        r#"chopin_classifier_checks_total{verdict="reply"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }

    // COA-10: a judgment that is not JSON withholds the next reply; Chat says so, not its words.
    w.planner
        .script(Reply::text("The export plan is complete."));
    w.classifier.script(Reply::text("sure, looks like a reply"));
    send(&mut w, "r-2", "@chopin anything else").await;
    let notice = next_reply(&mut w.room).await;
    assert_eq!(notice["kind"], "system", "{notice}");
    assert_eq!(
        notice["text"],
        "chopin withheld a message it could not check: the classifier's answer was malformed."
    );
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
    assert!(
        !log.contains(CLASSIFIER_KEY),
        "the classifier key is never logged"
    );
    assert!(
        !log.contains("The export plan is complete."),
        "the withheld words are not logged"
    );
}

#[tokio::test]
async fn coa_05_coa_06_coa_10_a_request_for_input_becomes_a_card_on_sqlite() {
    a_request_for_input_becomes_a_card(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn coa_05_coa_06_coa_10_a_request_for_input_becomes_a_card_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_request_for_input_becomes_a_card(Backend::Postgres(db)).await;
}

/// CTX-01: with `CLASSIFIER_MODEL` set, the turn-taking judgment after a group's quiet window
/// is the model's: it reads the latest lines and says whether the Planner speaks.
async fn a_group_line_the_model_judges_worth_answering_reaches_the_planner(backend: Backend) {
    let mut w = world(backend).await;
    // mona alone: her line goes to the Planner at once, without @chopin.
    w.planner.script(Reply::text("Noted, the export it is."));
    w.classifier.script(judgment("reply"));
    send(&mut w, "m-1", "let's plan the export").await;
    let noted = next_reply(&mut w.room).await;
    assert_eq!(noted["text"], "Noted, the export it is.", "{noted}");

    // lisa joins: a group. Her line waits out the quiet window, then the model judges.
    w._github.add_user("lisa", 1002);
    w._github.grant("octo", "plans", "lisa", Permission::Write);
    let lisa_cookie = sign_in(&w.server, &w._github, "lisa").await;
    let stream = tokio::net::TcpStream::connect(&w.server.host())
        .await
        .unwrap();
    let mut lisa = BrowserSocket::connect(
        stream,
        &w.server.host(),
        &format!("/api/documents/{}/room", w.id),
        Some(&lisa_cookie),
        Some(&w.server.origin()),
    )
    .await
    .unwrap();
    w.classifier
        .script(Reply::text(&json!({ "speak": true }).to_string()));
    w.planner
        .script(Reply::text("CSV first is the simpler start."));
    w.classifier.script(judgment("reply"));
    lisa.send_json(
        &json!({ "type": "chat:send", "requestId": "l-1", "text": "I'd start with CSV, thoughts?" }),
    )
    .await
    .unwrap();
    let heard = next_reply(&mut w.room).await;
    assert_eq!(heard["author"], "lisa", "{heard}");
    let answer = next_reply(&mut w.room).await;
    assert_eq!(answer["kind"], "planner", "{answer}");
    assert_eq!(
        answer["text"], "CSV first is the simpler start.",
        "{answer}"
    );
    let asked = w
        .classifier
        .requests()
        .iter()
        .map(|r| r.as_text())
        .find(|t| t.contains("\"speak\""))
        .expect("the turn-taking judgment was asked of the model");
    assert!(
        asked.contains("@mona: let's plan the export")
            && asked.contains("chopin: Noted, the export it is.")
            && asked.contains("@lisa: I'd start with CSV, thoughts?"),
        "it reads the latest lines: {asked}"
    );
    let (status, log) = w.server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn ctx_01_a_group_line_the_classifier_model_judges_worth_answering_reaches_the_planner_on_sqlite(
) {
    a_group_line_the_model_judges_worth_answering_reaches_the_planner(Backend::Sqlite(
        tempfile::tempdir().unwrap(),
    ))
    .await;
}

#[tokio::test]
async fn ctx_01_a_group_line_the_classifier_model_judges_worth_answering_reaches_the_planner_on_postgres(
) {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    a_group_line_the_model_judges_worth_answering_reaches_the_planner(Backend::Postgres(db)).await;
}
