//! Documents as records: naming them, finding them, and the changes a writer makes to them.
//!
//! Owns: [`Documents`] — creating a document of a repository (a slug from its title, `-2`, `-3`…
//! when taken), renaming (the former URL kept as an alias), archiving and restoring, and
//! resolving a locator; the pure rules around them: canonical URLs ([`canonical_url`]),
//! locators ([`Locator`]: a UUID or `/documents/<owner>/<repo>/<slug>`, absolute URL allowed),
//! slugs ([`slugify`]) and titles ([`title_of`]), and the JSON view of a document
//! ([`document_json`]). [`children`]: a root document's own children.
//! Does not own: who may do what (the access checks decide before anything here is called), a
//! document's content ([`crate::content`]), or what archiving does to an attached Planner
//! (the planner table).

pub mod children;
pub mod creations;
pub mod provenance;
pub mod updates;

use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::ApiError;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{
    Creator, Document, DocumentStore, NewDocument, Provenance, StoreError, StoreResult,
};

/// What a new document is made with besides its repository, title and slug.
#[derive(Debug, Clone, Default)]
pub struct Made {
    /// The root document it is a child of.
    pub parent: Option<Uuid>,
    /// The account creating it; `None` only where nobody is known.
    pub creator: Option<Creator>,
    /// Its creation brief (MCP `create_document`), already checked against [`BRIEF_MAX_BYTES`].
    pub brief: Option<String>,
    /// Its creation provenance (MCP `create_document`), already checked by
    /// [`provenance::provenance_of`].
    pub provenance: Option<Provenance>,
    /// Made through MCP `create_document` (LIFE-76's creation metadata).
    pub through_mcp: bool,
    /// The id to create it under (an idempotent creation's claim, see [`crate::kept::Claimed::made_id`]);
    /// `None`: a fresh one.
    pub id: Option<Uuid>,
}

/// Most UTF-8 bytes of a creation brief (our bound; the spec gives none): 64 KiB, as an
/// `invoke_planner` instruction.
pub const BRIEF_MAX_BYTES: usize = 64 * 1024;

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
    /// A child's URL, nested under its parent's: `/documents/<owner>/<repo>/<parent>/<child>`.
    ChildPath {
        owner: String,
        repo: String,
        parent: String,
        slug: String,
    },
}

impl Locator {
    /// A UUID, or a canonical URL — absolute (any origin; only its path counts) or a path; a
    /// child's URL nests under its parent's.
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
            ["", "documents", owner, repo, parent, slug]
                if !owner.is_empty()
                    && !repo.is_empty()
                    && !parent.is_empty()
                    && !slug.is_empty() =>
            {
                Some(Locator::ChildPath {
                    owner: decode(owner)?,
                    repo: decode(repo)?,
                    parent: decode(parent)?,
                    slug: decode(slug)?,
                })
            }
            _ => None,
        }
    }
}

impl Locator {
    /// [`Locator::parse`] for a client of this server: an absolute URL counts only at `origin`
    /// (this server's), so no locator names a document through another host.
    pub fn parse_at(text: &str, origin: &str) -> Option<Locator> {
        let text = text.trim();
        if !text.starts_with('/') && Uuid::parse_str(text).is_err() {
            let ours = url::Url::parse(origin).ok()?.origin();
            if url::Url::parse(text).ok()?.origin() != ours {
                return None;
            }
        }
        Locator::parse(text)
    }

    /// The repository a locator names (`owner`, `repo`); an id names none.
    pub fn repository(&self) -> Option<(&str, &str)> {
        match self {
            Locator::Id(_) => None,
            Locator::Path { owner, repo, .. } | Locator::ChildPath { owner, repo, .. } => {
                Some((owner, repo))
            }
        }
    }
}

fn decode(part: &str) -> Option<String> {
    url::form_urlencoded::parse(format!("x={part}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
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

/// The slug a writer asked for, or one made from the title. An asked-for slug must already be
/// one ([`slugify`] leaves it unchanged).
pub fn slug_of(asked: Option<&str>, title: &str) -> Result<String, ApiError> {
    match asked {
        Some(s) if slugify(s) == s => Ok(s.to_owned()),
        Some(s) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-slug",
            format!("{s:?} is not a slug: use lowercase letters, digits and single hyphens (for example {:?}).", slugify(s)),
        )),
        None => Ok(slugify(title)),
    }
}

/// A document title for a new document: at most 300 characters on one line (may be empty).
pub fn new_title(raw: &str) -> Result<String, ApiError> {
    let title = raw.trim().to_owned();
    if title.chars().count() > 300 || title.contains(['\n', '\r']) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-title",
            "A title is one line of at most 300 characters.",
        ));
    }
    Ok(title)
}

/// Documents as records.
/// Most documents one listing of a repository names.
pub const REPOSITORY_LIST_MAX: u32 = 500;

pub struct Documents {
    store: Arc<dyn DocumentStore>,
    clock: SharedClock,
    entropy: SharedEntropy,
}

impl Documents {
    pub fn new(store: Arc<dyn DocumentStore>, clock: SharedClock, entropy: SharedEntropy) -> Self {
        Documents {
            store,
            clock,
            entropy,
        }
    }

    /// The document a locator names, archived or not.
    pub async fn resolve(&self, locator: &Locator) -> StoreResult<Option<Document>> {
        match locator {
            Locator::Id(id) => self.store.document(*id).await,
            Locator::Path { owner, repo, slug } => {
                self.store.document_by_slug(owner, repo, slug).await
            }
            Locator::ChildPath {
                owner,
                repo,
                parent,
                slug,
            } => {
                // Both by their slugs (or former ones); the child must be that parent's.
                let Some(parent) = self.store.document_by_slug(owner, repo, parent).await? else {
                    return Ok(None);
                };
                let child = self.store.document_by_slug(owner, repo, slug).await?;
                Ok(child.filter(|c| c.parent_id == Some(parent.id)))
            }
        }
    }

    /// The document with id `id` (text from a URL), if there is one.
    pub async fn by_id(&self, id: &str) -> Result<Option<Document>, ApiError> {
        let Ok(id) = Uuid::parse_str(id) else {
            return Ok(None);
        };
        self.store.document(id).await.map_err(ApiError::store)
    }

    /// The creation brief of a document, `None` for one created without a brief.
    pub async fn brief(&self, id: Uuid) -> Result<Option<String>, ApiError> {
        self.store.document_brief(id).await.map_err(ApiError::store)
    }

    /// The creation provenance of a document, `None` for one created without it.
    pub async fn provenance(&self, id: Uuid) -> Result<Option<Provenance>, ApiError> {
        self.store
            .document_provenance(id)
            .await
            .map_err(ApiError::store)
    }

    /// The document `owner/repo/slug` names (its slug or a former one).
    pub async fn by_slug(
        &self,
        owner: &str,
        repo: &str,
        slug: &str,
    ) -> Result<Option<Document>, ApiError> {
        self.store
            .document_by_slug(owner, repo, slug)
            .await
            .map_err(ApiError::store)
    }

    /// Creates a document in `owner/repo` (GitHub's case), under `made.parent` when given, with
    /// its creator, brief and provenance. A taken slug gets a numeric suffix (`-2`, `-3`, …).
    pub async fn create(
        &self,
        owner: &str,
        repo: &str,
        title: &str,
        base_slug: &str,
        made: Made,
    ) -> Result<Document, ApiError> {
        let parent = made.parent;
        let mut new = NewDocument {
            id: Uuid::nil(),
            repo_owner: owner.to_owned(),
            repo_name: repo.to_owned(),
            slug: String::new(),
            title: title.to_owned(),
            created_at_ms: 0,
            parent_id: made.parent,
            creator: made.creator,
            brief: made.brief,
            provenance: made.provenance,
            mcp_created: made.through_mcp,
        };
        for n in 1..=SLUG_ATTEMPTS {
            new.slug = if n == 1 {
                base_slug.to_owned()
            } else {
                format!("{base_slug}-{n}")
            };
            new.id = made.id.unwrap_or_else(|| self.entropy.uuid());
            new.created_at_ms = self.clock.now_ms();
            match self.store.create_document(&new).await {
                Ok(doc) => return Ok(doc),
                Err(StoreError::Conflict(why)) => {
                    // Its id is taken: an earlier call under the same claim made it.
                    if made.id.is_some() {
                        if let Some(doc) = self.made_already(new.id).await? {
                            return Ok(doc);
                        }
                    }
                    // Either the slug is taken (try the next) or a parent rule failed (say so).
                    if parent.is_some() && !why.contains("slug") {
                        return Err(ApiError::new(StatusCode::CONFLICT, "invalid-parent", why));
                    }
                }
                Err(e) => return Err(ApiError::store(e)),
            }
        }
        Err(ApiError::new(
            StatusCode::CONFLICT,
            "slug-taken",
            format!("{SLUG_ATTEMPTS} documents of this repository already use the slug {base_slug:?}; choose another."),
        ))
    }

    /// Document `id`, if it exists.
    async fn made_already(&self, id: Uuid) -> Result<Option<Document>, ApiError> {
        self.store.document(id).await.map_err(ApiError::store)
    }

    /// Archives or restores; the document as it is now.
    pub async fn set_archived(&self, id: Uuid, archived: bool) -> Result<Document, ApiError> {
        self.store
            .set_archived(id, archived)
            .await
            .map_err(ApiError::store)?;
        self.store
            .document(id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(ApiError::not_found)
    }

    /// Renames: a new slug and title, the former URL kept as an alias.
    pub async fn rename(&self, id: Uuid, slug: &str, title: &str) -> Result<Document, ApiError> {
        match self.store.rename_document(id, slug, title).await {
            Ok(d) => Ok(d),
            Err(StoreError::Conflict(why)) => {
                Err(ApiError::new(StatusCode::CONFLICT, "slug-taken", why))
            }
            Err(e) => Err(ApiError::store(e)),
        }
    }

    /// The documents of `owner/repo`, oldest first: at most [`REPOSITORY_LIST_MAX`].
    pub async fn of_repository(&self, owner: &str, repo: &str) -> Result<Vec<Document>, ApiError> {
        self.store
            .repository_documents(owner, repo, REPOSITORY_LIST_MAX)
            .await
            .map_err(ApiError::store)
    }

    /// The canonical URLs a document had before its renames, oldest first.
    pub async fn earlier_urls(&self, doc: &Document) -> StoreResult<Vec<String>> {
        Ok(self
            .store
            .earlier_slugs(doc.id)
            .await?
            .into_iter()
            .map(|slug| format!("/documents/{}/{}/{slug}", doc.repo_owner, doc.repo_name))
            .collect())
    }
}
