//! Consumer-group example: join a group, print assignment changes and records, commit, leave.
//! Run it twice with the same group to see the partitions split between the two.
//!
//! ```text
//! cargo run -p borges-client --example group_consume -- 127.0.0.1:9292 example-topic example-group
//! ```

use std::time::{Duration, Instant};

use borges_client::{
    ClientConfig, Consumer, ConsumerConfig, OffsetReset, RebalanceListener, TopicPartition,
};

struct Printer;

impl RebalanceListener for Printer {
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        println!("assigned: {partitions:?}");
    }

    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        println!("revoked: {partitions:?}");
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".to_string());
    let topic = args.next().unwrap_or_else(|| "example-topic".to_string());
    let group = args.next().unwrap_or_else(|| "example-group".to_string());
    let config = ConsumerConfig {
        group_id: Some(group),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: true,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(ClientConfig::new(&bootstrap), config).await?;
    consumer
        .subscribe_with_listener(&[topic.as_str()], Box::new(Printer))
        .await?;
    // Read for 30 seconds; auto-commit commits the positions every 5 s and on close.
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            println!("{}-{}@{}: {value:?}", r.topic, r.partition, r.offset);
        }
    }
    consumer.close().await?;
    Ok(())
}
