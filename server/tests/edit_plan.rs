//! `edit_plan` against an open document, on every storage backend: two batches made from the same
//! revision race — exactly one applies, the other is refused as stale — and what applied is in
//! the store, so a document opened again reads the same source.

use std::sync::Arc;

use chopin_document::edit::{EditBatch, EditOp, EditOutcome};
use chopin_document::DocumentRef;
use chopin_server::content::OpenDocuments;
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::entropy::OsEntropy;
use chopin_server::runtime::Shutdown;
use chopin_server::store::{MemoryStore, NewDocument, PgStore, SqliteStore, Store};

/// The documents open in one process over `store`: nothing else of a server is needed.
fn open_documents(store: &Arc<dyn Store>) -> Arc<OpenDocuments> {
    Arc::new(OpenDocuments::new(
        store.clone(),
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
        Shutdown::new(),
    ))
}

async fn race_on(store: Arc<dyn Store>) {
    let open = open_documents(&store);
    use chopin_server::runtime::entropy::Entropy;
    let id = OsEntropy.uuid();
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "race".into(),
            title: "Race".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let document = DocumentRef {
        id: id.to_string(),
        url: "/documents/octo/plans/race".into(),
    };
    let room = open.open(id).await.unwrap();
    let seed = EditBatch {
        revision: 0,
        ops: vec![EditOp::Insert {
            after: None,
            content: "# Race\n\nFirst paragraph.\n".into(),
        }],
    };
    let seeded = room
        .edit_plan(document.clone(), &[], &seed, None)
        .await
        .unwrap();
    assert!(
        matches!(seeded.outcome, EditOutcome::Applied { revision: 1, .. }),
        "{seeded:?}"
    );

    // Two batches made from revision 1, at once.
    let batch = |text: &str| EditBatch {
        revision: 1,
        ops: vec![EditOp::Insert {
            after: Some(1),
            content: format!("{text}\n"),
        }],
    };
    let (a, b) = (batch("From A."), batch("From B."));
    let (ra, rb) = tokio::join!(
        room.edit_plan(document.clone(), &[], &a, None),
        room.edit_plan(document.clone(), &[], &b, None)
    );
    let outcomes = [ra.unwrap().outcome, rb.unwrap().outcome];
    let applied = outcomes
        .iter()
        .filter(|o| matches!(o, EditOutcome::Applied { revision: 2, .. }))
        .count();
    let stale = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                EditOutcome::Stale {
                    current_revision: 2,
                    ..
                }
            )
        })
        .count();
    assert_eq!((applied, stale), (1, 1), "{outcomes:?}");

    let source = room.source().await;
    assert!(
        source.starts_with("# Race\n\nFirst paragraph.\n"),
        "{source:?}"
    );
    assert_eq!(
        source.matches("From ").count(),
        1,
        "exactly one batch in: {source:?}"
    );
    let doc = store.document(id).await.unwrap().unwrap();
    assert_eq!(doc.plan_revision, 2);

    // A fresh process reads the same source from the store.
    let again = open_documents(&store);
    let reloaded = again.open(id).await.unwrap();
    assert_eq!(reloaded.source().await, source);
}

#[tokio::test]
async fn memory_one_of_two_concurrent_batches_applies() {
    race_on(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn sqlite_one_of_two_concurrent_batches_applies() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("chopin.db"))
        .await
        .unwrap();
    race_on(Arc::new(store)).await;
}

#[tokio::test]
async fn postgres_one_of_two_concurrent_batches_applies() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    let store = PgStore::connect(&db.url).await.unwrap();
    race_on(Arc::new(store)).await;
    pg.drop_database(&db).await.unwrap();
}

/// A document nobody is in is checkpointed and unloaded after its idle time; opening it again reads
/// the checkpoint. (Paused tokio time: the idle timer runs without waiting.)
#[tokio::test(start_paused = true)]
async fn an_idle_room_is_checkpointed_and_unloaded() {
    use chopin_server::content::IDLE_UNLOAD;
    use chopin_server::runtime::entropy::Entropy;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let open = open_documents(&store);
    let id = OsEntropy.uuid();
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "idle".into(),
            title: "Idle".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let member = open.join(id, uuid::Uuid::nil()).await.unwrap();
    let document = DocumentRef {
        id: id.to_string(),
        url: "/documents/octo/plans/idle".into(),
    };
    let batch = EditBatch {
        revision: 0,
        ops: vec![EditOp::Insert {
            after: None,
            content: "Kept through an unload.\n".into(),
        }],
    };
    member
        .document
        .edit_plan(document, &[], &batch, None)
        .await
        .unwrap();
    assert!(store
        .document_content(id)
        .await
        .unwrap()
        .checkpoint
        .is_none());
    drop(member);
    tokio::time::sleep(IDLE_UNLOAD - std::time::Duration::from_millis(10)).await;
    assert!(open.is_open(id), "not before its idle time");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!open.is_open(id), "unloaded after it");
    let content = store.document_content(id).await.unwrap();
    let checkpoint = content.checkpoint.expect("checkpointed on unload");
    assert_eq!(checkpoint.upto_seq, 1);
    assert!(content.updates.is_empty(), "the journal was pruned");
    let room = open.open(id).await.unwrap();
    assert_eq!(room.source().await, "Kept through an unload.\n");
}
