//! A process among several on one database (`PROCESSES=many`), in process over a memory store
//! shared with "another process" the test plays through the store: a document is served only
//! under its lease; taking a document over does the startup's sweeps for it alone; losing its
//! lease closes its sockets with 1013 and refuses it from then on.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chopin_fixtures::browser::BrowserEvent;
use chopin_server::store::{
    Claim, Holder, LeaseAcquire, MemoryStore, NewDocument, Store, WriterLease,
};
use support::served_with;
use uuid::Uuid;

/// The lease period the process is given.
const LEASE_MS: u64 = 1_000;

fn now_ms() -> i64 {
    use chopin_server::runtime::clock::{Clock, SystemClock};
    SystemClock.now_ms()
}

async fn many(store: Arc<dyn Store>) -> support::Served {
    served_with(store, |c| {
        c.many_processes = true;
        c.document_lease_ms = LEASE_MS;
    })
    .await
}

/// `GET /api/documents/{document}` with mona's token: its status, `Retry-After` and body.
async fn ask(s: &support::Served, document: Uuid) -> (u16, Option<String>, String) {
    get(s, &format!("/api/documents/{document}")).await
}

/// `GET path` with mona's token: its status, `Retry-After` and body.
async fn get(s: &support::Served, path: &str) -> (u16, Option<String>, String) {
    use chopin_server::runtime::connector::{self, TcpConnector};
    let request = http::Request::get(format!("http://{}{path}", s.host))
        .header("authorization", format!("Bearer {}", s.mona))
        .body(axum::body::Bytes::new())
        .unwrap();
    let response = connector::send(&TcpConnector, request).await.unwrap();
    let after = response
        .headers
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        response.status.as_u16(),
        after,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

/// Another process takes `document`'s lease, as after this one gave it up.
async fn take_over(store: &Arc<dyn Store>, document: Uuid) {
    let row = store
        .document_lease(document)
        .await
        .unwrap()
        .expect("leased");
    let held = WriterLease {
        holder: row.holder.expect("held"),
        epoch: row.epoch,
        expires_at_ms: row.expires_at_ms,
    };
    store.release_document_lease(document, &held).await.unwrap();
    let taken = store
        .acquire_document_lease(document, "another-process", now_ms(), 60_000)
        .await
        .unwrap();
    assert!(matches!(taken, LeaseAcquire::Acquired(_)), "{taken:?}");
}

#[tokio::test]
async fn a_document_taken_over_closes_its_sockets_here_with_1013_and_is_refused_after() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    let mut room = s.room().await;
    assert_eq!(ask(&s, s.doc).await.0, 200, "served here");
    take_over(&store, s.doc).await;
    // The next renewal finds it taken: the room is told to go, to reconnect where it is served.
    let closed = tokio::time::timeout(Duration::from_millis(3 * LEASE_MS), async {
        loop {
            match room.recv_json().await {
                Ok(BrowserEvent::Closed { code, reason }) => return (code, reason),
                Ok(_) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await
    .expect("the room closes within the lease");
    assert_eq!(closed, (1013, "served-elsewhere".to_owned()));
    let (status, after, body) = ask(&s, s.doc).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("served-elsewhere"), "{body}");
    let after: u64 = after.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&after), "{after}");
    let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
    let refused = chopin_fixtures::browser::BrowserSocket::connect(
        stream,
        &s.host,
        &format!("/api/documents/{}/room", s.doc),
        Some(&s.mona_cookie),
        Some(&format!("http://{}", s.host)),
    )
    .await;
    assert!(
        refused.is_err(),
        "a socket of a document served elsewhere is refused"
    );
    // The agent link names its document in the query: it is refused before the handler looks
    // at the upgrade (which would answer 426 here), so a balancer can pass it on.
    let (status, after, body) = get(&s, &format!("/api/v1/agent?document={}", s.doc)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("served-elsewhere"), "{body}");
    assert!(after.is_some(), "Retry-After");
}

#[tokio::test]
async fn a_planner_attached_here_is_closed_unavailable_when_its_tree_is_taken_over() {
    use chopin_fixtures::agent::Event;
    use chopin_protocol::agent::{ErrorCode, ServerMessage};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    let mut planner = s.attach(&[]).await;
    assert!(s.state.planners.holder(s.doc).is_some());
    take_over(&store, s.doc).await;
    // The next renewal finds the tree taken: the link is told to attach again (where the tree
    // is served now), and this process forgets the slot without writing.
    let (error, closed) = tokio::time::timeout(Duration::from_millis(3 * LEASE_MS), async {
        let mut error = None;
        loop {
            match planner.recv().await {
                Ok(Event::Message(ServerMessage::Error(e))) => error = Some(e),
                Ok(Event::Message(_)) => {}
                Ok(Event::Closed { code, reason }) => return (error, (code, reason)),
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await
    .expect("the Planner link closes within the lease");
    let error = error.expect("an error frame before the close");
    assert_eq!(error.code, ErrorCode::Unavailable, "{error:?}");
    assert!(error.retry_after_ms.is_some(), "{error:?}");
    assert_eq!(closed.1, "unavailable");
    assert!(s.state.planners.holder(s.doc).is_none());
    assert!(s.state.planners.held().is_empty());
}

#[tokio::test]
async fn a_turn_running_here_is_stopped_and_nothing_of_it_kept_when_its_tree_is_taken_over() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    let mut planner = s.attach(&[]).await;
    let mut room = s.room().await;
    let _begun = support::begin_turn(&mut planner, &mut room, "@chopin plan it").await;
    assert!(s.state.turns.is_running(s.doc));
    take_over(&store, s.doc).await;
    // The client reads its link as a client does (a link closes once its client answers the
    // close): it is told to attach again where the document is served now.
    let closed = tokio::time::timeout(Duration::from_millis(3 * LEASE_MS), async {
        loop {
            if let chopin_fixtures::agent::Event::Closed { code, reason } =
                planner.recv().await.expect("the link")
            {
                return (code, reason);
            }
        }
    })
    .await
    .expect("the Planner link closes within the lease");
    assert_eq!(closed.1, "unavailable");
    // The turn stopped with it, and nothing of it is kept here.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(LEASE_MS);
    while s.state.turns.is_running(s.doc) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the turn still runs here a lease after its link closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.state.planners.holder(s.doc).is_none());
    assert_eq!(s.state.turns.kept_session(s.doc), None);
    assert_eq!(s.state.questions.waiting(), 0);
}

#[tokio::test]
async fn life_87_the_build_sweep_expires_silent_builds_only_of_documents_served_here() {
    use chopin_server::store::{BuildState, GraphChange, NewBuild, NewMachine};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    assert_eq!(ask(&s, s.doc).await.0, 200, "served here");
    // Another document, served by another process.
    let other = Uuid::new_v4();
    store
        .create_document(&NewDocument {
            id: other,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "other".into(),
            title: "Other".into(),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let taken = store
        .acquire_document_lease(other, "another-process", now_ms(), 60_000)
        .await
        .unwrap();
    assert!(matches!(taken, LeaseAcquire::Acquired(_)), "{taken:?}");
    let mona = store.upsert_account(1001, "mona", 1_000).await.unwrap();
    let machine = Uuid::new_v4();
    store
        .pair_machine(&NewMachine {
            id: machine,
            owner_account_id: mona.id,
            name: "studio".into(),
            release: Some("0.0.23".into()),
            created_at_ms: 1_000,
            sealed: b"sealed".to_vec(),
        })
        .await
        .unwrap();
    // A build of each, picked up 30 minutes and 1 ms ago and silent since.
    let picked_up_at = now_ms() - 30 * 60 * 1_000 - 1;
    let mut builds = Vec::new();
    for doc in [s.doc, other] {
        let edit = GraphChange::Edit {
            base: None,
            plan_revision: 1,
            definition: "{}".into(),
        };
        store.change_graph(doc, &edit, 10).await.unwrap().unwrap();
        let approve = GraphChange::Approve {
            graph_version: 1,
            graph_revision: 1,
            current_plan_revision: 1,
        };
        let build = NewBuild {
            id: Uuid::new_v4(),
            machine_id: machine,
            requested_by_account_id: mona.id,
            requested_by: "mona".into(),
            checkout: None,
        };
        store
            .approve_and_queue(doc, &approve, &build, 11)
            .await
            .unwrap()
            .unwrap();
        store
            .pick_up_build(build.id, "bridge", picked_up_at)
            .await
            .unwrap()
            .unwrap();
        builds.push(build.id);
    }
    s.state.builds.sweep().await.expect("the sweep runs");
    let state = |id| {
        let store = store.clone();
        async move { store.build(id).await.unwrap().unwrap().state }
    };
    assert_eq!(state(builds[0]).await, BuildState::Failed, "served here");
    assert_eq!(
        state(builds[1]).await,
        BuildState::Launching,
        "served by another process, which sweeps it"
    );
}

#[tokio::test]
async fn life_83_a_connector_polling_another_process_is_online_here_too() {
    use chopin_server::store::{ConnectorPoll, NewMachine};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    let mona = store.upsert_account(1001, "mona", 1_000).await.unwrap();
    let machine = Uuid::new_v4();
    store
        .pair_machine(&NewMachine {
            id: machine,
            owner_account_id: mona.id,
            name: "studio".into(),
            release: None,
            created_at_ms: 1_000,
            sealed: b"sealed".to_vec(),
        })
        .await
        .unwrap();
    assert!(!s.state.builds.online(machine));
    // Its connector polled another process, which recorded the poll.
    store
        .record_connector_poll(&ConnectorPoll {
            machine_id: machine,
            polled_at_ms: now_ms(),
            auto_build: true,
        })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(chopin_server::builds::POLLS_READ_EVERY_MS + 1_000);
    while !s.state.builds.online(machine) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not online here within a read of the polls"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s.state.builds.allows_auto_build(machine));
}

#[tokio::test]
async fn atm_37_default_machine_lets_go_only_of_the_unused_documents_this_process_serves() {
    use chopin_server::store::{MachineChoice, NewMachine};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = served_with(store.clone(), |c| {
        c.many_processes = true;
        c.document_lease_ms = LEASE_MS;
        c.default_machine_idle_ms = 0;
    })
    .await;
    assert_eq!(ask(&s, s.doc).await.0, 200, "served here");
    // Another document, served by another process (where its rooms would be counted).
    let other = Uuid::new_v4();
    store
        .create_document(&NewDocument {
            id: other,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "other".into(),
            title: "Other".into(),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    let taken = store
        .acquire_document_lease(other, "another-process", now_ms(), 60_000)
        .await
        .unwrap();
    assert!(matches!(taken, LeaseAcquire::Acquired(_)), "{taken:?}");
    let mona = store.upsert_account(1001, "mona", 1_000).await.unwrap();
    let machine = Uuid::new_v4();
    store
        .pair_machine(&NewMachine {
            id: machine,
            owner_account_id: mona.id,
            name: "studio".into(),
            release: None,
            created_at_ms: 1_000,
            sealed: b"sealed".to_vec(),
        })
        .await
        .unwrap();
    for doc in [s.doc, other] {
        store
            .choose_default_machine(&MachineChoice {
                document_id: doc,
                machine_id: machine,
                chosen_by_account_id: mona.id,
                chosen_by: "mona".into(),
                chosen_at_ms: 1_000,
                by_default: true,
            })
            .await
            .unwrap();
    }
    let default = s.state.default_machine.clone().expect("Default machine");
    let swept = default.sweep().await.expect("the sweep runs");
    assert_eq!((swept.let_go, swept.kept), (1, 1), "{swept:?}");
    assert_eq!(store.machine_choice(s.doc).await.unwrap(), None);
    assert!(
        store.machine_choice(other).await.unwrap().is_some(),
        "the other process counts its rooms and lets it go"
    );
}

#[tokio::test]
async fn taking_a_document_over_clears_the_owner_an_earlier_process_left_and_only_its_own() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = many(store.clone()).await;
    let account = store.upsert_account(1001, "mona", 1_000).await.unwrap();
    let holder = Holder {
        account_id: account.id,
        login: "mona".into(),
        browser_login_id: Uuid::new_v4(),
    };
    // Two documents an earlier process left owned (no hold stored for either).
    let other = Uuid::new_v4();
    store
        .create_document(&NewDocument {
            id: other,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "other".into(),
            title: "Other".into(),
            ..NewDocument::default()
        })
        .await
        .unwrap();
    for doc in [s.doc, other] {
        let claim = store.claim_ownership(doc, &holder, now_ms()).await.unwrap();
        assert!(matches!(claim, Claim::Claimed(_)), "{claim:?}");
    }
    // The first request for the document takes it over: its owner is cleared before it is
    // answered; the document nobody asked for keeps its owner.
    assert_eq!(ask(&s, s.doc).await.0, 200);
    assert!(store.ownership(s.doc).await.unwrap().holder.is_none());
    assert!(store.ownership(other).await.unwrap().holder.is_some());
}

/// Issue 27, "idempotency keys that must survive a move": a retry that reaches another process
/// — here the one serving the document after the first process stopped and handed it over, or
/// simply another one behind the balancer — answers what the first call answered and makes
/// nothing twice: MCP `create_document` and `update_document`, a Chat line (MSG-16), a comment.
#[tokio::test]
async fn a_retry_on_another_process_answers_the_first_call_and_makes_nothing_twice() {
    use chopin_fixtures::mcp::{call, connect, ok, refusal};
    use serde_json::json;
    use support::ask_room;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = many(store.clone()).await;
    let b = many(store.clone()).await;
    let mcp_a = connect(&format!("http://{}/mcp", a.host), &a.mona).await;
    let mcp_b = connect(&format!("http://{}/mcp", b.host), &b.mona).await;

    // A creation names no document, so its retry may reach any process.
    let create = json!({"repository": "octo/plans", "title": "Quay", "source": "# Quay\n",
                        "idempotencyKey": "c-1"});
    let first = ok(call(&mcp_a, "create_document", create.clone()).await);
    let again = ok(call(&mcp_b, "create_document", create).await);
    assert_eq!(
        again["id"], first["id"],
        "the retry on B answers A's document"
    );
    let quays = store
        .repository_documents("octo", "plans", 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.title == "Quay")
        .count();
    assert_eq!(quays, 1, "created once");

    // On A, which serves a.doc: a Chat line, a comment, an update, each with its key.
    let mut room = a.room().await;
    let line = json!({"type": "chat:send", "requestId": "r-1", "text": "Once only"});
    let acked = ask_room(&mut room, line.clone()).await;
    assert_eq!(acked["type"], "chat:ack", "{acked}");
    let comment = json!({"type": "comment:start", "requestId": "n-1",
                         "quote": "Notes", "text": "Once only"});
    let noted = ask_room(&mut room, comment.clone()).await;
    assert_eq!(noted["type"], "comment:ack", "{noted}");
    let update = json!({"document": a.doc, "planRevision": 0, "source": "# Notes\n\nOnce.\n",
                        "idempotencyKey": "u-1"});
    let updated = ok(call(&mcp_a, "update_document", update.clone()).await);
    assert_eq!(updated["status"], "applied", "{updated}");
    drop(room);

    // A stops and hands its documents over; B serves a.doc from now on.
    let stopped = a.running.stop().await;
    assert!(stopped.released, "{stopped:?}");
    let mut room = b.connect_room(a.doc, &b.mona_cookie).await;
    room.next_of_type("session:planner").await.unwrap();
    assert_eq!(ask_room(&mut room, line).await, acked, "MSG-16 on B");
    assert_eq!(ask_room(&mut room, comment).await, noted);
    assert_eq!(
        ok(call(&mcp_b, "update_document", update).await),
        updated,
        "the update's first answer"
    );

    let lines = store.transcript(a.doc, 0, 100).await.unwrap();
    assert_eq!(
        lines.iter().filter(|e| e.body == "Once only").count(),
        1,
        "{lines:?}"
    );
    let threads = store.comment_threads(a.doc, 100).await.unwrap();
    assert_eq!(threads.len(), 1, "{threads:?}");
    let read = ok(call(&mcp_b, "read_document", json!({"document": a.doc})).await);
    assert_eq!(read["revision"], 1, "written once");

    // A reply whose process saved it and died before answering (its claim made, its note
    // saved, no answer kept): the retry on B takes the claim over, finds that reply and
    // answers with it instead of saving it a second time.
    let thread: Uuid = serde_json::from_value(noted["thread"]["id"].clone()).unwrap();
    let since = now_ms();
    let key = chopin_server::store::RequestKey {
        scope: "comment".into(),
        holder: "mona".into(),
        key: format!("{}:n-2", a.doc),
        document: Some(a.doc),
    };
    let claimed = store
        .claim_request(&key, "", since, since + 600_000)
        .await
        .unwrap();
    assert!(
        matches!(claimed, chopin_server::store::RequestClaim::Claimed { .. }),
        "{claimed:?}"
    );
    let dead = chopin_server::store::NewCommentNote {
        author_login: Some("mona".into()),
        to_planner: false,
        body: "Said once".into(),
        created_at_ms: since,
    };
    store.reply_comment(a.doc, thread, &dead, 20).await.unwrap();
    let reply = json!({"type": "comment:reply", "requestId": "n-2", "thread": thread,
                       "text": "Said once"});
    let replied = ask_room(&mut room, reply.clone()).await;
    assert_eq!(replied["type"], "comment:ack", "{replied}");
    assert_eq!(
        replied["note"]["seq"], 1,
        "the dead call's reply: {replied}"
    );
    assert_eq!(replied["note"]["createdAt"], since, "{replied}");
    assert_eq!(
        ask_room(&mut room, reply).await,
        replied,
        "kept from now on"
    );
    let (_, notes) = store.comment_thread(a.doc, thread).await.unwrap().unwrap();
    assert_eq!(
        notes.iter().filter(|n| n.body == "Said once").count(),
        1,
        "{notes:?}"
    );

    // An update whose process committed it and died before answering: the retry on B takes
    // its claim over and finds the document one revision on with that very source — answered
    // applied at that revision, not refused stale, and written once. (Its write here is made
    // under another key; storage cannot tell one from the other.)
    let source = "# Notes\n\nTwice?\n";
    let written = ok(call(
        &mcp_b,
        "update_document",
        json!({"document": a.doc, "planRevision": 1, "source": source, "idempotencyKey": "u-2"}),
    )
    .await);
    assert_eq!(written["status"], "applied", "{written}");
    let digest = {
        use sha2::{Digest, Sha256};
        hex::encode(
            Sha256::new()
                .chain_update(1u64.to_be_bytes())
                .chain_update(source.as_bytes())
                .finalize(),
        )
    };
    let since = now_ms();
    let key = chopin_server::store::RequestKey {
        scope: "update_document".into(),
        holder: "mona".into(),
        key: format!("{}:u-3", a.doc),
        document: Some(a.doc),
    };
    store
        .claim_request(&key, &digest, since, since + 600_000)
        .await
        .unwrap();
    let retried = ok(call(
        &mcp_b,
        "update_document",
        json!({"document": a.doc, "planRevision": 1, "source": source, "idempotencyKey": "u-3"}),
    )
    .await);
    assert_eq!(retried["status"], "applied", "{retried}");
    assert_eq!(written["planRevision"], 2, "{written}");
    assert_eq!(retried["planRevision"], 2, "{retried}");
    let read = ok(call(&mcp_b, "read_document", json!({"document": a.doc})).await);
    assert_eq!(read["revision"], 2, "written once");
    // Another source from that revision, under a taken-over claim, is stale as ever.
    let other = "# Notes\n\nElse.\n";
    let digest = {
        use sha2::{Digest, Sha256};
        hex::encode(
            Sha256::new()
                .chain_update(1u64.to_be_bytes())
                .chain_update(other.as_bytes())
                .finalize(),
        )
    };
    let key = chopin_server::store::RequestKey {
        key: format!("{}:u-4", a.doc),
        ..key
    };
    store
        .claim_request(&key, &digest, since, since + 600_000)
        .await
        .unwrap();
    let (code, refused) = refusal(
        call(
            &mcp_b,
            "update_document",
            json!({"document": a.doc, "planRevision": 1, "source": other, "idempotencyKey": "u-4"}),
        )
        .await,
    );
    assert_eq!(code, "stale", "{refused}");
}
