//! Access is checked from the owner/repo a request names before the store is read: someone who
//! cannot read a repository gets the same answer, after the same GitHub calls, whether or not the
//! slug they asked for exists — so neither the answer nor its timing tells them which private
//! documents there are. (Before, a taken slug cost a GitHub round trip and a free one did not.)

mod support;

use axum::body::Bytes;
use chopin_fixtures::agent::{connect, Upgrade};
use chopin_fixtures::github::Permission;
use chopin_protocol::agent::ServerMessage;
use chopin_server::runtime::connector::{self, HttpResponse, TcpConnector};
use http::StatusCode;

async fn get(host: &str, path: &str, token: &str) -> HttpResponse {
    let request = http::Request::get(format!("http://{host}{path}"))
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Bytes::new())
        .unwrap();
    connector::send(&TcpConnector, request).await.unwrap()
}

#[tokio::test]
async fn a_slug_answers_alike_taken_or_free_to_someone_who_cannot_read_the_repository() {
    let s = support::served().await;
    s.github.add_user("hubot", 2002);
    // Each request with a fresh token, so no cached answer hides a GitHub call.
    let mut answers = Vec::new();
    for slug in ["notes", "no-such-slug"] {
        let token = s.github.issue_token("hubot");
        let before = s.github.request_count("/repos/");
        let answer = get(
            &s.host,
            &format!("/api/repositories/octo/plans/documents/{slug}"),
            &token,
        )
        .await;
        let asked = s.github.request_count("/repos/") - before;
        answers.push((slug, answer.status, answer.body.clone(), asked));
    }
    let (_, taken_status, taken_body, taken_asked) = &answers[0];
    let (_, free_status, free_body, free_asked) = &answers[1];
    assert_eq!(*taken_status, StatusCode::NOT_FOUND);
    assert_eq!(
        (taken_status, taken_body, taken_asked),
        (free_status, free_body, free_asked),
        "a taken and a free slug must answer alike: {answers:?}"
    );
    assert_eq!(*free_asked, 1, "access is asked of GitHub before the store");

    // Someone who can read the repository tells them apart, as they may.
    s.github.grant("octo", "plans", "hubot", Permission::Read);
    let token = s.github.issue_token("hubot");
    let taken = get(
        &s.host,
        "/api/repositories/octo/plans/documents/notes",
        &token,
    )
    .await;
    assert_eq!(taken.status, StatusCode::OK);
    let free = get(
        &s.host,
        "/api/repositories/octo/plans/documents/no-such-slug",
        &token,
    )
    .await;
    assert_eq!(free.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_attach_by_url_answers_alike_taken_or_free_to_someone_who_cannot_read_the_repository() {
    let s = support::served().await;
    s.github.add_user("hubot", 2002);
    let mut answers = Vec::new();
    for slug in ["notes", "no-such-slug"] {
        let token = s.github.issue_token("hubot");
        let stream = tokio::net::TcpStream::connect(&s.host).await.unwrap();
        let mut client = connect(stream, &Upgrade::new(s.host.clone(), Some(&token)))
            .await
            .unwrap();
        let before = s.github.request_count("/repos/");
        let answer = client
            .attach(&format!("/documents/octo/plans/{slug}"), &[])
            .await
            .unwrap();
        let asked = s.github.request_count("/repos/") - before;
        let ServerMessage::Refused(refused) = answer else {
            panic!("{slug}: {answer:?}");
        };
        answers.push((
            refused.reason.to_string(),
            refused.message.replace(slug, "<slug>"),
            asked,
        ));
    }
    assert_eq!(answers[0].0, "document-not-found");
    assert_eq!(answers[0], answers[1], "{answers:?}");
    assert_eq!(
        answers[1].2, 1,
        "access is asked of GitHub before the store"
    );
}
