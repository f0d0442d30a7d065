//! Consumer-group example: joins a group, prints assignment changes and records (read as a
//! `Stream`), commits, leaves. Run it twice with the same group to see the partitions split.
//!
//! ```text
//! cargo run -p borges-client --example group_consume -- \
//!     --bootstrap 127.0.0.1:9292 --topic example-topic --group example-group
//! ```

use std::process::ExitCode;
use std::time::Duration;

use borges_client::{
    ClientConfig, Consumer, ConsumerConfig, OffsetReset, RebalanceListener, TopicPartition,
};
use clap::Parser;
use futures_lite::StreamExt;

/// Reads `--topic` as a member of `--group` for `--seconds`.
#[derive(Parser)]
struct Args {
    /// Broker to contact first.
    #[arg(long, default_value = "127.0.0.1:9292")]
    bootstrap: String,
    /// Topic to subscribe to.
    #[arg(long, default_value = "example-topic")]
    topic: String,
    /// Consumer group.
    #[arg(long, default_value = "example-group")]
    group: String,
    /// How long to read before leaving the group.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

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
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> borges_client::Result<()> {
    let config = ConsumerConfig::default()
        .group_id(&args.group)
        .auto_offset_reset(OffsetReset::Earliest)
        .auto_commit_interval(Duration::from_secs(5));
    let mut consumer = Consumer::new(ClientConfig::new(&args.bootstrap), config).await?;
    consumer
        .subscribe_with_listener(&[args.topic.as_str()], Box::new(Printer))
        .await?;
    // Auto-commit commits the positions every 5 s, on revocation and on close.
    let read = async {
        let mut records = consumer.stream();
        while let Some(record) = records.next().await {
            let r = record?;
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            println!("{}-{}@{}: {value:?}", r.topic, r.partition, r.offset);
        }
        Ok(())
    };
    // The time being up (the timeout's Err) ends the reading normally.
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(args.seconds), read).await {
        return Err(e);
    }
    consumer.close().await
}
