//! The controller quorum as built (openraft on glommio, durable log with fdatasync, the
//! controller link over loopback TCP): three nodes in this process, one executor thread each.
//!
//! Measures sequential write latency through the leader (a blocking link client: request,
//! replicate to a majority, fdatasync on each, apply, answer) and failover: a crash of the
//! leader (its listener and connections close, Raft is not told) to the next committed write,
//! over a number of trials (the old leader restarts between trials).
//!
//! ```text
//! [HEARTBEAT_MS=.. ELECTION_MS=.. STAGGER_MS=.. WINDOW_MS=..] \
//!   cargo run --release -p borges-replication --example quorum_bench -- [writes] [trials]
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use borges_replication::network::RaftTuning;
use common::cluster::Cluster;

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The default tuning with the timers from the environment.
fn tuning_from_env() -> RaftTuning {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let d = RaftTuning::default();
    RaftTuning {
        heartbeat_interval_ms: env("HEARTBEAT_MS", d.heartbeat_interval_ms),
        election_timeout_ms: env("ELECTION_MS", d.election_timeout_ms),
        election_stagger_ms: env("STAGGER_MS", d.election_stagger_ms),
        election_window_ms: env("WINDOW_MS", d.election_window_ms),
        ..d
    }
}

/// Sequential writes through the leader: sorted latencies (ms) and the leader at the end.
fn measure_writes(c: &Cluster, mut leader: u64, writes: usize) -> (Vec<f64>, u64) {
    let mut client = c.client(leader).expect("client");
    let mut lat = Vec::with_capacity(writes);
    for i in 0..writes {
        let cmd = common::Set {
            key: format!("k{i}"),
            value: "v".into(),
        };
        let t = Instant::now();
        let direct = client.write::<common::Set, Option<String>>(&cmd);
        if !matches!(direct, Ok(Ok(_))) {
            // The leader changed (an election under load): find the new one and go on.
            c.write(&cmd.key, &cmd.value).expect("write");
            (leader, _) = c.wait_leader();
            client = c.client(leader).expect("client");
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    (lat, leader)
}

/// Crashes the leader `trials` times: sorted times (ms) to the next committed write.
fn measure_failovers(c: &mut Cluster, mut leader: u64, trials: usize) -> Vec<f64> {
    let mut failover = Vec::with_capacity(trials);
    for trial in 0..trials {
        c.crash(leader);
        let t = Instant::now();
        let key = format!("after-crash-{trial}");
        c.write(&key, "v").expect("write after failover");
        failover.push(t.elapsed().as_secs_f64() * 1e3);
        c.start(leader).expect("old leader restarts");
        (leader, _) = c.wait_leader();
        // Let the restarted node catch up before the next trial.
        c.wait_state(leader, |s| s.map.contains_key(&key));
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    failover.sort_by(f64::total_cmp);
    failover
}

fn main() {
    let mut args = std::env::args().skip(1);
    let writes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let trials: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let tuning = tuning_from_env();
    println!("{tuning:?}");
    let mut c = Cluster::new(3, 0, tuning);
    let started = Instant::now();
    for id in 1..=3 {
        c.start(id).expect("node starts");
    }
    let (leader, term_before) = c.wait_leader();
    let formation_ms = started.elapsed().as_secs_f64() * 1e3;
    let (lat, leader) = measure_writes(&c, leader, writes);
    let term_after = c.status(leader).map(|s| s.term).unwrap_or(0);
    let failover = measure_failovers(&mut c, leader, trials);
    println!("formation (start of 3 nodes to an agreed leader): {formation_ms:.0} ms");
    println!(
        "write latency over {writes} sequential writes: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat[lat.len() - 1]
    );
    println!(
        "elections during the writes (no fault injected): {}",
        term_after.saturating_sub(term_before)
    );
    println!(
        "failover (leader crash to next committed write) over {trials} trials: \
         median {:.0} ms, max {:.0} ms",
        pct(&failover, 0.5),
        failover[failover.len() - 1]
    );
}
