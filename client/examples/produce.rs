//! Producer example: keyed records, waiting for each acknowledgement.
//!
//! ```text
//! cargo run -p borges-client --example produce -- 127.0.0.1:9292 example-topic
//! ```

use borges_client::{Acks, ClientConfig, Producer, ProducerConfig, ProducerRecord};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".to_string());
    let topic = args.next().unwrap_or_else(|| "example-topic".to_string());
    let config = ProducerConfig {
        acks: Acks::All,
        linger_ms: 5,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(ClientConfig::new(&bootstrap), config).await?;

    // send() queues the record (waiting only when the buffer is full) and returns a future
    // that resolves once the broker acknowledged it.
    let mut acks = Vec::new();
    for i in 0..10 {
        let record = ProducerRecord::new(topic.as_str())
            .key(format!("user-{}", i % 3))
            .value(format!("event {i}"))
            .header("source", "example");
        acks.push(producer.send(record).await?);
    }
    for ack in acks {
        let written = ack.await?;
        println!(
            "{}-{} offset {}",
            written.topic, written.partition, written.offset
        );
    }
    producer.close().await?;
    Ok(())
}
