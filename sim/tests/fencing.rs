//! The writer lease fences a process that can no longer count on it, in the simulator, with the
//! real server on two hosts over one store.
//!
//! A renewal that hangs: the old incarnation counts its lease lost exactly at expiry minus the
//! margin and stops writing, while it keeps running (draining); a second incarnation on another
//! host takes the lease once it has expired; the two never write at once, and the old one's
//! write that was held up in flight across the takeover is refused and changes nothing. A lease
//! taken over behind a live holder's back (another process whose clock runs ahead): the store
//! refuses the holder's writes from that instant, before the holder itself knows, and its next
//! renewal finds the lease gone.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use chopin_server::runtime::lease::{
    WRITER_LEASE_MARGIN_MS, WRITER_LEASE_RENEW_EVERY_MS, WRITER_LEASE_TTL_MS,
};
use chopin_server::store::instrumented::Hold;
use chopin_server::store::prelude::*;
use chopin_server::store::LeaseAcquire;
use chopin_sim::cast::{block_on, cast_with, Cast};
use chopin_sim::{
    Browser, Event, HoldStoreCalls, Step, StoreWrite, World, WorldOptions, SIM_EPOCH_MS,
};
use uuid::Uuid;

/// The second machine.
const OTHER_HOST: &str = "server-b";

/// Faults the test turns on between steps.
#[derive(Default)]
struct Faults {
    /// The incarnation whose lease renewals never answer (0: none).
    hang_renewals_of: AtomicU32,
    /// The incarnation whose Chat appends wait until `released` (0: none).
    hold_appends_of: AtomicU32,
    released: AtomicBool,
}

fn holds(faults: Arc<Faults>) -> HoldStoreCalls {
    Arc::new(move |incarnation, method, _write| {
        if method == "renew_writer_lease" && faults.hang_renewals_of.load(SeqCst) == incarnation {
            return Some(Box::pin(std::future::pending::<()>()) as Hold);
        }
        if method == "append_transcript" && faults.hold_appends_of.load(SeqCst) == incarnation {
            let faults = faults.clone();
            return Some(Box::pin(async move {
                while !faults.released.load(SeqCst) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }) as Hold);
        }
        None
    })
}

/// Advances until `done` holds (at most `within_ms`).
fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn(&World) -> bool) {
    world.advance_until(within_ms, what, done).unwrap();
}

/// When `event` of the trace first happened.
fn when(world: &World, event: impl Fn(&Event) -> bool) -> Option<u64> {
    world
        .trace()
        .events
        .iter()
        .find(|e| event(&e.event))
        .map(|e| e.at_ms)
}

fn started_at(world: &World, incarnation: u32) -> Option<u64> {
    when(
        world,
        |e| matches!(e, Event::ServerStarted { incarnation: i, .. } if *i == incarnation),
    )
}

fn lease_lost_at(world: &World, incarnation: u32) -> Option<u64> {
    when(
        world,
        |e| matches!(e, Event::WriterLeaseLost { incarnation: i } if *i == incarnation),
    )
}

/// How `incarnation` stopped: (when, reason, drained, lease given back).
fn stopped(world: &World, incarnation: u32) -> Option<(u64, String, bool, bool)> {
    world
        .trace()
        .events
        .into_iter()
        .find_map(|e| match e.event {
            Event::ServerStopped {
                incarnation: i,
                reason,
                drained,
                lease_released,
            } if i == incarnation => Some((e.at_ms, reason, drained, lease_released)),
            _ => None,
        })
}

/// A write of stored state: anything but the lease's own methods.
fn is_data_write(w: &StoreWrite) -> bool {
    !w.method.ends_with("_writer_lease")
}

fn writes_of(world: &World, incarnation: u32) -> Vec<StoreWrite> {
    world
        .store_writes()
        .into_iter()
        .filter(|w| w.incarnation == incarnation)
        .collect()
}

fn chat_bodies(world: &World, doc: Uuid) -> Vec<String> {
    block_on(world.store().transcript(doc, 0, 100))
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect()
}

/// mona's room socket on the cast's document, with one message acknowledged.
fn in_the_room(world: &mut World, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser("mona-tab", cookie, &doc.to_string());
    browser.send_chat("r-1", "Before anything went wrong");
    let b = browser.clone();
    until(world, 5_000, "r-1 acknowledged", move |_| {
        !b.replies("r-1").is_empty()
    });
    assert_eq!(browser.replies("r-1")[0].message["type"], "chat:ack");
    browser
}

#[test]
fn a_hung_renewal_stops_the_old_writer_before_a_second_process_takes_the_lease() {
    let faults = Arc::new(Faults::default());
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = cast_with(
        31,
        WorldOptions {
            fixed_latency_ms: Some(1),
            hold_store_calls: Some(holds(faults.clone())),
            ..WorldOptions::default()
        },
    );
    let browser = in_the_room(&mut world, &mona_cookie, doc);

    // From now on incarnation 1's renewals never answer, and its next Chat append is held up in
    // flight (sent while it still holds the lease).
    faults.hang_renewals_of.store(1, SeqCst);
    faults.hold_appends_of.store(1, SeqCst);
    browser.send_chat("r-2", "Held up in flight");
    // A second process starts on another machine over the same store; it waits for the lease.
    world
        .apply(&Step::StartServerOn {
            host: OTHER_HOST.into(),
        })
        .unwrap();
    world
        .apply(&Step::AwaitServer { within_ms: 20_000 })
        .unwrap();

    // Incarnation 1's last grant: its lease expired TTL after it; it counted the lease lost
    // exactly the margin before that.
    let last_grant = writes_of(&world, 1)
        .iter()
        .filter(|w| w.ok && matches!(w.method, "acquire_writer_lease" | "renew_writer_lease"))
        .map(|w| w.at_ms)
        .max()
        .expect("incarnation 1 was granted the lease");
    let expired_at = last_grant + WRITER_LEASE_TTL_MS as u64;
    let lost_at = lease_lost_at(&world, 1).expect("incarnation 1 lost its lease");
    assert_eq!(
        lost_at,
        expired_at - WRITER_LEASE_MARGIN_MS as u64,
        "lost exactly at expiry minus the margin"
    );
    // Incarnation 2 took the lease once it had expired, not before.
    let writes_2 = writes_of(&world, 2);
    let taken_at = writes_2
        .iter()
        .find(|w| w.ok && is_data_write(w))
        .expect("incarnation 2 wrote after taking the lease")
        .at_ms;
    assert!(
        taken_at >= expired_at,
        "incarnation 2 wrote at {taken_at} ms, before the old lease expired at {expired_at} ms"
    );
    let started_2 = started_at(&world, 2).unwrap();
    // The old incarnation is still running (its drain waits for the held-up write).
    assert_eq!(stopped(&world, 1), None, "incarnation 1 still runs");

    // The held-up write reaches the store now, after the takeover: refused.
    faults.released.store(true, SeqCst);
    until(&mut world, 15_000, "incarnation 1 stopped", |w| {
        stopped(w, 1).is_some()
    });
    let (stopped_at, reason, drained, released) = stopped(&world, 1).unwrap();
    assert_eq!(
        (reason.as_str(), drained, released),
        ("writer lease lost", true, false)
    );
    assert!(
        stopped_at > started_2,
        "both processes ran at once: incarnation 1 stopped at {stopped_at} ms, 2 started at {started_2} ms"
    );
    let writes_1 = writes_of(&world, 1);
    let late: Vec<_> = writes_1
        .iter()
        .filter(|w| w.method == "append_transcript" && w.at_ms >= taken_at)
        .collect();
    assert!(!late.is_empty(), "the held-up append reached the store");
    assert!(
        late.iter().all(|w| !w.ok && w.fenced),
        "the old incarnation's late writes are refused by its fence: {late:?}"
    );
    assert!(!chat_bodies(&world, doc).contains(&"Held up in flight".to_owned()));
    assert!(
        browser
            .replies("r-2")
            .iter()
            .all(|r| r.message["type"] != "chat:ack"),
        "the held-up message was not acknowledged"
    );

    // Never two writers: every write incarnation 1 made happened before it lost the lease, and
    // every one after was refused; incarnation 2 wrote only after the old lease expired.
    for w in writes_1.iter().filter(|w| is_data_write(w)) {
        assert!(
            (w.ok && w.at_ms < lost_at) || (!w.ok && w.fenced && w.at_ms >= lost_at),
            "incarnation 1 (lease lost at {lost_at} ms): {w:?}"
        );
    }
    for w in writes_2.iter().filter(|w| is_data_write(w)) {
        assert!(w.ok && w.at_ms >= expired_at, "incarnation 2: {w:?}");
    }
    assert!(lost_at < expired_at && expired_at <= taken_at);
}

#[test]
fn a_lease_taken_over_behind_the_holders_back_fences_its_writes_at_once() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = cast_with(
        37,
        WorldOptions {
            fixed_latency_ms: Some(1),
            ..WorldOptions::default()
        },
    );
    let browser = in_the_room(&mut world, &mona_cookie, doc);
    let epoch_1 = world
        .server_app()
        .and_then(|app| app.lease.epoch())
        .expect("incarnation 1 holds the lease");

    // Another process whose clock runs a minute ahead judges the lease expired and takes it,
    // well before the holder's own deadline.
    let intruder_now = SIM_EPOCH_MS + world.now_ms() as i64 + 60_000;
    let taken = block_on(world.store().acquire_writer_lease(
        "intruder",
        intruder_now,
        WRITER_LEASE_TTL_MS,
    ))
    .unwrap();
    let LeaseAcquire::Acquired(intruder) = taken else {
        panic!("the intruder takes the lease: {taken:?}");
    };
    assert!(intruder.epoch > epoch_1);
    let taken_at = world.now_ms();

    // The holder does not know yet; the store refuses its next write all the same.
    browser.send_chat("r-2", "After the takeover");
    let b = browser.clone();
    until(&mut world, 5_000, "r-2 answered", move |_| {
        !b.replies("r-2").is_empty()
    });
    assert_ne!(browser.replies("r-2")[0].message["type"], "chat:ack");
    let refused: Vec<_> = writes_of(&world, 1)
        .into_iter()
        .filter(|w| w.method == "append_transcript" && w.at_ms >= taken_at)
        .collect();
    assert!(
        !refused.is_empty() && refused.iter().all(|w| !w.ok && w.fenced),
        "{refused:?}"
    );
    assert!(!chat_bodies(&world, doc).contains(&"After the takeover".to_owned()));
    assert_eq!(
        lease_lost_at(&world, 1),
        None,
        "refused by the store's check, before the holder itself counted the lease lost"
    );

    // Its next renewal finds the lease gone: it counts it lost and stops, giving nothing back.
    until(
        &mut world,
        WRITER_LEASE_RENEW_EVERY_MS + 1_000,
        "incarnation 1 lost its lease",
        |w| lease_lost_at(w, 1).is_some(),
    );
    until(&mut world, 15_000, "incarnation 1 stopped", |w| {
        stopped(w, 1).is_some()
    });
    let (_, reason, _, released) = stopped(&world, 1).unwrap();
    assert_eq!((reason.as_str(), released), ("writer lease lost", false));
    assert!(
        writes_of(&world, 1)
            .iter()
            .filter(|w| is_data_write(w) && w.at_ms >= taken_at)
            .all(|w| !w.ok && w.fenced),
        "no write of incarnation 1 landed after the takeover"
    );
}
