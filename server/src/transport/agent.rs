//! The agent connection endpoint, `/api/v1/agent` (`chopin.agent.v1`).
//!
//! Owns: the checks before the upgrade (subprotocol 426; foreign Origin 403; bearer through
//! admission 401/403/503), the first frame (`attach` v1), the checks of an attach (document —
//! a child's attach goes to its root's Planner, ISO-30 — write access, a live browser sign-in),
//! answering `attached` or `refused` + close, strict frame handling (1008 / 1009 after an
//! `error` frame naming the fault, whether the frame was read whole or refused by the WebSocket
//! layer as too large or not UTF-8), liveness (pings; a link that answers nothing for
//! `AGENT_CONNECTION_TIMEOUT_MS` is closed as dropped), the account's access (asked at GitHub
//! afresh by the periodic recheck and, through [`LinkAccess`], before every session and turn),
//! the owner login's expiry, and closing when [`Planners`] says so; at a graceful stop, the cut
//! (the link's hold written, then `going-away` with `handoverMs`); `attached.kept`, the client's
//! `resume` and `resumed` (a resume inside a hand-over window waiting for its owner's sign-in);
//! routing the harness's session and turn frames ([`LinkCommand`]), and refusing as
//! `out-of-order` a frame that names a session or turn this link never opened.
//! Does not own: the attachment table and its timers ([`Planners`]), or what sessions and turns
//! do (the remote adapter, [`crate::harness::remote`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chopin_protocol::agent::{
    self as wire, ClientMessage, ErrorCode, ErrorFrame, Fault, Feature, Frame, LinkOrder,
    RefusalReason, ServerMessage, AGENT_PROTOCOL_VERSION, AGENT_SUBPROTOCOL, MAX_FRAME_BYTES,
};
use futures::stream::SplitStream;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::socket::{self, Outbox};
use super::{Routes, Table};
use crate::access::{bearer, Access};
use crate::documents::{self, Documents, Locator};
use crate::harness::port::{AccessDenied, LinkAccess, LinkCatalog, COMMAND_BACKLOG, ROUTE_BACKLOG};
use crate::harness::remote::START_TIMEOUT_MS;
use crate::identity::admission::{Admission, AdmissionError};
use crate::identity::github::GitHubError;
use crate::identity::sign_ins::{LiveLogin, LoginEnd, SignIns};
use crate::machines::{MachineAttach, Machines, PLANNER_CREDENTIAL_PREFIX};
use crate::metrics::{Metrics, SocketKind};
use crate::observe::PlannerEvent;
use crate::planner::{
    Bound, GraceHold, HeldWork, LinkCommand, LinkEnd, LinkHandle, Planners, Refusal,
    RevocationWatch, WindowWait,
};
use crate::questions::{Asking, Questions, Reply, Scope};
use crate::runs::{Control, Runs};
use crate::runtime::{SharedClock, SharedEntropy, Shutdown};
use crate::store::{Document, OwnershipStore};
use crate::turns::Turns;

/// The settings an attached link is told and kept to.
#[derive(Debug, Clone, Copy)]
pub struct LinkTimers {
    /// `AGENT_CONNECTION_TIMEOUT_MS`.
    pub connection_timeout_ms: u64,
    /// `PLANNER_ATTACH_GRACE_MS`.
    pub attach_grace_ms: u64,
    /// `AGENT_ACCESS_RECHECK_MS`.
    pub access_recheck_ms: u64,
    /// How long a link waits for `resume` ([`RESUME_WAIT`]); `None` only where the simulator
    /// plants the wait without a deadline.
    pub resume_wait_ms: Option<u64>,
}

/// What the agent socket uses.
#[derive(Clone)]
pub struct AgentDeps {
    /// Which documents this process serves (`PROCESSES=many`): an attach to one served
    /// elsewhere is refused `unavailable`, to attach again.
    pub serving: Arc<crate::serving::Serving>,
    pub access: Arc<Access>,
    pub admission: Arc<Admission>,
    pub documents: Arc<Documents>,
    pub planners: Arc<Planners>,
    pub ownership: Arc<dyn OwnershipStore>,
    pub sign_ins: Arc<SignIns>,
    pub clock: SharedClock,
    /// Ids for the sessions a resumed client takes back (their turns).
    pub entropy: SharedEntropy,
    pub timers: LinkTimers,
    /// The process's stop: every link is told `going-away` and closed 1001.
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// Where a link's `input-request`s become Decisions.
    pub questions: Arc<Questions>,
    /// Where a link's `runs` reports and `control-result`s go.
    pub runs: Arc<Runs>,
    /// A session kept for its runs is let go once a report says they all ended.
    pub turns: Arc<Turns>,
    /// Told when a client reports its catalog, so the rooms hear the new model state.
    pub models: Arc<crate::models::Models>,
    /// Paired machines: a backend attaching with a Planner credential (AC-20, AC-21).
    pub machines: Arc<Machines>,
}

pub fn routes(deps: AgentDeps) -> Routes {
    Table::new().get("/api/v1/agent", endpoint).with_state(deps)
}

/// Largest frame the WebSocket layer reads at all. Frames between [`MAX_FRAME_BYTES`] and this
/// are read whole, so the client's close handshake completes after `frame-too-large` (1009);
/// the layer refuses anything bigger by its header, without reading it (which bounds memory per
/// connection), and the link answers that `frame-too-large` too (see [`read_fault`]).
const READ_LIMIT_BYTES: usize = 4 * MAX_FRAME_BYTES;
/// How many sessions and turns a link remembers having opened after they ended, so a frame for
/// one of them is taken as stale (crossed on the wire) rather than `out-of-order`.
const OPENED_MEMORY: usize = 1024;
/// Longest wait for the first frame after the upgrade.
const ATTACH_WAIT: Duration = Duration::from_secs(30);
/// Longest wait for `resume` after an `attached` that named kept sessions: the same bound as
/// for `attach` itself.
pub const RESUME_WAIT: Duration = ATTACH_WAIT;
/// Pings go out at most this far apart.
const MAX_PING_INTERVAL_MS: u64 = 30_000;
/// The features this server implements and accepts when offered.
pub const SUPPORTED_FEATURES: &[Feature] = &[
    Feature::ResumableSessions,
    Feature::SteerTurn,
    Feature::CapabilityCatalog,
    Feature::RunStageDeltas,
    Feature::Attachments,
];
/// How long `abort` waits for `turn-end` (RT-09 ruling), told in `attached`.
pub const ABORT_WAIT_MS: u64 = 5_000;
/// `runs` reports of one link that may wait to be saved.
const REPORT_BACKLOG: usize = 64;
/// The `retryAfterMs` of an `unavailable` refusal or close.
const UNAVAILABLE_RETRY_MS: u64 = 5_000;

fn http_refusal(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let mut response = (
        status,
        Json(json!({ "error": code, "message": message.into() })),
    )
        .into_response();
    if status == StatusCode::UPGRADE_REQUIRED {
        response
            .headers_mut()
            .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    }
    response
}

fn offers_subprotocol(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == AGENT_SUBPROTOCOL)
}

/// `GET /api/v1/agent`: everything that can be refused over HTTP is refused before upgrading.
async fn endpoint(
    State(deps): State<AgentDeps>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(u) if offers_subprotocol(&headers) => u,
        _ => {
            return http_refusal(
                StatusCode::UPGRADE_REQUIRED,
                "subprotocol-required",
                format!("The agent connection is a WebSocket with the {AGENT_SUBPROTOCOL} subprotocol; offer it in Sec-WebSocket-Protocol."),
            )
        }
    };
    if deps.access.foreign_origin(&headers).is_some() {
        return http_refusal(
            StatusCode::FORBIDDEN,
            "foreign-origin",
            format!(
                "This Origin may not open the agent connection; only {} may (or send none).",
                deps.access.app_origin()
            ),
        );
    }
    let Some(mut token) = bearer(&headers).map(str::to_owned) else {
        return http_refusal(
            StatusCode::UNAUTHORIZED,
            "bad-credentials",
            "Send Authorization: Bearer <GitHub token> of the account that attaches, or a paired machine's Planner credential.",
        );
    };
    // A paired machine's backend attaches with a document-scoped Planner credential: its access
    // is then checked with the machine's own GitHub authorization (AC-20, AC-21).
    let mut machine = None;
    if token.starts_with(PLANNER_CREDENTIAL_PREFIX) {
        match deps.machines.recognise(&token).await {
            Ok(attach) => {
                token = attach.token.expose().to_owned();
                machine = Some(Arc::new(attach));
            }
            Err(e) => return http_refusal(e.status, e.code, e.message),
        }
    }
    let admitted = match deps.admission.check(&token).await {
        Ok(a) => a,
        Err(e) => {
            if let (Some(m), AdmissionError::BadCredentials) = (&machine, &e) {
                // GitHub refuses the machine's authorization: its delegated login ends (AC-23).
                deps.machines.authorization_refused(m.machine.id).await;
                return http_refusal(
                    StatusCode::FORBIDDEN,
                    "access-revoked",
                    "GitHub no longer accepts this machine's authorization; pair the machine again.",
                );
            }
            let code = match e {
                AdmissionError::BadCredentials => "bad-credentials",
                AdmissionError::Refused { .. } => "not-admitted",
                AdmissionError::Unavailable => "github-unavailable",
            };
            return http_refusal(e.http_status(), code, e.to_string());
        }
    };
    if let Some(m) = &machine {
        if admitted.user.id != m.account.github_user_id {
            return http_refusal(
                StatusCode::FORBIDDEN,
                "access-revoked",
                "This machine's GitHub authorization now names another account; pair the machine again.",
            );
        }
    }
    let login = admitted.user.login.clone();
    socket::tune(upgrade.protocols([AGENT_SUBPROTOCOL]), READ_LIMIT_BYTES).on_upgrade(
        move |socket| {
            let shutdown = deps.shutdown.clone();
            let (reader, out) = socket::split(
                socket,
                &shutdown,
                Duration::from_millis(deps.timers.connection_timeout_ms),
                &deps.metrics,
            );
            let open = deps.metrics.socket(SocketKind::Agent);
            shutdown.track(async move {
                let _open = open;
                let mut link = Link {
                    reader,
                    out,
                    order: LinkOrder::new(),
                    deps,
                    token,
                    github_user_id: admitted.user.id,
                    login,
                    last_heard: Instant::now(),
                    bound: None,
                    hold: None,
                    attaching: None,
                    end_on_close: None,
                    opened: Opened::default(),
                    reader_broken: false,
                    features: Vec::new(),
                    kept_work: false,
                    runs_saved: None,
                    awaiting_resume: None,
                    machine,
                };
                link.run().await;
            })
        },
    )
}

/// One upgraded connection.
struct Link {
    /// What the client sends, read only by this link's loop.
    reader: SplitStream<WebSocket>,
    /// What the link sends, written by the socket's writer task.
    out: Outbox,
    order: LinkOrder,
    deps: AgentDeps,
    token: String,
    github_user_id: i64,
    login: String,
    /// When the client was last heard from (any frame, pongs included).
    last_heard: Instant,
    /// The document and link id once attached.
    bound: Option<(uuid::Uuid, u64)>,
    /// A grace period this attach holds open while it is checked.
    hold: Option<GraceHold>,
    /// How the link ended on its own, once its close is being sent: the grace period starts as
    /// the close frame goes out, not after the client's answer (which a dead network never sends).
    end_on_close: Option<LinkEnd>,
    /// The document the attach resolved to, once it has.
    attaching: Option<uuid::Uuid>,
    /// The sessions and turns this link opened (`start`, `turn` sent).
    opened: Opened,
    /// The WebSocket layer refused a frame it could not read (too large, not UTF-8): nothing more
    /// can be read, and what the client still sends is never read.
    reader_broken: bool,
    /// The features accepted in `attached`.
    features: Vec<Feature>,
    /// The link dropped with work kept for its client (AO-11): nothing it asked is withdrawn.
    kept_work: bool,
    /// The task saving this link's `runs` reports; it ends once every queued report is saved.
    runs_saved: Option<tokio::task::JoinHandle<()>>,
    /// After `attached` told the client what was kept: the `resume` the link waits for.
    awaiting_resume: Option<AwaitedResume>,
    /// A paired machine's backend, attaching with its Planner credential: `token` is then the
    /// machine's GitHub authorization and the link owns through its delegated login.
    machine: Option<Arc<MachineAttach>>,
}

/// A hold's work offered in `attached.kept`, waiting for the client's `resume`.
struct AwaitedResume {
    /// The sessions `attached.kept` named.
    offered: Vec<String>,
    /// What the hold kept.
    work: HeldWork,
    /// When the client has waited too long ([`RESUME_WAIT`] after `attached`).
    deadline: Option<Instant>,
}

/// The sessions and turns a link opened, as `session:<id>` / `turn:<id>`: every one still open,
/// and the last [`OPENED_MEMORY`] that ended.
#[derive(Default)]
struct Opened {
    keys: BTreeSet<String>,
    order: VecDeque<String>,
}

impl Opened {
    fn open(&mut self, key: String) {
        if self.keys.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.order.len() > OPENED_MEMORY {
            if let Some(oldest) = self.order.pop_front() {
                self.keys.remove(&oldest);
            }
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// The ids of the sessions opened (and remembered).
    fn sessions(&self) -> BTreeSet<String> {
        self.keys
            .iter()
            .filter_map(|k| k.strip_prefix("session:"))
            .map(str::to_owned)
            .collect()
    }
}

/// Of the sessions a hold `held`, those the returning client does not take back: all of them
/// unless it offered `resumable-sessions` (`offered` is then what `attached.kept` told it) and
/// named them in its `resume`.
fn not_taken_back(
    held: &[String],
    offered: &[String],
    resume: Option<&wire::ClientResume>,
) -> BTreeSet<String> {
    held.iter()
        .filter(|s| !(offered.contains(s) && resume.is_some_and(|r| r.sessions.contains(s))))
        .cloned()
        .collect()
}

/// What an attach's checks found.
enum Checked {
    /// Every check passed: bind with this login.
    Ready(Arc<LiveLogin>, RevocationWatch),
    /// A resume inside a hand-over window before its owner's sign-in is back (HO-10).
    Waiting(RevocationWatch, WindowWait),
}

/// What ended the attached phase.
enum Ended {
    /// The connection went away without a close handshake; the ownership goes into its grace
    /// period now.
    OnItsOwn(LinkEnd),
    /// Closed with a handshake: the grace period (if any) started when the close was sent, or the
    /// server had already released the ownership.
    Done,
}

impl Link {
    async fn run(&mut self) {
        let stopping = self.deps.shutdown.stopping();
        let first = tokio::select! {
            first = tokio::time::timeout(ATTACH_WAIT, self.next_message()) => first,
            () = stopping => return self.going_away(None).await,
        };
        let attach = match first {
            Err(_) => {
                let fault = Fault::OutOfOrder {
                    message_type: "attach".into(),
                    rule: format!(
                        "the first message must be \"attach\", within {} s of the upgrade",
                        ATTACH_WAIT.as_secs()
                    ),
                };
                return self.fail(&fault).await;
            }
            Ok(Incoming::Gone) => return,
            Ok(Incoming::Fault(fault)) => return self.fail(&fault).await,
            Ok(Incoming::Message(ClientMessage::Attach(a))) => a,
            Ok(Incoming::Message(_)) => unreachable!("LinkOrder lets only attach come first"),
        };
        if attach.version != AGENT_PROTOCOL_VERSION {
            let fault = Fault::UnsupportedVersion {
                version: u64::from(attach.version),
            };
            return self.fail(&fault).await;
        }
        let unknown = attach.unknown_features();
        if !unknown.is_empty() {
            tracing::debug!(
                ?unknown,
                "attach offered features this server does not know"
            );
        }
        let planners = self.deps.planners.clone();
        // Features this server implements, of those offered, in the protocol's own order.
        let offered = attach.known_features();
        let features: Vec<Feature> = Feature::ALL
            .into_iter()
            .filter(|f| offered.contains(f) && SUPPORTED_FEATURES.contains(f))
            .collect();
        self.features = features.clone();
        let resumable = features.contains(&Feature::ResumableSessions);
        let checked = self.check_attach(&attach.document, resumable).await;
        let (doc, checked) = match checked {
            Ok(v) => v,
            Err(refusal) => {
                if let Some(hold) = self.hold.take() {
                    self.deps.planners.drop_hold(hold).await;
                }
                return self.refuse(refusal).await;
            }
        };
        let (commands, mut command_rx) = mpsc::channel(COMMAND_BACKLOG);
        let check = Arc::new(AccountCheck {
            admission: self.deps.admission.clone(),
            ownership: self.deps.ownership.clone(),
            planners: planners.clone(),
            token: self.token.clone(),
            account_id: crate::store::account_id_for_github_user(self.github_user_id),
            login: self.login.clone(),
            document: doc.id,
            repo_owner: doc.repo_owner.clone(),
            repo_name: doc.repo_name.clone(),
            bound: OnceLock::new(),
            machine: self
                .machine
                .as_ref()
                .map(|m| (self.deps.machines.clone(), m.machine.id)),
        });
        let handle = LinkHandle {
            commands,
            features: features.clone(),
            access: check.clone(),
            catalog: Arc::new(LinkCatalog::new(
                features.contains(&Feature::CapabilityCatalog),
            )),
        };
        // A resume inside a hand-over window that came before its owner's sign-in: `attached`
        // now, then the client's `resume` waits for the sign-in (HO-10).
        let (live, revocations, waited) = match checked {
            Checked::Ready(live, revocations) => (live, revocations, None),
            Checked::Waiting(revocations, wait) => {
                let Some((live, resume)) = self.wait_for_sign_in(&doc, wait, &features).await
                else {
                    return;
                };
                (live, revocations, Some(resume))
            }
        };
        let bound = planners
            .attach(doc.id, &live, &revocations, handle.clone())
            .await;
        drop(revocations);
        if let Some(hold) = self.hold.take() {
            planners.drop_hold(hold).await;
        }
        let bound = match bound {
            Ok(b) => b,
            Err(refusal) if waited.is_some() => {
                // `attached` was already sent: the link is closed instead of refused.
                let code = match refusal.reason {
                    RefusalReason::Unavailable => ErrorCode::Unavailable,
                    _ => ErrorCode::AccessRevoked,
                };
                return self.close_with(code, refusal.message).await;
            }
            Err(refusal) => return self.refuse(refusal).await,
        };
        self.bound = Some((doc.id, bound.link));
        let _ = check.bound.set((bound.link, bound.generation));
        let kept_work = bound.kept.clone();
        let kept = if resumable {
            kept_work.sessions.clone()
        } else {
            if !kept_work.sessions.is_empty() {
                // AO-12: a client that holds nothing to resume ends the hold.
                tracing::info!(document = %doc.id, login = %self.login, "the client offered no resumable-sessions; the sessions kept for it are let go");
            }
            if let Some(old) = kept_work.link {
                let why = "The Planner's client came back without the work kept for it.";
                self.deps.questions.withdraw_kept(doc.id, old, why).await;
            }
            Vec::new()
        };
        match waited {
            Some(resume) => {
                self.take_back(
                    &doc,
                    &live,
                    &handle,
                    bound.link,
                    kept_work,
                    &kept,
                    Some(resume),
                )
                .await
            }
            None => {
                let attached = wire::Attached {
                    document_id: doc.id.to_string(),
                    document_url: documents::canonical_url(&doc),
                    login: live.account.login.clone(),
                    generation: Some(bound.generation as u64),
                    features,
                    kept: kept.clone(),
                    timers: self.timers(),
                };
                if !self.send(&ServerMessage::Attached(attached)).await {
                    self.lost_before_resume(doc.id, bound.link, &kept, kept_work)
                        .await;
                    return;
                }
                if kept.is_empty() {
                    self.take_back(&doc, &live, &handle, bound.link, kept_work, &kept, None)
                        .await;
                } else {
                    // The client's `resume` is read by the attached loop, with every deadline,
                    // ping and close of an attached link — and its own deadline.
                    let wait = self.deps.timers.resume_wait_ms.map(Duration::from_millis);
                    self.deps.planners.emit(PlannerEvent::ResumeAwaited {
                        document: doc.id,
                        login: self.login.clone(),
                        until_ms: wait.map(|w| self.deps.clock.now_ms() + w.as_millis() as i64),
                    });
                    self.awaiting_resume = Some(AwaitedResume {
                        offered: kept,
                        work: kept_work,
                        deadline: wait.map(|w| Instant::now() + w),
                    });
                }
            }
        }
        let link = bound.link;
        let ended = self
            .attached(&doc, &live, bound, &check, &mut command_rx, &handle)
            .await;
        if let Ended::OnItsOwn(how) = ended {
            self.link_gone(doc.id, link, how).await;
        }
        if self.kept_work {
            // A resumable link that dropped with work kept withdraws nothing (RT-12): its
            // questions stay open and answerable, waited on for its client's return.
        } else if self.deps.shutdown.is_stopping() {
            // A stopping server withdraws nothing: the cards stay open for the next process.
            self.deps.questions.forget_link(link);
        } else {
            // The link closed for good: what it asked is withdrawn (RT-11).
            let url = documents::canonical_url(&doc);
            let why = "The Planner's connection closed.";
            self.deps
                .questions
                .withdraw(doc.id, &url, Scope::Link(link), why)
                .await;
            self.deps.questions.forget_link(link);
            self.deps.questions.forget_runs(doc.id);
            self.runs_closed(doc.id).await;
        }
    }

    /// The link ended on its own (`how`): a resumable link that dropped while its client held a
    /// kept session keeps the Planner with no deadline (AO-11); any other starts the grace
    /// period.
    async fn link_gone(&mut self, doc: uuid::Uuid, link: u64, how: LinkEnd) {
        let planners = self.deps.planners.clone();
        if let Some(awaited) = self.settle_resume(doc, "closed") {
            // Lost before its `resume` (a drop, a fault, silence, the resume's deadline): kept
            // again as for any drop; a detach lets it go.
            return self
                .lost_before_resume(doc, link, &awaited.offered, awaited.work)
                .await;
        }
        if how == LinkEnd::Dropped && self.features.contains(&Feature::ResumableSessions) {
            // A session kept past its turn, or the running turn's session, if it has work a
            // client would come back for (live runs, questions): held (AO-11, RULINGS RT-12).
            let session = match self.deps.turns.kept_session(doc) {
                Some(kept) => Some(kept),
                None => self.session_with_work(doc).await,
            };
            if let Some(session) = session {
                self.kept_work = true;
                let work = self.work_kept(doc, link, Some(session));
                planners.link_dropped_with_work(doc, link, work).await;
                return;
            }
        }
        planners.link_ended(doc, link, how).await;
    }

    /// What the client takes back of a hold's `work` (`offered` is what `attached.kept` told
    /// it; `resume` its answer, if any): the sessions it names are handed back, the others let
    /// go (their runs shown stopped), and answers that waited for an attached Planner get a
    /// turn (HO-15).
    #[allow(clippy::too_many_arguments)]
    async fn take_back(
        &mut self,
        doc: &Document,
        live: &Arc<LiveLogin>,
        handle: &LinkHandle,
        link: u64,
        work: HeldWork,
        offered: &[String],
        resume: Option<wire::ClientResume>,
    ) {
        let let_go = not_taken_back(&work.sessions, offered, resume.as_ref());
        if let Some(resume) = resume {
            self.hand_back(doc, live, handle, link, work, &resume).await;
        }
        self.runs_let_go(doc.id, let_go).await;
        let (turns, id) = (self.deps.turns.clone(), doc.id);
        self.deps
            .shutdown
            .spawn(async move { turns.start_answers(id).await });
    }

    /// The `resume` the link waited for, if it waited: it waits no more (`how`: `resumed` or
    /// `closed`).
    fn settle_resume(&mut self, doc: uuid::Uuid, how: &str) -> Option<AwaitedResume> {
        let awaited = self.awaiting_resume.take()?;
        self.deps.planners.emit(PlannerEvent::ResumeSettled {
            document: doc,
            login: self.login.clone(),
            how: how.to_owned(),
        });
        Some(awaited)
    }

    /// A link awaiting its client's `resume` was closed by an explicit act (a sign-out, an
    /// expiry, a reset, an archive, lost access): what the hold kept is let go, as when that act
    /// ends a hold (AO-12).
    async fn let_go_awaited(&mut self, doc: &Document) {
        let Some(awaited) = self.settle_resume(doc.id, "closed") else {
            return;
        };
        if let Some(old) = awaited.work.link {
            let why = "The Planner's client was closed before it took its work back.";
            self.deps.questions.withdraw_kept(doc.id, old, why).await;
        }
        let sessions: BTreeSet<String> = awaited.work.sessions.into_iter().collect();
        self.runs_let_go(doc.id, sessions).await;
    }

    /// A session this link opened that owns a live run or waits on a question.
    async fn session_with_work(&self, doc: uuid::Uuid) -> Option<String> {
        for session in self.opened.sessions() {
            if self.deps.questions.session_waits_in(doc, &session)
                || self.deps.runs.session_has_live(doc, &session).await
            {
                return Some(session);
            }
        }
        None
    }

    /// What `link`'s hold keeps for its client (AO-18): `session`, the questions the link
    /// waits on and the answers it could not take.
    fn work_kept(&self, doc: uuid::Uuid, link: u64, session: Option<String>) -> HeldWork {
        let (questions, answers) = self.deps.questions.kept_for(doc, link);
        HeldWork {
            sessions: session.into_iter().collect(),
            questions,
            answers,
            stops: Vec::new(),
            link: Some(link),
        }
    }

    /// After `attached` with `kept`, the client's `resume`: the sessions it still holds of those
    /// kept are handed back on this link (AO-19) and kept for the document's next turn; the
    /// others are gone. The questions its earlier link asked in those sessions are waited on
    /// for this link now and listed in `resumed.inputs`; those of the other sessions are
    /// withdrawn. A hold rebuilt by a later process has no such questions (HO-15). Then the
    /// answers owed to the client follow as `input-result`, each once (HO-16), and the Stops it
    /// has not heard are sent as `stop` (ATM-35).
    async fn hand_back(
        &mut self,
        doc: &Document,
        live: &Arc<LiveLogin>,
        handle: &LinkHandle,
        link: u64,
        kept: HeldWork,
        resume: &wire::ClientResume,
    ) {
        let handed: Vec<String> = kept
            .sessions
            .iter()
            .filter(|s| resume.sessions.contains(s))
            .cloned()
            .collect();
        for session in &handed {
            self.opened.open(format!("session:{session}"));
            let adopted = crate::harness::remote::resumed_session(
                handle.clone(),
                session.clone(),
                self.deps.entropy.clone(),
            );
            self.deps.turns.adopt_kept(doc.id, adopted, live.id).await;
        }
        let mut answers = kept.answers;
        let mut inputs = Vec::new();
        if let Some(old) = kept.link {
            let reply = Reply::Link(handle.clone());
            let (waited, owed) = self
                .deps
                .questions
                .rebind(doc.id, old, link, &reply, &handed);
            inputs = waited;
            answers.extend(owed);
            let why = "The Planner's client came back without the session that asked it.";
            self.deps.questions.withdraw_kept(doc.id, old, why).await;
        }
        tracing::info!(document = %doc.id, login = %self.login, handed = handed.len(), kept = kept.sessions.len(), inputs = inputs.len(), answers = answers.len(), stops = kept.stops.len(), "the client resumed its kept sessions");
        let resumed = ServerMessage::Resumed(wire::Resumed {
            sessions: handed,
            inputs,
        });
        if !self.send(&resumed).await {
            return;
        }
        for answer in answers {
            self.send(&ServerMessage::InputResult(answer)).await;
        }
        for stop in kept.stops {
            // Sent and waited on beside the link, which must go on reading to hear the answer.
            let runs = self.deps.runs.clone();
            let document = doc.id;
            self.deps.shutdown.spawn(async move {
                runs.control(document, stop.run_id.as_deref(), Control::Stop, &stop.login)
                    .await
            });
        }
    }

    /// The link was lost after `attached` told it what was kept and before its `resume`: a
    /// resumable client's work is kept again, as for any drop (AO-11); otherwise the grace
    /// period starts.
    async fn lost_before_resume(
        &mut self,
        doc: uuid::Uuid,
        link: u64,
        kept: &[String],
        work: HeldWork,
    ) {
        let planners = self.deps.planners.clone();
        if !kept.is_empty() {
            self.kept_work = true;
            planners.link_dropped_with_work(doc, link, work).await;
        } else {
            planners.link_ended(doc, link, LinkEnd::Dropped).await;
        }
    }

    /// A resume of a hand-over hold whose owner's browser sign-in is not back yet (HO-10):
    /// `attached` (with the kept sessions) goes out now, and the client's `resume` waits, the
    /// link kept and the machine shown attached, until the sign-in is back — then the login and
    /// the resume are returned, after the App installation check the attach would have made.
    /// If the window ends first, the link is closed `unavailable` with `retryAfterMs` (HO-11),
    /// never `sign-in-required`. `None` when the link was closed here.
    async fn wait_for_sign_in(
        &mut self,
        doc: &Document,
        mut wait: WindowWait,
        features: &[Feature],
    ) -> Option<(Arc<LiveLogin>, wire::ClientResume)> {
        let account_id = crate::store::account_id_for_github_user(self.github_user_id);
        let mut arrivals = self.deps.sign_ins.arrivals();
        let attached = wire::Attached {
            document_id: doc.id.to_string(),
            document_url: documents::canonical_url(doc),
            login: self.login.clone(),
            generation: Some(wait.generation as u64),
            features: features.to_vec(),
            kept: wait.sessions.clone(),
            timers: self.timers(),
        };
        tracing::info!(document = %doc.id, login = %self.login, "a resume inside the hand-over window waits for the owner's browser sign-in");
        if !self.send(&ServerMessage::Attached(attached)).await {
            return None;
        }
        let stopping = self.deps.shutdown.stopping();
        tokio::pin!(stopping);
        let mut resume: Option<wire::ClientResume> = None;
        // The link is pinged and held to its connection timeout while it waits, as when attached.
        let timeout_ms = self.deps.timers.connection_timeout_ms;
        let every = Duration::from_millis(ping_interval_ms(timeout_ms));
        let mut ping = tokio::time::interval_at(self.last_heard + every, every);
        let live = loop {
            let now = self.deps.clock.now_ms();
            if let Some(live) = self.deps.sign_ins.live_login_of(account_id, now) {
                if resume.is_some() {
                    break live;
                }
            }
            if *wait.ended.borrow() {
                tracing::info!(document = %doc.id, login = %self.login, "the hand-over window ended before the owner's browser sign-in was back; the resume is refused unavailable");
                let frame = ServerMessage::Error(ErrorFrame {
                    code: ErrorCode::Unavailable,
                    message: format!("@{}'s browser sign-in is not back on this server yet; resume again shortly.", self.login),
                    retry_after_ms: Some(UNAVAILABLE_RETRY_MS),
                    handover_ms: None,
                });
                self.send(&frame).await;
                self.close(
                    ErrorCode::Unavailable.close_code(),
                    ErrorCode::Unavailable.as_str(),
                )
                .await;
                return None;
            }
            tokio::select! {
                () = &mut stopping => {
                    self.going_away(None).await;
                    return None;
                }
                changed = arrivals.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = wait.ended.changed() => {}
                _ = ping.tick() => {
                    if self.out.send(Message::Ping(Default::default())).is_err() {
                        return None;
                    }
                }
                _ = tokio::time::sleep_until(self.last_heard + Duration::from_millis(timeout_ms)) => {
                    let words = format!("No answer to the server's pings for {timeout_ms} ms; the link is closed as dropped.");
                    self.close_with(ErrorCode::ConnectionTimeout, words).await;
                    return None;
                }
                incoming = self.next_message() => match incoming {
                    Incoming::Gone => return None,
                    Incoming::Fault(fault) => {
                        self.fail(&fault).await;
                        return None;
                    }
                    Incoming::Message(ClientMessage::Resume(r)) => resume = Some(r),
                    Incoming::Message(ClientMessage::Detach(_)) => {
                        self.close(wire::close::NORMAL, "detached").await;
                        return None;
                    }
                    Incoming::Message(other) => {
                        tracing::debug!(message = other.type_name(), "a frame while the resume waits for the sign-in; ignored");
                    }
                },
            }
        };
        // PERM-06 at admission, as for any attach.
        let refused = match self
            .deps
            .access
            .installation_covers(live.github_token(), &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(true) => None,
            Ok(false) => Some((ErrorCode::AccessRevoked, format!("This server's GitHub App is not installed on {}/{} for @{}, so the Planner could not use the repository; install it there, then attach again.", doc.repo_owner, doc.repo_name, self.login))),
            Err(GitHubError::BadCredentials) => Some((ErrorCode::SignInRequired, format!("GitHub no longer accepts @{}'s browser sign-in on this server; sign in again, then attach again.", self.login))),
            Err(GitHubError::Unavailable(_)) => Some((ErrorCode::Unavailable, "GitHub is unavailable, so the Planner's access cannot be checked; resume again shortly.".to_owned())),
        };
        if let Some((code, message)) = refused {
            self.close_with(code, message).await;
            return None;
        }
        drop(wait);
        resume.map(|r| (live, r))
    }

    fn timers(&self) -> wire::Timers {
        let c = &self.deps.timers;
        wire::Timers {
            ping_interval_ms: ping_interval_ms(c.connection_timeout_ms),
            connection_timeout_ms: c.connection_timeout_ms,
            attach_grace_ms: c.attach_grace_ms,
            start_timeout_ms: START_TIMEOUT_MS,
            abort_wait_ms: ABORT_WAIT_MS,
            access_recheck_ms: c.access_recheck_ms,
        }
    }

    /// The attach's document, and the owner login it will claim with and the revocation count
    /// read before the checks — or, for a resume inside its hand-over window that came before
    /// its owner's sign-in, the wait for it (HO-10).
    async fn check_attach(
        &mut self,
        locator: &str,
        resumable: bool,
    ) -> Result<(Document, Checked), Refusal> {
        let shown: String = locator.chars().take(120).collect();
        let shown = if shown.len() < locator.len() {
            format!("{shown}…")
        } else {
            shown
        };
        let not_found = || {
            Refusal {
            reason: RefusalReason::DocumentNotFound,
            message: format!("No document {shown:?} that can take a Planner: it does not exist, is archived, or is not a document id or /documents/<owner>/<repo>/<slug> URL."),
            holder: None,
        }
        };
        let locator_parsed = Locator::parse(locator).ok_or_else(not_found)?;
        if let Locator::Path { owner, repo, .. } = &locator_parsed {
            // A URL names its repository: access to it is decided before the store is read, so
            // an account that cannot read the repository learns nothing of which slugs exist.
            match self.deps.access.repo_access(&self.token, owner, repo).await {
                Ok(Some(a)) if a.pull || a.can_write() => {}
                Ok(_) => return Err(not_found()),
                Err(e) => return Err(github_refusal(e)),
            }
        }
        let named = self
            .deps
            .documents
            .resolve(&locator_parsed)
            .await
            .map_err(Refusal::storage)?
            .filter(|d| !d.archived)
            .ok_or_else(not_found)?;
        // ISO-30: a child's Planner is its root's, so an attach naming a child holds the root's
        // (a live root, in the same repository).
        let doc = match named.parent_id {
            None => named,
            Some(root_id) => self
                .deps
                .documents
                .resolve(&Locator::Id(root_id))
                .await
                .map_err(Refusal::storage)?
                .filter(|root| {
                    !root.archived
                        && root.parent_id.is_none()
                        && root.repo_owner.eq_ignore_ascii_case(&named.repo_owner)
                        && root.repo_name.eq_ignore_ascii_case(&named.repo_name)
                })
                .ok_or_else(not_found)?,
        };
        match self.deps.serving.serve(doc.id).await {
            Ok(crate::serving::Serve::Here) => {}
            Ok(crate::serving::Serve::Elsewhere { .. }) => {
                return Err(Refusal {
                    reason: RefusalReason::Unavailable,
                    message: format!("Another server process serves document {} now; attach again through the balancer, naming the document in the URL (?document={}).", doc.id, doc.id),
                    holder: None,
                })
            }
            Err(e) => return Err(Refusal::storage(e)),
        }
        if let Some(m) = &self.machine {
            if m.document_id != doc.id {
                return Err(Refusal {
                    reason: RefusalReason::DocumentNotFound,
                    message: format!("This Planner credential is for document {}, not {shown:?}; the connector asks for one per document.", m.document_id),
                    holder: None,
                });
            }
        }
        let revocations = self.deps.planners.revocations(doc.id);
        let account_id = crate::store::account_id_for_github_user(self.github_user_id);
        // The attach arrived now: a grace period of this account stays open while it is checked.
        self.hold = self.deps.planners.hold_grace(doc.id, account_id);
        self.attaching = Some(doc.id);
        self.deps.planners.emit(PlannerEvent::AttachReceived {
            document: doc.id,
            login: self.login.clone(),
        });
        // Held by another account when the attach arrived: refused as it stood then (AO-06,
        // AO-10) — but only once write access is confirmed, so the holder's login is never told
        // to an account that may not see the document.
        let held_on_arrival = self.deps.planners.held_by_other(doc.id, account_id);
        let access = self
            .deps
            .access
            .repo_access(&self.token, &doc.repo_owner, &doc.repo_name)
            .await;
        match access {
            Ok(Some(a)) if a.can_write() => {
                if let Some(holder) = held_on_arrival {
                    return Err(Refusal::attached(&holder));
                }
            }
            Ok(Some(a)) if a.pull => {
                return Err(Refusal {
                    reason: RefusalReason::NoWriteAccess,
                    message: format!("@{} cannot push to {}/{}; attaching a Planner needs push or administration access.", self.login, a.owner, a.repo),
                    holder: None,
                })
            }
            // Unreadable looks like missing.
            Ok(_) => return Err(not_found()),
            Err(e) => return Err(github_refusal(e)),
        }
        let now = self.deps.clock.now_ms();
        // A paired machine owns through its delegated login, which no browser holds (AC-21).
        let delegated = self
            .machine
            .as_ref()
            .map(|m| self.deps.machines.delegated_login(m));
        let live = match delegated {
            Some(delegated) => Some(delegated),
            None => {
                self.deps
                    .sign_ins
                    .live_login_of_account(account_id, now)
                    .await
            }
        };
        let Some(live) = live else {
            // Inside the account's hand-over window the missing sign-in is waited for, never
            // refused sign-in-required (HO-10, HO-11): a resume waits; an attach with nothing to
            // resume is told to come back.
            if let Some(wait) = self.deps.planners.await_window(doc.id, account_id) {
                if resumable && !wait.sessions.is_empty() {
                    return Ok((doc, Checked::Waiting(revocations, wait)));
                }
                return Err(Refusal {
                    reason: RefusalReason::Unavailable,
                    message: format!("@{}'s browser sign-in is not back on this server yet; attach again shortly.", self.login),
                    holder: None,
                });
            }
            return Err(Refusal {
                reason: RefusalReason::SignInRequired,
                message: format!("@{} has no live browser sign-in on this server since it started; sign in at {} in a browser, then attach again.", self.login, self.deps.access.app_origin()),
                holder: None,
            });
        };
        // PERM-06 at admission: the Planner's repository tools run with the owner login's
        // GitHub App token, so the App's installation must cover the repository for it.
        match self
            .deps
            .access
            .installation_covers(live.github_token(), &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                return Err(Refusal {
                    reason: RefusalReason::NoWriteAccess,
                    message: format!("This server's GitHub App is not installed on {}/{} for @{}, so the Planner could not use the repository; install it there (or add the repository to its installation), then attach again.", doc.repo_owner, doc.repo_name, self.login),
                    holder: None,
                })
            }
            Err(GitHubError::BadCredentials) => {
                return Err(Refusal {
                    reason: RefusalReason::SignInRequired,
                    message: format!("GitHub no longer accepts @{}'s browser sign-in on this server; sign in again at {} in a browser, then attach again.", self.login, self.deps.access.app_origin()),
                    holder: None,
                })
            }
            Err(e @ GitHubError::Unavailable(_)) => return Err(github_refusal(e)),
        }
        Ok((doc, Checked::Ready(live, revocations)))
    }

    /// The attached phase: until the client detaches or drops, or the server closes the link.
    async fn attached(
        &mut self,
        doc: &Document,
        live: &Arc<LiveLogin>,
        mut bound: Bound,
        check: &AccountCheck,
        commands: &mut mpsc::Receiver<LinkCommand>,
        handle: &LinkHandle,
    ) -> Ended {
        // The harness's sessions and turns, by `session:<id>` / `turn:<id>`. Dropped with the
        // link, which tells each that the client is gone.
        let mut routes: BTreeMap<String, mpsc::Sender<ClientMessage>> = BTreeMap::new();
        let reports = self.runs_worker(doc.id);
        let mut commands_open = true;
        let c = self.deps.timers;
        let timeout = Duration::from_millis(c.connection_timeout_ms);
        // Pings run on from the client's last frame: a link that waited before this loop (for
        // its owner's sign-in, HO-10) is pinged at once if it has been quiet a whole interval.
        let every = Duration::from_millis(ping_interval_ms(c.connection_timeout_ms));
        let mut ping = tokio::time::interval_at(self.last_heard + every, every);
        let mut recheck = tokio::time::interval(Duration::from_millis(c.access_recheck_ms));
        recheck.reset();
        let now_ms = self.deps.clock.now_ms();
        let expiry = tokio::time::sleep(Duration::from_millis(
            (live.expires_at_ms - now_ms).max(0) as u64,
        ));
        tokio::pin!(expiry);
        let mut expired = false;
        let stopping = self.deps.shutdown.stopping();
        let writer_ended = self.out.ended();
        tokio::pin!(stopping, writer_ended);
        loop {
            let silent_until = self.last_heard + timeout;
            let awaiting = self.awaiting_resume.is_some();
            let resume_due = self.awaiting_resume.as_ref().and_then(|a| a.deadline);
            tokio::select! {
                () = &mut stopping => {
                    // The process is stopping (the cut): the link's hold is written for the next
                    // process, then the link is told so and closed 1001. No grace period starts
                    // and nothing is released; the next process decides (HO-01, HO-17).
                    let work = if let Some(awaited) = self.settle_resume(doc.id, "closed") {
                        // Not taken back yet: the hold keeps what it kept.
                        awaited.work
                    } else if self.features.contains(&Feature::ResumableSessions) {
                        let session = self.deps.turns.kept_session(doc.id);
                        self.work_kept(doc.id, bound.link, session)
                    } else {
                        HeldWork::default()
                    };
                    let handover = self.deps.planners.cut(doc.id, bound.link, work).await;
                    self.going_away(handover).await;
                    return Ended::Done;
                }
                incoming = self.next_message() => match incoming {
                    Incoming::Gone => return Ended::OnItsOwn(LinkEnd::Dropped),
                    Incoming::Fault(fault) => {
                        self.end_on_close = Some(LinkEnd::Dropped);
                        self.fail(&fault).await;
                        return Ended::Done;
                    }
                    Incoming::Message(ClientMessage::Detach(_)) => {
                        self.end_on_close = Some(LinkEnd::Detached);
                        self.close(wire::close::NORMAL, "detached").await;
                        return Ended::Done;
                    }
                    Incoming::Message(ClientMessage::Resume(resume)) => {
                        // The order rules let `resume` come only first after a non-empty
                        // `attached.kept`, which is when a resume is awaited.
                        if let Some(awaited) = self.settle_resume(doc.id, "resumed") {
                            self.take_back(doc, live, handle, bound.link, awaited.work, &awaited.offered, Some(resume)).await;
                        }
                    }
                    Incoming::Message(ClientMessage::ControlResult(result)) => {
                        self.deps.runs.control_result(result);
                    }
                    Incoming::Message(ClientMessage::Catalog(catalog)) => {
                        // Each report replaces the last (MOD-29); the rooms read it again.
                        if handle.catalog.report(catalog) {
                            self.deps.models.changed(doc.id);
                        }
                    }
                    Incoming::Message(ClientMessage::InputCancel(cancel)) => {
                        self.withdraw_later(doc, Scope::Request(bound.link, cancel.request_id), "The Planner cancelled the question.".to_owned());
                    }
                    Incoming::Message(other) => {
                        let turn = other.turn_id().map(|t| format!("turn:{t}"));
                        let session = other.session_id().map(|s| format!("session:{s}"));
                        // Order rule 20: a frame naming a session or turn this link never
                        // opened is a fault; one naming one that has ended is stale.
                        if let Some(never) = [&turn, &session]
                            .into_iter()
                            .flatten()
                            .find(|k| !self.opened.contains(k))
                        {
                            let (kind, id) = never.split_once(':').unwrap_or(("", never));
                            let fault = Fault::OutOfOrder {
                                message_type: other.type_name().to_owned(),
                                rule: format!("it names {kind} \"{id}\", which the server never opened on this connection"),
                            };
                            self.end_on_close = Some(LinkEnd::Dropped);
                            self.fail(&fault).await;
                            return Ended::Done;
                        }
                        if let ClientMessage::InputRequest(request) = other {
                            self.ask_later(doc, bound.link, request);
                            continue;
                        }
                        if let ClientMessage::Runs(report) = other {
                            // Saved one after another, in the order they came, without holding
                            // up the link; a client that reports faster than storage takes them
                            // is at fault. What it says counts at once (a `turn-end` right
                            // behind it keeps the session its live run needs).
                            self.deps.runs.queued(doc.id, &report);
                            if let Err(mpsc::error::TrySendError::Full(_)) = reports.try_send(report) {
                                let fault = Fault::OutOfOrder {
                                    message_type: "runs".to_owned(),
                                    rule: format!("at most {REPORT_BACKLOG} runs reports may wait for the server to save them"),
                                };
                                self.end_on_close = Some(LinkEnd::Dropped);
                                self.fail(&fault).await;
                                return Ended::Done;
                            }
                            continue;
                        }
                        let key = turn.or(session);
                        match key.and_then(|k| routes.get(&k)) {
                            Some(to) => {
                                if let Err(mpsc::error::TrySendError::Full(flooded)) = to.try_send(other) {
                                    let fault = Fault::OutOfOrder {
                                        message_type: flooded.type_name().to_owned(),
                                        rule: format!("at most {ROUTE_BACKLOG} frames of one session or turn may wait for the server to read them"),
                                    };
                                    self.end_on_close = Some(LinkEnd::Dropped);
                                    self.fail(&fault).await;
                                    return Ended::Done;
                                }
                            }
                            // A frame for a session or turn the server has already ended is
                            // stale, not a fault (the two crossed on the wire).
                            None => tracing::debug!(message = other.type_name(), "frame for no open session or turn; ignored"),
                        }
                    }
                },
                // Nothing goes to a client before it has taken its work back.
                command = commands.recv(), if commands_open && !awaiting => match command {
                    Some(LinkCommand::Send(message)) => {
                        // An aborted turn, or a session let go, takes its questions along.
                        match message.as_ref() {
                            ServerMessage::Abort(abort) => {
                                let why = abort.message.clone().unwrap_or_else(|| "The Planner's turn was stopped.".to_owned());
                                self.withdraw_later(doc, Scope::Turn(bound.link, abort.turn_id.clone()), why);
                            }
                            ServerMessage::Destroy(destroy) => {
                                let why = "The Planner's session ended.".to_owned();
                                self.withdraw_later(doc, Scope::Session(bound.link, destroy.session_id.clone()), why);
                            }
                            _ => {}
                        }
                        if !self.send(&message).await {
                            return Ended::OnItsOwn(LinkEnd::Dropped);
                        }
                    }
                    Some(LinkCommand::Route { key, to }) => {
                        routes.insert(key, to);
                    }
                    Some(LinkCommand::Unroute { key }) => {
                        routes.remove(&key);
                    }
                    None => commands_open = false,
                },
                // The writer ended: the connection failed, or the client read nothing for the
                // write bound (a slow consumer).
                () = &mut writer_ended => return Ended::OnItsOwn(LinkEnd::Dropped),
                closing = bound.closing.recv() => {
                    // What was queued for the client before the close (an `input-result` of a
                    // question the close withdrew, say) goes out first.
                    while let Ok(command) = commands.try_recv() {
                        if let LinkCommand::Send(message) = command {
                            if !self.send(&message).await {
                                break;
                            }
                        }
                    }
                    // An explicit act closes it: what a hold kept and the client has not taken
                    // back yet is let go, as the act would have let the hold go.
                    self.let_go_awaited(doc).await;
                    if let Some(closing) = closing {
                        self.close_with(closing.code, closing.message).await;
                    }
                    return Ended::Done;
                }
                _ = tokio::time::sleep_until(resume_due.unwrap_or(silent_until)), if resume_due.is_some() => {
                    tracing::info!(document = %doc.id, login = %self.login, "the client did not resume within the bound; closing the link as dropped");
                    let fault = Fault::OutOfOrder {
                        message_type: "resume".into(),
                        rule: format!(
                            "\"attached\" named kept sessions: \"resume\" must follow within {} s",
                            RESUME_WAIT.as_secs()
                        ),
                    };
                    // A fault is a drop: the work is held again for the client's return.
                    self.end_on_close = Some(LinkEnd::Dropped);
                    self.fail(&fault).await;
                    return Ended::Done;
                }
                _ = tokio::time::sleep_until(silent_until) => {
                    tracing::info!(document = %doc.id, login = %self.login, "Planner link answered nothing for the connection timeout; closing it as dropped");
                    let words = format!("No answer to the server's pings for {} ms; the link is closed as dropped.", c.connection_timeout_ms);
                    self.end_on_close = Some(LinkEnd::Dropped);
                    self.close_with(ErrorCode::ConnectionTimeout, words).await;
                    return Ended::Done;
                }
                _ = ping.tick() => {
                    if self.out.send(Message::Ping(Default::default())).is_err() {
                        return Ended::OnItsOwn(LinkEnd::Dropped);
                    }
                }
                _ = recheck.tick() => {
                    // An outage (of storage or GitHub) changes nothing; a loss closes the link
                    // (the closing order is queued, and the next turn of the loop sends it).
                    check.recheck_and_revoke().await;
                }
                _ = &mut expiry, if !expired => {
                    expired = true;
                    let _ = self.deps.planners.end_login(live, LoginEnd::Expired).await;
                    // As above: `end_login` queued the close for this link.
                }
            }
        }
    }

    /// The next data frame, decoded and order-checked. Control frames count as heard.
    async fn next_message(&mut self) -> Incoming {
        loop {
            let message = match self.reader.next().await {
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    return match read_fault(error) {
                        Some(fault) => {
                            self.reader_broken = true;
                            Incoming::Fault(fault)
                        }
                        None => Incoming::Gone,
                    }
                }
                None => return Incoming::Gone,
            };
            self.last_heard = Instant::now();
            if let Some((doc, link)) = self.bound {
                let now = self.deps.clock.now_ms();
                self.deps.planners.heard(doc, link, now);
            }
            let decoded = match &message {
                Message::Text(text) => wire::check_frame_size(text.len())
                    .and_then(|()| wire::decode_client_frame(Frame::Text(text.as_str()))),
                Message::Binary(bytes) => wire::decode_client_frame(Frame::Binary(bytes)),
                Message::Close(_) => return Incoming::Gone,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            return match decoded.and_then(|m| self.order.check_client(&m).map(|()| m)) {
                Ok(m) => Incoming::Message(m),
                Err(fault) => Incoming::Fault(fault),
            };
        }
    }

    async fn send(&mut self, message: &ServerMessage) -> bool {
        if let Err(fault) = self.order.check_server(message) {
            tracing::error!(%fault, "the server broke the agent protocol; not sending");
            return false;
        }
        let text = wire::encode(message);
        if let Err(fault) = wire::check_frame_size(text.len()) {
            // Nothing the server sends may pass the limit either: a bug, told as `internal`.
            tracing::error!(message = message.type_name(), %fault, "the server made a frame larger than the agent connection allows; closing the link");
            let internal = ServerMessage::Error(ErrorFrame {
                code: ErrorCode::Internal,
                message: format!("The server failed: its \"{}\" frame would have been {} bytes, more than one frame carries. Attach again.", message.type_name(), text.len()),
                retry_after_ms: None,
                handover_ms: None,
            });
            let _ = self.order.check_server(&internal);
            let _ = self.out.send(Message::Text(wire::encode(&internal).into()));
            let _ = self.out.close(
                ErrorCode::Internal.close_code(),
                ErrorCode::Internal.as_str(),
            );
            return false;
        }
        match message {
            ServerMessage::Start(start) => {
                self.opened.open(format!("session:{}", start.session_id))
            }
            ServerMessage::Turn(turn) => self.opened.open(format!("turn:{}", turn.turn_id)),
            _ => {}
        }
        match self.out.send(Message::Text(text.into())) {
            Ok(()) => true,
            Err(why) => {
                tracing::info!(login = %self.login, ?why, "the agent link's client is not reading; dropping it");
                false
            }
        }
    }

    async fn close(&mut self, code: u16, reason: &str) {
        let _ = self.out.close(code, reason);
        if let (Some(how), Some((doc, link))) = (self.end_on_close.take(), self.bound) {
            self.link_gone(doc, link, how).await;
        }
        if self.reader_broken {
            // What the client sent after the refused frame is unread, and a connection closed
            // with unread data is reset, which can overtake the frames just sent: keep it open
            // until the close is out, and a moment more for the client to read it.
            let stopping = self.deps.shutdown.stopping();
            let _ = tokio::time::timeout(Duration::from_secs(5), self.out.ended()).await;
            tokio::select! {
                () = tokio::time::sleep(socket::LINGER) => {}
                () = stopping => {}
            }
            return;
        }
        // Let the client's close answer arrive, briefly; the connection ends either way.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(Ok(m)) = self.reader.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }

    /// The link closed for good: the runs its sessions reported and left live are shown stopped
    /// (RT-11), once every report it sent is saved.
    async fn runs_closed(&mut self, document: uuid::Uuid) {
        if let Some(saving) = self.runs_saved.take() {
            let _ = saving.await;
        }
        let sessions = self.opened.sessions();
        self.deps.runs.client_gone(document, Some(&sessions)).await;
    }

    /// Sessions a hold kept that the returning client did not take back are gone (AO-12): their
    /// live runs are shown stopped.
    async fn runs_let_go(&self, document: uuid::Uuid, sessions: BTreeSet<String>) {
        if !sessions.is_empty() {
            self.deps.runs.client_gone(document, Some(&sessions)).await;
        }
    }

    /// The process is stopping: `going-away`, then the close 1001 (AO, HO-17: no Chat line).
    /// The queue of this link's `runs` reports, saved in order by a task of their own that
    /// ends with the link.
    fn runs_worker(&mut self, document: uuid::Uuid) -> mpsc::Sender<wire::Runs> {
        let (reports, mut queued) = mpsc::channel::<wire::Runs>(REPORT_BACKLOG);
        let runs = self.deps.runs.clone();
        let turns = self.deps.turns.clone();
        let deltas = self.features.contains(&Feature::RunStageDeltas);
        self.runs_saved = Some(self.deps.shutdown.spawn(async move {
            while let Some(report) = queued.recv().await {
                runs.report(document, report, deltas).await;
                turns.release_idle_kept(document).await;
            }
        }));
        reports
    }

    /// Hands an `input-request` to the questions, which answer through the link's commands.
    fn ask_later(&self, doc: &Document, link: u64, request: wire::InputRequest) {
        let Some(reply) = self.deps.planners.link_for(doc.id) else {
            return;
        };
        let questions = self.deps.questions.clone();
        let asking = Asking {
            document: doc.id,
            document_url: documents::canonical_url(doc),
            link,
            request,
            reply: Reply::Link(reply),
        };
        // Taken in now, so an `input-cancel` or abort that follows at once finds it.
        if let Some(placing) = questions.register(asking) {
            self.deps
                .shutdown
                .spawn(async move { questions.place(placing).await });
        }
    }

    /// Withdraws the questions `scope` takes, without holding up the link.
    fn withdraw_later(&self, doc: &Document, scope: Scope, why: String) {
        let questions = self.deps.questions.clone();
        let (id, url) = (doc.id, documents::canonical_url(doc));
        self.deps.shutdown.spawn(async move {
            questions.withdraw(id, &url, scope, &why).await;
        });
    }

    /// The process is stopping: `going-away`, then the close 1001 (HO-17: no Chat line). With
    /// `handover_ms` when the link's hold was written for the next process (HO-01).
    async fn going_away(&mut self, handover_ms: Option<u64>) {
        tracing::info!(login = %self.login, ?handover_ms, "the server is stopping; telling the link going-away");
        let message = match handover_ms {
            Some(ms) => format!("This server is restarting. Attach again and resume: your work is kept for {ms} ms after the next server takes over."),
            None => "This server is stopping; attach again in a moment.".to_owned(),
        };
        let frame = ServerMessage::Error(ErrorFrame {
            code: ErrorCode::GoingAway,
            message,
            retry_after_ms: None,
            handover_ms,
        });
        self.send(&frame).await;
        self.close_bound(
            ErrorCode::GoingAway.close_code(),
            ErrorCode::GoingAway.as_str(),
        )
        .await;
    }

    /// An `error` frame naming why, then the close with the code's close code.
    async fn close_with(&mut self, code: ErrorCode, message: String) {
        let frame = ServerMessage::Error(ErrorFrame {
            code,
            message,
            retry_after_ms: (code == ErrorCode::Unavailable).then_some(UNAVAILABLE_RETRY_MS),
            handover_ms: None,
        });
        self.send(&frame).await;
        self.close_bound(code.close_code(), code.as_str()).await;
    }

    /// Closes with `code`/`reason`, telling the observer first if the link was bound.
    async fn close_bound(&mut self, code: u16, reason: &str) {
        if let Some((doc, _)) = self.bound {
            self.deps.planners.emit(PlannerEvent::Closed {
                document: doc,
                login: self.login.clone(),
                code,
                reason: reason.to_owned(),
            });
        }
        self.close(code, reason).await;
    }

    /// A protocol fault: its frame, then its close (AC-05, AC-06).
    async fn fail(&mut self, fault: &Fault) {
        tracing::info!(login = %self.login, %fault, "agent protocol fault; closing");
        // Not order-checked: a fault may come before the order rules saw any frame (an
        // `attach` of another version is refused while still undecoded).
        let text = wire::encode(&fault.frame());
        let _ = self.out.send(Message::Text(text.into()));
        self.close_bound(fault.close_code(), fault.close_reason())
            .await;
    }

    async fn refuse(&mut self, refusal: Refusal) {
        tracing::info!(login = %self.login, reason = %refusal.reason, "attach refused");
        self.deps.planners.emit(PlannerEvent::AttachRefused {
            document: self.attaching,
            login: self.login.clone(),
            reason: refusal.reason.as_str().to_owned(),
        });
        let frame = ServerMessage::Refused(wire::Refused {
            reason: refusal.reason,
            message: refusal.message,
            holder: refusal.holder,
            retry_after_ms: (refusal.reason == RefusalReason::Unavailable)
                .then_some(UNAVAILABLE_RETRY_MS),
        });
        self.send(&frame).await;
        self.close(refusal.reason.close_code(), refusal.reason.as_str())
            .await;
    }
}

/// The fault of a frame the WebSocket layer refused to read (see [`socket::Unreadable`]).
fn read_fault(error: axum::Error) -> Option<Fault> {
    Some(match socket::Unreadable::of(error)? {
        socket::Unreadable::TooLarge { bytes } => Fault::TooLarge { bytes },
        socket::Unreadable::NotUtf8 { detail } => Fault::NotUtf8 { detail },
    })
}

/// The attached account's right to hold the Planner, asked at GitHub afresh (its cached
/// verdicts dropped first): storage still names the account at the link's generation, the
/// account is admitted, and it can push to the repository. The periodic recheck asks it, and so
/// does the harness before every session and turn (AC-18, as [`LinkAccess`]). Holds the link's
/// bearer token, which goes only to GitHub.
struct AccountCheck {
    admission: Arc<Admission>,
    ownership: Arc<dyn OwnershipStore>,
    planners: Arc<Planners>,
    token: String,
    account_id: uuid::Uuid,
    login: String,
    document: uuid::Uuid,
    repo_owner: String,
    repo_name: String,
    /// The link's id and generation, once bound.
    bound: OnceLock<(u64, i64)>,
    /// A paired machine's link: GitHub refusing the token ends the machine's delegated login.
    machine: Option<(Arc<Machines>, uuid::Uuid)>,
}

/// What [`AccountCheck::verdict`] found.
enum Verdict {
    Holds,
    /// GitHub refuses a paired machine's authorization (AC-23).
    MachineRefused,
    /// Gone, and why.
    Lost(String),
    /// GitHub could not be asked.
    Unknown(String),
}

impl AccountCheck {
    async fn verdict(&self) -> Verdict {
        if let Some((_, generation)) = self.bound.get() {
            // A storage outage decides nothing.
            if let Ok(o) = self.ownership.ownership(self.document).await {
                let ours = o.generation == *generation
                    && o.holder.as_ref().map(|h| h.account_id) == Some(self.account_id);
                if !ours {
                    return Verdict::Lost(
                        "Storage no longer names this link's account as the document's Planner owner."
                            .to_owned(),
                    );
                }
            }
        }
        let admission = &self.admission;
        admission.invalidate(&self.token);
        match admission.check(&self.token).await {
            Ok(_) => {}
            Err(AdmissionError::Unavailable) => {
                return Verdict::Unknown(AdmissionError::Unavailable.to_string())
            }
            Err(AdmissionError::BadCredentials) if self.machine.is_some() => {
                return Verdict::MachineRefused
            }
            Err(e) => return Verdict::Lost(e.to_string()),
        }
        match admission
            .repo_access_cached(&self.token, &self.repo_owner, &self.repo_name)
            .await
        {
            Ok(Some(a)) if a.can_write() => Verdict::Holds,
            Ok(_) => Verdict::Lost(format!(
                "@{} can no longer push to {}/{}; a Planner needs push or administration access.",
                self.login, self.repo_owner, self.repo_name
            )),
            Err(GitHubError::BadCredentials) => {
                Verdict::Lost("GitHub no longer accepts this link's token.".to_owned())
            }
            Err(GitHubError::Unavailable(_)) => Verdict::Unknown(
                "GitHub is unavailable, so this Planner's access cannot be checked; try again shortly."
                    .to_owned(),
            ),
        }
    }

    /// The verdict, with a loss acted on: the link is told to close `access-revoked` and the
    /// document is freed.
    async fn recheck_and_revoke(&self) -> Verdict {
        let verdict = self.verdict().await;
        if let (Verdict::MachineRefused, Some((machines, machine))) = (&verdict, &self.machine) {
            tracing::info!(document = %self.document, login = %self.login, machine = %machine, "GitHub refuses the machine's authorization");
            // Every link of the machine's delegated login closes `access-revoked`, this one too.
            machines.authorization_refused(*machine).await;
        }
        if let Verdict::Lost(why) = &verdict {
            tracing::info!(document = %self.document, login = %self.login, %why, "Planner link lost access");
            if let Some((link, _)) = self.bound.get() {
                self.planners
                    .revoke_link(self.document, *link, why.clone())
                    .await;
            }
        }
        verdict
    }
}

#[async_trait]
impl LinkAccess for AccountCheck {
    async fn recheck(&self) -> Result<(), AccessDenied> {
        match self.recheck_and_revoke().await {
            Verdict::Holds => Ok(()),
            Verdict::Lost(why) => Err(AccessDenied::Revoked(why)),
            Verdict::MachineRefused => Err(AccessDenied::Revoked(
                "GitHub no longer accepts this machine's authorization.".to_owned(),
            )),
            Verdict::Unknown(why) => Err(AccessDenied::Unknown(why)),
        }
    }
}

/// Pings go out four times per connection timeout, at most every 30 s.
pub fn ping_interval_ms(connection_timeout_ms: u64) -> u64 {
    (connection_timeout_ms / 4).clamp(1, MAX_PING_INTERVAL_MS)
}

enum Incoming {
    Message(ClientMessage),
    Fault(Fault),
    Gone,
}

/// An attach refused because GitHub could not answer for the attaching token.
fn github_refusal(error: GitHubError) -> Refusal {
    match error {
        GitHubError::BadCredentials => Refusal {
            reason: RefusalReason::AccessRevoked,
            message: "GitHub no longer accepts this token.".into(),
            holder: None,
        },
        GitHubError::Unavailable(_) => Refusal {
            reason: RefusalReason::Unavailable,
            message:
                "GitHub is unavailable, so write access cannot be checked; attach again shortly."
                    .into(),
            holder: None,
        },
    }
}
