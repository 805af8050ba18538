//! Dictation through the deployment's transcription, in-process over real sockets against the
//! fake model provider's streaming `/audio/transcriptions`. Each test names the rows of
//! CHECKLIST.md it checks.

use std::sync::Arc;

use axum::body::Bytes;
use chopin_fixtures::github::Permission;
use chopin_fixtures::model_provider::{FakeProvider, Transcript};
use chopin_server::config::{Secret, TranscriptionSettings};
use chopin_server::runtime::connector::{self, HttpResponse, TcpConnector};
use chopin_server::store::MemoryStore;
use serde_json::Value;

mod support;

use support::{served, served_with, Served};

/// The start of a WAV recording.
const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00";

/// A server whose transcription is the fake provider's, recordings at most `max_bytes`.
async fn dictating(max_bytes: u64) -> (Served, FakeProvider) {
    let fake = FakeProvider::new();
    let url = fake.serve_tcp().await.unwrap();
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.transcription = Some(TranscriptionSettings {
            model: "fake-transcribe".into(),
            base_url: format!("{url}/v1"),
            api_key: Some(Secret::new("sk-operator")),
            max_bytes,
        });
    })
    .await;
    (s, fake)
}

async fn post(s: &Served, cookie: &str, body: &[u8]) -> HttpResponse {
    let request = http::Request::post(format!(
        "http://{}/api/channels/{}/transcriptions",
        s.host, s.doc
    ))
    .header("origin", format!("http://{}", s.host))
    .header("cookie", cookie)
    .body(Bytes::copy_from_slice(body))
    .unwrap();
    connector::send(&TcpConnector, request).await.unwrap()
}

fn lines(r: &HttpResponse) -> Vec<Value> {
    std::str::from_utf8(&r.body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn dict_01_dict_05_dict_06_with_no_model_the_route_is_a_404_and_hello_names_no_transcription()
{
    let s = served().await;
    let r = post(&s, &s.mona_cookie, WAV).await;
    assert_eq!(r.status, 404);
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"], "transcription-off");
    let mut room = s.connect_room(s.doc, &s.mona_cookie).await;
    let hello = room.next_of_type("session:hello").await.unwrap();
    assert!(hello.get("transcription").is_none(), "{hello}");
}

#[tokio::test]
async fn dict_03_dict_04_dict_06_a_recording_is_sent_alone_and_its_words_come_back_as_json_lines() {
    let (s, fake) = dictating(1024).await;
    fake.set_transcript(Transcript {
        deltas: vec!["ship ".into(), "the canary".into()],
        cut: false,
    });
    let mut room = s.connect_room(s.doc, &s.mona_cookie).await;
    let hello = room.next_of_type("session:hello").await.unwrap();
    assert_eq!(
        hello["transcription"],
        serde_json::json!({"provider": "openai", "maxBytes": 1024})
    );
    let r = post(&s, &s.mona_cookie, WAV).await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/x-ndjson"));
    assert_eq!(
        lines(&r),
        [
            serde_json::json!({"delta": "ship "}),
            serde_json::json!({"delta": "the canary"}),
            serde_json::json!({"text": "ship the canary"}),
        ]
    );
    // The provider got the recording, the model and the stream switch, and nothing else.
    let sent = fake.transcriptions();
    assert_eq!(sent.len(), 1);
    let names: Vec<&str> = sent[0].parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["model", "stream", "file"]);
    let file = sent[0].part("file").unwrap();
    assert_eq!(file.bytes, WAV);
    assert_eq!(file.content_type.as_deref(), Some("audio/wav"));
    assert_eq!(file.file_name.as_deref(), Some("recording.wav"));
    assert_eq!(sent[0].part("model").unwrap().bytes, b"fake-transcribe");
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer sk-operator"));
}

#[tokio::test]
async fn dict_04_a_provider_that_stops_part_way_ends_with_an_error_line() {
    let (s, fake) = dictating(1024).await;
    fake.set_transcript(Transcript {
        deltas: vec!["ship ".into()],
        cut: true,
    });
    let r = post(&s, &s.mona_cookie, WAV).await;
    let got = lines(&r);
    assert_eq!(got[0], serde_json::json!({"delta": "ship "}));
    assert!(got[1]["error"].is_string(), "{got:?}");
    assert_eq!(got.len(), 2);
}

#[tokio::test]
async fn dict_02_dict_03_dict_07_refusals_who_how_long_and_what() {
    let (s, fake) = dictating(64).await;
    let lisa = s.sign_in("lisa", 1002, Permission::Read).await;
    let refused = |r: HttpResponse| {
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        (
            r.status.as_u16(),
            v["error"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(refused(post(&s, &lisa, WAV).await).0, 403, "a reader");
    assert_eq!(
        refused(post(&s, &s.mona_cookie, &[0u8; 65]).await),
        (413, "too-large".into())
    );
    let mut exactly = WAV.to_vec();
    exactly.resize(64, 0);
    assert_eq!(
        post(&s, &s.mona_cookie, &exactly).await.status,
        200,
        "at the cap"
    );
    assert_eq!(
        refused(post(&s, &s.mona_cookie, b"just some words").await),
        (422, "not-audio".into())
    );
    assert_eq!(
        refused(post(&s, &s.mona_cookie, b"").await),
        (422, "not-audio".into())
    );
    assert_eq!(
        fake.transcriptions().len(),
        1,
        "only the recording at the cap was sent"
    );
    // From another origin: refused before anything is read.
    let request = http::Request::post(format!(
        "http://{}/api/channels/{}/transcriptions",
        s.host, s.doc
    ))
    .header("origin", "http://evil.example")
    .header("cookie", &s.mona_cookie)
    .body(Bytes::from_static(WAV))
    .unwrap();
    let r = connector::send(&TcpConnector, request).await.unwrap();
    assert_eq!(r.status, 403);
}
