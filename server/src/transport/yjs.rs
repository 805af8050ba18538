//! A document's text for Yjs clients: the y-protocols frames both sockets speak, and the pure
//! y-websocket endpoint (`GET /api/yjs/{id}`) the unmodified `WebsocketProvider` of the npm
//! `y-websocket` package connects to.
//!
//! Owns: the server's greeting (sync step 1, then everyone present in awareness), answering a
//! client's sync step 1 with step 2, taking a writer's update (journalled before it is applied
//! or relayed, by [`OpenDocument::apply_update`]), relaying awareness, and refusing a reader's
//! update. The endpoint adds what y-websocket's provider needs: binary frames only (it decodes
//! every frame as Yjs), awareness echoed to its sender (the provider reconnects after 30 s
//! without any message, and a lone editor's only traffic is its own 15 s awareness renewals),
//! answers to an awareness query, a reader's update refused with y-protocols' auth message
//! (`permission-denied`), and refusals made *after* the upgrade as 44xx close codes, which the
//! provider takes as final and stops retrying (4401 not signed in, 4403 foreign origin,
//! 4404 no such document); a passing trouble closes 1013 so it retries. An open socket is
//! rechecked like the room's (4403 access gone, 4401 sign-in gone, 4404 archived).
//! Does not own: who may read or write (`Access::browser_reader`), the document's content
//! ([`crate::content`]), or presence and Chat (the JSON room socket, [`super::room`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::runtime::fanout::RecvError;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::stream::SplitStream;
use futures::StreamExt;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::decoder::Decode;
use yrs::updates::encoder::Encode;

use super::socket::{self, Due, Liveness, Outbox, Rechecks};
use super::{Routes, Table};
use crate::access::{Access, Reader, Recheck};
use crate::content::{
    guard, write_var_uint, Membership, OpenDocument, OpenDocuments, UpdateError,
    AWARENESS_CLIENTS_PER_SOCKET,
};
use crate::error::ApiError;
use crate::identity::sign_ins::SignIns;
use crate::metrics::{Metrics, SocketKind};
use crate::runtime::Shutdown;

/// Largest frame a Yjs client may send.
const FRAME_LIMIT: usize = 1024 * 1024;
/// y-protocols' auth message type, and its "permission denied" reply.
const MESSAGE_AUTH: u64 = 2;
const PERMISSION_DENIED: u64 = 0;

/// The words a reader's refused update carries.
const READ_ONLY: &str = "You can read this document but not edit it: editing needs push access to its repository. Your change was not saved.";

/// Said when a change could not be saved (the storage failed).
pub const NOT_SAVED: &str =
    "Your change could not be saved; this connection closes so that your editor syncs again.";
/// The words a gapped update's refusal carries.
const GAPPED: &str = "Your change was not saved: it builds on changes this server never received. Reload the document to continue from what is saved.";

/// What a client's binary frame calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing to send back.
    None,
    /// A binary y-protocols frame for the sender.
    Binary(Vec<u8>),
    /// Several, in order (an awareness snapshot in bounded frames).
    Frames(Vec<Vec<u8>>),
    /// The frame was refused: a stable code and words for a person.
    Refused { code: &'static str, message: String },
}

/// The server's first frames: its sync step 1 (the client answers with step 2 and its own step
/// 1), then everyone present in awareness.
pub async fn greeting(document: &OpenDocument) -> Vec<Vec<u8>> {
    let mut frames =
        vec![Message::Sync(SyncMessage::SyncStep1(document.state_vector().await)).encode_v1()];
    frames.extend(document.awareness_snapshot());
    frames
}

/// Handles one binary (y-protocols) frame from socket `me`. Everybody syncs and shares
/// awareness; only a writer's updates are taken.
pub async fn frame(member: &Membership, can_write: bool, bytes: &[u8]) -> Answer {
    let (document, me): (&OpenDocument, u64) = (&member.document, member.connection);
    if let Some(count) = awareness_count(bytes) {
        if count > AWARENESS_CLIENTS_PER_SOCKET as u64 {
            // Refused before decoding: a frame may declare millions of clients in a few bytes.
            return Answer::Refused {
                code: "awareness-too-large",
                message: format!(
                    "an awareness update carries at most {AWARENESS_CLIENTS_PER_SOCKET} clients"
                ),
            };
        }
    }
    let message = match guard::guarded(|| Message::decode_v1(bytes)) {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            return Answer::Refused {
                code: "malformed-yjs",
                message: format!("not a y-protocols message: {e}"),
            }
        }
        None => {
            return Answer::Refused {
                code: "malformed-yjs",
                message: "not a y-protocols message yrs can read".to_owned(),
            }
        }
    };
    match message {
        Message::Sync(SyncMessage::SyncStep1(sv)) => {
            let missing = document.missing_for(&sv).await;
            Answer::Binary(Message::Sync(SyncMessage::SyncStep2(missing)).encode_v1())
        }
        Message::Sync(SyncMessage::SyncStep2(update))
        | Message::Sync(SyncMessage::Update(update)) => {
            if guard::is_empty(&update) == Some(true) {
                return Answer::None;
            }
            if !can_write {
                return Answer::Refused {
                    code: "read-only",
                    message: READ_ONLY.to_owned(),
                };
            }
            match member.document.queue_update(me, &update).await {
                Ok(_) => Answer::None,
                Err(UpdateError::Malformed(why)) => Answer::Refused {
                    code: "malformed-yjs",
                    message: format!("the update was refused: {why}"),
                },
                Err(UpdateError::Poisonous(why)) => {
                    tracing::warn!(%why, "a writer's update was refused: it would poison the document");
                    Answer::Refused {
                        code: "malformed-yjs",
                        message: format!("the update was refused: {why}"),
                    }
                }
                Err(UpdateError::Gapped(why)) => {
                    tracing::info!(%why, "a writer's update was refused: it depends on changes the document never received");
                    Answer::Refused {
                        code: "update-gapped",
                        message: GAPPED.to_owned(),
                    }
                }
                Err(UpdateError::TooLarge { message, .. }) => Answer::Refused {
                    code: "document-too-large",
                    message,
                },
                Err(UpdateError::Store(e)) => {
                    tracing::error!(error = %e, "an update could not be saved");
                    Answer::Refused {
                        code: "not-saved",
                        message: NOT_SAVED.to_owned(),
                    }
                }
            }
        }
        Message::Awareness(update) => {
            document.relay_awareness(member, update);
            Answer::None
        }
        Message::AwarenessQuery => match document.awareness_snapshot() {
            present if present.is_empty() => Answer::None,
            present => Answer::Frames(present),
        },
        Message::Auth(_) | Message::Custom(_, _) => Answer::None,
    }
}

/// The number of clients an awareness frame (`[1, varUint8Array([count, …])]`) declares, read
/// without decoding the rest; `None` for any other frame.
fn awareness_count(bytes: &[u8]) -> Option<u64> {
    let mut at = 0;
    let mut read = || -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *bytes.get(at)?;
            at += 1;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    };
    if read()? != 1 {
        return None;
    }
    read()?; // the payload's length
    read()
}

/// y-protocols' `permission-denied` auth message carrying `reason`.
fn permission_denied(reason: &str) -> Vec<u8> {
    let mut frame = Vec::with_capacity(reason.len() + 8);
    write_var_uint(&mut frame, MESSAGE_AUTH);
    write_var_uint(&mut frame, PERMISSION_DENIED);
    write_var_uint(&mut frame, reason.len() as u64);
    frame.extend_from_slice(reason.as_bytes());
    frame
}

/// What the y-websocket endpoint uses.
#[derive(Clone)]
pub struct YjsDeps {
    pub access: Arc<Access>,
    pub sign_ins: Arc<SignIns>,
    pub open: Arc<OpenDocuments>,
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// How often an open socket's access is checked again (`AGENT_ACCESS_RECHECK_MS`).
    pub access_recheck_ms: u64,
}

pub fn routes(deps: YjsDeps) -> Routes {
    Table::new().get("/api/yjs/{id}", endpoint).with_state(deps)
}

/// The close code a refusal becomes: the provider stops retrying on 4400–4499 and retries on
/// anything else.
fn close_code(refusal: &ApiError) -> u16 {
    match refusal.status {
        StatusCode::UNAUTHORIZED => 4401,
        StatusCode::FORBIDDEN => 4403,
        StatusCode::NOT_FOUND => 4404,
        StatusCode::SERVICE_UNAVAILABLE => 1013,
        _ => 1011,
    }
}

/// `GET /api/yjs/{id}`: every WebSocket upgrade is accepted; a refusal is then a close code
/// the provider can see (a browser's WebSocket cannot see an HTTP status).
async fn endpoint(
    State(deps): State<YjsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "websocket-required",
            "A document's text is served over a WebSocket (the y-websocket protocol).",
        )
        .into_response();
    };
    let admitted = match deps.access.browser_reader(&headers, &id).await {
        Ok(reader) => match deps
            .open
            .join(reader.document.id, reader.login.account.id)
            .await
        {
            Ok(membership) => Ok((reader, membership)),
            Err(e) => Err(ApiError::store(e)),
        },
        Err(refusal) => Err(refusal),
    };
    socket::tune(upgrade, FRAME_LIMIT).on_upgrade(move |socket| {
        let shutdown = deps.shutdown.clone();
        shutdown.track(async move {
            let _open = deps.metrics.socket(SocketKind::Yjs);
            let (mut incoming, out) =
                socket::split(socket, &deps.shutdown, socket::WRITE_STALL, &deps.metrics);
            match admitted {
                Ok((reader, membership)) => {
                    run(&deps, &mut incoming, &out, reader, membership).await
                }
                Err(refusal) => {
                    tracing::debug!(code = refusal.code, "y-websocket connection refused");
                    let _ = out.close(close_code(&refusal), refusal.code);
                }
            }
            socket::linger(&mut incoming).await;
        })
    })
}

/// The socket of an admitted client, until it ends (a close is queued or the peer is gone).
async fn run(
    deps: &YjsDeps,
    incoming: &mut SplitStream<WebSocket>,
    out: &Outbox,
    reader: Reader,
    membership: crate::content::Membership,
) {
    let document: &OpenDocument = &membership.document;
    let me = membership.connection;
    let mut relayed = document.subscribe();
    let mut signed_in = deps.sign_ins.watch(reader.login.id);
    let mut can_write = reader.can_write;
    // Refusals a person should see, each told once per socket (until it can write again).
    let mut told: BTreeSet<&'static str> = BTreeSet::new();
    for frame in greeting(document).await {
        if out.send(WsMessage::Binary(frame.into())).is_err() {
            return;
        }
    }
    let stopping = deps.shutdown.stopping();
    let writer_ended = out.ended();
    let mut liveness = Liveness::new();
    let mut rechecks = Rechecks::every(deps.access_recheck_ms);
    tokio::pin!(stopping, writer_ended);
    loop {
        let next = tokio::select! {
            () = &mut stopping => {
                let _ = out.close(1001, "going-away");
                return;
            }
            () = document.archived() => {
                let _ = out.close(4404, "document-not-found");
                return;
            }
            () = document.moved() => {
                let _ = out.close(super::room::TRY_AGAIN_LATER, "served-elsewhere");
                return;
            }
            () = rechecks.tick() => match deps.access.recheck_reader(&reader.login, &reader.document).await {
                Recheck::Reader { can_write: now } => {
                    if now != can_write {
                        can_write = now;
                        // A writer again is told again if it loses write access later.
                        told.remove("read-only");
                    }
                    None
                }
                Recheck::Unanswered => None,
                Recheck::Archived => {
                    let _ = out.close(4404, "document-not-found");
                    return;
                }
                Recheck::SignInGone => {
                    let _ = out.close(4401, "sign-in-required");
                    return;
                }
                Recheck::Revoked(_) => {
                    let _ = out.close(4403, "access-revoked");
                    return;
                }
            },
            () = &mut writer_ended => return,
            () = liveness.tick() => match liveness.due() {
                Due::Ping => Some(WsMessage::Ping(Default::default())),
                Due::Silent => return,
            },
            () = signed_in.ended() => {
                let _ = out.close(4401, "sign-in-required");
                return;
            }
            relay = relayed.recv() => match relay {
                Ok(relay) if relay.unsaved_for(me) => {
                    // This socket's changes could not be saved: its provider reconnects and
                    // sends them again in its sync.
                    let _ = out.close(1011, "not-saved");
                    return;
                }
                Ok(relay) if relay.unsaved.is_some() => None,
                // The sender's own awareness comes back to it, as y-websocket's server does.
                Ok(relay) if relay.from == me && !relay.awareness => None,
                Ok(relay) => Some(WsMessage::Binary(relay.frame)),
                Err(RecvError::Lagged(_)) => {
                    // Fell behind: the provider reconnects and syncs again.
                    let _ = out.close(1013, "resync");
                    return;
                }
                Err(RecvError::Closed) => return,
            },
            message = incoming.next() => {
                let Some(Ok(message)) = message else { return };
                liveness.heard();
                match message {
                    WsMessage::Binary(bytes) => {
                        match frame(&membership, can_write, &bytes).await {
                            Answer::None => None,
                            Answer::Binary(reply) => Some(WsMessage::Binary(reply.into())),
                            Answer::Frames(mut replies) => {
                                let last = replies.pop();
                                for reply in replies {
                                    if out.send(WsMessage::Binary(reply.into())).is_err() {
                                        return;
                                    }
                                }
                                last.map(|reply| WsMessage::Binary(reply.into()))
                            }
                            Answer::Refused { code: code @ ("read-only" | "update-gapped" | "document-too-large"), message } if told.insert(code) => {
                                Some(WsMessage::Binary(permission_denied(&message).into()))
                            }
                            Answer::Refused { code, message } => {
                                tracing::debug!(code, %message, "a y-websocket frame was refused");
                                None
                            }
                        }
                    }
                    WsMessage::Text(_) => {
                        let _ = out.close(1003, "binary frames only");
                        return;
                    }
                    WsMessage::Close(_) => {
                        let _ = out.send(WsMessage::Close(None));
                        return;
                    }
                    WsMessage::Ping(_) | WsMessage::Pong(_) => None,
                }
            }
        };
        if let Some(frame) = next {
            if out.send(frame).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_denied_is_y_protocols_auth_message() {
        // [messageAuth = 2][permission denied = 0][varString "no"]
        assert_eq!(permission_denied("no"), vec![2, 0, 2, b'n', b'o']);
        let long = "x".repeat(200);
        let frame = permission_denied(&long);
        assert_eq!(&frame[..4], &[2, 0, 0xc8, 0x01]);
        assert_eq!(frame.len(), 4 + 200);
    }
}
