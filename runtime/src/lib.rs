//! The one place that knows Borges runs on glommio.
//!
//! Everything the broker and the storage engine need from a runtime goes through here:
//! - [`executor`]: start one pinned executor per core with its own io_uring rings, sized to the
//!   locked-memory limit.
//! - [`task`]: spawn local tasks, yield, run blocking work off the core.
//! - [`fs`]: direct-IO files (O_DIRECT through io_uring) and aligned buffers, reached through
//!   a [`fs::Disk`]: the real one, or a [`fault::FaultyDisk`] that tests use to inject faults.
//! - [`time`]: sleeps, timeouts, and the [`time::Clock`] seam (system or manual time).
//! - [`sync`]: single-core notification primitives.
//! - [`net`]: TCP listeners and streams, `send_file` that never stalls the core.
//! - [`tls`]: TLS sessions (rustls) on those streams, PEM loading, certificate subjects.
//! - [`channel`]: bounded cross-core channels (a full mesh).
//! - [`watchdog`]: wakes an executor that glommio parked with runnable tasks and no timer.
//! - [`side`]: detached tasks, named sleeps and a side executor thread for libraries written
//!   for tokio-style runtimes (the Raft node).
//!
//! Types from this crate live on the core that created them unless they say otherwise.

pub mod channel;
pub mod executor;
pub mod fault;
pub mod fs;
pub mod net;
pub mod side;
pub mod sync;
pub mod task;
pub mod time;
pub mod tls;
pub mod watchdog;
