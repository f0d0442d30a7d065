//! Helpers of the CLI integration tests: run the real `borges` binary against a broker.

#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use borges_testkit::BrokerProcess;

/// `borges ARGS` against `broker`, with `stdin` as standard input.
pub fn borges(broker: &BrokerProcess, args: &[&str], stdin: Option<&str>) -> Output {
    borges_with(broker, args, stdin, &[])
}

/// `borges ARGS` with extra environment variables.
pub fn borges_with(
    broker: &BrokerProcess,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(args)
        .env("BORGES_BOOTSTRAP", broker.bootstrap())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run borges");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("borges output")
}

/// Success: returns standard output.
pub fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 stdout")
}

/// A failure: exit code 1 and exactly one line on stderr, starting with `error: `.
pub fn failed(output: Output) -> String {
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected exit code 1: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// A usage error: exit code 2 and a message on stderr starting with `error: `.
pub fn usage_error(output: Output) -> String {
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert_eq!(
        output.status.code(),
        Some(2),
        "expected a usage error: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// Standard error of a finished command.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Parses one line of JSON output.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim_end()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `borges` with the words of `line` as arguments (no quoting: for arguments without spaces).
pub fn run(broker: &BrokerProcess, line: &str) -> Output {
    let args: Vec<&str> = line.split_whitespace().collect();
    borges(broker, &args, None)
}

/// [`run`] with `stdin` as standard input.
pub fn run_with_input(broker: &BrokerProcess, line: &str, stdin: &str) -> Output {
    let args: Vec<&str> = line.split_whitespace().collect();
    borges(broker, &args, Some(stdin))
}
