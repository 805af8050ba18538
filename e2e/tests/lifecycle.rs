//! The graceful stop of the spawned `chopin` binary on real sockets: SIGTERM tells an attached
//! agent link `going-away` and closes it 1001, closes a room socket 1001 (close frames, not a
//! dropped connection), exits 0 after giving the writer lease back, and the next process on the
//! same database is ready at once. Before the stop, `/metrics` counts the open sockets.

use std::time::Duration;

use chopin_e2e::{get, sign_in, Launch};
use chopin_fixtures::agent::{connect, Event, Upgrade};
use chopin_fixtures::browser::{BrowserEvent, BrowserSocket};
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_protocol::agent::ServerMessage;

#[tokio::test]
async fn sigterm_closes_every_socket_with_a_close_frame_and_gives_the_lease_back() {
    let github = FakeGitHub::new();
    github.add_user("mona", 1001).add_repo("octo", "plans");
    github.grant("octo", "plans", "mona", Permission::Write);
    let mona = github.issue_token("mona");
    let github_url = github.serve_tcp().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let launch = Launch::hosted(&github_url).env("HOME", home.path().to_string_lossy());
    let server = launch.start().await;
    let (host, origin) = (server.host(), server.origin());
    let launch = launch.at(&server);
    let cookie = sign_in(&server, &github, "mona").await;
    let doc = server
        .create_document(&mona, "octo/plans", "Deploy day")
        .await;
    let id = doc["id"].as_str().unwrap().to_owned();

    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut agent = connect(stream, &Upgrade::new(host.clone(), Some(&mona)))
        .await
        .unwrap();
    let attached = agent.attach(&id, &[]).await.unwrap();
    assert!(
        matches!(attached, ServerMessage::Attached(_)),
        "{attached:?}"
    );
    let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let mut room = BrowserSocket::connect(
        stream,
        &host,
        &format!("/api/documents/{id}/room"),
        Some(&cookie),
        Some(&origin),
    )
    .await
    .unwrap();
    // The room is counted open before it says hello: after the hello, /metrics shows it.
    match room.recv_json().await.unwrap() {
        BrowserEvent::Json(m) => assert_eq!(m["type"], "session:hello", "{m}"),
        other => panic!("expected session:hello, got {other:?}"),
    }

    // The metrics page counts what is open now, and what was asked of GitHub.
    let (status, page) = get(&server.url("/metrics")).await;
    assert_eq!(status, 200);
    for line in [
        "chopin_sockets_open{kind=\"agent\"} 1",
        "chopin_sockets_open{kind=\"room\"} 1",
        "chopin_planner_links_attached 1",
        "chopin_documents_open 1",
        "chopin_github_calls_total{call=\"user\",outcome=\"ok\"}",
        "chopin_store_call_seconds_count{method=\"claim_ownership\",outcome=\"ok\"} 1",
    ] {
        assert!(
            page.contains(line),
            "{line:?} missing from /metrics:\n{page}"
        );
    }
    // The runtime's live tasks: at least this room's and the agent link's.
    let tasks: u64 = page
        .lines()
        .find_map(|l| l.strip_prefix("chopin_tasks_alive "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("chopin_tasks_alive missing from /metrics:\n{page}"));
    assert!(tasks >= 2, "{tasks} tasks alive with two sockets open");

    // Both clients keep reading (answering pings, as real ones do) while the server stops.
    let agent_heard = tokio::spawn(async move {
        let mut heard = Vec::new();
        loop {
            match agent.recv().await {
                Ok(Event::Message(m)) => heard.push(format!("{m:?}")),
                Ok(Event::Closed { code, reason }) => return (heard, Some((code, reason))),
                Err(e) => {
                    heard.push(format!("{e:?}"));
                    return (heard, None);
                }
            }
        }
    });
    let room_closed = tokio::spawn(async move {
        loop {
            match room.recv_json().await {
                Ok(BrowserEvent::Closed { code, reason }) => return Some((code, reason)),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    });

    let (status, log) = server.stop().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("writer lease released"), "{log}");
    // Written to a pipe, not a terminal: plain text, no colour codes.
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a piped log: {log:?}"
    );

    let (heard, closed) = tokio::time::timeout(Duration::from_secs(10), agent_heard)
        .await
        .unwrap()
        .unwrap();
    assert!(
        heard.last().is_some_and(|m| m.contains("GoingAway")),
        "the link is told why before the close: {heard:?}"
    );
    assert_eq!(closed, Some((1001, "going-away".to_owned())), "{heard:?}");
    let closed = tokio::time::timeout(Duration::from_secs(10), room_closed)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed, Some((1001, "going-away".to_owned())));

    // The lease was given back: the next process on the same database is ready at once, not
    // after the 15 s an abandoned lease takes to expire.
    let again = launch.start().await;
    let (status, body) = get(&again.url("/readyz")).await;
    assert_eq!(status, 200, "{body}");
    let (status, log) = again.stop().await;
    assert!(status.success(), "{log}");
}
