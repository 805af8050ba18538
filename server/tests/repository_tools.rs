//! The Planner's repository tools (GitHub REST) and pull-request tools (GitHub's MCP server),
//! over real sockets: mona's scripted client runs a turn and calls them as host tools; the fake
//! GitHub answers REST and the fake GitHub MCP server answers MCP, both logging what they were
//! asked.
//!
//! mona can also read `evil/secrets`, whose files, commits and pull request #7 say "hunter2":
//! whatever the model writes, nothing of it may come back, and no request may name it.

use std::sync::{Arc, Mutex};

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{Permission, PullRequest};
use serde_json::{json, Value};

mod support;

use support::{begin_turn, call_host_tool, served, Begun, Served};

const BILLING: &str =
    "// Billing.\nfn charge() {}\n\n// Retry the webhook twice.\nfn retry_webhook() {}\n";

fn pull(number: u64, title: &str, body: &str) -> PullRequest {
    PullRequest {
        number,
        title: title.into(),
        body: body.into(),
        state: "open".into(),
        user: "mona".into(),
        head: "feature".into(),
        base: "main".into(),
        files: vec![("src/billing.rs".into(), "@@ -1 +1 @@\n-a\n+b".into())],
        comments: vec![("hubot".into(), "Looks good".into())],
    }
}

struct World {
    s: Served,
    client: AgentClient,
    _room: BrowserSocket,
    begun: Begun,
    /// The commits of octo/plans, oldest first.
    commits: Vec<String>,
    calls: usize,
}

impl World {
    async fn call(&mut self, name: &str, input: Value) -> chopin_protocol::agent::HostToolResult {
        self.calls += 1;
        let id = format!("c{}", self.calls);
        call_host_tool(&mut self.client, &self.begun.turn, &id, name, input).await
    }
}

async fn world() -> World {
    let s = served().await;
    let g = &s.github;
    g.add_repo("evil", "secrets")
        .grant("evil", "secrets", "mona", Permission::Read);
    g.put_file("octo", "plans", "src/billing.rs", BILLING)
        .put_file("octo", "plans", "README.md", "# Plans\nThe webhook plan.\n")
        .put_file("octo", "plans", "docs/rollout.md", "Region by region.\n")
        .put_file("evil", "secrets", "keys.txt", "webhook token hunter2\n")
        .put_file("evil", "secrets", "src/billing.rs", "hunter2\n");
    let first = g.add_commit(
        "octo",
        "plans",
        "Add billing\n\nLong body.",
        "mona",
        &["src/billing.rs"],
    );
    let second = g.add_commit(
        "octo",
        "plans",
        "Rollout notes",
        "mona",
        &["docs/rollout.md"],
    );
    g.add_commit("evil", "secrets", "hunter2 commit", "mona", &["keys.txt"]);
    g.add_pull_request("octo", "plans", pull(7, "Retry webhooks", "Retries twice."))
        .add_pull_request("octo", "plans", pull(8, "Rollout doc", "Adds the doc."))
        .add_pull_request("evil", "secrets", pull(7, "Leak keys", "hunter2"));
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin look at the repository").await;
    World {
        s,
        client,
        _room: room,
        begun,
        commits: vec![first, second],
        calls: 0,
    }
}

fn text(r: &chopin_protocol::agent::HostToolResult) -> String {
    match &r.output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn ok(r: chopin_protocol::agent::HostToolResult) -> Value {
    assert!(!r.is_error, "{r:?}");
    r.output
}

#[tokio::test]
async fn rfc_26_iso_32_repository_tools_read_the_document_s_repository_within_their_bounds() {
    let mut w = world().await;
    let names: Vec<&str> = w.begun.host_tools.iter().map(|t| t.name.as_str()).collect();
    for tool in [
        "read_repository_file",
        "list_repository_tree",
        "search_repository",
        "repository_history",
    ] {
        assert!(names.contains(&tool), "{tool} offered: {names:?}");
    }

    let file = ok(w
        .call("read_repository_file", json!({ "path": "src/billing.rs" }))
        .await);
    let file = file.as_str().unwrap();
    assert!(
        file.starts_with("path: src/billing.rs\nref: main\nlines: 1–5 of 5\n"),
        "{file}"
    );
    assert!(file.contains("4| // Retry the webhook twice."), "{file}");
    let ranged = ok(w
        .call(
            "read_repository_file",
            json!({ "path": "src/billing.rs", "startLine": 2, "endLine": 3 }),
        )
        .await);
    let ranged = ranged.as_str().unwrap();
    assert!(
        ranged.contains("lines: 2–3 of 5") && !ranged.contains("Retry"),
        "{ranged}"
    );
    let at = ok(w
        .call(
            "read_repository_file",
            json!({ "path": "src/billing.rs", "ref": w.commits[0] }),
        )
        .await);
    assert!(at
        .as_str()
        .unwrap()
        .contains(&format!("ref: {}", w.commits[0])));
    for (input, words) in [
        (
            json!({ "path": "src/billing.rs", "ref": "main" }),
            "full 40-character commit id",
        ),
        (json!({ "path": "docs" }), "is a folder"),
        (json!({ "path": "src/nothing.rs" }), "there is no file"),
        (
            json!({ "path": "src/billing.rs", "startLine": 4, "endLine": 2 }),
            "before startLine",
        ),
    ] {
        let r = w.call("read_repository_file", input.clone()).await;
        assert!(r.is_error && text(&r).contains(words), "{input}: {r:?}");
    }

    let top = ok(w.call("list_repository_tree", json!({})).await);
    let paths: Vec<&str> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["README.md", "docs", "src"]);
    assert_eq!(top["entries"][1]["type"], "folder");
    let all = ok(w
        .call("list_repository_tree", json!({ "recursive": true }))
        .await);
    assert_eq!(all["total"], 5);
    let docs = ok(w
        .call("list_repository_tree", json!({ "path": "docs/" }))
        .await);
    assert_eq!(
        docs["entries"],
        json!([{ "path": "docs/rollout.md", "type": "file", "size": 18 }])
    );
    let r = w
        .call("list_repository_tree", json!({ "path": "nowhere" }))
        .await;
    assert!(r.is_error && text(&r).contains("no folder"), "{r:?}");

    let history = ok(w.call("repository_history", json!({})).await);
    let shas: Vec<&str> = history["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sha"].as_str().unwrap())
        .collect();
    assert_eq!(
        shas,
        [w.commits[1].as_str(), w.commits[0].as_str()],
        "newest first"
    );
    assert_eq!(
        history["commits"][1]["message"], "Add billing",
        "first line only"
    );
    assert_eq!(history["commits"][1]["author"], "@mona");
    let touching = ok(w.call("repository_history", json!({ "path": "src" })).await);
    assert_eq!(touching["commits"].as_array().unwrap().len(), 1);
    let upto = ok(w
        .call("repository_history", json!({ "ref": w.commits[0] }))
        .await);
    assert_eq!(upto["commits"].as_array().unwrap().len(), 1);
    let r = w.call("repository_history", json!({ "perPage": 31 })).await;
    assert!(r.is_error, "{r:?}");

    let found = ok(w
        .call("search_repository", json!({ "query": "webhook" }))
        .await);
    let items = found["items"].as_array().unwrap();
    let paths: Vec<&str> = items.iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["README.md", "src/billing.rs"]);
    assert_eq!(
        items[1]["fragments"],
        json!(["// Retry the webhook twice.", "fn retry_webhook() {}"])
    );
    assert_eq!(
        w.s.github.search_queries(),
        ["webhook repo:octo/plans"],
        "scoped to the bound repository on the server"
    );
}

#[tokio::test]
async fn iso_32_rfc_74_rfc_80_a_model_naming_another_repository_reaches_nothing_outside_the_bound_one(
) {
    let mut w = world().await;
    let mut outputs = Vec::new();
    // Every repository tool, with a repository named in its arguments: refused, nothing asked.
    let asked_before = w.s.github.requests().len();
    for (tool, input) in [
        (
            "read_repository_file",
            json!({ "path": "keys.txt", "owner": "evil", "repo": "secrets" }),
        ),
        (
            "read_repository_file",
            json!({ "path": "keys.txt", "repository": "evil/secrets" }),
        ),
        ("list_repository_tree", json!({ "owner": "evil" })),
        (
            "search_repository",
            json!({ "query": "hunter2", "repo": "evil/secrets" }),
        ),
        ("repository_history", json!({ "repo": "secrets" })),
    ] {
        let r = w.call(tool, input.clone()).await;
        assert!(r.is_error, "{tool} {input}: {r:?}");
        outputs.push(text(&r));
    }
    // Path tricks, in every tool that takes a path.
    let tricks = [
        "../../evil/secrets/contents/keys.txt",
        "src/../../../evil/secrets",
        "/repos/evil/secrets/contents/keys.txt",
        "..%2F..%2Fevil%2Fsecrets",
        "%2e%2e/%2e%2e/evil/secrets",
        "src%2F..%2F..",
        "..\\..\\evil\\secrets",
        "src//../keys.txt",
        "keys.txt?ref=main&owner=evil",
        "keys.txt#",
        "..",
    ];
    for trick in tricks {
        for tool in [
            "read_repository_file",
            "list_repository_tree",
            "repository_history",
        ] {
            let r = w.call(tool, json!({ "path": trick })).await;
            assert!(r.is_error, "{tool} {trick:?}: {r:?}");
            outputs.push(text(&r));
        }
    }
    // A ref that tries to become a path.
    let r = w
        .call(
            "read_repository_file",
            json!({ "path": "README.md", "ref": "../../../evil/secrets/contents/keys.txt?" }),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    assert_eq!(
        w.s.github.requests().len(),
        asked_before,
        "a refused argument asks GitHub nothing: {:?}",
        &w.s.github.requests()[asked_before..]
    );

    // A search that names another repository in its query: GitHub widens the search (repo:
    // qualifiers are ORed), the node-id filter keeps only the bound repository's results.
    for query in [
        "hunter2 repo:evil/secrets",
        "webhook repo:evil/secrets",
        "webhook repo:EVIL/SECRETS",
    ] {
        let found = ok(w.call("search_repository", json!({ "query": query })).await);
        for item in found["items"].as_array().unwrap() {
            assert!(
                ["README.md", "src/billing.rs"].contains(&item["path"].as_str().unwrap()),
                "{found}"
            );
        }
        outputs.push(found["items"].to_string());
    }
    let found = ok(w
        .call(
            "search_repository",
            json!({ "query": "hunter2 repo:evil/secrets" }),
        )
        .await);
    assert_eq!(found["items"], json!([]), "evil/secrets' match was dropped");
    // GitHub does return the foreign match for the query the server sent: the node-id filter,
    // not the fake, kept it out.
    let asked = format!(
        "{}/search/code?q=hunter2%20repo%3Aevil%2Fsecrets%20repo%3Aocto%2Fplans",
        w.s.state.config.github_api_url
    );
    let answer = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        http::Request::get(asked)
            .header("authorization", format!("Bearer {}", w.s.mona))
            .body(axum::body::Bytes::new())
            .unwrap(),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        answer["items"][0]["repository"]["full_name"], "evil/secrets",
        "{answer}"
    );
    assert!(w
        .s
        .github
        .search_queries()
        .iter()
        .all(|q| q.ends_with(" repo:octo/plans")));

    // The pull-request tools overwrite owner and repo (bindRepository): #7 is octo/plans'.
    let r = ok(w
        .call(
            "pull_request_read",
            json!({ "method": "get", "pullNumber": 7, "owner": "evil", "repo": "secrets" }),
        )
        .await);
    let pr: Value = serde_json::from_str(r.as_str().unwrap()).unwrap();
    assert_eq!(pr["title"], "Retry webhooks");
    assert_eq!(pr["base"]["repo"]["full_name"], "octo/plans");
    let listed = ok(w
        .call(
            "list_pull_requests",
            json!({ "owner": "evil", "repo": "secrets", "state": "all" }),
        )
        .await);
    outputs.push(listed.to_string());
    assert!(listed.as_str().unwrap().contains("Rollout doc"));
    for method in chopin_server::github_tools::PULL_REQUEST_METHODS {
        let r = w
            .call(
                "pull_request_read",
                json!({ "method": method, "pullNumber": 7, "owner": "evil" }),
            )
            .await;
        assert!(!r.is_error, "{method}: {r:?}");
        outputs.push(text(&r));
    }
    // Other ways of naming a repository are refused before GitHub is asked.
    for input in [
        json!({ "method": "get", "pullNumber": 7, "repository": "evil/secrets" }),
        json!({ "method": "get", "pullNumber": 7, "query": "repo:evil/secrets is:pr" }),
    ] {
        let r = w.call("pull_request_read", input).await;
        assert!(r.is_error, "{r:?}");
    }

    for output in &outputs {
        assert!(
            !output.contains("hunter2") && !output.contains("Leak keys"),
            "{output}"
        );
    }
    for request in w.s.github.requests() {
        assert!(!request.to_lowercase().contains("evil"), "{request}");
    }
    let tool_calls = w.s.github_mcp.tool_calls();
    assert!(!tool_calls.is_empty());
    for call in tool_calls {
        assert_eq!(
            (call.owner.as_deref(), call.repo.as_deref()),
            (Some("octo"), Some("plans")),
            "{call:?}"
        );
        assert!(
            ["pull_request_read", "list_pull_requests"].contains(&call.tool.as_deref().unwrap())
        );
    }
}

#[tokio::test]
async fn rfc_38_iso_05_github_mcp_is_discovered_on_the_first_pull_request_call_with_the_owner_s_token(
) {
    let log = Capture::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(log.clone())
            .with_ansi(false)
            .finish(),
    );
    let mut w = world().await;
    // A document-only step and a repository read: GitHub's MCP server is not asked.
    ok(w.call("read_plan", json!({})).await);
    ok(
        w.call("read_repository_file", json!({ "path": "README.md" }))
            .await,
    );
    assert!(
        w.s.github_mcp.calls().is_empty(),
        "{:?}",
        w.s.github_mcp.calls()
    );
    assert_eq!(w.s.state.github_tools.discoveries().await, 0);

    ok(w.call(
        "pull_request_read",
        json!({ "method": "get_files", "pullNumber": 7 }),
    )
    .await);
    assert_eq!(w.s.github_mcp.count("initialize"), 1);
    assert_eq!(w.s.github_mcp.count("tools/list"), 1);
    ok(w.call("list_pull_requests", json!({})).await);
    ok(w.call(
        "pull_request_read",
        json!({ "method": "get_diff", "pullNumber": 8 }),
    )
    .await);
    assert_eq!(
        w.s.github_mcp.count("initialize"),
        1,
        "one discovery for the owner's token"
    );
    assert_eq!(w.s.github_mcp.count("tools/list"), 1);
    assert_eq!(w.s.state.github_tools.discoveries().await, 1);
    for call in w.s.github_mcp.calls() {
        assert_eq!(call.login, "mona", "with the Planner owner's token");
        assert_eq!(call.readonly.as_deref(), Some("true"));
        assert_eq!(call.toolsets.as_deref(), Some("pull_requests"));
    }
    // Tokens never in the log: not the owner's, not mona's bearer.
    let logged = log.text();
    assert!(
        logged.contains("discovering GitHub MCP tools"),
        "the log was captured"
    );
    let tokens = w.s.github.tokens_of("mona");
    assert!(tokens.len() >= 2, "the bearer and the sign-in's token");
    for token in tokens {
        assert!(!logged.contains(&token), "a token in the log");
    }
}

#[tokio::test]
async fn iso_31_rfc_27_search_and_issue_tools_are_never_offered_loaded_or_called() {
    let mut w = world().await;
    let offered: Vec<&str> = w.begun.host_tools.iter().map(|t| t.name.as_str()).collect();
    for never in [
        "search_pull_requests",
        "search_code",
        "search_issues",
        "search_repositories",
        "issue_read",
        "list_issues",
        "create_pull_request",
    ] {
        assert!(!offered.contains(&never), "{never} offered");
    }
    for tool in w
        .begun
        .host_tools
        .iter()
        .filter(|t| ["pull_request_read", "list_pull_requests"].contains(&t.name.as_str()))
    {
        let properties = tool.input_schema["properties"].as_object().unwrap();
        assert!(!properties.contains_key("owner") && !properties.contains_key("repo"));
        assert!(
            !tool.description.contains("GitHub repository."),
            "our words, not the server's"
        );
    }
    ok(w.call("list_pull_requests", json!({})).await);
    // A call of a search tool is outside the turn's tools: refused, and the turn fails.
    let r = w
        .call("search_pull_requests", json!({ "query": "hunter2" }))
        .await;
    assert!(r.is_error, "{r:?}");
    assert!(w
        .s
        .github_mcp
        .tool_calls()
        .iter()
        .all(|c| c.tool.as_deref() == Some("list_pull_requests")));
}

#[tokio::test]
async fn rfc_30_an_unreachable_server_fails_only_that_call_and_document_tools_never_wait() {
    let mut w = world().await;
    w.s.github_mcp.set_outage(true);
    let r = w
        .call(
            "pull_request_read",
            json!({ "method": "get", "pullNumber": 7 }),
        )
        .await;
    assert!(
        r.is_error && text(&r).contains("GitHub's MCP server is unavailable"),
        "{r:?}"
    );
    ok(w.call("read_plan", json!({})).await);
    ok(w.call("list_repository_tree", json!({})).await);
    w.s.github_mcp.set_outage(false);
    ok(w.call(
        "pull_request_read",
        json!({ "method": "get", "pullNumber": 7 }),
    )
    .await);
}

#[tokio::test]
async fn rfc_30_a_server_without_a_required_tool_fails_the_call_naming_it() {
    let mut w = world().await;
    w.s.github_mcp.hide_tool("list_pull_requests");
    let r = w
        .call(
            "pull_request_read",
            json!({ "method": "get", "pullNumber": 7 }),
        )
        .await;
    assert!(
        r.is_error && text(&r).contains("does not offer the tool list_pull_requests"),
        "{r:?}"
    );
    assert!(w.s.github_mcp.tool_calls().is_empty());
}

/// A log written to memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// EAR-01 (issue 24 item 10): repository reads use the default branch captured when the session
/// was created: a kept session's next turn still reads the branch its first read found, though
/// the repository's default branch changed meanwhile.
#[tokio::test]
async fn ear_01_a_kept_sessions_turns_read_the_default_branch_captured_for_the_session() {
    use chopin_protocol::agent::{ClientMessage, Run, RunStatus, Runs, ServerMessage};
    let mut w = world().await;
    let first = text(
        &w.call("read_repository_file", json!({ "path": "README.md" }))
            .await,
    );
    assert!(first.contains("\nref: main\n"), "{first}");
    // A live run keeps the session past its turn.
    w.client
        .send(&ClientMessage::Runs(Runs {
            session_id: w.begun.session.clone(),
            runs: vec![Run {
                run_id: "run-1".into(),
                name: "rollout".into(),
                status: RunStatus::Running,
                root_run_id: None,
                elapsed_ms: None,
                stages: vec![],
                omitted_stages: None,
            }],
        }))
        .await
        .unwrap();
    support::end_turn(&w.s, &mut w.client, &w.begun.turn).await;
    assert_eq!(
        w.s.state.turns.kept_session(w.s.doc).as_deref(),
        Some(w.begun.session.as_str())
    );
    w.s.github.set_default_branch("octo", "plans", "develop");
    support::ask_room(
        &mut w._room,
        json!({ "type": "chat:send", "requestId": "again", "text": "@chopin read it again" }),
    )
    .await;
    let turn = match support::next(&mut w.client).await {
        ServerMessage::Turn(t) => t,
        other => panic!("expected the kept session's turn, got {other:?}"),
    };
    assert_eq!(turn.session_id, w.begun.session);
    w.begun.turn = turn.turn_id;
    let again = text(
        &w.call("read_repository_file", json!({ "path": "README.md" }))
            .await,
    );
    assert!(
        again.contains("\nref: main\n"),
        "the session's own branch: {again}"
    );
}
