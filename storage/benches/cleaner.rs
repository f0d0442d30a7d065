//! Log cleaner benchmark, on one core without a broker: fills a partition with `--fill-mib` MiB
//! of 1 KiB records over `--keys` keys in 64 KiB batches (as `borges produce` sends them in
//! `scripts/bench-compaction.sh`), 64 MiB segments, then cleans the whole log once with the IO
//! cap lifted and prints the cleaning's bytes and wall time. Small and deterministic enough to
//! run under `valgrind --tool=callgrind` or `perf record`.
//!
//! `cargo bench -p borges-storage --bench cleaner -- [--dir D] [--fill-mib N] [--keys K]`

use std::path::PathBuf;
use std::time::Instant;

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_storage::{
    AckLevel, Cleaner, CleanerConfig, CompactionConfig, CoreStorage, Durability, LogConfig,
    PartitionLog, StorageConfig,
};
use bytes::BytesMut;

/// Bytes of one record (key, value and record framing), as the compaction script writes.
const RECORD_SIZE_BYTES: usize = 1024;
/// Bytes of one batch (the client's default `batch_size_bytes`).
const BATCH_SIZE_BYTES: usize = 64 * 1024;
/// Preemption timer of the bench executor (see storage.rs's note on glommio parking).
const PREEMPT_TIMER_MS: u64 = 1000;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    dir: PathBuf,
    fill_mib: u64,
    keys: u64,
    /// Fill and keep the log, do not clean (`--fill-only`).
    fill_only: bool,
    /// Clean the log a `--fill-only` run left (`--clean-only`), so that a profiler sees only
    /// the cleaning.
    clean_only: bool,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        dir: std::env::temp_dir().join("borges-cleaner-bench"),
        fill_mib: 256,
        keys: 10_000,
        fill_only: false,
        clean_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--fill-mib" => args.fill_mib = value()?.parse()?,
            "--keys" => args.keys = value()?.parse::<u64>()?.max(1),
            "--fill-only" => args.fill_only = true,
            "--clean-only" => args.clean_only = true,
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

const NOW_MS: i64 = 1_700_000_000_000;

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 64 << 20,
        durability: Durability::None,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

async fn run(args: Args) -> Result<(), Error> {
    if !args.clean_only {
        let _ = std::fs::remove_dir_all(&args.dir);
        std::fs::create_dir_all(&args.dir)?;
    }
    let core = CoreStorage::new(&args.dir, StorageConfig::default()).await?;
    if !args.clean_only {
        fill(&core, &args).await?;
    }
    if !args.fill_only {
        clean(&core, &args).await?;
        std::fs::remove_dir_all(&args.dir)?;
    }
    Ok(())
}

async fn fill(core: &std::rc::Rc<CoreStorage>, args: &Args) -> Result<(), Error> {
    let config = log_config();
    let log = PartitionLog::open(core, args.dir.join("t-0"), config).await?;
    let records = args.fill_mib * 1024;
    let filled = Instant::now();
    let mut last = 0;
    let mut i = 0u64;
    let now_ms = NOW_MS;
    while i < records {
        let mut b = BatchBuilder::new(BatchOptions::default(), BATCH_SIZE_BYTES + 1024);
        while i < records && b.size_bytes() + RECORD_SIZE_BYTES <= BATCH_SIZE_BYTES {
            let key = format!("key-{:08}", i % args.keys);
            let value = vec![b'v'; RECORD_SIZE_BYTES - key.len() - 20];
            b.push(now_ms, Some(key.as_bytes()), Some(value.as_slice()), &[]);
            i += 1;
        }
        let bytes = BytesMut::from(&b.build()?[..]);
        log.wait_writable(bytes.len() as u64).await;
        last = log.append(vec![bytes], 0)?.last_offset;
        futures_lite::future::yield_now().await;
    }
    log.wait_acked(last, AckLevel::All).await?;
    log.close().await?;
    println!(
        "fill: {} MiB in {:.2} s",
        args.fill_mib,
        filled.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn clean(core: &std::rc::Rc<CoreStorage>, args: &Args) -> Result<(), Error> {
    // A fresh open, so every closed segment is finalized and the high watermark is the log end.
    let log = PartitionLog::open(core, args.dir.join("t-0"), log_config()).await?;
    log.set_compaction(Some(CompactionConfig {
        min_cleanable_dirty_ratio: 0.01,
        ..CompactionConfig::default()
    }));
    let cleaner = Cleaner::new(CleanerConfig {
        io_bytes_per_s_max: 16 << 30,
        ..CleanerConfig::default()
    })?;
    let started = Instant::now();
    let outcome = cleaner
        .clean(&log, NOW_MS + 1000)
        .await?
        .ok_or("nothing was cleanable")?;
    let clean_s = started.elapsed().as_secs_f64();
    println!(
        "cleaning: {} MiB in, {} MiB out, {} segments, {} records removed, {clean_s:.3} s, \
         {:.1} MB/s",
        outcome.bytes_in >> 20,
        outcome.bytes_out >> 20,
        outcome.segments_in,
        outcome.records_removed,
        outcome.bytes_in as f64 / 1e6 / clean_s
    );
    log.close().await?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let config = borges_runtime::executor::ExecutorConfig {
        preempt_timer_ms: PREEMPT_TIMER_MS,
        ..Default::default()
    };
    borges_runtime::executor::run_on_one_core(&config, move || async move {
        run(args).await.map_err(|e| e.to_string())
    })??;
    Ok(())
}
