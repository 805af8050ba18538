//! What the server tells an observer about Planner links, for the simulator's trace.
//!
//! Owns: [`PlannerEvent`], the semantic events of attaching, grace periods and closes, and the
//! [`Observer`] seam they go to. Production installs no observer (events still go to the log);
//! the simulator installs one that records each event, with the simulated time, in its trace, so
//! a scenario can say exactly when the server received, bound, released or closed something.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::UnixMillis;

/// A semantic event of a Planner link or ownership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "planner", rename_all = "kebab-case")]
pub enum PlannerEvent {
    /// An `attach` for a resolved document arrived (before its checks).
    AttachReceived { document: Uuid, login: String },
    /// The attach was bound: `login` holds the Planner at `generation`.
    Attached {
        document: Uuid,
        login: String,
        generation: i64,
    },
    /// The attach was refused with `reason` (document unknown for a locator that resolves to none).
    AttachRefused {
        document: Option<Uuid>,
        login: String,
        reason: String,
    },
    /// The link ended on its own (`detached` or `dropped`); the grace period runs until `until_ms`.
    GraceStarted {
        document: Uuid,
        login: String,
        how: String,
        until_ms: UnixMillis,
    },
    /// The server closed the link with `code` and `reason`.
    Closed {
        document: Uuid,
        login: String,
        code: u16,
        reason: String,
    },
    /// The document's Planner ownership was released in storage under `generation`.
    Released { document: Uuid, generation: i64 },
    /// A browser login of `login` ended (`how`: `signed-out`, `expired` or
    /// `credential-revoked`), before its links closed.
    LoginEnded { login: String, how: String },
    /// A Planner turn's host tool call was decided: `ran` when the permission rechecks passed
    /// and the tool runs (the turn's owner `login` at ownership `generation`).
    HostTool {
        document: Uuid,
        tool: String,
        login: String,
        generation: i64,
        ran: bool,
    },
    /// A browser login of `login` had its GitHub credential renewed: it is now at credential
    /// `revision` (its Planner sessions on the older revision were ended before).
    CredentialRenewed { login: String, revision: i64 },
    /// A graceful stop wrote the hold of `login`'s cut link, its `handover_until` at
    /// `until_ms` (the write's time plus the window, HO-02).
    HoldWritten {
        document: Uuid,
        login: String,
        until_ms: Option<UnixMillis>,
    },
    /// A resumable link of `login` dropped with work kept: the Planner is held, disconnected.
    HoldKept { document: Uuid, login: String },
    /// A stored hold was rebuilt at startup, in a hand-over window until `until_ms`, or
    /// disconnected (`None`).
    HoldRebuilt {
        document: Uuid,
        login: String,
        until_ms: Option<UnixMillis>,
    },
    /// A link told its client what was kept and waits for its `resume`, until `until_ms` (with
    /// no deadline: `None`, which no link should ever have).
    ResumeAwaited {
        document: Uuid,
        login: String,
        until_ms: Option<UnixMillis>,
    },
    /// A link stopped waiting for `resume`: `how` is `resumed` or `closed`.
    ResumeSettled {
        document: Uuid,
        login: String,
        how: String,
    },
    /// Under a harness whose model runs in this process, `login` (the writer who invoked the
    /// Planner) became its owner at `generation` (no link is attached).
    Owned {
        document: Uuid,
        login: String,
        generation: i64,
    },
    /// A Planner turn began for a message (or answers) from `from`, owned by `owner`.
    TurnStarted {
        document: Uuid,
        from: String,
        owner: String,
    },
    /// A Planner turn ended: `result` is `completed`, `aborted`, `failed` or `stopping` (the
    /// process's stop ended it).
    TurnEnded { document: Uuid, result: String },
    /// The decisions check judged a complete Planner message (`reply`, `request-for-input`,
    /// `uncertain`) or could not (`timed-out`, `malformed`, `missing`, `interrupted`,
    /// `failed`); only a `reply` is published (COA-05, COA-10).
    /// `ms`: how long the check took, on the server's clock.
    MessageChecked {
        document: Uuid,
        verdict: String,
        ms: i64,
    },
    /// A Planner turn opened Decision cards without waiting (`open_decision(s)`): their ids,
    /// comma-separated.
    CardsOpened { document: Uuid, decisions: String },
    /// A person's answer to a card nothing waits on was handed to the Planner: `waiting`
    /// answers now share the turn that starts at `starts_at` (server ms) at the earliest
    /// (COA-20, COA-21).
    AnswerHanded {
        document: Uuid,
        waiting: usize,
        starts_at: i64,
    },
    /// A turn whose message asked for input in prose gets its one continuation (COA-06).
    TurnContinued { document: Uuid },
    /// Automatic participation (CTX-01..03) on a message that did not name `@chopin`:
    /// `judged` is `solo` (it goes to the Planner at once), `quiet-window` (a group
    /// conversation: it waits 8 s of quiet), `speak` or `yield` (the turn-taking judgment after
    /// the quiet), `unchecked-<why>` (no judgment: the Planner stays quiet) or `paused`.
    Participation { document: Uuid, judged: String },
    /// An `ask` or `open_decisions` result was given the `current_plan` snapshot (`outcome`
    /// `whole` or `shortened`) or not (`over-budget`: the 50 ms ran out; `not-owner`;
    /// `unavailable`; `no-room`: not even its header fit the result), `ms` after it began on
    /// the server's clock (CTX-12..17).
    CurrentPlan {
        document: Uuid,
        outcome: String,
        ms: i64,
    },
    /// A background job of type `job_type` was queued (`origin`: scheduler, planner or user).
    JobQueued {
        document: Uuid,
        job_type: String,
        origin: String,
    },
    /// This process claimed a background job and starts its `attempt` (from 1).
    JobStarted {
        document: Uuid,
        job_type: String,
        attempt: i64,
    },
    /// A background job attempt ended: `outcome` is `completed`, `retried`, `failed` or `lost`
    /// (its claim was gone); `reason` the code-owned word of a failure.
    JobEnded {
        document: Uuid,
        job_type: String,
        outcome: String,
        reason: Option<String>,
    },
    /// A hand-over window ended with no resume; `cause` says whose return was missing.
    HandoverMissed {
        document: Uuid,
        login: String,
        cause: String,
    },
}

/// Receives [`PlannerEvent`]s as they happen, with the server's wall-clock time.
pub trait Observer: Send + Sync + 'static {
    fn planner_event(&self, at_ms: UnixMillis, event: PlannerEvent);
}
