// Test ports. Shared: the replication crate's tests `include!` this file, since that crate cannot
// depend on the testkit, which depends on it (so: no inner attributes or doc comments here).

use std::net::TcpListener;

/// Lowest port [`free_port`] hands out.
const TEST_PORT_LOW: u16 = 10_000;

/// A free TCP port on 127.0.0.1 that no other test in any process on this machine is given.
///
/// Ports come from below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768 and
/// up by default), so neither a connection's source port nor a broker's `--core-port-base 0`
/// listener can take one between its choice here and the broker's bind (a port from
/// `bind(0)` could, and did: "Address already in use" on CI). A lock file per port under the
/// temporary directory, held with `flock` until this process exits, keeps two test processes
/// from choosing the same port; a node restarted on its port keeps it.
pub fn free_port() -> u16 {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let high = ephemeral_low().max(TEST_PORT_LOW + 1000);
    let span = u32::from(high - TEST_PORT_LOW);
    let dir = std::env::temp_dir().join("borges-test-ports");
    std::fs::create_dir_all(&dir).expect("port lock directory");
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = TEST_PORT_LOW + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        let Ok(file) = std::fs::File::create(dir.join(port.to_string())) else {
            continue;
        };
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(file);
            return port;
        }
    }
    panic!("no free test port in {TEST_PORT_LOW}..{high}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}
