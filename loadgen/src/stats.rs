//! Measurement: latency histograms, throughput counters, and the pacer that makes fixed-rate
//! runs free of coordinated omission.
//!
//! Coordinated omission: a closed-loop load generator that waits for a slow response sends its
//! next record late, so the stall is recorded once instead of for every record that should have
//! been sent meanwhile. At a fixed rate, the [`Pacer`] gives every record an *intended* send time
//! (`start + n / rate`) and latency is measured from that time, not from when the send happened;
//! a stall then shows up in the latency of every record queued behind it. At the maximum rate
//! (no target) the intended time is the moment the producer starts the send.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency the histograms hold (1 hour, in microseconds); higher values saturate.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Significant decimal digits the histograms keep.
pub const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram from 1 us to [`LATENCY_US_MAX`].
    pub fn new() -> LatencyHistogram {
        let hist = Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGNIFICANT_DIGITS)
            .expect("bounds are valid");
        LatencyHistogram { hist }
    }

    /// Records one latency given in nanoseconds (rounded to microseconds, at least 1 us).
    pub fn record_ns(&mut self, latency_ns: u64) {
        let us = (latency_ns / 1_000).clamp(1, LATENCY_US_MAX);
        self.hist.saturating_record(us);
    }

    /// Adds all values of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.hist.add(&other.hist).expect("same bounds");
    }

    /// Forgets all values.
    pub fn reset(&mut self) {
        self.hist.reset();
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Percentiles in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1_000.0;
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.hist.len(),
            mean_ms: self.hist.mean() / 1_000.0,
            p50_ms: ms(self.hist.value_at_quantile(0.50)),
            p99_ms: ms(self.hist.value_at_quantile(0.99)),
            p999_ms: ms(self.hist.value_at_quantile(0.999)),
            p9999_ms: ms(self.hist.value_at_quantile(0.9999)),
            max_ms: ms(self.hist.max()),
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of measured records.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// 50th percentile.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// 99.99th percentile.
    pub p9999_ms: f64,
    /// Largest value.
    pub max_ms: f64,
}

impl LatencySummary {
    /// `(label, value)` pairs in percentile order, for tables and charts.
    pub fn points(&self) -> [(&'static str, f64); 5] {
        [
            ("p50", self.p50_ms),
            ("p99", self.p99_ms),
            ("p99.9", self.p999_ms),
            ("p99.99", self.p9999_ms),
            ("max", self.max_ms),
        ]
    }
}

/// Gives each record its intended send time.
///
/// Owned by one producer thread. When the target rate changes (rate discovery), the schedule
/// restarts at the moment of the change, as the OpenMessaging Benchmark's rate limiter does.
#[derive(Debug)]
pub struct Pacer {
    start_ns: u64,
    interval_ns: f64,
    sent: u64,
}

impl Pacer {
    /// A pacer for `rate_records_s` records per second from `start_ns`; 0 = unthrottled.
    pub fn new(start_ns: u64, rate_records_s: f64) -> Pacer {
        let mut p = Pacer {
            start_ns,
            interval_ns: 0.0,
            sent: 0,
        };
        p.reset(start_ns, rate_records_s);
        p
    }

    /// Restarts the schedule at `now_ns` with a new rate.
    pub fn reset(&mut self, now_ns: u64, rate_records_s: f64) {
        assert!(rate_records_s >= 0.0 && rate_records_s.is_finite());
        self.start_ns = now_ns;
        self.sent = 0;
        self.interval_ns = if rate_records_s == 0.0 {
            0.0
        } else {
            1e9 / rate_records_s
        };
    }

    /// True if the pacer has a target rate.
    pub fn is_paced(&self) -> bool {
        self.interval_ns > 0.0
    }

    /// The intended send time of the next record. Unthrottled: `now_ns`. Paced: on the
    /// schedule, even if that is in the past (the producer is behind).
    pub fn next_intended_ns(&mut self, now_ns: u64) -> u64 {
        let t = if self.is_paced() {
            self.start_ns + (self.sent as f64 * self.interval_ns) as u64
        } else {
            now_ns
        };
        self.sent += 1;
        t
    }
}

/// The current target rate of each producer, changed by the [`RateController`] and read by
/// the producer threads. Shared (`Arc`/reference) between the sampler and all producers.
#[derive(Debug)]
pub struct SharedRate {
    per_producer_bits: AtomicU64,
    epoch: AtomicU64,
}

impl SharedRate {
    /// A rate of `per_producer_records_s` (0 = unthrottled).
    pub fn new(per_producer_records_s: f64) -> SharedRate {
        SharedRate {
            per_producer_bits: AtomicU64::new(per_producer_records_s.to_bits()),
            epoch: AtomicU64::new(0),
        }
    }

    /// Sets a new rate per producer.
    pub fn set(&self, per_producer_records_s: f64) {
        assert!(per_producer_records_s.is_finite() && per_producer_records_s >= 0.0);
        self.per_producer_bits
            .store(per_producer_records_s.to_bits(), Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// The rate per producer.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.per_producer_bits.load(Ordering::Relaxed))
    }

    /// The new rate if it changed since `seen_epoch` (which is updated).
    pub fn changed(&self, seen_epoch: &mut u64) -> Option<f64> {
        let e = self.epoch.load(Ordering::Acquire);
        if e == *seen_epoch {
            return None;
        }
        *seen_epoch = e;
        Some(self.get())
    }
}

/// Finds the maximum sustainable rate (workloads with `rate_records_s = 0`), as the
/// OpenMessaging Benchmark's rate controller does: every period, if consumers fall behind
/// (receive backlog) or the broker acknowledges less than was offered (publish backlog), the
/// rate drops to what was actually achieved and the ramp factor halves; otherwise the rate grows
/// by the ramp factor, which doubles (up to 1) after three such periods in a row (OMB doubles it
/// every period, which makes the rate swing between the capacity and twice of it).
///
/// Owned by the sampler thread.
#[derive(Debug)]
pub struct RateController {
    rate_records_s: f64,
    ramp_factor: f64,
    successes: u32,
    last_acked: u64,
    last_consumed: u64,
}

/// Rate the discovery starts from.
pub const RATE_DISCOVERY_START_RECORDS_S: f64 = 10_000.0;
/// Lowest rate the discovery goes down to.
pub const RATE_DISCOVERY_MIN_RECORDS_S: f64 = 100.0;
/// Records behind (publish or receive) tolerated per period before the rate drops.
pub const RATE_BACKLOG_RECORDS_MAX: u64 = 1_000;
/// Seconds of records (at the current rate) that may wait in the client unacknowledged before
/// the rate discovery counts them as publish backlog.
pub const RATE_IN_FLIGHT_S_MAX: f64 = 0.05;
const RAMP_FACTOR_MIN: f64 = 0.01;
const RAMP_FACTOR_MAX: f64 = 1.0;
/// Periods without backlog in a row after which the ramp factor doubles again.
const RAMP_UP_AFTER_SUCCESSES: u32 = 3;

impl Default for RateController {
    fn default() -> Self {
        Self::new()
    }
}

impl RateController {
    /// Starts at [`RATE_DISCOVERY_START_RECORDS_S`].
    pub fn new() -> RateController {
        RateController {
            rate_records_s: RATE_DISCOVERY_START_RECORDS_S,
            ramp_factor: RAMP_FACTOR_MAX,
            successes: 0,
            last_acked: 0,
            last_consumed: 0,
        }
    }

    /// The current total rate.
    pub fn rate_records_s(&self) -> f64 {
        self.rate_records_s
    }

    /// The next total rate after a period of `period_s` seconds with these totals so far.
    /// `receive_backlog`: records acknowledged but not yet consumed (per group; 0 without
    /// consumers). `in_flight`: records sent but not yet acknowledged; more than
    /// [`RATE_IN_FLIGHT_S_MAX`] seconds of them means the client is queueing, which counts as
    /// publish backlog, so that latency at the discovered rate is not just queueing time.
    pub fn next_rate(
        &mut self,
        period_s: f64,
        acked_total: u64,
        consumed_total: u64,
        receive_backlog: u64,
        in_flight: u64,
    ) -> f64 {
        let expected = (self.rate_records_s * period_s) as u64;
        let acked = acked_total.saturating_sub(self.last_acked);
        let consumed = consumed_total.saturating_sub(self.last_consumed);
        self.last_acked = acked_total;
        self.last_consumed = consumed_total;
        let in_flight_max =
            ((self.rate_records_s * RATE_IN_FLIGHT_S_MAX) as u64).max(RATE_BACKLOG_RECORDS_MAX);
        let publish_backlog = expected
            .saturating_sub(acked)
            .max(in_flight.saturating_sub(in_flight_max));
        let next = if receive_backlog > RATE_BACKLOG_RECORDS_MAX {
            self.ramp_down(period_s, consumed, expected, receive_backlog)
        } else if publish_backlog > RATE_BACKLOG_RECORDS_MAX {
            self.ramp_down(period_s, acked, expected, publish_backlog)
        } else {
            let next = self.rate_records_s * (1.0 + self.ramp_factor);
            self.successes += 1;
            if self.successes >= RAMP_UP_AFTER_SUCCESSES {
                self.ramp_factor = (self.ramp_factor * 2.0).min(RAMP_FACTOR_MAX);
                self.successes = 0;
            }
            next
        };
        self.rate_records_s = next.max(RATE_DISCOVERY_MIN_RECORDS_S);
        self.rate_records_s
    }

    fn ramp_down(&mut self, period_s: f64, actual: u64, expected: u64, backlog: u64) -> f64 {
        self.ramp_factor = (self.ramp_factor / 2.0).max(RAMP_FACTOR_MIN);
        self.successes = 0;
        let next_expected = expected.saturating_sub(backlog) as f64 / period_s;
        let actual_rate = actual as f64 / period_s;
        actual_rate.min(next_expected)
    }
}

/// What travels with a record from send to acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendToken {
    /// Intended send time ([`crate::clock::now_ns`]).
    pub intended_ns: u64,
    /// Value size.
    pub bytes: u32,
}

/// Counters and histograms of one client (producer or consumer).
///
/// Shared (`Arc`) between the client's thread, the driver's acknowledgement path and the
/// sampler; counters are atomics, the histograms sit behind uncontended mutexes (one writer per
/// client).
#[derive(Debug)]
pub struct ClientStats {
    measure_from_ns: AtomicU64,
    measure_until_ns: AtomicU64,
    /// Records handed to the client.
    pub sent_records: AtomicU64,
    /// Records acknowledged without error.
    pub acked_records: AtomicU64,
    /// Value bytes acknowledged without error.
    pub acked_bytes: AtomicU64,
    /// Records that failed.
    pub errors: AtomicU64,
    /// Records received by a consumer.
    pub consumed_records: AtomicU64,
    /// Value bytes received by a consumer.
    pub consumed_bytes: AtomicU64,
    publish: Mutex<LatencyHistogram>,
    /// Publish latency of every acknowledgement since the sampler last drained it (warm-up
    /// included), for per-second percentiles.
    publish_window: Mutex<LatencyHistogram>,
    e2e: Mutex<LatencyHistogram>,
    first_error: Mutex<Option<String>>,
}

impl Default for ClientStats {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientStats {
    /// Empty stats; nothing is recorded in the histograms until [`Self::measure_between`].
    pub fn new() -> ClientStats {
        ClientStats {
            measure_from_ns: AtomicU64::new(u64::MAX),
            measure_until_ns: AtomicU64::new(u64::MAX),
            sent_records: AtomicU64::new(0),
            acked_records: AtomicU64::new(0),
            acked_bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            consumed_records: AtomicU64::new(0),
            consumed_bytes: AtomicU64::new(0),
            publish: Mutex::new(LatencyHistogram::new()),
            publish_window: Mutex::new(LatencyHistogram::new()),
            e2e: Mutex::new(LatencyHistogram::new()),
            first_error: Mutex::new(None),
        }
    }

    /// Records sent at intended times in `[from_ns, until_ns)` go into the histograms.
    pub fn measure_between(&self, from_ns: u64, until_ns: u64) {
        assert!(from_ns <= until_ns);
        self.measure_until_ns.store(until_ns, Ordering::Relaxed);
        self.measure_from_ns.store(from_ns, Ordering::Relaxed);
    }

    fn is_measured(&self, intended_ns: u64) -> bool {
        intended_ns >= self.measure_from_ns.load(Ordering::Relaxed)
            && intended_ns < self.measure_until_ns.load(Ordering::Relaxed)
    }

    /// A record was handed to the client.
    pub fn on_sent(&self) {
        self.sent_records.fetch_add(1, Ordering::Relaxed);
    }

    /// A record was acknowledged at `acked_ns` (or failed with `error`).
    pub fn on_ack(&self, token: SendToken, acked_ns: u64, error: Option<String>) {
        if let Some(e) = error {
            self.errors.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first_error.lock().expect("stats lock");
            first.get_or_insert(e);
            return;
        }
        self.acked_records.fetch_add(1, Ordering::Relaxed);
        self.acked_bytes
            .fetch_add(u64::from(token.bytes), Ordering::Relaxed);
        let latency = acked_ns.saturating_sub(token.intended_ns);
        self.publish_window
            .lock()
            .expect("stats lock")
            .record_ns(latency);
        if self.is_measured(token.intended_ns) {
            self.publish.lock().expect("stats lock").record_ns(latency);
        }
    }

    /// Records acknowledged without error, each `(token, acked_ns)`: what [`Self::on_ack`]
    /// does for each, with each histogram locked once for all of them (a producer collects
    /// the acknowledgements of whole batches at once).
    pub fn on_acks(&self, acks: &[(SendToken, u64)]) {
        if acks.is_empty() {
            return;
        }
        let bytes: u64 = acks.iter().map(|(t, _)| u64::from(t.bytes)).sum();
        self.acked_records
            .fetch_add(acks.len() as u64, Ordering::Relaxed);
        self.acked_bytes.fetch_add(bytes, Ordering::Relaxed);
        let latency = |(t, acked_ns): &(SendToken, u64)| acked_ns.saturating_sub(t.intended_ns);
        {
            let mut window = self.publish_window.lock().expect("stats lock");
            for ack in acks {
                window.record_ns(latency(ack));
            }
        }
        let mut publish = self.publish.lock().expect("stats lock");
        for ack in acks.iter().filter(|(t, _)| self.is_measured(t.intended_ns)) {
            publish.record_ns(latency(ack));
        }
    }

    /// A consumer received a record of `bytes` whose value carried `sent_ns` (if ours).
    pub fn on_received(&self, bytes: usize, sent_ns: Option<u64>, received_ns: u64) {
        self.consumed_records.fetch_add(1, Ordering::Relaxed);
        self.consumed_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        if let Some(sent) = sent_ns.filter(|&s| self.is_measured(s)) {
            let latency = received_ns.saturating_sub(sent);
            self.e2e.lock().expect("stats lock").record_ns(latency);
        }
    }

    /// A consumer-side error.
    pub fn on_error(&self, error: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error
            .lock()
            .expect("stats lock")
            .get_or_insert(error);
    }

    /// Current counter values.
    pub fn counters(&self) -> Counters {
        Counters {
            sent_records: self.sent_records.load(Ordering::Relaxed),
            acked_records: self.acked_records.load(Ordering::Relaxed),
            acked_bytes: self.acked_bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            consumed_records: self.consumed_records.load(Ordering::Relaxed),
            consumed_bytes: self.consumed_bytes.load(Ordering::Relaxed),
        }
    }

    /// Copy of the publish-latency histogram.
    pub fn publish_histogram(&self) -> LatencyHistogram {
        self.publish.lock().expect("stats lock").clone()
    }

    /// Adds the publish latencies recorded since the last call to `into`, and forgets them.
    pub fn drain_publish_window(&self, into: &mut LatencyHistogram) {
        let mut w = self.publish_window.lock().expect("stats lock");
        into.merge(&w);
        w.reset();
    }

    /// Copy of the end-to-end-latency histogram.
    pub fn e2e_histogram(&self) -> LatencyHistogram {
        self.e2e.lock().expect("stats lock").clone()
    }

    /// The first error message seen, if any.
    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().expect("stats lock").clone()
    }
}

/// A snapshot of counters (summed over clients with `+`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Records handed to producers.
    pub sent_records: u64,
    /// Records acknowledged.
    pub acked_records: u64,
    /// Value bytes acknowledged.
    pub acked_bytes: u64,
    /// Failures.
    pub errors: u64,
    /// Records consumed.
    pub consumed_records: u64,
    /// Value bytes consumed.
    pub consumed_bytes: u64,
}

impl std::ops::Add for Counters {
    type Output = Counters;
    fn add(self, o: Counters) -> Counters {
        Counters {
            sent_records: self.sent_records + o.sent_records,
            acked_records: self.acked_records + o.acked_records,
            acked_bytes: self.acked_bytes + o.acked_bytes,
            errors: self.errors + o.errors,
            consumed_records: self.consumed_records + o.consumed_records,
            consumed_bytes: self.consumed_bytes + o.consumed_bytes,
        }
    }
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters {
            sent_records: self.sent_records.saturating_sub(o.sent_records),
            acked_records: self.acked_records.saturating_sub(o.acked_records),
            acked_bytes: self.acked_bytes.saturating_sub(o.acked_bytes),
            errors: self.errors.saturating_sub(o.errors),
            consumed_records: self.consumed_records.saturating_sub(o.consumed_records),
            consumed_bytes: self.consumed_bytes.saturating_sub(o.consumed_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for us in 1..=10_000u64 {
            h.record_ns(us * 1_000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        assert!(close(s.p50_ms, 5.0), "{s:?}");
        assert!(close(s.p99_ms, 9.9), "{s:?}");
        assert!(close(s.p999_ms, 9.99), "{s:?}");
        assert!(close(s.max_ms, 10.0), "{s:?}");
        assert!(close(s.mean_ms, 5.0005), "{s:?}");
    }

    #[test]
    fn empty_histogram_summary_is_zero_and_values_saturate() {
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
        let mut h = LatencyHistogram::new();
        h.record_ns(0);
        h.record_ns(u64::MAX);
        let s = h.summary();
        assert_eq!(s.count, 2);
        assert!(s.p50_ms <= 0.002);
        assert!(s.max_ms >= LATENCY_US_MAX as f64 / 1_000.0 * 0.999);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        a.record_ns(1_000_000);
        b.record_ns(3_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert!((a.summary().max_ms - 3.0).abs() < 0.01);
    }

    #[test]
    fn unthrottled_pacer_uses_now() {
        let mut p = Pacer::new(1_000, 0.0);
        assert!(!p.is_paced());
        assert_eq!(p.next_intended_ns(5_000), 5_000);
        assert_eq!(p.next_intended_ns(9_000), 9_000);
    }

    #[test]
    fn paced_schedule_ignores_when_sends_happen() {
        let mut p = Pacer::new(1_000_000, 1_000.0); // 1 ms apart
        assert!(p.is_paced());
        let times: Vec<u64> = (0..4).map(|_| p.next_intended_ns(u64::MAX)).collect();
        assert_eq!(times, vec![1_000_000, 2_000_000, 3_000_000, 4_000_000]);
    }

    #[test]
    fn pacer_reset_restarts_the_schedule() {
        let mut p = Pacer::new(0, 1_000.0);
        p.next_intended_ns(0);
        p.next_intended_ns(0);
        p.reset(10_000_000, 2_000.0);
        assert_eq!(p.next_intended_ns(0), 10_000_000);
        assert_eq!(p.next_intended_ns(0), 10_500_000);
        p.reset(20_000_000, 0.0);
        assert!(!p.is_paced());
        assert_eq!(p.next_intended_ns(7), 7);
    }

    #[test]
    fn shared_rate_reports_changes_once() {
        let r = SharedRate::new(5.0);
        let mut seen = 0;
        assert_eq!(r.changed(&mut seen), None);
        r.set(7.0);
        assert_eq!(r.changed(&mut seen), Some(7.0));
        assert_eq!(r.changed(&mut seen), None);
        assert_eq!(r.get(), 7.0);
    }

    /// A simulated broker that acknowledges at most 50,000 records/s: the controller ramps up,
    /// then settles near the capacity.
    #[test]
    fn rate_controller_converges_on_capacity() {
        let capacity = 50_000.0;
        let mut c = RateController::new();
        let (mut acked, mut consumed) = (0u64, 0u64);
        let mut rates = Vec::new();
        for _ in 0..60 {
            let offered = c.rate_records_s();
            let done = offered.min(capacity) as u64;
            acked += done;
            consumed += done;
            rates.push(c.next_rate(1.0, acked, consumed, 0, 0));
        }
        let tail = &rates[30..];
        let mean = tail.iter().sum::<f64>() / tail.len() as f64;
        assert!(mean > capacity * 0.8 && mean < capacity * 1.2, "{rates:?}");
        assert!(
            rates[..3].windows(2).all(|w| w[1] > w[0]),
            "ramps up first: {rates:?}"
        );
    }

    #[test]
    fn rate_controller_backs_off_when_consumers_lag() {
        let mut c = RateController::new();
        let r1 = c.next_rate(1.0, 10_000, 10_000, 0, 0);
        assert!(r1 > RATE_DISCOVERY_START_RECORDS_S);
        let r2 = c.next_rate(1.0, 10_000 + r1 as u64, 12_000, 50_000, 0);
        assert!(r2 < r1, "{r1} -> {r2}");
        assert!(r2 >= RATE_DISCOVERY_MIN_RECORDS_S);
    }

    #[test]
    fn rate_controller_backs_off_when_the_client_queues() {
        let mut c = RateController::new();
        // Everything offered was acknowledged, but 5 s worth is queued in the client.
        let r = c.next_rate(1.0, 10_000, 10_000, 0, 50_000);
        assert!(r < RATE_DISCOVERY_START_RECORDS_S, "{r}");
        // A little in flight is normal pipelining.
        let mut c = RateController::new();
        let r = c.next_rate(1.0, 10_000, 10_000, 0, 400);
        assert!(r > RATE_DISCOVERY_START_RECORDS_S, "{r}");
    }

    /// A 100 ms stall at 1000 records/s: a closed-loop measurement sees one slow record; the
    /// corrected one sees the ~100 records that should have been sent during the stall.
    #[test]
    fn coordinated_omission_is_corrected() {
        let rate = 1_000.0;
        let service_ns = 100_000; // 0.1 ms per record normally
        let stall_at = 500;
        let stall_ns = 100_000_000;
        let mut pacer = Pacer::new(0, rate);
        let stats = ClientStats::new();
        stats.measure_between(0, u64::MAX);
        let mut naive = LatencyHistogram::new();
        let mut free_at = 0u64; // when the broker can take the next record
        for i in 0..1_000 {
            let intended = pacer.next_intended_ns(0);
            let actual_send = intended.max(free_at);
            let mut done = actual_send + service_ns;
            if i == stall_at {
                done += stall_ns;
            }
            free_at = done;
            naive.record_ns(done - actual_send);
            stats.on_ack(
                SendToken {
                    intended_ns: intended,
                    bytes: 1,
                },
                done,
                None,
            );
        }
        let corrected = stats.publish_histogram().summary();
        let naive = naive.summary();
        assert!(naive.p99_ms < 1.0, "naive hides the stall: {naive:?}");
        assert!(naive.max_ms > 99.0);
        assert!(corrected.p99_ms > 50.0, "corrected: {corrected:?}");
        assert!(corrected.p50_ms < 1.0);
        assert!(corrected.max_ms > 99.0);
    }

    #[test]
    fn warmup_and_errors_are_not_recorded_in_histograms() {
        let s = ClientStats::new();
        let tok = |t| SendToken {
            intended_ns: t,
            bytes: 100,
        };
        s.on_ack(tok(10), 20, None); // before measuring starts
        s.measure_between(100, 200);
        s.on_ack(tok(150), 160, None);
        s.on_ack(tok(250), 260, None); // after the end
        s.on_ack(tok(150), 170, Some("boom".into()));
        s.on_received(100, Some(150), 1_150);
        s.on_received(100, Some(50), 1_150);
        s.on_received(100, None, 1_150);
        let c = s.counters();
        assert_eq!(c.acked_records, 3);
        assert_eq!(c.acked_bytes, 300);
        assert_eq!(c.errors, 1);
        assert_eq!(c.consumed_records, 3);
        assert_eq!(s.publish_histogram().count(), 1);
        let mut window = LatencyHistogram::new();
        s.drain_publish_window(&mut window);
        assert_eq!(
            window.count(),
            3,
            "windows see warm-up acknowledgements too"
        );
        s.drain_publish_window(&mut window);
        assert_eq!(window.count(), 3, "drained");
        assert_eq!(s.e2e_histogram().count(), 1);
        assert_eq!(s.first_error().as_deref(), Some("boom"));
    }

    /// Recording a collection's acknowledgements at once counts and measures what recording
    /// each alone does.
    #[test]
    fn acknowledgements_recorded_together_count_as_each_alone() {
        let tok = |t| SendToken {
            intended_ns: t,
            bytes: 100,
        };
        let acks = [
            (tok(10), 20),
            (tok(150), 160_000),
            (tok(199), 210),
            (tok(250), 260),
        ];
        let (one, all) = (ClientStats::new(), ClientStats::new());
        for s in [&one, &all] {
            s.measure_between(100, 200);
        }
        for (t, at) in acks {
            one.on_ack(t, at, None);
        }
        all.on_acks(&acks);
        all.on_acks(&[]);
        let (a, b) = (one.counters(), all.counters());
        assert_eq!((a.acked_records, a.acked_bytes), (4, 400));
        assert_eq!((b.acked_records, b.acked_bytes), (4, 400));
        let (x, y) = (one.publish_histogram(), all.publish_histogram());
        assert_eq!((x.count(), y.count()), (2, 2), "only the measured two");
        assert_eq!(x.summary().max_ms, y.summary().max_ms);
        let (mut wx, mut wy) = (LatencyHistogram::new(), LatencyHistogram::new());
        one.drain_publish_window(&mut wx);
        all.drain_publish_window(&mut wy);
        assert_eq!((wx.count(), wy.count()), (4, 4));
    }

    #[test]
    fn counters_add_and_subtract() {
        let a = Counters {
            acked_records: 5,
            consumed_bytes: 7,
            ..Default::default()
        };
        let b = a + a;
        assert_eq!(b.acked_records, 10);
        assert_eq!((b - a), a);
        assert_eq!((a - b).acked_records, 0);
    }
}
