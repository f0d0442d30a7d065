//! Time on the current core: sleeps, timeouts, and the [`Clock`] seam that lets tests move time.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

pub use std::time::Instant;

use crate::sync::Notify;

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

/// Where a component reads the time and sleeps: the system clock, or a [`ManualClock`] that
/// only moves when a test moves it. An enum, not a trait object, so the system clock costs one
/// branch. Lives on one core (the manual clock is an `Rc`).
#[derive(Clone, Default)]
pub enum Clock {
    /// `Instant::now`, `SystemTime::now` and glommio timers.
    #[default]
    System,
    /// Time that a test moves with [`ManualClock::advance`].
    Manual(Rc<ManualClock>),
}

impl Clock {
    /// A new manual clock starting at wall-clock `start_ms`, and the handle that moves it.
    pub fn manual(start_ms: i64) -> (Clock, Rc<ManualClock>) {
        let clock = Rc::new(ManualClock {
            origin: Instant::now(),
            origin_ms: start_ms,
            elapsed: Cell::new(Duration::ZERO),
            moved: Notify::default(),
        });
        (Clock::Manual(clock.clone()), clock)
    }

    /// Monotonic now.
    pub fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual(m) => m.origin + m.elapsed.get(),
        }
    }

    /// Wall-clock milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => now_ms(),
            Clock::Manual(m) => m.origin_ms + m.elapsed.get().as_millis() as i64,
        }
    }

    /// Sleeps for `duration` of this clock's time.
    pub async fn sleep(&self, duration: Duration) {
        match self {
            Clock::System => sleep(duration).await,
            Clock::Manual(m) => {
                let deadline = m.elapsed.get().saturating_add(duration);
                loop {
                    let seen = m.moved.generation();
                    if m.elapsed.get() >= deadline {
                        return;
                    }
                    m.moved.changed_since(seen).await;
                }
            }
        }
    }

    /// Runs `future` for at most `duration` of this clock's time; `None` on timeout.
    pub async fn timeout<T>(
        &self,
        duration: Duration,
        future: impl Future<Output = T>,
    ) -> Option<T> {
        futures_lite::future::or(async { Some(future.await) }, async {
            self.sleep(duration).await;
            None
        })
        .await
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it; sleepers on it wake when
/// their deadline is passed. Lives on one core.
pub struct ManualClock {
    origin: Instant,
    origin_ms: i64,
    elapsed: Cell<Duration>,
    moved: Notify,
}

impl ManualClock {
    /// Moves the clock forward by `by` and wakes the sleepers whose deadline passed.
    pub fn advance(&self, by: Duration) {
        self.elapsed.set(self.elapsed.get().saturating_add(by));
        self.moved.notify_all();
    }

    /// Time moved since the clock was made.
    pub fn elapsed(&self) -> Duration {
        self.elapsed.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_wakes_sleepers_past_their_deadline() {
        crate::executor::run_local(async {
            let (clock, handle) = Clock::manual(1_000);
            let start = clock.now();
            assert_eq!(clock.now_ms(), 1_000);
            let woke = Rc::new(Cell::new(false));
            let sleeper = {
                let (clock, woke) = (clock.clone(), woke.clone());
                crate::task::spawn(async move {
                    clock.sleep(Duration::from_millis(50)).await;
                    woke.set(true);
                })
            };
            glommio::executor().yield_now().await;
            handle.advance(Duration::from_millis(49));
            glommio::executor().yield_now().await;
            assert!(!woke.get(), "49 ms of a 50 ms sleep");
            handle.advance(Duration::from_millis(1));
            sleeper.await;
            assert!(woke.get());
            assert_eq!(clock.now() - start, Duration::from_millis(50));
            assert_eq!(clock.now_ms(), 1_050);
            let mover = {
                let handle = handle.clone();
                crate::task::spawn(async move {
                    glommio::executor().yield_now().await;
                    handle.advance(Duration::from_millis(10));
                })
            };
            let timed_out = clock
                .timeout(Duration::from_millis(10), std::future::pending::<()>())
                .await;
            mover.await;
            assert!(timed_out.is_none());
        })
        .unwrap();
    }
}
