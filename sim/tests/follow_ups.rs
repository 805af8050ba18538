//! OWN-24 / OWN-25 at the edge of the rolling hour, in the simulator: mona (holding the
//! Planner through her attached client) sends automatic follow-ups over `/mcp`
//! (`invoke_planner` with `as: "system"`, plain JSON-RPC over simulated TCP, as docs/mcp.md's
//! curl example does). Ten in an hour are taken, each a turn of its own; the eleventh is refused
//! `rate-limited` at once and up to T + 1 h − 1 ms (T: when the first was taken) and taken at
//! T + 1 h, located by follow-ups sent a millisecond apart across the edge.

use std::sync::{Arc, Mutex};

use chopin_protocol::agent::TurnStatus;
use chopin_server::runtime::connector;
use chopin_server::store::prelude::*;
use chopin_sim::cast::{block_on, cast, Cast};
use chopin_sim::{
    AgentEvent, TurmoilConnector, TurnScript, World, SERVER_HOST, SERVER_PORT, SIM_EPOCH_MS,
};
use serde_json::{json, Value};
use uuid::Uuid;

const HOUR_MS: u64 = 60 * 60 * 1000;

fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn() -> bool) {
    world
        .advance_until(within_ms, what, move |_| done())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Where a call's answer lands.
type Answer = Arc<Mutex<Option<Value>>>;

/// Starts `invoke_planner` over `/mcp` from a client host of its own, now; its answer lands in
/// the returned slot (the JSON-RPC message's `result`).
fn start_invoke(world: &mut World, n: &mut u32, token: &str, doc: Uuid, system: bool) -> Answer {
    *n += 1;
    let mut arguments =
        json!({ "document": doc.to_string(), "instruction": format!("check the build ({n})") });
    if system {
        arguments["as"] = json!("system");
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "invoke_planner", "arguments": arguments }
    });
    let answer: Answer = Arc::default();
    let out = answer.clone();
    let token = token.to_owned();
    world.start_client(&format!("mcp-{n}"), async move {
        let request = http::Request::post(format!("http://{SERVER_HOST}:{SERVER_PORT}/mcp"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(hyper::body::Bytes::from(body.to_string()))?;
        let response = connector::send(&TurmoilConnector, request).await?;
        let message: Value = serde_json::from_slice(&response.body)?;
        *out.lock().unwrap() = Some(message["result"].clone());
        Ok(())
    });
    answer
}

/// Waits for a started call's answer.
fn answer(world: &mut World, slot: &Answer) -> Value {
    let s = slot.clone();
    until(world, 10_000, "the MCP answer", move || {
        s.lock().unwrap().is_some()
    });
    let value = slot.lock().unwrap().take().unwrap();
    value
}

/// `invoke_planner`, sent now; its result.
fn invoke(world: &mut World, n: &mut u32, token: &str, doc: Uuid, system: bool) -> Value {
    let slot = start_invoke(world, n, token, doc, system);
    answer(world, &slot)
}

fn turn_over(world: &mut World, doc: Uuid) {
    let app = world.server_app().unwrap();
    until(world, 10_000, "the turn ended", move || {
        !app.turns.is_running(doc)
    });
}

/// The server-clock time of the `k`-th transcript entry whose body contains `needle`.
fn entry_at(world: &World, doc: Uuid, needle: &str, k: usize) -> u64 {
    let entries = block_on(world.store().transcript(doc, 0, 200)).unwrap();
    let found: Vec<_> = entries.iter().filter(|e| e.body.contains(needle)).collect();
    (found[k].created_at_ms - SIM_EPOCH_MS) as u64
}

#[test]
fn own_24_own_25_ten_follow_ups_an_hour_the_eleventh_refused_until_the_rolling_hour_ends() {
    let Cast {
        mut world,
        doc,
        mona,
        ..
    } = cast(74, Some(1));
    let agent = world.agent("mona-agent", &mona);
    let a = agent.clone();
    until(&mut world, 5_000, "agent connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(&mut world, 5_000, "attached", move || a.answer().is_some());
    for _ in 0..13 {
        agent.script(TurnScript::new().started().end(TurnStatus::Completed));
    }
    let mut n = 0;
    for i in 0..10 {
        let r = invoke(&mut world, &mut n, &mona, doc, true);
        assert_ne!(r["isError"], true, "follow-up {i}: {r}");
        turn_over(&mut world, doc);
        world.advance(1_000).unwrap();
    }
    let follow_up = "@mona sent chopin an automatic follow-up.";
    let t = entry_at(&world, doc, follow_up, 0);
    let r = invoke(&mut world, &mut n, &mona, doc, true);
    assert_eq!(
        r["structuredContent"]["code"], "rate-limited",
        "the eleventh at once: {r}"
    );

    // Just before the edge, a message (not a follow-up) warms every cache (an hour on,
    // admission and repository access are asked of GitHub again) and tells roughly how long a
    // request takes from being sent to being taken.
    let edge = t + HOUR_MS;
    world.advance(edge - 5_000 - world.now_ms()).unwrap();
    let sent = world.now_ms();
    let r = invoke(&mut world, &mut n, &mona, doc, false);
    assert_ne!(r["isError"], true, "{r}");
    let delay = entry_at(&world, doc, &format!("check the build ({n})"), 0) - sent;
    turn_over(&mut world, doc);

    // Follow-ups sent one millisecond apart around the edge, all before any is answered: every
    // one is refused until the first checked at T + 1 h, which is taken; the one sent a
    // millisecond before it (checked at T + 1 h − 1 ms) was refused. After it, ten are in the
    // hour again, so the rest are refused too.
    world.advance(edge - delay - 8 - world.now_ms()).unwrap();
    let mut slots = Vec::new();
    for _ in 0..16 {
        slots.push(start_invoke(&mut world, &mut n, &mona, doc, true));
        world.advance(1).unwrap();
    }
    let codes: Vec<Value> = slots
        .iter()
        .map(|slot| answer(&mut world, slot)["structuredContent"]["code"].clone())
        .collect();
    let taken: Vec<usize> = (0..codes.len()).filter(|&i| codes[i].is_null()).collect();
    assert_eq!(taken.len(), 1, "exactly one taken: {codes:?}");
    let k = taken[0];
    assert!(
        k > 0,
        "the first was sent early enough to be refused: {codes:?}"
    );
    for (i, code) in codes.iter().enumerate() {
        if i != k {
            assert_eq!(code, "rate-limited", "attempt {i}: {codes:?}");
        }
    }
    // Requests sent a millisecond apart over the same warm path are checked a millisecond
    // apart: the refusal just before and the acceptance put the edge between two adjacent
    // milliseconds. The one taken is recorded when its turn is accepted, a few milliseconds
    // after its check (as the first was), so at or just after T + 1 h, never before.
    let recorded = entry_at(&world, doc, follow_up, 10);
    assert!(
        (edge..edge + delay).contains(&recorded),
        "taken at the edge: recorded at T + 1 h + {} ms",
        recorded as i64 - edge as i64
    );
    turn_over(&mut world, doc);
}
