//! Evidence of a broker that crashed under a test: brokers start with core dumps enabled and
//! their own directory as working directory, so a crash (SIGABRT from a `free(): double
//! free`, SIGSEGV, ...) leaves a `core` file beside the broker's log; when the test reaps the
//! process, [`report`] turns that file into every thread's backtrace (eu-stack) and the test
//! prints it with the log. Without this a crash shows only the allocator's last line (the
//! `double free detected in tcache 2` that CI saw once, which could not be reproduced).
//!
//! The core file lives in the test's temporary directory and goes with it. The kernel's
//! `core_pattern` must name a plain file (the default `core`, or `core.%p`...); a pipe to a
//! crash collector takes the dump elsewhere and the report says so.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Where the kernel puts core dumps.
const CORE_PATTERN_PATH: &str = "/proc/sys/kernel/core_pattern";

/// Makes `cmd` run in `dir` with an unlimited `RLIMIT_CORE`, so that a crash dumps its core
/// into `dir`.
pub(crate) fn enable_core_dumps(cmd: &mut Command, dir: &Path) {
    cmd.current_dir(dir);
    let limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit,
    // which is async-signal-safe, on a struct it owns. Raising the hard limit needs
    // privileges; without them the soft limit is raised to the hard one.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_CORE, &limit) != 0 {
                let mut current = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_CORE, &mut current) == 0 {
                    current.rlim_cur = current.rlim_max;
                    libc::setrlimit(libc::RLIMIT_CORE, &current);
                }
            }
            Ok(())
        });
    }
}

/// Whether `status` is a crash: death by a signal other than the SIGKILL and SIGTERM that
/// tests send.
pub(crate) fn is_crash(status: &ExitStatus) -> bool {
    status
        .signal()
        .is_some_and(|s| s != libc::SIGKILL && s != libc::SIGTERM)
}

/// The report of a broker that ended with `status` in `dir`: `None` unless it crashed; else
/// the signal and, when a core file is there, every thread's backtrace.
pub(crate) fn report(status: &ExitStatus, dir: &Path, bin: &Path) -> Option<String> {
    if !is_crash(status) {
        return None;
    }
    let signal = status.signal().unwrap_or(0);
    let mut text = format!(
        "--- broker crashed: {status} (signal {signal}, core dumped: {}) ---\n",
        status.core_dumped()
    );
    let cores = core_files(dir);
    if cores.is_empty() {
        let pattern = std::fs::read_to_string(CORE_PATTERN_PATH).unwrap_or_default();
        text.push_str(&format!(
            "no core file in {} (kernel.core_pattern = {:?}; it must name a file, like `core`)\n",
            dir.display(),
            pattern.trim()
        ));
    }
    for core in cores {
        text.push_str(&backtraces(bin, &core));
    }
    Some(text)
}

/// Files named `core` or `core.*` in `dir`.
fn core_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut cores: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "core" || n.starts_with("core."))
        })
        .collect();
    cores.sort();
    cores
}

/// Every thread's backtrace in `core`: elfutils' `eu-stack` (gdb 13 cannot read the other
/// threads' registers of this kernel's cores: ".reg-xstate ... too small", every frame 0x0),
/// else gdb, else why there is none.
fn backtraces(bin: &Path, core: &Path) -> String {
    let eu_stack = Command::new("eu-stack")
        .arg("--core")
        .arg(core)
        .arg("-e")
        .arg(bin)
        .stdin(Stdio::null())
        .output();
    let out = match eu_stack {
        Ok(out) if !out.stdout.is_empty() => Ok(("eu-stack", out)),
        _ => Command::new("gdb")
            .args(["-batch", "-nx", "-q"])
            .args(["-ex", "info threads", "-ex", "thread apply all bt"])
            .arg(bin)
            .arg(core)
            .stdin(Stdio::null())
            .output()
            .map(|out| ("gdb", out)),
    };
    match out {
        Ok((tool, out)) => format!(
            "--- {tool} backtraces of {} ---\n{}{}",
            core.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!(
            "core file {}: neither eu-stack nor gdb could run ({e}): \
             install elfutils for backtraces\n",
            core.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that aborts leaves a core in its directory, and the report carries gdb's
    /// backtrace of it (the planted bug "enable_core_dumps does nothing" fails here: no core).
    #[test]
    fn an_aborting_child_leaves_a_core_and_a_backtrace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pattern = std::fs::read_to_string(CORE_PATTERN_PATH).unwrap_or_default();
        if pattern.starts_with('|') || pattern.contains('/') {
            crate::skip(
                "BORGES_REQUIRE_CORE_DUMPS",
                &format!(
                    "kernel.core_pattern {:?} does not write into the working directory",
                    pattern.trim()
                ),
            );
            return;
        }
        let sh = PathBuf::from("/bin/sh");
        let mut cmd = Command::new(&sh);
        cmd.args(["-c", "kill -ABRT $$"]);
        enable_core_dumps(&mut cmd, dir.path());
        let status = cmd.status().expect("run sh");
        assert!(is_crash(&status), "{status}");
        let text = report(&status, dir.path(), &sh).expect("a crash report");
        assert!(status.core_dumped(), "{text}");
        assert_eq!(core_files(dir.path()).len(), 1, "{text}");
        if Command::new("eu-stack").arg("--version").output().is_ok() {
            assert!(text.contains("eu-stack backtraces of"), "{text}");
            assert!(text.contains("TID ") && text.contains("#0"), "{text}");
        }
    }

    #[test]
    fn kills_sent_by_tests_are_not_crashes() {
        let status = Command::new("/bin/sh")
            .args(["-c", "kill -KILL $$"])
            .status()
            .expect("run sh");
        assert!(!is_crash(&status));
        assert!(report(&status, Path::new("/nonexistent"), Path::new("/bin/sh")).is_none());
        let ok = Command::new("/bin/true").status().expect("run true");
        assert!(!is_crash(&ok));
    }
}
