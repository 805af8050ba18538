//! The Chopin side of the bench: the real `chopin` binary against an in-process fake GitHub,
//! one signed-in writer, and the three loads measured on it.
//!
//! Owns: the fixture (the fake GitHub with @mona granted write on `octo/plans`, the server
//! spawned as the e2e suite's `Launch::hosted` does but on `PORT=0` so its origin is the port
//! it bound, @mona's browser sign-in through the OAuth routes), creating the documents,
//! opening agent links (`attach` → `attached`), opening room sockets (up to their greeting),
//! and the sequential `chat:send` → `chat:ack` loop. Does not own: concurrency and timing
//! ([`crate::load`]), RSS readings or the report.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use chopin_fixtures::agent::{connect, AgentClient, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{self, FakeGitHub, Permission};
use chopin_protocol::agent::ServerMessage;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::child::Spawned;
use crate::load::{dial, open_all, Opened, Phase};

/// The repository every document lives in.
const OWNER: &str = "octo";
const REPO: &str = "plans";
/// The one account: a writer on [`OWNER`]/[`REPO`].
const LOGIN: &str = "mona";
const LOGIN_ID: u64 = 1001;
/// Every timer that could close a link or expire a hold during a run: one hour.
const QUIET_TIMER_MS: &str = "3600000";
/// Documents created at once.
const CREATE_CONCURRENCY: usize = 16;
/// How long one wait for a chat answer may take before the loop gives up.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A running Chopin server with its fake GitHub and a signed-in writer.
pub struct Fixture {
    pub server: Spawned,
    /// The server asks it on upgrades and attaches; its request log is reported per phase.
    github: FakeGitHub,
    /// @mona's GitHub token (bearer for the API and the agent connection).
    pub token: String,
    /// `chopin_session=…`, @mona's browser sign-in.
    pub cookie: String,
    /// The server's origin, sent as `Origin` by the room sockets.
    pub origin: String,
    /// The server's data folder (embedded SQLite); removed when dropped.
    _data: tempfile::TempDir,
    /// How the server was started, to start it again after a crash.
    bin: std::path::PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Fixture {
    /// Starts the fake GitHub and `bin`, and signs @mona in.
    pub async fn start(bin: &Path) -> Result<Fixture> {
        Self::start_with(bin, &[]).await
    }

    /// As [`Fixture::start`], with `extra` environment variables (`DATABASE_URL`, say).
    pub async fn start_with(bin: &Path, extra: &[(&'static str, String)]) -> Result<Fixture> {
        let github = FakeGitHub::new();
        github.add_user(LOGIN, LOGIN_ID).add_repo(OWNER, REPO);
        github.grant(OWNER, REPO, LOGIN, Permission::Write);
        let token = github.issue_token(LOGIN);
        let github_url = github
            .serve_tcp()
            .await
            .context("the fake GitHub could not listen")?;
        let data = tempfile::tempdir().context("cannot make a temporary data folder")?;
        let data_dir = data.path().to_string_lossy().into_owned();
        let mut env = server_env(&github_url, &data_dir);
        env.extend(extra.iter().cloned());
        let server = Spawned::start("chopin", bin, &[], &env, "chopin listening on ").await?;
        let (bin, env) = (bin.to_path_buf(), env);
        let origin = server.base_url.clone();
        let cookie = sign_in(&server.base_url, &github, LOGIN)
            .await
            .with_context(|| format!("signing @{LOGIN} in through the OAuth routes failed"))?;
        Ok(Fixture {
            server,
            github,
            token,
            cookie,
            origin,
            _data: data,
            bin,
            env,
        })
    }

    /// Kills the server (SIGKILL) and starts it again on the same data and port (its origin,
    /// which browser sign-ins are bound to, stays the same).
    pub async fn crash_and_restart(&mut self) -> Result<()> {
        let port = self
            .server
            .host()
            .rsplit(':')
            .next()
            .unwrap_or("0")
            .to_owned();
        for (name, value) in &mut self.env {
            if *name == "PORT" {
                *value = port.clone();
            }
        }
        self.server.kill().await?;
        self.server =
            Spawned::start("chopin", &self.bin, &[], &self.env, "chopin listening on ").await?;
        self.origin = self.server.base_url.clone();
        Ok(())
    }

    /// How many requests the fake GitHub has had so far: all, `GET /user`, `/repos/…`.
    pub fn github_requests(&self) -> GitHubRequests {
        GitHubRequests {
            all: self.github.requests().len(),
            user: self.github.request_count("GET /user"),
            repos: self.github.request_count("/repos/"),
        }
    }

    /// Creates `count` documents in [`OWNER`]/[`REPO`] with the bearer token, at most
    /// [`CREATE_CONCURRENCY`] at once. Returns their ids in creation order.
    pub async fn create_documents(&self, count: usize) -> Result<Vec<String>> {
        let http = reqwest::Client::new();
        let url = format!(
            "{}/api/repositories/{OWNER}/{REPO}/documents",
            self.server.base_url
        );
        let created: Vec<Result<String>> = futures::stream::iter(0..count)
            .map(|i| {
                let request = http
                    .post(&url)
                    .bearer_auth(&self.token)
                    .json(&json!({ "title": format!("bench {i:05}") }));
                async move {
                    let response = request
                        .send()
                        .await
                        .map_err(|e| anyhow!("document {i} was not created: {e}"))?;
                    let status = response.status();
                    let body = response.text().await.unwrap_or_default();
                    if status.as_u16() != 201 {
                        bail!("document {i} was not created: HTTP {status}: {body}");
                    }
                    let value: Value = serde_json::from_str(&body).map_err(|e| {
                        anyhow!("document {i}: the answer is not JSON ({e}): {body}")
                    })?;
                    value["id"]
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| anyhow!("document {i}: the answer has no id: {body}"))
                }
            })
            .buffered(CREATE_CONCURRENCY)
            .collect()
            .await;
        created.into_iter().collect()
    }

    /// Opens one agent link per document in `documents` and attaches it, at most `concurrency`
    /// in flight. `step` is `attach` sent → `attached` read; `total` adds the TCP connect and
    /// the upgrade (with its GitHub token check).
    pub async fn agent_links(
        &self,
        documents: &[String],
        concurrency: usize,
    ) -> Phase<AgentClient> {
        let host: Arc<str> = self.server.host().into();
        let token: Arc<str> = self.token.as_str().into();
        let documents: Arc<[String]> = documents.into();
        let names = documents.clone();
        open_all(
            documents.len(),
            concurrency,
            |i| format!("attach {i} (document {})", names[i]),
            move |i| {
                let (host, token, document) = (host.clone(), token.clone(), documents[i].clone());
                async move {
                    let started = Instant::now();
                    let stream = dial(&host).await?;
                    let mut client = connect(stream, &Upgrade::new(host.as_ref(), Some(&token)))
                        .await
                        .map_err(|e| format!("was refused at the upgrade: {e}"))?;
                    let sent = Instant::now();
                    let answer = client
                        .attach(&document, &[])
                        .await
                        .map_err(|e| format!("got no answer: {e}"))?;
                    let step = sent.elapsed();
                    match answer {
                        ServerMessage::Attached(_) => Ok(Opened {
                            socket: client,
                            step,
                            total: started.elapsed(),
                        }),
                        ServerMessage::Refused(r) => {
                            Err(format!("was refused: {} ({})", r.reason, r.message))
                        }
                        other => Err(format!("got `{}` instead of attached", other.type_name())),
                    }
                }
            },
        )
        .await
    }

    /// Opens `count` room sockets spread round-robin over `documents`, at most `concurrency`
    /// in flight, each read up to its greeting ([`greeting`]). `step` is upgrade done →
    /// greeting read; `total` adds the TCP connect and the upgrade.
    pub async fn room_sockets(
        &self,
        documents: &[String],
        count: usize,
        concurrency: usize,
    ) -> Phase<BrowserSocket> {
        let host: Arc<str> = self.server.host().into();
        let cookie: Arc<str> = self.cookie.as_str().into();
        let origin: Arc<str> = self.origin.as_str().into();
        let documents: Arc<[String]> = documents.into();
        let names = documents.clone();
        open_all(
            count,
            concurrency,
            |i| format!("room socket {i} (document {})", names[i % names.len()]),
            move |i| {
                let document = documents[i % documents.len()].clone();
                let (host, cookie, origin) = (host.clone(), cookie.clone(), origin.clone());
                async move {
                    let started = Instant::now();
                    let mut socket = open_room(&host, &document, &cookie, &origin).await?;
                    let upgraded = Instant::now();
                    greeting(&mut socket).await?;
                    Ok(Opened {
                        socket,
                        step: upgraded.elapsed(),
                        total: started.elapsed(),
                    })
                }
            },
        )
        .await
    }

    /// Opens one more room socket on `document` and sends `acks` `chat:send`s one after
    /// another, each waiting for its `chat:ack`. Returns each send → ack time and the loop's
    /// wall time.
    pub async fn chat_acks(
        &self,
        document: &str,
        acks: usize,
    ) -> Result<(Vec<Duration>, Duration)> {
        let mut socket = open_room(self.server.host(), document, &self.cookie, &self.origin)
            .await
            .map_err(|e| anyhow!("the chat room socket {e}"))?;
        greeting(&mut socket)
            .await
            .map_err(|e| anyhow!("the chat room socket {e}"))?;
        let mut samples = Vec::with_capacity(acks);
        let started = Instant::now();
        for i in 0..acks {
            let request_id = format!("bench-{i}");
            let frame = json!({
                "type": "chat:send",
                "requestId": request_id,
                "text": format!("bench message {i}"),
            });
            let sent = Instant::now();
            socket
                .send_json(&frame)
                .await
                .map_err(|e| anyhow!("chat:send {i} could not be sent: {e}"))?;
            tokio::time::timeout(ACK_TIMEOUT, ack(&mut socket, &request_id))
                .await
                .map_err(|_| {
                    anyhow!(
                        "chat:send {i} got no answer within {} s",
                        ACK_TIMEOUT.as_secs()
                    )
                })?
                .map_err(|e| anyhow!("chat:send {i} {e}"))?;
            samples.push(sent.elapsed());
        }
        let elapsed = started.elapsed();
        let _ = socket.close().await;
        Ok((samples, elapsed))
    }
}

/// Counts of the fake GitHub's request log (see [`Fixture::github_requests`]).
#[derive(Debug, Clone, Copy)]
pub struct GitHubRequests {
    pub all: usize,
    pub user: usize,
    pub repos: usize,
}

impl GitHubRequests {
    /// `N GitHub requests (x GET /user, y /repos/…)` since `earlier`.
    pub fn since(&self, earlier: GitHubRequests) -> String {
        format!(
            "{} GitHub requests ({} GET /user, {} /repos/…)",
            self.all - earlier.all,
            self.user - earlier.user,
            self.repos - earlier.repos
        )
    }
}

/// The environment of a bench's `chopin` process: `PORT=0`, its data folder, the fake GitHub at
/// `github_url` with its OAuth app, and every timer that could end a link during a run an hour.
pub(crate) fn server_env(github_url: &str, data_dir: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PORT", "0".to_owned()),
        ("HOME", data_dir.to_owned()),
        ("CHOPIN_DATA_DIR", data_dir.to_owned()),
        ("GITHUB_API_URL", github_url.to_owned()),
        ("GITHUB_WEB_URL", github_url.to_owned()),
        ("GITHUB_APP_CLIENT_ID", github::DEFAULT_CLIENT_ID.to_owned()),
        (
            "GITHUB_APP_CLIENT_SECRET",
            github::DEFAULT_CLIENT_SECRET.to_owned(),
        ),
        ("AGENT_CONNECTION_TIMEOUT_MS", QUIET_TIMER_MS.to_owned()),
        ("PLANNER_ATTACH_GRACE_MS", QUIET_TIMER_MS.to_owned()),
        ("AGENT_ACCESS_RECHECK_MS", QUIET_TIMER_MS.to_owned()),
        ("PLANNER_PATIENCE_MS", QUIET_TIMER_MS.to_owned()),
    ]
}

/// Signs `login` in through the server's GitHub OAuth web flow, the fake GitHub approving it as
/// the browser's user. Returns the `Cookie` header value of the new session.
pub(crate) async fn sign_in(base_url: &str, github: &FakeGitHub, login: &str) -> Result<String> {
    github.set_browser_user(login);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("cannot build an HTTP client")?;
    let start = http.get(format!("{base_url}/auth/github")).send().await?;
    let start = redirect(start, "GET /auth/github").await?;
    let attempt = cookie_named(&start, "chopin_oauth")?;
    let approve = http.get(location(&start)?).send().await?;
    let approve = redirect(approve, "the fake GitHub's authorize page").await?;
    let callback = location(&approve)?;
    let at = callback.find("/auth/github/callback").ok_or_else(|| {
        anyhow!("the fake GitHub sent the browser to {callback}, not the callback")
    })?;
    let done = http
        .get(format!("{base_url}{}", &callback[at..]))
        .header("cookie", attempt)
        .send()
        .await?;
    let done = redirect(done, "GET /auth/github/callback").await?;
    cookie_named(&done, "chopin_session")
}

/// The response if it is a 302; otherwise an error with its status and body.
async fn redirect(response: reqwest::Response, what: &str) -> Result<reqwest::Response> {
    if response.status().as_u16() == 302 {
        return Ok(response);
    }
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    bail!("{what} answered HTTP {status} instead of a redirect: {body}")
}

fn location(response: &reqwest::Response) -> Result<String> {
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("a redirect without a Location header"))
}

/// `name=value` of the `Set-Cookie` named `name`.
fn cookie_named(response: &reqwest::Response, name: &str) -> Result<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned())
        .ok_or_else(|| anyhow!("no {name} cookie was set"))
}

/// Dials and upgrades a room socket as @mona's browser tab.
pub(crate) async fn open_room(
    host: &str,
    document: &str,
    cookie: &str,
    origin: &str,
) -> Result<BrowserSocket, String> {
    let stream = dial(host).await?;
    let path = format!("/api/documents/{document}/room");
    BrowserSocket::connect(stream, host, &path, Some(cookie), Some(origin))
        .await
        .map_err(|e| format!("was refused at the upgrade: {e}"))
}

/// Reads a room socket's greeting: `session:hello`, `session:planner` and the server's Yjs
/// sync step 1 (a binary frame starting `0, 0`), in whatever order they come.
pub(crate) async fn greeting(socket: &mut BrowserSocket) -> Result<(), String> {
    let (mut hello, mut planner, mut sync) = (false, false, false);
    while !(hello && planner && sync) {
        match socket
            .recv_json()
            .await
            .map_err(|e| format!("lost its greeting: {e}"))?
        {
            BrowserEvent::Json(value) => match value["type"].as_str() {
                Some("session:hello") => hello = true,
                Some("session:planner") => planner = true,
                Some("error") => return Err(format!("got an error in its greeting: {value}")),
                _ => {}
            },
            BrowserEvent::Binary(bytes) => sync |= bytes.starts_with(&[0, 0]),
            BrowserEvent::Closed { code, reason } => {
                return Err(format!("was closed in its greeting: {code} {reason:?}"))
            }
        }
    }
    Ok(())
}

/// Reads until the `chat:ack` for `request_id`; a `chat:refused` or `error` for it, or a close,
/// is an error.
pub(crate) async fn ack(socket: &mut BrowserSocket, request_id: &str) -> Result<(), String> {
    loop {
        match socket
            .recv_json()
            .await
            .map_err(|e| format!("lost its answer: {e}"))?
        {
            BrowserEvent::Json(value) => {
                let kind = value["type"].as_str().unwrap_or_default();
                let for_us = value["requestId"].as_str() == Some(request_id);
                match kind {
                    "chat:ack" if for_us => return Ok(()),
                    "chat:refused" if for_us => return Err(format!("was refused: {value}")),
                    "error" => return Err(format!("got an error: {value}")),
                    _ => {}
                }
            }
            BrowserEvent::Binary(_) => {}
            BrowserEvent::Closed { code, reason } => {
                return Err(format!("was closed before its ack: {code} {reason:?}"))
            }
        }
    }
}
