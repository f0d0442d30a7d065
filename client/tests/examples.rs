//! The runnable examples work as their docs say: they parse flags, create their topic, and
//! print errors with Display (one `error: ...` line, exit 1).

use std::path::PathBuf;
use std::process::{Command, Output};

use borges_testkit::BrokerProcess;

/// `target/<profile>/examples/<name>` (`cargo test` builds the examples).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "{} not built", path.display());
    path
}

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(example(name))
        .args(args)
        .output()
        .expect("run example")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn produce_creates_its_topic_and_consume_reads_it_back() {
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let common = ["--bootstrap", bootstrap.as_str(), "--topic", "fresh"];
    let produced = stdout(&run("produce", &[&common[..], &["--count", "7"]].concat()));
    assert_eq!(produced.lines().count(), 7, "{produced}");
    assert!(
        produced.lines().all(|l| l.starts_with("fresh-")),
        "{produced}"
    );
    let consumed = stdout(&run(
        "consume",
        &[&common[..], &["--idle-ms", "500"]].concat(),
    ));
    let records = consumed.lines().filter(|l| l.contains("value=")).count();
    assert_eq!(records, 7, "{consumed}");
    let admin = stdout(&run("admin", &common));
    assert!(admin.contains("fresh exists"), "{admin}");
}

#[test]
fn errors_are_printed_with_display_and_exit_1() {
    let dead = format!("127.0.0.1:{}", borges_testkit::free_port());
    for name in ["produce", "consume", "admin"] {
        let output = run(name, &["--bootstrap", &dead]);
        assert_eq!(output.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("error: "), "{name}: {stderr}");
        assert!(stderr.contains(&dead), "{name}: {stderr}");
        // Debug output of the error enum would show its variant names.
        assert!(!stderr.contains("NoBrokerAvailable {"), "{name}: {stderr}");
    }
    let usage = run("produce", &["--count", "many"]);
    assert_eq!(usage.status.code(), Some(2), "a bad flag is a usage error");
}
