//! The agent protocol's cases a client written only from `docs/agent-connection.md` found the
//! server getting wrong (issue 24 item 12), over a real loopback socket: `attached.features` in
//! the protocol's order, a `resume` that answers nothing kept, and a Resume pressed right after
//! a `runs` report and `control-result` said the run was paused.

use std::time::Duration;

use chopin_fixtures::agent::{connect, Event, Upgrade};
use chopin_fixtures::browser::BrowserEvent;
use chopin_protocol::agent::{
    ClientMessage, ClientResume, ControlResult, Run, RunStatus, Runs, ServerMessage, Started,
    TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

mod support;

use support::{next, served};

/// `attached.features` lists the accepted features in the protocol's own order (its feature
/// table), whatever order `attach` offered them in.
#[tokio::test]
async fn attached_lists_features_in_the_protocols_order_not_the_offer_order() {
    let s = served().await;
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(s.host.clone(), Some(&s.mona)))
        .await
        .unwrap();
    let answer = client
        .attach(
            &s.doc.to_string(),
            &["run-stage-deltas", "steer-turn", "resumable-sessions"],
        )
        .await
        .unwrap();
    let ServerMessage::Attached(attached) = answer else {
        panic!("{answer:?}")
    };
    let names: Vec<&str> = attached.features.iter().map(|f| f.as_str()).collect();
    assert_eq!(
        names,
        ["resumable-sessions", "steer-turn", "run-stage-deltas"]
    );
}

/// A `resume` after an `attached` that kept nothing is out of order: `error` then 1008.
#[tokio::test]
async fn a_resume_after_an_attached_that_kept_nothing_is_out_of_order() {
    let s = served().await;
    let mut client = s.attach(&["resumable-sessions"]).await;
    client
        .send(&ClientMessage::Resume(ClientResume { sessions: vec![] }))
        .await
        .unwrap();
    let mut code = None;
    let mut closed = None;
    while closed.is_none() {
        match tokio::time::timeout(Duration::from_secs(5), client.recv())
            .await
            .expect("answered")
        {
            Ok(Event::Message(ServerMessage::Error(e))) => code = Some(e.code.as_str()),
            Ok(Event::Closed { code, .. }) => closed = Some(code),
            Ok(_) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(code, Some("out-of-order"));
    assert_eq!(closed, Some(1008));
}

/// The next room frame of `kind` (others skipped).
async fn next_of(room: &mut chopin_fixtures::browser::BrowserSocket, kind: &str) -> Value {
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

fn run(status: RunStatus) -> Runs {
    Runs {
        session_id: String::new(),
        runs: vec![Run {
            run_id: "run-1".into(),
            name: "rollout".into(),
            status,
            root_run_id: None,
            elapsed_ms: None,
            stages: vec![],
            omitted_stages: None,
        }],
    }
}

/// Holds every `save_run` for 300 ms: a store slower than the link.
struct SlowRunSaves;

impl chopin_server::store::instrumented::Hook for SlowRunSaves {
    fn call(&self, _: chopin_server::store::instrumented::Call) {}

    fn hold(
        &self,
        method: &'static str,
        _write: bool,
    ) -> Option<chopin_server::store::instrumented::Hold> {
        (method == "save_run").then(|| {
            Box::pin(tokio::time::sleep(Duration::from_millis(300)))
                as chopin_server::store::instrumented::Hold
        })
    }
}

/// A run reported `paused` and the Stop's `control-result` sent at once, then Resume pressed:
/// the client is sent `resume` (the paused report counts, saved or not).
#[tokio::test]
async fn resume_right_after_a_paused_report_and_its_control_result_reaches_the_client() {
    use chopin_server::store::instrumented::Instrumented;
    use chopin_server::store::{MemoryStore, Store};
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(Instrumented::new(
        std::sync::Arc::new(MemoryStore::new()),
        SlowRunSaves,
    ));
    let s = support::served_over(store).await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    room.send_json(&json!({ "type": "chat:send", "requestId": "go", "text": "@chopin roll out" }))
        .await
        .unwrap();
    let session = match next(&mut client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("{other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    let turn = match next(&mut client).await {
        ServerMessage::Turn(t) => t.turn_id,
        other => panic!("{other:?}"),
    };
    let mut running = run(RunStatus::Running);
    running.session_id = session.clone();
    client.send(&ClientMessage::Runs(running)).await.unwrap();
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    s.state.turns.until_idle(s.doc).await;
    next_of(&mut room, "run:card").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Stop: the client reports the run paused and answers, both at once.
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stop = loop {
        if let ServerMessage::Stop(stop) = next(&mut client).await {
            break stop;
        }
    };
    let mut paused = run(RunStatus::Paused);
    paused.session_id = session.clone();
    client.send(&ClientMessage::Runs(paused)).await.unwrap();
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: stop.request_id,
            ok: true,
            message: None,
        }))
        .await
        .unwrap();
    next_of(&mut room, "planner:stopped").await;
    // Resume at once.
    room.send_json(&json!({ "type": "planner:resume" }))
        .await
        .unwrap();
    let resume = loop {
        match next(&mut client).await {
            ServerMessage::Resume(resume) => break resume,
            _ => continue,
        }
    };
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: resume.request_id,
            ok: true,
            message: None,
        }))
        .await
        .unwrap();
    let resumed = next_of(&mut room, "planner:resumed").await;
    assert_eq!(resumed["resumed"], 1, "{resumed}");
}
