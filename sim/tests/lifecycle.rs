//! The server's graceful stop in the simulator: every socket is told (an agent link `going-away`
//! then 1001, a room socket 1001 — a close frame, never a dropped connection), every task
//! drains, and the writer lease is given back only after the last write, so the next process
//! starts at once.

use chopin_server::observe::PlannerEvent;
use chopin_sim::cast::{cast, Cast};
use chopin_sim::{AgentEvent, Event, Step, World};

/// Advances until `done` holds (at most `within_ms`).
fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn() -> bool + 'static) {
    world
        .advance_until(within_ms, what, move |_| done())
        .unwrap();
}

#[test]
fn a_graceful_stop_tells_every_socket_drains_and_writes_nothing_after_giving_the_lease_back() {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = cast(11, Some(1));
    let agent = world.agent("mona-laptop", &mona);
    let a = agent.clone();
    until(&mut world, 5_000, "connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(&mut world, 5_000, "attached", move || a.answer().is_some());
    assert!(agent.answer().unwrap().is_ok());
    let browser = world.browser("mona-tab", &mona_cookie, &doc.to_string());
    browser.send_chat("r-1", "Before the deploy");
    let b = browser.clone();
    until(&mut world, 5_000, "acked", move || {
        !b.replies("r-1").is_empty()
    });

    let asked_at = world.now_ms();
    world
        .apply(&Step::StopServer { within_ms: 30_000 })
        .unwrap();

    // The agent link hears why, then a close frame: going-away, 1001.
    let errors: Vec<_> = agent
        .log()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::Error { code, .. } => Some(code),
            _ => None,
        })
        .collect();
    assert_eq!(errors, vec!["going-away".to_owned()]);
    let (closed_at, code, reason) = agent.closed().expect("the link was closed");
    assert_eq!((code, reason.as_str()), (1001, "going-away"));
    assert!(closed_at >= asked_at);
    // The room socket gets a close frame too, not a dropped connection (1006).
    let (_, code, reason) = browser.closed().expect("the room socket was closed");
    assert_eq!((code, reason.as_str()), (1001, "going-away"));
    // Nothing was posted to Chat about the stop (HO-17).
    assert_eq!(browser.chat_messages().len(), 1);

    // The stop drained every task and gave the lease back, as the last write of the process.
    let stopped = world
        .trace()
        .events
        .into_iter()
        .find_map(|e| match e.event {
            Event::ServerStopped {
                incarnation: 1,
                reason,
                drained,
                lease_released,
            } => Some((reason, drained, lease_released)),
            _ => None,
        })
        .expect("incarnation 1 stopped");
    assert_eq!(stopped, ("graceful stop".to_owned(), true, true));
    let writes: Vec<_> = world
        .store_writes()
        .into_iter()
        .filter(|w| w.incarnation == 1)
        .collect();
    assert_eq!(
        writes.last().map(|w| w.method),
        Some("release_writer_lease"),
        "no write after the lease was given back: {writes:?}"
    );
    // A link closed by the stop starts no grace period and releases nothing: the next process
    // decides what the ownership becomes.
    assert!(!world.trace().events.iter().any(|e| matches!(
        &e.event,
        Event::Planner(PlannerEvent::GraceStarted { .. } | PlannerEvent::Released { .. })
    )));

    // The next process takes the lease at once: it was given back, not left to expire (15 s).
    world.apply(&Step::StartServer).unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 1_000 })
        .unwrap();
}
