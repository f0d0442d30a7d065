//! The broker's error type.

use thiserror::Error;

/// Errors that stop the broker or one of its operations.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A configuration value or relation is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The runtime could not start (io_uring, locked memory, CPUs).
    #[error(transparent)]
    Runtime(#[from] borges_runtime::executor::RuntimeError),
    /// An IO error outside the storage engine (listeners, metadata files).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The storage engine failed.
    #[error(transparent)]
    Storage(#[from] borges_storage::StorageError),
    /// The metadata store is unreadable.
    #[error("metadata: {0}")]
    Metadata(String),
    /// One or more cores failed to start or stopped with an error.
    #[error("{0}")]
    Cores(String),
}
