//! `borges topic create|describe|list|delete|alter|offsets`.

use std::io::Write;

use anyhow::Context;
use borges_client::{
    Admin, AlterConfig, ClientConfig, ClientError, ConfigEntry, ErrorCode, ListedOffset, NewTopic,
    OffsetSpec, TopicDescription, TopicPartition,
};
use serde_json::{json, Value};

use crate::args::{Format, TopicCommand};
use crate::commands::usage;
use crate::format::{
    all_configs_lines, describe_lines, kafka_source, offsets_table, parse_rfc3339_ms, OffsetsRow,
};
use crate::output::print_json;

/// Runs one `topic` subcommand.
pub async fn run(config: ClientConfig, command: TopicCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    let mut out = std::io::stdout().lock();
    let lines = match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
            if_not_exists,
        } => {
            let mut topic = NewTopic::new(name.name(), partitions.unwrap_or(-1));
            topic.replication_factor = replication_factor.unwrap_or(-1);
            topic.configs = configs;
            create(&admin, topic, if_not_exists).await?
        }
        TopicCommand::Describe {
            name,
            all_configs,
            exclude_internal,
            format,
        } => {
            let names = match name.name() {
                Some(name) => vec![name.to_string()],
                None => topic_names(&admin, exclude_internal).await?,
            };
            return describe(&admin, &mut out, &names, all_configs, format.format).await;
        }
        TopicCommand::List {
            exclude_internal,
            format,
        } => {
            let names = topic_names(&admin, exclude_internal).await?;
            if format.format == Format::Json {
                return Ok(print_json(&mut out, &json!(names))?);
            }
            names
        }
        TopicCommand::Delete { name, if_exists } => delete(&admin, name.name(), if_exists).await?,
        TopicCommand::Alter {
            name,
            configs,
            delete_configs,
            partitions,
            if_exists,
        } => {
            let altered = alter(&admin, name.name(), configs, delete_configs, partitions).await;
            if_exists_ok(altered, if_exists)?
        }
        TopicCommand::Offsets {
            name,
            time,
            partitions,
            format,
        } => {
            let spec = time.as_deref().map(offset_spec).transpose()?;
            let (topic, format) = (name.name(), format.format);
            return offsets(&admin, &mut out, topic, spec, &partitions, format).await;
        }
    };
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// With `--if-exists`, a missing topic is success without output.
fn if_exists_ok(
    result: anyhow::Result<Vec<String>>,
    if_exists: bool,
) -> anyhow::Result<Vec<String>> {
    match result {
        Err(e) if if_exists && e.downcast_ref().is_some_and(is_unknown_topic) => Ok(Vec::new()),
        other => other,
    }
}

/// Every topic's name, sorted, internal topics included unless `exclude_internal`.
async fn topic_names(admin: &Admin, exclude_internal: bool) -> anyhow::Result<Vec<String>> {
    Ok(if exclude_internal {
        admin.list_topics().await?
    } else {
        admin.list_all_topics().await?
    })
}

/// Creates `topic`; with `if_not_exists` an existing topic is no error (and no output).
async fn create(
    admin: &Admin,
    topic: NewTopic,
    if_not_exists: bool,
) -> anyhow::Result<Vec<String>> {
    let name = topic.name.clone();
    match admin.create_topics(vec![topic]).await {
        Err(e) if if_not_exists && e.code() == Some(ErrorCode::TopicAlreadyExists) => {
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
        Ok(()) => Ok(vec![format!("Created topic {name}.")]),
    }
}

/// Deletes `name`; with `if_exists` a missing topic is no error (and no output).
async fn delete(admin: &Admin, name: &str, if_exists: bool) -> anyhow::Result<Vec<String>> {
    match admin.delete_topics(&[name]).await {
        Err(e) if if_exists && is_unknown_topic(&e) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(vec![format!("Deleted topic {name}.")]),
    }
}

fn is_unknown_topic(e: &ClientError) -> bool {
    e.code() == Some(ErrorCode::UnknownTopicOrPartition)
}

async fn describe(
    admin: &Admin,
    out: &mut impl Write,
    names: &[String],
    all_configs: bool,
    format: Format,
) -> anyhow::Result<()> {
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let topics = admin.describe_topics(&refs).await?;
    match format {
        Format::Json => {
            let docs: Vec<Value> = topics.iter().map(|t| topic_json(t, all_configs)).collect();
            print_json(out, &json!(docs))?;
        }
        Format::Text => {
            // Kafka 4's ELR columns where there is a cluster to speak of.
            let cluster = admin.broker_ids().len() > 1
                || topics
                    .iter()
                    .any(|t| t.partitions.iter().any(|p| p.replicas.len() > 1));
            for topic in &topics {
                let lines = if all_configs {
                    all_configs_lines(&topic.name, &topic.configs)
                } else {
                    describe_lines(topic, cluster)
                };
                for line in lines {
                    writeln!(out, "{line}")?;
                }
            }
        }
    }
    Ok(())
}

fn topic_json(t: &TopicDescription, all_configs: bool) -> Value {
    let configs: Vec<&ConfigEntry> = t
        .configs
        .iter()
        .filter(|c| all_configs || c.source == borges_client::ConfigSource::Topic)
        .collect();
    json!({
        "name": t.name,
        "topic_id": t.topic_id.to_string(),
        "is_internal": t.is_internal,
        "partition_count": t.partitions.len(),
        "replication_factor": t.replication_factor(),
        "partitions": t.partitions.iter().map(|p| json!({
            "partition": p.partition,
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "replicas": p.replicas,
            "isr": p.isr,
        })).collect::<Vec<_>>(),
        "configs": configs.iter().map(|c| json!({
            "name": c.name,
            "value": c.value,
            "source": kafka_source(c.source),
            "read_only": c.read_only,
        })).collect::<Vec<_>>(),
    })
}

/// Applies configs and a partition count; returns the lines Kafka's tools print.
async fn alter(
    admin: &Admin,
    name: &str,
    configs: Vec<(String, String)>,
    delete_configs: Vec<String>,
    partitions: Option<i32>,
) -> anyhow::Result<Vec<String>> {
    if configs.is_empty() && delete_configs.is_empty() && partitions.is_none() {
        usage!("nothing to alter: give --config KEY=VALUE, --delete-config KEY or --partitions N");
    }
    let mut lines = Vec::new();
    if let Some(count) = partitions {
        admin.create_partitions(name, count).await?;
        lines.push(format!("Topic {name} now has {count} partitions."));
    }
    if !configs.is_empty() || !delete_configs.is_empty() {
        let mut changes: Vec<AlterConfig> = configs
            .into_iter()
            .map(|(k, v)| AlterConfig::Set(k, v))
            .collect();
        changes.extend(delete_configs.into_iter().map(AlterConfig::Delete));
        admin.alter_configs(name, changes).await?;
        lines.push(format!("Completed updating config for topic {name}."));
    }
    Ok(lines)
}

/// `--time`: -1/latest, -2/earliest, -3/max-timestamp, ms since the epoch, or RFC 3339.
fn offset_spec(time: &str) -> anyhow::Result<OffsetSpec> {
    Ok(match time {
        "-1" | "latest" => OffsetSpec::Latest,
        "-2" | "earliest" => OffsetSpec::Earliest,
        "-3" | "max-timestamp" => OffsetSpec::MaxTimestamp,
        text => match text.parse::<i64>() {
            Ok(ms) if ms >= 0 => OffsetSpec::Timestamp(ms),
            _ => match parse_rfc3339_ms(text) {
                Some(ms) => OffsetSpec::Timestamp(ms),
                None => usage!(
                    "--time `{text}`: expected earliest, latest, max-timestamp, -1, -2, -3, \
                     ms since the epoch or an RFC 3339 time"
                ),
            },
        },
    })
}

async fn offsets(
    admin: &Admin,
    out: &mut impl Write,
    topic: &str,
    spec: Option<OffsetSpec>,
    only: &[i32],
    format: Format,
) -> anyhow::Result<()> {
    let partitions = chosen_partitions(admin, topic, only).await?;
    let query = |spec: OffsetSpec| partitions.iter().map(|tp| (tp.clone(), spec)).collect();
    if let Some(spec) = spec {
        let listed = admin.list_offsets(query(spec)).await?;
        return offsets_at(out, topic, &listed, format);
    }
    let starts = admin.list_offsets(query(OffsetSpec::Earliest)).await?;
    let ends = admin
        .list_offsets(query(OffsetSpec::Latest))
        .await
        .context("listing high watermarks")?;
    let rows: Vec<OffsetsRow> = starts
        .iter()
        .zip(&ends)
        .map(|(s, e)| OffsetsRow {
            partition: s.topic_partition.partition,
            log_start: s.offset,
            high_watermark: e.offset,
            size_bytes: e.size_bytes,
        })
        .collect();
    if format == Format::Json {
        let docs: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({"topic": topic, "partition": r.partition,
                    "log_start_offset": r.log_start, "high_watermark": r.high_watermark,
                    "size_bytes": r.size_bytes})
            })
            .collect();
        return Ok(print_json(out, &json!(docs))?);
    }
    for line in offsets_table(topic, &rows) {
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The partitions of `topic` in `only` (every one when empty); a partition the topic lacks is
/// a usage error.
async fn chosen_partitions(
    admin: &Admin,
    topic: &str,
    only: &[i32],
) -> anyhow::Result<Vec<TopicPartition>> {
    let described = admin.describe_topics(&[topic]).await?;
    let partitions: Vec<TopicPartition> = described[0]
        .partitions
        .iter()
        .map(|p| TopicPartition::new(topic, p.partition))
        .filter(|tp| only.is_empty() || only.contains(&tp.partition))
        .collect();
    if let Some(missing) = only
        .iter()
        .find(|p| !partitions.iter().any(|tp| tp.partition == **p))
    {
        usage!("topic {topic} has no partition {missing}");
    }
    Ok(partitions)
}

/// `--time`: kafka-get-offsets.sh's `TOPIC:PARTITION:OFFSET` lines (or JSON).
fn offsets_at(
    out: &mut impl Write,
    topic: &str,
    listed: &[ListedOffset],
    format: Format,
) -> anyhow::Result<()> {
    if format == Format::Json {
        let rows: Vec<Value> = listed
            .iter()
            .map(|l| {
                let partition = l.topic_partition.partition;
                json!({"topic": topic, "partition": partition, "offset": l.offset,
                    "timestamp": l.timestamp})
            })
            .collect();
        return Ok(print_json(out, &json!(rows))?);
    }
    for l in listed {
        writeln!(out, "{topic}:{}:{}", l.topic_partition.partition, l.offset)?;
    }
    Ok(())
}
