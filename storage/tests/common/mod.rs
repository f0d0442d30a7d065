//! Helpers shared by the storage integration tests: real files in a temp dir, real glommio.
#![allow(dead_code)]

use std::path::Path;
use std::rc::Rc;

use borges_protocol::batch::{BatchBuilder, BatchOptions, Compression, RecordBatch};
use borges_storage::{CoreStorage, Durability, LogConfig, PartitionLog, ReadBound, StorageConfig};
use bytes::{Bytes, BytesMut};

/// Runs `f` on a fresh single-core executor (its own thread), one executor at a time.
///
/// The executor uses a long preemption timer: glommio 0.9.0 can park an executor that still has
/// runnable tasks when its preemption timer fires at the top of the scheduler loop (the upstream
/// fix is "do not park the executor while a task queue is still runnable"); with the 2 ms timer
/// of `run_local` the model test hung about one run in four on this loaded 2-vCPU machine, with
/// 1000 ms none in 46 runs. Executors also run one at a time in a test binary (several started
/// and stopped concurrently made the same hang more frequent).
pub fn run<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    static ONE_EXECUTOR_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = ONE_EXECUTOR_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let config = borges_runtime::executor::ExecutorConfig {
        preempt_timer_ms: 1000,
        ..Default::default()
    };
    match borges_runtime::executor::run_on_one_core(&config, f) {
        Ok(t) => t,
        Err(e) => panic!("test executor failed: {e}"),
    }
}

/// A batch of `records` records whose values encode `first_value..` and have `timestamp_ms`
/// increasing by one per record; `pad` bytes of payload per record.
pub fn batch(first_value: u64, records: u32, timestamp_ms: i64, pad: usize) -> BytesMut {
    let mut b = BatchBuilder::new(BatchOptions::default(), 64 + pad * records as usize);
    for i in 0..records {
        let mut value = format!("v{}-", first_value + u64::from(i)).into_bytes();
        value.resize(value.len() + pad, b'x');
        b.push(timestamp_ms + i64::from(i), None, Some(&value), &[]);
    }
    BytesMut::from(&b.build().expect("batch builds")[..])
}

/// A zstd-compressed variant of [`batch`].
pub fn zstd_batch(first_value: u64, records: u32, timestamp_ms: i64) -> BytesMut {
    let mut b = BatchBuilder::new(
        BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        1024,
    );
    for i in 0..records {
        let value = format!("z{}", first_value + u64::from(i)).into_bytes();
        b.push(timestamp_ms + i64::from(i), None, Some(&value), &[]);
    }
    BytesMut::from(&b.build().expect("batch builds")[..])
}

/// A small log config: tiny segments and index interval so rolls and index use happen quickly.
pub fn small_config(durability: Durability) -> LogConfig {
    LogConfig {
        segment_size_bytes: 16 * 1024,
        index_interval_bytes: 512,
        durability,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Storage config with small budgets.
pub fn storage_config() -> StorageConfig {
    StorageConfig {
        write_buffer_bytes_max: 8 << 20,
        tail_cache_bytes_max: 64 * 1024,
        open_files_max: 8,
        write_size_bytes_max: 64 * 1024,
        recovery_checkpoint_interval_ms: 1000,
        recovery_checkpoints_per_s_max: 100,
        ..StorageConfig::default()
    }
}

pub async fn core(dir: &Path, config: StorageConfig) -> Rc<CoreStorage> {
    CoreStorage::new(dir, config).await.expect("core storage")
}

/// A core on `disk` with `clock` (the fault and time seams).
pub async fn core_on(
    dir: &Path,
    config: StorageConfig,
    disk: borges_runtime::fs::Disk,
    clock: borges_runtime::time::Clock,
) -> Rc<CoreStorage> {
    CoreStorage::with_seams(
        dir,
        config,
        borges_storage::StorageTuning::default(),
        disk,
        clock,
    )
    .await
    .expect("core storage")
}

/// A core on a fresh faulty disk, with the system clock.
pub async fn faulty_core(
    dir: &Path,
    config: StorageConfig,
) -> (Rc<CoreStorage>, Rc<borges_runtime::fault::FaultyDisk>) {
    let faulty = borges_runtime::fault::FaultyDisk::new();
    let disk = borges_runtime::fs::Disk::Faulty(faulty.clone());
    let core = core_on(dir, config, disk, borges_runtime::time::Clock::System).await;
    (core, faulty)
}

/// `batch(..)` stamped as `append` will store it (base offset, leader epoch), as bytes.
pub fn stamped(b: &BytesMut, base_offset: i64, leader_epoch: i32) -> Vec<u8> {
    let mut s = b.clone();
    borges_protocol::batch::set_base_offset(&mut s, base_offset);
    borges_protocol::batch::set_partition_leader_epoch(&mut s, leader_epoch);
    s.to_vec()
}

/// Every byte of the log from its start to its end (`LogEnd`), batch by batch.
pub async fn log_bytes(log: &PartitionLog) -> Vec<u8> {
    let start = log.offsets().log_start_offset;
    read_all(log, start, ReadBound::LogEnd)
        .await
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect()
}

pub async fn open(core: &Rc<CoreStorage>, dir: &Path, config: LogConfig) -> Rc<PartitionLog> {
    PartitionLog::open(core, dir.to_path_buf(), config)
        .await
        .expect("log opens")
}

/// Every batch from `offset` to the log end (or high watermark), parsed.
pub async fn read_all(log: &PartitionLog, offset: i64, bound: ReadBound) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut cur = offset;
    loop {
        let (bytes, offsets) = log.read_bytes(cur, 256 * 1024, bound).await.expect("read");
        if bytes.is_empty() {
            break;
        }
        let batches = RecordBatch::parse_many(&bytes).expect("valid batches");
        cur = batches.last().expect("some").last_offset() + 1;
        out.extend(batches);
        let end = match bound {
            ReadBound::HighWatermark => offsets.high_watermark,
            ReadBound::LogEnd => offsets.log_end_offset,
        };
        if cur >= end {
            break;
        }
    }
    out
}

/// The record values of `batches`, in order.
pub fn values(batches: &[RecordBatch]) -> Vec<(i64, Bytes)> {
    batches
        .iter()
        .flat_map(|b| b.records(1 << 24).expect("records decode"))
        .map(|r| (r.offset, r.value.expect("value")))
        .collect()
}

/// Checks that record `offset` holds value `v<offset>-...` (as written by [`batch`] with
/// `first_value` = base offset).
pub fn assert_values_match_offsets(batches: &[RecordBatch]) {
    for (offset, value) in values(batches) {
        let prefix = format!("v{offset}-");
        assert!(
            value.starts_with(prefix.as_bytes()),
            "offset {offset} holds {:?}",
            String::from_utf8_lossy(&value[..value.len().min(20)])
        );
    }
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").len()
}

/// The index a scan of `log` (a segment file's bytes, up to its first invalid batch) builds, as
/// the writer builds it (the last time entry included).
pub fn index_of_segment(
    base: i64,
    log: &[u8],
    interval: u32,
) -> borges_storage::index::SegmentIndex {
    let mut index = borges_storage::index::SegmentIndex::new();
    let mut pos = 0usize;
    while let Ok(h) = borges_protocol::batch::BatchHeader::parse(&log[pos..]) {
        if h.size_bytes() == 0 || pos + h.size_bytes() > log.len() {
            break;
        }
        let rel = (h.base_offset - base) as u32;
        index.note_batch(
            interval,
            base,
            rel,
            pos as u32,
            h.size_bytes() as u64,
            h.max_timestamp,
        );
        pos += h.size_bytes();
    }
    index.push_time_entry(base, 0);
    index
}
