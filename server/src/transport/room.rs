//! A document's room socket for browsers: `GET /api/documents/{id}/room` (WebSocket).
//!
//! Owns: the socket's life — the upgrade (a live cookie session, this server's Origin, read
//! access to the document's repository, all checked before it by [`Access::browser_reader`]),
//! `session:hello`, then `session:planner` right after it and again on every change of the
//! document's Planner (PRES-01, PRES-02; under the `remote` harness only: an in-server Planner
//! has no presence to tell, PRES-06), the Yjs sync and awareness frames, the Chat frames;
//! the periodic recheck of the reader's access (`AGENT_ACCESS_RECHECK_MS`, through the admission
//! caches: read gone closes 4403, push gone makes it a reader's and says `session:access`), and
//! closing when the sign-in ends (4401) or the document is archived (4404).
//! Does not own: what the presence says ([`crate::planner::Presence`]), the document's content
//! ([`crate::content`]), or Chat's rules ([`crate::chat`], [`crate::transcript`]).
//!
//! Messages are JSON text frames with a `type`: the server sends `session:hello`,
//! `session:planner` and `error`; a browser may send `chat:wake`, answered with the current
//! `session:planner` (PRES-07; not answered under an in-server harness). Chat ([`crate::chat`]): a browser sends `chat:send`, answered
//! `chat:ack` or `chat:refused`, and `chat:history`, answered `chat:history`; every socket,
//! readers too, hears each new transcript entry as `chat:message`, in `seq` order.

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::stream::SplitStream;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::socket::{self, Due, Liveness, Outbox, Rechecks, SILENCE_BOUND};
use super::yjs;
use super::{Routes, Table};
use crate::access::{Access, Recheck};
use crate::chat::{self, Chat};
use crate::content::{Membership, OpenDocument, OpenDocuments};
use crate::documents::children::{child_url, ChildError, Children};
use crate::documents::{self, document_json};
use crate::error::ApiError;
use crate::identity::sign_ins::{LiveLogin, SignIns};
use crate::kept::Kept;
use crate::metrics::{Metrics, SocketKind};
use crate::models::{Choose, Models};
use crate::planner::{Planners, Presence, PresenceState};
use crate::questions::{Given, Questions, Scope};
use crate::runs::{Control, Runs};
use crate::runtime::Shutdown;
use crate::store::Document;
use crate::transcript::{FeedEvent, HistoryQuery, Transcript};
use crate::turns::{Focus, Turns};

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
    /// A child document's root, asked again before each of its room's messages (ISO-25).
    pub children: Arc<Children>,
    /// The process's stop: every room socket is closed 1001.
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// How often an open socket's access is checked again (`AGENT_ACCESS_RECHECK_MS`).
    pub access_recheck_ms: u64,
    /// Decisions the Planner's questions opened, answered and cancelled from the room.
    pub questions: Arc<Questions>,
    /// Run cards, and Stop and Resume for runs.
    pub runs: Arc<Runs>,
    /// The room is told the Planner's presence (`session:planner`): only under the `remote`
    /// harness, whose Planner is a client that attaches and leaves (PRES-06).
    pub presence: bool,
    /// The document's model state, told to writers only (`chat:model`, RULINGS MOD-31).
    pub models: Arc<Models>,
    /// The attachment limits, told on joining (FILE-21).
    pub attachments: crate::files::Limits,
    /// Dictation's transcription as `session:hello` names it (`{provider, maxBytes}`), only
    /// where `TRANSCRIPTION_MODEL` is set (DICT-06).
    pub transcription: Option<serde_json::Value>,
    /// Who is renaming each document (`plan:titling`), which title drafts wait for (OWN-15).
    pub titling: Arc<crate::jobs::title::Titling>,
    /// Asks for a passage's update when an answer on its anchored Decision is saved (COA-15).
    pub prose: Arc<crate::jobs::prose::ProseUpdates>,
    /// The document's comment threads (this room's own document's, a child's too).
    pub comments: Arc<crate::comments::Comments>,
    /// Build plan presses and the `implementation:drafting` broadcast.
    pub drafts: Arc<crate::drafting::Drafts>,
    /// `plan:implementation`, and the editing lock on joining (LIFE-68, LIFE-69).
    pub graphs: Arc<crate::graphs::Graphs>,
    /// Default machine (ATM-37): an open room is a viewer, and a writer's favourite machine
    /// runs a document nobody chose one for. Only under the `remote` harness.
    pub default_machine: Option<Arc<crate::default_machine::DefaultMachine>>,
}

/// A room socket's part in [`crate::jobs::title::Titling`]: let go when the socket ends.
struct TitlingSeat<'a> {
    titling: &'a crate::jobs::title::Titling,
    transcript: &'a Transcript,
    document: uuid::Uuid,
    connection: u64,
}

impl Drop for TitlingSeat<'_> {
    fn drop(&mut self) {
        self.titling
            .left(self.document, self.connection, self.transcript.now_ms());
    }
}

pub fn routes(deps: RoomDeps) -> Routes {
    Table::new()
        .get("/api/documents/{id}/room", endpoint)
        .with_state(deps)
}

/// The `error` frame and close reason when the document is archived under an open socket.
const ARCHIVED: (&str, &str) = (
    "document-not-found",
    "This document was archived, which closes it; a writer can restore it.",
);

/// The close code when the server stops (RFC 6455 "going away").
const GOING_AWAY: u16 = 1001;
/// The close of a socket whose document another process serves now (`PROCESSES=many`): the
/// client reconnects, and the balancer sends it there.
pub const TRY_AGAIN_LATER: u16 = 1013;

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
    let membership = match deps
        .open
        .join(reader.document.id, reader.login.account.id)
        .await
    {
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
    let login_id = live.id;
    let viewing = match &deps.default_machine {
        Some(default) => Some(
            default
                .opened(&doc, live.account.id, &login, can_write)
                .await,
        ),
        None => None,
    };
    socket::tune(upgrade, ROOM_FRAME_LIMIT).on_upgrade(move |socket| {
        let shutdown = deps.shutdown.clone();
        shutdown.track(run(
            deps,
            socket,
            doc,
            Member {
                login,
                login_id,
                live,
                can_write,
                membership,
                _viewing: viewing,
            },
        ))
    })
}

fn planner_frame(presence: &Presence) -> WsMessage {
    WsMessage::Text(presence.frame().into())
}

/// Who a room socket is.
struct Member {
    login: String,
    login_id: uuid::Uuid,
    live: Arc<LiveLogin>,
    can_write: bool,
    membership: Membership,
    /// Counts as a viewer of the document for Default machine while the socket lives.
    _viewing: Option<crate::default_machine::Viewing>,
}

/// Queues a frame on the socket's outbox; a refused frame (the browser is not reading, or the
/// connection is gone) ends the socket's loop.
macro_rules! push {
    ($out:expr, $frame:expr) => {
        if $out.send($frame).is_err() {
            return;
        }
    };
}

async fn run(deps: RoomDeps, socket: WebSocket, doc: Document, member: Member) {
    let _open = deps.metrics.socket(SocketKind::Room);
    let (mut reader, out) =
        socket::split(socket, &deps.shutdown, socket::WRITE_STALL, &deps.metrics);
    session(&deps, &mut reader, &out, &doc, member).await;
    socket::linger(&mut reader).await;
}

/// The socket's life until it ends (a close is queued, or the browser is gone).
async fn session(
    deps: &RoomDeps,
    reader: &mut SplitStream<WebSocket>,
    out: &Outbox,
    doc: &Document,
    member: Member,
) {
    // A child document has no Chat and no Planner of its own: its room speaks its root's
    // (ISO-25; Planner ownership is the root's).
    let root_id = doc.parent_id.unwrap_or(doc.id);
    let url = match doc.parent_id {
        Some(_) => match deps.children.of_root(doc.id).await {
            Ok((root, child)) => child_url(&root, &child),
            Err(_) => documents::canonical_url(doc),
        },
        None => documents::canonical_url(doc),
    };
    // Subscribe before reading the current state, so no change falls between the two.
    let mut changes = deps.planners.subscribe(root_id);
    let room: &OpenDocument = &member.membership.document;
    let me = member.membership.connection;
    let _titling = TitlingSeat {
        titling: &deps.titling,
        transcript: &deps.transcript,
        document: root_id,
        connection: me,
    };
    let mut relayed = room.subscribe();
    let mut signed_in = deps.sign_ins.watch(member.login_id);
    let mut chat_feed = deps.transcript.subscribe(root_id);
    let mut cards = deps.runs.subscribe(root_id);
    let mut comment_feed = deps.comments.subscribe(doc.id);
    let mut model_changes = deps.models.subscribe();
    let mut drafting = deps.drafts.subscribe();
    let mut implementation = deps.graphs.subscribe();
    let place = chat::Place {
        document: doc.id,
        url: url.clone(),
        focus: None,
    };
    let mut sender = chat::Sender {
        login: member.login.clone(),
        can_write: member.can_write,
        owner: Some(member.live.as_holder()),
        session: Some(member.live.clone()),
    };
    let mut hello = json!({
        "type": "session:hello",
        "document": document_json(doc),
        "url": url,
        "login": member.login,
        "canWrite": member.can_write,
        "attachments": deps.attachments.json(),
    });
    if let Some(transcription) = &deps.transcription {
        hello["transcription"] = transcription.clone();
    }
    // LIFE-69: the editing lock on every join, Build view open or not.
    hello["implementationLock"] = match deps.graphs.lock_json(doc.id).await {
        Ok(lock) => lock,
        Err(e) => {
            tracing::warn!(error = %e, "room: the editing lock could not be read");
            Value::Null
        }
    };
    push!(out, WsMessage::Text(hello.to_string().into()));
    let presence = deps.planners.presence(root_id);
    // Whether this socket was last told the Planner is disconnected: live run cards carry a
    // marker then (ATM-34), so a change of it tells the live cards again.
    let mut disconnected = presence.state == PresenceState::Disconnected;
    // This socket's Stop or Resume being answered, if one is.
    let mut controlling: Option<tokio::task::JoinHandle<()>> = None;
    if deps.presence {
        push!(out, planner_frame(&presence));
    }
    // The model state, to writers only (MOD-30, RULINGS MOD-31): sent on join and whenever it
    // changes, and an unreadable choice after it (MOD-33).
    let mut model_told = ModelTold::default();
    for frame in model_told.frames(deps, root_id, sender.can_write).await {
        push!(out, frame);
    }
    // Yjs sync: the server's step 1 (its state vector); the client answers with step 2 and its
    // own step 1.
    for frame in yjs::greeting(room).await {
        push!(out, WsMessage::Binary(frame.into()));
    }
    let stopping = deps.shutdown.stopping();
    let writer_ended = out.ended();
    let mut liveness = Liveness::new();
    let mut rechecks = Rechecks::every(deps.access_recheck_ms);
    tokio::pin!(stopping, writer_ended);
    loop {
        tokio::select! {
            () = &mut stopping => {
                let _ = out.close(GOING_AWAY, "going-away");
                return;
            }
            () = room.archived() => {
                let _ = out.send(error_frame(ARCHIVED.0, ARCHIVED.1));
                let _ = out.close(4404, ARCHIVED.0);
                return;
            }
            () = room.moved() => {
                let _ = out.close(TRY_AGAIN_LATER, "served-elsewhere");
                return;
            }
            () = rechecks.tick() => match deps.access.recheck_reader(&member.live, doc).await {
                Recheck::Reader { can_write } if can_write != sender.can_write => {
                    sender.can_write = can_write;
                    push!(out, json_frame(&json!({ "type": "session:access", "canWrite": can_write })));
                    for frame in model_told.frames(deps, root_id, can_write).await {
                        push!(out, frame);
                    }
                }
                Recheck::Reader { .. } | Recheck::Unanswered => {}
                Recheck::Archived => {
                    let _ = out.send(error_frame(ARCHIVED.0, ARCHIVED.1));
                    let _ = out.close(4404, ARCHIVED.0);
                    return;
                }
                Recheck::SignInGone => {
                    let _ = out.send(error_frame("sign-in-required", "GitHub no longer accepts your sign-in; sign in again to open this document."));
                    let _ = out.close(4401, "sign-in-required");
                    return;
                }
                Recheck::Revoked(why) => {
                    tracing::info!(login = %member.login, document = %doc.id, "a room socket's access is gone; closing it");
                    let _ = out.send(error_frame("access-revoked", &why));
                    let _ = out.close(4403, "access-revoked");
                    return;
                }
            },
            // The writer ended: the connection failed, or the browser read nothing for the
            // write bound (a slow consumer).
            () = &mut writer_ended => return,
            () = liveness.tick() => match liveness.due() {
                Due::Ping => push!(out, WsMessage::Ping(Default::default())),
                Due::Silent => {
                    tracing::info!(login = %member.login, "a room socket answered nothing for {} s; closing it", SILENCE_BOUND.as_secs());
                    return;
                }
            },
            () = signed_in.ended() => {
                let _ = out.send(error_frame("sign-in-required", "You signed out (or your sign-in expired); sign in again to open this document."));
                let _ = out.close(4401, "sign-in-required");
                return;
            }
            relay = relayed.recv() => match relay {
                Ok(relay) if relay.unsaved_for(me) => {
                    // This socket's changes could not be saved: the client reconnects and
                    // sends them again in its sync.
                    let _ = out.send(error_frame("not-saved", yjs::NOT_SAVED));
                    let _ = out.close(1011, "not-saved");
                    return;
                }
                Ok(relay) if relay.from == me || relay.unsaved.is_some() => {}
                Ok(relay) => push!(out, WsMessage::Binary(relay.frame)),
                Err(RecvError::Lagged(_)) => {
                    // Fell too far behind to catch up frame by frame: the client resyncs.
                    let _ = out.send(error_frame("resync", "This connection fell behind; reconnect to sync again."));
                    return;
                }
                Err(RecvError::Closed) => return,
            },
            changed = cards.recv() => match changed {
                Ok(changed) => push!(out, shared_text(changed.frame)),
                // Fell behind: every card again.
                // Fell behind: the cards are read again over HTTP (`GET …/runs`).
                Err(RecvError::Lagged(_)) => push!(out, json_frame(&json!({ "type": "runs:lagged" }))),
                Err(RecvError::Closed) => return,
            },
            change = changes.recv() => {
                match change {
                    Ok(frame) if deps.presence => push!(out, shared_text(frame)),
                    Ok(_) => {}
                    // Fell behind: the latest state is what matters.
                    Err(RecvError::Lagged(_)) if deps.presence => push!(out, planner_frame(&deps.planners.presence(root_id))),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
                // A client that attached or left brings or takes its catalog (only a remote
                // Planner has a presence, and only its catalog moves with it).
                if deps.presence {
                    for frame in model_told.frames(deps, root_id, sender.can_write).await {
                        push!(out, frame);
                    }
                }
                let now = deps.planners.presence(root_id).state == PresenceState::Disconnected;
                if now != disconnected {
                    disconnected = now;
                    match deps.runs.live_card_frames(root_id).await {
                        Ok(frames) => {
                            for frame in frames {
                                push!(out, shared_text(frame));
                            }
                        }
                        // The cards are read again over HTTP (`GET …/runs`).
                        Err(e) => {
                            tracing::warn!(error = %e, "room: the live run cards could not be read");
                            push!(out, json_frame(&json!({ "type": "runs:lagged" })));
                        }
                    }
                }
            },
            changed = comment_feed.recv() => match changed {
                Ok(frame) => push!(out, shared_text(frame)),
                // Fell behind: the threads are listed again (`comment:list`).
                Err(RecvError::Lagged(_)) => push!(out, json_frame(&json!({ "type": "comment:lagged" }))),
                Err(RecvError::Closed) => return,
            },
            told = implementation.recv() => match told {
                Ok((about, frame)) if about == doc.id => push!(out, json_frame(&frame)),
                Ok(_) => {}
                // Fell behind: the Build view reads its snapshot again.
                Err(RecvError::Lagged(_)) => push!(out, json_frame(&json!({ "type": "plan:implementation", "lagged": true }))),
                Err(RecvError::Closed) => return,
            },
            told = drafting.recv() => match told {
                Ok((about, frame)) if about == doc.id => push!(out, json_frame(&frame)),
                // Not this room's, or fell behind: the Build view's snapshot says where things are.
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            changed = model_changes.recv() => match changed {
                Ok(doc) if doc != root_id => {}
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    for frame in model_told.frames(deps, root_id, sender.can_write).await {
                        push!(out, frame);
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
                            let _ = out.send(error_frame("resync", "This connection fell behind; reconnect to sync again."));
                            return;
                        }
                    },
                    FeedEvent::Closed => return,
                };
                for m in said {
                    push!(out, shared_text(m.frame_bytes()));
                }
            },
            incoming = reader.next() => {
                let message = match incoming {
                    Some(Ok(message)) => message,
                    Some(Err(error)) => {
                        // A frame the socket will not read: say which, then close with its code.
                        if let Some(unreadable) = socket::Unreadable::of(error) {
                            let (code, words) = match &unreadable {
                                socket::Unreadable::TooLarge { bytes } => ("frame-too-large", format!("A room frame is at most {ROOM_FRAME_LIMIT} bytes; this one declared {bytes}.")),
                                socket::Unreadable::NotUtf8 { .. } => ("malformed", "A text frame must be UTF-8.".to_owned()),
                            };
                            tracing::info!(login = %member.login, code, "room: a frame it will not read; closing");
                            let _ = out.send(error_frame(code, &words));
                            let _ = out.close(unreadable.close_code(), code);
                        }
                        return;
                    }
                    None => return,
                };
                liveness.heard();
                match message {
                    WsMessage::Text(text) => {
                        let value = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
                        let kind = value.get("type").and_then(Value::as_str);
                        let reply = match kind {
                            Some("chat:wake") if deps.presence => planner_frame(&deps.planners.presence(root_id)),
                            // PRES-06: no presence to tell under an in-server harness.
                            Some("chat:wake") => continue,
                            Some("chat:send") => match chat::SendRequest::from_frame(&value) {
                                // MSG-18: a stopping process says nothing to a message for the Planner.
                                Ok(request) => {
                                    let reply = match chat_place(&deps.children, doc, &place, &request.request_id).await {
                                        Ok(place) => deps.chat.send(&place, &sender, request).await,
                                        Err(refused) => refused,
                                    };
                                    match reply.frame() {
                                        Some(frame) => json_frame(&frame),
                                        None => continue,
                                    }
                                }
                                Err(chat::Malformed(why)) => error_frame("malformed", &why),
                            },
                            Some("chat:history") => match HistoryQuery::from_frame(&value) {
                                Ok(query) => match deps.transcript.history(root_id, &query).await {
                                    Ok(page) => json_frame(&page.frame()),
                                    Err(e) => {
                                        tracing::error!(error = %e, "room: Chat history could not be read");
                                        error_frame("storage-unavailable", "Chat history could not be read; try again shortly.")
                                    }
                                },
                                Err(chat::Malformed(why)) => error_frame("malformed", &why),
                            },
                            // Stop and Resume wait on the Planner's client (up to 10 s): they
                            // are answered beside the loop, which goes on serving the socket.
                            Some(kind @ ("planner:stop" | "planner:resume")) if sender.can_write => {
                                // One at a time per socket, and within the server's cap on
                                // sends in flight (MSG-20): a Stop or Resume may post to Chat.
                                let busy = controlling.as_ref().is_some_and(|c| !c.is_finished());
                                match (busy, deps.chat.try_admit()) {
                                    (false, Some(admitted)) => {
                                        let control = if kind == "planner:stop" { Control::Stop } else { Control::Resume };
                                        let run = value.get("runId").and_then(Value::as_str).map(str::to_owned);
                                        let (deps2, out2, doc2, login) = (deps.clone(), out.clone(), doc.clone(), sender.login.clone());
                                        controlling = Some(deps.shutdown.spawn(async move {
                                            let _admitted = admitted;
                                            let frame = stop_or_resume(&deps2, &doc2, root_id, run.as_deref(), control, &login).await;
                                            let _ = out2.send(frame);
                                        }));
                                        continue;
                                    }
                                    (true, _) => error_frame(
                                        "temporarily-unavailable",
                                        "A Stop or Resume you sent is still being answered; send this one again once it is.",
                                    ),
                                    (false, None) => error_frame(
                                        "temporarily-unavailable",
                                        "The server is answering as many requests as it takes at once; send it again shortly.",
                                    ),
                                }
                            }
                            Some("chat:model") => match Choose::from_frame(&value) {
                                Ok(choose) => match deps.models.choose(doc, &sender.login, sender.can_write, choose).await {
                                    Ok(view) => model_told.sent(view.frame().to_string()),
                                    Err(refused) => json_frame(&refused.frame()),
                                },
                                Err(refused) => json_frame(&refused.frame()),
                            },
                            // OWN-15: the person has the title field open or the caret in the
                            // heading (`active`), and whether they typed in either (`typed`).
                            Some("plan:titling") if sender.can_write => {
                                let active = value.get("active").and_then(Value::as_bool);
                                let typed = value.get("typed").and_then(Value::as_bool).unwrap_or(false);
                                match active {
                                    Some(active) => {
                                        deps.titling.said(root_id, me, active, typed, deps.transcript.now_ms());
                                        continue;
                                    }
                                    None => error_frame("malformed", "plan:titling carries a boolean \"active\" (and optionally \"typed\")"),
                                }
                            }
                            Some("plan:titling") => continue,
                            Some(kind @ ("comment:start" | "comment:reply" | "comment:resolve" | "comment:list")) => {
                                match crate::comments::Request::from_frame(kind, &value) {
                                    Ok(request) => match comment_frame(deps, doc, &place, &sender, request).await {
                                        Some(frame) => frame,
                                        None => continue,
                                    },
                                    Err(malformed) => json_frame(&malformed.frame(&value)),
                                }
                            }
                            Some("implementation:draft") => match value.get("requestId").and_then(Value::as_str) {
                                Some(request_id) if !request_id.is_empty() && request_id.chars().count() <= chat::REQUEST_ID_MAX_CHARS => {
                                    json_frame(&deps.drafts.press(doc, &place, &sender, request_id).await)
                                }
                                _ => error_frame("malformed", "implementation:draft carries a \"requestId\" (1 to 100 characters)"),
                            },
                            Some(kind @ ("decision:answer" | "decision:cancel")) => {
                                decision_frame(deps, doc, &sender, kind, &value).await
                            }
                            Some("planner:stop" | "planner:resume") => error_frame(
                                "read-only",
                                "Stopping or resuming chopin needs push access to this document's repository.",
                            ),
                            Some(other) => error_frame("unknown-type", &format!("unknown message type {other:?}")),
                            None => error_frame("malformed", "a room message is a JSON object with a string \"type\""),
                        };
                        push!(out, reply);
                    }
                    WsMessage::Binary(bytes) => {
                        match yjs::frame(&member.membership, sender.can_write, &bytes).await {
                            yjs::Answer::None => {}
                            yjs::Answer::Binary(reply) => push!(out, WsMessage::Binary(reply.into())),
                            yjs::Answer::Frames(replies) => {
                                for reply in replies {
                                    push!(out, WsMessage::Binary(reply.into()));
                                }
                            }
                            yjs::Answer::Refused { code, message } => push!(out, error_frame(code, &message)),
                        }
                    }
                    WsMessage::Close(_) => {
                        // Answer the close so the browser's handshake completes.
                        let _ = out.send(WsMessage::Close(None));
                        return;
                    }
                    WsMessage::Ping(_) | WsMessage::Pong(_) => {}
                }
            }
        }
    }
}

/// What one socket was last told of its document's model state, so a change is sent once and
/// a socket that lost write access is told nothing more.
#[derive(Default)]
struct ModelTold {
    /// The last `chat:model` frame sent, as text.
    last: Option<String>,
    /// Whether it was last told the choice is unreadable.
    unreadable: bool,
}

impl ModelTold {
    /// The frames this socket is owed now: `chat:model` if it changed, `chat:model-unreadable`
    /// if that changed. None for a reader (MOD-30).
    async fn frames(
        &mut self,
        deps: &RoomDeps,
        root_id: uuid::Uuid,
        can_write: bool,
    ) -> Vec<WsMessage> {
        if !can_write {
            *self = ModelTold::default();
            return Vec::new();
        }
        let mut frames = Vec::new();
        match deps.models.view(root_id).await {
            Ok(view) => {
                let frame = view.frame().to_string();
                if self.last.as_deref() != Some(frame.as_str()) {
                    frames.push(self.sent(frame));
                }
            }
            // The next change, or the next socket, tries again; a turn says it in Chat.
            Err(e) => {
                tracing::warn!(document = %root_id, error = %e, "room: the model state could not be read")
            }
        }
        let unreadable = deps.models.unreadable(root_id);
        if unreadable != self.unreadable {
            self.unreadable = unreadable;
            frames.push(json_frame(
                &json!({ "type": "chat:model-unreadable", "unreadable": unreadable }),
            ));
        }
        frames
    }

    /// `frame` goes to the socket: remembered, and the message that carries it.
    fn sent(&mut self, text: String) -> WsMessage {
        self.last = Some(text.clone());
        WsMessage::Text(text.into())
    }
}

/// A writer's Stop or Resume (`runId` names one run): the answer frame, once the Planner's
/// client answered or the wait ran out.
async fn stop_or_resume(
    deps: &RoomDeps,
    doc: &Document,
    root_id: uuid::Uuid,
    run: Option<&str>,
    control: Control,
    login: &str,
) -> WsMessage {
    match control {
        Control::Resume => {
            let resumed = deps
                .runs
                .control(root_id, run, Control::Resume, login)
                .await;
            json_frame(&json!({ "type": "planner:resumed", "resumed": resumed }))
        }
        Control::Stop => {
            let stopped = run.is_none()
                && deps
                    .turns
                    .stop(root_id, &format!("@{login} stopped chopin."));
            // Stop Planner also pauses the live runs (or the one named), resumably (SES-04).
            let paused = deps.runs.control(root_id, run, Control::Stop, login).await;
            // A Planner that waits on a question is stopped by withdrawing it (ATM-36); a run's
            // question is set aside as its run pauses instead (SES-05).
            let withdrawn = if run.is_none() {
                let why = format!("@{login} stopped the Planner.");
                let url = documents::canonical_url(doc);
                deps.questions
                    .withdraw(root_id, &url, Scope::OutsideRuns, &why)
                    .await
            } else {
                0
            };
            if withdrawn > 0 && paused == 0 {
                // A Stop that withdrew the last thing a disconnected Planner's hold kept ends
                // the hold; the grace period runs as for a detach (AO-12).
                deps.turns.release_idle_kept(root_id).await;
                if deps.turns.kept_session(root_id).is_none() {
                    deps.planners.hold_emptied(root_id).await;
                }
            }
            json_frame(
                &json!({ "type": "planner:stopped", "stopped": stopped || paused > 0 || withdrawn > 0 }),
            )
        }
    }
}

/// Where a `chat:send` from this room goes: a root's own Chat, or — for a child, whose root is
/// asked again now (ISO-25) — its root's, with the child as the focus. A child that no longer
/// names a live root in its repository has no Chat to send to: refused, nothing saved.
pub(super) async fn chat_place(
    children: &Children,
    doc: &Document,
    own: &chat::Place,
    request_id: &str,
) -> Result<chat::Place, chat::SendReply> {
    if doc.parent_id.is_none() {
        return Ok(own.clone());
    }
    match children.of_root(doc.id).await {
        Ok((root, child)) => Ok(chat::Place {
            document: root.id,
            url: documents::canonical_url(&root),
            focus: Some(Focus {
                document: child.id,
                url: child_url(&root, &child),
            }),
        }),
        Err(ChildError::Storage) => Err(chat::SendReply::refused(
            request_id,
            "storage-unavailable",
            "Your message could not be sent just now; send it again in a moment.",
        )),
        Err(_) => Err(chat::SendReply::refused(
            request_id,
            "document-not-found",
            "This document no longer belongs to a live root document, whose Chat a child's messages go to, so your message wasn't sent.",
        )),
    }
}

/// The refusal of a note to the Planner from a child that no longer belongs to a live root in
/// its repository (ISO-28).
const CHILD_GONE_COMMENT_WORDS: &str = "This document no longer belongs to a live root document, whose Chat takes a child's comments to chopin, so your comment wasn't saved.";

/// The `comment:*` frames: a note to the room is saved at once; a note sent to the Planner
/// (`to: "planner"`, ISO-17) goes through the root's Chat ([`Chat::comment`]), from a child
/// only once storage says again it belongs to a live root (ISO-28). `None`: no answer (the
/// process is stopping, MSG-18).
async fn comment_frame(
    deps: &RoomDeps,
    doc: &Document,
    place: &chat::Place,
    sender: &chat::Sender,
    request: crate::comments::Request,
) -> Option<WsMessage> {
    use crate::comments::{Refusal, Request, READ_ONLY_WORDS};
    let comments = &deps.comments;
    let id = request.request_id().to_owned();
    let answer = |result: Result<Value, Refusal>| {
        Some(json_frame(&match result {
            Ok(frame) => frame,
            Err(refusal) => refusal.frame(&id),
        }))
    };
    if let Request::List { request_id } = &request {
        return answer(comments.list(doc.id, request_id).await);
    }
    if !sender.can_write {
        return answer(Err(Refusal::new("read-only", READ_ONLY_WORDS)));
    }
    // Sent again after a lost answer: the first answer, nothing saved twice, whichever process
    // the first one reached.
    let claim = match comments.claim(&sender.login, doc.id, &id).await {
        Ok(Kept::Answered { answer: first, .. }) => {
            return match serde_json::from_str::<Value>(&first) {
                Ok(first) => Some(json_frame(&first)),
                Err(e) => {
                    tracing::error!(error = %e, "a kept comment answer cannot be read");
                    answer(Err(Refusal::new(
                        "not-saved",
                        crate::comments::NOT_SAVED_WORDS,
                    )))
                }
            };
        }
        Ok(Kept::Go(claim)) => claim,
        Err(refusal) => return answer(Err(refusal)),
    };
    // A thread started without an id gets one from the claim, so a retry that takes over the
    // claim of a call that died finds the thread that call started.
    let new_thread = claim.made_id();
    let taken_over = claim.taken_over_since();
    let frame = comment_write(
        deps, doc, place, sender, request, &id, new_thread, taken_over,
    )
    .await;
    match &frame {
        Some(frame) if frame["type"] == "comment:ack" => claim.answer(&frame.to_string()).await,
        _ => claim.release().await,
    }
    frame.map(|frame| json_frame(&frame))
}

/// A `comment:*` frame that writes, processed under its request id's claim: the frame to
/// answer with (`None`: none, the process is stopping). `taken_over`: when the claim was made,
/// if it was an earlier call's that never answered (see [`Comments::reply_claimed`]).
///
/// [`Comments::reply_claimed`]: crate::comments::Comments::reply_claimed
#[allow(clippy::too_many_arguments)]
async fn comment_write(
    deps: &RoomDeps,
    doc: &Document,
    place: &chat::Place,
    sender: &chat::Sender,
    request: crate::comments::Request,
    id: &str,
    new_thread: uuid::Uuid,
    taken_over: Option<i64>,
) -> Option<Value> {
    use crate::comments::{Refusal, Request};
    let comments = &deps.comments;
    let answer = |result: Result<Value, Refusal>| {
        Some(match result {
            Ok(frame) => frame,
            Err(refusal) => refusal.frame(id),
        })
    };
    if request.to_planner() {
        let admitted = match chat_place(&deps.children, doc, place, id).await {
            Ok(place) => place,
            // ISO-28: refused before anything is saved.
            Err(refused) => {
                return answer(Err(match refused.code() {
                    Some("storage-unavailable") => Refusal::new(
                        "storage-unavailable",
                        "Your comment could not be sent just now; send it again in a moment.",
                    ),
                    _ => Refusal::new("document-not-found", CHILD_GONE_COMMENT_WORDS),
                }))
            }
        };
        let (thread, start_quote, text) = match request {
            Request::Start {
                thread,
                quote,
                text,
                ..
            } => (thread.unwrap_or(new_thread), Some(quote), text),
            Request::Reply { thread, text, .. } => (thread, None, text),
            Request::Resolve { .. } | Request::List { .. } => unreachable!("not a note"),
        };
        let note = chat::PlannerComment {
            request_id: id.to_owned(),
            document: doc.id,
            thread,
            start_quote,
            text,
            taken_over,
        };
        return deps
            .chat
            .comment(&admitted, sender, note, comments)
            .await
            .frame(id);
    }
    let saved = match request {
        Request::Start {
            thread,
            quote,
            text,
            ..
        } => {
            let thread = thread.unwrap_or(new_thread);
            comments
                .start(doc.id, &sender.login, thread, &quote, &text, false)
                .await
        }
        Request::Reply { thread, text, .. } => {
            comments
                .reply_claimed(doc.id, thread, &sender.login, &text, false, taken_over)
                .await
        }
        Request::Resolve { thread, .. } => {
            return match comments.resolve(doc.id, thread, &sender.login).await {
                Ok(thread) => Some(json!({
                    "type": "comment:ack",
                    "requestId": id,
                    "thread": crate::comments::thread_json(&thread),
                })),
                Err(refusal) => answer(Err(refusal)),
            };
        }
        Request::List { .. } => unreachable!("answered above"),
    };
    match saved {
        Ok(saved) => Some(saved.ack(id)),
        Err(refusal) => answer(Err(refusal)),
    }
}

/// `decision:answer` and `decision:cancel`: a writer answers a Decision of this document, or
/// cancels the Planner's question it belongs to. Answered with `decision:answered` /
/// `decision:cancelled`, or `decision:refused` with a code.
async fn decision_frame(
    deps: &RoomDeps,
    doc: &Document,
    sender: &chat::Sender,
    kind: &str,
    value: &Value,
) -> WsMessage {
    let request_id = value.get("requestId").and_then(Value::as_str);
    let decision = value.get("decision").and_then(Value::as_str);
    let (Some(request_id), Some(decision)) = (request_id, decision) else {
        return error_frame(
            "malformed",
            &format!("{kind} needs a string \"requestId\" and a string \"decision\""),
        );
    };
    let refused = |code: &str, message: &str| {
        json_frame(
            &json!({ "type": "decision:refused", "requestId": request_id, "decision": decision, "code": code, "message": message }),
        )
    };
    if !sender.can_write {
        return refused(
            "read-only",
            "Answering a Decision needs push access to this document's repository.",
        );
    }
    let reference = chopin_document::DocumentRef {
        id: doc.id.to_string(),
        url: documents::canonical_url(doc),
    };
    let outcome = if kind == "decision:cancel" {
        deps.questions
            .cancel(&reference, doc.id, decision, &sender.login)
            .await
            .map(|()| "decision:cancelled")
    } else {
        let given = match (value.get("options"), value.get("text")) {
            (Some(options), None) => match serde_json::from_value::<Vec<usize>>(options.clone()) {
                Ok(options) => Given::Options(options),
                Err(_) => return refused("invalid-answer", "\"options\" is a list of option indices, counted from 0."),
            },
            (None, Some(Value::String(text))) => Given::Text(text.clone()),
            _ => return refused("invalid-answer", "An answer carries either \"options\" (indices, counted from 0) or \"text\" (a string, which may be empty)."),
        };
        let answered = deps
            .questions
            .answer(&reference, doc.id, decision, &sender.login, given)
            .await;
        if let Ok(saved) = &answered {
            // COA-15: the passage's update is stored before anyone is answered.
            if let Some(anchored) = &saved.anchored {
                deps.prose.saved(doc.id, anchored).await;
            }
            // Nothing waits on it (a card opened without waiting, COA-20, or a question asked
            // before a restart, HO-15): a Planner turn takes it.
            if let Some(words) = &saved.handed {
                deps.turns
                    .hand_answer(doc.id, &reference.url, &sender.login, words)
                    .await;
            }
        }
        answered.map(|_| "decision:answered")
    };
    // A session kept only for the question just settled is let go.
    deps.turns.release_idle_kept(doc.id).await;
    match outcome {
        Ok(kind) => {
            json_frame(&json!({ "type": kind, "requestId": request_id, "decision": decision }))
        }
        Err(e) => refused(e.code(), &e.to_string()),
    }
}

/// A text frame encoded once for the whole room: every socket sends the same bytes.
fn shared_text(json: bytes::Bytes) -> WsMessage {
    match Utf8Bytes::try_from(json) {
        Ok(text) => WsMessage::Text(text),
        // Made from a `String`, so never; said rather than sent broken.
        Err(_) => error_frame("internal", "A frame could not be sent."),
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
