//! Living builds (`LIVE_BUILD=on`, implementation-lifecycle.md "Living documents"): once a build
//! delivered, a writer's edits are rebuilt by themselves onto the same pull requests when editing
//! settles — 30 s without a writer's edit (RULINGS LIFE-16) — on the live build's own user's
//! machine, and only one whose connector says its owner allowed automatic builds there
//! (LIFE-78, LIFE-79). Without that consent, or with the machine offline, the plan stays out of
//! sync until someone presses Build.
//!
//! Owns: noticing writers' committed edits (every edit the content layer commits needs write
//! access: a writer's socket update, a Planner's batch in a turn a writer started, MCP's
//! `update_document` — LIFE-80), the per-document settle timer on the server's clock, and which
//! machine an automatic rebuild goes to.
//! Does not own: the rebuild itself and its refusals ([`Rebuilds::auto`]), the consent and
//! presence of connectors ([`Builds::allows_auto_build`]), or the records.
//!
//! Invariants: at most one timer per document, however many edits; an edit landing while a
//! check runs starts the count again; a rebuild pending when editing settles is waited out (the
//! check comes again one settle period later), so the edits are not left unbuilt.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use uuid::Uuid;

use crate::builds::Builds;
use crate::rebuilds::Rebuilds;
use crate::runtime::{SharedClock, Shutdown};
use crate::store::{QueueRefusal, Store};

/// How long editing must be quiet to count as settled (RULINGS LIFE-16).
pub const SETTLE_MS: i64 = 30_000;

pub struct LiveBuildsDeps {
    pub store: Arc<dyn Store>,
    pub builds: Arc<Builds>,
    pub rebuilds: Arc<Rebuilds>,
    pub clock: SharedClock,
    pub shutdown: Shutdown,
}

pub struct LiveBuilds {
    deps: LiveBuildsDeps,
    /// Document id → when the check of its edits is due (a writer's last edit + [`SETTLE_MS`]),
    /// while its timer runs.
    due: Mutex<BTreeMap<Uuid, i64>>,
}

impl LiveBuilds {
    pub fn new(deps: LiveBuildsDeps) -> Arc<Self> {
        Arc::new(LiveBuilds {
            deps,
            due: Mutex::default(),
        })
    }

    /// When the automatic rebuild check of `document` is due, while one waits (the clock the
    /// Build view shows instead of Build, LIFE-15).
    pub fn due(&self, document: Uuid) -> Option<i64> {
        self.lock().get(&document).copied()
    }

    /// `document` is served by another process now (`PROCESSES=many`): its settle timer here
    /// ends at its next wake without checking anything.
    pub fn moved(&self, document: Uuid) {
        self.lock().remove(&document);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, i64>> {
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `document`'s settle period from now, starting its timer if none runs.
    fn count_from_now(self: &Arc<Self>, document: Uuid) {
        let due = self.deps.clock.now_ms() + SETTLE_MS;
        let start = self.lock().insert(document, due).is_none();
        if start {
            let this = self.clone();
            let stopping = self.deps.shutdown.stopping();
            self.deps.shutdown.spawn(async move {
                tokio::select! {
                    () = this.settle(document) => {}
                    () = stopping => {}
                }
            });
        }
    }

    /// Waits until `document`'s edits have settled, then checks it once.
    async fn settle(self: Arc<Self>, document: Uuid) {
        loop {
            let Some(due) = self.due(document) else {
                return;
            };
            let now = self.deps.clock.now_ms();
            if now < due {
                let wait = u64::try_from(due - now).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                continue;
            }
            {
                let mut due_now = self.lock();
                // An edit landed while this one slept: its own count goes on.
                if due_now.get(&document) != Some(&due) {
                    continue;
                }
                due_now.remove(&document);
            }
            match self.check(document).await {
                Ok(true) => self.count_from_now(document),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(document = %document, error = ?e, "an automatic rebuild check failed; the next edit tries again");
                }
            }
            return;
        }
    }

    /// The check once editing settled: queues the rebuild on the live build's own user's
    /// consenting machine. `Ok(true)` when a build or run of the document is pending, so the
    /// check should come again later.
    async fn check(&self, document: Uuid) -> Result<bool, crate::error::ApiError> {
        let store = &self.deps.store;
        let read = crate::error::ApiError::store;
        let Some(doc) = store.document(document).await.map_err(read)? else {
            return Ok(false);
        };
        if doc.archived {
            return Ok(false);
        }
        // Live only once a build delivered; the live build's user is its builder.
        let Some(built) = store.built_source(doc.id).await.map_err(read)? else {
            return Ok(false);
        };
        let Some(builder) = store.build(built.build_id).await.map_err(read)? else {
            return Ok(false);
        };
        let machine = store.machine(builder.machine_id).await.map_err(read)?;
        let consenting = machine.filter(|m| {
            m.owner_account_id == builder.requested_by_account_id
                && self.deps.builds.allows_auto_build(m.id)
        });
        let Some(machine) = consenting else {
            tracing::info!(document = %doc.id, "editing settled, but the builder's machine is offline or does not allow automatic builds: the plan stays out of sync until someone presses Build");
            return Ok(false);
        };
        match self.deps.rebuilds.auto(&doc, &builder, machine.id).await? {
            Ok(_) => Ok(false),
            Err(QueueRefusal::Pending { .. } | QueueRefusal::Locked { .. }) => Ok(true),
            Err(QueueRefusal::NothingBuilt | QueueRefusal::NotApproved) => Ok(false),
        }
    }
}

impl crate::content::ContentWatch for LiveBuilds {
    fn opened(self: Arc<Self>, _document: Uuid) {}

    fn edited(self: Arc<Self>, document: Uuid) {
        self.count_from_now(document);
    }
}
