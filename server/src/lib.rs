//! The Chopin server as a library: every behaviour of the `chopin` binary lives here, so the
//! simulator, the contract suite and the e2e suite run the same code.
//!
//! Module map (see `docs/architecture.md` for invariants):
//! - [`config`]: settings from the environment and flags.
//! - [`clock`], [`entropy`], [`connector`]: the determinism seams (wall time, randomness,
//!   outbound sockets). Timers use `tokio::time` directly.
//! - [`store`]: durable state on memory, SQLite or PostgreSQL.
//! - [`crypto`]: the credential key and browser-login credentials sealed at rest (AES-256-GCM).
//! - [`lease`]: the database-wide writer lease held while serving.
//! - [`http`]: the axum router and [`serve`] over any `axum::serve::Listener`.
//! - [`app`]: wiring a configuration into a running server.
//! - [`github`]: the GitHub REST client (who a token is, repository access, org membership).
//! - [`admission`]: instance admission (allow-lists) and its token-digest caches.
//! - [`session`]: browser sign-in (GitHub OAuth web flow), cookie sessions, sign-out.
//! - [`session_local`]: sign-in under `AUTH_MODE=local` (GitHub device flow), one account.
//! - [`documents`]: document routes (create, resolve by id or URL, archive, rename, read, Planner
//!   reset).
//! - [`children`]: a root document's own children and the child tools, rechecked on every call.
//! - [`planner`]: who holds each document's Planner; the agent connection ([`planner::link`]).
//! - [`room`]: a document's browser room socket (presence, Yjs sync and awareness).
//! - [`chat`]: a document's Chat: sends, `@chopin` requests, history, the bootstrap transcript.
//! - [`content`]: live document content (yrs), journalled in the store, loaded on demand.
//! - [`turns`]: people's messages to the Planner: start a turn, steer the running one, or refuse.
//! - [`observe`]: semantic Planner events for an observer (the simulator's trace).
//! - [`harness`]: the harness layer (adapter traits, the turn driver, the adapter registry).

pub mod admission;
pub mod app;
pub mod chat;
pub mod children;
pub mod clock;
pub mod config;
pub mod connector;
pub mod content;
pub mod crypto;
pub mod documents;
pub mod entropy;
pub mod github;
pub mod harness;
pub mod http;
pub mod lease;
pub mod observe;
pub mod planner;
pub mod room;
pub mod session;
pub mod session_local;
pub mod turns;

/// Durable state: the `chopin-store` crate (the Store traits by aggregate and their backends).
pub use chopin_store as store;

pub use app::{AppState, Services};
pub use http::{router, serve};
