//! Mentions of the document's own parts in a Chat message, in-process over real sockets under
//! the `remote` harness: resolved against the document as it stands when the message is sent,
//! kept with the label the server wrote, told to the Planner beside the words, and refused in
//! the spec's words once gone. Each test names the rows of CHECKLIST.md it checks.

use chopin_document::ydoc;
use chopin_protocol::agent::ServerMessage;
use serde_json::json;
use uuid::Uuid;

mod support;

use support::{ask_room, next, served, Served};

const TEXT: &str = "# Overview\n\nWhy we plan.\n\n## Roll-out\n\nCanary first.\n\n# Overview\n\n```decision\nid: d-region\nstate: open\nheader: Region\nquestion: Which region first?\n```\n";

/// Puts `text` in the document, as a person typing it would.
async fn write(s: &Served, text: &str) {
    let member = s.state.open.join(s.doc, Uuid::nil()).await.unwrap();
    let update = ydoc::replace_source(&ydoc::empty_doc(4242), text);
    assert!(member
        .document
        .apply_update(member.connection, &update)
        .await
        .unwrap());
}

#[tokio::test]
async fn ctx_23_ctx_30_ctx_31_mentions_are_resolved_kept_with_their_labels_and_told_to_the_planner()
{
    let s = served().await;
    write(&s, TEXT).await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "m-1", "text": "@chopin see @Overview and @Region",
               "references": [{"type": "heading", "anchor": "overview-1"}, {"type": "decision", "decisionId": "d-region"}]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let message = room.next_of_type("chat:message").await.unwrap();
    assert_eq!(
        message["references"],
        json!([
            {"type": "heading", "anchor": "overview-1", "label": "Overview", "level": 1, "line": 9},
            {"type": "decision", "decisionId": "d-region", "label": "Region"}
        ]),
        "the label the server resolved, kept with the message"
    );
    let session = match next(&mut client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("{other:?}"),
    };
    client
        .send(&chopin_protocol::agent::ClientMessage::Started(
            chopin_protocol::agent::Started {
                session_id: session,
            },
        ))
        .await
        .unwrap();
    let turn = loop {
        if let ServerMessage::Turn(t) = next(&mut client).await {
            break t;
        }
    };
    assert!(
        turn.prompt.ends_with(
            "@mona: @chopin see @Overview and @Region\n[heading anchor \"overview-1\", level 1, line 9 of this document]\n[Decision id \"d-region\" of this document]"
        ),
        "{}",
        turn.prompt
    );
}

#[tokio::test]
async fn ctx_24_ctx_25_ctx_26_ctx_28_a_mention_that_has_gone_is_refused_in_its_words() {
    let s = served().await;
    s.github
        .put_file("octo", "plans", "src/lib.rs", "pub fn x() {}\n");
    write(&s, TEXT).await;
    let mut room = s.room().await;
    let send = |id: &str, reference: serde_json::Value| json!({"type": "chat:send", "requestId": id, "text": "look", "references": [reference]});
    for (id, reference, code, words) in [
        (
            "g-1",
            json!({"type": "heading", "anchor": "overview-2"}),
            "mention-gone",
            "That heading is no longer in the document.",
        ),
        (
            "g-2",
            json!({"type": "decision", "decisionId": "d-gone"}),
            "mention-gone",
            "That Decision is no longer in the document.",
        ),
        (
            "g-3",
            json!({"type": "file", "path": "a".repeat(1025)}),
            "mention-refused",
            "That path is too long to mention.",
        ),
        (
            "g-4",
            json!({"type": "file", "path": "../etc/passwd"}),
            "mention-refused",
            "That file is not in the repository.",
        ),
        (
            "g-5",
            json!({"type": "file", "path": "src/main.rs"}),
            "mention-refused",
            "That file is not in the repository.",
        ),
    ] {
        let refused = ask_room(&mut room, send(id, reference)).await;
        assert_eq!(refused["type"], "chat:refused", "{refused}");
        assert_eq!(refused["code"], code, "{refused}");
        assert_eq!(refused["message"], words, "{refused}");
    }
    // The same heading, once the text has it again: accepted.
    write(&s, &format!("{TEXT}\n# Overview\n")).await;
    let ok = ask_room(
        &mut room,
        send("g-6", json!({"type": "heading", "anchor": "overview-2"})),
    )
    .await;
    assert_eq!(ok["type"], "chat:ack", "{ok}");
}

#[tokio::test]
async fn ctx_42_a_mention_names_the_part_and_a_malformed_one_is_an_error_frame() {
    let s = served().await;
    let mut room = s.room().await;
    room.send_json(
        &json!({"type": "chat:send", "requestId": "x-1", "text": "look",
                           "references": [{"type": "heading"}]}),
    )
    .await
    .unwrap();
    let error = room.next_of_type("error").await.unwrap();
    assert_eq!(error["code"], "malformed", "{error}");
}

async fn get(s: &Served, path: &str, cookie: &str) -> (u16, serde_json::Value) {
    let request = http::Request::get(format!("http://{}{path}", s.host))
        .header("cookie", cookie)
        .body(axum::body::Bytes::new())
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

#[tokio::test]
async fn ctx_34_ctx_36_ctx_37_a_reader_is_offered_the_parts_narrowed_and_a_stranger_told_nothing_exists(
) {
    let s = served().await;
    write(&s, TEXT).await;
    let lisa = s
        .sign_in("lisa", 1002, chopin_fixtures::github::Permission::Read)
        .await;
    let (status, all) = get(&s, &format!("/api/channels/{}/mentions", s.doc), &lisa).await;
    assert_eq!(status, 200);
    assert_eq!(
        all["headings"],
        json!([
            {"anchor": "overview", "text": "Overview", "level": 1},
            {"anchor": "roll-out", "text": "Roll-out", "level": 2},
            {"anchor": "overview-1", "text": "Overview", "level": 1}
        ])
    );
    assert_eq!(
        all["decisions"],
        json!([{"id": "d-region", "title": "Region"}])
    );
    assert_eq!(all["researchCards"], json!([]));
    assert_eq!(
        all["files"],
        json!([]),
        "CTX-38: an empty repository lists no files"
    );
    let (_, narrowed) = get(
        &s,
        &format!("/api/channels/{}/mentions?query=out&limit=1", s.doc),
        &lisa,
    )
    .await;
    assert_eq!(
        narrowed["headings"],
        json!([{"anchor": "roll-out", "text": "Roll-out", "level": 2}])
    );
    assert_eq!(narrowed["decisions"], json!([]));
    let (status, _) = get(
        &s,
        &format!("/api/channels/{}/mentions?query={}", s.doc, "a".repeat(65)),
        &lisa,
    )
    .await;
    assert_eq!(status, 400, "RULINGS CTX-35");
    let eve = s
        .sign_in("eve", 1003, chopin_fixtures::github::Permission::Read)
        .await;
    s.github.revoke("octo", "plans", "eve");
    let (status, body) = get(&s, &format!("/api/channels/{}/mentions", s.doc), &eve).await;
    assert_eq!(
        (status, body["error"].clone()),
        (404, json!("document-not-found"))
    );
}

#[tokio::test]
async fn ctx_26_ctx_32_ctx_38_a_file_in_the_repository_is_mentioned_and_listed_for_the_composer() {
    let s = served().await;
    s.github
        .put_file("octo", "plans", "src/index.ts", "export {}\n")
        .put_file("octo", "plans", "docs/rollout.md", "Region by region.\n");
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "@chopin read @index.ts",
               "references": [{"type": "file", "path": "src/index.ts"}]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let message = room.next_of_type("chat:message").await.unwrap();
    assert_eq!(
        message["references"],
        json!([{"type": "file", "path": "src/index.ts", "label": "src/index.ts"}])
    );
    let session = match next(&mut client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("{other:?}"),
    };
    client
        .send(&chopin_protocol::agent::ClientMessage::Started(
            chopin_protocol::agent::Started {
                session_id: session,
            },
        ))
        .await
        .unwrap();
    let turn = loop {
        if let ServerMessage::Turn(t) = next(&mut client).await {
            break t;
        }
    };
    assert!(
        turn.prompt
            .ends_with("\n[file path \"src/index.ts\" in the repository]"),
        "{}",
        turn.prompt
    );
    let (status, listed) = get(
        &s,
        &format!("/api/channels/{}/mentions?query=roll", s.doc),
        &s.mona_cookie,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["files"], json!(["docs/rollout.md"]));
}

#[tokio::test]
async fn ctx_27_where_github_will_not_list_the_files_a_file_mention_is_refused_and_files_left_out()
{
    let s = served().await;
    write(&s, TEXT).await;
    let mut room = s.room().await;
    s.github.set_outage(true);
    let refused = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "f-1", "text": "look",
               "references": [{"type": "file", "path": "src/index.ts"}]}),
    )
    .await;
    assert_eq!(
        refused["message"],
        "This repository's files cannot be listed right now, so a file cannot be mentioned."
    );
    // The composer is offered no files then (its access is still the one checked at joining).
    let (status, listed) = get(
        &s,
        &format!("/api/channels/{}/mentions", s.doc),
        &s.mona_cookie,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert!(listed.get("files").is_none(), "{listed}");
    assert_eq!(listed["headings"][0]["anchor"], "overview");
}

/// CTX-38's minute at both edges, on a clock the test moves: a listing is used 59,999 ms after
/// it was read and read again at 60,000 ms; two people asking at once read it once.
#[tokio::test]
async fn ctx_38_a_listing_is_kept_a_minute_per_repository_and_read_once_for_many() {
    use chopin_server::identity::github::GitHub;
    use chopin_server::repo_files::{RepoFiles, LISTING_KEPT_MS};
    use chopin_server::repository::RepositoryTools;
    use chopin_server::runtime::clock::ManualClock;
    use std::sync::Arc;
    let github = chopin_fixtures::github::FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant(
        "octo",
        "plans",
        "mona",
        chopin_fixtures::github::Permission::Read,
    );
    github.put_file("octo", "plans", "a.md", "a\n");
    let token = github.issue_token("mona");
    let url = github.serve_tcp().await.unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let client = GitHub::new(
        url,
        Arc::new(chopin_server::runtime::connector::TcpConnector),
        clock.clone(),
    );
    let files = RepoFiles::new(Arc::new(RepositoryTools::new(client)), clock.clone());
    let trees = || github.request_count("/repos/octo/plans/git/trees/");
    let (a, b) = tokio::join!(
        files.paths(&token, "octo", "plans"),
        files.paths(&token, "Octo", "Plans")
    );
    assert_eq!(a.unwrap().as_slice(), ["a.md"]);
    assert_eq!(b.unwrap().as_slice(), ["a.md"]);
    assert_eq!(trees(), 1, "two at once: one read");
    github.put_file("octo", "plans", "b.md", "b\n");
    clock.advance(LISTING_KEPT_MS - 1);
    assert_eq!(
        files.paths(&token, "octo", "plans").await.unwrap().len(),
        1,
        "kept until its minute is over"
    );
    assert_eq!(trees(), 1);
    clock.advance(1);
    assert_eq!(files.paths(&token, "octo", "plans").await.unwrap().len(), 2);
    assert_eq!(trees(), 2, "read again at the minute");
}

/// A second document of octo/plans, holding `text`: its id.
async fn another(s: &Served, slug: &str, text: &str, parent: Option<Uuid>) -> Uuid {
    let id = Uuid::new_v4();
    s.store
        .create_document(&chopin_server::store::NewDocument {
            id,
            repo_owner: "octo".into(),
            repo_name: "plans".into(),
            slug: slug.into(),
            title: format!("Title of {slug}"),
            parent_id: parent,
            ..chopin_server::store::NewDocument::default()
        })
        .await
        .unwrap();
    let member = s.state.open.join(id, Uuid::nil()).await.unwrap();
    let update = ydoc::replace_source(&ydoc::empty_doc(4343), text);
    assert!(member
        .document
        .apply_update(member.connection, &update)
        .await
        .unwrap());
    id
}

async fn read_reference(
    client: &mut chopin_fixtures::agent::AgentClient,
    turn: &str,
    id: &str,
    reference: &str,
) -> serde_json::Value {
    support::call_host_tool(
        client,
        turn,
        id,
        "read_reference",
        json!({"reference": reference}),
    )
    .await
    .output
}

#[tokio::test]
async fn ctx_18_ctx_19_ctx_20_ctx_22_a_document_reference_is_read_from_the_session_and_says_whether_it_changed(
) {
    let s = served().await;
    write(&s, TEXT).await;
    let launch = another(&s, "launch", "# Launch\n\nEU first.\n", None).await;
    let other = another(&s, "other", "# Other\n", None).await;
    let mut client = s.attach(&[]).await;
    let mut room = s.room().await;
    let ack = ask_room(
        &mut room,
        json!({"type": "chat:send", "requestId": "r-1", "text": "@chopin compare with #launch",
               "references": [{"type": "document", "documentId": launch}]}),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let message = room.next_of_type("chat:message").await.unwrap();
    assert_eq!(
        message["references"],
        json!([{"type": "document", "documentId": launch, "label": "Title of launch", "revision": 0}])
    );
    let session = match next(&mut client).await {
        ServerMessage::Start(start) => start.session_id,
        other => panic!("{other:?}"),
    };
    client
        .send(&chopin_protocol::agent::ClientMessage::Started(
            chopin_protocol::agent::Started {
                session_id: session,
            },
        ))
        .await
        .unwrap();
    let turn = loop {
        if let ServerMessage::Turn(t) = next(&mut client).await {
            break t;
        }
    };
    assert!(
        turn.prompt.ends_with(&format!(
            "\n[document reference \"{launch}\" titled \"Title of launch\": read it with read_reference]"
        )),
        "{}",
        turn.prompt
    );
    let read = read_reference(&mut client, &turn.turn_id, "c-1", &launch.to_string()).await;
    let text = read.as_str().unwrap();
    assert!(
        text.starts_with("changed since it was chosen: no (revision 0)\n"),
        "{text}"
    );
    assert!(text.contains("EU first."), "{text}");
    assert!(
        !text.contains("Why we plan."),
        "CTX-22: not the room's document"
    );
    // A document nobody referred to is not readable, though it is in the same repository.
    let refused = support::call_host_tool(
        &mut client,
        &turn.turn_id,
        "c-2",
        "read_reference",
        json!({"reference": other.to_string()}),
    )
    .await;
    assert!(refused.is_error, "{refused:?}");
    // The referred document changes: the next read says so.
    let member = s.state.open.join(launch, Uuid::nil()).await.unwrap();
    member
        .document
        .replace_source(
            chopin_document::DocumentRef {
                id: launch.to_string(),
                url: "/documents/octo/plans/launch".into(),
            },
            &[],
            0,
            "# Launch\n\nUS first.\n",
        )
        .await
        .unwrap();
    let read = read_reference(&mut client, &turn.turn_id, "c-3", &launch.to_string()).await;
    let text = read.as_str().unwrap();
    assert!(
        text.starts_with("changed since it was chosen: yes (revision 0 then, 1 now)\n"),
        "{text}"
    );
    assert!(text.contains("US first."), "{text}");
}

#[tokio::test]
async fn ctx_18_only_another_ordinary_document_of_the_repository_can_be_referred_to() {
    let s = served().await;
    let child = another(&s, "kid", "# Kid\n", Some(s.doc)).await;
    let mut room = s.room().await;
    for (id, target) in [("x-1", child), ("x-2", s.doc), ("x-3", Uuid::new_v4())] {
        let refused = ask_room(
            &mut room,
            json!({"type": "chat:send", "requestId": id, "text": "see",
                   "references": [{"type": "document", "documentId": target}]}),
        )
        .await;
        assert_eq!(refused["code"], "reference-refused", "{refused}");
    }
}
