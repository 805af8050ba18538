//! Browser builds (docs/connector.md, RULINGS LIFE-05): Build plan's press approves exactly the
//! drafted graph and queues its build on the presser's machine in one commit (LIFE-05, LIFE-03);
//! the machine's connector lists its queued builds, picks one up once — never handed out again
//! (LIFE-48) — and claims the graph through `/mcp` (LIFE-06), or says it could not start it.
//!
//! Owns: which machine a press queues on (the one the presser names, else their favourite; one
//! they may use), the connector's build routes' rules (its own machine's builds only; the owner
//! must still be able to push to the repository at pick-up), and telling the rooms of each
//! committed change (`plan:implementation`).
//! Does not own: the graph's rules and the approval's refusals ([`Lifecycle`]), the records
//! (the store), the claim itself (the MCP lifecycle tools), or the plan's freeze while a build is
//! pending ([`crate::graphs::Graphs::held`]).

use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::access::{Access, Caller};
use crate::error::ApiError;
use crate::identity::sign_ins::sha256_hex;
use crate::lifecycle::{build_json, Lifecycle, Refusal, BUILD_SILENCE_MS};
use crate::machines::Machines;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{Build, BuildState, Document, NewBuild, QueueRefusal, Reach, Store};

/// What every build bridge token starts with, so `/mcp` tells it from a GitHub token.
pub const BRIDGE_PREFIX: &str = "chopin_build_";

/// The longest checkout a press may name, in characters.
pub const CHECKOUT_MAX_CHARS: usize = 1024;
/// The longest reason a connector gives for a build it could not start, in characters.
pub const REASON_MAX_CHARS: usize = 300;

pub struct BuildsDeps {
    pub store: Arc<dyn Store>,
    pub machines: Arc<Machines>,
    pub lifecycle: Arc<Lifecycle>,
    pub news: Arc<crate::graphs::Graphs>,
    pub access: Arc<Access>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    /// Which documents this process serves: under `PROCESSES=many` the sweep reaches only
    /// those.
    pub serving: Arc<crate::serving::Serving>,
}

pub struct Builds {
    deps: BuildsDeps,
    /// Machine id → its connector's latest poll of its builds: when, and whether it says its
    /// owner allowed automatic builds on it (LIFE-79). In memory only, like a connection.
    polls: std::sync::Mutex<std::collections::BTreeMap<Uuid, Poll>>,
}

/// A connector's poll of its builds.
#[derive(Debug, Clone, Copy)]
struct Poll {
    at_ms: i64,
    auto_build: bool,
}

/// A machine whose connector polled its builds within this long is online (LIFE-83), and its
/// consent to automatic builds holds (LIFE-79).
pub const CONNECTOR_ONLINE_MS: i64 = 60_000;

/// Under `PROCESSES=many`, how often each process reads back the connectors' polls recorded by
/// the others: a machine is online everywhere at most this long after its connector's poll.
pub const POLLS_READ_EVERY_MS: u64 = 2_000;

fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message)
}

fn build_not_found(id: Uuid) -> ApiError {
    refused(
        StatusCode::NOT_FOUND,
        "build-not-found",
        format!("No build {id} is queued for this machine."),
    )
}

/// Why a build or rebuild was not queued, as the person is told.
pub(crate) fn queue_refused(refusal: &QueueRefusal) -> ApiError {
    match refusal {
        QueueRefusal::NotApproved => refused(
            StatusCode::CONFLICT,
            "no-approved-graph",
            "Only an approved version that no run holds and nobody built yet is built again; press Build plan for a draft.",
        ),
        QueueRefusal::Pending { build } => refused(
            StatusCode::CONFLICT,
            "build-pending",
            format!("Build {build} is queued or starting already."),
        ),
        QueueRefusal::NothingBuilt => refused(
            StatusCode::CONFLICT,
            "nothing-built",
            "No build of this plan has delivered yet, so there is nothing to rebuild onto: press Build plan.",
        ),
        QueueRefusal::Locked { graph_version } => refused(
            StatusCode::CONFLICT,
            "implementation-active",
            format!("An implementation run holds version {graph_version} of this plan's tasks; wait until it ends."),
        ),
    }
}

/// Trimmed, control characters dropped, at most `max` characters; `None` when nothing is left.
pub(crate) fn cleaned(text: Option<&str>, max: usize) -> Option<String> {
    let kept = crate::machines::tidy(text?, max);
    (!kept.is_empty()).then_some(kept)
}

impl Builds {
    pub fn new(deps: BuildsDeps) -> Self {
        Builds {
            deps,
            polls: std::sync::Mutex::default(),
        }
    }

    /// Whether `machine`'s connector polled its builds within [`CONNECTOR_ONLINE_MS`].
    pub fn online(&self, machine: Uuid) -> bool {
        self.poll(machine).is_some()
    }

    /// Whether `machine`'s connector is online and says its owner allowed automatic builds on
    /// it (LIFE-79).
    pub fn allows_auto_build(&self, machine: Uuid) -> bool {
        self.poll(machine).is_some_and(|p| p.auto_build)
    }

    fn poll(&self, machine: Uuid) -> Option<Poll> {
        let now = self.deps.clock.now_ms();
        let polls = self
            .polls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        polls
            .get(&machine)
            .copied()
            .filter(|p| now - p.at_ms < CONNECTOR_ONLINE_MS)
    }

    /// A poll of `machine`'s connector now. Under `PROCESSES=many` it is recorded in the store
    /// too, for the other processes to read back ([`Builds::read_polls`]).
    async fn polled(&self, machine: Uuid, auto_build: bool) {
        let now = self.deps.clock.now_ms();
        self.keep_poll(machine, now, auto_build);
        if self.deps.serving.leases().is_some() {
            let poll = crate::store::ConnectorPoll {
                machine_id: machine,
                polled_at_ms: now,
                auto_build,
            };
            if let Err(e) = self.deps.store.record_connector_poll(&poll).await {
                tracing::warn!(%machine, error = %e, "could not record a connector's poll; the other processes learn of it at its next poll");
            }
        }
    }

    /// Keeps `machine`'s poll at `at_ms` unless a later one is kept.
    fn keep_poll(&self, machine: Uuid, at_ms: i64, auto_build: bool) {
        let now = self.deps.clock.now_ms();
        let mut polls = self
            .polls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded by the machines paired: forget the ones long gone quiet.
        polls.retain(|_, p| now - p.at_ms < CONNECTOR_ONLINE_MS);
        if polls.get(&machine).is_some_and(|p| p.at_ms > at_ms) {
            return;
        }
        polls.insert(machine, Poll { at_ms, auto_build });
    }

    /// Under `PROCESSES=many`: the connectors' polls any process recorded within
    /// [`CONNECTOR_ONLINE_MS`], kept here too, so a machine whose connector polls another
    /// process is online here as well (read every [`POLLS_READ_EVERY_MS`]).
    pub async fn read_polls(&self) -> Result<(), crate::store::StoreError> {
        let since = self.deps.clock.now_ms() - CONNECTOR_ONLINE_MS;
        for poll in self.deps.store.connector_polls_since(since).await? {
            self.keep_poll(poll.machine_id, poll.polled_at_ms, poll.auto_build);
        }
        Ok(())
    }

    /// Build plan's press: approves exactly the draft (`graph_version`, `graph_revision`) and,
    /// when the presser names a machine they may use or has a favourite, queues its build there
    /// with the checkout they picked, in one commit. With no machine it only approves (a coding
    /// agent may still claim through `/mcp`). The approved version with `build` (or `null`), or
    /// the approval's refusal.
    pub async fn press(
        &self,
        caller: &Caller,
        doc: &Document,
        graph_version: i64,
        graph_revision: i64,
        machine_id: Option<Uuid>,
        checkout: Option<&str>,
    ) -> Result<Result<Value, Refusal>, ApiError> {
        // A build still waiting or starting holds its version: approving another now would
        // supersede it under the build, whose claim could then never land.
        if let Some(crate::graphs::Held::Build { build, .. }) =
            self.deps.news.held(doc.id).await.map_err(ApiError::store)?
        {
            return Err(refused(
                StatusCode::CONFLICT,
                "build-pending",
                format!("Build {build} of this plan is queued or starting; wait until its coding agent claims it or it fails."),
            ));
        }
        let Some(machine) = self.machine_for(caller, machine_id).await? else {
            let approved = self
                .deps
                .lifecycle
                .approve(doc, graph_version, graph_revision)
                .await
                .map_err(ApiError::store)?;
            return Ok(approved.map(|mut v| {
                v["build"] = Value::Null;
                v
            }));
        };
        let build = NewBuild {
            id: self.deps.entropy.uuid(),
            machine_id: machine.id,
            requested_by_account_id: caller.account_id,
            requested_by: caller.login.clone(),
            checkout: cleaned(checkout, CHECKOUT_MAX_CHARS),
        };
        let queued = self
            .deps
            .lifecycle
            .approve_and_queue(doc, graph_version, graph_revision, &build)
            .await
            .map_err(ApiError::store)?;
        if let Ok(v) = &queued {
            tracing::info!(document = %doc.id, machine = %machine.id, build = %v["build"]["buildId"], "a build was queued on a machine");
        }
        Ok(queued)
    }

    /// The machine a press or a retry builds on: the one named (which the caller must be able
    /// to use), else the caller's favourite if they may still use it, else none.
    pub(crate) async fn machine_for(
        &self,
        caller: &Caller,
        named: Option<Uuid>,
    ) -> Result<Option<crate::store::Machine>, ApiError> {
        if let Some(id) = named {
            return self.deps.machines.usable(caller, id).await.map(Some);
        }
        let favourite = self
            .deps
            .store
            .favourite_machine(caller.account_id)
            .await
            .map_err(ApiError::store)?;
        Ok(match favourite {
            Some(id) => self.deps.machines.usable(caller, id).await.ok(),
            None => None,
        })
    }

    /// `POST /api/channels/{channel}/implementation/retry`: a person builds the approved version
    /// again after its build failed before any claim (LIFE-48), on the machine they name or
    /// their favourite. Refused `409 no-approved-graph` when the latest version is a draft or
    /// held by a run, `409 build-pending` while another build is queued or starting, and `409
    /// no-machine` with no machine to build on.
    pub async fn retry(
        &self,
        caller: &Caller,
        doc: &Document,
        machine_id: Option<Uuid>,
        checkout: Option<&str>,
    ) -> Result<Value, ApiError> {
        let Some(machine) = self.machine_for(caller, machine_id).await? else {
            return Err(refused(
                StatusCode::CONFLICT,
                "no-machine",
                "Name a machine to build on, or make one your favourite.",
            ));
        };
        let build = NewBuild {
            id: self.deps.entropy.uuid(),
            machine_id: machine.id,
            requested_by_account_id: caller.account_id,
            requested_by: caller.login.clone(),
            checkout: cleaned(checkout, CHECKOUT_MAX_CHARS),
        };
        match self
            .deps
            .store
            .queue_build(doc.id, &build, self.deps.clock.now_ms())
            .await
            .map_err(ApiError::store)?
        {
            Ok(queued) => {
                tracing::info!(document = %doc.id, machine = %machine.id, build = %queued.id, "a build was queued again");
                self.deps.news.changed(doc.id).await;
                Ok(json!({ "build": build_json(&queued) }))
            }
            Err(refusal) => Err(queue_refused(&refusal)),
        }
    }

    /// `GET /api/connector/machines/{id}/builds`: the builds queued for the connector's machine,
    /// oldest first. The poll marks the machine online, with the consent to automatic builds
    /// it carries (LIFE-79, LIFE-83).
    pub async fn queued(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        auto_build: bool,
    ) -> Result<Value, ApiError> {
        let machine = self
            .deps
            .machines
            .connector(caller, machine_id, None)
            .await?;
        self.polled(machine.id, auto_build).await;
        let builds = self
            .deps
            .store
            .machine_builds(machine.id)
            .await
            .map_err(ApiError::store)?;
        let mut shown = Vec::with_capacity(builds.len());
        for build in &builds {
            let Some(doc) = self
                .deps
                .store
                .document(build.document_id)
                .await
                .map_err(ApiError::store)?
            else {
                continue;
            };
            shown.push(self.for_connector(build, &doc).await?);
        }
        Ok(json!({ "builds": shown }))
    }

    /// A build as its connector is told it: where, what to claim.
    async fn for_connector(&self, build: &Build, doc: &Document) -> Result<Value, ApiError> {
        let versions = self
            .deps
            .store
            .graph_versions(doc.id)
            .await
            .map_err(ApiError::store)?;
        let version = versions
            .iter()
            .find(|v| v.counters.graph_version == build.graph_version);
        let mut shown = build_json(build);
        shown["path"] = json!(format!(
            "/documents/{}/{}/{}",
            doc.repo_owner, doc.repo_name, doc.slug
        ));
        shown["repository"] = json!(format!("{}/{}", doc.repo_owner, doc.repo_name));
        shown["claim"] = match version {
            // A rebuild claims nothing: its bridge reads and reports it (read_rebuild).
            _ if build.kind == crate::store::BuildKind::Rebuild => Value::Null,
            Some(v) => json!({
                "documentId": doc.id,
                "planRevision": v.counters.plan_revision,
                "graphVersion": v.counters.graph_version,
                "graphRevision": v.counters.graph_revision,
            }),
            None => Value::Null,
        };
        Ok(shown)
    }

    /// The connector's own machine's build `build_id`.
    async fn machines_build(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        build_id: Uuid,
    ) -> Result<(crate::store::Machine, Build), ApiError> {
        let machine = self
            .deps
            .machines
            .connector(caller, machine_id, None)
            .await?;
        let build = self
            .deps
            .store
            .build(build_id)
            .await
            .map_err(ApiError::store)?
            .filter(|b| b.machine_id == machine.id)
            .ok_or_else(|| build_not_found(build_id))?;
        Ok((machine, build))
    }

    /// `POST /api/connector/builds/{id}/pickup`: the connector takes a queued build to start it.
    /// Handed out once (LIFE-48): a second pick-up is `409 build-picked-up`. The machine's owner
    /// must still be able to push to the repository (checked with the machine's token). Answers
    /// the build with what to claim.
    pub async fn pick_up(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        build_id: Uuid,
    ) -> Result<Value, ApiError> {
        let (machine, build) = self.machines_build(caller, machine_id, build_id).await?;
        let doc = self
            .deps
            .store
            .document(build.document_id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(ApiError::not_found)?;
        self.deps
            .machines
            .owner_can_push(caller, &machine, &doc, "a build")
            .await?;
        let bridge = format!("{BRIDGE_PREFIX}{}", self.deps.entropy.token_hex(32));
        let Some(picked) = self
            .deps
            .store
            .pick_up_build(build.id, &sha256_hex(&bridge), self.deps.clock.now_ms())
            .await
            .map_err(ApiError::store)?
        else {
            return Err(refused(
                StatusCode::CONFLICT,
                "build-picked-up",
                format!("This build is {} already: a build is handed out once and never replayed; a person presses Retry in Build to ask again.", build.state.as_str()),
            ));
        };
        tracing::info!(build = %picked.id, machine = %machine.id, document = %doc.id, "a build was picked up");
        self.deps.news.changed(doc.id).await;
        let mut shown = self.for_connector(&picked, &doc).await?;
        // Shown this once; the server keeps its digest only.
        shown["bridge"] = json!(bridge);
        Ok(shown)
    }

    /// The build a `/mcp` bearer `chopin_build_…` is the bridge of, with the caller it acts as:
    /// the machine's owner, with the machine's own GitHub authorization. Refused `401
    /// bad-credentials` when unknown, when its build failed, or when the machine is gone.
    pub async fn bridge(&self, token: &str) -> Result<(Caller, Build), ApiError> {
        let unknown = || {
            refused(
                StatusCode::UNAUTHORIZED,
                "bad-credentials",
                "This build bridge is not valid: unknown, or its build failed or its machine was revoked.",
            )
        };
        let build = self
            .deps
            .store
            .build_by_bridge(&sha256_hex(token))
            .await
            .map_err(ApiError::store)?
            .filter(|b| {
                matches!(
                    b.state,
                    BuildState::Launching | BuildState::Claimed | BuildState::Landed
                )
            })
            .ok_or_else(unknown)?;
        let token = self
            .deps
            .machines
            .machine_token(build.machine_id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(unknown)?;
        // The machine's token goes through the same door as any bearer: GitHub says whose it
        // is, and this instance must still admit that account.
        let mut headers = http::HeaderMap::new();
        let mut value = http::HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| unknown())?;
        value.set_sensitive(true);
        headers.insert(http::header::AUTHORIZATION, value);
        let caller = self.deps.access.caller(&headers, false).await?;
        Ok((caller, build))
    }

    /// The sweep (RULINGS LIFE-87, LIFE-82): a build picked up and not claimed within
    /// [`BUILD_SILENCE_MS`] fails `expired`, and a browser build's run with no lifecycle report for
    /// as long is stopped; either waits for a person's Retry. Runs on the 15-s sweep.
    /// Under `PROCESSES=many` each process sweeps the documents it serves, one at a time.
    pub async fn sweep(&self) -> Result<(), crate::store::StoreError> {
        let now = self.deps.clock.now_ms();
        let cutoff = now - BUILD_SILENCE_MS;
        let many = self.deps.serving.leases().is_some();
        let expired = match many {
            false => {
                self.deps
                    .store
                    .expire_builds(Reach::Every, cutoff, now)
                    .await?
            }
            true => {
                let mut documents: Vec<Uuid> = Vec::new();
                for build in self.deps.store.silent_builds(cutoff).await? {
                    if !documents.contains(&build.document_id)
                        && self.deps.serving.serves(build.document_id).await
                    {
                        documents.push(build.document_id);
                    }
                }
                let mut expired = Vec::new();
                for document in documents {
                    expired.extend(
                        self.deps
                            .store
                            .expire_builds(Reach::Document(document), cutoff, now)
                            .await?,
                    );
                }
                expired
            }
        };
        for build in expired {
            tracing::info!(build = %build.id, document = %build.document_id, kind = build.kind.as_str(), "a build picked up and silent for 30 minutes failed");
            self.deps.news.changed(build.document_id).await;
        }
        for run in self.deps.store.silent_build_runs(cutoff).await? {
            if many && !self.deps.serving.serves(run.document_id).await {
                continue;
            }
            if self.deps.lifecycle.stop_silent(&run).await? {
                tracing::info!(run = %run.run_id, document = %run.document_id, "a build's run silent for 30 minutes was stopped");
            }
        }
        Ok(())
    }

    /// `POST /api/connector/builds/{id}/failed`: the connector could not start a build it picked
    /// up (or will not start a queued one): it fails with `reason`, before any claim; after its
    /// claim the run's own reports say how it went (`409 build-claimed`).
    pub async fn failed(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        build_id: Uuid,
        reason: Option<&str>,
    ) -> Result<Value, ApiError> {
        let (_, build) = self.machines_build(caller, machine_id, build_id).await?;
        let reason = cleaned(reason, REASON_MAX_CHARS)
            .unwrap_or_else(|| "The machine could not start the build.".to_owned());
        let Some(failed) = self
            .deps
            .store
            .fail_build(build.id, &reason, self.deps.clock.now_ms())
            .await
            .map_err(ApiError::store)?
        else {
            return Err(refused(
                StatusCode::CONFLICT,
                "build-claimed",
                format!(
                    "This build is {} already; only a build not yet claimed fails this way.",
                    build.state.as_str()
                ),
            ));
        };
        self.deps.news.changed(failed.document_id).await;
        Ok(json!({ "build": build_json(&failed) }))
    }
}
