//! The server: checks the machine, starts one executor per core, brings the cores up in order
//! (metadata, partitions, listeners, serving), and shuts them down cleanly on SIGTERM/SIGINT.
//!
//! Shard 0 orchestrates start-up and shutdown over the same cross-core messages the data path
//! uses, so there is one way for cores to talk to each other.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::ErrorCode;
use borges_runtime::channel::{self, MeshEndpoints};
use borges_runtime::executor::{self, ExecutorConfig};
use borges_runtime::net::TcpListener;
use borges_runtime::tls::TlsContext;
use borges_runtime::{task, time};
use borges_storage::{CoreStorage, StorageConfig};

use crate::admission::core_port;
use crate::config::BrokerConfig;
use crate::descriptors::DescriptorPlan;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::lifecycle::LifecycleMessage;
use crate::shard::{Shard, ShardMessage};
use crate::types::CoreEndpoint;

/// How often core 0 checks for a shutdown signal.
const SIGNAL_POLL_MS: u64 = 50;

/// Flags shared by every core (read-only except for the signal handler).
struct Shared {
    config: Arc<BrokerConfig>,
    /// Set by SIGTERM/SIGINT.
    shutdown: Arc<AtomicBool>,
    /// Set when start-up failed; every core exits.
    fatal: AtomicBool,
    /// The cluster member's handle (cluster mode).
    cluster: Option<Arc<crate::cluster::ClusterHandle>>,
    /// TLS configurations (`[tls]` on).
    tls: Option<Arc<TlsContext>>,
    /// Set by SIGHUP: re-read the TLS files and the SASL credentials.
    reload: Arc<AtomicBool>,
    /// SASL settings and credentials (`[sasl]` on).
    sasl: Option<Arc<crate::sasl::Sasl>>,
    /// The ACLs read at start-up, with the `[security]` settings.
    authorizer: Arc<crate::acl::Authorizer>,
}

/// Starts the broker and blocks until it has shut down.
pub fn run(mut config: BrokerConfig) -> Result<(), BrokerError> {
    crate::metrics::mark_start();
    check_io_uring()?;
    // glommio opens files relative to no directory (dirfd -1), so relative paths fail with
    // EBADF deep inside the storage engine; resolve the data directory once here.
    config.data_dir = std::path::absolute(&config.data_dir).map_err(|e| BrokerError::Io {
        context: format!("resolving data directory {}", config.data_dir.display()),
        cause: e,
    })?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| BrokerError::Io {
        context: format!("creating data directory {}", config.data_dir.display()),
        cause: e,
    })?;
    let _lock = lock_data_dir(&config)?;
    let (files_before, files_after) = executor::raise_open_files_limit();
    let cpus = executor::plan_cpus(config.cores)?;
    let cores = cpus.len();
    plan_descriptors(&mut config, (files_before, files_after), cores)?;
    check_addresses_free(&config, cores)?;
    let tls = match config.tls.paths() {
        Some(paths) => Some(Arc::new(TlsContext::load(paths)?)),
        None => None,
    };
    let (sasl, authorizer) = (load_sasl(&config)?, load_acls(&config)?);
    let cluster = crate::cluster::prepare(&config, cores, tls.clone())?;
    let (shutdown, reload) = install_signal_handlers()?;
    let shared = Arc::new(Shared {
        config: Arc::new(config),
        shutdown,
        fatal: AtomicBool::new(false),
        cluster: cluster.as_ref().map(|c| c.handle.clone()),
        tls,
        reload,
        sasl,
        authorizer,
    });
    let runtime = &shared.config.runtime;
    let exec = ExecutorConfig {
        cores,
        io_memory_bytes: runtime.io_memory_bytes,
        preempt_timer_ms: runtime.preempt_timer_ms,
        spin_before_park_us: runtime.spin_before_park_us,
        stall_guard_us: runtime.stall_guard_us,
        stall_guard_idle_us: runtime.stall_guard_idle_us,
        ..ExecutorConfig::default()
    };
    let mut ends: Vec<Option<MeshEndpoints<Vec<ShardMessage>>>> =
        channel::mesh(cores, shared.config.limits.cross_core_queue_depth_max)
            .into_iter()
            .map(Some)
            .collect();
    let started = {
        let shared = shared.clone();
        executor::start(
            &exec,
            |core, _| ends[core].take(),
            move |id, end| {
                let shared = shared.clone();
                async move { core_main(id, end, shared).await }
            },
        )?
    };
    let cpus: Vec<String> = started.cpus.iter().map(ToString::to_string).collect();
    tracing::info!(
        "starting: {cores} cores on CPUs {}, data directory {}; {}",
        cpus.join(","),
        shared.config.data_dir.display(),
        started.locked_memory
    );
    let mut errors = Vec::new();
    let watched = shared.clone();
    let results = started.join_watching(|| watched.fatal.store(true, Ordering::SeqCst));
    crate::cluster::join(cluster);
    for (core, result) in results.into_iter().enumerate() {
        let error = match result {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => BrokerError::Runtime(e),
        };
        errors.push(BrokerError::Core {
            core,
            cause: Box::new(error),
        });
    }
    match BrokerError::from_many(errors) {
        None => {
            tracing::info!("stopped cleanly");
            Ok(())
        }
        Some(e) => Err(e),
    }
}

/// The SASL settings and credentials, when `[sasl]` is on.
fn load_sasl(config: &BrokerConfig) -> Result<Option<Arc<crate::sasl::Sasl>>, BrokerError> {
    if !config.sasl.enabled() {
        return Ok(None);
    }
    let sasl = crate::sasl::Sasl::load(&config.sasl, &config.data_dir)
        .map_err(|e| BrokerError::Config(format!("SASL credentials: {e}")))?;
    tracing::info!(
        "SASL: {} credentials in {}",
        sasl.users(),
        sasl.path().display()
    );
    Ok(Some(Arc::new(sasl)))
}

/// The ACLs file (`security.acls_file`) and the `[security]` settings.
fn load_acls(config: &BrokerConfig) -> Result<Arc<crate::acl::Authorizer>, BrokerError> {
    let security = &config.security;
    let path = security.acls_path(&config.data_dir);
    let acls = crate::acl::file::read(&path, security.acls_max as usize)
        .map_err(|e| BrokerError::Config(format!("ACLs: {e}")))?;
    if security.authorizer_enabled {
        tracing::info!(
            "authorizer on: {} ACLs in {}, {} super users",
            acls.len(),
            path.display(),
            security.super_users.len()
        );
    }
    Ok(Arc::new(crate::acl::Authorizer::new(security, acls)))
}

/// SIGTERM and SIGINT set the first flag returned (a second signal while shutting down exits
/// at once); SIGHUP sets the second (re-read the TLS files).
fn install_signal_handlers() -> Result<(Arc<AtomicBool>, Arc<AtomicBool>), BrokerError> {
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone()).map_err(|e| {
        BrokerError::Io {
            context: "installing signal handlers".into(),
            cause: e,
        }
    })?;
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, shutdown.clone()).map_err(
            |e| BrokerError::Io {
                context: "installing signal handlers".into(),
                cause: e,
            },
        )?;
        signal_hook::flag::register(signal, shutdown.clone()).map_err(|e| BrokerError::Io {
            context: "installing signal handlers".into(),
            cause: e,
        })?;
    }
    Ok((shutdown, reload))
}

/// Re-reads the TLS files after a SIGHUP; new connections get the new certificates,
/// established ones keep their sessions. A failure keeps the previous files in force.
async fn reload_tls(shared: &Shared) {
    let Some(tls) = shared.tls.clone() else {
        tracing::info!("SIGHUP: TLS is off, nothing to reload");
        return;
    };
    match task::spawn_blocking(move || tls.reload().map(|()| tls.reloads())).await {
        Ok(n) => tracing::info!("SIGHUP: TLS certificates reloaded (reload {n})"),
        Err(e) => tracing::error!("SIGHUP: TLS reload failed, the previous certificates stay: {e}"),
    }
}

/// Re-reads the inter-broker password file after a SIGHUP: follower fetches use the new
/// password from their next connection on. A file that cannot be used keeps the old one.
async fn reload_inter_broker(shared: &Shared) {
    let Some(sasl) = shared.sasl.clone() else {
        return;
    };
    match task::spawn_blocking(move || sasl.reload_inter_broker()).await {
        Ok(true) => tracing::info!("SIGHUP: inter-broker password reloaded"),
        Ok(false) => {}
        Err(e) => tracing::error!(
            "SIGHUP: inter-broker password reload failed, the previous password stays: {e}"
        ),
    }
}

/// How often core 0 checks whether the SASL credentials file changed.
const CREDENTIALS_CHECK_INTERVAL_MS: u64 = 1_000;

/// Re-reads the SASL credentials file: always (`forced`, SIGHUP), or when its modification
/// time changed. A file that cannot be read keeps the credentials in force.
async fn reload_credentials(shared: &Shared, forced: bool) {
    let Some(sasl) = shared.sasl.clone() else {
        return;
    };
    let reloaded = task::spawn_blocking(move || match forced {
        true => Some(sasl.reload()),
        false => sasl.reload_if_changed(),
    })
    .await;
    match reloaded {
        None => {}
        Some(Ok(n)) => tracing::info!("SASL credentials reloaded: {n} credentials"),
        Some(Err(e)) => {
            tracing::error!("SASL credentials reload failed, the previous ones stay: {e}")
        }
    }
}

/// How long start-up waits for the main address to become free: the listening sockets of a
/// broker killed a moment ago live on until the kernel has torn down its io_uring rings.
const LISTEN_ADDRESS_WAIT_MS_MAX: u64 = 3000;

/// Checks that nobody listens on the addresses this broker is about to bind. Every core binds
/// the main address with SO_REUSEPORT, which would otherwise let this broker silently share a
/// port with another one (and take half of its connections). Addresses still held by a broker
/// killed a moment ago are waited for, up to [`LISTEN_ADDRESS_WAIT_MS_MAX`].
fn check_addresses_free(config: &BrokerConfig, cores: usize) -> Result<(), BrokerError> {
    let Ok(listen) = config.listen.parse::<SocketAddr>() else {
        return Ok(()); // validate() reports it
    };
    let mut addresses = vec![("listen", listen)];
    for core in 0..cores {
        if let Some(port) = core_port(listen, config.core_port_base, core) {
            addresses.push(("per-core port", SocketAddr::new(listen.ip(), port)));
        }
    }
    if let Ok(metrics) = config.metrics_listen.parse::<SocketAddr>() {
        addresses.push(("metrics_listen", metrics));
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(LISTEN_ADDRESS_WAIT_MS_MAX);
    for (what, address) in addresses.into_iter().filter(|(_, a)| a.port() != 0) {
        loop {
            match TcpListener::probe_free(address) {
                Ok(()) => break,
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(cause) => {
                    return Err(BrokerError::AddressInUse {
                        address,
                        what,
                        cause,
                    })
                }
            }
        }
    }
    Ok(())
}

fn check_io_uring() -> Result<(), BrokerError> {
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        Ok(v) if v.trim() == "2" => Err(BrokerError::Unsupported(
            "io_uring is disabled on this machine (sysctl kernel.io_uring_disabled = 2); Borges needs it: set it to 0".into(),
        )),
        _ => Ok(()),
    }
}

/// Takes an exclusive lock on the data directory so that two brokers never share it.
fn lock_data_dir(config: &BrokerConfig) -> Result<File, BrokerError> {
    let path = config.data_dir.join(".lock");
    let file = File::create(&path).map_err(|e| BrokerError::Io {
        context: format!("creating {}", path.display()),
        cause: e,
    })?;
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(BrokerError::DataDirInUse {
            dir: config.data_dir.clone(),
            lock: path,
        });
    }
    Ok(file)
}

/// Shares the descriptor limit out (see `descriptors`), says so, and lowers
/// `limits.connections_max` (and the log's budget, when even that does not fit) to the plan.
fn plan_descriptors(
    config: &mut BrokerConfig,
    limit: (u64, u64),
    cores: usize,
) -> Result<(), BrokerError> {
    let plan = DescriptorPlan::new(
        limit,
        cores,
        config.limits.connections_max,
        &storage_config(config),
    )?;
    if plan.connections_max < plan.connections_max_configured {
        tracing::warn!("{plan}");
    } else {
        tracing::info!("{plan}");
    }
    config.limits.connections_max = plan.connections_max;
    (
        config.storage.open_files_max,
        config.storage.open_writers_max,
    ) = plan.storage;
    Ok(())
}

fn storage_config(config: &BrokerConfig) -> StorageConfig {
    let s = &config.storage;
    StorageConfig {
        write_buffer_bytes_max: s.write_buffer_bytes_max,
        tail_cache_bytes_max: s.tail_cache_bytes_max,
        open_files_max: s.open_files_max,
        open_writers_max: s.open_writers_max,
        disk_free_bytes_min: s.disk_free_bytes_min,
        disk_probe_interval_ms: s.disk_probe_interval_ms,
        recovery_checkpoint_interval_ms: s.recovery_checkpoint_interval_ms,
        recovery_checkpoints_per_s_max: s.recovery_checkpoints_per_s_max,
        ..StorageConfig::default()
    }
}

async fn core_main(
    id: usize,
    end: Option<MeshEndpoints<Vec<ShardMessage>>>,
    shared: Arc<Shared>,
) -> Result<(), BrokerError> {
    let Some(end) = end else {
        return Err(BrokerError::StartupAborted);
    };
    let connected = end
        .connect_or_abort(|| shared.fatal.load(Ordering::SeqCst))
        .await;
    let Some((senders, receivers)) = connected else {
        return Err(BrokerError::StartupAborted);
    };
    tracing::debug!(core = id, "cross-core channels connected");
    let senders = Rc::new(senders);
    let config = shared.config.clone();
    let storage = match CoreStorage::new(&config.data_dir, storage_config(&config)).await {
        Ok(s) => s,
        Err(e) => {
            shared.fatal.store(true, Ordering::SeqCst);
            return Err(e.into());
        }
    };
    tracing::debug!(core = id, "storage ready");
    let shard = Shard::new(id, senders.cores(), config, storage);
    if let Some(tls) = &shared.tls {
        shard.set_tls(tls.clone());
    }
    if let Some(sasl) = &shared.sasl {
        shard.set_sasl(sasl.clone());
    }
    shard.install_acls(&shared.authorizer);
    if let Some(cluster) = &shared.cluster {
        shard.follow_cluster(cluster.clone());
    }
    shard.start(&senders, receivers);
    task::spawn(accept_when_serving(shard.clone())).detach();
    let result = if id == 0 {
        let r = orchestrate(&shard, &shared).await;
        if r.is_err() {
            shared.fatal.store(true, Ordering::SeqCst);
        }
        r
    } else {
        wait_until_stopped(&shard, &shared).await;
        Ok(())
    };
    shard.mesh().close();
    senders.close();
    result
}

/// Core 0: start-up, serving until a signal, shutdown.
async fn orchestrate(shard: &Rc<Shard>, shared: &Shared) -> Result<(), BrokerError> {
    let startup = start_all(shard).await;
    if let Err(e) = &startup {
        tracing::error!("start-up failed: {e}");
    } else {
        let mut credentials_checked = time::Instant::now();
        while !shared.shutdown.load(Ordering::SeqCst) && !shared.fatal.load(Ordering::SeqCst) {
            if shared.reload.swap(false, Ordering::SeqCst) {
                reload_tls(shared).await;
                reload_credentials(shared, true).await;
                reload_inter_broker(shared).await;
            }
            if credentials_checked.elapsed() >= Duration::from_millis(CREDENTIALS_CHECK_INTERVAL_MS)
            {
                credentials_checked = time::Instant::now();
                reload_credentials(shared, false).await;
            }
            time::sleep(Duration::from_millis(SIGNAL_POLL_MS)).await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
    }
    if let (Some(cluster), true) = (&shared.cluster, startup.is_ok()) {
        crate::shard::controlled_shutdown(cluster).await;
    }
    let stopped = shutdown_all(shard).await;
    if let Some(cluster) = &shared.cluster {
        cluster.stop().await;
    }
    startup.and(stopped)
}

/// Core 0: loads the metadata and opens every core's partitions, binds every core's
/// listeners, then lets every core serve.
async fn start_all(shard: &Rc<Shard>) -> Result<(), BrokerError> {
    // First, so that /healthz and /readyz answer while partitions recover.
    let metrics_addr = crate::endpoint::start(shard)?;
    shard.load_metadata().await?;
    log_partitions_opened(shard).await;
    let mut endpoints = Vec::with_capacity(shard.cores());
    for to in 0..shard.cores() {
        let addr = if to == shard.id() {
            shard.bind()?
        } else {
            let bind = |reply| ShardMessage::Lifecycle(LifecycleMessage::Bind { reply });
            shard.mesh().ask(to, bind).await??
        };
        endpoints.push(CoreEndpoint {
            core: to as u16,
            addr,
        });
    }
    shard.join_cluster(&endpoints).await?;
    let endpoints = Arc::new(endpoints);
    for to in 0..shard.cores() {
        if to == shard.id() {
            shard.serve(endpoints.clone());
        } else {
            let endpoints = endpoints.clone();
            let serve =
                |reply| ShardMessage::Lifecycle(LifecycleMessage::Serve { endpoints, reply });
            shard.mesh().ask(to, serve).await?;
        }
    }
    write_ready_file(shard, &endpoints, metrics_addr).await?;
    let cores: Vec<String> = endpoints.iter().map(|e| e.addr.to_string()).collect();
    let metrics = metrics_addr.map_or("off".to_string(), |a| format!("http://{a}/metrics"));
    let tls = match (&shard.config().tls, shard.tls().is_some()) {
        (t, true) if t.client_ca_file.is_some() => "TLS with client certificates (mTLS)",
        (_, true) => "TLS",
        _ => "plaintext",
    };
    tracing::info!(
        "serving: listen {}, per-core ports {}, metrics {metrics}; {tls}",
        shard.config().listen,
        cores.join(",")
    );
    Ok(())
}

/// One line for every partition opened (the per-partition lines are at debug level).
async fn log_partitions_opened(shard: &Rc<Shard>) {
    let snapshots = shard.gather_metrics().await;
    let partitions: usize = snapshots.iter().map(|s| s.partitions.len()).sum();
    let size_bytes: u64 = snapshots
        .iter()
        .flat_map(|s| &s.partitions)
        .map(|p| p.size_bytes)
        .sum();
    tracing::info!(
        "opened {partitions} partitions on {} cores (topics: {}, logs: {} MiB)",
        shard.cores(),
        shard.image().topics.len(),
        size_bytes / (1 << 20)
    );
}

async fn wait_until_stopped(shard: &Rc<Shard>, shared: &Shared) {
    let stopped = shard.lifecycle().stopped();
    loop {
        let seen = stopped.generation();
        if seen > 0 || shared.fatal.load(Ordering::SeqCst) {
            return;
        }
        time::timeout(Duration::from_millis(100), stopped.changed_since(seen)).await;
    }
}

/// Once the shard may serve, accepts connections on its listeners.
async fn accept_when_serving(shard: Rc<Shard>) {
    let serving = shard.lifecycle().serving();
    if serving.generation() == 0 {
        serving.changed_since(0).await;
    }
    for listener in shard.admission().take_listeners() {
        task::spawn(accept_loop(shard.clone(), listener)).detach();
    }
}

async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    let lifecycle = shard.lifecycle().clone();
    // A descriptor kept free, so that a connection can be accepted (and refused with a typed
    // error) even when the process is out of descriptors.
    let mut spare = spare_descriptor();
    let mut refuse_next = false;
    loop {
        let seen = lifecycle.shutdown().generation();
        if lifecycle.is_shutting_down() {
            return;
        }
        let accepted = futures_lite::future::or(
            async {
                shard.admission().refusal_slot().await;
                Some(listener.accept().await)
            },
            async {
                lifecycle.shutdown().changed_since(seen).await;
                None
            },
        )
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) if refuse_next => {
                refuse_next = false;
                let refusal = Failure::new(
                    ErrorCode::TooManyConnections,
                    "the broker is out of file descriptors (RLIMIT_NOFILE); retry later",
                );
                task::spawn(crate::connection::refuse(shard.clone(), stream, refusal)).detach();
                spare = spare_descriptor();
            }
            Some(Ok(stream)) => {
                task::spawn(crate::connection::serve(shard.clone(), stream)).detach();
            }
            Some(Err(e)) if is_out_of_descriptors(&e) => {
                let errors = &shard.metrics().accept_descriptor_errors;
                errors.set(errors.get() + 1);
                if errors.get().is_power_of_two() {
                    tracing::warn!(
                        core = shard.id(),
                        "accept: {e} ({} times so far); refusing connections with \
                         TooManyConnections",
                        errors.get()
                    );
                }
                // Free the spare: the next accept gets a descriptor and refuses its connection.
                refuse_next = spare.take().is_some();
                if !refuse_next {
                    time::sleep(Duration::from_millis(10)).await;
                    spare = spare_descriptor();
                }
            }
            Some(Err(e)) => {
                tracing::warn!(core = shard.id(), "accept failed: {e}");
                time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// A descriptor held in reserve (on /dev/null), if one can be had.
fn spare_descriptor() -> Option<File> {
    File::open("/dev/null").ok()
}

/// EMFILE or ENFILE: the process or the system is out of file descriptors (transient).
pub fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

async fn shutdown_all(shard: &Rc<Shard>) -> Result<(), BrokerError> {
    let shutdown = |reply| ShardMessage::Lifecycle(LifecycleMessage::Shutdown { reply });
    shard.mesh().on_every_core(shard.shutdown(), shutdown).await
}

async fn write_ready_file(
    shard: &Rc<Shard>,
    endpoints: &[CoreEndpoint],
    metrics: Option<SocketAddr>,
) -> Result<(), BrokerError> {
    let Some(path) = shard.config().ready_file.clone() else {
        return Ok(());
    };
    let body = serde_json::json!({
        "pid": std::process::id(),
        "listen": shard.config().listen,
        "cores": endpoints.iter().map(|e| serde_json::json!({"core": e.core, "addr": e.addr.to_string()})).collect::<Vec<_>>(),
        "metrics": metrics.map(|a| a.to_string()),
    });
    task::spawn_blocking(move || {
        borges_runtime::fs::write_atomic(&path, body.to_string().as_bytes())
    })
    .await
    .map_err(|source| BrokerError::Io {
        context: "writing the ready file".into(),
        cause: source,
    })
}
