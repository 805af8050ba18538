//! Planner turns in the simulator: the real router on simulated TCP, people in the room socket
//! sending Chat (browser actors), a scripted agent client playing the turn (agent actor with
//! [`TurnScript`]s), the fake GitHub as a host and the in-memory store. The same behaviours as
//! `server/tests/turns.rs`, here end to end through the room socket and at simulated-millisecond
//! precision.

use chopin_protocol::agent::TurnStatus;
use chopin_server::store::prelude::*;
use chopin_server::turns::PASSING_WORDS;
use chopin_sim::{Agent, AgentEvent, Browser, Heard, TurnScript, World};
use serde_json::{json, Value};
use uuid::Uuid;

/// RT-09 ruling: "`abort` waits at most 5 s for `turn-end`".
const ABORT_WAIT_MS: u64 = 5_000;
/// The server caches a token's repository access for 30 s; a step longer than that sees GitHub
/// again.
const REPO_ACCESS_CACHE_MS: u64 = 30_000;
/// The simulated network's one-way latency in these scenarios.
const LATENCY_MS: u64 = 1;

use chopin_sim::cast::{block_on, cast, Cast as Setup};

/// The standard cast with a fixed latency.
fn setup(seed: u64) -> Setup {
    cast(seed, Some(LATENCY_MS))
}

fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn() -> bool) {
    world
        .advance_until(within_ms, what, move |_| done())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// A browser actor in the document's room, once it has heard the room's first message.
fn join(world: &mut World, name: &str, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser(name, cookie, &doc.to_string());
    let b = browser.clone();
    until(
        world,
        5_000,
        &format!("{name} joined the room"),
        move || !b.heard().is_empty(),
    );
    browser
}

/// A fresh agent actor attached to `doc` offering `features`.
fn attach(world: &mut World, name: &str, token: &str, doc: Uuid, features: &[&str]) -> Agent {
    let agent = world.agent(name, token);
    let a = agent.clone();
    until(world, 5_000, "agent connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach_with_features(&doc.to_string(), features);
    let a = agent.clone();
    until(world, 5_000, "attach answered", move || {
        a.answer().is_some()
    });
    assert!(
        matches!(agent.answer(), Some(Ok(_))),
        "{name} attached: {:?}",
        agent.answer()
    );
    agent
}

/// Sends a Chat message from `browser` and waits for its answer (`chat:ack` / `chat:refused`).
fn say(world: &mut World, browser: &Browser, request_id: &str, text: &str) -> Value {
    let before = browser.replies(request_id).len();
    browser.send_chat(request_id, text);
    let b = browser.clone();
    let id = request_id.to_owned();
    until(
        world,
        5_000,
        &format!("an answer to {request_id}"),
        move || b.replies(&id).len() > before,
    );
    browser.replies(request_id)[before].message.clone()
}

/// Waits for the first server frame of `kind` after the first `skip` of them; returns
/// `(at_ms, detail)`.
fn wait_frame(
    world: &mut World,
    agent: &Agent,
    kind: &str,
    skip: usize,
    within_ms: u64,
) -> (u64, String) {
    let a = agent.clone();
    let k = kind.to_owned();
    until(world, within_ms, &format!("a {kind} frame"), move || {
        a.frames_of(&k).len() > skip
    });
    agent.frames_of(kind)[skip].clone()
}

fn wait_turn_over(world: &mut World, doc: Uuid, within_ms: u64) {
    let state = world.server_app().unwrap();
    until(world, within_ms, "the turn ended", move || {
        !state.turns.is_running(doc)
    });
}

/// The document's transcript as `(kind, author, body)`.
fn transcript(world: &World, doc: Uuid) -> Vec<(String, Option<String>, String)> {
    block_on(world.store().transcript(doc, 0, 100))
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.author_login, e.body))
        .collect()
}

/// `(kind, body)` of every `chat:message` a browser heard.
fn heard_messages(browser: &Browser) -> Vec<(String, String)> {
    browser
        .chat_messages()
        .into_iter()
        .map(|Heard { message, .. }| {
            (
                message["kind"].as_str().unwrap_or_default().to_owned(),
                message["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn ack(reply: &Value, planner: &str) {
    assert_eq!(reply["type"], "chat:ack", "{reply}");
    assert_eq!(reply["planner"], planner, "{reply}");
}

/// MSG-07: "Several people can steer one turn; each message is read once, in the order sent."
/// MSG-03: "A turn is running: the message is posted to the transcript, acknowledged at once, and
/// given to the running turn … as `@handle: text` in the same turn." MSG-04: "… a `steer` frame
/// to a remote client that offered the `steer-turn` feature." MSG-09: "A steering message is an
/// ordinary transcript message where it was sent."
#[test]
fn msg_07_two_people_steer_one_turn_each_read_once_in_send_order() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(41);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &["steer-turn"]);
    agent.script(
        TurnScript::new()
            .started()
            .await_steers(2)
            .text("Noted, both of you.")
            .end(TurnStatus::Completed),
    );

    ack(
        &say(&mut world, &mona_room, "m-1", "@chopin draft the plan"),
        "started",
    );
    let (_, turn) = wait_frame(&mut world, &agent, "turn", 0, 5_000);
    assert!(turn.ends_with(" @mona: @chopin draft the plan"), "{turn}");

    // Two people, two sockets, one millisecond apart, neither waiting for the other's answer.
    mona_room.send_chat("m-2", "@chopin first, the intro");
    world.advance(1).unwrap();
    lisa_room.send_chat("l-1", "@chopin then the outline");
    let (m, l) = (mona_room.clone(), lisa_room.clone());
    until(&mut world, 5_000, "both steers answered", move || {
        !m.replies("m-2").is_empty() && !l.replies("l-1").is_empty()
    });
    ack(&mona_room.replies("m-2")[0].message, "steered");
    ack(&lisa_room.replies("l-1")[0].message, "steered");

    wait_frame(&mut world, &agent, "destroy", 0, 5_000);
    wait_turn_over(&mut world, doc, 1_000);
    world.advance(50).unwrap();
    let steers: Vec<String> = agent
        .frames_of("steer")
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert_eq!(
        steers,
        vec![
            "@mona: @chopin first, the intro",
            "@lisa: @chopin then the outline"
        ],
        "each read once, in send order"
    );
    let expected = vec![
        ("member".to_owned(), "@chopin draft the plan".to_owned()),
        ("member".to_owned(), "@chopin first, the intro".to_owned()),
        ("member".to_owned(), "@chopin then the outline".to_owned()),
        ("planner".to_owned(), "Noted, both of you.".to_owned()),
    ];
    assert_eq!(heard_messages(&mona_room), expected, "mona's room");
    assert_eq!(heard_messages(&lisa_room), expected, "lisa's room");
    let authors: Vec<_> = transcript(&world, doc)
        .into_iter()
        .map(|(kind, author, _)| (kind, author))
        .collect();
    assert_eq!(
        authors,
        vec![
            ("member".to_owned(), Some("mona".to_owned())),
            ("member".to_owned(), Some("mona".to_owned())),
            ("member".to_owned(), Some("lisa".to_owned())),
            ("planner".to_owned(), None),
        ]
    );
}

/// MSG-15: "A message sent while a turn is only beginning or finishing is answered
/// `temporarily-unavailable`; the browser sends it again with the same request ID." MSG-16
/// ruling: a passing trouble is not remembered, so the re-send is processed.
#[test]
fn msg_15_a_send_during_turn_start_is_temporarily_unavailable_and_its_retry_steers() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(42);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    // No script yet: the client hears `start` and does not answer it.
    let agent = attach(&mut world, "mona-agent", &mona, doc, &["steer-turn"]);

    ack(
        &say(&mut world, &mona_room, "m-1", "@chopin start"),
        "started",
    );
    let (_, session) = wait_frame(&mut world, &agent, "start", 0, 5_000);
    let early = say(&mut world, &lisa_room, "l-1", "@chopin too early");
    assert_eq!(
        early,
        json!({
            "type": "chat:refused",
            "requestId": "l-1",
            "code": "temporarily-unavailable",
            "message": PASSING_WORDS,
        })
    );
    assert!(agent.sent().is_empty(), "start not answered yet");
    assert_eq!(
        transcript(&world, doc).len(),
        1,
        "the refused send saved nothing"
    );

    agent.script(
        TurnScript::new()
            .started()
            .await_steers(1)
            .end(TurnStatus::Completed),
    );
    wait_frame(&mut world, &agent, "turn", 0, 5_000);
    assert_eq!(agent.sent()[0].2, session, "started answered the start");
    ack(
        &say(&mut world, &lisa_room, "l-1", "@chopin too early"),
        "steered",
    );
    wait_frame(&mut world, &agent, "destroy", 0, 5_000);
    wait_turn_over(&mut world, doc, 1_000);
    world.advance(50).unwrap();
    let steers: Vec<String> = agent
        .frames_of("steer")
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert_eq!(steers, vec!["@lisa: @chopin too early"]);
    assert_eq!(
        heard_messages(&mona_room),
        vec![
            ("member".to_owned(), "@chopin start".to_owned()),
            ("member".to_owned(), "@chopin too early".to_owned()),
        ],
        "the room heard the retried message once"
    );
}

/// RT-12 ruling: "a link that … drops unexpectedly … the turn that was running still ends with an
/// error"; RT-11: "A connection that closes mid-turn ends the turn with an error (not a stop) …
/// nothing waits on a client that has gone"; SES-27 / RFC-62: "an interrupted turn is never
/// re-sent". The same account reattaching gets no `start` or `turn` for the old request.
#[test]
fn rt_12_a_link_dropped_mid_turn_ends_the_turn_with_an_error_and_nothing_is_replayed() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(43);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    let agent = attach(&mut world, "mona-1", &mona, doc, &[]);
    agent.script(TurnScript::new().started().await_turn().drop_link());
    ack(&say(&mut world, &mona_room, "m-1", "@chopin go"), "started");
    let a = agent.clone();
    until(
        &mut world,
        5_000,
        "the client dropped the link",
        move || {
            a.log()
                .iter()
                .any(|e| matches!(e, AgentEvent::Dropped { .. }))
        },
    );
    assert_eq!(agent.frames_of("turn").len(), 1, "dropped mid-turn");
    wait_turn_over(&mut world, doc, 5_000);
    world.advance(50).unwrap();
    let notices: Vec<String> = transcript(&world, doc)
        .into_iter()
        .filter(|(kind, _, _)| kind == "system")
        .map(|(_, _, body)| body)
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with("chopin's turn ended with an error: "),
        "an error, not a stop: {notices:?}"
    );
    assert_eq!(
        notices[0],
        "chopin's turn ended with an error: the harness failed the turn: the Planner's \
         connection closed mid-turn"
    );
    // Nothing waits on a client that has gone: the room hears the notice within a few
    // milliseconds of the drop, not after an abort wait or a connection timeout.
    let dropped_at = agent
        .log()
        .iter()
        .find_map(|e| match e {
            AgentEvent::Dropped { at_ms } => Some(*at_ms),
            _ => None,
        })
        .unwrap();
    let heard = lisa_room
        .chat_messages()
        .into_iter()
        .find(|h| h.message["kind"] == "system")
        .expect("the room heard the notice");
    assert_eq!(heard.message["text"], notices[0].as_str());
    assert!(
        heard.at_ms <= dropped_at + 10,
        "heard at {} after a drop at {dropped_at}",
        heard.at_ms
    );

    // The same account comes back within the grace period: nothing of the old request returns.
    let again = attach(&mut world, "mona-2", &mona, doc, &[]);
    assert_eq!(again.answer(), Some(Ok(1)), "same generation");
    world.advance(60_000).unwrap();
    assert!(
        again.frames().is_empty(),
        "nothing replayed: {:?}",
        again.frames()
    );
    assert!(!world.server_app().unwrap().turns.is_running(doc));
    assert_eq!(
        transcript(&world, doc).len(),
        2,
        "the request and the notice"
    );
}

/// PERM-05: "Before each Chopin host tool … executes, … repository push or administration access
/// is rechecked." PERM-07: "Permission is decided before execution." PERM-08: "The Chat service
/// renders permission denials explicitly." Access is revoked at GitHub between two `read_plan`
/// calls that are 31 s apart (past the 30 s cache of repository access): the second is denied.
#[test]
fn perm_05_access_revoked_between_two_host_tool_calls_denies_the_second() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(44);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(
        TurnScript::new()
            .started()
            .host_tool_call("read_plan", json!({}))
            .sleep(REPO_ACCESS_CACHE_MS + 1_000)
            .host_tool_call("read_plan", json!({}))
            .end(TurnStatus::Completed),
    );
    ack(
        &say(&mut world, &mona_room, "m-1", "@chopin read it twice"),
        "started",
    );
    let (first_at, first) = wait_frame(&mut world, &agent, "host-tool-result", 0, 5_000);
    assert!(first.starts_with("call-1 isError=false "), "{first}");
    world.github().revoke("octo", "plans", "mona");

    let (second_at, second) = wait_frame(
        &mut world,
        &agent,
        "host-tool-result",
        1,
        REPO_ACCESS_CACHE_MS + 5_000,
    );
    assert!(second_at >= first_at + REPO_ACCESS_CACHE_MS + 1_000);
    assert!(
        second.starts_with("call-2 isError=true permission denied: "),
        "{second}"
    );
    assert!(
        second.contains("@mona can no longer push to octo/plans"),
        "{second}"
    );
    wait_frame(&mut world, &agent, "destroy", 0, 5_000);
    wait_turn_over(&mut world, doc, 1_000);
    world.advance(50).unwrap();
    let denial = "chopin was not allowed to use read_plan: @mona can no longer push to octo/plans.";
    assert_eq!(
        transcript(&world, doc)
            .into_iter()
            .filter(|(kind, _, _)| kind == "system")
            .map(|(_, _, body)| body)
            .collect::<Vec<_>>(),
        vec![denial.to_owned()],
        "Chat shows the denial, once"
    );
    assert!(
        heard_messages(&lisa_room).contains(&("system".to_owned(), denial.to_owned())),
        "the room heard the denial: {:?}",
        heard_messages(&lisa_room)
    );
}

/// RT-08: "An `abort` waits briefly for the client's `turn-end`, then ends the turn anyway."
/// RT-09 ruling: "`abort` waits at most 5 s for `turn-end`". Stop with a client that never
/// answers: `destroy` arrives exactly 5 s after the `abort` (both measured at the client, so the
/// 1 ms latency cancels) — not at +4,999 ms, by +5,000 ms — and Chat says "chopin stopped.".
#[test]
fn rt_09_abort_with_a_silent_client_destroys_the_session_exactly_5_s_later() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(45);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(TurnScript::new().ignore_abort().started().await_turn());
    ack(&say(&mut world, &mona_room, "m-1", "@chopin go"), "started");
    let (_, session) = wait_frame(&mut world, &agent, "start", 0, 5_000);
    let (_, turn) = wait_frame(&mut world, &agent, "turn", 0, 5_000);
    let turn_id = turn.split(' ').next().unwrap().to_owned();
    world.advance(100).unwrap();

    let state = world.server_app().unwrap();
    let stopped = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out = stopped.clone();
    world
        .run_client("stop", async move {
            *out.lock().unwrap() = Some(state.turns.stop(doc, "@mona stopped chopin."));
            Ok(())
        })
        .unwrap();
    assert_eq!(*stopped.lock().unwrap(), Some(true), "a turn was running");
    let (abort_at, aborted) = wait_frame(&mut world, &agent, "abort", 0, 1_000);
    assert_eq!(
        aborted,
        format!("{turn_id} @mona stopped chopin."),
        "the abort says why"
    );
    let sent_before_abort = agent.sent().len();

    // The server sent the abort one latency before the client heard it, and still waits for
    // `turn-end` through the server's abort + 4,999 ms.
    let abort_sent = abort_at - LATENCY_MS;
    world
        .advance(abort_sent + ABORT_WAIT_MS - world.now_ms())
        .unwrap();
    assert!(world.server_app().unwrap().turns.is_running(doc));
    // A world tick that starts at `now_ms() == t` runs every host at simulated time `t`: once
    // `now_ms()` is abort + 5,000, the client has lived through abort + 4,999 ms.
    world
        .advance(abort_at + ABORT_WAIT_MS - world.now_ms())
        .unwrap();
    assert!(
        agent.frames_of("destroy").is_empty(),
        "no destroy by abort + 4,999 ms: {:?}",
        agent.frames_of("destroy")
    );
    world.advance(1).unwrap();
    assert_eq!(
        agent.frames_of("destroy"),
        vec![(abort_at + ABORT_WAIT_MS, session)],
        "destroy at abort + 5,000 ms"
    );
    assert_eq!(
        agent.sent().len(),
        sent_before_abort,
        "the client sent nothing"
    );
    wait_turn_over(&mut world, doc, 1_000);
    world.advance(50).unwrap();
    assert_eq!(
        transcript(&world, doc)
            .into_iter()
            .skip(1)
            .map(|(kind, _, body)| (kind, body))
            .collect::<Vec<_>>(),
        vec![("system".to_owned(), "chopin stopped.".to_owned())]
    );
    assert!(
        heard_messages(&lisa_room).contains(&("system".to_owned(), "chopin stopped.".to_owned()))
    );
    assert_eq!(agent.frames_of("destroy").len(), 1, "destroyed once");
}

/// Bounded sockets: a client that stops reading while the server still has more for it than the
/// connection takes unread (a `steer` for each of 150 messages; the simulated connection holds
/// 64 frames) never holds the link's loop: its silence timer closes the link exactly
/// `AGENT_CONNECTION_TIMEOUT_MS` after the client was last heard — still attached 1 ms before,
/// closed and in its grace period 1 ms after.
#[test]
fn a_client_that_stops_reading_is_closed_on_time_while_its_frames_pile_up() {
    use chopin_server::observe::PlannerEvent;
    use chopin_server::planner::PresenceState;
    use chopin_sim::{Event, SIM_EPOCH_MS};
    const TIMEOUT_MS: u64 = 120_000;
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(47);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &["steer-turn"]);
    agent.script(TurnScript::new().started().await_steers(10_000));
    ack(&say(&mut world, &room, "go", "@chopin draft it"), "started");
    wait_frame(&mut world, &agent, "turn", 0, 5_000);
    agent.silence();
    world.advance(10).unwrap();
    for i in 0..150 {
        room.send_chat(&format!("s-{i}"), "@chopin and this");
        world.advance(2).unwrap();
    }
    let r = room.clone();
    until(&mut world, 10_000, "every steer acked", move || {
        r.replies("s-149").len() == 1
    });
    let app = world.server_app().unwrap();
    let heard = (app.planners.last_heard_ms(doc).expect("attached") - SIM_EPOCH_MS) as u64;
    world
        .advance(heard + TIMEOUT_MS - 1 - world.now_ms())
        .unwrap();
    assert_eq!(app.planners.presence(doc).state, PresenceState::Attached);
    world.advance(2).unwrap();
    assert_eq!(app.planners.presence(doc).state, PresenceState::Detached);
    let closed: Vec<_> = world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(p @ PlannerEvent::Closed { .. }) => Some((e.at_ms, p)),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].0, heard + TIMEOUT_MS);
    assert!(
        matches!(&closed[0].1, PlannerEvent::Closed { code: 4408, reason, .. } if reason == "connection-timeout"),
        "{closed:?}"
    );
}

/// The document's system notices, in order.
fn system_notices(world: &World, doc: Uuid) -> Vec<String> {
    transcript(world, doc)
        .into_iter()
        .filter(|(kind, _, _)| kind == "system")
        .map(|(_, _, body)| body)
        .collect()
}

/// The Planner's Chat messages in the document, in order.
fn planner_messages(world: &World, doc: Uuid) -> Vec<String> {
    transcript(world, doc)
        .into_iter()
        .filter(|(kind, _, _)| kind == "planner")
        .map(|(_, _, body)| body)
        .collect()
}

fn wait_closed(world: &mut World, agent: &Agent, within_ms: u64) -> (u64, u16, String) {
    let a = agent.clone();
    until(world, within_ms, "the link closed", move || {
        a.closed().is_some()
    });
    agent.closed().unwrap()
}

fn heard_error(agent: &Agent, code: &str) -> bool {
    agent
        .log()
        .iter()
        .any(|e| matches!(e, AgentEvent::Error { code: c, .. } if c == code))
}

/// AC-18: "Account and repository access are checked again before every session and every turn
/// the connection starts …; losing either fails that session or turn and closes the connection
/// with `access-revoked`." mona's push access is revoked at GitHub while her client is attached:
/// her next `@chopin` message is taken, but no `start` reaches the client — the link closes 4403
/// `access-revoked` after an `error` frame, the document is freed, and Chat says the turn failed.
#[test]
fn ac_18_access_lost_before_a_session_fails_it_and_closes_the_link_access_revoked() {
    use chopin_server::planner::PresenceState;
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(51);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(TurnScript::new().started().end(TurnStatus::Completed));
    world.github().revoke("octo", "plans", "mona");
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    let (_, code, reason) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(heard_error(&agent, "access-revoked"), "{:?}", agent.log());
    assert!(
        agent.frames_of("start").is_empty(),
        "no session was opened: {:?}",
        agent.frames()
    );
    wait_turn_over(&mut world, doc, 5_000);
    world.advance(50).unwrap();
    let notices = system_notices(&world, doc);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with("chopin's turn ended with an error: ")
            && notices[0].contains("access-revoked")
            && notices[0].contains("@mona can no longer push to octo/plans"),
        "{notices:?}"
    );
    let app = world.server_app().unwrap();
    assert_eq!(app.planners.presence(doc).state, PresenceState::None);
}

/// AC-18, the turn's half: the session was started while mona's token still worked; GitHub stops
/// accepting it (admission fails) before the client answers `start`. The turn is never sent: the
/// link closes 4403 `access-revoked` and Chat says the turn failed.
#[test]
fn ac_18_access_lost_before_a_turn_fails_it_and_closes_the_link_access_revoked() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(52);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    wait_frame(&mut world, &agent, "start", 0, 5_000);
    world.github().expire_token(&mona);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .end(TurnStatus::Completed),
    );
    let (_, code, reason) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(heard_error(&agent, "access-revoked"));
    assert!(
        agent.frames_of("turn").is_empty(),
        "no turn was sent: {:?}",
        agent.frames()
    );
    wait_turn_over(&mut world, doc, 5_000);
    world.advance(50).unwrap();
    let notices = system_notices(&world, doc);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with("chopin's turn ended with an error: ")
            && notices[0].contains("access-revoked"),
        "{notices:?}"
    );
}

/// Order rule 20 (docs/agent-connection.md §3) and the AC-06 ruling: "A frame naming a session
/// or turn the server never opened on this connection is `out-of-order`": an `error` frame, then
/// close 1008 — for every kind of frame that names one.
#[test]
fn ac_06_a_frame_naming_a_session_or_turn_never_opened_is_out_of_order() {
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(53);
    let frames = [
        r#"{"type":"turn-end","turnId":"t-never","status":"completed"}"#,
        r#"{"type":"started","sessionId":"s-never"}"#,
        r#"{"type":"start-failed","sessionId":"s-never","message":"no"}"#,
        r#"{"type":"host-tool-call","turnId":"t-never","callId":"c-1","name":"read_plan","input":{}}"#,
        r#"{"type":"part","turnId":"t-never","part":{"type":"text","text":"hello"}}"#,
        r#"{"type":"tools","turnId":"t-never","tools":[]}"#,
        r#"{"type":"runs","sessionId":"s-never","runs":[]}"#,
    ];
    for (i, frame) in frames.iter().enumerate() {
        let agent = attach(&mut world, &format!("mona-{i}"), &mona, doc, &[]);
        agent.send_text(frame);
        let (_, code, reason) = wait_closed(&mut world, &agent, 5_000);
        assert_eq!((code, reason.as_str()), (1008, "out-of-order"), "{frame}");
        assert!(heard_error(&agent, "out-of-order"), "{frame}");
    }
}

/// Order rule 20's other half: a frame naming a session or turn the server has already ended is
/// ignored (the two sides may cross), not a fault.
#[test]
fn ac_06_frames_of_a_session_and_turn_the_server_has_ended_are_ignored() {
    use chopin_server::planner::PresenceState;
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(54);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(
        TurnScript::new()
            .started()
            .text("Done.")
            .end(TurnStatus::Completed),
    );
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    let (_, session) = wait_frame(&mut world, &agent, "start", 0, 5_000);
    let (_, turn) = wait_frame(&mut world, &agent, "turn", 0, 5_000);
    let turn_id = turn.split(' ').next().unwrap().to_owned();
    wait_frame(&mut world, &agent, "destroy", 0, 5_000);
    wait_turn_over(&mut world, doc, 1_000);
    agent.send_text(&format!(
        r#"{{"type":"turn-end","turnId":"{turn_id}","status":"completed"}}"#
    ));
    agent.send_text(&format!(
        r#"{{"type":"part","turnId":"{turn_id}","part":{{"type":"text","text":"late"}}}}"#
    ));
    agent.send_text(&format!(r#"{{"type":"started","sessionId":"{session}"}}"#));
    world.advance(1_000).unwrap();
    assert!(agent.closed().is_none(), "{:?}", agent.log());
    let app = world.server_app().unwrap();
    assert_eq!(app.planners.presence(doc).state, PresenceState::Attached);
    assert_eq!(planner_messages(&world, doc), vec!["Done."]);
}

/// docs/agent-connection.md §4 (`part`): "Consecutive `text` parts of one step are one Chat
/// message" — and each step's text is its own message, published when its step ends (issue 16:
/// today's server glued them into "Step one.Step two." at the end of the turn). A step ends at
/// `finish-step`; text after a tool call is a new step even from a client that sends no
/// `finish-step`.
#[test]
fn each_steps_text_is_its_own_chat_message_published_when_its_step_ends() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(55);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(
        TurnScript::new()
            .started()
            .text("Step one.")
            .finish_step()
            .sleep(1_000)
            .text("Step ")
            .text("two.")
            .finish_step()
            .text("Before a tool,")
            .host_tool_call("read_plan", json!({}))
            .text(" after it.")
            .end(TurnStatus::Completed),
    );
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    let r = room.clone();
    until(&mut world, 5_000, "the room heard step one", move || {
        heard_messages(&r).contains(&("planner".to_owned(), "Step one.".to_owned()))
    });
    assert!(
        !agent.sent().iter().any(|(_, _, detail)| detail == "Step "),
        "heard while the next step had not begun: {:?}",
        agent.sent()
    );
    wait_turn_over(&mut world, doc, 10_000);
    world.advance(50).unwrap();
    assert_eq!(
        planner_messages(&world, doc),
        vec!["Step one.", "Step two.", "Before a tool,", "after it."]
    );
}

/// A Planner message is bounded like anyone's (20,000 characters): a step's text longer than
/// that becomes several messages, in order, none longer, and nothing is cut.
#[test]
fn a_planner_reply_longer_than_one_chat_message_is_split_never_cut() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(56);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    let long: String = (0..25_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    agent.script(
        TurnScript::new()
            .started()
            .text(&long)
            .end(TurnStatus::Completed),
    );
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    wait_turn_over(&mut world, doc, 10_000);
    world.advance(50).unwrap();
    let messages = planner_messages(&world, doc);
    assert_eq!(
        messages
            .iter()
            .map(|m| m.chars().count())
            .collect::<Vec<_>>(),
        vec![20_000, 5_000]
    );
    assert_eq!(messages.concat(), long);
}

/// Order rule 11 (docs/agent-connection.md §3): a tool boundary failure "fails that turn (the
/// server sends `abort` saying why)". A call of a host tool the turn did not offer: the `abort`
/// names it.
#[test]
fn an_abort_for_a_tool_boundary_failure_says_why() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(57);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(
        TurnScript::new()
            .started()
            .host_tool_call("deploy", json!({}))
            .end(TurnStatus::Completed),
    );
    ack(&say(&mut world, &room, "m-1", "@chopin go"), "started");
    let (_, turn) = wait_frame(&mut world, &agent, "turn", 0, 5_000);
    let turn_id = turn.split(' ').next().unwrap().to_owned();
    let (_, abort) = wait_frame(&mut world, &agent, "abort", 0, 5_000);
    assert_eq!(
        abort,
        format!(
            "{turn_id} \"host-tool-call\" names \"deploy\", which is not one of this turn's host tools"
        )
    );
}

/// SES-30: "`AGENT=off` prevents Planner turns". A message to the Planner is refused
/// `planner-unavailable` (the code the earlier docs give for a disabled Planner) with words
/// saying so, and nothing is saved or sent to the attached client; Chat between people goes on.
#[test]
fn ses_30_agent_off_refuses_messages_to_the_planner_and_keeps_chat() {
    use chopin_sim::{Configure, WorldOptions};
    let configure: Configure = std::sync::Arc::new(|c| c.agent_enabled = false);
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = chopin_sim::cast::cast_with(
        58,
        WorldOptions {
            fixed_latency_ms: Some(LATENCY_MS),
            configure: Some(configure),
            ..WorldOptions::default()
        },
    );
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(TurnScript::new().started().end(TurnStatus::Completed));
    let refused = say(&mut world, &room, "m-1", "@chopin go");
    assert_eq!(
        refused,
        json!({
            "type": "chat:refused",
            "requestId": "m-1",
            "code": "planner-unavailable",
            "message": "chopin is turned off on this server, so this message wasn't sent.",
        })
    );
    let lunch = say(&mut world, &room, "m-2", "lunch?");
    assert_eq!(lunch["type"], "chat:ack", "{lunch}");
    assert!(lunch["planner"].is_null(), "{lunch}");
    world.advance(1_000).unwrap();
    assert!(agent.frames().is_empty(), "{:?}", agent.frames());
    assert_eq!(
        transcript(&world, doc),
        vec![(
            "member".to_owned(),
            Some("mona".to_owned()),
            "lunch?".to_owned()
        )]
    );
}

/// Steps shared by the MSG-17 scenarios: mona's client is attached with `steer-turn`; GitHub is
/// held while her turn's `read_plan` asks it (the caches of her sign-in went cold first), so the
/// turn cannot read anything meanwhile; lisa's message arrives then and is told `steered`. The
/// first script then ends the turn (or drops the link) before the tool comes back.
fn steered_while_the_turn_cannot_read(
    seed: u64,
    first: TurnScript,
) -> (World, Uuid, String, Agent, Browser) {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(seed);
    let mona_room = join(&mut world, "mona-room", &mona_cookie, doc);
    let lisa_room = join(&mut world, "lisa-room", &lisa_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &["steer-turn"]);
    world.advance(REPO_ACCESS_CACHE_MS + 1_000).unwrap();
    agent.script(first);
    ack(
        &say(&mut world, &mona_room, "m-1", "@chopin read it"),
        "started",
    );
    wait_frame(&mut world, &agent, "turn", 0, 5_000);
    world.hold(chopin_sim::SERVER_HOST, chopin_sim::GITHUB_HOST);
    let a = agent.clone();
    until(
        &mut world,
        5_000,
        "the client called read_plan",
        move || a.sent().iter().any(|(_, kind, _)| kind == "host-tool-call"),
    );
    world.advance(100).unwrap();
    ack(
        &say(
            &mut world,
            &lisa_room,
            "l-1",
            "@chopin also check the intro",
        ),
        "steered",
    );
    (world, doc, mona, agent, lisa_room)
}

/// MSG-17: "If a turn ends between a message being posted and the turn reading it, an idle Chat
/// starts a turn for the message". lisa's message was told `steered`, but the turn ended (its
/// client sent `turn-end`) before it read it: no `steer` is ever sent, and the next turn starts
/// for her message.
#[test]
fn msg_17_a_message_the_ended_turn_never_read_starts_the_next_turn() {
    let first = TurnScript::new()
        .started()
        .await_turn()
        .sleep(100)
        .host_tool_call_no_wait("read_plan", json!({}))
        .sleep(2_000)
        .end(TurnStatus::Completed);
    let (mut world, doc, _, agent, _) = steered_while_the_turn_cannot_read(59, first);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .text("Checked the intro.")
            .end(TurnStatus::Completed),
    );
    let a = agent.clone();
    until(&mut world, 5_000, "the first turn ended", move || {
        a.sent().iter().any(|(_, kind, _)| kind == "turn-end")
    });
    world.advance(100).unwrap();
    world.release(chopin_sim::SERVER_HOST, chopin_sim::GITHUB_HOST);
    let (_, second) = wait_frame(&mut world, &agent, "turn", 1, 15_000);
    assert!(
        second.ends_with("\n@lisa: @chopin also check the intro"),
        "{second}"
    );
    assert!(
        agent.frames_of("steer").is_empty(),
        "{:?}",
        agent.frames_of("steer")
    );
    wait_frame(&mut world, &agent, "destroy", 1, 5_000);
    wait_turn_over(&mut world, doc, 5_000);
    world.advance(50).unwrap();
    assert_eq!(planner_messages(&world, doc), vec!["Checked the intro."]);
    assert!(
        system_notices(&world, doc).is_empty(),
        "{:?}",
        system_notices(&world, doc)
    );
}

/// MSG-17, otherwise: "Chat says that Chopin did not read it, and it is not sent again on its
/// own." The link drops while lisa's steered message is unread: Chat says chopin did not read
/// it, and when mona's client comes back nothing is sent to it.
#[test]
fn msg_17_a_message_the_ended_turn_never_read_is_reported_when_no_turn_can_start() {
    let first = TurnScript::new()
        .started()
        .await_turn()
        .sleep(100)
        .host_tool_call_no_wait("read_plan", json!({}))
        .sleep(2_000)
        .drop_link();
    let (mut world, doc, mona, agent, lisa_room) = steered_while_the_turn_cannot_read(60, first);
    let a = agent.clone();
    until(&mut world, 5_000, "the link dropped", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Dropped { .. }))
    });
    world.advance(100).unwrap();
    world.release(chopin_sim::SERVER_HOST, chopin_sim::GITHUB_HOST);
    wait_turn_over(&mut world, doc, 15_000);
    world.advance(50).unwrap();
    let notices = system_notices(&world, doc);
    assert!(
        notices
            .iter()
            .any(|n| n.starts_with("chopin did not read @lisa's message")),
        "{notices:?}"
    );
    assert!(
        heard_messages(&lisa_room)
            .iter()
            .any(|(kind, text)| kind == "system"
                && text.starts_with("chopin did not read @lisa's message")),
        "the room heard it"
    );
    let again = attach(&mut world, "mona-again", &mona, doc, &["steer-turn"]);
    world.advance(10_000).unwrap();
    assert!(
        again.frames().is_empty(),
        "nothing re-sent: {:?}",
        again.frames()
    );
    assert!(!world.server_app().unwrap().turns.is_running(doc));
}

/// PERM-05, and the order of the checks (issue 16): a host tool's GitHub checks come first and
/// the local ones (sign-in, ownership generation and holder, credential revision) right before
/// the tool runs. A writer resets the Planner while GitHub is being asked for mona's `tool`
/// call: the tool is refused (Chat says so) and, for an edit, the document does not change.
fn reset_while_github_is_asked(seed: u64, tool: &str, input: Value) {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(seed);
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    world.advance(REPO_ACCESS_CACHE_MS + 1_000).unwrap();
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .sleep(100)
            .host_tool_call_no_wait(tool, input)
            .sleep(60_000),
    );
    ack(
        &say(&mut world, &room, "m-1", "@chopin add a heading"),
        "started",
    );
    wait_frame(&mut world, &agent, "turn", 0, 5_000);
    world.hold(chopin_sim::SERVER_HOST, chopin_sim::GITHUB_HOST);
    let a = agent.clone();
    until(&mut world, 5_000, "the client called the tool", move || {
        a.sent().iter().any(|(_, kind, _)| kind == "host-tool-call")
    });
    world.advance(100).unwrap();
    let app = world.server_app().unwrap();
    world
        .run_client("reset", async move {
            app.planners.reset(doc).await.map_err(|e| e.to_string())?;
            Ok(())
        })
        .unwrap();
    let (_, code, _) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!(code, 4410);
    world.release(chopin_sim::SERVER_HOST, chopin_sim::GITHUB_HOST);
    wait_turn_over(&mut world, doc, 15_000);
    world.advance(50).unwrap();
    let stored = block_on(world.store().document(doc)).unwrap().unwrap();
    assert_eq!(stored.plan_revision, 0, "no edit landed");
    let notices = system_notices(&world, doc);
    assert!(
        notices.iter().any(|n| n.starts_with(&format!(
            "chopin was not allowed to use {tool}: the document's Planner owner has changed"
        ))),
        "{notices:?}"
    );
}

/// An edit_plan whose GitHub checks were under way when the Planner was reset is refused.
#[test]
fn perm_05_a_reset_while_github_is_asked_denies_the_tool() {
    reset_while_github_is_asked(
        61,
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Added\n" }] }),
    );
}

/// A read_plan too: no tool runs once the local checks, made after GitHub answered, fail (with
/// the local checks made first, the reset would slip between them and the tool).
#[test]
fn perm_05_a_reset_while_github_is_asked_denies_a_read_too() {
    reset_while_github_is_asked(62, "read_plan", json!({}));
}

/// PERM-03 (the ownership generation), to the last moment: a turn's edit is committed under the
/// ownership the turn began with, in the same step as the write. mona's `edit_plan` has passed
/// every recheck and its commit is held in the store while a writer resets the Planner; when the
/// commit goes on, storage no longer names mona at that generation, so the edit is not made and
/// Chat says why.
#[test]
fn perm_03_an_edit_whose_ownership_ended_before_its_commit_is_not_made() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::Duration;

    use chopin_server::store::instrumented::Hold;
    use chopin_sim::{HoldStoreCalls, WorldOptions};

    use std::sync::Arc;
    let (held, released) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let hold: HoldStoreCalls = {
        let (held, released) = (held.clone(), released.clone());
        Arc::new(move |_, method, _| {
            if method != "commit_plan_edit" {
                return None;
            }
            held.store(true, SeqCst);
            let released = released.clone();
            Some(Box::pin(async move {
                while !released.load(SeqCst) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }) as Hold)
        })
    };
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = chopin_sim::cast::cast_with(
        63,
        WorldOptions {
            fixed_latency_ms: Some(LATENCY_MS),
            hold_store_calls: Some(hold),
            ..WorldOptions::default()
        },
    );
    let room = join(&mut world, "mona-room", &mona_cookie, doc);
    let agent = attach(&mut world, "mona-agent", &mona, doc, &[]);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .sleep(100)
            .host_tool_call_no_wait(
                "edit_plan",
                json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Added\n" }] }),
            )
            .sleep(60_000),
    );
    ack(
        &say(&mut world, &room, "m-1", "@chopin add a heading"),
        "started",
    );
    let h = held.clone();
    until(&mut world, 5_000, "the edit's commit is held", move || {
        h.load(SeqCst)
    });
    let app = world.server_app().unwrap();
    world
        .run_client("reset", async move {
            app.planners.reset(doc).await.map_err(|e| e.to_string())?;
            Ok(())
        })
        .unwrap();
    let (_, code, _) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!(code, 4410);
    released.store(true, SeqCst);
    wait_turn_over(&mut world, doc, 15_000);
    world.advance(50).unwrap();
    let stored = block_on(world.store().document(doc)).unwrap().unwrap();
    assert_eq!(stored.plan_revision, 0, "the edit was not made");
    let notices = system_notices(&world, doc);
    assert!(
        notices.iter().any(|n| n.starts_with(
            "chopin was not allowed to use edit_plan: the document's Planner owner changed during the turn"
        )),
        "{notices:?}"
    );
}
