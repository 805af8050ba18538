//! A root document's own children, as the Planner's child tools see them: `list_children`,
//! `read_child`, `edit_child` and `anchor_child`, plus creating a child over HTTP.
//!
//! Owns: the rechecks every child tool makes on every call — the root exists and is not
//! archived, the child exists, is the root's own child, is in the root's repository and is not
//! archived — and the child's canonical URL, nested under its parent's
//! (`/documents/<owner>/<repo>/<parent-slug>/<child-slug>`). Does not own: reading and editing
//! themselves (`chopin-document`, through the child's room in [`crate::content`]) or who may call
//! a tool (the harness issue's permission checks).
//!
//! Errors a model sees are plain words; a storage failure is only ever "could not be reached",
//! never the backend's own message.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chopin_document::edit::{EditBatch, EditResult};
use chopin_document::reader::{self, ChildRef, DocumentInput, ReadArgs, ReadKind};
use chopin_document::DocumentRef;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::app::AppState;
use crate::documents::{self, ApiError};
use crate::store::{Document, NewDocument, StoreError};

/// Why a child tool refused. Display is what the model is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    #[error("this document is gone or archived, so its children cannot be used")]
    RootUnavailable,
    #[error("{0} is not a child of this document (it may have been removed, archived or moved)")]
    NotAChild(String),
    #[error("{0}")]
    Read(String),
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
    format!("{}/{}", documents::canonical_url(parent), child.slug)
}

/// The root, rechecked: present and not archived.
async fn root(state: &AppState, root_id: Uuid) -> Result<Document, ChildError> {
    match state.services.store.document(root_id).await? {
        Some(doc) if !doc.archived && doc.parent_id.is_none() => Ok(doc),
        _ => Err(ChildError::RootUnavailable),
    }
}

/// The root and one of its own children, every rule rechecked now.
async fn root_and_child(
    state: &AppState,
    root_id: Uuid,
    child: &str,
) -> Result<(Document, Document), ChildError> {
    let root = root(state, root_id).await?;
    let not_a_child = || ChildError::NotAChild(format!("{child:?}"));
    let child_id = Uuid::parse_str(child.trim()).map_err(|_| not_a_child())?;
    let doc = state
        .services
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

/// `list_children`: the root's children that are not archived, oldest first.
pub async fn list_children(state: &AppState, root_id: Uuid) -> Result<Value, ChildError> {
    let root = root(state, root_id).await?;
    let children = state.services.store.children(root.id).await?;
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
    state: &AppState,
    root_id: Uuid,
    child: &str,
    args: &ReadArgs,
) -> Result<String, ChildError> {
    let (root, doc) = root_and_child(state, root_id, child).await?;
    let room = state.rooms.open(state, doc.id).await?;
    let source = room.source().await;
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
        source: &source,
        accepted_comments: &[],
        brief: None,
    };
    reader::read_text(&input, args).map_err(|e| ChildError::Read(e.to_string()))
}

/// `edit_child`: `edit_plan` on the child, against the revision the caller read.
pub async fn edit_child(
    state: &AppState,
    root_id: Uuid,
    child: &str,
    batch: &EditBatch,
) -> Result<EditResult, ChildError> {
    let (root, doc) = root_and_child(state, root_id, child).await?;
    let room = state.rooms.open(state, doc.id).await?;
    let reference = DocumentRef {
        id: doc.id.to_string(),
        url: child_url(&root, &doc),
    };
    Ok(room.edit_plan(state, reference, &[], batch).await?)
}

/// `anchor_child`: relates a Decision (or one of its answers) of the child to a block of it.
pub async fn anchor_child(
    state: &AppState,
    root_id: Uuid,
    child: &str,
    request: &chopin_document::edit::AnchorRequest,
) -> Result<Result<chopin_document::edit::Anchor, chopin_document::edit::AnchorRefusal>, ChildError>
{
    let (_, doc) = root_and_child(state, root_id, child).await?;
    let room = state.rooms.open(state, doc.id).await?;
    let source = room.source().await;
    Ok(chopin_document::edit::anchor_plan(&source, request))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateChild {
    pub title: String,
}

/// `POST /api/documents/{id}/children` `{title}`: a writer creates a child of a root document.
pub async fn create(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = documents::caller(&state, &headers, true).await?;
    let input: CreateChild = documents::json_body(&body, r#"{\"title\": string}"#)?;
    let title = documents::title_of(&input.title)?;
    let parent = documents::writable(&state, &caller, &id).await?;
    let base = documents::slugify(&title);
    let s = &state.services;
    for n in 1..=100u32 {
        let slug = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        let new = NewDocument {
            id: s.entropy.uuid(),
            repo_owner: parent.repo_owner.clone(),
            repo_name: parent.repo_name.clone(),
            slug: slug.clone(),
            title: title.clone(),
            created_at_ms: s.clock.now_ms(),
            parent_id: Some(parent.id),
        };
        match s.store.create_document(&new).await {
            Ok(child) => {
                let mut body = documents::document_json(&child);
                body["url"] = json!(child_url(&parent, &child));
                body["parent"] = json!(parent.id);
                return Ok((StatusCode::CREATED, Json(body)));
            }
            // Either the slug is taken (try the next) or a parent rule failed (say so).
            Err(StoreError::Conflict(why)) if why.contains("slug") => continue,
            Err(StoreError::Conflict(why)) => {
                return Err(ApiError::new(StatusCode::CONFLICT, "invalid-parent", why))
            }
            Err(e) => return Err(documents::store_error(e)),
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "slug-taken",
        format!(
            "100 documents of this repository already use the slug {base:?}; choose another title."
        ),
    ))
}
