//! Browser builds (`implementation_builds`): a person's Build plan press approves the drafted
//! graph and queues a build of it on a paired machine, in one commit (LIFE-05); the machine's
//! connector picks it up once — never replayed (LIFE-48) — and claims the graph; a build that
//! fails before its claim stays failed until a person asks again.
//!
//! Owns: the build records and their states — queued, launching (picked up), claimed (its run
//! claimed the version it queued), failed — and the rules between them: a build moves only
//! forward, is picked up at most once, and a claim of its version while it is launching makes it
//! claimed with the run, in the claim's commit.
//! Does not own: who may press, which machine (the server checks), the graph's own rules
//! ([`crate::graphs`]), or what a connector does with a build.

use async_trait::async_trait;
use uuid::Uuid;

use crate::{
    GraphChange, GraphRefusal, GraphVersion, ImplementationRun, Reach, StoreResult, UnixMillis,
};

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildState {
    /// Approved and waiting for its machine's connector.
    Queued,
    /// The connector picked it up and is starting its session; its claim has not come yet.
    Launching,
    /// Its run claimed the version it queued.
    Claimed,
    /// It ended before its claim (the connector could not start it, or its machine went, or
    /// the sweep found it silent too long).
    Failed,
    /// A rebuild its coding agent reported done: its tasks joined the graph (LIFE-14).
    Landed,
}

impl BuildState {
    /// The word stored.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildState::Queued => "queued",
            BuildState::Launching => "launching",
            BuildState::Claimed => "claimed",
            BuildState::Failed => "failed",
            BuildState::Landed => "landed",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "queued" => BuildState::Queued,
            "launching" => BuildState::Launching,
            "claimed" => BuildState::Claimed,
            "failed" => BuildState::Failed,
            "landed" => BuildState::Landed,
            _ => return None,
        })
    }

    /// Queued or launching: a first build's freezes the plan until its claim (LIFE-64).
    pub fn is_pending(self) -> bool {
        matches!(self, BuildState::Queued | BuildState::Launching)
    }
}

/// What a build builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildKind {
    /// An approved graph version, claimed through `/mcp` like any coding agent's.
    Build,
    /// The edits made since the document's built source, onto the pull requests that built it
    /// (LIFE-12): pressed, it is its own approval and claims nothing.
    Rebuild,
}

impl BuildKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildKind::Build => "build",
            BuildKind::Rebuild => "rebuild",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "build" => BuildKind::Build,
            "rebuild" => BuildKind::Rebuild,
            _ => return None,
        })
    }
}

/// The change a rebuild implements: the built source it starts from and the source as it was
/// when the rebuild was queued. Kept only while the rebuild is pending; an ended rebuild keeps
/// none, so history stays small whatever the document's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildChange {
    pub before: String,
    pub after: String,
    /// The plan revision `after` is the source of.
    pub plan_revision: i64,
}

/// The source a document's last delivered build (or landed rebuild) built (LIFE-10, LIFE-11):
/// what "N changes to build" counts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltSource {
    pub document_id: Uuid,
    /// The build or rebuild that delivered it.
    pub build_id: Uuid,
    pub plan_revision: i64,
    pub source: String,
    pub recorded_at_ms: UnixMillis,
}

/// What a delivering run built: recorded as the built source when the run that a browser
/// build's claim started passes its verification, in that report's commit (LIFE-11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub source: String,
    pub plan_revision: i64,
}

/// The most builds a document keeps (LIFE-86): past it, ended rebuilds give way oldest first.
pub const BUILDS_KEPT: i64 = 100;

/// Why a pending build ended when the sweep found no lifecycle report for too long (RULINGS
/// LIFE-87).
pub const EXPIRED: &str = "expired";

/// What [`BuildStore::land_rebuild`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// Landed now: the rebuild, and the approved, completed version its tasks made.
    Landed {
        rebuild: Build,
        version: GraphVersion,
    },
    /// It had landed before; nothing changed (LIFE-85).
    Already(Build),
    /// It is not a rebuild that was picked up (queued, failed, or a first build); nothing
    /// changed.
    NotLaunching(Build),
    /// A run holds the graph: nothing changed.
    Refused(GraphRefusal),
}

/// A browser build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    pub id: Uuid,
    pub document_id: Uuid,
    pub kind: BuildKind,
    /// The graph version it builds (the one the press approved); for a rebuild, the latest
    /// version when it was queued, then the version its landing made.
    pub graph_version: i64,
    /// The machine whose connector runs it.
    pub machine_id: Uuid,
    pub requested_by_account_id: Uuid,
    /// The presser's login when they pressed.
    pub requested_by: String,
    /// The checkout on the machine the presser picked, if they named one.
    pub checkout: Option<String>,
    pub state: BuildState,
    /// Why it failed.
    pub reason: Option<String>,
    /// The run that claimed it.
    pub run_id: Option<String>,
    /// A pending rebuild's change.
    pub change: Option<BuildChange>,
    pub created_at_ms: UnixMillis,
    pub updated_at_ms: UnixMillis,
}

/// A build to queue with an approval.
#[derive(Debug, Clone)]
pub struct NewBuild {
    pub id: Uuid,
    pub machine_id: Uuid,
    pub requested_by_account_id: Uuid,
    pub requested_by: String,
    pub checkout: Option<String>,
}

/// Why a pending build failed when its machine was unpaired.
pub const MACHINE_GONE: &str = "machine-revoked";

/// A queued build of `graph_version` of `document_id`, made at `now_ms`.
pub(crate) fn queued(
    document_id: Uuid,
    graph_version: i64,
    build: &NewBuild,
    now_ms: UnixMillis,
) -> Build {
    Build {
        id: build.id,
        document_id,
        kind: BuildKind::Build,
        graph_version,
        machine_id: build.machine_id,
        requested_by_account_id: build.requested_by_account_id,
        requested_by: build.requested_by.clone(),
        checkout: build.checkout.clone(),
        state: BuildState::Queued,
        reason: None,
        run_id: None,
        change: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    }
}

/// How many builds of a document [`BuildStore::document_builds`] answers, newest first.
pub const BUILDS_SHOWN: i64 = 20;

/// Why [`BuildStore::queue_build`] queued nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRefusal {
    /// The latest version is not approved and unclaimed (a draft, held by a run, or none).
    NotApproved,
    /// A build of the document is queued or launching already.
    Pending { build: Uuid },
    /// A rebuild of a document no build delivered.
    NothingBuilt,
    /// A run holds the graph.
    Locked { graph_version: i64 },
}

/// The rebuild of `document_id` from `built` to `after`, queued at `now_ms` on the latest
/// version `graph_version`.
pub(crate) fn queued_rebuild(
    document_id: Uuid,
    graph_version: i64,
    build: &NewBuild,
    built: &BuiltSource,
    after: &str,
    after_plan_revision: i64,
    now_ms: UnixMillis,
) -> Build {
    Build {
        kind: BuildKind::Rebuild,
        change: Some(BuildChange {
            before: built.source.clone(),
            after: crate::storable(after).into_owned(),
            plan_revision: after_plan_revision,
        }),
        ..queued(document_id, graph_version, build, now_ms)
    }
}

/// The id of the run a landed rebuild `id` made.
pub fn rebuild_run_id(id: Uuid) -> String {
    format!("rebuild_{}", id.simple())
}

/// The run `rebuild` made of `version` as it landed, ended verified with `progress`.
pub(crate) fn landed_run(
    rebuild: &Build,
    version: &GraphVersion,
    progress: &str,
    now_ms: UnixMillis,
) -> ImplementationRun {
    ImplementationRun {
        ended: Some(crate::RunEnd::Verified),
        ..crate::graphs::new_run(
            rebuild.document_id,
            version.counters.graph_version,
            &rebuild_run_id(rebuild.id),
            progress,
            now_ms,
        )
    }
}

/// The ids of the ended rebuilds that give way so that `builds` (a document's, any order) plus
/// one more stay within [`BUILDS_KEPT`], oldest first.
pub(crate) fn giving_way(builds: &[Build]) -> Vec<Uuid> {
    let kept = usize::try_from(BUILDS_KEPT).unwrap_or(usize::MAX);
    let over = (builds.len() + 1).saturating_sub(kept);
    let mut ended: Vec<&Build> = builds
        .iter()
        .filter(|b| {
            b.kind == BuildKind::Rebuild
                && matches!(b.state, BuildState::Landed | BuildState::Failed)
        })
        .collect();
    ended.sort_by_key(|b| (b.created_at_ms, b.id));
    ended.into_iter().take(over).map(|b| b.id).collect()
}

#[async_trait]
pub trait BuildStore: Send + Sync + 'static {
    /// Makes `approval` (a [`GraphChange::Approve`]) and queues `build` for the version it
    /// approves, in one commit (LIFE-05); refused as the approval would be, queueing nothing.
    /// `NotFound("document")`.
    async fn approve_and_queue(
        &self,
        document_id: Uuid,
        approval: &GraphChange,
        build: &NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<(GraphVersion, Build), GraphRefusal>>;
    /// Queues `build` again for the document's latest version, which must be approved and not
    /// held by a run, while no other build of the document is pending: a person's Retry after
    /// a build failed before its claim (LIFE-48). `NotFound("document")`.
    async fn queue_build(
        &self,
        document_id: Uuid,
        build: &NewBuild,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<Build, QueueRefusal>>;
    async fn build(&self, id: Uuid) -> StoreResult<Option<Build>>;
    /// The builds queued for `machine_id`, oldest first.
    async fn machine_builds(&self, machine_id: Uuid) -> StoreResult<Vec<Build>>;
    /// The newest [`BUILDS_SHOWN`] builds of `document_id`, newest first.
    async fn document_builds(&self, document_id: Uuid) -> StoreResult<Vec<Build>>;
    /// Queued → launching, keeping `bridge_digest` (the SHA-256 of the bridge token handed to
    /// the connector): the build as picked up, or `None` when it was not queued (picked up
    /// before, or failed) — a build is never handed out twice (LIFE-48).
    async fn pick_up_build(
        &self,
        id: Uuid,
        bridge_digest: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<Build>>;
    /// The build whose bridge token has this digest.
    async fn build_by_bridge(&self, bridge_digest: &str) -> StoreResult<Option<Build>>;
    /// Queued or launching → failed with `reason`: the build as it is now, or `None` when it had
    /// moved past its claim or failed already.
    async fn fail_build(
        &self,
        id: Uuid,
        reason: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Option<Build>>;
    /// The document's built source, if a build delivered (LIFE-11).
    async fn built_source(&self, document_id: Uuid) -> StoreResult<Option<BuiltSource>>;
    /// Queues `build` as a rebuild from the built source to `after` (the source at
    /// `after_plan_revision`), in one commit (LIFE-12): refused while any build of the document
    /// is pending, while a run holds its graph, or when no build delivered. Ended rebuilds give
    /// way, oldest first, so the document keeps at most [`BUILDS_KEPT`] builds (LIFE-86).
    /// `NotFound("document")`.
    async fn queue_rebuild(
        &self,
        document_id: Uuid,
        build: &NewBuild,
        after: &str,
        after_plan_revision: i64,
        now_ms: UnixMillis,
    ) -> StoreResult<Result<Build, QueueRefusal>>;
    /// Lands the launching rebuild `id` (LIFE-14), in one commit: `definition` (its tasks as its
    /// coding agent reported them) joins the graph as a new version, approved and verified,
    /// drafted against the rebuild's after-source; every earlier approved or draft version is
    /// superseded; the after-source becomes the built source; a run of that version, ended
    /// verified with `progress` (the tasks done, their pull requests), records the report; the
    /// rebuild is landed with that version and run ([`rebuild_run_id`]). `NotFound("build")`.
    async fn land_rebuild(
        &self,
        id: Uuid,
        definition: &str,
        progress: &str,
        now_ms: UnixMillis,
    ) -> StoreResult<Landing>;
    /// Fails every launching build and rebuild `reach` covers picked up at or before
    /// `cutoff_ms` with [`EXPIRED`] (RULINGS LIFE-87): the builds failed.
    async fn expire_builds(
        &self,
        reach: Reach,
        cutoff_ms: UnixMillis,
        now_ms: UnixMillis,
    ) -> StoreResult<Vec<Build>>;
    /// The launching builds and rebuilds picked up at or before `cutoff_ms`, which
    /// [`BuildStore::expire_builds`] would fail now (oldest first): under document leases, where
    /// each process expires those of the documents it serves.
    async fn silent_builds(&self, cutoff_ms: UnixMillis) -> StoreResult<Vec<Build>>;
    /// The live runs that a browser build's claim started and that took no report since
    /// `cutoff_ms` (their last report, or claim, at or before it).
    async fn silent_build_runs(&self, cutoff_ms: UnixMillis)
        -> StoreResult<Vec<ImplementationRun>>;
}
