//! Local sign-in: GitHub's device flow under `AUTH_MODE=local`, and the single-account rule.
//!
//! Owns: [`DeviceFlows`] — this process's device-flow attempts (each with GitHub's private
//! `device_code`, which never leaves the server, and its poll pacing), asking GitHub for a code
//! and polling it, completing an approved attempt into a login through
//! [`super::web_flow::sign_in`] (whose login, like the web flow's, seals the credential so a
//! restart restores it from its cookie), and which account this local server belongs to.
//! Does not own: the routes, the attempt cookie (`chopin_device`) and the answers' JSON
//! (the transport layer's sign-in routes), browser logins ([`super::sign_ins`]), or admission.
//!
//! The routes' behaviour (documented in `docs/sign-in.md`): starting an attempt answers the
//! code to show; its status is `pending`, `approved`, `denied`, `expired` or `cancelled`, polling
//! GitHub at most once per status call and only once GitHub's interval has passed since the last
//! poll (`slow_down` adds 5 s to it); a missing or unknown attempt is `cancelled`; completing
//! signs the browser in once approved; cancelling forgets the attempt.
//!
//! **Single account.** A local server belongs to one GitHub account: the first account to
//! complete sign-in in this process. The same account may sign in again (another browser, a new
//! attempt); a different account completing later is refused, and its attempt is discarded.
//! The owner is process memory: a restarted process belongs to whoever completes a device
//! sign-in first after the restart (a restored cookie of the earlier owner does not claim it).
//!
//! Bounds: at most [`MAX_DEVICE_ATTEMPTS`] attempts are held (the oldest is dropped); an attempt
//! expires after GitHub's `expires_in` (at most [`MAX_DEVICE_EXPIRES_IN_SECS`]), read from the
//! clock seam; attempt ids come from the entropy seam.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::{header, StatusCode};
use hyper::body::Bytes;
use serde::Deserialize;
use uuid::Uuid;

use super::admission::AdmissionError;
use super::sign_ins::LiveLogin;
use super::tokens::{TokenAnswer, UserToken};
use super::web_flow::{sign_in, SignInDeps, SignInFailure};
use crate::config::Secret;
use crate::runtime::connector::{self, SharedConnector};
use crate::runtime::SharedEntropy;
use crate::store::UnixMillis;

/// How many attempts this process holds at once; starting one more drops the oldest.
pub const MAX_DEVICE_ATTEMPTS: usize = 16;
/// The longest attempt we keep, whatever GitHub says: GitHub's device codes live 15 minutes.
pub const MAX_DEVICE_EXPIRES_IN_SECS: u64 = 900;
/// GitHub's polling interval when it names none, in seconds.
const DEFAULT_INTERVAL_SECS: u64 = 5;
/// What GitHub's `slow_down` adds to the polling interval, in ms.
const SLOW_DOWN_MS: i64 = 5_000;
/// How long one request to GitHub may take.
const GITHUB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
/// The `grant_type` of a device-flow token request.
const DEVICE_CODE_GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// Where an attempt stands, as `GET /auth/device` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStatus {
    Pending,
    Approved,
    Denied,
    Expired,
    Cancelled,
}

impl DeviceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceStatus::Pending => "pending",
            DeviceStatus::Approved => "approved",
            DeviceStatus::Denied => "denied",
            DeviceStatus::Expired => "expired",
            DeviceStatus::Cancelled => "cancelled",
        }
    }
}

/// An attempt's state. Cancelled attempts are forgotten, so they have no variant here.
enum Grant {
    Pending,
    /// GitHub issued this user access token; `complete` takes it.
    Approved(UserToken),
    /// `complete` holds the token while it checks admission and signs in.
    Completing,
    /// The user (or GitHub) refused; the words say why.
    Denied(String),
    Expired,
}

/// One device-flow sign-in attempt.
struct Attempt {
    id: String,
    device_code: Secret,
    expires_at_ms: UnixMillis,
    interval_ms: i64,
    next_poll_at_ms: UnixMillis,
    grant: Grant,
}

impl Attempt {
    /// Expires the attempt once GitHub's `expires_in` has passed (dropping any token).
    fn expire_if_due(&mut self, now_ms: UnixMillis) {
        if now_ms >= self.expires_at_ms && !matches!(self.grant, Grant::Completing) {
            self.grant = Grant::Expired;
        }
    }

    /// Whether a poll of GitHub is due; if so, the next one is scheduled an interval later.
    fn take_poll_turn(&mut self, now_ms: UnixMillis) -> bool {
        if !matches!(self.grant, Grant::Pending) || now_ms < self.next_poll_at_ms {
            return false;
        }
        self.next_poll_at_ms = now_ms.saturating_add(self.interval_ms);
        true
    }

    /// Records what GitHub answered a poll made at `polled_at_ms`.
    fn apply(&mut self, answer: PollAnswer, polled_at_ms: UnixMillis) {
        if !matches!(self.grant, Grant::Pending) {
            return;
        }
        match answer {
            PollAnswer::Pending | PollAnswer::Unavailable => {}
            PollAnswer::SlowDown { interval_secs } => {
                let advertised = secs_to_ms(interval_secs.unwrap_or(0));
                self.interval_ms = (self.interval_ms + SLOW_DOWN_MS).max(advertised);
                self.next_poll_at_ms = polled_at_ms.saturating_add(self.interval_ms);
            }
            PollAnswer::Token(token) => self.grant = Grant::Approved(token),
            PollAnswer::Denied(words) => self.grant = Grant::Denied(words),
            PollAnswer::Expired => self.grant = Grant::Expired,
        }
    }

    fn status(&self) -> DeviceStatus {
        match self.grant {
            Grant::Pending => DeviceStatus::Pending,
            Grant::Approved(_) | Grant::Completing => DeviceStatus::Approved,
            Grant::Denied(_) => DeviceStatus::Denied,
            Grant::Expired => DeviceStatus::Expired,
        }
    }
}

/// The account this local server belongs to.
#[derive(Debug, Clone)]
struct Owner {
    account_id: Uuid,
    login: String,
}

#[derive(Default)]
struct Flows {
    /// Oldest first; at most [`MAX_DEVICE_ATTEMPTS`].
    attempts: VecDeque<Attempt>,
    owner: Option<Owner>,
}

impl Flows {
    fn find(&mut self, id: &str) -> Option<&mut Attempt> {
        self.attempts.iter_mut().find(|a| a.id == id)
    }

    fn remove(&mut self, id: &str) -> Option<Attempt> {
        let index = self.attempts.iter().position(|a| a.id == id)?;
        self.attempts.remove(index)
    }

    /// Adds an attempt, dropping expired ones and then the oldest to stay within the bound.
    fn insert(&mut self, attempt: Attempt, now_ms: UnixMillis) {
        self.attempts
            .retain(|a| now_ms < a.expires_at_ms || matches!(a.grant, Grant::Completing));
        while self.attempts.len() >= MAX_DEVICE_ATTEMPTS {
            self.attempts.pop_front();
        }
        self.attempts.push_back(attempt);
        debug_assert!(self.attempts.len() <= MAX_DEVICE_ATTEMPTS);
    }
}

/// What the device flow is configured with.
#[derive(Debug, Clone)]
pub struct DeviceFlowSettings {
    /// `AUTH_MODE=local`: the device flow exists only then.
    pub local: bool,
    pub github_web_url: String,
    pub client_id: Option<String>,
}

/// One server's device-flow attempts and owner.
pub struct DeviceFlows {
    flows: Mutex<Flows>,
    settings: DeviceFlowSettings,
    connector: SharedConnector,
    entropy: SharedEntropy,
    sign_in: SignInDeps,
}

fn secs_to_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// GitHub.

/// Why GitHub could not start an attempt.
enum StartFailure {
    /// Could not be asked, or answered nonsense: 503, try again.
    Unavailable(String),
    /// Answered with an OAuth error (`device_flow_disabled`, `incorrect_client_credentials`).
    Refused(String),
}

#[derive(Deserialize)]
struct CodeAnswer {
    device_code: Option<String>,
    user_code: Option<String>,
    verification_uri: Option<String>,
    expires_in: Option<u64>,
    interval: Option<u64>,
    error: Option<String>,
}

/// What a device code request gave us.
struct DeviceCode {
    device_code: Secret,
    user_code: String,
    verification_uri: String,
    expires_in_secs: u64,
    interval_secs: u64,
}

/// One form POST to `GITHUB_WEB_URL{path}`, answered as JSON.
async fn post_form<T: for<'de> Deserialize<'de>>(
    flows: &DeviceFlows,
    path: &str,
    form: &[(&str, &str)],
) -> Result<T, String> {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let request = http::Request::post(format!("{}{path}", flows.settings.github_web_url))
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::USER_AGENT, "chopin-server")
        .body(Bytes::from(body))
        .map_err(|e| e.to_string())?;
    let exchange = connector::send(&*flows.connector, request);
    let response = tokio::time::timeout(GITHUB_TIMEOUT, exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    if !response.status.is_success() {
        return Err(format!("HTTP {}", response.status));
    }
    serde_json::from_slice(&response.body).map_err(|e| e.to_string())
}

async fn request_device_code(
    flows: &DeviceFlows,
    client_id: &str,
) -> Result<DeviceCode, StartFailure> {
    let answer: CodeAnswer = post_form(flows, "/login/device/code", &[("client_id", client_id)])
        .await
        .map_err(StartFailure::Unavailable)?;
    if let Some(error) = answer.error {
        return Err(StartFailure::Refused(error));
    }
    match (
        answer.device_code,
        answer.user_code,
        answer.verification_uri,
    ) {
        (Some(device_code), Some(user_code), Some(verification_uri)) => Ok(DeviceCode {
            device_code: Secret::new(device_code),
            user_code,
            verification_uri,
            expires_in_secs: answer
                .expires_in
                .unwrap_or(MAX_DEVICE_EXPIRES_IN_SECS)
                .clamp(1, MAX_DEVICE_EXPIRES_IN_SECS),
            interval_secs: answer.interval.unwrap_or(DEFAULT_INTERVAL_SECS),
        }),
        _ => Err(StartFailure::Unavailable(
            "no device_code, user_code or verification_uri in the answer".to_owned(),
        )),
    }
}

/// What one poll of GitHub's token endpoint said.
enum PollAnswer {
    Pending,
    SlowDown {
        interval_secs: Option<u64>,
    },
    Token(UserToken),
    Denied(String),
    Expired,
    /// GitHub could not be asked; the attempt stays pending.
    Unavailable,
}

async fn poll_github(flows: &DeviceFlows, client_id: &str, device_code: &Secret) -> PollAnswer {
    let answer: TokenAnswer = match post_form(
        flows,
        "/login/oauth/access_token",
        &[
            ("client_id", client_id),
            ("device_code", device_code.expose()),
            ("grant_type", DEVICE_CODE_GRANT_TYPE),
        ],
    )
    .await
    {
        Ok(answer) => answer,
        Err(why) => {
            tracing::warn!(%why, "device sign-in: GitHub could not be polled; still pending");
            return PollAnswer::Unavailable;
        }
    };
    match (answer.token(), answer.error.as_deref()) {
        (Some(token), _) => PollAnswer::Token(token),
        (_, Some("authorization_pending")) => PollAnswer::Pending,
        (_, Some("slow_down")) => PollAnswer::SlowDown {
            interval_secs: answer.interval,
        },
        (_, Some("expired_token")) => PollAnswer::Expired,
        (_, Some("access_denied")) => {
            PollAnswer::Denied("The request was cancelled on GitHub.".to_owned())
        }
        (_, Some(other)) => PollAnswer::Denied(format!(
            "GitHub refused this sign-in ({other}). Start again; if it keeps happening, this server's operator must check the GitHub App (device flow enabled, client id)."
        )),
        (_, None) => {
            tracing::warn!("device sign-in: GitHub answered neither a token nor an error");
            PollAnswer::Unavailable
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The service.

/// A device-flow request that cannot go on: the status, a stable code and words for a person.
/// None is ever 401, which the browser would take for a lost session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRefusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub words: String,
    /// With `not-approved`: where the attempt stands.
    pub attempt_status: Option<DeviceStatus>,
}

impl DeviceRefusal {
    fn new(status: StatusCode, code: &'static str, words: impl Into<String>) -> Self {
        DeviceRefusal {
            status,
            code,
            words: words.into(),
            attempt_status: None,
        }
    }

    fn not_approved(status: DeviceStatus) -> Self {
        DeviceRefusal {
            status: StatusCode::CONFLICT,
            code: "not-approved",
            words: format!(
                "This sign-in is {} on GitHub, not approved, so it cannot complete.",
                status.as_str()
            ),
            attempt_status: Some(status),
        }
    }
}

/// A started attempt: its id (the attempt cookie's value) and what the person is shown.
#[derive(Debug, Clone)]
pub struct Started {
    pub attempt: String,
    pub user_code: String,
    pub verification_uri: String,
    pub expires_in_secs: u64,
    pub interval_secs: u64,
}

enum Failure {
    /// Nothing was decided (GitHub or the store unavailable): the attempt stays approved.
    Retry(DeviceRefusal),
    /// The account may not sign in: the attempt is discarded.
    Final(DeviceRefusal),
}

impl DeviceFlows {
    pub fn new(
        settings: DeviceFlowSettings,
        connector: SharedConnector,
        entropy: SharedEntropy,
        sign_in: SignInDeps,
    ) -> Self {
        DeviceFlows {
            flows: Mutex::default(),
            settings,
            connector,
            entropy,
            sign_in,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Flows> {
        self.flows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> UnixMillis {
        self.sign_in.clock.now_ms()
    }

    /// 404 unless this server runs with `AUTH_MODE=local`.
    pub fn local_only(&self) -> Result<(), DeviceRefusal> {
        if self.settings.local {
            Ok(())
        } else {
            Err(DeviceRefusal::new(
                StatusCode::NOT_FOUND,
                "local-mode-only",
                "Device sign-in exists only when this server runs with AUTH_MODE=local; this server signs in with GitHub at /auth/github.",
            ))
        }
    }

    /// Starts an attempt; `earlier` (this browser's previous attempt) is cancelled.
    pub async fn start(&self, earlier: Option<&str>) -> Result<Started, DeviceRefusal> {
        self.local_only()?;
        let Some(client_id) = self.settings.client_id.as_deref() else {
            return Err(DeviceRefusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not-configured",
                "Sign-in with GitHub is not configured on this server: its operator must set GITHUB_APP_CLIENT_ID.",
            ));
        };
        let code = match request_device_code(self, client_id).await {
            Ok(code) => code,
            Err(StartFailure::Unavailable(why)) => {
                tracing::warn!(%why, "device sign-in: GitHub did not give a device code");
                return Err(DeviceRefusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "github-unavailable",
                    "GitHub is unavailable, so sign-in cannot start right now; try again shortly.",
                ));
            }
            Err(StartFailure::Refused(why)) => {
                return Err(DeviceRefusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "github-refused",
                    format!("GitHub refused to start a device sign-in ({why}): this server's operator must enable device flow on the GitHub App and check GITHUB_APP_CLIENT_ID."),
                ));
            }
        };
        let now = self.now_ms();
        let id = self.entropy.token_hex(16);
        let interval_ms = secs_to_ms(code.interval_secs);
        let attempt = Attempt {
            id: id.clone(),
            device_code: code.device_code,
            expires_at_ms: now.saturating_add(secs_to_ms(code.expires_in_secs)),
            interval_ms,
            next_poll_at_ms: now.saturating_add(interval_ms),
            grant: Grant::Pending,
        };
        {
            let mut flows = self.lock();
            // A browser has one attempt at a time: starting again cancels its earlier one.
            if let Some(earlier) = earlier {
                flows.remove(earlier);
            }
            flows.insert(attempt, now);
        }
        Ok(Started {
            attempt: id,
            user_code: code.user_code,
            verification_uri: code.verification_uri,
            expires_in_secs: code.expires_in_secs,
            interval_secs: code.interval_secs,
        })
    }

    /// Where `attempt` stands (and words for `denied` and `expired`), polling GitHub once if due.
    pub async fn status(
        &self,
        attempt: Option<&str>,
    ) -> Result<(DeviceStatus, Option<String>), DeviceRefusal> {
        self.local_only()?;
        let cancelled = Ok((DeviceStatus::Cancelled, None));
        let Some(id) = attempt else {
            return cancelled;
        };
        let now = self.now_ms();
        let due = {
            let mut all = self.lock();
            let Some(attempt) = all.find(id) else {
                return cancelled;
            };
            attempt.expire_if_due(now);
            attempt
                .take_poll_turn(now)
                .then(|| attempt.device_code.clone())
        };
        if let (Some(device_code), Some(client_id)) = (due, self.settings.client_id.as_deref()) {
            let answer = poll_github(self, client_id, &device_code).await;
            // The attempt may have been cancelled while GitHub answered; then the answer (and any
            // token in it) is dropped.
            if let Some(attempt) = self.lock().find(id) {
                attempt.apply(answer, now);
            }
        }
        let mut all = self.lock();
        let Some(attempt) = all.find(id) else {
            return cancelled;
        };
        let message = match &attempt.grant {
            Grant::Denied(words) => Some(words.clone()),
            Grant::Expired => {
                Some("The code expired before it was approved; start sign-in again.".to_owned())
            }
            _ => None,
        };
        Ok((attempt.status(), message))
    }

    /// Forgets `attempt`.
    pub fn cancel(&self, attempt: Option<&str>) -> Result<(), DeviceRefusal> {
        self.local_only()?;
        if let Some(id) = attempt {
            self.lock().remove(id);
        }
        Ok(())
    }

    /// Signs the browser in with the approved attempt's token: the login and its cookie value.
    pub async fn complete(
        &self,
        attempt: Option<&str>,
    ) -> Result<(Arc<LiveLogin>, String), DeviceRefusal> {
        self.local_only()?;
        let now = self.now_ms();
        let id = attempt.unwrap_or_default();
        let token = {
            let mut all = self.lock();
            let Some(attempt) = all.find(id) else {
                return Err(DeviceRefusal::not_approved(DeviceStatus::Cancelled));
            };
            attempt.expire_if_due(now);
            match std::mem::replace(&mut attempt.grant, Grant::Completing) {
                Grant::Approved(token) => token,
                other => {
                    attempt.grant = other;
                    return Err(DeviceRefusal::not_approved(attempt.status()));
                }
            }
        };
        match self.sign_in_as_owner(token.clone()).await {
            Ok(signed_in) => {
                self.lock().remove(id);
                Ok(signed_in)
            }
            Err(Failure::Retry(refusal)) => {
                // A passing outage: the approved token stays for the next try.
                if let Some(attempt) = self.lock().find(id) {
                    attempt.grant = Grant::Approved(token);
                }
                Err(refusal)
            }
            Err(Failure::Final(refusal)) => {
                self.lock().remove(id);
                Err(refusal)
            }
        }
    }

    /// Admission, the single-account rule, then the login.
    async fn sign_in_as_owner(
        &self,
        token: UserToken,
    ) -> Result<(Arc<LiveLogin>, String), Failure> {
        let store_unavailable = || {
            Failure::Retry(DeviceRefusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "Sign-in could not be saved; try again shortly.",
            ))
        };
        let mut claimed: Option<Uuid> = None;
        let signed_in = sign_in(&self.sign_in, token, |account| {
            // The single-account rule: the first account to get here owns this server.
            let mut all = self.lock();
            match &all.owner {
                None => {
                    all.owner = Some(Owner {
                        account_id: account.id,
                        login: account.login.clone(),
                    });
                    claimed = Some(account.id);
                    Ok(())
                }
                Some(owner) if owner.account_id == account.id => Ok(()),
                Some(owner) => {
                    tracing::warn!(owner = %owner.login, refused = %account.login, "device sign-in: another account refused");
                    Err(DeviceRefusal::new(
                        StatusCode::FORBIDDEN,
                        "another-account",
                        format!(
                            "This local Chopin server belongs to @{owner}, the first account signed in on it; @{login} cannot sign in here. Sign in to GitHub as @{owner}, or run a separate local server for @{login}.",
                            owner = owner.login,
                            login = account.login,
                        ),
                    ))
                }
            }
        })
        .await;
        match signed_in {
            Ok(Ok(created)) => Ok(created),
            Ok(Err(refusal)) => Err(Failure::Final(refusal)),
            Err(SignInFailure::Storage) => {
                if let Some(account) = claimed {
                    let mut all = self.lock();
                    if all.owner.as_ref().map(|o| o.account_id) == Some(account) {
                        all.owner = None;
                    }
                }
                Err(store_unavailable())
            }
            Err(SignInFailure::Admission(AdmissionError::Unavailable)) => {
                Err(Failure::Retry(DeviceRefusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "github-unavailable",
                    AdmissionError::Unavailable.to_string(),
                )))
            }
            // Never 401 here: the browser would take it for a lost session.
            Err(SignInFailure::Admission(e @ AdmissionError::BadCredentials)) => {
                Err(Failure::Final(DeviceRefusal::new(
                    StatusCode::FORBIDDEN,
                    "bad-credentials",
                    e.to_string(),
                )))
            }
            Err(SignInFailure::Admission(e @ AdmissionError::Refused { .. })) => {
                Err(Failure::Final(DeviceRefusal::new(
                    StatusCode::FORBIDDEN,
                    "not-admitted",
                    e.to_string(),
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixMillis = 1_700_000_000_000;

    fn attempt(id: &str) -> Attempt {
        Attempt {
            id: id.to_owned(),
            device_code: Secret::new("device-code"),
            expires_at_ms: T0 + 900_000,
            interval_ms: 5_000,
            next_poll_at_ms: T0 + 5_000,
            grant: Grant::Pending,
        }
    }

    #[test]
    fn polls_wait_for_the_interval_and_slow_down_adds_five_seconds() {
        let mut a = attempt("a");
        assert!(!a.take_poll_turn(T0 + 4_999));
        assert!(a.take_poll_turn(T0 + 5_000));
        assert!(!a.take_poll_turn(T0 + 5_001), "one poll per interval");
        a.apply(
            PollAnswer::SlowDown {
                interval_secs: None,
            },
            T0 + 5_000,
        );
        assert_eq!(a.interval_ms, 10_000);
        assert!(!a.take_poll_turn(T0 + 14_999));
        assert!(a.take_poll_turn(T0 + 15_000));
        // GitHub's advertised interval wins when it is longer.
        a.apply(
            PollAnswer::SlowDown {
                interval_secs: Some(30),
            },
            T0 + 15_000,
        );
        assert_eq!(a.interval_ms, 30_000);
    }

    #[test]
    fn an_attempt_expires_at_expires_in_and_drops_its_token() {
        let mut a = attempt("a");
        a.apply(
            PollAnswer::Token(UserToken::lasting(Secret::new("gho_x"))),
            T0,
        );
        a.expire_if_due(T0 + 899_999);
        assert_eq!(a.status(), DeviceStatus::Approved);
        a.expire_if_due(T0 + 900_000);
        assert_eq!(a.status(), DeviceStatus::Expired);
        assert!(
            !a.take_poll_turn(T0 + 900_000),
            "an expired attempt is not polled"
        );
    }

    #[test]
    fn at_most_sixteen_attempts_are_held_oldest_dropped_first() {
        let mut flows = Flows::default();
        for n in 0..=MAX_DEVICE_ATTEMPTS {
            flows.insert(attempt(&format!("a{n}")), T0);
        }
        assert_eq!(flows.attempts.len(), MAX_DEVICE_ATTEMPTS);
        assert!(flows.find("a0").is_none(), "the oldest was dropped");
        assert!(flows.find("a1").is_some());
        assert!(flows.find(&format!("a{MAX_DEVICE_ATTEMPTS}")).is_some());
        // Expired attempts go first, before any live one.
        flows.insert(attempt("late"), T0 + 900_000);
        assert_eq!(flows.attempts.len(), 1);
    }
}
