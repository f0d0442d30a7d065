//! Model-based property test: random appends, flushes, syncs, reads, retention, truncation,
//! clean restarts and crashes (unflushed data abandoned) against an in-memory model.
//! Checked: offsets stay contiguous, reads return exactly the appended bytes (whole batches,
//! greedy up to max_bytes, at least one), nothing flushed is lost by a crash.

mod common;

use std::path::Path;
use std::rc::Rc;

use borges_protocol::batch;
use borges_storage::{CoreStorage, Durability, LogConfig, PartitionLog, ReadBound, StorageConfig};
use common::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<(u32, usize)>),
    Flush,
    Sync,
    Read { at: u16, max_bytes: u32 },
    Tick,
    Restart,
    Crash,
    Truncate { at: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => prop::collection::vec((1u32..4, 0usize..700), 1..4).prop_map(Op::Append),
        2 => Just(Op::Flush),
        1 => Just(Op::Sync),
        4 => (any::<u16>(), 1u32..30_000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => Just(Op::Tick),
        1 => Just(Op::Restart),
        1 => Just(Op::Crash),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
    ]
}

struct ModelBatch {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Model {
    batches: Vec<ModelBatch>,
    log_start: i64,
    end: i64,
    flushed: i64,
}

impl Model {
    fn drop_before(&mut self, start: i64) {
        assert!(
            start == self.end || self.batches.iter().any(|b| b.base == start),
            "log start {start} is a batch boundary"
        );
        self.batches.retain(|b| b.base >= start);
        self.log_start = start;
    }

    fn truncate(&mut self, offset: i64) {
        if offset <= self.log_start {
            self.batches.clear();
            self.log_start = offset;
            self.end = offset;
        } else if let Some(i) = self.batches.iter().position(|b| b.last >= offset) {
            self.end = self.batches[i].base;
            self.batches.truncate(i);
        }
        self.flushed = self.flushed.min(self.end);
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

fn configs(durability: Durability, retention: bool) -> (LogConfig, StorageConfig) {
    let log = LogConfig {
        segment_size_bytes: 8 * 1024,
        index_interval_bytes: 256,
        durability,
        retention_ms: -1,
        retention_bytes: if retention { 24 * 1024 } else { -1 },
        ..LogConfig::default()
    };
    let storage = StorageConfig {
        write_buffer_bytes_max: 64 << 20,
        tail_cache_bytes_max: 4 * 1024,
        open_files_max: 4,
        write_size_bytes_max: 4096,
        recovery_checkpoint_interval_ms: 20,
        recovery_checkpoints_per_s_max: 100,
        ..StorageConfig::default()
    };
    (log, storage)
}

async fn reopen(core: &Rc<CoreStorage>, dir: &Path, config: &LogConfig) -> Rc<PartitionLog> {
    open(core, dir, config.clone()).await
}

async fn apply(
    log: &mut Rc<PartitionLog>,
    model: &mut Model,
    core: &Rc<CoreStorage>,
    dir: &Path,
    config: &LogConfig,
    op: &Op,
) {
    match op {
        Op::Append(specs) => {
            let mut batches = Vec::new();
            let mut next = model.end;
            for &(records, pad) in specs {
                let b = batch(next as u64, records, 1_000 + next, pad);
                let mut stamped = b.clone();
                batch::set_base_offset(&mut stamped, next);
                batch::set_partition_leader_epoch(&mut stamped, 5);
                model.batches.push(ModelBatch {
                    base: next,
                    last: next + i64::from(records) - 1,
                    bytes: stamped.to_vec(),
                });
                next += i64::from(records);
                batches.push(b);
            }
            let info = log.append(batches, 5).expect("append");
            assert_eq!(info.base_offset, model.end);
            assert_eq!(info.last_offset, next - 1);
            model.end = next;
        }
        Op::Flush => {
            log.flush().await.expect("flush");
            model.flushed = model.end;
        }
        Op::Sync => {
            log.sync().await.expect("sync");
            model.flushed = model.end;
            assert_eq!(log.offsets().high_watermark, model.end);
        }
        Op::Read { at, max_bytes } => {
            if model.end == model.log_start {
                return;
            }
            let span = model.end - model.log_start;
            let offset = model.log_start + i64::from(*at) % span;
            let (bytes, offsets) = log
                .read_bytes(offset, u64::from(*max_bytes), ReadBound::LogEnd)
                .await
                .expect("read");
            assert_eq!(offsets.log_end_offset, model.end);
            assert!(
                bytes[..] == model.expected_read(offset, u64::from(*max_bytes))[..],
                "read at {offset} max {max_bytes}"
            );
        }
        Op::Tick => {
            log.flush().await.expect("flush");
            model.flushed = model.end;
            log.tick(borges_runtime::time::now_ms())
                .await
                .expect("tick");
            let start = log.offsets().log_start_offset;
            model.drop_before(start);
        }
        Op::Restart => {
            log.close().await.expect("close");
            *log = reopen(core, dir, config).await;
            model.flushed = model.end;
            let o = log.offsets();
            assert_eq!(
                (o.log_start_offset, o.log_end_offset, o.high_watermark),
                (model.log_start, model.end, model.end)
            );
        }
        Op::Crash => {
            log.crash_for_tests().await;
            *log = reopen(core, dir, config).await;
            let o = log.offsets();
            assert!(
                o.log_end_offset >= model.flushed,
                "flushed offsets survive: {} < {}",
                o.log_end_offset,
                model.flushed
            );
            assert!(o.log_end_offset <= model.end);
            model.truncate(o.log_end_offset);
            model.end = o.log_end_offset;
            model.flushed = model.end;
            assert_eq!(o.log_start_offset, model.log_start);
        }
        Op::Truncate { at } => {
            let span = model.end - model.log_start + 1;
            let offset = model.log_start + i64::from(*at) % span;
            log.truncate_to(offset).await.expect("truncate");
            model.truncate(offset);
            assert_eq!(log.offsets().log_end_offset, model.end);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(
        ops in prop::collection::vec(op(), 1..40),
        durability in prop_oneof![Just(Durability::Fsync), Just(Durability::Interval), Just(Durability::None)],
        retention in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let path = root.join("m-0");
        run(move || async move {
            let dir = &root;
            let (log_cfg, st_cfg) = configs(durability, retention);
            let core = core(dir, st_cfg).await;
            let mut log = reopen(&core, &path, &log_cfg).await;
            let mut model = Model::default();
            for op in &ops {
                tracing::trace!(?op, "model op");
                apply(&mut log, &mut model, &core, &path, &log_cfg, op).await;
            }
            tracing::trace!("model final check");
            // Final full check after a clean restart.
            log.close().await.expect("close");
            let log = reopen(&core, &path, &log_cfg).await;
            let all = read_all(&log, model.log_start, ReadBound::HighWatermark).await;
            let got: Vec<u8> = all.iter().flat_map(|b| b.as_bytes().to_vec()).collect();
            let want: Vec<u8> = model.batches.iter().flat_map(|b| b.bytes.clone()).collect();
            assert!(got == want, "full log differs from the model");
            log.verify().await.expect("verify");
            log.close().await.expect("close");
        });
    }
}
