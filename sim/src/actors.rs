//! Scripted actors of a world: browsers that sign in and sit in a document's room, and agent
//! clients that attach to a document's Planner — each on its own simulated host, driven by
//! commands from the test and keeping a log of what it saw with the simulated time.
//!
//! Owns: signing in through the server's real OAuth routes and the fake GitHub host; the agent
//! actor (connect, attach on command — with features, answer pings while reading, detach, close,
//! go silent — and play queued [`TurnScript`]s against the server's `start`/`turn` frames, logging
//! every server frame it receives and every frame it sends); the browser actor (room socket,
//! every JSON message it hears, `chat:send`, any other JSON or binary frame, and leaving on
//! command). Does not own: the wire clients themselves (`chopin_fixtures::agent`,
//! `chopin_fixtures::browser`) or the server.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use chopin_fixtures::agent::{self, AgentClient, Event as WireEvent, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::{
    ClientMessage, Feature, FinishPart, FinishReason, HostToolCall, OfferedFeature, Part,
    PartMessage, ServerMessage, Started, TextPart, TurnEnd, TurnStatus,
};
use chopin_server::runtime::connector;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::net::TurmoilConnector;
use crate::world::{Event, Recorder, SimError, World, SERVER_HOST, SERVER_ORIGIN, SERVER_PORT};

/// Simulated milliseconds since the simulation began, read inside a host.
fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

fn server_authority() -> String {
    format!("{SERVER_HOST}:{SERVER_PORT}")
}

/// What an agent actor saw, with the simulated time it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    /// The WebSocket upgrade succeeded.
    Connected { at_ms: u64 },
    /// The upgrade was refused over HTTP.
    UpgradeRefused { at_ms: u64, status: u16 },
    /// The actor sent `attach`.
    AttachSent { at_ms: u64 },
    Attached {
        at_ms: u64,
        login: String,
        generation: i64,
    },
    Refused {
        at_ms: u64,
        reason: String,
        holder: Option<String>,
    },
    /// An `error` frame.
    Error { at_ms: u64, code: String },
    /// The server's close.
    Closed {
        at_ms: u64,
        code: u16,
        reason: String,
    },
    /// Any other server frame (`start`, `turn`, `steer`, `host-tool-result`, `abort`,
    /// `destroy`, …): its `type`, and `detail` — see [`frame_detail`] for what each carries.
    Frame {
        at_ms: u64,
        kind: String,
        detail: String,
    },
    /// A frame a turn script sent (`started`, `host-tool-call`, `part`, `turn-end`), with the
    /// same kind of detail.
    Sent {
        at_ms: u64,
        kind: String,
        detail: String,
    },
    /// A `Drop` step closed the TCP connection without a close frame; the actor has ended.
    Dropped { at_ms: u64 },
    /// Anything else that went wrong on the actor's side.
    Failed { at_ms: u64, what: String },
}

/// One step of a [`TurnScript`]. Steps run in order; a step that waits for the server blocks the
/// ones after it (the actor keeps reading and answering pings meanwhile). Steps that speak in a
/// turn (`HostToolCall`, `Text`, `End`) first wait for the `turn` frame of the session the script
/// started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum TurnStep {
    /// Answer the next unanswered `start` (received before or after) with `started`.
    Started,
    /// Go on in the session the previous script played (a session the server kept after its
    /// turn): the next `turn` of it comes without a `start`.
    KeptSession,
    /// Wait for the `turn` frame of the started session.
    AwaitTurn,
    /// Send `host-tool-call` and wait for its `host-tool-result` (logged as a `Frame`).
    HostToolCall { name: String, input: Value },
    /// Send `host-tool-call` and go on at once, without waiting for its result (which is still
    /// logged when it comes).
    HostToolCallNoWait { name: String, input: Value },
    /// Send a text `part`.
    Text { text: String },
    /// Send a `finish-step` part (finish reason `stop`): the model's step ended.
    FinishStep,
    /// Wait until `count` more `steer` frames have arrived (each is logged as it arrives).
    AwaitSteers { count: usize },
    /// Send `turn-end` with `status`, and `output` (a worker's structured result) if given.
    End {
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
    },
    /// From now on, for the actor's whole life, never answer an `abort` (by default the actor
    /// answers it with `turn-end` `aborted` and drops the rest of the current script).
    IgnoreAbort,
    /// Wait `ms` of simulated time (reading meanwhile).
    Sleep { ms: u64 },
    /// Close the TCP connection without a close frame (drop the client); the actor ends.
    Drop,
    /// Send a `runs` report for the started session: one run, `run-1`, with `status`
    /// (`running`, `waiting`, `paused` keep the session after its turn).
    Runs { status: String },
}

/// A turn as an agent client plays it: steps run in order (see [`TurnStep`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnScript {
    pub steps: Vec<TurnStep>,
}

impl TurnScript {
    pub fn new() -> Self {
        TurnScript::default()
    }

    /// Answer the next `start`.
    pub fn started(mut self) -> Self {
        self.steps.push(TurnStep::Started);
        self
    }

    /// Go on in the previous script's session (see [`TurnStep::KeptSession`]).
    pub fn kept_session(mut self) -> Self {
        self.steps.push(TurnStep::KeptSession);
        self
    }

    pub fn await_turn(mut self) -> Self {
        self.steps.push(TurnStep::AwaitTurn);
        self
    }

    pub fn host_tool_call(mut self, name: &str, input: Value) -> Self {
        self.steps.push(TurnStep::HostToolCall {
            name: name.to_owned(),
            input,
        });
        self
    }

    pub fn host_tool_call_no_wait(mut self, name: &str, input: Value) -> Self {
        self.steps.push(TurnStep::HostToolCallNoWait {
            name: name.to_owned(),
            input,
        });
        self
    }

    pub fn finish_step(mut self) -> Self {
        self.steps.push(TurnStep::FinishStep);
        self
    }

    pub fn text(mut self, text: &str) -> Self {
        self.steps.push(TurnStep::Text {
            text: text.to_owned(),
        });
        self
    }

    pub fn await_steers(mut self, count: usize) -> Self {
        self.steps.push(TurnStep::AwaitSteers { count });
        self
    }

    pub fn end(mut self, status: TurnStatus) -> Self {
        self.steps.push(TurnStep::End {
            status,
            output: None,
        });
        self
    }

    pub fn ignore_abort(mut self) -> Self {
        self.steps.push(TurnStep::IgnoreAbort);
        self
    }

    pub fn sleep(mut self, ms: u64) -> Self {
        self.steps.push(TurnStep::Sleep { ms });
        self
    }

    pub fn drop_link(mut self) -> Self {
        self.steps.push(TurnStep::Drop);
        self
    }

    pub fn runs(mut self, status: &str) -> Self {
        self.steps.push(TurnStep::Runs {
            status: status.to_owned(),
        });
        self
    }
}

/// A command to an agent actor.
#[derive(Debug, Clone)]
enum AgentCommand {
    Attach(String, Vec<String>),
    Script(TurnScript),
    Detach,
    Close,
    /// Stop reading (so no pong is sent) without closing.
    Silence,
    /// Send a text frame exactly as given.
    SendText(String),
    /// Write raw bytes past the WebSocket layer (see `chopin_fixtures::agent::masked_frame`).
    SendRaw(Vec<u8>),
    /// Send `resume` with every session the last `attached` kept (`true`) or none.
    Resume(bool),
}

/// Handle of an agent actor.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    log: Arc<Mutex<Vec<AgentEvent>>>,
    commands: mpsc::UnboundedSender<AgentCommand>,
}

impl Agent {
    fn lock(&self) -> MutexGuard<'_, Vec<AgentEvent>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything the actor saw so far.
    pub fn log(&self) -> Vec<AgentEvent> {
        self.lock().clone()
    }

    /// The last event, if any.
    pub fn last(&self) -> Option<AgentEvent> {
        self.lock().last().cloned()
    }

    /// Sends `attach` (version 1) for `document` at the actor's next turn.
    pub fn attach(&self, document: &str) {
        self.attach_with_features(document, &[]);
    }

    /// Sends `attach` (version 1) for `document` offering `features` by wire name (e.g.
    /// `"steer-turn"`; unknown names are sent as given).
    pub fn attach_with_features(&self, document: &str, features: &[&str]) {
        let _ = self.commands.send(AgentCommand::Attach(
            document.to_owned(),
            features.iter().map(|f| (*f).to_owned()).collect(),
        ));
    }

    /// Queues `script`; it runs after the scripts queued before it have ended.
    pub fn script(&self, script: TurnScript) {
        let _ = self.commands.send(AgentCommand::Script(script));
    }

    /// Every server frame logged as [`AgentEvent::Frame`], as `(at_ms, kind, detail)`.
    pub fn frames(&self) -> Vec<(u64, String, String)> {
        self.lock()
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Frame {
                    at_ms,
                    kind,
                    detail,
                } => Some((*at_ms, kind.clone(), detail.clone())),
                _ => None,
            })
            .collect()
    }

    /// The server frames of `type` `kind`, as `(at_ms, detail)`.
    pub fn frames_of(&self, kind: &str) -> Vec<(u64, String)> {
        self.frames()
            .into_iter()
            .filter(|(_, k, _)| k == kind)
            .map(|(at, _, detail)| (at, detail))
            .collect()
    }

    /// Every frame the actor's scripts sent, as `(at_ms, kind, detail)`.
    pub fn sent(&self) -> Vec<(u64, String, String)> {
        self.lock()
            .iter()
            .filter_map(|e| match e {
                AgentEvent::Sent {
                    at_ms,
                    kind,
                    detail,
                } => Some((*at_ms, kind.clone(), detail.clone())),
                _ => None,
            })
            .collect()
    }

    pub fn detach(&self) {
        let _ = self.commands.send(AgentCommand::Detach);
    }

    pub fn close(&self) {
        let _ = self.commands.send(AgentCommand::Close);
    }

    /// Stops reading: pings go unanswered, nothing is closed.
    pub fn silence(&self) {
        let _ = self.commands.send(AgentCommand::Silence);
    }

    /// Sends a text frame exactly as given (well-formed or not), logged as `Sent` with kind
    /// `text`.
    /// Sends client `resume` naming every session the last `attached` listed in `kept` (`all`),
    /// or none.
    pub fn resume(&self, all: bool) {
        let _ = self.commands.send(AgentCommand::Resume(all));
    }

    pub fn send_text(&self, text: &str) {
        let _ = self.commands.send(AgentCommand::SendText(text.to_owned()));
    }

    /// Writes raw bytes to the connection past the WebSocket layer, logged as `Sent` with kind
    /// `raw`.
    pub fn send_raw(&self, bytes: Vec<u8>) {
        let _ = self.commands.send(AgentCommand::SendRaw(bytes));
    }

    /// The close the actor received, if any.
    pub fn closed(&self) -> Option<(u64, u16, String)> {
        self.lock().iter().find_map(|e| match e {
            AgentEvent::Closed {
                at_ms,
                code,
                reason,
            } => Some((*at_ms, *code, reason.clone())),
            _ => None,
        })
    }

    /// The attach answer, if any: `Ok(generation)` or `Err((reason, holder))`.
    pub fn answer(&self) -> Option<Result<i64, (String, Option<String>)>> {
        self.lock().iter().find_map(|e| match e {
            AgentEvent::Attached { generation, .. } => Some(Ok(*generation)),
            AgentEvent::Refused { reason, holder, .. } => {
                Some(Err((reason.clone(), holder.clone())))
            }
            _ => None,
        })
    }
}

/// What a browser actor heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    pub at_ms: u64,
    pub message: Value,
}

/// A command to a browser actor.
#[derive(Debug, Clone)]
enum BrowserCommand {
    SendChat { request_id: String, text: String },
    SendBinary { frame: Vec<u8> },
    SendJson { frame: Value },
    Leave,
}

/// Handle of a browser actor in a room.
#[derive(Clone)]
pub struct Browser {
    pub name: String,
    log: Arc<Mutex<Vec<Heard>>>,
    /// When and how the socket ended: the server's close code and reason, or 1006 when the
    /// connection went away without a close frame.
    closed: Arc<Mutex<Option<(u64, u16, String)>>>,
    commands: mpsc::UnboundedSender<BrowserCommand>,
    /// Every binary frame heard, in order.
    binary: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Browser {
    /// The binary (y-protocols) frames heard so far, in order.
    pub fn binary_heard(&self) -> Vec<Vec<u8>> {
        self.binary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends `{"type":"chat:send","requestId","text"}` on the room socket at the actor's next
    /// turn; the answer (`chat:ack` / `chat:refused`) is heard like everything else.
    pub fn send_chat(&self, request_id: &str, text: &str) {
        let _ = self.commands.send(BrowserCommand::SendChat {
            request_id: request_id.to_owned(),
            text: text.to_owned(),
        });
    }

    /// Sends a binary (y-protocols) frame on the room socket at the actor's next turn: a Yjs
    /// update or an awareness update.
    pub fn send_binary(&self, frame: Vec<u8>) {
        let _ = self.commands.send(BrowserCommand::SendBinary { frame });
    }

    /// Sends `frame` as a JSON text frame on the room socket at the actor's next turn: any room
    /// message (`chat:history`, `chat:wake`, …), heard back like everything else. The socket
    /// answers frames in the order they came, so the answer to a request sent after a Yjs
    /// update also says that update was taken (or refused: the `error` comes first).
    pub fn send_json(&self, frame: Value) {
        let _ = self.commands.send(BrowserCommand::SendJson { frame });
    }

    /// Leaves the room as a closed tab does (close 1000) at the actor's next turn.
    pub fn leave(&self) {
        let _ = self.commands.send(BrowserCommand::Leave);
    }

    /// The answers (`chat:ack` or `chat:refused`) heard for `request_id`, in order.
    pub fn replies(&self, request_id: &str) -> Vec<Heard> {
        self.heard()
            .into_iter()
            .filter(|h| {
                (h.message["type"] == "chat:ack" || h.message["type"] == "chat:refused")
                    && h.message["requestId"] == request_id
            })
            .collect()
    }

    /// The `chat:message` frames heard, in order.
    pub fn chat_messages(&self) -> Vec<Heard> {
        self.heard()
            .into_iter()
            .filter(|h| h.message["type"] == "chat:message")
            .collect()
    }

    /// Every JSON message heard so far.
    pub fn heard(&self) -> Vec<Heard> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// When and how the room socket ended (1006 without a close frame), once it has.
    pub fn closed(&self) -> Option<(u64, u16, String)> {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The `planner` objects of every `session:planner` heard, in order.
    pub fn planner_states(&self) -> Vec<(u64, Value)> {
        self.heard()
            .into_iter()
            .filter(|h| h.message["type"] == "session:planner")
            .map(|h| (h.at_ms, h.message["planner"].clone()))
            .collect()
    }
}

impl World {
    /// Signs `login` in through the server's OAuth web flow (the fake GitHub approving it as its
    /// browser user) on a client host of its own; returns the session's `Cookie` header value.
    pub fn sign_in(&mut self, login: &str) -> Result<String, SimError> {
        self.github().set_browser_user(login);
        let cookie = Arc::new(Mutex::new(None::<Result<String, String>>));
        let out = cookie.clone();
        let host = format!("sign-in-{login}-{}", self.now_ms());
        self.run_client(&host, async move {
            let result = sign_in_flow().await;
            *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            Ok(())
        })?;
        let result = cookie.lock().unwrap_or_else(|e| e.into_inner()).take();
        match result {
            Some(Ok(cookie)) => Ok(cookie),
            Some(Err(what)) => Err(SimError::Host {
                at_ms: self.now_ms(),
                error: format!("sign-in of @{login} failed: {what}"),
                trace: Box::new(self.trace()),
            }),
            None => Err(SimError::Host {
                at_ms: self.now_ms(),
                error: format!("sign-in of @{login} did not finish"),
                trace: Box::new(self.trace()),
            }),
        }
    }

    /// Starts an agent actor `name` with bearer `token`: it connects and upgrades at once, then
    /// waits for commands ([`Agent::attach`], …).
    pub fn agent(&mut self, name: &str, token: &str) -> Agent {
        let (commands, rx) = mpsc::unbounded_channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let agent = Agent {
            name: name.to_owned(),
            log: log.clone(),
            commands,
        };
        let (recorder, token, host) = (self.recorder(), token.to_owned(), name.to_owned());
        self.spawn(name, async move {
            run_agent(host, token, rx, log, recorder).await;
            Ok(())
        });
        agent
    }

    /// An agent actor `name` with bearer `token`, connected and attached to `document` with
    /// `features`: returns once the attach is answered (either way; see [`Agent::answer`]).
    pub fn attached_agent(
        &mut self,
        name: &str,
        token: &str,
        document: &str,
        features: &[&str],
    ) -> Agent {
        let agent = self.agent(name, token);
        let a = agent.clone();
        self.until(5_000, "agent connected", move || {
            a.log()
                .iter()
                .any(|e| matches!(e, AgentEvent::Connected { .. }))
        });
        agent.attach_with_features(document, features);
        let a = agent.clone();
        self.until(5_000, "attach answered", move || a.answer().is_some());
        agent
    }

    /// Starts a browser actor `name` in the room of document `document_id`, signed in with
    /// `cookie`; it records every JSON message it hears.
    pub fn browser(&mut self, name: &str, cookie: &str, document_id: &str) -> Browser {
        self.browser_at(name, cookie, &format!("/api/documents/{document_id}/room"))
    }

    /// A browser actor on the socket at `path` (the room, or the y-websocket endpoint
    /// `/api/yjs/{id}`, whose frames are all binary).
    pub fn browser_at(&mut self, name: &str, cookie: &str, path: &str) -> Browser {
        self.browser_on(name, SERVER_HOST, cookie, path)
    }

    /// A browser actor on the socket at `path` of server host `server` (one of several
    /// processes on one store).
    pub fn browser_on(&mut self, name: &str, server: &str, cookie: &str, path: &str) -> Browser {
        self.browser_dialing(name, server, cookie, path, false)
    }

    /// A browser tab on the socket at `path` of host `host` (a server or a balancer) that may
    /// find nobody there: a connection refused, an upgrade refused with any status, or a stream
    /// cut during the upgrade ends the tab closed (1006, with why) instead of failing the world,
    /// as a browser's failed WebSocket does.
    pub fn tab_on(&mut self, name: &str, host: &str, cookie: &str, path: &str) -> Browser {
        self.browser_dialing(name, host, cookie, path, true)
    }

    fn browser_dialing(
        &mut self,
        name: &str,
        server: &str,
        cookie: &str,
        path: &str,
        may_fail: bool,
    ) -> Browser {
        let log = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(Mutex::new(None));
        let (commands, mut rx) = mpsc::unbounded_channel();
        let binary = Arc::new(Mutex::new(Vec::new()));
        let browser = Browser {
            name: name.to_owned(),
            log: log.clone(),
            closed: closed.clone(),
            commands,
            binary: binary.clone(),
        };
        let (path, server) = (path.to_owned(), server.to_owned());
        let (cookie, recorder, host) = (cookie.to_owned(), self.recorder(), name.to_owned());
        self.spawn(name, async move {
            let ended = |why: String| {
                recorder.record_in_host(&host, Event::Actor { what: format!("refused: {why}") });
                *closed.lock().unwrap_or_else(|e| e.into_inner()) = Some((now_ms(), 1006, why));
            };
            let stream = match turmoil::net::TcpStream::connect((server.as_str(), SERVER_PORT)).await
            {
                Ok(stream) => stream,
                Err(e) if may_fail => {
                    ended(format!("connect: {e}"));
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            let mut socket = match BrowserSocket::connect(
                stream,
                &server_authority(),
                &path,
                Some(&cookie),
                Some(SERVER_ORIGIN),
            )
            .await
            {
                Ok(socket) => socket,
                // Refused at the upgrade by another process serving the document: the tab
                // ends, closed without a socket (as a browser's failed WebSocket does).
                Err(e) if e.to_string().contains("served-elsewhere") => {
                    recorder.record_in_host(&host, Event::Actor { what: format!("refused: {e}") });
                    *closed.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((now_ms(), 1006, "served-elsewhere".to_owned()));
                    return Ok(());
                }
                Err(e) if may_fail => {
                    ended(e.to_string());
                    return Ok(());
                }
                Err(e) => return Err(format!("room connect: {e}").into()),
            };
            let mut commanded = true;
            loop {
                tokio::select! {
                    command = rx.recv(), if commanded => match command {
                        None => commanded = false,
                        Some(BrowserCommand::SendChat { request_id, text }) => {
                            let frame = json!({
                                "type": "chat:send",
                                "requestId": request_id,
                                "text": text,
                            });
                            recorder.record_in_host(
                                &host,
                                Event::Actor {
                                    what: format!("sent {}", sorted_keys(&frame)),
                                },
                            );
                            if socket.send_json(&frame).await.is_err() {
                                return Ok(());
                            }
                        }
                        Some(BrowserCommand::SendJson { frame }) => {
                            recorder.record_in_host(&host, Event::Actor { what: format!("sent {}", sorted_keys(&frame)) });
                            if socket.send_json(&frame).await.is_err() {
                                return Ok(());
                            }
                        }
                        Some(BrowserCommand::SendBinary { frame }) => {
                            recorder.record_in_host(&host, Event::Actor { what: format!("sent binary {}", digest(&frame)) });
                            if socket.send_binary(frame).await.is_err() {
                                return Ok(());
                            }
                        }
                        Some(BrowserCommand::Leave) => {
                            recorder.record_in_host(&host, Event::Actor { what: "left".to_owned() });
                            let _ = socket.close().await;
                            let (code, reason) = socket.closed().map_or((1006, String::new()), |(c, r)| (c, r.to_owned()));
                            *closed.lock().unwrap_or_else(|e| e.into_inner()) = Some((now_ms(), code, reason));
                            return Ok(());
                        }
                    },
                    event = socket.recv_json() => match event {
                        Ok(BrowserEvent::Json(message)) => {
                            recorder.record_in_host(
                                &host,
                                Event::Actor {
                                    what: format!("heard {}", sorted_keys(&message)),
                                },
                            );
                            log.lock().unwrap_or_else(|e| e.into_inner()).push(Heard {
                                at_ms: now_ms(),
                                message,
                            });
                        }
                        Ok(BrowserEvent::Binary(bytes)) => {
                            recorder.record_in_host(&host, Event::Actor { what: format!("heard binary {}", digest(&bytes)) });
                            binary.lock().unwrap_or_else(|e| e.into_inner()).push(bytes);
                        }
                        Ok(BrowserEvent::Closed { code, reason }) => {
                            recorder.record_in_host(&host, Event::Actor { what: format!("closed {code} {reason}") });
                            *closed.lock().unwrap_or_else(|e| e.into_inner()) = Some((now_ms(), code, reason));
                            return Ok(());
                        }
                        Err(e) => {
                            recorder.record_in_host(&host, Event::Actor { what: format!("dropped without a close frame: {e}") });
                            *closed.lock().unwrap_or_else(|e| e.into_inner()) = Some((now_ms(), 1006, String::new()));
                            return Ok(());
                        }
                    },
                }
            }
        });
        browser
    }
}

/// A short, stable name for a binary frame in the trace: its length and the first bytes of its
/// SHA-256 (never the raw bytes).
fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(bytes);
    format!("{} bytes {}", bytes.len(), hex::encode(&hash[..6]))
}

async fn get(url: &str, cookie: Option<&str>) -> Result<connector::HttpResponse, String> {
    let mut request = http::Request::get(url);
    if let Some(cookie) = cookie {
        request = request.header(http::header::COOKIE, cookie);
    }
    let request = request.body(Bytes::new()).map_err(|e| e.to_string())?;
    connector::send(&TurmoilConnector, request)
        .await
        .map_err(|e| e.to_string())
}

fn header(response: &connector::HttpResponse, name: &str) -> Vec<String> {
    response
        .headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect()
}

fn cookie_pair(response: &connector::HttpResponse, name: &str) -> Result<String, String> {
    header(response, "set-cookie")
        .into_iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap_or_default().to_owned())
        .ok_or_else(|| format!("no {name} cookie (status {})", response.status))
}

fn location(response: &connector::HttpResponse) -> Result<String, String> {
    header(response, "location")
        .into_iter()
        .next()
        .ok_or_else(|| format!("no redirect (status {})", response.status))
}

async fn sign_in_flow() -> Result<String, String> {
    let start = get(&format!("{SERVER_ORIGIN}/auth/github"), None).await?;
    let attempt = cookie_pair(&start, "chopin_oauth")?;
    let approve = get(&location(&start)?, None).await?;
    let callback = get(&location(&approve)?, Some(&attempt)).await?;
    cookie_pair(&callback, "chopin_session")
}
/// How many characters of a host tool's output a frame's detail keeps.
const DETAIL_OUTPUT_MAX_CHARS: usize = 300;

fn clip(text: &str) -> String {
    if text.chars().count() <= DETAIL_OUTPUT_MAX_CHARS {
        text.to_owned()
    } else {
        let head: String = text.chars().take(DETAIL_OUTPUT_MAX_CHARS).collect();
        format!("{head}…")
    }
}

/// What an [`AgentEvent::Frame`] says about a server frame: `start` / `destroy` → the session id;
/// `turn` → `<turnId> <prompt>`; `steer` → its text; `host-tool-result` →
/// `<callId> isError=<bool> <output>` (a string output unquoted, at most 300 characters);
/// `abort` → the turn id, then its message if it carries one; anything else → its JSON.
pub fn frame_detail(message: &ServerMessage) -> String {
    match message {
        ServerMessage::Start(s) => s.session_id.clone(),
        ServerMessage::Destroy(d) => d.session_id.clone(),
        ServerMessage::Turn(t) => format!("{} {}", t.turn_id, t.prompt),
        ServerMessage::Steer(s) => s.text.clone(),
        ServerMessage::Abort(a) => match &a.message {
            Some(message) => format!("{} {message}", a.turn_id),
            None => a.turn_id.clone(),
        },
        ServerMessage::HostToolResult(r) => {
            let output = match &r.output {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{} isError={} {}", r.call_id, r.is_error, clip(&output))
        }
        other => clip(&chopin_protocol::agent::encode(other)),
    }
}

/// Where the agent actor is in its queue of turn scripts.
#[derive(Default)]
struct Scripts {
    queue: VecDeque<TurnScript>,
    /// Index of the next step of `queue.front()`.
    step: usize,
    /// `start` frames not answered yet, oldest first.
    starts: VecDeque<String>,
    /// The session the current script answered `started` for.
    session: Option<String>,
    /// The session the last finished script played.
    last_session: Option<String>,
    /// Turns a script ended with `turn-end`.
    ended: BTreeSet<String>,
    /// Turn ids by session, from `turn` frames.
    turns: BTreeMap<String, String>,
    /// The call the current `HostToolCall` step waits for.
    awaiting_call: Option<String>,
    /// Call ids whose `host-tool-result` arrived.
    results: BTreeSet<String>,
    calls: u64,
    steers_seen: usize,
    steers_used: usize,
    /// The current `Sleep` step's timer, once armed.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    slept: bool,
    ignore_abort: bool,
}

impl Scripts {
    fn current_turn(&self) -> Option<String> {
        self.session
            .as_ref()
            .and_then(|s| self.turns.get(s))
            .filter(|turn| !self.ended.contains(*turn))
            .cloned()
    }

    /// The current script's step was done: move on (and to the next script at the end).
    fn next_step(&mut self) {
        self.step += 1;
        if self
            .queue
            .front()
            .is_some_and(|script| self.step >= script.steps.len())
        {
            self.end_script();
        }
    }

    fn end_script(&mut self) {
        self.queue.pop_front();
        self.step = 0;
        self.last_session = self.session.take().or(self.last_session.take());
        self.awaiting_call = None;
        self.sleep = None;
        self.slept = false;
    }
}

/// What running the scripts as far as they go ended with.
enum Pumped {
    Blocked,
    Dropped,
}

struct AgentActor {
    host: String,
    log: Arc<Mutex<Vec<AgentEvent>>>,
    recorder: Recorder,
    scripts: Scripts,
}

impl AgentActor {
    fn note(&self, event: AgentEvent) {
        self.recorder.record_in_host(
            &self.host,
            Event::Actor {
                what: format!("{event:?}"),
            },
        );
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    async fn send(&self, client: &mut AgentClient, message: ClientMessage, detail: String) {
        let kind = message.type_name().to_owned();
        match client.send(&message).await {
            Ok(()) => self.note(AgentEvent::Sent {
                at_ms: now_ms(),
                kind,
                detail,
            }),
            Err(e) => self.note(AgentEvent::Failed {
                at_ms: now_ms(),
                what: format!("send {kind}: {e}"),
            }),
        }
    }

    /// Takes note of a frame the scripts may be waiting for; answers `abort` unless told not to.
    async fn heard(&mut self, client: &mut AgentClient, message: ServerMessage) {
        self.note(AgentEvent::Frame {
            at_ms: now_ms(),
            kind: message.type_name().to_owned(),
            detail: frame_detail(&message),
        });
        let s = &mut self.scripts;
        match message {
            ServerMessage::Start(start) => s.starts.push_back(start.session_id),
            ServerMessage::Turn(turn) => {
                s.turns.insert(turn.session_id, turn.turn_id);
            }
            ServerMessage::HostToolResult(result) => {
                s.results.insert(result.call_id);
            }
            ServerMessage::Steer(_) => s.steers_seen += 1,
            ServerMessage::Abort(abort) if !s.ignore_abort => {
                if s.current_turn().as_deref() == Some(abort.turn_id.as_str()) {
                    s.end_script();
                }
                let end = ClientMessage::TurnEnd(TurnEnd {
                    turn_id: abort.turn_id.clone(),
                    status: TurnStatus::Aborted,
                    output: None,
                    message: None,
                });
                self.send(client, end, format!("{} aborted", abort.turn_id))
                    .await;
            }
            _ => {}
        }
    }

    /// Runs script steps until one has to wait (or a `Drop` ends the actor).
    async fn pump(&mut self, client: &mut AgentClient) -> Pumped {
        loop {
            let Some(step) = self
                .scripts
                .queue
                .front()
                .and_then(|script| script.steps.get(self.scripts.step))
                .cloned()
            else {
                if self.scripts.queue.pop_front().is_some() {
                    // An empty script.
                    continue;
                }
                return Pumped::Blocked;
            };
            let s = &mut self.scripts;
            let needs_turn = matches!(
                step,
                TurnStep::HostToolCall { .. }
                    | TurnStep::HostToolCallNoWait { .. }
                    | TurnStep::Text { .. }
                    | TurnStep::FinishStep
                    | TurnStep::End { .. }
            ) && s.awaiting_call.is_none();
            let turn = s.current_turn();
            if needs_turn && turn.is_none() {
                return Pumped::Blocked;
            }
            let turn = turn.unwrap_or_default();
            match step {
                TurnStep::Started => {
                    let Some(session) = s.starts.pop_front() else {
                        return Pumped::Blocked;
                    };
                    s.session = Some(session.clone());
                    let started = ClientMessage::Started(Started {
                        session_id: session.clone(),
                    });
                    self.send(client, started, session).await;
                }
                TurnStep::KeptSession => {
                    s.session = s.last_session.clone();
                }
                TurnStep::AwaitTurn => {
                    if turn.is_empty() {
                        return Pumped::Blocked;
                    }
                }
                TurnStep::HostToolCall { name, input } => match s.awaiting_call.clone() {
                    None => {
                        s.calls += 1;
                        let call_id = format!("call-{}", s.calls);
                        s.awaiting_call = Some(call_id.clone());
                        let call = ClientMessage::HostToolCall(HostToolCall {
                            turn_id: turn,
                            call_id: call_id.clone(),
                            name: name.clone(),
                            input,
                        });
                        self.send(client, call, format!("{call_id} {name}")).await;
                        continue;
                    }
                    Some(call_id) if s.results.contains(&call_id) => s.awaiting_call = None,
                    Some(_) => return Pumped::Blocked,
                },
                TurnStep::HostToolCallNoWait { name, input } => {
                    s.calls += 1;
                    let call_id = format!("call-{}", s.calls);
                    let call = ClientMessage::HostToolCall(HostToolCall {
                        turn_id: turn,
                        call_id: call_id.clone(),
                        name: name.clone(),
                        input,
                    });
                    self.send(client, call, format!("{call_id} {name}")).await;
                }
                TurnStep::FinishStep => {
                    let part = ClientMessage::Part(PartMessage {
                        turn_id: turn,
                        part: Part::FinishStep(FinishPart {
                            finish_reason: FinishReason::Stop,
                            usage: None,
                        }),
                    });
                    self.send(client, part, "finish-step".to_owned()).await;
                }
                TurnStep::Text { text } => {
                    let part = ClientMessage::Part(PartMessage {
                        turn_id: turn,
                        part: Part::Text(TextPart { text: text.clone() }),
                    });
                    self.send(client, part, text).await;
                }
                TurnStep::AwaitSteers { count } => {
                    if s.steers_seen - s.steers_used < count {
                        return Pumped::Blocked;
                    }
                    s.steers_used += count;
                }
                TurnStep::End { status, output } => {
                    s.ended.insert(turn.clone());
                    let end = ClientMessage::TurnEnd(TurnEnd {
                        turn_id: turn.clone(),
                        status,
                        output,
                        message: (status == TurnStatus::Failed)
                            .then(|| "the script ended the turn as failed".to_owned()),
                    });
                    self.send(client, end, format!("{turn} {status:?}")).await;
                }
                TurnStep::IgnoreAbort => s.ignore_abort = true,
                TurnStep::Sleep { ms } => {
                    if s.slept {
                        s.slept = false;
                    } else {
                        if s.sleep.is_none() {
                            s.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_millis(ms))));
                        }
                        return Pumped::Blocked;
                    }
                }
                TurnStep::Drop => {
                    self.note(AgentEvent::Dropped { at_ms: now_ms() });
                    return Pumped::Dropped;
                }
                TurnStep::Runs { status } => {
                    let Some(session) = s.session.clone() else {
                        return Pumped::Blocked;
                    };
                    let report = ClientMessage::Runs(chopin_protocol::agent::Runs {
                        session_id: session,
                        runs: vec![chopin_protocol::agent::Run {
                            run_id: "run-1".to_owned(),
                            name: "rollout".to_owned(),
                            status: serde_json::from_value(Value::String(status.clone()))
                                .unwrap_or(chopin_protocol::agent::RunStatus::Running),
                            root_run_id: None,
                            elapsed_ms: None,
                            stages: Vec::new(),
                            omitted_stages: None,
                        }],
                    });
                    self.send(client, report, format!("run-1 {status}")).await;
                }
            }
            self.scripts.next_step();
        }
    }
}

async fn sleeping(sleep: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match sleep.as_mut() {
        Some(sleep) => sleep.await,
        None => std::future::pending().await,
    }
}

async fn run_agent(
    host: String,
    token: String,
    mut commands: mpsc::UnboundedReceiver<AgentCommand>,
    log: Arc<Mutex<Vec<AgentEvent>>>,
    recorder: Recorder,
) {
    let mut actor = AgentActor {
        host,
        log,
        recorder,
        scripts: Scripts::default(),
    };
    let stream = match turmoil::net::TcpStream::connect((SERVER_HOST, SERVER_PORT)).await {
        Ok(s) => s,
        Err(e) => {
            return actor.note(AgentEvent::Failed {
                at_ms: now_ms(),
                what: format!("connect: {e}"),
            })
        }
    };
    let mut client: AgentClient =
        match agent::connect(stream, &Upgrade::new(server_authority(), Some(&token))).await {
            Ok(c) => c,
            Err(agent::ConnectError::Refused { status, .. }) => {
                return actor.note(AgentEvent::UpgradeRefused {
                    at_ms: now_ms(),
                    status,
                })
            }
            Err(e) => {
                return actor.note(AgentEvent::Failed {
                    at_ms: now_ms(),
                    what: format!("upgrade: {e}"),
                })
            }
        };
    actor.note(AgentEvent::Connected { at_ms: now_ms() });
    let mut reading = true;
    // The sessions the last `attached` kept, for a `resume`.
    let mut kept: Vec<String> = Vec::new();
    // Dropping every handle stops the commands, not the client.
    let mut commanded = true;
    loop {
        if let Pumped::Dropped = actor.pump(&mut client).await {
            // Dropping the client closes the TCP connection without a close frame.
            drop(client);
            return;
        }
        tokio::select! {
            command = commands.recv(), if commanded => match command {
                None => {
                    commanded = false;
                    if !reading {
                        return;
                    }
                }
                Some(AgentCommand::Attach(document, features)) => {
                    actor.note(AgentEvent::AttachSent { at_ms: now_ms() });
                    let attach = ClientMessage::Attach(
                        chopin_protocol::agent::Attach {
                            version: chopin_protocol::agent::AGENT_PROTOCOL_VERSION,
                            document,
                            checkout: None,
                            features: features
                                .iter()
                                .map(|name| match Feature::from_name(name) {
                                    Some(feature) => OfferedFeature::Known(feature),
                                    None => OfferedFeature::Unknown(name.clone()),
                                })
                                .collect(),
                        },
                    );
                    if let Err(e) = client.send(&attach).await {
                        actor.note(AgentEvent::Failed { at_ms: now_ms(), what: format!("send attach: {e}") });
                    }
                }
                Some(AgentCommand::Script(script)) => actor.scripts.queue.push_back(script),
                Some(AgentCommand::Detach) => {
                    let _ = client.detach().await;
                }
                Some(AgentCommand::Close) => {
                    let _ = client.close().await;
                    return;
                }
                Some(AgentCommand::Silence) => reading = false,
                Some(AgentCommand::SendText(text)) => {
                    let detail = text.chars().take(200).collect::<String>();
                    match client.send_text(text).await {
                        Ok(()) => actor.note(AgentEvent::Sent { at_ms: now_ms(), kind: "text".to_owned(), detail }),
                        Err(e) => actor.note(AgentEvent::Failed { at_ms: now_ms(), what: format!("send text: {e}") }),
                    }
                }
                // A silent client says nothing, its `resume` included.
                Some(AgentCommand::Resume(_)) if !reading => {}
                Some(AgentCommand::Resume(all)) => {
                    let sessions = if all { kept.clone() } else { Vec::new() };
                    let detail = sessions.join(" ");
                    let resume = ClientMessage::Resume(chopin_protocol::agent::ClientResume { sessions });
                    match client.send(&resume).await {
                        Ok(()) => actor.note(AgentEvent::Sent { at_ms: now_ms(), kind: "resume".to_owned(), detail }),
                        Err(e) => actor.note(AgentEvent::Failed { at_ms: now_ms(), what: format!("send resume: {e}") }),
                    }
                }
                Some(AgentCommand::SendRaw(bytes)) => {
                    let detail = format!("{} bytes", bytes.len());
                    match client.send_raw(&bytes).await {
                        Ok(()) => actor.note(AgentEvent::Sent { at_ms: now_ms(), kind: "raw".to_owned(), detail }),
                        Err(e) => actor.note(AgentEvent::Failed { at_ms: now_ms(), what: format!("send raw: {e}") }),
                    }
                }
            },
            () = sleeping(&mut actor.scripts.sleep), if actor.scripts.sleep.is_some() => {
                actor.scripts.sleep = None;
                actor.scripts.slept = true;
            }
            event = client.recv(), if reading => match event {
                Ok(WireEvent::Message(ServerMessage::Attached(a))) => {
                    kept = a.kept.clone();
                    actor.note(AgentEvent::Attached {
                        at_ms: now_ms(),
                        login: a.login,
                        generation: a.generation.map_or(-1, |g| g as i64),
                    })
                }
                Ok(WireEvent::Message(ServerMessage::Refused(r))) => actor.note(AgentEvent::Refused {
                    at_ms: now_ms(),
                    reason: r.reason.as_str().to_owned(),
                    holder: r.holder,
                }),
                Ok(WireEvent::Message(ServerMessage::Error(e))) => actor.note(AgentEvent::Error {
                    at_ms: now_ms(),
                    code: e.code.as_str().to_owned(),
                }),
                Ok(WireEvent::Message(other)) => actor.heard(&mut client, other).await,
                Ok(WireEvent::Closed { code, reason }) => {
                    return actor.note(AgentEvent::Closed { at_ms: now_ms(), code, reason });
                }
                Err(e) => {
                    return actor.note(AgentEvent::Failed { at_ms: now_ms(), what: e.to_string() });
                }
            },
        }
    }
}

/// A y-protocols sync `update` frame, as a browser sends a Yjs edit (yrs's own encoding).
pub fn sync_update_frame(update: &[u8]) -> Vec<u8> {
    chopin_server::content::sync_update_frame(update)
}

/// The sync `update` frame of Yjs client `client` typing `text` into an empty document: an
/// insertion only, so it never takes anything else out.
pub fn typed(client: u64, text: &str) -> Vec<u8> {
    let doc = chopin_document::ydoc::empty_doc(client);
    sync_update_frame(&chopin_document::ydoc::replace_source(&doc, text))
}

/// A JSON value written with every object's keys in name order, so a trace line does not depend on
/// the order the server wrote the fields in (serde_json keeps insertion order in this workspace).
pub(crate) fn sorted_keys(value: &serde_json::Value) -> String {
    fn sort(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut fields: Vec<(&String, &serde_json::Value)> = map.iter().collect();
                fields.sort_by(|a, b| a.0.cmp(b.0));
                serde_json::Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sort(v)))
                        .collect(),
                )
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(sort).collect())
            }
            other => other.clone(),
        }
    }
    sort(value).to_string()
}
