//! Wiring: a [`Config`] and its [`Services`] become a running server.
//!
//! Owns: the startup sequence (writer lease, clearing owner references) and the state every
//! route shares. Does not own: sockets or signals — the binary and the simulator bring those and
//! call [`crate::serve`].

use std::sync::Arc;

use tokio::sync::watch;

use crate::admission::{Admission, AdmissionPolicy};
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::connector::{SharedConnector, TcpConnector};
use crate::entropy::{OsEntropy, SharedEntropy};
use crate::github::GitHub;
use crate::lease::{self, LeaseError};
use crate::planner::Planners;
use crate::session::Sessions;
use crate::store::{Store, WriterLease};

/// The seams and the store: everything the server reads from the outside world.
#[derive(Clone)]
pub struct Services {
    pub store: Arc<dyn Store>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    pub connector: SharedConnector,
}

impl Services {
    /// The production seams over `store`: system clock, OS randomness, real TCP.
    pub fn production(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            connector: Arc::new(TcpConnector),
        }
    }
}

/// State shared by every route.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub services: Services,
    /// Instance admission and repository access, with their short caches.
    pub admission: Arc<Admission>,
    /// Browser logins this process holds.
    pub sessions: Arc<Sessions>,
    /// Who holds each document's Planner.
    pub planners: Arc<Planners>,
    /// The documents open in this process (their live yrs content).
    pub rooms: Arc<crate::content::Rooms>,
    /// Chat: each document's broadcast of new entries, request ids, sends in flight.
    pub chat: Arc<crate::chat::Chat>,
    /// Planner turns and people's requests to the Planner.
    pub turns: Arc<crate::turns::Turns>,
    /// Seals browser logins' GitHub credentials at rest.
    pub credential_key: Arc<crate::crypto::CredentialKey>,
    /// `AUTH_MODE=local` device-flow sign-in attempts.
    pub device_flows: Arc<crate::session_local::DeviceFlows>,
    lease: watch::Receiver<Option<WriterLease>>,
}

impl AppState {
    /// Whether this process still holds the writer lease.
    pub fn is_writer(&self) -> bool {
        self.lease.borrow().is_some()
    }

    pub fn writer_epoch(&self) -> Option<i64> {
        self.lease.borrow().as_ref().map(|l| l.epoch)
    }
}

/// A started server: holds the lease and the state; [`Running::router`] is what to serve.
pub struct Running {
    state: AppState,
    keeper: tokio::task::JoinHandle<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("could not clear Planner owner references at startup: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("the credential encryption key is unusable: {0}")]
    Key(#[from] crate::crypto::KeyError),
}

/// Takes the writer lease, clears owner references left by an earlier process, and starts
/// renewing the lease.
pub async fn start(config: Config, services: Services) -> Result<Running, StartError> {
    let credential_key = match &config.session_encryption_key {
        Some(hex) => crate::crypto::CredentialKey::from_hex(hex.expose())?,
        None => {
            if matches!(config.database, crate::config::Database::Postgres(_)) {
                tracing::warn!(
                    path = %config.credential_key_file.display(),
                    "SESSION_ENCRYPTION_KEY is unset: sign-in credentials are sealed with a key file on this machine; set SESSION_ENCRYPTION_KEY so another machine serving this database can read them"
                );
            }
            crate::crypto::CredentialKey::load_or_create(
                &config.credential_key_file,
                &*services.entropy,
            )?
        }
    };
    let holder = format!("chopin-{}", services.entropy.token_hex(8));
    let lease = lease::acquire(&*services.store, &*services.clock, &holder).await?;
    tracing::info!(epoch = lease.epoch, holder = %holder, "writer lease acquired");
    // No Planner link survives a process: startup clears every owner reference.
    let cleared = services.store.clear_all_ownership().await?;
    if cleared > 0 {
        tracing::info!(
            cleared,
            "cleared Planner owner references left by an earlier process"
        );
    }
    // Logins past their expiry or signed out go, with their sealed credentials.
    let swept = services
        .store
        .delete_expired_logins(services.clock.now_ms())
        .await?;
    if swept > 0 {
        tracing::info!(swept, "removed expired or signed-out browser logins");
    }
    let (rx, keeper) = lease::keep(services.store.clone(), services.clock.clone(), lease);
    let github = GitHub::new(config.github_api_url.clone(), services.connector.clone());
    let admission = Admission::new(
        AdmissionPolicy::from_config(&config),
        github,
        services.clock.clone(),
    );
    let running = Running {
        state: AppState {
            config: Arc::new(config),
            services,
            admission: Arc::new(admission),
            sessions: Arc::new(Sessions::default()),
            planners: Arc::new(Planners::default()),
            device_flows: Arc::default(),
            rooms: Arc::default(),
            chat: Arc::default(),
            turns: Arc::default(),
            credential_key: Arc::new(credential_key),
            lease: rx,
        },
        keeper,
    };
    // A turn's reply and notices go to the document's Chat.
    running.state.turns.set_sink(running.state.chat.clone());
    Ok(running)
}

impl Running {
    pub fn state(&self) -> &AppState {
        &self.state
    }

    pub fn router(&self) -> axum::Router {
        crate::http::router(self.state.clone())
    }

    /// Resolves when the writer lease is lost: the process must drain and stop.
    pub fn lease_lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.state.lease.clone();
        async move {
            // An error means the keeper is gone, which only happens once the lease is lost.
            let _ = rx.wait_for(|l| l.is_none()).await;
        }
    }

    /// Stops renewing and gives the lease back, so the next process starts at once.
    pub async fn stop(self) {
        self.keeper.abort();
        let held = self.state.lease.borrow().clone();
        if let Some(lease) = held {
            if let Err(e) = self.state.services.store.release_writer_lease(&lease).await {
                tracing::warn!(error = %e, "could not release the writer lease; it will expire");
            }
        }
    }
}
