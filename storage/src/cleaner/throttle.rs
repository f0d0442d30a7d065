//! The cleaner's IO rate limit (`cleaner_io_bytes_per_s_max`) and its yields to the core.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Bytes the cleaner may read plus write per second on one core, shared by every cleaning on
/// that core. Lives on one core.
pub(crate) struct Throttle {
    bytes_per_s_max: u64,
    window_start: Cell<Instant>,
    window_bytes: Cell<u64>,
}

/// A throttle window restarts after this long, so an idle cleaner does not bank a burst.
const WINDOW_MS: u64 = 1000;

impl Throttle {
    pub fn new(bytes_per_s_max: u64) -> Throttle {
        Throttle {
            bytes_per_s_max: bytes_per_s_max.max(1),
            window_start: Cell::new(Instant::now()),
            window_bytes: Cell::new(0),
        }
    }

    /// Accounts `bytes` of cleaner IO; sleeps while the window is over the rate, and always
    /// yields so the core's produce and fetch tasks run between two cleaner chunks.
    pub async fn spend(&self, bytes: u64) {
        let now = Instant::now();
        if now.duration_since(self.window_start.get()) >= Duration::from_millis(WINDOW_MS) {
            self.window_start.set(now);
            self.window_bytes.set(0);
        }
        self.window_bytes.set(self.window_bytes.get() + bytes);
        let allowed_at = self.window_start.get()
            + Duration::from_secs_f64(self.window_bytes.get() as f64 / self.bytes_per_s_max as f64);
        if allowed_at > now {
            borges_runtime::time::sleep(allowed_at - now).await;
        } else {
            borges_runtime::task::yield_now().await;
        }
    }
}
