//! Implementation graphs (`implementation_graphs`): the versioned dependency graph a settled plan
//! is broken into, and the states a version goes through as people approve it and coding agents
//! claim and release it (implementation-lifecycle.md, "Graph states and counters").
//!
//! Owns: the rules of every change to a document's versions ([`apply`], one pure function that
//! every backend runs on the versions it read under the document's lock, so the rules are written
//! once): the three counters (`planRevision`, `graphVersion`, `graphRevision`), the states
//! `draft` → `approved` → `locked` → `approved` / `superseded`, "claims inspect the latest
//! version", and "a version whose verification passed is never claimed again".
//! Does not own: what a version's definition says (tasks, edges, criteria: checked by the server
//! before it is saved), who may make a change (only a person approves, GRA-04; the server checks),
//! or the tasks' own progress within a run.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{StoreResult, UnixMillis};

/// Where a graph version stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GraphState {
    /// Being drafted: edits advance its `graphRevision`.
    Draft,
    /// Approved by a person; claimable while it is the latest version and no verification of
    /// it passed.
    Approved,
    /// Claimed by a run, until the run ends.
    Locked,
    /// A newer version was approved.
    Superseded,
}

impl GraphState {
    /// The word stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            GraphState::Draft => "draft",
            GraphState::Approved => "approved",
            GraphState::Locked => "locked",
            GraphState::Superseded => "superseded",
        }
    }

    /// The state a stored word names.
    pub fn parse(word: &str) -> Option<GraphState> {
        [
            GraphState::Draft,
            GraphState::Approved,
            GraphState::Locked,
            GraphState::Superseded,
        ]
        .into_iter()
        .find(|s| s.as_str() == word)
    }
}

/// The three counters a claim names (LIFE-28, LIFE-29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphCounters {
    /// The canonical plan revision the version was drafted against.
    pub plan_revision: i64,
    /// The version: a new one is made when the latest is no longer a draft.
    pub graph_version: i64,
    /// Advances with each edit of a draft.
    pub graph_revision: i64,
}

/// One version of a document's graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphVersion {
    pub document_id: Uuid,
    pub counters: GraphCounters,
    pub state: GraphState,
    /// The ordered tasks, their dependency edges and acceptance criteria, as JSON text.
    pub definition: String,
    /// A verification of a run on this version passed: it is never claimed again (LIFE-35).
    pub verified: bool,
    /// Its last run ended asking for a revision (LIFE-36).
    pub revision_requested: bool,
    /// The run holding it while it is [`GraphState::Locked`].
    pub run_id: Option<String>,
    pub created_at_ms: UnixMillis,
    pub updated_at_ms: UnixMillis,
}

impl GraphVersion {
    /// The version as every backend stores it ([`crate::storable`] text).
    pub(crate) fn storable(self) -> GraphVersion {
        GraphVersion {
            definition: crate::storable(&self.definition).into_owned(),
            run_id: self
                .run_id
                .as_deref()
                .map(|r| crate::storable(r).into_owned()),
            ..self
        }
    }
}

/// How a run on a locked version ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnd {
    /// Its whole-graph verification passed: the successful end.
    Verified,
    /// It asked for a revision of the plan, criteria, tasks or dependencies.
    RevisionRequested,
    /// It stopped or failed otherwise.
    Stopped,
}

/// A change to a document's graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphChange {
    /// Saves a draft: edits the latest version if it is a draft (its `graphRevision` advances),
    /// else starts a new draft version. `base` is the (`graphVersion`, `graphRevision`) of the
    /// latest version the editor read (`None`: it read none); another is stale.
    Edit {
        base: Option<(i64, i64)>,
        plan_revision: i64,
        definition: String,
    },
    /// A person approves exactly the latest draft, named by its version and revision, while the
    /// plan stands at `current_plan_revision`.
    Approve {
        graph_version: i64,
        graph_revision: i64,
        current_plan_revision: i64,
    },
    /// A run claims the version `counters` name, which must be the latest one, as `run_id`.
    Claim {
        counters: GraphCounters,
        run_id: String,
    },
    /// The run `run_id` on `graph_version` ended.
    EndRun {
        graph_version: i64,
        run_id: String,
        end: RunEnd,
    },
    /// A rebuild landed (LIFE-14): its tasks join as a new version, approved and already
    /// verified (so never claimed), drafted against `plan_revision`; every earlier approved or
    /// draft version is superseded. Refused while a run holds the graph.
    Land {
        plan_revision: i64,
        definition: String,
    },
}

/// Why a change was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum GraphRefusal {
    /// The document has no graph.
    #[error("the document has no implementation graph")]
    NoGraph,
    /// The change named a version or revision that is not the latest one's.
    #[error(
        "the graph changed: the latest is version {latest_version} at revision {latest_revision}"
    )]
    Stale {
        latest_version: i64,
        latest_revision: i64,
    },
    /// The version was drafted against an older plan revision than the current one (LIFE-31).
    #[error("the graph was drafted against plan revision {drafted}; the plan is at {current}")]
    PlanChanged { drafted: i64, current: i64 },
    /// Approval of a version that is no longer a draft.
    #[error("only a draft can be approved; this version is {state}")]
    NotDraft { state: String },
    /// A claim of a version that is not approved.
    #[error("only an approved graph can be claimed; the latest version is {state}")]
    NotApproved { state: String },
    /// A claim of a version whose verification passed (LIFE-35).
    #[error("this graph version was implemented and verified; it cannot be claimed again")]
    Ineligible,
    /// A run holds a version: the graph takes no other change until it ends.
    #[error("an implementation run holds version {graph_version}")]
    Locked { graph_version: i64 },
    /// A claim through a build's bridge once that build ended (failed, or claimed already).
    #[error("the build this claim comes from is {state}")]
    BuildEnded { state: String },
    /// An end of a run that does not hold that version.
    #[error("run {run_id} does not hold version {graph_version}")]
    NotLocked { graph_version: i64, run_id: String },
}

/// A logical implementation run: the claim of one graph version by a coding agent and its
/// progress until it ends (implementation-lifecycle.md, "MCP lifecycle tools").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImplementationRun {
    /// Made by the server when it accepts the claim (LIFE-57).
    pub run_id: String,
    pub document_id: Uuid,
    pub graph_version: i64,
    /// Advances with each accepted report; a report worked out from an older one is not saved.
    pub revision: i64,
    /// The run's progress as JSON text: the server's (the repository, branch and commit the
    /// agent reported, each task's state, pull request and summary, the verifications).
    pub progress: String,
    /// How it ended; `None` while it holds its version.
    pub ended: Option<RunEnd>,
    pub started_at_ms: UnixMillis,
    pub updated_at_ms: UnixMillis,
}

impl RunEnd {
    /// The word stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEnd::Verified => "verified",
            RunEnd::RevisionRequested => "revision-requested",
            RunEnd::Stopped => "stopped",
        }
    }

    /// The end a stored word names.
    pub fn parse(word: &str) -> Option<RunEnd> {
        [RunEnd::Verified, RunEnd::RevisionRequested, RunEnd::Stopped]
            .into_iter()
            .find(|e| e.as_str() == word)
    }
}

/// A report on a run, as the server worked it out from the run at `base_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The caller's idempotency key, scoped to the run (RULINGS LIFE-58).
    pub key: String,
    /// What the caller sent, as the server compares repeats of `key`.
    pub payload: String,
    /// The run's revision the report was worked out from.
    pub base_revision: i64,
    /// The run's progress after it.
    pub progress: String,
    /// The answer, kept for a repeat of `key`.
    pub result: String,
    /// The run ends with it: its version is given back in the same commit (LIFE-34).
    pub end: Option<RunEnd>,
    /// What the run built: when it ends verified and a browser build's claim started it, this
    /// becomes the document's built source in the same commit (LIFE-11).
    pub delivered: Option<crate::Delivery>,
}

/// What became of a [`RunReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// Saved: the run as it is now.
    Saved(ImplementationRun),
    /// `key` was used before on this run: what was sent and answered then. Nothing saved.
    Repeated { payload: String, result: String },
    /// The run moved past `base_revision` (or ended) meanwhile: nothing saved; work it out
    /// again from the run as it is now.
    Moved,
}

/// Graphs, per document.
#[async_trait]
pub trait GraphStore: Send + Sync + 'static {
    /// Every version of `document_id`'s graph, oldest first.
    async fn graph_versions(&self, document_id: Uuid) -> StoreResult<Vec<GraphVersion>>;

    /// Makes `change` under the document's lock, durably: the version it made or changed, or
    /// why it was refused. `NotFound` if the document does not exist.
    async fn change_graph(
        &self,
        document_id: Uuid,
        change: &GraphChange,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<GraphVersion, GraphRefusal>>;

    /// Claims the version `counters` name for a new run `run_id` ([`GraphChange::Claim`]) and
    /// saves the run with `progress`, in one commit (LIFE-42). A claim through `build`'s bridge
    /// needs that build still launching, checked in the same commit (else
    /// [`GraphRefusal::BuildEnded`]), and makes it claimed. `NotFound` if the document does not
    /// exist.
    async fn start_implementation(
        &self,
        document_id: Uuid,
        counters: GraphCounters,
        run_id: &str,
        progress: &str,
        build: Option<Uuid>,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<ImplementationRun, GraphRefusal>>;

    /// The run `run_id`, if there is one.
    async fn implementation_run(&self, run_id: &str) -> StoreResult<Option<ImplementationRun>>;

    /// Every run of `document_id`, oldest first.
    async fn implementation_runs(&self, document_id: Uuid) -> StoreResult<Vec<ImplementationRun>>;

    /// What a report with `key` on `run_id` sent and was answered, if one was saved.
    async fn implementation_report(
        &self,
        run_id: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>>;

    /// Saves `report` on `run_id` if the run is still at its base revision and not ended, with
    /// its key and answer, and ends the run's hold on its version when `report.end` says so —
    /// all in one commit (LIFE-59: before anything is published). `NotFound` if there is no
    /// such run.
    async fn report_implementation(
        &self,
        run_id: &str,
        report: &RunReport,
        now_ms: UnixMillis,
    ) -> StoreResult<Reported>;
}

/// The run a claim makes.
pub(crate) fn new_run(
    document_id: Uuid,
    graph_version: i64,
    run_id: &str,
    progress: &str,
    now_ms: UnixMillis,
) -> ImplementationRun {
    ImplementationRun {
        run_id: crate::storable(run_id).into_owned(),
        document_id,
        graph_version,
        revision: 1,
        progress: crate::storable(progress).into_owned(),
        ended: None,
        started_at_ms: now_ms,
        updated_at_ms: now_ms,
    }
}

/// `run` after `report` (which the caller checked applies to it).
pub(crate) fn reported(
    run: &ImplementationRun,
    report: &RunReport,
    now_ms: UnixMillis,
) -> ImplementationRun {
    ImplementationRun {
        revision: run.revision + 1,
        progress: crate::storable(&report.progress).into_owned(),
        ended: report.end,
        updated_at_ms: now_ms,
        ..run.clone()
    }
}

/// What `change` makes of `versions` (a document's, oldest first): the versions to save, the
/// changed one first, or why it is refused.
pub fn apply(
    document_id: Uuid,
    versions: &[GraphVersion],
    change: &GraphChange,
    now_ms: UnixMillis,
) -> Result<Vec<GraphVersion>, GraphRefusal> {
    let latest = versions.iter().max_by_key(|v| v.counters.graph_version);
    let locked = versions.iter().find(|v| v.state == GraphState::Locked);
    let stale = |v: &GraphVersion| GraphRefusal::Stale {
        latest_version: v.counters.graph_version,
        latest_revision: v.counters.graph_revision,
    };
    match change {
        GraphChange::Edit {
            base,
            plan_revision,
            definition,
        } => {
            if let Some(held) = locked {
                return Err(GraphRefusal::Locked {
                    graph_version: held.counters.graph_version,
                });
            }
            let Some(latest) = latest else {
                if base.is_some() {
                    return Err(GraphRefusal::NoGraph);
                }
                return Ok(vec![draft(
                    document_id,
                    1,
                    *plan_revision,
                    definition,
                    now_ms,
                )]);
            };
            if *base
                != Some((
                    latest.counters.graph_version,
                    latest.counters.graph_revision,
                ))
            {
                return Err(stale(latest));
            }
            if latest.state == GraphState::Draft {
                let mut edited = latest.clone();
                edited.counters.plan_revision = *plan_revision;
                edited.counters.graph_revision += 1;
                edited.definition = definition.clone();
                edited.updated_at_ms = now_ms;
                return Ok(vec![edited]);
            }
            // The latest is no longer a draft: a new version, which supersedes nothing until
            // it is approved (LIFE-37).
            Ok(vec![draft(
                document_id,
                latest.counters.graph_version + 1,
                *plan_revision,
                definition,
                now_ms,
            )])
        }
        GraphChange::Approve {
            graph_version,
            graph_revision,
            current_plan_revision,
        } => {
            let latest = latest.ok_or(GraphRefusal::NoGraph)?;
            if (
                latest.counters.graph_version,
                latest.counters.graph_revision,
            ) != (*graph_version, *graph_revision)
            {
                return Err(stale(latest));
            }
            if let Some(held) = locked {
                return Err(GraphRefusal::Locked {
                    graph_version: held.counters.graph_version,
                });
            }
            if latest.state != GraphState::Draft {
                return Err(GraphRefusal::NotDraft {
                    state: latest.state.as_str().into(),
                });
            }
            if latest.counters.plan_revision < *current_plan_revision {
                return Err(GraphRefusal::PlanChanged {
                    drafted: latest.counters.plan_revision,
                    current: *current_plan_revision,
                });
            }
            let mut approved = latest.clone();
            approved.state = GraphState::Approved;
            approved.updated_at_ms = now_ms;
            let mut saved = vec![approved];
            // LIFE-32: a prior approved version gives way to this one.
            saved.extend(
                versions
                    .iter()
                    .filter(|v| v.state == GraphState::Approved)
                    .map(|v| GraphVersion {
                        state: GraphState::Superseded,
                        updated_at_ms: now_ms,
                        ..v.clone()
                    }),
            );
            Ok(saved)
        }
        GraphChange::Claim { counters, run_id } => {
            // LIFE-36: a claim inspects the latest version, never an older approved one.
            let latest = latest.ok_or(GraphRefusal::NoGraph)?;
            if latest.counters.graph_version != counters.graph_version {
                return Err(stale(latest));
            }
            if latest.state == GraphState::Locked {
                return Err(GraphRefusal::Locked {
                    graph_version: latest.counters.graph_version,
                });
            }
            if latest.state != GraphState::Approved {
                return Err(GraphRefusal::NotApproved {
                    state: latest.state.as_str().into(),
                });
            }
            if latest.verified {
                return Err(GraphRefusal::Ineligible);
            }
            // LIFE-33: all three counters, checked in the same write as the lock.
            if latest.counters != *counters {
                return Err(stale(latest));
            }
            let mut claimed = latest.clone();
            claimed.state = GraphState::Locked;
            claimed.run_id = Some(run_id.clone());
            claimed.updated_at_ms = now_ms;
            Ok(vec![claimed])
        }
        GraphChange::EndRun {
            graph_version,
            run_id,
            end,
        } => {
            let held = versions.iter().find(|v| {
                v.counters.graph_version == *graph_version
                    && v.state == GraphState::Locked
                    && v.run_id.as_deref() == Some(run_id.as_str())
            });
            let Some(held) = held else {
                return Err(GraphRefusal::NotLocked {
                    graph_version: *graph_version,
                    run_id: run_id.clone(),
                });
            };
            // LIFE-34: every terminal run gives the version back as approved.
            let mut ended = held.clone();
            ended.state = GraphState::Approved;
            ended.run_id = None;
            ended.verified |= *end == RunEnd::Verified;
            ended.revision_requested = *end == RunEnd::RevisionRequested;
            ended.updated_at_ms = now_ms;
            Ok(vec![ended])
        }
        GraphChange::Land {
            plan_revision,
            definition,
        } => {
            if let Some(held) = locked {
                return Err(GraphRefusal::Locked {
                    graph_version: held.counters.graph_version,
                });
            }
            let next = latest.map_or(1, |v| v.counters.graph_version + 1);
            let mut landed = draft(document_id, next, *plan_revision, definition, now_ms);
            landed.state = GraphState::Approved;
            landed.verified = true;
            let mut saved = vec![landed];
            saved.extend(
                versions
                    .iter()
                    .filter(|v| matches!(v.state, GraphState::Approved | GraphState::Draft))
                    .map(|v| GraphVersion {
                        state: GraphState::Superseded,
                        updated_at_ms: now_ms,
                        ..v.clone()
                    }),
            );
            Ok(saved)
        }
    }
}

fn draft(
    document_id: Uuid,
    graph_version: i64,
    plan_revision: i64,
    definition: &str,
    now_ms: UnixMillis,
) -> GraphVersion {
    GraphVersion {
        document_id,
        counters: GraphCounters {
            plan_revision,
            graph_version,
            graph_revision: 1,
        },
        state: GraphState::Draft,
        definition: definition.to_owned(),
        verified: false,
        revision_requested: false,
        run_id: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A change as the property test draws it: its counters come from a small range, so that
    /// stale and current ones both turn up.
    fn change() -> impl Strategy<Value = GraphChange> {
        let small = 0..4i64;
        prop_oneof![
            (proptest::option::of((1..4i64, 1..4i64)), small.clone()).prop_map(
                |(base, plan_revision)| GraphChange::Edit {
                    base,
                    plan_revision,
                    definition: "{}".into(),
                }
            ),
            (1..4i64, 1..4i64, small.clone()).prop_map(|(v, r, p)| GraphChange::Approve {
                graph_version: v,
                graph_revision: r,
                current_plan_revision: p,
            }),
            (small.clone(), 1..4i64, 1..4i64, 0..2u8).prop_map(|(p, v, r, run)| {
                GraphChange::Claim {
                    counters: GraphCounters {
                        plan_revision: p,
                        graph_version: v,
                        graph_revision: r,
                    },
                    run_id: format!("run-{run}"),
                }
            }),
            (1..4i64, 0..2u8, 0..3u8).prop_map(|(v, run, end)| GraphChange::EndRun {
                graph_version: v,
                run_id: format!("run-{run}"),
                end: [RunEnd::Verified, RunEnd::RevisionRequested, RunEnd::Stopped]
                    [usize::from(end)],
            }),
        ]
    }

    proptest! {
        /// Whatever the changes: at most one version is locked and only a locked one names a
        /// run; at most one is approved or locked; versions are numbered 1, 2, … with no gap;
        /// no counter of a version moves backwards and a version's number never changes; a
        /// verified version stays verified; and a refused change leaves everything as it was.
        #[test]
        fn graph_invariants_hold_under_any_sequence_of_changes(
            changes in proptest::collection::vec(change(), 1..40)
        ) {
            let doc = Uuid::from_u128(1);
            let mut versions: Vec<GraphVersion> = Vec::new();
            for (at, change) in changes.iter().enumerate() {
                let Ok(saved) = apply(doc, &versions, change, at as i64) else {
                    continue;
                };
                let before = versions.clone();
                for v in saved {
                    match versions
                        .iter_mut()
                        .find(|o| o.counters.graph_version == v.counters.graph_version)
                    {
                        Some(old) => *old = v,
                        None => versions.push(v),
                    }
                }
                let numbers: Vec<i64> = versions.iter().map(|v| v.counters.graph_version).collect();
                prop_assert_eq!(numbers, (1..=versions.len() as i64).collect::<Vec<_>>());
                let locked = versions.iter().filter(|v| v.state == GraphState::Locked).count();
                prop_assert!(locked <= 1);
                prop_assert!(versions
                    .iter()
                    .all(|v| v.run_id.is_some() == (v.state == GraphState::Locked)));
                let live = versions
                    .iter()
                    .filter(|v| matches!(v.state, GraphState::Approved | GraphState::Locked))
                    .count();
                prop_assert!(live <= 1, "{versions:?}");
                for old in &before {
                    let new = &versions[old.counters.graph_version as usize - 1];
                    prop_assert!(new.counters.graph_revision >= old.counters.graph_revision);
                    prop_assert!(new.counters.plan_revision >= old.counters.plan_revision
                        || old.state == GraphState::Draft);
                    prop_assert!(new.verified || !old.verified);
                    prop_assert!(new.state != GraphState::Draft || old.state == GraphState::Draft);
                }
            }
        }
    }
}
