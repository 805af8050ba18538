//! The fake harness: an in-process adapter whose "model" follows a script, for tests, the
//! simulator and the contract suite.
//!
//! Owns: [`FakeHarness`] (the adapter), [`FakeModel`] (the runtime and scripted model behind it,
//! which also records everything the model was given, so tests can check what crossed the
//! boundary) and [`Step`], a script as data (serde, so a scenario file can carry it).
//! Does not own: enforcement — the driver in [`super`] does that, so a misbehaving script shows
//! what the host catches.
//!
//! The fake honours built-in filtering (with [`FakeConfig::can_filter_builtins`] its built-ins
//! are never offered and a scripted call of one is answered "no such tool"), takes steer
//! messages only when [`FakeConfig::steer`] is set, and reports cancellation: a cancelled turn
//! ends [`TurnStatus::Aborted`] at its next step, or at once from [`Step::AwaitCancel`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    lock, Capabilities, FinishPart, FinishReason, Harness, HarnessError, HarnessSession, Part,
    SessionMode, SessionRequest, TextPart, ToolCallPart, ToolInputPart, ToolResultPart, TurnIo,
    TurnOutcome, TurnRequest, TurnStatus,
};

/// One thing the scripted model does in a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Step {
    /// Write text.
    Text {
        /// The text.
        text: String,
    },
    /// Write reasoning.
    Reasoning {
        /// The reasoning.
        text: String,
    },
    /// Call a tool by name through the host ([`TurnIo::call_host_tool`]); the result is what
    /// the model reads next.
    CallHostTool {
        /// The tool's name (need not be in the active set: that is for the host to refuse).
        name: String,
        /// Its input.
        input: Value,
    },
    /// Call one of the runtime's built-in tools. Runs only where built-ins are not filtered.
    CallBuiltin {
        /// The built-in's name.
        name: String,
        /// Its input.
        input: Value,
    },
    /// Give the turn's structured result (the last one given wins).
    Output {
        /// The result.
        value: Value,
    },
    /// Wait until the turn is cancelled, then end it aborted.
    AwaitCancel,
    /// Wait for a steer message and say `steered: <text>`; does nothing where the harness does
    /// not take steer messages.
    AwaitSteer,
    /// Fail the turn.
    Fail {
        /// Why.
        message: String,
    },
    /// The model reports what the turn used so far: the turn's `finish` part carries the sum.
    Usage {
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
    },
    /// The model's provider answers this HTTP status instead of the next model call. A model
    /// with no provider of its own (the fake, a scripted client) fails the turn at once with
    /// [`provider_error_words`]; an adapter that retries may call again (the next steps).
    ProviderError {
        /// The HTTP status: 401, 429, 500…
        status: u16,
        /// The `retry-after` the provider asks for, in seconds.
        retry_after_s: Option<u64>,
    },
    /// The model's answer breaks off here (the connection to its provider drops). A model with
    /// no provider of its own fails the turn with [`BREAK_OFF_WORDS`].
    BreakOff,
}

/// What a model with no provider of its own says for [`Step::ProviderError`].
pub fn provider_error_words(status: u16) -> String {
    format!("The model provider answered HTTP {status}, so this turn could not finish. Send the message again in a little while.")
}

/// What a model with no provider of its own says for [`Step::BreakOff`].
pub const BREAK_OFF_WORDS: &str =
    "The model's answer stopped partway through. Send the message again.";

/// How the fake harness presents itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeConfig {
    /// The runtime's built-in tools.
    pub builtins: Vec<String>,
    /// Whether sessions start with the built-ins off. Without it they are always offered.
    pub can_filter_builtins: bool,
    /// Whether turns take steer messages.
    pub steer: bool,
    /// Declared [`Capabilities::model_catalog`].
    pub model_catalog: bool,
    /// Declared [`Capabilities::images`].
    pub images: bool,
}

impl Default for FakeConfig {
    /// Built-ins like a coding runtime's (`read`, `bash`, `web_fetch`), filterable; steer taken.
    fn default() -> Self {
        FakeConfig {
            builtins: vec!["read".into(), "bash".into(), "web_fetch".into()],
            can_filter_builtins: true,
            steer: true,
            model_catalog: false,
            images: false,
        }
    }
}

/// A tool result as the model read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResultSeen {
    /// The tool called.
    pub name: String,
    /// What came back.
    pub output: Value,
    /// Whether it came back as an error.
    pub is_error: bool,
}

/// Everything the model was given in one turn, and what happened to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TurnSeen {
    /// The runtime session the turn ran on.
    pub session_id: String,
    /// The turn's instructions.
    pub instructions: String,
    /// The turn's prompt.
    pub prompt: String,
    /// Every tool the model was offered (host tools and any active built-in), with schemas.
    pub tools: Vec<super::ToolSpec>,
    /// The response format, if any.
    pub response_format: Option<Value>,
    /// Tool results the model read, in order.
    pub tool_results: Vec<ToolResultSeen>,
    /// Steer messages the model read.
    pub steers: Vec<String>,
    /// Built-ins that ran.
    pub builtin_runs: Vec<String>,
    /// The model saw the turn cancelled.
    pub cancelled: bool,
}

/// One runtime session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSeen {
    /// Its id.
    pub id: String,
    /// Planner or isolated.
    pub mode: SessionMode,
    /// The model asked for.
    pub model: Option<String>,
    /// The thinking level asked for.
    pub thinking_level: Option<String>,
    /// How many times the runtime was told to tear it down (an adapter should do so once).
    pub teardowns: u32,
}

#[derive(Debug, Default)]
struct ModelState {
    scripts: VecDeque<Vec<Step>>,
    turns: Vec<TurnSeen>,
    sessions: BTreeMap<String, SessionSeen>,
    running: usize,
}

/// The fake's runtime and model: scripts queued for the next turns, and a record of everything
/// the model was given. Its methods are the runtime's API, public so tests can build adapters of
/// their own on it.
#[derive(Debug, Default)]
pub struct FakeModel {
    state: Mutex<ModelState>,
    next_session: AtomicU64,
}

/// Decrements the running-turn count however a turn ends, including a dropped future.
struct Running<'a>(&'a FakeModel);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.running = state.running.saturating_sub(1);
    }
}

impl FakeModel {
    /// A model with no scripts queued.
    pub fn new() -> Arc<Self> {
        Arc::new(FakeModel::default())
    }

    /// Queue the script of a later turn. A turn with no script queued writes `ok` and finishes.
    pub fn push_script(&self, steps: Vec<Step>) {
        lock(&self.state).scripts.push_back(steps);
    }

    /// Open a runtime session; returns its id.
    pub fn open_session(&self, request: &SessionRequest) -> String {
        let id = format!(
            "fake-{}",
            self.next_session.fetch_add(1, Ordering::SeqCst) + 1
        );
        lock(&self.state).sessions.insert(
            id.clone(),
            SessionSeen {
                id: id.clone(),
                mode: request.mode,
                model: request.model.clone(),
                thinking_level: request.thinking_level.clone(),
                teardowns: 0,
            },
        );
        id
    }

    /// Tear a runtime session down. Not idempotent, like killing a process: every call counts.
    pub fn close_session(&self, id: &str) {
        if let Some(session) = lock(&self.state).sessions.get_mut(id) {
            session.teardowns += 1;
        }
    }

    /// Every session opened, by id.
    pub fn sessions(&self) -> Vec<SessionSeen> {
        lock(&self.state).sessions.values().cloned().collect()
    }

    /// Sessions opened and never torn down.
    pub fn live_sessions(&self) -> usize {
        lock(&self.state)
            .sessions
            .values()
            .filter(|s| s.teardowns == 0)
            .count()
    }

    /// Every turn the model ran, in order.
    pub fn turns(&self) -> Vec<TurnSeen> {
        lock(&self.state).turns.clone()
    }

    /// Turns started and not yet over.
    pub fn unfinished_turns(&self) -> usize {
        lock(&self.state).running
    }

    fn update(&self, index: usize, f: impl FnOnce(&mut TurnSeen)) {
        if let Some(turn) = lock(&self.state).turns.get_mut(index) {
            f(turn);
        }
    }

    /// Run one turn of the scripted model: `offered` is every tool the model is offered and
    /// `builtins` the built-ins among them that may run.
    pub async fn run(
        &self,
        session_id: &str,
        turn: TurnRequest,
        offered: Vec<super::ToolSpec>,
        builtins: &[String],
        steer: bool,
        io: TurnIo,
    ) -> TurnOutcome {
        let (index, script) = {
            let mut state = lock(&self.state);
            state.running += 1;
            state.turns.push(TurnSeen {
                session_id: session_id.to_owned(),
                instructions: turn.instructions.clone(),
                prompt: turn.prompt.clone(),
                tools: offered,
                response_format: turn.response_format.clone(),
                ..TurnSeen::default()
            });
            let script = state.scripts.pop_front().unwrap_or_else(|| {
                vec![Step::Text {
                    text: "ok".to_owned(),
                }]
            });
            (state.turns.len() - 1, script)
        };
        let _running = Running(self);
        let cancelled = || {
            self.update(index, |t| t.cancelled = true);
            TurnOutcome::aborted()
        };
        let mut output = None;
        let mut usage: Option<(u64, u64)> = None;
        for (n, step) in script.into_iter().enumerate() {
            if turn.cancel.is_cancelled() {
                return cancelled();
            }
            let call_id = format!("{session_id}-call-{n}");
            match step {
                Step::Text { text } => io.emit(Part::Text(TextPart { text })).await,
                Step::Reasoning { text } => io.emit(Part::Reasoning(TextPart { text })).await,
                Step::CallHostTool { name, input } => {
                    io.emit(Part::ToolInput(ToolInputPart {
                        tool_call_id: call_id,
                        tool_name: name.clone(),
                        delta: input.to_string(),
                    }))
                    .await;
                    let result = io.call_host_tool(&name, input).await;
                    self.update(index, |t| {
                        t.tool_results.push(ToolResultSeen {
                            name,
                            output: result.output,
                            is_error: result.is_error,
                        })
                    });
                }
                Step::CallBuiltin { name, input } => {
                    if builtins.contains(&name) {
                        io.emit(Part::ToolCall(ToolCallPart {
                            tool_call_id: call_id.clone(),
                            tool_name: name.clone(),
                            input,
                        }))
                        .await;
                        let result = json!({ "builtin": name, "ran": true });
                        io.emit(Part::ToolResult(ToolResultPart {
                            tool_call_id: call_id,
                            tool_name: name.clone(),
                            output: result.clone(),
                            is_error: false,
                        }))
                        .await;
                        self.update(index, |t| {
                            t.builtin_runs.push(name.clone());
                            t.tool_results.push(ToolResultSeen {
                                name,
                                output: result,
                                is_error: false,
                            });
                        });
                    } else {
                        self.update(index, |t| {
                            t.tool_results.push(ToolResultSeen {
                                output: json!(format!("no such tool: {name}")),
                                name,
                                is_error: true,
                            })
                        });
                    }
                }
                Step::Output { value } => output = Some(value),
                Step::AwaitCancel => {
                    turn.cancel.cancelled().await;
                    return cancelled();
                }
                Step::AwaitSteer if steer => {
                    let next = tokio::select! {
                        biased;
                        _ = turn.cancel.cancelled() => return cancelled(),
                        next = io.next_steer() => next,
                    };
                    if let Some(text) = next {
                        self.update(index, |t| t.steers.push(text.clone()));
                        io.emit(Part::Text(TextPart {
                            text: format!("steered: {text}"),
                        }))
                        .await;
                    }
                }
                Step::AwaitSteer => {}
                Step::Fail { message } => {
                    io.emit(Part::Error(super::ErrorPart {
                        message: message.clone(),
                    }))
                    .await;
                    return TurnOutcome::failed(message);
                }
                Step::Usage {
                    input_tokens,
                    output_tokens,
                } => {
                    let (i, o) = usage.unwrap_or((0, 0));
                    usage = Some((i + input_tokens, o + output_tokens));
                }
                Step::ProviderError { status, .. } => {
                    let message = provider_error_words(status);
                    io.emit(Part::Error(super::ErrorPart {
                        message: message.clone(),
                    }))
                    .await;
                    return TurnOutcome::failed(message);
                }
                Step::BreakOff => {
                    io.emit(Part::Error(super::ErrorPart {
                        message: BREAK_OFF_WORDS.to_owned(),
                    }))
                    .await;
                    return TurnOutcome::failed(BREAK_OFF_WORDS);
                }
            }
        }
        if turn.cancel.is_cancelled() {
            return cancelled();
        }
        io.emit(Part::Finish(FinishPart {
            finish_reason: FinishReason::Stop,
            usage: usage.map(|(i, o)| chopin_protocol::agent::Usage {
                input_tokens: Some(i),
                output_tokens: Some(o),
                reasoning_tokens: None,
                cached_input_tokens: None,
            }),
        }))
        .await;
        TurnOutcome {
            status: TurnStatus::Completed,
            output,
            message: None,
        }
    }
}

/// What [`FakeHarness::new`] is built from: its configuration and the model it drives.
#[derive(Debug, Clone, Default)]
pub struct FakeSetup {
    /// How it presents itself.
    pub config: FakeConfig,
    /// The scripted model (shared with whoever writes its scripts).
    pub model: Arc<FakeModel>,
}

/// The fake adapter.
#[derive(Debug, Clone)]
pub struct FakeHarness {
    setup: FakeSetup,
}

impl FakeHarness {
    /// A fake harness over `setup.model`.
    pub fn new(setup: FakeSetup) -> Self {
        FakeHarness { setup }
    }

    /// The model behind it.
    pub fn model(&self) -> &Arc<FakeModel> {
        &self.setup.model
    }
}

#[async_trait]
impl Harness for FakeHarness {
    fn name(&self) -> &str {
        "fake"
    }

    fn builtin_tools(&self) -> Vec<String> {
        self.setup.config.builtins.clone()
    }

    fn can_filter_builtins(&self) -> bool {
        self.setup.config.can_filter_builtins
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            steer: self.setup.config.steer,
            model_catalog: self.setup.config.model_catalog,
            images: self.setup.config.images,
        }
    }

    async fn start_session(
        &self,
        request: SessionRequest,
    ) -> Result<Box<dyn HarnessSession>, HarnessError> {
        let id = self.setup.model.open_session(&request);
        let active_builtins = if self.setup.config.can_filter_builtins {
            Vec::new()
        } else {
            self.setup.config.builtins.clone()
        };
        Ok(Box::new(FakeSession {
            id,
            model: self.setup.model.clone(),
            active_builtins,
            steer: self.setup.config.steer,
            destroyed: AtomicBool::new(false),
        }))
    }
}

/// A session of the fake harness.
#[derive(Debug)]
pub struct FakeSession {
    id: String,
    model: Arc<FakeModel>,
    active_builtins: Vec<String>,
    steer: bool,
    destroyed: AtomicBool,
}

#[async_trait]
impl HarnessSession for FakeSession {
    fn id(&self) -> &str {
        &self.id
    }

    async fn run_turn(&self, turn: TurnRequest, io: TurnIo) -> TurnOutcome {
        if self.destroyed.load(Ordering::SeqCst) {
            return TurnOutcome::failed("the session was destroyed");
        }
        let mut offered = turn.host_tools.clone();
        offered.extend(self.active_builtins.iter().map(|name| super::ToolSpec {
            name: name.clone(),
            description: format!("the runtime's built-in {name}"),
            input_schema: json!({ "type": "object" }),
        }));
        self.model
            .run(
                &self.id,
                turn,
                offered,
                &self.active_builtins,
                self.steer,
                io,
            )
            .await
    }

    async fn destroy(&self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            self.model.close_session(&self.id);
        }
    }
}
