//! Shared by the replication crate's integration tests: a small key-value state machine.
#![allow(dead_code)]

use std::collections::BTreeMap;

use borges_replication::types::StateMachine;
use serde::{Deserialize, Serialize};

/// A replicated map.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kv {
    /// Keys and values.
    pub map: BTreeMap<String, String>,
    /// Commands applied.
    pub applied: u64,
}

/// Set a key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Set {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

impl StateMachine for Kv {
    type Command = Set;
    type Reply = Option<String>;

    fn apply(&mut self, _index: u64, _term: u64, command: &Set) -> Option<String> {
        self.applied += 1;
        self.map.insert(command.key.clone(), command.value.clone())
    }

    fn encode(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(self).map_err(|e| e.to_string())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// Clusters of Raft nodes in this test process: one side executor (thread) per node, real
/// TCP on loopback, real files in a temporary directory, each node with its own power-loss
/// model.
pub mod cluster {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use borges_replication::disk::Disk;
    use borges_replication::link::{LinkClient, LinkError, LinkLimits, QuorumStatus};
    use borges_replication::network::RaftTuning;
    use borges_replication::node::{NodeConfig, RaftNode};

    use super::{Kv, Set};

    /// How long a test waits for the cluster to get somewhere before it fails.
    pub const WAIT_MAX: Duration = Duration::from_secs(30);

    enum Command {
        Crash,
        Shutdown,
        AddLearner(u64, String, std::sync::mpsc::Sender<Result<(), LinkError>>),
    }

    struct Running {
        commands: tokio::sync::mpsc::UnboundedSender<Command>,
        thread: std::thread::JoinHandle<Result<(), borges_runtime::executor::RuntimeError>>,
    }

    /// One node's fixed identity and files.
    pub struct Member {
        pub id: u64,
        pub addr: String,
        pub dir: PathBuf,
        pub disk: Disk,
        pub cluster_id: String,
        running: Option<Running>,
    }

    /// A test cluster.
    pub struct Cluster {
        _root: tempfile::TempDir,
        pub cluster_id: String,
        pub voters: BTreeMap<u64, String>,
        pub members: BTreeMap<u64, Member>,
        pub tuning: RaftTuning,
    }

    mod ports {
        include!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testkit/src/ports.rs"
        ));
    }
    use ports::free_port;

    impl Cluster {
        /// `voters` voter ids 1..=voters plus `learners` more ids, none started yet.
        pub fn new(voters: u64, learners: u64, tuning: RaftTuning) -> Cluster {
            let root = tempfile::tempdir().expect("tempdir");
            let cluster_id = "test-cluster-7Qb".to_string();
            let mut members = BTreeMap::new();
            for id in 1..=voters + learners {
                let addr = format!("127.0.0.1:{}", free_port());
                let dir = root.path().join(format!("n{id}"));
                members.insert(
                    id,
                    Member {
                        id,
                        addr,
                        dir,
                        disk: Disk::with_power_loss_model(),
                        cluster_id: cluster_id.clone(),
                        running: None,
                    },
                );
            }
            let voters = (1..=voters)
                .map(|id| (id, members[&id].addr.clone()))
                .collect();
            Cluster {
                _root: root,
                cluster_id,
                voters,
                members,
                tuning,
            }
        }

        /// Starts node `id` (a voter if it is among the voters, else a learner).
        ///
        /// The port of a node stopped in this process may stay taken for a moment after its
        /// thread ended (the kernel tears down the executor's io_uring, which still holds the
        /// listening socket, asynchronously); a start that finds it taken tries again.
        pub fn start(&mut self, id: u64) -> Result<(), String> {
            let started = Instant::now();
            loop {
                match self.start_once(id) {
                    Err(e)
                        if e.contains("Address already in use") && started.elapsed() < WAIT_MAX =>
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    other => return other,
                }
            }
        }

        fn start_once(&mut self, id: u64) -> Result<(), String> {
            let voters = self.voters.clone();
            let tuning = self.tuning.clone();
            let m = self.members.get_mut(&id).expect("member");
            assert!(m.running.is_none(), "node {id} already runs");
            let config = NodeConfig {
                cluster_id: m.cluster_id.clone(),
                node_id: id,
                data_dir: m.dir.clone(),
                listen: m.addr.parse().expect("addr"),
                advertised: None,
                voters,
                tuning,
                link: LinkLimits::default(),
                disk: m.disk.clone(),
            };
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let exec = borges_runtime::side::SideExecutorConfig {
                name: format!("raft-{id}"),
                ..Default::default()
            };
            let thread = borges_runtime::side::start_side_executor(&exec, move || async move {
                let node = match RaftNode::<Kv>::start(config, None).await {
                    Ok(n) => {
                        let _ = ready_tx.send(Ok(()));
                        n
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                while let Some(cmd) = rx.recv().await {
                    match cmd {
                        Command::Crash => return node.halt().await,
                        Command::Shutdown => return node.shutdown().await,
                        Command::AddLearner(lid, addr, reply) => {
                            let _ = reply.send(node.add_learner(lid, addr).await);
                        }
                    }
                }
            })
            .expect("executor");
            let ready = ready_rx.recv().unwrap_or(Err("node thread died".into()));
            match ready {
                Ok(()) => {
                    m.running = Some(Running {
                        commands: tx,
                        thread,
                    });
                    Ok(())
                }
                Err(e) => {
                    let _ = thread.join();
                    Err(e)
                }
            }
        }

        fn stop(&mut self, id: u64, command: Command) {
            let m = self.members.get_mut(&id).expect("member");
            let running = m.running.take().expect("node runs");
            let _ = running.commands.send(command);
            running
                .thread
                .join()
                .expect("node thread")
                .expect("executor");
        }

        /// Stops node `id` abruptly: its executor goes away with every task (no Raft
        /// shutdown); files keep what the process wrote (the page cache survives).
        pub fn crash(&mut self, id: u64) {
            self.stop(id, Command::Crash);
        }

        /// Crashes node `id` and cuts the power: only what it synced survives.
        pub fn power_cut(&mut self, id: u64) {
            self.crash(id);
            self.members[&id]
                .disk
                .power_loss()
                .expect("power loss model");
        }

        /// Stops node `id` cleanly.
        pub fn shutdown(&mut self, id: u64) {
            self.stop(id, Command::Shutdown);
        }

        /// Whether node `id` runs.
        pub fn running(&self, id: u64) -> bool {
            self.members[&id].running.is_some()
        }

        /// Asks node `leader` to add `learner` as a learner.
        pub fn add_learner(&self, leader: u64, learner: u64) -> Result<(), LinkError> {
            let addr = self.members[&learner].addr.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let running = self.members[&leader].running.as_ref().expect("leader runs");
            let _ = running
                .commands
                .send(Command::AddLearner(learner, addr, tx));
            rx.recv().expect("reply")
        }

        /// A link client to node `id`.
        pub fn client(&self, id: u64) -> Result<LinkClient, String> {
            let m = &self.members[&id];
            LinkClient::connect(&m.addr, &m.cluster_id, Duration::from_secs(5))
                .map_err(|e| e.to_string())
        }

        /// Node `id`'s view of the quorum.
        pub fn status(&self, id: u64) -> Result<QuorumStatus, String> {
            self.client(id)?.describe().map_err(|e| e.to_string())
        }

        /// Node `id`'s applied state.
        pub fn state(&self, id: u64) -> Result<Kv, String> {
            let applied = self.client(id)?.read_state().map_err(|e| e.to_string())?;
            serde_json::from_slice(&applied.state).map_err(|e| e.to_string())
        }

        /// Waits until every running node agrees on one leader among them; its id and term.
        pub fn wait_leader(&self) -> (u64, u64) {
            let all: Vec<u64> = self.members.keys().copied().collect();
            self.wait_leader_among(&all)
        }

        /// Waits until the running nodes among `ids` agree on one leader among them.
        pub fn wait_leader_among(&self, ids: &[u64]) -> (u64, u64) {
            let started = Instant::now();
            loop {
                let live: Vec<u64> = ids.iter().copied().filter(|&i| self.running(i)).collect();
                let views: Vec<QuorumStatus> =
                    live.iter().filter_map(|&i| self.status(i).ok()).collect();
                if let Some(leader) = views.iter().find(|s| s.state == "Leader") {
                    let agreed = views.len() == live.len()
                        && views
                            .iter()
                            .all(|s| s.leader_id == Some(leader.node_id) && s.term == leader.term);
                    if agreed {
                        return (leader.node_id, leader.term);
                    }
                }
                assert!(started.elapsed() < WAIT_MAX, "no agreed leader: {views:#?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }

        /// Writes `key = value` through whichever node leads, following NotLeader answers and
        /// retrying through elections; returns once the leader applied it.
        pub fn write(&self, key: &str, value: &str) -> Result<(), String> {
            let started = Instant::now();
            let command = Set {
                key: key.to_string(),
                value: value.to_string(),
            };
            let mut target = self
                .members
                .keys()
                .copied()
                .find(|&i| self.running(i))
                .ok_or("no node")?;
            loop {
                let outcome = self.client(target).and_then(|mut c| {
                    c.write::<Set, Option<String>>(&command)
                        .map_err(|e| e.to_string())
                });
                match outcome {
                    Ok(Ok(_)) => return Ok(()),
                    Ok(Err(LinkError::NotLeader {
                        leader_id: Some(l), ..
                    })) if self.running(l) => target = l,
                    other => {
                        if started.elapsed() > WAIT_MAX {
                            return Err(format!("write {key} failed: {other:?}"));
                        }
                        let live: Vec<u64> = self
                            .members
                            .keys()
                            .copied()
                            .filter(|&i| self.running(i))
                            .collect();
                        target = live[(live.iter().position(|&i| i == target).unwrap_or(0) + 1)
                            % live.len()];
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }

        /// Waits until node `id` has applied a state where `done` holds; returns that state.
        pub fn wait_state(&self, id: u64, done: impl Fn(&Kv) -> bool) -> Kv {
            let started = Instant::now();
            loop {
                if let Ok(state) = self.state(id) {
                    if done(&state) {
                        return state;
                    }
                }
                assert!(
                    started.elapsed() < WAIT_MAX,
                    "node {id} never reached the state: {:?}",
                    self.state(id)
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            let ids: Vec<u64> = self
                .members
                .keys()
                .copied()
                .filter(|&i| self.running(i))
                .collect();
            for id in ids {
                if let Some(running) = self.members.get_mut(&id).and_then(|m| m.running.take()) {
                    let _ = running.commands.send(Command::Crash);
                    let _ = running.thread.join();
                }
            }
        }
    }
}
