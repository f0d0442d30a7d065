//! The final read: every partition from its log start to its high watermark, each through a
//! fresh assign-mode consumer, recorded as `final_read` chunks and one `final_end`.
//!
//! The bounds come from ListOffsets (earliest, latest) at the leader before the read starts;
//! the workload has stopped, so the high watermark no longer moves. A partition whose read does
//! not reach its high watermark within the wait gets no `final_end` (the checker then does not
//! take it as complete) and is reported.

use std::time::Duration;

use anyhow::{bail, Result};
use borges_checker::history::{parse_value, Offset, Partition, Value};
use borges_checker::Recorder;
use borges_client::{
    ClientConfig, Consumer, ConsumerConfig, Offset as At, OffsetReset, TopicPartition,
};
use tokio::time::Instant;

/// What the final read of one partition found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRead {
    /// The partition.
    pub partition: Partition,
    /// Its log start and high watermark, when ListOffsets answered.
    pub bounds: Option<(Offset, Offset)>,
    /// Records read.
    pub records: usize,
    /// Whether the read reached the high watermark.
    pub complete: bool,
}

/// Reads every partition of `topic` back, recording into `recorder` (a fresh process per
/// partition). `wait` bounds each partition's read.
pub async fn read_back(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    recorder: &Recorder,
    wait: Duration,
) -> Vec<PartitionRead> {
    let mut out = Vec::new();
    for partition in 0..partitions {
        let read = match read_partition(config, topic, partition, recorder, wait).await {
            Ok(read) => read,
            Err(e) => {
                eprintln!("fault-driver: final read of {topic}-{partition}: {e:#}");
                PartitionRead {
                    partition,
                    bounds: None,
                    records: 0,
                    complete: false,
                }
            }
        };
        out.push(read);
    }
    if let Err(e) = recorder.flush() {
        eprintln!("fault-driver: writing the final-read history: {e}");
    }
    out
}

/// The partition's log start and high watermark, looked up by `consumer` (assigned to `tp`),
/// which sends ListOffsets to the leader. Retried until `deadline` (leaders may still move).
async fn bounds(
    consumer: &mut Consumer,
    tp: &TopicPartition,
    deadline: Instant,
) -> Result<(i64, i64)> {
    loop {
        let looked_up = async {
            consumer.seek(tp, At::End).await?;
            let hw = consumer.position(tp);
            consumer.seek(tp, At::Beginning).await?;
            Ok::<_, borges_client::ClientError>((consumer.position(tp), hw))
        };
        match looked_up.await {
            Ok((Some(start), Some(hw))) => return Ok((start, hw)),
            Ok(_) => bail!("no position after a seek"),
            Err(e) if Instant::now() >= deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn read_partition(
    config: &ClientConfig,
    topic: &str,
    partition: Partition,
    recorder: &Recorder,
    wait: Duration,
) -> Result<PartitionRead> {
    let tp = TopicPartition::new(topic, partition);
    let deadline = Instant::now() + wait;
    let process = recorder.process();
    let consumer_config = ConsumerConfig {
        fetch_max_wait_ms: 100,
        auto_offset_reset: OffsetReset::None,
        max_poll_records: 5_000,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config.clone(), consumer_config).await?;
    consumer.assign(vec![tp.clone()]).await?;
    let (log_start, hw) = bounds(&mut consumer, &tp, deadline).await?;
    let mut read = PartitionRead {
        partition,
        bounds: Some((log_start, hw)),
        records: 0,
        complete: false,
    };
    while consumer.position(&tp).unwrap_or(log_start) < hw {
        if Instant::now() >= deadline {
            let _ = consumer.close().await;
            return Ok(read);
        }
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(records) => {
                let chunk: Vec<(Offset, Value)> = records
                    .iter()
                    .filter(|r| r.partition == partition && r.offset < hw)
                    .map(|r| {
                        let v = r.value.as_deref().and_then(parse_value);
                        (r.offset, v.unwrap_or(Value::MAX))
                    })
                    .collect();
                read.records += chunk.len();
                if !chunk.is_empty() {
                    recorder.final_read(process, partition, &chunk);
                }
            }
            Err(e) => {
                eprintln!("fault-driver: final read of {tp}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    recorder.final_end(process, partition, log_start, hw);
    read.complete = true;
    let _ = consumer.close().await;
    Ok(read)
}
