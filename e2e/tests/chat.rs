//! Chat over the room socket against the spawned `chopin` binary, on SQLite and on PostgreSQL:
//! browsers in one room hear each other's messages (readers too), an `@chopin` message with
//! nothing attached is refused to its sender alone and saves nothing, a reader cannot send, a
//! re-sent request id is answered from memory, and history survives a restart.

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::{json, Value};

struct Room {
    host: String,
    path: String,
    origin: String,
}

impl Room {
    /// Opens a room socket with `cookie` and reads up to its `session:hello`.
    async fn join(&self, cookie: &str) -> BrowserSocket {
        let stream = tokio::net::TcpStream::connect(&self.host).await.unwrap();
        let mut socket = BrowserSocket::connect(
            stream,
            &self.host,
            &self.path,
            Some(cookie),
            Some(&self.origin),
        )
        .await
        .expect("the room opens");
        next(&mut socket, "session:hello").await;
        socket
    }
}

async fn next(socket: &mut BrowserSocket, message_type: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(15), socket.next_of_type(message_type))
        .await
        .unwrap_or_else(|_| panic!("no {message_type} within 15 s: {:?}", socket.seen()))
        .unwrap_or_else(|e| panic!("{message_type}: {e:?}"))
}

/// Sends `frame` and returns the next frame of `reply_type` the sender reads.
async fn ask(socket: &mut BrowserSocket, frame: Value, reply_type: &str) -> Value {
    socket.send_json(&frame).await.unwrap();
    next(socket, reply_type).await
}

fn send(id: &str, text: &str) -> Value {
    json!({ "type": "chat:send", "requestId": id, "text": text })
}

async fn whole_run(backend: Backend) {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("lisa", 1002)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "lisa", Permission::Admin);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let mut launch = Launch::hosted(&github_url);
    launch = launch.on(&backend);
    let server: Server = launch.start().await;
    // The restart below keeps the port and origin (sealed sign-ins are bound to the origin).
    let launch = launch.at(&server);
    let (mona, lisa, hubot) = (
        sign_in(&server, &github, "mona").await,
        sign_in(&server, &github, "lisa").await,
        sign_in(&server, &github, "hubot").await,
    );
    let created: Value = reqwest::Client::new()
        .post(server.url("/api/repositories/octo/plans/documents"))
        .bearer_auth(&token)
        .json(&json!({ "title": "Team chat" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("a document id").to_owned();
    let url = created["url"].as_str().expect("a document url").to_owned();
    let room = Room {
        host: server.host(),
        path: format!("/api/documents/{id}/room"),
        origin: server.origin(),
    };
    let mut a = room.join(&mona).await;
    let mut b = room.join(&lisa).await;
    let mut reader = room.join(&hubot).await;

    // UNA-06: one sends, everyone in the room hears it, the reader too.
    let ack = ask(&mut a, send("m-1", "Hello, room"), "chat:ack").await;
    assert_eq!(
        ack,
        json!({ "type": "chat:ack", "requestId": "m-1", "seq": 1, "planner": null })
    );
    for socket in [&mut a, &mut b, &mut reader] {
        let heard = next(socket, "chat:message").await;
        assert_eq!(heard["seq"], 1, "{heard}");
        assert_eq!(heard["author"], "mona");
        assert_eq!(heard["kind"], "member");
        assert_eq!(heard["text"], "Hello, room");
        assert!(heard["at"].as_i64().is_some(), "{heard}");
    }

    // UNA-02, UNA-04: `@chopin` with nothing attached is refused to its sender alone.
    let refused = ask(
        &mut b,
        send("l-1", "@chopin please draft the plan"),
        "chat:refused",
    )
    .await;
    assert_eq!(refused["requestId"], "l-1");
    assert_eq!(refused["code"], "planner-not-attached", "{refused}");
    let words = refused["message"].as_str().unwrap();
    assert!(words.contains(&url), "names the document URL: {words}");

    // MSG-06: a reader cannot send.
    let read_only = ask(&mut reader, send("h-1", "hi"), "chat:refused").await;
    assert_eq!(read_only["code"], "read-only", "{read_only}");

    // MSG-16: a re-sent request id gets the same ack and is not sent again.
    let again = ask(&mut a, send("m-1", "Hello, room"), "chat:ack").await;
    assert_eq!(again, ack);

    // The next message anyone hears is seq 2: nothing was saved or broadcast for the refused
    // `@chopin`, the reader's send or the re-sent id.
    let ack = ask(&mut b, send("l-2", "Without chopin, then"), "chat:ack").await;
    assert_eq!(ack["seq"], 2, "{ack}");
    for socket in [&mut a, &mut b, &mut reader] {
        let heard = next(socket, "chat:message").await;
        assert_eq!(
            (heard["seq"].clone(), heard["author"].clone()),
            (json!(2), json!("lisa")),
            "{heard}"
        );
    }
    for socket in [&a, &b, &reader] {
        let heard: Vec<&Value> = socket
            .seen()
            .iter()
            .filter_map(|e| match e {
                chopin_fixtures::browser::BrowserEvent::Json(v) => Some(v),
                _ => None,
            })
            .filter(|v| v["type"] == "chat:message")
            .collect();
        assert_eq!(heard.len(), 2, "{heard:?}");
        assert!(
            !heard
                .iter()
                .any(|v| v["text"].as_str() == Some("@chopin please draft the plan")),
            "the refused message was heard: {heard:?}"
        );
    }

    // History, for a reader too.
    let history = ask(
        &mut reader,
        json!({ "type": "chat:history" }),
        "chat:history",
    )
    .await;
    assert_eq!(history["more"], false);
    let texts: Vec<&str> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello, room", "Without chopin, then"]);
    let page = ask(
        &mut a,
        json!({ "type": "chat:history", "before": 2, "limit": 1 }),
        "chat:history",
    )
    .await;
    assert_eq!(page["entries"][0]["seq"], 1, "{page}");
    assert_eq!(page["more"], false);

    // An unknown type is still an error, and the socket stays open.
    let error = ask(&mut a, json!({ "type": "chat:nope" }), "error").await;
    assert_eq!(error["code"], "unknown-type");

    // The transcript is durable: a new process reads the same history.
    for mut socket in [a, b, reader] {
        let _ = socket.close().await;
    }
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains(token.as_str()), "a token was logged");
    let server = launch.start().await;
    let mut a = room.join(&mona).await;
    let after = ask(&mut a, json!({ "type": "chat:history" }), "chat:history").await;
    assert_eq!(after["entries"], history["entries"], "after a restart");
    let ack = ask(&mut a, send("m-2", "Back again"), "chat:ack").await;
    assert_eq!(ack["seq"], 3);
    let _ = a.close().await;
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    if let Backend::Postgres(db) = &backend {
        chopin_fixtures::pg::shared_postgres()
            .drop_database(db)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn chat_in_a_room_on_sqlite() {
    whole_run(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn chat_in_a_room_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    whole_run(Backend::Postgres(db)).await;
}
