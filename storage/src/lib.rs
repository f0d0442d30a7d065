//! Partition log storage. See docs/ARCHITECTURE.md and docs/storage-format.md.

mod error;

pub use error::StorageError;
