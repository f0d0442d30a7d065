//! Topic configs: the known names (Kafka's dotted spelling), their validation, their broker
//! defaults, and the storage settings they become.

use std::collections::BTreeMap;

use borges_storage::{CompactionConfig, Durability, LogConfig};
use thiserror::Error;

use crate::config::{BrokerConfig, DurabilityPolicy};

/// Where a config value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic.
    Topic,
    /// The broker's default.
    Default,
}

#[derive(Clone, Copy)]
enum Kind {
    Long { min: i64 },
    Durability,
    CleanupPolicy,
    TimestampType,
    Ratio,
    Bool,
}

struct Def {
    name: &'static str,
    kind: Kind,
    doc: &'static str,
}

const DEFS: &[Def] = &[
    Def { name: "retention.ms", kind: Kind::Long { min: -1 }, doc: "Delete closed segments whose newest record is older than this (ms); -1 keeps forever." },
    Def { name: "retention.bytes", kind: Kind::Long { min: -1 }, doc: "Delete the oldest closed segments while the partition is larger than this; -1 means no cap." },
    Def { name: "segment.bytes", kind: Kind::Long { min: 4096 }, doc: "Roll a new segment when the active one reaches this size." },
    Def { name: "segment.ms", kind: Kind::Long { min: 1 }, doc: "Roll a new segment when the active one is this old (ms)." },
    Def { name: "segment.index.bytes", kind: Kind::Long { min: 4096 }, doc: "Size of a segment's offset index; the segment rolls when it is full." },
    Def { name: "index.interval.bytes", kind: Kind::Long { min: 0 }, doc: "Bytes of log between two offset-index entries." },
    Def { name: "durability", kind: Kind::Durability, doc: "fsync: group-commit fdatasync before acks=all and before consumers see data; interval: fdatasync every flush.ms; none: never fdatasync (durability left to replication)." },
    Def { name: "flush.ms", kind: Kind::Long { min: 1 }, doc: "fdatasync interval when durability=interval (ms)." },
    Def { name: "max.message.bytes", kind: Kind::Long { min: 64 }, doc: "Largest record batch accepted." },
    Def { name: "min.insync.replicas", kind: Kind::Long { min: 1 }, doc: "acks=all is refused when fewer replicas are in sync." },
    Def { name: "cleanup.policy", kind: Kind::CleanupPolicy, doc: "delete: retention deletes old segments; compact: the cleaner keeps the latest record per key (records need a key); compact,delete: both." },
    Def { name: "delete.retention.ms", kind: Kind::Long { min: 0 }, doc: "How long tombstones are kept on compacted topics after the cleaner first saw them (ms)." },
    Def {
        name: "min.cleanable.dirty.ratio",
        kind: Kind::Ratio,
        doc: "Clean a compacted partition when dirty bytes reach this share of cleanable bytes.",
    },
    Def {
        name: "min.compaction.lag.ms",
        kind: Kind::Long { min: 0 },
        doc: "A segment whose newest record is younger than this is not compacted (ms).",
    },
    Def {
        name: "max.compaction.lag.ms",
        kind: Kind::Long { min: 1 },
        doc: "Compact a dirty segment once its newest record is this old, whatever the ratio.",
    },
    Def { name: "message.timestamp.type", kind: Kind::TimestampType, doc: "CreateTime: record timestamps are the producer's." },
    Def {
        name: "unclean.leader.election.enable",
        kind: Kind::Bool,
        doc: concat!(
            "true: when no in-sync or eligible replica runs, any running replica may lead ",
            "(possible data loss, logged and counted)."
        ),
    },
];

/// Why a topic config is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TopicConfigError {
    /// Not a config Borges knows.
    #[error("unknown topic config {name:?}; known: {}", names().join(", "))]
    Unknown {
        /// The name.
        name: String,
    },
    /// Not an integer.
    #[error("{name} = {value:?} is not an integer")]
    NotInteger {
        /// The name.
        name: &'static str,
        /// The value.
        value: String,
    },
    /// Below the config's minimum.
    #[error("{name} = {value} is below the minimum {min}")]
    BelowMinimum {
        /// The name.
        name: &'static str,
        /// The value.
        value: i64,
        /// The minimum.
        min: i64,
    },
    /// Not a durability policy.
    #[error("durability = {0:?}: expected fsync, interval or none")]
    Durability(String),
    /// Not a cleanup policy.
    #[error("cleanup.policy = {0:?}: expected delete, compact or compact,delete")]
    CleanupPolicy(String),
    /// Not a ratio.
    #[error("{name} = {value:?}: expected a number from 0 to 1")]
    Ratio {
        /// The name.
        name: &'static str,
        /// The value.
        value: String,
    },
    /// Not true or false.
    #[error("{name} = {value:?}: expected true or false")]
    NotBoolean {
        /// The name.
        name: &'static str,
        /// The value.
        value: String,
    },
    /// Not CreateTime.
    #[error("message.timestamp.type = {0:?}: only CreateTime is supported")]
    TimestampType(String),
    /// `max.message.bytes` does not fit a frame.
    #[error("max.message.bytes = {value} must be below the broker's frame_size_bytes_max {frame_size_bytes_max}")]
    AboveFrameSize {
        /// The value.
        value: i64,
        /// The broker's frame limit.
        frame_size_bytes_max: u32,
    },
    /// `max.message.bytes` does not fit the write buffer.
    #[error("max.message.bytes = {0} exceeds the broker's storage.write_buffer_bytes_max")]
    AboveWriteBuffer(i64),
}

/// Checks one name/value pair.
pub fn validate_one(name: &str, value: &str) -> Result<(), TopicConfigError> {
    let def = DEFS
        .iter()
        .find(|d| d.name == name)
        .ok_or_else(|| TopicConfigError::Unknown {
            name: name.to_string(),
        })?;
    match def.kind {
        Kind::Long { min } => {
            let v: i64 = value.parse().map_err(|_| TopicConfigError::NotInteger {
                name: def.name,
                value: value.to_string(),
            })?;
            if v < min {
                return Err(TopicConfigError::BelowMinimum {
                    name: def.name,
                    value: v,
                    min,
                });
            }
        }
        Kind::Durability => {
            DurabilityPolicy::parse(value)
                .ok_or_else(|| TopicConfigError::Durability(value.to_string()))?;
        }
        Kind::CleanupPolicy => {
            CleanupPolicy::parse(value)
                .ok_or_else(|| TopicConfigError::CleanupPolicy(value.to_string()))?;
        }
        Kind::Ratio => {
            let ok = value.parse::<f64>().is_ok_and(|v| (0.0..=1.0).contains(&v));
            if !ok {
                return Err(TopicConfigError::Ratio {
                    name: def.name,
                    value: value.to_string(),
                });
            }
        }
        Kind::Bool => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(TopicConfigError::NotBoolean {
                    name: def.name,
                    value: value.to_string(),
                });
            }
        }
        Kind::TimestampType => {
            if value != "CreateTime" {
                return Err(TopicConfigError::TimestampType(value.to_string()));
            }
        }
    }
    Ok(())
}

/// Checks a whole set of overrides, including relations to broker limits.
pub fn validate(
    configs: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> Result<(), TopicConfigError> {
    for (k, v) in configs {
        validate_one(k, v)?;
    }
    if let Some(v) = configs.get("max.message.bytes") {
        let v: i64 = v.parse().unwrap_or(0);
        if v >= i64::from(broker.limits.frame_size_bytes_max) {
            return Err(TopicConfigError::AboveFrameSize {
                value: v,
                frame_size_bytes_max: broker.limits.frame_size_bytes_max,
            });
        }
        if v as u64 > broker.storage.write_buffer_bytes_max {
            return Err(TopicConfigError::AboveWriteBuffer(v));
        }
    }
    Ok(())
}

/// Every known config name.
pub fn names() -> Vec<&'static str> {
    DEFS.iter().map(|d| d.name).collect()
}

/// Documentation of a config.
pub fn doc(name: &str) -> Option<&'static str> {
    DEFS.iter().find(|d| d.name == name).map(|d| d.doc)
}

/// The broker default of a config, as a string.
pub fn default_value(name: &str, broker: &BrokerConfig) -> Option<String> {
    let d = &broker.log;
    Some(match name {
        "retention.ms" => d.retention_ms.to_string(),
        "retention.bytes" => d.retention_bytes.to_string(),
        "segment.bytes" => d.segment_size_bytes.to_string(),
        "segment.ms" => d.segment_ms.to_string(),
        "segment.index.bytes" => (10 * 1024 * 1024).to_string(),
        "index.interval.bytes" => d.index_interval_bytes.to_string(),
        "durability" => d.durability.as_str().to_string(),
        "flush.ms" => d.flush_interval_ms.to_string(),
        "max.message.bytes" => d.max_message_bytes.to_string(),
        "min.insync.replicas" => "1".to_string(),
        "cleanup.policy" => d.cleanup_policy.clone(),
        "delete.retention.ms" => (24 * 3600 * 1000).to_string(),
        "min.cleanable.dirty.ratio" => "0.5".to_string(),
        "min.compaction.lag.ms" => "0".to_string(),
        "max.compaction.lag.ms" => i64::MAX.to_string(),
        "message.timestamp.type" => "CreateTime".to_string(),
        "unclean.leader.election.enable" => "false".to_string(),
        _ => return None,
    })
}

/// Every config with its effective value and source, in name order.
pub fn effective(
    configs: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> Vec<(&'static str, String, ConfigSource)> {
    let mut out: Vec<_> = DEFS
        .iter()
        .map(|d| match configs.get(d.name) {
            Some(v) => (d.name, v.clone(), ConfigSource::Topic),
            None => (
                d.name,
                default_value(d.name, broker).unwrap_or_default(),
                ConfigSource::Default,
            ),
        })
        .collect();
    out.sort_by_key(|(n, _, _)| *n);
    out
}

fn get_i64(configs: &BTreeMap<String, String>, name: &str, default: i64) -> i64 {
    configs
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `max.message.bytes` in effect.
pub fn max_message_bytes(configs: &BTreeMap<String, String>, broker: &BrokerConfig) -> usize {
    get_i64(
        configs,
        "max.message.bytes",
        i64::from(broker.log.max_message_bytes),
    )
    .max(64) as usize
}

/// `min.insync.replicas` in effect.
pub fn min_insync_replicas(configs: &BTreeMap<String, String>) -> i64 {
    get_i64(configs, "min.insync.replicas", 1)
}

/// `cleanup.policy`: which of retention (delete) and compaction apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Retention deletes old segments (`retention.ms`, `retention.bytes`).
    pub delete: bool,
    /// The cleaner keeps the latest record per key.
    pub compact: bool,
}

impl CleanupPolicy {
    /// `delete`, `compact`, or both comma-separated (Kafka's list syntax).
    pub fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut p = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for part in value.split(',').map(str::trim) {
            match part {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

/// `cleanup.policy` in effect.
pub fn cleanup_policy(configs: &BTreeMap<String, String>, broker: &BrokerConfig) -> CleanupPolicy {
    configs
        .get("cleanup.policy")
        .and_then(|v| CleanupPolicy::parse(v))
        .or_else(|| CleanupPolicy::parse(&broker.log.cleanup_policy))
        .unwrap_or(CleanupPolicy {
            delete: true,
            compact: false,
        })
}

/// The compaction settings of a compacted topic; None when `cleanup.policy` has no compact.
pub fn compaction_config(
    configs: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> Option<CompactionConfig> {
    if !cleanup_policy(configs, broker).compact {
        return None;
    }
    let d = CompactionConfig::default();
    Some(CompactionConfig {
        delete_retention_ms: get_i64(configs, "delete.retention.ms", d.delete_retention_ms),
        min_cleanable_dirty_ratio: configs
            .get("min.cleanable.dirty.ratio")
            .and_then(|v| v.parse().ok())
            .unwrap_or(d.min_cleanable_dirty_ratio),
        min_compaction_lag_ms: get_i64(configs, "min.compaction.lag.ms", d.min_compaction_lag_ms),
        max_compaction_lag_ms: get_i64(configs, "max.compaction.lag.ms", d.max_compaction_lag_ms),
    })
}

/// The storage settings of a partition of a topic with these overrides.
pub fn log_config(configs: &BTreeMap<String, String>, broker: &BrokerConfig) -> LogConfig {
    let d = &broker.log;
    let durability = configs
        .get("durability")
        .and_then(|v| DurabilityPolicy::parse(v))
        .unwrap_or(d.durability);
    let deletes = cleanup_policy(configs, broker).delete;
    LogConfig {
        segment_size_bytes: get_i64(configs, "segment.bytes", d.segment_size_bytes as i64) as u64,
        segment_ms: get_i64(configs, "segment.ms", d.segment_ms as i64) as u64,
        index_interval_bytes: get_i64(
            configs,
            "index.interval.bytes",
            i64::from(d.index_interval_bytes),
        ) as u32,
        index_size_bytes_max: get_i64(configs, "segment.index.bytes", 10 * 1024 * 1024) as u32,
        // Retention deletes segments only under the delete policy (compact alone keeps them).
        retention_ms: if deletes {
            get_i64(configs, "retention.ms", d.retention_ms)
        } else {
            -1
        },
        retention_bytes: if deletes {
            get_i64(configs, "retention.bytes", d.retention_bytes)
        } else {
            -1
        },
        durability: match durability {
            DurabilityPolicy::Fsync => Durability::Fsync,
            DurabilityPolicy::Interval => Durability::Interval,
            DurabilityPolicy::None => Durability::None,
        },
        flush_interval_ms: get_i64(configs, "flush.ms", d.flush_interval_ms as i64) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_problem() {
        assert!(validate_one("retention.ms", "-1").is_ok());
        assert!(validate_one("retention.ms", "-2")
            .unwrap_err()
            .to_string()
            .contains("minimum"));
        assert!(validate_one("retention.ms", "soon")
            .unwrap_err()
            .to_string()
            .contains("not an integer"));
        assert!(validate_one("bogus", "1")
            .unwrap_err()
            .to_string()
            .contains("unknown topic config"));
        assert!(validate_one("durability", "fsync").is_ok());
        assert!(validate_one("durability", "sometimes").is_err());
        for ok in ["delete", "compact", "compact,delete", "delete,compact"] {
            assert!(validate_one("cleanup.policy", ok).is_ok(), "{ok}");
        }
        assert!(validate_one("cleanup.policy", "compress")
            .unwrap_err()
            .to_string()
            .contains("expected delete, compact"));
        assert!(validate_one("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate_one("min.cleanable.dirty.ratio", "0.1").is_ok());
    }

    #[test]
    fn compact_alone_turns_retention_off_and_compaction_on() {
        let broker = BrokerConfig::default();
        let mut c = BTreeMap::new();
        c.insert("retention.ms".to_string(), "1000".to_string());
        assert!(compaction_config(&c, &broker).is_none());
        c.insert("cleanup.policy".to_string(), "compact".to_string());
        c.insert("delete.retention.ms".to_string(), "5".to_string());
        assert_eq!(log_config(&c, &broker).retention_ms, -1);
        assert_eq!(
            compaction_config(&c, &broker).unwrap().delete_retention_ms,
            5
        );
        c.insert("cleanup.policy".to_string(), "compact,delete".to_string());
        assert_eq!(log_config(&c, &broker).retention_ms, 1000);
        assert!(compaction_config(&c, &broker).is_some());
    }

    #[test]
    fn overrides_reach_the_log_config() {
        let broker = BrokerConfig::default();
        let mut c = BTreeMap::new();
        c.insert("retention.ms".to_string(), "1000".to_string());
        c.insert("durability".to_string(), "none".to_string());
        let lc = log_config(&c, &broker);
        assert_eq!(lc.retention_ms, 1000);
        assert!(matches!(lc.durability, Durability::None));
        assert_eq!(lc.segment_size_bytes, broker.log.segment_size_bytes);
        let eff = effective(&c, &broker);
        assert!(eff
            .iter()
            .any(|(n, v, s)| *n == "retention.ms" && v == "1000" && *s == ConfigSource::Topic));
        assert!(eff
            .iter()
            .any(|(n, _, s)| *n == "segment.bytes" && *s == ConfigSource::Default));
    }

    #[test]
    fn max_message_bytes_must_fit_a_frame() {
        let broker = BrokerConfig::default();
        let mut c = BTreeMap::new();
        c.insert(
            "max.message.bytes".to_string(),
            broker.limits.frame_size_bytes_max.to_string(),
        );
        assert!(validate(&c, &broker).is_err());
    }
}
