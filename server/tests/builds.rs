//! Browser builds on a paired machine (issue 30), on the whole stack over real sockets, with the
//! scripted connector of `chopin_fixtures::connector`: Build plan's press approves the draft and
//! queues its build on the presser's machine in one commit (LIFE-05, LIFE-03); the plan is frozen
//! from the press to the claim (LIFE-64); the machine's connector lists the build, picks it up
//! once — never again (LIFE-48) — and claims the graph through `/mcp` with the machine's
//! authorization, which makes the build claimed by the run (LIFE-06); a build that could not
//! start fails and frees the plan, and a person retries it explicitly (LIFE-48).

mod support;

use axum::body::Bytes;
use chopin_fixtures::connector::{Connector, TcpDial};
use chopin_fixtures::mcp::{call, connect, ok, refusal};
use chopin_server::runtime::connector::{self as http_client, TcpConnector};
use chopin_server::store::GraphChange;
use http::{Method, StatusCode};
use serde_json::{json, Value};
use support::Served;

/// `method path` with mona's browser session (and the server's own `Origin`).
async fn api(s: &Served, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.host))
        .header(http::header::ORIGIN, format!("http://{}", s.host))
        .header(http::header::COOKIE, &s.mona_cookie);
    let bytes = match body {
        Some(b) => {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
            Bytes::from(serde_json::to_vec(&b).unwrap())
        }
        None => Bytes::new(),
    };
    let answer = http_client::send(&TcpConnector, request.body(bytes).unwrap())
        .await
        .unwrap();
    let value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    (answer.status, value)
}

/// The Planner's draft of the document's graph (version 1, revision 1), in storage.
async fn drafted(s: &Served) -> i64 {
    let plan_revision = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    s.store
        .change_graph(
            s.doc,
            &GraphChange::Edit {
                base: None,
                plan_revision,
                definition: r#"{"tasks":[{"id":"a","title":"Do a"}]}"#.into(),
            },
            1,
        )
        .await
        .unwrap()
        .unwrap();
    plan_revision
}

async fn connector(s: &Served) -> (Connector<TcpDial>, String) {
    let token = s.github.issue_token("mona");
    let connector = Connector::pair(
        TcpDial(s.host.clone()),
        s.host.clone(),
        token.clone(),
        "studio",
        Some("0.0.30"),
    )
    .await
    .unwrap();
    (connector, token)
}

/// mona's press of Build plan in her browser, with `extra` fields.
async fn press(s: &Served, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({ "graphVersion": 1, "graphRevision": 1 });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    api(
        s,
        Method::POST,
        &format!("/api/channels/{}/implementation/approve", s.doc),
        Some(body),
    )
    .await
}

async fn snapshot(s: &Served) -> Value {
    let (status, body) = api(
        s,
        Method::GET,
        &format!("/api/channels/{}/implementation", s.doc),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn life_05_life_03_life_06_life_48_life_64_a_press_queues_the_build_on_the_pressers_machine_which_claims_it_once(
) {
    let s = support::served().await;
    let plan_revision = drafted(&s).await;
    let (connector, token) = connector(&s).await;
    let machine = connector.machine_id().to_owned();

    let (status, pressed) = press(
        &s,
        json!({ "machineId": machine, "checkout": "  ~/src/plans\u{7}  " }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pressed}");
    assert_eq!(pressed["state"], "approved", "{pressed}");
    let build = &pressed["build"];
    assert_eq!(
        (&build["state"], &build["checkout"], &build["requestedBy"]),
        (&json!("queued"), &json!("~/src/plans"), &json!("mona")),
        "{build}"
    );
    let build_id = build["buildId"].as_str().unwrap().to_owned();

    // LIFE-64: from the press to the claim the plan is frozen.
    let shown = snapshot(&s).await;
    assert_eq!(
        shown["lock"],
        json!({ "graphVersion": 1, "buildId": build_id }),
        "{shown}"
    );
    let mcp = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let (code, body) = refusal(
        call(
            &mcp,
            "update_document",
            json!({ "document": s.doc, "planRevision": plan_revision, "source": "# Replaced\n", "idempotencyKey": "u1" }),
        )
        .await,
    );
    assert_eq!(code, "locked", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("a build of version 1"),
        "{body}"
    );
    // Nor does the graph take a new draft, whose being the latest would leave the build nothing
    // to claim (LIFE-36).
    let redrafted = s
        .state
        .graphs
        .run(
            s.doc,
            "edit_implementation_graph",
            json!({ "base": { "graphVersion": 1, "graphRevision": 1 }, "tasks": [{ "id": "b", "title": "Do b" }] }),
        )
        .await;
    assert!(redrafted.is_error, "{:?}", redrafted.output);
    assert!(
        redrafted
            .output
            .to_string()
            .contains("a build of version 1"),
        "{:?}",
        redrafted.output
    );

    // The connector lists it, picks it up once, and never again (LIFE-48).
    let queued = connector.builds().await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0]["buildId"], build_id);
    assert_eq!(
        queued[0]["claim"],
        json!({ "documentId": s.doc, "planRevision": plan_revision, "graphVersion": 1, "graphRevision": 1 })
    );
    let picked = connector.pick_up(&build_id).await.unwrap();
    assert_eq!(picked["state"], "launching", "{picked}");
    let again = connector.pick_up(&build_id).await.unwrap_err();
    assert_eq!(again.code(), Some("build-picked-up"), "{again}");
    assert!(connector.builds().await.unwrap().is_empty());

    // It claims through /mcp with the build's bridge (LIFE-06), which acts as the machine's
    // owner with the machine's authorization and reaches nothing but this build.
    let bridge = picked["bridge"].as_str().unwrap().to_owned();
    assert!(bridge.starts_with("chopin_build_"), "{picked}");
    let machine_mcp = connect(&format!("http://{}/mcp", s.host), &bridge).await;
    for (tool, args) in [
        ("list_documents", json!({ "repository": "octo/plans" })),
        (
            "start_implementation",
            json!({"documentId": s.doc, "planRevision": plan_revision, "graphVersion": 2,
                   "graphRevision": 1, "repository": "octo/plans", "branch": "main",
                   "commit": "a".repeat(40)}),
        ),
    ] {
        let (code, body) = refusal(call(&machine_mcp, tool, args).await);
        assert_eq!(code, "bridge-scope", "{tool}: {body}");
    }
    let started = ok(call(
        &machine_mcp,
        "start_implementation",
        json!({"documentId": s.doc, "planRevision": plan_revision, "graphVersion": 1,
               "graphRevision": 1, "repository": "octo/plans", "branch": "main",
               "commit": "a".repeat(40)}),
    )
    .await);
    let run_id = started["run"]["runId"].as_str().unwrap().to_owned();
    let shown = snapshot(&s).await;
    assert_eq!(
        (&shown["builds"][0]["state"], &shown["builds"][0]["runId"]),
        (&json!("claimed"), &json!(run_id)),
        "{shown}"
    );
    assert_eq!(shown["lock"]["runId"], run_id, "{shown}");
    let failed = connector
        .build_failed(&build_id, "too late")
        .await
        .unwrap_err();
    assert_eq!(failed.code(), Some("build-claimed"), "{failed}");
    // The bridge reports on its run, and on no other.
    let started_task = ok(call(
        &machine_mcp,
        "start_task",
        json!({ "documentId": s.doc, "runId": run_id, "idempotencyKey": "k1", "taskId": "a" }),
    )
    .await);
    assert_eq!(started_task["run"]["runId"], run_id, "{started_task}");
    let (code, body) = refusal(
        call(
            &machine_mcp,
            "start_task",
            json!({ "documentId": s.doc, "runId": "another", "idempotencyKey": "k2", "taskId": "a" }),
        )
        .await,
    );
    assert_eq!(code, "bridge-scope", "{body}");
    // The machine's own token still reads as its owner would.
    let owner_mcp = connect(&format!("http://{}/mcp", s.host), &token).await;
    ok(call(
        &owner_mcp,
        "list_documents",
        json!({ "repository": "octo/plans" }),
    )
    .await);
}

#[tokio::test]
async fn life_48_life_64_a_build_its_machine_could_not_start_fails_and_frees_the_plan() {
    let s = support::served().await;
    drafted(&s).await;
    let (connector, _) = connector(&s).await;
    // A machine the presser may not use: refused, nothing approved.
    let (status, body) = press(
        &s,
        json!({ "machineId": "00000000-0000-0000-0000-000000000404" }),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "machine-not-found");
    assert_eq!(snapshot(&s).await["graph"]["state"], "draft");

    // With no machine named, mona's favourite is the one.
    let (status, body) = api(
        &s,
        Method::PUT,
        "/api/machines/favourite",
        Some(json!({ "machineId": connector.machine_id() })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, pressed) = press(&s, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{pressed}");
    assert_eq!(pressed["build"]["machineId"], connector.machine_id());
    let build_id = pressed["build"]["buildId"].as_str().unwrap().to_owned();
    connector.pick_up(&build_id).await.unwrap();
    let failed = connector
        .build_failed(&build_id, "no checkout of octo/plans on this machine")
        .await
        .unwrap();
    assert_eq!(
        (&failed["state"], &failed["reason"]),
        (
            &json!("failed"),
            &json!("no checkout of octo/plans on this machine")
        )
    );
    let shown = snapshot(&s).await;
    assert_eq!(
        shown["lock"],
        Value::Null,
        "a failed build freezes nothing: {shown}"
    );
    assert_eq!(shown["builds"][0]["state"], "failed");
    // Picked up once, it is never handed out again, failed or not.
    let again = connector.pick_up(&build_id).await.unwrap_err();
    assert_eq!(again.code(), Some("build-picked-up"), "{again}");

    // A person retries it explicitly from Build: a new build of the approved version.
    let retry = format!("/api/channels/{}/implementation/retry", s.doc);
    let (status, retried) = api(&s, Method::POST, &retry, None).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    let new_id = retried["build"]["buildId"].as_str().unwrap().to_owned();
    assert_ne!(new_id, build_id);
    assert_eq!(
        (
            &retried["build"]["state"],
            &retried["build"]["graphVersion"]
        ),
        (&json!("queued"), &json!(1))
    );
    assert_eq!(
        snapshot(&s).await["lock"]["buildId"],
        new_id,
        "frozen again"
    );
    let (status, body) = api(&s, Method::POST, &retry, None).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("build-pending")),
        "{body}"
    );
    let queued = connector.builds().await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0]["buildId"], new_id);
}

#[tokio::test]
async fn life_05_a_press_with_no_machine_only_approves() {
    let s = support::served().await;
    drafted(&s).await;
    let (status, pressed) = press(&s, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{pressed}");
    assert_eq!(
        (&pressed["state"], &pressed["build"]),
        (&json!("approved"), &Value::Null)
    );
    assert_eq!(snapshot(&s).await["builds"], json!([]));
    // Nothing to retry: a retry names a machine or has a favourite.
    let (status, body) = api(
        &s,
        Method::POST,
        &format!("/api/channels/{}/implementation/retry", s.doc),
        None,
    )
    .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("no-machine")),
        "{body}"
    );
}

#[tokio::test]
async fn life_36_life_64_a_press_while_a_build_is_pending_is_refused() {
    let s = support::served().await;
    let plan_revision = drafted(&s).await;
    let (connector, _) = connector(&s).await;
    let machine = connector.machine_id().to_owned();
    let (status, body) = press(&s, json!({ "machineId": machine })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A draft made meanwhile (the tool refuses one; storage here) cannot be pressed: approving
    // it would leave the pending build nothing to claim.
    s.store
        .change_graph(
            s.doc,
            &GraphChange::Edit {
                base: Some((1, 1)),
                plan_revision,
                definition: r#"{"tasks":[{"id":"b","title":"Do b"}]}"#.into(),
            },
            2,
        )
        .await
        .unwrap()
        .unwrap();
    for extra in [
        json!({ "graphVersion": 2, "machineId": machine }),
        json!({ "graphVersion": 2 }),
    ] {
        let (status, body) = press(&s, extra).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::CONFLICT, &json!("build-pending")),
            "{body}"
        );
    }
}

/// mona's browser press of Build on "N changes to build" (LIFE-12), with `body`.
async fn rebuild(s: &Served, body: Option<Value>) -> (StatusCode, Value) {
    api(
        s,
        Method::POST,
        &format!("/api/channels/{}/implementation/rebuild", s.doc),
        body,
    )
    .await
}

/// The document's source and plan revision, read by mona through `/mcp`.
async fn plan(mcp: &chopin_fixtures::mcp::Client, s: &Served) -> (String, i64) {
    let read = ok(call(mcp, "read_document", json!({ "document": s.doc })).await);
    (
        read["source"].as_str().unwrap().to_owned(),
        read["revision"].as_i64().unwrap(),
    )
}

/// mona's update of the whole plan to `source` through `/mcp`.
async fn write_plan(mcp: &chopin_fixtures::mcp::Client, s: &Served, source: &str, key: &str) {
    let (_, revision) = plan(mcp, s).await;
    ok(call(
        mcp,
        "update_document",
        json!({ "document": s.doc, "planRevision": revision, "source": source, "idempotencyKey": key }),
    )
    .await);
}

#[tokio::test]
async fn life_11_life_10_life_12_life_13_life_14_life_81_life_84_life_85_a_delivered_build_counts_the_changes_since_and_a_pressed_rebuild_lands_through_its_bridge(
) {
    let s = support::served().await;
    let plan_revision = drafted(&s).await;
    let (connector, _) = connector(&s).await;
    let machine = connector.machine_id().to_owned();
    let mona = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let (built_source, _) = plan(&mona, &s).await;

    // A first build, delivered: claimed through its bridge, its one task done and verified.
    let (build_id, run_id, build_bridge) = deliver(&s, &connector, plan_revision).await;
    let pr = PR;
    // LIFE-11: the delivery recorded what it built; LIFE-10: nothing changed since.
    let shown = snapshot(&s).await;
    assert_eq!(
        (&shown["built"]["buildId"], &shown["built"]["changes"]),
        (&json!(build_id), &json!(0)),
        "{shown}"
    );
    let (status, body) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("no-changes")),
        "{body}"
    );

    // A paragraph added: one change to build.
    let edited = format!("{}\n\nA new paragraph.\n", built_source.trim_end());
    write_plan(&mona, &s, &edited, "u1").await;
    assert_eq!(snapshot(&s).await["built"]["changes"], 1);
    // LIFE-13: refused while a Decision is unsettled.
    let undecided =
        format!("{edited}\n```decision\nid: port\nstate: open\nquestion: Which port?\n```\n");
    write_plan(&mona, &s, &undecided, "u2").await;
    let (status, body) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("decisions-open")),
        "{body}"
    );
    write_plan(&mona, &s, &edited, "u3").await;

    // LIFE-12: the press queues one rebuild, persisted before the answer.
    let (status, queued) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(status, StatusCode::OK, "{queued}");
    assert_eq!(
        (
            &queued["build"]["kind"],
            &queued["build"]["state"],
            &queued["changes"]
        ),
        (&json!("rebuild"), &json!("queued"), &json!(1)),
        "{queued}"
    );
    let rebuild_id = queued["build"]["buildId"].as_str().unwrap().to_owned();
    let stored = s
        .store
        .build(rebuild_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.change.unwrap().after, edited);
    let (status, body) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("build-pending")),
        "one at a time: {body}"
    );
    assert_eq!(
        snapshot(&s).await["lock"],
        Value::Null,
        "a rebuild freezes nothing"
    );

    // The connector picks it up like a build; it claims nothing.
    let listed = connector.builds().await.unwrap();
    assert_eq!(
        (
            &listed[0]["buildId"],
            &listed[0]["kind"],
            &listed[0]["claim"]
        ),
        (&json!(rebuild_id), &json!("rebuild"), &Value::Null),
        "{listed:?}"
    );
    let picked = connector.pick_up(&rebuild_id).await.unwrap();
    let bridge = connect(
        &format!("http://{}/mcp", s.host),
        picked["bridge"].as_str().unwrap(),
    )
    .await;

    // LIFE-84: the rebuild's bridge reaches read_rebuild and report_rebuild only; a build's
    // bridge and a plain bearer reach neither.
    let named = json!({ "documentId": s.doc, "rebuildId": rebuild_id });
    for (client, tool, args) in [
        (
            &bridge,
            "start_task",
            json!({ "documentId": s.doc, "runId": run_id, "idempotencyKey": "x", "taskId": "a" }),
        ),
        (
            &bridge,
            "read_rebuild",
            json!({ "documentId": s.doc, "rebuildId": build_id }),
        ),
        (&build_bridge, "read_rebuild", named.clone()),
        (&mona, "read_rebuild", named.clone()),
    ] {
        let (code, body) = refusal(call(client, tool, args).await);
        assert_eq!(code, "bridge-scope", "{tool}: {body}");
    }
    // LIFE-81: the change as data, with the pull requests built so far.
    let read = ok(call(&bridge, "read_rebuild", named.clone()).await);
    assert_eq!(
        (
            &read["change"]["before"]["source"],
            &read["change"]["after"]["source"],
            &read["change"]["changedBlocks"]
        ),
        (&json!(built_source), &json!(edited), &json!(1)),
        "{read}"
    );
    assert_eq!(
        read["task"],
        chopin_server::rebuilds::REBUILD_TASK,
        "{read}"
    );
    assert_eq!(read["pullRequests"][0]["url"], pr, "{read}");

    // LIFE-14: the report lands the tasks as an approved, completed version.
    let report = json!({
        "documentId": s.doc, "rebuildId": rebuild_id, "branch": "main", "commit": "b".repeat(40),
        "tasks": [{ "title": "Add the new paragraph's work", "summary": "Pushed onto #7.",
                    "pullRequest": { "url": pr, "state": "open" } }],
    });
    let landed = ok(call(&bridge, "report_rebuild", report.clone()).await);
    assert_eq!(
        (
            &landed["rebuild"]["state"],
            &landed["graph"]["graphVersion"],
            &landed["graph"]["state"]
        ),
        (&json!("landed"), &json!(2), &json!("approved")),
        "{landed}"
    );
    // LIFE-85: repeated after landing, the same success.
    let mut again = report.clone();
    again["commit"] = json!("c".repeat(40));
    assert_eq!(ok(call(&bridge, "report_rebuild", again).await), landed);
    let shown = snapshot(&s).await;
    assert_eq!(
        (&shown["built"]["buildId"], &shown["built"]["changes"]),
        (&json!(rebuild_id), &json!(0)),
        "the landed rebuild's source is the built one now: {shown}"
    );
    let last_run = shown["runs"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last_run["graphVersion"], &last_run["state"]),
        (&json!(2), &json!("verified")),
        "{last_run}"
    );
    // Landed, its version is never claimed.
    let (code, body) = refusal(
        call(
            &mona,
            "start_implementation",
            json!({"documentId": s.doc, "planRevision": landed["graph"]["planRevision"],
                   "graphVersion": 2, "graphRevision": 1, "repository": "octo/plans",
                   "branch": "main", "commit": "a".repeat(40)}),
        )
        .await,
    );
    assert_eq!(code, "already-verified", "{body}");
}

/// The Build view's snapshot as the browser session `cookie` reads it.
async fn snapshot_as(s: &Served, cookie: &str) -> Value {
    let request = http::Request::get(format!(
        "http://{}/api/channels/{}/implementation",
        s.host, s.doc
    ))
    .header(http::header::COOKIE, cookie)
    .body(Bytes::new())
    .unwrap();
    let answer = http_client::send(&TcpConnector, request).await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    serde_json::from_slice(&answer.body).unwrap()
}

#[tokio::test]
async fn life_83_only_the_builders_snapshot_names_the_machine_the_checkout_and_whether_it_is_online(
) {
    let s = support::served().await;
    drafted(&s).await;
    let (connector, _) = connector(&s).await;
    let machine = connector.machine_id().to_owned();
    let (status, pressed) = press(
        &s,
        json!({ "machineId": machine, "checkout": "~/src/plans" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pressed}");
    let mine = &snapshot(&s).await["builds"][0];
    assert_eq!(
        (
            &mine["machineId"],
            &mine["checkout"],
            &mine["machineOnline"]
        ),
        (&json!(machine), &json!("~/src/plans"), &json!(false)),
        "not polled yet: {mine}"
    );
    connector.builds().await.unwrap();
    assert_eq!(snapshot(&s).await["builds"][0]["machineOnline"], true);

    let lisa = s
        .sign_in("lisa", 77, chopin_fixtures::github::Permission::Write)
        .await;
    let theirs = snapshot_as(&s, &lisa).await["builds"][0].clone();
    assert_eq!(
        (&theirs["requestedBy"], &theirs["state"]),
        (&json!("mona"), &json!("queued")),
        "{theirs}"
    );
    for hidden in ["machineId", "checkout", "machineOnline"] {
        assert!(theirs.get(hidden).is_none(), "{hidden}: {theirs}");
    }
}

/// The pull request the delivered build's one task reported.
const PR: &str = "https://github.com/octo/plans/pull/7";

/// mona's Build plan press on `connector`'s machine, delivered: picked up, claimed through its
/// bridge, its one task done with [`PR`] and verified. The build's id, its run's and a client on
/// its bridge.
async fn deliver(
    s: &Served,
    connector: &Connector<TcpDial>,
    plan_revision: i64,
) -> (String, String, chopin_fixtures::mcp::Client) {
    let machine = connector.machine_id().to_owned();
    let (status, pressed) = press(s, json!({ "machineId": machine })).await;
    assert_eq!(status, StatusCode::OK, "{pressed}");
    let build_id = pressed["build"]["buildId"].as_str().unwrap().to_owned();
    let picked = connector.pick_up(&build_id).await.unwrap();
    let build_bridge = connect(
        &format!("http://{}/mcp", s.host),
        picked["bridge"].as_str().unwrap(),
    )
    .await;
    let started = ok(call(
        &build_bridge,
        "start_implementation",
        json!({"documentId": s.doc, "planRevision": plan_revision, "graphVersion": 1,
               "graphRevision": 1, "repository": "octo/plans", "branch": "main",
               "commit": "a".repeat(40)}),
    )
    .await);
    let run_id = started["run"]["runId"].as_str().unwrap().to_owned();
    let pr = PR;
    for (n, (tool, more)) in [
        ("start_task", json!({ "taskId": "a" })),
        (
            "report_pr",
            json!({ "taskId": "a", "url": pr, "state": "open" }),
        ),
        (
            "complete_task",
            json!({ "taskId": "a", "summary": "Did a." }),
        ),
        (
            "report_verification",
            json!({ "tasks": [{ "taskId": "a", "passed": true, "evidence": "Checked." }] }),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut args =
            json!({ "documentId": s.doc, "runId": run_id, "idempotencyKey": format!("k{n}") });
        for (k, v) in more.as_object().unwrap() {
            args[k] = v.clone();
        }
        ok(call(&build_bridge, tool, args).await);
    }

    (build_id, run_id, build_bridge)
}

#[tokio::test]
async fn life_17_life_12_a_failed_rebuild_is_pressed_again_on_the_same_route() {
    let s = support::served().await;
    let plan_revision = drafted(&s).await;
    let (connector, _) = connector(&s).await;
    let machine = connector.machine_id().to_owned();
    let mona = connect(&format!("http://{}/mcp", s.host), &s.mona).await;
    let (built, _) = plan(&mona, &s).await;
    deliver(&s, &connector, plan_revision).await;
    write_plan(
        &mona,
        &s,
        &format!("{}\n\nOne more step.\n", built.trim_end()),
        "u1",
    )
    .await;

    let (status, first) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let first_id = first["build"]["buildId"].as_str().unwrap().to_owned();
    connector.pick_up(&first_id).await.unwrap();
    let failed = connector
        .build_failed(&first_id, "the agent would not start")
        .await
        .unwrap();
    assert_eq!(failed["state"], "failed", "{failed}");
    let shown = snapshot(&s).await;
    assert_eq!(shown["built"]["changes"], 1, "still to build: {shown}");

    // Retry is the same press, on the same route: a new rebuild of the same edits.
    let (status, again) = rebuild(&s, None).await;
    assert_eq!(
        (status, &again["error"]),
        (StatusCode::CONFLICT, &json!("no-machine")),
        "no machine named and no favourite: {again}"
    );
    let (status, again) = rebuild(&s, Some(json!({ "machineId": machine }))).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_ne!(again["build"]["buildId"], json!(first_id));
    assert_eq!(
        (&again["build"]["kind"], &again["build"]["state"]),
        (&json!("rebuild"), &json!("queued"))
    );
    let listed = connector.builds().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["buildId"], again["build"]["buildId"]);
}
