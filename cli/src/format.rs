//! Output formats, as Kafka's tools print them (tab-separated). Pure functions.

use borges_client::{ConfigSource, ConsumerRecord, TopicDescription};

/// Which fields `borges consume` prints.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordFields {
    /// `CreateTime:TS`.
    pub timestamp: bool,
    /// `Partition:P`.
    pub partition: bool,
    /// `Offset:O`.
    pub offset: bool,
    /// The key.
    pub key: bool,
}

/// One consumed record: `[CreateTime:TS\t][Partition:P\t][Offset:O\t][KEY\t]VALUE`, null key
/// or value as `null` (as kafka-console-consumer).
pub fn record_line(record: &ConsumerRecord, fields: RecordFields) -> String {
    let mut line = String::new();
    if fields.timestamp {
        line.push_str(&format!("CreateTime:{}\t", record.timestamp));
    }
    if fields.partition {
        line.push_str(&format!("Partition:{}\t", record.partition));
    }
    if fields.offset {
        line.push_str(&format!("Offset:{}\t", record.offset));
    }
    if fields.key {
        push_nullable(&mut line, record.key.as_deref());
        line.push('\t');
    }
    push_nullable(&mut line, record.value.as_deref());
    line
}

fn push_nullable(line: &mut String, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => line.push_str(&String::from_utf8_lossy(b)),
        None => line.push_str("null"),
    }
}

/// `borges topic describe`: the topic line, then one line per partition.
pub fn describe_lines(topic: &TopicDescription) -> Vec<String> {
    let configs: Vec<String> = topic
        .configs
        .iter()
        .filter(|c| c.source == ConfigSource::Topic)
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("")))
        .collect();
    let mut lines = vec![format!(
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
        topic.name,
        topic.topic_id,
        topic.partitions.len(),
        topic.replication_factor(),
        configs.join(",")
    )];
    for p in &topic.partitions {
        lines.push(format!(
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
            topic.name,
            p.partition,
            if p.leader < 0 {
                "none".to_string()
            } else {
                p.leader.to_string()
            },
            join_ids(&p.replicas),
            join_ids(&p.isr)
        ));
    }
    lines
}

fn join_ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Splits a produced line at the first `separator`: (key, value).
pub fn split_key<'a>(line: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    line.split_once(separator)
}

/// One row of `borges group describe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    /// Group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset, if any.
    pub current_offset: Option<i64>,
    /// The partition's log-end offset (high watermark).
    pub log_end_offset: i64,
    /// Owner member id, client host, client id; `None` without an owner.
    pub owner: Option<(String, String, String)>,
}

/// `borges group describe`: columns aligned as `kafka-consumer-groups.sh --describe` prints
/// them (`%-Gs %-Ts %-10s %-15s %-15s %-15s %-Cs %-Hs %s`, widths from the longest value).
pub fn group_table(rows: &[GroupRow]) -> Vec<String> {
    let dash = || "-".to_string();
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let (consumer, host, client) =
                r.owner.clone().unwrap_or_else(|| (dash(), dash(), dash()));
            [
                r.group.clone(),
                r.topic.clone(),
                r.partition.to_string(),
                r.current_offset.map_or_else(dash, |o| o.to_string()),
                r.log_end_offset.to_string(),
                r.current_offset
                    .map_or_else(dash, |o| (r.log_end_offset - o).max(0).to_string()),
                consumer,
                host,
                client,
            ]
        })
        .collect();
    let header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    .map(str::to_string);
    let minimum = [0, 0, 10, 15, 15, 15, 0, 0, 0];
    aligned(&header, &cells, &minimum)
}

/// `borges group reset-offsets`: `GROUP TOPIC PARTITION NEW-OFFSET`, aligned.
pub fn reset_table(group: &str, topic: &str, offsets: &[(i32, i64)]) -> Vec<String> {
    let cells: Vec<[String; 4]> = offsets
        .iter()
        .map(|(p, o)| {
            [
                group.to_string(),
                topic.to_string(),
                p.to_string(),
                o.to_string(),
            ]
        })
        .collect();
    let header = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"].map(str::to_string);
    aligned(&header, &cells, &[0, 0, 10, 0])
}

/// Left-aligned columns, each as wide as its widest cell (at least `minimum`), one space
/// between columns, the last column unpadded.
fn aligned<const N: usize>(
    header: &[String; N],
    rows: &[[String; N]],
    minimum: &[usize; N],
) -> Vec<String> {
    let mut widths = *minimum;
    for row in std::iter::once(header).chain(rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    std::iter::once(header)
        .chain(rows)
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == N {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$} ", width = widths[i]));
                }
            }
            line
        })
        .collect()
}

/// Milliseconds since the epoch of an RFC 3339 time (`2026-11-30T05:00:00Z`,
/// `2026-11-30T05:00:00.250+01:00`).
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num =
        |range: std::ops::Range<usize>| -> Option<i64> { text.get(range)?.parse::<i64>().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3: String = fraction[..digits]
            .chars()
            .chain("000".chars())
            .take(3)
            .collect();
        millis = first3.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (rest[1..3].parse::<i64>().ok()? * 60 + rest[4..6].parse::<i64>().ok()?)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_client::{ConfigEntry, PartitionInfo, TopicId};
    use bytes::Bytes;

    fn record(key: Option<&'static str>, value: Option<&'static str>) -> ConsumerRecord {
        ConsumerRecord {
            topic: "orders".into(),
            partition: 3,
            offset: 1,
            timestamp: 1_700_000_000_000,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            headers: Vec::new(),
        }
    }

    #[test]
    fn record_lines_match_kafka_console_consumer() {
        let all = RecordFields {
            timestamp: false,
            partition: true,
            offset: true,
            key: true,
        };
        assert_eq!(
            record_line(&record(Some("user-3"), Some("paid order 102")), all),
            "Partition:3\tOffset:1\tuser-3\tpaid order 102"
        );
        let value_only = RecordFields::default();
        assert_eq!(record_line(&record(None, Some("v")), value_only), "v");
        let key = RecordFields {
            key: true,
            ..RecordFields::default()
        };
        assert_eq!(record_line(&record(None, None), key), "null\tnull");
        let ts = RecordFields {
            timestamp: true,
            offset: true,
            ..RecordFields::default()
        };
        assert_eq!(
            record_line(&record(None, Some("v")), ts),
            "CreateTime:1700000000000\tOffset:1\tv"
        );
    }

    #[test]
    fn describe_matches_kafka_topics_layout() {
        let topic = TopicDescription {
            name: "orders".into(),
            topic_id: TopicId([
                0xc8, 0x5d, 0xa9, 0x8a, 0xdb, 0x01, 0x4c, 0x73, 0xa9, 0xf1, 0xe3, 0xf1, 0xb8, 0x0a,
                0x6c, 0x73,
            ]),
            is_internal: false,
            partitions: (0..2)
                .map(|p| PartitionInfo {
                    partition: p,
                    leader: 1,
                    leader_epoch: 0,
                    replicas: vec![1],
                    isr: vec![1],
                    leader_core: 0,
                })
                .collect(),
            configs: vec![
                ConfigEntry {
                    name: "cleanup.policy".into(),
                    value: Some("compact".into()),
                    source: ConfigSource::Topic,
                    read_only: false,
                },
                ConfigEntry {
                    name: "retention.ms".into(),
                    value: Some("604800000".into()),
                    source: ConfigSource::Default,
                    read_only: false,
                },
                ConfigEntry {
                    name: "segment.ms".into(),
                    value: Some("1000".into()),
                    source: ConfigSource::Topic,
                    read_only: false,
                },
            ],
        };
        assert_eq!(
            describe_lines(&topic),
            vec![
                "Topic: orders\tTopicId: yF2pitsBTHOp8ePxuApscw\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,segment.ms=1000",
                "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1",
                "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1",
            ]
        );
    }

    #[test]
    fn group_table_aligns_like_kafka_consumer_groups() {
        let rows = vec![
            GroupRow {
                group: "audit-svc".into(),
                topic: "orders".into(),
                partition: 0,
                current_offset: Some(8),
                log_end_offset: 11,
                owner: Some((
                    "console-consumer-1134bb44".into(),
                    "/127.0.0.1".into(),
                    "console-consumer".into(),
                )),
            },
            GroupRow {
                group: "audit-svc".into(),
                topic: "orders".into(),
                partition: 1,
                current_offset: None,
                log_end_offset: 0,
                owner: None,
            },
        ];
        let lines = group_table(&rows);
        assert_eq!(lines[0], "GROUP     TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID               HOST       CLIENT-ID");
        assert_eq!(lines[1], "audit-svc orders 0          8               11              3               console-consumer-1134bb44 /127.0.0.1 console-consumer");
        assert_eq!(lines[2], "audit-svc orders 1          -               0               -               -                         -          -");
        assert_eq!(
            reset_table("g", "t", &[(0, 5)]),
            vec![
                "GROUP TOPIC PARTITION  NEW-OFFSET",
                "g     t     0          5"
            ]
        );
    }

    #[test]
    fn rfc3339_times_parse_to_epoch_millis() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-11-30T05:00:00Z"),
            Some(1_796_014_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-30T06:00:00.25+01:00"),
            Some(1_796_014_800_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T12:00:00-00:30"),
            Some(951_825_600_000 + 1_800_000)
        );
        assert_eq!(parse_rfc3339_ms("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
        assert_eq!(parse_rfc3339_ms("2026-11-30T05:00:00"), None);
    }

    #[test]
    fn keys_split_at_the_first_separator() {
        assert_eq!(
            split_key("user-1:created: 100", ":"),
            Some(("user-1", "created: 100"))
        );
        assert_eq!(split_key("no separator", ":"), None);
        assert_eq!(split_key("::", "::"), Some(("", "")));
    }
}
