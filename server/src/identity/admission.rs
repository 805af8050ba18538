//! Instance admission: whether a GitHub token's account may use this server at all, and a short
//! cache of what GitHub said.
//!
//! Owns: the admission policy (`GITHUB_ALLOWED_USERS`, `GITHUB_ALLOWED_ORGANIZATIONS`), its
//! verdicts ([`Admitted`] or an [`AdmissionError`] with its HTTP status), and three bounded
//! caches keyed by the SHA-256 of the token: admission verdicts, repository access, and whether
//! the GitHub App's installation covers a repository (PERM-06), each kept for 30 s of [`Clock`]
//! time; and single-flight for each cache: misses of one entry while its GitHub call runs wait
//! for that call's answer instead of asking again (outages included, which are still not kept).
//! Does not own: talking to GitHub ([`crate::identity::github`]), sessions, `Origin` checks, deciding what a
//! lost admission revokes (the callers recheck and act), or repository policy beyond reporting
//! access (`push` or `admin` is a writer: [`RepoAccess::can_write`]).
//!
//! The policy, from the authentication reference ("Instance admission"): with both lists empty
//! every verified GitHub user is admitted. Otherwise a user is admitted when their current login
//! is listed (case-insensitive) or they are an active member of any listed organization, asked
//! in sorted order with the caller's own token. A listed login needs no organization lookup, so
//! it is the break-glass path while organization lookups fail; for anyone else a failed lookup
//! with no active membership found is [`AdmissionError::Unavailable`] (503), never a refusal.
//!
//! Invariants: a token is never stored, logged or put in an error — only its digest is kept.
//! Outages are never cached, so they are retried on the next check; a GitHub rate limit is an
//! outage here (the GitHub client answers it, and every call of that token until it ends, as
//! unavailable), so it is a 503 and never a refusal or "no access". Each cache holds at most
//! [`CACHE_MAX_ENTRIES`] entries. An entry is used only while `stored_at <= now < stored_at +
//! ttl`, so a wall clock that steps back cannot stretch its life. A verdict that was being fetched
//! while [`Admission::invalidate`] ran is not stored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::config::Config;
pub use crate::identity::github::TokenDigest;
use crate::identity::github::{is_github_name, GitHub, GitHubError, GitHubUser, RepoAccess};
use crate::runtime::clock::SharedClock;
use crate::store::UnixMillis;

/// "Admission results are cached by a hash of the access token for 30 seconds."
pub const ADMISSION_CACHE_TTL_MS: i64 = 30_000;
/// "Repository access is read from GitHub (push or admin = writer) and cached briefly."
pub const REPO_ACCESS_CACHE_TTL_MS: i64 = 30_000;
/// "Installation, repository-selection, and revocation changes are observed through
/// request-time checks with a cache no longer than the one-minute open-socket recheck interval."
pub const INSTALLATION_CACHE_TTL_MS: i64 = 30_000;
/// The most entries any cache keeps; beyond it the oldest go first.
pub const CACHE_MAX_ENTRIES: usize = 10_000;

/// Who may use this server: the allow-lists, lower-cased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionPolicy {
    allowed_users: BTreeSet<String>,
    allowed_organizations: BTreeSet<String>,
}

impl AdmissionPolicy {
    /// Names are trimmed and lower-cased; empty ones are dropped.
    pub fn new<U, O>(allowed_users: U, allowed_organizations: O) -> Self
    where
        U: IntoIterator,
        U::Item: AsRef<str>,
        O: IntoIterator,
        O::Item: AsRef<str>,
    {
        fn names<I: IntoIterator<Item = S>, S: AsRef<str>>(list: I) -> BTreeSet<String> {
            list.into_iter()
                .map(|name| name.as_ref().trim().to_lowercase())
                .filter(|name| !name.is_empty())
                .collect()
        }
        Self {
            allowed_users: names(allowed_users),
            allowed_organizations: names(allowed_organizations),
        }
    }

    /// The policy `GITHUB_ALLOWED_USERS` and `GITHUB_ALLOWED_ORGANIZATIONS` describe.
    pub fn from_config(config: &Config) -> Self {
        Self::new(
            &config.github_allowed_users,
            &config.github_allowed_organizations,
        )
    }

    /// Both lists empty: every verified GitHub user is admitted.
    pub fn admits_everyone(&self) -> bool {
        self.allowed_users.is_empty() && self.allowed_organizations.is_empty()
    }

    /// Whether `login` is listed in `GITHUB_ALLOWED_USERS` (case-insensitive).
    pub fn lists_user(&self, login: &str) -> bool {
        self.allowed_users.contains(&login.to_lowercase())
    }

    /// The allowed users, lower-cased, in sorted order.
    pub fn allowed_users(&self) -> &BTreeSet<String> {
        &self.allowed_users
    }

    /// The allowed organizations, lower-cased, in the order they are asked.
    pub fn allowed_organizations(&self) -> &BTreeSet<String> {
        &self.allowed_organizations
    }
}

/// An account instance admission let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub user: GitHubUser,
}

/// Why a token was not admitted. Display is written for the person holding the token and never
/// holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// GitHub did not accept the token: HTTP 401.
    #[error("GitHub did not accept this token (it may have expired or been revoked); sign in to GitHub again")]
    BadCredentials,
    /// A verified account this server's admission lists leave out: HTTP 403.
    #[error("The GitHub account @{login} is not admitted to this Chopin server; ask its operator for access")]
    Refused { login: String },
    /// GitHub could not be asked, so nothing was decided: HTTP 503, retry later.
    #[error(
        "GitHub is unavailable, so this account cannot be checked right now; try again shortly"
    )]
    Unavailable,
}

impl AdmissionError {
    /// 401, 403 or 503 (AC-12).
    pub fn http_status(&self) -> http::StatusCode {
        match self {
            AdmissionError::BadCredentials => http::StatusCode::UNAUTHORIZED,
            AdmissionError::Refused { .. } => http::StatusCode::FORBIDDEN,
            AdmissionError::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Instance admission with its caches. Share it behind an `Arc`.
pub struct Admission {
    policy: AdmissionPolicy,
    github: GitHub,
    clock: SharedClock,
    caches: Mutex<Caches>,
    /// GitHub calls in flight, so that concurrent misses of one cache entry share one call.
    flights: Flights,
}

/// The calls in flight of each cache, keyed by the cache generation they began under and the
/// cache key (a lookup after [`Admission::invalidate`] never joins a call from before it).
#[derive(Default)]
struct Flights {
    admission: InFlight<(u64, TokenDigest), Result<Admitted, AdmissionError>>,
    repos: InFlight<(u64, RepoKey), Result<Option<RepoAccess>, GitHubError>>,
    installations: InFlight<(u64, RepoKey), Result<bool, GitHubError>>,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("policy", &self.policy)
            .field("github", &self.github)
            .finish_non_exhaustive()
    }
}

type RepoKey = (TokenDigest, String, String);

struct Caches {
    /// Definitive verdicts only: admitted, refused, bad credentials.
    admission: TtlCache<TokenDigest, Result<Admitted, AdmissionError>>,
    /// Definitive answers only: access, or none.
    repos: TtlCache<RepoKey, Option<RepoAccess>>,
    /// Definitive answers only: whether the App's installation covers the repository.
    installations: TtlCache<RepoKey, bool>,
    /// Bumped by every invalidation; a lookup that began under an older value does not store
    /// its answer.
    generation: u64,
}

impl Admission {
    pub fn new(policy: AdmissionPolicy, github: GitHub, clock: SharedClock) -> Self {
        Self {
            policy,
            github,
            clock,
            caches: Mutex::new(Caches {
                admission: TtlCache::new(ADMISSION_CACHE_TTL_MS, CACHE_MAX_ENTRIES),
                repos: TtlCache::new(REPO_ACCESS_CACHE_TTL_MS, CACHE_MAX_ENTRIES),
                installations: TtlCache::new(INSTALLATION_CACHE_TTL_MS, CACHE_MAX_ENTRIES),
                generation: 0,
            }),
            flights: Flights::default(),
        }
    }

    pub fn policy(&self) -> &AdmissionPolicy {
        &self.policy
    }

    pub fn github(&self) -> &GitHub {
        &self.github
    }

    /// Whether `token`'s account is admitted, from the cache when a verdict younger than
    /// [`ADMISSION_CACHE_TTL_MS`] is there, otherwise from GitHub.
    pub async fn check(&self, token: &str) -> Result<Admitted, AdmissionError> {
        let digest = TokenDigest::of(token);
        let generation = {
            let mut caches = self.lock();
            if let Some(verdict) = caches.admission.get(&digest, self.clock.now_ms()) {
                return verdict;
            }
            caches.generation
        };
        let (policy, github, owned) = (self.policy.clone(), self.github.clone(), token.to_owned());
        let verdict = self
            .flights
            .admission
            .join((generation, digest), move || {
                decide(policy, github, owned).boxed()
            })
            .await;
        if verdict != Err(AdmissionError::Unavailable) {
            let mut caches = self.lock();
            if caches.generation == generation {
                let now = self.clock.now_ms();
                caches.admission.insert(digest, verdict.clone(), now);
            }
        }
        verdict
    }

    /// What `token`'s account may do on `owner/repo`, from the cache when an answer younger
    /// than [`REPO_ACCESS_CACHE_TTL_MS`] is there, otherwise from GitHub. `None` is no access
    /// (or no such repository). Owner and repository match case-insensitively.
    pub async fn repo_access_cached(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Option<RepoAccess>, GitHubError> {
        if !is_github_name(owner) || !is_github_name(repo) {
            // No repository has such a name; nothing to ask or keep.
            return Ok(None);
        }
        let digest = TokenDigest::of(token);
        let key = (digest, owner.to_lowercase(), repo.to_lowercase());
        let generation = {
            let mut caches = self.lock();
            if let Some(access) = caches.repos.get(&key, self.clock.now_ms()) {
                return Ok(access);
            }
            caches.generation
        };
        let (github, owned) = (self.github.clone(), token.to_owned());
        let (o, r) = (owner.to_owned(), repo.to_owned());
        let answer = self
            .flights
            .repos
            .join((generation, key.clone()), move || {
                async move { github.repo_access(&owned, &o, &r).await }.boxed()
            })
            .await;
        let mut caches = self.lock();
        match &answer {
            Ok(access) if caches.generation == generation => {
                let now = self.clock.now_ms();
                caches.repos.insert(key, access.clone(), now);
            }
            Ok(_) | Err(GitHubError::Unavailable(_)) => {}
            // The token is dead: no admission verdict of it stays.
            Err(GitHubError::BadCredentials) => caches.admission.remove(&digest),
        }
        answer
    }

    /// The repositories `token`'s account reaches through this server's GitHub App (not
    /// cached: a start page asks once per visit).
    pub async fn repositories(
        &self,
        token: &str,
    ) -> Result<crate::identity::github::Repositories, GitHubError> {
        self.github.repositories(token).await
    }

    /// Whether the GitHub App's installation on `owner` covers `owner/repo` for `token`'s
    /// account (PERM-06), from the cache when an answer younger than
    /// [`INSTALLATION_CACHE_TTL_MS`] is there, otherwise from GitHub. Outages are not cached.
    pub async fn installation_covers_cached(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
    ) -> Result<bool, GitHubError> {
        if !is_github_name(owner) || !is_github_name(repo) {
            return Ok(false);
        }
        let digest = TokenDigest::of(token);
        let key = (digest, owner.to_lowercase(), repo.to_lowercase());
        let generation = {
            let mut caches = self.lock();
            if let Some(covered) = caches.installations.get(&key, self.clock.now_ms()) {
                return Ok(covered);
            }
            caches.generation
        };
        let (github, owned) = (self.github.clone(), token.to_owned());
        let (o, r) = (owner.to_owned(), repo.to_owned());
        let answer = self
            .flights
            .installations
            .join((generation, key.clone()), move || {
                async move { github.installation_covers(&owned, &o, &r).await }.boxed()
            })
            .await;
        let mut caches = self.lock();
        match &answer {
            Ok(covered) if caches.generation == generation => {
                let now = self.clock.now_ms();
                caches.installations.insert(key, *covered, now);
            }
            Ok(_) | Err(GitHubError::Unavailable(_)) => {}
            Err(GitHubError::BadCredentials) => caches.admission.remove(&digest),
        }
        answer
    }

    /// Forgets everything cached for `token` (as at sign-out); the next check asks GitHub.
    pub fn invalidate(&self, token: &str) {
        let digest = TokenDigest::of(token);
        let mut caches = self.lock();
        caches.generation += 1;
        caches.admission.remove(&digest);
        caches.repos.remove_where(|(d, _, _)| *d == digest);
        caches.installations.remove_where(|(d, _, _)| *d == digest);
    }

    fn lock(&self) -> MutexGuard<'_, Caches> {
        // The caches hold no invariant a panic elsewhere could break halfway.
        self.caches.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Asks GitHub about `token` and applies `policy` (owned, so one call can be shared).
async fn decide(
    policy: AdmissionPolicy,
    github: GitHub,
    token: String,
) -> Result<Admitted, AdmissionError> {
    let user = match github.user(&token).await {
        Ok(user) => user,
        Err(GitHubError::BadCredentials) => return Err(AdmissionError::BadCredentials),
        Err(GitHubError::Unavailable(reason)) => {
            tracing::warn!(%reason, "instance admission: GitHub user lookup failed");
            return Err(AdmissionError::Unavailable);
        }
    };
    if policy.admits_everyone() || policy.lists_user(&user.login) {
        return Ok(Admitted { user });
    }
    let mut lookup_failed = false;
    for org in &policy.allowed_organizations {
        match github.org_membership_active(&token, org).await {
            Ok(true) => return Ok(Admitted { user }),
            Ok(false) => {}
            Err(GitHubError::BadCredentials) => return Err(AdmissionError::BadCredentials),
            Err(GitHubError::Unavailable(reason)) => {
                tracing::warn!(
                    org = %org,
                    login = %user.login,
                    %reason,
                    "instance admission: organization lookup failed"
                );
                lookup_failed = true;
            }
        }
    }
    if lookup_failed {
        Err(AdmissionError::Unavailable)
    } else {
        Err(AdmissionError::Refused { login: user.login })
    }
}

/// Single-flight: the first caller of a key starts the call, and every caller of the same key
/// while it runs waits for that one answer. A key is forgotten once its call has answered, or
/// once nobody waits for it any more (the call is then dropped, as a lone caller's would be).
struct InFlight<K, V: Clone> {
    calls: Mutex<BTreeMap<K, Shared<BoxFuture<'static, V>>>>,
}

impl<K, V: Clone> Default for InFlight<K, V> {
    fn default() -> Self {
        InFlight {
            calls: Mutex::default(),
        }
    }
}

impl<K: Ord + Clone, V: Clone + Send + Sync + 'static> InFlight<K, V> {
    /// The answer of `key`'s call in flight, or of `call()`, started now if none is.
    async fn join(&self, key: K, call: impl FnOnce() -> BoxFuture<'static, V>) -> V {
        let flight = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| call().shared())
            .clone();
        let mut waiter = Waiter {
            flights: self,
            key,
            flight,
        };
        (&mut waiter.flight).await
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<K, Shared<BoxFuture<'static, V>>>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One caller of a call in flight; forgets the call when it was the last one waiting or the call
/// has answered.
struct Waiter<'a, K: Ord + Clone, V: Clone + Send + Sync + 'static> {
    flights: &'a InFlight<K, V>,
    key: K,
    flight: Shared<BoxFuture<'static, V>>,
}

impl<K: Ord + Clone, V: Clone + Send + Sync + 'static> Drop for Waiter<'_, K, V> {
    fn drop(&mut self) {
        let mut calls = self.flights.lock();
        // Read through the map's handle: this one no longer knows its call once it answered.
        let forget = calls.get(&self.key).is_some_and(|f| {
            // Answered; or still running for nobody but the map and this caller.
            f.peek().is_some() || (f.ptr_eq(&self.flight) && f.strong_count() == Some(2))
        });
        if forget {
            calls.remove(&self.key);
        }
    }
}

/// A map whose entries live `ttl_ms` of clock time, holding at most `max_entries`: inserting
/// into a full map drops expired entries first, then the oldest.
struct TtlCache<K, V> {
    ttl_ms: i64,
    max_entries: usize,
    entries: BTreeMap<K, Slot<V>>,
    /// Insertion number → key, oldest first. With a clock that does not step back this is also
    /// expiry order.
    order: BTreeMap<u64, K>,
    next_seq: u64,
}

struct Slot<V> {
    value: V,
    stored_at_ms: UnixMillis,
    seq: u64,
}

impl<K: Ord + Clone, V: Clone> TtlCache<K, V> {
    fn new(ttl_ms: i64, max_entries: usize) -> Self {
        assert!(ttl_ms > 0 && max_entries > 0);
        Self {
            ttl_ms,
            max_entries,
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    fn is_fresh(&self, stored_at_ms: UnixMillis, now_ms: UnixMillis) -> bool {
        stored_at_ms <= now_ms && now_ms - stored_at_ms < self.ttl_ms
    }

    fn get(&mut self, key: &K, now_ms: UnixMillis) -> Option<V> {
        let slot = self.entries.get(key)?;
        if self.is_fresh(slot.stored_at_ms, now_ms) {
            return Some(slot.value.clone());
        }
        self.remove(key);
        None
    }

    fn insert(&mut self, key: K, value: V, now_ms: UnixMillis) {
        self.remove(&key);
        while let Some((&seq, oldest)) = self.order.first_key_value() {
            let expired = self
                .entries
                .get(oldest)
                .is_none_or(|slot| !self.is_fresh(slot.stored_at_ms, now_ms));
            if !expired && self.entries.len() < self.max_entries {
                break;
            }
            if let Some(oldest) = self.order.remove(&seq) {
                self.entries.remove(&oldest);
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, key.clone());
        self.entries.insert(
            key,
            Slot {
                value,
                stored_at_ms: now_ms,
                seq,
            },
        );
        assert!(self.entries.len() <= self.max_entries);
        assert_eq!(self.entries.len(), self.order.len());
    }

    fn remove(&mut self, key: &K) {
        if let Some(slot) = self.entries.remove(key) {
            self.order.remove(&slot.seq);
        }
    }

    fn remove_where(&mut self, mut doomed: impl FnMut(&K) -> bool) {
        self.entries.retain(|key, _| !doomed(key));
        let entries = &self.entries;
        self.order.retain(|_, key| entries.contains_key(key));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_lists_are_case_insensitive() {
        let policy = AdmissionPolicy::new([" Mona ", ""], ["Acme"]);
        assert!(!policy.admits_everyone());
        assert!(policy.lists_user("MONA"));
        assert!(!policy.lists_user("hubot"));
        assert_eq!(
            policy.allowed_organizations().iter().collect::<Vec<_>>(),
            ["acme"]
        );
        assert!(AdmissionPolicy::new([""; 0], [" "]).admits_everyone());
    }

    #[test]
    fn statuses_follow_ac_12() {
        assert_eq!(AdmissionError::BadCredentials.http_status().as_u16(), 401);
        let refused = AdmissionError::Refused {
            login: "mona".into(),
        };
        assert_eq!(refused.http_status().as_u16(), 403);
        assert!(refused.to_string().contains("@mona"));
        assert_eq!(AdmissionError::Unavailable.http_status().as_u16(), 503);
    }

    #[test]
    fn calls_in_flight_are_shared_and_forgotten_once_answered_or_abandoned() {
        let flights: InFlight<u8, u8> = InFlight::default();
        let started = std::sync::atomic::AtomicUsize::new(0);
        let call = |rx: tokio::sync::oneshot::Receiver<()>, answer: u8| {
            started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { rx.await.map_or(0, |()| answer) }.boxed()
        };
        // Two callers of one key: one call, both answered, then forgotten.
        let (release, rx) = tokio::sync::oneshot::channel();
        let mut first = Box::pin(flights.join(1, || call(rx, 7)));
        assert!((&mut first).now_or_never().is_none());
        let (_never, rx) = tokio::sync::oneshot::channel();
        let mut second = Box::pin(flights.join(1, || call(rx, 9)));
        assert!((&mut second).now_or_never().is_none());
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        release.send(()).unwrap();
        assert_eq!(first.now_or_never(), Some(7));
        assert_eq!(second.now_or_never(), Some(7));
        assert!(flights.lock().is_empty());
        // A call whose every caller gave up is forgotten; the next caller starts anew.
        let (_never, rx) = tokio::sync::oneshot::channel();
        let mut abandoned = Box::pin(flights.join(2, || call(rx, 1)));
        assert!((&mut abandoned).now_or_never().is_none());
        drop(abandoned);
        assert!(flights.lock().is_empty());
    }

    #[test]
    fn the_digest_is_not_the_token() {
        let digest = TokenDigest::of("ghp_secret");
        assert_eq!(digest, TokenDigest::of("ghp_secret"));
        assert_ne!(digest, TokenDigest::of("ghp_secreT"));
        assert!(!format!("{digest:?}").contains("ghp_secret"));
    }

    #[test]
    fn entries_live_exactly_the_ttl() {
        let mut cache = TtlCache::new(30_000, 10);
        cache.insert("a", 1, 1_000);
        assert_eq!(cache.get(&"a", 1_000), Some(1));
        assert_eq!(cache.get(&"a", 30_999), Some(1));
        assert_eq!(cache.get(&"a", 31_000), None);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_clock_that_steps_back_does_not_stretch_an_entry() {
        let mut cache = TtlCache::new(30_000, 10);
        cache.insert("a", 1, 100_000);
        assert_eq!(cache.get(&"a", 99_999), None);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_oldest() {
        let mut cache = TtlCache::new(100, 3);
        cache.insert(1, (), 0);
        cache.insert(2, (), 50);
        cache.insert(3, (), 60);
        // 1 has expired at 120: it goes, 2 and 3 stay.
        cache.insert(4, (), 120);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&1, 120), None);
        assert_eq!(cache.get(&2, 120), Some(()));
        // Nothing expired at 130: the oldest (2) goes.
        cache.insert(5, (), 130);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&2, 130), None);
        assert_eq!(cache.get(&3, 130), Some(()));
        assert_eq!(cache.get(&5, 130), Some(()));
        // Re-inserting a key makes it the youngest.
        cache.insert(3, (), 140);
        cache.insert(6, (), 140);
        assert_eq!(cache.get(&4, 140), None);
        assert_eq!(cache.get(&3, 140), Some(()));
    }

    #[test]
    fn a_cache_never_grows_past_its_bound() {
        let mut cache = TtlCache::new(1_000_000, CACHE_MAX_ENTRIES);
        for i in 0..(CACHE_MAX_ENTRIES as u64 + 500) {
            cache.insert(i, (), 0);
        }
        assert_eq!(cache.len(), CACHE_MAX_ENTRIES);
        assert_eq!(cache.get(&499, 0), None);
        assert_eq!(cache.get(&500, 0), Some(()));
    }

    #[test]
    fn remove_where_keeps_the_order_index_in_step() {
        let mut cache = TtlCache::new(1_000, 10);
        for i in 0..6 {
            cache.insert(i, (), 0);
        }
        cache.remove_where(|k| k % 2 == 0);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.order.len(), 3);
        assert_eq!(cache.get(&1, 0), Some(()));
        assert_eq!(cache.get(&2, 0), None);
    }
}
