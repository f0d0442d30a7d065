//! Plain values every layer of the broker passes around: partition names, acknowledgement
//! levels, response payload chunks, core addresses. A leaf module: it names no other broker
//! module except [`crate::failure`].

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_storage::AckLevel;
use bytes::Bytes;

use crate::failure::Failure;

/// A topic partition addressed by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionRef {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: u32,
}

impl std::fmt::Display for PartitionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What a producer waits for (`acks` on the wire: 0, 1 or -1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no response at all.
    None,
    /// `acks=1`: the leader wrote the batches (flushed).
    Leader,
    /// `acks=all` (-1): durable per the topic's durability policy, and (with replication)
    /// replicated to the in-sync replicas.
    All,
}

impl Acks {
    /// Reads the wire value.
    pub fn from_wire(acks: i16) -> Result<Acks, Failure> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            _ => Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!("acks = {acks}: expected 0, 1 or -1 (all)"),
            )),
        }
    }

    /// The storage acknowledgement to wait for; `None` for `acks=0`.
    pub fn ack_level(self) -> Option<AckLevel> {
        match self {
            Acks::None => None,
            Acks::Leader => Some(AckLevel::Leader),
            Acks::All => Some(AckLevel::All),
        }
    }

    /// Whether the producer gets a response.
    pub fn responds(self) -> bool {
        self != Acks::None
    }
}

/// Part of a response payload; can cross cores.
pub enum SendChunk {
    /// Bytes in memory (the recent tail, or the copy path).
    Memory(Bytes),
    /// A range of a segment file, sent with sendfile.
    File {
        /// A descriptor of the segment (page cache, not O_DIRECT).
        fd: Arc<OwnedFd>,
        /// Start of the range.
        position: u64,
        /// Length of the range.
        length: u64,
    },
}

impl SendChunk {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            SendChunk::Memory(b) => b.len() as u64,
            SendChunk::File { length, .. } => *length,
        }
    }
}

/// Bound addresses of a core.
#[derive(Debug, Clone)]
pub struct CoreEndpoint {
    /// Core index.
    pub core: u16,
    /// Its own listener.
    pub addr: SocketAddr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_accept_exactly_the_three_wire_values() {
        assert_eq!(Acks::from_wire(0), Ok(Acks::None));
        assert_eq!(Acks::from_wire(1), Ok(Acks::Leader));
        assert_eq!(Acks::from_wire(-1), Ok(Acks::All));
        for bad in [2, -2, i16::MIN, i16::MAX] {
            assert_eq!(
                Acks::from_wire(bad).map_err(|f| f.code),
                Err(ErrorCode::InvalidRequest)
            );
        }
        assert!(!Acks::None.responds() && Acks::Leader.responds());
        assert_eq!(Acks::All.ack_level(), Some(AckLevel::All));
        assert_eq!(Acks::None.ack_level(), None);
    }
}
