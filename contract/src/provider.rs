//! The contract subject for `provider`: the adapter exactly as `HARNESS=provider` builds it
//! (`chopin_server::harness::adapter("provider", …)` over the server's own connector on real
//! TCP), talking to the fake model provider of `chopin_fixtures::model_provider` in one wire
//! family, OpenAI's or Anthropic's.
//!
//! Owns: [`provider_subject`] and [`ProviderModel`], the [`ContractModel`] played by the fake
//! provider: a script of [`Step`]s becomes the provider's replies, and the requests the adapter
//! made become [`TurnSeen`] — what the model was given, read back off the wire.
//! Does not own: the adapter (`chopin_harness_provider`) or the wire formats (its model library
//! writes and reads them; the fake speaks them).
//!
//! How a script becomes replies, per turn: text, reasoning and structured output (`Output`, as
//! the JSON text of the answer) stream in the current reply; tool calls in a row are one reply
//! (parallel calls), and the model's next words start the next reply, which the adapter asks for
//! with the tools' results; `AwaitSteer` ends the reply, so the adapter stops and hands over a
//! waiting steer message with its next call; `AwaitCancel` hangs the reply mid-stream;
//! `ProviderError` is an HTTP error answering one call; `BreakOff` breaks the connection after
//! a pause (so what came before reached the adapter); `Usage` sets the reply's token counts;
//! `Fail` is a 400 carrying the message; `CallBuiltin` is nothing (the adapter has none).
//!
//! How requests become [`TurnSeen`]: a turn's requests are those that arrived after the script
//! was queued and before the next one; its tools, instructions, prompt and response format are
//! read from its first request, the tool results and steer messages the model read from its
//! last (which carries the whole conversation), and it saw the cancel if the adapter went away
//! from a reply before the reply ended.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chopin_fixtures::model_provider::{Chunk, FakeProvider, FormatChange, Recorded, Reply};
use chopin_harness_provider::{
    ApiKey, Bounds, Family, ProviderConfig, ProviderDeps, SessionLedger,
};
use chopin_server::harness::fake::{SessionSeen, Step, ToolResultSeen, TurnSeen};
use chopin_server::harness::{self, HarnessDeps, ToolSpec};
use chopin_server::runtime::connector::TcpConnector;
use serde_json::Value;

use crate::{ContractModel, Subject, SubjectError};

/// The operator's model key the subject is configured with. Only the provider's auth header
/// may carry it.
pub const CONTRACT_MODEL_KEY: &str = "sk-contract-operator-key-5e1f";

/// How long [`ContractModel::settle`] waits for the adapter to close its model calls.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Aborts the fake provider's server when the subject goes.
struct Serving(tokio::task::JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The wire family `--wire` names: `openai` or `anthropic`.
pub fn family(name: &str) -> Option<Family> {
    match name {
        "openai" => Some(Family::OpenAi),
        "anthropic" => Some(Family::Anthropic),
        _ => None,
    }
}

/// A fresh `provider` subject in `family`'s wire; `planted` changes the fake's wire format (the
/// rehearsal of a provider change the adapter's library does not read).
pub async fn provider_subject(
    family: Family,
    planted: Option<FormatChange>,
) -> Result<Subject, SubjectError> {
    let fake = FakeProvider::new();
    fake.plant(planted);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| SubjectError::Setup(format!("bind the fake provider: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| SubjectError::Setup(format!("the fake provider's address: {e}")))?;
    let router = fake.router();
    let serving = Serving(tokio::spawn(async move {
        let _ = chopin_server::serve(listener, router, std::future::pending()).await;
    }));
    let base_url = match family {
        Family::OpenAi => format!("http://{address}/v1"),
        Family::Anthropic => format!("http://{address}"),
    };
    let mut config = ProviderConfig::new(family, "contract-model", base_url);
    config.api_key = Some(ApiKey::new(CONTRACT_MODEL_KEY));
    // The adapter's defaults, but for pauses a test can wait out: retries pause from 50 ms, and
    // a provider silent for 3 s mid-stream is given up on.
    config.retry_base_ms = 50;
    config.retry_max_ms = 2_000;
    config.bounds = Bounds {
        head_ms: 10_000,
        idle_ms: 3_000,
        max_body_bytes: 16 * 1024 * 1024,
    };
    let ledger: Arc<Mutex<Vec<SessionLedger>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let deps = HarnessDeps {
        provider: Some(ProviderDeps {
            config,
            transport: harness::connector_transport(Arc::new(TcpConnector)),
            session_ids: Arc::new(move || {
                format!("provider-{}", next.fetch_add(1, Ordering::SeqCst) + 1)
            }),
            ledger: Some(ledger.clone()),
        }),
        ..HarnessDeps::default()
    };
    let adapter = harness::adapter("provider", &deps)?;
    let model = Arc::new(ProviderModel {
        fake,
        family,
        ledger,
        marks: Mutex::new(Vec::new()),
        _serving: serving,
    });
    Ok(Subject {
        harness: adapter,
        model,
    })
}

/// The fake provider as the suite's model.
pub struct ProviderModel {
    fake: FakeProvider,
    family: Family,
    ledger: Arc<Mutex<Vec<SessionLedger>>>,
    /// How many requests had arrived when each turn's script was queued.
    marks: Mutex<Vec<usize>>,
    _serving: Serving,
}

impl ProviderModel {
    /// The fake provider behind it.
    pub fn provider(&self) -> &FakeProvider {
        &self.fake
    }

    /// Each turn's requests, in order.
    fn turn_requests(&self) -> Vec<Vec<Recorded>> {
        let requests = self.fake.requests();
        let marks = lock(&self.marks).clone();
        marks
            .iter()
            .enumerate()
            .map(|(n, &start)| {
                let end = marks.get(n + 1).copied().unwrap_or(requests.len());
                requests
                    .get(start.min(requests.len())..end.min(requests.len()))
                    .unwrap_or_default()
                    .to_vec()
            })
            .collect()
    }
}

#[async_trait]
impl ContractModel for ProviderModel {
    fn script(&self, steps: Vec<Step>) {
        self.fake.clear_script();
        let turn = {
            let mut marks = lock(&self.marks);
            marks.push(self.fake.requests().len());
            marks.len()
        };
        for reply in replies(&steps, turn) {
            self.fake.script(reply);
        }
    }

    fn turns(&self) -> Vec<TurnSeen> {
        self.turn_requests()
            .iter()
            .filter(|requests| !requests.is_empty())
            .map(|requests| seen(self.family, requests))
            .collect()
    }

    fn sessions(&self) -> Vec<SessionSeen> {
        lock(&self.ledger)
            .iter()
            .map(|s| SessionSeen {
                id: s.id.clone(),
                mode: s.mode,
                model: Some(s.model.clone()),
                thinking_level: s.thinking_level.clone(),
                teardowns: s.teardowns,
            })
            .collect()
    }

    fn unfinished_turns(&self) -> usize {
        self.fake.in_flight()
    }

    async fn settle(&self) {
        let _ = tokio::time::timeout(SETTLE_WAIT, async {
            while self.fake.in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }

    fn model_calls(&self) -> Option<usize> {
        Some(self.turn_requests().last().map_or(0, Vec::len))
    }

    fn wire(&self) -> Vec<String> {
        self.fake.requests().iter().map(Recorded::as_text).collect()
    }

    fn wire_context(&self) -> String {
        format!(
            "; the provider streamed text as {}",
            self.fake.wire_shape(self.family.name(), "text")
        )
    }

    fn wire_note(&self, kind: &str) -> String {
        format!(
            "; the provider streamed it as {}",
            self.fake.wire_shape(self.family.name(), kind)
        )
    }
}

/// A script as the provider's replies for turn number `turn` (see the module docs).
pub fn replies(steps: &[Step], turn: usize) -> Vec<Reply> {
    struct Building {
        replies: Vec<Reply>,
        chunks: Vec<Chunk>,
        calls: bool,
        usage: (u64, u64),
    }
    impl Building {
        fn flush(&mut self) {
            let chunks = std::mem::take(&mut self.chunks);
            let (input_tokens, output_tokens) = std::mem::take(&mut self.usage);
            self.calls = false;
            self.replies.push(Reply::Stream {
                chunks,
                input_tokens,
                output_tokens,
            });
        }
        /// Words after tool calls start the next reply.
        fn words(&mut self, chunk: Chunk) {
            if self.calls {
                self.flush();
            }
            self.chunks.push(chunk);
        }
    }
    let mut b = Building {
        replies: Vec::new(),
        chunks: Vec::new(),
        calls: false,
        usage: (0, 0),
    };
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Text { text } => b.words(Chunk::Text { text: text.clone() }),
            Step::Reasoning { text } => b.words(Chunk::Reasoning { text: text.clone() }),
            Step::Output { value } => b.words(Chunk::Text {
                text: value.to_string(),
            }),
            Step::CallHostTool { name, input } => {
                b.chunks.push(Chunk::ToolCall {
                    id: format!("call_{turn}_{n}"),
                    name: name.clone(),
                    arguments: input.to_string(),
                });
                b.calls = true;
            }
            Step::CallBuiltin { .. } => {}
            Step::AwaitSteer => {
                if b.calls || !b.chunks.is_empty() {
                    b.flush();
                }
            }
            Step::AwaitCancel => {
                b.chunks.push(Chunk::Hang);
                b.flush();
            }
            Step::Usage {
                input_tokens,
                output_tokens,
            } => {
                b.usage.0 += input_tokens;
                b.usage.1 += output_tokens;
            }
            Step::ProviderError {
                status,
                retry_after_s,
            } => {
                if b.calls || !b.chunks.is_empty() {
                    b.flush();
                }
                b.replies.push(Reply::Error {
                    status: *status,
                    retry_after_s: *retry_after_s,
                    message: format!("scripted HTTP {status}"),
                });
            }
            Step::BreakOff => {
                if !b.chunks.is_empty() {
                    b.chunks.push(Chunk::Delay { ms: 100 });
                }
                b.chunks.push(Chunk::Cut);
                b.flush();
            }
            Step::Fail { message } => {
                if b.calls || !b.chunks.is_empty() {
                    b.flush();
                }
                b.replies.push(Reply::Error {
                    status: 400,
                    retry_after_s: None,
                    message: message.clone(),
                });
            }
        }
    }
    if !b.chunks.is_empty() || b.replies.is_empty() || b.calls {
        b.flush();
    }
    b.replies
}

/// Text of a message `content`: a string, or the text blocks of a list.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A tool result's text as the value it was: JSON if it parses, the text otherwise.
fn value_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The text of a request's first user message: the turn's prompt.
fn first_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default()
}

/// The tools a request offered: each entry's `name`, `description` and the schema under
/// `schema`, in the object `inner` finds in the entry (OpenAI wraps it in `function`).
fn tool_specs(tools: &Value, inner: impl Fn(&Value) -> &Value, schema: &str) -> Vec<ToolSpec> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    tools
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(inner)
                .map(|t| ToolSpec {
                    name: text(&t["name"]),
                    description: text(&t["description"]),
                    input_schema: t[schema].clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One turn's [`TurnSeen`] from its requests (at least one).
fn seen(family: Family, requests: &[Recorded]) -> TurnSeen {
    let first = &requests[0].body;
    let last = &requests[requests.len() - 1].body;
    let mut turn = TurnSeen {
        cancelled: requests.iter().any(|r| r.abandoned),
        ..TurnSeen::default()
    };
    match family {
        Family::OpenAi => {
            let messages = first["messages"].as_array().cloned().unwrap_or_default();
            turn.instructions = messages
                .iter()
                .filter(|m| m["role"] == "system" || m["role"] == "developer")
                .map(|m| text_of(&m["content"]))
                .collect::<Vec<_>>()
                .join("\n");
            turn.prompt = first_user_text(&messages);
            turn.tools = tool_specs(&first["tools"], |t| &t["function"], "parameters");
            turn.response_format = first
                .pointer("/response_format/json_schema/schema")
                .cloned();
            let messages = last["messages"].as_array().cloned().unwrap_or_default();
            let mut names = std::collections::BTreeMap::new();
            let mut users = 0usize;
            for m in &messages {
                match m["role"].as_str() {
                    Some("assistant") => {
                        for call in m["tool_calls"].as_array().into_iter().flatten() {
                            names.insert(
                                call["id"].as_str().unwrap_or_default().to_owned(),
                                call["function"]["name"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_owned(),
                            );
                        }
                    }
                    Some("tool") => {
                        let id = m["tool_call_id"].as_str().unwrap_or_default();
                        let text = text_of(&m["content"]);
                        turn.tool_results.push(ToolResultSeen {
                            name: names.get(id).cloned().unwrap_or_default(),
                            is_error: !text.trim_start().starts_with(['{', '[']),
                            output: value_of(&text),
                        });
                    }
                    Some("user") => {
                        users += 1;
                        if users > 1 {
                            turn.steers.push(text_of(&m["content"]));
                        }
                    }
                    _ => {}
                }
            }
        }
        Family::Anthropic => {
            turn.instructions = text_of(&first["system"]);
            let messages = first["messages"].as_array().cloned().unwrap_or_default();
            turn.prompt = first_user_text(&messages);
            turn.tools = tool_specs(&first["tools"], |t| t, "input_schema");
            turn.response_format = first.pointer("/output_config/format/schema").cloned();
            let messages = last["messages"].as_array().cloned().unwrap_or_default();
            let mut names = std::collections::BTreeMap::new();
            let mut users = 0usize;
            for m in &messages {
                let blocks = match &m["content"] {
                    Value::Array(blocks) => blocks.clone(),
                    other => vec![serde_json::json!({ "type": "text", "text": text_of(other) })],
                };
                match m["role"].as_str() {
                    Some("assistant") => {
                        for block in blocks.iter().filter(|b| b["type"] == "tool_use") {
                            names.insert(
                                block["id"].as_str().unwrap_or_default().to_owned(),
                                block["name"].as_str().unwrap_or_default().to_owned(),
                            );
                        }
                    }
                    Some("user") => {
                        let mut results = false;
                        for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
                            results = true;
                            let id = block["tool_use_id"].as_str().unwrap_or_default();
                            let text = text_of(&block["content"]);
                            turn.tool_results.push(ToolResultSeen {
                                name: names.get(id).cloned().unwrap_or_default(),
                                is_error: block["is_error"] == Value::Bool(true)
                                    || !text.trim_start().starts_with(['{', '[']),
                                output: value_of(&text),
                            });
                        }
                        let text: String = blocks
                            .iter()
                            .filter(|b| b["type"] == "text")
                            .filter_map(|b| b["text"].as_str())
                            .collect();
                        if !results || !text.is_empty() {
                            users += 1;
                            if users > 1 && !text.is_empty() {
                                turn.steers.push(text);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    turn
}
