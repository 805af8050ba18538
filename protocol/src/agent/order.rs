//! The order rules that can be judged from the frames alone.
//!
//! Owns: [`LinkOrder`], the connection's phase (attach first, nothing before `attached`, one
//! attach, `resume` only right after `attached`, feature-gated frames in both directions), and
//! [`TurnTools`], a turn's tool boundary (own tools declared before use, never shadowing a host
//! tool, none in an isolated session). Does not own: the per-session and per-turn bookkeeping
//! (which sessions are started, which turns are open, which calls await a result) — that needs
//! the server's state and its races (a frame for a turn the server has just ended is stale,
//! not a fault), so the server keeps it.
//!
//! A [`LinkOrder`] violation is a [`Fault`] and ends the connection (1008). A [`TurnTools`]
//! violation is a [`ToolBoundary`] failure and fails only its turn.

use super::client::ClientMessage;
use super::common::ToolSpec;
use super::fault::Fault;
use super::feature::Feature;
use super::server::{ServerMessage, SessionMode};

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Upgraded; the client's first frame must be `attach`.
    AwaitingAttach,
    /// `attach` received; the client waits for `attached` or `refused`.
    Attaching,
    /// `attached` sent; the link is in use.
    Attached,
    /// `detach`, `refused` or `error` was sent; nothing may follow but the close (and, after
    /// `detach`, server frames that crossed it).
    Closing,
}

/// The connection-level order rules, one per connection. The server checks every client frame
/// with [`LinkOrder::check_client`] and passes every frame it sends through
/// [`LinkOrder::check_server`]; a test client does the reverse to check the server.
#[derive(Debug, Clone)]
pub struct LinkOrder {
    phase: Phase,
    features: Vec<Feature>,
    /// `attached` listed kept sessions and the client has not yet answered with `resume`.
    resume_owed: bool,
    /// No client frame has followed `attached` yet.
    first_after_attached: bool,
    /// The client sent `resume` and the server has not yet sent `resumed`.
    resume_pending: bool,
    /// The client sent `detach`: server frames that crossed it are still fine.
    detached: bool,
}

impl Default for LinkOrder {
    fn default() -> Self {
        Self::new()
    }
}

impl LinkOrder {
    pub fn new() -> Self {
        LinkOrder {
            phase: Phase::AwaitingAttach,
            features: Vec::new(),
            resume_owed: false,
            first_after_attached: false,
            resume_pending: false,
            detached: false,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The features `attached` accepted (empty before).
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    pub fn has(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }

    /// Check a frame the client sent and advance the phase. `Err` ends the connection.
    pub fn check_client(&mut self, message: &ClientMessage) -> Result<(), Fault> {
        let name = message.type_name();
        match self.phase {
            Phase::AwaitingAttach => {
                first_message_ok(message)?;
                self.phase = Phase::Attaching;
                Ok(())
            }
            Phase::Attaching => Err(Fault::out_of_order(
                name,
                "wait for \"attached\" (or \"refused\") before sending anything after \"attach\"",
            )),
            Phase::Closing => Err(Fault::out_of_order(
                name,
                "nothing may follow \"detach\"; the server is closing the connection",
            )),
            Phase::Attached => {
                let first = std::mem::replace(&mut self.first_after_attached, false);
                match message {
                    ClientMessage::Attach(_) => Err(Fault::out_of_order(
                        name,
                        "this connection is already attached; a connection attaches once",
                    )),
                    ClientMessage::Resume(_) => {
                        if !self.has(Feature::ResumableSessions) {
                            Err(Fault::out_of_order(
                                name,
                                "\"resume\" needs the resumable-sessions feature, which \"attached\" did not accept",
                            ))
                        } else if !first {
                            Err(Fault::out_of_order(
                                name,
                                "\"resume\" must be the first message after \"attached\"",
                            ))
                        } else if !self.resume_owed {
                            Err(Fault::out_of_order(
                                name,
                                "\"resume\" answers an \"attached\" that listed kept sessions; this one named no kept sessions",
                            ))
                        } else {
                            self.resume_owed = false;
                            self.resume_pending = true;
                            Ok(())
                        }
                    }
                    _ if self.resume_owed => Err(Fault::out_of_order(
                        name,
                        "\"attached\" listed kept sessions: answer with \"resume\" first (an empty list if you hold none)",
                    )),
                    ClientMessage::Catalog(_) if !self.has(Feature::CapabilityCatalog) => {
                        Err(Fault::out_of_order(
                            name,
                            "\"catalog\" needs the capability-catalog feature, which \"attached\" did not accept",
                        ))
                    }
                    ClientMessage::Detach(_) => {
                        self.phase = Phase::Closing;
                        self.detached = true;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// Check a frame the server is about to send (or, in a test client, has sent) and advance
    /// the phase. `Err` means the server broke the protocol.
    pub fn check_server(&mut self, message: &ServerMessage) -> Result<(), Fault> {
        let name = message.type_name();
        if let ServerMessage::Error(_) = message {
            self.phase = Phase::Closing;
            return Ok(());
        }
        match self.phase {
            Phase::AwaitingAttach => Err(Fault::out_of_order(
                name,
                "the server sends nothing but \"error\" before the client's \"attach\"",
            )),
            // Frames the server sent before it read the client's `detach` may arrive after it.
            Phase::Closing if self.detached => match message {
                ServerMessage::Attached(_) | ServerMessage::Refused(_) => {
                    Err(Fault::out_of_order(name, "\"attach\" was already answered"))
                }
                _ => Ok(()),
            },
            Phase::Closing => Err(Fault::out_of_order(
                name,
                "nothing may follow \"refused\" or \"error\"",
            )),
            Phase::Attaching => match message {
                ServerMessage::Attached(attached) => {
                    self.features = attached.features.clone();
                    self.first_after_attached = true;
                    self.resume_owed = !attached.kept.is_empty();
                    if self.resume_owed && !self.has(Feature::ResumableSessions) {
                        return Err(Fault::out_of_order(
                            name,
                            "\"kept\" is only sent to a client with resumable-sessions",
                        ));
                    }
                    self.phase = Phase::Attached;
                    Ok(())
                }
                ServerMessage::Refused(_) => {
                    self.phase = Phase::Closing;
                    Ok(())
                }
                _ => Err(Fault::out_of_order(
                    name,
                    "\"attach\" must be answered with \"attached\" or \"refused\" first",
                )),
            },
            Phase::Attached => match message {
                ServerMessage::Attached(_) | ServerMessage::Refused(_) => {
                    Err(Fault::out_of_order(name, "\"attach\" was already answered"))
                }
                ServerMessage::Steer(_) if !self.has(Feature::SteerTurn) => Err(
                    Fault::out_of_order(name, "\"steer\" goes only to a client with steer-turn"),
                ),
                ServerMessage::Resumed(_) if !self.resume_pending => Err(Fault::out_of_order(
                    name,
                    "\"resumed\" answers the client's \"resume\", which was not sent",
                )),
                ServerMessage::Resumed(_) => {
                    self.resume_pending = false;
                    Ok(())
                }
                ServerMessage::Turn(turn)
                    if !turn.attachments.is_empty() && !self.has(Feature::Attachments) =>
                {
                    Err(Fault::out_of_order(
                        name,
                        "\"attachments\" go only to a client with the attachments feature",
                    ))
                }
                ServerMessage::Turn(turn)
                    if turn.thinking_level.is_some() && !self.has(Feature::CapabilityCatalog) =>
                {
                    Err(Fault::out_of_order(
                        name,
                        "\"thinkingLevel\" goes only to a client with capability-catalog",
                    ))
                }
                _ => Ok(()),
            },
        }
    }
}

/// The first frame of a connection must be `attach`.
pub fn first_message_ok(message: &ClientMessage) -> Result<(), Fault> {
    match message {
        ClientMessage::Attach(_) => Ok(()),
        other => Err(Fault::out_of_order(
            other.type_name(),
            "the first message must be \"attach\"",
        )),
    }
}

/// Why a turn fails at its tool boundary. Fails the turn, not the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolBoundary {
    #[error("an isolated session may offer no tools of its own, but \"tools\" declared {count}")]
    OwnToolsInIsolated { count: usize },
    #[error("own tool \"{name}\" reuses the name of one of this turn's host tools")]
    ShadowsHostTool { name: String },
    #[error("tool \"{name}\" is declared twice in \"tools\"")]
    DuplicateTool { name: String },
    #[error("\"tools\" was already sent for this turn; a turn declares its own tools once")]
    AlreadyDeclared,
    #[error("the model called \"{name}\", which this turn's \"tools\" did not declare")]
    Undeclared { name: String },
    #[error("\"host-tool-call\" names \"{name}\", which is not one of this turn's host tools")]
    NotAHostTool { name: String },
}

/// One turn's tools: the host tools the server offered and the client's own, once declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnTools {
    mode: SessionMode,
    host: Vec<String>,
    own: Option<Vec<String>>,
}

impl TurnTools {
    /// The tools of a turn the server has just sent.
    pub fn new(mode: SessionMode, host_tools: &[ToolSpec]) -> Self {
        TurnTools {
            mode,
            host: host_tools.iter().map(|t| t.name.clone()).collect(),
            own: None,
        }
    }

    /// The client's `tools` frame for this turn.
    pub fn declare(&mut self, tools: &[ToolSpec]) -> Result<(), ToolBoundary> {
        if self.own.is_some() {
            return Err(ToolBoundary::AlreadyDeclared);
        }
        if self.mode == SessionMode::Isolated && !tools.is_empty() {
            return Err(ToolBoundary::OwnToolsInIsolated { count: tools.len() });
        }
        let mut names: Vec<String> = Vec::with_capacity(tools.len());
        for tool in tools {
            if self.host.contains(&tool.name) {
                return Err(ToolBoundary::ShadowsHostTool {
                    name: tool.name.clone(),
                });
            }
            if names.contains(&tool.name) {
                return Err(ToolBoundary::DuplicateTool {
                    name: tool.name.clone(),
                });
            }
            names.push(tool.name.clone());
        }
        self.own = Some(names);
        Ok(())
    }

    /// A `tool-call` (or `tool-result`) part naming one of the client's own tools.
    pub fn check_own_call(&self, name: &str) -> Result<(), ToolBoundary> {
        match &self.own {
            Some(own) if own.iter().any(|n| n == name) => Ok(()),
            _ => Err(ToolBoundary::Undeclared {
                name: name.to_owned(),
            }),
        }
    }

    /// A `host-tool-call` naming one of the turn's host tools.
    pub fn check_host_call(&self, name: &str) -> Result<(), ToolBoundary> {
        if self.host.iter().any(|n| n == name) {
            Ok(())
        } else {
            Err(ToolBoundary::NotAHostTool {
                name: name.to_owned(),
            })
        }
    }

    /// The own tools declared, if `tools` was sent.
    pub fn own(&self) -> Option<&[String]> {
        self.own.as_deref()
    }
}
