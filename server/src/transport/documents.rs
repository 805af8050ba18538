//! The document routes: create (a top-level document or a child), read the record by slug or id,
//! archive or restore, rename, read the Markdown source or the paged text, and reset the
//! Planner.
//!
//! Owns: the routes' paths, bodies and answers (`{error, message}` on refusal). Every route asks
//! [`Access`] who the caller is and what they may do first; a document the caller cannot read
//! answers exactly like a missing one.
//! Does not own: the rules (documents in [`crate::documents`], content in [`crate::content`],
//! ownership in [`crate::planner`]).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{Routes, Table};
use crate::access::{writer_only, Access, Caller};
use crate::content::OpenDocuments;
use crate::documents::children::child_url;
use crate::documents::{self, document_json, Documents, Made};
use crate::error::ApiError;
use crate::identity::github::RepoAccess;
use crate::planner::Planners;
use crate::questions::{Questions, Scope};
use crate::runs::{Runs, STAGES_PAGE_MAX};
use crate::store::Document;

/// What the document routes use.
#[derive(Clone)]
pub struct DocumentsDeps {
    pub access: Arc<Access>,
    pub documents: Arc<Documents>,
    pub open: Arc<OpenDocuments>,
    pub planners: Arc<Planners>,
    pub questions: Arc<Questions>,
    pub runs: Arc<Runs>,
    /// The documents' generated descriptions.
    pub descriptions: Arc<crate::jobs::description::Descriptions>,
    /// The documents' background jobs, listed for readers.
    pub jobs: Arc<dyn crate::store::JobStore>,
    /// Which documents this process serves (`PROCESSES=many`).
    pub serving: Arc<crate::serving::Serving>,
}

impl DocumentsDeps {
    /// Refuses `503 served-elsewhere` a document whose tree another process serves — for the
    /// paths that name a document in their body rather than their path (`/mcp`).
    pub(super) async fn served_here(&self, doc: &Document) -> Result<(), ApiError> {
        match self.serving.serve(doc.id).await.map_err(ApiError::store)? {
            crate::serving::Serve::Here => Ok(()),
            crate::serving::Serve::Elsewhere { retry_after_ms, .. } => {
                Err(super::placement::elsewhere(retry_after_ms))
            }
        }
    }

    /// The document `id` and what the caller may do on its repository, if it can read it.
    pub(super) async fn readable(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(Document, RepoAccess), ApiError> {
        let doc = self.documents.by_id(id).await?;
        self.access.readable(caller, doc).await
    }

    /// The document `id`, if the caller can write it.
    pub(super) async fn writable(&self, caller: &Caller, id: &str) -> Result<Document, ApiError> {
        let (doc, access) = self.readable(caller, id).await?;
        writer_only(&access, &caller.login)?;
        Ok(doc)
    }

    /// What the caller may do on `owner/repo`, to create a document there: it must see the
    /// repository (`repository-not-found` otherwise) and push to it.
    pub(super) async fn writable_repository(
        &self,
        caller: &Caller,
        owner: &str,
        repo: &str,
    ) -> Result<RepoAccess, ApiError> {
        let access = self
            .access
            .caller_access(caller, owner, repo)
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
        Ok(access)
    }

    /// Archives or restores `doc` (its writer checked): archiving ends an attached Planner's
    /// link and closes the document's open sockets (4404).
    pub(super) async fn set_archived(
        &self,
        doc: &Document,
        archived: bool,
    ) -> Result<Document, ApiError> {
        let doc = self.documents.set_archived(doc.id, archived).await?;
        if archived {
            // Archiving withdraws the Planner's questions (ATM-31).
            let why = "The document was archived.";
            let url = documents::canonical_url(&doc);
            self.questions
                .withdraw(doc.id, &url, Scope::Document, why)
                .await;
            self.open.set_archived(doc.id, true);
            self.planners.archived(doc.id).await;
        } else {
            // A copy still open here since the archive must not keep closing new sockets.
            self.open.set_archived(doc.id, false);
        }
        Ok(doc)
    }

    /// Renames `doc` (its writer checked): the document as the API shows it, with
    /// `earlierUrls`, its former URLs, which keep opening it.
    pub(super) async fn rename(
        &self,
        doc: &Document,
        slug: &str,
        title: &str,
    ) -> Result<Value, ApiError> {
        let renamed = self.documents.rename(doc.id, slug, title).await?;
        let mut body = document_json(&renamed);
        body["earlierUrls"] = json!(self
            .documents
            .earlier_urls(&renamed)
            .await
            .map_err(ApiError::store)?);
        Ok(body)
    }

    /// `doc` as a reader sees it now (the live source, its earlier URLs), handed to `read` as
    /// the input of the paged text and the structured view, with the source's analysis kept
    /// for this text.
    pub(super) async fn read_with<R>(
        &self,
        doc: &Document,
        read: impl FnOnce(
            &chopin_document::reader::DocumentInput<'_>,
            &chopin_document::reader::Analysis,
        ) -> R,
    ) -> Result<R, ApiError> {
        let open = self.open.open(doc.id).await.map_err(ApiError::store)?;
        let reading = open.reading().await;
        let earlier = self
            .documents
            .earlier_urls(doc)
            .await
            .map_err(ApiError::store)?;
        let brief = self.documents.brief(doc.id).await?;
        let id = doc.id.to_string();
        let url = documents::canonical_url(doc);
        Ok(read(
            &chopin_document::reader::DocumentInput {
                id: &id,
                url: &url,
                title: Some(&doc.title),
                revision: doc.plan_revision as u64,
                earlier_urls: &earlier,
                child: None,
                kind: chopin_document::reader::ReadKind::McpDocument,
                source: &reading.source,
                accepted_comments: &[],
                brief: brief.as_deref(),
            },
            &reading.analysis,
        ))
    }
}

pub fn routes(deps: DocumentsDeps) -> Routes {
    Table::new()
        .post("/api/repositories/{owner}/{repo}/documents", create)
        .get("/api/repositories/{owner}/{repo}/documents", list)
        .get("/api/repositories", repositories)
        .get(
            "/api/repositories/{owner}/{repo}/documents/{slug}",
            get_by_slug,
        )
        .get("/api/documents/{id}", get_by_id)
        .post("/api/documents/{id}/archive", archive)
        .post("/api/documents/{id}/rename", rename)
        .get("/api/documents/{id}/read", read)
        .get("/api/documents/{id}/source", source)
        .post("/api/documents/{id}/children", create_child)
        .post("/api/documents/{id}/planner/reset", reset_planner)
        .get("/api/documents/{id}/runs", list_runs)
        .get("/api/documents/{id}/jobs", list_jobs)
        .get("/api/documents/{id}/runs/{run}/stages", run_stages)
        .with_state(deps)
}

/// A JSON request body of type `T`, or a 400 saying the shape expected.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("expected {shape}: {e}"),
        )
    })
}

/// `GET /api/documents/{id}/runs`: every run card of the document, for anyone who can read it.
async fn list_runs(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let runs = deps.runs.cards(doc.id).await.map_err(ApiError::store)?;
    Ok(Json(json!({ "runs": runs })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StagesQuery {
    offset: Option<i64>,
    limit: Option<i64>,
}

/// `GET /api/documents/{id}/runs/{run}/stages?offset=&limit=`: a run's stored stages in the
/// order they were first reported, at most [`STAGES_PAGE_MAX`] a page (200 unless asked), for
/// anyone who can read the document (SES-11). `unreportedStages` counts earlier stages the
/// client never sent.
async fn run_stages(
    State(deps): State<DocumentsDeps>,
    Path((id, run)): Path<(String, String)>,
    Query(query): Query<StagesQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let offset = query.offset.unwrap_or(0);
    let limit = query.limit.unwrap_or(200);
    if offset < 0 || !(1..=STAGES_PAGE_MAX).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("offset is 0 or more and limit is 1 to {STAGES_PAGE_MAX}"),
        ));
    }
    let found = deps.runs.stages(doc.id, &run, offset, limit).await;
    let Some((record, page)) = found.map_err(ApiError::store)? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "run-not-found",
            format!("This document has no run {run:?}."),
        ));
    };
    let next = offset + page.stages.len() as i64;
    Ok(Json(json!({
        "runId": record.run_id,
        "offset": offset,
        "stages": page.stages.iter().map(|s| json!({
            "stageId": s.stage_id,
            "name": s.name,
            "status": s.status,
            "parentStageId": s.parent_stage_id,
            "durationMs": s.duration_ms,
        })).collect::<Vec<_>>(),
        "total": page.total,
        "more": next < page.total,
        "unreportedStages": record.omitted_stages,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateDocument {
    title: String,
    #[serde(default)]
    slug: Option<String>,
}

/// `POST /api/repositories/{owner}/{repo}/documents` `{title, slug?}`: a writer creates a
/// document. A slug already used in the repository gets a numeric suffix (`-2`, `-3`, …).
async fn create(
    State(deps): State<DocumentsDeps>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = deps.access.caller(&headers, true).await?;
    let input: CreateDocument = json_body(&body, r#"{\"title\": string, \"slug\"?: string}"#)?;
    let title = documents::new_title(&input.title)?;
    let base = documents::slug_of(input.slug.as_deref(), &title)?;
    let access = deps.writable_repository(&caller, &owner, &repo).await?;
    let doc = deps
        .documents
        .create(
            &access.owner,
            &access.repo,
            &title,
            &base,
            Made {
                creator: Some(caller.as_creator()),
                ..Made::default()
            },
        )
        .await?;
    tracing::info!(document = %doc.id, url = %documents::canonical_url(&doc), by = %caller.login, "document created");
    // Under several processes the new document is served where the balancer sends it next.
    deps.serving.made(doc.id).await;
    Ok((StatusCode::CREATED, Json(document_json(&doc))).into_response())
}

/// `GET /api/repositories`: the repositories the caller reaches through this server's GitHub
/// App, for the start page: `{repositories: ["owner/name", …], more}`.
async fn repositories(
    State(deps): State<DocumentsDeps>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let listed = deps.access.repositories(&caller).await?;
    Ok(Json(
        json!({ "repositories": listed.names, "more": listed.more }),
    ))
}

/// `GET /api/repositories/{owner}/{repo}/documents`: the repository's documents that are not
/// archived, oldest first (at most [`documents::REPOSITORY_LIST_MAX`]), each with its parent's
/// id; a child's `url` nests under its parent's. Read access decides first, as for a slug.
async fn list(
    State(deps): State<DocumentsDeps>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    deps.access
        .repository_readable(&caller, &owner, &repo)
        .await?;
    let found = deps.documents.of_repository(&owner, &repo).await?;
    let listed: Vec<Value> = found
        .iter()
        .filter(|d| !d.archived)
        .map(|d| {
            let mut v = document_json(d);
            if let Some(parent) = d.parent_id.and_then(|p| found.iter().find(|f| f.id == p)) {
                v["url"] = json!(child_url(parent, d));
            }
            v["parentId"] = json!(d.parent_id);
            v
        })
        .collect();
    Ok(Json(json!({ "documents": listed })))
}

/// `GET /api/repositories/{owner}/{repo}/documents/{slug}`. Read access to `owner/repo` is
/// decided before the slug is looked up, so without it a taken slug and a free one answer
/// alike.
async fn get_by_slug(
    State(deps): State<DocumentsDeps>,
    Path((owner, repo, slug)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    deps.access
        .repository_readable(&caller, &owner, &repo)
        .await?;
    let doc = deps
        .documents
        .by_slug(&owner, &repo, &slug)
        .await?
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(document_json(&doc)))
}

/// `GET /api/documents/{id}`.
async fn get_by_id(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let mut body = document_json(&doc);
    // The last completed generated description, untrusted model output (JOB-11); kept while
    // newer work is pending or has failed (JOB-13).
    body["description"] = match deps.descriptions.read(doc.id).await {
        Some(d) => json!({ "text": d.text, "planRevision": d.plan_revision }),
        None => Value::Null,
    };
    Ok(Json(body))
}

/// The most jobs `GET /api/documents/{id}/jobs` lists.
const JOBS_LISTED_MAX: u32 = 50;

/// `GET /api/documents/{id}/jobs`: the document's background jobs, newest first (at most
/// [`JOBS_LISTED_MAX`]), for anyone who reads the document: type, state, attempts, the declared
/// stages passed and the code-owned reason of a failure, and a completed job's artifact
/// (untrusted model output). Never the input, its fingerprint, the idempotency key or the
/// claim.
async fn list_jobs(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let jobs = deps
        .jobs
        .document_jobs(doc.id, JOBS_LISTED_MAX)
        .await
        .map_err(ApiError::store)?;
    let jobs: Vec<Value> = jobs
        .into_iter()
        .map(|job| {
            let progress: Value = serde_json::from_str(&job.progress).unwrap_or(json!([]));
            let artifact = job
                .artifact
                .as_deref()
                .and_then(|a| serde_json::from_str::<Value>(a).ok());
            json!({
                "id": job.id,
                "type": job.kind,
                "version": job.version,
                "origin": job.origin,
                "state": job.state.as_str(),
                "attempts": job.attempts,
                "failures": job.failures,
                "progress": progress,
                "reason": job.reason,
                "artifact": artifact,
                "createdAt": job.created_at_ms,
                "updatedAt": job.updated_at_ms,
            })
        })
        .collect();
    Ok(Json(json!({ "jobs": jobs })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetArchived {
    archived: bool,
}

/// `POST /api/documents/{id}/archive` `{archived}`: a writer archives or restores a document.
/// Archiving ends an attached Planner's link and closes the document's open sockets (4404).
async fn archive(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, true).await?;
    let input: SetArchived = json_body(&body, r#"{\"archived\": boolean}"#)?;
    let doc = deps.writable(&caller, &id).await?;
    let doc = deps.set_archived(&doc, input.archived).await?;
    Ok(Json(document_json(&doc)))
}

/// `POST /api/documents/{id}/planner/reset`: a writer releases the document's Planner; an
/// attached client is closed at once (4410) and the document is free for any eligible account.
async fn reset_planner(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, true).await?;
    let doc = deps.writable(&caller, &id).await?;
    let released = deps.planners.reset(doc.id).await.map_err(ApiError::store)?;
    tracing::info!(document = %doc.id, by = %caller.login, released, "Planner reset");
    Ok(Json(json!({ "released": released })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rename {
    title: String,
    #[serde(default)]
    slug: Option<String>,
}

/// `POST /api/documents/{id}/rename` `{title, slug?}`: a writer renames a document. Its former
/// URL keeps opening it (listed as an earlier URL); no revision counter changes.
async fn rename(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, true).await?;
    let input: Rename = json_body(&body, r#"{\"title\": string, \"slug\"?: string}"#)?;
    let title = documents::title_of(&input.title)?;
    let slug = documents::slug_of(input.slug.as_deref(), &title)?;
    let doc = deps.writable(&caller, &id).await?;
    Ok(Json(deps.rename(&doc, &slug, &title).await?))
}

/// `GET /api/documents/{id}/source`: the document's Markdown source as it is now (the live
/// content, with every edit made so far), and the plan revision it is at. The revision is read
/// first, so it never names an edit the source does not hold yet: `edit_plan` against it is
/// safe.
async fn source(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let open = deps.open.open(doc.id).await.map_err(ApiError::store)?;
    Ok(Json(json!({
        "id": doc.id,
        "url": documents::canonical_url(&doc),
        "planRevision": doc.plan_revision,
        "source": open.source().await,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    offset: Option<usize>,
    limit: Option<usize>,
    column: Option<usize>,
}

/// `GET /api/documents/{id}/read?offset=&limit=&column=`: the document as the paged Markdown
/// text an agent reads (at most 16,000 bytes a page, `next:` says how to continue), from the
/// live content.
async fn read(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    Query(query): Query<ReadQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = deps.access.caller(&headers, false).await?;
    let (doc, _) = deps.readable(&caller, &id).await?;
    let args = chopin_document::reader::ReadArgs {
        offset: query.offset,
        limit: query.limit,
        column: query.column,
    };
    let text = deps
        .read_with(&doc, |input, analysis| {
            chopin_document::reader::read_text_with(input, analysis, &args)
        })
        .await?;
    match text {
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateChild {
    title: String,
}

/// `POST /api/documents/{id}/children` `{title}`: a writer creates a child of a root document.
async fn create_child(
    State(deps): State<DocumentsDeps>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = deps.access.caller(&headers, true).await?;
    let input: CreateChild = json_body(&body, r#"{\"title\": string}"#)?;
    let title = documents::title_of(&input.title)?;
    let parent = deps.writable(&caller, &id).await?;
    let base = documents::slugify(&title);
    let child = deps
        .documents
        .create(
            &parent.repo_owner,
            &parent.repo_name,
            &title,
            &base,
            Made {
                parent: Some(parent.id),
                creator: Some(caller.as_creator()),
                brief: None,
                provenance: None,
                through_mcp: false,
                id: None,
            },
        )
        .await?;
    let mut body = document_json(&child);
    body["url"] = json!(child_url(&parent, &child));
    body["parent"] = json!(parent.id);
    Ok((StatusCode::CREATED, Json(body)))
}
