//! An in-process server on a real loopback socket, for tests that need the whole stack: the
//! fake GitHub (mona, a writer of octo/plans) and its MCP server (`GITHUB_MCP_URL`), the server
//! over a `MemoryStore`, one document, mona signed in through the OAuth routes, and helpers to
//! attach a scripted agent client, start a turn and call host tools in it.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET};
use chopin_fixtures::github_mcp::FakeGitHubMcp;
use chopin_protocol::agent::ServerMessage;
use chopin_protocol::agent::{ClientMessage, HostToolCall, HostToolResult, Started, ToolSpec};
use chopin_server::config::{Config, Secret};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::runtime::connector::{self, TcpConnector};
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::store::{MemoryStore, NewDocument, Store};
use chopin_server::{app, App, Runtime};
use uuid::Uuid;

/// The document's canonical URL.
pub const DOC_URL: &str = "/documents/octo/plans/notes";

pub struct Served {
    pub state: App,
    pub github: FakeGitHub,
    /// GitHub's MCP server, over the same fake state; the server's `GITHUB_MCP_URL`.
    pub github_mcp: FakeGitHubMcp,
    /// `127.0.0.1:<port>` of the server.
    pub host: String,
    /// mona's GitHub token.
    pub mona: String,
    /// mona's browser session (`Cookie` header value).
    pub mona_cookie: String,
    pub doc: Uuid,
    pub store: Arc<dyn Store>,
    pub running: app::Running,
    _dir: tempfile::TempDir,
}

async fn get(url: &str, cookie: Option<&str>) -> connector::HttpResponse {
    let mut request = http::Request::get(url);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    connector::send(&TcpConnector, request.body(Bytes::new()).unwrap())
        .await
        .unwrap()
}

fn cookie(response: &connector::HttpResponse, name: &str) -> String {
    response
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no {name} cookie"))
}

fn location(response: &connector::HttpResponse) -> String {
    response.headers["location"].to_str().unwrap().to_owned()
}

/// Signs in, through the server's OAuth routes, whoever the fake GitHub's browser is signed
/// in as: their browser session (`Cookie` header value).
async fn oauth_sign_in(host: &str) -> String {
    let start = get(&format!("http://{host}/auth/github"), None).await;
    let attempt = cookie(&start, "chopin_oauth");
    let approve = get(&location(&start), None).await;
    let done = get(&location(&approve), Some(&attempt)).await;
    cookie(&done, "chopin_session")
}

/// Starts everything; mona is signed in (her account has a live browser sign-in).
pub async fn served() -> Served {
    served_over(Arc::new(MemoryStore::new())).await
}

/// [`served`] over `store` (a memory store wrapped to fail or hold some calls, say).
pub async fn served_over(store: Arc<dyn Store>) -> Served {
    served_with(store, |_| {}).await
}

/// [`served_over`] with `configure` applied to the server's settings before it starts.
pub async fn served_with(store: Arc<dyn Store>, configure: impl FnOnce(&mut Config)) -> Served {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let github_mcp = FakeGitHubMcp::new(github.clone());
    let github_mcp_url = github_mcp.serve_tcp().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::defaults_with_data_dir(dir.path().to_path_buf());
    config.session_encryption_key = Some(Secret::new("44".repeat(32)));
    config.github_api_url = github_url.clone();
    config.github_web_url = github_url;
    config.github_mcp_url = github_mcp_url;
    config.github_app_client_id = Some(DEFAULT_CLIENT_ID.into());
    config.github_app_client_secret = Some(Secret::new(DEFAULT_CLIENT_SECRET));
    config.app_origin = format!("http://{host}");
    // Background jobs start worker sessions on an attached client: off unless a test says.
    config.background_jobs = false;
    configure(&mut config);
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
    .unwrap();
    let state = running.app().clone();
    tokio::spawn(chopin_server::serve(
        listener,
        running.router(),
        std::future::pending(),
    ));
    let doc = OsEntropy.uuid();
    // `notes`, or — for a second process on the same store — `notes-2`, …
    for n in 1.. {
        let made = store
            .create_document(&NewDocument {
                id: doc,
                repo_owner: "octo".into(),
                repo_name: "plans".into(),
                slug: if n == 1 {
                    "notes".into()
                } else {
                    format!("notes-{n}")
                },
                title: "Notes".into(),
                created_at_ms: 0,
                parent_id: None,
                ..NewDocument::default()
            })
            .await;
        match made {
            Ok(_) => break,
            Err(chopin_server::store::StoreError::Conflict(_)) if n < 10 => continue,
            Err(e) => panic!("{e}"),
        }
    }
    github.set_browser_user("mona");
    let mona_cookie = oauth_sign_in(&host).await;
    Served {
        state,
        github,
        github_mcp,
        host,
        mona,
        mona_cookie,
        doc,
        store,
        running,
        _dir: dir,
    }
}

impl Served {
    /// mona's room socket on the document, read up to its `session:planner`.
    pub async fn room(&self) -> chopin_fixtures::browser::BrowserSocket {
        let mut room = self.connect_room(self.doc, &self.mona_cookie).await;
        room.next_of_type("session:planner").await.unwrap();
        room
    }

    /// Signs `login` (GitHub user `id`, given `permission` on octo/plans) in through the OAuth
    /// routes; their browser session (`Cookie` header value).
    pub async fn sign_in(&self, login: &str, id: u64, permission: Permission) -> String {
        self.github.add_user(login, id);
        self.github.grant("octo", "plans", login, permission);
        self.github.set_browser_user(login);
        oauth_sign_in(&self.host).await
    }

    /// A room socket on `document` for the browser session `cookie`, read up to its
    /// `session:hello`.
    pub async fn room_as(
        &self,
        document: Uuid,
        cookie: &str,
    ) -> chopin_fixtures::browser::BrowserSocket {
        let mut room = self.connect_room(document, cookie).await;
        room.next_of_type("session:hello").await.unwrap();
        room
    }

    /// A room socket on `document` for the browser session `cookie`, nothing read yet.
    pub async fn connect_room(
        &self,
        document: Uuid,
        cookie: &str,
    ) -> chopin_fixtures::browser::BrowserSocket {
        let stream = tokio::net::TcpStream::connect(&self.host).await.unwrap();
        chopin_fixtures::browser::BrowserSocket::connect(
            stream,
            &self.host,
            &format!("/api/documents/{document}/room"),
            Some(cookie),
            Some(&format!("http://{}", self.host)),
        )
        .await
        .unwrap()
    }

    /// Pauses `document`'s automatic participation in storage (no Chat line): for tests of
    /// something else that send messages without `@chopin` and want no Planner turn from them.
    pub async fn pause_participation(&self, document: Uuid) {
        self.store
            .pause_participation(&chopin_server::store::ParticipationPause {
                document_id: document,
                paused_by: "mona".into(),
                paused_at_ms: 0,
            })
            .await
            .unwrap();
    }

    /// mona's scripted agent client, attached to the document offering `features`.
    pub async fn attach(&self, features: &[&str]) -> AgentClient {
        self.attach_to(self.doc, features).await
    }

    /// mona's scripted agent client, attached to `document` offering `features`.
    pub async fn attach_to(&self, document: Uuid, features: &[&str]) -> AgentClient {
        let stream = tokio::net::TcpStream::connect(&self.host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(self.host.clone(), Some(&self.mona)))
            .await
            .unwrap();
        let answer = client
            .attach(&document.to_string(), features)
            .await
            .unwrap();
        assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
        client
    }
}

/// Sends `frame` on a room socket and returns the answer that names its `requestId`.
pub async fn ask_room(room: &mut BrowserSocket, frame: serde_json::Value) -> serde_json::Value {
    let id = frame["requestId"].clone();
    room.send_json(&frame).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), room.recv_json())
            .await
            .expect("an answer within 10 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == id => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

/// A turn begun by mona's `@chopin` message: the session and turn ids and the host tools the
/// turn offers.
pub struct Begun {
    pub session: String,
    pub turn: String,
    pub host_tools: Vec<ToolSpec>,
}

/// mona says `text` in the room; the client answers `start`; the turn it is sent.
pub async fn begin_turn(client: &mut AgentClient, room: &mut BrowserSocket, text: &str) -> Begun {
    let ack = ask_room(
        room,
        serde_json::json!({ "type": "chat:send", "requestId": format!("go-{text}"), "text": text }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let session = match next(client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(t) => Begun {
            session,
            turn: t.turn_id,
            host_tools: t.host_tools,
        },
        other => panic!("expected turn, got {other:?}"),
    }
}

/// Calls host tool `name` in `turn` and waits for its result (other frames are skipped).
pub async fn call_host_tool(
    client: &mut AgentClient,
    turn: &str,
    call_id: &str,
    name: &str,
    input: serde_json::Value,
) -> HostToolResult {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: call_id.into(),
            name: name.into(),
            input,
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            assert_eq!(r.call_id, call_id);
            return r;
        }
    }
}

/// The client's next server message (at most 10 s away).
pub async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(10), client.recv())
        .await
        .expect("a frame within 10 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

/// The client ends `turn` (completed) and the server has taken it: the document is idle.
pub async fn end_turn(s: &Served, client: &mut AgentClient, turn: &str) {
    client
        .send(&ClientMessage::TurnEnd(chopin_protocol::agent::TurnEnd {
            turn_id: turn.to_owned(),
            status: chopin_protocol::agent::TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    s.state.turns.until_idle(s.doc).await;
}
