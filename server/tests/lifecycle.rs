//! The MCP lifecycle tools after `read_implementation` (implementation-lifecycle.md, "MCP
//! lifecycle tools", "Authorization"): `start_implementation` and the reports on its run, over
//! the real `/mcp` endpoint with rmcp, each rule under its checklist id.

use chopin_fixtures::github::Permission;
use chopin_fixtures::mcp::{call, connect, ok, refusal, Client};
use chopin_server::store::{GraphChange, GraphState};
use rmcp::model::CallToolResult;
use serde_json::{json, Value};
use uuid::Uuid;

mod support;

use support::{served, Served, DOC_URL};

async fn client(s: &Served, token: &str) -> Client {
    connect(&format!("http://{}/mcp", s.host), token).await
}

/// Tasks `a`, then `b` and `c` which depend on `a`.
const DEFINITION: &str = r#"{"tasks":[{"id":"a","title":"Do a","acceptanceCriteria":["a works"]},{"id":"b","title":"Do b","dependsOn":["a"]},{"id":"c","title":"Do c","dependsOn":["a"]}]}"#;

/// Drafts [`DEFINITION`] on `doc` at its plan revision and approves it, as a person's Build
/// plan press would: the counters a claim names.
async fn approved(s: &Served, doc: Uuid) -> Value {
    let plan = s.store.document(doc).await.unwrap().unwrap().plan_revision;
    let latest = s.store.graph_versions(doc).await.unwrap().pop();
    let base = latest
        .as_ref()
        .map(|v| (v.counters.graph_version, v.counters.graph_revision));
    let draft = GraphChange::Edit {
        base,
        plan_revision: plan,
        definition: DEFINITION.into(),
    };
    let drafted = s.store.change_graph(doc, &draft, 1).await.unwrap().unwrap();
    let approve = GraphChange::Approve {
        graph_version: drafted.counters.graph_version,
        graph_revision: drafted.counters.graph_revision,
        current_plan_revision: plan,
    };
    s.store
        .change_graph(doc, &approve, 2)
        .await
        .unwrap()
        .unwrap();
    json!({
        "documentId": doc,
        "planRevision": plan,
        "graphVersion": drafted.counters.graph_version,
        "graphRevision": drafted.counters.graph_revision,
        "repository": "octo/plans",
        "branch": "main",
        "commit": "c".repeat(40),
    })
}

/// A document mona made through MCP, with an approved graph: its id and the claim's arguments.
async fn mcp_plan(s: &Served, mona: &Client) -> (Uuid, Value) {
    let created = ok(call(
        mona,
        "create_document",
        json!({"repository": "octo/plans", "title": "Quay", "source": "# Quay\n\nBuild it.\n"}),
    )
    .await);
    let doc: Uuid = created["id"].as_str().unwrap().parse().unwrap();
    let claim = approved(s, doc).await;
    (doc, claim)
}

/// Calls report tool `tool` on `run` with key `key` and the tool's own `fields`.
async fn report(
    client: &Client,
    tool: &str,
    run: &Value,
    key: &str,
    fields: Value,
) -> CallToolResult {
    let mut args = json!({
        "documentId": run["documentId"],
        "runId": run["runId"],
        "idempotencyKey": key,
    });
    if let (Some(args), Value::Object(fields)) = (args.as_object_mut(), fields) {
        args.extend(fields);
    }
    call(client, tool, args).await
}

/// The state of task `id` in a run as answered.
fn task_state(run: &Value, id: &str) -> String {
    run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .map(|t| t["state"].as_str().unwrap().to_owned())
        .unwrap()
}

async fn started(mona: &Client, claim: &Value) -> Value {
    ok(call(mona, "start_implementation", claim.clone()).await)["run"].clone()
}

/// LIFE-42, LIFE-50, LIFE-57, LIFE-74: `start_implementation` names the exact graph by its
/// three counters and the agent's checkout, locks it and makes one fresh run id; a second
/// claim, a stale one, and one by a reader are refused.
#[tokio::test]
async fn life_42_life_50_life_57_life_74_a_claim_locks_the_exact_graph_for_one_new_run() {
    let s = served().await;
    s.github.add_user("hubot", 1002);
    s.github.grant("octo", "plans", "hubot", Permission::Read);
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;

    // A reader cannot claim (LIFE-74).
    let hubot = client(&s, &s.github.issue_token("hubot")).await;
    let (code, _) = refusal(call(&hubot, "start_implementation", claim.clone()).await);
    assert_eq!(code, "no-write-access");

    // Any counter that is not the graph's: stale, nothing locked (LIFE-33, LIFE-42).
    for field in ["planRevision", "graphVersion", "graphRevision"] {
        let mut wrong = claim.clone();
        wrong[field] = json!(wrong[field].as_i64().unwrap() + 1);
        let (code, body) = refusal(call(&mona, "start_implementation", wrong).await);
        assert_eq!(code, "stale", "{field}: {body}");
    }
    assert_eq!(
        s.store.graph_versions(doc).await.unwrap()[0].state,
        GraphState::Approved
    );

    let run = started(&mona, &claim).await;
    let run_id = run["runId"].as_str().unwrap();
    assert!(run_id.starts_with("run_") && run_id.len() > 20, "{run}");
    assert_eq!(
        (
            &run["state"],
            &run["graphVersion"],
            &run["repository"],
            &run["branch"],
            &run["commit"],
            &run["startedBy"]
        ),
        (
            &json!("active"),
            &json!(1),
            &json!("octo/plans"),
            &json!("main"),
            &claim["commit"],
            &json!("mona")
        )
    );
    let states: Vec<(String, bool)> = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["state"].as_str().unwrap().to_owned(), t["ready"] == true))
        .collect();
    assert_eq!(
        states,
        [
            ("queued".to_owned(), true),
            ("queued".to_owned(), false),
            ("queued".to_owned(), false)
        ]
    );
    let version = s.store.graph_versions(doc).await.unwrap().remove(0);
    assert_eq!(
        (version.state, version.run_id.as_deref()),
        (GraphState::Locked, Some(run_id))
    );
    let runs = s.store.implementation_runs(doc).await.unwrap();
    assert_eq!(runs.len(), 1);

    // The same call again is a second claim, not a retry: refused, no second run (LIFE-57).
    let (code, body) = refusal(call(&mona, "start_implementation", claim.clone()).await);
    assert_eq!(
        (code.as_str(), &body["graphVersion"]),
        ("graph-locked", &json!(1))
    );
    assert_eq!(s.store.implementation_runs(doc).await.unwrap().len(), 1);
}

/// LIFE-43, LIFE-51, LIFE-52: only a task whose dependencies are complete starts; a blocker
/// on a queued task starts and blocks it at once, dependencies unfinished or not, and the run
/// keeps the graph; `start_task` resumes it.
#[tokio::test]
async fn life_43_life_51_life_52_tasks_start_when_ready_and_a_blocker_starts_a_queued_task() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;

    let (code, body) =
        refusal(report(&mona, "start_task", &run, "k1", json!({"taskId": "b"})).await);
    assert_eq!(
        (code.as_str(), &body["unfinished"]),
        ("dependencies-unfinished", &json!(["a"]))
    );
    let (code, _) = refusal(report(&mona, "start_task", &run, "k2", json!({"taskId": "z"})).await);
    assert_eq!(code, "unknown-task");

    let blocked = ok(report(
        &mona,
        "block_task",
        &run,
        "k3",
        json!({"taskId": "b", "blocker": "The API key is not provisioned."}),
    )
    .await)["run"]
        .clone();
    assert_eq!(task_state(&blocked, "b"), "blocked");
    assert_eq!(
        blocked["tasks"][1]["blocker"],
        "The API key is not provisioned."
    );
    assert_eq!(
        s.store.graph_versions(doc).await.unwrap()[0].state,
        GraphState::Locked,
        "a blocker does not release the graph"
    );

    let a =
        ok(report(&mona, "start_task", &run, "k4", json!({"taskId": "a"})).await)["run"].clone();
    assert_eq!(task_state(&a, "a"), "in-progress");
    let (code, _) = refusal(report(&mona, "start_task", &run, "k5", json!({"taskId": "a"})).await);
    assert_eq!(code, "already-started");
    // A blocked task resumes: it was started already.
    let b =
        ok(report(&mona, "start_task", &run, "k6", json!({"taskId": "b"})).await)["run"].clone();
    assert_eq!(
        (task_state(&b, "b"), &b["tasks"][1]["blocker"]),
        ("in-progress".into(), &Value::Null)
    );
}

/// LIFE-44, LIFE-53, LIFE-54: a task completes only once it is in progress, its pull request
/// is reported and a summary is given; completing it again is refused `already-complete`.
/// A task has one pull request, whose state may change.
#[tokio::test]
async fn life_44_life_53_life_54_a_task_completes_after_its_pull_request_and_summary() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (_, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;
    let pr = "https://github.com/octo/plans/pull/7";

    let (code, _) = refusal(
        report(
            &mona,
            "report_pr",
            &run,
            "p0",
            json!({"taskId": "a", "url": pr, "state": "open"}),
        )
        .await,
    );
    assert_eq!(code, "task-not-started");
    ok(report(&mona, "start_task", &run, "s1", json!({"taskId": "a"})).await);
    let (code, _) = refusal(
        report(
            &mona,
            "complete_task",
            &run,
            "c1",
            json!({"taskId": "a", "summary": "Done."}),
        )
        .await,
    );
    assert_eq!(code, "pull-request-missing");
    for (key, state) in [("p1", "open"), ("p2", "merged")] {
        let now = ok(report(
            &mona,
            "report_pr",
            &run,
            key,
            json!({"taskId": "a", "url": pr, "state": state}),
        )
        .await)["run"]
            .clone();
        assert_eq!(
            now["tasks"][0]["pullRequest"],
            json!({"url": pr, "state": state})
        );
    }
    let (code, _) = refusal(
        report(
            &mona,
            "report_pr",
            &run,
            "p3",
            json!({"taskId": "a", "url": "https://github.com/octo/plans/pull/8", "state": "open"}),
        )
        .await,
    );
    assert_eq!(code, "pull-request-exists");
    let (code, _) = refusal(
        report(
            &mona,
            "complete_task",
            &run,
            "c2",
            json!({"taskId": "a", "summary": "  "}),
        )
        .await,
    );
    assert_eq!(code, "invalid-arguments");
    let done = ok(report(
        &mona,
        "complete_task",
        &run,
        "c3",
        json!({"taskId": "a", "summary": "Added the table."}),
    )
    .await)["run"]
        .clone();
    assert_eq!(
        (
            task_state(&done, "a"),
            &done["tasks"][0]["summary"],
            &done["tasks"][1]["ready"]
        ),
        ("complete".into(), &json!("Added the table."), &json!(true))
    );
    let (code, _) = refusal(
        report(
            &mona,
            "complete_task",
            &run,
            "c4",
            json!({"taskId": "a", "summary": "Again."}),
        )
        .await,
    );
    assert_eq!(code, "already-complete");
}

/// Takes every task of [`DEFINITION`] through start, pull request and completion on `run`.
async fn complete_all(client: &Client, run: &Value, round: &str) {
    for id in ["a", "b", "c"] {
        let _ = report(
            client,
            "start_task",
            run,
            &format!("{round}-s-{id}"),
            json!({"taskId": id}),
        )
        .await;
        let _ = report(
            client,
            "report_pr",
            run,
            &format!("{round}-p-{id}"),
            json!({"taskId": id, "url": format!("https://github.com/octo/plans/pull/{id}"), "state": "merged"}),
        )
        .await;
        ok(report(
            client,
            "complete_task",
            run,
            &format!("{round}-c-{id}"),
            json!({"taskId": id, "summary": format!("{id} done")}),
        )
        .await);
    }
}

fn evidence(failed: &[&str]) -> Value {
    let tasks: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            json!({
                "taskId": id,
                "passed": !failed.contains(id),
                "evidence": format!("Reviewed {id}."),
            })
        })
        .collect();
    json!({ "tasks": tasks })
}

/// LIFE-45, LIFE-55, LIFE-35: verification covers the whole graph once every task is complete;
/// a failure returns the named tasks to work and keeps the run; a pass ends it, and the version
/// is never claimed again.
#[tokio::test]
async fn life_45_life_55_failed_verification_returns_tasks_and_a_pass_releases_the_run() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;

    let (code, body) =
        refusal(report(&mona, "report_verification", &run, "v0", evidence(&[])).await);
    assert_eq!(
        (code.as_str(), &body["unfinished"]),
        ("tasks-unfinished", &json!(["a", "b", "c"]))
    );
    complete_all(&mona, &run, "r1").await;
    let (code, body) = refusal(
        report(
            &mona,
            "report_verification",
            &run,
            "v1",
            json!({"tasks": [{"taskId": "a", "passed": true, "evidence": "ok"}]}),
        )
        .await,
    );
    assert_eq!(
        (code.as_str(), &body["missing"]),
        ("evidence-missing", &json!(["b", "c"]))
    );

    let failed =
        ok(report(&mona, "report_verification", &run, "v2", evidence(&["b"])).await)["run"].clone();
    assert_eq!(
        (
            &failed["state"],
            task_state(&failed, "a"),
            task_state(&failed, "b")
        ),
        (&json!("active"), "complete".into(), "in-progress".into())
    );
    assert_eq!(failed["verifications"][0]["passed"], false);
    assert_eq!(
        s.store.graph_versions(doc).await.unwrap()[0].state,
        GraphState::Locked
    );

    ok(report(
        &mona,
        "complete_task",
        &run,
        "r2-c-b",
        json!({"taskId": "b", "summary": "b fixed"}),
    )
    .await);
    let passed =
        ok(report(&mona, "report_verification", &run, "v3", evidence(&[])).await)["run"].clone();
    assert_eq!(passed["state"], "verified");
    let version = s.store.graph_versions(doc).await.unwrap().remove(0);
    assert_eq!(
        (version.state, version.verified, version.run_id),
        (GraphState::Approved, true, None)
    );
    let (code, _) = refusal(call(&mona, "start_implementation", claim.clone()).await);
    assert_eq!(code, "already-verified");
    let (code, _) =
        refusal(report(&mona, "start_task", &run, "late", json!({"taskId": "a"})).await);
    assert_eq!(code, "run-ended");
}

/// LIFE-46, LIFE-47, LIFE-56: `request_revision` ends the run and gives the same graph back as
/// approved; it supersedes nothing, and the version can be claimed again through MCP.
#[tokio::test]
async fn life_46_life_47_life_56_a_revision_request_unlocks_the_graph_for_another_claim() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;
    let (code, _) =
        refusal(report(&mona, "request_revision", &run, "r0", json!({"reason": ""})).await);
    assert_eq!(code, "invalid-arguments");
    let ended = ok(report(
        &mona,
        "request_revision",
        &run,
        "r1",
        json!({"reason": "Task b needs a migration first."}),
    )
    .await)["run"]
        .clone();
    assert_eq!(ended["state"], "revision-requested");
    let version = s.store.graph_versions(doc).await.unwrap().remove(0);
    assert_eq!(
        (version.state, version.revision_requested, version.run_id),
        (GraphState::Approved, true, None)
    );
    let again = started(&mona, &claim).await;
    assert_ne!(again["runId"], run["runId"]);
    assert_eq!(s.store.implementation_runs(doc).await.unwrap().len(), 2);
}

/// LIFE-57, RULINGS LIFE-58: every report carries a key; the same key with the same report
/// answers the first answer and changes nothing; with another report it is refused
/// `idempotency-conflict`; keys belong to their run.
#[tokio::test]
async fn life_57_life_58_a_repeated_key_answers_the_first_answer_and_never_applies_twice() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;

    let mut missing = json!({"documentId": doc, "runId": run["runId"], "taskId": "a"});
    let (code, _) = refusal(call(&mona, "start_task", missing.clone()).await);
    assert_eq!(code, "invalid-arguments", "a report without a key");
    missing["idempotencyKey"] = json!("");
    let (code, _) = refusal(call(&mona, "start_task", missing).await);
    assert_eq!(code, "invalid-arguments", "an empty key");

    let first = ok(report(&mona, "start_task", &run, "same", json!({"taskId": "a"})).await);
    // A retry after a lost answer: the first answer, though the task has moved on since.
    ok(report(
        &mona,
        "block_task",
        &run,
        "other",
        json!({"taskId": "a", "blocker": "Waiting."}),
    )
    .await);
    let retry = ok(report(&mona, "start_task", &run, "same", json!({"taskId": "a"})).await);
    assert_eq!(retry, first);
    let now = s
        .store
        .implementation_run(run["runId"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(now.progress.contains("\"blocked\""), "{}", now.progress);
    let (code, _) =
        refusal(report(&mona, "start_task", &run, "same", json!({"taskId": "b"})).await);
    assert_eq!(code, "idempotency-conflict");
    let (code, _) = refusal(
        report(
            &mona,
            "complete_task",
            &run,
            "same",
            json!({"taskId": "a", "summary": "x"}),
        )
        .await,
    );
    assert_eq!(
        code, "idempotency-conflict",
        "another tool under the same key"
    );

    // The same key on the next run is that run's own.
    ok(report(
        &mona,
        "request_revision",
        &run,
        "end",
        json!({"reason": "Rethink."}),
    )
    .await);
    let next = started(&mona, &claim).await;
    let fresh = ok(report(&mona, "start_task", &next, "same", json!({"taskId": "a"})).await);
    assert_eq!(fresh["run"]["runId"], next["runId"]);
}

/// LIFE-07, LIFE-75: the run is not bound to whoever claimed it: another writer who knows the
/// run id advances it; a run id the document does not have is refused.
#[tokio::test]
async fn life_07_life_75_any_writer_who_knows_the_run_id_advances_it() {
    let s = served().await;
    s.github.add_user("ada", 1004);
    s.github.grant("octo", "plans", "ada", Permission::Write);
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;
    let ada = client(&s, &s.github.issue_token("ada")).await;
    let moved =
        ok(report(&ada, "start_task", &run, "k", json!({"taskId": "a"})).await)["run"].clone();
    assert_eq!(
        (task_state(&moved, "a"), &moved["startedBy"]),
        ("in-progress".into(), &json!("mona"))
    );

    let mut wrong = run.clone();
    wrong["runId"] = json!("run_0000");
    let (code, _) = refusal(report(&ada, "start_task", &wrong, "k2", json!({"taskId": "b"})).await);
    assert_eq!(code, "unknown-run");
    // A run of another document is not this one's.
    let (other, other_claim) = mcp_plan(&s, &mona).await;
    let other_run = started(&mona, &other_claim).await;
    let mut crossed = other_run.clone();
    crossed["documentId"] = json!(doc);
    let (code, _) =
        refusal(report(&ada, "start_task", &crossed, "k3", json!({"taskId": "a"})).await);
    assert_eq!(code, "unknown-run");
    assert_ne!(other, doc);
}

/// LIFE-60, LIFE-62, LIFE-63: lifecycle calls name the document by its UUID, not its URL; an
/// archived document refuses a claim, while a run started before archival keeps reporting.
#[tokio::test]
async fn life_60_life_62_life_63_calls_name_the_uuid_and_archival_stops_only_new_claims() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (doc, claim) = mcp_plan(&s, &mona).await;
    let url = s.store.document(doc).await.unwrap().unwrap();
    let url = format!("/documents/octo/plans/{}", url.slug);
    let mut by_url = claim.clone();
    by_url["documentId"] = json!(url);
    let (code, _) = refusal(call(&mona, "start_implementation", by_url).await);
    assert_eq!(code, "invalid-arguments");

    let run = started(&mona, &claim).await;
    ok(call(&mona, "archive_document", json!({"document": doc})).await);
    let moved =
        ok(report(&mona, "start_task", &run, "k", json!({"taskId": "a"})).await)["run"].clone();
    assert_eq!(task_state(&moved, "a"), "in-progress");
    ok(report(
        &mona,
        "request_revision",
        &run,
        "end",
        json!({"reason": "Scope changed."}),
    )
    .await);
    let (code, _) = refusal(call(&mona, "start_implementation", claim.clone()).await);
    assert_eq!(code, "document-archived");
}

/// LIFE-76: `start_implementation` does not repeat `read_implementation`'s check that the
/// document was created through MCP: a writer who knows a browser document's counters claims.
#[tokio::test]
async fn life_76_a_claim_does_not_repeat_the_mcp_creation_check() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let claim = approved(&s, s.doc).await;
    let (code, _) = refusal(call(&mona, "read_implementation", json!({"document": DOC_URL})).await);
    assert_eq!(code, "not-created-through-mcp");
    let run = started(&mona, &claim).await;
    assert_eq!(run["state"], "active");
}

/// `method` on `/api/channels/{doc}/implementation{rest}` with mona's browser session.
async fn build_view(s: &Served, method: &str, rest: &str, body: Option<Value>) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!(
            "http://{}/api/channels/{}/implementation{rest}",
            s.host, s.doc
        ))
        .header("cookie", &s.mona_cookie)
        .header("origin", format!("http://{}", s.host))
        .header("content-type", "application/json")
        .body(axum::body::Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        ))
        .unwrap();
    let r = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        request,
    )
    .await
    .unwrap();
    (
        r.status.as_u16(),
        serde_json::from_slice(&r.body).unwrap_or_default(),
    )
}

/// GRA-04, LIFE-05, LIFE-31: a person approves exactly the draft they saw, against the plan as
/// it stands: a draft made from an older plan revision is refused `plan-changed`, another
/// revision is `stale`; the Build view's snapshot shows the versions and then the run (LIFE-66,
/// LIFE-67).
#[tokio::test]
async fn gra_04_life_05_life_31_life_66_life_67_a_person_approves_exactly_the_current_draft() {
    let s = served().await;
    let plan = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    let draft = GraphChange::Edit {
        base: None,
        plan_revision: plan,
        definition: DEFINITION.into(),
    };
    s.store
        .change_graph(s.doc, &draft, 1)
        .await
        .unwrap()
        .unwrap();
    let (status, shown) = build_view(&s, "GET", "", None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(
        (&shown["graph"]["state"], &shown["lock"], &shown["runs"]),
        (&json!("draft"), &Value::Null, &json!([]))
    );

    let (status, refused) = build_view(
        &s,
        "POST",
        "/approve",
        Some(json!({"graphVersion": 1, "graphRevision": 2})),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("stale")),
        "{refused}"
    );

    // The plan moves on after the draft: the draft no longer describes it.
    let mcp = client(&s, &s.mona).await;
    ok(call(
        &mcp,
        "update_document",
        json!({"document": s.doc, "planRevision": plan, "source": "# Notes\n\nMore.\n", "idempotencyKey": "u1"}),
    )
    .await);
    let (status, refused) = build_view(
        &s,
        "POST",
        "/approve",
        Some(json!({"graphVersion": 1, "graphRevision": 1})),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("plan-changed")),
        "{refused}"
    );

    // Drafted again against the plan now, it is approved.
    let now = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    let redraft = GraphChange::Edit {
        base: Some((1, 1)),
        plan_revision: now,
        definition: DEFINITION.into(),
    };
    s.store
        .change_graph(s.doc, &redraft, 2)
        .await
        .unwrap()
        .unwrap();
    let (status, approved) = build_view(
        &s,
        "POST",
        "/approve",
        Some(json!({"graphVersion": 1, "graphRevision": 2})),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(
        (&approved["state"], &approved["claimable"]),
        (&json!("approved"), &json!(true))
    );
    let (status, refused) = build_view(
        &s,
        "POST",
        "/approve",
        Some(json!({"graphVersion": 1, "graphRevision": 2})),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("not-a-draft")),
        "{refused}"
    );

    let mut claim = json!({"documentId": s.doc, "planRevision": now, "graphVersion": 1, "graphRevision": 2,
                           "repository": "octo/plans", "branch": "main", "commit": "abc"});
    let run = started(&mcp, &claim).await;
    let (_, shown) = build_view(&s, "GET", "", None).await;
    assert_eq!(
        (
            &shown["lock"]["runId"],
            &shown["runs"][0]["runId"],
            &shown["runs"][0]["state"]
        ),
        (&run["runId"], &run["runId"], &json!("active"))
    );
    claim["graphRevision"] = json!(1);
    let (code, _) = refusal(call(&mcp, "start_implementation", claim).await);
    assert_eq!(code, "graph-locked");
}

/// The next `plan:implementation` frame `room` is told.
async fn implementation_news(room: &mut chopin_fixtures::browser::BrowserSocket) -> Value {
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), room.recv_json())
            .await
            .expect("a frame within 10 s")
            .unwrap()
        {
            chopin_fixtures::browser::BrowserEvent::Json(v)
                if v["type"] == "plan:implementation" =>
            {
                return v
            }
            chopin_fixtures::browser::BrowserEvent::Closed { code, reason } => {
                panic!("closed {code} {reason}")
            }
            _ => {}
        }
    }
}

/// LIFE-68, LIFE-69: each committed change of the graph or a run tells the room
/// `plan:implementation` with the storage revision and the editing lock; a socket joining
/// later is given the lock in `session:hello`, Build view open or not.
#[tokio::test]
async fn life_68_life_69_the_room_is_told_of_each_change_and_of_the_lock_on_joining() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let mut room = s.room_as(s.doc, &s.mona_cookie).await;
    let claim = approved(&s, s.doc).await;
    let run = started(&mona, &claim).await;
    let told = implementation_news(&mut room).await;
    let storage = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .storage_revision;
    assert_eq!(
        (
            &told["lock"]["graphVersion"],
            &told["lock"]["runId"],
            &told["storageRevision"]
        ),
        (&json!(1), &run["runId"], &json!(storage)),
        "{told}"
    );
    ok(report(&mona, "start_task", &run, "k1", json!({"taskId": "a"})).await);
    let told = implementation_news(&mut room).await;
    assert_eq!(told["lock"]["runId"], run["runId"]);

    // A socket that joins now is told the lock at once.
    let mut late = s.connect_room(s.doc, &s.mona_cookie).await;
    let hello = late.next_of_type("session:hello").await.unwrap();
    assert_eq!(
        hello["implementationLock"]["runId"], run["runId"],
        "{hello}"
    );

    ok(report(
        &mona,
        "request_revision",
        &run,
        "k2",
        json!({"reason": "Rethink."}),
    )
    .await);
    let told = implementation_news(&mut room).await;
    assert_eq!(told["lock"], Value::Null, "{told}");
    let mut later = s.connect_room(s.doc, &s.mona_cookie).await;
    let hello = later.next_of_type("session:hello").await.unwrap();
    assert_eq!(hello["implementationLock"], Value::Null, "{hello}");
}

/// LIFE-09: reading the Build view drafts nothing and starts nothing: no turn, no graph
/// version, no run, no Chat line.
#[tokio::test]
async fn life_09_opening_the_build_view_drafts_and_starts_nothing() {
    let s = served().await;
    let _client = s.attach(&[]).await;
    for _ in 0..3 {
        let (status, shown) = build_view(&s, "GET", "", None).await;
        assert_eq!(status, 200, "{shown}");
        assert_eq!(
            (&shown["graph"], &shown["runs"]),
            (&Value::Null, &json!([]))
        );
    }
    assert!(!s.state.turns.is_running(s.doc));
    assert!(s.store.graph_versions(s.doc).await.unwrap().is_empty());
    assert!(s.store.implementation_runs(s.doc).await.unwrap().is_empty());
    s.state.transcript.settled().await;
    assert!(s.store.transcript(s.doc, 0, 10).await.unwrap().is_empty());
}

/// A run's storage stays bounded: past 10,000 reports a run takes no more
/// (`too-many-reports`), while a repeated key is still answered.
#[tokio::test]
async fn life_57_a_run_takes_at_most_ten_thousand_reports() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (_, claim) = mcp_plan(&s, &mona).await;
    let run = started(&mona, &claim).await;
    let first = ok(report(&mona, "start_task", &run, "first", json!({"taskId": "a"})).await);
    let id = run["runId"].as_str().unwrap();
    for n in 0..chopin_server::lifecycle::REPORTS_MAX {
        let now = s.store.implementation_run(id).await.unwrap().unwrap();
        if now.revision > chopin_server::lifecycle::REPORTS_MAX {
            break;
        }
        let saved = s
            .store
            .report_implementation(
                id,
                &chopin_server::store::RunReport {
                    key: format!("filler-{n}"),
                    payload: "{}".into(),
                    base_revision: now.revision,
                    progress: now.progress.clone(),
                    result: "{}".into(),
                    end: None,
                    delivered: None,
                },
                3,
            )
            .await
            .unwrap();
        assert!(matches!(saved, chopin_server::store::Reported::Saved(_)));
    }
    let (code, _) = refusal(
        report(
            &mona,
            "block_task",
            &run,
            "late",
            json!({"taskId": "b", "blocker": "x"}),
        )
        .await,
    );
    assert_eq!(code, "too-many-reports");
    let again = ok(report(&mona, "start_task", &run, "first", json!({"taskId": "a"})).await);
    assert_eq!(again, first);
}
