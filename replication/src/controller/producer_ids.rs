//! Producer ids for idempotent producers (InitProducerId): handed out by the controller core
//! (core 0) from blocks of ids that are reserved durably before the first id of a block is
//! handed out, so that no id is ever handed out twice, across restarts too (a restart skips
//! the rest of the block it was using, as Kafka's `ProducerIdManager` does).
//!
//! Where the blocks come from is a seam ([`ProducerIdBlocks`]): on a single node a counter file
//! in the metadata directory ([`DurableCounter`]); in a cluster the controller's metadata log,
//! where each block is one committed record (Kafka's `ProducerIdsRecord`, allocated through
//! `AllocateProducerIds`), so that two brokers never get the same block.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_runtime::sync::Semaphore;

use super::{ControllerCluster, ControllerError, LocalFuture};
use crate::failure::Failure;
use crate::metadata::MetadataChange;

/// Ids reserved at once: one durable write per this many producers.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// The counter file inside the metadata directory (`<data>/meta/`).
pub const PRODUCER_IDS_FILE: &str = "producer-ids";

const MAGIC: &[u8; 8] = b"BRGSPID1";
const FILE_SIZE_BYTES: usize = 8 + 8 + 4;

/// What an idempotent producer stamps into its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    /// Never handed out twice.
    pub producer_id: i64,
    /// 0 for a fresh id.
    pub producer_epoch: i16,
}

/// Where blocks of producer ids come from. Lives on the controller core.
pub trait ProducerIdBlocks {
    /// Reserves `size` ids no one else was or will be given; durable before it resolves.
    fn reserve(&self, size: i64) -> LocalFuture<'_, Result<Range<i64>, Failure>>;
}

/// A single node's block source: the end of the last reserved block in a small file (magic,
/// next block start as big-endian i64, CRC-32C), replaced atomically and fsynced (file and
/// directory) before a block is used. Lives on core 0.
pub struct DurableCounter {
    path: PathBuf,
    next_block_start: Cell<i64>,
}

impl DurableCounter {
    /// Reads the counter in `meta_dir` (0 when the file does not exist yet). A file that exists
    /// but does not decode stops the broker: continuing could hand out ids twice.
    pub fn load(meta_dir: &Path) -> Result<DurableCounter, ControllerError> {
        let path = meta_dir.join(PRODUCER_IDS_FILE);
        let next = match std::fs::read(&path) {
            Ok(bytes) => decode(&bytes).map_err(|reason| {
                ControllerError::Damaged(format!(
                    "{} is damaged ({reason}); it records which producer ids were handed out, \
                     so the broker will not guess (restore it or remove it only if no \
                     idempotent producer ever wrote to this cluster)",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(cause) => {
                return Err(ControllerError::Io {
                    context: format!("reading {}", path.display()),
                    cause,
                })
            }
        };
        Ok(DurableCounter {
            path,
            next_block_start: Cell::new(next),
        })
    }
}

impl ProducerIdBlocks for DurableCounter {
    fn reserve(&self, size: i64) -> LocalFuture<'_, Result<Range<i64>, Failure>> {
        Box::pin(async move {
            assert!(size > 0, "a block holds ids");
            let start = self.next_block_start.get();
            let end = start.checked_add(size).ok_or_else(|| {
                Failure::new(ErrorCode::LimitExceeded, "producer ids are exhausted")
            })?;
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| storage_failure(&self.path, &e))?;
            }
            borges_runtime::fs::replace_file(&self.path, encode(end), true)
                .await
                .map_err(|e| storage_failure(&self.path, &e))?;
            self.next_block_start.set(end);
            Ok(start..end)
        })
    }
}

fn storage_failure(path: &Path, e: &std::io::Error) -> Failure {
    Failure::new(
        ErrorCode::StorageError,
        format!("cannot reserve producer ids in {}: {e}", path.display()),
    )
}

fn encode(next_block_start: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_SIZE_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&next_block_start.to_be_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn decode(src: &[u8]) -> Result<i64, String> {
    if src.len() != FILE_SIZE_BYTES {
        return Err(format!("size {} != {FILE_SIZE_BYTES}", src.len()));
    }
    let (body, crc) = src.split_at(FILE_SIZE_BYTES - 4);
    let stored = u32::from_be_bytes(crc.try_into().map_err(|_| "crc")?);
    if crc32c::crc32c(body) != stored {
        return Err("CRC mismatch".into());
    }
    if &body[..8] != MAGIC {
        return Err("bad magic".into());
    }
    let next = i64::from_be_bytes(body[8..16].try_into().map_err(|_| "counter")?);
    if next < 0 {
        return Err(format!("negative counter {next}"));
    }
    Ok(next)
}

/// Producer-id blocks reserved through the metadata log (Kafka's AllocateProducerIds), so
/// every broker of the cluster hands out ids no other broker does. Lives on the controller
/// core.
pub struct ClusterProducerIds(pub Arc<dyn ControllerCluster>);

impl ProducerIdBlocks for ClusterProducerIds {
    fn reserve(&self, size: i64) -> LocalFuture<'_, Result<Range<i64>, Failure>> {
        Box::pin(async move {
            let change = MetadataChange::AllocateProducerIds {
                broker: self.0.node_id(),
                size,
            };
            let reply = self.0.write(change).await?;
            if let Some((code, message)) = reply.error {
                return Err(Failure::new(ErrorCode::from_u16(code), message));
            }
            let start = reply.block_start.ok_or_else(|| {
                Failure::new(
                    ErrorCode::UnknownServerError,
                    "no producer-id block in the reply",
                )
            })?;
            Ok(start..start + size)
        })
    }
}

/// Hands out producer ids from reserved blocks, one request at a time. Lives on the
/// controller core.
pub struct ProducerIdManager {
    blocks: Box<dyn ProducerIdBlocks>,
    current: RefCell<Range<i64>>,
    /// One reservation at a time, so that two requests never reserve two blocks at once.
    lock: Rc<Semaphore>,
}

impl ProducerIdManager {
    /// A manager drawing blocks from `blocks`; nothing is reserved until the first request.
    pub fn new(blocks: Box<dyn ProducerIdBlocks>) -> ProducerIdManager {
        ProducerIdManager {
            blocks,
            current: RefCell::new(0..0),
            lock: Rc::new(Semaphore::new(1)),
        }
    }

    /// A fresh producer id with epoch 0 (a non-transactional producer that re-initialises gets
    /// a fresh id too).
    pub async fn next(&self) -> Result<ProducerIdAndEpoch, Failure> {
        let lock = self.lock.clone();
        let _permit = lock.acquire_static_permit(1).await;
        if self.current.borrow().is_empty() {
            let block = self.blocks.reserve(PRODUCER_ID_BLOCK_SIZE).await?;
            assert!(
                block.start >= self.current.borrow().end && !block.is_empty(),
                "blocks move forward: {block:?} after {:?}",
                self.current.borrow()
            );
            *self.current.borrow_mut() = block;
        }
        let producer_id = self
            .current
            .borrow_mut()
            .next()
            .expect("the block is not empty");
        Ok(ProducerIdAndEpoch {
            producer_id,
            producer_epoch: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a fresh single-core executor (as the broker's unit tests do).
    fn on_one_core<F, Fut, T>(f: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let config = borges_runtime::executor::ExecutorConfig {
            preempt_timer_ms: 1000,
            ..Default::default()
        };
        match borges_runtime::executor::run_on_one_core(&config, f) {
            Ok(t) => t,
            Err(e) => panic!("test executor failed: {e}"),
        }
    }

    #[test]
    fn counter_file_round_trips_and_refuses_damage() {
        let bytes = encode(123_000);
        assert_eq!(decode(&bytes), Ok(123_000));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad).is_err(), "flip at {i}");
        }
        assert!(decode(&bytes[..10]).is_err());
        assert!(decode(&encode(-5)).is_err());
    }

    #[test]
    fn ids_are_never_handed_out_twice_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let meta = dir.path().to_path_buf();
        on_one_core(move || async move {
            let mut seen = std::collections::HashSet::new();
            for restart in 0..3 {
                let counter = DurableCounter::load(&meta).unwrap();
                let manager = ProducerIdManager::new(Box::new(counter));
                for _ in 0..(PRODUCER_ID_BLOCK_SIZE + 5) {
                    let id = manager.next().await.unwrap();
                    assert_eq!(id.producer_epoch, 0);
                    assert!(
                        seen.insert(id.producer_id),
                        "restart {restart}: {id:?} again"
                    );
                }
            }
            // Each restart skipped the rest of its last block.
            let counter = DurableCounter::load(&meta).unwrap();
            assert_eq!(counter.next_block_start.get(), 6 * PRODUCER_ID_BLOCK_SIZE);
        });
    }
}
