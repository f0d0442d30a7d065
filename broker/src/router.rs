//! Cross-core messages and the outboxes that batch them.
//!
//! Every message for another core goes through that core's [`Outbox`] on the sending core: a
//! bounded local queue drained by one task that sends whole batches over the bounded cross-core
//! channel. A full queue makes the sender wait (backpressure that ends in the connection not
//! being read); nothing is dropped. Messages from one core to another arrive in the order they
//! were queued, which keeps produce order per connection and partition.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use borges_protocol::ErrorCode;
use borges_runtime::channel::CoreSenders;
use borges_runtime::sync::Notify;
use futures_channel::oneshot;

use crate::controller::ControllerRequest;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metadata::MetadataImage;
use crate::metrics::MetricsSnapshot;
use crate::partition::{AppendItem, FetchItem, FetchOutcome, ListOffsetsItem, ProduceAck};
use crate::types::{Acks, CoreEndpoint, PartitionRef};

/// Messages per cross-core batch.
pub const MESSAGES_PER_BATCH_MAX: usize = 256;

/// A message from one core to another.
pub enum CoreMessage {
    /// Append to partitions owned by the receiving core.
    Produce {
        /// Partitions and their batches.
        items: Vec<AppendItem>,
        /// What the producer waits for.
        acks: Acks,
        /// Time allowed for acknowledgements.
        timeout_ms: u32,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<Result<ProduceAck, Failure>>>,
    },
    /// Read from partitions owned by the receiving core.
    Fetch {
        /// Partitions to read.
        items: Vec<FetchItem>,
        /// Read into memory instead of returning file ranges.
        copy: bool,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<FetchOutcome>>,
    },
    /// Resolve when any partition's high watermark passes its offset, or at the deadline.
    WaitForData {
        /// (partition, offset) pairs.
        items: Vec<(PartitionRef, i64)>,
        /// When to give up.
        deadline: Instant,
        /// Resolved when data arrived or the deadline passed.
        reply: oneshot::Sender<()>,
    },
    /// Offsets by time.
    ListOffsets {
        /// Partitions and timestamps.
        items: Vec<ListOffsetsItem>,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<Result<(i64, i64), Failure>>>,
    },
    /// A consumer-group request for the group's coordinator core.
    Group {
        /// The request.
        request: crate::groups::coordinator::GroupRequest,
        /// The answer.
        reply: oneshot::Sender<crate::groups::coordinator::GroupResponse>,
    },
    /// Administrative change for the controller core (core 0).
    Controller(ControllerRequest),
    /// A new metadata image: open, close or reconfigure the partitions this core owns.
    ApplyMetadata {
        /// The image.
        image: Arc<MetadataImage>,
        /// Ok once every partition of this core is ready.
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
    /// Bind this core's listeners; reply with the per-core address.
    Bind {
        /// The bound per-core address.
        reply: oneshot::Sender<Result<SocketAddr, BrokerError>>,
    },
    /// Every core's address is known: start accepting connections.
    Serve {
        /// Per-core endpoints, by core.
        endpoints: Arc<Vec<CoreEndpoint>>,
        /// Resolved once accepting.
        reply: oneshot::Sender<()>,
    },
    /// Report metrics.
    Metrics {
        /// The snapshot.
        reply: oneshot::Sender<MetricsSnapshot>,
    },
    /// Stop accepting, finish in-flight requests, close partition logs cleanly.
    Shutdown {
        /// Resolved once this core is done.
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
}

/// The queue of messages to one other core, drained in batches by one task. Lives on the
/// sending core.
pub struct Outbox {
    to: usize,
    queue: RefCell<VecDeque<CoreMessage>>,
    capacity: usize,
    pushed: Notify,
    drained: Notify,
    closed: Cell<bool>,
}

impl Outbox {
    /// An outbox towards core `to` holding at most `capacity` messages.
    pub fn new(to: usize, capacity: usize) -> Rc<Outbox> {
        Rc::new(Outbox {
            to,
            queue: RefCell::new(VecDeque::new()),
            capacity: capacity.max(1),
            pushed: Notify::default(),
            drained: Notify::default(),
            closed: Cell::new(false),
        })
    }

    /// Queues a message, waiting while the queue is full.
    pub async fn push(&self, msg: CoreMessage) {
        loop {
            let seen = self.drained.generation();
            if self.queue.borrow().len() < self.capacity {
                break;
            }
            self.drained.changed_since(seen).await;
        }
        self.queue.borrow_mut().push_back(msg);
        self.pushed.notify_all();
    }

    /// Stops the drain task after the queue empties.
    pub fn close(&self) {
        self.closed.set(true);
        self.pushed.notify_all();
    }

    /// Drains the queue into the channel in batches until closed.
    pub async fn run(self: Rc<Self>, senders: Rc<CoreSenders<Vec<CoreMessage>>>) {
        loop {
            let seen = self.pushed.generation();
            let batch: Vec<CoreMessage> = {
                let mut q = self.queue.borrow_mut();
                let n = q.len().min(MESSAGES_PER_BATCH_MAX);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                if self.closed.get() {
                    return;
                }
                self.pushed.changed_since(seen).await;
                continue;
            }
            self.drained.notify_all();
            if senders.send_to(self.to, batch).await.is_err() {
                tracing::warn!(to = self.to, "core unreachable; dropping its outbox");
                return;
            }
        }
    }
}

/// Receives the reply of a message sent to another core; a dropped reply (the core stopped)
/// becomes a typed failure.
pub async fn await_reply<R>(rx: oneshot::Receiver<R>) -> Result<R, Failure> {
    rx.await.map_err(|_| {
        Failure::new(
            ErrorCode::ShuttingDown,
            "the core owning this partition stopped before answering",
        )
    })
}
