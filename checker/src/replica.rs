//! Replica divergence: per partition, the sequence of batches (offsets, CRC, leader epoch) of
//! every replica must be identical up to the lowest high watermark.
//!
//! A replica is read from a copy of its partition directory: the `.log` segments are Kafka
//! RecordBatch v2 back to back (docs/storage-format.md); each batch header is decoded and its
//! CRC-32C checked with `borges_protocol::batch::validate`. File names only order the
//! segments: the first batch of each must start at the offset the name says, and every batch
//! must start where the previous one ended. The zero bytes pre-allocated after the last batch
//! end a segment. Reading stops at the first problem; the problem is reported if it lies below
//! the bound.
//!
//! Not compared: `leader-epoch.checkpoint` files. A new leader records the start of its
//! epoch before appending anything, so replicas may rightly hold entries for epochs that have
//! no batch; the epochs that matter are those stamped in the batches, which are compared.
//! Log start moved by retention is out of scope: the fault suite runs without retention, and a
//! replica whose log starts later than the others' diverges.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use borges_protocol::batch::{self, BATCH_HEADER_SIZE_BYTES, LOG_OVERHEAD_BYTES};
use serde::Serialize;
use thiserror::Error;

use crate::anomaly::Anomaly;
use crate::history::{Offset, Partition};

/// Largest batch the reader accepts (the broker refuses to append larger ones).
pub const REPLICA_BATCH_SIZE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// One batch as the comparison sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchEntry {
    /// First offset.
    pub base_offset: Offset,
    /// Last offset.
    pub last_offset: Offset,
    /// The stored CRC-32C (checked on read).
    pub crc: u32,
    /// The leader epoch stamped on append.
    pub leader_epoch: i32,
}

impl fmt::Display for BatchEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}..={} crc {:#010x} epoch {}",
            self.base_offset, self.last_offset, self.crc, self.leader_epoch
        )
    }
}

/// One replica of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLog {
    /// The broker holding it.
    pub node: u64,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: Partition,
    /// Its valid batches, in order.
    pub batches: Vec<BatchEntry>,
    /// Why reading stopped before the end of the files, if it did.
    pub problem: Option<String>,
    /// This replica's own high watermark, if known (the bound is the lowest known one).
    pub hw: Option<Offset>,
}

impl ReplicaLog {
    /// The offset after the last valid batch (0 when empty).
    pub fn log_end(&self) -> Offset {
        self.batches.last().map_or(0, |b| b.last_offset + 1)
    }
}

/// Reading a copied data directory failed (not a problem inside a segment: those are
/// [`ReplicaLog::problem`]).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReplicaReadError {
    /// Listing or opening failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ReplicaReadError + '_ {
    move |source| ReplicaReadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads every `<topic>-<partition>` directory of one broker's copied data directory.
pub fn read_node(
    node: u64,
    data_dir: &Path,
    topic: &str,
) -> Result<Vec<ReplicaLog>, ReplicaReadError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data_dir).map_err(io_error(data_dir))? {
        let entry = entry.map_err(io_error(data_dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((dir_topic, partition)) = name.rsplit_once('-') else {
            continue;
        };
        let Ok(partition) = partition.parse::<Partition>() else {
            continue;
        };
        if dir_topic == topic && entry.path().is_dir() {
            out.push(read_partition_dir(node, topic, partition, &entry.path())?);
        }
    }
    out.sort_by_key(|r| r.partition);
    Ok(out)
}

/// Reads one partition directory.
pub fn read_partition_dir(
    node: u64,
    topic: &str,
    partition: Partition,
    dir: &Path,
) -> Result<ReplicaLog, ReplicaReadError> {
    let mut segments: Vec<(u64, PathBuf)> = Vec::new();
    let mut problem = None;
    for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        match stem.parse::<u64>() {
            Ok(base) if stem.len() == 20 => segments.push((base, path)),
            _ => {
                problem = Some(format!(
                    "segment file name {} is not 20 digits",
                    path.display()
                ))
            }
        }
    }
    segments.sort();
    let mut log = ReplicaLog {
        node,
        topic: topic.to_string(),
        partition,
        batches: Vec::new(),
        problem: None,
        hw: None,
    };
    if problem.is_none() {
        for (base, path) in &segments {
            problem = read_segment(*base, path, &mut log.batches)?;
            if problem.is_some() {
                break;
            }
        }
    }
    log.problem = problem;
    Ok(log)
}

/// Appends the valid batches of one segment to `batches`; returns the problem that stopped
/// the reading, if any.
fn read_segment(
    name_base: u64,
    path: &Path,
    batches: &mut Vec<BatchEntry>,
) -> Result<Option<String>, ReplicaReadError> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let mut position: u64 = 0;
    let mut first = true;
    let mut buffer = vec![0u8; BATCH_HEADER_SIZE_BYTES];
    loop {
        let at = |what: String| Some(format!("{} position {position}: {what}", path.display()));
        buffer.resize(LOG_OVERHEAD_BYTES, 0);
        match read_full(&mut file, &mut buffer).map_err(io_error(path))? {
            0 => return Ok(None),
            n if n < LOG_OVERHEAD_BYTES => return Ok(at(format!("torn batch header ({n} bytes)"))),
            _ => {}
        }
        if buffer.iter().all(|b| *b == 0) {
            // Pre-allocated space after the last batch.
            return Ok(None);
        }
        let length = i32::from_be_bytes([buffer[8], buffer[9], buffer[10], buffer[11]]);
        let size = LOG_OVERHEAD_BYTES as i64 + i64::from(length);
        if length < 0
            || size < BATCH_HEADER_SIZE_BYTES as i64
            || size > REPLICA_BATCH_SIZE_BYTES_MAX as i64
        {
            return Ok(at(format!("invalid batch_length {length}")));
        }
        buffer.resize(size as usize, 0);
        let rest =
            read_full(&mut file, &mut buffer[LOG_OVERHEAD_BYTES..]).map_err(io_error(path))?;
        if rest < size as usize - LOG_OVERHEAD_BYTES {
            return Ok(at(format!(
                "torn batch: {} of {size} bytes",
                rest + LOG_OVERHEAD_BYTES
            )));
        }
        let header = match batch::validate(&buffer) {
            Ok(header) => header,
            Err(e) => return Ok(at(e.to_string())),
        };
        if header.last_offset() >= crate::model::OFFSET_MAX {
            return Ok(at(format!("offset {} out of range", header.last_offset())));
        }
        let expected = match batches.last() {
            Some(previous) if !first => previous.last_offset + 1,
            _ => name_base as i64,
        };
        let continues = batches
            .last()
            .is_none_or(|p| p.last_offset + 1 == header.base_offset);
        if header.base_offset != expected || !continues {
            return Ok(at(format!(
                "batch starts at offset {} where {expected} was expected (previous ends at {})",
                header.base_offset,
                batches.last().map_or(-1, |p| p.last_offset)
            )));
        }
        batches.push(BatchEntry {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            crc: header.crc,
            leader_epoch: header.partition_leader_epoch,
        });
        first = false;
        position += size as u64;
    }
}

/// Reads until `buffer` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// The comparison of one partition's replicas.
#[derive(Debug, Default)]
pub struct ReplicaComparison {
    /// One [`Anomaly::ReplicaDivergence`] per diverging replica.
    pub anomalies: Vec<Anomaly>,
    /// What could not be judged.
    pub notes: Vec<String>,
}

/// Compares every partition's replicas up to its bound: the lowest of `final_hw` (the high
/// watermark of the partition's final read) and the replicas' own known high watermarks;
/// without any, the lowest log end (the common prefix).
pub fn compare(
    replicas: &[ReplicaLog],
    final_hw: &BTreeMap<(String, Partition), Offset>,
) -> ReplicaComparison {
    let mut groups: BTreeMap<(String, Partition), Vec<&ReplicaLog>> = BTreeMap::new();
    for replica in replicas {
        groups
            .entry((replica.topic.clone(), replica.partition))
            .or_default()
            .push(replica);
    }
    let mut out = ReplicaComparison::default();
    for (key, mut group) in groups {
        group.sort_by_key(|r| r.node);
        let known = final_hw
            .get(&key)
            .copied()
            .into_iter()
            .chain(group.iter().filter_map(|r| r.hw));
        let bound = known.min().unwrap_or_else(|| {
            out.notes.push(format!(
                "{}-{}: no high watermark known; replicas compared up to the lowest log end",
                key.0, key.1
            ));
            group.iter().map(|r| r.log_end()).min().unwrap_or(0)
        });
        if group.len() < 2 {
            out.notes
                .push(format!("{}-{}: only one replica copied", key.0, key.1));
        }
        compare_group(&group, bound, &mut out.anomalies);
    }
    out
}

/// The batches of a replica that start below `bound`.
fn prefix(replica: &ReplicaLog, bound: Offset) -> &[BatchEntry] {
    let end = replica.batches.partition_point(|b| b.base_offset < bound);
    &replica.batches[..end]
}

fn compare_group(group: &[&ReplicaLog], bound: Offset, out: &mut Vec<Anomaly>) {
    let complete: Vec<bool> = group.iter().map(|r| r.log_end() >= bound).collect();
    // The reference: the complete replica whose prefix most others share (lowest node on ties).
    let agreeing = |i: usize| {
        (0..group.len())
            .filter(|&j| complete[j] && prefix(group[i], bound) == prefix(group[j], bound))
            .count()
    };
    let reference = (0..group.len())
        .filter(|&i| complete[i])
        .max_by_key(|&i| (agreeing(i), std::cmp::Reverse(i)));
    for (i, replica) in group.iter().enumerate() {
        if Some(i) == reference {
            continue;
        }
        let mine = prefix(replica, bound);
        let theirs = reference.map_or(&[][..], |r| prefix(group[r], bound));
        let first_difference = mine.iter().zip(theirs).position(|(a, b)| a != b);
        let (offset, reason, index) = match first_difference {
            Some(index) => (
                mine[index].base_offset,
                "batches differ".to_string(),
                Some(index),
            ),
            None if complete[i] && mine.len() == theirs.len() => continue,
            None => {
                let why = replica.problem.as_deref().unwrap_or("its log ends there");
                (
                    replica.log_end(),
                    format!("short of the bound {bound}: {why}"),
                    None,
                )
            }
        };
        let at = index.unwrap_or(mine.len());
        out.push(Anomaly::ReplicaDivergence {
            topic: replica.topic.clone(),
            partition: replica.partition,
            node: replica.node,
            reference_node: reference.map(|r| group[r].node),
            offset,
            replica: mine.get(at).copied(),
            reference: theirs.get(at).copied(),
            reason,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::{
        set_base_offset, set_partition_leader_epoch, BatchBuilder, BatchOptions,
    };

    fn batch_bytes(base_offset: i64, epoch: i32, values: &[&[u8]]) -> Vec<u8> {
        let mut builder = BatchBuilder::new(BatchOptions::default(), 1024);
        for value in values {
            builder.push(0, None, Some(value), &[]);
        }
        let mut bytes = builder.build().expect("batch").to_vec();
        set_base_offset(&mut bytes, base_offset);
        set_partition_leader_epoch(&mut bytes, epoch);
        bytes
    }

    fn write_segment(dir: &Path, base: u64, batches: &[Vec<u8>], zeros: usize) {
        let mut bytes: Vec<u8> = batches.concat();
        bytes.extend(std::iter::repeat_n(0u8, zeros));
        std::fs::write(dir.join(format!("{base:020}.log")), bytes).expect("write segment");
    }

    #[test]
    fn reads_segments_of_a_copied_directory_and_stops_at_preallocated_zeros() {
        let dir = tempfile::tempdir().expect("tempdir");
        let part = dir.path().join("jepsen-3");
        std::fs::create_dir(&part).expect("mkdir");
        write_segment(
            &part,
            0,
            &[batch_bytes(0, 1, &[b"a", b"b"]), batch_bytes(2, 1, &[b"c"])],
            0,
        );
        write_segment(&part, 3, &[batch_bytes(3, 2, &[b"d"])], 4096);
        std::fs::create_dir(dir.path().join("other-0")).expect("mkdir");
        let logs = read_node(7, dir.path(), "jepsen").expect("read");
        assert_eq!(logs.len(), 1);
        let log = &logs[0];
        assert_eq!(
            (log.node, log.partition, log.problem.as_deref()),
            (7, 3, None)
        );
        let spans: Vec<_> = log
            .batches
            .iter()
            .map(|b| (b.base_offset, b.last_offset, b.leader_epoch))
            .collect();
        assert_eq!(spans, vec![(0, 1, 1), (2, 2, 1), (3, 3, 2)]);
    }

    #[test]
    fn a_segment_whose_batches_do_not_start_at_its_name_or_a_bad_crc_stops_the_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_segment(dir.path(), 0, &[batch_bytes(0, 1, &[b"a"])], 0);
        write_segment(dir.path(), 1, &[batch_bytes(5, 1, &[b"b"])], 0);
        let log = read_partition_dir(1, "t", 0, dir.path()).expect("read");
        assert_eq!(log.batches.len(), 1);
        assert!(
            log.problem
                .as_deref()
                .is_some_and(|p| p.contains("where 1 was expected")),
            "{log:?}"
        );

        let mut corrupt = batch_bytes(1, 1, &[b"b"]);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        write_segment(dir.path(), 1, &[corrupt], 0);
        let log = read_partition_dir(1, "t", 0, dir.path()).expect("read");
        assert!(
            log.problem.as_deref().is_some_and(|p| p.contains("CRC")),
            "{log:?}"
        );
    }

    fn replica(node: u64, batches: &[(i64, i64, u32, i32)]) -> ReplicaLog {
        ReplicaLog {
            node,
            topic: "t".into(),
            partition: 0,
            batches: batches
                .iter()
                .map(
                    |&(base_offset, last_offset, crc, leader_epoch)| BatchEntry {
                        base_offset,
                        last_offset,
                        crc,
                        leader_epoch,
                    },
                )
                .collect(),
            problem: None,
            hw: None,
        }
    }

    fn hw(offset: Offset) -> BTreeMap<(String, Partition), Offset> {
        BTreeMap::from([(("t".to_string(), 0), offset)])
    }

    #[test]
    fn identical_replicas_and_tails_above_the_bound_do_not_diverge() {
        let a = replica(1, &[(0, 4, 10, 1), (5, 9, 11, 1), (10, 10, 99, 2)]);
        let b = replica(2, &[(0, 4, 10, 1), (5, 9, 11, 1), (10, 12, 42, 3)]);
        let c = replica(3, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let result = compare(&[a, b, c], &hw(10));
        assert!(result.anomalies.is_empty(), "{:?}", result.anomalies);
    }

    #[test]
    fn the_minority_replica_is_reported_at_its_first_differing_batch() {
        let a = replica(1, &[(0, 4, 10, 1), (5, 9, 77, 2)]);
        let b = replica(2, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let c = replica(3, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let result = compare(&[a, b, c], &hw(10));
        assert_eq!(result.anomalies.len(), 1, "{:?}", result.anomalies);
        match &result.anomalies[0] {
            Anomaly::ReplicaDivergence {
                node,
                reference_node,
                offset,
                ..
            } => assert_eq!((*node, *reference_node, *offset), (1, Some(2), 5)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_batch_that_differs_only_in_its_leader_epoch_diverges() {
        let a = replica(1, &[(0, 4, 10, 1), (5, 9, 11, 2)]);
        let b = replica(2, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let c = replica(3, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let result = compare(&[a, b, c], &hw(10));
        assert_eq!(result.anomalies.len(), 1, "{:?}", result.anomalies);
    }

    #[test]
    fn a_replica_short_of_the_high_watermark_diverges() {
        let a = replica(1, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let mut b = replica(2, &[(0, 4, 10, 1)]);
        b.problem = Some("CRC mismatch".into());
        let result = compare(&[a, b], &hw(10));
        assert_eq!(result.anomalies.len(), 1);
        assert!(
            result.anomalies[0].to_string().contains("CRC mismatch"),
            "{}",
            result.anomalies[0]
        );
        // Without a known high watermark the common prefix is compared: no divergence.
        let a = replica(1, &[(0, 4, 10, 1), (5, 9, 11, 1)]);
        let b = replica(2, &[(0, 4, 10, 1)]);
        assert!(compare(&[a, b], &BTreeMap::new()).anomalies.is_empty());
    }
}
