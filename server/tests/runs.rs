//! Workflow runs over real sockets: a scripted Planner client reports `runs`, the room shows the
//! cards, the stages route pages every stored stage, a run's end gets its Chat line (and never a
//! turn), and Stop and Resume Planner reach the client as `stop`/`resume`.

use std::time::Duration;

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::{
    ClientMessage, ClientResume, ControlResult, Run, RunStatus, Runs, ServerMessage, Stage,
    StageStatus, Started, TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

mod support;

use support::{next, served, Served};

async fn room(s: &Served) -> BrowserSocket {
    s.room().await
}

/// The next JSON frame of `kind` (others skipped).
async fn next_of(room: &mut BrowserSocket, kind: &str) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), room.recv_json())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within 10 s"))
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == kind => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

/// mona's message starts a turn; the client answers `start`. The session and turn ids.
async fn turn(client: &mut AgentClient, room: &mut BrowserSocket) -> (String, String) {
    room.send_json(
        &json!({ "type": "chat:send", "requestId": "go", "text": "@chopin run the rollout" }),
    )
    .await
    .unwrap();
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
        ServerMessage::Turn(t) => (session, t.turn_id),
        other => panic!("expected turn, got {other:?}"),
    }
}

fn stage(i: usize, status: StageStatus) -> Stage {
    Stage {
        stage_id: format!("st-{i}"),
        name: format!("stage {i}"),
        status,
        parent_stage_id: None,
        duration_ms: None,
    }
}

fn run(status: RunStatus, stages: Vec<Stage>) -> Run {
    Run {
        run_id: "run-12".into(),
        name: "canary-rollout".into(),
        status,
        root_run_id: None,
        elapsed_ms: Some(95_000),
        stages,
        omitted_stages: None,
    }
}

async fn report(client: &mut AgentClient, session: &str, runs: Vec<Run>) {
    client
        .send(&ClientMessage::Runs(Runs {
            session_id: session.into(),
            runs,
        }))
        .await
        .unwrap();
}

async fn get(s: &Served, path: &str) -> (u16, Value) {
    call(s, http::Method::GET, path).await
}

async fn call(s: &Served, method: http::Method, path: &str) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.host))
        .header("cookie", &s.mona_cookie)
        .body(axum::body::Bytes::new())
        .unwrap();
    let answer = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        request,
    )
    .await
    .unwrap();
    let body = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    (answer.status.as_u16(), body)
}

async fn chat(s: &Served) -> Vec<String> {
    s.state.transcript.settled().await;
    s.store
        .transcript(s.doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "system")
        .map(|e| e.body)
        .collect()
}

#[tokio::test]
async fn rr_01_ses_08_ses_10_ses_15_a_reported_run_is_a_card_with_its_latest_12_stages() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, _) = turn(&mut client, &mut room).await;
    let stages: Vec<Stage> = (0..15)
        .map(|i| {
            stage(
                i,
                if i < 14 {
                    StageStatus::Completed
                } else {
                    StageStatus::Running
                },
            )
        })
        .collect();
    // SES-08: several runs live at once, each with its name, status and elapsed time.
    let mut other = run(RunStatus::Waiting, vec![]);
    other.run_id = "run-77".into();
    other.name = "docs-refresh".into();
    other.elapsed_ms = Some(4_000);
    report(
        &mut client,
        &session,
        vec![run(RunStatus::Running, stages), other],
    )
    .await;
    let card = next_of(&mut room, "run:card").await["run"].clone();
    let second = next_of(&mut room, "run:card").await["run"].clone();
    assert_eq!(
        (
            &second["runId"],
            &second["name"],
            &second["status"],
            &second["elapsedMs"]
        ),
        (
            &json!("run-77"),
            &json!("docs-refresh"),
            &json!("waiting"),
            &json!(4_000)
        )
    );
    assert_eq!(card["runId"], "run-12");
    assert_eq!(card["name"], "canary-rollout");
    assert_eq!(card["status"], "running");
    assert_eq!(card["elapsedMs"], 95_000);
    let shown = card["stages"].as_array().unwrap();
    assert_eq!(shown.len(), 12, "SES-10: only the latest 12 stages");
    assert_eq!(shown[0]["stageId"], "st-3");
    assert_eq!(shown[11]["status"], "running");
    assert_eq!(card["earlierStages"], 3);

    // The run ends failed while a stage is unfinished: that stage is shown stopped.
    report(&mut client, &session, vec![run(RunStatus::Failed, vec![])]).await;
    let card = next_of(&mut room, "run:card").await["run"].clone();
    assert_eq!(card["status"], "failed");
    assert_eq!(card["stages"][11]["status"], "stopped", "{card}");
    // SES-15: Chat says how it ended and how long it took.
    let lines = chat(&s).await;
    assert!(
        lines
            .iter()
            .any(|l| l == "Run \u{201c}canary-rollout\u{201d} failed after 1m 35s."),
        "{lines:?}"
    );
    // Anyone who can read the document lists the cards.
    let (_, list) = get(&s, &format!("/api/documents/{}/runs", s.doc)).await;
    let listed = list["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{list}");
    assert!(
        listed
            .iter()
            .any(|r| r["runId"] == "run-12" && r["status"] == "failed"),
        "{list}"
    );
}

#[tokio::test]
async fn rr_04_ses_09_ses_11_deltas_merge_into_every_stored_stage_served_500_a_page() {
    let s = served().await;
    let mut client = s.attach(&["run-stage-deltas"]).await;
    let mut room = room(&s).await;
    let (session, _) = turn(&mut client, &mut room).await;
    for batch in 0..3 {
        let stages = (batch * 400..(batch + 1) * 400)
            .map(|i| stage(i, StageStatus::Completed))
            .collect();
        report(&mut client, &session, vec![run(RunStatus::Running, stages)]).await;
        next_of(&mut room, "run:card").await;
    }
    // Only a changed stage: merged in place.
    report(
        &mut client,
        &session,
        vec![run(RunStatus::Running, vec![stage(5, StageStatus::Failed)])],
    )
    .await;
    let card = next_of(&mut room, "run:card").await["run"].clone();
    assert_eq!(card["earlierStages"], 1_188, "{card}");

    let base = format!("/api/documents/{}/runs/run-12/stages", s.doc);
    let (status, first) = get(&s, &format!("{base}?offset=0&limit=500")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["total"], 1_200);
    assert_eq!(first["stages"].as_array().unwrap().len(), 500);
    assert_eq!(first["stages"][5]["status"], "failed");
    assert_eq!(first["more"], true);
    let (_, last) = get(&s, &format!("{base}?offset=1000&limit=500")).await;
    assert_eq!(last["stages"].as_array().unwrap().len(), 200);
    assert_eq!(last["stages"][199]["stageId"], "st-1199");
    assert_eq!(last["more"], false);
    let (status, refused) = get(&s, &format!("{base}?limit=501")).await;
    assert_eq!(status, 400, "{refused}");
    let (status, _) = get(&s, &format!("/api/documents/{}/runs/nope/stages", s.doc)).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn rr_03_ses_15_a_run_that_fails_between_turns_gets_only_its_chat_notice() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    next_of(&mut room, "run:card").await;
    end_turn(&s, &mut client, turn_id).await;
    report(&mut client, &session, vec![run(RunStatus::Blocked, vec![])]).await;
    next_of(&mut room, "run:card").await;
    let lines = chat(&s).await;
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Run \u{201c}canary-rollout\u{201d} ended blocked")),
        "{lines:?}"
    );
    // No turn starts for it: the client hears nothing but the session's destroy.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!s.state.turns.is_running(s.doc));
    loop {
        match tokio::time::timeout(Duration::from_millis(100), client.recv()).await {
            Err(_) => break,
            Ok(Ok(chopin_fixtures::agent::Event::Message(ServerMessage::Start(_)))) => {
                panic!("a turn started for a client-reported run end")
            }
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn rr_02_ses_04_ses_12_stop_pauses_the_live_runs_and_resume_resumes_them() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    next_of(&mut room, "run:card").await;
    end_turn(&s, &mut client, turn_id).await;

    room.send_json(&json!({ "type": "planner:stop", "runId": "run-12" }))
        .await
        .unwrap();
    let stop = loop {
        if let ServerMessage::Stop(stop) = next(&mut client).await {
            break stop;
        }
    };
    assert_eq!(stop.session_id, session);
    assert_eq!(stop.run_id.as_deref(), Some("run-12"));
    report(&mut client, &session, vec![run(RunStatus::Paused, vec![])]).await;
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: stop.request_id,
            ok: true,
            message: None,
        }))
        .await
        .unwrap();
    let stopped = next_of(&mut room, "planner:stopped").await;
    assert_eq!(stopped["stopped"], true);

    room.send_json(&json!({ "type": "planner:resume" }))
        .await
        .unwrap();
    let resume = loop {
        if let ServerMessage::Resume(resume) = next(&mut client).await {
            break resume;
        }
    };
    assert_eq!(resume.session_id, session);
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: resume.request_id,
            ok: false,
            message: Some("the workflow's checkout is gone".into()),
        }))
        .await
        .unwrap();
    let resumed = next_of(&mut room, "planner:resumed").await;
    assert_eq!(resumed["resumed"], 0);
    let lines = chat(&s).await;
    assert!(
        lines.contains(&"@mona paused \u{201c}canary-rollout\u{201d}.".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"@mona asked to resume \u{201c}canary-rollout\u{201d}; the Planner could not: the workflow's checkout is gone".to_owned()),
        "{lines:?}"
    );
}

#[tokio::test]
async fn ses_14_the_next_workflow_clears_the_ended_runs() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, _) = turn(&mut client, &mut room).await;
    report(
        &mut client,
        &session,
        vec![run(RunStatus::Completed, vec![])],
    )
    .await;
    next_of(&mut room, "run:card").await;
    let mut next_run = run(RunStatus::Running, vec![]);
    next_run.run_id = "run-13".into();
    report(&mut client, &session, vec![next_run]).await;
    next_of(&mut room, "run:card").await;
    let (_, list) = get(&s, &format!("/api/documents/{}/runs", s.doc)).await;
    let ids: Vec<_> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].clone())
        .collect();
    assert_eq!(ids, [json!("run-13")], "{list}");
}

async fn end_turn(s: &Served, client: &mut AgentClient, turn_id: String) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    s.state.turns.until_idle(s.doc).await;
}

/// The client's frames within `ms`, none awaited past it.
async fn heard_within(client: &mut AgentClient, ms: u64) -> Vec<ServerMessage> {
    let mut heard = Vec::new();
    while let Ok(Ok(chopin_fixtures::agent::Event::Message(m))) =
        tokio::time::timeout(Duration::from_millis(ms), client.recv()).await
    {
        heard.push(m);
    }
    heard
}

#[tokio::test]
async fn rr_01_ses_02_a_session_with_a_live_run_is_kept_and_the_next_turn_reuses_it() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    next_of(&mut room, "run:card").await;
    end_turn(&s, &mut client, turn_id).await;
    let heard = heard_within(&mut client, 200).await;
    assert!(
        !heard.iter().any(|m| matches!(m, ServerMessage::Destroy(_))),
        "a session owning a live run is not destroyed: {heard:?}"
    );
    assert_eq!(
        s.state.turns.kept_session(s.doc).as_deref(),
        Some(session.as_str())
    );

    // The next turn runs on the same session: no start, straight to turn.
    room.send_json(
        &json!({ "type": "chat:send", "requestId": "again", "text": "@chopin how is it going?" }),
    )
    .await
    .unwrap();
    let next_turn = match next(&mut client).await {
        ServerMessage::Turn(t) => t,
        other => panic!("expected the kept session's turn, got {other:?}"),
    };
    assert_eq!(next_turn.session_id, session);
    end_turn(&s, &mut client, next_turn.turn_id).await;

    // The run ends: nothing keeps the session, which is let go.
    report(
        &mut client,
        &session,
        vec![run(RunStatus::Completed, vec![])],
    )
    .await;
    let destroyed = loop {
        if let ServerMessage::Destroy(d) = next(&mut client).await {
            break d;
        }
    };
    assert_eq!(destroyed.session_id, session);
    assert_eq!(s.state.turns.kept_session(s.doc), None);
}

#[tokio::test]
async fn ses_01_a_session_with_nothing_live_is_destroyed_after_its_turn() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(
        &mut client,
        &session,
        vec![run(RunStatus::Completed, vec![])],
    )
    .await;
    next_of(&mut room, "run:card").await;
    end_turn(&s, &mut client, turn_id).await;
    let destroyed = loop {
        if let ServerMessage::Destroy(d) = next(&mut client).await {
            break d;
        }
    };
    assert_eq!(destroyed.session_id, session);
    assert_eq!(s.state.turns.kept_session(s.doc), None);
}

#[tokio::test]
async fn ses_03_nobody_acts_on_a_stage_directly() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, _) = turn(&mut client, &mut room).await;
    report(
        &mut client,
        &session,
        vec![run(
            RunStatus::Running,
            vec![stage(0, StageStatus::Running)],
        )],
    )
    .await;
    next_of(&mut room, "run:card").await;
    // The stages are read, never written, over HTTP.
    let stages = format!("/api/documents/{}/runs/run-12/stages", s.doc);
    for method in [http::Method::POST, http::Method::PUT, http::Method::DELETE] {
        let (status, _) = call(&s, method.clone(), &stages).await;
        assert_eq!(status, 405, "{method} {stages}");
    }
    let (status, page) = get(&s, &stages).await;
    assert_eq!(status, 200, "{page}");
    // The room has no frame that acts on a stage: a run is steered by Chat, Decisions, Stop
    // and Resume.
    room.send_json(
        &json!({ "type": "run:stage", "runId": "run-12", "stageId": "st-0", "action": "skip" }),
    )
    .await
    .unwrap();
    let refused = next_of(&mut room, "error").await;
    assert_eq!(refused["code"], "unknown-type", "{refused}");
}

#[tokio::test]
async fn rr_02_a_stop_waiting_on_the_client_does_not_hold_up_the_writers_room() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    next_of(&mut room, "run:card").await;
    end_turn(&s, &mut client, turn_id).await;

    // The client hears `stop` and says nothing: the Stop waits up to 10 s for it.
    room.send_json(&json!({ "type": "planner:stop", "runId": "run-12" }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::Stop(_) = next(&mut client).await {
            break;
        }
    }
    // Meanwhile the same socket is served at once.
    room.send_json(&json!({ "type": "chat:history", "limit": 5 }))
        .await
        .unwrap();
    let page = tokio::time::timeout(Duration::from_secs(2), next_of(&mut room, "chat:history"))
        .await
        .expect("chat:history while the Stop waits");
    assert!(page["entries"].is_array(), "{page}");
    let stopped = next_of(&mut room, "planner:stopped").await;
    assert_eq!(stopped["stopped"], false, "{stopped}");
}

/// The room's next `session:planner` whose state is `state` (others skipped).
async fn planner_state(room: &mut BrowserSocket, state: &str) {
    while next_of(room, "session:planner").await["planner"]["state"] != state {}
}

/// The room's next card of `run_id` for which `wanted` holds (other cards skipped).
async fn card_where(
    room: &mut BrowserSocket,
    run_id: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let card = next_of(room, "run:card").await["run"].clone();
        if card["runId"] == run_id && wanted(&card) {
            return card;
        }
    }
}

async fn stored_status(s: &Served, run_id: &str) -> String {
    s.store
        .runs(s.doc)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.run_id == run_id)
        .map(|r| r.status)
        .unwrap_or_default()
}

/// `GET …/runs`: each card's (runId, status, disconnected).
async fn listed(s: &Served) -> Vec<(String, String, bool)> {
    let (status, list) = get(s, &format!("/api/documents/{}/runs", s.doc)).await;
    assert_eq!(status, 200, "{list}");
    list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["runId"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
                c["disconnected"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// mona's client (offering `features`) reports `run-12` running with a running stage in a turn
/// that then ends, the session kept for the run. The client, room and session.
async fn live_run(s: &Served, features: &[&str]) -> (AgentClient, BrowserSocket, String) {
    let mut client = s.attach(features).await;
    let mut room = room(s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    let mut done = run(RunStatus::Completed, vec![]);
    done.run_id = "run-1".into();
    done.name = "lint".into();
    report(
        &mut client,
        &session,
        vec![
            done,
            run(RunStatus::Running, vec![stage(0, StageStatus::Running)]),
        ],
    )
    .await;
    let card = card_where(&mut room, "run-12", |_| true).await;
    assert_eq!(card["disconnected"], false, "attached: no marker");
    end_turn(s, &mut client, turn_id).await;
    assert_eq!(
        s.state.turns.kept_session(s.doc).as_deref(),
        Some(session.as_str())
    );
    (client, room, session)
}

/// The start of the line for `run-12` let go: it ran 1m 35s when last reported, plus the (real)
/// seconds until its client left (SES-20).
const STOPPED_LINE: &str = "Run \u{201c}canary-rollout\u{201d} stopped after 1m ";

#[tokio::test]
async fn rt_11_rt_12_a_link_that_closes_for_good_shows_its_runs_stopped() {
    // A link without resumable-sessions that drops, and a resumable one that detaches.
    for (features, detach) in [(&[][..], false), (&["resumable-sessions"][..], true)] {
        let s = served().await;
        let (mut client, mut room, _) = live_run(&s, features).await;
        if detach {
            client.detach().await.unwrap();
        } else {
            drop(client);
        }
        let card = card_where(&mut room, "run-12", |c| c["status"] != "running").await;
        assert_eq!(card["status"], "stopped", "{card}");
        assert_eq!(card["disconnected"], false, "{card}");
        assert_eq!(card["stages"][0]["status"], "stopped", "{card}");
        assert_eq!(stored_status(&s, "run-12").await, "stopped");
        assert_eq!(stored_status(&s, "run-1").await, "completed");
        assert_eq!(
            listed(&s).await,
            [
                ("run-1".into(), "completed".into(), false),
                ("run-12".into(), "stopped".into(), false)
            ]
        );
        let lines = chat(&s).await;
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(STOPPED_LINE)).count(),
            1,
            "SES-15: one line for the run's end: {lines:?}"
        );
    }
}

#[tokio::test]
async fn atm_34_a_disconnected_planners_live_cards_are_marked_until_its_client_resumes() {
    let s = served().await;
    let (client, mut room, session) = live_run(&s, &["resumable-sessions"]).await;
    let lines = chat(&s).await;
    drop(client);
    planner_state(&mut room, "disconnected").await;
    // The room is told the live card again, with its last status, marked.
    let card = next_of(&mut room, "run:card").await["run"].clone();
    assert_eq!(
        card["runId"], "run-12",
        "only live cards are told again: {card}"
    );
    assert_eq!(card["status"], "running");
    assert_eq!(card["disconnected"], true);
    assert_eq!(
        card["stages"][0]["status"], "running",
        "not stopped: {card}"
    );
    assert_eq!(
        listed(&s).await,
        [
            ("run-1".into(), "completed".into(), false),
            ("run-12".into(), "running".into(), true)
        ],
        "the runs route shows the marker on live runs only"
    );
    assert_eq!(
        stored_status(&s, "run-12").await,
        "running",
        "storage keeps the status"
    );
    assert_eq!(
        chat(&s).await,
        lines,
        "Chat adds no line about the connection"
    );

    // Its client comes back and resumes: the marker goes.
    let mut back = s.attach(&["resumable-sessions"]).await;
    back.send(&ClientMessage::Resume(ClientResume {
        sessions: vec![session.clone()],
    }))
    .await
    .unwrap();
    planner_state(&mut room, "attached").await;
    let card = next_of(&mut room, "run:card").await["run"].clone();
    assert_eq!(
        (&card["runId"], &card["status"], &card["disconnected"]),
        (&json!("run-12"), &json!("running"), &json!(false))
    );
    match next(&mut back).await {
        ServerMessage::Resumed(r) => assert_eq!(r.sessions, [session]),
        other => panic!("expected resumed, got {other:?}"),
    }
    assert_eq!(
        listed(&s).await,
        [
            ("run-1".into(), "completed".into(), false),
            ("run-12".into(), "running".into(), false)
        ]
    );
    assert_eq!(chat(&s).await, lines);
}

#[tokio::test]
async fn rt_11_ao_12_a_disconnected_hold_ended_by_an_explicit_act_shows_its_runs_stopped() {
    for how in ["reset", "empty resume", "client without resumable-sessions"] {
        let s = served().await;
        let (client, mut room, _) = live_run(&s, &["resumable-sessions"]).await;
        drop(client);
        planner_state(&mut room, "disconnected").await;
        card_where(&mut room, "run-12", |c| c["disconnected"] == true).await;
        let _back = match how {
            "reset" => {
                assert!(s.state.planners.reset(s.doc).await.unwrap());
                None
            }
            "empty resume" => {
                let mut back = s.attach(&["resumable-sessions"]).await;
                back.send(&ClientMessage::Resume(ClientResume { sessions: vec![] }))
                    .await
                    .unwrap();
                Some(back)
            }
            _ => Some(s.attach(&[]).await),
        };
        let card = card_where(&mut room, "run-12", |c| c["status"] != "running").await;
        assert_eq!(
            (&card["status"], &card["disconnected"]),
            (&json!("stopped"), &json!(false)),
            "{how}: {card}"
        );
        assert_eq!(stored_status(&s, "run-12").await, "stopped", "{how}");
        let lines = chat(&s).await;
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(STOPPED_LINE)).count(),
            1,
            "{how}: {lines:?}"
        );
    }
}

/// Holds every `save_run` for 200 ms: a store slower than the link.
struct SlowRunSaves;

impl chopin_server::store::instrumented::Hook for SlowRunSaves {
    fn call(&self, _: chopin_server::store::instrumented::Call) {}

    fn hold(
        &self,
        method: &'static str,
        _write: bool,
    ) -> Option<chopin_server::store::instrumented::Hold> {
        (method == "save_run").then(|| {
            Box::pin(tokio::time::sleep(Duration::from_millis(200)))
                as chopin_server::store::instrumented::Hold
        })
    }
}

/// Issue 24 item 12 (RR-01, SES-02): a `runs` report saying a run is live, followed at once by
/// `turn-end` on the same link, keeps the session — even when storage saves the report after
/// the turn has ended.
#[tokio::test]
async fn rr_01_a_live_run_reported_right_before_turn_end_keeps_the_session_however_slow_the_save() {
    use chopin_server::store::instrumented::Instrumented;
    use chopin_server::store::{MemoryStore, Store};
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(Instrumented::new(
        std::sync::Arc::new(MemoryStore::new()),
        SlowRunSaves,
    ));
    let s = support::served_over(store).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    end_turn(&s, &mut client, turn_id).await;
    let heard = heard_within(&mut client, 500).await;
    assert!(
        !heard.iter().any(|m| matches!(m, ServerMessage::Destroy(_))),
        "a session owning a live run is not destroyed: {heard:?}"
    );
    assert_eq!(
        s.state.turns.kept_session(s.doc).as_deref(),
        Some(session.as_str())
    );
}

/// Issue 24 item 9: Stops pressed again and again while the Planner is away hold one Stop and
/// post one Chat line; a socket has one Stop or Resume answered at a time (the others are told
/// to send again), so a flood of them spawns no unbounded work.
#[tokio::test]
async fn atm_35_stops_flooded_while_the_planner_is_away_hold_one_stop_and_post_one_line() {
    let s = served().await;
    let (client, mut room, _) = live_run(&s, &["resumable-sessions"]).await;
    drop(client);
    planner_state(&mut room, "disconnected").await;
    let before = chat(&s).await.len();
    for _ in 0..50 {
        room.send_json(&json!({ "type": "planner:stop" }))
            .await
            .unwrap();
    }
    let mut stopped = 0;
    let mut refused = 0;
    while stopped + refused < 50 {
        match tokio::time::timeout(Duration::from_secs(10), room.recv_json())
            .await
            .expect("an answer to every frame")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["type"] == "planner:stopped" => stopped += 1,
            BrowserEvent::Json(v) if v["type"] == "error" => {
                assert_eq!(v["code"], "temporarily-unavailable", "{v}");
                refused += 1;
            }
            _ => {}
        }
    }
    assert!(stopped >= 1, "{stopped} stopped, {refused} refused");
    // Once everything answered: one more Stop changes nothing either.
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    next_of(&mut room, "planner:stopped").await;
    let held: Vec<String> = chat(&s).await[before..]
        .iter()
        .filter(|l| l.contains("the Stop is held"))
        .cloned()
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
}

/// CTX-04 / CTX-05 (issue 24 item 10): a kept session's next turn is given the Chat since its
/// last turn (the backscroll), not the new-session bootstrap of up to 100 entries again.
#[tokio::test]
async fn ctx_04_a_kept_sessions_next_turn_gets_only_the_chat_since_its_last_turn() {
    let s = served().await;
    // Messages without @chopin here are for the room: no automatic Planner turn (CTX-01).
    s.pause_participation(s.doc).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&mut client, &mut room).await;
    report(&mut client, &session, vec![run(RunStatus::Running, vec![])]).await;
    end_turn(&s, &mut client, turn_id).await;
    assert_eq!(
        s.state.turns.kept_session(s.doc).as_deref(),
        Some(session.as_str())
    );
    for (id, text) in [
        ("m1", "The canary looks fine."),
        ("m2", "Ship the next region?"),
    ] {
        room.send_json(&json!({ "type": "chat:send", "requestId": id, "text": text }))
            .await
            .unwrap();
        next_of(&mut room, "chat:ack").await;
    }
    room.send_json(
        &json!({ "type": "chat:send", "requestId": "again", "text": "@chopin how is it going?" }),
    )
    .await
    .unwrap();
    let next_turn = match next(&mut client).await {
        ServerMessage::Turn(t) => t,
        other => panic!("expected the kept session's turn, got {other:?}"),
    };
    assert_eq!(next_turn.session_id, session);
    assert!(
        !next_turn.prompt.contains("@chopin run the rollout"),
        "the session's own last turn is not given again: {}",
        next_turn.prompt
    );
    assert!(
        next_turn.prompt.contains("The canary looks fine.")
            && next_turn.prompt.contains("Ship the next region?"),
        "{}",
        next_turn.prompt
    );
}
