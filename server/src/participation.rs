//! Automatic participation (CTX-01..03): the Planner answers Chat messages that do not name
//! `@chopin`, as a member of the conversation would.
//!
//! Owns: what happens to a member's saved message that was not for the Planner — in a solo
//! conversation (no other member wrote among the latest entries, lately) it goes to the Planner
//! at once; in a group one it waits for [`QUIET_WINDOW`] without a new message, then the
//! deployment's classifier judges from the latest lines whether the Planner should speak —
//! and the document's durable, shared pause. Does not own: whether the Planner takes a message
//! (its turns), the judgment itself (the classifier), or Chat's own rules.
//!
//! Invariants: an explicit `@chopin` message is never delayed here; a paused document gets no
//! automatic turn; a quiet window ends in at most one turn, and any member message, addressed
//! or not, starts it again; every time is tokio's (the simulator's in scenarios).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use uuid::Uuid;

use crate::classifier::{Classifier, PLANNER_LINE};
use crate::observe::PlannerEvent;
use crate::planner::Planners;
use crate::runtime::{SharedClock, Shutdown};
use crate::store::{
    Holder, ModelChoiceStore, NewTranscriptEntry, ParticipationPause, TranscriptEntry,
    TranscriptStore, UnixMillis,
};
use crate::transcript::Transcript;
use crate::turns::{PlannerRequest, Refused, Turns};

/// How long a group conversation must stay quiet before the Planner may speak (RULINGS CTX-03).
pub const QUIET_WINDOW: Duration = Duration::from_millis(8_000);
/// The latest Chat entries read to tell a solo conversation from a group one.
pub const EXCHANGE_ENTRIES: u32 = 20;
/// Another member's message at most this old makes the conversation a group one.
pub const EXCHANGE_WINDOW_MS: UnixMillis = 10 * 60 * 1000;
/// The latest lines the turn-taking judgment reads.
pub const JUDGMENT_LINES: u32 = 12;

/// A member's message that did not name `@chopin`, once saved.
#[derive(Debug, Clone)]
pub struct Unaddressed {
    pub document: Uuid,
    pub document_url: String,
    pub seq: i64,
    pub login: String,
    /// The sender as a Planner owner, where the message came with a browser sign-in.
    pub sender: Option<Holder>,
    pub text: String,
    pub at_ms: UnixMillis,
}

/// What automatic participation uses.
pub struct ParticipationDeps {
    pub entries: Arc<dyn TranscriptStore>,
    pub pauses: Arc<dyn ModelChoiceStore>,
    pub transcript: Arc<Transcript>,
    pub turns: Arc<Turns>,
    pub classifier: Arc<dyn Classifier>,
    pub planners: Arc<Planners>,
    pub clock: SharedClock,
    pub shutdown: Shutdown,
}

/// See the module docs.
pub struct Participation {
    deps: ParticipationDeps,
    /// Per document, the quiet window that may still end in a turn: one each, whatever the
    /// number of messages, so a flood holds one message and one timer per document.
    waiting: Mutex<BTreeMap<Uuid, Waiting>>,
}

/// A document's quiet window: the latest message, and when the window ends.
struct Waiting {
    message: Unaddressed,
    ends: tokio::time::Instant,
}

impl Participation {
    pub fn new(deps: ParticipationDeps) -> Arc<Self> {
        Arc::new(Participation {
            deps,
            waiting: Mutex::default(),
        })
    }

    fn emit(&self, document: Uuid, judged: &str) {
        self.deps.planners.emit(PlannerEvent::Participation {
            document,
            judged: judged.to_owned(),
        });
    }

    /// Starts `document`'s quiet window again with `message` as its latest. True if no window
    /// was running, so a timer must be started.
    fn restart(&self, message: Unaddressed) -> bool {
        let ends = tokio::time::Instant::now() + QUIET_WINDOW;
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(message.document, Waiting { message, ends })
            .is_none()
    }

    /// `document`'s window: `Ok` with its message once it has ended (and it is taken), `Err`
    /// with when it ends while it runs, `None` once it was ended some other way.
    fn ended(&self, document: Uuid) -> Option<Result<Unaddressed, tokio::time::Instant>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let ends = waiting.get(&document)?.ends;
        if ends > tokio::time::Instant::now() {
            return Some(Err(ends));
        }
        waiting.remove(&document).map(|w| Ok(w.message))
    }

    /// Documents whose quiet window runs now (one timer and one message each).
    pub fn windows(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// A member's message to the Planner was saved: any quiet window of its document ends
    /// without a turn (the person asked the Planner directly).
    pub fn addressed(&self, document: Uuid) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&document);
    }

    /// A member's message not for the Planner was saved: handled on its own task, so the
    /// sender's answer does not wait for it.
    pub fn heard(self: &Arc<Self>, message: Unaddressed) {
        let this = self.clone();
        self.deps
            .shutdown
            .spawn(async move { this.unaddressed(message).await });
    }

    /// A member's message not for the Planner was saved (see the module docs).
    pub async fn unaddressed(self: &Arc<Self>, message: Unaddressed) {
        let document = message.document;
        if self.paused(document).await {
            self.addressed(document);
            self.emit(document, "paused");
            return;
        }
        let group = match self.is_group(&message).await {
            Ok(group) => group,
            Err(e) => {
                tracing::warn!(%document, error = %e, "automatic participation: Chat could not be read");
                return;
            }
        };
        if !group {
            self.addressed(document);
            self.emit(document, "solo");
            self.request(message).await;
            return;
        }
        let first = self.restart(message);
        self.emit(document, "quiet-window");
        if !first {
            // The running window's timer sees the new end.
            return;
        }
        let this = self.clone();
        let stopping = self.deps.shutdown.stopping();
        self.deps.shutdown.spawn(async move {
            tokio::pin!(stopping);
            let mut until = tokio::time::Instant::now() + QUIET_WINDOW;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    () = &mut stopping => return,
                }
                match this.ended(document) {
                    Some(Ok(message)) => return this.judge(message).await,
                    Some(Err(later)) => until = later,
                    None => return,
                }
            }
        });
    }

    /// Whether another member wrote among the latest entries up to `message`, lately.
    async fn is_group(&self, message: &Unaddressed) -> Result<bool, crate::store::StoreError> {
        let after = (message.seq - i64::from(EXCHANGE_ENTRIES)).max(0);
        let entries = self
            .deps
            .entries
            .transcript(message.document, after, EXCHANGE_ENTRIES)
            .await?;
        Ok(entries.iter().any(|e| {
            e.kind == "member"
                && e.seq <= message.seq
                && e.author_login.as_deref() != Some(message.login.as_str())
                && message.at_ms - e.created_at_ms <= EXCHANGE_WINDOW_MS
        }))
    }

    /// The quiet window of `message` ended: the classifier judges whether the Planner speaks.
    async fn judge(&self, message: Unaddressed) {
        let document = message.document;
        if self.paused(document).await {
            self.emit(document, "paused");
            return;
        }
        let lines = match self.latest_lines(document).await {
            Ok(lines) => lines,
            Err(e) => {
                tracing::warn!(%document, error = %e, "automatic participation: Chat could not be read");
                return;
            }
        };
        match self.deps.classifier.take_turn(&lines).await {
            Ok(true) => {
                self.emit(document, "speak");
                self.request(message).await;
            }
            Ok(false) => self.emit(document, "yield"),
            Err(unchecked) => {
                // Not judged: the Planner stays quiet (a person can still name @chopin).
                tracing::info!(%document, why = %unchecked, "automatic participation: the turn-taking judgment could not be made");
                self.emit(document, &format!("unchecked-{}", unchecked.name()));
            }
        }
    }

    /// The latest lines of `document`'s Chat, oldest first, for the judgment.
    async fn latest_lines(&self, document: Uuid) -> Result<Vec<String>, crate::store::StoreError> {
        let entries = self
            .deps
            .transcript
            .latest(document, JUDGMENT_LINES)
            .await?;
        Ok(entries.iter().filter_map(line_of).collect())
    }

    /// Hands `message` to the Planner as if it named `@chopin` (the same lifecycle: a turn, or
    /// a steer of the running one). Where no Planner can take it, nothing is said: nobody
    /// asked for it.
    async fn request(&self, message: Unaddressed) {
        let document = message.document;
        let asked = self
            .deps
            .turns
            .request(PlannerRequest {
                document,
                document_url: message.document_url,
                from_login: message.login,
                sender: message.sender,
                text: message.text,
                focus: None,
                follow_up: None,
                draft: false,
                notice_saved: None,
                command: None,
                files: Vec::new(),
                mentions: Vec::new(),
                references: Vec::new(),
                explicit: false,
                comment: None,
            })
            .await;
        match asked {
            Ok(_) => {}
            Err(Refused::Stopping) => {}
            Err(refused) => {
                tracing::debug!(%document, code = refused.code(), "automatic participation: the Planner did not take the message");
            }
        }
    }

    /// Whether `document`'s automatic participation is paused. A pause that cannot be read
    /// counts as paused: nobody is answered unasked on a guess.
    pub async fn paused(&self, document: Uuid) -> bool {
        match self.deps.pauses.participation_pause(document).await {
            Ok(pause) => pause.is_some(),
            Err(e) => {
                tracing::warn!(%document, error = %e, "automatic participation: the pause could not be read");
                true
            }
        }
    }

    /// The document's pause as stored.
    pub async fn state(
        &self,
        document: Uuid,
    ) -> Result<Option<ParticipationPause>, crate::store::StoreError> {
        self.deps.pauses.participation_pause(document).await
    }

    /// `login` pauses (`paused`) or resumes `document`'s automatic participation; Chat says who
    /// did, once per change. Returns the state now.
    pub async fn set_paused(
        &self,
        document: Uuid,
        login: &str,
        paused: bool,
    ) -> Result<Option<ParticipationPause>, crate::store::StoreError> {
        let before = self.deps.pauses.participation_pause(document).await?;
        let now = self.deps.clock.now_ms();
        let (state, words) = if paused {
            self.addressed(document);
            let pause = ParticipationPause {
                document_id: document,
                paused_by: login.to_owned(),
                paused_at_ms: now,
            };
            self.deps.pauses.pause_participation(&pause).await?;
            let words = before.is_none().then(|| paused_words(login));
            (Some(pause), words)
        } else {
            let resumed = self.deps.pauses.resume_participation(document).await?;
            (None, resumed.then(|| resumed_words(login)))
        };
        if let Some(words) = words {
            let line = NewTranscriptEntry {
                author_login: None,
                kind: "system".into(),
                body: words,
                created_at_ms: now,
                key: None,
                refs: None,
                attachments: Vec::new(),
            };
            if let Err(e) = self.deps.transcript.post(document, &line).await {
                tracing::warn!(%document, error = %e, "automatic participation: Chat could not say the pause changed");
            }
        }
        Ok(state)
    }
}

/// Chat's line when `login` pauses automatic participation.
pub fn paused_words(login: &str) -> String {
    format!("@{login} paused chopin's replies to messages that do not name it; @chopin still reaches it.")
}

/// Chat's line when `login` lets it run again.
pub fn resumed_words(login: &str) -> String {
    format!("@{login} let chopin join the conversation on its own again.")
}

/// An entry as the judgment reads it; system lines are left out.
fn line_of(entry: &TranscriptEntry) -> Option<String> {
    match (entry.kind.as_str(), &entry.author_login) {
        ("member", Some(login)) => Some(format!("@{login}: {}", entry.body)),
        ("planner", _) => Some(format!("{PLANNER_LINE}{}", entry.body)),
        _ => None,
    }
}
