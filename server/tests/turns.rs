//! Planner turns on the remote adapter, in-process over real sockets: a person's request starts
//! a turn on the attached scripted client, whose host tool calls (`read_plan`, `edit_plan`) run
//! in the server against the room after the permission rechecks; the reply reaches the turn sink.
//! A second message while the turn runs is given to it as a `steer` frame; a request with the
//! repository access revoked between two host tool calls has its second call refused.

use chopin_fixtures::agent::AgentClient;
use chopin_protocol::agent::{
    ClientMessage, HostToolCall, PartMessage, ServerMessage, Started, TextPart, TurnEnd, TurnStatus,
};
use chopin_server::runtime::clock::SystemClock;
use chopin_server::turns::{Accepted, PlannerRequest, Refused};
use serde_json::{json, Value};

mod support;

use support::{next, served, Served as Setup, DOC_URL};

async fn setup() -> Setup {
    served().await
}

async fn attached_client(s: &Setup, features: &[&str]) -> AgentClient {
    s.attach(features).await
}

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
    match next(client).await {
        ServerMessage::HostToolResult(r) => {
            assert_eq!(r.call_id, id);
            json!({ "output": r.output, "isError": r.is_error })
        }
        other => panic!("expected host-tool-result, got {other:?}"),
    }
}

/// Answers `start` and returns the session and turn ids of the `turn` that follows.
async fn start_and_turn(client: &mut AgentClient) -> (String, String, Vec<String>, String) {
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
        ServerMessage::Turn(t) => (
            session,
            t.turn_id,
            t.host_tools.iter().map(|h| h.name.clone()).collect(),
            t.prompt,
        ),
        other => panic!("expected turn, got {other:?}"),
    }
}

async fn end(client: &mut AgentClient, turn: &str, session: &str) {
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: turn.into(),
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Destroy(d) => assert_eq!(d.session_id, session, "destroyed after the turn"),
        other => panic!("expected destroy, got {other:?}"),
    }
}

/// What the turns posted to the document's Chat (through the chat sink), as (kind, text), once
/// everything queued has been saved.
async fn posts(s: &Setup) -> Vec<(String, String)> {
    s.state.transcript.settled().await;
    let entries = s.store.transcript(s.doc, 0, 100).await.unwrap();
    entries.into_iter().map(|e| (e.kind, e.body)).collect()
}

/// mona asks "@chopin go" and the client answers `start`: the session and turn ids.
async fn go(s: &Setup, client: &mut AgentClient) -> (String, String) {
    s.state
        .turns
        .request(request(s, "@chopin go"))
        .await
        .unwrap();
    let (session, turn, _, _) = start_and_turn(client).await;
    (session, turn)
}

/// Waits (at most 10 s, a guard against a hang, not a measurement) until the document's turn
/// is over and what it posted is saved.
async fn settle(s: &Setup) {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        s.state.turns.until_idle(s.doc).await;
        s.state.transcript.settled().await;
    })
    .await
    .expect("the turn ended");
}

#[tokio::test]
async fn a_request_runs_read_plan_then_edit_plan_and_the_reply_reaches_chat() {
    let s = setup().await;
    // Nothing attached: refused with the words that name the document.
    let refused = s.state.turns.request(request(&s, "@chopin hi")).await;
    assert!(
        matches!(&refused, Err(Refused::NotAttached(w)) if w.contains("/documents/octo/plans/notes")),
        "{refused:?}"
    );

    let mut client = attached_client(&s, &[]).await;
    let accepted = s
        .state
        .turns
        .request(request(&s, "@chopin add a heading"))
        .await;
    assert_eq!(accepted, Ok(Accepted::Started));
    let (session, turn, tools, prompt) = start_and_turn(&mut client).await;
    assert_eq!(
        tools,
        vec![
            "read_plan",
            "edit_plan",
            "list_children",
            "read_child",
            "edit_child",
            "read_reference",
            "ask",
            "open_decision",
            "open_decisions",
            "read_implementation_graph",
            "edit_implementation_graph",
            "read_repository_file",
            "list_repository_tree",
            "search_repository",
            "repository_history",
            "pull_request_read",
            "list_pull_requests"
        ],
        "only host tools are offered"
    );
    assert_eq!(prompt, "@mona: @chopin add a heading");

    let read = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert_eq!(read["isError"], false, "{read}");
    assert!(
        read["output"].as_str().unwrap().contains("revision: 0"),
        "{read}"
    );
    let children = call(&mut client, &turn, "c0", "list_children", json!({})).await;
    assert_eq!(children["output"], json!({ "children": [] }), "{children}");
    let missing = call(&mut client, &turn, "c00", "read_child", json!({})).await;
    assert_eq!(missing["isError"], true, "a child is required: {missing}");
    let edit = call(
        &mut client,
        &turn,
        "c2",
        "edit_plan",
        json!({ "revision": 0, "ops": [{ "op": "insert", "after": null, "content": "# Added by chopin\n" }] }),
    )
    .await;
    assert_eq!(edit["isError"], false, "{edit}");
    assert_eq!(edit["output"]["status"], "applied", "{edit}");
    assert_eq!(
        edit["output"]["document"]["url"],
        "/documents/octo/plans/notes"
    );
    client
        .send(&ClientMessage::Part(PartMessage {
            turn_id: turn.clone(),
            part: chopin_protocol::agent::Part::Text(TextPart {
                text: "I added a heading.".into(),
            }),
        }))
        .await
        .unwrap();
    end(&mut client, &turn, &session).await;
    settle(&s).await;
    assert_eq!(
        posts(&s).await,
        vec![("planner".to_owned(), "I added a heading.".to_owned())]
    );
    let room = s.state.open.open(s.doc).await.unwrap();
    assert_eq!(room.source().await, "# Added by chopin\n");
}

#[tokio::test]
async fn two_messages_while_a_turn_runs_are_steered_in_send_order_once() {
    let s = setup().await;
    let mut client = attached_client(&s, &["steer-turn"]).await;
    assert_eq!(
        s.state.turns.request(request(&s, "@chopin start")).await,
        Ok(Accepted::Started)
    );
    // Before the client has started the session, a message has nothing to go to: passing
    // trouble, sent again in a moment.
    let early = s.state.turns.request(request(&s, "too early")).await;
    assert_eq!(
        early,
        Err(Refused::TemporarilyUnavailable(
            chopin_server::turns::PASSING_WORDS.into()
        ))
    );
    let (session, turn, _, _) = start_and_turn(&mut client).await;
    for text in ["first", "second"] {
        assert_eq!(
            s.state.turns.request(request(&s, text)).await,
            Ok(Accepted::Steered)
        );
    }
    let mut steered = Vec::new();
    for _ in 0..2 {
        match next(&mut client).await {
            ServerMessage::Steer(st) => {
                assert_eq!(st.turn_id, turn);
                steered.push(st.text);
            }
            other => panic!("expected steer, got {other:?}"),
        }
    }
    assert_eq!(steered, vec!["@mona: first", "@mona: second"]);
    end(&mut client, &turn, &session).await;
    settle(&s).await;
}

#[tokio::test]
async fn without_steer_turn_a_message_during_a_turn_is_refused_busy() {
    let s = setup().await;
    let mut client = attached_client(&s, &[]).await;
    s.state
        .turns
        .request(request(&s, "@chopin start"))
        .await
        .unwrap();
    let (session, turn, _, _) = start_and_turn(&mut client).await;
    let busy = s.state.turns.request(request(&s, "more")).await;
    assert_eq!(
        busy,
        Err(Refused::Busy(
            "chopin can't take messages while it works on this machine. Stop it to ask now.".into()
        ))
    );
    end(&mut client, &turn, &session).await;
    settle(&s).await;
}

#[tokio::test]
async fn access_revoked_between_two_host_tool_calls_refuses_the_second() {
    let s = setup().await;
    let mut client = attached_client(&s, &[]).await;
    let (session, turn) = go(&s, &mut client).await;
    let first = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert_eq!(first["isError"], false);
    s.github.revoke("octo", "plans", "mona");
    // The cache of repository access lasts 30 s; a revocation GitHub reports is seen once it
    // is asked again — here, as a fresh check after invalidating, like the periodic recheck.
    s.state.admission.invalidate(&s.mona);
    use chopin_server::runtime::clock::Clock;
    let owner = s
        .state
        .sign_ins
        .live_login_of(
            chopin_server::store::account_id_for_github_user(1001),
            SystemClock.now_ms(),
        )
        .expect("mona's sign-in");
    s.state.admission.invalidate(owner.github_token());
    let second = call(&mut client, &turn, "c2", "read_plan", json!({})).await;
    assert_eq!(second["isError"], true, "{second}");
    assert!(
        second["output"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{second}"
    );
    end(&mut client, &turn, &session).await;
    settle(&s).await;
    let posts = posts(&s).await;
    assert!(
        posts
            .iter()
            .any(|(kind, body)| kind == "system" && body.contains("not allowed to use read_plan")),
        "Chat shows the denial: {posts:?}"
    );
}

/// Forgets the admission caches of mona's browser sign-in token, so the next recheck asks GitHub.
fn forget_cached_answers(s: &Setup) {
    use chopin_server::runtime::clock::Clock;
    let owner = s
        .state
        .sign_ins
        .live_login_of(
            chopin_server::store::account_id_for_github_user(1001),
            SystemClock.now_ms(),
        )
        .expect("mona's sign-in");
    s.state.admission.invalidate(owner.github_token());
}

#[tokio::test]
async fn perm_06_an_attach_needs_the_app_installation_to_cover_the_repository() {
    use chopin_fixtures::agent::{connect, Upgrade};
    let s = setup().await;
    let try_attach = || async {
        let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(s.host.clone(), Some(&s.mona)))
            .await
            .unwrap();
        client.attach(&s.doc.to_string(), &[]).await.unwrap()
    };
    // mona can push to octo/plans, but the App's installation on octo covers another
    // repository only: the Planner could not use octo/plans with her sign-in's token.
    s.github.select_repositories("octo", &["other"]);
    let ServerMessage::Refused(refused) = try_attach().await else {
        panic!("an attach outside the installation must be refused");
    };
    assert_eq!(refused.reason.as_str(), "no-write-access", "{refused:?}");
    assert!(
        refused
            .message
            .contains("GitHub App is not installed on octo/plans"),
        "{refused:?}"
    );
    // Not installed at all: refused the same way.
    s.github.uninstall_app("octo");
    forget_cached_answers(&s);
    assert!(matches!(try_attach().await, ServerMessage::Refused(_)));
    // Installed with the repository selected: the attach binds.
    s.github.select_repositories("octo", &["other", "plans"]);
    forget_cached_answers(&s);
    let answer = try_attach().await;
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
}

#[tokio::test]
async fn perm_06_the_app_installation_is_rechecked_before_each_host_tool() {
    let s = setup().await;
    let mut client = attached_client(&s, &[]).await;
    let (session, turn) = go(&s, &mut client).await;
    let first = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert_eq!(first["isError"], false, "{first}");
    assert!(
        s.github.request_count("/user/installations") > 0,
        "the installation was asked of GitHub"
    );
    // The App's installation on octo now covers another repository only; mona can still push
    // to octo/plans (PERM-05 holds), but the App may no longer act there.
    s.github.select_repositories("octo", &["other"]);
    forget_cached_answers(&s);
    let second = call(&mut client, &turn, "c2", "read_plan", json!({})).await;
    assert_eq!(second["isError"], true, "{second}");
    assert!(
        second["output"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{second}"
    );
    // Selected again: the next tool runs.
    s.github.select_repositories("octo", &["other", "plans"]);
    forget_cached_answers(&s);
    let third = call(&mut client, &turn, "c3", "read_plan", json!({})).await;
    assert_eq!(third["isError"], false, "{third}");
    // Uninstalled altogether.
    s.github.uninstall_app("octo");
    forget_cached_answers(&s);
    let fourth = call(&mut client, &turn, "c4", "read_plan", json!({})).await;
    assert_eq!(fourth["isError"], true, "{fourth}");
    end(&mut client, &turn, &session).await;
    settle(&s).await;
    let posts = posts(&s).await;
    let denials: Vec<_> = posts
        .iter()
        .filter(|(kind, body)| kind == "system" && body.contains("not allowed to use read_plan"))
        .collect();
    assert_eq!(denials.len(), 2, "{posts:?}");
    assert!(
        denials
            .iter()
            .all(|(_, body)| body.contains("GitHub App is no longer installed on octo/plans")),
        "Chat names the installation: {denials:?}"
    );
}

#[tokio::test]
async fn a_link_that_closes_mid_turn_ends_the_turn_with_an_error() {
    let s = setup().await;
    let mut client = attached_client(&s, &[]).await;
    let _ = go(&s, &mut client).await;
    drop(client);
    settle(&s).await;
    let posts = posts(&s).await;
    assert!(
        posts
            .iter()
            .any(|(kind, body)| kind == "system" && body.contains("error")),
        "Chat says so: {posts:?}"
    );
}

/// CTX-05: a new session starts from the bounded transcript: the Chat before the message comes
/// first in the prompt, then the message.
#[tokio::test]
async fn a_new_session_is_given_the_chat_before_the_message() {
    use chopin_server::store::NewTranscriptEntry;
    let s = setup().await;
    for (login, body) in [
        ("lisa", "We should plan the harbour survey."),
        ("mona", "Agreed."),
    ] {
        s.store
            .append_transcript(
                s.doc,
                &NewTranscriptEntry {
                    author_login: Some(login.into()),
                    kind: "member".into(),
                    body: body.into(),
                    created_at_ms: 0,
                    key: None,
                    refs: None,
                    attachments: Vec::new(),
                },
            )
            .await
            .unwrap();
    }
    let mut client = attached_client(&s, &[]).await;
    s.state
        .turns
        .request(request(&s, "@chopin draft it"))
        .await
        .unwrap();
    let (session, turn, _, prompt) = start_and_turn(&mut client).await;
    assert_eq!(
        prompt,
        "Chat so far, oldest first:\n@lisa: We should plan the harbour survey.\n@mona: Agreed.\n\nThe new message:\n@mona: @chopin draft it"
    );
    end(&mut client, &turn, &session).await;
    settle(&s).await;
}

/// Permission checks, "ownership generation": a turn is bound to the generation it started
/// under. If the ownership is released and claimed again meanwhile (even by the same account), the
/// next host tool call is refused and Chat shows the denial.
#[tokio::test]
async fn a_host_tool_call_after_the_ownership_generation_changed_is_refused() {
    use chopin_server::store::Claim;
    let s = setup().await;
    let mut client = attached_client(&s, &[]).await;
    let (session, turn) = go(&s, &mut client).await;
    let first = call(&mut client, &turn, "c1", "read_plan", json!({})).await;
    assert_eq!(first["isError"], false);
    let ownership = s.store.ownership(s.doc).await.unwrap();
    let holder = ownership.holder.clone().unwrap();
    s.store
        .release_ownership(s.doc, ownership.generation)
        .await
        .unwrap();
    let claimed = s.store.claim_ownership(s.doc, &holder, 0).await.unwrap();
    assert!(matches!(claimed, Claim::Claimed(o) if o.generation == ownership.generation + 1));
    let second = call(&mut client, &turn, "c2", "read_plan", json!({})).await;
    assert_eq!(second["isError"], true, "{second}");
    assert!(
        second["output"]
            .as_str()
            .unwrap()
            .contains("owner has changed"),
        "{second}"
    );
    end(&mut client, &turn, &session).await;
    settle(&s).await;
}

/// Stop from the room: a writer's `planner:stop` stops the running turn (the client is sent
/// `abort`); with nothing running it says so.
#[tokio::test]
async fn a_writer_stops_the_running_turn_from_the_room() {
    use chopin_fixtures::browser::BrowserSocket;
    let s = setup().await;
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &s.host,
        &format!("/api/documents/{}/room", s.doc),
        Some(&s.mona_cookie),
        Some(&format!("http://{}", s.host)),
    )
    .await
    .unwrap();
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let idle = room.next_of_type("planner:stopped").await.unwrap();
    assert_eq!(idle["stopped"], false, "nothing to stop: {idle}");

    let mut client = attached_client(&s, &[]).await;
    let (_, turn) = go(&s, &mut client).await;
    room.send_json(&json!({ "type": "planner:stop" }))
        .await
        .unwrap();
    let stopped = room.next_of_type("planner:stopped").await.unwrap();
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
    settle(&s).await;
}

/// MSG-18: "A process that is stopping starts no turn and says nothing (the browser re-sends to
/// the next process)." Once the stop has begun, a message to the Planner starts no turn, saves
/// nothing and gets no answer at all — neither an ack nor a refusal — while a message between
/// people is still saved.
#[tokio::test]
async fn msg_18_a_stopping_process_starts_no_turn_and_says_nothing() {
    use chopin_server::chat::{Place, SendRequest, Sender};
    let s = setup().await;
    let _client = attached_client(&s, &[]).await;
    s.state.shutdown.begin();
    let place = Place {
        document: s.doc,
        url: DOC_URL.into(),
        focus: None,
    };
    let mona = Sender {
        login: "mona".into(),
        can_write: true,
        owner: None,
        session: None,
    };
    let reply = s
        .state
        .chat
        .send(
            &place,
            &mona,
            SendRequest {
                request_id: "m-1".into(),
                text: "@chopin go".into(),
                commands: Vec::new(),
                files: Vec::new(),
                mentions: Vec::new(),
            },
        )
        .await;
    assert!(!s.state.turns.is_running(s.doc), "no turn started");
    assert_eq!(reply.frame(), None, "no answer: {reply:?}");
    assert!(posts(&s).await.is_empty(), "nothing saved");
    let direct = s.state.turns.request(request(&s, "@chopin go")).await;
    assert!(direct.is_err(), "{direct:?}");
    assert!(!s.state.turns.is_running(s.doc));
}

/// Fails every Chat append while `failing` is set.
struct FailingAppends(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl chopin_server::store::instrumented::Hook for FailingAppends {
    fn call(&self, _: chopin_server::store::instrumented::Call) {}

    fn fail(&self, method: &'static str, _write: bool) -> Option<chopin_server::store::StoreError> {
        (method == "append_transcript" && self.0.load(std::sync::atomic::Ordering::SeqCst))
            .then(|| chopin_server::store::StoreError::Backend("disk full".into()))
    }
}

/// MSG-14 (issue 24 item 10): refusal words never say anything is kept — a message to the
/// Planner that Chat could not save is refused without promising it is kept anywhere.
#[tokio::test]
async fn msg_14_a_message_chat_could_not_save_is_refused_without_promising_it_is_kept() {
    use chopin_server::store::instrumented::Instrumented;
    use chopin_server::store::{MemoryStore, Store};
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(Instrumented::new(
        std::sync::Arc::new(MemoryStore::new()),
        FailingAppends(failing.clone()),
    ));
    let s = support::served_over(store).await;
    let _client = attached_client(&s, &[]).await;
    let mut room = s.room().await;
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = support::ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "r-1", "text": "@chopin plan it" }),
    )
    .await;
    assert_eq!(refused["type"], "chat:refused", "{refused}");
    assert_eq!(refused["code"], "not-saved", "{refused}");
    let words = refused["message"].as_str().unwrap().to_lowercase();
    for promise in ["has your message", "kept", "will be sent", "is saved"] {
        assert!(!words.contains(promise), "{promise:?} in {words:?}");
    }
}
