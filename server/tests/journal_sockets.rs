//! The pipelined journal seen from the sockets: when the store cannot save a writer's updates,
//! the writer's socket is told and closed (y-websocket's `/api/yjs`: 1011 `not-saved`; the
//! room: an `error` `not-saved` frame, then 1011), a listener is sent nothing of them, and once
//! the store is back the writer's next sync saves them and the listener gets them.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chopin_document::ydoc;
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_server::store::instrumented::{Call, Hook, Instrumented};
use chopin_server::store::{MemoryStore, Store, StoreError};
use uuid::Uuid;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;
use yrs::{GetString, Text, Transact};

/// Fails journal writes while `fail` is set, as a full disk would.
#[derive(Clone, Default)]
struct FailJournal {
    fail: Arc<AtomicBool>,
}

impl Hook for FailJournal {
    fn call(&self, _call: Call) {}

    fn fail(&self, method: &'static str, _write: bool) -> Option<StoreError> {
        (method == "append_updates" && self.fail.load(Ordering::SeqCst))
            .then(|| StoreError::Backend("the disk is full".into()))
    }
}

async fn yjs_socket(s: &support::Served, document: Uuid) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let mut socket = BrowserSocket::connect(
        stream,
        &s.host,
        &format!("/api/yjs/{document}"),
        Some(&s.mona_cookie),
        Some(&format!("http://{}", s.host)),
    )
    .await
    .unwrap();
    // Read up to the server's sync step 1.
    loop {
        match socket.recv_json().await.unwrap() {
            BrowserEvent::Binary(bytes) if bytes.starts_with(&[0, 0]) => return socket,
            BrowserEvent::Closed { code, reason } => panic!("closed: {code} {reason}"),
            _ => {}
        }
    }
}

fn typed(doc: &yrs::Doc, text: &str) -> Vec<u8> {
    let source = doc.get_or_insert_text(ydoc::SOURCE_TEXT);
    let update = {
        let mut txn = doc.transact_mut();
        let end = source.get_string(&txn).encode_utf16().count() as u32;
        source.insert(&mut txn, end, text);
        txn.encode_update_v1()
    };
    Message::Sync(SyncMessage::Update(update)).encode_v1()
}

/// The text a listener has once it applied every update it was sent within `wait`.
async fn heard(listener: &mut BrowserSocket, doc: &yrs::Doc, wait: Duration) -> String {
    let source = doc.get_or_insert_text(ydoc::SOURCE_TEXT);
    while let Ok(event) = tokio::time::timeout(wait, listener.recv_json()).await {
        let Ok(BrowserEvent::Binary(bytes)) = event else {
            continue;
        };
        if let Ok(Message::Sync(SyncMessage::Update(u) | SyncMessage::SyncStep2(u))) =
            Message::decode_v1(&bytes)
        {
            doc.transact_mut()
                .apply_update(yrs::Update::decode_v1(&u).unwrap())
                .unwrap();
        }
    }
    let txn = doc.transact();
    source.get_string(&txn)
}

#[tokio::test]
async fn a_writer_whose_updates_are_not_saved_is_closed_not_saved_and_its_sync_saves_them_later() {
    let hook = FailJournal::default();
    let store: Arc<dyn Store> = Arc::new(Instrumented::new(
        Arc::new(MemoryStore::new()),
        hook.clone(),
    ));
    let s = support::served_over(store).await;
    let mut writer = yjs_socket(&s, s.doc).await;
    let mut listener = yjs_socket(&s, s.doc).await;
    let mut room = s.room().await;
    let client = ydoc::empty_doc(4242);

    hook.fail.store(true, Ordering::SeqCst);
    writer.send_binary(typed(&client, "lost ")).await.unwrap();
    writer
        .send_binary(typed(&client, "and more"))
        .await
        .unwrap();
    let (code, reason) = tokio::time::timeout(Duration::from_secs(10), writer.expect_close())
        .await
        .expect("the writer is closed within 10 s")
        .unwrap();
    assert_eq!((code, reason.as_str()), (1011, "not-saved"));
    let listened = ydoc::empty_doc(1);
    assert_eq!(
        heard(&mut listener, &listened, Duration::from_millis(300)).await,
        "",
        "nothing unsaved was relayed"
    );
    // The room's writer would be told in words first; its reader is not told at all.
    room.send_binary(typed(&ydoc::empty_doc(777), "room "))
        .await
        .unwrap();
    let error = tokio::time::timeout(Duration::from_secs(10), room.next_of_type("error"))
        .await
        .expect("the room is told within 10 s")
        .unwrap();
    assert_eq!(error["code"], "not-saved", "{error}");
    let (code, _) = room.expect_close().await.unwrap();
    assert_eq!(code, 1011);

    // The store is back: the provider reconnects and its sync step 2 carries everything.
    hook.fail.store(false, Ordering::SeqCst);
    let mut again = yjs_socket(&s, s.doc).await;
    let everything = ydoc::encode_state(&client);
    again
        .send_binary(Message::Sync(SyncMessage::SyncStep2(everything)).encode_v1())
        .await
        .unwrap();
    assert_eq!(
        heard(&mut listener, &listened, Duration::from_millis(500)).await,
        "lost and more"
    );
}
