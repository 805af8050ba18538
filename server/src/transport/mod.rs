//! The transport layer: the only code that knows axum. HTTP routes, the room socket, the agent
//! socket and `/mcp` turn requests and frames into calls on the services and
//! their answers into responses and frames.
//!
//! Owns: [`Routes`] (a router that also records every method and path it serves, so a test can
//! hold the docs to the router), rendering an [`ApiError`] as `{error, message}` JSON, and
//! [`serve`] over any `axum::serve::Listener`. Each submodule owns its routes and takes the
//! services it uses as an explicit `…Deps` struct, built by the composition root.
//! Does not own: any rule of the product — access ([`crate::access`]), documents, Chat, turns
//! and ownership live in the services, which never import this module.

pub mod agent;
pub mod auth;
pub mod dictation;
pub mod documents;
pub mod files;
pub mod health;
pub mod implementation;
pub mod machines;
pub mod mcp;
pub mod mentions;
pub mod participation;
pub mod placement;
pub mod room;
pub mod socket;
pub mod web;
pub mod yjs;

use std::future::Future;

use axum::handler::Handler;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::{Json, Router};
use serde_json::json;

use crate::error::ApiError;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": self.code, "message": self.message })),
        )
            .into_response()
    }
}

/// One route the server answers: its method and path (axum's `{param}` syntax).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteInfo {
    pub method: &'static str,
    pub path: &'static str,
}

/// A router being built with its state type still open, recording each route it is given.
pub struct Table<S> {
    router: Router<S>,
    routes: Vec<RouteInfo>,
}

impl<S: Clone + Send + Sync + 'static> Default for Table<S> {
    fn default() -> Self {
        Table {
            router: Router::new(),
            routes: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> Table<S> {
    pub fn new() -> Self {
        Self::default()
    }

    fn add(mut self, method: &'static str, path: &'static str, route: MethodRouter<S>) -> Self {
        self.routes.push(RouteInfo { method, path });
        self.router = self.router.route(path, route);
        self
    }

    pub fn get<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add("GET", path, axum::routing::get(handler))
    }

    pub fn post<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add("POST", path, axum::routing::post(handler))
    }

    pub fn put<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add("PUT", path, axum::routing::put(handler))
    }

    pub fn delete<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add("DELETE", path, axum::routing::delete(handler))
    }

    /// The finished routes, given their state.
    pub fn with_state(self, state: S) -> Routes {
        Routes {
            router: self.router.with_state(state),
            routes: self.routes,
        }
    }
}

/// A finished router and the routes it serves.
#[derive(Default)]
pub struct Routes {
    router: Router,
    routes: Vec<RouteInfo>,
}

impl Routes {
    /// Both sets of routes in one router.
    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.routes.extend(other.routes);
        self
    }

    /// Every method and path served, sorted.
    pub fn table(&self) -> Vec<RouteInfo> {
        let mut routes = self.routes.clone();
        routes.sort();
        routes
    }

    pub fn into_router(self) -> Router {
        self.router
    }
}

/// A TCP listener whose accepted sockets send small frames at once: `TCP_NODELAY` is set on
/// each, so an answer of a few bytes (a `chat:ack`) is not held ~40 ms by Nagle's algorithm
/// waiting for the peer's delayed acknowledgement.
pub fn tcp_listener(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted socket");
        }
    })
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
