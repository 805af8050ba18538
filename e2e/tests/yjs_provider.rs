//! The official Yjs client against the spawned server: the unmodified `WebsocketProvider` of
//! the npm `y-websocket` package, under Node with `ws`, set up exactly as docs/room-socket.md
//! says (driven by `e2e/yjs/provider.mjs`). It connects, syncs, edits, sees awareness, stays
//! connected for minutes idle and alone, and a provider the server refuses stops retrying —
//! with no exception in the client.

use chopin_e2e::{node_script, sign_in, Launch};
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::{json, Value};

/// Runs `provider.mjs` with `config`; returns whether it succeeded and what it printed.
async fn provider(config: Value) -> (bool, Value) {
    node_script("provider.mjs", &config).await
}

#[tokio::test]
async fn the_unmodified_y_websocket_provider_syncs_edits_stays_connected_and_takes_a_refusal() {
    let github = FakeGitHub::new();
    github
        .add_user("mona", 1001)
        .add_user("hubot", 1003)
        .add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    github.grant("octo", "plans", "hubot", Permission::Read);
    let (mona, hubot) = (github.issue_token("mona"), github.issue_token("hubot"));
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let launch = Launch::hosted(&github_url).env("HOME", home.path().to_string_lossy());
    let server = launch.start().await;
    let (host, origin) = (server.host(), server.origin());
    let writer = sign_in(&server, &github, "mona").await;
    let reader = sign_in(&server, &github, "hubot").await;
    let created = server
        .create_document(&mona, "octo/plans", "Provider notes")
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let config = |mode: &str, document: &str, cookies: &[&str]| {
        json!({
            "mode": mode,
            "server": format!("ws://{host}/api/yjs"),
            "document": document,
            "origin": origin,
            "cookies": cookies,
            "idleMs": 130_000,
        })
    };

    // A writer types; a reader's provider syncs the text and both see each other's awareness.
    let (ok, seen) = provider(config("edit", &id, &[&writer, &reader])).await;
    assert!(ok, "{seen}");
    assert_eq!(
        seen["texts"],
        json!(["Hello from y-websocket\n", "Hello from y-websocket\n"])
    );
    // The edit is the document's: its source over HTTP holds it, for a reader as for a writer.
    for token in [&mona, &hubot] {
        let source: Value = reqwest::Client::new()
            .get(server.url(&format!("/api/documents/{id}/source")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(source["source"], "Hello from y-websocket\n", "{source}");
        assert_eq!(source["id"], id.as_str());
        assert_eq!(
            source["planRevision"], 0,
            "a live edit is not a Planner batch"
        );
    }

    // Updates that used to poison a document, sent by a writer: refused, and nobody else is
    // sent bytes the official yjs cannot apply (issue 15's regression updates).
    let mut poison = config("poison", &id, &[&writer, &reader]);
    poison["poison"] = json!([
        "0101d90f009244f1070007422d736964652001f107011a02",
        "0201e60f0044fe070007422d736964652003fe07feffffffffffffffff01040106736f757263651a48656c6c6f2c20776f006c64212023205469746c650a2d20697481fe07190284fe071b010a01fe07011a02",
    ]);
    let (ok, seen) = provider(poison).await;
    assert!(ok, "{seen}");

    // Alone and idle for 130 s of the provider's clock: never reconnected (its watchdog closes
    // a socket that hears nothing for 30 s; the server echoes its awareness renewals).
    let (ok, seen) = provider(config("idle", &id, &[&writer])).await;
    assert!(ok, "{seen}");
    assert_eq!(seen["closes"], 0, "{seen}");

    // Refused after the upgrade with a 44xx close: the provider stops retrying.
    let (ok, seen) = provider(config("refused", &id, &[])).await;
    assert!(ok, "no cookie: {seen}");
    assert!(
        seen["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "refused closed 4401 not-signed-in"),
        "{seen}"
    );
    let missing = "00000000-0000-4000-8000-000000000000";
    let (ok, seen) = provider(config("refused", missing, &[&writer])).await;
    assert!(ok, "no such document: {seen}");
    assert!(
        seen["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "refused closed 4404 document-not-found"),
        "{seen}"
    );

    // Issue 24 item 7: archived (the provider is closed 4404, final), then restored: a new
    // provider syncs at once, on the same server, while the document is still loaded.
    let (ok, seen) = provider(config("reopen", &id, &[&writer])).await;
    assert!(ok, "{seen}");

    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
}
