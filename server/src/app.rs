//! The composition root: the only code that knows every service. A [`Config`], a store and the
//! [`Runtime`] seams become an [`App`] (every service, wired with the explicit dependencies each
//! takes), and [`start`] makes it a serving process.
//!
//! Owns: the startup sequence (the credential key, the writer lease and the store fenced under
//! its epoch, clearing owner references left by an earlier process, sweeping dead logins),
//! wiring the services ([`App::wire`]) and the transport's routes ([`App::routes`]), and the
//! graceful stop ([`Running::stop`]: tell every socket, drain every task, and only then give up
//! the fence and give the writer lease back).
//! Does not own: sockets or signals (the binary and the simulator bring a listener and a stop
//! signal and call [`crate::transport::serve`]), or any behaviour of the services.
//!
//! Invariants: no service imports this module; a service reaches another only through the `Arc`
//! it was given here; every store write of a started process goes through the handle fenced
//! under its writer epoch.

use std::sync::Arc;

use crate::access::Access;
use crate::chat::Chat;
use crate::config::{AuthMode, Config, Database};
use crate::content::OpenDocuments;
use crate::documents::children::Children;
use crate::documents::creations::Creations;
use crate::documents::updates::Updates;
use crate::documents::Documents;
use crate::files::Files;
use crate::github_tools::GitHubTools;
use crate::housekeeping;
use crate::identity::admission::{Admission, AdmissionPolicy};
use crate::identity::crypto::{CredentialKey, KeyError};
use crate::identity::device_flow::{DeviceFlowSettings, DeviceFlows};
use crate::identity::github::GitHub;
use crate::identity::sign_ins::{SignInSettings, SignIns};
use crate::identity::tokens::{RefresherSettings, TokenRefresher};
use crate::identity::web_flow::{SignInDeps, WebFlow, WebFlowSettings};
use crate::metrics::Metrics;
use crate::models::Models;
use crate::planner::Planners;
use crate::questions::{Questions, QuestionsDeps};
use crate::renewal::Renewal;
use crate::repository::RepositoryTools;
use crate::runs::{Runs, RunsDeps};
use crate::runtime::document_leases::{DocumentLeaseTimes, DocumentLeases, Welcome};
use crate::runtime::lease::{self, Keeper, LeaseError, LeaseWatch};
use crate::runtime::{Runtime, Shutdown};
use crate::store::instrumented::Instrumented;
use crate::store::routed::Routed;
use crate::store::{Fence, Reach, Store, StoreError};
use crate::transcript::Transcript;
use crate::transport::agent::{AgentDeps, LinkTimers};
use crate::transport::auth::AuthDeps;
use crate::transport::documents::DocumentsDeps;
use crate::transport::health::HealthDeps;
use crate::transport::mcp::McpDeps;
use crate::transport::room::RoomDeps;
use crate::transport::web::WebDeps;
use crate::transport::yjs::YjsDeps;
use crate::transport::{self, Routes};
use crate::turns::{Turns, TurnsDeps};

/// Every service of one server process, wired. Cheap to clone (each service is an `Arc`).
#[derive(Clone)]
pub struct App {
    pub config: Arc<Config>,
    /// The store every service uses (instrumented for the metrics; fenced under the writer
    /// epoch once [`start`] took the lease).
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    pub runtime: Runtime,
    pub shutdown: Shutdown,
    pub lease: LeaseWatch,
    /// Which documents this process serves: every one, or (`PROCESSES=many`) the trees whose
    /// leases it holds.
    pub serving: Arc<crate::serving::Serving>,
    pub admission: Arc<Admission>,
    pub sign_ins: Arc<SignIns>,
    pub web_flow: Arc<WebFlow>,
    pub device_flows: Arc<DeviceFlows>,
    pub access: Arc<Access>,
    pub documents: Arc<Documents>,
    pub open: Arc<OpenDocuments>,
    pub children: Arc<Children>,
    pub updates: Arc<Updates>,
    pub creations: Arc<Creations>,
    pub transcript: Arc<Transcript>,
    pub planners: Arc<Planners>,
    pub turns: Arc<Turns>,
    pub chat: Arc<Chat>,
    /// Automatic participation and its pause.
    pub participation: Arc<crate::participation::Participation>,
    /// The documents' Planner model choices and catalogs.
    pub models: Arc<Models>,
    /// The documents' Chat files.
    pub files: Arc<Files>,
    /// The repositories' file listings for mentions.
    pub repo_files: Arc<crate::repo_files::RepoFiles>,
    /// The people a message can mention (CTX-39..41).
    pub people: Arc<crate::people::People>,
    /// Dictation's transcription; `None` where `TRANSCRIPTION_MODEL` is unset.
    pub transcription: Option<Arc<crate::dictation::Transcription>>,
    pub renewal: Arc<Renewal>,
    pub questions: Arc<Questions>,
    pub runs: Arc<Runs>,
    /// The Planner's pull-request tools' GitHub MCP clients.
    pub github_tools: Arc<GitHubTools>,
    /// Background jobs: the registry, enqueueing and the runner.
    pub jobs: Arc<crate::jobs::Jobs>,
    /// Generated document descriptions: their scheduling and the last completed one.
    pub descriptions: Arc<crate::jobs::description::Descriptions>,
    /// Who is renaming each document now (`plan:titling`), which title drafts wait for.
    pub titling: Arc<crate::jobs::title::Titling>,
    /// Asks for anchored prose updates when answers are saved (COA-15).
    pub prose_updates: Arc<crate::jobs::prose::ProseUpdates>,
    /// Comment threads, and the Planner's replies in them.
    pub comments: Arc<crate::comments::Comments>,
    /// The documents' research cards (the mentions route, research mentions, read_reference).
    pub research_cards: Arc<crate::research_cards::ResearchCards>,
    /// The visual admission check of Planner writes and MCP creations and updates.
    pub visuals: Arc<crate::visuals::VisualAdmission>,
    /// Implementation graphs: the Planner's graph tools and MCP's hand-over reads.
    pub graphs: Arc<crate::graphs::Graphs>,
    /// Implementation runs: the claims and reports of coding agents through MCP.
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// Task drafts from Build plan presses.
    pub drafts: Arc<crate::drafting::Drafts>,
    /// Paired machines, their credentials and delegated logins.
    pub machines: Arc<crate::machines::Machines>,
    /// Browser builds queued on paired machines.
    pub builds: Arc<crate::builds::Builds>,
    /// Rebuilds of a built plan's edits.
    pub rebuilds: Arc<crate::rebuilds::Rebuilds>,
    /// Automatic rebuilds once editing settles, with `LIVE_BUILD=on`.
    pub live_builds: Option<Arc<crate::live_builds::LiveBuilds>>,
    /// Default machine: a writer's favourite for a document nobody chose a machine for (only
    /// under the `remote` harness).
    pub default_machine: Option<Arc<crate::default_machine::DefaultMachine>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("could not clear Planner owner references at startup: {0}")]
    Store(#[from] StoreError),
    #[error("the credential encryption key is unusable: {0}")]
    Key(#[from] KeyError),
}

impl App {
    /// Wires every service over `store` and the seams. Does no I/O of its own; background
    /// queues are spawned on `shutdown`'s tracker, so call it inside a tokio runtime.
    pub fn wire(
        config: Config,
        store: Arc<dyn Store>,
        runtime: Runtime,
        key: CredentialKey,
        lease: LeaseWatch,
        shutdown: Shutdown,
    ) -> App {
        let clock = runtime.clock.clone();
        let entropy = runtime.entropy.clone();
        let metrics = Arc::new(Metrics::new());
        let serving = Arc::new(crate::serving::Serving::all());
        if config.planted.write_cap_small {
            // The planted bug: frames capped at twice what the document sockets read.
            metrics.set_outbound_frame_cap(2 * 1024 * 1024);
        }
        // Every service's store calls are timed for the metrics.
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store, metrics.store_hook()));
        let github = GitHub::new(
            config.github_api_url.clone(),
            runtime.connector.clone(),
            clock.clone(),
        )
        .with_metrics(metrics.clone());
        let admission = Arc::new(Admission::new(
            AdmissionPolicy::from_config(&config),
            github.clone(),
            clock.clone(),
        ));
        let key = Arc::new(key);
        let sign_ins = Arc::new(
            SignIns::new(
                store.clone(),
                clock.clone(),
                entropy.clone(),
                key.clone(),
                admission.clone(),
                SignInSettings {
                    app_origin: config.app_origin.clone(),
                    client_id: config.github_app_client_id.clone().unwrap_or_default(),
                    session_max_age_ms: config.session_max_age_ms,
                    recheck_ms: config
                        .many_processes
                        .then_some(crate::identity::sign_ins::SIGN_IN_RECHECK_MS),
                },
            )
            .with_refresher(Arc::new(TokenRefresher::new(
                RefresherSettings {
                    github_web_url: config.github_web_url.clone(),
                    client_id: config.github_app_client_id.clone(),
                    // Device-flow refresh tokens need no secret, and local mode never reads it.
                    client_secret: match config.auth_mode {
                        AuthMode::Hosted => config.github_app_client_secret.clone(),
                        AuthMode::Local => None,
                    },
                },
                runtime.connector.clone(),
            ))),
        );
        let sign_in = SignInDeps {
            admission: admission.clone(),
            accounts: store.clone(),
            sign_ins: sign_ins.clone(),
            clock: clock.clone(),
        };
        let web_flow = Arc::new(WebFlow::new(
            WebFlowSettings {
                app_origin: config.app_origin.clone(),
                github_web_url: config.github_web_url.clone(),
                client_id: config.github_app_client_id.clone(),
                client_secret: config.github_app_client_secret.clone(),
            },
            runtime.connector.clone(),
            entropy.clone(),
        ));
        let device_flows = Arc::new(DeviceFlows::new(
            DeviceFlowSettings {
                local: config.auth_mode == AuthMode::Local,
                github_web_url: config.github_web_url.clone(),
                client_id: config.github_app_client_id.clone(),
            },
            runtime.connector.clone(),
            entropy.clone(),
            sign_in,
        ));
        let access = Arc::new(Access::new(
            config.app_origin.clone(),
            admission.clone(),
            sign_ins.clone(),
            store.clone(),
            store.clone(),
            clock.clone(),
        ));
        let documents = Arc::new(Documents::new(
            store.clone(),
            clock.clone(),
            entropy.clone(),
        ));
        let open = Arc::new(OpenDocuments::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            entropy.clone(),
            shutdown.clone(),
        ));
        open.plant(config.planted);
        let children = Arc::new(Children::new(store.clone(), open.clone()));
        let kept = Arc::new(crate::kept::KeptRequests::new(store.clone(), clock.clone()));
        let updates = Arc::new(Updates::new(documents.clone(), open.clone(), kept.clone()));
        let creations = Arc::new(Creations::new(kept.clone(), store.clone()));
        let transcript = Transcript::new(store.clone(), clock.clone(), entropy.clone(), &shutdown);
        let planners = Planners::new(
            store.clone(),
            clock.clone(),
            sign_ins.clone(),
            shutdown.clone(),
            config.planner_attach_grace_ms,
            config.planted,
        )
        .with_patience(config.planner_patience_ms);
        // AUTH_MODE=local is never handed over: its holds stay in memory (HO-18).
        let planners = Arc::new(match config.auth_mode {
            AuthMode::Hosted => {
                planners.with_handover(store.clone(), config.handover_planner_window_ms)
            }
            AuthMode::Local => planners,
        });
        let questions = Arc::new(Questions::new(QuestionsDeps {
            open: open.clone(),
            records: store.clone(),
            transcript: transcript.clone(),
            entropy: entropy.clone(),
            links: planners.clone(),
        }));
        let runs = Arc::new(Runs::new(RunsDeps {
            store: store.clone(),
            questions: questions.clone(),
            transcript: transcript.clone(),
            links: planners.clone(),
            clock: clock.clone(),
            entropy: entropy.clone(),
        }));
        {
            // A hold ended by an explicit act takes back the questions its client left (AO-12),
            // and the live runs its client reported are shown stopped, as a closed link's are
            // (RT-11).
            let questions = questions.clone();
            let runs = runs.clone();
            let tracker = shutdown.clone();
            planners.on_hold_ended(Arc::new(move |doc, work, why| {
                let questions = questions.clone();
                let runs = runs.clone();
                tracker.spawn(async move {
                    if let Some(link) = work.link {
                        questions.withdraw_kept(doc, link, &why).await;
                    }
                    runs.client_gone(doc, None).await;
                });
            }));
        }
        let github_tools = Arc::new(GitHubTools::new(
            config.github_mcp_url.clone(),
            runtime.connector.clone(),
        ));
        {
            // A retired token's GitHub MCP client is closed at once (RFC-53).
            let (tools, tracker) = (github_tools.clone(), shutdown.clone());
            planners.on_token_retired(Arc::new(move |login| {
                let tools = tools.clone();
                tracker.spawn(async move { tools.token_retired(login).await });
            }));
        }
        let adapters = crate::harness::Adapters {
            name: config.harness.clone(),
            links: planners.clone(),
            entropy: entropy.clone(),
            provider: config.provider.as_ref().map(|settings| {
                crate::harness::provider_deps(settings, runtime.connector.clone(), entropy.clone())
            }),
        };
        let repository_tools = Arc::new(RepositoryTools::new(github.clone()));
        let repo_files = Arc::new(crate::repo_files::RepoFiles::new(
            repository_tools.clone(),
            clock.clone(),
        ));
        let people = Arc::new(crate::people::People::new(
            github.clone(),
            store.clone(),
            clock.clone(),
            config.github_web_url.clone(),
        ));
        let models = Arc::new(Models::new(store.clone(), adapters.clone(), clock.clone()));
        let classifier = classifier_for(
            config.classifier.as_ref(),
            runtime.connector.clone(),
            entropy.clone(),
        );
        let comments = Arc::new(crate::comments::Comments::new(
            store.clone(),
            clock.clone(),
            kept.clone(),
        ));
        let research_cards = Arc::new(crate::research_cards::ResearchCards::new(store.clone()));
        let visuals = Arc::new(crate::visuals::VisualAdmission::new(
            config.visuals,
            assessor_for(
                config.visual_assessor.as_ref(),
                runtime.connector.clone(),
                entropy.clone(),
            ),
            clock.clone(),
            metrics.clone(),
        ));
        let graphs = Arc::new(crate::graphs::Graphs {
            graphs: store.clone(),
            builds: store.clone(),
            records: store.clone(),
            clock: clock.clone(),
            news: tokio::sync::broadcast::channel(crate::graphs::NEWS_CAPACITY).0,
        });
        open.lock_edits(graphs.clone());
        let machines = Arc::new(crate::machines::Machines::new(
            store.clone(),
            key,
            entropy.clone(),
            clock.clone(),
            access.clone(),
            sign_ins.clone(),
            planners.clone(),
            crate::machines::MachineSettings {
                app_origin: config.app_origin.clone(),
                client_id: config.github_app_client_id.clone().unwrap_or_default(),
            },
        ));
        let lifecycle = Arc::new(crate::lifecycle::Lifecycle {
            graphs: store.clone(),
            builds: store.clone(),
            news: graphs.clone(),
            open: open.clone(),
            claim_refusal_ignored: config.planted.claim_refusal_ignored,
            run_end_split: config.planted.run_end_split,
            clock: clock.clone(),
            entropy: entropy.clone(),
        });
        let turns = Arc::new(Turns::new(TurnsDeps {
            planners: planners.clone(),
            sign_ins: sign_ins.clone(),
            admission: admission.clone(),
            documents: documents.clone(),
            records: store.clone(),
            ownership: store.clone(),
            open: open.clone(),
            children: children.clone(),
            transcript: transcript.clone(),
            entropy: entropy.clone(),
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            adapters: adapters.clone(),
            models: models.clone(),
            metrics: metrics.clone(),
            agent_enabled: config.agent_enabled,
            planted: config.planted,
            runs: runs.clone(),
            questions: questions.clone(),
            repository: repository_tools.clone(),
            github_tools: github_tools.clone(),
            classifier: classifier.clone(),
            comments: comments.clone(),
            research_cards: research_cards.clone(),
            visuals: visuals.clone(),
            graphs: graphs.clone(),
        }));
        let files = Arc::new(Files::new(
            store.clone(),
            clock.clone(),
            entropy.clone(),
            crate::files::Limits {
                max_bytes: config.chat_attachment_max_bytes,
                max_count: config.chat_attachment_max_count,
                max_total_bytes: config.chat_attachment_max_total_bytes,
            },
        ));
        let transcription = config.transcription.clone().map(|settings| {
            Arc::new(crate::dictation::Transcription::new(
                settings,
                Arc::new(crate::runtime::connector::Streaming(
                    runtime.connector.clone(),
                )),
                entropy.clone(),
            ))
        });
        let renewal = Arc::new(Renewal::new(
            sign_ins.clone(),
            planners.clone(),
            turns.clone(),
            clock.clone(),
        ));
        // Background jobs run only while the agent and background jobs are on; what is stored
        // stays readable either way.
        let jobs_on = config.agent_enabled && config.background_jobs;
        let summary: Arc<dyn crate::jobs::Definition> = Arc::new(
            crate::jobs::description::DocumentSummary::new(open.clone(), store.clone()),
        );
        let titling = Arc::new(crate::jobs::title::Titling::default());
        let title: Arc<dyn crate::jobs::Definition> =
            Arc::new(crate::jobs::title::DocumentTitle::new(
                store.clone(),
                store.clone(),
                store.clone(),
                titling.clone(),
                clock.clone(),
            ));
        let evidence: Arc<dyn crate::jobs::Definition> =
            Arc::new(crate::jobs::research::Evidence::new(github_tools.clone()));
        let answer: Arc<dyn crate::jobs::Definition> =
            Arc::new(crate::jobs::research::Answer::new(
                store.clone(),
                documents.clone(),
                updates.clone(),
                open.clone(),
            ));
        let prose: Arc<dyn crate::jobs::Definition> = Arc::new(
            crate::jobs::prose::ProseUpdate::new(open.clone(), store.clone(), store.clone()),
        );
        let jobs = crate::jobs::Jobs::new(
            crate::jobs::Registry::new(vec![summary, title, evidence, answer, prose])
                .expect("the built-in job definitions are valid"),
            crate::jobs::JobsDeps {
                serving: serving.clone(),
                store: store.clone(),
                planners: planners.clone(),
                sign_ins: sign_ins.clone(),
                turns: turns.clone(),
                adapters,
                clock: clock.clone(),
                entropy: entropy.clone(),
                metrics: metrics.clone(),
                shutdown: shutdown.clone(),
            },
        );
        let descriptions = crate::jobs::description::Descriptions::new(
            &jobs,
            open.clone(),
            store.clone(),
            store.clone(),
            shutdown.clone(),
            jobs_on,
        );
        let titles = crate::jobs::title::Titles::new(
            &jobs,
            store.clone(),
            store.clone(),
            shutdown.clone(),
            jobs_on,
        );
        let research = crate::jobs::research::Research::new(&jobs, shutdown.clone());
        if jobs_on {
            turns.set_research(research.clone());
        }
        let prose_updates = crate::jobs::prose::ProseUpdates::new(&jobs, jobs_on);
        if jobs_on {
            open.watch(descriptions.clone());
            jobs.spawn();
        }
        let participation =
            crate::participation::Participation::new(crate::participation::ParticipationDeps {
                entries: store.clone(),
                pauses: store.clone(),
                transcript: transcript.clone(),
                turns: turns.clone(),
                classifier,
                planners: planners.clone(),
                clock: clock.clone(),
                shutdown: shutdown.clone(),
            });
        let chat = Chat::new(transcript.clone(), turns.clone(), clock.clone());
        // `/research` runs only where background jobs do; elsewhere it is refused as
        // unavailable.
        let chat = if jobs_on {
            chat.with_research(research)
        } else {
            chat
        };
        let chat = Arc::new(
            chat.with_models(models.clone())
                .with_files(files.clone())
                .with_content(open.clone())
                .with_repo_files(repo_files.clone(), store.clone())
                .with_on_saved(titles.clone())
                .with_participation(participation.clone())
                .with_research_cards(research_cards.clone()),
        );
        chat.plant(config.planted);
        let drafts = Arc::new(crate::drafting::Drafts::new(
            chat.clone(),
            turns.clone(),
            graphs.clone(),
            open.clone(),
            entropy.clone(),
            shutdown.clone(),
        ));
        housekeeping::spawn(
            &planners,
            &transcript,
            &sign_ins,
            &renewal,
            &files,
            clock.clone(),
            &shutdown,
        );
        let builds = Arc::new(crate::builds::Builds::new(crate::builds::BuildsDeps {
            store: store.clone(),
            machines: machines.clone(),
            lifecycle: lifecycle.clone(),
            news: graphs.clone(),
            access: access.clone(),
            clock: clock.clone(),
            entropy: entropy.clone(),
            serving: serving.clone(),
        }));
        let rebuilds = Arc::new(crate::rebuilds::Rebuilds::new(
            crate::rebuilds::RebuildsDeps {
                store: store.clone(),
                builds: builds.clone(),
                open: open.clone(),
                news: graphs.clone(),
                clock: clock.clone(),
                entropy: entropy.clone(),
            },
        ));
        let live_builds = config.live_build.then(|| {
            let live = crate::live_builds::LiveBuilds::new(crate::live_builds::LiveBuildsDeps {
                store: store.clone(),
                builds: builds.clone(),
                rebuilds: rebuilds.clone(),
                clock: clock.clone(),
                shutdown: shutdown.clone(),
            });
            open.watch(live.clone());
            live
        });
        let default_machine = (!crate::harness::model_in_server(&config.harness)).then(|| {
            Arc::new(crate::default_machine::DefaultMachine::new(
                crate::default_machine::DefaultMachineDeps {
                    store: store.clone(),
                    machines: machines.clone(),
                    planners: planners.clone(),
                    turns: turns.clone(),
                    questions: questions.clone(),
                    clock: clock.clone(),
                    idle_ms: config.default_machine_idle_ms,
                    serving: serving.clone(),
                },
            ))
        });
        housekeeping::spawn_patience_sweep(
            &planners,
            default_machine.clone(),
            &builds,
            clock.clone(),
            &shutdown,
        );
        App {
            config: Arc::new(config),
            store,
            metrics,
            runtime,
            shutdown,
            lease,
            serving,
            admission,
            sign_ins,
            web_flow,
            device_flows,
            access,
            documents,
            open,
            children,
            updates,
            creations,
            transcript,
            planners,
            turns,
            chat,
            participation,
            models,
            files,
            repo_files,
            people,
            transcription,
            renewal,
            questions,
            runs,
            github_tools,
            jobs,
            descriptions,
            titling,
            prose_updates,
            comments,
            research_cards,
            visuals,
            graphs,
            lifecycle,
            drafts,
            machines,
            builds,
            rebuilds,
            live_builds,
            default_machine,
        }
    }

    /// What the document routes use (`/mcp` reaches documents through the same helpers).
    fn documents_deps(&self) -> DocumentsDeps {
        DocumentsDeps {
            access: self.access.clone(),
            documents: self.documents.clone(),
            open: self.open.clone(),
            planners: self.planners.clone(),
            questions: self.questions.clone(),
            runs: self.runs.clone(),
            descriptions: self.descriptions.clone(),
            jobs: self.store.clone(),
            serving: self.serving.clone(),
        }
    }

    /// Every route the server answers, each transport module given the services it uses.
    pub fn routes(&self) -> Routes {
        let c = &self.config;
        transport::health::routes(HealthDeps {
            store: self.store.clone(),
            lease: self.lease.clone(),
            serving: self.serving.clone(),
            metrics: self.metrics.clone(),
            planners: self.planners.clone(),
            open: self.open.clone(),
            chat: self.chat.clone(),
            turns: self.turns.clone(),
            transcript: self.transcript.clone(),
            sign_ins: self.sign_ins.clone(),
            titling: self.titling.clone(),
        })
        .merge(transport::auth::routes(AuthDeps {
            access: self.access.clone(),
            web_flow: self.web_flow.clone(),
            device_flows: self.device_flows.clone(),
            sign_in: SignInDeps {
                admission: self.admission.clone(),
                accounts: self.store.clone(),
                sign_ins: self.sign_ins.clone(),
                clock: self.runtime.clock.clone(),
            },
            planners: self.planners.clone(),
            sign_ins: self.sign_ins.clone(),
            local: c.auth_mode == AuthMode::Local,
        }))
        .merge(transport::documents::routes(self.documents_deps()))
        .merge(transport::files::routes(transport::files::FilesDeps {
            documents: self.documents_deps(),
            files: self.files.clone(),
        }))
        .merge(transport::mentions::routes(
            transport::mentions::MentionsDeps {
                documents: self.documents_deps(),
                repo_files: self.repo_files.clone(),
                people: self.people.clone(),
                research_cards: self.research_cards.clone(),
            },
        ))
        .merge(transport::implementation::routes(
            transport::implementation::ImplementationDeps {
                documents: self.documents_deps(),
                lifecycle: self.lifecycle.clone(),
                builds: self.builds.clone(),
                rebuilds: self.rebuilds.clone(),
                live_builds: self.live_builds.clone(),
            },
        ))
        .merge(transport::machines::routes(
            transport::machines::MachinesDeps {
                documents: self.documents_deps(),
                machines: self.machines.clone(),
                builds: self.builds.clone(),
            },
        ))
        .merge(transport::participation::routes(
            transport::participation::ParticipationDeps {
                documents: self.documents_deps(),
                participation: self.participation.clone(),
            },
        ))
        .merge(transport::dictation::routes(
            transport::dictation::DictationDeps {
                documents: self.documents_deps(),
                transcription: self.transcription.clone(),
            },
        ))
        .merge(transport::mcp::routes(McpDeps {
            documents: self.documents_deps(),
            updates: self.updates.clone(),
            creations: self.creations.clone(),
            chat: self.chat.clone(),
            children: self.children.clone(),
            entropy: self.runtime.entropy.clone(),
            connector: self.runtime.connector.clone(),
            shutdown: self.shutdown.clone(),
            visuals: self.visuals.clone(),
            graphs: self.graphs.clone(),
            lifecycle: self.lifecycle.clone(),
            builds: self.builds.clone(),
            rebuilds: self.rebuilds.clone(),
        }))
        .merge(transport::room::routes(RoomDeps {
            access: self.access.clone(),
            sign_ins: self.sign_ins.clone(),
            planners: self.planners.clone(),
            open: self.open.clone(),
            transcript: self.transcript.clone(),
            chat: self.chat.clone(),
            turns: self.turns.clone(),
            children: self.children.clone(),
            shutdown: self.shutdown.clone(),
            metrics: self.metrics.clone(),
            access_recheck_ms: self.config.access_recheck_ms,
            questions: self.questions.clone(),
            runs: self.runs.clone(),
            presence: !crate::harness::model_in_server(&c.harness),
            models: self.models.clone(),
            attachments: self.files.limits(),
            titling: self.titling.clone(),
            prose: self.prose_updates.clone(),
            comments: self.comments.clone(),
            transcription: self.transcription.as_ref().map(|t| t.hello()),
            drafts: self.drafts.clone(),
            graphs: self.graphs.clone(),
            default_machine: self.default_machine.clone(),
        }))
        .merge(transport::yjs::routes(YjsDeps {
            access: self.access.clone(),
            sign_ins: self.sign_ins.clone(),
            open: self.open.clone(),
            shutdown: self.shutdown.clone(),
            metrics: self.metrics.clone(),
            access_recheck_ms: self.config.access_recheck_ms,
        }))
        .merge(transport::agent::routes(AgentDeps {
            serving: self.serving.clone(),
            access: self.access.clone(),
            admission: self.admission.clone(),
            documents: self.documents.clone(),
            planners: self.planners.clone(),
            ownership: self.store.clone(),
            sign_ins: self.sign_ins.clone(),
            clock: self.runtime.clock.clone(),
            entropy: self.runtime.entropy.clone(),
            timers: LinkTimers {
                connection_timeout_ms: c.agent_connection_timeout_ms,
                attach_grace_ms: c.planner_attach_grace_ms,
                access_recheck_ms: c.access_recheck_ms,
                // The planted bug: no deadline of its own on the wait for `resume`.
                resume_wait_ms: (!c.planted.resume_wait_unbounded)
                    .then_some(crate::transport::agent::RESUME_WAIT.as_millis() as u64),
            },
            shutdown: self.shutdown.clone(),
            metrics: self.metrics.clone(),
            questions: self.questions.clone(),
            runs: self.runs.clone(),
            turns: self.turns.clone(),
            models: self.models.clone(),
            machines: self.machines.clone(),
        }))
        .merge(transport::web::routes(self.web_deps()))
    }

    /// What the pages need, the not-found page included.
    fn web_deps(&self) -> WebDeps {
        WebDeps {
            access: self.access.clone(),
            documents: self.documents.clone(),
            database: self.store.backend(),
            harness: self.config.harness.clone(),
            github_sign_in: self.config.auth_mode == AuthMode::Hosted,
        }
    }
}

/// A started server: holds the lease and the services; [`Running::router`] is what to serve.
pub struct Running {
    app: App,
    keeper: Keeping,
}

/// What a started process keeps renewing: the writer lease (one process), or each document
/// tree's lease (`PROCESSES=many`).
enum Keeping {
    Writer(Keeper),
    Documents {
        leases: DocumentLeases,
        task: tokio::task::JoinHandle<()>,
    },
}

/// The credential key: `SESSION_ENCRYPTION_KEY`, or the key file (generated once).
fn credential_key(config: &Config, runtime: &Runtime) -> Result<CredentialKey, KeyError> {
    match &config.session_encryption_key {
        Some(hex) => CredentialKey::from_hex(hex.expose()),
        None => {
            if matches!(config.database, Database::Postgres(_)) {
                tracing::warn!(
                    path = %config.credential_key_file.display(),
                    "SESSION_ENCRYPTION_KEY is unset: sign-in credentials are sealed with a key file on this machine; set SESSION_ENCRYPTION_KEY so another machine serving this database can read them"
                );
            }
            CredentialKey::load_or_create(&config.credential_key_file, &*runtime.entropy)
        }
    }
}

/// Takes the writer lease, fences the store under its epoch, clears owner references left by an
/// earlier process, sweeps dead logins, starts renewing the lease, and wires the services. Every
/// write of this process from then on goes through the fenced handle: once another process
/// takes the lease, or this one gives it up, the store refuses them.
pub async fn start(
    config: Config,
    store: Arc<dyn Store>,
    runtime: Runtime,
) -> Result<Running, StartError> {
    start_observed(config, store, runtime, None).await
}

/// [`start`], with the Planner events of the startup itself (holds rebuilt) and everything
/// after told to `observer` (the simulator's trace).
pub async fn start_observed(
    config: Config,
    store: Arc<dyn Store>,
    runtime: Runtime,
    observer: Option<Arc<dyn crate::observe::Observer>>,
) -> Result<Running, StartError> {
    let key = credential_key(&config, &runtime)?;
    let holder = crate::runtime::document_leases::process_name(
        &runtime.entropy.token_hex(8),
        config
            .process_url
            .as_deref()
            .filter(|_| config.many_processes),
    );
    if config.many_processes {
        return start_many(config, store, runtime, observer, key, holder).await;
    }
    let lease = lease::acquire(&*store, &*runtime.clock, &holder).await?;
    tracing::info!(epoch = lease.epoch, holder = %holder, "writer lease acquired");
    let fence = Fence::new(lease.epoch);
    let lease_store = store.clone();
    let store = store.fenced(fence.clone());
    // Logins past their expiry or signed out go, with their sealed credentials — first, so that
    // no owner below is kept, nor hold rebuilt, for a login that ended while no process ran.
    let swept = store.delete_expired_logins(runtime.clock.now_ms()).await?;
    if swept > 0 {
        tracing::info!(swept, "removed expired or signed-out browser logins");
    }
    sweep_left_behind(
        &*store,
        config.auth_mode == AuthMode::Local,
        runtime.clock.now_ms(),
        Reach::Every,
    )
    .await?;
    let (watch, keeper) = lease::keep(lease_store, runtime.clock.clone(), lease, fence);
    let app = App::wire(config, store, runtime, key, watch, Shutdown::new());
    if let Some(observer) = observer {
        app.planners.observe(observer);
    }
    rebuild_holds(&app.planners, &app.questions, Reach::Every).await;
    Ok(Running {
        app,
        keeper: Keeping::Writer(keeper),
    })
}

/// What an earlier process left of the documents `reach` reaches, swept: at startup every
/// document, as a process takes a tree over (`PROCESSES=many`) each of its documents.
async fn sweep_left_behind(
    store: &dyn Store,
    local: bool,
    now_ms: i64,
    reach: Reach,
) -> Result<(), StoreError> {
    // No Planner link survives a process: every owner reference is cleared, except (hosted)
    // the owner of a document whose stored hold names that owner's browser sign-in with a
    // stored credential: the hand-over keeps those (AO-20, OWN-34).
    let cleared = if local {
        store.clear_all_ownership(reach).await?
    } else {
        store.clear_unheld_ownership(reach).await?
    };
    // Nothing runs a workflow the last process was told about: its live runs come back stopped
    // (SES-13), except those of a document whose owner was kept for its hold just above: its
    // client may come back for them (HO-08). Under AUTH_MODE=local no owner was kept.
    let stopped = store.stop_unheld_runs(reach).await?;
    if stopped > 0 {
        tracing::info!(
            stopped,
            ?reach,
            "workflow runs left live by an earlier process are shown stopped"
        );
    }
    if cleared > 0 {
        tracing::info!(
            cleared,
            ?reach,
            "cleared Planner owner references left by an earlier process"
        );
    }
    // A background job attempt the last process left mid-way is never run again (OWN-18): it
    // settles failed as interrupted; pending jobs wait to be claimed by this one.
    let interrupted = store
        .interrupt_running_jobs(crate::jobs::INTERRUPTED, now_ms, reach)
        .await?;
    if interrupted > 0 {
        tracing::info!(
            interrupted,
            ?reach,
            "background job attempts left running by an earlier process were settled as interrupted"
        );
    }
    Ok(())
}

/// The holds the last process left of the documents `reach` reaches become suspended holds
/// (AO-19), some in their hand-over window (HO-03). A store that cannot be read leaves the kept
/// owners without a hold; the next attach clears such an owner (AO-05).
async fn rebuild_holds(planners: &Arc<Planners>, questions: &Questions, reach: Reach) {
    match planners.rebuild_holds_in(reach).await {
        Ok(0) => {}
        Ok(rebuilt) => tracing::info!(rebuilt, ?reach, "Planner holds rebuilt from storage"),
        Err(e) => tracing::error!(error = %e, ?reach, "could not read the stored Planner holds"),
    }
    // Nothing in this process waits on the questions those holds' clients waited on (HO-15):
    // an answer to one of their Decisions goes to a Planner turn instead.
    for (doc, held) in planners.held_questions() {
        if reach.covers(doc) {
            let cards: Vec<String> = held.into_iter().flat_map(|q| q.cards).collect();
            questions.not_waited_on(doc, &cards);
        }
    }
}

/// [`start_observed`] under `PROCESSES=many`: no writer lease. Each document tree is served
/// under its root's lease, taken as the tree is first asked for here; what the startup does for
/// every document (clear owners, stop live runs, settle interrupted job attempts, rebuild
/// holds) is done for each tree as it is taken ([`TakeOver`]). A tree lost to another process
/// closes its sockets here, to reconnect there.
async fn start_many(
    config: Config,
    store: Arc<dyn Store>,
    runtime: Runtime,
    observer: Option<Arc<dyn crate::observe::Observer>>,
    key: CredentialKey,
    holder: String,
) -> Result<Running, StartError> {
    let ttl_ms = i64::try_from(config.document_lease_ms).unwrap_or(i64::MAX);
    let leases = DocumentLeases::new(
        store.clone(),
        runtime.clock.clone(),
        holder.clone(),
        DocumentLeaseTimes::for_ttl(ttl_ms),
    );
    let routed: Arc<dyn Store> = Arc::new(Routed::new(store.clone(), Arc::new(leases.clone())));
    tracing::info!(holder = %holder, lease_ms = ttl_ms, "serving documents under their own leases (PROCESSES=many)");
    let swept = routed.delete_expired_logins(runtime.clock.now_ms()).await?;
    if swept > 0 {
        tracing::info!(swept, "removed expired or signed-out browser logins");
    }
    let local = config.auth_mode == AuthMode::Local;
    let app = App::wire(
        config,
        routed,
        runtime,
        key,
        LeaseWatch::fixed(None),
        Shutdown::new(),
    );
    if let Some(observer) = observer {
        app.planners.observe(observer);
    }
    leases.welcome(Arc::new(TakeOver {
        store: store.clone(),
        clock: app.runtime.clock.clone(),
        planners: Arc::downgrade(&app.planners),
        questions: Arc::downgrade(&app.questions),
        local,
    }));
    app.serving.lease(leases.clone(), store.clone());
    give_back_quiet_trees(&app, store.clone(), DocumentLeaseTimes::for_ttl(ttl_ms));
    read_connector_polls(&app);
    // A tree another process took over: its sockets here close (1013), to reconnect there.
    let mut lost = leases.lost();
    let moved = Moved::of(&app);
    let stopping = app.shutdown.stopping();
    app.shutdown.spawn(async move {
        tokio::pin!(stopping);
        loop {
            let (root, why) = tokio::select! {
                () = &mut stopping => return,
                got = lost.recv() => match got {
                    Ok(lost) => lost,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::error!(missed, "document losses missed; their sockets stay until they next write");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            };
            let tree = tree_of(&*store, root).await.unwrap_or_else(|_| vec![root]);
            if !moved.tree(&tree).await {
                return;
            }
            tracing::info!(%root, ?why, "a document tree is served elsewhere now; its sockets here were closed");
        }
    });
    let task = leases.keep();
    Ok(Running {
        app,
        keeper: Keeping::Documents { leases, task },
    })
}

/// Under `PROCESSES=many`, a tree nobody uses here any more — no document of it in use, its
/// Planner held by nobody, no request or socket admitted for it, and no background job of it
/// waiting — is given back once it has been quiet for three lease periods (looked at once per
/// renewal period), so the process the balancer hashes it to serves it again: after a
/// failover, the process that came back. Whatever opened it meanwhile is told it moved.
fn give_back_quiet_trees(app: &App, store: Arc<dyn Store>, times: DocumentLeaseTimes) {
    let quiet_for = std::time::Duration::from_millis(
        u64::try_from(times.ttl_ms)
            .unwrap_or(u64::MAX)
            .saturating_mul(3),
    );
    let every = std::time::Duration::from_millis(times.renew_every_ms.max(1));
    let open = Arc::downgrade(&app.open);
    let planners = Arc::downgrade(&app.planners);
    let serving = Arc::downgrade(&app.serving);
    let moved = Moved::of(app);
    let stopping = app.shutdown.stopping();
    app.shutdown.spawn(async move {
        tokio::pin!(stopping);
        let mut looks = tokio::time::interval(every);
        looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stopping => return,
                _ = looks.tick() => {}
            }
            let (Some(open), Some(planners), Some(serving)) =
                (open.upgrade(), planners.upgrade(), serving.upgrade())
            else {
                return;
            };
            let mut busy = open.in_use();
            busy.extend(planners.held());
            for root in serving.idle(&busy, quiet_for).await {
                let tree = match tree_of(&*store, root).await {
                    Ok(tree) => tree,
                    Err(e) => {
                        tracing::warn!(%root, error = %e, "could not read a quiet tree's children; it stays served here");
                        continue;
                    }
                };
                if has_waiting_jobs(&*store, &tree).await {
                    continue;
                }
                match serving.give_back(root).await {
                    Ok(()) => {
                        moved.tree(&tree).await;
                        tracing::info!(%root, quiet_ms = quiet_for.as_millis() as u64, "a quiet document tree was given back");
                    }
                    Err(e) => {
                        tracing::warn!(%root, error = %e, "could not give a quiet tree back; it is served here until its lease expires");
                    }
                }
            }
        }
    });
}

/// What a process holds of a document tree, forgotten once another process serves the tree
/// (its lease lost, or given back): its sockets are told it moved (1013), its Planner link is
/// closed `unavailable`, and the per-document state rebuilt from storage by whoever serves it
/// next goes without writing — turns and kept sessions, questions, unsaved run reports, what
/// Chat was told of the model, a quiet window of automatic participation, a live build's
/// settle timer. So a tree that comes back later starts here from storage alone.
struct Moved {
    open: std::sync::Weak<OpenDocuments>,
    planners: std::sync::Weak<Planners>,
    turns: std::sync::Weak<Turns>,
    questions: std::sync::Weak<Questions>,
    runs: std::sync::Weak<Runs>,
    models: std::sync::Weak<Models>,
    chat: std::sync::Weak<Chat>,
    participation: std::sync::Weak<crate::participation::Participation>,
    live_builds: Option<std::sync::Weak<crate::live_builds::LiveBuilds>>,
}

impl Moved {
    fn of(app: &App) -> Self {
        Moved {
            open: Arc::downgrade(&app.open),
            planners: Arc::downgrade(&app.planners),
            turns: Arc::downgrade(&app.turns),
            questions: Arc::downgrade(&app.questions),
            runs: Arc::downgrade(&app.runs),
            models: Arc::downgrade(&app.models),
            chat: Arc::downgrade(&app.chat),
            participation: Arc::downgrade(&app.participation),
            live_builds: app.live_builds.as_ref().map(Arc::downgrade),
        }
    }

    /// Forgets `tree` (its root first). False once the process is gone.
    async fn tree(&self, tree: &[uuid::Uuid]) -> bool {
        let (Some(open), Some(planners), Some(turns), Some(questions), Some(runs), Some(models)) = (
            self.open.upgrade(),
            self.planners.upgrade(),
            self.turns.upgrade(),
            self.questions.upgrade(),
            self.runs.upgrade(),
            self.models.upgrade(),
        ) else {
            return false;
        };
        for document in tree {
            open.set_moved(*document);
        }
        for document in tree {
            planners.moved(*document).await;
            turns.moved(*document).await;
            questions.moved(*document);
            runs.moved(*document);
            models.moved(*document);
            if let Some(chat) = self.chat.upgrade() {
                chat.moved(*document);
            }
            if let Some(participation) = self.participation.upgrade() {
                participation.addressed(*document);
            }
            if let Some(live) = self.live_builds.as_ref().and_then(std::sync::Weak::upgrade) {
                live.moved(*document);
            }
        }
        true
    }
}

/// Under `PROCESSES=many`, reads back the connectors' polls every process recorded, every
/// [`crate::builds::POLLS_READ_EVERY_MS`]: a machine whose connector polls one process is online,
/// with its consent to automatic builds, on all of them.
fn read_connector_polls(app: &App) {
    let builds = Arc::downgrade(&app.builds);
    let stopping = app.shutdown.stopping();
    app.shutdown.spawn(async move {
        tokio::pin!(stopping);
        let mut reads = tokio::time::interval(std::time::Duration::from_millis(
            crate::builds::POLLS_READ_EVERY_MS,
        ));
        reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stopping => return,
                _ = reads.tick() => {}
            }
            let Some(builds) = builds.upgrade() else {
                return;
            };
            if let Err(e) = builds.read_polls().await {
                tracing::warn!(error = %e, "could not read the connectors' polls; the next read tries again");
            }
        }
    });
}

/// The documents of `root`'s tree: the root, then its children.
async fn tree_of(store: &dyn Store, root: uuid::Uuid) -> Result<Vec<uuid::Uuid>, StoreError> {
    let children = store.children(root).await?;
    Ok(std::iter::once(root)
        .chain(children.iter().map(|c| c.id))
        .collect())
}

/// Whether a document of `tree` has a background job pending or running (its runner is the
/// process serving it), or the jobs could not be read.
async fn has_waiting_jobs(store: &dyn Store, tree: &[uuid::Uuid]) -> bool {
    for document in tree {
        match store.document_jobs(*document, 100).await {
            Ok(jobs) => {
                if jobs.iter().any(|j| j.state.is_active()) {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
    false
}

/// What a process does as it takes a document tree's lease (`PROCESSES=many`): for the root and
/// each child, what a starting process does for every document — owners left by the last
/// process cleared (hosted: except those kept for a stored hold), live runs stopped, running job
/// attempts settled interrupted — and the holds rebuilt, as after a deploy.
struct TakeOver {
    /// Unfenced: reads the tree's children.
    store: Arc<dyn Store>,
    clock: crate::runtime::SharedClock,
    planners: std::sync::Weak<Planners>,
    questions: std::sync::Weak<Questions>,
    local: bool,
}

#[async_trait::async_trait]
impl Welcome for TakeOver {
    async fn taken(&self, root: uuid::Uuid, handle: Arc<dyn Store>) {
        // A document about to be made has nothing left by anyone.
        if matches!(self.store.document(root).await, Ok(None)) {
            return;
        }
        let tree = match tree_of(&*self.store, root).await {
            Ok(tree) => tree,
            Err(e) => {
                tracing::error!(%root, error = %e, "could not read a tree's children as it was taken; only its root is swept");
                vec![root]
            }
        };
        for document in tree {
            let reach = Reach::Document(document);
            if let Err(e) =
                sweep_left_behind(&*handle, self.local, self.clock.now_ms(), reach).await
            {
                tracing::error!(%document, error = %e, "could not sweep what an earlier process left of a document taken over");
            }
            let (Some(planners), Some(questions)) =
                (self.planners.upgrade(), self.questions.upgrade())
            else {
                return;
            };
            rebuild_holds(&planners, &questions, reach).await;
        }
    }
}

impl Running {
    /// The services of this process.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// The router to serve.
    pub fn router(&self) -> axum::Router {
        // A path no route serves: the not-found page, with what every page says of the server.
        let web = self.app.web_deps();
        let router = self.app.routes().into_router().fallback(
            move |headers: axum::http::HeaderMap, uri: axum::http::Uri| {
                let web = web.clone();
                async move { transport::web::not_found(&web, &headers, uri).await }
            },
        );
        match self.keeper {
            Keeping::Writer(_) => router,
            // A request naming a document another process serves is refused before its
            // handler runs.
            Keeping::Documents { .. } => router.layer(axum::middleware::from_fn_with_state(
                self.app.serving.clone(),
                transport::placement::gate,
            )),
        }
    }

    /// Resolves when the writer lease is lost: the process must drain and stop. Never, under
    /// `PROCESSES=many` (a lost document only closes that document's sockets).
    pub fn lease_lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self.keeper {
            Keeping::Writer(_) => Box::pin(self.app.lease.lost()),
            Keeping::Documents { .. } => Box::pin(std::future::pending()),
        }
    }

    /// Whether the writer lease was lost (always `false` under `PROCESSES=many`).
    pub fn lost_writer_lease(&self) -> bool {
        matches!(self.keeper, Keeping::Writer(_)) && !self.app.lease.is_held()
    }

    /// Resolves once the stop has begun ([`Running::begin_stop`], or [`Running::stop`]): the
    /// signal to hand to [`crate::transport::serve`], so it stops accepting at that moment.
    pub fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.app.shutdown.stopping()
    }

    /// Begins the stop: every socket is told (an agent link `going-away`, a room socket 1001),
    /// turns are stopped, timers end.
    pub fn begin_stop(&self) {
        self.app.shutdown.begin();
    }

    /// The graceful stop, after the listener has stopped accepting: begins it (if not yet), waits
    /// at most [`DRAIN_BOUND`] for every tracked task (sockets, turns, timers, queues) to end, and
    /// only then stops renewing the writer lease — giving up its fence, so the store refuses any
    /// later write of this process — and gives it back. If a task outlives the bound, the lease
    /// is not given back but left to expire, and that task's writes are refused.
    pub async fn stop(self) -> Stopped {
        self.app.shutdown.begin();
        let drained = self.app.shutdown.drained(DRAIN_BOUND).await;
        // A sign-out the store has not recorded yet gets one more try while the fence holds;
        // after a restart only the store remembers it.
        if self.app.sign_ins.pending_sign_out_count() > 0 {
            let left = self.app.sign_ins.retry_pending_sign_outs().await;
            if left > 0 {
                tracing::error!(left, "sign-outs still not recorded at stop; those logins can be restored by their cookies after a restart");
            }
        }
        if !drained {
            tracing::warn!(
                still_running = self.app.shutdown.running(),
                "tasks still running after the drain bound; the writer lease is left to expire"
            );
        }
        let keeper = match self.keeper {
            Keeping::Writer(keeper) => keeper,
            Keeping::Documents { leases, task } => {
                task.abort();
                // Each tree is handed over (its fence given up first), so the next process
                // serves it at once rather than after its expiry.
                let served = leases.served().len();
                let released = drained
                    && match leases.hand_over_all().await {
                        Ok(()) => {
                            tracing::info!(served, "document leases handed back");
                            true
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not hand every document lease back; they will expire");
                            false
                        }
                    };
                return Stopped { drained, released };
            }
        };
        let held = keeper.stop();
        let released = match (held, drained) {
            (Some(lease), true) => match self.app.store.release_writer_lease(&lease).await {
                Ok(()) => {
                    tracing::info!(epoch = lease.epoch, "writer lease released");
                    true
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not release the writer lease; it will expire");
                    false
                }
            },
            _ => false,
        };
        Stopped { drained, released }
    }
}

/// The longest a graceful stop waits for its tasks to end (a turn's abort wait is 5 s).
pub const DRAIN_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Every task ended within [`DRAIN_BOUND`].
    pub drained: bool,
    /// The writer lease was given back (not lost, not left to expire).
    pub released: bool,
}

/// The deployment's classifier: its model where `CLASSIFIER_MODEL` is set, else [`Builtin`].
/// The visual admission check's assessor, where `VISUAL_ASSESSOR_MODEL` names one.
fn assessor_for(
    settings: Option<&crate::config::ClassifierSettings>,
    connector: crate::runtime::connector::SharedConnector,
    entropy: crate::runtime::entropy::SharedEntropy,
) -> Option<Arc<dyn crate::visuals::Assessor>> {
    let settings = settings?;
    let model = model_for(settings, connector, entropy, 2048);
    Some(Arc::new(crate::visuals::ModelAssessor::new(model)))
}

/// A structured-answer model called through the provider wire (one call, no retry, the
/// caller's deadline).
fn model_for(
    settings: &crate::config::ClassifierSettings,
    connector: crate::runtime::connector::SharedConnector,
    entropy: crate::runtime::entropy::SharedEntropy,
    max_output_tokens: u64,
) -> crate::classifier::ModelClassifier {
    let provider = crate::config::ProviderSettings {
        family: settings.family,
        model: settings.model.clone(),
        base_url: settings.base_url.clone(),
        api_key: settings.api_key.clone(),
        reasoning: None,
        max_model_calls: 1,
        retries: 0,
        // The check's own deadline governs: a call is not given up sooner by the adapter.
        timeout_ms: settings.timeout_ms.saturating_add(1_000),
        tool_result_max_bytes: 1024,
        max_output_tokens: Some(max_output_tokens),
        offered: Vec::new(),
        list_models: false,
        image_models: Vec::new(),
    };
    let deps = crate::harness::provider_deps(&provider, connector, entropy);
    crate::classifier::ModelClassifier::new(
        Arc::new(chopin_harness_provider::ProviderHarness::new(deps)),
        settings.timeout_ms,
    )
}

fn classifier_for(
    settings: Option<&crate::config::ClassifierSettings>,
    connector: crate::runtime::connector::SharedConnector,
    entropy: crate::runtime::entropy::SharedEntropy,
) -> Arc<dyn crate::classifier::Classifier> {
    let Some(settings) = settings else {
        return Arc::new(crate::classifier::Builtin);
    };
    Arc::new(model_for(settings, connector, entropy, 256))
}
