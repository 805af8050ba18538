//! `edit_plan` against a live room, on every storage backend: two batches made from the same
//! revision race — exactly one applies, the other is refused as stale — and what applied is in
//! the store, so a reloaded room reads the same source.

use std::sync::Arc;

use chopin_document::edit::{EditBatch, EditOp, EditOutcome};
use chopin_document::DocumentRef;
use chopin_server::app;
use chopin_server::clock::SystemClock;
use chopin_server::config::{Config, Secret};
use chopin_server::connector::TcpConnector;
use chopin_server::entropy::OsEntropy;
use chopin_server::store::{MemoryStore, NewDocument, PgStore, SqliteStore, Store};
use chopin_server::Services;

async fn race_on(store: Arc<dyn Store>, dir: &std::path::Path) {
    let mut config = Config::defaults_with_data_dir(dir.to_path_buf());
    config.session_encryption_key = Some(Secret::new("11".repeat(32)));
    let services = Services {
        store: store.clone(),
        clock: Arc::new(SystemClock),
        entropy: Arc::new(OsEntropy),
        connector: Arc::new(TcpConnector),
    };
    let running = app::start(config, services).await.expect("server starts");
    let state = running.state().clone();
    use chopin_server::entropy::Entropy;
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
        })
        .await
        .unwrap();
    let document = DocumentRef {
        id: id.to_string(),
        url: "/documents/octo/plans/race".into(),
    };
    let room = state.rooms.open(&state, id).await.unwrap();
    let seed = EditBatch {
        revision: 0,
        ops: vec![EditOp::Insert {
            after: None,
            content: "# Race\n\nFirst paragraph.\n".into(),
        }],
    };
    let seeded = room
        .edit_plan(&state, document.clone(), &[], &seed)
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
        room.edit_plan(&state, document.clone(), &[], &a),
        room.edit_plan(&state, document.clone(), &[], &b)
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
    running.stop().await;
    let mut config = Config::defaults_with_data_dir(dir.to_path_buf());
    config.session_encryption_key = Some(Secret::new("11".repeat(32)));
    let services = Services {
        store,
        clock: Arc::new(SystemClock),
        entropy: Arc::new(OsEntropy),
        connector: Arc::new(TcpConnector),
    };
    let again = app::start(config, services).await.unwrap();
    let state = again.state().clone();
    let reloaded = state.rooms.open(&state, id).await.unwrap();
    assert_eq!(reloaded.source().await, source);
    again.stop().await;
}

#[tokio::test]
async fn memory_one_of_two_concurrent_batches_applies() {
    let dir = tempfile::tempdir().unwrap();
    race_on(Arc::new(MemoryStore::new()), dir.path()).await;
}

#[tokio::test]
async fn sqlite_one_of_two_concurrent_batches_applies() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("chopin.db"))
        .await
        .unwrap();
    race_on(Arc::new(store), dir.path()).await;
}

#[tokio::test]
async fn postgres_one_of_two_concurrent_batches_applies() {
    let dir = tempfile::tempdir().unwrap();
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    let store = PgStore::connect(&db.url).await.unwrap();
    race_on(Arc::new(store), dir.path()).await;
    pg.drop_database(&db).await.unwrap();
}

/// A room nobody is in is checkpointed and unloaded after its idle time; opening it again reads
/// the checkpoint. (Paused tokio time: the idle timer runs without waiting.)
#[tokio::test(start_paused = true)]
async fn an_idle_room_is_checkpointed_and_unloaded() {
    use chopin_server::content::ROOM_IDLE;
    use chopin_server::entropy::Entropy;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut config = Config::defaults_with_data_dir(dir.path().to_path_buf());
    config.session_encryption_key = Some(Secret::new("11".repeat(32)));
    let services = Services {
        store: store.clone(),
        clock: Arc::new(SystemClock),
        entropy: Arc::new(OsEntropy),
        connector: Arc::new(TcpConnector),
    };
    let running = app::start(config, services).await.unwrap();
    let state = running.state().clone();
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
        })
        .await
        .unwrap();
    let member = state.rooms.join(&state, id).await.unwrap();
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
        .room
        .edit_plan(&state, document, &[], &batch)
        .await
        .unwrap();
    assert!(store
        .document_content(id)
        .await
        .unwrap()
        .checkpoint
        .is_none());
    drop(member);
    tokio::time::sleep(ROOM_IDLE - std::time::Duration::from_millis(10)).await;
    assert!(state.rooms.is_open(id), "not before its idle time");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!state.rooms.is_open(id), "unloaded after it");
    let content = store.document_content(id).await.unwrap();
    let checkpoint = content.checkpoint.expect("checkpointed on unload");
    assert_eq!(checkpoint.upto_seq, 1);
    assert!(content.updates.is_empty(), "the journal was pruned");
    let room = state.rooms.open(&state, id).await.unwrap();
    assert_eq!(room.source().await, "Kept through an unload.\n");
    running.stop().await;
}
