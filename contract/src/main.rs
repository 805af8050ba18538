//! `chopin-contract --harness NAME`: run the contract suite against one adapter of the registry,
//! print a table of the checks, and exit 0 when all pass, 1 when any fails, 2 for a name the
//! registry does not know (or the suite cannot script yet).

use std::process::ExitCode;

use clap::Parser;

/// Run the harness contract suite against one adapter.
#[derive(Debug, Parser)]
#[command(name = "chopin-contract", version, about)]
struct Args {
    /// The adapter's `HARNESS` name.
    #[arg(long, value_name = "NAME")]
    harness: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = chopin_contract::supported(&args.harness) {
        eprintln!("chopin-contract: {e}");
        return ExitCode::from(2);
    }
    let factory = chopin_contract::Named(args.harness.clone());
    let report = chopin_contract::run(&factory).await;
    println!("harness: {}", args.harness);
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
