//! Wire types shared by the server, the simulator, the contract suite and clients.
//!
//! Owns: the shapes of frames on the agent connection (`chopin.agent.v1`, module [`agent`]) and
//! the browser room socket. Does not own: any I/O, timers or policy — those live in
//! `chopin-server`.
//! Invariant: this crate does no I/O.

pub mod agent;

pub use agent::{AGENT_PROTOCOL_VERSION, AGENT_SUBPROTOCOL};
