//! Bounded state: every per-document and per-login map of the server shrinks back once what
//! used it is gone. Four logins use five documents — rooms, Chat, Planner links attached and
//! detached, a read with no socket — then leave; once grace periods, idle unloads and a
//! housekeeping round have passed, `/metrics` shows every map empty again. The logins
//! themselves stay until their expiry and are ended at that instant though nothing touches them
//! (the expiry sweep, both edges).

use axum::body::Bytes;
use chopin_fixtures::github::Permission;
use chopin_server::housekeeping::TIDY_EVERY;
use chopin_server::observe::PlannerEvent;
use chopin_server::runtime::connector;
use chopin_server::store::prelude::*;
use chopin_server::store::NewDocument;
use chopin_sim::cast::block_on;
use chopin_sim::{
    AgentEvent, Configure, Event, Expectation, Step, TurmoilConnector, World, WorldOptions,
    SERVER_ORIGIN, SIM_EPOCH_MS,
};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

const LOGINS: [&str; 4] = ["ada", "bo", "cy", "dee"];
const DOCS: u128 = 5;
const SESSION_MS: u64 = 180_000;
const GRACE_MS: u64 = 20_000;

fn until(world: &mut World, what: &str, done: impl Fn() -> bool + 'static) {
    world.advance_until(10_000, what, move |_| done()).unwrap();
}

fn metrics_show(world: &mut World, lines: &[String]) {
    world
        .apply(&Step::Get {
            host: "ops".into(),
            path: "/metrics".into(),
        })
        .unwrap();
    world
        .apply(&Step::Expect(Expectation::BodyLines {
            path: "/metrics".into(),
            lines: lines.to_vec(),
        }))
        .unwrap();
}

fn entries(map: &str, n: usize) -> String {
    format!("chopin_state_entries{{map=\"{map}\"}} {n}")
}

/// Every map empty but the logins', which hold `logins`.
fn idle(logins: usize) -> Vec<String> {
    let mut lines: Vec<String> = [
        "planner_slots",
        "planner_gates",
        "planner_revocation_watches",
        "planner_rooms",
        "chat_channels",
        "chat_gates",
    ]
    .iter()
    .map(|m| entries(m, 0))
    .collect();
    lines.push(entries("logins", logins));
    lines.push("chopin_documents_open 0".into());
    lines.push("chopin_planner_links_attached 0".into());
    lines
}

/// Reads a document's source with `cookie`, as a page would, with no socket open.
fn read_source(world: &mut World, cookie: &str, doc: Uuid) -> u16 {
    let status = Arc::new(Mutex::new(0u16));
    let (out, cookie) = (status.clone(), cookie.to_owned());
    world
        .run_client(&format!("reader-{doc}"), async move {
            let request = http::Request::get(format!("{SERVER_ORIGIN}/api/documents/{doc}/source"))
                .header(http::header::COOKIE, cookie)
                .body(Bytes::new())?;
            let answer = connector::send(&TurmoilConnector, request)
                .await
                .map_err(|e| e.to_string())?;
            *out.lock().unwrap() = answer.status.as_u16();
            Ok(())
        })
        .unwrap();
    let status = *status.lock().unwrap();
    status
}

/// Logins ended, with the server's time (simulated ms).
fn ended(world: &World) -> Vec<(u64, String)> {
    world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(PlannerEvent::LoginEnded { login, how }) => {
                assert_eq!(how, "expired");
                Some((e.at_ms, login))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn maps_shrink_back_when_idle_and_logins_end_at_their_expiry() {
    let configure: Configure = Arc::new(|c| {
        c.session_max_age_ms = SESSION_MS;
        c.planner_attach_grace_ms = GRACE_MS;
    });
    let mut world = World::with_options(
        15,
        WorldOptions {
            fixed_latency_ms: Some(1),
            configure: Some(configure),
            ..WorldOptions::default()
        },
    );
    let github = world.github().clone();
    github.add_repo("octo", "plans");
    let mut tokens = Vec::new();
    for (i, login) in LOGINS.iter().enumerate() {
        github.add_user(login, 2001 + i as u64);
        github.grant("octo", "plans", login, Permission::Write);
        tokens.push(github.issue_token(login));
    }
    let docs: Vec<Uuid> = (1..=DOCS).map(|n| Uuid::from_u128(0xb0 + n)).collect();
    for (n, id) in docs.iter().enumerate() {
        block_on(world.store().create_document(&NewDocument {
            id: *id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: format!("notes-{n}"),
            title: format!("Notes {n}"),
            created_at_ms: SIM_EPOCH_MS,
            parent_id: None,
            ..NewDocument::default()
        }))
        .unwrap();
    }
    world
        .apply(&Step::AwaitServer { within_ms: 1_000 })
        .unwrap();
    let signed_in_at = world.now_ms();
    let cookies: Vec<String> = LOGINS
        .iter()
        .map(|login| world.sign_in(login).unwrap())
        .collect();

    // Every login in every room, each saying something in each.
    let mut browsers = Vec::new();
    for (l, cookie) in cookies.iter().enumerate() {
        for (d, doc) in docs.iter().enumerate() {
            let browser = world.browser(&format!("tab-{l}-{d}"), cookie, &doc.to_string());
            browser.send_chat(&format!("r-{l}-{d}"), &format!("hello from {l} in {d}"));
            browsers.push(browser);
        }
    }
    let all = browsers.clone();
    until(&mut world, "every send answered", move || {
        all.iter().enumerate().all(|(i, b)| {
            !b.replies(&format!("r-{}-{}", i / DOCS as usize, i % DOCS as usize))
                .is_empty()
        })
    });
    // Each login attaches a Planner to a document of its own.
    let mut agents = Vec::new();
    for (l, token) in tokens.iter().enumerate() {
        let agent = world.agent(&format!("agent-{l}"), token);
        let a = agent.clone();
        until(&mut world, "connected", move || {
            a.log()
                .iter()
                .any(|e| matches!(e, AgentEvent::Connected { .. }))
        });
        agent.attach(&docs[l].to_string());
        let a = agent.clone();
        until(&mut world, "attached", move || a.answer().is_some());
        assert!(
            matches!(agent.answer(), Some(Ok(_))),
            "{:?}",
            agent.answer()
        );
        agents.push(agent);
    }
    let busy = vec![
        entries("planner_slots", LOGINS.len()),
        entries("planner_rooms", DOCS as usize),
        entries("chat_channels", DOCS as usize),
        entries("logins", LOGINS.len()),
        format!("chopin_documents_open {DOCS}"),
        format!("chopin_planner_links_attached {}", LOGINS.len()),
    ];
    metrics_show(&mut world, &busy);

    // Everyone leaves: the Planners detach into their grace periods, the tabs close, and a page
    // reads the last document once more with no socket open.
    for agent in &agents {
        agent.detach();
    }
    for browser in &browsers {
        browser.leave();
    }
    let all = browsers.clone();
    until(&mut world, "every tab closed", move || {
        all.iter().all(|b| b.closed().is_some())
    });
    assert_eq!(read_source(&mut world, &cookies[0], docs[4]), 200);

    // Past the grace periods, the idle unload and one housekeeping round.
    world
        .advance(GRACE_MS + 30_000 + TIDY_EVERY.as_millis() as u64 + 1_000)
        .unwrap();
    metrics_show(&mut world, &idle(LOGINS.len()));

    // The logins end at their expiry, with nothing touching them: none a millisecond before,
    // each at its own.
    let app = world.server_app().unwrap();
    let now = SIM_EPOCH_MS + world.now_ms() as i64;
    let expiries: Vec<(u64, String)> = LOGINS
        .iter()
        .map(|login| {
            let account = block_on(world.store().account_by_login(login))
                .unwrap()
                .unwrap();
            let live = app.sign_ins.live_login_of(account.id, now).unwrap();
            (
                u64::try_from(live.expires_at_ms - SIM_EPOCH_MS).unwrap(),
                login.to_string(),
            )
        })
        .collect();
    let first = expiries.iter().map(|(at, _)| *at).min().unwrap();
    assert!(first >= signed_in_at + SESSION_MS, "{first}");
    world.advance(first - 1 - world.now_ms()).unwrap();
    assert_eq!(
        app.sign_ins.live_count(),
        LOGINS.len(),
        "none ends before its expiry"
    );
    assert_eq!(ended(&world), vec![]);
    world.advance(60_000).unwrap();
    let mut ended = ended(&world);
    ended.sort();
    let mut expected = expiries.clone();
    expected.sort();
    assert_eq!(ended, expected, "each login ends at its expiry");
    world.advance(60_000).unwrap();
    metrics_show(&mut world, &idle(0));
}
