//! `borges`: starts the broker (`borges broker`) and administers, produces to and consumes from
//! a cluster. Errors are one line on standard error and exit code 1 (2 for bad arguments).

mod args;
mod commands;
mod format;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // The broker runs its own thread-per-core executors: no tokio runtime here.
        Command::Broker(args) => borges_broker::cli::run(args).map_err(anyhow::Error::from),
        command => run_client_command(&cli.bootstrap, command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {text}");
            ExitCode::FAILURE
        }
    }
}

fn run_client_command(bootstrap: &str, command: Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(commands::run(bootstrap, command))
}
