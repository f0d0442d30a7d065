//! `borges`: starts the broker (`borges broker`) and administers, produces to and consumes from
//! a cluster. Errors are one line on standard error and exit code 1; usage errors exit 2; a
//! closed output pipe (`borges ... | head`) ends a command normally (exit 0).

mod acl;
mod args;
mod cluster_cmd;
mod commands;
mod consume;
mod format;
mod group;
mod output;
mod produce;
mod topic;
mod user;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::args::{Cli, Command};
use crate::commands::{is_broken_pipe, UsageError};
use crate::output::Ui;

/// Exit status of a usage error (as clap's own).
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    // `borges user` edits a credentials file unless --bootstrap is on the command line.
    let bootstrap_given = matches.value_source("bootstrap") == Some(ValueSource::CommandLine);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The broker's errors may span lines (a config file error as toml renders it).
    let multiline = matches!(cli.command, Command::Broker(_));
    let result = match cli.command {
        // The broker runs its own thread-per-core executors and logging: no tokio runtime here.
        Command::Broker(mut args) => {
            args.tls_cert = cli.tls_cert.clone();
            args.tls_key = cli.tls_key.clone();
            args.tls_ca = cli.tls_ca.clone();
            borges_broker::cli::run(args).map_err(anyhow::Error::from)
        }
        // Local files and the blocking controller-link client: no tokio runtime either.
        Command::Storage(c) => cluster_cmd::run_storage(c),
        Command::User(c) if !bootstrap_given => user::run(c),
        Command::Cluster(c) => commands::ClientTls {
            ca: cli.tls_ca.clone(),
            cert: cli.tls_cert.clone(),
            key: cli.tls_key.clone(),
        }
        .rustls()
        .and_then(|tls| cluster_cmd::run_cluster(c, tls)),
        command => {
            let ui = Ui::detect(cli.quiet);
            output::install_logging(cli.log_verbosity, &ui);
            let tls = commands::ClientTls {
                ca: cli.tls_ca.clone(),
                cert: cli.tls_cert.clone(),
                key: cli.tls_key.clone(),
            };
            let sasl = commands::ClientSasl {
                mechanism: cli.sasl_mechanism.clone(),
                username: cli.sasl_username.clone(),
                password_file: cli.sasl_password_file.clone(),
            };
            run_client_command(&cli.bootstrap, tls, sasl, ui, command)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let text = format!("{e:#}");
            let text = if multiline {
                text
            } else {
                text.replace('\n', " ")
            };
            // Standard error may be closed too; nothing more to say then.
            let _ = writeln_stderr(&format!("error: {text}"));
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn writeln_stderr(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stderr().lock(), "{line}")
}

fn run_client_command(
    bootstrap: &str,
    tls: commands::ClientTls,
    sasl: commands::ClientSasl,
    ui: Ui,
    command: Command,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(commands::run(bootstrap, tls, sasl, ui, command))
}
