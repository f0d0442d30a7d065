//! Admission on one core: its listeners and every core's address, the connection count
//! against `connections_max`, and the request memory that bounds frames in flight.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_runtime::net::TcpListener;
use borges_runtime::sync::Notify;

use crate::config::LimitsConfig;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metrics::CoreMetrics;
use crate::request_memory::RequestMemory;
use crate::types::CoreEndpoint;

/// Connections, request memory and listeners of one core. Lives on that core.
pub struct Admission {
    core: usize,
    connections: Cell<u32>,
    connections_max: u32,
    /// Bytes of request frames being read or served on this core.
    request_memory: Rc<RequestMemory>,
    /// Bumped whenever a connection closes.
    connection_closed: Notify,
    /// Refused connections being answered and closed.
    refusals: Cell<u32>,
    /// Bumped whenever a refusal ends.
    refusal_ended: Notify,
    /// Bound by `bind`, taken once serving starts.
    listeners: RefCell<Vec<TcpListener>>,
    /// Every core's own address, known once all cores are bound.
    endpoints: RefCell<Arc<Vec<CoreEndpoint>>>,
    metrics: Rc<CoreMetrics>,
}

/// Refused connections a core answers at once; beyond it the core accepts no connection until
/// one refusal ends, so that every refused connection is answered (the others wait in the
/// listen backlog) and refusals hold a bounded number of descriptors.
pub const REFUSALS_IN_PROGRESS_MAX: u32 = 64;

/// Counts a refusal in progress for as long as it lives.
pub struct RefusalGuard(Rc<Admission>);

impl Drop for RefusalGuard {
    fn drop(&mut self) {
        let a = &self.0;
        a.refusals.set(a.refusals.get().saturating_sub(1));
        a.refusal_ended.notify_all();
    }
}

/// Counts an admitted connection for as long as it lives.
pub struct ConnectionGuard(Rc<Admission>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let a = &self.0;
        strict_assert!(a.connections.get() > 0, "a connection closed twice");
        a.connections.set(a.connections.get().saturating_sub(1));
        let closed = &a.metrics.connections_closed;
        closed.set(closed.get() + 1);
        a.connection_closed.notify_all();
    }
}

impl Admission {
    /// Admission for core `core` of `cores`: its share of the broker's connection limit and
    /// its own request memory.
    pub fn new(
        core: usize,
        cores: usize,
        limits: &LimitsConfig,
        metrics: Rc<CoreMetrics>,
    ) -> Admission {
        Admission {
            core,
            connections: Cell::new(0),
            connections_max: limits.connections_max.div_ceil(cores as u32).max(1),
            request_memory: RequestMemory::new(
                limits.request_memory_bytes_max_per_core,
                u64::from(limits.frame_size_bytes_max),
            ),
            connection_closed: Notify::default(),
            refusals: Cell::new(0),
            refusal_ended: Notify::default(),
            listeners: RefCell::new(Vec::new()),
            endpoints: RefCell::new(Arc::new(Vec::new())),
            metrics,
        }
    }

    /// Admits a connection, or refuses it when the core has `connections_max` already.
    pub fn admit(self: &Rc<Self>) -> Result<ConnectionGuard, Failure> {
        if self.connections.get() >= self.connections_max {
            let refused = &self.metrics.connections_refused;
            refused.set(refused.get() + 1);
            return Err(Failure::new(
                ErrorCode::TooManyConnections,
                format!(
                    "core {} already has {} connections",
                    self.core, self.connections_max
                ),
            ));
        }
        self.connections.set(self.connections.get() + 1);
        strict_assert!(self.connections.get() <= self.connections_max);
        let opened = &self.metrics.connections_opened;
        opened.set(opened.get() + 1);
        Ok(ConnectionGuard(self.clone()))
    }

    /// Counts a refusal (answering a connection that is not admitted) until the guard drops.
    pub fn refusing(self: &Rc<Self>) -> RefusalGuard {
        self.refusals.set(self.refusals.get() + 1);
        RefusalGuard(self.clone())
    }

    /// Resolves once fewer than [`REFUSALS_IN_PROGRESS_MAX`] refusals are in progress.
    pub async fn refusal_slot(&self) {
        loop {
            let seen = self.refusal_ended.generation();
            if self.refusals.get() < REFUSALS_IN_PROGRESS_MAX {
                return;
            }
            self.refusal_ended.changed_since(seen).await;
        }
    }

    /// Open connections.
    pub fn connections(&self) -> u32 {
        self.connections.get()
    }

    /// Resolves once no connection is open.
    pub async fn drained(&self) {
        loop {
            let seen = self.connection_closed.generation();
            if self.connections.get() == 0 {
                return;
            }
            self.connection_closed.changed_since(seen).await;
        }
    }

    /// The request memory of this core.
    pub fn request_memory(&self) -> &Rc<RequestMemory> {
        &self.request_memory
    }

    /// Request memory not in use.
    pub fn request_memory_available_bytes(&self) -> u64 {
        self.request_memory.available_bytes()
    }

    /// Binds this core's listeners (the shared main address and its own port); returns its
    /// own address.
    pub fn bind(
        &self,
        listen: &str,
        core_port_base: Option<u16>,
    ) -> Result<SocketAddr, BrokerError> {
        let listen: SocketAddr = listen
            .parse()
            .map_err(|e| BrokerError::Config(format!("listen {listen:?}: {e}")))?;
        let main = TcpListener::bind(listen).map_err(|cause| BrokerError::Io {
            context: format!("binding {listen}"),
            cause,
        })?;
        let port = core_port(listen, core_port_base, self.core)
            .ok_or_else(|| BrokerError::Config("per-core port overflows 65535".into()))?;
        let own_addr = SocketAddr::new(listen.ip(), port);
        let own = TcpListener::bind_exclusive(own_addr).map_err(|cause| BrokerError::Io {
            context: format!(
                concat!(
                    "binding core port {} (core {} of the per-core ports; ",
                    "set core_port_base to move them)"
                ),
                own_addr, self.core
            ),
            cause,
        })?;
        let bound = own.local_addr().map_err(|cause| BrokerError::Io {
            context: format!("reading the address of {own_addr}"),
            cause,
        })?;
        *self.listeners.borrow_mut() = vec![main, own];
        Ok(bound)
    }

    /// The listeners bound by [`Admission::bind`], once.
    pub fn take_listeners(&self) -> Vec<TcpListener> {
        std::mem::take(&mut *self.listeners.borrow_mut())
    }

    /// Records every core's address (advertised in Metadata and FindCoordinator).
    pub fn set_endpoints(&self, endpoints: Arc<Vec<CoreEndpoint>>) {
        *self.endpoints.borrow_mut() = endpoints;
    }

    /// Every core's address; empty until serving starts.
    pub fn endpoints(&self) -> Arc<Vec<CoreEndpoint>> {
        self.endpoints.borrow().clone()
    }
}

/// Core `core`'s own port: `core_port_base + core`, or the listen port + 1 + core when unset;
/// `Some(0)` lets the system choose; `None` when it overflows.
pub fn core_port(listen: SocketAddr, core_port_base: Option<u16>, core: usize) -> Option<u16> {
    let core = u16::try_from(core).ok()?;
    match core_port_base {
        None => listen.port().checked_add(1)?.checked_add(core),
        Some(0) => Some(0),
        Some(base) => base.checked_add(core),
    }
}
