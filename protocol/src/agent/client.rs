//! Client → server frames of the agent connection: [`ClientMessage`] and its payloads.
//!
//! Owns: the shapes a client may send. Does not own: whether a frame is allowed now — see
//! [`crate::agent::LinkOrder`] for the connection-level order and the server for the rest.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{is_false, HostInput, ToolSpec};
use super::feature::{Feature, OfferedFeature};

/// Every frame a client may send, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ClientMessage {
    /// The first frame: which document to hold the Planner of, and the features offered.
    Attach(Attach),
    /// The take-back of kept sessions after a reconnect (needs `resumable-sessions`); answered
    /// by the server's `resumed`. Not to be confused with the server's `resume` of runs.
    Resume(ClientResume),
    /// The client's models and commands (needs `capability-catalog`); each replaces the last.
    Catalog(Catalog),
    /// A session the server asked for with `start` is ready.
    Started(Started),
    /// A session the server asked for with `start` could not be started.
    StartFailed(StartFailed),
    /// The client's own tools for a turn, before it calls any of them.
    Tools(Tools),
    /// One part of a turn's stream: text, reasoning, own tool calls and results, step ends.
    Part(PartMessage),
    /// Run one of Chopin's host tools in the server; answered by `host-tool-result`.
    HostToolCall(HostToolCall),
    /// Ask people a question (becomes Decisions); answered by `input-result`.
    InputRequest(InputRequest),
    /// Take back a question the client no longer needs answered.
    InputCancel(InputCancel),
    /// The outcome of a server `stop` or `resume`.
    ControlResult(ControlResult),
    /// The state of the session's workflow runs, for Chat's run cards.
    Runs(Runs),
    /// A turn is over. Every turn ends with exactly one.
    TurnEnd(TurnEnd),
    /// The client leaves on purpose; the server closes with 1000 and keeps the ownership for
    /// the attach grace period.
    Detach(Detach),
}

impl ClientMessage {
    /// Every `type` a client may send, in declaration order.
    pub const TYPES: [&'static str; 14] = [
        "attach",
        "resume",
        "catalog",
        "started",
        "start-failed",
        "tools",
        "part",
        "host-tool-call",
        "input-request",
        "input-cancel",
        "control-result",
        "runs",
        "turn-end",
        "detach",
    ];

    /// This frame's `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            ClientMessage::Attach(_) => "attach",
            ClientMessage::Resume(_) => "resume",
            ClientMessage::Catalog(_) => "catalog",
            ClientMessage::Started(_) => "started",
            ClientMessage::StartFailed(_) => "start-failed",
            ClientMessage::Tools(_) => "tools",
            ClientMessage::Part(_) => "part",
            ClientMessage::HostToolCall(_) => "host-tool-call",
            ClientMessage::InputRequest(_) => "input-request",
            ClientMessage::InputCancel(_) => "input-cancel",
            ClientMessage::ControlResult(_) => "control-result",
            ClientMessage::Runs(_) => "runs",
            ClientMessage::TurnEnd(_) => "turn-end",
            ClientMessage::Detach(_) => "detach",
        }
    }

    /// The turn this frame belongs to, if it names one.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            ClientMessage::Tools(m) => Some(&m.turn_id),
            ClientMessage::Part(m) => Some(&m.turn_id),
            ClientMessage::HostToolCall(m) => Some(&m.turn_id),
            ClientMessage::InputRequest(m) => m.turn_id.as_deref(),
            ClientMessage::TurnEnd(m) => Some(&m.turn_id),
            _ => None,
        }
    }

    /// The session this frame belongs to, if it names one.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            ClientMessage::Started(m) => Some(&m.session_id),
            ClientMessage::StartFailed(m) => Some(&m.session_id),
            ClientMessage::InputRequest(m) => Some(&m.session_id),
            ClientMessage::Runs(m) => Some(&m.session_id),
            _ => None,
        }
    }
}

/// `attach`: the first frame of every connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attach {
    /// The protocol version; this crate speaks [`crate::agent::AGENT_PROTOCOL_VERSION`] (1).
    pub version: u32,
    /// The document: its id (a UUID) or its canonical URL (`/documents/<owner>/<repo>/<slug>`,
    /// absolute or relative to the server's origin).
    pub document: String,
    /// Which checkout the client runs in, for the server's logs. Identity only, never a
    /// secret, a local path or a machine name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout: Option<Checkout>,
    /// The features offered. Names this version does not know are ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<OfferedFeature>,
}

impl Attach {
    /// The offered features this version knows, each once, in offer order.
    pub fn known_features(&self) -> Vec<Feature> {
        let mut out: Vec<Feature> = Vec::new();
        for f in self.features.iter().filter_map(OfferedFeature::known) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
        out
    }

    /// The offered names this version does not know (ignored; worth a log line).
    pub fn unknown_features(&self) -> Vec<&str> {
        self.features
            .iter()
            .filter(|f| f.known().is_none())
            .map(OfferedFeature::as_str)
            .collect()
    }
}

/// The identity of the checkout a client runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkout {
    /// `owner/repo` of the checkout's origin.
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The full commit id checked out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Client `resume`: the sessions the client still holds from its last link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientResume {
    /// Session ids the client still has. Empty means it holds nothing, which ends the hold.
    pub sessions: Vec<String>,
}

/// `catalog`: what the client's Planner offers, for the composer's pickers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Catalog {
    /// Models, in the order to show them. A model listed twice is shown twice.
    #[serde(default)]
    pub models: Vec<CatalogModel>,
    /// Commands the Planner offers after `/`.
    #[serde(default)]
    pub commands: Vec<CatalogCommand>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogModel {
    /// The id sent back in `turn.model`, stored exactly as written.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// One line, e.g. the context size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Reasoning levels the model takes, sent back in `turn.thinkingLevel`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking_levels: Vec<String>,
    /// What the model reads: `text`, and `image` where it reads images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_types: Vec<String>,
    /// The model the client runs when a turn names none.
    #[serde(default, skip_serializing_if = "is_false")]
    pub default: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogCommand {
    /// Without the leading `/`.
    pub name: String,
    /// `prompt`, `skill`, `workflow` or another kind the client names.
    pub kind: String,
    /// One line.
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Started {
    pub session_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartFailed {
    pub session_id: String,
    /// Why, in words for the server's log and Chat.
    pub message: String,
}

/// `tools`: the client's own tools for one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tools {
    pub turn_id: String,
    /// Must not reuse a host tool's name; must be empty in an isolated session.
    pub tools: Vec<ToolSpec>,
}

/// `part`: one part of a turn's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartMessage {
    pub turn_id: String,
    pub part: Part,
}

/// The kinds of stream part a turn produces, tagged by `"type"` (the AI SDK's stream parts,
/// trimmed to what crosses this connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Part {
    /// Model text. Consecutive `text` parts of one step join into one Chat message.
    Text(TextPart),
    /// Model reasoning, shown as such and never published as a Chat message.
    Reasoning(TextPart),
    /// The model is still writing a tool call's input (a host or an own tool); informational.
    ToolInput(ToolInputPart),
    /// The model called one of the client's own tools, which the client runs.
    ToolCall(ToolCallPart),
    /// The result of one of the client's own tools.
    ToolResult(ToolResultPart),
    /// A model step ended.
    FinishStep(FinishPart),
    /// The model finished the turn's work (`turn-end` still follows).
    Finish(FinishPart),
    /// Something went wrong in the client's loop; the turn usually ends `failed` after it.
    Error(ErrorPart),
}

impl Part {
    /// Every part `type`, in declaration order.
    pub const TYPES: [&'static str; 8] = [
        "text",
        "reasoning",
        "tool-input",
        "tool-call",
        "tool-result",
        "finish-step",
        "finish",
        "error",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            Part::Text(_) => "text",
            Part::Reasoning(_) => "reasoning",
            Part::ToolInput(_) => "tool-input",
            Part::ToolCall(_) => "tool-call",
            Part::ToolResult(_) => "tool-result",
            Part::FinishStep(_) => "finish-step",
            Part::Finish(_) => "finish",
            Part::Error(_) => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TextPart {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolInputPart {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The next piece of the input's JSON text.
    pub delta: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallPart {
    pub tool_call_id: String,
    /// One of the tools declared with `tools` for this turn.
    pub tool_name: String,
    pub input: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolResultPart {
    pub tool_call_id: String,
    pub tool_name: String,
    pub output: Value,
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FinishPart {
    pub finish_reason: FinishReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Why a model step or the turn's work finished (the AI SDK's finish reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    Stop,
    Length,
    ContentFilter,
    ToolCalls,
    Error,
    Other,
}

/// Token counts, where the client knows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorPart {
    pub message: String,
}

/// `host-tool-call`: run one of the turn's host tools in the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostToolCall {
    pub turn_id: String,
    /// Chosen by the client; unique among the turn's calls. Echoed in `host-tool-result`.
    pub call_id: String,
    /// One of `turn.hostTools`.
    pub name: String,
    pub input: Value,
}

/// `input-request`: ask people one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputRequest {
    pub session_id: String,
    /// Chosen by the client; unique on this connection. Echoed in `input-result`.
    pub request_id: String,
    /// The turn that asks, if a turn does (a workflow stage may ask between turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The workflow run that asks, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The digest (`sha256:…`, as `read_plan` lists it) of the block the question concerns;
    /// its cards are placed right after that block if it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<String>,
    pub input: HostInput,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputCancel {
    pub request_id: String,
}

/// `control-result`: the outcome of a server `stop` or `resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlResult {
    /// The `requestId` of the `stop` or `resume` answered.
    pub request_id: String,
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `runs`: the state of a session's workflow runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Runs {
    pub session_id: String,
    /// Each entry replaces that run's card. Runs not listed keep their last report.
    pub runs: Vec<Run>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Run {
    pub run_id: String,
    pub name: String,
    pub status: RunStatus,
    /// The run's root, when this run was started by another (pausing a root holds answers to
    /// every question in its tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_run_id: Option<String>,
    /// How long the run has lasted, by the client's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Without `run-stage-deltas`: the run's stages (the latest ones at least), replacing
    /// those stored. With it: only stages new or changed since the last report, merged by
    /// `stageId`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
    /// Without `run-stage-deltas`: how many earlier stages exist that `stages` leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_stages: Option<u64>,
}

/// The state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Running,
    /// Waiting on Decisions (a question it asked).
    Waiting,
    Paused,
    Completed,
    Blocked,
    Failed,
    Stopped,
}

impl RunStatus {
    /// Running, waiting or paused: the session is kept after its turn while any run is live.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            RunStatus::Running | RunStatus::Waiting | RunStatus::Paused
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Stage {
    /// Unique within the run; the key deltas merge by.
    pub stage_id: String,
    pub name: String,
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_stage_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageStatus {
    Pending,
    Running,
    Waiting,
    Paused,
    Completed,
    Blocked,
    Failed,
    Stopped,
    Skipped,
}

/// `turn-end`: the turn is over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnEnd {
    pub turn_id: String,
    pub status: TurnStatus,
    /// The structured result, for a turn that carried `responseFormat` (background workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why, when the status is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnStatus {
    /// The turn's work is done.
    Completed,
    /// The turn stopped because the server sent `abort`.
    Aborted,
    /// The turn could not finish; `message` says why.
    Failed,
}

/// `detach`: no fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detach {}
