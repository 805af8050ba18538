//! GitHub's MCP server as a host of the simulated world ([`World::serve_github_mcp`]), reached
//! by the real server's GitHub MCP client over simulated TCP through the connector seam, while
//! a scripted agent client plays a Planner turn that calls host tools.
//!
//! ISO-05 / RFC-38 (the newer rule): "GitHub MCP discovery runs on the first pull-request tool
//! call, with the owner's current credential; document-only turns never wait for discovery."

use chopin_fixtures::github::PullRequest;
use chopin_protocol::agent::TurnStatus;
use chopin_sim::cast::{cast, Cast};
use chopin_sim::{Agent, AgentEvent, Browser, TurnScript, World};
use serde_json::{json, Value};
use uuid::Uuid;

/// The simulated network's one-way latency.
const LATENCY_MS: u64 = 1;

fn until(world: &mut World, within_ms: u64, what: &str, done: impl Fn() -> bool) {
    world
        .advance_until(within_ms, what, move |_| done())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn join(world: &mut World, cookie: &str, doc: Uuid) -> Browser {
    let browser = world.browser("mona-room", cookie, &doc.to_string());
    let b = browser.clone();
    until(world, 5_000, "mona joined", move || !b.heard().is_empty());
    browser
}

fn attach(world: &mut World, token: &str, doc: Uuid) -> Agent {
    let agent = world.agent("mona-agent", token);
    let a = agent.clone();
    until(world, 5_000, "agent connected", move || {
        a.log()
            .iter()
            .any(|e| matches!(e, AgentEvent::Connected { .. }))
    });
    agent.attach(&doc.to_string());
    let a = agent.clone();
    until(world, 5_000, "attach answered", move || {
        a.answer().is_some()
    });
    assert!(
        matches!(agent.answer(), Some(Ok(_))),
        "{:?}",
        agent.answer()
    );
    agent
}

fn say(world: &mut World, browser: &Browser, text: &str) -> Value {
    browser.send_chat("m-1", text);
    let b = browser.clone();
    until(world, 5_000, "the chat answer", move || {
        !b.replies("m-1").is_empty()
    });
    browser.replies("m-1")[0].message.clone()
}

/// The `skip`-th `host-tool-result` the agent heard: `(at_ms, detail)`.
fn result(world: &mut World, agent: &Agent, skip: usize, within_ms: u64) -> (u64, String) {
    let a = agent.clone();
    until(world, within_ms, "a host-tool-result", move || {
        a.frames_of("host-tool-result").len() > skip
    });
    agent.frames_of("host-tool-result")[skip].clone()
}

fn pull() -> PullRequest {
    PullRequest {
        number: 7,
        title: "Retry webhooks".into(),
        body: "Retries twice.".into(),
        state: "open".into(),
        user: "mona".into(),
        head: "retry".into(),
        base: "main".into(),
        files: vec![],
        comments: vec![],
    }
}

#[test]
fn iso_05_rfc_38_discovery_happens_at_the_first_pull_request_call_not_before() {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = cast(71, Some(LATENCY_MS));
    let mcp = world.serve_github_mcp();
    world.github().add_pull_request("octo", "plans", pull());
    let room = join(&mut world, &mona_cookie, doc);
    let agent = attach(&mut world, &mona, doc);
    agent.script(
        TurnScript::new()
            .started()
            .host_tool_call("read_plan", json!({}))
            .sleep(1_000)
            .host_tool_call(
                "pull_request_read",
                json!({ "method": "get", "pullNumber": 7, "owner": "evil" }),
            )
            .host_tool_call("list_pull_requests", json!({ "state": "all" }))
            .end(TurnStatus::Completed),
    );
    assert_eq!(
        say(&mut world, &room, "@chopin read PR 7")["type"],
        "chat:ack"
    );
    let (_, first) = result(&mut world, &agent, 0, 5_000);
    assert!(first.starts_with("call-1 isError=false"), "{first}");
    world.advance(500).unwrap();
    assert!(
        mcp.calls().is_empty(),
        "nothing asked before the first pull-request call: {:?}",
        mcp.calls()
    );

    let (_, second) = result(&mut world, &agent, 1, 10_000);
    assert!(second.starts_with("call-2 isError=false"), "{second}");
    assert!(
        second.contains(r#""full_name":"octo/plans""#),
        "bound to the document's repository: {second}"
    );
    let (_, third) = result(&mut world, &agent, 2, 10_000);
    assert!(third.starts_with("call-3 isError=false"), "{third}");
    assert_eq!(mcp.count("initialize"), 1, "{:?}", mcp.calls());
    assert_eq!(mcp.count("tools/list"), 1);
    for call in mcp.tool_calls() {
        assert_eq!(call.login, "mona");
        assert_eq!(
            (call.owner.as_deref(), call.repo.as_deref()),
            (Some("octo"), Some("plans"))
        );
    }
}

#[test]
fn iso_05_a_document_only_turn_never_waits_on_an_unavailable_github_mcp_server() {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = cast(72, Some(LATENCY_MS));
    let mcp = world.serve_github_mcp();
    mcp.set_outage(true);
    let room = join(&mut world, &mona_cookie, doc);
    let agent = attach(&mut world, &mona, doc);
    agent.script(
        TurnScript::new()
            .started()
            .host_tool_call("read_plan", json!({}))
            .host_tool_call(
                "pull_request_read",
                json!({ "method": "get", "pullNumber": 7 }),
            )
            .host_tool_call("read_plan", json!({}))
            .end(TurnStatus::Completed),
    );
    assert_eq!(say(&mut world, &room, "@chopin go")["type"], "chat:ack");
    let (sent, first) = result(&mut world, &agent, 0, 5_000);
    assert!(first.starts_with("call-1 isError=false"), "{first}");
    let (_, second) = result(&mut world, &agent, 1, 5_000);
    assert!(
        second.starts_with("call-2 isError=true GitHub's MCP server is unavailable"),
        "{second}"
    );
    let (at, third) = result(&mut world, &agent, 2, 5_000);
    assert!(third.starts_with("call-3 isError=false"), "{third}");
    assert!(
        at - sent < 1_000,
        "the outage cost the document tools nothing: {} ms",
        at - sent
    );
}

/// PERM-05 for the new tools: "Before each Chopin host tool or its repository-bound GitHub MCP
/// tool executes, callbacks recheck … repository push or administration access." mona loses
/// push access between two calls (31 s apart: past the 30 s cache of repository access); the
/// pull-request call and the repository read are both denied before anything is asked of
/// GitHub's MCP server or of the contents endpoint.
#[test]
fn perm_05_pull_request_and_repository_tools_are_rechecked_before_they_run() {
    let Cast {
        mut world,
        doc,
        mona,
        mona_cookie,
        ..
    } = cast(73, Some(LATENCY_MS));
    let mcp = world.serve_github_mcp();
    world.github().add_pull_request("octo", "plans", pull());
    world
        .github()
        .put_file("octo", "plans", "README.md", "# Plans\n");
    let room = join(&mut world, &mona_cookie, doc);
    let agent = attach(&mut world, &mona, doc);
    agent.script(
        TurnScript::new()
            .started()
            .host_tool_call("read_plan", json!({}))
            .sleep(31_000)
            .host_tool_call(
                "pull_request_read",
                json!({ "method": "get", "pullNumber": 7 }),
            )
            .host_tool_call("read_repository_file", json!({ "path": "README.md" }))
            .end(TurnStatus::Completed),
    );
    assert_eq!(
        say(&mut world, &room, "@chopin read PR 7")["type"],
        "chat:ack"
    );
    let (_, first) = result(&mut world, &agent, 0, 5_000);
    assert!(first.starts_with("call-1 isError=false"), "{first}");
    world.github().grant(
        "octo",
        "plans",
        "mona",
        chopin_fixtures::github::Permission::Read,
    );
    let (_, second) = result(&mut world, &agent, 1, 40_000);
    assert!(
        second.starts_with(
            "call-2 isError=true permission denied: @mona can no longer push to octo/plans"
        ),
        "{second}"
    );
    let (_, third) = result(&mut world, &agent, 2, 5_000);
    assert!(
        third.starts_with("call-3 isError=true permission denied"),
        "{third}"
    );
    assert!(
        mcp.calls().is_empty(),
        "GitHub's MCP server was never asked: {:?}",
        mcp.calls()
    );
    assert_eq!(
        world.github().request_count("/repos/octo/plans/contents"),
        0
    );
}
