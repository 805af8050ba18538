//! Three processes on one store behind a hashing router (`PROCESSES=many`), played under faults
//! with the rules checked after every simulated millisecond; and an explorer that draws fault
//! schedules from seeds and shrinks one that breaks a rule to the fewest faults that still do.
//!
//! Owns: the faults of several processes ([`Fault`]: a process killed and started again, a
//! process partitioned from the store (its calls hang) or refused by it (its calls fail at
//! once), a store whose writes are slow, a router sending every new
//! socket to one process), a run's traffic (a new browser tab through the router every
//! [`TRAFFIC_EVERY_MS`], on each of [`documents`] in turn, sending one Chat line), the rules
//! below, [`schedule`], [`explore`] and [`shrink`].
//! Does not own: the server (run unchanged on each host), the router ([`crate::router`]) or the
//! world's hosts and store ([`crate::world`]).
//!
//! The rules:
//! - **one server by epoch**: at most one running process serves each document at any
//!   millisecond, and no write made through a handle fenced by a document's lease returns `Ok`
//!   while that lease's row names another epoch, or nobody;
//! - **acks are kept**: every Chat line acknowledged to a tab is in its document's storage;
//! - **served again**: once the process serving a document is killed, another serves it within
//!   the lease period plus [`SERVED_AGAIN_SLACK_MS`] — when one could: some other process ran
//!   with its store answering, and the router was not sending sockets to the dead one,
//!   throughout.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chopin_server::store::prelude::*;
use chopin_server::store::{NewDocument, StoreError};
use uuid::Uuid;

use crate::actors::Browser;
use crate::cast::{block_on, cast_with, Cast};
use crate::explore::Draws;
use crate::world::{
    Event, FailStoreCallsOn, HoldStoreCallsOn, Step, World, WorldOptions, SERVER_HOST,
};

/// The server hosts, each running a process.
pub const HOSTS: [&str; 3] = [SERVER_HOST, "server-b", "server-c"];
/// The balancer in front of them.
pub const ROUTER: &str = "router";
/// The processes' `DOCUMENT_LEASE_MS`.
pub const LEASE_MS: u64 = 1_000;
/// How long a run plays, from the moment every process is up.
pub const RUN_MS: u64 = 7_000;
/// A new tab every this often.
pub const TRAFFIC_EVERY_MS: u64 = 250;
/// What "served again" allows beyond the lease period: a tab's period, its way through the
/// router and the takeover's own reads and writes.
pub const SERVED_AGAIN_SLACK_MS: u64 = 1_000;

/// A fault, begun at a moment of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The host's process is killed (`kill -9`) and started again `down_ms` later.
    Crash { host: String, down_ms: u64 },
    /// Every store call of the host's process hangs for `ms` (partitioned from the database),
    /// then answers.
    Partition { host: String, ms: u64 },
    /// Every store call of the host's process fails at once for `ms`, without reaching the
    /// store (the database refuses its connections).
    Refused { host: String, ms: u64 },
    /// Every store write of the host's process takes `delay_ms` more, for `ms` (a slow commit).
    SlowStore {
        host: String,
        delay_ms: u64,
        ms: u64,
    },
    /// The router sends every new socket to `host`, whatever the document, for `ms`.
    WrongRoute { host: String, ms: u64 },
}

/// A fault and when it begins, in ms from the start of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at_ms: u64,
    pub fault: Fault,
}

impl fmt::Display for Timed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} ms: ", self.at_ms)?;
        match &self.fault {
            Fault::Crash { host, down_ms } => {
                write!(f, "kill {host}, started again {down_ms} ms later")
            }
            Fault::Partition { host, ms } => {
                write!(f, "{host} partitioned from the store for {ms} ms")
            }
            Fault::Refused { host, ms } => {
                write!(f, "{host}'s store calls refused for {ms} ms")
            }
            Fault::SlowStore { host, delay_ms, ms } => {
                write!(f, "{host}'s writes {delay_ms} ms slower for {ms} ms")
            }
            Fault::WrongRoute { host, ms } => {
                write!(f, "the router sends every socket to {host} for {ms} ms")
            }
        }
    }
}

/// `faults` one to a line (indented), for a report.
pub fn listed(faults: &[Timed]) -> String {
    if faults.is_empty() {
        return "  (no fault)".to_owned();
    }
    faults
        .iter()
        .map(|t| format!("  {t}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The documents a run's tabs speak in, in turn: the cast's and two more in its repository.
pub fn documents() -> [Uuid; 3] {
    [
        crate::cast::CAST_DOCUMENT,
        Uuid::from_u128(0x5eed_d0c5_0000_0000_0000_0000_0000_0002),
        Uuid::from_u128(0x5eed_d0c5_0000_0000_0000_0000_0000_0003),
    ]
}

/// The process the router sends the cast's document to first.
pub fn first_choice() -> String {
    let upstreams: Vec<String> = HOSTS.iter().map(|h| (*h).to_owned()).collect();
    crate::router::first_choice(&upstreams, crate::cast::CAST_DOCUMENT)
}

/// A rule broken: which, when (ms from the start of the run) and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub rule: &'static str,
    pub at_ms: u64,
    pub detail: String,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at {} ms): {}", self.rule, self.at_ms, self.detail)
    }
}

/// What a run that kept every rule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Played {
    /// Tabs opened.
    pub tabs: usize,
    /// Chat lines acknowledged.
    pub acked: usize,
    /// The hosts that served the cast's document at some point, in the order they first did.
    pub served_by: Vec<String>,
    /// Writes refused by a fence (a process that lost the lease, stopped at the store).
    pub fenced: usize,
    /// Documents whose serving process was killed, counted at each kill.
    pub killed_serving: usize,
    /// Of those, the ones another process served again.
    pub served_again: usize,
}

/// A host's store faults now.
#[derive(Debug, Clone, Copy, Default)]
struct StoreFault {
    /// Calls hang until then (simulated ms since the world began).
    hang_until_ms: u64,
    /// Calls fail at once until then.
    refused_until_ms: u64,
    /// Writes take `delay_ms` more until then.
    slow_until_ms: u64,
    delay_ms: u64,
}

type StoreFaults = Arc<Mutex<BTreeMap<String, StoreFault>>>;

/// `host`'s store faults now, if it ever had one.
fn fault_of(faults: &StoreFaults, host: &str) -> Option<StoreFault> {
    faults
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(host)
        .copied()
}

/// Changes `host`'s store faults with `change`.
fn change_fault(faults: &StoreFaults, host: String, change: impl FnOnce(&mut StoreFault)) {
    change(
        faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(host)
            .or_default(),
    );
}

/// The hold the world puts before each store call of a host, from its faults.
fn holds(faults: StoreFaults) -> HoldStoreCallsOn {
    Arc::new(move |host, _method, write| {
        let now = crate::world::host_now_ms();
        let fault = fault_of(&faults, host)?;
        let wait = if now < fault.hang_until_ms {
            fault.hang_until_ms - now
        } else if write && now < fault.slow_until_ms {
            fault.delay_ms
        } else {
            return None;
        };
        Some(Box::pin(tokio::time::sleep(Duration::from_millis(wait))))
    })
}

/// The error the world gives each store call of a host, from its faults.
fn refusals(faults: StoreFaults) -> FailStoreCallsOn {
    Arc::new(move |host, method, _write| {
        let now = crate::world::host_now_ms();
        let fault = fault_of(&faults, host)?;
        (now < fault.refused_until_ms).then(|| {
            StoreError::Backend(format!("{method}: connection refused (a fault of the run)"))
        })
    })
}

/// The rules' state, carried from one millisecond to the next.
struct Rules {
    docs: [Uuid; 3],
    /// Hosts whose process is not running (killed, and not started again yet).
    down: BTreeSet<String>,
    /// Hosts started again whose new process has not said it is up yet.
    booting: BTreeSet<String>,
    events_seen: usize,
    writes_seen: usize,
    fenced: usize,
    /// Each tab, its document, its request id and text, and whether its ack was seen.
    tabs: Vec<(Browser, Uuid, String, String, bool)>,
    acked: Vec<(Uuid, String)>,
    served_by: Vec<String>,
    /// Each document whose serving process was killed: when it must be served again by, and
    /// whether the run has since met something that excuses it.
    due: BTreeMap<Uuid, (u64, bool)>,
    killed_serving: usize,
    served_again: usize,
}

impl Rules {
    fn running(&self) -> impl Iterator<Item = &'static str> + '_ {
        HOSTS
            .iter()
            .copied()
            .filter(|h| !self.down.contains(*h) && !self.booting.contains(*h))
    }

    /// The running hosts serving `doc` now.
    fn serving(&self, world: &World, doc: Uuid) -> Vec<String> {
        self.running()
            .filter(|h| {
                world.server_app_on(h).is_some_and(|app| {
                    app.serving
                        .leases()
                        .is_some_and(|leases| leases.served().contains(&doc))
                })
            })
            .map(str::to_owned)
            .collect()
    }

    /// Every rule, after a millisecond at `at_ms` of the run.
    fn check(&mut self, world: &World, at_ms: u64) -> Result<(), Broken> {
        let broken = |rule, detail: String| Broken {
            rule,
            at_ms,
            detail,
        };
        // Processes started again are counted once their new incarnation is up.
        let started = world.with_events(self.events_seen, |events| {
            events
                .iter()
                .filter(|e| matches!(e.event, Event::ServerStarted { .. }))
                .map(|e| e.host.clone())
                .collect::<Vec<_>>()
        });
        self.events_seen = world.with_events(0, <[_]>::len);
        for host in started {
            self.booting.remove(&host);
        }

        let mut served = BTreeMap::new();
        for (n, doc) in self.docs.iter().enumerate() {
            let serving = self.serving(world, *doc);
            if serving.len() > 1 {
                return Err(broken(
                    "one server by epoch",
                    format!("document {n} is served by {serving:?} at once"),
                ));
            }
            if n == 0 {
                for host in &serving {
                    if !self.served_by.contains(host) {
                        self.served_by.push(host.clone());
                    }
                }
            }
            served.insert(*doc, !serving.is_empty());
        }
        let writes = world.store_writes_since(self.writes_seen);
        self.writes_seen += writes.len();
        for write in writes {
            self.fenced += usize::from(write.fenced);
            if write.stale_epoch {
                return Err(broken(
                    "one server by epoch",
                    format!(
                        "{} on {} (incarnation {}) landed under a document lease epoch no longer current",
                        write.method, write.host, write.incarnation
                    ),
                ));
            }
        }

        let mut new_acks = Vec::new();
        for (tab, doc, id, text, acked) in &mut self.tabs {
            if *acked {
                continue;
            }
            if tab
                .replies(id)
                .iter()
                .any(|h| h.message["type"] == "chat:ack")
            {
                *acked = true;
                new_acks.push((*doc, text.clone()));
            }
        }
        if !new_acks.is_empty() {
            self.acked.extend(new_acks);
            self.acks_kept(world, at_ms)?;
        }

        for (doc, (due, excused)) in self.due.clone() {
            if served.get(&doc).copied().unwrap_or(false) {
                self.due.remove(&doc);
                self.served_again += 1;
            } else if at_ms >= due {
                self.due.remove(&doc);
                if !excused {
                    let n = self.docs.iter().position(|d| *d == doc).unwrap_or(0);
                    return Err(broken(
                        "served again",
                        format!(
                            "nobody serves document {n} {} ms after its process was killed (lease {LEASE_MS} ms); the last tabs: {}",
                            LEASE_MS + SERVED_AGAIN_SLACK_MS,
                            self.last_tabs(3)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// What the last `n` tabs heard, or how they ended: for a broken rule's words.
    fn last_tabs(&self, n: usize) -> String {
        let told: Vec<String> = self
            .tabs
            .iter()
            .rev()
            .take(n)
            .map(|(tab, _, id, _, _)| {
                let heard: Vec<String> = tab
                    .heard()
                    .iter()
                    .map(|h| h.message["type"].as_str().unwrap_or("?").to_owned())
                    .collect();
                match tab.closed() {
                    Some((at, code, why)) => {
                        format!("{id} heard {heard:?}, closed {code} at {at} ms ({why})")
                    }
                    None => format!("{id} heard {heard:?}, open"),
                }
            })
            .collect();
        told.join("; ")
    }

    /// Every acknowledged line is in its document's storage.
    fn acks_kept(&self, world: &World, at_ms: u64) -> Result<(), Broken> {
        for doc in self.docs {
            let stored: Vec<String> = block_on(world.store().transcript(doc, 0, 10_000))
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.body)
                .collect();
            if let Some((_, lost)) = self
                .acked
                .iter()
                .filter(|(d, _)| *d == doc)
                .find(|(_, text)| !stored.iter().any(|b| b.contains(text.as_str())))
            {
                return Err(Broken {
                    rule: "acks are kept",
                    at_ms,
                    detail: format!("{lost:?} was acknowledged and is not in storage"),
                });
            }
        }
        Ok(())
    }

    /// Something that may keep a document from being served again in time.
    fn excuse(&mut self) {
        for (_, excused) in self.due.values_mut() {
            *excused = true;
        }
    }
}

/// The world of a run: the cast, three processes up, the router in front of them.
fn world_for(seed: u64, faults: StoreFaults, plant_epoch_check_off: bool) -> (World, String) {
    let options = WorldOptions {
        fixed_latency_ms: Some(1),
        configure: Some(Arc::new(|c: &mut chopin_server::config::Config| {
            c.many_processes = true;
            c.document_lease_ms = LEASE_MS;
        })),
        hold_store_calls_on: Some(holds(faults.clone())),
        fail_store_calls_on: Some(refusals(faults)),
        ..WorldOptions::default()
    };
    let Cast {
        mut world,
        mona_cookie,
        ..
    } = cast_with(seed, options);
    for (n, doc) in documents().into_iter().enumerate().skip(1) {
        block_on(world.store().create_document(&NewDocument {
            id: doc,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: format!("plan-{n}"),
            title: format!("Plan {n}"),
            ..NewDocument::default()
        }))
        .expect("a run's document");
    }
    if plant_epoch_check_off {
        world.store().plant_epoch_check_off();
    }
    for host in &HOSTS[1..] {
        world
            .apply(&Step::StartServerOn {
                host: (*host).into(),
            })
            .expect("a server host starts");
    }
    world.add_router(ROUTER, &HOSTS);
    for _ in 0..5_000 {
        if HOSTS.iter().all(|h| world.server_app_on(h).is_some()) {
            break;
        }
        world.advance(1).expect("the processes start");
    }
    assert!(
        HOSTS.iter().all(|h| world.server_app_on(h).is_some()),
        "every process up within 5 s"
    );
    (world, mona_cookie)
}

/// A fault's beginning or end, at a moment of the run.
enum Change {
    Kill(String),
    Start(String),
    Hang(String, u64),
    Refuse(String, u64),
    Slow(String, u64, u64),
    RouteTo(String),
    RouteBack,
}

/// Plays `faults` on the world of `seed` for [`RUN_MS`], checking every rule after every
/// millisecond. With `plant_epoch_check_off`, the store skips its epoch check on fenced writes
/// (the planted bug the explorer must find).
pub fn play(seed: u64, faults: &[Timed], plant_epoch_check_off: bool) -> Result<Played, Broken> {
    let store_faults = StoreFaults::default();
    let (mut world, cookie) = world_for(seed, store_faults.clone(), plant_epoch_check_off);
    let docs = documents();
    let mut changes: BTreeMap<u64, Vec<Change>> = BTreeMap::new();
    for timed in faults {
        let at = timed.at_ms;
        let change = match &timed.fault {
            Fault::Crash { host, down_ms } => {
                changes
                    .entry(at + down_ms)
                    .or_default()
                    .push(Change::Start(host.clone()));
                Change::Kill(host.clone())
            }
            Fault::Partition { host, ms } => Change::Hang(host.clone(), *ms),
            Fault::Refused { host, ms } => Change::Refuse(host.clone(), *ms),
            Fault::SlowStore { host, delay_ms, ms } => Change::Slow(host.clone(), *delay_ms, *ms),
            Fault::WrongRoute { host, ms } => {
                changes.entry(at + ms).or_default().push(Change::RouteBack);
                Change::RouteTo(host.clone())
            }
        };
        changes.entry(at).or_default().push(change);
    }
    let mut rules = Rules {
        docs,
        down: BTreeSet::new(),
        booting: BTreeSet::new(),
        events_seen: world.with_events(0, <[_]>::len),
        writes_seen: world.store_writes().len(),
        fenced: 0,
        tabs: Vec::new(),
        acked: Vec::new(),
        served_by: Vec::new(),
        due: BTreeMap::new(),
        killed_serving: 0,
        served_again: 0,
    };
    let mut route_to: Option<String> = None;
    let started = world.now_ms();
    for at in 0..RUN_MS {
        let now = world.now_ms();
        for change in changes.remove(&at).unwrap_or_default() {
            match change {
                Change::Kill(host) => {
                    if rules.down.contains(&host) {
                        continue;
                    }
                    let served: Vec<Uuid> = docs
                        .iter()
                        .copied()
                        .filter(|doc| rules.serving(&world, *doc).contains(&host))
                        .collect();
                    world.crash_host(&host);
                    rules.down.insert(host);
                    // A document whose process dies while another is still owed is excused
                    // with it (the kill itself is a fault in the way).
                    rules.excuse();
                    for doc in served {
                        rules.killed_serving += 1;
                        rules
                            .due
                            .insert(doc, (at + LEASE_MS + SERVED_AGAIN_SLACK_MS, false));
                    }
                }
                Change::Start(host) => {
                    if rules.down.remove(&host) {
                        rules.booting.insert(host.clone());
                        world.restart_host(&host).map_err(|e| Broken {
                            rule: "the world runs",
                            at_ms: at,
                            detail: e.to_string(),
                        })?;
                    }
                }
                Change::Hang(host, ms) => {
                    change_fault(&store_faults, host, |f| f.hang_until_ms = now + ms);
                    rules.excuse();
                }
                Change::Refuse(host, ms) => {
                    change_fault(&store_faults, host, |f| f.refused_until_ms = now + ms);
                    rules.excuse();
                }
                Change::Slow(host, delay_ms, ms) => {
                    change_fault(&store_faults, host, |f| {
                        f.slow_until_ms = now + ms;
                        f.delay_ms = delay_ms;
                    });
                    rules.excuse();
                }
                Change::RouteTo(host) => {
                    route_to = Some(host);
                    rules.excuse();
                }
                Change::RouteBack => route_to = None,
            }
        }
        // A store fault still on, or sockets sent to a dead process, excuse a late takeover.
        let faulted = store_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|f| now < f.hang_until_ms || now < f.refused_until_ms || now < f.slow_until_ms);
        if faulted || route_to.as_ref().is_some_and(|h| rules.down.contains(h)) {
            rules.excuse();
        }
        if at % TRAFFIC_EVERY_MS == 0 {
            let n = rules.tabs.len();
            let doc = docs[n % docs.len()];
            let (id, text) = (format!("r-{n}"), format!("line {n} of the run"));
            let dial = route_to.as_deref().unwrap_or(ROUTER);
            let path = format!("/api/documents/{doc}/room");
            let tab = world.tab_on(&format!("tab-{n}"), dial, &cookie, &path);
            tab.send_chat(&id, &text);
            rules.tabs.push((tab, doc, id, text, false));
        }
        world.advance(1).map_err(|e| Broken {
            rule: "the world runs",
            at_ms: at,
            detail: e.to_string(),
        })?;
        rules.check(&world, at)?;
    }
    debug_assert!(world.now_ms() >= started + RUN_MS);
    rules.acks_kept(&world, RUN_MS)?;
    Ok(Played {
        tabs: rules.tabs.len(),
        acked: rules.acked.len(),
        served_by: rules.served_by,
        fenced: rules.fenced,
        killed_serving: rules.killed_serving,
        served_again: rules.served_again,
    })
}

/// The fault schedule of `seed`: one to three faults, begun between 0.5 s and 4.5 s into the
/// run. A process's own faults (a kill, a partition, slow writes) fall on the document's first
/// choice (the process the router sends it to, where its writes are) two times in three; a
/// wrong route sends sockets away from it two times in three.
pub fn schedule(seed: u64) -> Vec<Timed> {
    let mut draws = Draws(seed ^ 0x0005_ee5e_ed00);
    let first = first_choice();
    let others: Vec<String> = HOSTS
        .iter()
        .filter(|h| **h != first)
        .map(|h| (*h).to_owned())
        .collect();
    let pick = |draws: &mut Draws, favoured: &[String], rest: &[String]| {
        if draws.below(3) < 2 {
            favoured[draws.below(favoured.len() as u64) as usize].clone()
        } else {
            rest[draws.below(rest.len() as u64) as usize].clone()
        }
    };
    let own = |draws: &mut Draws| pick(draws, std::slice::from_ref(&first), &others);
    let away = |draws: &mut Draws| pick(draws, &others, std::slice::from_ref(&first));
    let count = 1 + draws.below(3);
    let mut faults: Vec<Timed> = (0..count)
        .map(|_| {
            let at_ms = 500 + draws.below(4_000);
            let fault = match draws.below(4) {
                0 => Fault::Crash {
                    host: own(&mut draws),
                    down_ms: 1_000 + draws.below(3_000),
                },
                // A partition: calls that hang, or calls refused at once, one time in two.
                1 if draws.below(2) == 0 => Fault::Partition {
                    host: own(&mut draws),
                    ms: 1_000 + draws.below(2_500),
                },
                1 => Fault::Refused {
                    host: own(&mut draws),
                    ms: 1_000 + draws.below(2_500),
                },
                2 => Fault::SlowStore {
                    host: own(&mut draws),
                    delay_ms: 200 + draws.below(1_800),
                    ms: 1_000 + draws.below(2_500),
                },
                _ => Fault::WrongRoute {
                    host: away(&mut draws),
                    ms: 1_000 + draws.below(2_500),
                },
            };
            Timed { at_ms, fault }
        })
        .collect();
    faults.sort_by_key(|t| t.at_ms);
    faults
}

/// A schedule that broke a rule: its seed, the schedule as drawn and as shrunk, and what broke.
#[derive(Debug, Clone)]
pub struct Found {
    pub seed: u64,
    pub schedule: Vec<Timed>,
    pub shrunk: Vec<Timed>,
    pub broken: Broken,
    /// Seeds played before it was found (itself included).
    pub tried: usize,
}

/// Plays the schedule of each seed in `seeds` until one breaks a rule, and shrinks it.
pub fn explore(seeds: impl IntoIterator<Item = u64>, plant_epoch_check_off: bool) -> Option<Found> {
    for (n, seed) in seeds.into_iter().enumerate() {
        let drawn = schedule(seed);
        if let Err(broken) = play(seed, &drawn, plant_epoch_check_off) {
            let shrunk = shrink(seed, &drawn, plant_epoch_check_off, broken.rule);
            let broken = play(seed, &shrunk, plant_epoch_check_off)
                .err()
                .unwrap_or(broken);
            return Some(Found {
                seed,
                schedule: drawn,
                shrunk,
                broken,
                tried: n + 1,
            });
        }
    }
    None
}

/// The fewest faults of `schedule` that still break `rule` with `seed`: each fault is dropped in
/// turn, and stays dropped when the rest still break it.
pub fn shrink(
    seed: u64,
    schedule: &[Timed],
    plant_epoch_check_off: bool,
    rule: &str,
) -> Vec<Timed> {
    let breaks = |faults: &[Timed]| {
        play(seed, faults, plant_epoch_check_off).is_err_and(|broken| broken.rule == rule)
    };
    let mut kept = schedule.to_vec();
    let mut i = 0;
    while i < kept.len() {
        let mut fewer = kept.clone();
        fewer.remove(i);
        if breaks(&fewer) {
            kept = fewer;
        } else {
            i += 1;
        }
    }
    kept
}
