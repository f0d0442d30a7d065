//! Producer throughput from one core: sends `--records` records of `--record-size` bytes as
//! fast as the producer accepts them, then flushes, and prints MB/s and records/s. Runs the
//! whole producer on one tokio current-thread runtime (one OS thread); pin it with taskset.
//!
//! ```text
//! taskset -c 1 target/release/examples/sink --partitions 8 &
//! taskset -c 0 target/release/examples/producer_bench --bootstrap 127.0.0.1:19393 --records 4000000 --record-size 1024 --acks 1
//! ```

use std::sync::Arc;
use std::time::Instant;

use borges_client::{Acks, ClientConfig, Compression, Producer, ProducerConfig, ProducerRecord};
use bytes::Bytes;

mod bench_util;

use bench_util::{arg, malloc_keep_if_asked, schedstat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    malloc_keep_if_asked(64 << 20);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let bootstrap = arg("--bootstrap", "127.0.0.1:19393");
    let topic: Arc<str> = arg("--topic", "bench").into();
    let records: u64 = arg("--records", "2000000").parse()?;
    let record_size: usize = arg("--record-size", "1024").parse()?;
    let acks = Acks::parse(&arg("--acks", "1")).ok_or("--acks must be 0, 1 or all")?;
    let compression = match arg("--compression", "none").as_str() {
        "zstd" => Compression::Zstd,
        _ => Compression::None,
    };
    let config = ProducerConfig {
        acks,
        compression,
        linger_ms: arg("--linger-ms", "5").parse()?,
        batch_size_bytes: arg("--batch-size", "262144").parse()?,
        request_size_bytes_max: arg("--request-size", "4194304").parse()?,
        buffer_memory_bytes_max: arg("--buffer-memory", "67108864").parse()?,
        ..ProducerConfig::default()
    };
    let keyed = arg("--keyed", "false") == "true";
    let producer = Producer::new(ClientConfig::new(&bootstrap), config).await?;
    let value = Bytes::from(vec![b'x'; record_size]);
    // Warm up: connections, metadata, allocator.
    for _ in 0..10_000 {
        // The delivery future is dropped: flush() below waits for the acknowledgements.
        drop(
            producer
                .send(ProducerRecord::new(topic.clone()).value(value.clone()))
                .await?,
        );
    }
    producer.flush().await?;
    let start = Instant::now();
    let sched_start = schedstat();
    let mut last = None;
    for i in 0..records {
        let mut record = ProducerRecord::new(topic.clone()).value(value.clone());
        if keyed {
            record = record.key(Bytes::from((i % 1024).to_string()));
        }
        last = Some(producer.send(record).await?);
    }
    producer.flush().await?;
    let elapsed = start.elapsed().as_secs_f64();
    let sched_end = schedstat();
    let on_cpu = (sched_end.0 - sched_start.0) as f64 / 1e9;
    let waiting = (sched_end.1 - sched_start.1) as f64 / 1e9;
    if let Some(last) = last {
        let metadata = last.await?;
        eprintln!(
            "last record: partition {} offset {}",
            metadata.partition, metadata.offset
        );
    }
    let bytes = records as f64 * record_size as f64;
    println!(
        "records={records} record_size={record_size} acks={acks:?} compression={compression:?} seconds={elapsed:.3} MB/s={:.1} records/s={:.0} on_cpu_s={on_cpu:.3} runqueue_wait_s={waiting:.3} MB_per_cpu_s={:.1}",
        bytes / elapsed / 1e6,
        records as f64 / elapsed,
        bytes / on_cpu / 1e6,
    );
    Ok(())
}
