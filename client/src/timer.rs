//! A timer for the producer's sender that ends on time to tens of microseconds.
//!
//! tokio's timer wheel counts whole milliseconds and rounds a deadline up to the next tick, so a
//! `linger_ms = 1` batch waited 1-2 ms (1.5 ms on average) before it was sent, and publish
//! latency paid the difference. On Linux the sender sleeps on a `timerfd` (CLOCK_MONOTONIC, the
//! clock of [`Instant`]) registered with the runtime's reactor instead: the reactor wakes when
//! the fd fires, whatever its own millisecond timeout. Elsewhere, or when the fd cannot be
//! made, it falls back to tokio's sleep.

use std::time::Instant;

/// One re-armable timer. Not shared: the sender task owns it.
pub(crate) struct PreciseTimer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<linux::TimerFd>>,
}

impl PreciseTimer {
    /// A timer; on Linux a timerfd, or tokio's timer if the fd cannot be created. Must be
    /// called inside a tokio runtime.
    pub(crate) fn new() -> PreciseTimer {
        #[cfg(target_os = "linux")]
        {
            let fd = linux::TimerFd::new()
                .and_then(|timer| {
                    // SAFETY: the TimerFd owns its descriptor and always returns that one; the
                    // AsyncFd owns the TimerFd, so the descriptor stays open while registered.
                    unsafe {
                        tokio::io::unix::AsyncFd::register_with_interest(
                            timer,
                            tokio::io::Interest::READABLE,
                        )
                    }
                    .map_err(std::io::Error::from)
                })
                .map_err(|e| tracing::debug!(error = %e, "no timerfd; linger uses tokio's timer"))
                .ok();
            PreciseTimer { fd }
        }
        #[cfg(not(target_os = "linux"))]
        PreciseTimer {}
    }

    /// Returns at `deadline` (at once when it has passed).
    pub(crate) async fn sleep_until(&mut self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            if fd.get_ref().arm(left).is_ok() {
                wait_expired(fd).await;
                return;
            }
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

#[cfg(target_os = "linux")]
async fn wait_expired(fd: &tokio::io::unix::AsyncFd<linux::TimerFd>) {
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        // Re-arming resets the expiration count, so a readiness left from an earlier timer
        // that was not waited for reads as "not yet" here and is cleared.
        match guard.try_io(|inner| inner.get_ref().read_expirations()) {
            Ok(Ok(_)) => return,
            Ok(Err(_)) => return, // a broken fd: do not spin on it
            Err(_would_block) => continue,
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::time::Duration;

    /// A non-blocking CLOCK_MONOTONIC timerfd.
    pub(super) struct TimerFd(OwnedFd);

    impl TimerFd {
        pub(super) fn new() -> io::Result<TimerFd> {
            // SAFETY: timerfd_create takes no pointers; the result is checked.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// Fires once, `after` from now (relative, so no clock conversion is needed).
        pub(super) fn arm(&self, after: Duration) -> io::Result<()> {
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs() as libc::time_t,
                    // At least 1 ns: an all-zero it_value disarms the timer instead.
                    tv_nsec: (after.subsec_nanos().max(u32::from(after.as_secs() == 0))) as _,
                },
            };
            // SAFETY: `spec` is a valid itimerspec; a null old value is allowed.
            let rc = unsafe {
                libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// The expirations since the last arm or read; `WouldBlock` when none.
        pub(super) fn read_expirations(&self) -> io::Result<u64> {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into `count`, which is 8 bytes long.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    (&mut count as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(count)
        }
    }

    impl AsRawFd for TimerFd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The timer ends at or after its deadline, re-arms, and a deadline in the past returns at
    /// once (no timings asserted beyond "not early").
    #[tokio::test]
    async fn sleeps_until_the_deadline_and_rearms() {
        let mut timer = PreciseTimer::new();
        #[cfg(target_os = "linux")]
        assert!(timer.fd.is_some(), "timerfd available on Linux");
        for micros in [300, 1_000, 50] {
            let deadline = Instant::now() + Duration::from_micros(micros);
            timer.sleep_until(deadline).await;
            assert!(Instant::now() >= deadline);
        }
        // Armed but not waited for (the sender was woken first), then re-armed.
        #[cfg(target_os = "linux")]
        if let Some(fd) = &timer.fd {
            fd.get_ref().arm(Duration::from_micros(10)).expect("arm");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let deadline = Instant::now() + Duration::from_millis(3);
        timer.sleep_until(deadline).await;
        assert!(
            Instant::now() >= deadline,
            "a stale expiration ended the wait early"
        );
        timer
            .sleep_until(Instant::now() - Duration::from_millis(1))
            .await;
    }
}
