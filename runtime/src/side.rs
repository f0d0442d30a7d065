//! What a library written for tokio-style runtimes needs from this one, and a side executor to
//! run it on.
//!
//! openraft (the controller quorum's Raft library, used by `borges-replication`) is generic over
//! an async runtime that must provide detached tasks whose handles can be awaited, nameable
//! sleep futures and a monotonic instant. The pieces here are those, over glommio:
//! - [`spawn_detached`]: a task that keeps running when its handle is dropped (tokio's
//!   semantics; a [`crate::task::Task`] is cancelled on drop instead).
//! - [`Sleep`]: a sleep future with a name, for a deadline or a duration.
//! - [`start_side_executor`]: one extra executor thread, not pinned to a data core's CPU, with
//!   the smallest io_uring memory glommio accepts, for work whose timers must never queue
//!   behind a data core's produce traffic (the Raft node of a broker process).
//!
//! Everything here lives on the core (executor) that created it, as the rest of this crate.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::executor::{RuntimeError, IO_MEMORY_BYTES_MIN};

/// Handle to a task started by [`spawn_detached`]. Awaiting it yields the task's output, or
/// `None` when the task was cancelled (its executor stopped). Dropping it does not cancel the
/// task. Lives on one core.
pub struct JoinHandle<T>(glommio::task::JoinHandle<T>);

impl<T> Future for JoinHandle<T> {
    type Output = Option<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> JoinHandle<T> {
    /// Cancels the task (it stops at its next await point).
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

/// Spawns a task on the current core that runs to completion even if the handle is dropped.
pub fn spawn_detached<T: 'static>(future: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    JoinHandle(glommio::spawn_local(future).detach())
}

/// A sleep until a deadline on the current core. Lives on one core.
pub struct Sleep(glommio::timer::Timer);

impl Sleep {
    /// Sleeps for `duration`.
    pub fn new(duration: Duration) -> Sleep {
        Sleep(glommio::timer::Timer::new(duration))
    }

    /// Sleeps until `deadline` (at once when it has passed).
    pub fn until(deadline: Instant) -> Sleep {
        Sleep::new(deadline.saturating_duration_since(Instant::now()))
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(drop)
    }
}

/// How to start a side executor.
#[derive(Debug, Clone)]
pub struct SideExecutorConfig {
    /// Thread name.
    pub name: String,
    /// Registered IO memory per ring; side executors do little IO, so the minimum glommio
    /// accepts by default (it counts in the process's `RLIMIT_MEMLOCK` budget three times).
    pub io_memory_bytes: usize,
    /// Preemption timer.
    pub preempt_timer_ms: u64,
    /// Period of the stall guard (see [`crate::executor::stall_guard`]); 0 disables it.
    pub stall_guard_us: u64,
}

impl Default for SideExecutorConfig {
    fn default() -> Self {
        SideExecutorConfig {
            name: "borges-side".to_string(),
            io_memory_bytes: IO_MEMORY_BYTES_MIN,
            preempt_timer_ms: 2,
            stall_guard_us: 1000,
        }
    }
}

/// Starts one unpinned executor on a new thread and runs `make()` on it; the thread ends when
/// that future completes. Join the returned handle for its output.
pub fn start_side_executor<F, Fut, T>(
    config: &SideExecutorConfig,
    make: F,
) -> Result<std::thread::JoinHandle<Result<T, RuntimeError>>, RuntimeError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name(&config.name)
        .io_memory(config.io_memory_bytes.max(IO_MEMORY_BYTES_MIN))
        .preempt_timer(Duration::from_millis(config.preempt_timer_ms.max(1)));
    let guard = Duration::from_micros(config.stall_guard_us);
    let name = config.name.clone();
    let thread = std::thread::Builder::new()
        .name(config.name.clone())
        .spawn(move || {
            let ex = builder.make().map_err(|e| RuntimeError::Executor {
                core: 0,
                cpu: 0,
                message: e.to_string(),
            })?;
            let _watch =
                (!guard.is_zero()).then(|| crate::watchdog::watch_current_thread(&name, guard));
            Ok(ex.run(async move {
                if !guard.is_zero() {
                    glommio::spawn_local(crate::executor::stall_guard(guard, guard)).detach();
                }
                make().await
            }))
        })?;
    Ok(thread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detached_task_survives_its_dropped_handle_and_sleep_waits() {
        let out = start_side_executor(&SideExecutorConfig::default(), || async {
            let (tx, rx) = std::sync::mpsc::channel();
            drop(spawn_detached(async move {
                Sleep::new(Duration::from_millis(5)).await;
                tx.send(7).unwrap();
            }));
            let started = Instant::now();
            Sleep::until(started + Duration::from_millis(20)).await;
            assert!(started.elapsed() >= Duration::from_millis(20));
            let joined = spawn_detached(async { 3 }).await;
            (rx.try_recv().ok(), joined)
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(out, (Some(7), Some(3)));
    }

    #[test]
    fn cancelled_task_joins_as_none() {
        let out = start_side_executor(&SideExecutorConfig::default(), || async {
            let handle = spawn_detached(async {
                Sleep::new(Duration::from_secs(3600)).await;
                1
            });
            handle.cancel();
            handle.await
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(out, None);
    }
}
