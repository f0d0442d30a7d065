//! One core of the broker: its partitions, its copy of the metadata, its outboxes to the other
//! cores, and the loop that executes messages from them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use borges_runtime::channel::{CoreReceiver, CoreSenders};
use borges_runtime::net::TcpListener;
use borges_runtime::sync::{Notify, Semaphore};
use borges_runtime::task;
use borges_storage::CoreStorage;
use futures_channel::oneshot;

use crate::config::BrokerConfig;
use crate::controller::Controller;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metadata::MetadataImage;
use crate::metrics::{CoreMetrics, CoreReport, MetricsSnapshot};
use crate::partition::PartitionTable;
use crate::router::{CoreMessage, Outbox};
use crate::types::CoreEndpoint;

/// Everything one core owns. Lives on one core; other cores reach it only by message.
pub struct Core {
    /// This core's index.
    pub id: usize,
    /// Number of cores.
    pub cores: usize,
    /// Broker configuration (shared, read-only).
    pub config: Arc<BrokerConfig>,
    /// The partitions this core owns, and its copy of the metadata.
    pub partitions: Rc<PartitionTable>,
    /// Outboxes to the other cores (`None` at this core's index).
    pub outboxes: Vec<Option<Rc<Outbox>>>,
    /// Metrics of this core.
    pub metrics: Rc<CoreMetrics>,
    /// Every core's own address, known once all cores are bound.
    pub endpoints: RefCell<Arc<Vec<CoreEndpoint>>>,
    /// Bytes of request frames in flight on this core.
    pub request_memory: Rc<Semaphore>,
    /// Open connections on this core.
    pub connections: Cell<u32>,
    /// Connections this core accepts at most.
    pub connections_max: u32,
    /// Set when shutdown starts; connections stop reading new requests.
    pub shutting_down: Cell<bool>,
    /// Bumped once, when shutdown starts.
    pub shutdown: Notify,
    /// Bumped whenever a connection closes.
    pub connection_closed: Notify,
    /// Listeners, bound by `Bind`, taken by `Serve`.
    pub listeners: RefCell<Vec<TcpListener>>,
    /// The controller (core 0 only).
    pub controller: Option<Controller>,
    /// Resolved once this core finished shutting down.
    pub stopped: Notify,
    /// The consumer groups this core coordinates.
    pub groups: crate::groups::coordinator::Coordinator,
}

impl Core {
    /// Builds the core's state.
    pub fn new(
        id: usize,
        config: Arc<BrokerConfig>,
        storage: Rc<CoreStorage>,
        senders: &CoreSenders<Vec<CoreMessage>>,
    ) -> Rc<Core> {
        let cores = senders.cores();
        let outboxes = (0..cores)
            .map(|to| (to != id).then(|| Outbox::new(to, config.limits.cross_core_queue_depth_max)))
            .collect();
        let connections_max = config.limits.connections_max.div_ceil(cores as u32).max(1);
        let metrics = Rc::new(CoreMetrics::new(id));
        let partitions = Rc::new(PartitionTable::new(
            id,
            cores,
            config.clone(),
            storage,
            metrics.clone(),
        ));
        Rc::new(Core {
            id,
            cores,
            partitions,
            outboxes,
            metrics,
            endpoints: RefCell::new(Arc::new(Vec::new())),
            request_memory: Rc::new(Semaphore::new(
                config.limits.request_memory_bytes_max_per_core,
            )),
            connections: Cell::new(0),
            connections_max,
            shutting_down: Cell::new(false),
            shutdown: Notify::default(),
            connection_closed: Notify::default(),
            listeners: RefCell::new(Vec::new()),
            controller: (id == 0).then(Controller::new),
            stopped: Notify::default(),
            groups: crate::groups::coordinator::Coordinator::new(&config.groups),
            config,
        })
    }

    /// Queues a message for core `to` (waits while that outbox is full).
    pub async fn send(&self, to: usize, msg: CoreMessage) {
        match self.outboxes.get(to).and_then(|o| o.as_ref()) {
            Some(outbox) => outbox.push(msg).await,
            None => tracing::error!(
                core = self.id,
                to,
                "message to self or unknown core dropped"
            ),
        }
    }

    /// Sends a message to core `to` built around a reply channel, and waits for the reply.
    pub async fn ask<R>(
        &self,
        to: usize,
        make: impl FnOnce(oneshot::Sender<R>) -> CoreMessage,
    ) -> Result<R, Failure> {
        let (tx, rx) = oneshot::channel();
        self.send(to, make(tx)).await;
        crate::router::await_reply(rx).await
    }

    /// Runs an operation on every core at once: `local` here, and the message built by `remote`
    /// on every other core. Waits for all of them; the errors of every core, in core order.
    pub async fn on_every_core(
        self: &Rc<Self>,
        local: impl std::future::Future<Output = Result<(), BrokerError>>,
        remote: impl Fn(oneshot::Sender<Result<(), BrokerError>>) -> CoreMessage,
    ) -> Result<(), BrokerError> {
        let mut asks = Vec::new();
        for to in (0..self.cores).filter(|&to| to != self.id) {
            let (tx, rx) = oneshot::channel();
            self.send(to, remote(tx)).await;
            asks.push(task::spawn(async move {
                crate::router::await_reply(rx)
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

    /// This core's copy of the metadata image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.partitions.image()
    }

    /// Brings this core in line with `image`: its partitions, then the consumer groups whose
    /// offsets partitions it now owns.
    pub async fn apply_metadata(
        self: &Rc<Self>,
        image: Arc<MetadataImage>,
    ) -> Result<(), BrokerError> {
        self.partitions.apply(image).await?;
        crate::groups::coordinator::load(self).await
    }

    /// A metrics snapshot of this core.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let storage = self.partitions.storage();
        self.metrics.snapshot(CoreReport {
            connections: self.connections.get(),
            unflushed_bytes: storage.unflushed_bytes(),
            tail_cache_bytes: storage.tail_cache_bytes(),
            request_memory_available_bytes: self.request_memory.available(),
            partitions: self.partitions.all().iter().map(|p| p.stats()).collect(),
            group_offsets: self.groups.committed(),
        })
    }
}

/// Runs one inbox: executes the batches of messages coming from one other core, in order.
pub async fn run_inbox(core: Rc<Core>, inbox: CoreReceiver<Vec<CoreMessage>>) {
    while let Some(batch) = inbox.recv().await {
        borges_runtime::executor::note_activity();
        for msg in batch {
            crate::dispatch::execute(&core, msg).await;
        }
    }
}
