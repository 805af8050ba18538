//! Decisions written in the source: the one restricted syntax a Decision block has.
//!
//! Owns: reading and validating a Decision block, and listing a document's Decisions. A Decision
//! block is a fenced code block whose info string is exactly `decision`; its body is one
//! `key: value` per line:
//!
//! ~~~text
//! ```decision
//! id: harbour-quay
//! state: open
//! question: Which quay do we survey first?
//! option: North quay
//! option: South quay
//! answer: @mona: North quay, the crane is there.
//! ```
//! ~~~
//!
//! A fence is kept as it is by every Markdown editor and renders as a readable box where
//! Decisions are not understood, and a line format needs no escaping. Lines are counted inside
//! the fence: line 1 is the first line after the opening fence. Does not own: the counters,
//! cards or storage of questions (the server's), nor any other fence language.

use serde::Serialize;

use crate::blocks::{Block, BlockKind, DECISION_INFO};

/// Most characters an `id` may have.
pub const ID_MAX_CHARS: usize = 64;
/// Most characters a `question`, `option` or answer text may have: as much as one edit of the
/// shared draft carries (64 KiB). How many options and answers a Decision has is bounded only
/// by the document's own size limit (ATM-39: a Planner's question is held to no per-field
/// count).
pub const TEXT_MAX_CHARS: usize = 64 * 1024;
/// Most characters of a GitHub login.
pub const LOGIN_MAX_CHARS: usize = 39;
/// Every key a Decision block may hold, as errors list them.
pub const KEYS: &str =
    "id, state, header, question, about, applied, multi, hint, prefill, option, detail, preview, answer, chose";

/// Where a Decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionState {
    Open,
    Answered,
    Resolved,
    /// Kept readable for cards an earlier release closed; nothing expires a Decision now.
    Expired,
}

impl DecisionState {
    pub fn name(self) -> &'static str {
        match self {
            DecisionState::Open => "open",
            DecisionState::Answered => "answered",
            DecisionState::Resolved => "resolved",
            DecisionState::Expired => "expired",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "open" => DecisionState::Open,
            "answered" => DecisionState::Answered,
            "resolved" => DecisionState::Resolved,
            "expired" => DecisionState::Expired,
            _ => return None,
        })
    }
}

/// One person's answer: `answer: @login: text` (written), or `chose: @login: label` (one of the
/// Decision's options, by its label).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub login: String,
    /// The written text, or the label of the option chosen. Written text may be empty.
    pub text: String,
    /// True for `chose:` — the text is an option's label, not something written.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chose: bool,
}

impl Answer {
    /// A written answer.
    pub fn written(login: &str, text: &str) -> Self {
        Answer {
            login: login.to_owned(),
            text: text.to_owned(),
            chose: false,
        }
    }

    /// The option labelled `label`, chosen.
    pub fn chose(login: &str, label: &str) -> Self {
        Answer {
            login: login.to_owned(),
            text: label.to_owned(),
            chose: true,
        }
    }
}

/// One choice a Decision offers: `option:`, optionally followed by its `detail:` (a line that
/// describes it) and its `preview:` (Markdown shown under it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecisionOption {
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

impl DecisionOption {
    pub fn new(label: &str) -> Self {
        DecisionOption {
            label: label.to_owned(),
            detail: None,
            preview: None,
        }
    }
}

/// A valid Decision block, read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub id: String,
    pub state: DecisionState,
    pub question: String,
    /// A short label shown above the question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    pub options: Vec<DecisionOption>,
    /// Whether one person may choose several options (`multi: yes`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub multi: bool,
    /// Words that help answer it (a placeholder, a confirmation's message), verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The text a written answer starts from (an editor's initial text), verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
    /// The digest (`sha256:…`) of the block the Decision is about, when it is linked to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
    /// How many of its answers the passage it is about already reflects (`applied: N`),
    /// written with the passage by the prose update that reflected them (COA-17).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<u64>,
    pub answers: Vec<Answer>,
}

impl Decision {
    /// An open Decision with only its question.
    pub fn open(id: &str, question: &str) -> Self {
        Decision {
            id: id.to_owned(),
            state: DecisionState::Open,
            question: question.to_owned(),
            header: None,
            options: Vec::new(),
            multi: false,
            hint: None,
            prefill: None,
            about: None,
            applied: None,
            answers: Vec::new(),
        }
    }

    /// The index of the option labelled `label`.
    pub fn option_index(&self, label: &str) -> Option<usize> {
        self.options.iter().position(|o| o.label == label)
    }

    /// The block's text, fences included and ending in a newline, in the canonical order of
    /// keys. A value that a plain line would not keep (empty, several lines, space at either
    /// end, or starting with `"`) is written as a JSON string.
    pub fn render(&self) -> String {
        let mut out = String::from("```decision\n");
        let mut line = |key: &str, value: &str| {
            out.push_str(key);
            out.push_str(": ");
            out.push_str(&line_value(value));
            out.push('\n');
        };
        line("id", &self.id);
        line("state", self.state.name());
        if let Some(header) = &self.header {
            line("header", header);
        }
        line("question", &self.question);
        if let Some(about) = &self.about {
            line("about", about);
        }
        if let Some(applied) = self.applied {
            line("applied", &applied.to_string());
        }
        if self.multi {
            line("multi", "yes");
        }
        if let Some(hint) = &self.hint {
            line("hint", hint);
        }
        if let Some(prefill) = &self.prefill {
            line("prefill", prefill);
        }
        for option in &self.options {
            line("option", &option.label);
            if let Some(detail) = &option.detail {
                line("detail", detail);
            }
            if let Some(preview) = &option.preview {
                line("preview", preview);
            }
        }
        for answer in &self.answers {
            let key = if answer.chose { "chose" } else { "answer" };
            out.push_str(&format!(
                "{key}: @{}: {}\n",
                answer.login,
                line_value(&answer.text)
            ));
        }
        out.push_str("```\n");
        out
    }
}

/// `value` as one line of a Decision block: as it is, or as a JSON string when a plain line
/// would not keep it.
fn line_value(value: &str) -> String {
    let plain = !value.is_empty()
        && !value.starts_with('"')
        && value.trim() == value
        && !value.contains(['\n', '\r']);
    if plain {
        value.to_owned()
    } else {
        serde_json::Value::String(value.to_owned()).to_string()
    }
}

/// A value read from a Decision line: a JSON string (`"…"`, which may hold line breaks or be
/// empty) is decoded; anything else is the text as written.
fn read_value(value: &str) -> String {
    if value.starts_with('"') {
        if let Ok(decoded) = serde_json::from_str::<String>(value) {
            return decoded;
        }
    }
    value.to_owned()
}

/// A Decision as the document's list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecisionSummary {
    pub id: String,
    pub state: DecisionState,
    /// The question.
    pub title: String,
    /// Index of the block that holds it.
    pub block: usize,
}

/// Why a Decision block is not valid, with the line inside the fence where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionError {
    /// 1-based line counted inside the fence (the first line after the opening fence is 1);
    /// `None` when the problem is the block as a whole.
    pub line: Option<usize>,
    pub problem: DecisionProblem,
}

impl std::fmt::Display for DecisionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "Decision block line {line}: {}", self.problem),
            None => write!(f, "Decision block: {}", self.problem),
        }
    }
}

impl std::error::Error for DecisionError {}

/// What is wrong in a Decision block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionProblem {
    #[error("a Decision is a fenced code block (``` or ~~~) with the info string `decision`")]
    NotFenced,
    #[error("the info string must be exactly `decision`, not `{0}`")]
    InfoString(String),
    #[error("the fence is not closed")]
    NotClosed,
    #[error("expected `key: value` (keys: {KEYS})")]
    NotKeyValue,
    #[error("unknown key `{0}` (keys: {KEYS})")]
    UnknownKey(String),
    #[error("`{0}` describes the option before it, so it must follow an `option:` line (once)")]
    OptionNote(&'static str),
    #[error("`multi` is `yes` or `no`, not `{0}`")]
    BadMulti(String),
    #[error("`applied: {0}` is not a whole number of answers")]
    BadApplied(String),
    #[error("`chose: @{login}: {label}` names no option of this Decision")]
    NoSuchOption { login: String, label: String },
    #[error("`{0}` appears more than once")]
    Repeated(&'static str),
    #[error("`{0}` is empty")]
    Empty(&'static str),
    #[error("`{key}` is longer than {max} characters")]
    TooLong { key: &'static str, max: usize },
    #[error("the id may hold only letters, digits, `-` and `_`, starting with a letter or digit")]
    BadId,
    #[error("unknown state `{0}` (states: open, answered, resolved, expired)")]
    BadState(String),
    #[error("an answer is `answer: @login: text` or `chose: @login: option`")]
    BadAnswer,
    #[error("`{0}` is not a GitHub login")]
    BadLogin(String),
    #[error("option `{0}` is listed twice")]
    DuplicateOption(String),
    #[error("the block has no `{0}:` line")]
    Missing(&'static str),
    #[error("state `{0}` needs at least one `answer:` line")]
    NeedsAnswer(&'static str),
}

fn error(line: Option<usize>, problem: DecisionProblem) -> DecisionError {
    DecisionError { line, problem }
}

/// The fence a block opens with: its character and length.
fn opening_fence(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.chars().take_while(|c| *c == fence_char).count();
    (length >= 3).then(|| (fence_char, length, trimmed[length..].trim()))
}

fn is_closing_fence(line: &str, fence_char: char, length: usize) -> bool {
    let trimmed = line.trim();
    trimmed.chars().count() >= length && trimmed.chars().all(|c| c == fence_char)
}

/// Whether a block that opens with a code fence also closes it; `None` when it is not fenced.
/// An unclosed fence runs to the end of the document, so edits refuse to introduce one.
pub fn fence_is_closed(block_text: &str) -> Option<bool> {
    let mut lines = block_text.lines();
    let (fence_char, length, _) = opening_fence(lines.next()?)?;
    let closed = lines
        .last()
        .is_some_and(|last| is_closing_fence(last, fence_char, length));
    Some(closed)
}

/// Reads and validates the text of one Decision block (its fences included).
pub fn parse_decision(block_text: &str) -> Result<Decision, DecisionError> {
    let mut lines = block_text.lines();
    let first = lines.next().unwrap_or_default();
    let (fence_char, length, info) =
        opening_fence(first).ok_or_else(|| error(None, DecisionProblem::NotFenced))?;
    if info != DECISION_INFO {
        return Err(error(None, DecisionProblem::InfoString(info.to_string())));
    }
    let mut body: Vec<&str> = lines.collect();
    match body.last() {
        Some(last) if is_closing_fence(last, fence_char, length) => {
            body.pop();
        }
        _ => return Err(error(Some(body.len().max(1)), DecisionProblem::NotClosed)),
    }

    let mut id = None;
    let mut state: Option<(DecisionState, usize)> = None;
    let mut question = None;
    let mut header = None;
    let mut about = None;
    let mut applied = None;
    let mut multi = None;
    let mut hint = None;
    let mut prefill = None;
    let mut options: Vec<DecisionOption> = Vec::new();
    let mut labels: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut answers = Vec::new();
    for (number, raw) in body.iter().enumerate() {
        let line = Some(number + 1);
        let text = raw.trim();
        if text.is_empty() {
            continue;
        }
        let (key, value) = text
            .split_once(':')
            .ok_or_else(|| error(line, DecisionProblem::NotKeyValue))?;
        let value = value.trim();
        match key.trim() {
            "id" => {
                once(&id, "id", line)?;
                let value = non_empty(value, "id", ID_MAX_CHARS, line)?;
                let starts_well = value
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric());
                let rest_ok = value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if !starts_well || !rest_ok {
                    return Err(error(line, DecisionProblem::BadId));
                }
                id = Some(value.to_string());
            }
            "state" => {
                if state.is_some() {
                    return Err(error(line, DecisionProblem::Repeated("state")));
                }
                let parsed = DecisionState::parse(value)
                    .ok_or_else(|| error(line, DecisionProblem::BadState(value.to_string())))?;
                state = Some((parsed, number + 1));
            }
            "question" => {
                once(&question, "question", line)?;
                question = Some(non_empty(
                    &read_value(value),
                    "question",
                    TEXT_MAX_CHARS,
                    line,
                )?);
            }
            "header" => {
                once(&header, "header", line)?;
                header = Some(non_empty(
                    &read_value(value),
                    "header",
                    TEXT_MAX_CHARS,
                    line,
                )?);
            }
            "about" => {
                once(&about, "about", line)?;
                about = Some(non_empty(value, "about", TEXT_MAX_CHARS, line)?);
            }
            "applied" => {
                once(&applied, "applied", line)?;
                applied = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| error(line, DecisionProblem::BadApplied(value.into())))?,
                );
            }
            "hint" => {
                once(&hint, "hint", line)?;
                hint = Some(read_value(value));
            }
            "prefill" => {
                once(&prefill, "prefill", line)?;
                prefill = Some(read_value(value));
            }
            "multi" => {
                once(&multi, "multi", line)?;
                multi = Some(match value {
                    "yes" => true,
                    "no" => false,
                    other => return Err(error(line, DecisionProblem::BadMulti(other.into()))),
                });
            }
            "option" => {
                let value = non_empty(&read_value(value), "option", TEXT_MAX_CHARS, line)?;
                if !labels.insert(value.clone()) {
                    return Err(error(line, DecisionProblem::DuplicateOption(value)));
                }
                options.push(DecisionOption::new(&value));
            }
            key @ ("detail" | "preview") => {
                let key = if key == "detail" { "detail" } else { "preview" };
                let note = options.last_mut().map(|o| {
                    if key == "detail" {
                        &mut o.detail
                    } else {
                        &mut o.preview
                    }
                });
                match note {
                    Some(slot @ None) => *slot = Some(read_value(value)),
                    _ => return Err(error(line, DecisionProblem::OptionNote(key))),
                }
            }
            key @ ("answer" | "chose") => {
                let answer = parse_answer(value, key == "chose", line)?;
                answers.push((answer, line));
            }
            other => return Err(error(line, DecisionProblem::UnknownKey(other.to_string()))),
        }
    }
    let id = id.ok_or_else(|| error(None, DecisionProblem::Missing("id")))?;
    let (state, state_line) =
        state.ok_or_else(|| error(None, DecisionProblem::Missing("state")))?;
    let question = question.ok_or_else(|| error(None, DecisionProblem::Missing("question")))?;
    if matches!(state, DecisionState::Answered | DecisionState::Resolved) && answers.is_empty() {
        return Err(error(
            Some(state_line),
            DecisionProblem::NeedsAnswer(state.name()),
        ));
    }
    for (answer, line) in &answers {
        if answer.chose && !options.iter().any(|o| o.label == answer.text) {
            let problem = DecisionProblem::NoSuchOption {
                login: answer.login.clone(),
                label: answer.text.clone(),
            };
            return Err(error(*line, problem));
        }
    }
    Ok(Decision {
        id,
        state,
        question,
        header,
        options,
        multi: multi.unwrap_or(false),
        hint,
        prefill,
        about,
        applied,
        answers: answers.into_iter().map(|(a, _)| a).collect(),
    })
}

fn once<T>(seen: &Option<T>, key: &'static str, line: Option<usize>) -> Result<(), DecisionError> {
    match seen {
        Some(_) => Err(error(line, DecisionProblem::Repeated(key))),
        None => Ok(()),
    }
}

fn non_empty(
    value: &str,
    key: &'static str,
    max: usize,
    line: Option<usize>,
) -> Result<String, DecisionError> {
    if value.is_empty() {
        return Err(error(line, DecisionProblem::Empty(key)));
    }
    within(value, key, max, line)
}

fn within(
    value: &str,
    key: &'static str,
    max: usize,
    line: Option<usize>,
) -> Result<String, DecisionError> {
    if value.chars().count() > max {
        return Err(error(line, DecisionProblem::TooLong { key, max }));
    }
    Ok(value.to_owned())
}

fn parse_answer(value: &str, chose: bool, line: Option<usize>) -> Result<Answer, DecisionError> {
    let rest = value
        .strip_prefix('@')
        .ok_or_else(|| error(line, DecisionProblem::BadAnswer))?;
    let (login, text) = rest
        .split_once(':')
        .ok_or_else(|| error(line, DecisionProblem::BadAnswer))?;
    let valid_login = !login.is_empty()
        && login.chars().count() <= LOGIN_MAX_CHARS
        && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !login.starts_with('-');
    if !valid_login {
        return Err(error(line, DecisionProblem::BadLogin(login.to_string())));
    }
    // Written text may be empty only as `""`, which says so explicitly.
    let raw = text.trim();
    let text = if raw.starts_with('"') {
        within(&read_value(raw), "answer", TEXT_MAX_CHARS, line)?
    } else {
        non_empty(raw, "answer", TEXT_MAX_CHARS, line)?
    };
    Ok(Answer {
        login: login.to_string(),
        text,
        chose,
    })
}

/// Every valid Decision of a document, in block order, with the block that holds it.
/// A malformed Decision block is left out here (it is still a `decision` block, and an edit
/// that introduces or changes one is refused).
pub fn decisions(source: &str, blocks: &[Block]) -> Vec<(usize, Decision)> {
    blocks
        .iter()
        .filter(|block| block.kind == BlockKind::Decision)
        .filter_map(|block| {
            let text = source.get(block.bytes.clone())?;
            parse_decision(text).ok().map(|d| (block.index, d))
        })
        .collect()
}

/// The Decisions list of a document: id, state and title (the question) of each.
pub fn decision_summaries(source: &str, blocks: &[Block]) -> Vec<DecisionSummary> {
    decisions(source, blocks)
        .into_iter()
        .map(|(block, d)| DecisionSummary {
            id: d.id,
            state: d.state,
            title: d.question,
            block,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::blocks;

    const GOOD: &str = "```decision\nid: harbour-quay\nstate: answered\nquestion: Which quay?\noption: North\noption: South\n\nanswer: @mona: North, the crane is there.\n```\n";

    #[test]
    fn a_valid_block_reads_whole() {
        let decision = parse_decision(GOOD).expect("valid");
        assert_eq!(decision.id, "harbour-quay");
        assert_eq!(decision.state, DecisionState::Answered);
        assert_eq!(decision.question, "Which quay?");
        let labels: Vec<_> = decision.options.iter().map(|o| o.label.as_str()).collect();
        assert_eq!(labels, vec!["North", "South"]);
        assert_eq!(
            decision.answers,
            vec![Answer::written("mona", "North, the crane is there.")]
        );
    }

    #[test]
    fn tildes_crlf_and_indentation_are_accepted() {
        let text = "~~~~ decision\r\n  id: a\r\n  state: open\r\n  question: Q?\r\n~~~~\r\n";
        assert_eq!(parse_decision(text).map(|d| d.id), Ok("a".to_string()));
    }

    fn problem(text: &str) -> DecisionError {
        parse_decision(text).expect_err("invalid")
    }

    #[test]
    fn errors_name_the_line_inside_the_fence() {
        let e = problem("```decision\nid: a\nstate: maybe\nquestion: Q\n```\n");
        assert_eq!(e.line, Some(2));
        assert_eq!(
            e.to_string(),
            "Decision block line 2: unknown state `maybe` (states: open, answered, resolved, expired)"
        );
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\ncolour: red\n```\n");
        assert_eq!(e.line, Some(4));
        assert!(matches!(e.problem, DecisionProblem::UnknownKey(_)));
        let e = problem("```decision\nid: a\nid: b\n```\n");
        assert_eq!(
            (e.line, e.problem),
            (Some(2), DecisionProblem::Repeated("id"))
        );
        let e = problem("```decision\nid: a b\n```\n");
        assert_eq!((e.line, e.problem), (Some(1), DecisionProblem::BadId));
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\nanswer: mona: yes\n```\n");
        assert_eq!((e.line, e.problem), (Some(4), DecisionProblem::BadAnswer));
        let e = problem("```decision\nid: a\nstate: resolved\nquestion: Q\n```\n");
        assert_eq!(
            (e.line, e.problem),
            (Some(2), DecisionProblem::NeedsAnswer("resolved"))
        );
        let e = problem("```decision\nid: a\nstate: open\n```\n");
        assert_eq!(
            e.to_string(),
            "Decision block: the block has no `question:` line"
        );
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\n");
        assert_eq!(e.problem, DecisionProblem::NotClosed);
        let e = problem("```decision extra\nid: a\n```\n");
        assert!(matches!(e.problem, DecisionProblem::InfoString(_)));
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\noption: x\noption: x\n```");
        assert_eq!(e.line, Some(5));
    }

    #[test]
    fn the_list_holds_valid_decisions_in_order() {
        let source = format!(
            "# Plan\n\n{GOOD}\n```decision\nid: broken\n```\n\n```decision\nid: second\nstate: open\nquestion: When?\n```\n"
        );
        let all = blocks(&source);
        let list = decision_summaries(&source, &all);
        let ids: Vec<_> = list.iter().map(|d| (d.id.as_str(), d.block)).collect();
        assert_eq!(ids, vec![("harbour-quay", 1), ("second", 3)]);
        assert_eq!(list[1].title, "When?");
        assert_eq!(list[1].state, DecisionState::Open);
    }

    fn card() -> Decision {
        let mut d = Decision::open("q-1", "Which region goes first?\nSay why.");
        d.header = Some("Rollout".into());
        d.about = Some("sha256:00ff".into());
        d.applied = Some(2);
        d.multi = true;
        d.hint = Some("  leading space kept".into());
        d.prefill = Some("line one\nline two".into());
        d.options = vec![
            DecisionOption {
                label: "eu-west".into(),
                detail: Some("Smallest traffic".into()),
                preview: None,
            },
            DecisionOption {
                label: "us-east".into(),
                detail: None,
                preview: Some("| region | share |\n|---|---|\n| us-east | 61% |".into()),
            },
        ];
        d
    }

    #[test]
    fn atm_24_a_rendered_card_reads_back_whole_previews_as_their_own_field() {
        let mut d = card();
        assert_eq!(parse_decision(&d.render()), Ok(d.clone()));
        d.state = DecisionState::Answered;
        d.answers = vec![
            Answer::chose("mona", "us-east"),
            Answer::written("hubot", ""),
            Answer::written("mona", "\"quoted\" and\nsplit"),
        ];
        let text = d.render();
        assert!(text.contains("chose: @mona: us-east\n"), "{text}");
        assert!(text.contains("answer: @hubot: \"\"\n"), "{text}");
        assert_eq!(parse_decision(&text), Ok(d));
    }

    #[test]
    fn atm_26_explicitly_empty_written_text_is_an_answer_but_a_bare_empty_one_is_not() {
        let d = parse_decision(
            "```decision\nid: a\nstate: answered\nquestion: Q\nanswer: @mona: \"\"\n```\n",
        )
        .unwrap();
        assert_eq!(d.answers, vec![Answer::written("mona", "")]);
        let e = problem("```decision\nid: a\nstate: answered\nquestion: Q\nanswer: @mona:\n```\n");
        assert_eq!(e.problem, DecisionProblem::Empty("answer"));
    }

    #[test]
    fn option_notes_and_choices_are_checked() {
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\ndetail: d\n```\n");
        assert_eq!(
            (e.line, e.problem),
            (Some(4), DecisionProblem::OptionNote("detail"))
        );
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\noption: x\npreview: p\npreview: q\n```\n");
        assert_eq!(
            (e.line, e.problem),
            (Some(6), DecisionProblem::OptionNote("preview"))
        );
        let e = problem(
            "```decision\nid: a\nstate: answered\nquestion: Q\noption: x\nchose: @mona: y\n```\n",
        );
        assert_eq!(e.line, Some(5));
        assert_eq!(
            e.to_string(),
            "Decision block line 5: `chose: @mona: y` names no option of this Decision"
        );
        let e = problem("```decision\nid: a\nstate: open\nquestion: Q\nmulti: maybe\n```\n");
        assert_eq!(e.problem, DecisionProblem::BadMulti("maybe".into()));
    }

    proptest::proptest! {
        #[test]
        fn any_card_text_survives_rendering(
            question in "[^\u{0}]{1,80}",
            hint in proptest::option::of("[^\u{0}]{0,80}"),
            label in "[a-z][a-z ]{0,20}[a-z]",
            answer in "[^\u{0}]{0,80}",
        ) {
            let question = if question.trim().is_empty() { "q".to_owned() } else { question };
            let mut d = Decision::open("p-1", &question);
            d.hint = hint;
            d.options = vec![DecisionOption::new(&label)];
            d.state = DecisionState::Answered;
            d.answers = vec![Answer::written("mona", &answer), Answer::chose("hubot", &label)];
            proptest::prop_assert_eq!(parse_decision(&d.render()), Ok(d));
        }
    }
}
