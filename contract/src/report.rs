//! The suite's reports beyond the table: JSON for tools, JUnit XML for CI systems.
//!
//! Owns: [`json`] and [`junit`], each rendering one adapter's [`Report`]. Does not own: running
//! the checks ([`crate::run`]) or the table (`Report`'s `Display`).
//!
//! JUnit: one `testsuite` named `chopin-contract.<harness>` with a `testcase` per check (its
//! label as the name, its time in seconds) and a `failure` carrying the check's detail where it
//! failed; the passing detail goes in `system-out`, so a CI page shows what was seen either way.

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;
use serde::Serialize;

use crate::{Report, Verdict};

#[derive(Serialize)]
struct JsonCheck<'a> {
    id: &'a str,
    name: &'a str,
    rule: &'a str,
    result: String,
    detail: &'a str,
    millis: u64,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    harness: &'a str,
    passed: bool,
    total: usize,
    failed: usize,
    checks: Vec<JsonCheck<'a>>,
}

/// `report` for `harness` as one JSON document.
pub fn json(harness: &str, report: &Report) -> String {
    let checks = report
        .rows
        .iter()
        .map(|row| {
            let (id, name) = row
                .check
                .split_once(' ')
                .unwrap_or((row.check.as_str(), ""));
            JsonCheck {
                id,
                name,
                rule: &row.rule,
                result: row.result.to_string(),
                detail: &row.detail,
                millis: row.millis,
            }
        })
        .collect();
    let body = JsonReport {
        harness,
        passed: report.passed(),
        total: report.rows.len(),
        failed: report.failed().len(),
        checks,
    };
    serde_json::to_string_pretty(&body).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// `report` for `harness` as JUnit XML.
pub fn junit(harness: &str, report: &Report) -> Result<String, std::io::Error> {
    let suite = format!("chopin-contract.{harness}");
    let total = report.rows.len().to_string();
    let failures = report.failed().len().to_string();
    let seconds = |millis: u64| format!("{:.3}", millis as f64 / 1000.0);
    let time = seconds(report.rows.iter().map(|r| r.millis).sum());
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let mut suites = BytesStart::new("testsuites");
    suites.push_attribute(("name", "chopin-contract"));
    suites.push_attribute(("tests", total.as_str()));
    suites.push_attribute(("failures", failures.as_str()));
    suites.push_attribute(("time", time.as_str()));
    w.write_event(Event::Start(suites))?;
    let mut testsuite = BytesStart::new("testsuite");
    testsuite.push_attribute(("name", suite.as_str()));
    testsuite.push_attribute(("tests", total.as_str()));
    testsuite.push_attribute(("failures", failures.as_str()));
    testsuite.push_attribute(("errors", "0"));
    testsuite.push_attribute(("skipped", "0"));
    testsuite.push_attribute(("time", time.as_str()));
    w.write_event(Event::Start(testsuite))?;
    for row in &report.rows {
        let mut case = BytesStart::new("testcase");
        case.push_attribute(("classname", suite.as_str()));
        case.push_attribute(("name", row.check.as_str()));
        let time = seconds(row.millis);
        case.push_attribute(("time", time.as_str()));
        w.write_event(Event::Start(case))?;
        if row.result == Verdict::Fail {
            let mut failure = BytesStart::new("failure");
            failure.push_attribute(("message", row.detail.as_str()));
            failure.push_attribute(("type", "contract"));
            w.write_event(Event::Start(failure))?;
            w.write_event(Event::Text(BytesText::new(&format!(
                "{}\nrule: {}",
                row.detail, row.rule
            ))))?;
            w.write_event(Event::End(BytesEnd::new("failure")))?;
        } else {
            w.write_event(Event::Start(BytesStart::new("system-out")))?;
            w.write_event(Event::Text(BytesText::new(&row.detail)))?;
            w.write_event(Event::End(BytesEnd::new("system-out")))?;
        }
        w.write_event(Event::End(BytesEnd::new("testcase")))?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    w.write_event(Event::End(BytesEnd::new("testsuites")))?;
    let mut xml = String::from_utf8(w.into_inner()).map_err(std::io::Error::other)?;
    xml.push('\n');
    Ok(xml)
}
