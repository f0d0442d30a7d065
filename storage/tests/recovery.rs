//! Recovery after unclean stops and damaged files: torn tails are cut, damage before the
//! recovery point is refused, missing indexes are rebuilt.

mod common;

use std::path::Path;

use borges_storage::{
    segment_path, Durability, LogConfig, ReadBound, StorageConfig, StorageError, INDEX_SUFFIX,
    LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use common::*;

/// One segment, checkpoints only at open: everything appended is after the recovery point.
fn unclean_config() -> (LogConfig, StorageConfig) {
    let log = LogConfig {
        segment_size_bytes: 1 << 20,
        index_interval_bytes: 256,
        durability: Durability::None,
        ..LogConfig::default()
    };
    let storage = StorageConfig {
        recovery_checkpoint_interval_ms: 3_600_000,
        ..storage_config()
    };
    (log, storage)
}

/// Appends 50 batches of 2 records (offsets 0..100), flushes, crashes. Returns the end
/// position of every batch in segment 0.
fn write_and_crash(dir: &Path) -> Vec<u64> {
    let root = dir.to_path_buf();
    run(move || async move {
        let dir = root.as_path();
        let (log_cfg, st_cfg) = unclean_config();
        let core = core(dir, st_cfg).await;
        let log = open(&core, &dir.join("p-0"), log_cfg).await;
        let mut ends = Vec::new();
        let mut pos = 0u64;
        for i in 0..50u64 {
            let b = batch(i * 2, 2, i as i64, 50 + (i as usize % 7) * 20);
            pos += b.len() as u64;
            ends.push(pos);
            log.append(vec![b], 0).unwrap();
        }
        log.flush().await.unwrap();
        log.crash_for_tests().await;
        ends
    })
}

fn reopen_and_read(
    dir: &Path,
) -> Result<(i64, Vec<borges_protocol::batch::RecordBatch>), StorageError> {
    let root = dir.to_path_buf();
    run(move || async move {
        let dir = root.as_path();
        let (log_cfg, st_cfg) = unclean_config();
        let core = core(dir, st_cfg).await;
        let log = borges_storage::PartitionLog::open(&core, dir.join("p-0"), log_cfg).await?;
        let end = log.offsets().log_end_offset;
        let batches = read_all(&log, 0, ReadBound::HighWatermark).await;
        // The log keeps working after recovery.
        let info = log.append(vec![batch(end as u64, 1, 0, 10)], 0)?;
        assert_eq!(info.base_offset, end);
        log.close().await?;
        Ok((end, batches))
    })
}

fn log0(dir: &Path) -> std::path::PathBuf {
    segment_path(&dir.join("p-0"), 0, LOG_SUFFIX)
}

fn modify(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn unflushed_crash_keeps_every_flushed_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path());
    // The active file is pre-allocated: zeros follow the data.
    assert!(file_len(&log0(dir.path())) > *ends.last().unwrap());
    let (end, batches) = reopen_and_read(dir.path()).unwrap();
    assert_eq!(end, 100);
    assert_eq!(batches.len(), 50);
    assert_values_match_offsets(&batches);
}

#[test]
fn truncated_tail_is_cut_at_the_last_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path());
    modify(&log0(dir.path()), |b| b.truncate(ends[40] as usize + 10));
    let (end, batches) = reopen_and_read(dir.path()).unwrap();
    assert_eq!(end, 82);
    assert_eq!(batches.len(), 41);
    assert_values_match_offsets(&batches);
}

#[test]
fn flipped_bit_in_the_last_batch_cuts_that_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path());
    modify(&log0(dir.path()), |b| b[ends[48] as usize + 40] ^= 0x01);
    let (end, batches) = reopen_and_read(dir.path()).unwrap();
    assert_eq!(end, 98);
    assert_eq!(batches.len(), 49);
}

#[test]
fn zeroed_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path());
    modify(&log0(dir.path()), |b| {
        let from = ends[44] as usize + 5;
        b[from..].fill(0);
    });
    let (end, batches) = reopen_and_read(dir.path()).unwrap();
    assert_eq!(end, 90);
    assert_values_match_offsets(&batches);
}

#[test]
fn garbage_after_the_last_batch_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ends = write_and_crash(dir.path());
    modify(&log0(dir.path()), |b| {
        let at = ends[49] as usize;
        b[at..at + 100].fill(0x5a);
    });
    let (end, _) = reopen_and_read(dir.path()).unwrap();
    assert_eq!(end, 100);
}

/// Closes cleanly a log of many small segments; returns the segment bases.
fn write_closed(dir: &Path) -> Vec<i64> {
    let root = dir.to_path_buf();
    run(move || async move {
        let dir = root.as_path();
        let core = core(dir, storage_config()).await;
        let log = open(&core, &dir.join("p-0"), small_config(Durability::Fsync)).await;
        for i in 0..300u64 {
            log.append(vec![batch(i * 2, 2, 1_000 * i as i64, 100)], 0)
                .unwrap();
        }
        log.close().await.unwrap();
        let mut bases: Vec<i64> = std::fs::read_dir(dir.join("p-0"))
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().into_owned();
                n.strip_suffix(".log").map(|s| s.parse().unwrap())
            })
            .collect();
        bases.sort();
        bases
    })
}

#[test]
fn damage_before_the_recovery_point_is_refused_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let bases = write_closed(dir.path());
    let last = segment_path(&dir.path().join("p-0"), *bases.last().unwrap(), LOG_SUFFIX);
    let len = file_len(&last);
    modify(&last, |b| b.truncate(len as usize - 30));
    let err = reopen_and_read(dir.path()).unwrap_err();
    assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    assert_eq!(file_len(&last), len - 30, "nothing was cut");
}

#[test]
fn deleted_index_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let bases = write_closed(dir.path());
    assert!(bases.len() > 3);
    for base in &bases {
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            std::fs::remove_file(segment_path(&dir.path().join("p-0"), *base, suffix)).unwrap();
        }
    }
    let root = dir.path().to_path_buf();
    run(move || async move {
        let dir = root.as_path();
        let core = core(dir, storage_config()).await;
        let log = open(&core, &dir.join("p-0"), small_config(Durability::Fsync)).await;
        assert_eq!(log.offsets().log_end_offset, 600);
        let batches = read_all(&log, 0, ReadBound::HighWatermark).await;
        assert_eq!(batches.len(), 300);
        assert_values_match_offsets(&batches);
        assert_eq!(
            log.offset_for_timestamp(150_000).await.unwrap(),
            Some((300, 150_000))
        );
        assert_eq!(log.max_timestamp().await.unwrap(), Some((599, 299_001)));
        let (mid, _) = log
            .read_bytes(333, 1, ReadBound::HighWatermark)
            .await
            .unwrap();
        assert!(!mid.is_empty());
        log.close().await.unwrap();
    });
    for base in &bases {
        let idx = segment_path(&dir.path().join("p-0"), *base, INDEX_SUFFIX);
        assert!(idx.exists(), "{} rebuilt", idx.display());
    }
}

#[test]
fn flipped_bit_in_an_old_segment_makes_the_partition_refuse_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let bases = write_closed(dir.path());
    let first = segment_path(&dir.path().join("p-0"), bases[0], LOG_SUFFIX);
    let len = file_len(&first);
    modify(&first, |b| b[30] ^= 0x20);
    let root = dir.path().to_path_buf();
    let bases_in = bases.clone();
    run(move || async move {
        let dir = root.as_path();
        let bases = bases_in;
        let core = core(dir, storage_config()).await;
        let log = open(&core, &dir.join("p-0"), small_config(Durability::Fsync)).await;
        // The damaged segment is before the recovery point: open trusts it, reads catch it.
        let later = bases[2];
        assert!(log
            .read_bytes(later, 1000, ReadBound::HighWatermark)
            .await
            .is_ok());
        let err = log
            .read_bytes(0, 1000, ReadBound::HighWatermark)
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
        // Marked: the partition now refuses everything.
        assert!(matches!(
            log.read_bytes(later, 1000, ReadBound::HighWatermark).await,
            Err(StorageError::Corrupt { .. })
        ));
        assert!(matches!(
            log.append(vec![batch(600, 1, 0, 1)], 0),
            Err(StorageError::Corrupt { .. })
        ));
        log.close().await.unwrap();
        let log = open(&core, &dir.join("p-0"), small_config(Durability::Fsync)).await;
        let err = log.verify().await.unwrap_err();
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
        log.close().await.unwrap();
    });
    assert_eq!(file_len(&first), len, "never cut");
}
