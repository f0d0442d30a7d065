//! Runs one workload through a [`Driver`] and measures it. The same code for every driver.
//!
//! Threads: one per producer, one per consumer (all scoped to the run), and the calling thread,
//! which samples counters and `/proc` every second, prints the progress line and decides when
//! the run ends.
//!
//! Timeline of a normal run: topics are created (fresh names, so consumers start at the
//! beginning and miss nothing); consumers start; producers start at `t0`; warm-up until
//! `t0 + warmup_s`; measured until `t0 + warmup_s + duration_s`; then producers flush and
//! consumers drain what was acknowledged (at most [`DRAIN_TIMEOUT`]).
//!
//! A backlog (catch-up) run: producers write `backlog_size_bytes` with no consumer running
//! (publish latency measured over this phase), then stop; consumers then read everything from
//! the beginning and the time they take is the catch-up time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{now_ns, sleep_until_ns};
use crate::driver::{
    ConsumerDriver, ConsumerSpec, Driver, OutRecord, ProducerDriver, ProducerSpec, StartAt,
    TopicSpec,
};
use crate::error::LoadgenError;
use crate::machine::MachineInfo;
use crate::payload::{self, KeyGenerator};
use crate::procstat::{self, ProcSample, ProcUsage};
use crate::result::{BacklogSummary, RunResult, Summary, Window, MB_BYTES, RESULT_SCHEMA_VERSION};
use crate::stats::{
    ClientStats, Counters, LatencyHistogram, Pacer, RateController, SendToken, SharedRate,
    RATE_DISCOVERY_START_RECORDS_S,
};
use crate::workload::{assign_partitions, MaxRateMode, Workload};

/// How long producers may take to flush at the end.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long consumers may take to read what was acknowledged, after the producers stopped.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest phase of a backlog run (writing the backlog, reading it).
pub const BACKLOG_PHASE_TIMEOUT: Duration = Duration::from_secs(900);
/// Consumer poll wait.
const CONSUMER_POLL_WAIT: Duration = Duration::from_millis(100);
/// How often the sampler checks whether a phase is over.
const SAMPLER_TICK: Duration = Duration::from_millis(10);
/// Pause after a failed send or poll.
const ERROR_PAUSE: Duration = Duration::from_millis(100);
const S_NS: u64 = 1_000_000_000;

/// Options of one run besides the workload.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The broker's bootstrap address (for the result file).
    pub bootstrap: String,
    /// Broker process to sample; `None` = no broker CPU/RSS.
    pub broker_pid: Option<u32>,
    /// Topic names are `<topic_prefix>-<i>`.
    pub topic_prefix: String,
    /// Keep the topics after the run.
    pub keep_topics: bool,
    /// Print a progress line every second on stderr.
    pub progress: bool,
    /// Seed of the key and payload generators; each producer gets its own, derived from this
    /// and its index, so a seeded run is reproducible.
    pub seed: u64,
    /// The command line, recorded in the result.
    pub command: String,
}

/// Shared between the sampler and the client threads of one run.
struct Control {
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    producers_running: AtomicU64,
    rate: SharedRate,
}

/// Creates the topics, runs the workload, deletes the topics (unless kept).
pub fn run(
    driver: &dyn Driver,
    workload: &Workload,
    opts: &RunOptions,
) -> Result<RunResult, LoadgenError> {
    let topics = workload.topic_names(&opts.topic_prefix);
    let specs: Vec<TopicSpec> = topics
        .iter()
        .map(|name| TopicSpec {
            name: name.clone(),
            partitions: workload.partitions_per_topic,
            durability: workload.topic.durability,
            flush_interval_ms: workload.topic.flush_interval_ms,
            replication_factor: workload.topic.replication_factor.unwrap_or(1),
            min_insync_replicas: workload.topic.min_insync_replicas,
        })
        .collect();
    progress(
        opts,
        &format!("creating {} topic(s) on {}", topics.len(), driver.name()),
    );
    driver.create_topics(&specs)?;
    let result = run_on_topics(driver, workload, opts, &topics);
    if !opts.keep_topics {
        if let Err(e) = driver.delete_topics(&topics) {
            progress(opts, &format!("warning: deleting topics failed: {e}"));
        }
    }
    result
}

fn progress(opts: &RunOptions, line: &str) {
    if opts.progress {
        eprintln!("{line}");
    }
}

/// Everything the client threads of one run share with the sampler.
struct Clients {
    producer_stats: Vec<Arc<ClientStats>>,
    consumer_stats: Vec<Arc<ClientStats>>,
}

impl Clients {
    fn totals(&self) -> Counters {
        self.producer_stats
            .iter()
            .chain(&self.consumer_stats)
            .fold(Counters::default(), |acc, s| acc + s.counters())
    }
}

type Producers = Vec<(Box<dyn ProducerDriver>, String)>;
type Consumers = Vec<Box<dyn ConsumerDriver>>;

fn make_producers(
    driver: &dyn Driver,
    w: &Workload,
    topics: &[String],
) -> Result<(Producers, Vec<Arc<ClientStats>>), LoadgenError> {
    let mut producers = Vec::new();
    let mut stats = Vec::new();
    for topic in topics {
        for i in 0..w.producer.producers_per_topic {
            let s = Arc::new(ClientStats::new());
            let spec = ProducerSpec {
                client_id: format!("loadgen-{topic}-p{i}"),
                settings: w.producer.clone(),
            };
            producers.push((driver.producer(&spec, s.clone())?, topic.clone()));
            stats.push(s);
        }
    }
    Ok((producers, stats))
}

/// The consumers of a workload: per topic, per subscription (group), per member.
pub fn consumer_specs(w: &Workload, topics: &[String], prefix: &str) -> Vec<ConsumerSpec> {
    let c = &w.consumer;
    let mut specs = Vec::new();
    for topic in topics {
        for g in 0..c.subscriptions_per_topic {
            for m in 0..c.consumers_per_subscription {
                let parts =
                    assign_partitions(w.partitions_per_topic, m, c.consumers_per_subscription);
                specs.push(ConsumerSpec {
                    client_id: format!("loadgen-{topic}-g{g}-c{m}"),
                    group_id: format!("{prefix}-sub-{g}"),
                    assignment: parts.into_iter().map(|p| (topic.clone(), p)).collect(),
                    start: StartAt::Beginning,
                    fetch_max_wait_ms: c.fetch_max_wait_ms,
                    partition_fetch_bytes_max: c.partition_fetch_bytes_max,
                });
            }
        }
    }
    specs
}

fn make_consumers(
    driver: &dyn Driver,
    w: &Workload,
    topics: &[String],
    prefix: &str,
) -> Result<(Consumers, Vec<Arc<ClientStats>>), LoadgenError> {
    let mut consumers = Vec::new();
    let mut stats = Vec::new();
    for spec in consumer_specs(w, topics, prefix) {
        consumers.push(driver.consumer(&spec)?);
        stats.push(Arc::new(ClientStats::new()));
    }
    Ok((consumers, stats))
}

fn run_on_topics(
    driver: &dyn Driver,
    w: &Workload,
    opts: &RunOptions,
    topics: &[String],
) -> Result<RunResult, LoadgenError> {
    let backlog = w.consumer.backlog_size_bytes > 0;
    let (producers, producer_stats) = make_producers(driver, w, topics)?;
    let (consumers, consumer_stats) = make_consumers(driver, w, topics, &opts.topic_prefix)?;
    let clients = Clients {
        producer_stats,
        consumer_stats,
    };
    let ctl = Control {
        stop_producers: AtomicBool::new(false),
        stop_consumers: AtomicBool::new(false),
        producers_running: AtomicU64::new(producers.len() as u64),
        rate: SharedRate::new(initial_rate_per_producer(w, producers.len(), backlog)),
    };
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut consumers = Some(consumers);
    let outcome = std::thread::scope(|scope| {
        let mut sampler = Sampler::new(opts, &clients);
        let t0 = sampler.t0_ns;
        let consumer_threads = if backlog {
            None
        } else {
            Some(start_consumers(
                scope,
                consumers.take().unwrap_or_default(),
                &clients,
                &ctl,
            ))
        };
        let (measure_from, end) = timeline(w, t0, backlog);
        let publish_until = if backlog { u64::MAX } else { end };
        for s in &clients.producer_stats {
            s.measure_between(measure_from, publish_until);
        }
        // End-to-end latency of a backlog read is the backlog's age, not a latency: not recorded.
        if !backlog {
            for s in &clients.consumer_stats {
                s.measure_between(measure_from, end);
            }
        }
        for (index, ((p, topic), s)) in producers
            .into_iter()
            .zip(&clients.producer_stats)
            .enumerate()
        {
            let job = ProducerJob {
                workload: w,
                topic,
                stats: s.clone(),
                seed: client_seed(opts.seed, index),
                start_ns: t0,
                end_ns: end,
            };
            let ctl = &ctl;
            scope.spawn(move || job.run(p, ctl));
        }
        if backlog {
            let done = sampler.backlog_phase(w, &ctl);
            let consumers = consumers.take().unwrap_or_default();
            let consumer_threads = start_consumers(scope, consumers, &clients, &ctl);
            let outcome = sampler.catch_up_phase(w, done);
            ctl.stop_consumers.store(true, Ordering::Relaxed);
            join_consumers(consumer_threads);
            outcome
        } else {
            let outcome = sampler.measured_run(w, &ctl, measure_from, end);
            ctl.stop_consumers.store(true, Ordering::Relaxed);
            join_consumers(consumer_threads.unwrap_or_default());
            outcome
        }
    });
    let summary = summarize(w, &clients, &outcome);
    Ok(RunResult {
        schema_version: RESULT_SCHEMA_VERSION,
        workload: w.clone(),
        driver: driver.name().to_string(),
        driver_info: driver.describe(),
        bootstrap: opts.bootstrap.clone(),
        command: opts.command.clone(),
        started_unix_s,
        machine: MachineInfo::current(),
        broker_pid: opts.broker_pid,
        summary,
        windows: outcome.windows,
    })
}

/// The starting rate of each producer: the workload's, or the rate discovery's start, or
/// unthrottled while writing a backlog.
fn initial_rate_per_producer(w: &Workload, producers: usize, backlog: bool) -> f64 {
    if w.producer.rate_records_s > 0 {
        w.rate_per_producer_records_s()
    } else if backlog || w.producer.max_rate_mode == MaxRateMode::Unthrottled {
        0.0
    } else {
        RATE_DISCOVERY_START_RECORDS_S / producers.max(1) as f64
    }
}

/// `(measure_from_ns, end_ns)` of a run starting at `t0`.
fn timeline(w: &Workload, t0: u64, backlog: bool) -> (u64, u64) {
    if backlog {
        (t0, t0 + BACKLOG_PHASE_TIMEOUT.as_nanos() as u64)
    } else {
        let from = t0 + w.run.warmup_s * S_NS;
        (from, from + w.run.duration_s * S_NS)
    }
}

fn start_consumers<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    consumers: Consumers,
    clients: &Clients,
    ctl: &'scope Control,
) -> Vec<std::thread::ScopedJoinHandle<'scope, ()>> {
    consumers
        .into_iter()
        .zip(&clients.consumer_stats)
        .map(|(c, s)| {
            let s = s.clone();
            scope.spawn(move || consume(c, &s, ctl))
        })
        .collect()
}

fn join_consumers(threads: Vec<std::thread::ScopedJoinHandle<'_, ()>>) {
    for t in threads {
        // A panicking client thread is a bug in the driver; surface it.
        if let Err(p) = t.join() {
            std::panic::resume_unwind(p);
        }
    }
}

fn consume(mut consumer: Box<dyn ConsumerDriver>, stats: &ClientStats, ctl: &Control) {
    let mut on_value = |v: &[u8]| stats.on_received(v.len(), payload::read_stamp(v), now_ns());
    while !ctl.stop_consumers.load(Ordering::Relaxed) {
        if let Err(e) = consumer.poll(CONSUMER_POLL_WAIT, &mut on_value) {
            stats.on_error(e.to_string());
            std::thread::sleep(ERROR_PAUSE);
        }
    }
}

/// One producer thread's work.
struct ProducerJob<'a> {
    workload: &'a Workload,
    topic: String,
    stats: Arc<ClientStats>,
    seed: u64,
    start_ns: u64,
    end_ns: u64,
}

impl ProducerJob<'_> {
    fn run(self, mut producer: Box<dyn ProducerDriver>, ctl: &Control) {
        let w = self.workload;
        let mut keys = KeyGenerator::new(&w.keys, self.seed);
        let mut value = payload::template(w.payload, w.record_size_bytes, self.seed);
        let bytes = u32::try_from(value.len()).unwrap_or(u32::MAX);
        crate::clock::precise_timers();
        let mut epoch = 0;
        let mut pacer = Pacer::new(self.start_ns, ctl.rate.get());
        sleep_until_ns(self.start_ns);
        while !ctl.stop_producers.load(Ordering::Relaxed) {
            let now = now_ns();
            if let Some(rate) = ctl.rate.changed(&mut epoch) {
                pacer.reset(now, rate);
            }
            let intended = pacer.next_intended_ns(now);
            if intended >= self.end_ns || now >= self.end_ns {
                break;
            }
            if pacer.is_paced() {
                sleep_until_ns(intended);
            }
            payload::stamp(&mut value, intended);
            let record = OutRecord {
                topic: &self.topic,
                key: keys.next_key(),
                value: &value,
            };
            self.stats.on_sent();
            let token = SendToken {
                intended_ns: intended,
                bytes,
            };
            if let Err(e) = producer.send(record, token) {
                self.stats.on_error(e.to_string());
                std::thread::sleep(ERROR_PAUSE);
            }
        }
        if let Err(e) = producer.flush(FLUSH_TIMEOUT) {
            self.stats.on_error(format!("flush: {e}"));
        }
        drop(producer);
        ctl.producers_running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the sampler saw.
#[derive(Default)]
struct Outcome {
    windows: Vec<Window>,
    measured: Counters,
    measured_s: f64,
    broker: Vec<ProcUsage>,
    loadgen_cpu: Vec<f64>,
    backlog: Option<BacklogSummary>,
}

/// Samples counters and `/proc` once per second and prints progress. Lives on the calling
/// thread of [`run`].
struct Sampler<'a> {
    opts: &'a RunOptions,
    clients: &'a Clients,
    t0_ns: u64,
    next_window_ns: u64,
    last_window_ns: u64,
    last: Counters,
    broker_last: Option<ProcSample>,
    self_last: Option<ProcSample>,
    outcome: Outcome,
}

impl<'a> Sampler<'a> {
    fn new(opts: &'a RunOptions, clients: &'a Clients) -> Sampler<'a> {
        let t0_ns = now_ns() + 100_000_000; // producers start 100 ms from now
        Sampler {
            opts,
            clients,
            t0_ns,
            next_window_ns: t0_ns + S_NS,
            last_window_ns: t0_ns,
            last: Counters::default(),
            broker_last: opts.broker_pid.and_then(|p| procstat::sample(p).ok()),
            self_last: procstat::sample(std::process::id()).ok(),
            outcome: Outcome::default(),
        }
    }

    /// Sleeps one tick, then closes a window if one is due. Returns true if it closed one.
    fn tick(&mut self, phase: &str) -> bool {
        std::thread::sleep(SAMPLER_TICK);
        let now = now_ns();
        if now < self.next_window_ns {
            return false;
        }
        self.close_window(phase, now);
        true
    }

    fn close_window(&mut self, phase: &str, now: u64) {
        let elapsed_s = (now - self.last_window_ns) as f64 / 1e9;
        let cur = self.clients.totals();
        let d = cur - self.last;
        let broker = self.sample_broker(elapsed_s);
        let me = procstat::sample(std::process::id()).ok();
        let loadgen_cpu_pct = match (self.self_last, me) {
            (Some(a), Some(b)) => procstat::usage(a, b, elapsed_s).cpu_pct,
            _ => 0.0,
        };
        self.self_last = me;
        let window = Window {
            t_s: now.saturating_sub(self.t0_ns) as f64 / 1e9,
            phase: phase.to_string(),
            produced_records: d.acked_records,
            produced_bytes: d.acked_bytes,
            consumed_records: d.consumed_records,
            consumed_bytes: d.consumed_bytes,
            errors: d.errors,
            broker,
            loadgen_cpu_pct,
            target_rate_records_s: None,
            publish_p99_ms: None,
            publish_max_ms: None,
        };
        let window = self.with_window_latency(window);
        self.print_progress(&window, elapsed_s);
        if phase == "measure" || phase == "catch-up" || phase == "backlog" {
            self.outcome.loadgen_cpu.push(loadgen_cpu_pct);
            if let Some(b) = broker {
                self.outcome.broker.push(b);
            }
        }
        self.outcome.windows.push(window);
        self.last = cur;
        self.last_window_ns = now;
        while self.next_window_ns <= now {
            self.next_window_ns += S_NS;
        }
    }

    /// Fills in the window's publish latency from every producer's window histogram.
    fn with_window_latency(&self, mut window: Window) -> Window {
        let mut h = LatencyHistogram::new();
        for s in &self.clients.producer_stats {
            s.drain_publish_window(&mut h);
        }
        if h.count() > 0 {
            let l = h.summary();
            window.publish_p99_ms = Some(l.p99_ms);
            window.publish_max_ms = Some(l.max_ms);
        }
        window
    }

    fn sample_broker(&mut self, elapsed_s: f64) -> Option<ProcUsage> {
        let pid = self.opts.broker_pid?;
        let now = procstat::sample(pid).ok()?;
        let usage = self.broker_last.map(|b| procstat::usage(b, now, elapsed_s));
        self.broker_last = Some(now);
        usage
    }

    fn print_progress(&self, w: &Window, elapsed_s: f64) {
        if !self.opts.progress {
            return;
        }
        let rate = |n: u64| n as f64 / elapsed_s.max(1e-9);
        let mb = |b: u64| b as f64 / MB_BYTES / elapsed_s.max(1e-9);
        let broker = w.broker.map_or(String::new(), |b| {
            format!(
                " | broker cpu {:.0}% rss {} MiB",
                b.cpu_pct,
                b.rss_bytes >> 20
            )
        });
        let p99 = w
            .publish_p99_ms
            .map_or(String::new(), |p| format!(" p99 {p:.1} ms"));
        eprintln!(
            "[{:>6.1}s {:<8}] pub {:>10.0} rec/s {:>8.1} MB/s{p99} | cons {:>10.0} rec/s {:>8.1} MB/s | err {}{} | loadgen cpu {:.0}%",
            w.t_s,
            w.phase,
            rate(w.produced_records),
            mb(w.produced_bytes),
            rate(w.consumed_records),
            mb(w.consumed_bytes),
            w.errors,
            broker,
            w.loadgen_cpu_pct
        );
    }

    /// Warm-up, measured interval, drain. Windows are aligned on whole seconds from `t0`, and
    /// warm-up and duration are whole seconds, so the measured interval is made of windows.
    fn measured_run(mut self, w: &Workload, ctl: &Control, from: u64, end: u64) -> Outcome {
        let mut at_from = (from <= self.t0_ns).then_some((Counters::default(), self.t0_ns));
        let mut at_end = None;
        let mut producers_done_ns = None;
        let discover =
            w.producer.rate_records_s == 0 && w.producer.max_rate_mode == MaxRateMode::Discover;
        let mut controller = discover.then(RateController::new);
        loop {
            let phase = phase_at(self.last_window_ns, from, end);
            if self.tick(phase) {
                let now = self.last_window_ns;
                if let (Some(c), true) = (controller.as_mut(), now < end) {
                    self.discover_rate(c, w, ctl);
                }
                if at_from.is_none() && now >= from {
                    at_from = Some((self.last, now));
                }
                if at_end.is_none() && now >= end {
                    at_end = Some((self.last, now));
                }
            }
            if at_end.is_none() {
                continue;
            }
            if producers_done_ns.is_none() && ctl.producers_running.load(Ordering::Relaxed) == 0 {
                producers_done_ns = Some(now_ns());
            }
            if let Some(done) = producers_done_ns {
                let c = self.clients.totals();
                let expected = c.acked_records * u64::from(w.consumer.subscriptions_per_topic);
                if c.consumed_records >= expected
                    || now_ns() > done + DRAIN_TIMEOUT.as_nanos() as u64
                {
                    self.close_window("drain", now_ns());
                    break;
                }
            }
        }
        if let (Some((c0, t0)), Some((c1, t1))) = (at_from, at_end) {
            self.outcome.measured = c1 - c0;
            self.outcome.measured_s = (t1 - t0) as f64 / 1e9;
        }
        self.outcome
    }

    /// One step of the rate discovery after a window.
    fn discover_rate(&mut self, c: &mut RateController, w: &Workload, ctl: &Control) {
        let t = self.last;
        let groups = u64::from(w.consumer.subscriptions_per_topic);
        let receive_backlog = (t.acked_records * groups).saturating_sub(t.consumed_records);
        let consumed_per_group = t.consumed_records / groups.max(1);
        let acked = t.acked_records;
        let consumed = if groups == 0 {
            acked
        } else {
            consumed_per_group
        };
        let in_flight = t.sent_records.saturating_sub(t.acked_records + t.errors);
        let rate = c.next_rate(
            1.0,
            acked,
            consumed,
            receive_backlog / groups.max(1),
            in_flight,
        );
        let producers = self.clients.producer_stats.len().max(1) as f64;
        ctl.rate.set(rate / producers);
        if let Some(last) = self.outcome.windows.last_mut() {
            last.target_rate_records_s = Some(rate);
        }
    }

    /// Producers write the backlog; returns the counters when they have stopped.
    fn backlog_phase(&mut self, w: &Workload, ctl: &Control) -> Counters {
        let target = w.consumer.backlog_size_bytes;
        let deadline = self.t0_ns + BACKLOG_PHASE_TIMEOUT.as_nanos() as u64;
        loop {
            let c = self.clients.totals();
            if c.acked_bytes >= target || now_ns() > deadline {
                ctl.stop_producers.store(true, Ordering::Relaxed);
            }
            if ctl.producers_running.load(Ordering::Relaxed) == 0 {
                break;
            }
            self.tick("backlog");
        }
        self.close_window("backlog", now_ns());
        let c = self.clients.totals();
        self.outcome.measured = c;
        self.outcome.measured_s = (now_ns() - self.t0_ns) as f64 / 1e9;
        c
    }

    /// Consumers read the backlog from the beginning; returns when they have it all.
    fn catch_up_phase(mut self, w: &Workload, backlog: Counters) -> Outcome {
        let expected = backlog.acked_records * u64::from(w.consumer.subscriptions_per_topic);
        let start = now_ns();
        let deadline = start + BACKLOG_PHASE_TIMEOUT.as_nanos() as u64;
        let completed = loop {
            let c = self.clients.totals();
            if c.consumed_records >= expected {
                break true;
            }
            if now_ns() > deadline {
                break false;
            }
            self.tick("catch-up");
        };
        let catch_up_s = (now_ns() - start) as f64 / 1e9;
        self.close_window("catch-up", now_ns());
        self.outcome.backlog = Some(BacklogSummary {
            backlog_records: backlog.acked_records,
            backlog_bytes: backlog.acked_bytes,
            catch_up_s,
            completed,
        });
        self.outcome
    }
}

/// The phase of a window that starts at `start_ns`.
fn phase_at(start_ns: u64, from: u64, end: u64) -> &'static str {
    if start_ns < from {
        "warmup"
    } else if start_ns < end {
        "measure"
    } else {
        "drain"
    }
}

fn summarize(w: &Workload, clients: &Clients, o: &Outcome) -> Summary {
    let mut publish = LatencyHistogram::new();
    let mut e2e = LatencyHistogram::new();
    let mut first_error = None;
    for s in clients.producer_stats.iter().chain(&clients.consumer_stats) {
        publish.merge(&s.publish_histogram());
        e2e.merge(&s.e2e_histogram());
        if first_error.is_none() {
            first_error = s.first_error();
        }
    }
    let totals = clients.totals();
    let secs = o.measured_s.max(1e-9);
    let m = o.measured;
    let broker_cpu_pct_avg = mean(o.broker.iter().map(|b| b.cpu_pct));
    let broker_rss_bytes_max = o.broker.iter().map(|b| b.rss_bytes).max();
    let broker_cpu_s_per_gib = broker_cpu_pct_avg.and_then(|cpu| {
        let gib = m.acked_bytes as f64 / (1u64 << 30) as f64;
        (gib > 0.0).then(|| cpu / 100.0 * secs / gib)
    });
    let (consume_records, consume_bytes, consume_secs) = match o.backlog {
        Some(b) => (
            totals.consumed_records,
            totals.consumed_bytes,
            b.catch_up_s.max(1e-9),
        ),
        None => (m.consumed_records, m.consumed_bytes, secs),
    };
    let planned_records = (w.producer.rate_records_s > 0 && o.backlog.is_none())
        .then(|| w.producer.rate_records_s * w.run.duration_s);
    Summary {
        measured_s: o.measured_s,
        throughput_records_s: m.acked_records as f64 / secs,
        throughput_mb_s: m.acked_bytes as f64 / MB_BYTES / secs,
        consume_throughput_records_s: consume_records as f64 / consume_secs,
        consume_throughput_mb_s: consume_bytes as f64 / MB_BYTES / consume_secs,
        publish: publish.summary(),
        e2e: e2e.summary(),
        sent_records: totals.sent_records,
        acked_records: totals.acked_records,
        consumed_records: totals.consumed_records,
        errors: totals.errors,
        first_error,
        planned_records,
        broker_cpu_pct_avg,
        broker_rss_bytes_max,
        broker_cpu_s_per_gib,
        loadgen_cpu_pct_avg: mean(o.loadgen_cpu.iter().copied()).unwrap_or(0.0),
        backlog: o.backlog,
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The generator seed of producer `index` in a run seeded with `seed`: distinct per producer,
/// the same in every run (splitmix64 of both, so neighbouring seeds and indexes do not give
/// related streams).
fn client_seed(seed: u64, index: usize) -> u64 {
    fn splitmix64(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    splitmix64(seed ^ splitmix64(index as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_producers_get_distinct_reproducible_seeds() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..32u64 {
            for index in 0..32usize {
                assert_eq!(client_seed(seed, index), client_seed(seed, index));
                // A plain `seed ^ index` would repeat here (1 ^ 0 == 0 ^ 1).
                assert!(seen.insert(client_seed(seed, index)), "{seed}/{index}");
            }
        }
    }

    #[test]
    fn consumer_specs_split_partitions_per_group() {
        let w = Workload::from_toml(
            r#"
            name = "t"
            topics = 2
            partitions_per_topic = 5
            record_size_bytes = 100
            [producer]
            [consumer]
            subscriptions_per_topic = 2
            consumers_per_subscription = 2
            [run]
            duration_s = 1
            "#,
        )
        .unwrap();
        let topics = w.topic_names("x");
        let specs = consumer_specs(&w, &topics, "x");
        assert_eq!(specs.len(), 8);
        for topic in &topics {
            for g in 0..2 {
                let group = format!("x-sub-{g}");
                let mut parts: Vec<i32> = specs
                    .iter()
                    .filter(|s| s.group_id == group)
                    .flat_map(|s| s.assignment.iter())
                    .filter(|(t, _)| t == topic)
                    .map(|(_, p)| *p)
                    .collect();
                parts.sort();
                assert_eq!(parts, vec![0, 1, 2, 3, 4], "{topic} {group}");
            }
        }
        assert!(specs.iter().all(|s| s.start == StartAt::Beginning));
    }

    #[test]
    fn timelines() {
        let w = Workload::from_toml(
            "name = \"t\"\ntopics = 1\npartitions_per_topic = 1\nrecord_size_bytes = 100\n\
             [producer]\n[run]\nduration_s = 3\nwarmup_s = 2\n",
        )
        .unwrap();
        assert_eq!(timeline(&w, 10, false), (10 + 2 * S_NS, 10 + 5 * S_NS));
        let (from, end) = timeline(&w, 10, true);
        assert_eq!(from, 10);
        assert!(end > 10 + 800 * S_NS);
    }

    #[test]
    fn means() {
        assert_eq!(mean([1.0, 2.0, 3.0].into_iter()), Some(2.0));
        assert_eq!(mean(std::iter::empty()), None);
    }
}
