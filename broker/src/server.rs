//! The server: checks the machine, starts one executor per core, brings the cores up in order
//! (metadata, partitions, listeners, serving), and shuts them down cleanly on SIGTERM/SIGINT.
//!
//! Core 0 orchestrates start-up and shutdown over the same cross-core messages the data path
//! uses, so there is one way for cores to talk to each other.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use borges_runtime::channel::{self, MeshEndpoints};
use borges_runtime::executor::{self, ExecutorConfig};
use borges_runtime::net::{TcpListener, TcpStream};
use borges_runtime::{task, time};
use borges_storage::{CoreStorage, StorageConfig};

use crate::config::BrokerConfig;
use crate::core::{self, Core};
use crate::error::BrokerError;
use crate::router::CoreMessage;
use crate::types::CoreEndpoint;

/// How long shutdown waits for in-flight requests before closing connections.
const SHUTDOWN_GRACE_MS: u64 = 10_000;
/// How often core 0 checks for a shutdown signal.
const SIGNAL_POLL_MS: u64 = 50;

/// Flags shared by every core (read-only except for the signal handler).
struct Shared {
    config: Arc<BrokerConfig>,
    /// Set by SIGTERM/SIGINT.
    shutdown: Arc<AtomicBool>,
    /// Set when start-up failed; every core exits.
    fatal: AtomicBool,
}

/// Starts the broker and blocks until it has shut down.
pub fn run(mut config: BrokerConfig) -> Result<(), BrokerError> {
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
    check_addresses_free(&config, cores)?;
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second signal while shutting down exits at once.
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
    let shared = Arc::new(Shared {
        config: Arc::new(config),
        shutdown,
        fatal: AtomicBool::new(false),
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
    let mut ends: Vec<Option<MeshEndpoints<Vec<CoreMessage>>>> =
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
    tracing::info!(
        cores,
        cpus = ?started.cpus,
        data_dir = %shared.config.data_dir.display(),
        open_files_max = files_after,
        "starting: {} (RLIMIT_NOFILE {files_before} -> {files_after})",
        started.locked_memory
    );
    let mut errors = Vec::new();
    let watched = shared.clone();
    let results = started.join_watching(|| watched.fatal.store(true, Ordering::SeqCst));
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
                Err(e) => {
                    return Err(BrokerError::Config(format!(
                        "cannot listen on {address} ({what}): {e} (another broker or program listens there)"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Core `core`'s own port: `core_port_base + core`, or the listen port + 1 + core when unset;
/// `Some(0)` lets the system choose; `None` when it overflows.
fn core_port(listen: SocketAddr, core_port_base: Option<u16>, core: usize) -> Option<u16> {
    let core = u16::try_from(core).ok()?;
    match core_port_base {
        None => listen.port().checked_add(1)?.checked_add(core),
        Some(0) => Some(0),
        Some(base) => base.checked_add(core),
    }
}

fn check_io_uring() -> Result<(), BrokerError> {
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        Ok(v) if v.trim() == "2" => Err(BrokerError::Config(
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
        return Err(BrokerError::Config(format!(
            "data directory {} is in use by another broker (cannot lock {})",
            config.data_dir.display(),
            path.display()
        )));
    }
    Ok(file)
}

fn storage_config(config: &BrokerConfig) -> StorageConfig {
    let s = &config.storage;
    StorageConfig {
        write_buffer_bytes_max: s.write_buffer_bytes_max,
        tail_cache_bytes_max: s.tail_cache_bytes_max,
        open_files_max: s.open_files_max,
        recovery_checkpoint_interval_ms: s.recovery_checkpoint_interval_ms,
        recovery_checkpoints_per_s_max: s.recovery_checkpoints_per_s_max,
        ..StorageConfig::default()
    }
}

async fn core_main(
    id: usize,
    end: Option<MeshEndpoints<Vec<CoreMessage>>>,
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
    let core = Core::new(id, config, storage, &senders);
    for outbox in core.outboxes.iter().flatten() {
        task::spawn(outbox.clone().run(senders.clone())).detach();
    }
    for inbox in receivers {
        task::spawn(core::run_inbox(core.clone(), inbox)).detach();
    }
    task::spawn(tick_logs(core.clone())).detach();
    let result = if id == 0 {
        let r = orchestrate(&core, &shared).await;
        if r.is_err() {
            shared.fatal.store(true, Ordering::SeqCst);
        }
        r
    } else {
        wait_until_stopped(&core, &shared).await;
        Ok(())
    };
    for outbox in core.outboxes.iter().flatten() {
        outbox.close();
    }
    senders.close();
    result
}

/// Core 0: start-up, serving until a signal, shutdown.
async fn orchestrate(core: &Rc<Core>, shared: &Shared) -> Result<(), BrokerError> {
    let startup = start_all(core).await;
    if let Err(e) = &startup {
        tracing::error!("start-up failed: {e}");
    } else {
        while !shared.shutdown.load(Ordering::SeqCst) && !shared.fatal.load(Ordering::SeqCst) {
            time::sleep(Duration::from_millis(SIGNAL_POLL_MS)).await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
    }
    let stopped = shutdown_all(core).await;
    startup.and(stopped)
}

async fn start_all(core: &Rc<Core>) -> Result<(), BrokerError> {
    crate::controller::load(core).await?;
    let mut endpoints = Vec::with_capacity(core.cores);
    for to in 0..core.cores {
        let addr = if to == core.id {
            bind(core)?
        } else {
            core.ask(to, |reply| CoreMessage::Bind { reply }).await??
        };
        endpoints.push(CoreEndpoint {
            core: to as u16,
            addr,
        });
    }
    let endpoints = Arc::new(endpoints);
    for to in 0..core.cores {
        if to == core.id {
            serve(core, endpoints.clone());
        } else {
            let endpoints = endpoints.clone();
            core.ask(to, |reply| CoreMessage::Serve { endpoints, reply })
                .await?;
        }
    }
    let metrics_addr = start_metrics(core)?;
    write_ready_file(core, &endpoints, metrics_addr).await?;
    tracing::info!(
        listen = %core.config.listen,
        cores = ?endpoints.iter().map(|e| e.addr.to_string()).collect::<Vec<_>>(),
        metrics = ?metrics_addr.map(|a| a.to_string()),
        "serving"
    );
    Ok(())
}

async fn wait_until_stopped(core: &Rc<Core>, shared: &Shared) {
    loop {
        let seen = core.stopped.generation();
        if seen > 0 || shared.fatal.load(Ordering::SeqCst) {
            return;
        }
        time::timeout(Duration::from_millis(100), core.stopped.changed_since(seen)).await;
    }
}

/// Binds this core's listeners (the shared main address and its own port); returns its own
/// address.
pub fn bind(core: &Rc<Core>) -> Result<SocketAddr, BrokerError> {
    let listen: SocketAddr = core
        .config
        .listen
        .parse()
        .map_err(|e| BrokerError::Config(format!("listen {:?}: {e}", core.config.listen)))?;
    let main = TcpListener::bind(listen).map_err(|source| BrokerError::Io {
        context: format!("binding {listen}"),
        cause: source,
    })?;
    let port = core_port(listen, core.config.core_port_base, core.id)
        .ok_or_else(|| BrokerError::Config("per-core port overflows 65535".into()))?;
    let own_addr = SocketAddr::new(listen.ip(), port);
    let own = TcpListener::bind_exclusive(own_addr).map_err(|source| BrokerError::Io {
        context: format!("binding core port {own_addr} (core {} of the per-core ports; set core_port_base to move them)", core.id),
        cause: source,
    })?;
    let bound = own.local_addr().map_err(|source| BrokerError::Io {
        context: format!("reading the address of {own_addr}"),
        cause: source,
    })?;
    *core.listeners.borrow_mut() = vec![main, own];
    Ok(bound)
}

/// Starts accepting connections on this core's listeners.
pub fn serve(core: &Rc<Core>, endpoints: Arc<Vec<CoreEndpoint>>) {
    *core.endpoints.borrow_mut() = endpoints;
    for listener in core.listeners.borrow_mut().drain(..) {
        task::spawn(accept_loop(core.clone(), listener)).detach();
    }
}

async fn accept_loop(core: Rc<Core>, listener: TcpListener) {
    loop {
        let seen = core.shutdown.generation();
        if core.shutting_down.get() {
            return;
        }
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            core.shutdown.changed_since(seen).await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) => {
                task::spawn(crate::connection::serve(core.clone(), stream)).detach();
            }
            Some(Err(e)) => {
                tracing::warn!(core = core.id, "accept failed: {e}");
                time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Ticks every partition log of a core: segment rolls by time, retention, checkpoints.
async fn tick_logs(core: Rc<Core>) {
    let s = &core.config.storage;
    let period = s
        .retention_check_interval_ms
        .min(s.recovery_checkpoint_interval_ms)
        .max(10);
    loop {
        time::sleep(Duration::from_millis(period)).await;
        if core.shutting_down.get() {
            return;
        }
        let now = time::now_ms();
        for p in core.partitions.all() {
            if let Err(e) = p.tick(now).await {
                tracing::error!(topic = %p.id().topic, partition = p.id().partition, "log maintenance failed: {e}");
            }
            task::yield_now().await;
        }
    }
}

async fn shutdown_all(core: &Rc<Core>) -> Result<(), BrokerError> {
    core.on_every_core(shutdown_core(core), |reply| CoreMessage::Shutdown { reply })
        .await
}

/// Stops this core: no new connections or requests, in-flight requests finish (up to a grace
/// period), then every partition log is flushed, synced and closed with its clean-shutdown
/// marker.
pub async fn shutdown_core(core: &Rc<Core>) -> Result<(), BrokerError> {
    core.shutting_down.set(true);
    core.shutdown.notify_all();
    let grace = Duration::from_millis(SHUTDOWN_GRACE_MS);
    let drained = time::timeout(grace, async {
        loop {
            let seen = core.connection_closed.generation();
            if core.connections.get() == 0 {
                return;
            }
            core.connection_closed.changed_since(seen).await;
        }
    })
    .await;
    if drained.is_none() {
        tracing::warn!(
            core = core.id,
            connections = core.connections.get(),
            "connections still open after the grace period; closing logs anyway"
        );
    }
    let mut errors = Vec::new();
    for p in core.partitions.all() {
        if let Err(source) = p.close().await {
            errors.push(BrokerError::Partition {
                action: "closing",
                partition: p.id().to_string(),
                cause: source,
            });
        }
    }
    core.stopped.notify_all();
    BrokerError::from_many(errors).map_or(Ok(()), Err)
}

async fn write_ready_file(
    core: &Rc<Core>,
    endpoints: &[CoreEndpoint],
    metrics: Option<SocketAddr>,
) -> Result<(), BrokerError> {
    let Some(path) = core.config.ready_file.clone() else {
        return Ok(());
    };
    let body = serde_json::json!({
        "pid": std::process::id(),
        "listen": core.config.listen,
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

/// Serves the Prometheus endpoint on core 0.
fn start_metrics(core: &Rc<Core>) -> Result<Option<SocketAddr>, BrokerError> {
    if core.config.metrics_listen.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = core
        .config
        .metrics_listen
        .parse()
        .map_err(|e| BrokerError::Config(format!("metrics_listen: {e}")))?;
    let listener = TcpListener::bind_exclusive(addr).map_err(|source| BrokerError::Io {
        context: format!("binding metrics_listen {addr}"),
        cause: source,
    })?;
    let bound = listener.local_addr().map_err(|source| BrokerError::Io {
        context: format!("reading the address of {addr}"),
        cause: source,
    })?;
    let core = core.clone();
    task::spawn(async move {
        loop {
            let seen = core.shutdown.generation();
            if core.shutting_down.get() {
                return;
            }
            let accepted =
                futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    core.shutdown.changed_since(seen).await;
                    None
                })
                .await;
            if let Some(Ok(stream)) = accepted {
                task::spawn(serve_metrics(core.clone(), stream)).detach();
            }
        }
    })
    .detach();
    Ok(Some(bound))
}

/// Requests larger than this are not HTTP requests we answer.
const METRICS_REQUEST_BYTES_MAX: usize = 8192;

async fn serve_metrics(core: Rc<Core>, mut stream: TcpStream) {
    let mut buf = vec![0u8; METRICS_REQUEST_BYTES_MAX];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == buf.len() {
            return;
        }
        match time::timeout(Duration::from_secs(5), stream.read(&mut buf[len..])).await {
            Some(Ok(n)) if n > 0 => len += n,
            _ => return,
        }
    }
    let request = String::from_utf8_lossy(&buf[..len]);
    let path = request.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match path {
        "/metrics" => ("200 OK", gather_metrics(&core).await),
        "/healthz" => ("200 OK", "ok\n".to_string()),
        _ => ("404 Not Found", "not found; try /metrics\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn gather_metrics(core: &Rc<Core>) -> String {
    let mut snapshots = Vec::with_capacity(core.cores);
    for to in 0..core.cores {
        if to == core.id {
            snapshots.push(core.snapshot());
        } else if let Ok(s) = core.ask(to, |reply| CoreMessage::Metrics { reply }).await {
            snapshots.push(s);
        }
    }
    crate::metrics::render(&snapshots)
}
