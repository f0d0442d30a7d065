//! Model-based property test: random appends (as leader and as follower), flushes, syncs,
//! reads, retention, truncation, new leader epochs, clean restarts and crashes (unflushed data
//! abandoned) against an in-memory model.
//!
//! The model keeps its own segment layout (a segment rolls when the next batch would take it
//! past `segment_size_bytes`) and computes retention itself (`retention.bytes`: oldest closed
//! segments go while the log without them is still at least that large), so a log start that
//! retention got wrong is a failure, not something the model adopts. Checked: offsets stay
//! contiguous, reads return exactly the appended bytes (whole batches, greedy up to max_bytes,
//! at least one), retention moves the log start exactly where the model says, the segment files
//! on disk are the model's, nothing flushed is lost by a crash, and after every step the
//! leader-epoch cache answers OffsetForLeaderEpoch as the model's batches (and a begun epoch)
//! say, also across truncation to below a later epoch and crashes. Failing cases are kept in
//! `model.proptest-regressions` and replayed first.

mod common;

use std::path::Path;
use std::rc::Rc;

use borges_storage::{CoreStorage, Durability, LogConfig, PartitionLog, ReadBound, StorageConfig};
use bytes::BytesMut;
use common::*;
use proptest::prelude::*;

const SEGMENT_SIZE_BYTES: u64 = 8 * 1024;
const RETENTION_BYTES: u64 = 16 * 1024;
const EPOCH: i32 = 5;
const OPEN_FILES_MAX: u32 = 4;

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u32, usize)>),
    Flush,
    Sync,
    Read {
        at: u16,
        max_bytes: u32,
    },
    Tick,
    Restart,
    Crash,
    Truncate {
        at: u16,
    },
    /// The leader epoch moves up by 1..=3 (later appends carry it).
    NewEpoch(u8),
    /// A new leader's `begin_epoch` at the log end.
    BeginEpoch,
    /// Batches stamped as a leader would, appended with `append_as_follower`.
    FollowerAppend(Vec<(u32, usize)>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => prop::collection::vec((1u32..4, 0usize..700), 1..4).prop_map(Op::Append),
        2 => Just(Op::Flush),
        1 => Just(Op::Sync),
        4 => (any::<u16>(), 1u32..30_000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        2 => Just(Op::Tick),
        1 => Just(Op::Restart),
        1 => Just(Op::Crash),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => (1u8..4).prop_map(Op::NewEpoch),
        1 => Just(Op::BeginEpoch),
        3 => prop::collection::vec((1u32..4, 0usize..700), 1..4).prop_map(Op::FollowerAppend),
    ]
}

struct ModelBatch {
    base: i64,
    last: i64,
    epoch: i32,
    bytes: Vec<u8>,
}

/// The log as it should be: its batches and the base offsets of its segments.
#[derive(Default)]
struct Model {
    batches: Vec<ModelBatch>,
    /// Base offsets of the segments, oldest first; the last is the active one.
    segments: Vec<i64>,
    log_start: i64,
    end: i64,
    flushed: i64,
    retention: bool,
    /// The epoch appends carry now.
    epoch: i32,
    /// An epoch begun at the log end (offset) that has no batch yet.
    begun: Option<(i32, i64)>,
}

impl Model {
    fn new(retention: bool) -> Model {
        Model {
            segments: vec![0],
            retention,
            epoch: EPOCH,
            ..Model::default()
        }
    }

    /// Bytes of the segment starting at `base`.
    fn segment_size(&self, i: usize) -> u64 {
        let base = self.segments[i];
        let next = self.segments.get(i + 1).copied().unwrap_or(i64::MAX);
        self.batches
            .iter()
            .filter(|b| b.base >= base && b.base < next)
            .map(|b| b.bytes.len() as u64)
            .sum()
    }

    /// A batch at the log end, rolling first when it would not fit the active segment.
    fn push(&mut self, base: i64, last: i64, epoch: i32, bytes: Vec<u8>) {
        let active = self.segment_size(self.segments.len() - 1);
        if active > 0 && active + bytes.len() as u64 > SEGMENT_SIZE_BYTES {
            self.segments.push(base);
        }
        self.batches.push(ModelBatch {
            base,
            last,
            epoch,
            bytes,
        });
        // A begun epoch is an entry of its own only until a batch follows it (then the
        // batches define it, also for retention and truncation).
        self.begun = None;
        self.end = last + 1;
    }

    /// Retention by size: the oldest closed segments go while the log without them keeps at
    /// least `RETENTION_BYTES`. Returns the new log start.
    fn apply_retention(&mut self) -> i64 {
        if !self.retention {
            return self.log_start;
        }
        let mut total: u64 = (0..self.segments.len()).map(|i| self.segment_size(i)).sum();
        while self.segments.len() > 1 {
            let oldest = self.segment_size(0);
            if total - oldest < RETENTION_BYTES {
                break;
            }
            total -= oldest;
            self.segments.remove(0);
        }
        self.log_start = self.segments[0];
        self.batches.retain(|b| b.base >= self.segments[0]);
        self.log_start
    }

    fn truncate(&mut self, offset: i64) {
        if offset >= self.end {
            // Nothing to cut; an epoch begun at the log end goes all the same (Kafka's rule).
            if self.begun.is_some_and(|(_, start)| start >= offset) {
                self.begun = None;
            }
            return;
        }
        if offset <= self.log_start {
            self.batches.clear();
            self.segments = vec![offset];
            self.log_start = offset;
            self.end = offset;
        } else {
            let i = self
                .batches
                .iter()
                .position(|b| b.last >= offset)
                .expect("offset below the end is in a batch");
            self.end = self.batches[i].base;
            self.batches.truncate(i);
            let end = self.end;
            // The segment holding the cut becomes the active one.
            let keep = self.segments.iter().filter(|&&s| s <= end).count();
            self.segments.truncate(keep);
        }
        self.flushed = self.flushed.min(self.end);
        self.forget_begun_at_end();
        if let Some(&(e, _)) = self.epochs().last() {
            // A follower after truncation: the next batches come from a leader whose epoch
            // may be below the ones just removed.
            self.epoch = e;
        }
    }

    /// A begun epoch without batches starts at the log end: gone with a restart or cut.
    fn forget_begun_at_end(&mut self) {
        if self.begun.is_some_and(|(_, start)| start >= self.end) {
            self.begun = None;
        }
    }

    /// The (epoch, start offset) pairs the batches (and a begun epoch) define.
    fn epochs(&self) -> Vec<(i32, i64)> {
        let mut out: Vec<(i32, i64)> = Vec::new();
        for b in &self.batches {
            if out.last().is_none_or(|&(e, _)| b.epoch > e) {
                out.push((b.epoch, b.base));
            }
        }
        if let Some((e, start)) = self.begun {
            if out.last().is_none_or(|&(last, _)| e > last) {
                out.push((e, start));
            }
        }
        out
    }

    /// OffsetForLeaderEpoch as Kafka answers it, from the model's epochs.
    fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        let epochs = self.epochs();
        let &(latest, _) = epochs.last()?;
        if epoch > latest {
            return None;
        }
        if epoch == latest {
            return Some((epoch, self.end));
        }
        let next_start = epochs.iter().find(|&&(e, _)| e > epoch)?.1;
        let floor = epochs.iter().rev().find(|&&(e, _)| e <= epoch);
        Some((floor.map_or(epoch, |&(e, _)| e), next_start))
    }

    /// After a crash the log ends at `end` (a batch boundary): later batches are gone, and
    /// whether an empty segment file at `end` was created before the crash is the one thing the
    /// model cannot know, so it takes that from `on_disk`.
    fn crashed_to(&mut self, end: i64, on_disk: &[i64]) {
        assert!(
            end == self.log_start || self.batches.iter().any(|b| b.last + 1 == end),
            "recovered end {end} is a batch boundary"
        );
        self.batches.retain(|b| b.last < end);
        self.end = end;
        self.flushed = end;
        self.forget_begun_at_end();
        let mut kept: Vec<i64> = self.segments.iter().copied().filter(|&s| s < end).collect();
        if kept.is_empty() || on_disk.last() == Some(&end) {
            kept.push(end);
        }
        assert_eq!(on_disk, &kept[..], "segment files after recovery");
        self.segments = kept;
    }

    /// A read may end early, at a segment boundary, once it holds `OPEN_FILES_MAX` segment
    /// descriptors (the core's read share): `got` is then a prefix of `want` ending where a
    /// segment starts, after at least that many segments.
    fn stopped_by_descriptors(&self, offset: i64, got: &[u8], want: &[u8]) -> bool {
        if got.is_empty() || got.len() >= want.len() || got[..] != want[..got.len()] {
            return false;
        }
        let mut size = 0;
        let mut end = offset;
        for b in self.batches.iter().filter(|b| b.last >= offset) {
            if size == got.len() {
                break;
            }
            size += b.bytes.len();
            end = b.last + 1;
        }
        let first = self.segments.partition_point(|&s| s <= offset);
        let spanned = self.segments.partition_point(|&s| s < end) + 1 - first;
        size == got.len() && self.segments.contains(&end) && spanned >= OPEN_FILES_MAX as usize
    }

    /// Greedy whole batches from the one holding `offset`, at least one.
    fn expected_read(&self, offset: i64, max_bytes: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for b in self.batches.iter().filter(|b| b.last >= offset) {
            if !out.is_empty() && (out.len() + b.bytes.len()) as u64 > max_bytes {
                break;
            }
            out.extend_from_slice(&b.bytes);
        }
        out
    }
}

/// Base offsets of the segment files in `dir`, sorted.
fn segment_files(dir: &Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .expect("list partition")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

fn configs(durability: Durability, retention: bool) -> (LogConfig, StorageConfig) {
    let log = LogConfig {
        segment_size_bytes: SEGMENT_SIZE_BYTES,
        index_interval_bytes: 256,
        durability,
        retention_ms: -1,
        retention_bytes: if retention {
            RETENTION_BYTES as i64
        } else {
            -1
        },
        ..LogConfig::default()
    };
    let storage = StorageConfig {
        write_buffer_bytes_max: 64 << 20,
        tail_cache_bytes_max: 4 * 1024,
        open_files_max: OPEN_FILES_MAX,
        write_size_bytes_max: 4096,
        recovery_checkpoint_interval_ms: 20,
        recovery_checkpoints_per_s_max: 100,
        ..StorageConfig::default()
    };
    (log, storage)
}

/// One case: the log, the model, and where they live.
struct Case {
    core: Rc<CoreStorage>,
    dir: std::path::PathBuf,
    config: LogConfig,
    log: Rc<PartitionLog>,
    model: Model,
}

impl Case {
    async fn reopen(&mut self) {
        self.log = open(&self.core, &self.dir, self.config.clone()).await;
    }

    async fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(specs) => self.append(specs, false),
            Op::FollowerAppend(specs) => self.append(specs, true),
            Op::NewEpoch(by) => self.model.epoch += i32::from(*by),
            Op::BeginEpoch => {
                self.model.epoch += 1;
                assert!(self.log.begin_epoch(self.model.epoch));
                self.model.begun = Some((self.model.epoch, self.model.end));
            }
            Op::Flush => {
                self.log.flush().await.expect("flush");
                self.model.flushed = self.model.end;
            }
            Op::Sync => {
                self.log.sync().await.expect("sync");
                self.model.flushed = self.model.end;
                assert_eq!(self.log.offsets().high_watermark, self.model.end);
            }
            Op::Read { at, max_bytes } => self.read(*at, *max_bytes).await,
            Op::Tick => self.tick().await,
            Op::Restart => self.restart().await,
            Op::Crash => self.crash().await,
            Op::Truncate { at } => {
                let m = &self.model;
                let offset = m.log_start + i64::from(*at) % (m.end - m.log_start + 1);
                self.log.truncate_to(offset).await.expect("truncate");
                self.model.truncate(offset);
                assert_eq!(self.log.offsets().log_end_offset, self.model.end);
            }
        }
    }

    fn append(&mut self, specs: &[(u32, usize)], follower: bool) {
        let mut batches = Vec::new();
        let mut next = self.model.end;
        let epoch = self.model.epoch;
        for &(records, pad) in specs {
            let b = batch(next as u64, records, 1_000 + next, pad);
            let last = next + i64::from(records) - 1;
            let bytes = stamped(&b, next, epoch);
            self.model.push(next, last, epoch, bytes.clone());
            next = last + 1;
            batches.push(if follower {
                BytesMut::from(&bytes[..])
            } else {
                b
            });
        }
        let info = if follower {
            self.log
                .append_as_follower(batches)
                .expect("follower append")
        } else {
            self.log.append(batches, epoch).expect("append")
        };
        assert_eq!((info.last_offset, self.model.end), (next - 1, next));
        assert_eq!(self.log.segment_count(), self.model.segments.len(), "rolls");
    }

    async fn read(&self, at: u16, max_bytes: u32) {
        let m = &self.model;
        if m.end == m.log_start {
            return;
        }
        let offset = m.log_start + i64::from(at) % (m.end - m.log_start);
        let (bytes, offsets) = self
            .log
            .read_bytes(offset, u64::from(max_bytes), ReadBound::LogEnd)
            .await
            .expect("read");
        assert_eq!(offsets.log_end_offset, m.end);
        let want = m.expected_read(offset, u64::from(max_bytes));
        assert!(
            bytes[..] == want[..] || m.stopped_by_descriptors(offset, &bytes, &want),
            "read at {offset} max {max_bytes}: {} bytes, expected {}",
            bytes.len(),
            want.len()
        );
    }

    /// Retention after a sync (so the high watermark is the log end and every closed
    /// segment is finalized): the log start must be where the model puts it.
    async fn tick(&mut self) {
        self.log.sync().await.expect("sync");
        self.model.flushed = self.model.end;
        let outcome = self
            .log
            .tick(borges_runtime::time::now_ms())
            .await
            .expect("tick");
        let before = self.model.segments.len();
        let want = self.model.apply_retention();
        assert_eq!(
            self.log.offsets().log_start_offset,
            want,
            "log start after retention"
        );
        assert_eq!(outcome.segments_deleted, before - self.model.segments.len());
        assert_eq!(
            segment_files(&self.dir),
            self.model.segments,
            "segment files"
        );
    }

    /// After every step: the epoch cache answers as the model says, for every epoch.
    fn check_epochs(&self) {
        for e in 0..=self.model.epoch + 1 {
            assert_eq!(
                self.log.epoch_end_offset(e),
                self.model.epoch_end_offset(e),
                "end offset of epoch {e}; model epochs {:?}",
                self.model.epochs()
            );
        }
    }

    async fn restart(&mut self) {
        self.log.close().await.expect("close");
        self.reopen().await;
        self.model.flushed = self.model.end;
        self.model.forget_begun_at_end();
        let o = self.log.offsets();
        let m = &self.model;
        assert_eq!(
            (o.log_start_offset, o.log_end_offset, o.high_watermark),
            (m.log_start, m.end, m.end)
        );
        assert_eq!(segment_files(&self.dir), m.segments, "segment files");
    }

    async fn crash(&mut self) {
        self.log.crash_for_tests().await;
        self.reopen().await;
        let o = self.log.offsets();
        assert!(
            o.log_end_offset >= self.model.flushed,
            "flushed offsets survive: {} < {}",
            o.log_end_offset,
            self.model.flushed
        );
        assert!(o.log_end_offset <= self.model.end);
        assert_eq!(o.log_start_offset, self.model.log_start);
        self.model
            .crashed_to(o.log_end_offset, &segment_files(&self.dir));
    }

    /// A clean restart, then every byte of the log must be the model's.
    async fn final_check(mut self) {
        self.log.close().await.expect("close");
        self.reopen().await;
        let all = read_all(&self.log, self.model.log_start, ReadBound::HighWatermark).await;
        let got: Vec<u8> = all.iter().flat_map(|b| b.as_bytes().to_vec()).collect();
        let want: Vec<u8> = self
            .model
            .batches
            .iter()
            .flat_map(|b| b.bytes.clone())
            .collect();
        assert!(got == want, "full log differs from the model");
        self.log.verify().await.expect("verify");
        self.log.close().await.expect("close");
    }
}

/// Cases per run; `PROPTEST_CASES` overrides it (a longer soak).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
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
        cases: cases(),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn log_matches_model(
        ops in prop::collection::vec(op(), 1..50),
        durability in durability(),
        retention in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        run(move || async move {
            let (config, st_cfg) = configs(durability, retention);
            let core = core(&root, st_cfg).await;
            let dir = root.join("m-0");
            let log = open(&core, &dir, config.clone()).await;
            let mut case = Case { core, dir, config, log, model: Model::new(retention) };
            for op in &ops {
                tracing::trace!(?op, "model op");
                case.apply(op).await;
                case.check_epochs();
            }
            case.final_check().await;
        });
    }
}
