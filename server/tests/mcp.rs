//! `/mcp` through rmcp's own Streamable HTTP client over a real loopback socket: the document
//! tools, their refusals, and the HTTP checks before any MCP message (AC-12's "as hosted MCP
//! checks it").

mod support;

use std::sync::Arc;

use axum::body::Bytes;
use chopin_fixtures::github::Permission;
use chopin_fixtures::mcp::{call, connect, ok, refusal, text, Client, DOCUMENT_TOOLS};
use chopin_server::runtime::connector::{self, TcpConnector};
use chopin_server::store::instrumented::{Call, Hold, Hook, Instrumented};
use chopin_server::store::{MemoryStore, Store};
use serde_json::{json, Value};
use support::{served, served_with, Served, DOC_URL};

async fn client(s: &Served, token: &str) -> Client {
    connect(&format!("http://{}/mcp", s.host), token).await
}

/// hubot can read octo/plans (pull) but not push; eve can see nothing of it.
fn cast(s: &Served) -> (String, String) {
    s.github.add_user("hubot", 1002).add_user("eve", 1003);
    s.github.grant("octo", "plans", "hubot", Permission::Read);
    (s.github.issue_token("hubot"), s.github.issue_token("eve"))
}

#[tokio::test]
async fn mcp_lists_every_document_tool_with_a_schema_that_names_no_unknown_field() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let tools = mona.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, DOCUMENT_TOOLS);
    for tool in &tools {
        assert_eq!(
            tool.input_schema["additionalProperties"],
            json!(false),
            "{}",
            tool.name
        );
        assert!(tool.description.as_deref().is_some_and(|d| !d.is_empty()));
    }
}

#[tokio::test]
async fn mcp_creates_reads_and_updates_a_document() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let created = ok(call(
        &mona,
        "create_document",
        json!({"repository": "octo/plans", "title": "Harbour plan", "source": "# Harbour\n\nFirst draft.\n"}),
    )
    .await);
    assert_eq!(created["url"], "/documents/octo/plans/harbour-plan");
    assert_eq!(created["repository"], "octo/plans");
    let id = created["id"].as_str().unwrap().to_owned();

    let read = call(&mona, "read_document", json!({"document": id})).await;
    let page = text(&read);
    assert!(page.contains("First draft."), "{page}");
    let view = ok(read);
    assert_eq!(view["source"], "# Harbour\n\nFirst draft.\n");
    let revision = view["revision"].as_u64().unwrap();
    assert_eq!(
        view["document"]["url"],
        "/documents/octo/plans/harbour-plan"
    );

    let updated = ok(call(
        &mona,
        "update_document",
        json!({"document": "/documents/octo/plans/harbour-plan", "planRevision": revision,
               "source": "# Harbour\n\nSecond draft.\n", "idempotencyKey": "k-1"}),
    )
    .await);
    assert_eq!(updated["status"], "applied");
    assert_eq!(updated["planRevision"], revision + 1);
    let again = ok(call(&mona, "read_document", json!({"document": id})).await);
    assert_eq!(again["source"], "# Harbour\n\nSecond draft.\n");
    assert_eq!(again["revision"], revision + 1);

    // Anyone connected to the document sees the same text: the HTTP source route agrees.
    let open = s
        .state
        .open
        .open(uuid::Uuid::parse_str(&id).unwrap())
        .await
        .unwrap();
    assert_eq!(open.source().await, "# Harbour\n\nSecond draft.\n");
}

#[tokio::test]
async fn iso_40_mcp_update_from_an_old_revision_is_refused_stale_and_writes_nothing() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let first = ok(call(
        &mona,
        "update_document",
        json!({"document": DOC_URL, "planRevision": 0, "source": "One.\n", "idempotencyKey": "a"}),
    )
    .await);
    assert_eq!(first["planRevision"], 1);
    let (code, body) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0, "source": "Two.\n", "idempotencyKey": "b"}),
        )
        .await,
    );
    assert_eq!(code, "stale");
    assert_eq!(body["currentPlanRevision"], 1);
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["source"], "One.\n");
}

#[tokio::test]
async fn mcp_update_with_a_used_idempotency_key_answers_again_and_writes_once() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let update = json!({"document": DOC_URL, "planRevision": 0, "source": "Once.\n", "idempotencyKey": "same"});
    let first = ok(call(&mona, "update_document", update.clone()).await);
    // The same call again (a retry after a lost answer): the first answer, nothing written.
    let replay = ok(call(&mona, "update_document", update).await);
    assert_eq!(first, replay);
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["revision"], 1, "written once");
    // The same key for another change is refused.
    let (code, _) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 1, "source": "Other.\n", "idempotencyKey": "same"}),
        )
        .await,
    );
    assert_eq!(code, "idempotency-key-reused");
}

#[tokio::test]
async fn dia_07_mcp_update_document_refuses_an_invalid_decision_fence() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (code, body) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0,
                   "source": "Text.\n\n```decision\nid: quay\nstate: later\nquestion: Which?\n```\n",
                   "idempotencyKey": "d"}),
        )
        .await,
    );
    assert_eq!(code, "invalid");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown state `later`"),
        "{body}"
    );
    let (code, _) = refusal(
        call(
            &mona,
            "create_document",
            json!({"repository": "octo/plans", "title": "Bad", "source": "```decision\nid: x\n"}),
        )
        .await,
    );
    assert_eq!(code, "invalid");
    let listed = ok(call(&mona, "list_documents", json!({"repository": "octo/plans"})).await);
    assert_eq!(
        listed["documents"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
}

#[tokio::test]
async fn mcp_a_reader_reads_but_cannot_write_and_an_outsider_finds_nothing() {
    let s = served().await;
    let (hubot, eve) = cast(&s);
    let hubot = client(&s, &hubot).await;
    let view = ok(call(&hubot, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["document"]["id"], s.doc.to_string());
    for (tool, args) in [
        (
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0, "source": "x\n", "idempotencyKey": "h"}),
        ),
        (
            "rename_document",
            json!({"document": DOC_URL, "title": "Mine"}),
        ),
        ("archive_document", json!({"document": DOC_URL})),
        (
            "create_document",
            json!({"repository": "octo/plans", "title": "Mine"}),
        ),
    ] {
        let (code, _) = refusal(call(&hubot, tool, args).await);
        assert_eq!(code, "no-write-access", "{tool}");
    }

    // Someone who cannot read the repository gets "not found", by id, by URL and for a slug
    // that does not exist alike.
    let eve = client(&s, &eve).await;
    for document in [
        s.doc.to_string(),
        DOC_URL.to_owned(),
        "/documents/octo/plans/nothing".into(),
    ] {
        let (code, _) = refusal(call(&eve, "read_document", json!({"document": document})).await);
        assert_eq!(code, "document-not-found");
    }
    let (code, _) =
        refusal(call(&eve, "list_documents", json!({"repository": "octo/plans"})).await);
    assert_eq!(code, "document-not-found");
}

#[tokio::test]
async fn mcp_locators_are_an_id_or_a_url_absolute_only_at_this_server() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let here = format!("http://{}{DOC_URL}", s.host);
    let view = ok(call(&mona, "read_document", json!({"document": here})).await);
    assert_eq!(view["document"]["id"], s.doc.to_string());
    for elsewhere in [
        format!("https://evil.example{DOC_URL}"),
        "octo/plans/notes".to_owned(),
    ] {
        let (code, _) = refusal(call(&mona, "read_document", json!({"document": elsewhere})).await);
        assert_eq!(code, "invalid-locator");
    }
}

#[tokio::test]
async fn mcp_lists_renames_archives_and_restores() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let renamed = ok(call(
        &mona,
        "rename_document",
        json!({"document": DOC_URL, "title": "Field notes"}),
    )
    .await);
    assert_eq!(renamed["url"], "/documents/octo/plans/field-notes");
    assert_eq!(renamed["earlierUrls"], json!([DOC_URL]));
    // The former URL still names it.
    let archived = ok(call(&mona, "archive_document", json!({"document": DOC_URL})).await);
    assert_eq!(archived["archived"], true);
    let listed = ok(call(&mona, "list_documents", json!({"repository": "octo/plans"})).await);
    assert_eq!(listed["documents"], json!([]));
    let all = ok(call(
        &mona,
        "list_documents",
        json!({"repository": "OCTO/plans", "includeArchived": true}),
    )
    .await);
    assert_eq!(all["documents"][0]["id"], s.doc.to_string());
    let (code, _) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0, "source": "x\n", "idempotencyKey": "z"}),
        )
        .await,
    );
    assert_eq!(code, "document-archived");
    let restored = ok(call(
        &mona,
        "restore_document",
        json!({"document": s.doc.to_string()}),
    )
    .await);
    assert_eq!(restored["archived"], false);
}

#[tokio::test]
async fn read_23_mcp_read_document_text_is_a_page_and_structured_content_the_whole_document() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let source: String = (0..600)
        .map(|n| format!("Paragraph {n} of a long plan.\n\n"))
        .collect();
    ok(call(
        &mona,
        "update_document",
        json!({"document": DOC_URL, "planRevision": 0, "source": source, "idempotencyKey": "long"}),
    )
    .await);
    let read = call(&mona, "read_document", json!({"document": DOC_URL})).await;
    let page = text(&read);
    assert!(
        page.len() <= 16_000,
        "a page is at most 16,000 bytes, not {}",
        page.len()
    );
    assert!(
        !page.contains("Paragraph 599 "),
        "the first page is not the whole document"
    );
    assert_eq!(ok(read)["source"], source);
}

#[tokio::test]
async fn mcp_refuses_unknown_tools_and_bad_arguments_with_a_code() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (code, _) = refusal(call(&mona, "delete_everything", json!({})).await);
    assert_eq!(code, "unknown-tool");
    let (code, _) = refusal(call(&mona, "read_document", json!({"doc": DOC_URL})).await);
    assert_eq!(code, "invalid-arguments");
    let (code, _) = refusal(call(&mona, "list_documents", json!({"repository": "octo"})).await);
    assert_eq!(code, "invalid-arguments");
}

async fn post(s: &Served, headers: &[(&str, &str)]) -> connector::HttpResponse {
    let mut request = http::Request::post(format!("http://{}/mcp", s.host))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    connector::send(&TcpConnector, request.body(Bytes::from(body)).unwrap())
        .await
        .unwrap()
}

fn error_code(response: &connector::HttpResponse) -> String {
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    body["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn ac_12_life_72_mcp_refuses_over_http_before_any_message_401_403_503() {
    let s = served_with(Arc::new(MemoryStore::new()), |config| {
        config.github_allowed_users = ["mona".to_owned()].into();
    })
    .await;
    let (hubot, _) = cast(&s);
    let bearer = |token: &str| format!("Bearer {token}");

    let none = post(&s, &[]).await;
    assert_eq!(none.status, 401);
    assert_eq!(error_code(&none), "bad-credentials");
    assert!(none.headers.contains_key("www-authenticate"));
    let bad = post(&s, &[("authorization", "Bearer not-a-token")]).await;
    assert_eq!(
        (bad.status.as_u16(), error_code(&bad).as_str()),
        (401, "bad-credentials")
    );
    let refused = post(&s, &[("authorization", &bearer(&hubot))]).await;
    assert_eq!(
        (refused.status.as_u16(), error_code(&refused).as_str()),
        (403, "not-admitted")
    );
    let foreign = post(
        &s,
        &[
            ("authorization", &bearer(&s.mona)),
            ("origin", "https://evil.example"),
        ],
    )
    .await;
    assert_eq!(
        (foreign.status.as_u16(), error_code(&foreign).as_str()),
        (403, "foreign-origin")
    );
    // No Origin is fine, and this server's own is too.
    let own = format!("http://{}", s.host);
    let fine = post(&s, &[("authorization", &bearer(&s.mona)), ("origin", &own)]).await;
    assert_eq!(fine.status, 200, "{:?}", fine.body);
    s.github.set_outage(true);
    s.state.admission.invalidate(&s.mona);
    let down = post(&s, &[("authorization", &bearer(&s.mona))]).await;
    assert_eq!(
        (down.status.as_u16(), error_code(&down).as_str()),
        (503, "github-unavailable")
    );
}

#[tokio::test]
async fn ses_30_mcp_is_served_with_agent_off() {
    let s = served_with(Arc::new(MemoryStore::new()), |config| {
        config.agent_enabled = false;
    })
    .await;
    let mona = client(&s, &s.mona).await;
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["document"]["id"], s.doc.to_string());
}

#[tokio::test]
async fn mcp_is_stateless_no_session_and_no_stream_to_open() {
    let s = served().await;
    let bearer = format!("Bearer {}", s.mona);
    // As docs/mcp.md's curl example sends it.
    let listed = post(
        &s,
        &[
            ("authorization", &bearer),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    )
    .await;
    assert_eq!(listed.status, 200);
    let body: Value = serde_json::from_slice(&listed.body).unwrap();
    assert_eq!(
        body["result"]["tools"].as_array().map(Vec::len),
        Some(DOCUMENT_TOOLS.len())
    );
    assert!(
        !listed.headers.contains_key("mcp-session-id"),
        "no session is handed out"
    );
    assert_eq!(listed.headers["content-type"], "application/json");
    for method in ["GET", "DELETE"] {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}/mcp", s.host))
            .header("authorization", &bearer)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", "made-up")
            .body(Bytes::new())
            .unwrap();
        let answer = connector::send(&TcpConnector, request).await.unwrap();
        assert_eq!(answer.status, 405, "{method}");
    }
}

/// What the document's Chat holds, as (kind, author, text), once everything is saved.
async fn chat_entries(s: &Served) -> Vec<(String, Option<String>, String)> {
    s.state.transcript.settled().await;
    let entries = s.store.transcript(s.doc, 0, 100).await.unwrap();
    entries
        .into_iter()
        .map(|e| (e.kind, e.author_login, e.body))
        .collect()
}

// OWN-26 / UNA-02: "An @chopin message or invoke_planner call for a document without an
// attached Planner is refused with planner-not-attached" … "nothing is kept".
#[tokio::test]
async fn own_26_una_02_invoke_planner_without_an_attached_planner_is_refused_and_nothing_posted() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (code, body) = refusal(
        call(
            &mona,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": "Plan the quay."}),
        )
        .await,
    );
    assert_eq!(code, "planner-not-attached");
    assert!(
        body["message"].as_str().unwrap().contains(DOC_URL),
        "{body}"
    );
    assert_eq!(chat_entries(&s).await, vec![], "nothing was posted");
}

// OWN-20: "the instruction is posted as the caller's own message and the turn runs under the
// channel's current owner"; UNA-07: with a client attached it arrives as a turn on it.
#[tokio::test]
async fn own_20_invoke_planner_posts_the_callers_message_and_starts_a_turn_on_the_attached_planner()
{
    let s = served().await;
    let mut planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    let took = ok(call(
        &mona,
        "invoke_planner",
        json!({"document": s.doc.to_string(), "instruction": "Plan the quay."}),
    )
    .await);
    assert_eq!(took["status"], "started");
    assert_eq!(took["document"]["url"], DOC_URL);
    let session = match support::next(&mut planner).await {
        chopin_protocol::agent::ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    planner
        .send(&chopin_protocol::agent::ClientMessage::Started(
            chopin_protocol::agent::Started {
                session_id: session,
            },
        ))
        .await
        .unwrap();
    match support::next(&mut planner).await {
        chopin_protocol::agent::ServerMessage::Turn(turn) => {
            assert!(
                turn.prompt.contains("@mona: Plan the quay."),
                "{}",
                turn.prompt
            )
        }
        other => panic!("expected turn, got {other:?}"),
    }
    assert_eq!(
        chat_entries(&s).await,
        vec![(
            "member".into(),
            Some("mona".into()),
            "Plan the quay.".into()
        )],
        "posted as mona's own message"
    );
}

// The instruction's bound: 64 KiB, past Chat's own 20,000 characters.
#[tokio::test]
async fn invoke_planner_takes_an_instruction_of_64_kib_and_refuses_one_byte_more() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let at_bound = "x".repeat(64 * 1024);
    let (code, _) = refusal(
        call(
            &mona,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": at_bound}),
        )
        .await,
    );
    assert_eq!(code, "planner-not-attached", "64 KiB passes the bound");
    let over = "x".repeat(64 * 1024 + 1);
    let (code, _) = refusal(
        call(
            &mona,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": over}),
        )
        .await,
    );
    assert_eq!(code, "too-long");
}

#[tokio::test]
async fn invoke_planner_needs_push_access_and_a_live_document() {
    let s = served().await;
    let (hubot, _) = cast(&s);
    let hubot = client(&s, &hubot).await;
    let (code, _) = refusal(
        call(
            &hubot,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": "Go."}),
        )
        .await,
    );
    assert_eq!(code, "no-write-access");
    let mona = client(&s, &s.mona).await;
    ok(call(&mona, "archive_document", json!({"document": DOC_URL})).await);
    let (code, _) = refusal(
        call(
            &mona,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": "Go."}),
        )
        .await,
    );
    assert_eq!(code, "document-archived");
}

// SES-30: AGENT=off keeps /mcp, but no Planner turn runs.
#[tokio::test]
async fn ses_30_invoke_planner_with_agent_off_is_refused_planner_unavailable() {
    let s = served_with(Arc::new(MemoryStore::new()), |config| {
        config.agent_enabled = false;
    })
    .await;
    let mona = client(&s, &s.mona).await;
    let (code, _) = refusal(
        call(
            &mona,
            "invoke_planner",
            json!({"document": DOC_URL, "instruction": "Go."}),
        )
        .await,
    );
    assert_eq!(code, "planner-unavailable");
}

/// mona's attached Planner client runs one turn to its end: `start` answered, the `turn` read
/// (its prompt returned), `turn-end` sent, `destroy` read, and the server idle again.
async fn run_one_turn(s: &Served, planner: &mut chopin_fixtures::agent::AgentClient) -> String {
    run_one_turn_on(s, planner, s.doc).await
}

/// [`run_one_turn`] on `document`'s attached client.
async fn run_one_turn_on(
    s: &Served,
    planner: &mut chopin_fixtures::agent::AgentClient,
    document: uuid::Uuid,
) -> String {
    use chopin_protocol::agent::{ClientMessage, ServerMessage, Started, TurnEnd, TurnStatus};
    let session = match support::next(planner).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    planner
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    let (turn, prompt) = match support::next(planner).await {
        ServerMessage::Turn(turn) => (turn.turn_id, turn.prompt),
        other => panic!("expected turn, got {other:?}"),
    };
    planner
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    match support::next(planner).await {
        ServerMessage::Destroy(d) => assert_eq!(d.session_id, session),
        other => panic!("expected destroy, got {other:?}"),
    }
    s.state.turns.until_idle(document).await;
    s.state.transcript.settled().await;
    prompt
}

fn follow_up(instruction: &str) -> Value {
    json!({"document": DOC_URL, "instruction": instruction, "as": "system"})
}

// OWN-22: "With as: "system" the call is an automatic follow-up: Chat shows a system notice
// naming the caller instead of their message, and the instruction goes to the Planner alone."
#[tokio::test]
async fn own_22_a_follow_up_goes_to_the_planner_alone_and_chat_shows_a_notice_naming_the_caller() {
    let s = served().await;
    let mut planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    let took = ok(call(&mona, "invoke_planner", follow_up("Check the build.")).await);
    assert_eq!(took["status"], "started");
    let prompt = run_one_turn(&s, &mut planner).await;
    assert!(
        prompt.contains("(an automatic follow-up from @mona)\nCheck the build."),
        "{prompt}"
    );
    assert_eq!(
        chat_entries(&s).await,
        vec![(
            "system".into(),
            None,
            "@mona sent chopin an automatic follow-up.".into()
        )],
        "a notice, not the instruction"
    );
}

/// What `document`'s Chat holds, as (kind, author, text), once everything is saved.
async fn chat_of(s: &Served, document: uuid::Uuid) -> Vec<(String, Option<String>, String)> {
    s.state.transcript.settled().await;
    let entries = s.store.transcript(document, 0, 100).await.unwrap();
    entries
        .into_iter()
        .map(|e| (e.kind, e.author_login, e.body))
        .collect()
}

/// A writer of octo/plans besides mona: their MCP client.
async fn writer(s: &Served, login: &str, github_user_id: u64) -> Client {
    s.github.add_user(login, github_user_id);
    s.github.grant("octo", "plans", login, Permission::Write);
    let token = s.github.issue_token(login);
    client(s, &token).await
}

// OWN-23: "Only the document's creator or the account holding its Planner may send one." A
// document with no recorded creator (this fixture's, made without an account): only the holder.
#[tokio::test]
async fn own_23_with_no_recorded_creator_only_the_holder_may_send_a_follow_up() {
    let s = served().await;
    assert_eq!(
        s.store.document(s.doc).await.unwrap().unwrap().creator,
        None
    );
    let mut planner = s.attach(&[]).await;
    let lisa = writer(&s, "lisa", 1004).await;
    let (code, body) = refusal(call(&lisa, "invoke_planner", follow_up("Go on.")).await);
    assert_eq!(code, "not-allowed");
    assert_eq!(
        body["message"],
        "Only the account holding this document's Planner (@mona) may send an automatic follow-up; no creator is recorded for this document."
    );
    assert_eq!(chat_entries(&s).await, vec![], "nothing posted");
    let mona = client(&s, &s.mona).await;
    let took = ok(call(&mona, "invoke_planner", follow_up("Go on.")).await);
    assert_eq!(took["status"], "started", "the holder may");
    run_one_turn(&s, &mut planner).await;
}

// OWN-23 with a recorded creator: lisa created the document over MCP and does not hold its
// Planner (mona does). lisa may send a follow-up, mona may, and nina, a third writer, is
// refused `not-allowed` with nothing posted.
#[tokio::test]
async fn own_23_the_creator_and_the_holder_may_send_a_follow_up_and_a_third_writer_may_not() {
    let s = served().await;
    let lisa = writer(&s, "lisa", 1004).await;
    let nina = writer(&s, "nina", 1005).await;
    let created = ok(call(
        &lisa,
        "create_document",
        json!({"repository": "octo/plans", "title": "Quay works"}),
    )
    .await);
    let id: uuid::Uuid = created["id"].as_str().unwrap().parse().unwrap();
    let recorded = s
        .store
        .document(id)
        .await
        .unwrap()
        .unwrap()
        .creator
        .unwrap();
    assert_eq!(recorded.login, "lisa");
    let mut planner = s.attach_to(id, &[]).await;
    let follow_up = |instruction: &str| json!({"document": "/documents/octo/plans/quay-works", "instruction": instruction, "as": "system"});

    let (code, body) = refusal(call(&nina, "invoke_planner", follow_up("Mine.")).await);
    assert_eq!(code, "not-allowed");
    assert_eq!(
        body["message"],
        "Only this document's creator (@lisa) or the account holding its Planner (@mona) may send an automatic follow-up."
    );
    assert_eq!(chat_of(&s, id).await, vec![], "nothing posted");

    let took = ok(call(&lisa, "invoke_planner", follow_up("Check the quay.")).await);
    assert_eq!(took["status"], "started", "the creator may");
    let prompt = run_one_turn_on(&s, &mut planner, id).await;
    assert!(
        prompt.contains("(an automatic follow-up from @lisa)\nCheck the quay."),
        "{prompt}"
    );

    let mona = client(&s, &s.mona).await;
    let took = ok(call(&mona, "invoke_planner", follow_up("Check the build.")).await);
    assert_eq!(
        took["status"], "started",
        "the holder, not the creator, may"
    );
    run_one_turn_on(&s, &mut planner, id).await;
    assert_eq!(
        chat_of(&s, id).await,
        vec![
            (
                "system".into(),
                None,
                "@lisa sent chopin an automatic follow-up.".into()
            ),
            (
                "system".into(),
                None,
                "@mona sent chopin an automatic follow-up.".into()
            ),
        ]
    );
}

// MSG-21: "an automatic follow-up … need[s] a turn of [its] own … While a turn runs [it is]
// refused before anything is saved … (planner-busy for MCP)"; MSG-22: a message is given to
// the running turn.
#[tokio::test]
async fn msg_21_a_follow_up_while_a_turn_runs_is_refused_planner_busy() {
    let s = served().await;
    let mut planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    let took = ok(call(
        &mona,
        "invoke_planner",
        json!({"document": DOC_URL, "instruction": "Start."}),
    )
    .await);
    assert_eq!(took["status"], "started");
    // The turn is under way once the client has its `start`.
    assert!(matches!(
        support::next(&mut planner).await,
        chopin_protocol::agent::ServerMessage::Start(_)
    ));
    let (code, body) = refusal(call(&mona, "invoke_planner", follow_up("Then this.")).await);
    assert_eq!(code, "planner-busy");
    assert_eq!(
        body["message"],
        "Chopin is working on something else. Try again when it has finished."
    );
    assert_eq!(
        chat_entries(&s).await,
        vec![("member".into(), Some("mona".into()), "Start.".into())],
        "the follow-up posted nothing"
    );
}

// OWN-25: "past 10 as: "system" calls in a rolling hour per document: refused rate-limited …
// nothing posted."
#[tokio::test]
async fn own_25_the_eleventh_follow_up_in_an_hour_is_refused_rate_limited() {
    let s = served().await;
    let mut planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    for n in 0..10 {
        let took = ok(call(&mona, "invoke_planner", follow_up(&format!("Round {n}."))).await);
        assert_eq!(took["status"], "started", "follow-up {n}");
        run_one_turn(&s, &mut planner).await;
    }
    let (code, body) = refusal(call(&mona, "invoke_planner", follow_up("One more.")).await);
    assert_eq!(code, "rate-limited");
    assert_eq!(
        body["message"],
        "Too many automatic follow-ups for this document. Try again later."
    );
    assert_eq!(
        chat_entries(&s).await.len(),
        10,
        "the eleventh posted nothing"
    );
    // A message is no follow-up: it is not limited.
    let took = ok(call(
        &mona,
        "invoke_planner",
        json!({"document": DOC_URL, "instruction": "Still here."}),
    )
    .await);
    assert_eq!(took["status"], "started");
}

/// Ten follow-up notices in the document's transcript, as a process before a restart, or the
/// one that served the document before a failover, left them: the oldest `oldest_ago_ms` ago,
/// the newest a minute ago; and a member's line with the same words, which is no follow-up.
async fn follow_ups_sent_before(s: &Served, oldest_ago_ms: i64) {
    use chopin_server::runtime::clock::{Clock, SystemClock};
    use chopin_server::store::NewTranscriptEntry;
    let now = SystemClock.now_ms();
    let notice = |at| NewTranscriptEntry {
        kind: "system".into(),
        body: "@mona sent chopin an automatic follow-up.".into(),
        created_at_ms: at,
        ..NewTranscriptEntry::default()
    };
    s.store
        .append_transcript(s.doc, &notice(now - oldest_ago_ms))
        .await
        .unwrap();
    for n in 1..10 {
        let at = now - oldest_ago_ms + n * (oldest_ago_ms - 60_000) / 9;
        s.store.append_transcript(s.doc, &notice(at)).await.unwrap();
    }
    let member = NewTranscriptEntry {
        author_login: Some("mona".into()),
        kind: "member".into(),
        ..notice(now - 30_000)
    };
    s.store.append_transcript(s.doc, &member).await.unwrap();
}

// OWN-25 across a restart or a failover: the follow-ups a document took in the last hour are
// read back from the notices they left, so a process new to the document refuses the eleventh;
// a follow-up sent more than an hour ago no longer counts, and a member's line is none.
#[tokio::test]
async fn own_25_follow_ups_another_process_took_this_hour_still_count_here() {
    const HOUR_MS: i64 = 60 * 60 * 1000;
    let s = served().await;
    let _planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    follow_ups_sent_before(&s, HOUR_MS - 60_000).await;
    let (code, _) = refusal(call(&mona, "invoke_planner", follow_up("One more.")).await);
    assert_eq!(code, "rate-limited");
    assert_eq!(
        chat_entries(&s).await.len(),
        11,
        "the eleventh posted nothing"
    );

    let s = served().await;
    let mut planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    follow_ups_sent_before(&s, HOUR_MS + 60_000).await;
    let took = ok(call(&mona, "invoke_planner", follow_up("One more.")).await);
    assert_eq!(
        took["status"], "started",
        "the oldest is past the hour: nine count"
    );
    run_one_turn(&s, &mut planner).await;
    let (code, _) = refusal(call(&mona, "invoke_planner", follow_up("And another.")).await);
    assert_eq!(
        code, "rate-limited",
        "nine read back and one taken here make ten"
    );
}

// create_document's brief: kept with the document and shown by read_document, its text in a
// "Brief:" section and whole in structuredContent.brief (READ-19).
#[tokio::test]
async fn create_document_keeps_its_brief_and_read_document_shows_it() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let brief = "Plan the harbour survey: which quay first, and who signs off.";
    let created = ok(call(
        &mona,
        "create_document",
        json!({"repository": "octo/plans", "title": "Survey", "source": "# Survey\n", "brief": brief}),
    )
    .await);
    let id = created["id"].as_str().unwrap().to_owned();
    let read = call(&mona, "read_document", json!({"document": id})).await;
    let page = text(&read);
    assert!(page.contains(&format!("Brief:\n{brief}\n")), "{page}");
    let view = ok(read);
    assert_eq!(view["brief"], brief);
    let without = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(
        without.get("brief"),
        None,
        "a document made without a brief has none"
    );
}

// The brief's bound (ours, 64 KiB of UTF-8): one byte more is refused `too-long` and nothing is
// created; at the bound it is kept whole.
#[tokio::test]
async fn create_document_takes_a_brief_of_64_kib_and_refuses_one_byte_more_creating_nothing() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let over = "b".repeat(64 * 1024 + 1);
    let (code, body) = refusal(
        call(
            &mona,
            "create_document",
            json!({"repository": "octo/plans", "title": "Too much", "brief": over}),
        )
        .await,
    );
    assert_eq!(code, "too-long");
    assert!(
        body["message"].as_str().unwrap().contains("65536 bytes"),
        "{body}"
    );
    let listed = ok(call(&mona, "list_documents", json!({"repository": "octo/plans"})).await);
    assert_eq!(
        listed["documents"].as_array().unwrap().len(),
        1,
        "nothing created"
    );

    let at_bound = "b".repeat(64 * 1024);
    let created = ok(call(
        &mona,
        "create_document",
        json!({"repository": "octo/plans", "title": "Just enough", "brief": at_bound}),
    )
    .await);
    let view = ok(call(&mona, "read_document", json!({"document": created["id"]})).await);
    assert_eq!(view["brief"].as_str().unwrap().len(), 64 * 1024);
}

/// `POST path` on the server's HTTP API with `token` as the bearer: the status and JSON body.
async fn post_api(s: &Served, path: &str, token: &str, body: Value) -> (u16, Value) {
    let request = http::Request::post(format!("http://{}{path}", s.host))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Bytes::from(body.to_string()))
        .unwrap();
    let answer = connector::send(&TcpConnector, request).await.unwrap();
    (
        answer.status.as_u16(),
        serde_json::from_slice(&answer.body).unwrap(),
    )
}

// OWN-23's creator is recorded wherever a person creates a document, not only over MCP: the
// browser's create route and its create-a-child route keep their caller as the creator.
#[tokio::test]
async fn own_23_documents_and_children_created_over_http_record_their_creator() {
    let s = served().await;
    let (status, created) = post_api(
        &s,
        "/api/repositories/octo/plans/documents",
        &s.mona,
        json!({"title": "Survey"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id: uuid::Uuid = created["id"].as_str().unwrap().parse().unwrap();
    let (status, child) = post_api(
        &s,
        &format!("/api/documents/{id}/children"),
        &s.mona,
        json!({"title": "Quay"}),
    )
    .await;
    assert_eq!(status, 201, "{child}");
    let child: uuid::Uuid = child["id"].as_str().unwrap().parse().unwrap();
    for made in [id, child] {
        let creator = s.store.document(made).await.unwrap().unwrap().creator;
        assert_eq!(creator.map(|c| c.login), Some("mona".to_owned()));
    }
}

// --- ISO-43: creation provenance -------------------------------------------------------------

const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";
const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The requests the fake GitHub got that could be about a branch or a commit: any path naming
/// one of `names`, or a git, commit, branch, ref or compare route.
fn branch_or_commit_requests(s: &Served, names: &[&str]) -> Vec<String> {
    s.github
        .requests()
        .into_iter()
        .filter(|r| {
            names.iter().any(|n| r.contains(n))
                || ["/git/", "/commits", "/branches", "/refs", "/compare"]
                    .iter()
                    .any(|route| r.contains(route))
        })
        .collect()
}

async fn document_count(client: &Client) -> usize {
    let listed = ok(call(
        client,
        "list_documents",
        json!({"repository": "octo/plans"}),
    )
    .await);
    listed["documents"].as_array().unwrap().len()
}

// ISO-43: "The server validates the shape of creation provenance but does not resolve its branch
// and commit against GitHub." Every well-shaped pair is kept as sent and read_document returns
// it; the fake GitHub is never asked about the branch or the commit.
#[tokio::test]
async fn iso_43_create_document_keeps_a_well_shaped_provenance_unresolved_and_read_document_returns_it(
) {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let long_branch = format!("feature/{}", "q".repeat(247));
    let goods: [(&str, &str); 5] = [
        ("main", SHA1),
        ("feature/quay-2", SHA256),
        ("release/v1.2", SHA1),
        ("wip@home_#12", SHA1),
        (&long_branch, SHA256),
    ];
    for (n, (branch, commit)) in goods.iter().enumerate() {
        let created = ok(call(
            &mona,
            "create_document",
            json!({"repository": "octo/plans", "title": format!("Survey {n}"),
                   "baseBranch": branch, "baseCommit": commit}),
        )
        .await);
        let view = ok(call(&mona, "read_document", json!({"document": created["id"]})).await);
        assert_eq!(
            view["provenance"],
            json!({"baseBranch": branch, "baseCommit": commit}),
            "{branch}"
        );
    }
    let without = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(
        without.get("provenance"),
        None,
        "a document made without provenance has none"
    );
    assert_eq!(
        branch_or_commit_requests(&s, &[SHA1, SHA256, "quay", "release", "wip"]),
        Vec::<String>::new(),
        "nothing was asked of GitHub about a branch or a commit"
    );
}

// ISO-43: each badly shaped `baseBranch` or `baseCommit`, and either one without the other, is
// refused `invalid-provenance` naming the field, before GitHub is asked anything about the
// repository, and nothing is created.
#[tokio::test]
async fn iso_43_create_document_refuses_each_bad_provenance_shape_and_creates_nothing() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let before = document_count(&mona).await;
    let too_long = "b".repeat(256);
    let upper = SHA1.to_uppercase();
    let bad_branches = [
        "",
        "a..b",
        "has space",
        "tab\there",
        "bell\u{7}",
        "tilde~1",
        "caret^",
        "co:lon",
        "what?",
        "star*",
        "br[acket",
        "back\\slash",
        "-leading-dash",
        "/leading-slash",
        "trailing-slash/",
        "double//slash",
        "name.lock",
        "trailing-dot.",
        "part/.hidden",
        "at@{brace}",
        "@",
        "HEAD",
        &too_long,
    ];
    let mut cases: Vec<(Value, &str)> = bad_branches
        .iter()
        .map(|b| (json!({"baseBranch": b, "baseCommit": SHA1}), "baseBranch"))
        .collect();
    for commit in [
        "",
        "0123456",                                   // abbreviated
        &SHA1[..39],                                 // one short
        "0123456789abcdef0123456789abcdef012345678", // 41
        &SHA256[..63],
        &upper,
        "g123456789abcdef0123456789abcdef01234567",
        "refs/heads/main",
    ] {
        cases.push((
            json!({"baseBranch": "main", "baseCommit": commit}),
            "baseCommit",
        ));
    }
    cases.push((json!({"baseBranch": "main"}), "baseCommit"));
    cases.push((json!({"baseCommit": SHA1}), "baseBranch"));

    let repo_requests = s.github.request_count("/repos/");
    for (provenance, field) in cases {
        let mut args = json!({"repository": "octo/plans", "title": "Bad provenance"});
        args.as_object_mut()
            .unwrap()
            .extend(provenance.as_object().unwrap().clone());
        let (code, body) = refusal(call(&mona, "create_document", args.clone()).await);
        assert_eq!(code, "invalid-provenance", "{args}");
        let message = body["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{args}: {message}");
        assert!(message.contains("Nothing was created"), "{message}");
    }
    assert_eq!(
        s.github.request_count("/repos/"),
        repo_requests,
        "refused before GitHub was asked anything"
    );
    assert_eq!(document_count(&mona).await, before, "nothing created");
}

// --- create_document's idempotencyKey --------------------------------------------------------

fn keyed_create(key: &str) -> Value {
    json!({"repository": "octo/plans", "title": "Quay survey", "slug": "quay",
           "source": "# Quay\n", "brief": "Which quay first.",
           "baseBranch": "main", "baseCommit": SHA1, "idempotencyKey": key})
}

// A retry after a lost answer: the same key and input again returns the document the first call
// made, and no second one is created — even with the repository spelled in another case, an
// all-blank brief kept as none, or after the document was renamed.
#[tokio::test]
async fn create_document_with_a_used_idempotency_key_and_the_same_input_returns_the_same_document()
{
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let before = document_count(&mona).await;
    let first = ok(call(&mona, "create_document", keyed_create("k-1")).await);
    let again = ok(call(&mona, "create_document", keyed_create("k-1")).await);
    assert_eq!(first, again);
    let mut other_case = keyed_create("k-1");
    other_case["repository"] = json!("Octo/Plans");
    assert_eq!(
        ok(call(&mona, "create_document", other_case).await)["id"],
        first["id"]
    );
    assert_eq!(document_count(&mona).await, before + 1, "created once");
    let view = ok(call(&mona, "read_document", json!({"document": first["id"]})).await);
    assert_eq!(view["source"], "# Quay\n", "the source written once");
    assert_eq!(view["revision"], 1);

    // Renamed since: the replay answers the document as it is now.
    ok(call(
        &mona,
        "rename_document",
        json!({"document": first["id"], "title": "Quay plan"}),
    )
    .await);
    let later = ok(call(&mona, "create_document", keyed_create("k-1")).await);
    assert_eq!(later["id"], first["id"]);
    assert_eq!(later["title"], "Quay plan");
    assert_eq!(document_count(&mona).await, before + 1);

    // Another key is another document.
    let second = ok(call(&mona, "create_document", keyed_create("k-2")).await);
    assert_ne!(second["id"], first["id"]);
    assert_eq!(second["url"], "/documents/octo/plans/quay-2");
}

// The same key with any part of the input different is refused with a conflict that says so,
// and nothing is created; the first document is untouched.
#[tokio::test]
async fn create_document_with_a_used_idempotency_key_and_other_input_is_refused_idempotency_key_reused(
) {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    s.github.add_repo("octo", "charts");
    s.github.grant("octo", "charts", "mona", Permission::Write);
    let first = ok(call(&mona, "create_document", keyed_create("k")).await);
    let count = document_count(&mona).await;
    let changed = |field: &str, value: Value| {
        let mut args = keyed_create("k");
        args[field] = value;
        args
    };
    let without = |fields: &[&str]| {
        let mut args = keyed_create("k");
        for field in fields {
            args.as_object_mut().unwrap().remove(*field);
        }
        args
    };
    let others = [
        ("repository", changed("repository", json!("octo/charts"))),
        ("title", changed("title", json!("Another survey"))),
        ("slug", changed("slug", json!("other"))),
        ("source", changed("source", json!("# Other\n"))),
        ("brief", changed("brief", json!("Something else."))),
        ("baseBranch", changed("baseBranch", json!("develop"))),
        (
            "baseCommit",
            changed("baseCommit", json!(SHA1.replace('0', "f"))),
        ),
        ("no brief", without(&["brief"])),
        ("no provenance", without(&["baseBranch", "baseCommit"])),
    ];
    for (what, args) in others {
        let (code, body) = refusal(call(&mona, "create_document", args).await);
        assert_eq!(code, "idempotency-key-reused", "{what}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("different input"), "{message}");
        assert!(
            message.contains(first["id"].as_str().unwrap()),
            "names the first document: {message}"
        );
    }

    assert_eq!(document_count(&mona).await, count, "nothing created");
    let charts = ok(call(
        &mona,
        "list_documents",
        json!({"repository": "octo/charts"}),
    )
    .await);
    assert_eq!(charts["documents"], json!([]));
    let view = ok(call(&mona, "read_document", json!({"document": first["id"]})).await);
    assert_eq!(view["source"], "# Quay\n");
    // The same input still gets the first document.
    assert_eq!(
        ok(call(&mona, "create_document", keyed_create("k")).await)["id"],
        first["id"]
    );
}

// Keys are kept per account: another writer's call with the same key is its own creation, and
// a key of 0 or more than 200 characters is refused before anything is created.
#[tokio::test]
async fn create_document_idempotency_keys_are_per_account_and_1_to_200_characters() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let lisa = writer(&s, "lisa", 1004).await;
    let hers = ok(call(&mona, "create_document", keyed_create("shared")).await);
    let his = ok(call(&lisa, "create_document", keyed_create("shared")).await);
    assert_ne!(
        hers["id"], his["id"],
        "one account's key never answers another's"
    );
    let count = document_count(&mona).await;
    for key in [String::new(), "k".repeat(201)] {
        let (code, _) = refusal(call(&mona, "create_document", keyed_create(&key)).await);
        assert_eq!(code, "invalid-arguments", "{} characters", key.len());
    }
    assert_eq!(document_count(&mona).await, count, "nothing created");
    ok(call(&mona, "create_document", keyed_create(&"k".repeat(200))).await);
}

/// Makes every `create_document` of the store yield a few times before it runs.
struct YieldOnCreate;

impl Hook for YieldOnCreate {
    fn call(&self, _: Call) {}

    fn hold(&self, method: &'static str, _write: bool) -> Option<Hold> {
        (method == "create_document").then(|| {
            Box::pin(async {
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
            }) as Hold
        })
    }
}

// Two calls with one key at once (a client that retries before its first answer came back):
// they are taken one after the other, so one document is created and both get it. The store
// yields inside `create_document`, so the two calls really overlap (the memory store alone
// never yields).
#[tokio::test]
async fn create_document_two_calls_with_one_idempotency_key_at_once_create_one_document() {
    let store: Arc<dyn Store> = Arc::new(Instrumented::new(
        Arc::new(MemoryStore::new()),
        YieldOnCreate,
    ));
    let s = served_with(store, |_| {}).await;
    let (first, second) = (client(&s, &s.mona).await, client(&s, &s.mona).await);
    let before = document_count(&first).await;
    let (a, b) = tokio::join!(
        call(&first, "create_document", keyed_create("at-once")),
        call(&second, "create_document", keyed_create("at-once")),
    );
    assert_eq!(ok(a)["id"], ok(b)["id"]);
    assert_eq!(document_count(&first).await, before + 1, "created once");
}

/// ATM-40/41, one limit on every write path: MCP `update_document` and `create_document` take a
/// source of exactly 256 KiB and refuse one byte more `document-too-large`, writing nothing.
#[tokio::test]
async fn atm_40_mcp_writes_take_256_kib_of_source_and_refuse_one_byte_more() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let source = |bytes: usize| format!("{}\n", "x".repeat(bytes - 1));
    let limit = chopin_document::SOURCE_MAX_BYTES;
    let (code, body) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0, "source": source(limit + 1), "idempotencyKey": "big"}),
        )
        .await,
    );
    assert_eq!(code, "document-too-large", "{body}");
    assert_eq!(body["bytes"], limit + 1);
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["revision"], 0, "nothing written");
    let fits = ok(call(
        &mona,
        "update_document",
        json!({"document": DOC_URL, "planRevision": 0, "source": source(limit), "idempotencyKey": "fits"}),
    )
    .await);
    assert_eq!(fits["planRevision"], 1);

    let before = document_count(&mona).await;
    let (code, _) = refusal(
        call(
            &mona,
            "create_document",
            json!({"repository": "octo/plans", "title": "Too big", "source": source(limit + 1)}),
        )
        .await,
    );
    assert_eq!(code, "document-too-large");
    assert_eq!(document_count(&mona).await, before, "nothing created");
}

/// ATM-43: `invoke_planner` works under any harness; harnesses other than atomic ignore its
/// `checkout` (it is not refused as an unknown argument).
#[tokio::test]
async fn atm_43_invoke_planner_takes_a_checkout_and_ignores_it() {
    let s = served().await;
    let _planner = s.attach(&[]).await;
    let mona = client(&s, &s.mona).await;
    let took = ok(call(
        &mona,
        "invoke_planner",
        json!({"document": s.doc.to_string(), "instruction": "Plan the quay.", "checkout": "/home/mona/src/plans"}),
    )
    .await);
    assert_eq!(took["status"], "started", "{took}");
    let posted = chat_entries(&s).await;
    assert_eq!(posted.len(), 1);
    assert!(
        !posted[0].2.contains("/home/mona"),
        "the path goes nowhere: {posted:?}"
    );
}

/// MSG-22: "An invoke_planner call that is a message is given to the running turn like one
/// sent in Chat": with a turn running (its client offers steering), the call answers once the
/// turn has the message, `steered`, and the turn reads it as the caller's words.
#[tokio::test]
async fn msg_22_invoke_planner_while_a_turn_runs_is_given_to_that_turn() {
    let s = served().await;
    let mut planner = s.attach(&["steer-turn"]).await;
    let mut room = s.room().await;
    let begun = support::begin_turn(&mut planner, &mut room, "@chopin plan the quay").await;
    let mona = client(&s, &s.mona).await;
    let took = ok(call(
        &mona,
        "invoke_planner",
        json!({"document": s.doc.to_string(), "instruction": "Mind the tides."}),
    )
    .await);
    assert_eq!(took["status"], "steered", "{took}");
    loop {
        if let chopin_protocol::agent::ServerMessage::Steer(steer) =
            support::next(&mut planner).await
        {
            assert_eq!(steer.turn_id, begun.turn);
            assert_eq!(steer.text, "@mona: Mind the tides.");
            break;
        }
    }
    support::end_turn(&s, &mut planner, &begun.turn).await;
}

/// DIA-07, DIA-08: MCP `update_document` refuses a new source that introduces an invalid
/// `seecode` or `wireframe` fence, naming the problem (a wireframe's failing lines inside the
/// fence); nothing is written. A valid one is written.
#[tokio::test]
async fn dia_07_dia_08_mcp_update_refuses_an_invalid_diagram_fence_and_writes_nothing() {
    let s = served().await;
    let mona = client(&s, &s.mona).await;
    let (code, body) = refusal(
        call(
            &mona,
            "update_document",
            json!({"document": DOC_URL, "planRevision": 0, "idempotencyKey": "w1",
                   "source": "# Plan\n\n```wireframe\nscreen\n  nav | menu\n```\n"}),
        )
        .await,
    );
    assert_eq!(code, "invalid", "{body}");
    assert!(
        body.to_string()
            .contains("line 2: box drawing or ASCII art"),
        "{body}"
    );
    let view = ok(call(&mona, "read_document", json!({"document": DOC_URL})).await);
    assert_eq!(view["revision"], 0, "nothing written");
    let chart = "# Plan\n\n```seecode\n{\"type\": \"line\", \"labels\": [\"Mon\", \"Tue\"], \"series\": [{\"name\": \"p95\", \"values\": [180, 90]}]}\n```\n";
    let written = ok(call(
        &mona,
        "update_document",
        json!({"document": DOC_URL, "planRevision": 0, "idempotencyKey": "w2", "source": chart}),
    )
    .await);
    assert_eq!(written["status"], "applied", "{written}");
}

/// LIFE-40, LIFE-49, LIFE-60, LIFE-61, LIFE-73, LIFE-76, GRA-03: `read_implementation` shows the
/// approved graph of a document created through MCP, by URL or UUID, to anyone who can pull,
/// archived or not, with the UUID every later call names and the repository context as given;
/// a document made elsewhere shows none, nor does one whose latest version is not approved.
#[tokio::test]
async fn life_40_life_49_life_61_life_73_life_76_gra_03_read_implementation_shows_the_approved_graph_of_an_mcp_document(
) {
    use chopin_server::store::{GraphChange, GraphCounters};
    let s = served().await;
    let (hubot, eve) = cast(&s);
    let mona = client(&s, &s.mona).await;
    let commit = "c".repeat(40);
    let created = ok(call(
        &mona,
        "create_document",
        json!({"repository": "octo/plans", "title": "Quay", "source": "# Quay\n\nBuild it.\n",
               "baseBranch": "main", "baseCommit": commit}),
    )
    .await);
    let (id, url) = (
        created["id"].as_str().unwrap().to_owned(),
        created["url"].as_str().unwrap().to_owned(),
    );
    let doc: uuid::Uuid = id.parse().unwrap();

    let (code, shown) = refusal(call(&mona, "read_implementation", json!({"document": url})).await);
    assert_eq!(
        (code.as_str(), &shown["latestState"]),
        ("no-approved-graph", &Value::Null)
    );
    let plan = s.store.document(doc).await.unwrap().unwrap().plan_revision;
    let definition = r#"{"tasks":[{"id":"a","title":"Do a","acceptanceCriteria":["a works"]},{"id":"b","title":"Do b","dependsOn":["a"]}]}"#;
    let draft = GraphChange::Edit {
        base: None,
        plan_revision: plan,
        definition: definition.into(),
    };
    s.store.change_graph(doc, &draft, 1).await.unwrap().unwrap();
    let (code, shown) = refusal(call(&mona, "read_implementation", json!({"document": url})).await);
    assert_eq!(
        (code.as_str(), &shown["latestState"]),
        ("no-approved-graph", &json!("draft"))
    );
    let approve = GraphChange::Approve {
        graph_version: 1,
        graph_revision: 1,
        current_plan_revision: plan,
    };
    s.store
        .change_graph(doc, &approve, 2)
        .await
        .unwrap()
        .unwrap();

    // A reader reads it, by URL and by UUID alike; the answer names the UUID (LIFE-60).
    let hubot = client(&s, &hubot).await;
    for locator in [url.clone(), id.clone()] {
        let read = ok(call(&hubot, "read_implementation", json!({"document": locator})).await);
        assert_eq!(read["document"]["id"], id);
        assert_eq!(read["repository"], "octo/plans");
        assert_eq!(
            read["provenance"],
            json!({"baseBranch": "main", "baseCommit": commit})
        );
        assert_eq!(read["plan"]["revision"], plan);
        assert_eq!(read["plan"]["source"], "# Quay\n\nBuild it.\n");
        let graph = &read["graph"];
        assert_eq!(
            (
                &graph["graphVersion"],
                &graph["graphRevision"],
                &graph["planRevision"],
                &graph["state"],
                &graph["claimable"]
            ),
            (
                &json!(1),
                &json!(1),
                &json!(plan),
                &json!("approved"),
                &json!(true)
            )
        );
        assert_eq!(graph["tasks"][1]["dependsOn"], json!(["a"]));
    }
    // Locked by a run: still shown, not claimable. Archived: still shown (LIFE-61).
    let claim = GraphChange::Claim {
        counters: GraphCounters {
            plan_revision: plan,
            graph_version: 1,
            graph_revision: 1,
        },
        run_id: "run-1".into(),
    };
    s.store.change_graph(doc, &claim, 3).await.unwrap().unwrap();
    ok(call(&mona, "archive_document", json!({"document": id})).await);
    let read = ok(call(&hubot, "read_implementation", json!({"document": id})).await);
    assert_eq!(
        (
            &read["graph"]["state"],
            &read["graph"]["claimable"],
            &read["document"]["archived"]
        ),
        (&json!("locked"), &json!(false), &json!(true))
    );

    // Someone who cannot read the repository finds nothing (LIFE-73).
    let eve = client(&s, &eve).await;
    let (code, _) = refusal(call(&eve, "read_implementation", json!({"document": id})).await);
    assert_eq!(code, "document-not-found");

    // The cast's document was made in a browser: its graph is not handed over (LIFE-76).
    let browser_doc = s.doc;
    s.store
        .change_graph(browser_doc, &draft, 4)
        .await
        .unwrap()
        .unwrap();
    let (code, _) = refusal(call(&mona, "read_implementation", json!({"document": DOC_URL})).await);
    assert_eq!(code, "not-created-through-mcp");
}
