//! The one shape of a refusal the HTTP API gives: a status, a stable code and words for a person.
//!
//! Owns: [`ApiError`] and the refusals several services share (storage down, GitHub down, a
//! document that is missing or unreadable). Does not own: putting it on the wire (the transport
//! turns it into `{error, message}` JSON with its status).
//!
//! Invariants: the words never carry a backend's own message, a token or a URL with credentials;
//! a storage failure is logged here and told only as "storage did not answer".

use http::StatusCode;

use crate::identity::admission::AdmissionError;
use crate::identity::github::GitHubError;
use crate::store::StoreError;

/// An API refusal: status, a stable code and words for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// Storage failed (logged; the caller is told only that).
    pub fn store(e: StoreError) -> Self {
        tracing::error!(error = %e, "storage failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage-unavailable",
            "Storage did not answer; try again shortly.",
        )
    }

    /// GitHub refused the token or could not be asked.
    pub fn github(e: GitHubError) -> Self {
        match e {
            GitHubError::BadCredentials => {
                Self::new(StatusCode::UNAUTHORIZED, "bad-credentials", e.to_string())
            }
            GitHubError::Unavailable(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "github-unavailable",
                "GitHub is unavailable, so access cannot be checked right now; try again shortly.",
            ),
        }
    }

    /// No such document, or one the caller cannot read: the two look alike.
    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "document-not-found",
            "No such document.",
        )
    }
}

impl From<AdmissionError> for ApiError {
    fn from(e: AdmissionError) -> Self {
        let code = match e {
            AdmissionError::BadCredentials => "bad-credentials",
            AdmissionError::Refused { .. } => "not-admitted",
            AdmissionError::Unavailable => "github-unavailable",
        };
        Self::new(e.http_status(), code, e.to_string())
    }
}
