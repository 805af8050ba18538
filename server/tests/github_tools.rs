//! The host's GitHub MCP clients (harness-rfc.md §5.4) against the fake GitHub MCP server over
//! real TCP: one client per owner, kept for the owner's current token, closed and discovered
//! again when the token changes; a server that cannot be reached or that refuses the token
//! fails the call with words that say so.

use std::sync::Arc;

use chopin_fixtures::github::{FakeGitHub, Permission, PullRequest};
use chopin_fixtures::github_mcp::FakeGitHubMcp;
use chopin_server::github_tools::GitHubTools;
use chopin_server::runtime::connector::TcpConnector;
use serde_json::json;
use uuid::Uuid;

async fn fakes() -> (FakeGitHub, FakeGitHubMcp, String) {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1002)
        .add_repo("octo", "plans");
    github
        .grant("octo", "plans", "mona", Permission::Write)
        .grant("octo", "plans", "hubot", Permission::Write);
    github.add_pull_request(
        "octo",
        "plans",
        PullRequest {
            number: 7,
            title: "Retry webhooks".into(),
            body: String::new(),
            state: "open".into(),
            user: "mona".into(),
            head: "retry".into(),
            base: "main".into(),
            files: vec![],
            comments: vec![],
        },
    );
    let mcp = FakeGitHubMcp::new(github.clone());
    let url = mcp.serve_tcp().await.unwrap();
    (github, mcp, url)
}

fn get() -> serde_json::Value {
    json!({ "method": "get", "pullNumber": 7 })
}

#[tokio::test]
async fn rfc_30_one_client_per_owner_kept_for_its_token_and_replaced_when_the_token_changes() {
    let (github, mcp, url) = fakes().await;
    let tools = GitHubTools::new(url, Arc::new(TcpConnector));
    let mona = Uuid::from_u128(1);
    let hubot = Uuid::from_u128(2);
    let first = github.issue_token("mona");
    let renewed = github.issue_token("mona");
    let hubots = github.issue_token("hubot");

    assert_eq!(
        tools.discoveries().await,
        0,
        "nothing before the first call"
    );
    let r = tools
        .execute("pull_request_read", get(), mona, &first, "octo", "plans")
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = tools
        .execute(
            "list_pull_requests",
            json!({}),
            mona,
            &first,
            "octo",
            "plans",
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(tools.discoveries().await, 1, "kept for the same token");
    assert_eq!(mcp.count("initialize"), 1);

    // The owner's token changes (a renewal): the old client is closed, a new one discovers.
    github.expire_token(&first);
    let r = tools
        .execute("pull_request_read", get(), mona, &renewed, "octo", "plans")
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(tools.discoveries().await, 2);
    assert_eq!(tools.open_clients().await, 1, "the old client is gone");
    assert_eq!(mcp.count("initialize"), 2);

    // Another owner has a client of its own.
    let r = tools
        .execute("pull_request_read", get(), hubot, &hubots, "octo", "plans")
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(tools.open_clients().await, 2);
    let logins: Vec<String> = mcp.tool_calls().into_iter().map(|c| c.login).collect();
    assert_eq!(logins, ["mona", "mona", "mona", "hubot"]);
}

#[tokio::test]
async fn rfc_30_a_refused_token_or_an_unreachable_server_fails_the_call_clearly() {
    let (github, _mcp, url) = fakes().await;
    let tools = GitHubTools::new(url, Arc::new(TcpConnector));
    let token = github.issue_token("mona");
    github.expire_token(&token);
    let r = tools
        .execute(
            "pull_request_read",
            get(),
            Uuid::from_u128(1),
            &token,
            "octo",
            "plans",
        )
        .await;
    assert!(r.is_error, "{r:?}");
    let words = r.output.as_str().unwrap();
    assert!(
        words.contains("did not accept the Planner owner's token"),
        "{words}"
    );
    assert!(!words.contains(&token));

    // Nothing listening there.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let nowhere = GitHubTools::new(format!("http://{address}/mcp/"), Arc::new(TcpConnector));
    let live = github.issue_token("mona");
    let r = nowhere
        .execute(
            "list_pull_requests",
            json!({}),
            Uuid::from_u128(1),
            &live,
            "octo",
            "plans",
        )
        .await;
    assert!(r.is_error, "{r:?}");
    let words = r.output.as_str().unwrap();
    assert!(
        words.contains("GitHub's MCP server is unavailable"),
        "{words}"
    );
    assert_eq!(nowhere.open_clients().await, 0);
}

#[path = "support/mod.rs"]
mod support;

/// RFC-53: the GitHub MCP client cached for an owner's token is closed when that token is
/// retired — the owner's browser login ends (a sign-out, an expiry) — not kept until a later
/// call happens to notice.
#[tokio::test]
async fn rfc_53_a_sign_out_closes_the_owners_github_mcp_client() {
    use chopin_server::identity::sign_ins::LoginEnd;
    let s = support::served().await;
    let account = s
        .store
        .account_by_login("mona")
        .await
        .unwrap()
        .expect("mona signed in");
    let now = chopin_server::runtime::Clock::now_ms(&chopin_server::runtime::clock::SystemClock);
    let live = s.state.sign_ins.live_login_of(account.id, now).unwrap();
    let tools = &s.state.github_tools;
    tools
        .execute(
            "pull_request_read",
            json!({ "method": "get", "pullNumber": 1 }),
            live.id,
            live.github_token(),
            "octo",
            "plans",
        )
        .await;
    assert_eq!(tools.open_clients().await, 1, "discovered for mona's token");
    s.state
        .planners
        .end_login(&live, LoginEnd::SignedOut)
        .await
        .unwrap();
    for _ in 0..100 {
        if tools.open_clients().await == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the client outlived its token's login");
}
