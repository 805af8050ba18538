//! The `chopin-contract` binary: a table with every check passing for `fake` and for `remote`,
//! exit 2 naming the known adapters for an unknown name.

use std::process::Command;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_chopin-contract"))
        .args(args)
        .output()
        .expect("the chopin-contract binary runs")
}

#[test]
fn rfc_20_cli_prints_every_check_passing_for_fake() {
    let out = cli(&["--harness", "fake"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for check in chopin_contract::checks() {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&check.label()))
            .unwrap_or_else(|| panic!("no row for {}: {stdout}", check.label()));
        assert!(line.contains(" pass "), "{line}");
    }
    let total = chopin_contract::checks().len();
    assert!(
        stdout.contains(&format!("{total} passed, 0 failed")),
        "{stdout}"
    );
}

#[test]
fn rfc_66_cli_prints_every_check_passing_for_remote() {
    let out = cli(&["--harness", "remote"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("harness: remote\n"), "{stdout}");
    for check in chopin_contract::checks() {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&check.label()))
            .unwrap_or_else(|| panic!("no row for {}: {stdout}", check.label()));
        assert!(line.contains(" pass "), "{line}");
    }
    let total = chopin_contract::checks().len();
    assert!(
        stdout.contains(&format!("{total} passed, 0 failed")),
        "{stdout}"
    );
}

#[test]
fn rfc_24_cli_unknown_harness_exits_2_naming_the_known_ones() {
    let out = cli(&["--harness", "copilot-sdk"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown harness \"copilot-sdk\""),
        "{stderr}"
    );
    assert!(stderr.contains("known: fake, provider, remote"), "{stderr}");
}

fn every_check_passes_in(stdout: &str) {
    for check in chopin_contract::checks() {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&check.label()))
            .unwrap_or_else(|| panic!("no row for {}: {stdout}", check.label()));
        assert!(line.contains(" pass "), "{line}");
    }
    let total = chopin_contract::checks().len();
    assert!(
        stdout.contains(&format!("{total} passed, 0 failed")),
        "{stdout}"
    );
}

#[test]
fn rfc_75_cli_passes_every_check_for_provider_on_the_openai_wire() {
    let out = cli(&["--harness", "provider"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("harness: provider\n"), "{stdout}");
    every_check_passes_in(&stdout);
}

#[test]
fn rfc_75_cli_passes_every_check_for_provider_on_the_anthropic_wire() {
    let out = cli(&["--harness", "provider", "--wire", "anthropic"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("harness: provider (anthropic)\n"),
        "{stdout}"
    );
    every_check_passes_in(&stdout);
}

#[test]
fn cli_report_json_on_stdout_and_junit_to_a_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let junit = dir.path().join("fake.xml");
    let junit_arg = format!("junit={}", junit.display());
    let out = cli(&[
        "--harness",
        "fake",
        "--report",
        "json",
        "--report",
        &junit_arg,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--report json prints one JSON document");
    let total = chopin_contract::checks().len();
    assert_eq!(json["harness"], "fake");
    assert_eq!(json["passed"], true);
    assert_eq!(json["total"], total);
    assert_eq!(json["failed"], 0);
    let checks = json["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), total);
    for (row, check) in checks.iter().zip(chopin_contract::checks()) {
        assert_eq!(row["id"], check.id);
        assert_eq!(row["result"], "pass");
        assert!(
            !row["rule"].as_str().unwrap_or_default().is_empty(),
            "{row}"
        );
    }
    let xml = std::fs::read_to_string(&junit).expect("the JUnit report was written");
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    assert!(
        xml.contains(&format!(
            "<testsuite name=\"chopin-contract.fake\" tests=\"{total}\" failures=\"0\""
        )),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), total, "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn cli_refuses_a_bad_wire_or_report_with_exit_2() {
    for (args, words) in [
        (
            vec!["--harness", "provider", "--wire", "gemini"],
            "--wire takes openai or anthropic, not \"gemini\"",
        ),
        (
            vec!["--harness", "fake", "--wire", "openai"],
            "--wire is for the provider harness, not fake",
        ),
        (
            vec!["--harness", "fake", "--report", "html"],
            "--report takes table, json or junit=PATH, not \"html\"",
        ),
        (
            vec!["--harness", "fake", "--report", "junit="],
            "--report takes table, json or junit=PATH",
        ),
    ] {
        let out = cli(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
}

#[test]
fn cli_junit_report_it_cannot_write_exits_2() {
    let out = cli(&[
        "--harness",
        "fake",
        "--report",
        "junit=/nonexistent-dir/x/report.xml",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("could not write /nonexistent-dir/x/report.xml"),
        "{stderr}"
    );
}

#[test]
fn rfc_14_ci_runs_the_suite_for_every_adapter_in_the_map() {
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/run"))
        .expect(".ci/run exists");
    for name in chopin_contract::known_harnesses() {
        assert!(
            ci.contains(&format!("--harness {name}")),
            ".ci/run does not run the contract for {name}"
        );
    }
    for wire in ["openai", "anthropic"] {
        assert!(ci.contains(&format!("--wire {wire}")), "{wire} not run");
    }
    assert!(ci.contains("--report \"junit="), "{ci}");
}
