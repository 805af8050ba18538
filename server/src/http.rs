//! The HTTP surface: the axum router and serving it over any listener.
//!
//! Owns: routes and their status codes. Does not own: sockets — [`serve`] takes any
//! `axum::serve::Listener`, a tokio TCP listener in production or a turmoil one in the simulator.

use std::future::Future;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::app::AppState;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/auth/github", get(crate::session::github_start))
        .route(
            "/auth/github/callback",
            get(crate::session::github_callback),
        )
        .route(
            "/auth/device",
            post(crate::session_local::start).get(crate::session_local::status),
        )
        .route(
            "/auth/device/complete",
            post(crate::session_local::complete),
        )
        .route("/auth/device/cancel", post(crate::session_local::cancel))
        .route("/auth/logout", post(crate::session::logout))
        .route("/api/session", get(crate::session::current))
        .route(
            "/api/repositories/{owner}/{repo}/documents",
            post(crate::documents::create),
        )
        .route(
            "/api/repositories/{owner}/{repo}/documents/{slug}",
            get(crate::documents::get_by_slug),
        )
        .route("/api/documents/{id}", get(crate::documents::get_by_id))
        .route(
            "/api/documents/{id}/archive",
            post(crate::documents::archive),
        )
        .route("/api/documents/{id}/rename", post(crate::documents::rename))
        .route("/api/documents/{id}/read", get(crate::documents::read))
        .route(
            "/api/documents/{id}/children",
            post(crate::children::create),
        )
        .route(
            "/api/documents/{id}/planner/reset",
            post(crate::documents::reset_planner),
        )
        .route("/api/documents/{id}/room", get(crate::room::endpoint))
        .route("/api/v1/agent", get(crate::planner::link::endpoint))
        .with_state(state)
}

/// The process is up and serving.
async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// The store answers and this process still holds the writer lease.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let store = state.services.store.backend();
    let epoch = state.writer_epoch();
    match state.services.store.ping().await {
        Ok(()) if state.is_writer() => (
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

/// Serves `router` on `listener` until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
