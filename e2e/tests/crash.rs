//! Group commit under a crash, on SQLite and on PostgreSQL: the spawned `chopin` binary takes
//! Chat sends on several documents and Yjs updates on others at once, many in flight, and is
//! killed (SIGKILL) in the middle of it. After a restart, every `chat:ack` a sender was given
//! names an entry the history holds (same seq, same text), and every update the room relayed to
//! a listener is in the document's text: nothing acknowledged or relayed was lost, however the
//! writes were batched.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chopin_e2e::{sign_in, Launch, Server};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::json;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{GetString, Text, Transact, Update};

/// Documents that take Chat sends (two senders each), and documents that take Yjs updates (one
/// writer and one listening reader each).
const CHAT_DOCUMENTS: usize = 3;
const YJS_DOCUMENTS: usize = 2;
/// Sends each Chat sender keeps in flight (the server takes 20 at once in all).
const SENDS_IN_FLIGHT: usize = 3;
/// The crash comes once this many sends were acknowledged and this many updates relayed.
const ACKS_BEFORE_CRASH: usize = 60;
const RELAYS_BEFORE_CRASH: usize = 60;
/// Updates each Yjs writer sends (it is still sending when the crash comes).
const UPDATES_PER_WRITER: usize = 400;

/// What the clients were told before the crash.
#[derive(Default)]
struct Told {
    /// `(document, seq)` → the text acknowledged at that seq.
    acked: Mutex<BTreeMap<(String, i64), String>>,
    acks: AtomicUsize,
    /// document → the listener's text: everything relayed to it.
    relayed: Mutex<BTreeMap<String, String>>,
    /// Writers' updates relayed (the markers they appended), however many frames carried them.
    relays: AtomicUsize,
    /// Yjs writers that sent all their updates.
    writers_done: AtomicUsize,
}

async fn join(server: &Server, document: &str, cookie: &str) -> BrowserSocket {
    let host = server.host();
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut socket = BrowserSocket::connect(
        stream,
        &host,
        &format!("/api/documents/{document}/room"),
        Some(cookie),
        Some(&server.origin()),
    )
    .await
    .expect("the room opens");
    tokio::time::timeout(
        Duration::from_secs(15),
        socket.next_of_type("session:hello"),
    )
    .await
    .expect("session:hello within 15 s")
    .expect("session:hello");
    socket
}

/// Sends Chat messages, `SENDS_IN_FLIGHT` at a time, until the server goes away; records each
/// ack with the text it acknowledged.
async fn chat_sender(mut socket: BrowserSocket, document: String, who: String, told: Arc<Told>) {
    let mut texts = BTreeMap::new();
    let mut next = 0usize;
    let mut in_flight = 0usize;
    loop {
        while in_flight < SENDS_IN_FLIGHT {
            let id = format!("{who}-{next}");
            let text = format!("{who} says {next}");
            next += 1;
            let frame = json!({ "type": "chat:send", "requestId": id, "text": text });
            if socket.send_json(&frame).await.is_err() {
                return;
            }
            texts.insert(id, text);
            in_flight += 1;
        }
        let frame = match socket.recv_json().await {
            Ok(BrowserEvent::Json(frame)) => frame,
            Ok(BrowserEvent::Binary(_)) => continue,
            Ok(BrowserEvent::Closed { .. }) | Err(_) => return,
        };
        let id = frame["requestId"].as_str().unwrap_or_default().to_owned();
        match frame["type"].as_str() {
            Some("chat:ack") => {
                let seq = frame["seq"].as_i64().expect("an ack names its seq");
                let text = texts.remove(&id).expect("an ack of a send");
                told.acked
                    .lock()
                    .unwrap()
                    .insert((document.clone(), seq), text);
                told.acks.fetch_add(1, Ordering::SeqCst);
                in_flight -= 1;
            }
            Some("chat:refused") => {
                texts.remove(&id);
                in_flight -= 1;
            }
            _ => {}
        }
    }
}

/// Sends `UPDATES_PER_WRITER` Yjs updates, each appending a marker to the document's text,
/// without waiting for anything; then stays connected, reading, until the server goes away.
///
/// A writer that hung up at once would close with the room's greeting still unread, which
/// resets the connection: the server may then drop the updates it had not read yet, which
/// were never relayed (the updates a writer's socket loses are not the server's to keep).
async fn yjs_writer(mut socket: BrowserSocket, n: usize, told: Arc<Told>) {
    let doc = yrs::Doc::new();
    let text = doc.get_or_insert_text("source");
    for i in 0..UPDATES_PER_WRITER {
        let update = {
            let mut txn = doc.transact_mut();
            let end = text.len(&txn);
            text.insert(&mut txn, end, &format!("<w{n}-{i}>"));
            txn.encode_update_v1()
        };
        let frame = Message::Sync(SyncMessage::Update(update)).encode_v1();
        if socket.send_binary(frame).await.is_err() {
            return;
        }
    }
    told.writers_done.fetch_add(1, Ordering::SeqCst);
    while let Ok(BrowserEvent::Json(_) | BrowserEvent::Binary(_)) = socket.recv_json().await {}
}

/// Applies every update the room relays and records the text it makes.
async fn yjs_listener(mut socket: BrowserSocket, document: String, told: Arc<Told>) {
    let doc = yrs::Doc::new();
    let text = doc.get_or_insert_text("source");
    let mut seen = 0;
    loop {
        let bytes = match socket.recv_json().await {
            Ok(BrowserEvent::Binary(bytes)) => bytes,
            Ok(BrowserEvent::Json(_)) => continue,
            Ok(BrowserEvent::Closed { .. }) | Err(_) => return,
        };
        let update = match Message::decode_v1(&bytes) {
            Ok(Message::Sync(SyncMessage::Update(u) | SyncMessage::SyncStep2(u))) => u,
            _ => continue,
        };
        let mut txn = doc.transact_mut();
        txn.apply_update(Update::decode_v1(&update).expect("a relayed update decodes"))
            .expect("a relayed update applies");
        let now = text.get_string(&txn);
        drop(txn);
        // The room may merge several updates into one frame: count the markers relayed.
        let markers = now.matches("<w").count();
        told.relays.fetch_add(markers - seen, Ordering::SeqCst);
        seen = markers;
        told.relayed.lock().unwrap().insert(document.clone(), now);
    }
}

/// Every Chat entry of `document`, read with `chat:history` pages from the newest back.
async fn history(socket: &mut BrowserSocket) -> BTreeMap<i64, String> {
    let mut entries = BTreeMap::new();
    let mut before: Option<i64> = None;
    loop {
        let mut ask = json!({ "type": "chat:history", "limit": 100 });
        if let Some(before) = before {
            ask["before"] = json!(before);
        }
        socket.send_json(&ask).await.unwrap();
        let page =
            tokio::time::timeout(Duration::from_secs(15), socket.next_of_type("chat:history"))
                .await
                .expect("chat:history within 15 s")
                .expect("chat:history");
        let got = page["entries"].as_array().expect("entries").clone();
        for e in &got {
            entries.insert(
                e["seq"].as_i64().unwrap(),
                e["text"].as_str().unwrap().to_owned(),
            );
        }
        match (page["more"].as_bool(), got.first()) {
            (Some(true), Some(first)) => before = first["seq"].as_i64(),
            _ => return entries,
        }
    }
}

async fn run(database: Option<String>) {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("lisa", 1002)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "lisa", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut launch = Launch::hosted(&github_url).env("HOME", home.path().to_string_lossy());
    if let Some(url) = &database {
        launch = launch
            .env("DATABASE_URL", url.clone())
            .env("SESSION_ENCRYPTION_KEY", "7e".repeat(32));
    }
    let server: Server = launch.start().await;
    let launch = launch.at(&server);
    let (mona, lisa, hubot) = (
        sign_in(&server, &github, "mona").await,
        sign_in(&server, &github, "lisa").await,
        sign_in(&server, &github, "hubot").await,
    );
    let mut documents = Vec::new();
    for n in 0..CHAT_DOCUMENTS + YJS_DOCUMENTS {
        let created = server
            .create_document(&token, "octo/plans", &format!("Crash {n}"))
            .await;
        documents.push(created["id"].as_str().unwrap().to_owned());
    }
    let (chat_documents, yjs_documents) = documents.split_at(CHAT_DOCUMENTS);

    let told = Arc::new(Told::default());
    let mut tasks = Vec::new();
    for document in yjs_documents {
        let listener = join(&server, document, &hubot).await;
        tasks.push(tokio::spawn(yjs_listener(
            listener,
            document.clone(),
            told.clone(),
        )));
    }
    for (n, document) in yjs_documents.iter().enumerate() {
        let writer = join(&server, document, &mona).await;
        tasks.push(tokio::spawn(yjs_writer(writer, n, told.clone())));
    }
    for document in chat_documents {
        for (who, cookie) in [("mona", &mona), ("lisa", &lisa)] {
            let socket = join(&server, document, cookie).await;
            let who = format!("{who}@{document}");
            tasks.push(tokio::spawn(chat_sender(
                socket,
                document.clone(),
                who,
                told.clone(),
            )));
        }
    }
    let enough = async {
        while told.acks.load(Ordering::SeqCst) < ACKS_BEFORE_CRASH
            || told.relays.load(Ordering::SeqCst) < RELAYS_BEFORE_CRASH
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), enough)
        .await
        .is_err()
    {
        panic!(
            "the server acknowledged and relayed enough within 60 s: {} acks, {} relays, {} writers done",
            told.acks.load(Ordering::SeqCst),
            told.relays.load(Ordering::SeqCst),
            told.writers_done.load(Ordering::SeqCst)
        );
    }
    // Sends and updates are still in flight when the process dies.
    let log = server.crash().await;
    assert!(!log.contains(token.as_str()), "a token was logged");
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("every client ends once the server is gone")
            .unwrap();
    }
    let acked = std::mem::take(&mut *told.acked.lock().unwrap());
    let relayed = std::mem::take(&mut *told.relayed.lock().unwrap());
    assert!(acked.len() >= ACKS_BEFORE_CRASH && !relayed.is_empty());

    // The next process waits out the crashed one's writer lease.
    let server = launch.start().await;
    for document in chat_documents {
        let mut socket = join(&server, document, &hubot).await;
        let stored = history(&mut socket).await;
        for ((acked_document, seq), text) in &acked {
            if acked_document == document {
                assert_eq!(
                    stored.get(seq),
                    Some(text),
                    "acknowledged entry {seq} of {document} after the crash"
                );
            }
        }
        let _ = socket.close().await;
    }
    let http = reqwest::Client::new();
    for (document, text) in &relayed {
        let page = http
            .get(server.url(&format!("/api/documents/{document}/read")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for marker in text.split_inclusive('>') {
            assert!(
                page.contains(marker),
                "relayed {marker} of {document} is missing after the crash"
            );
        }
    }
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn nothing_acknowledged_or_relayed_is_lost_to_a_crash_on_sqlite() {
    run(None).await;
}

#[tokio::test]
async fn nothing_acknowledged_or_relayed_is_lost_to_a_crash_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    run(Some(db.url.clone())).await;
    pg.drop_database(&db).await.unwrap();
}
