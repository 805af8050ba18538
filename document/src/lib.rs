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
pub mod diagram;
pub mod edit;
pub mod lines;
pub mod mention;
pub mod reader;
pub mod snapshot;
pub mod ydoc;

use serde::{Deserialize, Serialize};

/// The most a document's Markdown source may hold, in UTF-8 bytes (the spec's 256 KiB source
/// limit, ATM-40): every way of writing a document is held to it, and a source of exactly this
/// many bytes is within it.
pub const SOURCE_MAX_BYTES: usize = 256 * 1024;

/// The words of a refusal for a source of `bytes` bytes, or `None` within the limit.
pub fn source_too_large(bytes: usize) -> Option<String> {
    (bytes > SOURCE_MAX_BYTES).then(|| {
        format!(
            "The document would be {bytes} bytes, past its 256 KiB source limit ({SOURCE_MAX_BYTES} bytes), so nothing was saved."
        )
    })
}

/// How a structured result names its document: `document: { id, url }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentRef {
    pub id: String,
    pub url: String,
}
