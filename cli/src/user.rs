//! `borges user create|delete|list`: the SCRAM credentials of a single broker, in its
//! credentials file (salted and hashed; docs/operations.md "SASL"). The broker re-reads the
//! file within a second of a change.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use borges_broker::config::SASL_CREDENTIALS_FILE_NAME;
use borges_broker::sasl::file::{self, UserCredential};
use borges_protocol::scram::{Credential, Mechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use clap::{Args, Subcommand};

use crate::commands::usage;

const EXAMPLES: &str = "Examples:
  printf '%s\\n' \"$PASSWORD\" | borges user create alice --mechanism SCRAM-SHA-256 --password-stdin
  borges user list
  borges user delete alice

The credentials file is DATA_DIR/sasl-credentials.toml (--data-dir, default ./borges-data), or
--credentials-file FILE: the broker's sasl.credentials_file. A running broker re-reads it
within a second.";

/// Where the credentials file is.
#[derive(Debug, Clone, Args)]
pub struct FileArgs {
    /// The broker's data directory (the file is DIR/sasl-credentials.toml).
    #[arg(long, value_name = "DIR", default_value = "./borges-data")]
    pub data_dir: PathBuf,
    /// The credentials file itself (the broker's `sasl.credentials_file`).
    #[arg(long, value_name = "FILE")]
    pub credentials_file: Option<PathBuf>,
}

impl FileArgs {
    fn path(&self) -> PathBuf {
        match &self.credentials_file {
            Some(p) => p.clone(),
            None => self.data_dir.join(SASL_CREDENTIALS_FILE_NAME),
        }
    }
}

/// `borges user ...`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user's SCRAM credential (or replace it: a new password).
    #[command(after_help = EXAMPLES)]
    Create {
        /// The username (1..=255 bytes).
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, value_name = "MECHANISM", default_value = "SCRAM-SHA-256")]
        mechanism: String,
        /// Read the password from the first line of standard input (required: passwords do
        /// not go on command lines).
        #[arg(long, required = true)]
        password_stdin: bool,
        /// PBKDF2 iterations (4096..=16384).
        #[arg(long, default_value_t = ITERATIONS_MIN)]
        iterations: u32,
        #[command(flatten)]
        file: FileArgs,
    },
    /// Delete a user's credentials (of one mechanism, or all).
    #[command(after_help = EXAMPLES)]
    Delete {
        /// The username.
        name: String,
        /// Only this mechanism's credential.
        #[arg(long, value_name = "MECHANISM")]
        mechanism: Option<String>,
        #[command(flatten)]
        file: FileArgs,
    },
    /// List the users and their mechanisms (as `kafka-configs.sh --describe --entity-type
    /// users`).
    #[command(after_help = EXAMPLES)]
    List {
        #[command(flatten)]
        file: FileArgs,
    },
}

fn mechanism(name: &str) -> anyhow::Result<Mechanism> {
    match Mechanism::from_name(name) {
        Some(m) => Ok(m),
        None => usage!("unknown mechanism {name:?}: SCRAM-SHA-256 or SCRAM-SHA-512"),
    }
}

/// Runs `borges user ...`.
pub fn run(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Create {
            name,
            mechanism: m,
            password_stdin: _,
            iterations,
            file,
        } => create(&name, mechanism(&m)?, iterations, &file.path()),
        UserCommand::Delete {
            name,
            mechanism: m,
            file,
        } => {
            let m = m.as_deref().map(mechanism).transpose()?;
            delete(&name, m, &file.path())
        }
        UserCommand::List { file } => list(&file.path()),
    }
}

fn create(name: &str, m: Mechanism, iterations: u32, path: &Path) -> anyhow::Result<()> {
    if let Err(e) = borges_broker::sasl::check_username(name) {
        usage!("{e}");
    }
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        usage!("--iterations must be {ITERATIONS_MIN}..={ITERATIONS_MAX}");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        usage!("--password-stdin: standard input has no password");
    }
    let credential = Credential::generate(m, password.as_bytes(), iterations)?;
    let mut users = file::read(path)?;
    let user = UserCredential {
        name: name.to_string(),
        credential,
    };
    file::upsert(&mut users, user);
    file::write(path, &users)?;
    println!(
        "Completed updating {m} credential of user '{name}' in {}.",
        path.display()
    );
    Ok(())
}

fn delete(name: &str, m: Option<Mechanism>, path: &Path) -> anyhow::Result<()> {
    let mut users = file::read(path)?;
    if file::remove(&mut users, name, m) == 0 {
        anyhow::bail!("no credential of user '{name}' in {}", path.display());
    }
    file::write(path, &users)?;
    println!(
        "Completed deleting credentials of user '{name}' in {}.",
        path.display()
    );
    Ok(())
}

/// One line per user, as `kafka-configs.sh --describe --entity-type users`.
fn list(path: &Path) -> anyhow::Result<()> {
    let mut users = file::read(path)?;
    users.sort_by(|a, b| a.name.cmp(&b.name));
    let mut i = 0;
    while i < users.len() {
        let name = &users[i].name;
        let same: Vec<String> = users[i..]
            .iter()
            .take_while(|u| &u.name == name)
            .map(|u| {
                format!(
                    "{}=iterations={}",
                    u.credential.mechanism, u.credential.iterations
                )
            })
            .collect();
        println!(
            "SCRAM credential configs for user-principal '{name}' are {}",
            same.join(", ")
        );
        i += same.len();
    }
    Ok(())
}
