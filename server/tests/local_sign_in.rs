//! Local sign-in (`AUTH_MODE=local`): the GitHub device flow end to end, over real loopback TCP,
//! between the real server and the fake GitHub. The server's clock is a manual one, so the
//! polling interval (and `slow_down`) is stepped exactly; the fake's request log shows when the
//! server asked GitHub.
//!
//! The HTTP client is the server's own connector ([`chopin_server::runtime::connector::send`]): one
//! request per connection, no redirects, cookies carried by hand.

use std::sync::Arc;

use axum::body::Bytes;
use chopin_fixtures::github::{FakeGitHub, DEFAULT_CLIENT_ID};
use chopin_server::app::{self, Running};
use chopin_server::config::{AuthMode, Config};
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::connector::{self, TcpConnector};
use chopin_server::runtime::entropy::OsEntropy;
use chopin_server::store::MemoryStore;
use chopin_server::Runtime;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000_000;
const POLLS: &str = "POST /login/oauth/access_token";

struct Server {
    fake: FakeGitHub,
    clock: Arc<ManualClock>,
    base: String,
    store: MemoryStore,
    _data: tempfile::TempDir,
    running: Option<Running>,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    /// The value a `Set-Cookie` header gives cookie `name`, with that header's attributes.
    fn set_cookie(&self, name: &str) -> Option<(String, String)> {
        self.headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                let (pair, _) = v.split_once(';').unwrap_or((v, ""));
                let value = pair.strip_prefix(&format!("{name}="))?;
                Some((value.to_owned(), v.to_owned()))
            })
    }
}

impl Server {
    async fn start(mode: AuthMode) -> Server {
        Self::start_with(mode, |_| {}).await
    }

    /// [`Server::start`] with `adjust` applied to the configuration last.
    async fn start_with(mode: AuthMode, adjust: impl FnOnce(&mut Config)) -> Server {
        let fake = FakeGitHub::new();
        fake.add_user("mona", 1001).add_user("hubot", 1002);
        let github = fake.serve_tcp().await.expect("fake GitHub serves");
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind loopback");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let data = tempfile::tempdir().expect("temp dir");
        let mut config = Config::defaults_with_data_dir(data.path().to_path_buf());
        config.auth_mode = mode;
        config.github_api_url = github.clone();
        config.github_web_url = github;
        config.github_app_client_id = Some(DEFAULT_CLIENT_ID.into());
        config.app_origin = base.clone();
        adjust(&mut config);
        let clock = Arc::new(ManualClock::new(T0));
        let store = MemoryStore::new();
        let running = app::start(
            config,
            Arc::new(store.clone()),
            Runtime {
                clock: clock.clone(),
                entropy: Arc::new(OsEntropy),
                connector: Arc::new(TcpConnector),
            },
        )
        .await
        .expect("server starts");
        let router = running.router();
        tokio::spawn(async move {
            chopin_server::serve(listener, router, std::future::pending()).await
        });
        Server {
            fake,
            clock,
            base,
            store,
            _data: data,
            running: Some(running),
        }
    }

    /// Sends a request with `cookie` as the whole `Cookie` header and `origin` as `Origin`.
    async fn send(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        origin: Option<&str>,
    ) -> Answer {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header(http::header::COOKIE, cookie);
        }
        if let Some(origin) = origin {
            request = request.header(http::header::ORIGIN, origin);
        }
        let request = request.body(Bytes::new()).expect("request");
        let response = connector::send(&TcpConnector, request)
            .await
            .expect("server answers");
        let body = if response.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&response.body).unwrap_or_else(|_| {
                panic!(
                    "{path} answered JSON: {}",
                    String::from_utf8_lossy(&response.body)
                )
            })
        };
        Answer {
            status: response.status,
            headers: response.headers,
            body,
        }
    }

    /// A POST from the server's own pages.
    async fn post(&self, path: &str, cookie: Option<&str>) -> Answer {
        self.send(Method::POST, path, cookie, Some(&self.base))
            .await
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        self.send(Method::GET, path, cookie, None).await
    }

    /// Starts an attempt; returns the `Cookie` header that carries it and the user code.
    async fn start_attempt(&self) -> (String, String) {
        let answer = self.post("/auth/device", None).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let (id, _) = answer
            .set_cookie("chopin_device")
            .expect("an attempt cookie");
        let user_code = answer.body["userCode"]
            .as_str()
            .expect("a user code")
            .to_owned();
        (format!("chopin_device={id}"), user_code)
    }

    /// Steps past GitHub's 5 s interval and asks where the attempt stands.
    async fn poll(&self, cookie: &str) -> Value {
        self.clock.advance(5_000);
        let answer = self.get("/auth/device", Some(cookie)).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        answer.body
    }

    /// Signs `login` in from start to finish; returns the `complete` answer.
    async fn sign_in(&self, login: &str) -> Answer {
        let (cookie, user_code) = self.start_attempt().await;
        self.fake.approve_device(&user_code, login);
        assert_eq!(self.poll(&cookie).await["status"], "approved");
        self.post("/auth/device/complete", Some(&cookie)).await
    }
}

#[tokio::test]
async fn an_approved_device_code_signs_the_browser_in() {
    let server = Server::start(AuthMode::Local).await;
    let started = server.post("/auth/device", None).await;
    assert_eq!(started.status, StatusCode::OK, "{}", started.body);
    let verification_uri = started.body["verificationUri"].as_str().unwrap();
    assert!(
        verification_uri.ends_with("/login/device"),
        "{verification_uri}"
    );
    assert_eq!(
        started.body,
        json!({
            "userCode": "FAKE-0001",
            "verificationUri": verification_uri,
            "expiresIn": 900,
            "interval": 5,
        }),
        "the private device code stays on the server"
    );
    let (id, attributes) = started.set_cookie("chopin_device").expect("attempt cookie");
    assert!(attributes.contains("HttpOnly"), "{attributes}");
    assert!(attributes.contains("SameSite=Strict"), "{attributes}");
    let cookie = format!("chopin_device={id}");

    // Within GitHub's interval the server does not ask GitHub.
    let early = server.get("/auth/device", Some(&cookie)).await;
    assert_eq!(early.body, json!({ "status": "pending" }));
    assert_eq!(server.fake.request_count(POLLS), 0);
    assert_eq!(server.poll(&cookie).await, json!({ "status": "pending" }));
    assert_eq!(server.fake.request_count(POLLS), 1);

    server.fake.approve_device("FAKE-0001", "mona");
    let within = server.get("/auth/device", Some(&cookie)).await;
    assert_eq!(within.body["status"], "pending", "one poll per interval");
    assert_eq!(server.fake.request_count(POLLS), 1);
    assert_eq!(server.poll(&cookie).await, json!({ "status": "approved" }));

    let done = server.post("/auth/device/complete", Some(&cookie)).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(done.body, json!({ "status": "signed-in", "login": "mona" }));
    let (session, attributes) = done.set_cookie("chopin_session").expect("session cookie");
    assert!(attributes.contains("HttpOnly"), "{attributes}");
    assert!(attributes.contains("Path=/"), "{attributes}");

    let me = server
        .get("/api/session", Some(&format!("chopin_session={session}")))
        .await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    assert_eq!(me.body["login"], "mona");

    // The attempt is used up.
    let after = server.get("/auth/device", Some(&cookie)).await;
    assert_eq!(after.body["status"], "cancelled");
}

#[tokio::test]
async fn slow_down_adds_five_seconds_to_the_polling_interval() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    server.fake.slow_down_device(&user_code);
    assert_eq!(server.poll(&cookie).await["status"], "pending");
    assert_eq!(server.fake.request_count(POLLS), 1);

    server.fake.approve_device(&user_code, "mona");
    // 5 s later is too soon now: the interval is 10 s.
    assert_eq!(server.poll(&cookie).await["status"], "pending");
    assert_eq!(server.fake.request_count(POLLS), 1);
    assert_eq!(server.poll(&cookie).await["status"], "approved");
    assert_eq!(server.fake.request_count(POLLS), 2);
}

#[tokio::test]
async fn a_denied_device_code_reports_denied_and_cannot_complete() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    server.fake.deny_device(&user_code);
    let status = server.poll(&cookie).await;
    assert_eq!(status["status"], "denied", "{status}");
    let refused = server.post("/auth/device/complete", Some(&cookie)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.body["status"], "denied");
    assert!(refused.set_cookie("chopin_session").is_none());
}

#[tokio::test]
async fn an_expired_device_code_reports_expired() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    server.fake.expire_device(&user_code);
    let status = server.poll(&cookie).await;
    assert_eq!(status["status"], "expired", "{status}");
    // Expired is final: the server does not ask GitHub again.
    assert_eq!(server.poll(&cookie).await["status"], "expired");
    assert_eq!(server.fake.request_count(POLLS), 1);
}

#[tokio::test]
async fn complete_before_approval_is_refused_and_keeps_the_attempt() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    let early = server.post("/auth/device/complete", Some(&cookie)).await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.body);
    assert_eq!(early.body["status"], "pending");
    assert_eq!(early.body["error"], "not-approved");

    server.fake.approve_device(&user_code, "mona");
    assert_eq!(server.poll(&cookie).await["status"], "approved");
    let done = server.post("/auth/device/complete", Some(&cookie)).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
}

#[tokio::test]
async fn a_cancelled_attempt_reports_cancelled_and_stops_polling() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    let cancelled = server.post("/auth/device/cancel", Some(&cookie)).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    assert_eq!(cancelled.body, json!({ "status": "cancelled" }));
    let (cleared, _) = cancelled
        .set_cookie("chopin_device")
        .expect("the attempt cookie is cleared");
    assert_eq!(cleared, "");

    // Approving on GitHub afterwards signs nobody in.
    server.fake.approve_device(&user_code, "mona");
    assert_eq!(server.poll(&cookie).await, json!({ "status": "cancelled" }));
    assert_eq!(server.fake.request_count(POLLS), 0);
    let refused = server.post("/auth/device/complete", Some(&cookie)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.body["status"], "cancelled");
}

#[tokio::test]
async fn a_missing_or_unknown_attempt_cookie_reports_cancelled_never_401() {
    let server = Server::start(AuthMode::Local).await;
    for cookie in [None, Some("chopin_device=no-such-attempt")] {
        let answer = server.get("/auth/device", cookie).await;
        assert_eq!(answer.status, StatusCode::OK, "{cookie:?}");
        assert_eq!(answer.body, json!({ "status": "cancelled" }), "{cookie:?}");
        let complete = server.post("/auth/device/complete", cookie).await;
        assert_ne!(complete.status, StatusCode::UNAUTHORIZED, "{cookie:?}");
        assert_eq!(complete.body["status"], "cancelled", "{cookie:?}");
        let cancel = server.post("/auth/device/cancel", cookie).await;
        assert_eq!(cancel.status, StatusCode::OK, "{cookie:?}");
    }
}

#[tokio::test]
async fn state_changing_routes_refuse_a_foreign_or_missing_origin() {
    let server = Server::start(AuthMode::Local).await;
    let (cookie, user_code) = server.start_attempt().await;
    server.fake.approve_device(&user_code, "mona");
    assert_eq!(server.poll(&cookie).await["status"], "approved");
    for path in [
        "/auth/device",
        "/auth/device/complete",
        "/auth/device/cancel",
    ] {
        for origin in [Some("http://evil.example"), None] {
            let answer = server.send(Method::POST, path, Some(&cookie), origin).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{path} {origin:?}");
            assert_eq!(answer.body["error"], "foreign-origin", "{path} {origin:?}");
        }
    }
    assert_eq!(
        server.fake.request_count("POST /login/device/code"),
        1,
        "a refused start does not ask GitHub"
    );
    // Nothing was cancelled or completed by the refused requests.
    let answer = server.get("/auth/device", Some(&cookie)).await;
    assert_eq!(answer.body["status"], "approved");
}

#[tokio::test]
async fn a_second_account_is_refused_naming_both_logins() {
    let server = Server::start(AuthMode::Local).await;
    let first = server.sign_in("mona").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);

    let second = server.sign_in("hubot").await;
    assert_eq!(second.status, StatusCode::FORBIDDEN, "{}", second.body);
    assert_eq!(second.body["error"], "another-account");
    let words = second.body["message"].as_str().unwrap();
    assert!(
        words.contains("@mona") && words.contains("@hubot"),
        "{words}"
    );
    assert!(second.set_cookie("chopin_session").is_none());

    // The server's own account may sign in again, from another browser.
    let again = server.sign_in("mona").await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
}

#[tokio::test]
async fn an_account_admission_refuses_is_not_signed_in_and_does_not_own_the_server() {
    let server = Server::start_with(AuthMode::Local, |config| {
        config.github_allowed_users = ["hubot".to_owned()].into();
    })
    .await;
    let refused = server.sign_in("mona").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(refused.body["error"], "not-admitted");
    let admitted = server.sign_in("hubot").await;
    assert_eq!(admitted.status, StatusCode::OK, "{}", admitted.body);
}

#[tokio::test]
async fn device_routes_answer_404_under_hosted_mode() {
    let server = Server::start(AuthMode::Hosted).await;
    for (method, path) in [
        (Method::POST, "/auth/device"),
        (Method::GET, "/auth/device"),
        (Method::POST, "/auth/device/complete"),
        (Method::POST, "/auth/device/cancel"),
    ] {
        let answer = server
            .send(method.clone(), path, None, Some(&server.base))
            .await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(answer.body["error"], "local-mode-only", "{method} {path}");
        let words = answer.body["message"].as_str().unwrap();
        assert!(words.contains("AUTH_MODE=local"), "{words}");
    }
    assert!(server.fake.requests().is_empty(), "GitHub was not asked");
}

#[tokio::test]
async fn ho_18_local_mode_is_never_handed_over_its_holds_stay_in_memory() {
    use chopin_fixtures::agent::{connect, Event, Upgrade};
    use chopin_fixtures::github::Permission;
    use chopin_protocol::agent::{ErrorCode, ServerMessage};
    use chopin_server::store::{DocumentStore, HoldStore, NewDocument};

    let mut server = Server::start(AuthMode::Local).await;
    server.fake.add_repo("octo", "plans");
    server
        .fake
        .grant("octo", "plans", "mona", Permission::Write);
    let answer = server.sign_in("mona").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let doc = uuid::Uuid::from_u128(0x10ca1);
    server
        .store
        .create_document(&NewDocument {
            id: doc,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "notes".into(),
            title: "Notes".into(),
            created_at_ms: T0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let host = server.base.trim_start_matches("http://").to_owned();
    let token = server.fake.issue_token("mona");
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut agent = connect(stream, &Upgrade::new(host.clone(), Some(&token)))
        .await
        .unwrap();
    let attached = agent
        .attach(&doc.to_string(), &["resumable-sessions"])
        .await
        .unwrap();
    assert!(
        matches!(attached, ServerMessage::Attached(_)),
        "{attached:?}"
    );

    let heard = tokio::spawn(async move {
        let mut frames = Vec::new();
        while let Ok(Event::Message(m)) = agent.recv().await {
            frames.push(m);
        }
        frames
    });
    let stopped = server.running.take().unwrap().stop().await;
    assert!(stopped.released);
    let frames = tokio::time::timeout(std::time::Duration::from_secs(10), heard)
        .await
        .unwrap()
        .unwrap();
    match frames.last() {
        Some(ServerMessage::Error(e)) => {
            assert_eq!(e.code, ErrorCode::GoingAway);
            assert_eq!(e.handover_ms, None, "nothing is kept for the next process");
        }
        other => panic!("expected going-away, got {other:?}"),
    }
    assert!(server.store.link_holds().await.unwrap().is_empty());
}
