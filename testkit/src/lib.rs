//! Starts real `borges broker` processes for integration tests.
//!
//! The broker binary is found through `BORGES_BIN`, or next to the test executable in the Cargo
//! target directory (`target/<profile>/borges`). The workspace test command builds it first
//! (`cargo build --workspace --bins`, see `scripts/test.sh`); a binary older than the sources
//! it was built from is refused ([`fresh`]), so that no test passes against an old build.
//!
//! Every broker gets a fresh temporary data directory, a free main port, ephemeral per-core
//! ports, and a ready file that the broker writes once every core serves.

pub mod cluster;
mod crash;
pub mod diagnose;
pub mod fresh;
pub mod mount;
mod ports;
pub mod tls;
pub mod users;

pub use ports::free_port;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long to wait for a broker to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Path of the `borges` binary under test.
pub fn borges_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BORGES_BIN") {
        return PathBuf::from(p);
    }
    let bin = borges_bin_path();
    assert!(
        bin.exists(),
        "broker binary not found at {}: run `cargo build --workspace --bins` first (scripts/test.sh does), or set BORGES_BIN",
        bin.display()
    );
    // Judged once per test process: a binary rebuilt while tests run is not judged again.
    static STALE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(reason) = STALE.get_or_init(|| fresh::stale_reason(&bin)) {
        panic!("stale broker binary: {reason}");
    }
    bin
}

/// Where the `borges` binary under test is (`BORGES_BIN`, or beside the test executable),
/// without [`borges_bin`]'s checks.
fn borges_bin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("BORGES_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test> -> target/<profile>/borges
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("borges")
}

/// Skips the calling test: prints `SKIPPED: <test>: <reason>` on the process's real stdout (not
/// the test harness's captured output, so that `cargo test` shows it for a passing test), or
/// panics when `require_var=1`, which CI (.ci/run) sets where every prerequisite exists.
pub fn skip(require_var: &str, reason: &str) {
    if std::env::var(require_var).is_ok_and(|v| v == "1") {
        panic!("{reason} ({require_var}=1: the prerequisite must exist)");
    }
    skipped_line(&format!(
        "{reason} (set {require_var}=1 to make this a failure)"
    ));
}

/// Writes `SKIPPED: <test name>: <text>` past the harness's output capture.
pub fn skipped_line(text: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "SKIPPED: {test}: {text}");
    let _ = out.flush();
}

/// SIGTERM `child`, then wait up to `timeout` for it to exit; kills it and returns `None` if it
/// does not (shared by single brokers and cluster nodes).
/// A crash (any other signal than the ones tests send) is reported on stderr with the
/// backtraces of the core it left in `dir` ([`crash`]).
pub(crate) fn terminate_child(
    mut child: Child,
    timeout: Duration,
    dir: &Path,
) -> Option<ExitStatus> {
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            report_crash(&status, dir);
            return Some(status);
        }
        if Instant::now() > deadline {
            kill_and_reap(child, dir);
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL `child` (a no-op if it has exited) and reap it, reporting a crash that ended it
/// before (shared by single brokers and cluster nodes).
pub(crate) fn kill_and_reap(mut child: Child, dir: &Path) {
    let _ = child.kill();
    if let Ok(status) = child.wait() {
        report_crash(&status, dir);
    }
}

/// Prints the crash report of a broker that ended with `status` in `dir`, if it crashed.
fn report_crash(status: &ExitStatus, dir: &Path) {
    if let Some(report) = crash::report(status, dir, &borges_bin_path()) {
        eprintln!("{report}");
    }
}

/// Options for a test broker.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// Executor cores (`--cores`).
    pub cores: usize,
    /// Extra command-line arguments after `broker`.
    pub args: Vec<String>,
    /// Contents of a TOML config file passed with `--config`, if any.
    pub config_toml: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// `RLIMIT_NOFILE` (soft, hard) set for the broker process before it starts.
    pub open_files_limit: Option<(u64, u64)>,
    /// The data directory (for example on a small mounted file system); the log, ready and
    /// config files stay in the temporary directory. Unset: a `data` directory in it.
    pub data_dir: Option<PathBuf>,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            cores: 2.min(std::thread::available_parallelism().map_or(1, |n| n.get())),
            args: Vec::new(),
            config_toml: None,
            env: Vec::new(),
            open_files_limit: None,
            data_dir: None,
        }
    }
}

/// A running broker process. Killed with SIGKILL when dropped.
pub struct BrokerProcess {
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
    /// Where the log, ready and config files are.
    home: PathBuf,
    data_dir: PathBuf,
    port: u16,
    metrics_port: u16,
    options: BrokerOptions,
    /// Contents of the ready file: bound addresses.
    pub ready: serde_json::Value,
}

impl BrokerProcess {
    /// Starts a broker with default options (2 cores where available).
    pub fn start() -> BrokerProcess {
        Self::start_with(BrokerOptions::default())
    }

    /// Starts a broker with `options` in a new temporary data directory.
    pub fn start_with(options: BrokerOptions) -> BrokerProcess {
        let tmp = tempfile::Builder::new()
            .prefix("borges-test-")
            .tempdir()
            .expect("tempdir");
        let home = tmp.path().to_path_buf();
        let data_dir = options
            .data_dir
            .clone()
            .unwrap_or_else(|| home.join("data"));
        let mut broker = BrokerProcess {
            child: None,
            home,
            _tmp: Some(tmp),
            data_dir,
            port: free_port(),
            metrics_port: free_port(),
            options,
            ready: serde_json::Value::Null,
        };
        broker.spawn();
        broker
    }

    /// `127.0.0.1:<port>` of the main listener.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Main listener address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `127.0.0.1:<port>` of the metrics endpoint.
    pub fn metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    /// Runs the `borges` command-line tool against this broker (`BORGES_BOOTSTRAP` set) with
    /// `stdin` as its input; returns its exit status and output.
    pub fn run_cli(&self, args: &[&str], stdin: &str) -> std::process::Output {
        let mut child = Command::new(borges_bin())
            .args(args)
            .env("BORGES_BOOTSTRAP", self.bootstrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run borges");
        let mut input = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut input, stdin.as_bytes()).expect("write stdin");
        drop(input);
        child.wait_with_output().expect("borges output")
    }

    /// The broker's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    fn log_path(&self) -> PathBuf {
        self.home.join("broker.log")
    }

    fn ready_path(&self) -> PathBuf {
        self.home.join("ready.json")
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.ready_path());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("broker log");
        let mut cmd = Command::new(borges_bin());
        cmd.arg("broker")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(self.bootstrap())
            .arg("--core-port-base")
            .arg("0")
            .arg("--metrics-listen")
            .arg(self.metrics_addr())
            .arg("--cores")
            .arg(self.options.cores.to_string())
            .arg("--ready-file")
            .arg(self.ready_path());
        if let Some(toml) = &self.options.config_toml {
            let path = self.home.join("broker.toml");
            std::fs::write(&path, toml).expect("write config");
            cmd.arg("--config").arg(path);
        }
        cmd.args(&self.options.args);
        for (k, v) in &self.options.env {
            cmd.env(k, v);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            // Start-up stages are logged at debug level: a broker that never becomes ready
            // shows where it stopped.
            cmd.env(
                "RUST_LOG",
                "info,borges_broker::server=debug,borges_runtime::watchdog=debug",
            );
        }
        if let Some((soft, hard)) = self.options.open_files_limit {
            set_open_files_limit(&mut cmd, soft, hard);
        }
        crash::enable_core_dumps(&mut cmd, &self.home);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("log clone"))
            .stderr(log);
        self.child = Some(cmd.spawn().expect("spawn borges broker"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(self.ready_path()) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    self.ready = v;
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "broker exited with {status} before becoming ready; log:\n{}",
                    self.log()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "broker not ready after {READY_TIMEOUT:?}; threads:\n{}log:\n{}",
                    diagnose::process_report(self.pid()),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the broker wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// SIGKILL, then wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(child) = self.child.take() {
            kill_and_reap(child, &self.home);
        }
    }

    /// SIGTERM, then wait up to `timeout` for a clean exit. Returns the exit status, or `None`
    /// if it had to be killed.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        terminate_child(self.child.take()?, timeout, &self.home)
    }

    /// Starts the broker again on the same data directory and ports (after `kill9` or
    /// `terminate`).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Restarts with different options (for example another core count).
    pub fn restart_with(&mut self, options: BrokerOptions) {
        self.kill9();
        self.options = options;
        self.spawn();
    }
}

/// Makes `cmd` start with `RLIMIT_NOFILE` = (soft, hard).
fn set_open_files_limit(cmd: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit,
    // which is async-signal-safe, on a struct it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- broker log ({}) ---\n{}",
                self.log_path().display(),
                self.log()
            );
        }
    }
}
