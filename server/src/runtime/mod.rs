//! The runtime seams: everything the server reads from or does to the world outside its own
//! logic, gathered in one place so the simulator can swap each one.
//!
//! Owns: [`Runtime`] (the wall clock, the source of randomness, the outbound connector),
//! [`shutdown::Shutdown`] (the one shutdown signal and the tracker that owns every spawned task),
//! [`fanout`] (a broadcast channel that holds only what its receivers have yet to read), [`lease`] (the database-wide writer lease a serving process holds), [`document_leases`] (each document's lease, for several processes on one database), [`gates::Gates`] (keyed
//! async locks that are forgotten once nobody holds or waits for them) and [`recent::Recent`] (a
//! bounded memory of recent answers by key).
//! Does not own: timers and deadlines, which use `tokio::time` directly (turmoil drives it), or
//! storage (the `chopin-store` crate).
//!
//! Invariants: no other module reads system time or randomness, opens an outbound socket, or
//! spawns a task outside the tracker (`server/clippy.toml` forbids the first two by name).

pub mod clock;
pub mod connector;
pub mod document_leases;
pub mod entropy;
pub mod fanout;
pub mod gates;
pub mod lease;
pub mod recent;
pub mod shutdown;

use std::sync::Arc;

pub use clock::{Clock, SharedClock};
pub use connector::{Connector, SharedConnector};
pub use entropy::{Entropy, SharedEntropy};
pub use shutdown::Shutdown;

/// The seams a server is started with: production's or the simulator's.
#[derive(Clone)]
pub struct Runtime {
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    pub connector: SharedConnector,
}

impl Runtime {
    /// The production seams: the system clock, the operating system's randomness, real TCP.
    pub fn production() -> Self {
        Self {
            clock: Arc::new(clock::SystemClock),
            entropy: Arc::new(entropy::OsEntropy),
            connector: Arc::new(connector::TcpConnector),
        }
    }
}
