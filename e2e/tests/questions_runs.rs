//! A question and a workflow run end to end over the spawned binary, on SQLite and on
//! PostgreSQL: a scripted Planner client asks a confirmation, a writer answers it from the
//! room and the client hears `input-result` once; the client reports a run with its stages,
//! the room shows the card and the stages route serves them; the client goes for good, which
//! shows its run stopped (RT-11), and after a restart it reads `stopped` with its stages kept
//! (SES-13).

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::{
    ClientMessage, Confirm, HostInput, InputAnswer, InputRequest, InputStatus, Run, RunStatus,
    Runs, ServerMessage, Stage, StageStatus, Started,
};
use serde_json::{json, Value};

async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(15), client.recv())
        .await
        .expect("a frame within 15 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

async fn next_of(room: &mut BrowserSocket, kind: &str) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(15), room.recv_json())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within 15 s"))
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == kind => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn get_json(server: &Server, cookie: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(server.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn whole_run(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url).on(&backend);
    let server = launch.start().await;
    let launch = launch.at(&server);
    let (host, origin) = (server.host(), server.origin());
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Rollout").await;
    let id = doc["id"].as_str().unwrap().to_owned();

    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona)))
        .await
        .unwrap();
    let attached = client.attach(&id, &["run-stage-deltas"]).await.unwrap();
    let ServerMessage::Attached(attached) = attached else {
        panic!("{attached:?}")
    };
    assert!(
        attached
            .features
            .iter()
            .any(|f| f.as_str() == "run-stage-deltas"),
        "{attached:?}"
    );
    let room_path = format!("/api/documents/{id}/room");
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut room = BrowserSocket::connect(stream, &host, &room_path, Some(&cookie), Some(&origin))
        .await
        .unwrap();
    next_of(&mut room, "session:planner").await;
    room.send_json(
        &json!({ "type": "chat:send", "requestId": "r-1", "text": "@chopin roll it out" }),
    )
    .await
    .unwrap();
    let session = match next(&mut client).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    let turn = match next(&mut client).await {
        ServerMessage::Turn(t) => t.turn_id,
        other => panic!("expected turn, got {other:?}"),
    };

    // One question: a confirmation, answered Yes from the room.
    client
        .send(&ClientMessage::InputRequest(InputRequest {
            session_id: session.clone(),
            request_id: "q-1".into(),
            turn_id: Some(turn.clone()),
            run_id: None,
            block: None,
            input: HostInput::Confirm(Confirm {
                title: "Deploy the canary to eu-west?".into(),
                message: None,
            }),
        }))
        .await
        .unwrap();
    let card = loop {
        let source = get_json(&server, &cookie, &format!("/api/documents/{id}/source")).await;
        let text = source["source"].as_str().unwrap_or_default().to_owned();
        if let Some(line) = text.lines().find(|l| l.starts_with("id: q-")) {
            break line.trim_start_matches("id: ").to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    room.send_json(
        &json!({ "type": "decision:answer", "requestId": "a-1", "decision": card, "options": [0] }),
    )
    .await
    .unwrap();
    let answered = next_of(&mut room, "decision:answered").await;
    assert_eq!(answered["decision"], card.as_str());
    let result = loop {
        if let ServerMessage::InputResult(r) = next(&mut client).await {
            break r;
        }
    };
    assert_eq!(result.status, InputStatus::Answered);
    assert!(matches!(result.answer, Some(InputAnswer::Confirm(c)) if c.confirmed));

    // One run, reported in deltas.
    let stage = |i: usize, status| Stage {
        stage_id: format!("st-{i}"),
        name: format!("stage {i}"),
        status,
        parent_stage_id: None,
        duration_ms: Some(1_000),
    };
    for stages in [
        vec![
            stage(0, StageStatus::Completed),
            stage(1, StageStatus::Running),
        ],
        vec![
            stage(1, StageStatus::Completed),
            stage(2, StageStatus::Running),
        ],
    ] {
        client
            .send(&ClientMessage::Runs(Runs {
                session_id: session.clone(),
                runs: vec![Run {
                    run_id: "run-1".into(),
                    name: "canary-rollout".into(),
                    status: RunStatus::Running,
                    root_run_id: None,
                    elapsed_ms: Some(3_000),
                    stages,
                    omitted_stages: None,
                }],
            }))
            .await
            .unwrap();
        next_of(&mut room, "run:card").await;
    }
    let stages_path = format!("/api/documents/{id}/runs/run-1/stages");
    let page = get_json(&server, &cookie, &stages_path).await;
    assert_eq!(page["total"], 3, "{page}");
    assert_eq!(page["stages"][1]["status"], "completed", "{page}");

    // The client goes for good, which shows its live run stopped (RT-11); the server stops, and
    // after the restart the run still reads stopped, stages kept (SES-13).
    drop(client);
    drop(room);
    // The server notices the client has gone before it is stopped: a stop that came first would
    // be a cut, which keeps the run live for the client's return (a deploy's hand-over).
    let runs_path = format!("/api/documents/{id}/runs");
    for _ in 0..500 {
        let runs = get_json(&server, &cookie, &runs_path).await;
        if runs["runs"][0]["status"] == "stopped" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _) = server.stop().await;
    assert!(status.success());
    let server = launch.start().await;
    let runs = get_json(&server, &cookie, &runs_path).await;
    assert_eq!(runs["runs"][0]["status"], "stopped", "{runs}");
    let page = get_json(&server, &cookie, &stages_path).await;
    assert_eq!(page["total"], 3, "{page}");
    server.stop().await;
    if let Backend::Postgres(db) = &backend {
        chopin_fixtures::pg::shared_postgres()
            .drop_database(db)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_question_and_a_run_on_sqlite() {
    whole_run(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn a_question_and_a_run_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    whole_run(Backend::Postgres(db)).await;
}
