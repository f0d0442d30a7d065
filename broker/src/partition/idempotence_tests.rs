//! Partition-level tests of the idempotent producer on a real log: the append path's checks,
//! duplicates answered with the original offsets, the state rebuilt after a crash (with and
//! without snapshots) and after a truncation, and followers' replicated batches.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_protocol::ErrorCode;
use borges_storage::{CoreStorage, LogConfig, PartitionLog, StorageConfig};
use bytes::BytesMut;

use super::{producer_snapshot, validate, Partition, ProduceAck};
use crate::config::ProducerSettings;
use crate::testing::on_one_core;
use crate::types::{Acks, PartitionRef};

fn settings() -> ProducerSettings {
    ProducerSettings {
        producer_snapshot_interval_ms: 1,
        ..ProducerSettings::default()
    }
}

async fn open(core: &Rc<CoreStorage>, dir: &Path) -> Rc<Partition> {
    let log = PartitionLog::open(core, dir.to_path_buf(), LogConfig::default())
        .await
        .unwrap();
    let id = PartitionRef {
        topic: Arc::from("t"),
        partition: 0,
    };
    Rc::new(
        Partition::open(id, 0, log, 0, 1, &settings())
            .await
            .unwrap(),
    )
}

/// One batch of `records` records from producer `pid`, `epoch`, first sequence `seq`.
fn batch(pid: i64, epoch: i16, seq: i32, records: i32) -> BytesMut {
    let mut b = BatchBuilder::new(BatchOptions::default(), 64);
    for i in 0..records {
        b.push(
            borges_runtime::time::now_ms(),
            None,
            Some(format!("v{seq}-{i}").as_bytes()),
            &[],
        );
    }
    b.set_producer(pid, epoch, seq);
    BytesMut::from(&b.build().unwrap()[..])
}

async fn send(p: &Rc<Partition>, bytes: BytesMut) -> Result<ProduceAck, ErrorCode> {
    let batches = validate(bytes, 1 << 20).map_err(|e| e.error_code())?;
    match p.append(batches, Acks::Leader).await {
        Ok(pending) => pending.acknowledged(None).await.map_err(|f| f.code),
        Err(f) => Err(f.code),
    }
}

/// Appends batch `seq..seq+records` of producer 1 epoch 0: its base offset.
async fn fresh(p: &Rc<Partition>, seq: i32, records: i32) -> i64 {
    let ack = send(p, batch(1, 0, seq, records)).await.unwrap();
    assert!(!ack.duplicate, "seq {seq} was new");
    ack.base_offset
}

async fn retry(p: &Rc<Partition>, seq: i32, records: i32) -> Result<ProduceAck, ErrorCode> {
    send(p, batch(1, 0, seq, records)).await
}

fn with_dirs<F, Fut>(f: F)
where
    F: FnOnce(PathBuf, PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    let dir = data.join("t-0");
    on_one_core(move || f(data, dir));
}

#[test]
fn duplicates_get_the_original_offsets_and_nothing_is_appended() {
    with_dirs(|data, dir| async move {
        let core = CoreStorage::new(&data, StorageConfig::default())
            .await
            .unwrap();
        let p = open(&core, &dir).await;
        assert_eq!(fresh(&p, 0, 3).await, 0);
        assert_eq!(fresh(&p, 3, 2).await, 3);
        let end = p.offsets().log_end_offset;
        let dup = retry(&p, 0, 3).await.unwrap();
        assert!(dup.duplicate && dup.base_offset == 0, "{dup:?}");
        assert_eq!(retry(&p, 3, 2).await.map(|a| a.base_offset), Ok(3));
        assert_eq!(
            retry(&p, 6, 1).await,
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            send(&p, batch(1, 0, 5, 1)).await.map(|a| a.duplicate),
            Ok(false)
        );
        assert_eq!(
            send(&p, batch(1, 1, 3, 1)).await,
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            p.offsets().log_end_offset,
            end + 1,
            "refused and duplicate batches add nothing"
        );
        p.close().await.unwrap();
    });
}

#[test]
fn the_state_survives_a_crash_with_and_without_a_snapshot() {
    with_dirs(|data, dir| async move {
        let core = CoreStorage::new(&data, StorageConfig::default())
            .await
            .unwrap();
        let p = open(&core, &dir).await;
        fresh(&p, 0, 4).await;
        fresh(&p, 4, 4).await;
        // A snapshot covers the first two batches; the third is only in the log.
        p.tick(borges_runtime::time::now_ms() + 1_000)
            .await
            .unwrap();
        assert_eq!(producer_snapshot::list(&dir), vec![8]);
        fresh(&p, 8, 4).await;
        p.log.flush().await.unwrap();
        p.log.crash_for_tests().await;
        drop(p);
        let p = open(&core, &dir).await;
        for (seq, base) in [(0, 0), (4, 4), (8, 8)] {
            assert_eq!(
                retry(&p, seq, 4)
                    .await
                    .map(|a| (a.duplicate, a.base_offset)),
                Ok((true, base))
            );
        }
        assert_eq!(
            retry(&p, 13, 1).await,
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        // Without any snapshot the whole log is replayed.
        p.log.crash_for_tests().await;
        drop(p);
        for o in producer_snapshot::list(&dir) {
            std::fs::remove_file(producer_snapshot::snapshot_path(&dir, o)).unwrap();
        }
        let p = open(&core, &dir).await;
        assert_eq!(retry(&p, 4, 4).await.map(|a| a.base_offset), Ok(4));
        assert_eq!(fresh(&p, 12, 1).await, 12);
        // A clean close leaves a snapshot at the log end: nothing to replay.
        p.close().await.unwrap();
        assert_eq!(producer_snapshot::list(&dir).last(), Some(&13));
    });
}

#[test]
fn truncation_rebuilds_the_state_from_the_snapshot_below_the_cut() {
    with_dirs(|data, dir| async move {
        let core = CoreStorage::new(&data, StorageConfig::default())
            .await
            .unwrap();
        let p = open(&core, &dir).await;
        for seq in [0, 2, 4] {
            fresh(&p, seq, 2).await;
        }
        let t0 = borges_runtime::time::now_ms();
        p.tick(t0 + 1_000).await.unwrap();
        for seq in [6, 8, 10] {
            fresh(&p, seq, 2).await;
        }
        p.tick(t0 + 2_000).await.unwrap();
        assert_eq!(producer_snapshot::list(&dir), vec![6, 12]);
        // Cut inside the batch at 8..=9: it goes too; the snapshot at 12 describes gone data.
        p.truncate_to(9).await.unwrap();
        assert_eq!(p.offsets().log_end_offset, 8);
        assert_eq!(producer_snapshot::list(&dir), vec![6]);
        // Kept batches are still recognised; removed ones are not (the producer resends them).
        assert_eq!(
            retry(&p, 6, 2).await.map(|a| (a.duplicate, a.base_offset)),
            Ok((true, 6))
        );
        assert_eq!(
            retry(&p, 10, 2).await,
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(fresh(&p, 8, 2).await, 8);
        // Below every snapshot: the state is replayed from the log start.
        p.truncate_to(3).await.unwrap();
        assert_eq!(p.offsets().log_end_offset, 2);
        assert_eq!(retry(&p, 0, 2).await.map(|a| a.base_offset), Ok(0));
        assert_eq!(fresh(&p, 2, 2).await, 2);
        p.close().await.unwrap();
    });
}

#[test]
fn a_follower_rebuilds_the_leaders_state_from_replicated_batches() {
    with_dirs(|data, dir| async move {
        let core = CoreStorage::new(&data, StorageConfig::default())
            .await
            .unwrap();
        let leader = open(&core, &dir).await;
        let follower = open(&core, &data.join("t-1")).await;
        for (seq, n) in [(0, 3), (3, 1), (4, 2)] {
            fresh(&leader, seq, n).await;
        }
        leader.log.sync().await.unwrap();
        let (bytes, _) = leader.read_bytes(0, 1 << 20).await.unwrap();
        // Appended as a follower (here: the same bytes at the same offsets), then leader.
        let batches = validate(BytesMut::from(&bytes[..]), 1 << 20).unwrap();
        let raw: Vec<BytesMut> = batches.into_iter().map(|b| b.into_bytes()).collect();
        follower.log.append(raw, 0).unwrap();
        follower.note_replicated(&bytes).unwrap();
        assert_eq!(
            retry(&follower, 3, 1)
                .await
                .map(|a| (a.duplicate, a.base_offset)),
            Ok((true, 3))
        );
        assert_eq!(fresh(&follower, 6, 1).await, 6);
        leader.close().await.unwrap();
        follower.close().await.unwrap();
    });
}
