//! Files in Chat, in-process over real sockets under the `remote` harness: upload, the refusals
//! in their order, reading as the uploader, a reader and a stranger, taking back, a message
//! that sends files, and what the Planner's client is given. Each test names the rows of
//! CHECKLIST.md it checks.

use std::sync::Arc;

use axum::body::Bytes;
use chopin_fixtures::github::Permission;
use chopin_protocol::agent::{Attachment, Catalog, CatalogModel, ClientMessage, ServerMessage};
use chopin_server::files::{Files, Limits, UNSENT_KEPT_MS};
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::connector::{self, HttpResponse, TcpConnector};
use chopin_server::runtime::entropy::SeededEntropy;
use chopin_server::store::prelude::*;
use chopin_server::store::{MemoryStore, NewDocument, TakeBack};
use serde_json::{json, Value};
use uuid::Uuid;

mod support;

use support::{ask_room, next, served, served_with, Served};

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0B, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0xE9, 0xFA, 0xDC, 0xD8, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44,
    0xAE, 0x42, 0x60, 0x82,
];

async fn request(
    s: &Served,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: &[u8],
) -> HttpResponse {
    let mut r = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.host))
        .header("origin", format!("http://{}", s.host));
    if let Some(cookie) = cookie {
        r = r.header("cookie", cookie);
    }
    connector::send(&TcpConnector, r.body(Bytes::copy_from_slice(body)).unwrap())
        .await
        .unwrap()
}

/// `cookie` uploads `bytes` as `name` to `doc`.
async fn upload(s: &Served, doc: Uuid, cookie: &str, name: &str, bytes: &[u8]) -> HttpResponse {
    let name: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    request(
        s,
        "POST",
        &format!("/api/channels/{doc}/attachments?name={name}"),
        Some(cookie),
        bytes,
    )
    .await
}

fn json_of(r: &HttpResponse) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// An upload that must be kept: its id.
async fn kept(s: &Served, cookie: &str, name: &str, bytes: &[u8]) -> String {
    let r = upload(s, s.doc, cookie, name, bytes).await;
    assert_eq!(r.status, 201, "{:?}", json_of(&r));
    json_of(&r)["id"].as_str().unwrap().to_owned()
}

async fn get_file(s: &Served, doc: Uuid, id: &str, cookie: Option<&str>) -> HttpResponse {
    request(
        s,
        "GET",
        &format!("/api/channels/{doc}/attachments/{id}"),
        cookie,
        b"",
    )
    .await
}

fn assert_guarded(r: &HttpResponse) {
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    assert_eq!(
        r.headers["content-security-policy"],
        "default-src 'none'; sandbox"
    );
}

#[tokio::test]
async fn file_02_file_04_file_14_file_16_an_upload_is_kept_under_the_type_its_bytes_have() {
    let s = served().await;
    let r = upload(&s, s.doc, &s.mona_cookie, "notes.txt", PNG).await;
    assert_eq!(r.status, 201);
    let body = json_of(&r);
    assert_eq!(body["name"], "notes.txt");
    assert_eq!(body["kind"], "image", "a PNG whatever its name");
    assert_eq!(body["mimeType"], "image/png");
    assert_eq!(body["size"], PNG.len());
    assert!(Uuid::parse_str(body["id"].as_str().unwrap()).is_ok());
    let r = upload(&s, s.doc, &s.mona_cookie, "deploy.yml", b"on: push\n").await;
    assert_eq!(json_of(&r)["mimeType"], "text/plain");
    assert_eq!(json_of(&r)["kind"], "text");
}

#[tokio::test]
async fn file_05_file_06_file_07_file_08_file_15_file_33_refusals_in_their_order_with_their_statuses(
) {
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.chat_attachment_max_count = 1;
        c.chat_attachment_max_bytes = 100;
        c.chat_attachment_max_total_bytes = 10;
    })
    .await;
    let lisa = s.sign_in("lisa", 1002, Permission::Read).await;
    let refused = |r: HttpResponse| (r.status.as_u16(), json_of(&r)["error"].clone());
    // not-allowed comes first: a reader's empty upload is not-allowed, not empty.
    assert_eq!(
        refused(upload(&s, s.doc, &lisa, "a.txt", b"").await),
        (403, json!("not-allowed"))
    );
    assert_eq!(
        refused(upload(&s, s.doc, &s.mona_cookie, "a.txt", b"").await),
        (422, json!("empty"))
    );
    // Too large, checked before the type: binary bytes over the cap are too-large.
    assert_eq!(
        refused(upload(&s, s.doc, &s.mona_cookie, "a.bin", &[0u8; 101]).await),
        (413, json!("too-large"))
    );
    assert_eq!(
        refused(upload(&s, s.doc, &s.mona_cookie, "a.bin", &[0xffu8, 0xfe, 0]).await),
        (422, json!("unsupported"))
    );
    for (name, bytes) in [
        (
            "logo.svg",
            &br#"<svg xmlns="http://www.w3.org/2000/svg"/>"#[..],
        ),
        ("shot.png", b"<html><body>not a picture</body></html>"),
    ] {
        assert_eq!(
            refused(upload(&s, s.doc, &s.mona_cookie, name, bytes).await),
            (422, json!("image-type")),
            "{name}"
        );
    }
    // The unsent limit: 4 × 10 bytes, 4 × 1 file.
    for i in 0..4 {
        kept(&s, &s.mona_cookie, &format!("{i}.txt"), b"0123456789").await;
    }
    assert_eq!(
        refused(upload(&s, s.doc, &s.mona_cookie, "5.txt", b"x").await),
        (429, json!("too-many"))
    );
    // The document archived: not-allowed.
    s.state.documents.set_archived(s.doc, true).await.unwrap();
    assert_eq!(
        refused(upload(&s, s.doc, &s.mona_cookie, "a.txt", b"hi").await),
        (403, json!("not-allowed"))
    );
}

#[tokio::test]
async fn file_03_an_upload_needs_a_session_and_the_apps_own_origin() {
    let s = served().await;
    let r = request(
        &s,
        "POST",
        &format!("/api/channels/{}/attachments?name=a.txt", s.doc),
        None,
        b"hi",
    )
    .await;
    assert_eq!(r.status, 401, "no session");
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    let foreign = http::Request::post(format!(
        "http://{}/api/channels/{}/attachments?name=a.txt",
        s.host, s.doc
    ))
    .header("origin", "http://evil.example")
    .header("cookie", &s.mona_cookie)
    .body(Bytes::from_static(b"hi"))
    .unwrap();
    let r = connector::send(&TcpConnector, foreign).await.unwrap();
    assert_eq!(r.status, 403, "another origin");
    assert_eq!(json_of(&r)["error"], "foreign-origin");
}

#[tokio::test]
async fn file_07_too_much_counts_the_bytes_one_person_leaves_unsent() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.chat_attachment_max_total_bytes = 10;
    })
    .await;
    for i in 0..4 {
        kept(&s, &s.mona_cookie, &format!("{i}.txt"), b"0123456789").await;
    }
    let r = upload(&s, s.doc, &s.mona_cookie, "5.txt", b"x").await;
    assert_eq!(
        (r.status.as_u16(), json_of(&r)["error"].clone()),
        (429, json!("too-much"))
    );
}

#[tokio::test]
async fn file_19_a_count_of_zero_turns_files_off() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.chat_attachment_max_count = 0;
    })
    .await;
    let r = upload(&s, s.doc, &s.mona_cookie, "a.txt", b"hi").await;
    assert_eq!(r.status, 403);
    assert_eq!(json_of(&r)["error"], "not-allowed");
}

#[tokio::test]
async fn file_09_file_10_file_29_file_30_file_31_file_32_who_reads_and_who_takes_back() {
    let s = served().await;
    let lisa = s.sign_in("lisa", 1002, Permission::Read).await;
    let stranger = s.sign_in("eve", 1003, Permission::Read).await;
    s.github.revoke("octo", "plans", "eve");
    let text = kept(&s, &s.mona_cookie, "deploy notes.txt", b"canary first\n").await;
    let image = kept(&s, &s.mona_cookie, "dot.png", PNG).await;
    // Before it is sent: its uploader only; everyone else gets the same 404.
    let r = get_file(&s, s.doc, &text, Some(&s.mona_cookie)).await;
    assert_eq!(r.status, 200);
    assert_guarded(&r);
    let not_found = get_file(&s, s.doc, &text, Some(&lisa)).await;
    assert_eq!(not_found.status, 404);
    assert_guarded(&not_found);
    for other in [
        get_file(&s, s.doc, &text, Some(&stranger)).await,
        get_file(&s, s.doc, &Uuid::new_v4().to_string(), Some(&s.mona_cookie)).await,
        get_file(&s, s.doc, "not-an-id", Some(&s.mona_cookie)).await,
        get_file(&s, Uuid::new_v4(), &text, Some(&s.mona_cookie)).await,
    ] {
        assert_eq!(
            (other.status, other.body.clone()),
            (not_found.status, not_found.body.clone()),
            "every kind of not yours is the same 404"
        );
    }
    // Sent with a message: every reader may read it.
    let mut room = s.room().await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "the notes", "attachments": [text, image]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let message = room.next_of_type("chat:message").await.unwrap();
    let refs = message["references"].as_array().unwrap();
    assert_eq!(refs.len(), 2, "{message}");
    assert_eq!(refs[0]["type"], "attachment");
    assert_eq!(refs[0]["name"], "deploy notes.txt");
    assert_eq!(refs[1]["mimeType"], "image/png");
    let r = get_file(&s, s.doc, &text, Some(&lisa)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        r.headers["content-disposition"],
        "attachment; filename*=UTF-8''deploy%20notes.txt"
    );
    assert_eq!(&r.body[..], b"canary first\n");
    assert_guarded(&r);
    let r = get_file(&s, s.doc, &image, Some(&lisa)).await;
    assert_eq!(r.headers["content-type"], "image/png");
    assert!(r.headers["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("inline"));
    assert_eq!(&r.body[..], PNG);
    assert_eq!(
        get_file(&s, s.doc, &text, Some(&stranger)).await.status,
        404
    );
    // Taking back: a sent file stays (409); an unsent one goes (204); another's is a 404.
    let delete = |id: String, cookie: String| {
        let s = &s;
        async move {
            request(
                s,
                "DELETE",
                &format!("/api/channels/{}/attachments/{id}", s.doc),
                Some(&cookie),
                b"",
            )
            .await
        }
    };
    assert_eq!(
        delete(text.clone(), s.mona_cookie.clone()).await.status,
        409
    );
    let unsent = kept(&s, &s.mona_cookie, "draft.txt", b"draft").await;
    assert_eq!(delete(unsent.clone(), lisa.clone()).await.status, 404);
    let gone = delete(unsent.clone(), s.mona_cookie.clone()).await;
    assert_eq!(gone.status, 204);
    assert_guarded(&gone);
    assert_eq!(
        get_file(&s, s.doc, &unsent, Some(&s.mona_cookie))
            .await
            .status,
        404
    );
    // A file sent once cannot be sent again.
    let again = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-2", "text": "again", "attachments": [text]}),
    )
    .await;
    assert_eq!(again["code"], "file-not-found", "{again}");
}

#[tokio::test]
async fn file_09_someone_elses_upload_cannot_be_sent() {
    let s = served().await;
    let lisa = s.sign_in("lisa", 1002, Permission::Write).await;
    let hers = kept(&s, &lisa, "hers.txt", b"hers").await;
    let mut room = s.room().await;
    let refused = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "look", "attachments": [hers]}),
    )
    .await;
    assert_eq!(refused["type"], "chat:refused");
    assert_eq!(refused["code"], "file-not-found");
}

#[tokio::test]
async fn file_21_the_limits_are_told_on_joining() {
    let s = served().await;
    let mut room = s.connect_room(s.doc, &s.mona_cookie).await;
    let hello = room.next_of_type("session:hello").await.unwrap();
    // HARNESS=remote: both byte caps at most 1 MiB (FILE-22).
    assert_eq!(
        hello["attachments"],
        json!({"maxBytes": 1048576, "maxCount": 5, "maxTotalBytes": 1048576})
    );
}

fn model(id: &str, images: bool) -> CatalogModel {
    CatalogModel {
        id: id.to_owned(),
        name: None,
        description: None,
        thinking_levels: Vec::new(),
        input_types: if images {
            vec!["text".into(), "image".into()]
        } else {
            vec!["text".into()]
        },
        default: true,
    }
}

/// mona's client, attached with `features`, reporting one default model that reads images or
/// not; the room.
async fn planner(
    s: &Served,
    features: &[&str],
    images: bool,
) -> (
    chopin_fixtures::agent::AgentClient,
    chopin_fixtures::browser::BrowserSocket,
) {
    let mut client = s.attach(features).await;
    let mut room = s.room().await;
    if features.contains(&"capability-catalog") {
        client
            .send(&ClientMessage::Catalog(Catalog {
                models: vec![model("m/one", images)],
                commands: Vec::new(),
            }))
            .await
            .unwrap();
        // The catalog has reached the server once the room hears it.
        loop {
            let frame = room.next_of_type("chat:model").await.unwrap();
            if frame["models"].is_array() {
                break;
            }
        }
    }
    (client, room)
}

/// The `turn` the client is sent for mona's message (the session started first).
async fn turn_for(
    client: &mut chopin_fixtures::agent::AgentClient,
) -> chopin_protocol::agent::Turn {
    let session = match next(client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(chopin_protocol::agent::Started {
            session_id: session,
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::Turn(t) = next(client).await {
            return t;
        }
    }
}

#[tokio::test]
async fn file_23_file_26_a_client_with_the_feature_gets_the_files_as_the_turns_attachments() {
    let s = served().await;
    let (mut client, mut room) = planner(&s, &["capability-catalog", "attachments"], true).await;
    let text = kept(&s, &s.mona_cookie, "notes.txt", b"canary first\n").await;
    let image = kept(&s, &s.mona_cookie, "dot.png", PNG).await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-1", "text": "@chopin look", "attachments": [text, image]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let turn = turn_for(&mut client).await;
    assert_eq!(turn.attachments.len(), 2, "{turn:?}");
    match &turn.attachments[0] {
        Attachment::Text(t) => {
            assert_eq!(
                (t.name.as_str(), t.text.as_str()),
                ("notes.txt", "canary first\n")
            );
            assert_eq!(t.id, text);
        }
        other => panic!("{other:?}"),
    }
    match &turn.attachments[1] {
        Attachment::Image(i) => {
            use base64::Engine as _;
            assert_eq!(i.mime_type, "image/png");
            assert_eq!(
                base64::engine::general_purpose::STANDARD
                    .decode(&i.data)
                    .unwrap(),
                PNG
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!turn.prompt.contains("canary first"), "not also in words");
}

#[tokio::test]
async fn file_26_a_client_without_the_feature_gets_the_files_as_words() {
    let s = served().await;
    let (mut client, mut room) = planner(&s, &[], false).await;
    let text = kept(&s, &s.mona_cookie, "notes.txt", b"canary first\n").await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-1", "text": "@chopin look", "attachments": [text]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let turn = turn_for(&mut client).await;
    assert!(turn.attachments.is_empty());
    assert!(
        turn.prompt
            .contains("[File sent with this message: notes.txt]\ncanary first\n[End of notes.txt]"),
        "{}",
        turn.prompt
    );
}

#[tokio::test]
async fn file_24_an_image_to_a_planner_whose_model_reads_no_images_is_refused_and_may_go_to_the_room(
) {
    let s = served().await;
    let (_client, mut room) = planner(&s, &["capability-catalog", "attachments"], false).await;
    let image = kept(&s, &s.mona_cookie, "dot.png", PNG).await;
    let refused = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-1", "text": "@chopin look", "attachments": [image]}),
    )
    .await;
    assert_eq!(refused["code"], "images-unreadable", "{refused}");
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .starts_with("This model can't read images"));
    let to_room = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-2", "text": "look, everyone", "attachments": [image]}),
    )
    .await;
    assert_eq!(to_room["type"], "chat:ack", "{to_room}");
}

#[tokio::test]
async fn file_24_with_nothing_attached_an_image_to_the_planner_hears_why_the_planner_cannot_take_it(
) {
    let s = served().await;
    let mut room = s.room().await;
    let image = kept(&s, &s.mona_cookie, "dot.png", PNG).await;
    let refused = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-1", "text": "@chopin look", "attachments": [image]}),
    )
    .await;
    assert_eq!(refused["code"], "planner-not-attached", "{refused}");
}

#[tokio::test]
async fn file_24_with_no_catalog_an_image_to_the_planner_is_refused() {
    let s = served().await;
    let (_client, mut room) = planner(&s, &[], false).await;
    let image = kept(&s, &s.mona_cookie, "dot.png", PNG).await;
    let refused = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "p-1", "text": "@chopin look", "attachments": [image]}),
    )
    .await;
    assert_eq!(refused["code"], "images-unreadable", "{refused}");
}

#[tokio::test]
async fn file_19_file_20_a_message_carries_at_most_the_count_and_the_total() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.chat_attachment_max_count = 2;
        c.chat_attachment_max_total_bytes = 12;
    })
    .await;
    let mut room = s.room().await;
    let a = kept(&s, &s.mona_cookie, "a.txt", b"0123456789").await;
    let b = kept(&s, &s.mona_cookie, "b.txt", b"0123").await;
    let c = kept(&s, &s.mona_cookie, "c.txt", b"0").await;
    let three = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-1", "text": "three", "attachments": [a, b, c]}),
    )
    .await;
    assert_eq!(three["code"], "too-many", "{three}");
    let heavy = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-2", "text": "heavy", "attachments": [a, b]}),
    )
    .await;
    assert_eq!(heavy["code"], "too-much", "{heavy}");
    let fits = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-3", "text": "fits", "attachments": [a, c]}),
    )
    .await;
    assert_eq!(fits["type"], "chat:ack", "{fits}");
}

/// The one-day window at both edges, on a clock the test moves (FILE-11).
#[tokio::test]
async fn file_11_an_unsent_file_is_forgotten_a_day_after_its_upload_and_not_a_millisecond_before() {
    let store = Arc::new(MemoryStore::new());
    let doc = Uuid::from_u128(7);
    store
        .create_document(&NewDocument {
            id: doc,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "notes".into(),
            title: "Notes".into(),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let files = Files::new(
        store.clone(),
        clock.clone(),
        Arc::new(SeededEntropy::new(1)),
        Limits {
            max_bytes: 1024,
            max_count: 5,
            max_total_bytes: 4096,
        },
    );
    let a = files
        .keep(doc, "mona", "a.txt", None, b"a".to_vec())
        .await
        .unwrap();
    clock.advance(UNSENT_KEPT_MS - 1);
    assert!(files.read(doc, a.id, "mona").await.unwrap().is_some());
    assert_eq!(
        files.forget_unsent().await.unwrap(),
        0,
        "a millisecond early"
    );
    assert!(files.for_message(doc, "mona", &[a.id]).await.is_ok());
    clock.advance(1);
    assert!(
        files.read(doc, a.id, "mona").await.unwrap().is_none(),
        "gone at its day's end, swept or not"
    );
    assert!(files.for_message(doc, "mona", &[a.id]).await.is_err());
    assert_eq!(
        files.take_back(doc, a.id, "mona").await.unwrap(),
        TakeBack::Missing
    );
    assert_eq!(files.forget_unsent().await.unwrap(), 1);
    assert!(store.attachment(doc, a.id).await.unwrap().is_none());
}
