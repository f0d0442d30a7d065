//! Executor start-up: one pinned glommio executor per core, each with its own io_uring rings.
//!
//! glommio registers `io_memory` bytes for each of an executor's 3 rings, so the process needs
//! `cores x 3 x io_memory` of locked memory (`RLIMIT_MEMLOCK`). [`plan_locked_memory`] raises
//! the limit when allowed and otherwise sizes `io_memory` to what the limit permits, and says
//! which it did so that start-up can log it.

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

/// glommio refuses to start with less `io_memory` than this.
pub const IO_MEMORY_BYTES_MIN: usize = 512 * 1024;
/// Rings per executor that register `io_memory`.
pub const RINGS_PER_EXECUTOR: usize = 3;

/// Errors starting executors.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No CPU is available to this process (affinity mask empty).
    #[error("no CPU available to this process")]
    NoCpu,
    /// More cores were asked for than the process may run on.
    #[error("{requested} cores requested but only {available} CPUs are available to this process ({cpus:?})")]
    TooManyCores {
        /// Requested cores.
        requested: usize,
        /// CPUs in the affinity mask.
        available: usize,
        /// The CPUs.
        cpus: Vec<usize>,
    },
    /// glommio could not build an executor (io_uring unavailable, ...).
    #[error("cannot start executor for core {core} on CPU {cpu}: {message}. Borges needs io_uring (Linux >= 5.8, not disabled by /proc/sys/kernel/io_uring_disabled) and enough RLIMIT_MEMLOCK")]
    Executor {
        /// Core index.
        core: usize,
        /// CPU id.
        cpu: usize,
        /// The runtime's message.
        message: String,
    },
    /// An executor thread panicked (a bug, or a failed assertion in a test body); the panic's
    /// own message was printed when it happened.
    #[error("the executor thread of core {core} panicked (its message is printed above)")]
    Panicked {
        /// Core index.
        core: usize,
    },
    /// A thread could not be spawned.
    #[error("cannot spawn executor thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// How to start the executors.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Number of executors (cores). 0 means one per CPU in the process's affinity mask.
    pub cores: usize,
    /// Bytes of registered IO memory per ring; `None` sizes it from `RLIMIT_MEMLOCK`.
    pub io_memory_bytes: Option<usize>,
    /// Preemption timer: how long a task may run before yielding is requested.
    pub preempt_timer_ms: u64,
    /// Busy-poll this long before parking an idle executor (0 disables); trades CPU for
    /// cross-core latency.
    pub spin_before_park_us: u64,
    /// io_uring submission queue depth.
    pub ring_depth: usize,
    /// Threads in each executor's blocking pool (sendfile of cold data, file metadata calls).
    pub blocking_threads: usize,
    /// Period of the stall guard while the core is busy (0 disables it), see [`stall_guard`].
    pub stall_guard_us: u64,
    /// Longest period of the stall guard while the core is idle (it backs off from
    /// `stall_guard_us` by doubling); see [`stall_guard`].
    pub stall_guard_idle_us: u64,
    /// Thread name prefix.
    pub name: String,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            cores: 0,
            io_memory_bytes: None,
            preempt_timer_ms: 2,
            spin_before_park_us: 0,
            ring_depth: 256,
            blocking_threads: 4,
            stall_guard_us: 1000,
            stall_guard_idle_us: 1000,
            name: "borges-core".to_string(),
        }
    }
}

/// What start-up decided about locked memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedMemoryPlan {
    /// Soft RLIMIT_MEMLOCK before start-up, bytes (`u64::MAX` = unlimited).
    pub limit_before_bytes: u64,
    /// Soft RLIMIT_MEMLOCK after start-up.
    pub limit_after_bytes: u64,
    /// `io_memory` per ring chosen.
    pub io_memory_bytes: usize,
    /// Whether registered buffers fit in the limit (otherwise glommio runs without them).
    pub registered_buffers: bool,
}

impl std::fmt::Display for LockedMemoryPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: u64| {
            if v == u64::MAX {
                "unlimited".to_string()
            } else {
                format!("{} KiB", v / 1024)
            }
        };
        write!(
            f,
            "RLIMIT_MEMLOCK {} -> {}, io_memory {} KiB per ring, registered buffers {}",
            show(self.limit_before_bytes),
            show(self.limit_after_bytes),
            self.io_memory_bytes / 1024,
            if self.registered_buffers {
                "on"
            } else {
                "off (raise RLIMIT_MEMLOCK, e.g. `ulimit -l unlimited` or LimitMEMLOCK=infinity in systemd)"
            }
        )
    }
}

fn memlock_limit() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 {
        return (0, 0);
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    (conv(rl.rlim_cur), conv(rl.rlim_max))
}

fn set_memlock_limit(soft: u64, hard: u64) -> bool {
    let conv = |v: u64| {
        if v == u64::MAX {
            libc::RLIM_INFINITY
        } else {
            v as libc::rlim_t
        }
    };
    let rl = libc::rlimit {
        rlim_cur: conv(soft),
        rlim_max: conv(hard),
    };
    // SAFETY: setrlimit only reads the struct.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) == 0 }
}

/// Raises `RLIMIT_MEMLOCK` to fit `cores x 3 x io_memory_wanted_bytes` when the process may
/// (up to the hard limit, or beyond it with CAP_SYS_RESOURCE), otherwise shrinks `io_memory` to
/// fit what is allowed.
pub fn plan_locked_memory(cores: usize, io_memory_wanted_bytes: usize) -> LockedMemoryPlan {
    let (soft, hard) = memlock_limit();
    plan_within(cores, io_memory_wanted_bytes, soft, hard, |soft, hard| {
        set_memlock_limit(soft, hard).then(|| memlock_limit().0)
    })
}

/// Bytes glommio and the kernel lock beyond the registered buffers themselves.
const LOCKED_OVERHEAD_BYTES: u64 = 1 << 20;

/// The decision of [`plan_locked_memory`] for the limits `soft` and `hard`, where `raise(soft,
/// hard)` tries to set the limit and returns the soft limit in force after a success.
fn plan_within(
    cores: usize,
    io_memory_wanted_bytes: usize,
    soft: u64,
    hard: u64,
    mut raise: impl FnMut(u64, u64) -> Option<u64>,
) -> LockedMemoryPlan {
    let cores = cores.max(1) as u64;
    let needed = cores
        .saturating_mul(RINGS_PER_EXECUTOR as u64)
        .saturating_mul(io_memory_wanted_bytes as u64)
        .saturating_add(LOCKED_OVERHEAD_BYTES);
    let mut limit = soft;
    if soft < needed {
        if let Some(after) = raise(needed, hard.max(needed)).or_else(|| raise(hard, hard)) {
            limit = after;
        }
    }
    let fits = (limit.saturating_sub(LOCKED_OVERHEAD_BYTES) / (cores * RINGS_PER_EXECUTOR as u64))
        as usize;
    let io_memory_bytes = io_memory_wanted_bytes.min(fits).max(IO_MEMORY_BYTES_MIN);
    LockedMemoryPlan {
        limit_before_bytes: soft,
        limit_after_bytes: limit,
        io_memory_bytes,
        registered_buffers: fits >= IO_MEMORY_BYTES_MIN,
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (every partition's active segment needs a
/// few descriptors while it is being written). Returns (before, after).
pub fn raise_open_files_limit() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return (0, 0);
        }
        let before = rl.rlim_cur;
        if rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return (before, before);
            }
        }
        (before, rl.rlim_cur)
    }
}

/// CPUs this process may run on (its affinity mask, so `taskset` is respected).
pub fn available_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// The CPU each core will be pinned to, for `cores` executors (0 = all available).
pub fn plan_cpus(cores: usize) -> Result<Vec<usize>, RuntimeError> {
    let cpus = available_cpus();
    if cpus.is_empty() {
        return Err(RuntimeError::NoCpu);
    }
    let cores = if cores == 0 { cpus.len() } else { cores };
    if cores > cpus.len() {
        return Err(RuntimeError::TooManyCores {
            requested: cores,
            available: cpus.len(),
            cpus,
        });
    }
    Ok(cpus[..cores].to_vec())
}

/// Handles to running executors.
pub struct Executors<T> {
    threads: Vec<std::thread::JoinHandle<Result<T, RuntimeError>>>,
    /// CPUs the cores are pinned to, by core index.
    pub cpus: Vec<usize>,
    /// The locked-memory decision.
    pub locked_memory: LockedMemoryPlan,
}

impl<T> Executors<T> {
    /// Waits for every executor to finish, calling `on_failure` once as soon as any executor
    /// thread ends with an error (so the others can be told to stop instead of waiting for a
    /// core that will never answer); returns their results by core index.
    pub fn join_watching(self, on_failure: impl Fn()) -> Vec<Result<T, RuntimeError>> {
        let mut pending: Vec<Option<std::thread::JoinHandle<Result<T, RuntimeError>>>> =
            self.threads.into_iter().map(Some).collect();
        let mut results: Vec<Option<Result<T, RuntimeError>>> =
            (0..pending.len()).map(|_| None).collect();
        let mut warned = false;
        while pending.iter().any(Option::is_some) {
            for (core, slot) in pending.iter_mut().enumerate() {
                if !slot.as_ref().is_some_and(|t| t.is_finished()) {
                    continue;
                }
                let Some(thread) = slot.take() else { continue };
                let result = thread
                    .join()
                    .unwrap_or_else(|_| Err(RuntimeError::Panicked { core }));
                if result.is_err() && !warned {
                    warned = true;
                    on_failure();
                }
                results[core] = Some(result);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        results.into_iter().flatten().collect()
    }

    /// Whether every executor thread has finished (so that [`Executors::join`] returns at once).
    pub fn all_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Waits for every executor to finish; returns their results by core index.
    pub fn join(self) -> Vec<Result<T, RuntimeError>> {
        self.threads
            .into_iter()
            .enumerate()
            .map(|(core, t)| {
                t.join()
                    .unwrap_or_else(|_| Err(RuntimeError::Panicked { core }))
            })
            .collect()
    }
}

/// Starts one pinned executor per core and runs `make(core_index, state)` on each, where
/// `state` is produced by `state_for(core_index)` on the calling thread (use it to hand each
/// core its ends of a [`crate::channel::mesh`]). `make` is called on the executor's own thread,
/// so the future it returns need not be `Send`.
pub fn start<S, F, Fut, T>(
    config: &ExecutorConfig,
    mut state_for: impl FnMut(usize, usize) -> S,
    make: F,
) -> Result<Executors<T>, RuntimeError>
where
    S: Send + 'static,
    F: Fn(usize, S) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let cpus = plan_cpus(config.cores)?;
    let wanted = config.io_memory_bytes.unwrap_or(4 << 20);
    let locked_memory = plan_locked_memory(cpus.len(), wanted);
    let mut threads = Vec::with_capacity(cpus.len());
    for (core, &cpu) in cpus.iter().enumerate() {
        let make = make.clone();
        let state = state_for(core, cpus.len());
        let stall_guard_us = config.stall_guard_us;
        let stall_guard_idle_us = config.stall_guard_idle_us.max(stall_guard_us);
        let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
            .name(&format!("{}-{core}", config.name))
            .io_memory(locked_memory.io_memory_bytes)
            .ring_depth(config.ring_depth)
            .preempt_timer(Duration::from_millis(config.preempt_timer_ms.max(1)))
            .spin_before_park(Duration::from_micros(config.spin_before_park_us))
            .blocking_thread_pool_placement(glommio::PoolPlacement::Unbound(
                config.blocking_threads.max(1),
            ));
        let thread = std::thread::Builder::new()
            .name(format!("{}-{core}", config.name))
            .spawn(move || {
                let ex = builder.make().map_err(|e| RuntimeError::Executor {
                    core,
                    cpu,
                    message: e.to_string(),
                })?;
                let guard = Duration::from_micros(stall_guard_us);
                let idle = Duration::from_micros(stall_guard_idle_us);
                let _watch = (!guard.is_zero())
                    .then(|| crate::watchdog::watch_current_thread(&format!("core {core}"), idle));
                Ok(ex.run(async move {
                    if !guard.is_zero() {
                        glommio::spawn_local(stall_guard(guard, idle)).detach();
                    }
                    make(core, state).await
                }))
            })?;
        threads.push(thread);
    }
    Ok(Executors {
        threads,
        cpus,
        locked_memory,
    })
}

/// Wakes the executor every `period` while it is busy, bounding a glommio 0.9.0 scheduler bug.
///
/// glommio 0.9.0's `run_task_queues` reports "nothing ran" when the latency ring has a
/// completion before the first task runs (the preemption timer fired, or a foreign wakeup
/// arrived); if polling then finds no new event the executor parks with runnable tasks and sleeps
/// until the next event, which under light load can be seconds or never (upstream fix:
/// glommio/glommio#53, not in a release). A pending timer caps every park at its period, so this
/// task turns the hang into a stall of at most `period`.
///
/// Each wakeup costs ~40 us of CPU (4% of an idle core at 1 ms). With `idle_period_max` above
/// `period`, when nothing but the guard ran during a period the next one doubles, up to
/// `idle_period_max`; any other task running, or [`note_activity`] (called by the broker for
/// every request and cross-core batch), brings it back to `period`. The catch: the first wakeup
/// after an idle spell can hit the bug before any request is decoded, so it may stall for up to
/// the backed-off period. Measured (16 partitions, 1,000 rec/s, 3 runs each): p99 2.62-2.89 ms
/// with a 16 ms idle period against 2.53-2.65 ms without back-off, for 1.7% instead of 9.5% of a
/// CPU for an idle 2-core broker. Hence no back-off by default (`idle_period_max == period`).
pub async fn stall_guard(period: Duration, idle_period_max: Duration) {
    if idle_period_max <= period {
        // No back-off: a plain timer, nothing to count.
        loop {
            crate::watchdog::beat();
            glommio::timer::sleep(period).await;
        }
    }
    let mut current = period;
    let activity = GUARD_ACTIVITY.with(std::rc::Rc::clone);
    // Resets the executor's counters: nothing else in Borges reads them.
    let _ = glommio::executor().executor_stats();
    loop {
        crate::watchdog::beat();
        let seen = activity.generation();
        crate::time::timeout(current, activity.changed_since(seen)).await;
        // Tasks run since the last look, besides this one.
        let others = glommio::executor()
            .executor_stats()
            .tasks_executed()
            .saturating_sub(1);
        let woken = activity.generation() != seen;
        current = if others > 0 || woken {
            period
        } else {
            (current * 2).min(idle_period_max)
        };
        GUARD_BACKED_OFF.with(|b| b.set(current > period));
    }
}

thread_local! {
    /// Signalled by [`note_activity`] while the stall guard is backed off.
    static GUARD_ACTIVITY: std::rc::Rc<crate::sync::Notify> = crate::sync::Notify::new();
    /// Whether this core's stall guard is sleeping longer than its busy period.
    static GUARD_BACKED_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tells this core's stall guard that work arrived, so that a guard backed off during an idle
/// spell returns to its busy period at once. Cheap enough for every request: one thread-local
/// flag check while the guard is already at its busy period.
pub fn note_activity() {
    if GUARD_BACKED_OFF.with(|b| b.replace(false)) {
        GUARD_ACTIVITY.with(|a| a.notify_all());
    }
}

/// Runs `f` once on a single pinned executor started from `config` (one core, whatever
/// `config.cores` says) and returns its output. For tests, tools and benchmarks that need a real
/// core with chosen settings (for example a long preemption timer).
pub fn run_on_one_core<F, Fut, T>(config: &ExecutorConfig, f: F) -> Result<T, RuntimeError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let config = ExecutorConfig {
        cores: 1,
        ..config.clone()
    };
    // `start` wants a `Fn` that could make one body per core; with one core it runs once.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(f)));
    let executors = start(
        &config,
        |_, _| (),
        move |_, ()| {
            let f = slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            async move {
                match f {
                    Some(f) => Some(f().await),
                    None => None,
                }
            }
        },
    )?;
    let cpu = executors.cpus.first().copied().unwrap_or(0);
    let ran_twice = || RuntimeError::Executor {
        core: 0,
        cpu,
        message: "executor body ran twice".into(),
    };
    executors
        .join()
        .into_iter()
        .next()
        .ok_or_else(ran_twice)??
        .ok_or_else(ran_twice)
}

/// Runs one executor on the current thread (unpinned) until `future` completes. For tests,
/// tools and benchmarks that need one core.
pub fn run_local<T>(future: impl Future<Output = T>) -> Result<T, RuntimeError> {
    let plan = plan_locked_memory(1, 1 << 20);
    let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(plan.io_memory_bytes)
        .preempt_timer(Duration::from_millis(2))
        .make()
        .map_err(|e| RuntimeError::Executor {
            core: 0,
            cpu: 0,
            message: e.to_string(),
        })?;
    let defaults = ExecutorConfig::default();
    let _watch = crate::watchdog::watch_current_thread(
        "run_local",
        Duration::from_micros(defaults.stall_guard_idle_us),
    );
    Ok(ex.run(async move {
        glommio::spawn_local(stall_guard(
            Duration::from_micros(defaults.stall_guard_us),
            Duration::from_micros(defaults.stall_guard_idle_us),
        ))
        .detach();
        future.await
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_guard_backs_off_when_idle_and_returns_on_activity() {
        let ex = glommio::LocalExecutorBuilder::default().make().unwrap();
        ex.run(async {
            let backed_off = || GUARD_BACKED_OFF.with(std::cell::Cell::get);
            glommio::spawn_local(stall_guard(
                Duration::from_millis(1),
                Duration::from_millis(16),
            ))
            .detach();
            // Nothing but the guard runs for 60 ms: it backs off.
            glommio::timer::sleep(Duration::from_millis(60)).await;
            assert!(backed_off(), "an idle guard backs off");
            // Work arrives: back to the busy period at once.
            note_activity();
            assert!(!backed_off());
            glommio::timer::sleep(Duration::from_millis(5)).await;
            // Without back-off configured it never backs off.
            let ex2 = std::thread::spawn(|| {
                let ex = glommio::LocalExecutorBuilder::default().make().unwrap();
                ex.run(async {
                    glommio::spawn_local(stall_guard(
                        Duration::from_millis(1),
                        Duration::from_millis(1),
                    ))
                    .detach();
                    glommio::timer::sleep(Duration::from_millis(30)).await;
                    GUARD_BACKED_OFF.with(std::cell::Cell::get)
                })
            });
            assert!(!ex2.join().unwrap());
        });
    }

    const MIB: u64 = 1 << 20;

    /// A `raise` that is always refused (no CAP_SYS_RESOURCE, hard limit reached).
    fn refused(_: u64, _: u64) -> Option<u64> {
        None
    }

    #[test]
    fn plan_respects_minimum() {
        // 2 cores x 3 rings x 1 MiB + 1 MiB needed; only 2 MiB allowed and no raise: the
        // buffers shrink to the 512 KiB minimum glommio takes, and do not fit (off).
        let plan = plan_within(2, 1 << 20, 2 * MIB, 2 * MIB, refused);
        assert_eq!(plan.io_memory_bytes, IO_MEMORY_BYTES_MIN);
        assert!(!plan.registered_buffers, "{plan}");
        assert_eq!(
            (plan.limit_before_bytes, plan.limit_after_bytes),
            (2 * MIB, 2 * MIB)
        );
        // Wanting less than the minimum still gets the minimum.
        let plan = plan_within(1, 1024, u64::MAX, u64::MAX, refused);
        assert_eq!(plan.io_memory_bytes, IO_MEMORY_BYTES_MIN);
        assert!(plan.registered_buffers);
        // The real process limit: whatever it is, never below the minimum.
        assert!(plan_locked_memory(2, 1 << 20).io_memory_bytes >= IO_MEMORY_BYTES_MIN);
    }

    #[test]
    fn the_locked_memory_limit_bounds_io_memory() {
        // 8 MiB locked, not raisable: (8 - 1) MiB over 2 x 3 rings = 1194 KiB per ring, less
        // than the 4 MiB wanted.
        let plan = plan_within(2, 4 << 20, 8 * MIB, 8 * MIB, refused);
        assert_eq!(plan.io_memory_bytes, (7 * MIB / 6) as usize);
        assert!(plan.registered_buffers);
        assert_eq!(plan.limit_after_bytes, 8 * MIB);
        // Unlimited: what was wanted, no raise attempted.
        let plan = plan_within(2, 4 << 20, u64::MAX, u64::MAX, |_, _| {
            panic!("no raise needed")
        });
        assert_eq!(plan.io_memory_bytes, 4 << 20);
    }

    #[test]
    fn the_limit_is_raised_to_what_is_needed_or_to_the_hard_limit() {
        let needed = 2 * 3 * 4 * MIB + MIB;
        // Allowed: the soft limit goes to exactly what is needed.
        let mut asked = Vec::new();
        let plan = plan_within(2, 4 << 20, 8 * MIB, u64::MAX, |soft, hard| {
            asked.push((soft, hard));
            Some(soft)
        });
        assert_eq!(asked, [(needed, u64::MAX)]);
        assert_eq!(plan.io_memory_bytes, 4 << 20);
        assert_eq!(
            (plan.limit_before_bytes, plan.limit_after_bytes),
            (8 * MIB, needed)
        );
        // Beyond the hard limit refused: up to the hard limit, and the buffers fit that.
        let mut asked = Vec::new();
        let plan = plan_within(2, 4 << 20, 8 * MIB, 16 * MIB, |soft, hard| {
            asked.push((soft, hard));
            (hard == 16 * MIB).then_some(soft)
        });
        assert_eq!(asked, [(needed, needed), (16 * MIB, 16 * MIB)]);
        assert_eq!(plan.limit_after_bytes, 16 * MIB);
        assert_eq!(plan.io_memory_bytes, (15 * MIB / 6) as usize);
    }

    #[test]
    fn start_runs_every_core() {
        let cfg = ExecutorConfig {
            cores: 1,
            ..ExecutorConfig::default()
        };
        let ex = start(
            &cfg,
            |core, cores| (core, cores),
            |core, (c, n)| async move {
                assert_eq!(core, c);
                core * 10 + n
            },
        )
        .unwrap();
        let results: Vec<usize> = ex.join().into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(results, vec![1]);
    }

    #[test]
    fn a_panic_on_a_core_is_reported_as_a_panic_not_as_a_missing_io_uring() {
        let cfg = ExecutorConfig {
            cores: 1,
            ..ExecutorConfig::default()
        };
        let err: Result<(), RuntimeError> = run_on_one_core(&cfg, || async { panic!("planted") });
        assert!(
            matches!(err, Err(RuntimeError::Panicked { core: 0 })),
            "{err:?}"
        );
        let message = err.unwrap_err().to_string();
        assert!(!message.contains("io_uring"), "{message}");
    }

    #[test]
    fn too_many_cores_is_a_clear_error() {
        let err = plan_cpus(100_000).unwrap_err();
        assert!(err.to_string().contains("cores requested"));
    }
}
