//! A root document's own children, as the Planner's child tools see them: `list_children`,
//! `read_child`, `edit_child` and `anchor_child`.
//!
//! Owns: [`Children`] — the rechecks every child tool makes on every call — the root exists and is not
//! archived, the child exists, is the root's own child, is in the root's repository and is not
//! archived — and the child's canonical URL, nested under its parent's
//! (`/documents/<owner>/<repo>/<parent-slug>/<child-slug>`). Does not own: reading and editing
//! themselves (`chopin-document`, through the child's open document in [`crate::content`]),
//! creating a child ([`super::Documents::create`] with a parent), or who may call a tool (the
//! turn's permission rechecks, in turns).
//!
//! Errors a model sees are plain words; a storage failure is only ever "could not be reached",
//! never the backend's own message.

use std::sync::Arc;

use chopin_document::edit::{EditBatch, EditResult};
use chopin_document::reader::{self, ChildRef, DocumentInput, ReadArgs, ReadKind};
use chopin_document::DocumentRef;
use serde_json::{json, Value};
use uuid::Uuid;

use super::canonical_url;
use crate::content::{EditRefused, OpenDocuments};
use crate::store::{Document, DocumentStore, OwnerGuard, StoreError};

/// Why a child tool refused. Display is what the model is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    #[error("this document is gone or archived, so its children cannot be used")]
    RootUnavailable,
    #[error("{0} is not a child of this document (it may have been removed, archived or moved)")]
    NotAChild(String),
    #[error("{0}")]
    Read(String),
    /// The edit was made under a Planner ownership storage no longer names.
    #[error("{0}")]
    NotOwner(String),
    /// A storage failure: the model is told only that, never the backend's words.
    #[error("the documents could not be reached just now; try again")]
    Storage,
}

impl From<StoreError> for ChildError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "child tool: storage failed");
        ChildError::Storage
    }
}

/// The canonical URL of a child: under its parent's.
pub fn child_url(parent: &Document, child: &Document) -> String {
    format!("{}/{}", canonical_url(parent), child.slug)
}

/// A root document's children, every rule rechecked on every call.
pub struct Children {
    store: Arc<dyn DocumentStore>,
    open: Arc<OpenDocuments>,
}

impl Children {
    pub fn new(store: Arc<dyn DocumentStore>, open: Arc<OpenDocuments>) -> Self {
        Children { store, open }
    }

    /// The root, rechecked: present and not archived.
    async fn root(&self, root_id: Uuid) -> Result<Document, ChildError> {
        match self.store.document(root_id).await? {
            Some(doc) if !doc.archived && doc.parent_id.is_none() => Ok(doc),
            _ => Err(ChildError::RootUnavailable),
        }
    }

    /// One of `root_id`'s own children, every rule rechecked now.
    pub async fn child_of_root(&self, root_id: Uuid, child: &str) -> Result<Document, ChildError> {
        Ok(self.root_and_child(root_id, child).await?.1)
    }

    /// The root and one of its own children, every rule rechecked now.
    async fn root_and_child(
        &self,
        root_id: Uuid,
        child: &str,
    ) -> Result<(Document, Document), ChildError> {
        let root = self.root(root_id).await?;
        let not_a_child = || ChildError::NotAChild(format!("{child:?}"));
        let child_id = Uuid::parse_str(child.trim()).map_err(|_| not_a_child())?;
        let doc = self
            .store
            .document(child_id)
            .await?
            .ok_or_else(not_a_child)?;
        let same_repository = doc.repo_owner.eq_ignore_ascii_case(&root.repo_owner)
            && doc.repo_name.eq_ignore_ascii_case(&root.repo_name);
        if doc.parent_id != Some(root.id) || !same_repository || doc.archived {
            return Err(not_a_child());
        }
        Ok((root, doc))
    }

    /// The root of child `child_id` and the child, both read again now: the child is live and
    /// still names a live root in its own repository (ISO-25 asks this before every message a
    /// child's room sends to its root's Chat).
    pub async fn of_root(&self, child_id: Uuid) -> Result<(Document, Document), ChildError> {
        let child = self.store.document(child_id).await?;
        let Some(root_id) = child.and_then(|c| c.parent_id) else {
            return Err(ChildError::NotAChild(child_id.to_string()));
        };
        self.root_and_child(root_id, &child_id.to_string()).await
    }

    /// `list_children`: the root's children that are not archived, oldest first.
    pub async fn list_children(&self, root_id: Uuid) -> Result<Value, ChildError> {
        let root = self.root(root_id).await?;
        let children = self.store.children(root.id).await?;
        let listed: Vec<Value> = children
            .iter()
            .filter(|c| !c.archived)
            .map(|c| {
                json!({
                    "child": c.id,
                    "title": c.title,
                    "url": child_url(&root, c),
                    "revision": c.plan_revision,
                })
            })
            .collect();
        Ok(json!({ "children": listed }))
    }

    /// `read_child`: the child's paged text (as `read_plan`'s, with `child` and `title` in the header
    /// and a `next:` that names the child).
    pub async fn read_child(
        &self,
        root_id: Uuid,
        child: &str,
        args: &ReadArgs,
    ) -> Result<String, ChildError> {
        let (root, doc) = self.root_and_child(root_id, child).await?;
        let open = self.open.open(doc.id).await?;
        let reading = open.reading().await;
        let (root_id, child_id) = (root.id.to_string(), doc.id.to_string());
        let url = child_url(&root, &doc);
        let input = DocumentInput {
            id: &root_id,
            url: &url,
            title: None,
            revision: doc.plan_revision as u64,
            earlier_urls: &[],
            child: Some(ChildRef {
                id: &child_id,
                title: &doc.title,
            }),
            kind: ReadKind::Child,
            source: &reading.source,
            accepted_comments: &[],
            brief: None,
        };
        reader::read_text_with(&input, &reading.analysis, args)
            .map_err(|e| ChildError::Read(e.to_string()))
    }

    /// `edit_child`: `edit_plan` on the child, against the revision the caller read, under the
    /// root's Planner ownership when `owner` names it (a child's Planner is its root's).
    pub async fn edit_child(
        &self,
        root_id: Uuid,
        child: &str,
        batch: &EditBatch,
        owner: Option<&OwnerGuard>,
    ) -> Result<EditResult, ChildError> {
        let (root, doc) = self.root_and_child(root_id, child).await?;
        let open = self.open.open(doc.id).await?;
        let reference = DocumentRef {
            id: doc.id.to_string(),
            url: child_url(&root, &doc),
        };
        match open.edit_plan(reference, &[], batch, owner).await {
            Ok(result) => Ok(result),
            Err(EditRefused::NotOwner) => {
                Err(ChildError::NotOwner(EditRefused::NotOwner.to_string()))
            }
            Err(EditRefused::Store(e)) => Err(e.into()),
        }
    }

    /// `anchor_child`: relates a Decision (or one of its answers) of the child to a block of it.
    pub async fn anchor_child(
        &self,
        root_id: Uuid,
        child: &str,
        request: &chopin_document::edit::AnchorRequest,
    ) -> Result<
        Result<chopin_document::edit::Anchor, chopin_document::edit::AnchorRefusal>,
        ChildError,
    > {
        let (_, doc) = self.root_and_child(root_id, child).await?;
        let open = self.open.open(doc.id).await?;
        let source = open.source().await;
        Ok(chopin_document::edit::anchor_plan(&source, request))
    }
}
