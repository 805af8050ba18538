//! The Planner's repository and pull-request tools on the spawned binary: a person's `@chopin`
//! message starts a turn on the attached (scripted) client, which calls every repository tool
//! (GitHub REST, the fake GitHub) and both pull-request tools (GitHub's MCP server, the fake
//! GitHub MCP server at `GITHUB_MCP_URL`), each bound to the document's repository whatever the
//! model names; no token reaches the log, at debug level.

use std::time::Duration;

use chopin_e2e::{sign_in, Launch};
use chopin_fixtures::agent::{connect, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission, PullRequest};
use chopin_fixtures::github_mcp::FakeGitHubMcp;
use chopin_protocol::agent::{ClientMessage, HostToolCall, HostToolResult, ServerMessage, Started};
use serde_json::{json, Value};

async fn next(client: &mut AgentClient) -> ServerMessage {
    match tokio::time::timeout(Duration::from_secs(15), client.recv())
        .await
        .expect("a frame within 15 s")
        .unwrap()
    {
        Event::Message(m) => m,
        Event::Closed { code, reason } => panic!("closed {code} {reason}"),
    }
}

async fn call(
    client: &mut AgentClient,
    turn: &str,
    id: &str,
    name: &str,
    input: Value,
) -> HostToolResult {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: id.into(),
            name: name.into(),
            input,
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::HostToolResult(r) => r,
        other => panic!("expected host-tool-result, got {other:?}"),
    }
}

fn pull(number: u64, title: &str) -> PullRequest {
    PullRequest {
        number,
        title: title.into(),
        body: String::new(),
        state: "open".into(),
        user: "mona".into(),
        head: "feature".into(),
        base: "main".into(),
        files: vec![("src/lib.rs".into(), "@@ -1 +1 @@\n-a\n+b".into())],
        comments: vec![],
    }
}

#[tokio::test]
async fn the_repository_and_pull_request_tools_on_the_real_binary_stay_in_the_bound_repository() {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_repo("octo", "plans")
        .add_repo("evil", "secrets");
    github
        .grant("octo", "plans", "mona", Permission::Write)
        .grant("evil", "secrets", "mona", Permission::Read);
    github
        .put_file("octo", "plans", "src/lib.rs", "pub fn webhook() {}\n")
        .put_file("evil", "secrets", "keys.txt", "webhook hunter2\n")
        .add_pull_request("octo", "plans", pull(3, "Retry webhooks"))
        .add_pull_request("evil", "secrets", pull(3, "hunter2"));
    github.add_commit("octo", "plans", "Add the webhook", "mona", &["src/lib.rs"]);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let mcp = FakeGitHubMcp::new(github.clone());
    let mcp_url = mcp.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Launch::hosted(&github_url)
        .env("HOME", home.path().to_string_lossy())
        .env("GITHUB_MCP_URL", mcp_url)
        .env("CHOPIN_LOG", "debug")
        .start()
        .await;
    let (host, origin) = (server.host(), server.origin());
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Tool notes")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();

    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(host.clone(), Some(&mona)))
        .await
        .unwrap();
    let attached = client.attach(&id, &[]).await.unwrap();
    assert!(
        matches!(attached, ServerMessage::Attached(_)),
        "{attached:?}"
    );
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut browser = BrowserSocket::connect(
        stream,
        &host,
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&origin),
    )
    .await
    .unwrap();
    browser.next_of_type("session:planner").await.unwrap();
    browser
        .send_json(
            &json!({ "type": "chat:send", "requestId": "r-1", "text": "@chopin check PR 3" }),
        )
        .await
        .unwrap();
    assert_eq!(
        browser.next_of_type("chat:ack").await.unwrap()["planner"],
        "started"
    );
    let session = match next(&mut client).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session,
        }))
        .await
        .unwrap();
    let (turn, offered) = match next(&mut client).await {
        ServerMessage::Turn(t) => (t.turn_id, t.host_tools),
        other => panic!("expected turn, got {other:?}"),
    };
    let offered: Vec<String> = offered.into_iter().map(|t| t.name).collect();
    for tool in [
        "read_repository_file",
        "list_repository_tree",
        "search_repository",
        "repository_history",
        "pull_request_read",
        "list_pull_requests",
    ] {
        assert!(offered.iter().any(|o| o == tool), "{tool} in {offered:?}");
    }
    assert!(!offered
        .iter()
        .any(|o| o.starts_with("search_") && o != "search_repository"));

    let mut outputs = Vec::new();
    let mut n = 0;
    let mut ok = |r: HostToolResult| {
        assert!(!r.is_error, "{r:?}");
        outputs.push(r.output.to_string());
        r.output
    };
    let mut id_ = || {
        n += 1;
        format!("c{n}")
    };
    let file = ok(call(
        &mut client,
        &turn,
        &id_(),
        "read_repository_file",
        json!({ "path": "src/lib.rs" }),
    )
    .await);
    assert!(
        file.as_str().unwrap().contains("1| pub fn webhook() {}"),
        "{file}"
    );
    let tree = ok(call(
        &mut client,
        &turn,
        &id_(),
        "list_repository_tree",
        json!({ "recursive": true }),
    )
    .await);
    assert_eq!(tree["total"], 2, "{tree}");
    let found = ok(call(
        &mut client,
        &turn,
        &id_(),
        "search_repository",
        json!({ "query": "webhook repo:evil/secrets" }),
    )
    .await);
    assert_eq!(found["items"][0]["path"], "src/lib.rs", "{found}");
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");
    let history = ok(call(&mut client, &turn, &id_(), "repository_history", json!({})).await);
    assert_eq!(history["commits"][0]["message"], "Add the webhook");
    let pr = ok(call(
        &mut client,
        &turn,
        &id_(),
        "pull_request_read",
        json!({ "method": "get", "pullNumber": 3, "owner": "evil", "repo": "secrets" }),
    )
    .await);
    assert!(pr.as_str().unwrap().contains("Retry webhooks"), "{pr}");
    let listed = ok(call(
        &mut client,
        &turn,
        &id_(),
        "list_pull_requests",
        json!({ "owner": "evil" }),
    )
    .await);
    assert!(listed.as_str().unwrap().contains("octo/plans"), "{listed}");
    for (tool, input) in [
        (
            "read_repository_file",
            json!({ "path": "../../evil/secrets/contents/keys.txt" }),
        ),
        (
            "read_repository_file",
            json!({ "path": "%2e%2e/%2e%2e/evil/secrets/keys.txt" }),
        ),
        (
            "read_repository_file",
            json!({ "path": "/repos/evil/secrets/contents/keys.txt" }),
        ),
        (
            "list_repository_tree",
            json!({ "owner": "evil", "repo": "secrets" }),
        ),
    ] {
        let r = call(&mut client, &turn, &id_(), tool, input).await;
        assert!(r.is_error, "{r:?}");
    }
    for output in &outputs {
        assert!(!output.contains("hunter2"), "{output}");
    }
    assert!(
        github.requests().iter().all(|r| !r.contains("evil")),
        "{:?}",
        github.requests()
    );
    assert_eq!(mcp.count("initialize"), 1);
    for c in mcp.tool_calls() {
        assert_eq!(
            (c.owner.as_deref(), c.repo.as_deref()),
            (Some("octo"), Some("plans"))
        );
    }

    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(
        log.contains("discovering GitHub MCP tools"),
        "debug log captured"
    );
    for token in github.tokens_of("mona") {
        assert!(!log.contains(&token), "a token in the log");
    }
}
