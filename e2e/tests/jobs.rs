//! Background jobs over the release binary, on SQLite and PostgreSQL: a document's description,
//! asked for when it is opened, waits as a stored row while no client is attached, survives a
//! `kill -9`, and runs once on the client that attaches after the restart; an attempt the
//! process was killed in the middle of is settled `interrupted` by the next process and never
//! run again (JOB-01, JOB-09, JOB-12, RT-06, OWN-18).

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, ok};
use chopin_protocol::agent::{
    ClientMessage, ServerMessage, SessionMode, Started, TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

async fn jobs(server: &Server, id: &str, cookie: &str) -> Vec<Value> {
    let response = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}/jobs")))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["jobs"].as_array().unwrap().clone()
}

/// Waits (at most 20 s) until the document's jobs are in `states`, newest first.
async fn jobs_in(server: &Server, id: &str, cookie: &str, states: &[&str]) -> Vec<Value> {
    for _ in 0..200 {
        let now = jobs(server, id, cookie).await;
        if now
            .iter()
            .map(|j| j["state"].as_str().unwrap())
            .eq(states.iter().copied())
        {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "jobs never became {states:?}: {:?}",
        jobs(server, id, cookie).await
    );
}

async fn open_room(server: &Server, id: &str, cookie: &str) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    room.next_of_type("session:hello").await.unwrap();
    room
}

async fn attach(server: &Server, token: &str, id: &str) -> AgentClient {
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(server.host(), Some(token)))
        .await
        .unwrap();
    let answer = client.attach(id, &[]).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    client
}

async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(20), client.recv())
        .await
        .expect("a frame within 20 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

/// The worker session the server starts on `client`, started: its turn's id and prompt.
async fn worker_turn(client: &mut AgentClient) -> (String, String) {
    let session = loop {
        match next(client).await {
            ServerMessage::Start(start) => {
                assert_eq!(start.mode, SessionMode::Isolated);
                break start.session_id;
            }
            ServerMessage::Destroy(_) => {}
            other => panic!("expected a worker's start, got {other:?}"),
        }
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session,
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(turn) => (turn.turn_id, turn.prompt),
        other => panic!("expected the worker's turn, got {other:?}"),
    }
}

async fn description_survives_kill_9(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url)
        .on(&backend)
        .env("BACKGROUND_JOBS", "on");
    let server = launch.clone().start().await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Rollout").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let mcp = chopin_fixtures::mcp::connect(&server.url("/mcp"), &mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": doc["url"], "planRevision": 0, "source": "# Rollout\n\nCanary first, then everyone.\n", "idempotencyKey": "e2e-jobs-1"}),
    )
    .await);
    drop(mcp);
    // Opening asks for a description; with no client attached it waits, stored (RT-06).
    let room = open_room(&server, &id, &cookie).await;
    let waiting = jobs_in(&server, &id, &cookie, &["pending"]).await;
    assert_eq!(waiting[0]["type"], "document-summary");
    assert_eq!(waiting[0]["attempts"], 0);
    drop(room);
    let again = launch.clone().at(&server);
    server.crash().await;

    // After the restart the stored job runs on the client that attaches, once.
    let server = again.clone().start().await;
    // Attaching needs a browser sign-in made since this process started.
    let cookie = sign_in(&server, &github, "mona").await;
    let mut client = attach(&server, &mona, &id).await;
    let (turn, prompt) = worker_turn(&mut client).await;
    assert!(prompt.contains("Canary first, then everyone."), "{prompt}");
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: Some(json!({ "description": "Plan for a canary rollout" })),
            message: None,
        }))
        .await
        .unwrap();
    let done = jobs_in(&server, &id, &cookie, &["completed"]).await;
    assert_eq!(done[0]["attempts"], 1);
    let shown: Value = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["description"]["text"], "Plan for a canary rollout");

    // A change of text, opened again: a new attempt starts, and the process is killed under it.
    let mcp = chopin_fixtures::mcp::connect(&server.url("/mcp"), &mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": doc["url"], "planRevision": 1, "source": "# Rollout\n\nEveryone at once.\n", "idempotencyKey": "e2e-jobs-2"}),
    )
    .await);
    drop(mcp);
    let _room = open_room(&server, &id, &cookie).await;
    worker_turn(&mut client).await;
    jobs_in(&server, &id, &cookie, &["running", "completed"]).await;
    server.crash().await;
    drop(client);

    // The next process settles it interrupted and never runs it again; the last description
    // stays.
    let server = again.start().await;
    let cookie = sign_in(&server, &github, "mona").await;
    let mut client = attach(&server, &mona, &id).await;
    let settled = jobs_in(&server, &id, &cookie, &["failed", "completed"]).await;
    assert_eq!(settled[0]["reason"], "interrupted");
    assert_eq!(settled[0]["attempts"], 1);
    let quiet = tokio::time::timeout(Duration::from_millis(2_000), async {
        loop {
            match client.recv().await {
                Ok(Event::Message(ServerMessage::Start(start))) => return start,
                Ok(Event::Message(_)) => {}
                other => panic!("the link ended: {other:?}"),
            }
        }
    })
    .await;
    assert!(
        quiet.is_err(),
        "the interrupted attempt was run again: {quiet:?}"
    );
    let shown: Value = reqwest::Client::new()
        .get(server.url(&format!("/api/documents/{id}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["description"]["text"], "Plan for a canary rollout");
}

#[tokio::test]
async fn a_description_job_survives_kill_9_and_settles_once_on_sqlite() {
    description_survives_kill_9(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn a_description_job_survives_kill_9_and_settles_once_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    description_survives_kill_9(Backend::Postgres(db)).await;
}
