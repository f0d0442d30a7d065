//! Partition log storage: one partition's log on direct IO, driven by the core that owns it.
//! See docs/ARCHITECTURE.md and docs/storage-format.md (on-disk format, write contract,
//! recovery).
//!
//! - [`CoreStorage`]: per-core budgets, open-file cache and descriptor budget, the state of the
//!   log directory ([`DiskState`]: writable, read-only on a full disk, failed).
//! - [`PartitionLog`]: append (synchronous, offsets assigned), flush/sync (the flusher task),
//!   reads (memory tail + `File` chunks for sendfile), lookups by timestamp, retention,
//!   truncation, recovery.
//! - [`Cleaner`]: log compaction of a core's compacted logs (`cleanup.policy` = compact).

#![warn(missing_docs)]

mod checkpoint;
mod cleaner;
mod config;
mod core;
mod error;
pub mod index;
mod log;
mod maintenance;
mod read;
mod recovery;
mod replica;
pub mod scan;
mod segment;
mod truncation;
mod writer;

pub use crate::checkpoint::{
    LeaderEpochCache, RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE,
    RECOVERY_CHECKPOINT_FILE,
};
pub use crate::cleaner::{
    CleanOutcome, Cleaner, CleanerConfig, CleanerLag, CompactionConfig, CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE, CLEANER_DEDUPE_BUFFER_BYTES_MIN, SWAP_SUFFIX,
};
pub use crate::config::{
    Durability, LogConfig, StorageConfig, StorageTuning, DISK_FREE_RESUME_MARGIN_BYTES,
    SEGMENT_SIZE_BYTES_MAX, TRANSIENT_DESCRIPTORS_MAX, WRITER_DESCRIPTORS,
};
pub use crate::core::{CoreStorage, DiskState};
pub use crate::log::{
    AckLevel, AppendInfo, LogOffsets, PartitionLog, ReadBound, TickOutcome, VerifyReport,
};
pub use crate::read::{LogRead, ReadChunk};
pub use crate::replica::REPLICATION_ENDS_MAX;
pub use crate::segment::{segment_path, SegmentFile, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
pub use crate::truncation::TRUNCATION_INTENT_FILE;
pub use error::StorageError;
