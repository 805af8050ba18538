//! Live sync with real Yjs clients: the `yjs` and `y-protocols` npm packages (driven by
//! `e2e/yjs/client.mjs`, run with Node) edit one document through the spawned server, on SQLite
//! and on PostgreSQL. Two writers converge; a crash and restart loses no update the room relayed;
//! a reader syncs but its update is refused.

use chopin_e2e::{node_script, sign_in, Launch, Server};
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::{json, Value};

/// Runs the Node client with `config`; returns the JSON line it printed (it must succeed).
async fn node(config: Value) -> Value {
    let (ok, value) = node_script("client.mjs", &config).await;
    assert!(ok, "client failed: {value}");
    value
}

async fn run(database: Option<String>) {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("lisa", 1002)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "lisa", Permission::Admin);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut launch = Launch::hosted(&github_url).env("HOME", home.path().to_string_lossy());
    if let Some(url) = &database {
        launch = launch.env("DATABASE_URL", url.clone());
    }
    let mut server: Server = launch.start().await;
    // The restart below keeps the port and origin (sealed sign-ins are bound to the origin).
    let launch = launch.at(&server);
    let (host, origin) = (server.host(), server.origin());
    let cookies = [
        sign_in(&server, &github, "mona").await,
        sign_in(&server, &github, "lisa").await,
        sign_in(&server, &github, "hubot").await,
    ];
    let created = server
        .create_document(&mona, "octo/plans", "Live notes")
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let url = format!("ws://{host}/api/documents/{id}/room");
    let config = |mode: &str, cookies: &[&String]| json!({ "mode": mode, "url": url, "origin": origin, "cookies": cookies, "timeoutMs": 15000 });

    // Two writers edit at once and converge, and see each other's awareness.
    let converged = node(config("converge", &[&cookies[0], &cookies[1]])).await;
    let text = converged["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains("Line from A\n") && text.contains("Line from B 🎉\n"),
        "{text}"
    );
    assert_eq!(converged["awareness"], json!(["b"]));

    // A crash loses nothing the room relayed: updates are journalled before they are relayed.
    // (The next process waits out the crashed one's writer lease.)
    server.crash().await;
    server = launch.start().await;
    let read = node(config("read", &[&cookies[2]])).await;
    assert_eq!(read["text"], text, "after the restart");

    // A reader syncs, but its update is refused and nothing changes.
    let refused = node(config("write-expect-refusal", &[&cookies[2]])).await;
    let errors: Vec<&Value> = refused["json"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "error")
        .collect();
    assert_eq!(errors[0]["code"], "read-only", "{refused}");
    let read = node(config("read", &[&cookies[0]])).await;
    assert_eq!(read["text"], text, "the reader's change was not kept");
    assert!(read["json"][0]["type"] == "session:hello", "{read}");

    // The same content as the paged text an agent reads.
    let http = reqwest::Client::new();
    let page = http
        .get(server.url(&format!("/api/documents/{id}/read")))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains(&format!("document: {id}")), "{page}");
    assert!(
        page.contains("url: /documents/octo/plans/live-notes"),
        "{page}"
    );
    assert!(
        page.ends_with(&text),
        "the source comes last, verbatim: {page}"
    );
    let outside = http
        .get(server.url(&format!("/api/documents/{id}/read?offset=99")))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), 400);
    let words = outside.text().await.unwrap();
    assert!(words.contains("2 lines"), "names the line count: {words}");

    // A rename keeps the former URL working and lists it.
    let renamed: Value = http
        .post(server.url(&format!("/api/documents/{id}/rename")))
        .bearer_auth(&mona)
        .json(&json!({ "title": "Live notes, renamed" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(renamed["url"], "/documents/octo/plans/live-notes-renamed");
    assert_eq!(
        renamed["earlierUrls"],
        json!(["/documents/octo/plans/live-notes"])
    );
    let old = http
        .get(server.url("/api/repositories/octo/plans/documents/live-notes"))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 200, "the former URL still opens it");
    let page = http
        .get(server.url(&format!("/api/documents/{id}/read")))
        .bearer_auth(&mona)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("/documents/octo/plans/live-notes\n") || page.contains("earlier"),
        "{page}"
    );

    // A child of the document, its URL nested under the parent's.
    let child = http
        .post(server.url(&format!("/api/documents/{id}/children")))
        .bearer_auth(&mona)
        .json(&json!({ "title": "A child" }))
        .send()
        .await
        .unwrap();
    assert_eq!(child.status(), 201);
    let child: Value = child.json().await.unwrap();
    assert_eq!(
        child["url"],
        "/documents/octo/plans/live-notes-renamed/a-child"
    );

    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn yjs_clients_converge_and_survive_a_restart_on_sqlite() {
    run(None).await;
}

#[tokio::test]
async fn yjs_clients_converge_and_survive_a_restart_on_postgres() {
    let pg = chopin_fixtures::pg::shared_postgres();
    let db = pg.create_database().await.unwrap();
    run(Some(db.url.clone())).await;
    pg.drop_database(&db).await.unwrap();
}
