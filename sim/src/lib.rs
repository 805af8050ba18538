//! Chopin's deterministic simulator: the real server, on a simulated network, replayable by seed.
//!
//! Owns: a turmoil world in which `chopin_server`'s own startup, router and `serve` run on a
//! simulated host over an in-memory store that survives the host's restarts (and, to put two
//! processes on one database, on further hosts over that same store); the simulator's side
//! of the server's seams ([`SimClock`], [`TurmoilListener`], [`TurmoilConnector`]; entropy is the
//! server's own `SeededEntropy`); the scenario language ([`Scenario`], [`Step`],
//! [`Expectation`]) and the [`Trace`] of semantic events a run records.
//! Does not own: any server behaviour (it runs the server crate unchanged — the server never
//! knows it is simulated), fakes of other systems (`chopin-fixtures`), or scenario files
//! (`scenarios/`).
//!
//! Module map:
//! - [`net`]: the inbound and outbound socket seams over turmoil TCP.
//! - [`clock`]: simulated wall-clock time (a fixed epoch plus simulated elapsed time).
//! - [`world`]: the world, its steps and expectations, and the trace.
//! - [`cast`]: the standard cast of a scenario (server, signed-in writers, a reader, a document).
//! - [`scenario`]: scenario files (TOML) played against the cast, and the readable timeline.
//! - [`invariants`]: what must hold after every step of every run.
//! - [`explore`]: random fault schedules over a scenario, and shrinking one that breaks an
//!   invariant to a short scenario file.
//! - [`router`]: a hashing balancer host in front of several server hosts.
//! - [`processes`]: three processes on one store behind the router, played under faults and
//!   explored for a schedule that breaks their invariants.
//! - [`actors`]: scripted browsers (sign-in, room presence, Chat sends) and agent clients (attach,
//!   turn scripts) on their own hosts.
//!
//! Determinism rests on `--cfg tokio_unstable` (the workspace's `.cargo/config.toml`), under
//! which turmoil seeds each host's tokio scheduler from the simulation seed; this crate refuses to
//! build without it.

pub mod actors;
pub mod cast;
pub mod clock;
pub mod explore;
pub mod invariants;
pub mod net;
pub mod processes;
pub mod router;
pub mod scenario;
pub mod world;

pub use actors::{frame_detail, Agent, AgentEvent, Browser, Heard, TurnScript, TurnStep};
pub use clock::{SimClock, SIM_EPOCH_MS};
pub use net::{TurmoilConnector, TurmoilListener};
pub use world::{
    run, Configure, Event, Expectation, FailStoreCallsOn, Failure, HoldStoreCalls,
    HoldStoreCallsOn, Request, Scenario, SimError, Step, StoreWrite, Trace, TraceEvent, World,
    WorldOptions, GITHUB_HOST, GITHUB_PORT, SERVER_HOST, SERVER_ORIGIN, SERVER_PORT,
};

#[allow(unexpected_cfgs)]
const _: () = assert!(
    cfg!(tokio_unstable),
    "chopin-sim needs `--cfg tokio_unstable` (set in the workspace's .cargo/config.toml): without \
     it turmoil cannot seed each host's tokio scheduler and the same seed may not replay"
);
