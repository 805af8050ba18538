//! Workflow runs in the simulator: a scripted agent client reports a run during a turn; the
//! session is kept after the turn (RR-01, SES-02) and the next turn reuses it with no new
//! `start`; a writer's Stop pauses the run and Resume resumes it, each answered by the client's
//! `control-result` (RR-02, SES-04, SES-12); the run's end gets one Chat line and starts no
//! turn (SES-15, RR-03); and with nothing live left, the session is let go (SES-02, SES-01).
//! Over several seeds of random latency.

use chopin_protocol::agent::TurnStatus;
use chopin_sim::cast::{cast, Cast};
use chopin_sim::{Agent, Browser, TurnScript, World};
use serde_json::{json, Value};
use uuid::Uuid;

fn join(world: &mut World, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser("mona-room", cookie, &doc.to_string());
    let b = browser.clone();
    world.until(5_000, "mona joined", move || !b.heard().is_empty());
    browser
}

/// mona's client attached and her room open; her message starts a turn in which the client
/// reports a running run, and the turn ends. The session (kept for the run) is returned.
fn run_on_kept_session(seed: u64) -> (World, Agent, Browser, String) {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = cast(seed, None);
    let agent = world.attached_agent("client", &mona, &doc.to_string(), &[]);
    let room = join(&mut world, &mona_cookie, doc);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .sleep(500)
            .end(TurnStatus::Completed),
    );
    room.send_chat("go", "@chopin start the canary rollout");
    let a = agent.clone();
    world.until(10_000, "the turn began", move || sent_turns(&a) == 1);
    let session = agent.frames_of("start")[0].1.clone();
    report(&agent, &session, "running");
    let r = room.clone();
    world.until(10_000, "the run card reached the room", move || {
        reply(&r, "run:card").is_some()
    });
    let a = agent.clone();
    world.until(10_000, "the turn ended", move || {
        a.sent().iter().any(|(_, k, _)| k == "turn-end")
    });
    world.advance(1_000).unwrap();
    assert!(
        agent.frames_of("destroy").is_empty(),
        "seed {seed}: a session with a live run is kept"
    );
    (world, agent, room, session)
}

/// The `requestId` of the last `kind` frame (`stop`, `resume`) the client heard.
fn last_request(agent: &Agent, kind: &str) -> Option<String> {
    let (_, detail) = agent.frames_of(kind).pop()?;
    let frame: Value = serde_json::from_str(&detail).ok()?;
    frame["requestId"].as_str().map(str::to_owned)
}

fn report(agent: &Agent, session: &str, status: &str) {
    let frame = json!({
        "type": "runs",
        "sessionId": session,
        "runs": [{ "runId": "run-1", "name": "canary-rollout", "status": status, "elapsedMs": 95_000 }]
    });
    agent.send_text(&frame.to_string());
}

fn control_result(agent: &Agent, request: &str) {
    let frame = json!({ "type": "control-result", "requestId": request, "ok": true });
    agent.send_text(&frame.to_string());
}

fn chat_lines(mona: &Browser) -> Vec<String> {
    mona.chat_messages()
        .iter()
        .filter_map(|h| h.message["text"].as_str().map(str::to_owned))
        .collect()
}

fn reply(browser: &Browser, kind: &str) -> Option<Value> {
    browser
        .heard()
        .into_iter()
        .rev()
        .find(|h| h.message["type"] == kind)
        .map(|h| h.message)
}

/// mona presses Stop (`stop`) or Resume (`resume`); the client reports the run `status` and
/// answers `control-result` ok. The room's answer (`planner:stopped` / `planner:resumed`).
fn control(
    world: &mut World,
    agent: &Agent,
    room: &Browser,
    session: &str,
    (kind, status): (&str, &str),
) -> Value {
    let (asked, answer) = match kind {
        "stop" => ("planner:stop", "planner:stopped"),
        _ => ("planner:resume", "planner:resumed"),
    };
    room.send_json(json!({ "type": asked }));
    let a = agent.clone();
    world.until(10_000, &format!("{kind} reached the client"), move || {
        last_request(&a, kind).is_some()
    });
    report(agent, session, status);
    control_result(agent, &last_request(agent, kind).unwrap());
    let r = room.clone();
    world.until(15_000, answer, move || reply(&r, answer).is_some());
    reply(room, answer).unwrap()
}

fn sent_turns(agent: &Agent) -> usize {
    agent.frames_of("turn").len()
}

#[test]
fn rr_01_rr_02_ses_02_ses_04_a_run_paused_resumed_and_ended_on_a_kept_session() {
    for seed in 0..6 {
        let (mut world, agent, room, session) = run_on_kept_session(seed);
        let session = &session;

        // Stop pauses the run; Resume resumes it.
        let stopped = control(&mut world, &agent, &room, session, ("stop", "paused"));
        assert_eq!(stopped["stopped"], true, "seed {seed}");
        let resumed = control(&mut world, &agent, &room, session, ("resume", "running"));
        assert_eq!(resumed["resumed"], 1, "seed {seed}");

        // The next turn reuses the kept session: a `turn` with no new `start`.
        agent.script(
            TurnScript::new()
                .kept_session()
                .await_turn()
                .end(TurnStatus::Completed),
        );
        room.send_chat("again", "@chopin how is it going?");
        let a = agent.clone();
        world.until(10_000, "the second turn", move || sent_turns(&a) == 2);
        assert_eq!(agent.frames_of("start").len(), 1, "seed {seed}: reused");

        // The run ends: one Chat line, no turn (RR-03 / SES-15).
        let a = agent.clone();
        world.until(10_000, "the second turn ended", move || {
            a.sent().iter().filter(|(_, k, _)| k == "turn-end").count() == 2
        });
        report(&agent, session, "failed");
        let r = room.clone();
        world.until(10_000, "the run's end in Chat", move || {
            chat_lines(&r)
                .iter()
                .any(|l| l.starts_with("Run \u{201c}canary-rollout\u{201d} failed after"))
        });
        // Nothing keeps the session any more: it is let go (SES-02, SES-01).
        let (a, s) = (agent.clone(), session.clone());
        world.until(10_000, "the session let go", move || {
            a.frames_of("destroy").iter().any(|(_, d)| d == &s)
        });
        world.advance(3_000).unwrap();
        assert_eq!(sent_turns(&agent), 2, "seed {seed}: no turn for the end");
        let lines = chat_lines(&room);
        assert!(
            lines.contains(&"@mona paused \u{201c}canary-rollout\u{201d}.".to_owned()),
            "seed {seed}: {lines:?}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("Run ")).count(),
            1,
            "seed {seed}: {lines:?}"
        );
    }
}

#[test]
fn ac_18_a_kept_sessions_next_turn_is_rechecked_first() {
    let (mut world, agent, room, _) = run_on_kept_session(7);
    // mona loses push access; her next message would reuse the kept session.
    world.github().revoke("octo", "plans", "mona");
    agent.script(
        TurnScript::new()
            .kept_session()
            .await_turn()
            .end(TurnStatus::Completed),
    );
    room.send_chat("again", "@chopin how is it going?");
    let a = agent.clone();
    world.until(10_000, "the link closed", move || a.closed().is_some());
    let (_, code, reason) = agent.closed().unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert_eq!(sent_turns(&agent), 1, "no turn reached the kept session");
    let replies = room.replies("again");
    assert_eq!(replies[0].message["type"], "chat:ack", "{replies:?}");
}
