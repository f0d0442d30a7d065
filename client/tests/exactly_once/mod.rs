//! The exactly-once runs of the idempotent producer (`idempotence.rs` against one broker,
//! `idempotence_failover.rs` against a cluster): a recorded stream of keyed records, faults
//! injected on a blocking thread while it runs, and the recorded history checked by
//! `borges-checker`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use borges_checker::history::value_bytes;
use borges_checker::{check_history, CheckOptions, Recorder};
use borges_client::{Producer, ProducerRecord};

/// Sends acknowledged, and completed either way; the end (last acknowledged offset + 1) of
/// each partition; and how many records the stream may send so far (`send_limit`: the fault
/// thread holds the stream back so that its faults land before the last acknowledgement, on a
/// fast machine too).
pub struct Progress {
    pub acked: AtomicUsize,
    pub completed: AtomicUsize,
    pub ends: Mutex<BTreeMap<i32, i64>>,
    pub send_limit: AtomicUsize,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            acked: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            ends: Mutex::new(BTreeMap::new()),
            send_limit: AtomicUsize::new(usize::MAX),
        }
    }
}

impl Progress {
    /// Lets the stream send up to `records` records in all (`usize::MAX`: all of them).
    pub fn limit_sends(&self, records: usize) {
        self.send_limit.store(records, Ordering::Relaxed);
    }
}

/// The recorded stream: `records` records to `topic`, keyed over 64 keys; with `interval`
/// one every `interval` (a steady stream rather than one burst), else as fast as they queue.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    pub topic: &'static str,
    pub records: usize,
    pub interval: Option<Duration>,
}

/// Sends the stream's records, recording each send and its outcome in `recorder`.
pub async fn produce_recorded(
    producer: Producer,
    recorder: Recorder,
    progress: Arc<Progress>,
    stream: Stream,
) {
    let process = recorder.process();
    let started = tokio::time::Instant::now();
    let mut pending = Vec::with_capacity(stream.records);
    for i in 0..stream.records {
        while i >= progress.send_limit.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let value = recorder.value();
        let record = ProducerRecord::new(stream.topic)
            .key(format!("k{}", i % 64))
            .value(value_bytes(value));
        let delivery = producer.send(record).await.expect("queued");
        let send = recorder.send(process, delivery.partition(), value);
        let progress = progress.clone();
        pending.push(tokio::spawn(async move {
            match delivery.await {
                Ok(meta) => {
                    send.ok(meta.offset);
                    let mut ends = progress.ends.lock().unwrap_or_else(|p| p.into_inner());
                    let end = ends.entry(meta.partition).or_default();
                    *end = (*end).max(meta.offset + 1);
                    drop(ends);
                    progress.acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => send.info(&e.to_string()),
            }
            progress.completed.fetch_add(1, Ordering::Relaxed);
        }));
        if let Some(interval) = stream.interval {
            tokio::time::sleep_until(started + interval * i as u32).await;
        }
    }
    for p in pending {
        p.await.unwrap();
    }
}

/// Waits (up to `timeout`) until `threshold` records are acknowledged; false when every send
/// of the `records` completed first (sends failed: the checks after the run report them).
pub fn wait_for_acked(
    progress: &Progress,
    threshold: usize,
    records: usize,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while progress.acked.load(Ordering::Relaxed) < threshold {
        if progress.completed.load(Ordering::Relaxed) == records {
            return false;
        }
        assert!(Instant::now() < deadline, "the producer is stuck");
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Runs the stream through `producer` while `faults` runs on a blocking thread with `target`
/// (the broker or cluster it breaks), then closes the producer. Returns `target` and what
/// `faults` returned: the acknowledged counts at its faults, each below the stream's total.
pub async fn run_with_faults<T: Send + 'static>(
    (producer, recorder, progress): (Producer, &Recorder, &Arc<Progress>),
    stream: Stream,
    mut target: T,
    faults: impl FnOnce(&mut T, &Recorder, &Progress) -> Vec<usize> + Send + 'static,
) -> (T, Vec<usize>) {
    let sender = tokio::spawn(produce_recorded(
        producer.clone(),
        recorder.clone(),
        progress.clone(),
        stream,
    ));
    let (recorder, progress) = (recorder.clone(), progress.clone());
    let (target, at_fault) = tokio::task::spawn_blocking(move || {
        let at_fault = faults(&mut target, &recorder, &progress);
        (target, at_fault)
    })
    .await
    .unwrap();
    sender.await.unwrap();
    producer.close().await.unwrap();
    assert!(
        at_fault.iter().all(|&n| n < stream.records),
        "every fault landed before the last acknowledgement: {at_fault:?}"
    );
    (target, at_fault)
}

/// Checks the recorded history: no anomaly, and all `records` acknowledged. Returns the
/// report's summary as text.
pub fn check_exactly_once(recorder: &Recorder, records: usize) -> String {
    let history = recorder.history().expect("in-memory history");
    let report = check_history(&history, &CheckOptions::default()).unwrap();
    for a in &report.anomalies {
        eprintln!("anomaly {a}");
    }
    assert!(report.anomalies.is_empty(), "{}", report.summary);
    assert_eq!(report.summary.acked, records, "{}", report.summary);
    report.summary.to_string()
}
