//! Measurements, not tests (ignored; no timed assertions): controller failover and broker
//! fencing times on a three-broker cluster with the broker's default timers.
//!
//! ```text
//! cargo build --workspace --bins
//! TRIALS=20 cargo test -p borges-cli --test cluster_failover -- --ignored --nocapture
//! ```
//!
//! Controller failover: SIGKILL of the active controller to the next committed metadata change
//! (a `borges topic create` against the survivors returning success; the broker's controller
//! retries internally until a new Raft leader takes the write). Fencing: SIGKILL of a broker
//! that is not the controller to the moment the active controller's applied image shows it
//! fenced (polled every 5 ms over the controller link). Each trial restarts the killed broker
//! and waits until it runs again.

use std::time::{Duration, Instant};

use borges_replication::metadata::BrokerState;
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
