//! Producer example: creates the topic if needed, sends keyed records with a header and waits
//! for each acknowledgement.
//!
//! ```text
//! cargo run -p borges-client --example produce -- \
//!     --bootstrap 127.0.0.1:9292 --topic example-topic --count 10
//! ```

use std::process::ExitCode;
use std::time::Duration;

use borges_client::{
    Acks, Admin, ClientConfig, ErrorCode, NewTopic, Producer, ProducerConfig, ProducerRecord,
};
use clap::Parser;

/// Sends `--count` keyed records to `--topic`.
#[derive(Parser)]
struct Args {
    /// Broker to contact first.
    #[arg(long, default_value = "127.0.0.1:9292")]
    bootstrap: String,
    /// Topic to send to (created with `--partitions` when it does not exist).
    #[arg(long, default_value = "example-topic")]
    topic: String,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Records to send.
    #[arg(long, default_value_t = 10)]
    count: u32,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: `error: NotEnoughReplicas: ...`.
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> borges_client::Result<()> {
    let client = ClientConfig::new(&args.bootstrap);
    create_topic_if_missing(&client, &args.topic, args.partitions).await?;
    let config = ProducerConfig {
        acks: Acks::All,
        ..ProducerConfig::default()
    }
    .linger(Duration::from_millis(5))
    .delivery_timeout(Duration::from_secs(30));
    let producer = Producer::new(client, config).await?;

    // send() queues the record (waiting only when the buffer is full) and returns a future
    // that resolves once the broker acknowledged it.
    let mut acks = Vec::new();
    for i in 0..args.count {
        let record = ProducerRecord::new(args.topic.as_str())
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
    producer.close().await
}

async fn create_topic_if_missing(
    client: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> borges_client::Result<()> {
    let admin = Admin::new(client.clone()).await?;
    match admin
        .create_topics(vec![NewTopic::new(topic, partitions)])
        .await
    {
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => Ok(()),
        other => other,
    }
}
