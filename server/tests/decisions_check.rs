//! The decisions check on the remote harness, with the server's built-in classifier (no
//! `CLASSIFIER_MODEL`): every complete Planner message is judged before Chat shows it; a
//! message asking for input in prose is withheld and the same session gets one continuation
//! turn, told only to open Decision cards; cards carry stable keys. The model classifier's
//! failure modes are in the simulator's scenarios and the e2e suite.

use chopin_fixtures::agent::AgentClient;
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, PartMessage, ServerMessage, Started, TextPart, TurnEnd, TurnStatus,
};
use chopin_server::turns::{
    unchecked_words, withheld_summary, PlannerRequest, CONTINUATION_PROMPT, FAILED_TO_ASK_WORDS,
};
use serde_json::{json, Value};

mod support;

use support::{next, served, Served as Setup, DOC_URL};

fn request(s: &Setup, text: &str) -> PlannerRequest {
    PlannerRequest {
        document: s.doc,
        document_url: DOC_URL.into(),
        from_login: "mona".into(),
        sender: None,
        text: text.into(),
        focus: None,
        follow_up: None,
        draft: false,
        notice_saved: None,
        command: None,
        files: Vec::new(),
        mentions: Vec::new(),
        references: Vec::new(),
        explicit: true,
        comment: None,
    }
}

async fn say(client: &mut AgentClient, turn: &str, text: &str) {
    client
        .send(&ClientMessage::Part(PartMessage {
            turn_id: turn.into(),
            part: chopin_protocol::agent::Part::Text(TextPart { text: text.into() }),
        }))
        .await
        .unwrap();
}

async fn call(client: &mut AgentClient, turn: &str, id: &str, name: &str, input: Value) -> Value {
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.into(),
            call_id: id.into(),
            name: name.into(),
            input,
        }))
        .await
        .unwrap();
    loop {
        if let ServerMessage::HostToolResult(r) = next(client).await {
            assert_eq!(r.call_id, id);
            return json!({ "output": r.output, "isError": r.is_error });
        }
    }
}

async fn end_turn(client: &mut AgentClient, turn: &str) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.into(),
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
}

/// mona's `text` to the Planner; the client answers `start`: the session, turn and prompt.
async fn begin(s: &Setup, client: &mut AgentClient, text: &str) -> (String, String) {
    s.state.turns.request(request(s, text)).await.unwrap();
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

/// The next frame is the continuation turn on `session`: its turn id.
async fn continuation(client: &mut AgentClient, session: &str) -> String {
    loop {
        match next(client).await {
            ServerMessage::Turn(t) => {
                assert_eq!(
                    t.session_id, session,
                    "COA-06: the same session is continued"
                );
                assert_eq!(
                    t.prompt, CONTINUATION_PROMPT,
                    "COA-06: the continuation is told only to open cards; the request is not replayed"
                );
                return t.turn_id;
            }
            ServerMessage::Destroy(d) => {
                panic!(
                    "COA-06: the session {} was destroyed before its continuation",
                    d.session_id
                )
            }
            _ => {}
        }
    }
}

/// The client's next `destroy` (after the last pass of a turn).
async fn destroyed(client: &mut AgentClient) -> String {
    loop {
        if let ServerMessage::Destroy(d) = next(client).await {
            return d.session_id;
        }
    }
}

async fn settle(s: &Setup) {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        s.state.turns.until_idle(s.doc).await;
        s.state.transcript.settled().await;
    })
    .await
    .expect("the turn ended");
}

async fn posts(s: &Setup) -> Vec<(String, String)> {
    settle(s).await;
    let entries = s.store.transcript(s.doc, 0, 100).await.unwrap();
    entries
        .into_iter()
        .filter(|e| e.kind != "user")
        .map(|e| (e.kind, e.body))
        .collect()
}

async fn metrics(s: &Setup) -> String {
    use chopin_server::runtime::connector::{self, TcpConnector};
    let request = http::Request::get(format!("http://{}/metrics", s.host))
        .body(axum::body::Bytes::new())
        .unwrap();
    let response = connector::send(&TcpConnector, request).await.unwrap();
    String::from_utf8(response.body.to_vec()).unwrap()
}

fn card(question: &str, key: &str) -> Value {
    json!({ "question": question, "key": key, "options": [{ "label": "CSV" }, { "label": "JSON" }] })
}

#[tokio::test]
async fn coa_05_coa_06_a_request_for_input_is_withheld_and_one_continuation_opens_its_cards() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let (session, turn) = begin(&s, &mut client, "@chopin plan the export").await;
    // A reply before a tool call is checked and published; the closing question is withheld.
    say(&mut client, &turn, "I read the plan.").await;
    let read = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert_eq!(read["isError"], false, "{read}");
    say(
        &mut client,
        &turn,
        "Which format should the export use, CSV or JSON?",
    )
    .await;
    end_turn(&mut client, &turn).await;

    let next_turn = continuation(&mut client, &session).await;
    let opened = call(
        &mut client,
        &next_turn,
        "c2",
        "open_decisions",
        json!({ "decisions": [card("Which export format?", "export-format")] }),
    )
    .await;
    assert_eq!(opened["isError"], false, "{opened}");
    say(
        &mut client,
        &next_turn,
        "I opened the export format as a card.",
    )
    .await;
    end_turn(&mut client, &next_turn).await;
    assert_eq!(destroyed(&mut client).await, session);

    assert_eq!(
        posts(&s).await,
        vec![
            ("planner".to_owned(), "I read the plan.".to_owned()),
            (
                "planner".to_owned(),
                "I opened the export format as a card.".to_owned()
            ),
        ],
        "COA-05: only replies reach Chat; the withheld question never does"
    );
    let source = s.state.open.open(s.doc).await.unwrap().source().await;
    assert!(source.contains("Which export format?"), "{source}");
}

#[tokio::test]
async fn coa_06_the_continuation_gets_no_continuation_of_its_own_and_coa_12_without_cards_the_turn_fails(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let (session, turn) = begin(&s, &mut client, "@chopin plan the export").await;
    say(&mut client, &turn, "Which format should the export use?").await;
    end_turn(&mut client, &turn).await;
    let next_turn = continuation(&mut client, &session).await;
    say(&mut client, &next_turn, "Please tell me the format.").await;
    end_turn(&mut client, &next_turn).await;
    // Exactly one continuation: the session ends after it.
    assert_eq!(destroyed(&mut client).await, session);
    assert_eq!(
        posts(&s).await,
        vec![("system".to_owned(), FAILED_TO_ASK_WORDS.to_owned())],
        "COA-12: both replies withheld and no card opened: the turn reports failure"
    );
    let metrics = metrics(&s).await;
    assert!(
        metrics.contains(r#"chopin_turns_ended_total{harness="remote",result="failed"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"chopin_classifier_checks_total{verdict="request-for-input"} 2"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn coa_11_both_replies_withheld_after_cards_were_opened_gives_the_fixed_summary() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let (session, turn) = begin(&s, &mut client, "@chopin plan the export").await;
    say(&mut client, &turn, "Which format, and which columns?").await;
    end_turn(&mut client, &turn).await;
    let next_turn = continuation(&mut client, &session).await;
    let opened = call(
        &mut client,
        &next_turn,
        "c1",
        "open_decisions",
        json!({ "decisions": [card("Which export format?", "format"), card("Which columns?", "columns")] }),
    )
    .await;
    assert_eq!(opened["isError"], false, "{opened}");
    say(&mut client, &next_turn, "Anything else you want?").await;
    end_turn(&mut client, &next_turn).await;
    assert_eq!(
        posts(&s).await,
        vec![("system".to_owned(), withheld_summary(2))],
        "COA-11: the count of cards in fixed words; never the withheld text"
    );
    assert_eq!(
        withheld_summary(2),
        "chopin opened 2 decision cards in the document for you to answer. Its reply in Chat was withheld."
    );
    let _ = unchecked_words;
}

#[tokio::test]
async fn coa_07_coa_08_coa_09_stable_keys_count_a_card_while_it_holds_its_question_and_never_reopen_a_discarded_one(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let (session, turn) = begin(&s, &mut client, "@chopin plan the export").await;
    let first = call(
        &mut client,
        &turn,
        "c1",
        "open_decisions",
        json!({ "decisions": [card("Which export format?", "format"), card("Which columns?", "columns")] }),
    )
    .await;
    assert_eq!(first["isError"], false, "{first}");
    let ids: Vec<String> = first["output"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{first}");

    // COA-07: the same keys for the same questions count the open cards; nothing is placed.
    let again = call(
        &mut client,
        &turn,
        "c2",
        "open_decisions",
        json!({ "decisions": [card("Which export format?", "format")] }),
    )
    .await;
    assert_eq!(again["isError"], false, "{again}");
    assert_eq!(again["output"]["decisions"], json!([]), "{again}");
    assert_eq!(
        again["output"]["existing"],
        json!([ids[0].clone()]),
        "{again}"
    );

    // COA-08: a key repeated for a different question refuses the batch; nothing is opened.
    let before = s.state.open.open(s.doc).await.unwrap().source().await;
    let clash = call(
        &mut client,
        &turn,
        "c3",
        "open_decisions",
        json!({ "decisions": [card("Which compression?", "new-one"), card("Which encoding?", "format")] }),
    )
    .await;
    assert_eq!(clash["isError"], true, "{clash}");
    assert!(
        clash["output"]
            .to_string()
            .contains("already names a different question or passage"),
        "{clash}"
    );
    assert_eq!(
        s.state.open.open(s.doc).await.unwrap().source().await,
        before,
        "COA-08: nothing written"
    );

    // COA-09: a person takes the columns card out of the document; its key opens nothing again.
    let room = s.state.open.open(s.doc).await.unwrap();
    let source = room.source().await;
    let kept: String = source
        .split("\n\n")
        .filter(|block| !block.contains("Which columns?"))
        .collect::<Vec<_>>()
        .join("\n\n");
    assert_ne!(
        kept, source,
        "the columns card was in the document: {source}"
    );
    let revision = s
        .store
        .document(s.doc)
        .await
        .unwrap()
        .unwrap()
        .plan_revision;
    room.replace_source(
        chopin_document::DocumentRef {
            id: s.doc.to_string(),
            url: DOC_URL.to_owned(),
        },
        &[],
        u64::try_from(revision).unwrap(),
        &kept,
    )
    .await
    .expect("a person's edit takes the card out");
    let discarded = call(
        &mut client,
        &turn,
        "c4",
        "open_decisions",
        json!({ "decisions": [card("Which columns?", "columns")] }),
    )
    .await;
    assert_eq!(discarded["isError"], false, "{discarded}");
    assert_eq!(
        discarded["output"]["notRecreated"],
        json!(["columns"]),
        "{discarded}"
    );
    assert_eq!(discarded["output"]["decisions"], json!([]), "{discarded}");
    let after = room.source().await;
    assert!(
        !after.contains("Which columns?"),
        "COA-09: never recreated: {after}"
    );
    end_turn(&mut client, &turn).await;
    assert_eq!(destroyed(&mut client).await, session);
}

#[tokio::test]
async fn coa_10_the_builtin_check_never_withholds_a_plain_reply_and_a_turn_without_questions_is_not_continued(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let (session, turn) = begin(&s, &mut client, "@chopin summarise").await;
    say(&mut client, &turn, "The plan has three milestones.").await;
    end_turn(&mut client, &turn).await;
    assert_eq!(destroyed(&mut client).await, session, "no continuation");
    assert_eq!(
        posts(&s).await,
        vec![(
            "planner".to_owned(),
            "The plan has three milestones.".to_owned()
        )]
    );
}

#[tokio::test]
async fn coa_04_coa_20_cards_stay_open_after_the_turn_and_are_answered_in_any_order() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let (session, turn) = begin(&s, &mut client, "@chopin plan the export").await;
    let opened = call(
        &mut client,
        &turn,
        "c1",
        "open_decisions",
        json!({ "decisions": [card("Which export format?", "format"), card("Which columns?", "columns")] }),
    )
    .await;
    let ids: Vec<String> = opened["output"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    say(&mut client, &turn, "I opened two cards.").await;
    end_turn(&mut client, &turn).await;
    assert_eq!(destroyed(&mut client).await, session);
    settle(&s).await;
    // The turn is over; the cards are still open, and the second is answered first.
    for (n, id) in ids.iter().rev().enumerate() {
        let answered = support::ask_room(
            &mut room,
            json!({ "type": "decision:answer", "requestId": format!("a-{n}"), "decision": id, "options": [1] }),
        )
        .await;
        assert_eq!(answered["type"], "decision:answered", "{answered}");
    }
    let source = s.state.open.open(s.doc).await.unwrap().source().await;
    assert_eq!(source.matches("state: answered").count(), 2, "{source}");
    // COA-20: both answers reach one Planner turn, in the order they were saved.
    let (_, prompt) = loop {
        match next(&mut client).await {
            ServerMessage::Start(start) => {
                client
                    .send(&ClientMessage::Started(Started {
                        session_id: start.session_id.clone(),
                    }))
                    .await
                    .unwrap();
            }
            ServerMessage::Turn(t) => break (t.turn_id, t.prompt),
            _ => {}
        }
    };
    let columns = prompt.find("Which columns?").expect("the columns answer");
    let format = prompt
        .find("Which export format?")
        .expect("the format answer");
    assert!(columns < format, "{prompt}");
}

#[tokio::test]
async fn coa_13_a_cancelled_question_is_never_taken_for_an_answer() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let (_, turn) = begin(&s, &mut client, "@chopin may I ship").await;
    client
        .send(&ClientMessage::HostToolCall(HostToolCall {
            turn_id: turn.clone(),
            call_id: "ask-1".into(),
            name: "ask".into(),
            input: json!({ "questions": [{ "question": "Ship it?", "options": [{ "label": "Yes" }, { "label": "No" }] }] }),
        }))
        .await
        .unwrap();
    // The card appears; a writer cancels the question instead of answering it.
    let id = loop {
        let source = s.state.open.open(s.doc).await.unwrap().source().await;
        if let Some(line) = source.lines().find(|l| l.starts_with("id: q-")) {
            break line.trim_start_matches("id: ").to_owned();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let cancelled = support::ask_room(
        &mut room,
        json!({ "type": "decision:cancel", "requestId": "x-1", "decision": id }),
    )
    .await;
    assert_eq!(cancelled["type"], "decision:cancelled", "{cancelled}");
    let result = loop {
        if let ServerMessage::HostToolResult(r) = next(&mut client).await {
            break r;
        }
    };
    assert!(result.is_error, "{result:?}");
    let said = result.output.to_string();
    assert!(said.contains("not answered"), "{said}");
    assert!(
        !said.contains("Yes"),
        "no option is made the answer: {said}"
    );
}

#[tokio::test]
async fn coa_24_an_unaddressed_message_starts_no_turn_and_is_not_checked() {
    let s = served().await;
    // With automatic participation paused, the message is the room's alone (CTX-01's turn for a
    // solo message is tested in participation.rs).
    s.pause_participation(s.doc).await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = support::ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m-1", "text": "Which day do we ship?" }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    assert!(ack.get("planner").is_none_or(Value::is_null), "{ack}");
    settle(&s).await;
    let entries = s.store.transcript(s.doc, 0, 10).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].body, "Which day do we ship?",
        "a person's words are never checked"
    );
    let metrics = metrics(&s).await;
    assert!(
        !metrics.contains("chopin_classifier_checks_total{"),
        "{metrics}"
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), client.recv())
            .await
            .is_err(),
        "no session was started"
    );
}
