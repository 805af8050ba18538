//! Paired machines over HTTP: the connector's routes (the machine's own GitHub authorization as
//! `Authorization: Bearer`) and a member's (browser session or token).
//!
//! Owns, for the connector: `POST /api/connector/machines` `{name, release?}` (pair; 201 with the
//! machine), `GET /api/connector/machines/{id}/documents` (the documents that asked it to run
//! their Planner; `?release=` tells the connector's release) and `POST /api/connector/planner`
//! `{machineId, documentId, release?}` (a document-scoped Planner credential, AC-20); the
//! browser builds queued on it: `GET /api/connector/machines/{id}/builds` (`?autoBuild=true`:
//! its owner allowed automatic builds on it, LIFE-79), `POST
//! /api/connector/builds/{id}/pickup` `{machineId}` (once, LIFE-48) and `POST
//! /api/connector/builds/{id}/failed` `{machineId, reason?}`. For a
//! member: `GET /api/machines` (theirs and those shared with them), `DELETE /api/machines/{id}`
//! (revoke, owner only; 204), `PUT`/`DELETE /api/machines/{id}/shares/{login}` (share with a
//! teammate, take it back; owner only), `PUT /api/machines/favourite` `{machineId|null}`, and
//! `GET`/`PUT /api/channels/{channel}/machine` `{machineId|null}` (the machine a document runs
//! its Planner on; reading needs read access, choosing needs write access).
//! Does not own: the rules ([`crate::machines`]) or access.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::documents::DocumentsDeps;
use super::{Routes, Table};
use crate::error::ApiError;
use crate::machines::{machine_json, Machines};

/// What the machine routes use.
#[derive(Clone)]
pub struct MachinesDeps {
    pub documents: DocumentsDeps,
    pub machines: Arc<Machines>,
    pub builds: Arc<crate::builds::Builds>,
}

pub fn routes(deps: MachinesDeps) -> Routes {
    Table::new()
        .post("/api/connector/machines", pair)
        .get("/api/connector/machines/{id}/documents", assignments)
        .post("/api/connector/planner", planner_credential)
        .post("/api/connector/planner/failure", launch_failed)
        .get("/api/connector/machines/{id}/builds", queued_builds)
        .post("/api/connector/builds/{id}/pickup", pick_up_build)
        .post("/api/connector/builds/{id}/failed", build_failed)
        .get("/api/machines", list)
        .delete("/api/machines/{id}", revoke)
        .put("/api/machines/{id}/shares/{login}", share)
        .delete("/api/machines/{id}/shares/{login}", unshare)
        .put("/api/machines/favourite", favourite)
        .get("/api/channels/{channel}/machine", chosen)
        .put("/api/channels/{channel}/machine", choose)
        .with_state(deps)
}

fn body<T: DeserializeOwned>(bytes: &Bytes, expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {expected}: {e}"),
        )
    })
}

fn machine_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "machine-not-found",
            "No such machine: a machine id is a UUID.",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pair {
    name: String,
    #[serde(default)]
    release: Option<String>,
}

/// `POST /api/connector/machines`.
async fn pair(
    State(deps): State<MachinesDeps>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let wanted: Pair = body(&bytes, "{\"name\": \"…\", \"release\": \"…\"}")?;
    let machine = deps
        .machines
        .pair(&caller, &wanted.name, wanted.release.as_deref())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "machine": machine_json(&machine) })),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
struct ReleaseQuery {
    #[serde(default)]
    release: Option<String>,
}

/// `GET /api/connector/machines/{id}/documents`.
async fn assignments(
    State(deps): State<MachinesDeps>,
    Path(id): Path<String>,
    Query(query): Query<ReleaseQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let id = machine_id(&id)?;
    Ok(Json(
        deps.machines
            .assignments(&caller, id, query.release.as_deref())
            .await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CredentialRequest {
    machine_id: Uuid,
    document_id: Uuid,
    #[serde(default)]
    release: Option<String>,
}

/// `POST /api/connector/planner`.
async fn planner_credential(
    State(deps): State<MachinesDeps>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let wanted: CredentialRequest = body(
        &bytes,
        "{\"machineId\": \"<uuid>\", \"documentId\": \"<uuid>\", \"release\": \"…\"}",
    )?;
    let issued = deps
        .machines
        .issue_credential(
            &caller,
            wanted.machine_id,
            wanted.document_id,
            wanted.release.as_deref(),
        )
        .await?;
    Ok(Json(json!({
        "credential": issued.credential.expose(),
        "documentId": issued.document_id,
        "expiresAt": issued.expires_at_ms,
        // The document in the path too: a balancer in front of several processes hashes the
        // link to the process serving it (`PROCESSES=many`); one process ignores it.
        "agentPath": format!("/api/v1/agent?document={}", issued.document_id),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LaunchReport {
    machine_id: Uuid,
    document_id: Uuid,
    /// Failed launches in a row.
    #[serde(default)]
    attempts: u32,
    /// How the last one ended.
    #[serde(default)]
    ended: Option<String>,
    /// Its last stderr line.
    #[serde(default)]
    stderr: Option<String>,
    /// A launch stayed up.
    #[serde(default)]
    stayed_up: bool,
}

/// `POST /api/connector/planner/failure`.
async fn launch_failed(
    State(deps): State<MachinesDeps>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let wanted: LaunchReport = body(
        &bytes,
        "{\"machineId\": \"<uuid>\", \"documentId\": \"<uuid>\", \"attempts\": n, \"ended\": \"…\", \"stderr\": \"…\"} or {…, \"stayedUp\": true}",
    )?;
    let report = crate::starting::Report {
        attempts: wanted.attempts,
        ended: wanted.ended,
        stderr: wanted.stderr,
        stayed_up: wanted.stayed_up,
    };
    let told = deps
        .machines
        .launch_failed(&caller, wanted.machine_id, wanted.document_id, &report)
        .await?;
    Ok(Json(json!({ "failure": told })))
}

/// `GET /api/machines`.
async fn list(
    State(deps): State<MachinesDeps>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    Ok(Json(deps.machines.list(&caller).await?))
}

/// `DELETE /api/machines/{id}`.
async fn revoke(
    State(deps): State<MachinesDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    deps.machines.revoke(&caller, machine_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /api/machines/{id}/shares/{login}`.
async fn share(
    State(deps): State<MachinesDeps>,
    Path((id, login)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let added = deps
        .machines
        .share(&caller, machine_id(&id)?, &login)
        .await?;
    Ok(Json(json!({ "shared": true, "changed": added })))
}

/// `DELETE /api/machines/{id}/shares/{login}`.
async fn unshare(
    State(deps): State<MachinesDeps>,
    Path((id, login)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let taken = deps
        .machines
        .unshare(&caller, machine_id(&id)?, &login)
        .await?;
    Ok(Json(json!({ "shared": false, "changed": taken })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Choice {
    machine_id: Option<Uuid>,
}

/// `PUT /api/machines/favourite`.
async fn favourite(
    State(deps): State<MachinesDeps>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let wanted: Choice = body(&bytes, "{\"machineId\": \"<uuid>\" | null}")?;
    deps.machines.favourite(&caller, wanted.machine_id).await?;
    Ok(Json(json!({ "favourite": wanted.machine_id })))
}

/// `GET /api/channels/{channel}/machine`.
async fn chosen(
    State(deps): State<MachinesDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    Ok(Json(deps.machines.chosen(&doc).await?))
}

/// `PUT /api/channels/{channel}/machine`.
async fn choose(
    State(deps): State<MachinesDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let doc = deps.documents.writable(&caller, &channel).await?;
    let wanted: Choice = body(&bytes, "{\"machineId\": \"<uuid>\" | null}")?;
    Ok(Json(
        deps.machines
            .choose(&caller, &doc, wanted.machine_id)
            .await?,
    ))
}

fn build_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "build-not-found",
            "No such build: a build id is a UUID.",
        )
    })
}

/// A builds poll's query: `autoBuild=true` when the machine's owner allowed automatic builds
/// on it when pairing (LIFE-79).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BuildsPoll {
    #[serde(default)]
    auto_build: bool,
}

/// `GET /api/connector/machines/{id}/builds`.
async fn queued_builds(
    State(deps): State<MachinesDeps>,
    Path(id): Path<String>,
    Query(poll): Query<BuildsPoll>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let id = machine_id(&id)?;
    Ok(Json(
        deps.builds.queued(&caller, id, poll.auto_build).await?,
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BuildWord {
    machine_id: Uuid,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /api/connector/builds/{id}/pickup`.
async fn pick_up_build(
    State(deps): State<MachinesDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let id = build_id(&id)?;
    let wanted: BuildWord = body(&bytes, "{\"machineId\": \"<uuid>\"}")?;
    Ok(Json(json!({
        "build": deps.builds.pick_up(&caller, wanted.machine_id, id).await?,
        "mcpPath": "/mcp",
    })))
}

/// `POST /api/connector/builds/{id}/failed`.
async fn build_failed(
    State(deps): State<MachinesDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let id = build_id(&id)?;
    let wanted: BuildWord = body(&bytes, "{\"machineId\": \"<uuid>\", \"reason\": \"…\"}")?;
    Ok(Json(
        deps.builds
            .failed(&caller, wanted.machine_id, id, wanted.reason.as_deref())
            .await?,
    ))
}
