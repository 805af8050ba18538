//! Background jobs on the whole stack, under `HARNESS=remote`: a document's description is asked
//! for when it is opened, run as an isolated worker session on the attached client (none while
//! no client is attached), kept only as the validated one-line result, and shown with the
//! document; an attempt its client walked away from is never run again.
//! Rows: JOB-01..03, JOB-09, JOB-10, JOB-12, JOB-13, RT-05, RT-06, TB-03, OWN-18, RFC-33.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chopin_fixtures::agent::AgentClient;
use chopin_protocol::agent::{
    ClientMessage, ServerMessage, SessionMode, Started, TurnEnd, TurnStatus,
};
use chopin_server::documents::updates::Update;
use chopin_server::store::{Job, JobState, MemoryStore};
use serde_json::{json, Value};
use support::{ask_room, next, served_with, Served};

/// A server whose background jobs are on.
async fn served() -> Served {
    served_with(Arc::new(MemoryStore::new()), |c| c.background_jobs = true).await
}

/// Gives the document `source` (as mona, over the documents API's update path).
async fn write(s: &Served, source: &str, key: &str) {
    let doc = s.store.document(s.doc).await.unwrap().unwrap();
    s.state
        .updates
        .update(
            "mona",
            &doc,
            &Update {
                revision: doc.plan_revision as u64,
                source,
                idempotency_key: key,
            },
        )
        .await
        .unwrap();
}

async fn jobs(s: &Served) -> Vec<Job> {
    s.store.document_jobs(s.doc, 100).await.unwrap()
}

/// Waits (at most 10 s) until the newest job is in `state`; that job.
async fn newest_in(s: &Served, state: JobState) -> Job {
    for _ in 0..200 {
        if let Some(job) = jobs(s)
            .await
            .into_iter()
            .next()
            .filter(|j| j.state == state)
        {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the newest job never became {state:?}: {:?}", jobs(s).await);
}

async fn get(s: &Served, path: &str) -> Value {
    let request = http::Request::get(format!("http://{}{path}", s.host))
        .header("cookie", &s.mona_cookie)
        .body(axum::body::Bytes::new())
        .unwrap();
    let answer = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        request,
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{path}");
    serde_json::from_slice(&answer.body).unwrap_or(Value::Null)
}

async fn metrics(s: &Served) -> String {
    let request = http::Request::get(format!("http://{}/metrics", s.host))
        .body(axum::body::Bytes::new())
        .unwrap();
    let answer = chopin_server::runtime::connector::send(
        &chopin_server::runtime::connector::TcpConnector,
        request,
    )
    .await
    .unwrap();
    String::from_utf8(answer.body.to_vec()).unwrap()
}

/// A worker session the client was asked to start, started: its turn.
async fn worker_turn(client: &mut AgentClient) -> chopin_protocol::agent::Turn {
    let session = loop {
        match next(client).await {
            ServerMessage::Start(start) => {
                assert_eq!(
                    start.mode,
                    SessionMode::Isolated,
                    "a worker is an isolated session"
                );
                break start.session_id;
            }
            ServerMessage::Destroy(_) => {}
            other => panic!("expected a worker's start, got {other:?}"),
        }
    };
    client
        .send(&ClientMessage::Started(Started {
            session_id: session.clone(),
        }))
        .await
        .unwrap();
    match next(client).await {
        ServerMessage::Turn(turn) => {
            assert_eq!(turn.session_id, session);
            turn
        }
        other => panic!("expected the worker's turn, got {other:?}"),
    }
}

async fn end_worker(client: &mut AgentClient, turn: &str, output: Value) {
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

/// No worker session is started on `client` within `ms`.
async fn no_worker_within(client: &mut AgentClient, ms: u64) {
    let quiet = tokio::time::timeout(Duration::from_millis(ms), async {
        loop {
            match client.recv().await {
                Ok(chopin_fixtures::agent::Event::Message(ServerMessage::Start(start))) => {
                    return start
                }
                Ok(chopin_fixtures::agent::Event::Message(_)) => {}
                other => panic!("the client's link ended: {other:?}"),
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "a worker started: {quiet:?}");
}

#[tokio::test]
async fn job_12_rt_05_rfc_33_opening_a_document_describes_it_in_an_isolated_worker_on_the_attached_client(
) {
    let s = served().await;
    write(&s, "# Launch plan\n\nShip the beta to ten teams.\n", "w1").await;
    let mut client = s.attach(&[]).await;
    // Opening the document asks for its description.
    let _room = s.room().await;
    let turn = worker_turn(&mut client).await;
    // The private worker: no host tools, the description schema, the source as its prompt.
    assert!(turn.host_tools.is_empty(), "{:?}", turn.host_tools);
    assert_eq!(
        turn.response_format,
        Some(chopin_server::jobs::description::schema())
    );
    assert!(
        turn.prompt.contains("Ship the beta to ten teams."),
        "{}",
        turn.prompt
    );
    assert!(turn.instructions.contains("one-line description"));
    assert_eq!(
        turn.model, None,
        "background work never carries a model choice"
    );
    let running = newest_in(&s, JobState::Running).await;
    assert_eq!(running.kind, "document-summary");
    assert_eq!(running.origin, "scheduler");
    assert_eq!(running.progress, r#"["describe"]"#);
    end_worker(
        &mut client,
        &turn.turn_id,
        json!({ "description": "Plan for\n  a beta launch" }),
    )
    .await;
    let done = newest_in(&s, JobState::Completed).await;
    assert_eq!(done.attempts, 1);
    // Kept as one line, and shown with the document (JOB-10).
    let doc = get(&s, &format!("/api/documents/{}", s.doc)).await;
    assert_eq!(
        doc["description"]["text"], "Plan for a beta launch",
        "{doc}"
    );
    let listed = get(&s, &format!("/api/documents/{}/jobs", s.doc)).await;
    let job = &listed["jobs"][0];
    assert_eq!(job["type"], "document-summary");
    assert_eq!(job["state"], "completed");
    assert_eq!(job["artifact"]["description"], "Plan for a beta launch");
    for hidden in ["input", "fingerprint", "idempotencyKey", "claimOwner"] {
        assert!(job.get(hidden).is_none(), "{hidden} is not listed: {job}");
    }
    // JOB-03: nothing of it reaches Chat.
    assert!(s.store.transcript(s.doc, 0, 100).await.unwrap().is_empty());
    // The same source again asks for nothing new.
    s.state.descriptions.ensure(s.doc).await;
    assert_eq!(jobs(&s).await.len(), 1);
    let page = metrics(&s).await;
    assert!(
        page.contains("chopin_jobs{state=\"completed\"} 1"),
        "{page}"
    );
    assert!(
        page.contains(
            "chopin_job_attempts_total{kind=\"document-summary\",outcome=\"completed\"} 1"
        ),
        "{page}"
    );
}

#[tokio::test]
async fn rt_06_job_13_with_no_client_attached_the_job_waits_and_the_last_description_stays() {
    let s = served().await;
    write(&s, "# Search\n\nFaster search.\n", "w1").await;
    s.state.descriptions.ensure(s.doc).await;
    // Nobody owns the Planner: nothing is claimed (RT-06, JOB-13).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let waiting = newest_in(&s, JobState::Pending).await;
    assert_eq!(waiting.attempts, 0);
    assert_eq!(
        s.store.ownership(s.doc).await.unwrap().holder,
        None,
        "JOB-12: no owner claimed"
    );
    // A client attaches: the job runs on it (TB-03).
    let mut client = s.attach(&[]).await;
    let turn = worker_turn(&mut client).await;
    end_worker(
        &mut client,
        &turn.turn_id,
        json!({ "description": "RFC about faster search" }),
    )
    .await;
    newest_in(&s, JobState::Completed).await;
    client.close().await.unwrap();
    // An edit while nobody is attached: new work waits; the last description stays.
    write(
        &s,
        "# Search\n\nFaster search, with typo tolerance.\n",
        "w2",
    )
    .await;
    s.state.descriptions.ensure(s.doc).await;
    newest_in(&s, JobState::Pending).await;
    let doc = get(&s, &format!("/api/documents/{}", s.doc)).await;
    assert_eq!(doc["description"]["text"], "RFC about faster search");
    let states: Vec<_> = jobs(&s).await.iter().map(|j| j.state).collect();
    assert_eq!(states, [JobState::Pending, JobState::Completed]);
}

#[tokio::test]
async fn own_18_an_attempt_whose_client_leaves_is_interrupted_and_never_run_again() {
    let s = served().await;
    write(&s, "# Billing\n\nInvoices.\n", "w1").await;
    let client = {
        let mut client = s.attach(&[]).await;
        s.state.descriptions.ensure(s.doc).await;
        worker_turn(&mut client).await;
        client
    };
    drop(client);
    let failed = newest_in(&s, JobState::Failed).await;
    assert_eq!(failed.reason.as_deref(), Some("interrupted"));
    // The client comes back: the interrupted job is not replayed.
    let mut again = s.attach(&[]).await;
    no_worker_within(&mut again, 2_000).await;
    let jobs = jobs(&s).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].state, jobs[0].attempts), (JobState::Failed, 1));
    // No description was made of it.
    let doc = get(&s, &format!("/api/documents/{}", s.doc)).await;
    assert_eq!(doc["description"], Value::Null);
}

#[tokio::test]
async fn job_01_a_message_to_the_planner_while_a_worker_runs_is_refused_busy() {
    let s = served().await;
    write(&s, "# Notes\n\nSome notes.\n", "w1").await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let turn = worker_turn(&mut client).await;
    let answer = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "r1", "text": "@chopin what next?" }),
    )
    .await;
    assert_eq!(answer["type"], "chat:refused", "{answer}");
    assert_eq!(answer["code"], "planner-busy");
    assert_eq!(answer["message"], chopin_server::turns::BUSY_WORDS);
    end_worker(
        &mut client,
        &turn.turn_id,
        json!({ "description": "Notes about the launch" }),
    )
    .await;
    newest_in(&s, JobState::Completed).await;
    // Once the worker is done the Planner takes messages again.
    let answer = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "r2", "text": "@chopin what next?" }),
    )
    .await;
    assert_eq!(answer["type"], "chat:ack", "{answer}");
}

#[tokio::test]
async fn job_10_a_blank_document_is_an_empty_document_without_a_model_call() {
    let s = served().await;
    let mut client = s.attach(&[]).await;
    s.state.descriptions.ensure(s.doc).await;
    let done = newest_in(&s, JobState::Completed).await;
    assert_eq!(
        done.artifact.as_deref(),
        Some(r#"{"description":"Empty document","output":"description"}"#)
    );
    no_worker_within(&mut client, 500).await;
}

#[tokio::test]
async fn job_02_a_result_outside_its_schema_is_not_kept_and_spends_the_failure_budget() {
    let s = served().await;
    write(&s, "# Auth\n\nTokens.\n", "w1").await;
    let mut client = s.attach(&[]).await;
    s.state.descriptions.ensure(s.doc).await;
    let turn = worker_turn(&mut client).await;
    end_worker(
        &mut client,
        &turn.turn_id,
        json!({ "summary": "not the schema" }),
    )
    .await;
    let retried = newest_in(&s, JobState::Pending).await;
    assert_eq!((retried.failures, retried.attempts), (1, 1));
    assert_eq!(retried.reason.as_deref(), Some("output-invalid"));
    assert!(
        retried.available_at_ms > retried.updated_at_ms,
        "it waits out a back-off"
    );
    assert_eq!(retried.artifact, None);
}

#[tokio::test]
async fn job_12_background_jobs_off_schedules_nothing() {
    let s = served_with(Arc::new(MemoryStore::new()), |c| c.background_jobs = false).await;
    let _room = s.room().await;
    s.state.descriptions.ensure(s.doc).await;
    assert!(jobs(&s).await.is_empty());
}

#[tokio::test]
async fn iso_25_job_09_a_child_documents_description_runs_on_its_roots_planner() {
    let s = served().await;
    let child = uuid::Uuid::new_v4();
    s.store
        .create_document(&chopin_server::store::NewDocument {
            id: child,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: "notes-child".into(),
            title: "Child notes".into(),
            created_at_ms: 0,
            parent_id: Some(s.doc),
            ..chopin_server::store::NewDocument::default()
        })
        .await
        .unwrap();
    let doc = s.store.document(child).await.unwrap().unwrap();
    s.state
        .updates
        .update(
            "mona",
            &doc,
            &Update {
                revision: 0,
                source: "# Child\n\nA part of the plan.\n",
                idempotency_key: "c1",
            },
        )
        .await
        .unwrap();
    // The client attaches to the root: the child has no Planner of its own.
    let mut client = s.attach(&[]).await;
    s.state.descriptions.ensure(child).await;
    let turn = worker_turn(&mut client).await;
    assert!(
        turn.prompt.contains("A part of the plan."),
        "{}",
        turn.prompt
    );
    end_worker(
        &mut client,
        &turn.turn_id,
        json!({ "description": "Plan for a part" }),
    )
    .await;
    for _ in 0..100 {
        let jobs = s.store.document_jobs(child, 10).await.unwrap();
        if jobs.first().is_some_and(|j| j.state == JobState::Completed) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the child's description never completed");
}
