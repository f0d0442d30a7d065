//! Process and disk figures read at scrape time from `/proc` and `statvfs` (the standard
//! `process_*` families, and free space per log directory). Blocking reads: the caller runs
//! [`read_host`] off the executor (`task::spawn_blocking`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

/// When the broker started (set once by [`mark_start`]), for `borges_uptime_seconds`.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// Notes the start time; later calls change nothing.
pub fn mark_start() {
    let _ = STARTED.get_or_init(Instant::now);
}

/// Seconds since [`mark_start`] (0 before it).
pub fn uptime_s() -> f64 {
    STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64())
}

/// The process's figures; `None` where `/proc` could not be read.
#[derive(Debug, Clone, Default)]
pub struct ProcessStats {
    /// User + system CPU time.
    pub cpu_s: Option<f64>,
    /// Resident set size.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size.
    pub virtual_bytes: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_s: Option<f64>,
    /// Threads.
    pub threads: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// RLIMIT_NOFILE (soft).
    pub max_fds: Option<u64>,
}

/// Free and total bytes of the filesystem holding a log directory.
#[derive(Debug, Clone)]
pub struct DiskSpace {
    /// The directory.
    pub dir: PathBuf,
    /// Bytes available to the broker (`f_bavail`).
    pub free_bytes: u64,
    /// Size of the filesystem.
    pub total_bytes: u64,
}

/// Everything read from the host at one scrape.
#[derive(Debug, Clone, Default)]
pub struct HostStats {
    /// The process.
    pub process: ProcessStats,
    /// Each log directory that could be measured.
    pub disks: Vec<DiskSpace>,
}

/// Reads the process figures and the space of `dirs`.
pub fn read_host(dirs: &[PathBuf]) -> HostStats {
    HostStats {
        process: read_process(),
        disks: dirs.iter().filter_map(|d| disk_space(d)).collect(),
    }
}

fn read_process() -> ProcessStats {
    // SAFETY: sysconf and getrlimit only read process-wide values into our locals.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let max_fds = (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0)
        .then_some(limit.rlim_cur);
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let boot_time_s = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    ProcessStats {
        cpu_s: field(14)
            .zip(field(15))
            .map(|(u, s)| (u + s) as f64 / ticks_per_s),
        threads: field(20),
        start_time_s: field(22)
            .zip(boot_time_s)
            .map(|(t, boot)| boot as f64 + t as f64 / ticks_per_s),
        virtual_bytes: field(23),
        resident_bytes: field(24).map(|pages| pages * page_bytes),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
        max_fds,
    }
}

fn disk_space(dir: &Path) -> Option<DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into a zeroed struct we own; `path` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let block = st.f_frsize as u64;
    Some(DiskSpace {
        dir: dir.to_path_buf(),
        free_bytes: st.f_bavail as u64 * block,
        total_bytes: st.f_blocks as u64 * block,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_and_its_directory_are_measured() {
        let host = read_host(&[std::env::temp_dir()]);
        let p = &host.process;
        assert!(p.resident_bytes.unwrap() > 0, "{p:?}");
        assert!(p.threads.unwrap() >= 1, "{p:?}");
        assert!(p.open_fds.unwrap() >= 3, "{p:?}");
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = p.start_time_s.unwrap();
        assert!(
            started <= now_s + 1.0 && started > now_s - 24.0 * 3600.0,
            "{p:?}"
        );
        let disk = &host.disks[0];
        assert!(
            disk.total_bytes >= disk.free_bytes && disk.total_bytes > 0,
            "{disk:?}"
        );
    }
}
