//! The agent connection in the simulator: the real router on simulated TCP, the fake GitHub as a
//! host, agent clients and browsers as hosts of their own. Every timing rule is checked at both
//! edges of its deadline, in simulated milliseconds, against the server's own events in the trace.

use chopin_fixtures::github::Permission;
use chopin_server::observe::PlannerEvent;
use chopin_server::planner::{NotAttached, PresenceState};
use chopin_server::store::prelude::*;
use chopin_server::store::NewDocument;
use chopin_sim::{
    Agent, AgentEvent, Event, SimError, Step, World, WorldOptions, SERVER_ORIGIN, SIM_EPOCH_MS,
};
use serde_json::json;
use uuid::Uuid;

/// Spec defaults (AO-07, AO-08, AC-18).
const GRACE_MS: u64 = 120_000;
const TIMEOUT_MS: u64 = 120_000;
const RECHECK_MS: u64 = 300_000;

use chopin_sim::cast::{block_on, cast, Cast as Setup};

/// The standard cast with a fixed 1 ms latency.
fn setup(seed: u64) -> Setup {
    setup_with(seed, Some(1))
}

/// The standard cast, with turmoil's seeded random latencies when `fixed_latency_ms` is `None`.
fn setup_with(seed: u64, fixed_latency_ms: Option<u64>) -> Setup {
    cast(seed, fixed_latency_ms)
}

/// Simulated ms of the first server Planner event after `from_ms` matching `pick`.
fn server_event(
    world: &World,
    from_ms: u64,
    pick: impl Fn(&PlannerEvent) -> bool,
) -> Option<(u64, PlannerEvent)> {
    world
        .trace()
        .events
        .into_iter()
        .find_map(|e| match e.event {
            Event::Planner(p) if e.at_ms >= from_ms && pick(&p) => Some((e.at_ms, p)),
            _ => None,
        })
}

fn server_events(world: &World, pick: impl Fn(&PlannerEvent) -> bool) -> Vec<(u64, PlannerEvent)> {
    world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(p) if pick(&p) => Some((e.at_ms, p)),
            _ => None,
        })
        .collect()
}

/// Server wall time (Unix ms) to simulated ms.
fn sim_ms(wall_ms: i64) -> u64 {
    (wall_ms - SIM_EPOCH_MS) as u64
}

fn wait_connected(world: &mut World, agent: &Agent) {
    let a = agent.clone();
    world
        .advance_until(5_000, "agent connected", move |_| {
            a.log()
                .iter()
                .any(|e| matches!(e, AgentEvent::Connected { .. }))
        })
        .unwrap();
}

fn wait_answer(world: &mut World, agent: &Agent) -> Result<i64, (String, Option<String>)> {
    let a = agent.clone();
    world
        .advance_until(5_000, "attach answered", move |_| a.answer().is_some())
        .unwrap();
    agent.answer().unwrap()
}

fn wait_closed(world: &mut World, agent: &Agent, within_ms: u64) -> (u64, u16, String) {
    let a = agent.clone();
    world
        .advance_until(within_ms, "agent closed", move |_| a.closed().is_some())
        .unwrap();
    agent.closed().unwrap()
}

/// Attaches a fresh agent actor; returns it with the simulated time from the attach command to
/// the server receiving it (constant under the fixed 1 ms latency).
fn attach(world: &mut World, name: &str, token: &str, doc: Uuid) -> (Agent, u64) {
    let agent = world.agent(name, token);
    wait_connected(world, &agent);
    let commanded = world.now_ms();
    agent.attach(&doc.to_string());
    let answer = wait_answer(world, &agent);
    assert!(answer.is_ok(), "{name} attached: {answer:?}");
    let (received, _) = server_event(world, commanded, |p| {
        matches!(p, PlannerEvent::AttachReceived { .. })
    })
    .expect("the server received the attach");
    (agent, received - commanded)
}

fn presence(world: &World, doc: Uuid) -> (PresenceState, Option<String>) {
    let p = world.server_app().unwrap().planners.presence(doc);
    (p.state, p.login)
}

fn stored_holder(world: &World, doc: Uuid) -> (i64, Option<String>) {
    let o = block_on(world.store().ownership(doc)).unwrap();
    (o.generation, o.holder.map(|h| h.login))
}

/// Detaches `agent` and returns the grace deadline in simulated ms.
fn detach(world: &mut World, agent: &Agent) -> u64 {
    let from = world.now_ms();
    agent.detach();
    let (code, _) = {
        let (_, code, reason) = wait_closed(world, agent, 5_000);
        (code, reason)
    };
    assert_eq!(code, 1000, "a detach closes normally");
    let (_, started) = server_event(world, from, |p| {
        matches!(p, PlannerEvent::GraceStarted { .. })
    })
    .expect("grace started");
    match started {
        PlannerEvent::GraceStarted { until_ms, how, .. } => {
            assert_eq!(how, "detached");
            sim_ms(until_ms)
        }
        _ => unreachable!(),
    }
}

/// AO-09: "Within the grace period the same account can attach again and keeps the same ownership
/// generation". An attach arriving 1 ms before the grace period ends keeps generation 1, and the
/// period does not end under it while it is checked.
#[test]
fn ao_09_reattach_arriving_one_ms_before_grace_end_keeps_the_generation() {
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = setup(11);
    let room = world.browser("room-mona", &mona_cookie, &doc.to_string());
    let (first, delay) = attach(&mut world, "mona-1", &mona, doc);
    assert_eq!(stored_holder(&world, doc), (1, Some("mona".into())));
    let until = detach(&mut world, &first);
    assert_eq!(presence(&world, doc).0, PresenceState::Detached);

    // A second client of the same account, connected shortly before the deadline.
    world.advance(until - 5_000 - world.now_ms()).unwrap();
    let second = world.agent("mona-2", &mona);
    wait_connected(&mut world, &second);
    world.advance(until - 1 - delay - world.now_ms()).unwrap();
    second.attach(&doc.to_string());
    assert_eq!(wait_answer(&mut world, &second), Ok(1), "same generation");
    let (received, _) = server_event(&world, until - 10, |p| {
        matches!(p, PlannerEvent::AttachReceived { .. })
    })
    .unwrap();
    assert_eq!(
        received,
        until - 1,
        "the reattach arrived 1 ms before the grace period ended"
    );
    assert!(
        server_events(&world, |p| matches!(p, PlannerEvent::Released { .. })).is_empty(),
        "nothing was released"
    );
    world.advance(10).unwrap();
    assert_eq!(
        presence(&world, doc),
        (PresenceState::Attached, Some("mona".into()))
    );
    assert_eq!(stored_holder(&world, doc), (1, Some("mona".into())));

    // PRES-01/02: the room heard none, attached, detached (with its deadline), attached.
    let mut states: Vec<_> = room.planner_states().into_iter().map(|(_, p)| p).collect();
    let until_wall = until as i64 + SIM_EPOCH_MS;
    // RULINGS PRES-09: the detached state says when the client was last heard — its detach,
    // as the grace period began.
    let last_seen = states[2]
        .as_object_mut()
        .and_then(|o| o.remove("lastSeen"))
        .and_then(|v| v.as_i64())
        .expect("detached carries lastSeen");
    let grace_began = until_wall - GRACE_MS as i64;
    assert!(
        (grace_began - 100..=grace_began).contains(&last_seen),
        "last seen {last_seen}, grace began {grace_began}"
    );
    assert_eq!(
        states,
        vec![
            json!({ "state": "none" }),
            json!({ "state": "attached", "login": "mona" }),
            json!({ "state": "detached", "login": "mona", "until": until_wall }),
            json!({ "state": "attached", "login": "mona" }),
        ]
    );
}

/// AO-09, AO-10 ruling, AO-15: another account arriving 1 ms before the deadline is refused
/// `planner-attached` naming the holder; the grace period ends exactly at its deadline, released
/// under its generation; another account arriving 1 ms after it attaches at generation 2.
#[test]
fn ao_09_other_account_is_refused_before_the_deadline_and_attaches_after_it() {
    let Setup {
        mut world,
        doc,
        mona,
        lisa,
        lisa_cookie,
        ..
    } = setup(12);
    let room = world.browser("room-lisa", &lisa_cookie, &doc.to_string());
    let (first, delay) = attach(&mut world, "mona-1", &mona, doc);
    let until = detach(&mut world, &first);

    world.advance(until - 5_000 - world.now_ms()).unwrap();
    let early = world.agent("lisa-early", &lisa);
    let late = world.agent("lisa-late", &lisa);
    wait_connected(&mut world, &early);
    wait_connected(&mut world, &late);
    world.advance(until - 1 - delay - world.now_ms()).unwrap();
    early.attach(&doc.to_string());
    // Both edges of the deadline, read from the server itself: 1 ms before it, as the early
    // attach arrives, mona still holds the document …
    world.advance(delay).unwrap();
    assert_eq!(world.now_ms(), until - 1);
    assert_eq!(
        presence(&world, doc),
        (PresenceState::Detached, Some("mona".into()))
    );
    assert_eq!(stored_holder(&world, doc), (1, Some("mona".into())));
    assert!(until + 1 - delay >= world.now_ms(), "delay {delay}");
    world.advance(until + 1 - delay - world.now_ms()).unwrap();
    late.attach(&doc.to_string());
    // … and 1 ms after it, as the late attach arrives, nobody does.
    world.advance(until + 1 - world.now_ms()).unwrap();
    assert_eq!(presence(&world, doc), (PresenceState::None, None));
    assert_eq!(
        stored_holder(&world, doc),
        (1, None),
        "released, generation kept"
    );
    let released = server_events(&world, |p| matches!(p, PlannerEvent::Released { .. }));
    assert_eq!(
        released,
        vec![(
            until,
            PlannerEvent::Released {
                document: doc,
                generation: 1
            }
        )]
    );
    assert_eq!(
        wait_answer(&mut world, &early),
        Err(("planner-attached".into(), Some("mona".into())))
    );
    assert_eq!(wait_closed(&mut world, &early, 1_000).1, 4409);
    assert_eq!(wait_answer(&mut world, &late), Ok(2));
    let (received, _) = server_event(
        &world,
        until,
        |p| matches!(p, PlannerEvent::AttachReceived { login, .. } if login == "lisa"),
    )
    .unwrap();
    assert_eq!(
        received,
        until + 1,
        "the late attach arrived 1 ms after the deadline"
    );
    assert_eq!(stored_holder(&world, doc), (2, Some("lisa".into())));
    let states: Vec<_> = room
        .planner_states()
        .into_iter()
        .map(|(_, p)| p["state"].clone())
        .collect();
    assert_eq!(
        states,
        vec!["none", "attached", "detached", "none", "attached"]
    );
}

/// AO-08: "A connection that answers none of the server's protocol pings for
/// AGENT_CONNECTION_TIMEOUT_MS … is closed as dropped". After a silent partition the link is still
/// attached 1 ms before the timeout (counted from the last frame heard) and closed exactly at it.
#[test]
fn ao_08_silent_partition_closes_the_link_at_the_timeout_and_not_before() {
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(13);
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    // Let a few pings be answered, then cut the network without a word.
    world.advance(75_000).unwrap();
    world.partition("mona-1", chopin_sim::SERVER_HOST);
    let heard = sim_ms(
        world
            .server_app()
            .unwrap()
            .planners
            .last_heard_ms(doc)
            .expect("attached"),
    );
    assert!(heard >= 60_000, "pongs were heard: last at {heard}");
    world
        .advance(heard + TIMEOUT_MS - 1 - world.now_ms())
        .unwrap();
    assert_eq!(presence(&world, doc).0, PresenceState::Attached);
    world.advance(2).unwrap();
    assert_eq!(presence(&world, doc).0, PresenceState::Detached);
    let closed = server_events(&world, |p| matches!(p, PlannerEvent::Closed { .. }));
    assert_eq!(closed.len(), 1, "{closed:?}");
    let (at, event) = &closed[0];
    assert_eq!(*at, heard + TIMEOUT_MS);
    assert!(
        matches!(event, PlannerEvent::Closed { code: 4408, reason, .. } if reason == "connection-timeout"),
        "{event:?}"
    );
    let (_, grace) = server_event(&world, *at, |p| {
        matches!(p, PlannerEvent::GraceStarted { .. })
    })
    .unwrap();
    assert!(matches!(grace, PlannerEvent::GraceStarted { how, .. } if how == "dropped"));
    // The client never heard the close: the network is gone.
    assert!(agent.closed().is_none());
}

/// AC-18, AC-19 ruling: access revoked at GitHub closes the link (4403 `access-revoked`) at the
/// next 5-minute recheck: still attached 1 ms before it, closed right after it.
#[test]
fn ac_18_access_revoked_at_github_closes_the_link_at_the_next_recheck() {
    let Setup {
        mut world,
        doc,
        mona,
        lisa_cookie,
        ..
    } = setup(14);
    // lisa watches the room (mona's own room socket closes at its recheck: she lost read access).
    let room = world.browser("room", &lisa_cookie, &doc.to_string());
    let from = world.now_ms();
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    let (attached_at, _) =
        server_event(&world, from, |p| matches!(p, PlannerEvent::Attached { .. })).unwrap();
    world.advance(10_000).unwrap();
    world.github().revoke("octo", "plans", "mona");
    world
        .advance(attached_at + RECHECK_MS - 1 - world.now_ms())
        .unwrap();
    assert_eq!(presence(&world, doc).0, PresenceState::Attached);
    assert!(agent.closed().is_none());
    let (closed_at, code, reason) = wait_closed(&mut world, &agent, 1_000);
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(
        closed_at <= attached_at + RECHECK_MS + 50,
        "closed within the recheck's GitHub round trips: {closed_at} vs {}",
        attached_at + RECHECK_MS
    );
    assert!(agent
        .log()
        .iter()
        .any(|e| matches!(e, AgentEvent::Error { code, .. } if code == "access-revoked")));
    // Freed at once, no grace: the room hears none.
    world.advance(5).unwrap();
    assert_eq!(presence(&world, doc), (PresenceState::None, None));
    assert_eq!(stored_holder(&world, doc), (1, None));
    assert_eq!(
        room.planner_states().last().map(|(_, p)| p.clone()),
        Some(json!({ "state": "none" }))
    );
}

/// AO-06: two clients of different accounts attach at the same instant: exactly one holds, the
/// other is refused `planner-attached` (4409) naming the holder's login. Several seeds, so both
/// orders happen.
#[test]
fn ao_06_two_clients_racing_to_attach_exactly_one_holds() {
    let mut winners = std::collections::BTreeSet::new();
    for seed in 20..30 {
        // Seeded random latencies, so the two attaches arrive in either order.
        let Setup {
            mut world,
            doc,
            mona,
            lisa,
            ..
        } = setup_with(seed, None);
        let a = world.agent("mona-1", &mona);
        let b = world.agent("lisa-1", &lisa);
        wait_connected(&mut world, &a);
        wait_connected(&mut world, &b);
        a.attach(&doc.to_string());
        b.attach(&doc.to_string());
        let (ra, rb) = (wait_answer(&mut world, &a), wait_answer(&mut world, &b));
        let (winner, loser, loser_answer) = match (&ra, &rb) {
            (Ok(1), Err(_)) => ("mona", &b, rb.clone()),
            (Err(_), Ok(1)) => ("lisa", &a, ra.clone()),
            other => panic!("seed {seed}: exactly one must hold: {other:?}"),
        };
        assert_eq!(
            loser_answer,
            Err(("planner-attached".into(), Some(winner.to_owned()))),
            "seed {seed}"
        );
        assert_eq!(wait_closed(&mut world, loser, 1_000).1, 4409);
        assert_eq!(stored_holder(&world, doc), (1, Some(winner.to_owned())));
        winners.insert(winner);
    }
    assert_eq!(winners.len(), 2, "both orders were exercised: {winners:?}");
}

/// Signs out through the real route; returns the simulated time the response arrived.
fn sign_out(world: &mut World, cookie: &str) -> u64 {
    let cookie = cookie.to_owned();
    let done = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out = done.clone();
    world
        .run_client("sign-out", async move {
            let request = http::Request::post(format!("{SERVER_ORIGIN}/auth/logout"))
                .header("cookie", cookie)
                .header("origin", SERVER_ORIGIN)
                .body(axum::body::Bytes::new())?;
            let response =
                chopin_server::runtime::connector::send(&chopin_sim::TurmoilConnector, request)
                    .await?;
            *out.lock().unwrap() = Some(response.status.as_u16());
            Ok(())
        })
        .unwrap();
    assert_eq!(*done.lock().unwrap(), Some(204));
    world.now_ms()
}

/// "Signing that browser login out … closes the attached connection at once and frees the
/// document": the close (4401) goes out before the sign-out's own response arrives, with no grace.
#[test]
fn sign_out_closes_the_link_at_once_and_frees_the_document() {
    let Setup {
        mut world,
        doc,
        mona,
        lisa,
        mona_cookie,
        lisa_cookie,
        ..
    } = setup(15);
    let room = world.browser("room", &lisa_cookie, &doc.to_string());
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    world.advance(1_000).unwrap();
    let before = world.now_ms();
    let answered = sign_out(&mut world, &mona_cookie);
    let (closed_by_server, _) =
        server_event(&world, before, |p| matches!(p, PlannerEvent::Closed { .. })).unwrap();
    assert!(
        closed_by_server <= answered,
        "closed before the sign-out answered"
    );
    let (_, code, reason) = wait_closed(&mut world, &agent, 1_000);
    assert_eq!((code, reason.as_str()), (4401, "sign-in-required"));
    assert_eq!(presence(&world, doc), (PresenceState::None, None));
    assert_eq!(stored_holder(&world, doc), (1, None));
    // Free for anyone eligible at once.
    let (_, _) = attach(&mut world, "lisa-1", &lisa, doc);
    assert_eq!(stored_holder(&world, doc), (2, Some("lisa".into())));
    let states: Vec<_> = room
        .planner_states()
        .into_iter()
        .map(|(_, p)| p["state"].clone())
        .collect();
    assert_eq!(states, vec!["none", "attached", "none", "attached"]);
    let again = world.agent("mona-2", &mona);
    wait_connected(&mut world, &again);
    again.attach(&doc.to_string());
    // lisa holds it: refused as it stands, before anything else is checked.
    assert_eq!(
        wait_answer(&mut world, &again),
        Err(("planner-attached".into(), Some("lisa".into())))
    );
}

/// AO-15: "When it ends, the ownership is cleared under its generation, so a newer owner is
/// never released by an old timer": mona detaches (grace until U), a writer resets the Planner,
/// lisa attaches at generation 2; when U passes, lisa still holds and nothing is released.
#[test]
fn ao_15_an_old_grace_deadline_does_not_release_a_newer_owner() {
    let Setup {
        mut world,
        doc,
        mona,
        lisa,
        ..
    } = setup(16);
    let (first, _) = attach(&mut world, "mona-1", &mona, doc);
    let until = detach(&mut world, &first);
    // A writer's reset frees the document during mona's grace period.
    let token = lisa.clone();
    world
        .run_client("reset", async move {
            let request =
                http::Request::post(format!("{SERVER_ORIGIN}/api/documents/{doc}/planner/reset"))
                    .header("authorization", format!("Bearer {token}"))
                    .body(axum::body::Bytes::new())?;
            let response =
                chopin_server::runtime::connector::send(&chopin_sim::TurmoilConnector, request)
                    .await?;
            assert_eq!(response.status.as_u16(), 200);
            Ok(())
        })
        .unwrap();
    let (_, _) = attach(&mut world, "lisa-1", &lisa, doc);
    assert_eq!(stored_holder(&world, doc), (2, Some("lisa".into())));
    let released_before = server_events(&world, |p| matches!(p, PlannerEvent::Released { .. }));
    world.advance(until + 1_000 - world.now_ms()).unwrap();
    assert_eq!(
        presence(&world, doc),
        (PresenceState::Attached, Some("lisa".into()))
    );
    assert_eq!(stored_holder(&world, doc), (2, Some("lisa".into())));
    assert_eq!(
        server_events(&world, |p| matches!(p, PlannerEvent::Released { .. })),
        released_before,
        "nothing released at the old deadline"
    );
    // And GraceHold-free: the same holds long after.
    world.advance(GRACE_MS).unwrap();
    assert_eq!(stored_holder(&world, doc), (2, Some("lisa".into())));
}

/// UNA-02..05: a Planner request for a document with nothing attached is refused with the words
/// that name the document and say to connect a client; during a grace period with the machine's
/// words; with a client attached whose owner storage no longer names, the link is closed first
/// (UNA-03) and the request refused the same way.
#[test]
fn una_planner_requests_are_refused_without_an_attached_client() {
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(17);
    let ask = |world: &mut World| -> Result<String, NotAttached> {
        let state = world.server_app().unwrap();
        let out = std::sync::Arc::new(std::sync::Mutex::new(None));
        let o = out.clone();
        world
            .run_client(&format!("ask-{}", world.now_ms()), async move {
                let answer = state.planners.attached_for_request(doc).await;
                *o.lock().unwrap() = Some(answer.map(|h| h.login));
                Ok(())
            })
            .unwrap();
        let answer = out.lock().unwrap().take().unwrap();
        answer
    };
    let url = "/documents/octo/plans/field-notes";
    let nothing = ask(&mut world).unwrap_err();
    assert_eq!(nothing, NotAttached::Nothing);
    assert!(nothing.words(url).contains(url));
    assert!(nothing.words(url).contains("agent connection"));

    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    assert_eq!(ask(&mut world), Ok("mona".into()));
    let until = detach(&mut world, &agent);
    let away = ask(&mut world).unwrap_err();
    assert_eq!(
        away.words(url),
        "@mona's machine is offline, so this message wasn't sent. Send it again when it's back."
    );
    assert!(world.now_ms() < until);

    // Reattach, then an operator clears the owner in storage behind the server's back.
    let (agent, _) = attach(&mut world, "mona-2", &mona, doc);
    let (generation, _) = stored_holder(&world, doc);
    block_on(world.store().release_ownership(doc, generation)).unwrap();
    assert_eq!(ask(&mut world), Err(NotAttached::Nothing));
    let (_, code, reason) = wait_closed(&mut world, &agent, 1_000);
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
}

/// Same seed, same trace: the whole agent scenario replays.
#[test]
fn an_agent_scenario_replays_from_its_seed() {
    let run = |seed| -> Result<String, SimError> {
        let Setup {
            mut world,
            doc,
            mona,
            ..
        } = setup(seed);
        let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
        detach(&mut world, &agent);
        world.advance(GRACE_MS + 10).unwrap();
        Ok(world.trace().hash())
    };
    assert_eq!(run(31).unwrap(), run(31).unwrap());
}

/// UNA-03 / AO-05 at the periodic recheck: an owner that storage no longer names (an operator
/// cleared it) is found at the next recheck and its link closed `access-revoked`, not before.
#[test]
fn ac_18_the_periodic_recheck_closes_a_link_storage_no_longer_names() {
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(18);
    let from = world.now_ms();
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    let (attached_at, _) =
        server_event(&world, from, |p| matches!(p, PlannerEvent::Attached { .. })).unwrap();
    world.advance(1_000).unwrap();
    block_on(world.store().release_ownership(doc, 1)).unwrap();
    world
        .advance(attached_at + RECHECK_MS - 1 - world.now_ms())
        .unwrap();
    assert!(agent.closed().is_none(), "not before the recheck");
    let (closed_at, code, reason) = wait_closed(&mut world, &agent, 1_000);
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(closed_at <= attached_at + RECHECK_MS + 5, "{closed_at}");
}

/// "Signing that browser login out, its expiry, … closes the attached connection at once": with
/// sign-ins lasting 10 minutes, the link is attached 1 ms before the owner's login expires and
/// closed (4401 `sign-in-required`) at that instant, the document freed.
#[test]
fn the_owner_login_expiring_closes_the_link_at_that_instant() {
    let configure: chopin_sim::Configure = std::sync::Arc::new(|c| c.session_max_age_ms = 600_000);
    let mut world = World::with_options(
        19,
        WorldOptions {
            fixed_latency_ms: Some(1),
            configure: Some(configure),
            ..WorldOptions::default()
        },
    );
    let github = world.github().clone();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
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
    world.sign_in("mona").unwrap();
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    let state = world.server_app().unwrap();
    let account = block_on(world.store().account_by_login("mona"))
        .unwrap()
        .unwrap();
    let expires = sim_ms(
        state
            .sign_ins
            .live_login_of(account.id, SIM_EPOCH_MS + world.now_ms() as i64)
            .unwrap()
            .expires_at_ms,
    );
    world.advance(expires - 1 - world.now_ms()).unwrap();
    assert_eq!(presence(&world, doc).0, PresenceState::Attached);
    world.advance(5).unwrap();
    let (closed_at, event) = server_event(&world, expires - 1, |p| {
        matches!(p, PlannerEvent::Closed { .. })
    })
    .unwrap();
    assert_eq!(closed_at, expires);
    assert!(
        matches!(event, PlannerEvent::Closed { code: 4401, .. }),
        "{event:?}"
    );
    assert_eq!(presence(&world, doc), (PresenceState::None, None));
    let (_, code, reason) = wait_closed(&mut world, &agent, 1_000);
    assert_eq!((code, reason.as_str()), (4401, "sign-in-required"));
}

fn heard_error(agent: &Agent, code: &str) -> bool {
    agent
        .log()
        .iter()
        .any(|e| matches!(e, AgentEvent::Error { code: c, .. } if c == code))
}

/// AC-06 ruling: "1009 for an oversized message … The error frame before the close names the
/// fault." A first frame whose header declares 16 MiB — far past what the server reads at all —
/// is answered with `error` `frame-too-large` and close 1009, not dropped without a close.
#[test]
fn ac_06_a_frame_past_what_the_server_reads_is_answered_1009() {
    use chopin_fixtures::agent::masked_frame;
    let Setup {
        mut world, mona, ..
    } = setup(70);
    let agent = world.agent("mona-1", &mona);
    wait_connected(&mut world, &agent);
    agent.send_raw(masked_frame(
        0x1,
        br#"{"type":"attach""#,
        Some(16 * 1024 * 1024),
    ));
    let (_, code, reason) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!((code, reason.as_str()), (1009, "frame-too-large"));
    assert!(heard_error(&agent, "frame-too-large"), "{:?}", agent.log());
}

/// AC-06 ruling: "1008 for every other protocol fault": a text frame that is not UTF-8, sent by
/// an attached client, is answered with `error` `malformed-json` and close 1008, and the account
/// keeps its grace period like after any other fault.
#[test]
fn ac_06_a_text_frame_that_is_not_utf8_is_answered_1008() {
    use chopin_fixtures::agent::masked_frame;
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(71);
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    agent.send_raw(masked_frame(0x1, &[b'{', 0xff, 0xfe, b'}'], None));
    let (_, code, reason) = wait_closed(&mut world, &agent, 5_000);
    assert_eq!((code, reason.as_str()), (1008, "malformed-json"));
    assert!(heard_error(&agent, "malformed-json"), "{:?}", agent.log());
    world.advance(5).unwrap();
    assert_eq!(presence(&world, doc).0, PresenceState::Detached);
}

/// ISO-30: "A child document's Planner ownership is its root's." An attach naming a child — by
/// its id or by its URL nested under the parent's — holds the root's Planner: the root's
/// ownership is claimed and shown, the child's stays untouched, and another account naming the
/// root (or the child) is refused `planner-attached`, naming mona.
#[test]
fn iso_30_an_attach_naming_a_child_holds_its_roots_planner() {
    let Setup {
        mut world,
        doc,
        mona,
        lisa,
        ..
    } = setup(72);
    let child = Uuid::from_u128(0xc41d);
    block_on(world.store().create_document(&NewDocument {
        id: child,
        repo_owner: "octo".into(),
        repo_name: "plans".into(),
        slug: "chapter-one".into(),
        title: "Chapter one".into(),
        created_at_ms: SIM_EPOCH_MS,
        parent_id: Some(doc),
        ..NewDocument::default()
    }))
    .unwrap();
    let (mona_agent, _) = attach(&mut world, "mona-1", &mona, child);
    assert_eq!(mona_agent.answer(), Some(Ok(1)));
    assert_eq!(
        presence(&world, doc),
        (PresenceState::Attached, Some("mona".to_owned()))
    );
    assert_eq!(stored_holder(&world, doc), (1, Some("mona".to_owned())));
    assert_eq!(stored_holder(&world, child), (0, None));
    for (name, locator) in [
        (
            "lisa-1",
            "/documents/octo/plans/field-notes/chapter-one".to_owned(),
        ),
        ("lisa-2", doc.to_string()),
    ] {
        let agent = world.agent(name, &lisa);
        wait_connected(&mut world, &agent);
        agent.attach(&locator);
        assert_eq!(
            wait_answer(&mut world, &agent),
            Err(("planner-attached".to_owned(), Some("mona".to_owned()))),
            "{locator}"
        );
    }
}

/// AO-16 at the last moment: every check passed and storage is claiming the ownership (held up
/// 1 s) when the owner's browser signs out. The attach is refused as an attached link would be
/// closed, and nothing is left claimed.
#[test]
fn ao_16_a_sign_out_while_storage_claims_the_ownership_refuses_the_attach() {
    let claiming = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = claiming.clone();
    let options = chopin_sim::WorldOptions {
        fixed_latency_ms: Some(1),
        hold_store_calls: Some(std::sync::Arc::new(move |_incarnation, method, _write| {
            (method == "claim_ownership").then(|| {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                Box::pin(tokio::time::sleep(std::time::Duration::from_millis(1_000)))
                    as chopin_server::store::instrumented::Hold
            })
        })),
        ..chopin_sim::WorldOptions::default()
    };
    let Setup {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = chopin_sim::cast::cast_with(50, options);
    let agent = world.agent("mona-1", &mona);
    wait_connected(&mut world, &agent);
    agent.attach(&doc.to_string());
    world
        .advance_until(10_000, "the claim is under way", move |_| {
            claiming.load(std::sync::atomic::Ordering::SeqCst)
        })
        .unwrap();
    sign_out(&mut world, &mona_cookie);
    let refused = wait_answer(&mut world, &agent);
    assert!(refused.is_err(), "{refused:?}");
    assert!(server_events(&world, |p| matches!(p, PlannerEvent::Attached { .. })).is_empty());
    assert_eq!(presence(&world, doc).0, PresenceState::None);
    world.advance(2_000).unwrap();
    assert_eq!(stored_holder(&world, doc).1, None);
}

/// AO-17: attachments live in the server process. A restart keeps no link: the client's
/// connection is gone, and with nothing kept for it the new process names no owner.
#[test]
fn ao_17_a_restart_keeps_no_link() {
    let Setup {
        mut world,
        doc,
        mona,
        ..
    } = setup(51);
    let (agent, _) = attach(&mut world, "mona-1", &mona, doc);
    assert_eq!(presence(&world, doc).0, PresenceState::Attached);
    world.apply(&Step::RestartServer).unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 60_000 })
        .unwrap();
    let a = agent.clone();
    world
        .advance_until(10_000, "the link is gone", move |_| {
            a.log().iter().any(|e| {
                matches!(
                    e,
                    AgentEvent::Closed { .. }
                        | AgentEvent::Failed { .. }
                        | AgentEvent::Dropped { .. }
                )
            })
        })
        .unwrap();
    assert_eq!(presence(&world, doc), (PresenceState::None, None));
    assert_eq!(world.server_app().unwrap().planners.attached_count(), 0);
    assert_eq!(stored_holder(&world, doc).1, None);
}
