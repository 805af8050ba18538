//! A person's message in a document's Chat: `chat:send` and its answer.
//!
//! Owns: [`Chat`] — the rules of `chat:send` (write access, the text's bounds, `@chopin`
//! addressing the Planner through [`Turns::request`], MSG-16 de-duplication of a re-sent request
//! id, the MSG-20 cap on sends in flight) and the sender's answer (`chat:ack` / `chat:refused`).
//! Does not own: the transcript, its feed, history and bootstrap ([`crate::transcript`]), the
//! sockets and their frames (the transport layer), or whether the Planner takes a message
//! ([`crate::turns`]).
//!
//! Invariants:
//! - A message to the Planner is saved only once the Planner accepted it; a refused one saves
//!   nothing and is told to its sender alone (UNA-02, MSG-10, MSG-11).
//! - A send holds its document's transcript gate while the Planner decides and the entry is
//!   put in line to be saved, so the transcript, the room and the Planner see one order; it is
//!   answered once the entry is durable (the next send on the document need not wait for that,
//!   and their entries share a commit).
//! - Every time is the server clock's; nothing here draws randomness.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::Planted;
use crate::runtime::recent::Recent;
use crate::runtime::SharedClock;
use crate::store::{NewTranscriptEntry, UnixMillis};
pub use crate::transcript::Malformed;
use crate::transcript::Transcript;
use crate::turns::{Accepted, DocumentReference, Focus, FollowUp, PlannerRequest, Refused, Turns};

pub use crate::transcript::MESSAGE_MAX_CHARS;
/// The longest request id a browser may give a send, in characters.
pub const REQUEST_ID_MAX_CHARS: usize = 100;
/// How long a request id's outcome is remembered (MSG-16: 10 minutes).
pub const REQUEST_ID_MEMORY_MS: i64 = 10 * 60 * 1000;
/// How many request ids' outcomes are remembered at most; the oldest go first.
pub const REQUEST_ID_MEMORY_ENTRIES: usize = 10_000;
/// The largest instruction MCP `invoke_planner` posts, in bytes of UTF-8.
pub const INSTRUCTION_MAX_BYTES: usize = 64 * 1024;
/// Sends processed at once in this process (MSG-20); past that a send is
/// `temporarily-unavailable`.
pub const SENDS_IN_FLIGHT_MAX: usize = 20;

/// The words of a send refused because too many are in flight (MSG-20).
const TOO_MANY_IN_FLIGHT: &str =
    "Too many messages are being sent right now, so this one wasn't sent. Send it again in a moment.";

/// What the Planner did with an accepted message (`planner` of `chat:ack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlannerTook {
    Started,
    Steered,
}

impl From<Accepted> for PlannerTook {
    fn from(a: Accepted) -> Self {
        match a {
            Accepted::Started => PlannerTook::Started,
            Accepted::Steered => PlannerTook::Steered,
        }
    }
}

/// The sender's answer to a `chat:send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum SendReply {
    /// Saved as `seq`; `planner` says whether it started or steered a turn (`null` for a
    /// message to the room).
    #[serde(rename = "chat:ack", rename_all = "camelCase")]
    Ack {
        request_id: String,
        seq: i64,
        planner: Option<PlannerTook>,
    },
    /// Not saved, and nobody else heard of it.
    #[serde(rename = "chat:refused", rename_all = "camelCase")]
    Refused {
        request_id: String,
        code: String,
        message: String,
    },
    /// Not saved, and not answered at all: the process is stopping (MSG-18), so the browser
    /// sends the message again to the next process.
    #[serde(skip)]
    Unanswered { request_id: String },
}

impl SendReply {
    /// The frame the sender is sent, if any ([`SendReply::Unanswered`] sends none).
    pub fn frame(&self) -> Option<Value> {
        match self {
            SendReply::Unanswered { .. } => None,
            _ => Some(serde_json::to_value(self).unwrap_or(Value::Null)),
        }
    }

    pub fn refused(request_id: &str, code: &str, message: impl Into<String>) -> Self {
        SendReply::Refused {
            request_id: request_id.to_owned(),
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The code of a refusal.
    pub fn code(&self) -> Option<&str> {
        match self {
            SendReply::Refused { code, .. } => Some(code),
            SendReply::Ack { .. } | SendReply::Unanswered { .. } => None,
        }
    }

    /// MSG-16: every outcome is remembered for its request id except a passing trouble, which
    /// the browser sends again with the same id and which must then be processed.
    fn remembered(&self) -> bool {
        self.code() != Some("temporarily-unavailable")
            && !matches!(self, SendReply::Unanswered { .. })
    }
}

/// A `chat:send` as read from its frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    pub request_id: String,
    pub text: String,
    /// The command references the message carries (`references` of kind `command`, CMD-10);
    /// checked when the message is accepted.
    pub commands: Vec<CommandRef>,
    /// The ids of the files the message sends (`attachments`), its sender's uploads.
    pub files: Vec<Uuid>,
    /// The parts of the document and the repository files the message mentions (`references`
    /// of kind `heading`, `decision` and `file`), resolved when the message is accepted.
    pub mentions: Vec<Mention>,
}

/// Whether resolving `m` needs the room's repository (a `#` reference or a file mention).
fn names_repository(m: &Mention) -> bool {
    matches!(m, Mention::Document { .. } | Mention::File { .. })
}

/// A mention as a `chat:send` names it: the part, never its text (CTX-23).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mention {
    /// `#`: another ordinary document of the repository (CTX-18).
    Document {
        id: Uuid,
    },
    Heading {
        anchor: String,
    },
    Decision {
        decision_id: String,
    },
    File {
        path: String,
    },
    /// `%`: one of the document's research cards (CTX-33).
    Research {
        workspace_id: Uuid,
    },
}

/// A command chip: the command a message runs, as the composer sent it (CMD-10): its name
/// (without `/`), the kind the Planner reported, and the range of its `/name` token in the
/// text (UTF-16 code units, as a browser counts).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandRef {
    /// Always `command`.
    #[serde(rename = "type")]
    pub kind_of_reference: String,
    pub name: String,
    pub command_kind: String,
    pub start: u64,
    pub end: u64,
}

/// The most file ids one `chat:send` carries, whatever the configured count (which is checked
/// when the message is accepted).
pub const ATTACHMENT_IDS_MAX: usize = 64;
/// The words of an image sent to a Planner whose model does not read images (FILE-24).
pub const IMAGES_UNREADABLE_WORDS: &str = "This model can't read images";
/// The longest heading anchor or Decision id a mention names, in bytes.
pub const MENTION_NAME_MAX_BYTES: usize = 1024;
/// The refusal of a research mention that is not one of this document's (CTX-33).
pub const RESEARCH_NOT_HERE_WORDS: &str =
    "That research is not this document's, so it cannot be mentioned.";
/// The most references one `chat:send` carries.
pub const REFERENCES_MAX: usize = 16;
/// The longest command name or kind taken, in characters.
pub const COMMAND_NAME_MAX_CHARS: usize = 100;
/// The kind of Chopin's own commands (`/research`, CMD-19): never sent to the Planner.
pub const CHOPIN_COMMAND_KIND: &str = "chopin";

impl CommandRef {
    /// Whether the reference is the `/name` token that opens `text` (else CMD-13 refuses it).
    fn opens(&self, text: &str) -> bool {
        let token = format!("/{}", self.name);
        let units = token.encode_utf16().count() as u64;
        self.start == 0
            && self.end == units
            && text.starts_with(&token)
            && text[token.len()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace)
    }

    /// The command as the turn builds its prompt from it (CMD-17, CMD-18).
    pub fn as_command(&self) -> crate::turns::Command {
        crate::turns::Command {
            name: self.name.clone(),
            kind: self.command_kind.clone(),
        }
    }
}

impl SendRequest {
    /// Reads `{type: "chat:send", requestId, text}`. A request id is 1–100 characters.
    pub fn from_frame(frame: &Value) -> Result<Self, Malformed> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            request_id: String,
            text: String,
            #[serde(default)]
            references: Vec<Value>,
            #[serde(default)]
            attachments: Vec<Uuid>,
        }
        let wire: Wire = serde_json::from_value(frame.clone()).map_err(|_| {
            Malformed("chat:send needs a string \"requestId\" and a string \"text\" (and \"references\", if any, is a list; \"attachments\", if any, a list of file ids)".into())
        })?;
        if wire.attachments.len() > ATTACHMENT_IDS_MAX {
            return Err(Malformed(format!(
                "a chat:send carries at most {ATTACHMENT_IDS_MAX} file ids"
            )));
        }
        if wire.references.len() > REFERENCES_MAX {
            return Err(Malformed(format!(
                "a chat:send carries at most {REFERENCES_MAX} references"
            )));
        }
        let mut commands = Vec::new();
        let mut mentions = Vec::new();
        for reference in wire.references {
            let field = |name: &str| {
                reference
                    .get(name)
                    .and_then(Value::as_str)
                    .filter(|v| !v.is_empty() && v.len() <= MENTION_NAME_MAX_BYTES)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        Malformed(format!(
                            "a {} reference needs a string \"{name}\" of 1 to {MENTION_NAME_MAX_BYTES} bytes",
                            reference["type"]
                        ))
                    })
            };
            match reference.get("type").and_then(Value::as_str) {
                Some("command") => {}
                Some("document") => {
                    let id = field("documentId")?;
                    let id = Uuid::parse_str(&id).map_err(|_| {
                        Malformed("a document reference's \"documentId\" is a document's id".into())
                    })?;
                    mentions.push(Mention::Document { id });
                    continue;
                }
                Some("heading") => {
                    mentions.push(Mention::Heading {
                        anchor: field("anchor")?,
                    });
                    continue;
                }
                Some("decision") => {
                    mentions.push(Mention::Decision {
                        decision_id: field("decisionId")?,
                    });
                    continue;
                }
                Some("research") => {
                    let id = field("workspaceId")?;
                    let workspace_id = Uuid::parse_str(&id).map_err(|_| {
                        Malformed("a research reference's \"workspaceId\" is a research card's id".into())
                    })?;
                    mentions.push(Mention::Research { workspace_id });
                    continue;
                }
                Some("file") => {
                    // A path's own bound is a refusal the composer shows (CTX-28), not a
                    // malformed frame: only a non-string is malformed here.
                    let Some(path) = reference.get("path").and_then(Value::as_str) else {
                        return Err(Malformed(
                            "a file reference needs a string \"path\"".into(),
                        ));
                    };
                    mentions.push(Mention::File {
                        path: path.to_owned(),
                    });
                    continue;
                }
                _ => {
                    return Err(Malformed(
                        "a reference is {\"type\": \"command\", \"name\", \"commandKind\", \"start\", \"end\"}, {\"type\": \"document\", \"documentId\"}, {\"type\": \"heading\", \"anchor\"}, {\"type\": \"decision\", \"decisionId\"}, {\"type\": \"research\", \"workspaceId\"} or {\"type\": \"file\", \"path\"}".into(),
                    ))
                }
            }
            let command: CommandRef = serde_json::from_value(reference).map_err(|_| {
                Malformed("a command reference is {\"type\": \"command\", \"name\": string, \"commandKind\": string, \"start\": number, \"end\": number}".into())
            })?;
            let fits = |t: &str| !t.is_empty() && t.chars().count() <= COMMAND_NAME_MAX_CHARS;
            if !fits(&command.name) || !fits(&command.command_kind) {
                return Err(Malformed(format!(
                    "a command's \"name\" and \"commandKind\" are 1 to {COMMAND_NAME_MAX_CHARS} characters"
                )));
            }
            commands.push(command);
        }
        let id_chars = wire.request_id.chars().count();
        if id_chars == 0 || id_chars > REQUEST_ID_MAX_CHARS {
            return Err(Malformed(format!(
                "a chat:send \"requestId\" is 1 to {REQUEST_ID_MAX_CHARS} characters"
            )));
        }
        Ok(SendRequest {
            request_id: wire.request_id,
            text: wire.text,
            commands,
            files: wire.attachments,
            mentions,
        })
    }
}

/// A message's references as stored with it: its command (CMD-16), its mentions (with the
/// label the server resolved, CTX-23) and its files, each
/// `{type: "attachment", id, name, kind, mimeType, size}`; `None` for neither.
fn message_refs(
    command: Option<&CommandRef>,
    mentions: &[(Value, String)],
    files: &[crate::files::SentFile],
) -> Option<String> {
    let mut refs: Vec<Value> = command
        .and_then(|c| serde_json::to_value(c).ok())
        .into_iter()
        .collect();
    refs.extend(mentions.iter().map(|(stored, _)| stored.clone()));
    for f in files {
        let mut v = crate::files::file_json(&f.file);
        v["type"] = Value::String("attachment".into());
        refs.push(v);
    }
    (!refs.is_empty()).then(|| Value::Array(refs).to_string())
}

/// Whom a message is for: as its words say (`@chopin` addresses the Planner), or the Planner
/// whatever they say (MCP `invoke_planner`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Addressed {
    AsWritten,
    ToPlanner,
    /// To the Planner alone, as an automatic follow-up: Chat shows a notice naming the sender
    /// instead of the message (OWN-22); who may send one is the turns' to decide (OWN-23).
    FollowUp(FollowUp),
}

/// Who sends, where.
#[derive(Debug, Clone)]
pub struct Sender {
    /// GitHub login.
    pub login: String,
    /// Push or administration access to the document's repository.
    pub can_write: bool,
    /// The sender as a Planner owner: their account and live browser login, for a harness
    /// whose model runs in this process (the first writer to invoke it owns the Planner).
    /// `None` where the message comes with no browser login (a bearer token's MCP call).
    pub owner: Option<crate::store::Holder>,
    /// The sender's browser sign-in, whose GitHub session lists the repository's files for a
    /// file mention (CTX-38); `None`: no file can be mentioned.
    pub session: Option<Arc<crate::identity::sign_ins::LiveLogin>>,
}

/// The Chat a message is sent in: a root document's. A child document has no Chat of its own;
/// its room sends to its root's, with the child as the message's focus (ISO-25).
#[derive(Debug, Clone)]
pub struct Place {
    pub document: Uuid,
    /// Its canonical URL (the refusal words name it, UNA-04).
    pub url: String,
    /// The child document the message was sent from, if any.
    pub focus: Option<Focus>,
}

/// Whether `text` mentions `@chopin` as a word, in any case: `@chopin`, `@Chopin,` and
/// `(@CHOPIN)` do; `me@chopin.dev`'s `@chopin.dev` does not start a word, and `@chopin-bot` or
/// `@chopinx` are other handles.
pub fn mentions_planner(text: &str) -> bool {
    const HANDLE: &str = "@chopin";
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let is_handle = |c: char| is_word(c) || c == '-';
    let lower = text.to_lowercase();
    lower.match_indices(HANDLE).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after_str = &lower[at + HANDLE.len()..];
        let mut after = after_str.chars();
        let next = after.next();
        // `@chopin.` ends a sentence; `@chopin.dev` is a domain.
        let domain = next == Some('.') && after.next().is_some_and(is_word);
        !before.is_some_and(|c| is_word(c) || c == '@') && !next.is_some_and(is_handle) && !domain
    })
}

// ---------------------------------------------------------------------------------------------
// State

/// Most automatic follow-ups a document takes in any rolling hour (OWN-25).
pub const FOLLOW_UPS_PER_HOUR: usize = 10;
const HOUR_MS: UnixMillis = 60 * 60 * 1000;
const RATE_LIMITED_WORDS: &str =
    "Too many automatic follow-ups for this document. Try again later.";

/// The automatic follow-ups each document took in the last hour (OWN-25), when.
#[derive(Debug, Default)]
pub struct FollowUps(BTreeMap<Uuid, VecDeque<UnixMillis>>);

impl FollowUps {
    /// How many follow-ups of `document` this counts in the hour before `now`, dropping what
    /// the hour left behind (one taken exactly an hour ago no longer counts), and the document
    /// once nothing is left.
    fn in_hour(&mut self, document: Uuid, now: UnixMillis) -> usize {
        let Some(taken) = self.0.get_mut(&document) else {
            return 0;
        };
        while taken.front().is_some_and(|at| now - at >= HOUR_MS) {
            taken.pop_front();
        }
        let n = taken.len();
        if n == 0 {
            self.0.remove(&document);
        }
        n
    }

    /// Whether `document` may take another at `now`: fewer than [`FOLLOW_UPS_PER_HOUR`] in the
    /// hour before it.
    pub fn allows(&mut self, document: Uuid, now: UnixMillis) -> bool {
        self.in_hour(document, now) < FOLLOW_UPS_PER_HOUR
    }

    /// `document` took one at `now`.
    pub fn record(&mut self, document: Uuid, now: UnixMillis) {
        self.0.entry(document).or_default().push_back(now);
    }

    /// Whether this counts any follow-up of `document` in the hour before `now`.
    pub fn counts(&mut self, document: Uuid, now: UnixMillis) -> bool {
        self.in_hour(document, now) > 0
    }

    /// `document`'s follow-ups as read back from its transcript (`sent`, oldest first), in
    /// place of what this counted.
    pub fn read_back(&mut self, document: Uuid, sent: Vec<UnixMillis>) {
        self.forget(document);
        if !sent.is_empty() {
            self.0.insert(document, sent.into());
        }
    }

    /// Forgets `document`.
    pub fn forget(&mut self, document: Uuid) {
        self.0.remove(&document);
    }
}

/// Chat sends of this process.
pub struct Chat {
    follow_ups: Mutex<FollowUps>,
    sent: Mutex<Sent>,
    in_flight: Arc<AtomicUsize>,
    /// Sends being processed now, counted apart from the admission above, and the most ever
    /// at once: what the simulator holds to the cap.
    processing: AtomicUsize,
    most_processing: AtomicUsize,
    /// A bug the simulator planted (see [`Planted::sends_cap_off`]).
    sends_cap_off: AtomicBool,
    transcript: Arc<Transcript>,
    turns: Arc<Turns>,
    clock: SharedClock,
    /// What the Planner offers, for checking a command (`None`: no commands are ever offered).
    models: Option<Arc<crate::models::Models>>,
    /// The documents' Chat files, for a message that sends some (`None`: no message may).
    files: Option<Arc<crate::files::Files>>,
    /// The documents' live text, which a message's mentions resolve against (`None`: a
    /// mention is refused).
    content: Option<Arc<crate::content::OpenDocuments>>,
    /// The repositories' file listings and the documents they belong to, for a file mention
    /// (`None`: every file mention is refused).
    repo_files: Option<(
        Arc<crate::repo_files::RepoFiles>,
        Arc<dyn crate::store::DocumentStore>,
    )>,
    /// Told of every member message saved (title maintenance); `None`: nobody.
    on_saved: Option<Arc<dyn MessageSaved>>,
    /// Automatic participation, told of every member message saved.
    participation: Option<Arc<crate::participation::Participation>>,
    /// Told of every `/research` message saved; `None`: `/research` is refused as unavailable.
    research: Option<Arc<dyn ResearchRequests>>,
    /// The documents' research cards, for a research mention (`None`: refused).
    research_cards: Option<Arc<crate::research_cards::ResearchCards>>,
}

type Key = (String, Uuid, String);

/// MSG-16's memory of request ids: outcomes, and sends still being processed.
struct Sent {
    done: Recent<Key, SendReply>,
    pending: BTreeMap<Key, watch::Receiver<Option<SendReply>>>,
}

impl Default for Sent {
    fn default() -> Self {
        Sent {
            done: Recent::new(REQUEST_ID_MEMORY_MS, REQUEST_ID_MEMORY_ENTRIES),
            pending: BTreeMap::new(),
        }
    }
}

/// One send being processed; counts against [`SENDS_IN_FLIGHT_MAX`] until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One send under way, counted in [`Chat::most_processing_at_once`] until dropped.
struct Processing<'a>(&'a AtomicUsize);

impl Drop for Processing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Clears a send's pending mark if it ends without an outcome (its task was dropped).
struct Pending<'a> {
    chat: &'a Chat,
    key: Key,
    tx: watch::Sender<Option<SendReply>>,
    settled: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.chat.lock().pending.remove(&self.key);
        }
    }
}

impl Chat {
    pub fn new(transcript: Arc<Transcript>, turns: Arc<Turns>, clock: SharedClock) -> Self {
        Chat {
            follow_ups: Mutex::default(),
            sent: Mutex::default(),
            in_flight: Arc::default(),
            processing: AtomicUsize::new(0),
            most_processing: AtomicUsize::new(0),
            sends_cap_off: AtomicBool::new(false),
            transcript,
            turns,
            clock,
            models: None,
            files: None,
            content: None,
            repo_files: None,
            on_saved: None,
            participation: None,
            research: None,
            research_cards: None,
        }
    }

    /// Resolves a research mention against the document's research cards (CTX-33).
    pub fn with_research_cards(mut self, cards: Arc<crate::research_cards::ResearchCards>) -> Self {
        self.research_cards = Some(cards);
        self
    }

    /// Checks a file mention against its repository's listing (CTX-26, CTX-38).
    pub fn with_repo_files(
        mut self,
        files: Arc<crate::repo_files::RepoFiles>,
        documents: Arc<dyn crate::store::DocumentStore>,
    ) -> Self {
        self.repo_files = Some((files, documents));
        self
    }

    /// Runs `/research`: each such message, once saved, is handed to `research`.
    pub fn with_research(mut self, research: Arc<dyn ResearchRequests>) -> Self {
        self.research = Some(research);
        self
    }

    /// Tells automatic participation of every member message saved, after it is durable.
    pub fn with_participation(
        mut self,
        participation: Arc<crate::participation::Participation>,
    ) -> Self {
        self.participation = Some(participation);
        self
    }

    /// Tells `on_saved` of every member message saved, after it is durable.
    pub fn with_on_saved(mut self, on_saved: Arc<dyn MessageSaved>) -> Self {
        self.on_saved = Some(on_saved);
        self
    }

    /// Resolves a message's mentions against the documents' live text (CTX-23).
    pub fn with_content(mut self, content: Arc<crate::content::OpenDocuments>) -> Self {
        self.content = Some(content);
        self
    }

    /// Lets a message send the Chat files its sender uploaded (FILE-09).
    pub fn with_files(mut self, files: Arc<crate::files::Files>) -> Self {
        self.files = Some(files);
        self
    }

    /// Checks commands against what `models` says the Planner offers.
    pub fn with_models(mut self, models: Arc<crate::models::Models>) -> Self {
        self.models = Some(models);
        self
    }

    /// Makes sure this process counts `document`'s follow-ups of the last hour: when it has
    /// none of its own in that hour (after a restart, or on a process that took the document
    /// over), it reads them back from the notices in the transcript, so neither resets OWN-25's
    /// count. A read that fails leaves the count as it is (logged); the send goes on.
    async fn know_follow_ups(&self, document: Uuid) {
        let now = self.clock.now_ms();
        if self.follow_ups_lock().counts(document, now) {
            return;
        }
        match self
            .transcript
            .follow_ups_since(document, now - HOUR_MS + 1)
            .await
        {
            Ok(sent) => self.follow_ups_lock().read_back(document, sent),
            Err(e) => {
                tracing::warn!(%document, error = %e, "could not read back the hour's follow-ups")
            }
        }
    }

    /// `document` is served by another process now: what this one counted of its follow-ups is
    /// forgotten, and read back from the transcript if it comes back.
    pub fn moved(&self, document: Uuid) {
        self.follow_ups_lock().forget(document);
    }

    fn follow_ups_lock(&self) -> MutexGuard<'_, FollowUps> {
        self.follow_ups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> MutexGuard<'_, Sent> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one of the [`SENDS_IN_FLIGHT_MAX`] places, or `None` when all are taken.
    pub fn try_admit(&self) -> Option<InFlight> {
        if self.sends_cap_off.load(Ordering::SeqCst) {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            return Some(InFlight(self.in_flight.clone()));
        }
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < SENDS_IN_FLIGHT_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(self.in_flight.clone()))
    }

    /// Sends being processed now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The most sends this process has had under way at once (counted around their processing,
    /// apart from the admission that caps them).
    pub fn most_processing_at_once(&self) -> usize {
        self.most_processing.load(Ordering::SeqCst)
    }

    /// Plants the bugs of `planted` that live here (the simulator's, to show it finds them).
    pub fn plant(&self, planted: Planted) {
        self.sends_cap_off
            .store(planted.sends_cap_off, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Sending

/// Handles one `chat:send` (see the module docs): the sender's answer; the room hears an
/// accepted message as `chat:message` through [`Chat::subscribe`].
impl Chat {
    pub async fn send(&self, place: &Place, sender: &Sender, request: SendRequest) -> SendReply {
        self.deliver(place, sender, request, Addressed::AsWritten)
            .await
    }

    /// MCP `invoke_planner`: `request.text` is an instruction to the Planner, posted as the
    /// sender's own message whether or not it mentions `@chopin`, and at most
    /// [`INSTRUCTION_MAX_BYTES`]. Otherwise exactly a `chat:send` that addresses the Planner:
    /// the same checks, order, refusals and request-id memory.
    pub async fn invoke(&self, place: &Place, sender: &Sender, request: SendRequest) -> SendReply {
        self.deliver(place, sender, request, Addressed::ToPlanner)
            .await
    }

    /// MCP `invoke_planner` with `as: "system"`: an automatic follow-up (OWN-22). It goes to the
    /// Planner alone and Chat shows a notice naming the sender; it needs a turn of its own, only
    /// the document's creator or the account holding the Planner may send one (`from`, OWN-23),
    /// and a document takes at most [`FOLLOW_UPS_PER_HOUR`] in any rolling hour (OWN-25:
    /// `rate-limited`, nothing posted).
    pub async fn follow_up(
        &self,
        place: &Place,
        sender: &Sender,
        from: FollowUp,
        request: SendRequest,
    ) -> SendReply {
        self.deliver(place, sender, request, Addressed::FollowUp(from))
            .await
    }

    /// A task draft a writer's Build plan press asks for, with the words the server wrote from
    /// the plan (LIFE-18..20, LIFE-23): within Chat's cap on sends in flight, a turn of its own
    /// (refused `planner-busy` while one runs, RULINGS LIFE-27) under the presser's login, and
    /// no member message: Chat records a notice naming the presser, saved before the turn
    /// starts.
    pub async fn draft(
        &self,
        place: &Place,
        sender: &Sender,
        request_id: &str,
        instruction: String,
    ) -> SendReply {
        if !sender.can_write {
            return SendReply::refused(
                request_id,
                "read-only",
                "Building a plan needs push access to this document's repository.",
            );
        }
        let Some(_in_flight) = self.try_admit() else {
            return SendReply::refused(request_id, "temporarily-unavailable", TOO_MANY_IN_FLIGHT);
        };
        // In line with Chat's own sends, so the notice sits where the press happened.
        let held = self.transcript.gate(place.document).await;
        let (saved_tx, saved_rx) = watch::channel(None);
        let asked = self
            .turns
            .request(PlannerRequest {
                document: place.document,
                document_url: place.url.clone(),
                from_login: sender.login.clone(),
                sender: sender.owner.clone(),
                text: instruction,
                focus: None,
                follow_up: None,
                draft: true,
                notice_saved: Some(saved_rx),
                command: None,
                files: Vec::new(),
                mentions: Vec::new(),
                references: Vec::new(),
                explicit: false,
                comment: None,
            })
            .await;
        let planner = match asked {
            Ok(accepted) => PlannerTook::from(accepted),
            Err(Refused::Stopping) => {
                return SendReply::Unanswered {
                    request_id: request_id.to_owned(),
                }
            }
            Err(refused) => return refusal(request_id, &refused),
        };
        let notice = NewTranscriptEntry {
            author_login: None,
            kind: "system".into(),
            body: format!(
                "@{} asked chopin to break the plan into tasks.",
                sender.login
            ),
            created_at_ms: self.clock.now_ms(),
            key: None,
            refs: None,
            attachments: Vec::new(),
        };
        let saved = self.transcript.queue_gated(place.document, &notice).await;
        drop(held);
        match saved.await {
            Ok(saved) => {
                let _ = saved_tx.send(Some(true));
                SendReply::Ack {
                    request_id: request_id.to_owned(),
                    seq: saved.seq,
                    planner: Some(planner),
                }
            }
            Err(e) => {
                let _ = saved_tx.send(Some(false));
                tracing::error!(error = %e, document = %place.document, "chat: a draft's notice could not be saved");
                SendReply::refused(
                    request_id,
                    "not-saved",
                    "Chat could not record the request, so no draft started. Press Build plan again in a moment.",
                )
            }
        }
    }

    async fn deliver(
        &self,
        place: &Place,
        sender: &Sender,
        request: SendRequest,
        addressed: Addressed,
    ) -> SendReply {
        let id = request.request_id.as_str();
        if !sender.can_write {
            return SendReply::refused(
            id,
            "read-only",
            "You can read this document but not send messages in its Chat: that needs push access to its repository. Your message wasn't sent.",
        );
        }
        if request.text.trim().is_empty() {
            return SendReply::refused(id, "empty", "A message needs some text.");
        }
        let bytes = request.text.len();
        if addressed != Addressed::AsWritten && bytes > INSTRUCTION_MAX_BYTES {
            return SendReply::refused(
                id,
                "too-long",
                format!("An instruction is at most 64 KiB; this one has {bytes} bytes, so it wasn't sent."),
            );
        }
        let chars = request.text.chars().count();
        if addressed == Addressed::AsWritten && chars > MESSAGE_MAX_CHARS {
            return SendReply::refused(
                id,
                "too-long",
                format!(
                "A message is at most 20,000 characters; this one has {chars}, so it wasn't sent."
            ),
            );
        }
        let key: Key = (
            sender.login.clone(),
            place.document,
            request.request_id.clone(),
        );
        // MSG-16 then MSG-20, in one step: a re-sent id is answered from memory, or waits for the
        // send still processing it; a new one takes a place in flight or is turned away.
        let (mut pending, _in_flight) = loop {
            let waiting = {
                let now = self.clock.now_ms();
                let mut table = self.lock();
                if let Some(reply) = table.done.get(&key, now) {
                    return reply.clone();
                }
                match table.pending.get(&key) {
                    Some(rx) => rx.clone(),
                    None => {
                        let Some(in_flight) = self.try_admit() else {
                            return SendReply::refused(
                                id,
                                "temporarily-unavailable",
                                TOO_MANY_IN_FLIGHT,
                            );
                        };
                        let (tx, rx) = watch::channel(None);
                        table.pending.insert(key.clone(), rx);
                        drop(table);
                        break (
                            Pending {
                                chat: self,
                                key: key.clone(),
                                tx,
                                settled: false,
                            },
                            in_flight,
                        );
                    }
                }
            };
            let mut waiting = waiting;
            let settled = waiting
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|reply| reply.clone());
            if let Some(reply) = settled {
                return reply;
            }
            // The first send ended without an outcome: look again (it may be processed here).
        };
        let now = self.processing.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_processing.fetch_max(now, Ordering::SeqCst);
        let processing = Processing(&self.processing);
        let reply = match self.saved_before(place, sender, &request).await {
            Some(reply) => reply,
            None => self.process(place, sender, request, addressed).await,
        };
        drop(processing);
        {
            let now = self.clock.now_ms();
            let mut table = self.lock();
            if reply.remembered() {
                table.done.insert(key, reply.clone(), now);
            }
            table.pending.remove(&pending.key);
            pending.settled = true;
        }
        let _ = pending.tx.send(Some(reply.clone()));
        reply
    }

    /// MSG-16 whichever process saw the first send: the line an earlier send of this request
    /// id saved, found by the key its append carried ([`line_key`]), answered with its `seq`.
    /// This process may never have seen that send (it took the document over, or restarted),
    /// and the line must not be saved, nor a turn started for it, twice. Whether that send
    /// started or steered a turn is not kept with the line, so `planner` is `null`: this send
    /// started nothing. A failed read is logged and the send processed: the append's key still
    /// keeps the line from being saved twice.
    async fn saved_before(
        &self,
        place: &Place,
        sender: &Sender,
        request: &SendRequest,
    ) -> Option<SendReply> {
        let key = line_key(&sender.login, &request.request_id);
        match self.transcript.by_key(place.document, &key).await {
            Ok(saved) => saved.map(|saved| SendReply::Ack {
                request_id: request.request_id.clone(),
                seq: saved.seq,
                planner: None,
            }),
            Err(e) => {
                tracing::warn!(document = %place.document, error = %e, "chat: could not look for a re-sent message's line");
                None
            }
        }
    }

    /// The command `request` runs, checked (CMD-11..15, CMD-19), or the refusal's code and
    /// words.
    async fn command(
        &self,
        document: Uuid,
        request: &SendRequest,
    ) -> Result<Option<CommandRef>, (&'static str, String)> {
        let Some(command) = request.commands.first() else {
            return Ok(None);
        };
        if request.commands.len() > 1 {
            return Err(("one-command", "A message can run one command.".to_owned()));
        }
        if !command.opens(&request.text) {
            return Err((
                "command-not-first",
                "A command has to open the message.".to_owned(),
            ));
        }
        let name = &command.name;
        if command.command_kind == CHOPIN_COMMAND_KIND {
            // Chopin's own commands are never the Planner's (CMD-19).
            if name == RESEARCH_COMMAND && self.research.is_some() {
                if research_brief(&request.text).is_none() {
                    return Err(("research-brief-missing", RESEARCH_BRIEF_WORDS.to_owned()));
                }
                return Ok(Some(command.clone()));
            }
            return Err((
                "command-unavailable",
                format!("/{name} is not available on this server yet."),
            ));
        }
        let offered = match &self.models {
            Some(models) => models.commands(document).await,
            None => None,
        };
        // Nothing attached, or a client that reports none (CMD-12).
        let offered = offered.unwrap_or_default();
        if offered.is_empty() {
            return Err((
                "no-commands",
                format!("The Planner has not reported any commands, so /{name} cannot run."),
            ));
        }
        // Name and kind both: a name two kinds share never runs as the other (CMD-10).
        if offered
            .iter()
            .any(|c| &c.name == name && c.kind == command.command_kind)
        {
            Ok(Some(command.clone()))
        } else {
            Err((
                "command-not-offered",
                format!("/{name} is not one of the commands the Planner offers."),
            ))
        }
    }

    /// The mentions of `request` resolved against the document the message is sent from, as
    /// it stands now: each as stored with the message (with the label the person saw) and the
    /// words the Planner is told (CTX-23..32), or the refusal's code and words.
    async fn mentions(
        &self,
        place: &Place,
        sender: &Sender,
        request: &SendRequest,
    ) -> Result<(Vec<(Value, String)>, Vec<DocumentReference>), (&'static str, String)> {
        use chopin_document::mention::{self, check_path};
        if request.mentions.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut references = Vec::new();
        let document = place.focus.as_ref().map_or(place.document, |f| f.document);
        let source = match &self.content {
            Some(content) => match content.open(document).await {
                Ok(open) => Some(open.source().await),
                Err(e) => {
                    tracing::error!(error = %e, document = %document, "chat: the document's text could not be read for a mention");
                    None
                }
            },
            None => None,
        };
        let Some(source) = source else {
            return Err((
                "temporarily-unavailable",
                "The document could not be read just now, so its parts cannot be mentioned. Send it again in a moment.".to_owned(),
            ));
        };
        let headings = mention::heading_anchors(&source);
        let decisions = mention::decision_labels(&source);
        // The room's document (its repository), read once for every reference and file mention.
        let room = match (
            &self.repo_files,
            request.mentions.iter().any(names_repository),
        ) {
            (Some((_, documents)), true) => documents.document(place.document).await.ok().flatten(),
            _ => None,
        };
        let mut out = Vec::with_capacity(request.mentions.len());
        for m in &request.mentions {
            out.push(match m {
                Mention::Document { id } => {
                    let doc = self.referable(place, room.as_ref(), *id).await?;
                    references.push(DocumentReference {
                        id: doc.id,
                        revision: doc.plan_revision,
                        kind: crate::turns::ReferenceKind::Document,
                    });
                    (
                        serde_json::json!({"type": "document", "documentId": doc.id, "label": doc.title, "revision": doc.plan_revision}),
                        format!(
                            "[document reference {} titled {}: read it with read_reference]",
                            serde_json::Value::String(doc.id.to_string()),
                            serde_json::Value::String(doc.title.clone())
                        ),
                    )
                }
                Mention::Heading { anchor } => {
                    let h = headings
                        .iter()
                        .find(|h| &h.anchor == anchor)
                        .ok_or(("mention-gone", mention::HEADING_GONE.to_owned()))?;
                    (
                        serde_json::json!({"type": "heading", "anchor": h.anchor, "label": h.text, "level": h.level, "line": h.line}),
                        mention::told_heading(h),
                    )
                }
                Mention::Decision { decision_id } => {
                    let d = decisions
                        .iter()
                        .find(|d| &d.id == decision_id)
                        .ok_or(("mention-gone", mention::DECISION_GONE.to_owned()))?;
                    (
                        serde_json::json!({"type": "decision", "decisionId": d.id, "label": d.label}),
                        mention::told_decision(&d.id),
                    )
                }
                Mention::Research { workspace_id } => {
                    let card = self.research_card(place, *workspace_id).await?;
                    references.push(DocumentReference {
                        id: card.workspace_id,
                        revision: -1,
                        kind: crate::turns::ReferenceKind::Research,
                    });
                    (
                        serde_json::json!({"type": "research", "workspaceId": card.workspace_id, "label": card.title}),
                        format!(
                            "[research reference {} titled {}: read it with read_reference]",
                            serde_json::Value::String(card.workspace_id.to_string()),
                            serde_json::Value::String(card.title.clone())
                        ),
                    )
                }
                Mention::File { path } => {
                    check_path(path).map_err(|words| ("mention-refused", words.to_owned()))?;
                    let listed = self.repository_files(room.as_ref(), sender).await;
                    let Some(listed) = listed else {
                        return Err(("mention-refused", mention::FILES_UNLISTED.to_owned()));
                    };
                    if !listed.iter().any(|p| p == path) {
                        return Err(("mention-refused", mention::FILE_NOT_THERE.to_owned()));
                    }
                    (
                        serde_json::json!({"type": "file", "path": path, "label": path}),
                        mention::told_file(path),
                    )
                }
            });
        }
        Ok((out, references))
    }

    /// The research card `workspace` if it is one of the Chat's own document's (CTX-33).
    async fn research_card(
        &self,
        place: &Place,
        workspace: Uuid,
    ) -> Result<crate::research_cards::Card, (&'static str, String)> {
        let Some(cards) = &self.research_cards else {
            return Err(("mention-refused", RESEARCH_NOT_HERE_WORDS.to_owned()));
        };
        match cards.card(place.document, workspace).await {
            Ok(Some(card)) => Ok(card),
            Ok(None) => Err(("mention-refused", RESEARCH_NOT_HERE_WORDS.to_owned())),
            Err(e) => {
                tracing::error!(error = %e, document = %place.document, "chat: research cards could not be read for a mention");
                Err((
                    "temporarily-unavailable",
                    "This document's research could not be read just now, so it cannot be mentioned. Send it again in a moment.".to_owned(),
                ))
            }
        }
    }

    /// The document `id` if a message from `place` may refer to it (CTX-18): another ordinary
    /// document (not a child, not archived) of the same repository.
    async fn referable(
        &self,
        place: &Place,
        room: Option<&crate::store::Document>,
        id: Uuid,
    ) -> Result<crate::store::Document, (&'static str, String)> {
        let refused = || {
            (
                "reference-refused",
                "That document cannot be referred to here: only another document of this repository that is not archived can.".to_owned(),
            )
        };
        let (Some((_, documents)), Some(this)) = (&self.repo_files, room) else {
            return Err(refused());
        };
        let here = place.focus.as_ref().map_or(place.document, |f| f.document);
        if id == here || id == place.document {
            return Err(refused());
        }
        let Ok(Some(that)) = documents.document(id).await else {
            return Err(refused());
        };
        let same = this.repo_owner.eq_ignore_ascii_case(&that.repo_owner)
            && this.repo_name.eq_ignore_ascii_case(&that.repo_name);
        if !same || that.archived || that.parent_id.is_some() {
            return Err(refused());
        }
        Ok(that)
    }

    /// The file paths of the room document `room`'s repository as the sender's own GitHub
    /// session lists them (kept a minute, CTX-38); `None` where they cannot be listed.
    async fn repository_files(
        &self,
        room: Option<&crate::store::Document>,
        sender: &Sender,
    ) -> Option<Arc<Vec<String>>> {
        let (files, _) = self.repo_files.as_ref()?;
        let (session, doc) = (sender.session.as_ref()?, room?);
        files
            .paths(session.github_token(), &doc.repo_owner, &doc.repo_name)
            .await
    }

    /// The files `request` sends, checked ([`crate::files::Files::for_message`]), or the
    /// refusal's code and words.
    async fn message_files(
        &self,
        document: Uuid,
        sender: &Sender,
        request: &SendRequest,
    ) -> Result<Vec<crate::files::SentFile>, (&'static str, String)> {
        if request.files.is_empty() {
            return Ok(Vec::new());
        }
        let Some(files) = &self.files else {
            return Err((
                "not-allowed",
                "Files are turned off on this server.".to_owned(),
            ));
        };
        match files
            .for_message(document, &sender.login, &request.files)
            .await
        {
            Ok(found) => Ok(found),
            Err(crate::files::FileError::Refused(r)) => Err((r.code, r.message)),
            Err(crate::files::FileError::Store(e)) => {
                tracing::error!(error = %e, document = %document, "chat: a message's files could not be read");
                Err(("temporarily-unavailable", "The message's files could not be read just now, so it wasn't sent. Send it again in a moment.".to_owned()))
            }
        }
    }

    async fn process(
        &self,
        place: &Place,
        sender: &Sender,
        request: SendRequest,
        addressed: Addressed,
    ) -> SendReply {
        let id = request.request_id.as_str();
        // A command is checked when its message is accepted, against what the Planner reports
        // now (CMD-11..14, RULINGS CMD-21); a message that runs one goes to the Planner.
        let command = match self.command(place.document, &request).await {
            Ok(command) => command,
            Err((code, words)) => return SendReply::refused(id, code, words),
        };
        // `/research` is Chopin's own: its message is not for the Planner (CMD-19), however it
        // is worded.
        let research = command
            .as_ref()
            .is_some_and(|c| c.command_kind == CHOPIN_COMMAND_KIND && c.name == RESEARCH_COMMAND);
        let to_planner = !research
            && (addressed != Addressed::AsWritten
                || command.is_some()
                || mentions_planner(&request.text));
        // The parts it mentions, resolved against the document as it stands now (CTX-23).
        let (mentions, references) = match self.mentions(place, sender, &request).await {
            Ok(mentions) => mentions,
            Err((code, words)) => return SendReply::refused(id, code, words),
        };
        // The files it sends: its sender's own uploads, within the message's limits (FILE-09,
        // FILE-19, FILE-20); an image to the Planner only where the model the turn would run
        // reads images (FILE-24). The same image can go to the room.
        let files = match self.message_files(place.document, sender, &request).await {
            Ok(files) => files,
            Err((code, words)) => return SendReply::refused(id, code, words),
        };
        if to_planner && files.iter().any(|f| f.file.kind == "image") {
            let reads = match &self.models {
                Some(models) => models.reads_images(place.document).await,
                None => Some(false),
            };
            // Unknown (nothing attached yet): the Planner's own answer comes first.
            if reads == Some(false) {
                return SendReply::refused(id, "images-unreadable", format!("{IMAGES_UNREADABLE_WORDS}: send the image to the room without @chopin, or choose a model that reads images."));
            }
        }
        // One at a time per document, so the transcript, the room and the Planner all see this
        // document's messages in the same order.
        let held = self.transcript.gate(place.document).await;
        let follow_up = matches!(addressed, Addressed::FollowUp(_));
        if follow_up {
            self.know_follow_ups(place.document).await;
            if !self
                .follow_ups_lock()
                .allows(place.document, self.clock.now_ms())
            {
                return SendReply::refused(id, "rate-limited", RATE_LIMITED_WORDS);
            }
        }
        let planner = if to_planner {
            let asked = self
                .turns
                .request(PlannerRequest {
                    document: place.document,
                    document_url: place.url.clone(),
                    from_login: sender.login.clone(),
                    sender: sender.owner.clone(),
                    text: request.text.clone(),
                    focus: place.focus.clone(),
                    follow_up: match &addressed {
                        Addressed::FollowUp(from) => Some(from.clone()),
                        _ => None,
                    },
                    draft: false,
                    notice_saved: None,
                    command: command.as_ref().map(CommandRef::as_command),
                    files: files.clone(),
                    mentions: mentions.iter().map(|(_, told)| told.clone()).collect(),
                    references: references.clone(),
                    explicit: command.is_none() && !follow_up,
                    comment: None,
                })
                .await;
            match asked {
                Ok(accepted) => Some(PlannerTook::from(accepted)),
                Err(Refused::Stopping) => {
                    return SendReply::Unanswered {
                        request_id: id.to_owned(),
                    }
                }
                Err(refused) => return refusal(id, &refused),
            }
        } else {
            None
        };
        // The root's transcript says which child a message to the Planner came from (ISO-25).
        let mut notice_saved = None;
        if let (Some(_), Some(focus)) = (&planner, &place.focus) {
            let notice = NewTranscriptEntry {
                author_login: None,
                kind: "system".into(),
                body: format!(
                    "@{} wrote to chopin from the child document {}.",
                    sender.login, focus.url
                ),
                created_at_ms: self.clock.now_ms(),
                key: None,
                refs: None,
                attachments: Vec::new(),
            };
            notice_saved = Some(self.transcript.queue_gated(place.document, &notice).await);
        }
        let entry = if follow_up {
            self.follow_ups_lock()
                .record(place.document, self.clock.now_ms());
            NewTranscriptEntry {
                author_login: None,
                kind: "system".into(),
                body: format!("@{} {}", sender.login, crate::transcript::FOLLOW_UP_NOTICE),
                created_at_ms: self.clock.now_ms(),
                key: Some(line_key(&sender.login, id)),
                refs: None,
                attachments: Vec::new(),
            }
        } else {
            NewTranscriptEntry {
                author_login: Some(sender.login.clone()),
                kind: "member".into(),
                body: request.text,
                created_at_ms: self.clock.now_ms(),
                key: Some(line_key(&sender.login, id)),
                // Kept with the message (CMD-16), and its files as everyone in the room sees
                // them (FILE-01).
                refs: message_refs(command.as_ref(), &mentions, &files),
                attachments: files.iter().map(|f| f.file.id).collect(),
            }
        };
        let saved = self.transcript.queue_gated(place.document, &entry).await;
        // In line: the next send may go while this one is made durable.
        drop(held);
        if let Some(notice_saved) = notice_saved {
            if let Err(e) = notice_saved.await {
                tracing::error!(error = %e, document = %place.document, "chat: the notice naming a child could not be saved");
            }
        }
        match saved.await {
            Ok(saved) => {
                if saved.kind == "member" {
                    if let Some(on_saved) = &self.on_saved {
                        on_saved.member_message(place.document, saved.seq);
                    }
                }
                if let Some(participation) = &self.participation {
                    if to_planner || research {
                        participation.addressed(place.document);
                    } else if saved.kind == "member" && place.focus.is_none() {
                        participation.heard(crate::participation::Unaddressed {
                            document: place.document,
                            document_url: place.url.clone(),
                            seq: saved.seq,
                            login: sender.login.clone(),
                            sender: sender.owner.clone(),
                            text: saved.body.clone(),
                            at_ms: saved.created_at_ms,
                        });
                    }
                }
                if research {
                    if let (Some(runs), Some(brief)) = (&self.research, research_brief(&saved.body))
                    {
                        runs.requested(place.document, saved.seq, brief);
                    }
                }
                SendReply::Ack {
                    request_id: id.to_owned(),
                    seq: saved.seq,
                    planner,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, document = %place.document, to_planner, "chat: a message could not be saved");
                SendReply::refused(
                    id,
                    "not-saved",
                    if to_planner {
                        "Chat could not save your message. chopin may already have read it; send it again in a moment to have it in Chat."
                    } else {
                        "Your message could not be saved, so it wasn't sent. Send it again in a moment."
                    },
                )
            }
        }
    }
}

/// A comment note sent to the Planner from a room (ISO-17, ISO-18, ISO-25): the thread it
/// starts or replies to, in the room's own document (the root, or a child).
#[derive(Debug, Clone)]
pub struct PlannerComment {
    pub request_id: String,
    /// The document whose thread it is.
    pub document: Uuid,
    pub thread: Uuid,
    /// The passage, for a note that starts its thread; `None` for a reply.
    pub start_quote: Option<String>,
    pub text: String,
    /// When its request's claim was made, if that claim was an earlier call's that never
    /// answered ([`crate::comments::Comments::reply_claimed`]).
    pub taken_over: Option<i64>,
}

/// What became of a [`PlannerComment`].
#[derive(Debug, Clone)]
pub enum CommentReply {
    /// Saved, and given to the Planner (a new turn, or the running turn about its thread).
    Saved(Box<crate::comments::Saved>, PlannerTook),
    /// Refused; nothing saved.
    Refused(crate::comments::Refusal),
    /// The process is stopping: no answer, so the browser sends it again to the next one.
    Unanswered,
}

impl CommentReply {
    /// The frame the sender is sent, if any.
    pub fn frame(&self, request_id: &str) -> Option<Value> {
        match self {
            CommentReply::Saved(saved, took) => {
                let mut ack = saved.ack(request_id);
                ack["planner"] = serde_json::to_value(took).unwrap_or(Value::Null);
                Some(ack)
            }
            CommentReply::Refused(refusal) => Some(refusal.frame(request_id)),
            CommentReply::Unanswered => None,
        }
    }
}

impl Chat {
    /// A comment note to the Planner (ISO-17..19, ISO-25..28, OWN-27, MSG-21, MSG-23): checked
    /// as a Chat message is (push access, and, from a child, that it still belongs to a live
    /// root, which the room asked before this), then admitted by the root's Chat: it starts a
    /// turn about its thread under the sender's claimant session, joins the running turn about
    /// that same thread, or is refused (`planner-busy`, `planner-not-attached`, …) before
    /// anything is saved. The note is saved before the turn starts; the root's transcript
    /// notice names a child it came from.
    pub async fn comment(
        &self,
        place: &Place,
        sender: &Sender,
        note: PlannerComment,
        comments: &crate::comments::Comments,
    ) -> CommentReply {
        use crate::comments::Refusal;
        if !sender.can_write {
            return CommentReply::Refused(Refusal::new(
                "read-only",
                crate::comments::READ_ONLY_WORDS,
            ));
        }
        if let Err(refusal) = crate::comments::check_text(&note.text) {
            return CommentReply::Refused(refusal);
        }
        let quote = match &note.start_quote {
            Some(quote) => quote.clone(),
            None => match comments.open_thread(note.document, note.thread).await {
                Ok(thread) => thread.quote,
                Err(refusal) => return CommentReply::Refused(refusal),
            },
        };
        if quote.chars().count() > crate::comments::QUOTE_MAX_CHARS {
            return CommentReply::Refused(Refusal::new(
                "too-long",
                "A comment's quoted passage is at most 1,000 characters, so it wasn't saved.",
            ));
        }
        let Some(_in_flight) = self.try_admit() else {
            return CommentReply::Refused(Refusal::new(
                "temporarily-unavailable",
                TOO_MANY_IN_FLIGHT,
            ));
        };
        // In line with the Chat's own sends, so none starts a turn between the check and this.
        let held = self.transcript.gate(place.document).await;
        let (saved_tx, saved_rx) = watch::channel(None);
        let asked = self
            .turns
            .request(PlannerRequest {
                document: place.document,
                document_url: place.url.clone(),
                from_login: sender.login.clone(),
                sender: sender.owner.clone(),
                text: note.text.clone(),
                focus: place.focus.clone(),
                follow_up: None,
                draft: false,
                notice_saved: None,
                command: None,
                files: Vec::new(),
                mentions: Vec::new(),
                references: Vec::new(),
                explicit: false,
                comment: Some(crate::turns::CommentTurn {
                    document: note.document,
                    thread: note.thread,
                    quote: quote.clone(),
                    saved: saved_rx,
                }),
            })
            .await;
        let took = match asked {
            Ok(accepted) => PlannerTook::from(accepted),
            Err(Refused::Stopping) => return CommentReply::Unanswered,
            Err(refused) => {
                return CommentReply::Refused(Refusal::new(refused.code(), refused.to_string()))
            }
        };
        let saved = match &note.start_quote {
            Some(_) => {
                comments
                    .start(
                        note.document,
                        &sender.login,
                        note.thread,
                        &quote,
                        &note.text,
                        true,
                    )
                    .await
            }
            None => {
                comments
                    .reply_claimed(
                        note.document,
                        note.thread,
                        &sender.login,
                        &note.text,
                        true,
                        note.taken_over,
                    )
                    .await
            }
        };
        let _ = saved_tx.send(Some(saved.is_ok()));
        let saved = match saved {
            Ok(saved) => saved,
            Err(refusal) => return CommentReply::Refused(refusal),
        };
        let notice = place.focus.as_ref().map(|focus| NewTranscriptEntry {
            author_login: None,
            kind: "system".into(),
            body: format!(
                "@{} sent chopin a comment from the child document {}.",
                sender.login, focus.url
            ),
            created_at_ms: self.clock.now_ms(),
            key: None,
            refs: None,
            attachments: Vec::new(),
        });
        let notice = match &notice {
            Some(notice) => Some(self.transcript.queue_gated(place.document, notice).await),
            None => None,
        };
        drop(held);
        if let Some(notice) = notice {
            if let Err(e) = notice.await {
                tracing::error!(error = %e, document = %place.document, "chat: the notice naming a child could not be saved");
            }
        }
        CommentReply::Saved(Box::new(saved), took)
    }
}

/// Chopin's own research command (CMD-19).
pub const RESEARCH_COMMAND: &str = "research";
/// The refusal of `/research` with nothing to research.
pub const RESEARCH_BRIEF_WORDS: &str =
    "Say what to research after /research (at most 4,000 characters).";

pub use crate::turns::RESEARCH_BRIEF_MAX_CHARS;

/// The brief of `text` (a message opening with `/research`): the rest, trimmed, exactly as
/// written. `None` if it is empty or longer than [`RESEARCH_BRIEF_MAX_CHARS`].
pub fn research_brief(text: &str) -> Option<String> {
    let brief = text.strip_prefix("/research")?.trim();
    (!brief.is_empty() && brief.chars().count() <= RESEARCH_BRIEF_MAX_CHARS)
        .then(|| brief.to_owned())
}

pub use crate::turns::ResearchRequests;

/// What wants to know that a member's message was saved: told after it is durable, without
/// waiting (the implementation spawns what it does).
pub trait MessageSaved: Send + Sync + 'static {
    /// A member's message was saved at `seq` of `document`'s Chat.
    fn member_message(&self, document: Uuid, seq: i64);
}

/// The key of the line `login`'s send `request_id` saves: one line per sender and request id
/// in a document's transcript, for good (MSG-16).
fn line_key(login: &str, request_id: &str) -> String {
    format!("msg16:{}:{login}:{request_id}", login.len())
}

fn refusal(request_id: &str, refused: &Refused) -> SendReply {
    SendReply::refused(request_id, refused.code(), refused.to_string())
}
