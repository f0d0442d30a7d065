//! Test tool: appends to one partition log forever and prints `acked <offset>` after each
//! acknowledged append, so that a test can kill it with SIGKILL mid-write and check recovery
//! against what it reported. Usage: `borges-storage-crash-writer DIR fsync|interval|none`.
//! Record `o` holds the value `v<o>-` followed by padding.

use std::io::Write;
use std::path::PathBuf;

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_storage::{AckLevel, CoreStorage, Durability, LogConfig, PartitionLog, StorageConfig};
use bytes::BytesMut;

type Error = Box<dyn std::error::Error>;

fn batch(first: i64, records: u32, pad: usize) -> Result<BytesMut, Error> {
    let mut b = BatchBuilder::new(BatchOptions::default(), 64 + pad * records as usize);
    for i in 0..records {
        let mut value = format!("v{}-", first + i64::from(i)).into_bytes();
        value.resize(value.len() + pad, b'x');
        b.push(1_000 + first, None, Some(&value), &[]);
    }
    Ok(BytesMut::from(&b.build()?[..]))
}

async fn write_forever(dir: PathBuf, durability: Durability) -> Result<(), Error> {
    let root = dir.parent().ok_or("DIR needs a parent")?.to_path_buf();
    let core = CoreStorage::new(
        &root,
        StorageConfig {
            recovery_checkpoint_interval_ms: 50,
            ..StorageConfig::default()
        },
    )
    .await?;
    let config = LogConfig {
        segment_size_bytes: 256 * 1024,
        index_interval_bytes: 1024,
        durability,
        ..LogConfig::default()
    };
    let log = PartitionLog::open(&core, dir, config).await?;
    let mut next = log.offsets().log_end_offset;
    let mut out = std::io::stdout().lock();
    writeln!(out, "start {next}")?;
    out.flush()?;
    let mut round = 0u64;
    loop {
        let mut last = next;
        // A few appends in flight per acknowledgement wait, as a broker would have.
        for i in 0..4u64 {
            let records = 1 + ((round + i) % 4) as u32;
            let pad = 20 + ((round * 7 + i * 13) % 900) as usize;
            let info = log.append(vec![batch(next, records, pad)?], 1)?;
            last = info.last_offset;
            next = last + 1;
        }
        log.wait_acked(last, AckLevel::All).await?;
        writeln!(out, "acked {last}")?;
        out.flush()?;
        round += 1;
    }
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: DIR fsync|interval|none")?);
    let durability = match args.next().as_deref() {
        Some("fsync") => Durability::Fsync,
        Some("interval") => Durability::Interval,
        Some("none") => Durability::None,
        other => return Err(format!("unknown durability {other:?}").into()),
    };
    // A long preemption timer: glommio 0.9 can park an executor with runnable tasks when the
    // timer fires at the top of its loop (see storage/tests/common/mod.rs).
    let config = borges_runtime::executor::ExecutorConfig {
        preempt_timer_ms: 1000,
        ..Default::default()
    };
    borges_runtime::executor::run_on_one_core(&config, move || async move {
        write_forever(dir, durability)
            .await
            .map_err(|e| e.to_string())
    })??;
    Ok(())
}
