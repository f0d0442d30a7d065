//! `borges group list|describe|reset-offsets|delete`, as kafka-consumer-groups.sh.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::bail;
use borges_client::{Admin, ClientConfig, GroupDescription, OffsetSpec, TopicPartition};
use serde_json::{json, Value};

use crate::args::{Format, GroupCommand, GroupSelection};
use crate::commands::usage;
use crate::format::{
    group_state_list, group_table, members_table, reset_table, state_table, GroupRow, MemberRow,
    StateRow,
};
use crate::output::print_json;

/// Runs one `group` subcommand.
pub async fn run(config: ClientConfig, command: GroupCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    let mut out = std::io::stdout().lock();
    match command {
        GroupCommand::List { state, format } => list(&admin, &mut out, state, format.format).await,
        GroupCommand::Describe {
            groups,
            members,
            state,
            verbose,
            format,
        } => {
            let ids = selected(&admin, &groups).await?;
            let view = match (members, state) {
                (true, _) => View::Members { verbose },
                (_, true) => View::State,
                _ => View::Offsets,
            };
            describe(&admin, &mut out, &ids, view, format.format).await
        }
        GroupCommand::ResetOffsets {
            groups,
            topics,
            all_topics,
            to_earliest,
            to_latest,
            to_current,
            to_offset,
            to_datetime,
            by_duration,
            shift_by,
            dry_run: _,
            execute,
            format,
        } => {
            let target = ResetTarget::from_flags(
                (to_earliest, to_latest, to_current),
                (to_offset, to_datetime, by_duration, shift_by),
            )?;
            let ids = selected(&admin, &groups).await?;
            let scope = if all_topics {
                Scope::AllTopics
            } else {
                Scope::Topics(topics)
            };
            reset(
                &admin,
                &mut out,
                &ids,
                &scope,
                target,
                execute,
                format.format,
            )
            .await
        }
        GroupCommand::Delete { groups } => {
            let ids = selected(&admin, &groups).await?;
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            admin.delete_groups(&refs).await?;
            let quoted: Vec<String> = ids.iter().map(|g| format!("'{g}'")).collect();
            writeln!(
                out,
                "Deletion of requested consumer groups ({}) was successful.",
                quoted.join(", ")
            )?;
            Ok(())
        }
    }
}

fn partition_json(tp: &TopicPartition) -> Value {
    json!({"topic": tp.topic, "partition": tp.partition})
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The group named, or every group with `--all-groups`.
async fn selected(admin: &Admin, groups: &GroupSelection) -> anyhow::Result<Vec<String>> {
    match groups.name() {
        Some(name) => Ok(vec![name.to_string()]),
        None => Ok(admin
            .list_groups()
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect()),
    }
}

async fn list(
    admin: &Admin,
    out: &mut impl Write,
    state: bool,
    format: Format,
) -> anyhow::Result<()> {
    let groups = admin.list_groups().await?;
    match format {
        Format::Json => {
            let docs: Vec<Value> = groups
                .iter()
                .map(|g| json!({"group": g.group_id, "state": g.state.as_str()}))
                .collect();
            print_json(out, &json!(docs))?;
        }
        Format::Text if state => {
            let rows: Vec<(String, String)> = groups
                .iter()
                .map(|g| (g.group_id.clone(), g.state.to_string()))
                .collect();
            for line in group_state_list(&rows) {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
        Format::Text => {
            for g in groups {
                writeln!(out, "{}", g.group_id)?;
            }
        }
    }
    Ok(())
}

/// What `group describe` shows.
#[derive(Debug, Clone, Copy)]
enum View {
    Offsets,
    Members { verbose: bool },
    State,
}

async fn describe(
    admin: &Admin,
    out: &mut impl Write,
    ids: &[String],
    view: View,
    format: Format,
) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    for id in ids {
        let description = admin
            .describe_groups(&[id.as_str()])
            .await?
            .into_iter()
            .next();
        let doc = match view {
            View::Offsets => describe_offsets(admin, out, id, description.as_ref(), format).await?,
            View::Members { verbose } => {
                describe_members(out, id, description.as_ref(), verbose, format)?
            }
            View::State => describe_state(admin, out, id, description.as_ref(), format).await?,
        };
        docs.push(doc);
    }
    if format == Format::Json {
        print_json(out, &json!(docs))?;
    }
    Ok(())
}

async fn describe_offsets(
    admin: &Admin,
    out: &mut impl Write,
    group: &str,
    description: Option<&GroupDescription>,
    format: Format,
) -> anyhow::Result<Value> {
    let (members, rows) = offset_rows(admin, group, description).await?;
    if format == Format::Text {
        writeln!(out)?;
        if members == 0 {
            writeln!(out, "Consumer group '{group}' has no active members.")?;
            writeln!(out)?;
        }
        for line in group_table(&rows) {
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    let partitions: Vec<Value> = rows
        .iter()
        .map(|r| {
            let owner = r.owner.as_ref();
            json!({
                "topic": r.topic,
                "partition": r.partition,
                "current_offset": r.current_offset,
                "log_end_offset": r.log_end_offset,
                "lag": r.current_offset.map(|o| (r.log_end_offset - o).max(0)),
                "consumer_id": owner.map(|o| &o.0),
                "host": owner.map(|o| &o.1),
                "client_id": owner.map(|o| &o.2),
            })
        })
        .collect();
    Ok(json!({"group": group, "members": members, "partitions": partitions}))
}

fn describe_members(
    out: &mut impl Write,
    group: &str,
    description: Option<&GroupDescription>,
    verbose: bool,
    format: Format,
) -> anyhow::Result<Value> {
    let rows: Vec<MemberRow> = description
        .map(|d| {
            d.members
                .iter()
                .map(|m| MemberRow {
                    group: group.to_string(),
                    consumer_id: m.member_id.clone(),
                    host: m.client_host.clone(),
                    client_id: m.client_id.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    if format == Format::Text {
        writeln!(out)?;
        if rows.is_empty() {
            writeln!(out, "Consumer group '{group}' has no active members.")?;
        } else {
            for line in members_table(&rows, verbose) {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
    }
    let members: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "consumer_id": r.consumer_id,
                "host": r.host,
                "client_id": r.client_id,
                "partitions": r.assignment.iter().map(partition_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({"group": group, "members": members}))
}

async fn describe_state(
    admin: &Admin,
    out: &mut impl Write,
    group: &str,
    description: Option<&GroupDescription>,
    format: Format,
) -> anyhow::Result<Value> {
    let Some(d) = description else {
        bail!("consumer group '{group}' does not exist");
    };
    let c = admin.group_coordinator(group).await?;
    let row = StateRow {
        group: group.to_string(),
        coordinator: format!("{}:{} ({})", c.host, c.port, c.node_id),
        assignor: d.assignor.clone(),
        state: d.state.to_string(),
        members: d.members.len(),
    };
    if format == Format::Text {
        writeln!(out)?;
        for line in state_table(std::slice::from_ref(&row)) {
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    Ok(json!({
        "group": group,
        "coordinator": {"node_id": c.node_id, "host": c.host, "port": c.port, "core": c.core_id},
        "assignment_strategy": row.assignor,
        "state": row.state,
        "members": row.members,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
    }))
}

/// The rows of `group describe`: every partition the group owns or has committed, sorted;
/// and the number of active members.
async fn offset_rows(
    admin: &Admin,
    group: &str,
    description: Option<&GroupDescription>,
) -> anyhow::Result<(usize, Vec<GroupRow>)> {
    let committed = admin.list_group_offsets(group).await?;
    let mut owners: BTreeMap<TopicPartition, (String, String, String)> = BTreeMap::new();
    let mut members = 0;
    if let Some(d) = description {
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
    /// The committed offset (the log end without one).
    Current,
    Offset(i64),
    /// The first record at or after this time (ms since the epoch).
    Time(i64),
    Shift(i64),
}

impl ResetTarget {
    /// The one target flag given (clap makes sure there is exactly one).
    fn from_flags(
        (earliest, latest, current): (bool, bool, bool),
        values: (Option<i64>, Option<i64>, Option<i64>, Option<i64>),
    ) -> anyhow::Result<ResetTarget> {
        Ok(match (earliest, latest, current, values) {
            (true, ..) => ResetTarget::Earliest,
            (_, true, ..) => ResetTarget::Latest,
            (_, _, true, _) => ResetTarget::Current,
            (.., (Some(o), ..)) => ResetTarget::Offset(o),
            (.., (_, Some(ms), ..)) => ResetTarget::Time(ms),
            (.., (_, _, Some(ago_ms), _)) => ResetTarget::Time(now_ms().saturating_sub(ago_ms)),
            (.., (.., Some(n))) => ResetTarget::Shift(n),
            _ => usage!(
                "give one of --to-earliest, --to-latest, --to-current, --to-offset, \
                 --to-datetime, --by-duration, --shift-by"
            ),
        })
    }
}

/// Which partitions `group reset-offsets` moves.
enum Scope {
    /// Topics, each with its listed partitions (every partition when the list is empty).
    Topics(Vec<(String, Vec<i32>)>),
    /// Every partition the group has committed offsets for.
    AllTopics,
}

async fn reset(
    admin: &Admin,
    out: &mut impl Write,
    ids: &[String],
    scope: &Scope,
    target: ResetTarget,
    execute: bool,
    format: Format,
) -> anyhow::Result<()> {
    let mut rows: Vec<(String, TopicPartition, i64)> = Vec::new();
    for group in ids {
        let partitions = scope_partitions(admin, group, scope).await?;
        let offsets = reset_offsets(admin, group, &partitions, target).await?;
        if execute {
            admin.alter_group_offsets(group, &offsets).await?;
        }
        rows.extend(offsets.into_iter().map(|(tp, o)| (group.clone(), tp, o)));
    }
    if !execute {
        eprintln!("Dry run: nothing was changed (add --execute to commit these offsets).");
    }
    match format {
        Format::Json => {
            let docs: Vec<Value> = rows
                .iter()
                .map(|(g, tp, o)| {
                    let (topic, partition) = (&tp.topic, tp.partition);
                    json!({"group": g, "topic": topic, "partition": partition, "new_offset": o})
                })
                .collect();
            print_json(out, &json!(docs))?;
        }
        Format::Text => {
            writeln!(out)?;
            for line in reset_table(&rows) {
                writeln!(out, "{}", line.trim_end())?;
            }
        }
    }
    Ok(())
}

async fn scope_partitions(
    admin: &Admin,
    group: &str,
    scope: &Scope,
) -> anyhow::Result<Vec<TopicPartition>> {
    let mut out = Vec::new();
    match scope {
        Scope::AllTopics => {
            out.extend(
                admin
                    .list_group_offsets(group)
                    .await?
                    .into_iter()
                    .map(|(tp, _)| tp),
            );
        }
        Scope::Topics(topics) => {
            for (topic, only) in topics {
                let described = admin.describe_topics(&[topic.as_str()]).await?;
                let existing: Vec<i32> = described[0]
                    .partitions
                    .iter()
                    .map(|p| p.partition)
                    .collect();
                if let Some(p) = only.iter().find(|p| !existing.contains(p)) {
                    usage!("topic {topic} has no partition {p}");
                }
                let chosen = if only.is_empty() { &existing } else { only };
                out.extend(chosen.iter().map(|p| TopicPartition::new(topic, *p)));
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The new offset of each of `partitions`, clamped to each partition's log range.
async fn reset_offsets(
    admin: &Admin,
    group: &str,
    partitions: &[TopicPartition],
    target: ResetTarget,
) -> anyhow::Result<Vec<(TopicPartition, i64)>> {
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
        let current = committed.iter().find(|(c, _)| c == tp).map(|(_, o)| *o);
        let wanted = match target {
            ResetTarget::Earliest => low,
            ResetTarget::Latest => high,
            ResetTarget::Current => current.unwrap_or(high),
            ResetTarget::Offset(o) => o,
            ResetTarget::Time(_) => {
                by_time
                    .as_ref()
                    .map_or(high, |t| if t[i].offset < 0 { high } else { t[i].offset })
            }
            ResetTarget::Shift(n) => current.unwrap_or(low).saturating_add(n),
        };
        out.push((tp.clone(), wanted.clamp(low, high)));
    }
    Ok(out)
}
