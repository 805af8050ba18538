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
