//! `/mcp` on the spawned `chopin` binary, on SQLite and on PostgreSQL, through rmcp's own
//! Streamable HTTP client configured only as docs/mcp.md says (the URL and a bearer token): the
//! tool list, create (with a brief and a provenance, read back, and an idempotency key, replayed), read, update, the refusals a tool answers with a `code`, and the HTTP
//! refusals before any MCP message. `AGENT=off` does not turn `/mcp` off (SES-30). And a client
//! nobody on the team wrote — the official TypeScript SDK's — does the same from the docs alone.

use chopin_e2e::{node_script, Backend, Launch, Server};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, connect, ok, refusal, text, Client, DOCUMENT_TOOLS};
use serde_json::{json, Value};

struct Fixture {
    server: Server,
    mona: String,
    hubot: String,
    eve: String,
    _github: FakeGitHub,
    backend: Backend,
}

async fn start(backend: Backend) -> Fixture {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1002)
        .add_user("eve", 1003);
    github.add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    github.grant("octo", "plans", "eve", Permission::Admin);
    let (mona, hubot, eve) = (
        github.issue_token("mona"),
        github.issue_token("hubot"),
        github.issue_token("eve"),
    );
    let github_url = github.serve_tcp().await.expect("fake GitHub serves");
    let launch = Launch::hosted(&github_url)
        // eve is verified by GitHub but not admitted here; the Planner is off altogether.
        .env("GITHUB_ALLOWED_USERS", "mona,hubot")
        .env("AGENT", "off");
    let launch = launch.on(&backend);
    Fixture {
        server: launch.start().await,
        mona,
        hubot,
        eve,
        _github: github,
        backend,
    }
}

async fn client(server: &Server, token: &str) -> Client {
    connect(&server.url("/mcp"), token).await
}

fn code(result: rmcp::model::CallToolResult) -> String {
    refusal(result).0
}

async fn http_refusal(server: &Server, token: Option<&str>, origin: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(server.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    let response = request.send().await.expect("POST /mcp");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

async fn every_tool_and_refusal(f: &Fixture) {
    let mona = client(&f.server, &f.mona).await;
    let tools = mona.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, DOCUMENT_TOOLS);

    let commit = "0123456789abcdef0123456789abcdef01234567";
    let create = json!({"repository": "octo/plans", "title": "Harbour plan", "source": "# Harbour\n\nDraft.\n",
                        "brief": "Which quay to survey first, and why.",
                        "baseBranch": "feature/quay", "baseCommit": commit, "idempotencyKey": "e2e-create"});
    let created = ok(call(&mona, "create_document", create.clone()).await);
    let url = created["url"].as_str().unwrap().to_owned();
    assert_eq!(url, "/documents/octo/plans/harbour-plan");
    // A retry with the same key and input is the same document, not a second one; other input
    // under that key, or a badly shaped provenance, is refused.
    assert_eq!(
        ok(call(&mona, "create_document", create.clone()).await),
        created
    );
    let mut other = create.clone();
    other["title"] = json!("Another plan");
    assert_eq!(
        code(call(&mona, "create_document", other).await),
        "idempotency-key-reused"
    );
    let mut abbreviated = create.clone();
    abbreviated["baseCommit"] = json!("0123456");
    abbreviated["idempotencyKey"] = json!("e2e-bad");
    assert_eq!(
        code(call(&mona, "create_document", abbreviated).await),
        "invalid-provenance"
    );

    let read = call(
        &mona,
        "read_document",
        json!({"document": f.server.url(&url)}),
    )
    .await;
    let page = text(&read);
    assert!(page.contains("Draft."), "{page}");
    // The brief was kept by this backend and comes back with the document.
    assert!(
        page.contains("Brief:\nWhich quay to survey first, and why.\n"),
        "{page}"
    );
    let view = ok(read);
    assert_eq!(view["brief"], "Which quay to survey first, and why.");
    // So was the provenance, as sent.
    assert_eq!(
        view["provenance"],
        json!({"baseBranch": "feature/quay", "baseCommit": commit})
    );
    let revision = view["revision"].as_u64().unwrap();

    let update = json!({"document": url, "planRevision": revision,
                        "source": "# Harbour\n\nDone.\n", "idempotencyKey": "e2e-1"});
    let applied = ok(call(&mona, "update_document", update.clone()).await);
    assert_eq!(applied["planRevision"], revision + 1);
    assert_eq!(
        ok(call(&mona, "update_document", update).await),
        applied,
        "a replay"
    );
    let stale = json!({"document": url, "planRevision": revision,
                       "source": "# Harbour\n\nLate.\n", "idempotencyKey": "e2e-2"});
    assert_eq!(code(call(&mona, "update_document", stale).await), "stale");
    let bad = json!({"document": url, "planRevision": revision + 1,
                     "source": "```decision\nid: q\nstate: open\n", "idempotencyKey": "e2e-3"});
    assert_eq!(code(call(&mona, "update_document", bad).await), "invalid");

    let listed = ok(call(&mona, "list_documents", json!({"repository": "octo/plans"})).await);
    assert_eq!(listed["documents"][0]["id"], created["id"]);
    assert_eq!(
        listed["documents"].as_array().map(Vec::len),
        Some(1),
        "created once"
    );
    let renamed = ok(call(
        &mona,
        "rename_document",
        json!({"document": url, "title": "Quay plan"}),
    )
    .await);
    assert_eq!(renamed["url"], "/documents/octo/plans/quay-plan");
    assert_eq!(
        ok(call(&mona, "archive_document", json!({"document": url})).await)["archived"],
        true
    );
    assert_eq!(
        ok(call(&mona, "restore_document", json!({"document": url})).await)["archived"],
        false
    );

    // A reader reads and cannot write; an unknown document and a foreign URL are refused.
    let hubot = client(&f.server, &f.hubot).await;
    assert_eq!(
        ok(call(&hubot, "read_document", json!({"document": url})).await)["source"],
        "# Harbour\n\nDone.\n"
    );
    assert_eq!(
        code(call(&hubot, "archive_document", json!({"document": url})).await),
        "no-write-access"
    );
    assert_eq!(
        code(
            call(
                &hubot,
                "read_document",
                json!({"document": "/documents/octo/plans/none"})
            )
            .await
        ),
        "document-not-found"
    );
    assert_eq!(
        code(
            call(
                &hubot,
                "read_document",
                json!({"document": "https://elsewhere.example/documents/octo/plans/quay-plan"})
            )
            .await
        ),
        "invalid-locator"
    );

    // Refused over HTTP before any MCP message.
    assert_eq!(
        http_refusal(&f.server, None, None).await,
        (401, "bad-credentials".into())
    );
    assert_eq!(
        http_refusal(&f.server, Some("nonsense"), None).await,
        (401, "bad-credentials".into())
    );
    assert_eq!(
        http_refusal(&f.server, Some(&f.eve), None).await,
        (403, "not-admitted".into())
    );
    assert_eq!(
        http_refusal(&f.server, Some(&f.mona), Some("https://elsewhere.example")).await,
        (403, "foreign-origin".into())
    );
    assert_eq!(
        http_refusal(&f.server, Some(&f.mona), Some(&f.server.origin()))
            .await
            .0,
        200
    );
    let log = f.server.logs();
    for token in [&f.mona, &f.hubot, &f.eve] {
        assert!(!log.contains(token.as_str()), "a token reached the log");
    }
}

#[tokio::test]
async fn mcp_tools_and_refusals_on_sqlite_with_agent_off() {
    let f = start(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
    every_tool_and_refusal(&f).await;
}

#[tokio::test]
async fn mcp_tools_and_refusals_on_postgres_with_agent_off() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    let f = start(Backend::Postgres(db)).await;
    every_tool_and_refusal(&f).await;
    if let Backend::Postgres(db) = &f.backend {
        chopin_fixtures::pg::shared_postgres()
            .drop_database(db)
            .await
            .unwrap();
    }
}

/// The official MCP TypeScript SDK's client (`e2e/yjs/mcp.mjs`), given only the URL and the
/// Authorization header as docs/mcp.md says: it lists the tools, creates, reads and updates.
#[tokio::test]
async fn an_outside_mcp_client_lists_creates_reads_and_updates_from_the_docs_alone() {
    let f = start(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
    let (ok, seen) = node_script(
        "mcp.mjs",
        &json!({"url": f.server.url("/mcp"), "token": f.mona, "repository": "octo/plans"}),
    )
    .await;
    assert!(ok, "{seen:#}");
    assert_eq!(
        seen["tools"].as_array().map(Vec::len),
        Some(DOCUMENT_TOOLS.len()),
        "{seen:#}"
    );
    assert!(
        seen["readText"].as_str().unwrap().contains("First words."),
        "{seen:#}"
    );
    assert_eq!(seen["updated"]["status"], "applied");
    assert_eq!(seen["source"], "# From outside\n\nSecond words.\n");
}
