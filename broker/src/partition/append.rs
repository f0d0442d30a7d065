//! The one append path of a partition: produce requests and group commits both go through
//! [`Partition::append`], which refuses appends on a replica that does not lead and checks
//! the ISR against `min.insync.replicas` (`replica`), waits for room
//! in the core's write budget, and appends with the partition's leader epoch; the returned
//! [`PendingAck`] then waits for the acknowledgement level the producer asked for.

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use borges_protocol::ErrorCode;
use borges_runtime::time::{self, Instant};

use super::idempotence::Idempotence;
use super::{Partition, PartitionTable, ValidatedBatch};
use crate::failure::Failure;
use crate::types::{Acks, PartitionRef};

/// A successful append, as the producer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Log start offset after the append (-1 for `acks=0`).
    pub log_start_offset: i64,
    /// The batches were already in the log (an idempotent producer's retry): nothing was
    /// appended and `base_offset` is where the originals are. Answered with
    /// `DuplicateSequenceNumber`, which producers treat as success.
    pub duplicate: bool,
}

/// Batches for one partition, already validated by the receiving core.
pub struct AppendItem {
    /// Target partition.
    pub partition: PartitionRef,
    /// The batches, in order.
    pub batches: Vec<ValidatedBatch>,
}

/// When a producer stops waiting for its acknowledgement.
#[derive(Debug, Clone, Copy)]
pub struct AckDeadline {
    /// The moment.
    pub at: Instant,
    /// The request's timeout, for the error message.
    pub timeout_ms: u32,
}

impl AckDeadline {
    /// `timeout_ms` from now.
    pub fn after_ms(timeout_ms: u32) -> AckDeadline {
        AckDeadline {
            at: Instant::now() + Duration::from_millis(u64::from(timeout_ms)),
            timeout_ms,
        }
    }
}

/// Batches appended to a partition, not yet acknowledged. Lives on the partition's core.
#[must_use = "an append is acknowledged only by waiting for it"]
pub struct PendingAck {
    partition: Rc<Partition>,
    acks: Acks,
    base_offset: i64,
    last_offset: i64,
    records: u64,
    size_bytes: u64,
    /// Nothing appended: the batches were already there (see [`ProduceAck::duplicate`]).
    duplicate: bool,
}

impl Partition {
    /// Appends `batches` now, in order, stamped with this partition's leader epoch; waits only
    /// for room in the core's write budget. Refuses `acks=all` while the ISR is smaller than
    /// `min.insync.replicas`, and idempotent producers' batches that do not continue their
    /// sequences; answers a retry of batches already appended with their original offsets
    /// (nothing appended). Nothing is appended unless everything is.
    pub async fn append(
        self: &Rc<Self>,
        batches: Vec<ValidatedBatch>,
        acks: Acks,
    ) -> Result<PendingAck, Failure> {
        self.check_owner();
        self.check_appendable(acks == Acks::All)?;
        self.check_keys(&batches)?;
        strict_assert!(
            batches.iter().all(ValidatedBatch::is_intact),
            "{}: a validated batch changed before its append",
            self.id
        );
        let size_bytes: u64 = batches.iter().map(ValidatedBatch::size_bytes).sum();
        let records: u64 = batches.iter().map(ValidatedBatch::records).sum();
        let span: i64 = batches.iter().map(ValidatedBatch::offset_span).sum();
        self.log.wait_writable(size_bytes).await;
        // No await from here to the log append: nothing else appends in between, and the
        // producer check sees the state the append changes.
        let end = self.offsets().log_end_offset;
        let producers = match self.check_producers(&batches)? {
            Idempotence::Duplicate {
                base_offset,
                last_offset,
            } => return Ok(self.duplicate(acks, base_offset, last_offset)),
            Idempotence::Append(headers) => Some(headers),
            Idempotence::None => None,
        };
        let bytes = batches
            .into_iter()
            .map(ValidatedBatch::into_bytes)
            .collect();
        let info = self.log.append(bytes, self.leader_epoch.get())?;
        strict_assert!(
            info.base_offset == end && info.last_offset + 1 == end + span,
            "{}: append at log end {end} of {span} offsets got {}..={}",
            self.id,
            info.base_offset,
            info.last_offset
        );
        strict_assert_eq!(self.offsets().log_end_offset, info.last_offset + 1);
        self.after_append();
        if let Some(headers) = producers {
            self.record_producers(&headers, info.base_offset);
        }
        Ok(PendingAck {
            partition: self.clone(),
            acks,
            base_offset: info.base_offset,
            last_offset: info.last_offset,
            records,
            size_bytes,
            duplicate: false,
        })
    }

    /// The acknowledgement of a retry: it waits for the originals, at `base..=last`.
    fn duplicate(self: &Rc<Self>, acks: Acks, base_offset: i64, last_offset: i64) -> PendingAck {
        assert!(base_offset <= last_offset && last_offset < self.offsets().log_end_offset);
        PendingAck {
            partition: self.clone(),
            acks,
            base_offset,
            last_offset,
            records: 0,
            size_bytes: 0,
            duplicate: true,
        }
    }
}

impl PendingAck {
    /// Records appended.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes appended.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Waits for the acknowledgement level of `acks` (at once for `acks=0`), until `deadline`
    /// when there is one.
    pub async fn acknowledged(self, deadline: Option<AckDeadline>) -> Result<ProduceAck, Failure> {
        let Some(level) = self.acks.ack_level() else {
            return Ok(ProduceAck {
                base_offset: self.base_offset,
                log_start_offset: -1,
                duplicate: self.duplicate,
            });
        };
        let partition = self.partition.clone();
        let last_offset = self.last_offset;
        let acked = async move {
            if level == borges_storage::AckLevel::All && partition.log.is_replicated() {
                partition.wait_replicated(last_offset).await
            } else {
                let acked = partition.log.wait_acked(last_offset, level).await;
                acked.map_err(Failure::from)
            }
        };
        let outcome = match deadline {
            None => Some(acked.await),
            Some(d) => time::timeout(d.at.saturating_duration_since(Instant::now()), acked).await,
        };
        match outcome {
            Some(Ok(())) => {
                let offsets = self.partition.offsets();
                // acks=all waits for what the durability policy needs before consumers see
                // data, so an acknowledged record is below the high watermark.
                strict_assert!(
                    level != borges_storage::AckLevel::All
                        || offsets.high_watermark > self.last_offset,
                    "{}: offset {} acknowledged to acks=all above the high watermark {}",
                    self.partition.id,
                    self.last_offset,
                    offsets.high_watermark
                );
                Ok(ProduceAck {
                    base_offset: self.base_offset,
                    log_start_offset: offsets.log_start_offset,
                    duplicate: self.duplicate,
                })
            }
            Some(Err(f)) => Err(f),
            None => Err(Failure::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "not acknowledged within {} ms",
                    deadline.map_or(0, |d| d.timeout_ms)
                ),
            )),
        }
    }
}

impl PartitionTable {
    /// Appends every item now, in order (produce requests: local ones and those forwarded by
    /// other cores); returns the completion that waits for the acknowledgements, one deadline
    /// of `timeout_ms` for all of them, starting once everything is appended. One result per
    /// item, in order.
    pub async fn append_all(
        &self,
        items: Vec<AppendItem>,
        acks: Acks,
        timeout_ms: u32,
    ) -> impl Future<Output = Vec<Result<ProduceAck, Failure>>> + 'static {
        let mut appended = Vec::with_capacity(items.len());
        for item in items {
            let topic = item.partition.topic.clone();
            let pending = match self.get(&item.partition) {
                Ok(p) => p.append(item.batches, acks).await,
                Err(f) => Err(f),
            };
            if let Ok(p) = &pending {
                let metrics = self.metrics();
                metrics.record_produce(&topic, p.size_bytes(), p.records());
            }
            appended.push(pending);
        }
        let metrics = self.metrics().clone();
        let deadline = AckDeadline::after_ms(timeout_ms);
        async move {
            let mut out = Vec::with_capacity(appended.len());
            for pending in appended {
                let result = match pending {
                    Ok(p) => p.acknowledged(Some(deadline)).await,
                    Err(f) => Err(f),
                };
                if let Err(f) = &result {
                    metrics.produce_failed.set(metrics.produce_failed.get() + 1);
                    tracing::debug!(code = %f.code, "produce failed: {:?}", f.message);
                }
                out.push(result);
            }
            out
        }
    }
}
