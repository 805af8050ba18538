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

use crate::{GraphChange, GraphRefusal, GraphVersion, StoreResult, UnixMillis};

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildState {
    /// Approved and waiting for its machine's connector.
    Queued,
    /// The connector picked it up and is starting its session; its claim has not come yet.
    Launching,
    /// Its run claimed the version it queued.
    Claimed,
    /// It ended before its claim (the connector could not start it, or its machine went).
    Failed,
}

impl BuildState {
    /// The word stored.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildState::Queued => "queued",
            BuildState::Launching => "launching",
            BuildState::Claimed => "claimed",
            BuildState::Failed => "failed",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "queued" => BuildState::Queued,
            "launching" => BuildState::Launching,
            "claimed" => BuildState::Claimed,
            "failed" => BuildState::Failed,
            _ => return None,
        })
    }

    /// Queued or launching: it freezes the plan until its claim (LIFE-64).
    pub fn is_pending(self) -> bool {
        matches!(self, BuildState::Queued | BuildState::Launching)
    }
}

/// A browser build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    pub id: Uuid,
    pub document_id: Uuid,
    /// The graph version it builds (the one the press approved).
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
        graph_version,
        machine_id: build.machine_id,
        requested_by_account_id: build.requested_by_account_id,
        requested_by: build.requested_by.clone(),
        checkout: build.checkout.clone(),
        state: BuildState::Queued,
        reason: None,
        run_id: None,
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
}
