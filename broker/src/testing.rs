//! Helpers for unit tests that need an executor (file IO through the runtime).

use std::future::Future;

/// Runs `f` on a fresh single-core executor; one at a time, since each executor pins locked
/// memory and the limit is small.
pub fn on_one_core<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    static ONE_EXECUTOR_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = ONE_EXECUTOR_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let config = borges_runtime::executor::ExecutorConfig {
        preempt_timer_ms: 1000,
        ..Default::default()
    };
    match borges_runtime::executor::run_on_one_core(&config, f) {
        Ok(t) => t,
        Err(e) => panic!("test executor failed: {e}"),
    }
}
