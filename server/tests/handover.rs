//! The cut of a graceful stop over the whole stack (hosted): every attached link is told
//! `going-away` with `handoverMs`, its hold is written with `handover_until` = the write plus
//! the window before the writer lease is given back, and a link in its grace period is not kept.

mod support;

use std::time::Duration;

use chopin_fixtures::agent::Event;
use chopin_protocol::agent::{ErrorCode, ServerMessage};
use support::served_with;

#[tokio::test]
async fn ho_01_ho_02_a_graceful_stop_tells_the_link_its_window_after_writing_its_hold() {
    let served = served_with(
        std::sync::Arc::new(chopin_server::store::MemoryStore::new()),
        |c| c.handover_planner_window_ms = 45_000,
    )
    .await;
    let mut agent = served.attach(&["resumable-sessions"]).await;
    let heard = tokio::spawn(async move {
        let mut frames = Vec::new();
        let mut closed = None;
        loop {
            match agent.recv().await {
                Ok(Event::Message(m)) => frames.push(m),
                Ok(Event::Closed { code, reason }) => {
                    closed = Some((code, reason));
                    break;
                }
                Err(_) => break,
            }
        }
        (frames, closed)
    });
    let (store, doc) = (served.store.clone(), served.doc);
    let stopped = served.running.stop().await;
    assert!(stopped.drained && stopped.released);
    let (frames, closed) = tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .unwrap()
        .unwrap();
    match frames.last() {
        Some(ServerMessage::Error(e)) => {
            assert_eq!(e.code, ErrorCode::GoingAway);
            assert_eq!(e.handover_ms, Some(45_000));
        }
        other => panic!("expected going-away, got {other:?}"),
    }
    assert_eq!(closed, Some((1001, "going-away".to_owned())));
    let holds = store.link_holds().await.unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].document_id, doc);
    assert_eq!(holds[0].login, "mona");
    assert_eq!(
        holds[0].handover_until_ms,
        Some(holds[0].written_at_ms + 45_000)
    );
}

#[tokio::test]
async fn ho_14_a_link_in_its_grace_period_at_the_cut_is_not_kept() {
    let served = support::served().await;
    let mut agent = served.attach(&["resumable-sessions"]).await;
    agent.detach().await.unwrap();
    // The detach is taken: the grace period runs.
    for _ in 0..200 {
        if served.state.planners.presence(served.doc).state
            == chopin_server::planner::PresenceState::Detached
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        served.state.planners.presence(served.doc).state,
        chopin_server::planner::PresenceState::Detached
    );
    let store = served.store.clone();
    served.running.stop().await;
    assert!(store.link_holds().await.unwrap().is_empty());
}
