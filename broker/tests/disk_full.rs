//! A full disk against a real broker whose data directory is a small mounted file system (a
//! tmpfs, a loop-mounted ext4): the directory turns read-only, not failed. Produce is refused
//! with the retriable `DiskFull` (never `NotLeaderOrFollower` or `StorageError`) and nothing
//! refused is acknowledged; every acknowledged record still reads back; writes resume by
//! themselves once space is freed, without a restart; the `borges_log_dir_state` metric says
//! which state the directory is in. Below `storage.disk_free_bytes_min` writes are refused
//! before the disk is actually full.
//!
//! Mounting needs root: elsewhere these tests print `SKIPPED:` and pass, unless
//! `BORGES_REQUIRE_MOUNT=1` (set by .ci/run), which makes that a failure.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use borges_protocol::batch::Compression;
use borges_protocol::ErrorCode;
use borges_testkit::mount::{self, SmallFs};
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient};

/// How long the broker may take to notice freed space before the test calls it "never".
const RESUME_DEADLINE: Duration = Duration::from_secs(60);

/// Produces beyond which a full disk must have refused a write.
const PRODUCES_MAX: usize = 2_000;

fn start(data_dir: &Path, disk_free_bytes_min: u64) -> BrokerProcess {
    BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        data_dir: Some(data_dir.to_path_buf()),
        config_toml: Some(format!(
            "[log]\nsegment_size_bytes = 1048576\n\
             [storage]\ndisk_free_bytes_min = {disk_free_bytes_min}\n\
             disk_probe_interval_ms = 20\n\
             [groups]\noffsets_topic_partitions = 1\n"
        )),
        ..Default::default()
    })
}

/// The state `borges_log_dir_state` gives core 0's directory.
fn log_dir_state(broker: &BrokerProcess) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(broker.metrics_addr()).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let states: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("borges_log_dir_state{core=\"0\"") && l.ends_with(" 1"))
        .collect();
    assert_eq!(states.len(), 1, "one state per directory: {states:?}");
    let state = states[0].split("state=\"").nth(1).unwrap();
    state[..state.find('"').unwrap()].to_string()
}

/// A value of about 32 KiB that names `i`.
fn big_value(i: usize) -> String {
    format!("{i:08}-{}", "v".repeat(32 << 10))
}

/// What became of the writes made while the disk filled up.
#[derive(Default)]
struct Writes {
    /// Acknowledged, in order.
    acked: Vec<String>,
    /// Appended before the directory turned read-only but not written in time
    /// (`RequestTimedOut`): unknown, as Kafka's timed-out produce is; written once space is back.
    unknown: Vec<String>,
}

impl Writes {
    /// Every value read back, without the unknown ones, is exactly what was acknowledged.
    fn check(&self, read: Vec<String>) {
        let known: Vec<String> = read
            .into_iter()
            .filter(|v| !self.unknown.contains(v))
            .collect();
        assert_eq!(known, self.acked);
    }
}

/// Produces 32 KiB records until one is refused with another code than `RequestTimedOut`;
/// returns that code and its message.
fn produce_until_refused(c: &mut RawClient, writes: &mut Writes) -> (ErrorCode, String) {
    for _ in 0..PRODUCES_MAX {
        let v = big_value(writes.acked.len() + writes.unknown.len());
        let batch = make_batch(&[v.as_str()], Compression::None);
        let (code, _, message) = c.produce_raw_within("t", 0, &batch, -1, 1_000).unwrap();
        match code {
            ErrorCode::None => writes.acked.push(v),
            ErrorCode::RequestTimedOut => writes.unknown.push(v),
            code => return (code, message.unwrap_or_default()),
        }
    }
    panic!("{PRODUCES_MAX} produces of 32 KiB were all acknowledged on a full disk");
}

fn all_values(c: &mut RawClient) -> Vec<String> {
    c.fetch_all("t", 0, 0).iter().map(value).collect()
}

/// Waits until a produce succeeds again; panics after [`RESUME_DEADLINE`].
fn produce_once_writable(c: &mut RawClient, writes: &mut Writes) {
    let deadline = Instant::now() + RESUME_DEADLINE;
    loop {
        let v = format!("after-{}", writes.acked.len());
        let (code, _) = c.produce("t", 0, &[v.as_str()], -1);
        match code {
            ErrorCode::None => return writes.acked.push(v),
            ErrorCode::DiskFull if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => panic!("writes did not resume after space was freed: {other:?}"),
        }
    }
}

/// Fills the disk under a running broker, checks the read-only state, frees the space and
/// checks that writes come back.
fn full_disk_is_read_only_and_recovers(kind: SmallFs, size_mib: u64) {
    let mount = match mount::mount_small(kind, size_mib) {
        Ok(m) => m,
        Err(reason) => return mount::skip(&format!("cannot mount a {kind:?}: {reason}")),
    };
    let broker = start(&mount.path().join("data"), 0);
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("t", 1, &[]), ErrorCode::None);
    let mut writes = Writes {
        acked: (0..20).map(big_value).collect(),
        ..Default::default()
    };
    for v in &writes.acked {
        assert_eq!(c.produce("t", 0, &[v.as_str()], -1).0, ErrorCode::None);
    }
    assert_eq!(log_dir_state(&broker), "writable");
    let filler = mount.path().join("filler");
    mount::fill(&filler, u64::MAX);
    // Pre-allocated segment space may take some more; then the disk is full.
    let (code, message) = produce_until_refused(&mut c, &mut writes);
    assert_eq!(code, ErrorCode::DiskFull, "{message}");
    assert!(code.is_retriable());
    assert_eq!(log_dir_state(&broker), "read_only");
    // Read-only, not failed: every acknowledged record reads back, and writes stay refused
    // with the same code.
    assert_eq!(all_values(&mut c), writes.acked);
    assert_eq!(c.produce("t", 0, &["refused"], -1).0, ErrorCode::DiskFull);
    assert_eq!(all_values(&mut c), writes.acked);
    std::fs::remove_file(&filler).unwrap();
    produce_once_writable(&mut c, &mut writes);
    assert_eq!(log_dir_state(&broker), "writable");
    let read = all_values(&mut c);
    assert!(
        !read.contains(&"refused".to_string()),
        "a refused write was stored"
    );
    writes.check(read);
    drop(broker);
    drop(mount);
}

#[test]
fn a_full_tmpfs_makes_the_directory_read_only_and_writes_resume_once_space_is_freed() {
    full_disk_is_read_only_and_recovers(SmallFs::Tmpfs, 48);
}

#[test]
fn a_full_ext4_makes_the_directory_read_only_and_writes_resume_once_space_is_freed() {
    full_disk_is_read_only_and_recovers(SmallFs::Ext4, 64);
}

/// Free bytes of the file system holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs writes into the struct we own; the path is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail as u64 * s.f_frsize as u64
}

#[test]
fn below_disk_free_bytes_min_writes_are_refused_before_the_disk_is_full() {
    let mount = match mount::mount_small(SmallFs::Ext4, 64) {
        Ok(m) => m,
        Err(reason) => return mount::skip(&format!("cannot mount an ext4: {reason}")),
    };
    let min = 16u64 << 20;
    let broker = start(&mount.path().join("data"), min);
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("t", 1, &[]), ErrorCode::None);
    assert_eq!(c.produce("t", 0, &["before"], -1).0, ErrorCode::None);
    // Leave 8 MiB free: below the minimum, far from full.
    let filler = mount.path().join("filler");
    let free = free_bytes(mount.path());
    assert!(free > min + (8 << 20), "{free} bytes free at the start");
    mount::fill(&filler, free - (8 << 20));
    let mut writes = Writes {
        acked: vec!["before".to_string()],
        ..Default::default()
    };
    let (code, message) = produce_until_refused(&mut c, &mut writes);
    assert_eq!(code, ErrorCode::DiskFull, "{message}");
    assert!(message.contains("read-only"), "{message}");
    assert!(
        free_bytes(mount.path()) > 1 << 20,
        "refused only once the disk was full"
    );
    assert_eq!(log_dir_state(&broker), "read_only");
    assert_eq!(all_values(&mut c)[0], "before");
    std::fs::remove_file(&filler).unwrap();
    produce_once_writable(&mut c, &mut writes);
    assert_eq!(log_dir_state(&broker), "writable");
    writes.check(all_values(&mut c));
}
