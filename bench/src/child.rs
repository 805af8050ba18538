//! The server processes the bench measures: spawning one with an empty environment, reading
//! the address it prints, reading its resident set from `/proc`, and stopping it.
//!
//! Owns: the child's whole life. It is asked to stop with SIGTERM and killed if it has not
//! exited within [`STOP_GRACE`]; dropping a [`Spawned`] that was not stopped (an error path)
//! does the same, and on Linux the child is also sent SIGTERM by the kernel if the bench
//! itself dies (`PR_SET_PDEATHSIG`), so no server outlives a run. Does not own: what the
//! server is asked (the callers connect to [`Spawned::host`]).

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// How long a child has to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a child has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// How long a drop (an error path) waits after SIGTERM before it kills.
const DROP_GRACE: Duration = Duration::from_secs(3);

/// A running server process.
pub struct Spawned {
    label: &'static str,
    child: Child,
    pid: u32,
    /// `http://127.0.0.1:PORT`, as the child printed it.
    pub base_url: String,
    /// The whole line the child printed when it started listening.
    pub banner: String,
    log: Arc<Mutex<Vec<String>>>,
    stopped: bool,
}

/// How a stop went.
pub struct Stopped {
    pub status: ExitStatus,
    pub took: Duration,
    /// It did not exit within the grace after SIGTERM and was killed.
    pub killed: bool,
}

impl Spawned {
    /// Starts `program` with only `PATH` and `env` in its environment, and waits for a stdout
    /// line starting with `prefix` followed by its URL (`chopin listening on http://…`).
    pub async fn start(
        label: &'static str,
        program: &Path,
        args: &[&str],
        env: &[(&str, String)],
        prefix: &str,
    ) -> Result<Spawned> {
        let mut cmd = Command::new(program);
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.envs(env.iter().map(|(k, v)| (*k, v)))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches nothing of the parent's state.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start the {label} server {}", program.display()))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("the {label} server exited at once"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(collect(stderr, log.clone()));
        }
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("the {label} server's stdout was not piped"))?;
        let mut spawned = Spawned {
            label,
            child,
            pid,
            base_url: String::new(),
            banner: String::new(),
            log,
            stopped: false,
        };
        let mut lines = BufReader::new(stdout).lines();
        let wait = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix(prefix) {
                    let url = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    return Some((url, line));
                }
            }
            None
        };
        let found = tokio::time::timeout(START_TIMEOUT, wait).await;
        match found {
            Ok(Some((url, banner))) if url.starts_with("http://") => {
                // Keep draining stdout so the child never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                spawned.base_url = url;
                spawned.banner = banner;
                Ok(spawned)
            }
            other => {
                let why = match other {
                    Ok(Some((_, banner))) => {
                        format!("it printed an address that is not http://…: {banner}")
                    }
                    Ok(None) => "it exited".to_owned(),
                    Err(_) => format!("nothing within {} s", START_TIMEOUT.as_secs()),
                };
                // Give the stderr reader a moment to catch the last words.
                tokio::time::sleep(Duration::from_millis(200)).await;
                bail!(
                    "the {label} server did not report where it listens ({why}); its log ends:\n{}",
                    spawned.log_tail(30)
                )
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> &str {
        self.base_url.trim_start_matches("http://")
    }

    /// `VmRSS` from `/proc/<pid>/status`, in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).with_context(|| {
            format!("cannot read {path} (has the {} server exited?)", self.label)
        })?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("no VmRSS line in {path}"))
    }

    /// Every line the child wrote to stderr so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The last `n` stderr lines, one string.
    pub fn log_tail(&self, n: usize) -> String {
        let lines = self.log_lines();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether the child is still running (a crash shows here).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL at once (a crash), and waits for it to be gone.
    pub async fn kill(&mut self) -> Result<()> {
        self.stopped = true;
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// SIGTERM, then up to [`STOP_GRACE`] for it to exit, then SIGKILL.
    pub async fn stop(mut self) -> Result<Stopped> {
        self.stopped = true;
        let started = Instant::now();
        terminate(self.pid);
        let (status, killed) = match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => (status?, false),
            Err(_) => {
                self.child.start_kill()?;
                (self.child.wait().await?, true)
            }
        };
        Ok(Stopped {
            status,
            took: started.elapsed(),
            killed,
        })
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.stopped || self.exited().is_some() {
            return;
        }
        terminate(self.pid);
        let deadline = Instant::now() + DROP_GRACE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.start_kill();
        let _ = self.exited();
    }
}

fn terminate(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) on our own child's pid; the child is not yet reaped, so the pid
        // cannot have been reused.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

async fn collect(stream: impl AsyncRead + Unpin, into: Arc<Mutex<Vec<String>>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        into.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(strip_ansi(&line));
    }
}

/// The line without terminal colour sequences (`ESC [ … m`), so levels can be matched.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
