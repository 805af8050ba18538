//! Planner requests from people: whether a message to the Planner starts a turn, is given to
//! the running one, or is refused — and, once started, the turn itself.
//!
//! Owns: [`Turns::request`], the one door Chat (and later MCP) uses to reach the Planner.
//! Does not own: the transcript (Chat saves a message only when this accepts it) or the harness
//! (`crate::harness`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use chopin_document::reader::{DocumentInput, ReadArgs, ReadKind};
use chopin_document::DocumentRef;
use chopin_protocol::agent::{Part, SessionMode, ToolSpec};
use serde_json::Value;
use uuid::Uuid;

use crate::content::OpenDocuments;
use crate::documents::children::Children;
use crate::documents::Documents;
use crate::harness::{
    run_turn, CancelSignal, Harness, HarnessDeps, HostToolResult, RemoteDeps, SessionRequest,
    SteerError, SteerInbox, TurnControl, TurnHost, TurnRequest, TurnResult,
};
use crate::identity::admission::Admission;
use crate::identity::sign_ins::SignIns;
use crate::planner::Planners;
use crate::runtime::{SharedClock, SharedEntropy, Shutdown};
use crate::store::{DocumentStore, Holder, OwnershipStore};
use crate::transcript::{Transcript, TurnSink};

/// A person's message to the Planner.
#[derive(Debug, Clone)]
pub struct PlannerRequest {
    pub document: Uuid,
    /// The document's canonical URL (for the refusal words).
    pub document_url: String,
    /// GitHub login of the sender.
    pub from_login: String,
    pub text: String,
    /// Sent from a child document's room (ISO-25): the child, the focus of the message.
    pub focus: Option<Focus>,
}

/// The child document a message was sent from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Focus {
    pub document: Uuid,
    /// The child's canonical URL (under its root's).
    pub url: String,
}

impl PlannerRequest {
    /// The message as the Planner reads it: `@login: text`, after a line naming the child
    /// document it came from when it has a focus.
    fn words(&self) -> String {
        let said = format!("@{}: {}", self.from_login, self.text);
        match &self.focus {
            Some(focus) => format!(
                "(sent from the child document {}, the focus of this message)\n{said}",
                focus.url
            ),
            None => said,
        }
    }
}

/// What became of an accepted request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// The Planner was idle: the message starts a turn.
    Started,
    /// A turn is running: the message is given to it.
    Steered,
}

/// Why a request was refused; nothing is saved. Display is the words the sender is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No machine attached, or it is away (`planner-not-attached`).
    #[error("{0}")]
    NotAttached(String),
    /// The running turn takes no input mid-run (`planner-busy`).
    #[error("{0}")]
    Busy(String),
    /// A turn is starting or ending; send again with the same request id
    /// (`temporarily-unavailable`).
    #[error("{0}")]
    TemporarilyUnavailable(String),
}

impl Refused {
    /// The wire code.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::NotAttached(_) => "planner-not-attached",
            Refused::Busy(_) => "planner-busy",
            Refused::TemporarilyUnavailable(_) => "temporarily-unavailable",
        }
    }
}

/// Where a document's running turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The session is being started on the client: no session to give a message to yet.
    Starting,
    /// A session runs the turn: messages are given to it.
    Running,
    /// The turn has ended and its reply is being posted: no session to give a message to.
    Ending,
}

struct Running {
    phase: Phase,
    control: TurnControl,
    /// The browser login the turn runs under (its holder's).
    login: Uuid,
    /// Why the server stopped the turn, said in Chat instead of "chopin stopped.".
    stopped_because: Option<String>,
}

#[derive(Default)]
struct Table {
    turns: BTreeMap<Uuid, Running>,
    /// Browser logins whose GitHub credential is being renewed: no turn of theirs starts
    /// meanwhile (PERM-10).
    renewing: BTreeSet<Uuid>,
}

/// What turns reach: who holds the Planner, sign-ins and admission for the rechecks, the
/// documents and their content for the host tools, the transcript for context and replies.
pub struct TurnsDeps {
    pub planners: Arc<Planners>,
    pub sign_ins: Arc<SignIns>,
    pub admission: Arc<Admission>,
    pub documents: Arc<Documents>,
    pub records: Arc<dyn DocumentStore>,
    pub ownership: Arc<dyn OwnershipStore>,
    pub open: Arc<OpenDocuments>,
    pub children: Arc<Children>,
    pub transcript: Arc<Transcript>,
    pub entropy: SharedEntropy,
    pub clock: SharedClock,
    pub shutdown: Shutdown,
    /// `HARNESS`: the adapter's name in the registry.
    pub harness: String,
}

/// The Planner turns of this process: at most one per document.
pub struct Turns {
    running: Mutex<Table>,
    /// Bumped whenever a turn ends.
    ended: tokio::sync::watch::Sender<u64>,
    deps: TurnsDeps,
}

/// The words for a harness that takes no input mid-run (MSG rules).
pub const BUSY_WORDS: &str =
    "chopin can't take messages while it works on this machine. Stop it to ask now.";
/// The words for a message that arrived while a turn was starting or ending.
pub const PASSING_WORDS: &str = "chopin is between steps just now; send it again in a moment.";

impl Turns {
    pub fn new(deps: TurnsDeps) -> Self {
        Turns {
            running: Mutex::default(),
            ended: tokio::sync::watch::Sender::new(0),
            deps,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once `document` has no turn running (at once if it has none).
    pub async fn until_idle(&self, document: Uuid) {
        let mut ended = self.ended.subscribe();
        while self.is_running(document) {
            if ended.changed().await.is_err() {
                return;
            }
        }
    }

    /// A turn of `document` is over: it leaves the table and whoever waits hears of it.
    fn finish(&self, document: Uuid) {
        self.lock().turns.remove(&document);
        self.ended.send_modify(|n| *n += 1);
    }

    /// How many turns are running now.
    pub fn running_count(&self) -> usize {
        self.lock().turns.len()
    }

    /// Whether `document` has a turn running now.
    pub fn is_running(&self, document: Uuid) -> bool {
        self.lock().turns.contains_key(&document)
    }

    /// Stops `document`'s running turn, if any (Stop). True if there was one.
    pub fn stop(&self, document: Uuid) -> bool {
        match self.lock().turns.get(&document) {
            Some(running) => {
                running.control.cancel();
                true
            }
            None => false,
        }
    }

    /// Before `login`'s GitHub credential is renewed (PERM-10): every turn running under it is
    /// stopped (its session aborted, then destroyed as every turn's is) and waited for, and no
    /// turn of it starts until the returned guard is dropped, after the renewal. A later turn
    /// starts a fresh session bound to the new credential revision. `why` is what Chat says of
    /// a stopped turn.
    pub async fn end_sessions_of(self: &Arc<Self>, login: Uuid, why: &str) -> RenewalGuard {
        let mut ended = self.ended.subscribe();
        let stopped = {
            let mut table = self.lock();
            table.renewing.insert(login);
            let mut stopped = 0;
            for running in table.turns.values_mut().filter(|r| r.login == login) {
                running.stopped_because = Some(why.to_owned());
                running.control.cancel();
                stopped += 1;
            }
            stopped
        };
        if stopped > 0 {
            tracing::info!(login_id = %login, stopped, "Planner sessions ended before a credential renewal");
        }
        let guard = RenewalGuard {
            turns: self.clone(),
            login,
        };
        while self.lock().turns.values().any(|r| r.login == login) {
            if ended.changed().await.is_err() {
                break;
            }
        }
        guard
    }

    /// Decides a person's message to the Planner (see the module docs). The attached link is
    /// rechecked first, as the periodic recheck would (UNA-03).
    pub async fn request(self: &Arc<Self>, request: PlannerRequest) -> Result<Accepted, Refused> {
        let d = &self.deps;
        let holder = d
            .planners
            .attached_for_request(request.document)
            .await
            .map_err(|not_attached| {
                Refused::NotAttached(not_attached.words(&request.document_url))
            })?;
        // The configured adapter, from the code-owned registry.
        let deps = HarnessDeps {
            remote: Some(RemoteDeps {
                links: d.planners.clone(),
                document: request.document,
                entropy: d.entropy.clone(),
            }),
            ..HarnessDeps::default()
        };
        let harness = crate::harness::adapter(&d.harness, &deps).map_err(|e| {
            tracing::error!(error = %e, "the configured harness is not in the registry");
            Refused::NotAttached(e.to_string())
        })?;
        let words = request.words();
        let control = {
            let mut table = self.lock();
            if table.renewing.contains(&holder.browser_login_id) {
                // The owner's credential is being renewed; its sessions were just ended.
                return Err(Refused::TemporarilyUnavailable(PASSING_WORDS.to_owned()));
            }
            let running = &mut table.turns;
            if let Some(turn) = running.get(&request.document) {
                return match turn.phase {
                    Phase::Starting | Phase::Ending => {
                        Err(Refused::TemporarilyUnavailable(PASSING_WORDS.to_owned()))
                    }
                    Phase::Running => match turn.control.steer(words) {
                        Ok(()) => Ok(Accepted::Steered),
                        // The turn has not read the steers it was given yet: this one waits
                        // for the sender to try again rather than in memory.
                        Err(SteerError::Full) => {
                            Err(Refused::TemporarilyUnavailable(PASSING_WORDS.to_owned()))
                        }
                        Err(_) => {
                            tracing::info!(document = %request.document, harness = harness.name(), "a message arrived while the harness takes no input mid-run");
                            Err(Refused::Busy(BUSY_WORDS.to_owned()))
                        }
                    },
                };
            }
            let (control, inbox) = TurnControl::new(&*harness);
            let cancel = control.cancel_signal();
            running.insert(
                request.document,
                Running {
                    phase: Phase::Starting,
                    control,
                    login: holder.browser_login_id,
                    stopped_because: None,
                },
            );
            (cancel, inbox)
        };
        let (cancel, inbox) = control;
        let turns = self.clone();
        d.shutdown.spawn(async move {
            turns
                .run(harness, request, holder, words, cancel, inbox)
                .await;
        });
        Ok(Accepted::Started)
    }

    #[allow(clippy::too_many_arguments)]
    async fn run(
        self: &Arc<Self>,
        harness: Arc<dyn Harness>,
        request: PlannerRequest,
        holder: Holder,
        prompt: String,
        cancel: CancelSignal,
        inbox: SteerInbox,
    ) {
        let d = &self.deps;
        let document = request.document;
        let generation = d
            .ownership
            .ownership(document)
            .await
            .map(|o| o.generation)
            .unwrap_or(-1);
        let credential_revision = d
            .sign_ins
            .get_live(holder.browser_login_id, d.clock.now_ms())
            .map_or(-1, |l| l.credential_revision);
        let host = Arc::new(PlannerHost {
            turns: self.clone(),
            document,
            document_url: request.document_url.clone(),
            holder,
            generation,
            credential_revision,
            reply: Mutex::new(String::new()),
        });
        let prompt = with_context(&d.transcript, document, &request, prompt).await;
        let turn = TurnRequest {
            instructions: INSTRUCTIONS.to_owned(),
            prompt,
            host_tools: host_tools(),
            response_format: None,
            cancel,
        };
        let session = SessionRequest {
            mode: SessionMode::Planner,
            model: None,
            thinking_level: None,
        };
        let watched = Started {
            inner: harness,
            turns: self.clone(),
            document,
        };
        let running = run_turn(&watched, session, turn, inbox, host.clone());
        tokio::pin!(running);
        let report = tokio::select! {
            report = &mut running => report,
            // The process is stopping: the turn is stopped as a Stop would, and ends.
            () = d.shutdown.stopping() => {
                self.stop(document);
                running.await
            }
        };
        let stopped_because = match self.lock().turns.get_mut(&document) {
            Some(running) => {
                running.phase = Phase::Ending;
                running.stopped_because.take()
            }
            None => None,
        };
        let reply = std::mem::take(&mut *host.reply.lock().unwrap_or_else(PoisonError::into_inner));
        let sink: &dyn TurnSink = &*d.transcript;
        let reply = reply.trim().to_owned();
        if !reply.is_empty() {
            sink.post(document, "planner", reply).await;
        }
        if d.shutdown.is_stopping() {
            // A graceful stop posts no Chat line about the links or the turns (HO-17).
            tracing::info!(document = %document, result = ?report.result, "Planner turn ended by the server's stop");
            self.finish(document);
            return;
        }
        match &report.result {
            TurnResult::Completed { .. } => {}
            TurnResult::Aborted => {
                let words = match stopped_because {
                    Some(why) => format!("chopin stopped: {why}"),
                    None => "chopin stopped.".to_owned(),
                };
                sink.post(document, "system", words).await
            }
            TurnResult::Failed(failure) => {
                sink.post(
                    document,
                    "system",
                    format!("chopin's turn ended with an error: {failure}"),
                )
                .await
            }
        }
        tracing::info!(document = %document, result = ?report.result, "Planner turn ended");
        self.finish(document);
    }
}

/// Held while a login's credential is renewed (see [`Turns::end_sessions_of`]): its turns may
/// start again once this is dropped.
pub struct RenewalGuard {
    turns: Arc<Turns>,
    login: Uuid,
}

impl Drop for RenewalGuard {
    fn drop(&mut self) {
        self.turns.lock().renewing.remove(&self.login);
    }
}

/// The prompt of a new session: the bounded Chat before the message (CTX-04, CTX-05), then the
/// message. The message itself, if Chat saved it already, is not repeated.
async fn with_context(
    transcript: &Transcript,
    document: Uuid,
    request: &PlannerRequest,
    message: String,
) -> String {
    let Ok(bootstrap) = transcript.bootstrap(document).await else {
        return message;
    };
    let mut entries = bootstrap.entries;
    if entries.last().is_some_and(|e| {
        e.kind == "member"
            && e.author_login.as_deref() == Some(request.from_login.as_str())
            && e.body == request.text
    }) {
        entries.pop();
    }
    if entries.is_empty() {
        return message;
    }
    let mut out = String::from("Chat so far, oldest first");
    if bootstrap.omitted > 0 {
        out.push_str(&format!(
            " ({} earlier messages left out)",
            bootstrap.omitted
        ));
    }
    out.push_str(":\n");
    for e in &entries {
        match (e.kind.as_str(), e.author_login.as_deref()) {
            ("member", Some(login)) => out.push_str(&format!("@{login}: {}\n", e.body)),
            ("planner", _) => out.push_str(&format!("chopin: {}\n", e.body)),
            _ => out.push_str(&format!("(notice) {}\n", e.body)),
        }
    }
    out.push_str("\nThe new message:\n");
    out.push_str(&message);
    out
}

const INSTRUCTIONS: &str = "You are chopin, the Planner of a collaborative Markdown document. \
Read it with read_plan before you change it, and change it only with edit_plan against the revision you read. \
People speak to you in Chat as @handle: text; answer them in plain words.";

fn host_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_plan".to_owned(),
            description: "Read the document as paged Markdown text: a header, its outline and blocks, then the source. Use offset/limit/column to page; follow next:.".to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "offset": { "type": "integer", "minimum": 1 },
                    "limit": { "type": "integer", "minimum": 1 },
                    "column": { "type": "integer", "minimum": 1 }
                },
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "edit_plan".to_owned(),
            description: "Apply a batch of block operations (insert, replace, delete, move) to the revision you read; blocks are addressed by index and digest.".to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "revision": { "type": "integer", "minimum": 0 },
                    "ops": { "type": "array" }
                },
                "required": ["revision", "ops"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "list_children".to_owned(),
            description: "List this document's own child documents (id, title, url, revision).".to_owned(),
            input_schema: serde_json::json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        },
        ToolSpec {
            name: "read_child".to_owned(),
            description: "Read one of this document's children like read_plan; next: names the child.".to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "child": { "type": "string" },
                    "offset": { "type": "integer", "minimum": 1 },
                    "limit": { "type": "integer", "minimum": 1 },
                    "column": { "type": "integer", "minimum": 1 }
                },
                "required": ["child"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "edit_child".to_owned(),
            description: "edit_plan on one of this document's children, against the revision you read.".to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "child": { "type": "string" },
                    "revision": { "type": "integer", "minimum": 0 },
                    "ops": { "type": "array" }
                },
                "required": ["child", "revision", "ops"],
                "additionalProperties": false
            }),
        },
    ]
}

/// The host side of a Planner turn: runs host tools against the room after the permission
/// rechecks, and collects the reply text.
struct PlannerHost {
    turns: Arc<Turns>,
    document: Uuid,
    document_url: String,
    holder: Holder,
    /// The ownership generation and the owner login's credential revision when the turn
    /// started: a turn is bound to both.
    generation: i64,
    credential_revision: i64,
    reply: Mutex<String>,
}

impl PlannerHost {
    /// The rechecks made before every host tool ("Permission checks", PERM-01…PERM-06): the
    /// owner's sign-in is still live in this process (not signed out, not expired) at the
    /// credential revision the turn started with, storage still names the owner at the turn's
    /// ownership generation, the account is admitted, can still push, and the GitHub App's
    /// installation still covers the repository. `Err` with the words of the denial.
    async fn recheck(&self) -> Result<(), String> {
        let d = &self.turns.deps;
        let now = d.clock.now_ms();
        let Some(login) = d.sign_ins.get_live(self.holder.browser_login_id, now) else {
            return Err("the Planner owner's sign-in has ended".to_owned());
        };
        if login.credential_revision != self.credential_revision {
            return Err("the Planner owner's GitHub credential changed during the turn".to_owned());
        }
        match d.ownership.ownership(self.document).await {
            Ok(o)
                if o.generation == self.generation
                    && o.holder.as_ref().map(|h| h.account_id) == Some(self.holder.account_id) => {}
            Ok(_) => return Err("the document's Planner owner has changed".to_owned()),
            Err(_) => return Err("the Planner's ownership could not be checked".to_owned()),
        }
        let token = login.github_token();
        if let Err(e) = d.admission.check(token).await {
            return Err(format!("@{} is not admitted: {e}", self.holder.login));
        }
        let doc = match d.records.document(self.document).await {
            Ok(Some(doc)) if !doc.archived => doc,
            _ => return Err("the document is gone or archived".to_owned()),
        };
        match d
            .admission
            .repo_access_cached(token, &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(Some(a)) if a.can_write() => {}
            Ok(_) => {
                return Err(format!(
                    "@{} can no longer push to {}/{}",
                    self.holder.login, doc.repo_owner, doc.repo_name
                ))
            }
            Err(e) => return Err(format!("repository access could not be checked: {e}")),
        }
        // PERM-06: the GitHub App's installation still covers the repository.
        match d
            .admission
            .installation_covers_cached(token, &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "this server's GitHub App is no longer installed on {}/{} for @{}",
                doc.repo_owner, doc.repo_name, self.holder.login
            )),
            Err(e) => Err(format!(
                "the GitHub App installation's repository access could not be checked: {e}"
            )),
        }
    }
}

#[async_trait]
impl TurnHost for PlannerHost {
    async fn execute(&self, name: &str, input: Value, _cancel: CancelSignal) -> HostToolResult {
        if let Err(why) = self.recheck().await {
            // Decided before execution: no tool runs, and Chat shows the denial.
            let sink: &dyn TurnSink = &*self.turns.deps.transcript;
            sink.post(
                self.document,
                "system",
                format!("chopin was not allowed to use {name}: {why}."),
            )
            .await;
            return HostToolResult::error(format!("permission denied: {why}"));
        }
        match name {
            "read_plan" => self.read_plan(input).await,
            "edit_plan" => self.edit_plan(input).await,
            "list_children" => match self.turns.deps.children.list_children(self.document).await {
                Ok(v) => HostToolResult::ok(v),
                Err(e) => HostToolResult::error(e.to_string()),
            },
            "read_child" => self.read_child(input).await,
            "edit_child" => self.edit_child(input).await,
            other => HostToolResult::error(format!("unknown host tool {other:?}")),
        }
    }

    fn part(&self, part: &Part) {
        if let Part::Text(text) = part {
            self.reply
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_str(&text.text);
        }
    }
}

/// `read_child` / `edit_child` arguments: the child, then the tool's own arguments.
fn child_and_rest(mut input: Value) -> Result<(String, Value), String> {
    let child = input
        .as_object_mut()
        .and_then(|o| o.remove("child"))
        .and_then(|c| c.as_str().map(str::to_owned))
        .ok_or_else(|| {
            "missing \"child\": the id of one of this document's children (see list_children)"
                .to_owned()
        })?;
    Ok((child, input))
}

impl PlannerHost {
    async fn read_child(&self, input: Value) -> HostToolResult {
        let (child, rest) = match child_and_rest(input) {
            Ok(v) => v,
            Err(e) => return HostToolResult::error(e),
        };
        let args: ReadArgs = match serde_json::from_value(rest) {
            Ok(a) => a,
            Err(e) => return HostToolResult::error(format!("invalid read_child arguments: {e}")),
        };
        match self
            .turns
            .deps
            .children
            .read_child(self.document, &child, &args)
            .await
        {
            Ok(text) => HostToolResult::ok(Value::String(text)),
            Err(e) => HostToolResult::error(e.to_string()),
        }
    }

    async fn edit_child(&self, input: Value) -> HostToolResult {
        let (child, rest) = match child_and_rest(input) {
            Ok(v) => v,
            Err(e) => return HostToolResult::error(e),
        };
        let batch = match chopin_document::edit::parse_batch(&rest) {
            Ok(b) => b,
            Err(e) => return HostToolResult::error(e.to_string()),
        };
        match self
            .turns
            .deps
            .children
            .edit_child(self.document, &child, &batch)
            .await
        {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(v) => HostToolResult::ok(v),
                Err(e) => HostToolResult::error(e.to_string()),
            },
            Err(e) => HostToolResult::error(e.to_string()),
        }
    }

    async fn read_plan(&self, input: Value) -> HostToolResult {
        let args: ReadArgs = match serde_json::from_value(input) {
            Ok(a) => a,
            Err(e) => return HostToolResult::error(format!("invalid read_plan arguments: {e}")),
        };
        let d = &self.turns.deps;
        let Ok(Some(doc)) = d.records.document(self.document).await else {
            return HostToolResult::error("the document could not be read just now");
        };
        let Ok(open) = d.open.open(self.document).await else {
            return HostToolResult::error("the document could not be read just now");
        };
        let source = open.source().await;
        let earlier = d.documents.earlier_urls(&doc).await.unwrap_or_default();
        let id = doc.id.to_string();
        let input = DocumentInput {
            id: &id,
            url: &self.document_url,
            title: None,
            revision: doc.plan_revision as u64,
            earlier_urls: &earlier,
            child: None,
            kind: ReadKind::Plan,
            source: &source,
            accepted_comments: &[],
            brief: None,
        };
        match chopin_document::reader::read_text(&input, &args) {
            Ok(text) => HostToolResult::ok(Value::String(text)),
            Err(e) => HostToolResult::error(e.to_string()),
        }
    }

    async fn edit_plan(&self, input: Value) -> HostToolResult {
        let batch = match chopin_document::edit::parse_batch(&input) {
            Ok(b) => b,
            Err(e) => return HostToolResult::error(e.to_string()),
        };
        let d = &self.turns.deps;
        let Ok(Some(doc)) = d.records.document(self.document).await else {
            return HostToolResult::error("the document could not be edited just now");
        };
        let Ok(open) = d.open.open(self.document).await else {
            return HostToolResult::error("the document could not be edited just now");
        };
        let earlier = d.documents.earlier_urls(&doc).await.unwrap_or_default();
        let reference = DocumentRef {
            id: doc.id.to_string(),
            url: self.document_url.clone(),
        };
        match open.edit_plan(reference, &earlier, &batch).await {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(v) => HostToolResult::ok(v),
                Err(e) => HostToolResult::error(e.to_string()),
            },
            Err(_) => HostToolResult::error("the document could not be edited just now"),
        }
    }
}

/// The turn's harness, watched: once its session has started, messages go to the turn.
struct Started {
    inner: Arc<dyn Harness>,
    turns: Arc<Turns>,
    document: Uuid,
}

#[async_trait]
impl Harness for Started {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn builtin_tools(&self) -> Vec<String> {
        self.inner.builtin_tools()
    }
    fn can_filter_builtins(&self) -> bool {
        self.inner.can_filter_builtins()
    }
    fn capabilities(&self) -> crate::harness::Capabilities {
        self.inner.capabilities()
    }
    async fn start_session(
        &self,
        request: SessionRequest,
    ) -> Result<Box<dyn crate::harness::HarnessSession>, crate::harness::HarnessError> {
        let session = self.inner.start_session(request).await?;
        if let Some(running) = self.turns.lock().turns.get_mut(&self.document) {
            running.phase = Phase::Running;
        }
        Ok(session)
    }
}
