//! Files in Chat and dictation end to end over the release binary, on SQLite and PostgreSQL:
//! a writer uploads an image and a text file, sends them to the Planner — a scripted remote
//! client that offered `attachments`, and the in-server adapter against the fake model
//! provider — a reader fetches them once sent (and after a restart), a stranger gets the same
//! 404 as a missing file; and a recording is transcribed by the fake provider's streaming
//! endpoint.

use std::time::Duration;

use base64::Engine as _;
use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::model_provider::{FakeProvider, Transcript};
use chopin_protocol::agent::{Attachment, Catalog, CatalogModel, ClientMessage, ServerMessage};
use serde_json::{json, Value};

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0B, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0xE9, 0xFA, 0xDC, 0xD8, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44,
    0xAE, 0x42, 0x60, 0x82,
];
const NOTES: &[u8] = b"canary first, then eu-west\n";
const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00";

struct World {
    server: Server,
    launch: Launch,
    github: FakeGitHub,
    mona: String,
    cookie: String,
    id: String,
    _backend: Backend,
}

async fn world(backend: Backend, env: &[(&str, String)]) -> World {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let mut launch = Launch::hosted(&github_url).on(&backend);
    for (k, v) in env {
        launch = launch.env(k, v.clone());
    }
    let server = launch.start().await;
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Files").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    World {
        server,
        launch,
        github,
        mona,
        cookie,
        id,
        _backend: backend,
    }
}

impl World {
    async fn upload(&self, name: &str, bytes: &[u8]) -> Value {
        let r = reqwest::Client::new()
            .post(
                self.server
                    .url(&format!("/api/channels/{}/attachments", self.id)),
            )
            .query(&[("name", name)])
            .header("cookie", &self.cookie)
            .header("origin", self.server.origin())
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        r.json().await.unwrap()
    }

    async fn fetch(&self, file: &Value, cookie: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(self.server.url(&format!(
                "/api/channels/{}/attachments/{}",
                self.id,
                file["id"].as_str().unwrap()
            )))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
    }

    async fn room(&self) -> BrowserSocket {
        let stream = tokio::net::TcpStream::connect(self.server.host())
            .await
            .unwrap();
        BrowserSocket::connect(
            stream,
            &self.server.host(),
            &format!("/api/documents/{}/room", self.id),
            Some(&self.cookie),
            Some(&self.server.origin()),
        )
        .await
        .unwrap()
    }

    /// A reader (lisa) and a stranger (eve, who cannot read octo/plans): their sessions.
    async fn others(&self) -> (String, String) {
        self.github.add_user("lisa", 1002);
        self.github.grant("octo", "plans", "lisa", Permission::Read);
        let lisa = sign_in(&self.server, &self.github, "lisa").await;
        self.github.add_user("eve", 1003);
        let eve = sign_in(&self.server, &self.github, "eve").await;
        (lisa, eve)
    }

    /// FILE-29..32 once `files` were sent: the reader gets each with its headers, the stranger
    /// the same 404 as a file that does not exist.
    async fn readers_and_strangers(&self, lisa: &str, eve: &str, image: &Value, text: &Value) {
        let r = self.fetch(image, lisa).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "image/png");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        assert_eq!(
            r.headers()["content-security-policy"],
            "default-src 'none'; sandbox"
        );
        assert_eq!(&r.bytes().await.unwrap()[..], PNG);
        let r = self.fetch(text, lisa).await;
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert!(r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment"));
        assert_eq!(&r.bytes().await.unwrap()[..], NOTES);
        let stranger = self.fetch(image, eve).await;
        assert_eq!(stranger.status(), 404);
        let stranger = stranger.text().await.unwrap();
        let missing = self
            .fetch(&json!({"id": uuid_like()}), &self.cookie)
            .await
            .text()
            .await
            .unwrap();
        assert_eq!(stranger, missing, "FILE-30: the same 404");
    }
}

fn uuid_like() -> String {
    "5d1f0c9e-2b7a-4c55-8e0f-6a3b9d2c1e47".to_owned()
}

async fn ack(room: &mut BrowserSocket, frame: Value) -> Value {
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

async fn remote_client_gets_the_files(backend: Backend) {
    let w = world(backend, &[]).await;
    let (lisa, eve) = w.others().await;
    let stream = tokio::net::TcpStream::connect(w.server.host())
        .await
        .unwrap();
    let mut client = connect(stream, &Upgrade::new(w.server.host(), Some(&w.mona)))
        .await
        .unwrap();
    let attached = client
        .attach(&w.id, &["capability-catalog", "attachments"])
        .await
        .unwrap();
    assert!(
        matches!(attached, ServerMessage::Attached(_)),
        "{attached:?}"
    );
    let mut room = w.room().await;
    client
        .send(&ClientMessage::Catalog(Catalog {
            models: vec![CatalogModel {
                id: "vision".into(),
                name: None,
                description: None,
                thinking_levels: Vec::new(),
                input_types: vec!["text".into(), "image".into()],
                default: true,
            }],
            commands: Vec::new(),
        }))
        .await
        .unwrap();
    loop {
        let model = room.next_of_type("chat:model").await.unwrap();
        if model["models"].is_array() {
            break;
        }
    }
    let image = w.upload("dot.png", PNG).await;
    let text = w.upload("deploy-notes.txt", NOTES).await;
    // Before the send, only mona reads them.
    assert_eq!(w.fetch(&image, &lisa).await.status(), 404);
    let answer = ack(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "@chopin does this match?",
               "attachments": [image["id"], text["id"]]}),
    )
    .await;
    assert_eq!(answer["planner"], "started", "{answer}");
    let session = match next(&mut client).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(chopin_protocol::agent::Started {
            session_id: session,
        }))
        .await
        .unwrap();
    let turn = loop {
        if let ServerMessage::Turn(t) = next(&mut client).await {
            break t;
        }
    };
    let kinds: Vec<String> = turn
        .attachments
        .iter()
        .map(|a| match a {
            Attachment::Image(i) => {
                assert_eq!(
                    base64::engine::general_purpose::STANDARD
                        .decode(&i.data)
                        .unwrap(),
                    PNG
                );
                format!("image {}", i.name)
            }
            Attachment::Text(t) => {
                assert_eq!(t.text.as_bytes(), NOTES);
                format!("text {}", t.name)
            }
        })
        .collect();
    assert_eq!(kinds, ["image dot.png", "text deploy-notes.txt"]);
    w.readers_and_strangers(&lisa, &eve, &image, &text).await;
}

async fn provider_turn_and_dictation(backend: Backend) {
    let provider = FakeProvider::new();
    let url = provider.serve_tcp().await.unwrap();
    let w = world(
        backend,
        &[
            ("HARNESS", "provider".into()),
            ("HARNESS_AUTH", "custom".into()),
            ("MODEL", "openai/e2e-model".into()),
            ("MODEL_BASE_URL", format!("{url}/v1")),
            ("MODEL_API_KEY", "sk-e2e".into()),
            ("PROVIDER_IMAGE_MODELS", "*".into()),
            ("TRANSCRIPTION_MODEL", "e2e-transcribe".into()),
            ("TRANSCRIPTION_BASE_URL", format!("{url}/v1")),
        ],
    )
    .await;
    let (lisa, eve) = w.others().await;
    let mut room = w.room().await;
    let hello = room.next_of_type("session:hello").await.unwrap();
    assert_eq!(hello["attachments"]["maxBytes"], 1048576);
    assert_eq!(hello["attachments"]["maxTotalBytes"], 4194304);
    assert_eq!(hello["transcription"]["provider"], "openai");
    let image = w.upload("dot.png", PNG).await;
    let text = w.upload("deploy-notes.txt", NOTES).await;
    let answer = ack(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "@chopin does this match?",
               "attachments": [image["id"], text["id"]]}),
    )
    .await;
    assert_eq!(answer["planner"], "started", "{answer}");
    // The model call carries both files as parts of mona's message.
    let mut body = Value::Null;
    for _ in 0..500 {
        if let Some(r) = provider
            .requests()
            .into_iter()
            .find(|r| r.path.ends_with("/chat/completions"))
        {
            body = r.body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = body.to_string();
    let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
    assert!(
        sent.contains(&format!("data:image/png;base64,{b64}")),
        "{sent}"
    );
    assert!(sent.contains("[File: deploy-notes.txt]"), "{sent}");
    w.readers_and_strangers(&lisa, &eve, &image, &text).await;
    // Dictation: the recording goes to the fake provider, its words come back as lines.
    provider.set_transcript(Transcript {
        deltas: vec!["ship ".into(), "it".into()],
        cut: false,
    });
    let r = reqwest::Client::new()
        .post(
            w.server
                .url(&format!("/api/channels/{}/transcriptions", w.id)),
        )
        .header("cookie", &w.cookie)
        .header("origin", w.server.origin())
        .body(WAV.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let lines: Vec<Value> = r
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"delta": "ship "}),
            json!({"delta": "it"}),
            json!({"text": "ship it"})
        ]
    );
    assert_eq!(
        provider.transcriptions()[0].part("file").unwrap().bytes,
        WAV
    );
    // The files stay with the message across a restart.
    let World {
        server,
        launch,
        id,
        cookie,
        ..
    } = w;
    server.stop().await;
    let server = launch.start().await;
    let r = reqwest::Client::new()
        .get(server.url(&format!(
            "/api/channels/{id}/attachments/{}",
            image["id"].as_str().unwrap()
        )))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(&r.bytes().await.unwrap()[..], PNG);
}

#[tokio::test]
async fn files_reach_a_remote_client_and_readers_on_sqlite() {
    remote_client_gets_the_files(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn files_reach_a_remote_client_and_readers_on_postgres() {
    remote_client_gets_the_files(Backend::Postgres(database().await)).await;
}

#[tokio::test]
async fn files_reach_the_in_server_planner_and_dictation_streams_on_sqlite() {
    provider_turn_and_dictation(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn files_reach_the_in_server_planner_and_dictation_streams_on_postgres() {
    provider_turn_and_dictation(Backend::Postgres(database().await)).await;
}

async fn database() -> chopin_fixtures::pg::TestDatabase {
    chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database")
}
