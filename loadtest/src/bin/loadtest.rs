//! `sluice-loadtest`: reproduces a drop (or a steady load, backend services, a waiting room) on a local
//! stack and reports it as an operator's capacity review would. Exits non-zero when an
//! invariant does not hold; targets are reported, met or not.

use std::process::ExitCode;

use clap::Parser;
use sluice_loadtest::scenario::{self, Options};

#[derive(Debug, Parser)]
#[command(
    name = "sluice-loadtest",
    about = "Load a local Sluice stack with a drop, a steady load, backend services or a waiting \
             room, verify the invariants from PostgreSQL and write a JSON and HTML report"
)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let interrupt = cli.options.interrupt.clone();
    tokio::spawn({
        let interrupt = interrupt.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("sluice-loadtest: stopping the stack and dropping the scratch database");
                interrupt.cancel();
            }
        }
    });
    match scenario::run(cli.options).await {
        Ok(written) => {
            println!("{}", sluice_loadtest::summary::text(&written.report));
            println!("report: {}", written.html.display());
            println!("json:   {}", written.json.display());
            if written.report.invariants_hold {
                ExitCode::SUCCESS
            } else {
                eprintln!("an invariant does not hold: see the report");
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("sluice-loadtest: {e}");
            if interrupt.is_cancelled() {
                // The shell's convention for a run ended by SIGINT.
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
