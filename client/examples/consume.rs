//! Consumer example: read every partition of a topic from the beginning until it is idle.
//!
//! ```text
//! cargo run -p borges-client --example consume -- 127.0.0.1:9292 example-topic
//! ```

use std::time::Duration;

use borges_client::{ClientConfig, Consumer, ConsumerConfig, Offset};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".to_string());
    let topic = args.next().unwrap_or_else(|| "example-topic".to_string());
    let mut consumer =
        Consumer::new(ClientConfig::new(&bootstrap), ConsumerConfig::default()).await?;
    let partitions = consumer.partitions_for(&topic).await?;
    consumer.assign(partitions.clone()).await?;
    for tp in &partitions {
        consumer.seek(tp, Offset::Beginning).await?;
    }
    loop {
        let records = consumer.poll(Duration::from_secs(2)).await?;
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
