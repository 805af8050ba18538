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
/// Most characters a `question`, `option` or answer text may have.
pub const TEXT_MAX_CHARS: usize = 1_000;
/// Most `option:` lines one Decision may have.
pub const OPTIONS_MAX: usize = 20;
/// Most `answer:` lines one Decision may have.
pub const ANSWERS_MAX: usize = 100;
/// Most characters of a GitHub login.
pub const LOGIN_MAX_CHARS: usize = 39;

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

/// One person's answer: `answer: @login: text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub login: String,
    pub text: String,
}

/// A valid Decision block, read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub id: String,
    pub state: DecisionState,
    pub question: String,
    pub options: Vec<String>,
    pub answers: Vec<Answer>,
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
    #[error("expected `key: value` (keys: id, state, question, option, answer)")]
    NotKeyValue,
    #[error("unknown key `{0}` (keys: id, state, question, option, answer)")]
    UnknownKey(String),
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
    #[error("an answer is `answer: @login: text`")]
    BadAnswer,
    #[error("`{0}` is not a GitHub login")]
    BadLogin(String),
    #[error("more than {max} `{key}` lines")]
    TooMany { key: &'static str, max: usize },
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
    let mut options: Vec<String> = Vec::new();
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
                question = Some(non_empty(value, "question", TEXT_MAX_CHARS, line)?.to_string());
            }
            "option" => {
                let value = non_empty(value, "option", TEXT_MAX_CHARS, line)?;
                if options.len() == OPTIONS_MAX {
                    let problem = DecisionProblem::TooMany {
                        key: "option",
                        max: OPTIONS_MAX,
                    };
                    return Err(error(line, problem));
                }
                if options.iter().any(|o| o == value) {
                    return Err(error(line, DecisionProblem::DuplicateOption(value.into())));
                }
                options.push(value.to_string());
            }
            "answer" => {
                if answers.len() == ANSWERS_MAX {
                    let problem = DecisionProblem::TooMany {
                        key: "answer",
                        max: ANSWERS_MAX,
                    };
                    return Err(error(line, problem));
                }
                answers.push(parse_answer(value, line)?);
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
    Ok(Decision {
        id,
        state,
        question,
        options,
        answers,
    })
}

fn once<T>(seen: &Option<T>, key: &'static str, line: Option<usize>) -> Result<(), DecisionError> {
    match seen {
        Some(_) => Err(error(line, DecisionProblem::Repeated(key))),
        None => Ok(()),
    }
}

fn non_empty<'v>(
    value: &'v str,
    key: &'static str,
    max: usize,
    line: Option<usize>,
) -> Result<&'v str, DecisionError> {
    if value.is_empty() {
        return Err(error(line, DecisionProblem::Empty(key)));
    }
    if value.chars().count() > max {
        return Err(error(line, DecisionProblem::TooLong { key, max }));
    }
    Ok(value)
}

fn parse_answer(value: &str, line: Option<usize>) -> Result<Answer, DecisionError> {
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
    let text = non_empty(text.trim(), "answer", TEXT_MAX_CHARS, line)?;
    Ok(Answer {
        login: login.to_string(),
        text: text.to_string(),
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
        assert_eq!(decision.options, vec!["North", "South"]);
        assert_eq!(
            decision.answers,
            vec![Answer {
                login: "mona".into(),
                text: "North, the crane is there.".into()
            }]
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
}
