//! Paired machines, on the whole stack over real sockets: a machine paired with its own GitHub
//! authorization, chosen for a document, asked for a document-scoped Planner credential, and its
//! backend attaching with it (AC-20, AC-24), owning through a delegated login no browser holds
//! (AC-21), shared with a teammate (AC-22), revoked or refused by GitHub (AC-23), and moved off a
//! document (AO-12).

mod support;

use std::time::Duration;

use axum::body::Bytes;
use chopin_fixtures::agent::{connect, AgentClient, Upgrade};
use chopin_fixtures::github::Permission;
use chopin_protocol::agent::ServerMessage;
use chopin_server::runtime::connector::{self, TcpConnector};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::Served;
use uuid::Uuid;

enum As<'a> {
    Token(&'a str),
    Cookie(&'a str),
}

async fn api(
    s: &Served,
    method: Method,
    path: &str,
    who: As<'_>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", s.host))
        .header(http::header::ORIGIN, format!("http://{}", s.host));
    request = match who {
        As::Token(t) => request.header(http::header::AUTHORIZATION, format!("Bearer {t}")),
        As::Cookie(c) => request.header(http::header::COOKIE, c),
    };
    let bytes = match body {
        Some(b) => {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
            Bytes::from(serde_json::to_vec(&b).unwrap())
        }
        None => Bytes::new(),
    };
    let answer = connector::send(&TcpConnector, request.body(bytes).unwrap())
        .await
        .unwrap();
    let value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    (answer.status, value)
}

/// mona pairs a machine called `name` with a token of its own; its id and that token.
async fn pair(s: &Served, name: &str) -> (Uuid, String) {
    let token = s.github.issue_token("mona");
    let (status, body) = api(
        s,
        Method::POST,
        "/api/connector/machines",
        As::Token(&token),
        Some(json!({ "name": name, "release": "0.0.23" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["machine"]["owner"], "mona");
    assert_eq!(body["machine"]["name"], name);
    (
        body["machine"]["id"].as_str().unwrap().parse().unwrap(),
        token,
    )
}

async fn choose(s: &Served, cookie: &str, doc: Uuid, machine: Option<Uuid>) -> (StatusCode, Value) {
    api(
        s,
        Method::PUT,
        &format!("/api/channels/{doc}/machine"),
        As::Cookie(cookie),
        Some(json!({ "machineId": machine })),
    )
    .await
}

async fn credential(s: &Served, token: &str, machine: Uuid, doc: Uuid) -> (StatusCode, Value) {
    api(
        s,
        Method::POST,
        "/api/connector/planner",
        As::Token(token),
        Some(json!({ "machineId": machine, "documentId": doc })),
    )
    .await
}

/// A backend attaching to `doc` with `bearer`: the client and the server's first answer.
async fn attach_with(
    s: &Served,
    bearer: &str,
    doc: Uuid,
) -> Result<(AgentClient, ServerMessage), String> {
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(s.host.clone(), Some(bearer)))
        .await
        .map_err(|e| format!("{e:?}"))?;
    let answer = client
        .attach(&doc.to_string(), &["resumable-sessions"])
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok((client, answer))
}

/// A machine paired, chosen for the document by mona and asked for a credential: (machine,
/// its token, the credential).
async fn machine_for_doc(s: &Served, name: &str) -> (Uuid, String, String) {
    let (machine, token) = pair(s, name).await;
    let (status, body) = choose(s, &s.mona_cookie, s.doc, Some(machine)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["machine"]["id"], machine.to_string());
    let (status, body) = credential(s, &token, machine, s.doc).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The link's path names the document, for a balancer in front of several processes.
    assert_eq!(
        body["agentPath"],
        format!("/api/v1/agent?document={}", s.doc)
    );
    (
        machine,
        token,
        body["credential"].as_str().unwrap().to_owned(),
    )
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn ac_20_ac_24_a_paired_machines_backend_attaches_with_its_document_scoped_credential() {
    let s = support::served().await;
    let (machine, _token, cred) = machine_for_doc(&s, "studio").await;
    assert!(cred.starts_with("chopin_planner_"), "{cred}");
    // Stored by digest only (AC-24).
    let stored = s
        .store
        .planner_credential(&sha256_hex(&cred))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.machine_id, stored.document_id), (machine, s.doc));
    assert_eq!(s.store.planner_credential(&cred).await.unwrap(), None);

    let (mut client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    let holder = s
        .state
        .planners
        .holder(s.doc)
        .expect("the machine holds the Planner");
    assert_eq!(holder.login, "mona", "it owns as its owner's account");
    // Its delegated login is not any browser login of mona's.
    let browser_login = s
        .mona_cookie
        .strip_prefix("chopin_session=")
        .unwrap()
        .split('.')
        .next()
        .unwrap();
    assert_ne!(holder.browser_login_id.to_string(), browser_login);
    client.detach().await.unwrap();

    // The credential is for this document only.
    let other = chopin_server::store::NewDocument {
        id: Uuid::new_v4(),
        repo_owner: "octo".into(),
        repo_name: "plans".into(),
        slug: "other".into(),
        title: "Other".into(),
        ..Default::default()
    };
    s.store.create_document(&other).await.unwrap();
    let (_, answer) = attach_with(&s, &cred, other.id).await.unwrap();
    match answer {
        ServerMessage::Refused(r) => assert!(r.message.contains("for document"), "{r:?}"),
        other => panic!("a credential for another document: expected refused, got {other:?}"),
    }
    // An unknown credential is refused before the upgrade.
    let refused = attach_with(&s, "chopin_planner_0000", s.doc).await;
    assert!(refused.is_err(), "an unknown credential must not upgrade");
}

#[tokio::test]
async fn ac_21_signing_the_browser_out_does_not_release_a_machines_planner() {
    let s = support::served().await;
    let (_machine, _token, cred) = machine_for_doc(&s, "studio").await;
    let (_client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    let (status, _) = api(
        &s,
        Method::POST,
        "/auth/logout",
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert!(status.is_success() || status.is_redirection(), "{status}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.state.planners.holder(s.doc).map(|h| h.login),
        Some("mona".to_owned()),
        "the machine still holds the document after its owner's browser signed out"
    );
}

#[tokio::test]
async fn ac_23_revoking_the_machine_closes_its_link_access_revoked_and_its_credential_stops_working(
) {
    let s = support::served().await;
    let (machine, _token, cred) = machine_for_doc(&s, "studio").await;
    let (mut client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    let (status, body) = api(
        &s,
        Method::DELETE,
        &format!("/api/machines/{machine}"),
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (code, reason) = client.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    assert!(
        s.state.planners.holder(s.doc).is_none(),
        "the document is free"
    );
    assert!(
        attach_with(&s, &cred, s.doc).await.is_err(),
        "its credential is gone"
    );
    let (_, listed) = api(
        &s,
        Method::GET,
        "/api/machines",
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(listed["machines"], json!([]));
}

#[tokio::test]
async fn ac_23_github_refusing_the_machines_authorization_closes_its_link_access_revoked() {
    let s = support::served_with(
        std::sync::Arc::new(chopin_server::store::MemoryStore::new()),
        |c| {
            c.access_recheck_ms = 200;
        },
    )
    .await;
    let (_machine, token, cred) = machine_for_doc(&s, "studio").await;
    let (mut client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    s.github.expire_token(&token);
    let (code, reason) = tokio::time::timeout(Duration::from_secs(10), client.expect_close())
        .await
        .expect("the recheck closes the link")
        .unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    // Attaching again with the same credential: GitHub still refuses the machine.
    match attach_with(&s, &cred, s.doc).await {
        Err(e) => assert!(e.contains("403"), "{e}"),
        Ok((_, answer)) => panic!("expected a refusal before the upgrade, got {answer:?}"),
    }
}

#[tokio::test]
async fn ac_22_a_machine_shared_with_a_teammate_runs_the_teammates_document_as_its_owner() {
    let s = support::served().await;
    let hubot = s.sign_in("hubot", 1002, Permission::Write).await;
    let (machine, token) = pair(&s, "studio").await;
    // Not shared yet: hubot cannot choose it.
    let (status, body) = choose(&s, &hubot, s.doc, Some(machine)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "machine-not-found");
    // Only the owner shares it.
    let (status, body) = api(
        &s,
        Method::PUT,
        &format!("/api/machines/{machine}/shares/mona"),
        As::Cookie(&hubot),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = api(
        &s,
        Method::PUT,
        &format!("/api/machines/{machine}/shares/hubot"),
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, listed) = api(&s, Method::GET, "/api/machines", As::Cookie(&hubot), None).await;
    assert_eq!(listed["machines"][0]["owner"], "mona");
    assert_eq!(listed["machines"][0]["own"], false);
    let (status, body) = choose(&s, &hubot, s.doc, Some(machine)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["chosenBy"], "hubot");
    let (status, body) = credential(&s, &token, machine, s.doc).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let cred = body["credential"].as_str().unwrap().to_owned();
    let (_client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    assert_eq!(s.state.planners.holder(s.doc).unwrap().login, "mona");

    // Taking the share back moves the document off the machine: its link ends.
    let (status, body) = api(
        &s,
        Method::DELETE,
        &format!("/api/machines/{machine}/shares/hubot"),
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(
        (status, &body["changed"]),
        (StatusCode::OK, &json!(true)),
        "{body}"
    );
    let (_, chosen) = api(
        &s,
        Method::GET,
        &format!("/api/channels/{}/machine", s.doc),
        As::Cookie(&hubot),
        None,
    )
    .await;
    assert_eq!(chosen["machine"], Value::Null);
}

#[tokio::test]
async fn ao_12_pres_16_choosing_another_machine_ends_the_link_of_the_machine_left_and_its_credentials(
) {
    let s = support::served().await;
    let (first, first_token, cred) = machine_for_doc(&s, "studio").await;
    let (mut client, answer) = attach_with(&s, &cred, s.doc).await.unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    let (second, _) = pair(&s, "laptop").await;
    let (status, body) = choose(&s, &s.mona_cookie, s.doc, Some(second)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (code, reason) = client.expect_close().await.unwrap();
    assert_eq!((code, reason.as_str()), (4410, "planner-released"));
    assert!(
        attach_with(&s, &cred, s.doc).await.is_err(),
        "the machine left lost its credentials"
    );
    // The machine left is no longer asked for the document.
    let (status, body) = credential(&s, &first_token, first, s.doc).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "machine-not-asked");
}

#[tokio::test]
async fn connector_routes_speak_only_for_their_own_machine_with_its_token() {
    let s = support::served().await;
    let (machine, token) = pair(&s, "studio").await;
    // A browser session is not the machine's authorization.
    let (status, body) = api(
        &s,
        Method::GET,
        &format!("/api/connector/machines/{machine}/documents"),
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("token-required")),
        "{body}"
    );
    // Another account's token is not its owner's.
    s.github.add_user("hubot", 1002);
    let hubot = s.github.issue_token("hubot");
    s.github.grant("octo", "plans", "hubot", Permission::Write);
    let (status, body) = api(
        &s,
        Method::GET,
        &format!("/api/connector/machines/{machine}/documents"),
        As::Token(&hubot),
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("not-machine-owner")),
        "{body}"
    );
    // Not chosen for the document yet: no credential.
    let (status, body) = credential(&s, &token, machine, s.doc).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("machine-not-asked")),
        "{body}"
    );
    // Chosen: the document is in its list.
    choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    let (status, body) = api(
        &s,
        Method::GET,
        &format!("/api/connector/machines/{machine}/documents"),
        As::Token(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["documents"][0]["documentId"], s.doc.to_string());
    assert_eq!(body["documents"][0]["path"], support::DOC_URL);
    // A reader cannot choose the machine for a document.
    let reader = s.sign_in("octocat", 1003, Permission::Read).await;
    let (status, _) = choose(&s, &reader, s.doc, None).await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "{status}"
    );
    // A machine needs a name.
    let (status, body) = api(
        &s,
        Method::POST,
        "/api/connector/machines",
        As::Token(&token),
        Some(json!({ "name": "  " })),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid-request")),
        "{body}"
    );
}

/// The next `session:planner` the room hears.
async fn planner_word(room: &mut chopin_fixtures::browser::BrowserSocket) -> Value {
    let frame = tokio::time::timeout(Duration::from_secs(5), room.next_of_type("session:planner"))
        .await
        .expect("a session:planner within 5 s")
        .unwrap();
    frame["planner"].clone()
}

async fn pair_with_release(s: &Served, name: &str, release: &str) -> (Uuid, String) {
    let token = s.github.issue_token("mona");
    let (status, body) = api(
        s,
        Method::POST,
        "/api/connector/machines",
        As::Token(&token),
        Some(json!({ "name": name, "release": release })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (
        body["machine"]["id"].as_str().unwrap().parse().unwrap(),
        token,
    )
}

async fn report(
    s: &Served,
    token: &str,
    machine: Uuid,
    doc: Uuid,
    body: Value,
) -> (StatusCode, Value) {
    let mut body = body;
    body["machineId"] = json!(machine);
    body["documentId"] = json!(doc);
    api(
        s,
        Method::POST,
        "/api/connector/planner/failure",
        As::Token(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn pres_04_pres_12_a_move_to_a_machine_is_starting_naming_the_machine_until_its_backend_attaches(
) {
    let s = support::served().await;
    let mut room = s.room().await;
    let (machine, token) = pair(&s, "studio").await;
    choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    let word = planner_word(&mut room).await;
    assert_eq!(
        word,
        json!({ "state": "starting", "login": "mona", "machine": machine.to_string() })
    );
    let (_, issued) = credential(&s, &token, machine, s.doc).await;
    let (_client, answer) = attach_with(&s, issued["credential"].as_str().unwrap(), s.doc)
        .await
        .unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    let word = planner_word(&mut room).await;
    assert_eq!(
        word,
        json!({ "state": "attached", "login": "mona" }),
        "no machine once attached"
    );
    // Moving it to no machine: the machine's link ends and nothing is waited on.
    choose(&s, &s.mona_cookie, s.doc, None).await;
    let word = planner_word(&mut room).await;
    assert_eq!(word["state"], "none", "{word}");
}

#[tokio::test]
async fn pres_13_pres_14_pres_15_pres_16_a_reported_failure_is_told_from_the_second_launch_cleaned_and_forgotten_on_attach(
) {
    let s = support::served().await;
    let mut room = s.room().await;
    let (machine, token) = pair(&s, "studio").await;
    choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    assert_eq!(planner_word(&mut room).await["state"], "starting");
    let line = format!(
        "\u{1b}[31mfatal:\u{1b}[0m /home/mona/src/plans: GITHUB_TOKEN={token} {}",
        "x".repeat(400)
    );
    let (status, body) = report(
        &s,
        &token,
        machine,
        s.doc,
        json!({ "attempts": 1, "ended": "exit code 1", "stderr": line }),
    )
    .await;
    assert_eq!(
        (status, &body["failure"]),
        (StatusCode::OK, &Value::Null),
        "the first failure is not told: {body}"
    );
    let before =
        chopin_server::runtime::clock::Clock::now_ms(&chopin_server::runtime::clock::SystemClock);
    let (status, body) = report(
        &s,
        &token,
        machine,
        s.doc,
        json!({ "attempts": 2, "ended": "exit code 1", "stderr": line }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let word = planner_word(&mut room).await;
    assert_eq!(word["state"], "starting");
    let failure = &word["failure"];
    assert_eq!(failure["attempts"], 2);
    let reason = failure["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("fatal: ~/src/plans: GITHUB_TOKEN=[redacted] xxx"),
        "{reason}"
    );
    assert!(
        !reason.contains(&token) && !reason.contains('\u{1b}') && !reason.contains("/home/mona"),
        "{reason}"
    );
    assert_eq!(reason.chars().count(), 300);
    assert!(
        failure["at"].as_i64().unwrap() >= before,
        "the server's time: {failure}"
    );
    // A report for a document that did not ask the machine does not count.
    let other = chopin_server::store::NewDocument {
        id: Uuid::new_v4(),
        repo_owner: "octo".into(),
        repo_name: "plans".into(),
        slug: "other".into(),
        title: "Other".into(),
        ..Default::default()
    };
    s.store.create_document(&other).await.unwrap();
    let (status, body) = report(
        &s,
        &token,
        machine,
        other.id,
        json!({ "attempts": 2, "stderr": "x" }),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("machine-not-asked")),
        "{body}"
    );
    // The backend attaches: forgotten.
    let (_, issued) = credential(&s, &token, machine, s.doc).await;
    let (mut client, answer) = attach_with(&s, issued["credential"].as_str().unwrap(), s.doc)
        .await
        .unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    assert_eq!(
        planner_word(&mut room).await,
        json!({ "state": "attached", "login": "mona" })
    );
    client.detach().await.unwrap();
    let word = planner_word(&mut room).await;
    assert_eq!(word["state"], "detached", "{word}");
    assert_eq!(
        word.get("failure"),
        None,
        "nothing reported before the attach is told again"
    );
}

#[tokio::test]
async fn pres_16_pres_22_a_launch_that_stayed_up_forgets_what_was_reported() {
    let s = support::served().await;
    let mut room = s.room().await;
    let (machine, token) = pair(&s, "studio").await;
    choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    planner_word(&mut room).await;
    report(
        &s,
        &token,
        machine,
        s.doc,
        json!({ "attempts": 2, "stderr": "boom" }),
    )
    .await;
    assert_eq!(planner_word(&mut room).await["failure"]["reason"], "boom");
    let (status, body) = report(&s, &token, machine, s.doc, json!({ "stayedUp": true })).await;
    assert_eq!(
        (status, &body["failure"]),
        (StatusCode::OK, &Value::Null),
        "{body}"
    );
    let word = planner_word(&mut room).await;
    assert_eq!(
        (word["state"].as_str(), word.get("failure")),
        (Some("starting"), None),
        "{word}"
    );
}

#[tokio::test]
async fn pres_18_pres_19_an_old_connectors_third_credential_request_tells_the_launches_that_ended()
{
    let s = support::served().await;
    let mut room = s.room().await;
    let (machine, token) = pair_with_release(&s, "studio", "0.0.20").await;
    choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    assert_eq!(planner_word(&mut room).await["failure"], Value::Null);
    for _ in 0..3 {
        let (status, body) = credential(&s, &token, machine, s.doc).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let word = planner_word(&mut room).await;
    let failure = &word["failure"];
    assert_eq!(failure["attempts"], 2, "{word}");
    let reason = failure["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("It started and stopped again before it connected."),
        "{reason}"
    );
    assert!(
        reason.contains("0.0.20") && reason.contains("chopin update"),
        "{reason}"
    );
    // A credential request while attached is a renewal: nothing more is counted.
    let (_, issued) = credential(&s, &token, machine, s.doc).await;
    let (_client, answer) = attach_with(&s, issued["credential"].as_str().unwrap(), s.doc)
        .await
        .unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    // The fourth launch (its request made before the attach) is told first.
    assert_eq!(planner_word(&mut room).await["failure"]["attempts"], 3);
    assert_eq!(planner_word(&mut room).await["state"], "attached");
    credential(&s, &token, machine, s.doc).await;
    assert_eq!(s.state.planners.presence(s.doc).failure, None);
}

/// RULINGS PRES-09: away states carry `lastSeen` (server time), the holder's client's last frame.
#[tokio::test]
async fn pres_09_a_detached_planner_says_when_its_client_was_last_seen() {
    let s = support::served().await;
    let mut room = s.room().await;
    let mut client = s.attach(&[]).await;
    assert_eq!(planner_word(&mut room).await["state"], "attached");
    let before =
        chopin_server::runtime::clock::Clock::now_ms(&chopin_server::runtime::clock::SystemClock);
    client.detach().await.unwrap();
    let word = planner_word(&mut room).await;
    assert_eq!(word["state"], "detached", "{word}");
    let seen = word["lastSeen"]
        .as_i64()
        .unwrap_or_else(|| panic!("lastSeen: {word}"));
    let until = word["until"].as_i64().unwrap();
    assert!(seen >= before - 1_000 && seen <= until, "{word}");
    // Attached and none carry no lastSeen.
    assert_eq!(s.state.planners.presence(s.doc).last_seen, Some(seen));
}

async fn favourite(s: &Served, cookie: &str, machine: Option<Uuid>) {
    let (status, body) = api(
        s,
        Method::PUT,
        "/api/machines/favourite",
        As::Cookie(cookie),
        Some(json!({ "machineId": machine })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn chosen(s: &Served, cookie: &str) -> Value {
    let (status, body) = api(
        s,
        Method::GET,
        &format!("/api/channels/{}/machine", s.doc),
        As::Cookie(cookie),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn atm_37_a_writers_favourite_runs_a_document_nobody_chose_a_machine_for_when_they_open_it() {
    let s = support::served().await;
    let reader = s.sign_in("hubot", 1002, Permission::Read).await;
    let (machine, token) = pair(&s, "studio").await;
    let (status, body) = api(
        &s,
        Method::PUT,
        &format!("/api/machines/{machine}/shares/hubot"),
        As::Cookie(&s.mona_cookie),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A reader's favourite runs nothing, and a writer with no favourite chooses nothing.
    favourite(&s, &reader, Some(machine)).await;
    drop(s.room_as(s.doc, &reader).await);
    drop(s.room().await);
    assert_eq!(chosen(&s, &s.mona_cookie).await["machine"], Value::Null);
    let (status, body) = credential(&s, &token, machine, s.doc).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "machine-not-asked");

    // mona's favourite, when she opens the document: Default machine's choice, waited on
    // without naming the machine (not a person's move).
    favourite(&s, &s.mona_cookie, Some(machine)).await;
    let mut room = s.connect_room(s.doc, &s.mona_cookie).await;
    let word = planner_word(&mut room).await;
    assert_eq!(word, json!({ "state": "starting", "login": "mona" }));
    let now = chosen(&s, &s.mona_cookie).await;
    assert_eq!(now["machine"]["id"], machine.to_string(), "{now}");
    assert_eq!(
        (&now["chosenBy"], &now["byDefault"]),
        (&json!("mona"), &json!(true))
    );
    let (_, listed) = api(
        &s,
        Method::GET,
        &format!("/api/connector/machines/{machine}/documents"),
        As::Token(&token),
        None,
    )
    .await;
    assert_eq!(listed["documents"][0]["byDefault"], true, "{listed}");
    let (status, issued) = credential(&s, &token, machine, s.doc).await;
    assert_eq!(status, StatusCode::OK, "{issued}");
    let (_client, answer) = attach_with(&s, issued["credential"].as_str().unwrap(), s.doc)
        .await
        .unwrap();
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");

    // A person's choice stands over it, and no favourite replaces a person's choice.
    let (status, body) = choose(&s, &s.mona_cookie, s.doc, Some(machine)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["byDefault"], false);
    // Cleared, the document is on Default machine again: the next writer to open it with a
    // favourite chooses.
    choose(&s, &s.mona_cookie, s.doc, None).await;
    assert_eq!(chosen(&s, &s.mona_cookie).await["machine"], Value::Null);
    drop(s.room().await);
    assert_eq!(chosen(&s, &s.mona_cookie).await["byDefault"], true);
}

#[tokio::test]
async fn pres_23_an_inferred_failure_is_forgotten_on_a_move_and_a_machine_moved_back_to_is_waited_on_afresh(
) {
    let s = support::served().await;
    let mut room = s.room().await;
    let (old, old_token) = pair_with_release(&s, "old-box", "0.0.20").await;
    let (other, _) = pair_with_release(&s, "studio", "0.0.30").await;
    choose(&s, &s.mona_cookie, s.doc, Some(old)).await;
    assert_eq!(planner_word(&mut room).await["state"], "starting");
    for _ in 0..3 {
        credential(&s, &old_token, old, s.doc).await;
    }
    assert_eq!(planner_word(&mut room).await["failure"]["attempts"], 2);
    // Another machine: what was inferred of the first is forgotten.
    choose(&s, &s.mona_cookie, s.doc, Some(other)).await;
    let word = planner_word(&mut room).await;
    assert_eq!(
        (&word["machine"], &word["failure"]),
        (&json!(other.to_string()), &Value::Null),
        "{word}"
    );
    // Moved back, the old machine is waited on afresh: two more launches tell nothing, the
    // third (its first two ending) does.
    choose(&s, &s.mona_cookie, s.doc, Some(old)).await;
    let word = planner_word(&mut room).await;
    assert_eq!(
        (&word["machine"], &word["failure"]),
        (&json!(old.to_string()), &Value::Null),
        "{word}"
    );
    for _ in 0..2 {
        credential(&s, &old_token, old, s.doc).await;
    }
    assert_eq!(s.state.planners.presence(s.doc).failure, None);
    credential(&s, &old_token, old, s.doc).await;
    assert_eq!(planner_word(&mut room).await["failure"]["attempts"], 2);
}
