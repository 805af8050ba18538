//! The docs are a contract a client author and an operator work from, so they cannot drift:
//! every route the router serves is in `docs/` with its method, and every setting `chopin --help`
//! lists is explained there.

use std::path::PathBuf;
use std::sync::Arc;

use chopin_server::app::App;
use chopin_server::config::{Args, Config};
use chopin_server::identity::crypto::CredentialKey;
use chopin_server::runtime::lease::LeaseWatch;
use chopin_server::runtime::Shutdown;
use chopin_server::store::MemoryStore;
use chopin_server::Runtime;
use clap::CommandFactory;

/// Every Markdown file under `docs/`, and the README, as (name, text).
fn docs() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.push(root.join("README.md"));
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

/// Whether `text` names `method path` exactly: not as the start of a longer path.
fn names_route(text: &str, method: &str, path: &str) -> bool {
    let needle = format!("{method} {path}");
    text.match_indices(&needle).any(|(at, _)| {
        text[at + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || "/{}-_".contains(c)))
    })
}

#[tokio::test]
async fn every_route_the_router_serves_is_documented_with_its_method() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(&dir);
    let docs = docs();
    let table = app.routes().table();
    assert!(table.len() >= 20, "the router serves more than {table:?}");
    let missing: Vec<String> = table
        .iter()
        .filter(|r| {
            !docs
                .iter()
                .any(|(_, text)| names_route(text, r.method, r.path))
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        missing.is_empty(),
        "routes the router serves that no doc names as `METHOD /path` (with {{param}} as in the \
         router): {missing:#?}"
    );
}

/// The app every test here reads its routes and pages from.
fn app(dir: &tempfile::TempDir) -> App {
    App::wire(
        Config::defaults_with_data_dir(dir.path().to_path_buf()),
        Arc::new(MemoryStore::new()),
        Runtime::production(),
        CredentialKey::from_hex(&"0f".repeat(32)).unwrap(),
        LeaseWatch::fixed(None),
        Shutdown::new(),
    )
}

#[tokio::test]
async fn every_metric_on_the_page_is_documented() {
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let router = app(&dir).routes().into_router();
    let answer = router
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let page = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    let page = String::from_utf8(page.to_vec()).unwrap();
    // Every family (`# TYPE chopin_x …`, named as `chopin_x` or `chopin_x{…}`), and every map
    // the state gauge counts (`map="…"`).
    let mut names: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    names.extend(
        page.lines()
            .filter_map(|l| l.split("map=\"").nth(1))
            .filter_map(|l| l.split('"').next())
            .map(|m| format!("`{m}`")),
    );
    assert!(names.len() >= 12, "{names:?}\n{page}");
    let docs = docs();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !docs.iter().any(|(_, text)| text.contains(n.as_str())))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics `/metrics` shows that no doc names: {missing:?}"
    );
}

#[test]
fn every_setting_in_help_is_explained_in_the_docs() {
    let docs = docs();
    let command = Args::command();
    let settings: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    assert!(settings.len() >= 20, "{settings:?}");
    let missing: Vec<&String> = settings
        .iter()
        .filter(|s| {
            !docs
                .iter()
                .any(|(_, text)| text.contains(&format!("`{s}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "settings `chopin --help` lists that no doc explains (as `NAME`): {missing:?}"
    );
}

#[test]
fn a_route_named_as_the_start_of_a_longer_one_does_not_count() {
    assert!(names_route(
        "| `GET /api/documents/{id}` |",
        "GET",
        "/api/documents/{id}"
    ));
    assert!(!names_route(
        "| `GET /api/documents/{id}/read` |",
        "GET",
        "/api/documents/{id}"
    ));
    assert!(!names_route(
        "POST /auth/device/complete",
        "POST",
        "/auth/device"
    ));
}

/// Settings this build reads and checks but does not act on yet: their `--help` text and their
/// row in docs/self-hosting.md both say so, so nobody sets one expecting it to work (none today).
/// `AGENT`, `HANDOVER_PLANNER_WINDOW_MS` and `PLANNER_PATIENCE_MS`, which the server now acts on,
/// say no such thing.
#[test]
fn settings_not_acted_on_yet_say_so_in_help_and_docs() {
    const NOT_YET: &[&str] = &[];
    const ACTED_ON: &[&str] = &[
        "PLANNER_PATIENCE_MS",
        "DEFAULT_MACHINE_IDLE_MS",
        "CHAT_ATTACHMENT_MAX_BYTES",
        "CHAT_ATTACHMENT_MAX_COUNT",
        "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
        "AGENT",
        "HANDOVER_PLANNER_WINDOW_MS",
        "HARNESS_AUTH",
        "MODEL",
        "PROVIDER_RETRIES",
        "PROVIDER_TIMEOUT_MS",
    ];
    let command = Args::command();
    let help = |name: &str| -> String {
        command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name))
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_else(|| panic!("{name} has help"))
    };
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/self-hosting.md"),
    )
    .unwrap();
    let row = |name: &str| -> String {
        page.lines()
            .find(|l| l.starts_with(&format!("| `{name}`")))
            .unwrap_or_else(|| panic!("docs/self-hosting.md has a row for {name}"))
            .to_owned()
    };
    for name in NOT_YET {
        assert!(
            help(name).contains("Not acted on yet"),
            "{name}: {}",
            help(name)
        );
        assert!(
            row(name).contains("**Not acted on yet**"),
            "{name}: {}",
            row(name)
        );
    }
    for name in ACTED_ON {
        assert!(
            !help(name).contains("Not acted on"),
            "{name}: {}",
            help(name)
        );
        assert!(!row(name).contains("Not acted on"), "{name}: {}", row(name));
    }
}
