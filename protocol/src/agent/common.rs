//! Payload types used by both directions of the agent connection: tool specs and the questions
//! a Planner asks people (Atomic's HostInput calls) with their answers.
//!
//! Owns: shapes only. Does not own: turning a question into Decisions, or checking a tool's
//! input against its schema — the server does both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A tool a model may call: one of Chopin's host tools in `turn.hostTools`, or one of the
/// client's own in `tools.tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    /// The name the model calls it by; unique within a turn across host and own tools.
    pub name: String,
    /// What the tool does, in words for the model.
    pub description: String,
    /// A JSON Schema (an object) for the tool's input.
    pub input_schema: Value,
}

/// One question-to-people a Planner or a workflow stage asks (an Atomic HostInput call). The
/// server turns it into Decisions cards with the exact text given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum HostInput {
    /// Several questions at once, in order, each with options and always a written answer.
    Questionnaire(Questionnaire),
    /// A yes/no question; only Yes approves.
    Confirm(Confirm),
    /// Pick exactly one of the given choices.
    Select(Select),
    /// A one-line written answer.
    Input(TextPrompt),
    /// A longer written answer, optionally starting from `prefill`.
    Editor(EditorPrompt),
}

impl HostInput {
    pub fn kind(&self) -> &'static str {
        match self {
            HostInput::Questionnaire(_) => "questionnaire",
            HostInput::Confirm(_) => "confirm",
            HostInput::Select(_) => "select",
            HostInput::Input(_) => "input",
            HostInput::Editor(_) => "editor",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Questionnaire {
    pub questions: Vec<Question>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Question {
    /// The question, verbatim.
    pub question: String,
    /// A short label shown above the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The options offered, in order. May be empty: a written answer is always possible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<QuestionOption>,
    /// Whether several options may be chosen.
    #[serde(default, skip_serializing_if = "is_false")]
    pub multi_select: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuestionOption {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Markdown shown framed under the option (an image of the document's, a Mermaid diagram
    /// or a table); returned with the answer when chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Confirm {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Select {
    pub title: String,
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TextPrompt {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditorPrompt {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
}

/// How a question ended, in `input-result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputStatus {
    /// People answered; `answer` holds what they said.
    Answered,
    /// Closed unanswered by an earlier release's fixed expiry. Nothing expires questions now,
    /// but the status stays valid (RULINGS ATM-32).
    Expired,
    /// Withdrawn: the turn was aborted, the Planner stopped, the run cancelled, the document
    /// archived, or the client's own `input-cancel`.
    Cancelled,
    /// The question could not be asked, e.g. its cards would take the document past its size
    /// limit; `message` says why.
    Failed,
}

/// The answer to a [`HostInput`], of the same kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum InputAnswer {
    Questionnaire(QuestionnaireAnswer),
    Confirm(ConfirmAnswer),
    Select(SelectAnswer),
    Input(TextAnswer),
    Editor(TextAnswer),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuestionnaireAnswer {
    /// One entry per answered question (a question nobody answered is absent).
    pub answers: Vec<QuestionAnswer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuestionAnswer {
    /// 0-based index into `questions`.
    pub question_index: u32,
    pub kind: AnswerKind,
    /// The options chosen (kind `option`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ChosenOption>,
    /// The written answer (kinds `custom` and `chat`). Empty text is an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// What kind of answer a person gave to one question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerKind {
    /// One or more of the offered options.
    Option,
    /// Written text standing as the answer (single-select questions without previews).
    Custom,
    /// Written text that asks to keep discussing; never approval. Blank text asks to talk first.
    Chat,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChosenOption {
    /// 0-based index into the question's `options`.
    pub index: u32,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmAnswer {
    pub confirmed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectAnswer {
    /// One of the `options` exactly as offered.
    pub choice: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TextAnswer {
    pub text: String,
}
