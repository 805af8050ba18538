//! Live content under attack and under races, on the memory store, with no server around it:
//! the updates that used to poison a document are refused (and skipped if an older journal holds
//! them), and one live copy per document holds under unloads racing joins, reads and edits.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chopin_document::ydoc;
use chopin_server::content::{OpenDocuments, UpdateError, IDLE_UNLOAD};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::runtime::Shutdown;
use chopin_server::store::prelude::*;
use chopin_server::store::{
    Advance, Document, DocumentContent, MemoryStore, NewDocument, OwnerGuard, PlanCommit,
    Provenance, RevisionKind, StoreResult, UnixMillis,
};
use rand::{Rng, SeedableRng};
use uuid::Uuid;
use yrs::updates::decoder::Decode;
use yrs::{ReadTxn, StateVector, Transact};

/// Applies without error in yrs 0.28; afterwards every encode of the document used to panic.
const UNENCODABLE: &str = "0101d90f009244f1070007422d736964652001f107011a02";
/// Panicked inside yrs's decode or apply.
const PANICS: &str = "0201e60f0044fe070007422d736964652003fe07feffffffffffffffff01040106736f757263651a48656c6c6f2c20776f006c64212023205469746c650a2d20697481fe07190284fe071b010a01fe07011a02";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

async fn document(store: &MemoryStore) -> Uuid {
    let id = OsEntropy.uuid();
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: format!("doc-{id}"),
            title: "Doc".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    id
}

fn registry(
    content: Arc<dyn ContentStore>,
    documents: Arc<dyn DocumentStore>,
) -> Arc<OpenDocuments> {
    Arc::new(OpenDocuments::new(
        content,
        documents,
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
        Shutdown::new(),
    ))
}

/// A client's update that sets the text to `text` (from an empty document).
fn typed(text: &str) -> Vec<u8> {
    ydoc::replace_source(&ydoc::empty_doc(4242), text)
}

#[tokio::test]
async fn the_updates_that_poisoned_a_document_are_refused_and_skipped_when_journalled() {
    let store = MemoryStore::new();
    let id = document(&store).await;
    let open = registry(Arc::new(store.clone()), Arc::new(store.clone()));
    let member = open.join(id, Uuid::nil()).await.unwrap();
    assert!(member
        .document
        .apply_update(member.connection, &typed("Hello\n"))
        .await
        .unwrap());
    for bad in [UNENCODABLE, PANICS] {
        let refused = member
            .document
            .apply_update(member.connection, &hex(bad))
            .await;
        assert!(
            matches!(
                refused,
                Err(UpdateError::Poisonous(_) | UpdateError::Malformed(_) | UpdateError::Gapped(_))
            ),
            "{bad}: {refused:?}"
        );
    }
    // Nothing of them reached the journal; the document still syncs and reads.
    assert_eq!(store.document_content(id).await.unwrap().updates.len(), 1);
    let everything = member.document.missing_for(&StateVector::default()).await;
    assert!(yrs::Update::decode_v1(&everything).is_ok());
    assert_eq!(member.document.source().await, "Hello\n");

    // A journal written before this check may hold them: a restart still opens the document,
    // skipping (and counting) the entry that panics; the unencodable one did its harm through a
    // delete set it held pending, which a load drops.
    store.append_update(id, &hex(UNENCODABLE), 1).await.unwrap();
    store.append_update(id, &hex(PANICS), 2).await.unwrap();
    store
        .append_update(id, &typed("Hello\nAgain\n"), 3)
        .await
        .unwrap();
    drop(member);
    let restarted = registry(Arc::new(store.clone()), Arc::new(store.clone()));
    let reopened = restarted.open(id).await.unwrap();
    assert_eq!(restarted.skipped_entries(), 1);
    let text = reopened.source().await;
    assert!(text.contains("Hello"), "{text:?}");
    let everything = reopened.missing_for(&StateVector::default()).await;
    let doc = ydoc::empty_doc(1);
    doc.transact_mut()
        .apply_update(yrs::Update::decode_v1(&everything).unwrap())
        .unwrap();
    assert!(
        doc.transact()
            .encode_state_as_update_v1(&StateVector::default())
            .len()
            > 2
    );
}

/// A content store that yields to the runtime inside every call, so calls really interleave.
#[derive(Clone)]
struct Yielding(MemoryStore);

async fn pause() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[async_trait]
impl ContentStore for Yielding {
    async fn append_update(&self, id: Uuid, update: &[u8], now: UnixMillis) -> StoreResult<i64> {
        pause().await;
        self.0.append_update(id, update, now).await
    }
    async fn append_updates(
        &self,
        id: Uuid,
        updates: &[&[u8]],
        now: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
        pause().await;
        self.0.append_updates(id, updates, now).await
    }
    async fn commit_plan_edit(
        &self,
        id: Uuid,
        expected: i64,
        owner: Option<&OwnerGuard>,
        update: &[u8],
        now: UnixMillis,
    ) -> StoreResult<PlanCommit> {
        pause().await;
        self.0
            .commit_plan_edit(id, expected, owner, update, now)
            .await
    }
    async fn document_content(&self, id: Uuid) -> StoreResult<DocumentContent> {
        pause().await;
        let content = self.0.document_content(id).await;
        pause().await;
        content
    }
    async fn write_checkpoint(&self, id: Uuid, upto: i64, state: &[u8]) -> StoreResult<()> {
        pause().await;
        self.0.write_checkpoint(id, upto, state).await
    }
    async fn reset_content(&self, id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.0.reset_content(id, state).await
    }
}

#[async_trait]
impl DocumentStore for Yielding {
    async fn create_document(&self, doc: &NewDocument) -> StoreResult<Document> {
        self.0.create_document(doc).await
    }
    async fn document(&self, id: Uuid) -> StoreResult<Option<Document>> {
        self.0.document(id).await
    }
    async fn document_brief(&self, id: Uuid) -> StoreResult<Option<String>> {
        self.0.document_brief(id).await
    }
    async fn document_provenance(&self, id: Uuid) -> StoreResult<Option<Provenance>> {
        self.0.document_provenance(id).await
    }
    async fn created_through_mcp(&self, id: Uuid) -> StoreResult<bool> {
        self.0.created_through_mcp(id).await
    }
    async fn children(&self, id: Uuid) -> StoreResult<Vec<Document>> {
        self.0.children(id).await
    }
    async fn document_by_slug(&self, o: &str, r: &str, s: &str) -> StoreResult<Option<Document>> {
        self.0.document_by_slug(o, r, s).await
    }
    async fn repository_documents(&self, o: &str, r: &str, n: u32) -> StoreResult<Vec<Document>> {
        self.0.repository_documents(o, r, n).await
    }
    async fn set_archived(&self, id: Uuid, archived: bool) -> StoreResult<()> {
        self.0.set_archived(id, archived).await
    }
    async fn rename_document(&self, id: Uuid, slug: &str, title: &str) -> StoreResult<Document> {
        self.0.rename_document(id, slug, title).await
    }
    async fn earlier_slugs(&self, id: Uuid) -> StoreResult<Vec<String>> {
        self.0.earlier_slugs(id).await
    }
    async fn advance_revision(&self, id: Uuid, kind: RevisionKind, e: i64) -> StoreResult<Advance> {
        self.0.advance_revision(id, kind, e).await
    }
}

/// One live copy per document: sockets join and leave around the idle unload, HTTP-style
/// readers open and drop handles, writers type — over many seeded interleavings, every word a
/// writer's update carried is in the document a fresh process loads afterwards.
#[tokio::test(start_paused = true)]
async fn unloads_racing_joins_reads_and_edits_lose_no_update() {
    for seed in 0..40u64 {
        let store = MemoryStore::new();
        let id = document(&store).await;
        let slow = Yielding(store.clone());
        let open = registry(Arc::new(slow.clone()), Arc::new(slow));
        let mut tasks = Vec::new();
        for worker in 0..4u64 {
            let open = open.clone();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed * 100 + worker);
            tasks.push(tokio::spawn(async move {
                let mut written = Vec::new();
                for round in 0..6u64 {
                    let around = IDLE_UNLOAD.as_millis() as u64;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..around + 40)))
                        .await;
                    match rng.random_range(0..3) {
                        0 => {
                            let member = open.join(id, Uuid::nil()).await.unwrap();
                            let word = format!("w{worker}r{round}");
                            let base = member.document.source().await;
                            let doc = ydoc::empty_doc(1000 + worker);
                            let state = member.document.missing_for(&StateVector::default()).await;
                            doc.transact_mut()
                                .apply_update(yrs::Update::decode_v1(&state).unwrap())
                                .unwrap();
                            let update = ydoc::replace_source(&doc, &format!("{base}{word}\n"));
                            // Held across the idle time, as an open socket would be.
                            tokio::time::sleep(Duration::from_millis(
                                rng.random_range(0..2 * around),
                            ))
                            .await;
                            if member
                                .document
                                .apply_update(member.connection, &update)
                                .await
                                .unwrap()
                            {
                                written.push(word);
                            }
                        }
                        1 => {
                            let reader = open.open(id).await.unwrap();
                            tokio::time::sleep(Duration::from_millis(
                                rng.random_range(0..2 * around),
                            ))
                            .await;
                            let _ = reader.source().await;
                        }
                        _ => {}
                    }
                }
                written
            }));
        }
        let mut written = Vec::new();
        for task in tasks {
            written.extend(task.await.unwrap());
        }
        tokio::time::sleep(IDLE_UNLOAD * 2).await;
        let fresh = registry(Arc::new(store.clone()), Arc::new(store.clone()));
        let text = fresh.open(id).await.unwrap().source().await;
        for word in &written {
            assert!(
                text.contains(word.as_str()),
                "seed {seed}: {word} lost from {text:?}"
            );
        }
    }
}

/// A read parses a text once: the reader's analysis is kept while the document's text stays the
/// same, and made anew (for the new text) once an update changed it.
#[tokio::test]
async fn reads_share_one_analysis_until_the_text_changes() {
    let store = MemoryStore::new();
    let id = document(&store).await;
    let open = registry(Arc::new(store.clone()), Arc::new(store.clone()));
    let member = open.join(id, Uuid::nil()).await.unwrap();
    let doc = &member.document;
    assert!(doc
        .apply_update(member.connection, &typed("# Title\n\nHello\n"))
        .await
        .unwrap());
    let first = doc.reading().await;
    assert_eq!(&*first.source, "# Title\n\nHello\n");
    let again = doc.reading().await;
    assert!(
        Arc::ptr_eq(&first.analysis, &again.analysis),
        "an unchanged text is not parsed again"
    );
    let more = ydoc::replace_source(&ydoc::empty_doc(4242), "# Title\n\nHello\n\nMore\n");
    assert!(doc.apply_update(member.connection, &more).await.unwrap());
    let changed = doc.reading().await;
    assert!(!Arc::ptr_eq(&first.analysis, &changed.analysis));
    assert!(changed.analysis.is_of(&changed.source));
    assert!(changed.source.ends_with("More\n"), "{}", changed.source);
}

/// A content store whose load of one document waits until it is let go (and counts the loads of
/// that document); every other call goes straight through.
struct ParkedLoad {
    inner: MemoryStore,
    parked: Uuid,
    until: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    loads: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl ContentStore for ParkedLoad {
    async fn append_update(&self, id: Uuid, update: &[u8], now: UnixMillis) -> StoreResult<i64> {
        self.inner.append_update(id, update, now).await
    }
    async fn append_updates(
        &self,
        id: Uuid,
        updates: &[&[u8]],
        now: UnixMillis,
    ) -> StoreResult<Vec<i64>> {
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
        if id == self.parked {
            self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(until) = self.until.lock().await.take() {
                let _ = until.await;
            }
        }
        self.inner.document_content(id).await
    }
    async fn write_checkpoint(&self, id: Uuid, upto: i64, state: &[u8]) -> StoreResult<()> {
        self.inner.write_checkpoint(id, upto, state).await
    }
    async fn reset_content(&self, id: Uuid, state: &[u8]) -> StoreResult<i64> {
        self.inner.reset_content(id, state).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_document_being_loaded_holds_up_no_other_document_and_loads_once() {
    let store = MemoryStore::new();
    let (slow, quick) = (document(&store).await, document(&store).await);
    let (release, until) = tokio::sync::oneshot::channel();
    let content = Arc::new(ParkedLoad {
        inner: store.clone(),
        parked: slow,
        until: tokio::sync::Mutex::new(Some(until)),
        loads: Default::default(),
    });
    let open = registry(content.clone(), Arc::new(store.clone()));
    let first = tokio::spawn({
        let open = open.clone();
        async move { open.join(slow, Uuid::nil()).await.map(|_| ()) }
    });
    let second = tokio::spawn({
        let open = open.clone();
        async move { open.open(slow).await.map(|_| ()) }
    });
    while content.loads.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The other document opens while the first one's load is held (time is paused: only a wait
    // on that load would let the timeout fire).
    let other = tokio::time::timeout(Duration::from_secs(5), open.join(quick, Uuid::nil())).await;
    assert!(
        matches!(other, Ok(Ok(_))),
        "a load held up another document's"
    );
    assert!(!first.is_finished() && !second.is_finished());
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(
        content.loads.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one load for both users of the document"
    );
}

/// A writer's client: a yrs document of its own client id, typing into the document's source.
struct Typist {
    doc: yrs::Doc,
}

impl Typist {
    fn new(client_id: u64) -> Self {
        Typist {
            doc: ydoc::empty_doc(client_id),
        }
    }

    /// Types `text` at the end; the update as the client's transaction encodes it (what a
    /// y-websocket provider sends).
    fn type_text(&self, text: &str) -> Vec<u8> {
        use yrs::{GetString, Text};
        let source = self.doc.get_or_insert_text(ydoc::SOURCE_TEXT);
        let mut txn = self.doc.transact_mut();
        let end = source.get_string(&txn).encode_utf16().count() as u32;
        source.insert(&mut txn, end, text);
        txn.encode_update_v1()
    }

    /// Deletes the first `n` characters.
    fn delete_front(&self, n: u32) -> Vec<u8> {
        use yrs::Text;
        let source = self.doc.get_or_insert_text(ydoc::SOURCE_TEXT);
        let mut txn = self.doc.transact_mut();
        source.remove_range(&mut txn, 0, n);
        txn.encode_update_v1()
    }
}

/// The bytes of every journal row, by seq.
async fn journal(store: &MemoryStore, id: Uuid) -> Vec<usize> {
    let content = store.document_content(id).await.unwrap();
    content.updates.iter().map(|(_, u)| u.len()).collect()
}

/// Hostile input 1: an update whose client clock starts after a gap (clocks never sent) is
/// refused and journals and relays nothing; what follows it from others journals and relays
/// about its own size — never the pending bytes again.
#[tokio::test]
async fn hostile_1_gapped_updates_journal_and_relay_only_what_they_change() {
    const SMALL: usize = 64;
    let store = MemoryStore::new();
    let id = document(&store).await;
    let open = registry(Arc::new(store.clone()), Arc::new(store.clone()));
    let attacker = open.join(id, Uuid::nil()).await.unwrap();
    let typist = open.join(id, Uuid::nil()).await.unwrap();
    let mut listener = attacker.document.subscribe();

    // Clocks 0..999 of client 77 are typed but never sent: what follows is gapped.
    let hostile = Typist::new(77);
    let _never_sent = hostile.type_text(&"a".repeat(1000));
    for round in 0..3 {
        let gapped = hostile.type_text(&"x".repeat(100 * 1024));
        assert!(gapped.len() >= 100 * 1024, "round {round}");
        let before = journal(&store, id).await;
        let outcome = attacker
            .document
            .apply_update(attacker.connection, &gapped)
            .await;
        let after = journal(&store, id).await;
        for row in &after[before.len()..] {
            assert!(
                *row <= gapped.len() + SMALL,
                "round {round}: a journal row of {row} bytes for an update of {}",
                gapped.len()
            );
        }
        assert!(
            matches!(outcome, Err(UpdateError::Gapped(_))),
            "round {round}: {outcome:?}"
        );
    }
    assert!(journal(&store, id).await.is_empty(), "nothing journalled");

    // Another writer types 50 characters: each row and each relayed frame is about one key.
    let writer = Typist::new(88);
    for i in 0..50 {
        let key = writer.type_text(&char::from(b'a' + (i % 26) as u8).to_string());
        assert!(typist
            .document
            .apply_update(typist.connection, &key)
            .await
            .unwrap());
        let rows = journal(&store, id).await;
        let last = *rows.last().unwrap();
        assert!(
            last <= key.len() + SMALL,
            "keystroke {i}: row of {last} bytes"
        );
        let relayed = listener.recv().await.unwrap();
        assert!(
            relayed.frame.len() <= key.len() + SMALL,
            "keystroke {i}: relayed {} bytes",
            relayed.frame.len()
        );
    }
    // A fresh client's sync step 2 carries the document, not the refused bytes.
    let everything = typist.document.missing_for(&StateVector::default()).await;
    assert!(
        everything.len() < 4096,
        "sync step 2 of {} bytes",
        everything.len()
    );
    assert_eq!(typist.document.source().await.len(), 50);
}

/// Hostile input 1: in a document with deletions, an update that changes nothing (the same one
/// again, or a reconnect's sync step 2) journals and relays nothing.
#[tokio::test]
async fn hostile_1_an_update_that_changes_nothing_journals_nothing() {
    let store = MemoryStore::new();
    let id = document(&store).await;
    let open = registry(Arc::new(store.clone()), Arc::new(store.clone()));
    let member = open.join(id, Uuid::nil()).await.unwrap();
    let writer = Typist::new(99);
    let typed = writer.type_text("Hello, world\n");
    let deleted = writer.delete_front(7);
    for update in [&typed, &deleted] {
        assert!(member
            .document
            .apply_update(member.connection, update)
            .await
            .unwrap());
    }
    assert_eq!(member.document.source().await, "world\n");
    let rows = journal(&store, id).await.len();
    for again in [&typed, &deleted, &ydoc::encode_state(&writer.doc)] {
        assert!(!member
            .document
            .apply_update(member.connection, again)
            .await
            .unwrap());
    }
    assert_eq!(
        journal(&store, id).await.len(),
        rows,
        "nothing journalled again"
    );
}
