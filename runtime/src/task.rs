//! Tasks on the current core.

use std::future::Future;

/// A handle to a spawned local task. Dropping it cancels the task; call [`Task::detach`] to let
/// it run to completion on its own.
pub struct Task<T>(glommio::Task<T>);

impl<T> Task<T> {
    /// Lets the task run without keeping a handle.
    pub fn detach(self) {
        self.0.detach();
    }
}

impl<T> Future for Task<T> {
    type Output = T;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Spawns a task on the current core's executor.
pub fn spawn<T: 'static>(future: impl Future<Output = T> + 'static) -> Task<T> {
    Task(glommio::spawn_local(future))
}

/// Gives other tasks on this core a chance to run.
pub async fn yield_now() {
    glommio::yield_if_needed().await;
}

/// Runs `func` on the executor's blocking thread pool, so that a blocking system call never
/// stalls the core.
pub async fn spawn_blocking<F, R>(func: F) -> R
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    glommio::executor().spawn_blocking(func).await
}

/// Index of the current executor (0-based core index as started by [`crate::executor`]).
pub fn current_core() -> usize {
    glommio::executor().id().saturating_sub(1)
}
