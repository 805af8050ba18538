//! `chopin`: the server binary. A thin main — settings, logging, sockets and signals; all
//! behaviour is in the `chopin_server` library.

use std::process::ExitCode;

use clap::Parser;

use chopin_server::config::{Args, Config, LogFormat};
use chopin_server::{app, store, Runtime};

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CHOPIN_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,rig_agent=warn,rig_core=warn,rig=warn")
    });
    // Colour only for a terminal: a pipe, a file or journald gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
}

/// SIGTERM and SIGINT, listened for from the moment this is made: made before the address is
/// printed, so a supervisor that signals as soon as it sees the address is always heard.
struct ShutdownSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            ShutdownSignals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignals {}
    }

    async fn received(self) {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(self.int) => tracing::info!("SIGINT received; shutting down"),
                () = wait(self.term) => tracing::info!("SIGTERM received; shutting down"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("Ctrl-C received; shutting down");
        }
    }
}

/// glibc's malloc arenas, when the operator set none (`MALLOC_ARENA_MAX`): two, where glibc's
/// default is up to eight per core. Memory freed in one arena is reused only by the threads
/// that land on it; fewer arenas keep less of it idle (`chopin-bench-sockets soak` watches RSS).
const MALLOC_ARENAS: i32 = 2;

/// Caps glibc's malloc arenas at [`MALLOC_ARENAS`] unless `MALLOC_ARENA_MAX` says otherwise.
/// Called before any thread starts, so every thread shares the capped arenas.
fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt changes a malloc setting; called once, before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        }
    }
}

fn main() -> ExitCode {
    cap_malloc_arenas();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(serve()),
        Err(e) => {
            eprintln!("chopin: cannot start its async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> ExitCode {
    let args = Args::parse();
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("chopin: cannot start: {e}");
            eprintln!("(see `chopin --help` for every setting)");
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_format);
    // One file descriptor per socket: take what the hard limit allows, not the (often 1024)
    // soft default.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let origin_given = args
        .app_origin
        .as_deref()
        .is_some_and(|o| !o.trim().is_empty());
    match run(config, origin_given).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("chopin: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(mut config: Config, origin_given: bool) -> anyhow::Result<()> {
    let where_ = config.database.describe();
    let store = store::open(&config.database)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the database ({where_}): {e}"))?;
    let addr = std::net::SocketAddr::new(config.server_host, config.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    if config.port == 0 && !origin_given {
        // A port chosen by the system: the derived origin names the port actually bound.
        config.app_origin = format!("http://{local}");
    }
    if config.many_processes && config.process_url.is_none() {
        // Where the other processes reach this one: the port bound, on this machine.
        let ip = match local.ip() {
            ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip,
        };
        config.process_url = Some(format!(
            "http://{}",
            std::net::SocketAddr::new(ip, local.port())
        ));
    }
    let signals = ShutdownSignals::listen();
    // Which harness runs the Planner, and for `provider` which model and API (never its key).
    let planner = match &config.provider {
        Some(p) => format!("{} ({} at {})", config.harness, p.model, p.base_url),
        None => config.harness.clone(),
    };
    let running = app::start(config, store, Runtime::production()).await?;
    tracing::info!(store = %where_, %planner, "chopin listening on http://{local}");
    // Printed as well as logged, so the address is easy to find with any log format.
    println!("chopin listening on http://{local} (data: {where_})");

    // A signal or a lost lease begins the stop: the listener stops accepting, every socket is
    // told, every task drains, and only then is the writer lease given back.
    let lost = running.lease_lost();
    let shutdown = running.app().shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = signals.received() => {}
            () = lost => tracing::error!("writer lease lost; draining and stopping"),
        }
        shutdown.begin();
    });
    let served = chopin_server::serve(
        chopin_server::tcp_listener(listener),
        running.router(),
        running.stopping(),
    )
    .await;
    let lost_lease = running.lost_writer_lease();
    let stopped = running.stop().await;
    tracing::info!(
        drained = stopped.drained,
        lease_released = stopped.released,
        "stopped"
    );
    served?;
    if lost_lease {
        anyhow::bail!("stopped because the writer lease was lost");
    }
    Ok(())
}
