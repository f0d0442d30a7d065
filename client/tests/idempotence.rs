//! The idempotent producer (on by default) against a real broker: through repeated kill -9 of
//! the broker every acknowledged record ends up exactly once and in send order per partition
//! (checked by `borges-checker` on the recorded history), and the CLI producer is idempotent too.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_checker::history::value_bytes;
use borges_checker::{check_history, CheckOptions, Recorder};
use borges_client::{Acks, Producer, ProducerConfig, ProducerRecord};
use common::*;

const TOPIC: &str = "exactly-once";
const PARTITIONS: i32 = 4;
const RECORDS: usize = 12_000;
const KILLS: usize = 6;

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        linger_ms: 2,
        batch_size_bytes: 4096,
        retry_backoff_ms: 20,
        retry_backoff_max_ms: 200,
        delivery_timeout_ms: 120_000,
        ..ProducerConfig::default()
    }
}

/// Sends `RECORDS` records (keyed over the partitions), recording each send and its outcome;
/// `progress` counts the acknowledged ones and all completed ones.
async fn produce_recorded(producer: Producer, recorder: Recorder, progress: Arc<Progress>) {
    let process = recorder.process();
    let mut pending = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let value = recorder.value();
        let record = ProducerRecord::new(TOPIC)
            .key(format!("k{}", i % 64))
            .value(value_bytes(value));
        let delivery = producer.send(record).await.expect("queued");
        let send = recorder.send(process, delivery.partition(), value);
        let progress = progress.clone();
        pending.push(tokio::spawn(async move {
            match delivery.await {
                Ok(meta) => {
                    send.ok(meta.offset);
                    progress.acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => send.info(&e.to_string()),
            }
            progress.completed.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for p in pending {
        p.await.unwrap();
    }
}

/// The final read of every partition, recorded.
async fn final_read(broker: &borges_testkit::BrokerProcess, recorder: &Recorder) {
    let process = recorder.process();
    let read = read_all(broker, TOPIC, RECORDS).await;
    for partition in 0..PARTITIONS {
        let records = read.get(&partition).cloned().unwrap_or_default();
        let values: Vec<(i64, u64)> = records
            .iter()
            .map(|r| {
                let v = r.value.as_deref().expect("a value");
                let v = borges_checker::history::parse_value(v).expect("a recorded value");
                (r.offset, v)
            })
            .collect();
        recorder.final_read(process, partition, &values);
        let hw = records.last().map_or(0, |r| r.offset + 1);
        recorder.final_end(process, partition, 0, hw);
    }
}

/// Sends acknowledged, and completed either way.
#[derive(Default)]
struct Progress {
    acked: AtomicUsize,
    completed: AtomicUsize,
}

/// Kills the broker with SIGKILL `KILLS` times, each once a further share of the records is
/// acknowledged (so that every kill lands mid-stream, with requests in flight), and restarts
/// it; returns the acknowledged counts seen at the kills.
fn kill_mid_stream(
    broker: &mut borges_testkit::BrokerProcess,
    recorder: &Recorder,
    progress: &Progress,
) -> Vec<usize> {
    let mut at_kill = Vec::new();
    for k in 0..KILLS {
        let threshold = RECORDS * (k + 1) / (KILLS + 2);
        let deadline = Instant::now() + Duration::from_secs(120);
        while progress.acked.load(Ordering::Relaxed) < threshold {
            if progress.completed.load(Ordering::Relaxed) == RECORDS {
                return at_kill; // sends failed: the checks after this report them
            }
            assert!(Instant::now() < deadline, "the producer is stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
        let id = format!("kill-{k}");
        recorder.fault_start(&id, "kill", "broker", &[]);
        broker.kill9();
        at_kill.push(progress.acked.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
        broker.restart();
        recorder.fault_end(&id);
    }
    at_kill
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_exactly_once_and_in_order_through_repeated_kill_9() {
    let broker = broker();
    create_topic(&broker, TOPIC, PARTITIONS).await;
    let recorder = Recorder::in_memory();
    recorder.header(TOPIC);
    let producer = Producer::new(config(&broker), producer_config())
        .await
        .unwrap();
    let progress = Arc::new(Progress::default());
    let sender = tokio::spawn(produce_recorded(
        producer.clone(),
        recorder.clone(),
        progress.clone(),
    ));
    let (broker, at_kill) = {
        let (recorder, progress) = (recorder.clone(), progress.clone());
        tokio::task::spawn_blocking(move || {
            let mut broker = broker;
            let at_kill = kill_mid_stream(&mut broker, &recorder, &progress);
            (broker, at_kill)
        })
        .await
        .unwrap()
    };
    sender.await.unwrap();
    producer.close().await.unwrap();
    assert!(
        at_kill.iter().all(|&n| n < RECORDS),
        "every kill landed before the last acknowledgement: {at_kill:?}"
    );
    final_read(&broker, &recorder).await;
    let history = recorder.history().expect("in-memory history");
    let report = check_history(&history, &CheckOptions::default()).unwrap();
    for a in &report.anomalies {
        eprintln!("anomaly {a}");
    }
    assert!(report.anomalies.is_empty(), "{}", report.summary);
    assert_eq!(report.summary.acked, RECORDS, "{}", report.summary);
}

#[test]
fn the_cli_producer_is_idempotent() {
    let broker = broker();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        create_topic(&broker, "cli", 1).await;
    });
    let mut child = std::process::Command::new(borges_testkit::borges_bin())
        .args(["produce", "cli", "--bootstrap", &broker.bootstrap()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for i in 0..100 {
            writeln!(stdin, "line {i}").unwrap();
        }
    }
    assert!(child.wait().unwrap().success());
    // The partition knows one producer: the CLI's batches carried a producer id.
    let metrics = http_get(&broker.metrics_addr(), "/metrics");
    let producers = metrics
        .lines()
        .find(|l| l.starts_with("borges_partition_producers{topic=\"cli\""))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string);
    assert_eq!(producers.as_deref(), Some("1"), "{metrics}");
    let read = runtime.block_on(read_all(&broker, "cli", 100));
    assert_eq!(read.get(&0).map(Vec::len), Some(100));
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
