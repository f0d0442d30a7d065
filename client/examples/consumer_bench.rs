//! Consumer catch-up throughput from one core: fills a topic with `--records` records of
//! `--record-size` bytes (skipped with `--fill false`), then reads them all from the beginning
//! and prints MB/s and the consumer thread's CPU time. Needs a running broker.
//!
//! ```text
//! borges broker --data-dir /tmp/bench --cores 1 &
//! taskset -c 0 target/release/examples/consumer_bench --bootstrap 127.0.0.1:9292 --records 2000000
//! ```

use std::time::{Duration, Instant};

use borges_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, ErrorCode, NewTopic, Offset, Producer,
    ProducerConfig, ProducerRecord,
};
use bytes::Bytes;

mod bench_util;

use bench_util::{arg, malloc_keep_if_asked, schedstat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    malloc_keep_if_asked(256 << 20);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

/// Creates `topic` with `partitions` (unless it exists) and writes `records` records of
/// `record_size` bytes to it (acks=1).
async fn fill(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    records: u64,
    record_size: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    match Admin::new(config.clone())
        .await?
        .create_topics(vec![NewTopic::new(topic, partitions)])
        .await
    {
        Err(e) if e.code() != Some(ErrorCode::TopicAlreadyExists) => return Err(e.into()),
        _ => {}
    }
    let producer = Producer::new(
        config.clone(),
        ProducerConfig {
            acks: Acks::Leader,
            batch_size_bytes: 256 * 1024,
            ..ProducerConfig::default()
        },
    )
    .await?;
    let value = Bytes::from(vec![b'x'; record_size]);
    let topic: std::sync::Arc<str> = topic.into();
    for _ in 0..records {
        drop(
            producer
                .send(ProducerRecord::new(topic.clone()).value(value.clone()))
                .await?,
        );
    }
    producer.close().await?;
    Ok(())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let bootstrap = arg("--bootstrap", "127.0.0.1:9292");
    let topic = arg("--topic", "consumer-bench");
    let partitions: i32 = arg("--partitions", "1").parse()?;
    let records: u64 = arg("--records", "1000000").parse()?;
    let record_size: usize = arg("--record-size", "1024").parse()?;
    let config = ClientConfig::new(&bootstrap);
    if arg("--fill", "true") == "true" {
        fill(&config, &topic, partitions, records, record_size).await?;
    }
    let consumer_config = ConsumerConfig {
        partition_fetch_bytes_max: arg("--partition-fetch-bytes", "4194304").parse()?,
        max_poll_records: 10_000,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config, consumer_config).await?;
    let tps = consumer.partitions_for(&topic).await?;
    consumer.assign(tps.clone()).await?;
    for tp in &tps {
        consumer.seek(tp, Offset::Beginning).await?;
    }
    let start = Instant::now();
    let sched = schedstat();
    let (mut count, mut bytes) = (0u64, 0u64);
    while count < records {
        let batch = consumer.poll(Duration::from_secs(5)).await?;
        if batch.is_empty() {
            break;
        }
        for r in &batch {
            bytes += r.value.as_ref().map_or(0, |v| v.len() as u64);
        }
        count += batch.len() as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let end = schedstat();
    let on_cpu = (end.0 - sched.0) as f64 / 1e9;
    println!(
        "records={count} record_size={record_size} seconds={elapsed:.3} MB/s={:.1} records/s={:.0} on_cpu_s={on_cpu:.3} runqueue_wait_s={:.3} MB_per_cpu_s={:.1}",
        bytes as f64 / elapsed / 1e6,
        count as f64 / elapsed,
        (end.1 - sched.1) as f64 / 1e9,
        bytes as f64 / on_cpu / 1e6,
    );
    Ok(())
}
