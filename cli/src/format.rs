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
    fn keys_split_at_the_first_separator() {
        assert_eq!(
            split_key("user-1:created: 100", ":"),
            Some(("user-1", "created: 100"))
        );
        assert_eq!(split_key("no separator", ":"), None);
        assert_eq!(split_key("::", "::"), Some(("", "")));
    }
}
