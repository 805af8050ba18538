//! Documents over HTTP, minimal: create one for a repository, read it by id or canonical URL,
//! archive or restore it, and reset its Planner.
//!
//! Owns: the document routes, who the caller is (a browser cookie session or a GitHub bearer
//! token) and what they may do on the document's repository (read = pull, write = push or
//! admin, asked of GitHub through [`crate::admission`]), document locators (a UUID or
//! `/documents/<owner>/<repo>/<slug>`) and slugs. Does not own: the document's content (the
//! documents issue) or what a reset does to an attached client ([`crate::planner`]).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::admission::AdmissionError;
use crate::app::AppState;
use crate::github::{GitHubError, RepoAccess};
use crate::session::LiveLogin;
use crate::store::{Document, NewDocument, StoreError};

/// The canonical URL path of a document.
pub fn canonical_url(doc: &Document) -> String {
    format!(
        "/documents/{}/{}/{}",
        doc.repo_owner, doc.repo_name, doc.slug
    )
}

/// A document as the API shows it.
pub fn document_json(doc: &Document) -> Value {
    json!({
        "id": doc.id,
        "url": canonical_url(doc),
        "repository": format!("{}/{}", doc.repo_owner, doc.repo_name),
        "slug": doc.slug,
        "title": doc.title,
        "archived": doc.archived,
        "planRevision": doc.plan_revision,
        "storageRevision": doc.storage_revision,
    })
}

/// A parsed document locator: what `attach` and MCP accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    Id(Uuid),
    Path {
        owner: String,
        repo: String,
        slug: String,
    },
}

impl Locator {
    /// A UUID, or a canonical URL — absolute (any origin; only its path counts) or a path.
    pub fn parse(text: &str) -> Option<Locator> {
        let text = text.trim();
        if let Ok(id) = Uuid::parse_str(text) {
            return Some(Locator::Id(id));
        }
        let path = if text.starts_with('/') {
            text.split(['?', '#']).next().unwrap_or(text).to_owned()
        } else {
            url::Url::parse(text).ok()?.path().to_owned()
        };
        let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        match parts.as_slice() {
            ["", "documents", owner, repo, slug]
                if !owner.is_empty() && !repo.is_empty() && !slug.is_empty() =>
            {
                Some(Locator::Path {
                    owner: decode(owner)?,
                    repo: decode(repo)?,
                    slug: decode(slug)?,
                })
            }
            _ => None,
        }
    }
}

fn decode(part: &str) -> Option<String> {
    url::form_urlencoded::parse(format!("x={part}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
}

/// The document a locator names, archived or not.
pub async fn resolve(state: &AppState, locator: &Locator) -> Result<Option<Document>, StoreError> {
    let store = &state.services.store;
    match locator {
        Locator::Id(id) => store.document(*id).await,
        Locator::Path { owner, repo, slug } => store.document_by_slug(owner, repo, slug).await,
    }
}

/// Who is calling: a browser login or a bearer token's account.
pub struct Caller {
    pub login: String,
    pub account_id: Uuid,
    token: String,
    /// Present for a cookie session.
    pub browser: Option<Arc<LiveLogin>>,
}

impl Caller {
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// An API refusal: status, a stable code and words for a person.
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

    fn store(e: StoreError) -> Self {
        tracing::error!(error = %e, "storage failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage-unavailable",
            "Storage did not answer; try again shortly.",
        )
    }

    fn github(e: GitHubError) -> Self {
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

    fn not_found() -> Self {
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": self.code, "message": self.message })),
        )
            .into_response()
    }
}

/// The bearer token of `Authorization: Bearer <token>`, if given.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// Identifies the caller: a bearer token (admission checked) or a browser session. A browser's
/// state-changing request must come from the application's own origin.
pub async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    changes_state: bool,
) -> Result<Caller, ApiError> {
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        if origin != state.config.app_origin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "foreign-origin",
                format!(
                    "Requests from {origin} are not accepted; this server's origin is {}.",
                    state.config.app_origin
                ),
            ));
        }
    }
    if let Some(token) = bearer(headers) {
        let admitted = state.admission.check(token).await?;
        let account = state
            .services
            .store
            .upsert_account(
                admitted.user.id,
                &admitted.user.login,
                state.services.clock.now_ms(),
            )
            .await
            .map_err(ApiError::store)?;
        return Ok(Caller {
            login: account.login,
            account_id: account.id,
            token: token.to_owned(),
            browser: None,
        });
    }
    let Some(live) = state.sessions.authenticate(state, headers).await else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "not-signed-in",
            "Sign in, or send Authorization: Bearer <GitHub token>.",
        ));
    };
    if changes_state && headers.get(header::ORIGIN).is_none() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "foreign-origin",
            "A browser request that changes something must carry this server's Origin.",
        ));
    }
    Ok(Caller {
        login: live.account.login.clone(),
        account_id: live.account.id,
        token: live.github_token().to_owned(),
        browser: Some(live),
    })
}

/// What the caller may do on a repository; `None` when it cannot even read it.
async fn access(
    state: &AppState,
    caller: &Caller,
    owner: &str,
    repo: &str,
) -> Result<Option<RepoAccess>, ApiError> {
    state
        .admission
        .repo_access_cached(caller.token(), owner, repo)
        .await
        .map_err(ApiError::github)
}

/// The document, if the caller can read its repository; missing and unreadable look alike.
async fn readable(
    state: &AppState,
    caller: &Caller,
    doc: Option<Document>,
) -> Result<(Document, RepoAccess), ApiError> {
    let doc = doc.ok_or_else(ApiError::not_found)?;
    match access(state, caller, &doc.repo_owner, &doc.repo_name).await? {
        Some(a) if a.pull || a.can_write() => Ok((doc, a)),
        _ => Err(ApiError::not_found()),
    }
}

fn writer_only(access: &RepoAccess, login: &str) -> Result<(), ApiError> {
    if access.can_write() {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "no-write-access",
            format!(
                "@{login} cannot push to {}/{}; this needs push or administration access.",
                access.owner, access.repo
            ),
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateDocument {
    pub title: String,
    #[serde(default)]
    pub slug: Option<String>,
}

/// A JSON request body of type `T`, or a 400 saying the shape expected.
pub fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {shape}: {e}"),
        )
    })
}

/// A document title: one non-empty line of at most 300 characters, trimmed.
pub fn title_of(raw: &str) -> Result<String, ApiError> {
    let title = raw.trim().to_owned();
    if title.is_empty() || title.chars().count() > 300 || title.contains(['\n', '\r']) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-title",
            "A title is one non-empty line of at most 300 characters.",
        ));
    }
    Ok(title)
}

/// Most numbered slugs tried before giving up on a title.
const SLUG_ATTEMPTS: u32 = 100;
/// Longest slug, in bytes.
const SLUG_MAX: usize = 80;

/// A URL slug from a title: lowercase ASCII letters and digits joined by single hyphens.
pub fn slugify(title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= SLUG_MAX {
            break;
        }
    }
    let slug = slug.trim_end_matches('-').to_owned();
    if slug.is_empty() {
        "untitled".to_owned()
    } else {
        slug
    }
}

/// `POST /api/repositories/{owner}/{repo}/documents` `{title, slug?}`: a writer creates a
/// document. A slug already used in the repository gets a numeric suffix (`-2`, `-3`, …).
pub async fn create(
    State(state): State<AppState>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = caller(&state, &headers, true).await?;
    let input: CreateDocument = json_body(&body, r#"{\"title\": string, \"slug\"?: string}"#)?;
    let title = input.title.trim().to_owned();
    if title.chars().count() > 300 || title.contains(['\n', '\r']) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-title",
            "A title is one line of at most 300 characters.",
        ));
    }
    let base = match input.slug.as_deref() {
        Some(s) if slugify(s) == s => s.to_owned(),
        Some(s) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-slug",
                format!("{s:?} is not a slug: use lowercase letters, digits and single hyphens (for example {:?}).", slugify(s)),
            ))
        }
        None => slugify(&title),
    };
    let access = access(&state, &caller, &owner, &repo)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "repository-not-found",
                format!(
                    "No repository {owner}/{repo} that @{} can see.",
                    caller.login
                ),
            )
        })?;
    writer_only(&access, &caller.login)?;
    let s = &state.services;
    for n in 1..=SLUG_ATTEMPTS {
        let slug = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        let new = NewDocument {
            id: s.entropy.uuid(),
            repo_owner: access.owner.clone(),
            repo_name: access.repo.clone(),
            slug,
            title: title.clone(),
            created_at_ms: s.clock.now_ms(),
            parent_id: None,
        };
        match s.store.create_document(&new).await {
            Ok(doc) => {
                tracing::info!(document = %doc.id, url = %canonical_url(&doc), by = %caller.login, "document created");
                return Ok((StatusCode::CREATED, Json(document_json(&doc))).into_response());
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(ApiError::store(e)),
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "slug-taken",
        format!("{SLUG_ATTEMPTS} documents of this repository already use the slug {base:?}; choose another."),
    ))
}

/// `GET /api/repositories/{owner}/{repo}/documents/{slug}`.
pub async fn get_by_slug(
    State(state): State<AppState>,
    Path((owner, repo, slug)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = caller(&state, &headers, false).await?;
    let doc = state
        .services
        .store
        .document_by_slug(&owner, &repo, &slug)
        .await
        .map_err(ApiError::store)?;
    let (doc, _) = readable(&state, &caller, doc).await?;
    Ok(Json(document_json(&doc)))
}

async fn by_id(state: &AppState, id: &str) -> Result<Option<Document>, ApiError> {
    let Ok(id) = Uuid::parse_str(id) else {
        return Ok(None);
    };
    state
        .services
        .store
        .document(id)
        .await
        .map_err(ApiError::store)
}

/// `GET /api/documents/{id}`.
pub async fn get_by_id(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = caller(&state, &headers, false).await?;
    let doc = by_id(&state, &id).await?;
    let (doc, _) = readable(&state, &caller, doc).await?;
    Ok(Json(document_json(&doc)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetArchived {
    pub archived: bool,
}

/// `POST /api/documents/{id}/archive` `{archived}`: a writer archives or restores a document.
/// Archiving ends an attached Planner's link (4404).
pub async fn archive(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = caller(&state, &headers, true).await?;
    let input: SetArchived = json_body(&body, r#"{\"archived\": boolean}"#)?;
    let doc = by_id(&state, &id).await?;
    let (doc, access) = readable(&state, &caller, doc).await?;
    writer_only(&access, &caller.login)?;
    state
        .services
        .store
        .set_archived(doc.id, input.archived)
        .await
        .map_err(ApiError::store)?;
    if input.archived {
        state.planners.archived(&state, doc.id).await;
    }
    let doc = state
        .services
        .store
        .document(doc.id)
        .await
        .map_err(ApiError::store)?
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(document_json(&doc)))
}

/// `POST /api/documents/{id}/planner/reset`: a writer releases the document's Planner; an
/// attached client is closed at once (4410) and the document is free for any eligible account.
pub async fn reset_planner(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = caller(&state, &headers, true).await?;
    let doc = by_id(&state, &id).await?;
    let (doc, access) = readable(&state, &caller, doc).await?;
    writer_only(&access, &caller.login)?;
    let released = state
        .planners
        .reset(&state, doc.id)
        .await
        .map_err(ApiError::store)?;
    tracing::info!(document = %doc.id, by = %caller.login, released, "Planner reset");
    Ok(Json(json!({ "released": released })))
}

/// The canonical URLs a document had before its renames, oldest first.
pub async fn earlier_urls(state: &AppState, doc: &Document) -> Result<Vec<String>, StoreError> {
    Ok(state
        .services
        .store
        .earlier_slugs(doc.id)
        .await?
        .into_iter()
        .map(|slug| format!("/documents/{}/{}/{slug}", doc.repo_owner, doc.repo_name))
        .collect())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    pub title: String,
    #[serde(default)]
    pub slug: Option<String>,
}

/// `POST /api/documents/{id}/rename` `{title, slug?}`: a writer renames a document. Its former
/// URL keeps opening it (listed as an earlier URL); no revision counter changes.
pub async fn rename(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = caller(&state, &headers, true).await?;
    let input: Rename = json_body(&body, r#"{\"title\": string, \"slug\"?: string}"#)?;
    let title = title_of(&input.title)?;
    let slug = match input.slug {
        Some(s) if slugify(&s) == s => s,
        Some(s) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-slug",
                format!("{s:?} is not a slug: use lowercase letters, digits and single hyphens (for example {:?}).", slugify(&s)),
            ))
        }
        None => slugify(&title),
    };
    let doc = by_id(&state, &id).await?;
    let (doc, access) = readable(&state, &caller, doc).await?;
    writer_only(&access, &caller.login)?;
    let renamed = match state
        .services
        .store
        .rename_document(doc.id, &slug, &title)
        .await
    {
        Ok(d) => d,
        Err(StoreError::Conflict(why)) => {
            return Err(ApiError::new(StatusCode::CONFLICT, "slug-taken", why))
        }
        Err(e) => return Err(ApiError::store(e)),
    };
    let mut body = document_json(&renamed);
    body["earlierUrls"] = json!(earlier_urls(&state, &renamed)
        .await
        .map_err(ApiError::store)?);
    Ok(Json(body))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    pub offset: Option<usize>,
    pub limit: Option<usize>,
    pub column: Option<usize>,
}

/// `GET /api/documents/{id}/read?offset=&limit=&column=`: the document as the paged Markdown
/// text an agent reads (at most 16,000 bytes a page, `next:` says how to continue), from the
/// live room.
pub async fn read(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<ReadQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = caller(&state, &headers, false).await?;
    let doc = by_id(&state, &id).await?;
    let (doc, _) = readable(&state, &caller, doc).await?;
    let room = state
        .rooms
        .open(&state, doc.id)
        .await
        .map_err(ApiError::store)?;
    let source = room.source().await;
    let earlier = earlier_urls(&state, &doc).await.map_err(ApiError::store)?;
    let id = doc.id.to_string();
    let url = canonical_url(&doc);
    let input = chopin_document::reader::DocumentInput {
        id: &id,
        url: &url,
        title: Some(&doc.title),
        revision: doc.plan_revision as u64,
        earlier_urls: &earlier,
        child: None,
        kind: chopin_document::reader::ReadKind::McpDocument,
        source: &source,
        accepted_comments: &[],
        brief: None,
    };
    let args = chopin_document::reader::ReadArgs {
        offset: query.offset,
        limit: query.limit,
        column: query.column,
    };
    match chopin_document::reader::read_text(&input, &args) {
        Ok(text) => Ok((
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            text,
        )
            .into_response()),
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-read",
            e.to_string(),
        )),
    }
}

/// An [`ApiError`] for a storage failure (logged; the caller is told only that storage failed).
pub fn store_error(e: StoreError) -> ApiError {
    ApiError::store(e)
}

/// The document `id` if the caller can write its repository.
pub async fn writable(state: &AppState, caller: &Caller, id: &str) -> Result<Document, ApiError> {
    let doc = by_id(state, id).await?;
    let (doc, access) = readable(state, caller, doc).await?;
    writer_only(&access, &caller.login)?;
    Ok(doc)
}
