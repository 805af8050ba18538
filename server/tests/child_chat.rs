//! ISO-25, in-process over real sockets: "A child document has no Chat: a comment to Chopin
//! inside one is admitted by its root's Chat and starts a turn there with the child as focus
//! […]; the root's transcript notice names the child." A room socket on a child speaks its
//! root's Chat: what it sends is saved there (the child's own transcript stays empty), a
//! message to `@chopin` goes to the root's Planner with the child as the turn's focus, and
//! every socket of the child hears and pages the root's Chat. Before saving, the child is asked
//! again whether it still belongs to a live root in the same repository.

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::BrowserSocket;
use chopin_protocol::agent::{ClientMessage, ServerMessage, Started, TurnEnd, TurnStatus};
use chopin_server::runtime::entropy::{Entropy, OsEntropy};
use chopin_server::store::NewDocument;
use serde_json::{json, Value};
use uuid::Uuid;

mod support;

use support::{next, served, Served};

const CHILD_URL: &str = "/documents/octo/plans/notes/steps";

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

async fn room(s: &Served, doc: Uuid) -> BrowserSocket {
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    BrowserSocket::connect(
        stream,
        &s.host,
        &format!("/api/documents/{doc}/room"),
        Some(&s.mona_cookie),
        Some(&format!("http://{}", s.host)),
    )
    .await
    .unwrap()
}

async fn send(room: &mut BrowserSocket, request_id: &str, text: &str) -> Value {
    room.send_json(&json!({ "type": "chat:send", "requestId": request_id, "text": text }))
        .await
        .unwrap();
    loop {
        let answer = room.next_of_type_any(&["chat:ack", "chat:refused"]).await;
        if answer["requestId"] == request_id {
            return answer;
        }
    }
}

trait NextOfAny {
    async fn next_of_type_any(&mut self, types: &[&str]) -> Value;
}

impl NextOfAny for BrowserSocket {
    async fn next_of_type_any(&mut self, types: &[&str]) -> Value {
        loop {
            match self.recv_json().await.unwrap() {
                chopin_fixtures::browser::BrowserEvent::Json(v)
                    if types.iter().any(|t| v["type"] == *t) =>
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
}

/// (kind, body) of every entry of `doc`'s transcript, once everything queued is saved.
async fn chat_of(s: &Served, doc: Uuid) -> Vec<(String, String)> {
    s.state.transcript.settled().await;
    s.store
        .transcript(doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.body))
        .collect()
}

/// Answers `start`; the prompt of the `turn` that follows, and the ids.
async fn started(client: &mut AgentClient) -> (String, String, String) {
    let session = match next(client).await {
        ServerMessage::Start(s) => s.session_id,
        other => panic!("expected start, got {other:?}"),
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(t) => (session, t.turn_id, t.prompt),
        other => panic!("expected turn, got {other:?}"),
    }
}

#[tokio::test]
async fn iso_25_msg_08_a_message_from_a_child_room_goes_to_the_roots_chat_with_the_child_as_focus()
{
    let s = served().await;
    let child = child_of(&s, s.doc).await;
    let mut in_child = room(&s, child).await;
    let hello = in_child.next_of_type("session:hello").await.unwrap();
    assert_eq!(
        hello["url"], CHILD_URL,
        "a child's URL nests under its root's"
    );
    let planner = in_child.next_of_type("session:planner").await.unwrap();
    assert_eq!(planner["planner"]["state"], "none", "{planner}");

    // Nothing attached to the root: refused in the root's words, nothing saved anywhere.
    let refused = send(&mut in_child, "r0", "@chopin hello").await;
    assert_eq!(refused["type"], "chat:refused", "{refused}");
    assert_eq!(refused["code"], "planner-not-attached", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("/documents/octo/plans/notes"),
        "{refused}"
    );
    assert!(chat_of(&s, s.doc).await.is_empty());

    // The Planner attaches to the root; the child's room sees it attached.
    let mut client = s.attach(&["steer-turn"]).await;
    let planner = in_child.next_of_type("session:planner").await.unwrap();
    assert_eq!(planner["planner"]["state"], "attached", "{planner}");
    let mut in_root = room(&s, s.doc).await;

    let ack = send(&mut in_child, "r1", "@chopin tidy this list").await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    assert_eq!(ack["planner"], "started", "{ack}");
    let (session, turn, prompt) = started(&mut client).await;
    assert!(
        prompt.contains(&format!(
            "(sent from the child document {CHILD_URL}, the focus of this message)\n@mona: @chopin tidy this list"
        )),
        "the turn's prompt names the child as its focus: {prompt}"
    );

    // The root's Chat holds a notice naming the child, then the message; the child has none.
    let root_chat = chat_of(&s, s.doc).await;
    assert_eq!(root_chat.len(), 2, "{root_chat:?}");
    assert_eq!(root_chat[0].0, "system", "{root_chat:?}");
    assert!(root_chat[0].1.contains(CHILD_URL), "{root_chat:?}");
    assert_eq!(
        root_chat[1],
        ("member".to_owned(), "@chopin tidy this list".to_owned())
    );
    assert!(chat_of(&s, child).await.is_empty(), "a child has no Chat");
    // Both rooms hear the message; the child's room pages the root's Chat.
    for socket in [&mut in_child, &mut in_root] {
        loop {
            let heard = socket.next_of_type("chat:message").await.unwrap();
            if heard["kind"] == "member" {
                assert_eq!(heard["text"], "@chopin tidy this list");
                break;
            }
        }
    }
    in_child
        .send_json(&json!({ "type": "chat:history", "limit": 10 }))
        .await
        .unwrap();
    let history = in_child.next_of_type("chat:history").await.unwrap();
    assert_eq!(history["entries"].as_array().unwrap().len(), 2, "{history}");

    // A message from the child while the turn runs steers it, carrying the child as focus.
    let ack = send(&mut in_child, "r2", "@chopin and number them").await;
    assert_eq!(ack["planner"], "steered", "{ack}");
    match next(&mut client).await {
        ServerMessage::Steer(st) => assert!(
            st.text.contains(CHILD_URL) && st.text.ends_with("@chopin and number them"),
            "{}",
            st.text
        ),
        other => panic!("expected steer, got {other:?}"),
    }
    // A message from the root's own room carries no focus.
    let ack = send(&mut in_root, "r3", "@chopin thanks").await;
    assert_eq!(ack["planner"], "steered", "{ack}");
    match next(&mut client).await {
        ServerMessage::Steer(st) => assert_eq!(st.text, "@mona: @chopin thanks"),
        other => panic!("expected steer, got {other:?}"),
    }

    // Stop from the child's room stops the root's turn.
    in_child
        .send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stopped = in_child.next_of_type("planner:stopped").await.unwrap();
    assert_eq!(stopped["stopped"], true, "{stopped}");
    match next(&mut client).await {
        ServerMessage::Abort(a) => assert_eq!(a.turn_id, turn),
        other => panic!("expected abort, got {other:?}"),
    }
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn,
            status: TurnStatus::Aborted,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    let _ = session;
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        s.state.turns.until_idle(s.doc).await;
    })
    .await
    .expect("the turn ended");
    assert!(chat_of(&s, child).await.is_empty(), "a child has no Chat");
}

#[tokio::test]
async fn iso_25_a_child_whose_root_is_archived_has_no_chat_to_send_to_and_nothing_is_saved() {
    let s = served().await;
    let child = child_of(&s, s.doc).await;
    let mut in_child = room(&s, child).await;
    in_child.next_of_type("session:planner").await.unwrap();
    let ack = send(&mut in_child, "r1", "a plain note").await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");

    s.store.set_archived(s.doc, true).await.unwrap();
    let refused = send(&mut in_child, "r2", "another note").await;
    assert_eq!(refused["type"], "chat:refused", "{refused}");
    assert_eq!(refused["code"], "document-not-found", "{refused}");
    let root_chat = chat_of(&s, s.doc).await;
    assert_eq!(
        root_chat,
        vec![("member".to_owned(), "a plain note".to_owned())],
        "a plain message from a child is saved in the root's Chat with no notice; the refused one nowhere"
    );
    assert!(chat_of(&s, child).await.is_empty());
}
