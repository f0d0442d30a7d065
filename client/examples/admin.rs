//! Admin example: create a topic, describe it, alter a config, list offsets.
//!
//! ```text
//! cargo run -p borges-client --example admin -- 127.0.0.1:9292 example-topic
//! ```

use borges_client::{
    Admin, AlterConfig, ClientConfig, ErrorCode, NewTopic, OffsetSpec, TopicPartition,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".to_string());
    let topic = args.next().unwrap_or_else(|| "example-topic".to_string());
    let admin = Admin::new(ClientConfig::new(&bootstrap)).await?;

    match admin
        .create_topics(vec![
            NewTopic::new(&topic, 4).config("retention.ms", "86400000")
        ])
        .await
    {
        Ok(()) => println!("created {topic}"),
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => println!("{topic} exists"),
        Err(e) => return Err(e.into()),
    }
    admin
        .alter_configs(&topic, vec![AlterConfig::set("retention.ms", "3600000")])
        .await?;
    for description in admin.describe_topics(&[topic.as_str()]).await? {
        println!(
            "{} (id {}), {} partitions",
            description.name,
            description.topic_id,
            description.partitions.len()
        );
        for p in &description.partitions {
            println!(
                "  partition {} leader {} core {} isr {:?}",
                p.partition, p.leader, p.leader_core, p.isr
            );
        }
        for c in description
            .configs
            .iter()
            .filter(|c| c.name == "retention.ms")
        {
            println!("  {} = {:?} ({:?})", c.name, c.value, c.source);
        }
    }
    let queries = (0..4)
        .flat_map(|p| {
            [
                (TopicPartition::new(&topic, p), OffsetSpec::Earliest),
                (TopicPartition::new(&topic, p), OffsetSpec::Latest),
            ]
        })
        .collect();
    for listed in admin.list_offsets(queries).await? {
        println!("  {} offset {}", listed.topic_partition, listed.offset);
    }
    println!("topics: {:?}", admin.list_topics().await?);
    Ok(())
}
