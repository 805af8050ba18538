//! The simulated world and the scenario language that drives it.
//!
//! Owns: building a turmoil simulation in which the real server (`chopin_server::app::start` +
//! `chopin_server::serve`) runs on the host [`SERVER_HOST`] over a [`MemoryStore`] that outlives
//! the host's restarts (and, for a test of two processes on one database, on further server
//! hosts over the same store: [`Step::StartServerOn`]); the log of every incarnation's store
//! writes ([`World::store_writes`]) and a test's holds on its store calls
//! ([`WorldOptions::hold_store_calls`]: a hung connection, a write held up in flight); scripted
//! client hosts that issue HTTP requests to it; the [`Scenario`] language (steps and
//! expectations as serde data, hosts named by strings, time in milliseconds); and the [`Trace`]
//! of semantic events a run records, with its hash.
//! Does not own: server behaviour (the server crate), fakes of other systems (`chopin-fixtures`),
//! or snapshotting traces (tests and the scenario runner do that).
//!
//! Determinism: everything that varies — turmoil's latencies and host order, each host's tokio
//! scheduler (under `--cfg tokio_unstable`), the server's entropy — is drawn from the scenario's
//! seed; the trace holds simulated time only, and maps that reach it are `BTreeMap`s.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use chopin_fixtures::github::FakeGitHub;
use chopin_fixtures::github_mcp::FakeGitHubMcp;
use chopin_server::config::Config;
use chopin_server::runtime::connector::{self, HttpError};
use chopin_server::runtime::entropy::SeededEntropy;
use chopin_server::store::instrumented::{Hold, Instrumented};
use chopin_server::store::{DocumentLeaseStore, FenceScope, MemoryStore, Store, StoreError};
use chopin_server::{App, Runtime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::clock::{SimClock, SIM_EPOCH_MS};
use crate::net::{TurmoilConnector, TurmoilListener};

/// The host the server runs on.
pub const SERVER_HOST: &str = "server";
/// The host the fake GitHub runs on, and the server's GitHub API base URL inside the world.
pub const GITHUB_HOST: &str = "github";
/// The fake GitHub's port inside the simulation.
pub const GITHUB_PORT: u16 = 80;
/// The host the fake model provider runs on once a world asks for it
/// ([`World::serve_model_provider`]), on [`GITHUB_PORT`].
pub const MODEL_HOST: &str = "model";
/// The host the fake GitHub MCP server runs on once a test asks for it
/// ([`World::serve_github_mcp`]); the server's `GITHUB_MCP_URL` names it on [`GITHUB_PORT`].
pub const GITHUB_MCP_HOST: &str = "github-mcp";
/// The server's port inside the simulation (the production default).
pub const SERVER_PORT: u16 = 8787;
/// Host name in trace events recorded by the world itself (expectations).
pub const WORLD_HOST: &str = "world";
/// Simulated time per turmoil step.
pub const TICK_MS: u64 = 1;
/// A client gives up on a request after this long and records it as timed out.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Upper bound on one simulation's length; far beyond any scenario so far.
pub const SIMULATION_BOUND_MS: u64 = 24 * 60 * 60 * 1_000;

// ---------------------------------------------------------------------------------------------
// The scenario language
// ---------------------------------------------------------------------------------------------

/// A reproducible run: a seed and the steps to take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    pub seed: u64,
    pub steps: Vec<Step>,
}

/// One step of a scenario. Steps run in order; a step that issues requests returns once every
/// response (or failure) has been recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// Runs the simulation until the server's current incarnation is serving, failing if that
    /// takes longer than `within_ms`.
    AwaitServer { within_ms: u64 },
    /// Client host `host` (created on first use) sends `GET path` to the server.
    Get { host: String, path: String },
    /// Every request is sent at the same simulated instant; the world waits for all of them.
    GetConcurrently { requests: Vec<Request> },
    /// Runs the simulation for `ms` of simulated time.
    Advance { ms: u64 },
    /// Crashes the server host: no graceful shutdown, the writer lease is left to expire. The
    /// store survives.
    CrashServer,
    /// Starts a crashed server host again as a new incarnation over the same store.
    StartServer,
    /// [`Step::CrashServer`] then [`Step::StartServer`] at the same instant.
    RestartServer,
    /// Starts a server incarnation on another host `host` (a second machine serving the same
    /// store), created on first use, while the server host keeps whatever it runs: how a test
    /// puts two processes on one database. Clients still address the server host.
    /// [`Step::AwaitServer`] then waits for this incarnation.
    StartServerOn { host: String },
    /// Stops the server gracefully, as SIGTERM does: it stops accepting, tells every socket,
    /// drains, gives the writer lease back, and its host's software ends. The world runs until
    /// it has ended (at most `within_ms`) — on every server host, if there are several.
    /// [`Step::StartServer`] starts it again.
    StopServer { within_ms: u64 },
    /// Checks an expectation against what has happened so far.
    Expect(Expectation),
}

/// A `GET` from a client host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub host: String,
    pub path: String,
}

/// What must be true. Each refers to the latest completed `GET path`, from any client host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "expect", rename_all = "kebab-case")]
pub enum Expectation {
    /// It was answered with `status`.
    Status { path: String, status: u16 },
    /// It was answered with a JSON body whose value at `pointer` (RFC 6901) equals `value`.
    BodyJson {
        path: String,
        pointer: String,
        value: serde_json::Value,
    },
    /// It was answered with a body holding every line of `lines` (a `/metrics` page, say).
    BodyLines { path: String, lines: Vec<String> },
    /// It got no answer: the connection was refused (nothing listening) or timed out.
    Unreachable { path: String },
}

impl Expectation {
    fn path(&self) -> &str {
        match self {
            Expectation::Status { path, .. }
            | Expectation::BodyJson { path, .. }
            | Expectation::BodyLines { path, .. }
            | Expectation::Unreachable { path } => path,
        }
    }
}

impl std::fmt::Display for Expectation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expectation::Status { path, status } => write!(f, "GET {path} answered {status}"),
            Expectation::BodyJson {
                path,
                pointer,
                value,
            } => write!(f, "GET {path} answered JSON with {pointer} = {value}"),
            Expectation::BodyLines { path, lines } => {
                write!(f, "GET {path} answered a body with the lines {lines:?}")
            }
            Expectation::Unreachable { path } => write!(f, "GET {path} got no answer"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The trace
// ---------------------------------------------------------------------------------------------

/// Everything semantic that happened in a run, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    pub seed: u64,
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// SHA-256 (lowercase hex) of the trace's canonical JSON serialization: equal traces, equal
    /// hashes.
    pub fn hash(&self) -> String {
        let bytes = serde_json::to_vec(self).expect("a trace always serializes");
        hex::encode(Sha256::digest(&bytes))
    }

    /// The trace as pretty JSON, for snapshots and failure messages.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a trace always serializes")
    }

    /// Events of one host, in order.
    pub fn of_host<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a TraceEvent> + 'a {
        self.events.iter().filter(move |e| e.host == host)
    }
}

/// One event: when (simulated milliseconds since the simulation began), where, what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub at_ms: u64,
    pub host: String,
    pub event: Event,
}

/// A semantic event. Never wall time, never raw bytes with headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Event {
    /// The server host's software began an incarnation (1 for the first boot).
    ServerBooting { incarnation: u32 },
    /// The incarnation holds the writer lease and is listening.
    ServerStarted {
        incarnation: u32,
        writer_epoch: Option<i64>,
    },
    /// `app::start` or binding failed; the incarnation ends without serving.
    ServerStartFailed { incarnation: u32, error: String },
    /// The incarnation's writer lease counts as lost (taken over, or not renewed by its
    /// deadline): it stops writing and begins to stop.
    WriterLeaseLost { incarnation: u32 },
    /// The world asked the server to stop gracefully.
    ServerStopRequested,
    /// Serving ended (a graceful stop, the writer lease lost, or serving failed), and how the stop
    /// went: every task drained within its bound, the writer lease given back.
    ServerStopped {
        incarnation: u32,
        reason: String,
        drained: bool,
        lease_released: bool,
    },
    /// The world crashed the server host.
    ServerCrashed,
    /// The world started the server host's software again.
    ServerRestarted,
    /// A client sent a request.
    RequestSent {
        request: u64,
        method: String,
        path: String,
    },
    /// A client received a response, read whole.
    ResponseReceived {
        request: u64,
        path: String,
        status: u16,
        body: String,
    },
    /// A client got no response.
    RequestFailed {
        request: u64,
        path: String,
        failure: Failure,
    },
    /// The world checked an expectation and it held.
    ExpectationMet { expectation: Expectation },
    /// The server reported a Planner link or ownership event.
    Planner(chopin_server::observe::PlannerEvent),
    /// A scripted actor (agent client, browser) saw or did something; `what` is its own words.
    Actor { what: String },
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "failure", rename_all = "kebab-case")]
pub enum Failure {
    /// Nothing listened on the server's port.
    Refused,
    /// No answer within [`REQUEST_TIMEOUT_MS`].
    TimedOut,
    Other {
        error: String,
    },
}

/// Shared, append-only event log; cloned into every host.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorder(Arc<Mutex<Vec<TraceEvent>>>);

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Vec<TraceEvent>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records at `at_ms`, never earlier than the last event (hosts run one after another within
    /// a tick, each at most one tick ahead), so the trace's times never go backwards.
    fn record_at(&self, at_ms: u64, host: &str, event: Event) {
        let mut events = self.lock();
        let at_ms = events.last().map_or(at_ms, |last| last.at_ms.max(at_ms));
        events.push(TraceEvent {
            at_ms,
            host: host.to_string(),
            event,
        });
    }

    /// Records from inside a simulated host, at the simulation's current time.
    pub(crate) fn record_in_host(&self, host: &str, event: Event) {
        self.record_at(host_now_ms(), host, event);
    }
}

/// Records the server's Planner events in the trace, at the simulated time, as the host's.
struct TraceObserver {
    recorder: Recorder,
    host: String,
}

impl chopin_server::observe::Observer for TraceObserver {
    fn planner_event(&self, _at_ms: i64, event: chopin_server::observe::PlannerEvent) {
        self.recorder
            .record_in_host(&self.host, Event::Planner(event));
    }
}

/// `future`'s output if it is ready at its first poll (a memory store call, which never
/// yields), read without a runtime of its own: a hook runs inside a host's runtime.
fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Simulated milliseconds since the simulation began, read inside a host.
pub(crate) fn host_now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, duration_ms)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a run stopped. Each carries the trace up to that point.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid scenario step: {0}")]
    Scenario(String),
    #[error("a simulated host failed at {at_ms} ms: {error}")]
    Host {
        at_ms: u64,
        error: String,
        trace: Box<Trace>,
    },
    #[error("expectation failed at {at_ms} ms: expected {expected}, but {actual}")]
    Expectation {
        at_ms: u64,
        expected: String,
        actual: String,
        trace: Box<Trace>,
    },
    #[error("at {at_ms} ms: {what}")]
    Timeout {
        at_ms: u64,
        what: String,
        trace: Box<Trace>,
    },
}

impl SimError {
    /// The trace up to the failure, if the run had started.
    pub fn trace(&self) -> Option<&Trace> {
        match self {
            SimError::Scenario(_) => None,
            SimError::Host { trace, .. }
            | SimError::Expectation { trace, .. }
            | SimError::Timeout { trace, .. } => Some(trace),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------------------------

/// A request handed to a client host.
#[derive(Debug, Clone)]
struct Command {
    request: u64,
    path: String,
}

/// A client host's mailbox. Outlives the host's software, so the world can always reach it.
#[derive(Debug, Default)]
struct Inbox {
    queue: Mutex<VecDeque<Command>>,
    notify: Notify,
}

/// How a request ended.
#[derive(Debug, Clone)]
enum Outcome {
    Response { status: u16, body: String },
    Failed(Failure),
}

#[derive(Debug, Clone)]
struct Completed {
    at_ms: u64,
    host: String,
    outcome: Outcome,
}

type Outcomes = Arc<Mutex<BTreeMap<u64, Completed>>>;

/// Adjusts the server's configuration before each incarnation starts.
pub type Configure = Arc<dyn Fn(&mut Config) + Send + Sync>;

/// Asked before each store call of a server incarnation (its number, the method, whether it
/// writes): a wait the call makes before it runs, or `None`. How a test plays a hung connection
/// (a renewal that never answers) or a write held up in flight. The call is reported to
/// [`World::store_writes`] when it returns; one its caller gave up on meanwhile never is.
pub type HoldStoreCalls = Arc<dyn Fn(u32, &'static str, bool) -> Option<Hold> + Send + Sync>;

/// [`HoldStoreCalls`] by server host rather than incarnation (the host's name, the method,
/// whether it writes): faults that stay with a machine across its restarts, such as a process
/// partitioned from the store or a slow store.
pub type HoldStoreCallsOn = Arc<dyn Fn(&str, &'static str, bool) -> Option<Hold> + Send + Sync>;

/// Asked before each store call of a server host, after any hold (the host's name, the method,
/// whether it writes): an error the call returns at once without reaching the store, or `None`.
/// How a run plays a process whose connections the database refuses.
pub type FailStoreCallsOn =
    Arc<dyn Fn(&str, &'static str, bool) -> Option<StoreError> + Send + Sync>;

/// How to build a [`World`] beyond its seed.
#[derive(Clone, Default)]
pub struct WorldOptions {
    /// Every message takes exactly this long (otherwise turmoil draws latencies from the seed).
    pub fixed_latency_ms: Option<u64>,
    /// Applied to the server's configuration (after the world's own settings).
    pub configure: Option<Configure>,
    /// Holds store calls of the server's incarnations (faults).
    pub hold_store_calls: Option<HoldStoreCalls>,
    /// Holds store calls of the server hosts, by host (faults).
    pub hold_store_calls_on: Option<HoldStoreCallsOn>,
    /// Fails store calls of the server hosts, by host (faults).
    pub fail_store_calls_on: Option<FailStoreCallsOn>,
}

/// The application origin of the server inside the world.
pub const SERVER_ORIGIN: &str = "http://server:8787";

/// A turmoil simulation with the real server on [`SERVER_HOST`] and client hosts made on demand.
pub struct World {
    seed: u64,
    /// The latency every message takes, when fixed (else turmoil's default spread).
    fixed_latency_ms: Option<u64>,
    sim: turmoil::Sim<'static>,
    recorder: Recorder,
    store: MemoryStore,
    github: FakeGitHub,
    clients: BTreeMap<String, Arc<Inbox>>,
    outcomes: Outcomes,
    /// The latest completed request per path, for expectations.
    latest: BTreeMap<String, (u64, Completed)>,
    next_request: u64,
    /// Incarnations the world has started (the server host numbers its own the same way).
    server_incarnations: u32,
    /// The services of the server's current incarnation, once it has started.
    server_state: Arc<Mutex<Option<App>>>,
    /// The services of each server host's latest incarnation (several processes on one store).
    server_apps: ServerApps,
    /// Bumped to ask the server's serving incarnations to stop gracefully.
    stop: Arc<tokio::sync::watch::Sender<u32>>,
    /// Every store write of every incarnation, in the order they returned.
    writes: WriteLog,
    /// What every server host runs, to install it on another host.
    software: ServerSoftware,
    /// The hosts server software was installed on: [`SERVER_HOST`] first.
    server_hosts: Vec<String>,
}

/// A store write, as [`World::store_writes`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreWrite {
    /// Simulated ms when it returned.
    pub at_ms: u64,
    /// The server incarnation that made it.
    pub incarnation: u32,
    /// The store method (`append_transcript`, `release_writer_lease`, …).
    pub method: &'static str,
    /// It returned `Ok`: the write was made (or its guard refused it without an error).
    pub ok: bool,
    /// It was refused by the incarnation's fence: its writer epoch was no longer current.
    pub fenced: bool,
    /// The server host the incarnation runs on.
    pub host: String,
    /// It was made through a handle fenced by a document's lease, returned `Ok`, and as it
    /// returned that lease's row did not name the handle's epoch with a holder: a write landed
    /// under an epoch no longer current.
    pub stale_epoch: bool,
}

/// The store writes of every incarnation; the hook of each incarnation's instrumented store.
#[derive(Clone, Default)]
struct WriteLog(Arc<Mutex<Vec<StoreWrite>>>);

/// One incarnation's hook into the [`WriteLog`], and the test's holds on its calls.
struct WriteHook {
    log: WriteLog,
    incarnation: u32,
    host: String,
    hold: Option<HoldStoreCalls>,
    hold_on: Option<HoldStoreCallsOn>,
    fail_on: Option<FailStoreCallsOn>,
    /// The world's store, to read a document's lease row as a fenced write returns.
    store: MemoryStore,
}

impl chopin_server::store::instrumented::Hook for WriteHook {
    fn call(&self, call: chopin_server::store::instrumented::Call) {
        if call.write {
            // The memory store never yields, so its answer is ready at the first poll, and the
            // row read here is the row the write met.
            let stale_epoch = match call.fence {
                Some((FenceScope::Document(document), epoch)) if call.ok => {
                    match ready_now(self.store.document_lease(document)) {
                        Some(Ok(Some(row))) => !(row.epoch == epoch && row.holder.is_some()),
                        _ => true,
                    }
                }
                _ => false,
            };
            self.log
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(StoreWrite {
                    at_ms: host_now_ms(),
                    incarnation: self.incarnation,
                    method: call.method,
                    ok: call.ok,
                    fenced: call.fenced,
                    host: self.host.clone(),
                    stale_epoch,
                });
        }
    }

    fn hold(&self, method: &'static str, write: bool) -> Option<Hold> {
        let by_incarnation = self
            .hold
            .as_ref()
            .and_then(|hold| hold(self.incarnation, method, write));
        let by_host = self
            .hold_on
            .as_ref()
            .and_then(|hold| hold(&self.host, method, write));
        match (by_incarnation, by_host) {
            (Some(a), Some(b)) => Some(Box::pin(async move {
                a.await;
                b.await;
            })),
            (a, b) => a.or(b),
        }
    }

    fn fail(&self, method: &'static str, write: bool) -> Option<StoreError> {
        self.fail_on
            .as_ref()
            .and_then(|fail| fail(&self.host, method, write))
    }
}

/// What every server host runs: an incarnation of the server over the world's store, numbered
/// from one counter across hosts and restarts. Cloned into each host's closure.
#[derive(Clone)]
struct ServerSoftware {
    /// Created outside the hosts' closures: shared by every incarnation on every server host.
    store: MemoryStore,
    clock: Arc<SimClock>,
    entropy: Arc<SeededEntropy>,
    incarnations: Arc<AtomicU32>,
    recorder: Recorder,
    configure: Option<Configure>,
    hold: Option<HoldStoreCalls>,
    hold_on: Option<HoldStoreCallsOn>,
    fail_on: Option<FailStoreCallsOn>,
    server_state: Arc<Mutex<Option<App>>>,
    /// The services of each server host's latest incarnation, by host.
    server_apps: ServerApps,
    stop: Arc<tokio::sync::watch::Sender<u32>>,
    writes: WriteLog,
}

/// The services of each server host's latest incarnation, by host.
type ServerApps = Arc<Mutex<BTreeMap<String, App>>>;

impl ServerSoftware {
    /// Makes `host` a server host: it boots an incarnation now and at every restart.
    fn install(&self, sim: &mut turmoil::Sim<'static>, host: &str) {
        let (software, name) = (self.clone(), host.to_owned());
        sim.host(host, move || software.boot(name.clone()));
    }

    /// The next incarnation, on `host`.
    fn boot(&self, host: String) -> impl std::future::Future<Output = turmoil::Result> {
        let incarnation = self.incarnations.fetch_add(1, Ordering::SeqCst) + 1;
        let store = Arc::new(Instrumented::new(
            Arc::new(self.store.clone()),
            WriteHook {
                log: self.writes.clone(),
                incarnation,
                host: host.clone(),
                hold: self.hold.clone(),
                hold_on: self.hold_on.clone(),
                fail_on: self.fail_on.clone(),
                store: self.store.clone(),
            },
        )) as Arc<dyn Store>;
        let runtime = Runtime {
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
            connector: Arc::new(TurmoilConnector),
        };
        run_server(
            host,
            incarnation,
            store,
            runtime,
            self.recorder.clone(),
            self.configure.clone(),
            self.server_state.clone(),
            self.server_apps.clone(),
            self.stop.subscribe(),
        )
    }
}

impl World {
    /// A world for `seed` with the server host registered; it boots on the first step.
    pub fn new(seed: u64) -> Self {
        Self::with_options(seed, WorldOptions::default())
    }

    /// A world for `seed` built with `options`.
    pub fn with_options(seed: u64, options: WorldOptions) -> Self {
        let fixed_latency_ms = options.fixed_latency_ms;
        let mut builder = turmoil::Builder::new();
        builder
            .rng_seed(seed)
            .tick_duration(Duration::from_millis(TICK_MS))
            .simulation_duration(Duration::from_millis(SIMULATION_BOUND_MS))
            .epoch(UNIX_EPOCH + Duration::from_millis(SIM_EPOCH_MS as u64))
            .enable_random_order();
        if let Some(ms) = options.fixed_latency_ms {
            builder
                .min_message_latency(Duration::from_millis(ms))
                .max_message_latency(Duration::from_millis(ms));
        }
        let mut sim = builder.build();
        let server_state: Arc<Mutex<Option<App>>> = Arc::default();
        let server_apps: ServerApps = Arc::default();
        let recorder = Recorder::default();
        let stop = Arc::new(tokio::sync::watch::channel(0u32).0);
        let writes = WriteLog::default();
        let software = ServerSoftware {
            store: MemoryStore::new(),
            clock: Arc::new(SimClock::new()),
            // One stream for the machine, continued across restarts, so each incarnation draws a
            // different holder name (as a restarted process would) yet a seed replays them all.
            entropy: Arc::new(SeededEntropy::new(seed)),
            incarnations: Arc::new(AtomicU32::new(0)),
            recorder: recorder.clone(),
            configure: options.configure.clone(),
            hold: options.hold_store_calls.clone(),
            hold_on: options.hold_store_calls_on.clone(),
            fail_on: options.fail_store_calls_on.clone(),
            server_state: server_state.clone(),
            server_apps: server_apps.clone(),
            stop: stop.clone(),
            writes: writes.clone(),
        };
        software.install(&mut sim, SERVER_HOST);
        let store = software.store.clone();
        // The fake GitHub keeps its scripted state outside its host, like the server's store.
        let github = FakeGitHub::new();
        {
            let github = github.clone();
            sim.host(GITHUB_HOST, move || {
                let router = github.router();
                async move {
                    let listener = TurmoilListener::bind(("0.0.0.0", GITHUB_PORT)).await?;
                    axum::serve(listener, router).await?;
                    Ok(())
                }
            });
        }
        Self {
            seed,
            fixed_latency_ms,
            sim,
            recorder,
            store,
            github,
            clients: BTreeMap::new(),
            outcomes: Outcomes::default(),
            latest: BTreeMap::new(),
            next_request: 1,
            server_incarnations: 1,
            server_state,
            server_apps,
            stop,
            writes,
            software,
            server_hosts: vec![SERVER_HOST.to_owned()],
        }
    }

    /// Every store write so far, of every incarnation, in the order they returned.
    pub fn store_writes(&self) -> Vec<StoreWrite> {
        self.writes
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The store writes from index `from` on (a check made after every tick reads only the
    /// new ones).
    pub fn store_writes_since(&self, from: usize) -> Vec<StoreWrite> {
        self.writes
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(from..)
            .unwrap_or_default()
            .to_vec()
    }

    /// The services of the server's current incarnation (its attachment table, sign-ins, …), for
    /// checks a scenario makes between steps. `None` before it has started.
    pub fn server_app(&self) -> Option<App> {
        self.server_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The services of the latest incarnation on server host `host`, once one has started
    /// there (it may have crashed since).
    pub fn server_app_on(&self, host: &str) -> Option<App> {
        self.server_apps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(host)
            .cloned()
    }

    /// Puts a hashing balancer ([`crate::router`]) on host `name`, in front of the server hosts
    /// `upstreams`, listening on the server port: a client that dials `name` is routed as the
    /// self-hosting guide's nginx routes it.
    pub fn add_router(&mut self, name: &str, upstreams: &[&str]) {
        let upstreams: Vec<String> = upstreams.iter().map(|u| (*u).to_owned()).collect();
        self.sim.host(name, move || {
            crate::router::serve(upstreams.clone(), SERVER_PORT)
        });
    }

    /// Starts crashed server host `host` again, as a new incarnation over the same store.
    pub fn restart_host(&mut self, host: &str) -> Result<(), SimError> {
        if host == SERVER_HOST {
            self.start_server()
        } else {
            self.start_server_on(host)
        }
    }

    /// Crashes server host `host` (any of them; [`Step::CrashServer`] crashes [`SERVER_HOST`]):
    /// its incarnation ends at once, nothing flushed or given back.
    pub fn crash_host(&mut self, host: &str) {
        self.sim.crash(host);
        self.recorder
            .record_at(self.now_ms(), host, Event::ServerCrashed);
    }

    /// Starts `actor` as a client host named `name` and returns at once; it runs as the world
    /// advances (unlike [`World::run_client`], which runs a client to its end).
    pub fn spawn<F>(&mut self, name: &str, actor: F)
    where
        F: std::future::Future<Output = turmoil::Result> + 'static,
    {
        self.sim.client(name, actor);
    }

    /// Records an event of a scripted actor at the current simulated time.
    pub(crate) fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Drops every message between hosts `a` and `b` from now on, silently.
    pub fn partition(&mut self, a: &str, b: &str) {
        self.sim.partition(a, b);
    }

    /// Every message between hosts `a` and `b` takes `ms` from now on; `None` puts the link
    /// back to the world's own latency.
    pub fn set_link_latency(&mut self, a: &str, b: &str, ms: Option<u64>) {
        match ms.or(self.fixed_latency_ms) {
            Some(ms) => self.sim.set_link_latency(a, b, Duration::from_millis(ms)),
            None => {
                // turmoil's own spread: 0 to 100 ms.
                self.sim.set_link_latency(a, b, Duration::ZERO);
                self.sim
                    .set_link_max_message_latency(a, b, Duration::from_millis(100));
            }
        }
    }

    /// Messages between hosts `a` and `b` are lost with probability `rate` (turmoil fails the
    /// link at that rate; 0 stops it, and the link is repaired).
    pub fn set_link_drops(&mut self, a: &str, b: &str, rate: f64) {
        self.sim.set_link_fail_rate(a, b, rate);
        if rate == 0.0 {
            self.sim.repair(a, b);
        }
    }

    /// Undoes [`World::partition`].
    pub fn repair(&mut self, a: &str, b: &str) {
        self.sim.repair(a, b);
    }

    /// Holds every message between hosts `a` and `b` from now on (nothing is lost): a call in
    /// flight between them waits, as behind a slow network, until [`World::release`].
    pub fn hold(&mut self, a: &str, b: &str) {
        self.sim.hold(a, b);
    }

    /// Delivers what [`World::hold`] held, in order, and lets messages through again.
    pub fn release(&mut self, a: &str, b: &str) {
        self.sim.release(a, b);
    }

    /// Advances until `done` holds (checked after every tick), at most `within_ms`.
    pub fn advance_until(
        &mut self,
        within_ms: u64,
        what: &str,
        mut done: impl FnMut(&World) -> bool,
    ) -> Result<(), SimError> {
        let deadline = self.now_ms() + within_ms;
        while !done(self) {
            if self.now_ms() >= deadline {
                return Err(self.timeout(what.to_owned()));
            }
            self.tick()?;
        }
        Ok(())
    }

    /// [`World::advance_until`] for a test: panics, naming `what`, when `done` is not true
    /// within `within_ms` of simulated time.
    pub fn until(&mut self, within_ms: u64, what: &str, done: impl Fn() -> bool) {
        self.advance_until(within_ms, what, move |_| done())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The server's store, shared with every incarnation of the server host. Writing to it
    /// between steps is how a test prepares records.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The fake GitHub on [`GITHUB_HOST`]: script users, tokens, repositories and outages here.
    pub fn github(&self) -> &FakeGitHub {
        &self.github
    }

    /// Starts the fake GitHub MCP server (over [`World::github`]'s state) on
    /// [`GITHUB_MCP_HOST`], where the server's `GITHUB_MCP_URL` points, and returns it to script
    /// and read. Worlds that never call this have no such host (a pull-request tool then finds
    /// GitHub's MCP server unreachable), so existing scenarios keep their hosts and traces.
    pub fn serve_github_mcp(&mut self) -> FakeGitHubMcp {
        let mcp = FakeGitHubMcp::new(self.github.clone());
        let served = mcp.clone();
        self.sim.host(GITHUB_MCP_HOST, move || {
            let router = served.router();
            async move {
                let listener = TurmoilListener::bind(("0.0.0.0", GITHUB_PORT)).await?;
                axum::serve(listener, router).await?;
                Ok(())
            }
        });
        mcp
    }

    /// Starts the fake model provider on [`MODEL_HOST`] and returns it to script and read.
    /// Point the server at it with [`provider_settings`] (`HARNESS=provider`). Worlds that never
    /// call this have no such host, so existing scenarios keep their hosts and traces.
    pub fn serve_model_provider(&mut self) -> chopin_fixtures::model_provider::FakeProvider {
        let provider = chopin_fixtures::model_provider::FakeProvider::new();
        let served = provider.clone();
        self.sim.host(MODEL_HOST, move || {
            let router = served.router();
            async move {
                let listener = TurmoilListener::bind(("0.0.0.0", GITHUB_PORT)).await?;
                axum::serve(listener, router).await?;
                Ok(())
            }
        });
        provider
    }

    /// Runs `client` as a one-off client host named `name` until it finishes, advancing the
    /// simulation meanwhile (a check that needs its own code on a simulated host).
    pub fn run_client<F>(&mut self, name: &str, client: F) -> Result<(), SimError>
    where
        F: std::future::Future<Output = turmoil::Result> + 'static,
    {
        self.sim.client(name, client);
        loop {
            match self.sim.step() {
                Ok(true) => return Ok(()),
                Ok(false) if !self.sim.is_host_running(name) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    return Err(SimError::Host {
                        at_ms: self.now_ms(),
                        error: e.to_string(),
                        trace: Box::new(self.trace()),
                    })
                }
            }
        }
    }

    /// Starts `client` as a one-off client host named `name` and returns at once: it runs as
    /// the world advances ([`World::advance`]), so several can be under way at chosen instants.
    pub fn start_client<F>(&mut self, name: &str, client: F)
    where
        F: std::future::Future<Output = turmoil::Result> + 'static,
    {
        self.sim.client(name, client);
    }

    /// Simulated milliseconds since the simulation began.
    pub fn now_ms(&self) -> u64 {
        duration_ms(self.sim.elapsed())
    }

    /// The trace so far.
    pub fn trace(&self) -> Trace {
        Trace {
            seed: self.seed,
            events: self.recorder.lock().clone(),
        }
    }

    /// Runs `f` over the trace's events from index `from` on, without copying them (a check
    /// made after every tick or step).
    pub fn with_events<R>(&self, from: usize, f: impl FnOnce(&[TraceEvent]) -> R) -> R {
        let events = self.recorder.lock();
        f(events.get(from..).unwrap_or_default())
    }

    /// Takes one step of a scenario.
    pub fn apply(&mut self, step: &Step) -> Result<(), SimError> {
        match step {
            Step::AwaitServer { within_ms } => self.await_server(*within_ms),
            Step::Get { host, path } => self.get_all(&[Request {
                host: host.clone(),
                path: path.clone(),
            }]),
            Step::GetConcurrently { requests } => self.get_all(requests),
            Step::Advance { ms } => self.advance(*ms),
            Step::CrashServer => {
                self.crash_server();
                Ok(())
            }
            Step::StartServer => self.start_server(),
            Step::RestartServer => {
                self.crash_server();
                self.start_server()
            }
            Step::StartServerOn { host } => self.start_server_on(host),
            Step::StopServer { within_ms } => self.stop_server(*within_ms),
            Step::Expect(expectation) => self.expect(expectation),
        }
    }

    /// Runs the simulation for `ms` of simulated time.
    pub fn advance(&mut self, ms: u64) -> Result<(), SimError> {
        for _ in 0..ms.div_ceil(TICK_MS) {
            self.tick()?;
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<(), SimError> {
        match self.sim.step() {
            Ok(_) => Ok(()),
            Err(e) => Err(SimError::Host {
                at_ms: self.now_ms(),
                error: e.to_string(),
                trace: Box::new(self.trace()),
            }),
        }
    }

    pub(crate) fn timeout(&self, what: String) -> SimError {
        SimError::Timeout {
            at_ms: self.now_ms(),
            what,
            trace: Box::new(self.trace()),
        }
    }

    fn server_serving(&self) -> bool {
        let current = self.server_incarnations;
        self.recorder.lock().iter().any(|e| {
            matches!(e.event, Event::ServerStarted { incarnation, .. } if incarnation == current)
        })
    }

    fn await_server(&mut self, within_ms: u64) -> Result<(), SimError> {
        let deadline = self.now_ms().saturating_add(within_ms);
        while !self.server_serving() {
            if self.now_ms() >= deadline {
                return Err(self.timeout(format!(
                    "server incarnation {} was not serving within {within_ms} ms",
                    self.server_incarnations
                )));
            }
            self.tick()?;
        }
        Ok(())
    }

    fn crash_server(&mut self) {
        self.sim.crash(SERVER_HOST);
        self.recorder
            .record_at(self.now_ms(), SERVER_HOST, Event::ServerCrashed);
    }

    fn stop_server(&mut self, within_ms: u64) -> Result<(), SimError> {
        self.recorder
            .record_at(self.now_ms(), SERVER_HOST, Event::ServerStopRequested);
        self.stop.send_modify(|n| *n += 1);
        let incarnation = self.server_incarnations;
        let deadline = self.now_ms().saturating_add(within_ms);
        loop {
            let stopped = self.recorder.lock().iter().any(|e| {
                matches!(e.event, Event::ServerStopped { incarnation: i, .. } if i == incarnation)
            });
            let running = self
                .server_hosts
                .iter()
                .any(|host| self.sim.is_host_running(host.as_str()));
            if stopped && !running {
                return Ok(());
            }
            if self.now_ms() >= deadline {
                return Err(self.timeout(format!(
                    "server incarnation {incarnation} had not stopped within {within_ms} ms"
                )));
            }
            self.tick()?;
        }
    }

    fn start_server(&mut self) -> Result<(), SimError> {
        if self.sim.is_host_running(SERVER_HOST) {
            return Err(SimError::Scenario(
                "start-server: the server host is running; crash it first".into(),
            ));
        }
        self.sim.bounce(SERVER_HOST);
        self.server_incarnations += 1;
        self.recorder
            .record_at(self.now_ms(), SERVER_HOST, Event::ServerRestarted);
        Ok(())
    }

    fn start_server_on(&mut self, host: &str) -> Result<(), SimError> {
        if host == SERVER_HOST {
            return Err(SimError::Scenario(
                "start-server-on: use start-server for the server host".into(),
            ));
        }
        if host.is_empty()
            || host == GITHUB_HOST
            || host == WORLD_HOST
            || self.clients.contains_key(host)
        {
            return Err(SimError::Scenario(format!(
                "start-server-on: {host:?} cannot name a server host (reserved, empty or a client)"
            )));
        }
        if self.server_hosts.iter().any(|h| h == host) {
            if self.sim.is_host_running(host) {
                return Err(SimError::Scenario(format!(
                    "start-server-on: {host:?} is running a server already"
                )));
            }
            self.sim.bounce(host);
        } else {
            self.software.install(&mut self.sim, host);
            self.server_hosts.push(host.to_owned());
        }
        self.server_incarnations += 1;
        Ok(())
    }

    /// The mailbox of client host `name`, registering the host on first use.
    fn client(&mut self, name: &str) -> Result<Arc<Inbox>, SimError> {
        if let Some(inbox) = self.clients.get(name) {
            return Ok(inbox.clone());
        }
        if name.is_empty()
            || name == WORLD_HOST
            || self.server_hosts.iter().any(|host| host == name)
        {
            return Err(SimError::Scenario(format!(
                "{name:?} cannot name a client host (reserved or empty)"
            )));
        }
        let inbox = Arc::new(Inbox::default());
        {
            let (inbox, recorder, outcomes) =
                (inbox.clone(), self.recorder.clone(), self.outcomes.clone());
            let host = name.to_string();
            self.sim.host(name, move || {
                run_client(
                    host.clone(),
                    inbox.clone(),
                    recorder.clone(),
                    outcomes.clone(),
                )
            });
        }
        self.clients.insert(name.to_string(), inbox.clone());
        Ok(inbox)
    }

    fn get_all(&mut self, requests: &[Request]) -> Result<(), SimError> {
        let mut issued = Vec::with_capacity(requests.len());
        for r in requests {
            if !r.path.starts_with('/') {
                return Err(SimError::Scenario(format!(
                    "get: path {:?} must start with '/'",
                    r.path
                )));
            }
            let inbox = self.client(&r.host)?;
            let request = self.next_request;
            self.next_request += 1;
            inbox
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Command {
                    request,
                    path: r.path.clone(),
                });
            inbox.notify.notify_one();
            issued.push((request, r.path.clone()));
        }
        // Clients time out on their own; this bound only catches a client that never answers.
        let deadline = self.now_ms() + REQUEST_TIMEOUT_MS + 1_000;
        loop {
            let done = {
                let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
                issued.iter().all(|(id, _)| outcomes.contains_key(id))
            };
            if done {
                break;
            }
            if self.now_ms() >= deadline {
                return Err(self.timeout(format!(
                    "requests {:?} were not completed by their client hosts",
                    issued
                )));
            }
            self.tick()?;
        }
        let outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        for (id, path) in issued {
            if let Some(done) = outcomes.get(&id) {
                self.latest.insert(path, (id, done.clone()));
            }
        }
        Ok(())
    }

    fn expect(&mut self, expectation: &Expectation) -> Result<(), SimError> {
        let path = expectation.path();
        let Some((request, done)) = self.latest.get(path) else {
            return Err(
                self.expectation_failed(expectation, format!("no GET {path} has completed"))
            );
        };
        let seen = match (&done.outcome, expectation) {
            // A page of lines: only those of the metrics or keys asked about.
            (Outcome::Response { status, body }, Expectation::BodyLines { lines, .. }) => {
                let key = |l: &str| l.split([' ', '{']).next().unwrap_or("").to_owned();
                let keys: Vec<String> = lines.iter().map(|l| key(l)).collect();
                let related: Vec<&str> = body.lines().filter(|l| keys.contains(&key(l))).collect();
                format!("answered {status} with, of those names: {related:?}")
            }
            (Outcome::Response { status, body }, _) => format!("answered {status} {body}"),
            (Outcome::Failed(f), _) => format!("failed: {f:?}"),
        };
        let actual = format!(
            "GET {path} (request {request} from {} at {} ms) {seen}",
            done.host, done.at_ms
        );
        let met = match (expectation, &done.outcome) {
            (Expectation::Status { status, .. }, Outcome::Response { status: got, .. }) => {
                status == got
            }
            (Expectation::BodyJson { pointer, value, .. }, Outcome::Response { body, .. }) => {
                serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|json| json.pointer(pointer).cloned())
                    .is_some_and(|found| &found == value)
            }
            (Expectation::BodyLines { lines, .. }, Outcome::Response { body, .. }) => {
                lines.iter().all(|line| body.lines().any(|l| l == line))
            }
            (Expectation::Unreachable { .. }, Outcome::Failed(f)) => {
                matches!(f, Failure::Refused | Failure::TimedOut)
            }
            _ => false,
        };
        if !met {
            return Err(self.expectation_failed(expectation, actual));
        }
        self.recorder.record_at(
            self.now_ms(),
            WORLD_HOST,
            Event::ExpectationMet {
                expectation: expectation.clone(),
            },
        );
        Ok(())
    }

    fn expectation_failed(&self, expectation: &Expectation, actual: String) -> SimError {
        SimError::Expectation {
            at_ms: self.now_ms(),
            expected: expectation.to_string(),
            actual,
            trace: Box::new(self.trace()),
        }
    }
}

/// Runs `scenario` in a fresh world and returns its trace.
pub fn run(scenario: &Scenario) -> Result<Trace, SimError> {
    let mut world = World::new(scenario.seed);
    for step in &scenario.steps {
        world.apply(step)?;
    }
    Ok(world.trace())
}

// ---------------------------------------------------------------------------------------------
// Host software
// ---------------------------------------------------------------------------------------------

/// `HARNESS=provider` settings for a world's server: OpenAI's wire at [`MODEL_HOST`], a fixed
/// key, the adapter's defaults but for `timeout_ms` and `retries`.
pub fn provider_settings(timeout_ms: u64, retries: u32) -> chopin_server::config::ProviderSettings {
    chopin_server::config::ProviderSettings {
        family: chopin_server::config::ModelFamily::OpenAi,
        model: "sim-model".to_owned(),
        base_url: format!("http://{MODEL_HOST}:{GITHUB_PORT}/v1"),
        api_key: Some(chopin_server::config::Secret::new("sk-sim-operator")),
        reasoning: None,
        max_model_calls: 16,
        retries,
        timeout_ms,
        tool_result_max_bytes: 32 * 1024,
        max_output_tokens: None,
        offered: vec![(
            "sim-model-large".to_owned(),
            vec!["low".to_owned(), "high".to_owned()],
        )],
        list_models: false,
        image_models: Vec::new(),
    }
}

/// `CLASSIFIER_MODEL` settings for a world's server: OpenAI's wire at [`MODEL_HOST`] (the same
/// fake provider as the Planner's model), a fixed key, `timeout_ms`.
pub fn classifier_settings(timeout_ms: u64) -> chopin_server::config::ClassifierSettings {
    chopin_server::config::ClassifierSettings {
        family: chopin_server::config::ModelFamily::OpenAi,
        model: "sim-classifier".to_owned(),
        base_url: format!("http://{MODEL_HOST}:{GITHUB_PORT}/v1"),
        api_key: Some(chopin_server::config::Secret::new("sk-sim-operator")),
        timeout_ms,
    }
}

/// One incarnation of a server host: start (take the lease, clear owner references), listen,
/// serve until the lease is lost or a stop is asked.
#[allow(clippy::too_many_arguments)]
async fn run_server(
    host: String,
    incarnation: u32,
    store: Arc<dyn Store>,
    runtime: Runtime,
    recorder: Recorder,
    configure: Option<Configure>,
    server_state: Arc<Mutex<Option<App>>>,
    server_apps: ServerApps,
    mut stop: tokio::sync::watch::Receiver<u32>,
) -> turmoil::Result {
    // A stop asked before this incarnation began is not for it.
    stop.borrow_and_update();
    recorder.record_in_host(&host, Event::ServerBooting { incarnation });
    // The data dir is unused with the memory store.
    let mut config = Config::defaults_with_data_dir(PathBuf::from("/sim/server"));
    // No scenario scripts a worker session yet.
    config.background_jobs = false;
    config.github_api_url = format!("http://{GITHUB_HOST}:{GITHUB_PORT}");
    config.github_web_url = config.github_api_url.clone();
    config.github_mcp_url = format!("http://{GITHUB_MCP_HOST}:{GITHUB_PORT}/mcp/");
    config.app_origin = SERVER_ORIGIN.to_owned();
    config.github_app_client_id = Some(chopin_fixtures::github::DEFAULT_CLIENT_ID.to_owned());
    config.github_app_client_secret = Some(chopin_server::config::Secret::new(
        chopin_fixtures::github::DEFAULT_CLIENT_SECRET,
    ));
    // A fixed key: nothing is written outside the simulation, and every incarnation can open
    // what an earlier one sealed.
    config.session_encryption_key = Some(chopin_server::config::Secret::new("5a".repeat(32)));
    if let Some(configure) = &configure {
        configure(&mut config);
    }
    let observer: Arc<dyn chopin_server::observe::Observer> = Arc::new(TraceObserver {
        recorder: recorder.clone(),
        host: host.clone(),
    });
    let running =
        match chopin_server::app::start_observed(config, store, runtime, Some(observer)).await {
            Ok(running) => running,
            Err(e) => {
                recorder.record_in_host(
                    &host,
                    Event::ServerStartFailed {
                        incarnation,
                        error: e.to_string(),
                    },
                );
                return Ok(());
            }
        };
    let listener = match TurmoilListener::bind(("0.0.0.0", SERVER_PORT)).await {
        Ok(listener) => listener,
        Err(e) => {
            recorder.record_in_host(
                &host,
                Event::ServerStartFailed {
                    incarnation,
                    error: format!("bind: {e}"),
                },
            );
            running.stop().await;
            return Ok(());
        }
    };
    recorder.record_in_host(
        &host,
        Event::ServerStarted {
            incarnation,
            writer_epoch: running.app().lease.epoch(),
        },
    );
    *server_state.lock().unwrap_or_else(|e| e.into_inner()) = Some(running.app().clone());
    server_apps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(host.clone(), running.app().clone());
    let lost = running.lease_lost();
    let asked = async move {
        let _ = stop.changed().await;
    };
    let reason = Arc::new(Mutex::new(String::new()));
    let why = reason.clone();
    let shutdown = running.app().shutdown.clone();
    let (told, where_) = (recorder.clone(), host.clone());
    tokio::spawn(async move {
        let because = tokio::select! {
            () = lost => {
                told.record_in_host(&where_, Event::WriterLeaseLost { incarnation });
                "writer lease lost"
            }
            () = asked => "graceful stop",
        };
        *why.lock().unwrap_or_else(|e| e.into_inner()) = because.to_owned();
        shutdown.begin();
    });
    let served = chopin_server::serve(listener, running.router(), running.stopping()).await;
    let stopped = running.stop().await;
    let reason = match served {
        Ok(()) => reason.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        Err(e) => format!("serving failed: {e}"),
    };
    recorder.record_in_host(
        &host,
        Event::ServerStopped {
            incarnation,
            reason,
            drained: stopped.drained,
            lease_released: stopped.released,
        },
    );
    Ok(())
}

/// A scripted client host: performs each request it is handed, concurrently.
async fn run_client(
    host: String,
    inbox: Arc<Inbox>,
    recorder: Recorder,
    outcomes: Outcomes,
) -> turmoil::Result {
    loop {
        inbox.notify.notified().await;
        let pending: Vec<Command> = inbox
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for command in pending {
            tokio::task::spawn_local(perform(
                host.clone(),
                command,
                recorder.clone(),
                outcomes.clone(),
            ));
        }
    }
}

async fn perform(host: String, command: Command, recorder: Recorder, outcomes: Outcomes) {
    let Command { request, path } = command;
    recorder.record_in_host(
        &host,
        Event::RequestSent {
            request,
            method: "GET".into(),
            path: path.clone(),
        },
    );
    let url = format!("http://{SERVER_HOST}:{SERVER_PORT}{path}");
    let answer = tokio::time::timeout(
        Duration::from_millis(REQUEST_TIMEOUT_MS),
        connector::get(&TurmoilConnector, &url),
    )
    .await;
    let outcome = match answer {
        Ok(Ok(response)) => Outcome::Response {
            status: response.status.as_u16(),
            body: String::from_utf8_lossy(&response.body).into_owned(),
        },
        Ok(Err(HttpError::Connect(_, e))) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Outcome::Failed(Failure::Refused)
        }
        Ok(Err(e)) => Outcome::Failed(Failure::Other {
            error: e.to_string(),
        }),
        Err(_) => Outcome::Failed(Failure::TimedOut),
    };
    let event = match &outcome {
        Outcome::Response { status, body } => Event::ResponseReceived {
            request,
            path: path.clone(),
            status: *status,
            body: if path == "/metrics" {
                // The exporter keeps a family's series in a hash map: their order is not part of
                // what the page says, so the trace records its lines sorted.
                let mut lines: Vec<&str> = body.lines().collect();
                lines.sort_unstable();
                lines.join("\n")
            } else {
                body.clone()
            },
        },
        Outcome::Failed(failure) => Event::RequestFailed {
            request,
            path: path.clone(),
            failure: failure.clone(),
        },
    };
    recorder.record_in_host(&host, event);
    outcomes.lock().unwrap_or_else(|e| e.into_inner()).insert(
        request,
        Completed {
            at_ms: host_now_ms(),
            host,
            outcome,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_round_trips_through_json() {
        let scenario = Scenario {
            seed: 7,
            steps: vec![
                Step::AwaitServer { within_ms: 1_000 },
                Step::Get {
                    host: "alice".into(),
                    path: "/healthz".into(),
                },
                Step::GetConcurrently {
                    requests: vec![Request {
                        host: "bob".into(),
                        path: "/readyz".into(),
                    }],
                },
                Step::Advance { ms: 250 },
                Step::RestartServer,
                Step::StartServerOn {
                    host: "server-b".into(),
                },
                Step::Expect(Expectation::BodyJson {
                    path: "/readyz".into(),
                    pointer: "/store".into(),
                    value: serde_json::json!("memory"),
                }),
                Step::Expect(Expectation::Unreachable {
                    path: "/readyz".into(),
                }),
            ],
        };
        let text = serde_json::to_string(&scenario).unwrap();
        assert!(text.contains(r#"{"step":"advance","ms":250}"#), "{text}");
        assert!(
            text.contains(r#"{"step":"start-server-on","host":"server-b"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#"{"step":"expect","expect":"unreachable","path":"/readyz"}"#),
            "{text}"
        );
        let back: Scenario = serde_json::from_str(&text).unwrap();
        assert_eq!(back, scenario);
    }

    #[test]
    fn the_trace_hash_changes_with_any_event() {
        let mut trace = Trace {
            seed: 1,
            events: vec![TraceEvent {
                at_ms: 3,
                host: SERVER_HOST.into(),
                event: Event::ServerCrashed,
            }],
        };
        let before = trace.hash();
        assert_eq!(before.len(), 64);
        assert_eq!(before, trace.clone().hash());
        trace.events[0].at_ms = 4;
        assert_ne!(before, trace.hash());
    }
}
