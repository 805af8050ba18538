//! What can be wrong with a frame, and why the server closes a connection.
//!
//! Owns: [`Fault`] (a frame the receiver cannot accept, with words a client developer can act
//! on), [`ErrorCode`] (the code of the `error` frame sent before every close the server
//! starts) and the mapping of both to close codes. Does not own: sending or closing.
//!
//! The rule (RULINGS AC-06): 1009 for an oversized frame, 1008 for every other protocol fault;
//! the `error` frame naming the fault precedes the close. The one fault answered differently is
//! an `attach` with a version this server does not speak: `refused` `unsupported-version`, 4426.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::close;
use super::server::{ErrorFrame, RefusalReason, Refused, ServerMessage};
use super::{ClientMessage, AGENT_PROTOCOL_VERSION, MAX_FRAME_BYTES};

/// Which side sent a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    Client,
    Server,
}

impl Sender {
    pub fn other(self) -> Sender {
        match self {
            Sender::Client => Sender::Server,
            Sender::Server => Sender::Client,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Sender::Client => "client",
            Sender::Server => "server",
        }
    }

    fn types(self) -> &'static [&'static str] {
        match self {
            Sender::Client => &ClientMessage::TYPES,
            Sender::Server => &ServerMessage::TYPES,
        }
    }
}

impl fmt::Display for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.noun())
    }
}

/// A frame the receiver cannot accept. The connection ends: [`Fault::frame`] is sent, then a
/// close with [`Fault::close_code`] and [`Fault::close_reason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// A binary WebSocket frame.
    #[error("binary frame of {bytes} bytes: chopin.agent.v1 carries only JSON text frames")]
    Binary { bytes: usize },

    /// A frame over [`MAX_FRAME_BYTES`].
    #[error("frame too large: {bytes} bytes > {max} (2 MiB, the limit of one frame)", max = MAX_FRAME_BYTES)]
    TooLarge { bytes: usize },

    /// A text frame whose bytes are not UTF-8 (so not JSON either).
    #[error(
        "a text frame that is not valid UTF-8 ({detail}); every message is JSON text in UTF-8"
    )]
    NotUtf8 { detail: String },

    /// Not JSON at all.
    #[error("malformed JSON at line {line}, column {column}: {detail}")]
    MalformedJson {
        line: usize,
        column: usize,
        detail: String,
    },

    /// JSON, but not an object with a string `type`.
    #[error("not a message: {what}; every frame is a JSON object with a string \"type\"")]
    NotAMessage { what: String },

    /// A `type` the sender may not send.
    #[error("{}", unknown_type_words(.name, .sender))]
    UnknownType { name: String, sender: Sender },

    /// A field the message (or a value nested in it) does not have.
    #[error("unknown field \"{field}\" in \"{message_type}\" ({expected})")]
    UnknownField {
        message_type: String,
        field: String,
        expected: String,
    },

    /// A required field is absent.
    #[error("missing field \"{field}\" in \"{message_type}\"")]
    MissingField { message_type: String, field: String },

    /// A field has the wrong shape or an unknown value.
    #[error("invalid value in \"{message_type}\": {detail}")]
    InvalidValue {
        message_type: String,
        detail: String,
    },

    /// `attach` names a protocol version this server does not speak.
    #[error("unsupported protocol version {version}: this server speaks version {supported}", supported = AGENT_PROTOCOL_VERSION)]
    UnsupportedVersion { version: u64 },

    /// A well-formed message sent when it is not allowed.
    #[error("\"{message_type}\" out of order: {rule}")]
    OutOfOrder { message_type: String, rule: String },
}

fn unknown_type_words(name: &str, sender: &Sender) -> String {
    let sender = *sender;
    if sender.other().types().contains(&name) {
        format!(
            "unknown type \"{name}\" for a {sender} message: \"{name}\" is sent by the {}, not the {sender}",
            sender.other()
        )
    } else {
        format!(
            "unknown type \"{name}\": a {sender} message is one of {}",
            sender.types().join(", ")
        )
    }
}

impl Fault {
    pub(crate) fn out_of_order(message_type: &str, rule: impl Into<String>) -> Fault {
        Fault::OutOfOrder {
            message_type: message_type.to_owned(),
            rule: rule.into(),
        }
    }

    /// The code of the `error` frame for this fault.
    pub fn code(&self) -> ErrorCode {
        match self {
            Fault::Binary { .. } => ErrorCode::BinaryFrame,
            Fault::TooLarge { .. } => ErrorCode::FrameTooLarge,
            Fault::MalformedJson { .. } | Fault::NotAMessage { .. } | Fault::NotUtf8 { .. } => {
                ErrorCode::MalformedJson
            }
            Fault::UnknownType { .. } => ErrorCode::UnknownType,
            Fault::UnknownField { .. } => ErrorCode::UnknownField,
            Fault::MissingField { .. } => ErrorCode::MissingField,
            Fault::InvalidValue { .. } | Fault::UnsupportedVersion { .. } => {
                ErrorCode::InvalidValue
            }
            Fault::OutOfOrder { .. } => ErrorCode::OutOfOrder,
        }
    }

    /// 1009 for an oversized frame, 4426 for an unsupported version, 1008 for the rest.
    pub fn close_code(&self) -> u16 {
        match self {
            Fault::UnsupportedVersion { .. } => close::UNSUPPORTED_VERSION,
            _ => self.code().close_code(),
        }
    }

    /// The close frame's reason text: the code of the frame sent before it.
    pub fn close_reason(&self) -> &'static str {
        match self {
            Fault::UnsupportedVersion { .. } => RefusalReason::UnsupportedVersion.as_str(),
            _ => self.code().as_str(),
        }
    }

    /// The frame the server sends before closing: `refused` for an unsupported version (the
    /// fault answers an `attach`), `error` for everything else.
    pub fn frame(&self) -> ServerMessage {
        match self {
            Fault::UnsupportedVersion { .. } => ServerMessage::Refused(Refused {
                reason: RefusalReason::UnsupportedVersion,
                message: self.to_string(),
                holder: None,
                retry_after_ms: None,
            }),
            _ => ServerMessage::Error(ErrorFrame {
                code: self.code(),
                message: self.to_string(),
                retry_after_ms: None,
                handover_ms: None,
            }),
        }
    }
}

/// The code of an `error` frame: why the server is closing the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// A binary frame (1008).
    BinaryFrame,
    /// A frame over 2 MiB (1009).
    FrameTooLarge,
    /// Not JSON, or not an object with a string `type` (1008).
    MalformedJson,
    /// A `type` the client may not send (1008).
    UnknownType,
    /// A field the message does not have (1008).
    UnknownField,
    /// A required field is absent (1008).
    MissingField,
    /// A field of the wrong shape or with an unknown value (1008).
    InvalidValue,
    /// A message sent when it is not allowed (1008).
    OutOfOrder,
    /// The account's write access, instance admission or machine authorization is gone (4403).
    AccessRevoked,
    /// The owner's browser sign-in ended: sign-out or expiry (4401).
    SignInRequired,
    /// The document was archived or deleted (4404).
    DocumentNotFound,
    /// A writer reset the Planner, or the owner chose another machine (4410).
    PlannerReleased,
    /// No ping answered for `connectionTimeoutMs` (4408).
    ConnectionTimeout,
    /// The server is shutting down; reconnect and `resume` (1001).
    GoingAway,
    /// The server cannot take the link now; reconnect after `retryAfterMs` (1013).
    Unavailable,
    /// The server failed; not the client's fault (1011).
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::BinaryFrame,
        ErrorCode::FrameTooLarge,
        ErrorCode::MalformedJson,
        ErrorCode::UnknownType,
        ErrorCode::UnknownField,
        ErrorCode::MissingField,
        ErrorCode::InvalidValue,
        ErrorCode::OutOfOrder,
        ErrorCode::AccessRevoked,
        ErrorCode::SignInRequired,
        ErrorCode::DocumentNotFound,
        ErrorCode::PlannerReleased,
        ErrorCode::ConnectionTimeout,
        ErrorCode::GoingAway,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];

    /// The kebab-case code, also the close frame's reason text.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BinaryFrame => "binary-frame",
            ErrorCode::FrameTooLarge => "frame-too-large",
            ErrorCode::MalformedJson => "malformed-json",
            ErrorCode::UnknownType => "unknown-type",
            ErrorCode::UnknownField => "unknown-field",
            ErrorCode::MissingField => "missing-field",
            ErrorCode::InvalidValue => "invalid-value",
            ErrorCode::OutOfOrder => "out-of-order",
            ErrorCode::AccessRevoked => "access-revoked",
            ErrorCode::SignInRequired => "sign-in-required",
            ErrorCode::DocumentNotFound => "document-not-found",
            ErrorCode::PlannerReleased => "planner-released",
            ErrorCode::ConnectionTimeout => "connection-timeout",
            ErrorCode::GoingAway => "going-away",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }

    /// Whether this is a protocol fault (the client sent something it may not).
    pub fn is_protocol_fault(self) -> bool {
        matches!(
            self.close_code(),
            close::POLICY_VIOLATION | close::MESSAGE_TOO_BIG
        )
    }

    pub fn close_code(self) -> u16 {
        match self {
            ErrorCode::FrameTooLarge => close::MESSAGE_TOO_BIG,
            ErrorCode::BinaryFrame
            | ErrorCode::MalformedJson
            | ErrorCode::UnknownType
            | ErrorCode::UnknownField
            | ErrorCode::MissingField
            | ErrorCode::InvalidValue
            | ErrorCode::OutOfOrder => close::POLICY_VIOLATION,
            ErrorCode::AccessRevoked => close::FORBIDDEN,
            ErrorCode::SignInRequired => close::SIGN_IN_REQUIRED,
            ErrorCode::DocumentNotFound => close::NOT_FOUND,
            ErrorCode::PlannerReleased => close::PLANNER_RELEASED,
            ErrorCode::ConnectionTimeout => close::CONNECTION_TIMEOUT,
            ErrorCode::GoingAway => close::GOING_AWAY,
            ErrorCode::Unavailable => close::TRY_AGAIN_LATER,
            ErrorCode::Internal => close::INTERNAL_ERROR,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
