//! The storage on a faulty disk (`borges_runtime::fault`): injected write and fdatasync
//! errors, torn writes, slow fdatasyncs, simulated power loss, and a clock the test moves.
//! Checked: recovery never loses a record whose durability was promised (synced under `fsync`,
//! flushed against a process crash), never serves bytes that were not appended (a torn write is
//! cut), a failed write or fdatasync takes the log directory offline for every log of the core,
//! and an fdatasync really happens before an `acks=all` acknowledgement under `fsync`.

mod common;

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use borges_runtime::fault::{Fault, FaultOp, FaultRule, FaultyDisk, PowerLoss};
use borges_runtime::fs::Disk;
use borges_runtime::time::Clock;
use borges_storage::{
    AckLevel, CoreStorage, Durability, LogConfig, PartitionLog, ReadBound, StorageConfig,
    StorageError,
};
use common::*;
use proptest::prelude::*;

const EPOCH: i32 = 5;

fn log_config(durability: Durability) -> LogConfig {
    LogConfig {
        segment_size_bytes: 8 * 1024,
        index_interval_bytes: 256,
        durability,
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

/// What the test appended and what the log promised about it.
#[derive(Default)]
struct Model {
    /// Stamped batches in offset order: (base offset, offset after, bytes).
    batches: Vec<(i64, i64, Vec<u8>)>,
    end: i64,
    /// Every offset below it was acknowledged at `AckLevel::All`.
    acked_end: i64,
    /// The highest high watermark seen: consumers may have read everything below it.
    exposed_end: i64,
}

impl Model {
    fn append(&mut self, log: &PartitionLog, specs: &[(u32, usize)]) -> Result<(), StorageError> {
        let mut next = self.end;
        let mut batches = Vec::new();
        let mut stamped_batches = Vec::new();
        for &(records, pad) in specs {
            let b = batch(next as u64, records, 1_000 + next, pad);
            let after = next + i64::from(records);
            stamped_batches.push((next, after, stamped(&b, next, EPOCH)));
            batches.push(b);
            next = after;
        }
        let info = log.append(batches, EPOCH)?;
        assert_eq!((info.base_offset, info.last_offset), (self.end, next - 1));
        self.batches.extend(stamped_batches);
        self.end = next;
        Ok(())
    }

    /// The bytes of the batches ending at or before `end`; `None` if `end` is no batch boundary.
    fn prefix(&self, end: i64) -> Option<Vec<u8>> {
        if end != 0 && !self.batches.iter().any(|b| b.1 == end) {
            return None;
        }
        Some(
            self.batches
                .iter()
                .filter(|b| b.1 <= end)
                .flat_map(|b| b.2.clone())
                .collect(),
        )
    }
}

/// A refusal after a failure must be the failed-directory error, with the core failed.
fn assert_offline(core: &CoreStorage, err: &StorageError) {
    assert!(
        matches!(err, StorageError::LogDirFailed(_)),
        "after a failure: {err}"
    );
    assert!(core.is_failed(), "an error means the directory is offline");
}

#[derive(Clone, Debug)]
enum Step {
    /// Appends batches of (records, padding bytes per record), without waiting.
    Append(Vec<(u32, usize)>),
    /// Waits until everything appended is acknowledged at `AckLevel::All`.
    AckAll,
    /// Adds a fault rule.
    Inject(FaultOp, &'static str, Fault, u64),
}

fn step() -> impl Strategy<Value = Step> {
    let fault = prop_oneof![
        Just((FaultOp::Write, ".log", Fault::Fail(libc::EIO))),
        (0usize..2000).prop_map(|k| (FaultOp::Write, ".log", Fault::Torn { keep_bytes: k })),
        Just((FaultOp::Sync, ".log", Fault::Fail(libc::EIO))),
        Just((FaultOp::Allocate, ".log", Fault::Fail(libc::EIO))),
        Just((FaultOp::Write, "index", Fault::Fail(libc::EIO))),
        Just((FaultOp::Sync, "index", Fault::Fail(libc::EIO))),
        Just((FaultOp::Write, "checkpoint", Fault::Fail(libc::EIO))),
        Just((FaultOp::Rename, "checkpoint", Fault::Fail(libc::EIO))),
        Just((FaultOp::SyncDir, "", Fault::Fail(libc::EIO))),
        Just((
            FaultOp::Sync,
            ".log",
            Fault::Delay(Duration::from_millis(3))
        )),
    ];
    prop_oneof![
        8 => prop::collection::vec((1u32..4, 0usize..700), 1..4).prop_map(Step::Append),
        4 => Just(Step::AckAll),
        1 => (fault, 0u64..6).prop_map(|((op, path, f), skip)| Step::Inject(op, path, f, skip)),
    ]
}

#[derive(Clone, Copy, Debug)]
enum End {
    /// kill -9: the files keep everything written.
    ProcessCrash,
    /// A power loss after the crash.
    PowerLoss(PowerLoss),
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        Just(End::ProcessCrash),
        Just(End::PowerLoss(PowerLoss::DropUnsynced)),
        any::<u64>().prop_map(|seed| End::PowerLoss(PowerLoss::Random(seed))),
    ]
}

async fn run_steps(
    core: &CoreStorage,
    log: &PartitionLog,
    faulty: &FaultyDisk,
    steps: &[Step],
) -> Model {
    let mut model = Model::default();
    for s in steps {
        match s {
            Step::Append(specs) => {
                if let Err(e) = model.append(log, specs) {
                    assert_offline(core, &e);
                }
            }
            Step::AckAll if model.end > model.acked_end => {
                match log.wait_acked(model.end - 1, AckLevel::All).await {
                    Ok(()) => model.acked_end = model.end,
                    Err(e) => assert_offline(core, &e),
                }
            }
            Step::AckAll => {}
            Step::Inject(op, path, fault, skip) => faulty.inject(
                FaultRule::new(*op, fault.clone())
                    .on_path(path)
                    .after(*skip),
            ),
        }
        let hw = log.offsets().high_watermark;
        assert!(hw <= model.end);
        model.exposed_end = model.exposed_end.max(hw);
        if !core.is_failed() {
            let got = log_bytes_below(log, hw).await;
            assert!(
                Some(got) == model.prefix(hw),
                "what consumers can read is exactly what was appended"
            );
        }
    }
    model
}

/// Every byte below `end` (consumers' view: the high watermark).
async fn log_bytes_below(log: &PartitionLog, end: i64) -> Vec<u8> {
    if end == 0 {
        return Vec::new();
    }
    read_all(log, 0, ReadBound::HighWatermark)
        .await
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect()
}

/// After the crash (and power loss): the recovered log is an appended prefix, no shorter than
/// what the durability policy promised, and it takes appends again.
async fn check_recovered(
    root: &Path,
    faulty: &Rc<FaultyDisk>,
    durability: Durability,
    model: &Model,
    end: End,
) {
    faulty.clear_faults();
    let disk = Disk::Faulty(faulty.clone());
    let core = core_on(root, storage(), disk, Clock::System).await;
    let log = open(&core, &root.join("f-0"), log_config(durability)).await;
    let recovered = log.offsets().log_end_offset;
    let bytes = log_bytes(&log).await;
    assert!(
        Some(bytes) == model.prefix(recovered),
        "the recovered log (end {recovered}) is a prefix of what was appended"
    );
    let promised = match end {
        End::ProcessCrash => true,
        End::PowerLoss(_) => durability == Durability::Fsync,
    };
    if promised {
        assert!(
            recovered >= model.acked_end,
            "acknowledged offsets survive: end {recovered} < acked {}",
            model.acked_end
        );
        assert!(
            recovered >= model.exposed_end,
            "offsets consumers could read survive: end {recovered} < high watermark {}",
            model.exposed_end
        );
    }
    let info = log
        .append(vec![batch(recovered as u64, 1, 0, 10)], EPOCH)
        .expect("the recovered log takes appends");
    log.wait_acked(info.last_offset, AckLevel::All)
        .await
        .expect("and acknowledges them");
    log.verify().await.expect("closed segments verify");
    log.close().await.expect("close");
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::Fsync),
        Just(Durability::Interval),
        Just(Durability::None)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn faults_and_power_loss_never_lose_what_was_promised(
        steps in prop::collection::vec(step(), 1..30),
        durability in durability(),
        end in end(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        run(move || async move {
            let (core, faulty) = faulty_core(&root, storage()).await;
            let log = open(&core, &root.join("f-0"), log_config(durability)).await;
            let model = run_steps(&core, &log, &faulty, &steps).await;
            log.crash_for_tests().await;
            if let End::PowerLoss(mode) = end {
                faulty.power_loss(mode).expect("power loss");
            }
            drop(log);
            drop(core);
            check_recovered(&root, &faulty, durability, &model, end).await;
        });
    }
}

#[test]
fn every_acks_all_acknowledgement_under_fsync_follows_an_fdatasync_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, storage()).await;
        let log = open(&core, &root.join("s-0"), log_config(Durability::Fsync)).await;
        let mut model = Model::default();
        for i in 0..30 {
            let before = faulty.count(FaultOp::Sync, ".log");
            model.append(&log, &[(2, 300 + i * 10)]).unwrap();
            log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
            assert!(
                faulty.count(FaultOp::Sync, ".log") > before,
                "acknowledgement {i} at acks=all came without an fdatasync of the segment"
            );
        }
        log.close().await.unwrap();
        // Group commit: 40 appends made before the flusher runs share one round and one sync
        // (a segment large enough that no roll splits them).
        let config = LogConfig {
            segment_size_bytes: 1 << 20,
            ..log_config(Durability::Fsync)
        };
        let log = open(&core, &root.join("g-0"), config).await;
        let mut model = Model::default();
        let before = faulty.count(FaultOp::Sync, ".log");
        for _ in 0..40 {
            model.append(&log, &[(1, 50)]).unwrap();
        }
        log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
        assert_eq!(faulty.count(FaultOp::Sync, ".log") - before, 1);
        log.close().await.unwrap();
    });
}

#[test]
fn a_slow_fdatasync_groups_the_appends_that_arrive_meanwhile_into_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, storage()).await;
        let log = open(&core, &root.join("s-0"), log_config(Durability::Fsync)).await;
        faulty.inject(
            FaultRule::new(FaultOp::Sync, Fault::Delay(Duration::from_millis(300)))
                .on_path(".log")
                .forever(),
        );
        let mut model = Model::default();
        let before = faulty.count(FaultOp::Sync, ".log");
        model.append(&log, &[(1, 100)]).unwrap();
        // Flushed: the flusher is now inside the slow fdatasync of that round.
        log.wait_acked(0, AckLevel::Leader).await.unwrap();
        for _ in 0..20 {
            model.append(&log, &[(1, 100)]).unwrap();
        }
        log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
        assert_eq!(
            faulty.count(FaultOp::Sync, ".log") - before,
            2,
            "one fdatasync for the first append, one for the 20 behind it"
        );
        log.close().await.unwrap();
    });
}

#[test]
fn power_loss_under_fsync_keeps_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, storage()).await;
        let log = open(&core, &root.join("f-0"), log_config(Durability::Fsync)).await;
        let mut model = Model::default();
        for i in 0..40 {
            model.append(&log, &[(3, 100 + i * 7)]).unwrap();
            log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
            model.acked_end = model.end;
        }
        // Appended, never acknowledged: may be lost.
        model.append(&log, &[(3, 200)]).unwrap();
        log.crash_for_tests().await;
        faulty.power_loss(PowerLoss::DropUnsynced).unwrap();
        drop((log, core));
        check_recovered(
            &root,
            &faulty,
            Durability::Fsync,
            &model,
            End::PowerLoss(PowerLoss::DropUnsynced),
        )
        .await;
    });
}

/// Under `none` an acknowledgement means written, not synced: a power loss takes every record
/// after the last fdatasync (open, roll, checkpoint, close). The manual clock keeps the
/// periodic checkpoint from running, so exactly those records are lost.
#[test]
fn power_loss_under_none_loses_the_acknowledged_records_after_the_last_sync() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let faulty = FaultyDisk::new();
        let (clock, _time) = Clock::manual(1_700_000_000_000);
        let disk = Disk::Faulty(faulty.clone());
        let core = core_on(&root, storage(), disk.clone(), clock.clone()).await;
        let config = LogConfig {
            segment_size_bytes: 1 << 20,
            ..log_config(Durability::None)
        };
        let path = root.join("n-0");
        let log = open(&core, &path, config.clone()).await;
        let mut model = Model::default();
        for _ in 0..5 {
            model.append(&log, &[(2, 100)]).unwrap();
            log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
        }
        log.sync().await.unwrap();
        let synced = model.end;
        for _ in 0..5 {
            model.append(&log, &[(2, 100)]).unwrap();
            log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
        }
        assert_eq!(
            log.offsets().high_watermark,
            model.end,
            "all 20 records acknowledged"
        );
        log.crash_for_tests().await;
        faulty.power_loss(PowerLoss::DropUnsynced).unwrap();
        drop((log, core));
        let core = core_on(&root, storage(), disk, clock).await;
        let log = open(&core, &path, config).await;
        assert_eq!(
            log.offsets().log_end_offset,
            synced,
            "the 10 acknowledged records after the explicit sync are lost, the 10 before kept"
        );
        assert!(Some(log_bytes(&log).await) == model.prefix(synced));
        log.close().await.unwrap();
    });
}

#[test]
fn a_failed_fdatasync_takes_the_directory_offline_for_every_log_of_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, storage()).await;
        let a = open(&core, &root.join("a-0"), log_config(Durability::Fsync)).await;
        let b = open(&core, &root.join("b-0"), log_config(Durability::None)).await;
        let mut model = Model::default();
        model.append(&a, &[(1, 100)]).unwrap();
        a.wait_acked(0, AckLevel::All).await.unwrap();
        faulty.inject(FaultRule::new(FaultOp::Sync, Fault::Fail(libc::EIO)).on_path("a-0"));
        model.append(&a, &[(1, 100)]).unwrap();
        let err = a.wait_acked(1, AckLevel::All).await.unwrap_err();
        assert_offline(&core, &err);
        assert_eq!(
            a.offsets().high_watermark,
            1,
            "the unsynced record is not exposed"
        );
        for log in [&a, &b] {
            let err = log.append(vec![batch(9, 1, 0, 1)], EPOCH).unwrap_err();
            assert_offline(&core, &err);
        }
        assert!(matches!(a.sync().await, Err(StorageError::LogDirFailed(_))));
        assert!(matches!(
            b.flush().await,
            Err(StorageError::LogDirFailed(_))
        ));
    });
}

#[test]
fn a_torn_write_is_cut_at_recovery_and_never_served() {
    for keep_bytes in [0, 1, 61, 511, 700, 1500] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        run(move || async move {
            let (core, faulty) = faulty_core(&root, storage()).await;
            let log = open(&core, &root.join("f-0"), log_config(Durability::Fsync)).await;
            let mut model = Model::default();
            model.append(&log, &[(2, 300)]).unwrap();
            log.wait_acked(model.end - 1, AckLevel::All).await.unwrap();
            model.acked_end = model.end;
            faulty
                .inject(FaultRule::new(FaultOp::Write, Fault::Torn { keep_bytes }).on_path(".log"));
            model.append(&log, &[(3, 400), (1, 20)]).unwrap();
            let err = log
                .wait_acked(model.end - 1, AckLevel::Leader)
                .await
                .unwrap_err();
            assert_offline(&core, &err);
            log.crash_for_tests().await;
            drop((log, core));
            check_recovered(&root, &faulty, Durability::Fsync, &model, End::ProcessCrash).await;
        });
    }
}

#[test]
fn idle_segment_files_close_when_the_clock_passes_the_hibernation_time() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let faulty = FaultyDisk::new();
        let (clock, time) = Clock::manual(1_700_000_000_000);
        let config = StorageConfig {
            recovery_checkpoint_interval_ms: 1_000,
            ..storage()
        };
        let core = core_on(&root, config, Disk::Faulty(faulty.clone()), clock).await;
        let log = open(&core, &root.join("h-0"), log_config(Durability::Fsync)).await;
        let mut model = Model::default();
        model.append(&log, &[(1, 10)]).unwrap();
        log.wait_acked(0, AckLevel::All).await.unwrap();
        // The checkpoint of the new data is due after 1 s of this clock; idling starts after it.
        let checkpoints = faulty.count(FaultOp::Rename, "checkpoint");
        settle().await;
        assert_eq!(faulty.count(FaultOp::Rename, "checkpoint"), checkpoints);
        time.advance(Duration::from_millis(1_000));
        wait_until(|| faulty.count(FaultOp::Rename, "checkpoint") > checkpoints).await;
        settle().await;
        assert_eq!(core.open_writers(), 1, "busy a moment ago: files open");
        time.advance(Duration::from_millis(4_900));
        settle().await;
        assert_eq!(core.open_writers(), 1, "4.9 s idle: still open");
        time.advance(Duration::from_millis(100));
        wait_until(|| core.open_writers() == 0).await;
        log.close().await.unwrap();
    });
}

#[test]
fn interval_durability_syncs_when_the_clock_passes_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let faulty = FaultyDisk::new();
        let (clock, time) = Clock::manual(1_700_000_000_000);
        let config = StorageConfig {
            recovery_checkpoint_interval_ms: 3_600_000,
            ..storage()
        };
        let core = core_on(&root, config, Disk::Faulty(faulty.clone()), clock).await;
        let log_cfg = LogConfig {
            flush_interval_ms: 1_000,
            ..log_config(Durability::Interval)
        };
        let log = open(&core, &root.join("i-0"), log_cfg).await;
        let mut model = Model::default();
        model.append(&log, &[(1, 10)]).unwrap();
        log.wait_acked(0, AckLevel::All).await.unwrap();
        let before = faulty.count(FaultOp::Sync, ".log");
        time.advance(Duration::from_millis(999));
        settle().await;
        assert_eq!(
            faulty.count(FaultOp::Sync, ".log"),
            before,
            "999 ms: no sync yet"
        );
        time.advance(Duration::from_millis(1));
        wait_until(|| faulty.count(FaultOp::Sync, ".log") > before).await;
        log.close().await.unwrap();
    });
}

/// Lets the flusher tasks run (real time passes; the manual clock does not move).
async fn settle() {
    borges_runtime::time::sleep(Duration::from_millis(30)).await;
}

/// Waits (real time, at most 30 s) until `done` holds.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..3_000 {
        if done() {
            return;
        }
        borges_runtime::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 30 s");
}
