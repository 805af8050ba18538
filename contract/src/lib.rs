//! The harness contract suite: checks any harness adapter must pass, as a library and a CLI
//! (`chopin-contract --harness NAME`).
//!
//! Owns: the checks ([`checks`]), running them against an adapter ([`run`]) and their
//! [`Report`]; the [`ContractModel`] seam through which the suite scripts an adapter's model and
//! reads what that model was given; the suite's own host ([`TurnHost`]), which holds a canary
//! GitHub credential. Does not own: adapters (they live in `chopin_server::harness`) or the
//! enforcement the host does on every turn (`chopin_server::harness::run_turn`) — the suite
//! drives adapters through that driver, exactly as the server does, and through the
//! [`Harness`] trait only.
//!
//! Each check starts from a fresh [`Subject`] (adapter + model), so checks are independent and
//! run in the fixed order of [`checks`]. No check measures time: a check that waits for an
//! adapter to end a cancelled turn relies on the driver's abort wait, which tests run with
//! tokio's paused clock. The `remote` subject ([`remote`]) runs a real server and a client over
//! loopback TCP, so it runs on real time: a paused clock would jump to the next timer whenever
//! every task waits on a socket.
//!
//! Structured output is checked with `chopin_server::harness::schema`, a documented subset of
//! JSON Schema (type, properties, required, additionalProperties, items, enum, const, numeric
//! and length bounds; any other keyword is refused rather than ignored).

pub mod provider;
pub mod remote;
pub mod report;

use std::sync::{Arc, Mutex, MutexGuard, Once};

use async_trait::async_trait;
use chopin_server::harness::fake::{FakeConfig, FakeModel, FakeSetup, SessionSeen, Step, TurnSeen};
use chopin_server::harness::{
    self, check_builtins, CancelSignal, Harness, HarnessDeps, HostToolResult, Part, SessionMode,
    SessionRequest, SteerError, TextPart, ToolBoundary, ToolSpec, TurnControl, TurnEnder,
    TurnFailure, TurnHost, TurnReport, TurnRequest, TurnResult, UnknownHarness,
};
use futures::future::BoxFuture;
use serde_json::{json, Value};

/// The canary GitHub credential the suite plants on the host: in the suite host's own
/// credential (used by its host tools) and in the process environment as `GITHUB_TOKEN` and
/// `GH_TOKEN`, where an adapter that inherits or reads the environment would find it. Nothing a
/// model is given may contain it (RFC-08).
pub const CANARY_CREDENTIAL: &str = "ghu_ChopinContractCanary0d9f8e7c6b5a4";

/// The environment variables the canary is planted in.
pub const CANARY_VARIABLES: &[&str] = &["GITHUB_TOKEN", "GH_TOKEN"];

/// Plant [`CANARY_CREDENTIAL`] in the process environment (once per process). [`run`] calls it;
/// a process that runs the suite must not need real GitHub credentials in those variables.
pub fn plant_canary() {
    static PLANT: Once = Once::new();
    PLANT.call_once(|| {
        for variable in CANARY_VARIABLES {
            std::env::set_var(variable, CANARY_CREDENTIAL);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The seam to an adapter's model
// ---------------------------------------------------------------------------------------------

/// How the suite tells an adapter's model what to do and learns what it was given. The fake
/// harness's [`FakeModel`] implements it directly; the remote adapter implements it by scripting
/// the attached client ([`remote::RemoteModel`]: each [`Step`] becomes what that client sends,
/// and what the client received becomes [`TurnSeen`]).
#[async_trait]
pub trait ContractModel: Send + Sync {
    /// Queue the script the model follows in the next turn it runs.
    fn script(&self, steps: Vec<Step>);
    /// Every turn the model ran, in order, with everything it was given.
    fn turns(&self) -> Vec<TurnSeen>;
    /// Every runtime session opened, with how often it was torn down.
    fn sessions(&self) -> Vec<SessionSeen>;
    /// Turns the model started and has not finished.
    fn unfinished_turns(&self) -> usize;
    /// Wait until everything the adapter has already sent its model has reached the model, so
    /// the reads above see it. A model the adapter reaches synchronously (the fake) has nothing
    /// to wait for; one behind a wire (remote) does, for what has no answer there (`destroy`).
    async fn settle(&self) {}
    /// How many calls the adapter made to its model in the last turn, where a wire shows them
    /// (a provider's requests); `None` where the model is not called that way.
    fn model_calls(&self) -> Option<usize> {
        None
    }
    /// Everything the adapter sent over its model's wire (each request's headers and body), for
    /// looking for what must never be there. Empty where there is no such wire.
    fn wire(&self) -> Vec<String> {
        Vec::new()
    }
    /// Words saying how the model's wire carried a piece of `kind` (`text`, `reasoning`,
    /// `tool-call`), appended to a failure where that piece went missing; empty where there is
    /// no wire to name.
    fn wire_note(&self, _kind: &str) -> String {
        String::new()
    }
    /// Words saying how the model's wire carried text, appended to every failed check's detail
    /// that does not already say it, so a failure after a library bump shows what the provider
    /// sent; empty where there is no wire to name.
    fn wire_context(&self) -> String {
        String::new()
    }
}

#[async_trait]
impl ContractModel for FakeModel {
    fn script(&self, steps: Vec<Step>) {
        self.push_script(steps);
    }
    fn turns(&self) -> Vec<TurnSeen> {
        FakeModel::turns(self)
    }
    fn sessions(&self) -> Vec<SessionSeen> {
        FakeModel::sessions(self)
    }
    fn unfinished_turns(&self) -> usize {
        FakeModel::unfinished_turns(self)
    }
}

/// An adapter under test and the model behind it.
#[derive(Clone)]
pub struct Subject {
    /// The adapter, driven only through the [`Harness`] trait.
    pub harness: Arc<dyn Harness>,
    /// Its model, scripted by the suite.
    pub model: Arc<dyn ContractModel>,
}

/// Builds a fresh [`Subject`] for each check. Any `Fn() -> Result<Subject, String>` is one.
#[async_trait]
pub trait SubjectFactory: Send + Sync {
    /// A fresh adapter and model, sharing no state with earlier ones.
    async fn create(&self) -> Result<Subject, String>;
}

#[async_trait]
impl<F> SubjectFactory for F
where
    F: Fn() -> Result<Subject, String> + Send + Sync,
{
    async fn create(&self) -> Result<Subject, String> {
        self()
    }
}

/// A fake harness with `config`, built through the registry, and its model.
pub fn fake_subject(config: FakeConfig) -> Subject {
    let model = FakeModel::new();
    let harness = Arc::new(harness::fake::FakeHarness::new(FakeSetup {
        config,
        model: model.clone(),
    }));
    Subject { harness, model }
}

/// Why the CLI cannot test a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// Not in the registry.
    #[error(transparent)]
    Unknown(#[from] UnknownHarness),
    /// In the registry, but the suite has no [`ContractModel`] for it yet.
    #[error("harness \"{0}\" has no contract model to script it yet")]
    NoModel(String),
    /// Its subject is built asynchronously: use [`open_subject`].
    #[error("harness \"{0}\" is built asynchronously; use open_subject")]
    Async(String),
    /// Building its subject failed (remote: the server, the fake GitHub, the sign-in or the
    /// client's attach).
    #[error("could not set up the subject: {0}")]
    Setup(String),
}

/// Whether the suite can test `name`: it is in the registry and the suite has a
/// [`ContractModel`] for it. Builds nothing.
pub fn supported(name: &str) -> Result<(), SubjectError> {
    harness::adapter(name, &HarnessDeps::default())?;
    match name {
        "fake" | "provider" | "remote" => Ok(()),
        other => Err(SubjectError::NoModel(other.to_owned())),
    }
}

/// The subject for a registry name that can be built synchronously (`fake`), through
/// `chopin_server::harness::adapter` so the suite tests exactly what `HARNESS=name` would
/// construct. [`open_subject`] builds every name the suite supports.
pub fn subject(name: &str) -> Result<Subject, SubjectError> {
    match name {
        "fake" => {
            let model = FakeModel::new();
            let deps = HarnessDeps {
                fake: FakeSetup {
                    config: FakeConfig::default(),
                    model: model.clone(),
                },
                ..HarnessDeps::default()
            };
            let harness = harness::adapter(name, &deps)?;
            Ok(Subject { harness, model })
        }
        "remote" | "provider" => Err(SubjectError::Async(name.to_owned())),
        other => {
            supported(other)?;
            Err(SubjectError::NoModel(other.to_owned()))
        }
    }
}

/// The subject for any registry name the suite supports. `remote` starts, in-process, the real
/// server with a fake GitHub and attaches a scripted client ([`remote::remote_subject`]);
/// `provider` serves the fake model provider on loopback TCP in OpenAI's wire
/// ([`provider::provider_subject`]; [`Named::wire`] picks Anthropic's). The subject keeps all
/// of it running until its last clone is dropped.
pub async fn open_subject(name: &str) -> Result<Subject, SubjectError> {
    Named::new(name).open().await
}

/// A [`SubjectFactory`] building fresh subjects by registry name, as the CLI does; for
/// `provider`, in the wire family named by `wire` (`openai` when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named(pub String, pub Option<String>);

impl Named {
    /// The adapter `name`, in its default wire.
    pub fn new(name: &str) -> Self {
        Named(name.to_owned(), None)
    }

    /// The provider's wire family for this subject: `openai` or `anthropic`.
    pub fn wire(mut self, wire: &str) -> Self {
        self.1 = Some(wire.to_owned());
        self
    }

    async fn open(&self) -> Result<Subject, SubjectError> {
        match self.0.as_str() {
            "remote" => remote::remote_subject().await,
            "provider" => {
                let wire = self.1.as_deref().unwrap_or("openai");
                let family = provider::family(wire).ok_or_else(|| {
                    SubjectError::Setup(format!(
                        "unknown wire \"{wire}\"; the provider speaks openai or anthropic"
                    ))
                })?;
                provider::provider_subject(family, None).await
            }
            other => subject(other),
        }
    }
}

#[async_trait]
impl SubjectFactory for Named {
    async fn create(&self) -> Result<Subject, String> {
        self.open().await.map_err(|e| e.to_string())
    }
}

/// The names the registry knows (what `--harness` accepts).
pub fn known_harnesses() -> &'static [&'static str] {
    harness::ADAPTERS
}

// ---------------------------------------------------------------------------------------------
// The suite's host
// ---------------------------------------------------------------------------------------------

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

type Trigger = (String, Box<dyn FnOnce() + Send>);

/// The suite's host: runs host tools with its (canary) credential, which never leaves it, and
/// records the stream. A trigger runs once when a given text part arrives, which is how a check
/// cancels or steers a turn at a known point without timing.
struct SuiteHost {
    credential: String,
    parts: Mutex<Vec<Part>>,
    calls: Mutex<Vec<(String, Value)>>,
    results: Mutex<Vec<Value>>,
    trigger: Mutex<Option<Trigger>>,
    /// What happened, in order: `text:…`, `reasoning:…`, `finish-step`, `finish` for parts,
    /// `run:NAME` for each tool the host ran.
    log: Mutex<Vec<String>>,
    /// A result of this many bytes of text, instead of the usual one, when set.
    big: Mutex<Option<usize>>,
    /// Runs once, inside the first tool the host runs.
    on_call: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl SuiteHost {
    fn new() -> Arc<Self> {
        Arc::new(SuiteHost {
            credential: CANARY_CREDENTIAL.to_owned(),
            parts: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            results: Mutex::new(Vec::new()),
            trigger: Mutex::new(None),
            log: Mutex::new(Vec::new()),
            big: Mutex::new(None),
            on_call: Mutex::new(None),
        })
    }

    fn log(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    fn on_text(&self, text: &str, action: impl FnOnce() + Send + 'static) {
        *lock(&self.trigger) = Some((text.to_owned(), Box::new(action)));
    }

    fn texts(&self) -> Vec<String> {
        lock(&self.parts)
            .iter()
            .filter_map(|p| match p {
                Part::Text(TextPart { text }) => Some(text.clone()),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl TurnHost for SuiteHost {
    async fn execute(&self, name: &str, input: Value, _cancel: CancelSignal) -> HostToolResult {
        let n = {
            let mut calls = lock(&self.calls);
            calls.push((name.to_owned(), input.clone()));
            calls.len()
        };
        lock(&self.log).push(format!("run:{name}"));
        let on_call = lock(&self.on_call).take();
        if let Some(action) = on_call {
            action();
        }
        if let Some(size) = *lock(&self.big) {
            let output = Value::String("r".repeat(size));
            lock(&self.results).push(output.clone());
            return HostToolResult::ok(output);
        }
        // A real host tool would call GitHub with the credential; only the result crosses.
        let output = json!({
            "tool": name,
            "input": input,
            "authorized": !self.credential.is_empty(),
            "nonce": format!("result-{n}-of-{name}"),
        });
        lock(&self.results).push(output.clone());
        HostToolResult::ok(output)
    }

    async fn part(&self, part: &Part) {
        lock(&self.parts).push(part.clone());
        let entry = match part {
            Part::Text(TextPart { text }) => Some(format!("text:{text}")),
            Part::Reasoning(TextPart { text }) => Some(format!("reasoning:{text}")),
            Part::FinishStep(_) => Some("finish-step".to_owned()),
            Part::Finish(_) => Some("finish".to_owned()),
            _ => None,
        };
        if let Some(entry) = entry {
            lock(&self.log).push(entry);
        }
        if let Part::Text(TextPart { text }) = part {
            let fire = {
                let mut slot = lock(&self.trigger);
                match slot.as_ref() {
                    Some((wanted, _)) if wanted == text => slot.take(),
                    _ => None,
                }
            };
            if let Some((_, action)) = fire {
                action();
            }
        }
    }
}

fn tool(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: json!({ "type": "object", "properties": { "page": { "type": "integer" } } }),
    }
}

fn planner_tools() -> Vec<ToolSpec> {
    vec![
        tool("read_plan", "Read the document's plan, one page at a time."),
        tool(
            "list_pull_requests",
            "List the channel repository's pull requests.",
        ),
    ]
}

/// One turn to drive.
struct Drive {
    mode: SessionMode,
    host_tools: Vec<ToolSpec>,
    response_format: Option<Value>,
    script: Vec<Step>,
}

impl Drive {
    fn planner(script: Vec<Step>) -> Self {
        Drive {
            mode: SessionMode::Planner,
            host_tools: planner_tools(),
            response_format: None,
            script,
        }
    }
}

/// Run one turn through the server's driver, with a hook to act on the control mid-turn.
async fn drive(
    subject: &Subject,
    turn: Drive,
    hook: impl FnOnce(&Arc<SuiteHost>, &Arc<TurnControl>),
) -> (TurnReport, Arc<SuiteHost>) {
    let host = SuiteHost::new();
    let (control, steer) = TurnControl::new(subject.harness.as_ref());
    let control = Arc::new(control);
    hook(&host, &control);
    subject.model.script(turn.script);
    let request = TurnRequest {
        instructions: "You are Chopin's Planner for this document. Use only the tools given."
            .to_owned(),
        prompt: "@chopin summarise the plan".to_owned(),
        host_tools: turn.host_tools,
        response_format: turn.response_format,
        cancel: control.cancel_signal(),
        model: None,
        thinking_level: None,
        attachments: Vec::new(),
    };
    let session = SessionRequest {
        mode: turn.mode,
        model: Some("contract-model".to_owned()),
        thinking_level: None,
    };
    let report = harness::run_turn(
        subject.harness.as_ref(),
        session,
        request,
        steer,
        host.clone(),
    )
    .await;
    (report, host)
}

async fn last_turn(subject: &Subject) -> Result<TurnSeen, String> {
    subject.model.settle().await;
    subject
        .model
        .turns()
        .pop()
        .ok_or_else(|| "the model never ran the turn".to_owned())
}

fn names(tools: &[ToolSpec]) -> Vec<String> {
    let mut names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    names.sort();
    names
}

async fn live_sessions(subject: &Subject) -> Vec<String> {
    subject.model.settle().await;
    subject
        .model
        .sessions()
        .into_iter()
        .filter(|s| s.teardowns == 0)
        .map(|s| s.id)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

/// What a check concluded: `Ok(detail)` passes, `Err(detail)` fails.
pub type CheckResult = Result<String, String>;

type CheckFn = for<'a> fn(&'a Subject) -> BoxFuture<'a, CheckResult>;

/// One contract check.
#[derive(Clone, Copy)]
pub struct Check {
    /// The CHECKLIST id it proves.
    pub id: &'static str,
    /// A short name.
    pub name: &'static str,
    /// The rule, in words.
    pub rule: &'static str,
    run: CheckFn,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Check {
    /// `ID name`, the report's first column.
    pub fn label(&self) -> String {
        format!("{} {}", self.id, self.name)
    }

    /// Run this check against a subject.
    pub async fn run(&self, subject: &Subject) -> CheckResult {
        (self.run)(subject).await
    }
}

/// Every check, in the order they run and are reported.
pub fn checks() -> Vec<Check> {
    vec![
        Check {
            id: "RFC-07",
            name: "only-host-tools",
            rule: "the model is offered exactly the turn's host tools; built-ins are off (or the adapter has none)",
            run: |s| Box::pin(only_host_tools(s)),
        },
        Check {
            id: "RFC-37",
            name: "tool-boundary",
            rule: "a tool call outside the turn's active set fails the turn as a tool boundary failure",
            run: |s| Box::pin(tool_boundary(s)),
        },
        Check {
            id: "RFC-06",
            name: "host-tool-results",
            rule: "host tools run in the host, and their results reach the model unchanged",
            run: |s| Box::pin(host_tool_results(s)),
        },
        Check {
            id: "RFC-09",
            name: "structured-output",
            rule: "the model is given the response format and its output arrives unchanged, checked against the schema",
            run: |s| Box::pin(structured_output(s)),
        },
        Check {
            id: "RFC-43",
            name: "cancellation",
            rule: "cancellation reaches the model, the adapter ends the turn aborted, and no unfinished turn remains",
            run: |s| Box::pin(cancellation(s)),
        },
        Check {
            id: "RFC-73",
            name: "destroy-once",
            rule: "destroy tears the session down exactly once, even when called twice",
            run: |s| Box::pin(destroy_once(s)),
        },
        Check {
            id: "MSG-04",
            name: "steer-where-declared",
            rule: "a steer message reaches the running turn where the adapter declares steer, and is refused where it does not",
            run: |s| Box::pin(steer_where_declared(s)),
        },
        Check {
            id: "RFC-62",
            name: "session-per-turn",
            rule: "sessions never outlive their turn: each turn gets a fresh session, torn down when it ends",
            run: |s| Box::pin(session_per_turn(s)),
        },
        Check {
            id: "RFC-08",
            name: "no-github-credential",
            rule: "nothing the model is given contains the host's GitHub credential, on its wire (headers and body) included",
            run: |s| Box::pin(no_github_credential(s)),
        },
        Check {
            id: "RFC-75",
            name: "streaming-order",
            rule: "parts stream in the model's order: reasoning and text as said, a step's text before its tool runs, the next step's after, finish last",
            run: |s| Box::pin(streaming_order(s)),
        },
        Check {
            id: "RFC-46",
            name: "tool-arguments-checked",
            rule: "a host tool call whose arguments do not match the tool's schema is an error result for the model, never run and never a crash; the turn goes on",
            run: |s| Box::pin(tool_arguments_checked(s)),
        },
        Check {
            id: "HA-04",
            name: "parallel-tool-calls",
            rule: "several tool calls in one model step all run in the host, and each result reaches the model answering its own call",
            run: |s| Box::pin(parallel_tool_calls(s)),
        },
        Check {
            id: "OWN-08",
            name: "model-failure-words",
            rule: "a failing model (refused key, provider error, answer broken off) ends the turn failed with words for Chat that name the failure and promise nothing kept, leaves nothing running, and the next turn works",
            run: |s| Box::pin(model_failure_words(s)),
        },
        Check {
            id: "SES-27",
            name: "bounded-retries",
            rule: "a model call that failed before the model said anything is retried at most the declared number of times; once it said something, never (nothing is replayed)",
            run: |s| Box::pin(bounded_retries(s)),
        },
        Check {
            id: "RFC-54",
            name: "abort-during-tool",
            rule: "a turn stopped while a host tool runs ends aborted with no further model call answered and nothing said after",
            run: |s| Box::pin(abort_during_tool(s)),
        },
        Check {
            id: "OWN-06",
            name: "usage-reported",
            rule: "the turn's finish part reports the tokens the model used",
            run: |s| Box::pin(usage_reported(s)),
        },
        Check {
            id: "RFC-56",
            name: "model-call-limit",
            rule: "a turn makes at most the model calls the adapter declares, then ends failed saying so; an adapter declaring none has no hidden limit",
            run: |s| Box::pin(model_call_limit(s)),
        },
        Check {
            id: "RFC-20",
            name: "long-results-cut",
            rule: "a tool result longer than the adapter declares reaches the model cut, saying how much was left out; an adapter declaring no cut passes it whole",
            run: |s| Box::pin(long_results_cut(s)),
        },
    ]
}

async fn only_host_tools(subject: &Subject) -> CheckResult {
    let harness = subject.harness.as_ref();
    check_builtins(harness).map_err(|e| e.to_string())?;
    let builtins = harness.builtin_tools();
    let mut script: Vec<Step> = builtins
        .iter()
        .map(|name| Step::CallBuiltin {
            name: name.clone(),
            input: json!({}),
        })
        .collect();
    script.push(Step::Text {
        text: "done".to_owned(),
    });
    let (report, _host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    let seen = last_turn(subject).await?;
    let offered = names(&seen.tools);
    let expected = names(&planner_tools());
    if offered != expected {
        return Err(format!(
            "the model was offered {offered:?}, not just the host tools {expected:?}"
        ));
    }
    if !seen.builtin_runs.is_empty() {
        return Err(format!("built-ins ran: {:?}", seen.builtin_runs));
    }
    match report.result {
        TurnResult::Completed { .. } => Ok(format!(
            "offered {offered:?}; built-ins {builtins:?} off{}",
            if builtins.is_empty() {
                " (none declared)"
            } else {
                ""
            }
        )),
        other => Err(format!("the turn did not complete: {other:?}")),
    }
}

async fn tool_boundary(subject: &Subject) -> CheckResult {
    let script = vec![
        Step::CallHostTool {
            name: "merge_pull_request".to_owned(),
            input: json!({ "pullNumber": 1 }),
        },
        Step::Text {
            text: "after the refused call".to_owned(),
        },
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    let boundary = match &report.result {
        TurnResult::Failed(TurnFailure::Boundary(
            b @ (ToolBoundary::NotAHostTool { name } | ToolBoundary::Undeclared { name }),
        )) if name == "merge_pull_request" => b.clone(),
        other => {
            return Err(format!(
                "expected a tool boundary failure naming merge_pull_request, got {other:?}"
            ))
        }
    };
    if !lock(&host.calls).is_empty() {
        return Err("the host ran a tool outside the active set".to_owned());
    }
    if host.texts().iter().any(|t| t == "after the refused call") {
        return Err("the turn went on after the boundary failure".to_owned());
    }
    if report.ended_by != TurnEnder::Adapter {
        return Err("the adapter did not end the turn the host aborted".to_owned());
    }
    Ok(format!("refused: {boundary}"))
}

async fn host_tool_results(subject: &Subject) -> CheckResult {
    let input = json!({ "page": 2 });
    let script = vec![
        Step::CallHostTool {
            name: "read_plan".to_owned(),
            input: input.clone(),
        },
        Step::Text {
            text: "read it".to_owned(),
        },
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    if !matches!(report.result, TurnResult::Completed { .. }) {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    let calls = lock(&host.calls).clone();
    if calls != vec![("read_plan".to_owned(), input)] {
        return Err(format!(
            "the host ran {calls:?}, not read_plan once with the model's input"
        ));
    }
    let sent = lock(&host.results).clone();
    let seen = last_turn(subject).await?;
    let read: Vec<Value> = seen
        .tool_results
        .iter()
        .filter(|r| r.name == "read_plan" && !r.is_error)
        .map(|r| r.output.clone())
        .collect();
    if read != sent {
        return Err(format!("the host sent {sent:?}; the model read {read:?}"));
    }
    Ok("read_plan ran once in the host; the model read its result unchanged".to_owned())
}

/// Whether the response format the model was given is the turn's: the same schema, or the
/// same object as a provider's strict mode takes it (the same properties, every required one
/// still required; a provider may require them all, widen optional types to allow `null`, or
/// drop bounds the driver still checks on the output).
fn same_shape(given: Option<&Value>, expected: &Value) -> bool {
    let Some(given) = given else {
        return false;
    };
    if given == expected {
        return true;
    }
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    };
    let required = |v: &Value| -> Vec<String> {
        v["required"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    given["type"] == expected["type"]
        && keys(given) == keys(expected)
        && required(expected)
            .iter()
            .all(|r| required(given).contains(r))
}

fn description_schema() -> Value {
    json!({
        "type": "object",
        "required": ["description"],
        "additionalProperties": false,
        "properties": {
            "description": { "type": "string", "minLength": 1, "maxLength": 200 },
            "confidence": { "type": "number", "minimum": 0, "maximum": 1 }
        }
    })
}

async fn structured_output(subject: &Subject) -> CheckResult {
    let valid = json!({ "description": "Adds paging to the plan reader.", "confidence": 0.9 });
    let turn = Drive {
        mode: SessionMode::Isolated,
        host_tools: Vec::new(),
        response_format: Some(description_schema()),
        script: vec![Step::Output {
            value: valid.clone(),
        }],
    };
    let (report, _) = drive(subject, turn, |_, _| {}).await;
    let seen = last_turn(subject).await?;
    if !same_shape(seen.response_format.as_ref(), &description_schema()) {
        return Err(format!(
            "the model was not given the turn's response format: it got {:?}",
            seen.response_format
        ));
    }
    match report.result {
        TurnResult::Completed {
            output: Some(ref got),
        } if *got == valid => {}
        other => {
            return Err(format!(
                "a valid output did not arrive unchanged: {other:?}"
            ))
        }
    }
    let invalid = json!({ "description": "", "extra": true });
    let turn = Drive {
        mode: SessionMode::Isolated,
        host_tools: Vec::new(),
        response_format: Some(description_schema()),
        script: vec![Step::Output { value: invalid }],
    };
    let (report, _) = drive(subject, turn, |_, _| {}).await;
    match report.result {
        TurnResult::Failed(TurnFailure::OutputInvalid(violation)) => Ok(format!(
            "a valid result arrived parsed; an invalid one failed the turn ({violation})"
        )),
        other => Err(format!(
            "an output violating the schema was accepted: {other:?}"
        )),
    }
}

async fn cancellation(subject: &Subject) -> CheckResult {
    let script = vec![
        Step::Text {
            text: "waiting".to_owned(),
        },
        Step::AwaitCancel,
        Step::Text {
            text: "after the cancel".to_owned(),
        },
    ];
    let (report, host) = drive(subject, Drive::planner(script), |host, control| {
        let control = control.clone();
        host.on_text("waiting", move || {
            control.cancel("the contract suite stopped the turn")
        });
    })
    .await;
    let seen = last_turn(subject).await?;
    if !seen.cancelled {
        return Err("the cancellation never reached the model".to_owned());
    }
    if report.ended_by != TurnEnder::Adapter {
        return Err(format!(
            "the adapter did not end the cancelled turn; the host ended it after {} ms",
            harness::ABORT_WAIT_MS
        ));
    }
    if report.result != TurnResult::Aborted {
        return Err(format!(
            "the cancelled turn ended {:?}, not aborted",
            report.result
        ));
    }
    if host.texts().iter().any(|t| t == "after the cancel") {
        return Err("the model went on after the cancel".to_owned());
    }
    let unfinished = subject.model.unfinished_turns();
    if unfinished != 0 {
        return Err(format!(
            "{unfinished} turn(s) still unfinished after the turn ended"
        ));
    }
    Ok(
        "the model saw the cancel; the adapter ended the turn aborted; nothing left running"
            .to_owned(),
    )
}

async fn destroy_once(subject: &Subject) -> CheckResult {
    let session = subject
        .harness
        .start_session(SessionRequest {
            mode: SessionMode::Planner,
            model: None,
            thinking_level: None,
        })
        .await
        .map_err(|e| format!("could not start a session: {e}"))?;
    let id = session.id().to_owned();
    session.destroy().await;
    session.destroy().await;
    subject.model.settle().await;
    let teardowns = subject
        .model
        .sessions()
        .into_iter()
        .find(|s| s.id == id)
        .map(|s| s.teardowns)
        .ok_or_else(|| format!("session {id} is unknown to the model's runtime"))?;
    if teardowns != 1 {
        return Err(format!(
            "two destroy calls tore session {id} down {teardowns} time(s), not once"
        ));
    }
    Ok(format!("session {id}: destroy twice, torn down once"))
}

async fn steer_where_declared(subject: &Subject) -> CheckResult {
    const STEER: &str = "@mona: use the blue one";
    let declared = subject.harness.capabilities().steer;
    let answer: Arc<Mutex<Option<Result<(), SteerError>>>> = Arc::new(Mutex::new(None));
    let script = vec![
        Step::Text {
            text: "ready".to_owned(),
        },
        Step::AwaitSteer,
        Step::Text {
            text: "done".to_owned(),
        },
    ];
    let slot = answer.clone();
    let (report, _) = drive(subject, Drive::planner(script), move |host, control| {
        let control = control.clone();
        host.on_text("ready", move || {
            *lock(&slot) = Some(control.steer(STEER));
        });
    })
    .await;
    let answer = lock(&answer).clone();
    let seen = last_turn(subject).await?;
    if !matches!(report.result, TurnResult::Completed { .. }) {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    if declared {
        if answer != Some(Ok(())) {
            return Err(format!("steering a running turn was refused: {answer:?}"));
        }
        if seen.steers != vec![STEER.to_owned()] {
            return Err(format!(
                "declares steer, but the model read {:?} instead of the one message",
                seen.steers
            ));
        }
        Ok("declared; the message reached the running turn once".to_owned())
    } else {
        if answer != Some(Err(SteerError::Unsupported)) {
            return Err(format!(
                "steer is not declared, yet the host answered {answer:?}"
            ));
        }
        if !seen.steers.is_empty() {
            return Err(format!(
                "steer is not declared, yet the model read {:?}",
                seen.steers
            ));
        }
        Ok("not declared; the host refused it and the model read nothing".to_owned())
    }
}

async fn session_per_turn(subject: &Subject) -> CheckResult {
    let mut ids = Vec::new();
    for n in 1..=2 {
        let script = vec![Step::Text {
            text: format!("turn {n}"),
        }];
        let (report, _) = drive(subject, Drive::planner(script), |_, _| {}).await;
        let id = report
            .session_id
            .ok_or_else(|| format!("turn {n} started no session: {:?}", report.result))?;
        let live = live_sessions(subject).await;
        if !live.is_empty() {
            return Err(format!(
                "after turn {n}, sessions {live:?} were still alive"
            ));
        }
        if ids.contains(&id) {
            return Err(format!("turn {n} reused session {id}"));
        }
        ids.push(id);
    }
    subject.model.settle().await;
    let unfinished = subject.model.unfinished_turns();
    if unfinished != 0 {
        return Err(format!("{unfinished} turn(s) still unfinished"));
    }
    Ok(format!("sessions {ids:?}, each torn down with its turn"))
}

async fn no_github_credential(subject: &Subject) -> CheckResult {
    plant_canary();
    let planner = Drive::planner(vec![
        Step::CallHostTool {
            name: "list_pull_requests".to_owned(),
            input: json!({}),
        },
        Step::Text {
            text: "listed".to_owned(),
        },
    ]);
    let (first, host_a) = drive(subject, planner, |_, _| {}).await;
    let isolated = Drive {
        mode: SessionMode::Isolated,
        host_tools: Vec::new(),
        response_format: Some(description_schema()),
        script: vec![Step::Output {
            value: json!({ "description": "A summary." }),
        }],
    };
    let (second, host_b) = drive(subject, isolated, |_, _| {}).await;
    if first.session_id.is_none() || second.session_id.is_none() {
        return Err(format!(
            "a turn started no session: {:?} / {:?}",
            first.result, second.result
        ));
    }
    subject.model.settle().await;
    let turns = subject.model.turns();
    if turns.is_empty() || lock(&host_a.calls).is_empty() {
        return Err("nothing reached the model, so nothing was checked".to_owned());
    }
    let seen = serde_json::to_string(&(turns, subject.model.sessions()))
        .map_err(|e| format!("could not read what the model saw: {e}"))?;
    if seen.contains(CANARY_CREDENTIAL) {
        return Err("the model was given the host's GitHub credential".to_owned());
    }
    let wire = subject.model.wire();
    if wire
        .iter()
        .any(|request| request.contains(CANARY_CREDENTIAL))
    {
        return Err(
            "a request to the model's provider carried the host's GitHub credential".to_owned(),
        );
    }
    for host in [&host_a, &host_b] {
        let parts = serde_json::to_string(&*lock(&host.parts))
            .map_err(|e| format!("could not read the stream: {e}"))?;
        if parts.contains(CANARY_CREDENTIAL) {
            return Err("the adapter's stream carries the host's GitHub credential".to_owned());
        }
    }
    Ok(format!(
        "canary in {} and the host's tools; absent from everything the model saw{}",
        CANARY_VARIABLES.join(", "),
        if wire.is_empty() {
            String::new()
        } else {
            format!(" and from {} provider request(s)", wire.len())
        }
    ))
}

fn text_step(text: &str) -> Step {
    Step::Text {
        text: text.to_owned(),
    }
}

fn call_step(name: &str, input: Value) -> Step {
    Step::CallHostTool {
        name: name.to_owned(),
        input,
    }
}

/// The text a turn's host received, joined.
fn said(host: &SuiteHost) -> String {
    host.texts().concat()
}

async fn streaming_order(subject: &Subject) -> CheckResult {
    let script = vec![
        Step::Reasoning {
            text: "weighing the plan".to_owned(),
        },
        text_step("first, "),
        text_step("the plan"),
        call_step("read_plan", json!({ "page": 1 })),
        text_step("then the rest"),
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    let log = host.log();
    let position = |wanted: &dyn Fn(&str) -> bool| log.iter().position(|e| wanted(e));
    let Some(ran) = position(&|e| e == "run:read_plan") else {
        return Err(format!(
            "the host never ran read_plan; it saw {log:?}{}",
            subject.model.wire_note("tool-call")
        ));
    };
    let before: String = log[..ran]
        .iter()
        .filter_map(|e| e.strip_prefix("text:"))
        .collect();
    let after: String = log[ran..]
        .iter()
        .filter_map(|e| e.strip_prefix("text:"))
        .collect();
    if before != "first, the plan" || after != "then the rest" {
        return Err(format!(
            "the model said \"first, the plan\", ran read_plan, then said \"then the rest\"; the host got {before:?} before the tool and {after:?} after{}",
            subject.model.wire_note("text")
        ));
    }
    let reasoning = position(&|e| e.starts_with("reasoning:"));
    let first_text = position(&|e| e.starts_with("text:"));
    match (reasoning, first_text) {
        (Some(r), Some(t)) if r < t => {}
        _ => {
            return Err(format!(
                "the reasoning did not come before the text it preceded: {log:?}{}",
                subject.model.wire_note("reasoning")
            ))
        }
    }
    if let Some(finish) = position(&|e| e == "finish") {
        if finish != log.len() - 1 {
            return Err(format!("a part came after finish: {log:?}"));
        }
    }
    if !matches!(report.result, TurnResult::Completed { .. }) {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    Ok(format!("{} parts in the model's order", log.len()))
}

async fn tool_arguments_checked(subject: &Subject) -> CheckResult {
    let script = vec![
        call_step("read_plan", json!({ "page": "two" })),
        text_step("after the refusal"),
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    if !lock(&host.calls).is_empty() {
        return Err(format!(
            "the host ran a call whose arguments break the schema: {:?}",
            lock(&host.calls)
        ));
    }
    let seen = last_turn(subject).await?;
    let refusal = seen
        .tool_results
        .iter()
        .find(|r| r.name == "read_plan")
        .ok_or_else(|| "the model never read an answer to its call".to_owned())?;
    let words = match &refusal.output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    if !refusal.is_error || !words.contains("schema") {
        return Err(format!(
            "the model read {words:?}, not an error naming the schema"
        ));
    }
    if !matches!(report.result, TurnResult::Completed { .. })
        || !said(&host).contains("after the refusal")
    {
        return Err(format!(
            "the turn did not go on after the refused call: {:?}",
            report.result
        ));
    }
    Ok(format!("the model read: {words}"))
}

async fn parallel_tool_calls(subject: &Subject) -> CheckResult {
    let script = vec![
        call_step("read_plan", json!({ "page": 3 })),
        call_step("list_pull_requests", json!({ "page": 1 })),
        text_step("both read"),
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    let mut ran: Vec<String> = lock(&host.calls).iter().map(|(n, _)| n.clone()).collect();
    ran.sort();
    if ran != ["list_pull_requests", "read_plan"] {
        return Err(format!(
            "the host ran {ran:?}, not each call once{}",
            subject.model.wire_note("tool-call")
        ));
    }
    let seen = last_turn(subject).await?;
    let mut answered = Vec::new();
    for result in &seen.tool_results {
        if result.output["tool"] != Value::String(result.name.clone()) {
            return Err(format!(
                "the model read {} as the answer to its {} call",
                result.output, result.name
            ));
        }
        answered.push(result.name.clone());
    }
    answered.sort();
    if answered != ran {
        return Err(format!(
            "the model read answers to {answered:?}, not to both calls"
        ));
    }
    if !matches!(report.result, TurnResult::Completed { .. }) || !said(&host).contains("both read")
    {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    Ok("both calls ran; each answer reached the model with its own call".to_owned())
}

/// What a turn's failure says, or why it did not fail as it should.
fn failure_words(report: &TurnReport) -> Result<String, String> {
    match &report.result {
        TurnResult::Failed(TurnFailure::Adapter(words)) => Ok(words.clone()),
        other => Err(format!(
            "the turn did not end failed by the adapter: {other:?}"
        )),
    }
}

async fn model_failure_words(subject: &Subject) -> CheckResult {
    let retries = subject.harness.limits().retries.unwrap_or(0) as usize;
    let again = |step: Step| vec![step; retries + 1];
    let cases: Vec<(&str, Vec<Step>, Option<&str>)> = vec![
        (
            "a refused key",
            vec![Step::ProviderError {
                status: 401,
                retry_after_s: None,
            }],
            Some("401"),
        ),
        (
            "a provider error",
            again(Step::ProviderError {
                status: 503,
                retry_after_s: None,
            }),
            Some("503"),
        ),
        (
            "an answer broken off",
            vec![text_step("half an"), Step::BreakOff],
            None,
        ),
    ];
    let mut said_words = Vec::new();
    for (what, script, status) in cases {
        let (report, _host) = drive(subject, Drive::planner(script), |_, _| {}).await;
        let words = failure_words(&report).map_err(|e| format!("{what}: {e}"))?;
        if words.trim().is_empty() {
            return Err(format!("{what}: the turn failed without words"));
        }
        if let Some(status) = status {
            if !words.contains(status) {
                return Err(format!(
                    "{what}: the words do not name HTTP {status}: {words:?}"
                ));
            }
        }
        let lower = words.to_lowercase();
        if ["kept", "saved", "stored"]
            .iter()
            .any(|w| lower.contains(w))
        {
            return Err(format!(
                "{what}: the words speak of something kept (MSG-14): {words:?}"
            ));
        }
        if words.contains(CANARY_CREDENTIAL) || words.contains(provider::CONTRACT_MODEL_KEY) {
            return Err(format!("{what}: the words carry a credential"));
        }
        subject.model.settle().await;
        let unfinished = subject.model.unfinished_turns();
        if unfinished != 0 {
            return Err(format!("{what}: {unfinished} model call(s) still open"));
        }
        said_words.push(format!("{what}: {words:?}"));
    }
    let (report, host) = drive(
        subject,
        Drive::planner(vec![text_step("recovered")]),
        |_, _| {},
    )
    .await;
    if !matches!(report.result, TurnResult::Completed { .. }) || said(&host) != "recovered" {
        return Err(format!(
            "the turn after the failures did not work: {:?}",
            report.result
        ));
    }
    Ok(said_words.join("; "))
}

async fn bounded_retries(subject: &Subject) -> CheckResult {
    let declared = subject.harness.limits().retries;
    let retries = declared.unwrap_or(0) as usize;
    let unavailable = Step::ProviderError {
        status: 503,
        retry_after_s: None,
    };
    // Within the bound: the turn completes.
    let mut script = vec![unavailable.clone(); retries];
    script.push(text_step("answered"));
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    if !matches!(report.result, TurnResult::Completed { .. }) || said(&host) != "answered" {
        return Err(format!(
            "{retries} failure(s) before any output, within the declared {retries} retries, did not end in the answer: {:?}, said {:?}",
            report.result,
            said(&host)
        ));
    }
    let within = subject.model.model_calls();
    if within.is_some_and(|calls| calls != retries + 1) {
        return Err(format!(
            "within the bound the model was called {within:?} times, not {}",
            retries + 1
        ));
    }
    // Past the bound: the turn fails, after exactly the declared calls.
    let mut script = vec![unavailable; retries + 1];
    script.push(text_step("too late"));
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    failure_words(&report).map_err(|e| format!("past the bound: {e}"))?;
    if said(&host).contains("too late") {
        return Err("past the bound, the model was asked once more than declared".to_owned());
    }
    let past = subject.model.model_calls();
    if past.is_some_and(|calls| calls != retries + 1) {
        return Err(format!(
            "past the bound the model was called {past:?} times, not {}",
            retries + 1
        ));
    }
    // After output: never again.
    let script = vec![text_step("partial"), Step::BreakOff, text_step("replayed")];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    failure_words(&report).map_err(|e| format!("an answer broken off: {e}"))?;
    let text = said(&host);
    if text.contains("replayed") || text.matches("partial").count() != 1 {
        return Err(format!(
            "an answer broken off after output was replayed: the host got {text:?}"
        ));
    }
    let after = subject.model.model_calls();
    if after.is_some_and(|calls| calls != 1) {
        return Err(format!(
            "after output broke off the model was called {after:?} times, not once"
        ));
    }
    Ok(match declared {
        Some(n) => format!(
            "retries within {n}; {} call(s) past it, then failed; none after output",
            n + 1
        ),
        None => "declares no retries: a failure ends the turn at once; nothing replayed".to_owned(),
    })
}

async fn abort_during_tool(subject: &Subject) -> CheckResult {
    let script = vec![
        call_step("read_plan", json!({ "page": 1 })),
        text_step("after the tool"),
    ];
    let (report, host) = drive(subject, Drive::planner(script), |host, control| {
        let control = control.clone();
        *lock(&host.on_call) = Some(Box::new(move || {
            control.cancel("the owner lost access mid-tool")
        }));
    })
    .await;
    if report.result != TurnResult::Aborted {
        return Err(format!("the turn ended {:?}, not aborted", report.result));
    }
    if report.ended_by != TurnEnder::Adapter {
        return Err(format!(
            "the adapter did not end the stopped turn; the host ended it after {} ms",
            harness::ABORT_WAIT_MS
        ));
    }
    if said(&host).contains("after the tool") {
        return Err("the model went on after the stop".to_owned());
    }
    subject.model.settle().await;
    let unfinished = subject.model.unfinished_turns();
    if unfinished != 0 {
        return Err(format!(
            "{unfinished} model call(s) still open after the stop"
        ));
    }
    let turns = subject.model.turns();
    let seen = turns.last().ok_or("the model never ran the turn")?;
    if subject.model.model_calls().is_some_and(|calls| calls > 1) && !seen.cancelled {
        return Err("a model call after the stop was answered to its end".to_owned());
    }
    Ok("stopped inside read_plan: aborted, nothing said after, no call left open".to_owned())
}

async fn usage_reported(subject: &Subject) -> CheckResult {
    let script = vec![
        text_step("counted"),
        Step::Usage {
            input_tokens: 1234,
            output_tokens: 56,
        },
    ];
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    if !matches!(report.result, TurnResult::Completed { .. }) {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    let parts = lock(&host.parts).clone();
    let usage = parts.iter().rev().find_map(|p| match p {
        Part::Finish(finish) => Some(finish.usage.clone()),
        _ => None,
    });
    match usage {
        Some(Some(u)) if u.input_tokens == Some(1234) && u.output_tokens == Some(56) => {
            Ok("finish reports 1234 input and 56 output tokens".to_owned())
        }
        Some(other) => Err(format!(
            "the finish part reports {other:?}, not 1234 in and 56 out"
        )),
        None => Err("the turn streamed no finish part".to_owned()),
    }
}

async fn model_call_limit(subject: &Subject) -> CheckResult {
    let declared = subject.harness.limits().max_model_calls;
    let rounds = declared.map_or(20, |n| n + 1);
    let mut script = Vec::new();
    for round in 1..=rounds {
        script.push(text_step(&format!("round {round}. ")));
        script.push(call_step("read_plan", json!({ "page": round })));
    }
    script.push(text_step("done"));
    let (report, host) = drive(subject, Drive::planner(script), |_, _| {}).await;
    let ran = lock(&host.calls).len();
    match declared {
        Some(limit) => {
            let words = failure_words(&report)
                .map_err(|e| format!("{rounds} rounds past a limit of {limit} model calls: {e}"))?;
            if !words.contains(&limit.to_string()) {
                return Err(format!(
                    "the words do not name the limit of {limit}: {words:?}"
                ));
            }
            if ran > limit {
                return Err(format!(
                    "{ran} tool rounds ran under a limit of {limit} model calls"
                ));
            }
            let calls = subject.model.model_calls();
            if calls.is_some_and(|c| c > limit) {
                return Err(format!(
                    "the model was called {calls:?} times under a limit of {limit}"
                ));
            }
            Ok(format!("stopped at {limit} model calls: {words}"))
        }
        None => {
            if !matches!(report.result, TurnResult::Completed { .. }) || ran != rounds {
                return Err(format!(
                    "declares no limit, yet {rounds} rounds ended {:?} after {ran}",
                    report.result
                ));
            }
            Ok(format!("declares no limit; {rounds} rounds ran"))
        }
    }
}

async fn long_results_cut(subject: &Subject) -> CheckResult {
    let declared = subject.harness.limits().tool_result_max_bytes;
    let size = declared.map_or(64 * 1024, |max| max * 4);
    let script = vec![
        call_step("read_plan", json!({ "page": 1 })),
        text_step("read"),
    ];
    let (report, _host) = drive(subject, Drive::planner(script), |host, _| {
        *lock(&host.big) = Some(size);
    })
    .await;
    if !matches!(report.result, TurnResult::Completed { .. }) {
        return Err(format!("the turn did not complete: {:?}", report.result));
    }
    let seen = last_turn(subject).await?;
    let read = seen
        .tool_results
        .iter()
        .find(|r| r.name == "read_plan")
        .map(|r| match &r.output {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .ok_or("the model never read the result")?;
    let whole = "r".repeat(size);
    match declared {
        Some(max) => {
            let Some((kept, note)) = read.split_once(&format!("\n{}", harness::CUT_MARK)) else {
                return Err(format!(
                    "a {size}-byte result reached the model as {} bytes with no cut mark",
                    read.len()
                ));
            };
            if kept.len() > max || !whole.starts_with(kept) {
                return Err(format!(
                    "the cut result is {} bytes, over {max} or not the result's start",
                    kept.len()
                ));
            }
            let left = size - kept.len();
            if !note.starts_with(&format!("{left} more bytes")) {
                return Err(format!(
                    "the cut says {note:?}, not that {left} bytes were left out"
                ));
            }
            Ok(format!(
                "{size} bytes cut to {} with the note: {}{note}",
                kept.len(),
                harness::CUT_MARK
            ))
        }
        None => {
            if read != whole {
                return Err(format!(
                    "declares no cut, yet the model read {} of {size} bytes",
                    read.len()
                ));
            }
            Ok(format!(
                "declares no cut; all {size} bytes reached the model"
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running and reporting
// ---------------------------------------------------------------------------------------------

/// Pass or fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The adapter meets the rule.
    Pass,
    /// It does not; the row's detail says how.
    Fail,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
        })
    }
}

/// One row of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `ID name` of the check.
    pub check: String,
    /// The rule it checks, in words.
    pub rule: String,
    /// How long it took, in milliseconds (the host's clock; for reports, never for verdicts).
    pub millis: u64,
    /// Pass or fail.
    pub result: Verdict,
    /// What was seen.
    pub detail: String,
}

/// The outcome of [`run`]: one row per check, in [`checks`] order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The rows.
    pub rows: Vec<Row>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.result == Verdict::Pass)
    }

    /// The labels of the checks that failed.
    pub fn failed(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.result == Verdict::Fail)
            .map(|r| r.check.as_str())
            .collect()
    }

    /// The row of the check with this id, if it ran.
    pub fn row(&self, id: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.check.split(' ').next() == Some(id))
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self
            .rows
            .iter()
            .map(|r| r.check.len())
            .chain(std::iter::once("check".len()))
            .max()
            .unwrap_or(5);
        writeln!(f, "{:width$}  result  detail", "check")?;
        for row in &self.rows {
            writeln!(
                f,
                "{:width$}  {:6}  {}",
                row.check,
                row.result.to_string(),
                row.detail
            )?;
        }
        let failed = self.failed().len();
        write!(f, "{} passed, {} failed", self.rows.len() - failed, failed)
    }
}

/// The longest one check may take before it fails as stuck.
pub const CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// A failure's detail with the model's wire context, unless it already names the wire.
fn with_context(detail: String, subject: &Subject) -> String {
    let context = subject.model.wire_context();
    if context.is_empty() || detail.contains("the provider streamed") {
        detail
    } else {
        format!("{detail}{context}")
    }
}

/// Run every check against fresh subjects from `factory`.
pub async fn run(factory: &dyn SubjectFactory) -> Report {
    plant_canary();
    let mut rows = Vec::new();
    for check in checks() {
        // Wall time for the report only: verdicts never depend on it.
        let started = std::time::Instant::now();
        let outcome = match factory.create().await {
            Ok(subject) => match tokio::time::timeout(CHECK_DEADLINE, check.run(&subject)).await {
                Ok(Ok(detail)) => Ok(detail),
                Ok(Err(detail)) => Err(with_context(detail, &subject)),
                Err(_) => Err(with_context(
                    format!(
                        "the check did not finish within {} s",
                        CHECK_DEADLINE.as_secs()
                    ),
                    &subject,
                )),
            },
            Err(e) => Err(format!("could not build the adapter: {e}")),
        };
        let (result, detail) = match outcome {
            Ok(detail) => (Verdict::Pass, detail),
            Err(detail) => (Verdict::Fail, detail),
        };
        rows.push(Row {
            check: check.label(),
            rule: check.rule.to_owned(),
            millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            result,
            detail,
        });
    }
    Report { rows }
}
