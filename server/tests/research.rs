//! Research requests on the whole stack, under `HARNESS=remote`: `/research <brief>` in Chat is
//! kept with its exact brief and starts at once; a public worker on the attached client gets
//! the brief alone and `web_search` (GitHub's MCP server, with the owner's token); a private
//! worker then reads the parent document, another writes the report, and the report is
//! published as a child document, never as an edit of the parent. Rows: JOB-03, JOB-04,
//! JOB-06..08, COA-22, OWN-28, RFC-34, RT-05, CMD-19.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chopin_fixtures::agent::AgentClient;
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, ServerMessage, SessionMode, Started, Turn, TurnEnd, TurnStatus,
};
use chopin_server::documents::updates::Update;
use chopin_server::store::{JobState, MemoryStore};
use serde_json::{json, Value};
use support::{ask_room, next, served_with, Served};

const PARENT: &str =
    "# Checkout\n\nWe serve EU shoppers from one region; latency hurts conversion.\n";
const BRIEF: &str = "edge caching for  EU shoppers";

async fn served() -> Served {
    let s = served_with(Arc::new(MemoryStore::new()), |c| c.background_jobs = true).await;
    let doc = s.store.document(s.doc).await.unwrap().unwrap();
    s.state
        .updates
        .update(
            "mona",
            &doc,
            &Update {
                revision: 0,
                source: PARENT,
                idempotency_key: "parent",
            },
        )
        .await
        .unwrap();
    s
}

fn research(text: &str) -> Value {
    json!({
        "type": "chat:send",
        "requestId": "r1",
        "text": text,
        "references": [{ "type": "command", "name": "research", "commandKind": "chopin", "start": 0, "end": 9 }]
    })
}

/// The next worker turn that is not a description's (those are answered at once).
async fn worker_turn(client: &mut AgentClient) -> Turn {
    loop {
        let start = match next(client).await {
            ServerMessage::Start(start) => start,
            _ => continue,
        };
        assert_eq!(start.mode, SessionMode::Isolated);
        client
            .send(&ClientMessage::Started(Started {
                session_id: start.session_id,
            }))
            .await
            .unwrap();
        let ServerMessage::Turn(turn) = next(client).await else {
            panic!("expected the worker's turn")
        };
        if turn.instructions.contains("one-line description") {
            end(
                client,
                &turn.turn_id,
                json!({ "description": "Plan for checkout" }),
            )
            .await;
            continue;
        }
        return turn;
    }
}

async fn end(client: &mut AgentClient, turn: &str, output: Value) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.to_owned(),
            status: TurnStatus::Completed,
            output: Some(output),
            message: None,
        }))
        .await
        .unwrap();
}

async fn search(client: &mut AgentClient, turn: &str, query: &str) -> Value {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: "c1".into(),
            name: "web_search".into(),
            input: json!({ "query": query }),
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            assert!(!r.is_error, "{r:?}");
            return serde_json::from_str(r.output.as_str().unwrap()).unwrap();
        }
    }
}

#[tokio::test]
async fn job_03_job_04_job_06_job_07_job_08_rfc_34_tb_03_iso_11_a_research_request_publishes_its_report_as_a_child(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = ask_room(&mut room, research(&format!("/research {BRIEF}"))).await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    assert_eq!(
        ack["planner"],
        Value::Null,
        "CMD-19: /research is not the Planner's"
    );

    // The public worker: the exact brief and nothing else, web_search its one tool (JOB-06).
    let evidence = worker_turn(&mut client).await;
    assert_eq!(evidence.prompt, BRIEF, "only the brief, exactly");
    let tools: Vec<_> = evidence
        .host_tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(tools, ["web_search"]);
    assert!(!evidence.prompt.contains("latency hurts conversion"));
    let found = search(&mut client, &evidence.turn_id, "EU edge caching").await;
    let url = found["results"][0]["url"].as_str().unwrap().to_owned();
    end(
        &mut client,
        &evidence.turn_id,
        json!({
            "findings": ["Edge caches cut EU latency."],
            "sources": [
                { "url": url, "title": "Overview" },
                { "url": "https://made-up.example/never-searched", "title": "Invented" }
            ]
        }),
    )
    .await;

    // The private analysis worker: the brief and the parent, no tools (JOB-07).
    let analysis = worker_turn(&mut client).await;
    assert!(analysis.host_tools.is_empty());
    assert!(
        analysis.prompt.contains("latency hurts conversion"),
        "{}",
        analysis.prompt
    );
    assert!(analysis.prompt.contains(BRIEF));
    end(
        &mut client,
        &analysis.turn_id,
        json!({ "findings": ["One region serves the EU."] }),
    )
    .await;

    // The report worker: the evidence (only searched sources) and the findings.
    let report = worker_turn(&mut client).await;
    assert!(report.host_tools.is_empty());
    assert!(report.prompt.contains(&url), "{}", report.prompt);
    assert!(
        !report.prompt.contains("made-up.example"),
        "a source no search returned is dropped: {}",
        report.prompt
    );
    assert!(report.prompt.contains("One region serves the EU."));
    end(
        &mut client,
        &report.turn_id,
        json!({ "title": "Edge caching for EU shoppers", "body": format!("Cache at the edge ([overview]({url})).") }),
    )
    .await;

    // Published as an ordinary child of the document (JOB-08).
    let mut child = None;
    for _ in 0..100 {
        if let Some(c) = s.store.children(s.doc).await.unwrap().into_iter().next() {
            child = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let child = child.expect("a child document");
    assert_eq!(child.title, "Edge caching for EU shoppers");
    let text = s.state.open.open(child.id).await.unwrap().source().await;
    assert!(text.contains("Cache at the edge"), "{text}");
    // The parent's prose is untouched.
    assert_eq!(
        s.state.open.open(s.doc).await.unwrap().source().await,
        PARENT
    );
    // The exact brief is kept with the request (JOB-04).
    let jobs = s.store.document_jobs(s.doc, 50).await.unwrap();
    let evidence_job = jobs.iter().find(|j| j.kind == "research-evidence").unwrap();
    assert!(
        evidence_job
            .input
            .contains(&format!("\"brief\":\"{BRIEF}\"")),
        "{}",
        evidence_job.input
    );
    assert_eq!(evidence_job.origin, "user");
    let answer_job = jobs.iter().find(|j| j.kind == "research-answer").unwrap();
    assert_eq!(answer_job.state, JobState::Completed);
    assert_eq!(
        answer_job.progress, r#"["analyzing","writing","publishing"]"#,
        "every stage passed is kept"
    );
    // JOB-03: Chat holds the request only.
    let said: Vec<_> = s
        .store
        .transcript(s.doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect();
    assert_eq!(said, [format!("/research {BRIEF}")]);
    // The search ran with the owner's own token.
    let calls = s.github_mcp.tool_calls();
    assert!(
        calls
            .iter()
            .any(|c| format!("{c:?}").contains("web_search")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn job_08_a_report_citing_a_source_the_evidence_does_not_hold_is_not_published() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    ask_room(&mut room, research("/research caching")).await;
    let evidence = worker_turn(&mut client).await;
    end(
        &mut client,
        &evidence.turn_id,
        json!({ "findings": ["x"], "sources": [] }),
    )
    .await;
    let analysis = worker_turn(&mut client).await;
    end(&mut client, &analysis.turn_id, json!({ "findings": [] })).await;
    let report = worker_turn(&mut client).await;
    end(
        &mut client,
        &report.turn_id,
        json!({ "title": "Caching", "body": "See https://unsearched.example/page." }),
    )
    .await;
    for _ in 0..100 {
        let jobs = s.store.document_jobs(s.doc, 50).await.unwrap();
        if let Some(answer) = jobs.iter().find(|j| j.kind == "research-answer") {
            if answer.state == JobState::Pending && answer.failures == 1 {
                assert_eq!(
                    answer.reason.as_deref(),
                    Some("report-cites-unknown-source")
                );
                assert!(s.store.children(s.doc).await.unwrap().is_empty());
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the report was not refused");
}

#[tokio::test]
async fn own_28_coa_22_a_research_request_waits_for_a_client_and_claims_no_planner() {
    let s = served().await;
    let mut room = s.room().await;
    let refused = ask_room(&mut room, research("/research   ")).await;
    assert_eq!(refused["type"], "chat:refused");
    assert_eq!(refused["code"], "research-brief-missing");
    let ack = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "r2", "text": "/research edge caching",
                "references": [{ "type": "command", "name": "research", "commandKind": "chopin", "start": 0, "end": 9 }] }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let jobs = s.store.document_jobs(s.doc, 50).await.unwrap();
    let waiting = jobs.iter().find(|j| j.kind == "research-evidence").unwrap();
    assert_eq!((waiting.state, waiting.attempts), (JobState::Pending, 0));
    assert_eq!(s.store.ownership(s.doc).await.unwrap().holder, None);
    // COA-22: an ordinary message starts no research.
    ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "r3", "text": "research caching please" }),
    )
    .await;
    let jobs = s.store.document_jobs(s.doc, 50).await.unwrap();
    assert_eq!(
        jobs.iter()
            .filter(|j| j.kind.starts_with("research"))
            .count(),
        1
    );
    // A client attaches: the request runs on it.
    let mut client = s.attach(&[]).await;
    let evidence = worker_turn(&mut client).await;
    assert_eq!(evidence.prompt, "edge caching");
}

#[tokio::test]
async fn cmd_19_research_is_refused_as_unavailable_where_background_jobs_are_off() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| c.background_jobs = false).await;
    let mut room = s.room().await;
    let refused = ask_room(&mut room, research("/research caching")).await;
    assert_eq!(refused["type"], "chat:refused", "{refused}");
    assert_eq!(refused["code"], "command-unavailable");
}

/// The Planner's turn for `text` (description workers on the way are answered): its id and the
/// tools it was offered.
async fn planner_turn(client: &mut AgentClient) -> Turn {
    loop {
        match next(client).await {
            ServerMessage::Start(start) => client
                .send(&ClientMessage::Started(Started {
                    session_id: start.session_id,
                }))
                .await
                .unwrap(),
            ServerMessage::Turn(turn) if turn.instructions.contains("one-line description") => {
                end(
                    client,
                    &turn.turn_id,
                    json!({ "description": "Plan for checkout" }),
                )
                .await
            }
            ServerMessage::Turn(turn) => return turn,
            _ => {}
        }
    }
}

/// Answers the document's description worker and waits until it settled: a Planner turn
/// cannot start beside a job's worker.
async fn described(s: &Served, client: &mut AgentClient) {
    loop {
        match next(client).await {
            ServerMessage::Start(start) => client
                .send(&ClientMessage::Started(Started {
                    session_id: start.session_id,
                }))
                .await
                .unwrap(),
            ServerMessage::Turn(turn) => {
                assert!(turn.instructions.contains("one-line description"));
                end(
                    client,
                    &turn.turn_id,
                    json!({ "description": "Plan for checkout" }),
                )
                .await;
                break;
            }
            _ => {}
        }
    }
    for _ in 0..500 {
        let jobs = s.store.document_jobs(s.doc, 50).await.unwrap();
        if jobs.iter().all(|j| j.state == JobState::Completed) && !s.state.turns.is_running(s.doc) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the description never settled");
}

async fn create(client: &mut AgentClient, turn: &str, id: &str, brief: &str) -> (bool, Value) {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: id.into(),
            name: "create_research_workspace".into(),
            input: json!({ "brief": brief }),
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            assert_eq!(r.call_id, id);
            return (r.is_error, r.output);
        }
    }
}

#[tokio::test]
async fn job_05_an_explicit_member_turn_starts_research_only_on_the_exact_brief() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    described(&s, &mut client).await;
    let ack = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m1", "text": format!("@chopin {BRIEF}") }),
    )
    .await;
    assert_eq!(ack["planner"], "started", "{ack}");
    let seq = ack["seq"].as_i64().unwrap();
    let turn = planner_turn(&mut client).await;
    assert!(
        turn.host_tools
            .iter()
            .any(|t| t.name == "create_research_workspace"),
        "offered where research runs"
    );
    for other in [
        "edge caching",
        "edge caching for EU shoppers",
        "edge caching for  EU shoppers and the US",
    ] {
        let (refused, words) = create(&mut client, &turn.turn_id, "c-other", other).await;
        assert!(refused, "JOB-05: {other:?} is not the member's brief");
        assert!(
            words
                .as_str()
                .unwrap()
                .contains(&format!("exactly the brief @mona wrote, unchanged (no refining, broadening or replacing): {BRIEF:?}")),
            "{words}"
        );
    }
    assert!(
        !s.store
            .document_jobs(s.doc, 50)
            .await
            .unwrap()
            .iter()
            .any(|j| j.kind == "research-evidence"),
        "nothing started for a changed brief"
    );
    let (refused, started) = create(&mut client, &turn.turn_id, "c-same", BRIEF).await;
    assert!(!refused, "{started}");
    assert_eq!(started["brief"], BRIEF);
    // A second call for the same message starts nothing more: the request is keyed by it.
    let (refused, _) = create(&mut client, &turn.turn_id, "c-again", BRIEF).await;
    assert!(!refused);
    let mut evidence = Vec::new();
    for _ in 0..200 {
        evidence = s
            .store
            .document_jobs(s.doc, 50)
            .await
            .unwrap()
            .into_iter()
            .filter(|j| j.kind == "research-evidence")
            .collect();
        if !evidence.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(evidence.len(), 1, "one request for the message");
    assert_eq!(evidence[0].idempotency_key, format!("research:{seq}"));
    assert!(
        evidence[0]
            .input
            .contains(&format!("\"brief\":\"{BRIEF}\"")),
        "{}",
        evidence[0].input
    );
}

#[tokio::test]
async fn job_05_a_turn_nobody_asked_for_by_name_cannot_start_research() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    described(&s, &mut client).await;
    // No @chopin: automatic participation hands it over, but it is not an explicit request.
    let ack = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m1", "text": BRIEF }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let turn = planner_turn(&mut client).await;
    let (refused, words) = create(&mut client, &turn.turn_id, "c1", BRIEF).await;
    assert!(refused);
    assert_eq!(
        words.as_str(),
        Some(chopin_server::turns::RESEARCH_NOT_EXPLICIT_WORDS)
    );
}

async fn get(s: &Served, path: &str) -> Value {
    let request = http::Request::get(format!("http://{}{path}", s.host))
        .header("cookie", &s.mona_cookie)
        .body(axum::body::Bytes::new())
        .unwrap();
    let r = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        request,
    )
    .await
    .unwrap();
    assert_eq!(r.status.as_u16(), 200);
    serde_json::from_slice(&r.body).unwrap()
}

/// CTX-21, CTX-33, CTX-36, ISO-15: a research request is a card of its document: offered by
/// the mentions route, mentioned as `%Title` by its `workspaceId` (only a card of this
/// document), kept with the message, and read by the Planner with `read_reference` as a
/// bounded projection followed by its published report.
#[tokio::test]
async fn ctx_21_ctx_33_ctx_36_iso_15_a_research_card_is_offered_mentioned_and_read_by_reference() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    ask_room(&mut room, research("/research caching")).await;
    let listed = get(&s, &format!("/api/channels/{}/mentions?query=cach", s.doc)).await;
    let card = listed["researchCards"][0].clone();
    assert_eq!(
        card["title"], "caching",
        "the brief, while it runs: {listed}"
    );
    let workspace = card["workspaceId"].as_str().unwrap().to_owned();
    let evidence = worker_turn(&mut client).await;
    end(
        &mut client,
        &evidence.turn_id,
        json!({ "findings": ["x"], "sources": [] }),
    )
    .await;
    let analysis = worker_turn(&mut client).await;
    end(&mut client, &analysis.turn_id, json!({ "findings": [] })).await;
    let report = worker_turn(&mut client).await;
    end(
        &mut client,
        &report.turn_id,
        json!({ "title": "Caching at the edge", "body": "Cache static pages at the edge." }),
    )
    .await;
    let mut titled = Value::Null;
    for _ in 0..100 {
        let listed = get(&s, &format!("/api/channels/{}/mentions", s.doc)).await;
        if listed["researchCards"][0]["title"] == "Caching at the edge" {
            titled = listed;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        titled["researchCards"][0]["workspaceId"], workspace,
        "the report's title once published: {titled}"
    );

    // Not a card of this document: refused, nothing sent.
    let refused = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m0", "text": "@chopin see %Other",
                "references": [{ "type": "research", "workspaceId": uuid::Uuid::new_v4() }] }),
    )
    .await;
    assert_eq!(refused["code"], "mention-refused", "{refused}");
    assert_eq!(
        refused["message"],
        chopin_server::chat::RESEARCH_NOT_HERE_WORDS
    );

    let ack = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m1", "text": "@chopin what did %Caching at the edge find?",
                "references": [{ "type": "research", "workspaceId": workspace }] }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let turn = planner_turn(&mut client).await;
    assert!(
        turn.prompt.contains(&format!(
            "[research reference \"{workspace}\" titled \"Caching at the edge\""
        )),
        "{}",
        turn.prompt
    );
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.turn_id.clone(),
            call_id: "r1".into(),
            name: "read_reference".into(),
            input: json!({ "reference": workspace }),
        }))
        .await
        .unwrap();
    let read = loop {
        if let ServerMessage::HostToolResult(r) = next(&mut client).await {
            break r;
        }
    };
    assert!(!read.is_error, "{read:?}");
    let text = read.output.as_str().unwrap();
    assert!(text.contains("state: published"), "{text}");
    assert!(text.contains("brief: caching"), "{text}");
    assert!(
        text.contains("Cache static pages at the edge."),
        "the report: {text}"
    );
    end(&mut client, &turn.turn_id, Value::Null).await;
    // Kept with the message in its stored shape (CTX-43).
    let kept = s.store.transcript(s.doc, 0, 100).await.unwrap();
    let message = kept.iter().find(|e| e.body.contains("%Caching")).unwrap();
    let refs: Value = serde_json::from_str(message.refs.as_deref().unwrap()).unwrap();
    assert_eq!(
        refs[0],
        json!({ "type": "research", "workspaceId": workspace, "label": "Caching at the edge" })
    );
}
