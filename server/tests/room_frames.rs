//! Frames the room socket will not read are answered, not dropped: a text frame that is not
//! UTF-8 gets `error` `malformed` then close 1008; a frame whose header declares more than the
//! socket reads (1 MiB) gets `error` `frame-too-large` then close 1009, before its payload is
//! read. A frame just under the limit is read as usual.

use chopin_fixtures::agent::masked_frame;
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use serde_json::Value;

mod support;

use support::{served, Served};

async fn room(s: &Served) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &s.host,
        &format!("/api/documents/{}/room", s.doc),
        Some(&s.mona_cookie),
        Some(&format!("http://{}", s.host)),
    )
    .await
    .unwrap();
    room.next_of_type("session:planner").await.unwrap();
    room
}

/// The `error` frames heard, then the close.
async fn errors_then_close(room: &mut BrowserSocket) -> (Vec<Value>, (u16, String)) {
    let mut errors = Vec::new();
    loop {
        match room.recv_json().await.unwrap() {
            BrowserEvent::Json(v) if v["type"] == "error" => errors.push(v),
            BrowserEvent::Closed { code, reason } => return (errors, (code, reason)),
            _ => {}
        }
    }
}

const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;

#[tokio::test]
async fn a_text_frame_that_is_not_utf8_is_answered_malformed_and_closed_1008() {
    let s = served().await;
    let mut room = room(&s).await;
    room.send_raw(&masked_frame(TEXT, &[0x7b, 0xff, 0xfe, 0x7d], None))
        .await
        .unwrap();
    let (errors, close) = errors_then_close(&mut room).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "malformed");
    assert_eq!(close, (1008, "malformed".to_owned()));
}

#[tokio::test]
async fn a_frame_declaring_more_than_1_mib_is_answered_frame_too_large_and_closed_1009() {
    let s = served().await;
    let mut room = room(&s).await;
    // Only the header and a few bytes are sent: the server refuses it from the header.
    room.send_raw(&masked_frame(BINARY, &[0u8; 16], Some(2 * 1024 * 1024)))
        .await
        .unwrap();
    let (errors, close) = errors_then_close(&mut room).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "frame-too-large");
    assert_eq!(close, (1009, "frame-too-large".to_owned()));
}

#[tokio::test]
async fn a_frame_under_the_limit_is_read() {
    let s = served().await;
    let mut room = room(&s).await;
    // A JSON message padded to just under 1 MiB: read, and answered as an unknown type.
    let padding = "x".repeat(1024 * 1024 - 64);
    let text = format!("{{\"type\":\"nothing\",\"pad\":\"{padding}\"}}");
    room.send_raw(&masked_frame(TEXT, text.as_bytes(), None))
        .await
        .unwrap();
    let error = room.next_of_type("error").await.unwrap();
    assert_eq!(error["code"], "unknown-type", "{error}");
    assert!(room.closed().is_none());
}
