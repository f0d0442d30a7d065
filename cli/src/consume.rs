//! `borges consume`: prints records, one per line, as kafka-console-consumer does.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use borges_client::{
    ClientConfig, ClientError, Consumer, ConsumerConfig, ConsumerRecord, ErrorCode, Offset,
    OffsetReset, TopicPartition,
};

use crate::args::ConsumeArgs;
use crate::commands::usage;
use crate::format::{record_line, RecordFields};
use crate::output::{Progress, Ui};

/// Longest single wait inside `consume` (so `--timeout-ms` is honoured closely).
const CONSUME_POLL_MS_MAX: u64 = 200;
/// While no record arrives, whether the topic still exists is checked this often.
const TOPIC_CHECK_INTERVAL_MS: u64 = 2_000;

/// The fields to print, from the flags and then the `--property` settings.
fn record_fields(args: &ConsumeArgs) -> anyhow::Result<RecordFields> {
    let mut fields = RecordFields {
        timestamp: args.print_timestamp,
        partition: args.print_partition,
        offset: args.print_offset,
        headers: args.print_headers,
        key: args.print_key,
        value: !args.no_value,
        ..RecordFields::default()
    };
    if let Some(sep) = &args.key_separator {
        fields.separator = sep.clone();
    }
    if let Some(null) = &args.null_literal {
        fields.null_literal = null.clone();
    }
    for (name, value) in &args.properties {
        if let Err(e) = fields.apply_property(name, value) {
            usage!("{e}");
        }
    }
    Ok(fields)
}

/// Runs `consume`.
pub async fn run(config: ClientConfig, ui: Ui, args: ConsumeArgs) -> anyhow::Result<()> {
    let fields = record_fields(&args)?;
    let start = start_offset(&args)?;
    let printed = Arc::new(AtomicU64::new(0));
    let progress = {
        let printed = printed.clone();
        Progress::start(ui.consume_progress(), move || {
            format!("consume: {} records", printed.load(Ordering::Relaxed))
        })
    };
    let result = match &args.group {
        Some(group) => consume_in_group(config, &args, group, &fields, &printed).await,
        None => consume_assigned(config, &args, start, &fields, &printed).await,
    };
    progress.finish();
    result?;
    eprintln!(
        "Processed a total of {} messages",
        printed.load(Ordering::Relaxed)
    );
    Ok(())
}

async fn consume_assigned(
    config: ClientConfig,
    args: &ConsumeArgs,
    start: Offset,
    fields: &RecordFields,
    printed: &AtomicU64,
) -> anyhow::Result<()> {
    let topic = args.name.name();
    let mut consumer = Consumer::new(config, ConsumerConfig::default()).await?;
    let partitions = match args.partition {
        Some(p) => vec![TopicPartition::new(topic, p)],
        None => consumer.partitions_for(topic).await?,
    };
    consumer.assign(partitions.clone()).await?;
    for tp in &partitions {
        consumer.seek(tp, start).await?;
    }
    print_records(&mut consumer, args, fields, false, printed).await
}

/// `consume --group G`: joins, prints, commits its positions, leaves.
async fn consume_in_group(
    config: ClientConfig,
    args: &ConsumeArgs,
    group: &str,
    fields: &RecordFields,
    printed: &AtomicU64,
) -> anyhow::Result<()> {
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
    // A group member of a topic that does not exist would wait for nothing.
    consumer.partitions_for(args.name.name()).await?;
    consumer.subscribe(&[args.name.name()]).await?;
    let result = print_records(&mut consumer, args, fields, true, printed).await;
    let closed = consumer.close().await;
    result?;
    Ok(closed?)
}

fn start_offset(args: &ConsumeArgs) -> anyhow::Result<Offset> {
    Ok(match args.offset.as_deref() {
        Some("earliest") => Offset::Beginning,
        Some("latest") => Offset::End,
        Some(text) => match text.parse::<i64>() {
            Ok(o) if o >= 0 => Offset::At(o),
            _ => usage!(
                "--offset must be a non-negative number, `earliest` or `latest`, not `{text}`"
            ),
        },
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
    fields: &RecordFields,
    commit: bool,
    printed: &AtomicU64,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut last_record = Instant::now();
    let mut last_topic_check = Instant::now();
    let max = args.max_messages.unwrap_or(u64::MAX);
    while printed.load(Ordering::Relaxed) < max {
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
        if records.is_empty() {
            if last_topic_check.elapsed() >= Duration::from_millis(TOPIC_CHECK_INTERVAL_MS) {
                check_topic_exists(consumer, args.name.name()).await?;
                last_topic_check = Instant::now();
            }
            continue;
        }
        last_record = Instant::now();
        let wanted = records
            .len()
            .min((max - printed.load(Ordering::Relaxed)) as usize);
        let (written, pipe_closed) = write_records(&mut out, &records[..wanted], fields)?;
        printed.fetch_add(written as u64, Ordering::Relaxed);
        give_back(consumer, &records[written..]).await?;
        if pipe_closed {
            break;
        }
        if commit {
            consumer
                .commit_sync()
                .await
                .context("committing the printed records")?;
        }
    }
    Ok(())
}

/// Writes and flushes `records`; returns how many were written and whether the pipe closed
/// (`borges consume ... | head`), which ends the command normally.
fn write_records(
    out: &mut impl Write,
    records: &[ConsumerRecord],
    fields: &RecordFields,
) -> anyhow::Result<(usize, bool)> {
    let mut written = 0;
    for record in records {
        if let Err(e) = writeln!(out, "{}", record_line(record, fields)) {
            return Ok((written, broken_pipe(e)?));
        }
        written += 1;
    }
    match out.flush() {
        Ok(()) => Ok((written, false)),
        // Records in the buffer when the pipe closed were not delivered either.
        Err(e) => Ok((0, broken_pipe(e)?)),
    }
}

/// A topic deleted under the consumer ends the command (the SDK would retry forever).
async fn check_topic_exists(consumer: &Consumer, topic: &str) -> anyhow::Result<()> {
    match consumer.partitions_for(topic).await {
        Err(e) if e.code() == Some(ErrorCode::UnknownTopicOrPartition) => {
            bail!("topic {topic} was deleted while it was being consumed ({e})")
        }
        // Other failures (a broker that is down) are retried; the SDK warns about them.
        _ => Ok(()),
    }
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

/// `Ok(true)` for a closed pipe; other write errors are failures.
fn broken_pipe(e: std::io::Error) -> anyhow::Result<bool> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(true)
    } else {
        Err(e.into())
    }
}
