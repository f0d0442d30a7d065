//! Log compaction against a model: random keyed appends (with tombstones), cleanings at
//! simulated times, crashes with power loss, faults injected at every step of a cleaning
//! (a cleaning that stops at step k is a process killed there), and reads.
//!
//! Checked after every step: offsets strictly increase; every record read is the one appended
//! at its offset (same key, same value); each key's last record read is its latest record,
//! except that a latest tombstone may be gone, but only once `delete.retention.ms` passed since
//! it was appended (the cleaner first sees it no earlier); no older record of a key outlives
//! its tombstone. At the end of each case, after the cleaner ran twice across a horizon, only
//! the latest record of each key is left below the active segment and no tombstone.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use borges_protocol::batch::{BatchBuilder, BatchOptions, RecordBatch};
use borges_runtime::fault::{Fault, FaultOp, FaultRule, FaultyDisk, PowerLoss};
use borges_storage::{
    Cleaner, CleanerConfig, CompactionConfig, CoreStorage, Durability, LogConfig, PartitionLog,
    ReadBound,
};
use bytes::BytesMut;
use common::*;
use proptest::prelude::*;

const DELETE_RETENTION_MS: i64 = 10_000;
const FILLER_KEY: u8 = 60;
/// Keys updated often; the generator also writes keys up to 3 x KEYS, rarely updated.
const KEYS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    /// Records (key, tombstone, padding bytes).
    Append(Vec<(u8, bool, usize)>),
    /// Clean after simulated time moved by this much.
    Clean(i64),
    /// A cleaning that fails at its `skip`-th operation of this kind, then a crash with
    /// power loss (seed).
    CrashWhileCleaning(FaultOp, u64, u64),
    /// Kill -9 and power loss.
    Crash(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let fault_op = prop_oneof![
        Just(FaultOp::Write),
        Just(FaultOp::Sync),
        Just(FaultOp::Rename),
        Just(FaultOp::Remove),
        Just(FaultOp::SyncDir),
        Just(FaultOp::Open),
    ];
    prop_oneof![
        8 => prop::collection::vec((0..3 * KEYS, prop::bool::weighted(0.2), 0usize..400), 1..5)
            .prop_map(Op::Append),
        3 => (0i64..8_000).prop_map(Op::Clean),
        2 => (fault_op, 0u64..12, any::<u64>())
            .prop_map(|(o, k, s)| Op::CrashWhileCleaning(o, k, s)),
        1 => any::<u64>().prop_map(Op::Crash),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

struct Model {
    /// Every record appended, by offset.
    records: BTreeMap<i64, Rec>,
    /// Simulated time of each append.
    appended_at: BTreeMap<i64, i64>,
    now_ms: i64,
    next_value: u64,
}

impl Model {
    fn latest(&self) -> BTreeMap<Vec<u8>, i64> {
        let mut out = BTreeMap::new();
        for (o, r) in &self.records {
            out.insert(r.key.clone(), *o);
        }
        out
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 4096,
        index_interval_bytes: 64,
        durability: Durability::Fsync,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn compaction() -> CompactionConfig {
    CompactionConfig {
        delete_retention_ms: DELETE_RETENTION_MS,
        min_cleanable_dirty_ratio: 0.0,
        ..CompactionConfig::default()
    }
}

fn cleaner() -> Cleaner {
    Cleaner::new(CleanerConfig {
        io_bytes_per_s_max: 1 << 40,
        io_buffer_bytes: 4096,
        ..CleanerConfig::default()
    })
    .expect("cleaner config")
}

struct Harness {
    dir: std::path::PathBuf,
    faulty: Rc<FaultyDisk>,
    core: Rc<CoreStorage>,
    log: Rc<PartitionLog>,
    cleaner: Cleaner,
    model: Model,
}

async fn open_on(dir: &Path, faulty: &Rc<FaultyDisk>) -> (Rc<CoreStorage>, Rc<PartitionLog>) {
    let disk = borges_runtime::fs::Disk::Faulty(faulty.clone());
    let core = core_on(
        dir,
        storage_config(),
        disk,
        borges_runtime::time::Clock::System,
    )
    .await;
    let log = open(&core, &dir.join("t-0"), log_config()).await;
    log.set_compaction(Some(compaction()));
    (core, log)
}

impl Harness {
    async fn new(dir: &Path) -> Harness {
        let faulty = FaultyDisk::new();
        let (core, log) = open_on(dir, &faulty).await;
        Harness {
            dir: dir.to_path_buf(),
            faulty,
            core,
            log,
            cleaner: cleaner(),
            model: Model {
                records: BTreeMap::new(),
                appended_at: BTreeMap::new(),
                now_ms: 1_000_000,
                next_value: 0,
            },
        }
    }

    async fn append(&mut self, recs: &[(u8, bool, usize)]) {
        let mut b = BatchBuilder::new(BatchOptions::default(), 1024);
        let mut rows = Vec::new();
        for &(k, tomb, pad) in recs {
            let key = vec![b'k', b'0' + k];
            let value = (!tomb).then(|| {
                let mut v = format!("u{}-", self.model.next_value).into_bytes();
                v.resize(v.len() + pad, b'x');
                v
            });
            self.model.next_value += 1;
            b.push(self.model.now_ms, Some(&key), value.as_deref(), &[]);
            rows.push(Rec { key, value });
        }
        let bytes = BytesMut::from(&b.build().expect("batch")[..]);
        let info = self.log.append(vec![bytes], 1).expect("append");
        self.log.sync().await.expect("sync");
        for (i, r) in rows.into_iter().enumerate() {
            let o = info.base_offset + i as i64;
            self.model.records.insert(o, r);
            self.model.appended_at.insert(o, self.model.now_ms);
        }
    }

    async fn clean(&mut self, advance_ms: i64) {
        self.model.now_ms += advance_ms;
        self.cleaner
            .clean(&self.log, self.model.now_ms)
            .await
            .expect("cleaning");
    }

    async fn crash(&mut self, seed: u64) {
        self.log.crash_for_tests().await;
        self.faulty.clear_faults();
        self.faulty
            .power_loss(PowerLoss::Random(seed))
            .expect("power loss");
        let (core, log) = open_on(&self.dir, &self.faulty).await;
        self.core = core;
        self.log = log;
    }

    async fn crash_while_cleaning(&mut self, op: FaultOp, skip: u64, seed: u64) {
        self.model.now_ms += 1000;
        self.faulty.inject(
            FaultRule::new(op, Fault::Fail(libc::EIO))
                .after(skip)
                .forever(),
        );
        let _ = self.cleaner.clean(&self.log, self.model.now_ms).await;
        self.crash(seed).await;
    }

    /// Every record of the log: (offset, record).
    async fn read(&self) -> Vec<(i64, Rec)> {
        let start = self.log.offsets().log_start_offset;
        let batches: Vec<RecordBatch> = read_all(&self.log, start, ReadBound::LogEnd).await;
        batches
            .iter()
            .flat_map(|b| b.records(1 << 24).expect("records decode"))
            .map(|r| {
                let rec = Rec {
                    key: r.key.expect("keyed").to_vec(),
                    value: r.value.map(|v| v.to_vec()),
                };
                (r.offset, rec)
            })
            .collect()
    }

    async fn check(&self) {
        let read = self.read().await;
        let m = &self.model;
        assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets increase");
        let mut last_read: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for (o, r) in &read {
            assert_eq!(
                m.records.get(o),
                Some(r),
                "record at offset {o} is the one appended"
            );
            last_read.insert(r.key.clone(), *o);
        }
        for (key, latest) in m.latest() {
            let rec = &m.records[&latest];
            match last_read.get(&key) {
                Some(&o) => assert_eq!(o, latest, "key {key:?}: its last record is the latest"),
                None => {
                    assert!(
                        rec.value.is_none(),
                        "key {key:?}: latest value {latest} lost"
                    );
                    let since = m.now_ms - m.appended_at[&latest];
                    assert!(
                        since >= DELETE_RETENTION_MS,
                        "tombstone {latest} removed {since} ms after its append"
                    );
                }
            }
        }
        assert_eq!(
            self.log.offsets().log_end_offset,
            m.records.keys().next_back().map_or(0, |o| o + 1),
            "log end"
        );
    }

    /// Closes every segment with filler records, cleans across a delete horizon: only the
    /// latest record of each key is left below the filler, and no tombstone.
    async fn settle(&mut self) {
        let filler_start = self.log.offsets().log_end_offset;
        for _ in 0..24 {
            self.append(&[(FILLER_KEY, false, 300)]).await;
        }
        self.clean(1).await;
        self.check().await;
        self.clean(DELETE_RETENTION_MS + 1).await;
        self.check().await;
        let read = self.read().await;
        let mut seen = BTreeMap::new();
        for (o, r) in read.iter().filter(|(o, _)| *o < filler_start) {
            assert!(r.value.is_some(), "tombstone at {o} outlived its horizon");
            assert!(
                seen.insert(r.key.clone(), *o).is_none(),
                "key {:?} twice",
                r.key
            );
        }
    }
}

fn run_case(ops: Vec<Op>) {
    run(move || async move {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut h = Harness::new(tmp.path()).await;
        for op in ops {
            match op {
                Op::Append(recs) => h.append(&recs).await,
                Op::Clean(advance) => h.clean(advance).await,
                Op::CrashWhileCleaning(o, k, s) => h.crash_while_cleaning(o, k, s).await,
                Op::Crash(seed) => h.crash(seed).await,
            }
            h.check().await;
        }
        h.settle().await;
        h.log.close().await.expect("close");
        let _ = &h.core;
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn compaction_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        run_case(ops);
    }
}

/// A crash at each step of a cleaning that merges segments, in turn: the latest values survive
/// every one of them.
#[test]
fn a_crash_at_every_step_of_a_swap_keeps_the_latest_values() {
    let steps = [
        (FaultOp::Write, 5),
        (FaultOp::Sync, 5),
        (FaultOp::Rename, 5),
        (FaultOp::Remove, 5),
        (FaultOp::SyncDir, 3),
    ];
    for (op, skips) in steps {
        for skip in 0..skips {
            // A power loss keeps a random part of what was not synced: several draws each.
            for seed in 0..3 {
                let mut ops = Vec::new();
                for i in 0..60u8 {
                    // Every fifth of the first forty records is the only one of its key:
                    // such latest values live in each of the oldest segments, which
                    // cleanings rewrite.
                    let key = if i < 40 && i % 5 == 0 {
                        20 + i
                    } else {
                        i % KEYS
                    };
                    ops.push(Op::Append(vec![(key, i % 7 == 3, 150)]));
                    if i == 40 {
                        // Shrinks the segments, so that the next cleaning merges them.
                        ops.push(Op::Clean(1));
                    }
                }
                ops.push(Op::CrashWhileCleaning(op, skip, seed * 1000 + skip));
                run_case(ops);
            }
        }
    }
}

/// Cleaning removes superseded records: the log shrinks and keeps one record per key.
#[test]
fn cleaning_keeps_the_latest_record_per_key_and_shrinks_the_log() {
    run(|| async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut h = Harness::new(tmp.path()).await;
        for i in 0..200u32 {
            h.append(&[((i % 4) as u8, false, 100)]).await;
        }
        let before = h.log.size_bytes();
        let segments_before = h.log.segment_count();
        h.clean(1).await;
        h.check().await;
        assert!(h.log.size_bytes() < before / 2, "the log shrank");
        // Groups are made from the sizes before cleaning (as Kafka): full segments are cleaned
        // one by one, and the next cleaning merges the shrunk ones.
        h.clean(1).await;
        h.check().await;
        assert!(
            h.log.segment_count() < segments_before,
            "segments were merged"
        );
        let read = h.read().await;
        assert!(
            read.len() <= 4 + 40,
            "superseded records left: {}",
            read.len()
        );
        let offsets: Vec<i64> = read.iter().map(|(o, _)| *o).collect();
        assert_eq!(h.log.offsets().log_start_offset, 0, "the log start stays");
        assert!(offsets[0] > 0, "a hole where the superseded records were");
        h.crash(1).await;
        h.check().await;
        h.log.close().await.expect("close");
    });
}
