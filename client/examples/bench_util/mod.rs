//! Helpers shared by the benchmark examples (`producer_bench`, `consumer_bench`, `sink`); each
//! uses a subset.
#![allow(dead_code)]

/// The value after `name` on the command line, or `default`.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// (time on CPU, time waiting for a CPU) of this thread in ns, from /proc/thread-self/schedstat:
/// the benchmark runs on this one thread, and the wait shows how much other load took the core.
pub fn schedstat() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut fields = text
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// With `--malloc-keep true`: serve allocations up to `mmap_threshold_bytes` from the heap and
/// keep freed memory instead of returning it to the kernel (which then zeroes fresh pages for
/// the next large buffers). Call before starting other threads.
pub fn malloc_keep_if_asked(mmap_threshold_bytes: i32) {
    if arg("--malloc-keep", "false") == "true" {
        // SAFETY: mallopt only changes glibc malloc tunables; called before other threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold_bytes);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        }
    }
}
