//! The client commands: topic, produce, consume, group.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use std::collections::BTreeMap;

use borges_client::{
    Acks, Admin, AlterConfig, ClientConfig, ClientError, Compression, Consumer, ConsumerConfig,
    ConsumerRecord, DeliveryFuture, NewTopic, Offset, OffsetReset, OffsetSpec, Producer,
    ProducerConfig, ProducerRecord, TopicPartition,
};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::args::{Command, ConsumeArgs, GroupCommand, ProduceArgs, TopicCommand};
use crate::format::{
    describe_lines, group_table, parse_rfc3339_ms, record_line, reset_table, split_key, GroupRow,
    RecordFields,
};

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
        Command::Group(group) => run_group(config, group).await,
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
    let fields = RecordFields {
        timestamp: args.print_timestamp,
        partition: args.print_partition,
        offset: args.print_offset,
        key: args.print_key,
    };
    if let Some(group) = &args.group {
        return consume_in_group(config, &args, group, fields).await;
    }
    let mut consumer = Consumer::new(config, ConsumerConfig::default()).await?;
    let partitions = match args.partition {
        Some(p) => vec![TopicPartition::new(&args.topic, p)],
        None => consumer.partitions_for(&args.topic).await?,
    };
    consumer.assign(partitions.clone()).await?;
    let start = start_offset(&args)?;
    for tp in &partitions {
        consumer.seek(tp, start).await?;
    }
    let printed = print_records(&mut consumer, &args, fields, false).await?;
    eprintln!("Processed a total of {printed} messages");
    Ok(())
}

/// `consume --group G`: joins, prints, commits what it printed, leaves.
async fn consume_in_group(
    config: ClientConfig,
    args: &ConsumeArgs,
    group: &str,
    fields: RecordFields,
) -> anyhow::Result<()> {
    if args.offset.is_some() {
        bail!("--offset cannot be combined with --group (the group's committed offsets decide)");
    }
    let consumer_config = ConsumerConfig {
        group_id: Some(group.to_string()),
        auto_offset_reset: if args.from_beginning {
            OffsetReset::Earliest
        } else {
            OffsetReset::Latest
        },
        // Positions are committed after every printed batch, on revocation and on close.
        enable_auto_commit: true,
        session_timeout_ms: args.session_timeout_ms,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config, consumer_config).await?;
    consumer.subscribe(&[args.topic.as_str()]).await?;
    let result = print_records(&mut consumer, args, fields, true).await;
    let closed = consumer.close().await;
    let printed = result?;
    closed?;
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
/// With `commit`, the group's positions are committed after each poll: the offset after the
/// last printed record of every partition, and the reset position of partitions that had no
/// record yet. Records that `poll` returned but were not printed (the `--max-messages` cut,
/// a closed pipe) are given back with `seek`, so nothing is committed past what was printed.
async fn print_records(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    fields: RecordFields,
    commit: bool,
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
        // Ctrl-C ends the command cleanly: a group member commits and leaves.
        let records = tokio::select! {
            records = consumer.poll(Duration::from_millis(wait_ms.max(1))) => {
                records.map_err(corrupt_batch_advice)?
            }
            _ = tokio::signal::ctrl_c() => break,
        };
        if !records.is_empty() {
            last_record = Instant::now();
        }
        let wanted = records.len().min((max - printed) as usize);
        let mut written = 0;
        let mut pipe_closed = false;
        for record in &records[..wanted] {
            if let Err(e) = writeln!(out, "{}", record_line(record, fields)) {
                pipe_closed = broken_pipe(e)?;
                break;
            }
            written += 1;
        }
        if !pipe_closed {
            if let Err(e) = out.flush() {
                pipe_closed = broken_pipe(e)?;
            }
        }
        printed += written as u64;
        give_back(consumer, &records[written..]).await?;
        if pipe_closed {
            break;
        }
        if commit && !records.is_empty() {
            consumer
                .commit_sync()
                .await
                .context("committing the printed records")?;
        }
    }
    Ok(printed)
}

/// A corrupt batch ends `consume` once every record before it is printed (the consumer hands
/// those over first): the error names the partition and the batch's offset, and gives the
/// command that reads on after it.
fn corrupt_batch_advice(error: ClientError) -> anyhow::Error {
    let ClientError::CorruptBatch {
        topic,
        partition,
        offset,
        next_offset,
        source,
    } = &error
    else {
        return error.into();
    };
    let advice = match next_offset {
        Some(next) => format!(
            "to read on after it (its records are skipped): \
             borges consume {topic} --partition {partition} --offset {next}"
        ),
        None => "its length is unreadable, so where the next batch starts is unknown".to_string(),
    };
    anyhow!(
        "corrupt record batch in {topic}-{partition} at offset {offset}: {source}; every record \
         before it was printed; {advice}"
    )
}

/// Moves each partition's position back to its first record in `unprinted` (records `poll`
/// returned that were not printed), so that they are neither lost nor committed.
async fn give_back(consumer: &mut Consumer, unprinted: &[ConsumerRecord]) -> anyhow::Result<()> {
    let mut first: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for record in unprinted {
        first
            .entry(TopicPartition::new(&*record.topic, record.partition))
            .or_insert(record.offset);
    }
    for (tp, offset) in first {
        consumer.seek(&tp, Offset::At(offset)).await?;
    }
    Ok(())
}

/// `Ok(true)` for a closed pipe (`borges consume ... | head`), which ends the command
/// normally; other write errors are failures.
fn broken_pipe(e: std::io::Error) -> anyhow::Result<bool> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(true)
    } else {
        Err(e.into())
    }
}

async fn run_group(config: ClientConfig, command: GroupCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    let mut out = std::io::stdout().lock();
    match command {
        GroupCommand::List => {
            for g in admin.list_groups().await? {
                writeln!(out, "{}", g.group_id)?;
            }
        }
        GroupCommand::Describe { group } => {
            let (members, rows) = describe_group(&admin, &group).await?;
            writeln!(out)?;
            if members == 0 {
                writeln!(out, "Consumer group '{group}' has no active members.")?;
                writeln!(out)?;
            }
            for line in group_table(&rows) {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
            to_datetime,
            shift_by,
            dry_run: _,
            execute,
        } => {
            let target = match (to_earliest, to_latest, to_offset, to_datetime, shift_by) {
                (true, ..) => ResetTarget::Earliest,
                (_, true, ..) => ResetTarget::Latest,
                (_, _, Some(o), ..) => ResetTarget::Offset(o),
                (_, _, _, Some(t), _) => {
                    ResetTarget::Time(parse_rfc3339_ms(&t).ok_or_else(|| {
                        anyhow!(
                            "--to-datetime `{t}` is not an RFC 3339 time like 2026-11-30T05:00:00Z"
                        )
                    })?)
                }
                (_, _, _, _, Some(n)) => ResetTarget::Shift(n),
                _ => bail!(
                    "give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
                ),
            };
            let offsets = reset_offsets(&admin, &group, &topic, target).await?;
            if execute {
                let commits: Vec<(TopicPartition, i64)> = offsets
                    .iter()
                    .map(|(p, o)| (TopicPartition::new(&topic, *p), *o))
                    .collect();
                admin.alter_group_offsets(&group, &commits).await?;
            } else {
                eprintln!("Dry run: nothing was changed (add --execute to commit these offsets).");
            }
            writeln!(out)?;
            for line in reset_table(&group, &topic, &offsets) {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
        GroupCommand::Delete { group } => {
            admin.delete_groups(&[&group]).await?;
            writeln!(
                out,
                "Deletion of requested consumer groups ('{group}') was successful."
            )?;
        }
    }
    Ok(())
}

/// The rows of `group describe`: every partition the group owns or has committed, sorted;
/// and the number of active members.
async fn describe_group(admin: &Admin, group: &str) -> anyhow::Result<(usize, Vec<GroupRow>)> {
    let description = admin.describe_groups(&[group]).await?.into_iter().next();
    let committed = admin.list_group_offsets(group).await?;
    let mut owners: BTreeMap<TopicPartition, (String, String, String)> = BTreeMap::new();
    let mut members = 0;
    if let Some(d) = &description {
        members = d.members.len();
        for m in &d.members {
            for tp in &m.assignment {
                owners.insert(
                    tp.clone(),
                    (
                        m.member_id.clone(),
                        m.client_host.clone(),
                        m.client_id.clone(),
                    ),
                );
            }
        }
    }
    if members == 0 && committed.is_empty() {
        bail!("consumer group '{group}' does not exist (no members, no committed offsets)");
    }
    let mut partitions: Vec<TopicPartition> = committed
        .iter()
        .map(|(tp, _)| tp.clone())
        .chain(owners.keys().cloned())
        .collect();
    partitions.sort();
    partitions.dedup();
    let ends = admin
        .list_offsets(
            partitions
                .iter()
                .map(|tp| (tp.clone(), OffsetSpec::Latest))
                .collect(),
        )
        .await?;
    let rows = partitions
        .iter()
        .zip(ends)
        .map(|(tp, end)| GroupRow {
            group: group.to_string(),
            topic: tp.topic.clone(),
            partition: tp.partition,
            current_offset: committed.iter().find(|(c, _)| c == tp).map(|(_, o)| *o),
            log_end_offset: end.offset,
            owner: owners.get(tp).cloned(),
        })
        .collect();
    Ok((members, rows))
}

/// Where `group reset-offsets` moves the offsets.
#[derive(Debug, Clone, Copy)]
enum ResetTarget {
    Earliest,
    Latest,
    Offset(i64),
    Time(i64),
    Shift(i64),
}

/// The new offset of every partition of `topic`, clamped to each partition's log range.
async fn reset_offsets(
    admin: &Admin,
    group: &str,
    topic: &str,
    target: ResetTarget,
) -> anyhow::Result<Vec<(i32, i64)>> {
    let described = admin.describe_topics(&[topic]).await?;
    let partitions: Vec<TopicPartition> = described[0]
        .partitions
        .iter()
        .map(|p| TopicPartition::new(topic, p.partition))
        .collect();
    let query = |spec: OffsetSpec| {
        partitions
            .iter()
            .map(|tp| (tp.clone(), spec))
            .collect::<Vec<_>>()
    };
    let earliest = admin.list_offsets(query(OffsetSpec::Earliest)).await?;
    let latest = admin.list_offsets(query(OffsetSpec::Latest)).await?;
    let committed = admin.list_group_offsets(group).await?;
    let by_time = match target {
        ResetTarget::Time(ms) => Some(admin.list_offsets(query(OffsetSpec::Timestamp(ms))).await?),
        _ => None,
    };
    let mut out = Vec::with_capacity(partitions.len());
    for (i, tp) in partitions.iter().enumerate() {
        let (low, high) = (earliest[i].offset, latest[i].offset.max(earliest[i].offset));
        let current = committed
            .iter()
            .find(|(c, _)| c == tp)
            .map_or(low, |(_, o)| *o);
        let wanted = match target {
            ResetTarget::Earliest => low,
            ResetTarget::Latest => high,
            ResetTarget::Offset(o) => o,
            ResetTarget::Time(_) => {
                by_time
                    .as_ref()
                    .map_or(high, |t| if t[i].offset < 0 { high } else { t[i].offset })
            }
            ResetTarget::Shift(n) => current.saturating_add(n),
        };
        out.push((tp.partition, wanted.clamp(low, high)));
    }
    Ok(out)
}
