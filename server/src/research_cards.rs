//! Research cards: each research request of a document (`/research`, or the Planner's
//! `create_research_workspace`) as people and the Planner see it — its brief, where it is,
//! and the report it published — read from the document's background jobs. A card's id (its
//! `workspaceId`, CTX-33) is the id of the request's evidence job.
//!
//! Owns: how a request's jobs read as one card (researching, writing, published, failed), its
//! title (the report's title once published, else the brief's start), and the bounded
//! projection `read_reference` gives of a research reference (CTX-21, CTX-33, ISO-15).
//! Does not own: the research work itself (the research job definitions) or who may read it.

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use crate::store::{Job, JobState, Store, StoreResult, UnixMillis};

/// The evidence job's type (the request), as the research jobs name it.
const EVIDENCE: &str = "research-evidence";
/// The answer job's type (the report).
const ANSWER: &str = "research-answer";
/// The longest title drawn from a brief, in characters.
pub const TITLE_MAX_CHARS: usize = 80;
/// The most jobs of a document read to find its cards.
const JOBS_READ: u32 = 500;

/// Where a research request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardState {
    /// Gathering public evidence.
    Researching,
    /// Writing the report.
    Writing,
    /// The report is a child document.
    Published,
    /// It failed or was stopped.
    Failed,
}

impl CardState {
    pub fn word(self) -> &'static str {
        match self {
            CardState::Researching => "researching",
            CardState::Writing => "writing",
            CardState::Published => "published",
            CardState::Failed => "failed",
        }
    }
}

/// One research request of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    pub workspace_id: Uuid,
    pub document_id: Uuid,
    pub title: String,
    pub brief: String,
    pub state: CardState,
    /// The published report.
    pub child: Option<Uuid>,
    pub created_at_ms: UnixMillis,
}

fn state_of(job: &Job) -> Option<CardState> {
    match job.state {
        JobState::Pending | JobState::Running => None,
        JobState::Completed => Some(CardState::Published),
        JobState::Failed | JobState::Cancelled | JobState::Superseded => Some(CardState::Failed),
    }
}

/// The request a research job serves: its target without the job type the runtime puts
/// before it (`research-evidence:12` and `research-answer:12` are request 12's).
fn request_of(job: &Job) -> &str {
    job.target
        .strip_prefix(job.kind.as_str())
        .and_then(|t| t.strip_prefix(':'))
        .unwrap_or(&job.target)
}

/// The title a brief gives: its first line, at most [`TITLE_MAX_CHARS`] characters.
fn title_of(brief: &str) -> String {
    let line = brief.lines().next().unwrap_or("").trim();
    if line.chars().count() <= TITLE_MAX_CHARS {
        return line.to_owned();
    }
    let cut: String = line.chars().take(TITLE_MAX_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

/// The cards `jobs` (one document's, any order) hold, newest first.
pub fn cards_of(jobs: &[Job]) -> Vec<Card> {
    let mut cards: Vec<Card> = jobs
        .iter()
        .filter(|j| j.kind == EVIDENCE && j.state != JobState::Superseded)
        .filter_map(|evidence| {
            let input: Value = serde_json::from_str(&evidence.input).ok()?;
            let brief = input["brief"].as_str()?.to_owned();
            let answer = jobs
                .iter()
                .filter(|j| {
                    j.kind == ANSWER
                        && request_of(j) == request_of(evidence)
                        && j.state != JobState::Superseded
                        && j.created_at_ms >= evidence.created_at_ms
                })
                .max_by_key(|j| j.created_at_ms);
            let (state, child, title) = match (evidence.state, answer) {
                (JobState::Pending | JobState::Running, _) => (CardState::Researching, None, None),
                (JobState::Completed, None) => (CardState::Writing, None, None),
                (JobState::Completed, Some(answer)) => match state_of(answer) {
                    None => (CardState::Writing, None, None),
                    Some(CardState::Published) => {
                        let artifact: Value = answer
                            .artifact
                            .as_deref()
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or(Value::Null);
                        (
                            CardState::Published,
                            artifact["child"].as_str().and_then(|c| c.parse().ok()),
                            artifact["title"].as_str().map(str::to_owned),
                        )
                    }
                    Some(state) => (state, None, None),
                },
                _ => (CardState::Failed, None, None),
            };
            Some(Card {
                workspace_id: evidence.id,
                document_id: evidence.document_id,
                title: title.unwrap_or_else(|| title_of(&brief)),
                brief,
                state,
                child,
                created_at_ms: evidence.created_at_ms,
            })
        })
        .collect();
    cards.sort_by_key(|c| std::cmp::Reverse((c.created_at_ms, c.workspace_id)));
    cards
}

/// The documents' research cards, read from storage.
pub struct ResearchCards {
    store: Arc<dyn Store>,
}

impl ResearchCards {
    pub fn new(store: Arc<dyn Store>) -> Self {
        ResearchCards { store }
    }

    /// `document`'s cards, newest first.
    pub async fn of_document(&self, document: Uuid) -> StoreResult<Vec<Card>> {
        let jobs = self.store.document_jobs(document, JOBS_READ).await?;
        Ok(cards_of(&jobs))
    }

    /// `document`'s card `workspace`, if it has it (CTX-33: only a workspace of this document).
    pub async fn card(&self, document: Uuid, workspace: Uuid) -> StoreResult<Option<Card>> {
        Ok(self
            .of_document(document)
            .await?
            .into_iter()
            .find(|c| c.workspace_id == workspace))
    }
}

/// The header `read_reference` gives of a research reference (CTX-21, CTX-33): the card's
/// title, brief and state, and where its report is; the report's text follows it when it is
/// published.
pub fn projection(card: &Card, report_url: Option<&str>) -> String {
    let mut text = format!(
        "research card {} titled {}\nstate: {}\nbrief: {}\n",
        Value::String(card.workspace_id.to_string()),
        Value::String(card.title.clone()),
        card.state.word(),
        card.brief
    );
    match (card.state, report_url) {
        (CardState::Published, Some(url)) => text.push_str(&format!("report: {url}\n")),
        (CardState::Published, None) => {
            text.push_str("report: published, but no longer readable (archived or removed)\n")
        }
        _ => text.push_str("report: not published yet\n"),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: &str, target: &str, state: JobState, at: i64) -> Job {
        Job {
            id: Uuid::from_u128(at as u128),
            document_id: Uuid::from_u128(1),
            kind: kind.into(),
            version: 1,
            origin: "user".into(),
            target: target.into(),
            target_generation: 1,
            idempotency_key: format!("{kind}:{target}:{at}"),
            fingerprint: String::new(),
            input: serde_json::json!({ "brief": "edge caching for EU shoppers, and a very long tail of words that goes on past the title's bound", "requestSeq": 3 }).to_string(),
            state,
            attempts: 0,
            failures: 0,
            max_failures: 3,
            available_at_ms: 0,
            claim_owner: None,
            claim_generation: 0,
            claim_expires_at_ms: None,
            progress: "[]".into(),
            reason: None,
            artifact: None,
            created_at_ms: at,
            updated_at_ms: at,
        }
    }

    #[test]
    fn ctx_33_a_requests_jobs_read_as_one_card_from_researching_to_published() {
        let evidence = job(EVIDENCE, "research-evidence:3", JobState::Running, 10);
        let cards = cards_of(std::slice::from_ref(&evidence));
        assert_eq!(cards.len(), 1);
        assert_eq!(cards[0].state, CardState::Researching);
        assert_eq!(cards[0].workspace_id, evidence.id);
        assert!(cards[0].title.chars().count() <= TITLE_MAX_CHARS);
        assert!(cards[0].title.ends_with('…'), "{}", cards[0].title);

        let done = job(EVIDENCE, "research-evidence:3", JobState::Completed, 10);
        assert_eq!(
            cards_of(std::slice::from_ref(&done))[0].state,
            CardState::Writing
        );
        let mut answer = job(ANSWER, "research-answer:3", JobState::Completed, 20);
        let child = Uuid::from_u128(99);
        answer.artifact =
            Some(serde_json::json!({ "child": child, "title": "Edge caching" }).to_string());
        let cards = cards_of(&[done.clone(), answer]);
        assert_eq!(cards[0].state, CardState::Published);
        assert_eq!(cards[0].child, Some(child));
        assert_eq!(
            cards[0].title, "Edge caching",
            "the report's title once published"
        );
        let failed = job(ANSWER, "research-answer:3", JobState::Failed, 20);
        // Another request's report is not this one's.
        let mut other = job(ANSWER, "research-answer:4", JobState::Completed, 20);
        other.artifact = Some(serde_json::json!({ "child": child, "title": "Other" }).to_string());
        assert_eq!(
            cards_of(&[done.clone(), other])[0].state,
            CardState::Writing
        );
        assert_eq!(cards_of(&[done, failed])[0].state, CardState::Failed);
        // Other jobs are no cards.
        assert!(cards_of(&[job("document-summary", "summary", JobState::Completed, 5)]).is_empty());
    }
}
