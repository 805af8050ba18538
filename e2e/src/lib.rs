//! Support for the end-to-end suite: spawning the real `chopin` binary and talking to it over
//! real sockets.
//!
//! Owns: finding the binary, starting it with a chosen environment, reading the address it
//! prints, and stopping it (SIGTERM, then kill). Does not own: any server behaviour.

pub mod browser;

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// The `chopin` binary: `CHOPIN_BIN`, else the one cargo built beside this test executable.
pub fn chopin_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CHOPIN_BIN") {
        return PathBuf::from(p);
    }
    let bin = profile_dir().join(format!("chopin{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p chopin-server --bin chopin` (scripts/test does)",
        bin.display()
    );
    bin
}

/// The folder of the profile this test executable was built in: target/<profile>/deps/<test>
/// → target/<profile>.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// The release `chopin`: `CHOPIN_RELEASE_BIN`, else `release/chopin` in the target folder of
/// this test executable. That one is built first, once per test process, with the command
/// `scripts/test` runs (`cargo build --release --locked -p chopin-server --bin chopin`, which
/// does nothing when it is fresh), so a suite never runs a release binary older than the code.
pub fn chopin_release_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CHOPIN_RELEASE_BIN") {
            return PathBuf::from(p);
        }
        let profile = profile_dir();
        let target = profile
            .parent()
            .expect("the profile folder lives in the target folder");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        eprintln!("building the release chopin (a moment when it is fresh)");
        let mut build = std::process::Command::new(cargo);
        // Without what the test runner sets for this test (CARGO_MANIFEST_DIR and the like):
        // build scripts that watch such a variable (ring's does) would otherwise build again
        // what `scripts/test` built a moment ago.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if TEST_RUN_VARIABLES.contains(&name.as_ref())
                || name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
            {
                build.env_remove(name.as_ref());
            }
        }
        let status = build
            .args(["build", "--release", "--locked", "-q"])
            .args(["-p", "chopin-server", "--bin", "chopin", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target)
            // scripts/test lints the debug build through clippy's driver; the release binary is
            // built as an operator builds it.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "`cargo build --release -p chopin-server --bin chopin` failed: {status}"
        );
        let bin = target
            .join("release")
            .join(format!("chopin{}", std::env::consts::EXE_SUFFIX));
        assert!(bin.exists(), "{} is missing after its build", bin.display());
        bin
    })
    .clone()
}

/// What cargo or the test runner sets for a test's process, on top of the developer's
/// environment (besides the `CARGO_PKG_*` and `CARGO_BIN_EXE_*` families).
const TEST_RUN_VARIABLES: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
];

/// The database a test's server runs on: embedded SQLite under its own home folder, or a
/// PostgreSQL database of its own.
pub enum Backend {
    Sqlite(tempfile::TempDir),
    Postgres(chopin_fixtures::pg::TestDatabase),
}

/// How to start one `chopin` process. The environment starts empty (plus `PATH`, and
/// `BACKGROUND_JOBS=off` unless the launch sets it), so nothing from the developer's shell leaks
/// in.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
    /// The binary to run: [`chopin_bin`] unless set (see [`Launch::release`]).
    pub bin: Option<PathBuf>,
}

impl Launch {
    /// Runs the release binary ([`chopin_release_bin`]) instead of the one built beside the
    /// tests.
    pub fn release(mut self) -> Self {
        self.bin = Some(chopin_release_bin());
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<String>) -> Self {
        self.env.push((k.to_string(), v.into()));
        self
    }
    /// A hosted server on a port the system picks (`PORT=0`; its origin is then the address it
    /// prints, see [`Server::origin`]) that signs people in through the GitHub (real or fake) at
    /// `github_url`, with the fake GitHub's default OAuth app. A restart that must keep the
    /// origin (sealed sign-ins are bound to it) pins it with [`Launch::at`].
    pub fn hosted(github_url: &str) -> Self {
        Launch::default()
            .env("PORT", "0")
            .env("GITHUB_API_URL", github_url)
            .env("GITHUB_WEB_URL", github_url)
            .env(
                "GITHUB_APP_CLIENT_ID",
                chopin_fixtures::github::DEFAULT_CLIENT_ID,
            )
            .env(
                "GITHUB_APP_CLIENT_SECRET",
                chopin_fixtures::github::DEFAULT_CLIENT_SECRET,
            )
    }

    /// The same launch on `backend`: SQLite in its home folder, or its PostgreSQL database
    /// (with a session key, which PostgreSQL needs).
    pub fn on(self, backend: &Backend) -> Self {
        match backend {
            Backend::Sqlite(home) => self.env("HOME", home.path().to_string_lossy()),
            Backend::Postgres(db) => self
                .env("DATABASE_URL", db.url.clone())
                .env("SESSION_ENCRYPTION_KEY", "7e".repeat(32)),
        }
    }

    /// The same launch on `server`'s port and origin: for a restart that must keep them.
    pub fn at(self, server: &Server) -> Self {
        let port = server
            .host()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.env("PORT", port).env("APP_ORIGIN", server.origin())
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(self.bin.clone().unwrap_or_else(chopin_bin));
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        // Background jobs would start worker sessions on whatever client a test attaches, and
        // use the fake provider's scripted replies: off unless a test turns them on.
        if !self.env.iter().any(|(k, _)| k == "BACKGROUND_JOBS") {
            cmd.env("BACKGROUND_JOBS", "off");
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.args(&self.args);
        cmd.kill_on_drop(true);
        cmd
    }

    /// Runs to completion (for refusals at startup): exit status, stdout, stderr.
    pub async fn run_to_exit(&self) -> (ExitStatus, String, String) {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command().output())
            .await
            .expect("chopin exited within 60 s")
            .expect("chopin ran");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts the server and waits for the line that says where it listens.
    pub async fn start(&self) -> Server {
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn chopin");
        let stdout = child.stdout.take().expect("stdout piped");
        let stderr = child.stderr.take().expect("stderr piped");
        let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        tokio::spawn(collect(stderr, logs.clone()));
        let mut lines = BufReader::new(stdout).lines();
        let wait = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("chopin listening on ") {
                    let url = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    return Some((url, line));
                }
            }
            None
        };
        match tokio::time::timeout(Duration::from_secs(60), wait).await {
            Ok(Some((base_url, banner))) => {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Server {
                    child,
                    base_url,
                    banner,
                    logs,
                }
            }
            other => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                panic!(
                    "chopin did not report where it listens ({}); its log:\n{}",
                    if other.is_ok() {
                        "it exited"
                    } else {
                        "timed out"
                    },
                    logs.lock().map(|l| l.clone()).unwrap_or_default()
                );
            }
        }
    }
}

async fn collect(stream: impl AsyncRead + Unpin, into: std::sync::Arc<std::sync::Mutex<String>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(mut l) = into.lock() {
            l.push_str(&line);
            l.push('\n');
        }
    }
}

/// A running `chopin` process. Killed if dropped without [`Server::stop`].
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base_url: String,
    /// The whole line it printed on stdout when it started listening.
    pub banner: String,
    logs: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// Its origin, `http://127.0.0.1:PORT` (what browsers send as `Origin`).
    pub fn origin(&self) -> String {
        self.base_url.clone()
    }

    /// `127.0.0.1:PORT`, to connect a socket to.
    pub fn host(&self) -> String {
        self.base_url
            .strip_prefix("http://")
            .unwrap_or(&self.base_url)
            .to_owned()
    }

    /// Creates a document titled `title` in `repository` (`owner/name`) with a writer's bearer
    /// `token`; returns the document object (its `id`, `url`, …).
    pub async fn create_document(
        &self,
        token: &str,
        repository: &str,
        title: &str,
    ) -> serde_json::Value {
        let response = reqwest::Client::new()
            .post(self.url(&format!("/api/repositories/{repository}/documents")))
            .bearer_auth(token)
            .json(&serde_json::json!({ "title": title }))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create a document: {e}"));
        assert_eq!(response.status(), 201, "create a document");
        response.json().await.expect("the document as JSON")
    }

    /// Everything it wrote to stderr so far.
    pub fn logs(&self) -> String {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// SIGTERM, then waits up to 30 s for it to exit. Returns its exit status and whole log.
    pub async fn stop(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().expect("running child has a pid");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed");
        let status = match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => status.expect("wait for chopin"),
            Err(_) => panic!(
                "chopin did not stop within 30 s of SIGTERM; log:\n{}",
                self.logs()
            ),
        };
        // Let the stderr reader drain what the process wrote last.
        tokio::time::sleep(Duration::from_millis(50)).await;
        (status, self.logs())
    }

    /// Kills the process at once (SIGKILL), as a crash would: nothing is flushed or released.
    pub async fn crash(mut self) -> String {
        self.child.start_kill().expect("kill chopin");
        let _ = self.child.wait().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.logs()
    }
}

/// Runs the Node script `script` of `e2e/yjs` (real Yjs clients) with `config` as its one
/// argument. Returns whether it succeeded (exit 0 and `"ok": true`) and the JSON line it printed
/// last.
pub async fn node_script(script: &str, config: &serde_json::Value) -> (bool, serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("yjs");
    assert!(
        dir.join("node_modules/yjs").exists(),
        "the Yjs clients' packages are missing: run `npm ci --prefix e2e/yjs` (scripts/test does)"
    );
    let out = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .arg(config.to_string())
        .current_dir(&dir)
        .output()
        .await
        .expect("node runs (scripts/test installs Node.js)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}\n{stderr}"));
    (out.status.success() && value["ok"] == true, value)
}

/// GET returning status and body text.
pub async fn get(url: &str) -> (u16, String) {
    let resp = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Signs `login` in through the server's GitHub OAuth web flow, with the fake GitHub approving
/// it as the browser's user. Returns the `Cookie` header value of the new session.
pub async fn sign_in(
    server: &Server,
    github: &chopin_fixtures::github::FakeGitHub,
    login: &str,
) -> String {
    sign_in_at(&server.base_url, github, login).await
}

/// [`sign_in`] through whatever answers at `base_url` (a balancer in front of servers).
pub async fn sign_in_at(
    base_url: &str,
    github: &chopin_fixtures::github::FakeGitHub,
    login: &str,
) -> String {
    let url = |path: &str| format!("{base_url}{path}");
    github.set_browser_user(login);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("http client");
    let location = |r: &reqwest::Response| {
        r.headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("a redirect, got {}", r.status()))
            .to_owned()
    };
    let cookie_named = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with(&format!("{name}=")))
            .map(|v| v.split(';').next().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("no {name} cookie"))
    };
    let start = http.get(url("/auth/github")).send().await.unwrap();
    assert_eq!(start.status(), 302);
    let attempt = cookie_named(&start, "chopin_oauth");
    let approve = http.get(location(&start)).send().await.unwrap();
    assert_eq!(approve.status(), 302, "the fake GitHub approves");
    let callback = location(&approve);
    let path = &callback[callback
        .find("/auth/github/callback")
        .expect("callback path")..];
    let done = http
        .get(url(path))
        .header("cookie", attempt)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 302, "signed in: {:?}", done.text().await);
    cookie_named(&done, "chopin_session")
}
