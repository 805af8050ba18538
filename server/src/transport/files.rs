//! The Chat file routes (hosted-agent.md "Files in Chat"): upload to a document's Chat, read a
//! file back, take back one not sent yet. A document's channel is the document itself: the
//! `channelId` of these paths is the document's id.
//!
//! Owns: the paths, the query (`name`, `type`), reading a body under the per-file cap while it
//! streams (a declared `Content-Length` over the cap is refused before a byte is read), the
//! statuses of each refusal (FILE-05..08, RULINGS FILE-10), the one 404 for everything a reader
//! may not see (FILE-30) and the serving headers (FILE-31, FILE-32) on every answer.
//! Does not own: what a file is or who may read it ([`crate::files`]), or access
//! ([`crate::access`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use uuid::Uuid;

use super::documents::DocumentsDeps;
use super::{Routes, Table};
use crate::error::ApiError;
use crate::files::{file_json, FileError, Files, Refusal, NAME_MAX_BYTES};
use crate::store::TakeBack;

/// What the file routes use.
#[derive(Clone)]
pub struct FilesDeps {
    pub documents: DocumentsDeps,
    pub files: Arc<Files>,
}

/// `X-Content-Type-Options` and `Content-Security-Policy` of every answer (FILE-32).
const NOSNIFF: &str = "nosniff";
const SANDBOX: &str = "default-src 'none'; sandbox";

pub fn routes(deps: FilesDeps) -> Routes {
    Table::new()
        .post("/api/channels/{channel}/attachments", upload)
        .get("/api/channels/{channel}/attachments/{id}", read)
        .delete("/api/channels/{channel}/attachments/{id}", take_back)
        .with_state(deps)
}

/// Every answer of these routes, refusals included, with the headers of FILE-32.
fn guarded(answer: Result<Response, ApiError>) -> Response {
    let mut response = answer.unwrap_or_else(IntoResponse::into_response);
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static(NOSNIFF),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOX),
    );
    response
}

/// The one answer for a file a caller may not see, a missing one and another document's
/// (FILE-30).
fn no_such_file() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "file-not-found", "No such file.")
}

/// A refusal with the status the spec gives its code.
pub fn refused(r: Refusal) -> ApiError {
    let status = match r.code {
        "too-large" => StatusCode::PAYLOAD_TOO_LARGE,
        "too-many" | "too-much" => StatusCode::TOO_MANY_REQUESTS,
        "not-allowed" => StatusCode::FORBIDDEN,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, r.code, r.message)
}

fn file_error(e: FileError) -> ApiError {
    match e {
        FileError::Refused(r) => refused(r),
        FileError::Store(e) => ApiError::store(e),
    }
}

/// The document of `channel` if `caller` can read it, else the file routes' 404.
async fn channel_document(
    deps: &FilesDeps,
    caller: &crate::access::Caller,
    channel: &str,
) -> Result<(crate::store::Document, crate::identity::github::RepoAccess), ApiError> {
    match deps.documents.readable(caller, channel).await {
        Err(e) if e.status == StatusCode::NOT_FOUND => Err(no_such_file()),
        other => other,
    }
}

/// The upload's query: `name` (required, 1–255 bytes, no control character) and the declared
/// `type` (optional). Unknown keys are ignored; the first of a repeated key counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadQuery {
    pub name: String,
    pub declared: Option<String>,
}

impl UploadQuery {
    pub fn parse(query: Option<&str>) -> Result<UploadQuery, ApiError> {
        let mut name = None;
        let mut declared = None;
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "name" if name.is_none() => name = Some(value.into_owned()),
                "type" if declared.is_none() => declared = Some(value.into_owned()),
                _ => {}
            }
        }
        let name = name.unwrap_or_default();
        let bad = name.trim().is_empty()
            || name.len() > NAME_MAX_BYTES
            || name.chars().any(char::is_control);
        if bad {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-request",
                format!("An upload names its file in the query: name=…, 1 to {NAME_MAX_BYTES} bytes with no control characters (and type=…, its declared type, if known)."),
            ));
        }
        Ok(UploadQuery {
            name,
            declared: declared.filter(|t| !t.is_empty()),
        })
    }
}

/// `POST /api/channels/{channel}/attachments?name=&type=` with the file's bytes: a writer of a
/// document that is not archived keeps a file (201 `{id, name, kind, mimeType, size}`), or is
/// refused in RULINGS FILE-33's order.
async fn upload(
    State(deps): State<FilesDeps>,
    Path(channel): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    guarded(upload_inner(&deps, &channel, query, &headers, body).await)
}

async fn upload_inner(
    deps: &FilesDeps,
    channel: &str,
    query: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = deps.documents.access.caller(headers, true).await?;
    let (doc, access) = deps.documents.readable(&caller, channel).await?;
    let not_allowed = |why: String| refused(Refusal::not_allowed(why));
    if !access.can_write() {
        return Err(not_allowed(format!(
            "@{} cannot push to {}/{}, so cannot attach files in this document's Chat.",
            caller.login, access.owner, access.repo
        )));
    }
    if doc.archived {
        return Err(not_allowed(
            "This document is archived; its Chat takes no files.".into(),
        ));
    }
    if !deps.files.enabled() {
        return Err(not_allowed("Files are turned off on this server.".into()));
    }
    let query = UploadQuery::parse(query.as_deref())?;
    let limits = deps.files.limits();
    let bytes = read_capped(headers, body, limits.max_bytes)
        .await?
        .ok_or_else(|| refused(Refusal::too_large(&limits)))?;
    let kept = deps
        .files
        .keep(
            doc.id,
            &caller.login,
            &query.name,
            query.declared.as_deref(),
            bytes,
        )
        .await
        .map_err(file_error)?;
    tracing::info!(document = %doc.id, file = %kept.id, kind = %kept.kind, size = kept.size, by = %caller.login, "file kept");
    Ok((StatusCode::CREATED, Json(file_json(&kept))).into_response())
}

/// The body's bytes, read frame by frame and given up as soon as they pass `max` (`None`):
/// never more than `max` plus one frame is held, and nothing is read of a body whose declared
/// `Content-Length` is already over it.
pub async fn read_capped(
    headers: &HeaderMap,
    body: Body,
    max: u64,
) -> Result<Option<Vec<u8>>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Ok(None);
    }
    let mut body = body;
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-request",
                format!("The upload's body could not be read: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() as u64 + data.len() as u64 > max {
                return Ok(None);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Some(bytes))
}

/// `GET /api/channels/{channel}/attachments/{id}`: the file for a reader of the document once a
/// message sent it, before that for its uploader only (FILE-29); an image inline under its own
/// type, a text file as a download of `text/plain; charset=utf-8` (FILE-31).
async fn read(
    State(deps): State<FilesDeps>,
    Path((channel, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    guarded(read_inner(&deps, &channel, &id, &headers).await)
}

async fn read_inner(
    deps: &FilesDeps,
    channel: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let caller = deps.documents.access.caller(headers, false).await?;
    let (doc, _) = channel_document(deps, &caller, channel).await?;
    let id = Uuid::parse_str(id).map_err(|_| no_such_file())?;
    let (file, bytes) = deps
        .files
        .read(doc.id, id, &caller.login)
        .await
        .map_err(ApiError::store)?
        .ok_or_else(no_such_file)?;
    let disposition = if file.kind == "image" {
        format!("inline; filename*=UTF-8''{}", percent(&file.name))
    } else {
        format!("attachment; filename*=UTF-8''{}", percent(&file.name))
    };
    let content_type = if file.kind == "image" {
        file.mime_type.clone()
    } else {
        "text/plain; charset=utf-8".to_owned()
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CACHE_CONTROL, "private, no-cache".to_owned()),
        ],
        bytes,
    )
        .into_response())
}

/// `name` percent-encoded for `filename*` (RFC 8187): everything but unreserved characters.
fn percent(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `DELETE /api/channels/{channel}/attachments/{id}`: the uploader takes back a file not sent
/// yet (204); a sent one stays (409, RULINGS FILE-10); anything else is the same 404.
async fn take_back(
    State(deps): State<FilesDeps>,
    Path((channel, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    guarded(take_back_inner(&deps, &channel, &id, &headers).await)
}

async fn take_back_inner(
    deps: &FilesDeps,
    channel: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let caller = deps.documents.access.caller(headers, true).await?;
    let (doc, _) = channel_document(deps, &caller, channel).await?;
    let id = Uuid::parse_str(id).map_err(|_| no_such_file())?;
    match deps
        .files
        .take_back(doc.id, id, &caller.login)
        .await
        .map_err(ApiError::store)?
    {
        TakeBack::Taken => Ok(StatusCode::NO_CONTENT.into_response()),
        TakeBack::Sent => Err(ApiError::new(
            StatusCode::CONFLICT,
            "file-sent",
            "This file was sent with a message and stays with it.",
        )),
        TakeBack::Missing => Err(no_such_file()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_02_the_query_names_the_file_and_its_declared_type() {
        assert_eq!(
            UploadQuery::parse(Some("name=shot%20%CE%A9.png&type=image%2Fpng&x=1")).unwrap(),
            UploadQuery {
                name: "shot Ω.png".into(),
                declared: Some("image/png".into())
            }
        );
        assert_eq!(
            UploadQuery::parse(Some("name=a.txt&name=b.txt&type="))
                .unwrap()
                .declared,
            None
        );
        for bad in [
            None,
            Some(""),
            Some("name="),
            Some("name=%20"),
            Some("name=a%00b"),
        ] {
            assert_eq!(UploadQuery::parse(bad).unwrap_err().code, "invalid-request");
        }
        let long = format!("name={}", "a".repeat(NAME_MAX_BYTES + 1));
        assert!(UploadQuery::parse(Some(&long)).is_err());
    }

    /// FILE-05: a body with no length, passing the cap while it streams, is given up at the
    /// chunk that passes it: the chunks after it are never read.
    #[tokio::test]
    async fn file_05_a_body_is_read_under_its_cap_and_given_up_as_soon_as_it_passes_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let read = Arc::new(AtomicUsize::new(0));
        let counted = read.clone();
        let chunks = futures::stream::iter(0..1_000).map(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'a'; 40]))
        });
        use futures::StreamExt as _;
        let got = read_capped(&HeaderMap::new(), Body::from_stream(chunks), 100)
            .await
            .unwrap();
        assert_eq!(got, None);
        assert_eq!(
            read.load(Ordering::SeqCst),
            3,
            "stopped at the third 40-byte chunk"
        );
        let small =
            futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"hi"))]);
        assert_eq!(
            read_capped(&HeaderMap::new(), Body::from_stream(small), 2)
                .await
                .unwrap(),
            Some(b"hi".to_vec()),
            "exactly at the cap"
        );
    }

    #[test]
    fn filenames_are_percent_encoded() {
        assert_eq!(percent("a b\"Ω.txt"), "a%20b%22%CE%A9.txt");
    }

    proptest::proptest! {
        /// Any query string: no panic; a kept name is never empty, too long or with a control
        /// character.
        #[test]
        fn any_query_parses_or_is_refused_without_panic(query in proptest::option::of(".{0,300}")) {
            if let Ok(q) = UploadQuery::parse(query.as_deref()) {
                proptest::prop_assert!(!q.name.trim().is_empty());
                proptest::prop_assert!(q.name.len() <= NAME_MAX_BYTES);
                proptest::prop_assert!(!q.name.chars().any(char::is_control));
            }
        }
    }
}
