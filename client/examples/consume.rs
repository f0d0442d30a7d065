//! Consumer example: reads every partition of a topic from the beginning until it is idle
//! for `--idle-ms`.
//!
//! ```text
//! cargo run -p borges-client --example consume -- --bootstrap 127.0.0.1:9292 --topic example-topic
//! ```

use std::process::ExitCode;
use std::time::Duration;

use borges_client::{ClientConfig, Consumer, ConsumerConfig, Offset};
use clap::Parser;

/// Prints every record of `--topic`.
#[derive(Parser)]
struct Args {
    /// Broker to contact first.
    #[arg(long, default_value = "127.0.0.1:9292")]
    bootstrap: String,
    /// Topic to read (it must exist).
    #[arg(long, default_value = "example-topic")]
    topic: String,
    /// Stop after this long without a record.
    #[arg(long, default_value_t = 2_000)]
    idle_ms: u64,
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
    let mut consumer = Consumer::new(
        ClientConfig::new(&args.bootstrap),
        ConsumerConfig::default(),
    )
    .await?;
    let partitions = consumer.partitions_for(&args.topic).await?;
    consumer.assign(partitions.clone()).await?;
    for tp in &partitions {
        consumer.seek(tp, Offset::Beginning).await?;
    }
    loop {
        let records = consumer.poll(Duration::from_millis(args.idle_ms)).await?;
        if records.is_empty() {
            break;
        }
        for r in records {
            let key = r.key.as_deref().map(String::from_utf8_lossy);
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            println!(
                "{}-{}@{} ts={} key={key:?} value={value:?} headers={}",
                r.topic,
                r.partition,
                r.offset,
                r.timestamp,
                r.headers.len()
            );
        }
    }
    for tp in &partitions {
        println!("{tp} position {:?}", consumer.position(tp));
    }
    Ok(())
}
