//! Replay: a scenario with three documents, two Planners held by one login, Chat in every room
//! and Yjs traffic (updates and awareness), then that login signing out — the same seed gives
//! the same trace hash twice, another seed another. Anything whose order can reach the trace
//! (broadcasts, closes, awareness frames, ids) must come from the seed, not from the process.

use chopin_server::store::prelude::*;
use chopin_server::store::NewDocument;
use chopin_sim::actors::typed;
use chopin_sim::cast::{block_on, cast, Cast};
use chopin_sim::{Agent, AgentEvent, World, SERVER_ORIGIN, SIM_EPOCH_MS};
use uuid::Uuid;

fn until(world: &mut World, what: &str, done: impl Fn() -> bool + 'static) {
    world.advance_until(10_000, what, move |_| done()).unwrap();
}

fn attach(world: &mut World, name: &str, token: &str, doc: Uuid) -> Agent {
    let agent = world.agent(name, token);
    let a = agent.clone();
    until(world, "connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(world, "answered", move || a.answer().is_some());
    agent
}

/// A y-protocols awareness frame for one client.
fn awareness(client: u64, name: &str) -> Vec<u8> {
    let json = format!("{{\"user\":\"{name}\"}}");
    let mut update = vec![1u8, client as u8, 1, json.len() as u8];
    update.extend_from_slice(json.as_bytes());
    let mut frame = vec![1u8, update.len() as u8];
    frame.extend_from_slice(&update);
    frame
}

fn run(seed: u64) -> String {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        lisa_cookie,
        ..
    } = cast(seed, None);
    let mut docs = vec![doc];
    for n in 2..=3u128 {
        let id = Uuid::from_u128(0x5eed + n);
        block_on(world.store().create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: format!("notes-{n}"),
            title: format!("Notes {n}"),
            created_at_ms: SIM_EPOCH_MS,
            parent_id: None,
            ..NewDocument::default()
        }))
        .unwrap();
        docs.push(id);
    }
    // Two Planners on one login.
    let first = attach(&mut world, "mona-laptop", &mona, docs[0]);
    let second = attach(&mut world, "mona-desktop", &mona, docs[1]);
    assert!(first.answer().unwrap().is_ok() && second.answer().unwrap().is_ok());
    // Rooms in every document, with Chat and Yjs traffic.
    let mut rooms = Vec::new();
    for (i, id) in docs.iter().enumerate() {
        let mona_room = world.browser(&format!("mona-{i}"), &mona_cookie, &id.to_string());
        let lisa_room = world.browser(&format!("lisa-{i}"), &lisa_cookie, &id.to_string());
        mona_room.send_binary(awareness(10 + i as u64, "mona"));
        lisa_room.send_binary(awareness(20 + i as u64, "lisa"));
        mona_room.send_chat(&format!("m-{i}"), &format!("Hello from mona in {i}"));
        lisa_room.send_binary(typed(30 + i as u64, &format!("# Doc {i}\n")));
        rooms.push((mona_room, lisa_room));
    }
    let r = rooms.clone();
    until(&mut world, "every chat acked", move || {
        r.iter()
            .enumerate()
            .all(|(i, (m, _))| !m.replies(&format!("m-{i}")).is_empty())
    });
    world.advance(500).unwrap();
    // mona signs out: both her Planners close, in an order that must come from the seed.
    let done = std::sync::Arc::new(std::sync::Mutex::new(false));
    let out = done.clone();
    world
        .run_client("sign-out", async move {
            let request = http::Request::post(format!("{SERVER_ORIGIN}/auth/logout"))
                .header("cookie", mona_cookie)
                .header("origin", SERVER_ORIGIN)
                .body(axum::body::Bytes::new())?;
            let response =
                chopin_server::runtime::connector::send(&chopin_sim::TurmoilConnector, request)
                    .await?;
            *out.lock().unwrap() = response.status.as_u16() == 204;
            Ok(())
        })
        .unwrap();
    assert!(*done.lock().unwrap());
    world.advance(2_000).unwrap();
    world.trace().hash()
}

#[test]
fn three_documents_two_planners_on_one_login_chat_and_yjs_replay_from_the_seed() {
    let first = run(5);
    assert_eq!(first, run(5), "the same seed replays the same trace");
    assert_ne!(first, run(6), "another seed, another trace");
}
