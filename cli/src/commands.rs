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

/// Runs one client command against `bootstrap`.
pub async fn run(bootstrap: &str, ui: Ui, command: Command) -> anyhow::Result<()> {
    let config = ClientConfig::new(bootstrap).client_id("borges-cli");
    match command {
        Command::Topic(topic) => crate::topic::run(config, topic).await,
        Command::Produce(args) => crate::produce::run(config, ui, args).await,
        Command::Consume(args) => crate::consume::run(config, ui, args).await,
        Command::Group(group) => crate::group::run(config, group).await,
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
