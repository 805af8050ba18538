//! A document's room socket for browsers: `GET /api/documents/{id}/room` (WebSocket).
//!
//! Owns: the socket's life — the upgrade (a live cookie session, this server's Origin, read
//! access to the document's repository, all checked before it by [`Access::browser_reader`]),
//! `session:hello`, then `session:planner` right after it and again on every change of the
//! document's Planner (PRES-01, PRES-02), the Yjs sync and awareness frames, the Chat frames.
//! Does not own: what the presence says ([`crate::planner::Presence`]), the document's content
//! ([`crate::content`]), or Chat's rules ([`crate::chat`], [`crate::transcript`]).
//!
//! Messages are JSON text frames with a `type`: the server sends `session:hello`,
//! `session:planner` and `error`; a browser may send `chat:wake`, answered with the current
//! `session:planner` (PRES-07). Chat ([`crate::chat`]): a browser sends `chat:send`, answered
//! `chat:ack` or `chat:refused`, and `chat:history`, answered `chat:history`; every socket,
//! readers too, hears each new transcript entry as `chat:message`, in `seq` order.

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;

use super::{Routes, Table};
use crate::access::Access;
use crate::chat::{self, Chat};
use crate::content::{Membership, OpenDocument, OpenDocuments, UpdateError};
use crate::documents::{self, document_json};
use crate::error::ApiError;
use crate::identity::sign_ins::SignIns;
use crate::planner::{Planners, Presence};
use crate::runtime::Shutdown;
use crate::store::Document;
use crate::transcript::{FeedEvent, HistoryQuery, Transcript};
use crate::turns::Turns;

/// What the room socket uses.
#[derive(Clone)]
pub struct RoomDeps {
    pub access: Arc<Access>,
    pub sign_ins: Arc<SignIns>,
    pub planners: Arc<Planners>,
    pub open: Arc<OpenDocuments>,
    pub transcript: Arc<Transcript>,
    pub chat: Arc<Chat>,
    pub turns: Arc<Turns>,
    /// The process's stop: every room socket is closed 1001.
    pub shutdown: Shutdown,
}

pub fn routes(deps: RoomDeps) -> Routes {
    Table::new()
        .get("/api/documents/{id}/room", endpoint)
        .with_state(deps)
}

/// The close code when the server stops (RFC 6455 "going away").
const GOING_AWAY: u16 = 1001;

/// Largest frame a browser may send on the room socket.
const ROOM_FRAME_LIMIT: usize = 1024 * 1024;

/// The upgrade: every refusal is plain HTTP.
async fn endpoint(
    State(deps): State<RoomDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "websocket-required",
            "The room is a WebSocket.",
        )
        .into_response();
    };
    let reader = match deps.access.browser_reader(&headers, &id).await {
        Ok(reader) => reader,
        Err(refusal) => return refusal.into_response(),
    };
    let membership = match deps.open.join(reader.document.id).await {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "room: the document's content could not be loaded");
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage-unavailable",
                "The document could not be loaded; try again shortly.",
            )
            .into_response();
        }
    };
    let doc = reader.document;
    let live = reader.login;
    let can_write = reader.can_write;
    let login = live.account.login.clone();
    upgrade
        .max_message_size(ROOM_FRAME_LIMIT)
        .on_upgrade(move |socket| {
            let shutdown = deps.shutdown.clone();
            shutdown.track(run(
                deps,
                socket,
                doc,
                Member {
                    login,
                    login_id: live.id,
                    can_write,
                    membership,
                },
            ))
        })
}

fn planner_frame(presence: &Presence) -> WsMessage {
    WsMessage::Text(
        json!({ "type": "session:planner", "planner": presence })
            .to_string()
            .into(),
    )
}

/// Who a room socket is.
struct Member {
    login: String,
    login_id: uuid::Uuid,
    can_write: bool,
    membership: Membership,
}

async fn run(deps: RoomDeps, mut socket: WebSocket, doc: Document, member: Member) {
    // Subscribe before reading the current state, so no change falls between the two.
    let mut changes = deps.planners.subscribe(doc.id);
    let room = member.membership.document.clone();
    let me = member.membership.connection;
    let mut relayed = room.subscribe();
    let mut ended = deps.sign_ins.ended();
    let mut chat_feed = deps.transcript.subscribe(doc.id);
    let place = chat::Place {
        document: doc.id,
        url: documents::canonical_url(&doc),
    };
    let sender = chat::Sender {
        login: member.login.clone(),
        can_write: member.can_write,
    };
    let hello = json!({
        "type": "session:hello",
        "document": document_json(&doc),
        "url": documents::canonical_url(&doc),
        "login": member.login,
        "canWrite": member.can_write,
    });
    if socket
        .send(WsMessage::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    if socket
        .send(planner_frame(&deps.planners.presence(doc.id)))
        .await
        .is_err()
    {
        return;
    }
    // Yjs sync: the server's step 1 (its state vector); the client answers with step 2 and its
    // own step 1.
    let step1 = Message::Sync(SyncMessage::SyncStep1(room.state_vector().await)).encode_v1();
    if socket.send(WsMessage::Binary(step1.into())).await.is_err() {
        return;
    }
    if let Some(present) = room.awareness_snapshot() {
        if socket
            .send(WsMessage::Binary(present.into()))
            .await
            .is_err()
        {
            return;
        }
    }
    let stopping = deps.shutdown.stopping();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            () = &mut stopping => {
                let _ = socket.send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
                    code: GOING_AWAY,
                    reason: "going-away".into(),
                }))).await;
                return;
            }
            login = ended.recv() => match login {
                Ok(id) if id != member.login_id => {}
                Err(RecvError::Lagged(_))
                    if deps.sign_ins.get_live(member.login_id, deps.sign_ins.now_ms()).is_some() => {}
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    let _ = socket.send(error_frame("sign-in-required", "You signed out (or your sign-in expired); sign in again to open this document.")).await;
                    let _ = socket.send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
                        code: 4401,
                        reason: "sign-in-required".into(),
                    }))).await;
                    return;
                }
                Err(RecvError::Closed) => return,
            },
            relay = relayed.recv() => match relay {
                Ok(relay) if relay.from == me => {}
                Ok(relay) => {
                    if socket.send(WsMessage::Binary(relay.frame.to_vec().into())).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Fell too far behind to catch up frame by frame: the client resyncs.
                    let _ = socket.send(error_frame("resync", "This connection fell behind; reconnect to sync again.")).await;
                    return;
                }
                Err(RecvError::Closed) => return,
            },
            change = changes.recv() => match change {
                Ok(presence) => {
                    if socket.send(planner_frame(&presence)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Fell behind: the latest state is what matters.
                    if socket.send(planner_frame(&deps.planners.presence(doc.id))).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
            said = chat_feed.recv() => {
                let said = match said {
                    FeedEvent::Message(m) => vec![m],
                    FeedEvent::Lagged => match chat_feed.catch_up(&deps.transcript).await {
                        Ok(missed) => missed,
                        Err(e) => {
                            tracing::error!(error = %e, "room: Chat could not catch up");
                            let _ = socket.send(error_frame("resync", "This connection fell behind; reconnect to sync again.")).await;
                            return;
                        }
                    },
                    FeedEvent::Closed => return,
                };
                for m in said {
                    if socket.send(json_frame(&m.frame())).await.is_err() {
                        return;
                    }
                }
            },
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { return };
                match message {
                    WsMessage::Text(text) => {
                        let value = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
                        let kind = value.get("type").and_then(Value::as_str);
                        let reply = match kind {
                            Some("chat:wake") => planner_frame(&deps.planners.presence(doc.id)),
                            Some("chat:send") => match chat::SendRequest::from_frame(&value) {
                                Ok(request) => json_frame(&deps.chat.send(&place, &sender, request).await.frame()),
                                Err(chat::Malformed(why)) => error_frame("malformed", &why),
                            },
                            Some("chat:history") => match HistoryQuery::from_frame(&value) {
                                Ok(query) => match deps.transcript.history(doc.id, &query).await {
                                    Ok(page) => json_frame(&page.frame()),
                                    Err(e) => {
                                        tracing::error!(error = %e, "room: Chat history could not be read");
                                        error_frame("storage-unavailable", "Chat history could not be read; try again shortly.")
                                    }
                                },
                                Err(chat::Malformed(why)) => error_frame("malformed", &why),
                            },
                            Some("planner:stop") if member.can_write => {
                                let stopped = deps.turns.stop(doc.id);
                                json_frame(&json!({ "type": "planner:stopped", "stopped": stopped }))
                            }
                            Some("planner:stop") => error_frame(
                                "read-only",
                                "Stopping chopin needs push access to this document's repository.",
                            ),
                            Some(other) => error_frame("unknown-type", &format!("unknown message type {other:?}")),
                            None => error_frame("malformed", "a room message is a JSON object with a string \"type\""),
                        };
                        if socket.send(reply).await.is_err() {
                            return;
                        }
                    }
                    WsMessage::Binary(bytes) => {
                        if let Some(reply) = yjs_frame(&room, me, member.can_write, &bytes).await {
                            if socket.send(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                    WsMessage::Close(_) => {
                        // Answer the close so the browser's handshake completes.
                        let _ = socket.send(WsMessage::Close(None)).await;
                        return;
                    }
                    WsMessage::Ping(_) | WsMessage::Pong(_) => {}
                }
            }
        }
    }
}

fn json_frame(value: &Value) -> WsMessage {
    WsMessage::Text(value.to_string().into())
}

fn error_frame(code: &str, message: &str) -> WsMessage {
    WsMessage::Text(
        json!({ "type": "error", "code": code, "message": message })
            .to_string()
            .into(),
    )
}

/// Handles one binary (y-protocols) frame from a browser; returns the reply to send, if any.
/// Readers sync and share awareness, but their document updates are refused.
async fn yjs_frame(
    room: &OpenDocument,
    me: u64,
    can_write: bool,
    bytes: &[u8],
) -> Option<WsMessage> {
    let message = match Message::decode_v1(bytes) {
        Ok(m) => m,
        Err(e) => {
            return Some(error_frame(
                "malformed-yjs",
                &format!("not a y-protocols message: {e}"),
            ))
        }
    };
    match message {
        Message::Sync(SyncMessage::SyncStep1(sv)) => {
            let missing = room.missing_for(&sv).await;
            let reply = Message::Sync(SyncMessage::SyncStep2(missing)).encode_v1();
            Some(WsMessage::Binary(reply.into()))
        }
        Message::Sync(SyncMessage::SyncStep2(update))
        | Message::Sync(SyncMessage::Update(update)) => {
            let empty = yrs::Update::decode_v1(&update)
                .map(|u| u.is_empty())
                .unwrap_or(false);
            if empty {
                return None;
            }
            if !can_write {
                return Some(error_frame(
                    "read-only",
                    "You can read this document but not edit it: editing needs push access to its repository. Your change was not saved.",
                ));
            }
            match room.apply_update(me, &update).await {
                Ok(_) => None,
                Err(UpdateError::Malformed(why)) => Some(error_frame(
                    "malformed-yjs",
                    &format!("the update was refused: {why}"),
                )),
                Err(UpdateError::Store(e)) => {
                    tracing::error!(error = %e, "room: an update could not be saved");
                    Some(error_frame(
                        "not-saved",
                        "Your change could not be saved; reload the document.",
                    ))
                }
            }
        }
        Message::Awareness(update) => {
            room.relay_awareness(me, update, bytes.to_vec());
            None
        }
        Message::AwarenessQuery | Message::Auth(_) | Message::Custom(_, _) => None,
    }
}
