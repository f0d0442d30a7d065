//! The read paths of a partition: fetch reads (file ranges for sendfile, or bytes for the
//! memory tail and the copy path), long-poll waits for new data, and offsets by time.

use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use borges_protocol::batch::BatchIter;
use borges_protocol::ErrorCode;
use borges_runtime::time::{self, Instant};
use borges_storage::{LogOffsets, ReadBound, ReadChunk};
use bytes::Bytes;

use borges_replication::replica::{IsrChangeRequest, ReplicaFetch};

use super::{Partition, PartitionTable};
use crate::failure::Failure;
use crate::types::{PartitionRef, SendChunk};

/// `timestamp` meaning the log start offset.
pub const EARLIEST: i64 = -2;
/// `timestamp` meaning the high watermark.
pub const LATEST: i64 = -1;
/// `timestamp` meaning the record with the largest timestamp.
pub const MAX_TIMESTAMP: i64 = -3;

/// One partition of a fetch.
#[derive(Debug, Clone)]
pub struct FetchItem {
    /// The partition.
    pub partition: PartitionRef,
    /// First offset wanted.
    pub fetch_offset: i64,
    /// Bytes wanted at most (at least one batch is returned).
    pub max_bytes: u64,
    /// A follower's fetch (reads to the log end), or `None` for a consumer.
    pub replica: Option<ReplicaFetchFields>,
}

/// The follower's fields of a replica fetch for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaFetchFields {
    /// The follower broker.
    pub replica_id: i32,
    /// Its broker epoch (-1 unknown).
    pub broker_epoch: i64,
    /// The leader epoch it follows (-1 unchecked).
    pub current_leader_epoch: i32,
    /// The epoch of its last batch (-1 none): divergence is checked against it.
    pub last_fetched_epoch: i32,
}

/// What a fetch found in one partition.
pub struct FetchOutcome {
    /// Failure, if any.
    pub failure: Option<Failure>,
    /// High watermark.
    pub high_watermark: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// The data, batch-aligned.
    pub chunks: Vec<SendChunk>,
    /// Total bytes of `chunks`.
    pub size_bytes: u64,
    /// Replica fetches: (epoch, end offset) where the follower's log diverged from this one.
    pub diverging_epoch: Option<(i32, i64)>,
}

impl FetchOutcome {
    /// An outcome that only carries a failure.
    pub fn failed(failure: Failure) -> FetchOutcome {
        FetchOutcome {
            failure: Some(failure),
            high_watermark: -1,
            log_start_offset: -1,
            chunks: Vec::new(),
            size_bytes: 0,
            diverging_epoch: None,
        }
    }
}

/// One partition of a ListOffsets.
#[derive(Debug, Clone)]
pub struct ListOffsetsItem {
    /// The partition.
    pub partition: PartitionRef,
    /// [`EARLIEST`], [`LATEST`], [`MAX_TIMESTAMP`], or >= 0 for the first offset whose
    /// timestamp is at least this.
    pub timestamp: i64,
}

/// What a ListOffsets lookup found in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetLookup {
    /// The offset; -1 when there is none.
    pub offset: i64,
    /// The record's timestamp; -1 when not applicable.
    pub timestamp: i64,
    /// Bytes of the partition's log (all segments).
    pub size_bytes: u64,
}

impl Partition {
    /// Reads committed data (below the high watermark) from `fetch_offset`: file ranges for
    /// sendfile, or, with `copy`, bytes in memory.
    pub async fn read(
        &self,
        fetch_offset: i64,
        max_bytes: u64,
        copy: bool,
    ) -> Result<FetchOutcome, Failure> {
        self.check_owner();
        if copy {
            return self.read_copy(fetch_offset, max_bytes).await;
        }
        let read = self
            .log
            .read(fetch_offset, max_bytes, ReadBound::HighWatermark)
            .await?;
        self.check_read_offsets(&read.offsets);
        strict_assert_eq!(
            read.size_bytes,
            read.chunks.iter().map(|c| c.len()).sum::<u64>()
        );
        let mut chunks = Vec::with_capacity(read.chunks.len());
        for chunk in read.chunks {
            chunks.push(self.send_chunk(chunk, read.offsets.high_watermark)?);
        }
        Ok(FetchOutcome {
            failure: None,
            high_watermark: read.offsets.high_watermark,
            log_start_offset: read.offsets.log_start_offset,
            chunks,
            size_bytes: read.size_bytes,
            diverging_epoch: None,
        })
    }

    /// A follower's fetch on the leader (Kafka's `fetchRecords` for a replica): its leader
    /// epoch checked, a diverging log answered with where this log's epoch ends (nothing
    /// read, nothing updated), else its position noted (ISR expansion, high watermark) and
    /// batches read to the log end. Returns the outcome and the ISR change to ask for.
    pub async fn read_replica(
        &self,
        item: &FetchItem,
        replica: ReplicaFetchFields,
    ) -> Result<(FetchOutcome, Option<IsrChangeRequest>), Failure> {
        self.check_owner();
        let o = self.offsets();
        if let Some(diverging) = self.divergence(replica.last_fetched_epoch, item.fetch_offset) {
            let outcome = FetchOutcome {
                failure: None,
                high_watermark: o.high_watermark,
                log_start_offset: o.log_start_offset,
                chunks: Vec::new(),
                size_bytes: 0,
                diverging_epoch: Some(diverging),
            };
            return Ok((outcome, None));
        }
        if item.fetch_offset > o.log_end_offset || item.fetch_offset < o.log_start_offset {
            let mut outcome = FetchOutcome::failed(Failure::new(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "{}: replica fetch at {} outside the log {}..{}",
                    self.id, item.fetch_offset, o.log_start_offset, o.log_end_offset
                ),
            ));
            outcome.high_watermark = o.high_watermark;
            outcome.log_start_offset = o.log_start_offset;
            return Ok((outcome, None));
        }
        let fetch = ReplicaFetch {
            replica_id: replica.replica_id,
            broker_epoch: replica.broker_epoch,
            current_leader_epoch: replica.current_leader_epoch,
            fetch_offset: item.fetch_offset,
        };
        let change = self.note_replica_fetch(&fetch, time::now_ms())?;
        let read = self
            .log
            .read(item.fetch_offset, item.max_bytes, ReadBound::LogEnd)
            .await?;
        self.check_read_offsets(&read.offsets);
        let mut chunks = Vec::with_capacity(read.chunks.len());
        for chunk in read.chunks {
            chunks.push(self.send_chunk(chunk, read.offsets.log_end_offset)?);
        }
        let outcome = FetchOutcome {
            failure: None,
            high_watermark: read.offsets.high_watermark,
            log_start_offset: read.offsets.log_start_offset,
            chunks,
            size_bytes: read.size_bytes,
            diverging_epoch: None,
        };
        Ok((outcome, change))
    }

    /// Kafka's divergence check: the follower's last epoch ends here before its fetch
    /// offset, or this log knows only an earlier epoch: (epoch, end) to truncate to.
    fn divergence(&self, last_fetched_epoch: i32, fetch_offset: i64) -> Option<(i32, i64)> {
        if last_fetched_epoch < 0 {
            return None;
        }
        match self.log.epoch_end_offset(last_fetched_epoch) {
            None => Some((-1, -1)),
            Some((epoch, end)) if epoch < last_fetched_epoch || end < fetch_offset => {
                Some((epoch, end))
            }
            Some(_) => None,
        }
    }

    /// The copy path: batches read into memory.
    async fn read_copy(&self, fetch_offset: i64, max_bytes: u64) -> Result<FetchOutcome, Failure> {
        self.check_owner();
        let (read, offsets) = self
            .log
            .read_in_memory(fetch_offset, max_bytes, ReadBound::HighWatermark)
            .await?;
        self.check_read_offsets(&offsets);
        // The log CRC-checked every batch it read from a file (a mismatch is an error and
        // marks the partition corrupt); this checks, in strict builds, all of them again and
        // where they lie (the first chunk reaches the fetch offset).
        strict_assert!(read.iter().enumerate().all(|(i, b)| {
            let from = if i == 0 { fetch_offset } else { -1 };
            check_batches(&self.id, b, from, offsets.high_watermark).is_ok()
        }));
        let size_bytes = read.iter().map(|b| b.len() as u64).sum();
        // Chunks as the log holds them, sent one after the other (no copy into one buffer).
        let chunks = read
            .into_iter()
            .filter(|b| !b.is_empty())
            .map(SendChunk::Memory)
            .collect();
        Ok(FetchOutcome {
            failure: None,
            high_watermark: offsets.high_watermark,
            log_start_offset: offsets.log_start_offset,
            chunks,
            size_bytes,
            diverging_epoch: None,
        })
    }

    /// A chunk of a read as the connection sends it: memory as is, a file range with a
    /// descriptor of its own (the chunk may cross cores and outlive the read).
    fn send_chunk(&self, chunk: ReadChunk, high_watermark: i64) -> Result<SendChunk, Failure> {
        Ok(match chunk {
            ReadChunk::Memory(b) => {
                strict_assert!(check_batches(&self.id, &b, -1, high_watermark).is_ok());
                SendChunk::Memory(b)
            }
            ReadChunk::File {
                file,
                position,
                length,
            } => SendChunk::File {
                fd: Arc::new(dup_fd(file.as_raw_fd()).map_err(|e| {
                    Failure::new(
                        ErrorCode::StorageError,
                        format!("dup of a segment descriptor: {e}"),
                    )
                })?),
                position,
                length,
            },
        })
    }

    /// Reads committed batches from `offset` into one buffer (tests).
    #[cfg(test)]
    pub async fn read_bytes(
        &self,
        offset: i64,
        max_bytes: u64,
    ) -> Result<(Bytes, LogOffsets), Failure> {
        self.read_bytes_to(offset, max_bytes, ReadBound::HighWatermark)
            .await
    }

    /// Like [`Partition::read_bytes`], up to the log end instead of the high watermark (the
    /// group coordinator's replay of an offsets partition it now leads).
    pub async fn read_to_log_end(
        &self,
        offset: i64,
        max_bytes: u64,
    ) -> Result<(Bytes, LogOffsets), Failure> {
        self.read_bytes_to(offset, max_bytes, ReadBound::LogEnd)
            .await
    }

    /// Reads batches from `offset` up to `bound` into memory, on the owning core.
    async fn read_bytes_to(
        &self,
        offset: i64,
        max_bytes: u64,
        bound: ReadBound,
    ) -> Result<(Bytes, LogOffsets), Failure> {
        self.check_owner();
        let (bytes, offsets) = self.log.read_bytes(offset, max_bytes, bound).await?;
        self.check_read_offsets(&offsets);
        Ok((bytes, offsets))
    }

    /// (offset, timestamp) for a ListOffsets `timestamp` ((-1, -1) when there is none), and
    /// the log's size.
    pub async fn list_offsets(&self, timestamp: i64) -> Result<OffsetLookup, Failure> {
        self.check_owner();
        let offsets = self.offsets();
        let (offset, timestamp) = match timestamp {
            EARLIEST => (offsets.log_start_offset, -1),
            LATEST => (offsets.high_watermark, -1),
            MAX_TIMESTAMP => self.log.max_timestamp().await?.unwrap_or((-1, -1)),
            ts => self.log.offset_for_timestamp(ts).await?.unwrap_or((-1, -1)),
        };
        Ok(OffsetLookup {
            offset,
            timestamp,
            size_bytes: self.log.size_bytes(),
        })
    }
}

/// Checks batches read from the log for a consumer, on the way out of the disk: every batch's
/// CRC-32C (an error), and, as assertions, offsets that increase, the first batch reaching
/// `fetch_offset` (-1: any), and nothing at or above the high watermark. For `strict_assert!`:
/// the log itself refuses batches from files whose CRC does not match.
fn check_batches(
    id: &PartitionRef,
    bytes: &[u8],
    fetch_offset: i64,
    high_watermark: i64,
) -> Result<(), Failure> {
    let mut next = i64::MIN;
    for (i, batch) in BatchIter::new(bytes).enumerate() {
        let (header, _) = batch.map_err(|e| {
            tracing::error!(partition = %id, "corrupt batch read from the log: {e}");
            Failure::new(
                ErrorCode::CorruptRecordBatch,
                format!("{id}: a batch read from the log after offset {next} is corrupt: {e}"),
            )
        })?;
        strict_assert!(i > 0 || header.last_offset() >= fetch_offset);
        strict_assert!(
            header.base_offset >= next && header.last_offset() < high_watermark,
            "{id}: read batch {}..={} after offset {next}, high watermark {high_watermark}",
            header.base_offset,
            header.last_offset()
        );
        next = header.next_offset();
    }
    Ok(())
}

fn dup_fd(fd: std::os::fd::RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: dup of a descriptor kept open by the storage engine for this call; the new
    // descriptor is owned by the returned value.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

impl PartitionTable {
    /// Reads partitions this core owns, one outcome per item, in order (local fetches and
    /// those forwarded by other cores).
    pub async fn read_all(&self, items: &[FetchItem], copy: bool) -> Vec<FetchOutcome> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let outcome = match (self.get(&item.partition), item.replica) {
                (Ok(p), None) => p.read(item.fetch_offset, item.max_bytes, copy).await,
                (Ok(p), Some(replica)) => match p.read_replica(item, replica).await {
                    Ok((outcome, change)) => {
                        if let Some(change) = change {
                            self.queue_isr_change(&p, change);
                        }
                        Ok(outcome)
                    }
                    Err(f) => Err(f),
                },
                (Err(f), _) => Err(f),
            };
            out.push(outcome.unwrap_or_else(FetchOutcome::failed));
        }
        out
    }

    /// Waits until any of these partitions (owned by this core) has a high watermark past its
    /// offset (a log end, for replica fetches: `true`), or the deadline. Returns at once when
    /// one of them is not here.
    pub async fn wait_for_data(&self, items: &[(PartitionRef, i64, bool)], deadline: Instant) {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return;
            }
            let mut partitions = Vec::with_capacity(items.len());
            for (p, offset, to_log_end) in items {
                let Ok(partition) = self.get(p) else { return };
                let o = partition.offsets();
                let end = if *to_log_end {
                    o.log_end_offset
                } else {
                    o.high_watermark
                };
                if end > *offset {
                    return;
                }
                let seen = partition.notify_for(*to_log_end).generation();
                partitions.push((partition, seen, *to_log_end));
            }
            let waits: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = partitions
                .iter()
                .map(|(p, seen, to_log_end)| {
                    Box::pin(p.notify_for(*to_log_end).changed_since(*seen))
                        as Pin<Box<dyn Future<Output = ()>>>
                })
                .collect();
            if time::timeout(remaining, first_of(waits)).await.is_none() {
                return;
            }
        }
    }

    /// Looks offsets up in partitions this core owns, one result per item, in order.
    pub async fn list_offsets(
        &self,
        items: &[ListOffsetsItem],
    ) -> Vec<Result<OffsetLookup, Failure>> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(match self.get(&item.partition) {
                Ok(p) => p.list_offsets(item.timestamp).await,
                Err(f) => Err(f),
            });
        }
        out
    }
}

impl Partition {
    /// What a long poll waits on: appends and flushes (replica fetches), else the high
    /// watermark.
    fn notify_for(&self, to_log_end: bool) -> &borges_runtime::sync::Notify {
        if to_log_end {
            self.log.progress()
        } else {
            self.log.changes()
        }
    }
}

/// Resolves when the first of `futures` does (never, when there are none).
pub fn first_of<'a>(futures: Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>) -> FirstOf<'a> {
    FirstOf(futures)
}

/// The future of [`first_of`].
pub struct FirstOf<'a>(Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>);

impl Future for FirstOf<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_empty() {
            return Poll::Pending;
        }
        for f in self.0.iter_mut() {
            if f.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::{self, BatchBuilder, BatchOptions};

    fn batch_at(base_offset: i64, records: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(BatchOptions::default(), 64);
        for i in 0..records {
            b.push(i as i64, None, Some(b"value"), &[]);
        }
        let mut bytes = b.build().unwrap().to_vec();
        batch::set_base_offset(&mut bytes, base_offset);
        bytes
    }

    #[test]
    fn a_corrupt_batch_read_for_a_consumer_is_an_error() {
        let id = PartitionRef {
            topic: Arc::from("t"),
            partition: 0,
        };
        let mut bytes = batch_at(0, 2);
        bytes.extend(batch_at(2, 3));
        assert!(check_batches(&id, &bytes, 0, 5).is_ok());
        assert!(check_batches(&id, &[], 0, 0).is_ok());
        let flipped = bytes.len() - 1;
        bytes[flipped] ^= 0x40;
        let failure = check_batches(&id, &bytes, 0, 5).unwrap_err();
        assert_eq!(failure.code, ErrorCode::CorruptRecordBatch);
        assert!(failure.to_string().contains("after offset 2"), "{failure}");
    }
}
