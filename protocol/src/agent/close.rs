//! Every WebSocket close code the server uses on the agent connection, with when it is sent.
//!
//! Owns: the numbers and their meaning. Does not own: choosing one — [`crate::agent::Fault`],
//! [`crate::agent::ErrorCode`] and [`crate::agent::RefusalReason`] each map themselves to one of
//! these with `close_code()`. The close frame's reason text is always the kebab-case code of the
//! `error` or `refused` frame sent just before it (e.g. `access-revoked`).
//!
//! 1000–1013 are the standard codes of RFC 6455 and its registry; 4000–4999 are ours, each
//! mirroring the HTTP status it resembles (4401 ~ 401, …).

/// The link ended as asked: the server answers a client's `detach` with this close. The
/// ownership then stays with the account for the attach grace period.
pub const NORMAL: u16 = 1000;

/// The server is shutting down (a deploy or a restart). Not a fault: the client keeps its
/// sessions, reconnects and, if it offered `resumable-sessions`, sends `resume`. Preceded by an
/// `error` frame with code `going-away` carrying `handoverMs` when the server keeps the hold.
pub const GOING_AWAY: u16 = 1001;

/// A protocol fault: a binary frame, malformed JSON, an unknown type or field, a missing field,
/// a value of the wrong shape, or a message out of order. Preceded by an `error` frame naming
/// the fault. The client has a bug; reconnecting with the same frames fails the same way.
pub const POLICY_VIOLATION: u16 = 1008;

/// A frame larger than [`crate::agent::MAX_FRAME_BYTES`] (2 MiB). Preceded by an `error` frame
/// with code `frame-too-large` naming the size.
pub const MESSAGE_TOO_BIG: u16 = 1009;

/// The server failed in a way that is not the client's fault. Safe to reconnect.
pub const INTERNAL_ERROR: u16 = 1011;

/// The server cannot take the link just now (`unavailable`), e.g. a `resume` whose owner's
/// browser sign-in did not come back within the hand-over window. Reconnect after
/// `retryAfterMs`.
pub const TRY_AGAIN_LATER: u16 = 1013;

/// The account has no live browser sign-in (`sign-in-required`): at attach, or when the
/// owner's sign-in ends (sign-out or expiry) while attached. Sign in to Chopin in a browser,
/// then attach again.
pub const SIGN_IN_REQUIRED: u16 = 4401;

/// The account may not hold this document's Planner: at attach it cannot push to or administer
/// the repository (`no-write-access`); later, a recheck found that access, instance admission
/// or the machine's authorization gone (`access-revoked`).
pub const FORBIDDEN: u16 = 4403;

/// The document does not exist, or is archived (`document-not-found`): at attach, or when it is
/// archived or deleted while attached.
pub const NOT_FOUND: u16 = 4404;

/// The link answered none of the server's WebSocket pings for `connectionTimeoutMs`
/// (`connection-timeout`). Treated as a dropped link; the client will rarely see this frame.
pub const CONNECTION_TIMEOUT: u16 = 4408;

/// Another client holds the document's Planner (`planner-attached`): it is attached, in its
/// attach grace period, or disconnected with work kept. The `refused` frame names the holder's
/// GitHub login.
pub const PLANNER_ATTACHED: u16 = 4409;

/// The document's Planner was let go by somebody's act (`planner-released`): a repository
/// writer reset it, or its owner chose another machine for the document. Do not reattach on
/// your own.
pub const PLANNER_RELEASED: u16 = 4410;

/// `attach` named a protocol version this server does not speak (`unsupported-version`).
pub const UNSUPPORTED_VERSION: u16 = 4426;

/// Every code above with its constant's name, in numeric order (for docs and tests).
pub const ALL: [(u16, &str); 13] = [
    (NORMAL, "NORMAL"),
    (GOING_AWAY, "GOING_AWAY"),
    (POLICY_VIOLATION, "POLICY_VIOLATION"),
    (MESSAGE_TOO_BIG, "MESSAGE_TOO_BIG"),
    (INTERNAL_ERROR, "INTERNAL_ERROR"),
    (TRY_AGAIN_LATER, "TRY_AGAIN_LATER"),
    (SIGN_IN_REQUIRED, "SIGN_IN_REQUIRED"),
    (FORBIDDEN, "FORBIDDEN"),
    (NOT_FOUND, "NOT_FOUND"),
    (CONNECTION_TIMEOUT, "CONNECTION_TIMEOUT"),
    (PLANNER_ATTACHED, "PLANNER_ATTACHED"),
    (PLANNER_RELEASED, "PLANNER_RELEASED"),
    (UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION"),
];
