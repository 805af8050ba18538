//! `GET /api/channels/{channel}/people` in-process over real sockets against the fake GitHub:
//! a writer gets the repository's collaborators as GitHub pages them (bots left out, three pages
//! of 100 at most), kept a minute for that session; a reader GitHub will not list them to gets
//! the creator and the recent Chat authors, not authoritative; a stranger is told the document
//! does not exist. Each test names the rows of CHECKLIST.md it checks.

use chopin_fixtures::github::Permission;
use serde_json::{json, Value};

mod support;

use support::{ask_room, served, Served};

async fn get(s: &Served, path: &str, cookie: &str) -> (u16, Value) {
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

fn logins(answer: &Value) -> Vec<String> {
    answer["people"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["login"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn ctx_39_a_writer_gets_the_collaborators_three_pages_at_most_bots_left_out_kept_a_minute() {
    let s = served().await;
    // 320 people and a bot on the repository: more than three pages of 100.
    for n in 0..320u64 {
        let login = format!("user-{n:03}");
        s.github.add_user(&login, 5000 + n);
        s.github.grant("octo", "plans", &login, Permission::Read);
    }
    s.github.add_bot("aaa-deploy[bot]", 9001);
    s.github
        .grant("octo", "plans", "aaa-deploy[bot]", Permission::Write);
    let path = format!("/api/channels/{}/people", s.doc);
    let (status, answer) = get(&s, &path, &s.mona_cookie).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["authoritative"], true);
    let people = logins(&answer);
    assert_eq!(
        people.len(),
        299,
        "three pages of 100, the bot on the first left out"
    );
    assert!(!people.iter().any(|l| l.contains("[bot]")), "{people:?}");
    assert_eq!(people[..2], ["mona", "user-000"], "GitHub's order");
    assert_eq!(
        people.last().unwrap(),
        "user-297",
        "nothing past the third page"
    );
    assert_eq!(
        answer["people"][1]["avatarUrl"], "https://avatars.githubusercontent.com/u/5000?v=4",
        "the picture GitHub gave"
    );

    // Kept a minute for this session and repository: a newcomer is not listed to mona yet...
    s.github.add_user("aaron", 1500);
    s.github.grant("octo", "plans", "aaron", Permission::Read);
    let (_, again) = get(&s, &path, &s.mona_cookie).await;
    assert_eq!(
        logins(&again),
        people,
        "the listing mona's session read is kept"
    );
    // ...but another session reads its own.
    let hubot = s.sign_in("hubot", 1004, Permission::Write).await;
    let (_, theirs) = get(&s, &path, &hubot).await;
    assert_eq!(theirs["authoritative"], true);
    assert_eq!(logins(&theirs)[0], "aaron", "{theirs}");
}

#[tokio::test]
async fn ctx_40_a_reader_github_will_not_list_them_to_gets_the_creator_and_chat_authors_not_authoritative(
) {
    let s = served().await;
    let mut room = s.room().await;
    let ack = ask_room(
        &mut room,
        json!({ "type": "chat:send", "requestId": "m-1", "text": "Canary first." }),
    )
    .await;
    assert_eq!(ack["type"], "chat:ack", "{ack}");
    let lisa = s.sign_in("lisa", 1002, Permission::Read).await;
    let (status, answer) = get(&s, &format!("/api/channels/{}/people", s.doc), &lisa).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["authoritative"], false, "{answer}");
    let people = logins(&answer);
    assert!(
        people.contains(&"mona".to_owned()),
        "a recent Chat author: {people:?}"
    );
    let mona = answer["people"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["login"] == "mona")
        .unwrap();
    assert!(
        mona["avatarUrl"].as_str().unwrap().ends_with("/mona.png"),
        "{mona}"
    );
}

#[tokio::test]
async fn ctx_41_anybody_who_cannot_read_the_document_is_told_it_does_not_exist() {
    let s = served().await;
    let eve = s.sign_in("eve", 1003, Permission::Read).await;
    s.github.revoke("octo", "plans", "eve");
    let (status, body) = get(&s, &format!("/api/channels/{}/people", s.doc), &eve).await;
    assert_eq!(
        (status, body["error"].clone()),
        (404, json!("document-not-found")),
        "{body}"
    );
}
