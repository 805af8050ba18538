//! What the process lets go of on its own: logins past their expiry, and the broadcast channels
//! of documents nobody listens to any more.
//!
//! Owns: the one housekeeping task ([`spawn`]) — it wakes at the first login's expiry, or
//! after [`TIDY_EVERY`] at the latest, ends the expired logins through
//! [`Planners::end_expired_logins`] (their Planner links close with `sign-in-required`, their
//! sockets hear it, their tokens are forgotten) and tidies the presence and Chat channels.
//! Does not own: the maps themselves (the planner table, the transcript, sign-in), or the
//! stored logins, which startup sweeps.
//!
//! Invariants: a login is never used past its expiry whether or not anything touches it again;
//! the task holds the services weakly and ends when the process stops.

use std::sync::Arc;
use std::time::Duration;

use crate::planner::Planners;
use crate::runtime::{SharedClock, Shutdown};
use crate::transcript::Transcript;

/// How long the task sleeps at most between two rounds.
pub const TIDY_EVERY: Duration = Duration::from_secs(60);

/// Starts the housekeeping task on `shutdown`'s tracker.
pub fn spawn(
    planners: &Arc<Planners>,
    transcript: &Arc<Transcript>,
    clock: SharedClock,
    shutdown: &Shutdown,
) {
    let planners = Arc::downgrade(planners);
    let transcript = Arc::downgrade(transcript);
    let stopping = shutdown.stopping();
    shutdown.spawn(async move {
        tokio::pin!(stopping);
        loop {
            let Some(wait) = planners.upgrade().map(|p| {
                let now = clock.now_ms();
                p.next_login_expiry()
                    .map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)))
                    .map_or(TIDY_EVERY, |until| until.min(TIDY_EVERY))
            }) else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stopping => return,
            }
            let (Some(planners), Some(transcript)) = (planners.upgrade(), transcript.upgrade())
            else {
                return;
            };
            let ended = planners.end_expired_logins().await;
            if ended > 0 {
                tracing::debug!(ended, "expired browser logins ended");
            }
            planners.tidy();
            transcript.tidy();
        }
    });
}
