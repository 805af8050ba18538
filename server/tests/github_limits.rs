//! The GitHub client against `wiremock` stubs that answer with GitHub's own response shapes and
//! headers: rate limits (primary: 403/429 with `x-ratelimit-remaining: 0` and
//! `x-ratelimit-reset`; secondary: `retry-after`, or only GitHub's words) are "GitHub
//! unavailable until then" for that token, without asking GitHub meanwhile, and never a verdict
//! on access; answers are read up to a cap; no more than a fixed number of calls are in flight;
//! a GitHub that hangs (before connecting, before answering, or in the middle of a body) is
//! unavailable after the call's time limit. Time is a manual clock stepped by the test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chopin_server::identity::admission::{Admission, AdmissionError, AdmissionPolicy};
use chopin_server::identity::github::{
    GitHub, GitHubError, GITHUB_MAX_BODY_BYTES, GITHUB_MAX_CALLS_IN_FLIGHT,
    RATE_LIMIT_DEFAULT_WAIT_MS,
};
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::connector::TcpConnector;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The test's "now": a whole second, as GitHub's reset times are.
const T0_MS: i64 = 1_700_000_000_000;
const T0_SECS: i64 = T0_MS / 1000;

const MONA: &str = "gho_mona0000000000000000000000000000000";
const HUBOT: &str = "gho_hubot000000000000000000000000000000";

const RATE_LIMIT_DOCS: &str =
    "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting";
const SECONDARY_DOCS: &str = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits";

struct Stub {
    server: MockServer,
    clock: Arc<ManualClock>,
    github: GitHub,
}

impl Stub {
    async fn new() -> Self {
        let server = MockServer::start().await;
        let clock = Arc::new(ManualClock::new(T0_MS));
        let github = GitHub::new(server.uri(), Arc::new(TcpConnector), clock.clone());
        Self {
            server,
            clock,
            github,
        }
    }

    /// How many requests reached the stub at `path`.
    async fn asked(&self, at: &str) -> usize {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path() == at)
            .count()
    }

    fn admission(&self, orgs: &[&str]) -> Admission {
        Admission::new(
            AdmissionPolicy::new(Vec::<String>::new(), orgs),
            self.github.clone(),
            self.clock.clone(),
        )
    }
}

/// The headers every GitHub REST answer carries, with `remaining` calls left of 5000.
fn github_headers(template: ResponseTemplate, remaining: u32) -> ResponseTemplate {
    template
        .insert_header("content-type", "application/json; charset=utf-8")
        .insert_header("x-github-api-version-selected", "2022-11-28")
        .insert_header("x-github-media-type", "github.v3; format=json")
        .insert_header("x-github-request-id", "C3F0:2B5E:1A2B3C:1B2C3D:65A1B2C3")
        .insert_header("x-ratelimit-limit", "5000")
        .insert_header("x-ratelimit-remaining", remaining.to_string().as_str())
        .insert_header("x-ratelimit-used", (5000 - remaining).to_string().as_str())
        .insert_header("x-ratelimit-reset", (T0_SECS + 3_000).to_string().as_str())
        .insert_header("x-ratelimit-resource", "core")
}

fn user_body(login: &str, id: u64) -> serde_json::Value {
    json!({
        "login": login,
        "id": id,
        "node_id": "MDQ6VXNlcjE=",
        "avatar_url": "https://github.com/images/error/octocat_happy.gif",
        "html_url": format!("https://github.com/{login}"),
        "type": "User",
        "site_admin": false,
        "name": "monalisa octocat",
    })
}

fn user_ok(login: &str, id: u64) -> ResponseTemplate {
    github_headers(ResponseTemplate::new(200), 4999).set_body_json(user_body(login, id))
}

fn membership_ok(org: &str, state: &str) -> ResponseTemplate {
    github_headers(ResponseTemplate::new(200), 4998).set_body_json(json!({
        "url": format!("https://api.github.com/orgs/{org}/memberships/mona"),
        "state": state,
        "role": "member",
        "organization_url": format!("https://api.github.com/orgs/{org}"),
        "organization": {"login": org, "id": 9},
        "user": {"login": "mona", "id": 1},
    }))
}

fn repo_ok() -> ResponseTemplate {
    github_headers(ResponseTemplate::new(200), 4998).set_body_json(json!({
        "id": 1296269,
        "name": "plans",
        "full_name": "octo/plans",
        "private": true,
        "owner": {"login": "octo", "id": 2},
        "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true},
    }))
}

/// GitHub's primary rate limit: `status` (403 or 429), nothing left, reset at `reset_secs`.
fn primary_limit(status: u16, reset_secs: i64) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("content-type", "application/json; charset=utf-8")
        .insert_header("x-github-request-id", "C3F0:2B5E:1A2B3C:1B2C3D:65A1B2C4")
        .insert_header("x-ratelimit-limit", "5000")
        .insert_header("x-ratelimit-remaining", "0")
        .insert_header("x-ratelimit-used", "5000")
        .insert_header("x-ratelimit-reset", reset_secs.to_string().as_str())
        .insert_header("x-ratelimit-resource", "core")
        .set_body_json(json!({
            "message": "API rate limit exceeded for user ID 1.",
            "documentation_url": RATE_LIMIT_DOCS,
        }))
}

/// GitHub's secondary rate limit: `status` (403 or 429), calls left on the primary limit, and
/// `retry-after` when given.
fn secondary_limit(status: u16, retry_after_secs: Option<u32>) -> ResponseTemplate {
    let mut template = github_headers(ResponseTemplate::new(status), 4321).set_body_json(json!({
        "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID C3F0:2B5E:1A2B3C:1B2C3D:65A1B2C5.",
        "documentation_url": SECONDARY_DOCS,
    }));
    if let Some(secs) = retry_after_secs {
        template = template.insert_header("retry-after", secs.to_string().as_str());
    }
    template
}

fn assert_unavailable<T: std::fmt::Debug>(answer: Result<T, GitHubError>, words: &str) {
    match answer {
        Err(GitHubError::Unavailable(why)) => {
            assert!(why.contains(words), "{why:?} should say {words:?}");
            assert!(
                !why.contains(MONA) && !why.contains(HUBOT),
                "a token leaked: {why}"
            );
        }
        other => panic!("expected Unavailable ({words}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_primary_rate_limit_is_unavailable_until_the_reset_without_asking_meanwhile() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(primary_limit(403, T0_SECS + 60))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1))
        .mount(&s.server)
        .await;

    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 1);

    // A millisecond before the reset: still unavailable, and GitHub is not asked.
    s.clock.set(T0_MS + 59_999);
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 1);

    // At the reset GitHub is asked again.
    s.clock.set(T0_MS + 60_000);
    assert_eq!(s.github.user(MONA).await.unwrap().login, "mona");
    assert_eq!(s.asked("/user").await, 2);
}

#[tokio::test]
async fn a_primary_limit_answered_429_is_honoured_as_well() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/plans"))
        .respond_with(primary_limit(429, T0_SECS + 120))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/plans"))
        .respond_with(repo_ok())
        .mount(&s.server)
        .await;

    assert_unavailable(
        s.github.repo_access(MONA, "octo", "plans").await,
        "rate limit",
    );
    s.clock.set(T0_MS + 119_999);
    assert_unavailable(
        s.github.repo_access(MONA, "octo", "plans").await,
        "rate limit",
    );
    assert_eq!(s.asked("/repos/octo/plans").await, 1);
    s.clock.set(T0_MS + 120_000);
    assert!(s
        .github
        .repo_access(MONA, "octo", "plans")
        .await
        .unwrap()
        .unwrap()
        .can_write());
}

#[tokio::test]
async fn a_secondary_rate_limit_waits_its_retry_after() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(secondary_limit(403, Some(30)))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1))
        .mount(&s.server)
        .await;

    assert_unavailable(s.github.user(MONA).await, "rate limit");
    s.clock.set(T0_MS + 29_999);
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 1);
    s.clock.set(T0_MS + 30_000);
    assert_eq!(s.github.user(MONA).await.unwrap().id, 1);
    assert_eq!(s.asked("/user").await, 2);
}

#[tokio::test]
async fn a_secondary_limit_without_retry_after_is_not_a_refused_membership_and_waits_a_minute() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user/memberships/orgs/acme"))
        .respond_with(secondary_limit(403, None))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user/memberships/orgs/acme"))
        .respond_with(membership_ok("acme", "active"))
        .mount(&s.server)
        .await;

    // Without the limit's words this 403 would read "not a member": it must not.
    assert_unavailable(
        s.github.org_membership_active(MONA, "acme").await,
        "rate limit",
    );
    s.clock.set(T0_MS + RATE_LIMIT_DEFAULT_WAIT_MS - 1);
    assert_unavailable(
        s.github.org_membership_active(MONA, "acme").await,
        "rate limit",
    );
    assert_eq!(s.asked("/user/memberships/orgs/acme").await, 1);
    s.clock.set(T0_MS + RATE_LIMIT_DEFAULT_WAIT_MS);
    assert_eq!(s.github.org_membership_active(MONA, "acme").await, Ok(true));
}

#[tokio::test]
async fn a_plain_403_on_a_membership_is_still_not_a_member_and_holds_nothing() {
    let s = Stub::new().await;
    // GitHub's answer when an organization restricts OAuth apps: not a rate limit.
    Mock::given(method("GET"))
        .and(path("/user/memberships/orgs/acme"))
        .respond_with(github_headers(ResponseTemplate::new(403), 4990).set_body_json(json!({
            "message": "Although you appear to have the correct authorization credentials, the `acme` organization has enabled OAuth App access restrictions, meaning that data access to third-parties is limited.",
            "documentation_url": "https://docs.github.com/rest/orgs/members#get-an-organization-membership-for-the-authenticated-user",
            "status": "403",
        })))
        .mount(&s.server)
        .await;
    assert_eq!(
        s.github.org_membership_active(MONA, "acme").await,
        Ok(false)
    );
    assert_eq!(
        s.github.org_membership_active(MONA, "acme").await,
        Ok(false)
    );
    assert_eq!(s.asked("/user/memberships/orgs/acme").await, 2);
}

#[tokio::test]
async fn a_rate_limited_membership_is_a_503_never_a_refusal_and_is_not_cached() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1))
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user/memberships/orgs/acme"))
        .respond_with(primary_limit(403, T0_SECS + 10))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user/memberships/orgs/acme"))
        .respond_with(membership_ok("acme", "active"))
        .mount(&s.server)
        .await;
    let admission = s.admission(&["acme"]);

    assert_eq!(
        admission.check(MONA).await.unwrap_err(),
        AdmissionError::Unavailable
    );
    // Within the limit: still 503, and the limited token asks GitHub nothing at all.
    s.clock.set(T0_MS + 9_999);
    assert_eq!(
        admission.check(MONA).await.unwrap_err(),
        AdmissionError::Unavailable
    );
    assert_eq!(s.asked("/user").await, 1);
    assert_eq!(s.asked("/user/memberships/orgs/acme").await, 1);

    // Nothing was cached: after the reset the member is admitted.
    s.clock.set(T0_MS + 10_000);
    assert_eq!(admission.check(MONA).await.unwrap().user.login, "mona");
}

#[tokio::test]
async fn a_rate_limited_repository_is_unavailable_never_no_access_and_is_not_cached() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/plans"))
        .respond_with(secondary_limit(429, Some(5)))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/repos/octo/plans"))
        .respond_with(repo_ok())
        .mount(&s.server)
        .await;
    let admission = s.admission(&[]);
    assert_unavailable(
        admission.repo_access_cached(MONA, "octo", "plans").await,
        "rate limit",
    );
    s.clock.set(T0_MS + 4_999);
    assert_unavailable(
        admission.repo_access_cached(MONA, "octo", "plans").await,
        "rate limit",
    );
    assert_eq!(s.asked("/repos/octo/plans").await, 1);
    s.clock.set(T0_MS + 5_000);
    assert!(admission
        .repo_access_cached(MONA, "octo", "plans")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_rate_limit_holds_only_the_token_github_limited() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .and(header("authorization", format!("Bearer {MONA}").as_str()))
        .respond_with(primary_limit(403, T0_SECS + 600))
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .and(header("authorization", format!("Bearer {HUBOT}").as_str()))
        .respond_with(user_ok("hubot", 2))
        .mount(&s.server)
        .await;
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.github.user(HUBOT).await.unwrap().login, "hubot");
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 2);
}

#[tokio::test]
async fn a_reset_far_away_or_already_past_is_held_within_bounds() {
    let s = Stub::new().await;
    // A reset a day away holds an hour at most (GitHub's window is an hour).
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(primary_limit(403, T0_SECS + 86_400))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    // A reset this clock already passed (clocks disagree) still holds a second.
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(primary_limit(403, T0_SECS - 5))
        .up_to_n_times(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1))
        .mount(&s.server)
        .await;

    assert_unavailable(s.github.user(MONA).await, "rate limit");
    s.clock.set(T0_MS + 3_599_999);
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 1);

    let back = T0_MS + 3_600_000;
    s.clock.set(back);
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 2);
    s.clock.set(back + 999);
    assert_unavailable(s.github.user(MONA).await, "rate limit");
    assert_eq!(s.asked("/user").await, 2);
    s.clock.set(back + 1_000);
    assert_eq!(s.github.user(MONA).await.unwrap().login, "mona");
}

#[tokio::test]
async fn an_answer_longer_than_the_cap_is_unavailable_naming_the_cap() {
    let s = Stub::new().await;
    let mut body = user_body("mona", 1);
    body["bio"] = json!("x".repeat(GITHUB_MAX_BODY_BYTES));
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(github_headers(ResponseTemplate::new(200), 4999).set_body_json(body))
        .mount(&s.server)
        .await;
    assert_unavailable(
        s.github.user(MONA).await,
        &format!("{GITHUB_MAX_BODY_BYTES}-byte cap"),
    );
}

/// Answers `/user` after `delay`, noting when each request arrived.
struct Slow {
    delay: Duration,
    arrivals: Mutex<Vec<std::time::Instant>>,
}

impl Respond for Slow {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        #[allow(clippy::disallowed_methods)] // wiremock's own thread, real time
        let now = std::time::Instant::now();
        self.arrivals.lock().unwrap().push(now);
        user_ok("mona", 1).set_delay(self.delay)
    }
}

#[tokio::test]
async fn no_more_than_the_cap_of_calls_are_in_flight_at_github() {
    let s = Stub::new().await;
    let slow = Arc::new(Slow {
        delay: Duration::from_millis(300),
        arrivals: Mutex::new(Vec::new()),
    });
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(SlowRef(slow.clone()))
        .mount(&s.server)
        .await;

    // A flood of distinct tokens, all at once.
    let calls = 2 * GITHUB_MAX_CALLS_IN_FLIGHT + 4;
    let answers = futures::future::join_all((0..calls).map(|i| {
        let github = s.github.clone();
        async move { github.user(&format!("gho_flood{i:04}")).await }
    }))
    .await;
    assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");

    // A request is in flight at the stub from its arrival until its answer leaves, `delay`
    // later at the earliest; count the most that overlapped.
    let arrivals = slow.arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), calls);
    let most = arrivals
        .iter()
        .map(|&a| {
            arrivals
                .iter()
                .filter(|&&b| b <= a && a < b + slow.delay)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most <= GITHUB_MAX_CALLS_IN_FLIGHT,
        "{most} calls were in flight at once"
    );
}

struct SlowRef(Arc<Slow>);

impl Respond for SlowRef {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0.respond(request)
    }
}

#[tokio::test]
async fn a_call_beyond_the_cap_waits_its_turn_within_its_own_time_limit() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1).set_delay(Duration::from_secs(3_600)))
        .mount(&s.server)
        .await;
    let hung: Vec<_> = (0..GITHUB_MAX_CALLS_IN_FLIGHT)
        .map(|i| {
            let github = s.github.clone();
            tokio::spawn(async move { github.user(&format!("gho_hung{i:04}")).await })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(10), async {
        while s.asked("/user").await < GITHUB_MAX_CALLS_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first calls reach the stub");

    let quick = s.github.clone().with_request_timeout_ms(300);
    assert_eq!(
        quick.user(MONA).await,
        Err(GitHubError::Unavailable("no answer within 300 ms".into()))
    );
    assert_eq!(
        s.asked("/user").await,
        GITHUB_MAX_CALLS_IN_FLIGHT,
        "the call beyond the cap never reached GitHub"
    );
    for task in hung {
        task.abort();
    }
}

#[tokio::test]
async fn a_github_that_accepts_the_request_and_never_answers_is_unavailable() {
    let s = Stub::new().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(user_ok("mona", 1).set_delay(Duration::from_secs(3_600)))
        .mount(&s.server)
        .await;
    let github = s.github.clone().with_request_timeout_ms(300);
    assert_eq!(
        github.user(MONA).await,
        Err(GitHubError::Unavailable("no answer within 300 ms".into()))
    );
    assert_eq!(s.asked("/user").await, 1, "the request reached GitHub");
    // Nothing was held against the token: the next call asks again.
    assert_eq!(
        github.user(MONA).await,
        Err(GitHubError::Unavailable("no answer within 300 ms".into()))
    );
    assert_eq!(s.asked("/user").await, 2);
}

#[tokio::test]
async fn a_github_whose_body_never_finishes_is_unavailable_and_its_socket_is_closed() {
    // wiremock sends an answer whole, so this GitHub is a plain socket: GitHub's head for
    // `GET /user`, a third of the body, then silence.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let closed = Arc::new(AtomicUsize::new(0));
    let seen = closed.clone();
    let peer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed before sending its request");
            head.extend_from_slice(&buf[..n]);
        }
        let body = user_body("mona", 1).to_string();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\n\
             content-length: {}\r\nx-ratelimit-limit: 5000\r\nx-ratelimit-remaining: 4999\r\n\
             x-ratelimit-reset: {}\r\nx-ratelimit-resource: core\r\n\r\n{}",
            body.len(),
            T0_SECS + 3_000,
            &body[..body.len() / 3]
        );
        socket.write_all(reply.as_bytes()).await.unwrap();
        // Wait for the client to give up and close (bounded, so a leak fails the test).
        let gone = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        if gone.is_ok() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    let github = GitHub::new(
        base,
        Arc::new(TcpConnector),
        Arc::new(ManualClock::new(T0_MS)),
    )
    .with_request_timeout_ms(300);
    assert_eq!(
        github.user(MONA).await,
        Err(GitHubError::Unavailable("no answer within 300 ms".into()))
    );
    peer.await.unwrap();
    assert_eq!(
        closed.load(Ordering::SeqCst),
        1,
        "the socket was closed when the call gave up"
    );
}
