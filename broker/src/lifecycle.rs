//! The lifecycle of one core: starting, serving, shutting down, stopped; and its messages
//! (start-up and shutdown steps that core 0 orchestrates, and metrics snapshots).

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;

use borges_runtime::sync::Notify;
use futures_channel::oneshot;

use crate::error::BrokerError;
use crate::metrics::MetricsSnapshot;
use crate::types::CoreEndpoint;

/// Where one core is in its life. Lives on that core.
#[derive(Default)]
pub struct Lifecycle {
    shutting_down: Cell<bool>,
    /// Bumped once, when shutdown starts.
    shutdown: Notify,
    /// Bumped once, when the core may start accepting connections.
    serving: Notify,
    /// Bumped once, when the core has finished shutting down.
    stopped: Notify,
}

impl Lifecycle {
    /// Whether shutdown has started: connections stop reading new requests, loops end.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// Bumped once, when shutdown starts (wait on it with `changed_since`).
    pub fn shutdown(&self) -> &Notify {
        &self.shutdown
    }

    /// Starts shutting down.
    pub fn start_shutdown(&self) {
        self.shutting_down.set(true);
        self.shutdown.notify_all();
    }

    /// Bumped once, when every core's address is known and this core may accept connections.
    pub fn serving(&self) -> &Notify {
        &self.serving
    }

    /// Lets this core accept connections.
    pub fn start_serving(&self) {
        strict_assert_eq!(self.serving.generation(), 0, "serving started twice");
        self.serving.notify_all();
    }

    /// Bumped once, when this core has stopped.
    pub fn stopped(&self) -> &Notify {
        &self.stopped
    }

    /// Marks this core stopped.
    pub fn mark_stopped(&self) {
        strict_assert!(self.is_shutting_down(), "stopped without shutting down");
        self.stopped.notify_all();
    }
}

/// What `/healthz` and `/readyz` need to know of one core.
#[derive(Debug, Clone)]
pub struct CoreHealth {
    /// The core.
    pub core: usize,
    /// Its log directory's state: `writable`, `read_only` or `failed`.
    pub log_dir_state: &'static str,
    /// Why, when not writable.
    pub log_dir_reason: Option<String>,
    /// It accepts connections.
    pub serving: bool,
    /// Shutdown has started.
    pub shutting_down: bool,
}

/// Start-up, observation and shutdown steps for a core, sent by core 0.
pub enum LifecycleMessage {
    /// Bind this core's listeners; reply with the per-core address.
    Bind {
        /// The bound per-core address.
        reply: oneshot::Sender<Result<SocketAddr, BrokerError>>,
    },
    /// Every core's address is known: start accepting connections.
    Serve {
        /// Per-core endpoints, by core.
        endpoints: Arc<Vec<CoreEndpoint>>,
        /// Resolved once the core may accept.
        reply: oneshot::Sender<()>,
    },
    /// Report metrics.
    Metrics {
        /// The snapshot.
        reply: oneshot::Sender<MetricsSnapshot>,
    },
    /// Report health (cheap: no per-partition figures).
    Health {
        /// The core's health.
        reply: oneshot::Sender<CoreHealth>,
    },
    /// Stop accepting, finish in-flight requests, close partition logs cleanly.
    Shutdown {
        /// Resolved once this core is done.
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
}
