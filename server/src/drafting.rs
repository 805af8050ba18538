//! Drafting tasks from Build plan (implementation-lifecycle.md, "Drafting tasks from Build
//! plan"): a writer's press asks the Planner to break the plan into an implementation graph.
//!
//! Owns: the checks before a draft (LIFE-08, LIFE-18: write access, not a child document, not
//! archived, not empty, no unresolved Decision in the plan, no active implementation, and no tasks already
//! drafted for the plan's current revision unless its last build was returned for changes);
//! the instruction the server writes (the Planner is told to use its graph tools, not to edit
//! prose); at most one live draft per document (LIFE-22: a press while one is queued or running
//! answers that one, `existing: true`); the `implementation:drafting` broadcast of `queued`,
//! `running` and `ended` (LIFE-25), `ended` once the turn has ended and saved what it saved;
//! and the press's reply, `ended` when the turn finished first (LIFE-24).
//! Does not own: the turn (Chat's [`Chat::draft`] asks for one of its own under the presser's
//! login, with the notice saved first) or the graph rules.
//!
//! Invariants: draft records are in memory only (LIFE-26): a restart forgets them, as it ends
//! the turn they ride; a refused press leaves no record and posts nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use chopin_document::decision::DecisionState;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::chat::{Chat, Place, SendReply, Sender};
use crate::content::OpenDocuments;
use crate::graphs::Graphs;
use crate::runtime::{SharedEntropy, Shutdown};
use crate::store::{Document, StoreError};
use crate::turns::Turns;

/// How many `implementation:drafting` frames a slow room may fall behind before it misses some.
const FEED_CAPACITY: usize = 64;

/// A draft in flight.
#[derive(Debug, Clone)]
struct Live {
    id: String,
    state: &'static str,
}

/// The drafting service.
pub struct Drafts {
    pub chat: Arc<Chat>,
    pub turns: Arc<Turns>,
    pub graphs: Arc<Graphs>,
    pub open: Arc<OpenDocuments>,
    pub entropy: SharedEntropy,
    pub shutdown: Shutdown,
    live: Mutex<BTreeMap<Uuid, Live>>,
    feed: broadcast::Sender<(Uuid, Value)>,
}

/// A refusal as the press's reply.
fn refused(request_id: &str, code: &str, message: &str) -> Value {
    json!({ "type": "implementation:draft", "requestId": request_id, "ok": false, "code": code, "message": message })
}

impl Drafts {
    pub fn new(
        chat: Arc<Chat>,
        turns: Arc<Turns>,
        graphs: Arc<Graphs>,
        open: Arc<OpenDocuments>,
        entropy: SharedEntropy,
        shutdown: Shutdown,
    ) -> Self {
        Drafts {
            chat,
            turns,
            graphs,
            open,
            entropy,
            shutdown,
            live: Mutex::default(),
            feed: broadcast::channel(FEED_CAPACITY).0,
        }
    }

    /// Every `implementation:drafting` frame, with the document it is about.
    pub fn subscribe(&self) -> broadcast::Receiver<(Uuid, Value)> {
        self.feed.subscribe()
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, Live>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tell(&self, document: Uuid, draft: &str, state: &str) {
        let _ = self.feed.send((
            document,
            json!({ "type": "implementation:drafting", "draftId": draft, "state": state }),
        ));
    }

    /// `sender`'s Build plan press on `doc` (the room's own document, `place`): the reply frame.
    pub async fn press(
        self: &Arc<Self>,
        doc: &Document,
        place: &Place,
        sender: &Sender,
        request_id: &str,
    ) -> Value {
        if !sender.can_write {
            return refused(
                request_id,
                "read-only",
                "Building a plan needs push access to this document's repository.",
            );
        }
        if let Some(live) = self.live().get(&doc.id).cloned() {
            return json!({ "type": "implementation:draft", "requestId": request_id, "ok": true,
                           "draftId": live.id, "existing": true, "state": live.state });
        }
        match self.why_not(doc).await {
            Ok(None) => {}
            Ok(Some((code, words))) => return refused(request_id, code, &words),
            Err(e) => {
                tracing::error!(error = %e, document = %doc.id, "drafting: the plan could not be read");
                return refused(
                    request_id,
                    "storage-unavailable",
                    "The plan could not be read just now; press Build plan again shortly.",
                );
            }
        }
        let id = format!("draft_{}", self.entropy.token_hex(8));
        {
            let mut live = self.live();
            if let Some(other) = live.get(&doc.id) {
                // Pressed together: the first press's draft answers both.
                return json!({ "type": "implementation:draft", "requestId": request_id, "ok": true,
                               "draftId": other.id, "existing": true, "state": other.state });
            }
            live.insert(
                doc.id,
                Live {
                    id: id.clone(),
                    state: "queued",
                },
            );
        }
        self.tell(doc.id, &id, "queued");
        let reply = self
            .chat
            .draft(place, sender, request_id, instruction(doc))
            .await;
        let SendReply::Ack { .. } = reply else {
            self.live().remove(&doc.id);
            self.tell(doc.id, &id, "ended");
            return match reply {
                SendReply::Refused { code, message, .. } => refused(request_id, &code, &message),
                _ => refused(
                    request_id,
                    "stopping",
                    "The server is stopping; press Build plan again in a moment.",
                ),
            };
        };
        if let Some(live) = self.live().get_mut(&doc.id) {
            live.state = "running";
        }
        self.tell(doc.id, &id, "running");
        let (drafts, document, draft) = (self.clone(), doc.id, id.clone());
        self.shutdown.spawn(async move {
            drafts.turns.until_idle(document).await;
            drafts.live().remove(&document);
            drafts.tell(document, &draft, "ended");
        });
        // LIFE-24: a turn that ended before this answer is said to have.
        let state = if self.live().get(&doc.id).is_some_and(|l| l.id == id) {
            "running"
        } else {
            "ended"
        };
        json!({ "type": "implementation:draft", "requestId": request_id, "ok": true,
                "draftId": id, "existing": false, "state": state })
    }

    /// Why `doc` takes no draft now, as a code and words (LIFE-08, LIFE-18).
    async fn why_not(&self, doc: &Document) -> Result<Option<(&'static str, String)>, StoreError> {
        if doc.parent_id.is_some() {
            return Ok(Some((
                "child-document",
                "A child document is not built on its own; build its root document.".to_owned(),
            )));
        }
        if doc.archived {
            return Ok(Some((
                "document-archived",
                "The document is archived; restore it first.".to_owned(),
            )));
        }
        match self.graphs.held(doc.id).await? {
            Some(crate::graphs::Held::Run { graph_version }) => {
                return Ok(Some((
                    "implementation-active",
                    format!("An implementation run holds version {graph_version} of this plan's tasks; wait until it ends or asks for a revision."),
                )));
            }
            Some(crate::graphs::Held::Build { graph_version, .. }) => {
                return Ok(Some((
                    "implementation-active",
                    format!("A build of version {graph_version} of this plan's tasks is starting on a machine; wait until it is claimed or fails."),
                )));
            }
            None => {}
        }
        let latest = self.graphs.graphs.graph_versions(doc.id).await?.pop();
        if let Some(latest) = latest {
            if latest.counters.plan_revision >= doc.plan_revision && !latest.revision_requested {
                return Ok(Some((
                    "already-drafted",
                    "The tasks for this version of the plan are drafted already; open Build to review them.".to_owned(),
                )));
            }
        }
        let handle = self.open.open(doc.id).await?;
        let source = handle.source().await;
        if source.trim().is_empty() {
            return Ok(Some((
                "document-empty",
                "The plan is empty: write it before breaking it into tasks.".to_owned(),
            )));
        }
        Ok(unsettled(&source))
    }
}

/// Why a plan with this source is not built now: a Decision open or answered but unresolved
/// (LIFE-13, LIFE-18; "accepted comments" have no counterpart here, docs/rulings.md).
pub fn unsettled(source: &str) -> Option<(&'static str, String)> {
    let blocks = chopin_document::blocks::blocks(source);
    let open = chopin_document::decision::decisions(source, &blocks)
        .into_iter()
        .filter(|(_, d)| matches!(d.state, DecisionState::Open | DecisionState::Answered))
        .count();
    (open > 0).then(|| {
        (
            "decisions-open",
            format!(
                "The plan has {open} unresolved Decision{}; resolve them before building.",
                if open == 1 { "" } else { "s" }
            ),
        )
    })
}

/// The instruction the server writes for a draft: the Planner reads the latest plan and saves
/// the whole graph with its graph tools, without touching the prose.
fn instruction(doc: &Document) -> String {
    format!(
        "Break this plan (\"{}\", plan revision {}) into an implementation graph. Read the plan with read_plan and the current graph with read_implementation_graph, then save the whole list of tasks with edit_implementation_graph: small tasks in the order they should be done, each with acceptance criteria and the tasks it depends on. Do not edit the plan's prose. A person reviews and approves the tasks.",
        doc.title, doc.plan_revision
    )
}
