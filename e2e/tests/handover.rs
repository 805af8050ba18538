//! A deploy with a resuming Planner client, over the spawned binary on SQLite and PostgreSQL:
//! SIGTERM while a client is attached with a session kept for a live run; the link hears
//! `going-away` with `handoverMs` and 1001; the restarted binary rebuilds the hold, and the
//! client attaches again, is told its kept session, sends `resume` and gets it back — its next
//! turn comes on that session with no `start`. The same with the client returning only after the
//! window: the hold is then disconnected, and the client still takes its session back. And a
//! client that dropped with a question open gets the answer given while it was away after the
//! restart, once (HO-16), with no question waited on (HO-15).

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::{
    ClientMessage, ClientResume, Confirm, ErrorCode, HostInput, InputAnswer, InputRequest,
    InputStatus, Run, RunStatus, Runs, ServerMessage, Started, TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

/// A short window, so the test can outwait it.
const WINDOW_MS: u64 = 3_000;

async fn next(client: &mut AgentClient) -> Event {
    tokio::time::timeout(Duration::from_secs(15), client.recv())
        .await
        .expect("a frame within 15 s")
        .unwrap()
}

async fn message(client: &mut AgentClient) -> ServerMessage {
    match next(client).await {
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

async fn room(server: &Server, id: &str, cookie: &str) -> BrowserSocket {
    let host = server.host();
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &host,
        &format!("/api/documents/{id}/room"),
        Some(cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    next_of(&mut room, "session:planner").await;
    room
}

async fn client(server: &Server, token: &str) -> AgentClient {
    let host = server.host();
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    connect(stream, &Upgrade::new(host, Some(token)))
        .await
        .unwrap()
}

/// The binary over `backend`, hosted against the fake GitHub at `github_url`, with a short
/// hand-over window.
fn launch_on(backend: &Backend, github_url: &str) -> Launch {
    Launch::hosted(github_url)
        .on(backend)
        .env("HANDOVER_PLANNER_WINDOW_MS", WINDOW_MS.to_string())
}

/// mona says `text` in the room; the attached client answers the session's `start`. The
/// session and turn ids.
async fn start_turn(
    agent: &mut AgentClient,
    tab: &mut BrowserSocket,
    text: &str,
) -> (String, String) {
    tab.send_json(&json!({ "type": "chat:send", "requestId": "r-1", "text": text }))
        .await
        .unwrap();
    let session = match message(agent).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    agent
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    let turn = match message(agent).await {
        ServerMessage::Turn(t) => t.turn_id,
        other => panic!("expected turn, got {other:?}"),
    };
    (session, turn)
}

async fn deploy(backend: Backend, return_after_window: bool) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = launch_on(&backend, &github_url);
    let server = launch.start().await;
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Rollout").await;
    let id = doc["id"].as_str().unwrap().to_owned();

    // mona's client attaches offering resumable-sessions, and a turn leaves a live run behind.
    let mut agent = client(&server, &mona).await;
    let attached = agent.attach(&id, &["resumable-sessions"]).await.unwrap();
    let ServerMessage::Attached(attached) = attached else {
        panic!("{attached:?}")
    };
    assert!(attached.kept.is_empty());
    let generation = attached.generation;
    let mut tab = room(&server, &id, &cookie).await;
    let (session, turn) = start_turn(&mut agent, &mut tab, "@chopin roll it out").await;
    agent
        .send(&ClientMessage::Runs(Runs {
            session_id: session.clone(),
            runs: vec![Run {
                run_id: "run-1".into(),
                name: "canary-rollout".into(),
                status: RunStatus::Running,
                root_run_id: None,
                elapsed_ms: None,
                stages: Vec::new(),
                omitted_stages: None,
            }],
        }))
        .await
        .unwrap();
    next_of(&mut tab, "run:card").await;
    agent
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    // The session outlives its turn (kept for its live run): no destroy comes.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // SIGTERM: the link hears going-away with the window, then 1001.
    let heard = tokio::spawn(async move {
        let mut frames = Vec::new();
        loop {
            match agent.recv().await {
                Ok(Event::Message(m)) => frames.push(m),
                Ok(Event::Closed { code, reason }) => return (frames, Some((code, reason))),
                Err(_) => return (frames, None),
            }
        }
    });
    drop(tab);
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("writer lease released"), "{log}");
    let (frames, closed) = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !frames
            .iter()
            .any(|f| matches!(f, ServerMessage::Destroy(_))),
        "{frames:?}"
    );
    match frames.last() {
        Some(ServerMessage::Error(e)) => {
            assert_eq!(e.code, ErrorCode::GoingAway);
            assert_eq!(e.handover_ms, Some(WINDOW_MS), "{e:?}");
        }
        other => panic!("expected going-away, got {other:?}"),
    }
    assert_eq!(closed, Some((1001, "going-away".to_owned())));

    // The next process, on the same database.
    let server = launch.start().await;
    if return_after_window {
        tokio::time::sleep(Duration::from_millis(WINDOW_MS + 1_000)).await;
    }
    // mona's browser comes back (its cookie restores the sign-in), then her client.
    let mut tab = room(&server, &id, &cookie).await;
    let mut agent = client(&server, &mona).await;
    let attached = agent.attach(&id, &["resumable-sessions"]).await.unwrap();
    let ServerMessage::Attached(attached) = attached else {
        panic!("{attached:?}")
    };
    assert_eq!(attached.kept, vec![session.clone()]);
    assert_eq!(attached.generation, generation, "the ownership was kept");
    agent
        .send(&ClientMessage::Resume(ClientResume {
            sessions: vec![session.clone()],
        }))
        .await
        .unwrap();
    match message(&mut agent).await {
        ServerMessage::Resumed(r) => {
            assert_eq!(r.sessions, vec![session.clone()]);
            assert!(r.inputs.is_empty());
        }
        other => panic!("expected resumed, got {other:?}"),
    }
    // The next turn comes on the session taken back, with no start.
    tab.send_json(
        &json!({ "type": "chat:send", "requestId": "r-2", "text": "@chopin how is it going?" }),
    )
    .await
    .unwrap();
    loop {
        match message(&mut agent).await {
            ServerMessage::Turn(t) => {
                assert_eq!(t.session_id, session);
                break;
            }
            ServerMessage::Start(s) => panic!("a new session was started: {s:?}"),
            _ => {}
        }
    }
    drop(agent);
    drop(tab);
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn ao_19_a_client_resumes_its_session_after_a_deploy_on_sqlite() {
    deploy(Backend::Sqlite(tempfile::tempdir().unwrap()), false).await;
}

#[tokio::test]
async fn ao_19_a_client_resumes_its_session_after_a_deploy_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    deploy(Backend::Postgres(db.clone()), false).await;
    pg.drop_database(&db).await.unwrap();
}

#[tokio::test]
async fn ho_13_a_client_returning_after_the_window_resumes_the_disconnected_hold_on_sqlite() {
    deploy(Backend::Sqlite(tempfile::tempdir().unwrap()), true).await;
}

#[tokio::test]
async fn ho_13_a_client_returning_after_the_window_resumes_the_disconnected_hold_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    deploy(Backend::Postgres(db.clone()), true).await;
    pg.drop_database(&db).await.unwrap();
}

/// A resumable client asks a question, ends its turn (the session is kept for the question) and
/// drops without a close frame; mona answers the Decision while it is away; SIGTERM; the next
/// process rebuilds the hold, and the client that resumes is told no question is waited on
/// (HO-15) and then gets the answer given while it was away, once (HO-16).
async fn owed_answer_across_a_restart(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = launch_on(&backend, &github_url);
    let server = launch.start().await;
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Rollout").await;
    let id = doc["id"].as_str().unwrap().to_owned();

    let mut agent = client(&server, &mona).await;
    agent.attach(&id, &["resumable-sessions"]).await.unwrap();
    let mut tab = room(&server, &id, &cookie).await;
    let (session, turn) = start_turn(&mut agent, &mut tab, "@chopin ask me").await;
    agent
        .send(&ClientMessage::InputRequest(InputRequest {
            session_id: session.clone(),
            request_id: "q-1".into(),
            turn_id: Some(turn.clone()),
            run_id: None,
            block: None,
            input: HostInput::Confirm(Confirm {
                title: "Ship it?".into(),
                message: None,
            }),
        }))
        .await
        .unwrap();
    let card = loop {
        let source: Value = reqwest::Client::new()
            .get(server.url(&format!("/api/documents/{id}/source")))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let text = source["source"].as_str().unwrap_or_default().to_owned();
        if let Some(line) = text.lines().find(|l| l.starts_with("id: q-")) {
            break line.trim_start_matches("id: ").to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    agent
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The client's connection drops: no close frame.
    drop(agent);
    let planner = next_of(&mut tab, "session:planner").await;
    assert_eq!(planner["planner"]["state"], "disconnected", "{planner}");
    // mona answers while the client is away.
    tab.send_json(
        &json!({ "type": "decision:answer", "requestId": "a-1", "decision": card, "options": [0] }),
    )
    .await
    .unwrap();
    next_of(&mut tab, "decision:answered").await;
    drop(tab);
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");

    let server = launch.start().await;
    let _tab = room(&server, &id, &cookie).await;
    let mut agent = client(&server, &mona).await;
    let attached = agent.attach(&id, &["resumable-sessions"]).await.unwrap();
    let ServerMessage::Attached(attached) = attached else {
        panic!("{attached:?}")
    };
    assert_eq!(attached.kept, vec![session.clone()]);
    agent
        .send(&ClientMessage::Resume(ClientResume {
            sessions: vec![session.clone()],
        }))
        .await
        .unwrap();
    match message(&mut agent).await {
        ServerMessage::Resumed(r) => {
            assert_eq!(r.sessions, vec![session.clone()]);
            assert!(r.inputs.is_empty(), "HO-15: {r:?}");
        }
        other => panic!("expected resumed, got {other:?}"),
    }
    match message(&mut agent).await {
        ServerMessage::InputResult(r) => {
            assert_eq!(r.request_id, "q-1");
            assert_eq!(r.status, InputStatus::Answered);
            assert!(matches!(r.answer, Some(InputAnswer::Confirm(c)) if c.confirmed));
        }
        other => panic!("expected the owed input-result, got {other:?}"),
    }
    // Exactly once: nothing more about it.
    if let Ok(Ok(Event::Message(m))) =
        tokio::time::timeout(Duration::from_millis(500), agent.recv()).await
    {
        assert!(!matches!(m, ServerMessage::InputResult(_)), "twice: {m:?}");
    }
    drop(agent);
    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn ho_16_an_answer_owed_to_a_dropped_client_is_delivered_after_a_restart_on_sqlite() {
    owed_answer_across_a_restart(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn ho_16_an_answer_owed_to_a_dropped_client_is_delivered_after_a_restart_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    owed_answer_across_a_restart(Backend::Postgres(db.clone())).await;
    pg.drop_database(&db).await.unwrap();
}
