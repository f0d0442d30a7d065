//! Starts a cluster of real `borges broker` processes on loopback: every node formatted with
//! `borges storage format` (one cluster id, its own node id and data directory), free main and
//! controller ports, ephemeral per-core ports, one core each by default (these machines have
//! few CPUs; see docs/cluster.md). Nodes can be killed with SIGKILL, stopped with SIGTERM and
//! restarted on the same directory and ports; the applied metadata of any live node is read
//! over the controller link, so tests can find a partition's leader or the active controller.
//!
//! ```no_run
//! let mut cluster = borges_testkit::cluster::Cluster::start(3);
//! let controller = cluster.wait_for_controller();
//! cluster.kill9(controller);
//! cluster.restart(controller);
//! ```

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use borges_replication::cluster::ClusterMetadata;
use borges_replication::link::{LinkClient, QuorumStatus};
use borges_replication::metadata::{BrokerState, MetadataImage, PartitionRecord, NO_LEADER};
use borges_replication::types::StateMachine;

use crate::{borges_bin, free_port, READY_TIMEOUT};

/// How long the helpers wait for the cluster to reach a state.
pub const CLUSTER_WAIT: Duration = Duration::from_secs(60);
const LINK_TIMEOUT: Duration = Duration::from_secs(2);

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Voters (node ids 1..=voters), each a combined broker + controller.
    pub voters: usize,
    /// Executor cores per broker (`--cores`).
    pub cores: usize,
    /// Extra arguments for every broker.
    pub args: Vec<String>,
    /// Extra environment for every broker.
    pub env: Vec<(String, String)>,
    /// Lines of the `[cluster]` TOML section every broker gets (`--config`). The default
    /// gives sessions more room than the broker's own default, since tests share a loaded
    /// machine: a spurious fencing would fail tests that do not test fencing.
    pub cluster_toml: String,
    /// TLS of the test's own connections (controller links, `cli`), for a cluster whose
    /// brokers get `--tls-*` through `args`.
    pub tls: Option<crate::tls::TlsFiles>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            voters: 3,
            cores: 1,
            args: Vec::new(),
            env: Vec::new(),
            cluster_toml: "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n".into(),
            tls: None,
        }
    }
}

/// One node of a test cluster. Killed with SIGKILL when dropped.
pub struct ClusterNode {
    /// Node id.
    pub id: u64,
    /// Main listener port.
    pub port: u16,
    /// Controller-link port.
    pub controller_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Contents of the ready file once it became ready.
    pub ready: serde_json::Value,
}

impl ClusterNode {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `127.0.0.1:<port>` of the main listener.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The main listener's address, parsed.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The metrics endpoint (an ephemeral port, from the ready file).
    pub fn metrics_addr(&self) -> String {
        self.ready["metrics"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `127.0.0.1:<port>` of the controller link.
    pub fn controller_addr(&self) -> String {
        format!("127.0.0.1:{}", self.controller_port)
    }

    /// Whether the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The process id (0 when stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    fn ready_path(&self) -> PathBuf {
        self.dir.join("ready.json")
    }

    /// Everything the broker wrote so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn kill9(&mut self) {
        if let Some(child) = self.child.take() {
            crate::kill_and_reap(child, &self.dir);
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A running test cluster.
pub struct Cluster {
    tmp: tempfile::TempDir,
    /// The cluster id every node was formatted with.
    pub cluster_id: String,
    options: ClusterOptions,
    voters: String,
    /// Nodes by position (node id = position + 1).
    pub nodes: Vec<ClusterNode>,
}

/// Runs `borges` with `args` and returns its standard output; panics on failure.
pub fn borges(args: &[&str]) -> String {
    let out = Command::new(borges_bin())
        .args(args)
        .output()
        .expect("run borges");
    assert!(
        out.status.success(),
        "borges {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Cluster {
    /// Formats and starts `voters` combined nodes and waits until each serves.
    pub fn start(voters: usize) -> Cluster {
        Self::start_with(ClusterOptions {
            voters,
            ..ClusterOptions::default()
        })
    }

    /// Formats and starts a cluster with `options`; waits until every node serves.
    pub fn start_with(options: ClusterOptions) -> Cluster {
        let tmp = tempfile::Builder::new()
            .prefix("borges-cluster-")
            .tempdir()
            .expect("tempdir");
        let cluster_id = borges(&["storage", "random-cluster-id"]).trim().to_string();
        let mut nodes: Vec<ClusterNode> = (1..=options.voters as u64)
            .map(|id| new_node(tmp.path(), id))
            .collect();
        let voters = nodes
            .iter()
            .map(|n| format!("{}@{}", n.id, n.controller_addr()))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            tmp,
            cluster_id,
            options,
            voters,
            nodes: Vec::new(),
        };
        for n in &mut nodes {
            cluster.format(n);
            cluster.spawn(n);
        }
        for n in &mut nodes {
            wait_ready(n);
        }
        cluster.nodes = nodes;
        cluster
    }

    fn format(&self, node: &ClusterNode) {
        let dir = node.data_dir();
        let id = node.id.to_string();
        borges(&[
            "storage",
            "format",
            "--data-dir",
            dir.to_str().expect("utf-8 path"),
            // With `=`: a random id may start with '-'.
            &format!("--cluster-id={}", self.cluster_id),
            "--node-id",
            &id,
        ]);
    }

    /// The `--controller-voters` value of this cluster.
    pub fn voters(&self) -> &str {
        &self.voters
    }

    fn spawn(&self, node: &mut ClusterNode) {
        let _ = std::fs::remove_file(node.ready_path());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.log_path())
            .expect("broker log");
        let mut cmd = Command::new(borges_bin());
        cmd.arg("broker")
            .arg("--node-id")
            .arg(node.id.to_string())
            .arg("--data-dir")
            .arg(node.data_dir())
            .arg("--listen")
            .arg(node.addr())
            .arg("--core-port-base")
            .arg("0")
            .arg("--metrics-listen")
            .arg("127.0.0.1:0")
            .arg("--cores")
            .arg(self.options.cores.to_string())
            .arg("--controller-listen")
            .arg(node.controller_addr())
            .arg("--controller-voters")
            .arg(&self.voters)
            .arg("--ready-file")
            .arg(node.ready_path());
        if !self.options.cluster_toml.is_empty() {
            let path = node.dir.join("broker.toml");
            let toml = format!("[cluster]\n{}", self.options.cluster_toml);
            std::fs::write(&path, toml).expect("write broker.toml");
            cmd.arg("--config").arg(path);
        }
        cmd.args(&self.options.args);
        for (k, v) in &self.options.env {
            cmd.env(k, v);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env(
                "RUST_LOG",
                "info,openraft=warn,borges_runtime::watchdog=debug",
            );
        }
        crate::crash::enable_core_dumps(&mut cmd, &node.dir);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("log clone"))
            .stderr(log);
        node.child = Some(cmd.spawn().expect("spawn borges broker"));
    }

    /// Adds a broker-only member (node id `id`, not a voter), formatted and started; waits
    /// until it serves.
    pub fn add_broker_only(&mut self, id: u64) -> &mut ClusterNode {
        let mut node = new_node(self.tmp.path(), id);
        self.format(&node);
        self.spawn(&mut node);
        wait_ready(&mut node);
        self.nodes.push(node);
        self.nodes.last_mut().expect("just pushed")
    }

    /// The node with id `id`.
    pub fn node(&mut self, id: u64) -> &mut ClusterNode {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Main addresses of the running nodes, comma-separated (a `--bootstrap` value).
    pub fn bootstrap(&mut self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter_mut()
            .filter_map(|n| n.is_running().then(|| n.addr()))
            .collect();
        addrs.join(",")
    }

    /// Controller addresses of every node, comma-separated.
    pub fn controller_bootstrap(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| n.controller_addr()).collect();
        addrs.join(",")
    }

    /// SIGKILL node `id` and wait until it is gone.
    pub fn kill9(&mut self, id: u64) {
        self.node(id).kill9();
    }

    /// SIGTERM node `id`, waiting up to `timeout` for its exit.
    pub fn terminate(&mut self, id: u64, timeout: Duration) -> Option<ExitStatus> {
        let node = self.node(id);
        crate::terminate_child(node.child.take()?, timeout, &node.dir)
    }

    /// Starts node `id` again (killing it first if it runs) and waits until it serves.
    pub fn restart(&mut self, id: u64) {
        self.restart_nowait(id);
        wait_ready(self.node(id));
    }

    /// Starts node `id` again without waiting for it to serve.
    pub fn restart_nowait(&mut self, id: u64) {
        let pos = self
            .nodes
            .iter()
            .position(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"));
        let mut node = self.nodes.remove(pos);
        node.kill9();
        self.spawn(&mut node);
        self.nodes.insert(pos, node);
    }

    /// Waits for a restarted node to serve.
    pub fn wait_ready(&mut self, id: u64) {
        wait_ready(self.node(id));
    }

    /// The quorum as the first live node that answers sees it.
    pub fn quorum(&mut self) -> Option<QuorumStatus> {
        self.running_controllers()
            .iter()
            .find_map(|a| self.link(a).ok()?.describe().ok())
    }

    fn running_controllers(&mut self) -> Vec<String> {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.is_running().then(|| n.controller_addr()))
            .collect()
    }

    /// The applied metadata image of node `id` (None if it does not answer).
    pub fn image_of(&mut self, id: u64) -> Option<MetadataImage> {
        let addr = self.node(id).controller_addr();
        let state = self.link(&addr).ok()?.read_state().ok()?;
        let sm = ClusterMetadata::decode(&state.state).ok()?;
        Some((*sm.image).clone())
    }

    /// The active controller that a live node reports (None while there is none).
    pub fn controller(&mut self) -> Option<u64> {
        for addr in self.running_controllers() {
            let Ok(mut c) = self.link(&addr) else {
                continue;
            };
            if let Ok(s) = c.describe() {
                if s.leader_id == Some(s.node_id) {
                    return Some(s.node_id);
                }
            }
        }
        None
    }

    /// Waits for an active controller among the live nodes.
    pub fn wait_for_controller(&mut self) -> u64 {
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            if let Some(id) = self.controller() {
                return id;
            }
            assert!(Instant::now() < deadline, "no active controller");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `ok` holds for the image of every live node; returns the last images.
    pub fn wait_for_every_node(
        &mut self,
        what: &str,
        ok: impl Fn(&MetadataImage) -> bool,
    ) -> Vec<MetadataImage> {
        self.wait_for_images(what, Self::running_ids, ok)
    }

    /// Waits until `ok` holds for the images of `ids` (nodes that answer: not stopped ones);
    /// returns their images.
    pub fn wait_for_nodes(
        &mut self,
        ids: &[u64],
        what: &str,
        ok: impl Fn(&MetadataImage) -> bool,
    ) -> Vec<MetadataImage> {
        self.wait_for_images(what, |_| ids.to_vec(), ok)
    }

    fn running_ids(&mut self) -> Vec<u64> {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.is_running().then_some(n.id))
            .collect()
    }

    /// Waits until `ok` holds for the image of every node `ids` names (asked again each time).
    fn wait_for_images(
        &mut self,
        what: &str,
        ids: impl Fn(&mut Self) -> Vec<u64>,
        ok: impl Fn(&MetadataImage) -> bool,
    ) -> Vec<MetadataImage> {
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            let ids = ids(self);
            let images: Vec<Option<MetadataImage>> =
                ids.iter().map(|&id| self.image_of(id)).collect();
            if images.iter().all(|i| i.as_ref().is_some_and(&ok)) {
                return images.into_iter().flatten().collect();
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The leader of partition 0 of `topic` once every live node's image names the same one,
    /// other than `not`, and (when `full_isr`) with every replica in the ISR.
    pub fn wait_for_agreed_leader(&mut self, topic: &str, not: Option<i32>, full_isr: bool) -> u64 {
        let images = self.wait_for_every_node(&format!("a leader of {topic} everywhere"), |i| {
            first_partition(i, topic).is_some_and(|p| {
                p.leader >= 0
                    && Some(p.leader) != not
                    && (!full_isr || p.isr.len() == p.replicas.len())
            })
        });
        let leaders: Vec<i32> = images
            .iter()
            .map(|i| i.topics[topic].partitions[0].leader)
            .collect();
        assert!(leaders.windows(2).all(|w| w[0] == w[1]), "{leaders:?}");
        leaders[0] as u64
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) to node `id`'s process.
    pub fn signal(&mut self, id: u64, signal: libc::c_int) {
        let pid = self.node(id).pid() as libc::pid_t;
        assert!(pid > 0, "node {id} is not running");
        // SAFETY: a signal to a broker process this cluster started.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "signal {signal} to broker {id}");
    }

    /// The leader of `topic`-`partition` in the active controller's image.
    pub fn leader_of(&mut self, topic: &str, partition: usize) -> Option<i32> {
        let id = self.controller()?;
        let image = self.image_of(id)?;
        let p = image.topics.get(topic)?.partitions.get(partition)?.clone();
        (p.leader != NO_LEADER).then_some(p.leader)
    }

    /// Waits until every live node sees broker `id` in `state`.
    pub fn wait_for_broker_state(&mut self, id: i32, state: BrokerState) {
        self.wait_for_every_node(&format!("broker {id} {state:?}"), |i| {
            i.brokers.get(&id).is_some_and(|b| b.state == state)
        });
    }

    /// A read-only controller-link client of `addr` (TLS when the cluster has it).
    pub fn link(
        &self,
        addr: &str,
    ) -> Result<LinkClient, borges_replication::error::ReplicationError> {
        let tls = self.options.tls.as_ref().map(|t| t.client_config());
        LinkClient::connect_tls(addr, "", LINK_TIMEOUT, tls)
    }

    /// Runs the `borges` CLI against this cluster's live brokers.
    pub fn cli(&mut self, args: &[&str]) -> String {
        let bootstrap = self.bootstrap();
        let tls = self
            .options
            .tls
            .as_ref()
            .map(|t| t.cli_args())
            .unwrap_or_default();
        let mut all = vec!["--bootstrap", bootstrap.as_str()];
        all.extend(tls.iter().map(String::as_str));
        all.extend_from_slice(args);
        borges(&all)
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- node {} ---\n{}", n.id, n.log()))
            .collect()
    }

    /// The temporary directory holding every node's files.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}

/// The first partition of `topic` in `image`.
pub fn first_partition<'a>(image: &'a MetadataImage, topic: &str) -> Option<&'a PartitionRecord> {
    image.topics.get(topic).and_then(|t| t.partitions.first())
}

/// Waits (up to [`CLUSTER_WAIT`]) until `ok` holds, polling every 50 ms.
pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn new_node(root: &Path, id: u64) -> ClusterNode {
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).expect("node dir");
    ClusterNode {
        id,
        port: free_port(),
        controller_port: free_port(),
        dir,
        child: None,
        ready: serde_json::Value::Null,
    }
}

fn wait_ready(node: &mut ClusterNode) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(node.ready_path()) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                node.ready = v;
                return;
            }
        }
        if let Some(status) = node
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!(
                "node {} exited with {status} before becoming ready; log:\n{}",
                node.id,
                node.log()
            );
        }
        if Instant::now() > deadline {
            let pid = node.child.as_ref().map_or(0, |c| c.id());
            panic!(
                "node {} not ready after {READY_TIMEOUT:?}; threads:\n{}log:\n{}",
                node.id,
                crate::diagnose::process_report(pid),
                node.log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
