//! `borges produce`: one record per line of standard input.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use borges_client::{
    Acks, ClientConfig, ClientError, Compression, DeliveryFuture, Producer, ProducerConfig,
    ProducerRecord,
};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::args::ProduceArgs;
use crate::commands::usage;
use crate::format::split_key;
use crate::output::{Progress, Ui};

/// How long `produce` waits for a topic's metadata (or buffer memory) before giving up.
const PRODUCE_METADATA_WAIT_MS: u64 = 10_000;
/// Delivery futures `produce` keeps in its checking queue at most.
const PRODUCE_PENDING_ACKS_MAX: usize = 100_000;

/// Lines read and records acknowledged so far (for the progress line).
#[derive(Debug, Default)]
struct Counts {
    read: AtomicU64,
    acknowledged: AtomicU64,
}

/// How a line becomes a record: the key separator, and the value that stands for null.
#[derive(Debug, Default)]
struct LineFormat {
    separator: Option<String>,
    null_marker: Option<String>,
}

/// The key separator from `--key-separator` or the console producer's properties
/// (`parse.key=true` splits at `key.separator`, a tab by default), and the null marker from
/// `--null-marker` or `null.marker` (a value equal to it is sent as null: a tombstone).
fn line_format(args: &ProduceArgs) -> anyhow::Result<LineFormat> {
    let mut parse_key = false;
    let mut separator = None;
    let mut null_marker = None;
    for (name, value) in &args.properties {
        match name.as_str() {
            "parse.key" => match value.to_ascii_lowercase().as_str() {
                "true" => parse_key = true,
                "false" => parse_key = false,
                _ => usage!("property parse.key must be true or false, not `{value}`"),
            },
            "key.separator" => separator = Some(value.clone()),
            "null.marker" => null_marker = Some(value.clone()),
            _ => usage!("unknown property `{name}` (known: parse.key, key.separator, null.marker)"),
        }
    }
    let separator = match (&args.key_separator, parse_key) {
        (Some(sep), _) => Some(sep.clone()),
        (None, true) => Some(separator.unwrap_or_else(|| "\t".to_string())),
        (None, false) => None,
    };
    Ok(LineFormat {
        separator,
        null_marker: args.null_marker.clone().or(null_marker),
    })
}

fn producer_config(args: &ProduceArgs) -> anyhow::Result<ProducerConfig> {
    if args.delivery_timeout_ms == 0 || args.request_timeout_ms == 0 {
        usage!("--delivery-timeout-ms and --request-timeout-ms must be positive");
    }
    Ok(ProducerConfig {
        acks: Acks::parse(&args.acks).ok_or_else(|| anyhow!("--acks must be 0, 1 or all"))?,
        linger_ms: args.linger_ms,
        compression: if args.compression == "zstd" {
            Compression::Zstd
        } else {
            Compression::None
        },
        delivery_timeout_ms: args.delivery_timeout_ms,
        max_block_ms: PRODUCE_METADATA_WAIT_MS.min(args.delivery_timeout_ms),
        ..ProducerConfig::default()
    })
}

/// Runs `produce`.
pub async fn run(config: ClientConfig, ui: Ui, args: ProduceArgs) -> anyhow::Result<()> {
    let format = line_format(&args)?;
    let producer_config = producer_config(&args)?;
    let config = config.request_timeout_ms(args.request_timeout_ms);
    let producer = Producer::new(config, producer_config).await?;
    let counts = Arc::new(Counts::default());
    let progress = {
        let counts = counts.clone();
        Progress::start(ui.produce_progress(), move || {
            let read = counts.read.load(Ordering::Relaxed);
            let acked = counts.acknowledged.load(Ordering::Relaxed);
            format!(
                "produce: {read} records read, {acked} acknowledged, {} waiting",
                read - acked.min(read)
            )
        })
    };
    let (acks_tx, acks_rx) = mpsc::channel::<(u64, DeliveryFuture)>(PRODUCE_PENDING_ACKS_MAX);
    let checker = tokio::spawn(check_acks(acks_rx, counts.clone()));
    let sent = send_lines(&producer, &args, &format, &counts, acks_tx).await;
    let flushed = producer.flush().await;
    let (acknowledged, failure) = checker.await?;
    producer.close().await?;
    progress.finish();
    let line_number =
        sent.map_err(|e| e.context(format!("{acknowledged} records before it were sent")))?;
    flushed?;
    if let Some((failed, line, error)) = failure {
        bail!(
            "{failed} of {line_number} records were not acknowledged (first: line {line}: {error})"
        );
    }
    debug_assert_eq!(acknowledged, line_number);
    Ok(())
}

/// Reads standard input and sends one record per line; returns the number of lines sent.
async fn send_lines(
    producer: &Producer,
    args: &ProduceArgs,
    format: &LineFormat,
    counts: &Counts,
    acks: mpsc::Sender<(u64, DeliveryFuture)>,
) -> anyhow::Result<u64> {
    let topic: Arc<str> = args.name.name().into();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut line_number = 0u64;
    while let Some(line) = lines.next_line().await.context("reading standard input")? {
        line_number += 1;
        let line = line.strip_suffix('\r').unwrap_or(&line).to_string();
        let mut record = ProducerRecord::new(topic.clone());
        let value = match format.separator.as_deref() {
            Some(sep) => match split_key(&line, sep) {
                Some((key, value)) => {
                    record = record.key(key.to_string());
                    value
                }
                None => bail!(
                    "line {line_number} has no key separator `{}`",
                    sep.escape_default()
                ),
            },
            None => line.as_str(),
        };
        if format.null_marker.as_deref() != Some(value) {
            record = record.value(value.to_string());
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        for (k, v) in &args.headers {
            record = record.header(k.clone(), v.clone());
        }
        let ack = producer.send(record).await?;
        counts.read.fetch_add(1, Ordering::Relaxed);
        if acks.send((line_number, ack)).await.is_err() {
            break;
        }
    }
    Ok(line_number)
}

/// Awaits every delivery future in order; returns how many succeeded and the first failure
/// (count of failures, line number, error).
async fn check_acks(
    mut acks: mpsc::Receiver<(u64, DeliveryFuture)>,
    counts: Arc<Counts>,
) -> (u64, Option<(u64, u64, ClientError)>) {
    let mut acknowledged = 0;
    let mut failure: Option<(u64, u64, ClientError)> = None;
    while let Some((line, ack)) = acks.recv().await {
        match ack.await {
            Ok(_) => {
                acknowledged += 1;
                counts.acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => match &mut failure {
                Some((n, _, _)) => *n += 1,
                None => failure = Some((1, line, e)),
            },
        }
    }
    (acknowledged, failure)
}
