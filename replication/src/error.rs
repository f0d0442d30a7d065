//! The crate's error type.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Errors of the cluster layer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReplicationError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file holds something this build cannot read.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The directory belongs to another cluster.
    #[error(
        "{path} belongs to cluster {found}, not to cluster {expected}: refusing to start \
         (a directory is formatted for one cluster)"
    )]
    ClusterIdMismatch {
        /// The file that says so.
        path: PathBuf,
        /// Its cluster id.
        found: String,
        /// The configured cluster id.
        expected: String,
    },
    /// The directory belongs to another node.
    #[error("{path} belongs to node {found}, not to node {expected}: refusing to start")]
    NodeIdMismatch {
        /// The file that says so.
        path: PathBuf,
        /// Its node id.
        found: u64,
        /// The configured node id.
        expected: u64,
    },
    /// The Raft storage failed.
    #[error("raft storage: {0}")]
    Storage(String),
    /// The Raft core failed or stopped.
    #[error("raft: {0}")]
    Raft(String),
    /// Configuration that cannot work.
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    /// A controller-link call failed.
    #[error("controller link: {0}")]
    Link(String),
}

impl ReplicationError {
    /// An IO error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> ReplicationError {
        ReplicationError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
