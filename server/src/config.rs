//! The server's configuration: one typed [`Config`], read from the environment with the spec's
//! names and defaults, each setting also a `chopin` flag.
//!
//! Owns: names, defaults, accepted values and the startup refusals for bad values. A bad value is
//! a [`ConfigError`] naming the variable and what it accepts — never a panic or a silent default.
//! Does not own: acting on the settings.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

/// 1 MiB: the per-file and total attachment ceiling under `HARNESS=remote`.
pub const REMOTE_ATTACHMENT_CEILING_BYTES: u64 = 1024 * 1024;
/// The longest timer setting we accept: one day.
const MAX_TIMER_MS: u64 = 86_400_000;

/// Harness adapters this build can run (the code-owned map's keys).
pub const HARNESSES: &[&str] = &["remote", "provider"];
/// `HARNESS_AUTH` modes the `provider` harness takes.
pub const PROVIDER_AUTH_MODES: &[&str] = &["openai", "anthropic", "custom", "auto"];
/// `MODEL_REASONING` levels.
pub const REASONING_LEVELS: &[&str] = &["minimal", "low", "medium", "high"];
/// `HARNESS_AUTH` modes. `auto` falls back to a host-logged-in subscription.
pub const HARNESS_AUTH_MODES: &[&str] = &[
    "auto",
    "direct",
    "ai-gateway",
    "openai",
    "anthropic",
    "custom",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// GitHub OAuth web sign-in for any admitted account.
    Hosted,
    /// One account on a loopback-only server.
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

pub use chopin_store::Database;

/// A value that must never be printed: `Debug` shows `<redacted>`, and there is no `Display`.
/// Read it with [`Secret::expose`] only where it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Bugs the simulator may plant (see [`Config::planted`]); all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planted {
    /// An attach arriving in its account's grace period does not hold the period open while it
    /// is checked, so the period can end under it (the AO-09 rule broken).
    pub grace_hold_off: bool,
    /// A writer's Yjs update is relayed to the document's other sockets before it is
    /// journalled (and journalled 50 ms later), so a relayed update may not be durable.
    pub journal_after_relay: bool,
    /// A host tool's permission rechecks skip the ownership check (generation and holder), so
    /// a tool can run after the turn's owner changed.
    pub ownership_recheck_off: bool,
    /// Chat admits every send, with no cap on how many are processed at once.
    pub sends_cap_off: bool,
    /// A writer's Yjs update is journalled and relayed as the whole state the shadow copy
    /// gained (pending structs and the whole delete set included), and one that leaves anything
    /// pending is taken (the gapped-update amplification).
    pub journal_whole_state: bool,
    /// A socket may send frames of at most twice what it reads (2 MiB for the document sockets),
    /// so a large document's sync step 2 cannot go out.
    pub write_cap_small: bool,
    /// A writer's Yjs update is applied to the live copy unchecked (no shadow copy first).
    pub poison_guard_off: bool,
    /// An agent link waits for `resume` with no deadline of its own.
    pub resume_wait_unbounded: bool,
    /// A claim storage refused because a run holds the version is answered as started anyway,
    /// with a run id storage never saw (a swallowed refusal).
    pub claim_refusal_ignored: bool,
    /// A report that ends a run gives its version back in one write and saves the report in
    /// another that leaves the run live (two writes where one commit belongs).
    pub run_end_split: bool,
}

/// The typed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server_host: IpAddr,
    pub port: u16,
    pub database: Database,
    pub auth_mode: AuthMode,
    pub harness: String,
    pub harness_auth: Option<String>,
    /// The model and its API for `HARNESS=provider`; `None` under any other harness.
    pub provider: Option<ProviderSettings>,
    /// The deployment's transcription for dictation (`TRANSCRIPTION_MODEL`); `None`: off.
    pub transcription: Option<TranscriptionSettings>,
    /// The deployment's decisions classifier (`CLASSIFIER_MODEL`), whatever `HARNESS` is;
    /// `None`: the built-in check of the server.
    pub classifier: Option<ClassifierSettings>,
    /// The visual admission check (`VISUAL_ADMISSION`, its thresholds and batch bound) and its
    /// assessor model (`VISUAL_ASSESSOR_MODEL`; `None`: no model).
    pub visuals: VisualSettings,
    pub visual_assessor: Option<ClassifierSettings>,
    /// `AGENT=off` prevents Planner turns.
    pub agent_enabled: bool,
    /// `BACKGROUND_JOBS=off` schedules and runs no background job (stored ones are kept).
    /// `AGENT=off` does the same whatever this says.
    pub background_jobs: bool,
    pub planner_attach_grace_ms: u64,
    pub agent_connection_timeout_ms: u64,
    pub handover_planner_window_ms: u64,
    pub planner_patience_ms: u64,
    /// How long a document Default machine chose a machine for may go unused (no room open,
    /// its Planner with nothing to do) before Default machine lets it go (ATM-37).
    pub default_machine_idle_ms: u64,
    /// `LIVE_BUILD=on`: a delivered build makes its document live, and a writer's edits are
    /// rebuilt by themselves once editing settles, on the builder's consenting machine
    /// (LIFE-78).
    pub live_build: bool,
    /// `PROCESSES=many`: several processes on one PostgreSQL, each document tree served by one
    /// of them under its lease.
    pub many_processes: bool,
    /// `DOCUMENT_LEASE_MS`: a document lease's period under `PROCESSES=many`.
    pub document_lease_ms: u64,
    /// `PROCESS_URL`: where the other processes reach this one under `PROCESSES=many` (an MCP
    /// call naming a document this process serves is carried here). The binary fills it in
    /// from the port it bound when unset.
    pub process_url: Option<String>,
    /// Absolute lifetime of a browser sign-in (cookie session), in ms.
    pub session_max_age_ms: u64,
    /// The key that seals sign-in credentials at rest (64 hex characters), if set.
    pub session_encryption_key: Option<Secret>,
    /// Where the generated key is kept when `SESSION_ENCRYPTION_KEY` is unset: beside the
    /// embedded database, or in the data folder with PostgreSQL.
    pub credential_key_file: PathBuf,
    /// How often an attached link's account admission and repository access are checked again.
    pub access_recheck_ms: u64,
    /// Known bugs planted on purpose, for the simulator to prove its exploration finds them.
    /// Nothing sets them from flags or the environment: in the binary they are always off.
    pub planted: Planted,
    pub chat_attachment_max_bytes: u64,
    pub chat_attachment_max_count: u32,
    pub chat_attachment_max_total_bytes: u64,
    pub log_format: LogFormat,
    /// `GITHUB_API_URL`: base of GitHub's REST API, no trailing slash.
    pub github_api_url: String,
    /// `GITHUB_WEB_URL`: base of GitHub's web pages (the OAuth authorize page), no trailing
    /// slash.
    pub github_web_url: String,
    /// `GITHUB_MCP_URL`: GitHub's remote MCP server, which the Planner's pull-request tools
    /// reach (default `https://api.githubcopilot.com/mcp/`); a trailing slash is kept.
    pub github_mcp_url: String,
    /// `GITHUB_ALLOWED_USERS`, lower-cased. With [`github_allowed_organizations`] empty too,
    /// every verified GitHub user is admitted.
    ///
    /// [`github_allowed_organizations`]: Config::github_allowed_organizations
    pub github_allowed_users: BTreeSet<String>,
    /// `GITHUB_ALLOWED_ORGANIZATIONS`, lower-cased.
    pub github_allowed_organizations: BTreeSet<String>,
    /// `APP_ORIGIN`: the origin browsers reach this server at (`scheme://host[:port]`,
    /// lower-cased, default port left out). Default `http://{SERVER_HOST}:{PORT}`.
    pub app_origin: String,
    /// `GITHUB_APP_CLIENT_ID`.
    pub github_app_client_id: Option<String>,
    /// `GITHUB_APP_CLIENT_SECRET`; never printed.
    pub github_app_client_secret: Option<Secret>,
    /// Warnings to log once logging is up (a setting was adjusted).
    pub warnings: Vec<String>,
}

/// Which API wire a `provider` model speaks: the part of `MODEL` before its first `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFamily {
    /// OpenAI's Chat Completions, as any OpenAI-compatible endpoint serves it.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// The `provider` harness's model, its API and its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    pub family: ModelFamily,
    /// The model id the API knows (`MODEL` after its first `/`).
    pub model: String,
    /// The API's base URL, no trailing slash.
    pub base_url: String,
    /// The operator's key, if the API needs one. Never printed.
    pub api_key: Option<Secret>,
    /// `MODEL_REASONING`.
    pub reasoning: Option<String>,
    pub max_model_calls: u32,
    pub retries: u32,
    /// Head and idle deadline of each model call.
    pub timeout_ms: u64,
    pub tool_result_max_bytes: u64,
    pub max_output_tokens: Option<u64>,
    /// `PROVIDER_MODELS`: the other models writers may choose, with their levels.
    pub offered: Vec<OfferedModel>,
    /// `PROVIDER_MODELS` holds `*`: also every model the API lists.
    pub list_models: bool,
    /// `PROVIDER_IMAGE_MODELS`: the models that read images (ids without the prefix); `["*"]`:
    /// every one.
    pub image_models: Vec<String>,
}

/// The most models `PROVIDER_MODELS` lists.
pub const PROVIDER_MODELS_MAX: usize = 64;

/// `PROVIDER_MODELS` for the family `family` (its `provider/` prefix may be written or not).
/// A model a writer may choose, with the reasoning levels they may pick for it.
type OfferedModel = (String, Vec<String>);

/// The models it names, and whether it holds `*` (every model the API lists, too).
fn offered_models(
    raw: Option<&str>,
    family: &str,
) -> Result<(Vec<OfferedModel>, bool), ConfigError> {
    let Some(raw) = raw else {
        return Ok((Vec::new(), false));
    };
    let refuse = |problem: String| ConfigError::new("PROVIDER_MODELS", Some(raw), problem);
    let mut offered: Vec<OfferedModel> = Vec::new();
    let mut listed = false;
    for entry in raw.split(',').map(str::trim) {
        if entry == "*" {
            if listed {
                return Err(refuse("\"*\" is listed twice".to_owned()));
            }
            listed = true;
            continue;
        }
        let (model, levels) = match entry.split_once('=') {
            Some((model, levels)) => (model.trim(), Some(levels)),
            None => (entry, None),
        };
        let model = match model.split_once('/') {
            Some((prefix, rest)) if prefix == family => rest,
            Some((prefix, _)) if ["openai", "anthropic"].contains(&prefix) => {
                return Err(refuse(format!(
                    "{model:?} is for another API than MODEL's ({family}): every offered model uses MODEL's API and key"
                )))
            }
            _ => model,
        };
        if model.is_empty() || model.chars().any(char::is_control) {
            return Err(refuse(
                "expected model ids separated by commas, e.g. \"gpt-4.1-mini, o4-mini=low|high\""
                    .to_owned(),
            ));
        }
        let mut chosen = Vec::new();
        for level in levels.into_iter().flat_map(|l| l.split('|')).map(str::trim) {
            if !REASONING_LEVELS.contains(&level) {
                return Err(refuse(format!(
                    "{level:?} is not a reasoning level; expected {}",
                    REASONING_LEVELS.join(", ")
                )));
            }
            if !chosen.iter().any(|c| c == level) {
                chosen.push(level.to_owned());
            }
        }
        if offered.iter().any(|(m, _)| m == model) {
            return Err(refuse(format!("{model:?} is listed twice")));
        }
        offered.push((model.to_owned(), chosen));
    }
    if offered.len() > PROVIDER_MODELS_MAX {
        return Err(refuse(format!(
            "at most {PROVIDER_MODELS_MAX} models may be offered"
        )));
    }
    Ok((offered, listed))
}

/// A setting that stops startup: which variable, what it was given (unless secret), what it
/// accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}{shown}: {problem}")]
pub struct ConfigError {
    pub variable: &'static str,
    shown: String,
    pub problem: String,
}

impl ConfigError {
    fn new(variable: &'static str, value: Option<&str>, problem: impl Into<String>) -> Self {
        let shown = match value {
            Some(v) => format!("={v:?}"),
            None => String::new(),
        };
        Self {
            variable,
            shown,
            problem: problem.into(),
        }
    }
}

const AFTER_HELP: &str = "\
Every setting can be given as a flag or as the environment variable shown beside it; a flag wins.
A value the server cannot use stops startup with a message naming the variable.

With no DATABASE_URL the server keeps its data in SQLite under --data-dir (default: the user's
state directory, e.g. ~/.local/state/chopin).";

/// `chopin`: command-line flags, each backed by its environment variable. Values are kept as
/// text here and checked by [`Config::from_args`], so an error names the variable.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "chopin",
    version,
    about = "The Chopin server: collaborative, repository-connected documents with a Planner.",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Address to bind. Loopback (127.0.0.1) by default; 0.0.0.0 serves every interface.
    #[arg(long, env = "SERVER_HOST", value_name = "ADDR")]
    pub server_host: Option<String>,

    /// TCP port for HTTP and WebSocket. Default 8787; 0 picks a free port.
    #[arg(long, env = "PORT", value_name = "PORT")]
    pub port: Option<String>,

    /// postgres://… for PostgreSQL, sqlite:PATH for a given SQLite file. Unset: embedded SQLite
    /// under --data-dir. Never printed.
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Folder for the embedded SQLite database when DATABASE_URL is unset.
    #[arg(long, env = "CHOPIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// `hosted` (GitHub sign-in for admitted accounts; default) or `local` (one account,
    /// loopback-only server).
    #[arg(long, env = "AUTH_MODE", value_name = "MODE")]
    pub auth_mode: Option<String>,

    /// Harness adapter that runs the Planner: `remote` (default; the model runs in a member's
    /// client attached to the document) or `provider` (the model runs in this process through
    /// an OpenAI-compatible or Anthropic API, with the operator's key; needs HARNESS_AUTH and
    /// MODEL).
    #[arg(long, env = "HARNESS", value_name = "NAME")]
    pub harness: Option<String>,

    /// Where the model's credentials come from. With HARNESS=provider, required: `openai`
    /// (OPENAI_API_KEY, OPENAI_BASE_URL), `anthropic` (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL),
    /// `custom` (MODEL_BASE_URL, and MODEL_API_KEY if the endpoint needs one), or `auto` (any
    /// of those found, else none: for a model server on this machine; loopback-only bind).
    /// Ignored by `remote`, whose model runs in the client. Every writer's turns bill the
    /// operator's key; Chopin adds no quota.
    #[arg(long, env = "HARNESS_AUTH", value_name = "MODE")]
    pub harness_auth: Option<String>,

    /// The Planner's model as provider/model, e.g. openai/gpt-4.1 or
    /// anthropic/claude-sonnet-4-5: the part before the first `/` names the API's wire
    /// (`openai` for any OpenAI-compatible endpoint: Azure OpenAI, Ollama, vLLM, llama.cpp,
    /// OpenRouter). Required with HARNESS=provider.
    #[arg(long, env = "MODEL", value_name = "PROVIDER/MODEL")]
    pub model: Option<String>,

    /// Reasoning effort asked of the model where it has one: minimal, low, medium or high.
    /// Unset: the model's own default.
    #[arg(long, env = "MODEL_REASONING", value_name = "LEVEL")]
    pub model_reasoning: Option<String>,

    /// The API's base URL for HARNESS_AUTH=custom (or auto), e.g. http://127.0.0.1:11434/v1
    /// for Ollama.
    #[arg(long, env = "MODEL_BASE_URL", value_name = "URL")]
    pub model_base_url: Option<String>,

    /// The key for MODEL_BASE_URL, if it needs one. Never printed or stored.
    #[arg(
        long,
        env = "MODEL_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub model_api_key: Option<String>,

    /// OpenAI key for HARNESS_AUTH=openai. Never printed or stored.
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub openai_api_key: Option<String>,

    /// OpenAI API base for HARNESS_AUTH=openai. Default https://api.openai.com/v1.
    #[arg(long, env = "OPENAI_BASE_URL", value_name = "URL")]
    pub openai_base_url: Option<String>,

    /// Anthropic key for HARNESS_AUTH=anthropic. Never printed or stored.
    #[arg(
        long,
        env = "ANTHROPIC_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub anthropic_api_key: Option<String>,

    /// Anthropic API base for HARNESS_AUTH=anthropic. Default https://api.anthropic.com.
    #[arg(long, env = "ANTHROPIC_BASE_URL", value_name = "URL")]
    pub anthropic_base_url: Option<String>,

    /// The most model calls one Planner turn makes (each round of tool calls is one), 1 to
    /// 256. Default 16.
    #[arg(long, env = "PROVIDER_MAX_MODEL_CALLS", value_name = "N")]
    pub provider_max_model_calls: Option<String>,

    /// How often a model call that failed before any output (429, 5xx, a refused connection)
    /// is tried again, 0 to 10; the pause doubles from 1 s, or is what the provider's
    /// retry-after asks, at most 30 s. Default 2.
    #[arg(long, env = "PROVIDER_RETRIES", value_name = "N")]
    pub provider_retries: Option<String>,

    /// How long the provider may take to start answering, and may then stay silent, before a
    /// model call is given up, in ms. Default 60000.
    #[arg(long, env = "PROVIDER_TIMEOUT_MS", value_name = "MS")]
    pub provider_timeout_ms: Option<String>,

    /// The most bytes of one tool result the model is given (1024 to 1048576); a longer one
    /// is cut, with a note saying how much was left out. Default 32768.
    #[arg(long, env = "PROVIDER_TOOL_RESULT_MAX_BYTES", value_name = "BYTES")]
    pub provider_tool_result_max_bytes: Option<String>,

    /// The most tokens one model call may write. Unset: the provider's default (Anthropic,
    /// which needs one, gets 8192).
    #[arg(long, env = "PROVIDER_MAX_OUTPUT_TOKENS", value_name = "N")]
    pub provider_max_output_tokens: Option<String>,

    /// Models besides MODEL that writers may choose for a document's Planner, on the same API
    /// and key, comma-separated, each optionally with the reasoning levels a writer may pick:
    /// e.g. "gpt-4.1-mini, o4-mini=low|medium|high". `*` also offers every model the API lists
    /// (its GET /models, read at most once a minute). MODEL is always offered, first, as the
    /// default. Unset: MODEL alone.
    #[arg(long, env = "PROVIDER_MODELS", value_name = "MODEL[=LEVEL|…],…")]
    pub provider_models: Option<String>,

    /// Which offered models read images, comma-separated (their `provider/` prefix may be
    /// written or not); `*`: every one. A message's images go to the Planner only where its
    /// model reads them. Unset: none does, and images stay in the room.
    #[arg(long, env = "PROVIDER_IMAGE_MODELS", value_name = "MODEL,…|*")]
    pub provider_image_models: Option<String>,

    /// `on` (default) or `off`: off refuses every message to the Planner (no turns run); Chat
    /// between people is unchanged.
    #[arg(long, env = "AGENT", value_name = "on|off")]
    pub agent: Option<String>,

    /// `on` (default) or `off`: off schedules and runs no background job (document
    /// descriptions); stored jobs and descriptions are kept. `AGENT=off` also turns them off.
    #[arg(long, env = "BACKGROUND_JOBS", value_name = "on|off")]
    pub background_jobs: Option<String>,

    /// How long a detached or dropped Planner keeps its document, in ms. Default 120000.
    #[arg(long, env = "PLANNER_ATTACH_GRACE_MS", value_name = "MS")]
    pub planner_attach_grace_ms: Option<String>,

    /// An agent link that answers no ping for this long is closed as dropped, in ms.
    /// Default 120000.
    #[arg(long, env = "AGENT_CONNECTION_TIMEOUT_MS", value_name = "MS")]
    pub agent_connection_timeout_ms: Option<String>,

    /// How long a Planner client cut off by a graceful stop (a deploy) has to resume its
    /// sessions on the next process, in ms, counted from that process's rebuild of its hold
    /// (never past one hour after the cut). Not used with AUTH_MODE=local. Default 60000.
    #[arg(long, env = "HANDOVER_PLANNER_WINDOW_MS", value_name = "MS")]
    pub handover_planner_window_ms: Option<String>,

    /// How long a paired machine asked to run a document's Planner has to attach before the
    /// document is told it cannot connect ("It hasn't answered yet"), in ms; checked every 15 s.
    /// Default 120000.
    #[arg(long, env = "PLANNER_PATIENCE_MS", value_name = "MS")]
    pub planner_patience_ms: Option<String>,

    /// A document nobody chose a machine for runs its Planner on the favourite machine of a
    /// writer who opens it (Default machine). How long such a document may go unused — no page
    /// open on it, and its Planner not replying, waiting on a question or keeping a run — before
    /// that machine is let go, in ms; checked every 15 s. Default 600000.
    #[arg(long, env = "DEFAULT_MACHINE_IDLE_MS", value_name = "MS")]
    pub default_machine_idle_ms: Option<String>,

    /// `off` (default) or `on` (experimental): on, a plan whose build delivered is rebuilt by
    /// itself 30 s after a writer's last edit, onto the same pull requests, by the builder's own
    /// machine — only one whose connector says its owner allowed automatic builds there.
    #[arg(long, env = "LIVE_BUILD", value_name = "on|off")]
    pub live_build: Option<String>,

    /// `one` (default) or `many`. One process serves the whole database: a second one started
    /// on it waits to take over. `many` (PostgreSQL only): several processes serve one database
    /// behind a load balancer, each document (with its children) by one process at a time under
    /// a lease; a request for a document another process serves is answered 503 with
    /// Retry-After. Hash the balancer on the document id (see the self-hosting guide).
    #[arg(long, env = "PROCESSES", value_name = "one|many")]
    pub processes: Option<String>,

    /// With PROCESSES=many: how long a process's hold on a document lasts unless renewed, in
    /// ms; after a crash its documents are served by the others within this. Default 10000.
    #[arg(long, env = "DOCUMENT_LEASE_MS", value_name = "MS")]
    pub document_lease_ms: Option<String>,

    /// With PROCESSES=many: the address the other processes reach this one at
    /// (http://host:port, no path). An MCP call that reaches another process but names a
    /// document this one serves is carried here. Default: http://127.0.0.1:<the port bound>,
    /// right only when every process runs on one machine.
    #[arg(long, env = "PROCESS_URL", value_name = "URL")]
    pub process_url: Option<String>,

    /// 64 hex characters (`openssl rand -hex 32`): the key that encrypts browser sign-ins'
    /// GitHub credentials in the database. Unset: a key generated once into credential.key beside
    /// the embedded database (or in --data-dir with PostgreSQL). Changing it signs everyone out.
    /// Never printed.
    #[arg(
        long,
        env = "SESSION_ENCRYPTION_KEY",
        value_name = "HEX",
        hide_env_values = true
    )]
    pub session_encryption_key: Option<String>,

    /// Absolute lifetime of a browser sign-in, in ms; signing in again starts a new one.
    /// Default 2592000000 (30 days).
    #[arg(long, env = "SESSION_MAX_AGE_MS", value_name = "MS")]
    pub session_max_age_ms: Option<String>,

    /// How often an attached Planner client's account admission and repository write access are
    /// checked again at GitHub, in ms. Default 300000 (5 minutes).
    #[arg(long, env = "AGENT_ACCESS_RECHECK_MS", value_name = "MS")]
    pub agent_access_recheck_ms: Option<String>,

    /// Dictation through the deployment's transcription: a model of an OpenAI-compatible
    /// `/audio/transcriptions` endpoint, e.g. "gpt-4o-mini-transcribe" (an `openai/` prefix may
    /// be written). Unset: off, and browsers use their own on-device recognition where they have
    /// one.
    #[arg(long, env = "TRANSCRIPTION_MODEL", value_name = "MODEL")]
    pub transcription_model: Option<String>,

    /// The transcription API's base URL. Default: OPENAI_BASE_URL, else
    /// https://api.openai.com/v1.
    #[arg(long, env = "TRANSCRIPTION_BASE_URL", value_name = "URL")]
    pub transcription_base_url: Option<String>,

    /// The transcription API's key. Default: OPENAI_API_KEY. Never logged.
    #[arg(
        long,
        env = "TRANSCRIPTION_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub transcription_api_key: Option<String>,

    /// The deployment's decisions classifier, which checks every complete Planner message
    /// before Chat shows it (a reply is published; a request for input in prose is withheld and
    /// the Planner asked once to open Decision cards instead): provider/model, e.g.
    /// openai/gpt-4.1-mini or anthropic/claude-haiku-4-5, called directly whatever HARNESS is.
    /// A failed, malformed, late or uncertain check withholds the message. Unset: the server's
    /// built-in check, which counts a message as a request for input when one of its sentences
    /// ends in a question mark or asks the reader to answer, choose or confirm (code and quoted
    /// lines aside).
    #[arg(long, env = "CLASSIFIER_MODEL", value_name = "PROVIDER/MODEL")]
    pub classifier_model: Option<String>,

    /// The classifier API's base URL. Default: OPENAI_BASE_URL or ANTHROPIC_BASE_URL (by the
    /// model's provider), else the provider's own.
    #[arg(long, env = "CLASSIFIER_BASE_URL", value_name = "URL")]
    pub classifier_base_url: Option<String>,

    /// The classifier API's key. Default: OPENAI_API_KEY or ANTHROPIC_API_KEY (by the model's
    /// provider). Never logged.
    #[arg(
        long,
        env = "CLASSIFIER_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub classifier_api_key: Option<String>,

    /// How long one check may take, in ms, before the message is withheld. Default 20000.
    #[arg(long, env = "CLASSIFIER_TIMEOUT_MS", value_name = "MS")]
    pub classifier_timeout_ms: Option<String>,

    /// The visual admission check of new prose in Planner writes and MCP creations and updates:
    /// model (default) assesses with VISUAL_ASSESSOR_MODEL and, with none set, writes without
    /// an assessment (logged and counted as unassessed); require refuses new prose when no
    /// assessor model is set; off runs no check.
    #[arg(long, env = "VISUAL_ADMISSION", value_name = "model|require|off")]
    pub visual_admission: Option<String>,

    /// The model that assesses new passages for the visual admission check: provider/model,
    /// e.g. openai/gpt-4.1-mini, called directly whatever HARNESS is. Unset: no assessment
    /// (see VISUAL_ADMISSION).
    #[arg(long, env = "VISUAL_ASSESSOR_MODEL", value_name = "PROVIDER/MODEL")]
    pub visual_assessor_model: Option<String>,

    /// The assessor API's base URL. Default: OPENAI_BASE_URL or ANTHROPIC_BASE_URL (by the
    /// model's provider), else the provider's own.
    #[arg(long, env = "VISUAL_ASSESSOR_BASE_URL", value_name = "URL")]
    pub visual_assessor_base_url: Option<String>,

    /// The assessor API's key. Default: OPENAI_API_KEY or ANTHROPIC_API_KEY (by the model's
    /// provider). Never logged.
    #[arg(
        long,
        env = "VISUAL_ASSESSOR_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub visual_assessor_api_key: Option<String>,

    /// How long one assessment call may take, in ms, before the write is refused. Default 20000.
    #[arg(long, env = "VISUAL_ASSESSOR_TIMEOUT_MS", value_name = "MS")]
    pub visual_assessor_timeout_ms: Option<String>,

    /// The probability (0 to 1) that a faithful visual is possible at which a selected visual
    /// is required beside its passage. Default 0.7.
    #[arg(long, env = "VISUAL_POSSIBLE_THRESHOLD", value_name = "0..1")]
    pub visual_possible_threshold: Option<String>,

    /// The probability (0 to 1) that the visual would help at which it is required. Default 0.7.
    #[arg(long, env = "VISUAL_HELPFUL_THRESHOLD", value_name = "0..1")]
    pub visual_helpful_threshold: Option<String>,

    /// The most passages one assessment call is given (1 to 32). Default 8.
    #[arg(long, env = "VISUAL_BATCH_MAX", value_name = "N")]
    pub visual_batch_max: Option<String>,

    /// The longest recording taken for dictation, in bytes. Default 26214400 (25 MiB).
    #[arg(long, env = "TRANSCRIPTION_MAX_BYTES", value_name = "BYTES")]
    pub transcription_max_bytes: Option<String>,

    /// Largest file on a Chat message, in bytes. Default 1048576 (1 MiB); under HARNESS=remote
    /// at most 1 MiB (a larger value is lowered, with a warning).
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_BYTES", value_name = "BYTES")]
    pub chat_attachment_max_bytes: Option<String>,

    /// Most files on one Chat message; 0 turns files off. Default 5.
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_COUNT", value_name = "N")]
    pub chat_attachment_max_count: Option<String>,

    /// Largest total of one message's files, in bytes. Default 4194304 (4 MiB); under
    /// HARNESS=remote at most 1 MiB.
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_TOTAL_BYTES", value_name = "BYTES")]
    pub chat_attachment_max_total_bytes: Option<String>,

    /// Log format: `human` (default) or `json`.
    #[arg(long, env = "CHOPIN_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,

    /// Base URL of GitHub's REST API. Default https://api.github.com.
    #[arg(long, env = "GITHUB_API_URL", value_name = "URL")]
    pub github_api_url: Option<String>,

    /// Base URL of GitHub's web pages (OAuth sign-in). Default https://github.com.
    #[arg(long, env = "GITHUB_WEB_URL", value_name = "URL")]
    pub github_web_url: Option<String>,

    /// URL of GitHub's remote MCP server, which the Planner's pull-request tools use. Default
    /// https://api.githubcopilot.com/mcp/.
    #[arg(long, env = "GITHUB_MCP_URL", value_name = "URL")]
    pub github_mcp_url: Option<String>,

    /// Comma-separated GitHub logins admitted to this server (case-insensitive). With
    /// GITHUB_ALLOWED_ORGANIZATIONS also empty, every verified GitHub user is admitted.
    #[arg(long, env = "GITHUB_ALLOWED_USERS", value_name = "LOGINS")]
    pub github_allowed_users: Option<String>,

    /// Comma-separated GitHub organizations whose active members are admitted
    /// (case-insensitive).
    #[arg(long, env = "GITHUB_ALLOWED_ORGANIZATIONS", value_name = "ORGS")]
    pub github_allowed_organizations: Option<String>,

    /// The origin browsers use to reach this server, scheme://host[:port] with no path.
    /// Default http://SERVER_HOST:PORT.
    #[arg(long, env = "APP_ORIGIN", value_name = "ORIGIN")]
    pub app_origin: Option<String>,

    /// Client ID of the GitHub App used for sign-in.
    #[arg(long, env = "GITHUB_APP_CLIENT_ID", value_name = "ID")]
    pub github_app_client_id: Option<String>,

    /// Client secret of the GitHub App. Never printed.
    #[arg(
        long,
        env = "GITHUB_APP_CLIENT_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub github_app_client_secret: Option<String>,
}

/// `HARNESS=provider`'s settings: an explicit `HARNESS_AUTH` (RFC-55), `MODEL` as
/// provider/model in a family the mode serves, a key where the mode needs one.
fn provider_settings(args: &Args, auth: Option<&str>) -> Result<ProviderSettings, ConfigError> {
    let Some(auth) = auth else {
        return Err(ConfigError::new(
            "HARNESS_AUTH",
            None,
            "HARNESS=provider needs an explicit HARNESS_AUTH: openai, anthropic, custom, or auto (loopback-only bind)",
        ));
    };
    if !PROVIDER_AUTH_MODES.contains(&auth) {
        return Err(ConfigError::new(
            "HARNESS_AUTH",
            Some(auth),
            "HARNESS=provider takes openai, anthropic, custom or auto; direct and ai-gateway are for other harnesses",
        ));
    }
    let Some(raw_model) = given(&args.model) else {
        return Err(ConfigError::new(
            "MODEL",
            None,
            "HARNESS=provider needs MODEL as provider/model, e.g. openai/gpt-4.1 or anthropic/claude-sonnet-4-5",
        ));
    };
    let (family, model) = match raw_model.split_once('/') {
        Some(("openai", id)) if !id.trim().is_empty() => (ModelFamily::OpenAi, id.trim()),
        Some(("anthropic", id)) if !id.trim().is_empty() => (ModelFamily::Anthropic, id.trim()),
        _ => {
            return Err(ConfigError::new(
                "MODEL",
                Some(raw_model),
                "expected provider/model with provider openai (any OpenAI-compatible API) or anthropic, e.g. openai/gpt-4.1",
            ))
        }
    };
    let family_name = match family {
        ModelFamily::OpenAi => "openai",
        ModelFamily::Anthropic => "anthropic",
    };
    if matches!(auth, "openai" | "anthropic") && auth != family_name {
        return Err(ConfigError::new(
            "MODEL",
            Some(raw_model),
            format!("HARNESS_AUTH={auth} serves {auth}/… models; use HARNESS_AUTH=custom for another API"),
        ));
    }
    let (key_var, key, base_var, base, default_base) = match family {
        ModelFamily::OpenAi => (
            "OPENAI_API_KEY",
            &args.openai_api_key,
            "OPENAI_BASE_URL",
            &args.openai_base_url,
            "https://api.openai.com/v1",
        ),
        ModelFamily::Anthropic => (
            "ANTHROPIC_API_KEY",
            &args.anthropic_api_key,
            "ANTHROPIC_BASE_URL",
            &args.anthropic_base_url,
            "https://api.anthropic.com",
        ),
    };
    let (base_url, api_key) = match auth {
        "custom" => {
            if given(&args.model_base_url).is_none() {
                return Err(ConfigError::new(
                    "MODEL_BASE_URL",
                    None,
                    "HARNESS_AUTH=custom needs the API's base URL, e.g. http://127.0.0.1:11434/v1",
                ));
            }
            (
                parse_base_url("MODEL_BASE_URL", &args.model_base_url, default_base)?,
                given(&args.model_api_key).map(Secret::new),
            )
        }
        "auto" => {
            let base = if given(&args.model_base_url).is_some() {
                parse_base_url("MODEL_BASE_URL", &args.model_base_url, default_base)?
            } else {
                parse_base_url(base_var, base, default_base)?
            };
            let key = given(&args.model_api_key)
                .or_else(|| given(key))
                .map(Secret::new);
            (base, key)
        }
        _ => {
            let Some(key) = given(key) else {
                return Err(ConfigError::new(
                    key_var,
                    None,
                    format!("HARNESS_AUTH={auth} needs the operator's key in {key_var}"),
                ));
            };
            (
                parse_base_url(base_var, base, default_base)?,
                Some(Secret::new(key)),
            )
        }
    };
    let reasoning = match given(&args.model_reasoning) {
        None => None,
        Some(_) => Some(
            one_of(
                "MODEL_REASONING",
                &args.model_reasoning,
                "",
                REASONING_LEVELS,
            )?
            .to_owned(),
        ),
    };
    let bounded = |variable: &'static str,
                   v: &Option<String>,
                   default: u64,
                   range: std::ops::RangeInclusive<u64>| {
        let n = parse_u64(variable, v, default, "a whole number")?;
        if range.contains(&n) {
            Ok(n)
        } else {
            Err(ConfigError::new(
                variable,
                given(v),
                format!(
                    "expected a whole number from {} to {}",
                    range.start(),
                    range.end()
                ),
            ))
        }
    };
    let max_model_calls = bounded(
        "PROVIDER_MAX_MODEL_CALLS",
        &args.provider_max_model_calls,
        16,
        1..=256,
    )?;
    let retries = bounded("PROVIDER_RETRIES", &args.provider_retries, 2, 0..=10)?;
    let tool_result_max_bytes = bounded(
        "PROVIDER_TOOL_RESULT_MAX_BYTES",
        &args.provider_tool_result_max_bytes,
        32 * 1024,
        1024..=1024 * 1024,
    )?;
    let max_output_tokens = match given(&args.provider_max_output_tokens) {
        None => None,
        Some(_) => Some(bounded(
            "PROVIDER_MAX_OUTPUT_TOKENS",
            &args.provider_max_output_tokens,
            0,
            1..=1_000_000,
        )?),
    };
    let (offered, list_models) = offered_models(given(&args.provider_models), family_name)?;
    let image_models = given(&args.provider_image_models)
        .map(|raw| {
            raw.split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(|m| {
                    m.strip_prefix(family_name)
                        .and_then(|r| r.strip_prefix('/'))
                        .unwrap_or(m)
                        .to_owned()
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if image_models.len() > PROVIDER_MODELS_MAX {
        return Err(ConfigError::new(
            "PROVIDER_IMAGE_MODELS",
            given(&args.provider_image_models),
            format!("at most {PROVIDER_MODELS_MAX} models may be named"),
        ));
    }
    Ok(ProviderSettings {
        family,
        model: model.to_owned(),
        base_url,
        api_key,
        reasoning,
        max_model_calls: u32::try_from(max_model_calls).unwrap_or(16),
        retries: u32::try_from(retries).unwrap_or(2),
        timeout_ms: parse_ms("PROVIDER_TIMEOUT_MS", &args.provider_timeout_ms, 60_000)?,
        tool_result_max_bytes,
        max_output_tokens,
        offered,
        list_models,
        image_models,
    })
}

/// Dictation's transcription (`TRANSCRIPTION_MODEL` and its API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptionSettings {
    /// The model id the API knows (no `openai/` prefix).
    pub model: String,
    /// The API's base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The longest recording taken (`TRANSCRIPTION_MAX_BYTES`, RULINGS DICT-07: 25 MiB).
    pub max_bytes: u64,
}

/// The transcription settings, or `None` where `TRANSCRIPTION_MODEL` is unset (DICT-01).
fn transcription_settings(args: &Args) -> Result<Option<TranscriptionSettings>, ConfigError> {
    let max_bytes = parse_u64(
        "TRANSCRIPTION_MAX_BYTES",
        &args.transcription_max_bytes,
        25 * 1024 * 1024,
        "a whole number of bytes",
    )?;
    if max_bytes == 0 {
        return Err(ConfigError::new(
            "TRANSCRIPTION_MAX_BYTES",
            given(&args.transcription_max_bytes),
            "a recording of 0 bytes holds nothing; leave TRANSCRIPTION_MODEL unset to turn dictation off",
        ));
    }
    let Some(raw) = given(&args.transcription_model) else {
        return Ok(None);
    };
    let model = match raw.split_once('/') {
        Some(("openai", rest)) => rest,
        Some(("anthropic", _)) => {
            return Err(ConfigError::new(
                "TRANSCRIPTION_MODEL",
                Some(raw),
                "transcription needs an OpenAI-compatible /audio/transcriptions API; Anthropic has none",
            ))
        }
        _ => raw,
    };
    if model.is_empty() || model.chars().any(char::is_control) {
        return Err(ConfigError::new(
            "TRANSCRIPTION_MODEL",
            Some(raw),
            "expected a model id, e.g. gpt-4o-mini-transcribe",
        ));
    }
    let base_url = if given(&args.transcription_base_url).is_some() {
        parse_base_url(
            "TRANSCRIPTION_BASE_URL",
            &args.transcription_base_url,
            "https://api.openai.com/v1",
        )?
    } else {
        parse_base_url(
            "OPENAI_BASE_URL",
            &args.openai_base_url,
            "https://api.openai.com/v1",
        )?
    };
    let api_key = given(&args.transcription_api_key)
        .or_else(|| given(&args.openai_api_key))
        .map(Secret::new);
    Ok(Some(TranscriptionSettings {
        model: model.to_owned(),
        base_url,
        api_key,
        max_bytes,
    }))
}

/// What the visual admission check does (`VISUAL_ADMISSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisualMode {
    /// Assess with the assessor model; with none configured, admit writes *unassessed* (said
    /// in the log at startup and counted, never reported as assessed).
    Model,
    /// Assess with the assessor model; with none configured, refuse a write that brings new
    /// prose.
    Require,
    /// No check.
    Off,
}

/// The visual admission check's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VisualSettings {
    pub mode: VisualMode,
    /// A visual is required when both probabilities reach these (RULINGS ISO-42).
    pub possible: f64,
    pub helpful: f64,
    /// The most passages one assessment call is given (ISO-36).
    pub batch_max: usize,
}

impl Default for VisualSettings {
    fn default() -> Self {
        VisualSettings {
            mode: VisualMode::Model,
            possible: 0.7,
            helpful: 0.7,
            batch_max: 8,
        }
    }
}

/// The decisions classifier's model and API (`CLASSIFIER_MODEL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifierSettings {
    pub family: ModelFamily,
    /// The model id the API knows (after the `provider/` prefix).
    pub model: String,
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The deadline of one check (`CLASSIFIER_TIMEOUT_MS`).
    pub timeout_ms: u64,
}

/// The classifier settings, or `None` where `CLASSIFIER_MODEL` is unset (the built-in check).
fn classifier_settings(args: &Args) -> Result<Option<ClassifierSettings>, ConfigError> {
    model_api(
        args,
        [
            "CLASSIFIER_MODEL",
            "CLASSIFIER_BASE_URL",
            "CLASSIFIER_TIMEOUT_MS",
        ],
        [
            &args.classifier_model,
            &args.classifier_base_url,
            &args.classifier_api_key,
            &args.classifier_timeout_ms,
        ],
    )
}

/// The visual admission check's settings and its assessor model.
fn visual_settings(
    args: &Args,
) -> Result<(VisualSettings, Option<ClassifierSettings>), ConfigError> {
    use VisualMode as Mode;
    use VisualSettings as Settings;
    let mode = match one_of(
        "VISUAL_ADMISSION",
        &args.visual_admission,
        "model",
        &["model", "require", "off"],
    )? {
        "require" => Mode::Require,
        "off" => Mode::Off,
        _ => Mode::Model,
    };
    let ratio = |variable: &'static str, v: &Option<String>| -> Result<f64, ConfigError> {
        let Some(raw) = given(v) else {
            return Ok(0.7);
        };
        match raw.parse::<f64>() {
            Ok(n) if (0.0..=1.0).contains(&n) => Ok(n),
            _ => Err(ConfigError::new(
                variable,
                Some(raw),
                "expected a probability from 0 to 1, e.g. 0.7",
            )),
        }
    };
    let batch_max = match given(&args.visual_batch_max) {
        None => 8,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=32).contains(&n) => n,
            _ => {
                return Err(ConfigError::new(
                    "VISUAL_BATCH_MAX",
                    Some(raw),
                    "expected a whole number from 1 to 32",
                ))
            }
        },
    };
    let settings = Settings {
        mode,
        possible: ratio("VISUAL_POSSIBLE_THRESHOLD", &args.visual_possible_threshold)?,
        helpful: ratio("VISUAL_HELPFUL_THRESHOLD", &args.visual_helpful_threshold)?,
        batch_max,
    };
    let assessor = model_api(
        args,
        [
            "VISUAL_ASSESSOR_MODEL",
            "VISUAL_ASSESSOR_BASE_URL",
            "VISUAL_ASSESSOR_TIMEOUT_MS",
        ],
        [
            &args.visual_assessor_model,
            &args.visual_assessor_base_url,
            &args.visual_assessor_api_key,
            &args.visual_assessor_timeout_ms,
        ],
    )?;
    Ok((settings, assessor))
}

/// A model called directly through the provider wire: `provider/model` in the first variable,
/// its base URL and key (defaulting to the provider's own settings) and a deadline.
fn model_api(
    args: &Args,
    [model_var, base_var_own, timeout_var]: [&'static str; 3],
    [model_arg, base_arg, key_arg, timeout_arg]: [&Option<String>; 4],
) -> Result<Option<ClassifierSettings>, ConfigError> {
    let timeout_ms = parse_ms(timeout_var, timeout_arg, 20_000)?;
    let Some(raw) = given(model_arg) else {
        return Ok(None);
    };
    let (family, model) = match raw.split_once('/') {
        Some(("openai", id)) if !id.trim().is_empty() => (ModelFamily::OpenAi, id.trim()),
        Some(("anthropic", id)) if !id.trim().is_empty() => (ModelFamily::Anthropic, id.trim()),
        _ => {
            return Err(ConfigError::new(
                model_var,
                Some(raw),
                "expected provider/model with provider openai (any OpenAI-compatible API) or anthropic, e.g. openai/gpt-4.1-mini",
            ))
        }
    };
    let (base_var, base, default_base, key) = match family {
        ModelFamily::OpenAi => (
            "OPENAI_BASE_URL",
            &args.openai_base_url,
            "https://api.openai.com/v1",
            &args.openai_api_key,
        ),
        ModelFamily::Anthropic => (
            "ANTHROPIC_BASE_URL",
            &args.anthropic_base_url,
            "https://api.anthropic.com",
            &args.anthropic_api_key,
        ),
    };
    let base_url = if given(base_arg).is_some() {
        parse_base_url(base_var_own, base_arg, default_base)?
    } else {
        parse_base_url(base_var, base, default_base)?
    };
    let api_key = given(key_arg).or_else(|| given(key)).map(Secret::new);
    Ok(Some(ClassifierSettings {
        family,
        model: model.to_owned(),
        base_url,
        api_key,
        timeout_ms,
    }))
}

/// An unset or empty value counts as unset.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// `PROCESS_URL`: an `http://` or `https://` address with a host and no path (a trailing `/` is
/// dropped); `None` when unset or empty.
fn process_url(given: &Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(text) = given.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let text = text.trim_end_matches('/');
    let refuse = || {
        ConfigError::new(
            "PROCESS_URL",
            Some(text),
            "expected http://host:port (or https://), with no path: where the other processes reach this one",
        )
    };
    let parsed = url::Url::parse(text).map_err(|_| refuse())?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none_or(str::is_empty)
        || parsed.path() != "/"
        || parsed.query().is_some()
        || !parsed.username().is_empty()
    {
        return Err(refuse());
    }
    Ok(Some(text.to_owned()))
}
fn parse_ms(variable: &'static str, v: &Option<String>, default: u64) -> Result<u64, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=MAX_TIMER_MS).contains(&n) => Ok(n),
        _ => Err(ConfigError::new(
            variable,
            Some(raw),
            format!("expected a whole number of milliseconds from 1 to {MAX_TIMER_MS}"),
        )),
    }
}

/// `SESSION_MAX_AGE_MS`: 1 ms to 365 days, default 30 days.
fn parse_session_max_age(v: &Option<String>) -> Result<u64, ConfigError> {
    const DAY_MS: u64 = 86_400_000;
    let Some(raw) = given(v) else {
        return Ok(30 * DAY_MS);
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=365 * DAY_MS).contains(&n) => Ok(n),
        _ => Err(ConfigError::new(
            "SESSION_MAX_AGE_MS",
            Some(raw),
            format!(
                "expected a whole number of milliseconds from 1 to {}",
                365 * DAY_MS
            ),
        )),
    }
}

fn parse_u64(
    variable: &'static str,
    v: &Option<String>,
    default: u64,
    what: &str,
) -> Result<u64, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    raw.parse::<u64>()
        .map_err(|_| ConfigError::new(variable, Some(raw), format!("expected {what}")))
}

fn one_of<'a>(
    variable: &'static str,
    v: &'a Option<String>,
    default: &'a str,
    accepted: &[&str],
) -> Result<&'a str, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    if accepted.contains(&raw) {
        Ok(raw)
    } else {
        Err(ConfigError::new(
            variable,
            Some(raw),
            format!("expected one of: {}", accepted.join(", ")),
        ))
    }
}

/// A base URL such as `https://api.github.com` or `https://ghe.example/api/v3`: http or https,
/// a host, an optional path, no query, fragment or credentials. One trailing slash is dropped.
fn parse_base_url(
    variable: &'static str,
    v: &Option<String>,
    default: &str,
) -> Result<String, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default.to_string());
    };
    let refuse = || {
        ConfigError::new(
            variable,
            Some(raw),
            "expected an http:// or https:// URL with a host and no query, e.g. https://api.github.com",
        )
    };
    let url = raw.strip_suffix('/').unwrap_or(raw);
    if url.contains(['?', '#', '@', ' ']) || url.ends_with('/') {
        return Err(refuse());
    }
    let uri = url.parse::<http::Uri>().map_err(|_| refuse())?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let port_ok = uri
        .authority()
        .is_some_and(|a| authority_port(a.as_str()).is_some());
    if !scheme_ok || !port_ok || uri.host().is_none_or(str::is_empty) {
        return Err(refuse());
    }
    Ok(url.to_string())
}

/// A comma-separated, case-insensitive list of GitHub names: trimmed, lower-cased, empty
/// entries dropped.
fn parse_name_list(v: &Option<String>) -> BTreeSet<String> {
    given(v)
        .unwrap_or("")
        .split(',')
        .map(|name| name.trim().to_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The port of `host[:port]` (`Some(None)` when there is none), or `None` when a port is
/// given but is not a number from 0 to 65535. `http::uri::Authority` forgets a port it cannot
/// read, so it is read here.
fn authority_port(authority: &str) -> Option<Option<u16>> {
    match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => {
            let digits = &authority[i + 1..];
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<u16>().ok().map(Some)
        }
        _ => Some(None),
    }
}

/// An origin, `scheme://host[:port]`, as a browser sends it in `Origin`: lower-cased, the
/// scheme's default port left out.
fn parse_origin(v: &Option<String>, server_host: IpAddr, port: u16) -> Result<String, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(match server_host {
            IpAddr::V4(ip) => format!("http://{ip}:{port}"),
            IpAddr::V6(ip) => format!("http://[{ip}]:{port}"),
        });
    };
    let refuse = || {
        ConfigError::new(
            "APP_ORIGIN",
            Some(raw),
            "expected an origin, scheme://host[:port] with http or https and no path, query or trailing slash, e.g. https://chopin.example.com",
        )
    };
    let (scheme, authority) = raw.split_once("://").ok_or_else(refuse)?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(refuse()),
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(refuse());
    }
    let parsed = authority
        .parse::<http::uri::Authority>()
        .map_err(|_| refuse())?;
    let port = authority_port(authority).ok_or_else(refuse)?;
    if parsed.host().is_empty() {
        return Err(refuse());
    }
    let host = parsed.host().to_ascii_lowercase();
    Ok(match port {
        Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Bytes in the credential master key (AES-256).
pub const CREDENTIAL_KEY_LEN: usize = 32;
/// Hex characters in a written-out credential master key.
pub const CREDENTIAL_KEY_HEX_LEN: usize = CREDENTIAL_KEY_LEN * 2;

/// The credential master key from its written form (`SESSION_ENCRYPTION_KEY`, the key file):
/// exactly 64 hexadecimal characters, either case. `Err` says what is wrong, never the value.
pub fn decode_credential_key_hex(
    text: &str,
) -> Result<zeroize::Zeroizing<[u8; CREDENTIAL_KEY_LEN]>, &'static str> {
    if text.is_empty() {
        return Err("it is empty");
    }
    if text.len() != CREDENTIAL_KEY_HEX_LEN {
        return Err(if text.len() < CREDENTIAL_KEY_HEX_LEN {
            "it is too short"
        } else {
            "it is too long"
        });
    }
    let mut key = zeroize::Zeroizing::new([0u8; CREDENTIAL_KEY_LEN]);
    hex::decode_to_slice(text, key.as_mut())
        .map_err(|_| "it holds a character that is not hexadecimal (0-9, a-f)")?;
    Ok(key)
}

/// The user's state directory for the embedded database.
pub fn default_data_dir() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(|| PathBuf::from("."))
        .join("chopin")
}

impl Config {
    /// Checks every setting. `data_dir_default` is used when neither `DATABASE_URL` nor
    /// `--data-dir` is given.
    pub fn from_args(args: &Args) -> Result<Self, ConfigError> {
        let server_host = match given(&args.server_host) {
            None => IpAddr::from([127, 0, 0, 1]),
            Some(raw) => raw.parse::<IpAddr>().map_err(|_| {
                ConfigError::new(
                    "SERVER_HOST",
                    Some(raw),
                    "expected an IP address such as 127.0.0.1 or 0.0.0.0",
                )
            })?,
        };
        let port = match given(&args.port) {
            None => 8787,
            Some(raw) => raw.parse::<u16>().map_err(|_| {
                ConfigError::new(
                    "PORT",
                    Some(raw),
                    "expected a TCP port number from 0 to 65535",
                )
            })?,
        };
        let database = match given(&args.database_url) {
            None => Database::Sqlite(
                args.data_dir
                    .clone()
                    .unwrap_or_else(default_data_dir)
                    .join("chopin.db"),
            ),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Database::Postgres(url.to_string())
            }
            Some(url) if url.starts_with("sqlite:") => {
                let path = url
                    .trim_start_matches("sqlite://")
                    .trim_start_matches("sqlite:");
                let path = path.split('?').next().unwrap_or("");
                if path.is_empty() {
                    return Err(ConfigError::new(
                        "DATABASE_URL",
                        None,
                        "sqlite: needs a file path, e.g. sqlite:/var/lib/chopin/chopin.db",
                    ));
                }
                Database::Sqlite(PathBuf::from(path))
            }
            Some(_) => {
                // The value may hold a password, so it is not shown.
                return Err(ConfigError::new(
                    "DATABASE_URL",
                    None,
                    "expected a postgres://, postgresql:// or sqlite: URL (leave unset for the embedded SQLite database)",
                ));
            }
        };
        let many_processes =
            one_of("PROCESSES", &args.processes, "one", &["one", "many"])? == "many";
        if many_processes && !matches!(database, Database::Postgres(_)) {
            return Err(ConfigError::new(
                "PROCESSES",
                given(&args.processes),
                "more than one process needs PostgreSQL: the embedded SQLite database is served by one process. Set DATABASE_URL to a postgres:// URL, or leave PROCESSES unset",
            ));
        }
        let auth_mode = match one_of("AUTH_MODE", &args.auth_mode, "hosted", &["hosted", "local"])?
        {
            "local" => AuthMode::Local,
            _ => AuthMode::Hosted,
        };
        if auth_mode == AuthMode::Local && !server_host.is_loopback() {
            return Err(ConfigError::new(
                "AUTH_MODE",
                Some("local"),
                format!("local mode serves only loopback, but SERVER_HOST is {server_host}; bind 127.0.0.1 or use AUTH_MODE=hosted"),
            ));
        }
        if auth_mode == AuthMode::Local && many_processes {
            return Err(ConfigError::new(
                "PROCESSES",
                given(&args.processes),
                "local mode is one person's server on one machine and keeps its sign-ins in one process; use AUTH_MODE=hosted for more than one process",
            ));
        }
        let harness = one_of("HARNESS", &args.harness, "remote", HARNESSES)?.to_string();
        let harness_auth = match given(&args.harness_auth) {
            None => None,
            Some(raw) => Some(
                one_of("HARNESS_AUTH", &args.harness_auth, raw, HARNESS_AUTH_MODES)?.to_string(),
            ),
        };
        if harness_auth.as_deref() == Some("auto") && !server_host.is_loopback() {
            return Err(ConfigError::new(
                "HARNESS_AUTH",
                Some("auto"),
                format!(
                    "auto may fall back to this host's own login, which is allowed only on a loopback-only bind, but SERVER_HOST is {server_host}; choose an explicit mode"
                ),
            ));
        }
        let provider = if harness == "provider" {
            Some(provider_settings(args, harness_auth.as_deref())?)
        } else {
            None
        };
        let transcription = transcription_settings(args)?;
        let classifier = classifier_settings(args)?;
        let (visuals, visual_assessor) = visual_settings(args)?;
        let agent_enabled = one_of("AGENT", &args.agent, "on", &["on", "off"])? == "on";
        let background_jobs = one_of(
            "BACKGROUND_JOBS",
            &args.background_jobs,
            "on",
            &["on", "off"],
        )? == "on";
        let log_format = match one_of(
            "CHOPIN_LOG_FORMAT",
            &args.log_format,
            "human",
            &["human", "json"],
        )? {
            "json" => LogFormat::Json,
            _ => LogFormat::Human,
        };

        let mut warnings = Vec::new();
        let mut chat_attachment_max_bytes = parse_u64(
            "CHAT_ATTACHMENT_MAX_BYTES",
            &args.chat_attachment_max_bytes,
            1024 * 1024,
            "a whole number of bytes",
        )?;
        let chat_attachment_max_count = parse_u64(
            "CHAT_ATTACHMENT_MAX_COUNT",
            &args.chat_attachment_max_count,
            5,
            "a whole number of files (0 turns attachments off)",
        )?;
        let chat_attachment_max_count = u32::try_from(chat_attachment_max_count).map_err(|_| {
            ConfigError::new(
                "CHAT_ATTACHMENT_MAX_COUNT",
                given(&args.chat_attachment_max_count),
                "too large",
            )
        })?;
        let mut chat_attachment_max_total_bytes = parse_u64(
            "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
            &args.chat_attachment_max_total_bytes,
            4 * 1024 * 1024,
            "a whole number of bytes",
        )?;
        if harness == "remote" {
            for (name, cap, set) in [
                (
                    "CHAT_ATTACHMENT_MAX_BYTES",
                    &mut chat_attachment_max_bytes,
                    given(&args.chat_attachment_max_bytes).is_some(),
                ),
                (
                    "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
                    &mut chat_attachment_max_total_bytes,
                    given(&args.chat_attachment_max_total_bytes).is_some(),
                ),
            ] {
                if *cap > REMOTE_ATTACHMENT_CEILING_BYTES {
                    if set {
                        warnings.push(format!(
                            "{name}={cap} is above the 1 MiB ceiling of HARNESS=remote; using 1048576"
                        ));
                    }
                    *cap = REMOTE_ATTACHMENT_CEILING_BYTES;
                }
            }
        }

        let github_api_url = parse_base_url(
            "GITHUB_API_URL",
            &args.github_api_url,
            "https://api.github.com",
        )?;
        let github_web_url =
            parse_base_url("GITHUB_WEB_URL", &args.github_web_url, "https://github.com")?;
        let github_mcp_url = {
            let base = parse_base_url(
                "GITHUB_MCP_URL",
                &args.github_mcp_url,
                "https://api.githubcopilot.com/mcp",
            )?;
            // GitHub's own address ends in a slash; one given with it keeps it.
            match given(&args.github_mcp_url) {
                Some(raw) if !raw.ends_with('/') => base,
                _ => format!("{base}/"),
            }
        };
        let app_origin = parse_origin(&args.app_origin, server_host, port)?;

        let credential_key_file = match &database {
            Database::Sqlite(path) => path
                .parent()
                .map(|d| d.join("credential.key"))
                .unwrap_or_else(|| PathBuf::from("credential.key")),
            Database::Postgres(_) => args
                .data_dir
                .clone()
                .unwrap_or_else(default_data_dir)
                .join("credential.key"),
        };
        Ok(Self {
            server_host,
            port,
            database,
            auth_mode,
            harness,
            harness_auth,
            provider,
            transcription,
            classifier,
            visuals,
            visual_assessor,
            agent_enabled,
            background_jobs,
            planner_attach_grace_ms: parse_ms(
                "PLANNER_ATTACH_GRACE_MS",
                &args.planner_attach_grace_ms,
                120_000,
            )?,
            agent_connection_timeout_ms: parse_ms(
                "AGENT_CONNECTION_TIMEOUT_MS",
                &args.agent_connection_timeout_ms,
                120_000,
            )?,
            handover_planner_window_ms: parse_ms(
                "HANDOVER_PLANNER_WINDOW_MS",
                &args.handover_planner_window_ms,
                60_000,
            )?,
            planner_patience_ms: parse_ms(
                "PLANNER_PATIENCE_MS",
                &args.planner_patience_ms,
                120_000,
            )?,
            default_machine_idle_ms: parse_ms(
                "DEFAULT_MACHINE_IDLE_MS",
                &args.default_machine_idle_ms,
                600_000,
            )?,
            live_build: one_of("LIVE_BUILD", &args.live_build, "off", &["on", "off"])? == "on",
            many_processes,
            document_lease_ms: match parse_ms("DOCUMENT_LEASE_MS", &args.document_lease_ms, 10_000)?
            {
                ms if ms < 1_000 => {
                    return Err(ConfigError::new(
                        "DOCUMENT_LEASE_MS",
                        given(&args.document_lease_ms),
                        "expected at least 1000 ms: a lease is renewed three times per period",
                    ))
                }
                ms => ms,
            },
            process_url: process_url(&args.process_url)?,
            chat_attachment_max_bytes,
            chat_attachment_max_count,
            chat_attachment_max_total_bytes,
            log_format,
            github_api_url,
            github_web_url,
            github_mcp_url,
            github_allowed_users: parse_name_list(&args.github_allowed_users),
            session_max_age_ms: parse_session_max_age(&args.session_max_age_ms)?,
            session_encryption_key: match given(&args.session_encryption_key) {
                None => None,
                Some(raw) => {
                    decode_credential_key_hex(raw.trim()).map_err(|problem| {
                        // The value is a secret: never shown.
                        ConfigError::new(
                            "SESSION_ENCRYPTION_KEY",
                            None,
                            format!("the credential encryption key must be {CREDENTIAL_KEY_HEX_LEN} hexadecimal characters (a {CREDENTIAL_KEY_LEN}-byte key); {problem}"),
                        )
                    })?;
                    Some(Secret::new(raw.trim()))
                }
            },
            credential_key_file,
            access_recheck_ms: parse_ms(
                "AGENT_ACCESS_RECHECK_MS",
                &args.agent_access_recheck_ms,
                300_000,
            )?,
            planted: Planted::default(),
            github_allowed_organizations: parse_name_list(&args.github_allowed_organizations),
            app_origin,
            github_app_client_id: given(&args.github_app_client_id).map(str::to_string),
            github_app_client_secret: given(&args.github_app_client_secret).map(Secret::new),
            warnings,
        })
    }

    /// Every default, as with an empty environment (the embedded database under `data_dir`).
    pub fn defaults_with_data_dir(data_dir: PathBuf) -> Self {
        let args = Args {
            data_dir: Some(data_dir),
            ..Args::default()
        };
        Self::from_args(&args).expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut argv = vec!["chopin".to_string()];
        for (flag, value) in pairs {
            argv.push(format!("--{flag}={value}"));
        }
        let args = Args::try_parse_from(argv).expect("flags parse as text");
        Config::from_args(&args)
    }

    #[test]
    fn ho_19_the_hand_over_window_defaults_to_60000() {
        // RULINGS HO-19: the spec gives no default; the ruling's is 60000 ms.
        assert_eq!(parse(&[]).unwrap().handover_planner_window_ms, 60_000);
        let set = parse(&[("handover-planner-window-ms", "45000")]).unwrap();
        assert_eq!(set.handover_planner_window_ms, 45_000);
    }

    #[test]
    fn iso_42_the_visual_check_defaults_and_refuses_settings_out_of_range() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.visuals, VisualSettings::default());
        assert_eq!(
            (
                c.visuals.mode,
                c.visuals.possible,
                c.visuals.helpful,
                c.visuals.batch_max
            ),
            (VisualMode::Model, 0.7, 0.7, 8)
        );
        assert_eq!(c.visual_assessor, None);
        let set = parse(&[
            ("visual-admission", "require"),
            ("visual-possible-threshold", "0.5"),
            ("visual-batch-max", "32"),
            ("visual-assessor-model", "openai/gpt-4.1-mini"),
        ])
        .unwrap();
        assert_eq!(set.visuals.mode, VisualMode::Require);
        assert_eq!((set.visuals.possible, set.visuals.batch_max), (0.5, 32));
        assert_eq!(set.visual_assessor.unwrap().model, "gpt-4.1-mini");
        for (flag, value, variable) in [
            ("visual-admission", "maybe", "VISUAL_ADMISSION"),
            (
                "visual-helpful-threshold",
                "1.5",
                "VISUAL_HELPFUL_THRESHOLD",
            ),
            ("visual-batch-max", "0", "VISUAL_BATCH_MAX"),
            ("visual-assessor-model", "gpt-4", "VISUAL_ASSESSOR_MODEL"),
        ] {
            let e = parse(&[(flag, value)]).unwrap_err();
            assert!(e.to_string().contains(variable), "{e}");
        }
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.server_host.to_string(), "127.0.0.1");
        assert_eq!(c.port, 8787);
        assert_eq!(c.auth_mode, AuthMode::Hosted);
        assert_eq!(c.harness, "remote");
        assert!(c.agent_enabled);
        // AO-07, AO-08: two minutes each. HO-19 ruling: 60000. PRES-20: two minutes.
        assert_eq!(c.planner_attach_grace_ms, 120_000);
        assert_eq!(c.agent_connection_timeout_ms, 120_000);
        assert_eq!(c.handover_planner_window_ms, 60_000);
        assert_eq!(c.planner_patience_ms, 120_000);
        assert_eq!(c.default_machine_idle_ms, 600_000);
        assert!(!c.live_build);
        // FILE-18..20, with FILE-22: under remote both byte caps are at most 1 MiB.
        assert_eq!(c.chat_attachment_max_bytes, 1024 * 1024);
        assert_eq!(c.chat_attachment_max_count, 5);
        assert_eq!(c.chat_attachment_max_total_bytes, 1024 * 1024);
        assert!(
            c.warnings.is_empty(),
            "defaults are not configured values: {:?}",
            c.warnings
        );
        assert!(matches!(c.database, Database::Sqlite(_)));
    }

    #[test]
    fn a_bad_timer_names_the_variable() {
        let e = parse(&[("planner-attach-grace-ms", "abc")]).unwrap_err();
        assert_eq!(e.variable, "PLANNER_ATTACH_GRACE_MS");
        assert!(
            e.to_string().contains("PLANNER_ATTACH_GRACE_MS=\"abc\""),
            "{e}"
        );
        assert!(e.to_string().contains("milliseconds"), "{e}");
        assert!(parse(&[("agent-connection-timeout-ms", "0")]).is_err());
    }

    #[test]
    fn file_18_file_19_file_20_file_22_the_defaults_and_the_remote_ceiling() {
        let provider = parse(&[
            ("harness", "provider"),
            ("harness-auth", "custom"),
            ("model", "openai/m"),
            ("model-base-url", "http://127.0.0.1:1/v1"),
        ])
        .unwrap();
        assert_eq!(provider.chat_attachment_max_bytes, 1024 * 1024);
        assert_eq!(provider.chat_attachment_max_count, 5);
        assert_eq!(provider.chat_attachment_max_total_bytes, 4 * 1024 * 1024);
        // Under remote, both byte caps are never more than 1 MiB, set or not.
        let remote = parse(&[]).unwrap();
        assert_eq!(remote.chat_attachment_max_total_bytes, 1024 * 1024);
        assert!(
            remote.warnings.is_empty(),
            "the default is lowered silently"
        );
        let off = parse(&[("chat-attachment-max-count", "0")]).unwrap();
        assert_eq!(off.chat_attachment_max_count, 0);
    }

    #[test]
    fn file_33_remote_lowers_a_configured_cap_with_a_warning() {
        let c = parse(&[("chat-attachment-max-total-bytes", "8388608")]).unwrap();
        assert_eq!(c.chat_attachment_max_total_bytes, 1024 * 1024);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("CHAT_ATTACHMENT_MAX_TOTAL_BYTES"));
    }

    #[test]
    fn dict_01_dict_07_transcription_is_off_by_default_and_takes_25_mib_when_on() {
        assert_eq!(parse(&[]).unwrap().transcription, None);
        let c = parse(&[
            ("transcription-model", "openai/gpt-4o-mini-transcribe"),
            ("openai-api-key", "sk-x"),
        ])
        .unwrap();
        let t = c.transcription.unwrap();
        assert_eq!(t.model, "gpt-4o-mini-transcribe");
        assert_eq!(t.base_url, "https://api.openai.com/v1");
        assert_eq!(t.max_bytes, 25 * 1024 * 1024);
        assert_eq!(t.api_key.unwrap().expose(), "sk-x");
        let e = parse(&[("transcription-model", "anthropic/x")]).unwrap_err();
        assert_eq!(e.variable, "TRANSCRIPTION_MODEL");
        let e = parse(&[
            ("transcription-model", "m"),
            ("transcription-max-bytes", "0"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "TRANSCRIPTION_MAX_BYTES");
        let c = parse(&[
            ("transcription-model", "whisper-1"),
            ("transcription-base-url", "http://127.0.0.1:9000/v1/"),
        ])
        .unwrap();
        assert!(c
            .transcription
            .unwrap()
            .base_url
            .starts_with("http://127.0.0.1:9000/v1"));
    }

    #[test]
    fn unknown_harness_and_auth_mode_are_refused() {
        let e = parse(&[("harness", "copilot-sdk")]).unwrap_err();
        assert_eq!(e.variable, "HARNESS");
        assert!(e.problem.contains("remote"));
        assert_eq!(
            parse(&[("auth-mode", "cloud")]).unwrap_err().variable,
            "AUTH_MODE"
        );
    }

    #[test]
    fn rfc_77_host_login_fallback_needs_loopback() {
        let e = parse(&[("harness-auth", "auto"), ("server-host", "0.0.0.0")]).unwrap_err();
        assert_eq!(e.variable, "HARNESS_AUTH");
        assert!(parse(&[("harness-auth", "auto"), ("server-host", "127.0.0.1")]).is_ok());
        assert!(parse(&[("harness-auth", "direct"), ("server-host", "0.0.0.0")]).is_ok());
    }

    #[test]
    fn many_processes_need_postgresql_and_say_so() {
        let e = parse(&[("processes", "many")]).unwrap_err();
        assert_eq!(e.variable, "PROCESSES");
        assert!(e.problem.contains("needs PostgreSQL"), "{}", e.problem);
        let c = parse(&[
            ("processes", "many"),
            ("database-url", "postgres://u@db.example/chopin"),
        ])
        .unwrap();
        assert!(c.many_processes);
        assert_eq!(c.document_lease_ms, 10_000);
        assert!(!parse(&[]).unwrap().many_processes);
        let e = parse(&[
            ("processes", "many"),
            ("database-url", "postgres://u@db.example/chopin"),
            ("auth-mode", "local"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "PROCESSES");
        assert!(e.problem.contains("AUTH_MODE=hosted"), "{}", e.problem);
        assert_eq!(
            parse(&[("processes", "several")]).unwrap_err().variable,
            "PROCESSES"
        );
        assert_eq!(
            parse(&[("document-lease-ms", "999")]).unwrap_err().variable,
            "DOCUMENT_LEASE_MS"
        );
    }

    #[test]
    fn a_process_url_is_a_web_address_with_no_path() {
        assert_eq!(parse(&[]).unwrap().process_url, None);
        assert_eq!(
            parse(&[("process-url", "http://10.0.0.7:8787/")])
                .unwrap()
                .process_url
                .as_deref(),
            Some("http://10.0.0.7:8787")
        );
        for bad in [
            "10.0.0.7:8787",
            "ftp://10.0.0.7",
            "http://10.0.0.7:8787/chopin",
            "http://user:pw@10.0.0.7",
            "http://",
        ] {
            let e = parse(&[("process-url", bad)]).unwrap_err();
            assert_eq!(e.variable, "PROCESS_URL", "{bad}");
            assert!(e.problem.contains("http://host:port"), "{}", e.problem);
        }
    }

    #[test]
    fn local_mode_needs_a_loopback_bind() {
        let e = parse(&[("auth-mode", "local"), ("server-host", "0.0.0.0")]).unwrap_err();
        assert_eq!(e.variable, "AUTH_MODE");
        assert!(parse(&[("auth-mode", "local")]).is_ok());
    }

    #[test]
    fn database_url_is_checked_and_never_echoed() {
        let e = parse(&[("database-url", "mysql://u:pw-x9q@h/db")]).unwrap_err();
        assert_eq!(e.variable, "DATABASE_URL");
        assert!(!e.to_string().contains("pw-x9q"));
        let c = parse(&[("database-url", "postgres://u:pw-x9q@db.example:5432/chopin")]).unwrap();
        assert!(!format!("{c:?}").contains("pw-x9q"));
        assert_eq!(c.database.describe(), "PostgreSQL at db.example:5432");
        let c = parse(&[("database-url", "sqlite:/tmp/x.db")]).unwrap();
        assert_eq!(c.database, Database::Sqlite("/tmp/x.db".into()));
    }
    #[test]
    fn github_urls_default_and_drop_one_trailing_slash() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.github_api_url, "https://api.github.com");
        assert_eq!(c.github_web_url, "https://github.com");
        let c = parse(&[
            ("github-api-url", "http://127.0.0.1:9000/"),
            ("github-web-url", "https://ghe.example/"),
        ])
        .unwrap();
        assert_eq!(c.github_api_url, "http://127.0.0.1:9000");
        assert_eq!(c.github_web_url, "https://ghe.example");
        let c = parse(&[("github-api-url", "https://ghe.example/api/v3")]).unwrap();
        assert_eq!(c.github_api_url, "https://ghe.example/api/v3");
    }

    #[test]
    fn github_mcp_url_defaults_to_github_s_and_keeps_the_slash_given() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.github_mcp_url, "https://api.githubcopilot.com/mcp/");
        let c = parse(&[("github-mcp-url", "http://127.0.0.1:9000/mcp/")]).unwrap();
        assert_eq!(c.github_mcp_url, "http://127.0.0.1:9000/mcp/");
        let c = parse(&[("github-mcp-url", "http://127.0.0.1:9000/mcp")]).unwrap();
        assert_eq!(c.github_mcp_url, "http://127.0.0.1:9000/mcp");
        assert!(parse(&[("github-mcp-url", "ftp://x/mcp")]).is_err());
    }

    #[test]
    fn a_bad_github_url_names_the_variable() {
        for bad in [
            "api.github.com",
            "ftp://api.github.com",
            "https://",
            "https://api.github.com//",
            "https://api.github.com/?x=1",
            "https://user:pw@api.github.com",
            "http://127.0.0.1:70000",
            "http://127.0.0.1:",
        ] {
            let e = parse(&[("github-api-url", bad)]).unwrap_err();
            assert_eq!(e.variable, "GITHUB_API_URL", "{bad}");
            assert!(e.problem.contains("https://"), "{e}");
        }
        let e = parse(&[("github-web-url", "github.com")]).unwrap_err();
        assert_eq!(e.variable, "GITHUB_WEB_URL");
    }

    #[test]
    fn allow_lists_are_trimmed_lower_cased_and_skip_empty_entries() {
        let c = parse(&[]).unwrap();
        assert!(c.github_allowed_users.is_empty());
        assert!(c.github_allowed_organizations.is_empty());
        let c = parse(&[
            ("github-allowed-users", " Mona, ,hubot,,MONA "),
            ("github-allowed-organizations", "Acme-Corp,"),
        ])
        .unwrap();
        assert_eq!(
            c.github_allowed_users.iter().collect::<Vec<_>>(),
            ["hubot", "mona"]
        );
        assert_eq!(
            c.github_allowed_organizations.iter().collect::<Vec<_>>(),
            ["acme-corp"]
        );
        let c = parse(&[("github-allowed-users", " , ")]).unwrap();
        assert!(c.github_allowed_users.is_empty());
    }

    #[test]
    fn app_origin_defaults_to_the_bind_address() {
        assert_eq!(parse(&[]).unwrap().app_origin, "http://127.0.0.1:8787");
        let c = parse(&[("server-host", "::1"), ("port", "9000")]).unwrap();
        assert_eq!(c.app_origin, "http://[::1]:9000");
    }

    #[test]
    fn app_origin_must_be_an_origin() {
        for (given, expected) in [
            ("https://chopin.example.com", "https://chopin.example.com"),
            (
                "HTTPS://Chopin.Example.com:443",
                "https://chopin.example.com",
            ),
            ("http://localhost:3000", "http://localhost:3000"),
            ("http://[::1]:8787", "http://[::1]:8787"),
        ] {
            assert_eq!(
                parse(&[("app-origin", given)]).unwrap().app_origin,
                expected,
                "{given}"
            );
        }
        for bad in [
            "chopin.example.com",
            "ftp://chopin.example.com",
            "https://chopin.example.com/",
            "https://chopin.example.com/app",
            "https://chopin.example.com?x=1",
            "https://chopin.example.com:",
            "https://chopin.example.com:99999",
            "https://u@chopin.example.com",
            "https://",
        ] {
            let e = parse(&[("app-origin", bad)]).expect_err(bad);
            assert_eq!(e.variable, "APP_ORIGIN", "{bad}");
            assert!(e.problem.contains("origin"), "{e}");
        }
    }

    #[test]
    fn the_github_app_secret_is_never_printed() {
        let c = parse(&[
            ("github-app-client-id", "Iv1.abc"),
            ("github-app-client-secret", "s3cr3t-value"),
        ])
        .unwrap();
        assert_eq!(c.github_app_client_id.as_deref(), Some("Iv1.abc"));
        assert_eq!(
            c.github_app_client_secret.as_ref().map(Secret::expose),
            Some("s3cr3t-value")
        );
        assert!(!format!("{c:?}").contains("s3cr3t-value"));
        assert!(format!("{c:?}").contains("<redacted>"));
        let c = parse(&[]).unwrap();
        assert_eq!(c.github_app_client_id, None);
        assert_eq!(c.github_app_client_secret, None);
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut argv = vec!["chopin".to_string()];
        for (flag, value) in pairs {
            argv.push(format!("--{flag}={value}"));
        }
        Config::from_args(&Args::try_parse_from(argv).expect("flags parse as text"))
    }

    #[test]
    fn a_bad_session_encryption_key_is_refused_without_echoing_it() {
        let err = parse(&[("session-encryption-key", "not-a-key-hunter2")]).unwrap_err();
        assert_eq!(err.variable, "SESSION_ENCRYPTION_KEY");
        let shown = err.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("64"), "says what it accepts: {shown}");
        let ok = parse(&[("session-encryption-key", &"ab".repeat(32))]).unwrap();
        assert!(!format!("{ok:?}").contains(&"ab".repeat(32)));
    }

    #[test]
    fn the_generated_key_lives_beside_the_embedded_database() {
        let c = parse(&[("data-dir", "/var/lib/chopin")]).unwrap();
        assert_eq!(
            c.credential_key_file,
            PathBuf::from("/var/lib/chopin/credential.key")
        );
    }
}

#[cfg(test)]
mod provider_tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut argv = vec!["chopin".to_string()];
        for (flag, value) in pairs {
            argv.push(format!("--{flag}={value}"));
        }
        let args = Args::try_parse_from(argv).expect("flags parse as text");
        Config::from_args(&args)
    }

    fn provider(pairs: &[(&str, &str)]) -> Result<ProviderSettings, ConfigError> {
        let mut all = vec![("harness", "provider")];
        all.extend_from_slice(pairs);
        parse(&all).map(|c| c.provider.expect("provider settings"))
    }

    #[test]
    fn rfc_55_provider_needs_an_explicit_harness_auth() {
        let e = parse(&[("harness", "provider"), ("model", "openai/gpt-4.1")]).unwrap_err();
        assert_eq!(e.variable, "HARNESS_AUTH");
        assert!(e.problem.contains("explicit HARNESS_AUTH"), "{e}");
        for mode in ["direct", "ai-gateway"] {
            let e = provider(&[("harness-auth", mode), ("model", "openai/gpt-4.1")]).unwrap_err();
            assert_eq!(e.variable, "HARNESS_AUTH", "{mode}");
            assert!(
                e.problem.contains("openai, anthropic, custom or auto"),
                "{e}"
            );
        }
    }

    /// `PROVIDER_MODELS`: ids with optional levels, `*` for the API's listing, the family's
    /// prefix optional; a level that is not one, a model of the other family, a model listed
    /// twice and an empty entry are refused naming the variable.
    #[test]
    fn provider_models_lists_the_choosable_models_and_refuses_what_is_not_one() {
        let models = |v: &str| {
            provider(&[
                ("harness-auth", "openai"),
                ("openai-api-key", "sk-x"),
                ("model", "openai/gpt-4.1"),
                ("provider-models", v),
            ])
        };
        let ok = models("gpt-4.1-mini, openai/o4-mini=low|high|low, *").unwrap();
        assert_eq!(
            ok.offered,
            vec![
                ("gpt-4.1-mini".to_owned(), Vec::new()),
                (
                    "o4-mini".to_owned(),
                    vec!["low".to_owned(), "high".to_owned()]
                ),
            ]
        );
        assert!(ok.list_models, "`*`: the API's listing too");
        for (bad, words) in [
            ("o4-mini=ultra", "not a reasoning level"),
            ("anthropic/claude", "another API than MODEL's (openai)"),
            ("a, a", "listed twice"),
            ("a,,b", "expected model ids"),
            ("*, *", "listed twice"),
        ] {
            let e = models(bad).unwrap_err();
            assert_eq!(e.variable, "PROVIDER_MODELS", "{bad}");
            assert!(e.problem.contains(words), "{bad}: {e}");
        }
    }

    #[test]
    fn provider_needs_model_as_provider_slash_model() {
        let e = provider(&[("harness-auth", "openai"), ("openai-api-key", "sk-x")]).unwrap_err();
        assert_eq!(e.variable, "MODEL");
        for bad in ["gpt-4.1", "gemini/pro", "openai/", "/gpt"] {
            let e = provider(&[
                ("harness-auth", "custom"),
                ("model", bad),
                ("model-base-url", "http://127.0.0.1:11434/v1"),
            ])
            .unwrap_err();
            assert_eq!(e.variable, "MODEL", "{bad}");
            assert!(e.problem.contains("provider/model"), "{bad}: {e}");
        }
        // A model id may hold further slashes (OpenRouter's `vendor/model`).
        let s = provider(&[
            ("harness-auth", "custom"),
            ("model", "openai/meta-llama/llama-3.1-8b"),
            ("model-base-url", "https://openrouter.ai/api/v1"),
        ])
        .unwrap();
        assert_eq!(s.model, "meta-llama/llama-3.1-8b");
        assert_eq!(s.family, ModelFamily::OpenAi);
    }

    #[test]
    fn openai_and_anthropic_modes_need_their_key_and_have_default_bases() {
        let e = provider(&[("harness-auth", "openai"), ("model", "openai/gpt-4.1")]).unwrap_err();
        assert_eq!(e.variable, "OPENAI_API_KEY");
        let s = provider(&[
            ("harness-auth", "openai"),
            ("model", "openai/gpt-4.1"),
            ("openai-api-key", "sk-operator"),
        ])
        .unwrap();
        assert_eq!(s.base_url, "https://api.openai.com/v1");
        assert_eq!(s.api_key.as_ref().map(Secret::expose), Some("sk-operator"));
        assert_eq!(
            (
                s.max_model_calls,
                s.retries,
                s.timeout_ms,
                s.tool_result_max_bytes
            ),
            (16, 2, 60_000, 32 * 1024)
        );
        assert_eq!(s.max_output_tokens, None);

        let e =
            provider(&[("harness-auth", "anthropic"), ("model", "anthropic/claude")]).unwrap_err();
        assert_eq!(e.variable, "ANTHROPIC_API_KEY");
        let s = provider(&[
            ("harness-auth", "anthropic"),
            ("model", "anthropic/claude-sonnet-4-5"),
            ("anthropic-api-key", "sk-ant"),
            ("anthropic-base-url", "http://127.0.0.1:9000"),
        ])
        .unwrap();
        assert_eq!(s.family, ModelFamily::Anthropic);
        assert_eq!(s.base_url, "http://127.0.0.1:9000");

        // A mode serves its own family only.
        let e = provider(&[
            ("harness-auth", "openai"),
            ("model", "anthropic/claude"),
            ("openai-api-key", "sk-x"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "MODEL");
        assert!(e.problem.contains("HARNESS_AUTH=custom"), "{e}");
    }

    #[test]
    fn a_key_is_never_shown_in_an_error_or_debug() {
        let s = provider(&[
            ("harness-auth", "openai"),
            ("model", "openai/gpt-4.1"),
            ("openai-api-key", "sk-very-secret"),
        ])
        .unwrap();
        assert!(!format!("{s:?}").contains("sk-very-secret"));
        let c = parse(&[
            ("harness", "provider"),
            ("harness-auth", "openai"),
            ("model", "openai/gpt-4.1"),
            ("openai-api-key", "sk-very-secret"),
        ])
        .unwrap();
        assert!(!format!("{c:?}").contains("sk-very-secret"));
    }

    #[test]
    fn custom_needs_a_base_url_and_takes_an_optional_key() {
        let e = provider(&[("harness-auth", "custom"), ("model", "openai/llama3")]).unwrap_err();
        assert_eq!(e.variable, "MODEL_BASE_URL");
        let s = provider(&[
            ("harness-auth", "custom"),
            ("model", "openai/llama3"),
            ("model-base-url", "http://127.0.0.1:11434/v1"),
        ])
        .unwrap();
        assert_eq!(s.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(s.api_key, None);
        let e = provider(&[
            ("harness-auth", "custom"),
            ("model", "openai/llama3"),
            ("model-base-url", "ftp://x"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "MODEL_BASE_URL");
    }

    #[test]
    fn rfc_77_auto_runs_only_on_loopback_and_takes_what_it_finds() {
        let e = provider(&[
            ("server-host", "0.0.0.0"),
            ("harness-auth", "auto"),
            ("model", "openai/llama3"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "HARNESS_AUTH");
        let s = provider(&[("harness-auth", "auto"), ("model", "openai/llama3")]).unwrap();
        assert_eq!(s.base_url, "https://api.openai.com/v1");
        assert_eq!(s.api_key, None);
        let s = provider(&[
            ("harness-auth", "auto"),
            ("model", "anthropic/claude"),
            ("anthropic-api-key", "sk-ant"),
        ])
        .unwrap();
        assert_eq!(s.api_key.as_ref().map(Secret::expose), Some("sk-ant"));
    }

    #[test]
    fn bounds_and_reasoning_are_checked() {
        let base = [
            ("harness-auth", "custom"),
            ("model", "openai/llama3"),
            ("model-base-url", "http://127.0.0.1:11434/v1"),
        ];
        let with = |extra: (&'static str, &'static str)| {
            let mut all = base.to_vec();
            all.push(extra);
            provider(&all)
        };
        let s = with(("model-reasoning", "high")).unwrap();
        assert_eq!(s.reasoning.as_deref(), Some("high"));
        assert_eq!(
            with(("model-reasoning", "max")).unwrap_err().variable,
            "MODEL_REASONING"
        );
        for (flag, bad, variable) in [
            ("provider-max-model-calls", "0", "PROVIDER_MAX_MODEL_CALLS"),
            (
                "provider-max-model-calls",
                "257",
                "PROVIDER_MAX_MODEL_CALLS",
            ),
            ("provider-retries", "11", "PROVIDER_RETRIES"),
            ("provider-timeout-ms", "0", "PROVIDER_TIMEOUT_MS"),
            (
                "provider-tool-result-max-bytes",
                "100",
                "PROVIDER_TOOL_RESULT_MAX_BYTES",
            ),
            (
                "provider-max-output-tokens",
                "0",
                "PROVIDER_MAX_OUTPUT_TOKENS",
            ),
        ] {
            let e = with((flag, bad)).unwrap_err();
            assert_eq!(e.variable, variable, "{flag}={bad}");
        }
        let s = with(("provider-max-model-calls", "1")).unwrap();
        assert_eq!(s.max_model_calls, 1);
        let s = with(("provider-max-model-calls", "256")).unwrap();
        assert_eq!(s.max_model_calls, 256);
        let s = with(("provider-retries", "0")).unwrap();
        assert_eq!(s.retries, 0);
    }

    #[test]
    fn remote_has_no_provider_settings() {
        let c = parse(&[("model", "openai/gpt-4.1")]).unwrap();
        assert_eq!(c.harness, "remote");
        assert_eq!(c.provider, None);
    }
}
