//! The Chopin server as a library: every behaviour of the `chopin` binary lives here, so the
//! simulator, the contract suite and the e2e suite run the same code.
//!
//! Layers (see `docs/architecture.md` for each module's invariants); dependencies point down:
//! - [`app`]: the composition root, the only code that knows every service.
//! - [`transport`]: HTTP routes, the room socket, the agent socket — the only layer that knows
//!   axum.
//! - services: [`identity`] (GitHub, admission, sign-ins, sealing, the web and device flows),
//!   [`access`] (who is calling, the Origin policy, repository checks), [`documents`] (records,
//!   locators, slugs, children), [`content`] (documents open in this process), [`transcript`]
//!   and [`chat`], [`planner`] (ownership), [`turns`], [`jobs`] (background work: descriptions,
//!   titles, research), [`graphs`] (what an implementation graph holds, the Planner's graph tools), [`lifecycle`] (implementation runs: claims and reports), [`drafting`] (task drafts from Build plan), [`harness`] (reaching the agent link
//!   through a port trait), [`renewal`] (renewing expiring GitHub credentials, sessions ended
//!   first), [`housekeeping`] (ending expired logins, renewals, retrying unrecorded sign-outs,
//!   dropping unused channels).
//! - below them: [`store`] (the `chopin-store` crate), [`runtime`] (clock, entropy, connector,
//!   shutdown, writer lease), [`kept`] (calls made once per caller's key, across processes),
//!   [`config`], [`observe`], [`metrics`], [`error`].

pub mod access;
pub mod app;
pub mod builds;
pub mod chat;
pub mod classifier;
pub mod comments;
pub mod config;
pub mod content;
pub mod default_machine;
pub mod dictation;
pub mod documents;
pub mod drafting;
pub mod error;
pub mod files;
pub mod github_tools;
pub mod graphs;
pub mod harness;
pub mod housekeeping;
pub mod identity;
pub mod jobs;
pub mod kept;
pub mod lifecycle;
pub mod live_builds;
pub mod machines;
pub mod metrics;
pub mod models;
pub mod observe;
pub mod participation;
pub mod people;
pub mod planner;
pub mod questions;
pub mod rebuilds;
pub mod renewal;
pub mod repo_files;
pub mod repository;
pub mod research_cards;
pub mod runs;
pub mod runtime;
pub mod serving;
pub mod starting;
pub mod transcript;
pub mod transport;
pub mod turns;
pub mod visuals;

/// Durable state: the `chopin-store` crate (the Store traits by aggregate and their backends).
pub use chopin_store as store;

pub use app::App;
pub use runtime::Runtime;
pub use transport::{serve, tcp_listener};
