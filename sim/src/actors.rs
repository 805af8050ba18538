//! Scripted actors of a world: browsers that sign in and sit in a document's room, and agent
//! clients that attach to a document's Planner — each on its own simulated host, driven by
//! commands from the test and keeping a log of what it saw with the simulated time.
//!
//! Owns: signing in through the server's real OAuth routes and the fake GitHub host; the agent
//! actor (connect, attach on command, answer pings while reading, detach, close, go silent); the
//! browser actor (room socket, every `session:planner` it hears). Does not own: the wire clients
//! themselves (`chopin_fixtures::agent`, `chopin_fixtures::browser`) or the server.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use chopin_fixtures::agent::{self, AgentClient, Event as WireEvent, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::ServerMessage;
use chopin_server::connector;
use serde_json::Value;
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
    /// Anything else that went wrong on the actor's side.
    Failed { at_ms: u64, what: String },
}

/// A command to an agent actor.
#[derive(Debug, Clone)]
enum AgentCommand {
    Attach(String),
    Detach,
    Close,
    /// Stop reading (so no pong is sent) without closing.
    Silence,
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
        let _ = self
            .commands
            .send(AgentCommand::Attach(document.to_owned()));
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

/// Handle of a browser actor in a room.
#[derive(Clone)]
pub struct Browser {
    pub name: String,
    log: Arc<Mutex<Vec<Heard>>>,
}

impl Browser {
    /// Every JSON message heard so far.
    pub fn heard(&self) -> Vec<Heard> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

    /// Starts a browser actor `name` in the room of document `document_id`, signed in with
    /// `cookie`; it records every JSON message it hears.
    pub fn browser(&mut self, name: &str, cookie: &str, document_id: &str) -> Browser {
        let log = Arc::new(Mutex::new(Vec::new()));
        let browser = Browser {
            name: name.to_owned(),
            log: log.clone(),
        };
        let path = format!("/api/documents/{document_id}/room");
        let (cookie, recorder, host) = (cookie.to_owned(), self.recorder(), name.to_owned());
        self.spawn(name, async move {
            let stream = turmoil::net::TcpStream::connect((SERVER_HOST, SERVER_PORT)).await?;
            let mut socket = BrowserSocket::connect(
                stream,
                &server_authority(),
                &path,
                Some(&cookie),
                Some(SERVER_ORIGIN),
            )
            .await
            .map_err(|e| format!("room connect: {e}"))?;
            loop {
                match socket.recv_json().await {
                    Ok(BrowserEvent::Json(message)) => {
                        recorder.record_in_host(
                            &host,
                            Event::Actor {
                                what: format!("heard {message}"),
                            },
                        );
                        log.lock().unwrap_or_else(|e| e.into_inner()).push(Heard {
                            at_ms: now_ms(),
                            message,
                        });
                    }
                    Ok(BrowserEvent::Binary(_)) => {}
                    Ok(BrowserEvent::Closed { .. }) | Err(_) => return Ok(()),
                }
            }
        });
        browser
    }
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

async fn run_agent(
    host: String,
    token: String,
    mut commands: mpsc::UnboundedReceiver<AgentCommand>,
    log: Arc<Mutex<Vec<AgentEvent>>>,
    recorder: Recorder,
) {
    let note = |event: AgentEvent| {
        recorder.record_in_host(
            &host,
            Event::Actor {
                what: format!("{event:?}"),
            },
        );
        log.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    };
    let stream = match turmoil::net::TcpStream::connect((SERVER_HOST, SERVER_PORT)).await {
        Ok(s) => s,
        Err(e) => {
            return note(AgentEvent::Failed {
                at_ms: now_ms(),
                what: format!("connect: {e}"),
            })
        }
    };
    let mut client: AgentClient =
        match agent::connect(stream, &Upgrade::new(server_authority(), Some(&token))).await {
            Ok(c) => c,
            Err(agent::ConnectError::Refused { status, .. }) => {
                return note(AgentEvent::UpgradeRefused {
                    at_ms: now_ms(),
                    status,
                })
            }
            Err(e) => {
                return note(AgentEvent::Failed {
                    at_ms: now_ms(),
                    what: format!("upgrade: {e}"),
                })
            }
        };
    note(AgentEvent::Connected { at_ms: now_ms() });
    let mut reading = true;
    // Dropping every handle stops the commands, not the client.
    let mut commanded = true;
    loop {
        tokio::select! {
            command = commands.recv(), if commanded => match command {
                None => {
                    commanded = false;
                    if !reading {
                        return;
                    }
                }
                Some(AgentCommand::Attach(document)) => {
                    note(AgentEvent::AttachSent { at_ms: now_ms() });
                    let attach = chopin_protocol::agent::ClientMessage::Attach(
                        chopin_protocol::agent::Attach {
                            version: chopin_protocol::agent::AGENT_PROTOCOL_VERSION,
                            document,
                            checkout: None,
                            features: Vec::new(),
                        },
                    );
                    if let Err(e) = client.send(&attach).await {
                        note(AgentEvent::Failed { at_ms: now_ms(), what: format!("send attach: {e}") });
                    }
                }
                Some(AgentCommand::Detach) => {
                    let _ = client.detach().await;
                }
                Some(AgentCommand::Close) => {
                    let _ = client.close().await;
                    return;
                }
                Some(AgentCommand::Silence) => reading = false,
            },
            event = client.recv(), if reading => match event {
                Ok(WireEvent::Message(ServerMessage::Attached(a))) => note(AgentEvent::Attached {
                    at_ms: now_ms(),
                    login: a.login,
                    generation: a.generation.map_or(-1, |g| g as i64),
                }),
                Ok(WireEvent::Message(ServerMessage::Refused(r))) => note(AgentEvent::Refused {
                    at_ms: now_ms(),
                    reason: r.reason.as_str().to_owned(),
                    holder: r.holder,
                }),
                Ok(WireEvent::Message(ServerMessage::Error(e))) => note(AgentEvent::Error {
                    at_ms: now_ms(),
                    code: e.code.as_str().to_owned(),
                }),
                Ok(WireEvent::Message(other)) => note(AgentEvent::Failed {
                    at_ms: now_ms(),
                    what: format!("unexpected {}", other.type_name()),
                }),
                Ok(WireEvent::Closed { code, reason }) => {
                    return note(AgentEvent::Closed { at_ms: now_ms(), code, reason });
                }
                Err(e) => {
                    return note(AgentEvent::Failed { at_ms: now_ms(), what: e.to_string() });
                }
            },
        }
    }
}
