//! The harness layer as the server uses it: the layer itself is the `chopin-harness` crate
//! (re-exported here whole), so that an adapter is a crate that depends on it and never on the
//! server; this module adds what only the server has.
//!
//! Owns: [`adapter`], the code-owned registry (RFC-14, RFC-18, RFC-22): adapters are compiled in
//! and chosen by name, never loaded by package name at runtime — `fake` (tests), `provider`
//! (the model runs in this process through a provider API: the `chopin-harness-provider`
//! crate) and `remote`; [`remote`], the adapter whose
//! model runs in a client attached over the agent connection (it needs the server's links,
//! through [`port`]); and the server's side of the [`transport`] port ([`connector_transport`]:
//! the connector seam, so an in-server adapter's model calls reach the simulator's hosts too).
//! Does not own: the traits, the turn driver or the schema checker (`chopin-harness`).

pub use chopin_harness::*;

pub mod port;
pub mod remote;

pub use chopin_harness_provider::ProviderDeps;

use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------

/// The names [`adapter`] knows, in a fixed order. Adding one is a reviewed security change and
/// requires the contract suite to pass against it (RFC-14, RFC-22, RFC-66).
pub const ADAPTERS: &[&str] = &["fake", "provider", "remote"];

/// Whether the adapter `name` runs the Planner's model in this process: every adapter but
/// `remote`, whose model runs in an attached client. Such a Planner needs no link, is owned by
/// the writer who invokes it, and has no presence to tell the room (PRES-06).
pub fn model_in_server(name: &str) -> bool {
    name != "remote"
}

/// What adapters may need to be constructed. Holds no GitHub credential. Adapters added later
/// add their own fields here (the remote adapter: its link registry); build with
/// `HarnessDeps { field, ..Default::default() }` so new fields do not break callers.
#[derive(Debug, Clone, Default)]
pub struct HarnessDeps {
    /// The fake harness's configuration and scripted model.
    pub fake: fake::FakeSetup,
    /// The remote adapter's link registry and document. `None`: a remote adapter with no
    /// link registry, whose every session is refused as unavailable.
    pub remote: Option<RemoteDeps>,
    /// The provider adapter's settings, transport and ledger. `None`: a provider adapter with
    /// no settings, whose every session is refused as unavailable.
    pub provider: Option<chopin_harness_provider::ProviderDeps>,
}

/// What the remote adapter is built from: the process's attached links, the document whose
/// attached client runs its sessions, and the randomness its session and turn ids come from.
#[derive(Clone)]
pub struct RemoteDeps {
    /// The attached links, by document.
    pub links: Arc<dyn port::AgentLinks>,
    /// The document.
    pub document: uuid::Uuid,
    /// Ids for sessions and turns.
    pub entropy: crate::runtime::entropy::SharedEntropy,
}

impl std::fmt::Debug for RemoteDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDeps")
            .field("document", &self.document)
            .finish_non_exhaustive()
    }
}

/// The configured adapter, built for a document on demand: the `HARNESS` name and what
/// [`adapter`] needs besides the document (the links table for `remote`, the provider's
/// settings). Shared by the turns and the model catalog, so both see the same adapter.
#[derive(Clone)]
pub struct Adapters {
    /// `HARNESS`.
    pub name: String,
    pub links: Arc<dyn port::AgentLinks>,
    pub entropy: crate::runtime::entropy::SharedEntropy,
    pub provider: Option<chopin_harness_provider::ProviderDeps>,
}

impl Adapters {
    /// The adapter that runs `document`'s Planner.
    pub fn for_document(&self, document: uuid::Uuid) -> Result<Arc<dyn Harness>, UnknownHarness> {
        adapter(
            &self.name,
            &HarnessDeps {
                remote: Some(RemoteDeps {
                    links: self.links.clone(),
                    document,
                    entropy: self.entropy.clone(),
                }),
                provider: self.provider.clone(),
                ..HarnessDeps::default()
            },
        )
    }
}

/// A name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown harness \"{name}\"; known: {}", ADAPTERS.join(", "))]
pub struct UnknownHarness {
    /// The name asked for.
    pub name: String,
}

/// The code-owned map from a `HARNESS` name to its adapter. The only place an adapter is
/// constructed.
pub fn adapter(name: &str, deps: &HarnessDeps) -> Result<Arc<dyn Harness>, UnknownHarness> {
    match name {
        "fake" => Ok(Arc::new(fake::FakeHarness::new(deps.fake.clone()))),
        "remote" => Ok(Arc::new(match &deps.remote {
            Some(remote) => remote::RemoteHarness::new(
                remote.links.clone(),
                remote.document,
                remote.entropy.clone(),
            ),
            None => remote::RemoteHarness::new(
                Arc::new(port::NoLinks),
                uuid::Uuid::nil(),
                // No link table: no session starts, so no id is ever drawn; seeded all the same,
                // so nothing here reads the operating system's randomness.
                Arc::new(crate::runtime::entropy::SeededEntropy::new(0)),
            ),
        })),
        "provider" => Ok(match &deps.provider {
            Some(provider) => Arc::new(chopin_harness_provider::ProviderHarness::new(
                provider.clone(),
            )),
            None => Arc::new(Unconfigured("provider")),
        }),
        _ => Err(UnknownHarness {
            name: name.to_owned(),
        }),
    }
}

/// An adapter in the map that was not given what it is built from: it declares nothing and
/// starts no session (what the contract suite and `--help` see of a name with no settings).
struct Unconfigured(&'static str);

#[async_trait::async_trait]
impl Harness for Unconfigured {
    fn name(&self) -> &str {
        self.0
    }
    fn builtin_tools(&self) -> Vec<String> {
        Vec::new()
    }
    fn can_filter_builtins(&self) -> bool {
        true
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn start_session(
        &self,
        _request: SessionRequest,
    ) -> Result<Box<dyn HarnessSession>, HarnessError> {
        Err(HarnessError::Unavailable {
            message: format!("the {} harness has no settings in this process", self.0),
        })
    }
}

/// The `provider` adapter's deps for `settings`: model calls through `connector` (real TCP
/// and TLS, or the simulator's), session ids from `entropy`, no record of ended sessions.
pub fn provider_deps(
    settings: &crate::config::ProviderSettings,
    connector: crate::runtime::connector::SharedConnector,
    entropy: crate::runtime::entropy::SharedEntropy,
) -> ProviderDeps {
    use chopin_harness_provider::{ApiKey, Bounds, Family, ProviderConfig};
    let family = match settings.family {
        crate::config::ModelFamily::OpenAi => Family::OpenAi,
        crate::config::ModelFamily::Anthropic => Family::Anthropic,
    };
    let mut config = ProviderConfig::new(family, &settings.model, &settings.base_url);
    config.api_key = settings.api_key.as_ref().map(|k| ApiKey::new(k.expose()));
    config.reasoning = settings.reasoning.clone();
    config.max_output_tokens = settings.max_output_tokens;
    config.max_model_calls = usize::try_from(settings.max_model_calls).unwrap_or(16);
    config.retries = settings.retries;
    config.tool_result_max_bytes =
        usize::try_from(settings.tool_result_max_bytes).unwrap_or(32 * 1024);
    config.listing = settings
        .list_models
        .then(|| Arc::new(chopin_harness_provider::ModelListing::default()));
    config.image_models = settings.image_models.clone();
    config.offered = settings
        .offered
        .iter()
        .map(|(model, levels)| chopin_harness_provider::OfferedModel {
            model: model.clone(),
            levels: levels.clone(),
        })
        .collect();
    config.bounds = Bounds {
        head_ms: settings.timeout_ms,
        idle_ms: settings.timeout_ms,
        ..config.bounds
    };
    ProviderDeps {
        config,
        transport: connector_transport(connector),
        session_ids: Arc::new(move || format!("provider-{}", entropy.token_hex(8))),
        ledger: None,
    }
}

/// The server's [`transport::HttpTransport`]: the connector seam (real TCP and TLS, or the
/// simulator's TCP), its response body streamed as it is read.
pub fn connector_transport(
    connector: crate::runtime::connector::SharedConnector,
) -> Arc<dyn transport::HttpTransport> {
    Arc::new(crate::runtime::connector::Streaming(connector))
}
