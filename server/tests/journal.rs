//! The pipelined Yjs journal, on the memory store behind a gate: a writer's updates are taken
//! without waiting for the disk, journalled in rounds (one store write for what queued while the
//! last one was written), applied and relayed only once durable — one merged frame per writer
//! per round — and, when a round's write fails, nothing after it is journalled, applied or
//! relayed, and the sockets whose changes were dropped are told.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chopin_document::ydoc;
use chopin_server::content::{OpenDocuments, Relay};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::runtime::Shutdown;
use chopin_server::store::prelude::*;
use chopin_server::store::{
    DocumentContent, MemoryStore, NewDocument, OwnerGuard, PlanCommit, StoreError, StoreResult,
    UnixMillis,
};
use tokio::sync::watch;
use uuid::Uuid;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::{GetString, Text, Transact};

/// The memory store, with its journal writes held at a gate until it opens, counted, and able
/// to fail the next one.
struct Gated {
    inner: MemoryStore,
    open: watch::Receiver<bool>,
    fail_next: AtomicBool,
    /// How many updates each journal write carried, in order.
    writes: Mutex<Vec<usize>>,
}

#[async_trait]
impl ContentStore for Gated {
    async fn append_update(&self, id: Uuid, update: &[u8], now: UnixMillis) -> StoreResult<i64> {
        let seqs = self.append_updates(id, &[update], now).await?;
        Ok(seqs[0])
    }
    async fn append_updates(
        &self,
        id: Uuid,
        updates: &[&[u8]],
        now: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        self.writes.lock().unwrap().push(updates.len());
        let mut open = self.open.clone();
        open.wait_for(|open| *open).await.unwrap();
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Backend("the disk is full".into()));
        }
        self.inner.append_updates(id, updates, now).await
    }
    async fn commit_plan_edit(
        &self,
        id: Uuid,
        expected: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        now: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        self.inner
            .commit_plan_edit(id, expected, owner, update, now)
            .await
    }
    async fn document_content(&self, id: Uuid) -> StoreResult<DocumentContent> {
        self.inner.document_content(id).await
    }
    async fn write_checkpoint(&self, id: Uuid, upto: i64, state: &[u8]) -> StoreResult<()> {
        self.inner.write_checkpoint(id, upto, state).await
    }
    async fn reset_content(&self, id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.inner.reset_content(id, state).await
    }
}

struct Fixture {
    store: MemoryStore,
    gated: Arc<Gated>,
    gate: watch::Sender<bool>,
    open: Arc<OpenDocuments>,
    id: Uuid,
}

async fn fixture() -> Fixture {
    let store = MemoryStore::new();
    let id = OsEntropy.uuid();
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "doc".into(),
            title: "Doc".into(),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let (gate, open_rx) = watch::channel(true);
    let gated = Arc::new(Gated {
        inner: store.clone(),
        open: open_rx,
        fail_next: AtomicBool::new(false),
        writes: Mutex::default(),
    });
    let open = Arc::new(OpenDocuments::new(
        gated.clone(),
        Arc::new(store.clone()),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
        Shutdown::new(),
    ));
    Fixture {
        store,
        gated,
        gate,
        open,
        id,
    }
}

/// A client typing at the end of its own copy, one update per call.
struct Typist {
    doc: yrs::Doc,
}

impl Typist {
    fn new(client: u64) -> Self {
        Typist {
            doc: ydoc::empty_doc(client),
        }
    }

    fn type_text(&self, text: &str) -> Vec<u8> {
        let source = self.doc.get_or_insert_text(ydoc::SOURCE_TEXT);
        let mut txn = self.doc.transact_mut();
        let end = source.get_string(&txn).encode_utf16().count() as u32;
        source.insert(&mut txn, end, text);
        txn.encode_update_v1()
    }
}

/// The Yjs update a relayed frame carries.
fn carried(relay: &Relay) -> Vec<u8> {
    match Message::decode_v1(&relay.frame).unwrap() {
        Message::Sync(SyncMessage::Update(update)) => update,
        other => panic!("not a sync update: {other:?}"),
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A writer's burst while the disk is busy: nothing is relayed or applied before it is
/// journalled; what queued meanwhile is one journal write and reaches a listener as one merged
/// frame, which a fresh client applies to the same text.
#[tokio::test]
async fn updates_queued_while_the_journal_writes_are_saved_together_and_relayed_as_one_frame() {
    let fx = fixture().await;
    let writer = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let reader = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let mut listener = reader.document.subscribe();
    let typist = Typist::new(7);

    fx.gate.send_replace(false);
    for (n, key) in ["H", "e", "l", "l", "o", "!"].into_iter().enumerate() {
        assert!(writer
            .document
            .queue_update(writer.connection, &typist.type_text(key))
            .await
            .unwrap());
        if n == 0 {
            // The first round begins and waits on the disk.
            settle().await;
        }
    }
    settle().await;
    assert_eq!(
        *fx.gated.writes.lock().unwrap(),
        vec![1],
        "one write in flight"
    );
    assert_eq!(reader.document.source().await, "", "nothing applied yet");
    assert!(listener.try_recv().is_err(), "nothing relayed yet");
    assert!(fx
        .store
        .document_content(fx.id)
        .await
        .unwrap()
        .updates
        .is_empty());

    fx.gate.send_replace(true);
    let first = listener.recv().await.unwrap();
    let rest = listener.recv().await.unwrap();
    assert_eq!(
        *fx.gated.writes.lock().unwrap(),
        vec![1, 5],
        "the five queued meanwhile took one write"
    );
    assert_eq!(first.from, writer.connection);
    assert_eq!(rest.from, writer.connection);
    settle().await;
    assert!(listener.try_recv().is_err(), "two frames, not six");

    let fresh = ydoc::empty_doc(99);
    for relay in [&first, &rest] {
        fresh
            .transact_mut()
            .apply_update(yrs::Update::decode_v1(&carried(relay)).unwrap())
            .unwrap();
    }
    assert_eq!(ydoc::read_source(&fresh), "Hello!");
    assert_eq!(reader.document.source().await, "Hello!");
    let journal = fx.store.document_content(fx.id).await.unwrap().updates;
    assert_eq!(
        journal.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        (1..=6).collect::<Vec<_>>()
    );
}

/// A journal write that fails after later updates were queued on top of it: neither it nor
/// anything queued after it is journalled, applied or relayed (the later ones may build on it),
/// the sockets that sent them are told, and the document takes the client's changes again once
/// it resends them (as a provider's sync does after its socket closes).
#[tokio::test]
async fn nothing_after_a_failed_journal_write_is_relayed_and_its_senders_are_told() {
    let fx = fixture().await;
    let writer = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let other = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let reader = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let mut listener = reader.document.subscribe();
    let (typist, second) = (Typist::new(7), Typist::new(8));

    fx.gate.send_replace(false);
    fx.gated.fail_next.store(true, Ordering::SeqCst);
    let lost = typist.type_text("lost");
    writer
        .document
        .queue_update(writer.connection, &lost)
        .await
        .unwrap();
    settle().await;
    // Queued while the failing write is in flight: one builds on it, one does not.
    let builds_on_it = typist.type_text(" too");
    writer
        .document
        .queue_update(writer.connection, &builds_on_it)
        .await
        .unwrap();
    other
        .document
        .queue_update(other.connection, &second.type_text("B"))
        .await
        .unwrap();
    fx.gate.send_replace(true);

    let told = listener.recv().await.unwrap();
    assert!(told.frame.is_empty());
    assert!(told.unsaved_for(writer.connection));
    assert!(told.unsaved_for(other.connection));
    assert!(!told.unsaved_for(reader.connection));
    settle().await;
    assert!(listener.try_recv().is_err(), "nothing was relayed");
    assert!(fx
        .store
        .document_content(fx.id)
        .await
        .unwrap()
        .updates
        .is_empty());
    assert_eq!(reader.document.source().await, "");
    assert_eq!(*fx.gated.writes.lock().unwrap(), vec![1]);

    // The writer syncs again: its whole state, taken now in one piece.
    assert!(writer
        .document
        .apply_update(writer.connection, &ydoc::encode_state(&typist.doc))
        .await
        .unwrap());
    assert_eq!(reader.document.source().await, "lost too");
    let relayed = listener.recv().await.unwrap();
    assert_eq!(relayed.from, writer.connection);
    assert_eq!(
        fx.store
            .document_content(fx.id)
            .await
            .unwrap()
            .updates
            .len(),
        1
    );
}

/// A writer far ahead of the disk: at most 1,024 changes wait in the queue (besides the round of
/// at most 256 being written), so the socket that sends more waits (reads no further frames)
/// until a round saves some.
#[tokio::test]
async fn a_writer_ahead_of_the_disk_waits_once_the_queue_is_full() {
    let fx = fixture().await;
    let writer = fx.open.join(fx.id, Uuid::nil()).await.unwrap();
    let typist = Typist::new(7);
    let keys: Vec<Vec<u8>> = (0..1500).map(|_| typist.type_text("k")).collect();
    fx.gate.send_replace(false);
    let returned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sending = {
        let returned = returned.clone();
        tokio::spawn(async move {
            for key in keys {
                writer
                    .document
                    .queue_update(writer.connection, &key)
                    .await
                    .unwrap();
                returned.fetch_add(1, Ordering::SeqCst);
            }
            writer
        })
    };
    settle().await;
    let taken = returned.load(Ordering::SeqCst);
    assert!(
        (1024..=1024 + 256).contains(&taken),
        "{taken} updates were taken while the disk held the first"
    );
    fx.gate.send_replace(true);
    let writer = tokio::time::timeout(Duration::from_secs(10), sending)
        .await
        .expect("every update is taken once the disk moves")
        .unwrap();
    assert_eq!(returned.load(Ordering::SeqCst), 1500);
    writer
        .document
        .apply_update(writer.connection, &typist.type_text("!"))
        .await
        .unwrap();
    assert_eq!(writer.document.source().await.len(), 1501);
}
