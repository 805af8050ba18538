//! The server's configuration: one typed [`Config`], read from the environment with the spec's
//! names and defaults, each setting also a `chopin` flag.
//!
//! Owns: names, defaults, accepted values and the startup refusals for bad values. A bad value is
//! a [`ConfigError`] naming the variable and what it accepts — never a panic or a silent default.
//! Does not own: acting on the settings.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

/// 1 MiB: the per-file and total attachment ceiling under `HARNESS=remote`.
pub const REMOTE_ATTACHMENT_CEILING_BYTES: u64 = 1024 * 1024;
/// The longest timer setting we accept: one day.
const MAX_TIMER_MS: u64 = 86_400_000;

/// Harness adapters this build can run (the code-owned map's keys).
pub const HARNESSES: &[&str] = &["remote"];
/// `HARNESS_AUTH` modes. `auto` falls back to a host-logged-in subscription.
pub const HARNESS_AUTH_MODES: &[&str] = &[
    "auto",
    "direct",
    "ai-gateway",
    "openai",
    "anthropic",
    "custom",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// GitHub OAuth web sign-in for any admitted account.
    Hosted,
    /// One account on a loopback-only server.
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

/// Where documents and records are kept.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// `DATABASE_URL=postgres://…` (or `postgresql://…`).
    Postgres(String),
    /// `DATABASE_URL=sqlite:…`, or the embedded default file.
    Sqlite(PathBuf),
}

impl std::fmt::Debug for Database {
    // A PostgreSQL URL may carry a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Postgres(_) => f.write_str("Postgres(<redacted url>)"),
            Database::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
        }
    }
}

impl Database {
    /// Where this database is, for a log line: the file, or the PostgreSQL host without
    /// credentials.
    pub fn describe(&self) -> String {
        match self {
            Database::Sqlite(p) => format!("SQLite at {}", p.display()),
            Database::Postgres(url) => {
                let rest = url.split_once("://").map(|(_, r)| r).unwrap_or("");
                let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
                let host = host.split(['/', '?']).next().unwrap_or("");
                format!("PostgreSQL at {host}")
            }
        }
    }
}

/// The typed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server_host: IpAddr,
    pub port: u16,
    pub database: Database,
    pub auth_mode: AuthMode,
    pub harness: String,
    pub harness_auth: Option<String>,
    /// `AGENT=off` prevents Planner turns.
    pub agent_enabled: bool,
    pub planner_attach_grace_ms: u64,
    pub agent_connection_timeout_ms: u64,
    pub handover_planner_window_ms: u64,
    pub planner_patience_ms: u64,
    pub chat_attachment_max_bytes: u64,
    pub chat_attachment_max_count: u32,
    pub chat_attachment_max_total_bytes: u64,
    pub log_format: LogFormat,
    /// Warnings to log once logging is up (a setting was adjusted).
    pub warnings: Vec<String>,
}

/// A setting that stops startup: which variable, what it was given (unless secret), what it
/// accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}{shown}: {problem}")]
pub struct ConfigError {
    pub variable: &'static str,
    shown: String,
    pub problem: String,
}

impl ConfigError {
    fn new(variable: &'static str, value: Option<&str>, problem: impl Into<String>) -> Self {
        let shown = match value {
            Some(v) => format!("={v:?}"),
            None => String::new(),
        };
        Self {
            variable,
            shown,
            problem: problem.into(),
        }
    }
}

const AFTER_HELP: &str = "\
Every setting can be given as a flag or as the environment variable shown beside it; a flag wins.
A value the server cannot use stops startup with a message naming the variable.

With no DATABASE_URL the server keeps its data in SQLite under --data-dir (default: the user's
state directory, e.g. ~/.local/state/chopin).";

/// `chopin`: command-line flags, each backed by its environment variable. Values are kept as
/// text here and checked by [`Config::from_args`], so an error names the variable.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "chopin",
    version,
    about = "The Chopin server: collaborative, repository-connected documents with a Planner.",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Address to bind. Loopback (127.0.0.1) by default; 0.0.0.0 serves every interface.
    #[arg(long, env = "SERVER_HOST", value_name = "ADDR")]
    pub server_host: Option<String>,

    /// TCP port for HTTP and WebSocket. Default 8787; 0 picks a free port.
    #[arg(long, env = "PORT", value_name = "PORT")]
    pub port: Option<String>,

    /// postgres://… for PostgreSQL, sqlite:PATH for a given SQLite file. Unset: embedded SQLite
    /// under --data-dir. Never printed.
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Folder for the embedded SQLite database when DATABASE_URL is unset.
    #[arg(long, env = "CHOPIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// `hosted` (GitHub sign-in for admitted accounts; default) or `local` (one account,
    /// loopback-only server).
    #[arg(long, env = "AUTH_MODE", value_name = "MODE")]
    pub auth_mode: Option<String>,

    /// Harness adapter that runs the Planner. This build: `remote` (default).
    #[arg(long, env = "HARNESS", value_name = "NAME")]
    pub harness: Option<String>,

    /// Model-access mode given to the harness: auto, direct, ai-gateway, openai, anthropic or
    /// custom. `auto` may fall back to a host login and needs a loopback-only bind.
    #[arg(long, env = "HARNESS_AUTH", value_name = "MODE")]
    pub harness_auth: Option<String>,

    /// `on` (default) or `off`: off prevents Planner turns.
    #[arg(long, env = "AGENT", value_name = "on|off")]
    pub agent: Option<String>,

    /// How long a detached or dropped Planner keeps its document, in ms. Default 120000.
    #[arg(long, env = "PLANNER_ATTACH_GRACE_MS", value_name = "MS")]
    pub planner_attach_grace_ms: Option<String>,

    /// An agent link that answers no ping for this long is closed as dropped, in ms.
    /// Default 120000.
    #[arg(long, env = "AGENT_CONNECTION_TIMEOUT_MS", value_name = "MS")]
    pub agent_connection_timeout_ms: Option<String>,

    /// Time a Planner cut off by a deploy has to come back, counted from the writer lease's
    /// release, in ms. Default 60000.
    #[arg(long, env = "HANDOVER_PLANNER_WINDOW_MS", value_name = "MS")]
    pub handover_planner_window_ms: Option<String>,

    /// How long a machine asked to run a Planner has to attach before it is reported, in ms.
    /// Default 120000.
    #[arg(long, env = "PLANNER_PATIENCE_MS", value_name = "MS")]
    pub planner_patience_ms: Option<String>,

    /// Largest Chat attachment, in bytes. Default 1048576 (1 MiB).
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_BYTES", value_name = "BYTES")]
    pub chat_attachment_max_bytes: Option<String>,

    /// Most files on one Chat message; 0 turns attachments off. Default 5.
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_COUNT", value_name = "N")]
    pub chat_attachment_max_count: Option<String>,

    /// Largest total of one message's attachments, in bytes. Default 4194304 (4 MiB); under
    /// HARNESS=remote both byte caps are at most 1 MiB.
    #[arg(long, env = "CHAT_ATTACHMENT_MAX_TOTAL_BYTES", value_name = "BYTES")]
    pub chat_attachment_max_total_bytes: Option<String>,

    /// Log format: `human` (default) or `json`.
    #[arg(long, env = "CHOPIN_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,
}

/// An unset or empty value counts as unset.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn parse_ms(variable: &'static str, v: &Option<String>, default: u64) -> Result<u64, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    match raw.parse::<u64>() {
        Ok(n) if (1..=MAX_TIMER_MS).contains(&n) => Ok(n),
        _ => Err(ConfigError::new(
            variable,
            Some(raw),
            format!("expected a whole number of milliseconds from 1 to {MAX_TIMER_MS}"),
        )),
    }
}

fn parse_u64(
    variable: &'static str,
    v: &Option<String>,
    default: u64,
    what: &str,
) -> Result<u64, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    raw.parse::<u64>()
        .map_err(|_| ConfigError::new(variable, Some(raw), format!("expected {what}")))
}

fn one_of<'a>(
    variable: &'static str,
    v: &'a Option<String>,
    default: &'a str,
    accepted: &[&str],
) -> Result<&'a str, ConfigError> {
    let Some(raw) = given(v) else {
        return Ok(default);
    };
    if accepted.contains(&raw) {
        Ok(raw)
    } else {
        Err(ConfigError::new(
            variable,
            Some(raw),
            format!("expected one of: {}", accepted.join(", ")),
        ))
    }
}

/// The user's state directory for the embedded database.
pub fn default_data_dir() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .unwrap_or_else(|| PathBuf::from("."))
        .join("chopin")
}

impl Config {
    /// Checks every setting. `data_dir_default` is used when neither `DATABASE_URL` nor
    /// `--data-dir` is given.
    pub fn from_args(args: &Args) -> Result<Self, ConfigError> {
        let server_host = match given(&args.server_host) {
            None => IpAddr::from([127, 0, 0, 1]),
            Some(raw) => raw.parse::<IpAddr>().map_err(|_| {
                ConfigError::new(
                    "SERVER_HOST",
                    Some(raw),
                    "expected an IP address such as 127.0.0.1 or 0.0.0.0",
                )
            })?,
        };
        let port = match given(&args.port) {
            None => 8787,
            Some(raw) => raw.parse::<u16>().map_err(|_| {
                ConfigError::new(
                    "PORT",
                    Some(raw),
                    "expected a TCP port number from 0 to 65535",
                )
            })?,
        };
        let database = match given(&args.database_url) {
            None => Database::Sqlite(
                args.data_dir
                    .clone()
                    .unwrap_or_else(default_data_dir)
                    .join("chopin.db"),
            ),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Database::Postgres(url.to_string())
            }
            Some(url) if url.starts_with("sqlite:") => {
                let path = url
                    .trim_start_matches("sqlite://")
                    .trim_start_matches("sqlite:");
                let path = path.split('?').next().unwrap_or("");
                if path.is_empty() {
                    return Err(ConfigError::new(
                        "DATABASE_URL",
                        None,
                        "sqlite: needs a file path, e.g. sqlite:/var/lib/chopin/chopin.db",
                    ));
                }
                Database::Sqlite(PathBuf::from(path))
            }
            Some(_) => {
                // The value may hold a password, so it is not shown.
                return Err(ConfigError::new(
                    "DATABASE_URL",
                    None,
                    "expected a postgres://, postgresql:// or sqlite: URL (leave unset for the embedded SQLite database)",
                ));
            }
        };
        let auth_mode = match one_of("AUTH_MODE", &args.auth_mode, "hosted", &["hosted", "local"])?
        {
            "local" => AuthMode::Local,
            _ => AuthMode::Hosted,
        };
        if auth_mode == AuthMode::Local && !server_host.is_loopback() {
            return Err(ConfigError::new(
                "AUTH_MODE",
                Some("local"),
                format!("local mode serves only loopback, but SERVER_HOST is {server_host}; bind 127.0.0.1 or use AUTH_MODE=hosted"),
            ));
        }
        let harness = one_of("HARNESS", &args.harness, "remote", HARNESSES)?.to_string();
        let harness_auth = match given(&args.harness_auth) {
            None => None,
            Some(raw) => Some(
                one_of("HARNESS_AUTH", &args.harness_auth, raw, HARNESS_AUTH_MODES)?.to_string(),
            ),
        };
        if harness_auth.as_deref() == Some("auto") && !server_host.is_loopback() {
            return Err(ConfigError::new(
                "HARNESS_AUTH",
                Some("auto"),
                format!(
                    "auto may fall back to this host's own login, which is allowed only on a loopback-only bind, but SERVER_HOST is {server_host}; choose an explicit mode"
                ),
            ));
        }
        let agent_enabled = one_of("AGENT", &args.agent, "on", &["on", "off"])? == "on";
        let log_format = match one_of(
            "CHOPIN_LOG_FORMAT",
            &args.log_format,
            "human",
            &["human", "json"],
        )? {
            "json" => LogFormat::Json,
            _ => LogFormat::Human,
        };

        let mut warnings = Vec::new();
        let mut chat_attachment_max_bytes = parse_u64(
            "CHAT_ATTACHMENT_MAX_BYTES",
            &args.chat_attachment_max_bytes,
            1024 * 1024,
            "a whole number of bytes",
        )?;
        let chat_attachment_max_count = parse_u64(
            "CHAT_ATTACHMENT_MAX_COUNT",
            &args.chat_attachment_max_count,
            5,
            "a whole number of files (0 turns attachments off)",
        )?;
        let chat_attachment_max_count = u32::try_from(chat_attachment_max_count).map_err(|_| {
            ConfigError::new(
                "CHAT_ATTACHMENT_MAX_COUNT",
                given(&args.chat_attachment_max_count),
                "too large",
            )
        })?;
        let mut chat_attachment_max_total_bytes = parse_u64(
            "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
            &args.chat_attachment_max_total_bytes,
            4 * 1024 * 1024,
            "a whole number of bytes",
        )?;
        if harness == "remote" {
            for (name, cap, set) in [
                (
                    "CHAT_ATTACHMENT_MAX_BYTES",
                    &mut chat_attachment_max_bytes,
                    given(&args.chat_attachment_max_bytes).is_some(),
                ),
                (
                    "CHAT_ATTACHMENT_MAX_TOTAL_BYTES",
                    &mut chat_attachment_max_total_bytes,
                    given(&args.chat_attachment_max_total_bytes).is_some(),
                ),
            ] {
                if *cap > REMOTE_ATTACHMENT_CEILING_BYTES {
                    if set {
                        warnings.push(format!(
                            "{name}={cap} is above the 1 MiB ceiling of HARNESS=remote; using 1048576"
                        ));
                    }
                    *cap = REMOTE_ATTACHMENT_CEILING_BYTES;
                }
            }
        }

        Ok(Self {
            server_host,
            port,
            database,
            auth_mode,
            harness,
            harness_auth,
            agent_enabled,
            planner_attach_grace_ms: parse_ms(
                "PLANNER_ATTACH_GRACE_MS",
                &args.planner_attach_grace_ms,
                120_000,
            )?,
            agent_connection_timeout_ms: parse_ms(
                "AGENT_CONNECTION_TIMEOUT_MS",
                &args.agent_connection_timeout_ms,
                120_000,
            )?,
            handover_planner_window_ms: parse_ms(
                "HANDOVER_PLANNER_WINDOW_MS",
                &args.handover_planner_window_ms,
                60_000,
            )?,
            planner_patience_ms: parse_ms(
                "PLANNER_PATIENCE_MS",
                &args.planner_patience_ms,
                120_000,
            )?,
            chat_attachment_max_bytes,
            chat_attachment_max_count,
            chat_attachment_max_total_bytes,
            log_format,
            warnings,
        })
    }

    /// Every default, as with an empty environment (the embedded database under `data_dir`).
    pub fn defaults_with_data_dir(data_dir: PathBuf) -> Self {
        let args = Args {
            data_dir: Some(data_dir),
            ..Args::default()
        };
        Self::from_args(&args).expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut argv = vec!["chopin".to_string()];
        for (flag, value) in pairs {
            argv.push(format!("--{flag}={value}"));
        }
        let args = Args::try_parse_from(argv).expect("flags parse as text");
        Config::from_args(&args)
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.server_host.to_string(), "127.0.0.1");
        assert_eq!(c.port, 8787);
        assert_eq!(c.auth_mode, AuthMode::Hosted);
        assert_eq!(c.harness, "remote");
        assert!(c.agent_enabled);
        // AO-07, AO-08: two minutes each. HO-19 ruling: 60000. PRES-20: two minutes.
        assert_eq!(c.planner_attach_grace_ms, 120_000);
        assert_eq!(c.agent_connection_timeout_ms, 120_000);
        assert_eq!(c.handover_planner_window_ms, 60_000);
        assert_eq!(c.planner_patience_ms, 120_000);
        // FILE-18..20, with FILE-22: under remote both byte caps are at most 1 MiB.
        assert_eq!(c.chat_attachment_max_bytes, 1024 * 1024);
        assert_eq!(c.chat_attachment_max_count, 5);
        assert_eq!(c.chat_attachment_max_total_bytes, 1024 * 1024);
        assert!(
            c.warnings.is_empty(),
            "defaults are not configured values: {:?}",
            c.warnings
        );
        assert!(matches!(c.database, Database::Sqlite(_)));
    }

    #[test]
    fn a_bad_timer_names_the_variable() {
        let e = parse(&[("planner-attach-grace-ms", "abc")]).unwrap_err();
        assert_eq!(e.variable, "PLANNER_ATTACH_GRACE_MS");
        assert!(
            e.to_string().contains("PLANNER_ATTACH_GRACE_MS=\"abc\""),
            "{e}"
        );
        assert!(e.to_string().contains("milliseconds"), "{e}");
        assert!(parse(&[("agent-connection-timeout-ms", "0")]).is_err());
    }

    #[test]
    fn file_33_remote_lowers_a_configured_cap_with_a_warning() {
        let c = parse(&[("chat-attachment-max-total-bytes", "8388608")]).unwrap();
        assert_eq!(c.chat_attachment_max_total_bytes, 1024 * 1024);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("CHAT_ATTACHMENT_MAX_TOTAL_BYTES"));
    }

    #[test]
    fn unknown_harness_and_auth_mode_are_refused() {
        let e = parse(&[("harness", "copilot-sdk")]).unwrap_err();
        assert_eq!(e.variable, "HARNESS");
        assert!(e.problem.contains("remote"));
        assert_eq!(
            parse(&[("auth-mode", "cloud")]).unwrap_err().variable,
            "AUTH_MODE"
        );
    }

    #[test]
    fn rfc_77_host_login_fallback_needs_loopback() {
        let e = parse(&[("harness-auth", "auto"), ("server-host", "0.0.0.0")]).unwrap_err();
        assert_eq!(e.variable, "HARNESS_AUTH");
        assert!(parse(&[("harness-auth", "auto"), ("server-host", "127.0.0.1")]).is_ok());
        assert!(parse(&[("harness-auth", "direct"), ("server-host", "0.0.0.0")]).is_ok());
    }

    #[test]
    fn local_mode_needs_a_loopback_bind() {
        let e = parse(&[("auth-mode", "local"), ("server-host", "0.0.0.0")]).unwrap_err();
        assert_eq!(e.variable, "AUTH_MODE");
        assert!(parse(&[("auth-mode", "local")]).is_ok());
    }

    #[test]
    fn database_url_is_checked_and_never_echoed() {
        let e = parse(&[("database-url", "mysql://u:secret@h/db")]).unwrap_err();
        assert_eq!(e.variable, "DATABASE_URL");
        assert!(!e.to_string().contains("secret"));
        let c = parse(&[("database-url", "postgres://u:secret@db.example:5432/chopin")]).unwrap();
        assert!(!format!("{c:?}").contains("secret"));
        assert_eq!(c.database.describe(), "PostgreSQL at db.example:5432");
        let c = parse(&[("database-url", "sqlite:/tmp/x.db")]).unwrap();
        assert_eq!(c.database, Database::Sqlite("/tmp/x.db".into()));
    }
}
