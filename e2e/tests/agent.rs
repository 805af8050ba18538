//! The agent connection against the spawned `chopin` binary on real sockets, on SQLite and on
//! PostgreSQL: every HTTP refusal before the upgrade, every refusal and close code after it, the
//! 2 MiB frame limit, strict frames, and a browser sign-in through the (fake) GitHub OAuth flow.

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, ConnectError, Upgrade};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::{ServerMessage, MAX_FRAME_BYTES};
use serde_json::{json, Value};

struct Fixture {
    server: Server,
    launch: Launch,
    github: FakeGitHub,
    origin: String,
    host: String,
    mona: String,
    hubot: String,
    eve: String,
    backend: Backend,
}

async fn start(backend: Backend) -> Fixture {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1002)
        .add_user("eve", 1003);
    github.add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    github.grant("octo", "plans", "eve", Permission::Admin);
    let (mona, hubot, eve) = (
        github.issue_token("mona"),
        github.issue_token("hubot"),
        github.issue_token("eve"),
    );
    let github_url = github.serve_tcp().await.expect("fake GitHub serves");
    let mut launch = Launch::hosted(&github_url)
        // eve is verified by GitHub but not admitted here.
        .env("GITHUB_ALLOWED_USERS", "mona,hubot");
    launch = launch.on(&backend);
    let server = launch.start().await;
    // A restart keeps the port and origin (sealed sign-ins are bound to the origin).
    let launch = launch.at(&server);
    let (host, origin) = (server.host(), server.origin());
    Fixture {
        server,
        launch,
        github,
        host,
        origin,
        mona,
        hubot,
        eve,
        backend,
    }
}

impl Fixture {
    async fn connect(&self, up: &Upgrade) -> Result<AgentClient, ConnectError> {
        let stream = tokio::net::TcpStream::connect(&self.host).await.unwrap();
        connect(stream, up).await
    }

    fn upgrade(&self, token: Option<&str>) -> Upgrade {
        Upgrade::new(self.host.clone(), token)
    }

    async fn refused_status(&self, up: &Upgrade) -> (u16, String) {
        match self.connect(up).await {
            Err(ConnectError::Refused { status, body }) => (status, body),
            other => panic!("expected an HTTP refusal, got {other:?}"),
        }
    }

    async fn create_document(&self, token: &str, title: &str) -> Value {
        let response = reqwest::Client::new()
            .post(self.server.url("/api/repositories/octo/plans/documents"))
            .bearer_auth(token)
            .json(&json!({ "title": title }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json().await.unwrap()
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(self.server.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn finish(self) {
        let (status, log) = self.server.stop().await;
        assert!(status.success(), "{log}");
        for token in [&self.mona, &self.hubot, &self.eve] {
            assert!(!log.contains(token.as_str()), "a token was logged:\n{log}");
        }
        if let Backend::Postgres(db) = &self.backend {
            chopin_fixtures::pg::shared_postgres()
                .drop_database(db)
                .await
                .unwrap();
        }
    }
}

fn refusal(message: &ServerMessage) -> (String, Option<String>) {
    match message {
        ServerMessage::Refused(r) => (r.reason.to_string(), r.holder.clone()),
        other => panic!("expected refused, got {other:?}"),
    }
}

async fn every_http_refusal(f: &Fixture) {
    // AC-11: no subprotocol → 426, also for a plain GET.
    let (status, body) = f
        .refused_status(&f.upgrade(Some(&f.mona)).subprotocol(None))
        .await;
    assert_eq!(status, 426, "{body}");
    assert!(body.contains("chopin.agent.v1"), "{body}");
    let plain = reqwest::get(f.server.url("/api/v1/agent")).await.unwrap();
    assert_eq!(plain.status(), 426);
    // AC-12: missing or bad bearer → 401; refused account → 403; foreign Origin → 403;
    // GitHub outage → 503.
    assert_eq!(f.refused_status(&f.upgrade(None)).await.0, 401);
    assert_eq!(f.refused_status(&f.upgrade(Some("ghp_nope"))).await.0, 401);
    let (status, body) = f.refused_status(&f.upgrade(Some(&f.eve))).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("@eve"), "{body}");
    let (status, body) = f
        .refused_status(&f.upgrade(Some(&f.mona)).origin("https://evil.example"))
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("foreign-origin"), "{body}");
    f.github.set_outage(true);
    // A token not seen before (admission caches verdicts 30 s).
    let fresh = f.github.issue_token("mona");
    assert_eq!(f.refused_status(&f.upgrade(Some(&fresh))).await.0, 503);
    f.github.set_outage(false);
    // The server's own origin is fine.
    let ok = f.connect(&f.upgrade(Some(&f.mona)).origin(&f.origin)).await;
    assert!(ok.is_ok(), "{ok:?}");
}

async fn every_close_code(f: &Fixture) {
    let doc = f.create_document(&f.mona, "Quarterly field notes").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let url = doc["url"].as_str().unwrap().to_owned();
    assert_eq!(url, "/documents/octo/plans/quarterly-field-notes");

    // 4401: no live browser sign-in for mona yet.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = c.attach(&id, &[]).await.unwrap();
    assert_eq!(refusal(&r).0, "sign-in-required");
    assert_eq!(c.expect_close().await.unwrap().0, 4401);

    let cookie = sign_in(&f.server, &f.github, "mona").await;

    // 4426: an unsupported version.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = c.attach_version(2, &id).await.unwrap();
    assert_eq!(refusal(&r).0, "unsupported-version");
    assert_eq!(c.expect_close().await.unwrap().0, 4426);

    // 4404: a missing document, by id and by URL.
    for missing in [
        "00000000-0000-4000-8000-000000000000",
        "/documents/octo/plans/nope",
    ] {
        let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
        let r = c.attach(missing, &[]).await.unwrap();
        assert_eq!(refusal(&r).0, "document-not-found");
        assert_eq!(c.expect_close().await.unwrap().0, 4404);
    }

    // 4403: hubot can read but not push.
    let mut c = f.connect(&f.upgrade(Some(&f.hubot))).await.unwrap();
    let r = c.attach(&url, &[]).await.unwrap();
    assert_eq!(refusal(&r).0, "no-write-access");
    assert_eq!(c.expect_close().await.unwrap().0, 4403);

    // Attached, by canonical URL (absolute works too).
    let mut owner = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let absolute = format!("{}{}", f.origin, url);
    match owner.attach(&absolute, &[]).await.unwrap() {
        ServerMessage::Attached(a) => {
            assert_eq!(a.document_id, id);
            assert_eq!(a.login, "mona");
            assert_eq!(a.generation, Some(1));
        }
        other => panic!("expected attached, got {other:?}"),
    }

    // 4409: a second client, naming the holder.
    let mut second = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = second.attach(&id, &[]).await.unwrap();
    assert_eq!(
        refusal(&r),
        ("planner-attached".into(), Some("mona".into()))
    );
    assert_eq!(second.expect_close().await.unwrap().0, 4409);

    // 4410: a writer resets the Planner; the link closes at once.
    let (status, body) = f
        .post(
            &format!("/api/documents/{id}/planner/reset"),
            &f.mona,
            json!({}),
        )
        .await;
    assert_eq!((status, &body["released"]), (200, &json!(true)), "{body}");
    let (code, reason) = owner.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (4410, "planner-released"));

    // Attach again; sign-out closes the link at once (4401).
    let mut owner = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = owner.attach(&id, &[]).await.unwrap();
    assert!(matches!(r, ServerMessage::Attached(_)), "{r:?}");
    let response = reqwest::Client::new()
        .post(f.server.url("/auth/logout"))
        .header("cookie", &cookie)
        .header("origin", &f.origin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (code, reason) = owner.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (4401, "sign-in-required"));

    // Sign in again; archiving closes the link (4404) and a later attach is refused 4404.
    sign_in(&f.server, &f.github, "mona").await;
    let mut owner = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = owner.attach(&id, &[]).await.unwrap();
    assert!(matches!(r, ServerMessage::Attached(_)), "{r:?}");
    let (status, _) = f
        .post(
            &format!("/api/documents/{id}/archive"),
            &f.mona,
            json!({ "archived": true }),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(owner.expect_close().await.unwrap().0, 4404);
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = c.attach(&id, &[]).await.unwrap();
    assert_eq!(refusal(&r).0, "document-not-found");
    assert_eq!(c.expect_close().await.unwrap().0, 4404);
}

async fn strict_frames(f: &Fixture) {
    // Malformed JSON as the first frame: an error naming it, then 1008 with the reason.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    c.send_text("{\"type\": \"attach\", ").await.unwrap();
    let (code, reason) = c.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (1008, "malformed-json"));
    match c.received() {
        [ServerMessage::Error(e)] => assert!(e.message.contains("malformed JSON"), "{e:?}"),
        other => panic!("expected one error frame, got {other:?}"),
    }
    // A binary frame: 1008.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    c.send_binary(vec![1, 2, 3]).await.unwrap();
    assert_eq!(
        c.expect_close().await.unwrap(),
        (1008, "binary-frame".into())
    );
    // Something other than attach first: 1008 out-of-order.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    c.send_text(r#"{"type":"detach"}"#).await.unwrap();
    assert_eq!(
        c.expect_close().await.unwrap(),
        (1008, "out-of-order".into())
    );
    // Exactly 2 MiB is read (and judged on its content); one byte more is 1009.
    let padding = |total: usize| {
        let head = r#"{"type":"attach","version":1,"document":""#;
        let tail = r#""}"#;
        format!(
            "{head}{}{tail}",
            "x".repeat(total - head.len() - tail.len())
        )
    };
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    c.send_text(padding(MAX_FRAME_BYTES)).await.unwrap();
    let r = c.recv_message().await.unwrap();
    assert_eq!(refusal(&r).0, "document-not-found");
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    c.send_text(padding(MAX_FRAME_BYTES + 1)).await.unwrap();
    let (code, reason) = c.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (1009, "frame-too-large"));
    match c.received() {
        [ServerMessage::Error(e)] => assert!(e.message.contains("2097153 bytes"), "{e:?}"),
        other => panic!("expected one error frame, got {other:?}"),
    }
}

/// A restart keeps documents and browser sign-ins (their credentials sealed in the database),
/// but no link: the returning browser's cookie restores its sign-in, after which its account can
/// attach again.
async fn survives_restart(mut f: Fixture) -> Fixture {
    let cookie = sign_in(&f.server, &f.github, "mona").await;
    let doc = f.create_document(&f.mona, "After the restart").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let (status, log) = f.server.stop().await;
    assert!(status.success(), "{log}");
    f.server = f.launch.start().await;

    // No browser has come back yet: no live sign-in in this process.
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    let r = c.attach(&id, &[]).await.unwrap();
    assert_eq!(refusal(&r).0, "sign-in-required");
    // The browser returns with its cookie: restored from the sealed credential.
    let session = reqwest::Client::new()
        .get(f.server.url("/api/session"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200);
    let body: Value = session.json().await.unwrap();
    assert_eq!(body["login"], "mona");
    let by_slug = reqwest::Client::new()
        .get(
            f.server
                .url("/api/repositories/octo/plans/documents/after-the-restart"),
        )
        .bearer_auth(&f.mona)
        .send()
        .await
        .unwrap();
    assert_eq!(by_slug.status(), 200, "the document survived");
    let mut c = f.connect(&f.upgrade(Some(&f.mona))).await.unwrap();
    match c.attach(&id, &[]).await.unwrap() {
        ServerMessage::Attached(a) => assert_eq!(a.generation, Some(1)),
        other => panic!("expected attached, got {other:?}"),
    }
    // A forged cookie for the same login is not restored.
    let forged = format!("{}0", cookie);
    let session = reqwest::Client::new()
        .get(f.server.url("/api/session"))
        .header("cookie", forged)
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 401);
    f
}

async fn whole_run(backend: Backend) {
    let f = start(backend).await;
    every_http_refusal(&f).await;
    every_close_code(&f).await;
    strict_frames(&f).await;
    let f = survives_restart(f).await;
    f.finish().await;
}

#[tokio::test]
async fn agent_connection_on_sqlite() {
    whole_run(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn agent_connection_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    whole_run(Backend::Postgres(db)).await;
}
