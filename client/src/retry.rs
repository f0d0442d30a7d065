//! Retry backoff: exponential from `retry_backoff_ms` to `retry_backoff_max_ms`, with ±20 %
//! jitter so that many clients that failed together do not retry together.

/// The backoff before attempt `attempt` (1 = the first retry), in ms.
pub(crate) fn backoff_ms(attempt: u32, base_ms: u64, max_ms: u64, jitter_seed: u64) -> u64 {
    let exponent = attempt.saturating_sub(1).min(32);
    let raw = base_ms.saturating_mul(1u64 << exponent).min(max_ms);
    // Jitter in [-20 %, +20 %], from a cheap hash of the seed.
    let spread = raw / 5;
    if spread == 0 {
        return raw;
    }
    let hash = splitmix64(jitter_seed);
    let offset = hash % (2 * spread + 1);
    (raw - spread + offset).min(max_ms.max(raw))
}

/// A small, fast, well-mixed pseudo-random step (SplitMix64).
pub(crate) fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_and_is_capped() {
        for seed in 0..200 {
            let first = backoff_ms(1, 100, 1000, seed);
            assert!((80..=120).contains(&first), "{first}");
            let second = backoff_ms(2, 100, 1000, seed);
            assert!((160..=240).contains(&second), "{second}");
            let late = backoff_ms(30, 100, 1000, seed);
            assert!((800..=1000).contains(&late), "{late}");
            assert!(backoff_ms(u32::MAX, 100, 1000, seed) <= 1000);
        }
        assert_eq!(backoff_ms(1, 0, 0, 7), 0);
        assert_eq!(backoff_ms(3, 1, 1000, 7), 4);
    }

    #[test]
    fn jitter_spreads_retries() {
        let values: std::collections::HashSet<u64> =
            (0..100).map(|s| backoff_ms(1, 1000, 10_000, s)).collect();
        assert!(values.len() > 20);
    }
}

/// How often one kind of repeated warning (a retried produce error, a failing fetch) is logged
/// at most.
pub(crate) const WARN_INTERVAL_MS: u64 = 10_000;
/// Distinct warning keys remembered at most (older ones are forgotten, so warned again).
const WARN_KEYS_MAX: usize = 1_024;

/// Rate limit for warnings about conditions that retries hide: the first occurrence of a key
/// is logged, repeats at most every `interval`. `Sync`; one short lock per check.
#[derive(Debug)]
pub(crate) struct WarnLimiter {
    interval: std::time::Duration,
    last: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl WarnLimiter {
    pub(crate) fn new(interval_ms: u64) -> WarnLimiter {
        WarnLimiter {
            interval: std::time::Duration::from_millis(interval_ms),
            last: Default::default(),
        }
    }

    /// Whether a warning with `key` should be logged now (and records that it was).
    pub(crate) fn allow(&self, key: &str) -> bool {
        let now = std::time::Instant::now();
        let mut last = match self.last.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if last
            .get(key)
            .is_some_and(|at| now.duration_since(*at) < self.interval)
        {
            return false;
        }
        if last.len() >= WARN_KEYS_MAX {
            last.clear();
        }
        last.insert(key.to_string(), now);
        true
    }

    /// Forgets `key`, so that its next occurrence is logged at once (the condition ended).
    pub(crate) fn reset(&self, key: &str) {
        if let Ok(mut last) = self.last.lock() {
            last.remove(key);
        }
    }
}

#[cfg(test)]
mod warn_tests {
    use super::*;

    #[test]
    fn a_key_warns_once_per_interval_until_reset() {
        let limiter = WarnLimiter::new(60_000);
        assert!(limiter.allow("a"));
        assert!(!limiter.allow("a"));
        assert!(limiter.allow("b"));
        limiter.reset("a");
        assert!(limiter.allow("a"));
        let always = WarnLimiter::new(0);
        assert!(always.allow("x") && always.allow("x"));
    }
}
