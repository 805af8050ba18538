//! Awareness cannot grow the server: a reader flooding a document with awareness (thousands of
//! new client ids, states of every size, a few bytes declaring millions of clients) leaves the
//! document holding at most a few of its clients, each state capped; a joiner's first awareness
//! frame stays small; the flooder's clients are gone once it leaves; and the heap, measured by a
//! counting allocator in this test binary, neither keeps the flood nor spikes on the declared
//! count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use chopin_server::content::{
    awareness_frame, OpenDocuments, AWARENESS_ACCOUNT_BYTES, AWARENESS_CLIENTS_PER_SOCKET,
    AWARENESS_DOCUMENT_BYTES, AWARENESS_FRAME_BYTES, AWARENESS_STATE_BYTES,
};
use chopin_server::runtime::{Clock, Shutdown};
use chopin_server::store::prelude::*;
use chopin_server::store::{MemoryStore, NewDocument, UnixMillis};
use chopin_server::transport::yjs::{self, Answer};
use uuid::Uuid;
use yrs::sync::awareness::AwarenessUpdateEntry;
use yrs::ClientID;

/// The system allocator, counting the bytes live now and the most live at once.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Restarts peak tracking from what is live now.
fn reset_peak() -> usize {
    let now = live();
    PEAK.store(now, Ordering::SeqCst);
    now
}

struct FixedClock;

impl Clock for FixedClock {
    fn now_ms(&self) -> UnixMillis {
        1_700_000_000_000
    }
}

/// An awareness frame for `clients`, each with a JSON state of `bytes` bytes at `clock`.
fn flood(clients: impl Iterator<Item = u64>, clock: u32, bytes: usize) -> Vec<u8> {
    let state: Arc<str> = Arc::from(format!("\"{}\"", "x".repeat(bytes.saturating_sub(2))));
    let entries: BTreeMap<ClientID, AwarenessUpdateEntry> = clients
        .map(|c| {
            (
                ClientID::new(c),
                AwarenessUpdateEntry {
                    clock,
                    json: state.clone(),
                },
            )
        })
        .collect();
    awareness_frame(&entries)
}

const MIB: usize = 1024 * 1024;

#[tokio::test(flavor = "current_thread")]
async fn a_reader_flooding_awareness_cannot_grow_the_server() {
    let store = MemoryStore::new();
    let id = Uuid::from_u128(0xf100d);
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "flood".into(),
            title: "Flood".into(),
            created_at_ms: 1,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let open = Arc::new(OpenDocuments::new(
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(FixedClock),
        Arc::new(chopin_server::runtime::entropy::SeededEntropy::new(1)),
        Shutdown::new(),
    ));
    // A joiner that reads every relayed frame, as an open socket does.
    let watcher = open.join(id, Uuid::from_u128(1)).await.unwrap();
    let mut relayed = watcher.document.subscribe();
    let flooder = open.join(id, Uuid::from_u128(2)).await.unwrap();
    let doc = &flooder.document;

    let before = live();
    // 200 frames of 8 new clients with 16 KiB states each (26 MiB sent), then 8 frames of one
    // client with a state over the cap, then frames declaring more clients than a socket may
    // have.
    let mut sent = 0usize;
    for round in 0..200u64 {
        let frame = flood(round * 8..round * 8 + 8, 1, AWARENESS_STATE_BYTES - 64);
        sent += frame.len();
        let _ = yjs::frame(&flooder, false, &frame).await;
        while relayed.try_recv().is_ok() {}
    }
    for round in 0..8u64 {
        let frame = flood(10_000 + round..10_001 + round, 1, 256 * 1024);
        sent += frame.len();
        let _ = yjs::frame(&flooder, false, &frame).await;
        while relayed.try_recv().is_ok() {}
    }
    let many = flood(20_000..21_000, 1, 100);
    assert!(matches!(
        yjs::frame(&flooder, false, &many).await,
        Answer::Refused {
            code: "awareness-too-large",
            ..
        }
    ));
    assert!(sent > 25 * MIB, "{sent}");

    // What the document keeps: the flooder's first 8 clients, each state under the cap.
    let snapshot = doc.awareness_snapshot().concat();
    assert!(!snapshot.is_empty(), "the first clients are present");
    let most = AWARENESS_CLIENTS_PER_SOCKET * (AWARENESS_STATE_BYTES + 16) + 16;
    assert!(
        snapshot.len() <= most,
        "a joiner's awareness frame is {} bytes (at most {most})",
        snapshot.len()
    );
    let kept = live().saturating_sub(before);
    assert!(
        kept < 2 * MIB,
        "the flood of {sent} bytes left {kept} bytes on the heap"
    );

    // Six bytes declaring 2^27 clients: refused before anything is allocated for them.
    let base = reset_peak();
    let declared = [0x01, 0x04, 0x80, 0x80, 0x80, 0x40];
    assert!(matches!(
        yjs::frame(&flooder, false, &declared).await,
        Answer::Refused { .. }
    ));
    let spike = PEAK.load(Ordering::SeqCst).saturating_sub(base);
    assert!(
        spike < 64 * 1024,
        "a 6-byte frame made the heap grow {spike} bytes"
    );

    // The flooder leaves: its clients go for everyone.
    drop(flooder);
    assert!(watcher.document.awareness_snapshot().is_empty());
}

/// Hostile input 2: 17 reader sockets of one account, each with 8 clients of 16 KB states, used
/// to make one awareness snapshot no newcomer's socket could take. Each account keeps at most
/// its bound, the document at most its own, and a newcomer's snapshot comes in frames of at
/// most `AWARENESS_FRAME_BYTES`.
#[tokio::test(flavor = "current_thread")]
async fn hostile_2_awareness_is_bounded_per_account_and_document_and_sent_in_bounded_frames() {
    let store = MemoryStore::new();
    let id = Uuid::from_u128(7);
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "aware".into(),
            title: "Aware".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let open = Arc::new(OpenDocuments::new(
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(FixedClock),
        Arc::new(chopin_server::runtime::entropy::SeededEntropy::new(1)),
        Shutdown::new(),
    ));
    let state = AWARENESS_STATE_BYTES - 64;
    let mut sockets = Vec::new();
    // One account, 17 sockets.
    for socket in 0..17u64 {
        let member = open.join(id, Uuid::from_u128(100)).await.unwrap();
        let frame = flood(socket * 8..socket * 8 + 8, 1, state);
        let _ = yjs::frame(&member, false, &frame).await;
        sockets.push(member);
    }
    let one_account: usize = sockets[0]
        .document
        .awareness_snapshot()
        .iter()
        .map(Vec::len)
        .sum();
    assert!(
        one_account <= AWARENESS_ACCOUNT_BYTES + 16 * AWARENESS_CLIENTS_PER_SOCKET * 2,
        "one account keeps {one_account} bytes of awareness"
    );
    // Many accounts, two sockets each.
    for account in 0..40u64 {
        for socket in 0..2u64 {
            let member = open
                .join(id, Uuid::from_u128(1000 + u128::from(account)))
                .await
                .unwrap();
            let first = 100_000 + account * 100 + socket * 10;
            let frame = flood(first..first + 8, 1, state);
            let _ = yjs::frame(&member, false, &frame).await;
            sockets.push(member);
        }
    }
    let frames = sockets[0].document.awareness_snapshot();
    let total: usize = frames.iter().map(Vec::len).sum();
    assert!(
        total <= AWARENESS_DOCUMENT_BYTES + 64 * 1024,
        "the document keeps {total} bytes of awareness"
    );
    assert!(frames.len() > 1, "{} frames", frames.len());
    for frame in &frames {
        assert!(
            frame.len() <= AWARENESS_FRAME_BYTES,
            "a snapshot frame of {} bytes",
            frame.len()
        );
    }
    // The newcomer's query gets the same frames.
    let newcomer = open.join(id, Uuid::from_u128(9)).await.unwrap();
    match yjs::frame(&newcomer, false, &[3]).await {
        Answer::Frames(got) => assert_eq!(got, frames),
        other => panic!("{other:?}"),
    }
}

/// Hostile input 9: a client whose awareness clock is `u32::MAX` leaves no ghost behind: its
/// removal still reaches everyone (at the same clock, which y-protocols takes for a removal).
#[tokio::test(flavor = "current_thread")]
async fn hostile_9_an_awareness_clock_at_its_maximum_leaves_no_ghost() {
    let store = MemoryStore::new();
    let id = Uuid::from_u128(8);
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "ghost".into(),
            title: "Ghost".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let open = Arc::new(OpenDocuments::new(
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(FixedClock),
        Arc::new(chopin_server::runtime::entropy::SeededEntropy::new(1)),
        Shutdown::new(),
    ));
    let watcher = open.join(id, Uuid::from_u128(1)).await.unwrap();
    let mut relayed = watcher.document.subscribe();
    let leaving = open.join(id, Uuid::from_u128(2)).await.unwrap();
    let _ = yjs::frame(&leaving, false, &flood(42..43, u32::MAX, 40)).await;
    relayed.try_recv().expect("the state is relayed");
    drop(leaving);
    let removal = relayed.try_recv().expect("the removal is relayed").frame;
    use yrs::updates::decoder::Decode;
    let update = yrs::sync::awareness::AwarenessUpdate::decode_v1(&removal[2..]).unwrap();
    let entry = &update.clients[&ClientID::new(42)];
    assert_eq!((entry.clock, &*entry.json), (u32::MAX, "null"));
}
