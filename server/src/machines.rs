//! Paired machines: a member's machine (the local connector, `chopin connect --planner`) that
//! runs Planners for documents, with its own GitHub authorization (docs/connector.md).
//!
//! Owns: pairing a machine to the account its GitHub token names, with that token sealed at rest
//! as the machine's authorization (replaced when the connector presents a newer one); sharing it
//! with teammates and taking the share back; each account's favourite; the machine chosen for a
//! document; revoking (unpairing) it; issuing document-scoped Planner credentials (`POST
//! /api/connector/planner`, AC-20) kept only by digest (AC-24); recognising one when a backend
//! attaches, with the machine's authorization opened for the access checks (AC-21); and the
//! machine's delegated login — one per machine in this process, held by no browser — which
//! revoking the machine, or GitHub refusing its authorization, ends with `access-revoked` on
//! every link it holds (AC-23). Moving a document to another machine ends the link, grace period
//! or hold of the machine it leaves (AO-12).
//! Does not own: the routes (the transport), the attach itself and the checks every attach makes
//! (the agent endpoint), or the attachment table ([`Planners`]).
//!
//! Invariants: a machine's GitHub token and a Planner credential are never logged or stored in
//! clear (the token sealed, the credential hashed); a machine acts only for its owner's account,
//! on documents that chose it; a teammate can choose only a machine shared with them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use http::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::access::{Access, Caller};
use crate::config::Secret;
use crate::error::ApiError;
use crate::identity::crypto::{CredentialAad, CredentialKey, StoredCredential};
use crate::identity::sign_ins::{sha256_hex, LiveLogin, LoginEnd, SignIns};
use crate::planner::Planners;
use crate::runtime::{SharedClock, SharedEntropy};
use crate::store::{
    Account, Document, Machine, MachineChoice, NewMachine, PlannerCredential, Store, StoreError,
    UnixMillis,
};

/// Why a link of a machine the document left is closed.
const MOVED: &str =
    "This document now runs its Planner on another machine, which ends this Planner link.";

/// What every Planner credential starts with, so the agent endpoint tells it from a GitHub token.
pub const PLANNER_CREDENTIAL_PREFIX: &str = "chopin_planner_";
/// How long a Planner credential attaches: a backend asks for a new one when it restarts, and a
/// running one renews before this.
pub const PLANNER_CREDENTIAL_TTL_MS: i64 = 24 * 60 * 60 * 1000;
/// The longest machine name kept, in characters.
pub const MACHINE_NAME_MAX_CHARS: usize = 64;
/// The longest release word kept, in characters.
const RELEASE_MAX_CHARS: usize = 32;
/// How many machines one account may pair.
pub const MACHINES_PER_ACCOUNT_MAX: usize = 20;
/// How many teammates one machine may be shared with.
pub const SHARES_PER_MACHINE_MAX: usize = 100;

/// What a machine's sealed authorization is bound to besides the machine: this deployment.
#[derive(Debug, Clone)]
pub struct MachineSettings {
    /// `APP_ORIGIN`.
    pub app_origin: String,
    /// `GITHUB_APP_CLIENT_ID` (empty when unset).
    pub client_id: String,
}

/// A Planner credential as issued: shown to the connector once, never again.
pub struct IssuedCredential {
    pub credential: Secret,
    pub document_id: Uuid,
    pub expires_at_ms: UnixMillis,
}

/// A backend attaching with a Planner credential: the machine, the document the credential is
/// for, and the machine's own GitHub authorization (its owner's account).
pub struct MachineAttach {
    pub machine: Machine,
    pub document_id: Uuid,
    pub account: Account,
    pub token: Secret,
}

impl std::fmt::Debug for MachineAttach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineAttach")
            .field("machine", &self.machine.id)
            .field("document_id", &self.document_id)
            .finish_non_exhaustive()
    }
}

/// The paired machines this server knows, and the delegated logins this process made for them.
pub struct Machines {
    store: Arc<dyn Store>,
    key: Arc<CredentialKey>,
    entropy: SharedEntropy,
    clock: SharedClock,
    access: Arc<Access>,
    sign_ins: Arc<SignIns>,
    planners: Arc<Planners>,
    settings: MachineSettings,
    /// Machine id → the delegated logins made for it in this process (a newer one when the
    /// machine's authorization changed), the newest last.
    delegated: Mutex<BTreeMap<Uuid, Vec<Arc<LiveLogin>>>>,
}

fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message)
}

fn machine_not_found(id: Uuid) -> ApiError {
    refused(
        StatusCode::NOT_FOUND,
        "machine-not-found",
        format!("No machine {id} that you can use is paired with this server."),
    )
}

fn credential_refused() -> ApiError {
    refused(
        StatusCode::UNAUTHORIZED,
        "bad-credentials",
        "This Planner credential is unknown, has expired, or its machine no longer runs the document; the connector asks for a new one.",
    )
}

/// A name, release, checkout or reason as kept: trimmed, control characters dropped, at most
/// `max` characters.
pub(crate) fn tidy(text: &str, max: usize) -> String {
    text.trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect()
}

impl Machines {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn Store>,
        key: Arc<CredentialKey>,
        entropy: SharedEntropy,
        clock: SharedClock,
        access: Arc<Access>,
        sign_ins: Arc<SignIns>,
        planners: Arc<Planners>,
        settings: MachineSettings,
    ) -> Self {
        Machines {
            store,
            key,
            entropy,
            clock,
            access,
            sign_ins,
            planners,
            settings,
            delegated: Mutex::default(),
        }
    }

    fn aad(
        &self,
        machine: Uuid,
        account: Uuid,
        created_at_ms: UnixMillis,
        revision: i64,
    ) -> CredentialAad {
        CredentialAad {
            origin: self.settings.app_origin.clone(),
            client_id: self.settings.client_id.clone(),
            login_id: machine,
            account_id: account,
            created_at_ms,
            expires_at_ms: 0,
            // Never a SHA-256 hex, so a machine's seal never opens as a browser login's.
            verifier_hash: "paired-machine".to_owned(),
            revision,
        }
    }

    fn seal(&self, machine: &Machine, revision: i64, token: &str) -> Vec<u8> {
        let aad = self.aad(
            machine.id,
            machine.owner_account_id,
            machine.created_at_ms,
            revision,
        );
        self.key.seal_credential(
            &*self.entropy,
            &aad,
            &StoredCredential {
                access_token: token.to_owned(),
                refresh_token: None,
                access_expires_at_ms: None,
                refresh_expires_at_ms: None,
            },
        )
    }

    /// The machine's own GitHub authorization (its owner's token), or `None` when the machine
    /// is unpaired or its authorization does not open. Never log it.
    pub(crate) async fn machine_token(
        &self,
        machine_id: Uuid,
    ) -> Result<Option<Secret>, StoreError> {
        let Some(machine) = self.store.machine(machine_id).await? else {
            return Ok(None);
        };
        Ok(self.authorization(&machine).await?.map(|(_, token)| token))
    }

    /// The machine's GitHub token and the revision it is stored at, opened from its seal.
    async fn authorization(&self, machine: &Machine) -> Result<Option<(i64, Secret)>, StoreError> {
        let Some((revision, sealed)) = self.store.machine_credential(machine.id).await? else {
            return Ok(None);
        };
        let aad = self.aad(
            machine.id,
            machine.owner_account_id,
            machine.created_at_ms,
            revision,
        );
        match self.key.open_credential(&aad, &sealed) {
            Ok(c) => Ok(Some((revision, Secret::new(c.access_token)))),
            Err(e) => {
                tracing::warn!(machine = %machine.id, error = %e, "a machine's stored authorization does not open with this key; the machine must be paired again");
                Ok(None)
            }
        }
    }

    /// Pairs a machine to the account of the caller's GitHub token (the connector's own
    /// authorization, `chopin connect`), keeping the token sealed as the machine's.
    pub async fn pair(
        &self,
        caller: &Caller,
        name: &str,
        release: Option<&str>,
    ) -> Result<Machine, ApiError> {
        Self::token_only(caller)?;
        let name = tidy(name, MACHINE_NAME_MAX_CHARS);
        if name.is_empty() {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "A machine needs a name (what its owner calls it, such as \"studio\").",
            ));
        }
        let own = self
            .store
            .machines_of(caller.account_id)
            .await
            .map_err(ApiError::store)?
            .into_iter()
            .filter(|m| m.owner_account_id == caller.account_id)
            .count();
        if own >= MACHINES_PER_ACCOUNT_MAX {
            return Err(refused(
                StatusCode::CONFLICT,
                "too-many-machines",
                format!(
                    "@{} already has {MACHINES_PER_ACCOUNT_MAX} paired machines; revoke one first.",
                    caller.login
                ),
            ));
        }
        let now = self.clock.now_ms();
        let id = self.entropy.uuid();
        let shell = Machine {
            id,
            owner_account_id: caller.account_id,
            owner_login: caller.login.clone(),
            name: name.clone(),
            release: release.map(|r| tidy(r, RELEASE_MAX_CHARS)),
            created_at_ms: now,
        };
        let sealed = self.seal(&shell, 1, caller.token());
        let machine = self
            .store
            .pair_machine(&NewMachine {
                id,
                owner_account_id: caller.account_id,
                name,
                release: shell.release.clone(),
                created_at_ms: now,
                sealed,
            })
            .await
            .map_err(ApiError::store)?;
        tracing::info!(machine = %machine.id, owner = %machine.owner_login, name = %machine.name, "machine paired");
        Ok(machine)
    }

    fn token_only(caller: &Caller) -> Result<(), ApiError> {
        if caller.browser.is_some() {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "token-required",
                "The connector speaks for its machine with the machine's own GitHub authorization (Authorization: Bearer), not a browser session.",
            ));
        }
        Ok(())
    }

    /// The machine a connector request speaks for: paired, and the caller's token is its
    /// owner's. A token newer than the one kept replaces it (the connector renews its own), with
    /// the release the connector tells.
    pub async fn connector(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        release: Option<&str>,
    ) -> Result<Machine, ApiError> {
        Self::token_only(caller)?;
        let machine = self
            .store
            .machine(machine_id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(|| machine_not_found(machine_id))?;
        if machine.owner_account_id != caller.account_id {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "not-machine-owner",
                format!(
                    "This machine is @{}'s; only its owner's GitHub authorization speaks for it.",
                    machine.owner_login
                ),
            ));
        }
        let release = release.map(|r| tidy(r, RELEASE_MAX_CHARS));
        let kept = self
            .authorization(&machine)
            .await
            .map_err(ApiError::store)?;
        let told_release = release.is_some() && release != machine.release;
        match kept {
            Some((_, token)) if token.expose() == caller.token() && !told_release => {}
            Some((revision, _)) => {
                let sealed = self.seal(&machine, revision + 1, caller.token());
                // Another request may have renewed it meanwhile; either token is the owner's.
                let _ = self
                    .store
                    .set_machine_credential(machine.id, revision, &sealed, release.as_deref())
                    .await
                    .map_err(ApiError::store)?;
            }
            None => return Err(machine_not_found(machine_id)),
        }
        Ok(machine)
    }

    /// `POST /api/connector/planner`: a document-scoped Planner credential for a backend the
    /// machine starts for `document_id`, which must have chosen this machine; the machine's owner
    /// must be able to push to the repository (checked with the machine's authorization).
    pub async fn issue_credential(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        document_id: Uuid,
        release: Option<&str>,
    ) -> Result<IssuedCredential, ApiError> {
        let machine = self.connector(caller, machine_id, release).await?;
        let doc = self
            .store
            .document(document_id)
            .await
            .map_err(ApiError::store)?
            .filter(|d| !d.archived)
            .ok_or_else(ApiError::not_found)?;
        let chosen = self
            .store
            .machine_choice(doc.id)
            .await
            .map_err(ApiError::store)?;
        if chosen.as_ref().map(|c| c.machine_id) != Some(machine.id) {
            return Err(refused(
                StatusCode::CONFLICT,
                "machine-not-asked",
                "This document has not asked this machine to run its Planner; a member chooses the machine for the document first.",
            ));
        }
        self.owner_can_push(caller, &machine, &doc, "a Planner")
            .await?;
        let now = self.clock.now_ms();
        let credential = format!("{PLANNER_CREDENTIAL_PREFIX}{}", self.entropy.token_hex(32));
        let expires_at_ms = now.saturating_add(PLANNER_CREDENTIAL_TTL_MS);
        self.store
            .put_planner_credential(&PlannerCredential {
                digest: sha256_hex(&credential),
                machine_id: machine.id,
                document_id: doc.id,
                issued_at_ms: now,
                expires_at_ms,
            })
            .await
            .map_err(ApiError::store)?;
        tracing::info!(machine = %machine.id, document = %doc.id, "Planner credential issued");
        // Every launch of a backend asks for a credential: one while nothing is attached is a
        // launch, one while attached a renewal (PRES-18).
        self.planners.credential_requested(
            doc.id,
            machine.id,
            &machine.owner_login,
            release.or(machine.release.as_deref()),
        );
        Ok(IssuedCredential {
            credential: Secret::new(credential),
            document_id: doc.id,
            expires_at_ms,
        })
    }

    /// The machine's owner can push to `doc`'s repository, asked with the connector's token
    /// (`caller`, the machine's authorization); `403 no-write-access` naming `who` needs it.
    pub(crate) async fn owner_can_push(
        &self,
        caller: &Caller,
        machine: &Machine,
        doc: &Document,
        who: &str,
    ) -> Result<(), ApiError> {
        match self
            .access
            .repo_access(caller.token(), &doc.repo_owner, &doc.repo_name)
            .await
        {
            Ok(Some(a)) if a.can_write() => Ok(()),
            Ok(_) => Err(refused(
                StatusCode::FORBIDDEN,
                "no-write-access",
                format!(
                    "@{} cannot push to {}/{}; {who} needs push or administration access.",
                    machine.owner_login, doc.repo_owner, doc.repo_name
                ),
            )),
            Err(e) => Err(ApiError::github(e)),
        }
    }

    /// `POST /api/connector/planner/failure`: the connector reports a backend launch for
    /// `document_id` that exited before staying up, or one that stayed up (PRES-13). It counts
    /// only for a document that asked this machine (PRES-16); what the room is told comes back.
    pub async fn launch_failed(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        document_id: Uuid,
        report: &crate::starting::Report,
    ) -> Result<Option<crate::starting::Failure>, ApiError> {
        let machine = self.connector(caller, machine_id, None).await?;
        let chosen = self
            .store
            .machine_choice(document_id)
            .await
            .map_err(ApiError::store)?;
        if chosen.map(|c| c.machine_id) != Some(machine.id) {
            return Err(refused(
                StatusCode::CONFLICT,
                "machine-not-asked",
                "This document has not asked this machine to run its Planner, so its launches are not counted.",
            ));
        }
        Ok(self
            .planners
            .launch_reported(document_id, machine.id, &machine.owner_login, report))
    }

    /// The backend presenting `credential` (AC-20): its machine, document and the machine's
    /// authorization, or `bad-credentials` when it is unknown, expired, or its machine is no
    /// longer the document's. Looked up by digest, so a backend re-attaching after a restart is
    /// recognised at once (AC-24).
    pub async fn recognise(&self, credential: &str) -> Result<MachineAttach, ApiError> {
        let found = self
            .store
            .planner_credential(&sha256_hex(credential))
            .await
            .map_err(ApiError::store)?
            .filter(|c| self.clock.now_ms() < c.expires_at_ms)
            .ok_or_else(credential_refused)?;
        let machine = self
            .store
            .machine(found.machine_id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(credential_refused)?;
        let chosen = self
            .store
            .machine_choice(found.document_id)
            .await
            .map_err(ApiError::store)?;
        if chosen.map(|c| c.machine_id) != Some(machine.id) {
            return Err(credential_refused());
        }
        let account = self
            .store
            .account(machine.owner_account_id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(credential_refused)?;
        let (_, token) = self
            .authorization(&machine)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(credential_refused)?;
        Ok(MachineAttach {
            machine,
            document_id: found.document_id,
            account,
            token,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<Uuid, Vec<Arc<LiveLogin>>>> {
        self.delegated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The machine's delegated login in this process, made on its first attach (AC-21): one
    /// per machine and authorization, so its links across documents share it.
    pub fn delegated_login(&self, attach: &MachineAttach) -> Arc<LiveLogin> {
        let now = self.clock.now_ms();
        let mut table = self.table();
        let logins = table.entry(attach.machine.id).or_default();
        logins.retain(|l| self.sign_ins.get_live(l.id, now).is_some());
        if let Some(live) = logins
            .iter()
            .rev()
            .find(|l| l.github_token() == attach.token.expose())
        {
            return live.clone();
        }
        let live = self.sign_ins.delegate(
            attach.account.clone(),
            Secret::new(attach.token.expose()),
            attach.machine.id,
        );
        tracing::info!(machine = %attach.machine.id, login = %live.account.login, login_id = %live.id, "machine's delegated login made");
        logins.push(live.clone());
        live
    }

    /// The delegated logins this process made for the machine, taken out of the table.
    fn take_delegated(&self, machine: Uuid) -> Vec<Arc<LiveLogin>> {
        self.table().remove(&machine).unwrap_or_default()
    }

    /// The ids of the machine's delegated logins in this process.
    fn delegated_ids(&self, machine: Uuid) -> Vec<Uuid> {
        self.table()
            .get(&machine)
            .map(|ls| ls.iter().map(|l| l.id).collect())
            .unwrap_or_default()
    }

    /// GitHub refused the machine's authorization: its delegated logins end as a revocation
    /// does, closing every link they hold `access-revoked` (AC-23).
    pub async fn authorization_refused(&self, machine: Uuid) {
        for live in self.take_delegated(machine) {
            let _ = self
                .planners
                .end_login(&live, LoginEnd::MachineRevoked)
                .await;
        }
        // A hold rebuilt after a restart names the machine, not a login of this process.
        self.planners.machine_revoked(machine).await;
    }

    /// The machine as the caller may see it: their own, or one shared with them.
    /// The machine `machine_id` if the caller may use it: their own, or one shared with them.
    pub(crate) async fn usable(
        &self,
        caller: &Caller,
        machine_id: Uuid,
    ) -> Result<Machine, ApiError> {
        self.store
            .machines_of(caller.account_id)
            .await
            .map_err(ApiError::store)?
            .into_iter()
            .find(|m| m.id == machine_id)
            .ok_or_else(|| machine_not_found(machine_id))
    }

    /// The caller's own machine.
    async fn owned(&self, caller: &Caller, machine_id: Uuid) -> Result<Machine, ApiError> {
        let machine = self.usable(caller, machine_id).await?;
        if machine.owner_account_id != caller.account_id {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "not-machine-owner",
                format!(
                    "Only @{}, who paired this machine, can do that.",
                    machine.owner_login
                ),
            ));
        }
        Ok(machine)
    }

    /// The machines the caller may use, as the web client lists them.
    pub async fn list(&self, caller: &Caller) -> Result<Value, ApiError> {
        let machines = self
            .store
            .machines_of(caller.account_id)
            .await
            .map_err(ApiError::store)?;
        let favourite = self
            .store
            .favourite_machine(caller.account_id)
            .await
            .map_err(ApiError::store)?;
        let mut shown = Vec::with_capacity(machines.len());
        for m in machines {
            let own = m.owner_account_id == caller.account_id;
            let mut entry = machine_json(&m);
            entry["own"] = json!(own);
            entry["favourite"] = json!(favourite == Some(m.id));
            if own {
                let shares = self
                    .store
                    .machine_shares(m.id)
                    .await
                    .map_err(ApiError::store)?;
                entry["sharedWith"] = json!(shares.iter().map(|a| &a.login).collect::<Vec<_>>());
            }
            shown.push(entry);
        }
        Ok(json!({ "machines": shown }))
    }

    /// Revokes (unpairs) the caller's machine: every row naming it goes, and its delegated
    /// logins end, closing their links `access-revoked` and ending their holds (AC-23, AO-12).
    pub async fn revoke(&self, caller: &Caller, machine_id: Uuid) -> Result<(), ApiError> {
        let machine = self.owned(caller, machine_id).await?;
        let chosen = self
            .store
            .machine_documents(machine.id)
            .await
            .map_err(ApiError::store)?;
        self.store
            .unpair_machine(machine.id)
            .await
            .map_err(ApiError::store)?;
        for c in chosen {
            self.planners.machine_left(c.document_id);
        }
        tracing::info!(machine = %machine.id, owner = %machine.owner_login, "machine revoked");
        self.authorization_refused(machine.id).await;
        Ok(())
    }

    /// Shares the caller's machine with a teammate who has signed in here (AC-22).
    pub async fn share(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        login: &str,
    ) -> Result<bool, ApiError> {
        let machine = self.owned(caller, machine_id).await?;
        let teammate = self.teammate(login).await?;
        if teammate.id == caller.account_id {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "A machine is already its owner's; share it with a teammate.",
            ));
        }
        let shares = self
            .store
            .machine_shares(machine.id)
            .await
            .map_err(ApiError::store)?;
        if shares.len() >= SHARES_PER_MACHINE_MAX && !shares.iter().any(|a| a.id == teammate.id) {
            return Err(refused(
                StatusCode::CONFLICT,
                "too-many-shares",
                format!("This machine is already shared with {SHARES_PER_MACHINE_MAX} teammates; take a share back first."),
            ));
        }
        self.store
            .share_machine(machine.id, teammate.id, self.clock.now_ms())
            .await
            .map_err(ApiError::store)
    }

    /// Takes a teammate's share back, with the choices they made of the machine: the documents
    /// they moved to it no longer run on it (their links, grace periods and holds end).
    pub async fn unshare(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        login: &str,
    ) -> Result<bool, ApiError> {
        let machine = self.owned(caller, machine_id).await?;
        let teammate = self.teammate(login).await?;
        let theirs: Vec<Uuid> = self
            .store
            .machine_documents(machine.id)
            .await
            .map_err(ApiError::store)?
            .into_iter()
            .filter(|c| c.chosen_by_account_id == teammate.id)
            .map(|c| c.document_id)
            .collect();
        let taken = self
            .store
            .unshare_machine(machine.id, teammate.id)
            .await
            .map_err(ApiError::store)?;
        for doc in theirs {
            self.moved_off(doc, machine.id, MOVED).await;
            self.planners.machine_left(doc);
        }
        Ok(taken)
    }

    async fn teammate(&self, login: &str) -> Result<Account, ApiError> {
        let login = login.trim().trim_start_matches('@');
        self.store
            .account_by_login(login)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(|| {
                refused(
                    StatusCode::NOT_FOUND,
                    "account-not-found",
                    format!("@{login} has not signed in to this server yet; once they have, the machine can be shared with them."),
                )
            })
    }

    /// Sets or clears the caller's favourite machine (one they may use).
    pub async fn favourite(
        &self,
        caller: &Caller,
        machine_id: Option<Uuid>,
    ) -> Result<(), ApiError> {
        if let Some(id) = machine_id {
            self.usable(caller, id).await?;
        }
        self.store
            .set_favourite_machine(caller.account_id, machine_id)
            .await
            .map_err(ApiError::store)
    }

    /// A writer chooses the machine that runs the document's Planner (`None`: none). The
    /// machine must be theirs or shared with them; a child runs its root's Planner, so the root
    /// is chosen for. The machine the document leaves loses its credentials for it, and its
    /// link, grace period or hold of the document ends (AO-12).
    pub async fn choose(
        &self,
        caller: &Caller,
        doc: &Document,
        machine_id: Option<Uuid>,
    ) -> Result<Value, ApiError> {
        if doc.parent_id.is_some() {
            return Err(refused(
                StatusCode::CONFLICT,
                "child-document",
                "A child document runs its root document's Planner; choose the machine on the root document.",
            ));
        }
        let machine = match machine_id {
            Some(id) => Some(self.usable(caller, id).await?),
            None => None,
        };
        let choice = machine.as_ref().map(|m| MachineChoice {
            document_id: doc.id,
            machine_id: m.id,
            chosen_by_account_id: caller.account_id,
            chosen_by: caller.login.clone(),
            chosen_at_ms: self.clock.now_ms(),
            by_default: false,
        });
        let before = self
            .store
            .choose_machine(doc.id, choice.as_ref())
            .await
            .map_err(|e| match e {
                StoreError::NotFound("machine") => {
                    machine_not_found(machine_id.unwrap_or_default())
                }
                other => ApiError::store(other),
            })?;
        if let Some(before) = before.filter(|b| Some(b.machine_id) != machine_id) {
            self.moved_off(doc.id, before.machine_id, MOVED).await;
        }
        // The server now asks the machine chosen, afresh; the starting word names it, since a
        // person asked for it (PRES-04, RULINGS PRES-05).
        match &machine {
            Some(m) => self.planners.machine_asked(
                doc.id,
                m.id,
                &m.owner_login,
                m.release.as_deref(),
                true,
            ),
            None => self.planners.machine_left(doc.id),
        }
        Ok(choice_json(choice.as_ref(), machine.as_ref()))
    }

    /// The document no longer runs on `machine`: what its delegated logins hold of it ends,
    /// their links closed `4410` with `message`.
    pub(crate) async fn moved_off(&self, doc: Uuid, machine: Uuid, message: &str) {
        for login in self.delegated_ids(machine) {
            self.planners.machine_moved(doc, login, message).await;
        }
    }

    /// The machine chosen for the document, as `{machine: {...} | null, chosenBy}`.
    pub async fn chosen(&self, doc: &Document) -> Result<Value, ApiError> {
        let root = doc.parent_id.unwrap_or(doc.id);
        let choice = self
            .store
            .machine_choice(root)
            .await
            .map_err(ApiError::store)?;
        let machine = match &choice {
            Some(c) => self
                .store
                .machine(c.machine_id)
                .await
                .map_err(ApiError::store)?,
            None => None,
        };
        Ok(choice_json(choice.as_ref(), machine.as_ref()))
    }

    /// The documents that asked the connector's machine to run their Planner.
    pub async fn assignments(
        &self,
        caller: &Caller,
        machine_id: Uuid,
        release: Option<&str>,
    ) -> Result<Value, ApiError> {
        let machine = self.connector(caller, machine_id, release).await?;
        let chosen = self
            .store
            .machine_documents(machine.id)
            .await
            .map_err(ApiError::store)?;
        let mut documents = Vec::with_capacity(chosen.len());
        for c in chosen {
            let Some(doc) = self
                .store
                .document(c.document_id)
                .await
                .map_err(ApiError::store)?
            else {
                continue;
            };
            if doc.archived {
                continue;
            }
            documents.push(json!({
                "documentId": doc.id,
                "path": format!("/documents/{}/{}/{}", doc.repo_owner, doc.repo_name, doc.slug),
                "repository": format!("{}/{}", doc.repo_owner, doc.repo_name),
                "chosenBy": c.chosen_by,
                "byDefault": c.by_default,
            }));
        }
        Ok(json!({ "machine": machine_json(&machine), "documents": documents }))
    }
}

/// A machine as the API shows it: never its authorization.
pub fn machine_json(m: &Machine) -> Value {
    json!({
        "id": m.id,
        "name": m.name,
        "owner": m.owner_login,
        "release": m.release,
        "pairedAt": m.created_at_ms,
    })
}

fn choice_json(choice: Option<&MachineChoice>, machine: Option<&Machine>) -> Value {
    json!({
        "machine": machine.map(machine_json),
        "chosenBy": choice.map(|c| c.chosen_by.clone()),
        "chosenAt": choice.map(|c| c.chosen_at_ms),
        "byDefault": choice.is_some_and(|c| c.by_default),
    })
}
