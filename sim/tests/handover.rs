//! The deploy hand-over in the simulator: a deploy is two server incarnations over one store.
//! The old one cuts every link (`going-away` with `handoverMs`, the hold written to
//! `planner_link_holds`, then the writer lease given back); the new one takes the lease, keeps
//! the owners those holds name (AO-20) and rebuilds each hold, giving a cut's hold its window
//! again from the rebuild (HO-03). Every deadline is checked at both edges: the window's end
//! (measured from the rebuild, not from the write, however late the lease came back), a crash of
//! the rebuilding process inside and after the window (HO-06), a resume before and after the
//! owner's browser sign-in is back (HO-10, HO-11), a second account during the window (AO-10),
//! and a resumable link that dropped with work kept (AO-11, AO-14).

use std::sync::Arc;

use chopin_protocol::agent::TurnStatus;
use chopin_server::observe::PlannerEvent;
use chopin_server::planner::PresenceState;
use chopin_server::store::instrumented::Hold;
use chopin_server::store::{HoldStore, LinkHold, OwnershipStore, RunStore, SignInStore};
use chopin_sim::cast::{block_on, cast, cast_with, Cast};
use chopin_sim::clock::SIM_EPOCH_MS;
use chopin_sim::WorldOptions;
use chopin_sim::{Agent, AgentEvent, Browser, Event, Step, TurnScript, World};
use uuid::Uuid;

/// `HANDOVER_PLANNER_WINDOW_MS` (HO-19 ruling: 60000).
const WINDOW_MS: u64 = 60_000;

fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn(&World) -> bool) {
    world
        .advance_until(within_ms, what, done)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn connect(world: &mut World, name: &str, token: &str) -> Agent {
    let agent = world.agent(name, token);
    let a = agent.clone();
    until(world, 5_000, &format!("{name} connected"), move |_| {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent
}

/// `name` attaches as the owner of `token`, offering `resumable-sessions`; waits for the answer.
fn attach(world: &mut World, name: &str, token: &str, doc: Uuid) -> Agent {
    let agent = connect(world, name, token);
    agent.attach_with_features(&doc.to_string(), &["resumable-sessions"]);
    let a = agent.clone();
    until(world, 10_000, &format!("{name} answered"), move |_| {
        a.answer().is_some()
    });
    agent
}

fn join(world: &mut World, name: &str, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser(name, cookie, &doc.to_string());
    let b = browser.clone();
    until(world, 5_000, &format!("{name} joined"), move |_| {
        !b.heard().is_empty()
    });
    browser
}

/// mona's client attached with a session kept after its turn for a live run: what a cut keeps.
fn attached_with_a_kept_session(c: &mut Cast) -> (Agent, Browser, String) {
    let doc = c.doc;
    let agent = attach(&mut c.world, "mona-1", &c.mona.clone(), doc);
    assert!(agent.answer().unwrap().is_ok(), "{:?}", agent.log());
    agent.script(
        TurnScript::new()
            .started()
            .await_turn()
            .runs("running")
            .end(TurnStatus::Completed),
    );
    let room = join(&mut c.world, "mona-room", &c.mona_cookie.clone(), doc);
    room.send_chat("go", "@chopin start the rollout");
    until(&mut c.world, 10_000, "the session is kept", move |w| {
        w.server_app()
            .is_some_and(|app| app.turns.kept_session(doc).is_some())
    });
    let session = c
        .world
        .server_app()
        .unwrap()
        .turns
        .kept_session(doc)
        .unwrap();
    (agent, room, session)
}

fn holds(world: &World) -> Vec<LinkHold> {
    block_on(world.store().link_holds()).unwrap()
}

fn planner_events(world: &World) -> Vec<(u64, PlannerEvent)> {
    world
        .trace()
        .events
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Planner(p) => Some((e.at_ms, p)),
            _ => None,
        })
        .collect()
}

/// When (simulated ms) the last hold of `doc` was rebuilt, and until when its window runs
/// (simulated ms), from the server's events.
fn rebuilt(world: &World, doc: Uuid) -> (u64, Option<u64>) {
    planner_events(world)
        .into_iter()
        .rev()
        .find_map(|(at, p)| match p {
            PlannerEvent::HoldRebuilt {
                document, until_ms, ..
            } if document == doc => Some((at, until_ms.map(|u| (u - SIM_EPOCH_MS) as u64))),
            _ => None,
        })
        .expect("the hold was rebuilt")
}

fn presence(world: &World, doc: Uuid) -> (PresenceState, Option<String>) {
    let p = world.server_app().unwrap().planners.presence(doc);
    (p.state, p.login)
}

fn stop(world: &mut World) {
    world
        .apply(&Step::StopServer { within_ms: 60_000 })
        .unwrap();
}

fn start(world: &mut World) {
    world.apply(&Step::StartServer).unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 60_000 })
        .unwrap();
}

fn error_codes(agent: &Agent) -> Vec<String> {
    agent
        .log()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::Error { code, .. } => Some(code),
            _ => None,
        })
        .collect()
}

#[test]
fn ho_02_ho_17_the_cut_writes_the_hold_with_its_window_then_gives_the_lease_back_and_posts_nothing()
{
    let mut c = cast(21, Some(1));
    let doc = c.doc;
    let (agent, room, session) = attached_with_a_kept_session(&mut c);
    let chat_before = room.chat_messages().len();
    stop(&mut c.world);

    // The link heard going-away, then 1001 (HO-17).
    assert_eq!(error_codes(&agent), vec!["going-away".to_owned()]);
    let (_, code, reason) = agent.closed().expect("closed");
    assert_eq!((code, reason.as_str()), (1001, "going-away"));
    // The hold: the sessions the client holds, handover_until = the write + the window (HO-02).
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.document_id, doc);
    assert_eq!(row.login, "mona");
    assert!(row.held.contains(&session), "{}", row.held);
    assert_eq!(
        row.handover_until_ms,
        Some(row.written_at_ms + WINDOW_MS as i64)
    );
    // Written by the stopping incarnation before it gave the lease back, which came last.
    let writes: Vec<_> = c
        .world
        .store_writes()
        .into_iter()
        .filter(|w| w.incarnation == 1)
        .map(|w| w.method)
        .collect();
    let put = writes
        .iter()
        .position(|m| *m == "put_link_hold")
        .expect("written");
    let released = writes
        .iter()
        .position(|m| *m == "release_writer_lease")
        .expect("released");
    assert!(put < released, "{writes:?}");
    assert_eq!(writes.last(), Some(&"release_writer_lease"));
    // No Chat line about the links or the runs (HO-17), and no grace period, no release.
    assert_eq!(room.chat_messages().len(), chat_before);
    assert!(!planner_events(&c.world).iter().any(|(_, p)| matches!(
        p,
        PlannerEvent::GraceStarted { .. } | PlannerEvent::Released { .. }
    )));
}

#[test]
fn ho_03_ho_07_ho_13_the_window_counts_from_the_rebuild_shown_attached_and_ends_disconnected_at_its_millisecond(
) {
    let mut c = cast(22, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    let written_at = holds(&c.world)[0].written_at_ms;
    // The next process comes up 20 s later: the window is not shortened by it.
    c.world.advance(20_000).unwrap();
    start(&mut c.world);
    let (at, until) = rebuilt(&c.world, doc);
    let until = until.expect("a cut's hold gets a window");
    assert_eq!(until, at + WINDOW_MS, "counted from the rebuild (HO-03)");
    assert!(
        (until as i64 + SIM_EPOCH_MS) > written_at + WINDOW_MS as i64 + 19_000,
        "not from the write"
    );
    // HO-05: the row lost its window before the hold showed; the owner was kept (AO-20).
    assert_eq!(holds(&c.world)[0].handover_until_ms, None);
    let owner = block_on(c.world.store().ownership(doc)).unwrap();
    assert_eq!(owner.holder.map(|h| h.login), Some("mona".to_owned()));

    // HO-07: shown attached, with its login, until the window ends; 1 ms before the end still.
    c.world.advance(until - 1 - c.world.now_ms()).unwrap();
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Attached, Some("mona".to_owned()))
    );
    assert!(!planner_events(&c.world)
        .iter()
        .any(|(_, p)| matches!(p, PlannerEvent::HandoverMissed { .. })));
    // 1 ms after the end with no resume: disconnected, announced, the miss logged with its
    // cause. (A restarted host's timers fire on its own millisecond ticks, which may fall up to
    // 1 ms after the clock's reading of the deadline: hence T+1, as the guide's edges are.)
    c.world.advance(2).unwrap();
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Disconnected, Some("mona".to_owned()))
    );
    let missed: Vec<_> = planner_events(&c.world)
        .into_iter()
        .filter_map(|(at, p)| match p {
            PlannerEvent::HandoverMissed { cause, .. } => Some((at, cause)),
            _ => None,
        })
        .collect();
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert!(
        missed[0].0 >= until && missed[0].0 <= until + 1,
        "{missed:?} vs {until}"
    );
    assert_eq!(missed[0].1, "the client was not back");
    // The hold is kept with no deadline: nothing releases it later (AO-14).
    c.world.advance(10 * WINDOW_MS).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    assert_eq!(holds(&c.world).len(), 1);
}

#[test]
fn ho_03_a_late_lease_release_takes_nothing_from_the_window() {
    // The stopping process's lease release is held up 30 s (a slow database): the next process
    // can take the lease only after it, and still gives the whole window from its rebuild.
    let options = WorldOptions {
        fixed_latency_ms: Some(1),
        hold_store_calls: Some(Arc::new(|incarnation, method, _write| {
            (incarnation == 1 && method == "release_writer_lease").then(|| {
                Box::pin(tokio::time::sleep(std::time::Duration::from_millis(30_000))) as Hold
            })
        })),
        ..WorldOptions::default()
    };
    let mut c = cast_with(23, options);
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    let written_at = holds(&c.world)[0].written_at_ms - SIM_EPOCH_MS;
    start(&mut c.world);
    let (at, until) = rebuilt(&c.world, doc);
    assert!(
        at as i64 >= written_at + 30_000,
        "rebuilt after the late release"
    );
    assert_eq!(until, Some(at + WINDOW_MS));
    c.world
        .advance(at + WINDOW_MS - 1 - c.world.now_ms())
        .unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
    c.world.advance(2).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
}

#[test]
fn ho_06_a_process_started_after_the_rebuilding_one_crashed_inside_the_window_finds_it_disconnected(
) {
    let mut c = cast(24, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let (_, until) = rebuilt(&c.world, doc);
    assert!(until.is_some());
    // Inside the window, the rebuilding process crashes; the next one gives no window.
    c.world.advance(WINDOW_MS / 2).unwrap();
    c.world.apply(&Step::CrashServer).unwrap();
    start(&mut c.world);
    let (_, until) = rebuilt(&c.world, doc);
    assert_eq!(until, None, "only the rebuilding process gives the window");
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Disconnected, Some("mona".to_owned()))
    );
}

#[test]
fn ho_06_a_process_started_after_the_rebuilding_one_crashed_after_the_window_finds_it_disconnected()
{
    let mut c = cast(25, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    c.world.advance(WINDOW_MS + 1).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    c.world.apply(&Step::CrashServer).unwrap();
    start(&mut c.world);
    assert_eq!(rebuilt(&c.world, doc).1, None);
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
}

#[test]
fn ao_19_ho_12_a_client_resuming_inside_the_window_takes_its_sessions_back() {
    let mut c = cast(26, Some(1));
    let doc = c.doc;
    let (_, _, session) = attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let (at, _) = rebuilt(&c.world, doc);
    // mona's browser comes back (its cookie restores the sign-in), then her client.
    join(&mut c.world, "mona-room-2", &c.mona_cookie.clone(), doc);
    let agent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(agent.answer(), Some(Ok(1)), "the same generation");
    agent.resume(true);
    let a = agent.clone();
    until(&mut c.world, 5_000, "resumed", move |_| {
        !a.frames_of("resumed").is_empty()
    });
    let resumed = &agent.frames_of("resumed")[0].1;
    assert!(resumed.contains(&session), "{resumed}");
    assert!(resumed.contains("\"inputs\":[]"), "HO-15: {resumed}");
    // The resume ended the window (HO-12): attached, no miss at the window's end, the row gone.
    assert!(holds(&c.world).is_empty());
    c.world
        .advance(at + WINDOW_MS + 1 - c.world.now_ms())
        .unwrap();
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Attached, Some("mona".to_owned()))
    );
    assert!(!planner_events(&c.world)
        .iter()
        .any(|(_, p)| matches!(p, PlannerEvent::HandoverMissed { .. })));
    assert_eq!(
        c.world.server_app().unwrap().turns.kept_session(doc),
        Some(session),
        "the session is kept for the next turn, on the new link"
    );
}

#[test]
fn ho_10_a_resume_before_the_sign_in_is_back_waits_and_gets_its_sessions_when_it_returns() {
    let mut c = cast(27, Some(1));
    let doc = c.doc;
    let (_, _, session) = attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    // The client is back first: no browser of mona's has reached the new process.
    let agent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(agent.answer(), Some(Ok(1)));
    agent.resume(true);
    c.world.advance(10_000).unwrap();
    assert!(agent.frames_of("resumed").is_empty(), "it waits");
    assert!(agent.closed().is_none(), "the link is kept");
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Attached, Some("mona".to_owned()))
    );
    // The browser comes back: the sessions are handed back at once.
    let cookie = c.mona_cookie.clone();
    join(&mut c.world, "mona-room-2", &cookie, doc);
    let a = agent.clone();
    until(&mut c.world, 1_000, "resumed", move |_| {
        !a.frames_of("resumed").is_empty()
    });
    assert!(agent.frames_of("resumed")[0].1.contains(&session));
    assert!(error_codes(&agent).is_empty());
}

#[test]
fn ho_11_a_resume_still_without_the_sign_in_when_the_window_ends_is_refused_unavailable_at_its_millisecond(
) {
    let mut c = cast(28, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let (_, until) = rebuilt(&c.world, doc);
    let until = until.unwrap();
    let agent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    agent.resume(true);
    c.world.advance(until - 1 - c.world.now_ms()).unwrap();
    assert!(
        agent.closed().is_none(),
        "1 ms before the window ends it still waits"
    );
    c.world.advance(5).unwrap();
    assert_eq!(error_codes(&agent), vec!["unavailable".to_owned()]);
    let (closed_at, code, reason) = agent.closed().expect("closed");
    assert_eq!(
        (code, reason.as_str()),
        (1013, "unavailable"),
        "never sign-in-required"
    );
    assert!(
        closed_at >= until && closed_at <= until + 1,
        "{closed_at} vs {until}"
    );
    let missed = planner_events(&c.world)
        .into_iter()
        .find_map(|(_, p)| match p {
            PlannerEvent::HandoverMissed { cause, .. } => Some(cause),
            _ => None,
        });
    assert_eq!(
        missed.as_deref(),
        Some("the owner's browser sign-in was not back")
    );
}

#[test]
fn ao_10_another_account_during_the_window_is_refused_naming_the_holder() {
    let mut c = cast(29, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    // lisa (an admin, her browser back) tries to take the Planner during mona's window.
    join(&mut c.world, "lisa-room", &c.lisa_cookie.clone(), doc);
    let lisa = attach(&mut c.world, "lisa-1", &c.lisa.clone(), doc);
    assert_eq!(
        lisa.answer(),
        Some(Err((
            "planner-attached".to_owned(),
            Some("mona".to_owned())
        )))
    );
    // And after the window, with the hold disconnected, still refused.
    c.world.advance(WINDOW_MS + 1).unwrap();
    let lisa = attach(&mut c.world, "lisa-2", &c.lisa.clone(), doc);
    assert_eq!(
        lisa.answer(),
        Some(Err((
            "planner-attached".to_owned(),
            Some("mona".to_owned())
        )))
    );
}

#[test]
fn ho_09_a_message_to_the_planner_during_the_window_is_refused_still_connecting() {
    let mut c = cast(30, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let room = join(&mut c.world, "lisa-room", &c.lisa_cookie.clone(), doc);
    room.send_chat("r-1", "@chopin are you there?");
    let r = room.clone();
    until(&mut c.world, 5_000, "answered", move |_| {
        !r.replies("r-1").is_empty()
    });
    let reply = &room.replies("r-1")[0].message;
    assert_eq!(reply["type"], "chat:refused", "{reply}");
    assert_eq!(
        reply["message"],
        "Still connecting to @mona's machine, so this message wasn't sent. Send it again in a moment.",
        "{reply}"
    );
    // After the window: the offline words.
    c.world.advance(WINDOW_MS).unwrap();
    room.send_chat("r-2", "@chopin are you there now?");
    let r = room.clone();
    until(&mut c.world, 5_000, "answered", move |_| {
        !r.replies("r-2").is_empty()
    });
    let reply = &room.replies("r-2")[0].message;
    assert_eq!(
        reply["message"],
        "@mona's machine is offline, so this message wasn't sent. Send it again when it's back.",
        "{reply}"
    );
}

#[test]
fn ao_11_ao_14_atm_33_a_resumable_link_dropped_with_work_is_held_with_no_deadline_and_resumed() {
    let mut c = cast(31, Some(1));
    let doc = c.doc;
    let (agent, _, session) = attached_with_a_kept_session(&mut c);
    // The link drops (no close frame).
    agent.script(TurnScript::new().drop_link());
    let grace_ms = 120_000;
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    // No grace period runs (AO-14): long after it would have ended, still held (ATM-33).
    c.world.advance(3 * grace_ms).unwrap();
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Disconnected, Some("mona".to_owned()))
    );
    assert!(!planner_events(&c.world).iter().any(|(_, p)| matches!(
        p,
        PlannerEvent::GraceStarted { .. } | PlannerEvent::Released { .. }
    )));
    // AO-18: the hold is written, with no window.
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].handover_until_ms, None);
    // Nobody else can attach meanwhile (AO-10, AO-11).
    let lisa = attach(&mut c.world, "lisa-1", &c.lisa.clone(), doc);
    assert_eq!(
        lisa.answer(),
        Some(Err((
            "planner-attached".to_owned(),
            Some("mona".to_owned())
        )))
    );
    // The same account takes it back, same generation, its session included.
    let back = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(back.answer(), Some(Ok(1)));
    back.resume(true);
    let b = back.clone();
    until(&mut c.world, 5_000, "resumed", move |_| {
        !b.frames_of("resumed").is_empty()
    });
    assert!(back.frames_of("resumed")[0].1.contains(&session));
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
    assert!(holds(&c.world).is_empty());
}

#[test]
fn ao_12_a_client_that_holds_nothing_to_resume_ends_the_hold() {
    let mut c = cast(32, Some(1));
    let doc = c.doc;
    let (agent, _, _) = attached_with_a_kept_session(&mut c);
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    let back = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    back.resume(false);
    let b = back.clone();
    until(&mut c.world, 5_000, "resumed", move |_| {
        !b.frames_of("resumed").is_empty()
    });
    assert!(back.frames_of("resumed")[0].1.contains("\"sessions\":[]"));
    assert!(holds(&c.world).is_empty());
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
}

#[test]
fn ao_12_a_reset_ends_a_disconnected_hold() {
    let mut c = cast(33, Some(1));
    let doc = c.doc;
    let (agent, _, _) = attached_with_a_kept_session(&mut c);
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    let app = c.world.server_app().unwrap();
    assert!(block_on(app.planners.reset(doc)).unwrap());
    assert_eq!(presence(&c.world, doc).0, PresenceState::None);
    assert!(holds(&c.world).is_empty());
    assert_eq!(
        block_on(c.world.store().ownership(doc)).unwrap().holder,
        None
    );
}

#[test]
fn ao_13_a_link_that_only_went_quiet_is_held_with_its_work_not_ended() {
    let mut c = cast(34, Some(1));
    let doc = c.doc;
    let (agent, _, _) = attached_with_a_kept_session(&mut c);
    // The client stops answering: after the connection timeout (120 s) the link is closed as
    // dropped, and with its session kept the Planner is held, not put in a grace period.
    agent.silence();
    let timeout_ms = 120_000;
    c.world.advance(timeout_ms - 1_000).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    // However long it stays quiet, the hold stands.
    c.world.advance(10 * timeout_ms).unwrap();
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Disconnected, Some("mona".to_owned()))
    );
    assert!(!planner_events(&c.world).iter().any(|(_, p)| matches!(
        p,
        PlannerEvent::GraceStarted { .. } | PlannerEvent::Released { .. }
    )));
    let owner = block_on(c.world.store().ownership(doc)).unwrap();
    assert_eq!(owner.holder.map(|h| h.login), Some("mona".to_owned()));
}

#[test]
fn rt_12_a_resumable_link_that_drops_keeps_its_open_questions_a_plain_one_withdraws_them() {
    for (seed, resumable) in [(35, true), (36, false)] {
        let mut c = cast(seed, Some(1));
        let doc = c.doc;
        let features: &[&str] = if resumable {
            &["resumable-sessions"]
        } else {
            &[]
        };
        let (agent, _, _) = asking(&mut c, features, &[("q-1", "Ship it?")]);
        agent.script(TurnScript::new().drop_link());
        c.world.advance(2_000).unwrap();
        let app = c.world.server_app().unwrap();
        if resumable {
            assert_eq!(
                app.questions.waiting(),
                1,
                "the question waits for the client"
            );
            assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
            let source = block_on(async { app.open.open(doc).await.unwrap().source().await });
            assert!(
                source.contains("Ship it?"),
                "the Decision stays open: {source}"
            );
        } else {
            assert_eq!(presence(&c.world, doc).0, PresenceState::Detached);
            let source = block_on(async { app.open.open(doc).await.unwrap().source().await });
            assert!(!source.contains("Ship it?"), "withdrawn (RT-11): {source}");
        }
    }
}

/// The `run:card` frames `browser` heard, in order: (runId, status, disconnected).
fn cards_heard(browser: &Browser) -> Vec<(String, String, bool)> {
    browser
        .heard()
        .into_iter()
        .filter(|h| h.message["type"] == "run:card")
        .map(|h| {
            let card = &h.message["run"];
            (
                card["runId"].as_str().unwrap_or_default().to_owned(),
                card["status"].as_str().unwrap_or_default().to_owned(),
                card["disconnected"].as_bool().unwrap_or_default(),
            )
        })
        .collect()
}

/// The document's cards as the runs route serves them: (runId, status, disconnected).
fn cards_served(world: &World, doc: Uuid) -> Vec<(String, String, bool)> {
    let app = world.server_app().unwrap();
    block_on(app.runs.cards(doc))
        .unwrap()
        .iter()
        .map(|card| {
            (
                card["runId"].as_str().unwrap_or_default().to_owned(),
                card["status"].as_str().unwrap_or_default().to_owned(),
                card["disconnected"].as_bool().unwrap_or_default(),
            )
        })
        .collect()
}

fn run_statuses(world: &World, doc: Uuid) -> Vec<String> {
    block_on(world.store().runs(doc))
        .unwrap()
        .into_iter()
        .map(|r| r.status)
        .collect()
}

#[test]
fn ho_08_ses_13_a_deploy_with_a_live_run_brings_it_back_live_not_stopped() {
    let mut c = cast(37, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    assert_eq!(run_statuses(&c.world, doc), ["running"]);
    stop(&mut c.world);
    // The cut stops nothing (HO-17).
    assert_eq!(run_statuses(&c.world, doc), ["running"]);
    start(&mut c.world);
    rebuilt(&c.world, doc);
    // The rebuilt hold's owner was kept, so its run comes back live, not stopped (HO-08); in
    // the window it is shown attached, so the card carries no marker.
    assert_eq!(run_statuses(&c.world, doc), ["running"]);
    assert_eq!(
        cards_served(&c.world, doc),
        [("run-1".to_owned(), "running".to_owned(), false)]
    );
    // A later process whose hold's owner is not kept (the owner's sign-in ended, so its
    // credential went) stops it as any other (SES-13).
    let mona = block_on(c.world.store().ownership(doc))
        .unwrap()
        .holder
        .unwrap();
    assert!(block_on(
        c.world
            .store()
            .delete_login_credential(mona.browser_login_id)
    )
    .unwrap());
    c.world.apply(&Step::CrashServer).unwrap();
    start(&mut c.world);
    assert_eq!(run_statuses(&c.world, doc), ["stopped"]);
}

#[test]
fn ho_13_atm_34_when_the_window_ends_live_cards_are_marked_disconnected_and_a_resume_unmarks_them()
{
    let mut c = cast(38, Some(1));
    let doc = c.doc;
    let (_, _, session) = attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let window_end = rebuilt(&c.world, doc).1.expect("a window");
    let room = join(&mut c.world, "mona-room-2", &c.mona_cookie.clone(), doc);
    let chat_before = room.chat_messages().len();

    // 1 ms before the window's end: attached, no marker anywhere.
    c.world.advance(window_end - 1 - c.world.now_ms()).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
    assert!(cards_heard(&room).is_empty(), "{:?}", cards_heard(&room));
    assert_eq!(
        cards_served(&c.world, doc),
        [("run-1".to_owned(), "running".to_owned(), false)]
    );
    // At its end (its millisecond tick, see HO-13 above): disconnected, and the room is told
    // the live card again with its last status, marked; the route serves it so; storage keeps
    // it running; Chat says nothing.
    c.world.advance(2).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    let r = room.clone();
    until(&mut c.world, 1_000, "the marked card", move |_| {
        !cards_heard(&r).is_empty()
    });
    assert_eq!(
        cards_heard(&room),
        [("run-1".to_owned(), "running".to_owned(), true)]
    );
    assert_eq!(
        cards_served(&c.world, doc),
        [("run-1".to_owned(), "running".to_owned(), true)]
    );
    assert_eq!(run_statuses(&c.world, doc), ["running"]);
    assert_eq!(room.chat_messages().len(), chat_before);

    // mona's client comes back and resumes: the marker goes.
    let agent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(agent.answer(), Some(Ok(1)));
    agent.resume(true);
    let a = agent.clone();
    until(&mut c.world, 5_000, "resumed", move |_| {
        !a.frames_of("resumed").is_empty()
    });
    assert!(agent.frames_of("resumed")[0].1.contains(&session));
    let r = room.clone();
    until(&mut c.world, 1_000, "the unmarked card", move |_| {
        cards_heard(&r).len() == 2
    });
    assert_eq!(
        cards_heard(&room)[1],
        ("run-1".to_owned(), "running".to_owned(), false)
    );
    assert_eq!(
        cards_served(&c.world, doc),
        [("run-1".to_owned(), "running".to_owned(), false)]
    );
    assert_eq!(room.chat_messages().len(), chat_before);
}

/// mona's resumable client asks two questions in a turn (`q-1` "Ship it?", `q-2` "Roll
/// back?"), ends the turn with the session kept for them, and its link drops: held
/// disconnected with both questions waiting. The room, and the session id.
fn asked_two_and_dropped(c: &mut Cast) -> (Browser, String) {
    let doc = c.doc;
    let questions = [("q-1", "Ship it?"), ("q-2", "Roll back?")];
    let (agent, room, session) = asking(c, &["resumable-sessions"], &questions);
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    (room, session)
}

/// mona's client attaches offering `features`, asks `questions` (request id, confirmation
/// title) in a turn and ends the turn, the session kept for them once their cards are placed.
/// The client, mona's room and the session id.
fn asking(c: &mut Cast, features: &[&str], questions: &[(&str, &str)]) -> (Agent, Browser, String) {
    let doc = c.doc;
    let agent = connect(&mut c.world, "mona-1", &c.mona.clone());
    agent.attach_with_features(&doc.to_string(), features);
    let a = agent.clone();
    until(&mut c.world, 5_000, "attached", move |_| {
        a.answer().is_some()
    });
    agent.script(TurnScript::new().started().await_turn());
    let room = join(&mut c.world, "mona-room", &c.mona_cookie.clone(), doc);
    room.send_chat("go", "@chopin ask us");
    let a = agent.clone();
    until(&mut c.world, 5_000, "turn", move |_| {
        !a.frames_of("turn").is_empty()
    });
    let session = agent.frames_of("start")[0].1.clone();
    let turn = agent.frames_of("turn")[0]
        .1
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    for (id, title) in questions {
        agent.send_text(&format!(
            r#"{{"type":"input-request","sessionId":"{session}","requestId":"{id}","turnId":"{turn}","input":{{"kind":"confirm","title":"{title}"}}}}"#
        ));
    }
    agent.send_text(&format!(
        r#"{{"type":"turn-end","turnId":"{turn}","status":"completed"}}"#
    ));
    let count = questions.len();
    until(
        &mut c.world,
        5_000,
        "the cards placed, the session kept",
        move |w| {
            let app = w.server_app().unwrap();
            app.turns.kept_session(doc).is_some() && decision_ids(w, doc).len() == count
        },
    );
    (agent, room, session)
}

/// The document's Decisions: (id, title, open).
fn decisions_of(world: &World, doc: Uuid) -> Vec<(String, String, bool)> {
    use chopin_document::blocks::blocks;
    use chopin_document::decision::{decisions, DecisionState};
    let app = world.server_app().unwrap();
    let source = block_on(async move { app.open.open(doc).await.unwrap().source().await });
    decisions(&source, &blocks(&source))
        .into_iter()
        .map(|(_, d)| (d.id, d.question, d.state == DecisionState::Open))
        .collect()
}

fn decision_ids(world: &World, doc: Uuid) -> Vec<String> {
    decisions_of(world, doc).into_iter().map(|d| d.0).collect()
}

/// The id of the Decision titled `title`.
fn card(world: &World, doc: Uuid, title: &str) -> String {
    decisions_of(world, doc)
        .into_iter()
        .find(|d| d.1 == title)
        .unwrap_or_else(|| panic!("no Decision {title:?}"))
        .0
}

/// mona approves the Decision titled `title` from `room`, and waits for the room's answer.
fn approve(world: &mut World, room: &Browser, doc: Uuid, title: &str, request: &str) {
    let decision = card(world, doc, title);
    room.send_json(serde_json::json!({
        "type": "decision:answer", "requestId": request, "decision": decision, "options": [0]
    }));
    let (r, id) = (room.clone(), request.to_owned());
    until(world, 5_000, "the answer taken", move |_| {
        r.heard()
            .iter()
            .any(|h| h.message["requestId"] == id && h.message["type"] == "decision:answered")
    });
}

/// The `input-result` frames `agent` heard, as JSON.
fn input_results(agent: &Agent) -> Vec<serde_json::Value> {
    agent
        .frames_of("input-result")
        .into_iter()
        .map(|(_, d)| serde_json::from_str(&d).unwrap())
        .collect()
}

/// mona's client comes back and resumes everything kept; the `resumed` frame, as JSON.
fn resume_all(world: &mut World, name: &str, token: &str, doc: Uuid) -> (Agent, serde_json::Value) {
    let agent = attach(world, name, token, doc);
    assert_eq!(agent.answer(), Some(Ok(1)), "{:?}", agent.log());
    agent.resume(true);
    let a = agent.clone();
    until(world, 5_000, "resumed", move |_| {
        !a.frames_of("resumed").is_empty()
    });
    let resumed = serde_json::from_str(&agent.frames_of("resumed")[0].1).unwrap();
    (agent, resumed)
}

#[test]
fn ho_16_atm_34_an_answer_given_while_the_link_is_away_is_kept_and_delivered_once_after_resumed() {
    let mut c = cast(37, Some(1));
    let doc = c.doc;
    let (room, session) = asked_two_and_dropped(&mut c);
    // Both Decisions stay open and answerable while the client is away (ATM-34).
    assert!(decisions_of(&c.world, doc).iter().all(|d| d.2));
    approve(&mut c.world, &room, doc, "Ship it?", "a-1");
    // AO-18: the hold's row keeps the answer owed, and the questions the client waits on.
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1);
    let held: serde_json::Value = serde_json::from_str(&rows[0].held).unwrap();
    assert_eq!(held["answers"][0]["requestId"], "q-1", "{held}");
    assert_eq!(held["answers"][0]["status"], "answered", "{held}");
    let asked: Vec<&str> = held["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["requestId"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["q-1", "q-2"], "{held}");

    let (back, resumed) = resume_all(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(resumed["sessions"], serde_json::json!([session]));
    // Still waited on in this process: the one not answered yet.
    assert_eq!(resumed["inputs"], serde_json::json!(["q-2"]), "{resumed}");
    let b = back.clone();
    until(&mut c.world, 5_000, "the owed answer", move |_| {
        !input_results(&b).is_empty()
    });
    c.world.advance(5_000).unwrap();
    let results = input_results(&back);
    assert_eq!(results.len(), 1, "exactly once: {results:?}");
    assert_eq!(results[0]["requestId"], "q-1");
    assert_eq!(results[0]["answer"]["confirmed"], true);
    // The resumed `resumed` came before the owed answer.
    let kinds: Vec<String> = back.frames().into_iter().map(|f| f.1).collect();
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(at("resumed") < at("input-result"), "{kinds:?}");
    // The question still waited on is answered on the new link.
    approve(&mut c.world, &room, doc, "Roll back?", "a-2");
    let b = back.clone();
    until(&mut c.world, 5_000, "q-2's answer", move |_| {
        input_results(&b).len() == 2
    });
    assert_eq!(input_results(&back)[1]["requestId"], "q-2");
    assert!(holds(&c.world).is_empty());
}

#[test]
fn ho_15_ho_16_across_a_deploy_the_owed_answer_is_delivered_once_and_no_question_is_waited_on() {
    let mut c = cast(38, Some(1));
    let doc = c.doc;
    let (room, session) = asked_two_and_dropped(&mut c);
    approve(&mut c.world, &room, doc, "Ship it?", "a-1");
    stop(&mut c.world);
    start(&mut c.world);
    assert_eq!(
        presence(&c.world, doc),
        (PresenceState::Disconnected, Some("mona".to_owned())),
        "a dropped link's hold is rebuilt disconnected"
    );
    join(&mut c.world, "mona-room-2", &c.mona_cookie.clone(), doc);
    let (back, resumed) = resume_all(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(resumed["sessions"], serde_json::json!([session]));
    // HO-15: nothing in this process waits on the questions; the unanswered one stays open.
    assert_eq!(resumed["inputs"], serde_json::json!([]), "{resumed}");
    assert!(decisions_of(&c.world, doc)
        .iter()
        .any(|d| d.1 == "Roll back?" && d.2));
    // HO-16: the answer given while the link was down, once.
    let b = back.clone();
    until(&mut c.world, 5_000, "the owed answer", move |_| {
        !input_results(&b).is_empty()
    });
    c.world.advance(5_000).unwrap();
    let results = input_results(&back);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["requestId"], "q-1");
    assert!(holds(&c.world).is_empty());
}

#[test]
fn ao_12_a_stop_that_withdraws_the_last_question_kept_ends_the_hold_and_the_grace_period_runs() {
    let mut c = cast(39, Some(1));
    let doc = c.doc;
    let (room, _) = asked_two_and_dropped(&mut c);
    room.send_json(serde_json::json!({ "type": "planner:stop" }));
    let r = room.clone();
    until(&mut c.world, 10_000, "stopped", move |_| {
        r.heard()
            .iter()
            .any(|h| h.message["type"] == "planner:stopped")
    });
    // Both questions were all the hold kept: they are withdrawn and the grace period runs.
    assert!(decision_ids(&c.world, doc).is_empty());
    assert_eq!(presence(&c.world, doc).0, PresenceState::Detached);
    assert!(holds(&c.world).is_empty());
    assert!(planner_events(&c.world)
        .iter()
        .any(|(_, p)| matches!(p, PlannerEvent::GraceStarted { how, .. } if how == "emptied")));
    // The grace period ends as any does: the Planner is free.
    c.world.advance(120_000 + 1_000).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::None);
}

#[test]
fn ao_12_a_reset_withdraws_the_questions_a_disconnected_hold_kept() {
    let mut c = cast(40, Some(1));
    let doc = c.doc;
    let (_room, _) = asked_two_and_dropped(&mut c);
    // A writer resets the Planner over HTTP.
    post_as(
        &mut c.world,
        &c.lisa.clone(),
        &format!("/api/documents/{doc}/planner/reset"),
        "",
    );
    until(&mut c.world, 5_000, "withdrawn", move |w| {
        decision_ids(w, doc).is_empty()
    });
    assert_eq!(c.world.server_app().unwrap().questions.waiting(), 0);
}

fn chat_texts(room: &Browser) -> Vec<String> {
    room.chat_messages()
        .iter()
        .filter_map(|h| h.message["text"].as_str().map(str::to_owned))
        .collect()
}

/// The `requestId` of the last `stop` `agent` heard.
fn last_stop(agent: &Agent) -> Option<String> {
    let (_, detail) = agent.frames_of("stop").pop()?;
    let frame: serde_json::Value = serde_json::from_str(&detail).ok()?;
    frame["requestId"].as_str().map(str::to_owned)
}

/// The held Stop reaches the client that is back, after `resumed`; its answer is recorded.
fn stop_heard_after_resume(c: &mut Cast, room: &Browser, session: &str) {
    let doc = c.doc;
    let (back, resumed) = resume_all(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(resumed["sessions"], serde_json::json!([session]));
    let b = back.clone();
    until(&mut c.world, 5_000, "the held stop", move |_| {
        last_stop(&b).is_some()
    });
    let kinds: Vec<String> = back.frames().into_iter().map(|f| f.1).collect();
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(at("resumed") < at("stop"), "{kinds:?}");
    assert_eq!(back.frames_of("stop").len(), 1);
    let request = last_stop(&back).unwrap();
    back.send_text(
        &serde_json::json!({ "type": "control-result", "requestId": request, "ok": true })
            .to_string(),
    );
    let r = room.clone();
    until(&mut c.world, 5_000, "the pause recorded", move |_| {
        chat_texts(&r).iter().any(|t| t.starts_with("@mona paused"))
    });
    assert!(holds(&c.world).is_empty());
}

#[test]
fn atm_35_a_stop_pressed_while_the_link_is_away_is_held_and_sent_when_it_resumes() {
    let mut c = cast(41, Some(1));
    let doc = c.doc;
    let (agent, room, session) = attached_with_a_kept_session(&mut c);
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    room.send_json(serde_json::json!({ "type": "planner:stop" }));
    let r = room.clone();
    until(&mut c.world, 5_000, "stopped", move |_| {
        r.heard()
            .iter()
            .any(|h| h.message["type"] == "planner:stopped")
    });
    // The Chat line recording the Stop says it is held.
    let lines = chat_texts(&room);
    assert!(
        lines
            .iter()
            .any(|t| t.starts_with("@mona asked to pause") && t.contains("held until it is back")),
        "{lines:?}"
    );
    // Kept with the hold (AO-18), which a run keeps: still disconnected, not emptied.
    let held: serde_json::Value = serde_json::from_str(&holds(&c.world)[0].held).unwrap();
    assert_eq!(held["stops"][0]["login"], "mona", "{held}");
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    stop_heard_after_resume(&mut c, &room, &session);
}

#[test]
fn atm_35_a_stop_sent_and_unanswered_when_the_link_dropped_is_held() {
    let mut c = cast(42, Some(1));
    let doc = c.doc;
    let (agent, room, session) = attached_with_a_kept_session(&mut c);
    room.send_json(serde_json::json!({ "type": "planner:stop" }));
    let a = agent.clone();
    until(&mut c.world, 5_000, "the stop sent", move |_| {
        last_stop(&a).is_some()
    });
    // The client goes away without answering it.
    agent.script(TurnScript::new().drop_link());
    let r = room.clone();
    until(&mut c.world, 15_000, "stopped", move |_| {
        r.heard()
            .iter()
            .any(|h| h.message["type"] == "planner:stopped")
    });
    let lines = chat_texts(&room);
    assert!(
        lines
            .iter()
            .any(|t| t.contains("went away before it answered, so the Stop is held")),
        "{lines:?}"
    );
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    stop_heard_after_resume(&mut c, &room, &session);
}

#[test]
fn ho_15_an_answer_to_a_question_waited_on_before_a_restart_starts_a_turn_once_a_planner_is_attached(
) {
    let mut c = cast(43, Some(1));
    let doc = c.doc;
    let (_, session) = asked_two_and_dropped(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let room = join(&mut c.world, "mona-room-2", &c.mona_cookie.clone(), doc);
    // Answered while no Planner is attached: taken, and nothing starts yet.
    approve(&mut c.world, &room, doc, "Roll back?", "a-1");
    c.world.advance(5_000).unwrap();
    assert!(!c.world.server_app().unwrap().turns.is_running(doc));
    // Once the client is back, a turn takes the answer, on the session it resumed.
    let (back, resumed) = resume_all(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(resumed["inputs"], serde_json::json!([]));
    let b = back.clone();
    until(&mut c.world, 5_000, "a turn for the answer", move |_| {
        !b.frames_of("turn").is_empty()
    });
    let turns = back.frames_of("turn");
    assert_eq!(turns.len(), 1);
    assert!(turns[0].1.contains("Roll back?"), "{}", turns[0].1);
    assert!(
        back.frames_of("start").is_empty(),
        "the kept session {session} takes it"
    );
    // An answer to a question nothing ever waited on starts nothing: only the one taken once.
    c.world.advance(5_000).unwrap();
    assert_eq!(back.frames_of("turn").len(), 1);
}

/// A deploy whose next process comes up `gap_ms` after the stop: how long after the cut's write
/// the hold was rebuilt, and whether it got a window.
fn deploy_after(gap_ms: u64) -> (i64, Option<u64>) {
    let mut c = cast(44, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    let written_at = holds(&c.world)[0].written_at_ms;
    c.world.advance(gap_ms).unwrap();
    start(&mut c.world);
    let (at, until) = rebuilt(&c.world, doc);
    (SIM_EPOCH_MS + at as i64 - written_at, until)
}

#[test]
fn ho_04_a_hold_rebuilt_one_hour_after_the_cut_gets_its_window_and_one_millisecond_later_none() {
    const HOUR_MS: i64 = 3_600_000;
    // The same deploy is deterministic: measure how long a start takes after the gap, then
    // come up so that the rebuild lands exactly on the hour, and 1 ms past it.
    let probe_gap = 1_000;
    let (probe, _) = deploy_after(probe_gap as u64);
    let startup = probe - probe_gap;
    let on_the_hour = (HOUR_MS - startup) as u64;
    let (after, window) = deploy_after(on_the_hour);
    assert_eq!(after, HOUR_MS, "rebuilt exactly an hour after the write");
    assert!(
        window.is_some(),
        "HO-04: at the hour, the window is still given"
    );
    let (after, window) = deploy_after(on_the_hour + 1);
    assert_eq!(after, HOUR_MS + 1);
    assert_eq!(window, None, "HO-04: past the hour, no window");
}

/// A `POST` to the server with `token`'s bearer; it must answer 200.
fn post_as(world: &mut World, token: &str, path: &str, body: &str) {
    let (token, path, body) = (token.to_owned(), path.to_owned(), body.to_owned());
    world
        .run_client("http", async move {
            let request = http::Request::post(format!("{}{path}", chopin_sim::SERVER_ORIGIN))
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(axum::body::Bytes::from(body))?;
            let response =
                chopin_server::runtime::connector::send(&chopin_sim::TurmoilConnector, request)
                    .await?;
            assert_eq!(response.status.as_u16(), 200, "{path}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn ao_12_archiving_the_document_ends_a_disconnected_hold_and_withdraws_its_questions() {
    let mut c = cast(45, Some(1));
    let doc = c.doc;
    let (_room, _) = asked_two_and_dropped(&mut c);
    post_as(
        &mut c.world,
        &c.lisa.clone(),
        &format!("/api/documents/{doc}/archive"),
        r#"{"archived": true}"#,
    );
    until(&mut c.world, 5_000, "the hold ends", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::None
    });
    until(&mut c.world, 5_000, "withdrawn", move |w| {
        w.server_app().unwrap().questions.waiting() == 0
    });
    assert!(holds(&c.world).is_empty());
    assert_eq!(
        block_on(c.world.store().ownership(doc)).unwrap().holder,
        None
    );
}

#[test]
fn ao_12_the_owner_login_expiring_ends_a_disconnected_hold_at_that_millisecond() {
    let configure: chopin_sim::Configure = Arc::new(|c| c.session_max_age_ms = 600_000);
    let options = WorldOptions {
        fixed_latency_ms: Some(1),
        configure: Some(configure),
        ..WorldOptions::default()
    };
    let mut c = cast_with(46, options);
    let doc = c.doc;
    asked_two_and_dropped(&mut c);
    let app = c.world.server_app().unwrap();
    let account = block_on(c.world.store().account_by_login("mona"))
        .unwrap()
        .unwrap();
    let now = SIM_EPOCH_MS + c.world.now_ms() as i64;
    let expires = (app
        .sign_ins
        .live_login_of(account.id, now)
        .unwrap()
        .expires_at_ms
        - SIM_EPOCH_MS) as u64;
    // 1 ms before the expiry the hold stands, with nothing withdrawn.
    c.world.advance(expires - 1 - c.world.now_ms()).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    assert_eq!(app.questions.waiting(), 2);
    // Just past it (the expiry timer's own millisecond tick), the hold is gone.
    c.world.advance(2).unwrap();
    assert_eq!(presence(&c.world, doc), (PresenceState::None, None));
    until(&mut c.world, 5_000, "withdrawn", move |w| {
        w.server_app().unwrap().questions.waiting() == 0
    });
    assert!(holds(&c.world).is_empty());
}

/// mona's resumable link holding a kept session drops; the Planner is held disconnected.
fn held_disconnected(c: &mut Cast) -> String {
    let doc = c.doc;
    let (agent, _, session) = attached_with_a_kept_session(c);
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    session
}

/// When (simulated ms) `agent` heard `attached`.
fn attached_at(agent: &Agent) -> u64 {
    agent
        .log()
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::Attached { at_ms, .. } => Some(at_ms),
            _ => None,
        })
        .expect("attached")
}

/// Hostile input 3: a link answered `attached` with `kept` that never sends `resume` is waited
/// on for 30 s from `attached` — still attached 1 ms before, closed `out-of-order` (1008) at the
/// deadline — and, a fault being a drop, its work is held again for the client's return.
#[test]
fn hostile_3_a_link_that_never_resumes_is_closed_at_the_resume_deadline_and_its_work_held_again() {
    let mut c = cast(40, Some(1));
    let doc = c.doc;
    let session = held_disconnected(&mut c);
    let silent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(silent.answer(), Some(Ok(1)));
    let at = attached_at(&silent);
    c.world.advance(at + 30_000 - 1 - c.world.now_ms()).unwrap();
    assert!(silent.closed().is_none(), "1 ms before the deadline");
    assert_eq!(presence(&c.world, doc).0, PresenceState::Attached);
    c.world.advance(2).unwrap();
    let (closed_at, code, _) = silent.closed().expect("closed at the deadline");
    assert_eq!((closed_at, code), (at + 30_000, 1008));
    assert_eq!(error_codes(&silent), vec!["out-of-order".to_owned()]);
    until(&mut c.world, 1_000, "held again", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    assert_eq!(holds(&c.world).len(), 1, "the hold is written again");
    // The client comes back properly and takes its session.
    let back = attach(&mut c.world, "mona-3", &c.mona.clone(), doc);
    back.resume(true);
    let b = back.clone();
    until(&mut c.world, 5_000, "resumed", move |_| {
        !b.frames_of("resumed").is_empty()
    });
    assert!(back.frames_of("resumed")[0].1.contains(&session));
}

/// Hostile input 3: while the server waits for `resume`, a SIGTERM writes the hold (with its
/// window) and the process gives the lease back within the drain; the next process rebuilds it.
#[test]
fn hostile_3_a_stop_while_a_resume_is_awaited_writes_the_hold_and_gives_the_lease_back() {
    let mut c = cast(41, Some(1));
    let doc = c.doc;
    held_disconnected(&mut c);
    let silent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(silent.answer(), Some(Ok(1)));
    c.world.advance(1_000).unwrap();
    let stopped_at = c.world.now_ms();
    stop(&mut c.world);
    assert!(
        c.world.now_ms() - stopped_at < 10_000,
        "the drain ends within its 10 s"
    );
    assert_eq!(error_codes(&silent), vec!["going-away".to_owned()]);
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1, "the hold is written");
    assert!(rows[0].handover_until_ms.is_some(), "with its window");
    start(&mut c.world);
    rebuilt(&c.world, doc);
}

/// Hostile input 3: a sign-out while the server waits for `resume` closes the link at once and
/// ends the hold; a late `resume` reaches nothing.
#[test]
fn hostile_3_a_sign_out_while_a_resume_is_awaited_closes_the_link_and_ends_the_hold() {
    let mut c = cast(42, Some(1));
    let doc = c.doc;
    held_disconnected(&mut c);
    let silent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(silent.answer(), Some(Ok(1)));
    c.world.advance(1_000).unwrap();
    let cookie = c.mona_cookie.clone();
    let status = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out = status.clone();
    c.world
        .run_client("sign-out", async move {
            let request = http::Request::post(format!("{}/auth/logout", chopin_sim::SERVER_ORIGIN))
                .header("cookie", cookie)
                .header("origin", chopin_sim::SERVER_ORIGIN)
                .body(axum::body::Bytes::new())?;
            let response =
                chopin_server::runtime::connector::send(&chopin_sim::TurmoilConnector, request)
                    .await?;
            *out.lock().unwrap() = Some(response.status.as_u16());
            Ok(())
        })
        .unwrap();
    assert_eq!(*status.lock().unwrap(), Some(204), "signed out");
    let s = silent.clone();
    until(&mut c.world, 1_000, "closed", move |_| s.closed().is_some());
    assert_eq!(silent.closed().unwrap().1, 4401);
    assert!(holds(&c.world).is_empty(), "the hold ended");
    assert_eq!(presence(&c.world, doc).0, PresenceState::None);
    silent.resume(true);
    c.world.advance(1_000).unwrap();
    assert!(silent.frames_of("resumed").is_empty());
}

/// Hostile input 5 (AO-11, ATM-33, RULINGS RT-12): a resumable link that drops *during* a turn
/// — its question open and its run live — is held like one that drops between turns: the
/// question stays waited on and the run live, while the running turn itself ends with an error.
/// The client comes back and takes its session, question and run back.
#[test]
fn hostile_5_rt_12_a_resumable_link_dropped_mid_turn_is_held_with_its_question_and_run() {
    let mut c = cast(43, Some(1));
    let doc = c.doc;
    let agent = connect(&mut c.world, "mona-1", &c.mona.clone());
    agent.attach_with_features(&doc.to_string(), &["resumable-sessions"]);
    let a = agent.clone();
    until(&mut c.world, 5_000, "attached", move |_| {
        a.answer().is_some()
    });
    agent.script(TurnScript::new().started().await_turn());
    let room = join(&mut c.world, "mona-room", &c.mona_cookie.clone(), doc);
    room.send_chat("go", "@chopin ask us");
    let a = agent.clone();
    until(&mut c.world, 5_000, "turn", move |_| {
        !a.frames_of("turn").is_empty()
    });
    let session = agent.frames_of("start")[0].1.clone();
    let turn = agent.frames_of("turn")[0]
        .1
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    agent.send_text(&format!(
        r#"{{"type":"input-request","sessionId":"{session}","requestId":"q-1","turnId":"{turn}","input":{{"kind":"confirm","title":"Ship it?"}}}}"#
    ));
    agent.send_text(&format!(
        r#"{{"type":"runs","sessionId":"{session}","runs":[{{"runId":"run-1","name":"rollout","status":"running","elapsedMs":10}}]}}"#
    ));
    until(&mut c.world, 5_000, "the card is placed", move |w| {
        decision_ids(w, doc).len() == 1
    });
    // The link drops mid-turn, with no close frame.
    agent.script(TurnScript::new().drop_link());
    until(&mut c.world, 5_000, "held", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    until(&mut c.world, 5_000, "the turn ended", move |w| {
        !w.server_app().unwrap().turns.is_running(doc)
    });
    let app = c.world.server_app().unwrap();
    assert_eq!(
        app.questions.waiting(),
        1,
        "the question is still waited on"
    );
    let open: Vec<bool> = decisions_of(&c.world, doc).iter().map(|d| d.2).collect();
    assert_eq!(open, vec![true], "its Decision stays open");
    assert_eq!(run_statuses(&c.world, doc), vec!["running".to_owned()]);
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1, "the hold is written");
    // Much later the client returns and takes everything back.
    c.world.advance(600_000).unwrap();
    assert_eq!(presence(&c.world, doc).0, PresenceState::Disconnected);
    let (_, resumed) = resume_all(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(resumed["sessions"], serde_json::json!([session]));
    assert_eq!(resumed["inputs"], serde_json::json!(["q-1"]), "{resumed}");
    assert_eq!(run_statuses(&c.world, doc), vec!["running".to_owned()]);
}

/// Issue 24 item 9: a login signed out while no process ran keeps no hold: startup sweeps dead
/// logins before it keeps any owner, so the hold is dropped, the owner cleared and the Planner
/// free.
#[test]
fn hostile_9_a_login_signed_out_while_the_server_was_down_keeps_no_hold() {
    let mut c = cast(44, Some(1));
    let doc = c.doc;
    attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    let rows = holds(&c.world);
    assert_eq!(rows.len(), 1, "the cut wrote the hold");
    let login = rows[0].browser_login_id.expect("a browser login");
    let now = SIM_EPOCH_MS + c.world.now_ms() as i64;
    assert!(block_on(c.world.store().sign_out_browser_login(login, now)).unwrap());
    start(&mut c.world);
    assert!(holds(&c.world).is_empty(), "the hold is dropped");
    assert_eq!(presence(&c.world, doc).0, PresenceState::None);
    assert_eq!(
        block_on(c.world.store().ownership(doc)).unwrap().holder,
        None
    );
}

/// SES-20 (issue 24 item 10): a run let go when its client leaves for good reads how long it had
/// lasted *then*: the client's last reported time plus the time since that report.
#[test]
fn ses_20_a_run_let_go_reads_how_long_it_lasted_when_its_session_was_let_go() {
    let mut c = cast(45, Some(1));
    let doc = c.doc;
    let agent = attach(&mut c.world, "mona-1", &c.mona.clone(), doc);
    agent.script(TurnScript::new().started().await_turn());
    let room = join(&mut c.world, "mona-room", &c.mona_cookie.clone(), doc);
    room.send_chat("go", "@chopin start the rollout");
    let a = agent.clone();
    until(&mut c.world, 5_000, "turn", move |_| {
        !a.frames_of("turn").is_empty()
    });
    let session = agent.frames_of("start")[0].1.clone();
    let turn = agent.frames_of("turn")[0]
        .1
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    agent.send_text(&format!(
        r#"{{"type":"runs","sessionId":"{session}","runs":[{{"runId":"run-1","name":"rollout","status":"running","elapsedMs":95000}}]}}"#
    ));
    agent.send_text(&format!(
        r#"{{"type":"turn-end","turnId":"{turn}","status":"completed"}}"#
    ));
    until(&mut c.world, 5_000, "kept", move |w| {
        w.server_app().unwrap().turns.kept_session(doc).is_some()
    });
    // Ten minutes on, the client leaves for good.
    c.world.advance(600_000).unwrap();
    agent.detach();
    let r = room.clone();
    until(&mut c.world, 5_000, "the line", move |_| {
        r.chat_messages().iter().any(|h| {
            h.message["text"]
                .as_str()
                .unwrap_or("")
                .contains("stopped after")
        })
    });
    let line = room
        .chat_messages()
        .into_iter()
        .map(|h| h.message["text"].as_str().unwrap_or("").to_owned())
        .find(|t| t.contains("stopped after"))
        .unwrap();
    assert_eq!(line, "Run \u{201c}rollout\u{201d} stopped after 11m 35s.");
}

/// Issue 24 item 12: a protocol fault before `resume` is a drop like any other: the questions
/// the kept session waited on stay waited on, and the hold is kept again.
#[test]
fn hostile_12_a_fault_before_resume_keeps_the_questions_and_the_hold() {
    let mut c = cast(46, Some(1));
    let doc = c.doc;
    asked_two_and_dropped(&mut c);
    let back = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(back.answer(), Some(Ok(1)));
    // Anything but `resume` first is out of order.
    back.send_text(r#"{"type":"detach"}"#);
    let b = back.clone();
    until(&mut c.world, 5_000, "closed", move |_| b.closed().is_some());
    assert_eq!(back.closed().unwrap().1, 1008);
    assert_eq!(error_codes(&back), vec!["out-of-order".to_owned()]);
    until(&mut c.world, 5_000, "held again", move |w| {
        w.server_app().unwrap().planners.presence(doc).state == PresenceState::Disconnected
    });
    let app = c.world.server_app().unwrap();
    assert_eq!(app.questions.waiting(), 2, "both questions still waited on");
    assert_eq!(holds(&c.world).len(), 1);
    let (_, resumed) = resume_all(&mut c.world, "mona-3", &c.mona.clone(), doc);
    assert_eq!(resumed["inputs"].as_array().unwrap().len(), 2, "{resumed}");
}

/// Issue 24 item 12 (HO-10): a link whose `resume` waited 2.5 s for its owner's sign-in is pinged
/// while it waits, so once resumed it is not closed as silent though it answered every ping.
#[test]
fn hostile_12_a_resume_that_waited_for_the_sign_in_is_not_closed_as_silent_after() {
    let configure: chopin_sim::Configure = Arc::new(|c| c.agent_connection_timeout_ms = 4_000);
    let mut c = cast_with(
        47,
        WorldOptions {
            fixed_latency_ms: Some(1),
            configure: Some(configure),
            ..WorldOptions::default()
        },
    );
    let doc = c.doc;
    let (_, _, session) = attached_with_a_kept_session(&mut c);
    stop(&mut c.world);
    start(&mut c.world);
    let agent = attach(&mut c.world, "mona-2", &c.mona.clone(), doc);
    assert_eq!(agent.answer(), Some(Ok(1)));
    agent.resume(true);
    c.world.advance(2_500).unwrap();
    assert!(agent.frames_of("resumed").is_empty(), "it waits");
    let cookie = c.mona_cookie.clone();
    join(&mut c.world, "mona-room-2", &cookie, doc);
    let a = agent.clone();
    until(&mut c.world, 1_000, "resumed", move |_| {
        !a.frames_of("resumed").is_empty()
    });
    assert!(agent.frames_of("resumed")[0].1.contains(&session));
    c.world.advance(10_000).unwrap();
    assert_eq!(agent.closed(), None, "{:?}", error_codes(&agent));
}
