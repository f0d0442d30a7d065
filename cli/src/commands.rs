//! The client commands: topic, produce, consume, group.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use borges_client::{
    Acks, Admin, AlterConfig, ClientConfig, Compression, Consumer, ConsumerConfig, DeliveryFuture,
    NewTopic, Offset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::args::{Command, ConsumeArgs, GroupCommand, ProduceArgs, TopicCommand};
use crate::format::{describe_lines, record_line, split_key, RecordFields};

/// How long `produce` waits for a topic's metadata before giving up.
const PRODUCE_METADATA_WAIT_MS: u64 = 10_000;
/// Longest single wait inside `consume` (so `--timeout-ms` is honoured closely).
const CONSUME_POLL_MS_MAX: u64 = 200;
/// Delivery futures `produce` keeps in its checking queue at most.
const PRODUCE_PENDING_ACKS_MAX: usize = 100_000;

/// Runs one client command against `bootstrap`.
pub async fn run(bootstrap: &str, command: Command) -> anyhow::Result<()> {
    let config = ClientConfig::new(bootstrap).client_id("borges-cli");
    match command {
        Command::Topic(topic) => run_topic(config, topic).await,
        Command::Produce(args) => produce(config, args).await,
        Command::Consume(args) => consume(config, args).await,
        Command::Group(group) => run_group(group),
        Command::Broker(_) => unreachable!("the broker runs without a tokio runtime"),
    }
}

async fn run_topic(config: ClientConfig, command: TopicCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    let mut out = std::io::stdout().lock();
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let mut topic = NewTopic::new(&name, partitions.unwrap_or(-1))
                .replication_factor(replication_factor.unwrap_or(-1));
            topic.configs = configs;
            admin.create_topics(vec![topic]).await?;
            writeln!(out, "Created topic {name}.")?;
        }
        TopicCommand::Describe { name } => {
            let names = match name {
                Some(name) => vec![name],
                None => admin.list_all_topics().await?,
            };
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            for topic in admin.describe_topics(&refs).await? {
                for line in describe_lines(&topic) {
                    writeln!(out, "{line}")?;
                }
            }
        }
        TopicCommand::List { exclude_internal } => {
            let names = if exclude_internal {
                admin.list_topics().await?
            } else {
                admin.list_all_topics().await?
            };
            for name in names {
                writeln!(out, "{name}")?;
            }
        }
        TopicCommand::Delete { name } => {
            admin.delete_topics(&[&name]).await?;
            writeln!(out, "Deleted topic {name}.")?;
        }
        TopicCommand::Alter {
            name,
            configs,
            delete_configs,
        } => {
            if configs.is_empty() && delete_configs.is_empty() {
                bail!("nothing to alter: give --config KEY=VALUE or --delete-config KEY");
            }
            let mut changes: Vec<AlterConfig> = configs
                .into_iter()
                .map(|(k, v)| AlterConfig::Set(k, v))
                .collect();
            changes.extend(delete_configs.into_iter().map(AlterConfig::Delete));
            admin.alter_configs(&name, changes).await?;
            writeln!(out, "Completed updating config for topic {name}.")?;
        }
    }
    Ok(())
}

async fn produce(config: ClientConfig, args: ProduceArgs) -> anyhow::Result<()> {
    let producer_config = ProducerConfig {
        acks: Acks::parse(&args.acks).ok_or_else(|| anyhow!("--acks must be 0, 1 or all"))?,
        linger_ms: args.linger_ms,
        compression: if args.compression == "zstd" {
            Compression::Zstd
        } else {
            Compression::None
        },
        max_block_ms: PRODUCE_METADATA_WAIT_MS,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config, producer_config).await?;
    let (acks_tx, acks_rx) = mpsc::channel::<(u64, DeliveryFuture)>(PRODUCE_PENDING_ACKS_MAX);
    let checker = tokio::spawn(check_acks(acks_rx));
    let topic: std::sync::Arc<str> = args.topic.as_str().into();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut line_number = 0u64;
    let mut input_error = None;
    while let Some(line) = lines.next_line().await.context("reading standard input")? {
        line_number += 1;
        let line = line.strip_suffix('\r').unwrap_or(&line).to_string();
        let mut record = ProducerRecord::new(topic.clone());
        match &args.key_separator {
            Some(sep) => match split_key(&line, sep) {
                Some((key, value)) => record = record.key(key.to_string()).value(value.to_string()),
                None => {
                    input_error = Some(anyhow!("line {line_number} has no key separator `{sep}`"));
                    break;
                }
            },
            None => record = record.value(line),
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        let ack = producer.send(record).await?;
        if acks_tx.send((line_number, ack)).await.is_err() {
            break;
        }
    }
    producer.flush().await?;
    drop(acks_tx);
    let (acknowledged, failure) = checker.await?;
    producer.close().await?;
    if let Some(e) = input_error {
        return Err(e.context(format!("{acknowledged} records before it were sent")));
    }
    if let Some((failed, line, error)) = failure {
        bail!(
            "{failed} of {line_number} records were not acknowledged (first: line {line}: {error})"
        );
    }
    Ok(())
}

/// Awaits every delivery future in order; returns how many succeeded and the first failure
/// (count of failures, line number, error).
async fn check_acks(
    mut acks: mpsc::Receiver<(u64, DeliveryFuture)>,
) -> (u64, Option<(u64, u64, borges_client::ClientError)>) {
    let mut acknowledged = 0;
    let mut failure: Option<(u64, u64, borges_client::ClientError)> = None;
    while let Some((line, ack)) = acks.recv().await {
        match ack.await {
            Ok(_) => acknowledged += 1,
            Err(e) => match &mut failure {
                Some((n, _, _)) => *n += 1,
                None => failure = Some((1, line, e)),
            },
        }
    }
    (acknowledged, failure)
}

async fn consume(config: ClientConfig, args: ConsumeArgs) -> anyhow::Result<()> {
    let consumer_config = ConsumerConfig {
        group_id: args.group.clone(),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config, consumer_config).await?;
    let partitions = match args.partition {
        Some(p) => vec![TopicPartition::new(&args.topic, p)],
        None => consumer.partitions_for(&args.topic).await?,
    };
    consumer.assign(partitions.clone()).await?;
    let start = start_offset(&args)?;
    for tp in &partitions {
        consumer.seek(tp, start).await?;
    }
    let fields = RecordFields {
        timestamp: args.print_timestamp,
        partition: args.print_partition,
        offset: args.print_offset,
        key: args.print_key,
    };
    let printed = print_records(&mut consumer, &args, fields).await?;
    eprintln!("Processed a total of {printed} messages");
    Ok(())
}

fn start_offset(args: &ConsumeArgs) -> anyhow::Result<Offset> {
    Ok(match args.offset.as_deref() {
        Some("earliest") => Offset::Beginning,
        Some("latest") => Offset::End,
        Some(text) => Offset::At(text.parse::<i64>().ok().filter(|o| *o >= 0).ok_or_else(
            || {
                anyhow!(
                    "--offset must be a non-negative number, `earliest` or `latest`, not `{text}`"
                )
            },
        )?),
        None if args.from_beginning => Offset::Beginning,
        None => Offset::End,
    })
}

/// Polls and prints until `--max-messages` records or `--timeout-ms` without a record.
async fn print_records(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    fields: RecordFields,
) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    let mut last_record = Instant::now();
    let max = args.max_messages.unwrap_or(u64::MAX);
    while printed < max {
        let wait_ms = match args.timeout_ms {
            Some(timeout) => {
                let idle = last_record.elapsed().as_millis() as u64;
                if idle >= timeout {
                    break;
                }
                (timeout - idle).min(CONSUME_POLL_MS_MAX)
            }
            None => CONSUME_POLL_MS_MAX,
        };
        let records = consumer.poll(Duration::from_millis(wait_ms.max(1))).await?;
        if !records.is_empty() {
            last_record = Instant::now();
        }
        for record in records.iter().take((max - printed) as usize) {
            if let Err(e) = writeln!(out, "{}", record_line(record, fields)) {
                return broken_pipe_is_fine(e, printed);
            }
            printed += 1;
        }
        if let Err(e) = out.flush() {
            return broken_pipe_is_fine(e, printed);
        }
    }
    Ok(printed)
}

fn broken_pipe_is_fine(e: std::io::Error, printed: u64) -> anyhow::Result<u64> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(printed)
    } else {
        Err(e.into())
    }
}

fn run_group(command: GroupCommand) -> anyhow::Result<()> {
    let what = match command {
        GroupCommand::List => "borges group list".to_string(),
        GroupCommand::Describe { group } => format!("borges group describe {group}"),
        GroupCommand::ResetOffsets { group, .. } => format!("borges group reset-offsets {group}"),
    };
    bail!("{what}: consumer groups are not implemented in this version of the SDK and CLI yet (issue 6)")
}
