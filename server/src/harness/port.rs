//! The harness's way to an attached client, as a port the Planner's link table implements.
//!
//! Owns: [`AgentLinks`] (find the link attached to a document), [`LinkHandle`] (commands to that
//! link's task, the features it accepted and its [`LinkAccess`] check), [`LinkCommand`] (send a
//! frame; route a session's or turn's frames here; stop routing) and [`LinkAccess`] (the attached
//! account's admission and write access, asked before every session and turn, AC-18).
//! Does not own: the link itself (the agent socket, in the transport layer) or who holds a
//! document (the planner table, which implements [`AgentLinks`]). This module imports nothing above the
//! harness layer, so the remote adapter never reaches into the Planner table.

use std::sync::Arc;

use async_trait::async_trait;
use chopin_protocol::agent::{ClientMessage, Feature, InputResult, ServerMessage};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use uuid::Uuid;

/// Commands a link's task may have waiting: it takes each at once (queueing a frame never
/// waits), so a full queue means the link is stuck, and the command counts as undeliverable.
pub const COMMAND_BACKLOG: usize = 256;
/// Client frames for one session or turn that may wait for it to read them; a client that sends
/// more is at fault (`out-of-order`, 1008).
pub const ROUTE_BACKLOG: usize = 1024;

/// What the harness may ask of an attached link's task.
#[derive(Debug)]
pub enum LinkCommand {
    /// Send this frame to the client.
    Send(Box<ServerMessage>),
    /// Route the client's frames for `key` (`session:<id>` or `turn:<id>`) to `to`.
    Route {
        key: String,
        to: mpsc::Sender<ClientMessage>,
    },
    /// Stop routing `key`.
    Unroute { key: String },
}

/// The harness's way to an attached client: commands to its link's task, the features the link
/// accepted, and the check of its account's access.
#[derive(Clone)]
pub struct LinkHandle {
    pub commands: mpsc::Sender<LinkCommand>,
    pub features: Vec<Feature>,
    /// Asked before every session and every turn the link starts (AC-18).
    pub access: Arc<dyn LinkAccess>,
    /// What the link's client said it offers (`catalog`), held with the link (CMD-08).
    pub catalog: Arc<LinkCatalog>,
}

/// The most models and the most commands kept of one `catalog` report; the rest are dropped
/// (the composer's pickers and every `chat:model` frame stay bounded).
pub const CATALOG_ENTRIES_MAX: usize = 256;
/// The longest model id, command name, kind or level kept, in bytes.
pub const CATALOG_ID_MAX_BYTES: usize = 100;
/// The longest name or description kept, in characters (longer ones are cut, ending `…`).
pub const CATALOG_TEXT_MAX_CHARS: usize = 300;
/// The most reasoning levels (and input types) kept of one model.
pub const CATALOG_LEVELS_MAX: usize = 16;

/// `text` cut to [`CATALOG_TEXT_MAX_CHARS`].
fn cut(text: &str) -> String {
    if text.chars().count() <= CATALOG_TEXT_MAX_CHARS {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(CATALOG_TEXT_MAX_CHARS - 1).collect();
    short.push('…');
    short
}

/// What an attached link's client has said it offers: held with the link, so a client that
/// leaves takes its catalog with it, and another client starts from its own (MOD-29, CMD-08).
#[derive(Debug)]
pub struct LinkCatalog {
    state: std::sync::Mutex<CatalogState>,
}

/// Where a link's catalog stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogState {
    /// The client did not offer `capability-catalog` (an older client): no models, no commands
    /// (MOD-10, CMD-06).
    NotOffered,
    /// Offered and not reported yet: unknown (MOD-27).
    Awaited,
    /// Offered, never reported, and a turn has run for want of it: counted as offering nothing
    /// until it reports (MOD-28).
    AwaitedInVain,
    /// The last report, as written (each replaces the one before).
    Reported(crate::harness::Catalog),
}

impl LinkCatalog {
    /// A link's catalog, awaited if the client offered `capability-catalog`.
    pub fn new(offered: bool) -> Self {
        LinkCatalog {
            state: std::sync::Mutex::new(if offered {
                CatalogState::Awaited
            } else {
                CatalogState::NotOffered
            }),
        }
    }

    /// Where it stands now.
    pub fn state(&self) -> CatalogState {
        self.lock().clone()
    }

    /// The client's `catalog` report, in place of any earlier (MOD-29), bounded: at most
    /// [`CATALOG_ENTRIES_MAX`] models and commands; an entry whose id, name, kind or level is
    /// longer than [`CATALOG_ID_MAX_BYTES`] is left out (an id is used exactly as written, so
    /// it is never cut), names and descriptions are cut to [`CATALOG_TEXT_MAX_CHARS`], and a
    /// model keeps at most [`CATALOG_LEVELS_MAX`] levels. Every writer of the document is sent
    /// the catalog, so a client cannot make each of them carry more. False if it is the same
    /// as the last report (nobody needs telling).
    pub fn report(&self, report: chopin_protocol::agent::Catalog) -> bool {
        let fits = |id: &str| !id.is_empty() && id.len() <= CATALOG_ID_MAX_BYTES;
        let models: Vec<_> = report
            .models
            .into_iter()
            .filter(|m| fits(&m.id))
            .take(CATALOG_ENTRIES_MAX)
            .map(|mut m| {
                m.name = m.name.map(|n| cut(&n));
                m.description = m.description.map(|d| cut(&d));
                m.thinking_levels.retain(|l| fits(l));
                m.thinking_levels.truncate(CATALOG_LEVELS_MAX);
                m.input_types.retain(|t| fits(t));
                m.input_types.truncate(CATALOG_LEVELS_MAX);
                m
            })
            .collect();
        let commands: Vec<_> = report
            .commands
            .into_iter()
            .filter(|c| fits(&c.name) && fits(&c.kind))
            .take(CATALOG_ENTRIES_MAX)
            .map(|mut c| {
                c.description = cut(&c.description);
                c
            })
            .collect();
        let now = CatalogState::Reported(crate::harness::Catalog {
            models,
            commands: Some(commands),
        });
        let mut state = self.lock();
        if *state == now {
            return false;
        }
        *state = now;
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CatalogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl crate::harness::PendingCatalog for LinkCatalog {
    fn ran_without(&self) {
        let mut state = self.lock();
        if *state == CatalogState::Awaited {
            *state = CatalogState::AwaitedInVain;
        }
    }
}

impl std::fmt::Debug for LinkHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkHandle")
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// Why the attached account may not start a session or turn now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessDenied {
    /// Its instance admission or its write access to the repository is gone (or GitHub no
    /// longer accepts its token): the check has already told the link to close
    /// `access-revoked`, and the document is free. The words say which.
    Revoked(String),
    /// GitHub could not be asked, so nothing was decided; the link stays.
    Unknown(String),
}

/// The check of an attached link's account, made before every session and every turn the link
/// starts (AC-18): instance admission and push or administration access to the document's
/// repository, asked of GitHub afresh. Implemented beside the link itself, which holds the
/// account's token; the harness never sees it.
#[async_trait]
pub trait LinkAccess: Send + Sync {
    /// `Ok` while the account may hold the Planner. A loss also closes the link.
    async fn recheck(&self) -> Result<(), AccessDenied>;
}

impl LinkHandle {
    /// Hands `command` to the link's task without waiting; false if the link is gone (or
    /// stuck, which ends it the same way).
    pub fn command(&self, command: LinkCommand) -> bool {
        self.commands.try_send(command).is_ok()
    }
}

/// Finds the client attached to a document, and keeps what is meant for a client that is away.
#[async_trait]
pub trait AgentLinks: Send + Sync {
    /// The link attached to `document` now, if any.
    fn link_for(&self, document: Uuid) -> Option<LinkHandle>;
    /// Whether `document`'s Planner is held disconnected now: no link, its client's work kept
    /// for it with no deadline (a resumable link that dropped, or a hand-over window that ended
    /// with no resume). Its live runs are shown marked disconnected (ATM-34, HO-13).
    fn disconnected(&self, _document: Uuid) -> bool {
        false
    }

    /// `document`'s Planner is held for a client that is away (its resumable link dropped with
    /// work kept, or a deploy cut it): `kept` is kept for that client's return, stored with the
    /// hold (AO-18), and handed over once when it resumes. [`Kept::Not`] if nothing holds it
    /// so; [`Kept::Already`] if the same was kept before (a second Stop for one run).
    async fn keep_for_client(&self, _document: Uuid, _kept: KeptForClient) -> Kept {
        Kept::Not
    }
}

/// What [`AgentLinks::keep_for_client`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Nothing holds the Planner for an away client: nothing was kept.
    Not,
    /// Kept now.
    Newly,
    /// The same was already kept: nothing changed.
    Already,
}

/// What a hold keeps for its client beyond its sessions.
#[derive(Debug, Clone, PartialEq)]
pub enum KeptForClient {
    /// An answer the client's link could not take (HO-16): `input-result` after `resumed`.
    Answer(InputResult),
    /// A Stop the client has not heard (ATM-35): `stop` after `resumed`.
    Stop(HeldStop),
}

/// A question the client waited on when its hold was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldQuestion {
    pub request_id: String,
    pub session_id: String,
    /// Its Decision ids in the document.
    pub cards: Vec<String>,
}

/// A writer's Stop pressed while the Planner's client was away, or sent and never answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldStop {
    /// Just this run; absent: every live run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Who pressed it.
    pub login: String,
}

/// No link is ever attached (a remote adapter built without a link table).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLinks;

#[async_trait]
impl AgentLinks for NoLinks {
    fn link_for(&self, _document: Uuid) -> Option<LinkHandle> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chopin_protocol::agent::{Catalog, CatalogModel};

    fn report(ids: &[&str]) -> Catalog {
        Catalog {
            models: ids
                .iter()
                .map(|id| CatalogModel {
                    id: (*id).to_owned(),
                    name: None,
                    description: None,
                    thinking_levels: Vec::new(),
                    input_types: Vec::new(),
                    default: false,
                })
                .collect(),
            commands: Vec::new(),
        }
    }

    /// A report the same as the last changes nothing, so no writer is sent the catalog again;
    /// a different one (MOD-29) does.
    #[test]
    fn mod_29_only_a_changed_report_is_news() {
        let catalog = LinkCatalog::new(true);
        assert_eq!(catalog.state(), CatalogState::Awaited);
        assert!(catalog.report(report(&["a"])));
        assert!(!catalog.report(report(&["a"])));
        assert!(catalog.report(report(&["a", "b"])));
        assert!(catalog.report(report(&[])));
    }

    /// MOD-28: a turn that ran without the catalog makes an awaited one "offers nothing"; it
    /// changes nothing once the client has reported.
    #[test]
    fn mod_28_ran_without_settles_only_an_awaited_catalog() {
        use crate::harness::PendingCatalog;
        let awaited = LinkCatalog::new(true);
        awaited.ran_without();
        assert_eq!(awaited.state(), CatalogState::AwaitedInVain);
        let reported = LinkCatalog::new(true);
        reported.report(report(&["a"]));
        reported.ran_without();
        assert!(matches!(reported.state(), CatalogState::Reported(_)));
        let older = LinkCatalog::new(false);
        older.ran_without();
        assert_eq!(older.state(), CatalogState::NotOffered);
    }
}
