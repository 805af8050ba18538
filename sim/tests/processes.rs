//! Three processes on one store (`PROCESSES=many`), in the simulator, with the real server on
//! three hosts: each document is served by at most one of them at every millisecond; a socket
//! sent to a process that does not serve the document is refused; after the serving process
//! crashes, another serves the document once its lease has expired — not before — and nothing
//! it acknowledged is lost. And behind the hashing router, under drawn faults (kills, a process
//! partitioned from the store, slow writes, sockets sent to the wrong process), every rule of
//! `chopin_sim::processes` holds after every millisecond; the explorer finds a planted write that
//! skips the epoch check, and shrinks its schedule to the faults it needs.

use std::collections::BTreeSet;
use std::sync::Arc;

use chopin_server::store::prelude::*;
use chopin_sim::cast::{block_on, cast_with, Cast};
use chopin_sim::processes::{
    documents, explore, first_choice, listed, play, schedule, Fault, Timed, HOSTS,
};
use chopin_sim::{Browser, Step, World, WorldOptions};
use uuid::Uuid;

/// The lease period the processes are given.
const LEASE_MS: u64 = 3_000;

fn options() -> WorldOptions {
    WorldOptions {
        fixed_latency_ms: Some(1),
        configure: Some(Arc::new(|c: &mut chopin_server::config::Config| {
            c.many_processes = true;
            c.document_lease_ms = LEASE_MS;
        })),
        ..WorldOptions::default()
    }
}

/// The hosts serving `doc` now, among those not crashed.
fn serving(world: &World, crashed: &BTreeSet<&str>, doc: Uuid) -> Vec<String> {
    HOSTS
        .iter()
        .filter(|h| !crashed.contains(**h))
        .filter(|h| {
            world.server_app_on(h).is_some_and(|app| {
                app.serving
                    .leases()
                    .is_some_and(|leases| leases.served().contains(&doc))
            })
        })
        .map(|h| (*h).to_owned())
        .collect()
}

/// Advances `ms`, checking after every millisecond that at most one process serves `doc`.
fn advance(world: &mut World, crashed: &BTreeSet<&str>, doc: Uuid, ms: u64) {
    for _ in 0..ms {
        world.advance(1).unwrap();
        let now = serving(world, crashed, doc);
        assert!(
            now.len() <= 1,
            "{} served by {now:?} at {} ms",
            doc,
            world.now_ms()
        );
    }
}

/// Advances (checking as [`advance`] does) until `done`, at most `within_ms`.
fn until(
    world: &mut World,
    crashed: &BTreeSet<&str>,
    doc: Uuid,
    within_ms: u64,
    what: &str,
    done: impl Fn(&World) -> bool,
) {
    for _ in 0..within_ms {
        if done(world) {
            return;
        }
        advance(world, crashed, doc, 1);
    }
    panic!("{what}: not within {within_ms} ms");
}

fn acknowledged(world: &mut World, crashed: &BTreeSet<&str>, doc: Uuid, b: &Browser, id: &str) {
    let (b2, id2) = (b.clone(), id.to_owned());
    until(world, crashed, doc, 5_000, id, move |_| {
        !b2.replies(&id2).is_empty()
    });
    assert_eq!(b.replies(id)[0].message["type"], "chat:ack", "{id}");
}

/// Whether `b` was greeted (`session:hello`).
fn greeted(b: &Browser) -> bool {
    b.heard()
        .iter()
        .any(|h| h.message["type"] == "session:hello")
}

/// The cast of `seed` with a process on every host of [`HOSTS`], each up.
fn three_processes(seed: u64) -> Cast {
    let mut cast = cast_with(seed, options());
    for host in &HOSTS[1..] {
        cast.world
            .apply(&Step::StartServerOn {
                host: (*host).into(),
            })
            .unwrap();
    }
    let hosts_up = |w: &World| HOSTS.iter().all(|h| w.server_app_on(h).is_some());
    let doc = cast.doc;
    until(
        &mut cast.world,
        &BTreeSet::new(),
        doc,
        5_000,
        "every process up",
        hosts_up,
    );
    cast
}

#[test]
fn each_document_is_served_by_one_process_and_by_another_only_after_its_lease_expires() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = three_processes(47);
    let mut crashed = BTreeSet::new();

    // The router sends the document to server-b: it takes the lease and serves it.
    let path = format!("/api/documents/{doc}/room");
    let tab = world.browser_on("tab-b", "server-b", &mona_cookie, &path);
    let t = tab.clone();
    until(
        &mut world,
        &crashed,
        doc,
        5_000,
        "greeted on b",
        move |_| greeted(&t),
    );
    tab.send_chat("r-1", "Said on b");
    acknowledged(&mut world, &crashed, doc, &tab, "r-1");
    assert_eq!(serving(&world, &crashed, doc), ["server-b"]);

    // A router that sends the socket to the wrong process: refused, never greeted.
    let wrong = world.browser_on("tab-wrong", "server-c", &mona_cookie, &path);
    advance(&mut world, &crashed, doc, 100);
    assert!(
        !greeted(&wrong),
        "server-c took a socket of a document b serves"
    );
    assert!(wrong.closed().is_some(), "the refused socket is closed");

    // server-b crashes. Its lease expires LEASE_MS after its last grant or renewal.
    let last_grant = world
        .store_writes()
        .iter()
        // server-b's incarnation (the second started); an acquisition refused is `ok` too,
        // but only server-b was granted the lease.
        .filter(|w| {
            w.incarnation == 2
                && w.ok
                && matches!(w.method, "acquire_document_lease" | "renew_document_leases")
        })
        .map(|w| w.at_ms)
        .max()
        .expect("server-b was granted the lease");
    world.crash_host("server-b");
    crashed.insert("server-b");
    let expires_at = last_grant + LEASE_MS;

    // A socket to server-c that arrives before the expiry is refused; one after it is served.
    let early_at = expires_at - 10;
    let wait = early_at.saturating_sub(world.now_ms());
    advance(&mut world, &crashed, doc, wait);
    let early = world.browser_on("tab-early", "server-c", &mona_cookie, &path);
    advance(&mut world, &crashed, doc, 50);
    assert!(
        !greeted(&early),
        "served before the crashed process's lease expired at {expires_at} ms (last grant {last_grant} ms): {:?}",
        early.heard().first().map(|h| h.at_ms)
    );
    let late_at = expires_at + 5;
    let wait = late_at.saturating_sub(world.now_ms());
    advance(&mut world, &crashed, doc, wait);
    let late = world.browser_on("tab-late", "server-c", &mona_cookie, &path);
    let l = late.clone();
    until(
        &mut world,
        &crashed,
        doc,
        1_000,
        "greeted on c",
        move |_| greeted(&l),
    );
    assert_eq!(serving(&world, &crashed, doc), ["server-c"]);
    // Served again within the lease (and the few ms a socket takes) after the crash.
    assert!(world.now_ms() <= expires_at + 100);

    // Nothing acknowledged was lost; server-c takes new lines after it.
    late.send_chat("r-2", "Said on c");
    acknowledged(&mut world, &crashed, doc, &late, "r-2");
    let bodies: Vec<String> = block_on(world.store().transcript(doc, 0, 100))
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect();
    let said = |text: &str| bodies.iter().any(|b| b.contains(text));
    assert!(said("Said on b") && said("Said on c"), "{bodies:?}");
}

#[test]
fn behind_the_hashing_router_the_first_choice_serves_and_nothing_is_refused() {
    let played = play(3, &[], false).unwrap_or_else(|b| panic!("{b}"));
    assert_eq!(
        played.served_by,
        [first_choice()],
        "one process, the router's first choice, serves the document all along"
    );
    assert_eq!(played.acked, played.tabs, "every tab's line acknowledged");
    assert_eq!(played.fenced, 0);
}

#[test]
fn the_rules_hold_under_drawn_faults() {
    let mut served_again = 0;
    for seed in 1..=4 {
        let drawn = schedule(seed);
        let played = play(seed, &drawn, false)
            .unwrap_or_else(|b| panic!("seed {seed}: {b}\nfaults:\n{}", listed(&drawn)));
        assert!(played.acked > 0, "seed {seed}: nothing acknowledged");
        served_again += played.served_again;
    }
    eprintln!("served again after a kill: {served_again}");
}

#[test]
fn a_runs_documents_are_spread_over_the_processes_by_the_router() {
    let upstreams: Vec<String> = HOSTS.iter().map(|h| (*h).to_owned()).collect();
    let firsts: BTreeSet<String> = documents()
        .into_iter()
        .map(|doc| chopin_sim::router::first_choice(&upstreams, doc))
        .collect();
    assert!(firsts.len() >= 2, "every document on {firsts:?}");
}

#[test]
fn a_killed_process_s_document_is_served_again_within_the_lease() {
    let first = first_choice();
    let kill = [Timed {
        at_ms: 2_000,
        fault: Fault::Crash {
            host: first.clone(),
            down_ms: 4_000,
        },
    }];
    let played = play(5, &kill, false).unwrap_or_else(|b| panic!("{b}"));
    // The cast's document and any other the killed process served, each served again.
    assert!(played.killed_serving >= 1, "{played:?}");
    assert_eq!(played.served_again, played.killed_serving, "{played:?}");
    assert_eq!(played.served_by.first(), Some(&first));
    assert_eq!(played.served_by.len(), 2, "{played:?}");
}

#[test]
fn a_refused_process_loses_its_document_past_its_lease_and_keeps_it_when_refused_briefly() {
    use chopin_sim::processes::LEASE_MS as RUN_LEASE_MS;
    let first = first_choice();
    let refused = |ms| {
        [Timed {
            at_ms: 2_000,
            fault: Fault::Refused {
                host: first.clone(),
                ms,
            },
        }]
    };
    // A fifth of the lease: its renewal fails, and the next one, before the deadline, holds.
    let brief = play(5, &refused(RUN_LEASE_MS / 5), false).unwrap_or_else(|b| panic!("{b}"));
    assert_eq!(brief.served_by, vec![first.clone()], "{brief:?}");
    // Three leases: every call fails at once, the lease runs out, another process serves the
    // document, and every acknowledged line is kept (the rules are checked throughout).
    let long = play(5, &refused(3 * RUN_LEASE_MS), false).unwrap_or_else(|b| panic!("{b}"));
    assert_eq!(long.served_by.first(), Some(&first), "{long:?}");
    assert!(long.served_by.len() >= 2, "{long:?}");
    assert!(long.acked > 0, "{long:?}");
}

#[test]
fn the_explorer_finds_a_write_that_skips_the_epoch_check_and_shrinks_it() {
    let found = explore(0..40, true).expect("a schedule breaking a rule within 40 seeds");
    eprintln!(
        "seed {} (after {} seeds) broke {}\ndrawn:\n{}\nshrunk:\n{}",
        found.seed,
        found.tried,
        found.broken,
        listed(&found.schedule),
        listed(&found.shrunk)
    );
    assert_eq!(found.broken.rule, "one server by epoch", "{}", found.broken);
    assert!(found.broken.detail.contains("epoch no longer current"));
    assert!(
        !found.shrunk.is_empty() && found.shrunk.len() <= found.schedule.len(),
        "{found:?}"
    );
    // Shrunk as far as it goes: every fault left is needed.
    for i in 0..found.shrunk.len() {
        let mut fewer = found.shrunk.clone();
        fewer.remove(i);
        assert!(
            play(found.seed, &fewer, true).is_ok(),
            "the shrunk schedule still breaks without fault {i}"
        );
    }
    // The same faults without the planted bug keep every rule: the store's epoch check refuses
    // the write the bug let through.
    let played = play(found.seed, &found.shrunk, false)
        .unwrap_or_else(|b| panic!("without the planted bug: {b}"));
    assert!(played.fenced > 0, "{played:?}");
}

#[test]
fn a_quiet_tree_is_given_back_after_three_lease_periods_and_not_before() {
    let Cast {
        mut world,
        doc,
        mona_cookie,
        ..
    } = three_processes(48);
    let crashed = BTreeSet::new();
    // server-b serves the document while a tab uses it, then the tab leaves.
    let path = format!("/api/documents/{doc}/room");
    let tab = world.browser_on("tab-b", "server-b", &mona_cookie, &path);
    let t = tab.clone();
    until(
        &mut world,
        &crashed,
        doc,
        5_000,
        "greeted on b",
        move |_| greeted(&t),
    );
    tab.send_chat("r-1", "Said on b");
    acknowledged(&mut world, &crashed, doc, &tab, "r-1");
    tab.leave();
    let unused = |w: &World| {
        w.server_app_on("server-b")
            .is_some_and(|app| app.open.in_use().is_empty())
    };
    until(
        &mut world,
        &crashed,
        doc,
        2_000,
        "nothing in use on b",
        unused,
    );
    let quiet_from = world.now_ms();

    // Quiet for three lease periods less 10 ms: b still serves it.
    advance(&mut world, &crashed, doc, 3 * LEASE_MS - 10);
    assert_eq!(serving(&world, &crashed, doc), ["server-b"]);
    // Given back by the look after the period is over (one look per renewal period).
    until(
        &mut world,
        &crashed,
        doc,
        2 * LEASE_MS / 3 + 20,
        "given back",
        move |w| serving(w, &BTreeSet::new(), doc).is_empty(),
    );
    assert!(world.now_ms() >= quiet_from + 3 * LEASE_MS);

    // The next socket, on server-c (the balancer's choice, say), is served there at once.
    let next = world.browser_on("tab-c", "server-c", &mona_cookie, &path);
    let n = next.clone();
    until(
        &mut world,
        &crashed,
        doc,
        1_000,
        "greeted on c",
        move |_| greeted(&n),
    );
    assert_eq!(serving(&world, &crashed, doc), ["server-c"]);
    let bodies: Vec<String> = block_on(world.store().transcript(doc, 0, 100))
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect();
    assert!(bodies.iter().any(|b| b.contains("Said on b")), "{bodies:?}");
}
