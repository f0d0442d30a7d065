//! The workload: recorded producers and consumers running until a deadline.
//!
//! - Producers (acks=all, idempotent, retrying within `delivery_timeout_ms`) send unique
//!   values to the partitions in turn, at most `in_flight_per_partition_max` unresolved per
//!   partition, so a stuck partition does not stop writes to the others (the liveness check
//!   needs writes to every partition through and after each fault). A send is recorded before
//!   the SDK sees it and completed with its offset (`send_ok`), as `send_fail` only when the
//!   SDK refused to queue it (nothing sent), and as `send_info` for every other failure (the
//!   SDK retried, so an earlier attempt may have landed).
//! - Assign-mode consumers read every partition from its start, seek now and then (to the log
//!   start or back a few offsets), and are replaced by a new consumer (new process) every
//!   `consumer_lifetime_s`; a poll error leaves the position where it was.
//! - Group-mode consumers of one group subscribe to the topic; every change of their
//!   assignment is recorded before the records of the poll that brought it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use borges_checker::history::{parse_value, value_bytes, Offset, Partition, Value};
use borges_checker::{ConsumerMode, Recorder};
use borges_client::{
    Acks, ClientConfig, ClientError, Consumer, ConsumerConfig, ConsumerRecord, Offset as At,
    OffsetReset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// What the workload does.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    /// The topic (created beforehand).
    pub topic: String,
    /// Its partitions.
    pub partitions: i32,
    /// How long the workload runs.
    pub duration: Duration,
    /// Producers (each its own `Producer`, its own producer id).
    pub producers: usize,
    /// Sends per second per producer.
    pub rate_per_producer_per_s: u32,
    /// Unresolved sends per partition per producer at most.
    pub in_flight_per_partition_max: usize,
    /// The SDK's delivery timeout: a send fails (indefinitely) after this.
    pub delivery_timeout_ms: u64,
    /// Assign-mode consumers.
    pub assign_consumers: usize,
    /// Group-mode consumers (one group).
    pub group_consumers: usize,
    /// An assign-mode consumer is replaced after this long.
    pub consumer_lifetime_s: u64,
    /// Seeds every random choice.
    pub seed: u64,
}

/// Counts of what the workload did, printed at its end.
#[derive(Debug, Default)]
pub struct Tally {
    /// Sends invoked.
    pub sent: AtomicU64,
    /// Acknowledged.
    pub acked: AtomicU64,
    /// Failed (either way).
    pub failed: AtomicU64,
    /// Records polled.
    pub polled: AtomicU64,
    /// Poll errors.
    pub poll_errors: AtomicU64,
}

impl Tally {
    /// `sent=.. acked=.. failed=.. polled=.. poll_errors=..`.
    pub fn line(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "sent={} acked={} failed={} polled={} poll_errors={}",
            get(&self.sent),
            get(&self.acked),
            get(&self.failed),
            get(&self.polled),
            get(&self.poll_errors)
        )
    }
}

struct Shared {
    client: ClientConfig,
    options: WorkloadOptions,
    recorder: Recorder,
    stop: AtomicBool,
    tally: Tally,
}

/// Runs producers and consumers for `options.duration`, then lets the outstanding sends
/// complete (up to the delivery timeout) and closes everything. Returns the tally.
pub async fn run(client: ClientConfig, options: WorkloadOptions, recorder: Recorder) -> Tally {
    recorder.header(&options.topic);
    let shared = Arc::new(Shared {
        client,
        options,
        recorder,
        stop: AtomicBool::new(false),
        tally: Tally::default(),
    });
    let mut tasks = Vec::new();
    for i in 0..shared.options.producers {
        tasks.push(tokio::spawn(producer_loop(shared.clone(), i as u64)));
    }
    for i in 0..shared.options.assign_consumers {
        tasks.push(tokio::spawn(assign_consumer_loop(shared.clone(), i as u64)));
    }
    for i in 0..shared.options.group_consumers {
        tasks.push(tokio::spawn(group_consumer_loop(shared.clone(), i as u64)));
    }
    tokio::time::sleep(shared.options.duration).await;
    shared.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        if let Err(e) = task.await {
            eprintln!("fault-driver: a workload task failed: {e}");
        }
    }
    let shared = Arc::into_inner(shared).expect("every task ended");
    if let Err(e) = shared.recorder.flush() {
        eprintln!("fault-driver: writing the history: {e}");
    }
    shared.tally
}

fn producer_config(options: &WorkloadOptions) -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        linger_ms: 2,
        batch_size_bytes: 16 * 1024,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 500,
        delivery_timeout_ms: options.delivery_timeout_ms,
        max_block_ms: 5_000,
        enable_idempotence: true,
        ..ProducerConfig::default()
    }
}

/// One producer: (re)created until the workload stops, sending at its rate.
async fn producer_loop(shared: Arc<Shared>, index: u64) {
    let options = &shared.options;
    let mut rng = StdRng::seed_from_u64(options.seed ^ (0x5eed_0000 + index));
    let producer = loop {
        match Producer::new(shared.client.clone(), producer_config(options)).await {
            Ok(p) => break p,
            Err(e) if !shared.stop.load(Ordering::Relaxed) => {
                eprintln!("fault-driver: producer {index}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => return,
        }
    };
    let process = shared.recorder.process();
    let in_flight: Arc<Vec<AtomicU64>> =
        Arc::new((0..options.partitions).map(|_| AtomicU64::new(0)).collect());
    let interval = Duration::from_secs_f64(1.0 / f64::from(options.rate_per_producer_per_s.max(1)));
    let mut next_partition = rng.gen_range(0..options.partitions);
    let mut pending = Vec::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        // The next partition with room; none with room: skip this tick.
        let Some(partition) = (0..options.partitions)
            .map(|k| (next_partition + k) % options.partitions)
            .find(|&p| {
                in_flight[p as usize].load(Ordering::Relaxed)
                    < options.in_flight_per_partition_max as u64
            })
        else {
            continue;
        };
        next_partition = (partition + 1) % options.partitions;
        pending.push(send_one(&shared, &producer, process, partition, &in_flight).await);
        pending.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
    }
    for task in pending {
        let _ = task.await;
    }
    if let Err(e) = producer.close().await {
        eprintln!("fault-driver: producer {index}: close: {e}");
    }
}

/// Records and sends one value; the returned task completes the record.
async fn send_one(
    shared: &Arc<Shared>,
    producer: &Producer,
    process: u64,
    partition: Partition,
    in_flight: &Arc<Vec<AtomicU64>>,
) -> tokio::task::JoinHandle<()> {
    let value = shared.recorder.value();
    let record = ProducerRecord::new(shared.options.topic.as_str())
        .partition(partition)
        .value(value_bytes(value));
    let send = shared.recorder.send(process, partition, value);
    shared.tally.sent.fetch_add(1, Ordering::Relaxed);
    let counter = in_flight.clone();
    counter[partition as usize].fetch_add(1, Ordering::Relaxed);
    let queued = producer.send(record).await;
    let shared = shared.clone();
    tokio::spawn(async move {
        match queued {
            Err(e) => {
                // Never queued: nothing was sent.
                send.fail(&e.to_string());
                shared.tally.failed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(delivery) => match delivery.await {
                Ok(meta) => {
                    send.ok(meta.offset);
                    shared.tally.acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    send.info(&e.to_string());
                    shared.tally.failed.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
        counter[partition as usize].fetch_sub(1, Ordering::Relaxed);
    })
}

fn consumer_config(group: Option<String>) -> ConsumerConfig {
    ConsumerConfig {
        fetch_max_wait_ms: 200,
        auto_offset_reset: OffsetReset::Earliest,
        max_poll_records: 1_000,
        group_id: group,
        session_timeout_ms: 10_000,
        ..ConsumerConfig::default()
    }
}

/// The records of one poll as the history wants them; a value that is not one of ours maps
/// to `Value::MAX` (the checker reports it as an unknown value).
fn polled(records: &[ConsumerRecord]) -> Vec<(Partition, Offset, Value)> {
    records
        .iter()
        .map(|r| {
            let value = r
                .value
                .as_deref()
                .and_then(parse_value)
                .unwrap_or(Value::MAX);
            (r.partition, r.offset, value)
        })
        .collect()
}

/// Assign-mode consumers, one after another, each for `consumer_lifetime_s`.
async fn assign_consumer_loop(shared: Arc<Shared>, index: u64) {
    let mut rng = StdRng::seed_from_u64(shared.options.seed ^ (0xc0_0000 + index));
    while !shared.stop.load(Ordering::Relaxed) {
        match Consumer::new(shared.client.clone(), consumer_config(None)).await {
            Ok(consumer) => {
                if let Err(e) = assign_consumer(&shared, consumer, &mut rng).await {
                    eprintln!("fault-driver: assign consumer {index}: {e}");
                }
            }
            Err(e) => {
                eprintln!("fault-driver: assign consumer {index}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn assign_consumer(shared: &Shared, mut consumer: Consumer, rng: &mut StdRng) -> Result<()> {
    let options = &shared.options;
    let process = shared.recorder.process();
    let partitions: Vec<Partition> = (0..options.partitions).collect();
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|&p| TopicPartition::new(options.topic.as_str(), p))
        .collect();
    consumer.assign(tps.clone()).await?;
    shared
        .recorder
        .assign(process, ConsumerMode::Assign, &partitions);
    for tp in &tps {
        seek(shared, &mut consumer, process, tp, At::Beginning).await;
    }
    let until = Instant::now() + Duration::from_secs(options.consumer_lifetime_s);
    let mut next_seek = Instant::now() + Duration::from_millis(rng.gen_range(2_000..8_000));
    while !shared.stop.load(Ordering::Relaxed) && Instant::now() < until {
        if Instant::now() >= next_seek {
            let tp = &tps[rng.gen_range(0..tps.len())];
            let to = match consumer.position(tp) {
                Some(at) if rng.gen_bool(0.5) => At::At((at - rng.gen_range(1..50)).max(0)),
                _ => At::Beginning,
            };
            seek(shared, &mut consumer, process, tp, to).await;
            next_seek = Instant::now() + Duration::from_millis(rng.gen_range(2_000..8_000));
        }
        poll_once(shared, &mut consumer, process).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), consumer.close()).await;
    Ok(())
}

/// Seeks and records the resolved position (`None` when the seek failed: the position is
/// then whatever it was, which the checker must not assume).
async fn seek(shared: &Shared, consumer: &mut Consumer, process: u64, tp: &TopicPartition, to: At) {
    let position = match consumer.seek(tp, to).await {
        Ok(()) => consumer.position(tp),
        Err(e) => {
            eprintln!("fault-driver: seek {tp} {to:?}: {e}");
            None
        }
    };
    shared.recorder.seek(process, tp.partition, position);
}

/// One poll, recorded; errors are counted and paced.
async fn poll_once(shared: &Shared, consumer: &mut Consumer, process: u64) {
    match consumer.poll(Duration::from_millis(300)).await {
        Ok(records) => {
            shared
                .tally
                .polled
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            shared.recorder.poll(process, &polled(&records));
        }
        Err(e) => {
            shared.tally.poll_errors.fetch_add(1, Ordering::Relaxed);
            if !matches!(e, ClientError::Timeout { .. }) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Group-mode consumers of the group `fault-suite-<seed>`, replaced when they fail.
async fn group_consumer_loop(shared: Arc<Shared>, index: u64) {
    let group = format!("fault-suite-{}", shared.options.seed);
    while !shared.stop.load(Ordering::Relaxed) {
        let consumer = Consumer::new(shared.client.clone(), consumer_config(Some(group.clone())));
        let result = match consumer.await {
            Ok(consumer) => group_consumer(&shared, consumer).await,
            Err(e) => Err(e.into()),
        };
        if let Err(e) = result {
            eprintln!("fault-driver: group consumer {index}: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn group_consumer(shared: &Shared, mut consumer: Consumer) -> Result<()> {
    let process = shared.recorder.process();
    consumer.subscribe(&[shared.options.topic.as_str()]).await?;
    let mut assigned: Vec<Partition> = Vec::new();
    let mut errors_in_a_row = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        let result = consumer.poll(Duration::from_millis(300)).await;
        let now: Vec<Partition> = consumer
            .assignment()
            .iter()
            .map(|tp| tp.partition)
            .collect();
        if now != assigned {
            shared.recorder.assign(process, ConsumerMode::Group, &now);
            assigned = now;
        }
        match result {
            Ok(records) => {
                errors_in_a_row = 0;
                let n = records.len() as u64;
                shared.tally.polled.fetch_add(n, Ordering::Relaxed);
                shared.recorder.poll(process, &polled(&records));
            }
            Err(e) => {
                shared.tally.poll_errors.fetch_add(1, Ordering::Relaxed);
                errors_in_a_row += 1;
                if errors_in_a_row >= 50 {
                    let _ = tokio::time::timeout(Duration::from_secs(5), consumer.close()).await;
                    return Err(e.into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), consumer.close()).await;
    Ok(())
}
