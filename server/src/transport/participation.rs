//! The pause of a document's automatic participation (CTX-02, RULINGS CTX-03), over HTTP.
//!
//! Owns: `GET /api/channels/{channel}/participation` (anyone who can read the document) and
//! `PUT` of the same path with `{"paused": bool}` (writers), both answering
//! `{paused, pausedBy, pausedAt}`. Does not own: what the pause does
//! ([`crate::participation`]), or access.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::documents::DocumentsDeps;
use super::{Routes, Table};
use crate::error::ApiError;
use crate::participation::Participation;
use crate::store::ParticipationPause;

/// What the pause route uses.
#[derive(Clone)]
pub struct ParticipationDeps {
    pub documents: DocumentsDeps,
    pub participation: std::sync::Arc<Participation>,
}

pub fn routes(deps: ParticipationDeps) -> Routes {
    Table::new()
        .get("/api/channels/{channel}/participation", state)
        .put("/api/channels/{channel}/participation", set)
        .with_state(deps)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Set {
    paused: bool,
}

fn answer(pause: Option<ParticipationPause>) -> Json<Value> {
    Json(json!({
        "paused": pause.is_some(),
        "pausedBy": pause.as_ref().map(|p| p.paused_by.clone()),
        "pausedAt": pause.as_ref().map(|p| p.paused_at_ms),
    }))
}

/// `GET …/participation`: whether Chopin joins the document's conversation on its own.
async fn state(
    State(deps): State<ParticipationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    let pause = deps
        .participation
        .state(doc.id)
        .await
        .map_err(ApiError::store)?;
    Ok(answer(pause))
}

/// `PUT …/participation` `{"paused": bool}`: a writer pauses or resumes it for everyone.
async fn set(
    State(deps): State<ParticipationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, true).await?;
    let doc = deps.documents.writable(&caller, &channel).await?;
    let wanted: Set = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {{\"paused\": true|false}}: {e}"),
        )
    })?;
    let pause = deps
        .participation
        .set_paused(doc.id, &caller.login, wanted.paused)
        .await
        .map_err(ApiError::store)?;
    Ok(answer(pause))
}
