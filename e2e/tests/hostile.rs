//! Hostile input against the spawned server, with real clients as the people it must not hurt
//! (issue 24): a gapped Yjs update then keystrokes (each keystroke must reach a listener as a
//! keystroke, not as the gapped bytes again), a document pushed past its limits then a fresh
//! client (it must sync), a crowd of awareness states then a newcomer (it must sync), and a
//! Chat history of very long messages (every page must fit the socket). The Yjs clients are the
//! official `yjs`/`y-websocket` packages driven by `e2e/yjs/hostile.mjs`.

use std::time::Duration;

use chopin_e2e::{node_script, sign_in, Backend, Launch, Server};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::{json, Value};

struct Setup {
    /// Kept for as long as the server runs: its home folder or database.
    _backend: Backend,
    server: Server,
    writer: String,
    reader: String,
    id: String,
}

async fn setup(backend: Backend) -> (Setup, FakeGitHub) {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let server = Launch::hosted(&github_url).on(&backend).start().await;
    let writer = sign_in(&server, &github, "mona").await;
    let reader = sign_in(&server, &github, "hubot").await;
    let created = server
        .create_document(&token, "octo/plans", "Under attack")
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    (
        Setup {
            _backend: backend,
            server,
            writer,
            reader,
            id,
        },
        github,
    )
}

impl Setup {
    fn config(&self, mode: &str, cookies: &[&str]) -> Value {
        json!({
            "mode": mode,
            "server": format!("ws://{}/api/yjs", self.server.host()),
            "document": self.id,
            "origin": self.server.origin(),
            "cookies": cookies,
        })
    }

    async fn finish(self) {
        let (status, log) = self.server.stop().await;
        assert!(status.success(), "{log}");
    }
}

async fn gapped_then_keystrokes(backend: Backend) {
    let (s, _github) = setup(backend).await;
    let (ok, seen) = node_script("hostile.mjs", &s.config("gapped", &[&s.writer])).await;
    assert!(ok, "{seen}");
    // 50 one-character updates: a few dozen bytes each, never the 200 KB gapped update again.
    let bytes = seen["keystrokeBytes"].as_u64().unwrap();
    assert!(
        bytes < 50 * 200,
        "50 keystrokes reached a listener as {bytes} bytes"
    );
    assert_eq!(seen["text"].as_str().unwrap().len(), 50, "{seen}");
    assert!(
        seen["denied"][0]
            .as_str()
            .unwrap()
            .contains("builds on changes this server never received"),
        "{seen}"
    );
    s.finish().await;
}

#[tokio::test]
async fn hostile_1_a_gapped_update_then_keystrokes_on_sqlite() {
    gapped_then_keystrokes(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn hostile_1_a_gapped_update_then_keystrokes_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    gapped_then_keystrokes(Backend::Postgres(db)).await;
}

#[tokio::test]
async fn hostile_2_a_large_document_then_a_fresh_client() {
    let (s, _github) = setup(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
    let (ok, seen) = node_script("hostile.mjs", &s.config("large", &[&s.writer, &s.reader])).await;
    assert!(ok, "{seen}");
    // Past the 256 KiB source limit: refused with the limit's words.
    assert!(
        seen["refused"][0]
            .as_str()
            .unwrap()
            .contains("past its 256 KiB source limit"),
        "{seen}"
    );
    // A Yjs state over 2 MiB (what browsers' sockets could never be sent before) reached the
    // fresh provider whole.
    assert!(seen["state"].as_u64().unwrap() > 2 * 1024 * 1024, "{seen}");
    assert!(
        seen["freshBytes"].as_u64().unwrap() > 2 * 1024 * 1024,
        "{seen}"
    );
    assert_eq!(seen["text"], "Small text\n");
    s.finish().await;
}

#[tokio::test]
async fn hostile_2_an_awareness_crowd_then_a_newcomer() {
    let (s, _github) = setup(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
    let (ok, seen) = node_script(
        "hostile.mjs",
        &s.config("awareness", &[&s.reader, &s.writer]),
    )
    .await;
    assert!(ok, "{seen}");
    assert!(seen["present"].as_u64().unwrap() > 1, "{seen}");
    s.finish().await;
}

#[tokio::test]
async fn hostile_2_a_history_of_long_messages_pages_within_the_socket_limit() {
    let (s, _github) = setup(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
    let host = s.server.host();
    let path = format!("/api/documents/{}/room", s.id);
    let origin = s.server.origin();
    let join = |cookie: String| {
        let (host, path, origin) = (host.clone(), path.clone(), origin.clone());
        async move {
            let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
            let mut socket =
                BrowserSocket::connect(stream, &host, &path, Some(&cookie), Some(&origin))
                    .await
                    .expect("the room opens");
            next(&mut socket, "session:hello").await;
            socket
        }
    };
    let mut writer = join(s.writer.clone()).await;
    let long = "🎹".repeat(20_000);
    for i in 0..27 {
        writer
            .send_json(&json!({ "type": "chat:send", "requestId": format!("r-{i}"), "text": long }))
            .await
            .unwrap();
        let ack = next(&mut writer, "chat:ack").await;
        assert_eq!(ack["requestId"], format!("r-{i}"), "{ack}");
    }
    // A newcomer pages back through everything; no page closes its socket.
    let mut newcomer = join(s.reader.clone()).await;
    let mut seqs = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut ask = json!({ "type": "chat:history", "limit": 100 });
        if let Some(b) = before {
            ask["before"] = json!(b);
        }
        newcomer.send_json(&ask).await.unwrap();
        let page = tokio::time::timeout(
            Duration::from_secs(15),
            newcomer.next_of_type("chat:history"),
        )
        .await
        .unwrap_or_else(|_| panic!("no page: {:?}\n{}", last(&newcomer), s.server.logs()))
        .unwrap();
        let entries = page["entries"].as_array().unwrap();
        assert!(!entries.is_empty(), "{page}");
        seqs.splice(0..0, entries.iter().map(|e| e["seq"].as_i64().unwrap()));
        if page["more"] != true {
            break;
        }
        before = Some(entries[0]["seq"].as_i64().unwrap());
    }
    assert_eq!(seqs, (1..=27).collect::<Vec<_>>());
    assert!(newcomer.closed().is_none());
    s.finish().await;
}

async fn next(socket: &mut BrowserSocket, message_type: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(15), socket.next_of_type(message_type))
        .await
        .unwrap_or_else(|_| panic!("no {message_type} within 15 s: {:?}", last(socket)))
        .unwrap_or_else(|e| panic!("{message_type}: {e:?}"))
}

fn last(socket: &BrowserSocket) -> Option<&BrowserEvent> {
    socket.seen().last()
}
