//! `GET /healthz` and `GET /readyz`: whether the process is up, and whether it may serve.
//!
//! Owns: the two probes' answers. Does not own: the writer lease ([`crate::runtime::lease`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::{Routes, Table};
use crate::runtime::lease::LeaseWatch;
use crate::store::Store;

/// What the probes read.
#[derive(Clone)]
pub struct HealthDeps {
    pub store: Arc<dyn Store>,
    pub lease: LeaseWatch,
}

pub fn routes(deps: HealthDeps) -> Routes {
    Table::new()
        .get("/healthz", healthz)
        .get("/readyz", readyz)
        .with_state(deps)
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
