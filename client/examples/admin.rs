//! Admin example: create a topic (each topic's result), describe it, alter a config, list
//! offsets and groups.
//!
//! ```text
//! cargo run -p borges-client --example admin -- --bootstrap 127.0.0.1:9292 --topic example-topic
//! ```

use std::process::ExitCode;

use borges_client::{
    Admin, AlterConfig, ClientConfig, ErrorCode, NewTopic, OffsetSpec, TopicPartition,
};
use clap::Parser;

/// Administers `--topic`.
#[derive(Parser)]
struct Args {
    /// Broker to contact first.
    #[arg(long, default_value = "127.0.0.1:9292")]
    bootstrap: String,
    /// Topic to create (4 partitions) and describe.
    #[arg(long, default_value = "example-topic")]
    topic: String,
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
    let topic = args.topic;
    let admin = Admin::new(ClientConfig::new(&args.bootstrap)).await?;

    let new = NewTopic::new(&topic, 4).config("retention.ms", "86400000");
    for created in admin.create_topics_each(vec![new]).await? {
        match created.result {
            Ok(()) => println!("created {}", created.name),
            Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {
                println!("{} exists", created.name)
            }
            Err(e) => return Err(e),
        }
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
    for group in admin.list_groups().await? {
        println!("group {} is {}", group.group_id, group.state);
    }
    Ok(())
}
