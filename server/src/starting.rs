//! The `starting` state of a document's Planner on a paired machine (PRES-12..24): what the room
//! is told between the server asking a machine to run the Planner and the machine's backend
//! attaching, and why it has not attached yet.
//!
//! Owns: one document's wait ([`Wait`]) and its rules — the failure a connector reports from the
//! second failed launch in a row, timed by the server's clock (PRES-13, PRES-15), the line it
//! reports cleaned by the server itself: colours and credentials removed, the home folder as `~`,
//! at most 300 characters (RULINGS PRES-14, [`clean_line`]); the failures the server infers for a
//! connector too old to report (PRES-18, PRES-19): each credential request while nothing is
//! attached is a launch, and from the third in a row the launches that ended show; the patience
//! failure once `PLANNER_PATIENCE_MS` has passed without an attach (PRES-20, RULINGS PRES-24),
//! set by the sweep ([`Wait::sweep`]); and which of them is told (a report wins, PRES-22).
//! Does not own: when a wait starts or is forgotten (the planner table: a person's choice, a
//! credential request, an attach, a move to another machine), the sweep's timer, or the routes.
//!
//! Everything here is in memory: a restart forgets it (PRES-16).

use serde::Serialize;
use uuid::Uuid;

use crate::store::UnixMillis;

/// How often the sweep looks for machines past their patience (PRES-21).
pub const SWEEP_EVERY_MS: u64 = 15_000;
/// The first connector release that reports failed launches (`PLANNER_REPORTS_FROM`).
pub const PLANNER_REPORTS_FROM: &str = "0.0.23";
/// The longest reason told, in characters (PRES-13).
pub const REASON_MAX_CHARS: usize = 300;
/// The patience failure's reason when no credential request was seen since the machine was
/// asked (RULINGS PRES-24).
pub const NOT_ANSWERED: &str = "It hasn't answered yet";
/// The patience failure's reason when a credential request was seen but nothing attached.
pub const NOT_CONNECTED: &str = "It started but hasn't connected yet";

/// Why the machine cannot be connected to, as the room is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// Launches that ended in a row (0 for the patience failure).
    pub attempts: u32,
    pub reason: String,
    /// Server time: when the last launch ended, or since when it has been waited on.
    pub at: UnixMillis,
}

/// What a connector reports of a backend launch (`POST /api/connector/planner/failure`).
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Failed launches in a row, this one included.
    pub attempts: u32,
    /// How the last one ended (`exit code 1`, `signal 9`).
    pub ended: Option<String>,
    /// The last stderr line that says why.
    pub stderr: Option<String>,
    /// The connector says a launch stayed up: what was reported is forgotten.
    pub stayed_up: bool,
}

/// A document waiting for its machine's backend to attach.
#[derive(Debug, Clone)]
pub struct Wait {
    pub machine: Uuid,
    /// The machine owner's login: the login the room is told.
    pub login: String,
    /// The connector's release, as last told.
    pub release: Option<String>,
    /// A person moved the document to this machine: the starting word names it (PRES-04,
    /// RULINGS PRES-05).
    pub switch: bool,
    /// Since when the machine has been waited on (server time).
    pub since_ms: UnixMillis,
    credential_requests: u32,
    reported: Option<Failure>,
    inferred: Option<Failure>,
    patience: Option<Failure>,
}

impl Wait {
    pub fn new(
        machine: Uuid,
        login: String,
        release: Option<String>,
        switch: bool,
        now_ms: UnixMillis,
    ) -> Self {
        Wait {
            machine,
            login,
            release,
            switch,
            since_ms: now_ms,
            credential_requests: 0,
            reported: None,
            inferred: None,
            patience: None,
        }
    }

    /// What is told: a report over an inferred failure over the patience failure (PRES-22).
    pub fn failure(&self) -> Option<&Failure> {
        self.reported
            .as_ref()
            .or(self.inferred.as_ref())
            .or(self.patience.as_ref())
    }

    /// A credential request while nothing is attached: a launch (PRES-18). For a connector that
    /// does not report, from the third in a row the launches that ended are told (PRES-19).
    pub fn launched(&mut self, release: Option<&str>, now_ms: UnixMillis) {
        if let Some(r) = release {
            self.release = Some(r.to_owned());
        }
        self.credential_requests = self.credential_requests.saturating_add(1);
        if !reports(self.release.as_deref()) && self.credential_requests >= 3 {
            self.inferred = Some(Failure {
                attempts: self.credential_requests - 1,
                reason: inferred_reason(self.release.as_deref()),
                at: now_ms,
            });
        }
    }

    /// A connector's report: from the second failed launch in a row it is told, at the
    /// server's time (PRES-15); a launch that stayed up forgets what was reported and inferred,
    /// and the wait starts over.
    pub fn report(&mut self, report: &Report, now_ms: UnixMillis) {
        if report.stayed_up {
            self.reported = None;
            self.inferred = None;
            self.patience = None;
            self.credential_requests = 0;
            self.since_ms = now_ms;
            return;
        }
        self.reported = (report.attempts >= 2).then(|| Failure {
            attempts: report.attempts,
            reason: report_reason(report),
            at: now_ms,
        });
    }

    /// The sweep at `now_ms`: a machine waited on for `patience_ms` without an attach gets the
    /// patience failure, once (PRES-20, PRES-21). True when it was set now.
    pub fn sweep(&mut self, now_ms: UnixMillis, patience_ms: u64) -> bool {
        let due = self
            .since_ms
            .saturating_add(i64::try_from(patience_ms).unwrap_or(i64::MAX));
        if self.patience.is_some() || now_ms < due {
            return false;
        }
        let reason = if self.credential_requests > 0 {
            NOT_CONNECTED
        } else {
            NOT_ANSWERED
        };
        self.patience = Some(Failure {
            attempts: 0,
            reason: reason.to_owned(),
            at: self.since_ms,
        });
        true
    }
}

/// Whether a connector of `release` reports failed launches: `PLANNER_REPORTS_FROM` or newer.
/// An unknown or unreadable release does not.
pub fn reports(release: Option<&str>) -> bool {
    match release.and_then(version) {
        Some(v) => v >= version(PLANNER_REPORTS_FROM).unwrap_or_default(),
        None => false,
    }
}

/// `0.0.23` as `[0, 0, 23]`; a leading `v` and a pre-release or build suffix are ignored.
fn version(release: &str) -> Option<Vec<u64>> {
    let core = release
        .trim()
        .trim_start_matches('v')
        .split(['-', '+'])
        .next()?;
    core.split('.').map(|p| p.parse().ok()).collect()
}

/// The server's own reason for launches that ended before attaching (PRES-19).
fn inferred_reason(release: Option<&str>) -> String {
    let base = "It started and stopped again before it connected.";
    match release {
        Some(r) => format!(
            "{base} The machine runs chopin {}, which cannot say why; running `chopin update` there shows why.",
            clean_line(r)
        ),
        None => format!(
            "{base} The machine's chopin is older than {PLANNER_REPORTS_FROM}, which cannot say why; running `chopin update` there shows why."
        ),
    }
}

/// The reason of a report: its stderr line, else how the launch ended, cleaned.
fn report_reason(report: &Report) -> String {
    let said = report
        .stderr
        .as_deref()
        .map(clean_line)
        .filter(|l| !l.is_empty());
    said.or_else(|| {
        report
            .ended
            .as_deref()
            .map(clean_line)
            .filter(|l| !l.is_empty())
    })
    .unwrap_or_else(|| "It stopped before it connected.".to_owned())
}

static CREDENTIALS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(concat!(
        // GitHub tokens, this server's Planner credentials.
        r"\b(?:gh[pousr]_|github_pat_|chopin_planner_)[A-Za-z0-9_]+",
        // A bearer or basic credential after its scheme word (kept).
        r"|(?P<scheme>(?i:\b(?:bearer|basic|token)\s+))[A-Za-z0-9._~+/=-]{8,}",
        // key=value and key: value where the key names a secret (the key kept).
        r"|(?P<key>(?i:\b[a-z_]*(?:token|secret|password|passwd|api_?key|credential)[a-z_]*\s*[=:]\s*))[^\s,;]+",
    ))
    .expect("the credential pattern compiles")
});
static URL_USERINFO: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+(?::[^/\s@]*)?@")
        .expect("the userinfo pattern compiles")
});
static HOME: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?:/home/[^/\s:]+|/Users/[^/\s:]+|/root|[A-Za-z]:\\Users\\[^\\\s:]+)")
        .expect("the home pattern compiles")
});

/// A line from a machine as the server tells it (RULINGS PRES-14): colours and other control
/// characters removed, credentials replaced by `[redacted]`, the home folder shown as `~`, at
/// most [`REASON_MAX_CHARS`] characters.
pub fn clean_line(line: &str) -> String {
    let plain = strip_ansi_escapes::strip_str(line);
    let plain: String = plain.chars().filter(|c| !c.is_control()).collect();
    let plain = URL_USERINFO.replace_all(&plain, "$1[redacted]@");
    let plain = CREDENTIALS.replace_all(&plain, |caps: &regex::Captures<'_>| {
        let kept = caps.name("scheme").or_else(|| caps.name("key"));
        format!("{}[redacted]", kept.map_or("", |k| k.as_str()))
    });
    let plain = HOME.replace_all(&plain, "~");
    let trimmed = plain.trim();
    if trimmed.chars().count() <= REASON_MAX_CHARS {
        return trimmed.to_owned();
    }
    let mut cut: String = trimmed.chars().take(REASON_MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(now: UnixMillis) -> Wait {
        Wait::new(Uuid::nil(), "mona".into(), None, false, now)
    }

    #[test]
    fn pres_14_a_reported_line_loses_colours_credentials_and_the_home_folder() {
        let line = "\u{1b}[31merror:\u{1b}[0m cannot read /home/mona/.config/chopin/planner.json: token=ghp_abc123XYZ Bearer chopin_planner_deadbeef https://mona:s3cret@github.com/octo/plans.git";
        let cleaned = clean_line(line);
        assert_eq!(
            cleaned,
            "error: cannot read ~/.config/chopin/planner.json: token=[redacted] Bearer [redacted] https://[redacted]@github.com/octo/plans.git"
        );
        for secret in [
            "ghp_abc123XYZ",
            "deadbeef",
            "s3cret",
            "/home/mona",
            "\u{1b}",
        ] {
            assert!(!cleaned.contains(secret), "{secret} left in {cleaned}");
        }
        assert_eq!(clean_line("at C:\\Users\\mona\\chopin"), "at ~\\chopin");
        assert_eq!(clean_line("/Users/mona/src and /root/x"), "~/src and ~/x");
    }

    #[test]
    fn pres_13_a_reported_line_is_at_most_300_characters() {
        let cleaned = clean_line(&"x".repeat(1_000));
        assert_eq!(cleaned.chars().count(), REASON_MAX_CHARS);
        assert!(cleaned.ends_with('…'));
        assert_eq!(clean_line(&"y".repeat(300)).chars().count(), 300);
    }

    #[test]
    fn pres_15_a_report_shows_from_the_second_failed_launch_at_the_servers_time() {
        let mut w = wait(1_000);
        let report = |attempts| Report {
            attempts,
            ended: Some("exit code 1".into()),
            stderr: Some("error: no such file".into()),
            stayed_up: false,
        };
        w.report(&report(1), 2_000);
        assert_eq!(w.failure(), None, "the first failed launch is not told");
        w.report(&report(2), 3_000);
        assert_eq!(
            w.failure(),
            Some(&Failure {
                attempts: 2,
                reason: "error: no such file".into(),
                at: 3_000
            })
        );
        // No stderr line: how it ended.
        w.report(
            &Report {
                attempts: 3,
                ended: Some("signal 9".into()),
                ..Report::default()
            },
            4_000,
        );
        assert_eq!(w.failure().unwrap().reason, "signal 9");
        // PRES-16: a launch that stayed up forgets it.
        w.report(
            &Report {
                stayed_up: true,
                ..Report::default()
            },
            5_000,
        );
        assert_eq!(w.failure(), None);
        assert_eq!(w.since_ms, 5_000);
    }

    #[test]
    fn pres_18_pres_19_an_old_connectors_launches_are_counted_from_its_credential_requests() {
        let mut w = wait(1_000);
        w.launched(Some("0.0.22"), 1_100);
        w.launched(None, 1_200);
        assert_eq!(w.failure(), None, "a second request means one launch ended");
        w.launched(None, 1_300);
        let failure = w.failure().unwrap();
        assert_eq!((failure.attempts, failure.at), (2, 1_300));
        assert!(
            failure
                .reason
                .starts_with("It started and stopped again before it connected.")
                && failure.reason.contains("0.0.22")
                && failure.reason.contains("chopin update"),
            "{}",
            failure.reason
        );
        // A connector that reports is not inferred for (PRES-17, PRES-22).
        let mut new = wait(1_000);
        for at in [1_100, 1_200, 1_300, 1_400] {
            new.launched(Some("0.0.23"), at);
        }
        assert_eq!(new.failure(), None);
    }

    #[test]
    fn pres_22_what_a_connector_reports_is_told_instead_of_what_is_inferred() {
        let mut w = wait(0);
        for at in [1, 2, 3] {
            w.launched(None, at);
        }
        assert!(w
            .failure()
            .unwrap()
            .reason
            .starts_with("It started and stopped"));
        w.report(
            &Report {
                attempts: 2,
                stderr: Some("boom".into()),
                ..Report::default()
            },
            10,
        );
        assert_eq!(w.failure().unwrap().reason, "boom");
    }

    #[test]
    fn pres_20_pres_24_patience_fails_once_with_the_words_for_what_was_seen() {
        let patience = 120_000;
        let mut silent = wait(1_000);
        assert!(
            !silent.sweep(1_000 + patience as i64 - 1, patience),
            "1 ms early"
        );
        assert!(
            silent.sweep(1_000 + patience as i64, patience),
            "at the deadline"
        );
        assert_eq!(
            silent.failure(),
            Some(&Failure {
                attempts: 0,
                reason: NOT_ANSWERED.into(),
                at: 1_000
            })
        );
        assert!(
            !silent.sweep(1_000 + 2 * patience as i64, patience),
            "announced once"
        );
        let mut started = wait(1_000);
        started.launched(Some("0.0.30"), 2_000);
        assert!(started.sweep(200_000, patience));
        assert_eq!(started.failure().unwrap().reason, NOT_CONNECTED);
    }

    #[test]
    fn releases_compare_by_their_numbers() {
        assert!(!reports(None));
        assert!(!reports(Some("0.0.22")));
        assert!(reports(Some("0.0.23")));
        assert!(reports(Some("v0.1.0-beta+7")));
        assert!(reports(Some("1.0")));
        assert!(!reports(Some("nightly")));
    }
}
