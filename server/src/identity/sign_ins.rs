//! Browser sign-ins ("browser logins"): the process's table of live logins, each with the GitHub
//! credential it signed in with, the session cookie that proves one, and ending a login.
//!
//! Owns: [`SignIns`] — creating a login (store first, then memory, its credential sealed at rest
//! with [`CredentialKey`]), recognising a request's `chopin_session` cookie, restoring a login this
//! process has not seen since it started from its sealed credential, the live-login lookups the
//! Planner's checks make, and the two halves of ending a login ([`SignIns::forget_ended`] and
//! [`SignIns::record_end`]).
//! Does not own: the sign-in routes and cookies on the wire (the transport layer), the OAuth
//! web flow ([`super::web_flow`]) or device flow ([`super::device_flow`]), what ending a login
//! does to an attached Planner (the planner table's `end_login` runs the whole sequence),
//! or admission policy ([`Admission`]).
//!
//! The cookie is `chopin_session=<login id>.<verifier>`, a random 256-bit verifier of which the
//! store keeps only the SHA-256. A login's GitHub credential is held in this process only: a
//! login the process has not seen since it started (signed in or restored) has no credential
//! here and is not live for a Planner claim (AO-03, "no live browser sign-in since the server
//! started").
//!
//! A sign-out is never undone. Ending a login by sign-out leaves a *tombstone* in this process
//! ([`PendingSignOut`]) until the store has recorded it: while it stands, the login's cookie
//! restores nothing, even though the stored login still looks live. [`SignIns::record_end`]
//! reports a write that failed ([`SignOutNotRecorded`], which the sign-out route answers `503`),
//! the same cookie may ask again ([`SignIns::pending_sign_out`], [`SignIns::retry_sign_out`]),
//! and the housekeeping round retries every tombstone ([`SignIns::retry_pending_sign_outs`]).
//! A tombstone goes only once the store says signed out, or at the login's expiry (after which
//! the stored login restores nothing either). A restore that read the store before a sign-out
//! or a tombstone's removal landed starts again rather than publish what it read (the table's
//! `ends` counter).
//!
//! Invariants: a token is never logged, stored in clear, or shown in `Debug`; ending a login
//! forgets it in memory before anything else happens, so nothing new binds to it; a signed-out
//! login's cookie never proves a login again, whatever the store answered.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use cookie::Cookie;
use http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::admission::Admission;
use super::crypto::{CredentialAad, CredentialKey, StoredCredential};
use super::tokens::{RefreshError, TokenRefresher, UserToken};
use crate::config::Secret;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{Account, BrowserLogin, SignInStore, StoreError, UnixMillis};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "chopin_session";

/// How long before its access token expires a login's credential is renewed ("Chopin refreshes
/// five minutes early").
pub const TOKEN_REFRESH_MARGIN_MS: i64 = 300_000;
/// How long a renewal that GitHub could not answer waits before it is tried again.
pub const TOKEN_REFRESH_RETRY_MS: i64 = 60_000;

/// A login's GitHub credential as this process holds it: the access token, and for a GitHub App
/// that expires user tokens, when it expires and the refresh token that renews it.
struct Credential {
    token: Secret,
    access_expires_at_ms: Option<UnixMillis>,
    refresh_token: Option<Secret>,
    refresh_expires_at_ms: Option<UnixMillis>,
}

impl Credential {
    /// What GitHub granted at `now_ms`, with its lifetimes made times.
    fn granted(token: UserToken, now_ms: UnixMillis) -> Self {
        let at = |secs: Option<u64>| {
            secs.map(|s| now_ms.saturating_add(i64::try_from(s).unwrap_or(i64::MAX / 2000) * 1000))
        };
        Credential {
            access_expires_at_ms: at(token.expires_in_secs),
            refresh_expires_at_ms: at(token.refresh_expires_in_secs),
            token: token.access_token,
            refresh_token: token.refresh_token,
        }
    }

    fn opened(stored: StoredCredential) -> Self {
        Credential {
            token: Secret::new(stored.access_token),
            access_expires_at_ms: stored.access_expires_at_ms,
            refresh_token: stored.refresh_token.map(Secret::new),
            refresh_expires_at_ms: stored.refresh_expires_at_ms,
        }
    }

    fn to_stored(&self) -> StoredCredential {
        StoredCredential {
            access_token: self.token.expose().to_owned(),
            refresh_token: self.refresh_token.as_ref().map(|t| t.expose().to_owned()),
            access_expires_at_ms: self.access_expires_at_ms,
            refresh_expires_at_ms: self.refresh_expires_at_ms,
        }
    }

    /// When the access token is due for renewal, if it expires and can be renewed.
    fn renew_at_ms(&self) -> Option<UnixMillis> {
        self.refresh_token.as_ref()?;
        Some(self.access_expires_at_ms? - TOKEN_REFRESH_MARGIN_MS)
    }
}

/// A browser login this process holds, with the GitHub credential it signed in with (or the one
/// a renewal gave it: each renewal is a new `LiveLogin` at the next credential revision).
pub struct LiveLogin {
    pub id: Uuid,
    pub account: Account,
    pub created_at_ms: UnixMillis,
    pub expires_at_ms: UnixMillis,
    verifier_hash: String,
    credential: Credential,
    /// The revision the sealed credential is stored at.
    pub credential_revision: i64,
    /// For a paired machine's delegated login, the machine: no browser holds it, no cookie
    /// proves it and nothing of it is stored (AC-21).
    pub machine: Option<Uuid>,
}

impl LiveLogin {
    /// This sign-in as a Planner owner: its account, login and browser login.
    pub fn as_holder(&self) -> crate::store::Holder {
        crate::store::Holder {
            account_id: self.account.id,
            login: self.account.login.clone(),
            browser_login_id: self.id,
        }
    }

    /// The GitHub user access token. Never log it or send it to a harness.
    pub fn github_token(&self) -> &str {
        self.credential.token.expose()
    }

    /// When the GitHub access token expires, if it does.
    pub fn access_expires_at_ms(&self) -> Option<UnixMillis> {
        self.credential.access_expires_at_ms
    }

    /// When the credential is due for renewal ([`TOKEN_REFRESH_MARGIN_MS`] before its access
    /// token expires), if it expires and has a refresh token.
    pub fn renew_at_ms(&self) -> Option<UnixMillis> {
        self.credential.renew_at_ms()
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

/// Why a login ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginEnd {
    SignedOut,
    Expired,
    /// GitHub refused to renew its credential (or the renewed one could not be saved): it ends
    /// as a sign-out does, recorded and its credential deleted.
    CredentialRevoked,
    /// A paired machine's delegated login, ended because its owner revoked the machine or
    /// GitHub refused the machine's authorization (AC-23). Nothing is stored to record.
    MachineRevoked,
}

impl LoginEnd {
    /// Whether the end is written to the store (a sign-out's record, with a tombstone until
    /// then); an expiry needs no write.
    pub fn is_recorded(self) -> bool {
        matches!(self, LoginEnd::SignedOut | LoginEnd::CredentialRevoked)
    }

    /// The word events and logs use.
    pub fn word(self) -> &'static str {
        match self {
            LoginEnd::SignedOut => "signed-out",
            LoginEnd::Expired => "expired",
            LoginEnd::CredentialRevoked => "credential-revoked",
            LoginEnd::MachineRevoked => "machine-revoked",
        }
    }
}

/// Why [`SignIns::renew`] gave no new credential.
#[derive(Debug, thiserror::Error)]
pub enum RenewFailure {
    /// The credential does not expire or has no refresh token.
    #[error("the credential cannot be renewed")]
    NotRenewable,
    /// The login ended, or another renewal moved its credential on, meanwhile: nothing to do.
    #[error("the login ended or was renewed meanwhile")]
    Superseded,
    /// GitHub refused the refresh token: the login must end.
    #[error("{0}")]
    Rejected(RefreshError),
    /// GitHub could not be asked: tried again after [`TOKEN_REFRESH_RETRY_MS`].
    #[error("{0}")]
    Unavailable(RefreshError),
    /// GitHub renewed it, but the store could not save it: the refresh token GitHub consumed is
    /// lost, so the login must end rather than keep one that no longer works.
    #[error("the renewed credential could not be saved: {0}")]
    NotSaved(StoreError),
}

/// What a sealed credential is bound to besides the login: this deployment.
#[derive(Debug, Clone)]
pub struct SignInSettings {
    /// `APP_ORIGIN`.
    pub app_origin: String,
    /// `GITHUB_APP_CLIENT_ID` (empty when unset).
    pub client_id: String,
    /// `SESSION_MAX_AGE_MS`: a login's absolute lifetime.
    pub session_max_age_ms: u64,
    /// Under `PROCESSES=many`, how old this process's word on a login may be before a cookie
    /// proving it reads the stored login again: a sign-out made through another process holds
    /// here within this bound. `None`: one process, which made every sign-out itself.
    pub recheck_ms: Option<i64>,
}

/// [`SignInSettings::recheck_ms`] under `PROCESSES=many`.
pub const SIGN_IN_RECHECK_MS: i64 = 2_000;

/// The most logins whose last check [`SignIns`] remembers; past it, it forgets them all (each is
/// then read again at its next use).
const CHECKS_REMEMBERED: usize = 65_536;

/// A sign-out the store has not recorded yet: the login's cookie must not restore it meanwhile.
#[derive(Debug, Clone)]
pub struct PendingSignOut {
    pub id: Uuid,
    /// The account's login (for the log).
    pub login: String,
    verifier_hash: String,
    expires_at_ms: UnixMillis,
}

/// The store did not record a sign-out. The login is ended in this process all the same (its
/// cookie proves nothing here); the write is retried.
#[derive(Debug, thiserror::Error)]
#[error("the sign-out of login {login_id} could not be recorded: {error}")]
pub struct SignOutNotRecorded {
    pub login_id: Uuid,
    pub error: StoreError,
}

#[derive(Default)]
struct Table {
    live: BTreeMap<Uuid, Arc<LiveLogin>>,
    /// Logins whose renewal GitHub could not answer: not tried again before this time.
    renew_not_before: BTreeMap<Uuid, UnixMillis>,
    /// Sign-outs not yet recorded in the store, by login id.
    pending: BTreeMap<Uuid, PendingSignOut>,
    /// Bumped whenever a login ends or a tombstone goes: a restore that began under an older
    /// value looks again before it publishes.
    ends: u64,
}

/// How many times a restore starts again because logins ended while it read the store.
const RESTORE_ATTEMPTS: usize = 3;

/// How many of an account's newest live logins [`SignIns::live_login_of_account`] tries.
const LOGINS_TRIED: u32 = 3;

/// The live logins of this process, by login id.
pub struct SignIns {
    table: Mutex<Table>,
    /// Every login that ends (sign-out, expiry), so sockets opened with it can close.
    ended: tokio::sync::broadcast::Sender<Uuid>,
    /// Counts logins becoming live in this process (a sign-in, a restore from a cookie), for a
    /// Planner resume waiting on its owner's sign-in.
    arrived: tokio::sync::watch::Sender<u64>,
    store: Arc<dyn SignInStore>,
    clock: SharedClock,
    entropy: SharedEntropy,
    key: Arc<CredentialKey>,
    admission: Arc<Admission>,
    settings: SignInSettings,
    /// Renews expiring GitHub user tokens; `None` where nothing renews them (tests).
    refresher: Option<Arc<TokenRefresher>>,
    /// When each login was last read from the store ([`SignInSettings::recheck_ms`]).
    checked: Mutex<BTreeMap<Uuid, UnixMillis>>,
}

impl SignIns {
    pub fn new(
        store: Arc<dyn SignInStore>,
        clock: SharedClock,
        entropy: SharedEntropy,
        key: Arc<CredentialKey>,
        admission: Arc<Admission>,
        settings: SignInSettings,
    ) -> Self {
        SignIns {
            table: Mutex::default(),
            ended: tokio::sync::broadcast::channel(256).0,
            arrived: tokio::sync::watch::channel(0).0,
            store,
            clock,
            entropy,
            key,
            admission,
            settings,
            refresher: None,
            checked: Mutex::default(),
        }
    }

    /// The same table, renewing expiring GitHub user tokens with `refresher`.
    pub fn with_refresher(mut self, refresher: Arc<TokenRefresher>) -> Self {
        self.refresher = Some(refresher);
        self
    }

    /// Watches one login, for a socket opened with it: [`LoginWatch::ended`] resolves when it
    /// ends (sign-out or expiry).
    pub fn watch(self: &Arc<Self>, login: Uuid) -> LoginWatch {
        LoginWatch {
            rx: self.ended.subscribe(),
            login,
            sign_ins: self.clone(),
        }
    }

    /// Hears every login that becomes live in this process from now on (look again with
    /// [`SignIns::live_login_of`] when it changes).
    pub fn arrivals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.arrived.subscribe()
    }

    /// The time now on the server's clock (for callers comparing against expiries).
    pub fn now_ms(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new login for `account` (store first, then memory) with the user token GitHub
    /// granted, and returns it with the cookie value that proves it.
    pub async fn create(
        &self,
        account: Account,
        token: UserToken,
    ) -> Result<(Arc<LiveLogin>, String), StoreError> {
        let now = self.clock.now_ms();
        let id = self.entropy.uuid();
        let verifier = self.entropy.token_hex(32);
        let verifier_hash = sha256_hex(&verifier);
        let expires_at_ms = now.saturating_add(self.settings.session_max_age_ms as i64);
        self.store
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
        let credential = Credential::granted(token, now);
        let aad = self.aad(id, account.id, now, expires_at_ms, &verifier_hash, 1);
        let sealed = self
            .key
            .seal_credential(&*self.entropy, &aad, &credential.to_stored());
        match self.store.set_login_credential(id, 0, &sealed).await? {
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
            credential,
            credential_revision: 1,
            machine: None,
        });
        self.lock().live.insert(id, live.clone());
        self.checked_at(id, now);
        self.arrived.send_modify(|n| *n += 1);
        Ok((live, format!("{id}.{verifier}")))
    }

    /// The live login a request's session cookie proves, if any. A login this process does not
    /// hold (it signed in before a restart) is restored from storage: its sealed credential is
    /// opened and GitHub must still know the token as the login's own account, admitted here.
    /// A signed-out login whose sign-out the store has not recorded yet proves nothing.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Option<Arc<LiveLogin>> {
        let now_ms = self.clock.now_ms();
        let value = cookie_value(headers, SESSION_COOKIE)?;
        let (id, verifier) = value.split_once('.')?;
        let id = Uuid::parse_str(id).ok()?;
        // Compare digests, not the secret, so timing says nothing about the verifier.
        let hash = sha256_hex(verifier);
        if let Some(live) = self.get_live(id, now_ms) {
            if hash != live.verifier_hash {
                return None;
            }
            return self.still_live(live, now_ms).await;
        }
        for _ in 0..RESTORE_ATTEMPTS {
            let ends = {
                let table = self.lock();
                if table.pending.contains_key(&id) {
                    return None;
                }
                table.ends
            };
            let live = self.restore(id, &hash, now_ms).await?;
            let mut table = self.lock();
            if table.pending.contains_key(&id) {
                return None;
            }
            if table.ends != ends {
                // A login ended (or a sign-out was recorded) while the store was read: what it
                // said may be older than the sign-out, so read it again.
                continue;
            }
            // Another request may have restored it meanwhile: keep the first.
            let live = table.live.entry(id).or_insert(live).clone();
            drop(table);
            self.checked_at(id, now_ms);
            self.arrived.send_modify(|n| *n += 1);
            tracing::info!(login = %live.account.login, login_id = %id, "browser login restored from storage");
            return Some(live);
        }
        None
    }

    /// `live`, unless (`PROCESSES=many`) the store, read at most every
    /// [`SignInSettings::recheck_ms`], says it ended through another process: then it is
    /// forgotten here as well. A store that does not answer leaves it as it was.
    async fn still_live(&self, live: Arc<LiveLogin>, now_ms: UnixMillis) -> Option<Arc<LiveLogin>> {
        let Some(recheck_ms) = self.settings.recheck_ms else {
            return Some(live);
        };
        let last = self
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&live.id)
            .copied();
        if last.is_some_and(|at| now_ms - at < recheck_ms) {
            return Some(live);
        }
        match self.store.browser_login(live.id).await {
            Ok(Some(login)) if login.is_live(now_ms) => {
                self.checked_at(live.id, now_ms);
                Some(live)
            }
            Ok(_) => {
                // Recorded already, by the process that ended it: nothing to write here.
                self.forget_ended(&live, LoginEnd::Expired);
                tracing::info!(login = %live.account.login, login_id = %live.id, "a browser login ended through another process is forgotten here too");
                None
            }
            Err(e) => {
                tracing::warn!(login_id = %live.id, error = %e, "could not read a browser login again; it stays live here until the next check");
                Some(live)
            }
        }
    }

    fn checked_at(&self, id: Uuid, now_ms: UnixMillis) {
        if self.settings.recheck_ms.is_none() {
            return;
        }
        let mut checked = self
            .checked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if checked.len() >= CHECKS_REMEMBERED {
            checked.clear();
        }
        checked.insert(id, now_ms);
    }

    async fn restore(
        &self,
        id: Uuid,
        verifier_hash: &str,
        now_ms: UnixMillis,
    ) -> Option<Arc<LiveLogin>> {
        let login = self.store.browser_login(id).await.ok()??;
        if !login.is_live(now_ms) || login.verifier_hash != verifier_hash {
            return None;
        }
        self.restore_login(login, now_ms).await
    }

    /// A live `login` read from the store, made live here: its sealed credential opened
    /// (renewed first when due), and GitHub still knowing its token as its own account.
    async fn restore_login(
        &self,
        login: BrowserLogin,
        now_ms: UnixMillis,
    ) -> Option<Arc<LiveLogin>> {
        let id = login.id;
        let account = self.store.account(login.account_id).await.ok()??;
        let (revision, sealed) = self.store.login_credential(id).await.ok()??;
        let aad = self.aad(
            id,
            account.id,
            login.created_at_ms,
            login.expires_at_ms,
            &login.verifier_hash,
            revision,
        );
        let credential = match self.key.open_credential(&aad, &sealed) {
            Ok(c) => Credential::opened(c),
            Err(e) => {
                tracing::warn!(login_id = %id, error = %e, "a stored sign-in credential does not open with this key; the browser must sign in again");
                return None;
            }
        };
        let mut live = LiveLogin {
            id,
            account,
            created_at_ms: login.created_at_ms,
            expires_at_ms: login.expires_at_ms,
            verifier_hash: login.verifier_hash,
            credential,
            credential_revision: revision,
            machine: None,
        };
        // A credential due for renewal is renewed first (a login this process did not hold has
        // no Planner session to end). If GitHub cannot renew it now, a token still valid is used.
        if live.renew_at_ms().is_some_and(|at| now_ms >= at) {
            if let Some(refresher) = self.refresher.as_deref() {
                match self.renewed(&live, refresher).await {
                    Ok(renewed) => live = renewed,
                    Err(e) => {
                        tracing::info!(login_id = %id, error = %e, "a restored sign-in's credential could not be renewed");
                        if live.access_expires_at_ms().is_some_and(|at| now_ms >= at) {
                            return None;
                        }
                    }
                }
            }
        }
        match self.admission.check(live.github_token()).await {
            Ok(admitted) if admitted.user.id == live.account.github_user_id => {}
            _ => return None,
        }
        Some(Arc::new(live))
    }

    /// The login if this process holds it and it has not expired at `now_ms`.
    pub fn get_live(&self, id: Uuid, now_ms: UnixMillis) -> Option<Arc<LiveLogin>> {
        let live = self.lock().live.get(&id).cloned()?;
        (now_ms < live.expires_at_ms).then_some(live)
    }

    /// Makes a paired machine's delegated login for `account` (the machine's owner) with the
    /// machine's GitHub token: live in this process only, held by no browser (no cookie proves
    /// it, nothing is stored), so a browser's sign-out does not end it and a restart does not
    /// keep it (AC-21, AO-21). It lasts `SESSION_MAX_AGE_MS` like a browser login.
    pub fn delegate(&self, account: Account, token: Secret, machine: Uuid) -> Arc<LiveLogin> {
        let now = self.clock.now_ms();
        let live = Arc::new(LiveLogin {
            id: self.entropy.uuid(),
            account,
            created_at_ms: now,
            expires_at_ms: now.saturating_add(self.settings.session_max_age_ms as i64),
            // No verifier hashes to the empty string, so no cookie proves this login.
            verifier_hash: String::new(),
            credential: Credential {
                token,
                access_expires_at_ms: None,
                refresh_token: None,
                refresh_expires_at_ms: None,
            },
            credential_revision: 0,
            machine: Some(machine),
        });
        self.lock().live.insert(live.id, live.clone());
        live
    }

    /// The newest live browser login of `account_id` this process holds (never a machine's
    /// delegated login).
    pub fn live_login_of(&self, account_id: Uuid, now_ms: UnixMillis) -> Option<Arc<LiveLogin>> {
        self.lock()
            .live
            .values()
            .filter(|l| {
                l.account.id == account_id && l.machine.is_none() && now_ms < l.expires_at_ms
            })
            .max_by_key(|l| (l.created_at_ms, l.id))
            .cloned()
    }

    /// [`SignIns::live_login_of`], and under `PROCESSES=many` also a live browser login of the
    /// account made through another process, restored here from the store (newest first): the
    /// processes together are the server whose sign-ins AO-03 counts. With one process a login
    /// this process never saw proves nothing without its browser's cookie, as after a restart.
    pub async fn live_login_of_account(
        &self,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> Option<Arc<LiveLogin>> {
        if let Some(live) = self.live_login_of(account_id, now_ms) {
            return Some(live);
        }
        self.settings.recheck_ms?;
        let logins = match self
            .store
            .live_browser_logins(account_id, now_ms, LOGINS_TRIED)
            .await
        {
            Ok(logins) => logins,
            Err(e) => {
                tracing::warn!(account = %account_id, error = %e, "could not read an account's browser logins");
                return None;
            }
        };
        for login in logins {
            let id = login.id;
            let ends = {
                let table = self.lock();
                if table.pending.contains_key(&id) {
                    continue;
                }
                table.ends
            };
            let Some(live) = self.restore_login(login, now_ms).await else {
                continue;
            };
            let mut table = self.lock();
            // A login ended while the store was read: what it said may be older than that.
            if table.pending.contains_key(&id) || table.ends != ends {
                continue;
            }
            let live = table.live.entry(id).or_insert(live).clone();
            drop(table);
            self.checked_at(id, now_ms);
            self.arrived.send_modify(|n| *n += 1);
            tracing::info!(login = %live.account.login, login_id = %id, "a browser login made through another process restored from storage");
            return Some(live);
        }
        None
    }

    /// The logins this process holds that have expired at `now_ms`, in id order.
    pub fn expired(&self, now_ms: UnixMillis) -> Vec<Arc<LiveLogin>> {
        self.lock()
            .live
            .values()
            .filter(|l| now_ms >= l.expires_at_ms)
            .cloned()
            .collect()
    }

    /// When the first login this process holds expires, if it holds any.
    pub fn next_expiry(&self) -> Option<UnixMillis> {
        self.lock().live.values().map(|l| l.expires_at_ms).min()
    }

    /// How many logins this process holds.
    pub fn live_count(&self) -> usize {
        self.lock().live.len()
    }

    /// How many sign-outs the store has not recorded yet.
    pub fn pending_sign_out_count(&self) -> usize {
        self.lock().pending.len()
    }

    /// The first half of ending a login: this process forgets it at once (so nothing new binds
    /// to it), sockets opened with it hear of it, and admission forgets its token. A sign-out
    /// also leaves its tombstone, so the login's cookie restores nothing until the store has
    /// recorded it. False if it was already forgotten (another path ended it first).
    pub fn forget_ended(&self, live: &LiveLogin, why: LoginEnd) -> bool {
        let (held, current) = {
            let mut table = self.lock();
            let current = table.live.remove(&live.id);
            table.renew_not_before.remove(&live.id);
            if why.is_recorded() {
                table.pending.insert(
                    live.id,
                    PendingSignOut {
                        id: live.id,
                        login: live.account.login.clone(),
                        verifier_hash: live.verifier_hash.clone(),
                        expires_at_ms: live.expires_at_ms,
                    },
                );
            }
            table.ends += 1;
            (current.is_some(), current)
        };
        let _ = self.ended.send(live.id);
        self.admission.invalidate(live.github_token());
        // The login may have been renewed since `live` was read: its newer token goes too.
        if let Some(current) = current.filter(|c| c.credential_revision != live.credential_revision)
        {
            self.admission.invalidate(current.github_token());
        }
        held
    }

    /// The second half: a sign-out is recorded in the store and the sealed credential deleted
    /// (an expiry needs no write: the stored login carries its expiry). `Err` when the store
    /// did not record the sign-out: the login stays ended in this process (its tombstone
    /// stands) and the write is retried ([`SignIns::retry_pending_sign_outs`]).
    pub async fn record_end(
        &self,
        live: &LiveLogin,
        why: LoginEnd,
    ) -> Result<(), SignOutNotRecorded> {
        if why.is_recorded() {
            self.record_sign_out(live.id).await?;
        }
        tracing::info!(login = %live.account.login, login_id = %live.id, ?why, "browser login ended");
        Ok(())
    }

    /// Writes a sign-out: the stored login marked signed out (then its tombstone goes), and its
    /// sealed credential deleted (a failure there is only logged: a signed-out login restores
    /// nothing, and startup deletes it with its credential).
    async fn record_sign_out(&self, id: Uuid) -> Result<(), SignOutNotRecorded> {
        let now = self.clock.now_ms();
        if let Err(error) = self.store.sign_out_browser_login(id, now).await {
            tracing::error!(%error, login_id = %id, "sign-out could not be recorded; the login stays ended in this process and the write is retried");
            return Err(SignOutNotRecorded {
                login_id: id,
                error,
            });
        }
        {
            let mut table = self.lock();
            if table.pending.remove(&id).is_some() {
                table.ends += 1;
            }
        }
        if let Err(e) = self.store.delete_login_credential(id).await {
            tracing::error!(error = %e, login_id = %id, "the signed-out login's sealed credential could not be deleted; startup deletes it");
        }
        Ok(())
    }

    /// The unrecorded sign-out a request's session cookie names, if any (a browser asking to
    /// sign out again after the store failed the first time).
    pub fn pending_sign_out(&self, headers: &HeaderMap) -> Option<PendingSignOut> {
        let value = cookie_value(headers, SESSION_COOKIE)?;
        let (id, verifier) = value.split_once('.')?;
        let id = Uuid::parse_str(id).ok()?;
        let hash = sha256_hex(verifier);
        let table = self.lock();
        let pending = table.pending.get(&id)?;
        (pending.verifier_hash == hash).then(|| pending.clone())
    }

    /// Tries again to record one unrecorded sign-out.
    pub async fn retry_sign_out(&self, pending: &PendingSignOut) -> Result<(), SignOutNotRecorded> {
        self.record_sign_out(pending.id).await?;
        tracing::info!(login = %pending.login, login_id = %pending.id, "sign-out recorded on retry");
        Ok(())
    }

    /// The housekeeping round: every unrecorded sign-out is tried again, and a tombstone whose
    /// login has expired goes (the stored login restores nothing past its expiry). How many
    /// remain unrecorded.
    pub async fn retry_pending_sign_outs(&self) -> usize {
        let now = self.clock.now_ms();
        let pending: Vec<PendingSignOut> = {
            let mut table = self.lock();
            let before = table.pending.len();
            table.pending.retain(|_, p| now < p.expires_at_ms);
            if table.pending.len() != before {
                table.ends += 1;
            }
            table.pending.values().cloned().collect()
        };
        for p in &pending {
            let _ = self.retry_sign_out(p).await;
        }
        self.pending_sign_out_count()
    }

    /// The logins whose credential is due for renewal at `now_ms` (and not put off after a
    /// renewal GitHub could not answer), in id order.
    pub fn due_for_renewal(&self, now_ms: UnixMillis) -> Vec<Arc<LiveLogin>> {
        let table = self.lock();
        table
            .live
            .values()
            .filter(|l| now_ms < l.expires_at_ms)
            .filter(|l| l.renew_at_ms().is_some_and(|at| now_ms >= at))
            .filter(|l| {
                table
                    .renew_not_before
                    .get(&l.id)
                    .is_none_or(|&t| now_ms >= t)
            })
            .cloned()
            .collect()
    }

    /// When the first credential this process holds is due for renewal, if any is renewable.
    pub fn next_renewal(&self) -> Option<UnixMillis> {
        let table = self.lock();
        table
            .live
            .values()
            .filter_map(|l| {
                let at = l.renew_at_ms()?;
                Some(table.renew_not_before.get(&l.id).map_or(at, |&t| at.max(t)))
            })
            .min()
    }

    /// Renews `live`'s GitHub credential with its refresh token: GitHub gives a new access
    /// token and refresh token (the old ones stop working at once), the new credential is
    /// sealed at the next credential revision and stored under a revision check, and only then
    /// does this process hold it — as a new [`LiveLogin`] at that revision, which every later
    /// lookup sees. The caller ends every Planner session bound to `live`'s revision *before*
    /// calling this (PERM-10): the old token dies with the refresh.
    pub async fn renew(&self, live: &LiveLogin) -> Result<Arc<LiveLogin>, RenewFailure> {
        let Some(refresher) = self.refresher.clone() else {
            return Err(RenewFailure::NotRenewable);
        };
        let now = self.clock.now_ms();
        match self.get_live(live.id, now) {
            Some(current) if current.credential_revision == live.credential_revision => {}
            _ => return Err(RenewFailure::Superseded),
        }
        let renewed = match self.renewed(live, &refresher).await {
            Ok(renewed) => Arc::new(renewed),
            Err(RenewFailure::Unavailable(e)) => {
                // A minute after this attempt began.
                let retry_at = now.saturating_add(TOKEN_REFRESH_RETRY_MS);
                self.lock().renew_not_before.insert(live.id, retry_at);
                return Err(RenewFailure::Unavailable(e));
            }
            Err(e) => return Err(e),
        };
        {
            let mut table = self.lock();
            match table.live.get(&live.id) {
                Some(current) if current.credential_revision == live.credential_revision => {
                    table.live.insert(live.id, renewed.clone());
                    table.renew_not_before.remove(&live.id);
                }
                // Ended while GitHub was asked: it stays ended (its tombstone, if a sign-out,
                // keeps the stored credential from restoring it).
                _ => return Err(RenewFailure::Superseded),
            }
        }
        self.admission.invalidate(live.github_token());
        tracing::info!(login = %live.account.login, login_id = %live.id, revision = renewed.credential_revision, "GitHub credential renewed");
        Ok(renewed)
    }

    /// GitHub's renewal of `live`'s credential, sealed and stored at the next revision.
    async fn renewed(
        &self,
        live: &LiveLogin,
        refresher: &TokenRefresher,
    ) -> Result<LiveLogin, RenewFailure> {
        let now = self.clock.now_ms();
        let Some(refresh_token) = live.credential.refresh_token.as_ref() else {
            return Err(RenewFailure::NotRenewable);
        };
        if live
            .credential
            .refresh_expires_at_ms
            .is_some_and(|at| now >= at)
        {
            return Err(RenewFailure::Rejected(RefreshError::Rejected(
                "the refresh token has expired".to_owned(),
            )));
        }
        let token = match refresher.refresh(refresh_token).await {
            Ok(token) => token,
            Err(e @ RefreshError::Rejected(_)) => return Err(RenewFailure::Rejected(e)),
            Err(e @ RefreshError::Unavailable(_)) => return Err(RenewFailure::Unavailable(e)),
        };
        let granted_at = self.clock.now_ms();
        let credential = Credential::granted(token, granted_at);
        let revision = live.credential_revision + 1;
        let aad = self.aad(
            live.id,
            live.account.id,
            live.created_at_ms,
            live.expires_at_ms,
            &live.verifier_hash,
            revision,
        );
        let sealed = self
            .key
            .seal_credential(&*self.entropy, &aad, &credential.to_stored());
        match self
            .store
            .set_login_credential(live.id, live.credential_revision, &sealed)
            .await
        {
            Ok(Some(stored)) if stored == revision => {}
            Ok(_) => return Err(RenewFailure::Superseded),
            Err(e) => return Err(RenewFailure::NotSaved(e)),
        }
        Ok(LiveLogin {
            id: live.id,
            account: live.account.clone(),
            created_at_ms: live.created_at_ms,
            expires_at_ms: live.expires_at_ms,
            verifier_hash: live.verifier_hash.clone(),
            credential,
            credential_revision: revision,
            machine: live.machine,
        })
    }

    /// What a login's sealed credential is bound to: this server, the login, and the revision.
    fn aad(
        &self,
        login_id: Uuid,
        account_id: Uuid,
        created_at_ms: UnixMillis,
        expires_at_ms: UnixMillis,
        verifier_hash: &str,
        revision: i64,
    ) -> CredentialAad {
        CredentialAad {
            origin: self.settings.app_origin.clone(),
            client_id: self.settings.client_id.clone(),
            login_id,
            account_id,
            created_at_ms,
            expires_at_ms,
            verifier_hash: verifier_hash.to_owned(),
            revision,
        }
    }
}

/// One login, watched for its end (see [`SignIns::watch`]).
pub struct LoginWatch {
    rx: tokio::sync::broadcast::Receiver<Uuid>,
    login: Uuid,
    sign_ins: Arc<SignIns>,
}

impl LoginWatch {
    /// Resolves once the login has ended. Cancel-safe; use it in `select!`. A watch that fell
    /// behind the stream of ended logins asks the table whether its login is still live.
    pub async fn ended(&mut self) {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match self.rx.recv().await {
                Ok(id) if id == self.login => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    let now = self.sign_ins.now_ms();
                    if self.sign_ins.get_live(self.login, now).is_none() {
                        return;
                    }
                }
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}

pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| Cookie::split_parse(v.to_owned()).filter_map(Result::ok))
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}
