//! GitHub's OAuth web flow, as the hosted sign-in uses it: where to send the browser, trading the
//! code GitHub returns for a user access token, and turning an admitted token into a login.
//!
//! Owns: [`WebFlow`] — the authorize URL with a fresh attempt value, the token exchange at
//! `GITHUB_WEB_URL/login/oauth/access_token` (bounded by [`EXCHANGE_TIMEOUT`]), and
//! [`sign_in`], shared with the device flow: admission, the account record, the login.
//! Does not own: the routes, cookies and redirects (the transport layer), or the login table
//! ([`super::sign_ins::SignIns`]).
//!
//! Invariants: the client secret and the token are sent only to GitHub and never logged; every
//! refusal carries words a person can act on.

use std::sync::Arc;
use std::time::Duration;

use http::{header, StatusCode};
use hyper::body::Bytes;

use super::admission::{Admission, AdmissionError};
use super::sign_ins::{LiveLogin, SignIns};
use super::tokens::{TokenAnswer, UserToken};
use crate::config::Secret;
use crate::runtime::connector::{self, SharedConnector};
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::SignInStore;

/// How long the token exchange may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// A sign-in that cannot go on: the HTTP status and the words a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRefusal {
    pub status: StatusCode,
    pub words: String,
}

impl FlowRefusal {
    fn new(status: StatusCode, words: impl Into<String>) -> Self {
        FlowRefusal {
            status,
            words: words.into(),
        }
    }

    fn not_configured() -> Self {
        FlowRefusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in with GitHub is not configured on this server: its operator must set GITHUB_APP_CLIENT_ID and GITHUB_APP_CLIENT_SECRET.",
        )
    }
}

/// What the web flow is configured with.
#[derive(Debug, Clone)]
pub struct WebFlowSettings {
    pub app_origin: String,
    pub github_web_url: String,
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
}

/// The OAuth web flow against GitHub.
pub struct WebFlow {
    settings: WebFlowSettings,
    connector: SharedConnector,
    entropy: SharedEntropy,
}

/// Where to send the browser, and the attempt value its callback must bring back.
#[derive(Debug, Clone)]
pub struct Authorize {
    pub url: String,
    pub attempt: String,
}

impl WebFlow {
    pub fn new(
        settings: WebFlowSettings,
        connector: SharedConnector,
        entropy: SharedEntropy,
    ) -> Self {
        WebFlow {
            settings,
            connector,
            entropy,
        }
    }

    fn redirect_uri(&self) -> String {
        format!("{}/auth/github/callback", self.settings.app_origin)
    }

    /// The GitHub authorize URL for a new attempt.
    pub fn authorize(&self) -> Result<Authorize, FlowRefusal> {
        let Some(client_id) = self.settings.client_id.as_deref() else {
            return Err(FlowRefusal::not_configured());
        };
        let attempt = self.entropy.token_hex(16);
        let authorize = format!("{}/login/oauth/authorize", self.settings.github_web_url);
        let redirect_uri = self.redirect_uri();
        let url = url::Url::parse_with_params(
            &authorize,
            [
                ("client_id", client_id),
                ("redirect_uri", redirect_uri.as_str()),
                ("state", attempt.as_str()),
            ],
        )
        .map_err(|_| {
            FlowRefusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "GITHUB_WEB_URL is not a valid URL",
            )
        })?;
        Ok(Authorize {
            url: url.to_string(),
            attempt,
        })
    }

    /// Trades an OAuth code for a user token (with its refresh token, when the App expires
    /// user tokens).
    pub async fn exchange_code(&self, code: &str) -> Result<UserToken, FlowRefusal> {
        let unavailable = |why: String| {
            tracing::warn!(%why, "sign-in: GitHub token exchange failed");
            FlowRefusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "GitHub is unavailable, so sign-in cannot finish right now; try again shortly.",
            )
        };
        let (Some(id), Some(secret)) = (
            self.settings.client_id.as_deref(),
            self.settings.client_secret.as_ref(),
        ) else {
            return Err(FlowRefusal::not_configured());
        };
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("client_id", id)
            .append_pair("client_secret", secret.expose())
            .append_pair("code", code)
            .append_pair("redirect_uri", &self.redirect_uri())
            .finish();
        let request = http::Request::post(format!(
            "{}/login/oauth/access_token",
            self.settings.github_web_url
        ))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::USER_AGENT, "chopin-server")
        .body(Bytes::from(body))
        .map_err(|e| unavailable(e.to_string()))?;
        let exchange = connector::send(&*self.connector, request);
        let response = tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| unavailable("timed out".to_owned()))?
            .map_err(|e| unavailable(e.to_string()))?;
        if !response.status.is_success() {
            return Err(unavailable(format!("HTTP {}", response.status)));
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&response.body).map_err(|e| unavailable(e.to_string()))?;
        match (answer.token(), answer.error) {
            (Some(token), _) => Ok(token),
            (_, Some(error)) => Err(FlowRefusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "GitHub refused this sign-in ({error}). Start again from the sign-in page."
                ),
            )),
            _ => Err(unavailable("no access_token in the answer".to_owned())),
        }
    }
}

/// Why [`sign_in`] did not sign anyone in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInFailure {
    /// Admission refused the token (or could not ask GitHub).
    Admission(AdmissionError),
    /// The account or the login could not be saved.
    Storage,
}

/// What [`sign_in`] needs: admission, the account records, the login table and the clock.
#[derive(Clone)]
pub struct SignInDeps {
    pub admission: Arc<Admission>,
    pub accounts: Arc<dyn SignInStore>,
    pub sign_ins: Arc<SignIns>,
    pub clock: SharedClock,
}

/// Signs a browser in with a GitHub token: admission, the account record, then the login and
/// the cookie value that proves it. `before_login` runs between the account and the login (the
/// device flow's single-account rule); its refusal is returned as is.
pub async fn sign_in<E>(
    deps: &SignInDeps,
    token: UserToken,
    before_login: impl FnOnce(&crate::store::Account) -> Result<(), E>,
) -> Result<Result<(Arc<LiveLogin>, String), E>, SignInFailure> {
    let admitted = deps
        .admission
        .check(token.access_token.expose())
        .await
        .map_err(SignInFailure::Admission)?;
    let account = deps
        .accounts
        .upsert_account(admitted.user.id, &admitted.user.login, deps.clock.now_ms())
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "sign-in: could not store the account");
            SignInFailure::Storage
        })?;
    if let Err(refusal) = before_login(&account) {
        return Ok(Err(refusal));
    }
    match deps.sign_ins.create(account, token).await {
        Ok(created) => {
            tracing::info!(login = %created.0.account.login, login_id = %created.0.id, "browser signed in");
            Ok(Ok(created))
        }
        Err(e) => {
            tracing::error!(error = %e, "sign-in: could not store the browser login");
            Err(SignInFailure::Storage)
        }
    }
}
