//! Fault exploration finds planted bugs and shrinks them. With the grace hold planted off (an
//! attach arriving in its account's grace period no longer holds the period open while it is
//! checked), exploring the AO-09 scenario under every fault class breaks "grace honoured" within
//! 10 seeds; the schedule shrinks to at most one fault; the scenario written from it breaks the
//! same invariant when played again, from its own seed. Without the plant, the same seeds hold.
//! With journal-after-relay planted (a writer's update relayed before it is journalled), the
//! two-writer edit scenario breaks "relayed edits are durable" the same way; with the tool
//! recheck's ownership check planted off, a reset during a slow recheck breaks "tools run under
//! their owner"; with Chat's cap on sends planted off, twenty-one senders break "at most 20
//! sends at once".

use std::path::Path;
use std::time::Duration;

use chopin_sim::explore::{explore, schedule, with_faults, FaultClass};
use chopin_sim::scenario::{play, play_as, Mode, ScenarioFile};

fn ao_09() -> ScenarioFile {
    ScenarioFile::read(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/ao-09-reattach-1ms-before-grace-end.toml"),
    )
    .unwrap()
}

const BUDGET: Duration = Duration::from_secs(600);

#[test]
fn explore_finds_the_grace_hold_planted_off_and_shrinks_it_to_a_replayable_file() {
    let file = ScenarioFile {
        plant: vec!["grace-hold-off".to_owned()],
        ..ao_09()
    };
    let explored = explore(&file, 0..10, &FaultClass::ALL, BUDGET);
    let found = explored.found.expect("found within 10 seeds");
    let (_, why) = found
        .verdict
        .failure
        .clone()
        .expect("the shrunk run breaks it");
    assert!(
        why.starts_with("invariant broken — grace honoured"),
        "{why}"
    );
    assert!(found.shrunk.len() <= 1, "{:?}", found.shrunk);
    assert!(found.shrunk.len() <= found.faults.len());
    // Written and read back, it replays to the same break from its own seed.
    let text = found.scenario.to_toml();
    let again = ScenarioFile::parse(&text).unwrap();
    assert!(again.lenient && again.plant == ["grace-hold-off"], "{text}");
    let replayed = play(&again, None);
    assert!(replayed.violation, "{:?}", replayed.failure);
    assert_eq!(replayed.trace.hash(), found.verdict.trace.hash());
}

#[test]
fn without_the_plant_the_same_schedules_break_nothing() {
    let file = ao_09();
    for seed in 0..4 {
        let faults = schedule(&file, seed, &FaultClass::ALL);
        assert!(!faults.is_empty());
        let played = with_faults(&file, &faults, "test");
        let verdict = play_as(&played, Some(seed), Mode::Explore);
        assert!(!verdict.violation, "seed {seed}: {:?}", verdict.failure);
    }
}

#[test]
fn a_seed_gives_the_same_schedule_and_trace_every_time() {
    let file = ao_09();
    let a = with_faults(&file, &schedule(&file, 7, &FaultClass::ALL), "a").to_toml();
    let b = with_faults(&file, &schedule(&file, 7, &FaultClass::ALL), "a").to_toml();
    assert_eq!(a, b);
    let first = play(&ScenarioFile::parse(&a).unwrap(), Some(7));
    let second = play(&ScenarioFile::parse(&b).unwrap(), Some(7));
    assert_eq!(first.trace.hash(), second.trace.hash());
}

#[test]
fn explore_finds_journal_after_relay_planted_and_shrinks_it_to_a_replayable_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/edits-relayed-between-writers-survive-a-crash.toml");
    let file = ScenarioFile {
        plant: vec!["journal-after-relay".to_owned()],
        ..ScenarioFile::read(&path).unwrap()
    };
    // Without the plant, the file passes (the scenarios test holds it to its snapshot).
    let explored = explore(&file, 0..10, &FaultClass::ALL, BUDGET);
    let found = explored.found.expect("found within 10 seeds");
    let (_, why) = found
        .verdict
        .failure
        .clone()
        .expect("the shrunk run breaks it");
    assert!(
        why.starts_with("invariant broken — relayed edits are durable"),
        "{why}"
    );
    assert!(found.shrunk.len() <= 1, "{:?}", found.shrunk);
    let again = ScenarioFile::parse(&found.scenario.to_toml()).unwrap();
    let replayed = play(&again, None);
    assert!(replayed.violation, "{:?}", replayed.failure);
    assert_eq!(replayed.trace.hash(), found.verdict.trace.hash());
}

#[test]
fn explore_finds_the_ownership_recheck_planted_off_and_shrinks_it_to_a_replayable_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/perm-a-reset-during-a-tools-recheck-denies-the-tool.toml");
    let file = ScenarioFile {
        plant: vec!["ownership-recheck-off".to_owned()],
        ..ScenarioFile::read(&path).unwrap()
    };
    let explored = explore(&file, 0..10, &FaultClass::ALL, BUDGET);
    let found = explored.found.expect("found within 10 seeds");
    let (_, why) = found
        .verdict
        .failure
        .clone()
        .expect("the shrunk run breaks it");
    assert!(
        why.starts_with("invariant broken — tools run under their owner"),
        "{why}"
    );
    assert!(found.shrunk.len() <= 1, "{:?}", found.shrunk);
    let again = ScenarioFile::parse(&found.scenario.to_toml()).unwrap();
    let replayed = play(&again, None);
    assert!(replayed.violation, "{:?}", replayed.failure);
}

#[test]
fn explore_finds_the_sends_cap_planted_off() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/msg-20-twenty-one-senders-at-once.toml");
    let file = ScenarioFile {
        plant: vec!["sends-cap-off".to_owned()],
        ..ScenarioFile::read(&path).unwrap()
    };
    let explored = explore(&file, 0..10, &FaultClass::ALL, BUDGET);
    let found = explored.found.expect("found within 10 seeds");
    let (_, why) = found
        .verdict
        .failure
        .clone()
        .expect("the shrunk run breaks it");
    assert!(
        why.starts_with("invariant broken — at most 20 sends at once"),
        "{why}"
    );
    assert!(found.shrunk.len() <= 1, "{:?}", found.shrunk);
}
