//! The storage conformance suite: every rule of [`Store`], written once and run on each backend —
//! in memory, SQLite and PostgreSQL — so the test names say which one failed
//! (`sqlite::ownership_race_exactly_one_wins`).
//!
//! Owns: the behaviour every backend must share — the generation-guarded ownership claim and
//! release, revisions that only grow, transcript order and paging, the writer lease and its
//! epochs, slugs unique per repository (owner and repository compared without ASCII case),
//! browser-login sign-out, browser-login credentials (revision-guarded writes, deletion that no
//! older write can undo, startup cleanup of dead logins), `NotFound` for unknown documents, and
//! data surviving a reopen. Races
//! run on a two-worker runtime with a barrier, so claimers really overlap.
//! Does not own: policy (who may claim) or the server around the store.
//!
//! PostgreSQL comes from `CHOPIN_TEST_POSTGRES_URL` (exported by `scripts/test`), else from a
//! throwaway cluster this process starts (`chopin_fixtures::pg`); each test gets a fresh database.
//! No PostgreSQL means the PostgreSQL tests fail, never skip.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use chopin_server::store::{
    account_id_for_github_user, Account, Advance, BrowserLogin, Claim, Holder, LeaseAcquire,
    MemoryStore, NewDocument, NewTranscriptEntry, PgStore, Release, RevisionKind, SqliteStore,
    Store, StoreError, WriterLease,
};
use tokio::sync::Barrier;
use uuid::Uuid;

/// How many tasks contend in each race.
const RACERS: usize = 16;

// --- the backends ----------------------------------------------------------------------------

/// One backend's database, which a test may open (and reopen) any number of times.
enum Backend {
    /// The original handle; each open is a clone sharing its state, as in the simulator.
    Memory(MemoryStore),
    /// A file in a nested folder that does not exist yet (open must create it).
    Sqlite {
        path: PathBuf,
        _dir: tempfile::TempDir,
    },
    /// A fresh database in the test PostgreSQL server.
    Postgres { url: String },
}

impl Backend {
    fn memory() -> Self {
        Backend::Memory(MemoryStore::new())
    }

    fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("not").join("yet").join("chopin.db");
        Backend::Sqlite { path, _dir: dir }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres { .. } => "postgres",
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = match self {
            Backend::Memory(original) => Arc::new(original.clone()),
            Backend::Sqlite { path, .. } => Arc::new(
                SqliteStore::open(path)
                    .await
                    .unwrap_or_else(|e| panic!("opening SQLite: {e}")),
            ),
            Backend::Postgres { url } => Arc::new(
                PgStore::connect(url)
                    .await
                    .unwrap_or_else(|e| panic!("connecting to PostgreSQL: {e}")),
            ),
        };
        assert_eq!(store.backend(), self.name());
        store.ping().await.expect("ping");
        store
    }
}

/// Instantiates each test once per backend, in modules named after the backend.
macro_rules! conformance {
    ($($name:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::Backend::memory()).await;
                }
            )+
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::Backend::sqlite()).await;
                }
            )+
        }

        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = chopin_fixtures::pg::shared_postgres();
                    let db = server
                        .create_database()
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    super::$name(&super::Backend::Postgres { url: db.url.clone() }).await;
                    server
                        .drop_database(&db)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            )+
        }
    };
}

conformance! {
    answers_ping_and_names_itself,
    accounts_upsert_updates_login_and_keeps_id,
    account_upsert_race_yields_one_account,
    browser_login_sign_out_happens_once,
    browser_login_for_unknown_account_is_not_found,
    login_credential_cas_refuses_stale_and_revision_grows,
    login_credential_race_exactly_one_wins,
    login_credential_deletion_refuses_older_revisions,
    login_credential_is_refused_for_signed_out_login,
    delete_expired_logins_keeps_live_logins,
    login_credential_survives_reopening_the_store,
    duplicate_slug_in_same_repo_conflicts,
    document_by_slug_ignores_owner_and_repo_case,
    archived_flag_round_trips,
    unknown_document_is_not_found,
    ownership_race_exactly_one_wins,
    same_account_reclaim_keeps_generation,
    stale_release_is_refused_and_keeps_newer_holder,
    clear_all_ownership_clears_holders_and_keeps_generations,
    revisions_only_grow,
    revision_race_exactly_one_wins,
    transcript_keeps_append_order,
    transcript_concurrent_appends_are_gap_free,
    transcript_pages_by_after_seq_and_limit,
    writer_lease_is_exclusive_until_expiry,
    writer_lease_renewal_keeps_epoch,
    writer_lease_epoch_grows_across_release,
    writer_lease_race_exactly_one_wins,
    data_survives_reopening_the_store,
}

// --- helpers ---------------------------------------------------------------------------------

fn new_doc(n: u128, owner: &str, repo: &str, slug: &str) -> NewDocument {
    NewDocument {
        id: Uuid::from_u128(0xd0c0_0000_0000_0000_0000_0000_0000_0000 + n),
        repo_owner: owner.into(),
        repo_name: repo.into(),
        slug: slug.into(),
        title: format!("Document {slug}"),
        created_at_ms: 1_000 + n as i64,
    }
}

/// An account with one browser login, and the [`Holder`] it claims as.
async fn member(store: &Arc<dyn Store>, github_user_id: i64, login: &str) -> Holder {
    let account = store
        .upsert_account(github_user_id, login, 1_000)
        .await
        .expect("upsert account");
    let browser_login = BrowserLogin {
        id: Uuid::from_u128(0xb10b_0000_0000_0000_0000_0000_0000_0000 + github_user_id as u128),
        account_id: account.id,
        verifier_hash: format!("hash-of-{login}"),
        created_at_ms: 1_000,
        expires_at_ms: 1_000_000,
        signed_out_at_ms: None,
    };
    store
        .create_browser_login(&browser_login)
        .await
        .expect("create browser login");
    Holder {
        account_id: account.id,
        login: account.login,
        browser_login_id: browser_login.id,
    }
}

fn entry(author: Option<&str>, kind: &str, body: &str, at: i64) -> NewTranscriptEntry {
    NewTranscriptEntry {
        author_login: author.map(str::to_owned),
        kind: kind.into(),
        body: body.into(),
        created_at_ms: at,
    }
}

fn claimed(claim: Claim) -> chopin_server::store::Ownership {
    match claim {
        Claim::Claimed(own) => own,
        Claim::HeldByOther(own) => panic!("expected Claimed, got HeldByOther({own:?})"),
    }
}

fn held_by_other(claim: Claim) -> chopin_server::store::Ownership {
    match claim {
        Claim::HeldByOther(own) => own,
        Claim::Claimed(own) => panic!("expected HeldByOther, got Claimed({own:?})"),
    }
}

fn acquired(result: LeaseAcquire) -> WriterLease {
    match result {
        LeaseAcquire::Acquired(lease) => lease,
        LeaseAcquire::HeldElsewhere(lease) => panic!("expected Acquired, held by {lease:?}"),
    }
}

fn held_elsewhere(result: LeaseAcquire) -> WriterLease {
    match result {
        LeaseAcquire::HeldElsewhere(lease) => lease,
        LeaseAcquire::Acquired(lease) => panic!("expected HeldElsewhere, acquired {lease:?}"),
    }
}

fn is_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::NotFound(_)))
}

// --- accounts and browser logins -------------------------------------------------------------

async fn answers_ping_and_names_itself(b: &Backend) {
    // `open` asserts the backend's name and pings; a second open of the same database works too.
    let _first = b.open().await;
    let _second = b.open().await;
}

async fn accounts_upsert_updates_login_and_keeps_id(b: &Backend) {
    let store = b.open().await;
    let first = store.upsert_account(42, "Alice", 1_000).await.unwrap();
    assert_eq!(
        first,
        Account {
            id: account_id_for_github_user(42),
            github_user_id: 42,
            login: "Alice".into(),
            created_at_ms: 1_000,
        }
    );
    let renamed = store
        .upsert_account(42, "alice-renamed", 2_000)
        .await
        .unwrap();
    assert_eq!(renamed.id, first.id, "the account keeps its id");
    assert_eq!(renamed.login, "alice-renamed");
    assert_eq!(renamed.created_at_ms, 1_000, "creation time is kept");
    assert_eq!(
        store.account(first.id).await.unwrap(),
        Some(renamed.clone())
    );
    assert_eq!(
        store.account_by_login("ALICE-Renamed").await.unwrap(),
        Some(renamed),
        "logins compare without ASCII case"
    );
    assert_eq!(store.account_by_login("Alice").await.unwrap(), None);
    assert_eq!(store.account(Uuid::from_u128(7)).await.unwrap(), None);

    let other = store.upsert_account(43, "bob", 3_000).await.unwrap();
    assert_ne!(other.id, first.id);
}

async fn account_upsert_race_yields_one_account(b: &Backend) {
    let store = b.open().await;
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .upsert_account(7, &format!("login-{i}"), 1_000 + i as i64)
                .await
                .unwrap()
        }));
    }
    let mut ids = BTreeSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap().id);
    }
    assert_eq!(ids.len(), 1, "every upsert names the same account");
    let stored = store.account(account_id_for_github_user(7)).await.unwrap();
    assert!(stored.is_some_and(|a| a.login.starts_with("login-")));
}

async fn browser_login_sign_out_happens_once(b: &Backend) {
    let store = b.open().await;
    let account = store.upsert_account(1, "ada", 1_000).await.unwrap();
    let login = BrowserLogin {
        id: Uuid::from_u128(0xb1),
        account_id: account.id,
        verifier_hash: "h1".into(),
        created_at_ms: 1_000,
        expires_at_ms: 2_000,
        signed_out_at_ms: None,
    };
    store.create_browser_login(&login).await.unwrap();
    let stored = store.browser_login(login.id).await.unwrap().unwrap();
    assert_eq!(stored, login);
    assert!(stored.is_live(1_999));
    assert!(!stored.is_live(2_000), "a login is dead at its expiry");

    assert!(matches!(
        store.create_browser_login(&login).await,
        Err(StoreError::Conflict(_))
    ));

    assert!(store.sign_out_browser_login(login.id, 1_500).await.unwrap());
    let signed_out = store.browser_login(login.id).await.unwrap().unwrap();
    assert_eq!(signed_out.signed_out_at_ms, Some(1_500));
    assert!(!signed_out.is_live(1_600));
    assert!(
        !store.sign_out_browser_login(login.id, 1_700).await.unwrap(),
        "a second sign-out changes nothing"
    );
    assert_eq!(
        store
            .browser_login(login.id)
            .await
            .unwrap()
            .unwrap()
            .signed_out_at_ms,
        Some(1_500)
    );

    // An expired login can still be signed out; an unknown one cannot.
    let expired = BrowserLogin {
        id: Uuid::from_u128(0xb2),
        expires_at_ms: 1_100,
        ..login.clone()
    };
    store.create_browser_login(&expired).await.unwrap();
    assert!(store
        .sign_out_browser_login(expired.id, 5_000)
        .await
        .unwrap());
    assert!(!store
        .sign_out_browser_login(Uuid::from_u128(0xb3), 5_000)
        .await
        .unwrap());
    assert_eq!(
        store.browser_login(Uuid::from_u128(0xb3)).await.unwrap(),
        None
    );
}

async fn browser_login_for_unknown_account_is_not_found(b: &Backend) {
    let store = b.open().await;
    let login = BrowserLogin {
        id: Uuid::from_u128(0xb1),
        account_id: Uuid::from_u128(0xacc),
        verifier_hash: "h".into(),
        created_at_ms: 1_000,
        expires_at_ms: 2_000,
        signed_out_at_ms: None,
    };
    assert!(is_not_found(store.create_browser_login(&login).await));
    assert_eq!(store.browser_login(login.id).await.unwrap(), None);
}

// --- browser-login credentials ---------------------------------------------------------------

/// A browser login of a fresh account, created in the store.
async fn browser_login(
    store: &Arc<dyn Store>,
    n: u128,
    expires_at_ms: i64,
    signed_out_at_ms: Option<i64>,
) -> BrowserLogin {
    let account = store
        .upsert_account(100 + n as i64, &format!("user-{n}"), 1_000)
        .await
        .expect("upsert account");
    let login = BrowserLogin {
        id: Uuid::from_u128(0xc0de_0000_0000_0000_0000_0000_0000_0000 + n),
        account_id: account.id,
        verifier_hash: format!("verifier-hash-{n}"),
        created_at_ms: 1_000,
        expires_at_ms,
        signed_out_at_ms,
    };
    store
        .create_browser_login(&login)
        .await
        .expect("create browser login");
    login
}

async fn login_credential_cas_refuses_stale_and_revision_grows(b: &Backend) {
    let store = b.open().await;
    let login = browser_login(&store, 1, 1_000_000, None).await;
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        None,
        "a new login has no credential"
    );
    assert_eq!(
        store
            .set_login_credential(login.id, 1, b"v1")
            .await
            .unwrap(),
        None,
        "a new login is at revision 0"
    );
    assert_eq!(
        store
            .set_login_credential(login.id, 0, b"v1")
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        Some((1, b"v1".to_vec()))
    );
    assert_eq!(
        store
            .set_login_credential(login.id, 0, b"late")
            .await
            .unwrap(),
        None,
        "a write against an older revision is refused"
    );
    assert_eq!(
        store
            .set_login_credential(login.id, 2, b"ahead")
            .await
            .unwrap(),
        None,
        "a write against a revision not reached yet is refused"
    );
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        Some((1, b"v1".to_vec())),
        "refused writes change nothing"
    );
    let sealed = vec![0u8, 1, 0xff, 0, 7];
    assert_eq!(
        store
            .set_login_credential(login.id, 1, &sealed)
            .await
            .unwrap(),
        Some(2)
    );
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        Some((2, sealed)),
        "bytes round-trip exactly, NUL and high bytes included"
    );

    // Another login's credential is its own.
    let other = browser_login(&store, 2, 1_000_000, None).await;
    assert_eq!(store.login_credential(other.id).await.unwrap(), None);
    assert_eq!(
        store
            .set_login_credential(other.id, 0, b"o1")
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store.login_credential(login.id).await.unwrap().map(|c| c.0),
        Some(2)
    );

    let unknown = Uuid::from_u128(0xdead);
    assert!(matches!(
        store.set_login_credential(unknown, 0, b"x").await,
        Err(StoreError::NotFound("browser login"))
    ));
    assert_eq!(store.login_credential(unknown).await.unwrap(), None);
}

async fn login_credential_race_exactly_one_wins(b: &Backend) {
    let store = b.open().await;
    let login = browser_login(&store, 1, 1_000_000, None).await;
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let sealed = format!("writer-{i}").into_bytes();
            let written = store
                .set_login_credential(login.id, 0, &sealed)
                .await
                .unwrap();
            (written, sealed)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (written, sealed) = task.await.unwrap();
        if let Some(revision) = written {
            winners.push((revision, sealed));
        }
    }
    assert_eq!(winners.len(), 1, "exactly one writer at revision 0 wins");
    assert_eq!(winners[0].0, 1);
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        Some(winners[0].clone()),
        "the stored bytes are the winner's"
    );
}

async fn login_credential_deletion_refuses_older_revisions(b: &Backend) {
    let store = b.open().await;
    let login = browser_login(&store, 1, 1_000_000, None).await;
    assert_eq!(
        store
            .set_login_credential(login.id, 0, b"v1")
            .await
            .unwrap(),
        Some(1)
    );
    assert!(store.delete_login_credential(login.id).await.unwrap());
    assert_eq!(store.login_credential(login.id).await.unwrap(), None);
    assert_eq!(
        store
            .set_login_credential(login.id, 1, b"refreshed")
            .await
            .unwrap(),
        None,
        "a refresh that read revision 1 cannot recreate the deleted credential"
    );
    assert_eq!(
        store
            .set_login_credential(login.id, 0, b"again")
            .await
            .unwrap(),
        None,
        "nor can a write from revision 0"
    );
    assert_eq!(store.login_credential(login.id).await.unwrap(), None);
    assert!(
        !store.delete_login_credential(login.id).await.unwrap(),
        "nothing left to delete"
    );
    assert_eq!(
        store.browser_login(login.id).await.unwrap(),
        Some(login),
        "deleting the credential keeps the login"
    );

    // A login never given a credential: deletion reports nothing deleted, and still bars a
    // first write that raced it.
    let fresh = browser_login(&store, 2, 1_000_000, None).await;
    assert!(!store.delete_login_credential(fresh.id).await.unwrap());
    assert_eq!(
        store
            .set_login_credential(fresh.id, 0, b"first")
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.login_credential(fresh.id).await.unwrap(), None);

    assert!(!store
        .delete_login_credential(Uuid::from_u128(0xdead))
        .await
        .unwrap());
}

async fn login_credential_is_refused_for_signed_out_login(b: &Backend) {
    let store = b.open().await;
    let login = browser_login(&store, 1, 1_000_000, None).await;
    assert_eq!(
        store
            .set_login_credential(login.id, 0, b"v1")
            .await
            .unwrap(),
        Some(1)
    );
    assert!(store.sign_out_browser_login(login.id, 2_000).await.unwrap());
    assert_eq!(
        store
            .set_login_credential(login.id, 1, b"v2")
            .await
            .unwrap(),
        None,
        "a signed-out login takes no new credential, even at the current revision"
    );
    assert_eq!(
        store.login_credential(login.id).await.unwrap(),
        Some((1, b"v1".to_vec())),
        "signing out alone does not delete the credential"
    );
    assert!(store.delete_login_credential(login.id).await.unwrap());
    assert_eq!(store.login_credential(login.id).await.unwrap(), None);
}

async fn delete_expired_logins_keeps_live_logins(b: &Backend) {
    let store = b.open().await;
    let now = 50_000;
    let live = browser_login(&store, 1, now + 1, None).await;
    let live_bare = browser_login(&store, 2, now + 10_000, None).await;
    let at_expiry = browser_login(&store, 3, now, None).await;
    let expired = browser_login(&store, 4, now - 1, None).await;
    let signed_out = browser_login(&store, 5, now + 10_000, None).await;
    for login in [&live, &at_expiry, &expired, &signed_out] {
        assert_eq!(
            store
                .set_login_credential(login.id, 0, b"sealed")
                .await
                .unwrap(),
            Some(1)
        );
    }
    assert!(store
        .sign_out_browser_login(signed_out.id, now - 5)
        .await
        .unwrap());
    // A Planner claim through a login that is about to be deleted does not hold it back.
    let doc = store
        .create_document(&new_doc(1, "Owner", "Repo", "doc"))
        .await
        .unwrap();
    let account = store.account(expired.account_id).await.unwrap().unwrap();
    claimed(
        store
            .claim_ownership(
                doc.id,
                &Holder {
                    account_id: account.id,
                    login: account.login,
                    browser_login_id: expired.id,
                },
                now - 10,
            )
            .await
            .unwrap(),
    );

    assert_eq!(store.delete_expired_logins(now).await.unwrap(), 3);
    for dead in [&at_expiry, &expired, &signed_out] {
        assert_eq!(store.browser_login(dead.id).await.unwrap(), None);
        assert_eq!(store.login_credential(dead.id).await.unwrap(), None);
        assert!(matches!(
            store.set_login_credential(dead.id, 1, b"late").await,
            Err(StoreError::NotFound("browser login"))
        ));
    }
    assert_eq!(
        store.browser_login(live.id).await.unwrap(),
        Some(live.clone())
    );
    assert_eq!(
        store.login_credential(live.id).await.unwrap(),
        Some((1, b"sealed".to_vec()))
    );
    assert_eq!(
        store.browser_login(live_bare.id).await.unwrap(),
        Some(live_bare.clone())
    );
    assert!(
        store.account(expired.account_id).await.unwrap().is_some(),
        "accounts are kept"
    );
    assert_eq!(
        store.delete_expired_logins(now).await.unwrap(),
        0,
        "nothing more to delete at the same time"
    );
    assert_eq!(
        store
            .set_login_credential(live.id, 1, b"next")
            .await
            .unwrap(),
        Some(2),
        "a kept login's credential carries on"
    );
    assert_eq!(store.delete_expired_logins(now + 1).await.unwrap(), 1);
    assert_eq!(store.login_credential(live.id).await.unwrap(), None);
    assert!(store.browser_login(live_bare.id).await.unwrap().is_some());
}

async fn login_credential_survives_reopening_the_store(b: &Backend) {
    let store = b.open().await;
    let kept = browser_login(&store, 1, 1_000_000, None).await;
    let deleted = browser_login(&store, 2, 1_000_000, None).await;
    for rev in 0..3 {
        store
            .set_login_credential(kept.id, rev, format!("v{rev}").as_bytes())
            .await
            .unwrap()
            .expect("current revision");
    }
    store
        .set_login_credential(deleted.id, 0, b"gone")
        .await
        .unwrap()
        .expect("current revision");
    assert!(store.delete_login_credential(deleted.id).await.unwrap());
    drop(store);

    let reopened = b.open().await;
    assert_eq!(
        reopened.login_credential(kept.id).await.unwrap(),
        Some((3, b"v2".to_vec()))
    );
    assert_eq!(reopened.login_credential(deleted.id).await.unwrap(), None);
    assert_eq!(
        reopened
            .set_login_credential(deleted.id, 1, b"resurrect")
            .await
            .unwrap(),
        None,
        "the deletion's revision is durable too"
    );
    assert_eq!(
        reopened
            .set_login_credential(kept.id, 3, b"v3")
            .await
            .unwrap(),
        Some(4)
    );
}

// --- documents -------------------------------------------------------------------------------

async fn duplicate_slug_in_same_repo_conflicts(b: &Backend) {
    let store = b.open().await;
    let first = store
        .create_document(&new_doc(1, "Octo", "Repo", "plan"))
        .await
        .unwrap();
    assert_eq!(first.plan_revision, 0);
    assert_eq!(first.storage_revision, 0);
    assert!(!first.archived);

    let clash = new_doc(2, "octo", "REPO", "plan");
    assert!(
        matches!(
            store.create_document(&clash).await,
            Err(StoreError::Conflict(_))
        ),
        "owner and repository compare without case"
    );
    assert_eq!(store.document(clash.id).await.unwrap(), None);
    assert!(
        is_not_found(store.ownership(clash.id).await),
        "a refused document leaves no ownership row"
    );

    // A reused id is a conflict too, whatever the slug.
    assert!(matches!(
        store
            .create_document(&new_doc(1, "Octo", "Repo", "other"))
            .await,
        Err(StoreError::Conflict(_))
    ));

    // The same slug elsewhere is fine.
    store
        .create_document(&new_doc(3, "Octo", "Other", "plan"))
        .await
        .unwrap();
    store
        .create_document(&new_doc(4, "Someone", "Repo", "plan"))
        .await
        .unwrap();
    assert_eq!(store.document(first.id).await.unwrap(), Some(first));
}

async fn document_by_slug_ignores_owner_and_repo_case(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "Octo-Org", "Big.Repo", "roadmap"))
        .await
        .unwrap();
    for (owner, repo) in [
        ("Octo-Org", "Big.Repo"),
        ("octo-org", "big.repo"),
        ("OCTO-ORG", "BIG.REPO"),
    ] {
        assert_eq!(
            store
                .document_by_slug(owner, repo, "roadmap")
                .await
                .unwrap(),
            Some(doc.clone()),
            "{owner}/{repo}"
        );
    }
    let found = store
        .document_by_slug("octo-org", "big.repo", "roadmap")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.repo_owner.as_str(), found.repo_name.as_str()),
        ("Octo-Org", "Big.Repo"),
        "the spelling given at creation is kept"
    );
    assert_eq!(
        store
            .document_by_slug("octo-org", "big.repo", "missing")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .document_by_slug("octo-org", "other", "roadmap")
            .await
            .unwrap(),
        None
    );
}

async fn archived_flag_round_trips(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    store.set_archived(doc.id, true).await.unwrap();
    assert!(store.document(doc.id).await.unwrap().unwrap().archived);
    store.set_archived(doc.id, false).await.unwrap();
    assert!(!store.document(doc.id).await.unwrap().unwrap().archived);
}

async fn unknown_document_is_not_found(b: &Backend) {
    let store = b.open().await;
    // One real document, so "unknown" is not just "empty database".
    store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let unknown = Uuid::from_u128(0xdead);
    let someone = member(&store, 5, "eve").await;

    assert_eq!(store.document(unknown).await.unwrap(), None);
    assert!(is_not_found(store.set_archived(unknown, true).await));
    for kind in [RevisionKind::Plan, RevisionKind::Storage] {
        assert!(is_not_found(store.advance_revision(unknown, kind, 0).await));
    }
    assert!(is_not_found(
        store
            .append_transcript(unknown, &entry(None, "system", "x", 1))
            .await
    ));
    assert_eq!(store.transcript(unknown, 0, 10).await.unwrap(), vec![]);
    assert!(is_not_found(store.ownership(unknown).await));
    assert!(is_not_found(
        store.claim_ownership(unknown, &someone, 1).await
    ));
    assert!(is_not_found(store.release_ownership(unknown, 0).await));
}

// --- Planner ownership -----------------------------------------------------------------------

async fn ownership_race_exactly_one_wins(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let start = store.ownership(doc.id).await.unwrap();
    assert_eq!((start.generation, start.holder), (0, None));

    let mut holders = Vec::new();
    for i in 0..RACERS {
        holders.push(member(&store, 100 + i as i64, &format!("racer{i}")).await);
    }
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for holder in holders {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let claim = store.claim_ownership(doc.id, &holder, 5_000).await.unwrap();
            (holder, claim)
        }));
    }
    let mut winners = Vec::new();
    let mut refusals = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (holder, Claim::Claimed(own)) => winners.push((holder, own)),
            (_, Claim::HeldByOther(own)) => refusals.push(own),
        }
    }
    let winner_logins: Vec<_> = winners.iter().map(|(h, _)| h.login.as_str()).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one claimer wins, not {winner_logins:?}"
    );
    assert_eq!(refusals.len(), RACERS - 1);
    let (winner, won) = winners.remove(0);
    assert_eq!(won.generation, 1, "the generation advanced by exactly one");
    assert_eq!(won.holder.as_ref(), Some(&winner));
    assert_eq!(won.claimed_at_ms, Some(5_000));
    for refused in refusals {
        assert_eq!(
            refused.holder.as_ref(),
            Some(&winner),
            "refusals name the winner"
        );
        assert_eq!(refused.generation, 1);
    }
    assert_eq!(store.ownership(doc.id).await.unwrap(), won);
}

async fn same_account_reclaim_keeps_generation(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let alice = member(&store, 1, "alice").await;
    let bob = member(&store, 2, "bob").await;

    let first = claimed(store.claim_ownership(doc.id, &alice, 100).await.unwrap());
    assert_eq!(first.generation, 1);

    // The same account through another browser login: a reattach, same generation.
    let other_tab = BrowserLogin {
        id: Uuid::from_u128(0xa11ce),
        account_id: alice.account_id,
        verifier_hash: "h".into(),
        created_at_ms: 150,
        expires_at_ms: 1_000_000,
        signed_out_at_ms: None,
    };
    store.create_browser_login(&other_tab).await.unwrap();
    let alice_elsewhere = Holder {
        browser_login_id: other_tab.id,
        ..alice.clone()
    };
    let again = claimed(
        store
            .claim_ownership(doc.id, &alice_elsewhere, 200)
            .await
            .unwrap(),
    );
    assert_eq!(again.generation, 1);
    assert_eq!(again.holder, Some(alice_elsewhere.clone()));
    assert_eq!(again.claimed_at_ms, Some(200));
    assert_eq!(store.ownership(doc.id).await.unwrap(), again);

    let refused = held_by_other(store.claim_ownership(doc.id, &bob, 300).await.unwrap());
    assert_eq!(refused, again, "a refused claim changes nothing");

    assert_eq!(
        store.release_ownership(doc.id, 1).await.unwrap(),
        Release::Released
    );
    let free = store.ownership(doc.id).await.unwrap();
    assert_eq!(
        (free.generation, free.holder, free.claimed_at_ms),
        (1, None, None),
        "a release keeps the generation"
    );

    let bobs = claimed(store.claim_ownership(doc.id, &bob, 400).await.unwrap());
    assert_eq!(
        bobs.generation, 2,
        "a different account advances the generation"
    );
    assert_eq!(bobs.holder, Some(bob));
}

async fn stale_release_is_refused_and_keeps_newer_holder(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let a = member(&store, 1, "a").await;
    let bob = member(&store, 2, "b").await;

    assert_eq!(
        store.release_ownership(doc.id, 0).await.unwrap(),
        Release::Refused {
            current_generation: 0
        },
        "nobody holds a new document"
    );
    assert_eq!(
        claimed(store.claim_ownership(doc.id, &a, 1).await.unwrap()).generation,
        1
    );
    assert_eq!(
        store.release_ownership(doc.id, 1).await.unwrap(),
        Release::Released
    );
    assert_eq!(
        store.release_ownership(doc.id, 1).await.unwrap(),
        Release::Refused {
            current_generation: 1
        },
        "releasing a free document is refused"
    );
    let bobs = claimed(store.claim_ownership(doc.id, &bob, 2).await.unwrap());
    assert_eq!(bobs.generation, 2);

    // An old timer for generation 1 fires late: it must not release Bob.
    assert_eq!(
        store.release_ownership(doc.id, 1).await.unwrap(),
        Release::Refused {
            current_generation: 2
        }
    );
    assert_eq!(
        store.release_ownership(doc.id, 3).await.unwrap(),
        Release::Refused {
            current_generation: 2
        }
    );
    assert_eq!(store.ownership(doc.id).await.unwrap(), bobs);
}

async fn clear_all_ownership_clears_holders_and_keeps_generations(b: &Backend) {
    let store = b.open().await;
    let a = member(&store, 1, "a").await;
    let mut docs = Vec::new();
    for n in 1..=3 {
        docs.push(
            store
                .create_document(&new_doc(n, "o", "r", &format!("s{n}")))
                .await
                .unwrap(),
        );
    }
    claimed(store.claim_ownership(docs[0].id, &a, 1).await.unwrap());
    claimed(store.claim_ownership(docs[1].id, &a, 1).await.unwrap());
    assert_eq!(
        store.release_ownership(docs[1].id, 1).await.unwrap(),
        Release::Released
    );
    claimed(store.claim_ownership(docs[1].id, &a, 2).await.unwrap());

    assert_eq!(store.clear_all_ownership().await.unwrap(), 2);
    let generations: Vec<_> = {
        let mut g = Vec::new();
        for doc in &docs {
            let own = store.ownership(doc.id).await.unwrap();
            assert_eq!((own.holder, own.claimed_at_ms), (None, None));
            g.push(own.generation);
        }
        g
    };
    assert_eq!(generations, vec![1, 2, 0]);
    assert_eq!(store.clear_all_ownership().await.unwrap(), 0);

    // After a clear, even the previous holder's claim is a new generation.
    let again = claimed(store.claim_ownership(docs[0].id, &a, 3).await.unwrap());
    assert_eq!(again.generation, 2);
}

// --- revisions -------------------------------------------------------------------------------

async fn revisions_only_grow(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for (kind, other) in [
        (RevisionKind::Plan, RevisionKind::Storage),
        (RevisionKind::Storage, RevisionKind::Plan),
    ] {
        let doc = store
            .create_document(&new_doc(
                if kind == RevisionKind::Plan { 2 } else { 3 },
                "o",
                "r",
                &format!("{kind:?}"),
            ))
            .await
            .unwrap();
        let adv = |expected| {
            let store = store.clone();
            async move {
                store
                    .advance_revision(doc.id, kind, expected)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(adv(0).await, Advance::Advanced(1));
        assert_eq!(adv(1).await, Advance::Advanced(2));
        assert_eq!(
            adv(1).await,
            Advance::Stale { current: 2 },
            "stale read refused"
        );
        assert_eq!(adv(0).await, Advance::Stale { current: 2 });
        assert_eq!(
            adv(7).await,
            Advance::Stale { current: 2 },
            "no jumping ahead"
        );
        assert_eq!(adv(2).await, Advance::Advanced(3));

        let stored = store.document(doc.id).await.unwrap().unwrap();
        let (this, that) = match kind {
            RevisionKind::Plan => (stored.plan_revision, stored.storage_revision),
            RevisionKind::Storage => (stored.storage_revision, stored.plan_revision),
        };
        assert_eq!(this, 3);
        assert_eq!(that, 0, "{other:?} is untouched");
    }
    // The first document was never advanced.
    let untouched = store.document(doc.id).await.unwrap().unwrap();
    assert_eq!(
        (untouched.plan_revision, untouched.storage_revision),
        (0, 0)
    );
}

async fn revision_race_exactly_one_wins(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for kind in [RevisionKind::Plan, RevisionKind::Storage] {
        for expected in 0..3 {
            let barrier = Arc::new(Barrier::new(RACERS));
            let mut tasks = Vec::new();
            for _ in 0..RACERS {
                let (store, barrier) = (store.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .advance_revision(doc.id, kind, expected)
                        .await
                        .unwrap()
                }));
            }
            let mut advanced = 0;
            for task in tasks {
                match task.await.unwrap() {
                    Advance::Advanced(rev) => {
                        assert_eq!(rev, expected + 1);
                        advanced += 1;
                    }
                    Advance::Stale { current } => assert_eq!(current, expected + 1),
                }
            }
            assert_eq!(
                advanced, 1,
                "{kind:?} from {expected}: exactly one advance wins"
            );
        }
    }
    let stored = store.document(doc.id).await.unwrap().unwrap();
    assert_eq!((stored.plan_revision, stored.storage_revision), (3, 3));
}

// --- Chat transcript -------------------------------------------------------------------------

async fn transcript_keeps_append_order(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let other = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    let mut appended = Vec::new();
    for i in 0..10i64 {
        let (author, kind) = match i % 3 {
            0 => (Some("alice"), "member"),
            1 => (None, "planner"),
            _ => (None, "system"),
        };
        let stored = store
            .append_transcript(
                doc.id,
                &entry(author, kind, &format!("message {i}"), 100 + i),
            )
            .await
            .unwrap();
        assert_eq!(stored.seq, i + 1);
        assert_eq!(stored.document_id, doc.id);
        appended.push(stored);
    }
    assert_eq!(store.transcript(doc.id, 0, 100).await.unwrap(), appended);

    // Each document counts on its own.
    let first_elsewhere = store
        .append_transcript(other.id, &entry(Some("bob"), "member", "hi", 500))
        .await
        .unwrap();
    assert_eq!(first_elsewhere.seq, 1);
    assert_eq!(
        store.transcript(other.id, 0, 100).await.unwrap(),
        vec![first_elsewhere]
    );
    assert_eq!(store.transcript(doc.id, 0, 100).await.unwrap().len(), 10);
}

async fn transcript_concurrent_appends_are_gap_free(b: &Backend) {
    const PER_TASK: usize = 4;
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for t in 0..RACERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut seqs = Vec::new();
            for j in 0..PER_TASK {
                let stored = store
                    .append_transcript(doc.id, &entry(None, "member", &format!("{t}-{j}"), 1))
                    .await
                    .unwrap();
                seqs.push(stored.seq);
            }
            seqs
        }));
    }
    let mut all_seqs = BTreeSet::new();
    for task in tasks {
        let seqs = task.await.unwrap();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "one task's appends keep its order"
        );
        all_seqs.extend(seqs);
    }
    let total = (RACERS * PER_TASK) as i64;
    assert_eq!(
        all_seqs,
        (1..=total).collect::<BTreeSet<_>>(),
        "distinct, gap-free seqs"
    );
    let read = store.transcript(doc.id, 0, 1_000).await.unwrap();
    assert_eq!(
        read.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>()
    );
    let bodies: BTreeSet<_> = read.iter().map(|e| e.body.clone()).collect();
    assert_eq!(bodies.len(), RACERS * PER_TASK, "no entry lost or doubled");
}

async fn transcript_pages_by_after_seq_and_limit(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for i in 0..25 {
        store
            .append_transcript(doc.id, &entry(Some("a"), "member", &format!("m{i}"), i))
            .await
            .unwrap();
    }
    let seqs = |page: Vec<chopin_server::store::TranscriptEntry>| {
        page.into_iter().map(|e| e.seq).collect::<Vec<_>>()
    };
    assert_eq!(
        seqs(store.transcript(doc.id, 0, 10).await.unwrap()),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(store.transcript(doc.id, 10, 10).await.unwrap()),
        (11..=20).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(store.transcript(doc.id, 20, 10).await.unwrap()),
        (21..=25).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(store.transcript(doc.id, 25, 10).await.unwrap()),
        Vec::<i64>::new()
    );
    assert_eq!(
        seqs(store.transcript(doc.id, 3, 0).await.unwrap()),
        Vec::<i64>::new()
    );
    assert_eq!(seqs(store.transcript(doc.id, 7, 1).await.unwrap()), vec![8]);
    assert_eq!(
        seqs(store.transcript(doc.id, -5, 2).await.unwrap()),
        vec![1, 2]
    );
    assert_eq!(
        store.transcript(doc.id, 11, 1).await.unwrap()[0].body,
        "m11"
    );
    // Walking every page by the last seq seen reads each entry once, in order.
    let mut walked = Vec::new();
    let mut after = 0;
    loop {
        let page = store.transcript(doc.id, after, 4).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        walked.extend(seqs(page));
    }
    assert_eq!(walked, (1..=25).collect::<Vec<_>>());
}

// --- writer lease ----------------------------------------------------------------------------

async fn writer_lease_is_exclusive_until_expiry(b: &Backend) {
    let store = b.open().await;
    let a = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    assert_eq!((a.holder.as_str(), a.expires_at_ms), ("host-a", 1_500));

    let refused = held_elsewhere(
        store
            .acquire_writer_lease("host-b", 1_499, 500)
            .await
            .unwrap(),
    );
    assert_eq!(refused, a, "refusal names the holder");

    let b_lease = acquired(
        store
            .acquire_writer_lease("host-b", 1_500, 500)
            .await
            .unwrap(),
    );
    assert!(b_lease.epoch > a.epoch, "a takeover has a larger epoch");
    assert_eq!(b_lease.expires_at_ms, 2_000);

    assert_eq!(
        store.renew_writer_lease(&a, 1_600, 500).await.unwrap(),
        None,
        "the fenced-out holder cannot renew"
    );
    store.release_writer_lease(&a).await.unwrap();
    assert_eq!(
        held_elsewhere(
            store
                .acquire_writer_lease("host-a", 1_600, 500)
                .await
                .unwrap()
        ),
        b_lease,
        "a stale release does not free the new holder's lease"
    );
}

async fn writer_lease_renewal_keeps_epoch(b: &Backend) {
    let store = b.open().await;
    let first = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    let again = acquired(
        store
            .acquire_writer_lease("host-a", 1_200, 500)
            .await
            .unwrap(),
    );
    assert_eq!(
        again.epoch, first.epoch,
        "re-acquiring one's unexpired lease keeps the epoch"
    );
    assert_eq!(again.expires_at_ms, 1_700);

    let renewed = store
        .renew_writer_lease(&again, 1_400, 500)
        .await
        .unwrap()
        .expect("renewal by the holder");
    assert_eq!(
        renewed,
        WriterLease {
            holder: "host-a".into(),
            epoch: first.epoch,
            expires_at_ms: 1_900,
        }
    );

    // After its own lease expired, the same holder starts a new epoch.
    let later = acquired(
        store
            .acquire_writer_lease("host-a", 1_900, 500)
            .await
            .unwrap(),
    );
    assert_eq!(later.epoch, first.epoch + 1);
    assert_eq!(
        store
            .renew_writer_lease(&renewed, 2_000, 500)
            .await
            .unwrap(),
        None,
        "a lease of an older epoch cannot be renewed"
    );
}

async fn writer_lease_epoch_grows_across_release(b: &Backend) {
    let store = b.open().await;
    let first = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 10_000)
            .await
            .unwrap(),
    );
    store.release_writer_lease(&first).await.unwrap();
    assert_eq!(
        store
            .renew_writer_lease(&first, 1_100, 10_000)
            .await
            .unwrap(),
        None,
        "a released lease cannot be renewed"
    );
    let second = acquired(
        store
            .acquire_writer_lease("host-b", 1_200, 10_000)
            .await
            .unwrap(),
    );
    assert!(
        second.epoch > first.epoch,
        "release then acquire grows the epoch"
    );
    store.release_writer_lease(&second).await.unwrap();
    let third = acquired(
        store
            .acquire_writer_lease("host-a", 1_300, 10_000)
            .await
            .unwrap(),
    );
    assert!(third.epoch > second.epoch);
    assert_eq!(third.expires_at_ms, 11_300);
}

async fn writer_lease_race_exactly_one_wins(b: &Backend) {
    let store = b.open().await;
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .acquire_writer_lease(&format!("host-{i}"), 1_000, 500)
                .await
                .unwrap()
        }));
    }
    let mut winners = Vec::new();
    let mut refusals = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            LeaseAcquire::Acquired(lease) => winners.push(lease),
            LeaseAcquire::HeldElsewhere(lease) => refusals.push(lease),
        }
    }
    let winner_hosts: Vec<_> = winners.iter().map(|l| l.holder.as_str()).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one host acquires, not {winner_hosts:?}"
    );
    assert_eq!(winners[0].epoch, 1);
    assert!(
        refusals.iter().all(|r| *r == winners[0]),
        "refusals name the winner"
    );
}

// --- durability ------------------------------------------------------------------------------

async fn data_survives_reopening_the_store(b: &Backend) {
    let store = b.open().await;
    let account = store.upsert_account(9, "Durable", 1_000).await.unwrap();
    let live = BrowserLogin {
        id: Uuid::from_u128(0xb1),
        account_id: account.id,
        verifier_hash: "hash-live".into(),
        created_at_ms: 1_000,
        expires_at_ms: 9_000,
        signed_out_at_ms: None,
    };
    let gone = BrowserLogin {
        id: Uuid::from_u128(0xb2),
        verifier_hash: "hash-gone".into(),
        ..live.clone()
    };
    store.create_browser_login(&live).await.unwrap();
    store.create_browser_login(&gone).await.unwrap();
    assert!(store.sign_out_browser_login(gone.id, 2_000).await.unwrap());
    let doc = store
        .create_document(&new_doc(1, "Owner", "Repo", "kept"))
        .await
        .unwrap();
    let archived = store
        .create_document(&new_doc(2, "Owner", "Repo", "shelved"))
        .await
        .unwrap();
    store.set_archived(archived.id, true).await.unwrap();
    store
        .advance_revision(doc.id, RevisionKind::Plan, 0)
        .await
        .unwrap();
    for rev in 0..2 {
        store
            .advance_revision(doc.id, RevisionKind::Storage, rev)
            .await
            .unwrap();
    }
    for (i, author) in [Some("Durable"), None, Some("Durable")]
        .into_iter()
        .enumerate()
    {
        store
            .append_transcript(
                doc.id,
                &entry(author, "member", &format!("line {i}"), i as i64),
            )
            .await
            .unwrap();
    }
    let holder = Holder {
        account_id: account.id,
        login: account.login.clone(),
        browser_login_id: live.id,
    };
    let own = claimed(store.claim_ownership(doc.id, &holder, 3_000).await.unwrap());
    let lease = acquired(
        store
            .acquire_writer_lease("host-a", 3_000, 60_000)
            .await
            .unwrap(),
    );

    let snapshot = (
        store.account(account.id).await.unwrap(),
        store.browser_login(live.id).await.unwrap(),
        store.browser_login(gone.id).await.unwrap(),
        store.document(doc.id).await.unwrap(),
        store.document(archived.id).await.unwrap(),
        store.transcript(doc.id, 0, 100).await.unwrap(),
        store.ownership(doc.id).await.unwrap(),
        store.ownership(archived.id).await.unwrap(),
    );
    drop(store);

    let reopened = b.open().await;
    let after = (
        reopened.account(account.id).await.unwrap(),
        reopened.browser_login(live.id).await.unwrap(),
        reopened.browser_login(gone.id).await.unwrap(),
        reopened.document(doc.id).await.unwrap(),
        reopened.document(archived.id).await.unwrap(),
        reopened.transcript(doc.id, 0, 100).await.unwrap(),
        reopened.ownership(doc.id).await.unwrap(),
        reopened.ownership(archived.id).await.unwrap(),
    );
    assert_eq!(after, snapshot);
    // Spot-check the snapshot holds what was written (so equality is not vacuous).
    assert_eq!(after.0, Some(account.clone()));
    assert_eq!(after.2.and_then(|l| l.signed_out_at_ms), Some(2_000));
    let stored = after.3.expect("document kept");
    assert_eq!((stored.plan_revision, stored.storage_revision), (1, 2));
    assert!(after.4.expect("archived kept").archived);
    assert_eq!(after.5.len(), 3);
    assert_eq!(after.6, own);
    assert_eq!(
        reopened
            .account_by_login("durable")
            .await
            .unwrap()
            .map(|a| a.id),
        Some(account.id)
    );
    assert_eq!(
        reopened
            .document_by_slug("owner", "repo", "kept")
            .await
            .unwrap()
            .map(|d| d.id),
        Some(doc.id)
    );

    // The lease and the counters carry on where they were.
    assert_eq!(
        held_elsewhere(
            reopened
                .acquire_writer_lease("host-b", 3_001, 60_000)
                .await
                .unwrap()
        ),
        lease
    );
    assert!(reopened
        .renew_writer_lease(&lease, 3_002, 60_000)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        reopened
            .append_transcript(doc.id, &entry(None, "system", "after", 4_000))
            .await
            .unwrap()
            .seq,
        4
    );
    assert_eq!(
        reopened
            .advance_revision(doc.id, RevisionKind::Plan, 1)
            .await
            .unwrap(),
        Advance::Advanced(2)
    );
    assert_eq!(
        reopened
            .release_ownership(doc.id, own.generation)
            .await
            .unwrap(),
        Release::Released
    );
}
