//! Default machine (ATM-37, docs/connector.md): a document nobody chose a machine for runs its
//! Planner on the favourite machine of a writer who opens it, and is let go again once nobody
//! uses it.
//!
//! Owns: choosing — when a writer opens the room of a document whose root has no machine, and
//! that writer has a favourite they may use, the root is stored as on that machine, marked as
//! Default machine's choice (a person's choice always stands; a later viewer's favourite does not
//! move it); counting the rooms open on each root in this process; and letting go — a sweep on
//! the server clock's quarter-minutes finds each of Default machine's documents used (a room
//! open, or its Planner replying, waiting on a question, keeping a live or paused run, or held
//! disconnected with kept work) or not, and lets one go when it has been found unused for
//! `DEFAULT_MACHINE_IDLE_MS` from the first sweep that found it so. Letting go ends what the
//! machine held of it, as a person moving it to none would.
//! Does not own: the machines, favourites and choices themselves ([`Machines`] and the store),
//! the starting and patience words ([`Planners`]), or what a Planner is doing (turns, questions,
//! runs, holds — asked of their owners).
//!
//! Invariants: Default machine never replaces or removes a person's choice; a document whose
//! Planner has work — kept for a disconnected client included — is never let go, viewers or not
//! (so no idle period ends a disconnected hold, AO-13).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use uuid::Uuid;

use crate::machines::Machines;
use crate::planner::{Planners, PresenceState};
use crate::questions::Questions;
use crate::runtime::SharedClock;
use crate::store::{Document, MachineChoice, Store, StoreError, UnixMillis};
use crate::turns::Turns;

/// Why the link of a machine Default machine let go is closed.
const LET_GO: &str = "Nobody has used this document for a while, so its Planner on the default machine was stopped; opening the document starts it again.";

/// What Default machine reads of the rest of the server.
pub struct DefaultMachineDeps {
    pub store: Arc<dyn Store>,
    pub machines: Arc<Machines>,
    pub planners: Arc<Planners>,
    pub turns: Arc<Turns>,
    pub questions: Arc<Questions>,
    pub clock: SharedClock,
    /// `DEFAULT_MACHINE_IDLE_MS`.
    pub idle_ms: u64,
    /// Which documents this process serves: under `PROCESSES=many` a document is let go by the
    /// process serving it, where its rooms are counted.
    pub serving: Arc<crate::serving::Serving>,
}

#[derive(Default)]
struct Table {
    /// Rooms open on each root document in this process (a child's room counts for its root).
    viewers: BTreeMap<Uuid, usize>,
    /// Default machine's documents found unused, since the first sweep that found them so.
    idle_since: BTreeMap<Uuid, UnixMillis>,
}

pub struct DefaultMachine {
    deps: DefaultMachineDeps,
    table: Arc<Mutex<Table>>,
}

/// A room open on a document: it counts as a viewer of the document's root until dropped.
pub struct Viewing {
    root: Uuid,
    table: Arc<Mutex<Table>>,
}

impl Drop for Viewing {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = table.viewers.get_mut(&self.root) {
            *n -= 1;
            if *n == 0 {
                table.viewers.remove(&self.root);
            }
        }
    }
}

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Default machine's documents found used or within their idle period.
    pub kept: usize,
    /// Documents let go.
    pub let_go: usize,
}

impl DefaultMachine {
    pub fn new(deps: DefaultMachineDeps) -> Self {
        DefaultMachine {
            deps,
            table: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A room opened on `doc` by `account_id` (`login`): it counts as a viewer while the
    /// returned guard lives; a writer whose favourite machine they may use puts a root nobody
    /// chose a machine for on that machine. A storage failure is logged and chooses nothing (the
    /// room opens all the same).
    pub async fn opened(
        &self,
        doc: &Document,
        account_id: Uuid,
        login: &str,
        can_write: bool,
    ) -> Viewing {
        let root = doc.parent_id.unwrap_or(doc.id);
        {
            let mut table = self.lock();
            *table.viewers.entry(root).or_default() += 1;
            table.idle_since.remove(&root);
        }
        let viewing = Viewing {
            root,
            table: self.table.clone(),
        };
        if can_write {
            if let Err(e) = self.choose(root, account_id, login).await {
                tracing::warn!(document = %root, error = %e, "Default machine could not choose a machine for the document");
            }
        }
        viewing
    }

    async fn choose(&self, root: Uuid, account_id: Uuid, login: &str) -> Result<(), StoreError> {
        let store = &self.deps.store;
        if store.machine_choice(root).await?.is_some() {
            return Ok(());
        }
        let Some(favourite) = store.favourite_machine(account_id).await? else {
            return Ok(());
        };
        // Only a machine the writer may still use: their own, or one shared with them.
        let Some(machine) = store
            .machines_of(account_id)
            .await?
            .into_iter()
            .find(|m| m.id == favourite)
        else {
            return Ok(());
        };
        let choice = MachineChoice {
            document_id: root,
            machine_id: machine.id,
            chosen_by_account_id: account_id,
            chosen_by: login.to_owned(),
            chosen_at_ms: self.deps.clock.now_ms(),
            by_default: true,
        };
        let (_, chosen) = match store.choose_default_machine(&choice).await {
            Ok(done) => done,
            // Unpaired meanwhile: nothing to choose.
            Err(StoreError::NotFound("machine")) => return Ok(()),
            Err(e) => return Err(e),
        };
        if chosen {
            tracing::info!(document = %root, machine = %machine.id, by = login, "Default machine chose the writer's favourite machine for the document");
            // Not a person's move: the starting word names no machine (RULINGS PRES-05).
            self.deps.planners.machine_asked(
                root,
                machine.id,
                &machine.owner_login,
                machine.release.as_deref(),
                false,
            );
        }
        Ok(())
    }

    /// Whether `doc` is used now: a room open on it, or its Planner with work to do.
    async fn used(&self, doc: Uuid) -> bool {
        if self.lock().viewers.contains_key(&doc) {
            return true;
        }
        if self.deps.turns.is_running(doc) || self.deps.questions.waits_in(doc) {
            return true;
        }
        if self.deps.planners.presence(doc).state == PresenceState::Disconnected {
            return true;
        }
        match self.deps.store.runs(doc).await {
            Ok(runs) => runs.iter().any(|r| r.is_live()),
            // Unknown counts as used: a Planner is kept rather than cut short.
            Err(_) => true,
        }
    }

    /// One sweep: each of Default machine's documents found unused for the idle period since
    /// the first sweep that found it so is let go.
    pub async fn sweep(&self) -> Result<Swept, StoreError> {
        let now = self.deps.clock.now_ms();
        let idle_ms = i64::try_from(self.deps.idle_ms).unwrap_or(i64::MAX);
        let choices = self.deps.store.default_machine_choices().await?;
        let mut swept = Swept::default();
        let mut due = Vec::new();
        for choice in &choices {
            let doc = choice.document_id;
            if self.used(doc).await {
                self.lock().idle_since.remove(&doc);
                swept.kept += 1;
                continue;
            }
            let since = *self.lock().idle_since.entry(doc).or_insert(now);
            if now.saturating_sub(since) >= idle_ms {
                due.push(choice);
            } else {
                swept.kept += 1;
            }
        }
        {
            // Documents no longer on Default machine are not counted any more.
            let mut table = self.lock();
            table
                .idle_since
                .retain(|doc, _| choices.iter().any(|c| c.document_id == *doc));
        }
        for choice in due {
            let doc = choice.document_id;
            self.lock().idle_since.remove(&doc);
            // Under `PROCESSES=many` its rooms may be open on the process serving it, which
            // counts them: that process lets it go. One nobody serves is taken here first, as
            // a request for it would be, and looked at again once its holds are rebuilt.
            if self.deps.serving.leases().is_some() {
                let here = match self.deps.serving.serve(doc).await {
                    Ok(crate::serving::Serve::Here) => !self.used(doc).await,
                    Ok(crate::serving::Serve::Elsewhere { .. }) => false,
                    Err(e) => {
                        tracing::warn!(document = %doc, error = %e, "could not learn which process serves a Default machine document; the next sweep looks again");
                        false
                    }
                };
                if !here {
                    swept.kept += 1;
                    continue;
                }
            }
            if self
                .deps
                .store
                .withdraw_default_machine(doc, choice.machine_id)
                .await?
            {
                tracing::info!(document = %doc, machine = %choice.machine_id, idle_ms, "Default machine let an unused document go");
                self.deps
                    .machines
                    .moved_off(doc, choice.machine_id, LET_GO)
                    .await;
                self.deps.planners.machine_left(doc);
                swept.let_go += 1;
            }
        }
        Ok(swept)
    }
}
