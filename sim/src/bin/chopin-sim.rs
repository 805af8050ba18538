//! `chopin-sim`: plays scenario files against the real server in the simulator.
//!
//! `run FILE… [--seed N]` prints each file's timeline and verdict; `check` plays every file of
//! the scenarios directory twice and holds it to the same trace and to its snapshot; `explore`
//! plays a file under random faults; `processes` explores three processes behind a router.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chopin_sim::scenario::{play, timeline, timeline_tail, ScenarioFile, Verdict};
use clap::{Parser, Subcommand};

/// Plays Chopin scenario files (TOML) against the real server on a simulated network.
///
/// A scenario is the standard cast (the server, mona (write) and lisa (admin) of
/// octo/plans signed in, hubot a reader, one document) and a list of steps: agent clients, browsers,
/// GitHub changes, network faults, server crashes and stops, time, and expectations on what the
/// server did and when, to the simulated millisecond. The same file and seed always give the
/// same trace. See docs/scenarios.md.
#[derive(Parser)]
#[command(name = "chopin-sim", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plays each FILE and prints its timeline (simulated ms, host, event) and verdict.
    Run {
        /// Scenario files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The seed to play with instead of the file's own.
        #[arg(long)]
        seed: Option<u64>,
        /// Print only the verdict (and the timeline around a failure).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Plays FILE under random fault schedules, one per seed, with the invariants checked after
    /// every step; the first schedule that breaks one is shrunk and written as a scenario file.
    Explore {
        /// The scenario to explore.
        file: PathBuf,
        /// How many seeds to try.
        #[arg(long, default_value_t = 200)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Fault classes, comma-separated: partitions, crashes, github-outage, revocations,
        /// latency, drops, hostile-updates, large-documents, silent-resume, provider (only in a
        /// file with `settings.harness = "provider"`).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "partitions,crashes,github-outage,revocations,latency,drops,hostile-updates,large-documents,silent-resume,provider"
        )]
        faults: Vec<String>,
        /// Stop after this much wall time (`90s`, `5m`), even with seeds left.
        #[arg(long, default_value = "60s")]
        budget: String,
        /// Where a shrunk failing scenario is written.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// A known bug to plant in the server first (`grace-hold-off`), to see it found.
        #[arg(long)]
        plant: Vec<String>,
    },
    /// Three processes on one store behind a hashing router (PROCESSES=many), under a fault
    /// schedule drawn from each seed: a process killed and started again, partitioned from the
    /// store, or with slow writes, and the router sending sockets to the wrong process. Every
    /// rule (one server by epoch, acks are kept, served again within the lease) is checked
    /// after every simulated millisecond; the first schedule that breaks one is shrunk to the
    /// faults it needs and printed.
    Processes {
        /// How many seeds to try.
        #[arg(long, default_value_t = 40)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// A known bug to plant first, to see it found: `epoch-check-off` (the store skips its
        /// epoch check on a fenced write).
        #[arg(long)]
        plant: Option<String>,
    },
    /// Plays every *.toml in DIR twice: fails if a file fails, if its two runs differ, or if
    /// its timeline differs from its snapshot (DIR/snapshots/NAME.snap).
    Check {
        /// The scenarios directory.
        #[arg(default_value = "scenarios")]
        dir: PathBuf,
        /// Write each snapshot from this run instead of comparing with it.
        #[arg(long)]
        bless: bool,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run { files, seed, quiet } => {
            let mut ok = true;
            for path in &files {
                let file = match ScenarioFile::read(path) {
                    Ok(f) => f,
                    Err(e) => {
                        eprintln!("error: {e}");
                        ok = false;
                        continue;
                    }
                };
                let verdict = play(&file, seed);
                if !quiet {
                    print!("{}", timeline(&verdict.trace));
                }
                ok &= report(path, &file, &verdict);
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Check { dir, bless } => check(&dir, bless),
        Command::Processes { seeds, from, plant } => processes(from, seeds, plant.as_deref()),
        Command::Explore {
            file,
            seeds,
            from,
            faults,
            budget,
            out,
            plant,
        } => explore(
            &file,
            from..from.saturating_add(seeds),
            &faults,
            &budget,
            &out,
            plant,
        ),
    }
}

/// `processes`: explores the three-process world seed by seed.
fn processes(from: u64, seeds: u64, plant: Option<&str>) -> ExitCode {
    use chopin_sim::processes::{listed, play, schedule, shrink};
    let planted = match plant {
        None => false,
        Some("epoch-check-off") => true,
        Some(other) => {
            eprintln!("error: unknown plant {other:?} (epoch-check-off)");
            return ExitCode::FAILURE;
        }
    };
    for seed in from..from.saturating_add(seeds) {
        let drawn = schedule(seed);
        match play(seed, &drawn, planted) {
            Ok(played) => println!(
                "PASS seed {seed}: {} tabs, {} lines acknowledged, the cast's document served by {:?}, {} of {} documents served again after their process was killed, {} writes fenced\n{}",
                played.tabs,
                played.acked,
                played.served_by,
                played.served_again,
                played.killed_serving,
                played.fenced,
                listed(&drawn)
            ),
            Err(broken) => {
                println!("FAIL seed {seed}: {broken}\n{}", listed(&drawn));
                let shrunk = shrink(seed, &drawn, planted, broken.rule);
                let again = play(seed, &shrunk, planted)
                    .err()
                    .map_or_else(|| broken.to_string(), |b| b.to_string());
                println!("shrunk to {} fault(s): {again}\n{}", shrunk.len(), listed(&shrunk));
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Prints the verdict of one run; on a failure the timeline around it and the replay command.
fn report(path: &Path, file: &ScenarioFile, verdict: &Verdict) -> bool {
    match &verdict.failure {
        None => {
            println!(
                "PASS {} — {} (seed {}, {} steps, {} ms simulated, trace {})",
                path.display(),
                file.name,
                verdict.seed,
                file.steps.len(),
                verdict.ended_ms,
                &verdict.trace.hash()[..16]
            );
            true
        }
        Some((step, why)) => {
            println!(
                "FAIL {} — {}\n  step {step} at {} ms (seed {}): {why}\n  the timeline up to it:",
                path.display(),
                file.name,
                verdict.ended_ms,
                verdict.seed
            );
            for line in timeline_tail(&verdict.trace, 15).lines() {
                println!("    {line}");
            }
            println!(
                "  replay: cargo run -q -p chopin-sim --bin chopin-sim -- run {} --seed {}",
                path.display(),
                verdict.seed
            );
            false
        }
    }
}

/// The stack of the thread playing a scenario's second run: as much as the main thread's.
const RUN_STACK_BYTES: usize = 8 << 20;

fn check(dir: &Path, bless: bool) -> ExitCode {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect(),
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    files.sort();
    if files.is_empty() {
        eprintln!("error: no scenario files (*.toml) in {}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut failed = 0;
    for path in &files {
        if !check_one(dir, path, bless) {
            failed += 1;
        }
    }
    println!("{} scenarios, {failed} failed", files.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn check_one(dir: &Path, path: &Path, bless: bool) -> bool {
    let file = match ScenarioFile::read(path) {
        Ok(f) => f,
        Err(e) => {
            println!("FAIL {e}");
            return false;
        }
    };
    // The two runs go side by side, one on a thread of its own: a run is one simulated world
    // with nothing shared, so they must still give the same trace.
    let (first, second) = std::thread::scope(|s| {
        let other = std::thread::Builder::new()
            .name("second run".to_owned())
            .stack_size(RUN_STACK_BYTES)
            .spawn_scoped(s, || play(&file, None))
            .expect("a thread for the second run");
        let first = play(&file, None);
        (first, other.join())
    });
    if !report(path, &file, &first) {
        return false;
    }
    let second = match second {
        Ok(v) => v,
        Err(_) => {
            println!("FAIL {}: the second run panicked", path.display());
            return false;
        }
    };
    if second.trace.hash() != first.trace.hash() {
        println!(
            "FAIL {}: a second run gave another trace ({} then {}); first difference:\n{}",
            path.display(),
            &first.trace.hash()[..16],
            &second.trace.hash()[..16],
            first_difference(&timeline(&first.trace), &timeline(&second.trace))
        );
        return false;
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let snapshot = dir.join("snapshots").join(format!("{stem}.snap"));
    let now = timeline(&first.trace);
    if bless {
        let written = chopin_sim::scenario::snapshot_file(&now);
        if let Err(e) = std::fs::create_dir_all(dir.join("snapshots"))
            .and_then(|()| std::fs::write(&snapshot, written))
        {
            println!("FAIL {}: {e}", snapshot.display());
            return false;
        }
        return true;
    }
    match std::fs::read_to_string(&snapshot) {
        Ok(text) => {
            let kept = chopin_sim::scenario::snapshot_body(&text);
            if kept.trim_end() != now.trim_end() {
                println!(
                    "FAIL {}: the timeline differs from {} (review it, then `chopin-sim check --bless`); first difference:\n{}",
                    path.display(),
                    snapshot.display(),
                    first_difference(kept, &now)
                );
                return false;
            }
            true
        }
        Err(_) => {
            println!(
                "FAIL {}: no snapshot {} (write it with `chopin-sim check --bless`)",
                path.display(),
                snapshot.display()
            );
            false
        }
    }
}

/// The first line where `a` and `b` differ, with both versions.
fn first_difference(a: &str, b: &str) -> String {
    let (mut la, mut lb) = (a.lines(), b.lines());
    let mut n = 1;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            (None, None) => return "  (none)".to_owned(),
            (x, y) => {
                return format!(
                    "  line {n}\n  - {}\n  + {}",
                    x.unwrap_or("(end)"),
                    y.unwrap_or("(end)")
                )
            }
        }
    }
}

fn budget(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (n, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = n.parse().map_err(|_| {
        format!("--budget {text:?}: a number of seconds or minutes, like 90s or 5m")
    })?;
    match unit {
        "" | "s" => Ok(std::time::Duration::from_secs(n)),
        "m" => Ok(std::time::Duration::from_secs(n * 60)),
        _ => Err(format!(
            "--budget {text:?}: a number of seconds or minutes, like 90s or 5m"
        )),
    }
}

fn explore(
    path: &Path,
    seeds: std::ops::Range<u64>,
    faults: &[String],
    budget_text: &str,
    out: &Path,
    plant: Vec<String>,
) -> ExitCode {
    use chopin_sim::explore::{explore, FaultClass};
    let classes: Result<Vec<FaultClass>, String> =
        faults.iter().map(|f| FaultClass::parse(f)).collect();
    let (classes, budget, file) = match (classes, budget(budget_text), ScenarioFile::read(path)) {
        (Ok(c), Ok(b), Ok(f)) => (c, b, f),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let file = ScenarioFile {
        plant: [file.plant.clone(), plant].concat(),
        ..file
    };
    let explored = explore(&file, seeds, &classes, budget);
    let per_minute = explored.seeds_run as f64 / explored.elapsed.as_secs_f64().max(0.001) * 60.0;
    let Some(found) = explored.found else {
        println!(
            "explored {} seeds of {} in {:.1} s ({per_minute:.0} seeds a minute): every invariant held",
            explored.seeds_run,
            path.display(),
            explored.elapsed.as_secs_f64()
        );
        return ExitCode::SUCCESS;
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let written = out.join(format!("{stem}-explored-seed-{}.toml", found.seed));
    let why = found
        .verdict
        .failure
        .as_ref()
        .map(|(step, why)| format!("step {step}: {why}"))
        .unwrap_or_else(|| "(the shrunk schedule no longer breaks it)".to_owned());
    println!(
        "FOUND after {} seeds ({:.1} s): seed {} breaks an invariant\n  {why}\n  schedule: {} faults, shrunk to {}",
        explored.seeds_run,
        explored.elapsed.as_secs_f64(),
        found.seed,
        found.faults.len(),
        found.shrunk.len()
    );
    println!("  the timeline up to it:");
    for line in timeline_tail(&found.verdict.trace, 15).lines() {
        println!("    {line}");
    }
    match std::fs::write(&written, found.scenario.to_toml()) {
        Ok(()) => println!(
            "  wrote {}\n  replay: cargo run -q -p chopin-sim --bin chopin-sim -- run {} --seed {}",
            written.display(),
            written.display(),
            found.seed
        ),
        Err(e) => println!("  could not write {}: {e}", written.display()),
    }
    ExitCode::FAILURE
}
