//! What the server counts for operators, in Prometheus' text format (`GET /metrics`), through
//! the maintained `prometheus-client` crate.
//!
//! Owns: [`Metrics`] — the registry and its instruments: store call latency by method and outcome
//! (`ok`, `error`, or `fenced` for a write refused because this process's writer epoch is no
//! longer current; reported by an instrumented store, [`Metrics::store_hook`]), GitHub calls by
//! call and outcome ([`Metrics::github_call`]), open sockets by kind (an RAII [`SocketGauge`]
//! each transport holds), and the gauges read from the services at scrape time (attached links,
//! open documents, Chat sends in flight, turns running, and how many entries each per-document
//! or per-login map holds: [`Metrics::render`] takes them).
//! Does not own: when anything happens (the services and transports report), or who may read
//! the page (it is public, like `/healthz`; keep it off the Internet at the proxy).
//!
//! Invariants: nothing here blocks or fails a request; no label carries a token, a login or a
//! document id (labels are fixed words), so the number of series is bounded.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::store::instrumented::{Call, Hook};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    harness: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    harness: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GitHubLabels {
    call: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    map: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobStateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobAttemptLabels {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SocketLabels {
    kind: &'static str,
}

/// Which socket a [`SocketGauge`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// `/api/v1/agent`.
    Agent,
    /// `/api/documents/{id}/room`.
    Room,
    /// `/api/yjs/{id}`.
    Yjs,
}

impl SocketKind {
    fn label(self) -> &'static str {
        match self {
            SocketKind::Agent => "agent",
            SocketKind::Room => "room",
            SocketKind::Yjs => "yjs",
        }
    }
}

/// The values read from the services at scrape time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub links_attached: usize,
    pub documents_open: usize,
    pub chat_sends_in_flight: usize,
    pub turns_running: usize,
    /// Tasks alive in the async runtime (tokio's own count: running, waiting or not yet
    /// polled), so a soak can see them come back to where they were once its sockets close.
    pub tasks_alive: usize,
    /// Entries of each per-document or per-login map, by the map's fixed name.
    pub state_entries: Vec<(&'static str, usize)>,
    /// Stored background jobs in each state (`None`: the store could not be read; the gauges
    /// keep their last values).
    pub jobs: Option<Vec<(crate::store::JobState, u64)>>,
}

/// The server's instruments and their registry.
pub struct Metrics {
    registry: Registry,
    store_calls: Family<StoreLabels, Histogram>,
    github_calls: Family<GitHubLabels, Counter>,
    sockets: Family<SocketLabels, Gauge>,
    links_attached: Gauge,
    documents_open: Gauge,
    chat_sends_in_flight: Gauge,
    turns_running: Gauge,
    tasks_alive: Gauge,
    state_entries: Family<StateLabels, Gauge>,
    /// Frames a socket was asked to send that were larger than any socket sends.
    frames_too_large: Counter,
    /// Model tokens the Planner's turns used, as their harness reported them.
    model_tokens: Family<TokenLabels, Counter>,
    /// Planner turns ended, by harness and result.
    turns_ended: Family<TurnLabels, Counter>,
    /// Stored background jobs, by state.
    jobs: Family<JobStateLabels, Gauge>,
    /// Background job attempts this process ended, by job type and outcome.
    job_attempts: Family<JobAttemptLabels, Counter>,
    classifier_checks: Family<CheckLabels, Counter>,
    visual_checks: Family<OutcomeLabels, Counter>,
    /// A smaller largest frame a socket sends than its own (0: none; the simulator plants one).
    outbound_frame_cap: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~6.5 s.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("chopin");
        let store_calls =
            Family::<StoreLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        let github_calls = Family::<GitHubLabels, Counter>::default();
        let sockets = Family::<SocketLabels, Gauge>::default();
        let state_entries = Family::<StateLabels, Gauge>::default();
        let (links_attached, documents_open, chat_sends_in_flight, turns_running, tasks_alive) = (
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
        );
        registry.register(
            "store_call_seconds",
            "How long each store call took, by method and outcome",
            store_calls.clone(),
        );
        registry.register(
            "github_calls",
            "Calls to GitHub's REST API, by call and outcome",
            github_calls.clone(),
        );
        registry.register(
            "sockets_open",
            "WebSockets open now, by kind (agent, room, yjs)",
            sockets.clone(),
        );
        registry.register(
            "planner_links_attached",
            "Documents with a Planner client attached now",
            links_attached.clone(),
        );
        registry.register(
            "documents_open",
            "Documents whose content is open in this process",
            documents_open.clone(),
        );
        registry.register(
            "chat_sends_in_flight",
            "Chat sends being processed now (at most 20)",
            chat_sends_in_flight.clone(),
        );
        registry.register(
            "turns_running",
            "Planner turns running now",
            turns_running.clone(),
        );
        registry.register(
            "tasks_alive",
            "Tasks alive now in the server's async runtime (each socket, turn and timer holds some; back to its idle count once they end)",
            tasks_alive.clone(),
        );
        registry.register(
            "state_entries",
            "Entries held now in each per-document or per-login map (they shrink back when idle)",
            state_entries.clone(),
        );
        let frames_too_large = Counter::default();
        registry.register(
            "frames_too_large",
            "Frames the server would have sent larger than a socket sends (each ended its socket; expected to stay 0)",
            frames_too_large.clone(),
        );
        let model_tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "model_tokens",
            "Model tokens used by Planner turns, by harness and kind (input, output), as the harness reported them at each turn's end",
            model_tokens.clone(),
        );
        let turns_ended = Family::<TurnLabels, Counter>::default();
        registry.register(
            "turns_ended",
            "Planner turns ended, by harness and result (completed, aborted, failed)",
            turns_ended.clone(),
        );
        let jobs = Family::<JobStateLabels, Gauge>::default();
        registry.register(
            "jobs",
            "Stored background jobs, by state (pending: queued; running; completed, failed, cancelled, superseded: settled)",
            jobs.clone(),
        );
        for state in crate::store::JobState::ALL {
            let _ = jobs.get_or_create(&JobStateLabels {
                state: state.as_str(),
            });
        }
        let job_attempts = Family::<JobAttemptLabels, Counter>::default();
        registry.register(
            "job_attempts",
            "Background job attempts this process ended, by job type and outcome (completed, retried, failed, lost)",
            job_attempts.clone(),
        );
        let classifier_checks = Family::<CheckLabels, Counter>::default();
        registry.register(
            "classifier_checks",
            "Planner messages the decisions classifier checked, by verdict (reply is published; request-for-input, uncertain, timed-out, malformed, missing, interrupted and failed are withheld)",
            classifier_checks.clone(),
        );
        let visual_checks = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "visual_checks",
            "Writes the visual admission check saw, by outcome (nothing new to assess, admitted, unassessed: no assessor model, refused)",
            visual_checks.clone(),
        );
        for kind in [SocketKind::Agent, SocketKind::Room, SocketKind::Yjs] {
            let _ = sockets.get_or_create(&SocketLabels { kind: kind.label() });
        }
        Metrics {
            registry,
            store_calls,
            github_calls,
            sockets,
            links_attached,
            documents_open,
            chat_sends_in_flight,
            turns_running,
            tasks_alive,
            state_entries,
            frames_too_large,
            model_tokens,
            turns_ended,
            jobs,
            job_attempts,
            classifier_checks,
            visual_checks,
            outbound_frame_cap: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A largest frame a socket sends set in place of the sockets' own, if any.
    pub fn outbound_frame_cap(&self) -> Option<usize> {
        match self
            .outbound_frame_cap
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            cap => Some(cap),
        }
    }

    /// Sets a smaller largest frame a socket sends (the simulator plants one).
    pub fn set_outbound_frame_cap(&self, bytes: usize) {
        self.outbound_frame_cap
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// A frame larger than a socket sends was refused.
    pub fn frame_too_large(&self) {
        self.frames_too_large.inc();
    }

    /// How many frames were refused as larger than any socket sends.
    pub fn frames_too_large(&self) -> u64 {
        self.frames_too_large.get()
    }

    /// A Planner turn under `harness` used these many model tokens.
    pub fn model_tokens(&self, harness: &str, input: u64, output: u64) {
        for (kind, n) in [("input", input), ("output", output)] {
            self.model_tokens
                .get_or_create(&TokenLabels {
                    harness: harness.to_owned(),
                    kind,
                })
                .inc_by(n);
        }
    }

    /// A Planner turn under `harness` ended with `result` (`completed`, `aborted`, `failed`).
    pub fn turn_ended(&self, harness: &str, result: &'static str) {
        self.turns_ended
            .get_or_create(&TurnLabels {
                harness: harness.to_owned(),
                result,
            })
            .inc();
    }

    /// A background job attempt of type `kind` ended: `outcome` is `completed`, `retried`,
    /// `failed` or `lost` (its claim was gone when it ended).
    pub fn job_attempt(&self, kind: &'static str, outcome: &'static str) {
        self.job_attempts
            .get_or_create(&JobAttemptLabels { kind, outcome })
            .inc();
    }

    /// The decisions classifier judged a Planner message `verdict` (or could not).
    pub fn classifier_check(&self, verdict: &'static str) {
        self.classifier_checks
            .get_or_create(&CheckLabels { verdict })
            .inc();
    }

    /// A write passed the visual admission check with `outcome` (a fixed word).
    pub fn visual_check(&self, outcome: &'static str) {
        self.visual_checks
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The hook an instrumented store reports each call to.
    pub fn store_hook(self: &Arc<Self>) -> StoreHook {
        StoreHook(self.clone())
    }

    /// A GitHub call ended: `call` is `user`, `repository` or `membership`; `outcome` is a
    /// fixed word (`ok`, `not-found`, `bad-credentials`, `rate-limited` (GitHub answered with a
    /// rate limit), `rate-limit-wait` (not asked: a rate limit still holds the token),
    /// `unavailable`, …).
    pub fn github_call(&self, call: &'static str, outcome: &'static str) {
        self.github_calls
            .get_or_create(&GitHubLabels { call, outcome })
            .inc();
    }

    /// Counts one socket of `kind` as open until the gauge is dropped.
    pub fn socket(self: &Arc<Self>, kind: SocketKind) -> SocketGauge {
        self.sockets
            .get_or_create(&SocketLabels { kind: kind.label() })
            .inc();
        SocketGauge {
            metrics: self.clone(),
            kind,
        }
    }

    /// The page, with the services' values as they are now.
    pub fn render(&self, now: Snapshot) -> String {
        let set = |gauge: &Gauge, n: usize| {
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set(&self.links_attached, now.links_attached);
        set(&self.documents_open, now.documents_open);
        set(&self.chat_sends_in_flight, now.chat_sends_in_flight);
        set(&self.turns_running, now.turns_running);
        set(&self.tasks_alive, now.tasks_alive);
        if let Some(jobs) = now.jobs {
            for state in crate::store::JobState::ALL {
                let n = jobs
                    .iter()
                    .find(|(s, _)| *s == state)
                    .map_or(0, |(_, n)| *n);
                set(
                    &self.jobs.get_or_create(&JobStateLabels {
                        state: state.as_str(),
                    }),
                    usize::try_from(n).unwrap_or(usize::MAX),
                );
            }
        }
        for (map, n) in now.state_entries {
            set(&self.state_entries.get_or_create(&StateLabels { map }), n);
        }
        let mut page = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut page, &self.registry) {
            tracing::warn!(error = %e, "metrics could not be encoded");
        }
        page
    }
}

/// One open socket, counted until dropped.
pub struct SocketGauge {
    metrics: Arc<Metrics>,
    kind: SocketKind,
}

impl Drop for SocketGauge {
    fn drop(&mut self) {
        self.metrics
            .sockets
            .get_or_create(&SocketLabels {
                kind: self.kind.label(),
            })
            .dec();
    }
}

/// Reports each store call's latency to the metrics.
pub struct StoreHook(Arc<Metrics>);

impl Hook for StoreHook {
    fn call(&self, call: Call) {
        let outcome = match (call.ok, call.fenced) {
            (true, _) => "ok",
            // A write refused because this process's writer epoch is no longer current.
            (false, true) => "fenced",
            (false, false) => "error",
        };
        self.0
            .store_calls
            .get_or_create(&StoreLabels {
                method: call.method,
                outcome,
            })
            .observe(call.elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_instrument_and_counts_sockets_while_they_live() {
        let metrics = Arc::new(Metrics::new());
        metrics.github_call("user", "ok");
        metrics.store_hook().call(Call {
            method: "ping",
            write: false,
            ok: true,
            fenced: false,
            elapsed: std::time::Duration::from_millis(3),
            fence: None,
        });
        let room = metrics.socket(SocketKind::Room);
        let page = metrics.render(Snapshot {
            links_attached: 2,
            documents_open: 3,
            chat_sends_in_flight: 1,
            turns_running: 1,
            tasks_alive: 9,
            state_entries: vec![("logins", 4)],
            jobs: Some(vec![(crate::store::JobState::Pending, 5)]),
        });
        metrics.job_attempt("document-summary", "completed");
        let page = format!(
            "{page}{}",
            metrics.render(Snapshot {
                jobs: None,
                ..Snapshot::default()
            })
        );
        for line in [
            "chopin_jobs{state=\"pending\"} 5",
            "chopin_jobs{state=\"failed\"} 0",
            "chopin_job_attempts_total{kind=\"document-summary\",outcome=\"completed\"} 1",
            "chopin_state_entries{map=\"logins\"} 4",
            "chopin_github_calls_total{call=\"user\",outcome=\"ok\"} 1",
            "chopin_sockets_open{kind=\"room\"} 1",
            "chopin_sockets_open{kind=\"agent\"} 0",
            "chopin_planner_links_attached 2",
            "chopin_documents_open 3",
            "chopin_chat_sends_in_flight 1",
            "chopin_turns_running 1",
            "chopin_tasks_alive 9",
            "# TYPE chopin_store_call_seconds histogram",
            "chopin_store_call_seconds_count{method=\"ping\",outcome=\"ok\"} 1",
        ] {
            assert!(page.contains(line), "{line:?} missing from:\n{page}");
        }
        drop(room);
        let page = metrics.render(Snapshot::default());
        assert!(
            page.contains("chopin_sockets_open{kind=\"room\"} 0"),
            "{page}"
        );
    }
}
