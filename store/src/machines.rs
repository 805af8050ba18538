//! Paired machines (`machines` and the tables beside it): a member's machine that runs Planners
//! for documents, who it is shared with, each account's favourite, the machine chosen for a
//! document, and the document-scoped Planner credentials issued to a machine.
//!
//! Owns: the records and the rules that keep them consistent with one another — unpairing a
//! machine takes every row naming it; choosing another machine for a document (or clearing the
//! choice) takes the credentials issued to the machine chosen before for that document; taking
//! a teammate's share away takes the choices that teammate made of the machine, with their
//! credentials; a Planner credential is kept only as its digest, and only the newest few per
//! machine and document are kept.
//! Does not own: sealing the machine's GitHub authorization (the server seals; the store keeps
//! the bytes), who may pair, share, choose or revoke (the server checks), or what a credential
//! proves when presented (the server hashes it and looks it up).

use async_trait::async_trait;
use uuid::Uuid;

use crate::{Account, StoreResult, UnixMillis};

/// A paired machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub id: Uuid,
    pub owner_account_id: Uuid,
    /// The owner's login as the accounts table has it now.
    pub owner_login: String,
    /// What its owner calls it (`studio`).
    pub name: String,
    /// The connector release it last told (`0.0.23`), if it told one.
    pub release: Option<String>,
    pub created_at_ms: UnixMillis,
}

/// A machine to pair, with its GitHub authorization sealed by the server (stored at revision 1).
#[derive(Debug, Clone)]
pub struct NewMachine {
    pub id: Uuid,
    pub owner_account_id: Uuid,
    pub name: String,
    pub release: Option<String>,
    pub created_at_ms: UnixMillis,
    pub sealed: Vec<u8>,
}

/// The machine chosen for a document, and who chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineChoice {
    pub document_id: Uuid,
    pub machine_id: Uuid,
    pub chosen_by_account_id: Uuid,
    /// The chooser's login when they chose.
    pub chosen_by: String,
    pub chosen_at_ms: UnixMillis,
    /// Made by Default machine (the favourite of a writer who opened the document nobody chose
    /// a machine for), not by a person's choice: Default machine may let it go again.
    pub by_default: bool,
}

/// A document-scoped Planner credential issued to a machine, by the SHA-256 of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerCredential {
    /// Lowercase hex SHA-256 of the credential.
    pub digest: String,
    pub machine_id: Uuid,
    pub document_id: Uuid,
    pub issued_at_ms: UnixMillis,
    pub expires_at_ms: UnixMillis,
}

/// A machine's connector's latest poll, as recorded under several processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectorPoll {
    pub machine_id: Uuid,
    pub polled_at_ms: UnixMillis,
    /// Whether the connector said its owner allowed automatic builds on the machine.
    pub auto_build: bool,
}

/// How many Planner credentials are kept per machine and document: the newest, so a backend
/// that renews its credential while an older backend of the same machine still holds one can
/// both attach, and the rows a busy connector makes stay bounded.
pub const PLANNER_CREDENTIALS_KEPT: i64 = 4;

#[async_trait]
pub trait MachineStore: Send + Sync + 'static {
    /// Stores a new machine. `NotFound("account")` if its owner is unknown; a reused id is
    /// `Conflict`.
    async fn pair_machine(&self, machine: &NewMachine) -> StoreResult<Machine>;
    async fn machine(&self, id: Uuid) -> StoreResult<Option<Machine>>;
    /// The machine's sealed GitHub authorization and its revision.
    async fn machine_credential(&self, id: Uuid) -> StoreResult<Option<(i64, Vec<u8>)>>;
    /// Replaces the sealed authorization if it is still at `expected_revision`: the new
    /// revision, or `None` when another write moved it on (nothing written). `release` is
    /// stored as the connector's latest word when given. `NotFound("machine")` if unpaired.
    async fn set_machine_credential(
        &self,
        id: Uuid,
        expected_revision: i64,
        sealed: &[u8],
        release: Option<&str>,
    ) -> StoreResult<Option<i64>>;
    /// The machines `account_id` may use: its own, then those shared with it, each in pairing
    /// order.
    async fn machines_of(&self, account_id: Uuid) -> StoreResult<Vec<Machine>>;
    /// Shares the machine with a teammate; false if it already was. `NotFound("machine")` or
    /// `NotFound("account")`.
    async fn share_machine(
        &self,
        id: Uuid,
        account_id: Uuid,
        now_ms: UnixMillis,
    ) -> StoreResult<bool>;
    /// Takes the share away, with the teammate's choices of the machine (and their
    /// credentials) and their favourite if it was this machine; false if it was not shared.
    async fn unshare_machine(&self, id: Uuid, account_id: Uuid) -> StoreResult<bool>;
    /// The accounts the machine is shared with, in sharing order.
    async fn machine_shares(&self, id: Uuid) -> StoreResult<Vec<Account>>;
    /// Sets or clears the account's favourite machine. `NotFound("machine")` for an unknown one.
    async fn set_favourite_machine(
        &self,
        account_id: Uuid,
        machine_id: Option<Uuid>,
    ) -> StoreResult<()>;
    async fn favourite_machine(&self, account_id: Uuid) -> StoreResult<Option<Uuid>>;
    /// Chooses the machine for a document (`None` clears the choice); what was chosen before.
    /// The credentials issued to an earlier machine for the document go in the same commit.
    /// `NotFound("document")` or `NotFound("machine")`.
    async fn choose_machine(
        &self,
        document_id: Uuid,
        choice: Option<&MachineChoice>,
    ) -> StoreResult<Option<MachineChoice>>;
    async fn machine_choice(&self, document_id: Uuid) -> StoreResult<Option<MachineChoice>>;
    /// Default machine's choice for a document nobody chose a machine for: stored (with
    /// `by_default`) only when the document has no choice, in the same commit. Answers the
    /// choice in place and whether it is this one. `NotFound("document")` or
    /// `NotFound("machine")`.
    async fn choose_default_machine(
        &self,
        choice: &MachineChoice,
    ) -> StoreResult<(MachineChoice, bool)>;
    /// Default machine lets the document go from `machine_id`: its choice is removed, with the
    /// machine's credentials for it, only if it is still Default machine's choice of that
    /// machine (a person's choice made meanwhile stays); whether it was.
    async fn withdraw_default_machine(
        &self,
        document_id: Uuid,
        machine_id: Uuid,
    ) -> StoreResult<bool>;
    /// Every choice Default machine made, in choosing order.
    async fn default_machine_choices(&self) -> StoreResult<Vec<MachineChoice>>;
    /// The documents this machine is chosen for, in choosing order.
    async fn machine_documents(&self, machine_id: Uuid) -> StoreResult<Vec<MachineChoice>>;
    /// Stores a credential, keeping the newest [`PLANNER_CREDENTIALS_KEPT`] of its machine and
    /// document. `NotFound("machine")` or `NotFound("document")`.
    async fn put_planner_credential(&self, credential: &PlannerCredential) -> StoreResult<()>;
    async fn planner_credential(&self, digest: &str) -> StoreResult<Option<PlannerCredential>>;
    /// Removes the machine and every row naming it; false if it was not paired.
    async fn unpair_machine(&self, id: Uuid) -> StoreResult<bool>;
    /// Records `poll` as its machine's latest, unless a later one is recorded already. A
    /// machine not paired (any more) records nothing.
    async fn record_connector_poll(&self, poll: &ConnectorPoll) -> StoreResult<()>;
    /// The latest poll of each machine recorded at or after `since_ms`, in machine order.
    async fn connector_polls_since(&self, since_ms: UnixMillis) -> StoreResult<Vec<ConnectorPoll>>;
}
