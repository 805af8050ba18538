//! The remote adapter (`HARNESS=remote`): each Planner session goes to the client attached to
//! the document as `start`, each turn as `turn`, and the client's frames come back as the turn's
//! parts, host tool calls and end.
//!
//! Owns: the mapping of [`Harness`]/[`HarnessSession`] onto the agent connection — the link's
//! access check before every `start` and every `turn` (AC-18: a loss fails that session or turn,
//! and the check closes the link), `start` and its answer (`started`, `start-failed`, or nothing
//! within [`START_TIMEOUT_MS`], after which the session is destroyed), `turn`, the client's
//! `tools` declaration, `part`, `host-tool-call` → host tool → `host-tool-result` (a result too
//! large for one frame is answered with an error instead), `abort` with the cancellation's
//! reason, `steer` (only to a client that accepted `steer-turn`), `turn-end`, and `destroy`
//! (once). A frame the client already sent is taken before a steer waiting beside it, so a steer
//! that comes after the client's `turn-end` is left unread for the host (MSG-17). A link that
//! closes mid-turn ends the turn with an error; nothing is replayed. Does not own: which tools are allowed (the turn
//! driver, [`super::run_turn`]), the link itself (the agent socket, reached through
//! [`super::port`]).
//!
//! Trust boundary: nothing here carries a GitHub credential; the client gets prompts, tool specs
//! and host tool results only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chopin_protocol::agent::{
    self as wire, ClientMessage, Feature, ServerMessage, SessionMode, TurnStatus, MAX_FRAME_BYTES,
};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::port::{AccessDenied, AgentLinks, CatalogState, LinkCommand, LinkHandle, ROUTE_BACKLOG};
use super::{
    Capabilities, Catalog, Harness, HarnessError, HarnessSession, Offer, SessionRequest, TurnFile,
    TurnIo, TurnOutcome, TurnRequest,
};
use crate::runtime::entropy::SharedEntropy;

/// How long a session may take to answer `start` (RT-09 ruling), told in `attached`.
pub const START_TIMEOUT_MS: u64 = 30_000;

/// The remote adapter for one document: sessions go to whichever client is attached to it.
pub struct RemoteHarness {
    links: Arc<dyn AgentLinks>,
    document: Uuid,
    entropy: SharedEntropy,
}

impl RemoteHarness {
    pub fn new(links: Arc<dyn AgentLinks>, document: Uuid, entropy: SharedEntropy) -> Self {
        RemoteHarness {
            links,
            document,
            entropy,
        }
    }

    fn link(&self) -> Option<LinkHandle> {
        self.links.link_for(self.document)
    }
}

#[async_trait]
impl Harness for RemoteHarness {
    fn name(&self) -> &str {
        "remote"
    }

    /// The client's own tools are declared per turn with `tools`; the adapter itself has none.
    fn builtin_tools(&self) -> Vec<String> {
        Vec::new()
    }

    fn can_filter_builtins(&self) -> bool {
        true
    }

    fn capabilities(&self) -> Capabilities {
        let features = self.link().map(|l| l.features).unwrap_or_default();
        Capabilities {
            steer: features.contains(&Feature::SteerTurn),
            model_catalog: features.contains(&Feature::CapabilityCatalog),
            images: false,
        }
    }

    /// What the attached client reported (MOD-10, CMD-06); unknown with no client attached, or
    /// before a client that offered `capability-catalog` reports it (MOD-27).
    async fn catalog(&self) -> Result<Offer, HarnessError> {
        let Some(link) = self.link() else {
            return Ok(Offer::Unknown { pending: None });
        };
        Ok(match link.catalog.state() {
            CatalogState::NotOffered | CatalogState::AwaitedInVain => Offer::Known(Catalog::none()),
            CatalogState::Awaited => Offer::Unknown {
                pending: Some(link.catalog.clone()),
            },
            CatalogState::Reported(catalog) => Offer::Known(catalog),
        })
    }

    async fn start_session(
        &self,
        request: SessionRequest,
    ) -> Result<Box<dyn HarnessSession>, HarnessError> {
        let link = self.link().ok_or_else(|| HarnessError::Unavailable {
            message: "no Planner client is attached to this document".to_owned(),
        })?;
        // AC-18: the account may still hold the Planner, asked now.
        match link.access.recheck().await {
            Ok(()) => {}
            Err(AccessDenied::Revoked(message)) => {
                return Err(HarnessError::AccessRevoked { message })
            }
            Err(AccessDenied::Unknown(message)) => {
                return Err(HarnessError::Unavailable { message })
            }
        }
        let session_id = format!("s-{}", self.entropy.token_hex(8));
        let (to, mut answers) = mpsc::channel(ROUTE_BACKLOG);
        let key = format!("session:{session_id}");
        let gone = || HarnessError::Unavailable {
            message: "the Planner's connection closed".to_owned(),
        };
        if !link.command(LinkCommand::Route {
            key: key.clone(),
            to,
        }) || !link.command(LinkCommand::Send(Box::new(ServerMessage::Start(
            wire::Start {
                session_id: session_id.clone(),
                mode: request.mode,
            },
        )))) {
            return Err(gone());
        }
        let answer = tokio::time::timeout(Duration::from_millis(START_TIMEOUT_MS), async {
            loop {
                match answers.recv().await {
                    Some(ClientMessage::Started(_)) => return Ok(()),
                    Some(ClientMessage::StartFailed(f)) => {
                        return Err(HarnessError::StartFailed { message: f.message })
                    }
                    Some(_) => continue,
                    None => return Err(gone()),
                }
            }
        })
        .await;
        let _ = link.command(LinkCommand::Unroute { key });
        let session = RemoteSession {
            link,
            id: session_id,
            mode: request.mode,
            model: request.model,
            thinking_level: request.thinking_level,
            entropy: self.entropy.clone(),
            destroyed: AtomicBool::new(false),
        };
        match answer {
            Ok(Ok(())) => Ok(Box::new(session)),
            Ok(Err(e)) => {
                // A session the client refused is destroyed.
                session.destroy().await;
                Err(e)
            }
            Err(_) => {
                session.destroy().await;
                Err(HarnessError::StartFailed {
                    message: format!(
                        "the client did not answer start within {START_TIMEOUT_MS} ms"
                    ),
                })
            }
        }
    }
}

/// A session the client took back after a reconnect (client `resume`, AO-19): the same id, now
/// on the link `link` it came back on. It was started before (as a `planner` session), so its
/// next turn goes to it with no `start`.
pub fn resumed_session(
    link: LinkHandle,
    id: String,
    entropy: SharedEntropy,
) -> Arc<dyn HarnessSession> {
    Arc::new(RemoteSession {
        link,
        id,
        mode: SessionMode::Planner,
        model: None,
        thinking_level: None,
        entropy,
        destroyed: AtomicBool::new(false),
    })
}

/// One session on the attached client.
struct RemoteSession {
    link: LinkHandle,
    id: String,
    #[allow(dead_code)]
    mode: SessionMode,
    model: Option<String>,
    thinking_level: Option<String>,
    entropy: SharedEntropy,
    destroyed: AtomicBool,
}

impl RemoteSession {
    fn send(&self, message: ServerMessage) -> bool {
        self.link.command(LinkCommand::Send(Box::new(message)))
    }
}

/// `result` as it is when its frame fits the agent connection's limit ([`MAX_FRAME_BYTES`]);
/// otherwise an error result saying so, which always fits.
fn within_a_frame(result: wire::HostToolResult, tool: &str) -> wire::HostToolResult {
    let size = wire::encode(&ServerMessage::HostToolResult(result.clone())).len();
    if size <= MAX_FRAME_BYTES {
        return result;
    }
    tracing::warn!(
        tool,
        size,
        "a host tool result is too large for one frame; answering with an error"
    );
    wire::HostToolResult {
        output: serde_json::Value::String(format!(
            "The result of {tool} is {size} bytes, more than one frame of the agent connection carries ({MAX_FRAME_BYTES}); ask for less."
        )),
        is_error: true,
        ..result
    }
}

#[async_trait]
impl HarnessSession for RemoteSession {
    fn id(&self) -> &str {
        &self.id
    }

    async fn run_turn(&self, turn: TurnRequest, io: TurnIo) -> TurnOutcome {
        let turn_id = format!("t-{}", self.entropy.token_hex(8));
        let key = format!("turn:{turn_id}");
        let (to, mut frames) = mpsc::channel(ROUTE_BACKLOG);
        let closed = || TurnOutcome::failed("the Planner's connection closed mid-turn");
        // AC-18: the account may still hold the Planner, asked again before every turn.
        match self.link.access.recheck().await {
            Ok(()) => {}
            Err(AccessDenied::Revoked(why)) => {
                return TurnOutcome::failed(format!("access-revoked: {why}"))
            }
            Err(AccessDenied::Unknown(why)) => return TurnOutcome::failed(why),
        }
        if !self.link.command(LinkCommand::Route {
            key: key.clone(),
            to,
        }) {
            return closed();
        }
        // The files: in the turn's `attachments` to a client that offered the feature, else as
        // words in the prompt (FILE-26).
        let with_files = self.link.features.contains(&Feature::Attachments);
        let (prompt, attachments) = match with_files {
            true => (
                turn.prompt.clone(),
                turn.attachments.iter().map(wire_attachment).collect(),
            ),
            false => (files_as_words(&turn.prompt, &turn.attachments), Vec::new()),
        };
        let sent = self.send(ServerMessage::Turn(wire::Turn {
            session_id: self.id.clone(),
            turn_id: turn_id.clone(),
            prompt,
            instructions: turn.instructions.clone(),
            host_tools: turn.host_tools.clone(),
            response_format: turn.response_format.clone(),
            // The turn's own model and level (MOD-13), else what the session started with; a
            // level only to a client that offered `capability-catalog` (MOD-11).
            model: turn.model.clone().or_else(|| self.model.clone()),
            thinking_level: match &turn.model {
                Some(_) => turn.thinking_level.clone(),
                None => self.thinking_level.clone(),
            }
            .filter(|_| self.link.features.contains(&Feature::CapabilityCatalog)),
            attachments,
        }));
        if !sent {
            return closed();
        }
        let mut steers = self.link.features.contains(&Feature::SteerTurn);
        let mut aborted = false;
        let outcome = loop {
            tokio::select! {
                // What the client already sent comes first: after its `turn-end`, nothing more
                // goes to the turn.
                biased;
                frame = frames.recv() => match frame {
                    None => break closed(),
                    Some(ClientMessage::Tools(t)) => {
                        // A boundary failure is recorded by the driver, which then cancels.
                        let _ = io.declare_tools(t.tools);
                    }
                    // Once stopped, what the client's model still says is not the turn's: the
                    // signal itself is read (the stop may come while this loop is busy, and the
                    // client's next frame can be read before the stop's own branch).
                    Some(ClientMessage::Part(_)) if turn.cancel.is_cancelled() => {}
                    Some(ClientMessage::Part(p)) => io.emit(p.part).await,
                    Some(ClientMessage::HostToolCall(call)) => {
                        let result = io.call_host_tool(&call.name, call.input).await;
                        let answer = within_a_frame(wire::HostToolResult {
                            turn_id: turn_id.clone(),
                            call_id: call.call_id,
                            output: result.output,
                            is_error: result.is_error,
                        }, &call.name);
                        if !self.send(ServerMessage::HostToolResult(answer)) {
                            break closed();
                        }
                    }
                    // A turn stopped ends stopped, whatever the client says it did after.
                    Some(ClientMessage::TurnEnd(end)) if turn.cancel.is_cancelled() && end.status == TurnStatus::Completed => {
                        break TurnOutcome { status: TurnStatus::Aborted, output: None, message: None }
                    }
                    Some(ClientMessage::TurnEnd(end)) => break TurnOutcome {
                        status: end.status,
                        output: end.output,
                        message: end.message,
                    },
                    Some(_) => {}
                },
                () = turn.cancel.cancelled(), if !aborted => {
                    aborted = true;
                    // The driver waits briefly for turn-end, then ends the turn itself.
                    if !self.send(ServerMessage::Abort(wire::Abort {
                        turn_id: turn_id.clone(),
                        message: turn.cancel.reason().filter(|r| !r.is_empty()),
                    })) {
                        break TurnOutcome { status: TurnStatus::Aborted, output: None, message: None };
                    }
                }
                text = io.next_steer(), if steers => {
                    match text {
                        Some(text) => {
                            let _ = self.send(ServerMessage::Steer(wire::Steer {
                                turn_id: turn_id.clone(),
                                text,
                            }));
                        }
                        None => steers = false,
                    }
                }
            }
        };
        let _ = self.link.command(LinkCommand::Unroute { key });
        outcome
    }

    fn is_usable(&self) -> bool {
        !self.destroyed.load(Ordering::SeqCst) && !self.link.commands.is_closed()
    }

    async fn destroy(&self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            self.send(ServerMessage::Destroy(wire::Destroy {
                session_id: self.id.clone(),
            }));
        }
    }
}

/// A turn's file as the agent connection sends it (`turn.attachments`).
fn wire_attachment(file: &TurnFile) -> wire::Attachment {
    use base64::Engine as _;
    match file {
        TurnFile::Text { id, name, text } => wire::Attachment::Text(wire::TextAttachment {
            id: id.clone(),
            name: name.clone(),
            size: text.len() as u64,
            text: text.clone(),
        }),
        TurnFile::Image {
            id,
            name,
            mime_type,
            data,
        } => wire::Attachment::Image(wire::ImageAttachment {
            id: id.clone(),
            name: name.clone(),
            mime_type: mime_type.clone(),
            size: data.len() as u64,
            data: base64::engine::general_purpose::STANDARD.encode(data),
        }),
    }
}

/// `prompt` with a turn's files written in, for a client without the `attachments` feature:
/// each text file under its name, each image named only.
pub fn files_as_words(prompt: &str, files: &[TurnFile]) -> String {
    if files.is_empty() {
        return prompt.to_owned();
    }
    let mut out = prompt.to_owned();
    for file in files {
        match file {
            TurnFile::Text { name, text, .. } => {
                out.push_str(&format!("\n\n[File sent with this message: {name}]\n{text}"));
                if !text.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&format!("[End of {name}]"));
            }
            TurnFile::Image {
                name, mime_type, ..
            } => out.push_str(&format!(
                "\n\n[Image sent with this message: {name} ({mime_type}); this connection does not carry images, so it is not shown]"
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(output: serde_json::Value) -> wire::HostToolResult {
        wire::HostToolResult {
            turn_id: "t-1".into(),
            call_id: "c-1".into(),
            output,
            is_error: false,
        }
    }

    /// A link whose client pipelines: on `turn` it sends a host tool call, its next words and a
    /// completed `turn-end` at once, without waiting for the tool's result.
    struct Pipelining {
        handle: LinkHandle,
    }

    struct Allowed;

    #[async_trait]
    impl super::super::port::LinkAccess for Allowed {
        async fn recheck(&self) -> Result<(), AccessDenied> {
            Ok(())
        }
    }

    #[async_trait]
    impl AgentLinks for Pipelining {
        fn link_for(&self, _document: Uuid) -> Option<LinkHandle> {
            Some(self.handle.clone())
        }
    }

    fn pipelining_link() -> (Pipelining, tokio::task::JoinHandle<Vec<ServerMessage>>) {
        let (commands, mut rx) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            let mut routes: std::collections::BTreeMap<String, mpsc::Sender<ClientMessage>> =
                Default::default();
            let mut heard = Vec::new();
            while let Some(command) = rx.recv().await {
                match command {
                    LinkCommand::Route { key, to } => {
                        routes.insert(key, to);
                    }
                    LinkCommand::Unroute { key } => {
                        routes.remove(&key);
                    }
                    LinkCommand::Send(message) => {
                        match &*message {
                            ServerMessage::Start(start) => {
                                let to = &routes[&format!("session:{}", start.session_id)];
                                let started = wire::Started {
                                    session_id: start.session_id.clone(),
                                };
                                to.send(ClientMessage::Started(started)).await.unwrap();
                            }
                            ServerMessage::Turn(turn) => {
                                let to = &routes[&format!("turn:{}", turn.turn_id)];
                                let id = turn.turn_id.clone();
                                for frame in [
                                    ClientMessage::HostToolCall(wire::HostToolCall {
                                        turn_id: id.clone(),
                                        call_id: "c-1".into(),
                                        name: "read_plan".into(),
                                        input: serde_json::json!({}),
                                    }),
                                    ClientMessage::Part(wire::PartMessage {
                                        turn_id: id.clone(),
                                        part: wire::Part::Text(wire::TextPart {
                                            text: "said after the stop".into(),
                                        }),
                                    }),
                                    ClientMessage::TurnEnd(wire::TurnEnd {
                                        turn_id: id,
                                        status: TurnStatus::Completed,
                                        output: None,
                                        message: None,
                                    }),
                                ] {
                                    to.send(frame).await.unwrap();
                                }
                            }
                            _ => {}
                        }
                        heard.push(*message);
                    }
                }
            }
            heard
        });
        let handle = LinkHandle {
            commands,
            features: Vec::new(),
            access: Arc::new(Allowed),
            catalog: Arc::new(super::super::port::LinkCatalog::new(false)),
        };
        (Pipelining { handle }, task)
    }

    /// The host: its one tool stops the turn while it runs, and it keeps every part it is given.
    struct StoppingHost {
        control: std::sync::Mutex<Option<Arc<super::super::TurnControl>>>,
        parts: std::sync::Mutex<Vec<super::super::Part>>,
    }

    #[async_trait]
    impl super::super::TurnHost for StoppingHost {
        async fn execute(
            &self,
            _name: &str,
            _input: serde_json::Value,
            _cancel: super::super::CancelSignal,
        ) -> super::super::HostToolResult {
            if let Some(control) = self.control.lock().unwrap().as_ref() {
                control.cancel("the owner lost access mid-tool");
            }
            super::super::HostToolResult::ok(serde_json::json!("the plan"))
        }

        async fn part(&self, part: &super::super::Part) {
            self.parts.lock().unwrap().push(part.clone());
        }
    }

    /// RFC-54: a stop that comes while a host tool runs ends the turn stopped, and what the
    /// client already sent behind the call (read after the tool returns, before the stop's own
    /// branch) is not the turn's: no words reach the host, and a `turn-end` that says completed
    /// ends it aborted.
    #[tokio::test]
    async fn rfc_54_words_queued_behind_a_tool_the_stop_interrupted_never_reach_the_host() {
        use super::super::{run_turn, SessionRequest, TurnControl, TurnReport, TurnResult};
        let (links, _task) = pipelining_link();
        let harness = RemoteHarness::new(
            Arc::new(links),
            Uuid::nil(),
            Arc::new(crate::runtime::entropy::SeededEntropy::new(7)),
        );
        let (control, steer) = TurnControl::new(&harness);
        let control = Arc::new(control);
        let host = Arc::new(StoppingHost {
            control: std::sync::Mutex::new(Some(control.clone())),
            parts: Default::default(),
        });
        let turn = TurnRequest {
            instructions: "plan".into(),
            prompt: "@chopin go".into(),
            host_tools: vec![wire::ToolSpec {
                name: "read_plan".into(),
                description: "Read the plan.".into(),
                input_schema: serde_json::json!({ "type": "object" }),
            }],
            response_format: None,
            cancel: control.cancel_signal(),
            model: None,
            thinking_level: None,
            attachments: Vec::new(),
        };
        let session = SessionRequest {
            mode: SessionMode::Planner,
            model: None,
            thinking_level: None,
        };
        let report: TurnReport = run_turn(&harness, session, turn, steer, host.clone()).await;
        assert_eq!(report.result, TurnResult::Aborted, "{report:?}");
        let said: Vec<_> = host
            .parts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| matches!(p, super::super::Part::Text(_)))
            .cloned()
            .collect();
        assert!(
            said.is_empty(),
            "the model went on after the stop: {said:?}"
        );
    }

    #[test]
    fn a_host_tool_result_too_large_for_one_frame_is_answered_with_an_error_that_fits() {
        let small = result(serde_json::json!("fine"));
        assert_eq!(within_a_frame(small.clone(), "read_plan"), small);
        let big = result(serde_json::Value::String("x".repeat(MAX_FRAME_BYTES)));
        let answer = within_a_frame(big, "read_child");
        assert!(answer.is_error);
        assert_eq!(answer.call_id, "c-1");
        let words = answer.output.as_str().unwrap();
        assert!(words.starts_with("The result of read_child is "), "{words}");
        assert!(
            wire::encode(&ServerMessage::HostToolResult(answer.clone())).len() <= MAX_FRAME_BYTES
        );
    }
}
