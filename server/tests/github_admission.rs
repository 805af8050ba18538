//! The server's GitHub client and instance admission against the fake GitHub over real
//! loopback TCP: the policy's verdicts and HTTP statuses (AC-12), repository access (AC-15,
//! AO-04), the 30 s token-digest caches stepped by a manual clock, and that no token ever
//! appears in an error.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chopin_fixtures::github::{FakeGitHub, Permission};
use chopin_server::identity::admission::{
    Admission, AdmissionError, AdmissionPolicy, ADMISSION_CACHE_TTL_MS, REPO_ACCESS_CACHE_TTL_MS,
};
use chopin_server::identity::github::{GitHub, GitHubError, GitHubUser};
use chopin_server::runtime::clock::ManualClock;
use chopin_server::runtime::connector::{BoxedIo, Connector, SharedConnector, TcpConnector};

const T0: i64 = 1_700_000_000_000;

/// Real TCP, except that the connections whose 1-based numbers are in `refuse` fail to
/// connect: an outage of single requests, e.g. GitHub answering `/user` and then dropping off
/// before the org lookup.
#[derive(Default)]
struct FlakyConnector {
    connects: AtomicUsize,
    refuse: Mutex<BTreeSet<usize>>,
}

impl FlakyConnector {
    fn refuse_connections(&self, numbers: impl IntoIterator<Item = usize>) {
        let mut refuse = self.refuse.lock().unwrap();
        refuse.clear();
        refuse.extend(numbers);
        self.connects.store(0, Ordering::SeqCst);
    }
}

#[async_trait]
impl Connector for FlakyConnector {
    async fn connect(&self, host: &str, port: u16) -> std::io::Result<BoxedIo> {
        let number = self.connects.fetch_add(1, Ordering::SeqCst) + 1;
        if self.refuse.lock().unwrap().contains(&number) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "scripted outage",
            ));
        }
        TcpConnector.connect(host, port).await
    }
}

struct World {
    fake: FakeGitHub,
    github: GitHub,
    clock: Arc<ManualClock>,
    flaky: Arc<FlakyConnector>,
}

impl World {
    async fn new() -> Self {
        let fake = FakeGitHub::new();
        let base = fake.serve_tcp().await.expect("fake GitHub serves");
        let flaky = Arc::new(FlakyConnector::default());
        let connector: SharedConnector = flaky.clone();
        let clock = Arc::new(ManualClock::new(T0));
        Self {
            fake,
            github: GitHub::new(base, connector, clock.clone()),
            clock,
            flaky,
        }
    }

    fn admission(&self, users: &[&str], orgs: &[&str]) -> Admission {
        Admission::new(
            AdmissionPolicy::new(users, orgs),
            self.github.clone(),
            self.clock.clone(),
        )
    }

    fn user(&self, login: &str, id: u64) -> String {
        self.fake.add_user(login, id);
        self.fake.issue_token(login)
    }
}

/// How often `GET /user` itself was asked (`request_count` would also count org lookups under
/// `/user/memberships/`).
fn user_lookups(fake: &FakeGitHub) -> usize {
    fake.requests().iter().filter(|r| *r == "GET /user").count()
}

fn assert_hides(token: &str, error: &impl std::fmt::Display) {
    let text = error.to_string();
    assert!(
        !text.contains(token),
        "the token leaked into an error: {text}"
    );
}

#[tokio::test]
async fn with_empty_lists_every_verified_user_is_admitted() {
    let w = World::new().await;
    let token = w.user("Mona", 7);
    let admitted = w.admission(&[], &[]).check(&token).await.unwrap();
    assert_eq!(
        admitted.user,
        GitHubUser {
            id: 7,
            login: "Mona".into()
        }
    );
    assert_eq!(w.fake.request_count("/user/memberships"), 0);
}

#[tokio::test]
async fn a_listed_user_is_admitted_whatever_the_case() {
    let w = World::new().await;
    let mona = w.user("Mona", 1);
    let hubot = w.user("hubot", 2);
    let admission = w.admission(&["MONA"], &[]);
    assert_eq!(admission.check(&mona).await.unwrap().user.login, "Mona");
    let refused = admission.check(&hubot).await.unwrap_err();
    assert_eq!(
        refused,
        AdmissionError::Refused {
            login: "hubot".into()
        }
    );
    assert_eq!(refused.http_status().as_u16(), 403);
}

#[tokio::test]
async fn an_org_member_is_admitted_and_a_non_member_is_refused_by_name() {
    let w = World::new().await;
    let mona = w.user("mona", 1);
    let hubot = w.user("Hubot", 2);
    w.fake.add_org_member("Acme", "mona");
    let admission = w.admission(&[], &["acme", "globex"]);

    assert_eq!(admission.check(&mona).await.unwrap().user.login, "mona");
    // Orgs are asked in sorted order and the first active membership ends the search.
    assert_eq!(
        w.fake.requests(),
        ["GET /user", "GET /user/memberships/orgs/acme"]
    );

    let refused = admission.check(&hubot).await.unwrap_err();
    assert_eq!(refused.http_status().as_u16(), 403);
    assert!(refused.to_string().contains("@Hubot"), "{refused}");
    assert_eq!(w.fake.request_count("/user/memberships/orgs/acme"), 2);
    assert_eq!(w.fake.request_count("/user/memberships/orgs/globex"), 1);
}

#[tokio::test]
async fn a_bad_or_expired_token_is_401() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let admission = w.admission(&[], &[]);

    let bad = admission.check("ghp_not_a_token").await.unwrap_err();
    assert_eq!(bad, AdmissionError::BadCredentials);
    assert_eq!(bad.http_status().as_u16(), 401);
    assert_hides("ghp_not_a_token", &bad);

    w.fake.expire_token(&token);
    let expired = admission.check(&token).await.unwrap_err();
    assert_eq!(expired, AdmissionError::BadCredentials);
    assert_hides(&token, &expired);

    // A token no header can carry is refused without asking GitHub.
    let before = w.fake.requests().len();
    assert_eq!(
        admission.check("ghp_\nsmuggled").await.unwrap_err(),
        AdmissionError::BadCredentials
    );
    assert_eq!(w.fake.requests().len(), before);
}

#[tokio::test]
async fn an_outage_is_503_and_is_not_cached() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let admission = w.admission(&[], &[]);

    w.fake.set_outage(true);
    let down = admission.check(&token).await.unwrap_err();
    assert_eq!(down, AdmissionError::Unavailable);
    assert_eq!(down.http_status().as_u16(), 503);
    assert_hides(&token, &down);
    let raw = w.github.user(&token).await.unwrap_err();
    assert!(matches!(raw, GitHubError::Unavailable(_)), "{raw:?}");
    assert!(raw.to_string().contains("503"), "{raw}");
    assert_hides(&token, &raw);

    // The next check asks again, at the same instant, and GitHub is back.
    w.fake.set_outage(false);
    assert_eq!(admission.check(&token).await.unwrap().user.login, "mona");
}

#[tokio::test]
async fn a_connection_failure_is_unavailable() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    w.flaky.refuse_connections([1]);
    let error = w.github.user(&token).await.unwrap_err();
    assert!(matches!(error, GitHubError::Unavailable(_)), "{error:?}");
    assert!(error.to_string().contains("scripted outage"), "{error}");
    assert_hides(&token, &error);
    assert_eq!(w.fake.request_count("/user"), 0);
}

/// A host that accepts the connection attempt and then never completes it.
struct SilentConnector;

#[async_trait]
impl Connector for SilentConnector {
    async fn connect(&self, _host: &str, _port: u16) -> std::io::Result<BoxedIo> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_github_that_never_answers_is_unavailable_after_the_request_timeout() {
    let clock = Arc::new(ManualClock::new(T0));
    let github = GitHub::new(
        "http://127.0.0.1:9".into(),
        Arc::new(SilentConnector),
        clock.clone(),
    )
    .with_request_timeout_ms(50);
    let error = github.user("ghp_silent").await.unwrap_err();
    assert_eq!(
        error,
        GitHubError::Unavailable("no answer within 50 ms".into())
    );
    let admission = Admission::new(AdmissionPolicy::default(), github, clock);
    assert_eq!(
        admission.check("ghp_silent").await.unwrap_err(),
        AdmissionError::Unavailable
    );
}

#[tokio::test]
async fn break_glass_a_listed_user_needs_no_org_lookup_while_org_lookups_fail() {
    let w = World::new().await;
    let mona = w.user("mona", 1);
    let hubot = w.user("hubot", 2);
    w.fake.add_org_member("acme", "hubot");
    let admission = w.admission(&["mona"], &["acme"]);

    // Connection 1 (`/user`) works; connection 2 (the org lookup) fails.
    w.flaky.refuse_connections([2]);
    assert_eq!(admission.check(&mona).await.unwrap().user.login, "mona");
    assert_eq!(w.fake.request_count("/user/memberships"), 0);

    // An org member who is not listed cannot be decided: 503, not 403.
    w.flaky.refuse_connections([2]);
    let down = admission.check(&hubot).await.unwrap_err();
    assert_eq!(down, AdmissionError::Unavailable);
    assert_eq!(down.http_status().as_u16(), 503);

    // Not cached: once the org lookup answers, the member is admitted.
    w.flaky.refuse_connections([]);
    assert_eq!(admission.check(&hubot).await.unwrap().user.login, "hubot");
}

#[tokio::test]
async fn one_failed_org_lookup_does_not_hide_membership_of_another() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    w.fake.add_org_member("globex", "mona");
    let admission = w.admission(&[], &["acme", "globex"]);
    // `/user` works, `acme` fails, `globex` answers active.
    w.flaky.refuse_connections([2]);
    assert_eq!(admission.check(&token).await.unwrap().user.login, "mona");
    assert_eq!(w.fake.request_count("/user/memberships/orgs/globex"), 1);
}

#[tokio::test]
async fn a_verdict_is_cached_for_30_seconds_of_clock_time() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let other = w.user("hubot", 2);
    let admission = w.admission(&[], &[]);

    admission.check(&token).await.unwrap();
    assert_eq!(user_lookups(&w.fake), 1);

    w.clock.advance(ADMISSION_CACHE_TTL_MS - 1);
    admission.check(&token).await.unwrap();
    assert_eq!(user_lookups(&w.fake), 1, "served from the cache");

    // Another token is not served from this one's entry.
    admission.check(&other).await.unwrap();
    assert_eq!(user_lookups(&w.fake), 2);

    w.clock.advance(2); // 30 s + 1 ms after the first check
    admission.check(&token).await.unwrap();
    assert_eq!(user_lookups(&w.fake), 3, "asked GitHub again");
}

#[tokio::test]
async fn a_cached_verdict_outlives_an_expired_token_until_the_ttl_or_invalidation() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let admission = w.admission(&[], &[]);
    admission.check(&token).await.unwrap();
    w.fake.expire_token(&token);

    // Within the 30 s the cached verdict stands (the documented window).
    w.clock.advance(1_000);
    assert!(admission.check(&token).await.is_ok());

    // Invalidation forgets it at once.
    admission.invalidate(&token);
    assert_eq!(
        admission.check(&token).await.unwrap_err(),
        AdmissionError::BadCredentials
    );
    assert_eq!(user_lookups(&w.fake), 2);
}

#[tokio::test]
async fn a_refusal_is_cached_and_rechecked_after_the_ttl() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let admission = w.admission(&[], &["acme"]);
    assert!(matches!(
        admission.check(&token).await,
        Err(AdmissionError::Refused { .. })
    ));
    w.fake.add_org_member("acme", "mona");
    w.clock.advance(ADMISSION_CACHE_TTL_MS - 1);
    assert!(matches!(
        admission.check(&token).await,
        Err(AdmissionError::Refused { .. })
    ));
    w.clock.advance(1);
    assert!(admission.check(&token).await.is_ok());
    assert_eq!(user_lookups(&w.fake), 2);
}

#[tokio::test]
async fn repository_access_reports_write_read_and_none_in_canonical_case() {
    let w = World::new().await;
    let writer = w.user("mona", 1);
    let admin = w.user("octo", 2);
    let reader = w.user("hubot", 3);
    let stranger = w.user("eve", 4);
    w.fake.add_repo("Acme", "Plans");
    w.fake.grant("Acme", "Plans", "mona", Permission::Write);
    w.fake.grant("Acme", "Plans", "octo", Permission::Admin);
    w.fake.grant("Acme", "Plans", "hubot", Permission::Read);

    let access = w
        .github
        .repo_access(&writer, "acme", "plans")
        .await
        .unwrap()
        .expect("mona has access");
    assert_eq!(
        (access.owner.as_str(), access.repo.as_str()),
        ("Acme", "Plans")
    );
    assert!(access.push && access.pull && !access.admin);
    assert!(access.can_write());

    let access = w
        .github
        .repo_access(&admin, "ACME", "PLANS")
        .await
        .unwrap()
        .unwrap();
    assert!(access.admin && access.can_write());

    let access = w
        .github
        .repo_access(&reader, "Acme", "Plans")
        .await
        .unwrap()
        .unwrap();
    assert!(access.pull && !access.can_write());

    assert_eq!(
        w.github.repo_access(&stranger, "Acme", "Plans").await,
        Ok(None)
    );
    assert_eq!(
        w.github.repo_access(&writer, "Acme", "Nope").await,
        Ok(None)
    );

    // A name GitHub could not hold is "no access" without a request.
    let before = w.fake.request_count("/repos/");
    assert_eq!(
        w.github.repo_access(&writer, "Acme", "Plans/../x").await,
        Ok(None)
    );
    assert_eq!(
        w.github.repo_access(&writer, "Acme?", "Plans").await,
        Ok(None)
    );
    assert_eq!(w.fake.request_count("/repos/"), before);

    w.fake.expire_token(&writer);
    let error = w
        .github
        .repo_access(&writer, "Acme", "Plans")
        .await
        .unwrap_err();
    assert_eq!(error, GitHubError::BadCredentials);
    assert_hides(&writer, &error);
}

#[tokio::test]
async fn org_membership_is_active_membership_only() {
    let w = World::new().await;
    let mona = w.user("mona", 1);
    w.fake.add_org_member("Acme", "mona");
    assert_eq!(
        w.github.org_membership_active(&mona, "acme").await,
        Ok(true)
    );
    assert_eq!(
        w.github.org_membership_active(&mona, "globex").await,
        Ok(false)
    );
    w.fake.remove_org_member("Acme", "mona");
    assert_eq!(
        w.github.org_membership_active(&mona, "acme").await,
        Ok(false)
    );
    w.fake.set_outage(true);
    assert!(matches!(
        w.github.org_membership_active(&mona, "acme").await,
        Err(GitHubError::Unavailable(_))
    ));
}

#[tokio::test]
async fn repository_access_is_cached_briefly_per_token_and_repository() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    w.fake.add_repo("Acme", "Plans");
    w.fake.grant("Acme", "Plans", "mona", Permission::Write);
    let admission = w.admission(&[], &[]);

    let first = admission
        .repo_access_cached(&token, "Acme", "Plans")
        .await
        .unwrap()
        .unwrap();
    assert!(first.can_write());
    assert_eq!(w.fake.request_count("/repos/"), 1);

    // Revoked on GitHub, but within the window the cached answer (any case) stands.
    w.fake.revoke("Acme", "Plans", "mona");
    w.clock.advance(REPO_ACCESS_CACHE_TTL_MS - 1);
    let cached = admission
        .repo_access_cached(&token, "acme", "PLANS")
        .await
        .unwrap();
    assert_eq!(cached, Some(first));
    assert_eq!(w.fake.request_count("/repos/"), 1);

    // After the window the recheck sees the loss.
    w.clock.advance(2);
    assert_eq!(
        admission.repo_access_cached(&token, "Acme", "Plans").await,
        Ok(None)
    );
    assert_eq!(w.fake.request_count("/repos/"), 2);

    // "No access" is cached too, and invalidation drops it.
    w.fake.grant("Acme", "Plans", "mona", Permission::Admin);
    assert_eq!(
        admission.repo_access_cached(&token, "Acme", "Plans").await,
        Ok(None)
    );
    admission.invalidate(&token);
    let back = admission
        .repo_access_cached(&token, "Acme", "Plans")
        .await
        .unwrap()
        .unwrap();
    assert!(back.admin);
    assert_eq!(w.fake.request_count("/repos/"), 3);

    // Outages are not cached.
    w.clock.advance(REPO_ACCESS_CACHE_TTL_MS);
    w.fake.set_outage(true);
    let down = admission
        .repo_access_cached(&token, "Acme", "Plans")
        .await
        .unwrap_err();
    assert!(matches!(down, GitHubError::Unavailable(_)));
    assert_hides(&token, &down);
    w.fake.set_outage(false);
    assert!(admission
        .repo_access_cached(&token, "Acme", "Plans")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_401_on_a_repository_recheck_drops_the_cached_admission() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    w.fake.add_repo("Acme", "Plans");
    let admission = w.admission(&[], &[]);
    admission.check(&token).await.unwrap();
    w.fake.expire_token(&token);
    assert_eq!(
        admission.repo_access_cached(&token, "Acme", "Plans").await,
        Err(GitHubError::BadCredentials)
    );
    // Well within 30 s, the next admission check asks GitHub and learns the token is dead.
    assert_eq!(
        admission.check(&token).await.unwrap_err(),
        AdmissionError::BadCredentials
    );
    assert_eq!(user_lookups(&w.fake), 2);
}

#[tokio::test]
async fn perm_06_the_app_installation_covers_a_repository_all_selected_paged_or_not_at_all() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    let other = w.user("hubot", 2);
    w.fake.add_repo("Acme", "Plans");
    w.fake.grant("Acme", "Plans", "mona", Permission::Write);
    // Installed on all of Acme's repositories: one listing of installations, none of
    // repositories.
    assert_eq!(
        w.github.installation_covers(&token, "acme", "PLANS").await,
        Ok(true)
    );
    assert_eq!(w.fake.request_count("/user/installations"), 1);
    // Someone with no grant there reaches no installation of Acme's.
    assert_eq!(
        w.github.installation_covers(&other, "Acme", "Plans").await,
        Ok(false)
    );

    // Selected repositories, ours on the third page of 50.
    // Listed in name order: "Plans" comes after all 120 of these.
    let mut names: Vec<String> = (0..120).map(|i| format!("a{i:03}")).collect();
    for name in &names {
        w.fake.add_repo("Acme", name);
        w.fake.grant("Acme", name, "mona", Permission::Read);
    }
    names.push("Plans".to_owned());
    let selected: Vec<&str> = names.iter().map(String::as_str).collect();
    w.fake.select_repositories("Acme", &selected);
    let before = w.fake.request_count("/user/installations/");
    assert_eq!(
        w.github.installation_covers(&token, "Acme", "Plans").await,
        Ok(true)
    );
    assert_eq!(
        w.fake.request_count("/user/installations/") - before,
        3,
        "read page by page until found"
    );
    // Not selected, or not installed: not covered; names GitHub could not hold ask nothing.
    w.fake.select_repositories("Acme", &["a000"]);
    assert_eq!(
        w.github.installation_covers(&token, "Acme", "Plans").await,
        Ok(false)
    );
    w.fake.uninstall_app("Acme");
    assert_eq!(
        w.github.installation_covers(&token, "Acme", "Plans").await,
        Ok(false)
    );
    let asked = w.fake.requests().len();
    assert_eq!(
        w.github.installation_covers(&token, "Acme", "a/b").await,
        Ok(false)
    );
    assert_eq!(w.fake.requests().len(), asked);

    // Cached 30 s per token and repository like the other answers; outages are not cached.
    w.fake.install_app("Acme");
    let admission = w.admission(&[], &[]);
    assert_eq!(
        admission
            .installation_covers_cached(&token, "Acme", "Plans")
            .await,
        Ok(true)
    );
    let asked = w.fake.request_count("/user/installations");
    w.fake.uninstall_app("Acme");
    assert_eq!(
        admission
            .installation_covers_cached(&token, "acme", "plans")
            .await,
        Ok(true)
    );
    assert_eq!(w.fake.request_count("/user/installations"), asked);
    w.clock
        .advance(chopin_server::identity::admission::INSTALLATION_CACHE_TTL_MS);
    assert_eq!(
        admission
            .installation_covers_cached(&token, "Acme", "Plans")
            .await,
        Ok(false)
    );
    w.clock
        .advance(chopin_server::identity::admission::INSTALLATION_CACHE_TTL_MS);
    w.fake.set_outage(true);
    let down = admission
        .installation_covers_cached(&token, "Acme", "Plans")
        .await
        .unwrap_err();
    assert!(matches!(down, GitHubError::Unavailable(_)));
    assert_hides(&token, &down);
}

/// Single-flight: 100 attaches with one token at once, after nothing is cached, ask GitHub once
/// for the user and once for the repository; every one of them gets the answer. An outage is
/// shared the same way (one call, every caller told unavailable) and still not cached.
#[tokio::test]
async fn a_hundred_simultaneous_checks_of_one_token_make_one_call_of_each_kind() {
    let w = World::new().await;
    let token = w.user("mona", 1);
    w.fake.add_repo("octo", "plans");
    w.fake.grant("octo", "plans", "mona", Permission::Write);
    let admission = Arc::new(w.admission(&[], &[]));
    let attach = |admission: Arc<Admission>, token: String| async move {
        let admitted = admission.check(&token).await?;
        let access = admission
            .repo_access_cached(&token, "octo", "plans")
            .await
            .map_err(|_| AdmissionError::Unavailable)?;
        Ok::<_, AdmissionError>((admitted.user.login, access.map(|a| a.can_write())))
    };
    let attaches: Vec<_> = (0..100)
        .map(|_| tokio::spawn(attach(admission.clone(), token.clone())))
        .collect();
    for attached in attaches {
        assert_eq!(attached.await.unwrap(), Ok(("mona".to_owned(), Some(true))));
    }
    assert_eq!(user_lookups(&w.fake), 1, "{:?}", w.fake.requests());
    assert_eq!(
        w.fake.request_count("/repos/"),
        1,
        "{:?}",
        w.fake.requests()
    );

    // After the caches expire, 100 at once during an outage: one call, all unavailable.
    w.clock
        .advance(ADMISSION_CACHE_TTL_MS.max(REPO_ACCESS_CACHE_TTL_MS));
    w.fake.set_outage(true);
    let checks: Vec<_> = (0..100)
        .map(|_| {
            let (admission, token) = (admission.clone(), token.clone());
            tokio::spawn(async move { admission.check(&token).await })
        })
        .collect();
    for check in checks {
        assert_eq!(check.await.unwrap(), Err(AdmissionError::Unavailable));
    }
    assert_eq!(user_lookups(&w.fake), 2, "{:?}", w.fake.requests());
    w.fake.set_outage(false);
    assert!(
        admission.check(&token).await.is_ok(),
        "an outage is not cached"
    );
    assert_eq!(user_lookups(&w.fake), 3);
}

/// The start page's listing: every repository the App reaches for the account, across
/// installations and pages, each once; cut at `REPOSITORIES_MAX` with `more`; nothing for
/// someone the App reaches nowhere.
#[tokio::test]
async fn the_repositories_an_account_reaches_through_the_app_are_listed_page_by_page_and_bounded() {
    use chopin_server::identity::github::REPOSITORIES_MAX;
    let w = World::new().await;
    let token = w.user("mona", 1);
    let other = w.user("hubot", 2);
    w.fake.add_repo("Acme", "Plans").add_repo("Zeta", "Notes");
    w.fake.grant("Acme", "Plans", "mona", Permission::Write);
    w.fake.grant("Zeta", "Notes", "mona", Permission::Read);
    w.fake.uninstall_app("Acme").uninstall_app("Zeta");
    let listed = w.github.repositories(&token).await.unwrap();
    assert!(
        listed.names.is_empty(),
        "not installed anywhere: {listed:?}"
    );
    w.fake.install_app("Acme").install_app("Zeta");
    let names: Vec<String> = (0..120).map(|i| format!("a{i:03}")).collect();
    for name in &names {
        w.fake.add_repo("Acme", name);
        w.fake.grant("Acme", name, "mona", Permission::Read);
    }
    let listed = w.github.repositories(&token).await.unwrap();
    assert_eq!(listed.names.len(), 122, "{listed:?}");
    assert!(!listed.more);
    assert!(listed.names.contains(&"Acme/Plans".to_owned()));
    assert!(listed.names.contains(&"Zeta/Notes".to_owned()));
    assert!(listed.names.contains(&"Acme/a119".to_owned()));
    assert_eq!(
        w.github.repositories(&other).await.unwrap().names,
        Vec::<String>::new()
    );
    // Past the bound: cut, and said so.
    for i in 0..REPOSITORIES_MAX {
        let name = format!("z{i:03}");
        w.fake.add_repo("Zeta", &name);
        w.fake.grant("Zeta", &name, "mona", Permission::Read);
    }
    let listed = w.github.repositories(&token).await.unwrap();
    assert_eq!(listed.names.len(), REPOSITORIES_MAX);
    assert!(listed.more);
}
