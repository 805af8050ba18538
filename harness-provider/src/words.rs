//! What a failed model call means, for the adapter and for the people in Chat.
//!
//! Owns: [`Failure`] — whether a call may be tried again (and after how long the provider
//! asked), the words a person reads when the turn ends on it, and the detail an operator reads
//! in the log — and [`classify`], which reads rig's error: the provider's status and headers
//! when it answered, the transport's account when it did not.
//! Does not own: how often to retry (the session, from its settings).
//!
//! The words name what failed and what to do, never the key, the provider's raw body or a
//! promise that anything was kept (MSG-14): a failed turn saved nothing of what the model was
//! about to say.

use rig_agent::completion::PromptError;
use rig_core::error::ErrorKind;

use crate::transport::{BROKE_MARK, IDLE_MARK, NO_HEAD_MARK};

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Whether the same call may succeed if sent again.
    pub retryable: bool,
    /// How long the provider asked us to wait first (`retry-after`), in milliseconds.
    pub retry_after_ms: Option<u64>,
    /// What the people in Chat read.
    pub words: String,
    /// What the operator reads in the log (never the key).
    pub detail: String,
}

impl Failure {
    /// A failure of the adapter itself, not of the provider.
    pub fn internal(detail: String) -> Self {
        Failure {
            retryable: false,
            retry_after_ms: None,
            words: "The Planner could not finish this turn because of a fault in the server. Send the message again; if it keeps happening, tell the operator.".to_owned(),
            detail,
        }
    }

    fn new(retryable: bool, words: impl Into<String>, detail: String) -> Self {
        Failure {
            retryable,
            retry_after_ms: None,
            words: words.into(),
            detail,
        }
    }
}

/// The most characters of a provider's own error message quoted in Chat.
const QUOTE_MAX_CHARS: usize = 200;

/// What `error` means. `max_rounds` is the turn's model-call budget; `secret` (the operator's
/// key) is removed from anything quoted.
pub fn classify(error: &PromptError, max_rounds: usize, secret: Option<&str>) -> Failure {
    let detail = redact(&chain(error), secret);
    match error {
        PromptError::MaxTurns { .. } => {
            return Failure::new(
                false,
                format!("The Planner stopped: this turn reached its limit of {max_rounds} model calls before it finished. Ask again with a narrower request."),
                detail,
            )
        }
        PromptError::Cancelled { .. } => {
            return Failure::new(false, "The Planner's turn was stopped.", detail)
        }
        _ => {}
    }
    if let Some(status) = error.provider_response_status() {
        let code = status.as_u16();
        let quoted = error
            .provider_response_json()
            .ok()
            .flatten()
            .and_then(|body| provider_message(&body))
            .map(|m| redact(&m, secret));
        return match code {
            401 | 403 => Failure::new(
                false,
                format!("The model provider refused the server's credentials (HTTP {code}). The server's operator needs to check its model key."),
                detail,
            ),
            429 => Failure {
                retryable: true,
                retry_after_ms: error.provider_response_headers().and_then(retry_after_ms),
                words: "The model provider is limiting how often this server may call it (HTTP 429). Send the message again in a little while.".to_owned(),
                detail,
            },
            500..=599 => Failure {
                retryable: true,
                retry_after_ms: error.provider_response_headers().and_then(retry_after_ms),
                words: format!("The model provider failed to answer (HTTP {code}). Send the message again in a little while."),
                detail,
            },
            _ => Failure::new(
                false,
                match quoted {
                    Some(quoted) => format!("The model provider refused the request (HTTP {code}): {quoted}"),
                    None => format!("The model provider refused the request (HTTP {code})."),
                },
                detail,
            ),
        };
    }
    // An answer that began and then went silent or broke off is never asked again (SES-27:
    // an interrupted turn is not replayed), whether or not any of it reached the host yet.
    if detail.contains(NO_HEAD_MARK) || detail.contains(IDLE_MARK) {
        return Failure::new(
            detail.contains(NO_HEAD_MARK),
            "The model provider did not answer in time. Send the message again in a little while.",
            detail,
        );
    }
    if detail.contains("the response body is longer than") {
        return Failure::new(
            false,
            "The model provider's answer was longer than the server reads, so this turn stopped. If it keeps happening, tell the operator.",
            detail,
        );
    }
    if detail.contains(BROKE_MARK) {
        return Failure::new(
            false,
            "The model provider's answer stopped partway through. Send the message again.",
            detail,
        );
    }
    let kind = match error {
        PromptError::Provider(e) => Some(e.kind()),
        PromptError::Report(report) => Some(report.kind),
        _ => None,
    };
    let truncated = matches!(
        error,
        PromptError::Provider(rig_core::error::ProviderError::Truncated)
    );
    match kind {
        _ if truncated => Failure::new(
            false,
            "The model provider's answer stopped partway through. Send the message again.",
            detail,
        ),
        Some(ErrorKind::Timeout) => Failure::new(
            true,
            "The model provider did not answer in time. Send the message again in a little while.",
            detail,
        ),
        Some(ErrorKind::Http) => Failure::new(
            true,
            "The server could not reach the model provider. Send the message again in a little while; if it keeps happening, tell the operator.",
            detail,
        ),
        Some(ErrorKind::Json | ErrorKind::Response) => Failure::new(
            false,
            "The model provider sent an answer the server could not read. If it keeps happening, tell the operator: the provider may have changed its format.",
            detail,
        ),
        _ => Failure::new(
            false,
            "The model provider failed this turn. Send the message again; if it keeps happening, tell the operator.",
            detail,
        ),
    }
}

/// The error and each of its sources, `: `-joined.
fn chain(error: &PromptError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    if let PromptError::Report(report) = error {
        for link in &report.source_chain {
            if !text.contains(link.as_str()) {
                text.push_str(": ");
                text.push_str(link);
            }
        }
    }
    text
}

/// `text` with every occurrence of `secret` replaced.
fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() => text.replace(secret, "[redacted]"),
        _ => text.to_owned(),
    }
}

/// The provider's own message in an error body: `{"error": {"message": …}}` (OpenAI's and
/// Anthropic's shape) or `{"error": "…"}` / `{"message": "…"}`, cut to [`QUOTE_MAX_CHARS`].
fn provider_message(body: &serde_json::Value) -> Option<String> {
    let message = body
        .pointer("/error/message")
        .or_else(|| body.get("error").filter(|e| e.is_string()))
        .or_else(|| body.get("message"))?
        .as_str()?
        .trim();
    if message.is_empty() {
        return None;
    }
    let mut quoted: String = message.chars().take(QUOTE_MAX_CHARS).collect();
    if quoted.len() < message.len() {
        quoted.push('…');
    }
    Some(quoted)
}

/// A `retry-after` header in milliseconds: `retry-after-ms`, or `retry-after` in whole seconds.
/// (A date form is not read; the adapter's own pause applies then.)
pub fn retry_after_ms(headers: &http::HeaderMap) -> Option<u64> {
    let read = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = read("retry-after-ms") {
        return Some(ms as u64);
    }
    read("retry-after").map(|s| (s * 1000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(retry_after_ms(&headers), None);
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after_ms(&headers), Some(7_000));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after_ms(&headers), Some(250));
        let mut dated = http::HeaderMap::new();
        dated.insert(
            "retry-after",
            "Wed, 21 Oct 2026 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after_ms(&dated), None);
    }

    #[test]
    fn provider_messages_are_quoted_short() {
        let body = serde_json::json!({"error": {"message": "The model `x` does not exist"}});
        assert_eq!(
            provider_message(&body).as_deref(),
            Some("The model `x` does not exist")
        );
        let long = serde_json::json!({"message": "a".repeat(500)});
        let quoted = provider_message(&long).unwrap();
        assert_eq!(quoted.chars().count(), QUOTE_MAX_CHARS + 1);
        assert_eq!(
            redact("key sk-123 here", Some("sk-123")),
            "key [redacted] here"
        );
    }
}
