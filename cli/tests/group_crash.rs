//! A consumer-group member process killed with SIGKILL: after its session times out, the
//! remaining member takes its partitions over and every record is processed at least once.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use borges_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerConfig,
    ProducerRecord,
};
use borges_testkit::BrokerProcess;

async fn produce(config: &ClientConfig, from: usize, n: usize) {
    let producer = Producer::new(config.clone(), ProducerConfig::default())
        .await
        .unwrap();
    for i in from..from + n {
        drop(
            producer
                .send(
                    ProducerRecord::new("jobs")
                        .key(format!("k{i}"))
                        .value(format!("v{i}")),
                )
                .await
                .unwrap(),
        );
    }
    producer.close().await.unwrap();
}

/// Samples `group`'s committed offsets every 50 ms and panics if one ever moves backwards;
/// `checked` counts the samples that saw at least one committed offset.
async fn watch_offsets(
    config: &ClientConfig,
    group: &'static str,
    checked: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<u32> {
    let admin = Admin::new(config.clone()).await.unwrap();
    tokio::spawn(async move {
        let mut seen: std::collections::HashMap<i32, i64> = Default::default();
        let mut samples = 0u32;
        loop {
            if let Ok(offsets) = admin.list_group_offsets(group).await {
                if !offsets.is_empty() {
                    checked.fetch_add(1, Ordering::Relaxed);
                }
                for (tp, offset) in offsets {
                    let last = seen.entry(tp.partition).or_insert(offset);
                    assert!(
                        offset >= *last,
                        "committed offset of partition {} moved back from {last} to {offset}",
                        tp.partition
                    );
                    *last = offset;
                }
                samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if samples > 10_000 {
                return samples;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_process_loses_its_partitions_to_the_survivor_without_loss() {
    let broker = BrokerProcess::start();
    let config = ClientConfig::new(&broker.bootstrap());
    let admin = Admin::new(config.clone()).await.unwrap();
    admin
        .create_topics(vec![NewTopic::new("jobs", 2)])
        .await
        .unwrap();
    produce(&config, 0, 100).await;

    // Throughout the test, committed offsets of the group are sampled: they must never move
    // backwards, whatever happens to its members.
    let checked = Arc::new(AtomicU32::new(0));
    let watcher = watch_offsets(&config, "crew", checked.clone()).await;

    // Member 1: a `borges consume --group` process with a 2 s session.
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args([
            "--bootstrap",
            &broker.bootstrap(),
            "consume",
            "jobs",
            "--group",
            "crew",
            "--from-beginning",
            "--session-timeout-ms",
            "2000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let printed = Arc::new(Mutex::new(HashSet::new()));
    let reader = {
        let printed = printed.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                printed.lock().unwrap().insert(line);
            }
        })
    };
    let guard = Instant::now() + Duration::from_secs(60);
    while printed.lock().unwrap().len() < 100 && Instant::now() < guard {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        printed.lock().unwrap().len(),
        100,
        "the process alone reads everything"
    );

    // Member 2, in this process: the group splits the two partitions.
    let member_config = ConsumerConfig {
        group_id: Some("crew".into()),
        auto_offset_reset: OffsetReset::Earliest,
        session_timeout_ms: 2_000,
        ..ConsumerConfig::default()
    };
    let mut survivor = Consumer::new(config.clone(), member_config).await.unwrap();
    survivor.subscribe(&["jobs"]).await.unwrap();
    let mut seen: HashSet<String> = HashSet::new();
    while survivor.assignment().len() != 1 && Instant::now() < guard {
        for r in survivor.poll(Duration::from_millis(100)).await.unwrap() {
            seen.insert(
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            );
        }
    }
    assert_eq!(survivor.assignment().len(), 1, "one partition each");

    // More records, then the process dies without leaving.
    produce(&config, 100, 100).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();

    while !(survivor.assignment().len() == 2 && all_seen(&printed, &seen, 200))
        && Instant::now() < guard
    {
        for r in survivor.poll(Duration::from_millis(100)).await.unwrap() {
            seen.insert(
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            );
        }
    }
    assert_eq!(
        survivor.assignment().len(),
        2,
        "the survivor owns both partitions"
    );
    assert!(
        all_seen(&printed, &seen, 200),
        "every record processed at least once"
    );
    survivor.close().await.unwrap();
    // The watcher panics if an offset ever went backwards; surface that panic here.
    if watcher.is_finished() {
        match watcher.await {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => panic!("the offset watcher stopped early"),
        }
    }
    watcher.abort();
    assert!(
        checked.load(Ordering::Relaxed) > 0,
        "the watcher never saw a committed offset"
    );
}

fn all_seen(printed: &Mutex<HashSet<String>>, seen: &HashSet<String>, n: usize) -> bool {
    let printed = printed.lock().unwrap();
    (0..n).all(|i| {
        let v = format!("v{i}");
        printed.contains(&v) || seen.contains(&v)
    })
}
