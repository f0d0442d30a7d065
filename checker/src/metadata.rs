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

#[cfg(test)]
mod tests {
    use super::*;

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
