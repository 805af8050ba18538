//! The contract subject for `remote`: the real server, in-process, with a scripted Planner
//! client attached over a real WebSocket, so the suite drives the remote adapter exactly as
//! `HARNESS=remote` would run it.
//!
//! Owns: building that world ([`remote_subject`]: a fake GitHub on loopback TCP where `mona`
//! writes to `octo/plans`, the server over a `MemoryStore`, a document, `mona`'s browser sign-in
//! through the OAuth routes, and her agent client attached offering `steer-turn`), and
//! [`RemoteModel`], the [`ContractModel`] played by that client: every [`Step`] of a queued
//! script becomes the frames the client sends, and everything the server sent it becomes
//! [`TurnSeen`] / [`SessionSeen`], recorded the way the fake harness records them so every
//! check means the same against both.
//!
//! Does not own: the adapter (`chopin_server::harness::remote`) or the link
//! (`chopin_server::transport::agent`); it only plays the member's side of the wire.
//!
//! How the client plays a script, per turn (one `turn` frame takes the next queued script, or
//! `[Text "ok"]`): `Text`/`Reasoning` → a `part`; `CallHostTool` → a `tool-input` part and a
//! `host-tool-call`, then it waits for the `host-tool-result` and records what it read;
//! `CallBuiltin` → the client declares no tools of its own, so, like the fake with its built-ins
//! filtered, the model reads "no such tool" and nothing is sent; `Output` → kept for `turn-end`;
//! `AwaitCancel` → waits for `abort`; `AwaitSteer` → waits for a `steer` (only when the link
//! accepted `steer-turn`) and says `steered: <text>`; `Fail` → an `error` part and `turn-end`
//! failed. At the end: a `finish` part and `turn-end` completed. An `abort` at any point records
//! the cancel and ends the turn `aborted` at once.
//!
//! `destroy` has no answer on the wire, so a teardown reaches the client some time after the
//! adapter's `destroy` returned. [`ContractModel::settle`] closes that gap: it sends a marker
//! frame through the same link, after everything the adapter queued, and waits until the client
//! has read it. The marker is a `destroy` of a session id starting with [`SETTLE_PREFIX`], which
//! the server never opens; the client does not record it as a teardown.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::http::{header, Request};
use chopin_fixtures::agent::{self, AgentClient, Event, Upgrade};
use chopin_fixtures::github::{FakeGitHub, Permission, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET};
use chopin_protocol::agent::{self as wire, ClientMessage, Feature, ServerMessage, TurnStatus};
use chopin_server::app::{self, Running};
use chopin_server::config::{Config, Secret};
use chopin_server::harness::fake::{self, SessionSeen, Step, ToolResultSeen, TurnSeen};
use chopin_server::harness::{
    self, ErrorPart, FinishPart, FinishReason, HarnessDeps, Part, RemoteDeps, TextPart,
    ToolInputPart,
};
use chopin_server::planner::{LinkCommand, Planners};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::connector::{self, HttpResponse, TcpConnector};
use chopin_server::runtime::entropy::OsEntropy;
use chopin_server::store::{MemoryStore, NewDocument, Store};
use chopin_server::Runtime;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::{ContractModel, Subject, SubjectError};

/// The session-id prefix of [`ContractModel::settle`]'s marker frame.
pub const SETTLE_PREFIX: &str = "contract-settle-";

/// How long [`ContractModel::settle`] waits for its marker before giving up (the checks then
/// read what has arrived).
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// The GitHub account whose client holds the Planner.
const LOGIN: &str = "mona";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn setup(what: &str) -> impl FnOnce(String) -> SubjectError + '_ {
    move |e| SubjectError::Setup(format!("{what}: {e}"))
}

/// A fresh world for one subject: fake GitHub, the server, a document, `mona` signed in and her
/// scripted client attached. The subject's harness is `harness::adapter("remote", …)` over the
/// server's link registry and that document; its model is the client ([`RemoteModel`]), which
/// also keeps the world alive: dropping the last clone of the subject stops it all.
pub async fn remote_subject() -> Result<Subject, SubjectError> {
    let mut world = World::default();

    // GitHub: mona writes to octo/plans.
    let github = FakeGitHub::new();
    github.add_user(LOGIN, 1001);
    github.add_repo("octo", "plans");
    github.grant("octo", "plans", LOGIN, Permission::Write);
    let token = github.issue_token(LOGIN);
    let github_listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| setup("bind the fake GitHub")(e.to_string()))?;
    let github_url = format!(
        "http://{}",
        github_listener
            .local_addr()
            .map_err(|e| setup("the fake GitHub's address")(e.to_string()))?
    );
    let router = github.router();
    world.tasks.push(Task(tokio::spawn(async move {
        let _ = chopin_server::serve(github_listener, router, std::future::pending()).await;
    })));

    // The server, on a listener bound first so its origin is known.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| setup("bind the server")(e.to_string()))?;
    let address = listener
        .local_addr()
        .map_err(|e| setup("the server's address")(e.to_string()))?;
    let host = address.to_string();
    let origin = format!("http://{host}");
    let data = tempfile::tempdir().map_err(|e| setup("a data directory")(e.to_string()))?;
    let mut config = Config::defaults_with_data_dir(data.path().to_path_buf());
    // The suite drives the Planner's sessions only.
    config.background_jobs = false;
    config.github_api_url = github_url.clone();
    config.github_web_url = github_url;
    config.github_app_client_id = Some(DEFAULT_CLIENT_ID.to_owned());
    config.github_app_client_secret = Some(Secret::new(DEFAULT_CLIENT_SECRET));
    config.app_origin = origin.clone();
    config.session_encryption_key = Some(Secret::new("33".repeat(32)));
    world.data = Some(data);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let running = app::start(
        config,
        store.clone(),
        Runtime {
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            connector: Arc::new(TcpConnector),
        },
    )
    .await
    .map_err(|e| setup("start the server")(e.to_string()))?;
    let state = running.app().clone();
    let router = running.router();
    world.running = Some(running);
    world.tasks.push(Task(tokio::spawn(async move {
        let _ = chopin_server::serve(listener, router, std::future::pending()).await;
    })));

    // A document of octo/plans.
    let document = state.runtime.entropy.uuid();
    store
        .create_document(&NewDocument {
            id: document,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "contract".into(),
            title: "Contract".into(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .map_err(|e| setup("create the document")(e.to_string()))?;

    // mona's browser sign-in (an attach needs one), then her client attaches.
    github.set_browser_user(LOGIN);
    sign_in(&origin).await.map_err(setup("sign mona in"))?;
    let stream = tokio::net::TcpStream::connect(&host)
        .await
        .map_err(|e| setup("connect the agent client")(e.to_string()))?;
    let mut client = agent::connect(stream, &Upgrade::new(host.clone(), Some(&token)))
        .await
        .map_err(|e| setup("open the agent connection")(e.to_string()))?;
    let features = match client
        .attach(&document.to_string(), &[Feature::SteerTurn.as_str()])
        .await
        .map_err(|e| setup("attach")(e.to_string()))?
    {
        ServerMessage::Attached(attached) => attached.features,
        other => return Err(setup("attach")(format!("the server answered {other:?}"))),
    };
    let steer = features.contains(&Feature::SteerTurn);

    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        settled: watch::Sender::new(0),
    });
    world
        .tasks
        .insert(0, Task(tokio::spawn(play(client, shared.clone(), steer))));

    let deps = HarnessDeps {
        remote: Some(RemoteDeps {
            links: state.planners.clone(),
            document,
            entropy: state.runtime.entropy.clone(),
        }),
        ..Default::default()
    };
    let harness = harness::adapter("remote", &deps)?;
    let model = Arc::new(RemoteModel {
        shared,
        planners: state.planners.clone(),
        document,
        next_marker: AtomicU64::new(0),
        _world: world,
    });
    Ok(Subject { harness, model })
}

// ---------------------------------------------------------------------------------------------
// Signing in through the OAuth routes
// ---------------------------------------------------------------------------------------------

async fn get(url: &str, cookie: Option<&str>) -> Result<HttpResponse, String> {
    let mut request = Request::get(url);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    let request = request
        .body(Bytes::new())
        .map_err(|e| format!("GET {url}: {e}"))?;
    connector::send(&TcpConnector, request)
        .await
        .map_err(|e| format!("GET {url}: {e}"))
}

fn location(response: &HttpResponse) -> Result<String, String> {
    response
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| format!("expected a redirect, got {}", response.status))
}

fn cookie_pair(response: &HttpResponse, name: &str) -> Result<String, String> {
    response
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned())
        .ok_or_else(|| format!("no {name} cookie (HTTP {})", response.status))
}

/// The browser sign-in: `/auth/github` → the fake's authorize page (which approves the browser
/// user) → the callback, carrying the attempt cookie. Returns the session cookie.
async fn sign_in(origin: &str) -> Result<String, String> {
    let start = get(&format!("{origin}/auth/github"), None).await?;
    let attempt = cookie_pair(&start, "chopin_oauth")?;
    let approve = get(&location(&start)?, None).await?;
    let callback = get(&location(&approve)?, Some(&attempt)).await?;
    cookie_pair(&callback, "chopin_session")
}

// ---------------------------------------------------------------------------------------------
// The world's lifetime
// ---------------------------------------------------------------------------------------------

/// A spawned task, aborted when dropped.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Everything a remote subject runs on; stopped when dropped.
#[derive(Default)]
struct World {
    /// The client first, then the fake GitHub and the server.
    tasks: Vec<Task>,
    running: Option<Running>,
    data: Option<tempfile::TempDir>,
}

impl Drop for World {
    fn drop(&mut self) {
        // The client goes first, so its link ends as a drop; then the listeners.
        for task in self.tasks.drain(..) {
            drop(task);
        }
        if let Some(running) = self.running.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(running.stop());
            }
        }
        self.data.take();
    }
}

// ---------------------------------------------------------------------------------------------
// The model: the scripted client
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct State {
    scripts: VecDeque<Vec<Step>>,
    turns: Vec<TurnSeen>,
    sessions: BTreeMap<String, SessionSeen>,
    running: usize,
    /// Why the client stopped reading, once it has.
    ended: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    /// The highest settle marker the client has read.
    settled: watch::Sender<u64>,
}

impl Shared {
    fn update(&self, index: usize, f: impl FnOnce(&mut TurnSeen)) {
        if let Some(turn) = lock(&self.state).turns.get_mut(index) {
            f(turn);
        }
    }

    /// The turn is over for the model (before its `turn-end` goes out).
    fn finish(&self) {
        let mut state = lock(&self.state);
        state.running = state.running.saturating_sub(1);
    }
}

/// The remote subject's model: `mona`'s scripted Planner client, attached to the subject's
/// document. Holds the subject's world (server, fake GitHub, client task) alive.
pub struct RemoteModel {
    shared: Arc<Shared>,
    planners: Arc<Planners>,
    document: Uuid,
    next_marker: AtomicU64,
    _world: World,
}

impl std::fmt::Debug for RemoteModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteModel")
            .field("document", &self.document)
            .field("state", &*lock(&self.shared.state))
            .finish_non_exhaustive()
    }
}

impl RemoteModel {
    /// Why the client stopped reading (the link closed or failed), if it has.
    pub fn ended(&self) -> Option<String> {
        lock(&self.shared.state).ended.clone()
    }
}

#[async_trait]
impl ContractModel for RemoteModel {
    fn script(&self, steps: Vec<Step>) {
        lock(&self.shared.state).scripts.push_back(steps);
    }

    fn turns(&self) -> Vec<TurnSeen> {
        lock(&self.shared.state).turns.clone()
    }

    fn sessions(&self) -> Vec<SessionSeen> {
        lock(&self.shared.state)
            .sessions
            .values()
            .cloned()
            .collect()
    }

    fn unfinished_turns(&self) -> usize {
        lock(&self.shared.state).running
    }

    /// Sends a marker through the document's link, behind every frame the adapter has queued,
    /// and waits (at most [`SETTLE_WAIT`]) until the client has read it.
    async fn settle(&self) {
        if self.ended().is_some() {
            return;
        }
        let Some(link) = self.planners.link_for(self.document) else {
            return;
        };
        let marker = self.next_marker.fetch_add(1, Ordering::SeqCst) + 1;
        let sent = link.command(LinkCommand::Send(Box::new(ServerMessage::Destroy(
            wire::Destroy {
                session_id: format!("{SETTLE_PREFIX}{marker}"),
            },
        ))));
        if !sent {
            return;
        }
        let mut settled = self.shared.settled.subscribe();
        let _ = tokio::time::timeout(SETTLE_WAIT, settled.wait_for(|seen| *seen >= marker)).await;
    }
}

/// What one running turn is waiting for.
#[derive(Debug)]
enum Wait {
    Nothing,
    HostResult { call_id: String, name: String },
    Cancel,
    Steer,
}

/// A turn the client is running.
#[derive(Debug)]
struct Live {
    index: usize,
    turn_id: String,
    session_id: String,
    steps: VecDeque<Step>,
    step: usize,
    output: Option<Value>,
    wait: Wait,
    steers: VecDeque<String>,
    /// Usage reported so far (`Step::Usage`), sent on the `finish` part.
    usage: Option<(u64, u64)>,
}

fn part(turn_id: &str, part: Part) -> ClientMessage {
    ClientMessage::Part(wire::PartMessage {
        turn_id: turn_id.to_owned(),
        part,
    })
}

fn turn_end(
    turn_id: &str,
    status: TurnStatus,
    output: Option<Value>,
    message: Option<String>,
) -> ClientMessage {
    ClientMessage::TurnEnd(wire::TurnEnd {
        turn_id: turn_id.to_owned(),
        status,
        output,
        message,
    })
}

/// The client's loop: read a frame, answer it, until the link ends.
async fn play(mut client: AgentClient, shared: Arc<Shared>, steer: bool) {
    let mut live: HashMap<String, Live> = HashMap::new();
    let ended = loop {
        let message = match client.recv().await {
            Ok(Event::Message(message)) => message,
            Ok(Event::Closed { code, reason }) => {
                break format!("the server closed the link with {code} {reason:?}")
            }
            Err(e) => break e.to_string(),
        };
        let mut failed = None;
        for frame in answer(&shared, &mut live, steer, message) {
            if let Err(e) = client.send(&frame).await {
                failed = Some(e.to_string());
                break;
            }
        }
        if let Some(e) = failed {
            break e;
        }
    };
    lock(&shared.state).ended = Some(ended);
    // Nobody will read another marker: let every settle go.
    shared.settled.send_replace(u64::MAX);
}

/// The frames the client sends in answer to one server message.
fn answer(
    shared: &Shared,
    live: &mut HashMap<String, Live>,
    steer: bool,
    message: ServerMessage,
) -> Vec<ClientMessage> {
    match message {
        ServerMessage::Start(start) => {
            lock(&shared.state).sessions.insert(
                start.session_id.clone(),
                SessionSeen {
                    id: start.session_id.clone(),
                    mode: start.mode,
                    model: None,
                    thinking_level: None,
                    teardowns: 0,
                },
            );
            vec![ClientMessage::Started(wire::Started {
                session_id: start.session_id,
            })]
        }
        ServerMessage::Turn(turn) => {
            let (index, script) = {
                let mut state = lock(&shared.state);
                state.running += 1;
                // `start` carries no model; the session's turns do.
                if let Some(session) = state.sessions.get_mut(&turn.session_id) {
                    if session.model.is_none() {
                        session.model = turn.model.clone();
                    }
                    if session.thinking_level.is_none() {
                        session.thinking_level = turn.thinking_level.clone();
                    }
                }
                state.turns.push(TurnSeen {
                    session_id: turn.session_id.clone(),
                    instructions: turn.instructions.clone(),
                    prompt: turn.prompt.clone(),
                    tools: turn.host_tools.clone(),
                    response_format: turn.response_format.clone(),
                    ..TurnSeen::default()
                });
                let script = state.scripts.pop_front().unwrap_or_else(|| {
                    vec![Step::Text {
                        text: "ok".to_owned(),
                    }]
                });
                (state.turns.len() - 1, script)
            };
            let mut run = Live {
                index,
                turn_id: turn.turn_id.clone(),
                session_id: turn.session_id,
                steps: script.into(),
                step: 0,
                output: None,
                wait: Wait::Nothing,
                steers: VecDeque::new(),
                usage: None,
            };
            let (frames, done) = advance(shared, &mut run, steer);
            if !done {
                live.insert(turn.turn_id, run);
            }
            frames
        }
        ServerMessage::HostToolResult(result) => {
            let Some(run) = live.get_mut(&result.turn_id) else {
                return Vec::new();
            };
            let name = match &run.wait {
                Wait::HostResult { call_id, name } if *call_id == result.call_id => name.clone(),
                _ => return Vec::new(),
            };
            shared.update(run.index, |t| {
                t.tool_results.push(ToolResultSeen {
                    name,
                    output: result.output,
                    is_error: result.is_error,
                })
            });
            run.wait = Wait::Nothing;
            continue_turn(shared, live, &result.turn_id, steer)
        }
        ServerMessage::Steer(message) => {
            let Some(run) = live.get_mut(&message.turn_id) else {
                return Vec::new();
            };
            run.steers.push_back(message.text);
            if matches!(run.wait, Wait::Steer) {
                run.wait = Wait::Nothing;
                continue_turn(shared, live, &message.turn_id, steer)
            } else {
                Vec::new()
            }
        }
        ServerMessage::Abort(abort) => match live.remove(&abort.turn_id) {
            Some(run) => {
                shared.update(run.index, |t| t.cancelled = true);
                shared.finish();
                vec![turn_end(&run.turn_id, TurnStatus::Aborted, None, None)]
            }
            None => Vec::new(),
        },
        ServerMessage::Destroy(destroy) => {
            if let Some(marker) = destroy.session_id.strip_prefix(SETTLE_PREFIX) {
                if let Ok(marker) = marker.parse::<u64>() {
                    shared
                        .settled
                        .send_modify(|seen| *seen = (*seen).max(marker));
                }
            } else if let Some(session) = lock(&shared.state).sessions.get_mut(&destroy.session_id)
            {
                // Like killing a process: every teardown the client is told of counts.
                session.teardowns += 1;
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// Resume a turn whose wait is over; forget it once it has ended.
fn continue_turn(
    shared: &Shared,
    live: &mut HashMap<String, Live>,
    turn_id: &str,
    steer: bool,
) -> Vec<ClientMessage> {
    let Some(run) = live.get_mut(turn_id) else {
        return Vec::new();
    };
    let (frames, done) = advance(shared, run, steer);
    if done {
        live.remove(turn_id);
    }
    frames
}

/// Run a turn's script until it waits or ends; `true` once it has ended (its `turn-end` is
/// among the frames).
fn advance(shared: &Shared, run: &mut Live, steer: bool) -> (Vec<ClientMessage>, bool) {
    let mut frames = Vec::new();
    let turn_id = run.turn_id.clone();
    loop {
        if !matches!(run.wait, Wait::Nothing) {
            return (frames, false);
        }
        let Some(step) = run.steps.pop_front() else {
            frames.push(part(
                &turn_id,
                Part::Finish(FinishPart {
                    finish_reason: FinishReason::Stop,
                    usage: run.usage.map(|(i, o)| wire::Usage {
                        input_tokens: Some(i),
                        output_tokens: Some(o),
                        reasoning_tokens: None,
                        cached_input_tokens: None,
                    }),
                }),
            ));
            shared.finish();
            frames.push(turn_end(
                &turn_id,
                TurnStatus::Completed,
                run.output.take(),
                None,
            ));
            return (frames, true);
        };
        let n = run.step;
        run.step += 1;
        match step {
            Step::Text { text } => frames.push(part(&turn_id, Part::Text(TextPart { text }))),
            Step::Reasoning { text } => {
                frames.push(part(&turn_id, Part::Reasoning(TextPart { text })))
            }
            Step::CallHostTool { name, input } => {
                let call_id = format!("{}-call-{n}", run.session_id);
                frames.push(part(
                    &turn_id,
                    Part::ToolInput(ToolInputPart {
                        tool_call_id: call_id.clone(),
                        tool_name: name.clone(),
                        delta: input.to_string(),
                    }),
                ));
                frames.push(ClientMessage::HostToolCall(wire::HostToolCall {
                    turn_id: turn_id.clone(),
                    call_id: call_id.clone(),
                    name: name.clone(),
                    input,
                }));
                run.wait = Wait::HostResult { call_id, name };
            }
            Step::CallBuiltin { name, .. } => {
                // No tools of its own are declared: the model reads "no such tool".
                shared.update(run.index, |t| {
                    t.tool_results.push(ToolResultSeen {
                        output: json!(format!("no such tool: {name}")),
                        name,
                        is_error: true,
                    })
                });
            }
            Step::Output { value } => run.output = Some(value),
            Step::AwaitCancel => run.wait = Wait::Cancel,
            Step::AwaitSteer if steer => match run.steers.pop_front() {
                Some(text) => {
                    shared.update(run.index, |t| t.steers.push(text.clone()));
                    frames.push(part(
                        &turn_id,
                        Part::Text(TextPart {
                            text: format!("steered: {text}"),
                        }),
                    ));
                }
                None => {
                    // Put it back: the next steer resumes it.
                    run.steps.push_front(Step::AwaitSteer);
                    run.step -= 1;
                    run.wait = Wait::Steer;
                }
            },
            Step::AwaitSteer => {}
            Step::Usage {
                input_tokens,
                output_tokens,
            } => {
                let (i, o) = run.usage.unwrap_or((0, 0));
                run.usage = Some((i + input_tokens, o + output_tokens));
            }
            step @ (Step::Fail { .. } | Step::ProviderError { .. } | Step::BreakOff) => {
                let message = match step {
                    Step::Fail { message } => message,
                    Step::ProviderError { status, .. } => fake::provider_error_words(status),
                    _ => fake::BREAK_OFF_WORDS.to_owned(),
                };
                frames.push(part(
                    &turn_id,
                    Part::Error(ErrorPart {
                        message: message.clone(),
                    }),
                ));
                shared.finish();
                frames.push(turn_end(&turn_id, TurnStatus::Failed, None, Some(message)));
                return (frames, true);
            }
        }
    }
}
