//! PERM-10 / PERM-11: renewing GitHub App user tokens. The fake GitHub issues expiring user
//! tokens with refresh tokens, as a GitHub App with "Expire user authorization tokens" does; the
//! server renews a browser login's credential `TOKEN_REFRESH_MARGIN_MS` before its access token
//! expires. Before it asks GitHub, every Planner session bound to the old credential revision is
//! aborted and discarded (the running turn gets `abort`, then `destroy`); the next turn starts a
//! fresh session whose host tools run with the new token. Both edges of the deadline, a refresh
//! token GitHub refuses (the login ends, its link closes 4401), and a GitHub outage at the
//! deadline (tried again a minute later).

use chopin_fixtures::github::Permission;
use chopin_protocol::agent::TurnStatus;
use chopin_server::identity::sign_ins::{TOKEN_REFRESH_MARGIN_MS, TOKEN_REFRESH_RETRY_MS};
use chopin_server::observe::PlannerEvent;
use chopin_server::store::prelude::*;
use chopin_server::store::NewDocument;
use chopin_sim::cast::block_on;
use chopin_sim::{
    Agent, AgentEvent, Browser, Event, Step, TurnScript, World, WorldOptions, SIM_EPOCH_MS,
};
use serde_json::{json, Value};
use uuid::Uuid;

/// The access tokens' lifetime in these scenarios: ten minutes, so the renewal is due five
/// minutes after sign-in.
const EXPIRES_IN_SECS: u64 = 600;
const LATENCY_MS: u64 = 1;

struct Setup {
    world: World,
    doc: Uuid,
    /// mona's personal token, for her agent client.
    mona: String,
    mona_cookie: String,
}

fn setup(seed: u64) -> Setup {
    let mut world = World::with_options(
        seed,
        WorldOptions {
            fixed_latency_ms: Some(LATENCY_MS),
            ..WorldOptions::default()
        },
    );
    let github = world.github().clone();
    github.add_user("mona", 1001);
    github.add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.expiring_user_tokens(Some(EXPIRES_IN_SECS));
    let mona = github.issue_token("mona");
    let doc = Uuid::from_u128(0x5eed);
    block_on(world.store().create_document(&NewDocument {
        id: doc,
        repo_owner: "octo".into(),
        repo_name: "plans".into(),
        slug: "field-notes".into(),
        title: "Field notes".into(),
        created_at_ms: SIM_EPOCH_MS,
        parent_id: None,
        ..NewDocument::default()
    }))
    .unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 1_000 })
        .unwrap();
    let mona_cookie = world.sign_in("mona").unwrap();
    Setup {
        world,
        doc,
        mona,
        mona_cookie,
    }
}

fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn() -> bool) {
    world
        .advance_until(within_ms, what, move |_| done())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn attach(world: &mut World, token: &str, doc: Uuid) -> Agent {
    let agent = world.agent("mona-agent", token);
    let a = agent.clone();
    until(world, 5_000, "agent connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(world, 5_000, "attach answered", move || {
        a.answer().is_some()
    });
    assert!(
        matches!(agent.answer(), Some(Ok(_))),
        "{:?}",
        agent.answer()
    );
    agent
}

fn join(world: &mut World, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser("mona-tab", cookie, &doc.to_string());
    let b = browser.clone();
    until(world, 5_000, "joined the room", move || {
        !b.heard().is_empty()
    });
    browser
}

fn say(world: &mut World, browser: &Browser, request_id: &str, text: &str) -> Value {
    browser.send_chat(request_id, text);
    let b = browser.clone();
    let id = request_id.to_owned();
    until(world, 5_000, "an answer", move || {
        !b.replies(&id).is_empty()
    });
    browser.replies(request_id)[0].message.clone()
}

/// mona's live login: (its id, when its renewal is due in simulated ms, its revision).
fn mona_login(world: &World) -> (Uuid, u64, i64) {
    let app = world.server_app().unwrap();
    let now = SIM_EPOCH_MS + world.now_ms() as i64;
    let account = block_on(world.store().account_by_login("mona"))
        .unwrap()
        .unwrap();
    let live = app.sign_ins.live_login_of(account.id, now).unwrap();
    let due = live.renew_at_ms().expect("an expiring token is renewable");
    // Renewed TOKEN_REFRESH_MARGIN_MS (5 minutes) before the token expires, counted from the
    // grant (revision 1 was granted as the login was created; later ones as they renewed).
    if live.credential_revision == 1 {
        assert_eq!(
            due,
            live.created_at_ms + EXPIRES_IN_SECS as i64 * 1_000 - TOKEN_REFRESH_MARGIN_MS
        );
    }
    (
        live.id,
        u64::try_from(due - SIM_EPOCH_MS).unwrap(),
        live.credential_revision,
    )
}

fn refreshes(world: &World) -> usize {
    world
        .trace()
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::Planner(PlannerEvent::CredentialRenewed { .. })
            )
        })
        .count()
}

fn renewed_at(world: &World) -> Vec<(u64, i64)> {
    world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(PlannerEvent::CredentialRenewed { revision, .. }) => {
                Some((e.at_ms, revision))
            }
            _ => None,
        })
        .collect()
}

/// The access tokens GitHub's token endpoint was asked for after sign-in (refreshes).
fn token_requests(world: &World) -> usize {
    world
        .github()
        .request_count("POST /login/oauth/access_token")
}

#[test]
fn perm_10_sessions_on_the_old_revision_end_before_the_refresh_and_the_next_turn_is_fresh() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
    } = setup(11);
    let (login_id, due, revision) = mona_login(&world);
    assert_eq!(revision, 1);
    let old_token = world.github().live_refresh_tokens_of("mona");
    assert_eq!(old_token.len(), 1, "the sign-in came with a refresh token");
    let exchanges_at_sign_in = token_requests(&world);
    let agent = attach(&mut world, &mona, doc);
    let browser = join(&mut world, &mona_cookie, doc);

    // A turn that reads the plan and then waits (for a steer that never comes) across the
    // deadline.
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .host_tool_call("read_plan", json!({}))
            .await_steers(1)
            .end(TurnStatus::Completed),
    );
    let ack = say(&mut world, &browser, "r1", "@chopin read it");
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let a = agent.clone();
    until(
        &mut world,
        5_000,
        "the first host tool answered",
        move || !a.frames_of("host-tool-result").is_empty(),
    );
    let first_session = agent.frames_of("start")[0].1.clone();

    // One millisecond before the deadline: nothing renewed, the session still runs.
    world.advance(due - 1 - world.now_ms()).unwrap();
    assert_eq!(
        token_requests(&world),
        exchanges_at_sign_in,
        "not refreshed early"
    );
    assert_eq!(refreshes(&world), 0);
    assert!(agent.frames_of("abort").is_empty(), "not aborted early");
    assert!(world.server_app().unwrap().turns.is_running(doc));

    // At the deadline: the turn's abort goes out at that millisecond (it reaches the client one
    // latency later: sent 1 ms early it would arrive at the deadline), then the session is
    // destroyed, and only then is GitHub asked.
    world.advance(1_000).unwrap();
    let aborts = agent.frames_of("abort");
    assert_eq!(aborts.len(), 1, "{:?}", agent.frames());
    assert_eq!(
        aborts[0].0,
        due + LATENCY_MS,
        "sent at the deadline (due {due})"
    );
    let destroyed = agent.frames_of("destroy");
    assert_eq!(destroyed.len(), 1);
    let renewed = renewed_at(&world);
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    let (renewed_ms, new_revision) = renewed[0];
    assert_eq!(new_revision, 2);
    // The destroy frame reached the client (one latency after it was sent) no later than the
    // renewal completed: the session was gone before the refresh.
    assert!(
        destroyed[0].0 <= renewed_ms + LATENCY_MS,
        "destroyed at {} but renewed at {renewed_ms}",
        destroyed[0].0
    );
    assert!(!world.server_app().unwrap().turns.is_running(doc));
    assert_eq!(token_requests(&world), exchanges_at_sign_in + 1);
    // GitHub rotated the refresh token; the stored credential moved to revision 2.
    let live_refresh = world.github().live_refresh_tokens_of("mona");
    assert_eq!(live_refresh.len(), 1);
    assert_ne!(live_refresh, old_token);
    let (stored_revision, _) = block_on(world.store().login_credential(login_id))
        .unwrap()
        .unwrap();
    assert_eq!(stored_revision, 2);
    assert_eq!(mona_login(&world).2, 2);
    let b = browser.clone();
    until(&mut world, 5_000, "Chat says the turn stopped", move || {
        b.chat_messages()
            .iter()
            .any(|h| h.message["kind"] == "system")
    });
    let stopped = browser
        .chat_messages()
        .into_iter()
        .filter(|h| h.message["kind"] == "system")
        .map(|h| h.message["text"].as_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>();
    assert!(
        stopped
            .iter()
            .any(|b| b.contains("GitHub sign-in was renewed")),
        "Chat says why the turn stopped: {stopped:?}"
    );
    // mona's room socket, opened with the token the renewal retired, stays open through its
    // next access recheck: the recheck asks GitHub with the login's current token.
    let recheck_ms = world.server_app().unwrap().config.access_recheck_ms;
    world.advance(recheck_ms).unwrap();
    assert_eq!(browser.closed(), None, "the room survives the renewal");

    // The next turn is a fresh session, and its host tools run with the renewed token.
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .host_tool_call("read_plan", json!({}))
            .end(TurnStatus::Completed),
    );
    let ack = say(&mut world, &browser, "r2", "@chopin again");
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let a = agent.clone();
    until(
        &mut world,
        5_000,
        "the second turn's tool answered",
        move || a.frames_of("host-tool-result").len() >= 2,
    );
    let starts = agent.frames_of("start");
    assert_eq!(starts.len(), 2);
    assert_ne!(starts[1].1, first_session, "a fresh session");
    let result = &agent.frames_of("host-tool-result")[1].1;
    assert!(!result.contains("permission denied"), "{result}");
}

#[test]
fn a_refresh_token_github_refuses_ends_the_login_and_its_link() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
    } = setup(12);
    let (login_id, due, _) = mona_login(&world);
    let agent = attach(&mut world, &mona, doc);
    for refresh in world.github().live_refresh_tokens_of("mona") {
        world.github().expire_refresh_token(&refresh);
    }
    let asked = token_requests(&world);
    world.advance(due - 1 - world.now_ms()).unwrap();
    assert!(agent.closed().is_none());
    assert_eq!(
        token_requests(&world),
        asked,
        "not asked before the deadline"
    );
    world.advance(1_000).unwrap();
    assert_eq!(token_requests(&world), asked + 1, "asked once");
    let (at, code, _) = agent.closed().expect("the link closed");
    assert_eq!(code, 4401, "sign-in-required");
    // The link closes once GitHub's refusal is in, a call after the deadline (a new connection
    // and the request: four latencies); asked 1 ms before the deadline, it would close sooner.
    assert!(
        (due + 4 * LATENCY_MS..=due + 10).contains(&at),
        "closed at {at}, due {due}"
    );
    let stored = block_on(world.store().browser_login(login_id))
        .unwrap()
        .unwrap();
    assert!(stored.signed_out_at_ms.is_some(), "the end is recorded");
    assert!(block_on(world.store().login_credential(login_id))
        .unwrap()
        .is_none());
    let ended: Vec<String> = world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(PlannerEvent::LoginEnded { how, .. }) => Some(how),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec!["credential-revoked".to_owned()]);
    let _ = mona_cookie;
}

#[test]
fn a_refresh_github_cannot_answer_is_tried_again_a_minute_later() {
    let Setup {
        mut world, doc: _, ..
    } = setup(13);
    let (_, due, _) = mona_login(&world);
    let asked = token_requests(&world);
    world.advance(due - 1 - world.now_ms()).unwrap();
    world.github().set_outage(true);
    world.advance(1_000).unwrap();
    assert_eq!(token_requests(&world), asked + 1, "asked at the deadline");
    world.github().set_outage(false);
    assert_eq!(refreshes(&world), 0, "GitHub was down");
    assert_eq!(mona_login(&world).2, 1, "the login keeps its credential");
    // Tried again a minute after the first attempt: not 1 ms before, and at that millisecond.
    let retry_at = due + TOKEN_REFRESH_RETRY_MS as u64;
    world.advance(retry_at - 1 - world.now_ms()).unwrap();
    assert_eq!(
        token_requests(&world),
        asked + 1,
        "not before the retry time"
    );
    world.advance(1_000).unwrap();
    assert_eq!(token_requests(&world), asked + 2, "tried again once");
    let renewed = renewed_at(&world);
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    // Renewed one GitHub call after the retry time (a new connection and the request: four
    // latencies); asked 1 ms early, it would be renewed 1 ms sooner.
    assert!(
        (retry_at + 4 * LATENCY_MS..=retry_at + 10).contains(&renewed[0].0),
        "renewed at {:?}, retry time {retry_at}",
        renewed[0]
    );
    assert_eq!(mona_login(&world).2, 2, "renewed on the retry");
}

/// PERM-10 / PERM-11 (RULINGS): a renewal discards every session bound to the old revision,
/// kept ones included: at the renewal's millisecond (not 1 ms before) the kept session's live
/// run is stopped resumably (`stop`), then the session is destroyed, then GitHub is asked; the
/// next turn starts a fresh session.
#[test]
fn perm_11_a_kept_session_is_stopped_and_discarded_at_the_renewal_and_the_next_turn_is_fresh() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
    } = setup(12);
    let (_, due, _) = mona_login(&world);
    let agent = attach(&mut world, &mona, doc);
    let browser = join(&mut world, &mona_cookie, doc);
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .runs("running")
            .end(TurnStatus::Completed),
    );
    let ack = say(&mut world, &browser, "r1", "@chopin start the rollout");
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let app = world.server_app().unwrap();
    until(&mut world, 10_000, "the session is kept", move || {
        app.turns.kept_session(doc).is_some()
    });
    let first_session = agent.frames_of("start")[0].1.clone();

    world.advance(due - 1 - world.now_ms()).unwrap();
    assert!(agent.frames_of("stop").is_empty(), "not stopped early");
    assert!(agent.frames_of("destroy").is_empty(), "not discarded early");
    assert_eq!(refreshes(&world), 0);

    // At the deadline: the run's stop goes out (it reaches the client one latency later).
    let a = agent.clone();
    until(&mut world, 2_000, "stop", move || {
        !a.frames_of("stop").is_empty()
    });
    let (stop_at, stop) = agent.frames_of("stop")[0].clone();
    assert_eq!(
        stop_at,
        due + LATENCY_MS,
        "sent at the deadline (due {due})"
    );
    let stop: Value = serde_json::from_str(&stop).unwrap();
    assert_eq!(stop["sessionId"], first_session.as_str());
    agent.send_text(
        &json!({ "type": "runs", "sessionId": first_session, "runs": [{ "runId": "run-1", "name": "rollout", "status": "paused", "elapsedMs": 1000 }] })
            .to_string(),
    );
    agent.send_text(
        &json!({ "type": "control-result", "requestId": stop["requestId"], "ok": true })
            .to_string(),
    );
    let a = agent.clone();
    until(&mut world, 15_000, "destroy", move || {
        !a.frames_of("destroy").is_empty()
    });
    world.advance(1_000).unwrap();
    let renewed = renewed_at(&world);
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert!(
        agent.frames_of("destroy")[0].0 <= renewed[0].0 + LATENCY_MS,
        "the kept session was discarded before the refresh"
    );
    assert_eq!(world.server_app().unwrap().turns.kept_session(doc), None);

    // The next turn: a fresh session.
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .end(TurnStatus::Completed),
    );
    let ack = say(&mut world, &browser, "r2", "@chopin again");
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let a = agent.clone();
    until(&mut world, 5_000, "a new session", move || {
        a.frames_of("start").len() == 2
    });
    assert_ne!(
        agent.frames_of("start")[1].1,
        first_session,
        "a fresh session"
    );
}
