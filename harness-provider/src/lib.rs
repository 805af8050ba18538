//! The `provider` adapter: the Planner's model runs in this process, through a model provider's
//! API — any OpenAI-compatible endpoint (OpenAI, Azure OpenAI's v1 endpoint, Ollama, vLLM,
//! llama.cpp's server, OpenRouter…) or Anthropic's Messages API — over the rig model library
//! (`rig-core` for providers, streaming and tool-call JSON; `rig-agent` for the agent loop).
//! It fills the role hosted-agent.md gives the in-server `copilot-sdk` adapter.
//!
//! Owns: [`ProviderHarness`] and its sessions: each turn builds a rig agent whose only tools are
//! the turn's host tools (each call checked against the tool's schema, then run by the host
//! through [`TurnIo::call_host_tool`], its result cut to
//! [`ProviderConfig::tool_result_max_bytes`]), streams what the model says as the turn's parts,
//! gives a person's steer message to the model when it next stops to answer, ends promptly when
//! the turn is cancelled (dropping the stream closes the HTTP request), and keeps the
//! conversation for the session's next turn. Model calls go out through the host's transport
//! ([`transport::RigHttp`]) with a deadline and a body cap each; a call that fails before the
//! model said anything is tried again at most [`ProviderConfig::retries`] times (after the
//! provider's `retry-after`, or a doubling pause), on tokio's clock — the simulator's in
//! scenarios. A failure ends the turn with words for the people in Chat ([`words`]).
//! Does not own: which host tools exist or what they do (the host), the turn driver's checks
//! (`chopin_harness::run_turn`), or which model and key to use (the server's settings).
//!
//! Trust boundary: the adapter has no built-in tools, no shell, no filesystem and starts no
//! process; the model is offered exactly the turn's host tools. Nothing it is given holds a
//! GitHub credential — host tools run in the host with the owner's token, and only their
//! results cross. The model credential is the operator's ([`ApiKey`]), sent only to the
//! provider, never logged.

pub mod transport;
pub mod words;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chopin_harness::transport::HttpTransport;
use chopin_harness::{
    Capabilities, Catalog, CatalogModel, ErrorPart, FinishPart, FinishReason, Harness,
    HarnessError, HarnessSession, Limits, Offer, Part, SessionRequest, TextPart, ToolInputPart,
    ToolSpec, TurnIo, TurnOutcome, TurnRequest,
};
use futures::StreamExt;
use rig_agent::agent::{
    HookContext, InvalidToolCallAction, ModelTurnAction, ModelTurnFinished, MultiTurnStreamItem,
    ReasoningDelta, TextDelta, ToolCallDelta,
};
use rig_agent::{AgentBuilder, AgentHook};
use rig_core::message::Message;
use rig_core::tool::{DynamicTool, ToolErrorKind, ToolExecutionError, ToolOutput};
use serde_json::Value;

pub use transport::Bounds;
use words::Failure;

/// The name the server's map registers this adapter under (`HARNESS=provider`).
pub const NAME: &str = "provider";

/// Which wire the provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// OpenAI's Chat Completions (any OpenAI-compatible endpoint).
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl Family {
    /// The `MODEL` prefix naming it: `openai` or `anthropic`.
    pub fn name(self) -> &'static str {
        match self {
            Family::OpenAi => "openai",
            Family::Anthropic => "anthropic",
        }
    }
}

/// The operator's model credential. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// What the adapter runs: the server builds it from its settings.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub family: Family,
    /// The model id the provider knows (`MODEL` without its `provider/` prefix).
    pub model: String,
    /// The API's base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The key, when the endpoint needs one.
    pub api_key: Option<ApiKey>,
    /// A reasoning effort (`minimal`, `low`, `medium`, `high`) where the model has one.
    pub reasoning: Option<String>,
    /// The most tokens one model call may write; `None`: the provider's default (Anthropic, which
    /// has none, gets [`ANTHROPIC_MAX_OUTPUT_TOKENS`]).
    pub max_output_tokens: Option<u64>,
    /// The most model calls one turn makes (each tool round is one).
    pub max_model_calls: usize,
    /// The most bytes of one tool result the model is given; a longer one is cut, and says so.
    pub tool_result_max_bytes: usize,
    /// How often a model call that failed before any output is tried again.
    pub retries: u32,
    /// The first pause before a retry when the provider names none; it doubles each time.
    pub retry_base_ms: u64,
    /// The most any one pause before a retry lasts, whatever the provider asks.
    pub retry_max_ms: u64,
    /// Each model call's deadline and body cap.
    pub bounds: Bounds,
    /// Also offer every model the provider's API lists (`PROVIDER_MODELS` with `*`): read at
    /// most once a minute, shared by every clone of this configuration. `None`: not asked.
    pub listing: Option<Arc<ModelListing>>,
    /// The models besides [`ProviderConfig::model`] a writer may choose (`PROVIDER_MODELS`),
    /// in the operator's order, on the same API and key. [`ProviderConfig::model`] is offered
    /// first whether or not it is listed here; listed, it takes the levels given here.
    pub offered: Vec<OfferedModel>,
    /// The models that read images (API ids); `*` among them: every one. A catalog entry says
    /// so in its `inputTypes` (FILE-23).
    pub image_models: Vec<String>,
}

/// A model the operator offers writers, as the provider's API knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedModel {
    /// The id the API knows (no `provider/` prefix).
    pub model: String,
    /// The reasoning levels a writer may choose for it; empty: none.
    pub levels: Vec<String>,
}

impl ProviderConfig {
    /// A configuration with this adapter's defaults: 16 tool rounds, tool results cut at
    /// 32 KiB, 2 retries from 1 s (at most 30 s), a model's answer begun within 60 s and never
    /// silent for 60 s, at most 16 MiB.
    pub fn new(family: Family, model: impl Into<String>, base_url: impl Into<String>) -> Self {
        ProviderConfig {
            family,
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            reasoning: None,
            max_output_tokens: None,
            max_model_calls: 16,
            tool_result_max_bytes: 32 * 1024,
            retries: 2,
            retry_base_ms: 1_000,
            retry_max_ms: 30_000,
            bounds: Bounds {
                head_ms: 60_000,
                idle_ms: 60_000,
                max_body_bytes: 16 * 1024 * 1024,
            },
            offered: Vec::new(),
            listing: None,
            image_models: Vec::new(),
        }
    }

    /// The catalog a writer chooses from (MOD-07, MOD-08 as they fit this adapter): the
    /// operator's `MODEL` first and marked default, then every other offered model in the
    /// operator's order, each as `provider/model`. No commands (CMD-07).
    pub fn catalog(&self) -> Catalog {
        self.catalog_with(&[])
    }

    /// [`ProviderConfig::catalog`], then the `listed` models it does not have yet, in the API's
    /// order, up to [`LISTED_MODELS_MAX`] entries in all.
    pub fn catalog_with(&self, listed: &[String]) -> Catalog {
        let mut models = vec![self.entry(&self.model, true)];
        let others = self.offered.iter().map(|o| o.model.as_str());
        for model in others.chain(listed.iter().map(String::as_str)) {
            if models.len() >= LISTED_MODELS_MAX {
                break;
            }
            let entry = self.entry(model, false);
            if !models.iter().any(|m| m.id == entry.id) {
                models.push(entry);
            }
        }
        Catalog {
            models,
            commands: Some(Vec::new()),
        }
    }

    /// `model`'s catalog entry: `provider/model`, with the levels `PROVIDER_MODELS` gives it.
    fn entry(&self, model: &str, default: bool) -> CatalogModel {
        CatalogModel {
            id: format!("{}/{model}", self.family.name()),
            name: None,
            description: None,
            thinking_levels: self
                .offered
                .iter()
                .find(|o| o.model == model)
                .map(|o| o.levels.clone())
                .unwrap_or_default(),
            input_types: if self.reads_images(model) {
                vec!["text".to_owned(), "image".to_owned()]
            } else {
                vec!["text".to_owned()]
            },
            default,
        }
    }

    /// Whether the API's model `model` reads images (`PROVIDER_IMAGE_MODELS`).
    pub fn reads_images(&self, model: &str) -> bool {
        self.image_models.iter().any(|m| m == "*" || m == model)
    }

    /// The API's id for the catalog id `id` (`provider/model`), if it is this family's.
    fn api_model<'a>(&self, id: &'a str) -> Option<&'a str> {
        id.strip_prefix(self.family.name())?.strip_prefix('/')
    }
}

/// The most models a catalog built with the provider's listing holds.
pub const LISTED_MODELS_MAX: usize = 256;
/// How long a model listing (or its failure) is used before the provider is asked again.
pub const LISTING_FRESH_MS: u64 = 60_000;
/// The most bytes of a model listing read.
const LISTING_MAX_BYTES: usize = 1024 * 1024;

/// The provider's model listing (`GET …/models`), read once for everyone who asks within
/// [`LISTING_FRESH_MS`]: concurrent askers wait for the one request in flight. Time is tokio's.
#[derive(Debug, Default)]
pub struct ModelListing {
    last: tokio::sync::Mutex<Option<Listed>>,
}

/// When the listing was last read, and what it gave.
type Listed = (tokio::time::Instant, Result<Vec<String>, String>);

impl ModelListing {
    /// The ids the provider lists, in its order (at most [`LISTED_MODELS_MAX`]), or why they
    /// could not be read.
    pub async fn read(
        &self,
        config: &ProviderConfig,
        transport: &dyn HttpTransport,
    ) -> Result<Vec<String>, String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last {
            if at.elapsed() < Duration::from_millis(LISTING_FRESH_MS) {
                return answer.clone();
            }
        }
        let deadline = Duration::from_millis(config.bounds.head_ms.max(1));
        let answer = match tokio::time::timeout(deadline, list(config, transport)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "the model provider did not list its models within {} ms",
                deadline.as_millis()
            )),
        };
        *last = Some((tokio::time::Instant::now(), answer.clone()));
        answer
    }
}

/// One `GET …/models` with the operator's key: `data[].id`.
async fn list(
    config: &ProviderConfig,
    transport: &dyn HttpTransport,
) -> Result<Vec<String>, String> {
    let base = config.base_url.trim_end_matches('/');
    let url = match config.family {
        Family::OpenAi => format!("{base}/models"),
        Family::Anthropic if base.ends_with("/v1") => format!("{base}/models"),
        Family::Anthropic => format!("{base}/v1/models"),
    };
    let mut request = http::Request::get(&url);
    if let Some(key) = &config.api_key {
        request = match config.family {
            Family::OpenAi => request.header("authorization", format!("Bearer {}", key.0)),
            Family::Anthropic => request
                .header("x-api-key", key.0.as_str())
                .header("anthropic-version", "2023-06-01"),
        };
    }
    let request = request
        .body(bytes::Bytes::new())
        .map_err(|e| format!("the model listing request could not be made: {e}"))?;
    let response = transport
        .send(request, LISTING_MAX_BYTES)
        .await
        .map_err(|e| format!("the model provider could not be reached to list its models: {e}"))?;
    let status = response.status();
    let mut body = Vec::new();
    let mut chunks = response.into_body();
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(&chunk.map_err(|e| format!("the model listing broke off: {e}"))?);
    }
    if !status.is_success() {
        return Err(format!(
            "the model provider answered HTTP {} to the model listing",
            status.as_u16()
        ));
    }
    let parsed: Value = serde_json::from_slice(&body)
        .map_err(|_| "the model provider's listing is not JSON".to_owned())?;
    let ids = parsed
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| "the model provider's listing has no \"data\" list".to_owned())?
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .filter(|id| !id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control))
        .take(LISTED_MODELS_MAX)
        .map(str::to_owned)
        .collect();
    Ok(ids)
}

/// The output-token bound of an Anthropic call when none is set (its API requires one).
pub const ANTHROPIC_MAX_OUTPUT_TOKENS: u64 = 8192;

/// A session the adapter opened, and how often it was torn down (what the contract suite reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLedger {
    pub id: String,
    /// Planner or isolated, as asked.
    pub mode: chopin_harness::SessionMode,
    /// The model it runs.
    pub model: String,
    /// The reasoning level asked for, if any.
    pub thinking_level: Option<String>,
    /// How often it was torn down (once, however often `destroy` is called).
    pub teardowns: u32,
}

/// What the adapter is built from.
#[derive(Clone)]
pub struct ProviderDeps {
    pub config: ProviderConfig,
    /// The host's outbound HTTP.
    pub transport: Arc<dyn HttpTransport>,
    /// A fresh session id each call (the host's randomness).
    pub session_ids: Arc<dyn Fn() -> String + Send + Sync>,
    /// Where sessions are recorded, for a test that counts them; shared by every adapter built
    /// from these deps. `None` in a server, which keeps no record of ended sessions.
    pub ledger: Option<Arc<Mutex<Vec<SessionLedger>>>>,
}

impl std::fmt::Debug for ProviderDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderDeps")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The adapter.
pub struct ProviderHarness {
    deps: ProviderDeps,
}

impl ProviderHarness {
    pub fn new(deps: ProviderDeps) -> Self {
        ProviderHarness { deps }
    }

    /// Every session opened so far, with its teardowns.
    pub fn sessions(&self) -> Vec<SessionLedger> {
        self.deps
            .ledger
            .as_ref()
            .map(|l| lock(l).clone())
            .unwrap_or_default()
    }
}

/// The person's message as the provider reads it: the prompt, then each file as its own part
/// (FILE-23) — a text file as a text document titled by its name (its name heads its text too,
/// since an OpenAI-compatible API keeps no title), an image as an image part in base64.
fn user_message(prompt: &str, files: &[chopin_harness::TurnFile]) -> rig_core::message::Message {
    use base64::Engine as _;
    use rig_core::message::{
        Document, DocumentMediaType, DocumentSourceKind, ImageMediaType, UserContent,
    };
    if files.is_empty() {
        return rig_core::message::Message::user(prompt);
    }
    let mut parts = vec![UserContent::text(prompt)];
    for file in files {
        match file {
            chopin_harness::TurnFile::Text { name, text, .. } => {
                parts.push(UserContent::Document(Document {
                    data: DocumentSourceKind::String(format!("[File: {name}]\n{text}")),
                    media_type: Some(DocumentMediaType::TXT),
                    additional_params: Some(serde_json::json!({ "title": name })),
                }));
            }
            chopin_harness::TurnFile::Image {
                mime_type, data, ..
            } => {
                let media_type = match mime_type.as_str() {
                    "image/png" => ImageMediaType::PNG,
                    "image/jpeg" => ImageMediaType::JPEG,
                    "image/gif" => ImageMediaType::GIF,
                    _ => ImageMediaType::WEBP,
                };
                parts.push(UserContent::image_base64(
                    base64::engine::general_purpose::STANDARD.encode(data),
                    Some(media_type),
                    None,
                ));
            }
        }
    }
    rig_core::message::Message::from(parts)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl Harness for ProviderHarness {
    fn name(&self) -> &str {
        NAME
    }

    /// None: the model has no tool of its own, only the turn's host tools.
    fn builtin_tools(&self) -> Vec<String> {
        Vec::new()
    }

    fn can_filter_builtins(&self) -> bool {
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            steer: true,
            model_catalog: true,
            images: !self.deps.config.image_models.is_empty(),
        }
    }

    async fn catalog(&self) -> Result<Offer, HarnessError> {
        let config = &self.deps.config;
        let Some(listing) = &config.listing else {
            return Ok(Offer::Known(config.catalog()));
        };
        let listed = listing
            .read(config, &*self.deps.transport)
            .await
            .map_err(|message| HarnessError::Unavailable { message })?;
        Ok(Offer::Known(config.catalog_with(&listed)))
    }

    fn limits(&self) -> Limits {
        let c = &self.deps.config;
        Limits {
            max_model_calls: Some(c.max_model_calls.max(1)),
            tool_result_max_bytes: Some(c.tool_result_max_bytes),
            retries: Some(c.retries),
        }
    }

    async fn start_session(
        &self,
        request: SessionRequest,
    ) -> Result<Box<dyn HarnessSession>, HarnessError> {
        let mut config = self.deps.config.clone();
        if let Some(model) = request.model.clone().filter(|m| !m.is_empty()) {
            // A catalog id (`provider/model`) or the API's own.
            config.model = config.api_model(&model).unwrap_or(&model).to_owned();
        }
        if let Some(level) = request.thinking_level.clone() {
            config.reasoning = Some(level);
        }
        let id = (self.deps.session_ids)();
        if let Some(ledger) = &self.deps.ledger {
            lock(ledger).push(SessionLedger {
                id: id.clone(),
                mode: request.mode,
                model: config.model.clone(),
                thinking_level: request.thinking_level.clone(),
                teardowns: 0,
            });
        }
        Ok(Box::new(ProviderSession {
            id,
            config,
            transport: self.deps.transport.clone(),
            ledger: self.deps.ledger.clone(),
            history: Mutex::new(Vec::new()),
            destroyed: AtomicBool::new(false),
        }))
    }
}

/// One session: the conversation so far, kept for its next turn.
pub struct ProviderSession {
    id: String,
    config: ProviderConfig,
    transport: Arc<dyn HttpTransport>,
    ledger: Option<Arc<Mutex<Vec<SessionLedger>>>>,
    history: Mutex<Vec<Message>>,
    destroyed: AtomicBool,
}

#[async_trait]
impl HarnessSession for ProviderSession {
    fn id(&self) -> &str {
        &self.id
    }

    async fn run_turn(&self, turn: TurnRequest, io: TurnIo) -> TurnOutcome {
        let mut retried = 0u32;
        loop {
            let spoke = Arc::new(AtomicBool::new(false));
            let failure = match self.attempt(&turn, &io, spoke.clone()).await {
                Ok(outcome) => return outcome,
                Err(failure) => failure,
            };
            let before_output = !spoke.load(Ordering::SeqCst);
            if failure.retryable
                && before_output
                && retried < self.config.retries
                && !turn.cancel.is_cancelled()
            {
                let pause = failure
                    .retry_after_ms
                    .unwrap_or(self.config.retry_base_ms << retried)
                    .min(self.config.retry_max_ms);
                tracing::info!(session = %self.id, retried, pause_ms = pause, error = %failure.words, "a model call failed before any output; trying again");
                retried += 1;
                tokio::select! {
                    biased;
                    _ = turn.cancel.cancelled() => return TurnOutcome::aborted(),
                    () = tokio::time::sleep(Duration::from_millis(pause)) => {}
                }
                continue;
            }
            tracing::warn!(session = %self.id, retried, error = %failure.detail, "the model provider failed the turn");
            io.emit(Part::Error(ErrorPart {
                message: failure.words.clone(),
            }))
            .await;
            return TurnOutcome::failed(failure.words);
        }
    }

    async fn destroy(&self) {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return;
        }
        lock(&self.history).clear();
        if let Some(ledger) = &self.ledger {
            if let Some(entry) = lock(ledger).iter_mut().find(|s| s.id == self.id) {
                entry.teardowns += 1;
            }
        }
    }

    fn is_usable(&self) -> bool {
        !self.destroyed.load(Ordering::SeqCst)
    }
}

impl ProviderSession {
    /// One run of the turn on rig's agent loop: the outcome, or why it failed.
    async fn attempt(
        &self,
        turn: &TurnRequest,
        io: &TurnIo,
        spoke: Arc<AtomicBool>,
    ) -> Result<TurnOutcome, Failure> {
        let http = transport::RigHttp::new(self.transport.clone(), self.config.bounds);
        let key = self
            .config
            .api_key
            .as_ref()
            .map(|k| k.0.clone())
            .unwrap_or_default();
        let tools: Vec<DynamicTool> = turn
            .host_tools
            .iter()
            .map(|spec| host_tool(spec, io, self.config.tool_result_max_bytes))
            .collect::<Result<_, _>>()?;
        let rounds = self.config.max_model_calls.max(1);
        // The turn's own model and level (MOD-13); with no level chosen, the operator's
        // `MODEL_REASONING` for their own model, else the model's own.
        let model = turn
            .model
            .as_deref()
            .and_then(|id| self.config.api_model(id))
            .unwrap_or(&self.config.model)
            .to_owned();
        let reasoning = match (&turn.model, &turn.thinking_level) {
            (Some(_), Some(level)) => Some(level.clone()),
            _ if model == self.config.model => self.config.reasoning.clone(),
            _ => None,
        };
        let effort = reasoning.as_deref().and_then(effort);
        let max_output_tokens = match self.config.family {
            Family::Anthropic => Some(
                self.config
                    .max_output_tokens
                    .unwrap_or(ANTHROPIC_MAX_OUTPUT_TOKENS),
            ),
            Family::OpenAi => self.config.max_output_tokens,
        };
        let output_schema = match &turn.response_format {
            Some(schema) => Some(
                rig_core::schemars::Schema::try_from(schema.clone()).map_err(|e| {
                    Failure::internal(format!("the response format is not a JSON Schema: {e}"))
                })?,
            ),
            None => None,
        };
        macro_rules! build {
            ($model:expr) => {{
                let mut builder = AgentBuilder::new($model)
                    .preamble(turn.instructions.clone())
                    .default_max_turns(rounds);
                if let Some(effort) = effort {
                    builder = builder.reasoning(effort);
                }
                if let Some(max) = max_output_tokens {
                    builder = builder.max_tokens(max);
                }
                if let Some(schema) = output_schema.clone() {
                    builder = builder.output_schema_raw(schema);
                }
                builder.dynamic_tools(tools).build()
            }};
        }
        let agent = match self.config.family {
            Family::OpenAi => build!(rig_core::providers::openai::OpenAIConfig::new(key)
                .with_base_url(self.config.base_url.clone())
                .connect(http)
                .chat(model.clone())),
            Family::Anthropic => build!(rig_core::providers::anthropic::AnthropicConfig::new(key)
                .with_base_url(&self.config.base_url)
                .connect(http)
                .completion(model.clone())),
        };
        let history = lock(&self.history).clone();
        let hook = TurnHook {
            io: io.clone(),
            spoke: spoke.clone(),
            steps: Arc::new(AtomicUsize::new(0)),
        };
        let mut stream = agent
            .prompt(user_message(&turn.prompt, &turn.attachments))
            .history(history)
            .max_turns(rounds)
            .add_hook(hook)
            .stream();
        loop {
            let item = tokio::select! {
                biased;
                _ = turn.cancel.cancelled() => {
                    // Dropping the stream drops the model call and closes its connection.
                    drop(stream);
                    return Ok(TurnOutcome::aborted());
                }
                item = stream.next() => item,
            };
            match item {
                None => {
                    return Err(Failure::internal(
                        "the model's run ended without an answer".to_owned(),
                    ))
                }
                Some(Ok(MultiTurnStreamItem::FinalResponse(response))) => {
                    lock(&self.history).extend(response.messages.clone());
                    let usage = usage_of(&response.usage);
                    io.emit(Part::Finish(FinishPart {
                        finish_reason: FinishReason::Stop,
                        usage: Some(usage),
                    }))
                    .await;
                    let output = match turn.response_format {
                        None => None,
                        // An answer that is not JSON is given as its text, a JSON string:
                        // the driver's schema check refuses it as output that does not
                        // match (the model answered, wrongly; nothing failed here).
                        Some(_) => {
                            let text = final_text(&response.content);
                            Some(
                                serde_json::from_str::<Value>(text.trim())
                                    .unwrap_or_else(|_| Value::String(text.trim().to_owned())),
                            )
                        }
                    };
                    return Ok(TurnOutcome::completed(output));
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    let secret = self.config.api_key.as_ref().map(|k| k.0.as_str());
                    return Err(words::classify(&error, self.config.max_model_calls, secret));
                }
            }
        }
    }
}

/// A `reasoning` setting as rig's effort.
fn effort(level: &str) -> Option<rig_core::completion::Reasoning> {
    use rig_core::completion::{Effort, Reasoning};
    Some(Reasoning::Effort(match level {
        "minimal" => Effort::Minimal,
        "low" => Effort::Low,
        "medium" => Effort::Medium,
        "high" => Effort::High,
        _ => return None,
    }))
}

fn usage_of(usage: &rig_core::completion::Usage) -> chopin_protocol::agent::Usage {
    chopin_protocol::agent::Usage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        cached_input_tokens: usage.cached_input_tokens,
    }
}

/// The text of the model's final answer.
fn final_text(content: &[rig_core::message::AssistantContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            rig_core::message::AssistantContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The rig tool for one host tool: run by the host (whose driver first checks the arguments
/// against the tool's schema: a mismatch is an error result for the model, never a crash); its
/// result cut to `max`.
fn host_tool(spec: &ToolSpec, io: &TurnIo, max: usize) -> Result<DynamicTool, Failure> {
    let name = rig_core::message::ToolName::new(spec.name.clone())
        .map_err(|e| Failure::internal(format!("a host tool has no name: {e}")))?;
    let io = io.clone();
    let spec_for_call = spec.clone();
    Ok(DynamicTool::new(
        name,
        spec.description.clone(),
        spec.input_schema.clone(),
        move |arguments: Value| {
            let io = io.clone();
            let spec = spec_for_call.clone();
            Box::pin(async move {
                let result = io.call_host_tool(&spec.name, arguments).await;
                let text = match result.output {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let text = chopin_harness::cut_result(text, max);
                if result.is_error {
                    Err(ToolExecutionError::new(ToolErrorKind::Other, text.clone())
                        .with_model_feedback(text))
                } else {
                    Ok(ToolOutput::text(text))
                }
            })
        },
    ))
}

/// The turn's hook on rig's loop: what the model says becomes the turn's parts as it streams,
/// in the loop's own order, and a steer message waiting when the model stops to answer is
/// given to it then.
struct TurnHook {
    io: TurnIo,
    /// Whether the model said anything yet (after which nothing is retried).
    spoke: Arc<AtomicBool>,
    /// Model calls finished so far this turn.
    steps: Arc<AtomicUsize>,
}

impl TurnHook {
    async fn emit(&self, part: Part) {
        self.spoke.store(true, Ordering::SeqCst);
        self.io.emit(part).await;
    }
}

impl AgentHook for TurnHook {
    async fn on_text_delta(
        &self,
        _ctx: &HookContext,
        event: TextDelta<'_>,
    ) -> rig_agent::agent::ObservationAction {
        self.emit(Part::Text(TextPart {
            text: event.delta.to_owned(),
        }))
        .await;
        rig_agent::agent::ObservationAction::Continue
    }

    async fn on_reasoning_delta(
        &self,
        _ctx: &HookContext,
        event: ReasoningDelta<'_>,
    ) -> rig_agent::agent::ObservationAction {
        self.emit(Part::Reasoning(TextPart {
            text: event.delta.to_owned(),
        }))
        .await;
        rig_agent::agent::ObservationAction::Continue
    }

    async fn on_tool_call_delta(
        &self,
        _ctx: &HookContext,
        event: ToolCallDelta<'_>,
    ) -> rig_agent::agent::ObservationAction {
        self.emit(Part::ToolInput(ToolInputPart {
            tool_call_id: format!(
                "call-{}-{}",
                self.steps.load(Ordering::SeqCst),
                event.part.index()
            ),
            tool_name: event.tool_name.to_owned(),
            delta: event.delta.to_owned(),
        }))
        .await;
        rig_agent::agent::ObservationAction::Continue
    }

    async fn on_invalid_tool_call(
        &self,
        _ctx: &HookContext,
        event: &rig_agent::agent::InvalidToolCallContext,
    ) -> Option<InvalidToolCallAction> {
        // A call outside the turn's tools: the host's boundary check fails the turn.
        self.emit(Part::ToolInput(ToolInputPart {
            tool_call_id: format!("call-{}-invalid", self.steps.load(Ordering::SeqCst)),
            tool_name: event.tool_name.clone(),
            delta: event.args.clone().unwrap_or_default(),
        }))
        .await;
        Some(InvalidToolCallAction::Stop {
            reason: format!("{} is not one of the turn's tools", event.tool_name),
        })
    }

    async fn on_model_turn_finished(
        &self,
        _ctx: &HookContext,
        event: ModelTurnFinished<'_>,
    ) -> ModelTurnAction {
        self.steps.fetch_add(1, Ordering::SeqCst);
        let calls_tools = event
            .content
            .iter()
            .any(|c| matches!(c, rig_core::message::AssistantContent::ToolCall(_)));
        self.emit(Part::FinishStep(FinishPart {
            finish_reason: if calls_tools {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            },
            usage: Some(usage_of(&event.usage)),
        }))
        .await;
        if !calls_tools {
            if let Some(steer) = self.io.try_steer() {
                return ModelTurnAction::retry_with_feedback(steer);
            }
        }
        ModelTurnAction::Continue
    }
}
