//! GitHub user tokens: what GitHub's token endpoint grants, and renewing one with its refresh
//! token.
//!
//! Owns: [`UserToken`] (an access token with, for a GitHub App that expires user tokens, its
//! lifetime, its refresh token and that token's lifetime), reading it from GitHub's answer at
//! `/login/oauth/access_token` ([`TokenAnswer`], shared by the web flow, the device flow and the
//! refresh), and [`TokenRefresher`]: `grant_type=refresh_token` against `GITHUB_WEB_URL`, bounded
//! by [`REFRESH_TIMEOUT`].
//! Does not own: when to refresh or what a refresh does to the Planner's sessions (the
//! credential renewal service above this layer), sealing the result
//! ([`super::crypto`]), or the login table ([`super::sign_ins`]).
//!
//! GitHub, "Refreshing user access tokens": an expiring user token lives 8 hours and comes with
//! a refresh token of about 6 months. Refreshing returns a new access token *and* a new refresh
//! token; the refresh token used and the old access token stop working at once. The client
//! secret is required unless the token came from the device flow, so under `AUTH_MODE=local`
//! (which never reads the secret) the refresh is sent without one.
//!
//! Invariants: tokens and the client secret go only to GitHub, never into a log or an error;
//! `Debug` of a [`UserToken`] shows no token.

use std::fmt;
use std::time::Duration;

use http::header;
use hyper::body::Bytes;
use serde::Deserialize;

use crate::config::Secret;
use crate::runtime::connector::{self, SharedConnector};

/// How long a refresh may take.
pub const REFRESH_TIMEOUT: Duration = Duration::from_secs(15);

/// A user access token as GitHub granted it.
#[derive(Clone)]
pub struct UserToken {
    pub access_token: Secret,
    /// Seconds until the access token expires; `None` for a token that does not expire.
    pub expires_in_secs: Option<u64>,
    /// The one-use token that renews it (an App that expires user tokens sends one).
    pub refresh_token: Option<Secret>,
    /// Seconds until the refresh token expires.
    pub refresh_expires_in_secs: Option<u64>,
}

impl UserToken {
    /// A token that never expires and cannot be renewed (a classic OAuth App's, or a test's).
    pub fn lasting(access_token: Secret) -> Self {
        UserToken {
            access_token,
            expires_in_secs: None,
            refresh_token: None,
            refresh_expires_in_secs: None,
        }
    }
}

impl fmt::Debug for UserToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserToken")
            .field("expires_in_secs", &self.expires_in_secs)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("refresh_expires_in_secs", &self.refresh_expires_in_secs)
            .finish_non_exhaustive()
    }
}

/// GitHub's answer at `/login/oauth/access_token`, asked as JSON: a token, or an `error`
/// (GitHub answers errors with 200 too).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TokenAnswer {
    pub access_token: Option<String>,
    pub expires_in: Option<u64>,
    pub refresh_token: Option<String>,
    pub refresh_token_expires_in: Option<u64>,
    pub error: Option<String>,
    /// With the device flow's `slow_down`: the interval to keep.
    pub interval: Option<u64>,
}

impl TokenAnswer {
    /// The token granted, if the answer holds one.
    pub fn token(&self) -> Option<UserToken> {
        let access = self.access_token.as_deref().filter(|t| !t.is_empty())?;
        Some(UserToken {
            access_token: Secret::new(access),
            expires_in_secs: self.expires_in,
            refresh_token: self
                .refresh_token
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(Secret::new),
            refresh_expires_in_secs: self.refresh_token_expires_in,
        })
    }
}

/// Why a refresh gave no new token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefreshError {
    /// GitHub refused the refresh token (`bad_refresh_token`: expired, spent or revoked; or the
    /// App's credentials): the login cannot be renewed and must sign in again.
    #[error("GitHub refused to renew the sign-in ({0})")]
    Rejected(String),
    /// GitHub could not be asked or gave no usable answer; the old token is untouched, try
    /// again later.
    #[error("GitHub could not renew the sign-in just now ({0})")]
    Unavailable(String),
}

/// What a refresh is sent with.
#[derive(Debug, Clone)]
pub struct RefresherSettings {
    /// `GITHUB_WEB_URL`.
    pub github_web_url: String,
    /// `GITHUB_APP_CLIENT_ID`.
    pub client_id: Option<String>,
    /// `GITHUB_APP_CLIENT_SECRET` under `AUTH_MODE=hosted`; `None` under `local` (device-flow
    /// refresh tokens need no secret).
    pub client_secret: Option<Secret>,
}

/// Renews user tokens at GitHub.
pub struct TokenRefresher {
    settings: RefresherSettings,
    connector: SharedConnector,
}

impl TokenRefresher {
    pub fn new(settings: RefresherSettings, connector: SharedConnector) -> Self {
        TokenRefresher {
            settings,
            connector,
        }
    }

    /// Trades `refresh_token` for a new user token (and a new refresh token). On success the
    /// token renewed and `refresh_token` no longer work.
    pub async fn refresh(&self, refresh_token: &Secret) -> Result<UserToken, RefreshError> {
        let Some(client_id) = self.settings.client_id.as_deref() else {
            return Err(RefreshError::Rejected(
                "GITHUB_APP_CLIENT_ID is not set".to_owned(),
            ));
        };
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("client_id", client_id);
            if let Some(secret) = &self.settings.client_secret {
                form.append_pair("client_secret", secret.expose());
            }
            form.append_pair("grant_type", "refresh_token");
            form.append_pair("refresh_token", refresh_token.expose());
            form.finish()
        };
        let request = http::Request::post(format!(
            "{}/login/oauth/access_token",
            self.settings.github_web_url
        ))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::USER_AGENT, "chopin-server")
        .body(Bytes::from(body))
        .map_err(|_| RefreshError::Unavailable("GITHUB_WEB_URL gives a bad URL".to_owned()))?;
        let response =
            tokio::time::timeout(REFRESH_TIMEOUT, connector::send(&*self.connector, request))
                .await
                .map_err(|_| RefreshError::Unavailable("no answer in time".to_owned()))?
                .map_err(|e| RefreshError::Unavailable(e.to_string()))?;
        if !response.status.is_success() {
            return Err(RefreshError::Unavailable(format!(
                "GitHub answered {}",
                response.status.as_u16()
            )));
        }
        let answer: TokenAnswer = serde_json::from_slice(&response.body)
            .map_err(|_| RefreshError::Unavailable("an answer Chopin could not read".to_owned()))?;
        if let Some(token) = answer.token() {
            return Ok(token);
        }
        match answer.error {
            // GitHub's own words for a refresh it will never accept.
            Some(error)
                if matches!(
                    error.as_str(),
                    "bad_refresh_token" | "incorrect_client_credentials" | "unauthorized_client"
                ) =>
            {
                Err(RefreshError::Rejected(error))
            }
            Some(error) => Err(RefreshError::Unavailable(format!(
                "GitHub answered {error}"
            ))),
            None => Err(RefreshError::Unavailable(
                "no access_token in the answer".to_owned(),
            )),
        }
    }
}
