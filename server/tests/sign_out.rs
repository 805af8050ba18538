//! A sign-out is never undone: when the store cannot record it, the server says so (`503`
//! `sign-out-not-recorded`) and the signed-out cookie proves nothing afterwards — not on the next
//! request (which would otherwise restore the login from its sealed credential), not after the
//! write is retried, and not in a later process over the same store once it is recorded.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use chopin_server::runtime::connector::{self, HttpResponse, TcpConnector};
use chopin_server::store::instrumented::{Call, Hook, Instrumented};
use chopin_server::store::{MemoryStore, Store, StoreError};
use http::{Method, StatusCode};
use uuid::Uuid;

/// Fails `sign_out_browser_login` while `fail` is set, as a database that is down would.
#[derive(Clone, Default)]
struct FailSignOut {
    fail: Arc<AtomicBool>,
}

impl Hook for FailSignOut {
    fn call(&self, _call: Call) {}

    fn fail(&self, method: &'static str, _write: bool) -> Option<StoreError> {
        (method == "sign_out_browser_login" && self.fail.load(Ordering::SeqCst))
            .then(|| StoreError::Backend("the database is unreachable".into()))
    }
}

async fn send(host: &str, method: Method, path: &str, cookie: &str, origin: bool) -> HttpResponse {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{host}{path}"))
        .header(http::header::COOKIE, cookie);
    if origin {
        request = request.header(http::header::ORIGIN, format!("http://{host}"));
    }
    connector::send(&TcpConnector, request.body(Bytes::new()).unwrap())
        .await
        .unwrap()
}

fn login_id(cookie: &str) -> Uuid {
    let value = cookie.strip_prefix("chopin_session=").unwrap();
    Uuid::parse_str(value.split_once('.').unwrap().0).unwrap()
}

#[tokio::test]
async fn a_sign_out_the_store_cannot_record_answers_503_and_the_cookie_never_works_again() {
    let hook = FailSignOut::default();
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::new(Instrumented::new(inner.clone(), hook.clone()));
    let s = support::served_over(store).await;
    let cookie = s.mona_cookie.clone();
    let session = send(&s.host, Method::GET, "/api/session", &cookie, false).await;
    assert_eq!(session.status, StatusCode::OK);

    hook.fail.store(true, Ordering::SeqCst);
    let out = send(&s.host, Method::POST, "/auth/logout", &cookie, true).await;
    assert_eq!(
        out.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a sign-out that was not recorded must say so"
    );
    let body: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(body["error"], "sign-out-not-recorded", "{body}");
    assert!(
        out.headers.get(http::header::SET_COOKIE).is_none(),
        "the cookie is kept, so the browser can sign out again"
    );
    // The stored login still looks live, with its sealed credential: without a tombstone the
    // next request would restore it.
    let id = login_id(&cookie);
    let stored = inner.browser_login(id).await.unwrap().unwrap();
    assert_eq!(stored.signed_out_at_ms, None);
    assert!(inner.login_credential(id).await.unwrap().is_some());
    for path in [
        "/api/session",
        "/api/session",
        &format!("/api/documents/{}", s.doc),
    ] {
        let again = send(&s.host, Method::GET, path, &cookie, false).await;
        assert_eq!(
            again.status,
            StatusCode::UNAUTHORIZED,
            "{path}: a signed-out cookie must not restore its login"
        );
    }

    // Asked again while the store still fails: still 503, still signed out.
    let out = send(&s.host, Method::POST, "/auth/logout", &cookie, true).await;
    assert_eq!(out.status, StatusCode::SERVICE_UNAVAILABLE);

    // The store is back: asking again records it and clears the cookie.
    hook.fail.store(false, Ordering::SeqCst);
    let out = send(&s.host, Method::POST, "/auth/logout", &cookie, true).await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(out.headers.get(http::header::SET_COOKIE).is_some());
    let stored = inner.browser_login(id).await.unwrap().unwrap();
    assert!(stored.signed_out_at_ms.is_some(), "recorded");
    assert!(inner.login_credential(id).await.unwrap().is_none());
    let again = send(&s.host, Method::GET, "/api/session", &cookie, false).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    // Once recorded, the cookie is not even a pending sign-out any more.
    let out = send(&s.host, Method::POST, "/auth/logout", &cookie, true).await;
    assert_eq!(out.status, StatusCode::UNAUTHORIZED);
}
