//! Metadata-log agreement: every node's Raft metadata log holds the same entries (index, term,
//! checksum of the entry) up to the lowest commit index.
//!
//! The input is abstract (the metadata log's format is still being built): per node, its
//! commit index and a list of entries. A node whose log starts later (a snapshot) is compared
//! from its first entry: the range compared is from the highest first index to the lowest
//! commit index. Within one log, indexes must follow each other by one and terms never
//! decrease.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::anomaly::Anomaly;

/// One metadata-log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataEntry {
    /// Raft index.
    pub index: u64,
    /// Raft term.
    pub term: u64,
    /// A checksum of the entry's payload.
    pub checksum: u64,
}

impl fmt::Display for MetadataEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "index {} term {} checksum {:#x}",
            self.index, self.term, self.checksum
        )
    }
}

/// One node's metadata log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataLog {
    /// The node.
    pub node: u64,
    /// Its commit index.
    pub commit_index: u64,
    /// Its entries, in index order.
    pub entries: Vec<MetadataEntry>,
}

/// Malformed logs (gaps, terms going back) and divergence from the reference node, one
/// anomaly per node at its first difference.
pub fn compare(logs: &[MetadataLog]) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for log in logs {
        if let Some(anomaly) = malformed(log) {
            out.push(anomaly);
        }
    }
    if logs.len() < 2 {
        return out;
    }
    let bound = logs.iter().map(|l| l.commit_index).min().unwrap_or(0);
    let start = logs
        .iter()
        .filter_map(|l| l.entries.first().map(|e| e.index))
        .max()
        .unwrap_or(0);
    let range = |log: &MetadataLog| -> BTreeMap<u64, MetadataEntry> {
        log.entries
            .iter()
            .filter(|e| e.index >= start && e.index <= bound)
            .map(|e| (e.index, *e))
            .collect()
    };
    let ranges: Vec<_> = logs.iter().map(range).collect();
    let agreeing = |i: usize| ranges.iter().filter(|r| **r == ranges[i]).count();
    let reference = (0..logs.len())
        .max_by_key(|&i| (agreeing(i), std::cmp::Reverse(i)))
        .unwrap_or(0);
    for (i, log) in logs.iter().enumerate() {
        if ranges[i] == ranges[reference] {
            continue;
        }
        let index = ranges[i]
            .keys()
            .chain(ranges[reference].keys())
            .copied()
            .filter(|index| ranges[i].get(index) != ranges[reference].get(index))
            .min()
            .unwrap_or(start);
        out.push(Anomaly::MetadataDivergence {
            node: log.node,
            reference_node: Some(logs[reference].node),
            index,
            entry: ranges[i].get(&index).copied(),
            reference: ranges[reference].get(&index).copied(),
            reason: format!("committed entries differ (compared {start}..={bound})"),
        });
    }
    out
}

fn malformed(log: &MetadataLog) -> Option<Anomaly> {
    let bad = log
        .entries
        .windows(2)
        .find(|w| w[0].index.checked_add(1) != Some(w[1].index) || w[1].term < w[0].term)?;
    Some(Anomaly::MetadataDivergence {
        node: log.node,
        reference_node: None,
        index: bad[1].index,
        entry: Some(bad[1]),
        reference: Some(bad[0]),
        reason: "entry does not follow the previous one (index +1, term not lower)".into(),
    })
}

/// Largest metadata-log record body read (the broker's `ENTRY_SIZE_BYTES_MAX`).
pub const METADATA_ENTRY_SIZE_BYTES_MAX: usize = 64 << 20;
const RECORD_HEADER_SIZE_BYTES: usize = 8;
const BODY_FIXED_SIZE_BYTES: usize = 16;

/// Reading a broker's metadata files failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataReadError {
    /// Listing or reading failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// `meta/quorum-state` is not the JSON the broker writes.
    #[error("{path}: {message}")]
    QuorumState {
        /// The path.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Reads one broker's metadata log from its data directory (docs/cluster.md "Storage"):
/// `meta/quorum-state` gives the committed and purged indexes, `meta/raft-log/*.log` the
/// records `body_size u32 | crc32c u32 | index u64 | term u64 | entry JSON` (big-endian).
/// Reading a segment stops at its first torn or out-of-sequence record, as the broker's
/// recovery does; entries at or below the purged index are left out. An entry's checksum is
/// a hash of its JSON with object keys sorted, so that nodes that serialize one entry with
/// maps in different orders agree.
pub fn read_node(node: u64, data_dir: &std::path::Path) -> Result<MetadataLog, MetadataReadError> {
    let meta = data_dir.join("meta");
    let state_path = meta.join("quorum-state");
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| MetadataReadError::Io { path, source }
    };
    let text = std::fs::read_to_string(&state_path).map_err(io(&state_path))?;
    let state: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| MetadataReadError::QuorumState {
            path: state_path.clone(),
            message: e.to_string(),
        })?;
    let index_of = |key: &str| {
        state
            .get(key)
            .and_then(|v| v.get("index"))
            .and_then(|i| i.as_u64())
    };
    let commit_index = index_of("committed").unwrap_or(0);
    let purged = index_of("purged");
    let log_dir = meta.join("raft-log");
    let mut firsts: Vec<(u64, std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&log_dir).map_err(io(&log_dir))? {
        let path = entry.map_err(io(&log_dir))?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            firsts.push((first, path));
        }
    }
    firsts.sort();
    let mut entries: BTreeMap<u64, MetadataEntry> = BTreeMap::new();
    for (first, path) in &firsts {
        let bytes = std::fs::read(path).map_err(io(path))?;
        for entry in decode_segment(&bytes, *first) {
            if purged.is_none_or(|p| entry.index > p) {
                entries.insert(entry.index, entry);
            }
        }
    }
    Ok(MetadataLog {
        node,
        commit_index,
        entries: entries.into_values().collect(),
    })
}

/// The valid records of one segment, in order.
fn decode_segment(bytes: &[u8], first_index: u64) -> Vec<MetadataEntry> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut next = first_index;
    let be64 = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or_default());
    while bytes.len() - pos >= RECORD_HEADER_SIZE_BYTES {
        let size = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap_or_default()) as usize;
        let start = pos + RECORD_HEADER_SIZE_BYTES;
        if !(BODY_FIXED_SIZE_BYTES..=METADATA_ENTRY_SIZE_BYTES_MAX).contains(&size)
            || bytes.len() - start < size
        {
            break;
        }
        let body = &bytes[start..start + size];
        let (index, term) = (be64(&body[0..8]), be64(&body[8..16]));
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body[16..]) else {
            break;
        };
        if index != next {
            break;
        }
        out.push(MetadataEntry {
            index,
            term,
            checksum: canonical_hash(&json, 0xcbf2_9ce4_8422_2325),
        });
        pos = start + size;
        next += 1;
    }
    out
}

/// FNV-1a over a JSON value with object keys in sorted order.
fn canonical_hash(value: &serde_json::Value, mut hash: u64) -> u64 {
    let eat = |bytes: &[u8], hash: &mut u64| {
        for b in bytes {
            *hash ^= u64::from(*b);
            *hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            eat(b"{", &mut hash);
            for key in keys {
                eat(key.as_bytes(), &mut hash);
                eat(b":", &mut hash);
                hash = canonical_hash(&map[key], hash);
            }
            eat(b"}", &mut hash);
        }
        serde_json::Value::Array(items) => {
            eat(b"[", &mut hash);
            for item in items {
                hash = canonical_hash(item, hash);
                eat(b",", &mut hash);
            }
            eat(b"]", &mut hash);
        }
        other => eat(other.to_string().as_bytes(), &mut hash),
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: u64, term: u64, json: &str) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&index.to_be_bytes());
        body.extend_from_slice(&term.to_be_bytes());
        body.extend_from_slice(json.as_bytes());
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&[0; 4]); // the CRC is the broker's to check, not compared here
        out.extend_from_slice(&body);
        out
    }

    fn write_node(dir: &std::path::Path, committed: u64, purged: Option<u64>, records: &[Vec<u8>]) {
        let meta = dir.join("meta");
        std::fs::create_dir_all(meta.join("raft-log")).expect("mkdir");
        let purged = purged.map_or("null".to_string(), |p| format!("{{\"index\":{p}}}"));
        let state = format!(
            "{{\"version\":1,\"committed\":{{\"leader_id\":1,\"index\":{committed}}},\
             \"purged\":{purged}}}"
        );
        std::fs::write(meta.join("quorum-state"), state).expect("state");
        std::fs::write(
            meta.join("raft-log").join(format!("{:020}.log", 1)),
            records.concat(),
        )
        .expect("segment");
    }

    #[test]
    fn metadata_logs_are_read_from_broker_files_and_compared_key_order_blind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        let e1 = r#"{"log_id":{"index":1},"payload":{"x":1,"y":2}}"#;
        let e1_reordered = r#"{"payload":{"y":2,"x":1},"log_id":{"index":1}}"#;
        let e2 = r#"{"log_id":{"index":2},"payload":"b"}"#;
        let e2_other = r#"{"log_id":{"index":2},"payload":"z"}"#;
        write_node(&a, 2, None, &[record(1, 1, e1), record(2, 1, e2)]);
        // A torn tail after index 2 is not read.
        let mut torn = [record(1, 1, e1_reordered), record(2, 1, e2)].concat();
        torn.extend_from_slice(&record(3, 1, e2)[..10]);
        write_node(&b, 2, None, &[torn]);
        write_node(&c, 2, None, &[record(1, 1, e1), record(2, 1, e2_other)]);
        let logs: Vec<MetadataLog> = [(1, &a), (2, &b), (3, &c)]
            .iter()
            .map(|(n, d)| read_node(*n, d).expect("read"))
            .collect();
        assert_eq!(logs[1].entries.len(), 2, "{:?}", logs[1]);
        assert_eq!(logs[0].commit_index, 2);
        assert_eq!(
            logs[0].entries, logs[1].entries,
            "key order does not matter"
        );
        let anomalies = compare(&logs);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert!(matches!(
            anomalies[0],
            Anomaly::MetadataDivergence {
                node: 3,
                index: 2,
                ..
            }
        ));
    }

    fn log(node: u64, commit_index: u64, entries: &[(u64, u64, u64)]) -> MetadataLog {
        MetadataLog {
            node,
            commit_index,
            entries: entries
                .iter()
                .map(|&(index, term, checksum)| MetadataEntry {
                    index,
                    term,
                    checksum,
                })
                .collect(),
        }
    }

    #[test]
    fn logs_that_agree_up_to_the_lowest_commit_index_pass() {
        let a = log(1, 3, &[(1, 1, 10), (2, 1, 11), (3, 2, 12), (4, 2, 13)]);
        let b = log(2, 4, &[(1, 1, 10), (2, 1, 11), (3, 2, 12), (4, 3, 99)]);
        // A snapshot: node 3's log starts at index 2.
        let c = log(3, 3, &[(2, 1, 11), (3, 2, 12)]);
        assert!(compare(&[a, b, c]).is_empty());
    }

    #[test]
    fn a_committed_entry_that_differs_is_reported_on_the_minority_node() {
        let a = log(1, 3, &[(1, 1, 10), (2, 1, 11), (3, 2, 12)]);
        let b = log(2, 3, &[(1, 1, 10), (2, 1, 66), (3, 2, 12)]);
        let c = log(3, 3, &[(1, 1, 10), (2, 1, 11), (3, 2, 12)]);
        let anomalies = compare(&[a, b, c]);
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert!(matches!(
            anomalies[0],
            Anomaly::MetadataDivergence {
                node: 2,
                reference_node: Some(1),
                index: 2,
                ..
            }
        ));
    }

    #[test]
    fn a_gap_or_a_term_going_back_is_malformed() {
        let a = log(1, 3, &[(1, 2, 10), (2, 1, 11)]);
        let b = log(2, 3, &[(1, 1, 10), (3, 1, 11)]);
        assert_eq!(compare(&[a]).len(), 1);
        assert_eq!(compare(&[b]).len(), 1);
    }
}
