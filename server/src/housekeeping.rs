//! What the process lets go of on its own: logins past their expiry, and the broadcast channels
//! of documents nobody listens to any more; and what it keeps trying: sign-outs the store has
//! not recorded yet.
//!
//! Owns: the one housekeeping task ([`spawn`]) — it wakes at the first login's expiry or the
//! first credential due for renewal, or after [`TIDY_EVERY`] at the latest, ends the expired
//! logins through [`Planners::end_expired_logins`] (their Planner links close with
//! `sign-in-required`, their sockets hear it, their tokens are forgotten), renews the due
//! GitHub credentials ([`Renewal::renew_due`], their Planner sessions ended first), tries again to record every unrecorded
//! sign-out ([`SignIns::retry_pending_sign_outs`]), tidies the presence and Chat channels and
//! forgets the Chat files nobody sent within a day ([`Files::forget_unsent`]).
//! Does not own: the maps themselves (the planner table, the transcript, sign-in), or the
//! stored logins, which startup sweeps.
//!
//! Invariants: a login is never used past its expiry whether or not anything touches it again;
//! the task holds the services weakly and ends when the process stops.

use std::sync::Arc;
use std::time::Duration;

use crate::files::Files;
use crate::identity::sign_ins::SignIns;
use crate::planner::Planners;
use crate::renewal::Renewal;
use crate::runtime::{SharedClock, Shutdown};
use crate::transcript::Transcript;

/// How long the task sleeps at most between two rounds.
pub const TIDY_EVERY: Duration = Duration::from_secs(60);

/// Starts the housekeeping task on `shutdown`'s tracker.
pub fn spawn(
    planners: &Arc<Planners>,
    transcript: &Arc<Transcript>,
    sign_ins: &Arc<SignIns>,
    renewal: &Arc<Renewal>,
    files: &Arc<Files>,
    clock: SharedClock,
    shutdown: &Shutdown,
) {
    let planners = Arc::downgrade(planners);
    let transcript = Arc::downgrade(transcript);
    let sign_ins = Arc::downgrade(sign_ins);
    let renewal = Arc::downgrade(renewal);
    let files = Arc::downgrade(files);
    let stopping = shutdown.stopping();
    shutdown.spawn(async move {
        tokio::pin!(stopping);
        loop {
            let (Some(p), Some(r)) = (planners.upgrade(), renewal.upgrade()) else {
                return;
            };
            let now = clock.now_ms();
            let wait = [p.next_login_expiry(), r.next_due()]
                .into_iter()
                .flatten()
                .map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)))
                .fold(TIDY_EVERY, Duration::min);
            drop((p, r));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stopping => return,
            }
            let (Some(planners), Some(transcript), Some(sign_ins), Some(renewal)) = (
                planners.upgrade(),
                transcript.upgrade(),
                sign_ins.upgrade(),
                renewal.upgrade(),
            ) else {
                return;
            };
            let ended = planners.end_expired_logins().await;
            if ended > 0 {
                tracing::debug!(ended, "expired browser logins ended");
            }
            let renewed = renewal.renew_due().await;
            if renewed > 0 {
                tracing::debug!(renewed, "GitHub credentials renewed");
            }
            if sign_ins.pending_sign_out_count() > 0 {
                let left = sign_ins.retry_pending_sign_outs().await;
                if left > 0 {
                    tracing::warn!(
                        left,
                        "sign-outs still not recorded; retrying at the next round"
                    );
                }
            }
            planners.tidy();
            transcript.tidy();
            if let Some(files) = files.upgrade() {
                match files.forget_unsent().await {
                    Ok(0) => {}
                    Ok(forgotten) => tracing::debug!(forgotten, "files nobody sent within a day forgotten"),
                    Err(e) => tracing::warn!(error = %e, "files nobody sent could not be forgotten; trying again at the next round"),
                }
            }
        }
    });
}

/// Starts the sweep that tells the machines asked to run a Planner that have not attached within
/// `PLANNER_PATIENCE_MS` (PRES-20, PRES-21). It runs every [`crate::starting::SWEEP_EVERY_MS`]
/// (15 s), on the multiples of 15 s of the server's clock, so when it runs never depends on when
/// the process started (and a scenario can place a deadline 1 ms either side of a sweep). The
/// same sweep lets go of Default machine's unused documents (ATM-37) and ends builds silent for
/// 30 minutes (RULINGS LIFE-87) — under `PROCESSES=many`, those of the documents this process
/// serves.
pub fn spawn_patience_sweep(
    planners: &Arc<Planners>,
    default_machine: Option<Arc<crate::default_machine::DefaultMachine>>,
    builds: &Arc<crate::builds::Builds>,
    clock: SharedClock,
    shutdown: &Shutdown,
) {
    let planners = Arc::downgrade(planners);
    let default_machine = default_machine.as_ref().map(Arc::downgrade);
    let builds = Arc::downgrade(builds);
    let stopping = shutdown.stopping();
    shutdown.spawn(async move {
        tokio::pin!(stopping);
        let every = crate::starting::SWEEP_EVERY_MS as i64;
        loop {
            let now = clock.now_ms();
            let next = (now.div_euclid(every) + 1) * every;
            let wait = Duration::from_millis(u64::try_from(next - now).unwrap_or(0));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stopping => return,
            }
            let Some(planners) = planners.upgrade() else {
                return;
            };
            let told = planners.sweep_patience();
            if told > 0 {
                tracing::info!(
                    told,
                    "machines asked to run a Planner that have not attached are told failed"
                );
            }
            drop(planners);
            if let Some(default) = default_machine.as_ref().and_then(std::sync::Weak::upgrade) {
                if let Err(e) = default.sweep().await {
                    tracing::warn!(error = %e, "Default machine's sweep could not read its documents; the next sweep tries again");
                }
            }
            if let Some(builds) = builds.upgrade() {
                if let Err(e) = builds.sweep().await {
                    tracing::warn!(error = %e, "the builds' sweep could not finish; the next sweep tries again");
                }
            }
        }
    });
}
