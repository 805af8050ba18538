//! Decoding and encoding frames, with every fault named.
//!
//! Owns: the strict decoder ([`decode_client`], [`decode_server`], [`decode_client_frame`]) and
//! the encoder ([`encode`], [`encode_checked`]). Does not own: reading or writing sockets.
//!
//! Decoding goes in steps so the fault can be named precisely: size, then JSON, then the `type`
//! (unknown, or sent by the other side), then for `attach` the version (so a client of another
//! version is told so even if its `attach` has other fields), then the message's own fields.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::client::ClientMessage;
use super::fault::{Fault, Sender};
use super::server::ServerMessage;
use super::{AGENT_PROTOCOL_VERSION, MAX_FRAME_BYTES};

/// One WebSocket data frame as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

/// `Err(Fault::TooLarge)` when a frame of `len` bytes is over [`MAX_FRAME_BYTES`].
pub fn check_frame_size(len: usize) -> Result<(), Fault> {
    if len > MAX_FRAME_BYTES {
        Err(Fault::TooLarge { bytes: len })
    } else {
        Ok(())
    }
}

/// Decode a frame a client sent. Binary frames are faults (1008; 1009 when also oversized).
pub fn decode_client_frame(frame: Frame<'_>) -> Result<ClientMessage, Fault> {
    match frame {
        Frame::Text(text) => decode_client(text),
        Frame::Binary(bytes) => Err(binary_fault(bytes.len())),
    }
}

/// Decode a frame the server sent (for test clients and the simulator's scripted clients).
pub fn decode_server_frame(frame: Frame<'_>) -> Result<ServerMessage, Fault> {
    match frame {
        Frame::Text(text) => decode_server(text),
        Frame::Binary(bytes) => Err(binary_fault(bytes.len())),
    }
}

fn binary_fault(len: usize) -> Fault {
    match check_frame_size(len) {
        Err(too_large) => too_large,
        Ok(()) => Fault::Binary { bytes: len },
    }
}

/// Decode the text of a frame a client sent, strictly.
pub fn decode_client(text: &str) -> Result<ClientMessage, Fault> {
    decode(text, Sender::Client)
}

/// Decode the text of a frame the server sent, strictly.
pub fn decode_server(text: &str) -> Result<ServerMessage, Fault> {
    decode(text, Sender::Server)
}

fn decode<M: DeserializeOwned>(text: &str, sender: Sender) -> Result<M, Fault> {
    check_frame_size(text.len())?;
    let value: Value = serde_json::from_str(text).map_err(|e| Fault::MalformedJson {
        line: e.line(),
        column: e.column(),
        detail: strip_position(&e.to_string()),
    })?;
    let Value::Object(object) = &value else {
        return Err(Fault::NotAMessage {
            what: format!("a JSON {}", json_kind(&value)),
        });
    };
    let message_type = match object.get("type") {
        Some(Value::String(name)) => name.clone(),
        Some(other) => {
            return Err(Fault::NotAMessage {
                what: format!("\"type\" is a JSON {}", json_kind(other)),
            })
        }
        None => {
            return Err(Fault::NotAMessage {
                what: "no \"type\" field".to_owned(),
            })
        }
    };
    let known = match sender {
        Sender::Client => ClientMessage::TYPES.contains(&message_type.as_str()),
        Sender::Server => ServerMessage::TYPES.contains(&message_type.as_str()),
    };
    if !known {
        return Err(Fault::UnknownType {
            name: message_type,
            sender,
        });
    }
    if sender == Sender::Client && message_type == "attach" {
        if let Some(version) = object.get("version").and_then(Value::as_u64) {
            if version != u64::from(AGENT_PROTOCOL_VERSION) {
                return Err(Fault::UnsupportedVersion { version });
            }
        }
    }
    serde_json::from_value(value).map_err(|e| classify(&message_type, &e.to_string()))
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// serde_json appends " at line L column C" to its messages; the fault says it separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Turn serde's words into a fault. serde's messages for these cases are stable:
/// "unknown field `x`, expected …" and "missing field `x`".
fn classify(message_type: &str, serde_message: &str) -> Fault {
    let message = strip_position(serde_message);
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((field, tail)) = rest.split_once('`') {
            let expected = tail.trim_start_matches(", ").replace('`', "\"");
            return Fault::UnknownField {
                message_type: message_type.to_owned(),
                field: field.to_owned(),
                expected: if expected.is_empty() {
                    "this value has no fields".to_owned()
                } else {
                    expected
                },
            };
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some((field, _)) = rest.split_once('`') {
            return Fault::MissingField {
                message_type: message_type.to_owned(),
                field: field.to_owned(),
            };
        }
    }
    Fault::InvalidValue {
        message_type: message_type.to_owned(),
        detail: message.replace('`', "\""),
    }
}

/// A message of the agent connection: [`ClientMessage`] or [`ServerMessage`].
pub trait Message: Serialize + sealed::Sealed {}
impl Message for ClientMessage {}
impl Message for ServerMessage {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ClientMessage {}
    impl Sealed for super::ServerMessage {}
}

/// The JSON text of a frame. Does not check the size; see [`encode_checked`].
pub fn encode<M: Message>(message: &M) -> String {
    // Infallible for these types: serde_json fails only on a map with non-string keys or a
    // non-finite float, and these types have neither (a `serde_json::Value` cannot hold one).
    serde_json::to_string(message).expect("agent connection messages always serialize")
}

/// The JSON text of a frame, or [`Fault::TooLarge`] if the receiver would refuse it.
pub fn encode_checked<M: Message>(message: &M) -> Result<String, Fault> {
    let text = encode(message);
    check_frame_size(text.len())?;
    Ok(text)
}
