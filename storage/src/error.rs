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
    /// A follower's batch does not start where the log ends (replication: the follower
    /// fetched from the wrong offset or the leader answered another range).
    #[error("follower batch at offset {base_offset}, but the log ends at {expected_offset}")]
    UnexpectedAppendOffset {
        /// The batch's base offset.
        base_offset: i64,
        /// The offset the next batch must start at.
        expected_offset: i64,
    },
    /// A follower's batch has a partition leader epoch below the log's latest (the follower
    /// did not truncate a diverged tail first).
    #[error(
        "follower batch at offset {base_offset} has leader epoch {epoch} < latest {latest_epoch}"
    )]
    EpochRegression {
        /// The batch's base offset.
        base_offset: i64,
        /// Its partition leader epoch.
        epoch: i32,
        /// The log's latest epoch.
        latest_epoch: i32,
    },
    /// A configuration value is invalid.
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
    /// The log directory is read-only because its disk is full (an operation hit `ENOSPC`) or
    /// has less than `disk_free_bytes_min` free: appends and truncations are refused, reads and
    /// acknowledged data are unaffected, and writes resume by themselves once the free-space
    /// probe sees space again. Not a failure of the directory.
    #[error(
        "log directory {data_dir} is read-only: disk full ({free_bytes:?} bytes free, \
         {free_bytes_min} needed); writes resume when space is freed"
    )]
    DiskFull {
        /// The log directory.
        data_dir: PathBuf,
        /// Free bytes the probe last saw (`None` before the first probe).
        free_bytes: Option<u64>,
        /// `disk_free_bytes_min`.
        free_bytes_min: u64,
    },
    /// An operation ran out of space (`ENOSPC`, `EDQUOT`): it was not done and left nothing
    /// half-done; the log directory turns read-only ([`StorageError::DiskFull`]).
    #[error(
        "{op} {path}: no space left ({source}); the log directory is read-only until space \
         is freed"
    )]
    NoSpace {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The process (`EMFILE`), the system (`ENFILE`) or this core's storage descriptor budget
    /// (`StorageConfig::descriptors_max`) is out of file descriptors: this one operation was
    /// not done; retry later. Never a failure of the log directory.
    #[error("{op} {path}: out of file descriptors ({source}); retry later")]
    TooManyOpenFiles {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// Whether retrying the same call later can succeed without a restart: descriptors ran
    /// out, the write budget was full, or the disk is full (read-only until space is freed).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StorageError::Busy { .. }
                | StorageError::TooManyOpenFiles { .. }
                | StorageError::DiskFull { .. }
                | StorageError::NoSpace { .. }
        )
    }

    /// The wire error code a broker answers this failure with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            StorageError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            StorageError::InvalidBatch(b) => b.error_code(),
            // Out of descriptors: a retriable refusal; a full disk: the retriable `DiskFull`.
            StorageError::Busy { .. } | StorageError::TooManyOpenFiles { .. } => ErrorCode::Busy,
            StorageError::DiskFull { .. } | StorageError::NoSpace { .. } => ErrorCode::DiskFull,
            StorageError::Closed | StorageError::Truncated { .. } => ErrorCode::NotLeaderOrFollower,
            StorageError::InvalidConfig(_) => ErrorCode::InvalidConfig,
            StorageError::UnexpectedAppendOffset { .. } | StorageError::EpochRegression { .. } => {
                ErrorCode::InvalidRecordBatch
            }
            StorageError::Io { .. }
            | StorageError::LogDirFailed(_)
            | StorageError::Corrupt { .. } => ErrorCode::StorageError,
        }
    }
}
