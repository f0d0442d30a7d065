//! The server: starts one executor per core and serves until shutdown.

use crate::config::BrokerConfig;
use crate::error::BrokerError;

/// Starts the broker and blocks until it has shut down.
pub fn run(config: BrokerConfig) -> Result<(), BrokerError> {
    Err(BrokerError::Config(format!(
        "the server is not built yet (data_dir {})",
        config.data_dir.display()
    )))
}
