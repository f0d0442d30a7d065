//! What a broker process that is not ready in time is doing: each thread's name, wait channel
//! and kernel stack, and the state of its io_uring rings, for the panic message (a hung core
//! shows up as a thread in `io_cqring_wait`, and its rings say what it still waits for).

use std::fmt::Write;

/// Every thread of `pid`: name, wait channel and kernel stack (the stack needs root; without
/// it the line says so), then a summary of each io_uring instance the process holds.
pub fn process_report(pid: u32) -> String {
    let mut out = String::new();
    let task_dir = format!("/proc/{pid}/task");
    let mut tids: Vec<u64> = match std::fs::read_dir(&task_dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect(),
        Err(e) => return format!("cannot list the threads of {pid}: {e}\n"),
    };
    tids.sort_unstable();
    for tid in tids {
        let read = |name: &str| {
            std::fs::read_to_string(format!("{task_dir}/{tid}/{name}"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|e| format!("<{name}: {e}>"))
        };
        let _ = writeln!(out, "thread {tid} {} wchan={}", read("comm"), read("wchan"));
        for frame in read("stack").lines() {
            let _ = writeln!(out, "    {frame}");
        }
    }
    out.push_str(&rings_report(pid));
    out
}

/// Head and tail of each io_uring's queues and its armed polls (`/proc/PID/fdinfo`).
fn rings_report(pid: u32) -> String {
    let mut out = String::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    let mut fds: Vec<String> = fds
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().contains("io_uring"))
        })
        .map(|fd| fd.file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort_by_key(|fd| fd.parse::<u64>().unwrap_or(0));
    for fd in fds {
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let wanted = ["SqHead", "SqTail", "CqHead", "CqTail", "op="];
        let fields: Vec<&str> = info
            .lines()
            .map(str::trim)
            .filter(|l| wanted.iter().any(|w| l.starts_with(w)))
            .collect();
        let _ = writeln!(out, "io_uring fd {fd}: {}", fields.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_every_thread_of_the_process() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        // The thread names itself before it runs the closure.
        let named = std::thread::Builder::new()
            .name("report-probe".into())
            .spawn(move || {
                let _ = started_tx.send(());
                rx.recv()
            })
            .unwrap();
        started.recv().unwrap();
        let report = process_report(std::process::id());
        drop(tx);
        named.join().unwrap().ok();
        assert!(report.contains("report-probe"), "{report}");
        assert!(report.contains("wchan="), "{report}");
    }
}
