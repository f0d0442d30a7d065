//! The CLI says what it is doing (issue 18, item 2): the SDK's warnings reach standard error
//! (an offset reset, a broker that stays down, a produce blocked by min.insync.replicas), a
//! topic deleted under a consumer ends it with an error, long runs show a progress line on a
//! terminal and nothing elsewhere, and a closed output pipe is a normal end (exit 0).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use borges_testkit::BrokerProcess;
use common::{borges, borges_with, ok, stderr};

/// Generous bound on waits for something a process prints (not a timing assertion).
const GUARD: Duration = Duration::from_secs(60);

/// The write end of a pipe whose read end is already closed: the first write fails with
/// EPIPE, as when `| head` has exited.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two descriptors that we own from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh and owned by these values.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn spawn(broker: &BrokerProcess, args: &[&str], stdout: Stdio, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(args)
        .env("BORGES_BOOTSTRAP", broker.bootstrap())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("run borges")
}

/// Lines of a child's stream, read on a thread, so that a test can wait for one with a guard.
fn lines_of(stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for a line containing every one of `needles`; returns it.
fn wait_for_line(lines: &mpsc::Receiver<String>, needles: &[&str]) -> String {
    let deadline = Instant::now() + GUARD;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if needles.iter().all(|n| line.contains(n)) => return line,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line with {needles:?}; saw {seen:?}");
}

/// Waits (at most [`GUARD`]) for `child` to exit; kills it and fails the test otherwise.
/// Returns its exit code and what it wrote to standard error.
fn finish(mut child: Child) -> (Option<i32>, String) {
    let err = child.stderr.take().map(lines_of);
    let deadline = Instant::now() + GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("borges did not exit within {GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text: Vec<String> = err.map(|e| e.iter().collect()).unwrap_or_default();
    (status.code(), text.join("\n"))
}

fn values(n: usize) -> String {
    (0..n).map(|i| format!("v{i}\n")).collect()
}

#[test]
fn a_closed_output_pipe_ends_commands_with_exit_0() {
    let broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "t"], None));
    ok(borges(&broker, &["produce", "t"], Some(&values(100))));
    for args in [
        &["topic", "list"][..],
        &["topic", "describe", "t"],
        &["topic", "offsets", "t", "--format", "json"],
        &["consume", "t", "--from-beginning"],
        &["consume", "t", "--group", "g", "--from-beginning"],
        &["group", "list"],
    ] {
        let (code, err) = finish(spawn(&broker, args, closed_pipe(), Stdio::piped()));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "{args:?}: {err}"
        );
    }

    // `borges consume t --from-beginning | head -1`: the reader goes away after one line;
    // the next records hit the closed pipe.
    let mut child = spawn(
        &broker,
        &["consume", "t", "--from-beginning"],
        Stdio::piped(),
        Stdio::piped(),
    );
    let (tx, first) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
        // The reader (and the pipe's read end) is dropped here, as `head -1` exits.
    });
    assert_eq!(first.recv_timeout(GUARD).unwrap(), "v0\n");
    ok(borges(&broker, &["produce", "t"], Some(&values(10))));
    let (code, err) = finish(child);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn offset_resets_are_warned_about_unless_quiet_and_without_colours() {
    let broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "r"], None));
    ok(borges(&broker, &["produce", "r"], Some(&values(3))));
    let args = [
        "consume",
        "r",
        "--partition",
        "0",
        "--offset",
        "500",
        "--timeout-ms",
        "1500",
    ];
    let output = borges(&broker, &args, None);
    assert_eq!(ok(output.clone()), "");
    let err = stderr(&output);
    assert!(
        err.contains("offset 500 of r-0 is out of range; reset to offset 3"),
        "{err}"
    );
    assert!(err.contains("WARN"), "{err}");
    assert!(
        !err.contains('\x1b'),
        "no colours when stderr is not a terminal: {err:?}"
    );
    let quiet: Vec<&str> = std::iter::once("-q").chain(args).collect();
    let output = borges(&broker, &quiet, None);
    assert_eq!(stderr(&output), "Processed a total of 0 messages\n");
    // RUST_LOG replaces the default filter, NO_COLOR is honoured (there are no colours here
    // anyway; the variable must not break anything).
    let output = borges_with(
        &broker,
        &args,
        None,
        &[("RUST_LOG", "error"), ("NO_COLOR", "1")],
    );
    assert_eq!(stderr(&output), "Processed a total of 0 messages\n");
}

#[test]
fn a_topic_deleted_under_a_consumer_ends_it_with_an_error() {
    let broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "d"], None));
    // From the beginning: a consumer that starts at the end could miss the record below.
    for args in [
        &["consume", "d", "--from-beginning"][..],
        &["consume", "d", "--group", "dg", "--from-beginning"],
    ] {
        let mut child = spawn(&broker, args, Stdio::piped(), Stdio::piped());
        let out = lines_of(child.stdout.take().unwrap());
        ok(borges(&broker, &["produce", "d"], Some("before\n")));
        wait_for_line(&out, &["before"]);
        ok(borges(&broker, &["topic", "delete", "d"], None));
        let (code, err) = finish(child);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(
            err.lines()
                .last()
                .is_some_and(|l| l.starts_with("error: topic d was deleted")),
            "{args:?}: {err}"
        );
        ok(borges(&broker, &["topic", "create", "d"], None));
    }
}

#[test]
fn a_broker_that_stays_down_is_reported_while_the_consumer_retries() {
    let mut broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "s"], None));
    let mut child = spawn(
        &broker,
        &["consume", "s", "--from-beginning"],
        Stdio::piped(),
        Stdio::piped(),
    );
    let out = lines_of(child.stdout.take().unwrap());
    let err = lines_of(child.stderr.take().unwrap());
    ok(borges(&broker, &["produce", "s"], Some("up\n")));
    wait_for_line(&out, &["up"]);
    broker.kill9();
    let warning = wait_for_line(&err, &["WARN", "failed", "retrying"]);
    assert!(warning.contains("127.0.0.1"), "{warning}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_produce_blocked_by_min_insync_replicas_says_why_and_fails_at_its_delivery_timeout() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "m", "--config", "min.insync.replicas=2"],
        None,
    ));
    let output = borges(
        &broker,
        &[
            "produce",
            "m",
            "--delivery-timeout-ms",
            "2000",
            "--request-timeout-ms",
            "1000",
        ],
        Some("x\n"),
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains("producing to m-0 failed: NotEnoughReplicas")
            && l.contains("retrying")),
        "{err}"
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("error: 1 of 1 records were not acknowledged")
            && last.contains("delivery timed out after 2000 ms")
            && last.contains("NotEnoughReplicas"),
        "{err}"
    );
    // With acks=1 the ISR is not consulted.
    ok(borges(
        &broker,
        &["produce", "m", "--acks", "1"],
        Some("y\n"),
    ));
}

/// A pseudo-terminal: (master, slave) descriptors.
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors that we own from here on.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: fresh descriptors owned by these values.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// Reads the terminal until `needle` appears (on a thread; the guard bounds the wait).
fn wait_for_text(master: std::fs::File, needle: &'static str) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut master = master;
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.contains(needle) {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    rx
}

#[test]
fn long_runs_show_progress_on_a_terminal_and_nothing_elsewhere() {
    let broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "g"], None));
    // produce, standard error on a terminal: the progress line appears while standard input
    // stays open, and is cleared at the end.
    let (master, slave) = pty();
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(["--bootstrap", &broker.bootstrap(), "produce", "g"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(values(1000).as_bytes()).unwrap();
    let seen = wait_for_text(master, "1000 acknowledged")
        .recv_timeout(GUARD)
        .unwrap();
    assert!(
        seen.contains("\rproduce: 1000 records read, 1000 acknowledged"),
        "{seen:?}"
    );
    drop(stdin);
    assert_eq!(finish(child).0, Some(0));

    // consume with records going to a pipe and standard error on a terminal.
    let (master, slave) = pty();
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args([
            "--bootstrap",
            &broker.bootstrap(),
            "consume",
            "g",
            "--from-beginning",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let seen = wait_for_text(master, "consume: 1000 records")
        .recv_timeout(GUARD)
        .unwrap();
    assert!(seen.contains("\rconsume: 1000 records"), "{seen:?}");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(finish(child).0, Some(0));
    assert_eq!(out.iter().count(), 1000);

    // Not a terminal: standard error has nothing but the final count, however long it runs.
    let output = borges(
        &broker,
        &["consume", "g", "--from-beginning", "--timeout-ms", "1500"],
        None,
    );
    assert_eq!(ok(output.clone()).lines().count(), 1000);
    assert_eq!(stderr(&output), "Processed a total of 1000 messages\n");
    let output = borges(&broker, &["produce", "g"], Some(&values(10)));
    assert_eq!(stderr(&output), "");
}
