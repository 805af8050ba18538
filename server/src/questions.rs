//! Questions: a Planner client's `input-request` becomes Decisions in its document, people
//! answer them from the room, and the client hears the outcome once, as `input-result`.
//!
//! Owns: the cards of each question asked (one Decision per questionnaire question, one for
//! every other kind), where they go (right after the block the request names, as one adjacent
//! batch, when that block is unchanged; otherwise at the end of the document, unlinked), the
//! answers and cancellations people give from the room, and withdrawal (the client's own
//! `input-cancel`, the turn's abort, the session's end, the link closing, the document archived,
//! a Stop while the Planner only waits on a question). A withdrawn card leaves the document; an
//! answered one stays. Every change to the cards is one `edit_plan` batch against the
//! revision read, retried when the document moved meanwhile, so a card is answered at most
//! once and a withdrawn card can never be answered. A question has no time limit (RULINGS
//! ATM-32): it waits until it is answered or withdrawn.
//!
//! Does not own: the link (the agent socket hands requests in and delivers the results through
//! the link's [`LinkHandle`]), who may answer (the room decides: writers answer, readers see),
//! or the Decision block's syntax (`chopin_document::decision`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chopin_document::blocks::blocks;
use chopin_document::decision::{decisions, Answer, Decision, DecisionOption, DecisionState};
use chopin_document::edit::{EditBatch, EditOp, EditOutcome};
use chopin_document::DocumentRef;
use chopin_protocol::agent::{
    AnswerKind, ChosenOption, ConfirmAnswer, HostInput, InputAnswer, InputRequest, InputResult,
    InputStatus, QuestionAnswer, QuestionnaireAnswer, SelectAnswer, ServerMessage, TextAnswer,
};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::content::{EditRefused, OpenDocuments};
use crate::harness::port::{
    AgentLinks, HeldQuestion, Kept, KeptForClient, LinkCommand, LinkHandle,
};
use crate::runtime::entropy::SharedEntropy;
use crate::runtime::gates::Gates;
use crate::store::DocumentStore;
use crate::transcript::TurnSink;

/// The largest a document's source may grow to; a question whose cards would pass it fails
/// before any card appears (ATM-40), and an answer that would pass it is refused (ATM-41).
pub use chopin_document::SOURCE_MAX_BYTES;
/// The most one written answer may hold: one shared-draft edit (ATM-41).
pub const ANSWER_MAX_BYTES: usize = 64 * 1024;
/// How many times a change to the cards is tried again when the document moved meanwhile.
const EDIT_TRIES: usize = 8;
/// The options of a confirmation card; only the first approves.
pub const CONFIRM_OPTIONS: [&str; 2] = ["Yes", "No"];

/// What questions reach: the open documents (to place and change cards), the document records
/// (for the revision), the transcript (Chat lines), entropy (card ids), and the links (an
/// answer for a client that is away is kept in its hold).
pub struct QuestionsDeps {
    pub open: Arc<OpenDocuments>,
    pub records: Arc<dyn DocumentStore>,
    pub transcript: Arc<dyn TurnSink>,
    pub entropy: SharedEntropy,
    pub links: Arc<dyn AgentLinks>,
}

/// Every question this process waits on.
pub struct Questions {
    deps: QuestionsDeps,
    table: Mutex<Table>,
    /// One change to a document's cards at a time.
    gates: Gates<Uuid>,
}

#[derive(Default)]
struct Table {
    asked: BTreeMap<u64, Asked>,
    next: u64,
    /// Each reported workflow run's root run, by (document, run).
    roots: BTreeMap<(Uuid, String), String>,
    /// Root runs the client reports paused, by (document, root).
    paused: BTreeSet<(Uuid, String)>,
    /// Outcomes held while their run's root is paused (RQ-02), by (document, root), with the
    /// link asking.
    held: BTreeMap<(Uuid, String), Vec<HeldOutcome>>,
    /// Answers a link could not take because it had gone, and no hold took for its client
    /// yet, by link: taken into the hold when the link's end keeps its work, handed to the
    /// client when it resumes, forgotten when the link ends for good.
    owed: BTreeMap<u64, Vec<InputResult>>,
    /// Decisions of questions a client waited on before this process started (HO-15), by
    /// document: nothing here waits on them, and an answer to one is handed to a Planner turn.
    unwaited: BTreeMap<Uuid, BTreeSet<String>>,
    /// Cards the Planner opened under a stable key (COA-07..09), by document and key.
    keyed: BTreeMap<(Uuid, String), KeyedCard>,
}

/// A card opened under a stable key: its id, and the question and passage the key names.
#[derive(Debug, Clone)]
struct KeyedCard {
    id: String,
    question: String,
    block: Option<String>,
}

/// The longest stable key of a card, in bytes.
pub const CARD_KEY_MAX_BYTES: usize = 100;

/// What opening cards came to (COA-07..09).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The ids of the cards placed now.
    pub placed: Vec<String>,
    /// The ids of cards an earlier turn opened under the same keys that still hold their
    /// question (open, reopened or answered): counted as opened, not placed again.
    pub existing: Vec<String>,
    /// The keys of cards a person discarded, or that were withdrawn or closed: never opened
    /// again, and counted for nothing.
    pub not_recreated: Vec<String>,
}

/// An outcome held for a paused run: the link that asked, where it goes, and what it is.
type HeldOutcome = (u64, Reply, InputResult);

/// One question a link asked.
struct Asked {
    document: Uuid,
    link: u64,
    request_id: String,
    session_id: String,
    turn_id: Option<String>,
    /// The workflow run that asked, if one did.
    run_id: Option<String>,
    input: HostInput,
    /// The Decision ids of its cards, in question order (empty until they are placed).
    cards: Vec<String>,
    /// The prefix of those ids and the block they were placed after, to place them again.
    prefix: String,
    block: Option<String>,
    document_url: String,
    /// Its open cards were taken out of the document while its run is paused (SES-05).
    set_aside: bool,
    /// The answer to each card, by position, once given.
    answers: BTreeMap<usize, Vec<Answer>>,
    reply: Reply,
    /// Withdrawn while its cards were being placed: they are taken away once they are.
    withdrawn: Option<String>,
}

/// What a link asked, as the agent socket hands it in.
pub struct Asking {
    pub document: Uuid,
    pub document_url: String,
    pub link: u64,
    pub request: InputRequest,
    pub reply: Reply,
}

/// Where a question's outcome goes.
#[derive(Clone)]
pub enum Reply {
    /// A client's link: `input-result`.
    Link(LinkHandle),
    /// A host tool waiting in the server (the Planner's `ask`).
    Waiter(Arc<Mutex<Option<oneshot::Sender<InputResult>>>>),
}

/// The link id questions asked by the server's own host tools are filed under.
pub const HOST_LINK: u64 = 0;

/// A question taken in, whose cards are still to be placed.
pub struct Placing {
    key: u64,
    document: Uuid,
    document_url: String,
    request: InputRequest,
    reply: Reply,
}

/// Which of a document's questions a withdrawal takes.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every question of the document.
    Document,
    /// Every question one link asked.
    Link(u64),
    /// The questions a link asked within one turn, not for a workflow run (a run outlives
    /// the turn that started it).
    Turn(u64, String),
    /// Every question of the document no workflow run asked: what Stop Planner withdraws (a
    /// run's question is set aside while Stop pauses its run, SES-05).
    OutsideRuns,
    /// The questions a link asked within one session.
    Session(u64, String),
    /// One request, by its id on its link.
    Request(u64, String),
}

impl Scope {
    fn takes(&self, asked: &Asked) -> bool {
        match self {
            Scope::Document => true,
            Scope::Link(link) => asked.link == *link,
            Scope::Turn(link, turn) => {
                asked.link == *link
                    && asked.run_id.is_none()
                    && asked.turn_id.as_deref() == Some(turn.as_str())
            }
            Scope::OutsideRuns => asked.run_id.is_none(),
            Scope::Session(link, session) => asked.link == *link && asked.session_id == *session,
            Scope::Request(link, request) => asked.link == *link && asked.request_id == *request,
        }
    }
}

/// A person's answer to one card, from the room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// Options chosen, by 0-based index.
    Options(Vec<usize>),
    /// Written text (empty text is an answer).
    Text(String),
}

/// What saving a person's answer came to, beyond the card.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    /// What to tell a Planner turn about the answer, when no blocking question takes it: the
    /// answer to a card the Planner opened without waiting (COA-20), or to a question a client
    /// waited on before a restart (HO-15).
    pub handed: Option<String>,
    /// The answer is to a Planner Decision anchored to a passage: the passage's prose update
    /// is due (COA-15).
    pub anchored: Option<Anchored>,
}

/// An answer saved on an anchored Planner Decision (COA-15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchored {
    pub decision: String,
    /// The digest of the block the Decision is about.
    pub about: String,
    /// How many answers the Decision holds now: the answer generation to reflect.
    pub generation: u64,
}

/// Whether `id` names a card the Planner opened (`ask`, `open_decision(s)`, a client's
/// questions): the `q-` ids the server gives them.
pub fn is_planner_card(id: &str) -> bool {
    id.starts_with("q-")
}

/// Why an answer or cancellation from the room was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefused {
    #[error("There is no Decision {0:?} in this document (it may have been withdrawn).")]
    NotFound(String),
    #[error("This Decision is {0} and takes no more answers.")]
    Closed(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("Only a question the Planner is waiting on can be cancelled.")]
    NotAsked,
    #[error("The document could not be changed just now; try again.")]
    Unavailable,
    /// A written answer past one shared-draft edit (ATM-41).
    #[error("This answer is {0} bytes; one answer holds at most 64 KiB ({ANSWER_MAX_BYTES} bytes). Shorten it and answer again.")]
    TooLong(usize),
    /// The answer would take the document past its source limit (ATM-41).
    #[error("This answer would take the document to {0} bytes, past its 256 KiB source limit ({SOURCE_MAX_BYTES} bytes). Shorten it, or make room in the document, and answer again.")]
    DocumentTooLarge(usize),
}

impl AnswerRefused {
    /// The code the room's refusal carries.
    pub fn code(&self) -> &'static str {
        match self {
            AnswerRefused::NotFound(_) => "decision-not-found",
            AnswerRefused::Closed(_) => "decision-closed",
            AnswerRefused::Invalid(_) => "invalid-answer",
            AnswerRefused::NotAsked => "not-a-question",
            AnswerRefused::Unavailable => "temporarily-unavailable",
            AnswerRefused::TooLong(_) => "answer-too-long",
            AnswerRefused::DocumentTooLarge(_) => "document-too-large",
        }
    }
}

/// The Decision cards for one question, in order; their ids are `prefix-1`, `prefix-2`, ….
pub fn cards_for(input: &HostInput, prefix: &str) -> Vec<Decision> {
    let card = |n: usize, question: &str| Decision::open(&format!("{prefix}-{n}"), question);
    match input {
        HostInput::Questionnaire(q) => q
            .questions
            .iter()
            .enumerate()
            .map(|(i, question)| {
                let mut d = card(i + 1, &question.question);
                d.header = question.header.clone();
                d.multi = question.multi_select;
                d.options = question
                    .options
                    .iter()
                    .map(|o| DecisionOption {
                        label: o.label.clone(),
                        detail: o.description.clone(),
                        preview: o.preview.clone(),
                    })
                    .collect();
                d
            })
            .collect(),
        HostInput::Confirm(c) => {
            let mut d = card(1, &c.title);
            d.hint = c.message.clone();
            d.options = CONFIRM_OPTIONS
                .iter()
                .map(|o| DecisionOption::new(o))
                .collect();
            vec![d]
        }
        HostInput::Select(s) => {
            let mut d = card(1, &s.title);
            d.options = s.options.iter().map(|o| DecisionOption::new(o)).collect();
            vec![d]
        }
        HostInput::Input(t) => {
            let mut d = card(1, &t.title);
            d.hint = t.placeholder.clone();
            vec![d]
        }
        HostInput::Editor(e) => {
            let mut d = card(1, &e.title);
            d.prefill = e.prefill.clone();
            vec![d]
        }
    }
}

/// Checks one person's answer to `card` (of a question of `kind`, or of no question) and gives
/// the answer lines it adds.
pub fn answer_lines(
    kind: Option<&HostInput>,
    card: &Decision,
    login: &str,
    given: &Given,
) -> Result<Vec<Answer>, AnswerRefused> {
    match given {
        Given::Options(chosen) => {
            if chosen.is_empty() {
                return Err(AnswerRefused::Invalid("Choose at least one option.".into()));
            }
            if chosen.len() > 1 && !card.multi {
                return Err(AnswerRefused::Invalid(
                    "This question takes one option.".into(),
                ));
            }
            let mut seen = Vec::new();
            for &index in chosen {
                if index >= card.options.len() {
                    return Err(AnswerRefused::Invalid(format!(
                        "This question has {} options; there is no option {index}.",
                        card.options.len()
                    )));
                }
                if seen.contains(&index) {
                    return Err(AnswerRefused::Invalid(format!(
                        "Option {index} is chosen twice."
                    )));
                }
                seen.push(index);
            }
            Ok(seen
                .into_iter()
                .map(|i| Answer::chose(login, &card.options[i].label))
                .collect())
        }
        Given::Text(text) => {
            // Select returns only a supplied choice (ATM-26).
            if matches!(kind, Some(HostInput::Select(_))) {
                return Err(AnswerRefused::Invalid(
                    "This question takes one of its options.".into(),
                ));
            }
            if text.len() > ANSWER_MAX_BYTES {
                return Err(AnswerRefused::TooLong(text.len()));
            }
            Ok(vec![Answer::written(login, text)])
        }
    }
}

/// What the client receives for a question whose cards all have answers: the answers as the
/// question's kind returns them (ATM-23, ATM-25, ATM-26). `cards` are the answered cards in
/// question order.
pub fn input_answer(input: &HostInput, cards: &[(usize, Vec<Answer>)]) -> InputAnswer {
    match input {
        HostInput::Questionnaire(q) => InputAnswer::Questionnaire(QuestionnaireAnswer {
            answers: cards
                .iter()
                .filter_map(|(index, lines)| {
                    let question = q.questions.get(*index)?;
                    let chosen: Vec<ChosenOption> = lines
                        .iter()
                        .filter(|a| a.chose)
                        .filter_map(|a| {
                            let i = question.options.iter().position(|o| o.label == a.text)?;
                            Some(ChosenOption {
                                index: i as u32,
                                label: a.text.clone(),
                                preview: question.options[i].preview.clone(),
                            })
                        })
                        .collect();
                    let written = lines.iter().find(|a| !a.chose).map(|a| a.text.clone());
                    // Typed text stands as the answer only where Atomic's dialog takes typed
                    // text: a single-select question without previews. Otherwise it is a
                    // request to keep talking, never a choice.
                    let takes_text = !question.multi_select
                        && question.options.iter().all(|o| o.preview.is_none());
                    Some(match written {
                        Some(text) => QuestionAnswer {
                            question_index: *index as u32,
                            kind: if takes_text {
                                AnswerKind::Custom
                            } else {
                                AnswerKind::Chat
                            },
                            options: Vec::new(),
                            text: Some(text),
                        },
                        None => QuestionAnswer {
                            question_index: *index as u32,
                            kind: AnswerKind::Option,
                            options: chosen,
                            text: None,
                        },
                    })
                })
                .collect(),
        }),
        HostInput::Confirm(_) => InputAnswer::Confirm(ConfirmAnswer {
            // Only choosing Yes approves; written text never does.
            confirmed: first(cards).is_some_and(|a| a.chose && a.text == CONFIRM_OPTIONS[0]),
        }),
        HostInput::Select(_) => InputAnswer::Select(SelectAnswer {
            choice: first(cards).map(|a| a.text.clone()).unwrap_or_default(),
        }),
        HostInput::Input(_) => InputAnswer::Input(TextAnswer {
            text: first(cards).map(|a| a.text.clone()).unwrap_or_default(),
        }),
        HostInput::Editor(_) => InputAnswer::Editor(TextAnswer {
            text: first(cards).map(|a| a.text.clone()).unwrap_or_default(),
        }),
    }
}

fn first(cards: &[(usize, Vec<Answer>)]) -> Option<&Answer> {
    cards.first().and_then(|(_, lines)| lines.first())
}

/// One change to a document's cards, decided on the source as it is now.
enum Change {
    /// Insert the text after this block (`None`: the start).
    Insert(Option<usize>, String),
    /// Replace each block (index, digest) by its text.
    Replace(Vec<(usize, String, String)>),
    /// Delete each block (index, digest).
    Delete(Vec<(usize, String)>),
    /// Nothing to do.
    Nothing,
}

impl Questions {
    pub fn new(deps: QuestionsDeps) -> Self {
        Questions {
            deps,
            table: Mutex::default(),
            gates: Gates::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many questions wait now.
    pub fn waiting(&self) -> usize {
        self.lock().asked.len()
    }

    /// Whether a question asked in `document` waits (its Planner waits on an answer).
    pub fn waits_in(&self, document: Uuid) -> bool {
        self.lock().asked.values().any(|a| a.document == document)
    }

    /// Whether a question asked in `session` of `document` waits.
    pub fn session_waits_in(&self, document: Uuid, session: &str) -> bool {
        self.lock()
            .asked
            .values()
            .any(|a| a.document == document && a.session_id == session)
    }

    /// The Decisions `cards` of `document` belong to questions nothing in this process waits
    /// on (a client waited on them before a restart, HO-15): an answer to one is for a Planner
    /// turn (see [`Questions::answer`]).
    pub fn not_waited_on(&self, document: Uuid, cards: &[String]) {
        if cards.is_empty() {
            return;
        }
        self.lock()
            .unwaited
            .entry(document)
            .or_default()
            .extend(cards.iter().cloned());
    }

    /// Takes a link's `input-request` in (at once, so a cancellation that follows finds it);
    /// [`Questions::place`] then puts its cards in the document. The client hears
    /// `input-result` once the question is answered, withdrawn, or could not be asked.
    pub fn register(&self, asking: Asking) -> Option<Placing> {
        let Asking {
            document,
            document_url,
            link,
            request,
            reply,
        } = asking;
        let request_id = request.request_id.clone();
        let key = {
            let mut table = self.lock();
            if table
                .asked
                .values()
                .any(|a| a.link == link && a.request_id == request_id)
            {
                drop(table);
                let why = format!("requestId {request_id:?} already names a question this connection is waiting on.");
                send_result(&reply, failed(&request_id, why));
                return None;
            }
            table.next += 1;
            let key = table.next;
            table.asked.insert(
                key,
                Asked {
                    document,
                    link,
                    request_id: request_id.clone(),
                    session_id: request.session_id.clone(),
                    turn_id: request.turn_id.clone(),
                    run_id: request.run_id.clone(),
                    input: request.input.clone(),
                    cards: Vec::new(),
                    prefix: String::new(),
                    block: request.block.clone(),
                    document_url: document_url.clone(),
                    set_aside: false,
                    answers: BTreeMap::new(),
                    reply: reply.clone(),
                    withdrawn: None,
                },
            );
            key
        };
        Some(Placing {
            key,
            document,
            document_url,
            request,
            reply,
        })
    }

    /// Places a registered question's cards in its document.
    pub async fn place(&self, placing: Placing) {
        let Placing {
            key,
            document,
            document_url,
            request,
            reply,
        } = placing;
        let request_id = request.request_id.clone();
        let prefix = format!("q-{}", self.deps.entropy.token_hex(4));
        let cards = cards_for(&request.input, &prefix);
        if cards.is_empty() {
            self.lock().asked.remove(&key);
            send_result(
                &reply,
                failed(&request_id, "The question has no questions to ask.".into()),
            );
            return;
        }
        let reference = DocumentRef {
            id: document.to_string(),
            url: document_url,
        };
        let placed = self
            .place_cards(document, &reference, &cards, request.block.as_deref())
            .await;
        if let Err(why) = placed {
            self.lock().asked.remove(&key);
            tracing::info!(%document, request = %request_id, why, "a question could not be asked");
            send_result(&reply, failed(&request_id, why));
            return;
        }
        let withdrawn = {
            let mut table = self.lock();
            match table.asked.get_mut(&key) {
                Some(asked) => {
                    asked.cards = cards.iter().map(|c| c.id.clone()).collect();
                    asked.prefix = prefix.clone();
                    asked.withdrawn.clone()
                }
                None => None,
            }
        };
        tracing::info!(%document, request = %request_id, cards = cards.len(), "a question's cards are in the document");
        if let Some(why) = withdrawn {
            self.withdraw_keys(document, &reference, vec![key], &why)
                .await;
        }
    }

    /// Puts `cards` in the document as one adjacent batch: right after the block whose digest
    /// is `block` (linked to it) when the document still has it, else at the end, unlinked
    /// (ATM-28). Fails, placing nothing, when they would take the source past
    /// [`SOURCE_MAX_BYTES`] or the Decision format cannot hold them.
    pub async fn place_cards(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        cards: &[Decision],
        block: Option<&str>,
    ) -> Result<(), String> {
        let _gate = self.gates.lock(document).await;
        self.insert_cards(document, reference, cards, block).await
    }

    /// [`Questions::place_cards`] with the document's gate already held.
    async fn insert_cards(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        cards: &[Decision],
        block: Option<&str>,
    ) -> Result<(), String> {
        self.change(document, reference, |source| {
            let all = blocks(source);
            let after = match block.and_then(|b| all.iter().find(|x| x.digest == b)) {
                Some(named) => (Some(named.index), Some(named.digest.clone())),
                None => (all.last().map(|b| b.index), None),
            };
            let text: Vec<String> = cards
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c.about = after.1.clone();
                    c.render()
                })
                .collect();
            Ok(Change::Insert(after.0, text.join("\n")))
        })
        .await
        .map_err(|unchanged| match unchanged {
            Unchanged::TooLarge(_) => format!(
                "The cards would take the document past its {} KiB source limit, so nothing was asked.",
                SOURCE_MAX_BYTES / 1024
            ),
            other => other.to_string(),
        })
    }

    /// The Planner's independent cards (`open_decisions`), each with its stable key if it has
    /// one, placed together after `block` (when unchanged): a key that names an earlier card
    /// for the same question and passage counts that card as opened while it still holds its
    /// question (COA-07) and never opens it again once it does not (COA-09); a key that names
    /// a different question or passage refuses the whole batch, nothing opened (COA-08).
    pub async fn open_cards(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        cards: Vec<(Option<String>, Decision)>,
        block: Option<&str>,
    ) -> Result<Opened, String> {
        let _gate = self.gates.lock(document).await;
        let mut seen = BTreeSet::new();
        for key in cards.iter().filter_map(|(k, _)| k.as_deref()) {
            if key.is_empty() || key.len() > CARD_KEY_MAX_BYTES || key.chars().any(char::is_control)
            {
                return Err(format!(
                    "a card's key is 1 to {CARD_KEY_MAX_BYTES} bytes of text; nothing was opened"
                ));
            }
            if !seen.insert(key) {
                return Err(format!(
                    "the key {key:?} names two cards of this batch; nothing was opened"
                ));
            }
        }
        let source = match self.deps.open.open(document).await {
            Ok(open) => open.source().await,
            Err(_) => return Err("The document could not be changed just now.".to_owned()),
        };
        let states: BTreeMap<String, DecisionState> = decisions(&source, &blocks(&source))
            .into_iter()
            .map(|(_, d)| (d.id, d.state))
            .collect();
        let mut opened = Opened::default();
        let mut new = Vec::new();
        {
            let table = self.lock();
            for (key, card) in cards {
                let Some(key) = key else {
                    new.push((None, card));
                    continue;
                };
                match table.keyed.get(&(document, key.clone())) {
                    None => new.push((Some(key), card)),
                    Some(earlier)
                        if earlier.question != card.question
                            || earlier.block.as_deref() != block =>
                    {
                        return Err(format!(
                            "the key {key:?} already names a different question or passage; nothing was opened"
                        ));
                    }
                    Some(earlier) => match states.get(&earlier.id) {
                        Some(
                            DecisionState::Open | DecisionState::Answered | DecisionState::Resolved,
                        ) => opened.existing.push(earlier.id.clone()),
                        _ => opened.not_recreated.push(key),
                    },
                }
            }
        }
        if !new.is_empty() {
            let placing: Vec<Decision> = new.iter().map(|(_, c)| c.clone()).collect();
            self.insert_cards(document, reference, &placing, block)
                .await?;
            let mut table = self.lock();
            for (key, card) in new {
                if let Some(key) = key {
                    table.keyed.insert(
                        (document, key),
                        KeyedCard {
                            id: card.id.clone(),
                            question: card.question.clone(),
                            block: block.map(str::to_owned),
                        },
                    );
                }
                opened.placed.push(card.id);
            }
        }
        Ok(opened)
    }

    /// A new prefix for card ids (`q-<hex>`): a question's cards are `<prefix>-1`, ….
    pub fn new_prefix(&self) -> String {
        format!("q-{}", self.deps.entropy.token_hex(4))
    }

    /// The Planner's blocking `ask` (COA-23): the question's cards go in the document and this
    /// waits until they are all answered or the question is withdrawn. Dropped (the turn
    /// ended while it waited), the question is withdrawn and its cards leave the document
    /// (RT-10), by the task `withdraw` spawns.
    pub async fn ask_and_wait(
        self: &Arc<Self>,
        document: Uuid,
        document_url: String,
        input: chopin_protocol::agent::HostInput,
        block: Option<String>,
        spawn: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
    ) -> InputResult {
        let request_id = format!("ask-{}", self.deps.entropy.token_hex(6));
        let (told, heard) = oneshot::channel();
        let asking = Asking {
            document,
            document_url: document_url.clone(),
            link: HOST_LINK,
            request: InputRequest {
                session_id: "host".to_owned(),
                request_id: request_id.clone(),
                turn_id: None,
                run_id: None,
                block,
                input,
            },
            reply: Reply::Waiter(Arc::new(Mutex::new(Some(told)))),
        };
        let Some(placing) = self.register(asking) else {
            return failed(&request_id, "the question could not be asked".into());
        };
        struct WithdrawOnDrop<F: FnOnce()> {
            armed: Option<F>,
        }
        impl<F: FnOnce()> Drop for WithdrawOnDrop<F> {
            fn drop(&mut self) {
                if let Some(f) = self.armed.take() {
                    f();
                }
            }
        }
        let questions = self.clone();
        let scope = Scope::Request(HOST_LINK, request_id.clone());
        let mut guard = WithdrawOnDrop {
            armed: Some(move || {
                spawn(Box::pin(async move {
                    let why = "The turn that asked it ended.";
                    questions
                        .withdraw(document, &document_url, scope, why)
                        .await;
                }))
            }),
        };
        self.place(placing).await;
        let result = heard.await.unwrap_or_else(|_| InputResult {
            request_id,
            status: InputStatus::Cancelled,
            answer: None,
            message: Some("The question was withdrawn.".into()),
        });
        guard.armed = None;
        result
    }

    /// A person's answer to a card. Closes the card; once every card of the question it belongs
    /// to is answered, the client hears `input-result` `answered`. The answer to a card nothing
    /// waits on (one the Planner opened without waiting, COA-20, or of a question a client
    /// waited on before a restart, HO-15) is handed back as what to tell a Planner turn; the
    /// answer to an anchored Planner card names its passage (COA-15).
    pub async fn answer(
        &self,
        reference: &DocumentRef,
        document: Uuid,
        decision: &str,
        login: &str,
        given: Given,
    ) -> Result<Saved, AnswerRefused> {
        let _gate = self.gates.lock(document).await;
        let (key, position, kind) = match self.card_of(document, decision) {
            Some((key, position, input)) => (Some(key), position, Some(input)),
            None => (None, 0, None),
        };
        let mut refused = None;
        let mut added = Vec::new();
        let mut question = String::new();
        let mut anchored = None;
        let changed = self
            .change(document, reference, |source| {
                let all = blocks(source);
                let Some((index, mut card)) = decisions(source, &all)
                    .into_iter()
                    .find(|(_, d)| d.id == decision)
                else {
                    refused = Some(AnswerRefused::NotFound(decision.to_owned()));
                    return Ok(Change::Nothing);
                };
                if card.state != DecisionState::Open {
                    refused = Some(AnswerRefused::Closed(card.state.name()));
                    return Ok(Change::Nothing);
                }
                question = card.question.clone();
                match answer_lines(kind.as_ref(), &card, login, &given) {
                    Ok(lines) => {
                        added = lines.clone();
                        card.answers.extend(lines);
                        card.state = DecisionState::Answered;
                        anchored = card
                            .about
                            .clone()
                            .filter(|_| is_planner_card(&card.id))
                            .map(|about| Anchored {
                                decision: card.id.clone(),
                                about,
                                generation: card.answers.len() as u64,
                            });
                    }
                    Err(e) => {
                        refused = Some(e);
                        return Ok(Change::Nothing);
                    }
                }
                let digest = all[index].digest.clone();
                Ok(Change::Replace(vec![(index, digest, card.render())]))
            })
            .await;
        if let Some(refused) = refused {
            return Err(refused);
        }
        changed.map_err(|unchanged| match unchanged {
            Unchanged::TooLarge(bytes) => AnswerRefused::DocumentTooLarge(bytes),
            Unchanged::Refused(why) => AnswerRefused::Invalid(why),
            Unchanged::Unavailable(_) => AnswerRefused::Unavailable,
        })?;
        tracing::info!(%document, decision, login, "a Decision was answered");
        let said: Vec<&str> = added.iter().map(|a| a.text.as_str()).collect();
        let Some(key) = key else {
            // A question a client waited on before a restart: its answer starts a Planner
            // turn once one is attached (HO-15); so does the answer to a card the Planner
            // opened without waiting (COA-20).
            let unwaited = {
                let mut table = self.lock();
                let taken = table
                    .unwaited
                    .get_mut(&document)
                    .is_some_and(|cards| cards.remove(decision));
                if table
                    .unwaited
                    .get(&document)
                    .is_some_and(BTreeSet::is_empty)
                {
                    table.unwaited.remove(&document);
                }
                taken
            };
            let handed = if unwaited {
                Some(format!(
                    "answered the Decision \u{201c}{}\u{201d} ({decision}), asked before the server restarted: {}",
                    one_line(&question),
                    said.join("; ")
                ))
            } else if is_planner_card(decision) {
                Some(format!(
                    "answered the Decision \u{201c}{}\u{201d} ({decision}): {}",
                    one_line(&question),
                    said.join("; ")
                ))
            } else {
                None
            };
            return Ok(Saved { handed, anchored });
        };
        let done = {
            let mut table = self.lock();
            let complete = match table.asked.get_mut(&key) {
                Some(asked) => {
                    asked.answers.insert(position, added);
                    asked.answers.len() == asked.cards.len()
                }
                None => false,
            };
            if complete {
                table.asked.remove(&key)
            } else {
                None
            }
        };
        if let Some(asked) = done {
            let cards: Vec<(usize, Vec<Answer>)> = asked.answers.into_iter().collect();
            let answer = input_answer(&asked.input, &cards);
            let result = InputResult {
                request_id: asked.request_id,
                status: InputStatus::Answered,
                answer: Some(answer),
                message: None,
            };
            // RQ-02: an answer to a workflow question waits while that run's root is paused.
            let held = asked.run_id.and_then(|run| {
                let mut table = self.lock();
                let root = table
                    .roots
                    .get(&(document, run.clone()))
                    .cloned()
                    .unwrap_or(run);
                let key = (document, root);
                if table.paused.contains(&key) {
                    table.held.entry(key).or_default().push((
                        asked.link,
                        asked.reply.clone(),
                        result.clone(),
                    ));
                    Some(())
                } else {
                    None
                }
            });
            match held {
                Some(()) => tracing::info!(%document, "an answer is held until its run is resumed"),
                None => {
                    self.deliver_answer(document, asked.link, &asked.reply, result)
                        .await
                }
            }
        }
        Ok(Saved {
            handed: None,
            anchored,
        })
    }

    /// A workflow run's report: its root, and whether it is paused. Only a root's own report
    /// pauses or resumes it. A root that pauses takes its runs' open cards out of the document
    /// (the questions still wait); one that resumes puts them back, and the answers held for
    /// it are delivered, in the order they were given (SES-05, RQ-02).
    pub async fn run_reported(&self, document: Uuid, run: &str, root: Option<&str>, paused: bool) {
        let (aside, back, released) = {
            let mut table = self.lock();
            let root = root.unwrap_or(run).to_owned();
            table.roots.insert((document, run.to_owned()), root.clone());
            if root != run {
                return;
            }
            let key = (document, root.clone());
            let changed = if paused {
                table.paused.insert(key.clone())
            } else {
                table.paused.remove(&key)
            };
            if !changed {
                return;
            }
            let Table { asked, roots, .. } = &mut *table;
            let mut moved = Vec::new();
            for (k, a) in asked.iter_mut() {
                let of_root = a.document == document
                    && a.run_id
                        .as_ref()
                        .is_some_and(|r| roots.get(&(document, r.clone())).unwrap_or(r) == &root);
                if of_root && !a.cards.is_empty() && a.withdrawn.is_none() && a.set_aside != paused
                {
                    a.set_aside = paused;
                    moved.push(*k);
                }
            }
            if paused {
                (moved, Vec::new(), Vec::new())
            } else {
                (
                    Vec::new(),
                    moved,
                    table.held.remove(&key).unwrap_or_default(),
                )
            }
        };
        if !aside.is_empty() {
            self.set_aside(document, &aside).await;
        }
        for key in back {
            self.present_again(document, key).await;
        }
        for (link, reply, result) in released {
            self.deliver_answer(document, link, &reply, result).await;
        }
    }

    /// Takes the open cards of the questions `keys` out of the document; the questions wait.
    async fn set_aside(&self, document: Uuid, keys: &[u64]) {
        let _gate = self.gates.lock(document).await;
        let (ids, url): (Vec<String>, Option<String>) = {
            let table = self.lock();
            let taken: Vec<&Asked> = keys
                .iter()
                .filter_map(|k| table.asked.get(k))
                .filter(|a| a.set_aside)
                .collect();
            (
                taken.iter().flat_map(|a| a.cards.clone()).collect(),
                taken.first().map(|a| a.document_url.clone()),
            )
        };
        let Some(url) = url else { return };
        let reference = DocumentRef {
            id: document.to_string(),
            url,
        };
        if let Err(e) = self.delete_open(document, &reference, &ids).await {
            tracing::warn!(%document, error = %e, "a paused run's cards could not be set aside");
            return;
        }
        tracing::info!(%document, cards = ids.len(), "a paused run's open cards are set aside");
    }

    /// Puts the still-unanswered cards of question `key` back in the document, with the ids
    /// they had, after the block they first followed (or at the end). A question whose cards
    /// no longer fit fails.
    async fn present_again(&self, document: Uuid, key: u64) {
        let _gate = self.gates.lock(document).await;
        let Some((cards, block, url)) = ({
            let table = self.lock();
            table.asked.get(&key).filter(|a| !a.set_aside).map(|a| {
                let cards: Vec<Decision> = cards_for(&a.input, &a.prefix)
                    .into_iter()
                    .enumerate()
                    .filter(|(position, _)| !a.answers.contains_key(position))
                    .map(|(_, card)| card)
                    .collect();
                (cards, a.block.clone(), a.document_url.clone())
            })
        }) else {
            return;
        };
        let reference = DocumentRef {
            id: document.to_string(),
            url,
        };
        if let Err(why) = self
            .insert_cards(document, &reference, &cards, block.as_deref())
            .await
        {
            let asked = self.lock().asked.remove(&key);
            if let Some(asked) = asked {
                tracing::info!(%document, request = %asked.request_id, why, "a resumed run's question could not be asked again");
                send_result(&asked.reply, failed(&asked.request_id, why));
            }
            return;
        }
        tracing::info!(%document, cards = cards.len(), "a resumed run's cards are back");
    }

    /// `document` is served by another process now (`PROCESSES=many`): everything this process
    /// holds of its questions is forgotten without touching the document or telling anyone (the
    /// process serving it rebuilds its questions from storage). A turn waiting on one hears
    /// that it is gone.
    pub fn moved(&self, document: Uuid) {
        {
            let mut table = self.lock();
            let links: BTreeSet<u64> = table
                .asked
                .values()
                .filter(|a| a.document == document)
                .map(|a| a.link)
                .collect();
            table.asked.retain(|_, a| a.document != document);
            for link in links {
                if !table.asked.values().any(|a| a.link == link) {
                    table.owed.remove(&link);
                }
            }
            table.keyed.retain(|(d, _), _| *d != document);
            table.unwaited.remove(&document);
        }
        self.forget_runs(document);
    }

    /// Forgets the runs of `document` (its link is gone): nothing is held for them any more.
    pub fn forget_runs(&self, document: Uuid) {
        let mut table = self.lock();
        table.roots.retain(|(d, _), _| *d != document);
        table.paused.retain(|(d, _)| *d != document);
        table.held.retain(|(d, _), _| *d != document);
    }

    /// A person cancels the question a card belongs to: its still-open cards leave the
    /// document, answers already given stay, and the client hears `cancelled` (ATM-30).
    pub async fn cancel(
        &self,
        reference: &DocumentRef,
        document: Uuid,
        decision: &str,
        login: &str,
    ) -> Result<(), AnswerRefused> {
        let Some((key, _, _)) = self.card_of(document, decision) else {
            return Err(AnswerRefused::NotAsked);
        };
        let why = format!("@{login} cancelled the question.");
        self.withdraw_keys(document, reference, vec![key], &why)
            .await;
        Ok(())
    }

    /// Withdraws the questions of `document` that `scope` takes, saying `why` to the client
    /// and in Chat. Returns how many there were.
    pub async fn withdraw(
        &self,
        document: Uuid,
        document_url: &str,
        scope: Scope,
        why: &str,
    ) -> usize {
        let keys: Vec<u64> = self
            .lock()
            .asked
            .iter()
            .filter(|(_, a)| a.document == document && scope.takes(a))
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return 0;
        }
        let reference = DocumentRef {
            id: document.to_string(),
            url: document_url.to_owned(),
        };
        let count = keys.len();
        self.withdraw_keys(document, &reference, keys, why).await;
        count
    }

    /// Forgets a link's questions (and the answers it could not take) without touching the
    /// document or telling anyone: the server is stopping, or the link ended for good and what
    /// it asked was withdrawn, and its cards stay open for whoever comes next.
    pub fn forget_link(&self, link: u64) {
        let mut table = self.lock();
        table.asked.retain(|_, a| a.link != link);
        table.owed.remove(&link);
    }

    /// A hold ended by an explicit act (AO-12): the questions its client's link `link` left
    /// waiting are withdrawn, saying `why`, and the answers it could not take are forgotten.
    pub async fn withdraw_kept(&self, document: Uuid, link: u64, why: &str) {
        let url = self
            .lock()
            .asked
            .values()
            .find(|a| a.document == document && a.link == link)
            .map(|a| a.document_url.clone());
        if let Some(url) = url {
            self.withdraw(document, &url, Scope::Link(link), why).await;
        }
        self.forget_link(link);
    }

    /// What `link` leaves for its client's hold (AO-18): the questions it waits on, and the
    /// answers it could not take (taken: the hold has them now). The questions stay filed
    /// under the link, still answerable, until [`Questions::rebind`] or a withdrawal.
    pub fn kept_for(&self, document: Uuid, link: u64) -> (Vec<HeldQuestion>, Vec<InputResult>) {
        let mut table = self.lock();
        let questions = table
            .asked
            .values()
            .filter(|a| a.document == document && a.link == link && a.withdrawn.is_none())
            .map(|a| HeldQuestion {
                request_id: a.request_id.clone(),
                session_id: a.session_id.clone(),
                cards: a.cards.clone(),
            })
            .collect();
        let owed = table.owed.remove(&link).unwrap_or_default();
        (questions, owed)
    }

    /// The client of `old` is back on `new` (AO-19): the questions `old` asked in the sessions
    /// handed back are waited on for `new` now, and their answers go to `reply`. Returns the
    /// `requestId`s still waited on (for `resumed.inputs`), the answers `old` could not take
    /// (owed, delivered once), and how many questions of the sessions not handed back remain
    /// filed under `old` for [`Questions::withdraw`] with `Scope::Link(old)`.
    pub fn rebind(
        &self,
        document: Uuid,
        old: u64,
        new: u64,
        reply: &Reply,
        handed: &[String],
    ) -> (Vec<String>, Vec<InputResult>) {
        let mut table = self.lock();
        let mut inputs = Vec::new();
        for asked in table.asked.values_mut() {
            if asked.document == document && asked.link == old && handed.contains(&asked.session_id)
            {
                asked.link = new;
                asked.reply = reply.clone();
                if asked.withdrawn.is_none() {
                    inputs.push(asked.request_id.clone());
                }
            }
        }
        // Answers held for a paused run go to the client that is back.
        for outcomes in table
            .held
            .iter_mut()
            .filter(|((d, _), _)| *d == document)
            .map(|(_, v)| v)
        {
            for (link, held_reply, _) in outcomes.iter_mut() {
                if *link == old {
                    *link = new;
                    *held_reply = reply.clone();
                }
            }
        }
        let owed = table.owed.remove(&old).unwrap_or_default();
        (inputs, owed)
    }

    /// Tells `reply` a question's answer. When the asking link has gone, the answer is kept
    /// for its client: in its hold, or until the link's end is decided (HO-16).
    async fn deliver_answer(&self, document: Uuid, link: u64, reply: &Reply, result: InputResult) {
        let Reply::Link(handle) = reply else {
            send_result(reply, result);
            return;
        };
        let frame = ServerMessage::InputResult(result.clone());
        if handle.command(LinkCommand::Send(Box::new(frame))) {
            return;
        }
        if self
            .deps
            .links
            .keep_for_client(document, KeptForClient::Answer(result.clone()))
            .await
            != Kept::Not
        {
            tracing::info!(%document, request = %result.request_id, "an answer is kept for the Planner's client, which is away");
            return;
        }
        tracing::info!(%document, request = %result.request_id, "an answer could not be told: its link is gone; kept until the link's end is decided");
        self.lock().owed.entry(link).or_default().push(result);
    }

    /// The question a card belongs to: its key, the card's position, and the question.
    fn card_of(&self, document: Uuid, decision: &str) -> Option<(u64, usize, HostInput)> {
        self.lock().asked.iter().find_map(|(key, a)| {
            if a.document != document {
                return None;
            }
            let position = a.cards.iter().position(|c| c == decision)?;
            Some((*key, position, a.input.clone()))
        })
    }

    async fn withdraw_keys(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        keys: Vec<u64>,
        why: &str,
    ) {
        let _gate = self.gates.lock(document).await;
        let mut taken = Vec::new();
        {
            let mut table = self.lock();
            for key in keys {
                let placed = table.asked.get(&key).is_some_and(|a| !a.cards.is_empty());
                if placed {
                    taken.extend(table.asked.remove(&key));
                } else if let Some(asked) = table.asked.get_mut(&key) {
                    // Still being placed: withdrawn once its cards are in.
                    asked.withdrawn = Some(why.to_owned());
                }
            }
        }
        if taken.is_empty() {
            return;
        }
        let ids: Vec<String> = taken.iter().flat_map(|a| a.cards.clone()).collect();
        let removed = self.delete_open(document, reference, &ids).await;
        if let Err(e) = removed {
            tracing::warn!(%document, error = %e, "withdrawn cards could not be taken out of the document");
        }
        for asked in taken {
            tracing::info!(%document, request = %asked.request_id, why, "a question was withdrawn");
            let title = match &asked.input {
                HostInput::Questionnaire(q) => q
                    .questions
                    .first()
                    .map(|q| q.question.clone())
                    .unwrap_or_default(),
                HostInput::Confirm(c) => c.title.clone(),
                HostInput::Select(s) => s.title.clone(),
                HostInput::Input(t) => t.title.clone(),
                HostInput::Editor(e) => e.title.clone(),
            };
            self.deps
                .transcript
                .post(
                    document,
                    "system",
                    format!(
                        "@chopin withdrew the question \u{201c}{}\u{201d}: {why}",
                        one_line(&title)
                    ),
                )
                .await;
            send_result(
                &asked.reply,
                InputResult {
                    request_id: asked.request_id,
                    status: InputStatus::Cancelled,
                    answer: None,
                    message: Some(why.to_owned()),
                },
            );
        }
    }

    /// Takes the open cards among `ids` out of the document (the gate held).
    async fn delete_open(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        ids: &[String],
    ) -> Result<(), String> {
        self.change(document, reference, |source| {
            let all = blocks(source);
            let open: Vec<(usize, String)> = decisions(source, &all)
                .into_iter()
                .filter(|(_, d)| d.state == DecisionState::Open && ids.contains(&d.id))
                .map(|(index, _)| (index, all[index].digest.clone()))
                .collect();
            Ok(if open.is_empty() {
                Change::Nothing
            } else {
                Change::Delete(open)
            })
        })
        .await
        .map_err(|unchanged| unchanged.to_string())
    }

    /// Makes the change `decide` picks on the document's source as it is now, as one
    /// `edit_plan` batch against its revision; tried again when the document moved meanwhile.
    async fn change(
        &self,
        document: Uuid,
        reference: &DocumentRef,
        mut decide: impl FnMut(&str) -> Result<Change, String>,
    ) -> Result<(), Unchanged> {
        let unavailable =
            || Unchanged::Unavailable("The document could not be changed just now.".to_owned());
        let open = self
            .deps
            .open
            .open(document)
            .await
            .map_err(|_| unavailable())?;
        for _ in 0..EDIT_TRIES {
            let record = self
                .deps
                .records
                .document(document)
                .await
                .map_err(|_| unavailable())?
                .ok_or_else(|| Unchanged::Refused("The document no longer exists.".to_owned()))?;
            let source = open.source().await;
            let ops = match decide(&source).map_err(Unchanged::Refused)? {
                Change::Nothing => return Ok(()),
                Change::Insert(after, content) => vec![EditOp::Insert { after, content }],
                Change::Replace(blocks) => blocks
                    .into_iter()
                    .map(|(index, digest, content)| EditOp::Replace {
                        index,
                        digest,
                        content,
                    })
                    .collect(),
                Change::Delete(blocks) => blocks
                    .into_iter()
                    .map(|(index, digest)| EditOp::Delete { index, digest })
                    .collect(),
            };
            let batch = EditBatch {
                revision: record.plan_revision as u64,
                ops,
            };
            let result = match open.edit_plan(reference.clone(), &[], &batch, None).await {
                Ok(result) => result,
                Err(EditRefused::Store(_)) | Err(EditRefused::NotOwner) => {
                    return Err(unavailable())
                }
            };
            match result.outcome {
                EditOutcome::Applied { .. } => return Ok(()),
                // The document moved between the read and the commit: decide again.
                EditOutcome::Stale { .. } => continue,
                EditOutcome::TooLarge { bytes, .. } => return Err(Unchanged::TooLarge(bytes)),
                EditOutcome::Invalid { message, .. } | EditOutcome::Locked { message, .. } => {
                    return Err(Unchanged::Refused(message))
                }
            }
        }
        Err(unavailable())
    }
}

/// Why [`Questions::change`] changed nothing.
#[derive(Debug, thiserror::Error)]
enum Unchanged {
    /// Storage failed, or the document kept moving.
    #[error("{0}")]
    Unavailable(String),
    /// The change itself was refused (the words say why).
    #[error("{0}")]
    Refused(String),
    /// The change would take the source to this many bytes, past its limit.
    #[error("The change would take the document to {0} bytes, past its 256 KiB source limit, so nothing was changed.")]
    TooLarge(usize),
}

fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let short: String = line.chars().take(120).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}

fn failed(request_id: &str, why: String) -> InputResult {
    InputResult {
        request_id: request_id.to_owned(),
        status: InputStatus::Failed,
        answer: None,
        message: Some(why),
    }
}

fn send_result(reply: &Reply, result: InputResult) {
    match reply {
        Reply::Link(link) => {
            if !link.command(LinkCommand::Send(Box::new(ServerMessage::InputResult(
                result,
            )))) {
                tracing::info!("a question's outcome could not be told: its link is gone");
            }
        }
        Reply::Waiter(waiter) => {
            let taken = waiter.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(waiter) = taken {
                let _ = waiter.send(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chopin_protocol::agent::{Question, QuestionOption, Questionnaire};

    fn question(multi: bool, preview: bool) -> Question {
        Question {
            question: "Which?".into(),
            header: None,
            options: vec![QuestionOption {
                label: "a".into(),
                description: None,
                preview: preview.then(|| "| x |".to_owned()),
            }],
            multi_select: multi,
        }
    }

    /// ATM-25: written text is `custom` only on a single-select question without previews;
    /// otherwise it is `chat`, never a choice.
    #[test]
    fn atm_25_written_text_is_custom_only_where_the_dialog_takes_typed_text() {
        let input = HostInput::Questionnaire(Questionnaire {
            questions: vec![
                question(false, false),
                question(true, false),
                question(false, true),
            ],
        });
        let written = |i: usize| (i, vec![Answer::written("mona", "talk first")]);
        let InputAnswer::Questionnaire(q) =
            input_answer(&input, &[written(0), written(1), written(2)])
        else {
            panic!("a questionnaire's answer")
        };
        let kinds: Vec<AnswerKind> = q.answers.iter().map(|a| a.kind).collect();
        assert_eq!(
            kinds,
            [AnswerKind::Custom, AnswerKind::Chat, AnswerKind::Chat]
        );
        assert!(q.answers.iter().all(|a| a.options.is_empty()));
    }
}
