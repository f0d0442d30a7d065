//! The idempotent producer (on by default) against a real broker: through repeated kill -9 of
//! the broker every acknowledged record ends up exactly once and in send order per partition
//! (checked by `borges-checker` on the recorded history), and the CLI producer is idempotent too.

mod common;
mod exactly_once;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use borges_checker::Recorder;
use borges_client::{Acks, Producer, ProducerConfig};
use common::*;
use exactly_once::{check_exactly_once, run_with_faults, wait_for_acked, Progress, Stream};

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

const STREAM: Stream = Stream {
    topic: TOPIC,
    records: RECORDS,
    interval: None,
};

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

/// Kills the broker with SIGKILL `KILLS` times, each once a further share of the records is
/// acknowledged (so that every kill lands mid-stream, with requests in flight), and restarts
/// it; returns the acknowledged counts seen at the kills. The stream is held to half a share
/// past each kill's threshold until that kill is done: unheld, on a fast machine, the whole
/// stream was acknowledged before the last kills.
fn kill_mid_stream(
    broker: &mut borges_testkit::BrokerProcess,
    recorder: &Recorder,
    progress: &Progress,
) -> Vec<usize> {
    let share = RECORDS / (KILLS + 2);
    let mut at_kill = Vec::new();
    for k in 0..KILLS {
        let threshold = share * (k + 1);
        progress.limit_sends(threshold + share / 2);
        if !wait_for_acked(progress, threshold, RECORDS, Duration::from_secs(120)) {
            return at_kill;
        }
        let id = format!("kill-{k}");
        recorder.fault_start(&id, "kill", "broker", &[]);
        broker.kill9();
        at_kill.push(progress.acked.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(100));
        broker.restart();
        recorder.fault_end(&id);
    }
    progress.limit_sends(usize::MAX);
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
    let (broker, at_kill) = run_with_faults(
        (producer, &recorder, &progress),
        STREAM,
        broker,
        kill_mid_stream,
    )
    .await;
    assert_eq!(at_kill.len(), KILLS, "every kill happened: {at_kill:?}");
    eprintln!("kills at {at_kill:?} acknowledged");
    final_read(&broker, &recorder).await;
    check_exactly_once(&recorder, RECORDS);
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
