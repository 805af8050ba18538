//! The Build view's routes: the implementation snapshot of a document and a person's approval
//! of its drafted graph.
//!
//! Owns: `GET /api/channels/{channel}/implementation` (anyone who can read the document: the
//! snapshot of its graph versions, the lock a run holds and every run's progress) and
//! `POST /api/channels/{channel}/implementation/approve` with `{graphVersion, graphRevision}`
//! (a writer's browser session only: a person approves, RULINGS GRA-04), answering the approved
//! version or a refusal `{code, message}` with 409.
//! Does not own: the rules (`crate::lifecycle`, `chopin_store::graphs`) or access.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::documents::DocumentsDeps;
use super::{Routes, Table};
use crate::error::ApiError;
use crate::lifecycle::Lifecycle;

/// What the Build view's routes use.
#[derive(Clone)]
pub struct ImplementationDeps {
    pub documents: DocumentsDeps,
    pub lifecycle: std::sync::Arc<Lifecycle>,
}

pub fn routes(deps: ImplementationDeps) -> Routes {
    Table::new()
        .get("/api/channels/{channel}/implementation", snapshot)
        .post("/api/channels/{channel}/implementation/approve", approve)
        .with_state(deps)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Approve {
    graph_version: i64,
    graph_revision: i64,
}

/// `GET …/implementation`.
async fn snapshot(
    State(deps): State<ImplementationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    let shown = deps
        .lifecycle
        .snapshot(&doc)
        .await
        .map_err(ApiError::store)?;
    Ok(Json(shown))
}

/// `POST …/implementation/approve`: the person's approval of exactly the draft they saw.
async fn approve(
    State(deps): State<ImplementationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    if caller.browser.is_none() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "person-required",
            "Only a person approves an implementation graph, from a signed-in browser; a token cannot.",
        ));
    }
    let doc = deps.documents.writable(&caller, &channel).await?;
    let wanted: Approve = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {{\"graphVersion\": n, \"graphRevision\": n}}: {e}"),
        )
    })?;
    match deps
        .lifecycle
        .approve(&doc, wanted.graph_version, wanted.graph_revision)
        .await
        .map_err(ApiError::store)?
    {
        Ok(version) => Ok(Json(version)),
        Err(refused) => Err(ApiError::new(
            StatusCode::CONFLICT,
            refused.code,
            refused.message,
        )),
    }
}
