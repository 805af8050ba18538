//! Scenario files: a reconnect edge case written as data, played against the standard cast.
//!
//! Owns: the file format ([`ScenarioFile`], one TOML file per scenario, its [`Action`]s one per
//! line), playing a file in a [`World`] ([`play`]), the readable timeline of a trace
//! ([`timeline`]), and how a file's run is judged and reported ([`Verdict`]).
//! Does not own: the world, its actors and the trace ([`crate::world`], [`crate::actors`]), the
//! standard cast ([`crate::cast`]), or the command that runs files (`chopin-sim`).
//!
//! Times in a file are simulated milliseconds since the world began, written as a number, a mark
//! (`"detached"`), or a mark plus or minus a number (`"detached + 119999"`). A mark is set by an
//! `until` step (the simulated millisecond of the event it waited for) or a `mark` step. Events
//! are matched on their timeline line: a host (optional) and a piece of text the line contains,
//! searched from the start of the last action (or from `since`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use chopin_fixtures::github::Permission;
use chopin_server::planner::PresenceState;
use chopin_server::store::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actors::{Agent, Browser, TurnScript, TurnStep};
use crate::cast::{block_on, cast_with, Cast};
use crate::invariants::{Invariants, Sends, Typed};
use crate::world::{
    Event, Expectation, SimError, Step, Trace, TraceEvent, World, WorldOptions, SERVER_ORIGIN,
};

/// How long a step that waits for something may take by default (simulated ms).
const DEFAULT_WAIT_MS: u64 = 10_000;

/// One scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// What the scenario shows, in a sentence (the rule's id first, by convention).
    pub name: String,
    /// The seed it runs with unless one is given.
    #[serde(default)]
    pub seed: u64,
    /// Every message takes exactly this long; otherwise turmoil draws latencies from the seed.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Server settings other than the defaults.
    #[serde(default)]
    pub settings: Settings,
    /// Known bugs to plant in the server (`grace-hold-off`, `journal-after-relay`,
    /// `ownership-recheck-off`, `sends-cap-off`, `journal-whole-state`, `write-cap-small`,
    /// `poison-guard-off`, `resume-wait-unbounded`), to show the invariants catch them. Empty in every scenario of `scenarios/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plant: Vec<String>,
    /// Store calls held this many simulated ms each, by method (`append_transcript = 50`):
    /// slow storage, so that requests overlap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slow_store: BTreeMap<String, u64>,
    /// Played as exploration plays (see [`Mode::Explore`]): what `explore` writes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lenient: bool,
    /// The steps, in order.
    pub steps: Vec<Action>,
}

impl ScenarioFile {
    pub fn parse(text: &str) -> Result<ScenarioFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The file as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# could not be written: {e}\n"))
    }

    pub fn read(path: &Path) -> Result<ScenarioFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The server settings a scenario may set (simulated milliseconds), as the environment
/// variables of the same names would.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `provider`: the server runs the Planner itself against the fake model provider (on the
    /// `model` host), and `provider-reply` steps script it. Unset: `remote`.
    pub harness: Option<String>,
    /// With `harness = "provider"`: `PROVIDER_TIMEOUT_MS` (default 60000).
    pub provider_timeout_ms: Option<u64>,
    /// With `harness = "provider"`: `PROVIDER_RETRIES` (default 2).
    pub provider_retries: Option<u32>,
    /// `PLANNER_ATTACH_GRACE_MS`.
    pub planner_attach_grace_ms: Option<u64>,
    /// `AGENT_CONNECTION_TIMEOUT_MS`.
    pub agent_connection_timeout_ms: Option<u64>,
    /// `AGENT_ACCESS_RECHECK_MS`.
    pub agent_access_recheck_ms: Option<u64>,
    /// `SESSION_MAX_AGE_MS`: how long a browser sign-in lasts.
    pub session_max_age_ms: Option<u64>,
    /// `BACKGROUND_JOBS`: `true` runs background jobs (off by default in the simulator).
    pub background_jobs: Option<bool>,
    /// `CLASSIFIER_MODEL`: `true` checks Planner messages with a classifier model on the fake
    /// model provider (the `model` host, whatever the harness; `provider-reply` steps script
    /// its judgments in call order). Unset: the server's built-in check.
    pub classifier: Option<bool>,
    /// With `classifier = true`: `CLASSIFIER_TIMEOUT_MS` (default 20000).
    pub classifier_timeout_ms: Option<u64>,
    /// `PLANNER_PATIENCE_MS`: how long a machine asked to run a Planner has to attach.
    pub planner_patience_ms: Option<u64>,
    /// `DEFAULT_MACHINE_IDLE_MS`: how long Default machine keeps an unused document.
    pub default_machine_idle_ms: Option<u64>,
    /// `LIVE_BUILD=on`.
    #[serde(default)]
    pub live_build: bool,
}

impl Settings {
    /// The server configuration these settings and `plant` change (none set, nothing changed).
    fn configure(&self, plant: &[String]) -> crate::world::Configure {
        let s = self.clone();
        let planted = |name: &str| plant.iter().any(|p| p == name);
        let grace_hold_off = planted("grace-hold-off");
        let journal_after_relay = planted("journal-after-relay");
        let ownership_recheck_off = planted("ownership-recheck-off");
        let sends_cap_off = planted("sends-cap-off");
        let journal_whole_state = planted("journal-whole-state");
        let write_cap_small = planted("write-cap-small");
        let poison_guard_off = planted("poison-guard-off");
        let resume_wait_unbounded = planted("resume-wait-unbounded");
        let claim_refusal_ignored = planted("claim-refusal-ignored");
        let run_end_split = planted("run-end-split");
        std::sync::Arc::new(move |c| {
            c.planted.grace_hold_off = grace_hold_off;
            c.planted.journal_after_relay = journal_after_relay;
            c.planted.ownership_recheck_off = ownership_recheck_off;
            c.planted.sends_cap_off = sends_cap_off;
            c.planted.journal_whole_state = journal_whole_state;
            c.planted.write_cap_small = write_cap_small;
            c.planted.poison_guard_off = poison_guard_off;
            c.planted.resume_wait_unbounded = resume_wait_unbounded;
            c.planted.claim_refusal_ignored = claim_refusal_ignored;
            c.planted.run_end_split = run_end_split;
            if s.classifier == Some(true) {
                c.classifier = Some(crate::world::classifier_settings(
                    s.classifier_timeout_ms.unwrap_or(20_000),
                ));
            }
            if s.harness.as_deref() == Some("provider") {
                c.harness = "provider".to_owned();
                c.provider = Some(crate::world::provider_settings(
                    s.provider_timeout_ms.unwrap_or(60_000),
                    s.provider_retries.unwrap_or(2),
                ));
            }
            if let Some(ms) = s.planner_attach_grace_ms {
                c.planner_attach_grace_ms = ms;
            }
            if let Some(ms) = s.agent_connection_timeout_ms {
                c.agent_connection_timeout_ms = ms;
            }
            if let Some(ms) = s.agent_access_recheck_ms {
                c.access_recheck_ms = ms;
            }
            if let Some(ms) = s.session_max_age_ms {
                c.session_max_age_ms = ms;
            }
            if let Some(on) = s.background_jobs {
                c.background_jobs = on;
            }
            if let Some(ms) = s.planner_patience_ms {
                c.planner_patience_ms = ms;
            }
            c.live_build = s.live_build;
            if let Some(ms) = s.default_machine_idle_ms {
                c.default_machine_idle_ms = ms;
            }
        })
    }
}

/// An update yrs 0.28 applies, leaving a delete set it can never merge: every later encode of a
/// document holding it panics (issue 15's regression update).
const POISON: &[u8] = &[
    0x01, 0x01, 0xd9, 0x0f, 0x00, 0x92, 0x44, 0xf1, 0x07, 0x00, 0x07, 0x42, 0x2d, 0x73, 0x69, 0x64,
    0x65, 0x20, 0x01, 0xf1, 0x07, 0x01, 0x1a, 0x02,
];

/// Which events a step looks for: those of `host` (any host if absent) whose timeline line
/// contains `text`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    #[serde(default)]
    pub host: Option<String>,
    pub text: String,
}

/// One step of a scenario file: `do` names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Action {
    // --- the cast ---------------------------------------------------------------------------
    /// An agent client `name` of `as` (a login of the cast) connects; waits until it has.
    Agent {
        name: String,
        #[serde(rename = "as")]
        login: String,
    },
    /// The agent attaches to the cast's document (with `features`); waits for the answer.
    Attach {
        agent: String,
        #[serde(default)]
        features: Vec<String>,
        #[serde(default = "yes")]
        wait: bool,
        /// The document's slug (default: the cast's `field-notes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        document: Option<String>,
    },
    /// The agent detaches (close 1000 after `detach`).
    Detach {
        agent: String,
    },
    /// The agent closes its link without detaching.
    Close {
        agent: String,
    },
    /// The agent stops reading and answering: its link goes silent.
    Silence {
        agent: String,
    },
    /// The agent sends client `resume` naming every session its last `attached` kept (`all`,
    /// the default) or none.
    Resume {
        agent: String,
        #[serde(default = "yes")]
        all: bool,
    },
    /// The agent plays this turn script when the server asks for a turn (steps as in
    /// `TurnStep`: `{ step = "started" }`, `{ step = "host-tool-call", name, input }`,
    /// `{ step = "text", text }`, `{ step = "await-steers", count }`, `{ step = "sleep", ms }`,
    /// `{ step = "ignore-abort" }`, `{ step = "end", status, output? }` (output: a worker's structured result), `{ step = "drop" }`).
    Turn {
        agent: String,
        script: Vec<TurnStep>,
    },
    /// A browser `name` signed in as `as` opens the document's room; waits for its first message.
    Browser {
        name: String,
        #[serde(rename = "as")]
        login: String,
        /// The document's slug (default: the cast's `field-notes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        document: Option<String>,
    },
    /// A document of `octo/plans` is created in storage, as the documents API would: `slug`,
    /// and `parent` (a slug) for a child.
    CreateDocument {
        slug: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
    },
    /// The browser sends `chat:send`.
    Chat {
        browser: String,
        id: String,
        text: String,
    },
    /// The browser types `text` at the end of the document as it knows it (its own edits), sent
    /// as a Yjs sync update.
    Type {
        browser: String,
        text: String,
    },
    /// The browser sends a hostile Yjs update: `gapped` (its client's clock starts after 1,000
    /// changes never sent, then `bytes` of text), `duplicate` (its last update again), or
    /// `poison` (an update yrs takes that leaves a document it cannot encode).
    HostileUpdate {
        browser: String,
        kind: String,
        #[serde(default = "default_hostile_bytes")]
        bytes: usize,
    },
    /// The browser asks for the whole document as a client with nothing does (Yjs sync step 1
    /// with an empty state vector); the server answers with sync step 2.
    Sync {
        browser: String,
    },
    /// The browser deletes every other character of the text it typed, in one update: a
    /// document whose delete set holds many ranges.
    Scatter {
        browser: String,
    },
    /// The browser fills the document near its limits: `bytes` of map entries (Yjs state the
    /// source does not show), in updates of at most 256 KiB.
    Fill {
        browser: String,
        bytes: usize,
    },
    /// The browser sends any JSON message (`{ type = "planner:stop" }`, say).
    Send {
        browser: String,
        json: Value,
    },
    /// The browser leaves (close 1000).
    Leave {
        browser: String,
    },
    /// `as` (mona, lisa or hubot) signs in through the real OAuth routes: a browser sign-in of
    /// theirs, for `browser` steps (mona and lisa are signed in from the start).
    SignIn {
        #[serde(rename = "as")]
        login: String,
    },
    /// `as` signs out through the real route (the browser sign-in ends).
    SignOut {
        #[serde(rename = "as")]
        login: String,
    },
    /// `as` resets the document's Planner through the HTTP route (bearer token): whoever holds
    /// it is let go at once.
    Reset {
        #[serde(rename = "as")]
        login: String,
    },
    /// The document (default: the cast's) gets an approved implementation graph of `tasks`
    /// (task ids, each depending on the one before), in storage, as the Planner's draft and a
    /// person's approval would make it: a new version drafted at the plan's revision and
    /// approved (an earlier approved one is superseded).
    ApprovedGraph {
        tasks: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        document: Option<String>,
    },
    /// `as` calls MCP tool `tool` with `args` over `/mcp`, from a one-off client host `name`;
    /// the answer is recorded on that host as `mcp <tool> answered {…}`. In `args`, the string
    /// `"$doc"` is the cast's document id and `"$run"` the run id of the last claim answered.
    /// `wait = false` sends it and goes on at once (two calls at one instant).
    Mcp {
        name: String,
        #[serde(rename = "as")]
        login: String,
        tool: String,
        args: Value,
        #[serde(default = "yes")]
        wait: bool,
    },
    // --- paired machines ----------------------------------------------------------------------
    /// The connector of machine `name` pairs it for `as`, with a token of its own, from a
    /// client host `name` (`release`: the connector release it tells).
    Machine {
        name: String,
        #[serde(rename = "as")]
        login: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        release: Option<String>,
    },
    /// The cast's document gets a graph of `tasks` (as [`Action::ApprovedGraph`] drafts it),
    /// approved with a build queued on `machine` by its owner in the same commit, in storage, as
    /// a person's Build plan press makes it (LIFE-05).
    QueueBuild {
        machine: String,
        tasks: Vec<String>,
    },
    /// `machine`'s connector picks up its oldest queued build (LIFE-48); the bridge it is handed
    /// is then the token of `as = "<machine>-bridge"` in an `mcp` step.
    PickUp {
        machine: String,
    },
    /// `machine`'s connector polls its queued builds, saying (with `auto_build`) that its owner
    /// allowed automatic builds on it (LIFE-79): the machine is online for 60 s. With `count`,
    /// that many must be queued.
    PollBuilds {
        machine: String,
        #[serde(default)]
        auto_build: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<usize>,
    },
    /// `as` moves the cast's document to `machine` (absent: to none).
    ChooseMachine {
        #[serde(rename = "as")]
        login: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
    },
    /// `as` makes `machine` their favourite (absent: none), which Default machine uses for a
    /// document nobody chose a machine for when they open it.
    FavouriteMachine {
        #[serde(rename = "as")]
        login: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
    },
    /// The machine's connector asks which documents want it; the step fails unless it is told
    /// `count` of them (and, with `by_default`, that each was chosen that way or not).
    MachineDocuments {
        machine: String,
        count: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by_default: Option<bool>,
    },
    /// The machine's connector asks for a Planner credential for the cast's document; with
    /// `agent`, a scripted backend of that name connects with it (attach it with `attach`).
    Credential {
        machine: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// The machine's connector — the scripted one of `chopin_fixtures::connector`, from a client
    /// host `<machine>-launch` — launches a backend for the cast's document that exits before
    /// attaching, `stderr` its last line: it asks for a credential, counts the failed launch,
    /// and reports it when its release is 0.0.23 or newer (an older one stays silent). The
    /// host records `launch exited attempts=N reported=true|false`.
    LaunchExits {
        machine: String,
        #[serde(default)]
        stderr: String,
    },
    /// The machine's connector reports a launch (`POST /api/connector/planner/failure`).
    LaunchReport {
        machine: String,
        #[serde(default)]
        attempts: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr: Option<String>,
        #[serde(default)]
        stayed_up: bool,
    },
    /// `as` (the machine's owner) revokes the machine.
    RevokeMachine {
        machine: String,
        #[serde(rename = "as")]
        login: String,
    },
    // --- GitHub -------------------------------------------------------------------------------
    /// GitHub gives `login` this role on the cast's repository (`read`, `write`, `admin`), or
    /// takes every role away (`none`).
    GithubRole {
        login: String,
        role: String,
    },
    /// GitHub revokes every token of `login`.
    GithubRevokeTokens {
        login: String,
    },
    /// GitHub answers nothing but errors (`on = true`) or is back (`on = false`).
    GithubOutage {
        on: bool,
    },
    // --- the model provider (`harness = "provider"`) ------------------------------------------
    /// The fake provider's answer to the next model call, as `fixtures::model_provider::Reply`
    /// (`reply = "stream"` with `chunks`, `reply = "error"` with `status`, or `reply = "hang"`).
    ProviderReply {
        reply: chopin_fixtures::model_provider::Reply,
        /// Ahead of the replies scripted so far (the next call takes it), rather than after.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        next: bool,
    },
    /// The fake provider answers every call with `status` (a 503 outage), or is back (unset).
    ProviderOutage {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    // --- the network and the server -----------------------------------------------------------
    /// Messages between hosts `a` and `b` are lost until `repair`.
    Partition {
        a: String,
        b: String,
    },
    Repair {
        a: String,
        b: String,
    },
    /// Every message between `a` and `b` takes `ms` from now on (absent: the world's own
    /// latency again).
    Latency {
        a: String,
        b: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
    },
    /// Messages between `a` and `b` are lost with probability `rate` (0 ends it).
    Drops {
        a: String,
        b: String,
        rate: f64,
    },
    /// The server host crashes (no graceful stop).
    Crash,
    /// The crashed server host starts again.
    Start,
    /// Crash then start, at one instant.
    Restart,
    /// A further server incarnation starts on host `host` over the same store (a second
    /// process on one database), while the server host keeps running; `await-server` waits
    /// for it.
    StartOn {
        host: String,
    },
    /// The server stops gracefully, as on SIGTERM; waits until it has (at most `within_ms`).
    Stop {
        #[serde(default = "default_wait")]
        within_ms: u64,
    },
    /// Waits until the server's current incarnation is serving.
    AwaitServer {
        #[serde(default = "default_wait")]
        within_ms: u64,
    },
    /// A client host sends `GET path`; checked with `expect`.
    Get {
        host: String,
        path: String,
    },
    // --- time ---------------------------------------------------------------------------------
    /// Simulated time passes.
    Advance {
        ms: u64,
    },
    /// Simulated time passes until `at`.
    AdvanceTo {
        at: String,
    },
    /// Time passes until an event matches (at most `within_ms`); `mark` names its millisecond.
    Until {
        #[serde(flatten)]
        event: Match,
        #[serde(default)]
        mark: Option<String>,
        #[serde(default = "default_wait")]
        within_ms: u64,
        #[serde(default)]
        since: Option<String>,
    },
    /// Names a millisecond: `at` (default now).
    Mark {
        name: String,
        #[serde(default)]
        at: Option<String>,
    },
    // --- expectations -------------------------------------------------------------------------
    /// An event matches: the first from `since`, at exactly `at`, or within `within` (both
    /// ends included), or anywhere from `since` if neither is given.
    ExpectEvent {
        #[serde(flatten)]
        event: Match,
        #[serde(default)]
        at: Option<String>,
        #[serde(default)]
        within: Option<[String; 2]>,
        #[serde(default)]
        since: Option<String>,
    },
    /// No event matches from `since` until before `before` (default: up to now).
    ExpectNoEvent {
        #[serde(flatten)]
        event: Match,
        #[serde(default)]
        since: Option<String>,
        #[serde(default)]
        before: Option<String>,
    },
    /// The server's presence for the document: `attached`, `detached`, `disconnected`,
    /// `starting` or `none`, and whose; with `failure`, the reason told (`none`: no failure).
    ExpectPresence {
        state: String,
        #[serde(default)]
        login: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
    },
    /// The stored owner of the document: its generation and holder (none when absent).
    ExpectHolder {
        generation: i64,
        #[serde(default)]
        login: Option<String>,
    },
    /// An expectation on the latest answer to a `get` (`{ expect = "status", path, status }`,
    /// `body-json`, `body-lines`, `unreachable`).
    Expect {
        check: Expectation,
    },
}

fn yes() -> bool {
    true
}

fn default_hostile_bytes() -> usize {
    16 * 1024
}

fn default_wait() -> u64 {
    DEFAULT_WAIT_MS
}

impl Action {
    /// Whether the step checks rather than acts or waits.
    pub fn expects(&self) -> bool {
        matches!(
            self,
            Action::ExpectEvent { .. }
                | Action::ExpectNoEvent { .. }
                | Action::ExpectPresence { .. }
                | Action::ExpectHolder { .. }
                | Action::Expect { .. }
        )
    }

    /// Whether the step does something (rather than wait, mark or check): searches for events
    /// start where the last such step began.
    fn acts(&self) -> bool {
        !self.expects()
            && !matches!(
                self,
                Action::Advance { .. }
                    | Action::AdvanceTo { .. }
                    | Action::Until { .. }
                    | Action::Mark { .. }
            )
    }
}

/// How a run of a file ended.
#[derive(Debug)]
pub struct Verdict {
    pub seed: u64,
    /// The trace, complete or up to the failure.
    pub trace: Trace,
    /// `None` when every step held; otherwise the step (1-based) and why it failed.
    pub failure: Option<(usize, String)>,
    /// Whether the failure is an invariant broken (rather than a step or an expectation).
    pub violation: bool,
    /// The simulated millisecond the run ended at.
    pub ended_ms: u64,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// Plays `file` with `seed` (the file's own when `None`).
pub fn play(file: &ScenarioFile, seed: Option<u64>) -> Verdict {
    let mode = if file.lenient {
        Mode::Explore
    } else {
        Mode::Strict
    };
    play_as(file, seed, mode)
}

/// Holds each store call named in `slow` for its ms.
fn slow_store(slow: &BTreeMap<String, u64>) -> Option<crate::world::HoldStoreCalls> {
    if slow.is_empty() {
        return None;
    }
    let slow = slow.clone();
    Some(std::sync::Arc::new(move |_incarnation, method, _write| {
        let ms = *slow.get(method)?;
        Some(
            Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms)))
                as chopin_server::store::instrumented::Hold,
        )
    }))
}

/// How a file is played.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every step must succeed and every expectation hold (`run`, `check`).
    Strict,
    /// Under explored faults: expectations are skipped and a step that cannot do what it says
    /// (a wait that times out, a time already past) is passed over; only the invariants judge.
    Explore,
}

/// Plays `file` in `mode`; the invariants ([`crate::invariants`]) are checked after every step.
pub fn play_as(file: &ScenarioFile, seed: Option<u64>, mode: Mode) -> Verdict {
    let seed = seed.unwrap_or(file.seed);
    let Cast {
        world,
        mona,
        lisa,
        mona_cookie,
        lisa_cookie,
        doc,
    } = cast_with(
        seed,
        WorldOptions {
            fixed_latency_ms: file.latency_ms,
            configure: Some(file.settings.configure(&file.plant)),
            hold_store_calls: slow_store(&file.slow_store),
            hold_store_calls_on: None,
            fail_store_calls_on: None,
        },
    );
    let mut run = Run {
        world,
        doc,
        tokens: BTreeMap::from([("mona".to_owned(), mona), ("lisa".to_owned(), lisa)]),
        cookies: BTreeMap::from([
            ("mona".to_owned(), mona_cookie),
            ("lisa".to_owned(), lisa_cookie),
        ]),
        agents: BTreeMap::new(),
        browsers: BTreeMap::new(),
        marks: BTreeMap::new(),
        acted_at: 0,
        docs: BTreeMap::from([("field-notes".to_owned(), doc)]),
        rooms: BTreeMap::new(),
        sends: Sends::new(),
        typists: BTreeMap::new(),
        hostile: BTreeMap::new(),
        last_update: BTreeMap::new(),
        typed: Typed::new(),
        provider: None,
        claimed: crate::invariants::Claimed::default(),
        machines: BTreeMap::new(),
        releases: BTreeMap::new(),
        connectors: BTreeMap::new(),
        hosts_used: BTreeMap::new(),
    };
    if file.settings.harness.as_deref() == Some("provider")
        || file.settings.classifier == Some(true)
    {
        run.provider = Some(run.world.serve_model_provider());
    }
    let mut invariants = Invariants::default();
    let mut failure = None;
    let mut violation = false;
    for (i, action) in file.steps.iter().enumerate() {
        if mode == Mode::Explore && action.expects() {
            continue;
        }
        if action.acts() {
            run.acted_at = run.world.now_ms();
        }
        let stepped = run.step(action);
        let docs: Vec<uuid::Uuid> = run.docs.values().copied().collect();
        if let Err(why) = invariants.check(
            &run.world,
            &docs,
            &run.rooms,
            &run.agents,
            &run.browsers,
            &run.sends,
            &run.typed,
            run.provider.as_ref(),
        ) {
            failure = Some((i + 1, format!("invariant broken — {why}")));
            violation = true;
            break;
        }
        if let Err(why) = invariants.lifecycle(&run.world, &docs, &run.claimed) {
            failure = Some((i + 1, format!("invariant broken — {why}")));
            violation = true;
            break;
        }
        if let Err(why) = stepped {
            if mode == Mode::Strict {
                failure = Some((i + 1, why));
                break;
            }
        }
    }
    Verdict {
        seed,
        ended_ms: run.world.now_ms(),
        trace: run.world.trace(),
        failure,
        violation,
    }
}

struct Run {
    world: World,
    doc: uuid::Uuid,
    tokens: BTreeMap<String, String>,
    cookies: BTreeMap<String, String>,
    agents: BTreeMap<String, Agent>,
    browsers: BTreeMap<String, Browser>,
    marks: BTreeMap<String, u64>,
    acted_at: u64,
    /// Documents by slug: the cast's and those the file created.
    docs: BTreeMap<String, uuid::Uuid>,
    /// The document each browser's room is on.
    rooms: BTreeMap<String, uuid::Uuid>,
    sends: Sends,
    /// Each typing browser's own copy of the document (its client id fixed at its first `type`).
    typists: BTreeMap<String, yrs::Doc>,
    /// Each browser's hostile client (its gapped updates), and the last update each sent.
    hostile: BTreeMap<String, yrs::Doc>,
    last_update: BTreeMap<String, Vec<u8>>,
    /// What each `type` step typed, and by whom.
    typed: Typed,
    /// The fake model provider, under `harness = "provider"`.
    provider: Option<chopin_fixtures::model_provider::FakeProvider>,
    /// Every run id an MCP claim was answered with, and its document, in answer order.
    claimed: crate::invariants::Claimed,
    /// Paired machines by name: their id and their own token.
    machines: BTreeMap<String, (String, String)>,
    /// The release each machine's connector told when it paired.
    releases: BTreeMap<String, Option<String>>,
    /// The scripted connector of each machine that launched a backend (it counts failures).
    connectors: BTreeMap<
        String,
        std::rc::Rc<
            tokio::sync::Mutex<chopin_fixtures::connector::Connector<crate::net::TurmoilDial>>,
        >,
    >,
    /// How many one-off HTTP hosts each name was given.
    hosts_used: BTreeMap<String, usize>,
}

fn sim(e: SimError) -> String {
    match e {
        SimError::Scenario(why) => why,
        SimError::Host { at_ms, error, .. } => format!("a host failed at {at_ms} ms: {error}"),
        SimError::Expectation {
            expected, actual, ..
        } => format!("expected {expected}, but {actual}"),
        SimError::Timeout { what, .. } => what,
    }
}

impl Run {
    fn step(&mut self, action: &Action) -> Result<(), String> {
        let doc = self.doc.to_string();
        match action {
            Action::Agent { name, login } => {
                let token = self.token(login)?;
                let agent = self.world.agent(name, &token);
                let a = agent.clone();
                self.agents.insert(name.clone(), agent);
                self.world
                    .advance_until(
                        DEFAULT_WAIT_MS,
                        &format!("agent {name} connected"),
                        move |_| {
                            a.log()
                                .iter()
                                .any(|e| matches!(e, crate::AgentEvent::Connected { .. }))
                        },
                    )
                    .map_err(sim)
            }
            Action::Attach {
                agent,
                features,
                wait,
                document,
            } => {
                let doc = self.document(document)?.to_string();
                let a = self.agent(agent)?;
                let features: Vec<&str> = features.iter().map(String::as_str).collect();
                a.attach_with_features(&doc, &features);
                if *wait {
                    let answered = a.clone();
                    self.world
                        .advance_until(
                            DEFAULT_WAIT_MS,
                            &format!("{agent}'s attach answered"),
                            move |_| answered.answer().is_some(),
                        )
                        .map_err(sim)?;
                }
                Ok(())
            }
            Action::Detach { agent } => {
                self.agent(agent)?.detach();
                Ok(())
            }
            Action::Close { agent } => {
                self.agent(agent)?.close();
                Ok(())
            }
            Action::Silence { agent } => {
                self.agent(agent)?.silence();
                Ok(())
            }
            Action::Resume { agent, all } => {
                self.agent(agent)?.resume(*all);
                Ok(())
            }
            Action::Turn { agent, script } => {
                self.agent(agent)?.script(TurnScript {
                    steps: script.clone(),
                });
                Ok(())
            }
            Action::CreateDocument { slug, parent } => {
                if self.docs.contains_key(slug) {
                    return Err(format!("a document {slug:?} exists already"));
                }
                let parent_id = match parent {
                    Some(p) => Some(self.document(&Some(p.clone()))?),
                    None => None,
                };
                let id = uuid::Uuid::from_u128(0x5eed + self.docs.len() as u128);
                block_on(
                    self.world
                        .store()
                        .create_document(&chopin_server::store::NewDocument {
                            id,
                            repo_owner: "octo".into(),
                            repo_name: "plans".into(),
                            slug: slug.clone(),
                            title: slug.clone(),
                            created_at_ms: crate::clock::SIM_EPOCH_MS + self.world.now_ms() as i64,
                            parent_id,
                            ..chopin_server::store::NewDocument::default()
                        }),
                )
                .map_err(|e| e.to_string())?;
                self.docs.insert(slug.clone(), id);
                Ok(())
            }
            Action::Browser {
                name,
                login,
                document,
            } => {
                let room = self.document(document)?;
                let doc = room.to_string();
                self.rooms.insert(name.clone(), room);
                let cookie = self
                    .cookies
                    .get(login)
                    .ok_or_else(|| {
                        format!("{login} has no browser sign-in (mona and lisa have one from the start; a sign-in step makes one)")
                    })?
                    .clone();
                let browser = self.world.browser(name, &cookie, &doc);
                let b = browser.clone();
                self.browsers.insert(name.clone(), browser);
                self.world
                    .advance_until(
                        DEFAULT_WAIT_MS,
                        &format!("browser {name} joined"),
                        move |_| !b.heard().is_empty() || b.closed().is_some(),
                    )
                    .map_err(sim)
            }
            Action::Chat { browser, id, text } => {
                self.browser(browser)?.send_chat(id, text);
                self.sends
                    .insert(id.clone(), (browser.clone(), text.clone()));
                Ok(())
            }
            Action::Type { browser, text } => {
                let b = self.browser(browser)?.clone();
                let client = 1_000 + self.typists.len() as u64;
                let doc = self
                    .typists
                    .entry(browser.clone())
                    .or_insert_with(|| chopin_document::ydoc::empty_doc(client));
                let source = chopin_document::ydoc::read_source(doc) + text;
                let update = chopin_document::ydoc::replace_source(doc, &source);
                b.send_binary(crate::actors::sync_update_frame(&update));
                self.last_update.insert(browser.clone(), update);
                self.typed.push((browser.clone(), text.clone()));
                Ok(())
            }
            Action::HostileUpdate {
                browser,
                kind,
                bytes,
            } => {
                let b = self.browser(browser)?.clone();
                let update = match kind.as_str() {
                    "gapped" => {
                        // A client of its own whose first 1,000 changes are never sent.
                        let client = 5_000 + self.hostile.len() as u64;
                        let doc = self.hostile.entry(browser.clone()).or_insert_with(|| {
                            let doc = chopin_document::ydoc::empty_doc(client);
                            chopin_document::ydoc::replace_source(&doc, &"a".repeat(1_000));
                            doc
                        });
                        let source = chopin_document::ydoc::read_source(doc) + &"g".repeat(*bytes);
                        chopin_document::ydoc::replace_source(doc, &source)
                    }
                    // Nothing sent yet: nothing to send again.
                    "duplicate" => match self.last_update.get(browser) {
                        Some(update) => update.clone(),
                        None => return Ok(()),
                    },
                    "poison" => POISON.to_vec(),
                    other => {
                        return Err(format!(
                            "hostile-update kind {other:?}: gapped, duplicate or poison"
                        ))
                    }
                };
                b.send_binary(crate::actors::sync_update_frame(&update));
                Ok(())
            }
            Action::Scatter { browser } => {
                let b = self.browser(browser)?.clone();
                let doc = self
                    .typists
                    .get(browser)
                    .ok_or_else(|| format!("{browser} has typed nothing to delete"))?;
                let update = {
                    use yrs::{GetString, Text, Transact};
                    let text = doc.get_or_insert_text(chopin_document::ydoc::SOURCE_TEXT);
                    let mut txn = doc.transact_mut();
                    let len = text.get_string(&txn).encode_utf16().count() as u32;
                    // From the end, so each index still names the character meant.
                    let mut at = len.saturating_sub(1);
                    while at > 0 {
                        text.remove_range(&mut txn, at, 1);
                        at = at.saturating_sub(2);
                    }
                    txn.encode_update_v1()
                };
                b.send_binary(crate::actors::sync_update_frame(&update));
                self.last_update.insert(browser.clone(), update);
                Ok(())
            }
            Action::Sync { browser } => {
                use yrs::updates::encoder::Encode;
                let step1 = yrs::sync::Message::Sync(yrs::sync::SyncMessage::SyncStep1(
                    yrs::StateVector::default(),
                ))
                .encode_v1();
                self.browser(browser)?.send_binary(step1);
                Ok(())
            }
            Action::Fill { browser, bytes } => {
                let b = self.browser(browser)?.clone();
                let client = 9_000 + self.typists.len() as u64;
                let doc = self
                    .typists
                    .entry(browser.clone())
                    .or_insert_with(|| chopin_document::ydoc::empty_doc(client));
                let map = doc.get_or_insert_map("meta");
                let mut filled = 0;
                let mut n = 0usize;
                while filled < *bytes {
                    use yrs::{Map, Transact};
                    let mut txn = doc.transact_mut();
                    let mut chunk = 0;
                    while chunk < 256 * 1024 - 1024 && filled < *bytes {
                        map.insert(&mut txn, format!("k{n}"), "v".repeat(100));
                        n += 1;
                        chunk += 110;
                        filled += 110;
                    }
                    let update = txn.encode_update_v1();
                    drop(txn);
                    b.send_binary(crate::actors::sync_update_frame(&update));
                    self.last_update.insert(browser.clone(), update);
                }
                Ok(())
            }
            Action::Send { browser, json } => {
                self.browser(browser)?.send_json(json.clone());
                Ok(())
            }
            Action::Leave { browser } => {
                self.browser(browser)?.leave();
                Ok(())
            }
            Action::SignOut { login } => self.sign_out(login),
            Action::SignIn { login } => {
                if !["mona", "lisa", "hubot"].contains(&login.as_str()) {
                    return Err(format!("{login} is not in the cast (mona, lisa, hubot)"));
                }
                let cookie = self.world.sign_in(login).map_err(sim)?;
                self.cookies.insert(login.clone(), cookie);
                Ok(())
            }
            Action::Reset { login } => {
                let token = self.token(login)?;
                let path = format!("/api/documents/{doc}/planner/reset");
                let request = http::Request::post(format!("{SERVER_ORIGIN}{path}"))
                    .header("authorization", format!("Bearer {token}"))
                    .body(axum::body::Bytes::new())
                    .map_err(|e| e.to_string())?;
                match self.send(&format!("reset-{login}"), request)? {
                    Some(200) => Ok(()),
                    other => Err(format!("the reset answered {other:?}")),
                }
            }
            Action::ApprovedGraph { tasks, document } => {
                let id = self.document(document)?;
                let (drafted, plan, now) = self.draft_graph(id, tasks)?;
                let store = self.world.store();
                block_on(store.change_graph(
                    id,
                    &chopin_server::store::GraphChange::Approve {
                        graph_version: drafted.counters.graph_version,
                        graph_revision: drafted.counters.graph_revision,
                        current_plan_revision: plan,
                    },
                    now,
                ))
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                Ok(())
            }
            Action::QueueBuild { machine, tasks } => {
                let doc = self.doc;
                let (drafted, plan, now) = self.draft_graph(doc, tasks)?;
                let (id, _) = self.machine(machine)?;
                let store = self.world.store();
                let id: uuid::Uuid = id.parse().map_err(|_| "a machine id")?;
                let owner = block_on(store.machine(id))
                    .map_err(|e| e.to_string())?
                    .ok_or("the machine is gone")?;
                let login = block_on(store.account(owner.owner_account_id))
                    .map_err(|e| e.to_string())?
                    .map(|a| a.login)
                    .unwrap_or_default();
                let build = chopin_server::store::NewBuild {
                    id: uuid::Uuid::from_u128(0xb01d_0000 + u128::from(self.world.now_ms())),
                    machine_id: id,
                    requested_by_account_id: owner.owner_account_id,
                    requested_by: login,
                    checkout: None,
                };
                block_on(store.approve_and_queue(
                    doc,
                    &chopin_server::store::GraphChange::Approve {
                        graph_version: drafted.counters.graph_version,
                        graph_revision: drafted.counters.graph_revision,
                        current_plan_revision: plan,
                    },
                    &build,
                    now,
                ))
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                Ok(())
            }
            Action::PollBuilds {
                machine,
                auto_build,
                count,
            } => {
                let (id, token) = self.machine(machine)?;
                let query = if *auto_build { "?autoBuild=true" } else { "" };
                let (status, listed) = self.http(
                    machine,
                    http::Method::GET,
                    &format!("/api/connector/machines/{id}/builds{query}"),
                    &token,
                    None,
                )?;
                let queued = listed["builds"].as_array().map(Vec::len);
                match count {
                    Some(n) if queued != Some(*n) => Err(format!(
                        "machine {machine} has {queued:?} builds queued, expected {n}: {status} {listed}"
                    )),
                    _ => Ok(()),
                }
            }
            Action::PickUp { machine } => {
                let (id, token) = self.machine(machine)?;
                let (status, listed) = self.http(
                    machine,
                    http::Method::GET,
                    &format!("/api/connector/machines/{id}/builds"),
                    &token,
                    None,
                )?;
                let build = listed["builds"][0]["buildId"]
                    .as_str()
                    .ok_or_else(|| format!("machine {machine} has no queued build: {status} {listed}"))?
                    .to_owned();
                let (status, picked) = self.http(
                    machine,
                    http::Method::POST,
                    &format!("/api/connector/builds/{build}/pickup"),
                    &token,
                    Some(serde_json::json!({ "machineId": id })),
                )?;
                let bridge = picked["build"]["bridge"]
                    .as_str()
                    .ok_or_else(|| format!("build {build} was not picked up: {status} {picked}"))?
                    .to_owned();
                self.tokens.insert(format!("{machine}-bridge"), bridge);
                Ok(())
            }
            Action::Mcp {
                name,
                login,
                tool,
                args,
                wait,
            } => {
                let token = self.token(login)?;
                let last_run = self.claimed.lock().unwrap_or_else(|e| e.into_inner()).last().map(|(run, _)| run.clone());
                let args = substitute(args, &doc, last_run.as_deref())?;
                let body = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": { "name": tool, "arguments": args },
                });
                let request = http::Request::post(format!("{SERVER_ORIGIN}/mcp"))
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(axum::body::Bytes::from(body.to_string()))
                    .map_err(|e| e.to_string())?;
                let recorder = self.world.recorder();
                let claimed = self.claimed.clone();
                let (host, tool, document) = (name.clone(), tool.clone(), self.doc);
                let client = async move {
                    let answer = match chopin_server::runtime::connector::send(
                        &crate::TurmoilConnector,
                        request,
                    )
                    .await
                    {
                        Ok(response) => {
                            let value: Value =
                                serde_json::from_slice(&response.body).unwrap_or(Value::Null);
                            let result = &value["result"];
                            let shown = result
                                .get("structuredContent")
                                .cloned()
                                .unwrap_or_else(|| value.clone());
                            if let Some(run) = shown["run"]["runId"].as_str() {
                                if tool == "start_implementation" {
                                    claimed
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .push((run.to_owned(), document));
                                }
                            }
                            format!(
                                "mcp {tool} answered {}",
                                crate::actors::sorted_keys(&serde_json::json!({
                                    "status": response.status.as_u16(),
                                    "isError": result["isError"],
                                    "content": shown,
                                }))
                            )
                        }
                        Err(e) => format!("mcp {tool} got no answer: {e}"),
                    };
                    recorder.record_in_host(&host, Event::Actor { what: answer });
                    Ok(())
                };
                if *wait {
                    self.world.run_client(name, client).map_err(sim)
                } else {
                    self.world.start_client(name, client);
                    Ok(())
                }
            }
            Action::Machine {
                name,
                login,
                release,
            } => {
                let token = self.world.github().issue_token(login);
                let (status, body) = self.http(
                    name,
                    http::Method::POST,
                    "/api/connector/machines",
                    &token,
                    Some(serde_json::json!({ "name": name, "release": release })),
                )?;
                let id = body["machine"]["id"]
                    .as_str()
                    .ok_or_else(|| format!("machine {name} was not paired: {status} {body}"))?
                    .to_owned();
                self.machines.insert(name.clone(), (id, token));
                self.releases.insert(name.clone(), release.clone());
                Ok(())
            }
            Action::ChooseMachine { login, machine } => {
                let token = self.token(login)?;
                let id = match machine {
                    Some(m) => Some(self.machine(m)?.0),
                    None => None,
                };
                let (status, body) = self.http(
                    "chooser",
                    http::Method::PUT,
                    &format!("/api/channels/{doc}/machine"),
                    &token,
                    Some(serde_json::json!({ "machineId": id })),
                )?;
                if status != 200 {
                    return Err(format!("the machine was not chosen: {status} {body}"));
                }
                Ok(())
            }
            Action::LaunchExits { machine, stderr } => {
                let (id, token) = self.machine(machine)?;
                let release = self.releases.get(machine).cloned().flatten();
                let connector = self
                    .connectors
                    .entry(machine.clone())
                    .or_insert_with(|| {
                        std::rc::Rc::new(tokio::sync::Mutex::new(
                            chopin_fixtures::connector::Connector::paired(
                                crate::net::TurmoilDial,
                                format!("{}:{}", crate::SERVER_HOST, crate::SERVER_PORT),
                                token,
                                id,
                                release.as_deref(),
                            ),
                        ))
                    })
                    .clone();
                let host = self.client_host(&format!("{machine}-launch"));
                let recorder = self.world.recorder();
                let (named, document, line) = (host.clone(), doc.to_string(), stderr.clone());
                let outcome = std::rc::Rc::new(std::cell::RefCell::new(None));
                let got = outcome.clone();
                let client = async move {
                    let launched = connector
                        .lock()
                        .await
                        .launch(
                            &document,
                            chopin_fixtures::connector::Launch::ExitEarly { stderr: line },
                        )
                        .await;
                    let what = match &launched {
                        Ok(chopin_fixtures::connector::Launched::Exited { attempts, reported }) => {
                            format!("launch exited attempts={attempts} reported={reported}")
                        }
                        Ok(other) => format!("launch came to {other:?}"),
                        Err(e) => format!("launch refused: {e}"),
                    };
                    recorder.record_in_host(&named, Event::Actor { what: what.clone() });
                    *got.borrow_mut() = Some(launched.is_ok());
                    Ok(())
                };
                self.world.run_client(&host, client).map_err(sim)?;
                let done = outcome.borrow_mut().take();
                match done {
                    Some(true) => Ok(()),
                    _ => Err(format!("machine {machine}'s launch did not come to an exit")),
                }
            }
            Action::FavouriteMachine { login, machine } => {
                let token = self.token(login)?;
                let id = match machine {
                    Some(m) => Some(self.machine(m)?.0),
                    None => None,
                };
                let (status, body) = self.http(
                    "favourer",
                    http::Method::PUT,
                    "/api/machines/favourite",
                    &token,
                    Some(serde_json::json!({ "machineId": id })),
                )?;
                if status != 204 && status != 200 {
                    return Err(format!("the favourite was not set: {status} {body}"));
                }
                Ok(())
            }
            Action::MachineDocuments {
                machine,
                count,
                by_default,
            } => {
                let (id, token) = self.machine(machine)?;
                let (status, body) = self.http(
                    machine,
                    http::Method::GET,
                    &format!("/api/connector/machines/{id}/documents"),
                    &token,
                    None,
                )?;
                let documents = body["documents"]
                    .as_array()
                    .ok_or_else(|| format!("no documents: {status} {body}"))?;
                if documents.len() != *count {
                    return Err(format!(
                        "the machine was told {} documents, not {count}: {body}",
                        documents.len()
                    ));
                }
                if let Some(want) = by_default {
                    if documents.iter().any(|d| d["byDefault"] != *want) {
                        return Err(format!("not every document has byDefault {want}: {body}"));
                    }
                }
                Ok(())
            }
            Action::Credential { machine, agent } => {
                let (id, token) = self.machine(machine)?;
                let (status, body) = self.http(
                    machine,
                    http::Method::POST,
                    "/api/connector/planner",
                    &token,
                    Some(serde_json::json!({ "machineId": id, "documentId": doc })),
                )?;
                let credential = body["credential"]
                    .as_str()
                    .ok_or_else(|| format!("no credential: {status} {body}"))?
                    .to_owned();
                if let Some(name) = agent {
                    let backend = self.world.agent(name, &credential);
                    let a = backend.clone();
                    self.agents.insert(name.clone(), backend);
                    self.world
                        .advance_until(
                            DEFAULT_WAIT_MS,
                            &format!("backend {name} connected"),
                            move |_| {
                                a.log()
                                    .iter()
                                    .any(|e| matches!(e, crate::AgentEvent::Connected { .. }))
                            },
                        )
                        .map_err(sim)?;
                }
                Ok(())
            }
            Action::LaunchReport {
                machine,
                attempts,
                stderr,
                stayed_up,
            } => {
                let (id, token) = self.machine(machine)?;
                let (status, body) = self.http(
                    machine,
                    http::Method::POST,
                    "/api/connector/planner/failure",
                    &token,
                    Some(serde_json::json!({
                        "machineId": id, "documentId": doc, "attempts": attempts,
                        "stderr": stderr, "stayedUp": stayed_up,
                    })),
                )?;
                if status != 200 {
                    return Err(format!("the report was refused: {status} {body}"));
                }
                Ok(())
            }
            Action::RevokeMachine { machine, login } => {
                let (id, _) = self.machine(machine)?;
                let token = self.token(login)?;
                let (status, body) = self.http(
                    "revoker",
                    http::Method::DELETE,
                    &format!("/api/machines/{id}"),
                    &token,
                    None,
                )?;
                if status != 204 {
                    return Err(format!("the machine was not revoked: {status} {body}"));
                }
                Ok(())
            }
            Action::GithubRole { login, role } => {
                let github = self.world.github();
                match role.as_str() {
                    "none" => {
                        github.revoke("octo", "plans", login);
                    }
                    other => {
                        let permission = match other {
                            "read" => Permission::Read,
                            "write" => Permission::Write,
                            "admin" => Permission::Admin,
                            _ => {
                                return Err(format!(
                                    "unknown role {other:?} (read, write, admin, none)"
                                ))
                            }
                        };
                        github.grant("octo", "plans", login, permission);
                    }
                }
                Ok(())
            }
            Action::GithubRevokeTokens { login } => {
                self.world.github().revoke_tokens_of(login);
                Ok(())
            }
            Action::GithubOutage { on } => {
                self.world.github().set_outage(*on);
                Ok(())
            }
            Action::ProviderReply { reply, next } => match &self.provider {
                Some(provider) => {
                    if *next {
                        provider.script_next(reply.clone());
                    } else {
                        provider.script(reply.clone());
                    }
                    Ok(())
                }
                None => Err("provider-reply needs settings.harness = \"provider\" or settings.classifier = true".to_owned()),
            },
            Action::ProviderOutage { status } => match &self.provider {
                Some(provider) => {
                    provider.set_outage(*status);
                    Ok(())
                }
                None => Err("provider-outage needs settings.harness = \"provider\"".to_owned()),
            },
            Action::Partition { a, b } => {
                self.world.partition(a, b);
                Ok(())
            }
            Action::Repair { a, b } => {
                self.world.repair(a, b);
                Ok(())
            }
            Action::Latency { a, b, ms } => {
                self.world.set_link_latency(a, b, *ms);
                Ok(())
            }
            Action::Drops { a, b, rate } => {
                if !(0.0..=1.0).contains(rate) {
                    return Err(format!("drops rate {rate}: a probability from 0 to 1"));
                }
                self.world.set_link_drops(a, b, *rate);
                Ok(())
            }
            Action::Crash => self.world.apply(&Step::CrashServer).map_err(sim),
            Action::Start => self.world.apply(&Step::StartServer).map_err(sim),
            Action::Restart => self.world.apply(&Step::RestartServer).map_err(sim),
            Action::StartOn { host } => self
                .world
                .apply(&Step::StartServerOn { host: host.clone() })
                .map_err(sim),
            Action::Stop { within_ms } => self
                .world
                .apply(&Step::StopServer {
                    within_ms: *within_ms,
                })
                .map_err(sim),
            Action::AwaitServer { within_ms } => self
                .world
                .apply(&Step::AwaitServer {
                    within_ms: *within_ms,
                })
                .map_err(sim),
            Action::Get { host, path } => self
                .world
                .apply(&Step::Get {
                    host: host.clone(),
                    path: path.clone(),
                })
                .map_err(sim),
            Action::Advance { ms } => self.world.advance(*ms).map_err(sim),
            Action::AdvanceTo { at } => {
                let at = self.time(at)?;
                let now = self.world.now_ms();
                if at < now {
                    return Err(format!("advance-to {at} ms, but it is already {now} ms"));
                }
                self.world.advance(at - now).map_err(sim)
            }
            Action::Until {
                event,
                mark,
                within_ms,
                since,
            } => {
                let since = self.since(since)?;
                let (host, text) = (event.host.clone(), event.text.clone());
                // Each tick looks only at the events recorded since the last one.
                let mut checked = 0;
                self.world
                    .advance_until(
                        *within_ms,
                        &format!("an event {}", describe(event)),
                        move |w| {
                            w.with_events(checked, |new| {
                                checked += new.len();
                                find(new, host.as_deref(), &text, since).is_some()
                            })
                        },
                    )
                    .map_err(sim)?;
                if let Some(mark) = mark {
                    let at = self.world.with_events(0, |events| {
                        find(events, event.host.as_deref(), &event.text, since)
                            .map_or(0, |e| e.at_ms)
                    });
                    self.marks.insert(mark.clone(), at);
                }
                Ok(())
            }
            Action::Mark { name, at } => {
                let at = match at {
                    Some(at) => self.time(at)?,
                    None => self.world.now_ms(),
                };
                self.marks.insert(name.clone(), at);
                Ok(())
            }
            Action::ExpectEvent {
                event,
                at,
                within,
                since,
            } => {
                let since = self.since(since)?;
                let found = self.world.with_events(0, |events| {
                    find(events, event.host.as_deref(), &event.text, since).cloned()
                });
                let Some(found) = found else {
                    return Err(format!(
                        "expected an event {} from {since} ms, but there was none",
                        describe(event)
                    ));
                };
                let window = match (at, within) {
                    (Some(at), _) => {
                        let at = self.time(at)?;
                        Some((at, at))
                    }
                    (None, Some([from, to])) => Some((self.time(from)?, self.time(to)?)),
                    (None, None) => None,
                };
                if let Some((from, to)) = window {
                    if found.at_ms < from || found.at_ms > to {
                        let when = if from == to {
                            format!("at {from} ms")
                        } else {
                            format!("within {from}..={to} ms")
                        };
                        return Err(format!(
                            "expected an event {} {when}, but the first from {since} ms was at {} ms: {}",
                            describe(event),
                            found.at_ms,
                            line(&found)
                        ));
                    }
                }
                Ok(())
            }
            Action::ExpectNoEvent {
                event,
                since,
                before,
            } => {
                let since = self.since(since)?;
                let before = match before {
                    Some(b) => self.time(b)?,
                    None => u64::MAX,
                };
                let found = self.world.with_events(0, |events| {
                    find(events, event.host.as_deref(), &event.text, since).cloned()
                });
                match found {
                    Some(found) if found.at_ms < before => Err(format!(
                        "expected no event {} from {since} ms{}, but at {} ms: {}",
                        describe(event),
                        if before == u64::MAX {
                            String::new()
                        } else {
                            format!(" before {before} ms")
                        },
                        found.at_ms,
                        line(&found)
                    )),
                    _ => Ok(()),
                }
            }
            Action::ExpectPresence {
                state,
                login,
                failure,
            } => {
                let app = self.world.server_app().ok_or("the server is not running")?;
                let presence = app.planners.presence(self.doc);
                let actual = match presence.state {
                    PresenceState::Attached => "attached",
                    PresenceState::Detached => "detached",
                    PresenceState::Disconnected => "disconnected",
                    PresenceState::Starting => "starting",
                    PresenceState::None => "none",
                };
                if actual != state || presence.login != *login {
                    return Err(format!(
                        "expected presence {state} {login:?}, but it is {actual} {:?}",
                        presence.login
                    ));
                }
                if let Some(expected) = failure {
                    let told = presence.failure.as_ref().map(|f| f.reason.as_str());
                    let matches = match told {
                        None => expected == "none",
                        Some(reason) => reason == expected,
                    };
                    if !matches {
                        return Err(format!(
                            "expected the failure {expected:?}, but it is {told:?}"
                        ));
                    }
                }
                Ok(())
            }
            Action::ExpectHolder { generation, login } => {
                let ownership =
                    block_on(self.world.store().ownership(self.doc)).map_err(|e| e.to_string())?;
                let holder = ownership.holder.map(|h| h.login);
                if ownership.generation != *generation || holder != *login {
                    return Err(format!(
                        "expected the stored owner generation {generation} {login:?}, but it is {} {holder:?}",
                        ownership.generation
                    ));
                }
                Ok(())
            }
            Action::Expect { check } => self.world.apply(&Step::Expect(check.clone())).map_err(sim),
        }
    }

    fn token(&mut self, login: &str) -> Result<String, String> {
        if let Some(token) = self.tokens.get(login) {
            return Ok(token.clone());
        }
        if !["hubot"].contains(&login) {
            return Err(format!("{login} is not in the cast (mona, lisa, hubot)"));
        }
        let token = self.world.github().issue_token(login);
        self.tokens.insert(login.to_owned(), token.clone());
        Ok(token)
    }

    /// Drafts a graph of `tasks` (task ids, each depending on the one before) for `id` in
    /// storage at the plan's revision, as the Planner would: the draft, the plan revision and the
    /// server clock's now.
    fn draft_graph(
        &mut self,
        id: uuid::Uuid,
        tasks: &[String],
    ) -> Result<(chopin_server::store::GraphVersion, i64, i64), String> {
        let store = self.world.store();
        let definition = serde_json::json!({
            "tasks": tasks.iter().enumerate().map(|(i, t)| serde_json::json!({
                "id": t,
                "title": format!("Do {t}"),
                "dependsOn": if i == 0 { Vec::new() } else { vec![tasks[i - 1].clone()] },
            })).collect::<Vec<_>>()
        })
        .to_string();
        let now = crate::clock::SIM_EPOCH_MS + self.world.now_ms() as i64;
        let plan = block_on(store.document(id))
            .map_err(|e| e.to_string())?
            .ok_or("no such document")?
            .plan_revision;
        let latest = block_on(store.graph_versions(id))
            .map_err(|e| e.to_string())?
            .pop();
        let drafted = block_on(store.change_graph(
            id,
            &chopin_server::store::GraphChange::Edit {
                base: latest.map(|v| (v.counters.graph_version, v.counters.graph_revision)),
                plan_revision: plan,
                definition,
            },
            now,
        ))
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        Ok((drafted, plan, now))
    }

    /// The paired machine `name`: its id and its token.
    fn machine(&self, name: &str) -> Result<(String, String), String> {
        self.machines
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no machine {name:?} was paired (a machine step pairs one)"))
    }

    /// A one-off client host's name: `base`, then `base-2`, `base-3`… (a host name is used once).
    fn client_host(&mut self, base: &str) -> String {
        let used = self.hosts_used.entry(base.to_owned()).or_insert(0);
        *used += 1;
        if *used == 1 {
            base.to_owned()
        } else {
            format!("{base}-{used}")
        }
    }

    /// One HTTP request from a one-off client host `host` (numbered after its first, `host-2`…,
    /// since a host name is used once) with `token` as its bearer, run to its answer; the answer
    /// is recorded on the host (`<method> <path> answered <status>`, never the body, which may
    /// hold a credential).
    fn http(
        &mut self,
        host: &str,
        method: http::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let mut request = http::Request::builder()
            .method(method.clone())
            .uri(format!("{SERVER_ORIGIN}{path}"))
            .header("authorization", format!("Bearer {token}"));
        let bytes = match body {
            Some(b) => {
                request = request.header("content-type", "application/json");
                axum::body::Bytes::from(b.to_string())
            }
            None => axum::body::Bytes::new(),
        };
        let request = request.body(bytes).map_err(|e| e.to_string())?;
        let host = self.client_host(host);
        let host = host.as_str();
        let answer = std::rc::Rc::new(std::cell::RefCell::new(None));
        let got = answer.clone();
        let recorder = self.world.recorder();
        let (named, shown) = (host.to_owned(), path.to_owned());
        let client = async move {
            let path = shown;
            let what =
                match chopin_server::runtime::connector::send(&crate::TurmoilConnector, request)
                    .await
                {
                    Ok(response) => {
                        let value: Value =
                            serde_json::from_slice(&response.body).unwrap_or(Value::Null);
                        let status = response.status.as_u16();
                        *got.borrow_mut() = Some((status, value));
                        format!("{method} {path} answered {status}")
                    }
                    Err(e) => format!("{method} {path} got no answer: {e}"),
                };
            recorder.record_in_host(&named, Event::Actor { what });
            Ok(())
        };
        self.world.run_client(host, client).map_err(sim)?;
        let answered = answer.borrow_mut().take();
        answered.ok_or_else(|| format!("{path} was not answered"))
    }

    /// The id of the document `slug` names (the cast's when `None`).
    fn document(&self, slug: &Option<String>) -> Result<uuid::Uuid, String> {
        match slug {
            None => Ok(self.doc),
            Some(slug) => self.docs.get(slug).copied().ok_or_else(|| {
                format!("no document {slug:?} (field-notes, or one a create-document step made)")
            }),
        }
    }

    fn agent(&self, name: &str) -> Result<&Agent, String> {
        self.agents
            .get(name)
            .ok_or_else(|| format!("no agent {name:?} (an `agent` step makes one)"))
    }

    fn browser(&self, name: &str) -> Result<&Browser, String> {
        self.browsers
            .get(name)
            .ok_or_else(|| format!("no browser {name:?} (a `browser` step makes one)"))
    }

    fn since(&self, since: &Option<String>) -> Result<u64, String> {
        match since {
            Some(s) => self.time(s),
            None => Ok(self.acted_at),
        }
    }

    /// `123`, `mark`, `mark + 123` or `mark - 123` (the operator between spaces, as a mark's
    /// name may hold a `-`).
    fn time(&self, expr: &str) -> Result<u64, String> {
        let expr = expr.trim();
        let split = [(" + ", 1i64), (" - ", -1)]
            .into_iter()
            .find_map(|(op, sign)| expr.split_once(op).map(|(b, n)| (b, n, sign)));
        let (base, offset) = match split {
            Some((base, n, sign)) => {
                let n: i64 = n.trim().parse().map_err(|_| {
                    format!("{expr:?}: not a time (ms, mark, mark + ms or mark - ms)")
                })?;
                (base.trim(), sign * n)
            }
            None => (expr, 0),
        };
        let base = match base.parse::<u64>() {
            Ok(ms) => ms,
            Err(_) if base == "now" => self.world.now_ms(),
            Err(_) => *self
                .marks
                .get(base)
                .ok_or_else(|| format!("{expr:?}: no mark {base:?} yet"))?,
        };
        base.checked_add_signed(offset)
            .ok_or_else(|| format!("{expr:?} is before the world began"))
    }

    fn sign_out(&mut self, login: &str) -> Result<(), String> {
        let cookie = self
            .cookies
            .get(login)
            .ok_or_else(|| format!("{login} has no browser sign-in in the cast"))?
            .clone();
        let request = http::Request::post(format!("{SERVER_ORIGIN}/auth/logout"))
            .header("cookie", cookie)
            .header("origin", SERVER_ORIGIN)
            .body(axum::body::Bytes::new())
            .map_err(|e| e.to_string())?;
        match self.send(&format!("sign-out-{login}"), request)? {
            Some(204) => Ok(()),
            other => Err(format!("sign-out answered {other:?}")),
        }
    }

    /// Sends `request` from a one-off client host `host` and waits for its status.
    fn send(
        &mut self,
        host: &str,
        request: http::Request<axum::body::Bytes>,
    ) -> Result<Option<u16>, String> {
        let status = std::sync::Arc::new(std::sync::Mutex::new(None));
        let out = status.clone();
        self.world
            .run_client(host, async move {
                let response =
                    chopin_server::runtime::connector::send(&crate::TurmoilConnector, request)
                        .await?;
                *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(response.status.as_u16());
                Ok(())
            })
            .map_err(sim)?;
        let status = *status.lock().unwrap_or_else(|e| e.into_inner());
        Ok(status)
    }
}

/// `args` with `"$doc"` as the document id and `"$run"` as the last claimed run id.
fn substitute(args: &Value, doc: &str, run: Option<&str>) -> Result<Value, String> {
    Ok(match args {
        Value::String(s) if s == "$doc" => Value::String(doc.to_owned()),
        Value::String(s) if s == "$run" => Value::String(
            run.ok_or("\"$run\" before any claim was answered")?
                .to_owned(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, doc, run))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), substitute(v, doc, run)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn describe(m: &Match) -> String {
    match &m.host {
        Some(host) => format!("on {host} containing {:?}", m.text),
        None => format!("containing {:?}", m.text),
    }
}

/// The first of `events` at or after `since` on `host` whose line contains `text`.
fn find<'t>(
    events: &'t [TraceEvent],
    host: Option<&str>,
    text: &str,
    since: u64,
) -> Option<&'t TraceEvent> {
    events
        .iter()
        .find(|e| e.at_ms >= since && host.is_none_or(|h| h == e.host) && line(e).contains(text))
}

/// One event as a timeline line: the simulated millisecond, the host, and what happened.
pub fn line(e: &TraceEvent) -> String {
    format!("{:>9} ms  {:<16} {}", e.at_ms, e.host, what(&e.event))
}

fn what(event: &Event) -> String {
    match event {
        Event::Actor { what } => what.clone(),
        Event::Planner(p) => {
            let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
            // A deadline reads as the simulated millisecond it falls on.
            if let Some(until) = v.get_mut("until_ms") {
                if let Some(ms) = until.as_i64() {
                    *until = Value::from(ms - crate::clock::SIM_EPOCH_MS);
                }
            }
            compact(&v)
        }
        other => compact(&serde_json::to_value(other).unwrap_or(Value::Null)),
    }
}

/// `kind field=value …` from a tagged JSON object, its fields in name order (whatever order
/// the JSON map keeps: a dependency may switch serde_json to insertion order).
fn compact(v: &Value) -> String {
    let Value::Object(map) = v else {
        return v.to_string();
    };
    let mut out = String::new();
    const TAGS: [&str; 4] = ["kind", "planner", "expect", "failure"];
    if let Some(kind) = TAGS.iter().find_map(|t| map.get(*t)) {
        out.push_str(kind.as_str().unwrap_or_default());
    }
    let mut fields: Vec<(&String, &Value)> = map.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in fields {
        if TAGS.contains(&k.as_str()) {
            continue;
        }
        let v = match v {
            Value::String(s) => s.clone(),
            Value::Object(_) => compact(v),
            other => other.to_string(),
        };
        let _ = write!(out, " {k}={v}");
    }
    out
}

/// The whole trace as a readable timeline, one event per line, after its seed and hash.
pub fn timeline(trace: &Trace) -> String {
    let mut out = format!("seed {}  trace {}\n", trace.seed, &trace.hash()[..16]);
    for e in &trace.events {
        out.push_str(&line(e));
        out.push('\n');
    }
    out
}

/// The last `lines` lines of the timeline: what led up to the end of a run.
pub fn timeline_tail(trace: &Trace, lines: usize) -> String {
    let skip = trace.events.len().saturating_sub(lines);
    trace.events[skip..]
        .iter()
        .map(|e| line(e) + "\n")
        .collect()
}

/// A snapshot file holding `timeline`, in the layout insta reads and writes (a header, then
/// the body), so `cargo insta` and `chopin-sim check --bless` keep the same files.
pub fn snapshot_file(timeline: &str) -> String {
    format!("---\nsource: sim/tests/scenarios.rs\nexpression: timeline\n---\n{timeline}")
}

/// The body of a snapshot file (everything after its header).
pub fn snapshot_body(file: &str) -> &str {
    file.strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map_or(file, |(_, body)| body)
}
