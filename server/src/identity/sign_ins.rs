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
//! Invariants: a token is never logged, stored in clear, or shown in `Debug`; ending a login
//! forgets it in memory before anything else happens, so nothing new binds to it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use cookie::Cookie;
use http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::admission::Admission;
use super::crypto::{CredentialAad, CredentialKey, StoredCredential};
use crate::config::Secret;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{Account, BrowserLogin, SignInStore, StoreError, UnixMillis};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "chopin_session";

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

/// Why a login ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginEnd {
    SignedOut,
    Expired,
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
}

/// The live logins of this process, by login id.
pub struct SignIns {
    live: Mutex<BTreeMap<Uuid, Arc<LiveLogin>>>,
    /// Every login that ends (sign-out, expiry), so sockets opened with it can close.
    ended: tokio::sync::broadcast::Sender<Uuid>,
    store: Arc<dyn SignInStore>,
    clock: SharedClock,
    entropy: SharedEntropy,
    key: Arc<CredentialKey>,
    admission: Arc<Admission>,
    settings: SignInSettings,
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
            live: Mutex::default(),
            ended: tokio::sync::broadcast::channel(256).0,
            store,
            clock,
            entropy,
            key,
            admission,
            settings,
        }
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

    /// The time now on the server's clock (for callers comparing against expiries).
    pub fn now_ms(&self) -> UnixMillis {
        self.clock.now_ms()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, Arc<LiveLogin>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new login for `account` (store first, then memory) and returns it with the
    /// cookie value that proves it.
    pub async fn create(
        &self,
        account: Account,
        token: Secret,
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
        let aad = self.aad(id, account.id, now, expires_at_ms, &verifier_hash, 1);
        let sealed = self.key.seal_credential(
            &*self.entropy,
            &aad,
            &StoredCredential {
                access_token: token.expose().to_owned(),
                refresh_token: None,
                access_expires_at_ms: None,
            },
        );
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
            token,
            credential_revision: 1,
        });
        self.lock().insert(id, live.clone());
        Ok((live, format!("{id}.{verifier}")))
    }

    /// The live login a request's session cookie proves, if any. A login this process does not
    /// hold (it signed in before a restart) is restored from storage: its sealed credential is
    /// opened and GitHub must still know the token as the login's own account, admitted here.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Option<Arc<LiveLogin>> {
        let now_ms = self.clock.now_ms();
        let value = cookie_value(headers, SESSION_COOKIE)?;
        let (id, verifier) = value.split_once('.')?;
        let id = Uuid::parse_str(id).ok()?;
        // Compare digests, not the secret, so timing says nothing about the verifier.
        let hash = sha256_hex(verifier);
        if let Some(live) = self.get_live(id, now_ms) {
            return (hash == live.verifier_hash).then_some(live);
        }
        let restored = self.restore(id, &hash, now_ms).await;
        if let Some(live) = &restored {
            tracing::info!(login = %live.account.login, login_id = %id, "browser login restored from storage");
        }
        restored
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
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(login_id = %id, error = %e, "a stored sign-in credential does not open with this key; the browser must sign in again");
                return None;
            }
        };
        match self.admission.check(&credential.access_token).await {
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

    /// The logins this process holds that have expired at `now_ms`, in id order.
    pub fn expired(&self, now_ms: UnixMillis) -> Vec<Arc<LiveLogin>> {
        self.lock()
            .values()
            .filter(|l| now_ms >= l.expires_at_ms)
            .cloned()
            .collect()
    }

    /// When the first login this process holds expires, if it holds any.
    pub fn next_expiry(&self) -> Option<UnixMillis> {
        self.lock().values().map(|l| l.expires_at_ms).min()
    }

    /// How many logins this process holds.
    pub fn live_count(&self) -> usize {
        self.lock().len()
    }

    /// The first half of ending a login: this process forgets it at once (so nothing new binds
    /// to it), sockets opened with it hear of it, and admission forgets its token. False if
    /// it was already forgotten (another path ended it first).
    pub fn forget_ended(&self, live: &LiveLogin) -> bool {
        let held = self.lock().remove(&live.id).is_some();
        let _ = self.ended.send(live.id);
        self.admission.invalidate(live.github_token());
        held
    }

    /// The second half: a sign-out is recorded in the store and the sealed credential deleted
    /// (an expiry needs no write: the stored login carries its expiry).
    pub async fn record_end(&self, live: &LiveLogin, why: LoginEnd) {
        if why == LoginEnd::SignedOut {
            let now = self.clock.now_ms();
            if let Err(e) = self.store.sign_out_browser_login(live.id, now).await {
                tracing::error!(error = %e, login_id = %live.id, "sign-out could not be recorded; the login is ended in this process");
            }
            if let Err(e) = self.store.delete_login_credential(live.id).await {
                tracing::error!(error = %e, login_id = %live.id, "the signed-out login's sealed credential could not be deleted");
            }
        }
        tracing::info!(login = %live.account.login, login_id = %live.id, ?why, "browser login ended");
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
