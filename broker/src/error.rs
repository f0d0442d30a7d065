//! The broker's error type.

use borges_replication::controller::ControllerError;
use thiserror::Error;

use crate::failure::Failure;
use crate::metadata::MetadataError;

/// Errors that stop the broker or one of its operations (start-up, metadata application,
/// shutdown). Errors that answer one request are [`Failure`]s. Messages include their cause,
/// so the wrapping variants do not expose it again as `source()` (`{:#}` would repeat it).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A configuration value or relation is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The configuration file is unreadable or not valid TOML for the broker (the message as
    /// toml renders it: line, column, the line itself; with a "did you mean" for a misspelt key).
    #[error("invalid configuration in {}: {message}", path.display())]
    ConfigFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong, possibly on several lines.
        message: String,
    },
    /// An address the broker must listen on is taken.
    #[error(
        "cannot listen on {address} ({what}): {cause} (another broker or program listens there)"
    )]
    AddressInUse {
        /// The address.
        address: std::net::SocketAddr,
        /// Which listener (`listen`, `per-core port`, `metrics_listen`).
        what: &'static str,
        /// The bind error.
        cause: std::io::Error,
    },
    /// Another broker holds the data directory's lock.
    #[error(
        "data directory {} is in use by another broker (cannot lock {})",
        dir.display(),
        lock.display()
    )]
    DataDirInUse {
        /// The data directory.
        dir: std::path::PathBuf,
        /// Its lock file.
        lock: std::path::PathBuf,
    },
    /// The TLS files could not be used (unreadable PEM, a key that does not match).
    #[error("TLS: {0}")]
    Tls(#[from] borges_runtime::tls::TlsError),
    /// The machine lacks something the broker needs (io_uring).
    #[error("{0}")]
    Unsupported(String),
    /// The runtime could not start (io_uring, locked memory, CPUs).
    #[error(transparent)]
    Runtime(#[from] borges_runtime::executor::RuntimeError),
    /// An IO error outside the storage engine (listeners, metadata files).
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// The storage engine failed.
    #[error(transparent)]
    Storage(#[from] borges_storage::StorageError),
    /// The storage engine failed on one partition.
    #[error("{action} {partition}: {cause}")]
    Partition {
        /// What was being done ("opening", "reconfiguring", "deleting", "closing").
        action: &'static str,
        /// The partition (`topic-index`) or its directory.
        partition: String,
        /// The cause.
        cause: borges_storage::StorageError,
    },
    /// The metadata store is unreadable or refused a change.
    #[error("metadata: {0}")]
    Metadata(MetadataError),
    /// An operation on this or another core answered with a failure.
    #[error(transparent)]
    Failed(#[from] Failure),
    /// Replaying a `__consumer_offsets` partition failed.
    #[error("replaying __consumer_offsets-{partition}: {cause}")]
    OffsetsReplay {
        /// The offsets partition.
        partition: u32,
        /// The cause.
        cause: Failure,
    },
    /// Another core failed to start, so this one gave up.
    #[error("start-up aborted: another core failed to start")]
    StartupAborted,
    /// One core stopped with an error.
    #[error("core {core}: {cause}")]
    Core {
        /// The core.
        core: usize,
        /// Its error.
        cause: Box<BrokerError>,
    },
    /// Several operations failed (one per core or per partition), in order.
    #[error("{}", join(.0))]
    Several(Vec<BrokerError>),
}

impl From<ControllerError> for BrokerError {
    fn from(e: ControllerError) -> BrokerError {
        match e {
            ControllerError::Damaged(message) => BrokerError::Config(message),
            ControllerError::Io { context, cause } => BrokerError::Io { context, cause },
            ControllerError::Metadata(e) => BrokerError::Metadata(e),
            ControllerError::Failed(f) => BrokerError::Failed(f),
            other => BrokerError::Config(other.to_string()),
        }
    }
}

impl From<MetadataError> for BrokerError {
    fn from(e: MetadataError) -> BrokerError {
        BrokerError::Metadata(e)
    }
}

impl BrokerError {
    /// One error from many: `None` when there are none, the error itself when there is one.
    pub fn from_many(mut errors: Vec<BrokerError>) -> Option<BrokerError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(BrokerError::Several(errors)),
        }
    }
}

fn join(errors: &[BrokerError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
