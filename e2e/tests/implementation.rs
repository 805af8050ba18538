//! The implementation lifecycle on the spawned binary, on SQLite and PostgreSQL: a plan created
//! through MCP, broken into tasks by the Planner (the scripted agent link calling
//! `edit_implementation_graph`), approved by a person in a browser session, then carried out by
//! a coding agent through `/mcp` — read, claim, every task through its pull request to complete,
//! whole-graph verification — with rmcp and with the official MCP TypeScript SDK
//! (`e2e/yjs/implementation.mjs`). The Build view's snapshot shows the verified run after.

use std::time::Duration;

use chopin_e2e::{node_script, sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect as attach, AgentClient, Event, Upgrade};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_fixtures::mcp::{call, connect, ok, Client};
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, ServerMessage, Started, TurnEnd, TurnStatus,
};
use serde_json::{json, Value};

struct Plan {
    server: Server,
    /// Kept until the test ends: the database and the server's home.
    _backend: Backend,
    _home: tempfile::TempDir,
    github: FakeGitHub,
    mona: String,
    cookie: String,
    id: String,
    url: String,
}

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

/// A document made through MCP, its tasks drafted by the Planner (version 1, revision 1).
async fn drafted_plan(backend: Backend) -> Plan {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Launch::hosted(&github_url)
        .env("HOME", home.path().to_string_lossy())
        .on(&backend)
        .start()
        .await;
    let (host, origin) = (server.host(), server.origin());
    let cookie = sign_in(&server, &github, "mona").await;
    let mcp = connect(&server.url("/mcp"), &mona).await;
    let created = ok(call(
        &mcp,
        "create_document",
        json!({"repository": "octo/plans", "title": "Quay", "source": "# Quay\n\nA schema, then an API and a page on it.\n",
               "baseBranch": "main", "baseCommit": "a".repeat(40)}),
    )
    .await);
    let id = created["id"].as_str().unwrap().to_owned();
    let url = created["url"].as_str().unwrap().to_owned();

    // The Planner drafts the graph in a turn a person's message starts.
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut planner = attach(stream, &Upgrade::new(host.clone(), Some(&mona)))
        .await
        .unwrap();
    let attached = planner.attach(&id, &[]).await.unwrap();
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
        .send_json(&json!({ "type": "chat:send", "requestId": "r-1", "text": "@chopin break the plan into tasks" }))
        .await
        .unwrap();
    let session = match next(&mut planner).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    planner
        .send(&ClientMessage::Started(Started {
            session_id: session,
        }))
        .await
        .unwrap();
    let turn = match next(&mut planner).await {
        ServerMessage::Turn(t) => t.turn_id,
        other => panic!("expected turn, got {other:?}"),
    };
    let tasks = json!([
        { "id": "schema", "title": "Add the table", "acceptanceCriteria": ["migrates"] },
        { "id": "api", "title": "Serve it", "dependsOn": ["schema"] },
        { "id": "page", "title": "Show it", "dependsOn": ["api"] },
    ]);
    planner
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.clone(),
            call_id: "g1".into(),
            name: "edit_implementation_graph".into(),
            input: json!({ "base": null, "tasks": tasks }),
        }))
        .await
        .unwrap();
    let drafted = match next(&mut planner).await {
        ServerMessage::HostToolResult(r) => r,
        other => panic!("expected host-tool-result, got {other:?}"),
    };
    assert!(!drafted.is_error, "{drafted:?}");
    assert_eq!(drafted.output["state"], "draft");
    planner
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();

    Plan {
        server,
        _backend: backend,
        _home: home,
        github,
        mona,
        cookie,
        id,
        url,
    }
}

/// A document made through MCP, its tasks drafted by the Planner and approved by mona.
async fn approved_plan(backend: Backend) -> Plan {
    let plan = drafted_plan(backend).await;
    let (server, id, origin) = (&plan.server, &plan.id, plan.server.origin());
    let (mona, cookie) = (&plan.mona, &plan.cookie);
    // A token cannot approve; mona's browser session approves exactly the draft she saw.
    let http = reqwest::Client::new();
    let approve = |body: Value, cookie: Option<&str>| {
        let mut request = http
            .post(server.url(&format!("/api/channels/{id}/implementation/approve")))
            .header("origin", origin.clone())
            .json(&body);
        request = match cookie {
            Some(cookie) => request.header("cookie", cookie),
            None => request.bearer_auth(mona),
        };
        request.send()
    };
    let by_token = approve(json!({"graphVersion": 1, "graphRevision": 1}), None)
        .await
        .unwrap();
    assert_eq!(by_token.status(), 403);
    let stale = approve(json!({"graphVersion": 1, "graphRevision": 2}), Some(cookie))
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    let approved = approve(json!({"graphVersion": 1, "graphRevision": 1}), Some(cookie))
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    let approved: Value = approved.json().await.unwrap();
    assert_eq!(
        (&approved["state"], &approved["claimable"]),
        (&json!("approved"), &json!(true))
    );
    plan
}

/// The Build view's snapshot, read with mona's browser session.
async fn snapshot(plan: &Plan) -> Value {
    let response = reqwest::Client::new()
        .get(
            plan.server
                .url(&format!("/api/channels/{}/implementation", plan.id)),
        )
        .header("cookie", &plan.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn checked_snapshot(shown: &Value) {
    assert_eq!(shown["lock"], Value::Null, "{shown:#}");
    assert_eq!(shown["graph"]["verified"], true, "{shown:#}");
    let runs = shown["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{shown:#}");
    assert_eq!(runs[0]["state"], "verified");
    let states: Vec<&str> = runs[0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["complete", "complete", "complete"]);
}

/// Build plan pressed for a paired machine (issue 30): the press approves and queues the build
/// on mona's machine (LIFE-05); the scripted connector lists it and picks it up once, with a
/// bridge (LIFE-48); the coding agent, over rmcp with that bridge, is refused anything but its
/// build and claims it, which makes the build the run's (LIFE-06); the plan was frozen from the
/// press (LIFE-64).
async fn built_on_a_paired_machine(backend: Backend) {
    use chopin_fixtures::connector::{Connector, TcpDial};
    use chopin_fixtures::mcp::refusal;
    let plan = drafted_plan(backend).await;
    let host = plan.server.host();
    let machine_token = plan.github.issue_token("mona");
    let connector = Connector::pair(
        TcpDial(host.clone()),
        host.clone(),
        machine_token.clone(),
        "studio",
        Some("0.0.30"),
    )
    .await
    .unwrap();
    let pressed = reqwest::Client::new()
        .post(
            plan.server
                .url(&format!("/api/channels/{}/implementation/approve", plan.id)),
        )
        .header("origin", plan.server.origin())
        .header("cookie", &plan.cookie)
        .json(&json!({"graphVersion": 1, "graphRevision": 1,
                      "machineId": connector.machine_id(), "checkout": "~/src/plans"}))
        .send()
        .await
        .unwrap();
    assert_eq!(pressed.status(), 200);
    let pressed: Value = pressed.json().await.unwrap();
    assert_eq!(
        (&pressed["state"], &pressed["build"]["state"]),
        (&json!("approved"), &json!("queued")),
        "{pressed}"
    );
    let build_id = pressed["build"]["buildId"].as_str().unwrap().to_owned();
    assert_eq!(snapshot(&plan).await["lock"]["buildId"], build_id);

    let queued = connector.builds().await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");
    let claim = queued[0]["claim"].clone();
    let picked = connector.pick_up(&build_id).await.unwrap();
    let again = connector.pick_up(&build_id).await.unwrap_err();
    assert_eq!(again.code(), Some("build-picked-up"), "{again}");
    let bridge = picked["bridge"].as_str().unwrap().to_owned();

    let agent: Client = connect(&plan.server.url("/mcp"), &bridge).await;
    let (code, body) = refusal(
        call(
            &agent,
            "list_documents",
            json!({"repository": "octo/plans"}),
        )
        .await,
    );
    assert_eq!(code, "bridge-scope", "{body}");
    let started = ok(call(
        &agent,
        "start_implementation",
        json!({"documentId": plan.id, "planRevision": claim["planRevision"],
               "graphVersion": claim["graphVersion"], "graphRevision": claim["graphRevision"],
               "repository": "octo/plans", "branch": "main", "commit": "a".repeat(40)}),
    )
    .await);
    let run_id = started["run"]["runId"].as_str().unwrap().to_owned();
    ok(call(
        &agent,
        "start_task",
        json!({"documentId": plan.id, "runId": run_id, "idempotencyKey": "k-1", "taskId": "schema"}),
    )
    .await);
    let shown = snapshot(&plan).await;
    assert_eq!(
        (&shown["builds"][0]["state"], &shown["builds"][0]["runId"]),
        (&json!("claimed"), &json!(run_id)),
        "{shown:#}"
    );
    assert_eq!(shown["lock"]["runId"], run_id, "{shown:#}");
    let log = plan.server.logs();
    assert!(
        !log.contains(&bridge) && !log.contains(&machine_token),
        "neither the bridge nor the machine's token is logged"
    );
}

/// rmcp as the coding agent: the same session the TypeScript script runs.
async fn carried_out_with_rmcp(backend: Backend) {
    let plan = approved_plan(backend).await;
    let agent: Client = connect(&plan.server.url("/mcp"), &plan.mona).await;
    let read = ok(call(&agent, "read_implementation", json!({"document": plan.url})).await);
    assert_eq!(read["document"]["id"], plan.id);
    assert_eq!(read["provenance"]["baseCommit"], "a".repeat(40));
    let graph = &read["graph"];
    let started = ok(call(
        &agent,
        "start_implementation",
        json!({"documentId": plan.id, "planRevision": graph["planRevision"],
               "graphVersion": graph["graphVersion"], "graphRevision": graph["graphRevision"],
               "repository": "octo/plans", "branch": "main", "commit": "a".repeat(40)}),
    )
    .await);
    let mut run = started["run"].clone();
    let run_id = run["runId"].as_str().unwrap().to_owned();
    let mut key = 0;
    let mut order = Vec::new();
    while let Some(task) = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["ready"] == true)
        .map(|t| t["id"].as_str().unwrap().to_owned())
    {
        order.push(task.clone());
        for (tool, fields) in [
            ("start_task", json!({})),
            (
                "report_pr",
                json!({"url": format!("https://github.com/octo/plans/pull/{}", order.len()), "state": "merged"}),
            ),
            ("complete_task", json!({"summary": format!("Did {task}.")})),
        ] {
            key += 1;
            let mut args = json!({"documentId": plan.id, "runId": run_id, "idempotencyKey": format!("k-{key}"), "taskId": task});
            args.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            run = ok(call(&agent, tool, args).await)["run"].clone();
        }
    }
    assert_eq!(order, ["schema", "api", "page"]);
    let evidence: Vec<Value> = order
        .iter()
        .map(|t| json!({"taskId": t, "passed": true, "evidence": format!("Reviewed {t}.")}))
        .collect();
    let verified = ok(call(
        &agent,
        "report_verification",
        json!({"documentId": plan.id, "runId": run_id, "idempotencyKey": "verify", "tasks": evidence}),
    )
    .await);
    assert_eq!(verified["run"]["state"], "verified");
    checked_snapshot(&snapshot(&plan).await);
    let (status, log) = plan.server.stop().await;
    assert!(status.success(), "{log}");
}

/// The official TypeScript SDK as the coding agent.
async fn carried_out_with_the_typescript_sdk(backend: Backend) {
    let plan = approved_plan(backend).await;
    let (ok, seen) = node_script(
        "implementation.mjs",
        &json!({"url": plan.server.url("/mcp"), "token": plan.mona, "document": plan.url}),
    )
    .await;
    assert!(ok, "{seen:#}");
    let seen = &seen["seen"];
    assert_eq!(seen["read"]["documentId"], plan.id, "{seen:#}");
    assert_eq!(seen["order"], json!(["schema", "api", "page"]), "{seen:#}");
    assert_eq!(seen["retrySame"], true, "{seen:#}");
    assert_eq!(
        seen["final"],
        json!({"state": "verified", "tasks": ["complete", "complete", "complete"]}),
        "{seen:#}"
    );
    assert_eq!(
        seen["after"],
        json!({"state": "approved", "verified": true, "claimable": false}),
        "{seen:#}"
    );
    checked_snapshot(&snapshot(&plan).await);
    let (status, log) = plan.server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn life_01_life_02_life_41_a_plan_is_carried_out_through_mcp_with_rmcp_on_sqlite() {
    carried_out_with_rmcp(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn life_01_life_02_life_41_a_plan_is_carried_out_through_mcp_with_rmcp_on_postgres() {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    carried_out_with_rmcp(Backend::Postgres(db)).await;
}

#[tokio::test]
async fn life_01_life_02_life_41_a_plan_is_carried_out_through_mcp_with_the_typescript_sdk_on_sqlite(
) {
    carried_out_with_the_typescript_sdk(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn life_01_life_02_life_41_a_plan_is_carried_out_through_mcp_with_the_typescript_sdk_on_postgres(
) {
    let db = chopin_fixtures::pg::shared_postgres()
        .create_database()
        .await
        .expect("a fresh database");
    carried_out_with_the_typescript_sdk(Backend::Postgres(db)).await;
}

#[tokio::test]
async fn life_05_life_06_life_48_a_build_runs_on_a_paired_machine_through_its_bridge_on_sqlite() {
    built_on_a_paired_machine(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn life_05_life_06_life_48_a_build_runs_on_a_paired_machine_through_its_bridge_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    built_on_a_paired_machine(Backend::Postgres(db.clone())).await;
    pg.drop_database(&db).await.unwrap();
}
