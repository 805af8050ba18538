//! Chopin documents as Markdown source, without I/O.
//!
//! Owns: the line model ([`lines`]), top-level blocks and their digests ([`blocks`]), Decision
//! blocks written in the source ([`decision`]), the paged text that `read_plan`, `read_child` and
//! MCP `read_document` return ([`reader`]), block edits and anchors ([`edit`]) and a small bridge
//! to a `yrs` text ([`ydoc`]). Does not own: storage, rooms, locks or permissions — the server
//! decides those and passes their outcome in.
//! Invariant: every function here is pure (same input, same output) except the `yrs` bridge,
//! which mutates only the `Doc` it is given.

pub mod blocks;
pub mod decision;
pub mod edit;
pub mod lines;
pub mod reader;
pub mod ydoc;

use serde::{Deserialize, Serialize};

/// How a structured result names its document: `document: { id, url }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentRef {
    pub id: String,
    pub url: String,
}
