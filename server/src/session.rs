//! Browser sign-in: GitHub's OAuth web flow, cookie sessions ("browser logins") and sign-out.
//!
//! Owns: the `/auth/github`, `/auth/github/callback`, `/auth/logout` and `/api/session` routes,
//! the session cookie, and the process's table of live logins with their GitHub credential.
//! Does not own: what ending a login does to an attached Planner (the sign-out route tells
//! [`crate::planner::Planners`]), or admission policy ([`crate::admission`]).
//!
//! The cookie is `chopin_session=<login id>.<verifier>`, a random 256-bit verifier of which the
//! store keeps only the SHA-256. A login's GitHub credential is held in this process only: a
//! login the process has not seen since it started (sign-in) has no credential here and is not
//! live for a Planner claim (AO-03, "no live browser sign-in since the server started").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::Json;
use cookie::{Cookie, SameSite};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::app::AppState;
use crate::config::{AuthMode, Secret};
use crate::crypto::{CredentialAad, StoredCredential};
use crate::store::{Account, BrowserLogin, StoreError, UnixMillis};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "chopin_session";
/// The short-lived cookie that binds an OAuth callback to the browser that started it.
pub const OAUTH_COOKIE: &str = "chopin_oauth";
/// How long an OAuth attempt may take, in seconds.
const OAUTH_ATTEMPT_SECS: i64 = 600;

/// A browser login this process holds, with the GitHub credential it signed in with.
pub struct LiveLogin {
    pub id: Uuid,
    pub account: Account,
    pub created_at_ms: UnixMillis,
    pub expires_at_ms: UnixMillis,
    verifier_hash: String,
    token: Secret,
    /// The revision the sealed credential is stored at.
    pub credential_revision: i64,
}

impl LiveLogin {
    /// The GitHub user access token. Never log it or send it to a harness.
    pub fn github_token(&self) -> &str {
        self.token.expose()
    }
}

impl std::fmt::Debug for LiveLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLogin")
            .field("id", &self.id)
            .field("login", &self.account.login)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// The live logins of this process, by login id.
pub struct Sessions {
    live: Mutex<HashMap<Uuid, Arc<LiveLogin>>>,
    /// Every login that ends (sign-out, expiry), so sockets opened with it can close.
    ended: tokio::sync::broadcast::Sender<Uuid>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            live: Mutex::default(),
            ended: tokio::sync::broadcast::channel(256).0,
        }
    }
}

impl Sessions {
    /// Ids of logins ending from now on.
    pub fn ended(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.ended.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Arc<LiveLogin>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new login for `account` (store first, then memory) and returns it with the
    /// cookie value that proves it.
    pub async fn create(
        &self,
        state: &AppState,
        account: Account,
        token: Secret,
    ) -> Result<(Arc<LiveLogin>, String), StoreError> {
        let s = &state.services;
        let now = s.clock.now_ms();
        let id = s.entropy.uuid();
        let verifier = s.entropy.token_hex(32);
        let verifier_hash = sha256_hex(&verifier);
        let expires_at_ms = now.saturating_add(state.config.session_max_age_ms as i64);
        s.store
            .create_browser_login(&BrowserLogin {
                id,
                account_id: account.id,
                verifier_hash: verifier_hash.clone(),
                created_at_ms: now,
                expires_at_ms,
                signed_out_at_ms: None,
            })
            .await?;
        // The credential is kept sealed, so a restart can restore the login from its cookie.
        let aad = credential_aad(state, id, account.id, now, expires_at_ms, &verifier_hash, 1);
        let sealed = state.credential_key.seal_credential(
            &*s.entropy,
            &aad,
            &StoredCredential {
                access_token: token.expose().to_owned(),
                refresh_token: None,
                access_expires_at_ms: None,
            },
        );
        match s.store.set_login_credential(id, 0, &sealed).await? {
            Some(1) => {}
            other => {
                return Err(StoreError::Conflict(format!(
                    "a new login's credential was stored at revision {other:?}, not 1"
                )))
            }
        }
        let live = Arc::new(LiveLogin {
            id,
            account,
            created_at_ms: now,
            expires_at_ms,
            verifier_hash,
            token,
            credential_revision: 1,
        });
        self.lock().insert(id, live.clone());
        Ok((live, format!("{id}.{verifier}")))
    }

    /// The live login a request's session cookie proves, if any. A login this process does not
    /// hold (it signed in before a restart) is restored from storage: its sealed credential is
    /// opened and GitHub must still know the token as the login's own account, admitted here.
    pub async fn authenticate(
        &self,
        state: &AppState,
        headers: &HeaderMap,
    ) -> Option<Arc<LiveLogin>> {
        let now_ms = state.services.clock.now_ms();
        let value = cookie_value(headers, SESSION_COOKIE)?;
        let (id, verifier) = value.split_once('.')?;
        let id = Uuid::parse_str(id).ok()?;
        // Compare digests, not the secret, so timing says nothing about the verifier.
        let hash = sha256_hex(verifier);
        if let Some(live) = self.get_live(id, now_ms) {
            return (hash == live.verifier_hash).then_some(live);
        }
        let restored = self.restore(state, id, &hash, now_ms).await;
        if let Some(live) = &restored {
            tracing::info!(login = %live.account.login, login_id = %id, "browser login restored from storage");
        }
        restored
    }

    async fn restore(
        &self,
        state: &AppState,
        id: Uuid,
        verifier_hash: &str,
        now_ms: UnixMillis,
    ) -> Option<Arc<LiveLogin>> {
        let store = &state.services.store;
        let login = store.browser_login(id).await.ok()??;
        if !login.is_live(now_ms) || login.verifier_hash != verifier_hash {
            return None;
        }
        let account = store.account(login.account_id).await.ok()??;
        let (revision, sealed) = store.login_credential(id).await.ok()??;
        let aad = credential_aad(
            state,
            id,
            account.id,
            login.created_at_ms,
            login.expires_at_ms,
            &login.verifier_hash,
            revision,
        );
        let credential = match state.credential_key.open_credential(&aad, &sealed) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(login_id = %id, error = %e, "a stored sign-in credential does not open with this key; the browser must sign in again");
                return None;
            }
        };
        match state.admission.check(&credential.access_token).await {
            Ok(admitted) if admitted.user.id == account.github_user_id => {}
            _ => return None,
        }
        let live = Arc::new(LiveLogin {
            id,
            account,
            created_at_ms: login.created_at_ms,
            expires_at_ms: login.expires_at_ms,
            verifier_hash: login.verifier_hash,
            token: Secret::new(credential.access_token),
            credential_revision: revision,
        });
        // Another request may have restored it meanwhile: keep the first.
        Some(self.lock().entry(id).or_insert(live).clone())
    }

    /// The login if this process holds it and it has not expired at `now_ms`.
    pub fn get_live(&self, id: Uuid, now_ms: UnixMillis) -> Option<Arc<LiveLogin>> {
        let live = self.lock().get(&id).cloned()?;
        (now_ms < live.expires_at_ms).then_some(live)
    }

    /// The newest live login of `account_id` this process holds.
    pub fn live_login_of(&self, account_id: Uuid, now_ms: UnixMillis) -> Option<Arc<LiveLogin>> {
        self.lock()
            .values()
            .filter(|l| l.account.id == account_id && now_ms < l.expires_at_ms)
            .max_by_key(|l| (l.created_at_ms, l.id))
            .cloned()
    }

    /// Forgets a login in this process at once (sign-out); the caller records it in the store.
    pub fn forget(&self, id: Uuid) -> Option<Arc<LiveLogin>> {
        self.lock().remove(&id)
    }
}

/// What a login's sealed credential is bound to: this server, the login, and the revision.
fn credential_aad(
    state: &AppState,
    login_id: Uuid,
    account_id: Uuid,
    created_at_ms: UnixMillis,
    expires_at_ms: UnixMillis,
    verifier_hash: &str,
    revision: i64,
) -> CredentialAad {
    CredentialAad {
        origin: state.config.app_origin.clone(),
        client_id: state
            .config
            .github_app_client_id
            .clone()
            .unwrap_or_default(),
        login_id,
        account_id,
        created_at_ms,
        expires_at_ms,
        verifier_hash: verifier_hash.to_owned(),
        revision,
    }
}

pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub(crate) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| Cookie::split_parse(v.to_owned()).filter_map(Result::ok))
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}

fn set_cookie(cookie: Cookie<'static>) -> (header::HeaderName, HeaderValue) {
    let value =
        HeaderValue::from_str(&cookie.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""));
    (header::SET_COOKIE, value)
}

fn secure(state: &AppState) -> bool {
    state.config.app_origin.starts_with("https://")
}

/// A plain-text refusal a person reads in the browser.
fn refusal(status: StatusCode, words: impl Into<String>) -> Response {
    (status, words.into()).into_response()
}

/// Whether a state-changing browser request comes from the application's own origin.
pub(crate) fn same_origin(state: &AppState, headers: &HeaderMap) -> bool {
    headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|o| o == state.config.app_origin)
}

/// `GET /auth/github`: starts the OAuth web flow at GitHub.
pub async fn github_start(State(state): State<AppState>) -> Response {
    if state.config.auth_mode == AuthMode::Local {
        return refusal(StatusCode::NOT_FOUND, "Not found");
    }
    let Some(client_id) = state.config.github_app_client_id.as_deref() else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in with GitHub is not configured on this server: its operator must set GITHUB_APP_CLIENT_ID and GITHUB_APP_CLIENT_SECRET.",
        );
    };
    let attempt = state.services.entropy.token_hex(16);
    let redirect_uri = format!("{}/auth/github/callback", state.config.app_origin);
    let authorize = format!("{}/login/oauth/authorize", state.config.github_web_url);
    let Ok(url) = url::Url::parse_with_params(
        &authorize,
        [
            ("client_id", client_id),
            ("redirect_uri", redirect_uri.as_str()),
            ("state", attempt.as_str()),
        ],
    ) else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "GITHUB_WEB_URL is not a valid URL",
        );
    };
    let cookie = Cookie::build((OAUTH_COOKIE, attempt))
        .path("/auth/github")
        .http_only(true)
        .secure(secure(&state))
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(OAUTH_ATTEMPT_SECS))
        .build();
    (
        StatusCode::FOUND,
        [
            (
                header::LOCATION,
                HeaderValue::from_str(url.as_str()).unwrap_or(HeaderValue::from_static("/")),
            ),
            set_cookie(cookie),
        ],
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /auth/github/callback`: finishes the OAuth web flow and signs the browser in.
pub async fn github_callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(cb): Query<Callback>,
) -> Response {
    if state.config.auth_mode == AuthMode::Local {
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
    let token = match exchange_code(&state, &code).await {
        Ok(token) => token,
        Err(e) => return refusal(e.0, e.1),
    };
    let admitted = match state.admission.check(token.expose()).await {
        Ok(a) => a,
        Err(e) => return refusal(e.http_status(), e.to_string()),
    };
    let s = &state.services;
    let account = match s
        .store
        .upsert_account(admitted.user.id, &admitted.user.login, s.clock.now_ms())
        .await
    {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "sign-in: could not store the account");
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "Sign-in could not be saved; try again shortly.",
            );
        }
    };
    let (live, cookie_text) = match state.sessions.create(&state, account, token).await {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "sign-in: could not store the browser login");
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "Sign-in could not be saved; try again shortly.",
            );
        }
    };
    tracing::info!(login = %live.account.login, login_id = %live.id, "browser signed in");
    let max_age = (live.expires_at_ms - live.created_at_ms) / 1000;
    let session = Cookie::build((SESSION_COOKIE, cookie_text))
        .path("/")
        .http_only(true)
        .secure(secure(&state))
        .same_site(SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(max_age.max(1)))
        .build();
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

/// Trades an OAuth code for a user access token at `GITHUB_WEB_URL/login/oauth/access_token`.
async fn exchange_code(state: &AppState, code: &str) -> Result<Secret, (StatusCode, String)> {
    let unavailable = |why: String| {
        tracing::warn!(%why, "sign-in: GitHub token exchange failed");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "GitHub is unavailable, so sign-in cannot finish right now; try again shortly."
                .to_owned(),
        )
    };
    let (Some(id), Some(secret)) = (
        state.config.github_app_client_id.as_deref(),
        state.config.github_app_client_secret.as_ref(),
    ) else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in with GitHub is not configured on this server: its operator must set GITHUB_APP_CLIENT_ID and GITHUB_APP_CLIENT_SECRET.".to_owned(),
        ));
    };
    let redirect_uri = format!("{}/auth/github/callback", state.config.app_origin);
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("client_id", id)
        .append_pair("client_secret", secret.expose())
        .append_pair("code", code)
        .append_pair("redirect_uri", &redirect_uri)
        .finish();
    let request = http::Request::post(format!(
        "{}/login/oauth/access_token",
        state.config.github_web_url
    ))
    .header(header::ACCEPT, "application/json")
    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
    .header(header::USER_AGENT, "chopin-server")
    .body(Bytes::from(body))
    .map_err(|e| unavailable(e.to_string()))?;
    let exchange = crate::connector::send(&*state.services.connector, request);
    let response = tokio::time::timeout(std::time::Duration::from_secs(15), exchange)
        .await
        .map_err(|_| unavailable("timed out".to_owned()))?
        .map_err(|e| unavailable(e.to_string()))?;
    if !response.status.is_success() {
        return Err(unavailable(format!("HTTP {}", response.status)));
    }
    #[derive(Deserialize)]
    struct Answer {
        access_token: Option<String>,
        error: Option<String>,
    }
    let answer: Answer =
        serde_json::from_slice(&response.body).map_err(|e| unavailable(e.to_string()))?;
    match (answer.access_token, answer.error) {
        (Some(token), _) if !token.is_empty() => Ok(Secret::new(token)),
        (_, Some(error)) => Err((
            StatusCode::FORBIDDEN,
            format!("GitHub refused this sign-in ({error}). Start again from the sign-in page."),
        )),
        _ => Err(unavailable("no access_token in the answer".to_owned())),
    }
}

/// `POST /auth/logout`: ends this browser's login at once, everywhere it is used.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !same_origin(&state, &headers) {
        return refusal(StatusCode::FORBIDDEN, "This request did not come from this server's own pages (its Origin header is missing or foreign).");
    }
    let Some(live) = state.sessions.authenticate(&state, &headers).await else {
        return refusal(StatusCode::UNAUTHORIZED, "You are not signed in.");
    };
    end_login(&state, &live, LoginEnd::SignedOut).await;
    let clear = Cookie::build((SESSION_COOKIE, ""))
        .path("/")
        .max_age(cookie::time::Duration::ZERO)
        .build();
    (StatusCode::NO_CONTENT, [set_cookie(clear)]).into_response()
}

/// Why a login ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginEnd {
    SignedOut,
    Expired,
}

/// Ends a login: memory first (so nothing new binds to it), then every Planner it owns, then the
/// store.
pub async fn end_login(state: &AppState, live: &LiveLogin, why: LoginEnd) {
    state.sessions.forget(live.id);
    let _ = state.sessions.ended.send(live.id);
    state.admission.invalidate(live.github_token());
    state.planners.login_ended(state, live.id, why).await;
    if why == LoginEnd::SignedOut {
        let now = state.services.clock.now_ms();
        if let Err(e) = state
            .services
            .store
            .sign_out_browser_login(live.id, now)
            .await
        {
            tracing::error!(error = %e, login_id = %live.id, "sign-out could not be recorded; the login is ended in this process");
        }
        if let Err(e) = state.services.store.delete_login_credential(live.id).await {
            tracing::error!(error = %e, login_id = %live.id, "the signed-out login's sealed credential could not be deleted");
        }
    }
    tracing::info!(login = %live.account.login, login_id = %live.id, ?why, "browser login ended");
}

/// `GET /api/session`: who this browser is signed in as.
pub async fn current(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match state.sessions.authenticate(&state, &headers).await {
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
