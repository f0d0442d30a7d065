//! The one clock of the load generator: `CLOCK_MONOTONIC` in nanoseconds.
//!
//! System-wide on Linux, so a timestamp written into a record by a producer can be compared with
//! the time a consumer receives it, also in another process on the same machine.

use std::time::Duration;

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until `deadline_ns` (on [`now_ns`]'s clock). Sleeps with the OS for the bulk, then
/// yields for the last few microseconds, so pacing is accurate to a few microseconds on threads
/// that called [`precise_timers`].
pub fn sleep_until_ns(deadline_ns: u64) {
    const SPIN_NS: u64 = 20_000;
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return;
        }
        let left = deadline_ns - now;
        if left > SPIN_NS {
            std::thread::sleep(Duration::from_nanos(left - SPIN_NS / 2));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Sets this thread's timer slack to 1 ns (default 50 us), so sleeps end on time.
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_sleep_reaches_deadline() {
        let a = now_ns();
        let deadline = a + 1_000_000;
        sleep_until_ns(deadline);
        let b = now_ns();
        assert!(b >= deadline);
        sleep_until_ns(a); // in the past: returns at once
        assert!(now_ns() >= b);
    }
}
