//! The simulator's foundation: the real router answers over simulated TCP, a seed replays the
//! same trace, and the server host's store survives its restarts (so does a crashed holder's
//! writer lease, until it expires in simulated time).

use chopin_server::store::prelude::*;
use chopin_sim::world::WORLD_HOST;
use chopin_sim::{
    run, Event, Expectation, Failure, Request, Scenario, Step, Trace, World, SERVER_HOST,
    SIM_EPOCH_MS,
};
use serde_json::{json, Value};

/// Bound on the first boot: taking a free lease and binding take a few simulated milliseconds.
const BOOT_WITHIN_MS: u64 = 1_000;

fn get(host: &str, path: &str) -> Step {
    Step::Get {
        host: host.into(),
        path: path.into(),
    }
}

fn expect(e: Expectation) -> Step {
    Step::Expect(e)
}

/// Status and parsed body of the latest response to `path` in the trace.
fn latest_response(trace: &Trace, path: &str) -> Option<(u16, Value)> {
    trace.events.iter().rev().find_map(|e| match &e.event {
        Event::ResponseReceived {
            path: p,
            status,
            body,
            ..
        } if p == path => Some((*status, serde_json::from_str(body).unwrap_or(Value::Null))),
        _ => None,
    })
}

/// (at_ms, incarnation, writer_epoch) of every ServerStarted event.
fn server_starts(trace: &Trace) -> Vec<(u64, u32, Option<i64>)> {
    trace
        .of_host(SERVER_HOST)
        .filter_map(|e| match e.event {
            Event::ServerStarted {
                incarnation,
                writer_epoch,
            } => Some((e.at_ms, incarnation, writer_epoch)),
            _ => None,
        })
        .collect()
}

fn readyz_epoch(world: &World) -> i64 {
    let (status, body) = latest_response(&world.trace(), "/readyz").expect("a /readyz response");
    assert_eq!(status, 200, "readyz: {body}");
    body["writer_epoch"]
        .as_i64()
        .unwrap_or_else(|| panic!("readyz carries writer_epoch: {body}"))
}

#[test]
fn healthz_over_simulated_tcp_runs_the_real_router() {
    let trace = run(&Scenario {
        seed: 1,
        steps: vec![
            Step::AwaitServer {
                within_ms: BOOT_WITHIN_MS,
            },
            get("client", "/healthz"),
            expect(Expectation::Status {
                path: "/healthz".into(),
                status: 200,
            }),
            get("client", "/readyz"),
            expect(Expectation::Status {
                path: "/readyz".into(),
                status: 200,
            }),
            expect(Expectation::BodyJson {
                path: "/readyz".into(),
                pointer: "/store".into(),
                value: json!("memory"),
            }),
        ],
    })
    .unwrap_or_else(|e| panic!("{e}\n{:#?}", e.trace()));

    assert_eq!(
        latest_response(&trace, "/healthz"),
        Some((200, json!({ "status": "ok" })))
    );
    let (status, ready) = latest_response(&trace, "/readyz").unwrap();
    assert_eq!(status, 200);
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["store"], "memory");
    assert_eq!(ready["writer_epoch"], 1);
    // The requests went out from the client host and came back over the simulated network.
    assert_eq!(trace.of_host("client").count(), 4);
    assert_eq!(trace.of_host(WORLD_HOST).count(), 3);
}

#[test]
fn an_unmet_expectation_says_what_was_expected_and_what_happened() {
    let err = run(&Scenario {
        seed: 1,
        steps: vec![
            Step::AwaitServer {
                within_ms: BOOT_WITHIN_MS,
            },
            get("client", "/healthz"),
            expect(Expectation::Status {
                path: "/healthz".into(),
                status: 503,
            }),
        ],
    })
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("expected GET /healthz answered 503"),
        "{message}"
    );
    assert!(message.contains("answered 200"), "{message}");
    assert_eq!(err.trace().map(|t| t.events.len() > 3), Some(true));
}

fn busy_scenario(seed: u64) -> Scenario {
    Scenario {
        seed,
        steps: vec![
            Step::AwaitServer {
                within_ms: BOOT_WITHIN_MS,
            },
            Step::GetConcurrently {
                requests: vec![
                    Request {
                        host: "alice".into(),
                        path: "/healthz".into(),
                    },
                    Request {
                        host: "bob".into(),
                        path: "/readyz".into(),
                    },
                    Request {
                        host: "alice".into(),
                        path: "/readyz".into(),
                    },
                    Request {
                        host: "bob".into(),
                        path: "/healthz".into(),
                    },
                ],
            },
            Step::Advance { ms: 6_000 },
            get("bob", "/readyz"),
            get("alice", "/no-such-route"),
            expect(Expectation::Status {
                path: "/no-such-route".into(),
                status: 404,
            }),
        ],
    }
}

#[test]
fn same_seed_same_trace_hash() {
    let first = run(&busy_scenario(42)).unwrap_or_else(|e| panic!("{e}"));
    let second = run(&busy_scenario(42)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        first.hash(),
        second.hash(),
        "same seed, different traces:\n{}\n---\n{}",
        first.to_json_pretty(),
        second.to_json_pretty()
    );
    assert_eq!(first, second);

    // Non-trivial: six requests from two hosts, each sent and answered, one server start.
    let sent = first
        .events
        .iter()
        .filter(|e| matches!(e.event, Event::RequestSent { .. }))
        .count();
    let answered = first
        .events
        .iter()
        .filter(|e| matches!(e.event, Event::ResponseReceived { .. }))
        .count();
    assert_eq!((sent, answered), (6, 6));
    assert_eq!(first.of_host("alice").count(), 6);
    assert_eq!(first.of_host("bob").count(), 6);
    assert_eq!(server_starts(&first).len(), 1);
    // The advance is in the trace's time: the last request went out after 6 s of simulated time.
    assert!(first.events.last().unwrap().at_ms >= 6_000);
    // Times never go backwards.
    assert!(first.events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));

    // The hash is not a constant: another seed draws other latencies and host orders.
    let other = run(&busy_scenario(43)).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(first.hash(), other.hash());
}

#[test]
fn restarted_server_keeps_its_store() {
    let mut world = World::new(7);
    world
        .apply(&Step::AwaitServer {
            within_ms: BOOT_WITHIN_MS,
        })
        .unwrap();
    world.apply(&get("client", "/readyz")).unwrap();
    let epoch_before = readyz_epoch(&world);

    // A record written straight into the host's store before the restart…
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let written = rt
        .block_on(world.store().upsert_account(4242, "octocat", SIM_EPOCH_MS))
        .unwrap();

    world.apply(&Step::RestartServer).unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 20_000 })
        .unwrap();
    world.apply(&get("client", "/readyz")).unwrap();
    let epoch_after = readyz_epoch(&world);

    // …the new incarnation took the lease row the old one left: its epoch is larger.
    assert!(
        epoch_after > epoch_before,
        "writer epoch {epoch_before} then {epoch_after}: the lease row did not survive"
    );
    let starts = server_starts(&world.trace());
    assert_eq!(
        starts.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(),
        vec![(1, Some(epoch_before)), (2, Some(epoch_after))]
    );
    // …and the record is still there.
    let read = rt
        .block_on(world.store().account_by_login("octocat"))
        .unwrap();
    assert_eq!(read, Some(written));
}

#[test]
fn server_start_waits_for_a_crashed_holders_lease() {
    const LEASE_TTL_MS: u64 = chopin_server::runtime::lease::WRITER_LEASE_TTL_MS as u64;
    let mut world = World::new(9);
    world
        .apply(&Step::AwaitServer {
            within_ms: BOOT_WITHIN_MS,
        })
        .unwrap();
    let (started_at, _, _) = server_starts(&world.trace())[0];
    // Crash before the first renewal (every 5 s), so the lease expires TTL after it was taken.
    world.apply(&Step::Advance { ms: 2_000 }).unwrap();
    world.apply(&Step::RestartServer).unwrap();
    let expires_at = started_at + LEASE_TTL_MS;

    // Just before the old lease expires the new incarnation is still waiting: nothing listens.
    world
        .apply(&Step::Advance {
            ms: expires_at - 300 - world.now_ms(),
        })
        .unwrap();
    world.apply(&get("client", "/readyz")).unwrap();
    world
        .apply(&expect(Expectation::Unreachable {
            path: "/readyz".into(),
        }))
        .unwrap();
    let refused = world.trace().events.iter().any(|e| {
        matches!(
            &e.event,
            Event::RequestFailed {
                failure: Failure::Refused,
                ..
            }
        )
    });
    assert!(refused, "the early /readyz was refused");
    assert_eq!(server_starts(&world.trace()).len(), 1);

    // Shortly after it expired, the new incarnation holds the lease and is ready.
    world
        .apply(&Step::Advance {
            ms: expires_at + 1_000 - world.now_ms(),
        })
        .unwrap();
    world.apply(&get("client", "/readyz")).unwrap();
    world
        .apply(&expect(Expectation::Status {
            path: "/readyz".into(),
            status: 200,
        }))
        .unwrap();
    assert_eq!(readyz_epoch(&world), 2);

    let starts = server_starts(&world.trace());
    assert_eq!(starts.len(), 2);
    let second_at = starts[1].0;
    assert!(
        (expires_at..expires_at + 1_000).contains(&second_at),
        "second incarnation started at {second_at} ms; the old lease expired at {expires_at} ms"
    );
}
