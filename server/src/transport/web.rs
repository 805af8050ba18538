//! The pages a person opens: `/` (sign in, or open a repository), `/documents/{owner}/{repo}`
//! (its documents; create one), `/documents/{owner}/{repo}/{slug}` and a child's
//! `/documents/{owner}/{repo}/{parent}/{slug}` (the document), their script and style under
//! `/assets/`, and a page that says "not found" for any other path a browser asks for.
//!
//! Owns: which page a URL is, decided here so a document URL that names nothing (or nothing the
//! person may read) answers `404` with a page saying so; the page shell, which carries what the
//! server knows as `<meta>` values (never inline script); the embedded assets with their `ETag`s
//! (a hashed name is cached for a year, `immutable`); the security headers of every page
//! (`Content-Security-Policy` with `script-src 'self'`, `X-Content-Type-Options`,
//! `Referrer-Policy`, `X-Frame-Options`). Does not own: what the pages do (the script, built
//! from `web/` into `server/web-dist/` and embedded at compile time), sign-in (the auth routes)
//! or any rule about documents (the document routes the script calls).

use std::sync::{Arc, OnceLock};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;
use serde::Deserialize;

use super::{Routes, Table};
use crate::access::Access;
use crate::documents::{Documents, Locator};

/// The built pages: `web/build.mjs` writes them; they are part of the binary.
#[derive(RustEmbed)]
#[folder = "web-dist/"]
struct Assets;

/// The security headers of every page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// What the pages show of this server, and what they use.
#[derive(Clone)]
pub struct WebDeps {
    pub access: Arc<Access>,
    pub documents: Arc<Documents>,
    /// `sqlite` or `postgres`.
    pub database: &'static str,
    /// The configured Planner harness.
    pub harness: String,
    /// Browser sign-in goes through GitHub (`false` for a local, one-account server).
    pub github_sign_in: bool,
}

pub fn routes(deps: WebDeps) -> Routes {
    Table::new()
        .get("/", home)
        .get("/documents/{owner}/{repo}", repository)
        .get("/documents/{owner}/{repo}/{slug}", document)
        .get("/documents/{owner}/{repo}/{parent}/{slug}", child)
        .get("/assets/{file}", asset)
        .with_state(deps)
}

/// The answer to a path no route serves: a page for a browser (its top bar says what every
/// page says of the server, and who is signed in), JSON under `/api/`.
pub async fn not_found(deps: &WebDeps, headers: &HeaderMap, uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api/") || uri.path() == "/api" {
        return crate::error::ApiError::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("Nothing is served at {}.", uri.path()),
        )
        .into_response();
    }
    not_found_page(deps, headers).await
}

/// The page for an address that serves nothing.
async fn not_found_page(deps: &WebDeps, headers: &HeaderMap) -> Response {
    let mut shell = deps.shell(headers, "not-found").await;
    shell.missing = Some("Nothing is served at this address.".into());
    page(StatusCode::NOT_FOUND, &shell)
}

#[derive(Deserialize)]
struct Manifest {
    script: String,
    style: String,
}

fn manifest() -> &'static Manifest {
    static MANIFEST: OnceLock<Manifest> = OnceLock::new();
    MANIFEST.get_or_init(|| {
        let file = Assets::get("manifest.json").expect("web-dist/manifest.json is embedded");
        serde_json::from_slice(&file.data).expect("web-dist/manifest.json reads")
    })
}

/// What one page carries as `<meta>` values.
#[derive(Default)]
struct Shell {
    page: &'static str,
    login: Option<String>,
    repository: Option<String>,
    document: Option<String>,
    title: Option<String>,
    missing: Option<String>,
    database: &'static str,
    harness: String,
    auth: &'static str,
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(status: StatusCode, shell: &Shell) -> Response {
    let m = manifest();
    let mut metas = String::new();
    let mut meta = |name: &str, value: &str| {
        metas.push_str(&format!(
            "<meta name=\"chopin-{name}\" content=\"{}\">\n",
            escape(value)
        ));
    };
    meta("page", shell.page);
    meta("version", concat!("chopin ", env!("CARGO_PKG_VERSION")));
    meta("database", shell.database);
    meta("harness", &shell.harness);
    meta("auth", shell.auth);
    for (name, value) in [
        ("login", &shell.login),
        ("repository", &shell.repository),
        ("document", &shell.document),
        ("missing", &shell.missing),
    ] {
        if let Some(value) = value {
            meta(name, value);
        }
    }
    let title = shell.title.as_deref().unwrap_or("Chopin");
    let body = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<title>{title}</title>\n{metas}<link rel=\"stylesheet\" href=\"/assets/{style}\">\n\
<script type=\"module\" src=\"/assets/{script}\"></script>\n</head>\n<body>\n\
<main id=\"main\"><noscript>These pages need JavaScript.</noscript></main>\n</body>\n</html>\n",
        title = escape(title),
        style = m.style,
        script = m.script,
    );
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    security_headers(headers);
    response
}

fn security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

impl WebDeps {
    async fn shell(&self, headers: &HeaderMap, page: &'static str) -> Shell {
        let login = self
            .access
            .browser(headers)
            .await
            .map(|live| live.account.login.clone());
        Shell {
            page,
            login,
            database: self.database,
            harness: self.harness.clone(),
            auth: if self.github_sign_in {
                "github"
            } else {
                "local"
            },
            ..Shell::default()
        }
    }

    /// The document page for `locator`: 404 with a page saying so when it names no document the
    /// signed-in person may read (missing, archived and unreadable look alike, as in the API).
    async fn document_page(&self, headers: &HeaderMap, locator: Locator) -> Response {
        let mut shell = self.shell(headers, "document").await;
        if shell.login.is_none() {
            // The page asks to sign in first; nothing about the document is looked up.
            return page(StatusCode::OK, &shell);
        }
        let gone = |mut shell: Shell| {
            shell.page = "not-found";
            shell.missing = Some("No such document, or you cannot read it.".into());
            page(StatusCode::NOT_FOUND, &shell)
        };
        let caller = match self.access.caller(headers, false).await {
            Ok(caller) => caller,
            Err(e) => return failed(shell, e),
        };
        let doc = match self.documents.resolve(&locator).await {
            Ok(doc) => doc.filter(|d| !d.archived),
            Err(e) => return failed(shell, crate::error::ApiError::store(e)),
        };
        match self.access.readable(&caller, doc).await {
            Ok((doc, _)) => {
                shell.document = Some(doc.id.to_string());
                shell.repository = Some(format!("{}/{}", doc.repo_owner, doc.repo_name));
                shell.title = Some(format!("{} · Chopin", doc.title));
                page(StatusCode::OK, &shell)
            }
            Err(e) if e.status == StatusCode::NOT_FOUND => gone(shell),
            Err(e) => failed(shell, e),
        }
    }
}

/// A page that could not be made (GitHub or storage did not answer, a sign-in GitHub refused):
/// the error's status, and a page with its words.
fn failed(mut shell: Shell, e: crate::error::ApiError) -> Response {
    shell.page = "error";
    shell.missing = Some(e.message.clone());
    page(e.status, &shell)
}

async fn home(State(deps): State<WebDeps>, headers: HeaderMap) -> Response {
    page(StatusCode::OK, &deps.shell(&headers, "home").await)
}

async fn repository(
    State(deps): State<WebDeps>,
    Path((owner, repo)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut shell = deps.shell(&headers, "repository").await;
    shell.repository = Some(format!("{owner}/{repo}"));
    shell.title = Some(format!("{owner}/{repo} · Chopin"));
    page(StatusCode::OK, &shell)
}

async fn document(
    State(deps): State<WebDeps>,
    Path((owner, repo, slug)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    deps.document_page(&headers, Locator::Path { owner, repo, slug })
        .await
}

async fn child(
    State(deps): State<WebDeps>,
    Path((owner, repo, parent, slug)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    deps.document_page(
        &headers,
        Locator::ChildPath {
            owner,
            repo,
            parent,
            slug,
        },
    )
    .await
}

/// `GET /assets/{file}`: an embedded file with its `ETag`; `304` when the browser has it; the
/// build's gzipped copy (`{file}.gz`) with `Content-Encoding: gzip` to a browser that takes it.
async fn asset(
    State(deps): State<WebDeps>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Response {
    let servable = file != "manifest.json" && !file.ends_with(".gz");
    let Some(found) = Assets::get(&file).filter(|_| servable) else {
        return not_found_page(&deps, &headers).await;
    };
    let etag = format!("\"{}\"", hex::encode(&found.metadata.sha256_hash()[..16]));
    // The build's gzipped copy, for a browser that takes gzip.
    let gzipped = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|e| e.split(';').next().is_some_and(|e| e.trim() == "gzip"))
        })
        .then(|| Assets::get(&format!("{file}.gz")))
        .flatten();
    let mut response = if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag))
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else if let Some(gz) = gzipped {
        let mut r = (StatusCode::OK, gz.data.into_owned()).into_response();
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        (StatusCode::OK, found.data.into_owned()).into_response()
    };
    let type_ = match file.rsplit('.').next() {
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(type_));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    // Built names carry a hash of their content: they never change under the same name.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    security_headers(h);
    response
}
