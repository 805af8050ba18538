//! Fault exploration: a scenario played again and again under random faults, judged by the
//! invariants alone, and a schedule that breaks one shrunk to a short scenario file.
//!
//! Owns: the fault classes ([`FaultClass`]), a seed's fault schedule ([`schedule`]), the
//! exploring loop ([`explore`]) and the shrinking of a failing schedule ([`shrink`]).
//! Does not own: playing a file or the invariants ([`crate::scenario`], [`crate::invariants`]).
//!
//! A schedule is a few faults, each switched on before one of the file's own steps and off
//! before a later one (a partition and its repair, slow or lossy messages, a GitHub outage,
//! access taken away and given back) or a crash and restart; shrinking may drop either end. The file's expectations are left out, since the
//! faults change what happens; its actions and waits stay. The same file, seed and classes
//! always give the same schedule, and the same schedule the same trace.

use std::time::{Duration, Instant};

use chopin_server::runtime::lease::WRITER_LEASE_TTL_MS;

use crate::scenario::{play_as, Action, Mode, ScenarioFile, Verdict};

/// The kinds of fault a schedule draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultClass {
    /// The network between a client and the server is cut, then repaired.
    Partitions,
    /// The server host crashes and starts again (once its writer lease has lapsed).
    Crashes,
    /// GitHub answers only errors for a while.
    GithubOutage,
    /// A cast member's access to the repository is taken away at GitHub, then given back.
    Revocations,
    /// A client's messages to and from the server take up to 5 s, for a while.
    Latency,
    /// A client's messages to and from the server are lost at random, for a while.
    Drops,
    /// A browser sends a hostile Yjs update: one after a gap in its clock, or its last one
    /// again.
    HostileUpdates,
    /// A browser fills the document with up to 3 MiB of Yjs state (near its limits).
    LargeDocuments,
    /// An agent client goes silent between `attached` and its `resume`.
    SilentResume,
    /// Under `harness = "provider"`: the model provider answers a call with a 429 (with or
    /// without `retry-after`), a 5xx, a stream cut or malformed mid-answer, or no answer at all;
    /// or it is down (every call a 503) for a while; or the network to it is cut for a while.
    Provider,
}

impl FaultClass {
    pub const ALL: [FaultClass; 10] = [
        FaultClass::Partitions,
        FaultClass::Crashes,
        FaultClass::GithubOutage,
        FaultClass::Revocations,
        FaultClass::Latency,
        FaultClass::Drops,
        FaultClass::HostileUpdates,
        FaultClass::LargeDocuments,
        FaultClass::SilentResume,
        FaultClass::Provider,
    ];

    /// The network, crash and GitHub classes (the first six): what a scenario meets without a
    /// hostile client.
    pub const NETWORK: [FaultClass; 6] = [
        FaultClass::Partitions,
        FaultClass::Crashes,
        FaultClass::GithubOutage,
        FaultClass::Revocations,
        FaultClass::Latency,
        FaultClass::Drops,
    ];

    pub fn parse(name: &str) -> Result<FaultClass, String> {
        match name.trim() {
            "partitions" => Ok(FaultClass::Partitions),
            "crashes" => Ok(FaultClass::Crashes),
            "github-outage" => Ok(FaultClass::GithubOutage),
            "revocations" => Ok(FaultClass::Revocations),
            "latency" => Ok(FaultClass::Latency),
            "drops" => Ok(FaultClass::Drops),
            "hostile-updates" => Ok(FaultClass::HostileUpdates),
            "large-documents" => Ok(FaultClass::LargeDocuments),
            "silent-resume" => Ok(FaultClass::SilentResume),
            "provider" => Ok(FaultClass::Provider),
            other => Err(format!(
                "unknown fault class {other:?} (partitions, crashes, github-outage, revocations, latency, drops, hostile-updates, large-documents, silent-resume, provider)"
            )),
        }
    }
}

/// One fault: `steps` inserted before the file's step `before` (0-based; the file's length puts
/// it at the end).
#[derive(Debug, Clone)]
pub struct Fault {
    pub before: usize,
    pub steps: Vec<Action>,
}

/// splitmix64, the schedule's draws.
pub(crate) struct Draws(pub(crate) u64);

impl Draws {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// The client hosts `file` has made by the time its step `before` runs.
fn hosts_before(file: &ScenarioFile, before: usize) -> Vec<String> {
    file.steps[..before]
        .iter()
        .filter_map(|a| match a {
            Action::Agent { name, .. } | Action::Browser { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The browsers `file` has opened by the time its step `before` runs.
fn browsers_before(file: &ScenarioFile, before: usize) -> Vec<String> {
    file.steps[..before]
        .iter()
        .filter_map(|a| match a {
            Action::Browser { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// The fault schedule of `seed` over `file`, drawing from `classes`: one to three faults. A
/// fault is switched on before one of the file's steps and off before a later one (or left on
/// to the end), so it spans part of the scenario without adding time of its own; a crash is one
/// restart.
pub fn schedule(file: &ScenarioFile, seed: u64, classes: &[FaultClass]) -> Vec<Fault> {
    // The provider class applies only to a file whose server runs the Planner itself; left out
    // elsewhere, it changes no other file's schedules.
    let in_server = file.settings.harness.as_deref() == Some("provider");
    let classes: Vec<FaultClass> = classes
        .iter()
        .copied()
        .filter(|c| *c != FaultClass::Provider || in_server)
        .collect();
    let classes = classes.as_slice();
    let mut draws = Draws(seed ^ 0x5ca1_ab1e);
    let count = 1 + draws.below(3) as usize;
    let steps = file.steps.len();
    let mut faults = Vec::new();
    for _ in 0..count {
        if classes.is_empty() {
            break;
        }
        let class = classes[draws.below(classes.len() as u64) as usize];
        let on = draws.below(steps as u64 + 1) as usize;
        let off = (on + 1 + draws.below((steps - on.min(steps)) as u64 + 1) as usize).min(steps);
        let server = crate::SERVER_HOST.to_owned();
        let client = |draws: &mut Draws| {
            let hosts = hosts_before(file, on);
            (!hosts.is_empty()).then(|| hosts[draws.below(hosts.len() as u64) as usize].clone())
        };
        let (start, end): (Vec<Action>, Vec<Action>) = match class {
            FaultClass::Partitions => {
                let Some(host) = client(&mut draws) else {
                    continue;
                };
                (
                    vec![Action::Partition {
                        a: host.clone(),
                        b: server.clone(),
                    }],
                    vec![Action::Repair { a: host, b: server }],
                )
            }
            FaultClass::Latency => {
                let Some(host) = client(&mut draws) else {
                    continue;
                };
                (
                    vec![Action::Latency {
                        a: host.clone(),
                        b: server.clone(),
                        ms: Some(1 + draws.below(5_000)),
                    }],
                    vec![Action::Latency {
                        a: host,
                        b: server,
                        ms: None,
                    }],
                )
            }
            FaultClass::Drops => {
                let Some(host) = client(&mut draws) else {
                    continue;
                };
                (
                    vec![Action::Drops {
                        a: host.clone(),
                        b: server.clone(),
                        rate: (1 + draws.below(30)) as f64 / 100.0,
                    }],
                    vec![Action::Drops {
                        a: host,
                        b: server,
                        rate: 0.0,
                    }],
                )
            }
            FaultClass::Crashes => (
                vec![
                    Action::Restart,
                    Action::AwaitServer {
                        within_ms: WRITER_LEASE_TTL_MS as u64 + 10_000,
                    },
                ],
                Vec::new(),
            ),
            FaultClass::GithubOutage => (
                vec![Action::GithubOutage { on: true }],
                vec![Action::GithubOutage { on: false }],
            ),
            FaultClass::Provider => {
                if file.settings.harness.as_deref() != Some("provider") {
                    continue;
                }
                use chopin_fixtures::model_provider::{Chunk, Reply};
                let text = |t: &str| Chunk::Text { text: t.to_owned() };
                let broken = |last: Chunk| Reply::Stream {
                    chunks: vec![text("Partly "), last],
                    input_tokens: 1,
                    output_tokens: 1,
                };
                match draws.below(8) {
                    0 => (
                        vec![Action::ProviderOutage { status: Some(503) }],
                        vec![Action::ProviderOutage { status: None }],
                    ),
                    1 => (
                        vec![Action::Partition {
                            a: server.clone(),
                            b: crate::world::MODEL_HOST.to_owned(),
                        }],
                        vec![Action::Repair {
                            a: server,
                            b: crate::world::MODEL_HOST.to_owned(),
                        }],
                    ),
                    pick => {
                        let reply = match pick {
                            2 => Reply::Error {
                                status: 429,
                                retry_after_s: Some(draws.below(40)),
                                message: "slow down".to_owned(),
                            },
                            3 => Reply::Error {
                                status: 429,
                                retry_after_s: None,
                                message: "slow down".to_owned(),
                            },
                            4 => Reply::Error {
                                status: 500 + draws.below(4) as u16,
                                retry_after_s: None,
                                message: "upstream failed".to_owned(),
                            },
                            5 => broken(Chunk::Cut),
                            6 => broken(Chunk::Malformed),
                            _ => Reply::Hang,
                        };
                        (
                            vec![Action::ProviderReply { reply, next: true }],
                            Vec::new(),
                        )
                    }
                }
            }
            FaultClass::HostileUpdates | FaultClass::LargeDocuments => {
                let browsers = browsers_before(file, on);
                if browsers.is_empty() {
                    continue;
                }
                let browser = browsers[draws.below(browsers.len() as u64) as usize].clone();
                let step = match class {
                    FaultClass::HostileUpdates => Action::HostileUpdate {
                        browser,
                        kind: if draws.below(2) == 0 {
                            "gapped"
                        } else {
                            "duplicate"
                        }
                        .to_owned(),
                        bytes: 1 + draws.below(32 * 1024) as usize,
                    },
                    _ => Action::Fill {
                        browser,
                        bytes: 512 * 1024 + draws.below(5 * 512 * 1024) as usize,
                    },
                };
                (vec![step], Vec::new())
            }
            FaultClass::SilentResume => {
                // Right before one of the file's own `resume` steps: the client heard
                // `attached` and says nothing more.
                let resumes: Vec<(usize, String)> = file
                    .steps
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| match a {
                        Action::Resume { agent, .. } => Some((i, agent.clone())),
                        _ => None,
                    })
                    .collect();
                if resumes.is_empty() {
                    continue;
                }
                let (at, agent) = resumes[draws.below(resumes.len() as u64) as usize].clone();
                faults.push(Fault {
                    before: at,
                    steps: vec![Action::Silence { agent }],
                });
                continue;
            }
            FaultClass::Revocations => {
                let (login, role) = if draws.below(2) == 0 {
                    ("mona", "write")
                } else {
                    ("lisa", "admin")
                };
                (
                    vec![Action::GithubRole {
                        login: login.to_owned(),
                        role: "none".to_owned(),
                    }],
                    vec![Action::GithubRole {
                        login: login.to_owned(),
                        role: role.to_owned(),
                    }],
                )
            }
        };
        faults.push(Fault {
            before: on,
            steps: start,
        });
        if !end.is_empty() {
            faults.push(Fault {
                before: off,
                steps: end,
            });
        }
    }
    // Stable: a fault switched on and off before the same step stays in that order.
    faults.sort_by_key(|f| f.before);
    faults
}

/// `file` with `faults` inserted and its expectations left out: the scenario a schedule plays.
pub fn with_faults(file: &ScenarioFile, faults: &[Fault], note: &str) -> ScenarioFile {
    let mut steps = Vec::new();
    for (i, step) in file.steps.iter().enumerate() {
        for fault in faults.iter().filter(|f| f.before == i) {
            steps.extend(fault.steps.iter().cloned());
        }
        if !step.expects() {
            steps.push(step.clone());
        }
    }
    for fault in faults.iter().filter(|f| f.before >= file.steps.len()) {
        steps.extend(fault.steps.iter().cloned());
    }
    ScenarioFile {
        name: format!("{} — {note}", file.name),
        steps,
        ..file.clone()
    }
}

/// A schedule that broke an invariant: the seed, the schedule as found and as shrunk, and the
/// shrunk scenario's run.
pub struct Found {
    pub seed: u64,
    pub faults: Vec<Fault>,
    pub shrunk: Vec<Fault>,
    pub scenario: ScenarioFile,
    pub verdict: Verdict,
}

/// What an exploration did.
pub struct Explored {
    pub seeds_run: u64,
    pub elapsed: Duration,
    pub found: Option<Found>,
}

/// Plays `file` under the schedules of `seeds` (in order, each with its own seed for the
/// world too) until an invariant breaks or `budget` is spent; a breaking schedule is shrunk.
pub fn explore(
    file: &ScenarioFile,
    seeds: std::ops::Range<u64>,
    classes: &[FaultClass],
    budget: Duration,
) -> Explored {
    let started = Instant::now();
    let mut seeds_run = 0;
    for seed in seeds {
        if started.elapsed() > budget {
            break;
        }
        seeds_run += 1;
        let faults = schedule(file, seed, classes);
        let played = with_faults(file, &faults, &format!("explored, seed {seed}"));
        let verdict = play_as(&played, Some(seed), Mode::Explore);
        if verdict.violation {
            let shrunk = shrink(file, seed, &faults, &verdict);
            let scenario = with_faults(
                file,
                &shrunk,
                &format!("found by explore (seed {seed}), shrunk"),
            );
            let scenario = ScenarioFile {
                seed,
                lenient: true,
                ..scenario
            };
            let verdict = play_as(&scenario, Some(seed), Mode::Explore);
            return Explored {
                seeds_run,
                elapsed: started.elapsed(),
                found: Some(Found {
                    seed,
                    faults,
                    shrunk,
                    scenario,
                    verdict,
                }),
            };
        }
    }
    Explored {
        seeds_run,
        elapsed: started.elapsed(),
        found: None,
    }
}

/// The invariant a verdict broke: its name, the words before the first colon.
fn broken(verdict: &Verdict) -> Option<String> {
    let (_, why) = verdict.failure.as_ref()?;
    let rule = why.strip_prefix("invariant broken — ")?;
    Some(rule.split(':').next().unwrap_or(rule).to_owned())
}

/// The smallest schedule found that still breaks the same invariant with the same seed: the
/// switchings taken out one at a time while it still breaks.
pub fn shrink(file: &ScenarioFile, seed: u64, faults: &[Fault], first: &Verdict) -> Vec<Fault> {
    let Some(rule) = broken(first) else {
        return faults.to_vec();
    };
    let still_breaks = |candidate: &[Fault]| {
        let played = with_faults(file, candidate, "shrinking");
        let verdict = play_as(&played, Some(seed), Mode::Explore);
        verdict.violation && broken(&verdict).as_deref() == Some(rule.as_str())
    };
    let mut current = faults.to_vec();
    let mut i = 0;
    while i < current.len() {
        let mut candidate = current.clone();
        candidate.remove(i);
        if still_breaks(&candidate) {
            current = candidate;
        } else {
            i += 1;
        }
    }
    current
}
