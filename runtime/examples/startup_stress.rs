//! Start-up stress: starts 2-core executor sets over and over, each core connecting the mesh and
//! priming the device on a fresh directory, and reports a start that does not finish in time
//! with every thread's kernel stack and the io_uring fdinfo of the process.
//!
//!     cargo run -p borges-runtime --example startup_stress -- ITERATIONS TIMEOUT_S PRIMES

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use borges_runtime::{channel, executor, fs};

/// Per core: 1 = body started, 2 = mesh connected, 3 = device primed.
static STEP: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];

fn dump() {
    eprintln!(
        "steps: core 0 {}, core 1 {}",
        STEP[0].load(Ordering::SeqCst),
        STEP[1].load(Ordering::SeqCst)
    );
    let mut tasks: Vec<_> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .collect();
    tasks.sort_by_key(|e| e.file_name());
    for t in tasks {
        let p = t.path();
        let read = |n: &str| std::fs::read_to_string(p.join(n)).unwrap_or_default();
        eprintln!(
            "--- {:?} {} wchan={}\n{}",
            t.file_name(),
            read("comm").trim(),
            read("wchan"),
            read("stack")
        );
    }
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.to_string_lossy().contains("io_uring") {
            let info = std::fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap_or_default();
            eprintln!("=== fd {:?}\n{info}", fd.file_name());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iterations: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let timeout = Duration::from_secs(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10));
    let primes: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1);
    let root = tempfile::tempdir().unwrap();
    let config = executor::ExecutorConfig {
        cores: 2,
        ..executor::ExecutorConfig::default()
    };
    let mut slowest = Duration::ZERO;
    for i in 0..iterations {
        let dir = root.path().join(format!("d{i}"));
        let mut ends: Vec<_> = channel::mesh::<u64>(2, 16).into_iter().map(Some).collect();
        let started = Instant::now();
        for s in &STEP {
            s.store(0, Ordering::SeqCst);
        }
        let ex = executor::start(
            &config,
            |core, _| ends[core].take(),
            move |core, end| {
                let dir = dir.clone();
                STEP[core].store(1, Ordering::SeqCst);
                async move {
                    let (_tx, _rx) = end.unwrap().connect().await;
                    STEP[core].store(2, Ordering::SeqCst);
                    for _ in 0..primes {
                        fs::prime_device(&dir).await.unwrap();
                    }
                    STEP[core].store(3, Ordering::SeqCst);
                }
            },
        )
        .unwrap();
        while !ex.all_finished() {
            if started.elapsed() > timeout {
                eprintln!(
                    "iteration {i}: not done after {timeout:?} (watchdog signals {})",
                    borges_runtime::watchdog::kicks()
                );
                dump();
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        ex.join();
        slowest = slowest.max(started.elapsed());
        if i % 50 == 0 {
            eprintln!("iteration {i}, slowest {slowest:?}");
        }
    }
    eprintln!(
        "{iterations} starts, none stuck, slowest {slowest:?}, watchdog signals {}",
        borges_runtime::watchdog::kicks()
    );
}
