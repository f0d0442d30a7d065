//! Record values and keys.
//!
//! Every value starts with a 12-byte header: the magic `BGLG` and the intended send time
//! ([`crate::clock::now_ns`], little-endian u64). The consumer reads the header to measure the
//! end-to-end latency. The rest of the value is a fixed template (random or text), the same for
//! every record, as in the OpenMessaging Benchmark.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::workload::{KeyDistribution, PayloadKind};

/// Magic at the start of every value the load generator writes.
pub const MAGIC: [u8; 4] = *b"BGLG";
/// Size of the value header: magic + u64 timestamp.
pub const HEADER_BYTES: usize = 12;

/// Makes the value template of `size_bytes`, header included (timestamp zero).
pub fn template(kind: PayloadKind, size_bytes: usize, seed: u64) -> Vec<u8> {
    assert!(size_bytes >= HEADER_BYTES);
    let mut v = vec![0u8; size_bytes];
    v[..4].copy_from_slice(&MAGIC);
    let body = &mut v[HEADER_BYTES..];
    match kind {
        PayloadKind::Random => SmallRng::seed_from_u64(seed).fill_bytes(body),
        PayloadKind::Text => {
            const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog; \
                pack my box with five dozen liquor jugs. ";
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut i = 0;
            while i < body.len() {
                let start = rng.gen_range(0..TEXT.len());
                let chunk = &TEXT[start..];
                let n = chunk.len().min(body.len() - i);
                body[i..i + n].copy_from_slice(&chunk[..n]);
                i += n;
            }
        }
    }
    v
}

/// Writes the send timestamp into a value made by [`template`].
pub fn stamp(value: &mut [u8], send_ns: u64) {
    value[4..HEADER_BYTES].copy_from_slice(&send_ns.to_le_bytes());
}

/// Reads the send timestamp of a value, if it is one of ours.
pub fn read_stamp(value: &[u8]) -> Option<u64> {
    if value.len() < HEADER_BYTES || value[..4] != MAGIC {
        return None;
    }
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&value[4..HEADER_BYTES]);
    Some(u64::from_le_bytes(ts))
}

/// Chooses record keys by a [`KeyDistribution`]. One per producer (not shared).
pub struct KeyGenerator {
    rng: SmallRng,
    kind: KeyKind,
    buf: String,
}

enum KeyKind {
    None,
    Uniform(u64),
    /// Cumulative weights of ranks 1..=count, normalized to end at 1.0.
    Zipf(Vec<f64>),
}

/// Largest key space for which the zipf table is precomputed (8 bytes per key).
pub const ZIPF_TABLE_KEYS_MAX: u64 = 10_000_000;

impl KeyGenerator {
    /// A generator for `dist`, seeded for reproducible runs.
    pub fn new(dist: &KeyDistribution, seed: u64) -> KeyGenerator {
        let kind = match *dist {
            KeyDistribution::None => KeyKind::None,
            KeyDistribution::Uniform { count } => KeyKind::Uniform(count),
            KeyDistribution::Zipf { count, exponent } => {
                KeyKind::Zipf(zipf_cdf(count.min(ZIPF_TABLE_KEYS_MAX), exponent))
            }
        };
        KeyGenerator {
            rng: SmallRng::seed_from_u64(seed),
            kind,
            buf: String::new(),
        }
    }

    /// The index of the next key (0-based rank; 0 is the hottest for zipf), or `None`.
    pub fn next_index(&mut self) -> Option<u64> {
        match &self.kind {
            KeyKind::None => None,
            KeyKind::Uniform(count) => Some(self.rng.gen_range(0..*count)),
            KeyKind::Zipf(cdf) => {
                let u: f64 = self.rng.gen();
                let i = cdf.partition_point(|&c| c < u);
                Some(i.min(cdf.len() - 1) as u64)
            }
        }
    }

    /// The next key as bytes (`key-<index>`), or `None` for unkeyed records.
    pub fn next_key(&mut self) -> Option<&[u8]> {
        use std::fmt::Write;
        let i = self.next_index()?;
        self.buf.clear();
        let _ = write!(self.buf, "key-{i}");
        Some(self.buf.as_bytes())
    }
}

fn zipf_cdf(count: u64, exponent: f64) -> Vec<f64> {
    assert!(count > 0);
    let mut cdf = Vec::with_capacity(count as usize);
    let mut sum = 0.0;
    for k in 1..=count {
        sum += 1.0 / (k as f64).powf(exponent);
        cdf.push(sum);
    }
    for c in &mut cdf {
        *c /= sum;
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips() {
        for kind in [PayloadKind::Random, PayloadKind::Text] {
            let mut v = template(kind, 1024, 7);
            assert_eq!(v.len(), 1024);
            assert_eq!(read_stamp(&v), Some(0));
            stamp(&mut v, 123_456_789_012);
            assert_eq!(read_stamp(&v), Some(123_456_789_012));
        }
        assert_eq!(read_stamp(b"short"), None);
        assert_eq!(read_stamp(&[0u8; 64]), None);
    }

    #[test]
    fn text_payload_compresses_and_random_does_not() {
        let text = template(PayloadKind::Text, 64 * 1024, 1);
        let random = template(PayloadKind::Random, 64 * 1024, 1);
        let distinct = |v: &[u8]| {
            let mut seen = [false; 256];
            v.iter().for_each(|&b| seen[b as usize] = true);
            seen.iter().filter(|&&s| s).count()
        };
        assert!(distinct(&text) < 40);
        assert!(distinct(&random) > 250);
    }

    #[test]
    fn no_keys() {
        let mut g = KeyGenerator::new(&KeyDistribution::None, 1);
        assert_eq!(g.next_key(), None);
    }

    #[test]
    fn uniform_keys_stay_in_range_and_cover_it() {
        let mut g = KeyGenerator::new(&KeyDistribution::Uniform { count: 10 }, 1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[g.next_index().unwrap() as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800 && n < 1200), "{seen:?}");
        assert!(g.next_key().unwrap().starts_with(b"key-"));
    }

    #[test]
    fn zipf_keys_are_skewed_to_low_ranks() {
        let dist = KeyDistribution::Zipf {
            count: 1000,
            exponent: 1.0,
        };
        let mut g = KeyGenerator::new(&dist, 3);
        let mut seen = vec![0u32; 1000];
        let n = 100_000;
        for _ in 0..n {
            seen[g.next_index().unwrap() as usize] += 1;
        }
        // Rank 1 has weight 1/H(1000) ~ 13.4 %; rank 2 half of that.
        let p0 = f64::from(seen[0]) / f64::from(n);
        assert!((0.12..0.15).contains(&p0), "p0 = {p0}");
        assert!(seen[0] > seen[1] && seen[1] > seen[9] && seen[9] > seen[500]);
    }

    #[test]
    fn zipf_cdf_ends_at_one() {
        let cdf = zipf_cdf(5, 2.0);
        assert_eq!(cdf.len(), 5);
        assert!((cdf[4] - 1.0).abs() < 1e-12);
        assert!(cdf.windows(2).all(|w| w[0] < w[1]));
    }
}
