//! The storage engine's error type.

use std::path::PathBuf;

use borges_protocol::batch::BatchError;
use borges_protocol::ErrorCode;
use thiserror::Error;

/// Errors from a partition log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A read, write or fsync failed. Writes and fsyncs failing are fatal for the log directory:
    /// the log refuses further writes instead of retrying as if nothing happened.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("write", "fdatasync", "open", ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An earlier write or fsync failed; the log directory is offline until restart.
    #[error("log directory {0} failed earlier and is offline")]
    LogDirFailed(PathBuf),
    /// The requested offset is outside the log.
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: i64,
        /// First offset in the log.
        log_start_offset: i64,
        /// Offset after the last record.
        log_end_offset: i64,
    },
    /// Data on disk failed validation before the recovery point; the partition refuses to
    /// serve until an operator repairs it.
    #[error("corrupt log {path} at byte {position}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte position of the bad batch.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// A batch handed to `append` is invalid.
    #[error(transparent)]
    InvalidBatch(#[from] BatchError),
    /// The core's write buffer budget is exhausted; wait for flushes.
    #[error("write buffer full ({bytes_max} bytes per core)")]
    Busy {
        /// The budget.
        bytes_max: u64,
    },
    /// The log was closed or deleted.
    #[error("partition log is closed")]
    Closed,
    /// A truncation (replication) removed the records an acknowledgement was waiting for.
    #[error("records up to offset {offset} were truncated before being acknowledged")]
    Truncated {
        /// The offset waited for.
        offset: i64,
    },
    /// A configuration value is invalid.
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
}

impl StorageError {
    /// The wire error code a broker answers this failure with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            StorageError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            StorageError::InvalidBatch(b) => b.error_code(),
            StorageError::Busy { .. } => ErrorCode::Busy,
            StorageError::Closed | StorageError::Truncated { .. } => ErrorCode::NotLeaderOrFollower,
            StorageError::InvalidConfig(_) => ErrorCode::InvalidConfig,
            StorageError::Io { .. }
            | StorageError::LogDirFailed(_)
            | StorageError::Corrupt { .. } => ErrorCode::StorageError,
        }
    }
}
