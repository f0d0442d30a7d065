//! Storage benchmark: append throughput per batch size and durability policy, and recovery time
//! of a large partition after SIGKILL. Run through `scripts/bench-storage.sh`, which also
//! measures the disk's sequential direct-IO write limit with fio in the same run.
//!
//! `cargo bench -p borges-storage --bench storage -- [--dir D] [--append-mib N] [--recovery-gib N]`

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_storage::{
    AckLevel, CoreStorage, Durability, LogConfig, PartitionLog, StorageConfig, StorageError,
    StorageTuning,
};
use bytes::BytesMut;

/// Bytes of batches per append call (one produce request).
const REQUEST_SIZE_BYTES: usize = 64 * 1024;

/// Preemption timer of the bench executor. Long, because glommio 0.9 can park an executor
/// with runnable tasks when a short timer fires at the top of its loop (a run that never ends;
/// see storage/tests/common/mod.rs); the producer loop yields every MiB instead, as a broker
/// connection awaits the network between requests.
const PREEMPT_TIMER_MS: u64 = 1000;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    dir: PathBuf,
    append_mib: u64,
    recovery_gib: u64,
    in_flight: usize,
    writer_child: Option<PathBuf>,
    sizes: Vec<usize>,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        dir: std::env::temp_dir().join("borges-storage-bench"),
        append_mib: 1024,
        recovery_gib: 10,
        in_flight: StorageTuning::default().writes_in_flight_max,
        writer_child: None,
        sizes: vec![1024, 16 * 1024, 1024 * 1024],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--append-mib" => args.append_mib = value()?.parse()?,
            "--recovery-gib" => args.recovery_gib = value()?.parse()?,
            "--in-flight" => args.in_flight = value()?.parse()?,
            "--writer-child" => args.writer_child = Some(PathBuf::from(value()?)),
            "--sizes-kib" => {
                args.sizes = value()?
                    .split(',')
                    .map(|k| k.parse::<usize>().map(|k| k * 1024))
                    .collect::<Result<_, _>>()?
            }
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

/// One batch of about `size` bytes (one record).
fn make_batch(size: usize) -> Result<BytesMut, Error> {
    let value = vec![b'x'; size.saturating_sub(80)];
    let mut b = BatchBuilder::new(BatchOptions::default(), size);
    b.push(1_700_000_000_000, None, Some(&value), &[]);
    Ok(BytesMut::from(&b.build()?[..]))
}

/// Runs `f` on one executor pinned to the first CPU of the affinity mask (taskset).
fn on_core<F, Fut, T>(preempt_timer_ms: u64, f: F) -> Result<T, Error>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, Error>> + 'static,
    T: Send + 'static,
{
    let config = borges_runtime::executor::ExecutorConfig {
        preempt_timer_ms,
        ..Default::default()
    };
    let result = borges_runtime::executor::run_on_one_core(&config, move || async move {
        f().await.map_err(|e| e.to_string())
    })?;
    Ok(result?)
}

fn storage_config() -> StorageConfig {
    StorageConfig::default()
}

async fn append_run(
    root: &Path,
    batch_size: usize,
    durability: Durability,
    total_bytes: u64,
    in_flight: usize,
) -> Result<f64, Error> {
    let dir = root.join(format!("append-{batch_size}-{durability:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    let tuning = StorageTuning {
        writes_in_flight_max: in_flight,
        ..StorageTuning::default()
    };
    let core = CoreStorage::with_tuning(root, storage_config(), tuning).await?;
    let config = LogConfig {
        durability,
        ..LogConfig::default()
    };
    let log = PartitionLog::open(&core, dir.clone(), config).await?;
    let template = make_batch(batch_size)?;
    let count = (total_bytes / template.len() as u64).max(1);
    // Produce requests of about 64 KiB as a broker receives them: one buffer per request,
    // split into its batches without copying. They exist before the clock starts.
    let per_request = (REQUEST_SIZE_BYTES / template.len()).max(1) as u64;
    let mut requests: Vec<Vec<BytesMut>> = Vec::new();
    let mut made = 0u64;
    while made < count {
        let k = per_request.min(count - made);
        let mut buf = BytesMut::with_capacity(k as usize * template.len());
        for _ in 0..k {
            buf.extend_from_slice(&template);
        }
        requests.push((0..k).map(|_| buf.split_to(template.len())).collect());
        made += k;
    }
    let bytes = count * template.len() as u64;
    let started = Instant::now();
    let mut last = 0;
    let mut since_yield = 0u64;
    for request in requests {
        let size: u64 = request.iter().map(|b| b.len() as u64).sum();
        // Wait for room first so that append never answers Busy (which would drop the batches).
        log.wait_writable(size).await;
        since_yield += size;
        last = log.append(request, 0)?.last_offset;
        // A producer that never awaits starves the flusher; a broker connection awaits the
        // network between requests. Let other tasks run every MiB.
        if since_yield >= 1 << 20 {
            since_yield = 0;
            futures_lite::future::yield_now().await;
        }
    }
    log.wait_acked(last, AckLevel::All).await?;
    let elapsed = started.elapsed();
    log.delete().await?;
    Ok(bytes as f64 / elapsed.as_secs_f64() / 1e6)
}

/// Child mode: append big batches with `durability=none` forever, printing the log size.
async fn writer_child(dir: PathBuf) -> Result<(), Error> {
    let root = dir.parent().ok_or("no parent")?.to_path_buf();
    let core = CoreStorage::new(&root, storage_config()).await?;
    let log = PartitionLog::open(
        &core,
        dir,
        LogConfig {
            durability: Durability::None,
            ..LogConfig::default()
        },
    )
    .await?;
    let template = make_batch(256 * 1024)?;
    let mut appended = 0u64;
    loop {
        match log.append(vec![template.clone()], 0) {
            Ok(_) => appended += template.len() as u64,
            Err(StorageError::Busy { .. }) => log.wait_writable(template.len() as u64).await,
            Err(e) => return Err(e.into()),
        }
        if appended % (256 << 20) < template.len() as u64 {
            println!("size {}", log.size_bytes());
        }
    }
}

async fn open_timed(root: &Path, dir: &Path) -> Result<(Duration, Rc<PartitionLog>), Error> {
    let core = CoreStorage::new(root, storage_config()).await?;
    let started = Instant::now();
    let log = PartitionLog::open(&core, dir.to_path_buf(), LogConfig::default()).await?;
    Ok((started.elapsed(), log))
}

fn recovery_run(args: &Args) -> Result<(), Error> {
    use std::io::BufRead;
    let dir = args.dir.join("recovery-0");
    let _ = std::fs::remove_dir_all(&dir);
    let target = args.recovery_gib << 30;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("--writer-child")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let started = Instant::now();
    let mut size = 0u64;
    for line in std::io::BufReader::new(stdout).lines() {
        if let Some(v) = line?.strip_prefix("size ") {
            size = v.parse()?;
            if size >= target {
                break;
            }
        }
    }
    child.kill()?;
    child.wait()?;
    let write_secs = started.elapsed().as_secs_f64();
    println!(
        "recovery: wrote {:.2} GiB in {write_secs:.1} s ({:.0} MB/s), then SIGKILL",
        size as f64 / (1u64 << 30) as f64,
        size as f64 / write_secs / 1e6
    );
    let (root, d) = (args.dir.clone(), dir.clone());
    let (unclean, end) = on_core(PREEMPT_TIMER_MS, move || async move {
        let (took, log) = open_timed(&root, &d).await?;
        let end = log.offsets().log_end_offset;
        log.close().await?;
        Ok((took, end))
    })?;
    let (root, d) = (args.dir.clone(), dir.clone());
    let clean = on_core(PREEMPT_TIMER_MS, move || async move {
        let (took, log) = open_timed(&root, &d).await?;
        log.close().await?;
        Ok(took)
    })?;
    println!(
        "| recovery after SIGKILL ({:.1} GiB, {end} batches) | {:.3} s |",
        size as f64 / (1u64 << 30) as f64,
        unclean.as_secs_f64()
    );
    println!(
        "| open after clean shutdown (same log) | {:.3} s |",
        clean.as_secs_f64()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    if let Some(dir) = args.writer_child.clone() {
        return on_core(PREEMPT_TIMER_MS, move || writer_child(dir));
    }
    std::fs::create_dir_all(&args.dir)?;
    println!("| batch | durability | writes in flight | MB/s |");
    println!("|---|---|---|---|");
    for size in args.sizes.clone() {
        for durability in [Durability::None, Durability::Interval, Durability::Fsync] {
            let (root, total, in_flight) =
                (args.dir.clone(), args.append_mib << 20, args.in_flight);
            let mbps = on_core(PREEMPT_TIMER_MS, move || async move {
                append_run(&root, size, durability, total, in_flight).await
            })?;
            println!(
                "| {} KiB | {durability:?} | {} | {mbps:.0} |",
                size / 1024,
                args.in_flight
            );
        }
    }
    if args.recovery_gib > 0 {
        recovery_run(&args)?;
    }
    Ok(())
}
