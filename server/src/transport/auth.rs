//! The sign-in routes: GitHub's web flow (`/auth/github`, `/auth/github/callback`), the device
//! flow under `AUTH_MODE=local` (`/auth/device`, `…/complete`, `…/cancel`), sign-out
//! (`/auth/logout`) and who this browser is (`/api/session`).
//!
//! Owns: the cookies on the wire — `chopin_session` (the login), `chopin_oauth` (binds a web-flow
//! callback to the browser that started it), `chopin_device` (binds device-flow requests to the
//! browser that started the attempt) — redirects, and the answers' shapes. The device-flow routes
//! answer JSON and never 401 (the browser would take it for a lost session); their POSTs need
//! this server's exact `Origin`, as sign-out does.
//! Does not own: the flows themselves ([`crate::identity::web_flow`],
//! [`crate::identity::device_flow`]) or what ending a login does ([`Planners::end_login`]).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::Json;
use cookie::{Cookie, SameSite};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{Routes, Table};
use crate::access::Access;
use crate::identity::device_flow::{DeviceFlows, DeviceRefusal, DeviceStatus};
use crate::identity::sign_ins::{cookie_value, LiveLogin, LoginEnd, SignIns, SESSION_COOKIE};
use crate::identity::web_flow::{sign_in, FlowRefusal, SignInDeps, SignInFailure, WebFlow};
use crate::planner::Planners;

/// The short-lived cookie that binds an OAuth callback to the browser that started it.
pub const OAUTH_COOKIE: &str = "chopin_oauth";
/// How long an OAuth attempt may take, in seconds.
const OAUTH_ATTEMPT_SECS: i64 = 600;
/// The cookie that binds device-flow requests to the browser that started the attempt.
pub const DEVICE_COOKIE: &str = "chopin_device";
/// The path the attempt cookie is sent on.
const DEVICE_COOKIE_PATH: &str = "/auth/device";

/// What the sign-in routes use.
#[derive(Clone)]
pub struct AuthDeps {
    pub access: Arc<Access>,
    pub web_flow: Arc<WebFlow>,
    pub device_flows: Arc<DeviceFlows>,
    pub sign_in: SignInDeps,
    pub planners: Arc<Planners>,
    /// Unrecorded sign-outs, asked again through `/auth/logout`.
    pub sign_ins: Arc<SignIns>,
    /// `AUTH_MODE=local`: the web flow answers 404 and the device flow serves.
    pub local: bool,
}

impl AuthDeps {
    fn secure(&self) -> bool {
        self.access.app_origin().starts_with("https://")
    }
}

pub fn routes(deps: AuthDeps) -> Routes {
    Table::new()
        .get("/auth/github", github_start)
        .get("/auth/github/callback", github_callback)
        .post("/auth/device", device_start)
        .get("/auth/device", device_status)
        .post("/auth/device/complete", device_complete)
        .post("/auth/device/cancel", device_cancel)
        .post("/auth/logout", logout)
        .get("/api/session", current)
        .with_state(deps)
}

fn set_cookie(cookie: Cookie<'static>) -> (header::HeaderName, HeaderValue) {
    let value =
        HeaderValue::from_str(&cookie.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""));
    (header::SET_COOKIE, value)
}

/// A plain-text refusal a person reads in the browser.
fn refusal(status: StatusCode, words: impl Into<String>) -> Response {
    (status, words.into()).into_response()
}

impl From<FlowRefusal> for Response {
    fn from(r: FlowRefusal) -> Self {
        refusal(r.status, r.words)
    }
}

/// The session cookie for a new login.
fn session_cookie(deps: &AuthDeps, live: &LiveLogin, value: String) -> Cookie<'static> {
    let max_age = (live.expires_at_ms - live.created_at_ms) / 1000;
    Cookie::build((SESSION_COOKIE, value))
        .path("/")
        .http_only(true)
        .secure(deps.secure())
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(max_age.max(1)))
        .build()
}

/// `GET /auth/github`: starts the OAuth web flow at GitHub.
async fn github_start(State(deps): State<AuthDeps>) -> Response {
    if deps.local {
        return refusal(StatusCode::NOT_FOUND, "Not found");
    }
    let authorize = match deps.web_flow.authorize() {
        Ok(a) => a,
        Err(r) => return r.into(),
    };
    let cookie = Cookie::build((OAUTH_COOKIE, authorize.attempt))
        .path("/auth/github")
        .http_only(true)
        .secure(deps.secure())
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(OAUTH_ATTEMPT_SECS))
        .build();
    (
        StatusCode::FOUND,
        [
            (
                header::LOCATION,
                HeaderValue::from_str(&authorize.url).unwrap_or(HeaderValue::from_static("/")),
            ),
            set_cookie(cookie),
        ],
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /auth/github/callback`: finishes the OAuth web flow and signs the browser in.
async fn github_callback(
    State(deps): State<AuthDeps>,
    headers: HeaderMap,
    Query(cb): Query<Callback>,
) -> Response {
    if deps.local {
        return refusal(StatusCode::NOT_FOUND, "Not found");
    }
    if let Some(error) = cb.error {
        return refusal(
            StatusCode::FORBIDDEN,
            format!("GitHub did not sign you in ({error}). Start again from the sign-in page."),
        );
    }
    let (Some(code), Some(attempt)) = (cb.code, cb.state) else {
        return refusal(StatusCode::BAD_REQUEST, "This sign-in link is incomplete: it has no code or state. Start again from the sign-in page.");
    };
    if cookie_value(&headers, OAUTH_COOKIE).as_deref() != Some(attempt.as_str()) {
        return refusal(StatusCode::BAD_REQUEST, "This sign-in was started in another browser or has expired. Start again from the sign-in page.");
    }
    let token = match deps.web_flow.exchange_code(&code).await {
        Ok(token) => token,
        Err(r) => return r.into(),
    };
    let (live, cookie_text) = match sign_in(&deps.sign_in, token, |_| {
        Ok::<(), std::convert::Infallible>(())
    })
    .await
    {
        Ok(Ok(signed_in)) => signed_in,
        Ok(Err(never)) => match never {},
        Err(SignInFailure::Admission(e)) => return refusal(e.http_status(), e.to_string()),
        Err(SignInFailure::Storage) => {
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "Sign-in could not be saved; try again shortly.",
            )
        }
    };
    let session = session_cookie(&deps, &live, cookie_text);
    let clear = Cookie::build((OAUTH_COOKIE, ""))
        .path("/auth/github")
        .max_age(cookie::time::Duration::ZERO)
        .build();
    // Appended, not inserted: both Set-Cookie headers must go out.
    (
        StatusCode::FOUND,
        AppendHeaders([
            (header::LOCATION, HeaderValue::from_static("/")),
            set_cookie(session),
            set_cookie(clear),
        ]),
    )
        .into_response()
}

/// `POST /auth/logout`: ends this browser's login at once, everywhere it is used. The sign-out
/// is final only once the store has recorded it: when that write fails the answer is `503`
/// `sign-out-not-recorded` and the cookie is kept, so the browser can ask again; the login is
/// ended in this process all the same and its cookie proves nothing meanwhile.
async fn logout(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    if !deps.access.is_own_origin(&headers) {
        return refusal(StatusCode::FORBIDDEN, "This request did not come from this server's own pages (its Origin header is missing or foreign).");
    }
    let recorded = match deps.access.browser(&headers).await {
        Some(live) => deps.planners.end_login(&live, LoginEnd::SignedOut).await,
        // A sign-out asked again after the store failed to record it.
        None => match deps.sign_ins.pending_sign_out(&headers) {
            Some(pending) => deps.sign_ins.retry_sign_out(&pending).await,
            None => return refusal(StatusCode::UNAUTHORIZED, "You are not signed in."),
        },
    };
    if recorded.is_err() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "error": "sign-out-not-recorded",
                "message": "Your sign-out could not be saved just now. This browser is signed out on this server already, but sign out again to make it final; the server also keeps trying.",
            })),
        )
            .into_response();
    }
    let clear = Cookie::build((SESSION_COOKIE, ""))
        .path("/")
        .max_age(cookie::time::Duration::ZERO)
        .build();
    (StatusCode::NO_CONTENT, [set_cookie(clear)]).into_response()
}

/// `GET /api/session`: who this browser is signed in as.
async fn current(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    match deps.access.browser(&headers).await {
        Some(live) => Json(json!({
            "login": live.account.login,
            "accountId": live.account.id,
            "expiresAt": live.expires_at_ms,
        }))
        .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "not-signed-in", "message": "You are not signed in." })),
        )
            .into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// The device flow.

fn device_error(refusal: DeviceRefusal) -> Response {
    let mut body = json!({ "error": refusal.code, "message": refusal.words });
    if let Some(status) = refusal.attempt_status {
        body["status"] = json!(status.as_str());
    }
    (refusal.status, Json(body)).into_response()
}

fn status_answer(status: DeviceStatus, message: Option<String>) -> Value {
    match message {
        Some(message) => json!({ "status": status.as_str(), "message": message }),
        None => json!({ "status": status.as_str() }),
    }
}

fn clear_attempt_cookie() -> (header::HeaderName, HeaderValue) {
    set_cookie(
        Cookie::build((DEVICE_COOKIE, ""))
            .path(DEVICE_COOKIE_PATH)
            .max_age(cookie::time::Duration::ZERO)
            .build(),
    )
}

/// 404 under hosted mode, then 403 for a POST without this server's exact Origin.
fn device_refuse(deps: &AuthDeps, headers: &HeaderMap, state_changing: bool) -> Option<Response> {
    if let Err(refusal) = deps.device_flows.local_only() {
        return Some(device_error(refusal));
    }
    if state_changing && !deps.access.is_own_origin(headers) {
        return Some(device_error(DeviceRefusal {
            status: StatusCode::FORBIDDEN,
            code: "foreign-origin",
            words: "This request did not come from this server's own pages (its Origin header is missing or foreign).".to_owned(),
            attempt_status: None,
        }));
    }
    None
}

/// `POST /auth/device`: starts a device-flow attempt.
async fn device_start(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    if let Some(refusal) = device_refuse(&deps, &headers, true) {
        return refusal;
    }
    let earlier = cookie_value(&headers, DEVICE_COOKIE);
    let started = match deps.device_flows.start(earlier.as_deref()).await {
        Ok(started) => started,
        Err(refusal) => return device_error(refusal),
    };
    let max_age = i64::try_from(started.expires_in_secs).unwrap_or(i64::MAX);
    let cookie = Cookie::build((DEVICE_COOKIE, started.attempt))
        .path(DEVICE_COOKIE_PATH)
        .http_only(true)
        .secure(deps.secure())
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(max_age))
        .build();
    (
        [set_cookie(cookie)],
        Json(json!({
            "userCode": started.user_code,
            "verificationUri": started.verification_uri,
            "expiresIn": started.expires_in_secs,
            "interval": started.interval_secs,
        })),
    )
        .into_response()
}

/// `GET /auth/device`: where this browser's attempt stands, polling GitHub once if due.
async fn device_status(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    if let Some(refusal) = device_refuse(&deps, &headers, false) {
        return refusal;
    }
    let attempt = cookie_value(&headers, DEVICE_COOKIE);
    match deps.device_flows.status(attempt.as_deref()).await {
        Ok((status, message)) => Json(status_answer(status, message)).into_response(),
        Err(refusal) => device_error(refusal),
    }
}

/// `POST /auth/device/cancel`: forgets this browser's attempt.
async fn device_cancel(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    if let Some(refusal) = device_refuse(&deps, &headers, true) {
        return refusal;
    }
    let attempt = cookie_value(&headers, DEVICE_COOKIE);
    if let Err(refusal) = deps.device_flows.cancel(attempt.as_deref()) {
        return device_error(refusal);
    }
    (
        [clear_attempt_cookie()],
        Json(status_answer(DeviceStatus::Cancelled, None)),
    )
        .into_response()
}

/// `POST /auth/device/complete`: signs the browser in with the approved attempt's token.
async fn device_complete(State(deps): State<AuthDeps>, headers: HeaderMap) -> Response {
    if let Some(refusal) = device_refuse(&deps, &headers, true) {
        return refusal;
    }
    let attempt = cookie_value(&headers, DEVICE_COOKIE);
    match deps.device_flows.complete(attempt.as_deref()).await {
        Ok((live, cookie_text)) => {
            // The same session cookie as the web flow's.
            let session = session_cookie(&deps, &live, cookie_text);
            (
                AppendHeaders([set_cookie(session), clear_attempt_cookie()]),
                Json(json!({ "status": "signed-in", "login": live.account.login })),
            )
                .into_response()
        }
        Err(refusal) => device_error(refusal),
    }
}
