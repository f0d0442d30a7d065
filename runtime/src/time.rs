//! Time on the current core.

use std::future::Future;
use std::time::Duration;

pub use std::time::Instant;

/// Sleeps without blocking the core.
pub async fn sleep(duration: Duration) {
    glommio::timer::sleep(duration).await;
}

/// Runs `future` for at most `duration`; `None` on timeout.
pub async fn timeout<T>(duration: Duration, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        sleep(duration).await;
        None
    })
    .await
}

/// Milliseconds since the Unix epoch (wall clock, for record timestamps and retention).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
