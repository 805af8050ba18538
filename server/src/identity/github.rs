//! The server's GitHub REST client: who a token belongs to, what it may do on a repository, and
//! whether its account is an active member of an organization.
//!
//! Owns: the three REST calls instance admission and the repository recheck need (`GET /user`,
//! `GET /repos/{owner}/{repo}`, `GET /user/memberships/orgs/{org}`), the headers GitHub asks for,
//! turning GitHub's status codes into [`GitHubError`]s, and a bound on how long one call may take
//! ([`GITHUB_REQUEST_TIMEOUT_MS`]).
//! Does not own: opening sockets or TLS (the [`connector`](crate::runtime::connector) seam), deciding who
//! is admitted or caching answers (the [`admission`](crate::identity::admission) module), the OAuth web
//! flow.
//!
//! Invariants: every call sends the caller's token and nothing else of theirs; a token is never
//! logged, never put in an error, and its header is marked sensitive. A name that GitHub could
//! not hold (an owner, repository or org with a `/`, `?`, space, …) is answered "no access"
//! without a request, so nothing a client sends can change the path we ask.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use serde::Deserialize;

use crate::metrics::Metrics;
use crate::runtime::connector::{self, HttpError, HttpResponse, SharedConnector};

/// The longest one GitHub call may take, connecting included, before it counts as an outage.
pub const GITHUB_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// GitHub's longest owner, repository or organization name is 100 characters.
const MAX_NAME_CHARS: usize = 100;

/// A GitHub account, as `GET /user` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GitHubUser {
    pub id: i64,
    /// The account's current login, in GitHub's case.
    pub login: String,
}

/// What one token may do on one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoAccess {
    /// The owner in GitHub's case (from `full_name`), whatever case was asked.
    pub owner: String,
    /// The repository name in GitHub's case (from `full_name`).
    pub repo: String,
    pub admin: bool,
    pub push: bool,
    pub pull: bool,
}

impl RepoAccess {
    /// A writer: push or administration access (AC-15, AO-04).
    pub fn can_write(&self) -> bool {
        self.push || self.admin
    }
}

/// Why a GitHub call gave no answer. Display is written for a person and never holds a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitHubError {
    /// GitHub answered 401: the token is missing, malformed, expired or revoked.
    #[error("GitHub did not accept the token (it may have expired or been revoked); sign in to GitHub again")]
    BadCredentials,
    /// GitHub could not be asked or gave no usable answer: a connection failure, a timeout, a
    /// 5xx, a rate limit, or a response we could not read. Temporary; retry later.
    #[error("GitHub is unavailable right now ({0}); try again shortly")]
    Unavailable(String),
}

/// GitHub's REST API at a configured base URL (`GITHUB_API_URL`), reached through a
/// [`Connector`](crate::runtime::connector::Connector). Cheap to clone.
#[derive(Clone)]
pub struct GitHub {
    api_base: String,
    connector: SharedConnector,
    request_timeout_ms: u64,
    metrics: Option<Arc<Metrics>>,
}

impl fmt::Debug for GitHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHub")
            .field("api_base", &self.api_base)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct RepoBody {
    full_name: String,
    #[serde(default)]
    permissions: Option<Permissions>,
}

#[derive(Deserialize, Default)]
struct Permissions {
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    push: bool,
    #[serde(default)]
    pull: bool,
}

#[derive(Deserialize)]
struct MembershipBody {
    state: String,
}

impl GitHub {
    /// `api_base` is a base URL without a trailing slash, such as `https://api.github.com` or
    /// the fake's `http://127.0.0.1:PORT` (a trailing slash is tolerated).
    pub fn new(api_base: String, connector: SharedConnector) -> Self {
        let api_base = match api_base.strip_suffix('/') {
            Some(trimmed) => trimmed.to_string(),
            None => api_base,
        };
        Self {
            api_base,
            connector,
            request_timeout_ms: GITHUB_REQUEST_TIMEOUT_MS,
            metrics: None,
        }
    }

    /// The same client, counting each call by outcome in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same client with another bound on one call than [`GITHUB_REQUEST_TIMEOUT_MS`]
    /// (at least 1 ms).
    pub fn with_request_timeout_ms(mut self, request_timeout_ms: u64) -> Self {
        self.request_timeout_ms = request_timeout_ms.max(1);
        self
    }

    /// The base URL requests go to.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// The account `token` belongs to (`GET /user`).
    pub async fn user(&self, token: &str) -> Result<GitHubUser, GitHubError> {
        let response = self.get(token, "/user").await?;
        match response.status.as_u16() {
            200 => parse(&response.body),
            _ => Err(unexpected(&response)),
        }
    }

    /// What `token`'s account may do on `owner/repo` (`GET /repos/{owner}/{repo}`). `None`
    /// when GitHub answers 404, which is also how it hides a private repository from an account
    /// without access.
    pub async fn repo_access(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Option<RepoAccess>, GitHubError> {
        if !is_github_name(owner) || !is_github_name(repo) {
            return Ok(None);
        }
        let response = self.get(token, &format!("/repos/{owner}/{repo}")).await?;
        match response.status.as_u16() {
            200 => {
                let body: RepoBody = parse(&response.body)?;
                let (owner, repo) = body
                    .full_name
                    .split_once('/')
                    .filter(|(o, r)| !o.is_empty() && !r.is_empty())
                    .ok_or_else(malformed)?;
                let permissions = body.permissions.unwrap_or_default();
                Ok(Some(RepoAccess {
                    owner: owner.to_string(),
                    repo: repo.to_string(),
                    admin: permissions.admin,
                    push: permissions.push,
                    pull: permissions.pull,
                }))
            }
            404 => Ok(None),
            _ => Err(unexpected(&response)),
        }
    }

    /// Whether `token`'s account is an active member of `org`
    /// (`GET /user/memberships/orgs/{org}`). A pending invitation is not active; 404 and 403
    /// (not a member, or membership not visible to this token) are `false`. A 403 that is a
    /// rate limit is [`GitHubError::Unavailable`].
    pub async fn org_membership_active(&self, token: &str, org: &str) -> Result<bool, GitHubError> {
        if !is_github_name(org) {
            return Ok(false);
        }
        let response = self
            .get(token, &format!("/user/memberships/orgs/{org}"))
            .await?;
        match response.status.as_u16() {
            200 => {
                let body: MembershipBody = parse(&response.body)?;
                Ok(body.state == "active")
            }
            403 if !is_rate_limited(&response) => Ok(false),
            404 => Ok(false),
            _ => Err(unexpected(&response)),
        }
    }

    /// `GET {api_base}{path}` with the token, bounded by the request timeout. A 401
    /// is [`GitHubError::BadCredentials`] here, for every endpoint.
    async fn get(&self, token: &str, path: &str) -> Result<HttpResponse, GitHubError> {
        let answer = self.ask(token, path).await;
        if let Some(metrics) = &self.metrics {
            let call = if path.starts_with("/user/memberships/") {
                "membership"
            } else if path.starts_with("/repos/") {
                "repository"
            } else {
                "user"
            };
            let outcome = match &answer {
                Ok(r) if r.status.is_success() => "ok",
                Ok(r) if r.status == http::StatusCode::NOT_FOUND => "not-found",
                Ok(r) if is_rate_limited(r) => "rate-limited",
                Ok(r) if r.status == http::StatusCode::FORBIDDEN => "forbidden",
                Ok(_) => "unexpected-status",
                Err(GitHubError::BadCredentials) => "bad-credentials",
                Err(GitHubError::Unavailable(_)) => "unavailable",
            };
            metrics.github_call(call, outcome);
        }
        answer
    }

    async fn ask(&self, token: &str, path: &str) -> Result<HttpResponse, GitHubError> {
        let mut authorization = http::HeaderValue::from_str(&format!("Bearer {token}"))
            // No token GitHub issues has bytes a header cannot carry.
            .map_err(|_| GitHubError::BadCredentials)?;
        authorization.set_sensitive(true);
        let url = format!("{}{path}", self.api_base);
        let request = http::Request::get(&url)
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header(http::header::USER_AGENT, "chopin-server")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header(http::header::AUTHORIZATION, authorization)
            .body(Bytes::new())
            .map_err(|_| {
                GitHubError::Unavailable(format!("GITHUB_API_URL gives a bad URL {url}"))
            })?;
        let sent = tokio::time::timeout(
            Duration::from_millis(self.request_timeout_ms),
            connector::send(self.connector.as_ref(), request),
        )
        .await;
        let response = match sent {
            Err(_) => {
                return Err(GitHubError::Unavailable(format!(
                    "no answer within {} ms",
                    self.request_timeout_ms
                )))
            }
            Ok(Err(error)) => return Err(GitHubError::Unavailable(describe(&error))),
            Ok(Ok(response)) => response,
        };
        tracing::debug!(path, status = response.status.as_u16(), "GitHub answered");
        if response.status == http::StatusCode::UNAUTHORIZED {
            return Err(GitHubError::BadCredentials);
        }
        Ok(response)
    }
}

/// What went wrong on the way to GitHub, in words that hold no token: an [`HttpError`] names
/// the URL and address but never a request header.
fn describe(error: &HttpError) -> String {
    error.to_string()
}

fn malformed() -> GitHubError {
    GitHubError::Unavailable("GitHub sent an answer Chopin could not read".to_string())
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, GitHubError> {
    serde_json::from_slice(body).map_err(|_| malformed())
}

/// GitHub's rate limits answer 429, or 403 with `x-ratelimit-remaining: 0` or `retry-after`.
fn is_rate_limited(response: &HttpResponse) -> bool {
    let remaining_zero = response
        .headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    response.status == http::StatusCode::TOO_MANY_REQUESTS
        || remaining_zero
        || response.headers.contains_key(http::header::RETRY_AFTER)
}

/// Any answer an endpoint does not define: an outage, a rate limit, or something unexpected.
fn unexpected(response: &HttpResponse) -> GitHubError {
    let status = response.status.as_u16();
    if is_rate_limited(response) {
        GitHubError::Unavailable("GitHub's rate limit was reached".to_string())
    } else if response.status.is_server_error() {
        GitHubError::Unavailable(format!("GitHub answered {status}"))
    } else {
        GitHubError::Unavailable(format!("GitHub answered an unexpected {status}"))
    }
}

/// Whether `name` could be a GitHub owner, repository or organization name: 1 to 100 of
/// `A-Z a-z 0-9 - _ .`, and not `.` or `..`.
pub(crate) fn is_github_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name != "."
        && name != ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_github_could_hold_reach_the_path() {
        for ok in ["octocat", "Hello-World", "a.b_c", "x"] {
            assert!(is_github_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a?b",
            "a b",
            "a%2fb",
            "é",
            &"x".repeat(101),
        ] {
            assert!(!is_github_name(bad), "{bad}");
        }
    }

    #[test]
    fn writers_have_push_or_admin() {
        let access = |admin, push| RepoAccess {
            owner: "o".into(),
            repo: "r".into(),
            admin,
            push,
            pull: true,
        };
        assert!(access(false, true).can_write());
        assert!(access(true, false).can_write());
        assert!(!access(false, false).can_write());
    }

    #[test]
    fn errors_read_as_sentences() {
        assert!(GitHubError::BadCredentials.to_string().contains("sign in"));
        let e = GitHubError::Unavailable("GitHub answered 503".into());
        assert_eq!(
            e.to_string(),
            "GitHub is unavailable right now (GitHub answered 503); try again shortly"
        );
    }
}
