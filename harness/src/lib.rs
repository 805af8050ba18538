//! The harness layer: the Rust shape of the RFC's HarnessV1 (harness-rfc.md §4–5) and the host
//! side of a turn, as a crate of its own: the server, the contract suite and every adapter depend
//! on it, and an adapter never depends on the server.
//!
//! Owns:
//! - [`Harness`] and [`HarnessSession`], the traits every adapter implements: declarations
//!   (name, built-in tools, whether it can filter them, [`Capabilities`]), starting a session
//!   from a [`SessionRequest`], running one prompt turn ([`HarnessSession::run_turn`]) and an
//!   idempotent [`HarnessSession::destroy`].
//! - [`TurnIo`], the adapter's only way back to the host during a turn: stream [`Part`]s, declare
//!   its own tools, call a host tool ([`TurnIo::call_host_tool`]) and read steer messages.
//! - [`run_turn`], the driver: the host side of every turn, for every adapter alike. It refuses an
//!   adapter with built-ins it cannot switch off, enforces the turn's active tool set (a call
//!   outside it fails the turn as a [`ToolBoundary`] failure, RFC-37), checks a host tool call's
//!   arguments against the tool's input schema before the host runs it (types, required
//!   properties, bounds; a mismatch is an error result for the model, never a crash or a run;
//!   properties the schema does not name are left to the host), checks structured output
//!   against the turn's schema, waits at most [`ABORT_WAIT_MS`] for an adapter to end a cancelled
//!   turn, and destroys the session after the turn, whatever happened (RFC-62).
//! - [`transport`], the port through which an adapter that calls a model over HTTP reaches it:
//!   the host hands the adapter its outbound connections (real sockets, or the simulator's),
//!   so an adapter opens none of its own.
//! - [`fake`], the test adapter, and [`schema`], the JSON Schema subset the driver checks
//!   structured output and host tool arguments against.
//! - [`Limits`], the bounds an adapter declares it keeps in every turn (model calls, how much of
//!   a tool result the model reads, retries), which the contract suite holds it to.
//!
//! Does not own: which host tools exist or what they do (the caller's [`TurnHost`] executes them,
//! under the permission checks of hosted-agent.md), projecting parts into Chat, or the code-owned
//! map from `HARNESS` names to adapters (the server's `harness::adapter`, RFC-14, RFC-18,
//! RFC-22: adapters are compiled in and chosen by name, never loaded at runtime).
//!
//! # Trust boundary
//!
//! An adapter runs the model's loop, and whatever it is given may reach the model (and, for the
//! `remote` adapter, a member's machine). So nothing given to an adapter carries a GitHub
//! credential: [`SessionRequest`] and [`TurnRequest`] have no field that could hold one, host
//! tools run in this process through [`TurnHost`] with the owner's token held host-side, and
//! only their results cross to the adapter (RFC-08, RFC-50, RFC-68). Model credentials are the
//! adapter's own business (`HARNESS_AUTH`), never Chopin's users'. The contract suite
//! (`chopin-contract`) plants a canary credential on the host and checks nothing the model sees
//! contains it; it can check declarations and what a session is given, not what an adapter's
//! runtime does internally — adding an adapter to the server's map is a reviewed security change
//! (RFC-66).
//!
//! # Sessions per turn
//!
//! [`run_turn`] starts a session, runs one turn and destroys it (harness-rfc.md 5.7). The
//! kept sessions of hosted-agent.md (RULINGS RFC-13/RFC-44: a remote session stays while a run is
//! live or a question waits) belong to the remote adapter's own session bookkeeping, behind the
//! same [`HarnessSession`]; this driver's contract is the per-turn one.

pub mod fake;
pub mod schema;
pub mod transport;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

pub use chopin_protocol::agent::{
    CatalogCommand, CatalogModel, ErrorPart, FinishPart, FinishReason, Part, SessionMode, TextPart,
    ToolBoundary, ToolCallPart, ToolInputPart, ToolResultPart, ToolSpec, TurnStatus, TurnTools,
};
pub use schema::SchemaViolation;

/// How long the host waits for an adapter to end a cancelled turn before it ends the turn itself
/// ("an abort waits briefly for the client's turn-end, then ends the turn anyway"). Same bound as
/// the agent connection's abort wait.
pub const ABORT_WAIT_MS: u64 = 5_000;

// ---------------------------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------------------------

/// The sending side of a turn's cancellation: whoever may stop a turn (the active owner's
/// signal, RFC-43/RFC-54; a Stop; shutdown; a tool boundary failure) holds one. Cancelling is
/// idempotent: the first reason given is the one every signal reports.
#[derive(Debug, Clone)]
pub struct CancelHandle {
    tx: Arc<watch::Sender<Option<String>>>,
}

/// The receiving side of a turn's cancellation, given to adapters in [`TurnRequest::cancel`].
/// Cheap to clone; every clone sees the same cancellation and its reason.
#[derive(Debug, Clone)]
pub struct CancelSignal {
    rx: watch::Receiver<Option<String>>,
}

/// A fresh, uncancelled pair.
pub fn cancel_pair() -> (CancelHandle, CancelSignal) {
    let (tx, rx) = watch::channel(None);
    (CancelHandle { tx: Arc::new(tx) }, CancelSignal { rx })
}

impl CancelHandle {
    /// Cancel, saying why (words for the adapter's log, e.g. the remote client's `abort`): every
    /// [`CancelSignal`] of this pair reports it from now on. A second cancel changes nothing.
    pub fn cancel(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.tx.send_if_modified(|slot| match slot {
            Some(_) => false,
            None => {
                *slot = Some(reason);
                true
            }
        });
    }

    /// Whether [`CancelHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// Another receiving side of this pair.
    pub fn signal(&self) -> CancelSignal {
        CancelSignal {
            rx: self.tx.subscribe(),
        }
    }
}

impl CancelSignal {
    /// A signal that never fires (its handle is already gone).
    pub fn never() -> Self {
        cancel_pair().1
    }

    /// Whether the turn was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Why the turn was cancelled, once it was.
    pub fn reason(&self) -> Option<String> {
        self.rx.borrow().clone()
    }

    /// Resolves once the turn is cancelled; never resolves if every handle is dropped uncancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(Option::is_some).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Declarations and requests
// ---------------------------------------------------------------------------------------------

/// What an adapter can do beyond running turns. Declarations the adapter makes about itself; the
/// contract suite checks them (RFC-66).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// A running turn takes a person's message at its next step ([`TurnIo::next_steer`]). The
    /// host never delivers a steer message to an adapter that does not declare this.
    pub steer: bool,
    /// The adapter reports a model catalog (models and thinking levels) for the composer.
    pub model_catalog: bool,
    /// Some model of the adapter reads images.
    pub images: bool,
}

/// Bounds an adapter keeps in every turn, declared so the contract suite can hold it to them.
/// `None`: the adapter keeps no such bound of its own (its model's client may).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The most model calls one turn makes (each round of tool calls takes one); a turn that
    /// needs more ends failed, saying so.
    pub max_model_calls: Option<usize>,
    /// The most bytes of one host tool result the model reads; a longer one is cut and ends
    /// with [`CUT_MARK`] and how much was left out.
    pub tool_result_max_bytes: Option<usize>,
    /// How often a model call that failed before the model said anything is sent again; never
    /// once the model has said something (an interrupted turn is not replayed, SES-27).
    pub retries: Option<u32>,
}

/// How a cut tool result ends: `[cut: N more bytes of this result were left out]`.
pub const CUT_MARK: &str = "[cut: ";

/// `text` cut to at most `max` bytes (on a character boundary) followed by a line saying how
/// much was left out, as [`Limits::tool_result_max_bytes`] documents; unchanged if it fits.
pub fn cut_result(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let end = (0..=max)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    let left = text.len() - end;
    format!(
        "{}\n{CUT_MARK}{left} more bytes of this result were left out]",
        &text[..end]
    )
}

/// What a session is started with. Deliberately small: there is no field for a GitHub
/// credential, a tools context or MCP servers (RFC-08), so no caller can hand one to an adapter.
/// Every built-in tool of the adapter is off in every session (RFC-07); there is no field to
/// switch one on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// Planner (host tools and, for clients that have them, their own tools) or isolated (a
    /// background worker: only the turn's host tools, structured output).
    pub mode: SessionMode,
    /// A harness-specific model id; `None`: the adapter's default.
    pub model: Option<String>,
    /// A reasoning level of that model; `None`: the model's own.
    pub thinking_level: Option<String>,
}

/// One prompt turn, as the adapter sees it. Fixed for the whole turn (RFC-42, RFC-61).
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// System instructions for the turn.
    pub instructions: String,
    /// The user message.
    pub prompt: String,
    /// The host tools of the turn's active set, and only those: the model may call exactly these
    /// through [`TurnIo::call_host_tool`].
    pub host_tools: Vec<ToolSpec>,
    /// A JSON Schema the turn's [`TurnOutcome::output`] must satisfy (isolated workers, RFC-09).
    pub response_format: Option<Value>,
    /// Fires when the host stops the turn; the adapter then ends it promptly as
    /// [`TurnStatus::Aborted`].
    pub cancel: CancelSignal,
    /// The model this turn runs, an id from the adapter's [`Catalog`]; `None`: the session's
    /// (its [`SessionRequest::model`], else the adapter's default). A field of the turn, so no
    /// turn sees another's (MOD-13).
    pub model: Option<String>,
    /// A reasoning level of the turn's model; `None`: the model's own. Read only with
    /// [`TurnRequest::model`] set.
    pub thinking_level: Option<String>,
    /// Files sent with the person's message, as the message's own parts (FILE-23): text files
    /// always, images only where the turn's model reads them (the host decided). Empty for a
    /// turn with none.
    pub attachments: Vec<TurnFile>,
}

/// A file sent with a Chat message, given to a turn (FILE-23).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnFile {
    /// A UTF-8 text file: a file part of type `text/plain`.
    Text {
        id: String,
        name: String,
        text: String,
    },
    /// A PNG, JPEG, WebP or GIF: an image part.
    Image {
        id: String,
        name: String,
        /// `image/png`, `image/jpeg`, `image/webp` or `image/gif`.
        mime_type: String,
        data: Vec<u8>,
    },
}

impl TurnFile {
    pub fn name(&self) -> &str {
        match self {
            TurnFile::Text { name, .. } | TurnFile::Image { name, .. } => name,
        }
    }
}

/// How an adapter says its turn ended (the agent connection's `turn-end`, 1:1).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// Completed, aborted (after [`TurnRequest::cancel`]) or failed.
    pub status: TurnStatus,
    /// The structured result of a turn that carried a response format.
    pub output: Option<Value>,
    /// Why, when failed.
    pub message: Option<String>,
}

impl TurnOutcome {
    /// A completed turn with an optional structured result.
    pub fn completed(output: Option<Value>) -> Self {
        TurnOutcome {
            status: TurnStatus::Completed,
            output,
            message: None,
        }
    }

    /// A turn ended because it was cancelled.
    pub fn aborted() -> Self {
        TurnOutcome {
            status: TurnStatus::Aborted,
            output: None,
            message: None,
        }
    }

    /// A turn that could not finish, and why.
    pub fn failed(message: impl Into<String>) -> Self {
        TurnOutcome {
            status: TurnStatus::Failed,
            output: None,
            message: Some(message.into()),
        }
    }
}

/// What a host tool call gives back to the model (the agent connection's `host-tool-result`
/// without its ids).
#[derive(Debug, Clone, PartialEq)]
pub struct HostToolResult {
    /// A JSON value, often a string.
    pub output: Value,
    /// The tool failed or was refused; `output` says why.
    pub is_error: bool,
}

impl HostToolResult {
    /// A successful result.
    pub fn ok(output: Value) -> Self {
        HostToolResult {
            output,
            is_error: false,
        }
    }

    /// A failed or refused call, with words for the model.
    pub fn error(message: impl Into<String>) -> Self {
        HostToolResult {
            output: Value::String(message.into()),
            is_error: true,
        }
    }
}

/// Why a session could not be started (the RFC's `OpenError`, less what belongs to host tools).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HarnessError {
    /// The adapter has built-ins it cannot switch off, so no Chopin session may run on it
    /// (RFC-07).
    #[error("harness \"{harness}\" has built-in tools it cannot switch off ({builtins})")]
    BuiltinsNotFilterable {
        /// The adapter's name.
        harness: String,
        /// Its built-ins, comma-separated.
        builtins: String,
    },
    /// The session asks for something the adapter does not support.
    #[error("harness-capability-unsupported: {capability}")]
    CapabilityUnsupported {
        /// What was asked for.
        capability: String,
    },
    /// The adapter's runtime could not start the session (remote: `start-failed`).
    #[error("the harness could not start a session: {message}")]
    StartFailed {
        /// Why, in the runtime's words.
        message: String,
    },
    /// The attached account lost its admission or its write access (AC-18): the session was
    /// not started, and the link is closed `access-revoked`.
    #[error("access-revoked: {message}")]
    AccessRevoked {
        /// Which, in words for the document's people.
        message: String,
    },
    /// No runtime to start it on right now (remote: no client attached, or GitHub could not be
    /// asked whether its account may start one).
    #[error("the harness is unavailable: {message}")]
    Unavailable {
        /// Why.
        message: String,
    },
    /// The server is shutting down.
    #[error("shutting-down")]
    ShuttingDown,
}

// ---------------------------------------------------------------------------------------------
// The adapter traits
// ---------------------------------------------------------------------------------------------

/// A harness adapter: the runtime that owns a model's agent loop (HarnessV1). Constructed once
/// by [`adapter`] and shared by every session.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The `HARNESS` name it is registered under.
    fn name(&self) -> &str;

    /// The names of the runtime's own tools (read, bash, web fetch…), which Chopin never
    /// activates. Empty for an adapter with none.
    fn builtin_tools(&self) -> Vec<String>;

    /// Whether every session can start with all of [`Harness::builtin_tools`] switched off. An
    /// adapter with built-ins that cannot is refused by [`run_turn`].
    fn can_filter_builtins(&self) -> bool;

    /// Steer, model catalog and images.
    fn capabilities(&self) -> Capabilities;

    /// The bounds it keeps in every turn. Default: none.
    fn limits(&self) -> Limits {
        Limits::default()
    }

    /// What it offers the composer now. Default: no model choice and no commands (MOD-12,
    /// CMD-07). An error: the catalog could not be read (MOD-32).
    async fn catalog(&self) -> Result<Offer, HarnessError> {
        Ok(Offer::Known(Catalog::none()))
    }

    /// Start a session with every built-in off. The caller destroys it after its turn.
    async fn start_session(
        &self,
        request: SessionRequest,
    ) -> Result<Box<dyn HarnessSession>, HarnessError>;
}

/// What an adapter offers for the composer's pickers now: the models a document's Planner may
/// be told to run and the commands it takes after `/` (hosted-agent.md, "Choosing the model and
/// reasoning level" and "Commands the Planner offers").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// In the adapter's order; a model listed twice is listed twice (MOD-07). Empty: no choice
    /// is offered (MOD-12, MOD-18).
    pub models: Vec<CatalogModel>,
    /// The Planner's own commands; `None`: the list could not be read, and the field is left
    /// out rather than failing the rest (CMD-09).
    pub commands: Option<Vec<CatalogCommand>>,
}

impl Catalog {
    /// Nothing to choose and no commands (MOD-12, CMD-07).
    pub fn none() -> Self {
        Catalog {
            models: Vec::new(),
            commands: Some(Vec::new()),
        }
    }

    /// The first entry with `id` (a choice of an id listed twice is the first entry's, MOD-07).
    pub fn model(&self, id: &str) -> Option<&CatalogModel> {
        self.models.iter().find(|m| m.id == id)
    }
}

/// What [`Harness::catalog`] knows.
#[derive(Clone)]
pub enum Offer {
    /// The catalog reported now.
    Known(Catalog),
    /// What the Planner offers is not known now: no client is attached, or one that offered a
    /// catalog has not reported it yet (MOD-27). `pending` is that client's, if one is
    /// attached: told when a turn has run for want of it (MOD-28).
    Unknown {
        pending: Option<Arc<dyn PendingCatalog>>,
    },
}

impl std::fmt::Debug for Offer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Offer::Known(c) => f.debug_tuple("Known").field(c).finish(),
            Offer::Unknown { pending } => f
                .debug_struct("Unknown")
                .field("pending", &pending.is_some())
                .finish(),
        }
    }
}

/// A catalog an attached client offered and has not reported.
pub trait PendingCatalog: Send + Sync {
    /// A turn ran without it and fell back: from now on the client counts as offering no
    /// models until it reports some (MOD-28, MOD-29).
    fn ran_without(&self);
}

/// One started session of an adapter.
#[async_trait]
pub trait HarnessSession: Send + Sync {
    /// The adapter's id for the session, for logs and the contract suite.
    fn id(&self) -> &str;

    /// Run one prompt turn. Offer the model [`TurnRequest::host_tools`] and nothing else; route
    /// its calls of them through [`TurnIo::call_host_tool`]; stream what happens through
    /// [`TurnIo::emit`]; end promptly with [`TurnStatus::Aborted`] once
    /// [`TurnRequest::cancel`] fires. Returns only when the runtime's turn is over.
    async fn run_turn(&self, turn: TurnRequest, io: TurnIo) -> TurnOutcome;

    /// Tear the session down. Idempotent: a second call does nothing.
    async fn destroy(&self);

    /// Whether the session can still take a turn (a remote session's link is still there).
    /// A session kept after its turn is reused only while it can.
    fn is_usable(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// The host side of a turn
// ---------------------------------------------------------------------------------------------

/// The host behind a turn: executes host tools (with the owner's credential, which stays here,
/// and the permission checks of hosted-agent.md) and receives the stream. Implemented by the
/// Chat service, the job runner, and the contract suite.
#[async_trait]
pub trait TurnHost: Send + Sync {
    /// Execute one host tool of the turn's active set (already checked by the driver). The
    /// future is dropped if the turn is cancelled while it runs.
    async fn execute(&self, name: &str, input: Value, cancel: CancelSignal) -> HostToolResult;

    /// One stream part the adapter produced, already checked against the turn's tools. May wait
    /// (the host publishing what a step said), which slows the adapter down rather than making
    /// anything queue without bound.
    async fn part(&self, part: &Part);
}

/// The host's side of a running turn's controls: cancel it and steer it.
#[derive(Debug)]
pub struct TurnControl {
    cancel: CancelHandle,
    steer: Option<mpsc::Sender<String>>,
}

/// Steer messages a turn may have waiting unread; past that a steer is refused as
/// [`SteerError::Full`] (the sender tries again), never held in memory.
pub const STEER_BACKLOG: usize = 64;

/// The adapter's side of a turn's steer messages, handed to [`run_turn`].
#[derive(Debug)]
pub struct SteerInbox {
    rx: Option<mpsc::Receiver<String>>,
}

/// Why a steer message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    /// The adapter does not declare [`Capabilities::steer`].
    #[error("this harness does not take steer messages")]
    Unsupported,
    /// The turn is over.
    #[error("the turn has ended")]
    TurnEnded,
    /// The turn has [`STEER_BACKLOG`] steer messages it has not read yet.
    #[error("the turn has not read the steer messages it was given yet")]
    Full,
}

impl TurnControl {
    /// Controls for a turn on `harness`; pass the [`SteerInbox`] to [`run_turn`] and
    /// [`TurnControl::cancel_signal`] as the turn's [`TurnRequest::cancel`].
    pub fn new(harness: &dyn Harness) -> (TurnControl, SteerInbox) {
        let (cancel, _) = cancel_pair();
        if harness.capabilities().steer {
            let (tx, rx) = mpsc::channel(STEER_BACKLOG);
            (
                TurnControl {
                    cancel,
                    steer: Some(tx),
                },
                SteerInbox { rx: Some(rx) },
            )
        } else {
            (
                TurnControl {
                    cancel,
                    steer: None,
                },
                SteerInbox { rx: None },
            )
        }
    }

    /// The signal to put in the turn's [`TurnRequest::cancel`].
    pub fn cancel_signal(&self) -> CancelSignal {
        self.cancel.signal()
    }

    /// Stop the turn, saying why.
    pub fn cancel(&self, reason: impl Into<String>) {
        self.cancel.cancel(reason);
    }

    /// A person's message for the running turn (`@handle: text`), read at its next step.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), SteerError> {
        match &self.steer {
            None => Err(SteerError::Unsupported),
            Some(tx) => tx.try_send(text.into()).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => SteerError::Full,
                mpsc::error::TrySendError::Closed(_) => SteerError::TurnEnded,
            }),
        }
    }
}

/// What the host concluded about a turn, after its own checks.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnResult {
    /// The work is done; `output` is the structured result, checked against the schema.
    Completed {
        /// Present when the turn carried a response format.
        output: Option<Value>,
    },
    /// The turn was cancelled and ended.
    Aborted,
    /// The turn failed.
    Failed(TurnFailure),
}

/// Why a turn failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TurnFailure {
    /// No session could be started.
    #[error("{0}")]
    Start(HarnessError),
    /// The model used a tool outside the turn's active set (RFC-37): a boundary failure.
    #[error("tool boundary failure: {0}")]
    Boundary(ToolBoundary),
    /// The turn carried a response format and ended with no output.
    #[error("the turn ended without the structured output its response format asks for")]
    OutputMissing,
    /// The output does not satisfy the response format.
    #[error("the structured output does not match its schema: {0}")]
    OutputInvalid(SchemaViolation),
    /// The adapter reported a failure.
    #[error("the harness failed the turn: {0}")]
    Adapter(String),
}

/// Who ended the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnder {
    /// No session was started.
    NotStarted,
    /// The adapter returned from [`HarnessSession::run_turn`].
    Adapter,
    /// The turn was cancelled and the adapter had not ended it after [`ABORT_WAIT_MS`]; the host
    /// ended it.
    AbortWait,
}

/// The driver's account of one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// The adapter's id of the session the turn ran on (destroyed by now).
    pub session_id: Option<String>,
    /// The host's verdict.
    pub result: TurnResult,
    /// Who ended it.
    pub ended_by: TurnEnder,
    /// Steer messages the turn was given but never read (it ended first), in the order given.
    /// The caller decides what becomes of them (MSG-17); none can be added once the report
    /// exists.
    pub unread_steers: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct IoShared {
    tools: Mutex<TurnTools>,
    /// Each host tool's input schema, where the schema checker can check all of it.
    schemas: std::collections::BTreeMap<String, Value>,
    host: Arc<dyn TurnHost>,
    boundary: Mutex<Option<ToolBoundary>>,
    /// The adapter's cancel: the caller's, or the driver's own on a boundary failure.
    cancel: CancelHandle,
    /// The caller's cancel, passed on to the adapter's at once whenever the host is called
    /// (so a stop that arrives while a host tool runs is seen as the tool returns, even by an
    /// adapter that does not yield in between).
    caller: CancelSignal,
    steer: tokio::sync::Mutex<SteerInbox>,
    ended: std::sync::atomic::AtomicBool,
}

impl IoShared {
    /// Closes the turn's steer inbox (a later steer is refused as [`SteerError::TurnEnded`])
    /// and takes what is still in it: messages given to the turn that it never read.
    fn unread_steers(&self) -> Vec<String> {
        let Ok(mut inbox) = self.steer.try_lock() else {
            // Only an adapter still waiting in `next_steer` holds it, and the turn is over.
            tracing::warn!("the turn's steer inbox is still held as the turn ends");
            return Vec::new();
        };
        let Some(rx) = inbox.rx.as_mut() else {
            return Vec::new();
        };
        rx.close();
        let mut unread = Vec::new();
        while let Ok(text) = rx.try_recv() {
            unread.push(text);
        }
        unread
    }
}

/// The adapter's handle on the host for one turn. Cheap to clone; inert once the turn is over.
#[derive(Clone)]
pub struct TurnIo {
    shared: Arc<IoShared>,
}

impl std::fmt::Debug for TurnIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnIo").finish_non_exhaustive()
    }
}

impl TurnIo {
    fn is_over(&self) -> bool {
        self.shared.ended.load(std::sync::atomic::Ordering::SeqCst)
            || lock(&self.shared.boundary).is_some()
    }

    /// Pass a cancel of the caller's on to the adapter's signal now.
    fn sync_cancel(&self) {
        if self.shared.caller.is_cancelled() && !self.shared.cancel.is_cancelled() {
            self.shared
                .cancel
                .cancel(self.shared.caller.reason().unwrap_or_default());
        }
    }

    fn fail(&self, boundary: ToolBoundary) {
        tracing::warn!(%boundary, "harness tool boundary failure; aborting the turn");
        let words = boundary.to_string();
        let mut slot = lock(&self.shared.boundary);
        if slot.is_none() {
            *slot = Some(boundary);
        }
        drop(slot);
        self.shared.cancel.cancel(words);
    }

    /// Stream one part to the host. A tool part naming a tool outside the turn's host tools and
    /// declared own tools fails the turn as a boundary failure (and is not forwarded). Parts
    /// after the turn is over are dropped.
    pub async fn emit(&self, part: Part) {
        if self.is_over() {
            return;
        }
        let check = {
            let tools = lock(&self.shared.tools);
            match &part {
                Part::ToolCall(ToolCallPart { tool_name, .. })
                | Part::ToolResult(ToolResultPart { tool_name, .. }) => {
                    tools.check_own_call(tool_name)
                }
                Part::ToolInput(ToolInputPart { tool_name, .. }) => {
                    match tools.check_host_call(tool_name) {
                        Ok(()) => Ok(()),
                        // With no own tools declared, the model can only mean a host tool.
                        Err(not_host) if tools.own().is_none() => Err(not_host),
                        Err(_) => tools.check_own_call(tool_name),
                    }
                }
                _ => Ok(()),
            }
        };
        match check {
            Ok(()) => self.shared.host.part(&part).await,
            Err(boundary) => self.fail(boundary),
        }
    }

    /// Declare the model's own tools for this turn (a remote client's `tools` frame), before it
    /// calls any. Refused in isolated sessions and for a name that shadows a host tool; a refusal
    /// fails the turn.
    pub fn declare_tools(&self, tools: Vec<ToolSpec>) -> Result<(), ToolBoundary> {
        let declared = lock(&self.shared.tools).declare(&tools);
        if let Err(boundary) = &declared {
            self.fail(boundary.clone());
        }
        declared
    }

    /// Ask the host to run one of the turn's host tools. A name outside the active set fails the
    /// turn as a boundary failure and answers the model with an error; a cancelled turn answers
    /// with an error and stops the tool.
    pub async fn call_host_tool(&self, name: &str, input: Value) -> HostToolResult {
        if self.is_over() {
            return HostToolResult::error("the turn has ended");
        }
        let checked = lock(&self.shared.tools).check_host_call(name);
        if let Err(boundary) = checked {
            let message = boundary.to_string();
            self.fail(boundary);
            return HostToolResult::error(message);
        }
        if let Some(schema) = self.shared.schemas.get(name) {
            if let Err(violation) = schema::validate(schema, &input) {
                tracing::info!(tool = name, %violation, "a host tool call's arguments do not match its schema; the model is told");
                return HostToolResult::error(arguments_refused(name, &violation));
            }
        }
        self.sync_cancel();
        let cancel = self.shared.cancel.signal();
        let span = tracing::info_span!("host_tool", tool = name);
        let result = tokio::select! {
            biased;
            result = self.shared.host.execute(name, input, cancel.clone()).instrument(span) => result,
            _ = cancel.cancelled() => HostToolResult::error("the turn was cancelled"),
        };
        self.sync_cancel();
        result
    }

    /// The next steer message if one is waiting; `None` otherwise (and always for an adapter
    /// that does not declare steer).
    pub fn try_steer(&self) -> Option<String> {
        let mut inbox = self.shared.steer.try_lock().ok()?;
        inbox.rx.as_mut()?.try_recv().ok()
    }

    /// Wait for the next steer message; `None` once no more can come (steer not declared, the
    /// host dropped its [`TurnControl`], or the turn is over).
    pub async fn next_steer(&self) -> Option<String> {
        if self.is_over() {
            return None;
        }
        let mut inbox = self.shared.steer.lock().await;
        inbox.rx.as_mut()?.recv().await
    }
}

/// The words a model reads when its arguments for `tool` do not match the tool's schema: the
/// call did not run, and it may call again.
pub fn arguments_refused(tool: &str, violation: &schema::SchemaViolation) -> String {
    format!("{tool} did not run: its arguments do not match its input schema ({violation}). Call it again with arguments that do.")
}

/// The input schemas of `tools` that [`schema::validate`] can check whole, with their objects
/// opened ([`schema::open_objects`]: an extra property is the host's to judge); a tool whose
/// schema uses a keyword outside the subset runs unchecked here (its host still checks its
/// input).
fn checked_schemas(tools: &[ToolSpec]) -> std::collections::BTreeMap<String, Value> {
    tools
        .iter()
        .filter(|t| match schema::checkable(&t.input_schema) {
            Ok(()) => true,
            Err(why) => {
                tracing::debug!(tool = %t.name, %why, "a host tool's schema is outside the checked subset; its calls are not checked by the driver");
                false
            }
        })
        .map(|t| (t.name.clone(), schema::open_objects(&t.input_schema)))
        .collect()
}

/// Refuse an adapter whose built-ins cannot be switched off (RFC-07).
pub fn check_builtins(harness: &dyn Harness) -> Result<(), HarnessError> {
    let builtins = harness.builtin_tools();
    if builtins.is_empty() || harness.can_filter_builtins() {
        Ok(())
    } else {
        Err(HarnessError::BuiltinsNotFilterable {
            harness: harness.name().to_owned(),
            builtins: builtins.join(", "),
        })
    }
}

/// Run one turn on a fresh session of `harness`, with the host's enforcement, and destroy the
/// session afterwards (exactly once, whatever happened). `steer` comes from the same
/// [`TurnControl::new`] whose [`TurnControl::cancel_signal`] is `turn.cancel`.
pub async fn run_turn(
    harness: &dyn Harness,
    session: SessionRequest,
    turn: TurnRequest,
    steer: SteerInbox,
    host: Arc<dyn TurnHost>,
) -> TurnReport {
    let not_started = |error: HarnessError| TurnReport {
        session_id: None,
        result: TurnResult::Failed(TurnFailure::Start(error)),
        ended_by: TurnEnder::NotStarted,
        unread_steers: Vec::new(),
    };
    if let Err(error) = check_builtins(harness) {
        return not_started(error);
    }
    let mode = session.mode;
    let started = match harness.start_session(session).await {
        Ok(started) => started,
        Err(error) => return not_started(error),
    };
    let session_id = started.id().to_owned();
    let span = tracing::info_span!("harness_turn", harness = harness.name(), session = %session_id);

    let (inner_cancel, inner_signal) = cancel_pair();
    let caller_cancel = turn.cancel.clone();
    let shared = Arc::new(IoShared {
        tools: Mutex::new(TurnTools::new(mode, &turn.host_tools)),
        schemas: checked_schemas(&turn.host_tools),
        host,
        boundary: Mutex::new(None),
        cancel: inner_cancel.clone(),
        caller: turn.cancel.clone(),
        steer: tokio::sync::Mutex::new(steer),
        ended: std::sync::atomic::AtomicBool::new(false),
    });
    let io = TurnIo {
        shared: shared.clone(),
    };
    let response_format = turn.response_format.clone();
    let adapter_turn = TurnRequest {
        cancel: inner_signal.clone(),
        ..turn
    };

    let ended = {
        let run = started.run_turn(adapter_turn, io);
        let link_cancel = async {
            caller_cancel.cancelled().await;
            inner_cancel.cancel(caller_cancel.reason().unwrap_or_default());
            std::future::pending::<()>().await;
        };
        let abort_wait = async {
            inner_signal.cancelled().await;
            tokio::time::sleep(Duration::from_millis(ABORT_WAIT_MS)).await;
        };
        async {
            tokio::select! {
                biased;
                outcome = run => Some(outcome),
                _ = link_cancel => None,
                _ = abort_wait => None,
            }
        }
        .instrument(span.clone())
        .await
    };
    shared
        .ended
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let unread_steers = shared.unread_steers();
    started.destroy().instrument(span).await;

    let boundary = lock(&shared.boundary).clone();
    let (result, ended_by) = match (boundary, ended) {
        (Some(boundary), ended) => (
            TurnResult::Failed(TurnFailure::Boundary(boundary)),
            ender(&ended),
        ),
        (None, None) => (TurnResult::Aborted, TurnEnder::AbortWait),
        (None, Some(outcome)) => (judge(outcome, response_format.as_ref()), TurnEnder::Adapter),
    };
    TurnReport {
        session_id: Some(session_id),
        result,
        ended_by,
        unread_steers,
    }
}

fn ender(ended: &Option<TurnOutcome>) -> TurnEnder {
    if ended.is_some() {
        TurnEnder::Adapter
    } else {
        TurnEnder::AbortWait
    }
}

fn judge(outcome: TurnOutcome, response_format: Option<&Value>) -> TurnResult {
    match outcome.status {
        TurnStatus::Aborted => TurnResult::Aborted,
        TurnStatus::Failed => TurnResult::Failed(TurnFailure::Adapter(
            outcome
                .message
                .unwrap_or_else(|| "no reason given".to_owned()),
        )),
        TurnStatus::Completed => match (response_format, outcome.output) {
            (None, output) => TurnResult::Completed { output },
            (Some(_), None) => TurnResult::Failed(TurnFailure::OutputMissing),
            (Some(schema), Some(output)) => match schema::validate(schema, &output) {
                Ok(()) => TurnResult::Completed {
                    output: Some(output),
                },
                Err(violation) => TurnResult::Failed(TurnFailure::OutputInvalid(violation)),
            },
        },
    }
}

/// The names of a list of tool specs, sorted, for comparisons that ignore order.
pub fn tool_names(tools: &[ToolSpec]) -> BTreeSet<String> {
    tools.iter().map(|t| t.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steers_a_turn_has_not_read_are_bounded_and_the_next_is_refused_as_full() {
        let harness = fake::FakeHarness::new(fake::FakeSetup::default());
        assert!(
            harness.capabilities().steer,
            "the fake takes steers by default"
        );
        let (control, inbox) = TurnControl::new(&harness);
        for n in 0..STEER_BACKLOG {
            assert_eq!(control.steer(format!("@mona: {n}")), Ok(()));
        }
        assert_eq!(control.steer("@mona: one more"), Err(SteerError::Full));
        drop(inbox);
        assert_eq!(control.steer("@mona: late"), Err(SteerError::TurnEnded));
    }
}
