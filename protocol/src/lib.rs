//! Wire types shared by the server, the simulator, the contract suite and clients.
//!
//! Owns: the shapes of frames on the agent connection (`chopin.agent.v1`) and the browser room
//! socket. Does not own: any I/O, timers or policy — those live in `chopin-server`.
//! Invariant: this crate does no I/O.

/// The WebSocket subprotocol of the agent connection.
pub const AGENT_SUBPROTOCOL: &str = "chopin.agent.v1";

/// The agent connection's protocol version a client names in `attach`.
pub const AGENT_PROTOCOL_VERSION: u32 = 1;
