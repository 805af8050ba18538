//! `chopin-bench-sockets processes`: the cost of serving one PostgreSQL database from three
//! `chopin` processes (`PROCESSES=many`) against one process (the default), in the same run, on
//! the release binary.
//!
//! What it measures, and how:
//! - **CPU time per acknowledged write.** A fresh database and fake GitHub each time; `--documents`
//!   documents are made, and each gets one room socket that sends `--edits` Yjs updates and
//!   `--acks` Chat messages, interleaved, each Chat message waiting for its `chat:ack` (the
//!   socket's frames are handled in order, so the last ack also vouches for the edits before
//!   it). Every document's socket runs at once. The figure is the servers' CPU time (user +
//!   system, from `/proc/<pid>/stat`, summed over every process) during the load, over the
//!   writes (acks + edits). With three processes the client routes each document as a balancer
//!   hashing on its id would (the id's hash modulo three). The same figure is printed with
//!   PostgreSQL's CPU time added (every `postgres` process on this machine), since the leases'
//!   checks are the database's work.
//! - **Refused share.** Of the requests and sockets the client sent to the process its hash
//!   chose, how many were answered `503 served-elsewhere` (a balancer would send those on):
//!   goal none in the steady state.
//! - **Failover.** With three processes serving every document, `--kills` times: the process
//!   serving a document is killed (SIGKILL), and the document is asked for on the others every
//!   20 ms until one serves it; the time from the kill is the figure (p50, p99; goal p99 ≤ the
//!   lease period + 2 s). The killed process is started again before the next kill.
//!
//! Nothing here asserts a timing; it prints the figures, the ratio and the goals.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use chopin_fixtures::github::{FakeGitHub, Permission};
use serde_json::json;
use yrs::updates::encoder::Encode;
use yrs::{Text, Transact};

use crate::child::Spawned;
use crate::chopin::{ack, greeting, open_room};

const OWNER: &str = "octo";
const REPO: &str = "plans";
const LOGIN: &str = "mona";
/// The origin every process is given (`APP_ORIGIN`), as behind one balancer.
const ORIGIN: &str = "http://chopin.bench";
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, clap::Args)]
pub struct ProcessesArgs {
    /// Documents, each with one room socket.
    #[arg(long, default_value_t = 100)]
    documents: usize,
    /// Chat messages each socket sends, each waiting for its ack.
    #[arg(long, default_value_t = 50)]
    acks: usize,
    /// Yjs updates each socket sends, between its Chat messages.
    #[arg(long, default_value_t = 50)]
    edits: usize,
    /// Processes killed, one after another, for the failover figure.
    #[arg(long, default_value_t = 10)]
    kills: usize,
    /// `DOCUMENT_LEASE_MS` of the three processes (the setting's default).
    #[arg(long, default_value_t = 10000)]
    lease_ms: u64,
    /// The PostgreSQL server (`postgres://…`) fresh databases are made on. Default:
    /// `CHOPIN_TEST_POSTGRES_URL`'s server, else a throwaway cluster started for the run.
    #[arg(long, env = "CHOPIN_BENCH_POSTGRES_URL")]
    postgres_url: Option<String>,
}

/// Some processes on one fresh database, a fake GitHub and @mona signed in.
struct Cluster {
    processes: Vec<Spawned>,
    env: Vec<(&'static str, String)>,
    bin: PathBuf,
    _github: FakeGitHub,
    token: String,
    cookie: String,
    _data: tempfile::TempDir,
}

impl Cluster {
    async fn start(bin: &Path, count: usize, args: &ProcessesArgs) -> Result<Cluster> {
        let database = match &args.postgres_url {
            Some(url) => url.clone(),
            None => {
                chopin_fixtures::pg::shared_postgres()
                    .create_database()
                    .await
                    .map_err(|e| anyhow!("a fresh PostgreSQL database: {e}"))?
                    .url
            }
        };
        let github = FakeGitHub::new();
        github.add_user(LOGIN, 1001).add_repo(OWNER, REPO);
        github.grant(OWNER, REPO, LOGIN, Permission::Write);
        let token = github.issue_token(LOGIN);
        let github_url = github
            .serve_tcp()
            .await
            .context("the fake GitHub could not listen")?;
        let data = tempfile::tempdir().context("a temporary data folder")?;
        let data_dir = data.path().to_string_lossy().into_owned();
        let mut env = crate::chopin::server_env(&github_url, &data_dir);
        env.extend([
            ("DATABASE_URL", database),
            ("SESSION_ENCRYPTION_KEY", "5b".repeat(32)),
            ("APP_ORIGIN", ORIGIN.to_owned()),
            ("BACKGROUND_JOBS", "off".to_owned()),
        ]);
        if count > 1 {
            env.push(("PROCESSES", "many".to_owned()));
            env.push(("DOCUMENT_LEASE_MS", args.lease_ms.to_string()));
        }
        let mut processes = Vec::new();
        for _ in 0..count {
            processes.push(Spawned::start("chopin", bin, &[], &env, "chopin listening on ").await?);
        }
        let cookie = crate::chopin::sign_in(&processes[0].base_url, &github, LOGIN)
            .await
            .context("signing @mona in")?;
        Ok(Cluster {
            processes,
            env,
            bin: bin.to_path_buf(),
            _github: github,
            token,
            cookie,
            _data: data,
        })
    }

    /// The process a balancer hashing on the document id would choose.
    fn chosen(&self, document: &str) -> usize {
        // FNV-1a: stable across runs and processes.
        let hash = document.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        (hash % self.processes.len() as u64) as usize
    }

    /// User + system CPU time of every server process so far.
    fn cpu(&self) -> Result<Duration> {
        let mut total = Duration::ZERO;
        for p in &self.processes {
            total += cpu_of(p.pid())?.1;
        }
        Ok(total)
    }

    async fn create_documents(&self, count: usize) -> Result<Vec<String>> {
        let http = reqwest::Client::new();
        let mut ids = Vec::new();
        for n in 0..count {
            let base = &self.processes[n % self.processes.len()].base_url;
            let made = http
                .post(format!("{base}/api/repositories/{OWNER}/{REPO}/documents"))
                .bearer_auth(&self.token)
                .json(&json!({ "title": format!("Processes {n}") }))
                .send()
                .await?;
            if made.status().as_u16() != 201 {
                bail!("creating a document answered {}", made.status());
            }
            let made: serde_json::Value = made.json().await?;
            ids.push(
                made["id"]
                    .as_str()
                    .ok_or_else(|| anyhow!("no id"))?
                    .to_owned(),
            );
        }
        Ok(ids)
    }

    /// `GET /api/documents/{document}` on process `n`: its status.
    async fn ask(&self, n: usize, document: &str) -> Result<u16> {
        let response = reqwest::Client::new()
            .get(format!(
                "{}/api/documents/{document}",
                self.processes[n].base_url
            ))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(10))
            .send()
            .await?;
        Ok(response.status().as_u16())
    }

    async fn stop(self) {
        for p in self.processes {
            let _ = p.stop().await;
        }
    }
}

/// A process's command name and its user + system CPU time so far, from `/proc/<pid>/stat`.
fn cpu_of(pid: u32) -> Result<(String, Duration)> {
    let tick = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as u64,
        _ => 100,
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("/proc/{pid}/stat"))?;
    let open = stat.find('(').ok_or_else(|| anyhow!("odd stat line"))?;
    let close = stat.rfind(')').ok_or_else(|| anyhow!("odd stat line"))?;
    let name = stat[open + 1..close].to_owned();
    // utime and stime are the 14th and 15th fields of the line, the 12th and 13th after the
    // name's closing parenthesis.
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let ticks = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok((name, Duration::from_micros(ticks * 1_000_000 / tick)))
}

/// The CPU time of every PostgreSQL process on this machine so far (the database's side of
/// the writes; connections stay open through a load, so none exits with its time).
fn postgres_cpu() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| cpu_of(pid).ok())
        .filter(|(name, _)| name == "postgres")
        .map(|(_, cpu)| cpu)
        .sum()
}

/// One load's figures.
struct Load {
    writes: usize,
    cpu: Duration,
    /// PostgreSQL's CPU time during the load.
    database_cpu: Duration,
    elapsed: Duration,
    asked: usize,
    refused: usize,
}

/// The load on `cluster`: every document's socket at once.
async fn load(cluster: &Cluster, args: &ProcessesArgs) -> Result<Load> {
    let documents = cluster.create_documents(args.documents).await?;
    let mut asked = 0;
    let mut refused = 0;
    let mut sockets = Vec::new();
    for document in &documents {
        let chosen = cluster.chosen(document);
        asked += 1;
        match cluster.ask(chosen, document).await? {
            200 => {}
            503 => refused += 1,
            other => bail!("asking for a document answered {other}"),
        }
        asked += 1;
        let mut socket = open_room(
            cluster.processes[chosen].host(),
            document,
            &cluster.cookie,
            ORIGIN,
        )
        .await
        .map_err(|e| {
            refused += 1;
            anyhow!("a room socket {e}")
        })?;
        greeting(&mut socket)
            .await
            .map_err(|e| anyhow!("a room socket {e}"))?;
        sockets.push(socket);
    }
    let cpu_before = cluster.cpu()?;
    let database_before = postgres_cpu();
    let started = Instant::now();
    let (acks, edits) = (args.acks, args.edits);
    let loops = sockets
        .into_iter()
        .enumerate()
        .map(|(n, mut socket)| async move {
            let doc = yrs::Doc::new();
            let text = doc.get_or_insert_text("source");
            let per_ack = edits.div_ceil(acks.max(1));
            let mut sent_edits = 0;
            for i in 0..acks {
                for _ in 0..per_ack {
                    if sent_edits == edits {
                        break;
                    }
                    let update = {
                        let mut txn = doc.transact_mut();
                        let end = text.len(&txn);
                        text.insert(&mut txn, end, "x");
                        txn.encode_update_v1()
                    };
                    let frame = yrs::sync::Message::Sync(yrs::sync::SyncMessage::Update(update))
                        .encode_v1();
                    socket
                        .send_binary(frame)
                        .await
                        .map_err(|e| anyhow!("socket {n}: an edit could not be sent: {e}"))?;
                    sent_edits += 1;
                }
                // A process takes 20 sends at once (MSG-20): one refused for that is sent again.
                for attempt in 0.. {
                    let request_id = format!("processes-{n}-{i}-{attempt}");
                    socket
                        .send_json(&json!({
                            "type": "chat:send",
                            "requestId": request_id,
                            "text": format!("processes message {n}-{i}"),
                        }))
                        .await
                        .map_err(|e| anyhow!("socket {n}: chat:send {i} could not be sent: {e}"))?;
                    match tokio::time::timeout(ACK_TIMEOUT, ack(&mut socket, &request_id))
                        .await
                        .map_err(|_| anyhow!("socket {n}: chat:send {i} got no answer in time"))?
                    {
                        Ok(()) => break,
                        Err(e) if e.contains("temporarily-unavailable") => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Err(e) => bail!("socket {n}: chat:send {i} {e}"),
                    }
                }
            }
            let _ = socket.close().await;
            Ok::<_, anyhow::Error>(acks + sent_edits)
        });
    let mut writes = 0;
    for done in futures::future::join_all(loops).await {
        writes += done?;
    }
    let elapsed = started.elapsed();
    let cpu = cluster.cpu()? - cpu_before;
    let database_cpu = postgres_cpu().saturating_sub(database_before);
    Ok(Load {
        writes,
        cpu,
        database_cpu,
        elapsed,
        asked,
        refused,
    })
}

/// `--kills` failovers on a three-process cluster whose documents are all served: the time
/// from each kill until another process serves the killed one's document.
async fn failovers(cluster: &mut Cluster, args: &ProcessesArgs) -> Result<Vec<Duration>> {
    let documents = cluster.create_documents(args.kills).await?;
    let mut took = Vec::new();
    for document in &documents {
        let chosen = cluster.chosen(document);
        if cluster.ask(chosen, document).await? != 200 {
            bail!("the chosen process did not serve a new document");
        }
        let mut dead = cluster.processes.remove(chosen);
        dead.kill().await?;
        let killed = Instant::now();
        'served: loop {
            for n in 0..cluster.processes.len() {
                if cluster.ask(n, document).await? == 200 {
                    break 'served;
                }
            }
            if killed.elapsed() > Duration::from_millis(args.lease_ms) * 4 {
                bail!("a document was not served again within four lease periods of a kill");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(killed.elapsed());
        let again = Spawned::start(
            "chopin",
            &cluster.bin,
            &[],
            &cluster.env,
            "chopin listening on ",
        )
        .await?;
        cluster.processes.insert(chosen, again);
    }
    Ok(took)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

pub async fn run(bin: &Path, args: ProcessesArgs) -> Result<()> {
    println!(
        "chopin-bench-sockets processes: {} documents, {} acks and {} edits each, {} kills, \
         lease {} ms; {} cores",
        args.documents,
        args.acks,
        args.edits,
        args.kills,
        args.lease_ms,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let one = Cluster::start(bin, 1, &args).await?;
    let single = load(&one, &args).await?;
    one.stop().await;
    let mut three = Cluster::start(bin, 3, &args).await?;
    let many = load(&three, &args).await?;
    let killed = failovers(&mut three, &args).await?;
    three.stop().await;

    let per = |l: &Load| l.cpu.as_secs_f64() * 1e6 / l.writes as f64;
    let with_database = |l: &Load| (l.cpu + l.database_cpu).as_secs_f64() * 1e6 / l.writes as f64;
    for (name, l) in [("1 process  ", &single), ("3 processes", &many)] {
        println!(
            "  {name}: {} writes in {:.2} s ({:.0}/s); CPU: servers {:.2} s, PostgreSQL {:.2} s; \
             per write {:.0} µs (servers), {:.0} µs (with PostgreSQL); {} of {} requests refused",
            l.writes,
            l.elapsed.as_secs_f64(),
            l.writes as f64 / l.elapsed.as_secs_f64(),
            l.cpu.as_secs_f64(),
            l.database_cpu.as_secs_f64(),
            per(l),
            with_database(l),
            l.refused,
            l.asked
        );
    }
    let mut sorted = killed.clone();
    sorted.sort();
    let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
    println!(
        "  failover after kill -9: {}",
        killed
            .iter()
            .map(|d| format!("{:.2}s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!("| figure | value | goal |");
    println!("|---|---|---|");
    println!(
        "| CPU per acknowledged write, 3 processes / 1: servers | {:.2} | ≤ 1.2 |",
        per(&many) / per(&single)
    );
    println!(
        "| CPU per acknowledged write, 3 processes / 1: servers + PostgreSQL | {:.2} | ≤ 1.2 |",
        with_database(&many) / with_database(&single)
    );
    println!(
        "| requests refused behind the hashing router (3 processes) | {:.1} % | 0 |",
        many.refused as f64 * 100.0 / many.asked.max(1) as f64
    );
    println!(
        "| failover p50 / p99 over {} kills | {:.2} s / {:.2} s | p99 ≤ {:.1} s |",
        killed.len(),
        p50.as_secs_f64(),
        p99.as_secs_f64(),
        (args.lease_ms + 2_000) as f64 / 1_000.0
    );
    Ok(())
}
