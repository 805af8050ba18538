//! The gate in front of a document's routes when several processes serve one database
//! (`PROCESSES=many`): a request or socket naming a document whose tree another process serves
//! is refused before its handler runs, with `503 served-elsewhere` and a `Retry-After` — an
//! answer balancers and the official clients retry (y-websocket reconnects with its backoff; a
//! browser's fetch is tried again by the page). A balancer hashing on the document id sends it to
//! the process that serves it, so the steady state meets no refusal.
//!
//! Owns: finding the document a request names (in its path, or in the agent link's `?document=`),
//! and the refusal's words.
//! Does not own: whether this process serves it ([`crate::serving`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::error::ApiError;
use crate::serving::{Serve, Serving};

/// The document a request names before its handler runs: in the path for `/api/documents/{id}/…`,
/// `/api/yjs/{id}` and `/api/channels/{id}/…`, and in `?document=` for the agent link
/// (`/api/v1/agent?document={id}`), so that link is refused before its upgrade too, while a
/// balancer can still pass it on to another process.
pub fn document_named(uri: &Uri) -> Option<Uuid> {
    if uri.path() == "/api/v1/agent" {
        return url::form_urlencoded::parse(uri.query()?.as_bytes())
            .find(|(key, _)| key == "document")
            .and_then(|(_, value)| Uuid::parse_str(&value).ok());
    }
    document_in_path(uri.path())
}

/// The document a path names, for the routes that name one: `/api/documents/{id}/…`,
/// `/api/yjs/{id}` and `/api/channels/{id}/…`.
pub fn document_in_path(path: &str) -> Option<Uuid> {
    let mut segments = path.trim_start_matches('/').split('/');
    if segments.next()? != "api" {
        return None;
    }
    match segments.next()? {
        "documents" | "yjs" | "channels" => Uuid::parse_str(segments.next()?).ok(),
        _ => None,
    }
}

/// The middleware: serve the request here, or refuse it for the process that serves its tree.
pub async fn gate(State(serving): State<Arc<Serving>>, request: Request, next: Next) -> Response {
    let Some(document_id) = document_named(request.uri()) else {
        return next.run(request).await;
    };
    match serving.serve(document_id).await {
        Ok(Serve::Here) => {
            let _under_way = serving.enter(document_id).await;
            next.run(request).await
        }
        Ok(Serve::Elsewhere { retry_after_ms, .. }) => served_elsewhere(retry_after_ms),
        Err(e) => ApiError::store(e).into_response(),
    }
}

/// Whole seconds (at least 1) until `retry_after_ms` has passed.
fn seconds(retry_after_ms: i64) -> i64 {
    ((retry_after_ms.max(0) + 999) / 1_000).max(1)
}

/// The error of a document another process serves: `503 served-elsewhere`.
pub fn elsewhere(retry_after_ms: i64) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "served-elsewhere",
        format!(
            "Another server process serves this document now; try again (in at most {} s, \
             should that process have stopped).",
            seconds(retry_after_ms)
        ),
    )
}

/// [`elsewhere`] as a response, with `Retry-After` in whole seconds.
pub fn served_elsewhere(retry_after_ms: i64) -> Response {
    let mut response = elsewhere(retry_after_ms).into_response();
    if let Ok(value) = HeaderValue::from_str(&seconds(retry_after_ms).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_a_path_names() {
        let id = Uuid::from_u128(7);
        assert_eq!(
            document_in_path(&format!("/api/documents/{id}/room")),
            Some(id)
        );
        assert_eq!(document_in_path(&format!("/api/documents/{id}")), Some(id));
        assert_eq!(document_in_path(&format!("/api/yjs/{id}")), Some(id));
        assert_eq!(
            document_in_path(&format!("/api/channels/{id}/attachments")),
            Some(id)
        );
        assert_eq!(document_in_path("/api/documents/not-an-id/room"), None);
        assert_eq!(document_in_path(&format!("/documents/{id}")), None);
        assert_eq!(document_in_path("/api/repositories"), None);
        assert_eq!(document_in_path("/mcp"), None);
    }

    #[test]
    fn the_agent_link_names_its_document_in_the_query() {
        let id = Uuid::from_u128(9);
        let named = |s: &str| document_named(&s.parse::<Uri>().unwrap());
        assert_eq!(named(&format!("/api/v1/agent?document={id}")), Some(id));
        assert_eq!(named(&format!("/api/v1/agent?x=1&document={id}")), Some(id));
        assert_eq!(named("/api/v1/agent"), None);
        assert_eq!(named("/api/v1/agent?document=nope"), None);
        assert_eq!(named(&format!("/api/v1/other?document={id}")), None);
        assert_eq!(named(&format!("/api/yjs/{id}?document=x")), Some(id));
    }

    #[test]
    fn the_refusal_says_when_to_try_again_in_whole_seconds() {
        let r = served_elsewhere(1_001);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        assert_eq!(served_elsewhere(0).headers()[header::RETRY_AFTER], "1");
    }
}
