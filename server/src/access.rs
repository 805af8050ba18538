//! Who is calling and what they may do: one place for every transport (HTTP routes, the room and
//! text sockets, the agent socket, and MCP when it comes).
//!
//! Owns: [`Access`] — identifying the caller (a GitHub bearer token through instance admission, or
//! a browser's session cookie), the `Origin` policy (a present Origin must be this server's; a
//! browser's state-changing request must carry it), and the repository checks (read = pull,
//! write = push or admin, asked of GitHub through the admission caches). A document the caller
//! cannot read answers exactly like a missing one. Where a request names the repository
//! (`/…/{owner}/{repo}/…/{slug}`, a `/documents/<owner>/<repo>/<slug>` locator), access to it is
//! decided from those names *before* the store is read ([`Access::repository_readable`]), so a
//! caller who cannot read the repository gets the same answer, after the same GitHub call,
//! whether or not the slug exists.
//! Does not own: sign-in itself ([`crate::identity`]), what a document is
//! ([`crate::documents`]), or the wire form of a refusal (the transport renders an
//! [`ApiError`]).
//!
//! Invariants: a bearer token is used only to ask GitHub and is never stored or logged; the
//! holder of a document is never named to someone who cannot read it.

use std::sync::Arc;

use http::{header, HeaderMap, StatusCode};
use uuid::Uuid;

use crate::error::ApiError;
use crate::identity::admission::{Admission, AdmissionError};
use crate::identity::github::{GitHubError, RepoAccess};
use crate::identity::sign_ins::{LiveLogin, SignIns};
use crate::runtime::SharedClock;
use crate::store::{Creator, Document, DocumentStore, SignInStore};

/// Who is calling: a browser login or a bearer token's account.
pub struct Caller {
    pub login: String,
    pub account_id: Uuid,
    token: String,
    /// Present for a cookie session.
    pub browser: Option<Arc<LiveLogin>>,
}

impl Caller {
    /// The GitHub token the caller's checks are asked with. Never log it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The caller as the creator of a document it makes.
    pub fn as_creator(&self) -> Creator {
        Creator {
            account_id: self.account_id,
            login: self.login.clone(),
        }
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("login", &self.login)
            .field("browser", &self.browser.is_some())
            .finish_non_exhaustive()
    }
}

/// A browser admitted to a document: its login, the document, and whether it may write.
pub struct Reader {
    pub login: Arc<LiveLogin>,
    pub document: Document,
    pub can_write: bool,
}

/// What a document socket's periodic recheck found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// Still a reader; `can_write` says whether it may still (or now) write.
    Reader { can_write: bool },
    /// GitHub or storage could not answer: nothing changes until the next recheck.
    Unanswered,
    /// The document was archived (or is gone).
    Archived,
    /// GitHub no longer accepts the sign-in's token.
    SignInGone,
    /// Admission or read access is gone; the words say which.
    Revoked(String),
}

/// The bearer token of `Authorization: Bearer <token>`, if given.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// The access checks, shared by every transport.
pub struct Access {
    app_origin: String,
    admission: Arc<Admission>,
    sign_ins: Arc<SignIns>,
    accounts: Arc<dyn SignInStore>,
    documents: Arc<dyn DocumentStore>,
    clock: SharedClock,
}

impl Access {
    pub fn new(
        app_origin: String,
        admission: Arc<Admission>,
        sign_ins: Arc<SignIns>,
        accounts: Arc<dyn SignInStore>,
        documents: Arc<dyn DocumentStore>,
        clock: SharedClock,
    ) -> Self {
        Access {
            app_origin,
            admission,
            sign_ins,
            accounts,
            documents,
            clock,
        }
    }

    /// This server's origin (`APP_ORIGIN`).
    pub fn app_origin(&self) -> &str {
        &self.app_origin
    }

    /// Whether the request carries exactly this server's `Origin`.
    pub fn is_own_origin(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|o| o == self.app_origin)
    }

    /// A present `Origin` that is not this server's (none is fine for non-browser clients).
    pub fn foreign_origin<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        let origin = headers.get(header::ORIGIN)?;
        match origin.to_str() {
            Ok(o) if o == self.app_origin => None,
            Ok(o) => Some(o),
            Err(_) => Some("(unreadable)"),
        }
    }

    /// The live browser login a request's session cookie proves, if any.
    pub async fn browser(&self, headers: &HeaderMap) -> Option<Arc<LiveLogin>> {
        self.sign_ins.authenticate(headers).await
    }

    /// Identifies the caller: a bearer token (admission checked) or a browser session. A browser's
    /// state-changing request must come from the application's own origin.
    pub async fn caller(
        &self,
        headers: &HeaderMap,
        changes_state: bool,
    ) -> Result<Caller, ApiError> {
        if let Some(origin) = self.foreign_origin(headers) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "foreign-origin",
                format!(
                    "Requests from {origin} are not accepted; this server's origin is {}.",
                    self.app_origin
                ),
            ));
        }
        if let Some(token) = bearer(headers) {
            let admitted = self.admission.check(token).await?;
            let account = self
                .accounts
                .upsert_account(admitted.user.id, &admitted.user.login, self.clock.now_ms())
                .await
                .map_err(ApiError::store)?;
            return Ok(Caller {
                login: account.login,
                account_id: account.id,
                token: token.to_owned(),
                browser: None,
            });
        }
        let Some(live) = self.browser(headers).await else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "not-signed-in",
                "Sign in, or send Authorization: Bearer <GitHub token>.",
            ));
        };
        if changes_state && headers.get(header::ORIGIN).is_none() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "foreign-origin",
                "A browser request that changes something must carry this server's Origin.",
            ));
        }
        Ok(Caller {
            login: live.account.login.clone(),
            account_id: live.account.id,
            token: live.github_token().to_owned(),
            browser: Some(live),
        })
    }

    /// What `token`'s account may do on `owner/repo` (cached briefly); `None` for no access.
    pub async fn repo_access(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Option<RepoAccess>, GitHubError> {
        self.admission.repo_access_cached(token, owner, repo).await
    }

    /// Whether this server's GitHub App installation on `owner` covers `owner/repo` for
    /// `token`'s account (PERM-06), cached briefly like repository access.
    pub async fn installation_covers(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<bool, GitHubError> {
        self.admission
            .installation_covers_cached(token, owner, repo)
            .await
    }

    /// The repositories the caller reaches through this server's GitHub App, asked with its own
    /// token.
    pub async fn repositories(
        &self,
        caller: &Caller,
    ) -> Result<crate::identity::github::Repositories, ApiError> {
        self.admission
            .repositories(caller.token())
            .await
            .map_err(ApiError::github)
    }

    /// What the caller may do on a repository; `None` when it cannot even read it.
    pub async fn caller_access(
        &self,
        caller: &Caller,
        owner: &str,
        repo: &str,
    ) -> Result<Option<RepoAccess>, ApiError> {
        self.repo_access(caller.token(), owner, repo)
            .await
            .map_err(ApiError::github)
    }

    /// What the caller may do on `owner/repo`, which it must be able to read: decided from the
    /// names a request gives, before anything of the repository's documents is read, so an
    /// unreadable repository answers "not found" whatever slug was asked.
    pub async fn repository_readable(
        &self,
        caller: &Caller,
        owner: &str,
        repo: &str,
    ) -> Result<RepoAccess, ApiError> {
        match self.caller_access(caller, owner, repo).await? {
            Some(a) if a.pull || a.can_write() => Ok(a),
            _ => Err(ApiError::not_found()),
        }
    }

    /// The document, if the caller can read its repository; missing and unreadable look alike.
    pub async fn readable(
        &self,
        caller: &Caller,
        doc: Option<Document>,
    ) -> Result<(Document, RepoAccess), ApiError> {
        let doc = doc.ok_or_else(ApiError::not_found)?;
        match self
            .caller_access(caller, &doc.repo_owner, &doc.repo_name)
            .await?
        {
            Some(a) if a.pull || a.can_write() => Ok((doc, a)),
            _ => Err(ApiError::not_found()),
        }
    }

    /// A browser opening a document's socket: a live cookie session, this server's exact Origin,
    /// a document that exists and is not archived, and read access to its repository.
    pub async fn browser_reader(
        &self,
        headers: &HeaderMap,
        document: &str,
    ) -> Result<Reader, ApiError> {
        if !self.is_own_origin(headers) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "foreign-origin",
                "A document's socket must be opened from this server's own pages.",
            ));
        }
        let Some(login) = self.browser(headers).await else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "not-signed-in",
                "Sign in to open this document.",
            ));
        };
        let Ok(id) = Uuid::parse_str(document) else {
            return Err(ApiError::not_found());
        };
        let document = match self.documents.document(id).await {
            Ok(Some(doc)) if !doc.archived => doc,
            Ok(_) => return Err(ApiError::not_found()),
            Err(e) => return Err(ApiError::store(e)),
        };
        let can_write = match self
            .repo_access(
                login.github_token(),
                &document.repo_owner,
                &document.repo_name,
            )
            .await
        {
            Ok(Some(a)) if a.pull || a.can_write() => a.can_write(),
            Ok(_) => return Err(ApiError::not_found()),
            Err(GitHubError::BadCredentials) => {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "bad-credentials",
                    "GitHub no longer accepts this sign-in; sign in again.",
                ))
            }
            Err(e @ GitHubError::Unavailable(_)) => return Err(ApiError::github(e)),
        };
        Ok(Reader {
            login,
            document,
            can_write,
        })
    }
}

impl Access {
    /// A document socket's periodic recheck (on the agent links' cadence, through the same
    /// caches): the document is still there and not archived, the login still held and
    /// admitted, and its repository access now — asked with the login's current GitHub
    /// credential, which a renewal replaces while the socket stays open.
    pub async fn recheck_reader(&self, login: &LiveLogin, document: &Document) -> Recheck {
        match self.documents.document(document.id).await {
            Ok(Some(doc)) if !doc.archived => {}
            Ok(_) => return Recheck::Archived,
            Err(_) => return Recheck::Unanswered,
        }
        // The login's current credential: a renewal may have moved it on since the socket
        // opened (the token it opened with no longer works), and a login that ended is gone.
        let Some(current) = self.sign_ins.get_live(login.id, self.clock.now_ms()) else {
            return Recheck::SignInGone;
        };
        let token = current.github_token();
        match self.admission.check(token).await {
            Ok(_) | Err(AdmissionError::Unavailable) => {}
            Err(AdmissionError::BadCredentials) => return Recheck::SignInGone,
            Err(e) => return Recheck::Revoked(e.to_string()),
        }
        match self
            .repo_access(token, &document.repo_owner, &document.repo_name)
            .await
        {
            Ok(Some(a)) if a.pull || a.can_write() => Recheck::Reader {
                can_write: a.can_write(),
            },
            Ok(_) => Recheck::Revoked(format!(
                "@{} can no longer read {}/{}, so this document is closed.",
                login.account.login, document.repo_owner, document.repo_name
            )),
            Err(GitHubError::BadCredentials) => Recheck::SignInGone,
            Err(GitHubError::Unavailable(_)) => Recheck::Unanswered,
        }
    }
}

/// Refuses anyone who cannot push: a writer is push or administration access.
pub fn writer_only(access: &RepoAccess, login: &str) -> Result<(), ApiError> {
    if access.can_write() {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "no-write-access",
            format!(
                "@{login} cannot push to {}/{}; this needs push or administration access.",
                access.owner, access.repo
            ),
        ))
    }
}
