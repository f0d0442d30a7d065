//! Fixed-bucket histograms, kept per core without synchronisation and merged across cores at
//! scrape time into Prometheus histograms (`_bucket{le}`, `_sum`, `_count`), which, unlike
//! summaries, can be aggregated over cores and brokers and keep moving with the traffic.

use std::cell::Cell;

/// Request latency bounds, in seconds (100 µs .. 30 s; long polls land in the top buckets).
pub const LATENCY_BOUNDS_S: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Size bounds, in bytes (256 B .. 64 MiB, factor 4).
pub const SIZE_BOUNDS_BYTES: &[f64] = &[
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// A histogram of one core. Lives on one core.
pub struct Buckets {
    bounds: &'static [f64],
    /// `counts[i]` counts values in `(bounds[i-1], bounds[i]]`; the last slot is above every
    /// bound (`+Inf`).
    counts: Box<[Cell<u64>]>,
    sum: Cell<f64>,
}

impl Buckets {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Buckets {
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bucket bounds ascend"
        );
        Buckets {
            bounds,
            counts: (0..=bounds.len()).map(|_| Cell::new(0)).collect(),
            sum: Cell::new(0.0),
        }
    }

    /// Counts one value (`le` semantics: a value equal to a bound falls in that bucket).
    pub fn record(&self, value: f64) {
        let slot = self.bounds.partition_point(|b| *b < value);
        let c = &self.counts[slot];
        c.set(c.get() + 1);
        self.sum.set(self.sum.get() + value);
    }

    /// The values counted so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.counts.iter().map(Cell::get).collect(),
            sum: self.sum.get(),
        }
    }
}

/// A histogram's values at one moment; crosses cores.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets (the last bucket, `+Inf`, has none).
    pub bounds: &'static [f64],
    /// Count per bucket, not cumulative; one more than `bounds`.
    pub counts: Vec<u64>,
    /// Sum of the values.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// Values counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other` (same bounds) into this one.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        assert_eq!(
            self.bounds, other.bounds,
            "merging histograms of one family"
        );
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum += other.sum;
    }

    /// `(upper bound, count)` per bucket, `+Inf` last, as prometheus-client encodes them.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        bounds.zip(self.counts.iter().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fall_in_the_bucket_of_their_upper_bound() {
        let h = Buckets::new(&[1.0, 2.0, 4.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 3.0, 9.0] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, [2, 2, 1, 1]);
        assert_eq!(s.count(), 6);
        assert_eq!(s.sum, 17.0);
        assert_eq!(s.buckets().last(), Some(&(f64::INFINITY, 1)));
    }

    #[test]
    fn merged_histograms_add_up() {
        let a = Buckets::new(LATENCY_BOUNDS_S);
        let b = Buckets::new(LATENCY_BOUNDS_S);
        a.record(0.001);
        b.record(0.001);
        b.record(100.0);
        let mut m = a.snapshot();
        m.merge(&b.snapshot());
        assert_eq!(m.count(), 3);
        assert_eq!(m.counts[LATENCY_BOUNDS_S.len()], 1);
        assert_eq!(m.counts[3], 2);
    }
}
