//! `chopin-sim`: plays scenario files against the real server in the simulator.
//!
//! `run FILE… [--seed N]` prints each file's timeline and verdict; `check` plays every file of
//! the scenarios directory twice and holds it to the same trace and to its snapshot.

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
    }
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
    let first = play(&file, None);
    if !report(path, &file, &first) {
        return false;
    }
    let second = play(&file, None);
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
