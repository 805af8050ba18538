//! The child tools against a running server state: `list_children`, `read_child`, `edit_child`
//! and `anchor_child` work on the root document's own children only, and recheck parentage,
//! repository and archive state on every call.

use std::sync::Arc;

use chopin_document::edit::{EditBatch, EditOp, EditOutcome};
use chopin_document::reader::ReadArgs;
use chopin_server::app;
use chopin_server::children::{self, ChildError};
use chopin_server::clock::SystemClock;
use chopin_server::config::{Config, Secret};
use chopin_server::connector::TcpConnector;
use chopin_server::entropy::{Entropy, OsEntropy};
use chopin_server::store::{MemoryStore, NewDocument, Store};
use chopin_server::{AppState, Services};
use uuid::Uuid;

struct World {
    state: AppState,
    store: Arc<dyn Store>,
    _running: app::Running,
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut config = Config::defaults_with_data_dir(dir.path().to_path_buf());
    config.session_encryption_key = Some(Secret::new("22".repeat(32)));
    let running = app::start(
        config,
        Services {
            store: store.clone(),
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            connector: Arc::new(TcpConnector),
        },
    )
    .await
    .unwrap();
    World {
        state: running.state().clone(),
        store,
        _running: running,
        _dir: dir,
    }
}

async fn document(store: &Arc<dyn Store>, slug: &str, parent: Option<Uuid>) -> Uuid {
    let id = OsEntropy.uuid();
    store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: slug.into(),
            title: format!("Title of {slug}"),
            created_at_ms: 0,
            parent_id: parent,
        })
        .await
        .unwrap();
    id
}

fn insert(revision: u64, text: &str) -> EditBatch {
    EditBatch {
        revision,
        ops: vec![EditOp::Insert {
            after: None,
            content: text.into(),
        }],
    }
}

#[tokio::test]
async fn child_tools_work_on_the_roots_own_children() {
    let w = world().await;
    let root = document(&w.store, "root", None).await;
    let child = document(&w.store, "child", Some(root)).await;
    let listed = children::list_children(&w.state, root).await.unwrap();
    assert_eq!(listed["children"][0]["child"], child.to_string());
    assert_eq!(
        listed["children"][0]["url"], "/documents/octo/plans/root/child",
        "a child's URL nests under its parent's"
    );

    let applied = children::edit_child(&w.state, root, &child.to_string(), &insert(0, "# Child\n"))
        .await
        .unwrap();
    assert!(
        matches!(applied.outcome, EditOutcome::Applied { revision: 1, .. }),
        "{applied:?}"
    );
    assert_eq!(applied.document.url, "/documents/octo/plans/root/child");
    let text = children::read_child(&w.state, root, &child.to_string(), &ReadArgs::default())
        .await
        .unwrap();
    assert!(text.contains(&format!("child: {child}")), "{text}");
    assert!(text.contains("title: Title of child"), "{text}");
    assert!(text.ends_with("# Child\n"), "{text}");

    // A long child pages with a next: that names it.
    let long: String = (1..=3000)
        .map(|n| format!("line {n} of a long child\n"))
        .collect();
    children::edit_child(&w.state, root, &child.to_string(), &insert(1, &long))
        .await
        .unwrap();
    let first = children::read_child(&w.state, root, &child.to_string(), &ReadArgs::default())
        .await
        .unwrap();
    assert!(
        first.contains(&format!(
            "next: read_child {{\"child\":\"{child}\",\"offset\":"
        )),
        "{first}"
    );
}

#[tokio::test]
async fn every_call_rechecks_parentage_repository_and_archive_state() {
    let w = world().await;
    let root = document(&w.store, "root", None).await;
    let other_root = document(&w.store, "other", None).await;
    let child = document(&w.store, "child", Some(root)).await;
    let strangers_child = document(&w.store, "stranger", Some(other_root)).await;

    // Another root's child, the root itself, a malformed id: not this root's children.
    for not_mine in [
        strangers_child.to_string(),
        root.to_string(),
        "not-an-id".to_owned(),
    ] {
        let refused = children::read_child(&w.state, root, &not_mine, &ReadArgs::default()).await;
        assert!(
            matches!(refused, Err(ChildError::NotAChild(_))),
            "{not_mine}: {refused:?}"
        );
    }
    // Works now; archived a moment later, the next call refuses.
    children::read_child(&w.state, root, &child.to_string(), &ReadArgs::default())
        .await
        .unwrap();
    w.store.set_archived(child, true).await.unwrap();
    let refused = children::edit_child(&w.state, root, &child.to_string(), &insert(0, "x\n")).await;
    assert!(
        matches!(refused, Err(ChildError::NotAChild(_))),
        "{refused:?}"
    );
    let listed = children::list_children(&w.state, root).await.unwrap();
    assert_eq!(
        listed["children"],
        serde_json::json!([]),
        "archived children are not listed"
    );
    // An archived root offers no children at all.
    w.store.set_archived(child, false).await.unwrap();
    w.store.set_archived(root, true).await.unwrap();
    assert_eq!(
        children::list_children(&w.state, root).await.unwrap_err(),
        ChildError::RootUnavailable
    );
    let refused =
        children::read_child(&w.state, root, &child.to_string(), &ReadArgs::default()).await;
    assert_eq!(refused.unwrap_err(), ChildError::RootUnavailable);
}
