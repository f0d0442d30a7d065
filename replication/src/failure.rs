//! `Failure`: a wire error code with a message for humans, the way responses carry errors.
//!
//! A leaf module: it names no other module, so every layer (the controller here; partitions,
//! groups and handlers in the broker, which re-exports it as `crate::failure`) can return it.

use std::fmt;

use borges_protocol::batch::BatchError;
use borges_protocol::ErrorCode;
use borges_storage::StorageError;

/// An error code with an optional message, as responses carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The code.
    pub code: ErrorCode,
    /// Details for humans.
    pub message: Option<String>,
}

impl Failure {
    /// A failure with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: Some(message.into()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.message {
            Some(m) => f.write_str(m),
            None => f.write_str(self.code.name()),
        }
    }
}

impl std::error::Error for Failure {}

impl From<StorageError> for Failure {
    fn from(e: StorageError) -> Failure {
        // A full disk is `DiskFull` (read-only, not failed: writes resume once space is
        // freed); out of descriptors `Busy` (this one operation was not done; retry later).
        Failure::new(e.error_code(), e.to_string())
    }
}

/// The code for an IO error outside storage's own files (metadata, checkpoints): out of
/// descriptors is `Busy` and a full disk `DiskFull` (both transient), anything else
/// `StorageError`.
pub fn io_error_code(e: &std::io::Error) -> ErrorCode {
    match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => ErrorCode::Busy,
        Some(libc::ENOSPC | libc::EDQUOT) => ErrorCode::DiskFull,
        _ => ErrorCode::StorageError,
    }
}

impl From<BatchError> for Failure {
    fn from(e: BatchError) -> Failure {
        Failure::new(e.error_code(), e.to_string())
    }
}
