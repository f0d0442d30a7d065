//! Consumer-group benchmark against a running broker:
//!
//! 1. **Failover**: a member running in a child process is killed with SIGKILL while records
//!    keep arriving; reports the time from the kill until its partitions are consumed again by
//!    the survivor (expected: about the session timeout plus one heartbeat interval).
//! 2. **Pause during reassignment**: while a member consumes steadily, a second member joins;
//!    reports the longest gap between records on the partitions the first member keeps (with
//!    incremental assignment they should not pause) next to the gap without a join.
//! 3. **Commit throughput**: synchronous commits of 8 partitions in a loop, each one durable
//!    (appended to `__consumer_offsets` with group-commit fsync) before it is acknowledged.
//!
//! ```text
//! cargo run --release -p borges-client --example group_bench -- 127.0.0.1:9292 [SESSION_MS]
//! ```

use std::collections::{BTreeSet, HashMap};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use borges_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

const PARTITIONS: i32 = 8;

fn member_config(group: &str, session_ms: u32) -> ConsumerConfig {
    ConsumerConfig {
        group_id: Some(group.into()),
        auto_offset_reset: OffsetReset::Earliest,
        session_timeout_ms: u64::from(session_ms),
        enable_auto_commit: true,
        ..ConsumerConfig::default()
    }
}

/// Produces `rate` records per second to every partition until dropped.
fn spawn_producer(bootstrap: String, topic: String, rate: u64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let producer = Producer::new(ClientConfig::new(&bootstrap), ProducerConfig::default())
            .await
            .expect("producer");
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut n = 0u64;
        loop {
            tick.tick().await;
            for _ in 0..(rate / 100).max(1) {
                for p in 0..PARTITIONS {
                    let record = ProducerRecord::new(topic.as_str())
                        .partition(p)
                        .value(format!("{n}"));
                    if producer.send(record).await.is_err() {
                        return;
                    }
                    n += 1;
                }
            }
        }
    })
}

async fn poll_into(
    c: &mut Consumer,
    last: &mut HashMap<i32, Instant>,
    gaps: &mut HashMap<i32, Duration>,
) {
    if let Ok(records) = c.poll(Duration::from_millis(20)).await {
        let now = Instant::now();
        for r in records {
            if let Some(prev) = last.insert(r.partition, now) {
                let g = gaps.entry(r.partition).or_default();
                *g = (*g).max(now - prev);
            }
        }
    }
}

/// A consumer in `group` subscribed to `topic`.
async fn subscribed_member(
    bootstrap: &str,
    group: &str,
    topic: &str,
    session_ms: u32,
) -> Result<Consumer, Box<dyn std::error::Error>> {
    let mut c = Consumer::new(
        ClientConfig::new(bootstrap),
        member_config(group, session_ms),
    )
    .await?;
    c.subscribe(&[topic]).await?;
    Ok(c)
}

/// An admin client, after creating `topic` with `PARTITIONS` partitions.
async fn with_topic(bootstrap: &str, topic: &str) -> Result<Admin, Box<dyn std::error::Error>> {
    let admin = Admin::new(ClientConfig::new(bootstrap)).await?;
    admin
        .create_topics(vec![NewTopic::new(topic, PARTITIONS)])
        .await?;
    Ok(admin)
}

fn partitions(c: &Consumer) -> BTreeSet<i32> {
    c.assignment().iter().map(|tp| tp.partition).collect()
}

async fn failover(
    bootstrap: &str,
    session_ms: u32,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let topic = format!("group-bench-failover-{}", std::process::id());
    let admin = with_topic(bootstrap, &topic).await?;
    let producer = spawn_producer(bootstrap.to_string(), topic.clone(), 2_000);
    let group = format!("{topic}-g");
    let mut victim = Command::new(std::env::current_exe()?)
        .args([
            "--member",
            bootstrap,
            &topic,
            &group,
            &session_ms.to_string(),
        ])
        .stdout(Stdio::null())
        .spawn()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut survivor = subscribed_member(bootstrap, &group, &topic, session_ms).await?;
    let (mut last, mut gaps) = (HashMap::new(), HashMap::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while partitions(&survivor).len() != (PARTITIONS / 2) as usize && Instant::now() < deadline {
        poll_into(&mut survivor, &mut last, &mut gaps).await;
    }
    let mine = partitions(&survivor);
    tokio::time::sleep(Duration::from_secs(1)).await;
    victim.kill()?;
    let killed = Instant::now();
    victim.wait()?;
    let recovered = loop {
        if let Ok(records) = survivor.poll(Duration::from_millis(5)).await {
            if records.iter().any(|r| !mine.contains(&r.partition)) {
                break killed.elapsed();
            }
        }
        if Instant::now() > deadline {
            return Err("the survivor never took over".into());
        }
    };
    producer.abort();
    survivor.close().await?;
    admin.delete_topics(&[topic.as_str()]).await?;
    Ok(recovered)
}

async fn pause_on_join(
    bootstrap: &str,
    session_ms: u32,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let topic = format!("group-bench-join-{}", std::process::id());
    let admin = with_topic(bootstrap, &topic).await?;
    let producer = spawn_producer(bootstrap.to_string(), topic.clone(), 2_000);
    let group = format!("{topic}-g");
    let mut first = subscribed_member(bootstrap, &group, &topic, session_ms).await?;
    let (mut last, mut gaps) = (HashMap::new(), HashMap::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while partitions(&first).len() != PARTITIONS as usize && Instant::now() < deadline {
        poll_into(&mut first, &mut last, &mut gaps).await;
    }
    // Baseline: five seconds of steady consumption.
    let (mut last, mut gaps) = (HashMap::new(), HashMap::new());
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        poll_into(&mut first, &mut last, &mut gaps).await;
    }
    let baseline = gaps.values().copied().max().unwrap_or_default();
    // A second member joins; measure the first member's gaps on the partitions it keeps.
    let mut second = subscribed_member(bootstrap, &group, &topic, session_ms).await?;
    let (mut last, mut gaps) = (HashMap::new(), HashMap::new());
    let (mut l2, mut g2) = (HashMap::new(), HashMap::new());
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        poll_into(&mut first, &mut last, &mut gaps).await;
        poll_into(&mut second, &mut l2, &mut g2).await;
    }
    let kept = partitions(&first);
    let during = kept
        .iter()
        .filter_map(|p| gaps.get(p))
        .copied()
        .max()
        .unwrap_or_default();
    producer.abort();
    first.close().await?;
    second.close().await?;
    admin.delete_topics(&[topic.as_str()]).await?;
    Ok((baseline, during))
}

async fn commit_rate(bootstrap: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let topic = format!("group-bench-commit-{}", std::process::id());
    let admin = with_topic(bootstrap, &topic).await?;
    let group = format!("{topic}-g");
    let mut member = subscribed_member(bootstrap, &group, &topic, 10_000).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while partitions(&member).len() != PARTITIONS as usize && Instant::now() < deadline {
        let _ = member.poll(Duration::from_millis(50)).await?;
    }
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < Duration::from_secs(10) {
        let offsets: Vec<(TopicPartition, i64)> = (0..PARTITIONS)
            .map(|p| (TopicPartition::new(topic.as_str(), p), commits as i64))
            .collect();
        member.commit_offsets_sync(&offsets).await?;
        commits += 1;
    }
    let rate = commits as f64 / start.elapsed().as_secs_f64();
    member.close().await?;
    admin.delete_topics(&[topic.as_str()]).await?;
    Ok(rate)
}

/// The victim of the failover measurement: consume until killed.
async fn member(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (bootstrap, topic, group) = (&args[0], &args[1], &args[2]);
    let session_ms: u32 = args[3].parse()?;
    let mut c = subscribed_member(bootstrap, group, topic, session_ms).await?;
    loop {
        let _ = c.poll(Duration::from_millis(50)).await?;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--member") {
        return member(&args[1..]).await;
    }
    let bootstrap = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9292".into());
    let session_ms: u32 = args.get(1).map_or(Ok(3_000), |s| s.parse())?;
    let recovered = failover(&bootstrap, session_ms).await?;
    println!("failover_session_ms={session_ms}");
    println!("failover_ms={}", recovered.as_millis());
    let (baseline, during) = pause_on_join(&bootstrap, session_ms).await?;
    println!("join_gap_baseline_ms={}", baseline.as_millis());
    println!("join_gap_kept_partitions_ms={}", during.as_millis());
    let rate = commit_rate(&bootstrap).await?;
    println!("commits_per_s={rate:.0}");
    Ok(())
}
