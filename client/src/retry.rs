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
