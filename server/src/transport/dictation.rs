//! The dictation route: `POST /api/channels/{channel}/transcriptions` (hosted-agent.md
//! "Dictating a message"), for a person who can write to the document, from the app's own
//! origin.
//!
//! Owns: the route, reading the recording under `TRANSCRIPTION_MAX_BYTES` while it streams, its
//! refusals (DICT-05: `404` where no model is set; RULINGS DICT-07: `413` oversize, `422` not
//! audio) and the answer's framing: JSON lines (`application/x-ndjson`) as the provider writes.
//! Does not own: the provider's request and answer ([`crate::dictation`]) or access
//! ([`crate::access`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::documents::DocumentsDeps;
use super::files::read_capped;
use super::{Routes, Table};
use crate::access::writer_only;
use crate::dictation::{sniff_audio, Transcription};
use crate::error::ApiError;
use crate::files::size_words;

/// What the dictation route uses.
#[derive(Clone)]
pub struct DictationDeps {
    pub documents: DocumentsDeps,
    /// `None`: no `TRANSCRIPTION_MODEL`, and the route answers 404.
    pub transcription: Option<Arc<Transcription>>,
}

pub fn routes(deps: DictationDeps) -> Routes {
    Table::new()
        .post("/api/channels/{channel}/transcriptions", transcribe)
        .with_state(deps)
}

/// `POST /api/channels/{channel}/transcriptions` with a recording's bytes: its words as JSON
/// lines, `{"delta"}` as they come, then `{"text"}`, or `{"error"}` where the provider stopped.
async fn transcribe(
    State(deps): State<DictationDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(transcription) = deps.transcription.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "transcription-off",
            "Dictation through the server is not set up here (no TRANSCRIPTION_MODEL).",
        ));
    };
    let caller = deps.documents.access.caller(&headers, true).await?;
    let (_doc, access) = deps.documents.readable(&caller, &channel).await?;
    writer_only(&access, &caller.login)?;
    let max = transcription.max_bytes();
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            format!(
                "A recording is at most {}; this one is longer.",
                size_words(max)
            ),
        )
    };
    let audio = read_capped(&headers, body, max)
        .await?
        .ok_or_else(too_large)?;
    let Some((mime, file_name)) = sniff_audio(&audio) else {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not-audio",
            "This is not a recording: send a browser's recording (WebM, Ogg or MP4), a WAV or an MP3.",
        ));
    };
    tracing::info!(by = %caller.login, bytes = audio.len(), mime, "dictation sent to the transcription service");
    let lines = transcription
        .transcribe(audio, mime, file_name)
        .await
        .map_err(|failed| {
            ApiError::new(StatusCode::BAD_GATEWAY, "transcription-failed", failed.0)
        })?;
    let body =
        Body::from_stream(lines.map(|line| Ok::<_, std::convert::Infallible>(line.json_line())));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response())
}
