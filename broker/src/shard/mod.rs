//! `Shard`: what one core owns, as private services, and the loop that executes the messages
//! other cores send it.
//!
//! Services: the partitions ([`PartitionTable`]), the cross-core mesh ([`Mesh`]), admission
//! (connections, request memory, listeners), the lifecycle (serving, shutdown), the controller
//! (core 0 only), the group coordinator, and metrics. Every message names the service it is
//! for ([`ShardMessage`]); executing one calls that service. [`route`] holds the operations
//! that span cores (produce, fetch, list offsets, group and controller requests), so handlers
//! only decode, call the shard, and encode.

mod acls;
mod cleaner;
mod observe;
mod replace;
mod route;
mod scram;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use borges_replication::controller::{
    Controller, ControllerCluster, ControllerHost, ControllerRequest, ControllerSettings,
    LocalFuture,
};
use borges_runtime::channel::{CoreReceiver, CoreSenders};
use borges_runtime::{task, time};
use borges_storage::{CoreStorage, DiskState};

pub use route::FetchPlan;

use crate::admission::Admission;
use crate::cluster::ClusterHandle;
use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::groups::coordinator::{Coordinator, GroupMessage};
use crate::lifecycle::{CoreHealth, Lifecycle, LifecycleMessage};
use crate::mesh::{Mesh, MESSAGES_PER_BATCH_MAX};
use crate::metadata::MetadataImage;
use crate::metrics::{CoreMetrics, CoreReport, MetricsSnapshot};
use crate::partition::{PartitionMessage, PartitionTable};
use crate::replicate;
use crate::topic_config;
use crate::types::CoreEndpoint;

/// How long shutdown waits for in-flight requests before closing connections.
const SHUTDOWN_GRACE_MS: u64 = 10_000;

/// A message from one core to another, by the service that executes it.
pub enum ShardMessage {
    /// Appends, reads, long polls, offsets and metadata application.
    Partition(PartitionMessage),
    /// A consumer-group request for the group's coordinator core.
    Group(GroupMessage),
    /// Administrative change for the controller core (core 0).
    Controller(ControllerRequest),
    /// Start-up, metrics and shutdown steps.
    Lifecycle(LifecycleMessage),
    /// ACL changes (for core 0) and new ACLs to install (for every core).
    Acl(crate::acl::store::AclMessage),
}

/// Everything one core owns. Lives on one core; other cores reach it only by message.
pub struct Shard {
    id: usize,
    config: Arc<BrokerConfig>,
    mesh: Mesh<ShardMessage>,
    partitions: Rc<PartitionTable>,
    admission: Rc<Admission>,
    lifecycle: Rc<Lifecycle>,
    controller: Option<Controller>,
    groups: Rc<Coordinator>,
    metrics: Rc<CoreMetrics>,
    /// The cluster member of this process, in cluster mode.
    cluster: std::cell::RefCell<Option<Arc<ClusterHandle>>>,
    /// The process's TLS configurations, when `[tls]` is on.
    tls: std::cell::RefCell<Option<Arc<borges_runtime::tls::TlsContext>>>,
    /// The process's SASL settings and credentials, when `[sasl]` is on.
    sasl: std::cell::RefCell<Option<Arc<crate::sasl::Sasl>>>,
    /// This core's copy of the ACLs and the `[security]` settings (`acls.rs`).
    authorizer: std::cell::RefCell<Rc<crate::acl::Authorizer>>,
    /// Core 0: an ACL change is running (they run one at a time).
    acl_changing: std::cell::Cell<bool>,
    /// The metadata log's ACL generation this core has installed (cluster mode; 0: the
    /// ACLs file's are in force).
    acl_generation: std::cell::Cell<u64>,
    /// Core 0: notified when an ACL change ends.
    acl_changed: borges_runtime::sync::Notify,
}

impl Shard {
    /// Builds core `id`'s services.
    pub fn new(
        id: usize,
        cores: usize,
        config: Arc<BrokerConfig>,
        storage: Rc<CoreStorage>,
    ) -> Rc<Shard> {
        let metrics = Rc::new(CoreMetrics::new(id));
        let observed = metrics.clone();
        storage.observe_syncs(move |elapsed| observed.record_fsync(elapsed));
        let partitions = Rc::new(PartitionTable::new(
            id,
            cores,
            config.clone(),
            storage,
            metrics.clone(),
        ));
        let lifecycle = Rc::new(Lifecycle::default());
        let groups = Rc::new(Coordinator::new(
            id,
            &config.groups,
            partitions.clone(),
            lifecycle.clone(),
        ));
        let authorizer = Rc::new(crate::acl::Authorizer::new(&config.security, Vec::new()));
        Rc::new(Shard {
            id,
            mesh: Mesh::new(id, cores, config.limits.cross_core_queue_depth_max),
            admission: Rc::new(Admission::new(id, cores, &config.limits, metrics.clone())),
            controller: (id == 0).then(|| Controller::new(controller_settings(&config, cores))),
            partitions,
            lifecycle,
            groups,
            metrics,
            config,
            cluster: std::cell::RefCell::new(None),
            tls: std::cell::RefCell::new(None),
            sasl: std::cell::RefCell::new(None),
            authorizer: std::cell::RefCell::new(authorizer),
            acl_changing: std::cell::Cell::new(false),
            acl_generation: std::cell::Cell::new(0),
            acl_changed: borges_runtime::sync::Notify::default(),
        })
    }

    /// Serves the client listeners with TLS from `tls` (set before serving).
    pub fn set_tls(&self, tls: Arc<borges_runtime::tls::TlsContext>) {
        *self.tls.borrow_mut() = Some(tls);
    }

    /// The process's TLS configurations, when TLS is on.
    pub fn tls(&self) -> Option<Arc<borges_runtime::tls::TlsContext>> {
        self.tls.borrow().clone()
    }

    /// Requires SASL authentication on the client listeners (set before serving).
    pub fn set_sasl(&self, sasl: Arc<crate::sasl::Sasl>) {
        *self.sasl.borrow_mut() = Some(sasl);
    }

    /// The process's SASL settings and credentials, when SASL is on.
    pub fn sasl(&self) -> Option<Arc<crate::sasl::Sasl>> {
        self.sasl.borrow().clone()
    }

    /// This core's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.mesh.cores()
    }

    /// Broker configuration (shared, read-only).
    pub fn config(&self) -> &Arc<BrokerConfig> {
        &self.config
    }

    /// The partitions this core owns, and its copy of the metadata image.
    pub fn partitions(&self) -> &Rc<PartitionTable> {
        &self.partitions
    }

    /// Connections, request memory, listeners.
    pub fn admission(&self) -> &Rc<Admission> {
        &self.admission
    }

    /// Serving and shutdown.
    pub fn lifecycle(&self) -> &Rc<Lifecycle> {
        &self.lifecycle
    }

    /// Metrics of this core.
    pub fn metrics(&self) -> &Rc<CoreMetrics> {
        &self.metrics
    }

    /// The outboxes to the other cores.
    pub fn mesh(&self) -> &Mesh<ShardMessage> {
        &self.mesh
    }

    /// This core's copy of the metadata image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.partitions.image()
    }

    /// The cluster member of this process (cluster mode).
    pub fn cluster_handle(&self) -> Option<Arc<ClusterHandle>> {
        self.cluster.borrow().clone()
    }

    /// Cluster mode: this core follows the images the cluster member applies, in revision
    /// order (skipping intermediate ones when it falls behind), and reports how far it got.
    pub fn follow_cluster(self: &Rc<Self>, handle: Arc<ClusterHandle>) {
        *self.cluster.borrow_mut() = Some(handle.clone());
        let (table, lifecycle) = (self.partitions.clone(), self.lifecycle.clone());
        task::spawn(replicate::run_isr_outbox(
            table.clone(),
            handle.clone(),
            lifecycle.clone(),
        ))
        .detach();
        let lag_ms = self.config.cluster.replica_lag_time_max_ms;
        task::spawn(replicate::run_isr_checks(table, lifecycle, lag_ms)).detach();
        let shard = self.clone();
        task::spawn(async move {
            let mut images = handle.images();
            loop {
                let image = images.borrow_and_update().clone();
                if image.revision > shard.image().revision {
                    if let Err(e) = shard.apply_metadata(image).await {
                        tracing::error!(core = shard.id, "applying metadata failed: {e}");
                    }
                }
                handle.set_applied(shard.id, shard.image().revision);
                if shard.lifecycle.is_shutting_down() || images.changed().await.is_err() {
                    return;
                }
            }
        })
        .detach();
    }

    /// Starts the tasks of this core: outbox drains, one per inbox, partition maintenance.
    pub fn start(
        self: &Rc<Self>,
        senders: &Rc<CoreSenders<Vec<ShardMessage>>>,
        receivers: Vec<CoreReceiver<Vec<ShardMessage>>>,
    ) {
        self.mesh.start(senders);
        for inbox in receivers {
            task::spawn(self.clone().run_inbox(inbox)).detach();
        }
        task::spawn(self.clone().tick_partitions()).detach();
        task::spawn(self.clone().run_cleaner()).detach();
    }

    /// Executes the batches of messages coming from one other core, in order.
    async fn run_inbox(self: Rc<Self>, inbox: CoreReceiver<Vec<ShardMessage>>) {
        while let Some(batch) = inbox.recv().await {
            // The other side of `Outbox::run`: whole, bounded, non-empty batches.
            strict_assert!(!batch.is_empty() && batch.len() <= MESSAGES_PER_BATCH_MAX);
            borges_runtime::executor::note_activity();
            for msg in batch {
                self.execute(msg).await;
            }
        }
    }

    /// Executes a message from another core. The ordered part (appends) happens before this
    /// returns; waiting happens in tasks of its own.
    async fn execute(self: &Rc<Self>, msg: ShardMessage) {
        match msg {
            ShardMessage::Partition(msg) => self.execute_partition(msg).await,
            ShardMessage::Group(GroupMessage { request, reply }) => {
                let groups = self.groups.clone();
                task::spawn(async move {
                    let _ = reply.send(groups.execute(request).await);
                })
                .detach();
            }
            ShardMessage::Controller(request) => {
                let shard = self.clone();
                task::spawn(async move { shard.run_controller(request).await }).detach();
            }
            ShardMessage::Lifecycle(msg) => self.execute_lifecycle(msg).await,
            ShardMessage::Acl(msg) => self.execute_acl(msg).await,
        }
    }

    async fn execute_partition(self: &Rc<Self>, msg: PartitionMessage) {
        let partitions = self.partitions.clone();
        match msg {
            PartitionMessage::Append {
                items,
                acks,
                timeout_ms,
                reply,
            } => {
                let completion = partitions.append_all(items, acks, timeout_ms).await;
                task::spawn(async move {
                    let _ = reply.send(completion.await);
                })
                .detach();
            }
            PartitionMessage::Read { items, copy, reply } => task::spawn(async move {
                let _ = reply.send(partitions.read_all(&items, copy).await);
            })
            .detach(),
            PartitionMessage::WaitForData {
                items,
                deadline,
                reply,
            } => task::spawn(async move {
                partitions.wait_for_data(&items, deadline).await;
                let _ = reply.send(());
            })
            .detach(),
            PartitionMessage::EpochEnds { items, reply } => {
                let _ = reply.send(partitions.epoch_ends(&items));
            }
            PartitionMessage::ListOffsets { items, reply } => task::spawn(async move {
                let _ = reply.send(partitions.list_offsets(&items).await);
            })
            .detach(),
            PartitionMessage::ApplyMetadata { image, reply } => {
                let _ = reply.send(self.apply_metadata(image).await);
            }
        }
    }

    async fn execute_lifecycle(self: &Rc<Self>, msg: LifecycleMessage) {
        match msg {
            LifecycleMessage::Bind { reply } => {
                let _ = reply.send(self.bind());
            }
            LifecycleMessage::Serve { endpoints, reply } => {
                self.serve(endpoints);
                let _ = reply.send(());
            }
            LifecycleMessage::Metrics { reply } => {
                let _ = reply.send(self.snapshot());
            }
            LifecycleMessage::Health { reply } => {
                let _ = reply.send(self.health());
            }
            LifecycleMessage::Shutdown { reply } => {
                let _ = reply.send(self.shutdown().await);
            }
        }
    }

    /// Runs a controller request on this core (core 0).
    async fn run_controller(self: &Rc<Self>, request: ControllerRequest) {
        match &self.controller {
            Some(controller) => controller.execute(&**self, request).await,
            // The request's reply is dropped: the caller gets a typed failure.
            None => tracing::error!(
                core = self.id,
                "controller request sent to a core without the controller"
            ),
        }
    }

    /// Cluster mode (core 0): registers this broker with every core's endpoint and waits until
    /// every core has applied the metadata log up to the registration (so it serves only
    /// once caught up); heartbeats then unfence it.
    pub async fn join_cluster(
        self: &Rc<Self>,
        endpoints: &[CoreEndpoint],
    ) -> Result<(), BrokerError> {
        let Some(cluster) = self.cluster_handle() else {
            return Ok(());
        };
        let host = crate::cluster::advertised_host(&self.config);
        let registration = crate::cluster::registration(&self.config, host, endpoints);
        let epoch = cluster.register(registration).await?;
        tracing::info!(epoch, "registered with the cluster");
        if !cluster.wait_applied(epoch, cluster.request_timeout()).await {
            return Err(BrokerError::Config(format!(
                "the cores did not apply the metadata log up to the registration ({epoch}) \
                 within {:?}",
                cluster.request_timeout()
            )));
        }
        // Serve once the controller unfenced this broker (its heartbeat says it caught up).
        let deadline = std::time::Instant::now() + cluster.request_timeout();
        loop {
            let image = cluster.latest();
            let running = image.brokers.get(&cluster.node_id).is_some_and(|b| {
                b.epoch == epoch && b.state == crate::metadata::BrokerState::Running
            });
            if running {
                break;
            }
            let repairing = cluster.repairing();
            if repairing > 0 {
                // Fenced on purpose until its replicas are repaired (`partition::repair`):
                // they fetch from their leaders meanwhile; heartbeats unfence it after.
                tracing::warn!(
                    repairing,
                    "serving fenced while replicas are repaired from their leaders"
                );
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(BrokerError::Config(format!(
                    "not unfenced by the active controller within {:?}",
                    cluster.request_timeout()
                )));
            }
            time::sleep(Duration::from_millis(5)).await;
        }
        self.ensure_offsets_topic();
        Ok(())
    }

    /// Cluster mode (core 0): creates `__consumer_offsets` once enough brokers run; retries
    /// every second until it exists.
    pub fn ensure_offsets_topic(self: &Rc<Self>) {
        let shard = self.clone();
        task::spawn(async move {
            while !shard.lifecycle.is_shutting_down() {
                let Some(controller) = &shard.controller else {
                    return;
                };
                if controller.ensure_offsets_topic(&*shard).await {
                    return;
                }
                time::sleep(Duration::from_secs(1)).await;
            }
        })
        .detach();
    }

    /// Loads the metadata store and pushes it to every core (core 0, at start-up).
    pub async fn load_metadata(self: &Rc<Self>) -> Result<(), BrokerError> {
        match &self.controller {
            Some(controller) => controller.load(&**self).await,
            None => Err(BrokerError::Config(format!(
                "core {} has no controller; core 0 loads the metadata",
                self.id
            ))),
        }
    }

    /// Brings this core in line with `image`: its partitions, then the consumer groups whose
    /// offsets partitions it now owns.
    pub async fn apply_metadata(&self, image: Arc<MetadataImage>) -> Result<(), BrokerError> {
        self.install_cluster_acls(&image);
        self.install_cluster_credentials(&image);
        self.partitions.apply(image).await?;
        if self.config.cluster.enabled() {
            let cluster = self.cluster_handle();
            if let Some(handle) = &cluster {
                // Before this core reports the image applied: a broker repairing a replica
                // must never look unfenceable-ready in a heartbeat.
                handle.set_repairing(self.id, self.partitions.repairing());
            }
            replicate::start_fetchers(&replicate::FetchContext {
                table: self.partitions.clone(),
                lifecycle: self.lifecycle.clone(),
                broker_id: self.config.broker_id,
                settings: self.config.cluster.clone(),
                tls: self.tls(),
                sasl: self.sasl(),
                metrics: self.metrics().clone(),
                cluster,
            });
        }
        self.groups.load().await?;
        self.groups.forget_deleted_topics().await;
        Ok(())
    }

    /// Binds this core's listeners; returns its own address.
    pub fn bind(&self) -> Result<std::net::SocketAddr, BrokerError> {
        self.admission
            .bind(&self.config.listen, self.config.core_port_base)
    }

    /// Every core's address is known: lets this core accept connections.
    pub fn serve(&self, endpoints: Arc<Vec<CoreEndpoint>>) {
        self.admission.set_endpoints(endpoints);
        self.lifecycle.start_serving();
    }

    /// A metrics snapshot of this core.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let storage = self.partitions.storage();
        self.metrics.snapshot(CoreReport {
            connections: self.admission.connections(),
            unflushed_bytes: storage.unflushed_bytes(),
            tail_cache_bytes: storage.tail_cache_bytes(),
            open_descriptors: storage.open_descriptors(),
            log_dir: storage.data_dir().display().to_string(),
            log_dir_state: storage.disk_state().name(),
            request_memory_available_bytes: self.admission.request_memory_available_bytes(),
            partitions: self.partitions.all().iter().map(|p| p.stats()).collect(),
            group_offsets: self.groups.committed(),
        })
    }

    /// This core's health, for `/healthz` and `/readyz`.
    pub fn health(&self) -> CoreHealth {
        let state = self.partitions.storage().disk_state();
        let reason = match &state {
            DiskState::Writable => None,
            DiskState::ReadOnly { out_of_space, .. } => Some(if *out_of_space {
                "the disk is full".to_string()
            } else {
                "free space is below storage.disk_free_bytes_min".to_string()
            }),
            DiskState::Failed { reason } => Some(reason.clone()),
        };
        CoreHealth {
            core: self.id,
            log_dir_state: state.name(),
            log_dir_reason: reason,
            serving: self.lifecycle.serving().generation() > 0,
            shutting_down: self.lifecycle.is_shutting_down(),
        }
    }

    /// Stops this core: no new connections or requests, in-flight requests finish (up to a
    /// grace period), then every partition log is flushed, synced and closed with its
    /// clean-shutdown marker.
    pub async fn shutdown(&self) -> Result<(), BrokerError> {
        self.lifecycle.start_shutdown();
        let grace = Duration::from_millis(SHUTDOWN_GRACE_MS);
        if time::timeout(grace, self.admission.drained())
            .await
            .is_none()
        {
            tracing::warn!(
                core = self.id,
                connections = self.admission.connections(),
                "connections still open after the grace period; closing logs anyway"
            );
        }
        let mut errors = Vec::new();
        for p in self.partitions.all() {
            if let Err(cause) = p.close().await {
                errors.push(BrokerError::Partition {
                    action: "closing",
                    partition: p.id().to_string(),
                    cause,
                });
            }
        }
        self.lifecycle.mark_stopped();
        BrokerError::from_many(errors).map_or(Ok(()), Err)
    }

    /// Ticks every partition of this core: segment rolls by time, retention, checkpoints.
    async fn tick_partitions(self: Rc<Self>) {
        let s = &self.config.storage;
        let period = s
            .retention_check_interval_ms
            .min(s.recovery_checkpoint_interval_ms)
            .max(10);
        let mut quarantines_checked = i64::MIN;
        loop {
            time::sleep(Duration::from_millis(period)).await;
            if self.lifecycle.is_shutting_down() {
                return;
            }
            let now = time::now_ms();
            let interval = s.retention_check_interval_ms as i64;
            if self.id == 0 && now.saturating_sub(quarantines_checked) >= interval {
                quarantines_checked = now;
                let (dir, keep) = (&self.config.data_dir, s.quarantine_retention_ms);
                crate::partition::repair::remove_expired_quarantines(dir, now, keep).await;
            }
            for p in self.partitions.all() {
                if let Err(e) = p.tick(now).await {
                    let (topic, partition) = (&p.id().topic, p.id().partition);
                    tracing::error!(%topic, partition, "log maintenance failed: {e}");
                }
                task::yield_now().await;
            }
        }
    }
}

impl ControllerHost for Shard {
    type Error = BrokerError;

    fn publish(&self, image: Arc<MetadataImage>) -> LocalFuture<'_, Result<(), BrokerError>> {
        Box::pin(async move {
            let remote = image.clone();
            self.mesh
                .on_every_core(self.apply_metadata(image), |reply| {
                    ShardMessage::Partition(PartitionMessage::ApplyMetadata {
                        image: remote.clone(),
                        reply,
                    })
                })
                .await
        })
    }

    fn check_topic_configs(&self, configs: &BTreeMap<String, String>) -> Result<(), String> {
        topic_config::validate(configs, &self.config).map_err(|e| e.to_string())
    }

    fn is_topic_config(&self, key: &str) -> bool {
        topic_config::doc(key).is_some()
    }

    fn cluster(&self) -> Option<Arc<dyn ControllerCluster>> {
        self.cluster_handle()
            .map(|h| h as Arc<dyn ControllerCluster>)
    }
}

fn controller_settings(config: &BrokerConfig, cores: usize) -> ControllerSettings {
    ControllerSettings {
        data_dir: config.data_dir.clone(),
        cores: cores as u16,
        topics_max: config.limits.topics_max,
        partitions_per_topic_max: config.limits.partitions_per_topic_max,
        default_partitions: config.log.num_partitions,
        offsets_topic_partitions: config.groups.offsets_topic_partitions,
    }
}

/// Cluster mode, on SIGTERM: asks the active controller to move this broker's leadership away
/// (controlled shutdown) and waits until every core applied that, up to
/// `controlled_shutdown_timeout_ms`.
pub async fn controlled_shutdown(cluster: &ClusterHandle) {
    let timeout = Duration::from_millis(cluster.settings.controlled_shutdown_timeout_ms);
    let asked = time::timeout(timeout, cluster.controlled_shutdown()).await;
    match asked {
        Some(Ok(())) => {
            let revision = cluster.latest().revision;
            if cluster.wait_applied(revision, timeout).await {
                tracing::info!("controlled shutdown: leadership moved away");
            }
        }
        Some(Err(f)) => tracing::warn!("controlled shutdown refused: {f}"),
        None => tracing::warn!(
            ?timeout,
            "controlled shutdown: no answer from the controller"
        ),
    }
}
