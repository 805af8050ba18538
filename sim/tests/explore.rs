//! Fault exploration finds planted bugs and shrinks them. With the grace hold planted off (an
//! attach arriving in its account's grace period no longer holds the period open while it is
//! checked), exploring the AO-09 scenario under every fault class breaks "grace honoured" within
//! 10 seeds; the schedule shrinks to at most one fault; the scenario written from it breaks the
//! same invariant when played again, from its own seed. Without the plant, the same seeds hold.
//! With journal-after-relay planted (a writer's update relayed before it is journalled), the
//! two-writer edit scenario breaks "relayed edits are durable" the same way; with the tool
//! recheck's ownership check planted off, a reset during a slow recheck breaks "tools run under
//! their owner"; with Chat's cap on sends planted off, twenty-one senders break "at most 20
//! sends at once". The hostile-input plants: the whole state journalled for each update breaks
//! "bytes bounded", a write cap of 2 MiB "frames fit", the shadow check off "a fresh client can
//! open", and a `resume` awaited with no deadline "no wait without a deadline".

use std::path::Path;
use std::time::Duration;

use chopin_sim::explore::{explore, schedule, with_faults, FaultClass, Found};
use chopin_sim::scenario::{play, play_as, Mode, ScenarioFile};

/// The scenario file `scenarios/NAME.toml`.
fn scenario(name: &str) -> ScenarioFile {
    ScenarioFile::read(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.toml")),
    )
    .unwrap()
}

fn ao_09() -> ScenarioFile {
    scenario("ao-09-reattach-1ms-before-grace-end")
}

const BUDGET: Duration = Duration::from_secs(600);

/// Explores scenario `name` with `plant` planted over seeds 0..10: a schedule breaks
/// `invariant`, shrinks to at most one fault, and the scenario written from it, read back,
/// breaks it again when replayed from its own seed, to the same trace.
fn found_by_explore(name: &str, plant: &str, invariant: &str) -> Found {
    found_by_explore_in(name, plant, invariant, &FaultClass::NETWORK)
}

/// [`found_by_explore`] drawing faults from `classes`.
fn found_by_explore_in(name: &str, plant: &str, invariant: &str, classes: &[FaultClass]) -> Found {
    let file = ScenarioFile {
        plant: vec![plant.to_owned()],
        ..scenario(name)
    };
    let explored = explore(&file, 0..10, classes, BUDGET);
    let found = explored.found.expect("found within 10 seeds");
    let (_, why) = found
        .verdict
        .failure
        .clone()
        .expect("the shrunk run breaks it");
    assert!(
        why.starts_with(&format!("invariant broken — {invariant}")),
        "{why}"
    );
    assert!(found.shrunk.len() <= 1, "{:?}", found.shrunk);
    let again = ScenarioFile::parse(&found.scenario.to_toml()).unwrap();
    let replayed = play(&again, None);
    assert!(replayed.violation, "{:?}", replayed.failure);
    assert_eq!(replayed.trace.hash(), found.verdict.trace.hash());
    found
}

#[test]
fn explore_finds_the_grace_hold_planted_off_and_shrinks_it_to_a_replayable_file() {
    let found = found_by_explore(
        "ao-09-reattach-1ms-before-grace-end",
        "grace-hold-off",
        "grace honoured",
    );
    assert!(found.shrunk.len() <= found.faults.len());
    let text = found.scenario.to_toml();
    let again = ScenarioFile::parse(&text).unwrap();
    assert!(again.lenient && again.plant == ["grace-hold-off"], "{text}");
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
    // Without the plant, the file passes (the scenarios test holds it to its snapshot).
    found_by_explore(
        "edits-relayed-between-writers-survive-a-crash",
        "journal-after-relay",
        "relayed edits are durable",
    );
}

#[test]
fn explore_finds_the_ownership_recheck_planted_off_and_shrinks_it_to_a_replayable_file() {
    found_by_explore(
        "perm-a-reset-during-a-tools-recheck-denies-the-tool",
        "ownership-recheck-off",
        "tools run under their owner",
    );
}

#[test]
fn explore_finds_the_sends_cap_planted_off() {
    found_by_explore(
        "msg-20-twenty-one-senders-at-once",
        "sends-cap-off",
        "at most 20 sends at once",
    );
}

#[test]
fn explore_finds_the_whole_state_journalled_planted_and_shrinks_it() {
    found_by_explore_in(
        "hostile-1-a-gapped-update-is-refused-and-keystrokes-stay-keystrokes",
        "journal-whole-state",
        "bytes bounded",
        &FaultClass::ALL,
    );
}

#[test]
fn explore_finds_the_small_write_cap_planted_and_shrinks_it() {
    found_by_explore_in(
        "hostile-2-a-document-near-its-limits-still-opens-for-a-fresh-client",
        "write-cap-small",
        "frames fit",
        &FaultClass::ALL,
    );
}

#[test]
fn explore_finds_the_poison_guard_planted_off_and_shrinks_it() {
    found_by_explore_in(
        "hostile-2-a-poisonous-update-is-refused-and-the-document-still-opens",
        "poison-guard-off",
        "a fresh client can open",
        &FaultClass::ALL,
    );
}

#[test]
fn explore_finds_the_unbounded_resume_wait_planted_and_shrinks_it() {
    found_by_explore_in(
        "hostile-3-a-client-silent-before-resume-is-closed-at-the-deadline",
        "resume-wait-unbounded",
        "no wait without a deadline",
        &FaultClass::ALL,
    );
}

#[test]
fn explore_finds_a_swallowed_claim_refusal_planted_and_shrinks_it() {
    found_by_explore_in(
        "life-33-two-coding-agents-claim-one-graph-at-the-same-millisecond",
        "claim-refusal-ignored",
        "claims are kept",
        &FaultClass::ALL,
    );
}

#[test]
fn explore_finds_a_run_end_split_in_two_writes_planted_and_shrinks_it() {
    found_by_explore_in(
        "life-46-a-revision-request-unlocks-the-graph-for-the-next-claim",
        "run-end-split",
        "a locked version has its run",
        &FaultClass::ALL,
    );
}

#[test]
fn the_hostile_fault_classes_break_nothing_without_a_plant() {
    // The new fault classes alone, on scenarios with browsers and a resume: no invariant breaks.
    let classes = [
        FaultClass::HostileUpdates,
        FaultClass::LargeDocuments,
        FaultClass::SilentResume,
    ];
    for name in [
        "edits-relayed-between-writers-survive-a-crash",
        "atm-35-a-stop-pressed-while-the-link-is-away-is-held-for-its-return",
    ] {
        let file = scenario(name);
        for seed in 0..3 {
            let faults = schedule(&file, seed, &classes);
            let played = with_faults(&file, &faults, "test");
            let verdict = play_as(&played, Some(seed), Mode::Explore);
            assert!(
                !verdict.violation,
                "{name}, seed {seed}: {:?}",
                verdict.failure
            );
        }
    }
}
