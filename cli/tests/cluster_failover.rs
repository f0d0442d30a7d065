//! Measurements, not tests (ignored; no timed assertions): controller failover and broker
//! fencing times on a three-broker cluster with the broker's default timers.
//!
//! ```text
//! cargo build --workspace --bins
//! TRIALS=20 cargo test -p borges-cli --test cluster_failover -- \
//!     --ignored --nocapture --test-threads 1
//! ```
//!
//! Controller failover: SIGKILL of the active controller to the next committed metadata change
//! (a `borges topic create` against the survivors returning success; the broker's controller
//! retries internally until a new Raft leader takes the write). Fencing: SIGKILL of a broker
//! that is not the controller to the moment the active controller's applied image shows it
//! fenced (polled every 5 ms over the controller link). Each trial restarts the killed broker
//! and waits until it runs again. Partition-leader failover (`partition_leader_failover_time`):
//! SIGKILL of a partition's leader to the next acknowledged acks=all write on it, with the
//! stages in between from the brokers' logs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use borges_client::{Acks, ClientConfig, Producer, ProducerConfig, ProducerRecord};
use borges_replication::metadata::{BrokerState, NO_LEADER};
use borges_testkit::cluster::{Cluster, ClusterOptions};

fn trials() -> usize {
    std::env::var("TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(20)
}

fn summary(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let median = ms[ms.len() / 2];
    let max = ms[ms.len() - 1];
    println!(
        "{what}: {} trials, median {median:.0} ms, max {max:.0} ms, all {:?}",
        ms.len(),
        ms.iter().map(|m| m.round() as u64).collect::<Vec<_>>()
    );
}

fn default_timers() -> Cluster {
    Cluster::start_with(ClusterOptions {
        cluster_toml: String::new(),
        ..ClusterOptions::default()
    })
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn controller_failover_time() {
    let mut c = default_timers();
    let mut ms = Vec::new();
    for trial in 0..trials() {
        let controller = c.wait_for_controller();
        c.kill9(controller);
        let started = Instant::now();
        c.cli(&[
            "topic",
            "create",
            &format!("failover-{trial}"),
            "--partitions",
            "1",
        ]);
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        c.restart(controller);
        c.wait_for_broker_state(controller as i32, BrokerState::Running);
    }
    summary("controller failover (kill -9 -> next committed change)", ms);
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn broker_fencing_time() {
    let mut c = default_timers();
    let mut ms = Vec::new();
    for _ in 0..trials() {
        let controller = c.wait_for_controller();
        let victim = (1..=3).find(|&id| id != controller).unwrap_or(1);
        c.kill9(victim);
        let started = Instant::now();
        loop {
            let fenced = c
                .image_of(controller)
                .and_then(|i| i.brokers.get(&(victim as i32)).map(|b| b.state))
                == Some(BrokerState::Fenced);
            if fenced {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never fenced");
            std::thread::sleep(Duration::from_millis(5));
        }
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        c.restart(victim);
        c.wait_for_broker_state(victim as i32, BrokerState::Running);
    }
    summary(
        "broker fencing (kill -9 -> fenced in the controller's image)",
        ms,
    );
}

/// The topic of the partition-leader measurement.
const FAILOVER_TOPIC: &str = "failover";
/// Partitions of it: three, so that leaders rotate over the brokers and some partition is led
/// by a broker that is not the active controller.
const FAILOVER_PARTITIONS: usize = 3;
/// How often the measurement's producer sends one record while it runs.
const SEND_INTERVAL: Duration = Duration::from_millis(5);

/// Milliseconds since the Unix epoch of a broker log line's leading timestamp
/// (`2026-12-01T22:02:27.500268Z`, tracing's default); None for other lines.
fn log_line_unix_ms(line: &str) -> Option<f64> {
    let stamp = line.get(..27)?;
    let b = stamp.as_bytes();
    if b.get(4) != Some(&b'-') || b.get(10) != Some(&b'T') || b.get(26) != Some(&b'Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| stamp.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss, us) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3_600 + mm * 60 + ss;
    Some(secs as f64 * 1000.0 + us as f64 / 1000.0)
}

/// The first line of `log` at or after `since_ms` containing every one of `needles`: its
/// time in ms since the Unix epoch.
fn first_log_line(log: &str, since_ms: f64, needles: &[&str]) -> Option<f64> {
    log.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(log_line_unix_ms)
        .find(|&t| t >= since_ms)
}

fn unix_ms_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// One trial's times, in ms after the kill.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    /// The active controller fenced the killed broker (session expired).
    fenced: f64,
    /// The new leader's core took the leader role.
    leader: f64,
    /// The remaining follower's core follows the new leader.
    follower: f64,
    /// The producer's first acknowledgement of a record sent after the kill.
    acked: f64,
}

/// Partition-leader failover: SIGKILL of the broker leading one partition of a replicated
/// topic (RF 3, `min.insync.replicas=2`) to the first acks=all acknowledgement of a record
/// sent to that partition after the kill, through the SDK with its defaults (one long-lived
/// producer sending a record every 5 ms). The killed broker is never the active controller
/// (a combined node that leads both adds a controller failover, and its sessions restart
/// with the new controller); `KILL=controller` measures that case instead. Stage times come
/// from the brokers' log lines ("session expired: broker fenced", "replica role"). Each trial
/// restarts the killed broker and waits until every partition has its full ISR again.
#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn partition_leader_failover_time() {
    let kill_controller = std::env::var("KILL").is_ok_and(|k| k == "controller");
    let mut c = failover_cluster();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let bootstrap = c.bootstrap();
    let producer = rt
        .block_on(Producer::new(
            ClientConfig::new(&bootstrap),
            ProducerConfig {
                acks: Acks::All,
                ..ProducerConfig::default()
            },
        ))
        .expect("producer");
    let mut all = Vec::new();
    for trial in 0..trials() {
        if let Some(stages) = failover_trial(&mut c, &rt, &producer, trial, kill_controller) {
            all.push(stages);
        }
    }
    let stage = |f: fn(&Stages) -> f64| all.iter().map(f).collect::<Vec<_>>();
    summary(
        "fenced (kill -9 -> the controller's log line)",
        stage(|s| s.fenced),
    );
    summary(
        "new leader's core leads (kill -9 -> its log line)",
        stage(|s| s.leader),
    );
    summary(
        "follower follows it (kill -9 -> its log line)",
        stage(|s| s.follower),
    );
    summary(
        "partition leader failover (kill -9 -> next acks=all acknowledgement)",
        stage(|s| s.acked),
    );
}

/// The cluster of the partition-leader measurement, with its topic at the full ISR: the
/// broker's default timers; preferred leaders come back a second after the restarted broker
/// rejoins (each trial waits for that), so that leaders stay spread over the brokers.
fn failover_cluster() -> Cluster {
    let mut c = Cluster::start_with(ClusterOptions {
        cluster_toml: "leader_imbalance_check_interval_ms = 1000\n".into(),
        ..ClusterOptions::default()
    });
    c.cli(&[
        "topic",
        "create",
        FAILOVER_TOPIC,
        "--partitions",
        &FAILOVER_PARTITIONS.to_string(),
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    wait_for_full_isr(&mut c);
    c
}

/// One trial: kills the leader of a partition (led by the active controller when
/// `kill_controller`, else by another broker) while `producer` sends to it, measures the
/// stages, restarts the broker and waits for the full ISR. None when no partition fits.
fn failover_trial(
    c: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    producer: &Producer,
    trial: usize,
    kill_controller: bool,
) -> Option<Stages> {
    let controller = c.wait_for_controller();
    let image = c.image_of(controller).expect("the controller's image");
    let partitions = &image.topics[FAILOVER_TOPIC].partitions;
    let Some((partition, victim)) = partitions
        .iter()
        .enumerate()
        .map(|(i, p)| (i as i32, p.leader))
        .find(|&(_, leader)| (leader as u64 == controller) == kill_controller)
    else {
        println!("trial {trial}: no partition led by a fitting broker; skipped");
        return None;
    };
    let state = Arc::new(SendState::default());
    let sender = rt.spawn(send_loop(producer.clone(), partition, state.clone()));
    wait_for(&state, None, "an acknowledgement before the kill");
    let kill_at = Instant::now();
    let kill_unix_ms = unix_ms_now();
    c.kill9(victim as u64);
    let acked_at = wait_for(&state, Some(kill_at), "an acknowledgement after the kill");
    state.stop.store(true, Ordering::Release);
    let _ = rt.block_on(sender);
    let mut stages = Stages {
        acked: (acked_at - kill_at).as_secs_f64() * 1000.0,
        ..Stages::default()
    };
    let leader_id = stages_from_logs(c, (partition, victim), kill_unix_ms, &mut stages);
    let s = stages;
    println!(
        "trial {trial}: partition {partition} leader {victim} -> {leader_id}: fenced {:.0} ms, \
         leader role {:.0} ms, follower role {:.0} ms, acknowledged {:.0} ms",
        s.fenced, s.leader, s.follower, s.acked
    );
    c.restart(victim as u64);
    wait_for_full_isr(c);
    Some(s)
}

/// Fills the log-line stages of `stages` (ms after `kill_unix_ms`) from the logs of the nodes
/// other than `victim`, for `partition`; returns the id of the node that took the leader role
/// (-1 when none logged it).
fn stages_from_logs(
    c: &Cluster,
    (partition, victim): (i32, i32),
    kill_unix_ms: f64,
    stages: &mut Stages,
) -> i32 {
    let part = format!("partition={FAILOVER_TOPIC}-{partition} ");
    let fenced = format!("broker fenced broker={victim} ");
    let mut leader_id = -1;
    for n in c.nodes.iter().filter(|n| n.id as i32 != victim) {
        let log = n.log();
        if let Some(t) = first_log_line(&log, kill_unix_ms, &[&part, "role=\"leader\""]) {
            stages.leader = t - kill_unix_ms;
            leader_id = n.id as i32;
        }
        if let Some(t) = first_log_line(&log, kill_unix_ms, &[&part, "role=\"follower\""]) {
            stages.follower = t - kill_unix_ms;
        }
        if let Some(t) = first_log_line(&log, kill_unix_ms, &[&fenced]) {
            stages.fenced = t - kill_unix_ms;
        }
    }
    leader_id
}

/// Waits until every live node sees every partition of the measured topic with all three
/// replicas in its ISR and led by its preferred replica (no leader election pending).
fn wait_for_full_isr(c: &mut Cluster) {
    c.wait_for_every_node("full ISR, preferred leaders", |i| {
        i.topics.get(FAILOVER_TOPIC).is_some_and(|t| {
            t.partitions.iter().all(|p| {
                p.isr.len() == 3 && p.leader != NO_LEADER && p.replicas.first() == Some(&p.leader)
            })
        })
    });
}

/// What the measurement's producer saw: (sent, acknowledged) per acknowledged record.
#[derive(Default)]
struct SendState {
    stop: AtomicBool,
    acks: Mutex<Vec<(Instant, Instant)>>,
}

/// Sends one record to `partition` every `SEND_INTERVAL` until told to stop.
async fn send_loop(producer: Producer, partition: i32, state: Arc<SendState>) {
    let mut n = 0u64;
    while !state.stop.load(Ordering::Acquire) {
        let sent = Instant::now();
        let record = ProducerRecord::new(FAILOVER_TOPIC)
            .partition(partition)
            .value(format!("v{n}"));
        n += 1;
        match producer.send(record).await {
            Ok(delivery) => {
                let state = state.clone();
                tokio::spawn(async move {
                    if delivery.await.is_ok() {
                        let mut acks = state.acks.lock().unwrap_or_else(|p| p.into_inner());
                        acks.push((sent, Instant::now()));
                    }
                });
            }
            Err(e) => eprintln!("send refused: {e}"),
        }
        tokio::time::sleep(SEND_INTERVAL).await;
    }
}

/// Waits (60 s at most) for the first acknowledgement of a record sent at or after `since`
/// (any record without it); returns when it was acknowledged.
fn wait_for(state: &SendState, since: Option<Instant>, what: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let first = {
            let acks = state.acks.lock().unwrap_or_else(|p| p.into_inner());
            acks.iter()
                .filter(|(sent, _)| since.is_none_or(|s| *sent >= s))
                .map(|(_, acked)| *acked)
                .min()
        };
        if let Some(at) = first {
            return at;
        }
        assert!(Instant::now() < deadline, "no {what} within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}
