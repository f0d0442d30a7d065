//! Output formats, as Kafka's tools print them (tab-separated). Pure functions.

use borges_client::{ConfigEntry, ConfigSource, ConsumerRecord, TopicDescription, TopicPartition};

/// What `borges consume` prints of each record, and how (kafka-console-consumer's
/// DefaultMessageFormatter properties).
#[derive(Debug, Clone)]
pub struct RecordFields {
    /// `CreateTime:TS` (`print.timestamp`).
    pub timestamp: bool,
    /// `Partition:P` (`print.partition`).
    pub partition: bool,
    /// `Offset:O` (`print.offset`).
    pub offset: bool,
    /// The headers (`print.headers`).
    pub headers: bool,
    /// The key (`print.key`).
    pub key: bool,
    /// The value (`print.value`).
    pub value: bool,
    /// Between fields (`key.separator`, a tab by default).
    pub separator: String,
    /// Between headers (`headers.separator`, `,`).
    pub headers_separator: String,
    /// Between a header's key and value (`headers.key.separator`, `:`).
    pub header_key_separator: String,
    /// A null key, value or header value (`null.literal`, `null`).
    pub null_literal: String,
}

impl Default for RecordFields {
    fn default() -> Self {
        RecordFields {
            timestamp: false,
            partition: false,
            offset: false,
            headers: false,
            key: false,
            value: true,
            separator: "\t".to_string(),
            headers_separator: ",".to_string(),
            header_key_separator: ":".to_string(),
            null_literal: "null".to_string(),
        }
    }
}

impl RecordFields {
    /// Applies one console-consumer property (`print.key=true`, `key.separator=,`, ...).
    pub fn apply_property(&mut self, name: &str, value: &str) -> Result<(), String> {
        let flag = |value: &str| match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!(
                "property {name} must be true or false, not `{value}`"
            )),
        };
        match name {
            "print.timestamp" => self.timestamp = flag(value)?,
            "print.partition" => self.partition = flag(value)?,
            "print.offset" => self.offset = flag(value)?,
            "print.headers" => self.headers = flag(value)?,
            "print.key" => self.key = flag(value)?,
            "print.value" => self.value = flag(value)?,
            "key.separator" => self.separator = value.to_string(),
            "headers.separator" => self.headers_separator = value.to_string(),
            "headers.key.separator" => self.header_key_separator = value.to_string(),
            "null.literal" => self.null_literal = value.to_string(),
            _ => {
                return Err(format!(
                    "unknown property `{name}` (known: print.timestamp, print.partition, \
                     print.offset, \
                     print.headers, print.key, print.value, key.separator, headers.separator, \
                     headers.key.separator, null.literal)"
                ))
            }
        }
        Ok(())
    }
}

/// One consumed record as kafka-console-consumer prints it: the chosen fields of
/// `CreateTime:TS`, `Partition:P`, `Offset:O`, headers, key, value, in this order, separated by
/// `separator`; nulls as `null_literal`; headers `k:v` joined by `,`, or `NO_HEADERS`.
pub fn record_line(record: &ConsumerRecord, fields: &RecordFields) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(6);
    if fields.timestamp {
        parts.push(format!("CreateTime:{}", record.timestamp));
    }
    if fields.partition {
        parts.push(format!("Partition:{}", record.partition));
    }
    if fields.offset {
        parts.push(format!("Offset:{}", record.offset));
    }
    if fields.headers {
        parts.push(headers_text(record, fields));
    }
    if fields.key {
        parts.push(nullable(record.key.as_deref(), &fields.null_literal));
    }
    if fields.value {
        parts.push(nullable(record.value.as_deref(), &fields.null_literal));
    }
    parts.join(&fields.separator)
}

fn headers_text(record: &ConsumerRecord, fields: &RecordFields) -> String {
    if record.headers.is_empty() {
        return "NO_HEADERS".to_string();
    }
    record
        .headers
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}{}{}",
                fields.header_key_separator,
                nullable(v.as_deref(), &fields.null_literal)
            )
        })
        .collect::<Vec<_>>()
        .join(&fields.headers_separator)
}

fn nullable(bytes: Option<&[u8]>, null_literal: &str) -> String {
    match bytes {
        Some(b) => String::from_utf8_lossy(b).into_owned(),
        None => null_literal.to_string(),
    }
}

/// `borges topic describe`: the topic line, then one line per partition. `cluster` adds
/// Kafka 4's `Elr:` and `LastKnownElr:` columns (a single node has no ELR to show).
pub fn describe_lines(topic: &TopicDescription, cluster: bool) -> Vec<String> {
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
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}{}",
            topic.name,
            p.partition,
            if p.leader < 0 {
                "none".to_string()
            } else {
                p.leader.to_string()
            },
            join_ids(&p.replicas),
            join_ids(&p.isr),
            // ELR (KIP-966) is not tracked yet: both lists are empty.
            if cluster {
                "\tElr: \tLastKnownElr: "
            } else {
                ""
            }
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

/// `borges group reset-offsets`: `GROUP TOPIC PARTITION NEW-OFFSET`, aligned; one row per
/// (group, partition, new offset).
pub fn reset_table(rows: &[(String, TopicPartition, i64)]) -> Vec<String> {
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|(group, tp, o)| {
            [
                group.clone(),
                tp.topic.clone(),
                tp.partition.to_string(),
                o.to_string(),
            ]
        })
        .collect();
    let header = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"].map(str::to_string);
    aligned(&header, &cells, &[0, 0, 10, 0])
}

/// `borges topic describe T --all-configs`, as `kafka-configs.sh --describe --all` prints it:
/// every config, with the source of the value in effect.
pub fn all_configs_lines(topic: &str, configs: &[ConfigEntry]) -> Vec<String> {
    let mut lines = vec![format!("All configs for topic {topic} are:")];
    for c in configs {
        let value = c.value.as_deref().unwrap_or("null");
        let sensitive = c.value.is_none() && c.source != ConfigSource::Default;
        lines.push(format!(
            "  {}={value} sensitive={sensitive} synonyms={{{}:{}={value}}}",
            c.name,
            kafka_source(c.source),
            c.name
        ));
    }
    lines
}

/// Kafka's name of a config source (`DYNAMIC_TOPIC_CONFIG`, `DEFAULT_CONFIG`, ...).
pub fn kafka_source(source: ConfigSource) -> &'static str {
    match source {
        ConfigSource::Topic => "DYNAMIC_TOPIC_CONFIG",
        ConfigSource::Broker => "STATIC_BROKER_CONFIG",
        ConfigSource::Default => "DEFAULT_CONFIG",
        ConfigSource::Unknown => "UNKNOWN",
    }
}

/// One partition of `borges topic offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsRow {
    /// Partition.
    pub partition: i32,
    /// Log start offset.
    pub log_start: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// Bytes of the partition's log; -1 when the broker did not say.
    pub size_bytes: i64,
}

/// `borges topic offsets T`: `TOPIC PARTITION LOG-START-OFFSET HIGH-WATERMARK SIZE-BYTES`.
pub fn offsets_table(topic: &str, rows: &[OffsetsRow]) -> Vec<String> {
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                topic.to_string(),
                r.partition.to_string(),
                r.log_start.to_string(),
                r.high_watermark.to_string(),
                if r.size_bytes < 0 {
                    "-".to_string()
                } else {
                    r.size_bytes.to_string()
                },
            ]
        })
        .collect();
    let header = [
        "TOPIC",
        "PARTITION",
        "LOG-START-OFFSET",
        "HIGH-WATERMARK",
        "SIZE-BYTES",
    ]
    .map(str::to_string);
    aligned(&header, &cells, &[0, 10, 0, 0, 0])
}

/// One member of `borges group describe --members`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    /// Group id.
    pub group: String,
    /// Member id.
    pub consumer_id: String,
    /// Client host.
    pub host: String,
    /// Client id.
    pub client_id: String,
    /// Owned partitions.
    pub assignment: Vec<TopicPartition>,
}

/// `group describe --members` as kafka-consumer-groups.sh prints it:
/// `GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS` (`--verbose`: and `ASSIGNMENT`, as
/// `topic(0,1),other(2)`, `-` when empty).
pub fn members_table(rows: &[MemberRow], verbose: bool) -> Vec<String> {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.group.clone(),
                r.consumer_id.clone(),
                r.host.clone(),
                r.client_id.clone(),
                r.assignment.len().to_string(),
                assignment_text(&r.assignment),
            ]
        })
        .collect();
    let header = [
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ]
    .map(str::to_string);
    let lines = aligned(&header, &cells, &[0, 0, 0, 0, 15, 0]);
    if verbose {
        return lines;
    }
    // Without --verbose the ASSIGNMENT column is left out.
    let cells: Vec<[String; 5]> = cells
        .into_iter()
        .map(|[a, b, c, d, e, _]| [a, b, c, d, e])
        .collect();
    let header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"].map(str::to_string);
    aligned(&header, &cells, &[0, 0, 0, 0, 0])
}

/// `topic(0,1),other(2)`; `-` for nothing.
pub fn assignment_text(partitions: &[TopicPartition]) -> String {
    if partitions.is_empty() {
        return "-".to_string();
    }
    let mut by_topic: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for tp in partitions {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(tp.partition.to_string());
    }
    by_topic
        .into_iter()
        .map(|(t, ps)| format!("{t}({})", ps.join(",")))
        .collect::<Vec<_>>()
        .join(",")
}

/// One group of `borges group describe --state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRow {
    /// Group id.
    pub group: String,
    /// `host:port (node id)` of the coordinator.
    pub coordinator: String,
    /// Assignor name.
    pub assignor: String,
    /// Group state.
    pub state: String,
    /// Active members.
    pub members: usize,
}

/// `group describe --state`: `GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS`.
pub fn state_table(rows: &[StateRow]) -> Vec<String> {
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.group.clone(),
                r.coordinator.clone(),
                r.assignor.clone(),
                r.state.clone(),
                r.members.to_string(),
            ]
        })
        .collect();
    let header = [
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "#MEMBERS",
    ]
    .map(str::to_string);
    aligned(&header, &cells, &[0, 25, 20, 15, 0])
}

/// `group list --state`: `GROUP STATE`.
pub fn group_state_list(rows: &[(String, String)]) -> Vec<String> {
    let cells: Vec<[String; 2]> = rows.iter().map(|(g, s)| [g.clone(), s.clone()]).collect();
    aligned(&["GROUP".to_string(), "STATE".to_string()], &cells, &[0, 0])
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
            partition: true,
            offset: true,
            key: true,
            ..RecordFields::default()
        };
        assert_eq!(
            record_line(&record(Some("user-3"), Some("paid order 102")), &all),
            "Partition:3\tOffset:1\tuser-3\tpaid order 102"
        );
        let value_only = RecordFields::default();
        assert_eq!(record_line(&record(None, Some("v")), &value_only), "v");
        let key = RecordFields {
            key: true,
            ..RecordFields::default()
        };
        assert_eq!(record_line(&record(None, None), &key), "null\tnull");
        let ts = RecordFields {
            timestamp: true,
            offset: true,
            ..RecordFields::default()
        };
        assert_eq!(
            record_line(&record(None, Some("v")), &ts),
            "CreateTime:1700000000000\tOffset:1\tv"
        );
    }

    #[test]
    fn headers_separators_null_literal_and_no_value() {
        let mut fields = RecordFields::default();
        for (k, v) in [
            ("print.headers", "true"),
            ("print.key", "TRUE"),
            ("print.value", "false"),
            ("key.separator", " | "),
            ("null.literal", "<nil>"),
        ] {
            fields.apply_property(k, v).unwrap();
        }
        let mut r = record(None, Some("v"));
        assert_eq!(record_line(&r, &fields), "NO_HEADERS | <nil>");
        r.headers = vec![
            ("a".into(), Some(Bytes::from_static(b"1"))),
            ("b".into(), None),
        ];
        assert_eq!(record_line(&r, &fields), "a:1,b:<nil> | <nil>");
        fields.apply_property("headers.separator", ";").unwrap();
        fields.apply_property("headers.key.separator", "=").unwrap();
        assert_eq!(record_line(&r, &fields), "a=1;b=<nil> | <nil>");
        assert!(fields.apply_property("print.key", "yes").is_err());
        let e = fields.apply_property("print.colour", "true").unwrap_err();
        assert!(e.contains("print.colour") && e.contains("print.key"), "{e}");
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
            describe_lines(&topic, false),
            vec![
                "Topic: orders\tTopicId: yF2pitsBTHOp8ePxuApscw\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,segment.ms=1000",
                "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1",
                "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1",
            ]
        );
        assert_eq!(
            describe_lines(&topic, true)[1],
            "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
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
            reset_table(&[("g".into(), TopicPartition::new("t", 0), 5)]),
            vec![
                "GROUP TOPIC PARTITION  NEW-OFFSET",
                "g     t     0          5"
            ]
        );
    }

    #[test]
    fn all_configs_print_as_kafka_configs_describe_all() {
        let configs = vec![
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
        ];
        assert_eq!(
            all_configs_lines("orders", &configs),
            vec![
                "All configs for topic orders are:",
                concat!(
                    "  cleanup.policy=compact sensitive=false ",
                    "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact}"
                ),
                concat!(
                    "  retention.ms=604800000 sensitive=false ",
                    "synonyms={DEFAULT_CONFIG:retention.ms=604800000}"
                ),
            ]
        );
    }

    #[test]
    fn offsets_members_and_state_tables_align() {
        let rows = [OffsetsRow {
            partition: 0,
            log_start: 0,
            high_watermark: 42,
            size_bytes: 4096,
        }];
        assert_eq!(
            offsets_table("t", &rows),
            vec![
                "TOPIC PARTITION  LOG-START-OFFSET HIGH-WATERMARK SIZE-BYTES",
                "t     0          0                42             4096",
            ]
        );
        let members = [MemberRow {
            group: "g".into(),
            consumer_id: "c-1".into(),
            host: "/127.0.0.1".into(),
            client_id: "cli".into(),
            assignment: vec![
                TopicPartition::new("t", 0),
                TopicPartition::new("t", 1),
                TopicPartition::new("u", 2),
            ],
        }];
        assert_eq!(
            members_table(&members, false),
            vec![
                "GROUP CONSUMER-ID HOST       CLIENT-ID #PARTITIONS",
                "g     c-1         /127.0.0.1 cli       3",
            ]
        );
        assert_eq!(
            members_table(&members, true)[1],
            "g     c-1         /127.0.0.1 cli       3               t(0,1),u(2)"
        );
        assert_eq!(assignment_text(&[]), "-");
        let state = [StateRow {
            group: "g".into(),
            coordinator: "127.0.0.1:9293 (0)".into(),
            assignor: "uniform".into(),
            state: "Stable".into(),
            members: 1,
        }];
        assert_eq!(
            state_table(&state)[1],
            "g     127.0.0.1:9293 (0)        uniform              Stable          1"
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
