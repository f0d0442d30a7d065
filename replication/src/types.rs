//! The Raft type configuration, generic over the replicated state machine.
//!
//! [`StateMachine`] is the seam where the cluster metadata image plugs in: the Raft node
//! replicates its commands, applies committed ones in log order on every member, and snapshots
//! it as bytes. Everything about consensus stays in openraft; everything about what the
//! commands mean stays in the state machine.

use std::fmt::Debug;
use std::io::Cursor;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::rt::GlommioRuntime;

/// Node ids: the broker's `node.id`.
pub type NodeId = u64;

/// What the cluster knows of a member: its controller-link address (`host:port`).
pub type Node = openraft::BasicNode;

/// A replicated state machine. It lives on the Raft node's executor and is touched only there.
pub trait StateMachine: Default + 'static {
    /// A change, replicated through the log (serde-encoded on disk and on the wire).
    type Command: Serialize + DeserializeOwned + Clone + Debug + 'static;
    /// What applying a command answers to the writer. `Default` is the answer for log entries
    /// that carry no command (blank entries of a new leader, membership changes).
    type Reply: Serialize + DeserializeOwned + Clone + Debug + Default + 'static;

    /// Applies a committed command. `index` and `term` are the entry's Raft log position (the
    /// index is unique and increasing: Kafka's broker epoch is the registration's offset).
    fn apply(&mut self, index: u64, term: u64, command: &Self::Command) -> Self::Reply;

    /// The whole state as bytes, for a snapshot.
    fn encode(&self) -> Result<Vec<u8>, String>;

    /// The state from [`StateMachine::encode`]'s bytes; an error for bytes it did not write.
    fn decode(bytes: &[u8]) -> Result<Self, String>;
}

/// openraft's type configuration for a state machine `S` on [`GlommioRuntime`].
pub struct TypeConfig<S>(PhantomData<fn() -> S>);

impl<S> Debug for TypeConfig<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TypeConfig")
    }
}

impl<S> Clone for TypeConfig<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for TypeConfig<S> {}

impl<S> Default for TypeConfig<S> {
    fn default() -> Self {
        TypeConfig(PhantomData)
    }
}

impl<S> PartialEq for TypeConfig<S> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<S> Eq for TypeConfig<S> {}

impl<S> PartialOrd for TypeConfig<S> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<S> Ord for TypeConfig<S> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<S: StateMachine> openraft::RaftTypeConfig for TypeConfig<S> {
    type D = S::Command;
    type R = S::Reply;
    type NodeId = NodeId;
    type Node = Node;
    type Entry = openraft::Entry<TypeConfig<S>>;
    type SnapshotData = Cursor<Vec<u8>>;
    type AsyncRuntime = GlommioRuntime;
    type Responder = openraft::raft::responder::OneshotResponder<TypeConfig<S>>;
}

/// A log entry.
pub type Entry<S> = openraft::Entry<TypeConfig<S>>;
/// A log position: term (with `single-term-leader`, one leader per term) and index.
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// A storage error as openraft wants it.
pub type StorageError = openraft::StorageError<NodeId>;
/// Membership as stored with the state.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// Raft metrics.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;
/// The Raft handle of a state machine `S`.
pub type Raft<S> = openraft::Raft<TypeConfig<S>>;
