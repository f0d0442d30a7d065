//! CPU and memory of a process, read from `/proc/<pid>`, and finding a broker's process by the
//! TCP port it listens on.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::LoadgenError;

/// CPU time and resident memory of a process at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcSample {
    /// User + system CPU time of all threads, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size.
    pub rss_bytes: u64,
}

/// Resource use over one interval.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcUsage {
    /// CPU use in percent of one core (200 = two cores busy).
    pub cpu_pct: f64,
    /// Resident memory at the end of the interval.
    pub rss_bytes: u64,
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

fn page_size_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/statm`.
pub fn sample(pid: u32) -> Result<ProcSample, LoadgenError> {
    let dir = format!("/proc/{pid}");
    let stat = read(&format!("{dir}/stat"))?;
    let statm = read(&format!("{dir}/statm"))?;
    let cpu_ticks = parse_stat_cpu_ticks(&stat)
        .ok_or_else(|| LoadgenError::Proc(format!("cannot parse {dir}/stat")))?;
    let rss_pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| LoadgenError::Proc(format!("cannot parse {dir}/statm")))?;
    Ok(ProcSample {
        cpu_ticks,
        rss_bytes: rss_pages * page_size_bytes(),
    })
}

fn read(path: &str) -> Result<String, LoadgenError> {
    std::fs::read_to_string(path).map_err(|source| LoadgenError::Io {
        path: path.to_string(),
        source,
    })
}

/// utime + stime from the text of `/proc/<pid>/stat` (fields 14 and 15; the command name in
/// field 2 may contain spaces and parentheses, so fields are counted after the last `)`).
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14 -> index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Usage between two samples `elapsed_s` apart.
pub fn usage(before: ProcSample, after: ProcSample, elapsed_s: f64) -> ProcUsage {
    let ticks = after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64;
    let cpu_pct = if elapsed_s > 0.0 {
        ticks / ticks_per_s() as f64 / elapsed_s * 100.0
    } else {
        0.0
    };
    ProcUsage {
        cpu_pct,
        rss_bytes: after.rss_bytes,
    }
}

/// The process that listens on TCP `port` (IPv4 or IPv6), found through `/proc/net/tcp*` and the
/// socket links in `/proc/*/fd`. Needs permission to read the other process's fds.
pub fn find_listener_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let targets: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if process_has_socket(&entry.path(), &targets) {
            return Some(pid);
        }
    }
    None
}

fn process_has_socket(proc_dir: &Path, targets: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(proc_dir.join("fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .ok()
            .and_then(|l| l.to_str().map(|s| targets.iter().any(|t| t == s)))
            .unwrap_or(false)
    })
}

/// Socket inodes in LISTEN state (`0A`) on `port` in the text of `/proc/net/tcp`.
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const TCP_LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = f.get(1)?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *f.get(3)? == TCP_LISTEN).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let stat = "1234 (my (odd) cmd) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 99 1000 50";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(300));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn samples_our_own_process() {
        let pid = std::process::id();
        let a = sample(pid).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let b = sample(pid).unwrap();
        assert!(b.cpu_ticks >= a.cpu_ticks);
        assert!(b.rss_bytes > 0);
        let u = usage(a, b, 1.0);
        assert!(u.cpu_pct >= 0.0);
        assert!(sample(u32::MAX).is_err());
    }

    #[test]
    fn finds_the_process_listening_on_a_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(find_listener_pid(port), Some(std::process::id()));
    }

    #[test]
    fn parses_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
   1: 0100007F:2384 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 9092), vec![4242]);
        assert!(listening_inodes(table, 9093).is_empty());
    }
}
