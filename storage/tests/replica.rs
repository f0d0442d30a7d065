//! What replication asks of a partition log: truncation that is all or nothing across a crash
//! at any point, a leader-epoch cache that recovery never gets wrong, follower appends that
//! keep the leader's offsets and epochs and refuse what does not continue the log, and a high
//! watermark bound by replication.

mod common;

use std::path::Path;
use std::rc::Rc;

use borges_runtime::fault::{Fault, FaultOp, FaultRule, PowerLoss};
use borges_runtime::fs::Disk;
use borges_runtime::time::Clock;
use borges_storage::{
    Durability, LogConfig, PartitionLog, ReadBound, StorageConfig, StorageError,
    TRUNCATION_INTENT_FILE,
};
use bytes::BytesMut;
use common::*;

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 8 * 1024,
        index_interval_bytes: 256,
        durability: Durability::Fsync,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn storage() -> StorageConfig {
    StorageConfig {
        recovery_checkpoint_interval_ms: 20,
        ..storage_config()
    }
}

/// Epoch of the i-th of the 30 batches the truncation tests write: 1, then 2, then 4.
fn epoch_of(i: u64) -> i32 {
    match i {
        0..=9 => 1,
        10..=19 => 2,
        _ => 4,
    }
}

/// 30 batches of 3 records (~620 bytes each: three segments of 8 KiB), epochs 1, 2, 4,
/// synced.
async fn thirty_batches(log: &PartitionLog) {
    for i in 0..30u64 {
        let info = log
            .append(vec![batch(i * 3, 3, 1_000 + i as i64, 180)], epoch_of(i))
            .expect("append");
        assert_eq!(info.base_offset, i as i64 * 3);
    }
    log.sync().await.expect("sync");
    assert!(log.segment_count() >= 3, "the log spans several segments");
}

/// What a test compares: the bytes of the log and its answers to OffsetForLeaderEpoch.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    end: i64,
    bytes: Vec<u8>,
    epochs: Vec<Option<(i32, i64)>>,
}

async fn snapshot(log: &PartitionLog) -> Snapshot {
    Snapshot {
        end: log.offsets().log_end_offset,
        bytes: log_bytes(log).await,
        epochs: (0..6).map(|e| log.epoch_end_offset(e)).collect(),
    }
}

const CUT_AT: i64 = 37; // inside batch 12 (offsets 36..38), epoch 2, in the second segment
const RESTART_AT: i64 = 500; // past the log end: a follower behind the leader's log start

/// What the crash tests interrupt.
#[derive(Clone, Copy, Debug)]
enum Cut {
    Truncate,
    Restart,
}

impl Cut {
    async fn run(self, log: &PartitionLog) -> Result<(), StorageError> {
        match self {
            Cut::Truncate => log.truncate_to(CUT_AT).await,
            Cut::Restart => log.restart_at(RESTART_AT).await,
        }
    }
}

/// The old and the truncated (or restarted) log, from a run without faults.
async fn reference(root: &Path, cut: Cut) -> (Snapshot, Snapshot) {
    let (core, _faulty) = faulty_core(root, storage()).await;
    let log = open(&core, &root.join(format!("ref-{cut:?}-0")), log_config()).await;
    thirty_batches(&log).await;
    let old = snapshot(&log).await;
    cut.run(&log).await.expect("truncate");
    let after = snapshot(&log).await;
    match cut {
        Cut::Truncate => {
            assert_eq!(after.end, 36, "the whole batch holding the cut goes");
            assert_eq!(after.epochs[2], Some((2, 36)));
            assert_eq!(after.epochs[4], None, "epoch 4 is gone with its batches");
        }
        Cut::Restart => {
            let o = log.offsets();
            assert_eq!(
                (o.log_start_offset, o.log_end_offset),
                (RESTART_AT, RESTART_AT)
            );
            assert_eq!(after.epochs, vec![None; 6], "no epochs in an empty log");
        }
    }
    log.close().await.expect("close");
    (old, after)
}

/// How many operations of kind `op` a truncation does.
async fn ops_in_truncation(root: &Path, op: FaultOp, cut: Cut) -> u64 {
    let name = format!("count-{op:?}-{cut:?}");
    let (core, faulty) = faulty_core(root, storage()).await;
    let log = open(&core, &root.join(format!("{name}-0")), log_config()).await;
    thirty_batches(&log).await;
    let before = faulty.count(op, &name);
    cut.run(&log).await.expect("truncate");
    let n = faulty.count(op, &name) - before;
    log.close().await.expect("close");
    n
}

/// The truncation stops before its `skip`-th operation of kind `op` (the operation fails,
/// as if the process died there), the process crashes, the power may go; the reopened log
/// is the old one or the truncated one, indexes and epochs included.
async fn crash_inside_truncation(
    root: &Path,
    (cut_kind, op, skip): (Cut, FaultOp, u64),
    power_loss: bool,
    (old, cut): (&Snapshot, &Snapshot),
) {
    let name = format!("c-{cut_kind:?}-{op:?}-{skip}-{power_loss}");
    let dir = root.join(format!("{name}-0"));
    let (core, faulty) = faulty_core(root, storage()).await;
    let log = open(&core, &dir, log_config()).await;
    thirty_batches(&log).await;
    faulty.inject(
        FaultRule::new(op, Fault::Fail(libc::EIO))
            .on_path(&name)
            .after(skip)
            .forever(),
    );
    let _ = cut_kind.run(&log).await;
    log.crash_for_tests().await;
    if power_loss {
        faulty
            .power_loss(PowerLoss::DropUnsynced)
            .expect("power loss");
    }
    faulty.clear_faults();
    drop((log, core));
    let core = core_on(root, storage(), Disk::Faulty(faulty.clone()), Clock::System).await;
    let log = open(&core, &dir, log_config()).await;
    let got = snapshot(&log).await;
    assert!(
        got == *old || got == *cut,
        "{op:?} #{skip} power loss {power_loss}: log ends at {} (old {}, truncated {}), \
         epochs {:?}",
        got.end,
        old.end,
        cut.end,
        got.epochs
    );
    assert!(
        !dir.join(TRUNCATION_INTENT_FILE).exists(),
        "intent finished"
    );
    log.verify().await.expect("closed segments verify");
    let next = got.end as u64;
    let info = log
        .append(vec![batch(next, 1, 0, 10)], 7)
        .expect("the recovered log takes appends");
    assert_eq!(info.base_offset, got.end);
    log.close().await.expect("close");
}

const OP_KINDS: [FaultOp; 7] = [
    FaultOp::Open,
    FaultOp::Write,
    FaultOp::Sync,
    FaultOp::Truncate,
    FaultOp::Rename,
    FaultOp::Remove,
    FaultOp::SyncDir,
];

/// Stops `cut` before each of its file operations in turn; returns how many there were.
async fn crash_at_every_step(root: &Path, cut: Cut, power_losses: &[bool]) -> usize {
    let (old, after) = reference(root, cut).await;
    let mut points = 0;
    for op in OP_KINDS {
        let n = ops_in_truncation(root, op, cut).await;
        for skip in 0..n {
            for &power_loss in power_losses {
                crash_inside_truncation(root, (cut, op, skip), power_loss, (&old, &after)).await;
            }
            points += 1;
        }
    }
    points
}

#[test]
fn a_crash_at_any_point_of_a_truncation_leaves_the_old_or_the_truncated_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let points = crash_at_every_step(&root, Cut::Truncate, &[false, true]).await;
        assert!(points >= 15, "a truncation has many steps ({points} seen)");
    });
}

#[test]
fn a_crash_at_any_point_of_a_restart_leaves_the_old_or_the_restarted_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let points = crash_at_every_step(&root, Cut::Restart, &[false]).await;
        assert!(points >= 8, "a restart has several steps ({points} seen)");
    });
}

/// The epoch file is written before the checkpoint that covers its batches: when writing it
/// fails, recovery still knows where epoch 2 began (rebuilt from the older checkpoint on).
#[test]
fn a_failed_epoch_file_write_never_loses_where_an_epoch_began() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let path = root.join("e-0");
        let (core, faulty) = faulty_core(&root, storage()).await;
        let log = open(&core, &path, log_config()).await;
        for i in 0..5u64 {
            log.append(vec![batch(i, 1, 0, 400)], 1).expect("append");
        }
        log.close().await.expect("close");
        let log = open(&core, &path, log_config()).await;
        for i in 5..15u64 {
            log.append(vec![batch(i, 1, 0, 400)], 2).expect("append");
        }
        log.sync().await.expect("sync");
        faulty.inject(
            FaultRule::new(FaultOp::Rename, Fault::Fail(libc::EIO)).on_path("leader-epoch"),
        );
        assert!(
            log.close().await.is_err(),
            "the epoch file cannot be replaced"
        );
        drop((log, core));
        faulty.clear_faults();
        let core = core_on(
            &root,
            storage(),
            Disk::Faulty(faulty.clone()),
            Clock::System,
        )
        .await;
        let log = open(&core, &path, log_config()).await;
        assert_eq!(log.offsets().log_end_offset, 15);
        assert_eq!(log.epoch_end_offset(1), Some((1, 5)), "epoch 2 began at 5");
        assert_eq!(log.epoch_end_offset(2), Some((2, 15)));
        log.close().await.expect("close");
    });
}

/// A leader's log whose batches a follower copies.
async fn leader_batches(root: &Path, epochs: &[i32]) -> Vec<BytesMut> {
    let core = core(root, storage()).await;
    let log = open(&core, &root.join("leader-0"), log_config()).await;
    for (i, &e) in epochs.iter().enumerate() {
        log.append(vec![batch(i as u64 * 2, 2, 0, 50)], e)
            .expect("append");
    }
    let all = read_all(&log, 0, ReadBound::LogEnd).await;
    log.close().await.expect("close");
    all.iter()
        .map(|b| BytesMut::from(&b.as_bytes()[..]))
        .collect()
}

#[test]
fn a_follower_keeps_the_leaders_offsets_and_epochs_and_refuses_what_does_not_follow() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let leader = leader_batches(&root, &[1, 1, 3, 3, 3, 6]).await;
        let core = core(&root, storage()).await;
        let path = root.join("follower-0");
        let log = open(&core, &path, log_config()).await;
        follower_refusals(&log, &leader);
        log.append_as_follower(leader[4..].to_vec())
            .expect("append");
        let got: Vec<u8> = log_bytes(&log).await;
        let want: Vec<u8> = leader.iter().flat_map(|b| b.to_vec()).collect();
        assert!(
            got == want,
            "the follower's log is the leader's, byte for byte"
        );
        assert_eq!(log.epoch_end_offset(1), Some((1, 4)));
        assert_eq!(log.epoch_end_offset(5), Some((3, 10)));
        // Truncated to the end of epoch 1, it takes batches of epoch 2 (a new leader's).
        log.truncate_to(4).await.expect("truncate");
        let mut other = leader[2].clone();
        borges_protocol::batch::set_partition_leader_epoch(&mut other, 2);
        log.append_as_follower(vec![other])
            .expect("append after truncation");
        log.sync().await.expect("sync");
        log.crash_for_tests().await;
        let log = open(&core, &path, log_config()).await;
        assert_eq!(log.offsets().log_end_offset, 6);
        assert_eq!(log.epoch_end_offset(1), Some((1, 4)));
        assert_eq!(log.epoch_end_offset(2), Some((2, 6)));
        log.close().await.expect("close");
    });
}

/// A follower's appends that do not continue the log are refused whole; the first four
/// leader batches are then appended.
fn follower_refusals(log: &PartitionLog, leader: &[BytesMut]) {
    let err = log.append_as_follower(vec![leader[1].clone()]).unwrap_err();
    let not_at_end = StorageError::UnexpectedAppendOffset {
        base_offset: 2,
        expected_offset: 0,
    };
    assert_eq!(err.to_string(), not_at_end.to_string());
    // A flipped bit inside the CRC range: refused, and nothing of the request appended.
    let mut bad = leader[1].clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    let err = log
        .append_as_follower(vec![leader[0].clone(), bad])
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidBatch(_)), "{err}");
    assert_eq!(log.offsets().log_end_offset, 0);
    let info = log
        .append_as_follower(leader[..4].to_vec())
        .expect("append");
    assert_eq!((info.base_offset, info.last_offset), (0, 7));
    assert_eq!(log.latest_epoch(), Some(3));
    // An epoch below the latest one: the follower did not truncate first.
    let mut stale = leader[4].clone();
    borges_protocol::batch::set_partition_leader_epoch(&mut stale, 2);
    let err = log.append_as_follower(vec![stale]).unwrap_err();
    let regression = StorageError::EpochRegression {
        base_offset: 8,
        epoch: 2,
        latest_epoch: 3,
    };
    assert_eq!(err.to_string(), regression.to_string());
}

#[test]
fn a_replicated_high_watermark_stops_at_the_bound_and_releases_acks_all() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let core = core(&root, storage()).await;
        let log: Rc<PartitionLog> = open(&core, &root.join("hw-0"), log_config()).await;
        log.append(vec![batch(0, 2, 0, 10)], 1).expect("append");
        log.sync().await.expect("sync");
        assert_eq!(
            log.offsets().high_watermark,
            2,
            "not replicated: the policy point"
        );
        log.set_replicated(true);
        for i in 0..4u64 {
            log.append(vec![batch(2 + i * 2, 2, 0, 10)], 1)
                .expect("append");
        }
        log.sync().await.expect("sync");
        let o = log.offsets();
        assert_eq!(
            (o.high_watermark, o.log_end_offset),
            (2, 10),
            "synced, not replicated"
        );
        let waiter = {
            let log = log.clone();
            borges_runtime::task::spawn(async move { log.wait_committed(7).await })
        };
        // A bound inside a batch: the high watermark stops at the batch boundary below it.
        assert!(log.set_replication_hw(5));
        assert_eq!(log.offsets().high_watermark, 4);
        let read = read_all(&log, 0, ReadBound::HighWatermark).await;
        assert_eq!(
            read.last().map(|b| b.last_offset()),
            Some(3),
            "consumers stop there"
        );
        assert!(log.set_replication_hw(8));
        waiter
            .await
            .expect("acks=all released once the high watermark passes offset 7");
        assert!(!log.set_replication_hw(6), "never backwards");
        assert_eq!(log.offsets().high_watermark, 8);
        // Truncation below a waiter fails it.
        let info = log.append(vec![batch(10, 2, 0, 10)], 2).expect("append");
        let waiter = {
            let log = log.clone();
            borges_runtime::task::spawn(async move { log.wait_committed(info.last_offset).await })
        };
        log.sync().await.expect("sync");
        log.truncate_to(10).await.expect("truncate");
        assert!(matches!(waiter.await, Err(StorageError::Truncated { .. })));
        log.set_replicated(false);
        assert_eq!(log.offsets().high_watermark, 10, "back to the policy point");
        log.close().await.expect("close");
    });
}

/// A former leader's epoch begun at the log end, without batches, goes with a truncation to
/// the log end (Kafka's rule): else, as a follower, it would fetch with that epoch forever.
#[test]
fn truncation_to_the_log_end_drops_an_epoch_begun_there() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let core = core(&root, storage()).await;
        let log = open(&core, &root.join("begun-0"), log_config()).await;
        log.append(vec![batch(0, 2, 0, 10)], 3).expect("append");
        assert!(log.begin_epoch(5));
        assert_eq!(log.latest_epoch(), Some(5));
        assert_eq!(log.epoch_end_offset(4), Some((3, 2)));
        log.truncate_to(2).await.expect("truncate");
        assert_eq!(log.latest_epoch(), Some(3));
        assert_eq!(log.offsets().log_end_offset, 2, "no batch removed");
        log.close().await.expect("close");
    });
}
