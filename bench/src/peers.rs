//! `chopin-bench-sockets peers`: chopin beside the Yjs servers people pick instead — Hocuspocus 4
//! with its SQLite extension (default debounce and debounce 0) and y-websocket's reference server
//! (in memory and with LevelDB) — under the same client workload, in one run. The peers and the
//! official clients are npm packages pinned in `bench/peers/package-lock.json`, installed here
//! with `npm ci` the way the e2e suite installs `yjs`; `bench/peers/peers.mjs` runs the workload
//! and prints the table. This side starts chopin (embedded SQLite, signed in through a fake
//! GitHub) and hands the script its address, cookie and documents.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::chopin::Fixture;

/// Documents the idle connections (memory per connection) are spread over.
const IDLE_DOCUMENTS: usize = 100;

/// Where the peers' script and its packages live.
fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// Installs the pinned packages unless they are there already.
async fn install(folder: &Path) -> Result<()> {
    if folder.join("node_modules/@hocuspocus/server").exists()
        && folder.join("node_modules/@y/websocket-server").exists()
    {
        return Ok(());
    }
    println!(
        "installing the peers from npm (npm ci in {})…",
        folder.display()
    );
    let status = tokio::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(folder)
        .status()
        .await
        .context("running npm (Node.js 20 or later is needed for this bench)")?;
    if !status.success() {
        bail!("npm ci in {} failed: {status}", folder.display());
    }
    Ok(())
}

pub async fn run(bin: &Path) -> Result<()> {
    let folder = folder();
    install(&folder).await?;
    // A fixed session key, so that the browser sign-in still opens after the kill and restart.
    let mut fixture =
        Fixture::start_with(bin, &[("SESSION_ENCRYPTION_KEY", "7e".repeat(32))]).await?;
    let documents = fixture.create_documents(4 + IDLE_DOCUMENTS).await?;
    let config = json!({
        "chopin": {
            "url": format!("ws://{}/api/yjs", fixture.server.host()),
            "cookie": fixture.cookie,
            "origin": fixture.origin,
            "documents": documents,
            "pid": fixture.server.pid(),
        },
        "idleDocuments": IDLE_DOCUMENTS,
        "updates": 2000,
        "listeners": 10,
    });
    let mut node = tokio::process::Command::new("node")
        .arg(folder.join("peers.mjs"))
        .arg(config.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| anyhow!("running node: {e}"))?;
    let mut asks = node.stdin.take().context("node's stdin")?;
    let mut lines = BufReader::new(node.stdout.take().context("node's stdout")?).lines();
    // The script prints its table, and asks on a line of its own for chopin to be killed and
    // started again (its durability row): answered with chopin's new address.
    while let Some(line) = lines.next_line().await? {
        if line.trim() != r#"{"kill":"chopin"}"# {
            println!("{line}");
            continue;
        }
        fixture.crash_and_restart().await?;
        let answer = json!({
            "url": format!("ws://{}/api/yjs", fixture.server.host()),
            "origin": fixture.origin,
        });
        asks.write_all(format!("{answer}\n").as_bytes()).await?;
        asks.flush().await?;
    }
    let status = node.wait().await?;
    if !status.success() {
        bail!(
            "the peers' workload failed ({status}); chopin's log ends:\n{}",
            fixture.server.log_tail(15)
        );
    }
    let stopped = fixture.server.stop().await?;
    if stopped.killed {
        bail!("the server did not stop on SIGTERM");
    }
    Ok(())
}
