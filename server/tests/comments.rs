//! Comment threads and comments to the Planner on the whole stack, under `HARNESS=remote`,
//! over real sockets: `comment:start` / `comment:reply` / `comment:resolve` / `comment:list`
//! on the room socket; a note with `to: "planner"` starts (or joins) a turn about its one
//! thread, which alone may `reply_comment`; the child-document variants. Rows: ISO-17..29,
//! OWN-27, MSG-21, MSG-23, with RULINGS ISO-20.

mod support;

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::BrowserSocket;
use chopin_protocol::agent::{
    ClientMessage, PartMessage, ServerMessage, Started, TextPart, Turn, TurnEnd, TurnStatus,
};
use chopin_server::comments::REPLIES_MAX;
use chopin_server::documents::updates::Update;
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::store::{NewCommentNote, NewDocument};
use chopin_server::turns::OWN_TURN_BUSY_WORDS;
use serde_json::{json, Value};
use support::{ask_room, begin_turn, call_host_tool, next, served, Served};
use uuid::Uuid;

const PLAN: &str = "# Checkout\n\nWe serve EU shoppers from one region.\n";
const QUOTE: &str = "We serve EU shoppers from one region.";

async fn with_plan() -> Served {
    let s = served().await;
    let doc = s.store.document(s.doc).await.unwrap().unwrap();
    s.state
        .updates
        .update(
            "mona",
            &doc,
            &Update {
                revision: 0,
                source: PLAN,
                idempotency_key: "plan",
            },
        )
        .await
        .unwrap();
    s
}

fn start(id: &str, text: &str, to_planner: bool) -> Value {
    let mut frame =
        json!({ "type": "comment:start", "requestId": id, "quote": QUOTE, "text": text });
    if to_planner {
        frame["to"] = json!("planner");
    }
    frame
}

fn reply(id: &str, thread: &Value, text: &str, to_planner: bool) -> Value {
    let mut frame =
        json!({ "type": "comment:reply", "requestId": id, "thread": thread, "text": text });
    if to_planner {
        frame["to"] = json!("planner");
    }
    frame
}

/// The client starts the session it is asked to and returns the turn it is sent.
async fn take_turn(client: &mut AgentClient) -> Turn {
    let session = loop {
        match next(client).await {
            ServerMessage::Start(start) => break start.session_id,
            // The earlier turn's session, let go.
            ServerMessage::Destroy(_) => {}
            other => panic!("expected start, got {other:?}"),
        }
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session,
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(turn) => turn,
        other => panic!("expected a turn, got {other:?}"),
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

async fn end(s: &Served, client: &mut AgentClient, turn: &str) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.to_owned(),
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    s.state.turns.until_idle(s.doc).await;
}

/// The next `comment:thread` frame the socket hears.
async fn heard(room: &mut BrowserSocket) -> Value {
    room.next_of_type("comment:thread").await.unwrap()
}

fn tool_names(turn: &Turn) -> Vec<String> {
    turn.host_tools.iter().map(|t| t.name.clone()).collect()
}

async fn threads(s: &Served, doc: Uuid) -> Vec<chopin_server::store::ThreadWithNotes> {
    s.store.comment_threads(doc, 100).await.unwrap()
}

#[tokio::test]
async fn iso_17_a_note_goes_to_chopin_only_with_to_planner_and_its_text_is_never_searched() {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let plain = ask_room(
        &mut room,
        start("c1", "@chopin is one region enough?", false),
    )
    .await;
    assert_eq!(plain["type"], "comment:ack", "{plain}");
    assert_eq!(plain["planner"], Value::Null, "no turn: {plain}");
    assert_eq!(plain["note"]["toPlanner"], false);
    let heard_plain = heard(&mut room).await;
    assert_eq!(heard_plain["note"]["text"], "@chopin is one region enough?");

    let sent = ask_room(
        &mut room,
        start("c2", "Should we add a second region?", true),
    )
    .await;
    assert_eq!(sent["type"], "comment:ack", "{sent}");
    assert_eq!(sent["planner"], "started");
    assert_eq!(sent["note"]["toPlanner"], true);
    // The first turn the client is sent is the second note's: the first started none.
    let turn = take_turn(&mut client).await;
    assert!(
        turn.prompt.contains("Should we add a second region?"),
        "{}",
        turn.prompt
    );
    assert!(
        !turn.prompt.contains("is one region enough"),
        "{}",
        turn.prompt
    );
    end(&s, &mut client, &turn.turn_id).await;

    let bad = ask_room(
        &mut room,
        json!({ "type": "comment:start", "requestId": "c3", "quote": QUOTE, "text": "x", "to": "lisa" }),
    )
    .await;
    assert_eq!(bad["code"], "malformed", "{bad}");
}

#[tokio::test]
async fn iso_18_iso_19_iso_21_iso_22_a_comment_turn_answers_in_its_thread_and_its_edits_are_the_result(
) {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let other = ask_room(&mut room, start("c0", "an unrelated thread", false)).await;
    let other_thread = other["thread"]["id"].clone();
    heard(&mut room).await;

    let sent = ask_room(&mut room, start("c1", "Is one region enough?", true)).await;
    assert_eq!(sent["planner"], "started", "{sent}");
    let thread = sent["thread"]["id"].clone();
    heard(&mut room).await;
    let turn = take_turn(&mut client).await;
    // ISO-18: the turn is about that one thread, under the sender's session.
    assert!(
        turn.prompt.contains(thread.as_str().unwrap()),
        "{}",
        turn.prompt
    );
    assert!(turn.prompt.contains(QUOTE), "{}", turn.prompt);
    assert!(
        turn.prompt.contains("@mona: Is one region enough?"),
        "{}",
        turn.prompt
    );
    assert!(tool_names(&turn).contains(&"reply_comment".to_owned()));

    // ISO-19: any other thread is refused.
    let refused = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k1",
        "reply_comment",
        json!({ "thread": other_thread, "text": "wrong thread" }),
    )
    .await;
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused
            .output
            .to_string()
            .contains("only the thread this turn was sent"),
        "{refused:?}"
    );

    // ISO-22: the turn's edit_plan write is the thread's result.
    let edited = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k2",
        "edit_plan",
        json!({ "revision": s.store.document(s.doc).await.unwrap().unwrap().plan_revision, "ops": [{ "op": "insert", "after": null, "content": "A second region is planned.\n" }] }),
    )
    .await;
    assert!(!edited.is_error, "{edited:?}");
    let result = heard(&mut room).await;
    assert_eq!(result["thread"]["id"], thread);
    let revision = result["thread"]["resultRevision"]
        .as_i64()
        .expect("a result revision");
    assert_eq!(
        s.store
            .document(s.doc)
            .await
            .unwrap()
            .unwrap()
            .plan_revision,
        revision
    );

    // ISO-21: the reply is in storage once the room hears it.
    let replied = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k3",
        "reply_comment",
        json!({ "thread": thread, "text": "One is enough for launch; I planned a second." }),
    )
    .await;
    assert!(!replied.is_error, "{replied:?}");
    let told = heard(&mut room).await;
    assert_eq!(told["note"]["author"], Value::Null);
    assert_eq!(told["note"]["planner"], true);
    assert_eq!(told["note"]["seq"], 1);
    let kept = threads(&s, s.doc).await;
    let (_, notes) = kept
        .iter()
        .find(|(t, _)| t.id.to_string() == thread)
        .unwrap();
    assert_eq!(notes.len(), 2);
    assert_eq!(
        notes[1].body,
        "One is enough for launch; I planned a second."
    );
    assert_eq!(notes[1].author_login, None);
    end(&s, &mut client, &turn.turn_id).await;

    // The room lists what was saved.
    let listed = ask_room(
        &mut room,
        json!({ "type": "comment:list", "requestId": "l" }),
    )
    .await;
    assert_eq!(listed["type"], "comment:threads", "{listed}");
    let found = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == thread)
        .unwrap();
    assert_eq!(found["notes"].as_array().unwrap().len(), 2);
    assert_eq!(found["resultRevision"], revision);
}

#[tokio::test]
async fn iso_19_iso_20_a_resolved_or_full_thread_takes_no_note_and_no_reply_comment() {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let sent = ask_room(&mut room, start("c1", "Is one region enough?", false)).await;
    let thread = sent["thread"]["id"].clone();
    let id: Uuid = thread.as_str().unwrap().parse().unwrap();
    // RULINGS ISO-20: full at 100 replies.
    for n in 0..REPLIES_MAX {
        s.store
            .reply_comment(
                s.doc,
                id,
                &NewCommentNote {
                    author_login: Some("lisa".into()),
                    to_planner: false,
                    body: format!("reply {n}"),
                    created_at_ms: n,
                },
                REPLIES_MAX,
            )
            .await
            .unwrap();
    }
    let full = ask_room(&mut room, reply("r1", &thread, "one more", true)).await;
    assert_eq!(full["type"], "comment:refused", "{full}");
    assert_eq!(full["code"], "thread-full");
    let plain = ask_room(&mut room, reply("r2", &thread, "one more", false)).await;
    assert_eq!(plain["code"], "thread-full", "{plain}");
    assert_eq!(
        threads(&s, s.doc).await[0].0.replies,
        REPLIES_MAX,
        "nothing saved"
    );

    // A thread resolved while its turn runs takes no reply_comment.
    let second = ask_room(&mut room, start("c2", "What about APAC?", true)).await;
    assert_eq!(second["planner"], "started", "{second}");
    let second_thread = second["thread"]["id"].clone();
    let turn = take_turn(&mut client).await;
    let resolved = ask_room(
        &mut room,
        json!({ "type": "comment:resolve", "requestId": "x", "thread": second_thread }),
    )
    .await;
    assert_eq!(resolved["thread"]["resolved"], true, "{resolved}");
    assert_eq!(resolved["thread"]["resolvedBy"], "mona");
    let refused = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k1",
        "reply_comment",
        json!({ "thread": second_thread, "text": "late" }),
    )
    .await;
    assert!(refused.is_error);
    assert!(
        refused.output.to_string().contains("resolved"),
        "{refused:?}"
    );
    end(&s, &mut client, &turn.turn_id).await;
    let after = ask_room(&mut room, reply("r3", &second_thread, "reopen?", true)).await;
    assert_eq!(after["code"], "thread-resolved", "{after}");
}

#[tokio::test]
async fn iso_23_a_comment_turn_that_spoke_only_in_chat_has_its_last_message_posted_to_the_thread() {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let sent = ask_room(&mut room, start("c1", "Is one region enough?", true)).await;
    let thread: Uuid = sent["thread"]["id"].as_str().unwrap().parse().unwrap();
    let turn = take_turn(&mut client).await;
    say(
        &mut client,
        &turn.turn_id,
        "Looking at the latency numbers first.",
    )
    .await;
    // A tool call ends the step: its words are Chat's message.
    call_host_tool(&mut client, &turn.turn_id, "k1", "read_plan", json!({})).await;
    say(
        &mut client,
        &turn.turn_id,
        "One region is enough for launch.",
    )
    .await;
    end(&s, &mut client, &turn.turn_id).await;
    let (kept, notes) = s
        .store
        .comment_thread(s.doc, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.replies, 1);
    assert_eq!(notes[1].author_login, None);
    assert_eq!(
        notes[1].body, "One region is enough for launch.",
        "the last message"
    );

    // A turn that replied in its thread gets no second note.
    let again = ask_room(&mut room, reply("r1", &json!(thread), "And later?", true)).await;
    assert_eq!(again["planner"], "started", "{again}");
    let turn = take_turn(&mut client).await;
    let replied = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k1",
        "reply_comment",
        json!({ "thread": thread, "text": "Later, a second one." }),
    )
    .await;
    assert!(!replied.is_error, "{replied:?}");
    say(&mut client, &turn.turn_id, "Answered in the thread.").await;
    end(&s, &mut client, &turn.turn_id).await;
    let (kept, notes) = s
        .store
        .comment_thread(s.doc, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.replies, 3, "the note, the reply, and nothing else");
    assert_eq!(notes[3].body, "Later, a second one.");
}

#[tokio::test]
async fn msg_21_a_comment_to_chopin_while_another_turn_runs_is_refused_before_saving_and_one_to_its_own_thread_joins_it(
) {
    let s = with_plan().await;
    let mut client = s.attach(&["steer-turn"]).await;
    let mut room = s.room().await;
    let begun = begin_turn(&mut client, &mut room, "@chopin tidy the plan").await;
    let busy = ask_room(&mut room, start("c1", "Is one region enough?", true)).await;
    assert_eq!(busy["type"], "comment:refused", "{busy}");
    assert_eq!(busy["code"], "planner-busy");
    assert_eq!(busy["message"], OWN_TURN_BUSY_WORDS);
    assert!(threads(&s, s.doc).await.is_empty(), "nothing saved");
    end(&s, &mut client, &begun.turn).await;

    let sent = ask_room(&mut room, start("c2", "Is one region enough?", true)).await;
    assert_eq!(sent["planner"], "started", "{sent}");
    let thread = sent["thread"]["id"].clone();
    let turn = take_turn(&mut client).await;
    let joined = ask_room(
        &mut room,
        reply("r1", &thread, "Think about APAC too.", true),
    )
    .await;
    assert_eq!(joined["planner"], "steered", "{joined}");
    loop {
        if let ServerMessage::Steer(steer) = next(&mut client).await {
            assert!(steer.text.contains("Think about APAC too."), "{steer:?}");
            break;
        }
    }
    end(&s, &mut client, &turn.turn_id).await;
    assert_eq!(threads(&s, s.doc).await[0].0.replies, 1);
}

#[tokio::test]
async fn own_27_without_a_client_a_comment_to_chopin_is_refused_and_never_kept_for_later() {
    let s = with_plan().await;
    let mut room = s.room().await;
    let refused = ask_room(&mut room, start("c1", "Is one region enough?", true)).await;
    assert_eq!(refused["type"], "comment:refused", "{refused}");
    assert_eq!(refused["code"], "planner-not-attached");
    assert!(threads(&s, s.doc).await.is_empty(), "nothing saved");
    // Attaching later starts nothing for it: the first turn is the next message's.
    let mut client = s.attach(&[]).await;
    let begun = begin_turn(&mut client, &mut room, "@chopin hello").await;
    assert!(!tool_names_of(&begun).contains(&"reply_comment".to_owned()));
    end(&s, &mut client, &begun.turn).await;
}

fn tool_names_of(begun: &support::Begun) -> Vec<String> {
    begun.host_tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn iso_24_reply_comment_is_not_offered_to_other_turns_and_is_refused_there() {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let sent = ask_room(&mut room, start("c1", "a thread", false)).await;
    let thread = sent["thread"]["id"].clone();
    let begun = begin_turn(&mut client, &mut room, "@chopin tidy the plan").await;
    assert!(!tool_names_of(&begun).contains(&"reply_comment".to_owned()));
    let refused = call_host_tool(
        &mut client,
        &begun.turn,
        "k1",
        "reply_comment",
        json!({ "thread": thread, "text": "hi" }),
    )
    .await;
    // Refused where the turn runs (the driver checks the turn's own tools), and by the host
    // itself behind it (REPLY_NOT_COMMENT_TURN_WORDS, unit-tested in the server).
    assert!(refused.is_error);
    assert!(
        refused.output.to_string().contains("reply_comment"),
        "{refused:?}"
    );
    end(&s, &mut client, &begun.turn).await;
    assert_eq!(threads(&s, s.doc).await[0].0.replies, 0);
}

#[tokio::test]
async fn a_reader_cannot_comment_but_hears_and_lists_threads() {
    let s = with_plan().await;
    let mut room = s.room().await;
    ask_room(&mut room, start("c1", "a thread", false)).await;
    let cookie = s
        .sign_in("lisa", 77, chopin_fixtures::github::Permission::Read)
        .await;
    let mut reader = s.room_as(s.doc, &cookie).await;
    let refused = ask_room(&mut reader, start("c2", "mine", false)).await;
    assert_eq!(refused["code"], "read-only", "{refused}");
    let listed = ask_room(
        &mut reader,
        json!({ "type": "comment:list", "requestId": "l" }),
    )
    .await;
    assert_eq!(listed["threads"].as_array().unwrap().len(), 1, "{listed}");
    ask_room(&mut room, start("c3", "another", false)).await;
    let told = heard(&mut reader).await;
    assert_eq!(told["note"]["text"], "another");
}

// --- child documents (ISO-25..29, MSG-23) ---

async fn child_of(s: &Served, parent: Uuid) -> Uuid {
    let id = OsEntropy.uuid();
    s.store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "steps".into(),
            title: "Steps".into(),
            created_at_ms: 0,
            parent_id: Some(parent),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    id
}

async fn child_room(s: &Served, child: Uuid) -> BrowserSocket {
    let mut room = s.connect_room(child, &s.mona_cookie).await;
    room.next_of_type("session:planner").await.unwrap();
    room
}

async fn root_chat(s: &Served) -> Vec<(String, String)> {
    s.store
        .transcript(s.doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.body))
        .collect()
}

#[tokio::test]
async fn iso_25_iso_26_iso_27_iso_29_msg_23_a_comment_in_a_child_is_admitted_by_the_roots_chat_and_answered_in_the_child(
) {
    let s = with_plan().await;
    let child = child_of(&s, s.doc).await;
    let mut client = s.attach(&[]).await;
    let mut in_child = child_room(&s, child).await;
    let mut in_root = s.room().await;
    let sent = ask_room(&mut in_child, start("c1", "Is this step needed?", true)).await;
    assert_eq!(sent["planner"], "started", "{sent}");
    assert_eq!(sent["thread"]["document"], child.to_string());
    let thread: Uuid = sent["thread"]["id"].as_str().unwrap().parse().unwrap();
    heard(&mut in_child).await;
    // ISO-27: saved in the child before the turn starts.
    assert!(s
        .store
        .comment_thread(child, thread)
        .await
        .unwrap()
        .is_some());
    assert!(
        threads(&s, s.doc).await.is_empty(),
        "the thread is the child's"
    );
    let turn = take_turn(&mut client).await;
    assert!(
        turn.prompt.contains("/documents/octo/plans/notes/steps"),
        "{}",
        turn.prompt
    );
    assert!(
        turn.prompt.contains("the focus of this message"),
        "{}",
        turn.prompt
    );
    // The root's transcript notice names the child (ISO-25).
    let chat = root_chat(&s).await;
    assert!(
        chat.iter().any(|(kind, body)| kind == "system"
            && body.contains("@mona sent chopin a comment from the child document")
            && body.contains("/steps")),
        "{chat:?}"
    );
    // ISO-26: edit_child on that child is the thread's result.
    let child_doc = s.store.document(child).await.unwrap().unwrap();
    let edited = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k1",
        "edit_child",
        json!({ "child": child.to_string(), "revision": child_doc.plan_revision, "ops": [{ "op": "insert", "after": null, "content": "Step one.\n" }] }),
    )
    .await;
    assert!(!edited.is_error, "{edited:?}");
    let result = heard(&mut in_child).await;
    assert!(result["thread"]["resultRevision"].is_i64(), "{result}");
    let replied = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k2",
        "reply_comment",
        json!({ "thread": thread, "text": "Yes: it sets up the region." }),
    )
    .await;
    assert!(!replied.is_error, "{replied:?}");
    // The child's room hears the reply; the root's room hears nothing of the child's threads.
    let told = heard(&mut in_child).await;
    assert_eq!(told["note"]["text"], "Yes: it sets up the region.");
    end(&s, &mut client, &turn.turn_id).await;
    let listed = ask_room(
        &mut in_root,
        json!({ "type": "comment:list", "requestId": "l" }),
    )
    .await;
    assert_eq!(listed["threads"], json!([]));

    // ISO-29: the fallback reply goes to the child the note came from.
    let again = ask_room(
        &mut in_child,
        reply("r1", &json!(thread), "And the order?", true),
    )
    .await;
    assert_eq!(again["planner"], "started", "{again}");
    let turn = take_turn(&mut client).await;
    say(
        &mut client,
        &turn.turn_id,
        "First the region, then the rest.",
    )
    .await;
    end(&s, &mut client, &turn.turn_id).await;
    let (_, notes) = s
        .store
        .comment_thread(child, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        notes.last().unwrap().body,
        "First the region, then the rest."
    );
    assert_eq!(notes.last().unwrap().author_login, None);
}

#[tokio::test]
async fn iso_28_a_child_that_no_longer_belongs_to_a_live_root_is_refused_before_saving_and_its_turn_may_not_reply(
) {
    let s = with_plan().await;
    let child = child_of(&s, s.doc).await;
    let mut client = s.attach(&[]).await;
    let mut in_child = child_room(&s, child).await;
    // reply_comment asks storage again: archived meanwhile, the reply is refused.
    let sent = ask_room(&mut in_child, start("c1", "Is this step needed?", true)).await;
    assert_eq!(sent["planner"], "started", "{sent}");
    let thread: Uuid = sent["thread"]["id"].as_str().unwrap().parse().unwrap();
    let turn = take_turn(&mut client).await;
    s.store.set_archived(child, true).await.unwrap();
    let refused = call_host_tool(
        &mut client,
        &turn.turn_id,
        "k1",
        "reply_comment",
        json!({ "thread": thread, "text": "too late" }),
    )
    .await;
    assert!(refused.is_error, "{refused:?}");
    assert!(
        refused.output.to_string().contains("no longer belongs"),
        "{refused:?}"
    );
    end(&s, &mut client, &turn.turn_id).await;
    let (kept, _) = s
        .store
        .comment_thread(child, thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.replies, 0);

    // Admission asks storage again: with the root archived, the note is refused unsaved.
    s.store.set_archived(child, false).await.unwrap();
    s.store.set_archived(s.doc, true).await.unwrap();
    let refused = ask_room(&mut in_child, start("c2", "Another?", true)).await;
    assert_eq!(refused["type"], "comment:refused", "{refused}");
    assert_eq!(refused["code"], "document-not-found");
    assert_eq!(threads(&s, child).await.len(), 1, "nothing saved");
}

#[tokio::test]
async fn a_start_sent_again_with_its_thread_id_finds_the_thread_it_started() {
    let s = with_plan().await;
    let mut room = s.room().await;
    let id = Uuid::new_v4().to_string();
    let mut frame = start("c1", "Is one region enough?", false);
    frame["thread"] = json!(id);
    let first = ask_room(&mut room, frame.clone()).await;
    frame["requestId"] = json!("c1-again");
    let again = ask_room(&mut room, frame).await;
    assert_eq!(first["thread"]["id"], id);
    assert_eq!(again["type"], "comment:ack", "{again}");
    assert_eq!(again["thread"]["id"], id);
    assert_eq!(threads(&s, s.doc).await.len(), 1);
}

#[tokio::test]
async fn a_note_sent_again_with_its_request_id_gets_the_first_answer_and_is_saved_once() {
    let s = with_plan().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let first = ask_room(&mut room, start("c1", "Is one region enough?", false)).await;
    let thread = first["thread"]["id"].clone();
    let again = ask_room(&mut room, start("c1", "Is one region enough?", false)).await;
    assert_eq!(again, first, "the first answer");
    assert_eq!(threads(&s, s.doc).await.len(), 1);
    let reply_once = ask_room(
        &mut room,
        reply("r1", &thread, "A second region later.", true),
    )
    .await;
    assert_eq!(reply_once["planner"], "started", "{reply_once}");
    let turn = take_turn(&mut client).await;
    let reply_twice = ask_room(
        &mut room,
        reply("r1", &thread, "A second region later.", true),
    )
    .await;
    assert_eq!(
        reply_twice, reply_once,
        "the first answer; no second turn or steer"
    );
    end(&s, &mut client, &turn.turn_id).await;
    assert_eq!(threads(&s, s.doc).await[0].0.replies, 1, "saved once");
}
