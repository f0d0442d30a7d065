//! The park watchdog: wakes an executor that glommio 0.9.0 put to sleep with runnable tasks and
//! nothing left to wake it.
//!
//! glommio 0.9.0's run loop parks the executor when `run_task_queues` reports that nothing ran,
//! and it reports that whenever its latency ring already holds a completion at its first check,
//! even with tasks runnable. Under load that is common: the loop arms the 2 ms preemption timer
//! and then checks the ring; a thread descheduled for longer in between finds the timer's
//! completion there. The park then lasts until the next timer or foreign wake-up.
//! [`crate::executor::stall_guard`] keeps a timer pending so that such a park ends within its
//! period, but not when the guard's own task is among the runnable ones (its timer just fired)
//! and no other timer is pending, nor before the guard first runs: the executor then sleeps in
//! `io_uring_enter` for good. Before 'storage ready' the stall guard is a broker core's only
//! timer, which is where test brokers hung ("not ready after 60s").
//!
//! So every executor thread registers here, with a beat counter that its stall guard bumps at
//! every wake-up. One watchdog thread per process looks every [`WATCHDOG_TICK_MS`]; an executor
//! whose counter stayed still for its quiet limit (at least [`WATCHDOG_QUIET_MS_MIN`]) while
//! its thread sleeps (a thread starved of CPU is left alone) gets [`WATCHDOG_SIGNAL`], whose
//! handler does nothing (installed with `SA_RESTART`, so interrupted blocking calls resume),
//! but it makes a sleeping `io_uring_enter` return `EINTR`: glommio goes round its loop and
//! runs its tasks. A core asleep in another blocking call for that long is signalled too,
//! harmlessly. The registry is behind a mutex that only registration and the
//! watchdog thread take; a core's only cost is one relaxed atomic add per stall-guard wake-up.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// The signal the watchdog sends to an executor thread that made no progress.
pub const WATCHDOG_SIGNAL: libc::c_int = libc::SIGURG;
/// How often the watchdog thread looks at the executors.
pub const WATCHDOG_TICK_MS: u64 = 10;
/// The shortest quiet spell (no stall-guard beat) after which an executor is signalled.
pub const WATCHDOG_QUIET_MS_MIN: u64 = 20;

/// Executors signalled since the process started.
static KICKS: AtomicU64 = AtomicU64::new(0);

struct Watched {
    id: u64,
    /// Kernel thread id of the executor thread.
    tid: libc::pid_t,
    name: String,
    beats: Arc<AtomicU64>,
    quiet: Duration,
    last_beats: u64,
    last_change: Instant,
}

struct Registry {
    watched: Vec<Watched>,
    next_id: u64,
    thread_started: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    watched: Vec::new(),
    next_id: 0,
    thread_started: false,
});

thread_local! {
    /// This thread's beat counter while it is watched.
    static BEATS: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
}

/// Keeps the current thread watched; dropping it (on the same thread, before the thread ends)
/// stops the watch, so that no signal is ever sent to a thread that has gone.
pub struct Watch {
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        BEATS.with(|b| b.borrow_mut().take());
        lock().watched.retain(|w| w.id != self.id);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Watches the current thread, an executor thread whose stall guard beats at least every
/// `beat_period_max`: it is signalled after `max(4 x beat_period_max, WATCHDOG_QUIET_MS_MIN)`
/// without a beat. Call on the executor's thread after the executor is built and before it
/// runs, so that even a park before its first task is caught.
pub fn watch_current_thread(name: &str, beat_period_max: Duration) -> Watch {
    install_handler();
    let beats = Arc::new(AtomicU64::new(0));
    BEATS.with(|b| *b.borrow_mut() = Some(beats.clone()));
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
    let quiet = (beat_period_max * 4).max(Duration::from_millis(WATCHDOG_QUIET_MS_MIN));
    let mut registry = lock();
    let id = registry.next_id;
    registry.next_id += 1;
    registry.watched.push(Watched {
        id,
        tid,
        name: name.to_string(),
        beats,
        quiet,
        last_beats: 0,
        last_change: Instant::now(),
    });
    if !registry.thread_started {
        let spawned = std::thread::Builder::new()
            .name("borges-watchdog".into())
            .spawn(watchdog_loop);
        // Without the thread nothing is watched, as before the watchdog existed.
        registry.thread_started = spawned.is_ok();
    }
    Watch { id }
}

/// Records progress of the current thread's executor (called by the stall guard).
pub fn beat() {
    BEATS.with(|b| {
        if let Some(beats) = &*b.borrow() {
            beats.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// How many times an executor was signalled since the process started.
pub fn kicks() -> u64 {
    KICKS.load(Ordering::Relaxed)
}

fn watchdog_loop() {
    loop {
        std::thread::sleep(Duration::from_millis(WATCHDOG_TICK_MS));
        let now = Instant::now();
        let mut registry = lock();
        for w in registry.watched.iter_mut() {
            let beats = w.beats.load(Ordering::Relaxed);
            if beats != w.last_beats {
                w.last_beats = beats;
                w.last_change = now;
                continue;
            }
            let quiet = now.duration_since(w.last_change);
            // A thread that is runnable but not running is starved of CPU (a loaded machine),
            // not parked: a signal would not help it.
            if quiet < w.quiet || !thread_sleeps(w.tid) {
                continue;
            }
            // Under the registry lock: the thread cannot unregister (and end) meanwhile.
            // SAFETY: tgkill with our own pid and a thread of ours that is still registered.
            unsafe {
                libc::syscall(libc::SYS_tgkill, libc::getpid(), w.tid, WATCHDOG_SIGNAL);
            }
            KICKS.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                thread = %w.name,
                quiet_ms = quiet.as_millis() as u64,
                "watchdog: executor made no progress; signalled it"
            );
            w.last_change = now;
        }
    }
}

/// Whether thread `tid` of this process is in an interruptible sleep (state `S` in
/// `/proc/self/task/TID/stat`), as a parked executor is in `io_uring_enter`.
fn thread_sleeps(tid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // "tid (comm) S ...": the name may hold spaces and parentheses, the state follows the
    // last ')'.
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
}

extern "C" fn on_watchdog_signal(_: libc::c_int) {}

fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction with our handler, an empty mask and SA_RESTART; the
        // handler does nothing, so it is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_watchdog_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(WATCHDOG_SIGNAL, &action, std::ptr::null_mut()) != 0 {
                tracing::warn!(
                    "cannot install the executor watchdog's signal handler: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spawns and awaits `tasks` tasks on an executor whose preemption timer is 10 us, with the
    /// stall guard running, on a thread watched or not; returns the thread.
    fn spawn_busy_executor(tasks: u64, watched: bool) -> std::thread::JoinHandle<u64> {
        std::thread::spawn(move || {
            let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                .preempt_timer(Duration::from_micros(10))
                .make()
                .unwrap();
            let _watch = watched.then(|| watch_current_thread("test", Duration::from_millis(1)));
            ex.run(async move {
                let period = Duration::from_millis(1);
                glommio::spawn_local(crate::executor::stall_guard(period, period)).detach();
                let mut sum = 0;
                for i in 0..tasks {
                    sum += glommio::spawn_local(async move { i }).await;
                }
                sum
            })
        })
    }

    /// Waits for `worker` up to a liveness bound far above its running time (milliseconds):
    /// `None` if it is still running then.
    fn join_within(worker: std::thread::JoinHandle<u64>, bound: Duration) -> Option<u64> {
        let deadline = Instant::now() + bound;
        while !worker.is_finished() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(worker.join().unwrap())
    }

    #[test]
    fn an_executor_parked_with_runnable_tasks_is_woken() {
        // A 10 us preemption timer has often fired when glommio's loop first looks at its
        // latency ring, so the loop often parks with runnable tasks; once the stall guard's own
        // task is among them no timer is left and, unwatched, the executor sleeps for good
        // (unwatched: 10 hangs in 10 runs; watched: done in 0.3-1 s with a few signals).
        let tasks = 100_000;
        let worker = spawn_busy_executor(tasks, true);
        let sum = join_within(worker, Duration::from_secs(60));
        assert_eq!(
            sum,
            Some(tasks * (tasks - 1) / 2),
            "the executor stayed parked: the watchdog did not wake it ({} kicks)",
            kicks()
        );
    }
}
