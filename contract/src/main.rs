//! `chopin-contract --harness NAME`: run the contract suite against one adapter of the registry,
//! print a table of the checks (or JSON), optionally write a JUnit XML report, and exit 0 when
//! all pass, 1 when any fails, 2 for a name the registry does not know (or the suite cannot
//! script yet) or a report it cannot write.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Run the harness contract suite against one adapter of the server's harness map.
///
/// Every check runs on a fresh adapter. `fake` runs in memory; `remote` starts the real server
/// in this process with a fake GitHub and attaches a scripted Planner client; `provider` serves
/// a fake model provider on loopback TCP and points the adapter at it (no network, no real
/// key). Run it on every bump of an adapter's library: a failing check names the rule and what
/// was seen instead.
#[derive(Debug, Parser)]
#[command(name = "chopin-contract", version, about, long_about)]
struct Args {
    /// The adapter's `HARNESS` name (fake, provider, remote).
    #[arg(long, value_name = "NAME")]
    harness: String,

    /// For `provider`: the provider wire the fake speaks, `openai` (default) or `anthropic`.
    #[arg(long, value_name = "WIRE")]
    wire: Option<String>,

    /// A report to produce, more than once if needed: `table` (the default, on stdout), `json`
    /// (on stdout instead of the table), or `junit=PATH` (JUnit XML written to PATH, besides
    /// what goes to stdout).
    #[arg(long, value_name = "FORMAT")]
    report: Vec<String>,
}

enum Output {
    Table,
    Json,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = chopin_contract::supported(&args.harness) {
        eprintln!("chopin-contract: {e}");
        return ExitCode::from(2);
    }
    let mut output = Output::Table;
    let mut junit: Vec<PathBuf> = Vec::new();
    for report in &args.report {
        match report.as_str() {
            "table" => output = Output::Table,
            "json" => output = Output::Json,
            other => {
                match other.strip_prefix("junit=") {
                    Some(path) if !path.is_empty() => junit.push(PathBuf::from(path)),
                    _ => {
                        eprintln!("chopin-contract: --report takes table, json or junit=PATH, not {other:?}");
                        return ExitCode::from(2);
                    }
                }
            }
        }
    }
    let mut factory = chopin_contract::Named::new(&args.harness);
    match (&args.wire, args.harness.as_str()) {
        (None, _) => {}
        (Some(wire), "provider") if chopin_contract::provider::family(wire).is_some() => {
            factory = factory.wire(wire);
        }
        (Some(wire), "provider") => {
            eprintln!("chopin-contract: --wire takes openai or anthropic, not {wire:?}");
            return ExitCode::from(2);
        }
        (Some(_), other) => {
            eprintln!("chopin-contract: --wire is for the provider harness, not {other}");
            return ExitCode::from(2);
        }
    }
    let report = chopin_contract::run(&factory).await;
    let name = match &args.wire {
        Some(wire) => format!("{} ({wire})", args.harness),
        None => args.harness.clone(),
    };
    match output {
        Output::Table => {
            println!("harness: {name}");
            println!("{report}");
        }
        Output::Json => println!("{}", chopin_contract::report::json(&name, &report)),
    }
    for path in &junit {
        let written = chopin_contract::report::junit(&name, &report)
            .and_then(|xml| std::fs::write(path, xml));
        if let Err(e) = written {
            eprintln!("chopin-contract: could not write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
