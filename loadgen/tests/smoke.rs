//! Smoke runs of a few seconds against a real `borges broker` process (started by
//! `borges-testkit`). They check that the whole path works and that the numbers are consistent
//! (everything acknowledged is consumed, histograms are filled), never how fast it is.
//!
//! Needs the broker binary: `cargo build --workspace --bins` first (or set `BORGES_BIN`).

use std::path::Path;
use std::process::Command;

use borges_loadgen::driver::borges::BorgesDriver;
use borges_loadgen::report;
use borges_loadgen::result::RunResult;
use borges_loadgen::runner::{self, RunOptions};
use borges_loadgen::workload::Workload;
use borges_testkit::BrokerProcess;

fn workload(extra: &str) -> Workload {
    Workload::from_toml(&format!(
        r#"
        name = "smoke"
        topics = 1
        partitions_per_topic = 4
        record_size_bytes = 256
        {extra}
        [producer]
        rate_records_s = 2000
        linger_ms = 1
        acks = "all"
        [consumer]
        subscriptions_per_topic = 1
        consumers_per_subscription = 2
        [topic]
        durability = "fsync"
        [run]
        duration_s = 2
        warmup_s = 1
        "#
    ))
    .unwrap()
}

fn options(broker: &BrokerProcess, prefix: &str) -> RunOptions {
    RunOptions {
        bootstrap: broker.bootstrap(),
        broker_pid: Some(broker.pid()),
        topic_prefix: prefix.to_string(),
        keep_topics: false,
        progress: false,
        seed: 7,
        command: "smoke test".to_string(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn fixed_rate_run_against_a_real_broker_is_consistent() {
    let broker = BrokerProcess::start();
    let rt = runtime();
    let driver = BorgesDriver::new(&broker.bootstrap(), rt.handle().clone()).unwrap();
    let w = workload("keys = { distribution = \"zipf\", count = 100, exponent = 1.0 }");
    let r = runner::run(&driver, &w, &options(&broker, "smoke-fixed")).unwrap();
    let s = &r.summary;
    assert_eq!(
        s.errors,
        0,
        "first error: {:?}\nbroker log:\n{}",
        s.first_error,
        broker.log()
    );
    assert!(s.acked_records > 0);
    assert_eq!(s.acked_records, s.sent_records);
    assert_eq!(
        s.consumed_records, s.acked_records,
        "every acknowledged record is consumed"
    );
    assert!(s.publish.count > 0 && s.e2e.count > 0);
    assert!(s.publish.p50_ms <= s.publish.p99_ms && s.publish.p99_ms <= s.publish.max_ms);
    assert!(s.planned_records.is_some());
    assert!(r.windows.iter().any(|w| w.phase == "measure"));
    assert!(
        r.windows.iter().any(|w| w.broker.is_some()),
        "broker sampled from /proc"
    );
    assert_eq!(r.driver, "borges");
}

#[test]
fn rate_discovery_and_backlog_runs_complete() {
    let broker = BrokerProcess::start();
    let rt = runtime();
    let driver = BorgesDriver::new(&broker.bootstrap(), rt.handle().clone()).unwrap();
    let mut w = workload("");
    w.producer.rate_records_s = 0;
    w.topic.durability = borges_loadgen::workload::Durability::None;
    let r = runner::run(&driver, &w, &options(&broker, "smoke-max")).unwrap();
    assert_eq!(r.summary.errors, 0, "{:?}", r.summary.first_error);
    assert!(r.summary.acked_records > 0);
    assert!(r.windows.iter().any(|w| w.target_rate_records_s.is_some()));

    w.consumer.backlog_size_bytes = 2 << 20;
    let r = runner::run(&driver, &w, &options(&broker, "smoke-backlog")).unwrap();
    let b = r.summary.backlog.expect("backlog summary");
    assert!(b.completed, "{:?}", r.summary);
    assert!(b.backlog_bytes >= 2 << 20);
    assert_eq!(r.summary.consumed_records, b.backlog_records);
    assert_eq!(
        r.summary.e2e.count, 0,
        "no end-to-end latency for a backlog"
    );
}

#[test]
fn command_line_run_prints_machine_lines_and_writes_a_report() {
    let broker = BrokerProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let workload_path = dir.path().join("smoke.toml");
    std::fs::write(&workload_path, toml::to_string(&workload("")).unwrap()).unwrap();
    let json = dir.path().join("borges.json");
    let out = Command::new(env!("CARGO_BIN_EXE_borges-loadgen"))
        .args(["run", "--driver", "borges", "--quiet", "--duration-s", "2"])
        .arg("--workload")
        .arg(&workload_path)
        .arg("--bootstrap")
        .arg(broker.bootstrap())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for key in [
        "throughput_mb_s=",
        "throughput_records_s=",
        "publish_p50_ms=",
        "publish_p99_ms=",
        "publish_p999_ms=",
        "e2e_p99_ms=",
    ] {
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with(key)).count(),
            1,
            "{key}"
        );
    }
    let result = RunResult::read_json(&json).unwrap();
    assert_eq!(result.workload.run.duration_s, 2);
    let report_dir = dir.path().join("report");
    let md = report::write_report(vec![result], &report_dir, "").unwrap();
    assert!(Path::new(&md).exists());
    assert!(report_dir.join("smoke-latency.svg").exists());
}

/// Runs `borges-loadgen run` of the smoke workload against `broker` with `extra` arguments,
/// killed after 60 s; returns its output.
fn loadgen_run(broker: &BrokerProcess, dir: &Path, extra: &[&str]) -> std::process::Output {
    let workload_path = dir.join("smoke.toml");
    std::fs::write(&workload_path, toml::to_string(&workload("")).unwrap()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_borges-loadgen"))
        .args(["run", "--driver", "borges", "--quiet", "--duration-s", "2"])
        .arg("--workload")
        .arg(&workload_path)
        .arg("--bootstrap")
        .arg(broker.bootstrap())
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        // SAFETY: a signal to the child this test started (gone by then if it finished).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    drop(watchdog);
    out
}

/// Issue 20 item 4: the load generator runs a workload over SASL/SCRAM (the broker refuses
/// every unauthenticated request), and a wrong password ends the run with the broker's
/// refusal instead of measuring nothing. Caught "the driver ignores --sasl-*": the first
/// run fails with IllegalSaslState.
#[test]
fn command_line_run_authenticates_with_sasl() {
    let broker = BrokerProcess::start_with(borges_testkit::BrokerOptions {
        args: vec!["--sasl-enabled-mechanisms".into(), "SCRAM-SHA-512".into()],
        ..Default::default()
    });
    let mut create = Command::new(borges_testkit::borges_bin())
        .args(["user", "create", "bench", "--mechanism", "SCRAM-SHA-512"])
        .arg("--password-stdin")
        .arg("--data-dir")
        .arg(broker.data_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut create.stdin.take().unwrap(), b"bench-secret\n").unwrap();
    assert!(create.wait().unwrap().success());
    let dir = tempfile::tempdir().unwrap();
    let right = dir.path().join("right");
    std::fs::write(&right, "bench-secret\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-secret\n").unwrap();
    let sasl = |file: &Path| {
        vec![
            "--sasl-mechanism".to_string(),
            "SCRAM-SHA-512".to_string(),
            "--sasl-username".to_string(),
            "bench".to_string(),
            "--sasl-password-file".to_string(),
            file.display().to_string(),
        ]
    };

    // The broker re-reads its credentials file within a second: retry the first run briefly.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let out = loop {
        let args = sasl(&right);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = loadgen_run(&broker, dir.path(), &args);
        if out.status.success() || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("throughput_records_s="))
        .and_then(|v| v.trim().parse().ok())
        .expect("throughput_records_s line");
    assert!(records > 0.0, "{stdout}");

    let args = sasl(&wrong);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = loadgen_run(&broker, dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a wrong password ran: {stderr}");
    assert!(
        stderr.to_lowercase().contains("authentication")
            || stderr.to_lowercase().contains("credentials"),
        "{stderr}"
    );

    let out = loadgen_run(&broker, dir.path(), &[]);
    assert!(!out.status.success(), "no SASL ran against a SASL broker");
}
