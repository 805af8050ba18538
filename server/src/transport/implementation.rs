//! The Build view's routes: the implementation snapshot of a document and a person's approval
//! of its drafted graph.
//!
//! Owns: `GET /api/channels/{channel}/implementation` (anyone who can read the document: the
//! snapshot of its graph versions, the lock a run holds and every run's progress) and
//! `POST /api/channels/{channel}/implementation/approve` with `{graphVersion, graphRevision,
//! machineId?, checkout?}` (a writer's browser session only: a person approves, RULINGS GRA-04),
//! which queues the build on the presser's machine in the same commit (LIFE-05), answering the
//! approved version with its `build` or a refusal `{code, message}` with 409;
//! `POST …/implementation/retry` (a failed build again) and `POST …/implementation/rebuild`
//! (the edits since the built source onto its pull requests), writers' browser sessions too.
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
    pub builds: std::sync::Arc<crate::builds::Builds>,
    pub rebuilds: std::sync::Arc<crate::rebuilds::Rebuilds>,
    pub live_builds: Option<std::sync::Arc<crate::live_builds::LiveBuilds>>,
}

pub fn routes(deps: ImplementationDeps) -> Routes {
    Table::new()
        .get("/api/channels/{channel}/implementation", snapshot)
        .post("/api/channels/{channel}/implementation/approve", approve)
        .post("/api/channels/{channel}/implementation/retry", retry)
        .post("/api/channels/{channel}/implementation/rebuild", rebuild)
        .with_state(deps)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Approve {
    graph_version: i64,
    graph_revision: i64,
    /// The machine to build on (the presser's, or one shared with them); absent: their
    /// favourite, else none (approval only).
    #[serde(default)]
    machine_id: Option<uuid::Uuid>,
    /// The checkout on that machine the presser picked.
    #[serde(default)]
    checkout: Option<String>,
}

/// `GET …/implementation`.
async fn snapshot(
    State(deps): State<ImplementationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    // Only the builder sees their machine, checkout and whether their agent is online (LIFE-83).
    let online = |machine| deps.builds.online(machine);
    let mut shown = deps
        .lifecycle
        .snapshot(&doc, caller.account_id, &online)
        .await
        .map_err(ApiError::store)?;
    // What the last delivered build built, and how far the plan moved since (LIFE-10); under
    // LIVE_BUILD, when the edits are rebuilt by themselves (LIFE-15).
    shown["built"] = match deps.rebuilds.changes(&doc).await? {
        Some(mut built) => {
            built["live"] = Value::Bool(deps.live_builds.is_some());
            built["autoRebuildAt"] = deps
                .live_builds
                .as_ref()
                .and_then(|l| l.due(doc.id))
                .map_or(Value::Null, Value::from);
            built
        }
        None => Value::Null,
    };
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
            format!("expected {{\"graphVersion\": n, \"graphRevision\": n, \"machineId\": \"<uuid>\"?, \"checkout\": \"…\"?}}: {e}"),
        )
    })?;
    match deps
        .builds
        .press(
            &caller,
            &doc,
            wanted.graph_version,
            wanted.graph_revision,
            wanted.machine_id,
            wanted.checkout.as_deref(),
        )
        .await?
    {
        Ok(version) => Ok(Json(version)),
        Err(refused) => Err(ApiError::new(
            StatusCode::CONFLICT,
            refused.code,
            refused.message,
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Retry {
    #[serde(default)]
    machine_id: Option<uuid::Uuid>,
    #[serde(default)]
    checkout: Option<String>,
}

/// `POST …/implementation/retry`: a person builds the approved version again (LIFE-48).
async fn retry(
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
            "Only a person builds a plan again, from a signed-in browser; a token cannot.",
        ));
    }
    let doc = deps.documents.writable(&caller, &channel).await?;
    let wanted = machine_named(&body)?;
    Ok(Json(
        deps.builds
            .retry(&caller, &doc, wanted.machine_id, wanted.checkout.as_deref())
            .await?,
    ))
}

/// A retry's or rebuild's body: empty, or `{machineId?, checkout?}`.
fn machine_named(body: &[u8]) -> Result<Retry, ApiError> {
    if body.is_empty() {
        return Ok(Retry {
            machine_id: None,
            checkout: None,
        });
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {{\"machineId\": \"<uuid>\"?, \"checkout\": \"…\"?}}: {e}"),
        )
    })
}

/// `POST …/implementation/rebuild`: a person builds the edits made since the last delivered
/// build onto its pull requests (LIFE-12); a failed rebuild is retried the same way (LIFE-17).
async fn rebuild(
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
            "Only a person presses Build for a plan's changes, from a signed-in browser; a token cannot.",
        ));
    }
    let doc = deps.documents.writable(&caller, &channel).await?;
    let wanted = machine_named(&body)?;
    Ok(Json(
        deps.rebuilds
            .press(&caller, &doc, wanted.machine_id, wanted.checkout.as_deref())
            .await?,
    ))
}
