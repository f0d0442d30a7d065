//! Start-up as an operator sees it, through the real binary: the shipped example config is
//! accepted unchanged, `--print-config` prints the merged configuration, config errors read
//! as toml renders them with a suggestion, runtime failures are not called configuration
//! errors, the start-up log is a few plain lines, and a ready file named without a
//! directory is written into the broker's working directory.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use borges_broker::config::BrokerConfig;
use borges_testkit::{borges_bin, free_port, BrokerOptions, BrokerProcess, READY_TIMEOUT};

const EXAMPLE: &str = include_str!("../../config/borges.toml");

fn broker(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(borges_bin());
    cmd.arg("broker").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run borges broker")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_example_config_starts_a_broker_unchanged() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/borges.toml");
    let printed = stdout(&broker(&["--config", example, "--print-config"], &[]));
    let parsed = BrokerConfig::from_toml_str(&printed).expect("printed config reads back");
    assert_eq!(parsed.to_toml(), BrokerConfig::default().to_toml());
    // The file as shipped (flags move the addresses and data directory into the test's own).
    let broker = BrokerProcess::start_with(BrokerOptions {
        config_toml: Some(EXAMPLE.to_string()),
        ..Default::default()
    });
    assert!(std::net::TcpStream::connect(broker.addr()).is_ok());
}

#[test]
fn print_config_shows_defaults_file_environment_and_flags_merged() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.toml");
    std::fs::write(&file, "[log]\nnum_partitions = 3\n").unwrap();
    let file = file.to_str().unwrap();
    let args = [
        "--config",
        file,
        "--listen",
        "localhost:19998",
        "--print-config",
    ];
    let printed = stdout(&broker(&args, &[("BORGES_CORES", "3")]));
    let c = BrokerConfig::from_toml_str(&printed).unwrap();
    assert_eq!((c.log.num_partitions, c.cores), (3, 3));
    assert_eq!(c.listen, "127.0.0.1:19998", "a host name resolves");
    assert_eq!(c.advertised_host.as_deref(), Some("localhost"));
    assert_eq!(
        c.groups.session_timeout_ms, 45_000,
        "defaults are printed too"
    );
    assert!(
        printed.contains("[storage]") && printed.contains("retention_ms = "),
        "{printed}"
    );
    assert!(
        printed.starts_with("# Effective configuration"),
        "{printed}"
    );
}

#[test]
fn config_errors_read_as_toml_renders_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.toml");
    std::fs::write(&file, "[limits]\nconnection_max = 5\n").unwrap();
    let out = broker(&["--config", file.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: invalid configuration in "),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("invalid configuration").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("line 2, column 1\n"),
        "kept on several lines: {stderr}"
    );
    assert!(stderr.contains("2 | connection_max = 5"), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("did you mean `connections_max`?"),
        "{stderr}"
    );
}

#[test]
fn runtime_failures_are_not_configuration_errors() {
    let running = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let listen = running.addr().to_string();
    let out = broker(
        &[
            "--listen",
            &listen,
            "--metrics-listen",
            "",
            "--data-dir",
            data,
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {listen} (listen)")),
        "{stderr}"
    );
    assert!(!stderr.contains("invalid configuration"), "{stderr}");
    let own = running.data_dir().to_str().unwrap();
    let out = broker(
        &[
            "--listen",
            "127.0.0.1:1",
            "--metrics-listen",
            "",
            "--data-dir",
            own,
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is in use by another broker"), "{stderr}");
    assert!(!stderr.contains("invalid configuration"), "{stderr}");
}

#[test]
fn the_start_up_log_is_a_few_plain_lines() {
    let broker = BrokerProcess::start_with(BrokerOptions {
        cores: 2,
        ..Default::default()
    });
    // The serving line follows the ready file.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut log = broker.log();
    while !log.contains("serving: ") {
        assert!(std::time::Instant::now() < deadline, "{log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        log = broker.log();
    }
    assert!(!log.contains('\x1b'), "no colour codes in a file: {log}");
    assert!(
        !log.contains("Some("),
        "fields are displayed, not debugged: {log}"
    );
    // The test kit turns on the server's debug lines; the operator sees the others.
    let lines: Vec<&str> = log.lines().filter(|l| !l.contains(" DEBUG ")).collect();
    assert!(lines.len() <= 5, "{log}");
    let has = |s: &str| lines.iter().any(|l| l.contains(s));
    assert!(
        has("starting: 2 cores on CPUs ") && has("RLIMIT_MEMLOCK"),
        "{log}"
    );
    assert!(has("opened 16 partitions on 2 cores (topics: 1"), "{log}");
    let serving = format!("serving: listen {}, per-core ports ", broker.addr());
    assert!(has(&serving) && has("/metrics"), "{log}");
}

/// A broker started by the test itself, killed when dropped (a failed assertion leaves no
/// process behind).
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--ready-file r.json`, a bare name: the broker writes it into its working directory and
/// serves (write_atomic used to sync the bare name's parent "", which failed, and the broker
/// stopped right after writing the file).
#[test]
fn a_ready_file_named_without_a_directory_is_written_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let log_path = dir.path().join("broker.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut broker = Spawned(
        Command::new(borges_bin())
            .current_dir(dir.path())
            .arg("broker")
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen",
                &listen,
                "--core-port-base",
                "0",
                "--metrics-listen",
                "",
            ])
            .args(["--cores", "1", "--ready-file", "r.json"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn borges broker"),
    );
    // Serving is logged after the ready file is written (and its directory synced).
    let deadline = Instant::now() + READY_TIMEOUT;
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains("serving: ") {
            break log;
        }
        if let Some(status) = broker.0.try_wait().unwrap() {
            panic!("broker exited with {status} before serving; log:\n{log}");
        }
        assert!(Instant::now() < deadline, "broker not serving; log:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(dir.path().join("r.json")).expect("r.json in the dir");
    let ready: serde_json::Value = serde_json::from_str(&text).expect("the ready file is JSON");
    assert_eq!(ready["listen"], listen.as_str(), "{text}");
    assert!(
        !dir.path().join(".r.json.tmp").exists(),
        "no temporary file left"
    );
    std::net::TcpStream::connect(&listen).unwrap_or_else(|e| panic!("{e}; log:\n{log}"));
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(broker.0.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "broker did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}
