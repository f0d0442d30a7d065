//! The client commands (topic, produce, consume, group) and what they share: the usage-error
//! type (exit code 2) and the client configuration.

use std::fmt;

use borges_client::ClientConfig;

use crate::args::Command;
use crate::output::Ui;

/// A mistake in the command line found after parsing (an unknown `--property`, a bad
/// `--offset`): exit code 2, as for clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns a [`UsageError`] from the current function.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::commands::UsageError(format!($($arg)*))))
    };
}
pub(crate) use usage;

/// The global TLS flags as given (`--tls-ca`, `--tls-cert`, `--tls-key`).
#[derive(Debug, Default)]
pub struct ClientTls {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl ClientTls {
    /// The rustls configuration of the flags (none without `--tls-ca`).
    pub fn rustls(self) -> anyhow::Result<Option<crate::cluster_cmd::TlsClient>> {
        match self.config()? {
            None => Ok(None),
            Some(tls) => Ok(Some(tls.rustls_config()?)),
        }
    }

    /// The client's TLS settings: none without `--tls-ca`.
    fn config(self) -> anyhow::Result<Option<borges_client::TlsConfig>> {
        match self.ca {
            None if self.cert.is_some() => {
                usage!("--tls-cert needs --tls-ca (the CAs to verify the brokers with)")
            }
            None => Ok(None),
            Some(ca) => Ok(Some(borges_client::TlsConfig {
                ca_file: ca,
                cert_file: self.cert,
                key_file: self.key,
            })),
        }
    }
}

/// The global SASL flags as given (`--sasl-mechanism`, `--sasl-username`,
/// `--sasl-password-file`).
#[derive(Debug, Default)]
pub struct ClientSasl {
    pub mechanism: Option<String>,
    pub username: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
}

impl ClientSasl {
    /// The client's SASL settings (the password file is read now): none without
    /// `--sasl-mechanism`.
    pub fn config(self) -> anyhow::Result<Option<borges_client::SaslConfig>> {
        let Some(mechanism) = self.mechanism else {
            if self.username.is_some() || self.password_file.is_some() {
                usage!("--sasl-username and --sasl-password-file need --sasl-mechanism");
            }
            return Ok(None);
        };
        let (Some(username), Some(file)) = (self.username, self.password_file) else {
            usage!("--sasl-mechanism needs --sasl-username and --sasl-password-file");
        };
        let text = std::fs::read_to_string(&file)
            .map_err(|e| anyhow::anyhow!("reading --sasl-password-file {}: {e}", file.display()))?;
        let password = text.lines().next().unwrap_or("");
        match borges_client::SaslConfig::scram(&mechanism, &username, password) {
            Ok(c) => Ok(Some(c)),
            Err(e) => usage!("{e}"),
        }
    }
}

/// Runs one client command against `bootstrap`.
pub async fn run(
    bootstrap: &str,
    tls: ClientTls,
    sasl: ClientSasl,
    ui: Ui,
    command: Command,
) -> anyhow::Result<()> {
    let config = ClientConfig::new(bootstrap)
        .client_id("borges-cli")
        .tls(tls.config()?)
        .sasl(sasl.config()?);
    match command {
        Command::Topic(topic) => crate::topic::run(config, topic).await,
        Command::Produce(args) => crate::produce::run(config, ui, args).await,
        Command::Consume(args) => crate::consume::run(config, ui, args).await,
        Command::Group(group) => crate::group::run(config, group).await,
        Command::Acl(acl) => crate::acl::run(config, acl).await,
        Command::User(user) => crate::user::run_api(config, user).await,
        Command::Broker(_) | Command::Storage(_) | Command::Cluster(_) => {
            unreachable!("these commands run without a tokio runtime")
        }
    }
}

/// Whether `error` (anywhere in its chain) is a closed pipe: `borges ... | head` stopped
/// reading, which ends the command normally.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipes_are_found_in_the_error_chain() {
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let wrapped = anyhow::Error::new(pipe).context("writing the topic list");
        assert!(is_broken_pipe(&wrapped));
        let other = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::Other));
        assert!(!is_broken_pipe(&other));
        assert!(!is_broken_pipe(&anyhow::anyhow!("broken pipe")));
    }
}
