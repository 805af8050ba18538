//! The scenario files of `scenarios/`: each passes and its timeline matches the snapshot kept
//! beside it (`scenarios/snapshots/NAME.snap`, which `chopin-sim check --bless` writes too); and
//! the language fails when the server does something else than a file says — an event 1 ms
//! away from where it is expected, an event that must not happen, a presence or an owner that
//! differs — naming the step and why.

use std::path::{Path, PathBuf};

use chopin_sim::scenario::{play, timeline, ScenarioFile};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

fn files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_scenario_file_passes_and_matches_its_snapshot() {
    let files = files();
    assert!(files.len() >= 12, "{files:?}");
    for path in files {
        let file = ScenarioFile::read(&path).unwrap();
        let verdict = play(&file, None);
        assert!(
            verdict.passed(),
            "{}: {:?}\n{}",
            path.display(),
            verdict.failure,
            timeline(&verdict.trace)
        );
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        insta::with_settings!({
            snapshot_path => scenarios_dir().join("snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(name, timeline(&verdict.trace));
        });
    }
}

/// The AO-09 file with `replace` applied to its text.
fn ao_09_with(from: &str, to: &str) -> ScenarioFile {
    let text =
        std::fs::read_to_string(scenarios_dir().join("ao-09-reattach-1ms-before-grace-end.toml"))
            .unwrap();
    assert!(text.contains(from), "{from}");
    ScenarioFile::parse(&text.replace(from, to)).unwrap()
}

#[test]
fn an_event_1_ms_off_its_expected_millisecond_fails_the_scenario_either_way() {
    for shifted in ["detached + 119998", "detached + 120000"] {
        let file = ao_09_with(
            r#"text = "attach-received", at = "detached + 119999""#,
            &format!(r#"text = "attach-received", at = "{shifted}""#),
        );
        let verdict = play(&file, None);
        let (step, why) = verdict.failure.expect("the scenario fails");
        assert_eq!(step, 11, "{why}");
        assert!(
            why.contains("expected an event on server containing \"attach-received\" at")
                && why.contains("but the first from"),
            "{why}"
        );
    }
}

#[test]
fn an_event_that_must_not_happen_fails_the_scenario() {
    // The grace period ends after the step checking that nothing was released, so checking it
    // after the deadline instead must fail.
    let file = ao_09_with(
        r#"{ do = "advance", ms = 10 },"#,
        r#"{ do = "advance", ms = 10 }, { do = "detach", agent = "mona-2" }, { do = "advance", ms = 120100 },"#,
    );
    let verdict = play(&file, None);
    let (step, why) = verdict.failure.expect("the scenario fails");
    assert_eq!(step, 16, "{why}");
    assert!(
        why.starts_with("expected no event containing \"released\""),
        "{why}"
    );
}

#[test]
fn a_presence_or_owner_other_than_the_file_says_fails_the_scenario() {
    let file = ao_09_with(
        r#"{ do = "expect-presence", state = "attached", login = "mona" },"#,
        r#"{ do = "expect-presence", state = "attached", login = "lisa" },"#,
    );
    let (_, why) = play(&file, None).failure.expect("fails");
    assert!(
        why.contains("expected presence attached Some(\"lisa\")"),
        "{why}"
    );
    let file = ao_09_with(
        r#"{ do = "expect-holder", generation = 1, login = "mona" },
]"#,
        r#"{ do = "expect-holder", generation = 2, login = "mona" },
]"#,
    );
    let (_, why) = play(&file, None).failure.expect("fails");
    assert!(
        why.contains("expected the stored owner generation 2"),
        "{why}"
    );
}

#[test]
fn a_file_with_an_unknown_step_or_field_is_refused_with_where() {
    let bad = r#"name = "x"
steps = [ { do = "teleport", to = "mars" } ]
"#;
    let e = ScenarioFile::parse(bad).unwrap_err();
    assert!(e.contains("teleport") && e.contains("line 2"), "{e}");
    let bad = r#"name = "x"
steps = [ { do = "advance", milliseconds = 5 } ]
"#;
    let e = ScenarioFile::parse(bad).unwrap_err();
    assert!(e.contains("milliseconds"), "{e}");
}

#[test]
fn a_time_naming_no_mark_fails_with_the_expression() {
    let file = ScenarioFile::parse(
        r#"name = "x"
steps = [ { do = "advance-to", at = "nowhere + 5" } ]
"#,
    )
    .unwrap();
    let (step, why) = play(&file, None).failure.expect("fails");
    assert_eq!(step, 1);
    assert!(why.contains("no mark \"nowhere\""), "{why}");
}

#[test]
fn the_bench_scenarios_parse_and_the_short_one_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    ScenarioFile::read(&dir.join("reconnect-10-min.toml")).unwrap();
    let one = ScenarioFile::read(&dir.join("reconnect-1-min.toml")).unwrap();
    let verdict = play(&one, None);
    assert!(verdict.passed(), "{:?}", verdict.failure);
    assert!(verdict.ended_ms >= 60_000);
}
