//! The Planner's pull-request tools: GitHub's remote MCP server (`GITHUB_MCP_URL`) reached from
//! this host with an rmcp client over Streamable HTTP, bound to the document's repository
//! (harness-rfc.md §5.4: `githubTools`, `GITHUB_TOOL_SCHEMAS`, `bindRepository`).
//!
//! Owns: the allowlist — `pull_request_read` (its nine methods) and `list_pull_requests`, with
//! Chopin's own input schemas and descriptions, neither of which has an `owner` or `repo` field
//! (RFC-27, RFC-28, RFC-29); discovery (connect and list the server's tools) on the first call
//! of one of them for an owner's token, never before (RFC-38, ISO-05); one client per owner,
//! kept for that owner's current token and closed when the token changes (RFC-30); binding
//! every call to the document's repository, whatever `owner` or `repo` the model put in it
//! (RFC-31, RFC-74); failing that call with a clear error when the server cannot be reached or
//! lacks a tool (`Unavailable`, `MissingTool`); bounding what a result carries back.
//! Does not own: whether a call may run (the turn's host rechecks the owner first and hands in
//! the owner's current token), or opening sockets (the [`Connector`] seam: the simulator's
//! fake GitHub MCP host is reached the same way as GitHub's).
//!
//! Invariants: no other GitHub MCP tool is ever offered or called — search and issue tools are
//! never loaded, whatever the server lists; the server's own tool descriptions never reach the
//! model; the token travels only in the `Authorization` header to `GITHUB_MCP_URL` (marked
//! sensitive) and is kept here only as its digest; the read-only header and a pull-requests
//! toolset are asked for as a second layer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use hyper::body::Bytes;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ContentBlock, JsonRpcMessage, ServerJsonRpcMessage,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sse_stream::{Sse, SseStream};
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::harness::{HostToolResult, ToolSpec};
use crate::identity::github::TokenDigest;
use crate::runtime::connector::{self, SendOptions, SharedConnector};

/// The GitHub MCP tools the Planner may call, and only these (RFC-27).
pub const GITHUB_TOOLS: [&str; 2] = ["pull_request_read", "list_pull_requests"];

/// `pull_request_read`'s methods (RFC-28).
pub const PULL_REQUEST_METHODS: [&str; 9] = [
    "get",
    "get_diff",
    "get_status",
    "get_files",
    "get_commits",
    "get_review_comments",
    "get_reviews",
    "get_comments",
    "get_check_runs",
];

/// How long connecting and listing the server's tools may take.
pub const DISCOVERY_TIMEOUT_MS: u64 = 15_000;
/// How long one tool call may take.
pub const CALL_TIMEOUT_MS: u64 = 30_000;
/// The most bytes of one answer from the MCP server read.
pub const MCP_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// The most bytes of text one result gives the model (as the repository tools').
pub const RESULT_MAX_BYTES: usize = crate::repository::RESULT_MAX_BYTES;
/// The most owners whose client is kept at once; past it, the one used longest ago is closed.
pub const MAX_CLIENTS: usize = 256;

/// Whether `name` is one of the pull-request tools.
pub fn is_github_tool(name: &str) -> bool {
    GITHUB_TOOLS.contains(&name)
}

/// The two tools as the model sees them: our schemas and words (RFC-27, RFC-28, RFC-29).
pub fn tool_specs() -> Vec<ToolSpec> {
    let page = json!({ "type": "number", "minimum": 1, "description": "Page of results, from 1." });
    let per_page = json!({ "type": "number", "minimum": 1, "maximum": 100, "description": "Results per page (at most 100)." });
    vec![
        ToolSpec {
            name: "pull_request_read".to_owned(),
            description: "Read one pull request of this document's repository: choose what with method — get (its title, description, state and branches), get_diff, get_status (combined commit status), get_files (changed files), get_commits, get_review_comments, get_reviews, get_comments or get_check_runs. Only this document's repository can be read.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "method": { "type": "string", "enum": PULL_REQUEST_METHODS },
                    "pullNumber": { "type": "number", "description": "The pull request's number." },
                    "page": page,
                    "perPage": per_page,
                    "after": { "type": "string", "description": "Cursor from an earlier page, where the method pages by cursor." }
                },
                "required": ["method", "pullNumber"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "list_pull_requests".to_owned(),
            description: "List the pull requests of this document's repository, newest first unless sort and direction say otherwise. Filter by state (open, closed or all), base branch or head (user:branch).".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "state": { "type": "string", "description": "open (default), closed or all." },
                    "base": { "type": "string" },
                    "head": { "type": "string" },
                    "sort": { "type": "string", "description": "created, updated, popularity or long-running." },
                    "direction": { "type": "string", "description": "asc or desc." },
                    "page": page,
                    "perPage": per_page
                },
                "additionalProperties": false
            }),
        },
    ]
}

/// Why a pull-request tool could not be reached (the RFC's `GitHubToolsError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitHubToolsError {
    /// GitHub's MCP server could not be reached or gave no usable answer.
    #[error(
        "GitHub's MCP server is unavailable ({0}); the pull-request tools cannot be used right now"
    )]
    Unavailable(String),
    /// The server does not offer a tool the allowlist needs.
    #[error(
        "GitHub's MCP server does not offer the tool {0}; the pull-request tools cannot be used"
    )]
    MissingTool(String),
}

/// `pull_request_read` arguments, as our schema has them (RFC-28).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PullRequestRead {
    method: String,
    pull_number: f64,
    #[serde(default)]
    page: Option<f64>,
    #[serde(default)]
    per_page: Option<f64>,
    #[serde(default)]
    after: Option<String>,
}

/// `list_pull_requests` arguments (RFC-29).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListPullRequests {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    head: Option<String>,
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    page: Option<f64>,
    #[serde(default)]
    per_page: Option<f64>,
}

fn whole(name: &str, n: f64, min: f64, max: f64) -> Result<Value, String> {
    if n.fract() != 0.0 || n < min || n > max {
        return Err(format!("{name} must be a whole number from {min} to {max}"));
    }
    Ok(json!(n as u64))
}

/// The arguments sent to GitHub for `tool`: the model's, checked against our schema, with
/// `owner` and `repo` set to the bound repository (bindRepository: whatever the model gave
/// for either is overwritten, RFC-31, RFC-74).
pub fn bind_repository(
    tool: &str,
    input: Value,
    owner: &str,
    repo: &str,
) -> Result<Map<String, Value>, String> {
    let Value::Object(mut input) = input else {
        return Err(format!("{tool} takes an object of arguments"));
    };
    input.remove("owner");
    input.remove("repo");
    let mut out = Map::new();
    let optional_page = |out: &mut Map<String, Value>, page: Option<f64>, per_page: Option<f64>| {
        if let Some(p) = page {
            out.insert("page".into(), whole("page", p, 1.0, 1_000.0)?);
        }
        if let Some(p) = per_page {
            out.insert("perPage".into(), whole("perPage", p, 1.0, 100.0)?);
        }
        Ok::<(), String>(())
    };
    let invalid = |e: serde_json::Error| {
        format!("invalid {tool} arguments: {e} (the repository is always this document's)")
    };
    match tool {
        "pull_request_read" => {
            let a: PullRequestRead =
                serde_json::from_value(Value::Object(input)).map_err(invalid)?;
            if !PULL_REQUEST_METHODS.contains(&a.method.as_str()) {
                return Err(format!(
                    "method {:?} is not one of {}",
                    a.method,
                    PULL_REQUEST_METHODS.join(", ")
                ));
            }
            out.insert("method".into(), json!(a.method));
            out.insert(
                "pullNumber".into(),
                whole("pullNumber", a.pull_number, 1.0, u32::MAX as f64)?,
            );
            optional_page(&mut out, a.page, a.per_page)?;
            if let Some(after) = a.after {
                out.insert("after".into(), json!(after));
            }
        }
        "list_pull_requests" => {
            let a: ListPullRequests =
                serde_json::from_value(Value::Object(input)).map_err(invalid)?;
            for (name, value) in [
                ("state", a.state),
                ("base", a.base),
                ("head", a.head),
                ("sort", a.sort),
                ("direction", a.direction),
            ] {
                if let Some(v) = value {
                    out.insert(name.into(), json!(v));
                }
            }
            optional_page(&mut out, a.page, a.per_page)?;
        }
        other => return Err(format!("{other:?} is not a pull-request tool")),
    }
    out.insert("owner".into(), json!(owner));
    out.insert("repo".into(), json!(repo));
    Ok(out)
}

/// The rmcp client of one owner.
type Client = RunningService<RoleClient, ()>;

struct Cached {
    /// The token it was opened with, as a digest.
    token: TokenDigest,
    client: Client,
    /// When it was last used (a counter), to close the one used longest ago when full.
    used: u64,
}

/// The host's GitHub MCP clients, one per Planner owner.
pub struct GitHubTools {
    url: String,
    connector: SharedConnector,
    clients: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// By the owner's browser login.
    by_owner: BTreeMap<Uuid, Cached>,
    uses: u64,
    discoveries: u64,
}

impl GitHubTools {
    /// Clients of the server at `url` (`GITHUB_MCP_URL`), over `connector`. Nothing is
    /// connected until the first call.
    pub fn new(url: String, connector: SharedConnector) -> Self {
        GitHubTools {
            url,
            connector,
            clients: Mutex::new(Table::default()),
        }
    }

    /// How many times a client was opened and the server's tools listed (discovery).
    pub async fn discoveries(&self) -> u64 {
        self.clients.lock().await.discoveries
    }

    /// How many owners have an open client now.
    pub async fn open_clients(&self) -> usize {
        self.clients.lock().await.by_owner.len()
    }

    /// Runs pull-request tool `name` for the document's repository `owner/repo`, as the Planner
    /// owner `login` with its current `token`. Discovers on the first call for that token.
    pub async fn execute(
        &self,
        name: &str,
        input: Value,
        login: Uuid,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> HostToolResult {
        let arguments = match bind_repository(name, input, owner, repo) {
            Ok(a) => a,
            Err(why) => return HostToolResult::error(why),
        };
        self.call(name, arguments, login, token).await
    }

    /// GitHub MCP's `web_search` for `query`, as the Planner owner `login` with its current
    /// `token`: the research evidence worker's one tool (JOB-06). Its answer is the server's
    /// text, bounded like every tool result.
    pub async fn web_search(&self, query: &str, login: Uuid, token: &str) -> HostToolResult {
        let arguments = serde_json::Map::from_iter([("query".to_owned(), Value::from(query))]);
        self.call("web_search", arguments, login, token).await
    }

    /// Calls tool `name` of GitHub's MCP server with `arguments`.
    async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, Value>,
        login: Uuid,
        token: &str,
    ) -> HostToolResult {
        let peer = match self.client_for(login, token).await {
            Ok(peer) => peer,
            Err(e) => return HostToolResult::error(e.to_string()),
        };
        let call =
            peer.call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments));
        let answer = tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), call).await;
        let result = match answer {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => {
                // The client may be broken: the next call discovers again.
                self.forget(login).await;
                let e = GitHubToolsError::Unavailable(describe_service_error(&e));
                return HostToolResult::error(e.to_string());
            }
            Err(_) => {
                self.forget(login).await;
                let e =
                    GitHubToolsError::Unavailable(format!("no answer within {CALL_TIMEOUT_MS} ms"));
                return HostToolResult::error(e.to_string());
            }
        };
        let mut text = String::new();
        for block in &result.content {
            if let ContentBlock::Text(t) = block {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&t.text);
            }
        }
        if text.is_empty() {
            if let Some(structured) = &result.structured_content {
                text = structured.to_string();
            }
        }
        let text = bounded(text);
        if result.is_error == Some(true) {
            HostToolResult::error(format!("GitHub answered with an error: {text}"))
        } else {
            HostToolResult::ok(Value::String(text))
        }
    }

    /// `login`'s token is retired (the login ended, or its credential was renewed): its client
    /// is closed now rather than at its next use (RFC-53).
    pub async fn token_retired(&self, login: Uuid) {
        self.forget(login).await;
    }

    async fn forget(&self, login: Uuid) {
        let gone = self.clients.lock().await.by_owner.remove(&login);
        if let Some(mut gone) = gone {
            let _ = gone.client.close().await;
        }
    }

    /// The owner's client for `token`: the cached one when it was opened with this token;
    /// otherwise the old one is closed and a new one discovers (RFC-30, RFC-38).
    async fn client_for(
        &self,
        login: Uuid,
        token: &str,
    ) -> Result<rmcp::Peer<RoleClient>, GitHubToolsError> {
        let digest = TokenDigest::of(token);
        // One discovery at a time (and the table kept while it runs): a second call of the same
        // owner waits and then uses the client the first opened.
        let mut table = self.clients.lock().await;
        table.uses += 1;
        let now = table.uses;
        let stale = match table.by_owner.get_mut(&login) {
            Some(cached) if cached.token == digest && !cached.client.is_closed() => {
                cached.used = now;
                return Ok(cached.client.peer().clone());
            }
            Some(_) => table.by_owner.remove(&login),
            None => None,
        };
        if let Some(mut stale) = stale {
            tracing::info!(login_id = %login, "the Planner owner's GitHub token changed: its GitHub MCP client is closed");
            let _ = stale.client.close().await;
        }
        table.discoveries += 1;
        tracing::info!(login_id = %login, "discovering GitHub MCP tools for a pull-request tool call");
        let client = tokio::time::timeout(
            Duration::from_millis(DISCOVERY_TIMEOUT_MS),
            self.discover(token),
        )
        .await
        .map_err(|_| {
            GitHubToolsError::Unavailable(format!("no answer within {DISCOVERY_TIMEOUT_MS} ms"))
        })??;
        if table.by_owner.len() >= MAX_CLIENTS {
            let oldest = table
                .by_owner
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| *k);
            if let Some(mut old) = oldest.and_then(|k| table.by_owner.remove(&k)) {
                let _ = old.client.close().await;
            }
        }
        let peer = client.peer().clone();
        table.by_owner.insert(
            login,
            Cached {
                token: digest,
                client,
                used: now,
            },
        );
        Ok(peer)
    }

    /// Connects with `token` and checks the server offers every allowlisted tool.
    async fn discover(&self, token: &str) -> Result<Client, GitHubToolsError> {
        #[allow(clippy::disallowed_types)] // rmcp's type; headers have no order that escapes
        let mut headers = std::collections::HashMap::new();
        headers.insert(
            HeaderName::from_static("x-mcp-readonly"),
            HeaderValue::from_static("true"),
        );
        headers.insert(
            HeaderName::from_static("x-mcp-toolsets"),
            HeaderValue::from_static("pull_requests"),
        );
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .auth_header(token.to_owned())
            .custom_headers(headers);
        let transport = StreamableHttpClientTransport::with_client(
            ConnectorHttp {
                connector: self.connector.clone(),
            },
            config,
        );
        let client = ()
            .serve(transport)
            .await
            .map_err(|e| GitHubToolsError::Unavailable(describe_init_error(&e)))?;
        let listed = client
            .list_all_tools()
            .await
            .map_err(|e| GitHubToolsError::Unavailable(describe_service_error(&e)))?;
        for needed in GITHUB_TOOLS {
            if !listed.iter().any(|t| t.name == needed) {
                return Err(GitHubToolsError::MissingTool(needed.to_owned()));
            }
        }
        Ok(client)
    }
}

/// Words for an rmcp error that hold no token (rmcp's errors name URLs and statuses, never
/// request headers).
fn describe_service_error(e: &rmcp::ServiceError) -> String {
    match e {
        rmcp::ServiceError::McpError(data) => {
            format!("GitHub's MCP server refused: {}", data.message)
        }
        rmcp::ServiceError::TransportSend(_) | rmcp::ServiceError::TransportClosed => {
            "the connection to GitHub's MCP server failed".to_owned()
        }
        rmcp::ServiceError::Timeout { .. } => {
            "GitHub's MCP server did not answer in time".to_owned()
        }
        _ => "GitHub's MCP server gave no usable answer".to_owned(),
    }
}

fn describe_init_error(e: &rmcp::service::ClientInitializeError) -> String {
    let words = e.to_string();
    if words.contains("401") || words.contains("403") {
        "GitHub's MCP server did not accept the Planner owner's token".to_owned()
    } else {
        "could not connect to GitHub's MCP server".to_owned()
    }
}

/// At most [`RESULT_MAX_BYTES`] of `text`, cut at a character boundary and saying so.
fn bounded(text: String) -> String {
    if text.len() <= RESULT_MAX_BYTES {
        return text;
    }
    let note = "\n…[cut: the answer was longer than Chopin passes on; ask for a smaller page]";
    let mut cut = RESULT_MAX_BYTES - note.len();
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{note}", &text[..cut])
}

// ---------------------------------------------------------------------------------------------
// rmcp's Streamable HTTP client over the connector seam
// ---------------------------------------------------------------------------------------------

/// rmcp's HTTP side, over [`connector::send_with`]: one request per connection, each answer
/// read whole (at most [`MCP_MAX_BODY_BYTES`]). No GET stream is opened: the pull-request tools
/// need no message the server starts.
#[derive(Clone)]
struct ConnectorHttp {
    connector: SharedConnector,
}

/// Why an exchange failed, in words that hold no token.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ExchangeError(String);

type HttpResult<T> = Result<T, StreamableHttpError<ExchangeError>>;

fn client_error(words: impl Into<String>) -> StreamableHttpError<ExchangeError> {
    StreamableHttpError::Client(ExchangeError(words.into()))
}

impl ConnectorHttp {
    #[allow(clippy::disallowed_types)] // rmcp's type; headers have no order that escapes
    fn request(
        uri: &str,
        method: http::Method,
        auth_header: Option<String>,
        custom_headers: std::collections::HashMap<HeaderName, HeaderValue>,
        session_id: Option<&str>,
        body: Bytes,
    ) -> HttpResult<http::Request<Bytes>> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::USER_AGENT, "chopin-server");
        if let Some(token) = auth_header {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| client_error("the token cannot be sent in a header"))?;
            value.set_sensitive(true);
            builder = builder.header(http::header::AUTHORIZATION, value);
        }
        for (name, value) in custom_headers {
            builder = builder.header(name, value);
        }
        if let Some(session) = session_id {
            builder = builder.header("mcp-session-id", session);
        }
        builder
            .body(body)
            .map_err(|_| client_error("GITHUB_MCP_URL gives a bad URL"))
    }

    async fn send(&self, request: http::Request<Bytes>) -> HttpResult<connector::HttpResponse> {
        let options = SendOptions {
            max_body_bytes: MCP_MAX_BODY_BYTES,
            ..SendOptions::default()
        };
        let exchange = connector::send_with(self.connector.as_ref(), &options, request);
        match tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), exchange).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(client_error(e.to_string())),
            Err(_) => Err(client_error(format!(
                "no answer within {CALL_TIMEOUT_MS} ms"
            ))),
        }
    }
}

impl StreamableHttpClient for ConnectorHttp {
    type Error = ExchangeError;

    #[allow(clippy::disallowed_types)] // rmcp's signature
    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: std::collections::HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let body = serde_json::to_vec(&message).map_err(StreamableHttpError::Deserialize)?;
        let request = Self::request(
            &uri,
            http::Method::POST,
            auth_header,
            custom_headers,
            session_id.as_deref(),
            Bytes::from(body),
        )?;
        let response = self.send(request).await?;
        let status = response.status;
        if matches!(status.as_u16(), 202 | 204) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status.as_u16() == 404 && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            // Only the status: an answer's body is not ours to repeat.
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!("HTTP {}", status.as_u16()).into(),
            ));
        }
        let session = response
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = response
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let awaits_nothing = !matches!(message, JsonRpcMessage::Request(_));
        if content_type.starts_with("text/event-stream") {
            let events: BoxStream<'static, Result<Sse, SseError>> =
                SseStream::new(Full::new(response.body)).boxed();
            return Ok(StreamableHttpPostResponse::Sse(events, session));
        }
        if content_type.starts_with("application/json") {
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&response.body) {
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session)),
                Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                Err(e) => Err(StreamableHttpError::Deserialize(e)),
            };
        }
        if awaits_nothing {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(Some(
            content_type,
        )))
    }

    #[allow(clippy::disallowed_types)] // rmcp's signature
    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: std::collections::HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let request = Self::request(
            &uri,
            http::Method::DELETE,
            auth_header,
            custom_headers,
            Some(&session_id),
            Bytes::new(),
        )?;
        // Ending a session is a courtesy; whatever the server says, ours is over.
        let _ = self.send(request).await;
        Ok(())
    }

    #[allow(clippy::disallowed_types)] // rmcp's signature
    async fn get_stream(
        &self,
        _uri: Arc<str>,
        _session_id: Option<Arc<str>>,
        _last_event_id: Option<String>,
        _auth_header: Option<String>,
        _custom_headers: std::collections::HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        Err(StreamableHttpError::ServerDoesNotSupportSse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC-27, RFC-28, RFC-29: two tools, our schemas, no owner or repo field.
    #[test]
    fn rfc_27_rfc_28_rfc_29_the_allowlist_is_two_tools_with_our_schemas() {
        let specs = tool_specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, GITHUB_TOOLS);
        for spec in &specs {
            let properties = spec.input_schema["properties"].as_object().unwrap();
            assert!(!properties.contains_key("owner") && !properties.contains_key("repo"));
            assert_eq!(spec.input_schema["additionalProperties"], false);
        }
        let read = &specs[0].input_schema;
        assert_eq!(
            read["properties"]["method"]["enum"],
            json!(PULL_REQUEST_METHODS)
        );
        assert_eq!(read["required"], json!(["method", "pullNumber"]));
        for (field, kind) in [
            ("pullNumber", "number"),
            ("page", "number"),
            ("perPage", "number"),
            ("after", "string"),
        ] {
            assert_eq!(read["properties"][field]["type"], kind, "{field}");
        }
        let list = &specs[1].input_schema;
        let fields: Vec<&String> = list["properties"].as_object().unwrap().keys().collect();
        assert_eq!(fields.len(), 7);
        for (field, kind) in [
            ("state", "string"),
            ("base", "string"),
            ("head", "string"),
            ("sort", "string"),
            ("direction", "string"),
            ("page", "number"),
            ("perPage", "number"),
        ] {
            assert_eq!(list["properties"][field]["type"], kind, "{field}");
        }
        assert!(list.get("required").is_none());
    }

    /// RFC-31, RFC-74: owner and repo are overwritten with the bound repository; nothing else
    /// the model adds passes.
    #[test]
    fn rfc_31_rfc_74_bind_repository_overwrites_owner_and_repo() {
        let bound = bind_repository(
            "pull_request_read",
            json!({ "method": "get", "pullNumber": 7, "owner": "evil", "repo": "secrets" }),
            "octo",
            "plans",
        )
        .unwrap();
        assert_eq!(bound["owner"], "octo");
        assert_eq!(bound["repo"], "plans");
        assert_eq!(bound["pullNumber"], 7);
        let listed = bind_repository(
            "list_pull_requests",
            json!({ "repo": "secrets", "state": "all" }),
            "octo",
            "plans",
        )
        .unwrap();
        assert_eq!(listed["repo"], "plans");
        assert_eq!(listed["owner"], "octo");
        for bad in [
            json!({ "method": "get", "pullNumber": 7, "repository": "evil/secrets" }),
            json!({ "method": "get", "pullNumber": 7, "query": "repo:evil/secrets" }),
            json!({ "method": "merge", "pullNumber": 7 }),
            json!({ "method": "get", "pullNumber": 7.5 }),
            json!({ "method": "get" }),
        ] {
            assert!(
                bind_repository("pull_request_read", bad.clone(), "octo", "plans").is_err(),
                "{bad}"
            );
        }
        assert!(bind_repository(
            "search_pull_requests",
            json!({ "query": "x" }),
            "octo",
            "plans"
        )
        .is_err());
    }

    #[test]
    fn long_answers_are_cut_within_the_bound() {
        let long = "é".repeat(RESULT_MAX_BYTES);
        let cut = bounded(long);
        assert!(cut.len() <= RESULT_MAX_BYTES);
        assert!(cut.ends_with("ask for a smaller page]"));
    }
}
