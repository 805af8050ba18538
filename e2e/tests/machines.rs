//! A paired machine on the spawned binary, on SQLite and PostgreSQL: the connector pairs with the
//! machine's own GitHub token, mona chooses the machine for her document in her browser session,
//! the connector fetches a document-scoped Planner credential and its backend attaches with it
//! (AC-20); after a graceful restart of the server the same credential attaches again at once,
//! since only its digest is stored (AC-24); revoking the machine closes the backend's link
//! `access-revoked` (AC-23) and the credential stops working. And the scripted connector of
//! `chopin_fixtures::connector` on Default machine (ATM-37): launches that exit early and are
//! reported (PRES-13, PRES-14), one that attaches, and the let-go once nobody uses the document.

use std::time::Duration;

use chopin_e2e::{sign_in, Backend, Launch, Server};
use chopin_fixtures::agent::{connect, AgentClient, Upgrade};
use chopin_fixtures::browser::BrowserSocket;
use chopin_fixtures::connector::{Connector, Launch as LaunchAs, Launched, TcpDial};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::ServerMessage;
use serde_json::{json, Value};

async fn attach(server: &Server, credential: &str, document: &str) -> (AgentClient, ServerMessage) {
    let host = server.host();
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut client = connect(stream, &Upgrade::new(host.clone(), Some(credential)))
        .await
        .expect("the credential upgrades the agent connection");
    let answer = client
        .attach(document, &["resumable-sessions"])
        .await
        .unwrap();
    (client, answer)
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn paired_machine(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    // The machine's own authorization: another token of mona's, made on the machine.
    let machine_token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let launch = Launch::hosted(&github_url).on(&backend);
    let server = launch.start().await;
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Quay").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();

    let (status, paired) = send(
        http.post(server.url("/api/connector/machines"))
            .bearer_auth(&machine_token)
            .json(&json!({ "name": "studio", "release": "0.0.23" })),
    )
    .await;
    assert_eq!(status, 201, "{paired}");
    let machine = paired["machine"]["id"].as_str().unwrap().to_owned();
    let (status, chosen) = send(
        http.put(server.url(&format!("/api/channels/{id}/machine")))
            .header("cookie", &cookie)
            .header("origin", server.origin())
            .json(&json!({ "machineId": machine })),
    )
    .await;
    assert_eq!(status, 200, "{chosen}");
    let (status, wanted) = send(
        http.get(server.url(&format!("/api/connector/machines/{machine}/documents")))
            .bearer_auth(&machine_token),
    )
    .await;
    assert_eq!(status, 200, "{wanted}");
    assert_eq!(wanted["documents"][0]["documentId"], id);
    let (status, issued) = send(
        http.post(server.url("/api/connector/planner"))
            .bearer_auth(&machine_token)
            .json(&json!({ "machineId": machine, "documentId": id })),
    )
    .await;
    assert_eq!(status, 200, "{issued}");
    let credential = issued["credential"].as_str().unwrap().to_owned();
    assert!(
        !server.logs().contains(&credential) && !server.logs().contains(&machine_token),
        "neither the credential nor the machine's token is logged"
    );

    let (mut backend_link, answer) = attach(&server, &credential, &id).await;
    assert!(matches!(answer, ServerMessage::Attached(_)), "{answer:?}");
    backend_link.detach().await.unwrap();
    let _ = backend_link.expect_close().await;

    // A graceful restart: the same credential attaches at once.
    let (exit, log) = server.stop().await;
    assert!(exit.success(), "{log}");
    assert!(!log.contains(&credential), "the credential is never logged");
    let server = launch.start().await;
    let (mut backend_link, answer) = attach(&server, &credential, &id).await;
    assert!(
        matches!(answer, ServerMessage::Attached(_)),
        "after a restart: {answer:?}"
    );

    // mona revokes the machine from her browser: the link closes access-revoked.
    let (status, body) = send(
        http.delete(server.url(&format!("/api/machines/{machine}")))
            .header("cookie", &cookie)
            .header("origin", server.origin()),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let (code, reason) = tokio::time::timeout(Duration::from_secs(15), backend_link.expect_close())
        .await
        .expect("the link closes")
        .unwrap();
    assert_eq!((code, reason.as_str()), (4403, "access-revoked"));
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    assert!(
        connect(stream, &Upgrade::new(server.host(), Some(&credential)))
            .await
            .is_err(),
        "a revoked machine's credential is refused before the upgrade"
    );
    let (exit, log) = server.stop().await;
    assert!(exit.success(), "{log}");
    assert!(
        !log.contains(&machine_token),
        "the machine's token is never logged"
    );
}

#[tokio::test]
async fn ac_20_ac_23_ac_24_a_paired_machines_backend_attaches_survives_a_restart_and_is_revoked_on_sqlite(
) {
    paired_machine(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn ac_20_ac_23_ac_24_a_paired_machines_backend_attaches_survives_a_restart_and_is_revoked_on_postgres(
) {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    paired_machine(Backend::Postgres(db.clone())).await;
    pg.drop_database(&db).await.unwrap();
}

/// The next `session:planner` word of the room, within 20 s.
async fn planner_word(room: &mut BrowserSocket) -> Value {
    let frame = tokio::time::timeout(
        Duration::from_secs(20),
        room.next_of_type("session:planner"),
    )
    .await
    .unwrap_or_else(|_| panic!("no session:planner within 20 s: {:?}", room.seen()))
    .unwrap();
    frame["planner"].clone()
}

/// The scripted connector (`chopin_fixtures::connector`) against the spawned binary: a machine
/// paired and made mona's favourite runs her document when she opens it, though nobody chose a
/// machine for it (Default machine, ATM-37); two launches that exit early are reported and the
/// second is told to the room, cleaned (PRES-13, PRES-14); a launch that attaches clears it; and
/// once nobody has the document open and its Planner has nothing to do, Default machine lets it
/// go: the backend's link closes 4410 and the document leaves the machine's list.
async fn default_machine_with_a_scripted_connector(backend: Backend) {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let machine_token = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let server = Launch::hosted(&github_url)
        .on(&backend)
        .env("DEFAULT_MACHINE_IDLE_MS", "1")
        .start()
        .await;
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server.create_document(&mona, "octo/plans", "Quay").await;
    let id = doc["id"].as_str().unwrap().to_owned();
    let mut connector = Connector::pair(
        TcpDial(server.host()),
        server.host(),
        machine_token.clone(),
        "studio",
        Some("0.0.30"),
    )
    .await
    .unwrap();
    assert!(connector.documents().await.unwrap().is_empty());
    let (status, body) = send(
        reqwest::Client::new()
            .put(server.url("/api/machines/favourite"))
            .header("cookie", &cookie)
            .header("origin", server.origin())
            .json(&json!({ "machineId": connector.machine_id() })),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // mona opens the document: Default machine puts it on her favourite.
    let stream = tokio::net::TcpStream::connect(server.host()).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &server.host(),
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&server.origin()),
    )
    .await
    .unwrap();
    assert_eq!(planner_word(&mut room).await["state"], "starting");
    let wanted = connector.documents().await.unwrap();
    assert_eq!(wanted.len(), 1, "{wanted:?}");
    assert_eq!(
        (wanted[0].document_id.as_str(), wanted[0].by_default),
        (id.as_str(), true)
    );

    // Two launches exit early; the connector reports both; the second is told, cleaned.
    let line = format!("fatal: GITHUB_TOKEN={machine_token} rejected in /home/mona/plans");
    for attempt in 1..=2 {
        match connector
            .launch(
                &id,
                LaunchAs::ExitEarly {
                    stderr: line.clone(),
                },
            )
            .await
            .unwrap()
        {
            Launched::Exited { attempts, reported } => {
                assert_eq!((attempts, reported), (attempt, true));
            }
            other => panic!("expected an early exit, got {other:?}"),
        }
    }
    let word = loop {
        let word = planner_word(&mut room).await;
        if !word["failure"].is_null() {
            break word;
        }
    };
    let reason = word["failure"]["reason"].as_str().unwrap();
    assert_eq!(word["failure"]["attempts"], 2, "{word}");
    assert!(
        !reason.contains(&machine_token)
            && reason.contains("[redacted]")
            && reason.contains("~/plans"),
        "{reason}"
    );

    // The third launch attaches: the failure is forgotten.
    let Launched::Backend {
        client: mut backend_link,
        answer,
    } = connector
        .launch(
            &id,
            LaunchAs::Attach {
                features: vec!["resumable-sessions".to_owned()],
            },
        )
        .await
        .unwrap()
    else {
        panic!("the backend launched");
    };
    assert!(matches!(*answer, ServerMessage::Attached(_)), "{answer:?}");
    connector.stayed_up(&id).await.unwrap();
    let word = loop {
        let word = planner_word(&mut room).await;
        if word["state"] == "attached" {
            break word;
        }
    };
    assert_eq!(word["failure"], Value::Null, "{word}");

    // mona closes the page; with nothing to do, the Planner is let go within two sweeps.
    drop(room);
    let (code, reason) = tokio::time::timeout(Duration::from_secs(40), backend_link.expect_close())
        .await
        .expect("Default machine lets the unused document go within two 15-s sweeps")
        .unwrap();
    assert_eq!((code, reason.as_str()), (4410, "planner-released"));
    assert!(connector.documents().await.unwrap().is_empty());
    let (exit, log) = server.stop().await;
    assert!(exit.success(), "{log}");
    assert!(
        !log.contains(&machine_token),
        "the machine's token is never logged"
    );
}

#[tokio::test]
async fn atm_37_pres_13_a_scripted_connector_on_default_machine_on_sqlite() {
    default_machine_with_a_scripted_connector(Backend::Sqlite(tempfile::tempdir().unwrap())).await;
}

#[tokio::test]
async fn atm_37_pres_13_a_scripted_connector_on_default_machine_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    default_machine_with_a_scripted_connector(Backend::Postgres(db.clone())).await;
    pg.drop_database(&db).await.unwrap();
}
