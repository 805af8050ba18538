//! The child tools over a memory store, constructed alone: `list_children`, `read_child`, `edit_child`
//! and `anchor_child` work on the root document's own children only, and recheck parentage,
//! repository and archive state on every call.

use std::sync::Arc;

use chopin_document::edit::{EditBatch, EditOp, EditOutcome};
use chopin_document::reader::ReadArgs;
use chopin_server::content::OpenDocuments;
use chopin_server::documents::children::{ChildError, Children};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::runtime::Shutdown;
use chopin_server::store::{MemoryStore, NewDocument, Store};
use uuid::Uuid;

/// The child tools over a memory store: no server, no lease, only what they use.
struct World {
    children: Children,
    store: Arc<dyn Store>,
}

async fn world() -> World {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let open = Arc::new(OpenDocuments::new(
        store.clone(),
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
        Shutdown::new(),
    ));
    World {
        children: Children::new(store.clone(), open),
        store,
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
            ..NewDocument::default()
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
    let listed = w.children.list_children(root).await.unwrap();
    assert_eq!(listed["children"][0]["child"], child.to_string());
    assert_eq!(
        listed["children"][0]["url"], "/documents/octo/plans/root/child",
        "a child's URL nests under its parent's"
    );

    let applied = w
        .children
        .edit_child(root, &child.to_string(), &insert(0, "# Child\n"), None)
        .await
        .unwrap();
    assert!(
        matches!(applied.outcome, EditOutcome::Applied { revision: 1, .. }),
        "{applied:?}"
    );
    assert_eq!(applied.document.url, "/documents/octo/plans/root/child");
    let text = w
        .children
        .read_child(root, &child.to_string(), &ReadArgs::default())
        .await
        .unwrap();
    assert!(text.contains(&format!("child: {child}")), "{text}");
    assert!(text.contains("title: Title of child"), "{text}");
    assert!(text.ends_with("# Child\n"), "{text}");

    // A long child pages with a next: that names it.
    let long: String = (1..=3000)
        .map(|n| format!("line {n} of a long child\n"))
        .collect();
    w.children
        .edit_child(root, &child.to_string(), &insert(1, &long), None)
        .await
        .unwrap();
    let first = w
        .children
        .read_child(root, &child.to_string(), &ReadArgs::default())
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
        let refused = w
            .children
            .read_child(root, &not_mine, &ReadArgs::default())
            .await;
        assert!(
            matches!(refused, Err(ChildError::NotAChild(_))),
            "{not_mine}: {refused:?}"
        );
    }
    // Works now; archived a moment later, the next call refuses.
    w.children
        .read_child(root, &child.to_string(), &ReadArgs::default())
        .await
        .unwrap();
    w.store.set_archived(child, true).await.unwrap();
    let refused = w
        .children
        .edit_child(root, &child.to_string(), &insert(0, "x\n"), None)
        .await;
    assert!(
        matches!(refused, Err(ChildError::NotAChild(_))),
        "{refused:?}"
    );
    let listed = w.children.list_children(root).await.unwrap();
    assert_eq!(
        listed["children"],
        serde_json::json!([]),
        "archived children are not listed"
    );
    // An archived root offers no children at all.
    w.store.set_archived(child, false).await.unwrap();
    w.store.set_archived(root, true).await.unwrap();
    assert_eq!(
        w.children.list_children(root).await.unwrap_err(),
        ChildError::RootUnavailable
    );
    let refused = w
        .children
        .read_child(root, &child.to_string(), &ReadArgs::default())
        .await;
    assert_eq!(refused.unwrap_err(), ChildError::RootUnavailable);
}
