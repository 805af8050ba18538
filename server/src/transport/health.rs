//! `GET /healthz`, `GET /readyz` and `GET /metrics`: whether the process is up, whether it may
//! serve, and what it is doing.
//!
//! Owns: the probes' answers and the metrics page (reading the services' counts as it renders).
//! Does not own: the writer lease ([`crate::runtime::lease`]) or the instruments
//! ([`crate::metrics`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::{Routes, Table};
use crate::chat::Chat;
use crate::content::OpenDocuments;
use crate::identity::sign_ins::SignIns;
use crate::metrics::{Metrics, Snapshot};
use crate::planner::Planners;
use crate::runtime::lease::LeaseWatch;
use crate::store::Store;
use crate::transcript::Transcript;
use crate::turns::Turns;

/// What the probes and the metrics page read.
#[derive(Clone)]
pub struct HealthDeps {
    pub store: Arc<dyn Store>,
    pub lease: LeaseWatch,
    /// Under `PROCESSES=many`, ready needs no writer lease: each document has its own.
    pub serving: Arc<crate::serving::Serving>,
    pub metrics: Arc<Metrics>,
    pub planners: Arc<Planners>,
    pub open: Arc<OpenDocuments>,
    pub chat: Arc<Chat>,
    pub turns: Arc<Turns>,
    pub transcript: Arc<Transcript>,
    pub sign_ins: Arc<SignIns>,
    pub titling: Arc<crate::jobs::title::Titling>,
}

pub fn routes(deps: HealthDeps) -> Routes {
    Table::new()
        .get("/healthz", healthz)
        .get("/readyz", readyz)
        .get("/metrics", metrics)
        .with_state(deps)
}

/// How many entries each per-document or per-login map holds now.
fn state_entries(deps: &HealthDeps) -> Vec<(&'static str, usize)> {
    let planner = deps.planners.sizes();
    let (chat_channels, chat_gates) = deps.transcript.sizes();
    vec![
        ("planner_slots", planner.slots),
        ("planner_gates", planner.gates),
        ("planner_revocation_watches", planner.revocation_watches),
        ("planner_rooms", planner.rooms),
        ("chat_channels", chat_channels),
        ("chat_gates", chat_gates),
        ("logins", deps.sign_ins.live_count()),
        ("titling", deps.titling.len()),
        ("sign_outs_pending", deps.sign_ins.pending_sign_out_count()),
    ]
}

/// The metrics in Prometheus' text format.
async fn metrics(State(deps): State<HealthDeps>) -> impl IntoResponse {
    let page = deps.metrics.render(Snapshot {
        links_attached: deps.planners.attached_count(),
        documents_open: deps.open.count(),
        chat_sends_in_flight: deps.chat.in_flight(),
        turns_running: deps.turns.running_count(),
        tasks_alive: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        state_entries: state_entries(&deps),
        jobs: match deps.store.job_counts().await {
            Ok(counts) => Some(counts),
            Err(e) => {
                tracing::warn!(error = %e, "background jobs could not be counted for the metrics");
                None
            }
        },
    });
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        page,
    )
}

/// The process is up and serving.
async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// The store answers and this process still holds the writer lease.
async fn readyz(State(deps): State<HealthDeps>) -> impl IntoResponse {
    let store = deps.store.backend();
    let epoch = deps.lease.epoch();
    match deps.store.ping().await {
        // Several processes: no writer lease; each document has its own.
        Ok(()) if deps.serving.leases().is_some() => (
            StatusCode::OK,
            Json(json!({
                "status": "ready",
                "store": store,
                "processes": "many",
                "documents_served": deps.serving.leases().map_or(0, |l| l.served().len()),
            })),
        ),
        Ok(()) if deps.lease.is_held() => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "store": store, "writer_epoch": epoch })),
        ),
        Ok(()) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({ "status": "not-ready", "store": store, "reason": "writer lease not held" }),
            ),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: store did not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({ "status": "not-ready", "store": store, "reason": "store unreachable" }),
                ),
            )
        }
    }
}
