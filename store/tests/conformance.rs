//! The storage conformance suite: every rule of [`Store`], written once and run on each backend —
//! in memory, SQLite and PostgreSQL — so the test names say which one failed
//! (`sqlite::ownership_race_exactly_one_wins`).
//!
//! Owns: the behaviour every backend must share — the generation-guarded ownership claim and
//! release, revisions that only grow, transcript order and paging, the writer lease and its
//! epochs, writes fenced by the writer epoch (every write method refused under an epoch that is
//! no longer current or was given up, changing nothing; reads and lease methods never fenced;
//! writes racing a takeover land before it or not at all), slugs unique per repository (owner and repository compared without ASCII case),
//! browser-login sign-out, browser-login credentials (revision-guarded writes, deletion that no
//! older write can undo, startup cleanup of dead logins), document content (the update journal
//! numbered gap-free per document, the plan-revision-guarded commit, checkpoints that prune and
//! never go backwards, the Yjs epoch and wholesale resets), renames that keep former slugs as
//! aliases unique per repository, child documents (one level, in their parent's repository, never
//! under an archived or missing parent, listed in creation order, parentage kept across renames,
//! archiving and reopening), a document's creator, creation brief and creation provenance (kept
//! as written, the brief and the provenance read on their own), `NotFound` for unknown documents, and data surviving a reopen.
//! Update and checkpoint bytes are opaque to the store, so the tests use plain byte strings.
//! Races
//! run on a two-worker runtime with a barrier, so claimers really overlap.
//! Does not own: policy (who may claim) or the server around the store.
//!
//! PostgreSQL comes from `CHOPIN_TEST_POSTGRES_URL` (exported by `scripts/test`), else from a
//! throwaway cluster this process starts (`chopin_fixtures::pg`); each test gets a fresh database.
//! No PostgreSQL means the PostgreSQL tests fail, never skip.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use chopin_store::instrumented::{Call, Hook, Instrumented};
use chopin_store::routed::{DocumentHandles, Routed};
use chopin_store::{
    account_id_for_github_user, Account, Advance, Attachment, BrowserLogin, Build, BuildKind,
    BuildState, BuiltSource, Checkpoint, Claim, Creator, Delivery, Document, DocumentContent,
    DocumentLeaseRow, Drafted, Enqueued, Fence, GraphChange, GraphCounters, GraphRefusal,
    GraphState, GraphVersion, Holder, ImplementationRun, Job, JobState, Kept, KeptRequest, Landing,
    LeaseAcquire, LinkHold, Machine, MachineChoice, MemoryStore, ModelChoice, NewAttachment,
    NewBuild, NewCommentNote, NewCommentThread, NewDocument, NewJob, NewMachine,
    NewTranscriptEntry, OwnerGuard, ParticipationPause, PgStore, PlanCommit, PlannerCredential,
    Provenance, QueueRefusal, Reach, Release, Replied, Reported, RequestClaim, RequestKey,
    RevisionKind, RunEnd, RunRecord, RunReport, Settlement, SqliteStore, StageRecord, Store,
    StoreError, TakeBack, TitleSidecar, UnsentLimit, WriterLease,
};
use tokio::sync::Barrier;
use uuid::Uuid;

/// How many tasks contend in each race.
const RACERS: usize = 16;
/// How many plan edits race at one expected plan revision.
const PLAN_COMMITTERS: usize = 8;

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
    ao_21_a_machines_hold_names_the_machine_and_keeps_its_runs_but_not_its_owner_at_startup,
    ac_20_ac_22_machines_are_paired_to_their_owner_and_listed_with_those_shared,
    ac_24_planner_credentials_are_kept_by_digest_the_newest_four_per_pair_and_survive_reopening,
    ao_12_pres_16_choosing_another_machine_for_a_document_takes_the_earlier_ones_credentials,
    atm_37_default_machine_chooses_only_an_unchosen_document_and_lets_go_only_its_own_choice,
    life_05_a_press_approves_and_queues_its_build_in_one_commit_or_neither,
    life_48_life_06_a_build_is_picked_up_once_with_its_bridge_and_a_claim_of_its_version_claims_it,
    life_48_a_person_retries_a_failed_build_of_the_approved_version,
    life_11_a_browser_build_that_delivers_records_its_built_source,
    life_12_life_14_life_85_a_rebuild_is_queued_from_the_built_source_and_lands_as_an_approved_completed_version,
    life_86_ended_rebuilds_give_way_oldest_first_past_100_builds,
    life_87_the_sweep_expires_silent_launching_builds_and_finds_silent_build_runs,
    life_83_a_connectors_latest_poll_is_recorded_and_read_back_by_any_process,
    requests_a_key_is_claimed_once_answered_by_its_claim_and_free_again_at_its_expiry,
    requests_claims_of_one_key_at_once_give_it_to_exactly_one,
    msg_16_an_entry_is_read_back_by_the_key_its_append_carried,
    ac_22_ac_23_unsharing_takes_the_teammates_choices_and_unpairing_takes_every_row,
    life_76_a_document_created_through_mcp_says_so_for_good,
    life_28_life_29_life_30_a_first_draft_is_version_1_and_each_edit_advances_its_revision,
    life_31_approval_refuses_a_graph_drafted_against_an_older_plan_revision,
    life_32_life_37_a_replacement_draft_supersedes_nothing_until_it_is_approved,
    life_33_a_claim_checks_all_three_counters_and_locks_the_version,
    life_33_two_claims_at_once_lock_the_version_once,
    life_34_life_35_a_run_end_gives_the_version_back_and_a_verified_one_is_never_claimed_again,
    life_36_a_revision_requested_version_is_claimable_until_a_replacement_is_latest,
    life_38_life_39_graph_counters_are_not_document_counters,
    life_42_a_claim_saves_its_run_with_the_lock_in_one_commit,
    life_58_a_report_key_is_kept_with_its_answer_and_scoped_to_its_run,
    life_59_a_report_worked_out_from_an_older_run_is_not_saved,
    life_34_a_report_that_ends_the_run_gives_the_version_back_in_its_commit,
    life_58_two_reports_at_once_on_one_run_save_one,
    hostile_8_text_with_nul_is_stored_the_same_way_and_fails_no_batch_mate,
    hostile_8_an_append_whose_key_is_held_appends_nothing_and_answers_the_first,
    answers_ping_and_names_itself,
    accounts_upsert_updates_login_and_keeps_id,
    account_upsert_race_yields_one_account,
    browser_login_sign_out_happens_once,
    browser_login_for_unknown_account_is_not_found,
    ao_03_an_accounts_live_logins_are_listed_newest_first,
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
    transcript_knows_its_newest_seq,
    writer_lease_is_exclusive_until_expiry,
    writer_lease_renewal_keeps_epoch,
    writer_lease_epoch_grows_across_release,
    writer_lease_race_exactly_one_wins,
    fenced_writes_need_the_current_writer_epoch,
    fenced_writes_stop_once_the_lease_is_given_up_or_given_back,
    fenced_writes_racing_a_takeover_land_before_it_or_not_at_all,
    document_leases_are_taken_renewed_and_given_back_one_document_at_a_time,
    document_leases_are_renewed_together_and_only_those_still_held,
    document_fenced_writes_need_the_current_epoch_of_their_documents_lease,
    document_fenced_writes_racing_a_takeover_land_before_it_or_not_at_all,
    document_fenced_writes_of_many_documents_at_once_are_each_checked_against_their_own_lease,
    routed_writes_reach_their_documents_own_handle_and_sweeps_of_every_document_are_refused,
    routed_writes_of_a_document_served_elsewhere_are_refused_and_change_nothing,
    a_takeovers_sweeps_reach_only_the_document_taken_over,
    routed_sweeps_of_one_document_go_through_its_handle,
    routed_writes_of_a_child_document_go_through_its_roots_handle,
    data_survives_reopening_the_store,
    new_document_has_empty_content_at_epoch_zero,
    updates_are_numbered_from_one_and_advance_storage_revision,
    updates_appended_together_take_consecutive_seqs_all_or_none,
    update_concurrent_appends_are_gap_free,
    writes_of_every_kind_at_once_are_each_answered_as_if_alone,
    account_upsert_writes_only_when_the_login_changes,
    plan_edit_commits_only_at_the_expected_revision,
    plan_edit_race_exactly_one_commits,
    plan_edit_under_an_owner_guard_lands_only_while_storage_names_that_owner,
    plan_edit_racing_a_release_lands_before_it_or_not_at_all,
    checkpoint_prunes_the_journal_and_seqs_keep_growing,
    stale_checkpoint_is_ignored,
    checkpoint_outside_the_journal_conflicts,
    reset_content_bumps_epoch_and_replaces_content,
    content_survives_reopening_the_store,
    rename_keeps_former_slugs_as_aliases_in_order,
    rename_conflicts_with_other_documents_slugs_and_aliases,
    alias_resolution_ignores_owner_and_repo_case,
    archive_restore_and_rename_change_no_counter,
    rename_race_to_one_slug_exactly_one_wins,
    rename_race_never_takes_a_slug_being_left,
    children_are_listed_in_creation_order_ties_by_id,
    repository_documents_are_that_repositorys_in_creation_order_and_bounded,
    child_of_a_child_is_refused,
    child_in_another_repository_is_refused,
    child_of_an_archived_parent_is_refused,
    child_of_a_missing_parent_is_refused,
    child_slugs_are_unique_in_the_repository,
    archiving_a_parent_keeps_its_children,
    parentage_survives_rename_and_reopen,
    child_creation_racing_archive_and_rename_is_all_or_nothing,
    ses_09_run_stages_merge_by_stage_id_with_no_count_limit,
    ses_13_runs_survive_reopening_and_live_ones_come_back_stopped,
    ses_14_ended_runs_go_when_the_next_workflow_starts,
    ho_08_ses_13_startup_stops_the_live_runs_of_documents_whose_owner_was_not_kept,
    ao_18_link_holds_are_kept_per_document_and_survive_reopening,
    ho_05_a_hold_is_rewritten_without_its_window_once_and_deleted_only_as_written,
    ao_20_startup_keeps_owners_whose_hold_names_their_login_with_a_stored_credential,
    own_23_a_documents_creator_and_brief_round_trip_and_survive_reopening,
    iso_43_a_documents_creation_provenance_round_trips_and_survives_reopening,
    mod_02_mod_04_mod_15_a_model_choice_is_stored_as_written_per_document_and_survives_reopening,
    ctx_02_ctx_03_a_participation_pause_is_kept_per_document_and_survives_reopening,
    iso_19_iso_20_iso_21_comment_threads_number_their_notes_cap_replies_and_survive_reopening,
    cmd_16_a_messages_references_are_kept_with_it_and_survive_reopening,
    file_01_file_09_file_16_a_file_is_kept_with_its_bytes_its_uploaders_until_sent_then_the_messages,
    file_11_file_12_file_13_unsent_files_count_per_person_and_document_and_are_forgotten_after_the_window,
    job_01_a_key_repeats_its_request_and_refuses_other_input,
    job_01_a_newer_request_supersedes_the_targets_unsettled_jobs,
    job_01_claim_race_exactly_one_wins,
    job_01_an_attempt_writes_only_under_its_own_claim,
    job_01_retries_spend_the_failure_budget_and_wait_their_turn,
    job_09_own_18_a_new_process_fails_what_the_last_left_running_and_rows_survive_reopening,
    job_01_jobs_need_their_document_and_are_counted_by_state,
    own_12_own_14_a_draft_lands_only_on_the_title_it_was_made_for_and_never_after_a_rename,
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
        parent_id: None,
        ..NewDocument::default()
    }
}

/// [`new_doc`] as a child of `parent`.
fn child_doc(n: u128, owner: &str, repo: &str, slug: &str, parent: Uuid) -> NewDocument {
    NewDocument {
        parent_id: Some(parent),
        ..new_doc(n, owner, repo, slug)
    }
}

/// The words of a `Conflict`; panics on anything else.
fn conflict_words<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Conflict(words)) => words,
        other => panic!("expected Conflict, got {other:?}"),
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
        key: None,
        refs: None,
        attachments: Vec::new(),
    }
}

/// Issue 24 item 8: U+0000, which PostgreSQL's text cannot hold, is stored as U+FFFD by every
/// backend — in a Chat line, a title, a brief, a run's and a stage's names — and a line holding
/// one never fails the other lines committed in its batch.
async fn hostile_8_text_with_nul_is_stored_the_same_way_and_fails_no_batch_mate(b: &Backend) {
    let store = b.open().await;
    let mut with_nul = new_doc(1, "o", "r", "s");
    with_nul.title = "Plan\0 A".into();
    with_nul.brief = Some("brief\0".into());
    let doc = store.create_document(&with_nul).await.unwrap();
    assert_eq!(doc.title, "Plan\u{fffd} A");
    assert_eq!(
        store.document(doc.id).await.unwrap().unwrap().title,
        "Plan\u{fffd} A"
    );
    assert_eq!(
        store.document_brief(doc.id).await.unwrap().as_deref(),
        Some("brief\u{fffd}")
    );
    let renamed = store
        .rename_document(doc.id, "t", "Renamed\0")
        .await
        .unwrap();
    assert_eq!(renamed.title, "Renamed\u{fffd}");
    // Lines queued together, one of them with a NUL: all are saved.
    let mut pending = Vec::new();
    for (i, body) in ["first", "a \0 in the middle", "third"].iter().enumerate() {
        pending.push(
            store
                .queue_transcript(doc.id, &entry(None, "planner", body, 10 + i as i64))
                .await
                .unwrap(),
        );
    }
    let mut saved = Vec::new();
    for p in pending {
        saved.push(p.await.unwrap());
    }
    let bodies: Vec<String> = store
        .transcript(doc.id, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect();
    assert_eq!(bodies, ["first", "a \u{fffd} in the middle", "third"]);
    assert_eq!(saved[1].body, "a \u{fffd} in the middle");
    // A run and its stages.
    let mut record = run(doc.id, "run-\0", "running");
    record.name = "roll\0out".into();
    let mut stages = vec![stage(0, "running")];
    stages[0].name = "stage\0".into();
    store.save_run(&record, &stages, true).await.unwrap();
    let runs = store.runs(doc.id).await.unwrap();
    assert_eq!(runs[0].name, "roll\u{fffd}out");
    assert_eq!(runs[0].run_id, "run-\u{fffd}");
}

/// Issue 24 item 8: an append carrying a key the document already holds (the same append run
/// again after an ambiguous commit) appends nothing and answers the entry the key made.
async fn hostile_8_an_append_whose_key_is_held_appends_nothing_and_answers_the_first(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let mut keyed = entry(Some("mona"), "member", "once", 10);
    keyed.key = Some("k-1".into());
    let first = store.append_transcript(doc.id, &keyed).await.unwrap();
    let other = store
        .append_transcript(doc.id, &entry(None, "system", "between", 11))
        .await
        .unwrap();
    let again = store
        .queue_transcript(doc.id, &keyed)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(
        store.transcript(doc.id, 0, 10).await.unwrap(),
        vec![first.clone(), other.clone()]
    );
    // The same append queued twice at once (one group commit, as a rule): one entry, both
    // answered with it.
    let mut twice = entry(Some("mona"), "member", "twice", 12);
    twice.key = Some("k-2".into());
    let (a, b2) = (
        store.queue_transcript(doc.id, &twice).await.unwrap(),
        store.queue_transcript(doc.id, &twice).await.unwrap(),
    );
    let (a, b2) = (a.await.unwrap(), b2.await.unwrap());
    assert_eq!((a.seq, &a), (3, &b2));
    assert_eq!(
        store.transcript(doc.id, 0, 10).await.unwrap(),
        vec![first.clone(), other, a]
    );
    // The same key in another document is another key.
    let elsewhere = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    let there = store.append_transcript(elsewhere.id, &keyed).await.unwrap();
    assert_eq!(there.seq, 1);
    // A reopened store still knows the key.
    drop(store);
    let store = b.open().await;
    let replayed = store.append_transcript(doc.id, &keyed).await.unwrap();
    assert_eq!(replayed, first);
    assert_eq!(store.last_transcript_seq(doc.id).await.unwrap(), 3);
}

fn claimed(claim: Claim) -> chopin_store::Ownership {
    match claim {
        Claim::Claimed(own) => own,
        Claim::HeldByOther(own) => panic!("expected Claimed, got HeldByOther({own:?})"),
    }
}

fn held_by_other(claim: Claim) -> chopin_store::Ownership {
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

async fn ao_03_an_accounts_live_logins_are_listed_newest_first(b: &Backend) {
    let store = b.open().await;
    let ada = store.upsert_account(1, "ada", 1_000).await.unwrap();
    let bob = store.upsert_account(2, "bob", 1_000).await.unwrap();
    let login = |n: u128, account: Uuid, created: i64, expires: i64| BrowserLogin {
        id: Uuid::from_u128(0xa0 + n),
        account_id: account,
        verifier_hash: format!("h{n}"),
        created_at_ms: created,
        expires_at_ms: expires,
        signed_out_at_ms: None,
    };
    for l in [
        login(1, ada.id, 1_000, 9_000),
        login(2, ada.id, 3_000, 9_000),
        login(3, ada.id, 2_000, 9_000),
        login(4, ada.id, 4_000, 5_000), // expires at the moment asked
        login(5, ada.id, 5_000, 9_000), // signed out below
        login(6, bob.id, 6_000, 9_000), // another account's
        login(7, ada.id, 3_000, 9_000), // created with 2, after it by id
    ] {
        store.create_browser_login(&l).await.unwrap();
    }
    assert!(store
        .sign_out_browser_login(Uuid::from_u128(0xa5), 4_500)
        .await
        .unwrap());
    let ids = |v: Vec<BrowserLogin>| {
        v.into_iter()
            .map(|l| l.id.as_u128() - 0xa0)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.live_browser_logins(ada.id, 5_000, 10).await.unwrap()),
        vec![7, 2, 3, 1]
    );
    assert_eq!(
        ids(store.live_browser_logins(ada.id, 5_000, 2).await.unwrap()),
        vec![7, 2]
    );
    assert_eq!(
        ids(store.live_browser_logins(ada.id, 4_999, 1).await.unwrap()),
        vec![4]
    );
    assert!(store
        .live_browser_logins(Uuid::from_u128(0xdead), 5_000, 10)
        .await
        .unwrap()
        .is_empty());
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
    assert!(is_not_found(store.append_update(unknown, b"u", 1).await));
    assert!(is_not_found(
        store.commit_plan_edit(unknown, 0, None, b"u", 1).await
    ));
    assert!(is_not_found(store.document_content(unknown).await));
    assert!(is_not_found(store.write_checkpoint(unknown, 0, b"s").await));
    assert!(is_not_found(store.reset_content(unknown, b"s").await));
    assert!(is_not_found(
        store.rename_document(unknown, "new", "New").await
    ));
    assert!(is_not_found(store.earlier_slugs(unknown).await));
    assert!(is_not_found(store.children(unknown).await));
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

    assert_eq!(store.clear_all_ownership(Reach::Every).await.unwrap(), 2);
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
    assert_eq!(store.clear_all_ownership(Reach::Every).await.unwrap(), 0);

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

async fn transcript_knows_its_newest_seq(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    assert_eq!(store.last_transcript_seq(doc.id).await.unwrap(), 0, "empty");
    for i in 0..3 {
        store
            .append_transcript(doc.id, &entry(Some("a"), "member", &format!("m{i}"), i))
            .await
            .unwrap();
    }
    assert_eq!(store.last_transcript_seq(doc.id).await.unwrap(), 3);
    let other = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    assert_eq!(
        store.last_transcript_seq(other.id).await.unwrap(),
        0,
        "per document"
    );
    assert_eq!(
        store
            .last_transcript_seq(uuid::Uuid::from_u128(0xdead))
            .await
            .unwrap(),
        0,
        "unknown document"
    );
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
    let seqs = |page: Vec<chopin_store::TranscriptEntry>| {
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

// --- writer fencing --------------------------------------------------------------------------

/// What [`every_write`] writes to, prepared through `store`: an account with two live logins
/// (the first with a credential at revision 1), a document with one journalled update and one
/// Chat entry claimed by that account at generation 1, and a second claimed document.
struct FenceFixture {
    holder: Holder,
    teammate: Holder,
    other_login: Uuid,
    doc: Uuid,
    other_doc: Uuid,
}

async fn fence_fixture(store: &Arc<dyn Store>) -> FenceFixture {
    let holder = member(store, 71, "fenced-member").await;
    let other_login = Uuid::from_u128(0xf0_0001);
    store
        .create_browser_login(&BrowserLogin {
            id: other_login,
            account_id: holder.account_id,
            verifier_hash: "hash-other".into(),
            created_at_ms: 1_000,
            expires_at_ms: 1_000_000,
            signed_out_at_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .set_login_credential(holder.browser_login_id, 0, b"sealed-1")
            .await
            .unwrap(),
        Some(1)
    );
    let doc = store
        .create_document(&new_doc(71, "octo", "fenced", "plan"))
        .await
        .unwrap()
        .id;
    let other_doc = store
        .create_document(&new_doc(72, "octo", "fenced", "other"))
        .await
        .unwrap()
        .id;
    assert_eq!(store.append_update(doc, b"u-1", 1_000).await.unwrap(), 1);
    store
        .append_transcript(doc, &entry(Some("fenced-member"), "member", "hello", 1_000))
        .await
        .unwrap();
    for d in [doc, other_doc] {
        assert_eq!(
            claimed(store.claim_ownership(d, &holder, 1_000).await.unwrap()).generation,
            1
        );
    }
    // A paired machine of the holder's, shared with a teammate, chosen for `doc` and the
    // holder's favourite, with one Planner credential.
    let teammate = member(store, 74, "fenced-teammate").await;
    store
        .pair_machine(&machine_of(FENCED_MACHINE, &holder, "studio", 1_000))
        .await
        .unwrap();
    assert!(store
        .share_machine(FENCED_MACHINE, teammate.account_id, 1_000)
        .await
        .unwrap());
    store
        .set_favourite_machine(holder.account_id, Some(FENCED_MACHINE))
        .await
        .unwrap();
    store
        .choose_machine(
            doc,
            Some(&machine_choice(doc, FENCED_MACHINE, &teammate, 1_000)),
        )
        .await
        .unwrap();
    store
        .put_planner_credential(&credential_of("digest-1", FENCED_MACHINE, doc, 1_000))
        .await
        .unwrap();
    FenceFixture {
        holder,
        teammate,
        other_login,
        doc,
        other_doc,
    }
}

/// The machine [`fence_fixture`] pairs.
const FENCED_MACHINE: Uuid = Uuid::from_u128(0x3ac1_0001);
/// The machine [`every_write`] pairs.
const FENCED_MACHINE_2: Uuid = Uuid::from_u128(0x3ac1_0002);

/// `owner`'s machine `id` called `name`, paired at `at` with a placeholder seal.
fn machine_of(id: Uuid, owner: &Holder, name: &str, at: i64) -> NewMachine {
    NewMachine {
        id,
        owner_account_id: owner.account_id,
        name: name.to_owned(),
        release: Some("0.0.23".to_owned()),
        created_at_ms: at,
        sealed: format!("sealed-{name}").into_bytes(),
    }
}

/// `by`'s choice of `machine` for `doc` at `at`.
fn machine_choice(doc: Uuid, machine: Uuid, by: &Holder, at: i64) -> MachineChoice {
    MachineChoice {
        document_id: doc,
        machine_id: machine,
        chosen_by_account_id: by.account_id,
        chosen_by: by.login.clone(),
        chosen_at_ms: at,
        by_default: false,
    }
}

/// A Planner credential for `machine` and `doc` issued at `at`, lasting a day.
fn credential_of(digest: &str, machine: Uuid, doc: Uuid, at: i64) -> PlannerCredential {
    PlannerCredential {
        digest: digest.to_owned(),
        machine_id: machine,
        document_id: doc,
        issued_at_ms: at,
        expires_at_ms: at + 86_400_000,
    }
}

/// Calls every method that can change stored state once, in an order in which each changes
/// something on a fresh [`fence_fixture`], and returns each outcome by method name.
async fn every_write(
    store: &Arc<dyn Store>,
    fx: &FenceFixture,
) -> Vec<(&'static str, Result<(), StoreError>)> {
    let doc = store.document(fx.doc).await.unwrap().expect("the document");
    let mut outcomes: Vec<(&'static str, Result<(), StoreError>)> = Vec::new();
    let mut record = |method, result: Result<(), StoreError>| outcomes.push((method, result));
    record(
        "upsert_account",
        store.upsert_account(72, "newcomer", 5_000).await.map(drop),
    );
    record(
        "create_browser_login",
        store
            .create_browser_login(&BrowserLogin {
                id: Uuid::from_u128(0xf0_0002),
                account_id: fx.holder.account_id,
                verifier_hash: "hash-new".into(),
                created_at_ms: 5_000,
                expires_at_ms: 1_000_000,
                signed_out_at_ms: None,
            })
            .await,
    );
    record(
        "sign_out_browser_login",
        store
            .sign_out_browser_login(fx.other_login, 5_000)
            .await
            .map(|changed| assert!(changed)),
    );
    record(
        "set_login_credential",
        store
            .set_login_credential(fx.holder.browser_login_id, 1, b"sealed-2")
            .await
            .map(|revision| assert_eq!(revision, Some(2))),
    );
    record(
        "delete_login_credential",
        store
            .delete_login_credential(fx.holder.browser_login_id)
            .await
            .map(|had| assert!(had)),
    );
    record(
        "delete_expired_logins",
        store
            .delete_expired_logins(5_000)
            .await
            .map(|deleted| assert_eq!(deleted, 1)),
    );
    record(
        "create_document",
        store
            .create_document(&new_doc(73, "octo", "fenced", "new"))
            .await
            .map(drop),
    );
    record("set_archived", store.set_archived(fx.other_doc, true).await);
    record(
        "rename_document",
        store
            .rename_document(fx.doc, "renamed", "Renamed")
            .await
            .map(drop),
    );
    record(
        "advance_revision",
        store
            .advance_revision(fx.doc, RevisionKind::Storage, doc.storage_revision)
            .await
            .map(|advance| assert!(matches!(advance, Advance::Advanced(_)))),
    );
    record(
        "append_update",
        store.append_update(fx.doc, b"u-2", 5_000).await.map(drop),
    );
    record(
        "append_updates",
        store
            .append_updates(fx.doc, &[b"u-3", b"u-4"], 5_000)
            .await
            .map(drop),
    );
    record(
        "commit_plan_edit",
        store
            .commit_plan_edit(fx.doc, doc.plan_revision, None, b"p-1", 5_000)
            .await
            .map(|commit| assert!(matches!(commit, PlanCommit::Committed { .. }))),
    );
    record(
        "write_checkpoint",
        store.write_checkpoint(fx.doc, 1, b"state-1").await,
    );
    record(
        "reset_content",
        store.reset_content(fx.doc, b"state-2").await.map(drop),
    );
    record(
        "append_transcript",
        store
            .append_transcript(fx.doc, &entry(None, "system", "fenced?", 5_000))
            .await
            .map(drop),
    );
    record(
        "claim_ownership",
        store
            .claim_ownership(fx.doc, &fx.holder, 5_000)
            .await
            .map(|claim| assert!(matches!(claim, Claim::Claimed(_)))),
    );
    record(
        "release_ownership",
        store
            .release_ownership(fx.doc, 1)
            .await
            .map(|release| assert_eq!(release, Release::Released)),
    );
    record(
        "put_link_hold",
        store
            .put_link_hold(&hold_of(fx.doc, &fx.holder, 5_000, Some(65_000)))
            .await,
    );
    record(
        "end_handover",
        store
            .end_handover(fx.doc, 5_000)
            .await
            .map(|ended| assert!(ended)),
    );
    record(
        "delete_link_hold",
        store
            .delete_link_hold(fx.doc, 5_000)
            .await
            .map(|deleted| assert!(deleted)),
    );
    record(
        "put_model_choice",
        store
            .put_model_choice(&choice_of(fx.doc, "m-1", Some("high")))
            .await,
    );
    record(
        "clear_model_choice",
        store
            .clear_model_choice(fx.doc)
            .await
            .map(|cleared| assert!(cleared)),
    );
    record(
        "pause_participation",
        store
            .pause_participation(&ParticipationPause {
                document_id: fx.doc,
                paused_by: "mona".into(),
                paused_at_ms: 5_000,
            })
            .await,
    );
    record(
        "resume_participation",
        store
            .resume_participation(fx.doc)
            .await
            .map(|resumed| assert!(resumed)),
    );
    let thread = Uuid::from_u128(0xc0_0001);
    record(
        "start_comment",
        store
            .start_comment(&NewCommentThread {
                id: thread,
                document_id: fx.doc,
                quote: "the passage".into(),
                first: note_by(Some("mona"), "why?", 5_000),
            })
            .await
            .map(drop),
    );
    record(
        "reply_comment",
        store
            .reply_comment(fx.doc, thread, &note_by(None, "because", 5_001), 100)
            .await
            .map(|r| assert!(matches!(r, Replied::Saved(..)), "{r:?}")),
    );
    record(
        "set_comment_result",
        store.set_comment_result(fx.doc, thread, 3).await.map(drop),
    );
    record(
        "resolve_comment",
        store
            .resolve_comment(fx.doc, thread, "mona", 5_002)
            .await
            .map(drop),
    );
    record(
        "put_attachment",
        store
            .put_attachment(&file_of(fx.doc, 0xa1, "mona", b"one"), roomy())
            .await
            .map(|kept| assert_eq!(kept, Kept::Kept)),
    );
    record(
        "take_back_attachment",
        store
            .take_back_attachment(fx.doc, Uuid::from_u128(0xa1), "mona")
            .await
            .map(|taken| assert_eq!(taken, TakeBack::Taken)),
    );
    record(
        "forget_unsent_attachments",
        store
            .put_attachment(&file_of(fx.doc, 0xa2, "mona", b"two"), roomy())
            .await
            .and(store.forget_unsent_attachments(i64::MAX).await)
            .map(|forgotten| assert_eq!(forgotten, 1)),
    );
    record(
        "enqueue_job",
        store
            .enqueue_job(&job_of(fx.doc, 0x70b1, "t", "k-1", "{}", 5_000))
            .await
            .map(|done| assert!(matches!(done, Enqueued::New(_)))),
    );
    record(
        "claim_job",
        store
            .claim_job(Uuid::from_u128(0x70b1), "host", 5_000, 30_000)
            .await
            .map(|claimed| assert!(claimed.is_some())),
    );
    record(
        "renew_job_claim",
        store
            .renew_job_claim(Uuid::from_u128(0x70b1), 1, 5_000, 30_000)
            .await
            .map(|renewed| assert!(renewed)),
    );
    record(
        "set_job_progress",
        store
            .set_job_progress(Uuid::from_u128(0x70b1), 1, r#"["a"]"#, 5_000)
            .await
            .map(|set| assert!(set)),
    );
    record(
        "settle_job",
        store
            .settle_job(Uuid::from_u128(0x70b1), 1, &completed("{}"), 5_000)
            .await
            .map(|settled| assert!(settled)),
    );
    record(
        "cancel_job",
        store
            .enqueue_job(&job_of(fx.doc, 0x70b2, "t", "k-2", "{}", 5_000))
            .await
            .and(
                store
                    .cancel_job(Uuid::from_u128(0x70b2), "asked", 5_000)
                    .await,
            )
            .map(|cancelled| assert!(cancelled)),
    );
    record(
        "interrupt_running_jobs",
        store
            .enqueue_job(&job_of(fx.doc, 0x70b3, "t", "k-3", "{}", 5_000))
            .await
            .and(
                store
                    .claim_job(Uuid::from_u128(0x70b3), "host", 5_000, 30_000)
                    .await,
            )
            .and(
                store
                    .interrupt_running_jobs("interrupted", 5_000, Reach::Every)
                    .await,
            )
            .map(|n| assert_eq!(n, 1)),
    );
    record(
        "change_graph",
        store
            .change_graph(
                fx.doc,
                &GraphChange::Edit {
                    base: None,
                    plan_revision: 1,
                    definition: "{}".into(),
                },
                5_000,
            )
            .await
            .map(|drafted| assert!(drafted.is_ok(), "{drafted:?}")),
    );
    record(
        "draft_title",
        store
            .draft_title(fx.doc, &doc.title, "A drafted title")
            .await
            // Kept: the rename above chose the title; the write is fenced all the same.
            .map(|drafted| assert_eq!(drafted, Drafted::Kept)),
    );
    record(
        "pair_machine",
        store
            .pair_machine(&machine_of(FENCED_MACHINE_2, &fx.holder, "laptop", 5_000))
            .await
            .map(drop),
    );
    record(
        "set_machine_credential",
        store
            .set_machine_credential(FENCED_MACHINE, 1, b"sealed-2", Some("0.0.24"))
            .await
            .map(|r| assert_eq!(r, Some(2))),
    );
    record(
        "share_machine",
        store
            .share_machine(FENCED_MACHINE_2, fx.teammate.account_id, 5_000)
            .await
            .map(|shared| assert!(shared)),
    );
    record(
        "unshare_machine",
        store
            .unshare_machine(FENCED_MACHINE, fx.teammate.account_id)
            .await
            .map(|taken| assert!(taken)),
    );
    record(
        "set_favourite_machine",
        store
            .set_favourite_machine(fx.holder.account_id, Some(FENCED_MACHINE_2))
            .await,
    );
    record(
        "choose_machine",
        store
            .choose_machine(
                fx.other_doc,
                Some(&machine_choice(
                    fx.other_doc,
                    FENCED_MACHINE,
                    &fx.holder,
                    5_000,
                )),
            )
            .await
            .map(|before| assert_eq!(before, None)),
    );
    record(
        "choose_default_machine",
        store
            .choose_default_machine(&machine_choice(fx.doc, FENCED_MACHINE, &fx.holder, 5_000))
            .await
            .map(|(_, chosen)| assert!(chosen)),
    );
    record(
        "withdraw_default_machine",
        store
            .withdraw_default_machine(fx.doc, FENCED_MACHINE)
            .await
            .map(|withdrawn| assert!(withdrawn)),
    );
    record(
        "approve_and_queue",
        store
            .approve_and_queue(
                fx.doc,
                &approve(1, 1, 1),
                &new_build(0xb1, FENCED_MACHINE, &fx.holder),
                5_000,
            )
            .await
            .map(|queued| assert!(queued.is_ok(), "{queued:?}")),
    );
    record(
        "pick_up_build",
        store
            .pick_up_build(Uuid::from_u128(0xb1), "bridge-f", 5_000)
            .await
            .map(|picked| assert!(picked.is_some())),
    );
    record(
        "fail_build",
        store
            .fail_build(Uuid::from_u128(0xb1), "no checkout", 5_000)
            .await
            .map(|failed| assert!(failed.is_some())),
    );
    record(
        "queue_build",
        store
            .queue_build(fx.doc, &new_build(0xb2, FENCED_MACHINE, &fx.holder), 5_000)
            .await
            .map(|queued| assert!(queued.is_ok(), "{queued:?}")),
    );
    // Unrecorded steps set up the next write (refused under a stale epoch like any other).
    let _ = store
        .pick_up_build(Uuid::from_u128(0xb2), "bridge-g", 5_000)
        .await;
    record(
        "expire_builds",
        store
            .expire_builds(Reach::Every, 5_000, 5_000)
            .await
            .map(|expired| assert_eq!(expired.len(), 1)),
    );
    let _ = store
        .queue_build(fx.doc, &new_build(0xb3, FENCED_MACHINE, &fx.holder), 5_000)
        .await;
    let _ = store
        .pick_up_build(Uuid::from_u128(0xb3), "bridge-h", 5_000)
        .await;
    let _ = store
        .start_implementation(fx.doc, graph_counters(1, 1, 1), "run-f", "{}", None, 5_000)
        .await;
    let _ = store
        .report_implementation(
            "run-f",
            &RunReport {
                delivered: Some(Delivery {
                    source: "built".into(),
                    plan_revision: 1,
                }),
                ..report("v", 1, "{}", Some(RunEnd::Verified))
            },
            5_000,
        )
        .await;
    record(
        "queue_rebuild",
        store
            .queue_rebuild(
                fx.doc,
                &new_build(0xb4, FENCED_MACHINE, &fx.holder),
                "after",
                1,
                5_000,
            )
            .await
            .map(|queued| assert!(queued.is_ok(), "{queued:?}")),
    );
    let _ = store
        .pick_up_build(Uuid::from_u128(0xb4), "bridge-i", 5_000)
        .await;
    record(
        "land_rebuild",
        store
            .land_rebuild(Uuid::from_u128(0xb4), "{}", "{}", 5_000)
            .await
            .map(|landing| assert!(matches!(landing, Landing::Landed { .. }), "{landing:?}")),
    );
    record(
        "put_planner_credential",
        store
            .put_planner_credential(&credential_of(
                "digest-2",
                FENCED_MACHINE,
                fx.other_doc,
                5_000,
            ))
            .await,
    );
    record(
        "unpair_machine",
        store
            .unpair_machine(FENCED_MACHINE)
            .await
            .map(|unpaired| assert!(unpaired)),
    );
    record(
        "clear_unheld_ownership",
        store
            .clear_unheld_ownership(Reach::Every)
            .await
            .map(|cleared| assert_eq!(cleared, 1)),
    );
    // Claimed again, so the last method below has an owner to clear.
    record(
        "claim_ownership (again)",
        store
            .claim_ownership(fx.doc, &fx.holder, 5_000)
            .await
            .map(|claim| assert!(matches!(claim, Claim::Claimed(_)))),
    );
    record(
        "clear_all_ownership",
        store
            .clear_all_ownership(Reach::Every)
            .await
            .map(|cleared| assert_eq!(cleared, 1)),
    );
    let key = request_key("chat", "mona", "r-fenced", Some(fx.doc));
    record(
        "claim_request",
        store
            .claim_request(&key, "d", 5_000, 605_000)
            .await
            .map(|claim| assert_eq!(claim, RequestClaim::Claimed { since_ms: 5_000 })),
    );
    record(
        "answer_request",
        store
            .answer_request(&key, 5_000, "{}")
            .await
            .map(|answered| assert!(answered)),
    );
    record(
        "release_request",
        store
            .release_request(&key, 5_000)
            .await
            .map(|released| assert!(released)),
    );
    outcomes
}

/// `holder`'s key `key` in `scope`, about `document`.
fn request_key(scope: &str, holder: &str, key: &str, document: Option<Uuid>) -> RequestKey {
    RequestKey {
        scope: scope.to_owned(),
        holder: holder.to_owned(),
        key: key.to_owned(),
        document,
    }
}

/// `uploader`'s text file `id` of `doc`, holding `bytes`, made at 1 000.
fn file_of(doc: Uuid, id: u128, uploader: &str, bytes: &[u8]) -> NewAttachment {
    NewAttachment {
        attachment: Attachment {
            id: Uuid::from_u128(id),
            document_id: doc,
            uploader: uploader.to_owned(),
            name: format!("f-{id:x}.txt"),
            kind: "text".to_owned(),
            mime_type: "text/plain".to_owned(),
            size: bytes.len() as i64,
            created_at_ms: 1_000,
            sent_seq: None,
        },
        bytes: bytes.to_vec(),
    }
}

/// A limit no test file reaches.
fn roomy() -> UnsentLimit {
    UnsentLimit {
        max_files: 100,
        max_bytes: 1 << 20,
        since_ms: 0,
    }
}

/// mona's choice of `model` at `level` for `doc`.
fn choice_of(doc: Uuid, model: &str, level: Option<&str>) -> ModelChoice {
    ModelChoice {
        document_id: doc,
        model: model.to_owned(),
        thinking_level: level.map(str::to_owned),
        chosen_by: "mona".to_owned(),
        chosen_at_ms: 9_000,
    }
}

/// A hold of `doc` by `holder`, written at `at` with the window `until`.
fn hold_of(doc: Uuid, holder: &Holder, at: i64, until: Option<i64>) -> LinkHold {
    LinkHold {
        document_id: doc,
        account_id: holder.account_id,
        login: holder.login.clone(),
        browser_login_id: Some(holder.browser_login_id),
        generation: 1,
        held: format!("{{\"sessions\":[\"s-{at}\"]}}"),
        written_at_ms: at,
        handover_until_ms: until,
        machine_id: None,
    }
}

/// Everything [`every_write`] could change, read through `store`.
#[derive(Debug, PartialEq)]
struct FencedState {
    accounts: Vec<Option<Account>>,
    logins: Vec<Option<BrowserLogin>>,
    credential: Option<(i64, Vec<u8>)>,
    documents: Vec<Option<Document>>,
    earlier_slugs: Vec<String>,
    content: DocumentContent,
    transcript: Vec<chopin_store::TranscriptEntry>,
    ownership: Vec<chopin_store::Ownership>,
    holds: Vec<LinkHold>,
    model_choice: Option<ModelChoice>,
    files: Vec<Option<(Attachment, Vec<u8>)>>,
    jobs: Vec<Job>,
    title: TitleSidecar,
    comments: Vec<chopin_store::ThreadWithNotes>,
    graph: Vec<GraphVersion>,
    machines: Vec<Machine>,
    machine_credential: Option<(i64, Vec<u8>)>,
    shares: Vec<Vec<Account>>,
    favourite: Option<Uuid>,
    machine_choices: Vec<Option<MachineChoice>>,
    planner_credentials: Vec<Option<PlannerCredential>>,
}

async fn fenced_state(store: &Arc<dyn Store>, fx: &FenceFixture) -> FencedState {
    let mut accounts = Vec::new();
    for github_user_id in [71, 72] {
        accounts.push(
            store
                .account(account_id_for_github_user(github_user_id))
                .await
                .unwrap(),
        );
    }
    let mut logins = Vec::new();
    for id in [
        fx.holder.browser_login_id,
        fx.other_login,
        Uuid::from_u128(0xf0_0002),
    ] {
        logins.push(store.browser_login(id).await.unwrap());
    }
    let mut documents = Vec::new();
    for id in [
        fx.doc,
        fx.other_doc,
        new_doc(73, "octo", "fenced", "new").id,
    ] {
        documents.push(store.document(id).await.unwrap());
    }
    FencedState {
        accounts,
        logins,
        credential: store
            .login_credential(fx.holder.browser_login_id)
            .await
            .unwrap(),
        documents,
        earlier_slugs: store.earlier_slugs(fx.doc).await.unwrap(),
        content: store.document_content(fx.doc).await.unwrap(),
        transcript: store.transcript(fx.doc, 0, 100).await.unwrap(),
        ownership: vec![
            store.ownership(fx.doc).await.unwrap(),
            store.ownership(fx.other_doc).await.unwrap(),
        ],
        holds: store.link_holds().await.unwrap(),
        model_choice: store.model_choice(fx.doc).await.unwrap(),
        files: vec![
            store
                .attachment(fx.doc, Uuid::from_u128(0xa1))
                .await
                .unwrap(),
            store
                .attachment(fx.doc, Uuid::from_u128(0xa2))
                .await
                .unwrap(),
        ],
        jobs: store.document_jobs(fx.doc, 100).await.unwrap(),
        title: store.title_sidecar(fx.doc).await.unwrap(),
        comments: store.comment_threads(fx.doc, 100).await.unwrap(),
        graph: store.graph_versions(fx.doc).await.unwrap(),
        machines: store.machines_of(fx.holder.account_id).await.unwrap(),
        machine_credential: store.machine_credential(FENCED_MACHINE).await.unwrap(),
        shares: vec![
            store.machine_shares(FENCED_MACHINE).await.unwrap(),
            store.machine_shares(FENCED_MACHINE_2).await.unwrap(),
        ],
        favourite: store.favourite_machine(fx.holder.account_id).await.unwrap(),
        machine_choices: vec![
            store.machine_choice(fx.doc).await.unwrap(),
            store.machine_choice(fx.other_doc).await.unwrap(),
        ],
        planner_credentials: vec![
            store.planner_credential("digest-1").await.unwrap(),
            store.planner_credential("digest-2").await.unwrap(),
        ],
    }
}

async fn fenced_writes_need_the_current_writer_epoch(b: &Backend) {
    let store = b.open().await;
    let a = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    let as_a = store.fenced(Fence::new(a.epoch));
    // Writes under the current epoch go through.
    let fx = fence_fixture(&as_a).await;
    // The lease has expired (at 1 500) but nobody took it over: the epoch is still current, so
    // the holder's writes are still admitted (the store reads no clock; the holder stops by its
    // own deadline).
    as_a.append_transcript(fx.doc, &entry(None, "system", "late but alone", 1_700))
        .await
        .expect("an expired lease nobody took still admits its epoch");

    let b_lease = acquired(
        store
            .acquire_writer_lease("host-b", 1_800, 500)
            .await
            .unwrap(),
    );
    assert!(b_lease.epoch > a.epoch);
    let before = fenced_state(&store, &fx).await;
    let outcomes = every_write(&as_a, &fx).await;
    assert_eq!(outcomes.len(), 64, "every write method is tried");
    for (method, outcome) in &outcomes {
        assert!(
            matches!(outcome, Err(StoreError::Fenced(_))),
            "{method} under the old epoch: expected Fenced, got {outcome:?}"
        );
    }
    assert_eq!(
        fenced_state(&store, &fx).await,
        before,
        "refused writes changed nothing"
    );
    // Reads through the fenced handle are never refused.
    assert_eq!(fenced_state(&as_a, &fx).await, before);
    assert_eq!(as_a.last_transcript_seq(fx.doc).await.unwrap(), 2);
    // Nor are the lease methods: the old holder learns it lost the lease.
    assert_eq!(
        held_elsewhere(
            as_a.acquire_writer_lease("host-a", 1_900, 500)
                .await
                .unwrap()
        ),
        b_lease
    );
    assert_eq!(as_a.renew_writer_lease(&a, 1_900, 500).await.unwrap(), None);

    // The very same writes under the current epoch all go through: the refusals were the
    // fence's, not the arguments'.
    let as_b = store.fenced(Fence::new(b_lease.epoch));
    for (method, outcome) in every_write(&as_b, &fx).await {
        assert!(
            outcome.is_ok(),
            "{method} under the current epoch: {outcome:?}"
        );
    }
    assert_ne!(fenced_state(&store, &fx).await, before);
}

async fn fenced_writes_stop_once_the_lease_is_given_up_or_given_back(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "octo", "plans", "fenced"))
        .await
        .unwrap()
        .id;
    let lease = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 10_000)
            .await
            .unwrap(),
    );
    let fence = Fence::new(lease.epoch);
    let writer = store.fenced(fence.clone());
    let say = |body: &str| entry(None, "system", body, 1_000);
    writer.append_transcript(doc, &say("one")).await.unwrap();

    // Given up by this process: refused at once, through every handle made with the fence.
    fence.give_up();
    for handle in [&writer, &store.fenced(fence.clone())] {
        let refused = handle.append_transcript(doc, &say("after giving up")).await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    }
    assert_eq!(writer.last_transcript_seq(doc).await.unwrap(), 1);

    // The database still names the epoch: a fence that was not given up still writes.
    let again = store.fenced(Fence::new(lease.epoch));
    again.append_transcript(doc, &say("two")).await.unwrap();

    // Given back: nobody holds the lease, so its epoch no longer admits writes.
    store.release_writer_lease(&lease).await.unwrap();
    let refused = again.append_transcript(doc, &say("after release")).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    // Taken again, even by the same holder: a new epoch, and the old one stays refused.
    let next = acquired(
        store
            .acquire_writer_lease("host-a", 1_100, 10_000)
            .await
            .unwrap(),
    );
    assert!(next.epoch > lease.epoch);
    let refused = again.append_transcript(doc, &say("old epoch")).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    store
        .fenced(Fence::new(next.epoch))
        .append_transcript(doc, &say("three"))
        .await
        .unwrap();
    let bodies: Vec<_> = store
        .transcript(doc, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.body)
        .collect();
    assert_eq!(bodies, vec!["one", "two", "three"]);
}

async fn fenced_writes_racing_a_takeover_land_before_it_or_not_at_all(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "octo", "plans", "race"))
        .await
        .unwrap()
        .id;
    let a = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    let as_a = store.fenced(Fence::new(a.epoch));
    let taker = store.clone();
    race_a_takeover(&store, doc, as_a, async move {
        let b_lease = acquired(
            taker
                .acquire_writer_lease("host-b", 1_500, 500)
                .await
                .unwrap(),
        );
        assert!(b_lease.epoch > a.epoch);
    })
    .await;
}

/// [`RACERS`] tasks append to `doc`'s transcript through `as_a` until refused, while
/// `take_over` takes `as_a`'s lease away: every write admitted landed before the takeover, and
/// none begun after it was admitted.
async fn race_a_takeover(
    store: &Arc<dyn Store>,
    doc: Uuid,
    as_a: Arc<dyn Store>,
    take_over: impl std::future::Future<Output = ()>,
) {
    let barrier = Arc::new(Barrier::new(RACERS + 1));
    let taken_over = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut racers = Vec::new();
    for i in 0..RACERS {
        let (as_a, barrier, taken_over) = (as_a.clone(), barrier.clone(), taken_over.clone());
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut written = 0_i64;
            loop {
                let after_takeover = taken_over.load(std::sync::atomic::Ordering::SeqCst);
                let body = format!("racer {i} entry {written}");
                match as_a
                    .append_transcript(doc, &entry(None, "system", &body, 1_000))
                    .await
                {
                    Ok(_) if after_takeover => {
                        panic!("racer {i}: a write begun after the takeover was admitted")
                    }
                    Ok(_) => written += 1,
                    Err(StoreError::Fenced(_)) => return written,
                    Err(e) => panic!("racer {i}: {e}"),
                }
                // The memory store never yields on its own.
                tokio::task::yield_now().await;
            }
        }));
    }
    barrier.wait().await;
    // Let the racers get going, then take the lease over while their writes are in flight.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    take_over.await;
    taken_over.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen_at_takeover = store.last_transcript_seq(doc).await.unwrap();
    let mut written = 0;
    for racer in racers {
        written += racer.await.unwrap();
    }
    assert!(written > 0, "some writes landed before the takeover");
    assert_eq!(
        store.last_transcript_seq(doc).await.unwrap(),
        seen_at_takeover,
        "no write under the old epoch landed after the takeover"
    );
    assert_eq!(seen_at_takeover, written, "every admitted write is stored");
}

// --- document leases (several processes on one database) ------------------------------------

async fn document_leases_are_renewed_together_and_only_those_still_held(b: &Backend) {
    let store = b.open().await;
    // More than one statement's worth, so the batches are seen to join up.
    let count = chopin_store::LEASES_RENEWED_AT_ONCE + 3;
    let mut held = Vec::new();
    for n in 0..count {
        let doc = Uuid::from_u128(0x1ea5_0000 + n as u128);
        let lease = acquired(
            store
                .acquire_document_lease(doc, "host-a", 1_000, 500)
                .await
                .unwrap(),
        );
        held.push((doc, lease));
    }
    // One taken over after it expired, one given back, one renewed under an epoch not its own.
    let taken = held[1].0;
    store
        .acquire_document_lease(taken, "host-b", 1_500, 500)
        .await
        .unwrap();
    store
        .release_document_lease(held[2].0, &held[2].1)
        .await
        .unwrap();
    let mut asked = held.clone();
    asked[3].1.epoch += 1;
    let renewed: std::collections::BTreeMap<Uuid, WriterLease> = store
        .renew_document_leases(&asked, 1_600, 500)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(renewed.len(), count - 3);
    for (i, (doc, lease)) in held.iter().enumerate() {
        match i {
            1..=3 => assert!(!renewed.contains_key(doc), "{i} was renewed"),
            _ => {
                let new = &renewed[doc];
                assert_eq!(
                    (new.holder.as_str(), new.epoch, new.expires_at_ms),
                    ("host-a", lease.epoch, 2_100)
                );
            }
        }
    }
    assert_eq!(
        store.document_lease(taken).await.unwrap().unwrap().holder,
        Some("host-b".into())
    );
    assert_eq!(
        store
            .document_lease(held[3].0)
            .await
            .unwrap()
            .unwrap()
            .expires_at_ms,
        1_500,
        "a lease asked for under another epoch is left as it was"
    );
    assert!(store
        .renew_document_leases(&[], 1_700, 500)
        .await
        .unwrap()
        .is_empty());
}

async fn document_leases_are_taken_renewed_and_given_back_one_document_at_a_time(b: &Backend) {
    let store = b.open().await;
    let (doc, other) = (Uuid::from_u128(0xd1), Uuid::from_u128(0xd2));
    assert_eq!(store.document_lease(doc).await.unwrap(), None);
    // The first acquisition makes the row at epoch 1; a document need not exist to be leased.
    let a = acquired(
        store
            .acquire_document_lease(doc, "host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    assert_eq!(
        (a.holder.as_str(), a.epoch, a.expires_at_ms),
        ("host-a", 1, 1_500)
    );
    // Held and unexpired: another holder is told who holds it, and nothing changes.
    assert_eq!(
        held_elsewhere(
            store
                .acquire_document_lease(doc, "host-b", 1_499, 500)
                .await
                .unwrap()
        ),
        a
    );
    // Each document's lease is its own: another document, and the writer lease, are free.
    let b_other = acquired(
        store
            .acquire_document_lease(other, "host-b", 1_200, 500)
            .await
            .unwrap(),
    );
    assert_eq!(b_other.epoch, 1);
    assert_eq!(
        acquired(
            store
                .acquire_writer_lease("host-c", 1_200, 500)
                .await
                .unwrap()
        )
        .epoch,
        1
    );
    // A renewal by the unexpired holder keeps the epoch, by acquiring again or renewing.
    let again = acquired(
        store
            .acquire_document_lease(doc, "host-a", 1_400, 500)
            .await
            .unwrap(),
    );
    assert_eq!((again.epoch, again.expires_at_ms), (1, 1_900));
    let renewed = store
        .renew_document_leases(&[(doc, again.clone())], 1_800, 500)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    let (renewed_doc, renewed) = renewed.into_iter().next().unwrap();
    assert_eq!(renewed_doc, doc);
    assert_eq!((renewed.epoch, renewed.expires_at_ms), (1, 2_300));
    assert_eq!(
        store.document_lease(doc).await.unwrap(),
        Some(DocumentLeaseRow {
            holder: Some("host-a".into()),
            epoch: 1,
            expires_at_ms: 2_300
        })
    );
    // Expired: another holder takes it at the next epoch, and the old one can neither renew
    // nor give it back.
    let b = acquired(
        store
            .acquire_document_lease(doc, "host-b", 2_300, 500)
            .await
            .unwrap(),
    );
    assert_eq!((b.holder.as_str(), b.epoch), ("host-b", 2));
    assert_eq!(
        store
            .renew_document_leases(&[(doc, renewed.clone())], 2_301, 500)
            .await
            .unwrap(),
        vec![]
    );
    store.release_document_lease(doc, &renewed).await.unwrap();
    assert_eq!(
        store.document_lease(doc).await.unwrap().unwrap().holder,
        Some("host-b".into())
    );
    // Given back: the epoch stays and nobody holds it, so the next holder need not wait for
    // the expiry — and takes it at the next epoch, even the same holder.
    store.release_document_lease(doc, &b).await.unwrap();
    assert_eq!(
        store.document_lease(doc).await.unwrap(),
        Some(DocumentLeaseRow {
            holder: None,
            epoch: 2,
            expires_at_ms: 0
        })
    );
    let b_again = acquired(
        store
            .acquire_document_lease(doc, "host-b", 2_400, 500)
            .await
            .unwrap(),
    );
    assert_eq!(b_again.epoch, 3);
    // The other document's lease was never touched.
    assert_eq!(
        store.document_lease(other).await.unwrap().unwrap().epoch,
        b_other.epoch
    );
}

async fn document_fenced_writes_need_the_current_epoch_of_their_documents_lease(b: &Backend) {
    let store = b.open().await;
    let fx = fence_fixture(&store).await;
    let a = acquired(
        store
            .acquire_document_lease(fx.doc, "host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    let as_a = store.fenced(Fence::for_document(fx.doc, a.epoch));
    // The same process also serves another document, under that document's own lease.
    let a_other = acquired(
        store
            .acquire_document_lease(fx.other_doc, "host-a", 1_000, 60_000)
            .await
            .unwrap(),
    );
    let as_a_other = store.fenced(Fence::for_document(fx.other_doc, a_other.epoch));
    as_a.append_transcript(fx.doc, &entry(None, "system", "mine", 1_100))
        .await
        .expect("the holder's writes go through");
    // Neither the writer lease nor another document's lease admits a document fence.
    let w = acquired(
        store
            .acquire_writer_lease("host-a", 1_000, 60_000)
            .await
            .unwrap(),
    );
    let unleased = store.fenced(Fence::for_document(Uuid::from_u128(0xd9), w.epoch));
    let refused = unleased
        .append_transcript(fx.doc, &entry(None, "system", "no lease", 1_100))
        .await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");

    // Another process takes the document over once the lease expired.
    let b_lease = acquired(
        store
            .acquire_document_lease(fx.doc, "host-b", 1_800, 500)
            .await
            .unwrap(),
    );
    assert!(b_lease.epoch > a.epoch);
    let before = fenced_state(&store, &fx).await;
    let outcomes = every_write(&as_a, &fx).await;
    assert_eq!(outcomes.len(), 64, "every write method is tried");
    for (method, outcome) in &outcomes {
        match outcome {
            Err(StoreError::Fenced(words)) => assert!(
                words.contains(&fx.doc.to_string()) && words.contains("epoch 2"),
                "{method}: the refusal names the document's lease: {words}"
            ),
            other => {
                panic!("{method} under the document's old epoch: expected Fenced, got {other:?}")
            }
        }
    }
    assert_eq!(
        fenced_state(&store, &fx).await,
        before,
        "refused writes changed nothing"
    );
    // The process still writes the document it still holds.
    as_a_other
        .append_transcript(fx.other_doc, &entry(None, "system", "still mine", 1_900))
        .await
        .expect("another document's lease is untouched by the takeover");
    // The very same writes under the document's current epoch all go through.
    let as_b = store.fenced(Fence::for_document(fx.doc, b_lease.epoch));
    for (method, outcome) in every_write(&as_b, &fx).await {
        assert!(
            outcome.is_ok(),
            "{method} under the current epoch: {outcome:?}"
        );
    }
    assert_ne!(fenced_state(&store, &fx).await, before);
    // Given back: nobody holds the lease, so its epoch admits no write.
    store
        .release_document_lease(fx.doc, &b_lease)
        .await
        .unwrap();
    let refused = as_b
        .append_transcript(fx.doc, &entry(None, "system", "after release", 2_000))
        .await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
}

async fn document_fenced_writes_racing_a_takeover_land_before_it_or_not_at_all(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "octo", "plans", "race"))
        .await
        .unwrap()
        .id;
    let a = acquired(
        store
            .acquire_document_lease(doc, "host-a", 1_000, 500)
            .await
            .unwrap(),
    );
    let as_a = store.fenced(Fence::for_document(doc, a.epoch));
    let taker = store.clone();
    race_a_takeover(&store, doc, as_a, async move {
        let b_lease = acquired(
            taker
                .acquire_document_lease(doc, "host-b", 1_500, 500)
                .await
                .unwrap(),
        );
        assert!(b_lease.epoch > a.epoch);
    })
    .await;
}

/// The writes [`every_write`] makes that change one document's state, as [`Routed`] routes them
/// through that document's handle: by the document they name, or by the job, build or run.
const DOCUMENTS_WRITES: [&str; 47] = [
    "create_document",
    // A request key about a document (its `document`), fenced by that document's lease.
    "claim_request",
    "answer_request",
    "release_request",
    "set_archived",
    "rename_document",
    "advance_revision",
    "append_update",
    "append_updates",
    "commit_plan_edit",
    "write_checkpoint",
    "reset_content",
    "append_transcript",
    "claim_ownership",
    "release_ownership",
    "put_link_hold",
    "end_handover",
    "delete_link_hold",
    "put_model_choice",
    "clear_model_choice",
    "pause_participation",
    "resume_participation",
    "start_comment",
    "reply_comment",
    "set_comment_result",
    "resolve_comment",
    "put_attachment",
    "take_back_attachment",
    "enqueue_job",
    "claim_job",
    "renew_job_claim",
    "set_job_progress",
    "settle_job",
    "cancel_job",
    "change_graph",
    "draft_title",
    "choose_machine",
    "choose_default_machine",
    "withdraw_default_machine",
    "approve_and_queue",
    "pick_up_build",
    "fail_build",
    "queue_build",
    "queue_rebuild",
    "land_rebuild",
    "start_implementation",
    "report_implementation",
];

/// The documents' handles a test serves, each reporting its writes to one log.
#[derive(Default)]
struct Handles(std::sync::Mutex<std::collections::BTreeMap<Uuid, Arc<dyn Store>>>);

impl DocumentHandles for Handles {
    fn handle(&self, document_id: Uuid) -> Option<Arc<dyn Store>> {
        self.0.lock().unwrap().get(&document_id).cloned()
    }
}

/// A hook logging the writes that reach one document's handle.
struct Writes(Uuid, Arc<std::sync::Mutex<Vec<(Uuid, &'static str)>>>);

impl Hook for Writes {
    fn call(&self, call: Call) {
        if call.write {
            self.1.lock().unwrap().push((self.0, call.method));
        }
    }
}

async fn routed_writes_reach_their_documents_own_handle_and_sweeps_of_every_document_are_refused(
    b: &Backend,
) {
    let store = b.open().await;
    let fx = fence_fixture(&store).await;
    let handles = Arc::new(Handles::default());
    let routed: Arc<dyn Store> = Arc::new(Routed::new(store.clone(), handles.clone()));
    let documents_log: Arc<std::sync::Mutex<Vec<(Uuid, &'static str)>>> = Arc::default();
    let new_id = new_doc(73, "octo", "fenced", "new").id;
    for doc in [fx.doc, fx.other_doc, new_id] {
        let lease = acquired(
            store
                .acquire_document_lease(doc, "host-a", 1_000, 60_000)
                .await
                .unwrap(),
        );
        let handle: Arc<dyn Store> = Arc::new(Instrumented::new(
            store.fenced(Fence::for_document(doc, lease.epoch)),
            Writes(doc, documents_log.clone()),
        ));
        handles.0.lock().unwrap().insert(doc, handle);
    }
    let mut refused = Vec::new();
    for (method, outcome) in every_write(&routed, &fx).await {
        match outcome {
            Ok(()) => {}
            Err(StoreError::Fenced(words)) => {
                assert!(
                    words.contains("one document at a time"),
                    "{method}: {words}"
                );
                refused.push(method);
            }
            Err(e) => panic!("{method}: {e}"),
        }
    }
    assert_eq!(
        refused,
        vec![
            "interrupt_running_jobs",
            "expire_builds",
            "clear_unheld_ownership",
            "clear_all_ownership",
        ],
        "only the sweeps of every document are refused"
    );
    let log = documents_log.lock().unwrap().clone();
    let reached: std::collections::BTreeSet<&str> = log.iter().map(|(_, m)| *m).collect();
    // Each through its own document's handle.
    let through = |method: &str| -> std::collections::BTreeSet<Uuid> {
        log.iter()
            .filter(|(_, m)| *m == method)
            .map(|(d, _)| *d)
            .collect()
    };
    assert_eq!(through("create_document"), [new_id].into());
    assert_eq!(through("append_transcript"), [fx.doc].into());
    assert_eq!(through("claim_job"), [fx.doc].into());
    assert_eq!(through("claim_request"), [fx.doc].into());
    let expected: std::collections::BTreeSet<&str> = DOCUMENTS_WRITES.into_iter().collect();
    assert_eq!(
        reached, expected,
        "every write of a document's state, and only those, went through its document's handle"
    );
}

async fn routed_writes_of_a_document_served_elsewhere_are_refused_and_change_nothing(b: &Backend) {
    let store = b.open().await;
    let fx = fence_fixture(&store).await;
    store
        .enqueue_job(&job_of(fx.doc, 0x70b9, "t", "k-9", "{}", 5_000))
        .await
        .unwrap();
    // Another process serves the document; this one serves nothing.
    acquired(
        store
            .acquire_document_lease(fx.doc, "host-b", 1_000, 60_000)
            .await
            .unwrap(),
    );
    let routed: Arc<dyn Store> = Arc::new(Routed::new(store.clone(), Arc::new(Handles::default())));
    let before = fenced_state(&store, &fx).await;
    let said = routed
        .append_transcript(fx.doc, &entry(None, "system", "not mine", 5_000))
        .await;
    assert!(
        matches!(&said, Err(StoreError::Fenced(w)) if w.contains(&fx.doc.to_string())),
        "{said:?}"
    );
    let queued = routed
        .queue_transcript(fx.doc, &entry(None, "system", "not mine", 5_000))
        .await;
    assert!(matches!(queued, Err(StoreError::Fenced(_))));
    // A write named by a row of the document (a job) is routed by that row's document.
    let claimed = routed
        .claim_job(Uuid::from_u128(0x70b9), "host-a", 5_000, 30_000)
        .await;
    assert!(matches!(claimed, Err(StoreError::Fenced(_))), "{claimed:?}");
    let created = routed
        .create_document(&new_doc(74, "octo", "plans", "elsewhere"))
        .await;
    assert!(matches!(created, Err(StoreError::Fenced(_))), "{created:?}");
    assert_eq!(fenced_state(&store, &fx).await, before, "nothing changed");
    assert_eq!(
        store
            .job(Uuid::from_u128(0x70b9))
            .await
            .unwrap()
            .unwrap()
            .state,
        JobState::Pending
    );
    // What is no document's is written by any process.
    routed.upsert_account(75, "newcomer", 5_000).await.unwrap();
    // Reads are never routed.
    assert_eq!(
        routed.last_transcript_seq(fx.doc).await.unwrap(),
        before.transcript.len() as i64
    );
}

async fn routed_sweeps_of_one_document_go_through_its_handle(b: &Backend) {
    let store = b.open().await;
    let lisa = member(&store, 89, "lisa").await;
    let doc = store
        .create_document(&new_doc(99, "octo", "sweeps", "routed"))
        .await
        .unwrap()
        .id;
    claimed(store.claim_ownership(doc, &lisa, 1_000).await.unwrap());
    let handles = Arc::new(Handles::default());
    let routed: Arc<dyn Store> = Arc::new(Routed::new(store.clone(), handles.clone()));
    // Not served here: refused, and the owner stays.
    let refused = routed.clear_unheld_ownership(Reach::Document(doc)).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    assert!(store.ownership(doc).await.unwrap().holder.is_some());
    // Served here: through the document's handle.
    let lease = acquired(
        store
            .acquire_document_lease(doc, "host-a", 1_000, 60_000)
            .await
            .unwrap(),
    );
    handles
        .0
        .lock()
        .unwrap()
        .insert(doc, store.fenced(Fence::for_document(doc, lease.epoch)));
    assert_eq!(
        routed
            .clear_unheld_ownership(Reach::Document(doc))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        routed.stop_unheld_runs(Reach::Document(doc)).await.unwrap(),
        0
    );
    assert_eq!(
        routed
            .interrupt_running_jobs("interrupted", 2_000, Reach::Document(doc))
            .await
            .unwrap(),
        0
    );
    // Every document at once: refused even then.
    let refused = routed.stop_unheld_runs(Reach::Every).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
}

async fn routed_writes_of_a_child_document_go_through_its_roots_handle(b: &Backend) {
    let store = b.open().await;
    let root = store
        .create_document(&new_doc(96, "octo", "trees", "root"))
        .await
        .unwrap()
        .id;
    let log: Arc<std::sync::Mutex<Vec<(Uuid, &'static str)>>> = Arc::default();
    let handles = Arc::new(Handles::default());
    let routed: Arc<dyn Store> = Arc::new(Routed::new(store.clone(), handles.clone()));
    // Nobody serves the tree: a child cannot be made under the root, nor a child's line said.
    let refused = routed
        .create_document(&child_doc(97, "octo", "trees", "early", root))
        .await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    let lease = acquired(
        store
            .acquire_document_lease(root, "host-a", 1_000, 60_000)
            .await
            .unwrap(),
    );
    handles.0.lock().unwrap().insert(
        root,
        Arc::new(Instrumented::new(
            store.fenced(Fence::for_document(root, lease.epoch)),
            Writes(root, log.clone()),
        )),
    );
    // The root's lease serves its children: made, and written, through the root's handle.
    let child = routed
        .create_document(&child_doc(98, "octo", "trees", "child", root))
        .await
        .unwrap()
        .id;
    routed
        .append_transcript(child, &entry(None, "system", "a child's line", 2_000))
        .await
        .unwrap();
    assert_eq!(
        log.lock().unwrap().clone(),
        vec![(root, "create_document"), (root, "append_transcript")]
    );
    // Another process takes the tree over: this one's writes of the child are refused.
    store.release_document_lease(root, &lease).await.unwrap();
    acquired(
        store
            .acquire_document_lease(root, "host-b", 3_000, 60_000)
            .await
            .unwrap(),
    );
    let late = routed
        .append_transcript(child, &entry(None, "system", "too late", 4_000))
        .await;
    assert!(matches!(late, Err(StoreError::Fenced(_))), "{late:?}");
    assert_eq!(store.last_transcript_seq(child).await.unwrap(), 1);
}

async fn document_fenced_writes_of_many_documents_at_once_are_each_checked_against_their_own_lease(
    b: &Backend,
) {
    let store = b.open().await;
    let mut served = Vec::new();
    for n in 0..12_u128 {
        let doc = store
            .create_document(&new_doc(200 + n, "octo", "many", &format!("d{n}")))
            .await
            .unwrap()
            .id;
        let lease = acquired(
            store
                .acquire_document_lease(doc, "host-a", 1_000, 500)
                .await
                .unwrap(),
        );
        served.push((doc, store.fenced(Fence::for_document(doc, lease.epoch))));
    }
    // Every third document is taken over by another process.
    for (doc, _) in served.iter().step_by(3) {
        acquired(
            store
                .acquire_document_lease(*doc, "host-b", 2_000, 500)
                .await
                .unwrap(),
        );
    }
    // All at once, so that the documents' appends share batches.
    let barrier = Arc::new(Barrier::new(served.len()));
    let mut writers = Vec::new();
    for (n, (doc, handle)) in served.iter().cloned().enumerate() {
        let barrier = barrier.clone();
        writers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut outcomes = Vec::new();
            for k in 0..5 {
                let body = format!("document {n} entry {k}");
                outcomes.push(
                    handle
                        .append_transcript(doc, &entry(None, "system", &body, 2_000))
                        .await,
                );
            }
            outcomes
        }));
    }
    for (n, writer) in writers.into_iter().enumerate() {
        let (doc, _) = served[n];
        let outcomes = writer.await.unwrap();
        if n % 3 == 0 {
            for outcome in &outcomes {
                assert!(
                    matches!(outcome, Err(StoreError::Fenced(w)) if w.contains(&doc.to_string())),
                    "document {n}, taken over: {outcome:?}"
                );
            }
            assert_eq!(store.last_transcript_seq(doc).await.unwrap(), 0);
        } else {
            for outcome in &outcomes {
                assert!(outcome.is_ok(), "document {n}, still held: {outcome:?}");
            }
            assert_eq!(store.last_transcript_seq(doc).await.unwrap(), 5);
        }
    }
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

// --- document content ------------------------------------------------------------------------

fn committed(commit: PlanCommit) -> (i64, i64) {
    match commit {
        PlanCommit::Committed { plan_revision, seq } => (plan_revision, seq),
        PlanCommit::Stale { current } => panic!("expected Committed, got Stale at {current}"),
        PlanCommit::NotOwner => panic!("expected Committed, got NotOwner"),
    }
}

/// `(plan_revision, storage_revision, yjs_epoch)` of a stored document.
async fn counters(store: &Arc<dyn Store>, id: Uuid) -> (i64, i64, i64) {
    let doc = store.document(id).await.unwrap().expect("document");
    (doc.plan_revision, doc.storage_revision, doc.yjs_epoch)
}

/// Seqs of the journalled updates in `content`, in the order returned.
fn seqs_of(content: &DocumentContent) -> Vec<i64> {
    content.updates.iter().map(|(seq, _)| *seq).collect()
}

fn update(n: i64) -> Vec<u8> {
    format!("update-{n}").into_bytes()
}

async fn new_document_has_empty_content_at_epoch_zero(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    assert_eq!(doc.yjs_epoch, 0);
    assert_eq!(store.document(doc.id).await.unwrap(), Some(doc.clone()));
    assert_eq!(
        store.document_content(doc.id).await.unwrap(),
        DocumentContent {
            checkpoint: None,
            updates: vec![],
            yjs_epoch: 0,
        }
    );
    assert_eq!(
        store.earlier_slugs(doc.id).await.unwrap(),
        Vec::<String>::new()
    );
}

async fn updates_are_numbered_from_one_and_advance_storage_revision(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let other = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    for n in 1..=3 {
        assert_eq!(
            store
                .append_update(doc.id, &update(n), 100 + n)
                .await
                .unwrap(),
            n
        );
        assert_eq!(
            counters(&store, doc.id).await,
            (0, n, 0),
            "each append advances only the storage revision"
        );
    }
    assert_eq!(
        store.document_content(doc.id).await.unwrap(),
        DocumentContent {
            checkpoint: None,
            updates: (1..=3).map(|n| (n, update(n))).collect(),
            yjs_epoch: 0,
        }
    );
    // Each document counts on its own; an empty update is stored as given.
    assert_eq!(store.append_update(other.id, b"", 5).await.unwrap(), 1);
    assert_eq!(
        store.document_content(other.id).await.unwrap().updates,
        vec![(1, Vec::new())]
    );
    assert_eq!(counters(&store, other.id).await, (0, 1, 0));
    assert_eq!(
        seqs_of(&store.document_content(doc.id).await.unwrap()),
        [1, 2, 3]
    );
}

/// The pipelined journal's write: a document's queued Yjs updates in one job, at consecutive
/// seqs after any appended alone, advancing the storage revision by as many; an unknown document
/// journals none of them, and no updates is no write.
async fn updates_appended_together_take_consecutive_seqs_all_or_none(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    assert_eq!(store.append_update(doc.id, &update(1), 1).await.unwrap(), 1);
    let owned: Vec<Vec<u8>> = (2..=4).map(update).collect();
    let batch: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    assert_eq!(
        store.append_updates(doc.id, &batch, 2).await.unwrap(),
        vec![2, 3, 4]
    );
    assert_eq!(counters(&store, doc.id).await, (0, 4, 0));
    assert_eq!(
        store.document_content(doc.id).await.unwrap().updates,
        (1..=4).map(|n| (n, update(n))).collect::<Vec<_>>()
    );
    assert_eq!(
        store.append_updates(doc.id, &[], 3).await.unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(counters(&store, doc.id).await, (0, 4, 0));
    assert!(is_not_found(
        store.append_updates(Uuid::new_v4(), &batch, 4).await
    ));
    assert_eq!(store.append_update(doc.id, &update(5), 5).await.unwrap(), 5);
}

async fn update_concurrent_appends_are_gap_free(b: &Backend) {
    const PER_TASK: usize = 2;
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
            let mut appended = Vec::new();
            for j in 0..PER_TASK {
                let bytes = format!("{t}-{j}").into_bytes();
                let seq = store.append_update(doc.id, &bytes, 1).await.unwrap();
                appended.push((seq, bytes));
            }
            appended
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let appended = task.await.unwrap();
        assert!(
            appended.windows(2).all(|w| w[0].0 < w[1].0),
            "one task's appends keep its order"
        );
        all.extend(appended);
    }
    all.sort();
    let total = (RACERS * PER_TASK) as i64;
    assert_eq!(
        all.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>(),
        "distinct, gap-free seqs"
    );
    let content = store.document_content(doc.id).await.unwrap();
    assert_eq!(
        content.updates, all,
        "each update stored under the seq it was given"
    );
    assert_eq!(counters(&store, doc.id).await, (0, total, 0));
}

/// Chat entries, journal entries and claims to several documents and to an unknown one, all at
/// once (the SQL backends commit such writes together): each caller gets what it would have
/// got alone — gap-free seqs per document, one claim each, `NotFound` for the unknown document
/// only — and everything acknowledged is stored.
async fn writes_of_every_kind_at_once_are_each_answered_as_if_alone(b: &Backend) {
    const DOCUMENTS: u128 = 4;
    const PER_DOCUMENT: i64 = 8;
    let store = b.open().await;
    let holder = member(&store, 7, "mona").await;
    let mut ids = Vec::new();
    for n in 0..DOCUMENTS {
        let doc = new_doc(n + 1, "o", "r", &format!("s{n}"));
        ids.push(store.create_document(&doc).await.unwrap().id);
    }
    let unknown = Uuid::from_u128(0xdead);
    let barrier = Arc::new(Barrier::new(ids.len() + 1));
    let mut tasks = Vec::new();
    for id in ids.iter().copied().chain([unknown]) {
        let (store, barrier, holder) = (store.clone(), barrier.clone(), holder.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut writes = Vec::new();
            for j in 0..PER_DOCUMENT {
                let (said, bytes) = (entry(None, "member", &format!("{j}"), 1), update(j));
                let (chat, journal) = tokio::join!(
                    store.append_transcript(id, &said),
                    store.append_update(id, &bytes, 1),
                );
                writes.push((chat.map(|e| e.seq), journal));
            }
            let claim = store.claim_ownership(id, &holder, 1).await;
            (id, writes, claim)
        }));
    }
    for task in tasks {
        let (id, writes, claim) = task.await.unwrap();
        if id == unknown {
            assert!(writes
                .into_iter()
                .all(|(c, u)| is_not_found(c) && is_not_found(u)));
            assert!(is_not_found(claim));
            continue;
        }
        let expected: Vec<(i64, i64)> = (1..=PER_DOCUMENT).map(|s| (s, s)).collect();
        let got: Vec<(i64, i64)> = writes
            .into_iter()
            .map(|(c, u)| (c.unwrap(), u.unwrap()))
            .collect();
        assert_eq!(
            got, expected,
            "one caller's writes keep its order, gap-free"
        );
        assert_eq!(claimed(claim.unwrap()).generation, 1);
        assert_eq!(
            store.transcript(id, 0, 100).await.unwrap().len(),
            PER_DOCUMENT as usize
        );
        assert_eq!(
            seqs_of(&store.document_content(id).await.unwrap()),
            (1..=PER_DOCUMENT).collect::<Vec<_>>()
        );
    }
}

/// A sign-in that finds the account as it is stored writes nothing: through a handle whose
/// fence was given up (which refuses every write) it still answers with the account; a changed
/// login is a write, and is refused there.
async fn account_upsert_writes_only_when_the_login_changes(b: &Backend) {
    let store = b.open().await;
    let stored = store.upsert_account(42, "mona", 1_000).await.unwrap();
    let fence = Fence::new(1);
    fence.give_up();
    let fenced = store.fenced(fence);
    assert_eq!(
        fenced.upsert_account(42, "mona", 2_000).await.unwrap(),
        stored
    );
    assert!(matches!(
        fenced.upsert_account(42, "Mona", 2_000).await,
        Err(StoreError::Fenced(_))
    ));
    assert!(matches!(
        fenced.upsert_account(43, "lisa", 2_000).await,
        Err(StoreError::Fenced(_))
    ));
    assert_eq!(store.account(stored.id).await.unwrap(), Some(stored));
}

async fn plan_edit_commits_only_at_the_expected_revision(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    assert_eq!(
        committed(
            store
                .commit_plan_edit(doc.id, 0, None, b"plan-1", 10)
                .await
                .unwrap()
        ),
        (1, 1)
    );
    assert_eq!(counters(&store, doc.id).await, (1, 1, 0));
    // A plain append shares the seq numbering and moves only the storage revision.
    assert_eq!(store.append_update(doc.id, b"typing", 11).await.unwrap(), 2);
    assert_eq!(counters(&store, doc.id).await, (1, 2, 0));

    for stale_at in [0, 2, 7] {
        assert_eq!(
            store
                .commit_plan_edit(doc.id, stale_at, None, b"late", 12)
                .await
                .unwrap(),
            PlanCommit::Stale { current: 1 },
            "expected {stale_at}"
        );
    }
    assert_eq!(
        counters(&store, doc.id).await,
        (1, 2, 0),
        "a stale commit changes nothing"
    );
    assert_eq!(
        committed(
            store
                .commit_plan_edit(doc.id, 1, None, b"plan-2", 13)
                .await
                .unwrap()
        ),
        (2, 3)
    );
    assert_eq!(counters(&store, doc.id).await, (2, 3, 0));
    assert_eq!(
        store.document_content(doc.id).await.unwrap().updates,
        vec![
            (1, b"plan-1".to_vec()),
            (2, b"typing".to_vec()),
            (3, b"plan-2".to_vec()),
        ],
        "no stale update was journalled"
    );
    // The plan revision guard is the same one `advance_revision` uses.
    assert_eq!(
        store
            .advance_revision(doc.id, RevisionKind::Plan, 2)
            .await
            .unwrap(),
        Advance::Advanced(3)
    );
    assert_eq!(
        store
            .commit_plan_edit(doc.id, 2, None, b"late", 14)
            .await
            .unwrap(),
        PlanCommit::Stale { current: 3 }
    );
}

/// A Planner turn's edit is made under the ownership it started with (issue 16: "`commit_plan_edit`
/// under the turn's generation"): it lands only while storage names that account at that
/// generation — for a child's edit, the root's ownership (ISO-30) — and otherwise changes nothing.
async fn plan_edit_under_an_owner_guard_lands_only_while_storage_names_that_owner(b: &Backend) {
    let store = b.open().await;
    let root = store
        .create_document(&new_doc(1, "o", "r", "root"))
        .await
        .unwrap();
    let child = store
        .create_document(&child_doc(2, "o", "r", "child", root.id))
        .await
        .unwrap();
    let alice = member(&store, 1, "alice").await;
    let bob = member(&store, 2, "bob").await;
    let guard = |generation: i64, holder: &Holder| OwnerGuard {
        document_id: root.id,
        generation,
        account_id: holder.account_id,
    };
    // Nobody holds the root yet.
    assert_eq!(
        store
            .commit_plan_edit(root.id, 0, Some(&guard(0, &alice)), b"none", 1)
            .await
            .unwrap(),
        PlanCommit::NotOwner
    );
    claimed(store.claim_ownership(root.id, &alice, 2).await.unwrap());
    assert_eq!(
        committed(
            store
                .commit_plan_edit(root.id, 0, Some(&guard(1, &alice)), b"root-1", 3)
                .await
                .unwrap()
        ),
        (1, 1)
    );
    // A child's edit is guarded by its root's ownership.
    assert_eq!(
        committed(
            store
                .commit_plan_edit(child.id, 0, Some(&guard(1, &alice)), b"child-1", 4)
                .await
                .unwrap()
        ),
        (1, 1)
    );
    for (wrong, why) in [
        (guard(2, &alice), "a generation storage has not reached"),
        (guard(0, &alice), "an older generation"),
        (guard(1, &bob), "another account"),
    ] {
        assert_eq!(
            store
                .commit_plan_edit(root.id, 1, Some(&wrong), b"wrong", 5)
                .await
                .unwrap(),
            PlanCommit::NotOwner,
            "{why}"
        );
    }
    // The owner is checked before the revision.
    assert_eq!(
        store
            .commit_plan_edit(root.id, 0, Some(&guard(1, &bob)), b"stale", 5)
            .await
            .unwrap(),
        PlanCommit::NotOwner
    );
    assert_eq!(
        counters(&store, root.id).await,
        (1, 1, 0),
        "nothing changed"
    );
    // Released: the turn's guard no longer holds, even for the same account claiming again.
    store.release_ownership(root.id, 1).await.unwrap();
    assert_eq!(
        store
            .commit_plan_edit(root.id, 1, Some(&guard(1, &alice)), b"released", 6)
            .await
            .unwrap(),
        PlanCommit::NotOwner
    );
    claimed(store.claim_ownership(root.id, &alice, 7).await.unwrap());
    assert_eq!(
        store
            .commit_plan_edit(root.id, 1, Some(&guard(1, &alice)), b"old-turn", 8)
            .await
            .unwrap(),
        PlanCommit::NotOwner
    );
    assert_eq!(
        committed(
            store
                .commit_plan_edit(root.id, 1, Some(&guard(2, &alice)), b"root-2", 9)
                .await
                .unwrap()
        ),
        (2, 2)
    );
    assert_eq!(
        store.document_content(root.id).await.unwrap().updates,
        vec![(1, b"root-1".to_vec()), (2, b"root-2".to_vec())],
        "no refused edit was journalled"
    );
    assert!(is_not_found(
        store
            .commit_plan_edit(
                Uuid::from_u128(0xdead),
                0,
                Some(&guard(2, &alice)),
                b"u",
                10
            )
            .await
    ));
}

/// The guard is atomic with the edit: an edit racing a release of its ownership (followed at
/// once by another account's claim and write) lands before the release or not at all — never
/// after the new owner's write.
async fn plan_edit_racing_a_release_lands_before_it_or_not_at_all(b: &Backend) {
    const ROUNDS: i64 = 12;
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let alice = member(&store, 1, "alice").await;
    let bob = member(&store, 2, "bob").await;
    let (mut landed, mut refused) = (0, 0);
    for round in 0..ROUNDS {
        let owner = if round % 2 == 0 { &alice } else { &bob };
        let next = if round % 2 == 0 { &bob } else { &alice };
        let own = claimed(store.claim_ownership(doc.id, owner, 1).await.unwrap());
        let revision = store.document(doc.id).await.unwrap().unwrap().plan_revision;
        let guard = OwnerGuard {
            document_id: doc.id,
            generation: own.generation,
            account_id: owner.account_id,
        };
        let barrier = Arc::new(Barrier::new(2));
        let edit = {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .commit_plan_edit(doc.id, revision, Some(&guard), b"guarded", 2)
                    .await
                    .unwrap()
            })
        };
        let handover = {
            let (store, barrier, next) = (store.clone(), barrier.clone(), next.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .release_ownership(doc.id, own.generation)
                    .await
                    .unwrap();
                claimed(store.claim_ownership(doc.id, &next, 3).await.unwrap());
                store.append_update(doc.id, b"new-owner", 4).await.unwrap()
            })
        };
        let (edit, marker) = (edit.await.unwrap(), handover.await.unwrap());
        match edit {
            PlanCommit::Committed { seq, .. } => {
                assert!(seq < marker, "round {round}: the edit (seq {seq}) landed after the new owner's write (seq {marker})");
                landed += 1;
            }
            PlanCommit::NotOwner => refused += 1,
            PlanCommit::Stale { current } => panic!("round {round}: stale at {current}"),
        }
        let own = store.ownership(doc.id).await.unwrap();
        store
            .release_ownership(doc.id, own.generation)
            .await
            .unwrap();
    }
    assert_eq!(landed + refused, ROUNDS);
}

async fn plan_edit_race_exactly_one_commits(b: &Backend) {
    const ROUNDS: i64 = 3;
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let mut winners = Vec::new();
    for expected in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(PLAN_COMMITTERS));
        let mut tasks = Vec::new();
        for c in 0..PLAN_COMMITTERS {
            let (store, barrier) = (store.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let bytes = format!("round-{expected}-committer-{c}").into_bytes();
                barrier.wait().await;
                let outcome = store
                    .commit_plan_edit(doc.id, expected, None, &bytes, 1)
                    .await
                    .unwrap();
                (outcome, bytes)
            }));
        }
        let mut round_winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (PlanCommit::Committed { plan_revision, seq }, bytes) => {
                    assert_eq!(plan_revision, expected + 1);
                    round_winners.push((seq, bytes));
                }
                (PlanCommit::Stale { current }, _) => assert_eq!(current, expected + 1),
                (PlanCommit::NotOwner, _) => panic!("no guard was given"),
            }
        }
        assert_eq!(
            round_winners.len(),
            1,
            "from plan revision {expected}: exactly one of {PLAN_COMMITTERS} commits"
        );
        winners.extend(round_winners);
    }
    assert_eq!(
        counters(&store, doc.id).await,
        (ROUNDS, ROUNDS, 0),
        "one plan and one storage advance per round"
    );
    assert_eq!(
        store.document_content(doc.id).await.unwrap().updates,
        winners,
        "only the winners' updates are journalled"
    );
    assert_eq!(
        winners.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        (1..=ROUNDS).collect::<Vec<_>>()
    );
}

async fn checkpoint_prunes_the_journal_and_seqs_keep_growing(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for n in 1..=5 {
        store.append_update(doc.id, &update(n), n).await.unwrap();
    }
    store.write_checkpoint(doc.id, 3, b"state-3").await.unwrap();
    assert_eq!(
        store.document_content(doc.id).await.unwrap(),
        DocumentContent {
            checkpoint: Some(Checkpoint {
                upto_seq: 3,
                state: b"state-3".to_vec(),
                yjs_epoch: 0,
            }),
            updates: vec![(4, update(4)), (5, update(5))],
            yjs_epoch: 0,
        }
    );
    assert_eq!(
        counters(&store, doc.id).await,
        (0, 5, 0),
        "a checkpoint changes no counter"
    );
    assert_eq!(store.append_update(doc.id, &update(6), 6).await.unwrap(), 6);

    // A checkpoint covering everything empties the journal; numbering carries on.
    store.write_checkpoint(doc.id, 6, b"state-6").await.unwrap();
    let content = store.document_content(doc.id).await.unwrap();
    assert_eq!(content.updates, vec![]);
    assert_eq!(
        content.checkpoint.map(|c| (c.upto_seq, c.state)),
        Some((6, b"state-6".to_vec()))
    );
    assert_eq!(store.append_update(doc.id, &update(7), 7).await.unwrap(), 7);
    assert_eq!(
        committed(
            store
                .commit_plan_edit(doc.id, 0, None, &update(8), 8)
                .await
                .unwrap()
        ),
        (1, 8)
    );
    assert_eq!(
        seqs_of(&store.document_content(doc.id).await.unwrap()),
        [7, 8]
    );
}

async fn stale_checkpoint_is_ignored(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for n in 1..=6 {
        store.append_update(doc.id, &update(n), n).await.unwrap();
    }
    store.write_checkpoint(doc.id, 4, b"state-4").await.unwrap();
    let before = store.document_content(doc.id).await.unwrap();
    // Older, and as old: a late or repeated checkpoint write never replaces a newer one.
    store.write_checkpoint(doc.id, 2, b"state-2").await.unwrap();
    store.write_checkpoint(doc.id, 0, b"state-0").await.unwrap();
    store.write_checkpoint(doc.id, 4, b"other-4").await.unwrap();
    let after = store.document_content(doc.id).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(
        after
            .checkpoint
            .as_ref()
            .map(|c| (c.upto_seq, c.state.clone())),
        Some((4, b"state-4".to_vec()))
    );
    assert_eq!(seqs_of(&after), [5, 6]);
    assert_eq!(counters(&store, doc.id).await, (0, 6, 0));
}

async fn checkpoint_outside_the_journal_conflicts(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    store.append_update(doc.id, &update(1), 1).await.unwrap();
    store.append_update(doc.id, &update(2), 2).await.unwrap();
    for upto_seq in [3, 100, -1] {
        assert!(
            matches!(
                store.write_checkpoint(doc.id, upto_seq, b"state").await,
                Err(StoreError::Conflict(_))
            ),
            "a checkpoint cannot cover seq {upto_seq}"
        );
    }
    let content = store.document_content(doc.id).await.unwrap();
    assert_eq!(
        (content.checkpoint.clone(), seqs_of(&content)),
        (None, vec![1, 2])
    );
    // A checkpoint of the empty document (covering no update) is accepted.
    let fresh = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    store.write_checkpoint(fresh.id, 0, b"empty").await.unwrap();
    assert_eq!(
        store.document_content(fresh.id).await.unwrap().checkpoint,
        Some(Checkpoint {
            upto_seq: 0,
            state: b"empty".to_vec(),
            yjs_epoch: 0,
        })
    );
}

async fn reset_content_bumps_epoch_and_replaces_content(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    committed(
        store
            .commit_plan_edit(doc.id, 0, None, &update(1), 1)
            .await
            .unwrap(),
    );
    for n in 2..=4 {
        store.append_update(doc.id, &update(n), n).await.unwrap();
    }
    store.write_checkpoint(doc.id, 2, b"state-2").await.unwrap();
    assert_eq!(counters(&store, doc.id).await, (1, 4, 0));

    assert_eq!(store.reset_content(doc.id, b"replaced").await.unwrap(), 1);
    assert_eq!(
        counters(&store, doc.id).await,
        (1, 5, 1),
        "a reset advances the epoch and the storage revision, not the plan revision"
    );
    assert_eq!(
        store.document_content(doc.id).await.unwrap(),
        DocumentContent {
            checkpoint: Some(Checkpoint {
                upto_seq: 4,
                state: b"replaced".to_vec(),
                yjs_epoch: 1,
            }),
            updates: vec![],
            yjs_epoch: 1,
        },
        "the new state replaces checkpoint and journal"
    );
    // A checkpoint of the old history, arriving late, cannot replace the new one.
    store.write_checkpoint(doc.id, 4, b"old-4").await.unwrap();
    assert_eq!(
        store
            .document_content(doc.id)
            .await
            .unwrap()
            .checkpoint
            .map(|c| c.state),
        Some(b"replaced".to_vec())
    );

    // Seqs carry on; later checkpoints are written at the new epoch.
    assert_eq!(store.append_update(doc.id, &update(5), 5).await.unwrap(), 5);
    store.write_checkpoint(doc.id, 5, b"state-5").await.unwrap();
    assert_eq!(
        store.document_content(doc.id).await.unwrap().checkpoint,
        Some(Checkpoint {
            upto_seq: 5,
            state: b"state-5".to_vec(),
            yjs_epoch: 1,
        })
    );
    assert_eq!(store.reset_content(doc.id, b"again").await.unwrap(), 2);
    assert_eq!(counters(&store, doc.id).await, (1, 7, 2));
    let content = store.document_content(doc.id).await.unwrap();
    assert_eq!(content.yjs_epoch, 2);
    assert_eq!(
        content.checkpoint.map(|c| (c.upto_seq, c.yjs_epoch)),
        Some((5, 2))
    );
}

async fn content_survives_reopening_the_store(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "Owner", "Repo", "first"))
        .await
        .unwrap();
    let reset = store
        .create_document(&new_doc(2, "Owner", "Repo", "reset"))
        .await
        .unwrap();
    for n in 1..=4 {
        store.append_update(doc.id, &update(n), n).await.unwrap();
    }
    store.write_checkpoint(doc.id, 2, b"state-2").await.unwrap();
    committed(
        store
            .commit_plan_edit(doc.id, 0, None, &update(5), 5)
            .await
            .unwrap(),
    );
    store.append_update(reset.id, &update(1), 1).await.unwrap();
    store.reset_content(reset.id, b"fresh").await.unwrap();
    store
        .rename_document(doc.id, "second", "Second")
        .await
        .unwrap();
    let renamed = store
        .rename_document(doc.id, "third", "Third")
        .await
        .unwrap();

    let snapshot = (
        store.document(doc.id).await.unwrap(),
        store.document_content(doc.id).await.unwrap(),
        store.document(reset.id).await.unwrap(),
        store.document_content(reset.id).await.unwrap(),
        store.earlier_slugs(doc.id).await.unwrap(),
    );
    drop(store);

    let reopened = b.open().await;
    let after = (
        reopened.document(doc.id).await.unwrap(),
        reopened.document_content(doc.id).await.unwrap(),
        reopened.document(reset.id).await.unwrap(),
        reopened.document_content(reset.id).await.unwrap(),
        reopened.earlier_slugs(doc.id).await.unwrap(),
    );
    assert_eq!(after, snapshot);
    // Spot-check the snapshot holds what was written (so equality is not vacuous).
    assert_eq!(after.0, Some(renamed.clone()));
    assert_eq!(
        after
            .1
            .checkpoint
            .as_ref()
            .map(|c| (c.upto_seq, c.state.clone())),
        Some((2, b"state-2".to_vec()))
    );
    assert_eq!(
        after.1.updates,
        vec![(3, update(3)), (4, update(4)), (5, update(5))]
    );
    assert_eq!(after.2.map(|d| d.yjs_epoch), Some(1));
    assert_eq!(
        after
            .3
            .checkpoint
            .map(|c| (c.upto_seq, c.state, c.yjs_epoch)),
        Some((1, b"fresh".to_vec(), 1))
    );
    assert_eq!(after.4, ["first", "second"]);
    for slug in ["first", "second", "third"] {
        assert_eq!(
            reopened
                .document_by_slug("owner", "repo", slug)
                .await
                .unwrap(),
            Some(renamed.clone()),
            "{slug}"
        );
    }

    // Numbering and guards carry on where they were.
    assert_eq!(
        reopened.append_update(doc.id, &update(6), 6).await.unwrap(),
        6
    );
    assert_eq!(
        reopened
            .commit_plan_edit(doc.id, 0, None, b"late", 7)
            .await
            .unwrap(),
        PlanCommit::Stale { current: 1 }
    );
    reopened
        .write_checkpoint(doc.id, 1, b"older")
        .await
        .unwrap();
    assert_eq!(
        seqs_of(&reopened.document_content(doc.id).await.unwrap()),
        [3, 4, 5, 6],
        "the older checkpoint is still ignored after a reopen"
    );
    assert!(matches!(
        reopened
            .create_document(&new_doc(3, "owner", "REPO", "second"))
            .await,
        Err(StoreError::Conflict(_))
    ));
}

// --- renames and slug aliases ----------------------------------------------------------------

async fn rename_keeps_former_slugs_as_aliases_in_order(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "Octo", "Repo", "a"))
        .await
        .unwrap();

    let renamed = store.rename_document(doc.id, "b", "Title B").await.unwrap();
    assert_eq!(
        renamed,
        Document {
            slug: "b".into(),
            title: "Title B".into(),
            ..doc.clone()
        }
    );
    assert_eq!(store.document(doc.id).await.unwrap(), Some(renamed.clone()));
    assert_eq!(store.earlier_slugs(doc.id).await.unwrap(), ["a"]);
    for slug in ["a", "b"] {
        assert_eq!(
            store.document_by_slug("Octo", "Repo", slug).await.unwrap(),
            Some(renamed.clone()),
            "{slug} resolves to the document, which carries its current slug"
        );
    }

    store.rename_document(doc.id, "c", "Title C").await.unwrap();
    store.rename_document(doc.id, "d", "Title D").await.unwrap();
    assert_eq!(store.earlier_slugs(doc.id).await.unwrap(), ["a", "b", "c"]);

    // Back to a former slug: it is canonical again and leaves the aliases; the slug left joins
    // them last.
    let back = store
        .rename_document(doc.id, "b", "Title B again")
        .await
        .unwrap();
    assert_eq!(
        (back.slug.as_str(), back.title.as_str()),
        ("b", "Title B again")
    );
    assert_eq!(store.earlier_slugs(doc.id).await.unwrap(), ["a", "c", "d"]);
    store.rename_document(doc.id, "a", "Title A").await.unwrap();
    assert_eq!(store.earlier_slugs(doc.id).await.unwrap(), ["c", "d", "b"]);

    // Same slug, new title: only the title changes.
    let retitled = store
        .rename_document(doc.id, "a", "Only the title")
        .await
        .unwrap();
    assert_eq!(retitled.slug, "a");
    assert_eq!(retitled.title, "Only the title");
    assert_eq!(store.earlier_slugs(doc.id).await.unwrap(), ["c", "d", "b"]);
    for slug in ["a", "b", "c", "d"] {
        assert_eq!(
            store
                .document_by_slug("Octo", "Repo", slug)
                .await
                .unwrap()
                .map(|d| (d.id, d.slug)),
            Some((doc.id, "a".to_owned())),
            "{slug}"
        );
    }
    assert_eq!(
        store.document_by_slug("Octo", "Repo", "e").await.unwrap(),
        None
    );
    assert_eq!(
        store.document_by_slug("Octo", "Other", "b").await.unwrap(),
        None,
        "aliases belong to the document's repository"
    );
}

async fn rename_conflicts_with_other_documents_slugs_and_aliases(b: &Backend) {
    let store = b.open().await;
    let one = store
        .create_document(&new_doc(1, "Octo", "Repo", "one"))
        .await
        .unwrap();
    let two = store
        .create_document(&new_doc(2, "Octo", "Repo", "two"))
        .await
        .unwrap();
    let conflict = |result: Result<Document, StoreError>| {
        assert!(
            matches!(result, Err(StoreError::Conflict(_))),
            "expected Conflict, got {result:?}"
        );
    };

    // Another document's current slug.
    conflict(store.rename_document(one.id, "two", "Two").await);
    // Another document's former slug.
    let deux = store.rename_document(two.id, "deux", "Deux").await.unwrap();
    conflict(store.rename_document(one.id, "two", "Two").await);
    assert!(
        matches!(
            store
                .create_document(&new_doc(3, "octo", "REPO", "two"))
                .await,
            Err(StoreError::Conflict(_))
        ),
        "a new document cannot take another's alias either (owner and repo without case)"
    );
    assert_eq!(
        store
            .document(Uuid::from_u128(0xd0c0_0000_0000_0000_0000_0000_0000_0003))
            .await
            .unwrap(),
        None
    );
    // A refused rename changes nothing.
    assert_eq!(store.document(one.id).await.unwrap(), Some(one.clone()));
    assert_eq!(
        store.earlier_slugs(one.id).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.document(two.id).await.unwrap(), Some(deux.clone()));
    assert_eq!(store.earlier_slugs(two.id).await.unwrap(), ["two"]);
    assert_eq!(
        store.document_by_slug("Octo", "Repo", "two").await.unwrap(),
        Some(deux.clone())
    );

    // The former slug stays bound to its document, even renamed onward again.
    store.rename_document(two.id, "zwei", "Zwei").await.unwrap();
    conflict(store.rename_document(one.id, "deux", "Deux").await);
    conflict(store.rename_document(one.id, "two", "Two").await);

    // The same slugs in another repository (or another owner's) are free.
    let elsewhere = store
        .create_document(&new_doc(4, "Octo", "Other", "x"))
        .await
        .unwrap();
    store
        .rename_document(elsewhere.id, "two", "Two")
        .await
        .unwrap();
    let other_owner = store
        .create_document(&new_doc(5, "Someone", "Repo", "deux"))
        .await
        .unwrap();
    assert_eq!(other_owner.slug, "deux");
    assert_eq!(
        store
            .document_by_slug("octo", "other", "two")
            .await
            .unwrap()
            .map(|d| d.id),
        Some(elsewhere.id)
    );
    assert_eq!(
        store
            .document_by_slug("Octo", "Repo", "two")
            .await
            .unwrap()
            .map(|d| d.id),
        Some(two.id)
    );
}

async fn alias_resolution_ignores_owner_and_repo_case(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "Octo-Org", "Big.Repo", "roadmap"))
        .await
        .unwrap();
    // Renamed through a differently spelled lookup of the same repository.
    let renamed = store
        .rename_document(doc.id, "roadmap-2027", "Roadmap 2027")
        .await
        .unwrap();
    assert_eq!(
        (renamed.repo_owner.as_str(), renamed.repo_name.as_str()),
        ("Octo-Org", "Big.Repo"),
        "the spelling given at creation is kept"
    );
    for (owner, repo) in [
        ("Octo-Org", "Big.Repo"),
        ("octo-org", "big.repo"),
        ("OCTO-ORG", "BIG.REPO"),
    ] {
        for slug in ["roadmap", "roadmap-2027"] {
            assert_eq!(
                store.document_by_slug(owner, repo, slug).await.unwrap(),
                Some(renamed.clone()),
                "{owner}/{repo}/{slug}"
            );
        }
    }
    assert_eq!(
        store
            .document_by_slug("octo-org", "big.repo", "ROADMAP")
            .await
            .unwrap(),
        None,
        "the slug itself compares exactly"
    );
    // Another document in the same repository, spelled differently, cannot take the alias.
    let other = store
        .create_document(&new_doc(2, "OCTO-org", "big.REPO", "notes"))
        .await
        .unwrap();
    assert!(matches!(
        store.rename_document(other.id, "roadmap", "Roadmap").await,
        Err(StoreError::Conflict(_))
    ));
}

async fn archive_restore_and_rename_change_no_counter(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    committed(
        store
            .commit_plan_edit(doc.id, 0, None, &update(1), 1)
            .await
            .unwrap(),
    );
    store.append_update(doc.id, &update(2), 2).await.unwrap();
    store.reset_content(doc.id, b"state").await.unwrap();
    let before = counters(&store, doc.id).await;
    assert_eq!(
        before,
        (1, 3, 1),
        "nonzero counters, so a reset to 0 would show"
    );
    let content_before = store.document_content(doc.id).await.unwrap();

    store.set_archived(doc.id, true).await.unwrap();
    assert_eq!(counters(&store, doc.id).await, before, "archive");
    store.set_archived(doc.id, false).await.unwrap();
    assert_eq!(counters(&store, doc.id).await, before, "restore");
    let renamed = store
        .rename_document(doc.id, "s2", "Renamed")
        .await
        .unwrap();
    assert_eq!(
        (
            renamed.plan_revision,
            renamed.storage_revision,
            renamed.yjs_epoch
        ),
        before,
        "rename"
    );
    store
        .rename_document(doc.id, "s2", "Retitled")
        .await
        .unwrap();
    assert_eq!(counters(&store, doc.id).await, before, "retitle");
    store.set_archived(doc.id, true).await.unwrap();
    let archived_rename = store.rename_document(doc.id, "s", "Back").await.unwrap();
    assert!(archived_rename.archived, "a rename keeps the archived flag");
    assert_eq!(
        counters(&store, doc.id).await,
        before,
        "rename while archived"
    );
    assert_eq!(
        store.document_content(doc.id).await.unwrap(),
        content_before
    );
}

async fn rename_race_to_one_slug_exactly_one_wins(b: &Backend) {
    let store = b.open().await;
    let mut ids = Vec::new();
    for n in 0..PLAN_COMMITTERS as u128 {
        let doc = store
            .create_document(&new_doc(n, "o", "r", &format!("doc-{n}")))
            .await
            .unwrap();
        ids.push(doc.id);
    }
    let barrier = Arc::new(Barrier::new(ids.len()));
    let mut tasks = Vec::new();
    for id in ids.clone() {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (id, store.rename_document(id, "shared", "Shared").await)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (id, Ok(doc)) => {
                assert_eq!(doc.slug, "shared");
                winners.push(id);
            }
            (_, Err(StoreError::Conflict(_))) => {}
            (_, Err(e)) => panic!("expected Ok or Conflict, got {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one document takes the slug");
    assert_eq!(
        store
            .document_by_slug("o", "r", "shared")
            .await
            .unwrap()
            .map(|d| d.id),
        Some(winners[0])
    );
    for id in ids {
        let slugs = store.earlier_slugs(id).await.unwrap();
        assert_eq!(
            slugs.len(),
            usize::from(id == winners[0]),
            "only the winner left a slug"
        );
    }
}

async fn rename_race_never_takes_a_slug_being_left(b: &Backend) {
    // Each round, `leaver` leaves its slug (which becomes its alias) while `taker` tries to rename
    // to that slug and a new document tries to be created with it. Whichever runs first, the slug
    // is the leaver's (canonical, then alias), so both must always be refused.
    const ROUNDS: usize = 12;
    let store = b.open().await;
    let leaver = store
        .create_document(&new_doc(1, "o", "r", "slug-0"))
        .await
        .unwrap();
    let taker = store
        .create_document(&new_doc(2, "o", "r", "taker"))
        .await
        .unwrap();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(3));
        let leave = {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .rename_document(leaver.id, &format!("slug-{}", round + 1), "Leaver")
                    .await
            })
        };
        let take = {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .rename_document(taker.id, &format!("slug-{round}"), "Taker")
                    .await
            })
        };
        let create = {
            let (store, barrier) = (store.clone(), barrier.clone());
            let newcomer = new_doc(100 + round as u128, "O", "R", &format!("slug-{round}"));
            tokio::spawn(async move {
                barrier.wait().await;
                store.create_document(&newcomer).await
            })
        };
        leave.await.unwrap().expect("the leaver's rename");
        let taken = take.await.unwrap();
        assert!(
            matches!(taken, Err(StoreError::Conflict(_))),
            "round {round}: the taker got {taken:?}"
        );
        let created = create.await.unwrap();
        assert!(
            matches!(created, Err(StoreError::Conflict(_))),
            "round {round}: the creator got {created:?}"
        );
    }
    assert_eq!(
        store.earlier_slugs(leaver.id).await.unwrap(),
        (0..ROUNDS).map(|r| format!("slug-{r}")).collect::<Vec<_>>()
    );
    assert_eq!(
        store.earlier_slugs(taker.id).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.document(taker.id).await.unwrap(), Some(taker));
    for round in 0..ROUNDS {
        assert_eq!(
            store
                .document_by_slug("o", "r", &format!("slug-{round}"))
                .await
                .unwrap()
                .map(|d| d.id),
            Some(leaver.id),
            "slug-{round} names only the leaver"
        );
    }
}

// --- child documents -------------------------------------------------------------------------

async fn children_are_listed_in_creation_order_ties_by_id(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "Octo", "Repo", "parent"))
        .await
        .unwrap();
    assert_eq!(parent.parent_id, None, "a top-level document has no parent");
    let other_parent = store
        .create_document(&new_doc(2, "Octo", "Repo", "other-parent"))
        .await
        .unwrap();
    assert_eq!(store.children(parent.id).await.unwrap(), vec![]);

    // Created out of order: `late` (with the lowest id) first, then two at the same instant
    // whose ids decide (`tie-high` is created before `tie-low`), the repository spelled in
    // other cases. Neither id order nor insertion order is creation order.
    let late = NewDocument {
        created_at_ms: 9_000,
        ..child_doc(5, "octo", "repo", "late", parent.id)
    };
    let tie_high = NewDocument {
        created_at_ms: 5_000,
        ..child_doc(20, "OCTO", "REPO", "tie-high", parent.id)
    };
    let tie_low = NewDocument {
        created_at_ms: 5_000,
        ..child_doc(10, "Octo", "Repo", "tie-low", parent.id)
    };
    let mut created = Vec::new();
    for new in [&late, &tie_high, &tie_low] {
        let child = store.create_document(new).await.unwrap();
        assert_eq!(child.parent_id, Some(parent.id));
        assert_eq!(
            (child.repo_owner.as_str(), child.repo_name.as_str()),
            (new.repo_owner.as_str(), new.repo_name.as_str()),
            "the child keeps the spelling it was given"
        );
        assert_eq!(store.document(child.id).await.unwrap(), Some(child.clone()));
        created.push(child);
    }
    // An archived child is listed too; the caller filters.
    store.set_archived(tie_high.id, true).await.unwrap();
    // Another parent's child and a top-level document are not.
    store
        .create_document(&child_doc(40, "Octo", "Repo", "elsewhere", other_parent.id))
        .await
        .unwrap();
    store
        .create_document(&new_doc(50, "Octo", "Repo", "top-level"))
        .await
        .unwrap();

    let listed = store.children(parent.id).await.unwrap();
    assert_eq!(
        listed.iter().map(|d| d.slug.as_str()).collect::<Vec<_>>(),
        ["tie-low", "tie-high", "late"]
    );
    assert_eq!(listed[0], created[2]);
    assert_eq!(
        listed[1],
        Document {
            archived: true,
            ..created[1].clone()
        }
    );
    assert_eq!(listed[2], created[0]);
    assert_eq!(
        store
            .children(other_parent.id)
            .await
            .unwrap()
            .iter()
            .map(|d| d.slug.as_str())
            .collect::<Vec<_>>(),
        ["elsewhere"]
    );
    // A child has no children of its own.
    assert_eq!(store.children(tie_low.id).await.unwrap(), vec![]);
}

async fn child_of_a_child_is_refused(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "o", "r", "parent"))
        .await
        .unwrap();
    let child = store
        .create_document(&child_doc(2, "o", "r", "child", parent.id))
        .await
        .unwrap();
    let grandchild = child_doc(3, "o", "r", "grandchild", child.id);
    let words = conflict_words(store.create_document(&grandchild).await);
    assert!(words.contains("cannot have children"), "{words}");
    assert!(words.contains(&child.id.to_string()), "{words}");
    assert_eq!(store.document(grandchild.id).await.unwrap(), None);
    assert_eq!(store.children(child.id).await.unwrap(), vec![]);
    // Nothing was kept: the slug is free for a valid child.
    let retried = store
        .create_document(&child_doc(3, "o", "r", "grandchild", parent.id))
        .await
        .unwrap();
    assert_eq!(
        store.children(parent.id).await.unwrap(),
        vec![child, retried]
    );
}

async fn child_in_another_repository_is_refused(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "Octo", "Repo", "parent"))
        .await
        .unwrap();
    for (n, owner, repo) in [
        (2, "Octo", "Other"),
        (3, "Someone", "Repo"),
        (4, "Octo", "Repo2"),
    ] {
        let stray = child_doc(n, owner, repo, "stray", parent.id);
        let words = conflict_words(store.create_document(&stray).await);
        assert!(
            words.contains("another repository"),
            "{owner}/{repo}: {words}"
        );
        assert!(words.contains("Octo/Repo"), "{owner}/{repo}: {words}");
        assert_eq!(store.document(stray.id).await.unwrap(), None);
        assert_eq!(
            store.document_by_slug(owner, repo, "stray").await.unwrap(),
            None
        );
    }
    assert_eq!(store.children(parent.id).await.unwrap(), vec![]);
}

async fn child_of_an_archived_parent_is_refused(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "o", "r", "parent"))
        .await
        .unwrap();
    store.set_archived(parent.id, true).await.unwrap();
    let child = child_doc(2, "o", "r", "child", parent.id);
    let words = conflict_words(store.create_document(&child).await);
    assert!(words.contains("archived"), "{words}");
    assert_eq!(store.document(child.id).await.unwrap(), None);
    assert_eq!(store.children(parent.id).await.unwrap(), vec![]);
    // Restored, the parent takes children again.
    store.set_archived(parent.id, false).await.unwrap();
    let created = store.create_document(&child).await.unwrap();
    assert_eq!(store.children(parent.id).await.unwrap(), vec![created]);
}

async fn child_of_a_missing_parent_is_refused(b: &Backend) {
    let store = b.open().await;
    // One real document, so "missing" is not just "empty database".
    store
        .create_document(&new_doc(1, "o", "r", "real"))
        .await
        .unwrap();
    let missing = Uuid::from_u128(0xdead);
    let orphan = child_doc(2, "o", "r", "orphan", missing);
    let words = conflict_words(store.create_document(&orphan).await);
    assert!(words.contains("does not exist"), "{words}");
    assert!(words.contains(&missing.to_string()), "{words}");
    assert_eq!(store.document(orphan.id).await.unwrap(), None);
    assert_eq!(
        store.document_by_slug("o", "r", "orphan").await.unwrap(),
        None
    );
}

async fn child_slugs_are_unique_in_the_repository(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "o", "r", "parent"))
        .await
        .unwrap();
    let other_parent = store
        .create_document(&new_doc(2, "o", "r", "other-parent"))
        .await
        .unwrap();
    store
        .create_document(&child_doc(3, "o", "r", "notes", parent.id))
        .await
        .unwrap();
    // A sibling, a child of another parent and a top-level document all conflict on it…
    for (n, parent_id) in [(4, Some(parent.id)), (5, Some(other_parent.id)), (6, None)] {
        let again = NewDocument {
            parent_id,
            ..new_doc(n, "O", "R", "notes")
        };
        let words = conflict_words(store.create_document(&again).await);
        assert!(words.contains("notes"), "{words}");
    }
    // …as does a child taking the parent's own slug, or its former slug.
    conflict_words(
        store
            .create_document(&child_doc(7, "o", "r", "parent", parent.id))
            .await,
    );
    store
        .rename_document(parent.id, "parent-renamed", "Parent")
        .await
        .unwrap();
    conflict_words(
        store
            .create_document(&child_doc(8, "o", "r", "parent", parent.id))
            .await,
    );
    // The same slug in another repository is free.
    store
        .create_document(&new_doc(9, "o", "elsewhere", "notes"))
        .await
        .unwrap();
    assert_eq!(store.children(parent.id).await.unwrap().len(), 1);
    assert_eq!(store.children(other_parent.id).await.unwrap(), vec![]);
}

async fn archiving_a_parent_keeps_its_children(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "o", "r", "parent"))
        .await
        .unwrap();
    let first = store
        .create_document(&child_doc(2, "o", "r", "first", parent.id))
        .await
        .unwrap();
    let second = store
        .create_document(&child_doc(3, "o", "r", "second", parent.id))
        .await
        .unwrap();
    store.set_archived(parent.id, true).await.unwrap();
    assert_eq!(
        store.children(parent.id).await.unwrap(),
        vec![first.clone(), second.clone()],
        "children of an archived parent are kept, listed and not archived"
    );
    // Archiving a child changes neither its parent nor its sibling.
    store.set_archived(parent.id, false).await.unwrap();
    store.set_archived(first.id, true).await.unwrap();
    assert!(!store.document(parent.id).await.unwrap().unwrap().archived);
    assert_eq!(
        store.children(parent.id).await.unwrap(),
        vec![
            Document {
                archived: true,
                ..first
            },
            second
        ]
    );
}

async fn parentage_survives_rename_and_reopen(b: &Backend) {
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "Octo", "Repo", "parent"))
        .await
        .unwrap();
    let child = store
        .create_document(&child_doc(2, "Octo", "Repo", "child", parent.id))
        .await
        .unwrap();
    let renamed_parent = store
        .rename_document(parent.id, "parent-2", "Parent 2")
        .await
        .unwrap();
    assert_eq!(renamed_parent.parent_id, None);
    let renamed_child = store
        .rename_document(child.id, "child-2", "Child 2")
        .await
        .unwrap();
    assert_eq!(
        renamed_child,
        Document {
            slug: "child-2".into(),
            title: "Child 2".into(),
            ..child.clone()
        },
        "a rename keeps parentage"
    );
    store.set_archived(child.id, true).await.unwrap();
    drop(store);

    let reopened = b.open().await;
    let stored = reopened
        .document(child.id)
        .await
        .unwrap()
        .expect("child kept");
    assert_eq!(
        stored,
        Document {
            archived: true,
            ..renamed_child.clone()
        }
    );
    assert_eq!(stored.parent_id, Some(parent.id));
    assert_eq!(
        reopened.document(parent.id).await.unwrap(),
        Some(renamed_parent)
    );
    for slug in ["child", "child-2"] {
        assert_eq!(
            reopened
                .document_by_slug("octo", "repo", slug)
                .await
                .unwrap(),
            Some(stored.clone()),
            "{slug}"
        );
    }
    assert_eq!(reopened.children(parent.id).await.unwrap(), vec![stored]);
    // The renamed parent still takes children, and they still cannot nest.
    let late = reopened
        .create_document(&child_doc(3, "octo", "REPO", "late", parent.id))
        .await
        .unwrap();
    assert_eq!(late.parent_id, Some(parent.id));
    conflict_words(
        reopened
            .create_document(&child_doc(4, "Octo", "Repo", "nested", child.id))
            .await,
    );
    assert_eq!(reopened.children(parent.id).await.unwrap().len(), 2);
}

async fn child_creation_racing_archive_and_rename_is_all_or_nothing(b: &Backend) {
    // Children are created while their parent is renamed and archived. Each creation either
    // commits a child of the parent or is refused because the parent is archived; none fails
    // otherwise (no deadlock between the slug lock and the parent's row), and the children
    // listed afterwards are exactly those created.
    const CREATORS: usize = 8;
    let store = b.open().await;
    let parent = store
        .create_document(&new_doc(1, "o", "r", "parent"))
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(CREATORS + 2));
    let mut creators = Vec::new();
    for n in 0..CREATORS {
        let (store, barrier) = (store.clone(), barrier.clone());
        let new = child_doc(10 + n as u128, "o", "r", &format!("child-{n}"), parent.id);
        creators.push(tokio::spawn(async move {
            barrier.wait().await;
            (new.id, store.create_document(&new).await)
        }));
    }
    let rename = {
        let (store, barrier) = (store.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store.rename_document(parent.id, "parent-2", "Parent").await
        })
    };
    let archive = {
        let (store, barrier) = (store.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store.set_archived(parent.id, true).await
        })
    };
    let mut created = BTreeSet::new();
    for task in creators {
        match task.await.unwrap() {
            (id, Ok(child)) => {
                assert_eq!(child.parent_id, Some(parent.id));
                created.insert(id);
            }
            (_, Err(StoreError::Conflict(words))) => {
                assert!(words.contains("archived"), "{words}");
            }
            (_, Err(e)) => panic!("expected Ok or Conflict, got {e}"),
        }
    }
    rename.await.unwrap().expect("the parent's rename");
    archive.await.unwrap().expect("the parent's archive");
    let listed: BTreeSet<Uuid> = store
        .children(parent.id)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(listed, created);
    // Once archived, the parent takes no more children.
    let words = conflict_words(
        store
            .create_document(&child_doc(99, "o", "r", "after", parent.id))
            .await,
    );
    assert!(words.contains("archived"), "{words}");
}

fn run(doc: Uuid, id: &str, status: &str) -> RunRecord {
    RunRecord {
        document_id: doc,
        run_id: id.into(),
        session_id: "s-1".into(),
        name: format!("workflow {id}"),
        status: status.into(),
        root_run_id: None,
        elapsed_ms: Some(1_000),
        omitted_stages: 0,
        reported_at_ms: 5,
    }
}

fn stage(id: usize, status: &str) -> StageRecord {
    StageRecord {
        stage_id: format!("st-{id}"),
        name: format!("stage {id}"),
        status: status.into(),
        parent_stage_id: (id > 0).then(|| "st-0".to_owned()),
        duration_ms: None,
    }
}

/// SES-09: "Every stage of a run is stored, with no count limit, in table
/// `workflow_run_stages`." RR-04: deltas are merged by stage id.
async fn ses_09_run_stages_merge_by_stage_id_with_no_count_limit(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    // 1,200 stages in deltas of 300: each delta only the new stages.
    for batch in 0..4 {
        let stages: Vec<_> = (batch * 300..(batch + 1) * 300)
            .map(|i| stage(i, "running"))
            .collect();
        store
            .save_run(&run(doc.id, "run-1", "running"), &stages, false)
            .await
            .unwrap();
    }
    // A changed stage keeps its place.
    store
        .save_run(
            &run(doc.id, "run-1", "running"),
            &[stage(7, "completed")],
            false,
        )
        .await
        .unwrap();
    let page = store
        .run_stages(doc.id, "run-1", 0, 500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.total, 1_200);
    assert_eq!(page.stages.len(), 500);
    assert_eq!(page.stages[7], stage(7, "completed"));
    assert_eq!(page.stages[0].stage_id, "st-0");
    let last = store
        .run_stages(doc.id, "run-1", 1_100, 500)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<_> = last.stages.iter().map(|s| s.stage_id.clone()).collect();
    let wanted: Vec<_> = (1_100..1_200).map(|i| format!("st-{i}")).collect();
    assert_eq!(ids, wanted, "in the order first reported");
    assert_eq!(store.run_stages(doc.id, "nope", 0, 10).await.unwrap(), None);

    // A whole report (no deltas) replaces what was stored.
    store
        .save_run(
            &run(doc.id, "run-1", "completed"),
            &[stage(0, "completed")],
            true,
        )
        .await
        .unwrap();
    let page = store
        .run_stages(doc.id, "run-1", 0, 500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((page.total, page.stages.len()), (1, 1));
    let runs = store.runs(doc.id).await.unwrap();
    assert_eq!(runs, vec![run(doc.id, "run-1", "completed")]);
}

/// SES-13: "The run stack and every stage are stored with the document, so reload and restart
/// keep them (finished runs too); a run live when the server stopped comes back stopped."
async fn ses_13_runs_survive_reopening_and_live_ones_come_back_stopped(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    for (id, status) in [("a", "completed"), ("b", "running"), ("c", "paused")] {
        store
            .save_run(&run(doc.id, id, status), &[stage(0, status)], false)
            .await
            .unwrap();
    }
    drop(store);
    let store = b.open().await;
    assert_eq!(store.stop_unheld_runs(Reach::Every).await.unwrap(), 2);
    let runs = store.runs(doc.id).await.unwrap();
    let seen: Vec<_> = runs
        .iter()
        .map(|r| (r.run_id.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("a", "completed"), ("b", "stopped"), ("c", "stopped")],
        "first-reported order"
    );
    let page = store.run_stages(doc.id, "b", 0, 10).await.unwrap().unwrap();
    assert_eq!(page.total, 1);
}

/// HO-08: "workflow runs Chat stored come back live, not stopped" for a document whose hold the
/// restart keeps; SES-13 for every other: the startup reset (ownership cleared, then live runs
/// stopped) stops only the live runs of documents whose Planner owner was not kept.
async fn ho_08_ses_13_startup_stops_the_live_runs_of_documents_whose_owner_was_not_kept(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 86, "mona").await;
    let lisa = member(&store, 87, "lisa").await;
    assert_eq!(
        store
            .set_login_credential(mona.browser_login_id, 0, b"sealed")
            .await
            .unwrap(),
        Some(1)
    );
    let mut ids = Vec::new();
    for (n, slug) in ["kept", "not-kept", "free"].into_iter().enumerate() {
        ids.push(
            store
                .create_document(&new_doc(95 + n as u128, "octo", "runs", slug))
                .await
                .unwrap()
                .id,
        );
    }
    let (kept, not_kept, free) = (ids[0], ids[1], ids[2]);
    claimed(store.claim_ownership(kept, &mona, 1_000).await.unwrap());
    // lisa's login has no stored credential: her hold cannot keep her as owner.
    claimed(store.claim_ownership(not_kept, &lisa, 1_000).await.unwrap());
    store
        .put_link_hold(&hold_of(kept, &mona, 1_000, Some(61_000)))
        .await
        .unwrap();
    store
        .put_link_hold(&hold_of(not_kept, &lisa, 1_000, None))
        .await
        .unwrap();
    for doc in [kept, not_kept, free] {
        for (id, status) in [
            ("a", "completed"),
            ("b", "running"),
            ("c", "waiting"),
            ("d", "paused"),
        ] {
            store
                .save_run(&run(doc, id, status), &[stage(0, "running")], false)
                .await
                .unwrap();
        }
    }
    drop(store);
    let store = b.open().await;
    let statuses = |doc: Uuid| {
        let store = store.clone();
        async move {
            store
                .runs(doc)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.status)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(store.clear_unheld_ownership(Reach::Every).await.unwrap(), 1);
    assert_eq!(store.stop_unheld_runs(Reach::Every).await.unwrap(), 6);
    assert_eq!(
        statuses(kept).await,
        ["completed", "running", "waiting", "paused"],
        "the kept owner's runs come back live (HO-08)"
    );
    for doc in [not_kept, free] {
        assert_eq!(
            statuses(doc).await,
            ["completed", "stopped", "stopped", "stopped"],
            "SES-13"
        );
    }
    // The next startup after the owner's sign-in ended keeps nothing: its runs stop too.
    assert!(store
        .delete_login_credential(mona.browser_login_id)
        .await
        .unwrap());
    assert_eq!(store.clear_unheld_ownership(Reach::Every).await.unwrap(), 1);
    assert_eq!(store.stop_unheld_runs(Reach::Every).await.unwrap(), 3);
    assert_eq!(
        statuses(kept).await,
        ["completed", "stopped", "stopped", "stopped"]
    );
    // Under AUTH_MODE=local every owner is cleared first, so every live run stops.
    claimed(store.claim_ownership(free, &mona, 2_000).await.unwrap());
    store
        .save_run(&run(free, "e", "running"), &[], false)
        .await
        .unwrap();
    assert_eq!(
        store.stop_unheld_runs(Reach::Every).await.unwrap(),
        0,
        "owned: kept"
    );
    assert_eq!(store.clear_all_ownership(Reach::Every).await.unwrap(), 1);
    assert_eq!(store.stop_unheld_runs(Reach::Every).await.unwrap(), 1);
}

/// What a process does for one document when it takes that document's lease over from a
/// process that stopped (several processes on one database): the startup's sweeps, reaching that
/// document only — its unheld owner, its live runs, its running job attempts — and leaving every
/// other document as it is, served by whichever process serves it.
async fn a_takeovers_sweeps_reach_only_the_document_taken_over(b: &Backend) {
    let store = b.open().await;
    let lisa = member(&store, 88, "lisa").await;
    let mut ids = Vec::new();
    for (n, slug) in ["taken-over", "served-elsewhere", "idle"]
        .into_iter()
        .enumerate()
    {
        ids.push(
            store
                .create_document(&new_doc(97 + n as u128, "octo", "sweeps", slug))
                .await
                .unwrap()
                .id,
        );
    }
    let (taken, elsewhere, idle) = (ids[0], ids[1], ids[2]);
    // A document nobody owns, with a live run: another process's sweep of its own reaches it,
    // not this one's.
    store
        .save_run(&run(idle, "r", "running"), &[], false)
        .await
        .unwrap();
    for (n, doc) in [taken, elsewhere].into_iter().enumerate() {
        claimed(store.claim_ownership(doc, &lisa, 1_000).await.unwrap());
        store
            .save_run(&run(doc, "r", "running"), &[], false)
            .await
            .unwrap();
        let job = 0x70c0 + n as u128;
        store
            .enqueue_job(&job_of(doc, job, "t", &format!("k-{n}"), "{}", 1_000))
            .await
            .unwrap();
        assert!(store
            .claim_job(Uuid::from_u128(job), "host-a", 1_000, 30_000)
            .await
            .unwrap()
            .is_some());
    }
    let reach = Reach::Document(taken);
    assert_eq!(store.clear_unheld_ownership(reach).await.unwrap(), 1);
    assert_eq!(store.stop_unheld_runs(reach).await.unwrap(), 1);
    assert_eq!(
        store
            .interrupt_running_jobs("interrupted", 2_000, reach)
            .await
            .unwrap(),
        1
    );
    assert!(store.ownership(taken).await.unwrap().holder.is_none());
    assert_eq!(store.runs(taken).await.unwrap()[0].status, "stopped");
    let job_state = |id: u128| {
        let store = store.clone();
        async move { store.job(Uuid::from_u128(id)).await.unwrap().unwrap().state }
    };
    assert_eq!(job_state(0x70c0).await, JobState::Failed);
    // The other document is untouched.
    assert!(store.ownership(elsewhere).await.unwrap().holder.is_some());
    assert_eq!(store.runs(elsewhere).await.unwrap()[0].status, "running");
    assert_eq!(store.runs(idle).await.unwrap()[0].status, "running");
    assert_eq!(job_state(0x70c1).await, JobState::Running);
    // AUTH_MODE=local's sweep, one document at a time too.
    assert_eq!(
        store
            .clear_all_ownership(Reach::Document(taken))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .clear_all_ownership(Reach::Document(elsewhere))
            .await
            .unwrap(),
        1
    );
}

/// SES-14: "ended rows stay until the next workflow starts in the document."
async fn ses_14_ended_runs_go_when_the_next_workflow_starts(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    let other = store
        .create_document(&new_doc(2, "o", "r", "t"))
        .await
        .unwrap();
    store
        .save_run(&run(doc.id, "old", "failed"), &[stage(0, "failed")], false)
        .await
        .unwrap();
    store
        .save_run(&run(doc.id, "live", "running"), &[], false)
        .await
        .unwrap();
    store
        .save_run(&run(other.id, "old", "completed"), &[], false)
        .await
        .unwrap();
    assert_eq!(store.delete_ended_runs(doc.id).await.unwrap(), 1);
    let left: Vec<_> = store
        .runs(doc.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(left, ["live"]);
    assert_eq!(store.run_stages(doc.id, "old", 0, 10).await.unwrap(), None);
    assert_eq!(
        store.runs(other.id).await.unwrap().len(),
        1,
        "each document on its own"
    );
}

async fn repository_documents_are_that_repositorys_in_creation_order_and_bounded(b: &Backend) {
    let store = b.open().await;
    let late = store
        .create_document(&NewDocument {
            created_at_ms: 9_000,
            ..new_doc(1, "Octo", "Repo", "late")
        })
        .await
        .unwrap();
    let early = store
        .create_document(&NewDocument {
            created_at_ms: 1_000,
            ..new_doc(2, "octo", "repo", "early")
        })
        .await
        .unwrap();
    let child = store
        .create_document(&NewDocument {
            created_at_ms: 5_000,
            ..child_doc(3, "OCTO", "REPO", "child", early.id)
        })
        .await
        .unwrap();
    store
        .create_document(&new_doc(4, "octo", "other", "elsewhere"))
        .await
        .unwrap();
    store
        .create_document(&new_doc(5, "someone", "repo", "elsewhere"))
        .await
        .unwrap();
    store.set_archived(late.id, true).await.unwrap();
    let ids = |docs: Vec<Document>| docs.into_iter().map(|d| d.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .repository_documents("OCTO", "repo", 10)
            .await
            .unwrap()),
        vec![early.id, child.id, late.id],
        "owner and name without case, children and archived ones included, oldest first"
    );
    assert_eq!(
        ids(store.repository_documents("octo", "repo", 2).await.unwrap()),
        vec![early.id, child.id],
        "at most the limit"
    );
    assert!(store
        .repository_documents("octo", "nothing", 10)
        .await
        .unwrap()
        .is_empty());
}

// --- Planner link holds ----------------------------------------------------------------------

async fn ao_18_link_holds_are_kept_per_document_and_survive_reopening(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 81, "mona").await;
    let first = store
        .create_document(&new_doc(81, "octo", "holds", "first"))
        .await
        .unwrap()
        .id;
    let second = store
        .create_document(&new_doc(82, "octo", "holds", "second"))
        .await
        .unwrap()
        .id;
    assert!(store.link_holds().await.unwrap().is_empty());
    let cut = hold_of(second, &mona, 1_000, Some(61_000));
    let dropped = LinkHold {
        browser_login_id: None,
        ..hold_of(first, &mona, 2_000, None)
    };
    store.put_link_hold(&cut).await.unwrap();
    store.put_link_hold(&dropped).await.unwrap();
    let mut both = vec![cut.clone(), dropped.clone()];
    both.sort_by_key(|h| h.document_id);
    assert_eq!(
        store.link_holds().await.unwrap(),
        both,
        "one per document, by id"
    );
    // A later write of the same document replaces its hold.
    let later = hold_of(second, &mona, 3_000, Some(63_000));
    store.put_link_hold(&later).await.unwrap();
    let mut replaced = vec![later.clone(), dropped.clone()];
    replaced.sort_by_key(|h| h.document_id);
    assert_eq!(store.link_holds().await.unwrap(), replaced);
    assert!(is_not_found(
        store
            .put_link_hold(&hold_of(Uuid::from_u128(0xdead), &mona, 1, None))
            .await
    ));
    drop(store);
    let reopened = b.open().await;
    assert_eq!(
        reopened.link_holds().await.unwrap(),
        replaced,
        "kept across a reopen"
    );
}

async fn ho_05_a_hold_is_rewritten_without_its_window_once_and_deleted_only_as_written(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 83, "mona").await;
    let doc = store
        .create_document(&new_doc(83, "octo", "holds", "window"))
        .await
        .unwrap()
        .id;
    store
        .put_link_hold(&hold_of(doc, &mona, 1_000, Some(61_000)))
        .await
        .unwrap();
    assert!(
        !store.end_handover(doc, 999).await.unwrap(),
        "another write's window is not ended"
    );
    assert!(store.end_handover(doc, 1_000).await.unwrap());
    assert_eq!(
        store.link_holds().await.unwrap(),
        vec![hold_of(doc, &mona, 1_000, None)],
        "the row stays, without its window"
    );
    assert!(
        !store.end_handover(doc, 1_000).await.unwrap(),
        "only one rewrite ends the window"
    );
    assert!(!store.delete_link_hold(doc, 999).await.unwrap());
    assert_eq!(store.link_holds().await.unwrap().len(), 1);
    assert!(store.delete_link_hold(doc, 1_000).await.unwrap());
    assert!(store.link_holds().await.unwrap().is_empty());
    assert!(!store.delete_link_hold(doc, 1_000).await.unwrap());
}

async fn ao_20_startup_keeps_owners_whose_hold_names_their_login_with_a_stored_credential(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 84, "mona").await;
    let lisa = member(&store, 85, "lisa").await;
    assert_eq!(
        store
            .set_login_credential(mona.browser_login_id, 0, b"sealed")
            .await
            .unwrap(),
        Some(1)
    );
    let doc = |n: u128, slug: &str| new_doc(90 + n, "octo", "holds", slug);
    let mut ids = Vec::new();
    for (n, slug) in ["kept", "no-hold", "no-credential", "other-login", "free"]
        .into_iter()
        .enumerate()
    {
        ids.push(
            store
                .create_document(&doc(n as u128, slug))
                .await
                .unwrap()
                .id,
        );
    }
    let (kept, no_hold, no_credential, other_login, free) =
        (ids[0], ids[1], ids[2], ids[3], ids[4]);
    for (d, h) in [
        (kept, &mona),
        (no_hold, &mona),
        (no_credential, &lisa),
        (other_login, &mona),
    ] {
        claimed(store.claim_ownership(d, h, 1_000).await.unwrap());
    }
    store
        .put_link_hold(&hold_of(kept, &mona, 1_000, Some(61_000)))
        .await
        .unwrap();
    // Lisa's login has no stored credential: a restart cannot bring her sign-in back.
    store
        .put_link_hold(&hold_of(no_credential, &lisa, 1_000, None))
        .await
        .unwrap();
    // The hold names another login of the same account than the one storage's owner names.
    let elsewhere = Holder {
        browser_login_id: Uuid::from_u128(0xe15e),
        ..mona.clone()
    };
    store
        .put_link_hold(&hold_of(other_login, &elsewhere, 1_000, None))
        .await
        .unwrap();
    store
        .put_link_hold(&hold_of(free, &mona, 1_000, None))
        .await
        .unwrap();

    assert_eq!(store.clear_unheld_ownership(Reach::Every).await.unwrap(), 3);
    let kept_own = store.ownership(kept).await.unwrap();
    assert_eq!(
        kept_own.holder.as_ref(),
        Some(&mona),
        "the hold's owner is kept"
    );
    assert_eq!(kept_own.generation, 1);
    for d in [no_hold, no_credential, other_login, free] {
        let own = store.ownership(d).await.unwrap();
        assert_eq!(own.holder, None, "{d}");
        assert_eq!(
            own.generation,
            if d == free { 0 } else { 1 },
            "generations are kept"
        );
    }
    // Once the credential is gone (a sign-out), a restart keeps nothing.
    assert!(store
        .delete_login_credential(mona.browser_login_id)
        .await
        .unwrap());
    assert_eq!(store.clear_unheld_ownership(Reach::Every).await.unwrap(), 1);
    assert_eq!(store.ownership(kept).await.unwrap().holder, None);
}

// OWN-23 needs a document's creator; MCP `create_document` keeps a brief. Both are set at
// creation and read back as written — the creator with the record (every read: by id, by slug,
// by a former slug, a repository's list, a parent's children, a rename's answer), the brief on
// its own — and both survive reopening. A document made without them has neither.
async fn own_23_a_documents_creator_and_brief_round_trip_and_survive_reopening(b: &Backend) {
    let store = b.open().await;
    let lisa = Creator {
        account_id: account_id_for_github_user(1004),
        login: "Lisa".into(),
    };
    // Not ASCII, with its own line ends, and as long as the server lets a brief be.
    let brief = format!(
        "Survey the quay — which first?\r\n{}",
        "b".repeat(64 * 1024 - 40)
    );
    let made = store
        .create_document(&NewDocument {
            creator: Some(lisa.clone()),
            brief: Some(brief.clone()),
            ..new_doc(1, "Owner", "Repo", "made")
        })
        .await
        .unwrap();
    assert_eq!(made.creator.as_ref(), Some(&lisa));
    let child = store
        .create_document(&NewDocument {
            creator: Some(lisa.clone()),
            ..child_doc(2, "Owner", "Repo", "child", made.id)
        })
        .await
        .unwrap();
    let bare = store
        .create_document(&new_doc(3, "Owner", "Repo", "bare"))
        .await
        .unwrap();
    assert_eq!(bare.creator, None);
    let renamed = store
        .rename_document(made.id, "renamed", "Renamed")
        .await
        .unwrap();
    assert_eq!(renamed.creator.as_ref(), Some(&lisa), "a rename keeps it");

    for store in [store, b.open().await] {
        let by_id = store.document(made.id).await.unwrap().unwrap();
        assert_eq!(by_id.creator.as_ref(), Some(&lisa));
        let by_former = store
            .document_by_slug("owner", "repo", "made")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(by_former.creator.as_ref(), Some(&lisa));
        let listed = store
            .repository_documents("Owner", "Repo", 10)
            .await
            .unwrap();
        let creators: Vec<Option<&str>> = listed
            .iter()
            .map(|d| d.creator.as_ref().map(|c| c.login.as_str()))
            .collect();
        assert_eq!(creators, vec![Some("Lisa"), Some("Lisa"), None]);
        let children = store.children(made.id).await.unwrap();
        assert_eq!(children[0].creator.as_ref(), Some(&lisa));
        assert_eq!(
            store.document(bare.id).await.unwrap().unwrap().creator,
            None
        );

        assert_eq!(
            store.document_brief(made.id).await.unwrap(),
            Some(brief.clone())
        );
        assert_eq!(store.document_brief(child.id).await.unwrap(), None);
        assert_eq!(store.document_brief(bare.id).await.unwrap(), None);
        assert!(is_not_found(
            store.document_brief(Uuid::from_u128(0xdead)).await
        ));
    }
}

// ISO-43: MCP `create_document` keeps the creating agent's `baseBranch` and `baseCommit` as
// given (the server checked their shape; the store checks nothing). They are read back on their
// own, as written, for the document made with them only, and survive a rename and reopening.
async fn iso_43_a_documents_creation_provenance_round_trips_and_survives_reopening(b: &Backend) {
    let store = b.open().await;
    // Branch names may be long, nested and not ASCII; a SHA-256 object id is 64 digits.
    let long = Provenance {
        base_branch: format!("feature/quay-é/{}", "b".repeat(200)),
        base_commit: "0123456789abcdef".repeat(4),
    };
    let short = Provenance {
        base_branch: "main".into(),
        base_commit: "a".repeat(40),
    };
    let made = store
        .create_document(&NewDocument {
            provenance: Some(long.clone()),
            ..new_doc(1, "Owner", "Repo", "made")
        })
        .await
        .unwrap();
    let child = store
        .create_document(&NewDocument {
            provenance: Some(short.clone()),
            ..child_doc(2, "Owner", "Repo", "child", made.id)
        })
        .await
        .unwrap();
    let bare = store
        .create_document(&new_doc(3, "Owner", "Repo", "bare"))
        .await
        .unwrap();
    store
        .rename_document(made.id, "renamed", "Renamed")
        .await
        .unwrap();

    for store in [store, b.open().await] {
        assert_eq!(
            store.document_provenance(made.id).await.unwrap(),
            Some(long.clone())
        );
        assert_eq!(
            store.document_provenance(child.id).await.unwrap(),
            Some(short.clone())
        );
        assert_eq!(store.document_provenance(bare.id).await.unwrap(), None);
        assert_eq!(
            store.document_brief(made.id).await.unwrap(),
            None,
            "provenance is not a brief"
        );
        assert!(is_not_found(
            store.document_provenance(Uuid::from_u128(0xdead)).await
        ));
    }
}

/// LIFE-76: whether a document was created through MCP is kept with it from creation (the
/// metadata `read_implementation` requires), read on its own, and survives a rename and a
/// reopen.
async fn life_76_a_document_created_through_mcp_says_so_for_good(b: &Backend) {
    let store = b.open().await;
    let through_mcp = store
        .create_document(&NewDocument {
            mcp_created: true,
            ..new_doc(1, "octo", "plans", "mcp")
        })
        .await
        .unwrap();
    let in_browser = store
        .create_document(&new_doc(2, "octo", "plans", "browser"))
        .await
        .unwrap();
    store
        .rename_document(through_mcp.id, "renamed", "Renamed")
        .await
        .unwrap();
    for store in [store, b.open().await] {
        assert!(store.created_through_mcp(through_mcp.id).await.unwrap());
        assert!(!store.created_through_mcp(in_browser.id).await.unwrap());
        assert!(is_not_found(
            store.created_through_mcp(Uuid::from_u128(0xdead)).await
        ));
    }
}

async fn mod_02_mod_04_mod_15_a_model_choice_is_stored_as_written_per_document_and_survives_reopening(
    b: &Backend,
) {
    let store = b.open().await;
    let first = store
        .create_document(&new_doc(91, "octo", "models", "first"))
        .await
        .unwrap()
        .id;
    let second = store
        .create_document(&new_doc(92, "octo", "models", "second"))
        .await
        .unwrap()
        .id;
    assert_eq!(
        store.model_choice(first).await.unwrap(),
        None,
        "nobody chose"
    );
    // Stored exactly as the catalog wrote it: case, spaces and any character kept.
    let odd = choice_of(first, "Provider/Model Ω 2.0 ", Some("X-High"));
    store.put_model_choice(&odd).await.unwrap();
    store
        .put_model_choice(&choice_of(second, "b", None))
        .await
        .unwrap();
    assert_eq!(store.model_choice(first).await.unwrap(), Some(odd.clone()));
    // A later choice replaces the document's, and only its own.
    let later = ModelChoice {
        chosen_by: "lisa".to_owned(),
        chosen_at_ms: 9_500,
        ..choice_of(first, "a", None)
    };
    store.put_model_choice(&later).await.unwrap();
    assert_eq!(
        store.model_choice(first).await.unwrap(),
        Some(later.clone())
    );
    assert_eq!(
        store.model_choice(second).await.unwrap(),
        Some(choice_of(second, "b", None))
    );
    // Choosing nothing deletes it (MOD-19); once only.
    assert!(store.clear_model_choice(second).await.unwrap());
    assert!(!store.clear_model_choice(second).await.unwrap());
    assert_eq!(store.model_choice(second).await.unwrap(), None);
    assert!(is_not_found(
        store
            .put_model_choice(&choice_of(Uuid::from_u128(0xdead), "a", None))
            .await
    ));
    drop(store);
    let reopened = b.open().await;
    assert_eq!(
        reopened.model_choice(first).await.unwrap(),
        Some(later),
        "kept across a reopen"
    );
    assert_eq!(reopened.model_choice(second).await.unwrap(), None);
}

async fn ctx_02_ctx_03_a_participation_pause_is_kept_per_document_and_survives_reopening(
    b: &Backend,
) {
    let store = b.open().await;
    let first = store
        .create_document(&new_doc(94, "octo", "pauses", "first"))
        .await
        .unwrap()
        .id;
    let second = store
        .create_document(&new_doc(95, "octo", "pauses", "second"))
        .await
        .unwrap()
        .id;
    assert_eq!(store.participation_pause(first).await.unwrap(), None);
    let pause = |doc, by: &str, at| ParticipationPause {
        document_id: doc,
        paused_by: by.to_owned(),
        paused_at_ms: at,
    };
    store
        .pause_participation(&pause(first, "mona", 1_000))
        .await
        .unwrap();
    store
        .pause_participation(&pause(second, "lisa", 1_100))
        .await
        .unwrap();
    // A second pause replaces the first: who and when are the latest.
    store
        .pause_participation(&pause(first, "lisa", 2_000))
        .await
        .unwrap();
    assert_eq!(
        store.participation_pause(first).await.unwrap(),
        Some(pause(first, "lisa", 2_000))
    );
    assert!(store.resume_participation(second).await.unwrap());
    assert!(
        !store.resume_participation(second).await.unwrap(),
        "once only"
    );
    assert_eq!(store.participation_pause(second).await.unwrap(), None);
    assert!(is_not_found(
        store
            .pause_participation(&pause(Uuid::from_u128(0xdead), "mona", 1))
            .await
    ));
    drop(store);
    let reopened = b.open().await;
    assert_eq!(
        reopened.participation_pause(first).await.unwrap(),
        Some(pause(first, "lisa", 2_000)),
        "kept across a reopen"
    );
    assert_eq!(reopened.participation_pause(second).await.unwrap(), None);
}

async fn cmd_16_a_messages_references_are_kept_with_it_and_survive_reopening(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(93, "octo", "refs", "chat"))
        .await
        .unwrap()
        .id;
    let refs = r#"[{"type":"command","name":"review","commandKind":"skill","start":0,"end":7}]"#;
    let with = NewTranscriptEntry {
        refs: Some(refs.to_owned()),
        ..entry(Some("mona"), "member", "/review the intro", 1_000)
    };
    let made = store.append_transcript(doc, &with).await.unwrap();
    assert_eq!(made.refs.as_deref(), Some(refs));
    let plain = store
        .append_transcript(doc, &entry(Some("mona"), "member", "plain", 1_001))
        .await
        .unwrap();
    assert_eq!(plain.refs, None);
    drop(store);
    let reopened = b.open().await;
    let read = reopened.transcript(doc, 0, 10).await.unwrap();
    assert_eq!(
        read.iter().map(|e| e.refs.as_deref()).collect::<Vec<_>>(),
        vec![Some(refs), None],
        "kept with their messages across a reopen"
    );
}

async fn file_01_file_09_file_16_a_file_is_kept_with_its_bytes_its_uploaders_until_sent_then_the_messages(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(94, "octo", "files", "chat"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(95, "octo", "files", "other"))
        .await
        .unwrap()
        .id;
    let png = [0x89u8, b'P', b'N', b'G', 0, 0xff, 1];
    let mut image = file_of(doc, 0xb1, "mona", &png);
    image.attachment.kind = "image".to_owned();
    image.attachment.mime_type = "image/png".to_owned();
    image.attachment.name = "shot Ω.png".to_owned();
    assert_eq!(
        store.put_attachment(&image, roomy()).await.unwrap(),
        Kept::Kept
    );
    let text = file_of(doc, 0xb2, "mona", b"notes\n");
    store.put_attachment(&text, roomy()).await.unwrap();
    let lisas = file_of(doc, 0xb3, "lisa", b"hers");
    store.put_attachment(&lisas, roomy()).await.unwrap();
    // Kept with its bytes exactly, under its document only.
    assert_eq!(
        store.attachment(doc, Uuid::from_u128(0xb1)).await.unwrap(),
        Some((image.attachment.clone(), png.to_vec()))
    );
    assert_eq!(
        store
            .attachment(other, Uuid::from_u128(0xb1))
            .await
            .unwrap(),
        None,
        "another document's file is not found through this one"
    );
    assert!(is_not_found(
        store
            .put_attachment(
                &file_of(Uuid::from_u128(0xdead), 0xb9, "mona", b"x"),
                roomy()
            )
            .await
    ));
    // A message sends only its author's own unsent files of its document, all or nothing.
    let refused = store
        .append_transcript(
            doc,
            &NewTranscriptEntry {
                attachments: vec![Uuid::from_u128(0xb1), Uuid::from_u128(0xb3)],
                ..entry(Some("mona"), "member", "with lisa's file", 2_000)
            },
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(
        store.last_transcript_seq(doc).await.unwrap(),
        0,
        "nothing appended"
    );
    assert_eq!(
        store
            .attachment(doc, Uuid::from_u128(0xb1))
            .await
            .unwrap()
            .unwrap()
            .0
            .sent_seq,
        None,
        "nothing marked sent"
    );
    let sent = store
        .append_transcript(
            doc,
            &NewTranscriptEntry {
                attachments: vec![Uuid::from_u128(0xb1), Uuid::from_u128(0xb2)],
                ..entry(Some("mona"), "member", "two files", 2_001)
            },
        )
        .await
        .unwrap();
    for id in [0xb1, 0xb2] {
        let (f, _) = store
            .attachment(doc, Uuid::from_u128(id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(f.sent_seq, Some(sent.seq));
    }
    // Sent once: a second message cannot send it again.
    let again = store
        .append_transcript(
            doc,
            &NewTranscriptEntry {
                attachments: vec![Uuid::from_u128(0xb2)],
                ..entry(Some("mona"), "member", "again", 2_002)
            },
        )
        .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    // Taking back: only the uploader, only unsent (FILE-09, RULINGS FILE-10).
    assert_eq!(
        store
            .take_back_attachment(doc, Uuid::from_u128(0xb1), "mona")
            .await
            .unwrap(),
        TakeBack::Sent
    );
    assert_eq!(
        store
            .take_back_attachment(doc, Uuid::from_u128(0xb3), "mona")
            .await
            .unwrap(),
        TakeBack::Missing,
        "not hers"
    );
    assert_eq!(
        store
            .take_back_attachment(other, Uuid::from_u128(0xb3), "lisa")
            .await
            .unwrap(),
        TakeBack::Missing,
        "not that document's"
    );
    assert_eq!(
        store
            .take_back_attachment(doc, Uuid::from_u128(0xb3), "lisa")
            .await
            .unwrap(),
        TakeBack::Taken
    );
    assert_eq!(
        store.attachment(doc, Uuid::from_u128(0xb3)).await.unwrap(),
        None
    );
    drop(store);
    let reopened = b.open().await;
    let (kept, bytes) = reopened
        .attachment(doc, Uuid::from_u128(0xb1))
        .await
        .unwrap()
        .expect("kept across a reopen");
    assert_eq!(bytes, png.to_vec());
    assert_eq!(kept.name, "shot Ω.png");
    assert_eq!(kept.sent_seq, Some(sent.seq));
}

async fn file_11_file_12_file_13_unsent_files_count_per_person_and_document_and_are_forgotten_after_the_window(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(96, "octo", "files", "caps"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(97, "octo", "files", "caps-2"))
        .await
        .unwrap()
        .id;
    let limit = UnsentLimit {
        max_files: 3,
        max_bytes: 10,
        since_ms: 500,
    };
    let at = |mut f: NewAttachment, ms: i64| {
        f.attachment.created_at_ms = ms;
        f
    };
    // A file made before the window is forgotten already: it counts for nothing.
    store
        .put_attachment(&at(file_of(doc, 0xc0, "mona", b"0123456789"), 499), roomy())
        .await
        .unwrap();
    for (id, bytes) in [(0xc1, &b"1234"[..]), (0xc2, b"5678")] {
        assert_eq!(
            store
                .put_attachment(&at(file_of(doc, id, "mona", bytes), 500), limit)
                .await
                .unwrap(),
            Kept::Kept
        );
    }
    // Bytes: 8 unsent + 3 would pass 10 (RULINGS FILE-13).
    assert_eq!(
        store
            .put_attachment(&file_of(doc, 0xc3, "mona", b"abc"), limit)
            .await
            .unwrap(),
        Kept::TooMuch
    );
    assert_eq!(
        store
            .put_attachment(&file_of(doc, 0xc4, "mona", b"ab"), limit)
            .await
            .unwrap(),
        Kept::Kept,
        "exactly at the limit"
    );
    assert_eq!(
        store
            .put_attachment(&file_of(doc, 0xc5, "mona", b""), limit)
            .await
            .unwrap(),
        Kept::TooMany
    );
    // Per person and per document.
    assert_eq!(
        store
            .put_attachment(&file_of(doc, 0xc6, "lisa", b"1234567890"), limit)
            .await
            .unwrap(),
        Kept::Kept
    );
    assert_eq!(
        store
            .put_attachment(&file_of(other, 0xc7, "mona", b"1234567890"), limit)
            .await
            .unwrap(),
        Kept::Kept
    );
    // A sent file no longer counts.
    store
        .append_transcript(
            doc,
            &NewTranscriptEntry {
                attachments: vec![Uuid::from_u128(0xc1)],
                ..entry(Some("mona"), "member", "sent", 2_000)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .put_attachment(&file_of(doc, 0xc8, "mona", b"wxyz"), limit)
            .await
            .unwrap(),
        Kept::Kept
    );
    // Forgetting: unsent files made before the cut, and only those.
    assert_eq!(store.forget_unsent_attachments(1_000).await.unwrap(), 2);
    assert_eq!(
        store.attachment(doc, Uuid::from_u128(0xc0)).await.unwrap(),
        None
    );
    assert_eq!(
        store.attachment(doc, Uuid::from_u128(0xc2)).await.unwrap(),
        None
    );
    assert!(store
        .attachment(doc, Uuid::from_u128(0xc1))
        .await
        .unwrap()
        .is_some());
    assert!(store
        .attachment(doc, Uuid::from_u128(0xc8))
        .await
        .unwrap()
        .is_some());
    assert_eq!(store.forget_unsent_attachments(1_001).await.unwrap(), 4);
    assert!(
        store
            .attachment(doc, Uuid::from_u128(0xc1))
            .await
            .unwrap()
            .is_some(),
        "sent: kept"
    );
}

// --- background jobs -------------------------------------------------------------------------

/// Job `id` of `doc` for target `target` under `key`, with `input`, made at `at`.
fn job_of(doc: Uuid, id: u128, target: &str, key: &str, input: &str, at: i64) -> NewJob {
    NewJob {
        id: Uuid::from_u128(id),
        document_id: doc,
        kind: "document-summary".to_owned(),
        version: 1,
        origin: "scheduler".to_owned(),
        target: target.to_owned(),
        idempotency_key: key.to_owned(),
        fingerprint: format!("fp:{input}"),
        input: input.to_owned(),
        max_failures: 3,
        created_at_ms: at,
    }
}

fn completed(artifact: &str) -> Settlement {
    Settlement::Completed {
        artifact: artifact.to_owned(),
    }
}

/// A store with one document, and that document's id.
async fn job_fixture(b: &Backend) -> (Arc<dyn Store>, Uuid) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(90, "octo", "jobs", "plan"))
        .await
        .unwrap();
    (store, doc.id)
}

async fn job_01_a_key_repeats_its_request_and_refuses_other_input(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    let first = store
        .enqueue_job(&job_of(doc, 1, "t", "k", r#"{"a":1}"#, 1_000))
        .await
        .unwrap();
    let Enqueued::New(kept) = first else {
        panic!("a first request is new: {first:?}")
    };
    assert_eq!(kept.state, JobState::Pending);
    assert_eq!(kept.target_generation, 1);
    assert_eq!(kept.available_at_ms, 1_000);
    // The same key and input, under another id: the first job, as it stands.
    let again = store
        .enqueue_job(&job_of(doc, 2, "t", "k", r#"{"a":1}"#, 2_000))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Repeated(kept.clone()));
    // The same key with other input: refused, nothing kept.
    let other = store
        .enqueue_job(&job_of(doc, 3, "t", "k", r#"{"a":2}"#, 3_000))
        .await;
    assert!(
        conflict_words(other).contains("already used"),
        "a key reused with other input conflicts"
    );
    assert_eq!(store.document_jobs(doc, 10).await.unwrap(), vec![kept]);
    assert_eq!(store.job(Uuid::from_u128(3)).await.unwrap(), None);
}

async fn job_01_a_newer_request_supersedes_the_targets_unsettled_jobs(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    store
        .enqueue_job(&job_of(doc, 1, "t", "k1", "1", 1_000))
        .await
        .unwrap();
    store
        .enqueue_job(&job_of(doc, 2, "t", "k2", "2", 1_001))
        .await
        .unwrap();
    store
        .claim_job(Uuid::from_u128(2), "host", 1_002, 30_000)
        .await
        .unwrap()
        .expect("claimed");
    store
        .enqueue_job(&job_of(doc, 9, "other", "k9", "9", 1_003))
        .await
        .unwrap();
    let third = store
        .enqueue_job(&job_of(doc, 3, "t", "k3", "3", 1_004))
        .await
        .unwrap();
    assert_eq!(third.job().target_generation, 3);
    let state = |id: u128| {
        let store = store.clone();
        async move { store.job(Uuid::from_u128(id)).await.unwrap().unwrap() }
    };
    assert_eq!(state(1).await.state, JobState::Superseded);
    let running = state(2).await;
    assert_eq!(running.state, JobState::Superseded, "a running job too");
    assert_eq!(running.claim_owner, None);
    assert_eq!(state(3).await.state, JobState::Pending);
    assert_eq!(
        state(9).await.state,
        JobState::Pending,
        "other targets untouched"
    );
    // The superseded attempt's late result does not land.
    assert!(!store
        .settle_job(Uuid::from_u128(2), 1, &completed("{}"), 1_005)
        .await
        .unwrap());
    assert_eq!(state(2).await.state, JobState::Superseded);
    // Listed newest first.
    let listed: Vec<_> = store
        .document_jobs(doc, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(
        listed,
        [3, 9, 2, 1].map(Uuid::from_u128).to_vec(),
        "newest first"
    );
    assert_eq!(store.document_jobs(doc, 2).await.unwrap().len(), 2);
}

async fn job_01_claim_race_exactly_one_wins(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    store
        .enqueue_job(&job_of(doc, 1, "t", "k", "{}", 1_000))
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut racers = Vec::new();
    for i in 0..RACERS {
        let (store, barrier) = (b.open().await, barrier.clone());
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .claim_job(Uuid::from_u128(1), &format!("host-{i}"), 1_000, 30_000)
                .await
                .unwrap()
        }));
    }
    let mut won = Vec::new();
    for r in racers {
        if let Some(job) = r.await.unwrap() {
            won.push(job);
        }
    }
    assert_eq!(won.len(), 1, "exactly one claim");
    let job = store.job(Uuid::from_u128(1)).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.claim_generation, 1);
    assert_eq!(job.claim_owner, won[0].claim_owner);
    assert_eq!(job.claim_expires_at_ms, Some(31_000));
}

async fn job_01_an_attempt_writes_only_under_its_own_claim(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    store
        .enqueue_job(&job_of(doc, 1, "t", "k", "{}", 1_000))
        .await
        .unwrap();
    let id = Uuid::from_u128(1);
    // Nothing to renew, progress or settle before a claim.
    assert!(!store.renew_job_claim(id, 0, 1_000, 10).await.unwrap());
    assert!(!store
        .settle_job(id, 0, &completed("{}"), 1_000)
        .await
        .unwrap());
    let job = store
        .claim_job(id, "host", 1_000, 30_000)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .claim_job(id, "other", 1_000, 30_000)
        .await
        .unwrap()
        .is_none());
    let generation = job.claim_generation;
    assert!(!store
        .renew_job_claim(id, generation + 1, 2_000, 30_000)
        .await
        .unwrap());
    assert!(store
        .renew_job_claim(id, generation, 2_000, 30_000)
        .await
        .unwrap());
    assert!(store
        .set_job_progress(id, generation, r#"["describe"]"#, 2_500)
        .await
        .unwrap());
    assert!(!store
        .set_job_progress(id, generation + 1, r#"["x"]"#, 2_500)
        .await
        .unwrap());
    let now = store.job(id).await.unwrap().unwrap();
    assert_eq!(now.claim_expires_at_ms, Some(32_000));
    assert_eq!(now.progress, r#"["describe"]"#);
    assert!(store
        .settle_job(id, generation, &completed(r#"{"d":"x"}"#), 3_000)
        .await
        .unwrap());
    // Settled once: a second settlement, a cancellation and a claim all find nothing to do.
    assert!(!store
        .settle_job(id, generation, &completed(r#"{"d":"y"}"#), 3_001)
        .await
        .unwrap());
    assert!(!store.cancel_job(id, "asked", 3_002).await.unwrap());
    assert!(store
        .claim_job(id, "host", 3_003, 30_000)
        .await
        .unwrap()
        .is_none());
    let done = store.job(id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.artifact.as_deref(), Some(r#"{"d":"x"}"#));
    assert_eq!(done.claim_owner, None);
    assert_eq!(
        store.last_completed_job(doc, "t").await.unwrap(),
        Some(done.clone())
    );
    assert_eq!(store.last_completed_job(doc, "other").await.unwrap(), None);
    // A newer request for the target keeps the completed one as the last completed.
    store
        .enqueue_job(&job_of(doc, 2, "t", "k2", "{}", 4_000))
        .await
        .unwrap();
    assert_eq!(
        store.last_completed_job(doc, "t").await.unwrap(),
        Some(done)
    );
    // A cancelled running job voids its claim.
    let second = store
        .claim_job(Uuid::from_u128(2), "host", 4_000, 30_000)
        .await
        .unwrap()
        .unwrap();
    assert!(store.cancel_job(second.id, "asked", 4_001).await.unwrap());
    assert!(!store
        .settle_job(second.id, second.claim_generation, &completed("{}"), 4_002)
        .await
        .unwrap());
    let cancelled = store.job(second.id).await.unwrap().unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(cancelled.reason.as_deref(), Some("asked"));
}

async fn job_01_retries_spend_the_failure_budget_and_wait_their_turn(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    store
        .enqueue_job(&job_of(doc, 1, "t", "k", "{}", 1_000))
        .await
        .unwrap();
    let id = Uuid::from_u128(1);
    let retry = |at: i64, failure: bool| Settlement::Retry {
        reason: "attempt-error".to_owned(),
        available_at_ms: at,
        failure,
    };
    // A retry that spends nothing (say, no client attached yet) leaves the budget whole.
    let g = store
        .claim_job(id, "h", 1_000, 30_000)
        .await
        .unwrap()
        .unwrap()
        .claim_generation;
    assert!(store
        .settle_job(id, g, &retry(2_000, false), 1_100)
        .await
        .unwrap());
    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.failures, job.attempts),
        (JobState::Pending, 0, 1)
    );
    // Not due before its time: neither listed nor claimable.
    assert!(store.due_jobs(1_999, 10).await.unwrap().is_empty());
    assert!(store
        .claim_job(id, "h", 1_999, 30_000)
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.due_jobs(2_000, 10).await.unwrap().len(), 1);
    // Two failures of a budget of three: pending again; the third settles it failed.
    for (n, at) in [(1, 3_000), (2, 4_000)] {
        let g = store
            .claim_job(id, "h", at - 1_000, 30_000)
            .await
            .unwrap()
            .unwrap()
            .claim_generation;
        assert!(store
            .settle_job(id, g, &retry(at, true), at - 900)
            .await
            .unwrap());
        let job = store.job(id).await.unwrap().unwrap();
        assert_eq!((job.state, job.failures), (JobState::Pending, n));
    }
    let g = store
        .claim_job(id, "h", 4_000, 30_000)
        .await
        .unwrap()
        .unwrap()
        .claim_generation;
    assert!(store
        .settle_job(id, g, &retry(9_000, true), 4_100)
        .await
        .unwrap());
    let job = store.job(id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.failures, job.attempts),
        (JobState::Failed, 3, 4)
    );
    assert_eq!(job.reason.as_deref(), Some("attempt-error"));
    assert!(store.due_jobs(i64::MAX, 10).await.unwrap().is_empty());
}

async fn job_09_own_18_a_new_process_fails_what_the_last_left_running_and_rows_survive_reopening(
    b: &Backend,
) {
    let (store, doc) = job_fixture(b).await;
    for n in 1..=3u128 {
        store
            .enqueue_job(&job_of(
                doc,
                n,
                &format!("t{n}"),
                &format!("k{n}"),
                "{}",
                1_000,
            ))
            .await
            .unwrap();
    }
    let running = store
        .claim_job(Uuid::from_u128(1), "old-process", 1_000, 30_000)
        .await
        .unwrap()
        .unwrap();
    drop(store);
    let store = b.open().await;
    assert_eq!(
        store.job(running.id).await.unwrap().unwrap(),
        running,
        "kept across a reopen"
    );
    // No credential is part of a row: the claim names the process only.
    assert_eq!(running.claim_owner.as_deref(), Some("old-process"));
    assert_eq!(
        store
            .interrupt_running_jobs("interrupted", 2_000, Reach::Every)
            .await
            .unwrap(),
        1
    );
    let interrupted = store.job(running.id).await.unwrap().unwrap();
    assert_eq!(interrupted.state, JobState::Failed);
    assert_eq!(interrupted.reason.as_deref(), Some("interrupted"));
    assert_eq!(interrupted.claim_owner, None);
    // The old attempt's late result does not land; the pending ones wait to be claimed.
    assert!(!store
        .settle_job(
            running.id,
            running.claim_generation,
            &completed("{}"),
            2_001
        )
        .await
        .unwrap());
    let due: Vec<_> = store
        .due_jobs(2_000, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(due, [2, 3].map(Uuid::from_u128).to_vec(), "oldest first");
}

async fn job_01_jobs_need_their_document_and_are_counted_by_state(b: &Backend) {
    let (store, doc) = job_fixture(b).await;
    assert!(is_not_found(
        store
            .enqueue_job(&job_of(Uuid::from_u128(0xdead), 1, "t", "k", "{}", 1_000))
            .await
    ));
    assert!(store.job_counts().await.unwrap().is_empty());
    for n in 1..=3u128 {
        store
            .enqueue_job(&job_of(
                doc,
                n,
                &format!("t{n}"),
                &format!("k{n}"),
                "{}",
                1_000,
            ))
            .await
            .unwrap();
    }
    store
        .claim_job(Uuid::from_u128(1), "h", 1_000, 10)
        .await
        .unwrap();
    store
        .cancel_job(Uuid::from_u128(2), "asked", 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.job_counts().await.unwrap(),
        vec![
            (JobState::Pending, 1),
            (JobState::Running, 1),
            (JobState::Cancelled, 1)
        ]
    );
}

async fn own_12_own_14_a_draft_lands_only_on_the_title_it_was_made_for_and_never_after_a_rename(
    b: &Backend,
) {
    let (store, doc) = job_fixture(b).await;
    let title =
        |store: Arc<dyn Store>| async move { store.document(doc).await.unwrap().unwrap().title };
    assert_eq!(
        store.title_sidecar(doc).await.unwrap(),
        TitleSidecar::default()
    );
    let first = title(store.clone()).await;
    // A draft made for another title than the document has now changes nothing.
    assert_eq!(
        store
            .draft_title(doc, "Not the title", "Drafted")
            .await
            .unwrap(),
        Drafted::Kept
    );
    assert_eq!(title(store.clone()).await, first);
    // Made for the title it has: applied, and recorded as the Planner's.
    assert_eq!(
        store
            .draft_title(doc, &first, "Search revamp")
            .await
            .unwrap(),
        Drafted::Applied
    );
    assert_eq!(title(store.clone()).await, "Search revamp");
    let before = store.document(doc).await.unwrap().unwrap();
    assert_eq!(
        store.title_sidecar(doc).await.unwrap(),
        TitleSidecar {
            chosen: false,
            planner_title: Some("Search revamp".into())
        }
    );
    // A draft changes no counter.
    assert_eq!(before.plan_revision, 0);
    assert_eq!(before.storage_revision, 0);
    // The record survives a reopen.
    drop(store);
    let store = b.open().await;
    assert_eq!(
        store
            .title_sidecar(doc)
            .await
            .unwrap()
            .planner_title
            .as_deref(),
        Some("Search revamp")
    );
    // A person renames it (even to the Planner's own draft): chosen, and no draft lands again.
    let renamed = store
        .rename_document(doc, &before.slug, "Search revamp")
        .await
        .unwrap();
    assert!(store.title_sidecar(doc).await.unwrap().chosen);
    assert_eq!(
        store
            .draft_title(doc, &renamed.title, "Something else")
            .await
            .unwrap(),
        Drafted::Kept
    );
    assert_eq!(title(store.clone()).await, "Search revamp");
    assert!(is_not_found(
        store.draft_title(Uuid::from_u128(0xdead), "", "x").await
    ));
}

fn note_by(author: Option<&str>, body: &str, at: i64) -> NewCommentNote {
    NewCommentNote {
        author_login: author.map(str::to_owned),
        to_planner: false,
        body: body.to_owned(),
        created_at_ms: at,
    }
}

/// RULINGS ISO-20 ("a comment thread is full at 100 replies") and ISO-19 ("it refuses […] a
/// resolved or full one"), checked in the same write as the reply; ISO-21's persistence: a
/// note is numbered and durable when the call returns.
async fn iso_19_iso_20_iso_21_comment_threads_number_their_notes_cap_replies_and_survive_reopening(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(96, "octo", "comments", "first"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(97, "octo", "comments", "second"))
        .await
        .unwrap()
        .id;
    let start = |id: u128, document, at| NewCommentThread {
        id: Uuid::from_u128(id),
        document_id: document,
        quote: "We serve EU\0 shoppers".into(),
        first: NewCommentNote {
            to_planner: true,
            ..note_by(Some("mona"), "Is one region enough?", at)
        },
    };
    let (thread, notes) = store.start_comment(&start(1, doc, 1_000)).await.unwrap();
    assert_eq!(
        thread.quote, "We serve EU\u{fffd} shoppers",
        "stored text has no NUL"
    );
    assert_eq!((thread.created_by.as_str(), thread.replies), ("mona", 0));
    assert_eq!(notes.len(), 1);
    assert_eq!((notes[0].seq, notes[0].to_planner), (0, true));
    assert!(matches!(
        store.start_comment(&start(1, doc, 1_001)).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(is_not_found(
        store
            .start_comment(&start(2, Uuid::from_u128(0xdead), 1_001))
            .await
    ));
    // Replies are numbered 1, 2, … and the Planner's has no author.
    let replied = store
        .reply_comment(doc, thread.id, &note_by(None, "Yes, for now.", 1_100), 3)
        .await
        .unwrap();
    let Replied::Saved(_, saved) = replied else {
        panic!("{replied:?}")
    };
    assert_eq!((saved.seq, saved.author_login.as_deref()), (1, None));
    for at in [1_200, 1_300] {
        assert!(matches!(
            store
                .reply_comment(doc, thread.id, &note_by(Some("lisa"), "ok", at), 3)
                .await
                .unwrap(),
            Replied::Saved(..)
        ));
    }
    assert_eq!(
        store
            .reply_comment(doc, thread.id, &note_by(Some("lisa"), "one more", 1_400), 3)
            .await
            .unwrap(),
        Replied::Full,
        "full at the cap: nothing saved"
    );
    // A thread is only found in its own document.
    assert!(is_not_found(
        store
            .reply_comment(other, thread.id, &note_by(Some("lisa"), "x", 1_500), 100)
            .await
    ));
    assert!(is_not_found(
        store.resolve_comment(other, thread.id, "lisa", 1_500).await
    ));
    let result = store.set_comment_result(doc, thread.id, 7).await.unwrap();
    assert_eq!(result.result_revision, Some(7));

    let (second, _) = store.start_comment(&start(3, doc, 2_000)).await.unwrap();
    let resolved = store
        .resolve_comment(doc, second.id, "lisa", 2_100)
        .await
        .unwrap();
    assert_eq!(
        (resolved.resolved_by.as_deref(), resolved.resolved_at_ms),
        (Some("lisa"), Some(2_100))
    );
    let again = store
        .resolve_comment(doc, second.id, "mona", 2_200)
        .await
        .unwrap();
    assert_eq!(again, resolved, "a second resolve keeps the first");
    assert_eq!(
        store
            .reply_comment(doc, second.id, &note_by(None, "late", 2_300), 100)
            .await
            .unwrap(),
        Replied::Resolved
    );
    drop(store);
    let reopened = b.open().await;
    let threads = reopened.comment_threads(doc, 10).await.unwrap();
    assert_eq!(
        threads.iter().map(|(t, _)| t.id).collect::<Vec<_>>(),
        [second.id, thread.id],
        "newest first"
    );
    let (kept, notes) = &threads[1];
    assert_eq!((kept.replies, kept.result_revision), (3, Some(7)));
    assert_eq!(
        notes.iter().map(|n| n.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(notes[1].body, "Yes, for now.");
    assert_eq!(reopened.comment_threads(doc, 1).await.unwrap().len(), 1);
    assert!(reopened
        .comment_threads(other, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        reopened.comment_thread(doc, thread.id).await.unwrap(),
        Some(threads[1].clone())
    );
    assert_eq!(
        reopened.comment_thread(other, thread.id).await.unwrap(),
        None
    );
}

// --- implementation graphs ------------------------------------------------------------------

fn edit(base: Option<(i64, i64)>, plan_revision: i64, definition: &str) -> GraphChange {
    GraphChange::Edit {
        base,
        plan_revision,
        definition: definition.into(),
    }
}

fn approve(graph_version: i64, graph_revision: i64, current_plan_revision: i64) -> GraphChange {
    GraphChange::Approve {
        graph_version,
        graph_revision,
        current_plan_revision,
    }
}

fn claim(plan_revision: i64, graph_version: i64, graph_revision: i64, run: &str) -> GraphChange {
    GraphChange::Claim {
        counters: GraphCounters {
            plan_revision,
            graph_version,
            graph_revision,
        },
        run_id: run.into(),
    }
}

fn end_run(graph_version: i64, run: &str, end: RunEnd) -> GraphChange {
    GraphChange::EndRun {
        graph_version,
        run_id: run.into(),
        end,
    }
}

/// Makes `change` of `doc`'s graph at `at`, expecting it accepted.
async fn changed(store: &Arc<dyn Store>, doc: Uuid, change: GraphChange, at: i64) -> GraphVersion {
    store
        .change_graph(doc, &change, at)
        .await
        .unwrap()
        .unwrap_or_else(|refusal| panic!("{change:?} refused: {refusal}"))
}

/// Makes `change` of `doc`'s graph, expecting it refused; nothing changes.
async fn refused(store: &Arc<dyn Store>, doc: Uuid, change: GraphChange) -> GraphRefusal {
    let before = store.graph_versions(doc).await.unwrap();
    let refusal = match store.change_graph(doc, &change, 9_999).await.unwrap() {
        Ok(v) => panic!("{change:?} was accepted: {v:?}"),
        Err(refusal) => refusal,
    };
    assert_eq!(
        store.graph_versions(doc).await.unwrap(),
        before,
        "a refusal changes nothing"
    );
    refusal
}

fn states(versions: &[GraphVersion]) -> Vec<(i64, GraphState)> {
    versions
        .iter()
        .map(|v| (v.counters.graph_version, v.state))
        .collect()
}

/// LIFE-28, LIFE-29, LIFE-30: a graph starts as version 1 in draft at revision 1; each edit of the
/// draft advances its revision and may follow a newer plan; an edit from a stale read is refused.
async fn life_28_life_29_life_30_a_first_draft_is_version_1_and_each_edit_advances_its_revision(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    assert!(store.graph_versions(doc).await.unwrap().is_empty());
    assert_eq!(
        refused(&store, doc, edit(Some((1, 1)), 1, "{}")).await,
        GraphRefusal::NoGraph
    );
    let first = changed(&store, doc, edit(None, 4, r#"{"tasks":["a"]}"#), 10).await;
    assert_eq!(
        (
            first.counters,
            first.state,
            first.definition.as_str(),
            first.created_at_ms
        ),
        (
            GraphCounters {
                plan_revision: 4,
                graph_version: 1,
                graph_revision: 1
            },
            GraphState::Draft,
            r#"{"tasks":["a"]}"#,
            10
        )
    );
    let edited = changed(
        &store,
        doc,
        edit(Some((1, 1)), 5, r#"{"tasks":["a","b"]}"#),
        20,
    )
    .await;
    assert_eq!(
        (
            edited.counters,
            edited.state,
            edited.created_at_ms,
            edited.updated_at_ms
        ),
        (
            GraphCounters {
                plan_revision: 5,
                graph_version: 1,
                graph_revision: 2
            },
            GraphState::Draft,
            10,
            20
        )
    );
    // The first editor's read is stale now; so is a read of no graph.
    let stale = GraphRefusal::Stale {
        latest_version: 1,
        latest_revision: 2,
    };
    assert_eq!(
        refused(&store, doc, edit(Some((1, 1)), 5, "{}")).await,
        stale
    );
    assert_eq!(refused(&store, doc, edit(None, 5, "{}")).await, stale);
    assert!(matches!(
        store
            .change_graph(Uuid::from_u128(0xdead), &edit(None, 1, "{}"), 1)
            .await,
        Err(StoreError::NotFound(_))
    ));
    // Kept across a reopen.
    drop(store);
    let store = b.open().await;
    assert_eq!(store.graph_versions(doc).await.unwrap(), vec![edited]);
}

/// LIFE-31: approval refuses a graph drafted against an older plan revision than the current one;
/// it approves exactly the latest draft, named by version and revision, and only a draft.
async fn life_31_approval_refuses_a_graph_drafted_against_an_older_plan_revision(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    assert_eq!(
        refused(&store, doc, approve(1, 1, 1)).await,
        GraphRefusal::NoGraph
    );
    changed(&store, doc, edit(None, 3, "{}"), 10).await;
    assert_eq!(
        refused(&store, doc, approve(1, 1, 4)).await,
        GraphRefusal::PlanChanged {
            drafted: 3,
            current: 4
        }
    );
    assert_eq!(
        refused(&store, doc, approve(1, 2, 3)).await,
        GraphRefusal::Stale {
            latest_version: 1,
            latest_revision: 1
        }
    );
    let approved = changed(&store, doc, approve(1, 1, 3), 20).await;
    assert_eq!(
        (approved.state, approved.updated_at_ms),
        (GraphState::Approved, 20)
    );
    assert_eq!(
        refused(&store, doc, approve(1, 1, 3)).await,
        GraphRefusal::NotDraft {
            state: "approved".into()
        }
    );
}

/// LIFE-32, LIFE-37: drafting a replacement while the latest version is approved makes a new
/// draft version and leaves the approved one as it is; approving the replacement supersedes it.
async fn life_32_life_37_a_replacement_draft_supersedes_nothing_until_it_is_approved(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    changed(&store, doc, approve(1, 1, 1), 11).await;
    let replacement = changed(&store, doc, edit(Some((1, 1)), 2, r#"{"v":2}"#), 12).await;
    assert_eq!(
        (replacement.counters, replacement.state),
        (
            GraphCounters {
                plan_revision: 2,
                graph_version: 2,
                graph_revision: 1
            },
            GraphState::Draft
        )
    );
    assert_eq!(
        states(&store.graph_versions(doc).await.unwrap()),
        [(1, GraphState::Approved), (2, GraphState::Draft)]
    );
    changed(&store, doc, edit(Some((2, 1)), 2, r#"{"v":2.1}"#), 13).await;
    changed(&store, doc, approve(2, 2, 2), 14).await;
    let versions = store.graph_versions(doc).await.unwrap();
    assert_eq!(
        states(&versions),
        [(1, GraphState::Superseded), (2, GraphState::Approved)]
    );
    assert_eq!(versions[0].updated_at_ms, 14);
}

/// LIFE-33: a claim checks the plan revision, the version and the revision together and moves
/// the approved version to locked, held by the run; while it is locked nothing else changes the
/// graph (another claim, an edit, an approval).
async fn life_33_a_claim_checks_all_three_counters_and_locks_the_version(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    assert_eq!(
        refused(&store, doc, claim(1, 1, 1, "run-1")).await,
        GraphRefusal::NoGraph
    );
    changed(&store, doc, edit(None, 2, "{}"), 10).await;
    assert_eq!(
        refused(&store, doc, claim(2, 1, 1, "run-1")).await,
        GraphRefusal::NotApproved {
            state: "draft".into()
        }
    );
    changed(&store, doc, approve(1, 1, 2), 11).await;
    let stale = GraphRefusal::Stale {
        latest_version: 1,
        latest_revision: 1,
    };
    assert_eq!(
        refused(&store, doc, claim(1, 1, 1, "run-1")).await,
        stale,
        "an older plan"
    );
    assert_eq!(
        refused(&store, doc, claim(2, 1, 2, "run-1")).await,
        stale,
        "another revision"
    );
    assert_eq!(
        refused(&store, doc, claim(2, 2, 1, "run-1")).await,
        stale,
        "another version"
    );
    let locked = changed(&store, doc, claim(2, 1, 1, "run-1"), 12).await;
    assert_eq!(
        (locked.state, locked.run_id.as_deref(), locked.updated_at_ms),
        (GraphState::Locked, Some("run-1"), 12)
    );
    let held = GraphRefusal::Locked { graph_version: 1 };
    assert_eq!(refused(&store, doc, claim(2, 1, 1, "run-2")).await, held);
    assert_eq!(
        refused(&store, doc, edit(Some((1, 1)), 2, "{}")).await,
        held
    );
    assert_eq!(refused(&store, doc, approve(1, 1, 2)).await, held);
}

/// LIFE-33: two runs claiming one approved version at the same moment: exactly one locks it.
async fn life_33_two_claims_at_once_lock_the_version_once(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    changed(&store, doc, approve(1, 1, 1), 11).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let claims = ["run-a", "run-b"].map(|run| {
        let (store, barrier) = (store.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store
                .change_graph(doc, &claim(1, 1, 1, run), 12)
                .await
                .unwrap()
        })
    });
    let mut won = Vec::new();
    for c in claims {
        match c.await.unwrap() {
            Ok(v) => won.push(v.run_id.unwrap()),
            Err(refusal) => assert_eq!(refusal, GraphRefusal::Locked { graph_version: 1 }),
        }
    }
    assert_eq!(won.len(), 1, "exactly one claim wins: {won:?}");
    let versions = store.graph_versions(doc).await.unwrap();
    assert_eq!(versions[0].run_id.as_ref(), Some(&won[0]));
}

/// LIFE-34, LIFE-35: every terminal run gives the version back as approved; a run whose
/// verification passed leaves it approved but never claimable again. Only the run holding the
/// version can end it.
async fn life_34_life_35_a_run_end_gives_the_version_back_and_a_verified_one_is_never_claimed_again(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    changed(&store, doc, approve(1, 1, 1), 11).await;
    changed(&store, doc, claim(1, 1, 1, "run-1"), 12).await;
    assert_eq!(
        refused(&store, doc, end_run(1, "run-0", RunEnd::Verified)).await,
        GraphRefusal::NotLocked {
            graph_version: 1,
            run_id: "run-0".into()
        }
    );
    let stopped = changed(&store, doc, end_run(1, "run-1", RunEnd::Stopped), 13).await;
    assert_eq!(
        (stopped.state, stopped.run_id.as_deref(), stopped.verified),
        (GraphState::Approved, None, false)
    );
    assert_eq!(
        refused(&store, doc, end_run(1, "run-1", RunEnd::Stopped)).await,
        GraphRefusal::NotLocked {
            graph_version: 1,
            run_id: "run-1".into()
        },
        "a run ends once"
    );
    changed(&store, doc, claim(1, 1, 1, "run-2"), 14).await;
    let verified = changed(&store, doc, end_run(1, "run-2", RunEnd::Verified), 15).await;
    assert_eq!(
        (verified.state, verified.verified),
        (GraphState::Approved, true)
    );
    assert_eq!(
        refused(&store, doc, claim(1, 1, 1, "run-3")).await,
        GraphRefusal::Ineligible
    );
}

/// LIFE-36: a version whose run asked for a revision stays approved and claimable, until a
/// replacement draft is the latest version: claims inspect the latest version only.
async fn life_36_a_revision_requested_version_is_claimable_until_a_replacement_is_latest(
    b: &Backend,
) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    changed(&store, doc, approve(1, 1, 1), 11).await;
    changed(&store, doc, claim(1, 1, 1, "run-1"), 12).await;
    let asked = changed(
        &store,
        doc,
        end_run(1, "run-1", RunEnd::RevisionRequested),
        13,
    )
    .await;
    assert_eq!(
        (asked.state, asked.revision_requested),
        (GraphState::Approved, true)
    );
    changed(&store, doc, claim(1, 1, 1, "run-2"), 14).await;
    changed(
        &store,
        doc,
        end_run(1, "run-2", RunEnd::RevisionRequested),
        15,
    )
    .await;
    changed(&store, doc, edit(Some((1, 1)), 2, r#"{"v":2}"#), 16).await;
    assert_eq!(
        refused(&store, doc, claim(1, 1, 1, "run-3")).await,
        GraphRefusal::Stale {
            latest_version: 2,
            latest_revision: 1
        },
        "the replacement draft is the latest: the old version is not claimed"
    );
    assert_eq!(
        refused(&store, doc, claim(2, 2, 1, "run-3")).await,
        GraphRefusal::NotApproved {
            state: "draft".into()
        }
    );
}

/// LIFE-38, LIFE-39: graph changes move no document counter (Yjs epoch, update sequence, storage
/// or plan revision), document writes move no graph counter, and archiving and restoring the
/// document move neither.
async fn life_38_life_39_graph_counters_are_not_document_counters(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    let counters = |d: Document| (d.plan_revision, d.storage_revision, d.yjs_epoch);
    let before = counters(store.document(doc).await.unwrap().unwrap());
    let journal = store.document_content(doc).await.unwrap().updates.len();
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    changed(&store, doc, approve(1, 1, 1), 11).await;
    changed(&store, doc, claim(1, 1, 1, "run-1"), 12).await;
    assert_eq!(
        counters(store.document(doc).await.unwrap().unwrap()),
        before
    );
    assert_eq!(
        store.document_content(doc).await.unwrap().updates.len(),
        journal
    );
    let graph = store.graph_versions(doc).await.unwrap();
    store.append_update(doc, b"an update", 13).await.unwrap();
    store.set_archived(doc, true).await.unwrap();
    store.set_archived(doc, false).await.unwrap();
    assert_eq!(store.graph_versions(doc).await.unwrap(), graph);
}

/// A run on `doc`'s first version, approved at plan revision 1 and claimed as `run`.
async fn claimed_run(store: &Arc<dyn Store>, doc: Uuid, run: &str) -> ImplementationRun {
    changed(store, doc, edit(None, 1, "{}"), 10).await;
    changed(store, doc, approve(1, 1, 1), 11).await;
    store
        .start_implementation(
            doc,
            graph_counters(1, 1, 1),
            run,
            r#"{"tasks":{}}"#,
            None,
            12,
        )
        .await
        .unwrap()
        .unwrap()
}

fn graph_counters(plan_revision: i64, graph_version: i64, graph_revision: i64) -> GraphCounters {
    GraphCounters {
        plan_revision,
        graph_version,
        graph_revision,
    }
}

fn report(key: &str, base_revision: i64, progress: &str, end: Option<RunEnd>) -> RunReport {
    RunReport {
        key: key.into(),
        payload: format!("payload of {key}"),
        base_revision,
        progress: progress.into(),
        result: format!("answer to {key}"),
        end,
        delivered: None,
    }
}

/// LIFE-42: the claim locks the version and makes the run in one commit; a refused claim makes
/// no run.
async fn life_42_a_claim_saves_its_run_with_the_lock_in_one_commit(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    let run = claimed_run(&store, doc, "run-1").await;
    assert_eq!(
        (
            run.run_id.as_str(),
            run.document_id,
            run.graph_version,
            run.revision,
            run.ended,
            run.started_at_ms
        ),
        ("run-1", doc, 1, 1, None, 12)
    );
    assert_eq!(
        store.implementation_run("run-1").await.unwrap(),
        Some(run.clone())
    );
    let version = store.graph_versions(doc).await.unwrap().remove(0);
    assert_eq!(
        (version.state, version.run_id.as_deref()),
        (GraphState::Locked, Some("run-1"))
    );
    let second = store
        .start_implementation(doc, graph_counters(1, 1, 1), "run-2", "{}", None, 13)
        .await
        .unwrap();
    assert_eq!(second, Err(GraphRefusal::Locked { graph_version: 1 }));
    assert_eq!(store.implementation_run("run-2").await.unwrap(), None);
    assert_eq!(store.implementation_runs(doc).await.unwrap(), vec![run]);
    let missing = store
        .start_implementation(
            Uuid::from_u128(77),
            graph_counters(1, 1, 1),
            "run-3",
            "{}",
            None,
            13,
        )
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
}

/// RULINGS LIFE-58: a saved report's key answers every later report with that key on the same
/// run with what was sent and answered first, saving nothing; the same key on another run is
/// another report.
async fn life_58_a_report_key_is_kept_with_its_answer_and_scoped_to_its_run(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    claimed_run(&store, doc, "run-1").await;
    assert_eq!(
        store.implementation_report("run-1", "k").await.unwrap(),
        None
    );
    let saved = store
        .report_implementation("run-1", &report("k", 1, "first", None), 20)
        .await
        .unwrap();
    let Reported::Saved(run) = saved else {
        panic!("{saved:?}")
    };
    assert_eq!(
        (run.revision, run.progress.as_str(), run.updated_at_ms),
        (2, "first", 20)
    );
    assert_eq!(
        store.implementation_report("run-1", "k").await.unwrap(),
        Some(("payload of k".into(), "answer to k".into()))
    );
    let again = store
        .report_implementation("run-1", &report("k", 2, "second", None), 21)
        .await
        .unwrap();
    assert_eq!(
        again,
        Reported::Repeated {
            payload: "payload of k".into(),
            result: "answer to k".into()
        }
    );
    assert_eq!(
        store
            .implementation_run("run-1")
            .await
            .unwrap()
            .unwrap()
            .progress,
        "first"
    );
    // The run ends; a second run on the same version takes the same key afresh.
    let ended = store
        .report_implementation(
            "run-1",
            &report("end", 2, "ended", Some(RunEnd::Stopped)),
            22,
        )
        .await
        .unwrap();
    assert!(matches!(ended, Reported::Saved(_)), "{ended:?}");
    store
        .start_implementation(doc, graph_counters(1, 1, 1), "run-2", "{}", None, 23)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.implementation_report("run-2", "k").await.unwrap(),
        None
    );
    let fresh = store
        .report_implementation("run-2", &report("k", 1, "theirs", None), 24)
        .await
        .unwrap();
    assert!(matches!(fresh, Reported::Saved(_)), "{fresh:?}");
    let missing = store
        .report_implementation("run-9", &report("k", 1, "x", None), 25)
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
}

/// LIFE-59: a report saves only against the run's revision it was worked out from, and never on
/// an ended run.
async fn life_59_a_report_worked_out_from_an_older_run_is_not_saved(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    claimed_run(&store, doc, "run-1").await;
    store
        .report_implementation("run-1", &report("a", 1, "a", None), 20)
        .await
        .unwrap();
    let stale = store
        .report_implementation("run-1", &report("b", 1, "b", None), 21)
        .await
        .unwrap();
    assert_eq!(stale, Reported::Moved);
    assert_eq!(
        store.implementation_report("run-1", "b").await.unwrap(),
        None
    );
    store
        .report_implementation(
            "run-1",
            &report("c", 2, "c", Some(RunEnd::RevisionRequested)),
            22,
        )
        .await
        .unwrap();
    let after_end = store
        .report_implementation("run-1", &report("d", 3, "d", None), 23)
        .await
        .unwrap();
    assert_eq!(after_end, Reported::Moved);
    let run = store.implementation_run("run-1").await.unwrap().unwrap();
    assert_eq!(
        (run.revision, run.progress.as_str(), run.ended),
        (3, "c", Some(RunEnd::RevisionRequested))
    );
}

/// LIFE-34: the report that ends a run gives its version back as approved in the same commit,
/// verified when verification passed.
async fn life_34_a_report_that_ends_the_run_gives_the_version_back_in_its_commit(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    claimed_run(&store, doc, "run-1").await;
    store
        .report_implementation(
            "run-1",
            &report("v", 1, "verified", Some(RunEnd::Verified)),
            30,
        )
        .await
        .unwrap();
    let version = store.graph_versions(doc).await.unwrap().remove(0);
    assert_eq!(
        (
            version.state,
            version.run_id,
            version.verified,
            version.updated_at_ms
        ),
        (GraphState::Approved, None, true, 30)
    );
    let again = store
        .start_implementation(doc, graph_counters(1, 1, 1), "run-2", "{}", None, 31)
        .await
        .unwrap();
    assert_eq!(again, Err(GraphRefusal::Ineligible));
}

/// LIFE-58, LIFE-59: two reports worked out from the same revision at the same moment: one is
/// saved, the other is told the run moved.
async fn life_58_two_reports_at_once_on_one_run_save_one(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap()
        .id;
    claimed_run(&store, doc, "run-1").await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let reports = ["a", "b"].map(|key| {
        let (store, barrier) = (store.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            store
                .report_implementation("run-1", &report(key, 1, key, None), 20)
                .await
                .unwrap()
        })
    });
    let mut saved = 0;
    for r in reports {
        match r.await.unwrap() {
            Reported::Saved(run) => {
                saved += 1;
                assert_eq!(run.revision, 2);
            }
            other => assert_eq!(other, Reported::Moved),
        }
    }
    assert_eq!(saved, 1);
}

// --- paired machines -------------------------------------------------------------------------

const MACHINE_A: Uuid = Uuid::from_u128(0x3ac1_00a1);
const MACHINE_B: Uuid = Uuid::from_u128(0x3ac1_00b2);

async fn ac_20_ac_22_machines_are_paired_to_their_owner_and_listed_with_those_shared(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 81, "mona").await;
    let hubot = member(&store, 82, "hubot").await;
    let a = store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 2_000))
        .await
        .unwrap();
    assert_eq!(a.owner_login, "mona");
    assert_eq!(a.name, "studio");
    assert_eq!(a.release.as_deref(), Some("0.0.23"));
    store
        .pair_machine(&machine_of(MACHINE_B, &hubot, "ci-box", 1_500))
        .await
        .unwrap();
    match store
        .pair_machine(&machine_of(MACHINE_A, &mona, "again", 3_000))
        .await
    {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("a reused machine id: expected Conflict, got {other:?}"),
    }
    let stranger = Holder {
        account_id: Uuid::from_u128(0xdead),
        login: "nobody".into(),
        browser_login_id: Uuid::from_u128(0xdead),
    };
    match store
        .pair_machine(&machine_of(
            Uuid::from_u128(0x3ac1_00c3),
            &stranger,
            "x",
            3_000,
        ))
        .await
    {
        Err(StoreError::NotFound("account")) => {}
        other => panic!("an unknown owner: expected NotFound(account), got {other:?}"),
    }
    // hubot shares ci-box with mona: she sees her own first, then the shared one.
    assert!(store
        .share_machine(MACHINE_B, mona.account_id, 2_500)
        .await
        .unwrap());
    assert!(!store
        .share_machine(MACHINE_B, mona.account_id, 2_600)
        .await
        .unwrap());
    let names = |ms: Vec<Machine>| ms.into_iter().map(|m| m.name).collect::<Vec<_>>();
    assert_eq!(
        names(store.machines_of(mona.account_id).await.unwrap()),
        ["studio", "ci-box"]
    );
    assert_eq!(
        names(store.machines_of(hubot.account_id).await.unwrap()),
        ["ci-box"]
    );
    let shares = store.machine_shares(MACHINE_B).await.unwrap();
    assert_eq!(
        shares.iter().map(|a| a.login.as_str()).collect::<Vec<_>>(),
        ["mona"]
    );
    match store
        .share_machine(Uuid::from_u128(0x404), mona.account_id, 1)
        .await
    {
        Err(StoreError::NotFound("machine")) => {}
        other => panic!("sharing an unknown machine: expected NotFound(machine), got {other:?}"),
    }
    // The owner's login is read as the account has it now.
    store
        .upsert_account(81, "mona-renamed", 9_000)
        .await
        .unwrap();
    assert_eq!(
        store.machine(MACHINE_A).await.unwrap().unwrap().owner_login,
        "mona-renamed"
    );
    // The sealed authorization is replaced only at its revision, with the release told.
    assert_eq!(
        store.machine_credential(MACHINE_A).await.unwrap(),
        Some((1, b"sealed-studio".to_vec()))
    );
    assert_eq!(
        store
            .set_machine_credential(MACHINE_A, 1, b"sealed-2", Some("0.0.30"))
            .await
            .unwrap(),
        Some(2)
    );
    assert_eq!(
        store
            .set_machine_credential(MACHINE_A, 1, b"stale", None)
            .await
            .unwrap(),
        None
    );
    let store = b.open().await;
    assert_eq!(
        store.machine_credential(MACHINE_A).await.unwrap(),
        Some((2, b"sealed-2".to_vec()))
    );
    assert_eq!(
        store
            .machine(MACHINE_A)
            .await
            .unwrap()
            .unwrap()
            .release
            .as_deref(),
        Some("0.0.30")
    );
}

async fn ac_24_planner_credentials_are_kept_by_digest_the_newest_four_per_pair_and_survive_reopening(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 83, "mona").await;
    let doc = store
        .create_document(&new_doc(83, "octo", "paired", "plan"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(84, "octo", "paired", "other"))
        .await
        .unwrap()
        .id;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1_000))
        .await
        .unwrap();
    for n in 1..=5 {
        store
            .put_planner_credential(&credential_of(&format!("d-{n}"), MACHINE_A, doc, 1_000 + n))
            .await
            .unwrap();
    }
    store
        .put_planner_credential(&credential_of("o-1", MACHINE_A, other, 1_000))
        .await
        .unwrap();
    match store
        .put_planner_credential(&credential_of("x", Uuid::from_u128(0x404), doc, 1))
        .await
    {
        Err(StoreError::NotFound("machine")) => {}
        other => panic!("an unknown machine: expected NotFound(machine), got {other:?}"),
    }
    let store = b.open().await;
    assert_eq!(
        store.planner_credential("d-1").await.unwrap(),
        None,
        "the oldest went"
    );
    for n in 2..=5 {
        assert_eq!(
            store.planner_credential(&format!("d-{n}")).await.unwrap(),
            Some(credential_of(&format!("d-{n}"), MACHINE_A, doc, 1_000 + n))
        );
    }
    assert!(
        store.planner_credential("o-1").await.unwrap().is_some(),
        "per document"
    );
}

async fn ao_12_pres_16_choosing_another_machine_for_a_document_takes_the_earlier_ones_credentials(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 85, "mona").await;
    let doc = store
        .create_document(&new_doc(85, "octo", "paired", "plan"))
        .await
        .unwrap()
        .id;
    for (id, name) in [(MACHINE_A, "studio"), (MACHINE_B, "laptop")] {
        store
            .pair_machine(&machine_of(id, &mona, name, 1_000))
            .await
            .unwrap();
    }
    assert_eq!(store.machine_choice(doc).await.unwrap(), None);
    let first = machine_choice(doc, MACHINE_A, &mona, 2_000);
    assert_eq!(store.choose_machine(doc, Some(&first)).await.unwrap(), None);
    store
        .put_planner_credential(&credential_of("a-1", MACHINE_A, doc, 2_100))
        .await
        .unwrap();
    // The same machine chosen again keeps its credentials.
    let again = machine_choice(doc, MACHINE_A, &mona, 2_200);
    assert_eq!(
        store.choose_machine(doc, Some(&again)).await.unwrap(),
        Some(first)
    );
    assert!(store.planner_credential("a-1").await.unwrap().is_some());
    let moved = machine_choice(doc, MACHINE_B, &mona, 3_000);
    assert_eq!(
        store.choose_machine(doc, Some(&moved)).await.unwrap(),
        Some(again)
    );
    assert_eq!(store.planner_credential("a-1").await.unwrap(), None);
    assert_eq!(store.machine_documents(MACHINE_A).await.unwrap(), []);
    assert_eq!(
        store.machine_documents(MACHINE_B).await.unwrap(),
        std::slice::from_ref(&moved)
    );
    let store = b.open().await;
    assert_eq!(
        store.machine_choice(doc).await.unwrap(),
        Some(moved.clone())
    );
    assert_eq!(store.choose_machine(doc, None).await.unwrap(), Some(moved));
    assert_eq!(store.machine_choice(doc).await.unwrap(), None);
    match store
        .choose_machine(
            doc,
            Some(&machine_choice(doc, Uuid::from_u128(0x404), &mona, 1)),
        )
        .await
    {
        Err(StoreError::NotFound("machine")) => {}
        other => panic!("an unknown machine: expected NotFound(machine), got {other:?}"),
    }
    match store.choose_machine(Uuid::from_u128(0x404), None).await {
        Err(StoreError::NotFound("document")) => {}
        other => panic!("an unknown document: expected NotFound(document), got {other:?}"),
    }
}

async fn atm_37_default_machine_chooses_only_an_unchosen_document_and_lets_go_only_its_own_choice(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 89, "mona").await;
    let hubot = member(&store, 90, "hubot").await;
    let doc = store
        .create_document(&new_doc(89, "octo", "paired", "plan"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(90, "octo", "paired", "other"))
        .await
        .unwrap()
        .id;
    for (id, name) in [(MACHINE_A, "studio"), (MACHINE_B, "laptop")] {
        store
            .pair_machine(&machine_of(id, &mona, name, 1_000))
            .await
            .unwrap();
    }
    // Nobody chose one: Default machine's choice is stored, marked.
    let by_default = MachineChoice {
        by_default: true,
        ..machine_choice(doc, MACHINE_A, &mona, 2_000)
    };
    assert_eq!(
        store
            .choose_default_machine(&machine_choice(doc, MACHINE_A, &mona, 2_000))
            .await
            .unwrap(),
        (by_default.clone(), true)
    );
    // A second viewer's favourite does not move it.
    assert_eq!(
        store
            .choose_default_machine(&machine_choice(doc, MACHINE_B, &hubot, 2_100))
            .await
            .unwrap(),
        (by_default.clone(), false)
    );
    store
        .put_planner_credential(&credential_of("dm-1", MACHINE_A, doc, 2_200))
        .await
        .unwrap();
    // A person's choice is never replaced by Default machine.
    let person = machine_choice(other, MACHINE_B, &hubot, 2_300);
    store.choose_machine(other, Some(&person)).await.unwrap();
    assert_eq!(
        store
            .choose_default_machine(&machine_choice(other, MACHINE_A, &mona, 2_400))
            .await
            .unwrap(),
        (person.clone(), false)
    );
    let store = b.open().await;
    assert_eq!(
        store.default_machine_choices().await.unwrap(),
        std::slice::from_ref(&by_default)
    );
    assert_eq!(
        store.machine_documents(MACHINE_A).await.unwrap(),
        std::slice::from_ref(&by_default)
    );
    // Default machine lets go only of its own choice of that machine.
    assert!(!store
        .withdraw_default_machine(doc, MACHINE_B)
        .await
        .unwrap());
    assert!(!store
        .withdraw_default_machine(other, MACHINE_B)
        .await
        .unwrap());
    assert_eq!(store.machine_choice(other).await.unwrap(), Some(person));
    assert!(store
        .withdraw_default_machine(doc, MACHINE_A)
        .await
        .unwrap());
    assert_eq!(store.machine_choice(doc).await.unwrap(), None);
    assert_eq!(store.planner_credential("dm-1").await.unwrap(), None);
    assert_eq!(store.default_machine_choices().await.unwrap(), []);
    // A person's choice over Default machine's is no longer Default machine's.
    store
        .choose_default_machine(&machine_choice(doc, MACHINE_A, &mona, 3_000))
        .await
        .unwrap();
    let chosen = machine_choice(doc, MACHINE_A, &mona, 3_100);
    store.choose_machine(doc, Some(&chosen)).await.unwrap();
    assert!(!store
        .withdraw_default_machine(doc, MACHINE_A)
        .await
        .unwrap());
    assert_eq!(store.default_machine_choices().await.unwrap(), []);
    match store
        .choose_default_machine(&machine_choice(Uuid::from_u128(0x404), MACHINE_A, &mona, 1))
        .await
    {
        Err(StoreError::NotFound("document")) => {}
        other => panic!("an unknown document: expected NotFound(document), got {other:?}"),
    }
    let third = store
        .create_document(&new_doc(91, "octo", "paired", "third"))
        .await
        .unwrap()
        .id;
    match store
        .choose_default_machine(&machine_choice(third, Uuid::from_u128(0x404), &mona, 1))
        .await
    {
        Err(StoreError::NotFound("machine")) => {}
        other => panic!("an unknown machine: expected NotFound(machine), got {other:?}"),
    }
    assert_eq!(store.machine_choice(third).await.unwrap(), None);
}

fn new_build(id: u128, machine: Uuid, by: &Holder) -> NewBuild {
    NewBuild {
        id: Uuid::from_u128(id),
        machine_id: machine,
        requested_by_account_id: by.account_id,
        requested_by: by.login.clone(),
        checkout: Some("~/src/plans".into()),
    }
}

/// LIFE-05: Build plan's press approves exactly the draft and queues its build in one commit; a
/// refused approval queues nothing.
async fn life_05_a_press_approves_and_queues_its_build_in_one_commit_or_neither(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 92, "mona").await;
    let doc = store
        .create_document(&new_doc(92, "octo", "builds", "plan"))
        .await
        .unwrap()
        .id;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1_000))
        .await
        .unwrap();
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    // A stale press: refused, nothing approved or queued.
    let stale = store
        .approve_and_queue(doc, &approve(1, 2, 1), &new_build(1, MACHINE_A, &mona), 11)
        .await
        .unwrap();
    assert!(
        matches!(stale, Err(GraphRefusal::Stale { .. })),
        "{stale:?}"
    );
    assert_eq!(store.document_builds(doc).await.unwrap(), []);
    assert_eq!(
        store.graph_versions(doc).await.unwrap()[0].state,
        GraphState::Draft
    );
    let (approved, build) = store
        .approve_and_queue(doc, &approve(1, 1, 1), &new_build(2, MACHINE_A, &mona), 12)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approved.state, GraphState::Approved);
    assert_eq!(
        (
            build.graph_version,
            build.state,
            build.requested_by.as_str(),
            build.checkout.as_deref(),
            build.created_at_ms
        ),
        (1, BuildState::Queued, "mona", Some("~/src/plans"), 12)
    );
    let store = b.open().await;
    assert_eq!(store.build(build.id).await.unwrap(), Some(build.clone()));
    assert_eq!(
        store.machine_builds(MACHINE_A).await.unwrap(),
        std::slice::from_ref(&build)
    );
    assert_eq!(store.machine_builds(MACHINE_B).await.unwrap(), []);
    assert_eq!(
        store.document_builds(doc).await.unwrap(),
        std::slice::from_ref(&build)
    );
    match store
        .approve_and_queue(
            Uuid::from_u128(0x404),
            &approve(1, 1, 1),
            &new_build(3, MACHINE_A, &mona),
            13,
        )
        .await
    {
        Err(StoreError::NotFound("document")) => {}
        other => panic!("an unknown document: expected NotFound(document), got {other:?}"),
    }
}

/// LIFE-48: a queued build is handed out once; a claim of its version while it launches claims
/// it with the run; a failed one stays failed; unpairing its machine fails a pending build.
async fn life_48_life_06_a_build_is_picked_up_once_with_its_bridge_and_a_claim_of_its_version_claims_it(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 93, "mona").await;
    let doc = store
        .create_document(&new_doc(93, "octo", "builds", "plan"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_document(&new_doc(94, "octo", "builds", "other"))
        .await
        .unwrap()
        .id;
    for (id, name) in [(MACHINE_A, "studio"), (MACHINE_B, "laptop")] {
        store
            .pair_machine(&machine_of(id, &mona, name, 1_000))
            .await
            .unwrap();
    }
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    let (_, build) = store
        .approve_and_queue(doc, &approve(1, 1, 1), &new_build(1, MACHINE_A, &mona), 11)
        .await
        .unwrap()
        .unwrap();
    let picked = store
        .pick_up_build(build.id, "bridge-1", 20)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (picked.state, picked.updated_at_ms),
        (BuildState::Launching, 20)
    );
    assert_eq!(
        store.pick_up_build(build.id, "bridge-2", 21).await.unwrap(),
        None,
        "never twice"
    );
    // The bridge handed out with it names it; the refused second one names nothing (LIFE-06).
    assert_eq!(
        store.build_by_bridge("bridge-1").await.unwrap(),
        Some(picked.clone())
    );
    assert_eq!(store.build_by_bridge("bridge-2").await.unwrap(), None);
    assert_eq!(store.machine_builds(MACHINE_A).await.unwrap(), []);
    store
        .start_implementation(doc, graph_counters(1, 1, 1), "run-1", "{}", None, 30)
        .await
        .unwrap()
        .unwrap();
    let store = b.open().await;
    let claimed = store.build(build.id).await.unwrap().unwrap();
    assert_eq!(
        store.build_by_bridge("bridge-1").await.unwrap(),
        Some(claimed.clone()),
        "the bridge survives reopening and follows the build"
    );
    assert_eq!(
        (
            claimed.state,
            claimed.run_id.as_deref(),
            claimed.updated_at_ms
        ),
        (BuildState::Claimed, Some("run-1"), 30)
    );
    assert_eq!(store.fail_build(build.id, "late", 31).await.unwrap(), None);

    // Another document's build fails before its claim, and stays failed.
    changed(&store, other, edit(None, 1, "{}"), 40).await;
    let (_, second) = store
        .approve_and_queue(
            other,
            &approve(1, 1, 1),
            &new_build(2, MACHINE_A, &mona),
            41,
        )
        .await
        .unwrap()
        .unwrap();
    let failed = store
        .fail_build(second.id, "no checkout", 42)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (failed.state, failed.reason.as_deref()),
        (BuildState::Failed, Some("no checkout"))
    );
    assert_eq!(
        store
            .pick_up_build(second.id, "bridge-3", 43)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.fail_build(second.id, "again", 44).await.unwrap(),
        None
    );

    // A pending build of an unpaired machine fails, kept as history.
    changed(&store, other, edit(Some((1, 1)), 1, "{\"x\":1}"), 50).await;
    let latest = store.graph_versions(other).await.unwrap().pop().unwrap();
    let (_, third) = store
        .approve_and_queue(
            other,
            &approve(
                latest.counters.graph_version,
                latest.counters.graph_revision,
                1,
            ),
            &new_build(3, MACHINE_B, &mona),
            51,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(store.unpair_machine(MACHINE_B).await.unwrap());
    let gone = store.build(third.id).await.unwrap().unwrap();
    assert_eq!(
        (gone.state, gone.reason.as_deref()),
        (BuildState::Failed, Some("machine-revoked"))
    );
    assert_eq!(
        store
            .document_builds(other)
            .await
            .unwrap()
            .iter()
            .map(|b| b.id)
            .collect::<Vec<_>>(),
        [third.id, second.id],
        "newest first"
    );
}

/// LIFE-48: a failed build is retried explicitly: queued again for the approved version while
/// nothing else is pending; never for a draft or a version a run holds.
async fn life_48_a_person_retries_a_failed_build_of_the_approved_version(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 95, "mona").await;
    let doc = store
        .create_document(&new_doc(95, "octo", "builds", "plan"))
        .await
        .unwrap()
        .id;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1_000))
        .await
        .unwrap();
    changed(&store, doc, edit(None, 1, "{}"), 10).await;
    assert_eq!(
        store
            .queue_build(doc, &new_build(9, MACHINE_A, &mona), 11)
            .await
            .unwrap(),
        Err(QueueRefusal::NotApproved),
        "a draft is pressed, not retried"
    );
    let (_, first) = store
        .approve_and_queue(doc, &approve(1, 1, 1), &new_build(1, MACHINE_A, &mona), 12)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .queue_build(doc, &new_build(2, MACHINE_A, &mona), 13)
            .await
            .unwrap(),
        Err(QueueRefusal::Pending { build: first.id })
    );
    store.fail_build(first.id, "no checkout", 14).await.unwrap();
    let again = store
        .queue_build(doc, &new_build(2, MACHINE_A, &mona), 15)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.graph_version, again.state, again.created_at_ms),
        (1, BuildState::Queued, 15)
    );
    let store = b.open().await;
    assert_eq!(
        store.machine_builds(MACHINE_A).await.unwrap(),
        std::slice::from_ref(&again)
    );
    store
        .pick_up_build(again.id, "bridge-4", 16)
        .await
        .unwrap()
        .unwrap();
    store
        .start_implementation(doc, graph_counters(1, 1, 1), "run-1", "{}", None, 17)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .queue_build(doc, &new_build(3, MACHINE_A, &mona), 18)
            .await
            .unwrap(),
        Err(QueueRefusal::NotApproved),
        "a version a run holds is not built again"
    );
}

/// `doc` (the account `by`'s, on machine A) after a browser build of a first draft claimed by
/// `run` at 30 and verified at 40, delivering `source` at plan revision 1: the build.
async fn delivered(store: &Arc<dyn Store>, doc: Uuid, by: &Holder, id: u128, run: &str) -> Build {
    changed(store, doc, edit(None, 1, "{}"), 10).await;
    let (_, build) = store
        .approve_and_queue(doc, &approve(1, 1, 1), &new_build(id, MACHINE_A, by), 11)
        .await
        .unwrap()
        .unwrap();
    store
        .pick_up_build(build.id, &format!("bridge-{id}"), 20)
        .await
        .unwrap()
        .unwrap();
    store
        .start_implementation(doc, graph_counters(1, 1, 1), run, "{}", None, 30)
        .await
        .unwrap()
        .unwrap();
    let verified = RunReport {
        delivered: Some(Delivery {
            source: "# Plan\n\nBuilt.\n".into(),
            plan_revision: 1,
        }),
        ..report("verified", 1, "{\"done\":true}", Some(RunEnd::Verified))
    };
    assert!(matches!(
        store
            .report_implementation(run, &verified, 40)
            .await
            .unwrap(),
        Reported::Saved(_)
    ));
    store.build(build.id).await.unwrap().unwrap()
}

/// LIFE-11: when the run a browser build's claim started passes its verification, what it built
/// becomes the document's built source in that report's commit; a run claimed through `/mcp`
/// alone, or a report that does not end the run verified, records nothing.
async fn life_11_a_browser_build_that_delivers_records_its_built_source(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 96, "mona").await;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1))
        .await
        .unwrap();
    let doc = store
        .create_document(&new_doc(96, "octo", "rebuilds", "plan"))
        .await
        .unwrap()
        .id;
    let mcp = store
        .create_document(&new_doc(97, "octo", "rebuilds", "mcp"))
        .await
        .unwrap()
        .id;
    assert_eq!(store.built_source(doc).await.unwrap(), None);
    let build = delivered(&store, doc, &mona, 1, "run-1").await;
    let store = b.open().await;
    assert_eq!(
        store.built_source(doc).await.unwrap(),
        Some(BuiltSource {
            document_id: doc,
            build_id: build.id,
            plan_revision: 1,
            source: "# Plan\n\nBuilt.\n".into(),
            recorded_at_ms: 40,
        })
    );
    // Claimed through /mcp, no build: a delivery names nothing to record.
    changed(&store, mcp, edit(None, 1, "{}"), 10).await;
    changed(&store, mcp, approve(1, 1, 1), 11).await;
    store
        .start_implementation(mcp, graph_counters(1, 1, 1), "run-2", "{}", None, 30)
        .await
        .unwrap()
        .unwrap();
    let not_ending = RunReport {
        delivered: Some(Delivery {
            source: "early".into(),
            plan_revision: 1,
        }),
        ..report("progress", 1, "{}", None)
    };
    store
        .report_implementation("run-2", &not_ending, 35)
        .await
        .unwrap();
    let verified = RunReport {
        delivered: Some(Delivery {
            source: "mcp".into(),
            plan_revision: 1,
        }),
        ..report("verified", 2, "{}", Some(RunEnd::Verified))
    };
    store
        .report_implementation("run-2", &verified, 40)
        .await
        .unwrap();
    assert_eq!(store.built_source(mcp).await.unwrap(), None);
}

/// LIFE-12, LIFE-14, LIFE-85: a rebuild is queued from the built source to the source as it is,
/// one at a time, only after a delivery and never while a run holds the graph; landed, its tasks
/// join as a new version, approved and never claimable, the after-source becomes the built
/// source, and a second landing changes nothing.
async fn life_12_life_14_life_85_a_rebuild_is_queued_from_the_built_source_and_lands_as_an_approved_completed_version(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 98, "mona").await;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1))
        .await
        .unwrap();
    let doc = store
        .create_document(&new_doc(98, "octo", "rebuilds", "plan"))
        .await
        .unwrap()
        .id;
    assert_eq!(
        store
            .queue_rebuild(doc, &new_build(9, MACHINE_A, &mona), "# Plan v2\n", 5, 45)
            .await
            .unwrap(),
        Err(QueueRefusal::NothingBuilt)
    );
    let first = delivered(&store, doc, &mona, 1, "run-1").await;
    let rebuild = store
        .queue_rebuild(doc, &new_build(10, MACHINE_A, &mona), "# Plan v2\n", 5, 50)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (rebuild.kind, rebuild.state, rebuild.graph_version),
        (BuildKind::Rebuild, BuildState::Queued, 1)
    );
    let change = rebuild.change.clone().unwrap();
    assert_eq!(
        (
            change.before.as_str(),
            change.after.as_str(),
            change.plan_revision
        ),
        ("# Plan\n\nBuilt.\n", "# Plan v2\n", 5)
    );
    assert_eq!(
        store
            .queue_rebuild(doc, &new_build(11, MACHINE_A, &mona), "# Plan v3\n", 6, 51)
            .await
            .unwrap(),
        Err(QueueRefusal::Pending { build: rebuild.id }),
        "one rebuild at a time"
    );
    assert_eq!(
        store.machine_builds(MACHINE_A).await.unwrap(),
        std::slice::from_ref(&rebuild)
    );
    assert!(matches!(
        store.land_rebuild(rebuild.id, "{}", "{}", 52).await.unwrap(),
        Landing::NotLaunching(b) if b.state == BuildState::Queued
    ));
    assert!(matches!(
        store.land_rebuild(first.id, "{}", "{}", 52).await.unwrap(),
        Landing::NotLaunching(_)
    ));
    store
        .pick_up_build(rebuild.id, "bridge-r", 55)
        .await
        .unwrap()
        .unwrap();
    let Landing::Landed {
        rebuild: landed,
        version,
    } = store
        .land_rebuild(rebuild.id, "{\"tasks\":[]}", "{\"done\":1}", 60)
        .await
        .unwrap()
    else {
        panic!("the launching rebuild lands");
    };
    assert_eq!(
        (
            landed.state,
            landed.graph_version,
            landed.change.clone(),
            landed.run_id.clone()
        ),
        (
            BuildState::Landed,
            2,
            None,
            Some(chopin_store::builds::rebuild_run_id(rebuild.id))
        )
    );
    // Its report is the run of the version it made, ended verified (LIFE-14).
    let run = store
        .implementation_run(landed.run_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            run.graph_version,
            run.ended,
            run.progress.as_str(),
            run.started_at_ms
        ),
        (2, Some(RunEnd::Verified), "{\"done\":1}", 60)
    );
    assert_eq!(
        (
            version.counters,
            version.state,
            version.verified,
            version.definition.as_str()
        ),
        (
            graph_counters(5, 2, 1),
            GraphState::Approved,
            true,
            "{\"tasks\":[]}"
        )
    );
    let store = b.open().await;
    let states: Vec<GraphState> = store
        .graph_versions(doc)
        .await
        .unwrap()
        .iter()
        .map(|v| v.state)
        .collect();
    assert_eq!(states, [GraphState::Superseded, GraphState::Approved]);
    assert_eq!(
        store
            .built_source(doc)
            .await
            .unwrap()
            .map(|s| (s.build_id, s.plan_revision, s.source)),
        Some((rebuild.id, 5, "# Plan v2\n".to_owned()))
    );
    assert_eq!(store.build(rebuild.id).await.unwrap(), Some(landed.clone()));
    assert_eq!(
        store.build_by_bridge("bridge-r").await.unwrap(),
        Some(landed.clone()),
        "the bridge still names it, for a repeated report"
    );
    assert_eq!(
        store
            .land_rebuild(rebuild.id, "{\"other\":1}", "{}", 61)
            .await
            .unwrap(),
        Landing::Already(landed)
    );
    assert_eq!(store.graph_versions(doc).await.unwrap().len(), 2);
    assert_eq!(
        store
            .start_implementation(doc, graph_counters(5, 2, 1), "run-x", "{}", None, 62)
            .await
            .unwrap(),
        Err(GraphRefusal::Ineligible),
        "a landed rebuild's version is complete"
    );
    // A failed rebuild keeps no sources; the next press is a new rebuild (LIFE-17).
    let second = store
        .queue_rebuild(doc, &new_build(12, MACHINE_A, &mona), "# Plan v3\n", 7, 70)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.change.as_ref().map(|c| c.before.as_str()),
        Some("# Plan v2\n")
    );
    let failed = store
        .fail_build(second.id, "no agent", 71)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((failed.state, failed.change), (BuildState::Failed, None));
    assert!(store
        .queue_rebuild(doc, &new_build(13, MACHINE_A, &mona), "# Plan v3\n", 7, 72)
        .await
        .unwrap()
        .is_ok());
    // A run holding the graph refuses a rebuild.
    let other = store
        .create_document(&new_doc(99, "octo", "rebuilds", "held"))
        .await
        .unwrap()
        .id;
    delivered(&store, other, &mona, 20, "run-20").await;
    changed(&store, other, edit(Some((1, 1)), 2, "{\"v\":2}"), 80).await;
    changed(&store, other, approve(2, 1, 2), 81).await;
    store
        .start_implementation(other, graph_counters(2, 2, 1), "run-21", "{}", None, 82)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .queue_rebuild(other, &new_build(21, MACHINE_A, &mona), "x", 3, 83)
            .await
            .unwrap(),
        Err(QueueRefusal::Locked { graph_version: 2 })
    );
}

/// LIFE-86: a document keeps 100 builds; a rebuild past that makes the oldest ended rebuild give
/// way, never a first build.
async fn life_86_ended_rebuilds_give_way_oldest_first_past_100_builds(b: &Backend) {
    let store = b.open().await;
    let mona = member(&store, 100, "mona").await;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1))
        .await
        .unwrap();
    let doc = store
        .create_document(&new_doc(100, "octo", "rebuilds", "long"))
        .await
        .unwrap()
        .id;
    let first = delivered(&store, doc, &mona, 1, "run-1").await;
    let mut rebuilds = Vec::new();
    for n in 0..101 {
        let queued = store
            .queue_rebuild(
                doc,
                &new_build(1000 + n, MACHINE_A, &mona),
                "after",
                2,
                100 + n as i64,
            )
            .await
            .unwrap()
            .unwrap();
        store
            .fail_build(queued.id, "stopped", 100 + n as i64)
            .await
            .unwrap();
        rebuilds.push(queued.id);
    }
    // 102 queued in all: the oldest two rebuilds gave way, so 100 are kept.
    assert_eq!(
        store.build(first.id).await.unwrap().map(|b| b.kind),
        Some(BuildKind::Build)
    );
    assert_eq!(store.build(rebuilds[0]).await.unwrap(), None);
    assert_eq!(store.build(rebuilds[1]).await.unwrap(), None);
    assert!(store.build(rebuilds[2]).await.unwrap().is_some());
    assert!(store.build(rebuilds[99]).await.unwrap().is_some());
}

/// RULINGS LIFE-87: the sweep fails a build picked up and silent since the cutoff, at its edge;
/// a queued one waits; the live runs of claimed browser builds with no report since the cutoff
/// are found, and a run claimed through `/mcp` alone is not.
async fn life_83_a_connectors_latest_poll_is_recorded_and_read_back_by_any_process(b: &Backend) {
    use chopin_store::ConnectorPoll;
    let store = b.open().await;
    let mona = member(&store, 105, "mona").await;
    for (id, name) in [(MACHINE_A, "studio"), (MACHINE_B, "laptop")] {
        store
            .pair_machine(&machine_of(id, &mona, name, 1))
            .await
            .unwrap();
    }
    let poll = |machine_id, polled_at_ms, auto_build| ConnectorPoll {
        machine_id,
        polled_at_ms,
        auto_build,
    };
    store
        .record_connector_poll(&poll(MACHINE_A, 1_000, true))
        .await
        .unwrap();
    // An older poll arriving late changes nothing; a machine never paired records nothing.
    store
        .record_connector_poll(&poll(MACHINE_A, 900, false))
        .await
        .unwrap();
    store
        .record_connector_poll(&poll(MACHINE_B, 2_000, false))
        .await
        .unwrap();
    store
        .record_connector_poll(&poll(Uuid::from_u128(0x3ac1_00ff), 3_000, true))
        .await
        .unwrap();
    assert_eq!(
        store.connector_polls_since(1_000).await.unwrap(),
        [poll(MACHINE_A, 1_000, true), poll(MACHINE_B, 2_000, false)]
    );
    assert_eq!(
        store.connector_polls_since(1_001).await.unwrap(),
        [poll(MACHINE_B, 2_000, false)]
    );
    store
        .record_connector_poll(&poll(MACHINE_A, 2_500, false))
        .await
        .unwrap();
    assert_eq!(
        store.connector_polls_since(2_001).await.unwrap(),
        [poll(MACHINE_A, 2_500, false)]
    );
    // Unpairing takes its polls with it.
    assert!(store.unpair_machine(MACHINE_A).await.unwrap());
    assert_eq!(
        store.connector_polls_since(0).await.unwrap(),
        [poll(MACHINE_B, 2_000, false)]
    );
}

async fn life_87_the_sweep_expires_silent_launching_builds_and_finds_silent_build_runs(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 101, "mona").await;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1))
        .await
        .unwrap();
    let docs: Vec<Uuid> = [(101, "a"), (102, "b"), (103, "c"), (104, "d")]
        .into_iter()
        .map(|(n, slug)| new_doc(n, "octo", "sweep", slug).id)
        .collect();
    for (n, slug) in [(101, "a"), (102, "b"), (103, "c"), (104, "d")] {
        store
            .create_document(&new_doc(n, "octo", "sweep", slug))
            .await
            .unwrap();
    }
    for (i, doc) in docs.iter().take(3).enumerate() {
        changed(&store, *doc, edit(None, 1, "{}"), 10).await;
        store
            .approve_and_queue(
                *doc,
                &approve(1, 1, 1),
                &new_build(1 + i as u128, MACHINE_A, &mona),
                11,
            )
            .await
            .unwrap()
            .unwrap();
    }
    let ids: Vec<Uuid> = (1..=3).map(Uuid::from_u128).collect();
    store
        .pick_up_build(ids[0], "bridge-a", 20)
        .await
        .unwrap()
        .unwrap();
    store
        .pick_up_build(ids[2], "bridge-c", 20)
        .await
        .unwrap()
        .unwrap();
    store
        .start_implementation(docs[2], graph_counters(1, 1, 1), "run-c", "{}", None, 30)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.expire_builds(Reach::Every, 19, 100).await.unwrap(),
        [],
        "1 ms before"
    );
    assert_eq!(store.silent_builds(19).await.unwrap(), []);
    assert_eq!(
        store
            .silent_builds(20)
            .await
            .unwrap()
            .iter()
            .map(|b| (b.id, b.document_id, b.state))
            .collect::<Vec<_>>(),
        [(ids[0], docs[0], BuildState::Launching)]
    );
    // One document at a time, as a process serving some documents does: another document's
    // sweep leaves it.
    assert_eq!(
        store
            .expire_builds(Reach::Document(docs[1]), 20, 101)
            .await
            .unwrap(),
        []
    );
    let expired = store
        .expire_builds(Reach::Document(docs[0]), 20, 101)
        .await
        .unwrap();
    assert_eq!(
        expired
            .iter()
            .map(|b| (b.id, b.state, b.reason.as_deref(), b.updated_at_ms))
            .collect::<Vec<_>>(),
        [(ids[0], BuildState::Failed, Some("expired"), 101)]
    );
    assert_eq!(store.silent_builds(20).await.unwrap(), []);
    assert_eq!(
        store.build(ids[1]).await.unwrap().unwrap().state,
        BuildState::Queued
    );
    assert_eq!(
        store.build(ids[2]).await.unwrap().unwrap().state,
        BuildState::Claimed
    );
    // A run claimed through /mcp alone is no build's.
    changed(&store, docs[3], edit(None, 1, "{}"), 10).await;
    changed(&store, docs[3], approve(1, 1, 1), 11).await;
    store
        .start_implementation(docs[3], graph_counters(1, 1, 1), "run-d", "{}", None, 30)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.silent_build_runs(29).await.unwrap(), []);
    let silent: Vec<String> = store
        .silent_build_runs(30)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(silent, ["run-c"]);
    store
        .report_implementation("run-c", &report("k", 1, "{}", None), 40)
        .await
        .unwrap();
    assert_eq!(store.silent_build_runs(39).await.unwrap(), []);
    assert_eq!(store.silent_build_runs(40).await.unwrap().len(), 1);
}

async fn ac_22_ac_23_unsharing_takes_the_teammates_choices_and_unpairing_takes_every_row(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 86, "mona").await;
    let hubot = member(&store, 87, "hubot").await;
    let docs: Vec<Uuid> = [(86, "one"), (87, "two"), (88, "three")]
        .into_iter()
        .map(|(n, slug)| new_doc(n, "octo", "paired", slug))
        .map(|d| d.id)
        .collect();
    for (n, slug) in [(86, "one"), (87, "two"), (88, "three")] {
        store
            .create_document(&new_doc(n, "octo", "paired", slug))
            .await
            .unwrap();
    }
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1_000))
        .await
        .unwrap();
    store
        .share_machine(MACHINE_A, hubot.account_id, 1_100)
        .await
        .unwrap();
    // mona chose it for one; hubot for two and three, and made it his favourite.
    store
        .choose_machine(
            docs[0],
            Some(&machine_choice(docs[0], MACHINE_A, &mona, 1_200)),
        )
        .await
        .unwrap();
    for d in &docs[1..] {
        store
            .choose_machine(*d, Some(&machine_choice(*d, MACHINE_A, &hubot, 1_300)))
            .await
            .unwrap();
    }
    store
        .set_favourite_machine(hubot.account_id, Some(MACHINE_A))
        .await
        .unwrap();
    store
        .set_favourite_machine(mona.account_id, Some(MACHINE_A))
        .await
        .unwrap();
    for (i, d) in docs.iter().enumerate() {
        store
            .put_planner_credential(&credential_of(&format!("c-{i}"), MACHINE_A, *d, 1_400))
            .await
            .unwrap();
    }
    assert!(store
        .unshare_machine(MACHINE_A, hubot.account_id)
        .await
        .unwrap());
    assert!(!store
        .unshare_machine(MACHINE_A, hubot.account_id)
        .await
        .unwrap());
    assert_eq!(store.machines_of(hubot.account_id).await.unwrap(), []);
    assert_eq!(
        store.favourite_machine(hubot.account_id).await.unwrap(),
        None
    );
    assert_eq!(
        store.favourite_machine(mona.account_id).await.unwrap(),
        Some(MACHINE_A)
    );
    let chosen: Vec<Uuid> = store
        .machine_documents(MACHINE_A)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.document_id)
        .collect();
    assert_eq!(chosen, [docs[0]], "only the owner's own choice stays");
    assert!(store.planner_credential("c-0").await.unwrap().is_some());
    assert_eq!(store.planner_credential("c-1").await.unwrap(), None);
    assert_eq!(store.planner_credential("c-2").await.unwrap(), None);

    assert!(store.unpair_machine(MACHINE_A).await.unwrap());
    assert!(!store.unpair_machine(MACHINE_A).await.unwrap());
    let store = b.open().await;
    assert_eq!(store.machine(MACHINE_A).await.unwrap(), None);
    assert_eq!(store.machine_credential(MACHINE_A).await.unwrap(), None);
    assert_eq!(store.machines_of(mona.account_id).await.unwrap(), []);
    assert_eq!(
        store.favourite_machine(mona.account_id).await.unwrap(),
        None
    );
    assert_eq!(store.machine_choice(docs[0]).await.unwrap(), None);
    assert_eq!(store.planner_credential("c-0").await.unwrap(), None);
    assert_eq!(store.machine_shares(MACHINE_A).await.unwrap(), []);
}

async fn ao_21_a_machines_hold_names_the_machine_and_keeps_its_runs_but_not_its_owner_at_startup(
    b: &Backend,
) {
    let store = b.open().await;
    let mona = member(&store, 91, "mona").await;
    store
        .pair_machine(&machine_of(MACHINE_A, &mona, "studio", 1_000))
        .await
        .unwrap();
    let held = store
        .create_document(&new_doc(91, "octo", "machine-holds", "held"))
        .await
        .unwrap()
        .id;
    let revoked = store
        .create_document(&new_doc(92, "octo", "machine-holds", "revoked"))
        .await
        .unwrap()
        .id;
    store
        .pair_machine(&machine_of(MACHINE_B, &mona, "laptop", 1_000))
        .await
        .unwrap();
    for (doc, machine) in [(held, MACHINE_A), (revoked, MACHINE_B)] {
        claimed(store.claim_ownership(doc, &mona, 1_000).await.unwrap());
        let hold = LinkHold {
            browser_login_id: None,
            machine_id: Some(machine),
            ..hold_of(doc, &mona, 1_000, None)
        };
        store.put_link_hold(&hold).await.unwrap();
        store
            .save_run(&run(doc, "r", "running"), &[stage(0, "running")], false)
            .await
            .unwrap();
    }
    // The laptop is unpaired before the restart: its hold keeps nothing.
    store.unpair_machine(MACHINE_B).await.unwrap();
    drop(store);
    let store = b.open().await;
    // Startup: no owner is kept (the hold names no login)...
    store.clear_unheld_ownership(Reach::Every).await.unwrap();
    assert!(store.ownership(held).await.unwrap().holder.is_none());
    // ...but the machine's hold keeps its live runs for its backend (AO-21).
    store.stop_unheld_runs(Reach::Every).await.unwrap();
    let status = |runs: Vec<RunRecord>| runs.into_iter().map(|r| r.status).collect::<Vec<_>>();
    assert_eq!(status(store.runs(held).await.unwrap()), ["running"]);
    assert_eq!(status(store.runs(revoked).await.unwrap()), ["stopped"]);
    let holds = store.link_holds().await.unwrap();
    let kept = holds.iter().find(|h| h.document_id == held).unwrap();
    assert_eq!(
        (kept.machine_id, kept.browser_login_id),
        (Some(MACHINE_A), None)
    );
}

/// Issue 27 (idempotency that survives a move): a key is claimed by one call, which alone
/// answers or releases it; the claim holds until its expiry, at the edge exactly, and is then
/// as good as none; one caller's key is not another's nor another scope's; every claim sweeps
/// the expired ones away.
async fn requests_a_key_is_claimed_once_answered_by_its_claim_and_free_again_at_its_expiry(
    b: &Backend,
) {
    let store = b.open().await;
    let key = request_key("create_document", "account-a", "k-1", None);
    assert_eq!(
        store
            .claim_request(&key, "d-1", 1_000, 601_000)
            .await
            .unwrap(),
        RequestClaim::Claimed { since_ms: 1_000 }
    );
    let held = |answer: Option<&str>| {
        RequestClaim::Held(KeptRequest {
            digest: "d-1".into(),
            answer: answer.map(str::to_owned),
            since_ms: 1_000,
            expires_at_ms: 601_000,
        })
    };
    // A second call finds the first one's claim, whatever input it brings.
    assert_eq!(
        store
            .claim_request(&key, "d-2", 2_000, 602_000)
            .await
            .unwrap(),
        held(None)
    );
    // Only the claim itself answers it.
    assert!(!store.answer_request(&key, 999, "other").await.unwrap());
    assert!(store.answer_request(&key, 1_000, "doc-77").await.unwrap());
    assert_eq!(
        store
            .claim_request(&key, "d-1", 3_000, 603_000)
            .await
            .unwrap(),
        held(Some("doc-77"))
    );
    // Another caller's key, or the same key in another scope, is another request.
    for other in [
        request_key("create_document", "account-b", "k-1", None),
        request_key("update_document", "account-a", "k-1", None),
    ] {
        assert_eq!(
            store
                .claim_request(&other, "d-1", 3_000, 603_000)
                .await
                .unwrap(),
            RequestClaim::Claimed { since_ms: 3_000 }
        );
    }
    // At 1 ms before its expiry the claim holds; at its expiry it is gone and claimed anew.
    assert_eq!(
        store
            .claim_request(&key, "d-1", 600_999, 1_200_999)
            .await
            .unwrap(),
        held(Some("doc-77"))
    );
    assert_eq!(
        store
            .claim_request(&key, "d-3", 601_000, 1_201_000)
            .await
            .unwrap(),
        RequestClaim::Claimed { since_ms: 601_000 }
    );
    assert!(
        !store.answer_request(&key, 1_000, "late").await.unwrap(),
        "the expired claim answers nothing"
    );
    // The claims of the other scope and caller expired at 603 000: the next claim of any key
    // swept them away, so their late answers find nothing.
    let sweeper = request_key("chat", "mona", "r-9", None);
    store
        .claim_request(&sweeper, "", 603_000, 1_203_000)
        .await
        .unwrap();
    let swept = request_key("create_document", "account-b", "k-1", None);
    assert!(!store.answer_request(&swept, 3_000, "late").await.unwrap());
    // A release frees the key for the next call; an old claim's release changes nothing.
    assert!(!store.release_request(&key, 1_000).await.unwrap());
    assert!(store.release_request(&key, 601_000).await.unwrap());
    assert_eq!(
        store
            .claim_request(&key, "d-4", 601_500, 1_201_500)
            .await
            .unwrap(),
        RequestClaim::Claimed { since_ms: 601_500 }
    );
    // Keys are text as every backend stores it.
    let odd = request_key("chat", "mo\0na", "r-\0", Some(Uuid::from_u128(5)));
    assert_eq!(
        store.claim_request(&odd, "", 1_000, 2_000).await.unwrap(),
        RequestClaim::Claimed { since_ms: 1_000 }
    );
    assert!(store.answer_request(&odd, 1_000, "a\0").await.unwrap());
}

/// Issue 27: calls with one key at once (a retry racing its first call on another process):
/// exactly one claims it, and every other finds that claim.
async fn requests_claims_of_one_key_at_once_give_it_to_exactly_one(b: &Backend) {
    let store = b.open().await;
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let key = request_key("create_document", "account-a", "same", None);
            store
                .claim_request(&key, "d", 1_000 + i as i64, 600_000)
                .await
                .unwrap()
        }));
    }
    let mut claimed = Vec::new();
    let mut held = BTreeSet::new();
    for task in tasks {
        match task.await.unwrap() {
            RequestClaim::Claimed { since_ms } => claimed.push(since_ms),
            RequestClaim::Held(kept) => {
                held.insert(kept.since_ms);
            }
        }
    }
    assert_eq!(claimed.len(), 1, "exactly one claims the key");
    assert!(
        held.iter().all(|since| *since == claimed[0]),
        "every other call finds that claim: {held:?} vs {claimed:?}"
    );
}

/// MSG-16 across processes: the entry an append with a key made is read back by that key
/// (another process answers a re-sent message from it); an unknown key or document has none.
async fn msg_16_an_entry_is_read_back_by_the_key_its_append_carried(b: &Backend) {
    let store = b.open().await;
    let doc = store
        .create_document(&new_doc(1, "o", "r", "s"))
        .await
        .unwrap();
    store
        .append_transcript(doc.id, &entry(None, "system", "first", 10))
        .await
        .unwrap();
    let mut keyed = entry(Some("mona"), "member", "once", 20);
    keyed.key = Some("msg:mona:r-1".into());
    let saved = store.append_transcript(doc.id, &keyed).await.unwrap();
    assert_eq!(saved.seq, 2);
    assert_eq!(
        store
            .transcript_by_key(doc.id, "msg:mona:r-1")
            .await
            .unwrap(),
        Some(saved)
    );
    assert_eq!(
        store
            .transcript_by_key(doc.id, "msg:mona:r-2")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .transcript_by_key(Uuid::from_u128(0xdead), "msg:mona:r-1")
            .await
            .unwrap(),
        None
    );
}
