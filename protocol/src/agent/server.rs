//! Server → client frames of the agent connection: [`ServerMessage`] and its payloads.
//!
//! Owns: the shapes the server sends. Does not own: when to send them — the server's agent link
//! decides, and [`crate::agent::LinkOrder::check_server`] lets a test client check it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::close;
use super::common::{is_false, InputAnswer, InputStatus, ToolSpec};
use super::fault::ErrorCode;
use super::feature::Feature;

/// Every frame the server may send, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ServerMessage {
    /// `attach` succeeded: the client holds the document's Planner.
    Attached(Attached),
    /// `attach` was refused; the server closes right after with the reason's close code.
    Refused(Refused),
    /// Start a Planner or isolated session; answer with `started` or `start-failed`.
    Start(Start),
    /// Run one turn on a started session; it ends with the client's `turn-end`.
    Turn(Turn),
    /// Stop a turn; the client ends it with `turn-end` (status `aborted`) as soon as it can.
    Abort(Abort),
    /// The result of a `host-tool-call`.
    HostToolResult(HostToolResult),
    /// The outcome of an `input-request`.
    InputResult(InputResult),
    /// Stop Planner: pause the session's live runs (or one), resumably; answer `control-result`.
    Stop(Stop),
    /// Resume Planner: resume the runs a stop paused (or one); answer `control-result`. Not to
    /// be confused with the client's `resume` of sessions.
    Resume(ServerResume),
    /// Let a session go; no answer.
    Destroy(Destroy),
    /// A person's message for the running turn (only with `steer-turn`).
    Steer(Steer),
    /// The answer to the client's `resume`: what it took back.
    Resumed(Resumed),
    /// Why the server is about to close the connection; the close follows at once.
    Error(ErrorFrame),
}

impl ServerMessage {
    /// Every `type` the server may send, in declaration order.
    pub const TYPES: [&'static str; 13] = [
        "attached",
        "refused",
        "start",
        "turn",
        "abort",
        "host-tool-result",
        "input-result",
        "stop",
        "resume",
        "destroy",
        "steer",
        "resumed",
        "error",
    ];

    /// This frame's `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            ServerMessage::Attached(_) => "attached",
            ServerMessage::Refused(_) => "refused",
            ServerMessage::Start(_) => "start",
            ServerMessage::Turn(_) => "turn",
            ServerMessage::Abort(_) => "abort",
            ServerMessage::HostToolResult(_) => "host-tool-result",
            ServerMessage::InputResult(_) => "input-result",
            ServerMessage::Stop(_) => "stop",
            ServerMessage::Resume(_) => "resume",
            ServerMessage::Destroy(_) => "destroy",
            ServerMessage::Steer(_) => "steer",
            ServerMessage::Resumed(_) => "resumed",
            ServerMessage::Error(_) => "error",
        }
    }

    /// The close code that must follow this frame at once, if any (`refused` and `error`).
    pub fn close_code(&self) -> Option<u16> {
        match self {
            ServerMessage::Refused(r) => Some(r.reason.close_code()),
            ServerMessage::Error(e) => Some(e.code.close_code()),
            _ => None,
        }
    }
}

/// `attached`: the answer to a successful `attach`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attached {
    /// The document's id (a UUID), whichever locator `attach` used.
    pub document_id: String,
    /// The document's canonical URL path.
    pub document_url: String,
    /// The GitHub login the client holds the Planner as.
    pub login: String,
    /// The ownership generation; the same after a reattach within the grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The features accepted: a subset of those offered, in [`Feature::ALL`]'s order.
    #[serde(default)]
    pub features: Vec<Feature>,
    /// Session ids the server keeps for this account from an earlier link. Non-empty only with
    /// `resumable-sessions`; the client then sends `resume` next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// The timers the server runs for this link.
    pub timers: Timers,
}

/// The server's timers, in milliseconds, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timers {
    /// How often the server sends a WebSocket ping.
    pub ping_interval_ms: u64,
    /// `AGENT_CONNECTION_TIMEOUT_MS`: a link that answers no ping for this long is closed as
    /// dropped.
    pub connection_timeout_ms: u64,
    /// `PLANNER_ATTACH_GRACE_MS`: how long a detached or dropped link's ownership is kept for
    /// the same account.
    pub attach_grace_ms: u64,
    /// How long a session may take to answer `start` before it is destroyed.
    pub start_timeout_ms: u64,
    /// How long after `abort` the server waits for `turn-end` before ending the turn itself.
    pub abort_wait_ms: u64,
    /// How often account and repository access are checked again while attached.
    pub access_recheck_ms: u64,
}

/// `refused`: the answer to an `attach` that cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Refused {
    pub reason: RefusalReason,
    /// Human words saying what to do.
    pub message: String,
    /// With `planner-attached`: the GitHub login holding the document's Planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// With `unavailable`: when to try again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// Why an `attach` was refused. Each maps to the close code that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// `version` is not one this server speaks → 4426.
    UnsupportedVersion,
    /// The account has no live browser sign-in since the server started → 4401.
    SignInRequired,
    /// The account cannot push to or administer the document's repository → 4403.
    NoWriteAccess,
    /// A sign-out, expiry or Planner reset landed while the attach was being checked → 4403.
    AccessRevoked,
    /// No such document, or it is archived → 4404.
    DocumentNotFound,
    /// Another client holds the document's Planner; `holder` names its login → 4409.
    PlannerAttached,
    /// The server cannot take the attach just now; `retryAfterMs` says when to retry → 1013.
    Unavailable,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 7] = [
        RefusalReason::UnsupportedVersion,
        RefusalReason::SignInRequired,
        RefusalReason::NoWriteAccess,
        RefusalReason::AccessRevoked,
        RefusalReason::DocumentNotFound,
        RefusalReason::PlannerAttached,
        RefusalReason::Unavailable,
    ];

    /// The kebab-case code, also the close frame's reason text.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::UnsupportedVersion => "unsupported-version",
            RefusalReason::SignInRequired => "sign-in-required",
            RefusalReason::NoWriteAccess => "no-write-access",
            RefusalReason::AccessRevoked => "access-revoked",
            RefusalReason::DocumentNotFound => "document-not-found",
            RefusalReason::PlannerAttached => "planner-attached",
            RefusalReason::Unavailable => "unavailable",
        }
    }

    pub fn close_code(self) -> u16 {
        match self {
            RefusalReason::UnsupportedVersion => close::UNSUPPORTED_VERSION,
            RefusalReason::SignInRequired => close::SIGN_IN_REQUIRED,
            RefusalReason::NoWriteAccess | RefusalReason::AccessRevoked => close::FORBIDDEN,
            RefusalReason::DocumentNotFound => close::NOT_FOUND,
            RefusalReason::PlannerAttached => close::PLANNER_ATTACHED,
            RefusalReason::Unavailable => close::TRY_AGAIN_LATER,
        }
    }
}

/// `start`: open a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Start {
    /// Chosen by the server; unique on this connection and across its resumes.
    pub session_id: String,
    pub mode: SessionMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// The document's Planner: host tools, the client's own tools, questions and runs.
    Planner,
    /// A background worker: only the host tools each turn offers, no own tools, no questions;
    /// its turns carry `responseFormat` and end with `output`.
    Isolated,
}

/// `turn`: run one turn on a started session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Turn {
    pub session_id: String,
    /// Chosen by the server; unique on this connection.
    pub turn_id: String,
    /// The user message of the turn.
    pub prompt: String,
    /// The system instructions for the turn.
    pub instructions: String,
    /// The host tools the model may call this turn, through `host-tool-call`.
    #[serde(default)]
    pub host_tools: Vec<ToolSpec>,
    /// A JSON Schema the turn's `turn-end.output` must satisfy (isolated workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// A model id from the client's catalog; absent: the client's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A reasoning level of that model (only with `capability-catalog`); absent: the model's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Files sent with the message (only with `attachments`); without the feature they are
    /// described in the prompt instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// A file sent with a Chat message, given to the turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Attachment {
    /// A PNG, JPEG, WebP or GIF, sent only where the turn's model reads images.
    Image(ImageAttachment),
    /// A UTF-8 text file.
    Text(TextAttachment),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageAttachment {
    pub id: String,
    pub name: String,
    /// `image/png`, `image/jpeg`, `image/webp` or `image/gif`.
    pub mime_type: String,
    /// Bytes before encoding.
    pub size: u64,
    /// The bytes, base64 (standard alphabet, padded).
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TextAttachment {
    pub id: String,
    pub name: String,
    /// Bytes of UTF-8.
    pub size: u64,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Abort {
    pub turn_id: String,
    /// Why, for the client's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostToolResult {
    pub turn_id: String,
    /// The `callId` of the `host-tool-call` answered.
    pub call_id: String,
    /// What to give the model: a JSON value, often a string.
    pub output: Value,
    /// The tool failed or was refused; `output` says why.
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputResult {
    /// The `requestId` of the `input-request` answered.
    pub request_id: String,
    pub status: InputStatus,
    /// With `answered`: the answer, of the request's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<InputAnswer>,
    /// With `failed` (and optionally `cancelled`): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `stop` (Stop Planner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Stop {
    /// Chosen by the server; echoed in `control-result`.
    pub request_id: String,
    pub session_id: String,
    /// Just this run; absent: every live run of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// Server `resume` (Resume Planner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerResume {
    /// Chosen by the server; echoed in `control-result`.
    pub request_id: String,
    pub session_id: String,
    /// Just this run; absent: every run a stop paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Destroy {
    pub session_id: String,
}

/// `steer`: a person's message for the running turn, read at its next step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Steer {
    pub turn_id: String,
    /// `@handle: text`, as the model should read it.
    pub text: String,
}

/// `resumed`: what the client took back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resumed {
    /// Sessions handed back. A session the client listed and this omits is gone: destroy it.
    pub sessions: Vec<String>,
    /// `requestId`s of questions still waited on. Any other question the client waited on is
    /// not: settle it as cancelled (its Decision stays open in the document).
    #[serde(default)]
    pub inputs: Vec<String>,
}

/// `error`: why the server closes the connection. The close follows at once, with
/// `code.close_code()` and the code as its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorFrame {
    pub code: ErrorCode,
    /// What was wrong, in words a client developer can act on.
    pub message: String,
    /// With `unavailable`: when to try again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// With `going-away`: how long the server keeps this link's sessions for its return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover_ms: Option<u64>,
}
