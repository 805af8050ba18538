//! A document's room socket for browsers: `GET /api/documents/{id}/room` (WebSocket).
//!
//! Owns: admitting a browser to a room (a live cookie session, this server's Origin, read
//! access to the document's repository — all checked before the upgrade), `session:hello`, then
//! `session:planner` right after it and again on every change of the document's Planner
//! (PRES-01, PRES-02). Does not own: what the presence says ([`crate::planner::Presence`]) or
//! the document's live sync (the documents issue adds Yjs frames here).
//!
//! Messages are JSON text frames with a `type`: the server sends `session:hello`,
//! `session:planner` and `error`; a browser may send `chat:wake`, answered with the current
//! `session:planner` (PRES-07).

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::app::AppState;
use crate::documents::{self, document_json};
use crate::planner::Presence;
use crate::store::Document;

/// Largest frame a browser may send on the room socket.
const ROOM_FRAME_LIMIT: usize = 1024 * 1024;

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": code, "message": message }))).into_response()
}

/// The upgrade: every refusal is plain HTTP.
pub async fn endpoint(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return refuse(
            StatusCode::UPGRADE_REQUIRED,
            "websocket-required",
            "The room is a WebSocket.",
        );
    };
    if headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        != Some(state.config.app_origin.as_str())
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "foreign-origin",
            "A room socket must be opened from this server's own pages.",
        );
    }
    let Some(live) = state.sessions.authenticate(&state, &headers).await else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "not-signed-in",
            "Sign in to open this document.",
        );
    };
    let not_found = || {
        refuse(
            StatusCode::NOT_FOUND,
            "document-not-found",
            "No such document.",
        )
    };
    let doc = match uuid::Uuid::parse_str(&id) {
        Ok(id) => match state.services.store.document(id).await {
            Ok(Some(doc)) => doc,
            Ok(None) => return not_found(),
            Err(e) => {
                tracing::error!(error = %e, "room: storage failed");
                return refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage-unavailable",
                    "Storage did not answer; try again shortly.",
                );
            }
        },
        Err(_) => return not_found(),
    };
    match state
        .admission
        .repo_access_cached(live.github_token(), &doc.repo_owner, &doc.repo_name)
        .await
    {
        Ok(Some(a)) if a.pull || a.can_write() => {}
        Ok(_) => return not_found(),
        Err(_) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "github-unavailable",
                "GitHub is unavailable, so access cannot be checked right now; try again shortly.",
            )
        }
    }
    let login = live.account.login.clone();
    upgrade
        .max_message_size(ROOM_FRAME_LIMIT)
        .on_upgrade(move |socket| run(state, socket, doc, login))
}

fn planner_frame(presence: &Presence) -> Message {
    Message::Text(
        json!({ "type": "session:planner", "planner": presence })
            .to_string()
            .into(),
    )
}

async fn run(state: AppState, mut socket: WebSocket, doc: Document, login: String) {
    // Subscribe before reading the current state, so no change falls between the two.
    let mut changes = state.planners.subscribe(doc.id);
    let hello = json!({
        "type": "session:hello",
        "document": document_json(&doc),
        "url": documents::canonical_url(&doc),
        "login": login,
    });
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    if socket
        .send(planner_frame(&state.planners.presence(doc.id)))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(presence) => {
                    if socket.send(planner_frame(&presence)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Fell behind: the latest state is what matters.
                    if socket.send(planner_frame(&state.planners.presence(doc.id))).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { return };
                match message {
                    Message::Text(text) => {
                        let kind = serde_json::from_str::<Value>(&text)
                            .ok()
                            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned));
                        let reply = match kind.as_deref() {
                            Some("chat:wake") => planner_frame(&state.planners.presence(doc.id)),
                            Some(other) => error_frame("unknown-type", &format!("unknown message type {other:?}")),
                            None => error_frame("malformed", "a room message is a JSON object with a string \"type\""),
                        };
                        if socket.send(reply).await.is_err() {
                            return;
                        }
                    }
                    Message::Close(_) => return,
                    Message::Binary(_) | Message::Ping(_) | Message::Pong(_) => {}
                }
            }
        }
    }
}

fn error_frame(code: &str, message: &str) -> Message {
    Message::Text(
        json!({ "type": "error", "code": code, "message": message })
            .to_string()
            .into(),
    )
}
