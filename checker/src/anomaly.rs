//! What the checker reports: typed anomalies with the context to debug them, and the summary
//! line of the fault suite.

use std::fmt;

use serde::Serialize;

use crate::history::{Offset, Partition, ProcessId, Value};
use crate::metadata::MetadataEntry;
use crate::replica::BatchEntry;

/// Most skipped records listed in one [`Anomaly::Skip`] (the count is always exact).
pub const SKIPPED_LISTED_MAX: usize = 8;

/// A moment of the history: milliseconds since its first event, and the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct When {
    /// Milliseconds since the history's first event (monotonic clock).
    pub t_ms: u64,
    /// Unix time in milliseconds, to find the moment in broker logs.
    pub wall_ms: u64,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}.{:03}s", self.t_ms / 1000, self.t_ms % 1000)
    }
}

/// Where a (partition, offset, value) observation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Source {
    /// A producer's acknowledgement.
    Ack {
        /// The producer.
        process: ProcessId,
        /// The send's op id.
        op: u64,
        /// When it was acknowledged.
        at: When,
    },
    /// A consumer's poll.
    Poll {
        /// The consumer.
        process: ProcessId,
        /// When the poll returned.
        at: When,
    },
    /// A final read.
    FinalRead {
        /// The final reader.
        process: ProcessId,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Ack { process, op, at } => write!(f, "ack of op {op} by p{process} at {at}"),
            Source::Poll { process, at } => write!(f, "poll by p{process} at {at}"),
            Source::FinalRead { process } => write!(f, "final read by p{process}"),
        }
    }
}

/// A value observed at an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Seen {
    /// The offset.
    pub offset: Offset,
    /// The value.
    pub value: Value,
    /// Who observed it first.
    pub source: Source,
}

/// A send, as far as the checker knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SendRef {
    /// The op id.
    pub op: u64,
    /// The value.
    pub value: Value,
    /// The acknowledged offset.
    pub offset: Offset,
}

/// One consumer's stretch of reads (between seeks) that passed over an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Passed {
    /// The consumer.
    pub process: ProcessId,
    /// Where the stretch started (seek position or first offset polled).
    pub from: Offset,
    /// The last offset it polled.
    pub to: Offset,
}

/// The final read a write is missing from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FinalRef {
    /// The final reader.
    pub process: ProcessId,
    /// Its log start.
    pub log_start: Offset,
    /// Its high watermark.
    pub hw: Offset,
}

/// One anomaly. Every variant names the partition, offsets, values, processes and times
/// involved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
pub enum Anomaly {
    /// A write that must have been committed (acknowledged, or indefinite but read) is missing
    /// from a complete final read, or was never read although an assign-mode consumer read
    /// across its offset (Jepsen's lost-write / unseen).
    Lost {
        /// The partition.
        partition: Partition,
        /// The value.
        value: Value,
        /// Its acknowledged offset (`None` for an indefinite send that was read).
        offset: Option<Offset>,
        /// The producer.
        writer: ProcessId,
        /// When it was acknowledged.
        acked: Option<When>,
        /// The complete final read that lacks it.
        missing_from_final: Option<FinalRef>,
        /// A consumer that read across its offset without seeing it (if it was never read).
        passed_by: Option<Passed>,
    },
    /// One value at two or more offsets.
    Duplicate {
        /// The partition.
        partition: Partition,
        /// The value.
        value: Value,
        /// Each offset with its first observer.
        at: Vec<Seen>,
    },
    /// One offset with two or more values (sends' acks, polls, final reads).
    InconsistentOffset {
        /// The partition.
        partition: Partition,
        /// The offset.
        offset: Offset,
        /// Each value with its first observer.
        values: Vec<Seen>,
    },
    /// A value read whose send definitely failed (Jepsen's G1a).
    AbortedRead {
        /// The partition.
        partition: Partition,
        /// Where and by whom it was read.
        read: Seen,
        /// The producer.
        writer: ProcessId,
        /// The send's error.
        error: String,
    },
    /// A value read that no send of this partition wrote.
    UnknownValue {
        /// The partition.
        partition: Partition,
        /// Where and by whom it was read.
        read: Seen,
        /// The partition it was sent to, if it was sent at all.
        sent_to: Option<Partition>,
    },
    /// An assign-mode consumer's next record skipped offsets whose values are known.
    Skip {
        /// The partition.
        partition: Partition,
        /// The consumer.
        process: ProcessId,
        /// The offset it should have returned next.
        expected: Offset,
        /// The offset it returned.
        next: Offset,
        /// The first skipped records (at most [`SKIPPED_LISTED_MAX`]).
        skipped: Vec<(Offset, Value)>,
        /// How many known records it skipped.
        skipped_count: usize,
        /// When.
        at: When,
    },
    /// An assign-mode consumer returned an offset at or before one it already returned (or
    /// before its seek position), with no seek in between.
    NonMonotonicPoll {
        /// The partition.
        partition: Partition,
        /// The consumer.
        process: ProcessId,
        /// The offset it should have returned next.
        expected: Offset,
        /// The offset it returned.
        next: Offset,
        /// When.
        at: When,
    },
    /// A complete final read is not exactly `log_start..hw`, offset after offset.
    FinalReadGap {
        /// The partition.
        partition: Partition,
        /// The final reader.
        process: ProcessId,
        /// The offset expected next.
        expected: Offset,
        /// The offset found instead (`None`: the read ended early).
        found: Option<Offset>,
        /// Its log start.
        log_start: Offset,
        /// Its high watermark.
        hw: Offset,
    },
    /// A producer's acknowledged sends to one partition went backwards (invoke order).
    NonMonotonicSend {
        /// The partition.
        partition: Partition,
        /// The producer.
        process: ProcessId,
        /// The earlier send.
        previous: SendRef,
        /// The later send, acknowledged at a lower or equal offset.
        next: SendRef,
    },
    /// After a fault healed, no write to a partition was acknowledged within the window.
    NoRecovery {
        /// The fault's id.
        fault_id: String,
        /// The fault's name.
        fault: String,
        /// The partition.
        partition: Partition,
        /// When the fault healed.
        healed: When,
        /// Milliseconds from the heal to the first acknowledgement, if any came.
        first_ack_ms: Option<u64>,
        /// The window, milliseconds.
        window_ms: u64,
    },
    /// A replica's batches below the lowest high watermark differ from the others' (or it
    /// is short of it, or damaged there).
    ReplicaDivergence {
        /// The topic.
        topic: String,
        /// The partition.
        partition: Partition,
        /// The diverging replica's node.
        node: u64,
        /// The node the others agree with (`None`: no replica is complete).
        reference_node: Option<u64>,
        /// The offset of the first difference.
        offset: Offset,
        /// This replica's batch there.
        replica: Option<BatchEntry>,
        /// The reference's batch there.
        reference: Option<BatchEntry>,
        /// What differs.
        reason: String,
    },
    /// A node's metadata log differs from the others' at or below the lowest commit index.
    MetadataDivergence {
        /// The diverging node.
        node: u64,
        /// The node the others agree with.
        reference_node: Option<u64>,
        /// The first differing index.
        index: u64,
        /// This node's entry there.
        entry: Option<MetadataEntry>,
        /// The reference's entry there.
        reference: Option<MetadataEntry>,
        /// What differs.
        reason: String,
    },
}

impl Anomaly {
    /// The snake-case name of the variant (as in the JSON form).
    pub fn name(&self) -> &'static str {
        match self {
            Anomaly::Lost { .. } => "lost",
            Anomaly::Duplicate { .. } => "duplicate",
            Anomaly::InconsistentOffset { .. } => "inconsistent_offset",
            Anomaly::AbortedRead { .. } => "aborted_read",
            Anomaly::UnknownValue { .. } => "unknown_value",
            Anomaly::Skip { .. } => "skip",
            Anomaly::NonMonotonicPoll { .. } => "non_monotonic_poll",
            Anomaly::FinalReadGap { .. } => "final_read_gap",
            Anomaly::NonMonotonicSend { .. } => "non_monotonic_send",
            Anomaly::NoRecovery { .. } => "no_recovery",
            Anomaly::ReplicaDivergence { .. } => "replica_divergence",
            Anomaly::MetadataDivergence { .. } => "metadata_divergence",
        }
    }
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offset {} value {} ({})",
            self.offset, self.value, self.source
        )
    }
}

fn opt<T: fmt::Display>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "none".to_string(), |v| v.to_string())
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match self {
            Anomaly::Lost { .. } => fmt_lost(self, f),
            Anomaly::Duplicate {
                partition,
                value,
                at,
            } => write!(f, "partition {partition} value {value} at {}", list(at)),
            Anomaly::InconsistentOffset {
                partition,
                offset,
                values,
            } => write!(
                f,
                "partition {partition} offset {offset} has {}",
                list(values)
            ),
            Anomaly::AbortedRead {
                partition,
                read,
                writer,
                error,
            } => write!(
                f,
                "partition {partition} {read}, but its send by p{writer} failed: {error}"
            ),
            Anomaly::UnknownValue {
                partition,
                read,
                sent_to,
            } => write!(
                f,
                "partition {partition} {read}: never sent here (sent to partition {})",
                opt(sent_to)
            ),
            Anomaly::Skip { .. }
            | Anomaly::NonMonotonicPoll { .. }
            | Anomaly::FinalReadGap { .. }
            | Anomaly::NonMonotonicSend { .. } => fmt_order(self, f),
            Anomaly::NoRecovery { .. }
            | Anomaly::ReplicaDivergence { .. }
            | Anomaly::MetadataDivergence { .. } => fmt_cluster(self, f),
        }
    }
}

/// The `Lost` anomaly's details: where it was acknowledged, and which reads missed it.
fn fmt_lost(anomaly: &Anomaly, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Anomaly::Lost {
        partition,
        value,
        offset,
        writer,
        acked,
        missing_from_final,
        passed_by,
    } = anomaly
    else {
        unreachable!("routed by Anomaly's Display")
    };
    write!(
        f,
        "partition {partition} value {value} offset {} by p{writer} acked {}",
        opt(offset),
        opt(acked)
    )?;
    if let Some(m) = missing_from_final {
        write!(
            f,
            ", missing from the final read by p{} of {}..{}",
            m.process, m.log_start, m.hw
        )?;
    }
    if let Some(p) = passed_by {
        write!(f, ", p{} read {}..={} without it", p.process, p.from, p.to)?;
    }
    Ok(())
}

fn fmt_order(anomaly: &Anomaly, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match anomaly {
        Anomaly::Skip {
            partition,
            process,
            expected,
            next,
            skipped,
            skipped_count,
            at,
        } => write!(
            f,
            "partition {partition} p{process} expected offset {expected}, got {next} at {at}, skipping {skipped_count} known records {skipped:?}"
        ),
        Anomaly::NonMonotonicPoll {
            partition,
            process,
            expected,
            next,
            at,
        } => write!(
            f,
            "partition {partition} p{process} expected offset {expected}, went back to {next} at {at}"
        ),
        Anomaly::FinalReadGap {
            partition,
            process,
            expected,
            found,
            log_start,
            hw,
        } => write!(
            f,
            "partition {partition} final read by p{process} of {log_start}..{hw} expected offset {expected}, found {}",
            opt(found)
        ),
        Anomaly::NonMonotonicSend {
            partition,
            process,
            previous,
            next,
        } => write!(
            f,
            "partition {partition} p{process} op {} (value {}) acked at {} after op {} (value {}) acked at {}",
            next.op, next.value, next.offset, previous.op, previous.value, previous.offset
        ),
        _ => unreachable!("routed by Anomaly's Display"),
    }
}

fn fmt_cluster(anomaly: &Anomaly, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match anomaly {
        Anomaly::NoRecovery {
            fault_id,
            fault,
            partition,
            healed,
            first_ack_ms,
            window_ms,
        } => write!(
            f,
            "partition {partition} after {fault} ({fault_id}) healed at {healed}: first ack after {} ms (window {window_ms} ms)",
            opt(first_ack_ms)
        ),
        Anomaly::ReplicaDivergence {
            topic,
            partition,
            node,
            reference_node,
            offset,
            replica,
            reference,
            reason,
        } => write!(
            f,
            "{topic}-{partition} node {node} vs node {} at offset {offset}: {reason} (replica {}, reference {})",
            opt(reference_node),
            opt(replica),
            opt(reference)
        ),
        Anomaly::MetadataDivergence {
            node,
            reference_node,
            index,
            entry,
            reference,
            reason,
        } => write!(
            f,
            "node {node} vs node {} at index {index}: {reason} (entry {}, reference {})",
            opt(reference_node),
            opt(entry),
            opt(reference)
        ),
        _ => unreachable!("routed by Anomaly's Display"),
    }
}

/// The suite's last line. `skips` counts consumer order anomalies (skips, non-monotonic
/// polls, final-read gaps); `divergent_replicas` one per replica of a partition that
/// diverges; `failover_ms_max` the longest time from a fault's start to the next acknowledged
/// write (invoked after the start) on a partition it affects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// All anomalies.
    pub anomalies: usize,
    /// Acknowledged sends.
    pub acked: usize,
    /// [`Anomaly::Lost`].
    pub lost: usize,
    /// [`Anomaly::Duplicate`].
    pub duplicates: usize,
    /// [`Anomaly::InconsistentOffset`].
    pub inconsistent: usize,
    /// [`Anomaly::Skip`], [`Anomaly::NonMonotonicPoll`], [`Anomaly::FinalReadGap`].
    pub skips: usize,
    /// [`Anomaly::ReplicaDivergence`].
    pub divergent_replicas: usize,
    /// Longest failover, milliseconds (0 without faults).
    pub failover_ms_max: u64,
}

impl Summary {
    /// Counts `anomalies`; `acked` and `failover_ms_max` come from the history.
    pub fn count(anomalies: &[Anomaly], acked: usize, failover_ms_max: u64) -> Summary {
        let of = |names: &[&str]| {
            anomalies
                .iter()
                .filter(|a| names.contains(&a.name()))
                .count()
        };
        Summary {
            anomalies: anomalies.len(),
            acked,
            lost: of(&["lost"]),
            duplicates: of(&["duplicate"]),
            inconsistent: of(&["inconsistent_offset"]),
            skips: of(&["skip", "non_monotonic_poll", "final_read_gap"]),
            divergent_replicas: of(&["replica_divergence"]),
            failover_ms_max,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "anomalies={} acked={} lost={} duplicates={} inconsistent={} skips={} divergent_replicas={} failover_ms_max={}",
            self.anomalies,
            self.acked,
            self.lost,
            self.duplicates,
            self.inconsistent,
            self.skips,
            self.divergent_replicas,
            self.failover_ms_max
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_has_the_suites_exact_form() {
        let summary = Summary {
            anomalies: 3,
            acked: 1000,
            lost: 1,
            duplicates: 1,
            inconsistent: 0,
            skips: 1,
            divergent_replicas: 0,
            failover_ms_max: 1234,
        };
        assert_eq!(
            summary.to_string(),
            "anomalies=3 acked=1000 lost=1 duplicates=1 inconsistent=0 skips=1 divergent_replicas=0 failover_ms_max=1234"
        );
    }
}
