//! Repository tools: the Planner's bounded reads of its document's repository over GitHub's
//! REST API — `read_repository_file`, `list_repository_tree`, `search_repository` and
//! `repository_history` (RFC-26, ISO-32).
//!
//! Owns: the four tools' names, input schemas and descriptions (no field names a repository),
//! checking their arguments (paths, commit ids, line ranges, queries, pages), the GitHub paths
//! built from them, and the bounded results: at most [`RESULT_MAX_BYTES`] of text, at most
//! [`FILE_MAX_LINES`] lines of a file, [`TREE_MAX_ENTRIES`] tree entries, [`SEARCH_MAX_RESULTS`]
//! search results and [`HISTORY_MAX_COMMITS`] commits a call, each saying how to go on.
//! Does not own: whose token is used or whether the call may run (the turn's host rechecks the
//! owner before every tool and hands the owner's token in), or the REST client's own bounds
//! (time, answer size, rate limits: [`GitHub`]).
//!
//! Invariants: the repository a call reaches is the one the server gives it ([`Bound`], the
//! document's), never one the model names: the schemas are closed, so an `owner` or `repo`
//! argument is refused before anything is asked. A path is a relative path inside the
//! repository: absolute paths, `.` and `..` segments, empty segments, backslashes, `%` (an
//! encoded separator or dot), `?`, `#` and control characters are refused, and each segment is
//! percent-encoded into the URL, so nothing a model writes can change which endpoint or which
//! repository is asked. A `ref` is a full 40-hex commit id; without one, the repository's
//! default branch. Code search is scoped to the repository in its query and its results are
//! kept only when their repository's node id is the bound repository's (a `repo:` qualifier in
//! the model's query widens GitHub's search, never our answer).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::harness::{HostToolResult, ToolSpec};
use crate::identity::github::{GitHub, GitHubError, RepoInfo, ACCEPT_JSON};

/// The most bytes of text one repository tool result carries (as `read_plan`'s READ_BYTES).
pub const RESULT_MAX_BYTES: usize = 16_000;
/// The most lines of a file one `read_repository_file` call returns.
pub const FILE_MAX_LINES: usize = 400;
/// A line longer than this many bytes is cut (and says so).
pub const LINE_MAX_BYTES: usize = 2_000;
/// The most bytes of a file read from GitHub (1 MiB); a longer file is refused.
pub const FILE_MAX_BYTES: usize = 1024 * 1024;
/// The most bytes of a tree listing read from GitHub (4 MiB).
pub const TREE_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The longest path a tool takes, in bytes (as a mentioned path, RULINGS CTX-29).
pub const PATH_MAX_BYTES: usize = 1_024;
/// The most entries one `list_repository_tree` call returns.
pub const TREE_MAX_ENTRIES: usize = 300;
/// The longest search query, in characters.
pub const SEARCH_QUERY_MAX_CHARS: usize = 256;
/// The most search results one call returns (and the default).
pub const SEARCH_MAX_RESULTS: u32 = 20;
const SEARCH_DEFAULT_RESULTS: u32 = 10;
/// The most commits one `repository_history` call returns.
pub const HISTORY_MAX_COMMITS: u32 = 30;
const HISTORY_DEFAULT_COMMITS: u32 = 20;
/// The last page a search or history call may ask for.
pub const MAX_PAGE: u32 = 10;
/// The longest commit message line kept.
const MESSAGE_MAX_CHARS: usize = 200;

/// The tools' names.
pub const REPOSITORY_TOOLS: [&str; 4] = [
    "read_repository_file",
    "list_repository_tree",
    "search_repository",
    "repository_history",
];

/// The repository a call is bound to: the document's, from the server's own record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub owner: String,
    pub repo: String,
}

/// The four tools as the model sees them.
pub fn tool_specs() -> Vec<ToolSpec> {
    let reference = json!({
        "type": "string",
        "description": "A full 40-character commit id to read at; leave it out for the repository's default branch."
    });
    let path =
        |what: &str| json!({ "type": "string", "maxLength": PATH_MAX_BYTES, "description": what });
    vec![
        ToolSpec {
            name: "read_repository_file".to_owned(),
            description: format!(
                "Read a text file of this document's repository, by its path inside the repository (for example src/main.rs). Returns numbered lines, at most {FILE_MAX_LINES} and {RESULT_MAX_BYTES} bytes at a time; the last line says where to continue (startLine)."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": path("The file's path inside the repository, without a leading slash."),
                    "ref": reference,
                    "startLine": { "type": "integer", "minimum": 1 },
                    "endLine": { "type": "integer", "minimum": 1 }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "list_repository_tree".to_owned(),
            description: format!(
                "List the files and folders of this document's repository under a folder (the whole repository when path is left out). At most {TREE_MAX_ENTRIES} entries a call; continue with offset."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": path("A folder inside the repository; leave it out for the top."),
                    "ref": reference,
                    "recursive": { "type": "boolean", "description": "Everything below the folder, not only its own entries." },
                    "offset": { "type": "integer", "minimum": 0 }
                },
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "search_repository".to_owned(),
            description: format!(
                "Search the code of this document's repository (GitHub code search on its default branch). Returns matching files with the lines that matched, at most {SEARCH_MAX_RESULTS} a page."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string", "minLength": 1, "maxLength": SEARCH_QUERY_MAX_CHARS },
                    "page": { "type": "integer", "minimum": 1, "maximum": MAX_PAGE },
                    "perPage": { "type": "integer", "minimum": 1, "maximum": SEARCH_MAX_RESULTS }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "repository_history".to_owned(),
            description: format!(
                "The commits of this document's repository, newest first: on its default branch or up to a commit, optionally only those touching a path. At most {HISTORY_MAX_COMMITS} a page."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": path("Only commits touching this file or folder."),
                    "ref": reference,
                    "page": { "type": "integer", "minimum": 1, "maximum": MAX_PAGE },
                    "perPage": { "type": "integer", "minimum": 1, "maximum": HISTORY_MAX_COMMITS }
                },
                "additionalProperties": false
            }),
        },
    ]
}

/// Whether `name` is one of the repository tools.
pub fn is_repository_tool(name: &str) -> bool {
    REPOSITORY_TOOLS.contains(&name)
}

/// Checks a path a model gave and returns it as URL path segments, percent-encoded and joined
/// by `/` (empty for the repository's top, where `allow_top`). See the module's invariants.
pub fn checked_path(path: &str, allow_top: bool) -> Result<String, String> {
    if path.len() > PATH_MAX_BYTES {
        return Err(format!("the path is longer than {PATH_MAX_BYTES} bytes"));
    }
    if path.starts_with('/') {
        return Err(format!(
            "{path:?} is an absolute path; give a path inside the repository, such as src/main.rs"
        ));
    }
    if let Some(bad) = path
        .chars()
        .find(|c| matches!(c, '\\' | '%' | '?' | '#') || c.is_control())
    {
        return Err(format!(
            "{path:?} holds {bad:?}, which a repository path here may not hold (no backslashes, percent-encoding, '?', '#' or control characters)"
        ));
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed.is_empty() {
        return if allow_top {
            Ok(String::new())
        } else {
            Err("the path is empty; name a file inside the repository".to_owned())
        };
    }
    let mut segments = Vec::new();
    for segment in trimmed.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "{path:?} leaves or skips through folders ('..', '.' or '//'); give a plain path inside the repository"
            ));
        }
        segments.push(encode(segment));
    }
    Ok(segments.join("/"))
}

/// A `ref` argument: a full commit id, lower-cased.
pub fn checked_ref(reference: &str) -> Result<String, String> {
    if reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(reference.to_ascii_lowercase())
    } else {
        Err(format!(
            "ref {reference:?} is not a full 40-character commit id; leave it out to read the default branch"
        ))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileArgs {
    path: String,
    #[serde(default, rename = "ref")]
    reference: Option<String>,
    #[serde(default)]
    start_line: Option<usize>,
    #[serde(default)]
    end_line: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TreeArgs {
    #[serde(default)]
    path: Option<String>,
    #[serde(default, rename = "ref")]
    reference: Option<String>,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    offset: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchArgs {
    query: String,
    #[serde(default)]
    page: Option<u32>,
    #[serde(default)]
    per_page: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HistoryArgs {
    #[serde(default)]
    path: Option<String>,
    #[serde(default, rename = "ref")]
    reference: Option<String>,
    #[serde(default)]
    page: Option<u32>,
    #[serde(default)]
    per_page: Option<u32>,
}

fn args<T: serde::de::DeserializeOwned>(tool: &str, input: Value) -> Result<T, String> {
    serde_json::from_value(input).map_err(|e| {
        format!("invalid {tool} arguments: {e} (the repository is always this document's; no argument names one)")
    })
}

fn page(page: Option<u32>) -> Result<u32, String> {
    match page.unwrap_or(1) {
        p @ 1..=MAX_PAGE => Ok(p),
        p => Err(format!("page {p} is out of range 1–{MAX_PAGE}")),
    }
}

fn per_page(per_page: Option<u32>, default: u32, max: u32) -> Result<u32, String> {
    match per_page.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        n => Err(format!("perPage {n} is out of range 1–{max}")),
    }
}

/// One repository tool call whose arguments have the tool's shape (their values are checked
/// again where they are used).
pub enum Call {
    File(FileArgs),
    Tree(TreeArgs),
    Search(SearchArgs),
    History(HistoryArgs),
}

/// Reads the arguments of repository tool `name`: an unknown field (an `owner`, a `repo`…),
/// a bad path, ref or query is refused here, before anything is asked of GitHub.
pub fn parse(name: &str, input: Value) -> Result<Call, String> {
    let call = match name {
        "read_repository_file" => Call::File(args(name, input)?),
        "list_repository_tree" => Call::Tree(args(name, input)?),
        "search_repository" => Call::Search(args(name, input)?),
        "repository_history" => Call::History(args(name, input)?),
        other => return Err(format!("unknown repository tool {other:?}")),
    };
    let (path, reference, allow_top) = match &call {
        Call::File(a) => (Some(a.path.as_str()), a.reference.as_deref(), false),
        Call::Tree(a) => (a.path.as_deref(), a.reference.as_deref(), true),
        Call::History(a) => (a.path.as_deref(), a.reference.as_deref(), true),
        Call::Search(_) => (None, None, true),
    };
    if let Some(path) = path {
        checked_path(path, allow_top)?;
    }
    if let Some(reference) = reference {
        checked_ref(reference)?;
    }
    Ok(call)
}

/// The repository tools over a GitHub REST client.
pub struct RepositoryTools {
    github: GitHub,
}

/// Why a call failed, in words for the model.
type Failed = String;

fn github_failed(e: GitHubError) -> Failed {
    e.to_string()
}

impl RepositoryTools {
    pub fn new(github: GitHub) -> Self {
        RepositoryTools { github }
    }

    /// The bound repository as `token` sees it (names, node id, default branch).
    pub async fn repository(&self, token: &str, bound: &Bound) -> Result<RepoInfo, Failed> {
        match self
            .github
            .repository(token, &bound.owner, &bound.repo)
            .await
        {
            Ok(Some(info)) => Ok(info),
            Ok(None) => Err(format!(
                "the repository {}/{} could not be found with the Planner owner's access",
                bound.owner, bound.repo
            )),
            Err(e) => Err(github_failed(e)),
        }
    }

    /// Runs one checked call ([`parse`]) for the repository `info` (the bound one, as
    /// [`RepositoryTools::repository`] gave it), with the owner's `token`.
    pub async fn execute(&self, call: Call, token: &str, info: &RepoInfo) -> HostToolResult {
        let result = match call {
            Call::File(a) => self.read_file(a, token, info).await,
            Call::Tree(a) => self.list_tree(a, token, info).await,
            Call::Search(a) => self.search(a, token, info).await,
            Call::History(a) => self.history(a, token, info).await,
        };
        match result {
            Ok(output) => HostToolResult::ok(output),
            Err(why) => HostToolResult::error(why),
        }
    }

    fn base(info: &RepoInfo) -> String {
        // Both names come from GitHub's own answer for the bound repository; checked again so
        // that nothing odd in that answer can change the path either.
        format!("/repos/{}/{}", encode(&info.owner), encode(&info.repo))
    }

    fn reference(info: &RepoInfo, reference: Option<&str>) -> Result<(String, String), Failed> {
        match reference {
            Some(r) => {
                let r = checked_ref(r)?;
                Ok((r.clone(), r))
            }
            None => Ok((encode(&info.default_branch), info.default_branch.clone())),
        }
    }

    async fn read_file(&self, a: FileArgs, token: &str, info: &RepoInfo) -> Result<Value, Failed> {
        let path = checked_path(&a.path, false)?;
        let (reference, shown_ref) = Self::reference(info, a.reference.as_deref())?;
        let start = a.start_line.unwrap_or(1);
        if start == 0 {
            return Err("startLine counts from 1".to_owned());
        }
        if let Some(end) = a.end_line {
            if end < start {
                return Err(format!("endLine {end} is before startLine {start}"));
            }
        }
        let url = format!("{}/contents/{path}?ref={reference}", Self::base(info));
        let response = self
            .github
            .read(
                token,
                &url,
                "application/vnd.github.raw+json",
                FILE_MAX_BYTES,
            )
            .await
            .map_err(github_failed)?
            .ok_or_else(|| {
                format!(
                    "{} is larger than {} KiB, too large to read here",
                    a.path,
                    FILE_MAX_BYTES / 1024
                )
            })?;
        match response.status.as_u16() {
            200 => {}
            404 => {
                return Err(format!(
                    "there is no file {} at {shown_ref} in this repository",
                    a.path
                ))
            }
            s => return Err(format!("GitHub answered {s} for this file")),
        }
        let is_raw = response
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/vnd.github.raw"));
        if !is_raw {
            if serde_json::from_slice::<Vec<Value>>(&response.body).is_ok() {
                return Err(format!(
                    "{} is a folder; list it with list_repository_tree",
                    a.path
                ));
            }
            return Err(format!("{} is not a file that can be read as text", a.path));
        }
        if response.body.contains(&0) {
            return Err(format!("{} is a binary file", a.path));
        }
        let Ok(text) = std::str::from_utf8(&response.body) else {
            return Err(format!("{} is not UTF-8 text", a.path));
        };
        Ok(Value::String(file_page(
            &a.path, &shown_ref, text, start, a.end_line,
        )))
    }

    /// Every file path of `owner/repo`'s default branch as `token` sees it, at most `max`
    /// (the first `max` in GitHub's order): what a Chat file mention may name (CTX-38).
    pub async fn file_paths(
        &self,
        token: &str,
        owner: &str,
        repo: &str,
        max: usize,
    ) -> Result<Vec<String>, Failed> {
        let info = self
            .repository(
                token,
                &Bound {
                    owner: owner.to_owned(),
                    repo: repo.to_owned(),
                },
            )
            .await?;
        let (reference, _) = Self::reference(&info, None)?;
        let url = format!("{}/git/trees/{reference}?recursive=1", Self::base(&info));
        let response = self
            .github
            .read(token, &url, ACCEPT_JSON, TREE_MAX_BODY_BYTES)
            .await
            .map_err(github_failed)?
            .ok_or_else(|| "the repository's tree is too large to list".to_owned())?;
        if response.status.as_u16() != 200 {
            return Err(format!("GitHub answered {} for the tree", response.status));
        }
        #[derive(Deserialize)]
        struct Tree {
            tree: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            path: String,
            #[serde(rename = "type")]
            kind: String,
        }
        let tree: Tree = serde_json::from_slice(&response.body)
            .map_err(|_| "GitHub sent a tree Chopin could not read".to_owned())?;
        Ok(tree
            .tree
            .into_iter()
            .filter(|e| e.kind == "blob")
            .map(|e| e.path)
            .take(max)
            .collect())
    }

    async fn list_tree(&self, a: TreeArgs, token: &str, info: &RepoInfo) -> Result<Value, Failed> {
        let folder = match a.path.as_deref() {
            Some(p) => {
                checked_path(p, true)?;
                p.trim_end_matches('/').to_owned()
            }
            None => String::new(),
        };
        let (reference, shown_ref) = Self::reference(info, a.reference.as_deref())?;
        let url = format!("{}/git/trees/{reference}?recursive=1", Self::base(info));
        let response = self
            .github
            .read(token, &url, ACCEPT_JSON, TREE_MAX_BODY_BYTES)
            .await
            .map_err(github_failed)?
            .ok_or_else(|| {
                "the repository's tree is too large to list here; read files by path or search instead"
                    .to_owned()
            })?;
        match response.status.as_u16() {
            200 => {}
            404 | 409 | 422 => {
                return Err(format!(
                    "there is no tree at {shown_ref} in this repository"
                ))
            }
            s => return Err(format!("GitHub answered {s} for the tree")),
        }
        #[derive(Deserialize)]
        struct Tree {
            #[serde(default)]
            truncated: bool,
            tree: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            path: String,
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            size: Option<u64>,
        }
        let tree: Tree = serde_json::from_slice(&response.body)
            .map_err(|_| "GitHub sent a tree Chopin could not read".to_owned())?;
        let prefix = if folder.is_empty() {
            String::new()
        } else {
            format!("{folder}/")
        };
        if !folder.is_empty()
            && !tree
                .tree
                .iter()
                .any(|e| e.path == folder && e.kind == "tree")
        {
            return Err(format!(
                "there is no folder {folder} at {shown_ref} in this repository"
            ));
        }
        let below: Vec<&Entry> = tree
            .tree
            .iter()
            .filter(|e| e.path.starts_with(&prefix))
            .filter(|e| a.recursive || !e.path[prefix.len()..].contains('/'))
            .collect();
        let total = below.len();
        let mut entries = Vec::new();
        let mut bytes = 200;
        let mut next = None;
        for (i, e) in below.iter().enumerate().skip(a.offset) {
            let entry = json!({
                "path": e.path,
                "type": if e.kind == "tree" { "folder" } else if e.kind == "commit" { "submodule" } else { "file" },
                "size": e.size,
            });
            let size = entry.to_string().len() + 1;
            if entries.len() == TREE_MAX_ENTRIES || bytes + size > RESULT_MAX_BYTES {
                next = Some(i);
                break;
            }
            bytes += size;
            entries.push(entry);
        }
        let mut out = json!({
            "ref": shown_ref,
            "path": folder,
            "total": total,
            "entries": entries,
        });
        if let Some(offset) = next {
            out["next"] = json!({ "offset": offset });
        }
        if tree.truncated {
            out["githubTruncated"] = json!(true);
        }
        Ok(out)
    }

    async fn search(&self, a: SearchArgs, token: &str, info: &RepoInfo) -> Result<Value, Failed> {
        let query = a.query.trim();
        if query.is_empty() {
            return Err("the query is empty".to_owned());
        }
        if query.chars().count() > SEARCH_QUERY_MAX_CHARS {
            return Err(format!(
                "the query is longer than {SEARCH_QUERY_MAX_CHARS} characters"
            ));
        }
        if query.chars().any(char::is_control) {
            return Err("the query holds control characters".to_owned());
        }
        let page = page(a.page)?;
        let per_page = per_page(a.per_page, SEARCH_DEFAULT_RESULTS, SEARCH_MAX_RESULTS)?;
        let q = format!("{query} repo:{}/{}", info.owner, info.repo);
        let url = format!(
            "/search/code?q={}&per_page={per_page}&page={page}",
            encode(&q)
        );
        let response = self
            .github
            .read(
                token,
                &url,
                "application/vnd.github.text-match+json",
                crate::identity::github::GITHUB_MAX_BODY_BYTES,
            )
            .await
            .map_err(github_failed)?
            .ok_or_else(|| "GitHub's search answer was too long".to_owned())?;
        match response.status.as_u16() {
            200 => {}
            422 => return Err("GitHub could not run this search query".to_owned()),
            s => return Err(format!("GitHub answered {s} for the search")),
        }
        #[derive(Deserialize)]
        struct Results {
            #[serde(default)]
            total_count: u64,
            #[serde(default)]
            incomplete_results: bool,
            items: Vec<Item>,
        }
        #[derive(Deserialize)]
        struct Item {
            path: String,
            repository: Repository,
            #[serde(default)]
            text_matches: Vec<TextMatch>,
        }
        #[derive(Deserialize)]
        struct Repository {
            node_id: String,
        }
        #[derive(Deserialize)]
        struct TextMatch {
            #[serde(default)]
            fragment: String,
        }
        let results: Results = serde_json::from_slice(&response.body)
            .map_err(|_| "GitHub sent search results Chopin could not read".to_owned())?;
        let mut items = Vec::new();
        let mut bytes = 200;
        let mut cut = false;
        // Only results from the bound repository, by its node id.
        for item in results
            .items
            .iter()
            .filter(|i| i.repository.node_id == info.node_id)
        {
            let fragments: Vec<String> = item
                .text_matches
                .iter()
                .take(3)
                .map(|m| cut_text(&m.fragment, 600))
                .collect();
            let entry = json!({ "path": item.path, "fragments": fragments });
            let size = entry.to_string().len() + 1;
            if bytes + size > RESULT_MAX_BYTES {
                cut = true;
                break;
            }
            bytes += size;
            items.push(entry);
        }
        let mut out = json!({
            "query": query,
            "page": page,
            "items": items,
        });
        if cut {
            out["cut"] = json!("more results on this page than fit; ask for fewer with perPage");
        }
        if results.incomplete_results {
            out["incomplete"] = json!(true);
        }
        if u64::from(page) * u64::from(per_page) < results.total_count && page < MAX_PAGE {
            out["next"] = json!({ "page": page + 1 });
        }
        Ok(out)
    }

    async fn history(&self, a: HistoryArgs, token: &str, info: &RepoInfo) -> Result<Value, Failed> {
        let path = match a.path.as_deref() {
            Some(p) => checked_path(p, true)?,
            None => String::new(),
        };
        let (reference, shown_ref) = Self::reference(info, a.reference.as_deref())?;
        let page = page(a.page)?;
        let per_page = per_page(a.per_page, HISTORY_DEFAULT_COMMITS, HISTORY_MAX_COMMITS)?;
        let mut url = format!(
            "{}/commits?sha={reference}&per_page={per_page}&page={page}",
            Self::base(info)
        );
        if !path.is_empty() {
            // The path's segments are encoded already; its separators are too, as a query value.
            url.push_str(&format!("&path={}", path.replace('/', "%2F")));
        }
        let response = self
            .github
            .read(
                token,
                &url,
                ACCEPT_JSON,
                crate::identity::github::GITHUB_MAX_BODY_BYTES,
            )
            .await
            .map_err(github_failed)?
            .ok_or_else(|| "GitHub's history answer was too long".to_owned())?;
        match response.status.as_u16() {
            200 => {}
            404 | 409 | 422 => {
                return Err(format!(
                    "there is no history at {shown_ref} in this repository"
                ))
            }
            s => return Err(format!("GitHub answered {s} for the history")),
        }
        #[derive(Deserialize)]
        struct Commit {
            sha: String,
            commit: Detail,
            #[serde(default)]
            author: Option<Login>,
        }
        #[derive(Deserialize)]
        struct Detail {
            message: String,
            #[serde(default)]
            author: Option<Person>,
        }
        #[derive(Deserialize)]
        struct Person {
            #[serde(default)]
            name: Option<String>,
            #[serde(default)]
            date: Option<String>,
        }
        #[derive(Deserialize)]
        struct Login {
            login: String,
        }
        let commits: Vec<Commit> = serde_json::from_slice(&response.body)
            .map_err(|_| "GitHub sent a history Chopin could not read".to_owned())?;
        let full = commits.len() == per_page as usize;
        let mut out_commits = Vec::new();
        let mut bytes = 200;
        for c in &commits {
            let entry = json!({
                "sha": c.sha,
                "date": c.commit.author.as_ref().and_then(|a| a.date.clone()),
                "author": c.author.as_ref().map(|a| format!("@{}", a.login))
                    .or_else(|| c.commit.author.as_ref().and_then(|a| a.name.clone())),
                "message": cut_text(c.commit.message.lines().next().unwrap_or_default(), MESSAGE_MAX_CHARS),
            });
            let size = entry.to_string().len() + 1;
            if bytes + size > RESULT_MAX_BYTES {
                break;
            }
            bytes += size;
            out_commits.push(entry);
        }
        let mut out = json!({
            "ref": shown_ref,
            "page": page,
            "commits": out_commits,
        });
        if let Some(p) = a.path.as_deref() {
            out["path"] = json!(p.trim_end_matches('/'));
        }
        if full && page < MAX_PAGE {
            out["next"] = json!({ "page": page + 1 });
        }
        Ok(out)
    }
}

/// `text` cut to at most `max` characters, marked when cut.
fn cut_text(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut
}

/// One page of a file: a header, then numbered lines from `start` (to `end` at most), within
/// [`FILE_MAX_LINES`] and [`RESULT_MAX_BYTES`]; the last line says where to continue.
pub fn file_page(
    path: &str,
    reference: &str,
    text: &str,
    start: usize,
    end: Option<usize>,
) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 {
        return format!("path: {path}\nref: {reference}\nThe file is empty.\n");
    }
    if start > total {
        return format!(
            "path: {path}\nref: {reference}\nThe file has {total} lines; startLine {start} is past its end.\n"
        );
    }
    let last_wanted = end.unwrap_or(total).min(total);
    let footer_room = 120;
    let mut body = String::new();
    let mut shown_to = start - 1;
    let width = total.to_string().len();
    for (i, line) in lines.iter().enumerate().take(last_wanted).skip(start - 1) {
        let number = i + 1;
        if number - start >= FILE_MAX_LINES {
            break;
        }
        let line = if line.len() > LINE_MAX_BYTES {
            let mut cut = LINE_MAX_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{} …[line cut at {LINE_MAX_BYTES} bytes]", &line[..cut])
        } else {
            (*line).to_owned()
        };
        let numbered = format!("{number:>width$}| {line}\n");
        let header_room = path.len() + reference.len() + 80;
        if header_room + body.len() + numbered.len() + footer_room > RESULT_MAX_BYTES {
            break;
        }
        body.push_str(&numbered);
        shown_to = number;
    }
    let mut out = format!("path: {path}\nref: {reference}\n");
    if shown_to < start {
        out.push_str(&format!("lines: none shown of {total}\n"));
    } else {
        out.push_str(&format!("lines: {start}–{shown_to} of {total}\n"));
    }
    out.push_str("---\n");
    out.push_str(&body);
    if shown_to < last_wanted {
        out.push_str(&format!(
            "next: call read_repository_file with startLine {} for more\n",
            shown_to + 1
        ));
    } else {
        out.push_str("(end of the lines asked for)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ISO-32: path escape is refused before anything is asked; plain paths are encoded per
    /// segment.
    #[test]
    fn iso_32_paths_that_escape_the_repository_are_refused() {
        for bad in [
            "../secrets",
            "src/../../etc/passwd",
            "/etc/passwd",
            "./src",
            "src//main.rs",
            "src\\..\\x",
            "..%2Fother",
            "%2e%2e/x",
            "src%2Fmain.rs",
            "a?b",
            "a#b",
            "a\nb",
            "..",
            ".",
        ] {
            assert!(checked_path(bad, true).is_err(), "{bad:?} was accepted");
        }
        assert!(checked_path("", false).is_err());
        assert_eq!(checked_path("", true).unwrap(), "");
        assert_eq!(checked_path("src/main.rs", false).unwrap(), "src/main.rs");
        assert_eq!(checked_path("docs/", true).unwrap(), "docs");
        assert_eq!(checked_path("a b/ü.md", false).unwrap(), "a%20b/%C3%BC.md");
        assert!(checked_path(&"a".repeat(PATH_MAX_BYTES + 1), false).is_err());
    }

    #[test]
    fn iso_32_a_ref_is_a_full_commit_id() {
        assert!(checked_ref("main").is_err());
        assert!(checked_ref("abc123").is_err());
        assert!(checked_ref("../../../../repos/evil/x/contents/a?").is_err());
        let full = "A".repeat(40);
        assert_eq!(checked_ref(&full).unwrap(), "a".repeat(40));
    }

    #[test]
    fn iso_32_a_file_page_is_bounded_and_says_where_to_continue() {
        let text: String = (1..=1_000).map(|i| format!("line {i}\n")).collect();
        let page = file_page("a.txt", "main", &text, 1, None);
        assert!(page.len() <= RESULT_MAX_BYTES);
        assert!(
            page.contains(&format!("lines: 1–{FILE_MAX_LINES} of 1000")),
            "{page}"
        );
        assert!(page.contains(&format!("startLine {}", FILE_MAX_LINES + 1)));
        let ranged = file_page("a.txt", "main", &text, 10, Some(12));
        assert!(ranged.contains("lines: 10–12 of 1000"), "{ranged}");
        assert!(ranged.contains("  10| line 10\n"));
        assert!(!ranged.contains("line 13"));
        let wide: String = (1..=200)
            .map(|_| format!("{}\n", "x".repeat(300)))
            .collect();
        let page = file_page("w.txt", "main", &wide, 1, None);
        assert!(page.len() <= RESULT_MAX_BYTES, "{}", page.len());
        assert!(page.contains("next: call read_repository_file with startLine"));
        let long_line = "y".repeat(LINE_MAX_BYTES * 3);
        let page = file_page("l.txt", "main", &long_line, 1, None);
        assert!(page.contains("line cut"));
        assert!(page.len() <= RESULT_MAX_BYTES);
        assert!(file_page("a.txt", "main", &text, 2_000, None).contains("past its end"));
    }

    #[test]
    fn rfc_26_no_schema_names_a_repository() {
        let specs = tool_specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, REPOSITORY_TOOLS);
        for spec in &specs {
            let properties = spec.input_schema["properties"].as_object().unwrap();
            for field in ["owner", "repo", "repository", "repositoryId"] {
                assert!(!properties.contains_key(field), "{} has {field}", spec.name);
            }
            assert_eq!(spec.input_schema["additionalProperties"], false);
        }
    }
}
