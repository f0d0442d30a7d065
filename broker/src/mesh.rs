//! The cross-core mesh: outboxes that batch messages to the other cores, generic over the
//! message type.
//!
//! Every message for another core goes through that core's [`Outbox`] on the sending core: a
//! bounded local queue drained by one task that sends whole batches over the bounded cross-core
//! channel. A full queue makes the sender wait (backpressure that ends in the connection not
//! being read); nothing is dropped. Messages from one core to another arrive in the order they
//! were queued, which keeps produce order per connection and partition.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;

use borges_protocol::ErrorCode;
use borges_runtime::channel::CoreSenders;
use borges_runtime::sync::Notify;
use borges_runtime::task;
use futures_channel::oneshot;

use crate::error::BrokerError;
use crate::failure::Failure;

/// Messages per cross-core batch.
pub const MESSAGES_PER_BATCH_MAX: usize = 256;

/// One core's outboxes to every other core. Lives on that core.
pub struct Mesh<M: Send + 'static> {
    core: usize,
    outboxes: Vec<Option<Rc<Outbox<M>>>>,
}

impl<M: Send + 'static> Mesh<M> {
    /// Outboxes from core `core` to each of `cores` cores, each holding at most
    /// `queue_depth_max` messages.
    pub fn new(core: usize, cores: usize, queue_depth_max: usize) -> Mesh<M> {
        let outboxes = (0..cores)
            .map(|to| (to != core).then(|| Outbox::new(to, queue_depth_max)))
            .collect();
        Mesh { core, outboxes }
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.outboxes.len()
    }

    /// Starts the tasks that drain the outboxes into `senders`.
    pub fn start(&self, senders: &Rc<CoreSenders<Vec<M>>>) {
        for outbox in self.outboxes.iter().flatten() {
            task::spawn(outbox.clone().run(senders.clone())).detach();
        }
    }

    /// Stops the drain tasks once their queues are empty.
    pub fn close(&self) {
        for outbox in self.outboxes.iter().flatten() {
            outbox.close();
        }
    }

    /// Queues a message for core `to` (waits while that outbox is full).
    pub async fn send(&self, to: usize, msg: M) {
        strict_assert!(
            to != self.core && to < self.cores(),
            "core {} sends to core {to} of {}",
            self.core,
            self.cores()
        );
        match self.outboxes.get(to).and_then(|o| o.as_ref()) {
            Some(outbox) => outbox.push(msg).await,
            None => tracing::error!(
                core = self.core,
                to,
                "message to self or unknown core dropped"
            ),
        }
    }

    /// Sends a message to core `to` built around a reply channel, and waits for the reply.
    pub async fn ask<R>(
        &self,
        to: usize,
        make: impl FnOnce(oneshot::Sender<R>) -> M,
    ) -> Result<R, Failure> {
        let (tx, rx) = oneshot::channel();
        self.send(to, make(tx)).await;
        await_reply(rx).await
    }

    /// Runs an operation on every core at once: `local` here, and the message built by `remote`
    /// on every other core. Waits for all of them; the errors of every core, in core order.
    pub async fn on_every_core(
        &self,
        local: impl Future<Output = Result<(), BrokerError>>,
        remote: impl Fn(oneshot::Sender<Result<(), BrokerError>>) -> M,
    ) -> Result<(), BrokerError> {
        let mut asks = Vec::new();
        for to in (0..self.cores()).filter(|&to| to != self.core) {
            let (tx, rx) = oneshot::channel();
            self.send(to, remote(tx)).await;
            asks.push(task::spawn(async move {
                await_reply(rx)
                    .await
                    .map_err(BrokerError::from)
                    .and_then(|r| r)
            }));
        }
        let mut errors = Vec::new();
        if let Err(e) = local.await {
            errors.push(e);
        }
        for a in asks {
            if let Err(e) = a.await {
                errors.push(e);
            }
        }
        BrokerError::from_many(errors).map_or(Ok(()), Err)
    }
}

/// The queue of messages to one other core, drained in batches by one task. Lives on the
/// sending core.
pub struct Outbox<M> {
    to: usize,
    queue: RefCell<VecDeque<M>>,
    capacity: usize,
    pushed: Notify,
    drained: Notify,
    closed: Cell<bool>,
}

impl<M: Send + 'static> Outbox<M> {
    /// An outbox towards core `to` holding at most `capacity` messages.
    pub fn new(to: usize, capacity: usize) -> Rc<Outbox<M>> {
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
    pub async fn push(&self, msg: M) {
        loop {
            let seen = self.drained.generation();
            if self.queue.borrow().len() < self.capacity {
                break;
            }
            self.drained.changed_since(seen).await;
        }
        self.queue.borrow_mut().push_back(msg);
        strict_assert!(self.queue.borrow().len() <= self.capacity);
        self.pushed.notify_all();
    }

    /// Stops the drain task after the queue empties.
    pub fn close(&self) {
        self.closed.set(true);
        self.pushed.notify_all();
    }

    /// Drains the queue into the channel in batches until closed.
    pub async fn run(self: Rc<Self>, senders: Rc<CoreSenders<Vec<M>>>) {
        loop {
            let seen = self.pushed.generation();
            let batch: Vec<M> = {
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
            strict_assert!(batch.len() <= MESSAGES_PER_BATCH_MAX);
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
