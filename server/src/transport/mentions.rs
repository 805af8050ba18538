//! What a message can mention: `GET /api/channels/{channel}/mentions?query=&limit=` (CTX-34..37),
//! for anyone who can read the document, from the same live text a message's mentions are
//! resolved against.
//!
//! Owns: the route, its query (RULINGS CTX-35: `limit` clamped to 1–20, a `query` over 64
//! characters refused 400) and its answer: `headings` (`anchor`, `text`, `level`), `decisions`
//! (`id`, `title`), `researchCards` (`workspaceId`, `title`) and `files` (paths,
//! from the default branch as the asker's own session lists it, kept a minute; left out where
//! GitHub will not list them, CTX-38).
//! `GET /api/channels/{channel}/people` (CTX-39..41) answers who can be mentioned as a person
//! ([`crate::people`]).
//! Does not own: anchors, labels and narrowing ([`chopin_document::mention`]), or access.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chopin_document::mention::{self, LIST_DEFAULT, LIST_MAX, QUERY_MAX_CHARS};
use serde_json::{json, Value};

use super::documents::DocumentsDeps;
use super::{Routes, Table};
use crate::error::ApiError;

/// What the mentions route uses.
#[derive(Clone)]
pub struct MentionsDeps {
    pub documents: DocumentsDeps,
    pub repo_files: std::sync::Arc<crate::repo_files::RepoFiles>,
    pub people: std::sync::Arc<crate::people::People>,
    pub research_cards: std::sync::Arc<crate::research_cards::ResearchCards>,
}

pub fn routes(deps: MentionsDeps) -> Routes {
    Table::new()
        .get("/api/channels/{channel}/mentions", mentions)
        .get("/api/channels/{channel}/people", people)
        .with_state(deps)
}

/// The query: `query` (at most 64 characters) and `limit` (clamped to 1–20, 6 unless given).
pub fn parse_query(raw: Option<&str>) -> Result<(String, usize), ApiError> {
    let mut query = String::new();
    let mut limit = LIST_DEFAULT;
    for (key, value) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "query" => query = value.into_owned(),
            "limit" => {
                limit = value
                    .trim()
                    .parse::<i64>()
                    .map(|n| n.clamp(1, LIST_MAX as i64) as usize)
                    .map_err(|_| {
                        ApiError::new(
                            StatusCode::BAD_REQUEST,
                            "invalid-request",
                            "limit is a whole number (1 to 20)",
                        )
                    })?
            }
            _ => {}
        }
    }
    if query.chars().count() > QUERY_MAX_CHARS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            format!("A query is at most {QUERY_MAX_CHARS} characters."),
        ));
    }
    Ok((query, limit))
}

async fn mentions(
    State(deps): State<MentionsDeps>,
    Path(channel): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    let (query, limit) = parse_query(raw.as_deref())?;
    let open = deps
        .documents
        .open
        .open(doc.id)
        .await
        .map_err(ApiError::store)?;
    let source = open.source().await;
    let headings = mention::narrow(
        &mention::heading_anchors(&source),
        |h| &h.text,
        &query,
        limit,
    );
    let decisions = mention::narrow(
        &mention::decision_labels(&source),
        |d| &d.label,
        &query,
        limit,
    );
    // The document's research cards (CTX-36), narrowed by their titles.
    let cards = deps
        .research_cards
        .of_document(doc.id)
        .await
        .map_err(ApiError::store)?;
    let research = mention::narrow(&cards, |c| &c.title, &query, limit);
    let mut answer = json!({
        "headings": headings.iter().map(|h| json!({"anchor": h.anchor, "text": h.text, "level": h.level})).collect::<Vec<_>>(),
        "decisions": decisions.iter().map(|d| json!({"id": d.id, "title": d.label})).collect::<Vec<_>>(),
        "researchCards": research.iter().map(|c| json!({"workspaceId": c.workspace_id, "title": c.title})).collect::<Vec<_>>(),
    });
    // A file is named by its path; narrowed by its name (the last part) first, then the path.
    let listed = deps
        .repo_files
        .paths(caller.token(), &doc.repo_owner, &doc.repo_name)
        .await;
    if let Some(paths) = listed {
        let files = mention::narrow(
            &paths,
            |p: &String| p.rsplit('/').next().unwrap_or(p),
            &query,
            limit,
        );
        let files = if files.len() < limit {
            let mut more = files;
            for p in mention::narrow(&paths, |p: &String| p.as_str(), &query, limit) {
                if more.len() < limit && !more.contains(&p) {
                    more.push(p);
                }
            }
            more
        } else {
            files
        };
        answer["files"] = json!(files);
    }
    Ok(Json(answer))
}

/// `GET /api/channels/{channel}/people` (CTX-39..41): the repository's people as GitHub lists
/// them to the asker (`authoritative: true`), else the document's creator and its recent Chat
/// authors (`authoritative: false`). Anyone who cannot read the document is told it does not
/// exist.
async fn people(
    State(deps): State<MentionsDeps>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = deps.documents.access.caller(&headers, false).await?;
    let (doc, _) = deps.documents.readable(&caller, &channel).await?;
    let listed = deps.people.list(caller.token(), &doc).await;
    Ok(Json(json!({
        "people": listed.people.iter().map(|p| json!({ "login": p.login, "avatarUrl": p.avatar_url })).collect::<Vec<_>>(),
        "authoritative": listed.authoritative,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctx_34_ctx_35_limit_is_clamped_and_a_long_query_refused() {
        assert_eq!(parse_query(None).unwrap(), (String::new(), 6));
        assert_eq!(parse_query(Some("limit=0")).unwrap().1, 1);
        assert_eq!(
            parse_query(Some("limit=99&query=ov")).unwrap(),
            ("ov".into(), 20)
        );
        assert!(parse_query(Some("limit=x")).is_err());
        let long = format!("query={}", "a".repeat(65));
        assert_eq!(
            parse_query(Some(&long)).unwrap_err().code,
            "invalid-request"
        );
        let fits = format!("query={}", "é".repeat(64));
        assert!(parse_query(Some(&fits)).is_ok(), "characters, not bytes");
    }
}
