//! An implementation run's lifecycle (implementation-lifecycle.md, "MCP lifecycle tools"): the
//! claim of an approved graph version and the reports a coding agent makes until the run ends —
//! a task started, blocked, given its pull request, completed; the graph-wide verification; a
//! revision request.
//!
//! Owns: what a run's progress holds ([`Progress`]), the rules of each report ([`apply`], a
//! pure function of the graph's definition and the progress so far), the refusals and their
//! codes, and the idempotency of reports (RULINGS LIFE-58: a key repeated on the same run with the
//! same report answers the first answer; with another report it is refused
//! `idempotency-conflict`).
//! Does not own: who may claim or report (push or admin on the document's repository: the
//! caller checks, LIFE-74), the graph's states and counters (`chopin_store::graphs`), or the
//! atomicity of a claim and of a report (the store's: one commit each).
//!
//! Invariants: a report is worked out from the run as stored and saved only if the run has not
//! moved since (else it is worked out again), so two writers reporting at once never lose one
//! another's change; a report on an ended run is refused; a repeated key never saves twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::graphs::Definition;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{
    Document, GraphCounters, GraphRefusal, GraphStore, ImplementationRun, Reported, RunEnd,
    RunReport, StoreError,
};

/// The longest blocker, summary, evidence or revision reason, in characters.
pub const NOTE_MAX_CHARS: usize = 4_000;
/// The longest pull-request URL, repository, branch or commit, in characters.
pub const FIELD_MAX_CHARS: usize = 2_000;
/// The longest idempotency key, in characters.
pub const KEY_MAX_CHARS: usize = 200;
/// The most verifications a run keeps (the latest); older ones give way.
pub const VERIFICATIONS_KEPT: usize = 20;
/// The most reports one run takes: each keeps its key and answer for repeats, so a run's
/// storage stays bounded.
pub const REPORTS_MAX: i64 = 10_000;
/// How many times a report is worked out again when other reports keep landing first.
const REPORT_ATTEMPTS: usize = 16;

/// A run's progress, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// What the agent reported of its checkout when it claimed (never checked: LIFE-41).
    pub repository: String,
    pub branch: String,
    pub commit: String,
    /// Who claimed it (the run is not bound to them: LIFE-07, LIFE-75).
    pub started_by: String,
    /// The tasks that moved, by id; a task not here is queued.
    #[serde(default)]
    pub tasks: BTreeMap<String, TaskProgress>,
    /// Every verification submitted, oldest first.
    #[serde(default)]
    pub verifications: Vec<Verification>,
    /// Why a revision was requested, when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_reason: Option<String>,
    /// Why the server stopped the run, when it did ([`SWEPT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_because: Option<String>,
}

/// How long a browser build's run may go without a lifecycle report before the sweep stops it,
/// and a picked-up build without its claim before the sweep fails it (RULINGS LIFE-87).
pub const BUILD_SILENCE_MS: i64 = 30 * 60 * 1000;

/// Why the sweep stopped a build's run.
pub const SWEPT: &str = "No lifecycle report for 30 minutes: the server's sweep stopped the run. A person presses Retry in Build to build it again.";

/// Where one task stands within a run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskProgress {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    #[default]
    Queued,
    InProgress,
    Blocked,
    Complete,
}

impl TaskState {
    fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::InProgress => "in-progress",
            TaskState::Blocked => "blocked",
            TaskState::Complete => "complete",
        }
    }
}

/// A task's pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullRequest {
    pub url: String,
    pub state: PullRequestState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullRequestState {
    Open,
    Merged,
    Closed,
}

/// One graph-wide verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub passed: bool,
    pub tasks: Vec<Evidence>,
    pub at_ms: i64,
}

/// What a review found of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evidence {
    pub task_id: String,
    pub passed: bool,
    pub evidence: String,
}

/// A report on a run: what each lifecycle tool after the claim asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "tool",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Report {
    StartTask {
        task_id: String,
    },
    BlockTask {
        task_id: String,
        blocker: String,
    },
    ReportPr {
        task_id: String,
        url: String,
        state: PullRequestState,
    },
    CompleteTask {
        task_id: String,
        summary: String,
    },
    ReportVerification {
        tasks: Vec<Evidence>,
    },
    RequestRevision {
        reason: String,
    },
}

/// Why a claim or report was refused: a code and words for the agent, and what more it may
/// need (the latest counters, the unfinished tasks). Nothing was saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub more: Value,
}

fn refusal(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
        more: json!({}),
    }
}

/// What `report` makes of `progress` on a graph whose tasks `definition` gives: the progress
/// after it and how the run ends with it (if it does), or why it is refused.
pub fn apply(
    definition: &Definition,
    progress: &Progress,
    report: &Report,
    now_ms: i64,
) -> Result<(Progress, Option<RunEnd>), Refusal> {
    let mut next = progress.clone();
    let state_of = |id: &str| progress.tasks.get(id).map(|t| t.state).unwrap_or_default();
    let known = |id: &str| -> Result<(), Refusal> {
        if definition.tasks.iter().any(|t| t.id == id) {
            Ok(())
        } else {
            Err(refusal(
                "unknown-task",
                format!("The graph has no task {id:?}; read_implementation lists its tasks."),
            ))
        }
    };
    let complete = |id: &str| {
        refusal(
            "already-complete",
            format!("Task {id:?} is already complete."),
        )
    };
    match report {
        Report::StartTask { task_id } => {
            known(task_id)?;
            match state_of(task_id) {
                TaskState::Complete => return Err(complete(task_id)),
                TaskState::InProgress => {
                    return Err(refusal(
                        "already-started",
                        format!("Task {task_id:?} is already in progress."),
                    ))
                }
                // Resuming a blocked task: it was started already.
                TaskState::Blocked => {}
                TaskState::Queued => {
                    let unfinished: Vec<&str> = definition
                        .tasks
                        .iter()
                        .find(|t| &t.id == task_id)
                        .map(|t| {
                            t.depends_on
                                .iter()
                                .map(String::as_str)
                                .filter(|d| state_of(d) != TaskState::Complete)
                                .collect()
                        })
                        .unwrap_or_default();
                    if !unfinished.is_empty() {
                        let mut r = refusal(
                            "dependencies-unfinished",
                            format!(
                                "Task {task_id:?} depends on tasks not complete yet: {}. Start a ready task first.",
                                unfinished.join(", ")
                            ),
                        );
                        r.more = json!({ "unfinished": unfinished });
                        return Err(r);
                    }
                }
            }
            let task = next.tasks.entry(task_id.clone()).or_default();
            task.state = TaskState::InProgress;
            task.blocker = None;
        }
        Report::BlockTask { task_id, blocker } => {
            known(task_id)?;
            note("blocker", blocker)?;
            if state_of(task_id) == TaskState::Complete {
                return Err(complete(task_id));
            }
            // A queued task starts and blocks in one step, whatever its dependencies (LIFE-52).
            let task = next.tasks.entry(task_id.clone()).or_default();
            task.state = TaskState::Blocked;
            task.blocker = Some(blocker.clone());
        }
        Report::ReportPr {
            task_id,
            url,
            state,
        } => {
            known(task_id)?;
            field("url", url)?;
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(refusal(
                    "invalid-arguments",
                    "url is the pull request's web address (https://…).",
                ));
            }
            match state_of(task_id) {
                TaskState::Complete => return Err(complete(task_id)),
                TaskState::Queued => return Err(not_started(task_id)),
                TaskState::InProgress | TaskState::Blocked => {}
            }
            let task = next.tasks.entry(task_id.clone()).or_default();
            if let Some(held) = &task.pull_request {
                if &held.url != url && held.state != PullRequestState::Closed {
                    let mut r = refusal(
                        "pull-request-exists",
                        format!(
                            "Task {task_id:?} already has pull request {} ({}); a task has one pull request. Report it closed first to replace it.",
                            held.url,
                            serde_json::to_value(held.state).unwrap_or_default().as_str().unwrap_or_default()
                        ),
                    );
                    r.more = json!({ "pullRequest": held });
                    return Err(r);
                }
            }
            task.pull_request = Some(PullRequest {
                url: url.clone(),
                state: *state,
            });
        }
        Report::CompleteTask { task_id, summary } => {
            known(task_id)?;
            match state_of(task_id) {
                TaskState::Complete => return Err(complete(task_id)),
                TaskState::Queued => return Err(not_started(task_id)),
                TaskState::Blocked => {
                    return Err(refusal(
                        "task-blocked",
                        format!("Task {task_id:?} is blocked; start_task resumes it before it can complete."),
                    ))
                }
                TaskState::InProgress => {}
            }
            note("summary", summary)?;
            let task = next.tasks.entry(task_id.clone()).or_default();
            if task.pull_request.is_none() {
                return Err(refusal(
                    "pull-request-missing",
                    format!("Task {task_id:?} has no pull request; report_pr records it before the task can complete."),
                ));
            }
            task.state = TaskState::Complete;
            task.summary = Some(summary.clone());
        }
        Report::ReportVerification { tasks } => {
            let unfinished: Vec<&str> = definition
                .tasks
                .iter()
                .map(|t| t.id.as_str())
                .filter(|id| state_of(id) != TaskState::Complete)
                .collect();
            if !unfinished.is_empty() {
                let mut r = refusal(
                    "tasks-unfinished",
                    format!(
                        "Verification covers the whole graph, and these tasks are not complete: {}.",
                        unfinished.join(", ")
                    ),
                );
                r.more = json!({ "unfinished": unfinished });
                return Err(r);
            }
            let mut seen = BTreeSet::new();
            for e in tasks {
                known(&e.task_id)?;
                note("evidence", &e.evidence)?;
                if !seen.insert(e.task_id.as_str()) {
                    return Err(refusal(
                        "invalid-arguments",
                        format!("Task {:?} is named twice in the evidence.", e.task_id),
                    ));
                }
            }
            let missing: Vec<&str> = definition
                .tasks
                .iter()
                .map(|t| t.id.as_str())
                .filter(|id| !seen.contains(id))
                .collect();
            if !missing.is_empty() {
                let mut r = refusal(
                    "evidence-missing",
                    format!(
                        "Verification gives evidence for every task; none for: {}.",
                        missing.join(", ")
                    ),
                );
                r.more = json!({ "missing": missing });
                return Err(r);
            }
            let passed = tasks.iter().all(|e| e.passed);
            // Failed tasks go back to work, their pull requests kept (LIFE-45).
            for e in tasks.iter().filter(|e| !e.passed) {
                let task = next.tasks.entry(e.task_id.clone()).or_default();
                task.state = TaskState::InProgress;
                task.summary = None;
            }
            next.verifications.push(Verification {
                passed,
                tasks: tasks.clone(),
                at_ms: now_ms,
            });
            let over = next.verifications.len().saturating_sub(VERIFICATIONS_KEPT);
            next.verifications.drain(..over);
            return Ok((next, passed.then_some(RunEnd::Verified)));
        }
        Report::RequestRevision { reason } => {
            note("reason", reason)?;
            next.revision_reason = Some(reason.clone());
            return Ok((next, Some(RunEnd::RevisionRequested)));
        }
    }
    Ok((next, None))
}

fn not_started(task_id: &str) -> Refusal {
    refusal(
        "task-not-started",
        format!("Task {task_id:?} has not started; start_task starts it."),
    )
}

fn note(name: &str, text: &str) -> Result<(), Refusal> {
    let chars = text.chars().count();
    if text.trim().is_empty() || chars > NOTE_MAX_CHARS {
        return Err(refusal(
            "invalid-arguments",
            format!("{name} is 1 to {NOTE_MAX_CHARS} characters of text."),
        ));
    }
    Ok(())
}

fn field(name: &str, text: &str) -> Result<(), Refusal> {
    if text.trim().is_empty() || text.chars().count() > FIELD_MAX_CHARS {
        return Err(refusal(
            "invalid-arguments",
            format!("{name} is 1 to {FIELD_MAX_CHARS} characters."),
        ));
    }
    Ok(())
}

/// What the agent reports of its checkout when it claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub repository: String,
    pub branch: String,
    pub commit: String,
}

/// The lifecycle service.
pub struct Lifecycle {
    pub graphs: Arc<dyn GraphStore>,
    /// Browser builds: queued with an approval, shown in the snapshot.
    pub builds: Arc<dyn crate::store::BuildStore>,
    /// Tells the rooms of each committed change (`plan:implementation`, LIFE-68).
    pub news: Arc<crate::graphs::Graphs>,
    /// The documents' live text: what a delivering run built (LIFE-11).
    pub open: Arc<crate::content::OpenDocuments>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    /// The simulator's planted bug ([`crate::config::Planted::claim_refusal_ignored`]); always
    /// off outside it.
    pub claim_refusal_ignored: bool,
    /// The simulator's planted bug ([`crate::config::Planted::run_end_split`]).
    pub run_end_split: bool,
}

impl Lifecycle {
    /// Claims the approved graph version `counters` name on `doc` for a new run (LIFE-42,
    /// LIFE-50): refused on an archived document (LIFE-62) and as the graph's rules say.
    pub async fn start(
        &self,
        doc: &Document,
        counters: GraphCounters,
        checkout: &Checkout,
        login: &str,
        build: Option<Uuid>,
    ) -> Result<Result<Value, Refusal>, StoreError> {
        if doc.archived {
            return Ok(Err(refusal(
                "document-archived",
                "The document is archived: restore it before starting an implementation.",
            )));
        }
        for (name, value) in [
            ("repository", &checkout.repository),
            ("branch", &checkout.branch),
            ("commit", &checkout.commit),
        ] {
            if let Err(r) = field(name, value) {
                return Ok(Err(r));
            }
        }
        let progress = Progress {
            repository: checkout.repository.clone(),
            branch: checkout.branch.clone(),
            commit: checkout.commit.clone(),
            started_by: login.to_owned(),
            ..Progress::default()
        };
        let run_id = format!("run_{}", self.entropy.token_hex(16));
        let text = serde_json::to_string(&progress).unwrap_or_default();
        let claimed = self
            .graphs
            .start_implementation(doc.id, counters, &run_id, &text, build, self.clock.now_ms())
            .await?;
        let run = match claimed {
            Ok(run) => run,
            Err(GraphRefusal::Locked { .. }) if self.claim_refusal_ignored => ImplementationRun {
                run_id,
                document_id: doc.id,
                graph_version: counters.graph_version,
                revision: 1,
                progress: text,
                ended: None,
                started_at_ms: self.clock.now_ms(),
                updated_at_ms: self.clock.now_ms(),
            },
            Err(refused) => return Ok(Err(claim_refusal(&refused))),
        };
        self.news.changed(doc.id).await;
        let definition = self.definition(&run).await?;
        Ok(Ok(run_json(&run, &progress, &definition)))
    }

    /// Makes `report` on run `run_id` of `document` under idempotency key `key`.
    pub async fn report(
        &self,
        document: Uuid,
        run_id: &str,
        key: &str,
        report: &Report,
    ) -> Result<Result<Value, Refusal>, StoreError> {
        if key.is_empty() || key.chars().count() > KEY_MAX_CHARS {
            return Ok(Err(refusal(
                "invalid-arguments",
                format!("idempotencyKey is 1 to {KEY_MAX_CHARS} characters, new for each report."),
            )));
        }
        let payload = serde_json::to_string(report).unwrap_or_default();
        for _ in 0..REPORT_ATTEMPTS {
            let run = match self.graphs.implementation_run(run_id).await? {
                Some(run) if run.document_id == document => run,
                _ => return Ok(Err(refusal(
                    "unknown-run",
                    "This document has no run with that runId; start_implementation returned it.",
                ))),
            };
            if let Some((sent, answer)) = self.graphs.implementation_report(run_id, key).await? {
                return Ok(repeated(&sent, &answer, &payload));
            }
            if let Some(end) = run.ended {
                let mut r = refusal(
                    "run-ended",
                    format!(
                        "The run has ended ({}); nothing more is reported on it.",
                        end.as_str()
                    ),
                );
                r.more = json!({ "ended": end.as_str(), "endedAt": run.updated_at_ms });
                return Ok(Err(r));
            }
            // The claim is the run's first revision; each saved report adds one.
            if run.revision > REPORTS_MAX {
                return Ok(Err(refusal(
                    "too-many-reports",
                    format!("This run has taken {REPORTS_MAX} reports, the most one run takes; end it with request_revision and claim the graph again."),
                )));
            }
            let progress: Progress = serde_json::from_str(&run.progress)
                .map_err(|e| StoreError::Backend(format!("a run's progress: {e}")))?;
            let (plan_revision, definition) = self.held_version(&run).await?;
            let now = self.clock.now_ms();
            let (next, end) = match apply(&definition, &progress, report, now) {
                Ok(done) => done,
                Err(refused) => return Ok(Err(refused)),
            };
            let answer = run_json(
                &ImplementationRun {
                    ended: end,
                    updated_at_ms: now,
                    ..run.clone()
                },
                &next,
                &definition,
            );
            let end = match end {
                Some(end) if self.run_end_split => {
                    let change = crate::store::GraphChange::EndRun {
                        graph_version: run.graph_version,
                        run_id: run.run_id.clone(),
                        end,
                    };
                    let _ = self.graphs.change_graph(document, &change, now).await?;
                    None
                }
                end => end,
            };
            // A verified run delivers the plan its version was drafted against, which the
            // lock kept as it is; the store records it only for a browser build's run (LIFE-11).
            let delivered = match end {
                Some(RunEnd::Verified) => Some(crate::store::Delivery {
                    source: self.open.open(document).await?.source().await,
                    plan_revision,
                }),
                _ => None,
            };
            let saved = self
                .graphs
                .report_implementation(
                    run_id,
                    &RunReport {
                        key: key.to_owned(),
                        payload: payload.clone(),
                        base_revision: run.revision,
                        progress: serde_json::to_string(&next).unwrap_or_default(),
                        result: answer.to_string(),
                        end,
                        delivered,
                    },
                    now,
                )
                .await?;
            match saved {
                Reported::Saved(_) => {
                    self.news.changed(document).await;
                    return Ok(Ok(answer));
                }
                Reported::Repeated {
                    payload: sent,
                    result,
                } => return Ok(repeated(&sent, &result, &payload)),
                Reported::Moved => continue,
            }
        }
        Ok(Err(refusal(
            "busy",
            "Other reports on this run kept landing first; send this one again.",
        )))
    }

    /// Stops `run`, a browser build's run the sweep found silent (RULINGS LIFE-87): it ends
    /// `stopped` and gives its version back as approved, unless a report landed meanwhile.
    /// Whether it stopped it.
    pub async fn stop_silent(&self, run: &ImplementationRun) -> Result<bool, StoreError> {
        let mut progress: Progress = serde_json::from_str(&run.progress)
            .map_err(|e| StoreError::Backend(format!("a run's progress: {e}")))?;
        progress.stopped_because = Some(SWEPT.to_owned());
        let definition = self.definition(run).await?;
        let answer = run_json(
            &ImplementationRun {
                ended: Some(RunEnd::Stopped),
                updated_at_ms: self.clock.now_ms(),
                ..run.clone()
            },
            &progress,
            &definition,
        );
        let saved = self
            .graphs
            .report_implementation(
                &run.run_id,
                &RunReport {
                    key: format!("chopin:sweep:{}", run.revision),
                    payload: "sweep".to_owned(),
                    base_revision: run.revision,
                    progress: serde_json::to_string(&progress).unwrap_or_default(),
                    result: answer.to_string(),
                    end: Some(RunEnd::Stopped),
                    delivered: None,
                },
                self.clock.now_ms(),
            )
            .await?;
        if !matches!(saved, Reported::Saved(_)) {
            return Ok(false);
        }
        self.news.changed(run.document_id).await;
        Ok(true)
    }

    /// The Build view's snapshot of `doc` (LIFE-66, LIFE-67, LIFE-68): every graph version's
    /// state and counters, the latest one's tasks, the lock a run holds, and every run with its
    /// progress, oldest first.
    pub async fn snapshot(
        &self,
        doc: &Document,
        viewer: Uuid,
        online: &(dyn Fn(Uuid) -> bool + Sync),
    ) -> Result<Value, StoreError> {
        let versions = self.graphs.graph_versions(doc.id).await?;
        let runs = self.graphs.implementation_runs(doc.id).await?;
        let mut shown = Vec::with_capacity(runs.len());
        for run in &runs {
            let progress: Progress = serde_json::from_str(&run.progress).unwrap_or_default();
            let definition = versions
                .iter()
                .find(|v| v.counters.graph_version == run.graph_version)
                .and_then(|v| Definition::parse(&v.definition).ok())
                .unwrap_or_default();
            shown.push(run_json(run, &progress, &definition));
        }
        // The editing lock as the room tells it: a run's, or a pending build's (LIFE-64).
        let builds = self.builds.document_builds(doc.id).await?;
        let lock = crate::graphs::lock_of(&versions, &builds);
        Ok(json!({
            "document": {
                "id": doc.id,
                "planRevision": doc.plan_revision,
                "storageRevision": doc.storage_revision,
                "archived": doc.archived,
            },
            "lock": lock,
            "graph": versions.last().map(crate::graphs::implementation_json),
            "versions": versions
                .iter()
                .map(|v| json!({
                    "graphVersion": v.counters.graph_version,
                    "graphRevision": v.counters.graph_revision,
                    "planRevision": v.counters.plan_revision,
                    "state": v.state.as_str(),
                }))
                .collect::<Vec<_>>(),
            "runs": shown,
            "builds": builds
                .iter()
                .map(|b| build_seen_by(b, viewer, online))
                .collect::<Vec<_>>(),
        }))
    }

    /// A person approves exactly the latest draft, named by its version and revision, against
    /// the plan as it stands (GRA-04, LIFE-05, LIFE-31).
    pub async fn approve(
        &self,
        doc: &Document,
        graph_version: i64,
        graph_revision: i64,
    ) -> Result<Result<Value, Refusal>, StoreError> {
        let change = crate::store::GraphChange::Approve {
            graph_version,
            graph_revision,
            current_plan_revision: doc.plan_revision,
        };
        match self
            .graphs
            .change_graph(doc.id, &change, self.clock.now_ms())
            .await?
        {
            Ok(version) => {
                self.news.changed(doc.id).await;
                Ok(Ok(crate::graphs::implementation_json(&version)))
            }
            Err(refused) => Ok(Err(approval_refusal(&refused))),
        }
    }

    /// [`Lifecycle::approve`], queueing `build` of the version approved in the same commit
    /// (LIFE-05): the approved version with `build`, or the approval's refusal (nothing queued).
    pub async fn approve_and_queue(
        &self,
        doc: &Document,
        graph_version: i64,
        graph_revision: i64,
        build: &crate::store::NewBuild,
    ) -> Result<Result<Value, Refusal>, StoreError> {
        let change = crate::store::GraphChange::Approve {
            graph_version,
            graph_revision,
            current_plan_revision: doc.plan_revision,
        };
        match self
            .builds
            .approve_and_queue(doc.id, &change, build, self.clock.now_ms())
            .await?
        {
            Ok((version, queued)) => {
                self.news.changed(doc.id).await;
                let mut shown = crate::graphs::implementation_json(&version);
                shown["build"] = build_json(&queued);
                Ok(Ok(shown))
            }
            Err(refused) => Ok(Err(approval_refusal(&refused))),
        }
    }
}

/// A build as the API shows it.
pub fn build_json(build: &crate::store::Build) -> Value {
    json!({
        "buildId": build.id,
        "kind": build.kind.as_str(),
        "documentId": build.document_id,
        "graphVersion": build.graph_version,
        "machineId": build.machine_id,
        "requestedBy": build.requested_by,
        "checkout": build.checkout,
        "state": build.state.as_str(),
        "reason": build.reason,
        "runId": build.run_id,
        "createdAt": build.created_at_ms,
        "updatedAt": build.updated_at_ms,
    })
}

/// A build as `viewer` sees it in the snapshot: its machine and checkout only for its builder,
/// who also sees whether that machine's connector is online (LIFE-83).
fn build_seen_by(
    build: &crate::store::Build,
    viewer: Uuid,
    online: &(dyn Fn(Uuid) -> bool + Sync),
) -> Value {
    let mut shown = build_json(build);
    if build.requested_by_account_id == viewer {
        shown["machineOnline"] = Value::Bool(online(build.machine_id));
    } else if let Value::Object(fields) = &mut shown {
        fields.remove("machineId");
        fields.remove("checkout");
    }
    shown
}

/// Why an approval was refused, in the Build view's words.
fn approval_refusal(refused: &GraphRefusal) -> Refusal {
    match refused {
            GraphRefusal::PlanChanged { drafted, current } => Refusal {
                code: "plan-changed",
                message: format!("The tasks were drafted against plan revision {drafted}, and the plan is at {current} now: draft them again before approving."),
                more: json!({ "drafted": drafted, "current": current }),
            },
            GraphRefusal::NotDraft { state } => Refusal {
                code: "not-a-draft",
                message: format!("Only a draft is approved; the latest version is {state}."),
                more: json!({ "state": state }),
            },
            other => claim_refusal(other),
    }
}

impl Lifecycle {
    /// The definition of the version `run` holds.
    async fn definition(&self, run: &ImplementationRun) -> Result<Definition, StoreError> {
        Ok(self.held_version(run).await?.1)
    }

    /// The plan revision of the version `run` holds, and its definition.
    async fn held_version(&self, run: &ImplementationRun) -> Result<(i64, Definition), StoreError> {
        let versions = self.graphs.graph_versions(run.document_id).await?;
        let version = versions
            .iter()
            .find(|v| v.counters.graph_version == run.graph_version)
            .ok_or(StoreError::NotFound("graph version"))?;
        let definition = Definition::parse(&version.definition)
            .map_err(|e| StoreError::Backend(format!("a stored graph: {e}")))?;
        Ok((version.counters.plan_revision, definition))
    }
}

/// A repeated key: the first answer when the report is the same, else a refusal.
fn repeated(sent: &str, answer: &str, payload: &str) -> Result<Value, Refusal> {
    if sent == payload {
        Ok(serde_json::from_str(answer).unwrap_or(Value::Null))
    } else {
        Err(refusal(
            "idempotency-conflict",
            "This idempotencyKey was used on this run for another report; use a new key for each report.",
        ))
    }
}

/// A refused claim, as its code and words.
fn claim_refusal(refused: &GraphRefusal) -> Refusal {
    match refused {
        GraphRefusal::Stale {
            latest_version,
            latest_revision,
        } => Refusal {
            code: "stale",
            message: format!("The graph changed: the latest is version {latest_version} at revision {latest_revision}. Read it again with read_implementation."),
            more: json!({ "latestVersion": latest_version, "latestRevision": latest_revision }),
        },
        GraphRefusal::Locked { graph_version } => Refusal {
            code: "graph-locked",
            message: format!("An implementation run already holds version {graph_version}."),
            more: json!({ "graphVersion": graph_version }),
        },
        GraphRefusal::Ineligible => refusal(
            "already-verified",
            "This graph version was implemented and verified; it cannot be claimed again.",
        ),
        GraphRefusal::NoGraph | GraphRefusal::NotApproved { .. } => refusal(
            "no-approved-graph",
            "The document's latest graph is not approved: a person approves one with Build plan.",
        ),
        GraphRefusal::BuildEnded { state } => Refusal {
            code: "build-ended",
            message: format!("The build this bridge belongs to is {state}: it claims nothing any more. A person presses Retry in Build to build the plan again."),
            more: json!({ "buildState": state }),
        },
        other => refusal("refused", other.to_string()),
    }
}

/// A run as the tools answer it: its id, version, checkout, every task in graph order with its
/// state, and whether it ended.
pub fn run_json(run: &ImplementationRun, progress: &Progress, definition: &Definition) -> Value {
    let done: BTreeSet<&str> = progress
        .tasks
        .iter()
        .filter(|(_, t)| t.state == TaskState::Complete)
        .map(|(id, _)| id.as_str())
        .collect();
    let ready: BTreeSet<&str> = definition
        .ready(&done)
        .into_iter()
        .filter(|id| {
            progress
                .tasks
                .get(*id)
                .is_none_or(|t| t.state == TaskState::Queued)
        })
        .collect();
    let tasks: Vec<Value> = definition
        .tasks
        .iter()
        .map(|t| {
            let p = progress.tasks.get(&t.id).cloned().unwrap_or_default();
            json!({
                "id": t.id,
                "title": t.title,
                "state": p.state.as_str(),
                "ready": ready.contains(t.id.as_str()),
                "blocker": p.blocker,
                "pullRequest": p.pull_request,
                "summary": p.summary,
            })
        })
        .collect();
    json!({
        "runId": run.run_id,
        "documentId": run.document_id,
        "graphVersion": run.graph_version,
        "state": run.ended.map_or("active", RunEnd::as_str),
        "repository": progress.repository,
        "branch": progress.branch,
        "commit": progress.commit,
        "startedBy": progress.started_by,
        "startedAt": run.started_at_ms,
        "lastReportAt": run.updated_at_ms,
        "tasks": tasks,
        "verifications": progress.verifications,
        "stoppedBecause": progress.stopped_because,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition() -> Definition {
        Definition::parse(r#"{"tasks":[{"id":"a","title":"Do a"}]}"#).unwrap()
    }

    #[test]
    fn life_55_a_run_keeps_its_latest_verifications_only() {
        let d = definition();
        let mut progress = Progress::default();
        progress.tasks.insert(
            "a".into(),
            TaskProgress {
                state: TaskState::Complete,
                ..TaskProgress::default()
            },
        );
        let failed = Report::ReportVerification {
            tasks: vec![Evidence {
                task_id: "a".into(),
                passed: false,
                evidence: "Broken.".into(),
            }],
        };
        let complete = Report::CompleteTask {
            task_id: "a".into(),
            summary: "Fixed.".into(),
        };
        for round in 0..(VERIFICATIONS_KEPT as i64 + 5) {
            progress.tasks.get_mut("a").unwrap().pull_request = Some(PullRequest {
                url: "https://github.com/o/r/pull/1".into(),
                state: PullRequestState::Open,
            });
            let (next, end) = apply(&d, &progress, &failed, round).unwrap();
            assert_eq!(end, None);
            assert_eq!(next.tasks["a"].state, TaskState::InProgress);
            let (next, _) = apply(&d, &next, &complete, round).unwrap();
            progress = next;
        }
        assert_eq!(progress.verifications.len(), VERIFICATIONS_KEPT);
        assert_eq!(progress.verifications[0].at_ms, 5, "the oldest gave way");
    }
}
