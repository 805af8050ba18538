//! The agent connection, `chopin.agent.v1`: the WebSocket a Planner client attaches over.
//!
//! Owns: every frame in both directions ([`ClientMessage`], [`ServerMessage`]), the features a
//! client may offer ([`Feature`]), the close codes ([`close`]), strict decoding with the fault
//! named ([`decode_client`], [`decode_server`], [`Fault`]), and the order rules that need no
//! more than the frames themselves ([`LinkOrder`], [`TurnTools`]).
//! Does not own: sockets, pings, timers, permission checks or ownership — `chopin-server`'s
//! agent link does those and holds a [`LinkOrder`] per connection.
//!
//! `docs/agent-connection.md` is the same format in words for client authors who cannot import
//! this crate; its example frames are decoded by this crate's tests, so the two cannot drift.
//!
//! Decoding is strict: an unknown message type, an unknown field anywhere, a missing required
//! field or a value of the wrong shape is a [`Fault`] that ends the connection. The one lenient
//! spot is the feature list of `attach`, where names this version does not know are ignored so
//! that a newer client can still attach (see [`OfferedFeature`]).

mod client;
pub mod close;
mod codec;
mod common;
mod fault;
mod feature;
mod order;
mod server;

pub use client::*;
pub use codec::*;
pub use common::*;
pub use fault::*;
pub use feature::*;
pub use order::*;
pub use server::*;

/// The WebSocket subprotocol of the agent connection. An upgrade that does not offer it is
/// refused with HTTP 426.
pub const AGENT_SUBPROTOCOL: &str = "chopin.agent.v1";

/// The agent connection's protocol version a client names in `attach`.
pub const AGENT_PROTOCOL_VERSION: u32 = 1;

/// The largest frame either side may send: 2 MiB of UTF-8 JSON text. A larger one is a
/// [`Fault::TooLarge`], closed with [`close::MESSAGE_TOO_BIG`] (1009).
pub const MAX_FRAME_BYTES: usize = 2 * 1024 * 1024;
