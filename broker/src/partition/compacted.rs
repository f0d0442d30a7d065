//! Compacted partitions (`cleanup.policy` = compact): produce refuses records without a key,
//! as Kafka does (`INVALID_RECORD`): the cleaner keeps the latest record per key, and a record
//! without one has nothing to be kept by.

use borges_protocol::batch::{RecordBatch, DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT};
use borges_protocol::ErrorCode;
use borges_storage::PartitionLog;
use bytes::Bytes;
use std::rc::Rc;

use super::{Partition, ValidatedBatch};
use crate::failure::Failure;

impl Partition {
    /// The partition's log (for the core's cleaner).
    pub fn log(&self) -> &Rc<PartitionLog> {
        &self.log
    }

    /// A compacted partition's dirty ratio (metrics); None if it is not compacted.
    pub(super) fn cleaner_dirty_ratio(&self) -> Option<f64> {
        self.log
            .cleaner_lag_now(borges_runtime::time::now_ms())
            .map(|l| l.dirty_ratio)
    }

    /// On a compacted partition, `InvalidRecord` if any record of `batches` has no key.
    pub(super) fn check_keys(&self, batches: &[ValidatedBatch]) -> Result<(), Failure> {
        if self.log.compaction().is_none() {
            return Ok(());
        }
        for (i, b) in batches.iter().enumerate() {
            let batch = RecordBatch::parse(Bytes::copy_from_slice(b.as_bytes()))
                .and_then(|batch| batch.records(DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT));
            let records = batch.map_err(|e| {
                Failure::new(ErrorCode::InvalidRecordBatch, format!("{}: {e}", self.id))
            })?;
            if let Some(at) = records.iter().position(|r| r.key.is_none()) {
                return Err(Failure::new(
                    ErrorCode::InvalidRecord,
                    format!(
                        "{}: a compacted topic (cleanup.policy = compact) accepts only records \
                         with a key; record {at} of batch {i} has none",
                        self.id
                    ),
                ));
            }
        }
        Ok(())
    }
}
