//! `borges user create|delete|list`: SCRAM credentials (docs/operations.md "SASL"). With
//! `--bootstrap` on the command line: through the brokers' AlterUserScramCredentials and
//! DescribeUserScramCredentials (a cluster's metadata log, or a single node's file), the
//! password salted here so that it never crosses the wire. Without: a single broker's
//! credentials file, edited in place (salted and hashed); the broker re-reads it within a
//! second of a change.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use borges_broker::config::SASL_CREDENTIALS_FILE_NAME;
use borges_broker::sasl::file::{self, UserCredential};
use borges_client::{Admin, ClientConfig, ScramDeletion, ScramUpsertion};
use borges_protocol::scram::{Credential, Mechanism, ITERATIONS_MAX, ITERATIONS_MIN};
use clap::{Args, Subcommand};

use crate::commands::usage;

const EXAMPLES: &str = "Examples:
  printf '%s\\n' \"$PASSWORD\" | borges user create alice --mechanism SCRAM-SHA-256 --password-stdin
  borges user list
  borges user delete alice
  printf '%s\\n' \"$PASSWORD\" | borges --bootstrap-server h1:9292 --sasl-mechanism SCRAM-SHA-256 \\
      --sasl-username admin --sasl-password-file admin.pw user create alice --password-stdin
  borges --bootstrap-server h1:9292 user list

With --bootstrap (--bootstrap-server) on the command line the brokers change the credentials
(AlterUserScramCredentials; in a cluster, for every broker, in the metadata log; needs Alter
on the cluster with the authorizer on). The global TLS and SASL flags apply.

Without it, the credentials file is DATA_DIR/sasl-credentials.toml (--data-dir, default
./borges-data), or --credentials-file FILE: the broker's sasl.credentials_file. A running
broker re-reads it within a second; a cluster's brokers use it only until the metadata log
holds credentials.";

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

/// Checks `create`'s name and iterations, then reads the password (the first line of
/// standard input).
fn create_password(name: &str, iterations: u32) -> anyhow::Result<String> {
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
    Ok(password.to_string())
}

fn create(name: &str, m: Mechanism, iterations: u32, path: &Path) -> anyhow::Result<()> {
    let password = create_password(name, iterations)?;
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

/// A user's mechanisms and iterations.
type Listed = (String, Vec<(Mechanism, u32)>);

/// The file's users, by name, with their mechanisms in SCRAM-SHA-256, -512 order.
fn listed(mut users: Vec<UserCredential>) -> Vec<Listed> {
    users.sort_by_key(|u| (u.name.clone(), u.credential.mechanism.wire_type()));
    let mut out: Vec<Listed> = Vec::new();
    for u in users {
        let info = (u.credential.mechanism, u.credential.iterations);
        match out.last_mut() {
            Some((name, infos)) if *name == u.name => infos.push(info),
            _ => out.push((u.name, vec![info])),
        }
    }
    out
}

fn list(path: &Path) -> anyhow::Result<()> {
    print_users(&listed(file::read(path)?))
}

/// One line per user, as `kafka-configs.sh --describe --entity-type users`.
fn print_users(users: &[Listed]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for (name, infos) in users {
        let same: Vec<String> = infos
            .iter()
            .map(|(m, iterations)| format!("{m}=iterations={iterations}"))
            .collect();
        writeln!(
            out,
            "SCRAM credential configs for user-principal '{name}' are {}",
            same.join(", ")
        )?;
    }
    Ok(())
}

/// `--credentials-file` names a file: not with `--bootstrap`.
fn no_file(file: &FileArgs) -> anyhow::Result<()> {
    if file.credentials_file.is_some() {
        usage!("--credentials-file edits a file; with --bootstrap the brokers change the users");
    }
    Ok(())
}

/// The one user's result of an AlterUserScramCredentials.
fn user_result(
    results: Vec<(String, borges_client::Result<()>)>,
    name: &str,
) -> anyhow::Result<()> {
    match results.into_iter().find(|(n, _)| n == name) {
        Some((_, result)) => Ok(result.with_context(|| format!("user '{name}'"))?),
        None => anyhow::bail!("the broker did not answer for user '{name}'"),
    }
}

/// Runs `borges user ...` through the brokers (`--bootstrap` given).
pub async fn run_api(config: ClientConfig, command: UserCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    match command {
        UserCommand::Create {
            name,
            mechanism: m,
            iterations,
            file,
            ..
        } => {
            no_file(&file)?;
            let m = mechanism(&m)?;
            let password = create_password(&name, iterations)?;
            let upsertion = ScramUpsertion::new(&name, m, iterations, &password)?;
            let results = admin
                .alter_user_scram_credentials(&[upsertion], &[])
                .await?;
            user_result(results, &name)?;
            println!("Completed updating {m} credential of user '{name}'.");
        }
        UserCommand::Delete {
            name,
            mechanism: m,
            file,
        } => {
            no_file(&file)?;
            let m = m.as_deref().map(mechanism).transpose()?;
            delete_api(&admin, &name, m).await?;
            println!("Completed deleting credentials of user '{name}'.");
        }
        UserCommand::List { file } => {
            no_file(&file)?;
            let users = admin.describe_user_scram_credentials(&[]).await?;
            let users: Vec<Listed> = users
                .into_iter()
                .map(|u| Ok((u.name, u.credentials?)))
                .collect::<borges_client::Result<_>>()?;
            print_users(&users)?;
        }
    }
    Ok(())
}

/// Deletes `name`'s credential of `m`, or all of them (looked up first).
async fn delete_api(admin: &Admin, name: &str, m: Option<Mechanism>) -> anyhow::Result<()> {
    let mechanisms = match m {
        Some(m) => vec![m],
        None => {
            let described = admin.describe_user_scram_credentials(&[name]).await?;
            let found = described.into_iter().find(|u| u.name == name);
            let Some(found) = found else {
                anyhow::bail!("the broker did not describe user '{name}'");
            };
            let infos = found
                .credentials
                .with_context(|| format!("user '{name}'"))?;
            infos.into_iter().map(|(m, _)| m).collect()
        }
    };
    let deletions: Vec<ScramDeletion> = mechanisms
        .into_iter()
        .map(|mechanism| ScramDeletion {
            name: name.to_string(),
            mechanism,
        })
        .collect();
    let results = admin.alter_user_scram_credentials(&[], &deletions).await?;
    user_result(results, name)
}
