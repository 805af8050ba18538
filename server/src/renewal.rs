//! Renewing browser logins' expiring GitHub user tokens before they expire (PERM-10, PERM-11).
//!
//! Owns: [`Renewal::renew_due`] — for each login whose access token is within
//! [`TOKEN_REFRESH_MARGIN_MS`](crate::identity::sign_ins::TOKEN_REFRESH_MARGIN_MS) of its expiry,
//! in this order: every Planner session bound to its credential revision is aborted and
//! discarded and no new turn of the login starts ([`Turns::end_sessions_of`]); then the
//! credential is renewed at GitHub, sealed and stored at the next revision
//! ([`SignIns::renew`]); then turns may start again, each with a fresh session bound to the new
//! revision. A refresh token GitHub refuses, or a renewed credential the store could not save
//! (GitHub has consumed the old refresh token), ends the login as a sign-out does
//! ([`LoginEnd::CredentialRevoked`]: its Planner links close with `sign-in-required`, the end
//! is recorded and the sealed credential deleted). GitHub being unavailable leaves the login as
//! it is, tried again after
//! [`TOKEN_REFRESH_RETRY_MS`](crate::identity::sign_ins::TOKEN_REFRESH_RETRY_MS).
//! Does not own: when it runs (the housekeeping task wakes at the first login due), the GitHub
//! call and the sealing ([`crate::identity`]), or stopping a turn ([`crate::turns`]).
//!
//! PERM-11 (RULINGS): a refresh discards every session bound to the old revision, kept ones
//! included: a running turn is aborted and waited for, and a session kept past its turn (for its
//! runs or questions) has its live runs stopped resumably (`stop`) and is then destroyed.
//!
//! Invariants: no turn or session of a login runs across its renewal: those running are over
//! before GitHub is asked, and none starts until the new credential is published; a host tool
//! of a turn bound to an older revision is refused by its recheck whatever happens here.

use std::sync::Arc;

use crate::identity::sign_ins::{LiveLogin, LoginEnd, RenewFailure, SignIns};
use crate::observe::PlannerEvent;
use crate::planner::Planners;
use crate::runtime::SharedClock;
use crate::turns::Turns;

/// What Chat says of a turn a renewal stopped.
pub const RENEWAL_STOP_WORDS: &str = "its owner's GitHub sign-in was renewed, which ends the Planner's session. Send your message again to continue in a new session.";

/// Renews due credentials; shared behind an `Arc`.
pub struct Renewal {
    sign_ins: Arc<SignIns>,
    planners: Arc<Planners>,
    turns: Arc<Turns>,
    clock: SharedClock,
}

impl Renewal {
    pub fn new(
        sign_ins: Arc<SignIns>,
        planners: Arc<Planners>,
        turns: Arc<Turns>,
        clock: SharedClock,
    ) -> Self {
        Renewal {
            sign_ins,
            planners,
            turns,
            clock,
        }
    }

    /// When the first login this process holds is due for renewal.
    pub fn next_due(&self) -> Option<crate::store::UnixMillis> {
        self.sign_ins.next_renewal()
    }

    /// Renews every credential due now (see the module's header). How many were renewed.
    pub async fn renew_due(&self) -> usize {
        let due = self.sign_ins.due_for_renewal(self.clock.now_ms());
        let mut renewed = 0;
        for live in &due {
            if self.renew(live).await {
                renewed += 1;
            }
        }
        renewed
    }

    /// Renews one login's credential, its sessions ended first. True if it was renewed.
    pub async fn renew(&self, live: &LiveLogin) -> bool {
        // PERM-10: every session on the old revision is aborted and discarded before the
        // refresh, and none starts until the new credential is in place.
        let guard = self
            .turns
            .end_sessions_of(live.id, RENEWAL_STOP_WORDS)
            .await;
        let outcome = self.sign_ins.renew(live).await;
        drop(guard);
        match outcome {
            Ok(renewed) => {
                // Nothing keeps using the token the renewal retired (RFC-53).
                self.planners.token_retired(live.id);
                self.planners.emit(PlannerEvent::CredentialRenewed {
                    login: renewed.account.login.clone(),
                    revision: renewed.credential_revision,
                });
                true
            }
            Err(RenewFailure::Superseded | RenewFailure::NotRenewable) => false,
            Err(e @ RenewFailure::Unavailable(_)) => {
                tracing::warn!(login = %live.account.login, login_id = %live.id, error = %e, "could not renew a GitHub credential; trying again shortly");
                false
            }
            Err(e @ (RenewFailure::Rejected(_) | RenewFailure::NotSaved(_))) => {
                tracing::warn!(login = %live.account.login, login_id = %live.id, error = %e, "a GitHub credential cannot be renewed; the browser login ends and must sign in again");
                // The end is recorded like a sign-out; if the store fails that too, its
                // tombstone keeps the login ended here and the housekeeping retries.
                let _ = self
                    .planners
                    .end_login(live, LoginEnd::CredentialRevoked)
                    .await;
                false
            }
        }
    }
}
