//! Title maintenance on the whole stack, under `HARNESS=remote`: after a member's message is
//! saved, an isolated worker on the attached client drafts the document's title from the
//! conversation; the draft lands only on a blank title or the one the job drafted itself, never
//! on a title a person chose, never while somebody is renaming, and a conversation that names
//! nothing leaves the title alone. Rows: OWN-09, OWN-11..16, OWN-19.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chopin_fixtures::agent::AgentClient;
use chopin_fixtures::browser::BrowserSocket;
use chopin_protocol::agent::{
    ClientMessage, ServerMessage, SessionMode, Started, Turn, TurnEnd, TurnStatus,
};
use chopin_server::store::{Job, JobState, MemoryStore, NewDocument};
use serde_json::{json, Value};
use support::{ask_room, next, served_with, Served};
use uuid::Uuid;

async fn served() -> Served {
    served_with(Arc::new(MemoryStore::new()), |c| c.background_jobs = true).await
}

/// A document of octo/plans created without a title.
async fn untitled(s: &Served) -> Uuid {
    let id = Uuid::new_v4();
    s.store
        .create_document(&NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "untitled".into(),
            title: String::new(),
            created_at_ms: 0,
            parent_id: None,
            ..NewDocument::default()
        })
        .await
        .unwrap();
    id
}

async fn title_of(s: &Served, doc: Uuid) -> String {
    s.store.document(doc).await.unwrap().unwrap().title
}

/// The next worker turn the client is asked for, started; description turns on the way are
/// answered at once. `None` if no title turn comes within `ms`.
async fn title_turn(client: &mut AgentClient, ms: u64) -> Option<Turn> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    loop {
        let frame = tokio::time::timeout_at(deadline, client.recv())
            .await
            .ok()?;
        let ServerMessage::Start(start) = (match frame.unwrap() {
            chopin_fixtures::agent::Event::Message(m) => m,
            other => panic!("the link ended: {other:?}"),
        }) else {
            continue;
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
                json!({ "description": "Notes about a plan" }),
            )
            .await;
            continue;
        }
        assert!(turn.instructions.contains("title"), "{}", turn.instructions);
        assert!(turn.host_tools.is_empty());
        return Some(turn);
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

async fn say(room: &mut BrowserSocket, id: &str, text: &str) {
    let ack = ask_room(
        room,
        json!({ "type": "chat:send", "requestId": id, "text": text }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
}

/// The newest title job of `doc`, once settled (at most 10 s).
async fn settled_title_job(s: &Served, doc: Uuid) -> Job {
    for _ in 0..200 {
        let jobs = s.store.document_jobs(doc, 100).await.unwrap();
        if let Some(job) = jobs.into_iter().find(|j| j.kind == "document-title") {
            if !job.state.is_active() {
                return job;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no settled title job: {:?}",
        s.store.document_jobs(doc, 100).await.unwrap()
    );
}

fn title_jobs(jobs: Vec<Job>) -> usize {
    jobs.iter().filter(|j| j.kind == "document-title").count()
}

fn outcome(job: &Job) -> Value {
    serde_json::from_str::<Value>(job.artifact.as_deref().unwrap_or("null")).unwrap()["outcome"]
        .clone()
}

#[tokio::test]
async fn own_09_own_12_any_members_message_drafts_a_blank_title_and_the_next_refines_its_own() {
    let s = served().await;
    let doc = untitled(&s).await;
    // Messages without @chopin here are for the room: no automatic Planner turn (CTX-01).
    s.pause_participation(doc).await;
    let mut client = s.attach_to(doc, &[]).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    // An ordinary message between people, not addressed to the Planner (OWN-09).
    say(
        &mut room,
        "m1",
        "Let's plan the search revamp: faster results first.",
    )
    .await;
    let turn = title_turn(&mut client, 10_000)
        .await
        .expect("a title draft");
    assert!(
        turn.prompt.contains("Current title: (blank)"),
        "{}",
        turn.prompt
    );
    assert!(
        turn.prompt.contains("@mona: Let's plan the search revamp"),
        "{}",
        turn.prompt
    );
    assert_eq!(
        turn.response_format,
        Some(chopin_server::jobs::title::schema())
    );
    end(
        &mut client,
        &turn.turn_id,
        json!({ "title": "Search revamp." }),
    )
    .await;
    let job = settled_title_job(&s, doc).await;
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(outcome(&job), "applied");
    assert_eq!(title_of(&s, doc).await, "Search revamp");
    let sidecar = s.store.title_sidecar(doc).await.unwrap();
    assert_eq!(sidecar.planner_title.as_deref(), Some("Search revamp"));
    // A draft changes the title only: no revision of the body (OWN-11).
    assert_eq!(
        s.store.document(doc).await.unwrap().unwrap().plan_revision,
        0
    );
    // The next message may refine the Planner's own draft (OWN-12).
    say(&mut room, "m2", "And typo tolerance.").await;
    let turn = title_turn(&mut client, 10_000)
        .await
        .expect("a second draft");
    assert!(
        turn.prompt.contains("Current title: Search revamp"),
        "{}",
        turn.prompt
    );
    end(
        &mut client,
        &turn.turn_id,
        json!({ "title": "Search revamp with typo tolerance" }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(settled_title_job(&s, doc).await.state, JobState::Completed);
    assert_eq!(title_of(&s, doc).await, "Search revamp with typo tolerance");
}

#[tokio::test]
async fn own_11_a_conversation_that_names_nothing_leaves_the_title() {
    let s = served().await;
    let doc = untitled(&s).await;
    // Messages without @chopin here are for the room: no automatic Planner turn (CTX-01).
    s.pause_participation(doc).await;
    let mut client = s.attach_to(doc, &[]).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    say(&mut room, "m1", "hi all").await;
    let turn = title_turn(&mut client, 10_000)
        .await
        .expect("a title draft");
    end(&mut client, &turn.turn_id, json!({ "title": null })).await;
    let job = settled_title_job(&s, doc).await;
    assert_eq!(outcome(&job), "weak");
    assert_eq!(title_of(&s, doc).await, "");
}

#[tokio::test]
async fn own_13_own_14_a_title_a_person_set_or_renamed_is_never_replaced() {
    let s = served().await;
    // Messages without @chopin here are for the room: no automatic Planner turn (CTX-01).
    s.pause_participation(s.doc).await;
    // The cast's document was created titled "Notes" by a person.
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    say(&mut room, "m1", "Let's plan the search revamp.").await;
    assert!(
        title_turn(&mut client, 500).await.is_none(),
        "no model call for it"
    );
    assert_eq!(
        title_jobs(s.store.document_jobs(s.doc, 100).await.unwrap()),
        0,
        "no draft is even asked for a title a person set"
    );
    assert_eq!(title_of(&s, s.doc).await, "Notes");
    drop(room);
    drop(client);

    // A blank title the job drafted, then renamed by a person — even to the very draft: from
    // then on no draft replaces it (OWN-14).
    let doc = untitled(&s).await;
    s.pause_participation(doc).await;
    let mut client = s.attach_to(doc, &[]).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    say(&mut room, "m1", "Plan the billing migration.").await;
    let turn = title_turn(&mut client, 10_000).await.expect("a draft");
    end(
        &mut client,
        &turn.turn_id,
        json!({ "title": "Billing migration" }),
    )
    .await;
    settled_title_job(&s, doc).await;
    let current = s.store.document(doc).await.unwrap().unwrap();
    s.state
        .documents
        .rename(doc, &current.slug, "Billing migration")
        .await
        .unwrap();
    assert!(s.store.title_sidecar(doc).await.unwrap().chosen);
    let before = title_jobs(s.store.document_jobs(doc, 100).await.unwrap());
    say(&mut room, "m2", "Actually it is about invoices.").await;
    assert!(title_turn(&mut client, 500).await.is_none());
    assert_eq!(
        title_jobs(s.store.document_jobs(doc, 100).await.unwrap()),
        before
    );
    assert_eq!(title_of(&s, doc).await, "Billing migration");
}

/// How many times the server asked its store for `method` (its `/metrics`).
async fn store_calls(s: &Served, method: &str) -> u64 {
    use chopin_server::runtime::connector::{self, TcpConnector};
    let request = http::Request::get(format!("http://{}/metrics", s.host))
        .body(axum::body::Bytes::new())
        .unwrap();
    let response = connector::send(&TcpConnector, request).await.unwrap();
    let prefix = format!("chopin_store_call_seconds_count{{method=\"{method}\",outcome=\"ok\"}} ");
    String::from_utf8(response.body.to_vec())
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(|n| n.parse().unwrap()))
        .unwrap_or(0)
}

/// OWN-13: no draft can ever replace a title nobody may refine (set by a person, or not the
/// job's own), so once a message found it so, later messages do not read it again.
#[tokio::test]
async fn own_13_a_title_no_draft_may_replace_is_read_once_not_on_every_message() {
    let s = served().await;
    s.pause_participation(s.doc).await;
    let mut room = s.room().await;
    say(&mut room, "m1", "Let's plan the search revamp.").await;
    let mut read = 0;
    for _ in 0..100 {
        read = store_calls(&s, "title_sidecar").await;
        if read > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read, 1, "the first message reads the title's record");
    say(&mut room, "m2", "And the index.").await;
    say(&mut room, "m3", "And the ranking.").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store_calls(&s, "title_sidecar").await, 1);
    assert_eq!(
        title_jobs(s.store.document_jobs(s.doc, 100).await.unwrap()),
        0
    );
    assert_eq!(title_of(&s, s.doc).await, "Notes");
}

#[tokio::test]
async fn own_15_own_16_a_draft_made_while_somebody_renames_is_dropped_and_not_offered_later() {
    let s = served().await;
    let doc = untitled(&s).await;
    // Messages without @chopin here are for the room: no automatic Planner turn (CTX-01).
    s.pause_participation(doc).await;
    let mut client = s.attach_to(doc, &[]).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    room.send_json(&json!({ "type": "plan:titling", "active": true }))
        .await
        .unwrap();
    say(&mut room, "m1", "Plan the onboarding emails.").await;
    let turn = title_turn(&mut client, 10_000).await.expect("a draft");
    end(
        &mut client,
        &turn.turn_id,
        json!({ "title": "Onboarding emails" }),
    )
    .await;
    let job = settled_title_job(&s, doc).await;
    assert_eq!(outcome(&job), "held");
    assert_eq!(title_of(&s, doc).await, "", "kept while somebody renames");
    assert!(s.state.titling.holds(doc, s.state.transcript.now_ms()));
    // The socket closes: the hold runs a minute more, and a draft then is dropped too; the
    // held draft is not offered again by itself.
    drop(room);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.state.titling.holds(doc, s.state.transcript.now_ms()));
    assert!(
        title_turn(&mut client, 500).await.is_none(),
        "a held draft is not offered later"
    );
    assert!(
        !s.state
            .titling
            .holds(doc, s.state.transcript.now_ms() + 60_000),
        "a minute after the last let go"
    );
}

#[tokio::test]
async fn own_10_agent_off_drafts_no_title() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| {
        c.background_jobs = true;
        c.agent_enabled = false;
    })
    .await;
    let doc = untitled(&s).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    say(&mut room, "m1", "Plan the search revamp.").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.store.document_jobs(doc, 10).await.unwrap().is_empty());
}

/// MSG-24, MSG-25: Chopin's own scheduling (here keeping the title) waits for the running turn:
/// asked for by the message that started a turn, the title job starts no worker while that turn
/// runs (it waits as a stored row, neither shown nor counted against what a person may send) and
/// runs once the turn has ended.
#[tokio::test]
async fn msg_24_msg_25_a_title_job_asked_for_during_a_turn_waits_for_it_to_end() {
    let s = served().await;
    let doc = untitled(&s).await;
    let mut client = s.attach_to(doc, &[]).await;
    let mut room = s.connect_room(doc, &s.mona_cookie).await;
    room.next_of_type("session:planner").await.unwrap();
    say(
        &mut room,
        "m1",
        "@chopin plan the checkout flow for EU shoppers",
    )
    .await;
    // The Planner's turn, held open.
    let planner_turn = loop {
        match next(&mut client).await {
            ServerMessage::Start(start) if start.mode != SessionMode::Isolated => client
                .send(&ClientMessage::Started(Started {
                    session_id: start.session_id,
                }))
                .await
                .unwrap(),
            ServerMessage::Turn(turn) if !turn.instructions.contains("one-line description") => {
                break turn
            }
            ServerMessage::Start(start) => panic!("a worker started beside the turn: {start:?}"),
            _ => {}
        }
    };
    assert!(
        title_turn(&mut client, 1_500).await.is_none(),
        "no title worker while the turn runs"
    );
    assert_eq!(
        title_jobs(s.store.document_jobs(doc, 100).await.unwrap()),
        1
    );
    // A person may still send: the waiting job takes none of their sends.
    say(&mut room, "m2", "a note to the room").await;
    client
        .send(&ClientMessage::TurnEnd(TurnEnd {
            turn_id: planner_turn.turn_id,
            status: TurnStatus::Completed,
            output: None,
            message: None,
        }))
        .await
        .unwrap();
    let title = title_turn(&mut client, 10_000)
        .await
        .expect("the title worker once the turn ended");
    end(
        &mut client,
        &title.turn_id,
        json!({ "title": "EU checkout" }),
    )
    .await;
}

/// OWN-17 (its first two parts), OWN-19: with no client attached, new title work stays
/// pending (its credential is the attached owner's, and there is none); the member's message
/// claims no Planner ownership for its sender under `remote`; once a client attaches, the work
/// runs on it. (The implementation lock of OWN-17 belongs to the lifecycle issue.)
#[tokio::test]
async fn own_17_own_19_title_work_waits_for_an_attached_owner_and_claims_nothing_for_a_sender() {
    let s = served().await;
    let doc = untitled(&s).await;
    s.pause_participation(doc).await;
    let mut room = s.room_as(doc, &s.mona_cookie).await;
    say(&mut room, "m1", "Let's plan the search revamp.").await;
    let mut waiting = None;
    for _ in 0..100 {
        let jobs = s.store.document_jobs(doc, 100).await.unwrap();
        if let Some(job) = jobs.into_iter().find(|j| j.kind == "document-title") {
            waiting = Some(job);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiting = waiting.expect("title work was asked for");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let job = s.store.job(waiting.id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Pending, 0),
        "pending, never tried"
    );
    assert_eq!(
        s.store.ownership(doc).await.unwrap().holder,
        None,
        "no ownership claimed for the sender"
    );
    let mut client = s.attach_to(doc, &[]).await;
    let turn = title_turn(&mut client, 10_000)
        .await
        .expect("the title work runs on the attached client");
    end(
        &mut client,
        &turn.turn_id,
        json!({ "title": "Search revamp" }),
    )
    .await;
    assert_eq!(settled_title_job(&s, doc).await.state, JobState::Completed);
}
