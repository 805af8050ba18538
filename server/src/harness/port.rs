//! The harness's way to an attached client, as a port the Planner's link table implements.
//!
//! Owns: [`AgentLinks`] (find the link attached to a document), [`LinkHandle`] (commands to that
//! link's task and the features it accepted) and [`LinkCommand`] (send a frame; route a session's
//! or turn's frames here; stop routing).
//! Does not own: the link itself (the agent socket, in the transport layer) or who holds a
//! document (the planner table, which implements [`AgentLinks`]). This module imports nothing above the
//! harness layer, so the remote adapter never reaches into the Planner table.

use chopin_protocol::agent::{ClientMessage, Feature, ServerMessage};
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
    Send(ServerMessage),
    /// Route the client's frames for `key` (`session:<id>` or `turn:<id>`) to `to`.
    Route {
        key: String,
        to: mpsc::Sender<ClientMessage>,
    },
    /// Stop routing `key`.
    Unroute { key: String },
}

/// The harness's way to an attached client: commands to its link's task, and the features the
/// link accepted.
#[derive(Debug, Clone)]
pub struct LinkHandle {
    pub commands: mpsc::Sender<LinkCommand>,
    pub features: Vec<Feature>,
}

impl LinkHandle {
    /// Hands `command` to the link's task without waiting; false if the link is gone (or
    /// stuck, which ends it the same way).
    pub fn command(&self, command: LinkCommand) -> bool {
        self.commands.try_send(command).is_ok()
    }
}

/// Finds the client attached to a document.
pub trait AgentLinks: Send + Sync {
    /// The link attached to `document` now, if any.
    fn link_for(&self, document: Uuid) -> Option<LinkHandle>;
}

/// No link is ever attached (a remote adapter built without a link table).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLinks;

impl AgentLinks for NoLinks {
    fn link_for(&self, _document: Uuid) -> Option<LinkHandle> {
        None
    }
}
