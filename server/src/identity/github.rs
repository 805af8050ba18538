//! The server's GitHub REST client: who a token belongs to, what it may do on a repository, and
//! whether its account is an active member of an organization.
//!
//! Owns: the REST calls instance admission and the repository rechecks need (`GET /user`,
//! `GET /repos/{owner}/{repo}`, `GET /user/memberships/orgs/{org}`, and for the App installation
//! check `GET /user/installations` and `GET /user/installations/{id}/repositories`, paged and
//! bounded by [`INSTALLATION_MAX_PAGES`]), a bounded [`GitHub::read`] of any path for the
//! repository tools (the repository module, which builds and checks those paths), the headers
//! GitHub asks for,
//! turning GitHub's status codes into [`GitHubError`]s, and the bounds on its calls: how long
//! one may take ([`GITHUB_REQUEST_TIMEOUT_MS`], waiting for a turn included), how much of an
//! answer is read ([`GITHUB_MAX_BODY_BYTES`]), how many run at once
//! ([`GITHUB_MAX_CALLS_IN_FLIGHT`], shared by every clone), and the rate-limit holds: after
//! GitHub answers a token with a rate limit, every call with that token is
//! [`GitHubError::Unavailable`] until the time GitHub named, without asking GitHub.
//! Does not own: opening sockets or TLS (the [`connector`](crate::runtime::connector) seam, which
//! also closes a connection whose call timed out), deciding who is admitted or caching answers
//! (the [`admission`](crate::identity::admission) module), the OAuth web flow.
//!
//! Rate limits, as GitHub documents them: a 403 or 429 is a rate limit when it carries
//! `retry-after` (wait that many seconds), or `x-ratelimit-remaining: 0` (the primary limit:
//! wait until `x-ratelimit-reset`, Unix seconds), or is a 429, or says "rate limit" (or "abuse
//! detection") in its `message` (a secondary limit without `retry-after`: wait at least a
//! minute, [`RATE_LIMIT_DEFAULT_WAIT_MS`]). When several apply the latest time wins. The time is
//! on the server's [`Clock`](crate::runtime::clock::Clock) (GitHub's reset is wall-clock time;
//! the simulator drives it), and held between [`RATE_LIMIT_MIN_WAIT_MS`] (a reset this clock
//! already passed still holds a moment, so disagreeing clocks cannot make us hammer GitHub) and
//! [`RATE_LIMIT_MAX_WAIT_MS`] (GitHub's window is an hour; no answer holds a token longer).
//! A hold is per token (by its SHA-256): GitHub counts a user's calls against that user, and
//! we do not know whose a token is until `/user` answers, so the token is the narrowest scope
//! that is always right; another user's calls are never held by one user's limit. Each limited
//! token learns its limit from one answer of its own; at most [`RATE_LIMIT_MAX_TOKENS`] holds
//! are kept (the soonest to end go first). A call that waited for its turn looks again, so calls
//! queued behind a limited one do not ask either.
//!
//! Invariants: every call sends the caller's token and nothing else of theirs; a token is never
//! logged, never put in an error, and its header is marked sensitive; it is kept only as a digest.
//! A name that GitHub could not hold (an owner, repository or org with a `/`, `?`, space, …) is
//! answered "no access" without a request, so nothing a client sends can change the path we ask.
//! A rate limit, an outage, a hung call or an over-long answer is always
//! [`GitHubError::Unavailable`] — never "no access", "not a member" or "bad credentials".

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hyper::body::Bytes;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use crate::runtime::clock::SharedClock;
use crate::runtime::connector::{self, HttpError, HttpResponse, SendOptions, SharedConnector};
use crate::store::UnixMillis;

/// The longest one GitHub call may take, connecting included, before it counts as an outage.
pub const GITHUB_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// The most bytes of one GitHub answer read (1 MiB); the answers we ask for are a few KiB.
pub const GITHUB_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The most GitHub calls of one client (and its clones) in flight at once.
pub const GITHUB_MAX_CALLS_IN_FLIGHT: usize = 16;
/// How long a token waits after a rate-limit answer that names no time (GitHub: "wait for at
/// least one minute before retrying").
pub const RATE_LIMIT_DEFAULT_WAIT_MS: i64 = 60_000;
/// The shortest hold a rate-limit answer causes, even when its reset has already passed on our
/// clock.
pub const RATE_LIMIT_MIN_WAIT_MS: i64 = 1_000;
/// The longest hold a rate-limit answer causes: GitHub's primary window is an hour.
pub const RATE_LIMIT_MAX_WAIT_MS: i64 = 3_600_000;
/// The most tokens held by a rate limit at once.
pub const RATE_LIMIT_MAX_TOKENS: usize = 10_000;
/// The most pages of one installation listing read (`/user/installations`, or one
/// installation's repositories) before the answer counts as unavailable rather than guessed.
pub const INSTALLATION_MAX_PAGES: u32 = 30;

/// Most repositories [`GitHub::repositories`] lists (our bound: a start page, not an index).
pub const REPOSITORIES_MAX: usize = 300;

/// What [`GitHub::repositories`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repositories {
    /// `owner/name`, each once.
    pub names: Vec<String>,
    /// The listing was cut at a bound: there are more.
    pub more: bool,
}
/// Installations asked per page (GitHub's maximum is 100).
const INSTALLATIONS_PER_PAGE: u32 = 100;
/// Repositories asked per page: a repository's JSON is a few KiB, so 50 stay well inside
/// [`GITHUB_MAX_BODY_BYTES`].
const INSTALLATION_REPOS_PER_PAGE: u32 = 50;
/// GitHub's longest owner, repository or organization name is 100 characters.
const MAX_NAME_CHARS: usize = 100;

/// A GitHub account, as `GET /user` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GitHubUser {
    pub id: i64,
    /// The account's current login, in GitHub's case.
    pub login: String,
}

/// A person GitHub lists as a repository's collaborator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collaborator {
    pub login: String,
    /// Their GitHub picture.
    pub avatar_url: Option<String>,
}

/// The most collaborator pages read (CTX-39: three pages of 100).
pub const COLLABORATOR_PAGES_MAX: usize = 3;

/// The path of the page after this one, from a GitHub `Link` header's `rel="next"` (only its
/// path and query, so the answer can never send the token elsewhere).
fn next_page(link: Option<&str>) -> Option<String> {
    link?.split(',').find_map(|part| {
        let (url, rel) = part.split_once(';')?;
        if !rel.contains("rel=\"next\"") {
            return None;
        }
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
        let path = &after_scheme[after_scheme.find('/')?..];
        Some(path.to_owned())
    })
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

/// The SHA-256 of a token: what rate-limit holds and admission's caches are keyed by instead of
/// the token. Its `Debug` shows only a short prefix.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(")?;
        for byte in &self.0[..4] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…)")
    }
}

/// GitHub's REST API at a configured base URL (`GITHUB_API_URL`), reached through a
/// [`Connector`](crate::runtime::connector::Connector). Cheap to clone; clones share the cap on
/// calls in flight and the rate-limit holds.
#[derive(Clone)]
pub struct GitHub {
    api_base: String,
    connector: SharedConnector,
    clock: SharedClock,
    request_timeout_ms: u64,
    metrics: Option<Arc<Metrics>>,
    shared: Arc<Shared>,
}

/// What every clone of a client shares.
struct Shared {
    /// [`GITHUB_MAX_CALLS_IN_FLIGHT`] permits; a call holds one from before it connects until
    /// its answer is read or it gives up.
    calls: Semaphore,
    holds: Mutex<RateLimitHolds>,
}

impl fmt::Debug for GitHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitHub")
            .field("api_base", &self.api_base)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// A repository as the repository tools need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// The owner in GitHub's case.
    pub owner: String,
    /// The name in GitHub's case.
    pub repo: String,
    /// GitHub's global node id of the repository (stays with it through renames and
    /// transfers): what code search results are filtered by.
    pub node_id: String,
    /// The branch reads default to.
    pub default_branch: String,
}

/// The media type of GitHub's JSON answers.
pub const ACCEPT_JSON: &str = "application/vnd.github+json";

#[derive(Deserialize)]
struct RepoBody {
    full_name: String,
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    default_branch: Option<String>,
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

#[derive(Deserialize)]
struct InstallationsBody {
    #[serde(default)]
    installations: Vec<InstallationBody>,
}

#[derive(Deserialize)]
struct InstallationBody {
    id: i64,
    account: Option<AccountBody>,
    #[serde(default)]
    repository_selection: String,
}

#[derive(Deserialize)]
struct AccountBody {
    login: String,
}

#[derive(Deserialize)]
struct InstallationReposBody {
    #[serde(default)]
    repositories: Vec<InstallationRepoBody>,
}

#[derive(Deserialize)]
struct InstallationRepoBody {
    full_name: String,
}

impl GitHub {
    /// `api_base` is a base URL without a trailing slash, such as `https://api.github.com` or
    /// the fake's `http://127.0.0.1:PORT` (a trailing slash is tolerated). `clock` tells when a
    /// rate limit's hold ends (the simulator's clock under simulation).
    pub fn new(api_base: String, connector: SharedConnector, clock: SharedClock) -> Self {
        let api_base = match api_base.strip_suffix('/') {
            Some(trimmed) => trimmed.to_string(),
            None => api_base,
        };
        Self {
            api_base,
            connector,
            clock,
            request_timeout_ms: GITHUB_REQUEST_TIMEOUT_MS,
            metrics: None,
            shared: Arc::new(Shared {
                calls: Semaphore::new(GITHUB_MAX_CALLS_IN_FLIGHT),
                holds: Mutex::new(RateLimitHolds::default()),
            }),
        }
    }

    /// The same client, counting each call by outcome in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same client (sharing the cap and the holds) with another bound on one call than
    /// [`GITHUB_REQUEST_TIMEOUT_MS`] (at least 1 ms).
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

    /// The people with access to `owner/repo` (`GET /repos/{owner}/{repo}/collaborators`, 100
    /// a page, following GitHub's `Link` paging for at most [`COLLABORATOR_PAGES_MAX`] pages),
    /// bots left out. `Ok(None)` where GitHub will not list them to this token (it lists them
    /// only to people who can push, 403, or the repository is not visible, 404).
    pub async fn collaborators(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Option<Vec<Collaborator>>, GitHubError> {
        #[derive(Deserialize)]
        struct Body {
            login: String,
            #[serde(default)]
            avatar_url: Option<String>,
            #[serde(rename = "type", default)]
            kind: Option<String>,
        }
        if !is_github_name(owner) || !is_github_name(repo) {
            return Ok(None);
        }
        let mut people = Vec::new();
        let mut path = format!("/repos/{owner}/{repo}/collaborators?per_page=100&page=1");
        let prefix = format!("/repos/{owner}/{repo}/collaborators?");
        for _ in 0..COLLABORATOR_PAGES_MAX {
            let response = self.get(token, &path).await?;
            match response.status.as_u16() {
                200 => {}
                403 | 404 => return Ok(None),
                _ => return Err(unexpected(&response)),
            }
            let page: Vec<Body> = parse(&response.body)?;
            people.extend(
                page.into_iter()
                    .filter(|p| p.kind.as_deref() != Some("Bot"))
                    .map(|p| Collaborator {
                        login: p.login,
                        avatar_url: p.avatar_url,
                    }),
            );
            let link = response.headers.get("link").and_then(|v| v.to_str().ok());
            // Only a next page of the same listing is followed.
            match next_page(link).and_then(|next| {
                let (_, query) = next.split_once('?')?;
                Some(format!("{prefix}{query}"))
            }) {
                Some(next) => path = next,
                None => break,
            }
        }
        Ok(Some(people))
    }

    /// Whether `token`'s account is an active member of `org`
    /// (`GET /user/memberships/orgs/{org}`). A pending invitation is not active; 404 and 403
    /// (not a member, or membership not visible to this token) are `false`. A 403 that is a
    /// rate limit is [`GitHubError::Unavailable`] (it never gets here: [`Self::ask`] holds it).
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
            403 if !is_rate_limit(&response) => Ok(false),
            404 => Ok(false),
            _ => Err(unexpected(&response)),
        }
    }

    /// Whether this GitHub App's installation on `owner` covers `owner/repo` for `token`'s
    /// account (PERM-06). A GitHub App user token reaches only what both its user and the App's
    /// installations can see, so the App must be installed on the owner with the repository
    /// selected. Asked with the user's own token (no App key): `GET /user/installations` for
    /// the installation on `owner`, then, unless it covers all of the owner's repositories,
    /// `GET /user/installations/{id}/repositories` until the repository is found. Both are read
    /// page by page, at most [`INSTALLATION_MAX_PAGES`] each; a listing longer than that is
    /// [`GitHubError::Unavailable`], never a guess. A 403 (a token GitHub did not issue to a
    /// GitHub App: this server is registered as an OAuth App) is `false`: no installation
    /// covers anything for it.
    pub async fn installation_covers(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<bool, GitHubError> {
        if !is_github_name(owner) || !is_github_name(repo) {
            return Ok(false);
        }
        let mut found = None;
        'pages: for page in 1..=INSTALLATION_MAX_PAGES {
            let Some(installations) = self.installations_page(token, page).await? else {
                return Ok(false);
            };
            let last = installations.len() < INSTALLATIONS_PER_PAGE as usize;
            for installation in installations {
                let on_owner = installation
                    .account
                    .as_ref()
                    .is_some_and(|a| a.login.eq_ignore_ascii_case(owner));
                if on_owner {
                    found = Some(installation);
                    break 'pages;
                }
            }
            if last {
                return Ok(false);
            }
            if page == INSTALLATION_MAX_PAGES {
                return Err(GitHubError::Unavailable(format!(
                    "more than {INSTALLATION_MAX_PAGES} pages of GitHub App installations"
                )));
            }
        }
        let Some(installation) = found else {
            return Ok(false);
        };
        if installation.repository_selection == "all" {
            return Ok(true);
        }
        for page in 1..=INSTALLATION_MAX_PAGES {
            let Some(repositories) = self
                .installation_repositories_page(token, installation.id, page)
                .await?
            else {
                return Ok(false);
            };
            let last = repositories.len() < INSTALLATION_REPOS_PER_PAGE as usize;
            let covered = repositories.iter().any(|r| {
                r.full_name.split_once('/').is_some_and(|(o, n)| {
                    o.eq_ignore_ascii_case(owner) && n.eq_ignore_ascii_case(repo)
                })
            });
            if covered {
                return Ok(true);
            }
            if last {
                return Ok(false);
            }
        }
        Err(GitHubError::Unavailable(format!(
            "more than {INSTALLATION_MAX_PAGES} pages of the installation's repositories"
        )))
    }

    /// The repositories `token`'s account reaches through this server's GitHub App, as
    /// `owner/name` in GitHub's order: every installation the account can see
    /// (`GET /user/installations`), then each one's repositories
    /// (`GET /user/installations/{id}/repositories`), page by page, at most
    /// [`INSTALLATION_MAX_PAGES`] pages of each listing and [`REPOSITORIES_MAX`] names in all;
    /// `more` says the listing was cut there. A 403 (a token GitHub did not issue to a GitHub
    /// App) lists nothing.
    pub async fn repositories(&self, token: &str) -> Result<Repositories, GitHubError> {
        let mut listed = Repositories::default();
        let mut installations = Vec::new();
        for page in 1..=INSTALLATION_MAX_PAGES {
            let Some(page_of) = self.installations_page(token, page).await? else {
                return Ok(listed);
            };
            let last = page_of.len() < INSTALLATIONS_PER_PAGE as usize;
            installations.extend(page_of.into_iter().map(|i| i.id));
            if last {
                break;
            }
            if page == INSTALLATION_MAX_PAGES {
                listed.more = true;
            }
        }
        for id in installations {
            for page in 1..=INSTALLATION_MAX_PAGES {
                let Some(repositories) =
                    self.installation_repositories_page(token, id, page).await?
                else {
                    break;
                };
                let last = repositories.len() < INSTALLATION_REPOS_PER_PAGE as usize;
                for repo in repositories {
                    if listed.names.len() == REPOSITORIES_MAX {
                        listed.more = true;
                        return Ok(listed);
                    }
                    if !listed.names.contains(&repo.full_name) {
                        listed.names.push(repo.full_name);
                    }
                }
                if last {
                    break;
                }
                if page == INSTALLATION_MAX_PAGES {
                    listed.more = true;
                }
            }
        }
        Ok(listed)
    }

    /// One page of `GET /user/installations`; `None` for a 403 that is not a rate limit (a
    /// token GitHub did not issue to a GitHub App).
    async fn installations_page(
        &self,
        token: &str,
        page: u32,
    ) -> Result<Option<Vec<InstallationBody>>, GitHubError> {
        let path = format!("/user/installations?per_page={INSTALLATIONS_PER_PAGE}&page={page}");
        let response = self.get(token, &path).await?;
        match response.status.as_u16() {
            200 => Ok(Some(
                parse::<InstallationsBody>(&response.body)?.installations,
            )),
            403 if !is_rate_limit(&response) => Ok(None),
            _ => Err(unexpected(&response)),
        }
    }

    /// One page of `GET /user/installations/{id}/repositories`; `None` when the installation
    /// went away between the calls (a 404, or a 403 that is not a rate limit).
    async fn installation_repositories_page(
        &self,
        token: &str,
        id: i64,
        page: u32,
    ) -> Result<Option<Vec<InstallationRepoBody>>, GitHubError> {
        let path = format!(
            "/user/installations/{id}/repositories?per_page={INSTALLATION_REPOS_PER_PAGE}&page={page}"
        );
        let response = self.get(token, &path).await?;
        match response.status.as_u16() {
            200 => Ok(Some(
                parse::<InstallationReposBody>(&response.body)?.repositories,
            )),
            403 | 404 if !is_rate_limit(&response) => Ok(None),
            _ => Err(unexpected(&response)),
        }
    }

    /// `GET {api_base}{path}` with the token, bounded by the request timeout. A 401
    /// is [`GitHubError::BadCredentials`] here, and a rate limit [`GitHubError::Unavailable`],
    /// for every endpoint.
    async fn get(&self, token: &str, path: &str) -> Result<HttpResponse, GitHubError> {
        self.get_with(token, path, ACCEPT_JSON, GITHUB_MAX_BODY_BYTES)
            .await
            .map_err(Failure::into_error)
    }

    /// `GET {api_base}{path}` for the repository tools: `accept` names the media type and at
    /// most `max_body_bytes` of the answer are read. `Ok(None)` when the answer is longer than
    /// that. The caller builds `path` from names and parts it has checked; the token and
    /// every bound of [`GitHub::get`] apply alike.
    pub async fn read(
        &self,
        token: &str,
        path: &str,
        accept: &'static str,
        max_body_bytes: usize,
    ) -> Result<Option<HttpResponse>, GitHubError> {
        match self.get_with(token, path, accept, max_body_bytes).await {
            Ok(response) => Ok(Some(response)),
            Err(Failure::TooLarge(_)) => Ok(None),
            Err(failure) => Err(failure.into_error()),
        }
    }

    /// The repository `owner/repo` as `token`'s account sees it: its names in GitHub's case,
    /// its node id and its default branch (`GET /repos/{owner}/{repo}`). `None` on 404.
    pub async fn repository(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Option<RepoInfo>, GitHubError> {
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
                Ok(Some(RepoInfo {
                    owner: owner.to_owned(),
                    repo: repo.to_owned(),
                    node_id: body
                        .node_id
                        .filter(|n| !n.is_empty())
                        .ok_or_else(malformed)?,
                    default_branch: body
                        .default_branch
                        .filter(|b| !b.is_empty())
                        .ok_or_else(malformed)?,
                }))
            }
            404 => Ok(None),
            _ => Err(unexpected(&response)),
        }
    }

    async fn get_with(
        &self,
        token: &str,
        path: &str,
        accept: &'static str,
        max_body_bytes: usize,
    ) -> Result<HttpResponse, Failure> {
        let answer = self.ask(token, path, accept, max_body_bytes).await;
        if let Some(metrics) = &self.metrics {
            let call = if path.starts_with("/user/memberships/") {
                "membership"
            } else if path.starts_with("/user/installations") {
                "installation"
            } else if path.starts_with("/search/") {
                "search"
            } else if path.starts_with("/repos/") && path.matches('/').count() > 3 {
                "repository-read"
            } else if path.starts_with("/repos/") {
                "repository"
            } else {
                "user"
            };
            let outcome = match &answer {
                Ok(r) if r.status.is_success() => "ok",
                Ok(r) if r.status == http::StatusCode::NOT_FOUND => "not-found",
                Ok(r) if r.status == http::StatusCode::FORBIDDEN => "forbidden",
                Ok(_) => "unexpected-status",
                Err(Failure::BadCredentials) => "bad-credentials",
                Err(Failure::RateLimited(_)) => "rate-limited",
                Err(Failure::Held(_)) => "rate-limit-wait",
                Err(Failure::Unavailable(_)) => "unavailable",
                Err(Failure::TooLarge(_)) => "too-large",
            };
            metrics.github_call(call, outcome);
        }
        answer
    }

    async fn ask(
        &self,
        token: &str,
        path: &str,
        accept: &'static str,
        max_body_bytes: usize,
    ) -> Result<HttpResponse, Failure> {
        let digest = TokenDigest::of(token);
        self.check_hold(digest)?;
        let mut authorization = http::HeaderValue::from_str(&format!("Bearer {token}"))
            // No token GitHub issues has bytes a header cannot carry.
            .map_err(|_| Failure::BadCredentials)?;
        authorization.set_sensitive(true);
        let url = format!("{}{path}", self.api_base);
        let request = http::Request::get(&url)
            .header(http::header::ACCEPT, accept)
            .header(http::header::USER_AGENT, "chopin-server")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header(http::header::AUTHORIZATION, authorization)
            .body(Bytes::new())
            .map_err(|_| Failure::Unavailable(format!("GITHUB_API_URL gives a bad URL {url}")))?;
        let options = SendOptions {
            max_body_bytes,
            ..SendOptions::default()
        };
        let call =
            async {
                // Waiting for a turn counts against the call's own time limit.
                let _permit =
                    self.shared.calls.acquire().await.map_err(|_| {
                        Failure::Unavailable("the GitHub client is closed".to_string())
                    })?;
                // A limit may have been learnt while this call waited.
                self.check_hold(digest)?;
                connector::send_with(self.connector.as_ref(), &options, request)
                    .await
                    .map_err(|error| match error {
                        HttpError::BodyTooLarge { limit_bytes } => Failure::TooLarge(limit_bytes),
                        error => Failure::Unavailable(describe(&error)),
                    })
            };
        let response = tokio::time::timeout(Duration::from_millis(self.request_timeout_ms), call)
            .await
            .map_err(|_| {
                Failure::Unavailable(format!("no answer within {} ms", self.request_timeout_ms))
            })??;
        tracing::debug!(path, status = response.status.as_u16(), "GitHub answered");
        let now = self.clock.now_ms();
        if let Some(until) = rate_limit(&response, now) {
            let wait_ms = until - now;
            tracing::warn!(
                path,
                status = response.status.as_u16(),
                wait_ms,
                "GitHub answered with a rate limit; this token waits"
            );
            self.holds().hold(digest, until, now);
            return Err(Failure::RateLimited(format!(
                "GitHub's rate limit was reached; asking again in {} s",
                whole_seconds(wait_ms)
            )));
        }
        if response.status == http::StatusCode::UNAUTHORIZED {
            return Err(Failure::BadCredentials);
        }
        Ok(response)
    }

    /// `Err` while a rate limit holds the token.
    fn check_hold(&self, digest: TokenDigest) -> Result<(), Failure> {
        let now = self.clock.now_ms();
        match self.holds().until(digest, now) {
            Some(until) => Err(Failure::Held(format!(
                "GitHub's rate limit for this token holds for another {} s",
                whole_seconds(until - now)
            ))),
            None => Ok(()),
        }
    }

    fn holds(&self) -> MutexGuard<'_, RateLimitHolds> {
        // The holds keep no invariant a panic elsewhere could break halfway.
        self.shared
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why [`GitHub::ask`] gave no response to read, with what the metrics count it as.
enum Failure {
    BadCredentials,
    /// GitHub answered with a rate limit; the token is now held.
    RateLimited(String),
    /// Not asked: a rate limit still holds the token.
    Held(String),
    Unavailable(String),
    /// The answer is longer than the caller reads (this many bytes).
    TooLarge(usize),
}

impl Failure {
    fn into_error(self) -> GitHubError {
        match self {
            Failure::BadCredentials => GitHubError::BadCredentials,
            Failure::TooLarge(limit_bytes) => {
                GitHubError::Unavailable(describe(&HttpError::BodyTooLarge { limit_bytes }))
            }
            Failure::RateLimited(why) | Failure::Held(why) | Failure::Unavailable(why) => {
                GitHubError::Unavailable(why)
            }
        }
    }
}

/// Rounded up, so "0 s" is never said of a wait still running.
fn whole_seconds(ms: i64) -> i64 {
    (ms.max(0) + 999) / 1000
}

/// Tokens a rate limit holds, each until a time on the server's clock.
#[derive(Default)]
struct RateLimitHolds {
    until_ms: BTreeMap<TokenDigest, UnixMillis>,
}

impl RateLimitHolds {
    /// Until when `digest` is held, if it is at `now_ms`; an ended hold is forgotten.
    fn until(&mut self, digest: TokenDigest, now_ms: UnixMillis) -> Option<UnixMillis> {
        let until = *self.until_ms.get(&digest)?;
        if now_ms < until {
            return Some(until);
        }
        self.until_ms.remove(&digest);
        None
    }

    /// Holds `digest` until `until_ms` (or longer, if it already was). When full, ended holds
    /// go first, then the one that would end soonest.
    fn hold(&mut self, digest: TokenDigest, until_ms: UnixMillis, now_ms: UnixMillis) {
        let until_ms = self
            .until_ms
            .get(&digest)
            .map_or(until_ms, |&held| held.max(until_ms));
        self.until_ms.insert(digest, until_ms);
        if self.until_ms.len() > RATE_LIMIT_MAX_TOKENS {
            self.until_ms.retain(|_, &mut until| now_ms < until);
        }
        while self.until_ms.len() > RATE_LIMIT_MAX_TOKENS {
            let soonest = self
                .until_ms
                .iter()
                .min_by_key(|(_, &until)| until)
                .map(|(&d, _)| d);
            match soonest {
                Some(d) => self.until_ms.remove(&d),
                None => break,
            };
        }
        assert!(self.until_ms.len() <= RATE_LIMIT_MAX_TOKENS);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.until_ms.len()
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

/// If `response` is one of GitHub's rate limits, until when (on the clock that reads `now_ms`)
/// the token must wait: see the module's header for the rules.
fn rate_limit(response: &HttpResponse, now_ms: UnixMillis) -> Option<UnixMillis> {
    let status = response.status;
    if status != http::StatusCode::FORBIDDEN && status != http::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let header = |name: &str| {
        response
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let mut until: Option<UnixMillis> = None;
    let mut later = |at: UnixMillis| until = Some(until.map_or(at, |u| u.max(at)));
    let mut limited = status == http::StatusCode::TOO_MANY_REQUESTS;
    if let Some(retry_after) = header("retry-after") {
        limited = true;
        match retry_after.parse::<i64>() {
            Ok(secs) => later(now_ms.saturating_add(secs.saturating_mul(1000))),
            // An HTTP date, or nothing we can read: GitHub sends seconds.
            Err(_) => later(now_ms.saturating_add(RATE_LIMIT_DEFAULT_WAIT_MS)),
        }
    }
    if header("x-ratelimit-remaining") == Some("0") {
        limited = true;
        match header("x-ratelimit-reset").and_then(|v| v.parse::<i64>().ok()) {
            Some(reset_secs) => later(reset_secs.saturating_mul(1000)),
            None => later(now_ms.saturating_add(RATE_LIMIT_DEFAULT_WAIT_MS)),
        }
    }
    if !limited && says_rate_limit(&response.body) {
        limited = true;
    }
    if !limited {
        return None;
    }
    let until = until.unwrap_or(now_ms.saturating_add(RATE_LIMIT_DEFAULT_WAIT_MS));
    Some(until.clamp(
        now_ms.saturating_add(RATE_LIMIT_MIN_WAIT_MS),
        now_ms.saturating_add(RATE_LIMIT_MAX_WAIT_MS),
    ))
}

/// Whether `response` is one of GitHub's rate limits.
fn is_rate_limit(response: &HttpResponse) -> bool {
    rate_limit(response, 0).is_some()
}

/// Whether GitHub's error `message` speaks of a rate limit (a secondary limit can come as a 403
/// with no header saying so).
fn says_rate_limit(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct ErrorBody {
        #[serde(default)]
        message: String,
    }
    serde_json::from_slice::<ErrorBody>(body).is_ok_and(|b| {
        let message = b.message.to_ascii_lowercase();
        message.contains("rate limit") || message.contains("abuse detection")
    })
}

/// Any answer an endpoint does not define: an outage or something unexpected. (Rate limits
/// never get here: [`GitHub::ask`] turns them into [`GitHubError::Unavailable`] first.)
fn unexpected(response: &HttpResponse) -> GitHubError {
    let status = response.status.as_u16();
    if response.status.is_server_error() {
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
    #[test]
    fn ctx_39_the_next_collaborator_page_is_read_from_githubs_link_header() {
        let link = "<https://api.github.com/repositories/42/collaborators?per_page=100&page=2>; rel=\"next\", <https://api.github.com/repositories/42/collaborators?per_page=100&page=4>; rel=\"last\"";
        assert_eq!(
            next_page(Some(link)).as_deref(),
            Some("/repositories/42/collaborators?per_page=100&page=2")
        );
        let last = "<https://api.github.com/repositories/42/collaborators?per_page=100&page=1>; rel=\"prev\", <https://api.github.com/repositories/42/collaborators?per_page=100&page=1>; rel=\"first\"";
        assert_eq!(next_page(Some(last)), None, "the last page names no next");
        assert_eq!(next_page(None), None);
        assert_eq!(next_page(Some("garbage")), None);
    }

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

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> HttpResponse {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        HttpResponse {
            status: http::StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    const NOW: UnixMillis = 1_700_000_000_000;

    #[test]
    fn rate_limits_are_403_or_429_with_github_s_marks() {
        let reset = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000100"),
        ];
        assert_eq!(
            rate_limit(&answer(403, &reset, ""), NOW),
            Some(NOW + 100_000)
        );
        assert_eq!(
            rate_limit(&answer(429, &reset, ""), NOW),
            Some(NOW + 100_000)
        );
        // Only 403 and 429 are limits: a 200 or 404 spending the last call, or a 503 asking
        // to come back, is not held.
        assert_eq!(rate_limit(&answer(200, &reset, ""), NOW), None);
        assert_eq!(rate_limit(&answer(404, &reset, ""), NOW), None);
        assert_eq!(
            rate_limit(&answer(503, &[("retry-after", "30")], ""), NOW),
            None
        );
        // Calls left and no words of a limit: a plain 403.
        let plain = [
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-reset", "1700000100"),
        ];
        assert_eq!(
            rate_limit(
                &answer(
                    403,
                    &plain,
                    r#"{"message":"Resource not accessible by integration"}"#
                ),
                NOW
            ),
            None
        );
        // A 429 or a 403 in GitHub's words, with no time: a minute.
        assert_eq!(
            rate_limit(&answer(429, &[], ""), NOW),
            Some(NOW + RATE_LIMIT_DEFAULT_WAIT_MS)
        );
        assert_eq!(
            rate_limit(
                &answer(
                    403,
                    &plain,
                    r#"{"message":"You have exceeded a secondary rate limit."}"#
                ),
                NOW
            ),
            Some(NOW + RATE_LIMIT_DEFAULT_WAIT_MS)
        );
        assert_eq!(
            rate_limit(
                &answer(
                    403,
                    &[],
                    r#"{"message":"You have triggered an abuse detection mechanism."}"#
                ),
                NOW
            ),
            Some(NOW + RATE_LIMIT_DEFAULT_WAIT_MS)
        );
        // `retry-after` in seconds; an unreadable one waits a minute; the latest time wins.
        assert_eq!(
            rate_limit(&answer(403, &[("retry-after", "30")], ""), NOW),
            Some(NOW + 30_000)
        );
        assert_eq!(
            rate_limit(
                &answer(403, &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")], ""),
                NOW
            ),
            Some(NOW + RATE_LIMIT_DEFAULT_WAIT_MS)
        );
        let both = [
            ("retry-after", "300"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000100"),
        ];
        assert_eq!(
            rate_limit(&answer(403, &both, ""), NOW),
            Some(NOW + 300_000)
        );
        // Remaining 0 with no readable reset: a minute.
        assert_eq!(
            rate_limit(&answer(403, &[("x-ratelimit-remaining", "0")], ""), NOW),
            Some(NOW + RATE_LIMIT_DEFAULT_WAIT_MS)
        );
        // Bounded both ways.
        let past = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1")];
        assert_eq!(
            rate_limit(&answer(403, &past, ""), NOW),
            Some(NOW + RATE_LIMIT_MIN_WAIT_MS)
        );
        assert_eq!(
            rate_limit(&answer(403, &[("retry-after", "99999999999999")], ""), NOW),
            Some(NOW + RATE_LIMIT_MAX_WAIT_MS)
        );
    }

    #[test]
    fn a_hold_ends_exactly_at_its_time_and_only_lengthens() {
        let mut holds = RateLimitHolds::default();
        let mona = TokenDigest::of("mona");
        holds.hold(mona, NOW + 10, NOW);
        holds.hold(mona, NOW + 5, NOW); // a shorter answer does not shorten it
        assert_eq!(holds.until(mona, NOW + 9), Some(NOW + 10));
        assert_eq!(holds.until(TokenDigest::of("hubot"), NOW), None);
        assert_eq!(holds.until(mona, NOW + 10), None);
        assert_eq!(holds.len(), 0, "an ended hold is forgotten");
    }

    #[test]
    fn holds_never_grow_past_their_bound() {
        let mut holds = RateLimitHolds::default();
        // One hold that has ended, then more live ones than fit, each ending later.
        holds.hold(TokenDigest::of("ended"), NOW + 1, NOW);
        for i in 0..RATE_LIMIT_MAX_TOKENS as i64 + 5 {
            holds.hold(TokenDigest::of(&format!("t{i}")), NOW + 1_000 + i, NOW + 2);
        }
        assert_eq!(holds.len(), RATE_LIMIT_MAX_TOKENS);
        // The ended one went first, then those that would end soonest.
        assert_eq!(holds.until(TokenDigest::of("t4"), NOW + 2), None);
        assert!(holds.until(TokenDigest::of("t5"), NOW + 2).is_some());
        let last = format!("t{}", RATE_LIMIT_MAX_TOKENS + 4);
        assert!(holds.until(TokenDigest::of(&last), NOW + 2).is_some());
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
