//! Questions over real sockets: a scripted Planner client sends `input-request`, the cards
//! appear in the document as Decisions, mona answers or cancels them from the room, and the
//! client hears `input-result` once.
//!
//! RQ-01: "An `input-request` carries one Atomic HostInput call (questionnaire, confirm,
//! select, input or editor) and becomes Decisions through the same path as the full Atomic
//! Planner: verbatim text, […] and cancellation (`input-cancel`) withdrawing open cards."
//! (RULINGS ATM-32: no expiry.)

use std::time::Duration;

use chopin_document::blocks::blocks;
use chopin_document::decision::{decisions, Decision, DecisionState};
use chopin_document::edit::{EditBatch, EditOp};
use chopin_document::{DocumentRef, SOURCE_MAX_BYTES};
use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_protocol::agent::{
    AnswerKind, ClientMessage, ControlResult, HostInput, InputAnswer, InputCancel, InputRequest,
    InputResult, InputStatus, ServerMessage, Started,
};
use serde_json::{json, Value};

mod support;

use support::{next, served, Served, DOC_URL};

const PLAN: &str = "# Rollout\n\nWe ship the billing service region by region.\n\n## Risks\n\nWebhooks may double-fire.\n";

async fn seed(s: &Served, text: &str) {
    let open = s.state.open.open(s.doc).await.unwrap();
    let reference = DocumentRef {
        id: s.doc.to_string(),
        url: DOC_URL.into(),
    };
    let batch = EditBatch {
        revision: 0,
        ops: vec![EditOp::Insert {
            after: None,
            content: text.into(),
        }],
    };
    open.edit_plan(reference, &[], &batch, None).await.unwrap();
}

async fn source(s: &Served) -> String {
    s.state.open.open(s.doc).await.unwrap().source().await
}

async fn cards(s: &Served) -> Vec<(usize, Decision)> {
    let text = source(s).await;
    decisions(&text, &blocks(&text))
}

async fn room(s: &Served) -> BrowserSocket {
    s.room().await
}

/// Sends `frame` and returns the answer that names its `requestId`.
async fn ask_room(room: &mut BrowserSocket, frame: Value) -> Value {
    let id = frame["requestId"].clone();
    room.send_json(&frame).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), room.recv_json())
            .await
            .expect("an answer within 10 s")
            .unwrap()
        {
            BrowserEvent::Json(v) if v["requestId"] == id => return v,
            BrowserEvent::Closed { code, reason } => panic!("closed {code} {reason}"),
            _ => {}
        }
    }
}

async fn answer(room: &mut BrowserSocket, id: &str, decision: &str, body: Value) -> Value {
    let mut frame = json!({ "type": "decision:answer", "requestId": id, "decision": decision });
    frame
        .as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    ask_room(room, frame).await
}

/// mona's message starts a turn; the client answers `start`. The session and turn ids.
async fn turn(s: &Served, client: &mut AgentClient, room: &mut BrowserSocket) -> (String, String) {
    let ack = ask_room(
        room,
        json!({ "type": "chat:send", "requestId": "go", "text": "@chopin plan the rollout" }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let _ = s;
    let session = match next(client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(t) => (session, t.turn_id),
        other => panic!("expected turn, got {other:?}"),
    }
}

/// The plan seeded, mona's client attached, her room open and a turn begun: the session and
/// turn ids.
async fn begun() -> (Served, AgentClient, BrowserSocket, String, String) {
    let s = served().await;
    seed(&s, PLAN).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&s, &mut client, &mut room).await;
    (s, client, room, session, turn_id)
}

fn request(
    session: &str,
    turn: &str,
    id: &str,
    block: Option<String>,
    input: Value,
) -> ClientMessage {
    ClientMessage::InputRequest(InputRequest {
        session_id: session.into(),
        request_id: id.into(),
        turn_id: Some(turn.into()),
        run_id: None,
        block,
        input: serde_json::from_value::<HostInput>(input).unwrap(),
    })
}

/// The next `input-result` the client hears (other frames are skipped).
async fn result(client: &mut AgentClient) -> InputResult {
    loop {
        if let ServerMessage::InputResult(r) = next(client).await {
            return r;
        }
    }
}

/// Waits until the document holds `n` Decisions.
async fn until_cards(s: &Served, n: usize) -> Vec<(usize, Decision)> {
    for _ in 0..500 {
        let now = cards(s).await;
        if now.len() == n {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the document never held {n} Decisions:\n{}",
        source(s).await
    );
}

fn questionnaire() -> Value {
    json!({
        "kind": "questionnaire",
        "questions": [
            {
                "question": "Which region goes first in the rollout?",
                "header": "Rollout",
                "options": [
                    {"label": "eu-west", "description": "Smallest traffic"},
                    {"label": "us-east", "preview": "| region | share |\n|---|---|\n| us-east | 61% |"}
                ]
            },
            {"question": "Anything else the canary must cover?"}
        ]
    })
}

#[tokio::test]
async fn rq_01_rq_03_atm_22_atm_23_atm_28_a_questionnaire_lands_after_its_block_and_its_answers_reach_the_client_once(
) {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let text = source(&s).await;
    let prose = blocks(&text)[1].clone();
    client
        .send(&request(
            &session,
            &turn_id,
            "q-3",
            Some(prose.digest.clone()),
            questionnaire(),
        ))
        .await
        .unwrap();

    // ATM-28: one adjacent batch directly after the named block, linked to it.
    let placed = until_cards(&s, 2).await;
    assert_eq!(placed[0].0, 2, "right after block 1:\n{}", source(&s).await);
    assert_eq!(placed[1].0, 3, "adjacent:\n{}", source(&s).await);
    let (first, second) = (&placed[0].1, &placed[1].1);
    // ATM-23 / ATM-24: verbatim text, order, previews as their own field.
    assert_eq!(first.question, "Which region goes first in the rollout?");
    assert_eq!(first.header.as_deref(), Some("Rollout"));
    assert_eq!(first.about.as_deref(), Some(prose.digest.as_str()));
    assert_eq!(first.options[0].label, "eu-west");
    assert_eq!(first.options[0].detail.as_deref(), Some("Smallest traffic"));
    assert_eq!(
        first.options[1].preview.as_deref(),
        Some("| region | share |\n|---|---|\n| us-east | 61% |")
    );
    assert_eq!(second.question, "Anything else the canary must cover?");
    assert!(source(&s).await.starts_with("# Rollout\n\nWe ship"));

    // One card answered: the client hears nothing yet.
    let a = answer(&mut room, "a1", &first.id, json!({ "options": [1] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    let again = answer(&mut room, "a2", &first.id, json!({ "options": [0] })).await;
    assert_eq!(again["type"], "decision:refused", "{again}");
    assert_eq!(again["code"], "decision-closed", "{again}");
    let b = answer(
        &mut room,
        "a3",
        &second.id,
        json!({ "text": "The billing webhooks." }),
    )
    .await;
    assert_eq!(b["type"], "decision:answered", "{b}");

    let r = result(&mut client).await;
    assert_eq!(r.request_id, "q-3");
    assert_eq!(r.status, InputStatus::Answered);
    let Some(InputAnswer::Questionnaire(q)) = r.answer else {
        panic!("{r:?}")
    };
    assert_eq!(q.answers.len(), 2);
    assert_eq!(q.answers[0].question_index, 0);
    assert_eq!(q.answers[0].kind, AnswerKind::Option);
    assert_eq!(q.answers[0].options[0].index, 1);
    assert_eq!(q.answers[0].options[0].label, "us-east");
    assert!(
        q.answers[0].options[0].preview.is_some(),
        "ATM-24: the preview comes back"
    );
    // ATM-25: typed text on a single-select question without previews stands as `custom`.
    assert_eq!(q.answers[1].kind, AnswerKind::Custom);
    assert_eq!(q.answers[1].text.as_deref(), Some("The billing webhooks."));

    // The cards stay, answered, in the document.
    let after = cards(&s).await;
    assert!(after
        .iter()
        .all(|(_, d)| d.state == DecisionState::Answered));
    assert_eq!(after[0].1.answers[0].text, "us-east");
    assert!(after[0].1.answers[0].chose);
    assert_eq!(s.state.questions.waiting(), 0);
}

#[tokio::test]
async fn atm_28_a_block_that_changed_since_puts_the_cards_at_the_end_unlinked() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let confirm = json!({ "kind": "confirm", "title": "Deploy the canary to eu-west?", "message": "It takes\ntwo minutes." });
    client
        .send(&request(
            &session,
            &turn_id,
            "q-4",
            Some(stale.into()),
            confirm,
        ))
        .await
        .unwrap();
    let placed = until_cards(&s, 1).await;
    let text = source(&s).await;
    assert_eq!(placed[0].0, blocks(&text).len() - 1, "at the end:\n{text}");
    assert_eq!(placed[0].1.about, None, "not linked");
    assert_eq!(placed[0].1.hint.as_deref(), Some("It takes\ntwo minutes."));
    let labels: Vec<_> = placed[0]
        .1
        .options
        .iter()
        .map(|o| o.label.as_str())
        .collect();
    assert_eq!(labels, ["Yes", "No"]);

    // ATM-26: only Yes approves; a written answer never does.
    let a = answer(
        &mut room,
        "a1",
        &placed[0].1.id,
        json!({ "text": "yes, go" }),
    )
    .await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Answered);
    assert!(
        matches!(r.answer, Some(InputAnswer::Confirm(c)) if !c.confirmed),
        "written text is not a Yes"
    );
}

#[tokio::test]
async fn atm_26_select_returns_only_a_supplied_choice_and_an_editor_takes_empty_text() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let select = json!({ "kind": "select", "title": "Which queue?", "options": ["fast", "cheap"] });
    client
        .send(&request(&session, &turn_id, "q-5", None, select))
        .await
        .unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();
    let written = answer(&mut room, "a1", &card.id, json!({ "text": "neither" })).await;
    assert_eq!(written["code"], "invalid-answer", "{written}");
    let two = answer(&mut room, "a2", &card.id, json!({ "options": [0, 1] })).await;
    assert_eq!(two["code"], "invalid-answer", "{two}");
    let ok = answer(&mut room, "a3", &card.id, json!({ "options": [1] })).await;
    assert_eq!(ok["type"], "decision:answered", "{ok}");
    let r = result(&mut client).await;
    assert!(
        matches!(r.answer, Some(InputAnswer::Select(ref c)) if c.choice == "cheap"),
        "{r:?}"
    );

    let editor =
        json!({ "kind": "editor", "title": "Release notes", "prefill": "## Changes\n\n- " });
    client
        .send(&request(&session, &turn_id, "q-6", None, editor))
        .await
        .unwrap();
    let card = until_cards(&s, 2).await[1].1.clone();
    assert_eq!(
        card.prefill.as_deref(),
        Some("## Changes\n\n- "),
        "verbatim"
    );
    let empty = answer(&mut room, "a4", &card.id, json!({ "text": "" })).await;
    assert_eq!(empty["type"], "decision:answered", "{empty}");
    let r = result(&mut client).await;
    assert_eq!(
        r.status,
        InputStatus::Answered,
        "explicitly empty text is an answer"
    );
    assert!(
        matches!(r.answer, Some(InputAnswer::Editor(ref t)) if t.text.is_empty()),
        "{r:?}"
    );
}

#[tokio::test]
async fn atm_29_a_stop_withdraws_open_cards_and_a_late_answer_cannot_approve_them() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    client
        .send(&request(&session, &turn_id, "q-7", None, questionnaire()))
        .await
        .unwrap();
    let placed = until_cards(&s, 2).await;
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stopped = room.next_of_type("planner:stopped").await.unwrap();
    assert_eq!(stopped["stopped"], true);
    let r = result(&mut client).await;
    assert_eq!(r.request_id, "q-7");
    assert_eq!(r.status, InputStatus::Cancelled);
    until_cards(&s, 0).await;
    assert_eq!(
        source(&s).await,
        PLAN,
        "the cards' nodes are gone, nothing else changed"
    );
    let late = answer(
        &mut room,
        "late",
        &placed[0].1.id,
        json!({ "options": [0] }),
    )
    .await;
    assert_eq!(late["code"], "decision-not-found", "{late}");
    // Chat records the withdrawal by @chopin.
    s.state.transcript.settled().await;
    let chat = s.store.transcript(s.doc, 0, 100).await.unwrap();
    assert!(
        chat.iter()
            .any(|e| e.kind == "system" && e.body.starts_with("@chopin withdrew the question")),
        "{chat:?}"
    );
}

#[tokio::test]
async fn atm_30_a_member_cancellation_keeps_the_answers_already_given() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    client
        .send(&request(&session, &turn_id, "q-8", None, questionnaire()))
        .await
        .unwrap();
    let placed = until_cards(&s, 2).await;
    let a = answer(&mut room, "a1", &placed[0].1.id, json!({ "options": [0] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    let c = ask_room(
        &mut room,
        json!({ "type": "decision:cancel", "requestId": "c1", "decision": placed[1].1.id }),
    )
    .await;
    assert_eq!(c["type"], "decision:cancelled", "{c}");
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Cancelled);
    assert_eq!(r.message.as_deref(), Some("@mona cancelled the question."));
    let left = until_cards(&s, 1).await;
    assert_eq!(left[0].1.id, placed[0].1.id);
    assert_eq!(left[0].1.state, DecisionState::Answered);
}

#[tokio::test]
async fn rq_01_input_cancel_and_the_link_closing_withdraw_the_cards() {
    let (s, mut client, _room, session, turn_id) = begun().await;
    let input = json!({ "kind": "input", "title": "Which ticket?", "placeholder": "BILL-123" });
    client
        .send(&request(&session, &turn_id, "q-9", None, input.clone()))
        .await
        .unwrap();
    let placed = until_cards(&s, 1).await;
    assert_eq!(placed[0].1.hint.as_deref(), Some("BILL-123"));
    client
        .send(&ClientMessage::InputCancel(InputCancel {
            request_id: "q-9".into(),
        }))
        .await
        .unwrap();
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Cancelled);
    until_cards(&s, 0).await;

    client
        .send(&request(&session, &turn_id, "q-10", None, input))
        .await
        .unwrap();
    until_cards(&s, 1).await;
    drop(client);
    until_cards(&s, 0).await;
    assert_eq!(s.state.questions.waiting(), 0);
}

#[tokio::test]
async fn a_question_whose_cards_would_pass_the_source_limit_fails_before_any_card_appears() {
    let s = served().await;
    seed(&s, &format!("{}\n", "x".repeat(255 * 1024))).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&s, &mut client, &mut room).await;
    let input = json!({ "kind": "editor", "title": "Notes", "prefill": "y".repeat(2 * 1024) });
    client
        .send(&request(&session, &turn_id, "q-11", None, input))
        .await
        .unwrap();
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Failed);
    assert!(r.message.unwrap().contains("256 KiB"));
    assert!(cards(&s).await.is_empty());
}

#[tokio::test]
async fn rr_01_a_session_waiting_on_a_question_outlives_its_turn_until_the_answer() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let input = json!({ "kind": "input", "title": "Which ticket?" });
    client
        .send(&request(&session, &turn_id, "q-12", None, input))
        .await
        .unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();
    client
        .send(&ClientMessage::TurnEnd(chopin_protocol::agent::TurnEnd {
            turn_id,
            status: chopin_protocol::agent::TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    s.state.turns.until_idle(s.doc).await;
    assert_eq!(
        s.state.turns.kept_session(s.doc).as_deref(),
        Some(session.as_str())
    );
    assert_eq!(cards(&s).await.len(), 1, "the question still waits");

    let a = answer(&mut room, "a1", &card.id, json!({ "text": "BILL-7" })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Answered);
    let destroyed = loop {
        if let ServerMessage::Destroy(d) = next(&mut client).await {
            break d;
        }
    };
    assert_eq!(
        destroyed.session_id, session,
        "let go once nothing keeps it"
    );
}

async fn call(client: &mut AgentClient, turn: &str, id: &str, name: &str, input: Value) {
    client
        .send(&ClientMessage::HostToolCall(
            chopin_protocol::agent::HostToolCall {
                turn_id: turn.into(),
                call_id: id.into(),
                name: name.into(),
                input,
            },
        ))
        .await
        .unwrap();
}

/// The next `host-tool-result` the client hears.
async fn tool_result(client: &mut AgentClient) -> chopin_protocol::agent::HostToolResult {
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            return r;
        }
    }
}

#[tokio::test]
async fn coa_23_ask_waits_for_every_answer_and_returns_them() {
    let (s, mut client, mut room, _, turn_id) = begun().await;
    let text = source(&s).await;
    let risks = blocks(&text)[2].digest.clone();
    call(
        &mut client,
        &turn_id,
        "c1",
        "ask",
        json!({ "block": risks, "questions": [
            { "question": "Which region first?", "options": [
                {"label": "eu-west"}, {"label": "us-east", "preview": "| a | b |\n|---|---|"}
            ]},
            { "question": "Who signs off?" }
        ]}),
    )
    .await;
    let placed = until_cards(&s, 2).await;
    assert_eq!(placed[0].0, 3, "ATM-28: right after the block named");
    answer(&mut room, "a1", &placed[0].1.id, json!({ "options": [1] })).await;
    // Still waiting with one card unanswered.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), tool_result(&mut client))
            .await
            .is_err(),
        "ask returned before every card was answered"
    );
    answer(&mut room, "a2", &placed[1].1.id, json!({ "text": "@lisa" })).await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.call_id, "c1");
    assert_eq!(
        r.output["answers"][0]["options"][0]["label"], "us-east",
        "{:?}",
        r.output
    );
    assert_eq!(
        r.output["answers"][0]["options"][0]["preview"],
        "| a | b |\n|---|---|"
    );
    assert_eq!(r.output["answers"][1]["text"], "@lisa");
}

async fn plan_revision(s: &Served) -> u64 {
    s.store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision as u64
}

#[tokio::test]
async fn ctx_12_an_answered_ask_carries_current_plan_as_read_plans_view_sees_it() {
    let (s, mut client, mut room, _, turn_id) = begun().await;
    call(
        &mut client,
        &turn_id,
        "c1",
        "ask",
        json!({ "questions": [{ "question": "Which region first?", "options": [{"label": "eu-west"}, {"label": "us-east"}] }] }),
    )
    .await;
    let placed = until_cards(&s, 1).await;
    answer(&mut room, "a1", &placed[0].1.id, json!({ "options": [0] })).await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    let plan = &r.output["current_plan"];
    let text = source(&s).await;
    assert_eq!(plan["document"]["url"], DOC_URL, "{plan}");
    assert_eq!(plan["revision"], plan_revision(&s).await, "{plan}");
    assert_eq!(plan["source"], text.as_str(), "the answer is in it: {plan}");
    assert_eq!(
        plan["blocks"].as_array().map(Vec::len),
        Some(blocks(&text).len())
    );
    assert_eq!(plan["questions"][0]["id"], placed[0].1.id.as_str());
    assert_eq!(plan["questions"][0]["answers"][0]["text"], "eu-west");
    assert_eq!(plan["comments"], json!([]));
    assert_eq!(r.output["answers"][0]["options"][0]["label"], "eu-west");
}

#[tokio::test]
async fn ctx_15_open_decisions_returns_current_plan_the_same_way() {
    let (s, mut client, _room, _, turn_id) = begun().await;
    call(
        &mut client,
        &turn_id,
        "c1",
        "open_decisions",
        json!({ "decisions": [{ "question": "Which region first?" }, { "question": "Who signs off?" }] }),
    )
    .await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    let plan = &r.output["current_plan"];
    assert_eq!(plan["revision"], plan_revision(&s).await, "{plan}");
    assert_eq!(plan["source"], source(&s).await.as_str());
    let ids: Vec<&str> = plan["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        r.output["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn ctx_16_ctx_17_a_large_plan_leaves_its_source_out_and_the_result_stays_within_one_read() {
    let s = served().await;
    let long = format!(
        "# Rollout\n\n{}\n",
        "We ship region by region. ".repeat(1200)
    );
    seed(&s, &long).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (_, turn_id) = turn(&s, &mut client, &mut room).await;
    let questions: Vec<Value> = (1..=10)
        .map(|n| json!({ "question": format!("Question {n}: {}?", "which way ".repeat(90)), "options": [{"label": "this way"}, {"label": "that way"}] }))
        .collect();
    call(
        &mut client,
        &turn_id,
        "c1",
        "open_decisions",
        json!({ "decisions": questions }),
    )
    .await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    let plan = &r.output["current_plan"];
    assert!(
        plan.get("source").is_none() && plan.get("blocks").is_none(),
        "{plan}"
    );
    let text = source(&s).await;
    assert_eq!(plan["source_omitted"]["bytes"], text.len());
    assert_eq!(plan["source_omitted"]["blocks"], blocks(&text).len());
    assert_eq!(plan["source_omitted"]["read"], "read_plan");
    assert_eq!(plan["revision"], plan_revision(&s).await);
    let kept = plan["questions"].as_array().unwrap().len();
    assert!(
        kept < 10,
        "ten long cards do not fit in 8,000 bytes: {kept}"
    );
    assert_eq!(plan["questions_omitted"], 10 - kept);
    assert_eq!(plan["comments_omitted"], 0);
    assert!(serde_json::to_vec(plan).unwrap().len() <= 8_000);
    assert!(serde_json::to_vec(&r.output).unwrap().len() <= 16_000);
}

#[tokio::test]
async fn ctx_14_an_owner_that_no_longer_owns_the_document_gets_only_the_outcomes() {
    let (s, mut client, mut room, _, turn_id) = begun().await;
    call(
        &mut client,
        &turn_id,
        "c1",
        "ask",
        json!({ "questions": [{ "question": "Which region first?", "options": [{"label": "eu-west"}, {"label": "us-east"}] }] }),
    )
    .await;
    let placed = until_cards(&s, 1).await;
    // The stored ownership moves on while the question waits: the revalidation fails.
    let owned = s.store.ownership(s.doc).await.unwrap();
    s.store
        .release_ownership(s.doc, owned.generation)
        .await
        .unwrap();
    answer(&mut room, "a1", &placed[0].1.id, json!({ "options": [1] })).await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output["answers"][0]["options"][0]["label"], "us-east");
    assert!(r.output.get("current_plan").is_none(), "{:?}", r.output);
}

#[tokio::test]
async fn rt_10_a_turn_that_ends_while_ask_waits_withdraws_its_cards() {
    let (s, mut client, _room, _, turn_id) = begun().await;
    call(
        &mut client,
        &turn_id,
        "c1",
        "ask",
        json!({ "questions": [{ "question": "Ship it?" }] }),
    )
    .await;
    until_cards(&s, 1).await;
    // The connection closes mid-turn: the turn ends with an error, and the ask it was waiting
    // in is stopped and its card withdrawn.
    drop(client);
    s.state.turns.until_idle(s.doc).await;
    until_cards(&s, 0).await;
    assert_eq!(source(&s).await, PLAN);
    assert_eq!(s.state.questions.waiting(), 0);
}

#[tokio::test]
async fn atm_36_a_stop_while_ask_waits_withdraws_the_question_and_chat_says_so() {
    let (s, mut client, mut room, _, turn_id) = begun().await;
    call(
        &mut client,
        &turn_id,
        "c1",
        "ask",
        json!({ "questions": [{ "question": "Ship it?" }] }),
    )
    .await;
    until_cards(&s, 1).await;
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let r = tool_result(&mut client).await;
    assert!(r.is_error, "{r:?}");
    until_cards(&s, 0).await;
    s.state.transcript.settled().await;
    let chat = s.store.transcript(s.doc, 0, 100).await.unwrap();
    assert!(
        chat.iter()
            .any(|e| e.body.contains("Ship it?") && e.body.contains("@mona stopped")),
        "{chat:?}"
    );
}

#[tokio::test]
async fn coa_02_coa_03_open_decisions_opens_up_to_ten_independent_cards_without_waiting() {
    let (s, mut client, mut room, _, turn_id) = begun().await;
    let eleven: Vec<Value> = (0..11)
        .map(|i| json!({ "question": format!("Q{i}?") }))
        .collect();
    call(
        &mut client,
        &turn_id,
        "c1",
        "open_decisions",
        json!({ "decisions": eleven }),
    )
    .await;
    let r = tool_result(&mut client).await;
    assert!(r.is_error, "COA-03: more than ten is refused: {r:?}");
    assert!(cards(&s).await.is_empty(), "nothing placed");

    let three: Vec<Value> = vec![
        json!({ "question": "Budget?", "options": [{"label": "low"}, {"label": "high"}] }),
        json!({ "question": "Deadline?" }),
        json!({ "question": "Owner?", "multiSelect": true, "options": [{"label": "a"}, {"label": "b"}] }),
    ];
    call(
        &mut client,
        &turn_id,
        "c2",
        "open_decisions",
        json!({ "decisions": three }),
    )
    .await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    let ids = r.output["decisions"].as_array().unwrap().clone();
    assert_eq!(ids.len(), 3);
    let placed = cards(&s).await;
    assert_eq!(placed.len(), 3);
    assert!(placed[2].1.multi);
    call(
        &mut client,
        &turn_id,
        "c3",
        "open_decision",
        json!({ "question": "One more?" }),
    )
    .await;
    let r = tool_result(&mut client).await;
    assert!(!r.is_error, "{r:?}");
    // Answered later, from the room, each on its own.
    let a = answer(
        &mut room,
        "a1",
        ids[2].as_str().unwrap(),
        json!({ "options": [0, 1] }),
    )
    .await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    assert_eq!(cards(&s).await[2].1.state, DecisionState::Answered);
}

#[tokio::test]
async fn rq_02_ses_05_atm_27_an_answer_to_a_workflow_question_waits_while_its_root_run_is_paused() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let report = |status: &str| {
        ClientMessage::Runs(serde_json::from_value(json!({
            "sessionId": session,
            "runs": [
                {"runId": "run-12", "name": "canary", "status": status},
                {"runId": "run-13", "name": "canary/approve", "status": "waiting", "rootRunId": "run-12"}
            ]
        })).unwrap())
    };
    client.send(&report("paused")).await.unwrap();
    let mut asked = request(
        &session,
        &turn_id,
        "q-20",
        None,
        json!({ "kind": "confirm", "title": "Approve the canary?" }),
    );
    if let ClientMessage::InputRequest(r) = &mut asked {
        r.run_id = Some("run-13".into());
    }
    client.send(&asked).await.unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();
    // ATM-27: the question exactly as asked, no run or stage ids.
    assert_eq!(card.question, "Approve the canary?");
    assert!(!source(&s).await.contains("run-1"), "{}", source(&s).await);

    let a = answer(&mut room, "a1", &card.id, json!({ "options": [0] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), result(&mut client))
            .await
            .is_err(),
        "held while the root run is paused"
    );
    client.send(&report("running")).await.unwrap();
    let r = result(&mut client).await;
    assert_eq!(r.request_id, "q-20");
    assert!(
        matches!(r.answer, Some(InputAnswer::Confirm(ref c)) if c.confirmed),
        "{r:?}"
    );
}

#[tokio::test]
async fn atm_38_an_expired_card_cannot_be_answered() {
    let s = served().await;
    let expired =
        "```decision\nid: old-1\nstate: expired\nquestion: Which quay first?\noption: North\n```\n";
    seed(&s, &format!("{PLAN}\n{expired}")).await;
    let mut room = room(&s).await;
    let a = answer(&mut room, "a1", "old-1", json!({ "options": [0] })).await;
    assert_eq!(a["code"], "decision-closed", "{a}");
    assert!(a["message"].as_str().unwrap().contains("expired"), "{a}");
    assert_eq!(cards(&s).await[0].1.state, DecisionState::Expired);
}

#[tokio::test]
async fn atm_31_archiving_the_document_withdraws_its_questions() {
    let (s, mut client, _room, session, turn_id) = begun().await;
    client
        .send(&request(&session, &turn_id, "q-30", None, questionnaire()))
        .await
        .unwrap();
    until_cards(&s, 2).await;
    let archive = http::Request::post(format!("http://{}/api/documents/{}/archive", s.host, s.doc))
        .header("authorization", format!("Bearer {}", s.mona))
        .header("content-type", "application/json")
        .body(axum::body::Bytes::from_static(br#"{"archived": true}"#))
        .unwrap();
    let answer = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        archive,
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200);
    let r = loop {
        match tokio::time::timeout(Duration::from_secs(10), client.recv()).await {
            Ok(Ok(chopin_fixtures::agent::Event::Message(ServerMessage::InputResult(r)))) => {
                break r
            }
            Ok(Ok(chopin_fixtures::agent::Event::Message(_))) => {}
            other => panic!("no input-result before the link ended: {other:?}"),
        }
    };
    assert_eq!(r.status, InputStatus::Cancelled);
    assert_eq!(r.message.as_deref(), Some("The document was archived."));
}

#[tokio::test]
async fn ses_05_a_paused_runs_question_leaves_decisions_and_comes_back_on_resume() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let report = |status: &str| {
        ClientMessage::Runs(serde_json::from_value(json!({
            "sessionId": session,
            "runs": [
                {"runId": "run-40", "name": "rollout", "status": status},
                {"runId": "run-41", "name": "rollout/ask", "status": "waiting", "rootRunId": "run-40"}
            ]
        })).unwrap())
    };
    client.send(&report("running")).await.unwrap();
    let mut asked = request(&session, &turn_id, "q-40", None, questionnaire());
    if let ClientMessage::InputRequest(r) = &mut asked {
        r.run_id = Some("run-41".into());
    }
    client.send(&asked).await.unwrap();
    let placed = until_cards(&s, 2).await;
    let (first, second) = (placed[0].1.clone(), placed[1].1.clone());
    let a = answer(&mut room, "a1", &first.id, json!({ "options": [0] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");

    // Paused: the open card leaves Decisions; the answered one stays as it is.
    client.send(&report("paused")).await.unwrap();
    let aside = until_cards(&s, 1).await;
    assert_eq!(aside[0].1.id, first.id);
    assert_eq!(aside[0].1.state, DecisionState::Answered);
    let late = answer(&mut room, "a2", &second.id, json!({ "text": "Webhooks." })).await;
    assert_eq!(late["code"], "decision-not-found", "{late}");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), result(&mut client))
            .await
            .is_err(),
        "the question still waits, neither answered nor withdrawn"
    );
    assert_eq!(s.state.questions.waiting(), 1);

    // Resumed: the same card is presented again and takes the answer.
    client.send(&report("running")).await.unwrap();
    let back = until_cards(&s, 2).await;
    assert_eq!(back[1].1.id, second.id);
    assert_eq!(back[1].1.state, DecisionState::Open);
    assert_eq!(back[1].1.question, second.question);
    let b = answer(&mut room, "a3", &second.id, json!({ "text": "Webhooks." })).await;
    assert_eq!(b["type"], "decision:answered", "{b}");
    let r = result(&mut client).await;
    assert_eq!(r.request_id, "q-40");
    assert_eq!(r.status, InputStatus::Answered);
    let Some(InputAnswer::Questionnaire(q)) = r.answer else {
        panic!("{r:?}")
    };
    assert_eq!(q.answers.len(), 2, "{q:?}");
    assert_eq!(q.answers[1].text.as_deref(), Some("Webhooks."));
}

#[tokio::test]
async fn ses_05_atm_36_stop_pauses_a_runs_question_and_resume_presents_it_again() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let report = |status: &str| {
        ClientMessage::Runs(
            serde_json::from_value(json!({
                "sessionId": session,
                "runs": [{"runId": "run-60", "name": "rollout", "status": status}]
            }))
            .unwrap(),
        )
    };
    client.send(&report("running")).await.unwrap();
    let mut asked = request(
        &session,
        &turn_id,
        "q-60",
        None,
        json!({ "kind": "confirm", "title": "Promote the canary?" }),
    );
    if let ClientMessage::InputRequest(r) = &mut asked {
        r.run_id = Some("run-60".into());
    }
    client.send(&asked).await.unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();

    // Stop Planner: the turn is aborted and the run paused; its question is not withdrawn.
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stop = loop {
        match next(&mut client).await {
            ServerMessage::Stop(stop) => break stop,
            ServerMessage::InputResult(r) => panic!("the run's question was ended: {r:?}"),
            _ => {}
        }
    };
    client.send(&report("paused")).await.unwrap();
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: stop.request_id,
            ok: true,
            message: None,
        }))
        .await
        .unwrap();
    until_cards(&s, 0).await;
    assert_eq!(s.state.questions.waiting(), 1, "the question still waits");

    room.send_json(&json!({ "type": "planner:resume" }))
        .await
        .unwrap();
    let resume = loop {
        match next(&mut client).await {
            ServerMessage::Resume(resume) => break resume,
            ServerMessage::InputResult(r) => panic!("the run's question was ended: {r:?}"),
            _ => {}
        }
    };
    client.send(&report("running")).await.unwrap();
    client
        .send(&ClientMessage::ControlResult(ControlResult {
            request_id: resume.request_id,
            ok: true,
            message: None,
        }))
        .await
        .unwrap();
    let back = until_cards(&s, 1).await[0].1.clone();
    assert_eq!(
        (back.id.as_str(), back.state),
        (card.id.as_str(), DecisionState::Open)
    );
    let a = answer(&mut room, "a1", &card.id, json!({ "options": [0] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    let r = result(&mut client).await;
    assert_eq!(
        (r.request_id.as_str(), r.status),
        ("q-60", InputStatus::Answered)
    );
}

#[tokio::test]
async fn atm_39_host_input_is_held_only_to_the_aggregate_bounds() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let long_question = format!("Which of these goes first? {}", "Context. ".repeat(400));
    let options: Vec<Value> = (0..25)
        .map(|i| json!({ "label": format!("region-{i}"), "description": "d".repeat(2_000) }))
        .collect();
    let mut questions = vec![json!({ "question": long_question, "options": options })];
    questions.extend((0..5).map(|i| json!({ "question": format!("Question {i}?") })));
    client
        .send(&request(
            &session,
            &turn_id,
            "q-39",
            None,
            json!({ "kind": "questionnaire", "questions": questions }),
        ))
        .await
        .unwrap();
    let placed = until_cards(&s, 6).await;
    let first = &placed[0].1;
    assert_eq!(first.question, long_question, "never truncated");
    assert_eq!(first.options.len(), 25);
    assert_eq!(
        first.options[24].detail.as_deref(),
        Some("d".repeat(2_000).as_str())
    );

    let written = "w".repeat(10_000);
    let a = answer(&mut room, "a0", &first.id, json!({ "options": [24] })).await;
    assert_eq!(a["type"], "decision:answered", "{a}");
    for (i, (_, card)) in placed.iter().enumerate().skip(1) {
        let a = answer(
            &mut room,
            &format!("a{i}"),
            &card.id,
            json!({ "text": written }),
        )
        .await;
        assert_eq!(a["type"], "decision:answered", "{a}");
    }
    let r = result(&mut client).await;
    assert_eq!(r.status, InputStatus::Answered, "{r:?}");
    let Some(InputAnswer::Questionnaire(q)) = r.answer else {
        panic!("{r:?}")
    };
    assert_eq!(q.answers[0].options[0].label, "region-24");
    assert_eq!(q.answers[5].text.as_deref(), Some(written.as_str()));
}

/// How many bytes one confirm card adds after a one-paragraph document (learnt on a server of
/// its own: the card's text is the same but for its id's hex digits).
async fn bytes_one_card_adds() -> usize {
    let s = served().await;
    let seed_text = "x\n";
    seed(&s, seed_text).await;
    let mut client = s.attach(&[]).await;
    let mut room = room(&s).await;
    let (session, turn_id) = turn(&s, &mut client, &mut room).await;
    let input = json!({ "kind": "confirm", "title": "Ship it?" });
    client
        .send(&request(&session, &turn_id, "q-1", None, input))
        .await
        .unwrap();
    until_cards(&s, 1).await;
    source(&s).await.len() - seed_text.len()
}

/// ATM-40 and issue 24 item 12: cards that bring the document to exactly 256 KiB (262,144
/// bytes) are placed; one byte more and the question fails before any card appears.
#[tokio::test]
async fn atm_40_cards_reaching_exactly_256_kib_are_placed_and_one_byte_more_fails() {
    let added = bytes_one_card_adds().await;
    for (extra, placed) in [(0usize, true), (1, false)] {
        let s = served().await;
        let paragraph = "x".repeat(SOURCE_MAX_BYTES - added - 1 + extra);
        seed(&s, &format!("{paragraph}\n")).await;
        let mut client = s.attach(&[]).await;
        let mut room = room(&s).await;
        let (session, turn_id) = turn(&s, &mut client, &mut room).await;
        let input = json!({ "kind": "confirm", "title": "Ship it?" });
        client
            .send(&request(&session, &turn_id, "q-1", None, input))
            .await
            .unwrap();
        if placed {
            until_cards(&s, 1).await;
            assert_eq!(source(&s).await.len(), SOURCE_MAX_BYTES);
        } else {
            let r = result(&mut client).await;
            assert_eq!(r.status, InputStatus::Failed);
            assert!(r.message.unwrap().contains("256 KiB"));
            assert!(cards(&s).await.is_empty());
        }
    }
}

/// ATM-41: a written answer holds at most one shared-draft edit (64 KiB) — one byte more is
/// refused `answer-too-long`, not `temporarily-unavailable` — and may not take the document past
/// its 256 KiB (`document-too-large`); text is never cut.
#[tokio::test]
async fn atm_41_a_written_answer_is_bounded_by_64_kib_and_by_the_whole_document() {
    let (s, mut client, mut room, session, turn_id) = begun().await;
    let editor = json!({ "kind": "editor", "title": "Release notes" });
    client
        .send(&request(&session, &turn_id, "q-1", None, editor.clone()))
        .await
        .unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();
    let over = answer(
        &mut room,
        "a1",
        &card.id,
        json!({ "text": "y".repeat(64 * 1024 + 1) }),
    )
    .await;
    assert_eq!(over["code"], "answer-too-long", "{over}");
    assert!(over["message"].as_str().unwrap().contains("64 KiB"));
    let fits = answer(
        &mut room,
        "a2",
        &card.id,
        json!({ "text": "y".repeat(64 * 1024) }),
    )
    .await;
    assert_eq!(fits["type"], "decision:answered", "{fits}");

    // A document near its limit: an answer that fits 64 KiB but not the document.
    let s = served().await;
    seed(
        &s,
        &format!("{}\n", "x".repeat(SOURCE_MAX_BYTES - 10 * 1024)),
    )
    .await;
    let mut client = s.attach(&[]).await;
    let mut near = self::room(&s).await;
    let (session, turn_id) = turn(&s, &mut client, &mut near).await;
    client
        .send(&request(&session, &turn_id, "q-2", None, editor))
        .await
        .unwrap();
    let card = until_cards(&s, 1).await[0].1.clone();
    let before = source(&s).await;
    let big = answer(
        &mut near,
        "a3",
        &card.id,
        json!({ "text": "z".repeat(20 * 1024) }),
    )
    .await;
    assert_eq!(big["code"], "document-too-large", "{big}");
    assert_eq!(source(&s).await, before, "nothing written");
}
