//! The deployment's decisions classifier: every complete Planner text message is checked
//! before Chat shows it, on every harness (COA-05).
//!
//! Owns: [`Classifier`] (the check, and the turn-taking judgment of automatic participation),
//! its two kinds — [`ModelClassifier`] (the operator's
//! `CLASSIFIER_MODEL`, called directly through the in-server adapter's provider wire, whatever
//! `HARNESS` is) and [`Builtin`] (the server's own rule, used when no model is configured) —
//! and what a check can come to: a [`Verdict`], or [`Unchecked`] when it could not be made.
//! Does not own: what happens to a withheld message (the Planner turn that wrote it).
//!
//! A check that fails, times out, is cut off or answers anything but the three judgments is
//! [`Unchecked`], and an unchecked message is never published (COA-10); an `uncertain` judgment
//! withholds it too.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::harness::{
    run_turn, CancelSignal, Harness, HostToolResult, Part, SessionMode, SessionRequest,
    TurnControl, TurnFailure, TurnHost, TurnRequest, TurnResult,
};

/// What the check judged a message to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An answer, a report, a summary: Chat shows it.
    Reply,
    /// It asks people for input in prose (a question, a choice, a confirmation): withheld, and
    /// the session is asked once to open Decision cards instead (COA-06).
    RequestForInput,
    /// The classifier could not tell: withheld (COA-10).
    Uncertain,
}

impl Verdict {
    /// Its name in the trace and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Reply => "reply",
            Verdict::RequestForInput => "request-for-input",
            Verdict::Uncertain => "uncertain",
        }
    }
}

/// Why a message could not be checked. Its message is withheld all the same (COA-10).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unchecked {
    /// No judgment within `CLASSIFIER_TIMEOUT_MS`.
    #[error("the check took longer than {0} ms")]
    TimedOut(u64),
    /// The classifier answered something that is not one of the judgments.
    #[error("the classifier's answer was malformed")]
    Malformed,
    /// The classifier gave no judgment at all.
    #[error("the classifier gave no judgment")]
    Missing,
    /// The check was stopped before it ended.
    #[error("the check was interrupted")]
    Interrupted,
    /// The classifier could not be reached or refused the call.
    #[error("the classifier failed: {0}")]
    Failed(String),
}

impl Unchecked {
    /// Its name in the trace and the metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Unchecked::TimedOut(_) => "timed-out",
            Unchecked::Malformed => "malformed",
            Unchecked::Missing => "missing",
            Unchecked::Interrupted => "interrupted",
            Unchecked::Failed(_) => "failed",
        }
    }
}

/// The check every complete Planner message passes before Chat shows it.
#[async_trait]
pub trait Classifier: Send + Sync {
    /// What `message` is, or why that could not be told.
    async fn classify(&self, message: &str) -> Result<Verdict, Unchecked>;

    /// The turn-taking judgment of automatic participation (CTX-01): whether the Planner should
    /// speak now that a conversation among people has gone quiet. `exchange` is its latest
    /// lines, oldest first (`@login: text` for people, `chopin: text` for the Planner).
    async fn take_turn(&self, exchange: &[String]) -> Result<bool, Unchecked>;
}

/// [`Builtin`]'s turn-taking judgment: the Planner speaks when a person's line since its own
/// last one calls it by name without `@` ("chopin, what do you think").
pub fn builtin_take_turn(exchange: &[String]) -> bool {
    exchange
        .iter()
        .rev()
        .take_while(|line| !line.starts_with(PLANNER_LINE))
        .any(|line| invites_by_name(line.split_once(": ").map_or(line.as_str(), |(_, t)| t)))
}

/// How the Planner's own lines start in an exchange.
pub const PLANNER_LINE: &str = "chopin: ";

/// Whether `text` names chopin as a word of its own, not as a handle (`@chopin`), a domain
/// (`chopin.dev`) or part of a longer word.
pub fn invites_by_name(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.match_indices("chopin").any(|(at, word)| {
        let before = lower[..at].chars().next_back();
        let mut after = lower[at + word.len()..].chars();
        let next = after.next();
        let domain = next == Some('.') && after.next().is_some_and(char::is_alphanumeric);
        before.is_none_or(|c| !c.is_alphanumeric() && c != '@' && c != '.' && c != '/')
            && next.is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '_')
            && !domain
    })
}

/// The server's own check, used where `CLASSIFIER_MODEL` is unset: a message asks for input
/// when, outside code and quoted lines, one of its sentences ends in a question mark or it asks
/// the reader to answer, choose, confirm or tell. It never says `uncertain`. Like any semantic
/// check it can misjudge language; a deployment that wants better configures a model.
pub struct Builtin;

/// Phrases that ask the reader for something (matched in lower case, at a word's start).
const ASKING: &[&str] = &[
    "let me know",
    "please confirm",
    "please choose",
    "please pick",
    "please tell me",
    "please answer",
    "please decide",
    "please clarify",
    "tell me which",
    "tell me whether",
    "i need you to",
    "i need your input",
    "i need to know",
    "could you",
    "can you tell",
    "would you like",
    "would you prefer",
    "do you want",
    "do you prefer",
    "which do you",
    "which would you",
];

/// [`Builtin`]'s judgment.
pub fn builtin_verdict(message: &str) -> Verdict {
    let mut in_code = false;
    for line in message.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        if in_code || trimmed.starts_with('>') || line.starts_with("    ") {
            continue;
        }
        let prose = without_inline_code(trimmed);
        if prose
            .split_inclusive(['.', '!', '?'])
            .any(|sentence| sentence.trim_end().ends_with('?'))
        {
            return Verdict::RequestForInput;
        }
        let lower = prose.to_lowercase();
        if ASKING.iter().any(|phrase| at_word_start(&lower, phrase)) {
            return Verdict::RequestForInput;
        }
    }
    Verdict::Reply
}

/// `line` without its `inline code` spans.
fn without_inline_code(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `phrase` occurs in `text` at the start of a word.
fn at_word_start(text: &str, phrase: &str) -> bool {
    text.match_indices(phrase).any(|(at, _)| {
        text[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric())
    })
}

#[async_trait]
impl Classifier for Builtin {
    async fn classify(&self, message: &str) -> Result<Verdict, Unchecked> {
        Ok(builtin_verdict(message))
    }

    async fn take_turn(&self, exchange: &[String]) -> Result<bool, Unchecked> {
        Ok(builtin_take_turn(exchange))
    }
}

/// The longest message given to the classifier model, in characters; a longer one is judged
/// by its start and end (where a request for input usually sits).
const MESSAGE_MAX_CHARS: usize = 16_000;

/// What the classifier model is told.
const INSTRUCTIONS: &str = "You check one message a planning assistant wants to post in a team's chat before anyone sees it. \
Judge whether the message asks the people in the chat for input: a question for them to answer, a choice for them to make, \
a confirmation or a clarification they must give. Answer \"request-for-input\" if it does, \"reply\" if it does not \
(an answer, a report, a plan, a summary, rhetorical or quoted questions), and \"uncertain\" only when you cannot tell. \
Give only the JSON object.";

/// What the classifier model is told for the turn-taking judgment.
const TURN_INSTRUCTIONS: &str = "You decide whether chopin, the planning assistant of a team's chat, should speak next. \
You are given the chat's latest lines, oldest first; chopin's own lines start with \"chopin:\". \
Answer {\"speak\": true} only when the latest lines ask chopin for something, by name or plainly, \
or leave a question about the plan that nobody is answering; answer {\"speak\": false} while the people are talking among themselves. \
Give only the JSON object.";

/// The turn-taking judgment's schema.
fn turn_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": { "speak": { "type": "boolean" } },
        "required": ["speak"],
        "additionalProperties": false
    })
}

/// The judgment's schema.
fn schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "judgment": { "type": "string", "enum": ["reply", "request-for-input", "uncertain"] }
        },
        "required": ["judgment"],
        "additionalProperties": false
    })
}

/// The operator's classifier model: one disposable session per check, with no tools, asked
/// for a structured judgment, within a deadline on tokio's clock (the simulator's in
/// scenarios).
pub struct ModelClassifier {
    harness: Arc<dyn Harness>,
    timeout_ms: u64,
}

impl ModelClassifier {
    pub fn new(harness: Arc<dyn Harness>, timeout_ms: u64) -> Self {
        ModelClassifier {
            harness,
            timeout_ms,
        }
    }
}

/// A check's turn has no host tools and shows nothing.
struct Silent;

#[async_trait]
impl TurnHost for Silent {
    async fn execute(&self, name: &str, _input: Value, _cancel: CancelSignal) -> HostToolResult {
        HostToolResult::error(format!("{name} is not offered to the classifier"))
    }
    async fn part(&self, _part: &Part) {}
}

/// `message`, bounded to [`MESSAGE_MAX_CHARS`]: its start and its end.
fn bounded(message: &str) -> String {
    let count = message.chars().count();
    if count <= MESSAGE_MAX_CHARS {
        return message.to_owned();
    }
    let half = MESSAGE_MAX_CHARS / 2;
    let head: String = message.chars().take(half).collect();
    let tail: String = message.chars().skip(count - half).collect();
    format!("{head}\n[…]\n{tail}")
}

impl ModelClassifier {
    /// One disposable session asked `prompt` under `instructions` for an object of `schema`
    /// (the visual admission check's assessments are asked for this way too).
    pub async fn structured(
        &self,
        instructions: &str,
        prompt: String,
        schema: Value,
    ) -> Result<Value, Unchecked> {
        self.judge(instructions, prompt, schema).await
    }

    /// One disposable session asked `prompt` under `instructions` for an object of `schema`.
    async fn judge(
        &self,
        instructions: &str,
        prompt: String,
        schema: Value,
    ) -> Result<Value, Unchecked> {
        let (control, steer) = TurnControl::new(&*self.harness);
        let turn = TurnRequest {
            instructions: instructions.to_owned(),
            prompt,
            host_tools: Vec::new(),
            response_format: Some(schema),
            cancel: control.cancel_signal(),
            model: None,
            thinking_level: None,
            attachments: Vec::new(),
        };
        let session = SessionRequest {
            mode: SessionMode::Isolated,
            model: None,
            thinking_level: None,
        };
        let checked = run_turn(&*self.harness, session, turn, steer, Arc::new(Silent));
        let report =
            match tokio::time::timeout(Duration::from_millis(self.timeout_ms), checked).await {
                Ok(report) => report,
                Err(_) => return Err(Unchecked::TimedOut(self.timeout_ms)),
            };
        match report.result {
            TurnResult::Completed {
                output: Some(output),
            } => Ok(output),
            TurnResult::Completed { output: None }
            | TurnResult::Failed(TurnFailure::OutputMissing) => Err(Unchecked::Missing),
            TurnResult::Failed(TurnFailure::OutputInvalid(_)) => Err(Unchecked::Malformed),
            TurnResult::Aborted => Err(Unchecked::Interrupted),
            TurnResult::Failed(failure) => {
                tracing::warn!(error = %failure, "the decisions classifier failed");
                Err(Unchecked::Failed(failure.to_string()))
            }
        }
    }
}

#[async_trait]
impl Classifier for ModelClassifier {
    async fn classify(&self, message: &str) -> Result<Verdict, Unchecked> {
        let output = self.judge(INSTRUCTIONS, bounded(message), schema()).await?;
        match output.get("judgment").and_then(Value::as_str) {
            Some("reply") => Ok(Verdict::Reply),
            Some("request-for-input") => Ok(Verdict::RequestForInput),
            Some("uncertain") => Ok(Verdict::Uncertain),
            _ => Err(Unchecked::Malformed),
        }
    }

    async fn take_turn(&self, exchange: &[String]) -> Result<bool, Unchecked> {
        let output = self
            .judge(
                TURN_INSTRUCTIONS,
                bounded(&exchange.join("\n")),
                turn_schema(),
            )
            .await?;
        output
            .get("speak")
            .and_then(Value::as_bool)
            .ok_or(Unchecked::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctx_02_the_builtin_turn_taking_speaks_when_a_person_calls_chopin_by_name() {
        for inviting in [
            "chopin, what do you think?",
            "Chopin can you draft the intro",
            "let's ask chopin.",
            "(chopin) any ideas",
        ] {
            assert!(invites_by_name(inviting), "{inviting}");
        }
        for not in [
            "@chopin draft it",
            "see chopin.dev for the docs",
            "chopinesque phrasing",
            "chopin-bot broke",
            "a nocturne by frederic",
        ] {
            assert!(!invites_by_name(not), "{not}");
        }
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(builtin_take_turn(&lines(&[
            "@mona: shall we split it?",
            "@lisa: chopin, which is simpler?",
            "@mona: good question",
        ])));
        assert!(
            !builtin_take_turn(&lines(&[
                "@lisa: chopin, which is simpler?",
                "chopin: The first.",
                "@mona: ok, thanks",
            ])),
            "already answered: only lines since its own count"
        );
        assert!(!builtin_take_turn(&lines(&[
            "@mona: shall we split it?",
            "@lisa: yes"
        ])));
    }

    #[test]
    fn coa_05_the_builtin_check_withholds_questions_and_requests_and_passes_replies() {
        for asking in [
            "Should the export include archived rows?",
            "I drafted the section. Which region ships first?",
            "Let me know which option you prefer.",
            "Please confirm the deadline.",
            "Could you say who owns billing.",
            "Two options:\n- keep it\n- drop it\nWould you like me to drop it",
        ] {
            assert_eq!(
                builtin_verdict(asking),
                Verdict::RequestForInput,
                "{asking}"
            );
        }
        for reply in [
            "I updated the Goals section.",
            "Done: the plan now lists three milestones.",
            "The user asked:\n> why is it slow?\nIt is slow because of the N+1 query.",
            "```sql\nselect 1 where x = ?;\n```\nThe query is fixed.",
            "Use `a ?: b` there.",
            "Escalating would be wrong here; I kept it.",
        ] {
            assert_eq!(builtin_verdict(reply), Verdict::Reply, "{reply}");
        }
    }
}
