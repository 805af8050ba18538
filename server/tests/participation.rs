//! Automatic participation (CTX-01..03) on the remote harness, with the server's built-in
//! turn-taking judgment (no `CLASSIFIER_MODEL`): a message without `@chopin` in a solo
//! conversation goes to the attached Planner at once; in a group exchange the Planner yields,
//! and speaks after 8 s of quiet only when a person called it by name; a writer pauses and
//! resumes it for everyone, durably, and `@chopin` still reaches a paused Planner. The quiet
//! window's millisecond edges are in the simulator's `ctx-03` scenarios.

use std::time::Duration;

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::github::Permission;
use chopin_protocol::agent::ServerMessage;
use chopin_server::participation::{paused_words, resumed_words, QUIET_WINDOW};
use serde_json::{json, Value};

mod support;

use support::{ask_room, next, served, Served};

/// The next `start` the client hears, and the turn id and prompt of the `turn` that follows
/// it, within `within`; `None` if none comes.
async fn begun(client: &mut AgentClient, within: Duration) -> Option<(String, String)> {
    tokio::time::timeout(within, async {
        loop {
            if let ServerMessage::Start(start) = next(client).await {
                client
                    .send(&chopin_protocol::agent::ClientMessage::Started(
                        chopin_protocol::agent::Started {
                            session_id: start.session_id.clone(),
                        },
                    ))
                    .await
                    .unwrap();
                loop {
                    if let ServerMessage::Turn(t) = next(client).await {
                        return (t.turn_id, t.prompt);
                    }
                }
            }
        }
    })
    .await
    .ok()
}

/// The prompt of the next turn started within `within`.
async fn started(client: &mut AgentClient, within: Duration) -> Option<String> {
    begun(client, within).await.map(|(_, prompt)| prompt)
}

async fn send(room: &mut chopin_fixtures::browser::BrowserSocket, id: &str, text: &str) -> Value {
    let ack = ask_room(
        room,
        json!({ "type": "chat:send", "requestId": id, "text": text }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    ack
}

async fn http(s: &Served, method: &str, cookie: &str, body: Option<Value>) -> (u16, Value) {
    let path = format!("http://{}/api/channels/{}/participation", s.host, s.doc);
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("cookie", cookie)
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

async fn chat_bodies(s: &Served) -> Vec<String> {
    s.state.transcript.settled().await;
    s.store
        .transcript(s.doc, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect()
}

#[tokio::test]
async fn ctx_01_ctx_02_a_solo_message_without_at_chopin_goes_to_the_planner_at_once() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = send(&mut room, "m-1", "what should the intro say").await;
    assert!(
        ack["planner"].is_null(),
        "addressed as written: to the room ({ack})"
    );
    let prompt = started(&mut client, Duration::from_secs(5))
        .await
        .expect("CTX-01: in a solo conversation the Planner replies promptly");
    assert_eq!(prompt, "@mona: what should the intro say");
}

#[tokio::test]
async fn ctx_01_in_a_group_exchange_the_planner_yields_and_after_8_s_of_quiet_speaks_only_when_called_by_name(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut mona = s.room().await;
    let lisa_cookie = s.sign_in("lisa", 2002, Permission::Write).await;
    let mut lisa = s.room_as(s.doc, &lisa_cookie).await;
    send(&mut mona, "m-1", "shall we split the rollout?").await;
    // mona's first line was solo: the Planner took it. Its turn is not this test's subject.
    let (turn, _) = begun(&mut client, Duration::from_secs(5)).await.unwrap();
    support::end_turn(&s, &mut client, &turn).await;
    send(&mut lisa, "l-1", "yes, by region").await;
    send(&mut mona, "m-2", "agreed, eu first").await;
    assert_eq!(
        started(&mut client, QUIET_WINDOW + Duration::from_secs(1)).await,
        None,
        "CTX-01: during a human exchange the Planner yields"
    );
    send(&mut lisa, "l-2", "chopin, which region is riskier?").await;
    let prompt = started(&mut client, QUIET_WINDOW + Duration::from_secs(2))
        .await
        .expect("CTX-02: called by name, it speaks once the group is quiet");
    assert!(
        prompt.ends_with("The new message:\n@lisa: chopin, which region is riskier?"),
        "{prompt}"
    );
    assert!(
        prompt.contains("@lisa: yes, by region\n@mona: agreed, eu first"),
        "the exchange it yielded to is its backscroll: {prompt}"
    );
}

#[tokio::test]
async fn ctx_02_ctx_03_a_writer_pauses_it_for_everyone_durably_and_at_chopin_still_reaches_the_planner(
) {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let (status, state) = http(&s, "GET", &s.mona_cookie, None).await;
    assert_eq!((status, &state["paused"]), (200, &json!(false)), "{state}");

    let reader = s.sign_in("rita", 3003, Permission::Read).await;
    let (status, refused) = http(&s, "PUT", &reader, Some(json!({ "paused": true }))).await;
    assert_eq!(status, 403, "a reader cannot pause it: {refused}");
    let (status, bad) = http(&s, "PUT", &s.mona_cookie, Some(json!({ "pause": 1 }))).await;
    assert_eq!(status, 400, "{bad}");

    let (status, paused) = http(&s, "PUT", &s.mona_cookie, Some(json!({ "paused": true }))).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["pausedBy"], "mona");
    // Pausing again says nothing more in Chat.
    http(&s, "PUT", &s.mona_cookie, Some(json!({ "paused": true }))).await;
    let (_, seen) = http(&s, "GET", &reader, None).await;
    assert_eq!(seen["paused"], true, "shared: a reader sees it");
    assert_eq!(
        s.store
            .participation_pause(s.doc)
            .await
            .unwrap()
            .map(|p| p.paused_by),
        Some("mona".to_owned()),
        "durable"
    );

    send(&mut room, "m-1", "what should the intro say").await;
    assert_eq!(
        started(&mut client, Duration::from_millis(500)).await,
        None,
        "paused: no automatic turn"
    );
    send(&mut room, "m-2", "@chopin draft the intro").await;
    let (turn, prompt) = begun(&mut client, Duration::from_secs(5)).await.unwrap();
    assert!(
        prompt.ends_with("The new message:\n@mona: @chopin draft the intro"),
        "CTX-02: an explicit @chopin stays immediate: {prompt}"
    );
    support::end_turn(&s, &mut client, &turn).await;

    let (_, resumed) = http(&s, "PUT", &s.mona_cookie, Some(json!({ "paused": false }))).await;
    assert_eq!(resumed["paused"], false, "{resumed}");
    assert!(resumed["pausedBy"].is_null());
    let bodies = chat_bodies(&s).await;
    assert_eq!(
        bodies
            .iter()
            .filter(|b| **b == paused_words("mona"))
            .count(),
        1,
        "{bodies:?}"
    );
    assert!(bodies.contains(&resumed_words("mona")), "{bodies:?}");
}

#[tokio::test]
async fn ctx_03_a_flood_of_group_lines_holds_one_window_and_one_timer_for_the_document() {
    let s = served().await;
    s.pause_participation(s.doc).await;
    let mut mona = s.room().await;
    let lisa_cookie = s.sign_in("lisa", 2002, Permission::Write).await;
    let mut lisa = s.room_as(s.doc, &lisa_cookie).await;
    send(&mut lisa, "l-0", "hello").await;
    s.store.resume_participation(s.doc).await.unwrap();
    let before = s.state.shutdown.running();
    for n in 0..40 {
        let (room, who) = if n % 2 == 0 {
            (&mut mona, "m")
        } else {
            (&mut lisa, "l")
        };
        send(
            room,
            &format!("{who}-{n}"),
            &format!("line {n} of a long exchange"),
        )
        .await;
    }
    // Each line was handled on its own task; once they are done, one window is left.
    for _ in 0..100 {
        if s.state.shutdown.running() <= before + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.state.participation.windows(), 1);
    assert!(
        s.state.shutdown.running() <= before + 1,
        "one timer for the document, not one per line: {} tasks over {before}",
        s.state.shutdown.running()
    );
}
